#!/usr/bin/env python3
"""bench/cuda_attn_peer.py - the GPU peer of bench-cuda's hstu_attn cases: Meta's
published Triton HSTU attention (meta-recsys/generative-recommenders,
generative_recommenders/ops/triton/triton_hstu_attention.py, `triton_hstu_mha`), forward +
backward on the same jagged shapes (B sequences of length L, 32768 tokens, H 4, D 128),
timed with CUDA events after its autotuning. grm's kernel is fp32 (SIMT); the peer runs in
bf16 (what its users run, on tensor cores) and in fp32 (tl.dot's TF32). The peer computes
SiLU(alpha q.k) / L without grm's position bias, so it does a little less work.

Run by bench_cuda.py when given --ref (or $GRM_HSTU_REF); by hand:
Usage: cuda_attn_peer.py --ref DIR [--lengths 1024,4096] [--dtypes bf16,fp32]
       [--min-block 64] [--grm-log bench-cuda.log]
DIR is a checkout of generative-recommenders (or $GRM_HSTU_REF); nothing of it is in grm.
With --grm-log, grm's lines of the same case are read from bench-cuda's output and the
speed ratio printed."""
import argparse
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default=os.environ.get("GRM_HSTU_REF"))
    ap.add_argument("--lengths", default="1024,4096")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--grm-log", default=None)
    ap.add_argument("--min-block", type=int, default=0,
                    help="autotune only configs with BLOCK_N at least this")
    args = ap.parse_args()
    if not args.ref or not os.path.isdir(args.ref):
        print("# cuda_attn_peer: SKIP no --ref checkout of generative-recommenders")
        return 0
    import torch
    if not torch.cuda.is_available():
        print("# cuda_attn_peer: SKIP torch sees no CUDA device")
        return 0
    sys.path.insert(0, args.ref)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from timing import cuda_ms
    import generative_recommenders.ops.triton.triton_hstu_attention as ref
    triton_hstu_mha = ref.triton_hstu_mha
    if args.min_block:
        # The reference autotunes over 30+ configs a kernel, compiled one after another at
        # every new length: minutes on a lent machine. --min-block keeps the configs whose
        # key tile (BLOCK_N) is at least that wide, the ones that win at L >= 1024 with
        # D 128, and says so.
        for kern in (ref._hstu_attn_fwd, ref._hstu_attn_bwd):
            keep = [c for c in kern.configs if c.kwargs.get("BLOCK_N", 0) >= args.min_block]
            print("# peer autotuning: %s keeps %d of %d configs (BLOCK_N >= %d)"
                  % (getattr(kern.fn, "__name__", "kernel"), len(keep), len(kern.configs),
                     args.min_block))
            kern.configs = keep or kern.configs

    grm = {}
    if args.grm_log:
        for line in open(args.grm_log):
            if line.startswith("bench=cuda case=hstu_attn_"):
                kv = dict(x.split("=", 1) for x in line.split() if "=" in x)
                grm[kv["case"]] = kv
    dev = torch.device("cuda:0")
    for L in map(int, args.lengths.split(",")):
        r = grm.get("hstu_attn_L%d" % L)
        # the shape of grm's case when its line is there (--quick uses fewer tokens)
        B = int(r["B"]) if r else max(1, 32768 // L)
        H = int(r["H"]) if r else 4
        D = int(r["D"]) if r else 128
        off = torch.arange(0, B + 1, device=dev, dtype=torch.int64) * L
        pairs = B * H * L * (L + 1) / 2
        f_fwd, f_bwd = 2 * pairs * 2 * D, 2 * pairs * 4 * D   # bench-cuda's count
        for name in args.dtypes.split(","):
            dt = torch.bfloat16 if name == "bf16" else torch.float32
            g = torch.Generator(device="cpu").manual_seed(L)
            q, k, v = (torch.rand(B * L, H, D, generator=g).sub(0.5).to(dev, dt)
                       .requires_grad_() for _ in range(3))
            do = torch.rand(B * L, H, D, generator=g).sub(0.5).to(dev, dt)

            def fwd():
                return triton_hstu_mha(N=L, alpha=1.0 / D ** 0.5, q=q, k=k, v=v,
                                       seq_offsets=off)

            def step():
                out = fwd()
                out.backward(do)

            step()                          # autotuning and compilation, untimed
            # The step (forward + backward) is the figure compared: a forward timed on its
            # own under no_grad came out longer than the step once (its own autotuning
            # key), so no backward is derived by subtraction.
            t_s = cuda_ms(torch, step, 5)
            with torch.no_grad():
                t_f = cuda_ms(torch, fwd, 5)
            line = ("bench=cuda case=hstu_attn_L%d peer=meta-hstu-triton-%s B=%d H=%d D=%d "
                    "peer_ms=%.3f peer_tflops=%.2f peer_fwd_only_ms=%.3f"
                    % (L, name, B, H, D, t_s, (f_fwd + f_bwd) / t_s / 1e9, t_f))
            if r:
                gt = float(r["fwd_ms"]) + float(r["bwd_ms"])
                line += " grm_ms=%.3f speedup=%.3f" % (gt, t_s / gt)
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

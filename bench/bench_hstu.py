#!/usr/bin/env python3
"""bench/bench_hstu.py - the dense-hstu layer (MTGRBoost §2, §5.2) against PyTorch.

Cases, each timed as forward + backward, median of --reps after a warm-up, same machine,
same thread count (torch.set_num_threads and grm's pool):
  layer        the whole HSTU layer on 32 jagged sequences with long-tailed lengths up to
               1024 (d = 256, 4 heads of 64, both relative attention biases, timestamps);
               grm: dense-hstu through its ops table (bench/bench-hstu --layer);
               peer: the layer in PyTorch the way the reference implementation runs it,
               padded to the longest sequence with a causal mask, fp32 autograd.
  proj         the layer's two projections alone (f1: d -> 4d, f2: d -> d), forward and
               backward on the same tokens, through the functions dense-hstu calls
               (bench/bench-hstu --proj); peer: the same two torch linear layers on the
               same unpadded rows. Its mfu is the GEMM part of the layer.
  attn_*       the attention alone on batches with the same sum of L^2/2 but different
               B * Lmax^2: grm's tiled jagged kernels should follow sum L^2/2, the padded
               peer B * Lmax^2.
mfu is the model flops (dense-hstu's flops op: projections + causal pairs) over the time,
against the SGEMM peak measured in the same run (bench/bench-hstu --sgemm).
Prints `bench=hstu case=... grm_ms=.. peer=torch peer_ms=.. ratio=.. mfu=..` (ratio =
peer_ms / grm_ms, > 1 means grm is faster), then a table.
"""
import argparse
import math
import os
import random
import re
import subprocess
import sys

from timing import median_ms


def long_tail_lengths(n, cap, seed):
    rng = random.Random(seed)
    out = [min(cap, max(1, int(rng.paretovariate(1.1) * 24))) for _ in range(n)]
    out[0] = cap                                    # the tail is always there
    return out


def driver(build, args):
    exe = os.path.join(build, "bench", "bench-hstu")
    env = dict(os.environ, GRM_TOP_BUILDDIR=build, OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    out = subprocess.run([exe] + args, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit("bench-hstu failed: " + out.stderr)
    return dict(re.findall(r"(\w+)=([^\s]+)", out.stdout))


def torch_layer(torch, lengths, D, H, reps, attn_only):
    dk = D // H
    B, Lmax = len(lengths), max(lengths)
    ml, nb = 1024, 32
    g = torch.Generator().manual_seed(1)
    valid = torch.zeros(B, Lmax, dtype=torch.bool)
    for b, L in enumerate(lengths):
        valid[b, :L] = True
    times = torch.arange(Lmax).view(1, Lmax).expand(B, Lmax) * 60
    i = torch.arange(Lmax).view(Lmax, 1)
    j = torch.arange(Lmax).view(1, Lmax)
    causal = (j <= i).view(1, 1, Lmax, Lmax) & valid.view(B, 1, 1, Lmax)
    pos_idx = (i - j).clamp(0, ml - 1)
    rab_pos = (torch.randn(H, ml, generator=g) * 0.02).requires_grad_(True)
    rab_time = (torch.randn(H, nb, generator=g) * 0.02).requires_grad_(True)
    P, HV = H * 4 * dk, H * dk
    W1 = (torch.randn(P, D, generator=g) / math.sqrt(D)).requires_grad_(True)
    b1 = torch.zeros(P, requires_grad=True)
    W2 = (torch.randn(D, HV, generator=g) / math.sqrt(HV)).requires_grad_(True)
    b2 = torch.zeros(D, requires_grad=True)
    x = torch.randn(B, Lmax, D, generator=g).requires_grad_(True)
    qkv = [torch.randn(B, H, Lmax, dk, generator=g).requires_grad_(True) for _ in range(3)]
    dy = torch.randn(B, Lmax, D, generator=g)
    dO = torch.randn(B, H, Lmax, dk, generator=g)
    F = torch.nn.functional

    def attention(q, k, v):
        S = q @ k.transpose(-1, -2) + rab_pos[:, pos_idx].unsqueeze(0)
        dt = (times.unsqueeze(2) - times.unsqueeze(1)).abs().clamp(min=1)
        tb = (torch.log(dt.double()) / 0.301).floor().long().clamp(max=nb - 1)
        S = S + rab_time[:, tb].permute(1, 0, 2, 3)
        A = F.silu(S) / ml * causal
        return A @ v

    def step():
        if attn_only:
            attention(*qkv).backward(dO)
            return
        xn = F.layer_norm(x, (D,), eps=1e-6)
        h = F.silu(xn @ W1.T + b1)
        u, v, q, k = torch.split(h, [HV, HV, HV, HV], dim=-1)
        sh = lambda t: t.reshape(B, Lmax, H, dk).transpose(1, 2)
        O = attention(sh(q), sh(k), sh(v)).transpose(1, 2).reshape(B, Lmax, HV)
        y = x + (F.layer_norm(O, (HV,), eps=1e-6) * u) @ W2.T + b2
        y.backward(dy)

    return median_ms(step, reps)


def torch_proj(torch, N, D, reps):
    g = torch.Generator().manual_seed(2)
    f1, f2 = torch.nn.Linear(D, 4 * D), torch.nn.Linear(D, D)
    x = torch.randn(N, D, generator=g).requires_grad_(True)
    u = torch.randn(N, D, generator=g).requires_grad_(True)
    d1, d2 = torch.randn(N, 4 * D, generator=g), torch.randn(N, D, generator=g)

    def step():
        f1(x).backward(d1)
        f2(u).backward(d2)

    return median_ms(step, reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grmhost")
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    T = str(args.threads)
    peak = float(driver(args.build, ["--sgemm", "--threads", T])["sgemm_gflops"])
    print(f"# threads={args.threads} sgemm_peak_gflops={peak:.1f}")
    rows = []

    lengths = long_tail_lengths(32, 1024, 7)
    r = driver(args.build, ["--layer", "--threads", T, "--reps", str(args.reps),
                            "--dim", "256", "--heads", "4",
                            "--lengths", ",".join(map(str, lengths))])
    grm_ms = float(r["total_ms"])
    peer_ms = torch_layer(torch, lengths, 256, 4, args.reps, False)
    mfu = float(r["flops"]) / (grm_ms * 1e6) / peak
    sl2 = sum(L * (L + 1) / 2 for L in lengths)
    rows.append(("layer", grm_ms, peer_ms, mfu, sl2, len(lengths) * max(lengths) ** 2))
    print(f"bench=hstu case=layer seqs=32 tokens={r['tokens']} lmax={max(lengths)} d=256 "
          f"heads=4 fwd_ms={float(r['fwd_ms']):.2f} bwd_ms={float(r['bwd_ms']):.2f} "
          f"grm_ms={grm_ms:.2f} peer=torch peer_ms={peer_ms:.2f} ratio={peer_ms / grm_ms:.2f} "
          f"mfu={mfu:.3f}", flush=True)

    r = driver(args.build, ["--proj", "--threads", T, "--reps", str(args.reps),
                            "--dim", "256", "--heads", "4",
                            "--lengths", ",".join(map(str, lengths))])
    grm_ms = float(r["total_ms"])
    peer_ms = torch_proj(torch, int(r["tokens"]), 256, args.reps)
    mfu = float(r["flops"]) / (grm_ms * 1e6) / peak
    rows.append(("proj", grm_ms, peer_ms, mfu, sl2, len(lengths) * max(lengths) ** 2))
    print(f"bench=hstu case=proj seqs=32 tokens={r['tokens']} d=256 grm_ms={grm_ms:.2f} "
          f"peer=torch peer_ms={peer_ms:.2f} ratio={peer_ms / grm_ms:.2f} mfu={mfu:.3f}",
          flush=True)

    # equal sum L^2 / 2 (about 2^17), B * Lmax^2 from 1x to 12x
    batches = {
        "attn_1x512": [512],
        "attn_4x256": [256] * 4,
        "attn_16x128": [128] * 16,
        "attn_64x64": [64] * 64,
        "attn_1x500+12x32": [500] + [32] * 12,
    }
    for name, ls in batches.items():
        r = driver(args.build, ["--attn", "--threads", T, "--reps", str(args.reps), "--dim",
                                "256", "--heads", "4", "--lengths", ",".join(map(str, ls))])
        grm_ms = float(r["total_ms"])
        peer_ms = torch_layer(torch, ls, 256, 4, args.reps, True)
        mfu = float(r["flops"]) / (grm_ms * 1e6) / peak
        sl2 = sum(L * (L + 1) / 2 for L in ls)
        bl2 = len(ls) * max(ls) ** 2
        rows.append((name, grm_ms, peer_ms, mfu, sl2, bl2))
        print(f"bench=hstu case={name} seqs={len(ls)} tokens={r['tokens']} "
              f"sum_l2_half={sl2:.0f} b_lmax2={bl2} grm_ms={grm_ms:.2f} peer=torch "
              f"peer_ms={peer_ms:.2f} ratio={peer_ms / grm_ms:.2f} mfu={mfu:.3f}", flush=True)

    print()
    print(f"{'case':<20} {'sum L^2/2':>10} {'B*Lmax^2':>10} {'grm ms':>9} {'torch ms':>9} "
          f"{'ratio':>6} {'mfu':>6}")
    for name, g, p, m, sl2, bl2 in rows:
        print(f"{name:<20} {sl2:>10.0f} {bl2:>10} {g:>9.2f} {p:>9.2f} {p / g:>6.2f} {m:>6.3f}")


if __name__ == "__main__":
    main()

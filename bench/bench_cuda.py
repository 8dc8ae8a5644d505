#!/usr/bin/env python3
"""bench/bench_cuda.py - the CUDA kernels of kernels/ (DESIGN.md §8): runs the C driver
bench/bench-cuda (built by `make bench` when configure found CUDA) and prints its
`bench=cuda case=... key=value` lines, then a table. Peers measured in the same run by the
driver: cudaMemcpy device-to-device bandwidth (mbu of gather, scatter-add, pooling, segment
unique) and the device's fp32 SIMT peak (mfu of the HSTU attention). Without a CUDA build
or device it prints a SKIP line and exits 0. --quick runs smaller sizes. With a CUDA torch
importable, PyTorch on the same GPU is a second peer of the rows cases (index_select,
index_add_, embedding_bag); with --ref DIR (or $GRM_HSTU_REF), Meta's Triton HSTU attention
is the attention cases' peer (bench/cuda_attn_peer.py); with --hkv DIR (or $GRM_HKV_DIR), a
checkout of NVIDIA's HierarchicalKV, bench/bench-hkv-peer.cu is compiled with nvcc against it
and run right after bench-cuda: HKV on the hash cases' keys, sizes and calls, and a `peer=hkv`
ratio line a case (grm's keys/s over HKV's; above 1, grm is faster)."""
import argparse
import os
import subprocess
import sys


def torch_peers(rows_by_case, quick):
    """PyTorch on the same GPU, the same sizes as bench-cuda's rows cases: index_select
    (gather), index_add_ (scatter-add) and embedding_bag(mode="sum") over segments of 32
    (pool_sum). Prints one line a case with torch's time over grm's (speedup: above 1, grm
    is faster)."""
    try:
        import torch
    except ImportError:
        print("# bench_cuda: no torch peer (torch not importable)")
        return
    if not torch.cuda.is_available():
        print("# bench_cuda: no torch peer (torch sees no CUDA device)")
        return
    from timing import cuda_ms
    dev = torch.device("cuda:0")
    rows, n = (100000, 200000) if quick else (1000000, 2000000)
    g = torch.Generator(device="cpu").manual_seed(1)
    idx = torch.randint(0, rows, (n,), generator=g).to(dev)
    offsets = torch.arange(0, n, 32, device=dev)

    for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        for D in (64, 128, 512):
            table = torch.randn(rows, D, device=dev).to(dt)
            src = torch.randn(n, D, device=dev).to(dt)
            ops = {
                "gather": lambda: torch.index_select(table, 0, idx),
                "scatter_add": lambda: table.index_add_(0, idx, src),
                "pool_sum": lambda: torch.nn.functional.embedding_bag(
                    idx, table, offsets, mode="sum"),
            }
            for op, fn in ops.items():
                case = "%s_%s_d%d" % (op, name, D)
                ms = cuda_ms(torch, fn, 10)
                grm = rows_by_case.get(case)
                ratio = "" if grm is None else " grm_ms=%s speedup=%.2f" % (
                    grm["time_ms"], ms / float(grm["time_ms"]))
                print("bench=cuda case=%s peer=torch-%s torch_ms=%.3f%s" % (
                    case, torch.__version__, ms, ratio))
            del table, src


def hkv_peer(args, rows_by_case):
    """Compile bench-hkv-peer.cu against the HierarchicalKV checkout (header-only) with the
    nvcc that configure found, run it, and print HKV's lines and grm / HKV per case."""
    inc = os.path.join(args.hkv, "include")
    if not os.path.exists(os.path.join(inc, "merlin_hashtable.cuh")):
        print("# bench_cuda: no HKV peer (%s has no include/merlin_hashtable.cuh)" % args.hkv)
        return
    exe = os.path.join(args.build, "bench", "bench-hkv-peer")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench-hkv-peer.cu")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        cmd = [args.nvcc, "-std=c++17", "-O3", "-gencode", "arch=compute_90,code=sm_90",
               "-gencode", "arch=compute_80,code=sm_80", "-I", inc, src, "-o", exe]
        print("# bench_cuda: " + " ".join(cmd))
        sys.stdout.flush()
        if subprocess.run(cmd).returncode != 0:
            print("# bench_cuda: no HKV peer (bench-hkv-peer.cu did not compile)")
            return
    cmd = [exe] + (["quick"] if args.quick else [])
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout.splitlines():
        print(line)
        if not line.startswith("bench=cuda"):
            continue
        hkv = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        grm = rows_by_case.get(hkv["case"])
        if grm is None:
            continue
        ratios = " ".join("%s=%.2f" % (k.replace("_mkeys_s", "_ratio"),
                                       float(grm[k]) / float(hkv[k]))
                          for k in ("insert_mkeys_s", "find_mkeys_s", "find_values_mkeys_s",
                                    "assign_mkeys_s"))
        print("bench=cuda case=%s peer=hkv-ratio %s" % (hkv["case"], ratios))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grmhost", default=None)
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch peers")
    ap.add_argument("--ref", default=os.environ.get("GRM_HSTU_REF"),
                    help="checkout of meta-recsys/generative-recommenders: its Triton HSTU "
                         "attention is the attention cases' peer (cuda_attn_peer.py)")
    ap.add_argument("--ref-lengths", default="4096,1024")
    ap.add_argument("--hkv", default=os.environ.get("GRM_HKV_DIR"),
                    help="checkout of NVIDIA-Merlin/HierarchicalKV: its table is the hash "
                         "cases' peer (bench-hkv-peer.cu, compiled here with nvcc)")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    args = ap.parse_args()
    exe = os.path.join(args.build, "bench", "bench-cuda")
    if not os.path.exists(exe):
        print("# bench_cuda: SKIP %s not built (no CUDA toolkit at configure time)" % exe)
        return 0
    cmd = [exe] + (["quick"] if args.quick else [])
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rows = []
    for line in proc.stdout.splitlines():
        print(line)
        if line.startswith("bench=cuda"):
            rows.append(dict(kv.split("=", 1) for kv in line.split() if "=" in kv))
    sys.stdout.flush()
    if rows:
        print("%-28s %12s %12s %8s" % ("case", "GB/s|TF/s", "Mkeys/s", "mbu|mfu"))
        for r in rows:
            rate = r.get("gbps") or r.get("tier_gbps") or r.get("fwd_tflops", "")
            if "bwd_tflops" in r:
                rate = "%s/%s" % (r["fwd_tflops"], r["bwd_tflops"])
            keys = r.get("find_mkeys_s", "")
            if keys:
                keys = "%s/%s" % (r["insert_mkeys_s"], keys)
            print("%-28s %12s %12s %8s" % (r["case"], rate, keys,
                                             r.get("mbu") or r.get("mfu") or
                                             r.get("steps_s_ratio") or ""))
    if rows and args.hkv:
        hkv_peer(args, {r["case"]: r for r in rows if "find_mkeys_s" in r})
    if rows and not args.no_torch:
        torch_peers({r["case"]: r for r in rows if "time_ms" in r}, args.quick)
    if rows and args.ref:
        log = os.path.join(args.build, "bench", "bench-cuda.last.log")
        with open(log, "w") as f:
            f.write(proc.stdout)
        sys.stdout.flush()
        peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_attn_peer.py")
        subprocess.run([sys.executable, peer, "--ref", args.ref, "--grm-log", log,
                        "--lengths", args.ref_lengths, "--dtypes", "bf16", "--min-block", "64"])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

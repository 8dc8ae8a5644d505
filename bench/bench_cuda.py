#!/usr/bin/env python3
"""bench/bench_cuda.py - the CUDA kernels of kernels/ (DESIGN.md §8): runs the C driver
bench/bench-cuda (built by `make bench` when configure found CUDA) and prints its
`bench=cuda case=... key=value` lines, then a table. Peers measured in the same run by the
driver: cudaMemcpy device-to-device bandwidth (mbu of gather, scatter-add, pooling, segment
unique) and the device's fp32 SIMT peak (mfu of the HSTU attention). Without a CUDA build
or device it prints a SKIP line and exits 0. --quick runs smaller sizes."""
import argparse
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grmhost", default=None)
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--quick", action="store_true")
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
            rate = r.get("gbps") or r.get("fwd_tflops", "")
            if "bwd_tflops" in r:
                rate = "%s/%s" % (r["fwd_tflops"], r["bwd_tflops"])
            keys = r.get("find_mkeys_s", "")
            if keys:
                keys = "%s/%s" % (r["insert_mkeys_s"], keys)
            print("%-28s %12s %12s %8s" % (r["case"], rate, keys,
                                             r.get("mbu") or r.get("mfu") or ""))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench/bench_transform.py - the feature engine of transform-basic (RecIS §2.1 Feature
Engine, §2.2.2 operator fusion): does a pipeline of 256 declared transforms cost per byte of
input what a pipeline of 10 costs? (issue 4: it must cost less than 2x.)

bench/bench-transform (the C driver) builds synthetic columns from a fixed seed and drives
transform-basic through its ops table: fused10 = 10 transforms (3 hash, 2 mod, 3 bucketize,
2 cross over 8 columns), fused256 = 256 transforms (64 of each over 192 columns), and
unfused256 = the same 256, one instance per transform, chained. Per case:
  bench=transform case=fused256 transforms=256 cols=192 rows=R ns_per_byte=X
      peer=fused10 peer_ns_per_byte=Y ratio=X/Y
ratio for fused256 = per-byte cost of 256 / per-byte cost of 10 (target < 2; 1 = no
overhead per declared transform). For unfused256 the peer is fused256 and ratio =
unfused / fused (> 1: fusion wins).
"""
import argparse
import os
import subprocess
import sys


def run(driver, rows, threads, reps):
    out = subprocess.run([driver, "--rows", str(rows), "--threads", str(threads),
                          "--reps", str(reps)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_transform: {driver} failed ({out.returncode}): {out.stderr.strip()}")
    cases = {}
    for line in out.stdout.splitlines():
        kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "case" in kv:
            cases[kv["case"]] = kv
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grmhost", default=None)
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rows", default="4096,32768")
    args = ap.parse_args()

    driver = os.path.join(args.build, "bench", "bench-transform")
    if not os.path.exists(driver):
        sys.exit(f"bench_transform: {driver} not built; run `make bench` "
                 "(or make bench/bench-transform)")
    os.environ.setdefault("GRM_TOP_BUILDDIR", args.build)
    table = []
    for rows in (int(r) for r in args.rows.split(",")):
        c = run(driver, rows, args.threads, args.reps)
        f10, f256, u256 = c["fused10"], c["fused256"], c["unfused256"]
        x10, x256, xu = (float(f10["ns_per_byte"]), float(f256["ns_per_byte"]),
                         float(u256["ns_per_byte"]))
        print(f"bench=transform case=fused256 transforms={f256['transforms']} "
              f"cols={f256['cols']} rows={rows} threads={args.threads} "
              f"ms={f256['ms']} ns_per_byte={x256:.4f} peer=fused10 "
              f"peer_ns_per_byte={x10:.4f} ratio={x256 / x10:.3f}")
        print(f"bench=transform case=unfused256 transforms={u256['transforms']} "
              f"cols={u256['cols']} rows={rows} threads={args.threads} "
              f"ms={u256['ms']} ns_per_byte={xu:.4f} peer=fused256 "
              f"peer_ns_per_byte={x256:.4f} ratio={xu / x256:.3f}")
        table.append((rows, x10, x256, xu))
    print()
    print(f"{'rows':>7} {'10 fused ns/B':>14} {'256 fused ns/B':>15} {'256/10':>7} "
          f"{'256 unfused ns/B':>17} {'unfused/fused':>14}")
    for rows, x10, x256, xu in table:
        print(f"{rows:>7} {x10:>14.3f} {x256:>15.3f} {x256 / x10:>7.2f} {xu:>17.3f} "
              f"{xu / x256:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

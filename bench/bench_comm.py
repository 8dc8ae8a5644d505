#!/usr/bin/env python3
"""bench/bench_comm.py - communicator latency and bandwidth (DESIGN.md §8).

Runs bench/bench-comm under mpirun at 1, 2 and 4 ranks: allreduce (f32 sum) and alltoallv
(i64) through comm-mpi against the same call straight to MPI in the same process (peer=mpi,
the physical limit). When torch is importable, the same sizes through torch.distributed's
gloo backend (peer=gloo) give a second peer. ratio = peer time / grm time (> 1: grm is
faster). Prints `bench=comm case=... ranks=... bytes=... grm_us=... peer=... peer_us=...
ratio=...` lines, then a table. On a shared 2-core machine 4 ranks are oversubscribed:
compare ratios, not absolute times, and expect noise at the largest sizes.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time


def run_grm(build, mpirun, n, nsizes):
    flags = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    env = dict(os.environ, GRM_TOP_BUILDDIR=build)
    out = subprocess.run([mpirun] + flags + ["-n", str(n), os.path.join(build, "bench/bench-comm"),
                                             str(nsizes)],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"bench-comm at {n} ranks failed with status {out.returncode}")
    rows = []
    for line in out.stdout.splitlines():
        if line.startswith("bench=comm"):
            rows.append(dict(kv.split("=", 1) for kv in line.split()))
    return rows


def gloo_worker(rank, n, port, sizes, q):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=n)

    def timed(fn, iters):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            ts.append(dt.item())
        ts.sort()
        return ts[len(ts) // 2] * 1e6

    res = {}
    for elems in sizes:
        iters = 20 if elems >= 262144 else 200
        buf = torch.zeros(elems, dtype=torch.float32)
        res[("allreduce", elems * 4)] = timed(lambda: dist.all_reduce(buf), iters)
        per = max(elems // n, 1)
        send = torch.zeros(per * n, dtype=torch.int64)
        recv = torch.zeros(per * n, dtype=torch.int64)
        try:
            res[("alltoallv", per * n * 8)] = timed(
                lambda: dist.all_to_all_single(recv, send, [per] * n, [per] * n), iters)
        except RuntimeError:
            pass
    if rank == 0:
        q.put(res)
    dist.destroy_process_group()


def run_gloo(n, sizes):
    try:
        import torch.multiprocessing as mp
    except ImportError:
        return None
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=gloo_worker, args=(r, n, port, sizes, q)) for r in range(n)]
    for p in procs:
        p.start()
    try:
        res = q.get(timeout=600)
    finally:
        for p in procs:
            p.join(timeout=60)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grmhost", default=None)
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--sizes", type=int, default=4, help="how many of 16, 4K, 256K, 2M elements")
    ap.add_argument("--no-gloo", action="store_true")
    a = ap.parse_args()
    mpirun = os.environ.get("MPIRUN") or shutil.which("mpirun")
    if not mpirun or not os.path.exists(os.path.join(a.build, "bench/bench-comm")):
        print("# bench_comm: SKIP no mpirun or bench/bench-comm not built (configure found no MPI)")
        return 0
    sizes = [16, 4096, 262144, 2097152][: a.sizes]
    table = []
    for n in [int(x) for x in a.ranks.split(",")]:
        rows = run_grm(a.build, mpirun, n, a.sizes)
        for r in rows:
            print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)
            table.append((r["case"], n, int(r["bytes"]), float(r["grm_us"]), "mpi",
                          float(r["peer_us"])))
        gloo = None if a.no_gloo or n == 1 else run_gloo(n, sizes)
        if gloo is None and not a.no_gloo and n > 1:
            print("# bench_comm: peer gloo skipped (no torch)")
        for r in rows:
            key = (r["case"], int(r["bytes"]))
            if gloo and key in gloo:
                g, p = float(r["grm_us"]), gloo[key]
                print(f"bench=comm case={r['case']} ranks={n} dtype={r['dtype']} "
                      f"bytes={r['bytes']} grm_us={g:.2f} peer=gloo peer_us={p:.2f} "
                      f"ratio={p / g:.3f}", flush=True)
                table.append((r["case"], n, int(r["bytes"]), g, "gloo", p))
    print()
    print(f"{'case':<10} {'ranks':>5} {'bytes':>10} {'grm us':>10} {'peer':>5} "
          f"{'peer us':>10} {'ratio':>6}")
    for c, n, b, g, peer, p in table:
        print(f"{c:<10} {n:>5} {b:>10} {g:>10.2f} {peer:>5} {p:>10.2f} {p / g:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench/bench_tiered.py - emb-dynamic's tiered mode (a RAM cache over a backing file,
issue 20) against the same store with every row in memory (DESIGN.md §8: the peer measured
in the same run), on three id streams: Zipf(1.05) over 100K ids, ML-100K's items in each
user's time order, Amazon Beauty's items in sequence order (both from $GRM_DATA_DIR; a
missing data set is skipped with its reason). For each stream: cache budgets of 5, 10, 25
and 50 % of the rows the stream touches, and cache_bytes = auto (marked `auto`), in
alternated rounds (mem, 5 %, mem, 10 %, mem, ..., auto, mem, again); each tiered run's
ratio is to the mean of the in-memory runs just before and after it, and each number is the
median over the rounds with the spread (max - min) / median.

The loop (bench/bench-tiered.c): per batch of 1024 ids, lookup with INSERT of the unique
ids, an Adam update of the same rows (dim 64), the next batch's rows prefetched meanwhile by
one thread kept for the run (as the trainer's data thread), --epochs passes (default 3). Printed: ids/s and the ratio to in-memory, the cache's hit rate (rows
read from the file or created count as misses; first touches are misses at every size),
the lookups' hit rate (a prefetched row is a hit: its read was hidden), bytes read from
and written to the backing file. The backing file lives on the disk of --dir (default: a temporary
directory under the build); a file that fits in RAM stays in the page cache, so this
measures the store's own cost (syscalls, copies, checksums, eviction), not the device's.

Peers not run: FBGEMM's SSD table (SSDTableBatchedEmbeddingBags) needs fbgemm-gpu's CUDA
build, and TorchRec's key-value tables need fbgemm-gpu too; neither runs on this CPU-only
machine."""
import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

B = 1024
DIM = 64
PCTS = (5, 10, 25, 50)
ROW_BYTES = 40 + 4 * DIM + 8 * DIM + 32   # record (meta, row, Adam state) + 2 key slots


def zipf_stream(n_ids=100000, n_batches=300, s=1.05, seed=7):
    import numpy as np
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, n_ids + 1, dtype=np.float64)
    p = ranks ** -s
    p /= p.sum()
    ids = rng.choice(n_ids, size=n_batches * B, p=p)
    return [int(x) * 40503 % n_ids + 1 for x in ids]


def zstd_lines(path):
    out = subprocess.run(["zstd", "-dc", path], check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def ml100k_stream(data):
    rows = [l.split("\t") for l in zstd_lines(os.path.join(data, "ml-100k", "u.data.zst"))]
    rows.sort(key=lambda r: (int(r[0]), int(r[3])))
    return [int(r[1]) for r in rows]


def beauty_stream(data):
    ids = []
    for line in zstd_lines(os.path.join(data, "amazon-beauty", "Beauty.txt.zst")):
        ids.extend(int(x) for x in line.split()[1:])
    return ids


def write_stream(path, ids):
    nb = len(ids) // B
    with open(path, "wb") as f:
        f.write(struct.pack("<qq", nb, B))
        f.write(struct.pack("<%dq" % (nb * B), *ids[:nb * B]))
    return len(set(ids[:nb * B]))


def parse(line):
    return dict(p.split("=", 1) for p in line.split() if "=" in p)


def cold_case(driver, path, back, env, args):
    """The backing file out of the page cache (BT_COLD: bench-tiered's data thread syncs it
    and drops its pages before each prefetch, as for a file far larger than the RAM): the
    prefetch's reads go to the disk, one pread a row against one io_uring submission a chunk
    of 64 ids (emb-dynamic's backing_io). Alternated; medians of the rounds."""
    res = {"pread": [], "io_uring": []}
    for _ in range(args.rounds):
        for io in ("pread", "io_uring"):
            e = dict(env, BT_COLD="1", BT_BACKING_IO=io)
            out = subprocess.run([driver, path, str(DIM), "auto", back, "3"], env=e,
                                 capture_output=True, text=True)
            if out.returncode != 0:
                print("bench=tiered case=ml100k-auto-cold io=%s SKIP %s" % (
                    io, (out.stderr.strip().splitlines() or ["failed"])[-1]))
                return
            res[io].append(parse(out.stdout.strip().splitlines()[-1]))
    pre = {io: statistics.median(float(r["prefetch_s"]) for r in rs) for io, rs in res.items()}
    loop = {io: statistics.median(float(r["seconds"]) for r in rs) for io, rs in res.items()}
    for io in ("pread", "io_uring"):
        print("bench=tiered case=ml100k-auto-cold io=%s epochs=3 prefetched=%s prefetch_s=%.3f "
              "loop_s=%.3f peer=pread prefetch_speedup=%.2f loop_speedup=%.2f" % (
                  io, res[io][-1]["prefetched"], pre[io], loop[io],
                  pre["pread"] / pre[io], loop["pread"] / loop[io]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grmhost", default=None)
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default=None, help="where the backing files go")
    ap.add_argument("--epochs", type=int, default=10,
                    help="passes over each stream (training makes several; the first "
                         "pass's first touches are misses at every cache size, and auto "
                         "profiles and grows its cache during the first passes)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    src = os.environ.get("GRM_TOP_SRCDIR",
                         os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    data = os.environ.get("GRM_DATA_DIR", os.path.join(src, "..", "shared", "data"))
    driver = os.path.join(build, "bench", "bench-tiered")
    if not os.path.exists(driver):
        subprocess.run(["make", "-C", build, "bench/bench-tiered"], check=True,
                       stdout=subprocess.DEVNULL)
    # one BLAS thread, as grmhost train sets (core/train.c): an OpenBLAS worker left to
    # spin in sched_yield took the cycles of the SCHED_IDLE data thread, so the tiered runs
    # waited for their prefetch
    env = dict(os.environ, GRM_TOP_BUILDDIR=build, GRM_TOP_SRCDIR=src, OPENBLAS_NUM_THREADS="1")
    streams = [("zipf", zipf_stream)]
    for name, fn in (("ml100k", ml100k_stream), ("beauty", beauty_stream)):
        streams.append((name, lambda fn=fn: fn(data)))
    table = []
    with tempfile.TemporaryDirectory(dir=args.dir or build) as tmp:
        back = os.path.join(tmp, "backing")
        os.makedirs(back)
        for name, fn in streams:
            try:
                ids = fn()
            except (OSError, subprocess.CalledProcessError, ImportError) as e:
                print("bench=tiered case=%s SKIP %s" % (name, str(e).splitlines()[0]))
                continue
            path = os.path.join(tmp, name + ".ids")
            distinct = write_stream(path, ids)
            modes = ["mem"] + [str(max(1, distinct * p // 100) * ROW_BYTES) for p in PCTS]
            modes.append("auto")
            labels = ["mem"] + ["%d%%" % p for p in PCTS] + ["auto"]
            # Each tiered run sits between two in-memory runs, and its ratio is to their
            # mean: on a shared machine whose speed drifts 20-30% within a minute, the ratio
            # of a pair is steadier than the ratio of the medians.
            runs = {m: [] for m in modes}
            ratios = {m: [] for m in modes[1:]}
            run = lambda m: parse(subprocess.run(
                [driver, path, str(DIM), m, back, str(args.epochs)], env=env, check=True,
                capture_output=True, text=True).stdout.strip().splitlines()[-1])
            for _ in range(args.rounds):
                before = run("mem")
                runs["mem"].append(before)
                for m in modes[1:]:
                    r = run(m)
                    after = run("mem")
                    runs[m].append(r)
                    runs["mem"].append(after)
                    ref = (float(before["ids_per_s"]) + float(after["ids_per_s"])) / 2
                    ratios[m].append(float(r["ids_per_s"]) / ref)
                    before = after
            med = {}
            for m in modes:
                rates = sorted(float(r["ids_per_s"]) for r in runs[m])
                mid = statistics.median(rates)
                rs = sorted(ratios.get(m, [1.0]))
                rmid = statistics.median(rs)
                med[m] = (mid, (rates[-1] - rates[0]) / mid, runs[m][-1], rmid,
                          (rs[-1] - rs[0]) / rmid)
            if name == "ml100k":
                cold_case(driver, path, back, env, args)
            base = med["mem"][0]
            for m, label in zip(modes, labels):
                rate, spread, r, ratio, rspread = med[m]
                pct = 100.0 * int(r["cache_rows"]) / distinct if m != "mem" else 100.0
                line = ("bench=tiered case=%s-%s rows=%d cache_rows=%s cache_pct=%.1f "
                        "ids_per_s=%.0f spread=%.0f%% peer=mem peer_ids_per_s=%.0f "
                        "ratio=%.3f ratio_spread=%.0f%% hit_rate=%s lookup_hit_rate=%s "
                        "bytes_read=%s bytes_written=%s" % (
                            name, label, distinct, r["cache_rows"], pct, rate, 100 * spread,
                            base, ratio, 100 * rspread, r["hit_rate"], r["lookup_hit_rate"],
                            r["bytes_read"], r["bytes_written"]))
                print(line)
                table.append((name, label, distinct, int(r["cache_rows"]), pct, rate,
                              100 * rspread, ratio, float(r["hit_rate"]),
                              int(r["bytes_read"])))
    print()
    print("%-7s %-5s %7s %9s %6s %10s %6s %6s %6s %12s" % (
        "stream", "cache", "rows", "cache_rows", "pct", "Mids/s", "rspread", "ratio", "hit",
        "MB read"))
    for name, label, rows, crow, pct, rate, spread, ratio, hit, br in table:
        print("%-7s %-5s %7d %9d %6.1f %10.3f %5.0f%% %6.3f %6.3f %12.1f" % (
            name, label, rows, crow, pct, rate / 1e6, spread, ratio, hit, br / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench/bench_tiered.py - emb-dynamic's tiered mode (a RAM cache over a backing file,
issue 20) against the same store with every row in memory (DESIGN.md §8: the peer measured
in the same run), on three id streams: Zipf(1.05) over 100K ids, ML-100K's items in each
user's time order, Amazon Beauty's items in sequence order (both from $GRM_DATA_DIR; a
missing data set is skipped with its reason). For each stream: cache budgets of 5, 10, 25,
50, 75 and 90 % of the rows the stream touches under LRU, 50 and 90 % under LFU too
(--lfu), and cache_bytes = auto (marked `auto`), in alternated rounds (mem, 5 %, mem, 10 %,
mem, ..., auto, mem, again); each tiered run's ratio is to the mean of the in-memory runs
just before and after it, and each number is the median over the rounds with the spread
(max - min) / median.

The loop (bench/bench-tiered.c): per batch of 1024 ids, lookup with INSERT of the unique
ids, an Adam update of the same rows (dim 64), the next batch's rows prefetched meanwhile by
one thread kept for the run (as the trainer's data thread), --epochs passes over the same
stream (default 10). Printed: ids/s and the ratio to in-memory, the cache's hit rate (rows
read from the file or created count as misses; first touches are misses at every size),
the lookups' hit rate (a prefetched row is a hit: its read was hidden), bytes read from
and written to the backing file, and the time of the checkpoint export after the loop
(every row of both tiers, sorted by id) against the in-memory store's. On the Zipf stream,
the same export by rows (case zipf-export, from the page cache and, -cold, from the file
dropped from it before each pass): a range of every tensor in turn, as ckpt-grm 2.0 saves,
against a tensor at a time, as 1.0 did, with the bytes each read; and its restore into a
fresh store (case zipf-import): a range of each tensor in turn, as ckpt-grm's
load_rows_interleaved hands a 2.0 file over (ABI 1.13), against a tensor at a time, as
load_rows does, with the bytes each read and wrote. The backing file
lives on the disk of --dir (default: a temporary directory under the build); a file that
fits in RAM stays in the page cache, so this measures the store's own cost (syscalls,
copies, checksums, eviction), not the device's.

Peers not run: FBGEMM's SSD table (SSDTableBatchedEmbeddingBags) needs fbgemm-gpu's CUDA
build, and TorchRec's key-value tables need fbgemm-gpu too; neither runs on this CPU-only
machine. Checked on the CPU wheel bench/setup-venv.sh installs
(fbgemm-gpu-nightly-cpu 2026.10.16): it ships fbgemm_gpu/tbe/ssd/training.py, whose
constructor calls torch.cuda.current_device() and makes CUDA streams for its eviction and
copies, but none of its 19 shared objects holds the C++ classes that table builds on
(EmbeddingRocksDBWrapper, DramKVEmbeddingCacheWrapper: no such string in any of them)."""
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
PCTS = (5, 10, 25, 50, 75, 90)
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


def export_case(driver, path, back, env, args, name, cache_bytes):
    """A checkpoint's export by rows (ABI 1.10, tensor_rows) of the table after one pass,
    from the backing file dropped from the page cache (BT_COLD, as for a file far larger
    than the RAM) and from the page cache: a range of every tensor in turn, as ckpt-grm 2.0
    saves, against every range of one tensor before the next, as 1.0 did (the peer), both
    in each run; the speedup is the median of the runs' ratios. Then the restore of that
    export into a fresh store (load_rows), in the file's order of a 2.0 file (ABI 1.13)
    against a tensor at a time (the peer), likewise."""
    for cold in ("1", ""):
        runs = []
        for _ in range(args.rounds + 1):
            e = dict(env, BT_COLD=cold) if cold else env
            out = subprocess.run([driver, path, str(DIM), cache_bytes, back, "1"], env=e,
                                 capture_output=True, text=True)
            if out.returncode != 0:
                print("bench=tiered case=%s-export SKIP %s" % (
                    name, (out.stderr.strip().splitlines() or ["failed"])[-1]))
                return
            runs.append(parse(out.stdout.strip().splitlines()[-1]))
        ratios = [float(r["tensor_export_s"]) / float(r["rows_export_s"]) for r in runs]
        print("bench=tiered case=%s-export%s rows=%s rows_export_s=%.4f "
              "rows_export_bytes_read=%s peer=by-tensor peer_rows_export_s=%.4f "
              "peer_bytes_read=%s speedup=%.2f speedup_range=%.2f-%.2f" % (
                  name, "-cold" if cold else "", runs[-1]["rows"],
                  statistics.median(float(r["rows_export_s"]) for r in runs),
                  runs[-1]["rows_export_bytes_read"],
                  statistics.median(float(r["tensor_export_s"]) for r in runs),
                  runs[-1]["tensor_export_bytes_read"], statistics.median(ratios),
                  min(ratios), max(ratios)))
        # the restore of that export into a fresh store: a range of each tensor in turn, as
        # ckpt-grm's load_rows_interleaved hands a 2.0 file over (ABI 1.13), against a
        # tensor at a time, as load_rows does (the peer); both end with an fdatasync
        ratios = [float(r["tensor_import_s"]) / float(r["rows_import_s"]) for r in runs]
        print("bench=tiered case=%s-import%s rows=%s rows_import_s=%.4f "
              "rows_import_bytes_read=%s rows_import_bytes_written=%s peer=by-tensor "
              "peer_import_s=%.4f peer_bytes_read=%s peer_bytes_written=%s speedup=%.2f "
              "speedup_range=%.2f-%.2f" % (
                  name, "-cold" if cold else "", runs[-1]["rows"],
                  statistics.median(float(r["rows_import_s"]) for r in runs),
                  runs[-1]["rows_import_bytes_read"], runs[-1]["rows_import_bytes_written"],
                  statistics.median(float(r["tensor_import_s"]) for r in runs),
                  runs[-1]["tensor_import_bytes_read"], runs[-1]["tensor_import_bytes_written"],
                  statistics.median(ratios), min(ratios), max(ratios)))


def trainer_case(build, src, env, rounds, pcts):
    """The goal measured where a user meets it: `grmhost train` on synthetic-tiered.ini
    (data from `grmhost generate`, as the INI says; 107,743 item rows of dim 64 with Adam)
    at caches of pcts % of the rows and with cache_bytes = auto (the cache that reaches a 0.9
    hit rate of the profiled re-references), against the same run with every row in memory,
    alternated (mem, 5 %, mem, 10 %, ..., auto, mem, again; each tiered run's ratio is to the
    mean of the in-memory runs beside it; medians over the rounds). samples_per_s is the
    trainer's (its loop only); the cache hit rate is 1 - (rows read from the backing file +
    rows created) / lookups, and the bytes read from the backing file, from the store's
    summary."""
    import json
    import re
    g = os.path.join(build, "grmhost")
    ini = os.path.join(src, "share", "pipelines", "synthetic-tiered.ini")
    rows = 107743
    with tempfile.TemporaryDirectory(dir=build) as tmp:
        data = os.path.join(tmp, "tiered.tsv")
        subprocess.run([g, "generate", "--users", "20000", "--items", "400000", "--clusters",
                        "200", "--seed", "3", "--out", data], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def run(mode):
            shutil.rmtree(os.path.join(tmp, "checkpoints"), ignore_errors=True)
            shutil.rmtree(os.path.join(tmp, "back"), ignore_errors=True)
            os.makedirs(os.path.join(tmp, "back"))
            sets = ["--set", "reader.path=" + data, "--set", "train.eval_every=0"]
            if mode == "mem":
                sets += ["--set", "embedding.backing=", "--set", "embedding.cache_bytes=",
                         "--set", "embedding.evict=none"]
            else:
                cb = "auto" if mode == "auto" else str(rows * mode // 100 * ROW_BYTES)
                sets += ["--set", "embedding.backing=back", "--set", "embedding.cache_bytes=" + cb]
            mo = os.path.join(tmp, "m.jsonl")
            out = subprocess.run([g, "train", "--fresh", "--metrics-out", mo] + sets + [ini],
                                 cwd=tmp, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError((out.stderr.strip().splitlines() or ["failed"])[-1])
            sps = None
            with open(mo) as f:
                for line in f:
                    m = json.loads(line)
                    if m.get("split") == "train" and m.get("name") == "samples_per_s":
                        sps = float(m["value"])
            hit, budget, mb = None, None, 0.0
            a = re.search(r"(\d+) rows \(.*?\), (\d+) lookups", out.stderr)
            b = re.search(r"cache \d+ of (\d+) rows \(budget (\d+)\), (\d+) fetched.*?"
                          r"(\d+) bytes read", out.stderr)
            if a and b:
                hit = 1 - (int(b.group(3)) + int(b.group(1))) / int(a.group(2))
                budget = int(b.group(2))
                mb = int(b.group(4)) / 1e6
            return sps, hit, budget, mb

        modes = list(pcts) + ["auto"]
        res = {m: [] for m in modes}
        ratios = {m: [] for m in modes}
        mems = []
        try:
            for _ in range(rounds):
                before = run("mem")
                mems.append(before)
                for m in modes:
                    r = run(m)
                    after = run("mem")
                    mems.append(after)
                    res[m].append(r)
                    ratios[m].append(r[0] / ((before[0] + after[0]) / 2))
                    before = after
        except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
            print("bench=tiered case=trainer-synthetic SKIP %s" % e)
            return
        ms = statistics.median(m[0] for m in mems)
        print("bench=tiered case=trainer-synthetic-mem rows=%d samples_per_s=%.0f rounds=%d" % (
            rows, ms, rounds))
        for m in modes:
            label = "auto" if m == "auto" else "%d%%" % m
            last = res[m][-1]
            print("bench=tiered case=trainer-synthetic-%s rows=%d cache_rows=%s cache_pct=%.1f "
                  "hit_rate=%.3f mb_read=%.0f samples_per_s=%.0f peer=mem peer_samples_per_s=%.0f "
                  "ratio=%.3f ratio_min=%.3f ratio_max=%.3f rounds=%d" % (
                      label, rows, last[2], 100.0 * (last[2] or 0) / rows,
                      last[1] if last[1] is not None else float("nan"),
                      statistics.median(r[3] for r in res[m]),
                      statistics.median(r[0] for r in res[m]), ms,
                      statistics.median(ratios[m]), min(ratios[m]), max(ratios[m]), rounds))


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
    ap.add_argument("--lfu", default="50,90",
                    help="cache sizes (%% of the rows) also run with evict = lfu ('' for none)")
    ap.add_argument("--threads1", default="75,90",
                    help="cache sizes (%% of the rows) run again, with auto, on a pool of one "
                         "thread, the data thread having the other core ('' for none)")
    ap.add_argument("--streams", default="zipf,ml100k,beauty",
                    help="the id streams of the store's loop ('' for none: the trainer only)")
    ap.add_argument("--trainer-rounds", type=int, default=2,
                    help="alternated rounds of grmhost train on synthetic-tiered.ini, each "
                         "cache size and auto against in memory (0: none)")
    ap.add_argument("--trainer-pcts", default="5,10,25,50",
                    help="cache sizes (%% of the item rows) of the grmhost train runs")
    args = ap.parse_args()
    args.threads1 = [int(x) for x in args.threads1.split(",") if x]
    args.lfu_pcts = {int(x) for x in args.lfu.split(",") if x}
    build = os.path.abspath(args.build)
    src = os.environ.get("GRM_TOP_SRCDIR",
                         os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    data = os.environ.get("GRM_DATA_DIR", os.path.join(src, "..", "shared", "data"))
    driver = os.path.join(build, "bench", "bench-tiered")
    # always through make: the driver reads emb-dynamic's own structures (its counters), so
    # one built before the plugin's last change reads them wrong
    subprocess.run(["make", "-C", build, "bench/bench-tiered"], check=True,
                   stdout=subprocess.DEVNULL)
    # one BLAS thread, as grmhost train sets (core/train.c): an OpenBLAS worker left to
    # spin in sched_yield took the cycles of the SCHED_IDLE data thread, so the tiered runs
    # waited for their prefetch
    env = dict(os.environ, GRM_TOP_BUILDDIR=build, GRM_TOP_SRCDIR=src, OPENBLAS_NUM_THREADS="1")
    streams = [("zipf", zipf_stream)]
    for name, fn in (("ml100k", ml100k_stream), ("beauty", beauty_stream)):
        streams.append((name, lambda fn=fn: fn(data)))
    want = [x for x in args.streams.split(",") if x]
    streams = [st for st in streams if st[0] in want]
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
            # (cache_bytes, evict policy, label, pool threads): every size under LRU, the
            # default; LFU beside it at 50 % and 90 %, where the policy decides what a
            # cyclic tail costs. The harness's pool has 2 threads, both of this machine's
            # cores, so the data thread (SCHED_IDLE, as the trainer's) prefetches only in
            # what the loop leaves idle; --threads1 runs the sizes near the goal's 0.9 hit
            # rate again with a pool of 1, the data thread then having a core of its own,
            # as on a machine with a core to spare for it.
            modes = [("mem", "lru", "mem", 2)]
            for p in PCTS:
                cb = str(max(1, distinct * p // 100) * ROW_BYTES)
                modes.append((cb, "lru", "%d%%" % p, 2))
                if p in args.lfu_pcts:
                    modes.append((cb, "lfu", "%d%%-lfu" % p, 2))
            modes.append(("auto", "lru", "auto", 2))
            if args.threads1:
                modes.append(("mem", "lru", "mem", 1))
                for p in args.threads1:
                    cb = str(max(1, distinct * p // 100) * ROW_BYTES)
                    modes.append((cb, "lru", "%d%%" % p, 1))
                modes.append(("auto", "lru", "auto", 1))
            peer = lambda m: ("mem", "lru", "mem", m[3])
            # Each tiered run sits between two in-memory runs (same pool), and its ratio is
            # to their mean: on a shared machine whose speed drifts 20-30% within a minute,
            # the ratio of a pair is steadier than the ratio of the medians.
            runs = {m: [] for m in modes}
            tiered = [m for m in modes if m[0] != "mem"]
            ratios = {m: [] for m in tiered}
            xratios = {m: [] for m in tiered}
            run = lambda m: parse(subprocess.run(
                [driver, path, str(DIM), m[0], back, str(args.epochs)],
                env=dict(env, BT_EVICT=m[1], BT_THREADS=str(m[3])), check=True,
                capture_output=True, text=True).stdout.strip().splitlines()[-1])
            for _ in range(args.rounds):
                before = None
                for m in tiered:
                    if before is None or before[0] != peer(m):
                        before = (peer(m), run(peer(m)))
                        runs[peer(m)].append(before[1])
                    r = run(m)
                    after = run(peer(m))
                    runs[m].append(r)
                    runs[peer(m)].append(after)
                    b = before[1]
                    ref = (float(b["ids_per_s"]) + float(after["ids_per_s"])) / 2
                    ratios[m].append(float(r["ids_per_s"]) / ref)
                    xref = (float(b["export_s"]) + float(after["export_s"])) / 2
                    xratios[m].append(float(r["export_s"]) / xref)
                    before = (peer(m), after)
            med = {}
            for m in modes:
                rates = sorted(float(r["ids_per_s"]) for r in runs[m])
                mid = statistics.median(rates)
                rs = sorted(ratios.get(m, [1.0]))
                rmid = statistics.median(rs)
                med[m] = (mid, (rates[-1] - rates[0]) / mid, runs[m][-1], rmid,
                          (rs[-1] - rs[0]) / rmid, statistics.median(xratios.get(m, [1.0])),
                          statistics.median(float(r["export_s"]) for r in runs[m]),
                          statistics.median(float(r["rows_export_s"]) for r in runs[m]))
            if name == "ml100k":
                cold_case(driver, path, back, env, args)
            if name == "zipf":
                export_case(driver, path, back, env, args, name,
                            str(max(1, distinct * 10 // 100) * ROW_BYTES))
            for m in modes:
                rate, spread, r, ratio, rspread, xratio, xs, rxs = med[m]
                base, xbase, rxbase = med[peer(m)][0], med[peer(m)][6], med[peer(m)][7]
                label = m[2] + ("" if m[3] == 2 else "-pool%d" % m[3])
                pct = 100.0 * int(r["cache_rows"]) / distinct if m[0] != "mem" else 100.0
                line = ("bench=tiered case=%s-%s evict=%s threads=%d rows=%d cache_rows=%s "
                        "cache_pct=%.1f ids_per_s=%.0f spread=%.0f%% peer=mem "
                        "peer_ids_per_s=%.0f ratio=%.3f ratio_spread=%.0f%% hit_rate=%s "
                        "lookup_hit_rate=%s bytes_read=%s bytes_written=%s wait_s=%s "
                        "export_s=%.4f peer_export_s=%.4f export_ratio=%.2f "
                        "rows_export_s=%.4f peer_rows_export_s=%.4f" % (
                            name, label, m[1], m[3], distinct, r["cache_rows"], pct, rate,
                            100 * spread, base, ratio, 100 * rspread, r["hit_rate"],
                            r["lookup_hit_rate"], r["bytes_read"], r["bytes_written"],
                            r["wait_s"], xs, xbase, xratio, rxs, rxbase))
                print(line)
                table.append((name, label, distinct, int(r["cache_rows"]), pct, rate,
                              100 * rspread, ratio, float(r["hit_rate"]),
                              int(r["bytes_read"]), xratio))
    if args.trainer_rounds > 0:
        trainer_case(build, src, env, args.trainer_rounds,
                     [int(x) for x in args.trainer_pcts.split(",") if x])
    print()
    print("%-7s %-13s %7s %9s %6s %10s %6s %6s %6s %12s %7s" % (
        "stream", "cache", "rows", "cache_rows", "pct", "Mids/s", "rspread", "ratio", "hit",
        "MB read", "export"))
    for name, label, rows, crow, pct, rate, spread, ratio, hit, br, xr in table:
        print("%-7s %-13s %7d %9d %6.1f %10.3f %5.0f%% %6.3f %6.3f %12.1f %6.2fx" % (
            name, label, rows, crow, pct, rate / 1e6, spread, ratio, hit, br / 1e6, xr))
    return 0


if __name__ == "__main__":
    sys.exit(main())

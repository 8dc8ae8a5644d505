#!/usr/bin/env python3
"""bench/bench_read.py - read throughput of reader-grmcol (RecIS §2.2.1 ColumnIO) against
two peers measured in the same run, on MovieLens 100K and Amazon Beauty from GRM_DATA_DIR:

- reader-text on the same data (the shipped .zst text, parsed to the same columns);
- zstd decompressing the same bytes: every decoded chunk payload of the grmcol file
  concatenated, measured in-process by the zstd CLI's own benchmark (`zstd -bL -i2`, one
  thread, same level L; its decompression MB/s), so no process start-up is counted. It is
  the cost of decompression alone, to which reader-grmcol adds reading, checksums, CSR
  checks and chunk assembly (and from which it gains per-column frames of like values).

Each reader case is the best of --repeat full reads through bench/bench-read (the plugin
loaded as a pipeline's [reader] is). Throughput: rows/s and uncompressed MB/s (bytes of
the columns in memory: values + offsets, 1 MB = 1e6 bytes). reader-grmcol runs with
prefetch 0 (decoding in the caller) and prefetch 4 (libuv's pool, UV_THREADPOOL_SIZE
threads). Prints `bench=read case=... ratio=...` lines (DESIGN.md §8), then a table.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

DATASETS = [
    # name, file under GRM_DATA_DIR, reader-text format, columns
    ("ml100k", "ml-100k/u.data.zst", "tsv", "user:i64,item:i64,rating:f32,ts:i64"),
    ("beauty", "amazon-beauty/Beauty.txt.zst", "ssv", "user:i64,items:list_i64"),
]


def run_reader(driver, plugins, repeat, plugin, kv):
    out = subprocess.run([driver, "--plugins", plugins, "--repeat", str(repeat), plugin] + kv,
                         check=True, capture_output=True, text=True).stdout
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", out)}


def zstd_decompress_mbs(path, level):
    """Decompression MB/s of zstd's in-process benchmark on path at `level`."""
    out = subprocess.run(["zstd", f"-b{level}", "-i2", "-q", path], check=True,
                         capture_output=True, text=True)
    last = (out.stdout + out.stderr).replace("\r", "\n").strip().splitlines()[-1]
    speeds = re.findall(r"([0-9.]+) MB/s", last)
    return float(speeds[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grmhost", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--rows-per-group", type=int, default=16384)
    ap.add_argument("--level", type=int, default=3)
    args = ap.parse_args()

    data_dir = os.environ.get("GRM_DATA_DIR", "")
    driver = os.path.join(args.build, "bench", "bench-read")
    plugins = os.path.join(args.build, "plugins")
    if not os.path.exists(driver):
        print(f"# bench_read: {driver} missing; run `make bench` (it builds the driver)")
        return 1
    if shutil.which("zstd") is None:
        print("# bench_read: the zstd CLI is missing; install package zstd")
        return 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="grm-bench-read-") as tmp:
        for name, rel, fmt, cols in DATASETS:
            src = os.path.join(data_dir, rel)
            if not data_dir or not os.path.exists(src):
                print(f"# bench=read case={name} skipped: {src} not found (set GRM_DATA_DIR)")
                continue
            col = os.path.join(tmp, name + ".grmcol")
            subprocess.run([args.grmhost, "convert", "-q", "--format", fmt, "--columns", cols,
                            "--rows-per-group", str(args.rows_per_group), "--level",
                            str(args.level), src, col], check=True)
            text = run_reader(driver, plugins, args.repeat, "reader-text",
                              [f"path={src}", f"format={fmt}", f"columns={cols}"])
            res = {}
            for pf in (0, 4):
                res[pf] = run_reader(driver, plugins, args.repeat, "reader-grmcol",
                                     [f"path={col}", f"prefetch={pf}"])
            # zstd decompressing the same payload bytes, compressed at the same level.
            payload = os.path.join(tmp, name + ".payload")
            subprocess.run([driver, "--dump", col, payload], check=True)
            zmb = zstd_decompress_mbs(payload, args.level)
            zs = os.path.getsize(payload) / zmb / 1e6
            ubytes = res[0]["bytes"]
            nrows = res[0]["rows"]
            assert text["rows"] == nrows, (text["rows"], nrows)
            for pf in (0, 4):
                r = res[pf]
                rps = nrows / r["best_s"]
                mbs = ubytes / r["best_s"] / 1e6
                trps = nrows / text["best_s"]
                case = f"{name}-p{pf}"
                print(f"bench=read case={case} rows={int(nrows)} grm_ms={r['best_s']*1e3:.2f} "
                      f"rows_per_s={rps:.0f} mb_per_s={mbs:.1f} peer=reader-text "
                      f"peer_ms={text['best_s']*1e3:.2f} peer_rows_per_s={trps:.0f} "
                      f"ratio={rps/trps:.2f}")
                print(f"bench=read case={case}-vs-zstd rows={int(nrows)} mb_per_s={mbs:.1f} "
                      f"peer=zstd-b peer_ms={zs*1e3:.2f} peer_mb_per_s={zmb:.1f} "
                      f"ratio={mbs/zmb:.2f}")
                rows.append((case, int(nrows), r["best_s"], rps, mbs, trps, zmb))
            sys.stdout.flush()
    print()
    print(f"{'case':<12} {'rows':>8} {'grm ms':>9} {'rows/s':>12} {'MB/s':>8} "
          f"{'text rows/s':>12} {'x text':>7} {'zstd MB/s':>10} {'x zstd':>7}")
    for case, n, s, rps, mbs, trps, zmb in rows:
        print(f"{case:<12} {n:>8} {s*1e3:>9.2f} {rps:>12.0f} {mbs:>8.1f} {trps:>12.0f} "
              f"{rps/trps:>7.2f} {zmb:>10.1f} {mbs/zmb:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench/bench_emb.py - embedding store throughput (DESIGN.md §8): emb-dynamic (MTGRBoost
§4.1 hash store) against emb-static (a dense array: the physical limit of a lookup) and
abseil's absl::flat_hash_map holding the same rows, on one Zipf(1.05) id stream, at key
structure load factors 0.5 and 0.75 and dims 16, 64, 128, all in one run, and on a stream
over the 8,192 hottest rows alone (cases named -hot8192) at load 0.75, dims 16 and 64.

Drivers: bench/bench-emb (C, built by `make bench`) measures emb-dynamic (impl cpu: the
grouped-prefetch loop; impl ref: the plain per-id loop; both on one thread) and emb-static;
bench/bench-emb-absl.cc is compiled here
with g++ against libabsl-dev (one thread). Without abseil, std::unordered_map is used and
the peer is named `unordered_map`.

Output: one `bench=emb case=... ids_per_s=... peer=... ratio=...` line per comparison, then
a table. Each rate is the median of --rounds alternated rounds (this build, --baseline's
build, the peer), with the spread (max - min) / median beside it. ratio = emb-dynamic / peer
(above 1: emb-dynamic faster), the median over the rounds of the two rates measured in that
round, and ratio_range its least and greatest round."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

DIMS = (16, 64, 128)
LOAD_FACTORS = (0.5, 0.75)
# A stream over the 8,192 hottest rows only: a working set that fits in L2 (512 KiB of rows
# at dim 16), where per-id instructions and not memory set the rate.
HOT = 8192
HOT_CASES = ((0.75, 16), (0.75, 64))

UNORDERED = r'''
#include <unordered_map>
namespace absl { template <class K, class V> struct flat_hash_map : std::unordered_map<K, V> {}; }
'''


def build_peer(src, build, tmp):
    """Compile the abseil peer; fall back to std::unordered_map. Returns (exe, name)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        return None, None
    exe = os.path.join(tmp, "bench-emb-absl")
    inc = ["-I" + os.path.join(src, "sdk", "include"), "-I" + build]
    code = os.path.join(src, "bench", "bench-emb-absl.cc")
    try:
        libs = subprocess.run(["pkg-config", "--libs", "absl_flat_hash_map", "absl_hash"],
                              capture_output=True, text=True, check=True).stdout.split()
        subprocess.run([cxx, "-O2", "-std=c++17", *inc, code, "-o", exe, *libs, "-lm"],
                       check=True, capture_output=True, text=True)
        return exe, "absl"
    except (subprocess.CalledProcessError, FileNotFoundError):
        pass
    # std::unordered_map stand-in: a shim header named like abseil's.
    shim = os.path.join(tmp, "absl", "container")
    os.makedirs(shim, exist_ok=True)
    with open(os.path.join(shim, "flat_hash_map.h"), "w") as f:
        f.write(UNORDERED)
    subprocess.run([cxx, "-O2", "-std=c++17", "-I" + tmp, *inc, code, "-o", exe, "-lm"],
                   check=True)
    return exe, "unordered_map"


def parse(out):
    rows = {}
    for line in out.splitlines():
        kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
        if "store" in kv:
            rows[(kv["store"], kv["op"])] = kv
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grmhost", default=None)
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternated rounds per case; medians are reported")
    ap.add_argument("--baseline", default=None,
                    help="a build directory whose plugins/ hold an earlier emb-dynamic: it "
                         "runs in the same rounds as emb-dynamic-cpu@base, for before/after")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    src = os.environ.get("GRM_TOP_SRCDIR",
                         os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    driver = os.path.join(build, "bench", "bench-emb")
    if not os.path.exists(driver):
        subprocess.run(["make", "-C", build, "bench/bench-emb"], check=True,
                       stdout=subprocess.DEVNULL)
    env = dict(os.environ, GRM_TOP_BUILDDIR=build, GRM_TOP_SRCDIR=src)
    base_env = None
    if args.baseline:
        base_env = dict(env, GRM_TOP_BUILDDIR=os.path.abspath(args.baseline))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        peer_exe, peer = build_peer(src, build, tmp)
        cases = [(lf, d, 0) for lf in LOAD_FACTORS for d in DIMS]
        cases += [(lf, d, HOT) for lf, d in HOT_CASES]
        for lf, d, hot in cases:
            ids = os.path.join(tmp, "ids.bin")
            runs = {}
            # Alternated rounds: this build, the baseline build, the peer, again; each
            # number is the median of its rounds.
            for _ in range(args.rounds):
                cmd = [driver, str(d), str(lf), ids, str(args.seconds), str(hot)]
                outs = [("", subprocess.run(cmd, env=env, check=True, capture_output=True,
                                            text=True).stdout)]
                if base_env:
                    outs.append(("@base", subprocess.run(cmd, env=base_env, check=True,
                                                         capture_output=True,
                                                         text=True).stdout))
                if peer_exe:
                    outs.append(("", subprocess.run([peer_exe] + cmd[1:-1], check=True,
                                                    capture_output=True,
                                                    text=True).stdout))
                for tag, o in outs:
                    for (store, op), kv in parse(o).items():
                        if store.startswith("emb-static") and tag:
                            continue
                        runs.setdefault((store + tag, op), []).append(kv)
            r = {}
            for key, kvs in runs.items():
                rates = [float(kv["ids_per_s"]) for kv in kvs]     # in round order
                kvs = sorted(kvs, key=lambda kv: float(kv["ids_per_s"]))
                med = dict(kvs[len(kvs) // 2])
                lo, hi = float(kvs[0]["ids_per_s"]), float(kvs[-1]["ids_per_s"])
                med["spread"] = "%.0f%%" % (100.0 * (hi - lo) / float(med["ids_per_s"]))
                med["rounds"] = rates
                r[key] = med
            results.append((lf, d, hot, r))

    def rate(r, store, op):
        kv = r.get((store, op))
        return float(kv["ids_per_s"]) if kv else None

    def paired(r, a, b):
        """The ratio of each round's two rates (measured a few seconds apart), as
        (median, min, max): the VM's other tenants move whole rounds up and down together,
        which a ratio of the two medians (taken from different rounds) does not cancel."""
        x = sorted(p / q for p, q in zip(r[a]["rounds"], r[b]["rounds"]) if q > 0)
        return (x[len(x) // 2], x[0], x[-1]) if x else None

    table = []
    for lf, d, hot, r in results:
        lfg = r[("emb-dynamic-cpu", "lookup")]["lf"]
        # Everything runs on one thread (bench-emb starts a one-thread pool): find is a
        # lookup of present ids, find-or-insert a training lookup (GRM_EMB_INSERT) of
        # present ids, insert a training lookup of fresh ids; the peer's lookup is find.
        comps = [
            ("lookup", "emb-dynamic-cpu", "lookup", "emb-static-cpu", "lookup"),
            ("lookup", "emb-dynamic-cpu", "lookup", peer, "lookup"),
            ("train_lookup", "emb-dynamic-cpu", "train_lookup", peer, "lookup"),
            ("insert", "emb-dynamic-cpu", "insert", peer, "insert"),
            ("lookup-ref", "emb-dynamic-ref", "lookup", peer, "lookup"),
            ("insert-ref", "emb-dynamic-ref", "insert", peer, "insert"),
        ]
        if args.baseline:
            comps += [
                ("lookup-base", "emb-dynamic-cpu@base", "lookup", peer, "lookup"),
                ("train_lookup-base", "emb-dynamic-cpu@base", "train_lookup", peer, "lookup"),
                ("insert-base", "emb-dynamic-cpu@base", "insert", peer, "insert"),
                ("lookup-gain", "emb-dynamic-cpu", "lookup", "emb-dynamic-cpu@base", "lookup"),
                ("train_lookup-gain", "emb-dynamic-cpu", "train_lookup",
                 "emb-dynamic-cpu@base", "train_lookup"),
                ("insert-gain", "emb-dynamic-cpu", "insert", "emb-dynamic-cpu@base",
                 "insert"),
            ]
        for case, store, op, pstore, pop in comps:
            a, b = rate(r, store, op), rate(r, pstore, pop) if pstore else None
            if a is None:
                continue
            pr = paired(r, (store, op), (pstore, pop)) if b else None
            ratio = "%.3f" % pr[0] if pr else "n/a"
            ratio_range = "%.2f-%.2f" % (pr[1], pr[2]) if pr else "n/a"
            sa = r[(store, op)]["spread"]
            sb = r[(pstore, pop)]["spread"] if b else "n/a"
            tag = "%s-d%d-lf%.2f%s" % (case, d, lf, "-hot%d" % hot if hot else "")
            distinct = r[("emb-dynamic-cpu", "lookup")].get("distinct", "n/a")
            print("bench=emb case=%s store=%s lf=%s distinct=%s ids_per_s=%.0f spread=%s "
                  "peer=%s peer_ids_per_s=%s peer_spread=%s ratio=%s ratio_range=%s" % (
                      tag, store, lfg, distinct, a, sa, pstore or "none",
                      "%.0f" % b if b else "n/a", sb, ratio, ratio_range))
            table.append((case + ("-hot" if hot else ""), d, lfg, store, a, sa,
                          pstore or "none", b, sb, ratio, ratio_range))
    print()
    print("%-18s %4s %6s %-20s %8s %6s %-20s %8s %6s %7s %11s" % (
        "case", "dim", "lf", "store", "Mids/s", "spread", "peer", "Mids/s", "spread", "ratio",
        "range"))
    for case, d, lfg, store, a, sa, pstore, b, sb, ratio, ratio_range in table:
        print("%-18s %4d %6s %-20s %8.2f %6s %-20s %8s %6s %7s %11s" % (
            case, d, lfg, store, a / 1e6, sa, pstore, "%.2f" % (b / 1e6) if b else "n/a", sb,
            ratio, ratio_range))
    return 0


if __name__ == "__main__":
    sys.exit(main())

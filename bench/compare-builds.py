#!/usr/bin/env python3
"""bench/compare-builds.py - one build against another: is a change a slowdown?

Runs the same cases on two build trees, A (before) and B (after), in alternated rounds so
that a busy machine slows both alike, and prints the median of each and B/A:
  train   bench_train.py's grm run (the quick-start model, --steps 1000, samples/s: higher
          is better), each tree with its own bench_train.py (its INI names that build's
          plugins);
  hstu    bench-hstu --layer, bench_hstu.py's case layer_l200 (32 long-tailed jagged
          sequences capped at 200 tokens, d 256, 4 heads; ms per forward + backward: lower
          is better).
ratio is B's speed over A's (above 1: B is faster); spread is (max - min) / median over
the rounds. Each tree needs `make` and `make bench/bench-hstu` run in it.

Usage: compare-builds.py --a BUILD_BEFORE --b BUILD_AFTER [--rounds 7] [--steps 1000]
Prints one key=value line per case (DESIGN.md §8). Not run by `make bench` (bench/run.sh
runs bench_*): it compares two builds, which one tree cannot provide.
"""
import argparse
import importlib.util
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_hstu import driver, long_tail_lengths, med_spread   # noqa: E402


def tree_grm_run(tree):
    """The tree's own bench_train.grm_run (its INI names that build's plugins and keys),
    or this one's when the tree has none."""
    path = os.path.join(tree, "bench", "bench_train.py")
    if not os.path.exists(path):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_train.py")
    spec = importlib.util.spec_from_file_location("bench_train_" + str(abs(hash(tree))), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.grm_run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="build tree before the change")
    ap.add_argument("--b", required=True, help="build tree after the change")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=1000,
                    help="train steps per run (200, bench_train's, is too short to compare)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cases", default="train,hstu")
    args = ap.parse_args()
    cases = args.cases.split(",")
    trees = {"a": os.path.abspath(args.a), "b": os.path.abspath(args.b)}
    T = str(args.threads)
    lens = ",".join(map(str, long_tail_lengths(32, 200, 7)))
    res = {(c, k): [] for c in cases for k in trees}
    runs = {k: tree_grm_run(t) for k, t in trees.items()}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.csv")
        os.system(f"{trees['a']}/grmhost generate --seed 1 --out {data} > /dev/null")
        for r in range(args.rounds):
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            for k in order:
                if "train" in cases:
                    res[("train", k)].append(
                        runs[k](os.path.join(trees[k], "grmhost"), data, args.steps, args.threads,
                                tmp))
                if "hstu" in cases:
                    out = driver(trees[k], ["--layer", "--threads", T, "--reps", "5", "--dim",
                                            "256", "--heads", "4", "--lengths", lens])
                    res[("hstu", k)].append(float(out["total_ms"]))
    for c in cases:
        (am, asp), (bm, bsp) = med_spread(res[(c, "a")]), med_spread(res[(c, "b")])
        unit = "samples_per_s" if c == "train" else "ms"
        ratio = bm / am if c == "train" else am / bm
        print(f"bench=ab case={c} threads={args.threads} rounds={args.rounds} "
              f"steps={args.steps if c == 'train' else 0} a={trees['a']} b={trees['b']} a_{unit}={am:.2f} a_spread={asp:.2f} "
              f"b_{unit}={bm:.2f} b_spread={bsp:.2f} ratio={ratio:.3f}", flush=True)


if __name__ == "__main__":
    main()

#!/bin/sh
# bench/bench_dist.sh - core/dist.c: distributed embedding lookup + update (MTGRBoost §4.3
# two-stage ID dedup, TurboGR §4.2.1 hierarchical sparse parallelism) at 1, 2 and 4 ranks.
# The driver is tests/test-dist in bench mode (GRM_DIST_BENCH=FILE), run under mpirun with the
# comm-mpi plugin. Id streams: ML-100K (items of each user in time order, from u.data) and
# Amazon Beauty (the 5-core sequences), from $GRM_DATA_DIR; each step every rank looks up the
# last 50 items of 64 users (duplicates included) in a dim-64 emb-dynamic table and updates
# them. Per dedup setting (none, stage 1 only, stage 2 only, both; both with groups of 2) one
# line per case, counters per step summed over ranks, times of the slowest rank:
#   bench=dist case=ml100k ranks=N dedup=... ids_raw= ids_stage1= ids_sent= ids_stage2=
#     id_bytes= row_bytes= grad_bytes= sync_bytes= rounds= lookup_ms= update_ms= step_ms=
#     peer=none ratio=<none step_ms / this step_ms>
# then a short table. Timings on a 2-core shared machine with --oversubscribe are indicative.
set -u
build=${GRM_TOP_BUILDDIR:-.}
data=${GRM_DATA_DIR:-}
t="$build/tests/test-dist"
if [ ! -x "$t" ]; then
    (cd "$build" && make tests/test-dist >/dev/null 2>&1)
fi
if [ ! -x "$t" ]; then echo "# bench_dist: tests/test-dist not built; skipped"; exit 0; fi
if [ -z "$data" ] || [ ! -d "$data" ]; then
    echo "# bench_dist: GRM_DATA_DIR unset or missing; skipped"; exit 0
fi
if ! command -v zstd >/dev/null 2>&1; then echo "# bench_dist: no zstd; skipped"; exit 0; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-bench-dist-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
zstd -dc "$data/ml-100k/u.data.zst" | sort -k1,1n -k4,4n |
    awk '$1 != u { if (NR > 1) print line; u = $1; line = $2; next } { line = line " " $2 }
         END { print line }' >"$tmp/ml100k.seq"
zstd -dc "$data/amazon-beauty/Beauty.txt.zst" | cut -d' ' -f2- >"$tmp/beauty.seq"

export GRM_TOP_BUILDDIR="$build"
mpi=${MPIRUN:-$(command -v mpirun 2>/dev/null)}
so=$(ls "$build"/plugins/comm-mpi/.libs/comm-mpi.so 2>/dev/null)
flags="--oversubscribe"
[ "$(id -u)" -eq 0 ] && flags="--allow-run-as-root $flags"
for c in ml100k beauty; do
    for n in 1 2 4; do
        if [ -n "$mpi" ] && [ -n "$so" ]; then
            GRM_DIST_BENCH="$tmp/$c.seq" GRM_DIST_BENCH_CASE=$c \
                "$mpi" $flags -n $n "$t" 2>"$tmp/err" | tee -a "$tmp/out"
        elif [ $n -eq 1 ]; then
            GRM_TEST_COMM=comm-single GRM_DIST_BENCH="$tmp/$c.seq" GRM_DIST_BENCH_CASE=$c \
                "$t" 2>"$tmp/err" | tee -a "$tmp/out"
        else
            echo "# bench_dist: no mpirun or comm-mpi; $n ranks skipped"; continue
        fi
        [ -s "$tmp/err" ] && sed 's/^/# /' "$tmp/err" | tail -5
    done
done
echo "# case    ranks dedup           ids_raw ids_sent ids_stage2 id_KB  row_KB  step_ms"
awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
       printf "# %-8s %5s %-15s %7s %8s %10s %6.1f %7.1f %8s\n", v["case"], v["ranks"],
              v["dedup"], v["ids_raw"], v["ids_sent"], v["ids_stage2"], v["id_bytes"] / 1024,
              (v["row_bytes"] + v["grad_bytes"] + v["sync_bytes"]) / 1024, v["step_ms"] }' \
    "$tmp/out"

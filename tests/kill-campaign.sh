#!/bin/sh
# tests/kill-campaign.sh - kill -9 at random moments across a training run with early
# stopping, an evaluation every 5 steps and a checkpoint every step (issue 25): each run is
# resumed after every kill until it ends on its own, and must then end bitwise as the
# uninterrupted run: the same metrics file (wall-clock records aside), the same best.grm
# and final step-S.grm bytes (aside from the metrics file's size trainer.state records,
# which tests/ckpt-edit zeroes in both; `make check` builds it). Not part of `make check`
# (it takes minutes); from the build directory:
#   sh tests/kill-campaign.sh [KILLS [SEED]]
# KILLS (default 50) kills in all, over as many runs as it takes; SEED seeds the moments.
# Prints one line per run and a summary; exit 1 when any run ended differently.
set -u
: "${GRM_TOP_BUILDDIR:=$PWD}" "${GRM_TOP_SRCDIR:=$PWD}"
export GRM_TOP_BUILDDIR GRM_TOP_SRCDIR
kills=${1:-50}
seed=${2:-1}
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-campaign-XXXXXX")
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"

"$g" generate --users 300 --items 200 --clusters 6 --seed 9 --out "$tmp/ev.tsv" >/dev/null \
    || exit 1
ini() {   # $1 checkpoint dir
    printf '[pipeline]\nname = campaign\nthreads = 2\n'
    ini_retrieval_dynamic "$tmp/ev.tsv"
    cat <<EOI
[train]
batch_size = 64
steps = 400
log_every = 1
eval_every = 5
early_stop = 2
[checkpoint]
dir = $1
every = 1
keep = 2
EOI
}
# Two checkpoints hold the same bytes once trainer.state's record of the metrics file's size
# (GRM__ST_METRICS_AT: it counts the wall-clock records too) is zeroed in both.
same_ckpt() {
    "$GRM_TOP_BUILDDIR/tests/ckpt-edit" "$1" "$tmp/a.grm" set=trainer.state:8:0 \
        && "$GRM_TOP_BUILDDIR/tests/ckpt-edit" "$2" "$tmp/b.grm" set=trainer.state:8:0 \
        && cmp -s "$tmp/a.grm" "$tmp/b.grm"
}
stable() { grep -v '"name":"\(samples_per_s\|read_s\|read_maxrss_kb\)"' "$1"; }
ini "$tmp/ref" >"$tmp/ref.ini"
t0=$(date +%s.%N)
"$g" train -q --metrics-out "$tmp/ref.jsonl" "$tmp/ref.ini" >/dev/null 2>"$tmp/ref.err" \
    || { cat "$tmp/ref.err"; exit 1; }
dur=$(echo "$(date +%s.%N) $t0" | awk '{ printf "%.3f", $1 - $2 }')
stable "$tmp/ref.jsonl" >"$tmp/ref.stable"
final=$(ls "$tmp/ref" | grep '^step-' | sort | tail -1)
echo "# reference: $dur s, ended at $final; $(grep -c '"name":"loss"' "$tmp/ref.jsonl") steps," \
    "test hr@10 $(metric "$tmp/ref.jsonl" test hr@10)"

# a pseudo-random moment in [0, dur) seconds (awk's srand: reproducible per SEED)
moment() { awk -v s="$1" -v d="$dur" 'BEGIN { srand(s); printf "%.3f", rand() * d }'; }

done_kills=0 runs=0 bad=0 n=0
while [ $done_kills -lt "$kills" ]; do
    runs=$((runs + 1))
    d="$tmp/run$runs"
    ini "$d" >"$d.ini"
    k=0
    while :; do
        n=$((n + 1))
        "$g" train -q --metrics-out "$d.jsonl" "$d.ini" >/dev/null 2>>"$d.err" &
        pid=$!
        if [ $done_kills -lt "$kills" ]; then
            sleep "$(moment $((seed * 100003 + n)))"
            kill -9 $pid 2>/dev/null
        fi
        { wait $pid; } 2>/dev/null
        rc=$?
        pid=
        if [ $rc -eq 137 ]; then
            k=$((k + 1))
            done_kills=$((done_kills + 1))
            continue
        fi
        [ $rc -eq 0 ] || { echo "# run $runs: exit $rc"; tail -3 "$d.err"; bad=$((bad + 1)); }
        break
    done
    same=yes
    stable "$d.jsonl" >"$d.stable"
    cmp -s "$tmp/ref.stable" "$d.stable" || same="no (metrics)"
    for f in best.grm "$final"; do
        same_ckpt "$tmp/ref/$f" "$d/$f" || same="no ($f)"
    done
    echo "# run $runs: $k kills, then ended; bitwise as the uninterrupted run: $same"
    if [ "$same" != yes ]; then
        bad=$((bad + 1))
        diff "$tmp/ref.stable" "$d.stable" | head -6 | sed 's/^/#   /'
    fi
    rm -rf "$d"
done
echo "crash campaign: $done_kills kills over $runs runs, $bad ended differently"
[ $bad -eq 0 ]

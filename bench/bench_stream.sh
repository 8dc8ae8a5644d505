#!/bin/sh
# bench/bench_stream.sh - [train] input = stream against input = whole (issue 4, MTGRBoost §3:
# the input read beside training). A ranking pipeline (user and item embeddings, MLP, BCE)
# on ROWS rows of user,item,click made from `grmhost generate` events (TSV text, read by
# reader-text in chunks of 16384 rows), one epoch, three ways, alternated over REPS rounds:
#   stream     input = stream, prefetch = 2: reading, transforms and batch assembly on the
#              data thread beside training; only the shuffle buffer is read before step 1
#   in-memory  the same stream with --batches-in-memory: every batch read and assembled
#              before step 1 (the peer of the loop: a loop that never waits for data)
#   whole      input = whole: the whole input read, transformed and split before step 1
# Per case the medians over the rounds:
#   bench=stream case=rows-N mode=stream ms_per_step= peer=in-memory peer_ms= ratio=
#     slower_pct= hidden_pct= first_step_s= wall_s= maxrss_mb=
#   bench=stream case=rows-N mode=whole first_step_s= wall_s= maxrss_mb= peer=stream
#     ratio=<whole wall / stream wall> mem_ratio=<whole peak / stream peak>
# ms_per_step: loop time per step (the `profile:` line); first_step_s: seconds of reading,
# transforms and split before step 1 (metric read_s); wall_s: the whole run, evaluation of
# the held-out rows included; maxrss_mb: peak resident memory (VmHWM, sampled).
set -u
build=${GRM_TOP_BUILDDIR:-.}
src=${GRM_TOP_SRCDIR:-$(dirname "$0")/..}
g="$build/grmhost"
reps=${BENCH_STREAM_REPS:-3}
users=${BENCH_STREAM_USERS:-120000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-bench-stream-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/tap.sh"

"$g" generate --users "$users" --items 5000 --clusters 20 --seed 5 --out "$tmp/ev.tsv" \
    >/dev/null 2>&1 || { echo "# bench_stream: grmhost generate failed; skipped"; exit 0; }
awk -F'\t' 'NR > 1 { print $1 "," $2 "," ($2 % 3 == 0) }' "$tmp/ev.tsv" >"$tmp/rows.csv"
rm -f "$tmp/ev.tsv"
rows=$(wc -l <"$tmp/rows.csv")
mb=$(du -m "$tmp/rows.csv" | cut -f1)

ini() {   # INPUT -> the pipeline on stdout (tests/tap.sh's rows, at dim 32)
    echo "[pipeline]"
    echo "name = bench-stream"
    ini_rows "$tmp/rows.csv" |
        sed -e 's/^format = csv$/&\nchunk_rows = 16384/' -e 's/^dim = 8$/dim = 32/'
    cat <<EOI
[embedding]
plugin = emb-dynamic
[dense.0]
plugin = dense-mlp
dims = 128,64,1
[optimizer.sparse]
lr = 0.005
[optimizer.dense]
lr = 0.001
[train]
task = ranking
label_columns = click
input = $1
batch_size = 256
epochs = 1
log_every = 1000000
eval_every = 1000000
EOI
}
ini stream >"$tmp/stream.ini"
ini whole >"$tmp/whole.ini"
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
# one run: MODE ARGS...; appends ms/step, first-step s, wall s, peak MB
run() {
    mode=$1; shift
    start=$(date +%s.%N)
    "$g" train --fresh --profile --metrics-out "$tmp/m.jsonl" "$@" >/dev/null 2>"$tmp/err" &
    pid=$!
    peak=0
    while kill -0 $pid 2>/dev/null; do   # peak resident memory, sampled
        kb=$(awk '/^VmHWM/ { print $2 }' /proc/$pid/status 2>/dev/null)
        [ -n "$kb" ] && [ "$kb" -gt "$peak" ] && peak=$kb
        sleep 0.05
    done
    wait $pid || { echo "# bench_stream: $mode failed:"; sed 's/^/#   /' "$tmp/err" | tail -3; return 1; }
    end=$(date +%s.%N)
    sed -n 's/^profile: \([0-9]*\) steps, \([0-9.]*\) s in the training loop$/\1 \2/p' "$tmp/err" |
        awk '{ printf "%.4f\n", 1000 * $2 / $1 }' >>"$tmp/$mode.ms"
    metric "$tmp/m.jsonl" train read_s >>"$tmp/$mode.first"
    echo "$start $end" | awk '{ printf "%.3f\n", $2 - $1 }' >>"$tmp/$mode.wall"
    echo "$peak" | awk '{ printf "%.1f\n", $1 / 1024 }' >>"$tmp/$mode.mb"
    if [ "$mode" = stream ]; then
        sed -n 's/^  data work hidden behind compute: \([0-9.]*\)%.*/\1/p' "$tmp/err" >>"$tmp/hidden"
    fi
    steps=$(sed -n 's/^profile: \([0-9]*\) steps.*/\1/p' "$tmp/err")
}
steps=0
r=0
while [ $r -lt "$reps" ]; do
    run stream "$tmp/stream.ini" || exit 1
    run whole "$tmp/whole.ini" || exit 1
    run in-memory --batches-in-memory --max-steps "$steps" "$tmp/stream.ini" || exit 1
    r=$((r + 1))
done
for k in stream whole in-memory; do
    for q in ms first wall mb; do eval "${k%-*}_$q=\$(median <\"\$tmp/$k.$q\")"; done
done
hidden=$(median <"$tmp/hidden")
echo "# $rows rows ($mb MB of csv), $steps steps of 256, $reps rounds"
echo "# rounds stream ms/step: $(tr '\n' ' ' <"$tmp/stream.ms")| in-memory: $(tr '\n' ' ' <"$tmp/in-memory.ms")| whole: $(tr '\n' ' ' <"$tmp/whole.ms")"
awk -v c="rows-$rows" -v ms="$stream_ms" -v p="$in_ms" -v h="${hidden:-0}" -v f="$stream_first" \
    -v w="$stream_wall" -v m="$stream_mb" 'BEGIN {
    printf "bench=stream case=%s mode=stream ms_per_step=%.3f peer=in-memory peer_ms=%.3f " \
           "ratio=%.3f slower_pct=%.2f hidden_pct=%s first_step_s=%.3f wall_s=%.3f " \
           "maxrss_mb=%.1f\n", c, ms, p, p / ms, 100 * (ms - p) / p, h, f, w, m }'
awk -v c="rows-$rows" -v ms="$whole_ms" -v f="$whole_first" -v w="$whole_wall" -v m="$whole_mb" \
    -v sw="$stream_wall" -v sm="$stream_mb" 'BEGIN {
    printf "bench=stream case=%s mode=whole ms_per_step=%.3f first_step_s=%.3f wall_s=%.3f " \
           "maxrss_mb=%.1f peer=stream ratio=%.3f mem_ratio=%.2f\n", c, ms, f, w, m, w / sw,
           m / sm }'

#!/bin/sh
# bench/bench_pipeline.sh - does training wait for data? (issue 4, MTGRBoost §3 prefetch)
# The same steps of a pipeline trained three ways, alternated over REPS rounds:
#   prefetch   the shipped path: [train] prefetch = 2, a data thread assembles batches ahead
#   serial     prefetch = 0: each batch assembled on the trainer thread when it is needed
#   in-memory  --batches-in-memory: every batch assembled before step 1 (the peer: a loop that
#              never waits for data)
# Loop time per step is the median over the rounds of the `profile:` line of --profile
# (reading and transforms happen once, before the loop, and are reported beside it).
#   bench=pipeline case=<ini> mode=prefetch|serial ms_per_step=.. peer=in-memory
#     peer_ms=.. ratio=<peer_ms / ms> slower_pct=<(ms - peer_ms) / peer_ms * 100>
#     hidden_pct=<data work hidden behind compute> read_s=<reader + transforms, once>
# Target: prefetch within 5% of in-memory on the Beauty and ML-100K HSTU pipelines.
# Timings on a shared 2-core machine are noisy; read slower_pct beside its rounds.
set -u
build=${GRM_TOP_BUILDDIR:-.}
src=${GRM_TOP_SRCDIR:-.}
data=${GRM_DATA_DIR:-}
g="$build/grmhost"
reps=${BENCH_PIPELINE_REPS:-5}
if [ -z "$data" ] || [ ! -d "$data" ]; then
    echo "# bench_pipeline: GRM_DATA_DIR unset or missing; skipped"; exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-bench-pipeline-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# the pipeline with its data path made absolute, no checkpoints, no validation in the loop
# (and so no early stopping)
prep() {   # INI PREFETCH OUT
    sed -e "s|\${GRM_DATA_DIR:-\.\./data}|$data|" -e '/^\[checkpoint\]/,/^\[/{/^dir *=/d}' \
        -e 's/^eval_every *=.*/eval_every = 1000000/' -e '/^early_stop *=/d' "$1" \
        | awk -v pf="$2" '{ print } /^\[train\]/ { print "prefetch = " pf }' >"$3"
}
loop_ms() {   # ERRFILE -> ms per step of the loop
    sed -n 's/^profile: \([0-9]*\) steps, \([0-9.]*\) s in the training loop$/\1 \2/p' "$1" \
        | awk '{ printf "%.4f", 1000 * $2 / $1 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

status=0
# pipeline:steps (about 20 ms a step here: enough steps that a round is not noise)
for spec in ${BENCH_PIPELINE_CASES:-beauty-hstu:600 ml100k-hstu:400}; do
    ini=${spec%%:*}; steps=${spec#*:}
    f="$src/share/pipelines/$ini.ini"
    [ -f "$f" ] || { echo "# bench_pipeline: $ini.ini not in this tree; skipped"; continue; }
    prep "$f" 2 "$tmp/pf.ini"
    prep "$f" 0 "$tmp/serial.ini"
    : >"$tmp/prefetch.ms"; : >"$tmp/serial.ms"; : >"$tmp/in-memory.ms"; : >"$tmp/hidden"
    r=0
    while [ $r -lt "$reps" ]; do
        for mode in prefetch serial in-memory; do
            case $mode in
            prefetch) args="$tmp/pf.ini" ;;
            serial) args="$tmp/serial.ini" ;;
            in-memory) args="--batches-in-memory $tmp/pf.ini" ;;
            esac
            # shellcheck disable=SC2086
            "$g" train --fresh --max-steps "$steps" --profile $args >/dev/null 2>"$tmp/err"
            if [ $? -ne 0 ]; then
                echo "# bench_pipeline: $ini ($mode) failed:"; sed 's/^/#   /' "$tmp/err" | tail -3
                status=1; continue
            fi
            loop_ms "$tmp/err" >>"$tmp/$mode.ms"; echo >>"$tmp/$mode.ms"
            if [ $mode = prefetch ]; then
                sed -n 's/^  data work hidden behind compute: \([0-9.]*\)%.*/\1/p' "$tmp/err" \
                    >>"$tmp/hidden"
                sed -n 's/^  read+transform *\([0-9.]*\) .*/\1/p' "$tmp/err" >"$tmp/read"
            fi
        done
        r=$((r + 1))
    done
    peer=$(median <"$tmp/in-memory.ms")
    hidden=$(median <"$tmp/hidden")
    read_s=$(cat "$tmp/read" 2>/dev/null)
    for mode in prefetch serial; do
        ms=$(median <"$tmp/$mode.ms")
        [ -n "$ms" ] && [ -n "$peer" ] || continue
        awk -v c="$ini" -v m="$mode" -v ms="$ms" -v p="$peer" -v h="${hidden:-0}" \
            -v rd="${read_s:-0}" -v n="$steps" -v k="$reps" 'BEGIN {
            printf "bench=pipeline case=%s mode=%s steps=%d rounds=%d ms_per_step=%.3f " \
                   "peer=in-memory peer_ms=%.3f ratio=%.3f slower_pct=%.2f", c, m, n, k, ms, p,
                   p / ms, 100 * (ms - p) / p
            if (m == "prefetch") printf " hidden_pct=%s", h
            printf " read_s=%s\n", rd }'
    done
    echo "# $ini rounds (ms/step): prefetch $(tr '\n' ' ' <"$tmp/prefetch.ms")| serial $(tr '\n' ' ' <"$tmp/serial.ms")| in-memory $(tr '\n' ' ' <"$tmp/in-memory.ms")"
done
exit $status

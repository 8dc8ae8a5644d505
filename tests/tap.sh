# tests/tap.sh - shared TAP helpers for the shell tests, sourced after `set -u`.
#
# What a result means, the same here and in tests/tap.h (the C helper):
#   - one line per check, numbered 1, 2, ... by the helper (tap_n here), in the form
#     "ok N - DESCRIPTION" or "not ok N - DESCRIPTION"; DESCRIPTION is one line and carries
#     no '#' of its own (the driver reads "# ..." as a directive);
#   - "ok" means the check ran and held. Here the check's exit status says so (0 holds, the
#     shell's truth); in C, tap_ok's condition (non-zero holds, C's truth). A status that
#     is not a number counts as not ok, with a diagnostic line;
#   - a value the check needs but cannot find (a missing file, metric, fixture or line)
#     counts as not ok, never as ok or skipped: test -n it first, or give it a default
#     that fails the comparison (${hr:-0} > ${pop:-1});
#   - a check that cannot run because an optional dependency is absent (GPU, MPI, torch,
#     a data set, a tool) is "ok N - DESCRIPTION # SKIP REASON" (skip here, tap_skip in
#     C), and a program with nothing to run prints "1..0 # SKIP REASON" and exits 0
#     (skip_all here, tap_skip_all in C); a skip never stands in for a failure;
#   - the plan "1..N" counts every line, skipped ones included.
#
#   ok STATUS DESCRIPTION     print "ok N - ..." when STATUS is 0, else "not ok N - ..."
#   skip REASON DESCRIPTION   print "ok N - DESCRIPTION # SKIP REASON"
#   skip_all REASON           print "1..0 # SKIP REASON" and exit 0
#   metric FILE SPLIT NAME    the last value of a --metrics-out JSON-lines file
#   losses FILE               "step loss" per logged training step of such a file
#   same_curve F1 F2 TOL      the same logged steps, every loss within relative TOL (uses
#                             the caller's $tmp directory; prints the largest difference)
#   ini_reader_events TSV     INI: [reader] of a `grmhost generate` file (user, item, ts)
#   ini_events TSV            INI: that [reader] and the transform that makes one
#                             time-ordered item and ts sequence per user
#   ini_rows CSV              INI: [reader] of user,item,click rows, then [feature.user] and
#                             [feature.item] of dim 8 (the last section: lines may follow)
#   ini_history               INI: [feature.history] (last 10 items) and [feature.user], dim 16
#   same_metrics F1 F2        two --metrics-out files: every valid/test metric of F1 in F2,
#                             within 1e-7 relative (uses the caller's $tmp directory)
#   ini_mlp_softmax           INI: [dense.0] an MLP 32,16 and [head] sampled softmax over 64
#                             negatives (the last section: lines may follow)
#   ini_retrieval_dynamic TSV INI: ini_events TSV, ini_history, [embedding] emb-dynamic and
#                             ini_mlp_softmax (the last section: lines may follow)
#   dist_data                 $tmp/ev.tsv (`grmhost generate`, 300 users, 200 items, seed 9)
#                             and $tmp/rows.csv (user,item,click with click = item % 3 == 0)
#   ini_dist_ranking COMM DIR [ACC] [LR]   INI: a ranking run on rows.csv (emb-dynamic,
#                             MLP 16,1, batch 50, one epoch, accumulate ACC (1), dense lr LR
#                             (0.005)), checkpoints in DIR every 20 steps, [distributed] COMM
#   ini_dist_retrieval COMM   INI: 30 steps of retrieval on ev.tsv (history + user, sampled
#                             softmax without in-batch negatives), [distributed] COMM
#   mpi_or_skip FIRST LAST    several-rank tests: without $MPIRUN or a built comm-mpi, skip
#                             checks FIRST..LAST ("several ranks") and exit 0; otherwise
#                             set up `mpi N ARGS...`: $g (grmhost) under mpirun -n N
tap_n=0
ok() {
    tap_n=$((tap_n + 1))
    case "$1" in
    0) echo "ok $tap_n - $2" ;;
    '' | *[!0-9]*)
        echo "not ok $tap_n - $2"
        echo "# ok: status '$1' is not a number" ;;
    *) echo "not ok $tap_n - $2" ;;
    esac
}
skip() {
    tap_n=$((tap_n + 1))
    echo "ok $tap_n - $2 # SKIP $1"
}
skip_all() {
    echo "1..0 # SKIP $1"
    exit 0
}
metric() {
    grep "\"split\":\"$2\",\"name\":\"$3\"" "$1" | tail -1 | sed 's/.*"value":\([^}]*\)}/\1/'
}
losses() {
    grep '"split":"train","name":"loss"' "$1" \
        | sed 's/.*"step":\([0-9]*\).*"value":\([^}]*\)}/\1 \2/'
}
same_curve() {
    losses "$1" >"${tmp:?}/c1"; losses "$2" >"$tmp/c2"
    [ -s "$tmp/c1" ] && [ "$(wc -l <"$tmp/c1")" = "$(wc -l <"$tmp/c2")" ] || return 1
    paste -d' ' "$tmp/c1" "$tmp/c2" | awk -v tol="$3" '
        { n++; d = $2 - $4; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (d > md) md = d
          if ($1 != $3 || d > tol * m) { print "# step " $1 ": " $2 " vs step " $3 ": " $4; bad = 1 } }
        END { print "# " n " steps compared, largest difference " md + 0; exit bad }'
}
eval_metrics() {   # $1: jsonl file; its valid/test metrics as "split.name value", sorted
    grep -h '"split":"\(valid\|test\)"' "$1" |
        sed 's/.*"split":"\([a-z]*\)","name":"\([^"]*\)".*"value":\([^}]*\)}/\1.\2 \3/' | sort
}
same_metrics() {   # the logloss is summed per batch in float, and the batches may differ
    eval_metrics "$1" >"$tmp/m1"
    eval_metrics "$2" >"$tmp/m2"
    [ -s "$tmp/m1" ] && join "$tmp/m1" "$tmp/m2" | awk -v n="$(wc -l <"$tmp/m1")" '
        { c++; d = $2 - $3; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2
          if (d > 1e-7 * m + 1e-12) { print "# " $1 ": " $2 " vs " $3; bad = 1 } }
        END { print "# " c " metrics compared"; exit bad || c != n }'
}
ini_reader_events() {
    cat <<EOI
[reader]
plugin = reader-text
path = $1
format = tsv
header = true
columns = user:i64,item:i64,ts:i64
EOI
}
ini_events() {
    ini_reader_events "$1"
    cat <<EOI
[transform.sequences]
plugin = transform-basic
sequence_by = user
sequence_order = ts
sequence_columns = item,ts
EOI
}
ini_rows() {
    cat <<EOI
[reader]
plugin = reader-text
path = $1
format = csv
columns = user:i64,item:i64,click:i64
[feature.user]
source = user
dim = 8
[feature.item]
source = item
dim = 8
EOI
}
ini_history() {
    cat <<EOI
[feature.history]
source = item
table = item
dim = 16
window = 10
[feature.user]
source = user
dim = 16
EOI
}
ini_mlp_softmax() {
    cat <<EOI
[dense.0]
plugin = dense-mlp
dims = 32,16
[head]
plugin = head-sampled-softmax
negatives = 64
EOI
}
ini_retrieval_dynamic() {
    ini_events "$1"
    ini_history
    cat <<EOI
[embedding]
plugin = emb-dynamic
EOI
    ini_mlp_softmax
}
dist_data() {
    "$g" generate --users 300 --items 200 --clusters 6 --seed 9 --out "$tmp/ev.tsv" || return 1
    awk -F'\t' 'NR > 1 { print $1 "," $2 "," ($2 % 3 == 0) }' "$tmp/ev.tsv" >"$tmp/rows.csv"
}
ini_dist_ranking() {
    ini_rows "$tmp/rows.csv"
    cat <<EOI
[embedding]
plugin = emb-dynamic
[dense.0]
plugin = dense-mlp
dims = 16,1
[optimizer.sparse]
lr = 0.02
[optimizer.dense]
lr = ${4:-0.005}
[train]
task = ranking
label_columns = click
batch_size = 50
accumulate = ${3:-1}
epochs = 1
log_every = 1
[checkpoint]
dir = $2
every = 20
[distributed]
plugin = $1
EOI
}
ini_dist_retrieval() {
    ini_events "$tmp/ev.tsv"
    ini_history
    ini_mlp_softmax
    cat <<EOI
in_batch = false
[train]
time_column = ts
max_seq_len = 10
batch_size = 64
steps = 30
log_every = 1
[distributed]
plugin = $1
EOI
}
mpi_or_skip() {
    why=
    if [ -z "${MPIRUN:-}" ]; then
        why="no mpirun (MPIRUN unset)"
    elif ! ls "$GRM_TOP_BUILDDIR"/plugins/comm-mpi/.libs/comm-mpi.so >/dev/null 2>&1; then
        why="comm-mpi not built"
    fi
    if [ -n "$why" ]; then
        tap_n=$(($1 - 1))
        while [ "$tap_n" -lt "$2" ]; do skip "$why" "several ranks"; done
        exit 0
    fi
    mpi_flags="--oversubscribe"
    [ "$(id -u)" -eq 0 ] && mpi_flags="--allow-run-as-root $mpi_flags"
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"   # Open MPI's own init leaks
    export ASAN_OPTIONS
}
mpi() {   # bounded in time
    n=$1; shift
    timeout 300 "$MPIRUN" $mpi_flags -n "$n" "$g" "$@"
}

#!/bin/sh
# tests/test-train-stream.sh - [train] input = stream (issue 4, MTGRBoost §3): a ranking
# run reads, transforms and splits its input chunk by chunk on the data thread while it
# trains, drawing batches from a shuffle buffer. Checked: it learns; only the buffer is read
# before step 1; one epoch trains every training row exactly once, and training + held-out
# rows add up to the input; `grmhost eval` finds the same held-out rows; a run stopped and
# resumed repeats the uninterrupted curve exactly; accumulate = 2 of half batches matches
# whole batches; a bad row past the first chunks fails the run with its file and line;
# retrieval and an unsized static table are refused with the fix. On 2 ranks (skipped
# without mpirun/comm-mpi): the same held-out rows as 1 rank, every row trained once, and a
# bad row on one rank stops both with the reason. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-tstream-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..13"

dist_data || exit 1
total=$(wc -l <"$tmp/rows.csv")
echo "# $total rows of user,item,click (click = item % 3 == 0)"

stream_ini() {   # $1 comm, $2 checkpoint dir, [$3 accumulate, $4 batch_size, $5 buffer]
    ini_dist_ranking "$1" "$2" "${3:-1}" |
        sed -e 's/^format = csv$/&\nchunk_rows = 256/' \
            -e "s/^task = ranking\$/&\ninput = stream\nshuffle_buffer = ${5:-400}/" \
            -e "s/^batch_size = 50\$/batch_size = ${4:-50}/" -e 's/^epochs = 1$/epochs = 2/'
}
run() {   # $1 name, then grmhost arguments; output in $tmp/$1.out
    name=$1
    shift
    "$g" "$@" >"$tmp/$name.out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$tmp/$name.out" | tail -6
    return $rc
}
samples_sum() {   # training samples summed over the logged steps of the first $2 steps
    grep '"split":"train","name":"samples"' "$1" |
        sed 's/.*"step":\([0-9]*\).*"value":\([^}]*\)}/\1 \2/' |
        awk -v last="$2" '$1 <= last { s += $2 } END { print s + 0 }'
}
final() {   # $1.final: the valid and test metrics of the last evaluation in $1
    last=$(grep '"split":"test"' "$1" | tail -1 | sed 's/.*"step":\([0-9]*\),.*/\1/')
    grep "\"step\":$last,\"split\":\"\(valid\|test\)\"" "$1" >"$1.final"
}

stream_ini comm-single "$tmp/ck" >"$tmp/s.ini"
run s train --fresh --metrics-out "$tmp/s.jsonl" "$tmp/s.ini"
rc=$?
auc=$(metric "$tmp/s.jsonl" test auc)
echo "# test auc $auc"
[ -n "$auc" ] && awk -v a="$auc" 'BEGIN { exit !(a > 0.9) }'
ok $((rc | $?)) "input = stream learns click = item % 3 == 0 (test AUC > 0.9)"

pre=$(sed -n 's/.*input = stream: \([0-9]*\) rows read before step 1.*/\1/p' "$tmp/s.out")
echo "# $pre of $total rows read before step 1"
[ -n "$pre" ] && [ "$pre" -lt "$((total / 4))" ] && grep -q 'epoch 2/2' "$tmp/s.out"
ok $? "only the shuffle buffer's chunks are read before step 1; the rest while training runs"

# one epoch with a buffer holding every row: each training row is drawn exactly once, and
# with the held-out rows they make up the input
stream_ini comm-single "$tmp/ck1" 1 50 100000 | sed 's/^epochs = 2$/epochs = 1/' >"$tmp/one.ini"
run one train --fresh --metrics-out "$tmp/one.jsonl" "$tmp/one.ini"
rc=$?
tr=$(samples_sum "$tmp/one.jsonl" 1000000000)
va=$(metric "$tmp/one.jsonl" valid rows)
te=$(metric "$tmp/one.jsonl" test rows)
echo "# trained $tr + valid ${va:-?} + test ${te:-?} rows of $total"
[ -n "$va" ] && [ -n "$te" ] && [ "$((tr + ${va%.*} + ${te%.*}))" -eq "$total" ]
ok $((rc | $?)) "one epoch trains every training row once; training + held-out rows = the input"

# the same held-out rows through `grmhost eval` (one pass read for them alone)
run ev eval --quiet --metrics-out "$tmp/ev.jsonl" "$tmp/s.ini" --checkpoint "$tmp/ck"
rc=$?
final "$tmp/s.jsonl"
same_metrics "$tmp/s.jsonl.final" "$tmp/ev.jsonl"
ok $((rc | $?)) "grmhost eval of the checkpoint gives the run's final valid and test metrics"

# stopped at step 60 (mid-stream, second pass not begun) and resumed: the same curve
sed "s#^dir = .*#dir = $tmp/ckab#" "$tmp/s.ini" >"$tmp/ab.ini"
run a train --fresh --max-steps 60 --metrics-out "$tmp/a.jsonl" "$tmp/ab.ini" &&
    run b train --metrics-out "$tmp/b.jsonl" "$tmp/ab.ini"
rc=$?
cat "$tmp/a.jsonl" "$tmp/b.jsonl" >"$tmp/ab.jsonl"
final "$tmp/b.jsonl"
same_curve "$tmp/s.jsonl" "$tmp/ab.jsonl" 0 && same_metrics "$tmp/s.jsonl.final" "$tmp/b.jsonl.final"
ok $((rc | $?)) "a run stopped at step 60 and resumed repeats the uninterrupted losses and metrics"

# accumulate = 2 batches of 25 draw the same samples as batches of 50 when the buffer
# holds everything: the same steps, weighted by rows
stream_ini comm-single "$tmp/ck50" 1 50 100000 >"$tmp/b50.ini"
stream_ini comm-single "$tmp/ck25" 2 25 100000 >"$tmp/b25.ini"
run b50 train --fresh --metrics-out "$tmp/b50.jsonl" "$tmp/b50.ini" &&
    run b25 train --fresh --metrics-out "$tmp/b25.jsonl" "$tmp/b25.ini"
rc=$?
same_curve "$tmp/b50.jsonl" "$tmp/b25.jsonl" 1e-5
ok $((rc | $?)) "accumulate = 2 x 25 rows follows the curve of batches of 50"

# a malformed row far past the first chunks: the data thread's error ends the run
awk 'NR == 7000 { print "oops,not,a,row" } { print }' "$tmp/rows.csv" >"$tmp/bad.csv"
sed "s#$tmp/rows.csv#$tmp/bad.csv#" "$tmp/s.ini" >"$tmp/bad.ini"
run bad train --fresh "$tmp/bad.ini"
rc=$?
sed 's/^/# /' "$tmp/bad.out" | grep -i 'error' | tail -2
[ $rc -ne 0 ] && grep -q "bad.csv:7000" "$tmp/bad.out" && grep -q 'grmhost: step' "$tmp/bad.out"
ok $? "a bad row at line 7000 stops the run after training began, naming file and line"

# refusals: NAME SED-EXPRESSION PATTERN DESCRIPTION (s.ini edited, refused with PATTERN)
refused() {
    sed -e "$2" "$tmp/s.ini" >"$tmp/$1.ini"
    "$g" train --fresh "$tmp/$1.ini" >"$tmp/$1.out" 2>&1
    rc=$?
    sed 's/^/# /' "$tmp/$1.out" | tail -1
    [ $rc -ne 0 ] && grep -q "$3" "$tmp/$1.out"
    ok $? "$4"
}
refused retr 's/^task = ranking$/task = retrieval/' 'input = stream trains ranking rows' \
    "input = stream on a retrieval pipeline is refused with the reason"
refused static 's/^plugin = emb-dynamic$/plugin = emb-static/' \
    'static.ini:[0-9]*: \[feature.user\].*give rows = N' \
    "an emb-static table without rows = N is refused at its line"

# several ranks
mpi_or_skip 10 13
stream_ini comm-mpi "$tmp/ck2" 1 50 100000 | sed 's/^epochs = 2$/epochs = 1/' >"$tmp/m.ini"
mpi 2 train --fresh --metrics-out "$tmp/m.jsonl" "$tmp/m.ini" >"$tmp/m.out" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/m.out" | tail -6
for s in valid test; do
    echo "# $s rows: 1 rank $(metric "$tmp/one.jsonl" $s rows), 2 ranks $(metric "$tmp/m.jsonl" $s rows)"
done
[ -n "$(metric "$tmp/m.jsonl" test rows)" ] &&
    [ "$(metric "$tmp/m.jsonl" valid rows)" = "$(metric "$tmp/one.jsonl" valid rows)" ] &&
    [ "$(metric "$tmp/m.jsonl" test rows)" = "$(metric "$tmp/one.jsonl" test rows)" ]
ok $((rc | $?)) "2 ranks hold out the rows 1 rank holds out"
tr2=$(samples_sum "$tmp/m.jsonl" 1000000000)
echo "# 2 ranks trained $tr2 rows, 1 rank $tr"
[ "$tr2" -eq "$tr" ]
ok $? "2 ranks, one epoch: every training row trained once over both ranks"
auc=$(metric "$tmp/m.jsonl" test auc)
echo "# 2 ranks: test auc $auc"
[ -n "$auc" ] && awk -v a="$auc" 'BEGIN { exit !(a > 0.9) }'
ok $? "2 ranks learn it too (test AUC > 0.9)"

# row 7000 is in block 27 of 256 rows: rank 1's shard
sed -e "s#$tmp/rows.csv#$tmp/bad.csv#" "$tmp/m.ini" >"$tmp/mbad.ini"
mpi 2 train --fresh "$tmp/mbad.ini" >"$tmp/mbad.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/mbad.out" | grep -i 'error' | tail -3
[ $rc -ne 0 ] && grep -q "bad.csv:7000" "$tmp/mbad.out" &&
    grep -q 'another rank failed reading its input' "$tmp/mbad.out"
ok $? "2 ranks: a bad row on rank 1 stops both; rank 0 says another rank failed"

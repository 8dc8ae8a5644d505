#!/bin/sh
# tests/test-train-sharded.sh - [train] input = sharded (core/route.h, issue 4): each rank
# reads its own share of the input (reader shard r of n), routes every row to the rank of
# its user before the transforms, and trains on its own users with a batch plan of its own.
# Checked against input = whole on the same data: the same users, items, examples and
# evaluated users in all; the same sequences, down to the order of events with equal
# timestamps (the same checkpoint evaluates to the same metrics either way), from text
# and from grmcol input, keyed by an i64 or a string column; training beats most-popular
# and resumes on its own curve; the ranking split does not depend on the rank count; a
# failure on one rank stops every rank with the reason; bad settings are refused with the
# fix. Without $MPIRUN or comm-mpi every check is skipped. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-tshard-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..14"
mpi_or_skip 1 14

# events with hour-resolution timestamps, so most users have ties the sort cannot break:
# only the arrival order can, and routing must keep it
"$g" generate --users 300 --items 200 --clusters 6 --seed 9 --out "$tmp/raw.tsv" || exit 1
awk -F'\t' 'BEGIN { OFS = "\t" } NR == 1 { print; next } { $3 = int($3 / 3600); print }' \
    "$tmp/raw.tsv" >"$tmp/ev.tsv"
echo "# $(awk -F'\t' 'NR > 1 { k = $1 " " $3; if (k in s) t++; s[k] = 1 } END { print t + 0 }' \
    "$tmp/ev.tsv") events share their user's timestamp with an earlier one"
"$g" convert -q --header --rows-per-group 97 "$tmp/ev.tsv" "$tmp/ev.grmcol" || exit 1

retr_ini() {   # $1 input, $2 checkpoint dir; the reader and transform on stdin's head
    cat
    ini_history
    ini_mlp_softmax
    cat <<EOI
[train]
input = $1
time_column = ts
max_seq_len = 10
batch_size = 64
epochs = 3
log_every = 5
[checkpoint]
dir = $2
[distributed]
plugin = comm-mpi
EOI
}
data_line() {   # the totals of a run's log: "N rows -> U users, I items, ..." less the time
    grep 'grmhost: data: [0-9]' "$1" | sed 's/ ([0-9.]*s)$//'
}
run() {   # $1 ranks, $2 name, then grmhost arguments; output in $tmp/$2.out
    n=$1 name=$2
    shift 2
    mpi "$n" "$@" >"$tmp/$name.out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$tmp/$name.out" | tail -8
    return $rc
}

ini_events "$tmp/ev.tsv" | retr_ini whole "$tmp/ckw" >"$tmp/w.ini"
ini_events "$tmp/ev.tsv" | retr_ini sharded "$tmp/cks" >"$tmp/s.ini"   # --fresh moves a dir's runs aside
run 2 w train --fresh --metrics-out "$tmp/w.jsonl" "$tmp/w.ini"
rcw=$?
for n in 2 4; do
    run $n s$n train --fresh --max-steps 1 "$tmp/s.ini"
    rc=$?
    echo "# whole: $(data_line "$tmp/w.out")"
    echo "# $n ranks sharded: $(data_line "$tmp/s$n.out")"
    [ -n "$(data_line "$tmp/w.out")" ] && [ "$(data_line "$tmp/w.out")" = "$(data_line "$tmp/s$n.out")" ]
    ok $(( rcw | rc | $? )) "$n ranks, text input sharded: the rows, users, items, examples and evaluated users of input = whole"
done
grep 'input = sharded: rank 0 of 2 holds' "$tmp/s2.out" | sed 's/^/# /'
sed -n 's/.*rank 0 of 2 holds \([0-9]*\) of the \([0-9]*\) users.*/\1 \2/p' "$tmp/s2.out" |
    awk '{ exit !($1 > 0.3 * $2 && $1 < 0.7 * $2) }'
ok $? "2 ranks: rank 0 holds about half of the users"

# the same 2-rank checkpoint evaluated with input = whole and input = sharded: equal
# metrics mean equal held-out items and histories for every user, ties included
run 2 ew eval --quiet --metrics-out "$tmp/ew.jsonl" "$tmp/w.ini" --checkpoint "$tmp/ckw" &&
    run 2 es eval --quiet --metrics-out "$tmp/es.jsonl" "$tmp/s.ini" --checkpoint "$tmp/ckw"
rc=$?
same_metrics "$tmp/ew.jsonl" "$tmp/es.jsonl"
ok $(( rc | $? )) "one checkpoint, 2 ranks: sharded evaluation gives the metrics of whole"

# grmcol input: 81 row groups dealt out k % 4; evaluated on 4 ranks
{ printf '[reader]\nplugin = reader-grmcol\npath = %s\n' "$tmp/ev.grmcol"
  printf '[transform.sequences]\nplugin = transform-basic\nsequence_by = user\n'
  printf 'sequence_order = ts\nsequence_columns = item,ts\n'; } >"$tmp/gr.head"
retr_ini whole "$tmp/ckg" <"$tmp/gr.head" >"$tmp/gw.ini"
retr_ini sharded "$tmp/ckg" <"$tmp/gr.head" >"$tmp/gs.ini"
run 4 gt train --fresh --quiet --max-steps 40 "$tmp/gw.ini" &&
    run 4 gew eval --quiet --metrics-out "$tmp/gew.jsonl" "$tmp/gw.ini" --checkpoint "$tmp/ckg" &&
    run 4 ges eval --metrics-out "$tmp/ges.jsonl" "$tmp/gs.ini" --checkpoint "$tmp/ckg"
rc=$?
same_metrics "$tmp/gew.jsonl" "$tmp/ges.jsonl"
ok $(( rc | $? )) "grmcol input, 4 ranks: sharded evaluation gives the metrics of whole"
[ "$(data_line "$tmp/ges.out")" = "$(data_line "$tmp/w.out")" ]
ok $? "grmcol input sharded 4 ways: the totals of the text input read whole"

# string user ids, hashed after routing: the key is the reader's raw string column
awk -F'\t' 'BEGIN { OFS = "\t" } NR == 1 { print; next } { $1 = "u" $1; print }' \
    "$tmp/ev.tsv" >"$tmp/evs.tsv"
ini_events "$tmp/evs.tsv" | sed 's/^columns = user:i64/columns = user:str/;
    s/^sequence_by = user$/hash = user\nhash_buckets = 100003\nsequence_by = user/' |
    retr_ini sharded "$tmp/ckx" >"$tmp/x.ini"
run 2 x train --fresh --max-steps 1 "$tmp/x.ini"
rc=$?
[ -n "$(data_line "$tmp/x.out")" ] && [ "$(data_line "$tmp/x.out")" = "$(data_line "$tmp/w.out")" ]
ok $(( rc | $? )) "string user ids routed by their bytes (hashed after): the same totals"

# training: the sharded run learns, and a resumed run follows the uninterrupted curve
sed 's/^epochs = 3$/epochs = 15/' "$tmp/s.ini" >"$tmp/s15.ini"
run 2 st train --fresh --metrics-out "$tmp/st.jsonl" "$tmp/s15.ini"
rc=$?
a=$(metric "$tmp/st.jsonl" test hr@10) p=$(metric "$tmp/st.jsonl" test mostpop_hr@10)
echo "# test hr@10 after 15 epochs: sharded $a, most-popular $p"
awk -v a="${a:-0}" -v p="${p:-1}" 'BEGIN { exit !(a > 1.2 * p) }'
ok $(( rc | $? )) "2 ranks sharded train to test HR@10 above 1.2x most-popular"
sed "s|^dir = .*|dir = $tmp/ckr|" "$tmp/s15.ini" >"$tmp/r.ini"
run 2 r1 train --fresh --max-steps 20 --metrics-out "$tmp/r.jsonl" "$tmp/r.ini" &&
    run 2 r2 train --metrics-out "$tmp/r.jsonl" "$tmp/r.ini"
rc=$?
same_curve "$tmp/st.jsonl" "$tmp/r.jsonl" 1e-6
ok $(( rc | $? )) "stopped at step 20 and resumed: the losses of the uninterrupted sharded run"

# ranking: the split keys on a row's content, so 2 and 4 ranks hold out the same rows
awk -F'\t' 'NR > 1 { print $1 "," $2 "," ($2 % 3 == 0) }' "$tmp/ev.tsv" >"$tmp/rows.csv"
rank_ini() {   # $1 input
    ini_rows "$tmp/rows.csv"
    cat <<EOI
[dense.0]
plugin = dense-mlp
dims = 16,1
[train]
task = ranking
label_columns = click
batch_size = 50
epochs = 1
input = $1
[distributed]
plugin = comm-mpi
EOI
}
rank_ini sharded >"$tmp/k.ini"
run 2 k2 train --fresh --metrics-out "$tmp/k2.jsonl" "$tmp/k.ini" &&
    run 4 k4 train --fresh "$tmp/k.ini"
rc=$?
echo "# 2 ranks: $(data_line "$tmp/k2.out")"
echo "# 4 ranks: $(data_line "$tmp/k4.out")"
[ -n "$(data_line "$tmp/k2.out")" ] && [ "$(data_line "$tmp/k2.out")" = "$(data_line "$tmp/k4.out")" ]
ok $(( rc | $? )) "ranking sharded on 2 and 4 ranks: the same train, valid and test row counts"
auc=$(metric "$tmp/k2.jsonl" test auc)
echo "# test auc $auc (the label is item % 3 == 0: learnable from the item)"
awk -v a="${auc:-0}" 'BEGIN { exit !(a > 0.8) }'
ok $? "ranking sharded on 2 ranks: test AUC over every rank's rows above 0.8"

# a bad row in rank 1's block: both ranks stop, rank 1 with the line, rank 0 naming rank 1
awk -F'\t' 'BEGIN { OFS = "\t" } NR == 80 { $2 = "oops" } { print }' "$tmp/ev.tsv" >"$tmp/bad.tsv"
ini_events "$tmp/bad.tsv" | sed 's/^format = tsv/format = tsv\nchunk_rows = 64\non_bad_row = fail/' |
    retr_ini sharded "$tmp/ckb" >"$tmp/b.ini"
mpi 2 train --fresh "$tmp/b.ini" >"$tmp/b.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/b.out" | grep -i 'error\|fail' | head -4
[ $rc -ne 0 ] && grep -q "bad.tsv:80: column 'item': 'oops' is not an integer" "$tmp/b.out" &&
    grep -q "rank 1 of 2 failed while reading its share of the input" "$tmp/b.out"
ok $? "a bad row read by rank 1 stops both ranks: rank 1 names the line, rank 0 names rank 1"

# refused settings
sed 's/^input = sharded$/input = sharded\nshard_by = uid/' "$tmp/s.ini" >"$tmp/n.ini"
mpi 2 train --fresh "$tmp/n.ini" >"$tmp/n.out" 2>&1
rc=$?
grep -q "shard_by = uid (default: user_column), but the reader has no such column (it has: user, item, ts)" \
    "$tmp/n.out"
ok $(( !rc | $? )) "shard_by naming no reader column is refused, listing the columns"
sed 's/^batch_size = 64$/batch_size = 1/' "$tmp/s.ini" >"$tmp/o.ini"
mpi 2 train --fresh "$tmp/o.ini" >"$tmp/o.out" 2>&1
rc=$?
grep -q "leaves a rank no sample per batch; use batch_size >= 2" "$tmp/o.out"
ok $(( !rc | $? )) "batch_size below the rank count is refused with the smallest that works"

#!/bin/sh
# tests/test-train-ranking.sh - [train] task = ranking end to end: a two-task pipeline on
# generated rows whose labels are functions of the item (both AUCs must approach 1 and
# the logloss must beat the constant prior), the metric names of multi-task runs, the
# config errors; then share/pipelines/ml100k-ranking.ini on the real MovieLens 100K data
# (skipped without it). TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-rank-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..6"

# rows: user, item, click = item is odd, buy = item divisible by 5
"$g" generate --users 500 --items 400 --clusters 10 --seed 3 --out "$tmp/ev.tsv" || exit 1
awk -F'\t' 'NR > 1 { print $1 "," $2 "," ($2 % 2) "," ($2 % 5 == 0) }' "$tmp/ev.tsv" >"$tmp/rows.csv"
cat >"$tmp/two.ini" <<EOI
[reader]
plugin = reader-text
path = $tmp/rows.csv
format = csv
columns = user:i64,item:i64,click:i64,buy:f32
[feature.user]
source = user
dim = 8
[feature.item]
source = item
dim = 8
[dense.0]
plugin = dense-mlp
dims = 32,2
[optimizer.sparse]
lr = 0.02
[optimizer.dense]
lr = 0.005
[train]
task = ranking
label_columns = click,buy
batch_size = 128
epochs = 4
EOI
"$g" train --fresh --metrics-out "$tmp/two.jsonl" "$tmp/two.ini" >"$tmp/two.out" 2>"$tmp/two.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/two.err" | tail -5
ok $rc "a two-task ranking pipeline trains with the default head head-bce"
a1=$(metric "$tmp/two.jsonl" test auc.click); a2=$(metric "$tmp/two.jsonl" test auc.buy)
ll=$(metric "$tmp/two.jsonl" test logloss)
p1=$(metric "$tmp/two.jsonl" test prior_logloss.click); p2=$(metric "$tmp/two.jsonl" test prior_logloss.buy)
echo "# test auc.click $a1 auc.buy $a2 logloss $ll (constant priors $p1 + $p2)"
awk -v a="${a1:-0}" -v b="${a2:-0}" 'BEGIN { exit !(a > 0.9 && b > 0.9) }'
ok $? "both tasks learn their item-defined labels (test AUC > 0.9 each)"
awk -v l="${ll:-9}" -v p="${p1:-0}" -v q="${p2:-0}" 'BEGIN { exit !(l < p + q) }'
ok $? "the summed logloss beats the constant-prior baseline"
grep -q '"name":"gauc.click"' "$tmp/two.jsonl"
ok $? "GAUC per task is reported (grouped by user_column)"

sed 's/^label_columns = click,buy/label_columns = click/' "$tmp/two.ini" >"$tmp/bad.ini"
"$g" train --fresh "$tmp/bad.ini" >/dev/null 2>"$tmp/bad.err"
rc=$?
test $rc -ne 0 && grep -q "names 1 tasks; make the last \[dense.N\] output 1" "$tmp/bad.err"
ok $? "a dense stack whose output does not match the task count is refused with the fix"

data="${GRM_DATA_DIR:-}/ml-100k/u.data.zst"
if [ ! -f "$data" ]; then
    skip "$data not found" "ml100k-ranking beats the constant prior"
    exit 0
fi
sed -e "s|^path = .*u.data.zst|path = $data|" -e "s|^dir = .*|dir = $tmp/ck|" \
    "$GRM_TOP_SRCDIR/share/pipelines/ml100k-ranking.ini" >"$tmp/ml.ini"
"$g" train --fresh --metrics-out "$tmp/ml.jsonl" "$tmp/ml.ini" >/dev/null 2>"$tmp/ml.err"
auc=$(metric "$tmp/ml.jsonl" test auc); gauc=$(metric "$tmp/ml.jsonl" test gauc)
ll=$(metric "$tmp/ml.jsonl" test logloss); pl=$(metric "$tmp/ml.jsonl" test prior_logloss)
echo "# ml100k rating>=4: test auc $auc gauc $gauc logloss $ll (constant prior $pl)"
awk -v a="${auc:-0}" -v l="${ll:-9}" -v p="${pl:-0}" 'BEGIN { exit !(a > 0.75 && l < p) }'
ok $? "ml100k-ranking: test AUC > 0.75 and logloss below the constant prior"

#!/bin/sh
# tests/test-train-ml100k.sh - train share/pipelines/ml100k-retrieval.ini on the real
# MovieLens 100K data (read in place from GRM_DATA_DIR): the loss falls and the model's
# HR@10 and NDCG@10 on the leave-one-out test split (full ranking over all 1682 items)
# beat the most-popular baseline. Skips when the data is absent. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
data="${GRM_DATA_DIR:-}/ml-100k/u.data.zst"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
[ -f "$data" ] || skip_all "$data not found (set --with-data-dir)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-ml100k-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "1..4"
sed -e "s|^path = .*u.data.zst|path = $data|" -e "s|^dir = .*|dir = $tmp/ck|" \
    -e "s|^epochs = .*|epochs = 2|" \
    "$GRM_TOP_SRCDIR/share/pipelines/ml100k-retrieval.ini" >"$tmp/ml.ini"
"$GRM_TOP_BUILDDIR/grmhost" train --fresh --metrics-out "$tmp/m.jsonl" "$tmp/ml.ini" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/err" | tail -5
ok $rc "ml100k-retrieval trains (2 epochs)"
grep -E "users|hr@10|ndcg@10" "$tmp/err" | sed 's/^/# /'
first=$(grep '"name":"loss"' "$tmp/m.jsonl" | head -1 | sed 's/.*"value":\([^}]*\)}/\1/')
last=$(grep '"name":"loss"' "$tmp/m.jsonl" | tail -1 | sed 's/.*"value":\([^}]*\)}/\1/')
[ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'
ok $? "the loss falls (${first:-?} -> ${last:-?})"
grep -q "943 users, 1682 items" "$tmp/err"
ok $? "all 943 users and 1682 items are read and ranked"
hr=$(metric "$tmp/m.jsonl" test hr@10); pop=$(metric "$tmp/m.jsonl" test mostpop_hr@10)
nd=$(metric "$tmp/m.jsonl" test ndcg@10); popnd=$(metric "$tmp/m.jsonl" test mostpop_ndcg@10)
awk -v a="${hr:-0}" -v b="${pop:-1}" -v c="${nd:-0}" -v d="${popnd:-1}" \
    'BEGIN { exit !(a > b && c > d) }'
ok $? "test HR@10 ${hr:-?} > most-popular ${pop:-?} and NDCG@10 ${nd:-?} > ${popnd:-?}"

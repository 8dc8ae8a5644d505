#!/bin/sh
# tests/test-train-sparse.sh - the sparse side inside the trainer (issue 3): the merge plan
# `grmhost check` prints (MTGRBoost §4.2) for a store that takes any id and for one that does
# not; emb-dynamic reproducing emb-static's loss curve on MovieLens 100K when nothing is
# evicted and tables stay apart (same first-touch rows); a merged run that trains and
# checkpoints its merged table; gradient accumulation equal to one batch of the same samples
# (losses step by step); a resumed run under accumulation equal to the uninterrupted one;
# tile pooling training and its misuse refused. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-sparse-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..13"

# rows: user, item, click = item is odd (a ranking task with two id features)
"$g" generate --users 400 --items 300 --clusters 8 --seed 5 --out "$tmp/ev.tsv" || exit 1
awk -F'\t' 'NR > 1 { print $1 "," $2 "," ($2 % 2) }' "$tmp/ev.tsv" >"$tmp/rows.csv"
rank_ini() {   # $1 store, $2 batch, $3 accumulate, $4 extra [feature.item] line
    ini_rows "$tmp/rows.csv"
    cat <<EOI
$4
[embedding]
plugin = $1
[dense.0]
plugin = dense-mlp
dims = 16,1
[optimizer.sparse]
lr = 0.02
[optimizer.dense]
lr = 0.005
[train]
task = ranking
label_columns = click
batch_size = $2
accumulate = $3
epochs = 2
log_every = 1
[checkpoint]
dir = $tmp/ck-$1-$2-$3
every = 10
EOI
}

# 1-3. the merge plan
rank_ini emb-dynamic 64 1 "" >"$tmp/dyn.ini"
"$g" check "$tmp/dyn.ini" >"$tmp/dyn.chk" 2>&1
grep -q "merge plan (MTGRBoost §4.2): 2 id spaces in 1 table$" "$tmp/dyn.chk" \
    && grep -q "table user+item: dim 8, opt-adam, normal(0.05), merged, k = 2" "$tmp/dyn.chk" \
    && grep -q "user       key = (0 << 61) | id   features: user" "$tmp/dyn.chk" \
    && grep -q "item       key = (1 << 61) | id   features: item" "$tmp/dyn.chk"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/dyn.chk" | grep -A4 "merge plan"
ok $rc "check prints the merge plan: two id spaces of one spec share table user+item, k = 2"
rank_ini emb-dynamic 64 1 "merge = false" >"$tmp/apart.ini"
"$g" check "$tmp/apart.ini" 2>&1 | grep -q "2 id spaces in 2 tables$"
ok $? "merge = false keeps a feature's table apart"
rank_ini emb-static 64 1 "" >"$tmp/static.ini"
"$g" check "$tmp/static.ini" 2>&1 \
    | grep -q "in 2 tables; not merged: emb-static indexes rows by id"
ok $? "a store that indexes rows by id is never merged, and check says why"

# 4-5. a merged table trains, and the checkpoint holds one table under the merged name
"$g" train --fresh --quiet --max-steps 60 --metrics-out "$tmp/dyn.jsonl" "$tmp/dyn.ini" \
    >/dev/null 2>"$tmp/dyn.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/dyn.err" | tail -5
losses "$tmp/dyn.jsonl" >"$tmp/dl"
awk 'NR <= 5 { a += $2 } { l[NR] = $2 } END { b = 0; for (i = NR - 4; i <= NR; i++) b += l[i];
     print "# merged: first losses " a / 5 ", last " b / 5; exit !(NR == 60 && b < 0.8 * a) }' \
    "$tmp/dl"
ok $(( rc | $? )) "a ranking run on merged table user+item lowers its loss by 20%"
ck="$tmp/ck-emb-dynamic-64-1/step-0000000060.grm"
grep -aq "emb\.user+item\.weight" "$ck" && ! grep -aq "emb\.user\.\|emb\.item\." "$ck"
ok $? "the checkpoint holds the merged table user+item, not one table per feature"

# 6. a row budget evicts, and the counters reach the metrics per physical table
sed 's/^plugin = emb-dynamic$/plugin = emb-dynamic\nevict = lru\nmax_rows = 200/' "$tmp/dyn.ini" >"$tmp/ev.ini"
"$g" train --fresh --quiet --max-steps 30 --metrics-out "$tmp/ev.jsonl" "$tmp/ev.ini" \
    >/dev/null 2>&1
ev=$(metric "$tmp/ev.jsonl" train "table.user+item.evictions")
rows=$(metric "$tmp/ev.jsonl" train "table.user+item.rows")
echo "# max_rows = 200: $rows rows held, $ev evictions"
awk -v e="${ev:-0}" -v r="${rows:-999}" 'BEGIN { exit !(e > 0 && r <= 200 && r > 0) }'
ok $? "under max_rows the merged table evicts, and rows and evictions are reported"

# 7. accumulate = 2 of 32 samples gives the losses of batch 64 (same samples, same averaging)
rank_ini emb-static 64 1 "" >"$tmp/b64.ini"
rank_ini emb-static 32 2 "" >"$tmp/b32x2.ini"
"$g" train --fresh --quiet --max-steps 40 --metrics-out "$tmp/b64.jsonl" "$tmp/b64.ini" \
    >/dev/null 2>&1
"$g" train --fresh --quiet --max-steps 40 --metrics-out "$tmp/b32x2.jsonl" "$tmp/b32x2.ini" \
    >/dev/null 2>"$tmp/acc.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/acc.err" | tail -5
same_curve "$tmp/b64.jsonl" "$tmp/b32x2.jsonl" 2e-5
ok $(( rc | $? )) "accumulate = 2 x 32 samples: the 40 step losses of batch_size 64"
rank_ini emb-static 32 1 "" >"$tmp/b32.ini"
"$g" train --fresh --quiet --max-steps 40 --metrics-out "$tmp/b32.jsonl" "$tmp/b32.ini" \
    >/dev/null 2>&1
! same_curve "$tmp/b32.jsonl" "$tmp/b32x2.jsonl" 2e-5 >/dev/null
ok $? "and not those of batch_size 32 without accumulation (the test can tell them apart)"

# 9. the same with a dynamic merged table: sparse gradients aggregated by id across batches
rank_ini emb-dynamic 32 2 "" >"$tmp/d32x2.ini"
"$g" train --fresh --quiet --max-steps 40 --metrics-out "$tmp/d64.jsonl" "$tmp/dyn.ini" \
    >/dev/null 2>&1
"$g" train --fresh --quiet --max-steps 40 --metrics-out "$tmp/d32x2.jsonl" "$tmp/d32x2.ini" \
    >/dev/null 2>&1
same_curve "$tmp/d64.jsonl" "$tmp/d32x2.jsonl" 2e-5
ok $? "emb-dynamic, merged: accumulate = 2 x 32 gives the losses of batch_size 64"

# 10. resume under accumulation: 20 + 20 steps end where 40 do
sed "s|^dir = .*|dir = $tmp/ck-resume|" "$tmp/b32x2.ini" >"$tmp/res.ini"
"$g" train --fresh --quiet --max-steps 20 "$tmp/res.ini" >/dev/null 2>&1
"$g" train --quiet --max-steps 20 --metrics-out "$tmp/res.jsonl" "$tmp/res.ini" \
    >/dev/null 2>&1
a=$(losses "$tmp/res.jsonl" | awk '$1 == 40 { print $2 }')
b=$(losses "$tmp/b32x2.jsonl" | awk '$1 == 40 { print $2 }')
echo "# step 40: resumed $a, uninterrupted $b"
[ -n "$a" ] && [ "$a" = "$b" ]
ok $? "a run resumed at step 20 with accumulate = 2 reaches the uninterrupted step-40 loss"

# 11-12. tile pooling: the last 5 items side by side
{ ini_events "$tmp/ev.tsv"; cat <<EOI
[feature.recent]
source = item
table = item
dim = 16
window = 5
pooling = tile
[dense.0]
plugin = dense-mlp
dims = 64,16
[train]
time_column = ts
max_seq_len = 20
batch_size = 128
epochs = 4
log_every = 10
EOI
} >"$tmp/tile.ini"
"$g" check "$tmp/tile.ini" 2>&1 | grep -q "recent     column item     table item     dim 16, tile of the last 5"
rc=$?
"$g" train --fresh --quiet --metrics-out "$tmp/tile.jsonl" "$tmp/tile.ini" >/dev/null \
    2>"$tmp/tile.err"
rc2=$?
[ $rc2 -ne 0 ] && sed 's/^/# /' "$tmp/tile.err" | tail -5
hr=$(metric "$tmp/tile.jsonl" test hr@10); pop=$(metric "$tmp/tile.jsonl" test mostpop_hr@10)
echo "# tile pooling: test hr@10 $hr, most popular $pop"
awk -v a="${hr:-0}" -v b="${pop:-1}" 'BEGIN { exit !(a > b) }'
ok $(( rc | rc2 | $? )) "pooling = tile (RecIS sequence tile) trains past most-popular"
sed 's/^source = item$/source = user/; s/^table = item$/table = user/' "$tmp/tile.ini" \
    | sed 's/^\[dense.0\]/[feature.item]\nsource = item\ndim = 16\n[dense.0]/' >"$tmp/tbad.ini"
"$g" check "$tmp/tbad.ini" >/dev/null 2>"$tmp/tbad.err"
rc=$?
test $rc -ne 0 && grep -q "tbad.ini:[0-9]*: \[feature.recent\] pooling = tile lays out the last" \
    "$tmp/tbad.err"
ok $? "tile on a one-id feature is refused with file:line"

# 13. ML-100K: emb-dynamic's loss curve is emb-static's when nothing is evicted, rows stay
# FP32 and tables are not merged (first-touch rows are the same function of seed, table, id)
data="${GRM_DATA_DIR:-}/ml-100k/u.data.zst"
if [ ! -f "$data" ]; then
    skip "$data not found" "ML-100K: emb-dynamic and emb-static loss curves agree"
    exit 0
fi
sed -e "s|^path = .*u.data.zst|path = $data|" -e "s|^dir = .*|dir = $tmp/ck-ml|" \
    -e "s|^log_every = .*|log_every = 5|" \
    "$GRM_TOP_SRCDIR/share/pipelines/ml100k-ranking.ini" >"$tmp/mls.ini"
sed -e "s|^plugin = emb-static|plugin = emb-dynamic\nfp16_cold = false|" \
    -e "s|^dim = 32|dim = 32\nmerge = false|" "$tmp/mls.ini" >"$tmp/mld.ini"
"$g" train --fresh --quiet --max-steps 300 --metrics-out "$tmp/mls.jsonl" "$tmp/mls.ini" \
    >/dev/null 2>&1
"$g" train --fresh --quiet --max-steps 300 --metrics-out "$tmp/mld.jsonl" "$tmp/mld.ini" \
    >/dev/null 2>"$tmp/mld.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/mld.err" | tail -5
same_curve "$tmp/mls.jsonl" "$tmp/mld.jsonl" 1e-6
ok $(( rc | $? )) "ML-100K, 300 steps: emb-dynamic's loss curve is emb-static's (60 points)"

#!/bin/sh
# tests/test-train-seqrank.sh - ranking on a token list (MTGRBoost §2: HSTU over the user's
# sequence, MMoE on the candidate's output, multi-task BCE): a row's pooling = none feature
# runs through the first [train] sequence_blocks blocks as jagged tokens, and each row's last
# token output, beside the pooled features, feeds the rest. Generated rows whose `click`
# depends only on the history (most of it at most 100) and `buy` only on the candidate (the
# last token, even); the pooled pipeline without the list must stay blind to click. Then the
# plumbing checks (a one-token list through a token-wise MLP is the pooled pipeline, step for
# step; prefetch; timestamps beside the tokens; two ranks), the config refusals, and the
# ML-100K pipeline share/pipelines/ml100k-hstu-mmoe.ini (skipped without the data). TAP.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-seqrank-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..15"

# user,item,click,buy,ts,hist...: 2-11 history items then the candidate as the last token
awk 'BEGIN { srand(7)
    for (r = 0; r < 6000; r++) {
        u = int(rand() * 300); L = 2 + int(rand() * 10); line = ""; n = 0
        for (j = 0; j < L; j++) { it = 1 + int(rand() * 200); line = line "," it; n += it <= 100 }
        last = 1 + int(rand() * 200)
        print u "," last "," (2 * n > L) "," (last % 2 == 0) "," r line "," last } }' \
    >"$tmp/rows.csv"
reader() {
    cat <<EOI
[reader]
plugin = reader-text
path = $tmp/rows.csv
format = csv
columns = user:i64,item:i64,click:i64,buy:i64,ts:i64,hist:list_i64
[feature.user]
source = user
dim = 8
EOI
}
mmoe_two_tasks() {   # $1: the block's index; ends inside [train] (lines may follow)
    cat <<EOI
[dense.$1]
plugin = dense-mmoe
experts = 3
tasks = 2
expert_dims = 32
tower_dims = 16,1
[optimizer.sparse]
lr = 0.01
[optimizer.dense]
lr = 0.003
[train]
task = ranking
label_columns = click,buy
batch_size = 128
epochs = 20
EOI
}
hstu_mmoe() {   # $1: extra [train] lines
    reader
    cat <<EOI
[feature.hist]
source = hist
table = item
dim = 16
pooling = none
window = 12
[dense.0]
plugin = dense-hstu
num_heads = 1
dqk = 16
dv = 16
rab_pos = true
rab_time = false
max_len = 12
EOI
    mmoe_two_tasks 1
    cat <<EOI
sequence_blocks = 1
log_every = 1
${1:-}
EOI
}
hstu_mmoe >"$tmp/a.ini"
"$g" train --fresh --metrics-out "$tmp/a.jsonl" "$tmp/a.ini" >"$tmp/a.out" 2>"$tmp/a.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/a.err" | tail -5
ok $rc "HSTU on the token lists, then MMoE with two towers, trains (sequence_blocks = 1)"
c=$(metric "$tmp/a.jsonl" test auc.click); b=$(metric "$tmp/a.jsonl" test auc.buy)
gc=$(metric "$tmp/a.jsonl" test gauc.click)
echo "# test auc.click $c (gauc $gc) auc.buy $b"
awk -v c="${c:-0}" -v b="${b:-0}" 'BEGIN { exit !(c > 0.75 && b > 0.95) }'
ok $? "both tasks learn: click from the history (AUC > 0.75), buy from the candidate (> 0.95)"
grep -q 'tokens/s' "$tmp/a.err"
ok $? "throughput counts the tokens of the lists"

# the same rows without the list: click is invisible
{ reader; cat <<EOI
[feature.item]
source = item
dim = 16
EOI
    mmoe_two_tasks 0
} >"$tmp/pool.ini"
"$g" train --fresh --quiet --metrics-out "$tmp/pool.jsonl" "$tmp/pool.ini" >/dev/null 2>&1
pc=$(metric "$tmp/pool.jsonl" test auc.click)
echo "# without the list: test auc.click $pc"
awk -v p="${pc:-1}" -v c="${c:-0}" 'BEGIN { exit !(p < 0.6 && c > p + 0.15) }'
ok $? "a pooled model without the list cannot see click (AUC < 0.6), the token model can"

# a one-token list through a token-wise MLP is the pooled one-id feature, step for step
awk -F, '{ print $1 "," $2 "," $3 "," $4 "," $5 "," $2 }' "$tmp/rows.csv" >"$tmp/one.csv"
one() {   # $1: pooling, $2: sequence_blocks line
    cat <<EOI
[reader]
plugin = reader-text
path = $tmp/one.csv
format = csv
columns = user:i64,item:i64,click:i64,buy:i64,ts:i64,hist:list_i64
[feature.hist]
source = hist
table = item
dim = 16
pooling = $1
window = 4
[dense.0]
plugin = dense-mlp
dims = 24
activation = relu
[dense.1]
plugin = dense-mlp
dims = 16,2
[train]
task = ranking
label_columns = click,buy
batch_size = 64
steps = 40
log_every = 1
$2
EOI
}
one none "sequence_blocks = 1" >"$tmp/one-tok.ini"
one sum "" >"$tmp/one-pool.ini"
"$g" train --fresh --quiet --metrics-out "$tmp/ot.jsonl" "$tmp/one-tok.ini" >/dev/null 2>&1
"$g" train --fresh --quiet --metrics-out "$tmp/op.jsonl" "$tmp/one-pool.ini" >/dev/null 2>&1
same_curve "$tmp/ot.jsonl" "$tmp/op.jsonl" 1e-6
ok $? "one-token lists through the token path give the pooled pipeline's losses (40 steps)"

hstu_mmoe "steps = 30
prefetch = 0" >"$tmp/p0.ini"
hstu_mmoe "steps = 30
prefetch = 3" >"$tmp/p3.ini"
"$g" train --fresh --quiet --metrics-out "$tmp/p0.jsonl" "$tmp/p0.ini" >/dev/null 2>&1
"$g" train --fresh --quiet --metrics-out "$tmp/p3.jsonl" "$tmp/p3.ini" >/dev/null 2>&1
same_curve "$tmp/p0.jsonl" "$tmp/p3.jsonl" 0
ok $? "the data thread (prefetch = 3) gives the losses of prefetch = 0 bitwise"

# per-event histories from event rows (transform-basic history_by), the candidate's parity
# as the label, and timestamps beside the tokens (time_column) for HSTU's time bias
"$g" generate --users 300 --items 200 --clusters 6 --seed 5 --out "$tmp/ev.tsv" || exit 1
hist_ini() {   # $1: time_column line
    ini_reader_events "$tmp/ev.tsv"
    cat <<EOI
[transform.hist]
plugin = transform-basic
copy = item:odd
mod = odd:2
history_by = user
history_order = ts
history_columns = item:hist_item, ts:hist_ts
history_length = 20
[feature.hist]
source = hist_item
table = item
dim = 16
pooling = none
[dense.0]
plugin = dense-hstu
num_heads = 1
dqk = 16
dv = 16
rab_time = true
max_len = 20
[dense.1]
plugin = dense-mlp
dims = 16,1
[train]
task = ranking
label_columns = odd
sequence_blocks = 1
batch_size = 128
epochs = 3
log_every = 1
$1
EOI
}
hist_ini "time_column = hist_ts" >"$tmp/t.ini"
hist_ini "" >"$tmp/nt.ini"
"$g" train --fresh --quiet --metrics-out "$tmp/t.jsonl" "$tmp/t.ini" >/dev/null 2>"$tmp/t.err"
rc=$?
"$g" train --fresh --quiet --metrics-out "$tmp/nt.jsonl" "$tmp/nt.ini" >/dev/null 2>&1
ta=$(metric "$tmp/t.jsonl" test auc)
echo "# event rows -> per-event histories with timestamps: test auc $ta"
awk -v a="${ta:-0}" 'BEGIN { exit !(a > 0.95) }'
ok $(( rc | $? )) "histories built from event rows train with their timestamps (test AUC > 0.95)"
! same_curve "$tmp/t.jsonl" "$tmp/nt.jsonl" 0 >/dev/null
ok $? "the timestamps reach HSTU's time bias (the losses differ without time_column)"
hist_ini "time_column = ts" >"$tmp/ts.ini"
"$g" train --fresh --quiet "$tmp/ts.ini" >/dev/null 2>"$tmp/ts.err"
test $? -ne 0 && grep -q "time_column = ts: .*no LIST_I64 column" "$tmp/ts.err"
ok $? "a time_column that is not a list beside the tokens is refused"

# the config refusals, each naming the fix
refuse() {   # $1: ini, $2: message part, $3: what
    "$g" check "$1" >/dev/null 2>"$tmp/r.err"
    rc=$?
    test $rc -ne 0 && grep -q "$2" "$tmp/r.err"
    r=$?
    [ $r -ne 0 ] && sed 's/^/# /' "$tmp/r.err" | tail -3
    ok $r "$3"
}
hstu_mmoe | grep -v '^sequence_blocks' >"$tmp/nosb.ini"
refuse "$tmp/nosb.ini" "set \[train\] sequence_blocks = N, 1 <= N <= 2" \
    "a ranking token list without sequence_blocks is refused, naming the key and its range"
hstu_mmoe | sed 's/^sequence_blocks = 1/sequence_blocks = 3/' >"$tmp/sb3.ini"
refuse "$tmp/sb3.ini" "1 <= N <= 2" "sequence_blocks past the last block is refused"
{ cat "$tmp/pool.ini"; echo "sequence_blocks = 1"; } >"$tmp/sbpool.ini"   # [train] is last
refuse "$tmp/sbpool.ini" "sequence_blocks applies to a ranking pipeline with a pooling = none" \
    "sequence_blocks without a token list is refused"
{ hstu_mmoe; printf '[feature.more]\nsource = hist\ntable = item\ndim = 16\npooling = none\n'; } \
    >"$tmp/two.ini"
refuse "$tmp/two.ini" "already feeds tokens to the dense blocks" \
    "a second pooling = none feature is refused"

data="${GRM_DATA_DIR:-}/ml-100k/u.data.zst"
if [ -f "$data" ]; then
    # the shipped pipeline, shortened (200 steps of 128 rows, 20 items, dense lr 3e-3):
    # both tasks well above the prior
    sed -e "s|^path = .*u.data.zst|path = $data|" -e "s|^dir = .*|dir = $tmp/ckml|" \
        -e "s/^history_length = 50/history_length = 20/" -e "s/^window = 50/window = 20/" \
        -e "s/^max_len = 50/max_len = 20/" -e "s/^epochs = .*/steps = 200/" \
        -e "s/^early_stop = .*/eval_every = 200/" -e "s/^batch_size = 256/batch_size = 128/" \
        -e "s/^lr = 0.001/lr = 0.003/" \
        "$GRM_TOP_SRCDIR/share/pipelines/ml100k-hstu-mmoe.ini" >"$tmp/ml.ini"
    "$g" train --fresh --quiet --metrics-out "$tmp/ml.jsonl" "$tmp/ml.ini" >/dev/null \
        2>"$tmp/ml.err"
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$tmp/ml.err" | tail -5
    a1=$(metric "$tmp/ml.jsonl" test auc.rating); a2=$(metric "$tmp/ml.jsonl" test auc.top)
    g1=$(metric "$tmp/ml.jsonl" test gauc.rating); g2=$(metric "$tmp/ml.jsonl" test gauc.top)
    echo "# ml100k-hstu-mmoe, 200 steps: test auc/gauc rating>=4 $a1/$g1, rating=5 $a2/$g2"
    awk -v a="${a1:-0}" -v b="${a2:-0}" -v c="${g1:-0}" -v d="${g2:-0}" \
        'BEGIN { exit !(a > 0.62 && b > 0.62 && c > 0.58 && d > 0.58) }'
    ok $(( rc | $? )) "ml100k-hstu-mmoe: AUC and GAUC per task, both well above the constant prior's 0.5"
else
    skip "$data not found" "ml100k-hstu-mmoe"
fi

mpi_or_skip 15 15
hstu_mmoe "steps = 20
[distributed]
plugin = comm-mpi" >"$tmp/m2.ini"
hstu_mmoe "steps = 20" >"$tmp/m1.ini"
"$g" train --fresh --quiet --metrics-out "$tmp/m1.jsonl" "$tmp/m1.ini" >/dev/null 2>&1
mpi 2 train --fresh --quiet --metrics-out "$tmp/m2.jsonl" "$tmp/m2.ini" >"$tmp/m2.out" 2>&1
same_curve "$tmp/m1.jsonl" "$tmp/m2.jsonl" 1e-5
ok $? "two ranks follow one rank's losses within 1e-5 (20 steps)"

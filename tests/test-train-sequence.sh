#!/bin/sh
# tests/test-train-sequence.sh - sequence models ([feature.*] pooling = none): the token
# rows of each user's jagged history go through the dense stack, every token is trained
# to predict the next item, and the last token's output ranks the catalog. With a
# per-token MLP (no attention; HSTU and SASRec have their own tests) the model must learn
# the generated data's sequential structure and beat most-popular; a run stopped halfway
# resumes bit-identically; misuse of pooling = none is refused naming file and line. TAP.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-seq-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..17"

"$g" generate --users 600 --items 300 --clusters 10 --seed 11 --out "$tmp/data.tsv" || exit 1
ini() { # $1 file, $2 checkpoint dir, $3 steps, $4 extra feature section
    { ini_body "$@"; } >"$1"
}
ini_body() {
    cat <<EOI
[pipeline]
name = test-sequence
threads = 2
[reader]
plugin = reader-text
path = $tmp/data.tsv
header = true
columns = user:i64,item:i64,ts:i64
[transform.seq]
plugin = transform-basic
sequence_by = user
sequence_order = ts
sequence_columns = item,ts
[feature.tokens]
source = item
table = item
dim = 16
window = 20
pooling = none
$4
EOI
    ini_mlp_softmax
    cat <<EOI
in_batch = false
[optimizer.sparse]
lr = 0.02
[optimizer.dense]
lr = 0.005
[train]
time_column = ts
batch_size = 32
steps = $3
log_every = 10
eval_every = 1000000
topk = 10
[checkpoint]
dir = $2
every = 40
keep = 2
EOI
}
final() { grep -E '^(valid|test) ' "$1" | awk '{print $1, $2, $4}'; }

ini "$tmp/a.ini" "$tmp/ck-a" 160 ""
"$g" train --fresh --metrics-out "$tmp/a.jsonl" "$tmp/a.ini" >"$tmp/a.out" 2>"$tmp/a.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/a.err" | tail -5
ok $rc "a sequence model (pooling = none, per-token MLP) trains 160 steps and exits 0"

grep -q "tokens/s" "$tmp/a.err"
ok $? "the run reports tokens/s beside samples/s"

first=$(grep '"name":"loss"' "$tmp/a.jsonl" | head -1 | sed 's/.*"value":\([^}]*\)}/\1/')
last=$(grep '"name":"loss"' "$tmp/a.jsonl" | tail -1 | sed 's/.*"value":\([^}]*\)}/\1/')
echo "# per-token loss: first logged $first, last logged $last"
[ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }'
ok $? "the per-token next-item loss falls"

hr=$(metric "$tmp/a.jsonl" test hr@10)
pop=$(metric "$tmp/a.jsonl" test mostpop_hr@10)
echo "# test hr@10 $hr, most-popular $pop"
awk -v a="$hr" -v b="$pop" 'BEGIN { exit !(a > 1.5 * b) }'
ok $? "the last token's output ranks the test item better than most-popular (1.5x hr@10)"

ini "$tmp/b.ini" "$tmp/ck-b" 160 ""
"$g" train --fresh --max-steps 80 "$tmp/b.ini" >/dev/null 2>"$tmp/b1.err"
"$g" train "$tmp/b.ini" >"$tmp/b.out" 2>"$tmp/b2.err"
final "$tmp/a.out" >"$tmp/a.final"
final "$tmp/b.out" >"$tmp/b.final"
cmp -s "$tmp/a.final" "$tmp/b.final" && test -s "$tmp/a.final"
rc=$?
[ $rc -ne 0 ] && diff "$tmp/a.final" "$tmp/b.final" | head -6 | sed 's/^/# /'
ok $rc "stopped at 80 and resumed, the sequence model ends with identical metrics"

ini "$tmp/c.ini" "$tmp/ck-c" 10 "[feature.recent]
source = item
table = item
dim = 16
window = 3"
"$g" check "$tmp/c.ini" >/dev/null 2>"$tmp/c.err"
rc=$?
sed 's/^/# /' "$tmp/c.err" | head -2
test $rc -eq 2 && grep -q "c.ini:[0-9]*: \[feature.tokens\] pooling = none" "$tmp/c.err" \
    && grep -q "remove the other \[feature" "$tmp/c.err"
ok $? "pooling = none beside another feature is refused naming file, line and the fix"

ini "$tmp/d.ini" "$tmp/ck-d" 10 ""
sed -i 's/^source = item$/source = user/' "$tmp/d.ini"
"$g" check "$tmp/d.ini" >/dev/null 2>"$tmp/d.err"
rc=$?
sed 's/^/# /' "$tmp/d.err" | head -2
test $rc -eq 2 && grep -q "only the item sequence" "$tmp/d.err"
ok $? "pooling = none on the user column is refused"

# batching = tokens (MTGRBoost Algorithm 1): token counts level, sample counts vary
ini "$tmp/t.ini" "" 120 ""
sed -i 's/^batch_size = 32$/batch_size = 32\nbatching = tokens\nbatch_tokens = 300\nlog_every = 1/; /^log_every = 10$/d' "$tmp/t.ini"
"$g" train --fresh --metrics-out "$tmp/t.jsonl" "$tmp/t.ini" >"$tmp/t.out" 2>"$tmp/t.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/t.err" | tail -5
grep -q "steps of 300 tokens" "$tmp/t.err" || rc=1
ok $rc "batching = tokens trains and announces its 300-token target"
grep '"name":"tokens"' "$tmp/t.jsonl" | sed 's/.*"value":\([^}]*\)}/\1/' >"$tmp/t.tok"
grep '"name":"samples"' "$tmp/t.jsonl" | sed 's/.*"value":\([^}]*\)}/\1/' >"$tmp/t.smp"
echo "# tokens per step: $(sort -n "$tmp/t.tok" | head -1) .. $(sort -n "$tmp/t.tok" | tail -1); samples per step: $(sort -n "$tmp/t.smp" | head -1) .. $(sort -n "$tmp/t.smp" | tail -1)"
# every step but an epoch's last is within one window (20 tokens) of the target; the
# 600 users hold about 11,000 training tokens, so 120 steps span at most 4 epochs
bad=$(awk '$1 < 280 || $1 > 320' "$tmp/t.tok" | wc -l)
echo "# steps off target: $bad"
test "$(wc -l <"$tmp/t.tok")" -eq 120 && test "$bad" -le 4
ok $? "every step holds 300 +- 20 tokens (the closest cut), except an epoch's last"
test "$(sort -u "$tmp/t.smp" | wc -l)" -ge 3
ok $? "the number of samples per step varies with the sequence lengths"

"$g" train --fresh --profile --max-steps 20 "$tmp/t.ini" >/dev/null 2>"$tmp/p.err"
rc=$?
for stage in read+transform balance batch "data wait" lookup "dense fwd" head "dense bwd" \
    optimizer checkpoint evaluation "data work hidden behind compute:"; do
    grep -q "^  $stage " "$tmp/p.err" || { echo "# no '$stage' line"; rc=1; }
done
grep -q "^  data work hidden behind compute: [0-9.]*% ([0-9.]* s of batch assembly" \
    "$tmp/p.err" || { echo "# no hidden share"; rc=1; }
ok $rc "--profile prints the per-stage time breakdown and how much data work was hidden"
line=$(grep "^  counted work: " "$tmp/p.err")
echo "# $line"
echo "$line" | awk '{
    if (match($0, /counted work: [0-9.]+ GFLOP\/step \(dense blocks [0-9.]+, head [0-9.]+/)) {
        split(substr($0, RSTART, RLENGTH), f, /[ (,]+/); tot = f[3]; den = f[7]; hd = f[9] }
    if (match($0, /= [0-9.]+% of the SGEMM peak \([0-9.]+ GFLOP\/s/)) {
        split(substr($0, RSTART, RLENGTH), m, /[ %(]+/); mfu = m[2]; pk = m[7] }
    ok = tot > 0 && den > 0 && hd > 0 && (den + hd - tot) ^ 2 < 1e-5 && mfu > 0 && mfu <= 100 && pk > 0
    exit !ok }'
ok $? "--profile counts the blocks' and the head's flops and states the step's MFU against \
the SGEMM peak it measures"

# [train] train_on_valid: the second-to-last item of a user with valid and test targets
# trains too (the HSTU reference's protocol). One epoch, a window longer than any history,
# every step logged: the tokens trained are, per user of n items, n - 3 (n - 2 with the
# option) when n >= 3, else n - 1; the data line counts one example more per evaluated user
awk -F'\t' 'NR > 1 { n[$1]++ } END { for (u in n) { k = n[u];
        off += k >= 3 ? k - 3 : k - 1; on += k >= 3 ? k - 2 : k - 1; ev += k >= 3 }
        print off, on, ev }' "$tmp/data.tsv" >"$tmp/v.want"
read -r want_off want_on want_ev <"$tmp/v.want"
tok_sum() { grep '"name":"tokens"' "$1" | sed 's/.*"value":\([^}]*\)}/\1/' | awk '{ s += $1 } END { print s + 0 }'; }
ex_of() { sed -n 's/.* \([0-9]*\) training examples.*/\1/p' "$1" | head -1; }
for v in off on; do
    ini "$tmp/v-$v.ini" "" 0 ""
    sed -i 's/^window = 20$/window = 1000/; s/^steps = 0$/epochs = 1\nlog_every = 1/; /^log_every = 10$/d; /^eval_every = /d' "$tmp/v-$v.ini"
    [ $v = on ] && sed -i 's/^\[train\]$/[train]\ntrain_on_valid = true/' "$tmp/v-$v.ini"
    "$g" train --fresh --metrics-out "$tmp/v-$v.jsonl" "$tmp/v-$v.ini" >"$tmp/v-$v.out" 2>"$tmp/v-$v.err"
    echo $? >"$tmp/v-$v.rc"
done
echo "# tokens trained: $(tok_sum "$tmp/v-off.jsonl") and $(tok_sum "$tmp/v-on.jsonl"), expected $want_off and $want_on; examples $(ex_of "$tmp/v-off.err") and $(ex_of "$tmp/v-on.err"); $want_ev evaluated users"
test "$(cat "$tmp/v-off.rc")" = 0 && test "$(tok_sum "$tmp/v-off.jsonl")" = "$want_off" &&
    test "$(ex_of "$tmp/v-off.err")" = "$want_off"
ok $? "one epoch trains every token up to the validation item, and the data line counts them"
test "$(cat "$tmp/v-on.rc")" = 0 && test "$(tok_sum "$tmp/v-on.jsonl")" = "$want_on" &&
    test "$(ex_of "$tmp/v-on.err")" = "$want_on" && test "$want_on" -eq $((want_off + want_ev))
ok $? "train_on_valid = true: one more token per evaluated user ($want_ev), and still evaluates"
hv=$(metric "$tmp/v-on.jsonl" test hr@10)
test -n "$hv"
ok $? "train_on_valid = true: the test split is still scored (hr@10 $hv)"
sed 's/^\[train\]$/[train]\nearly_stop = 3/' "$tmp/v-on.ini" >"$tmp/v-es.ini"
"$g" check "$tmp/v-es.ini" >/dev/null 2>"$tmp/v-es.err"
rc=$?
sed 's/^/# /' "$tmp/v-es.err" | head -2
test $rc -eq 2 && grep -q "v-es.ini:[0-9]*: \[train\] train_on_valid = true with early_stop > 0" \
    "$tmp/v-es.err" && grep -q "set early_stop = 0" "$tmp/v-es.err"
ok $? "train_on_valid with early stopping is refused naming file, line and the fix"

# SASRec's row-wise and element-wise stages (LayerNorm, residual sums, dropout, the FFN
# activation) run a range of rows a thread, each row's arithmetic the serial loop's: both
# styles, dropout on, trained on 1 and on 3 threads (other ranges), give every validation
# and test metric bitwise and the same losses to 1e-6 (the head sums its loss over ranges)
for style in sasrec bert; do
    for th in 1 3; do
        ini "$tmp/th.ini" "" 20 ""
        blk="[dense.0]\nplugin = dense-sasrec\nstyle = $style\nnum_heads = 2\ndropout = 0.3"
        blk="$blk\npos_emb = true\nmax_len = 20\n[dense.1]\nplugin = dense-sasrec"
        blk="$blk\nstyle = $style\nnum_heads = 2\ndropout = 0.3"
        [ $style = sasrec ] && blk="$blk\nfinal_norm = true"
        # the MLP block gives way to the two SASRec blocks; every 10 steps an evaluation
        awk -v b="$blk" '/^\[dense\.0\]$/ { print b; skip = 1; next } /^\[/ { skip = 0 }
            !skip' "$tmp/th.ini" | sed -e 's/^eval_every = .*/eval_every = 10/' \
            -e 's/^dim = 16$/dim = 32/' -e 's/^log_every = .*/log_every = 1/' >"$tmp/th-$style-$th.ini"
        "$g" train --fresh --set pipeline.threads=$th --metrics-out "$tmp/th-$style-$th.jsonl" \
            "$tmp/th-$style-$th.ini" >/dev/null 2>"$tmp/th-$style-$th.err" ||
            sed 's/^/# /' "$tmp/th-$style-$th.err" | tail -3
        grep '"split":"\(valid\|test\)"' "$tmp/th-$style-$th.jsonl" |
            sed 's/.*\("step":.*\)}/\1/' >"$tmp/th-$style-$th.v"
        losses "$tmp/th-$style-$th.jsonl" >"$tmp/th-$style-$th.l"
    done
done
rc=0
for style in sasrec bert; do
    n=$(grep -c . "$tmp/th-$style-1.v")
    echo "# $style: $n metrics, $(grep -c . "$tmp/th-$style-1.l") losses"
    [ "$n" -ge 15 ] && cmp -s "$tmp/th-$style-1.v" "$tmp/th-$style-3.v" || rc=1
    paste "$tmp/th-$style-1.l" "$tmp/th-$style-3.l" | awk 'NF != 4 || $1 != $3 ||
        ($2 - $4) ^ 2 > 1e-12 * $2 ^ 2 { bad = 1 } END { exit bad || NR < 20 }' || rc=1
done
ok $rc "SASRec (both styles, dropout on) trained on 1 and on 3 threads: every validation and \
test metric bitwise, the losses to 1e-6"

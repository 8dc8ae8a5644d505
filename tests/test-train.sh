#!/bin/sh
# tests/test-train.sh - grmhost train/eval end to end on small generated data: training
# lowers the loss; a run interrupted by SIGTERM checkpoints and exits 0; a resumed run
# continues from the checkpoint step and ends bit-identical to an uninterrupted run (so
# save -> load restores every tensor exactly); a corrupted checkpoint is refused; eval
# reproduces the final metrics from the checkpoint, however its users are batched and
# threaded and its catalog chunked; usage errors and failures exit 2 and 1
# with one "grmhost: " line (core/cli.c). TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-train-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..16"

"$g" generate --users 400 --items 300 --clusters 10 --seed 7 --out "$tmp/data.tsv" || exit 1
ini() { # $1 file, $2 checkpoint dir, $3 steps
    { ini_body "$@"; } >"$1"
}
ini_body() {
    cat <<EOI
[pipeline]
name = test-train
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
sequence_columns = item
[feature.history]
source = item
table = item
dim = 16
[feature.recent]
source = item
table = item
dim = 16
window = 2
EOI
    ini_mlp_softmax
    cat <<EOI
[optimizer.sparse]
lr = 0.01
[optimizer.dense]
lr = 0.005
[train]
batch_size = 32
steps = $3
log_every = 10
eval_every = 1000000
topk = 10
[checkpoint]
dir = $2
every = 20
keep = 2
EOI
}
final() { grep -E '^(valid|test) ' "$1" | awk '{print $1, $2, $4}'; }

# 1. an uninterrupted run
ini "$tmp/a.ini" "$tmp/ck-a" 120
"$g" train --fresh --metrics-out "$tmp/a.jsonl" "$tmp/a.ini" >"$tmp/a.out" 2>"$tmp/a.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/a.err" | tail -5
ok $rc "train runs 120 steps and exits 0"

first=$(grep '"name":"loss"' "$tmp/a.jsonl" | head -1 | sed 's/.*"value":\([^}]*\)}/\1/')
last=$(grep '"name":"loss"' "$tmp/a.jsonl" | tail -1 | sed 's/.*"value":\([^}]*\)}/\1/')
echo "# train loss: first logged $first, last logged $last"
[ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.1) }'
ok $? "the training loss falls (first logged > last logged)"

grep -q '"split":"test","name":"hr@10"' "$tmp/a.jsonl" && grep -q '"split":"valid","name":"ndcg@10"' "$tmp/a.jsonl"
ok $? "--metrics-out has JSON lines with step, split, name and value for valid and test"

ls "$tmp/ck-a" | grep -q 'step-0000000120.grm' && test "$(ls "$tmp/ck-a" | wc -l)" -eq 2
ok $? "checkpoints every 20 steps, the newest 2 kept (keep = 2), the final one at step 120"

# 2. the same run in two halves resumes exactly
ini "$tmp/b.ini" "$tmp/ck-b" 120
"$g" train --fresh --max-steps 60 "$tmp/b.ini" >/dev/null 2>"$tmp/b1.err"
"$g" train -v "$tmp/b.ini" >"$tmp/b.out" 2>"$tmp/b2.err"
rc=$?
grep -q "resuming from $tmp/ck-b/step-0000000060.grm at step 60" "$tmp/b2.err" || rc=1
# emb-static (the default store) restores whole tensors: the checkpoint is read a tensor at
# a time, never interleaved (ABI 1.13 needs GRM_EMB_LOAD_INTERLEAVED of the store)
grep -q "step-0000000060.grm: read a tensor at a time (load_rows)" "$tmp/b2.err" || rc=1
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/b2.err" | tail -5
ok $rc "a second train resumes from the newest checkpoint and says so (emb-static: a tensor \
at a time)"
final "$tmp/a.out" >"$tmp/a.final"
final "$tmp/b.out" >"$tmp/b.final"
cmp -s "$tmp/a.final" "$tmp/b.final" && test -s "$tmp/a.final"
rc=$?
[ $rc -ne 0 ] && diff "$tmp/a.final" "$tmp/b.final" | head -6 | sed 's/^/# /'
ok $rc "stopped at 60 and resumed, the run ends with metrics identical to the uninterrupted run"

# 3. SIGTERM: finish the step, checkpoint, exit 0; then resume to the end
ini "$tmp/c.ini" "$tmp/ck-c" 100000
"$g" train --fresh "$tmp/c.ini" >/dev/null 2>"$tmp/c.err" &
pid=$!
i=0
while [ $i -lt 300 ] && ! grep -q "step 30/" "$tmp/c.err" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
kill -TERM $pid
wait $pid
rc=$?
stopped=$(sed -n 's/.*SIGTERM: stopping after step \([0-9]*\).*/\1/p' "$tmp/c.err")
echo "# stopped after step ${stopped:-?}"
test $rc -eq 0 && test -n "$stopped" && ls "$tmp/ck-c" | grep -q "step-$(printf %010d "$stopped").grm"
ok $? "SIGTERM finishes the step, writes a checkpoint at that step and exits 0"
ini "$tmp/c.ini" "$tmp/ck-c" $((stopped + 15))
"$g" train "$tmp/c.ini" >/dev/null 2>"$tmp/c2.err"
rc=$?
grep -q "at step $stopped " "$tmp/c2.err" || rc=1
ls "$tmp/ck-c" | grep -q "step-$(printf %010d $((stopped + 15))).grm" || rc=1
ok $rc "after the kill, train continues from step $stopped to the end"

# 4. a corrupted checkpoint is refused, naming the file
newest=$(ls "$tmp"/ck-a/step-*.grm | tail -1)
size=$(wc -c <"$newest")
printf '\377' | dd of="$newest" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
"$g" train "$tmp/a.ini" >/dev/null 2>"$tmp/d.err"
rc=$?
sed 's/^/# /' "$tmp/d.err" | tail -2
test $rc -eq 1 && grep -q "$newest" "$tmp/d.err" && grep -qi "checksum\|corrupt\|mismatch" "$tmp/d.err"
ok $? "a corrupted checkpoint is refused with an error naming the file (exit 1)"

# 5. eval reproduces the final metrics of the run from its checkpoint
"$g" eval "$tmp/b.ini" --checkpoint "$tmp/ck-b" >"$tmp/e.out" 2>"$tmp/e.err"
rc=$?
final "$tmp/e.out" >"$tmp/e.final"
cmp -s "$tmp/b.final" "$tmp/e.final" || rc=1
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/e.err" | tail -3
ok $rc "eval --checkpoint reproduces the trained run's valid and test metrics exactly"
# ... however its users are batched, threaded and its catalog chunked: one batch of all 400
# on one thread (a product of 64 users at a time, core/eval.c EVAL_BLOCK), batches of 7 on
# 2, and 63-item chunks (eval_memory_mb = 1 with batches of 4096: the banded pass)
rc=0
for v in "4096 1 256" "7 2 256" "4096 2 1"; do
    set -- $v
    "$g" eval "$tmp/b.ini" --checkpoint "$tmp/ck-b" --set train.eval_batch=$1 \
        --set pipeline.threads=$2 --set train.eval_memory_mb=$3 >"$tmp/e2.out" 2>"$tmp/e2.err"
    final "$tmp/e2.out" >"$tmp/e2.final"
    [ $3 = 1 ] && ! grep -q "ranked in [0-9]* chunks of 63 items" "$tmp/e2.err" && rc=1
    cmp -s "$tmp/b.final" "$tmp/e2.final" || { rc=1; echo "# differs: eval_batch=$1 threads=$2 \
eval_memory_mb=$3"; diff "$tmp/b.final" "$tmp/e2.final" | head -4 | sed 's/^/# /'; }
done
ok $rc "and with every user in one batch on one thread, batches of 7 on two, or the catalog \
in chunks of 63 items"

"$g" eval "$tmp/b.ini" --checkpoint "$tmp/nonexistent" >/dev/null 2>"$tmp/f.err"
rc=$?
test $rc -ne 0 && grep -q "$tmp/nonexistent" "$tmp/f.err"
ok $? "eval of a missing checkpoint fails naming it"

# 6. early stopping keeps the best model and tests it
ini "$tmp/g.ini" "$tmp/ck-g" 400
sed -i -e 's/^eval_every = .*/eval_every = 20\nearly_stop = 1/' -e 's/^lr = 0.01/lr = 0.2/' "$tmp/g.ini"
"$g" train --fresh --metrics-out "$tmp/g.jsonl" "$tmp/g.ini" >"$tmp/g.out" 2>"$tmp/g.err"
rc=$?
grep -E "early stop|restored" "$tmp/g.err" | sed 's/^/# /'
best=$(sed -n 's/.*restored the best model (step \([0-9]*\),.*/\1/p' "$tmp/g.err")
test $rc -eq 0 && grep -q "early stop at step" "$tmp/g.err" && test -n "$best" && test -f "$tmp/ck-g/best.grm"
ok $? "early_stop ends training when validation stops improving and restores best.grm"
# the validation NDCG@10 logged at the best step during training equals the final one
n_same=$(grep "\"step\":$best,\"split\":\"valid\",\"name\":\"ndcg@10\"" "$tmp/g.jsonl" | sed 's/.*"value"://' | sort -u | wc -l)
n_all=$(grep -c "\"step\":$best,\"split\":\"valid\",\"name\":\"ndcg@10\"" "$tmp/g.jsonl")
test "${n_all:-0}" -ge 2 && test "$n_same" -eq 1
ok $? "the restored model reproduces its validation NDCG@10 exactly (step ${best:-?})"

# 7. exit codes and messages (core/cli.c): a usage error prints "grmhost: what" and the
# command's usage and exits 2; a configuration error (unknown plugin) exits 2; a failure 1
"$g" train --max-steps x "$tmp/b.ini" >/dev/null 2>"$tmp/u1.err"; r1=$?
"$g" generate --users 0 >/dev/null 2>"$tmp/u2.err"; r2=$?
"$g" train --no-such-option "$tmp/b.ini" >/dev/null 2>"$tmp/u3.err"; r3=$?
echo "# exit codes: $r1 $r2 $r3"
test $r1 -eq 2 && test $r2 -eq 2 && test $r3 -eq 2 \
    && head -1 "$tmp/u1.err" | grep -qx "grmhost: --max-steps: 'x' is not a count" \
    && grep -q "^usage: grmhost train" "$tmp/u1.err" \
    && head -1 "$tmp/u2.err" | grep -qx "grmhost: '0' is not a positive integer" \
    && grep -q "^usage: grmhost generate" "$tmp/u2.err" && grep -q "^usage: grmhost train" "$tmp/u3.err"
ok $? "usage errors exit 2 with the error line and the command's usage"
"$g" plugins no-such-plugin >/dev/null 2>"$tmp/p.err"; r1=$?
"$g" train "$tmp/nonexistent.ini" >/dev/null 2>"$tmp/n.err"; r2=$?
echo "# exit codes: $r1 $r2"
test $r1 -eq 2 && test $r2 -eq 1 && test "$(wc -l <"$tmp/n.err")" -eq 1 \
    && grep -q "^grmhost: .*no-such-plugin" "$tmp/p.err" \
    && grep -q "^grmhost: $tmp/nonexistent.ini: cannot open" "$tmp/n.err"
ok $? "an unknown plugin exits 2, a missing file 1, each with one grmhost: line"

#!/bin/sh
# tests/test-train-heads.sh - heads of both ABIs train alike: head-sampled-softmax (a head
# plugin, ABI 1.5: it gathers the targets' and negatives' rows and sums their gradients
# itself) and the same numerics behind a dense-kind descriptor built for ABI 1.4
# (tests/plugins/legacy-ssm.c: the host's compatibility path in core/head.c runs its
# forward, gathers the rows for it, scales and sums them) give the same loss at every step
# and the same metrics, bit for bit, with one batch per step and with gradient accumulation
# (grad_scale < 1); with per-token negatives (share_k = 1: the 1.5 head reads the rows in
# place, the 1.4 path gathers them: equal within float rounding), and with catalog = all (the full-catalog cross-entropy: the head asks
# for every item row, the trainer looks them all up and steps them). A [head] that is
# neither is refused with the fix. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-heads-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..12"

# the fixture alone in a directory (tests/plugins/.libs also holds the broken loader fixtures)
mkdir -p "$tmp/legacy"
cp "$GRM_TOP_BUILDDIR/tests/plugins/.libs/dense-legacy-ssm.so" "$tmp/legacy/" || exit 1
"$g" generate --users 300 --items 200 --clusters 6 --seed 4 --out "$tmp/ev.tsv" || exit 1
ini() {   # $1 head plugin, $2 accumulate, $3 [head] keys (default: 64 negatives, logQ)
    printf '[pipeline]\nname = heads\nthreads = 2\nplugin_dirs = %s\n' "$tmp/legacy"
    ini_events "$tmp/ev.tsv"
    ini_history
    cat <<EOI
[dense.0]
plugin = dense-mlp
dims = 32,16
[head]
plugin = $1
${3:-negatives = 64
logq = true}
[train]
batch_size = 32
accumulate = $2
epochs = 2
seed = 11
log_every = 1
EOI
}
for acc in 1 2; do
    for h in head-sampled-softmax dense-legacy-ssm; do
        ini $h $acc >"$tmp/$h-$acc.ini"
        "$g" train "$tmp/$h-$acc.ini" --fresh -q --metrics-out "$tmp/$h-$acc.jsonl" \
            >/dev/null 2>"$tmp/$h-$acc.err" || sed 's/^/# /' "$tmp/$h-$acc.err" | tail -3
    done
    same_curve "$tmp/head-sampled-softmax-$acc.jsonl" "$tmp/dense-legacy-ssm-$acc.jsonl" 0
    ok $? "accumulate = $acc: the 1.5 head and the 1.4 dense-kind head give the same loss at every step"
    eval_metrics "$tmp/head-sampled-softmax-$acc.jsonl" >"$tmp/a"
    eval_metrics "$tmp/dense-legacy-ssm-$acc.jsonl" >"$tmp/b"
    test -s "$tmp/a" && cmp -s "$tmp/a" "$tmp/b"
    ok $? "accumulate = $acc: and the same validation and test metrics, bit for bit"
done
# per-token negatives: 4 of the step's 128 per row, read in place by the 1.5 head
tok='negatives = 128
share_k = 1
row_negatives = 4
in_batch = false
logq = true'
for h in head-sampled-softmax dense-legacy-ssm; do
    ini $h 1 "$tok" >"$tmp/$h-tok.ini"
    "$g" train "$tmp/$h-tok.ini" --fresh -q --max-steps 20 --metrics-out "$tmp/$h-tok.jsonl" \
        >/dev/null 2>"$tmp/$h-tok.err" || sed 's/^/# /' "$tmp/$h-tok.err" | tail -3
done
same_curve "$tmp/head-sampled-softmax-tok.jsonl" "$tmp/dense-legacy-ssm-tok.jsonl" 1e-4
ok $? "share_k = 1: rows read in place (1.5) and gathered (1.4) give the same loss over "\
"20 steps (rel 1e-4)"
# catalog = all: every item is a class; the 1.4 path (the host gathers all rows) agrees
full='catalog = all
in_batch = false
label_smoothing = 0.1'
for h in head-sampled-softmax dense-legacy-ssm; do
    ini $h 1 "$full" >"$tmp/$h-all.ini"
    "$g" train "$tmp/$h-all.ini" --fresh --metrics-out "$tmp/$h-all.jsonl" \
        >"$tmp/$h-all.out" 2>"$tmp/$h-all.err" || sed 's/^/# /' "$tmp/$h-all.err" | tail -3
done
same_curve "$tmp/head-sampled-softmax-all.jsonl" "$tmp/dense-legacy-ssm-all.jsonl" 0
ok $? "catalog = all: the 1.5 head and the 1.4 dense-kind head give the same loss at "\
"every step"
e="$tmp/head-sampled-softmax-all.err"
items=$(sed -n 's/.* -> [0-9]* users, \([0-9]*\) items,.*/\1/p' "$e")
grep -q ", $items negatives per step" "$e"
ok $? "catalog = all: a step scores all $items items ($(grep -o '[0-9]* negatives per step' "$e"))"
# the clustered data is learnable: the full softmax must beat the most-popular baseline
awk '$1 == "test" && $2 == "hr@10" { m = $4 } $1 == "test" && $2 == "mostpop_hr@10" { p = $4 }
     END { printf "%s %s\n", m, p; exit !(m > p) }' "$tmp/head-sampled-softmax-all.out" >"$tmp/hr"
ok $? "catalog = all: test hr@10 above the most-popular baseline (model, most-popular: "\
"$(cat "$tmp/hr"))"
# label smoothing is applied: a run without it has a different loss curve
ini head-sampled-softmax 1 'catalog = all
in_batch = false' >"$tmp/nols.ini"
"$g" train "$tmp/nols.ini" --fresh -q --metrics-out "$tmp/nols.jsonl" >/dev/null 2>&1
losses "$tmp/nols.jsonl" | wc -l | grep -qv "^0$" \
    && ! same_curve "$tmp/head-sampled-softmax-all.jsonl" "$tmp/nols.jsonl" 1e-3 >/dev/null
ok $? "catalog = all: label_smoothing 0.1 changes the loss (against label_smoothing 0)"
GRM_PLUGIN_PATH="$tmp/legacy" "$g" plugins dense-legacy-ssm 2>/dev/null | grep -q "(dense, ABI 1.4)"
ok $? "the fixture is a dense plugin built for ABI 1.4"

# a dense block without the loss ops is no head
ini dense-mlp 1 | sed 's/^negatives = 64$/dims = 16/; /^logq/d' >"$tmp/nohead.ini"
"$g" check "$tmp/nohead.ini" >/dev/null 2>"$tmp/nohead.err"
rc=$?
grep -q "\[head\] plugin = dense-mlp is not a retrieval head (it lacks the loss, loss_kind or negatives op); use head-sampled-softmax" "$tmp/nohead.err"
ok $(( rc == 2 ? $? : 1 )) "a dense block without the loss ops in [head] is refused with the fix (exit $rc)"
# a ranking head in a retrieval pipeline
ini head-bce 1 | sed '/^negatives/d; /^logq/d' >"$tmp/bce.ini"
"$g" train "$tmp/bce.ini" --fresh -q --max-steps 1 >/dev/null 2>"$tmp/bce.err"
rc=$?
grep -q "\[head\] plugin = head-bce is not a retrieval head (it lacks the negatives op); use head-sampled-softmax" "$tmp/bce.err"
ok $(( rc != 0 ? $? : 1 )) "a ranking head in a retrieval pipeline is refused: $(cat "$tmp/bce.err")"

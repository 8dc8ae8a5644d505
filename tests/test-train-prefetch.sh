#!/bin/sh
# tests/test-train-prefetch.sh - the data thread and the split of a global batch (issue 4):
# [train] prefetch = N assembles batches ahead of the trainer (MTGRBoost §3) without
# changing a single loss: a retrieval run on a merged emb-dynamic table (negatives merged
# into the prefetched keys), a ranking run under gradient accumulation and a sequence model
# under batching = tokens give bitwise the losses and test metrics of prefetch = 0; a failure
# on the data thread (an id that does not fit its merged table) stops the run with the
# message naming the feature; --profile says how much of the data work was hidden;
# --batches-in-memory (every batch assembled before step 1) trains the same steps. With
# mpirun: rank_split = tokens (TurboGR §4.1.3 global token reallocation) gives the losses of
# one rank and levels the ranks' token counts better than contiguous slices. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-prefetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..10"

"$g" generate --users 300 --items 200 --clusters 6 --seed 11 --out "$tmp/ev.tsv" || exit 1
awk -F'\t' 'NR > 1 { print $1 "," $2 "," ($2 % 3 == 0) }' "$tmp/ev.tsv" >"$tmp/rows.csv"

retr_ini() {   # $1 prefetch
    ini_retrieval_dynamic "$tmp/ev.tsv"
    cat <<EOI
[train]
time_column = ts
max_seq_len = 10
batch_size = 64
steps = 40
log_every = 1
eval_every = 15
prefetch = $1
EOI
}
rank_ini() {   # $1 prefetch, $2 rows file
    ini_rows "$2"
    cat <<EOI
[embedding]
plugin = emb-dynamic
[dense.0]
plugin = dense-mlp
dims = 16,1
[train]
task = ranking
label_columns = click
batch_size = 40
accumulate = 3
epochs = 2
log_every = 1
prefetch = $1
EOI
}
seq_ini() {   # $1 prefetch, $2 rank_split, $3 comm plugin
    ini_events "$tmp/ev.tsv"
    cat <<EOI
[feature.tokens]
source = item
table = item
dim = 16
window = 20
pooling = none
EOI
    ini_mlp_softmax
    cat <<EOI
in_batch = false
[train]
time_column = ts
batch_size = 32
batching = tokens
batch_tokens = 300
steps = 40
log_every = 1
prefetch = $1
rank_split = $2
[distributed]
plugin = $3
EOI
}

run() {   # NAME: train NAME.ini into NAME.jsonl
    "$g" train --fresh --quiet --metrics-out "$tmp/$1.jsonl" "$tmp/$1.ini" >/dev/null \
        2>"$tmp/$1.err"
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$tmp/$1.err" | tail -5
    return $rc
}
same_metric() {   # F1 F2 SPLIT NAME: the same value, to the digit
    a=$(metric "$1" "$3" "$4"); b=$(metric "$2" "$3" "$4")
    echo "# $3 $4: $a vs $b"
    [ -n "$a" ] && [ "$a" = "$b" ]
}

# 1-2. retrieval on a merged dynamic table: prefetch 0, 1 and 4 agree to the bit
for n in 0 1 4; do retr_ini $n >"$tmp/r$n.ini"; run r$n || echo "# r$n failed"; done
same_curve "$tmp/r0.jsonl" "$tmp/r1.jsonl" 0 && same_curve "$tmp/r0.jsonl" "$tmp/r4.jsonl" 0
ok $? "retrieval, merged emb-dynamic table: the 40 losses of prefetch 1 and 4 are prefetch 0's"
same_metric "$tmp/r0.jsonl" "$tmp/r4.jsonl" test hr@10 \
    && same_metric "$tmp/r0.jsonl" "$tmp/r4.jsonl" valid ndcg@10
ok $? "and the same validation and test metrics"

# 3. ranking with accumulate = 3 (slots released per batch)
for n in 0 3; do rank_ini $n "$tmp/rows.csv" >"$tmp/k$n.ini"; run k$n || echo "# k$n failed"; done
same_curve "$tmp/k0.jsonl" "$tmp/k3.jsonl" 0 && same_metric "$tmp/k0.jsonl" "$tmp/k3.jsonl" test auc
ok $? "ranking, accumulate = 3: prefetch 3 gives prefetch 0's losses and test AUC"

# 4. a sequence model under batching = tokens (step weights computed on the data thread)
for n in 0 2; do seq_ini $n contiguous comm-single >"$tmp/s$n.ini"; run s$n || echo "# s$n failed"; done
same_curve "$tmp/s0.jsonl" "$tmp/s2.jsonl" 0
ok $? "sequence model, batching = tokens: prefetch 2 gives prefetch 0's losses"

# 5. a failure on the data thread ends the run with its message: an id past the 2^61 - 1 a
# two-space merged table holds, on a user of many training rows
cp "$tmp/rows.csv" "$tmp/bad.csv"
i=0; while [ $i -lt 60 ]; do echo "4611686018427387904,$((i % 50 + 1)),1" >>"$tmp/bad.csv"; i=$((i + 1)); done
rank_ini 2 "$tmp/bad.csv" >"$tmp/bad.ini"
"$g" train --fresh --quiet "$tmp/bad.ini" >/dev/null 2>"$tmp/bad.err"
rc=$?
sed 's/^/# /' "$tmp/bad.err" | tail -2
echo "# exit $rc"
test $rc -ne 0 && grep -q 'feature "user": id 4611686018427387904' "$tmp/bad.err"
ok $? "an id that does not fit, met on the data thread, fails the run naming feature and id"

# 6. --profile: the data wait and the share hidden
"$g" train --fresh --profile --max-steps 20 "$tmp/s2.ini" >/dev/null 2>"$tmp/p.err"
rc=$?
grep -q "^  data wait " "$tmp/p.err" \
    && grep -q "^  data work hidden behind compute: [0-9.]*% .*2 batches ahead\|^  (\* on the data thread, 2 batches ahead" "$tmp/p.err" \
    || { sed 's/^/# /' "$tmp/p.err" | grep -A14 "^# profile"; rc=1; }
ok $rc "--profile reports the data thread, its wait and the share of data work hidden"

# 7. --batches-in-memory (the peer of bench/bench_pipeline.sh) trains the same steps
"$g" train --fresh --quiet --batches-in-memory --max-steps 40 --metrics-out "$tmp/m.jsonl" \
    "$tmp/r0.ini" >/dev/null 2>"$tmp/m.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/m.err" | tail -3
same_curve "$tmp/r0.jsonl" "$tmp/m.jsonl" 0
ok $(( rc | $? )) "--batches-in-memory assembles every batch first and gives the same 40 losses"

# 8-10. several ranks: global token reallocation
mpi_or_skip 8 10
for split in contiguous tokens; do
    seq_ini 2 $split comm-mpi >"$tmp/m-$split.ini"
    mpi 2 train --fresh --quiet \
        --metrics-out "$tmp/m-$split.jsonl" "$tmp/m-$split.ini" >"$tmp/m-$split.out" 2>&1
    echo $? >"$tmp/m-$split.rc"
done
rc=$(cat "$tmp/m-tokens.rc")
[ "$rc" -ne 0 ] && sed 's/^/# /' "$tmp/m-tokens.out" | tail -5
same_curve "$tmp/s0.jsonl" "$tmp/m-tokens.jsonl" 1e-5
ok $(( rc | $? )) "rank_split = tokens on 2 ranks: the 40 losses of one rank within 1e-5"
spread() { grep '"name":"token_spread"' "$1" | sed 's/.*"value":\([^}]*\)}/\1/' \
    | awk '{ s += $1; n++ } END { if (n) printf "%.2f", s / n }'; }
c=$(spread "$tmp/m-contiguous.jsonl"); t=$(spread "$tmp/m-tokens.jsonl")
echo "# mean max token difference between the 2 ranks: contiguous $c, tokens $t"
test "$(cat "$tmp/m-contiguous.rc")" -eq 0 && [ -n "$c" ] && [ -n "$t" ] \
    && awk -v c="$c" -v t="$t" 'BEGIN { exit !(t < c) }'
ok $? "and the ranks' token counts differ less than with contiguous slices"
max=$(grep '"name":"token_spread"' "$tmp/m-tokens.jsonl" | sed 's/.*"value":\([^}]*\)}/\1/' \
    | sort -n | tail -1)
echo "# largest difference with tokens: $max (longest sample: 20 tokens)"
[ -n "$max" ] && awk -v m="$max" 'BEGIN { exit !(m <= 20) }'
ok $? "with tokens no step's ranks differ by more than one sample's tokens (greedy bound)"

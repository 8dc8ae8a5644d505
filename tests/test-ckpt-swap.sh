#!/bin/sh
# tests/test-ckpt-swap.sh - the two checkpoint formats hold the same model: a run whose
# [checkpoint] plugin changes from ckpt-grm to ckpt-safetensors and back resumes from the
# other format's newest file and ends with every tensor bitwise equal to an uninterrupted
# run (compared through `grmhost inspect`'s per-tensor XXH64, computed over raw bytes by
# grmhost itself) and identical metrics; sharded safetensors checkpoints resume too and
# their shards are pruned with them; inspect refuses a damaged checkpoint naming it. Tensors
# above 16 MiB are hashed by inspect a piece at a time (load_rows, both formats), and their
# checksums are the one the .safetensors writer recorded over the whole tensor.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-swap-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..11"

"$g" generate --users 300 --items 200 --clusters 8 --seed 11 --out "$tmp/data.tsv" || exit 1
ini() { # $1 file, $2 checkpoint dir, $3 format plugin, $4 extra [checkpoint] line
    {
        ini_events "$tmp/data.tsv"
        ini_history
        ini_mlp_softmax
        cat <<EOI
[optimizer.dense]
lr = 0.005
[train]
batch_size = 32
steps = 90
log_every = 10
eval_every = 1000000
topk = 10
[checkpoint]
plugin = $3
dir = $2
every = 30
keep = 2
$4
EOI
    } >"$1"
}
final() { grep -E '^(valid|test) ' "$1" | awk '{print $1, $2, $4}'; }
# the tensor lines of inspect: name dtype shape bytes xxh64
tensors() { "$g" inspect "$1" | awk 'f && NF == 5; /^tensor /{f=1}'; }

# 1. the reference: 90 steps in ckpt-grm
ini "$tmp/a.ini" "$tmp/ck-a" ckpt-grm ""
"$g" train --fresh "$tmp/a.ini" >"$tmp/a.out" 2>"$tmp/a.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/a.err" | tail -5
ok $rc "a 90-step run with ckpt-grm checkpoints exits 0"

# 2. the same run: 30 steps in ckpt-grm, to 60 in ckpt-safetensors, to 90 in ckpt-grm
ini "$tmp/b1.ini" "$tmp/ck-b" ckpt-grm ""
ini "$tmp/b2.ini" "$tmp/ck-b" ckpt-safetensors ""
"$g" train --fresh --max-steps 30 "$tmp/b1.ini" >/dev/null 2>"$tmp/b1.err"
"$g" train --max-steps 30 "$tmp/b2.ini" >/dev/null 2>"$tmp/b2.err"
rc=$?
grep -q "resuming from $tmp/ck-b/step-0000000030.grm at step 30" "$tmp/b2.err" || rc=1
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/b2.err" | tail -5
ok $rc "with [checkpoint] plugin = ckpt-safetensors, train resumes from the ckpt-grm file"
"$g" train "$tmp/b1.ini" >"$tmp/b.out" 2>"$tmp/b3.err"
rc=$?
grep -q "resuming from $tmp/ck-b/step-0000000060.safetensors at step 60" "$tmp/b3.err" || rc=1
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/b3.err" | tail -5
ok $rc "back on ckpt-grm, train resumes from the ckpt-safetensors file"

tensors "$tmp/ck-a/step-0000000090.grm" >"$tmp/a.t"
tensors "$tmp/ck-b/step-0000000090.grm" >"$tmp/b.t"
n=$(wc -l <"$tmp/a.t")
echo "# $n tensors in the final checkpoint"
[ "$n" -gt 3 ] && cmp -s "$tmp/a.t" "$tmp/b.t"
rc=$?
[ $rc -ne 0 ] && diff "$tmp/a.t" "$tmp/b.t" | head -6 | sed 's/^/# /'
ok $rc "after grm -> safetensors -> grm every tensor at step 90 is bitwise the uninterrupted run's"
final "$tmp/a.out" >"$tmp/a.final"
final "$tmp/b.out" >"$tmp/b.final"
test -s "$tmp/a.final" && cmp -s "$tmp/a.final" "$tmp/b.final"
ok $? "and its final metrics are identical"

# 3. the same step in both formats holds the same bytes
tensors "$tmp/ck-b/step-0000000060.safetensors" >"$tmp/b60.t"
ini "$tmp/c.ini" "$tmp/ck-c" ckpt-safetensors ""
"$g" train --fresh --max-steps 60 "$tmp/c.ini" >/dev/null 2>&1
tensors "$tmp/ck-c/step-0000000060.safetensors" >"$tmp/c60.t"
test -s "$tmp/b60.t" && cmp -s "$tmp/b60.t" "$tmp/c60.t"
ok $? "a resumed and an uninterrupted run write bitwise-equal .safetensors at step 60"

"$g" inspect "$tmp/ck-c/step-0000000060.safetensors" >"$tmp/i.out" 2>&1
grep -q '^step: *60$' "$tmp/i.out" && grep -q '^config hash: *[0-9a-f]\{16\}$' "$tmp/i.out" &&
    grep -q '^pipeline: ' "$tmp/i.out" && grep -q 'verified by ckpt-safetensors' "$tmp/i.out"
ok $? "inspect prints the step, pipeline, config hash and the verifying plugin"

# 4. sharded: 1 kB shards; resume reads them, pruning removes old steps' shards
ini "$tmp/d.ini" "$tmp/ck-d" ckpt-safetensors "shard_bytes = 1024"
"$g" train --fresh --max-steps 60 "$tmp/d.ini" >/dev/null 2>"$tmp/d1.err"
"$g" train "$tmp/d.ini" >"$tmp/d.out" 2>"$tmp/d2.err"
rc=$?
grep -q "resuming from $tmp/ck-d/step-0000000060.safetensors at step 60" "$tmp/d2.err" || rc=1
ls "$tmp/ck-d" | grep -q 'step-0000000090-00002-of-' || rc=1
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/d2.err" | tail -5
ok $rc "sharded safetensors checkpoints (shard_bytes = 1024) resume"
tensors "$tmp/ck-d/step-0000000090.safetensors" >"$tmp/d.t"
test -s "$tmp/d.t" && cmp -s "$tmp/a.t" "$tmp/d.t" && ! ls "$tmp/ck-d" | grep -q 'step-0000000030'
rc=$?
[ $rc -ne 0 ] && ls "$tmp/ck-d" | head -8 | sed 's/^/# /'
ok $rc "the sharded step 90 equals the reference bitwise; step 30's shards were pruned"

# 5. a damaged checkpoint
f="$tmp/ck-c/step-0000000060.safetensors"
sz=$(wc -c <"$f")
printf 'X' | dd of="$f" bs=1 seek=$((sz - 3)) conv=notrunc 2>/dev/null
"$g" inspect "$f" >/dev/null 2>"$tmp/e"
[ $? -eq 1 ] && grep -q "^grmhost: ckpt-safetensors: $f: checksum mismatch in tensor" "$tmp/e"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/e"
ok $rc "inspect of a damaged checkpoint exits 1 naming the file and the tensor"

# 11. a tensor in several ckpt-grm pieces (emb-static, 39,962 rows of dim 128: weight 20 MB,
# Adam state 41 MB) is listed by inspect from its pieces with the checksum of the whole
"$g" generate --users 3000 --items 40000 --clusters 60 --seed 5 --out "$tmp/big.tsv" || exit 1
for f in ckpt-grm ckpt-safetensors; do
    {
        ini_events "$tmp/big.tsv"
        cat <<EOI
[feature.history]
source = item
table = item
dim = 128
window = 5
[dense.0]
plugin = dense-mlp
dims = 128
[head]
plugin = head-sampled-softmax
negatives = 16
[train]
batch_size = 64
steps = 2
eval_every = 1000000
[checkpoint]
plugin = $f
dir = $tmp/big-$f
EOI
    } >"$tmp/big-$f.ini"
    "$g" train --fresh --quiet "$tmp/big-$f.ini" >/dev/null 2>"$tmp/big-$f.err" \
        || sed 's/^/# /' "$tmp/big-$f.err" | tail -3
done
tensors "$tmp/big-ckpt-grm/step-0000000002.grm" >"$tmp/big-grm.t"
tensors "$tmp/big-ckpt-safetensors/step-0000000002.safetensors" >"$tmp/big-st.t"
sed 's/^/# /' "$tmp/big-grm.t" | grep "emb\."
# the reference: the XXH64 the .safetensors header records, computed by its writer over the
# whole tensor
want=$(grep -a -o '"xxh64:emb\.item\.opt_state":"[0-9a-f]\{16\}"' \
    "$tmp/big-ckpt-safetensors/step-0000000002.safetensors" | head -1 | cut -d'"' -f4)
echo "# recorded XXH64 of emb.item.opt_state: $want"
awk -v w="$want" '$1 == "emb.item.opt_state" && $4 > 2 * 16777216 && $5 == w { ok = 1 }
    END { exit !ok }' "$tmp/big-grm.t" && cmp -s "$tmp/big-grm.t" "$tmp/big-st.t"
ok $? "tensors of several 16 MiB pieces, hashed by inspect a piece at a time in both \
formats: the checksum the writer recorded over the whole tensor"

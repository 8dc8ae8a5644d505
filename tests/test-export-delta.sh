#!/bin/sh
# tests/test-export-delta.sh - incremental export ([export] every = N, core/delta.c): the
# deltas added up (`grmhost export --since 0`) equal, bitwise, the full export of the
# checkpoint of the same step, with a static and with a hash embedding store; --since S
# holds only rows changed after S; a run killed with SIGKILL while writing deltas leaves
# the earlier deltas whole (the interrupted one is a temp file), and the resumed run's
# deltas again add up to its final checkpoint. Tensors are compared through `grmhost
# inspect`'s per-tensor XXH64 of the raw bytes.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-delta-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..15"

"$g" generate --users 300 --items 200 --clusters 8 --seed 5 --out "$tmp/data.tsv" || exit 1
ini() { # $1 file, $2 checkpoint dir, $3 steps, $4 export every, $5 store
    {
        ini_events "$tmp/data.tsv"
        ini_history
        printf '[embedding]\nplugin = %s\n' "$5"
        ini_mlp_softmax
        cat <<EOI
[optimizer.dense]
lr = 0.005
[train]
batch_size = 32
steps = $3
log_every = 10
eval_every = 1000000
[checkpoint]
dir = $2
every = 1000000
[export]
every = $4
EOI
    } >"$1"
}
# name dtype shape bytes xxh64 of each tensor of a file
tensors() { "$g" inspect "$1" | awk 'f && NF == 5; /^tensor /{f=1}' | sort; }
# NAME INI CK: export INI's deltas added up (--since 0) and the newest checkpoint of CK into
# NAME-since0 and NAME-full; 0 when their tables.safetensors are the same, bitwise
sum_is_full() {
    "$g" export -q "$2" --since 0 --out "$tmp/$1-since0" &&
        "$g" export -q "$2" --checkpoint "$3" --out "$tmp/$1-full" || return 1
    tensors "$tmp/$1-since0/tables.safetensors" >"$tmp/$1-0.t"
    tensors "$tmp/$1-full/tables.safetensors" >"$tmp/$1-f.t"
    test -s "$tmp/$1-0.t" && cmp -s "$tmp/$1-0.t" "$tmp/$1-f.t" && return 0
    diff "$tmp/$1-0.t" "$tmp/$1-f.t" | head -4 | sed 's/^/# /'
    return 1
}
ids() { "$g" inspect "$1" | awk '$1 ~ /\.ids$/ {printf "%s%s", s, $3; s = " "}'; }
# NAME INI CK: --since 5 holds exactly delta 6's rows, fewer than --since 0 (sum_is_full's)
since5_is_delta6() {
    "$g" export -q "$2" --since 5 --out "$tmp/$1-since5" || return 1
    r5=$(ids "$tmp/$1-since5/tables.safetensors")
    r0=$(ids "$tmp/$1-since0/tables.safetensors")
    d6=$(ids "$3/export/delta-0000000006.safetensors")
    echo "# rows: since 0 $r0, since 5 $r5, delta 6 alone $d6"
    [ -n "$r5" ] && [ "$r5" = "$d6" ] && [ "$r5" != "$r0" ]
}

# 1. static store: 60 steps, a delta every 10
ini "$tmp/a.ini" "$tmp/ck-a" 60 10 emb-static
"$g" train --fresh "$tmp/a.ini" >/dev/null 2>"$tmp/a.err"
rc=$?
n=$(ls "$tmp/ck-a/export" 2>/dev/null | grep -c '^delta-.*\.safetensors$')
[ "$n" -eq 6 ] || rc=1
[ $rc -ne 0 ] && { sed 's/^/# /' "$tmp/a.err" | tail -5; ls "$tmp/ck-a/export" | sed 's/^/# /'; }
ok $rc "[export] every = 10 over 60 steps writes delta-1 .. delta-6 beside the checkpoints"

sum_is_full a "$tmp/a.ini" "$tmp/ck-a"
ok $? "emb-static: base + deltas (--since 0) == the full export of step 60, bitwise"
tensors "$tmp/a-since0/dense.safetensors" >"$tmp/a0.d"
tensors "$tmp/a-full/dense.safetensors" >"$tmp/af.d"
test -s "$tmp/a0.d" && cmp -s "$tmp/a0.d" "$tmp/af.d"
ok $? "and the newest delta's dense parameters == the checkpoint's, bitwise"

since5_is_delta6 a "$tmp/a.ini" "$tmp/ck-a"
ok $? "--since 5 holds exactly delta 6's rows, fewer than the whole table"

# 2. hash store (emb-dynamic): the same identity
ini "$tmp/b.ini" "$tmp/ck-b" 40 7 emb-dynamic
"$g" train --fresh "$tmp/b.ini" >/dev/null 2>"$tmp/b.err" &&
    sum_is_full b "$tmp/b.ini" "$tmp/ck-b"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/b.err" | tail -3
ok $rc "emb-dynamic, every 7 over 40 steps (a last delta at the end): --since 0 == full export"

# 2a. a keyed store of ABI 1.9, without tensor_rows (tests/plugins/emb-legacy-keyed.c:
# emb-dynamic's code behind the older descriptor): the host reads its tables whole through
# tensors() and gathers the rows by key (table_open_whole in core/recommend.c); checkpoints,
# deltas and exports take that path. The same run exports what emb-dynamic's did, and its
# deltas add up to it. The fixture hands each table's rows out in reverse order of id, so
# the gather must sort them by key: without the sort, or with a row gathered from the wrong
# place, this fails.
ini "$tmp/k.ini" "$tmp/ck-k" 40 7 emb-legacy-keyed
GRM_PLUGIN_PATH="$GRM_TOP_BUILDDIR/tests/plugins/.libs" "$g" train --fresh "$tmp/k.ini" \
    >/dev/null 2>"$tmp/k.err" &&
    GRM_PLUGIN_PATH="$GRM_TOP_BUILDDIR/tests/plugins/.libs" sum_is_full k "$tmp/k.ini" "$tmp/ck-k"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/k.err" | tail -3
test $rc -eq 0 && cmp -s "$tmp/k-f.t" "$tmp/b-f.t"
ok $? "a keyed store of ABI 1.9 (no tensor_rows): the same run's full export is emb-dynamic's, \
bitwise, and its deltas add up to it"

# 2b. a tiered emb-dynamic table, most of its rows in the backing file, read and diffed a
# range of rows at a time (1 MiB: 2,048 rows of dim 128) and its changed rows, none held
# (memory_mb = 0), read again by ranges of the runs between them as the file is written
{
    ini_events "$tmp/big.tsv"
    cat <<EOI
[feature.history]
source = item
table = item
dim = 128
window = 10
[embedding]
plugin = emb-dynamic
backing = $tmp/back
cache_bytes = 1M
[dense.0]
plugin = dense-mlp
dims = 64,128
[head]
plugin = head-sampled-softmax
negatives = 256
[optimizer.dense]
lr = 0.005
[train]
batch_size = 64
steps = 60
log_every = 10
eval_every = 1000000
[checkpoint]
dir = $tmp/ck-t
every = 1000000
[export]
every = 10
memory_mb = 0
EOI
} >"$tmp/t.ini"
mkdir -p "$tmp/back"
"$g" generate --users 1000 --items 30000 --clusters 8 --seed 5 --out "$tmp/big.tsv" &&
    "$g" train --fresh "$tmp/t.ini" >/dev/null 2>"$tmp/t.err" &&
    sum_is_full t "$tmp/t.ini" "$tmp/ck-t"
rc=$?
items=$(awk '$1 == "emb.item.ids" { print $3 }' "$tmp/t-f.t" | tr -d '[]')
fetched=$(sed -n 's/.*rows (budget [0-9]*), \([0-9]*\) fetched.*/\1/p' "$tmp/t.err")
echo "# item rows $items, fetched from the backing file $fetched"
[ "${items:-0}" -gt 6144 ] && [ "${fetched:-0}" -gt 0 ] || rc=1
[ $rc -ne 0 ] && tail -3 "$tmp/t.err" | sed 's/^/# /'
ok $rc "tiered emb-dynamic, its $items item rows over 3 ranges and mostly in the backing file: --since 0 == full export, bitwise"

since5_is_delta6 t "$tmp/t.ini" "$tmp/ck-t"
ok $? "and its last delta holds only the rows changed since the one before"

# 2c. a table that evicts (emb-dynamic, max_rows): its deltas remove keys
ini "$tmp/e.ini" "$tmp/ck-e" 40 10 emb-dynamic
printf 'max_rows = 120\nevict = lru\n' >"$tmp/e.add"
sed -i "/^plugin = emb-dynamic\$/r $tmp/e.add" "$tmp/e.ini"
"$g" train --fresh "$tmp/e.ini" >/dev/null 2>"$tmp/e.err" &&
    sum_is_full e "$tmp/e.ini" "$tmp/ck-e" &&
    "$g" export -q "$tmp/e.ini" --since 2 --out "$tmp/e-since2"
rc=$?
[ $rc -ne 0 ] && tail -3 "$tmp/e.err" | sed 's/^/# /'
ok $rc "a table that evicts (max_rows = 120): --since 0 == full export, bitwise"

# removed after 2: the keys deltas 3 and 4 remove, less those a later delta brings back
rm_of() { "$g" inspect "$1" | awk '$1 ~ /\.removed$/ { print $3 }' | tr -d '[]'; }
r3=$(rm_of "$tmp/ck-e/export/delta-0000000003.safetensors")
r4=$(rm_of "$tmp/ck-e/export/delta-0000000004.safetensors")
rs=$(rm_of "$tmp/e-since2/tables.safetensors")
echo "# keys removed: delta 3 $r3, delta 4 $r4, since 2 $rs"
[ "${r3:-0}" -gt 0 ] && [ "${rs:-0}" -gt 0 ] && [ "$rs" -le $((r3 + r4)) ] &&
    [ -z "$(rm_of "$tmp/e-since0/tables.safetensors")" ]
ok $? "and --since 2 reports the keys removed after delta 2 ($rs), --since 0 none"

# 3. SIGKILL while deltas are being written (one every step)
# (a run far longer than the wait: on a fast machine 400 steps ended before the kill, left
# a final checkpoint, and the "restart" below resumed it instead of starting over)
ini "$tmp/c.ini" "$tmp/ck-c" 10000000 1 emb-dynamic
"$g" train --fresh "$tmp/c.ini" >/dev/null 2>"$tmp/c1.err" &
pid=$!
i=0
# (count finished deltas only: counting the one being written, delta-N.safetensors.tmp.X,
# ended the wait at 7 finished ones once, under a loaded parallel make check)
while [ $i -lt 600 ] &&
    [ "$(ls "$tmp/ck-c/export" 2>/dev/null | grep -c '^delta-[0-9]*\.safetensors$')" -lt 8 ]
do
    sleep 0.1
    i=$((i + 1))
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
krc=$?
n=$(ls "$tmp/ck-c/export" | grep -c '^delta-[0-9]*\.safetensors$')
echo "# killed after $n deltas; $(ls "$tmp/ck-c/export" | grep -c '\.tmp\.') temp file(s) left"
bad=0
for f in "$tmp"/ck-c/export/delta-*.safetensors; do
    "$g" inspect "$f" >/dev/null 2>&1 || bad=$((bad + 1))
done
[ $krc -eq 137 ] && [ "$n" -ge 8 ] && [ $bad -eq 0 ] && "$g" export -q "$tmp/c.ini" --since 0 --out "$tmp/c-kill"
ok $? "after kill -9 every delta file verifies and they add up (--since 0 exits 0)"

# resume: no checkpoint was written, so training starts over; the new deltas are diffed
# against what the old ones add up to and continue their sequence
sed -i 's/^steps = 10000000$/steps = 20/' "$tmp/c.ini"
"$g" train "$tmp/c.ini" >/dev/null 2>"$tmp/c2.err"
rc=$?
grep -q "incremental export continues after delta $n " "$tmp/c2.err" || rc=1
ls "$tmp/ck-c/export" | grep -q '\.tmp\.' && rc=1
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/c2.err" | tail -4
ok $rc "the next run continues the sequence after delta $n, says so, removes the temp file"

sum_is_full c "$tmp/c.ini" "$tmp/ck-c"
ok $? "old deltas + the restarted run's deltas == its final checkpoint's export, bitwise"

# 4. errors
mv "$tmp/ck-a/export/delta-0000000003.safetensors" "$tmp/d3"
"$g" export -q "$tmp/a.ini" --since 0 --out "$tmp/x" 2>"$tmp/e1"
[ $? -eq 1 ] && grep -q "delta 3 is missing (the sequence goes from 1 to 6)" "$tmp/e1"
ok $? "a gap in the sequence is refused naming the missing delta"
"$g" export -q "$tmp/a.ini" --since 1 --checkpoint "$tmp/ck-a" --out "$tmp/x" 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q "exclusive" "$tmp/e2"
ok $? "--since with --checkpoint is a usage error"

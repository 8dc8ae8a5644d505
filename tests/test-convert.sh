#!/bin/sh
# tests/test-convert.sh - grmhost convert and inspect end to end: a small hand-written
# TSV converted with a given and an inferred schema, inspect's schema and sizes, a
# pipeline trained on the grmcol file reaching the same metrics as on the text (so the
# data are identical), usage and file errors with exit codes 0/1/2, and MovieLens 100K
# (u.data.zst) when GRM_DATA_DIR is set. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-convert-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..20"

printf 'user\titem\trating\tname\n1\t10\t4.5\talpha\n1\t11\t3\t\n%s\n%s\n' \
    "$(printf '2\t10\t5\tbeta')" "$(printf '3\t12\t1.5\tgamma')" >"$tmp/s.tsv"

# 1-4: a given schema
"$g" convert --header --rows-per-group 3 --columns user:i64,item:i64,rating:f32,name:str \
    "$tmp/s.tsv" "$tmp/s.grmcol" >"$tmp/c.out" 2>"$tmp/c.err"
ok $? "convert with --columns exits 0"
grep -q "4 rows, 2 row groups, 4 columns" "$tmp/c.out"
ok $? "convert reports 4 rows in 2 row groups of 3 and 1"
test -f "$tmp/s.grmcol" && ! test -f "$tmp/s.grmcol.tmp"
ok $? "convert leaves OUT and no OUT.tmp"
"$g" inspect --groups "$tmp/s.grmcol" >"$tmp/i.out" 2>&1
rc=$?
grep -q "4 rows, 2 row groups, 4 columns" "$tmp/i.out" &&
    grep -Eq '^user +i64 ' "$tmp/i.out" && grep -Eq '^rating +f32 ' "$tmp/i.out" &&
    grep -Eq '^name +string ' "$tmp/i.out" && grep -Eq '^total ' "$tmp/i.out" &&
    grep -Eq '^1 +1 ' "$tmp/i.out"
ok $(( rc | $? )) "inspect prints the schema, totals and row groups (group 1: 1 row)"

# 5: uncompressed sizes are the spec's payload sizes (grmcol.md §4): user i64 = 8 bytes a row;
# name = 8*(rows+1) offsets + bytes: group 0 (alpha, '', beta) 32+9, group 1 (gamma) 16+5
awk '$1 == "user" && $4 == 32 { u = 1 } $1 == "name" && $4 == 62 { n = 1 } END { exit !(u && n) }' \
    "$tmp/i.out"
ok $? "inspect's uncompressed bytes match the payload sizes of grmcol.md §4 (user 32, name 62)"

# 6-7: an inferred schema
"$g" convert --header "$tmp/s.tsv" "$tmp/inf.grmcol" >"$tmp/c2.out" 2>"$tmp/c2.err"
ok $? "convert without --columns exits 0"
grep -q "inferred columns user:i64,item:i64,rating:f32,name:str" "$tmp/c2.err"
ok $? "the inferred schema is user:i64,item:i64,rating:f32,name:str (names from the header)"

# 8-9: variable-length lines become an id and a list; zstd input
if command -v zstd >/dev/null 2>&1; then
    printf '1 5 6 7\n2 8\n3 9 10\n' | zstd -q -c >"$tmp/seq.txt.zst"
    "$g" convert --format ssv "$tmp/seq.txt.zst" "$tmp/seq.grmcol" >/dev/null 2>"$tmp/c3.err"
    ok $? "convert reads zstd input with format ssv"
    grep -q "inferred columns c0:i64,items:list_i64" "$tmp/c3.err"
    ok $? "lines of different lengths infer c0:i64,items:list_i64"
else
    skip "no zstd command" "convert reads zstd input"
    skip "no zstd command" "lines of different lengths infer a list"
fi

# 10-14: errors and exit codes
"$g" convert "$tmp/missing.tsv" "$tmp/x.grmcol" 2>"$tmp/e1" >/dev/null
rc=$?
[ $rc -eq 1 ] && grep -q "missing.tsv" "$tmp/e1"
ok $? "a missing input exits 1 naming the file"
"$g" convert --columns user:i64,item:i64 "$tmp/s.tsv" "$tmp/x.grmcol" 2>"$tmp/e2" >/dev/null
rc=$?
[ $rc -eq 1 ] && grep -q "s.tsv:1" "$tmp/e2" && ! test -f "$tmp/x.grmcol" &&
    ! test -f "$tmp/x.grmcol.tmp"
ok $? "a bad row exits 1 with file:line and leaves no output"
"$g" convert --level 30 "$tmp/s.tsv" "$tmp/x.grmcol" 2>/dev/null
[ $? -eq 2 ]
ok $? "--level 30 is a usage error (exit 2)"
"$g" convert --columns user:int "$tmp/s.tsv" "$tmp/x.grmcol" 2>"$tmp/e3"
rc=$?
[ $rc -eq 2 ] && grep -q "unknown type 'int'" "$tmp/e3"
ok $? "a bad --columns entry exits 2 with reader-text's message"
head -c 100 "$tmp/s.grmcol" >"$tmp/cut.grmcol"
"$g" inspect "$tmp/cut.grmcol" 2>"$tmp/e4" >/dev/null
rc=$?
[ $rc -eq 1 ] && grep -q "cut.grmcol" "$tmp/e4" && grep -q "truncated" "$tmp/e4"
ok $? "inspect of a truncated file exits 1 naming it"

# 15: --help
"$g" convert --help | grep -q "usage: grmhost convert" &&
    "$g" inspect --help | grep -q "usage: grmhost inspect" &&
    "$g" --help | grep -q "convert IN OUT.grmcol"
ok $? "convert --help, inspect --help and the top-level help describe the commands"

# 16-17: the same training on text and on grmcol: identical data give identical metrics
"$g" generate --users 300 --items 200 --clusters 8 --seed 5 --out "$tmp/data.tsv" || exit 1
"$g" convert -q --header --rows-per-group 500 --columns user:i64,item:i64,ts:i64 \
    "$tmp/data.tsv" "$tmp/data.grmcol"
ok $? "convert the generated interactions (several row groups)"
ini() { # $1 file, $2 reader lines
    cat >"$1" <<EOI
[pipeline]
name = test-convert
threads = 1
[reader]
$2
[transform.seq]
plugin = transform-basic
sequence_by = user
sequence_order = ts
sequence_columns = item
[feature.history]
source = item
table = item
dim = 8
[dense.0]
plugin = dense-mlp
dims = 16,8
[head]
plugin = head-sampled-softmax
negatives = 16
[train]
batch_size = 32
steps = 30
log_every = 10
eval_every = 1000000
topk = 10
EOI
}
ini "$tmp/t.ini" "plugin = reader-text
path = $tmp/data.tsv
header = true
columns = user:i64,item:i64,ts:i64"
ini "$tmp/c.ini" "plugin = reader-grmcol
path = $tmp/data.grmcol
prefetch = 2"
"$g" train -q --fresh --metrics-out "$tmp/t.jsonl" "$tmp/t.ini" >/dev/null 2>"$tmp/t.err" &&
    "$g" train -q --fresh --metrics-out "$tmp/c.jsonl" "$tmp/c.ini" >/dev/null 2>"$tmp/c.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/t.err" "$tmp/c.err" | tail -5
# Every metric but the wall-clock ones (samples_per_s, read_s) and the memory peak
# (read_maxrss_kb) must be identical; each record's time, run id and pipeline hash (the
# two files name different readers) are not compared.
nondet='_per_s\|"read_s"\|"read_maxrss_kb"'
own='s/^{"time":"[^"]*","run":"[^"]*","pipeline":"[^"]*",/{/'
grep -v "$nondet" "$tmp/t.jsonl" | sed "$own" >"$tmp/t.m" &&
    grep -v "$nondet" "$tmp/c.jsonl" | sed "$own" >"$tmp/c.m"
[ $rc -eq 0 ] && grep -q '"name":"loss"' "$tmp/t.m" && grep -q '"name":"hr@10"' "$tmp/t.m" &&
    cmp -s "$tmp/t.m" "$tmp/c.m"
ok $? "training on reader-grmcol gives exactly reader-text's losses and metrics (same data)"

# 18-20: MovieLens 100K
u="${GRM_DATA_DIR:-}/ml-100k/u.data.zst"
if [ -n "${GRM_DATA_DIR:-}" ] && [ -f "$u" ]; then
    "$g" convert -q --columns user:i64,item:i64,rating:f32,ts:i64 "$u" "$tmp/u.grmcol"
    ok $? "convert MovieLens 100K u.data.zst"
    "$g" inspect "$tmp/u.grmcol" >"$tmp/u.out"
    grep -q "100000 rows, 2 row groups, 4 columns" "$tmp/u.out"
    ok $? "inspect: 100000 rows in 2 row groups of 65536"
    awk '$1 == "total" { exit !($3 == 2800000 && $4 > 1.0) }' "$tmp/u.out"
    ok $? "inspect: 2800000 uncompressed bytes (3 x i64 + f32 per row), compression ratio > 1"
    sed 's/^/# /' "$tmp/u.out"
else
    for d in "convert MovieLens 100K" "inspect row groups" "inspect sizes"; do
        skip "GRM_DATA_DIR not set" "$d"
    done
fi

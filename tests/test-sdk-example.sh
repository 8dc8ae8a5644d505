#!/bin/sh
# tests/test-sdk-example.sh - install grm into a DESTDIR, build the out-of-tree example
# plugins (sdk/examples/transform-filter, a transform; sdk/examples/head-hinge, a head)
# against that install with pkg-config alone, and train pipelines that use them with the
# installed grmhost; the installed grm-sdk.pc's Version is the ABI of the installed
# grm/version.h. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
echo "1..10"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-sdk-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
. "$GRM_TOP_SRCDIR/tests/tap.sh"

${MAKE:-make} -s -C "$GRM_TOP_BUILDDIR" install DESTDIR="$dest" >"$tmp/install.log" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/install.log" | tail -20
ok $rc "make install DESTDIR=... succeeds"

pc=$(find "$dest" -name grm-sdk.pc | head -1)
bin=$(find "$dest" -path '*/bin/grmhost' | head -1)
plugdir=$(dirname "$(find "$dest" -name 'emb-static.so' | head -1)")
hdr=$(find "$dest" -path '*/include/grm/plugin.h' | head -1)
test -n "$pc" && test -x "$bin" && test -n "$hdr" && test -f "$plugdir/reader-text.so"
ok $? "install has grmhost, plugins, headers and grm-sdk.pc"

# pkg-config --modversion grm-sdk is the plugin ABI (what the loader's errors refer to),
# here as a C program compiled against the installed header prints it.
printf '#include <stdio.h>\n#include <grm/version.h>\nint main(void) { printf("%%d.%%d\\n", GRM_ABI_MAJOR, GRM_ABI_MINOR); return 0; }\n' \
    >"$tmp/abi.c"
abi=$(${CC:-cc} -I"$(dirname "$(dirname "$hdr")")" -o "$tmp/abi" "$tmp/abi.c" && "$tmp/abi")
modversion=$(PKG_CONFIG_LIBDIR="$(dirname "$pc")" ${PKG_CONFIG:-pkg-config} --modversion grm-sdk)
echo "# grm/version.h ABI: ${abi:-?}, pkg-config --modversion grm-sdk: ${modversion:-?}"
test -n "$abi" && test "$modversion" = "$abi"
ok $? "pkg-config --modversion grm-sdk prints the ABI of grm/version.h ($abi)"

# build the example with pkg-config alone, against the DESTDIR install
export PKG_CONFIG_LIBDIR="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$dest"
mkdir -p "$tmp/ex"
${MAKE:-make} -s -C "$GRM_TOP_SRCDIR/sdk/examples/transform-filter" OUT="$tmp/ex" \
    >"$tmp/build.log" 2>&1
rc=$?
${MAKE:-make} -s -C "$GRM_TOP_SRCDIR/sdk/examples/head-hinge" OUT="$tmp/ex" \
    >>"$tmp/build.log" 2>&1 || rc=1
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/build.log"
grep -q -- "-I$dest" "$tmp/build.log" 2>/dev/null; :
ok $rc "the examples (a transform, a head) build with pkg-config --cflags --libs grm-sdk only"
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR

export GRM_PLUGIN_PATH="$plugdir:$tmp/ex"
"$bin" plugins transform-filter >"$tmp/plugins.out" 2>&1
rc=$?
grep -q "column" "$tmp/plugins.out" || rc=1
ok $rc "the installed grmhost finds the example and prints its parameters"

"$bin" generate --users 300 --items 200 --clusters 10 --out "$tmp/data.tsv" || exit 1
write_ini() { # $1: file, $2: extra transform section
    cat >"$1" <<EOI
[pipeline]
name = sdk-example
[reader]
plugin = reader-text
path = $tmp/data.tsv
header = true
columns = user:i64,item:i64,ts:i64
$2
[transform.seq]
plugin = transform-basic
sequence_by = user
sequence_order = ts
sequence_columns = item
[feature.history]
source = item
dim = 16
[dense.0]
plugin = dense-mlp
dims = 32,16
[head]
plugin = head-sampled-softmax
negatives = 32
[train]
batch_size = 64
epochs = 1
topk = 10
EOI
}
write_ini "$tmp/with.ini" "[transform.keep]
plugin = transform-filter
column = item
min = 101"
write_ini "$tmp/without.ini" ""
"$bin" train --fresh "$tmp/with.ini" >"$tmp/with.out" 2>"$tmp/with.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/with.err" | tail -5
ok $rc "the installed grmhost trains a pipeline that uses the example plugin"

# the filter ran: every remaining item id is >= 101, so at most 100 items are left
items_with=$(sed -n 's/.* users, \([0-9]*\) items,.*/\1/p' "$tmp/with.err")
"$bin" train --fresh --max-steps 1 "$tmp/without.ini" >/dev/null 2>"$tmp/without.err"
items_without=$(sed -n 's/.* users, \([0-9]*\) items,.*/\1/p' "$tmp/without.err")
echo "# items with filter: ${items_with:-?}, without: ${items_without:-?}"
test -n "$items_with" && test -n "$items_without" && test "$items_with" -le 100 \
    && test "$items_without" -gt 100
ok $? "the filter removed the rows below its threshold (catalog shrinks to <= 100 items)"

# the out-of-tree head trains a ranking pipeline: clicks are a function of the item
awk -F'\t' 'NR > 1 { print $1 "," $2 "," ($2 % 2) }' "$tmp/data.tsv" >"$tmp/rows.csv"
"$bin" plugins head-hinge >"$tmp/hinge.out" 2>&1
grep -q "head-hinge.*head" "$tmp/hinge.out" && grep -q "margin" "$tmp/hinge.out"
ok $? "the installed grmhost lists head-hinge as a head plugin with its margin"
{
    printf '[pipeline]\nname = sdk-head\n'
    ini_rows "$tmp/rows.csv"
    cat <<EOI
[dense.0]
plugin = dense-mlp
dims = 16,1
[head]
plugin = head-hinge
margin = 1.0
[train]
task = ranking
label_columns = click
batch_size = 64
epochs = 4
EOI
} >"$tmp/hinge.ini"
"$bin" train --fresh --metrics-out "$tmp/hinge.jsonl" "$tmp/hinge.ini" >"$tmp/hinge.tout" \
    2>"$tmp/hinge.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/hinge.err" | tail -5
ok $rc "the installed grmhost trains a ranking pipeline whose head is the out-of-tree head-hinge"
auc=$(metric "$tmp/hinge.jsonl" test auc)
echo "# head-hinge: test auc ${auc:-?}"
awk -v a="${auc:-0}" 'BEGIN { exit !(a > 0.9) }'
ok $? "head-hinge learns the item-defined clicks (test AUC ${auc:-?} > 0.9)"

#!/bin/sh
# tests/test-prepare.sh - share/data/prepare.sh makes exactly the inputs the shipped
# pipelines read: from the raw files (here: the decompressed copies under GRM_DATA_DIR,
# standing in for the user's downloads) it writes ml-100k/u.data.zst and
# amazon-beauty/Beauty.txt.zst whose content has the published sha256, and the pipelines
# pass `grmhost check` with GRM_DATA_DIR pointing there. A download that differs by one
# byte, or is missing, is refused and nothing is written. TAP output; the real-data checks
# SKIP without the data.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
g="$GRM_TOP_BUILDDIR/grmhost"
prep="$GRM_TOP_SRCDIR/share/data/prepare.sh"
pl="$GRM_TOP_SRCDIR/share/pipelines"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-prepare-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "1..6"
command -v zstd >/dev/null && command -v sha256sum >/dev/null ||
    skip_all "zstd or sha256sum not installed"

mkdir -p "$tmp/none"
sh "$prep" --from "$tmp/none" --out "$tmp/o0" >"$tmp/none.out" 2>&1
rc=$?
grep -q "no ml-100k.zip (or u.data) in $tmp/none; download https://files.grouplens.org/" \
    "$tmp/none.out" &&
    grep -q "no Beauty.txt in $tmp/none; download https://raw.githubusercontent.com/RUCAIBox/" \
        "$tmp/none.out"
ok $(( rc == 1 ? $? : 1 )) "missing downloads: exit $rc, each named with its URL"

mkdir -p "$tmp/bad"
printf '1\t2\t3\t4\n' >"$tmp/bad/u.data"
sh "$prep" --from "$tmp/bad" --out "$tmp/o1" >"$tmp/bad.out" 2>&1
rc=$?
grep -q "ml-100k/u.data.zst: the source's sha256 is [0-9a-f]*, expected 06416e59" "$tmp/bad.out" &&
    [ ! -e "$tmp/o1/ml-100k/u.data.zst" ]
ok $(( rc == 1 ? $? : 1 )) "a file that is not the published one is refused and nothing is written"

ml="${GRM_DATA_DIR:-}/ml-100k/u.data.zst"
be="${GRM_DATA_DIR:-}/amazon-beauty/Beauty.txt.zst"
if [ ! -f "$ml" ] || [ ! -f "$be" ]; then
    for d in "prepare.sh makes both inputs from the downloads" \
             "their content is byte for byte the data the results were measured on" \
             "ml100k-retrieval.ini passes check with GRM_DATA_DIR on the output" \
             "beauty-sasrec.ini passes check with GRM_DATA_DIR on the output"; do
        skip "the public data is not under GRM_DATA_DIR" "$d"
    done
    exit 0
fi
mkdir -p "$tmp/raw"
zstd -dq "$ml" -o "$tmp/raw/u.data" && zstd -dq "$be" -o "$tmp/raw/Beauty.txt"
sh "$prep" --from "$tmp/raw" --out "$tmp/out" >"$tmp/ok.out" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/ok.out"
ok $rc "prepare.sh makes both inputs from the downloads"
zstd -dcq "$tmp/out/ml-100k/u.data.zst" | cmp -s - "$tmp/raw/u.data" &&
    zstd -dcq "$tmp/out/amazon-beauty/Beauty.txt.zst" | cmp -s - "$tmp/raw/Beauty.txt"
ok $? "their content is byte for byte the data the results were measured on"
for f in ml100k-retrieval beauty-sasrec; do
    GRM_DATA_DIR="$tmp/out" "$g" check "$pl/$f.ini" >"$tmp/$f.out" 2>&1
    rc=$?
    grep -q "path = $tmp/out/" "$tmp/$f.out"
    ok $(( rc == 0 ? $? : 1 )) "$f.ini passes check with GRM_DATA_DIR on the output (exit $rc)"
done

#!/bin/sh
# tests/test-valgrind.sh - the main path under valgrind's memcheck: `grmhost train` of the
# README's quick-start pipeline (share/pipelines/quickstart.ini) on a small generated data set
# (300 users, 2,000 items: the evaluation of every user stays short under valgrind), then the
# same pipeline over emb-dynamic in tiered mode (a 64 KiB cache over a backing file: the data
# thread's prefetch, the io_uring reads, evictions and write-back, the checkpoint). Each run
# must exit 0 with "ERROR SUMMARY: 0 errors" and no block definitely lost. Skipped without
# valgrind, and in a sanitized build (memcheck and ASan do not run together). TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
command -v valgrind >/dev/null 2>&1 || skip_all "valgrind is not installed (Debian package valgrind)"
if ldd "$g" 2>/dev/null | grep -q libasan; then
    skip_all "a sanitized build (memcheck cannot run beside ASan)"
fi
# libtool's wrapper script, when there is one, would be what valgrind runs
case "$(head -c 4 "$g" | od -An -c | tr -d ' ')" in
*ELF*) ;;
*) skip_all "$g is not an executable (a libtool wrapper): build with --disable-shared" ;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-vg-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "1..4"

"$g" generate --users 300 --items 2000 --seed 5 --out "$tmp/small.tsv" >/dev/null 2>&1
ini="$GRM_TOP_SRCDIR/share/pipelines/quickstart.ini"
vg() {   # LABEL ARGS...: grmhost under memcheck, its report in $tmp/LABEL.vg
    label=$1
    shift
    (cd "$tmp" && valgrind -q --error-exitcode=99 --leak-check=full \
        --errors-for-leak-kinds=definite --log-file="$tmp/$label.vg" \
        "$g" train --fresh --max-steps 8 --set reader.path="$tmp/small.tsv" "$@" "$ini" \
        >"$tmp/$label.out" 2>&1)
    rc=$?
    [ $rc -ne 0 ] && { tail -5 "$tmp/$label.out"; head -30 "$tmp/$label.vg"; } | sed 's/^/# /'
    return $rc
}
clean() {   # LABEL: memcheck reported nothing (-q prints errors and leaks only)
    ! grep -q "==[0-9]*== [A-Z]" "$tmp/$1.vg"
}

vg mem
ok $? "quick start under memcheck: exit 0, no error, nothing definitely lost"
clean mem
ok $? "... and memcheck's log is empty"

mkdir -p "$tmp/back"
vg tiered --set embedding.plugin=emb-dynamic --set embedding.backing="$tmp/back" \
    --set embedding.cache_bytes=64K --set embedding.evict=lru
rc=$?
grep "cache .* of .* rows" "$tmp/tiered.out" | cut -c1-160 | sed 's/^/# /'
grep -q "fetched from .* ([1-9][0-9]* by prefetch)" "$tmp/tiered.out"
ok $((rc | $?)) "tiered emb-dynamic under memcheck (rows prefetched from the backing file): \
exit 0, no error, nothing definitely lost"
clean tiered
ok $? "... and memcheck's log is empty"

#!/bin/sh
# tests/test-headers.sh - every public header compiles alone, as C11 (-pedantic, every
# warning an error) and as C++ (its extern "C" guards), and includes nothing but the
# standard library and other grm headers (STYLE.md §4). TAP output.
set -u
: "${GRM_TOP_SRCDIR:?run through make check}"
inc="$GRM_TOP_SRCDIR/sdk/include"
cc=${CC:-cc}
cxx=${CXX:-c++}
. "$GRM_TOP_SRCDIR/tests/tap.sh"
headers=$(cd "$inc/grm" && ls *.h)
count=$(echo "$headers" | wc -w)
echo "1..$((count * 3))"
err="${TMPDIR:-/tmp}/hdr.$$"
have_cxx=1
command -v "$cxx" >/dev/null 2>&1 || have_cxx=0
for h in $headers; do
    printf '#include <grm/%s>\nint grm_test_unit_;\n' "$h" \
        | $cc -std=c11 -pedantic -Wall -Wextra -Werror -I"$inc" -fsyntax-only -x c - 2>"$err"
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$err"
    ok $rc "grm/$h compiles alone as C11 (-pedantic -Werror)"
    if [ $have_cxx -eq 0 ]; then
        skip "no C++ compiler" "grm/$h compiles alone as C++17"
    else
        printf '#include <grm/%s>\nint grm_test_unit_;\n' "$h" \
            | $cxx -std=c++17 -Wall -Wextra -Werror -I"$inc" -fsyntax-only -x c++ - 2>"$err"
        rc=$?
        [ $rc -ne 0 ] && sed 's/^/# /' "$err"
        ok $rc "grm/$h compiles alone as C++17 (extern \"C\" guards)"
    fi
    bad=$(grep -E '^#include' "$inc/grm/$h" | grep -vE '<(grm/[a-z]+\.h|std(def|int|arg|io|lib|bool)\.h|math\.h|string\.h)>' || true)
    [ -n "$bad" ] && echo "# $bad"
    test -z "$bad"
    ok $? "grm/$h includes only standard and grm headers"
done
rm -f "$err"

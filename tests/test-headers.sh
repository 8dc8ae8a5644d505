#!/bin/sh
# tests/test-headers.sh - every public header compiles alone, as C11 (-pedantic, every
# warning an error) and as C++ (its extern "C" guards), and includes nothing but the
# standard library and other grm headers (STYLE.md §4); and the registration macros of
# grm/param.h and grm/plugin.h refuse mistyped fields and host variables. TAP output.
set -u
: "${GRM_TOP_SRCDIR:?run through make check}"
inc="$GRM_TOP_SRCDIR/sdk/include"
cc=${CC:-cc}
cxx=${CXX:-c++}
. "$GRM_TOP_SRCDIR/tests/tap.sh"
headers=$(cd "$inc/grm" && ls *.h)
count=$(echo "$headers" | wc -w)
echo "1..$((count * 3 + 3))"
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

# The registration macros check types at compile time: each snippet must fail to compile
# with the macro's own message ($1: description, $2: expected message, stdin: the code).
must_not_compile() {
    if $cc -std=c11 -pedantic -Wall -Wextra -I"$inc" -fsyntax-only -x c - >"$err" 2>&1; then
        ok 1 "$1 (it compiled)"
    else
        grep -q "$2" "$err"
        rc=$?
        [ $rc -ne 0 ] && sed 's/^/# /' "$err"
        ok $rc "$1"
    fi
}
must_not_compile "GRM_PARAM_DECL_INT refuses an int32_t field (the host writes int64_t)" \
    "c.n must have type int64_t" <<'EOC'
#include <grm/grm.h>
typedef struct c { int32_t n; } c;
const grm_param_decl t[] = { GRM_PARAM_DECL_INT(c, n, "1", GRM_PARAM_ANY, "n"),
                             GRM_PARAM_DECL_END };
EOC
must_not_compile "GRM_PARAM_DECL_STRING refuses a char array field" \
    "c.s must have type const char" <<'EOC'
#include <grm/grm.h>
typedef struct c { char s[8]; } c;
const grm_param_decl t[] = { GRM_PARAM_DECL_STRING(c, s, NULL, "s"), GRM_PARAM_DECL_END };
EOC
must_not_compile "GRM_PLUGIN_DEFINE refuses a host variable of another type" \
    "h must be a static const grm_host_api" <<'EOC'
#include <grm/grm.h>
static const void *h;
static const grm_plugin_info i = { GRM_PLUGIN_INFO_HEADER, .kind = GRM_KIND_OPT };
GRM_PLUGIN_DEFINE(h, &i);
EOC
rm -f "$err"

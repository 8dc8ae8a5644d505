#!/bin/sh
# tests/test-plugin-dirs.sh - where plugins come from (issue 25 finding 5, issue 22's loader
# items): [pipeline] plugin_dirs resolves from the INI's directory, not the working one;
# only the plugins the INI names are opened there, so `check` runs no other library's
# constructor; a library without the entry symbol, named like a plugin, is skipped with a
# warning (it was exit 2); a grmhost copied elsewhere finds the plugins beside it, and
# without any says to set GRM_PLUGIN_PATH. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-plugdirs-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..6"
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || skip_all "no C compiler ($cc) to build the test libraries"

# a library whose constructor leaves a mark, under a plugin's name and under another name
cat >"$tmp/mark.c" <<'EOC'
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void)
{
    const char *m = getenv("GRM_TEST_MARK");
    if (m) close(open(m, O_CREAT | O_WRONLY, 0644));
}
EOC
mkdir -p "$tmp/ini/plug" "$tmp/elsewhere"
"$cc" -shared -fPIC -o "$tmp/ini/plug/dense-marker.so" "$tmp/mark.c" || exit 1
cp "$tmp/ini/plug/dense-marker.so" "$tmp/ini/plug/libhelper.so"
cp "$GRM_TOP_BUILDDIR/tests/plugins/.libs/dense-nan-eval.so" "$tmp/ini/plug/"
"$g" generate --users 60 --items 40 --clusters 2 --seed 2 --out "$tmp/ini/ev.tsv" || exit 1
{
    printf '[pipeline]\nname = dirs\nplugin_dirs = plug\n'
    ini_retrieval_dynamic "$tmp/ini/ev.tsv" |
        sed 's/^dims = 32,16$/dims = 32,16\n[dense.1]\nplugin = dense-nan-eval/'
} >"$tmp/ini/p.ini"

(cd "$tmp/elsewhere" && GRM_TEST_MARK="$tmp/mark" "$g" check ../ini/p.ini) >"$tmp/check.out" \
    2>"$tmp/check.err"
rc=$?
sed 's/^/# /' "$tmp/check.err"
test $rc -eq 0 && grep -q "dense-nan-eval" "$tmp/check.out"
ok $? "plugin_dirs = plug resolves from the INI's directory, run from another one"
! test -e "$tmp/mark"
ok $? "check opens no library the INI does not name (no constructor ran)"
grep -q "libhelper.so: skipped: not named like a plugin" "$tmp/check.err"
ok $? "a library not named like a plugin is skipped, and says so"

sed 's/^plugin = dense-nan-eval$/plugin = dense-marker/' "$tmp/ini/p.ini" >"$tmp/ini/m.ini"
GRM_TEST_MARK="$tmp/mark" "$g" check "$tmp/ini/m.ini" >/dev/null 2>"$tmp/m.err"
rc=$?
tail -1 "$tmp/m.err" | sed 's/^/# /'
test $rc -eq 2 && grep -q "dense-marker.so: no grm_plugin_entry symbol.*: skipped" "$tmp/m.err" \
    && grep -q "no plugin named 'dense-marker'" "$tmp/m.err"
ok $? "a library named like a plugin without the entry is skipped with a warning"

mkdir -p "$tmp/copy/plugins" "$tmp/bare"
cp "$g" "$tmp/copy/grmhost"
cp "$GRM_TOP_BUILDDIR"/plugins/*/.libs/*.so "$tmp/copy/plugins/"
env -u GRM_PLUGIN_PATH "$tmp/copy/grmhost" plugins >"$tmp/copy.out" 2>&1
grep -q "$tmp/copy/plugins/emb-dynamic.so" "$tmp/copy.out"
ok $? "a grmhost copied out of the build tree finds the plugins beside it"
cp "$g" "$tmp/bare/grmhost"
env -u GRM_PLUGIN_PATH "$tmp/bare/grmhost" plugins >"$tmp/bare.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/bare.out" | tail -1
if [ -d /usr/local/lib/grm/plugins ]; then
    skip "an installation in /usr/local is found" "without plugins anywhere, the fix is named"
else
    test $rc -ne 0 && grep -q "set GRM_PLUGIN_PATH" "$tmp/bare.out"
    ok $? "without plugins anywhere, the error names GRM_PLUGIN_PATH as the fix"
fi

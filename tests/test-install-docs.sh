#!/bin/sh
# tests/test-install-docs.sh - what `make install` puts beside grmhost for people: a man
# page for grmhost and for every command its --help lists (made by help2man from that
# --help, so they agree; SKIP when configure found no help2man), the design notes, the
# results page, the SDK examples and every plugin's README under share/doc/grm; and
# `grmhost help COMMAND` prints COMMAND's --help. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-install-docs-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "1..6"

# the commands, as grmhost's own usage lists them
cmds=$("$g" --help | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z]*\) .*/\1/p' |
       grep -v '^help$')
ncmds=$(echo $cmds | wc -w)
bad=""
for c in $cmds; do
    "$g" help "$c" >"$tmp/h1" 2>&1 && "$g" "$c" --help >"$tmp/h2" 2>&1 &&
        cmp -s "$tmp/h1" "$tmp/h2" && grep -q "^usage: grmhost $c" "$tmp/h1" || bad="$bad $c"
done
ok $([ -z "$bad" ] && [ -n "$cmds" ] && echo 0 || echo 1) \
    "grmhost help COMMAND = COMMAND --help for $ncmds commands${bad:+; differ:$bad}"

dest="$tmp/dest"
${MAKE:-make} -s -C "$GRM_TOP_BUILDDIR" install DESTDIR="$dest" >"$tmp/install.log" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/install.log" | tail -20
ok $rc "make install DESTDIR=... succeeds"
prefix=$(sed -n 's/^prefix = //p' "$GRM_TOP_BUILDDIR/Makefile")
doc="$dest$prefix/share/doc/grm"
man="$dest$prefix/share/man/man1"

if grep -q '^HELP2MAN = .' "$GRM_TOP_BUILDDIR/Makefile"; then
    missing=""
    for c in "" $cmds; do
        f="$man/grmhost${c:+-$c}.1"
        th="GRMHOST${c:+-$(echo "$c" | tr a-z A-Z)}"
        [ -s "$f" ] && grep -q "^\.TH $th \"1\"" "$f" || missing="$missing grmhost${c:+-$c}.1"
    done
    ok $([ -z "$missing" ] && echo 0 || echo 1) \
        "a man page for grmhost and each of its $ncmds commands${missing:+; wrong:$missing}"
    grep -q 'metrics\\-port' "$man/grmhost-train.1" && grep -q 'origin' "$man/grmhost-check.1"
    ok $? "the pages carry the commands' options (train --metrics-port, check --origin)"
else
    skip "configure found no help2man" "a man page for grmhost and each command"
    skip "configure found no help2man" "the pages carry the commands' options"
fi

[ -s "$doc/README.md" ] && [ -s "$doc/DESIGN.md" ] && [ -s "$doc/RESULTS.md" ] &&
    [ -s "$doc/design-card.md" ] && [ -s "$doc/STYLE.md" ] &&
    [ -s "$doc/grmcol.md" ] && [ -s "$doc/sdk/examples/transform-filter/filter.c" ] &&
    [ -s "$doc/sdk/examples/head-hinge/Makefile" ]
ok $? "share/doc/grm holds the README, design notes and card, style guide, results page, grmcol \
format and SDK examples"
missing=""
for r in "$GRM_TOP_SRCDIR"/plugins/*/README.md; do
    rel=${r#"$GRM_TOP_SRCDIR"/}
    cmp -s "$r" "$doc/$rel" || missing="$missing $rel"
done
for d in "$GRM_TOP_SRCDIR"/plugins/*/; do
    [ -f "$d/plugin.c" ] && [ ! -f "$d/README.md" ] && echo "# $(basename "$d") has no README.md"
done
ok $([ -z "$missing" ] && echo 0 || echo 1) \
    "every plugin README is installed under share/doc/grm/plugins${missing:+; missing:$missing}"

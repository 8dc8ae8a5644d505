#!/bin/sh
# tests/test-hostile-files.sh - files that are not what their names say (issue 25 finding
# 12): a FIFO named like the newest checkpoint is refused at once, naming it (open blocked
# forever); an INI read from /dev/zero or a pipe of `yes` is refused past 16 MiB (it was read
# until memory ran out); a .zst input that expands to one huge line is refused naming the
# file (it attempted a 4 GiB allocation, naming none). Each command runs under `timeout`, so
# a regression fails instead of hanging. Clearer errors (finding 14): an id of INT64_MAX
# names the feature and the fix (it said "rows = 0", after a signed overflow); a NUL byte
# in a field is shown (it read "'7' is not an integer"); a checkpoint with NaN weights is
# refused naming the tensor (it said "lower the learning rates"). A tensor name holding an
# ESC byte is printed as \x1b, never raw (finding 13). TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-hostile-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..8"
command -v timeout >/dev/null 2>&1 || skip_all "no timeout(1) to bound the commands"

"$g" generate --users 60 --items 40 --clusters 2 --seed 4 --out "$tmp/ev.tsv" || exit 1
ini() {   # $1 events file
    printf '[pipeline]\nname = hostile\n'
    ini_retrieval_dynamic "$1"
    printf '[train]\nbatch_size = 16\nsteps = 3\n[checkpoint]\ndir = %s\n' "$tmp/ck"
}
ini "$tmp/ev.tsv" >"$tmp/p.ini"
"$g" train -q "$tmp/p.ini" >/dev/null 2>&1 || exit 1
mkfifo "$tmp/ck/step-0000000999.grm" || exit 1
timeout 60 "$g" train "$tmp/p.ini" >/dev/null 2>"$tmp/fifo.err"
rc=$?
tail -1 "$tmp/fifo.err" | sed 's/^/# /'
test $rc -ne 0 && test $rc -ne 124 \
    && grep -q "$tmp/ck/step-0000000999.grm: not a regular file" "$tmp/fifo.err"
ok $? "a FIFO named like the newest checkpoint is refused at once, naming it (exit $rc)"

timeout 60 "$g" check /dev/zero >/dev/null 2>"$tmp/zero.err"
rc=$?
tail -1 "$tmp/zero.err" | sed 's/^/# /'
test $rc -eq 2 && grep -q "/dev/zero: longer than 16 MiB" "$tmp/zero.err"
ok $? "an INI from /dev/zero is refused past 16 MiB (exit $rc)"
yes | timeout 60 "$g" check /dev/stdin >/dev/null 2>"$tmp/yes.err"
rc=$?
test $rc -eq 2 && grep -q "/dev/stdin: longer than 16 MiB" "$tmp/yes.err"
ok $? "an INI from a pipe of yes is refused past 16 MiB (exit $rc)"

if command -v zstd >/dev/null 2>&1; then
    # 80 MB of one line, compressed to a few KB
    head -c 80000000 /dev/zero | tr '\0' 7 | zstd -q -o "$tmp/bomb.tsv.zst" || exit 1
    ini "$tmp/bomb.tsv.zst" | sed 's/^dir = .*/dir = /' >"$tmp/bomb.ini"
    timeout 120 "$g" train "$tmp/bomb.ini" >/dev/null 2>"$tmp/bomb.err"
    rc=$?
    tail -1 "$tmp/bomb.err" | sed 's/^/# /'
    test $rc -ne 0 && test $rc -ne 124 \
        && grep -q "$tmp/bomb.tsv.zst: a line longer than 64 MiB" "$tmp/bomb.err"
    ok $? "a .zst input expanding to one huge line is refused naming the file"
else
    skip "no zstd(1) to make the input" "a .zst input expanding to one huge line is refused"
fi

# ---- clearer errors (finding 14) ----
printf 'user\titem\tts\n' >"$tmp/big.tsv"
head -n 200 "$tmp/ev.tsv" | tail -n +2 >>"$tmp/big.tsv"
printf '1\t9223372036854775807\t99999\n' >>"$tmp/big.tsv"
ini "$tmp/big.tsv" | sed 's/^dir = .*/dir = /; s/^plugin = emb-dynamic$/plugin = emb-static/' \
    >"$tmp/big.ini"   # a store of row indices, sized from the largest id
timeout 60 "$g" train "$tmp/big.ini" >/dev/null 2>"$tmp/big.err"
rc=$?
tail -1 "$tmp/big.err" | sed 's/^/# /'
test $rc -ne 0 && grep -q "\[feature.history\]: the data holds id 9223372036854775807, above" \
    "$tmp/big.err" && grep -q "remap the ids" "$tmp/big.err"
ok $? "an item id of INT64_MAX names the feature, the id and the fix"
cp "$tmp/ev.tsv" "$tmp/nul.tsv"
printf '1\t7\000x\t99999\n' >>"$tmp/nul.tsv"
ini "$tmp/nul.tsv" | sed 's/^dir = .*/dir = /' >"$tmp/nul.ini"
timeout 60 "$g" train "$tmp/nul.ini" >/dev/null 2>"$tmp/nul.err"
rc=$?
tail -1 "$tmp/nul.err" | sed 's/^/# /'
test $rc -ne 0 && grep -qF "'7\\x00x' is not an integer" "$tmp/nul.err"
ok $? "a NUL byte in a field is shown as \\x00"
rm -f "$tmp/ck/step-0000000999.grm"
dense=$("$GRM_TOP_BUILDDIR/tests/ckpt-edit" "$tmp/ck/step-0000000003.grm" \
    | awk '$1 ~ /^dense\./ { print $1; exit }')
"$GRM_TOP_BUILDDIR/tests/ckpt-edit" "$tmp/ck/step-0000000003.grm" "$tmp/nan.grm" \
    "nan=$dense:5" && mv "$tmp/nan.grm" "$tmp/ck/step-0000000003.grm"
timeout 60 "$g" train "$tmp/p.ini" >/dev/null 2>"$tmp/nan.err"
rc=$?
tail -1 "$tmp/nan.err" | sed 's/^/# /'
test $rc -ne 0 && grep -q "step-0000000003.grm: tensor '$dense' holds nan at element 5" \
    "$tmp/nan.err"
ok $? "a checkpoint with NaN weights is refused naming the file and the tensor"
esc=$(printf 'dense.\033[31mred')
cp "$tmp/ck/step-0000000003.grm" "$tmp/esc.grm"
"$GRM_TOP_BUILDDIR/tests/ckpt-edit" "$tmp/esc.grm" "$tmp/ck/step-0000000003.grm" \
    "dup=$dense" "rename=$dense:$esc" 2>/dev/null
timeout 60 "$g" train "$tmp/p.ini" >/dev/null 2>"$tmp/esc.err"
tail -1 "$tmp/esc.err" | sed 's/^/# /'
grep -q 'dense.\\x1b\[31mred' "$tmp/esc.err" && ! grep -q "$(printf '\033')" "$tmp/esc.err"
ok $? "a tensor name with an ESC byte is printed as \\x1b, not raw"

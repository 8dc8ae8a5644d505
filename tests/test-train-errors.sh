#!/bin/sh
# tests/test-train-errors.sh - refusals that keep a run from producing garbage or losing
# data (issue 25's red-team findings 8, 10 and 12): an empty topk is refused by `check`
# with file:line (it printed hr@0 and early-stopped on garbage); a metrics file that cannot
# be written (/dev/full) fails the run naming the file (it exited 0 with the JSONL cut);
# `convert X X` is refused and leaves X as it was (it overwrote its input); NaN scores rank
# their targets last, with a warning (finding 9: they reported HR@10 = 1.0). TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-errors-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..8"

"$g" generate --users 120 --items 80 --clusters 4 --seed 2 --out "$tmp/ev.tsv" || exit 1
ini() {   # $1: extra [train] lines
    printf '[pipeline]\nname = errors\nthreads = 2\n'
    ini_events "$tmp/ev.tsv"
    ini_history
    ini_mlp_softmax
    printf '[train]\nbatch_size = 32\nsteps = 4\n%s\n' "$1"
}

ini "topk =" >"$tmp/topk.ini"
line=$(grep -n '^topk' "$tmp/topk.ini" | cut -d: -f1)
"$g" check "$tmp/topk.ini" >/dev/null 2>"$tmp/topk.err"
rc=$?
grep -q "topk.ini:$line: \[train\] topk is empty; list the K of HR@K and NDCG@K" "$tmp/topk.err"
ok $(( rc == 2 ? $? : 1 )) "check refuses an empty topk with file:line and the fix (exit $rc)"

ini "" >"$tmp/ok.ini"
if [ -w /dev/full ]; then
    "$g" train "$tmp/ok.ini" --fresh -q --metrics-out /dev/full >/dev/null 2>"$tmp/full.err"
    rc=$?
    ok $(( rc == 1 ? 0 : 1 )) "a metrics file on a full disk (/dev/full) fails the run (exit $rc)"
    grep -q "/dev/full: writing metrics: No space left on device" "$tmp/full.err"
    ok $? "and the error names the file and the cause: $(tail -1 "$tmp/full.err")"
else
    skip "no writable /dev/full" "a metrics file on a full disk fails the run"
    skip "no writable /dev/full" "and the error names the file and the cause"
fi
"$g" train "$tmp/ok.ini" --fresh -q --metrics-out "$tmp/m.jsonl" >/dev/null 2>&1
ok $? "the same run with a writable metrics file succeeds"

cp "$tmp/ev.tsv" "$tmp/in.tsv"
"$g" convert "$tmp/in.tsv" "$tmp/in.tsv" >/dev/null 2>"$tmp/conv.err"
rc=$?
grep -q "the output is the input file" "$tmp/conv.err"
ok $(( rc == 2 ? $? : 1 )) "convert X X is refused (exit $rc: $(tail -1 "$tmp/conv.err"))"
cmp -s "$tmp/ev.tsv" "$tmp/in.tsv"
ok $? "and X is left as it was"

# a model whose queries are NaN in evaluation: every target ranked last, never first
mkdir -p "$tmp/nan"
cp "$GRM_TOP_BUILDDIR/tests/plugins/.libs/dense-nan-eval.so" "$tmp/nan/" || exit 1
ini "" | sed "s|^name = errors|name = errors\nplugin_dirs = $tmp/nan|" |
    sed 's/^dims = 32,16$/dims = 32,16\n[dense.1]\nplugin = dense-nan-eval/' >"$tmp/nan.ini"
"$g" train "$tmp/nan.ini" --fresh -q --metrics-out "$tmp/nan.jsonl" >/dev/null 2>"$tmp/nan.err"
hr=$(metric "$tmp/nan.jsonl" test hr@10)
echo "# test hr@10 with NaN scores: ${hr:-?}"
test "$hr" = 0
ok $? "NaN scores rank every target last: test hr@10 = 0 (got ${hr:-nothing}), not 1"
grep -q "scored NaN or inf and were ranked last; the model has diverged" "$tmp/nan.err"
ok $? "and evaluation warns that the model has diverged"

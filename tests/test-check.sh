#!/bin/sh
# tests/test-check.sh - `grmhost check` runs every wiring check `train` runs (issue 22): a
# last dense block whose width is not the item dim, a [train] column the data does not
# have, a data path that does not exist; each is refused by check with the INI file and
# line of the key, and train refuses it with the same message (the code is shared).
# Then composition: `include = FILE` (nested, overrides, a swapped plugin dropping the
# base's keys, cycles and missing files refused naming file:line, errors in an included
# file naming that file), `--set section.key=value`, ${ENV} expansion, `check --origin`,
# [reader] path relative to the INI file; and share/pipelines' base retrieval pipeline
# and its two business lines pass check and train a few steps. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-check-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "1..35"

"$g" generate --users 120 --items 80 --clusters 4 --seed 2 --out "$tmp/ev.tsv" || exit 1
ini() {   # a small retrieval pipeline on ev.tsv
    printf '[pipeline]\nname = check\nthreads = 2\n'
    ini_events "$tmp/ev.tsv"
    ini_history
    ini_mlp_softmax
    printf '[train]\nbatch_size = 32\nsteps = 4\n[checkpoint]\ndir = %s/ck\n' "$tmp"
}
# line PATTERN FILE: the number of the first line of FILE matching PATTERN
line() { grep -n "$1" "$2" | head -1 | cut -d: -f1; }
# refused NAME RC PATTERN: check and train on NAME.ini exit RC with PATTERN on stderr
refused() {
    "$g" check "$tmp/$1.ini" >/dev/null 2>"$tmp/$1.check"
    rc=$?
    grep -q -- "$3" "$tmp/$1.check"
    ok $(( rc == $2 ? $? : 1 )) "check refuses $1 (exit $rc): $(head -c 300 "$tmp/$1.check")"
    "$g" train -q --fresh "$tmp/$1.ini" >/dev/null 2>"$tmp/$1.train"
    rc=$?
    cmp -s "$tmp/$1.check" "$tmp/$1.train"
    ok $(( rc == $2 ? $? : 1 )) "train refuses $1 with the same message (exit $rc)"
}

ini >"$tmp/ok.ini"
"$g" check "$tmp/ok.ini" >"$tmp/ok.out" 2>&1
ok $? "the pipeline passes check"

# the reproductions of issue 22: check passed each of these, train then refused it
sed 's/^dims = 32,16$/dims = 32,8/' "$tmp/ok.ini" >"$tmp/dim.ini"
at=$(line '^\[dense.0\]' "$tmp/dim.ini")
refused dim 2 "dim.ini:$at: \[dense.0\]: the dense stack ends in 8 features but item table \
'item' has dim 16"
sed 's/^\[train\]$/[train]\nsequence_column = items/; s/^source = item$/source = items/' \
    "$tmp/ok.ini" \
    >"$tmp/seqcol.ini"
at=$(line '^sequence_column =' "$tmp/seqcol.ini")
refused seqcol 2 "seqcol.ini:$at: \[train\] sequence_column = items: the data after the last \
transform has no LIST_I64 column of that name (columns: user, item, ts)"
sed 's/^\[train\]$/[train]\nuser_column = uid/; s/^source = user$/source = uid/' "$tmp/ok.ini" \
    >"$tmp/usercol.ini"
at=$(line '^user_column' "$tmp/usercol.ini")
refused usercol 2 "usercol.ini:$at: \[train\] user_column = uid: the data after the last \
transform has no I64 column"
sed "s|^path = .*|path = $tmp/missing.tsv|" "$tmp/ok.ini" >"$tmp/nodata.ini"
at=$(line '^path' "$tmp/nodata.ini")
refused nodata 1 "nodata.ini:$at: \[reader\] .*cannot open $tmp/missing.tsv"

# an error found only in the data still names the key's file:line
awk 'BEGIN { for (r = 0; r < 200; r++)
              printf "%d,%d,%d\n", r % 20, r % 30, r == 150 ? 2 : r % 2 }' \
    >"$tmp/rows.csv"
{ ini_rows "$tmp/rows.csv"; printf '[dense.0]\nplugin = dense-mlp\ndims = 8,1\n'
  printf '[train]\ntask = ranking\nlabel_columns = click\nsteps = 2\n'
  printf '[checkpoint]\ndir = %s/ckr\n' "$tmp"; } >"$tmp/label.ini"
"$g" train -q --fresh "$tmp/label.ini" >/dev/null 2>"$tmp/label.err"
at=$(line '^label_columns' "$tmp/label.ini")
grep -q "label.ini:$at: \[train\] label_columns: column 'click' holds 2; labels must lie in" \
    "$tmp/label.err"
ok $? "a label outside [0, 1] in the data names label_columns' file:line"

# composition: a base and a line on it
mkdir -p "$tmp/base" "$tmp/lines"
ini | sed 's|^path = .*|path = ../ev.tsv|; s|^dims = 32,16$|dims = 32,16\nactivation = relu|' \
    >"$tmp/base/base.ini"
cat >"$tmp/lines/a.ini" <<'EOF'
; a business line: another store, another width, the rest from the base
include = ../base/base.ini

[pipeline]
name = line-a
[embedding]
plugin = emb-dynamic
[dense.0]
dims = 64,16
EOF
"$g" check --origin "$tmp/lines/a.ini" >"$tmp/a.out" 2>"$tmp/a.err"
ok $? "a line including the base passes check ($(head -c 200 "$tmp/a.err"))"
grep -q "^name = line-a  *; $tmp/lines/a.ini:5 (over $tmp/lines/../base/base.ini:2)" "$tmp/a.out"
ok $? "--origin: the line's key overrides the base's, both named file:line"
grep -q "^dims = 64,16 " "$tmp/a.out" &&
    grep -q "^activation = relu  *; $tmp/lines/../base/base.ini:" "$tmp/a.out"
ok $? "an overridden key takes the line's value; the base's other keys of that section stay"
grep -q "^\[embedding\]" "$tmp/a.out" && grep -q "emb-dynamic" "$tmp/a.out" \
    && grep -q "path = $tmp/lines/../base/../ev.tsv" "$tmp/a.out"
ok $? "the swapped store is wired and [reader] path is relative to the file that names it"

printf 'include = a.ini\n[train]\nsteps = 2\n' >"$tmp/lines/nested.ini"
"$g" check --origin "$tmp/lines/nested.ini" >"$tmp/nested.out" 2>&1 &&
    grep -q "^steps = 2  *; $tmp/lines/nested.ini:3 (over $tmp/lines/../base/base.ini:" \
        "$tmp/nested.out" &&
    grep -q "^name = line-a " "$tmp/nested.out"
ok $? "includes nest: the outer file overrides the base through the middle one"

printf 'include = cyc2.ini\n[train]\nsteps = 2\n' >"$tmp/lines/cyc1.ini"
printf 'include = cyc1.ini\n' >"$tmp/lines/cyc2.ini"
"$g" check "$tmp/lines/cyc1.ini" >/dev/null 2>"$tmp/cyc.err"
rc=$?
grep -q "cyc2.ini:1: include cyc1.ini: $tmp/lines/cyc1.ini includes itself" "$tmp/cyc.err"
ok $(( rc == 2 ? $? : 1 )) "an include cycle is refused naming the include's file:line (exit $rc)"

printf 'include = nowhere.ini\n' >"$tmp/lines/missing.ini"
"$g" check "$tmp/lines/missing.ini" >/dev/null 2>"$tmp/missing.err"
grep -q "missing.ini:1: include nowhere.ini: $tmp/lines/nowhere.ini: cannot open" "$tmp/missing.err"
ok $? "a missing include names the including file:line and the path tried"

sed 's/^activation = relu$/activaton = relu/' "$tmp/base/base.ini" >"$tmp/base/typo.ini"
printf 'include = ../base/typo.ini\n[pipeline]\nname = t\n' >"$tmp/lines/typo.ini"
"$g" check "$tmp/lines/typo.ini" >/dev/null 2>"$tmp/typo.err"
rc=$?
at=$(line '^activaton' "$tmp/base/typo.ini")
grep -q "base/typo.ini:$at: \[dense.0\] activaton: unknown key for dense-mlp; did you mean" \
    "$tmp/typo.err"
ok $(( rc == 2 ? $? : 1 )) "an error in an included file names that file and line (exit $rc)"

printf '%s\n' 'include = ../base/base.ini' '[embedding]' 'plugin = emb-dynamic' 'evict = lru' \
    '[embedding]' 'max_rows = 9' \
    >"$tmp/lines/twice.ini"
"$g" check "$tmp/lines/twice.ini" >/dev/null 2>"$tmp/twice.err"
grep -q "twice.ini:5: section \[embedding\] appears again (first at line 2)" "$tmp/twice.err"
ok $? "a section repeated within one file is still refused"

printf '[embedding]\nplugin = emb-static\nrows_hint = 1\n' >"$tmp/base/store.ini"
printf '%s\n' 'include = ../base/base.ini' 'include = ../base/store.ini' '[embedding]' \
    'plugin = emb-dynamic' \
    >"$tmp/lines/swap.ini"
"$g" check --origin "$tmp/lines/swap.ini" >"$tmp/swap.out" 2>"$tmp/swap.err"
rc=$?
! grep -q "rows_hint" "$tmp/swap.out"
ok $(( rc == 0 ? $? : 1 )) "a file swapping a section's plugin drops the keys earlier files gave it"

# ... but not the host's own keys of [checkpoint] (the line lost the base's dir: no
# checkpoints, and nothing said so), nor the command line's own --set keys
sed 's/^\[checkpoint\]$/[checkpoint]\nplugin = ckpt-grm\nkeep = 3/' "$tmp/base/base.ini" \
    >"$tmp/base/ck.ini"
printf '%s\n' 'include = ../base/ck.ini' '[checkpoint]' 'plugin = ckpt-safetensors' \
    >"$tmp/lines/ckswap.ini"
"$g" check --origin "$tmp/lines/ckswap.ini" >"$tmp/ckswap.out" 2>&1
rc=$?
grep -q "^dir = $tmp/ck " "$tmp/ckswap.out" && grep -q "^keep = 3 " "$tmp/ckswap.out" &&
    grep -q "^plugin = ckpt-safetensors " "$tmp/ckswap.out"
ok $(( rc == 0 ? $? : 1 )) "a file swapping [checkpoint]'s plugin keeps the host's dir and keep"
"$g" check --origin --set checkpoint.every=7 --set checkpoint.plugin=ckpt-safetensors \
    "$tmp/base/ck.ini" >"$tmp/ckset.out" 2>&1
rc=$?
grep -q "^every = 7  *; --set:1" "$tmp/ckset.out" && grep -q "^dir = $tmp/ck " "$tmp/ckset.out"
ok $(( rc == 0 ? $? : 1 )) "--set checkpoint.every=7 then --set checkpoint.plugin=...: every stays"

"$g" check --origin --set train.steps=3 --set dense.0.dims=48,16 "$tmp/lines/a.ini" \
    >"$tmp/set.out" 2>&1
grep -q "^steps = 3  *; --set:1 (over $tmp/lines/../base/base.ini:" "$tmp/set.out" &&
    grep -q "^dims = 48,16  *; --set:2 (over $tmp/lines/a.ini:" "$tmp/set.out"
ok $? "--set section.key=value overrides the files; --origin says which --set"
"$g" check --set trian.steps=3 "$tmp/ok.ini" >/dev/null 2>"$tmp/set.err"
rc=$?
grep -q "^grmhost: --set:1: unknown section \[trian\]; did you mean \[train\]" "$tmp/set.err"
ok $(( rc == 2 ? $? : 1 )) "a --set of an unknown section is refused naming it (exit $rc)"
"$g" check --set steps=3 "$tmp/ok.ini" >/dev/null 2>"$tmp/set2.err"
rc=$?
grep -q "expected section.key=value" "$tmp/set2.err"
ok $(( rc == 2 ? $? : 1 )) "a --set without a section is a usage error (exit $rc)"
"$g" train -q --fresh --set train.steps=2 --metrics-out "$tmp/set.jsonl" "$tmp/ok.ini" \
    >/dev/null 2>&1 &&
    [ "$(grep -c '"name":"loss"' "$tmp/set.jsonl")" -ge 1 ] &&
    ! grep -q '"step":3' "$tmp/set.jsonl"
ok $? "train --set train.steps=2 stops at step 2"

ini | sed -e "s|^path = .*|path = \${GRM_TEST_DIR}/ev.tsv|" \
    -e "s|^batch_size = 32|batch_size = \${GRM_TEST_BATCH:-24}|" \
    >"$tmp/env.ini"
GRM_TEST_DIR=$tmp "$g" check --origin "$tmp/env.ini" >"$tmp/env.out" 2>&1 &&
    grep -q "^path = $tmp/ev.tsv " "$tmp/env.out" && grep -q "^batch_size = 24 " "$tmp/env.out"
ok $? "\${NAME} expands from the environment, \${NAME:-default} falls back to its default"
env -u GRM_TEST_DIR "$g" check "$tmp/env.ini" >/dev/null 2>"$tmp/env.err"
rc=$?
at=$(line '^path' "$tmp/env.ini")
grep -q "env.ini:$at: \[reader\] path: environment variable GRM_TEST_DIR is not set" \
    "$tmp/env.err"
ok $(( rc == 2 ? $? : 1 )) "an unset variable is refused with file:line and the fix (exit $rc)"

# share/pipelines: the base retrieval pipeline and two business lines on it
pl="$GRM_TOP_SRCDIR/share/pipelines"
qs="$GRM_TOP_BUILDDIR/share/data/quickstart.tsv"
for f in line-feed line-shop; do
    "$g" check --origin --set "reader.path=$qs" "$pl/$f.ini" >"$tmp/$f.out" 2>"$tmp/$f.err"
    rc=$?
    n=$(grep -c "; $pl/$f.ini:" "$tmp/$f.out")
    ok $(( rc == 0 && n >= 4 ? 0 : 1 )) "$f.ini passes check; $n keys its own, the rest the base's"
done
sed '/^merged INI/,$d' "$tmp/line-feed.out" | grep -q "emb-dynamic" &&
    sed '/^merged INI/,$d' "$tmp/line-feed.out" | grep -q "opt-adagrad" &&
    sed '/^merged INI/,$d' "$tmp/line-shop.out" | grep -q "dense-hstu" &&
    sed '/^merged INI/,$d' "$tmp/line-shop.out" | grep -q "variant = adamw"
ok $? "line-feed swaps store and sparse optimizer, line-shop dense block and dense optimizer"
cd "$tmp" || exit 1
for f in line-feed line-shop; do
    "$g" train -q --fresh --max-steps 3 --set "reader.path=$qs" --set "checkpoint.dir=$tmp/ck-$f" \
        --metrics-out "$tmp/$f.jsonl" "$pl/$f.ini" >/dev/null 2>"$tmp/$f.train"
    ok $? "$f.ini trains 3 steps$(tail -1 "$tmp/$f.train" | sed 's/^/: /')"
done

# every shipped pipeline reads its data as the others do: the quick start's beside it, the
# public data through ${GRM_DATA_DIR:-../data} (beauty-sasrec-ce.ini once hard-coded a
# path relative to the working directory, which only the developers' tree had)
bad=$(grep -l '^path = ' "$pl"/*.ini | while read -r f; do
    p=$(sed -n 's/^path = //p' "$f")
    case "$p" in ../data/*|'${GRM_DATA_DIR:-../data}/'*) ;; *) echo "${f##*/}: $p" ;; esac
done)
[ -z "$bad" ]
ok $? "every shipped pipeline's data path is ../data or \${GRM_DATA_DIR:-../data}${bad:+: $bad}"
if [ -n "${GRM_DATA_DIR:-}" ] && [ -d "$GRM_DATA_DIR" ]; then
    n=0 fail=
    for f in "$pl"/*.ini; do
        p=$(sed -n 's/^path = \${GRM_DATA_DIR:-..\/data}\///p' "$f")
        [ -n "$p" ] && [ -r "$GRM_DATA_DIR/$p" ] || continue
        n=$((n + 1))
        "$g" check "$f" >/dev/null 2>"$tmp/ship.err" || fail="$fail ${f##*/}"
    done
    [ $n -ge 8 ] && [ -z "$fail" ]
    ok $? "the $n shipped pipelines whose data is under GRM_DATA_DIR pass check${fail:+; not:$fail}"
else
    skip "no GRM_DATA_DIR with the public data" "the shipped pipelines pass check on it"
fi

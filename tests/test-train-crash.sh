#!/bin/sh
# tests/test-train-crash.sh - crash safety of checkpoints (issue 5): a one-rank training run
# checkpointing every step is killed with SIGKILL once a step >= 20 checkpoint exists (likely
# in the middle of writing another); every step-N checkpoint left loads (a partial write
# only ever leaves a temporary file a resume ignores); the resumed run ends with the final
# loss, the same losses step by step and the test HR@10 of an uninterrupted run, and the
# temporaries of a cut save are gone. A truncated newest checkpoint is refused with a message
# naming the file and the fix, without training from step 0;
# removed, the run resumes from the previous one and again ends as the uninterrupted run.
# TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-crash-XXXXXX")
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..10"

"$g" generate --users 300 --items 200 --clusters 6 --seed 9 --out "$tmp/ev.tsv" || exit 1
ini() {   # $1 checkpoint dir
    ini_retrieval_dynamic "$tmp/ev.tsv"
    cat <<EOI
in_batch = false
[train]
time_column = ts
max_seq_len = 10
batch_size = 64
steps = 300
log_every = 1
eval_every = 100000
[checkpoint]
dir = $1
every = 1
keep = 3
EOI
}
same_end() {   # A.jsonl B.jsonl: the same final loss and test HR@10, to the last digit
    la=$(metric "$1" train loss); lb=$(metric "$2" train loss)
    ha=$(metric "$1" test hr@10); hb=$(metric "$2" test hr@10)
    echo "# final loss $la vs $lb, test hr@10 $ha vs $hb"
    [ -n "$la" ] && [ "$la" = "$lb" ] && [ -n "$ha" ] && [ "$ha" = "$hb" ]
}
same_tail() {   # REF.jsonl RUN.jsonl: RUN's losses equal REF's at the same steps, bitwise
    losses "$1" >"$tmp/l1"; losses "$2" >"$tmp/l2"
    [ -s "$tmp/l2" ] && awk 'NR == FNR { ref[$1] = $2; next }
        { n++; if (!($1 in ref) || ref[$1] != $2) { print "# step " $1 ": " $2; bad = 1 } }
        END { print "# " n " resumed steps compared"; exit bad }' "$tmp/l1" "$tmp/l2"
}
ck="$tmp/ck"
ini "$tmp/ref" >"$tmp/ref.ini"
ini "$ck" >"$tmp/crash.ini"

"$g" train --quiet --metrics-out "$tmp/ref.jsonl" "$tmp/ref.ini" >/dev/null 2>"$tmp/ref.err"
ok $? "uninterrupted run: 300 steps, a checkpoint every step"

"$g" train --quiet --metrics-out "$tmp/crash.jsonl" "$tmp/crash.ini" >/dev/null 2>&1 &
pid=$!
i=0
newest_step() {   # the newest step-N.grm of $ck as N (empty: none); keep = 3 prunes older ones
    ls "$ck" 2>/dev/null | sed -n 's/^step-0*\([0-9][0-9]*\)\.grm$/\1/p' | sort -n | tail -1
}
while [ $i -lt 6000 ]; do   # at most a minute
    s=$(newest_step)
    [ "${s:-0}" -ge 20 ] && break
    sleep 0.01
    i=$((i + 1))
done
kill -9 $pid 2>/dev/null
{ wait $pid; } 2>/dev/null
rc=$?
pid=
echo "# killed after $(losses "$tmp/crash.jsonl" | tail -1 | cut -d' ' -f1) logged steps;" \
    "left: $(ls "$ck" | tr '\n' ' ')"
test $rc -eq 137
ok $? "the run was killed by SIGKILL (exit 137) once a checkpoint of step >= 20 existed"

bad=0 n=0
for f in "$ck"/*; do
    case "${f##*/}" in
    step-*.tmp.*) ;;   # a save that was cut short: a name a resume does not read
    step-*.grm)
        n=$((n + 1))
        "$g" eval --quiet --checkpoint "$f" "$tmp/crash.ini" >/dev/null 2>"$tmp/eval.err" \
            || { bad=1; sed "s|^|# ${f##*/}: |" "$tmp/eval.err"; } ;;
    *) bad=1; echo "# unexpected file ${f##*/}" ;;
    esac
done
test $bad -eq 0 && test $n -ge 1 && test $n -le 4
ok $? "every step-N.grm left ($n) loads; anything else is a temporary a resume ignores"
cp -R "$ck" "$tmp/ck2"
ini "$tmp/ck2" >"$tmp/crash2.ini"

"$g" train --metrics-out "$tmp/resumed.jsonl" "$tmp/crash.ini" >/dev/null 2>"$tmp/resumed.err"
rc=$?
grep "resuming from" "$tmp/resumed.err" | sed 's/^/# /'
at=$(sed -n "s|.*resuming from $ck/step-0*\([0-9][0-9]*\)\.grm at step \([0-9]*\) .*|\1 \2|p" \
    "$tmp/resumed.err")
test $rc -eq 0 && [ -n "$at" ] && [ "${at% *}" = "${at#* }" ] && [ "${at% *}" -ge 20 ] \
    && ! ls "$ck" | grep -q '\.tmp\.'
ok $? "the crashed run resumes from its newest checkpoint (step >= 20), cut saves removed"
same_tail "$tmp/ref.jsonl" "$tmp/resumed.jsonl"
ok $? "every resumed step's loss equals the uninterrupted run's"
same_end "$tmp/ref.jsonl" "$tmp/resumed.jsonl"
ok $? "the final loss and test HR@10 equal the uninterrupted run's"

# the newest checkpoint truncated (a disk that lost the end of a file)
newest=$(ls "$tmp/ck2"/step-*.grm | sort | tail -1)
size=$(wc -c <"$newest")
head -c $((size / 2)) "$newest" >"$tmp/half" && mv "$tmp/half" "$newest"
"$g" train --metrics-out "$tmp/trunc.jsonl" "$tmp/crash2.ini" >/dev/null 2>"$tmp/trunc.err"
rc=$?
sed 's/^/# /' "$tmp/trunc.err" | tail -2
test $rc -ne 0 && grep -q "$newest.*truncated" "$tmp/trunc.err" \
    && grep -q "move this one away, or pass --fresh" "$tmp/trunc.err"
ok $? "a truncated newest checkpoint is refused with a message naming the file and the fix"
! grep -q '"split":"train"' "$tmp/trunc.jsonl" 2>/dev/null
ok $? "and no step is trained (no silent restart from step 0)"
rm "$newest"
"$g" train --metrics-out "$tmp/fallback.jsonl" "$tmp/crash2.ini" >/dev/null 2>"$tmp/fb.err"
rc=$?
grep "resuming from" "$tmp/fb.err" | sed 's/^/# /'
test $rc -eq 0 && grep -q "resuming from $tmp/ck2/step-" "$tmp/fb.err"
ok $? "with the file removed, the run resumes from the previous checkpoint"
same_tail "$tmp/ref.jsonl" "$tmp/fallback.jsonl" >/dev/null && \
    same_end "$tmp/ref.jsonl" "$tmp/fallback.jsonl"
ok $? "and ends as the uninterrupted run"

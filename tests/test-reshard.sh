#!/bin/sh
# tests/test-reshard.sh - `grmhost reshard` (issue 5): a training checkpoint of N ranks
# rewritten for M ranks resumes on M ranks exactly where the N-rank run was: the losses of
# the resumed steps equal those of an uninterrupted one-rank run within 1e-5 relative (the
# tolerance of test-train-dist.sh for rank-count equality), for a ranking pipeline on a merged
# emb-dynamic table (keyed rows) and a retrieval pipeline on emb-static (indexed rows). Without
# mpirun, resharding itself is still tested: 1 -> 2 -> 1 and resume on one rank. Refusals:
# a missing rank file, ranks that disagree on the step or on the dense values, an existing
# target (and --force), with nothing written. The source is never deleted. A control shows
# the comparison notices lost rows. N -> kN ranks resume with no reshard step (MTGRBoost §5.2's
# modulo scheme: rank r reads only rank r mod N's file and keeps the rows it owns). With
# ckpt-grm the keyed rows stream through spill files: the files equal, byte for byte, those of
# --in-memory (1 -> 2, and with replica groups 1 -> 4 -> 2, without mpirun; 1 -> 2 with
# ckpt-safetensors). TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-reshard-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..35"

dist_data || exit 1
rank_ini() {   # $1 comm plugin, $2 checkpoint dir, $3 dense lr
    ini_dist_ranking "$1" "$2" 1 "${3:-}"
}
retr_ini() {   # $1 comm plugin, $2 checkpoint dir
    ini_dist_retrieval "$1"
    printf '[checkpoint]\ndir = %s\nevery = 10\n' "$2"
}
train1() {   # INI STEPS OUT.jsonl: one rank, resuming
    "$g" train --quiet --max-steps "$2" --metrics-out "$3" "$1" >/dev/null 2>"$3.err"
}
joined() {   # OUT A.jsonl B.jsonl: a run's metrics, then those of its resumed part
    cat "$2" "$3" >"$1"
}
s40=step-0000000040.grm

# reference: one rank, 60 steps uninterrupted
rank_ini comm-single "$tmp/ref" >"$tmp/ref.ini"
train1 "$tmp/ref.ini" 60 "$tmp/ref.jsonl"
ok $? "one rank, 60 steps uninterrupted (the reference)"

"$g" reshard --help | grep -q "usage: grmhost reshard .*FILE.ini -n M"
ok $? "reshard --help prints its usage"
"$g" reshard "$tmp/ref.ini" >"$tmp/u.out" 2>&1
test $? -eq 2 && grep -q "\-n M (the new rank count) is required" "$tmp/u.out"
ok $? "reshard without -n is a usage error"

# 1 -> 2 -> 1 without mpirun, then resume on one rank
rank_ini comm-single "$tmp/a" >"$tmp/a.ini"
train1 "$tmp/a.ini" 40 "$tmp/a.jsonl"
cp "$tmp/a/$s40" "$tmp/a40.orig"
"$g" reshard "$tmp/a.ini" -n 2 >"$tmp/a2.out" 2>&1
rc=$?
test $rc -eq 0 && test -f "$tmp/a/rank-0-of-2/$s40" && test -f "$tmp/a/rank-1-of-2/$s40" \
    && ! ls "$tmp/a"/step-* >/dev/null 2>&1
ok $? "1 -> 2: step 40 written as dir/rank-R-of-2/$s40, nothing left at the top"
cmp -s "$tmp/a40.orig" "$tmp/a/resharded-from-1/$s40"
ok $? "the 1-rank source is kept unchanged in dir/resharded-from-1"
sed 's/^/# /' "$tmp/a2.out"
awk '$1 == "user+item" { ok = $2 > 0 && $3 + $4 == $2 && $3 > 0.3 * $2 && $3 < 0.7 * $2 }
     END { exit !ok }' "$tmp/a2.out"
ok $? "the summary counts the rows and about half of them move to rank 1"

# ckpt-grm reads and writes by rows: the keyed table's rows went through spill files, and
# the files are byte for byte those of the whole step held in memory (--in-memory)
same_files() {   # DIR1 DIR2 N: rank-R-of-N/step 40 equal in both
    r=0
    while [ $r -lt "$3" ]; do
        cmp -s "$1/rank-$r-of-$3/$s40" "$2/rank-$r-of-$3/$s40" || return 1
        r=$((r + 1))
    done
}
mkdir -p "$tmp/am" && cp "$tmp/a40.orig" "$tmp/am/$s40"
rank_ini comm-single "$tmp/am" >"$tmp/am.ini"
"$g" reshard -q --in-memory "$tmp/am.ini" -n 2 >/dev/null 2>&1
rc=$?
"$g" reshard --help | grep -q -- "--in-memory" && grep -q "moving the rows through 2 spill \
files in $tmp/a/.reshard-to-2" "$tmp/a2.out" && ! test -e "$tmp/a/.reshard-to-2" \
    && same_files "$tmp/a" "$tmp/am" 2
ok $((rc | $?)) "1 -> 2 streamed through spill files (gone after): the files of --in-memory, \
byte for byte"
# sparse_group = 2 without mpirun: 1 -> 4 puts every row on two ranks (one per replica
# group); 4 -> 2 reads both copies, compared as they stream, and drops one
for d in sg sgm; do
    mkdir -p "$tmp/$d" && cp "$tmp/a40.orig" "$tmp/$d/$s40"
    rank_ini comm-single "$tmp/$d" | sed 's/^\[train\]$/[train]\nsparse_group = 2/' \
        >"$tmp/$d.ini"
done
"$g" reshard -q "$tmp/sg.ini" -n 4 >/dev/null 2>&1 \
    && "$g" reshard -q --in-memory "$tmp/sgm.ini" -n 4 >/dev/null 2>&1 \
    && same_files "$tmp/sg" "$tmp/sgm" 4
ok $? "sparse_group = 2, 1 -> 4 ranks (each row on 2): streamed and --in-memory files equal"
"$g" reshard "$tmp/sg.ini" -n 2 >"$tmp/sg2.out" 2>&1 \
    && "$g" reshard -q --in-memory "$tmp/sgm.ini" -n 2 >/dev/null 2>&1 \
    && same_files "$tmp/sg" "$tmp/sgm" 2 && grep -q "moving the rows through 2 spill files" \
    "$tmp/sg2.out" && awk '$1 == "user+item" { ok = $2 == n && $3 == 0 }
        END { exit !ok }' n="$(awk '$1 == "user+item" { print $2 }' "$tmp/a2.out")" \
    "$tmp/sg2.out"
ok $? "... 4 -> 2 (the replicas compared, one kept): equal files, every row once, none moved"
# ckpt-safetensors streams too: 1 -> 2 through spill files, the files of --in-memory
for d in st stm; do
    rank_ini comm-single "$tmp/$d" | sed 's/^\[checkpoint\]$/[checkpoint]\nplugin = ckpt-safetensors/' \
        >"$tmp/$d.ini"
done
train1 "$tmp/st.ini" 40 "$tmp/st.jsonl" && cp -r "$tmp/st" "$tmp/stm" \
    && "$g" reshard "$tmp/st.ini" -n 2 >"$tmp/st2.out" 2>&1 \
    && "$g" reshard -q --in-memory "$tmp/stm.ini" -n 2 >/dev/null 2>&1 \
    && grep -q "moving the rows through 2 spill files" "$tmp/st2.out" \
    && cmp -s "$tmp/st/rank-0-of-2/step-0000000040.safetensors" \
        "$tmp/stm/rank-0-of-2/step-0000000040.safetensors" \
    && cmp -s "$tmp/st/rank-1-of-2/step-0000000040.safetensors" \
        "$tmp/stm/rank-1-of-2/step-0000000040.safetensors"
ok $? "ckpt-safetensors, 1 -> 2 streamed through spill files: the files of --in-memory"
"$g" reshard -q "$tmp/a.ini" -n 1 >"$tmp/a1.out" 2>&1
rc=$?
train1 "$tmp/a.ini" 20 "$tmp/a2.jsonl"
rc=$((rc | $?))
joined "$tmp/aa.jsonl" "$tmp/a.jsonl" "$tmp/a2.jsonl"
same_curve "$tmp/ref.jsonl" "$tmp/aa.jsonl" 1e-5
ok $((rc | $?)) "1 -> 2 -> 1, resumed on one rank: the 60 losses of the reference"

# control: resuming from one shard only (half of the rows lost) changes the losses
mkdir -p "$tmp/c"
cp "$tmp/a/resharded-from-2/rank-0-of-2/$s40" "$tmp/c/"
rank_ini comm-single "$tmp/c" >"$tmp/c.ini"
train1 "$tmp/c.ini" 20 "$tmp/c2.jsonl"
joined "$tmp/cc.jsonl" "$tmp/a.jsonl" "$tmp/c2.jsonl"
same_curve "$tmp/ref.jsonl" "$tmp/cc.jsonl" 1e-5 >/dev/null
test $? -ne 0
ok $? "control: resuming from rank 0's shard alone does not match (the check sees lost rows)"

# refusals, on a 2-rank checkpoint made by resharding (b: step 40; d: other dense lr)
mk2() {   # NAME STEPS LR: one rank STEPS steps in dir NAME, resharded to 2 ranks
    rank_ini comm-single "$tmp/$1" "$3" >"$tmp/$1.ini"
    train1 "$tmp/$1.ini" "$2" "$tmp/$1.jsonl" && "$g" reshard -q "$tmp/$1.ini" -n 2 >/dev/null
}
mk2 b 40 0.005 && mk2 c60 60 0.005 && mk2 d 40 0.004
ok $? "2-rank checkpoints for the refusals"
"$g" train --quiet --max-steps 1 "$tmp/b.ini" >"$tmp/w.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/w.out" | tail -1
test $rc -eq 2 && grep -q "written by 2 ranks and this job has 1; resuming on another world \
size needs \`grmhost reshard FILE.ini -n 1\` first" "$tmp/w.out"
ok $? "grmhost train on another world size is refused and points at grmhost reshard"
mv "$tmp/b/rank-1-of-2/$s40" "$tmp/b.r1"
"$g" reshard "$tmp/b.ini" -n 1 >"$tmp/n1.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/n1.out" | tail -1
test $rc -ne 0 && grep -q "rank-1-of-2/$s40: missing (rank 1 of 2" "$tmp/n1.out" \
    && ! ls "$tmp/b"/step-* >/dev/null 2>&1 && test -d "$tmp/b/rank-0-of-2"
ok $? "a missing rank file is refused, naming it; nothing written, nothing moved"
mv "$tmp/b.r1" "$tmp/b/rank-1-of-2/$s40"

cp "$tmp/c60/rank-0-of-2/step-0000000060.grm" "$tmp/b/rank-0-of-2/"
cp "$tmp/b/rank-1-of-2/$s40" "$tmp/b/rank-1-of-2/step-0000000060.grm"
"$g" reshard "$tmp/b.ini" -n 1 >"$tmp/n2.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/n2.out" | tail -1
test $rc -ne 0 && grep -q "step-0000000060.grm: its trainer.state says step 40 but it is named \
step 60: the ranks disagree on the step" "$tmp/n2.out" && ! ls "$tmp/b"/step-* >/dev/null 2>&1
ok $? "ranks that disagree on the step are refused, naming the file"
rm "$tmp/b/rank-0-of-2/step-0000000060.grm" "$tmp/b/rank-1-of-2/step-0000000060.grm"

cp "$tmp/b/rank-1-of-2/$s40" "$tmp/b.r1"
cp "$tmp/d/rank-1-of-2/$s40" "$tmp/b/rank-1-of-2/$s40"
"$g" reshard "$tmp/b.ini" -n 1 >"$tmp/n3.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/n3.out" | tail -1
test $rc -ne 0 && grep -q "rank-1-of-2/$s40: replicated tensor 'dense.0.*' differs from" \
    "$tmp/n3.out" && ! ls "$tmp/b"/step-* >/dev/null 2>&1
ok $? "ranks that disagree on a dense tensor are refused, naming the file and tensor"
cp "$tmp/b.r1" "$tmp/b/rank-1-of-2/$s40"

cp "$tmp/ref/step-0000000020.grm" "$tmp/b/"
"$g" reshard "$tmp/b.ini" -n 1 >"$tmp/n6.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/n6.out" | tail -1
test $rc -eq 2 && grep -q "holds checkpoints of several world sizes (.*ranks); pass --from N" \
    "$tmp/n6.out"
ok $? "a directory with two world sizes needs --from"
"$g" reshard --from 2 "$tmp/b.ini" -n 1 >"$tmp/n4.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/n4.out" | tail -1
test $rc -ne 0 && grep -q "already holds checkpoints of 1 rank (newest step 20).*--force" \
    "$tmp/n4.out" && ! test -f "$tmp/b/$s40"
ok $? "an existing target is refused, with --force as the fix"
"$g" reshard --force --from 2 -q "$tmp/b.ini" -n 1 >/dev/null 2>&1 && test -f "$tmp/b/$s40" \
    && test -f "$tmp/b/resharded-from-2/rank-1-of-2/$s40"
ok $? "--force writes beside it; the 2-rank source is moved, not deleted"

"$g" reshard "$tmp/ref.ini" -n 1 >"$tmp/n5.out" 2>&1
test $? -eq 2 && grep -q "already of 1 rank; nothing to reshard" "$tmp/n5.out"
ok $? "resharding to the same world size is a usage error"

# emb-static (indexed rows): 1 -> 2 -> 1 without mpirun
retr_ini comm-single "$tmp/sref" >"$tmp/sref.ini"
train1 "$tmp/sref.ini" 30 "$tmp/sref.jsonl"
retr_ini comm-single "$tmp/s" >"$tmp/s.ini"
train1 "$tmp/s.ini" 20 "$tmp/s.jsonl"
"$g" reshard -q "$tmp/s.ini" -n 2 >/dev/null && "$g" reshard -q "$tmp/s.ini" -n 1 >/dev/null
rc=$?
train1 "$tmp/s.ini" 10 "$tmp/s2.jsonl"
rc=$((rc | $?))
joined "$tmp/ss.jsonl" "$tmp/s.jsonl" "$tmp/s2.jsonl"
same_curve "$tmp/sref.jsonl" "$tmp/ss.jsonl" 1e-5
ok $((rc | $?)) "retrieval on emb-static, 1 -> 2 -> 1, resumed: the 30 losses of one run"

mpi_or_skip 19 31
mpitrain() {   # N INI STEPS OUT.jsonl
    mpi "$1" train --quiet --max-steps "$3" --metrics-out "$4" "$2" >"$4.out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$4.out" | tail -8
    return $rc
}

# 2 ranks for 40 steps, then 1, 3 and 4 ranks for 20 more
for m in 1 3 4; do
    rank_ini comm-mpi "$tmp/m$m" >"$tmp/m$m.ini"
    mpitrain 2 "$tmp/m$m.ini" 40 "$tmp/m$m.jsonl"
    rc=$?
    "$g" reshard "$tmp/m$m.ini" -n $m >"$tmp/m$m.rs" 2>&1
    rc=$((rc | $?))
    [ $rc -ne 0 ] && sed 's/^/# /' "$tmp/m$m.rs" | tail -4
    if [ $m -eq 1 ]; then
        train1 "$tmp/m$m.ini" 20 "$tmp/m$m.b.jsonl"
    else
        mpitrain $m "$tmp/m$m.ini" 20 "$tmp/m$m.b.jsonl"
    fi
    rc=$((rc | $?))
    joined "$tmp/mm$m.jsonl" "$tmp/m$m.jsonl" "$tmp/m$m.b.jsonl"
    same_curve "$tmp/ref.jsonl" "$tmp/mm$m.jsonl" 1e-5
    ok $((rc | $?)) "2 ranks 40 steps -> reshard -n $m -> $m rank(s) 20 steps: the reference"
done
ls "$tmp/m4/rank-3-of-4/step-0000000060.grm" >/dev/null 2>&1
ok $? "the 4 ranks resumed and checkpoint under dir/rank-R-of-4"

# 1 -> 2 and resume on 2 ranks
rank_ini comm-single "$tmp/u" >"$tmp/u1.ini"
rank_ini comm-mpi "$tmp/u" >"$tmp/u.ini"
train1 "$tmp/u1.ini" 40 "$tmp/u.jsonl"
rc=$?
"$g" reshard -q "$tmp/u.ini" -n 2 >/dev/null 2>&1
rc=$((rc | $?))
mpitrain 2 "$tmp/u.ini" 20 "$tmp/u.b.jsonl"
rc=$((rc | $?))
joined "$tmp/uu.jsonl" "$tmp/u.jsonl" "$tmp/u.b.jsonl"
same_curve "$tmp/ref.jsonl" "$tmp/uu.jsonl" 1e-5
ok $((rc | $?)) "1 rank 40 steps -> reshard -n 2 -> 2 ranks 20 steps: the reference"

# emb-static: 2 ranks -> 4 ranks, and the test HR@10
retr_ini comm-mpi "$tmp/t" >"$tmp/t.ini"
mpitrain 2 "$tmp/t.ini" 20 "$tmp/t.jsonl"
rc=$?
"$g" reshard -q "$tmp/t.ini" -n 4 >/dev/null 2>&1
rc=$((rc | $?))
mpitrain 4 "$tmp/t.ini" 10 "$tmp/t.b.jsonl"
rc=$((rc | $?))
joined "$tmp/tt.jsonl" "$tmp/t.jsonl" "$tmp/t.b.jsonl"
same_curve "$tmp/sref.jsonl" "$tmp/tt.jsonl" 1e-5
ok $((rc | $?)) "retrieval on emb-static, 2 ranks -> reshard -n 4 -> 4 ranks: one run's losses"
a=$(metric "$tmp/sref.jsonl" test hr@10); b=$(metric "$tmp/t.b.jsonl" test hr@10)
echo "# test hr@10: uninterrupted $a, resharded $b"
[ -n "$a" ] && awk -v a="$a" -v b="${b:-x}" 'BEGIN { d = a - b; exit !(d < 1e-3 && d > -1e-3) }'
ok $? "and the same test HR@10"

# hierarchical sharding (sparse_group = 2): 4 ranks as 2 groups -> 2 ranks
rank_ini comm-mpi "$tmp/h" >"$tmp/h0.ini"
sed 's/^label_columns = click$/label_columns = click\nsparse_group = 2/' "$tmp/h0.ini" \
    >"$tmp/h.ini"
mpitrain 4 "$tmp/h.ini" 40 "$tmp/h.jsonl"
rc=$?
"$g" reshard -q "$tmp/h.ini" -n 2 >"$tmp/h.rs" 2>&1
rc=$((rc | $?))
mpitrain 2 "$tmp/h.ini" 20 "$tmp/h.b.jsonl"
rc=$((rc | $?))
joined "$tmp/hh.jsonl" "$tmp/h.jsonl" "$tmp/h.b.jsonl"
same_curve "$tmp/ref.jsonl" "$tmp/hh.jsonl" 1e-5
ok $((rc | $?)) "sparse_group = 2: 4 ranks (2 replica groups) -> reshard -n 2 -> the reference"

# the modulo scheme: N -> kN ranks resume directly, each reading one source file
rank_ini comm-mpi "$tmp/k" >"$tmp/k.ini"
mpitrain 2 "$tmp/k.ini" 40 "$tmp/k.jsonl"
rc=$?
cp "$tmp/k/rank-1-of-2/$s40" "$tmp/k40.r1"
mpi 4 train --max-steps 20 --metrics-out "$tmp/k.b.jsonl" "$tmp/k.ini" >"$tmp/k.b.out" 2>&1
rc=$((rc | $?))
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/k.b.out" | tail -8
joined "$tmp/kk.jsonl" "$tmp/k.jsonl" "$tmp/k.b.jsonl"
same_curve "$tmp/ref.jsonl" "$tmp/kk.jsonl" 1e-5
ok $((rc | $?)) "2 ranks 40 steps -> 4 ranks directly (no reshard), 20 steps: the reference"
grep -q "resuming 4 ranks from step 40 of the 2-rank checkpoints .*rank r reads rank r mod 2's \
file only" "$tmp/k.b.out" && cmp -s "$tmp/k40.r1" "$tmp/k/rank-1-of-2/$s40" \
    && test -f "$tmp/k/rank-3-of-4/step-0000000060.grm"
ok $? "it says so, leaves the 2-rank files as they were, and checkpoints under rank-R-of-4"
# each row must sit with one owner: unfiltered copies would differ once trained, and reshard
# refuses replicas that differ
"$g" reshard --from 4 -q "$tmp/k.ini" -n 1 >"$tmp/k1.out" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/k1.out" | tail -2
ok $rc "the 4 ranks hold disjoint rows: their step 60 reshards to one rank"

mkdir -p "$tmp/w" && cp -r "$tmp/k/resharded-from-4" "$tmp/w.4" \
    && mv "$tmp/w.4"/rank-* "$tmp/w/"                    # 4-rank checkpoints alone
rank_ini comm-mpi "$tmp/w" >"$tmp/w.ini"
mpi 3 train --quiet --max-steps 1 "$tmp/w.ini" >"$tmp/b3.out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/b3.out" | grep "grmhost reshard" | head -1
test $rc -ne 0 && grep -q "written by 4 ranks and this job has 3; .*grmhost reshard FILE.ini \
-n 3.*or a multiple of 4" "$tmp/b3.out"
ok $? "4 -> 3 ranks is refused, pointing at grmhost reshard"

retr_ini comm-mpi "$tmp/v" >"$tmp/v.ini"
mpitrain 2 "$tmp/v.ini" 20 "$tmp/v.jsonl"
rc=$?
mpitrain 4 "$tmp/v.ini" 10 "$tmp/v.b.jsonl"
rc=$((rc | $?))
joined "$tmp/vv.jsonl" "$tmp/v.jsonl" "$tmp/v.b.jsonl"
same_curve "$tmp/sref.jsonl" "$tmp/vv.jsonl" 1e-5
ok $((rc | $?)) "retrieval on emb-static, 2 -> 4 ranks directly: one run's losses"

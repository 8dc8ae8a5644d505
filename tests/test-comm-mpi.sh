#!/bin/sh
# tests/test-comm-mpi.sh - comm-mpi under mpirun: tests/test-comm-mpi at 1, 2 and 4 ranks
# (each rank writes its TAP to a file; this script re-numbers and merges them, prefixing
# "n=N rank R:"), then a rank killed with SIGKILL in the middle of a loop of allreduces
# must make mpirun exit non-zero within 30 s, then `grmhost launch`: its command line,
# its error without mpirun, and a 2-rank training run with [distributed] plugin = comm-mpi.
# On a 2-core machine 4 ranks need --oversubscribe; as root Open MPI needs
# --allow-run-as-root. TAP output, plan at the end.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
t="$GRM_TOP_BUILDDIR/tests/test-comm-mpi"
g="$GRM_TOP_BUILDDIR/grmhost"
[ -n "${MPIRUN:-}" ] || skip_all "no mpirun"
[ -x "$t" ] || skip_all "comm-mpi not built (configure found no MPI)"
# Under --enable-sanitizers, LeakSanitizer reports Open MPI's own never-freed allocations
# (from MCA components already unloaded at exit, so no suppression can name them); keep
# ASan's memory checks and turn off only leak detection for these MPI processes.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
flags="--oversubscribe"
[ "$(id -u)" -eq 0 ] && flags="--allow-run-as-root $flags"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-comm-mpi-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ---- every collective at 1, 2 and 4 ranks ----
for n in 1 2 4; do
    d="$tmp/n$n"
    mkdir -p "$d"
    GRM_TAP_DIR="$d" timeout 300 "$MPIRUN" $flags -n $n "$t" >"$d/out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$d/out" | tail -20
    ok $rc "mpirun -n $n tests/test-comm-mpi exits 0"
    r=0
    while [ $r -lt $n ]; do
        f="$d/rank-$r.tap"
        if [ ! -f "$f" ]; then
            ok 1 "n=$n rank $r: wrote its TAP file"
        else
            plan=$(sed -n 's/^1\.\.\([0-9]*\).*/\1/p' "$f" | head -1)
            got=$(grep -c -E '^(not )?ok ' "$f")
            [ "${plan:-x}" = "$got" ]
            ok $? "n=$n rank $r: ran all ${plan:-?} planned tests (got $got)"
            # Re-emit each result under this script's numbering; keep diagnostics.
            while IFS= read -r line; do
                case "$line" in
                    "not ok "*)
                        ok 1 "n=$n rank $r: $(echo "$line" | sed 's/^not ok [0-9]* - //')" ;;
                    "ok "*) ok 0 "n=$n rank $r: $(echo "$line" | sed 's/^ok [0-9]* - //')" ;;
                    "#"*) echo "$line" ;;
                esac
            done <"$f"
        fi
        r=$((r + 1))
    done
done

# ---- a rank that dies: the others must not hang ----
# GRM_TEST_LOOP makes every rank write its pid and run allreduces until one fails.
d="$tmp/kill"
mkdir -p "$d"
start=$(date +%s)
GRM_TEST_LOOP="$d" "$MPIRUN" $flags -n 2 "$t" >"$d/out" 2>&1 &
job=$!
( sleep 60; kill -9 $job 2>/dev/null ) &
watchdog=$!
i=0
while [ $i -lt 300 ] && { [ ! -s "$d/pid-0" ] || [ ! -s "$d/pid-1" ] || [ ! -s "$d/loops-1" ]; }; do
    sleep 0.1
    i=$((i + 1))
done
pid0=$(cat "$d/pid-0" 2>/dev/null)
pid1=$(cat "$d/pid-1" 2>/dev/null)
[ -n "$pid0" ] && [ -n "$pid1" ] && grep -q . "$d/loops-1" 2>/dev/null
ok $? "both ranks of mpirun -n 2 are in the allreduce loop"
killed=$(date +%s)
[ -n "$pid1" ] && kill -9 "$pid1"
wait $job
rc=$?
end=$(date +%s)
kill "$watchdog" 2>/dev/null
wait "$watchdog" 2>/dev/null
echo "# mpirun exit status $rc, $((end - killed)) s after rank 1 was killed" \
     "($((end - start)) s in all)"
[ $rc -ne 0 ] && [ $((end - killed)) -le 30 ]
ok $? "kill -9 of rank 1: mpirun exits non-zero within 30 s"
i=0
while [ -n "$pid0" ] && kill -0 "$pid0" 2>/dev/null && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ -n "$pid0" ] && ! kill -0 "$pid0" 2>/dev/null
ok $? "kill -9 of rank 1: rank 0 is gone too (within 10 s of mpirun's exit)"

# ---- grmhost launch ----
if [ ! -x "$g" ]; then
    skip "grmhost not built" "grmhost launch"
else
    PATH=/nonexistent "$g" launch -n 2 "$tmp/none.ini" 2>"$tmp/nompi.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q "launch: mpirun not found in PATH; install Debian packages" \
        "$tmp/nompi.err" && grep -q "openmpi-bin libopenmpi-dev" "$tmp/nompi.err"
    ok $? "launch without mpirun in PATH exits 1 naming openmpi-bin libopenmpi-dev"
    "$g" launch "$tmp/none.ini" 2>"$tmp/non.err"
    [ $? -eq 2 ] && grep -q "expected -n N" "$tmp/non.err"
    ok $? "launch without -n is a usage error (exit 2)"
    "$g" launch -n x "$tmp/none.ini" 2>"$tmp/nx.err"
    [ $? -eq 2 ] && grep -q "expected a number of ranks >= 1, got x" "$tmp/nx.err"
    ok $? "launch -n x is a usage error (exit 2)"
    GRM_MPIRUN=$(command -v "$MPIRUN") "$g" launch -n 2 -v "$tmp/none.ini" --max-steps 1 \
        >/dev/null 2>"$tmp/v.err"
    rc=$?
    exe=$(readlink -f "$g")
    want="-n 2 $exe train -v $tmp/none.ini --max-steps 1"
    [ $rc -ne 0 ] && grep "grmhost: launch: " "$tmp/v.err" | grep -q -e "$want\$" \
        && { [ "$(id -u)" -ne 0 ] || grep -q -e "--allow-run-as-root" "$tmp/v.err"; }
    ok $? "launch -v prints the mpirun command; a missing FILE.ini fails the job"

    # A real 2-rank run: every rank loads comm-mpi, joins the job, trains and exits 0.
    "$g" generate --users 60 --items 50 --clusters 4 --seed 3 --out "$tmp/data.tsv" >/dev/null
    cat >"$tmp/mpi.ini" <<EOI
[pipeline]
name = test-comm-mpi
threads = 1
[reader]
plugin = reader-text
path = $tmp/data.tsv
header = true
columns = user:i64,item:i64,ts:i64
[transform.seq]
plugin = transform-basic
sequence_by = user
sequence_order = ts
sequence_columns = item
[feature.history]
source = item
table = item
dim = 8
[dense.0]
plugin = dense-mlp
dims = 16,8
[head]
plugin = head-sampled-softmax
negatives = 8
[optimizer.sparse]
lr = 0.01
[optimizer.dense]
lr = 0.005
[train]
batch_size = 16
steps = 3
log_every = 1
eval_every = 1000000
topk = 5
[distributed]
plugin = comm-mpi
EOI
    "$g" launch -n 2 "$tmp/mpi.ini" >"$tmp/train.out" 2>"$tmp/train.err"
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$tmp/train.err" | tail -10
    ok $rc "grmhost launch -n 2 trains a pipeline with [distributed] plugin = comm-mpi"
fi
echo "1..$tap_n"

#!/bin/sh
# tests/test-dist.sh - core/dist.c under mpirun: tests/test-dist at 1, 2 and 4 ranks through
# the comm-mpi plugin (each rank writes its TAP to a file; this script re-numbers and merges
# them, prefixing "n=N rank R:"). Without $MPIRUN or without comm-mpi, the one-rank run goes
# through comm-single instead and the multi-rank runs are skipped.
# On a 2-core machine 4 ranks need --oversubscribe; as root Open MPI needs
# --allow-run-as-root. TAP output, plan at the end.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
t="$GRM_TOP_BUILDDIR/tests/test-dist"
[ -x "$t" ] || skip_all "tests/test-dist not built"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-dist-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# merge DIR N LABEL: re-emit the TAP of ranks 0 .. N-1 found in DIR under this numbering.
merge() {
    r=0
    while [ $r -lt "$2" ]; do
        f="$1/rank-$r.tap"
        if [ ! -f "$f" ]; then
            ok 1 "$3 rank $r: wrote its TAP file"
        else
            plan=$(sed -n 's/^1\.\.\([0-9]*\).*/\1/p' "$f" | head -1)
            got=$(grep -c -E '^(not )?ok ' "$f")
            [ "${plan:-x}" = "$got" ]
            ok $? "$3 rank $r: ran to the end, all ${plan:-?} tests (got $got)"
            while IFS= read -r line; do
                case "$line" in
                    "not ok "*) ok 1 "$3 rank $r: $(echo "$line" | sed 's/^not ok [0-9]* - //')" ;;
                    "ok "*) ok 0 "$3 rank $r: $(echo "$line" | sed 's/^ok [0-9]* - //')" ;;
                    "#"*) echo "$line" ;;
                esac
            done <"$f"
        fi
        r=$((r + 1))
    done
}

# ---- one process through comm-single: always ----
d="$tmp/single"
mkdir -p "$d"
GRM_TEST_COMM=comm-single GRM_TAP_DIR="$d" timeout 300 "$t" >"$d/out" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$d/out" | tail -20
ok $rc "comm-single: tests/test-dist exits 0"
merge "$d" 1 "comm-single"

# ---- 1, 2 and 4 ranks through comm-mpi ----
so=$(ls "$GRM_TOP_BUILDDIR"/plugins/comm-mpi/.libs/comm-mpi.so 2>/dev/null)
if [ -z "${MPIRUN:-}" ]; then
    skip "no mpirun (MPIRUN unset)" "mpirun runs"
elif [ -z "$so" ]; then
    skip "comm-mpi not built (configure found no MPI)" "mpirun runs"
else
    flags="--oversubscribe"
    [ "$(id -u)" -eq 0 ] && flags="--allow-run-as-root $flags"
    # Open MPI leaks in its own init under ASan; leaks of grm code show in the comm-single run.
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    export ASAN_OPTIONS
    for n in 1 2 4; do
        d="$tmp/n$n"
        mkdir -p "$d"
        GRM_TAP_DIR="$d" timeout 300 "$MPIRUN" $flags -n $n "$t" >"$d/out" 2>&1
        rc=$?
        [ $rc -ne 0 ] && sed 's/^/# /' "$d/out" | tail -20
        ok $rc "mpirun -n $n tests/test-dist exits 0"
        merge "$d" $n "n=$n"
    done
fi
echo "1..$tap_n"

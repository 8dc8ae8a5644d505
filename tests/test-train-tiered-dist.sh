#!/bin/sh
# tests/test-train-tiered-dist.sh - emb-dynamic's tiered mode across ranks and world sizes
# (issue 20: checkpoints of a tiered table "resume and N->M resharding work as for the
# other stores"), on test-reshard.sh's ranking pipeline (merged table user+item, ~500 rows)
# with the table in a cache of 12,000 bytes (~45 rows) over a backing file:
#  - one rank, tiered against in memory: the 60 losses bitwise;
#  - the tiered checkpoint of step 40 resharded 1 -> 2 -> 1 and resumed tiered on one rank:
#    the 60 losses of the uninterrupted in-memory run within 1e-5 (test-reshard.sh's
#    tolerance for a reshard);
#  - 2 ranks (comm-mpi), tiered against in memory: the same losses bitwise, and rank 0's
#    data thread prefetched rows (the keys of its batch that its rank owns);
#  - 2 ranks tiered for 40 steps, resharded to 1 rank and resumed there tiered: the 60
#    losses of the one-rank run within 1e-5;
#  - 1 rank tiered for 40 steps, resumed directly on 2 ranks (each filters the one file a
#    piece at a time): the 60 losses of the one-rank run within 1e-5, the file read a range
#    of each tensor in turn and each kept record written once; the same through
#    ckpt-safetensors;
#  - 2 ranks resumed with every row in the file and a cache that holds them all: every row
#    rank 0 fetched was its data thread's prefetch, those the other rank asked it for
#    included (each rank prefetches the keys it owns of every rank's samples); with
#    [train] prefetch_ranks = 1 (its own samples only) and prefetch_ahead = false the
#    lookups fetch some, the control;
#  - the same with prefetch_ranks = 1 and prefetch_ahead on (each lookup sends the next
#    batch's keys to their owners, and the first batch's go before the run's first step):
#    every row rank 0 fetched was its data thread's prefetch, the same losses bitwise;
#  - input = sharded (no shared order: prefetch_ahead is the only way an owner learns the
#    other ranks' keys early): no row fetched by the lookups (against some with
#    prefetch_ahead = false), the same losses bitwise.
# Without $MPIRUN or comm-mpi the 2-rank cases are skipped. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-tdist-tier-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..17"

dist_data || exit 1
mkdir -p "$tmp/tier"
rank_ini() {   # $1 comm plugin, $2 checkpoint dir, $3 tiered (1) or in memory (0)
    if [ "$3" = 1 ]; then
        ini_dist_ranking "$1" "$2" | sed "s|^plugin = emb-dynamic\$|plugin = emb-dynamic\\
backing = $tmp/tier\\
cache_bytes = 12000\\
evict = lru|"
    else
        ini_dist_ranking "$1" "$2"
    fi
}
train1() {   # INI STEPS OUT.jsonl: one rank (resuming when the checkpoint dir has one)
    "$g" train --max-steps "$2" --metrics-out "$3" "$1" >/dev/null 2>"$3.err"
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$3.err" | tail -5
    return $rc
}
s40=step-0000000040.grm

rank_ini comm-single "$tmp/ref" 0 >"$tmp/ref.ini"
train1 "$tmp/ref.ini" 60 "$tmp/ref.jsonl"
rc=$?
rank_ini comm-single "$tmp/t1" 1 >"$tmp/t1.ini"
train1 "$tmp/t1.ini" 60 "$tmp/t1.jsonl"
rc=$((rc | $?))
grep "cache .* of .* rows" "$tmp/t1.jsonl.err" | head -1 | sed 's/^/# /'
same_curve "$tmp/ref.jsonl" "$tmp/t1.jsonl" 0
ok $((rc | $?)) "one rank: the tiered table's 60 losses are the in-memory run's, bitwise"

# 1 -> 2 -> 1 of a tiered checkpoint, resumed tiered on one rank
rank_ini comm-single "$tmp/a" 1 >"$tmp/a.ini"
train1 "$tmp/a.ini" 40 "$tmp/a.jsonl"
rc=$?
"$g" reshard -q "$tmp/a.ini" -n 2 >"$tmp/a2.out" 2>&1
rc=$((rc | $?))
test $rc -eq 0 && test -f "$tmp/a/rank-0-of-2/$s40" && test -f "$tmp/a/rank-1-of-2/$s40"
ok $? "a tiered checkpoint of step 40 resharded 1 -> 2"
"$g" reshard -q "$tmp/a.ini" -n 1 >"$tmp/a1.out" 2>&1
rc=$?
train1 "$tmp/a.ini" 20 "$tmp/a.b.jsonl"
rc=$((rc | $?))
cat "$tmp/a.jsonl" "$tmp/a.b.jsonl" >"$tmp/aa.jsonl"
same_curve "$tmp/ref.jsonl" "$tmp/aa.jsonl" 1e-5
ok $((rc | $?)) "... then 2 -> 1 and resumed tiered on one rank: the 60 losses of the \
in-memory run within 1e-5"

mpi_or_skip 4 17
mpitrain() {   # N INI STEPS OUT.jsonl [FLAG] (stderr of all ranks in OUT.jsonl.out)
    mpi "$1" train ${5:-} --max-steps "$3" --metrics-out "$4" "$2" >"$4.out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$4.out" | tail -8
    return $rc
}

rank_ini comm-mpi "$tmp/m" 0 >"$tmp/m.ini"
mpitrain 2 "$tmp/m.ini" 60 "$tmp/m.jsonl"
rc=$?
rank_ini comm-mpi "$tmp/t2" 1 >"$tmp/t2.ini"
mpitrain 2 "$tmp/t2.ini" 60 "$tmp/t2.jsonl"
rc=$((rc | $?))
same_curve "$tmp/m.jsonl" "$tmp/t2.jsonl" 0
ok $((rc | $?)) "2 ranks: the tiered table's 60 losses are the 2-rank in-memory run's, bitwise"
grep "cache .* of .* rows" "$tmp/t2.jsonl.out" | sed 's/^/# /'
grep -q "cache [0-9]* of [0-9]* rows .*([1-9][0-9]* by prefetch)" "$tmp/t2.jsonl.out"
ok $? "2 ranks: rank 0's data thread prefetched rows of the keys its rank owns (the other \
ranks log warnings only)"
same_curve "$tmp/ref.jsonl" "$tmp/t2.jsonl" 1e-5
ok $? "... and the 2-rank tiered run takes the one-rank run's steps (within 1e-5)"

rank_ini comm-mpi "$tmp/b" 1 >"$tmp/b.ini"
mpitrain 2 "$tmp/b.ini" 40 "$tmp/b.jsonl"
rc=$?
"$g" reshard -q "$tmp/b.ini" -n 1 >"$tmp/b1.out" 2>&1
rc=$((rc | $?))
test $rc -eq 0 && test -f "$tmp/b/$s40"
ok $? "2 ranks tiered for 40 steps, the checkpoint resharded to 1 rank"
train1 "$tmp/b.ini" 20 "$tmp/b.b.jsonl"
rc=$?
cat "$tmp/b.jsonl" "$tmp/b.b.jsonl" >"$tmp/bb.jsonl"
same_curve "$tmp/ref.jsonl" "$tmp/bb.jsonl" 1e-5
ok $((rc | $?)) "... resumed tiered on one rank: the 60 losses of the one-rank run within 1e-5"

# 1 rank tiered for 40 steps, resumed directly on 2 ranks (no reshard): each rank reads the
# one file's ids for the rows it owns (ckpt-grm's load_rows), then the file a range of each
# tensor in turn (load_rows_interleaved), the rows it owns written straight into its own
# backing file, each record once
rank_ini comm-mpi "$tmp/o" 1 >"$tmp/o.ini"
mpitrain 1 "$tmp/o.ini" 40 "$tmp/o.jsonl"
rc=$?
mpitrain 2 "$tmp/o.ini" 20 "$tmp/o.b.jsonl" -v
rc=$((rc | $?))
grep -q "resuming 2 ranks from step 40 of the 1-rank checkpoints" "$tmp/o.b.jsonl.out"
ok $((rc | $?)) "1 rank tiered for 40 steps, resumed on 2 ranks directly (each keeps the rows \
it owns of the one file)"
cat "$tmp/o.jsonl" "$tmp/o.b.jsonl" >"$tmp/oo.jsonl"
same_curve "$tmp/ref.jsonl" "$tmp/oo.jsonl" 1e-5
ok $? "... the 60 losses of the one-rank run within 1e-5"
grep "rows restored into" "$tmp/o.b.jsonl.out" | sed 's/^/# /'
grep -q "the rows this rank owns known from the ids, read a range of each tensor in turn" \
    "$tmp/o.b.jsonl.out" \
    && grep -q "rows restored into .*(1.00 a record), 0 read back" "$tmp/o.b.jsonl.out"
ok $? "... rank 0 read the file a range of each tensor in turn and wrote each record of its \
rows once, reading none back (the other ranks log warnings only)"
# the same through ckpt-safetensors: its ranges of the tensors of as many rows in turn
rank_ini comm-mpi "$tmp/os" 1 \
    | sed 's/^\[checkpoint\]$/[checkpoint]\nplugin = ckpt-safetensors/' >"$tmp/os.ini"
mpitrain 1 "$tmp/os.ini" 40 "$tmp/os.jsonl"
rc=$?
mpitrain 2 "$tmp/os.ini" 20 "$tmp/os.b.jsonl" -v
rc=$((rc | $?))
cat "$tmp/os.jsonl" "$tmp/os.b.jsonl" >"$tmp/osos.jsonl"
same_curve "$tmp/ref.jsonl" "$tmp/osos.jsonl" 1e-5
rc=$((rc | $?))
grep "rows restored into" "$tmp/os.b.jsonl.out" | sed 's/^/# /'
grep -q "resuming 2 ranks from step 40 of the 1-rank checkpoints" "$tmp/os.b.jsonl.out" \
    && grep -q "040.safetensors: the rows this rank owns known from the ids, read a range of \
each tensor in turn" "$tmp/os.b.jsonl.out" \
    && grep -q "rows restored into .*(1.00 a record), 0 read back" "$tmp/os.b.jsonl.out"
ok $((rc | $?)) "ckpt-safetensors: 1 rank tiered for 40 steps, resumed on 2 ranks directly: \
the 60 losses within 1e-5, the file read a range of each tensor in turn, each record written \
once"

# Every row of a resumed run starts in the file; with a cache that holds them all nothing is
# evicted, so each fetch is either the data thread's prefetch or a lookup's. The rows rank 0
# owns that rank 1's samples hold come to it at the exchange: its data thread knows them
# from the shared order (every rank's samples of the batch), so they too are prefetched.
fetches() {   # OUT: "fetched prefetched" of rank 0's store summary in OUT
    line=$(grep "cache .* of .* rows" "$1" | head -1)
    echo "# $line" | cut -c1-200 >&2
    echo "$line" | sed -n 's/.*, \([0-9]*\) fetched from .*(\([0-9]*\) by prefetch).*/\1 \2/p'
}
rank_ini comm-mpi "$tmp/p" 1 | sed 's/^cache_bytes = 12000$/cache_bytes = 10M/' >"$tmp/p.ini"
mpitrain 2 "$tmp/p.ini" 30 "$tmp/p.jsonl"
rc=$?
mpitrain 2 "$tmp/p.ini" 30 "$tmp/p.b.jsonl"
rc=$((rc | $?))
set -- $(fetches "$tmp/p.b.jsonl.out")
test $rc -eq 0 && grep -q "each rank prefetches the keys it owns of every rank's samples" \
    "$tmp/p.b.jsonl.out" && [ "${1:-0}" -gt 0 ] && [ "$1" = "${2:-}" ]
ok $? "2 ranks resumed, every row in the file: all ${1:-?} rows rank 0 fetched were its \
data thread's prefetch, the other rank's requests included"
# the control: each rank's own samples only ([train] prefetch_ranks = 1 < 2 ranks, and no
# keys sent ahead)
rm -rf "$tmp/p"
mpitrain 2 "$tmp/p.ini" 30 "$tmp/q.jsonl"
rc=$?
cp -r "$tmp/p" "$tmp/p30"
mpi 2 train --set train.prefetch_ranks=1 --set train.prefetch_ahead=false \
    --metrics-out "$tmp/q.b.jsonl" "$tmp/p.ini" >"$tmp/q.b.jsonl.out" 2>&1
rc=$((rc | $?))
set -- $(fetches "$tmp/q.b.jsonl.out")
ctl=$((${1:-0} - ${2:-0}))
test $rc -eq 0 && grep -q "2 ranks are more than \[train\] prefetch_ranks = 1" \
    "$tmp/q.b.jsonl.out" && [ "${2:-0}" -gt 0 ] && [ "${1:-0}" -gt "${2:-0}" ]
ok $? "control, prefetch_ranks = 1, prefetch_ahead = false: rank 0's lookups fetched $ctl \
of its ${1:-?} rows, the other rank's requests"

# the same with the next batch's keys sent ahead of each lookup (the default)
rm -rf "$tmp/p"
cp -r "$tmp/p30" "$tmp/p"
mpi 2 train --set train.prefetch_ranks=1 --metrics-out "$tmp/r.b.jsonl" "$tmp/p.ini" \
    >"$tmp/r.b.jsonl.out" 2>&1
rc=$?
set -- $(fetches "$tmp/r.b.jsonl.out")
ahd=$((${1:-0} - ${2:-0}))
grep '"name":"dist.lookup.ids_ahead' "$tmp/r.b.jsonl" | tail -2 | cut -c80- | sed 's/^/# /'
test $rc -eq 0 && grep -q "sends the keys of its next batch to their owners" \
    "$tmp/r.b.jsonl.out" && [ "${2:-0}" -gt 0 ] && [ "$ahd" -eq 0 ] && [ "$ctl" -gt 0 ] \
    && grep '"name":"dist.lookup.ids_ahead_recv"' "$tmp/r.b.jsonl" | grep -qv '"value":0}'
ok $? "prefetch_ranks = 1 with the next batch's keys sent ahead: all ${1:-?} rows rank 0 \
fetched were its data thread's prefetch, none its lookups' (the control's: $ctl)"
same_curve "$tmp/q.b.jsonl" "$tmp/r.b.jsonl" 0
ok $? "... and its losses are the control's, bitwise"

# input = sharded: each rank its own users, no order shared
sh_run() {   # AHEAD OUT: 30 steps from scratch, every row of a 10M cache read back
    rm -rf "$tmp/s"
    rank_ini comm-mpi "$tmp/s" 1 | sed 's/^cache_bytes = 12000$/cache_bytes = 10M/' \
        >"$tmp/s.ini"
    mpi 2 train --set train.input=sharded --max-steps 30 "$tmp/s.ini" >/dev/null 2>&1 &&
    mpi 2 train --set train.input=sharded --set train.prefetch_ahead="$1" \
        --metrics-out "$2" "$tmp/s.ini" >"$2.out" 2>&1
}
sh_run false "$tmp/s0.jsonl"
rc=$?
set -- $(fetches "$tmp/s0.jsonl.out")
sctl=$((${1:-0} - ${2:-0}))
sh_run true "$tmp/s1.jsonl"
rc=$((rc | $?))
set -- $(fetches "$tmp/s1.jsonl.out")
sahd=$((${1:-0} - ${2:-0}))
same_curve "$tmp/s0.jsonl" "$tmp/s1.jsonl" 0
test $((rc | $?)) -eq 0 && [ "$sctl" -gt 0 ] && [ "$sahd" -eq 0 ]
ok $? "input = sharded: with the next batch's keys sent ahead rank 0's lookups fetched \
$sahd rows (every row its data thread's prefetch), without $sctl; the losses bitwise alike"

#!/bin/sh
# tests/test-train-dist.sh - training on several ranks (issue 5): the same pipeline under
# mpirun -n 2 and -n 4 through comm-mpi (rows sharded over the ranks and looked up through
# core/dist.c, dense gradients allreduced, batches weighted by their share of the global
# step's samples) takes the steps of one comm-single process: every logged loss within 1e-5
# relative, for a ranking pipeline on a merged emb-dynamic table and for a retrieval pipeline
# (sampled softmax without in-batch negatives) on emb-static, with gradient accumulation
# too. Resuming needs the same world size: another is refused with the fix. Only rank 0
# writes metrics. Without $MPIRUN or comm-mpi the multi-rank cases are skipped. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-tdist-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..15"

dist_data || exit 1
rank_ini() {   # $1 comm plugin, $2 accumulate, $3 checkpoint dir
    ini_dist_ranking "$1" "$3" "$2"
}
retr_ini() {   # $1 comm plugin
    ini_dist_retrieval "$1"
}

rank_ini comm-single 1 "$tmp/ck1" >"$tmp/r1.ini"
"$g" train --fresh --quiet --max-steps 60 --metrics-out "$tmp/r1.jsonl" "$tmp/r1.ini" \
    >/dev/null 2>"$tmp/r1.err"
ok $? "one rank (comm-single): a ranking run on merged table user+item"
rank_ini comm-single 2 "$tmp/ck1a" >"$tmp/r1a.ini"
"$g" train --fresh --quiet --max-steps 30 --metrics-out "$tmp/r1a.jsonl" "$tmp/r1a.ini" \
    >/dev/null 2>&1
retr_ini comm-single >"$tmp/s1.ini"
"$g" train --fresh --quiet --metrics-out "$tmp/s1.jsonl" "$tmp/s1.ini" >/dev/null 2>&1

mpi_or_skip 2 15

for n in 2 4; do
    rank_ini comm-mpi 1 "$tmp/ck$n" >"$tmp/r$n.ini"
    mpi $n train --fresh --quiet --max-steps 60 --metrics-out "$tmp/r$n.jsonl" "$tmp/r$n.ini" \
        >"$tmp/r$n.out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$tmp/r$n.out" | tail -8
    same_curve "$tmp/r1.jsonl" "$tmp/r$n.jsonl" 1e-5
    ok $(( rc | $? )) "ranking, $n ranks: the 60 step losses of one rank within 1e-5"
done
r1=$(metric "$tmp/r1.jsonl" train "table.user+item.rows")
r2=$(metric "$tmp/r2.jsonl" train "table.user+item.rows")
echo "# rows held by rank 0: $r1 alone, $r2 of 2 ranks"
awk -v a="${r1:-0}" -v b="${r2:-0}" 'BEGIN { exit !(b > 0.3 * a && b < 0.7 * a) }'
ok $? "2 ranks: rank 0 holds about half of the rows (they are sharded, not replicated)"
u=$(metric "$tmp/r2.jsonl" train dist.lookup.ids_unique)
s2=$(metric "$tmp/r2.jsonl" train dist.lookup.ids_sent)
w=$(metric "$tmp/r2.jsonl" train dist.lookup.ids_raw)
st=$(metric "$tmp/r2.jsonl" train dist.lookup.ids_store)
echo "# rank 0 per step: ids $w -> unique $u, sent $s2, looked up as owner $st"
awk -v w="${w:-0}" -v u="${u:-0}" -v s="${s2:--1}" -v st="${st:-0}" \
    'BEGIN { exit !(w >= u && u > 0 && s > 0 && s < u && st > 0) }'
ok $? "the exchange counters reach the metrics (ids raw >= unique > sent > 0)"
ls "$tmp/ck2/rank-0-of-2" "$tmp/ck2/rank-1-of-2" 2>/dev/null | grep -q "step-0000000060"
ok $? "each of 2 ranks checkpoints its own shard under dir/rank-R-of-2"

sed 's/^accumulate = 1$/accumulate = 1\nsparse_group = 2/' "$tmp/r4.ini" >"$tmp/r4h.ini"
mpi 4 train --fresh --quiet --max-steps 60 --metrics-out "$tmp/r4h.jsonl" "$tmp/r4h.ini" \
    >"$tmp/r4h.out" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/r4h.out" | tail -8
same_curve "$tmp/r1.jsonl" "$tmp/r4h.jsonl" 1e-5
ok $(( rc | $? )) "4 ranks as 2 replica groups of 2 (sparse_group = 2): one rank's losses"

rank_ini comm-mpi 2 "$tmp/ck2a" >"$tmp/r2a.ini"
mpi 2 train --fresh --quiet --max-steps 30 --metrics-out "$tmp/r2a.jsonl" "$tmp/r2a.ini" \
    >"$tmp/r2a.out" 2>&1
rc=$?
same_curve "$tmp/r1a.jsonl" "$tmp/r2a.jsonl" 1e-5
ok $(( rc | $? )) "accumulate = 2 on 2 ranks: the losses of one rank with accumulate = 2"

retr_ini comm-mpi >"$tmp/s2.ini"
mpi 2 train --fresh --quiet --metrics-out "$tmp/s2.jsonl" "$tmp/s2.ini" >"$tmp/s2.out" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/s2.out" | tail -8
same_curve "$tmp/s1.jsonl" "$tmp/s2.jsonl" 1e-5
ok $(( rc | $? )) "retrieval (user + history, sampled softmax), 2 ranks: one rank's 30 losses"
a=$(metric "$tmp/s1.jsonl" test hr@10); b=$(metric "$tmp/s2.jsonl" test hr@10)
echo "# test hr@10: 1 rank $a, 2 ranks $b"
[ -n "$a" ] && awk -v a="$a" -v b="${b:-x}" 'BEGIN { d = a - b; exit !(d < 1e-3 && d > -1e-3) }'
ok $? "and the same test HR@10 (evaluation sees the sharded rows)"

# resume on a world size that is not a multiple is refused, with the fix (a multiple
# resumes directly: tests/test-reshard.sh)
mpi 3 train --quiet --max-steps 10 "$tmp/r2.ini" >"$tmp/w.out" 2>&1
rc=$?
test $rc -ne 0 && grep -q "written by 2 ranks and this job has 3; resuming on another world size" \
    "$tmp/w.out"
ok $? "resuming 2-rank checkpoints on 3 ranks is refused, naming both sizes"
mpi 2 train --quiet --max-steps 10 --metrics-out "$tmp/res.jsonl" "$tmp/r2.ini" \
    >"$tmp/res.out" 2>&1
rc=$?
grep -q '"step":70,' "$tmp/res.jsonl"
ok $(( rc | $? )) "the same 2 ranks resume from step 60 and go on to 70"

# evaluation is sharded over the ranks: the same checkpoint evaluated by 4 (2) ranks and,
# resharded, by one gives the same metrics
cp -r "$tmp/ck4" "$tmp/ck4e"
sed "s|^dir = .*|dir = $tmp/ck4e|" "$tmp/r4.ini" >"$tmp/e4.ini"
mpi 4 eval --quiet --metrics-out "$tmp/e4.jsonl" "$tmp/e4.ini" --checkpoint "$tmp/ck4e" \
    >"$tmp/e4.out" 2>&1
rc=$?
"$g" reshard -q "$tmp/e4.ini" -n 1 >/dev/null 2>&1 &&
    sed 's/^plugin = comm-mpi/plugin = comm-single/' "$tmp/e4.ini" >"$tmp/e1.ini" &&
    "$g" eval --quiet --metrics-out "$tmp/e1.jsonl" "$tmp/e1.ini" --checkpoint "$tmp/ck4e" \
        >/dev/null 2>"$tmp/e1.err"
rc=$(( rc | $? ))
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/e4.out" "$tmp/e1.err" | tail -8
same_metrics "$tmp/e1.jsonl" "$tmp/e4.jsonl"
ok $(( rc | $? )) "ranking evaluation on 4 ranks (each its share of the rows): one rank's AUC, GAUC, logloss"

{ retr_ini comm-mpi; printf '[checkpoint]\ndir = %s\n' "$tmp/cks"; } >"$tmp/sc2.ini"
mpi 2 train --fresh --quiet "$tmp/sc2.ini" >"$tmp/sc2.out" 2>&1 &&
    mpi 2 eval --quiet --metrics-out "$tmp/se2.jsonl" "$tmp/sc2.ini" --checkpoint "$tmp/cks" \
        >>"$tmp/sc2.out" 2>&1 &&
    "$g" reshard -q "$tmp/sc2.ini" -n 1 >>"$tmp/sc2.out" 2>&1 &&
    sed 's/^plugin = comm-mpi/plugin = comm-single/' "$tmp/sc2.ini" >"$tmp/sc1.ini" &&
    "$g" eval --quiet --metrics-out "$tmp/se1.jsonl" "$tmp/sc1.ini" --checkpoint "$tmp/cks" \
        >>"$tmp/sc2.out" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/sc2.out" | tail -8
same_metrics "$tmp/se1.jsonl" "$tmp/se2.jsonl"
ok $(( rc | $? )) "retrieval evaluation on 2 ranks (each its share of the users): one rank's HR, NDCG, MRR"

# Evaluation in catalog chunks on 2 ranks: each rank ranks its users in one pass over the
# chunks, and the users whose band overflows (item rows start at zero and one step of 4
# samples touches few items, so the untouched ones tie) are ranked again in a second pass
# that every rank takes, its lookups being collective. The metrics are the one-chunk
# evaluation's, bitwise.
{ retr_ini comm-mpi; printf '[checkpoint]\ndir = %s\n' "$tmp/ckz"; } \
    | sed 's/^table = item$/table = item\ninit = zeros/' >"$tmp/z2.ini"
mpi 2 train --fresh --quiet --max-steps 1 --set train.batch_size=4 "$tmp/z2.ini" \
    >"$tmp/z2.out" 2>&1
rc=$?
for c in one chunks; do
    mem=; [ $c = chunks ] && mem="--set train.eval_memory_mb=1"
    mpi 2 eval -v --checkpoint "$tmp/ckz" --set train.eval_batch=32768 $mem \
        --metrics-out "$tmp/ze-$c.jsonl" "$tmp/z2.ini" >"$tmp/ze-$c.out" 2>&1
    rc=$(( rc | $? ))
    sed 's/.*\("step":.*\)}/\1/' "$tmp/ze-$c.jsonl" >"$tmp/ze-$c.v"
done
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/z2.out" "$tmp/ze-chunks.out" | tail -8
grep "chunks of\|second time" "$tmp/ze-chunks.out" | sed 's/^/# /'
test $rc -eq 0 && test "$(grep -c . "$tmp/ze-one.v")" -ge 8 \
    && cmp -s "$tmp/ze-one.v" "$tmp/ze-chunks.v" && grep -q "second time" "$tmp/ze-chunks.out"
ok $? "retrieval evaluation on 2 ranks in catalog chunks, with a second pass for the users \
whose targets tie: the one-chunk evaluation's metrics, bitwise"

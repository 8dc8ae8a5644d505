#!/bin/sh
# tests/test-train-tiered.sh - emb-dynamic's tiered mode in training (issue 20): a retrieval
# run whose tables live mostly in a backing file (cache_bytes far below the rows; the file
# holds >= 10x the cache) gives bitwise the losses and the validation and test metrics of
# the same run with every row in memory, with the data thread prefetching the next batches'
# rows (prefetch = 2) and without it; a tiered run checkpointing every step and writing rows
# back every step, killed with SIGKILL once a checkpoint of step >= 20 exists (so inside a
# write-back, a checkpoint or a step), resumes and ends bitwise as the uninterrupted run; so
# does one killed inside a write-back pwrite (step 18's) and one killed inside a checkpoint
# save (tests/kill-at-write.c, LD_PRELOAD: half the bytes written, then SIGKILL), in
# ckpt-grm and in ckpt-safetensors; one whose backing disk fills up inside a write-back
# stops with an error naming the fix and resumes likewise, as do saves of either format
# that fill the checkpoints' disk.
# The data thread's trim ([train] prefetch_evict) moves most evicted rows out, and an oracle
# (tests/plugins/emb-trim-check.c) checks that every trim keeps the batches in flight.
# A resumed run (every row in the file) fetches every row through the data thread's
# prefetch, the negatives' included. `grmhost profile` prints the miss-ratio curve and the
# cache auto would choose, keeping nothing. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-tiered-XXXXXX")
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..34"

"$g" generate --users 300 --items 400 --clusters 6 --seed 12 --out "$tmp/gen.tsv" || exit 1
# Repeated items, which evaluation must exclude from the candidates once: every 4th user
# takes its second item again after its last (its test target is then in its history), and
# every 7th its first after that.
awk -F '\t' 'NR == 1 { print; next } { print; n[$1]++; if (n[$1] <= 2) it[$1, n[$1]] = $2;
    if ($3 > last[$1]) last[$1] = $3 }
    END { for (u in n) { if (u % 4 == 0) print u "\t" it[u, 2] "\t" last[u] + 1;
                         if (u % 7 == 0) print u "\t" it[u, 1] "\t" last[u] + 2 } }' \
    OFS='\t' "$tmp/gen.tsv" >"$tmp/ev.tsv" || exit 1
ini() {   # $1 prefetch, $2 embedding lines, $3 checkpoint dir (or empty)
    ini_events "$tmp/ev.tsv"
    ini_history
    printf '[embedding]\nplugin = emb-dynamic\n%b\n' "$2"
    ini_mlp_softmax
    cat <<EOI
[train]
time_column = ts
max_seq_len = 10
batch_size = 32
steps = 60
log_every = 1
eval_every = 30
prefetch = $1
EOI
    [ -n "$3" ] && printf '[checkpoint]\ndir = %s\nevery = 1\nkeep = 3\n' "$3"
    return 0
}
run() {   # NAME: train NAME.ini into NAME.jsonl
    "$g" train --fresh --metrics-out "$tmp/$1.jsonl" "$tmp/$1.ini" >/dev/null 2>"$tmp/$1.err"
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$tmp/$1.err" | tail -5
    return $rc
}
same_metrics() {   # A B: the same valid and test hr@10 / ndcg@10, to the digit
    for m in "valid hr@10" "test hr@10" "test ndcg@10"; do
        a=$(metric "$1" $m); b=$(metric "$2" $m)
        echo "# $m: $a vs $b"
        [ -n "$a" ] && [ "$a" = "$b" ] || return 1
    done
}
# A row of dim 16 with Adam costs 264 bytes in the cache (record + key slots): 12000 bytes
# hold 45 rows of the ~700 the run touches.
tier="backing = $tmp/tier\ncache_bytes = 12000\nevict = lru"
mkdir -p "$tmp/tier"

ini 2 "" "" >"$tmp/mem.ini"; run mem || echo "# mem failed"
ini 2 "$tier" "" >"$tmp/t2.ini"; run t2 || echo "# t2 failed"
ini 0 "$tier" "" >"$tmp/t0.ini"; run t0 || echo "# t0 failed"
same_curve "$tmp/mem.jsonl" "$tmp/t2.jsonl" 0 && same_metrics "$tmp/mem.jsonl" "$tmp/t2.jsonl"
ok $? "tiered (cache 45 rows, prefetch = 2): the 60 losses and the valid/test metrics \
are the in-memory run's, bitwise"
same_curve "$tmp/mem.jsonl" "$tmp/t0.jsonl" 0 && same_metrics "$tmp/mem.jsonl" "$tmp/t0.jsonl"
ok $? "tiered without prefetch (rows fetched by the lookups): the same losses and metrics"

# The store's summary at exit: rows of both tiers, fetched (by prefetch), written back.
line=$(grep "cache .* of .* rows" "$tmp/t2.err" | head -1)
echo "# $line"
rows=$(echo "$line" | sed -n 's/.*cache [0-9]* of \([0-9]*\) rows (budget \([0-9]*\)).*/\1 \2/p')
pre=$(echo "$line" | sed -n 's/.*(\([0-9]*\) by prefetch).*/\1/p')
set -- $rows
[ -n "${1:-}" ] && [ "$1" -ge $((10 * $2)) ] && [ "${pre:-0}" -gt 0 ]
ok $? "the backing tier held >= 10x the cache's rows, and the data thread prefetched rows"

# [train] prefetch_evict (default): the data thread trims the cache after each prefetch
# (grm_emb_ops.trim), so the rows leave it off the trainer's time, and none of the batches
# in flight goes (every row fetched was the prefetch's); false: the trainer's lookups and
# updates evict them all. The losses stay the in-memory run's either way. On a table of
# 7,366 rows under a budget of 1,515, beyond the batches in flight (in the small run above
# they fill the cache, and what a trim may take depends on how far ahead the data thread
# is).
"$g" generate --users 2000 --items 20000 --clusters 20 --seed 12 --out "$tmp/large.tsv" \
    >/dev/null 2>&1 || echo "# generate failed"
sed "s|$tmp/ev.tsv|$tmp/large.tsv|; s/cache_bytes = 12000/cache_bytes = 400000/" \
    "$tmp/t2.ini" >"$tmp/large.ini"
sed "s|$tmp/ev.tsv|$tmp/large.tsv|" "$tmp/mem.ini" >"$tmp/largemem.ini"
for v in mem true false; do
    i="$tmp/large.ini" e=$v; [ $v = mem ] && i="$tmp/largemem.ini" e=true
    "$g" train --fresh --set train.prefetch_evict=$e --set train.eval_every=0 \
        --metrics-out "$tmp/large-$v.jsonl" "$i" >/dev/null 2>"$tmp/large-$v.err" ||
        sed 's/^/# /' "$tmp/large-$v.err" | tail -3
done
trimmed() { sed -n "s/.* \([0-9]*\) moved out by the data thread's trim.*/\1/p" "$1" | head -1; }
evicted() { sed -n 's/.*, \([0-9]*\) evictions$/\1/p' "$1" | head -1; }
fetches() { sed -n 's/.*, \([0-9]*\) fetched from .*(\([0-9]*\) by prefetch).*/\1 \2/p' "$1" | head -1; }
tr=$(trimmed "$tmp/large-true.err"); ev=$(evicted "$tmp/large-true.err")
trn=$(trimmed "$tmp/large-false.err"); evn=$(evicted "$tmp/large-false.err")
set -- $(fetches "$tmp/large-true.err")
echo "# trimmed $tr of $ev evictions, ${1:-?} rows fetched, ${2:-?} by prefetch;" \
    "with prefetch_evict = false $trn of $evn"
[ "${tr:-0}" -gt 0 ] && [ $((4 * ${tr:-0})) -gt "${ev:-0}" ] && [ "${1:-0}" -gt 0 ] &&
    [ "$1" = "${2:-}" ] && [ "${trn:-1}" -eq 0 ] && [ "${evn:-0}" -gt 0 ] &&
    same_curve "$tmp/large-mem.jsonl" "$tmp/large-true.jsonl" 0 &&
    same_curve "$tmp/large-mem.jsonl" "$tmp/large-false.jsonl" 0
ok $? "the data thread moved out $tr of $ev evicted rows, and every row fetched was its \
prefetch's (none of a batch in flight went); with prefetch_evict = false it moved none \
($trn of $evn); the losses both the in-memory run's, bitwise"
# The host's keep_from against an oracle (tests/plugins/emb-trim-check.c: emb-dynamic that
# follows the batches from their prefetch to their lookup and fails a trim that would let
# the rows of one still waiting go), on the small cache above (its batches fill it) and
# on the large table.
chk=0
for i in t2 large; do
    sed 's/^plugin = emb-dynamic$/plugin = emb-trim-check/' "$tmp/$i.ini" >"$tmp/$i-chk.ini"
    GRM_PLUGIN_PATH="$GRM_TOP_BUILDDIR/tests/plugins/.libs" "$g" train --fresh \
        --set train.eval_every=0 --metrics-out "$tmp/$i-chk.jsonl" "$tmp/$i-chk.ini" \
        >/dev/null 2>"$tmp/$i-chk.err" || { sed 's/^/# /' "$tmp/$i-chk.err" | tail -2; chk=1; }
    line=$(grep "emb-trim-check: .* trims" "$tmp/$i-chk.err")
    echo "# $i: $line"
    n=$(echo "$line" | sed -n 's/.* \([0-9]*\) checked against.*/\1/p')
    [ "${n:-0}" -gt 0 ] && echo "$line" | grep -q ", 0 kept too little" || chk=1
done
same_curve "$tmp/large-mem.jsonl" "$tmp/large-chk.jsonl" 0 || chk=1
test $chk -eq 0
ok $? "every trim the host asked for kept the rows of the batches prefetched and not yet \
looked up (an oracle checked each), on a cache its batches fill and on a large table"

# kill -9 of a tiered run that checkpoints every step, then resume
ini 2 "$tier" "$tmp/ref" >"$tmp/ref.ini"
"$g" train --quiet --metrics-out "$tmp/ref.jsonl" "$tmp/ref.ini" >/dev/null 2>"$tmp/ref.err"
ok $? "uninterrupted tiered run: 60 steps, a checkpoint every step"
ck="$tmp/ck"
ini 2 "$tier" "$ck" >"$tmp/crash.ini"
"$g" train --quiet --metrics-out "$tmp/crash.jsonl" "$tmp/crash.ini" >/dev/null 2>&1 &
pid=$!
i=0
while [ $i -lt 6000 ]; do
    s=$(ls "$ck" 2>/dev/null | sed -n 's/^step-0*\([0-9][0-9]*\)\.grm$/\1/p' | sort -n | tail -1)
    [ "${s:-0}" -ge 20 ] && break
    sleep 0.01
    i=$((i + 1))
done
kill -9 $pid 2>/dev/null
{ wait $pid; } 2>/dev/null
rc=$?
pid=
echo "# killed at exit $rc after" \
    "$(losses "$tmp/crash.jsonl" | tail -1 | cut -d' ' -f1) logged steps"
resume_same() {   # NAME [INI]: resume crash.ini (or INI) into NAME.jsonl; 0 when it ends
                  # as ref.jsonl
    "$g" train --metrics-out "$tmp/$1.jsonl" "${2:-$tmp/crash.ini}" >/dev/null 2>"$tmp/$1.err"
    rc2=$?
    [ $rc2 -ne 0 ] && sed 's/^/# /' "$tmp/$1.err" | tail -3
    la=$(metric "$tmp/ref.jsonl" train loss); lb=$(metric "$tmp/$1.jsonl" train loss)
    echo "# final loss $la vs $lb"
    test $rc2 -eq 0 && [ -n "$la" ] && [ "$la" = "$lb" ] || return 1
    losses "$tmp/ref.jsonl" >"$tmp/l1"; losses "$tmp/$1.jsonl" >"$tmp/l2"
    [ -s "$tmp/l2" ] && awk 'NR == FNR { ref[$1] = $2; next }
        { n++; if (!($1 in ref) || ref[$1] != $2) { print "# step " $1 ": " $2; bad = 1 } }
        END { print "# " n " resumed steps compared"; exit bad }' "$tmp/l1" "$tmp/l2" \
        && same_metrics "$tmp/ref.jsonl" "$tmp/$1.jsonl"
}
resume_same resumed
r=$?
test $rc -eq 137 && test $r -eq 0
ok $? "killed by SIGKILL after step 20, the resumed tiered run's losses (every step) and \
test metrics are the uninterrupted run's, bitwise"

# kill -9 inside a write-back (the 19th pwrite to the backing file: its header, then one
# write-back a step, so inside step 18's) and inside a checkpoint save (the 4000th fwrite
# to a checkpoint's temporary, ~step 22)
shim="$GRM_TOP_BUILDDIR/tests/.libs/kill-at-write.so"
if ldd "$g" 2>/dev/null | grep -q libasan; then
    skip "ASan must be the first library: no LD_PRELOAD" "kill -9 inside a write-back"
    skip "ASan must be the first library: no LD_PRELOAD" "... resumes bitwise"
    skip "ASan must be the first library: no LD_PRELOAD" "kill -9 inside a checkpoint save"
    skip "ASan must be the first library: no LD_PRELOAD" "... resumes bitwise"
    kills=
else
    kills="tier .tier 19|ckpt .grm.tmp 4000"
fi
IFS='|'
for what in $kills; do
    IFS=' '
    set -- $what
    rm -rf "$ck"
    GRM_KILL_MATCH=$2 GRM_KILL_AT=$3 LD_PRELOAD="$shim" "$g" train --quiet \
        --metrics-out "$tmp/k$1.jsonl" "$tmp/crash.ini" >/dev/null 2>&1 &
    pid=$!
    { wait $pid; } 2>/dev/null
    rc=$?
    pid=
    left=$(ls "$ck" 2>/dev/null | tr '\n' ' ')
    echo "# exit $rc; left: $left"
    case $1 in
    tier) test $rc -eq 137 && [ -n "$left" ]
        ok $? "SIGKILL inside step 18's write-back pwrite (half its records written), after \
checkpoints were saved" ;;
    ckpt) test $rc -eq 137 && echo "$left" | grep -q '\.grm\.tmp\.'
        ok $? "SIGKILL inside a checkpoint save (its temporary left half written)" ;;
    esac
    resume_same "r$1"
    ok $? "... the resumed run's losses and metrics are the uninterrupted run's, bitwise"
done
IFS=' 	
'

# The backing file's disk fills up at step 18's write-back (the shim writes half, then
# every pwrite fails with ENOSPC): the run stops with an error that says so and what to do,
# and resumes from its last checkpoint (with room again) to the uninterrupted run's end.
# The write that fails may be the trainer's or the data thread's trim (which writes rows
# back ahead of the trainer): its message then says `trim:` after the plugin's name.
if [ -z "$kills" ]; then
    skip "ASan must be the first library: no LD_PRELOAD" "disk full during a write-back"
    skip "ASan must be the first library: no LD_PRELOAD" "... resumes bitwise"
else
    rm -rf "$ck"
    GRM_KILL_MATCH=.tier GRM_FULL_AT=19 LD_PRELOAD="$shim" "$g" train --quiet \
        --metrics-out "$tmp/kfull.jsonl" "$tmp/crash.ini" >/dev/null 2>"$tmp/kfull.err"
    rc=$?
    msg=$(grep "No space" "$tmp/kfull.err")
    echo "# exit $rc: $msg"
    test $rc -eq 1 &&
        echo "$msg" | grep -q "^grmhost: \[embedding\] emb-dynamic: \(trim: \)\?$tmp/tier/" &&
        echo "$msg" | grep -q "free space on the disk of (or move) backing = $tmp/tier" &&
        echo "$msg" | grep -q "resume from the last checkpoint" && ls "$ck" | grep -q '\.grm$'
    ok $? "the backing disk full at step 18's write-back: exit 1, one line naming the file, \
ENOSPC and the fix, the checkpoints before it kept"
    resume_same rfull
    ok $? "... resumed with room again, the losses and metrics are the uninterrupted run's, bitwise"
fi
# ... and the checkpoints' disk, inside a save (~step 22): the save fails naming its file
# and ENOSPC, its temporary is removed, the checkpoints before it stay
if [ -z "$kills" ]; then
    skip "ASan must be the first library: no LD_PRELOAD" "disk full during a checkpoint save"
    skip "ASan must be the first library: no LD_PRELOAD" "... resumes bitwise"
else
    rm -rf "$ck"
    GRM_KILL_MATCH=.grm.tmp GRM_FULL_AT=4000 LD_PRELOAD="$shim" "$g" train --quiet \
        --metrics-out "$tmp/kfull2.jsonl" "$tmp/crash.ini" >/dev/null 2>"$tmp/kfull2.err"
    rc=$?
    msg=$(grep "No space" "$tmp/kfull2.err")
    left=$(ls "$ck" 2>/dev/null | tr '\n' ' ')
    echo "# exit $rc: $msg; left: $left"
    test $rc -eq 1 && echo "$msg" | grep -q "ckpt-grm: $ck/step-.*\.grm: cannot write" &&
        ! echo "$left" | grep -q '\.tmp\.' && echo "$left" | grep -q '\.grm'
    ok $? "the checkpoints' disk full inside a save: exit 1 naming the file and ENOSPC, its \
temporary removed, the checkpoints before it kept"
    resume_same rfull2
    ok $? "... resumed, the losses and metrics are the uninterrupted run's, bitwise"
fi

# The same checkpoints resumed with every row in memory (backing, cache_bytes and evict
# gone: without max_rows they only place rows, grm_emb_ops.placement, ABI 1.11): no
# warning of another model, and the same end
grep -v '^backing = \|^cache_bytes = \|^evict = ' "$tmp/crash.ini" >"$tmp/inmem.ini"
rm -rf "$ck"
"$g" train --quiet --max-steps 25 --metrics-out "$tmp/rinmem.jsonl" "$tmp/crash.ini" \
    >/dev/null 2>&1
resume_same rinmem "$tmp/inmem.ini"
r=$?
grep "other model settings" "$tmp/rinmem.err" | sed 's/^/# /'
test $r -eq 0 && ! grep -q "other model settings" "$tmp/rinmem.err" &&
    ! grep -q "^backing" "$tmp/inmem.ini"
ok $? "a tiered run's checkpoint resumed with every row in memory: no warning of another \
model, the uninterrupted run's losses and metrics, bitwise"

# Every row of a resumed run starts in the file (load writes them all there, the cache
# starts empty); with a cache that holds them all, nothing is evicted, so every fetch of
# the resumed run must be the data thread's: the batches' keys, and the negatives, which
# its own head draws again from batch g's seed.
ini 2 "backing = $tmp/tier\ncache_bytes = 10M\nevict = lru" "$tmp/ckbig" >"$tmp/big.ini"
"$g" train --quiet --max-steps 30 "$tmp/big.ini" >/dev/null 2>&1
"$g" train -v "$tmp/big.ini" >/dev/null 2>"$tmp/big.err"
rc=$?
line=$(grep "cache .* of .* rows" "$tmp/big.err" | head -1)
echo "# $line"
set -- $(fetches "$tmp/big.err")
test $rc -eq 0 && [ "${1:-0}" -gt 0 ] && [ "$1" = "${2:-}" ]
ok $? "resumed with every row in the file: all ${1:-?} rows fetched were fetched by the data \
thread's prefetch, the negatives' included"

# ckpt-safetensors reads and writes by rows too (save_rows: each range read twice, for the
# header's XXH64 and for the bytes): 30 steps checkpointed there, resumed to 60, end as the
# uninterrupted run, bitwise
{ ini 2 "$tier" "$tmp/ckst"; echo "plugin = ckpt-safetensors"; } >"$tmp/st.ini"
"$g" train --quiet --max-steps 30 "$tmp/st.ini" >/dev/null 2>"$tmp/st1.err"
rc=$?
"$g" train -v --metrics-out "$tmp/st.jsonl" "$tmp/st.ini" >/dev/null 2>"$tmp/st2.err"
rc=$((rc | $?))
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/st1.err" "$tmp/st2.err" | tail -4
la=$(metric "$tmp/ref.jsonl" train loss); lb=$(metric "$tmp/st.jsonl" train loss)
echo "# final loss $la vs $lb"
test $rc -eq 0 && grep -q "resuming from $tmp/ckst/step-0000000030.safetensors" \
    "$tmp/st2.err" && [ -n "$la" ] && [ "$la" = "$lb" ] && same_metrics "$tmp/ref.jsonl" \
    "$tmp/st.jsonl"
ok $? "tiered with ckpt-safetensors (by rows): 30 steps, resumed to 60, the uninterrupted \
run's final loss and metrics, bitwise"

# ... and its saves are as crash-safe as ckpt-grm's (both write through ckpt-common's
# ckpt_tmp): SIGKILL inside the 100th pwrite to a .safetensors temporary (half of it
# written, ~step 6), and the disk full at the 100th (the shim writes half, then ENOSPC):
# the error names the file and ENOSPC, the temporary is gone, the checkpoints before it
# stay, and either run resumes to the uninterrupted run's end, bitwise
if [ -z "$kills" ]; then
    for d in "SIGKILL inside a ckpt-safetensors save" "... resumes bitwise" \
             "the disk full inside a ckpt-safetensors save" "... resumes bitwise"; do
        skip "ASan must be the first library: no LD_PRELOAD" "$d"
    done
else
    for v in KILL FULL; do
        rm -rf "$tmp/ckst"
        env GRM_KILL_MATCH=.safetensors.tmp GRM_${v}_AT=100 LD_PRELOAD="$shim" "$g" train \
            --quiet "$tmp/st.ini" >/dev/null 2>"$tmp/st$v.err" &
        pid=$!
        { wait $pid; } 2>/dev/null
        rc=$?
        pid=
        left=$(ls "$tmp/ckst" 2>/dev/null | tr '\n' ' ')
        msg=$(grep "No space" "$tmp/st$v.err")
        echo "# exit $rc: ${msg:-no message}; left: $left"
        if [ $v = KILL ]; then
            test $rc -eq 137 && echo "$left" | grep -q '\.safetensors\.tmp\.' &&
                echo "$left" | grep -q 'step-[0-9]*\.safetensors '
            ok $? "SIGKILL inside a ckpt-safetensors save: its temporary left half written, \
the checkpoints before it kept"
        else
            test $rc -eq 1 && echo "$msg" | grep -q "ckpt-safetensors: $tmp/ckst/step-[0-9]*\.\
safetensors: cannot write $tmp/ckst/step-[0-9]*\.safetensors\.tmp\.[0-9]*: No space" &&
                ! echo "$left" | grep -q '\.tmp\.' && echo "$left" | grep -q '\.safetensors'
            ok $? "the disk full inside a ckpt-safetensors save: exit 1 naming the file and \
ENOSPC, its temporary removed, the checkpoints before it kept"
        fi
        resume_same "rst$v" "$tmp/st.ini"
        ok $? "... resumed, the losses and metrics are the uninterrupted run's, bitwise"
    done
fi

# How the resumes above read their checkpoints (ABI 1.13): both formats hand the tiered
# table's tensors over a range of each in turn (load_rows_interleaved), and the store
# writes each record once and reads none back. (A table this small is one range:
# tests/test-emb-tiered.c counts the bytes of one larger than the store's restore window.)
grep "restored into\|a range of each tensor in turn\|a tensor at a time" "$tmp/big.err" \
    "$tmp/st2.err" | sed "s|$tmp/||; s/^/# /"
for f in "$tmp/big.err" "$tmp/st2.err"; do
    grep -q "step-[0-9]*\.[a-z]*: read a range of each tensor in turn (load_rows_interleaved)" \
        "$f" && grep -q "rows restored into .*(1\.00 a record), 0 read back" "$f" || break
done
ok $? "a resume reads ckpt-grm and ckpt-safetensors a range of each tensor in turn \
(load_rows_interleaved), each record written once and none read back"

# The dense layers' tensors of as many rows (a 2048 x 2048 layer: its weight, bias and
# their Adam moments, all of 2048 rows, over 8 MiB together) come a range of each in turn
# from ckpt-safetensors' load_rows_interleaved too, and the trainer puts several of them
# together at once: 4 steps checkpointed, resumed to 8, the uninterrupted 8 steps' losses.
wide='s/^dims = 32,16$/dims = 2048,2048,16/; s/^steps = 60$/steps = 8/; s/^every = 1$/every = 4/'
for r in wide-ref wide; do
    { ini 2 "" "$tmp/ck-$r"; echo "plugin = ckpt-safetensors"; } | sed "$wide" >"$tmp/$r.ini"
done
"$g" train --fresh --metrics-out "$tmp/wide-ref.jsonl" "$tmp/wide-ref.ini" >/dev/null \
    2>"$tmp/wide-ref.err" || sed 's/^/# /' "$tmp/wide-ref.err" | tail -3
"$g" train --fresh --max-steps 4 "$tmp/wide.ini" >/dev/null 2>"$tmp/wide1.err" ||
    sed 's/^/# /' "$tmp/wide1.err" | tail -3
"$g" train -v --metrics-out "$tmp/wide.jsonl" "$tmp/wide.ini" >/dev/null 2>"$tmp/wide2.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/wide2.err" | tail -3
losses "$tmp/wide-ref.jsonl" | tail -4 >"$tmp/wl1"; losses "$tmp/wide.jsonl" >"$tmp/wl2"
sed 's/^/# /' "$tmp/wl2"
test $rc -eq 0 && grep -q "resuming from $tmp/ck-wide/step-0000000004.safetensors" \
    "$tmp/wide2.err" && grep -q "read a range of each tensor in turn" "$tmp/wide2.err" &&
    test "$(grep -c . "$tmp/wl2")" -eq 4 && cmp -s "$tmp/wl1" "$tmp/wl2"
ok $? "a 2048 x 2048 dense layer's tensors, interleaved by ckpt-safetensors and put together \
at once by the trainer: resumed at step 4, the uninterrupted run's losses to step 8, bitwise"

# Evaluation ranks a catalog a chunk at a time when its rows and scores pass
# [train] eval_memory_mb: 400 items x (16 + 4096) floats = 6.6 MB, so 1 MiB is 7 chunks of
# 63. The ranks, so every metric and the baseline's, are those of the one-chunk evaluation.
for c in one chunks; do
    mem=; [ $c = chunks ] && mem="--set train.eval_memory_mb=1"
    "$g" eval --checkpoint "$tmp/ref" --set train.eval_batch=4096 $mem \
        --metrics-out "$tmp/ev-$c.jsonl" "$tmp/ref.ini" >/dev/null 2>"$tmp/ev-$c.err"
done
grep "chunks" "$tmp/ev-chunks.err" | sed 's/^/# /'
for c in one chunks; do     # step, split, name, value of each metric
    sed 's/.*\("step":.*\)}/\1/' "$tmp/ev-$c.jsonl" >"$tmp/ev-$c.v"
done
test "$(grep -c . "$tmp/ev-one.v")" -ge 8 && cmp -s "$tmp/ev-one.v" "$tmp/ev-chunks.v" \
    && grep -q "ranked in 7 chunks of 63 items" "$tmp/ev-chunks.err" \
    && ! grep -q "chunks" "$tmp/ev-one.err"
ok $? "evaluation in 7 catalog chunks (eval_memory_mb = 1): every metric, the most-popular \
baseline's too, equals the one-chunk evaluation's"

# The most-popular baseline ranks by sorting the catalog once (core/eval.c rank_popular);
# here it is recomputed from the TSV alone: leave-one-out (users of >= 3 items; valid the
# second-last, test the last), counts from the training part, history excluded, ties to
# the lower id. HR@10, NDCG@10 and MRR to 1e-8 (the metrics file prints 9 digits).
if command -v python3 >/dev/null 2>&1; then
    python3 - "$tmp/ev.tsv" >"$tmp/pop.ref" <<'EOP'
import collections, math, sys
seq = collections.defaultdict(list)
for i, line in enumerate(open(sys.argv[1]).read().split('\n')[1:]):
    if line:
        u, item, ts = map(int, line.split('\t'))
        seq[u].append((ts, i, item))
hist = {u: [item for _, _, item in sorted(v)] for u, v in seq.items()}
count, catalog = collections.Counter(), set()
for h in hist.values():
    catalog.update(h)
    count.update(h[:len(h) - 2] if len(h) >= 3 else h)
for split, back in (('valid', 2), ('test', 1)):
    hr = ndcg = mrr = n = 0
    for h in hist.values():
        if len(h) < 3:
            continue
        t = h[len(h) - back]
        seen = set(h[:len(h) - back])
        r = sum(1 for j in catalog if j != t and j not in seen
                and (count[j] > count[t] or (count[j] == count[t] and j < t)))
        n += 1
        hr += r < 10
        ndcg += 1 / math.log2(r + 2) if r < 10 else 0
        mrr += 1 / (r + 1)
    print(split, hr / n, ndcg / n, mrr / n)
EOP
    bad=0
    while read -r split hr nd mrr; do
        for m in "hr@10 $hr" "ndcg@10 $nd" "mrr $mrr"; do
            set -- $m
            got=$(metric "$tmp/ev-chunks.jsonl" "$split" "mostpop_$1")
            echo "# $split mostpop_$1: $got, recomputed $2"
            awk -v a="${got:-x}" -v b="$2" 'BEGIN { d = a - b; exit !(a != "x" && d < 1e-8 && -d < 1e-8) }' || bad=1
        done
    done <"$tmp/pop.ref"
    test "$(grep -c . "$tmp/pop.ref")" -eq 2 && [ $bad -eq 0 ]
    ok $? "the most-popular baseline's HR@10, NDCG@10 and MRR, valid and test: those recomputed from the TSV"
else
    skip "no python3" "the most-popular baseline recomputed from the TSV"
fi

# Several chunks are ranked in one pass: before a target's chunk, a user's items are counted
# against a band around its target's score, and up to 16 inside the band kept for later
# (core/eval.c). Here the item rows start at zero and 2 steps touch few of 4,000 items: the
# untouched ones all score 0, so a target among them ties with every one of them. Chunks of
# 7 items (eval_batch = 32768: 128 KiB of scores an item): a user whose target is in chunk
# 1 or 2 keeps its ties and counts them once the score is known; a later one overflows its
# band and is ranked again in a second pass. Every metric is the one-chunk evaluation's.
"$g" generate --users 300 --items 4000 --clusters 6 --seed 12 --out "$tmp/wide.tsv" \
    >/dev/null 2>&1
sed -e "s|$tmp/ev.tsv|$tmp/wide.tsv|" -e "s|^dir = $tmp/ref\$|dir = $tmp/zero|" \
    -e 's/^table = item$/table = item\ninit = zeros/' "$tmp/ref.ini" >"$tmp/zero.ini"
"$g" train --quiet --max-steps 2 "$tmp/zero.ini" >/dev/null 2>"$tmp/zero.err" \
    || sed 's/^/# /' "$tmp/zero.err" | tail -3
for c in one chunks; do
    mem=; [ $c = chunks ] && mem="--set train.eval_memory_mb=1"
    "$g" eval -v --checkpoint "$tmp/zero" --set train.eval_batch=32768 $mem \
        --metrics-out "$tmp/zv-$c.jsonl" "$tmp/zero.ini" >/dev/null 2>"$tmp/zv-$c.err"
    sed 's/.*\("step":.*\)}/\1/' "$tmp/zv-$c.jsonl" >"$tmp/zv-$c.v"
done
grep "chunks\|second time" "$tmp/zv-chunks.err" | sed 's/^/# /'
again=$(sed -n 's/.*evaluation: \([0-9]*\) users.*second time.*/\1/p' "$tmp/zv-chunks.err" \
        | head -1)
test "$(grep -c . "$tmp/zv-one.v")" -ge 8 && cmp -s "$tmp/zv-one.v" "$tmp/zv-chunks.v" \
    && [ "${again:-0}" -gt 0 ] && ! grep -q "second time" "$tmp/zv-one.err"
ok $? "evaluation in chunks where ${again:-no} users' targets tie with more items than their \
band keeps: those users ranked again, every metric the one-chunk evaluation's"

# The model's test ranks recomputed outside grm: the test split's query is the user's state
# after all but its last item, which `grmhost export` writes as user.state when each user's
# last item is left out of the data; the catalog's rows come from the export of the full
# data. Python (no numpy) reads both safetensors files, scores every catalog item in
# double, excludes the history (repeats once, a target in its history kept), breaks ties
# by id, and gives HR@10, NDCG@10 and MRR, which must be the evaluation's (the 7-chunk
# one's). A user whose target's score is within the float product's rounding bound of
# another item's ((D + 2) 2^-24 sum |q_d w_d|, twice) may rank differently in float and in
# double, and widens the tolerance by 1/users.
if command -v python3 >/dev/null 2>&1; then
    awk -F '\t' 'NR == FNR { if (FNR > 1 && $3 > last[$1]) last[$1] = $3; next }
                 FNR == 1 || $3 != last[$1]' "$tmp/ev.tsv" "$tmp/ev.tsv" >"$tmp/trunc.tsv"
    sed "s|$tmp/ev.tsv|$tmp/trunc.tsv|" "$tmp/ref.ini" >"$tmp/trunc.ini"
    "$g" export -q "$tmp/ref.ini" --checkpoint "$tmp/ref" --out "$tmp/exF" >/dev/null \
        2>"$tmp/exF.err" &&
        "$g" export -q "$tmp/trunc.ini" --checkpoint "$tmp/ref" --out "$tmp/exT" >/dev/null \
        2>"$tmp/exT.err" || sed 's/^/# /' "$tmp/exF.err" "$tmp/exT.err" | tail -3
    python3 - "$tmp/ev.tsv" "$tmp/exF/items.safetensors" "$tmp/exT/users.safetensors" \
        >"$tmp/model.ref" <<'EOP'
import array, collections, json, math, struct, sys
def tensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    out = {}
    for name, d in json.loads(raw[8:8 + n]).items():
        if name == '__metadata__':
            continue
        a = array.array({'F32': 'f', 'I64': 'q'}[d['dtype']])
        a.frombytes(raw[8 + n + d['data_offsets'][0]:8 + n + d['data_offsets'][1]])
        out[name] = a
    return out
seq = collections.defaultdict(list)
for line in open(sys.argv[1]).read().split('\n')[1:]:
    if line:
        u, item, ts = map(int, line.split('\t'))
        seq[u].append((ts, item))
items, users = tensors(sys.argv[2]), tensors(sys.argv[3])
ids, W = list(items['item.ids']), items['item.weight']
D = len(W) // len(ids)
state, uid = users['user.state'], list(users['user.ids'])
row = {u: k for k, u in enumerate(uid)}
hr = ndcg = mrr = n = near = 0
for u, v in seq.items():
    if len(v) < 3:
        continue
    h = [item for _, item in sorted(v)]
    t, seen = h[-1], set(h[:-1])
    q = state[row[u] * D:(row[u] + 1) * D]
    s = {i: math.fsum(q[d] * W[c * D + d] for d in range(D)) for c, i in enumerate(ids)}
    a = {i: math.fsum(abs(q[d] * W[c * D + d]) for d in range(D)) for c, i in enumerate(ids)}
    st = s[t]
    r = sum(1 for i in ids if i != t and i not in seen and (s[i] > st or (s[i] == st and i < t)))
    bound = lambda i: 2 * (D + 2) * 2.0 ** -24 * (a[i] + a[t])
    near += any(i != t and i not in seen and abs(s[i] - st) <= bound(i) for i in ids)
    n += 1
    hr += r < 10
    ndcg += 1 / math.log2(r + 2) if r < 10 else 0
    mrr += 1 / (r + 1)
print(hr / n, ndcg / n, mrr / n, n, near)
EOP
    read -r hr nd mrr nu near <"$tmp/model.ref"
    echo "# recomputed test hr@10 $hr ndcg@10 $nd mrr $mrr over $nu users ($near near ties)"
    bad=0
    for m in "hr@10 $hr" "ndcg@10 $nd" "mrr $mrr"; do
        set -- $m
        got=$(metric "$tmp/ev-chunks.jsonl" test "$1")
        echo "# test $1: $got"
        awk -v a="${got:-x}" -v b="$2" -v tol="$(( ${near:-0} + 0 ))" -v n="${nu:-1}" \
            'BEGIN { d = a - b; e = 1e-6 + tol / n; exit !(a != "x" && d < e && -d < e) }' \
            || bad=1
    done
    test "${nu:-0}" -gt 200 && [ $bad -eq 0 ]
    ok $? "the model's test HR@10, NDCG@10 and MRR: those recomputed in Python from the \
exported item rows and user states"
else
    skip "no python3" "the model's test metrics recomputed from the export"
fi

# recommend scores the catalog in the same chunks (every user's query first, then each
# chunk once, the K best merged): the one-chunk output, line for line
sed 's/^\[train\]$/[train]\neval_batch = 4096/' "$tmp/ref.ini" >"$tmp/ref-one.ini"
sed 's/^\[train\]$/[train]\neval_memory_mb = 1\neval_batch = 4096/' "$tmp/ref.ini" \
    >"$tmp/ref-chunks.ini"
"$g" recommend "$tmp/ref-one.ini" --checkpoint "$tmp/ref" --k 15 --out "$tmp/rec-one.tsv" \
    2>"$tmp/rec-one.err"
rc=$?
"$g" recommend "$tmp/ref-chunks.ini" --checkpoint "$tmp/ref" --k 15 --out "$tmp/rec-ch.tsv" \
    2>"$tmp/rec-ch.err"
rc=$((rc | $?))
grep "chunks" "$tmp/rec-ch.err" | sed 's/^/# /'
test $rc -eq 0 && test "$(wc -l <"$tmp/rec-one.tsv")" -eq 4500 \
    && cmp -s "$tmp/rec-one.tsv" "$tmp/rec-ch.tsv" \
    && grep -q "scored in 7 chunks of 63 items" "$tmp/rec-ch.err" \
    && ! grep -q "chunks" "$tmp/rec-one.err"
ok $? "recommend --k 15 in 7 catalog chunks: the one-chunk recommendations of all 300 \
users, line for line"

# export writes the catalog's rows a chunk at a time and the tiered table's a range at a
# time (tensor_rows): the table's ids and weight are the checkpoint's tensors bitwise (the
# XXH64s inspect prints), and the 7-chunk export's tensors are the one-chunk export's
for c in one chunks; do
    "$g" export -q "$tmp/ref-$c.ini" --checkpoint "$tmp/ref" --out "$tmp/ex-$c" \
        >/dev/null 2>"$tmp/ex-$c.err" || sed 's/^/# /' "$tmp/ex-$c.err" | tail -3
done
last=$(ls "$tmp/ref" | grep '^step-.*\.grm$' | sort | tail -1)
hashes() { "$g" inspect "$1" | awk '$1 ~ /^emb\..*\.(ids|weight)$/ { print $1, $3, $5 }'; }
hashes "$tmp/ref/$last" >"$tmp/h-ck"
hashes "$tmp/ex-one/tables.safetensors" >"$tmp/h-ex"
sed 's/^/# /' "$tmp/h-ex"
test "$(wc -l <"$tmp/h-ck")" -eq 2 && cmp -s "$tmp/h-ck" "$tmp/h-ex"
ok $? "export of the tiered table by rows: its ids and weight are the checkpoint's, bitwise"
same_ex=0
for f in items users tables dense; do    # the tensor lines (the config hash differs)
    "$g" inspect "$tmp/ex-one/$f.safetensors" | awk 'f; /^tensor /{f=1}' >"$tmp/xa"
    "$g" inspect "$tmp/ex-chunks/$f.safetensors" | awk 'f; /^tensor /{f=1}' >"$tmp/xb"
    test -s "$tmp/xa" && cmp -s "$tmp/xa" "$tmp/xb" || same_ex=1
done
ok $same_ex "the export whose catalog is looked up in 7 chunks writes the same tensors"

# grmhost profile: the curve and the choice of cache_bytes = auto, nothing kept
ini 2 "backing = $tmp/never\ncache_bytes = 12000" "$tmp/ck-never" >"$tmp/prof.ini"
ls -d /tmp/grm-profile-* 2>/dev/null | sort >"$tmp/scratch-before"
"$g" profile --batches 6 --target 0.5 "$tmp/prof.ini" >"$tmp/prof.out" 2>"$tmp/prof.err"
rc=$?
grep "cache_bytes = auto" "$tmp/prof.err" | cut -c1-240 | sed 's/^/# /'
test $rc -eq 0 && grep -q "cache_bytes = auto profiled [0-9]* ids of 6 batches.*LRU hit rate \
of the re-references: .* target 0.500 reached at [0-9]* rows; two batches' working set \
[0-9]* rows; cache = [0-9]* rows (cut to 7/8 when full) = [0-9]* bytes" "$tmp/prof.err"
ok $? "profile prints the hit-rate curve at 1/32 .. 1 of the rows and the cache it chooses"
ls -d /tmp/grm-profile-* 2>/dev/null | sort >"$tmp/scratch-after"
! test -e "$tmp/never" && ! test -e "$tmp/ck-never" && cmp -s "$tmp/scratch-before" \
    "$tmp/scratch-after" && ! grep -q "checkpoint\|test: hr@" "$tmp/prof.err"
ok $? "and keeps nothing: no backing file, checkpoint or evaluation; its scratch is removed"
sed 's/^plugin = emb-dynamic$/plugin = emb-static/' "$tmp/prof.ini" \
    | grep -v "^backing\|^cache_bytes" >"$tmp/prof-static.ini"
"$g" profile "$tmp/prof-static.ini" >/dev/null 2>"$tmp/prof-static.err"
test $? -eq 2 && grep -q "\[embedding\] plugin is emb-static; profile chooses the cache of \
emb-dynamic's tiered mode" "$tmp/prof-static.err"
ok $? "profile of another store is a configuration error naming it"

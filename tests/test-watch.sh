#!/bin/sh
# tests/test-watch.sh - watching a run (issue 22): every metrics record carries its
# wall-clock time, the run's id and the pipeline's hash; --fresh moves the previous run's
# metrics aside and says so; the progress line shows the loss the logs and the metrics
# show (the mean since the last logged step, not one batch's); a batch larger than the
# data is warned about with file:line; `grmhost plot` draws the loss and the validation
# metrics through gnuplot (the picture exists and has a size, its data file holds exactly
# the metrics file's points; SKIP without gnuplot); --metrics-port serves the latest
# metrics in Prometheus' text format while the run goes on (scraped with curl; SKIP
# without curl). TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-watch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "1..20"

"$g" generate --users 200 --items 100 --clusters 5 --seed 3 --out "$tmp/ev.tsv" || exit 1
{
    printf '[pipeline]\nname = watch\nthreads = 2\n'
    ini_events "$tmp/ev.tsv"
    ini_history
    ini_mlp_softmax
    printf '[train]\nbatch_size = 32\nsteps = 24\nlog_every = 4\neval_every = 8\n'
    printf '[checkpoint]\ndir = %s/ck\n' "$tmp"
} >"$tmp/w.ini"
"$g" train --fresh --metrics-out "$tmp/m.jsonl" "$tmp/w.ini" >/dev/null 2>"$tmp/run1.err"
ok $? "a run writes its metrics"

n=$(grep -c . "$tmp/m.jsonl")
utc='[0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]\{3\}Z'
runid='[0-9]\{8\}T[0-9]\{6\}Z-[0-9a-f]\{8\}'
good=$(grep -c "^{\"time\":\"$utc\",\"run\":\"$runid\",\"pipeline\":\"[0-9a-f]\{16\}\",\"step\":" \
       "$tmp/m.jsonl")
ok $(( n > 20 && good == n ? 0 : 1 )) "all $n records carry UTC time, run id, pipeline hash ($good)"
runs=$(sed 's/.*"run":"\([^"]*\)".*/\1/' "$tmp/m.jsonl" | sort -u)
hash1=$(sed 's/.*"pipeline":"\([^"]*\)".*/\1/' "$tmp/m.jsonl" | sort -u)
[ "$(echo "$runs" | wc -l)" -eq 1 ] && [ "$(echo "$hash1" | wc -l)" -eq 1 ]
ok $? "one run id ($runs) and one pipeline hash ($hash1) in the file"
grep -q "(run $runs)" "$tmp/run1.err"
ok $? "the run's opening log line names its run id"

"$g" train --fresh --metrics-out "$tmp/m.jsonl" "$tmp/w.ini" >/dev/null 2>"$tmp/run2.err"
rc=$?
grep -q -- "--fresh: the previous run's metrics $tmp/m.jsonl moved to $tmp/m.jsonl.1" \
    "$tmp/run2.err"
ok $(( rc == 0 ? $? : 1 )) "--fresh moves the previous metrics to m.jsonl.1 and says so"
[ "$(grep -c . "$tmp/m.jsonl.1")" -eq "$n" ] && [ "$(grep -c . "$tmp/m.jsonl")" -eq "$n" ]
ok $? "the moved file keeps every record of run 1; the new one holds run 2 alone"
run2=$(sed 's/.*"run":"\([^"]*\)".*/\1/' "$tmp/m.jsonl" | sort -u)
hash2=$(sed 's/.*"pipeline":"\([^"]*\)".*/\1/' "$tmp/m.jsonl" | sort -u)
[ "$run2" != "$runs" ] && [ "$hash2" = "$hash1" ]
ok $? "run 2 has a new run id ($run2) and the same pipeline hash"
"$g" train --fresh --max-steps 2 --set train.seed=7 --metrics-out "$tmp/s.jsonl" "$tmp/w.ini" \
    >/dev/null 2>&1
hash3=$(sed 's/.*"pipeline":"\([^"]*\)".*/\1/' "$tmp/s.jsonl" | sort -u)
[ -n "$hash3" ] && [ "$hash3" != "$hash1" ]
ok $? "another value (--set train.seed=7) gives another pipeline hash ($hash3)"

# the log's progress lines and the metrics file agree on every logged step's loss
grep -o 'step [0-9]*/24 epoch [0-9/]* loss [0-9.]*' "$tmp/run2.err" |
    awk '{ split($2, s, "/"); print s[1], $6 }' >"$tmp/prog"
losses "$tmp/m.jsonl" | awk '{ printf "%s %.4f\n", $1, $2 }' >"$tmp/logged"
[ "$(grep -c . "$tmp/prog")" -eq 6 ] && cmp -s "$tmp/prog" "$tmp/logged"
ok $? "the progress lines show each logged step's mean loss ($(tr '\n' ' ' <"$tmp/prog"))"
# on a terminal the line is redrawn in place; its last state is the last logged mean
script -qfec "$g train --fresh --metrics-out $tmp/tty.jsonl $tmp/w.ini" /dev/null \
    >"$tmp/tty.out" 2>&1
last=$(tr '\r' '\n' <"$tmp/tty.out" | grep -o 'step 24/24 epoch [0-9/]* loss [0-9.]*' | tail -1 |
       awk '{ print $6 }')
want=$(losses "$tmp/tty.jsonl" | tail -1 | awk '{ printf "%.4f", $2 }')
[ -n "$last" ] && [ "$last" = "$want" ]
ok $? "on a terminal the progress line's loss is the logged mean (${last:-none} = ${want:-none})"

"$g" train --fresh --max-steps 1 -q --set train.batch_size=5000 "$tmp/w.ini" >/dev/null \
    2>"$tmp/big.err"
grep -q -- "--set:1: \[train\] batch_size = 5000 is larger than the [0-9]* training samples" \
    "$tmp/big.err"
ok $? "a batch larger than the data is warned about: $(head -c 160 "$tmp/big.err")"

# --metrics-port: scraped during a run, which SIGTERM then ends. The run never evaluates
# (eval_every past its steps; 0 would mean every epoch): a signal during an evaluation
# stops it and exits 1 by design, which is test-train-signal's case, not this one's
if command -v curl >/dev/null 2>&1; then
    "$g" train --fresh --metrics-port 0 --set train.steps=100000 --set train.eval_every=1000000 \
        --set train.batch_size=8 --set train.log_every=2 "$tmp/w.ini" >/dev/null 2>"$tmp/port.err" &
    pid=$!
    port="" page=""
    for i in $(seq 1 100); do
        [ -z "$port" ] &&
            port=$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$tmp/port.err" | head -1)
        if [ -n "$port" ]; then
            curl -s --max-time 5 "$port" >"$tmp/page" 2>/dev/null
            grep -q 'split="train",name="loss"' "$tmp/page" && break
        fi
        sleep 0.2
    done
    kill -0 $pid 2>/dev/null
    ok $? "the run is still going while it is scraped (${port:-no port logged})"
    grep -q '^# TYPE grm_metric gauge$' "$tmp/page" &&
        grep -q '^grm_metric{split="train",name="loss",run="[0-9TZ]*-[0-9a-f]*",pipeline="' \
            "$tmp/page" &&
        grep -q '^grm_step{run="[^"]*",pipeline="[^"]*"} [1-9][0-9]*$' "$tmp/page"
    ok $? "the page is Prometheus text: grm_step, the loss, run and pipeline labels"
    step1=$(sed -n 's/^grm_step{.*} \([0-9]*\)$/\1/p' "$tmp/page")
    step2=""
    for i in $(seq 1 100); do   # until the run has logged another step (no timing assumed)
        sleep 0.1
        curl -s --max-time 5 "$port" >"$tmp/page2" 2>/dev/null
        step2=$(sed -n 's/^grm_step{.*} \([0-9]*\)$/\1/p' "$tmp/page2")
        [ -n "$step1" ] && [ -n "$step2" ] && [ "$step2" -gt "$step1" ] && break
    done
    [ -n "$step1" ] && [ -n "$step2" ] && [ "$step2" -gt "$step1" ]
    ok $? "a later scrape sees a later step (${step1:-?} then ${step2:-?})"
    kill -TERM $pid
    wait $pid
    rc=$?
    curl -s --max-time 2 "$port" >/dev/null 2>&1
    crc=$?
    [ $rc -ne 0 ] && tail -5 "$tmp/port.err" | sed 's/^/# /'   # why, when it did not exit 0
    ok $(( rc == 0 && crc != 0 ? 0 : 1 )) "SIGTERM ends the run ($rc) and the endpoint (curl $crc)"
else
    for d in "the run is still going while it is scraped" "the page is Prometheus text" \
             "a later scrape sees a later step" "SIGTERM ends the run and the endpoint with it"; do
        skip "curl not installed" "$d"
    done
fi

# grmhost plot
if ! command -v "${GRM_GNUPLOT:-gnuplot}" >/dev/null 2>&1; then
    for d in "a PNG is drawn" "its data file holds the logged losses" \
             "and every validation metric's points" "an SVG is drawn" \
             "no gnuplot: the error names the package"; do
        skip "gnuplot not installed (apt-get install gnuplot-nox)" "$d"
    done
    exit 0
fi
"$g" plot "$tmp/m.jsonl" --out "$tmp/p.png" >"$tmp/plot.out" 2>&1
rc=$?
size=$(wc -c <"$tmp/p.png" 2>/dev/null || echo 0)
magic=$(head -c 4 "$tmp/p.png" 2>/dev/null | od -An -c | tr -d ' ')
ok $(( rc == 0 && size > 5000 && size < 2000000 ? 0 : 1 )) "a PNG is drawn ($size bytes, $magic)"
block() {   # SERIES: the points of "# SERIES" in p.dat, as "step value" with 6 digits
    awk -v s="# $1" '$0 == s { on = 1; next } /^#/ { on = 0 }
                     on && NF == 2 { printf "%s %.6g\n", $1, $2 }' "$tmp/p.dat"
}
block "train loss" >"$tmp/dat.loss"
losses "$tmp/m.jsonl" | awk '{ printf "%s %.6g\n", $1, $2 }' >"$tmp/want.loss"
[ -s "$tmp/want.loss" ] && cmp -s "$tmp/dat.loss" "$tmp/want.loss"
ok $? "its data file holds the logged losses, step for step ($(grep -c . "$tmp/dat.loss") points)"
block "valid ndcg@10" >"$tmp/dat.nd"
grep '"split":"valid","name":"ndcg@10"' "$tmp/m.jsonl" |
    sed 's/.*"step":\([0-9]*\).*"value":\([^}]*\)}/\1 \2/' |
    awk '{ printf "%s %.6g\n", $1, $2 }' >"$tmp/want.nd"
nseries=$(grep -c '^# valid' "$tmp/p.dat")
[ "$(grep -c . "$tmp/want.nd")" -eq 3 ] && cmp -s "$tmp/dat.nd" "$tmp/want.nd" &&
    [ "$nseries" -ge 7 ]
ok $? "and every validation metric's points ($nseries series; ndcg@10 at 3 steps)"
"$g" plot --out "$tmp/p.svg" "$tmp/m.jsonl" >/dev/null 2>&1 && grep -q "<svg" "$tmp/p.svg"
ok $? "an SVG is drawn ($(wc -c <"$tmp/p.svg" 2>/dev/null) bytes)"
GRM_GNUPLOT=/nonexistent/gnuplot "$g" plot "$tmp/m.jsonl" --out "$tmp/q.png" >/dev/null \
    2>"$tmp/nog.err"
rc=$?
grep -q "install Debian package gnuplot-nox" "$tmp/nog.err" && [ -s "$tmp/q.dat" ]
ok $(( rc == 1 ? $? : 1 )) "no gnuplot: exit $rc, the error names the package, the points are left"

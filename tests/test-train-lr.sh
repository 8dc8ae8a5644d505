#!/bin/sh
# tests/test-train-lr.sh - [train]'s learning-rate schedule (core/lr.c): the scale the
# trainer applies at every step (the train lr_scale metric) equals the schedule written out
# again here in awk (linear warm-up over ceil(lr_warmup * E) steps of E per epoch, then a
# half cosine or a straight line to lr_min at ceil(lr_decay_epochs * E), or at the run's
# last step); a schedule changes what is trained; a run cut and resumed follows the
# uninterrupted run's schedule and losses bitwise; bad values are refused naming the file.
# TAP.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-lr-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..9"

"$g" generate --users 150 --items 90 --clusters 4 --seed 5 --out "$tmp/ev.tsv" || exit 1
ini() {   # $1 checkpoint dir, then extra [train] lines
    printf '[pipeline]\nname = lr\nthreads = 2\n'
    ini_retrieval_dynamic "$tmp/ev.tsv"
    printf "[train]\nbatch_size = 32\nepochs = 2\nlog_every = 1\n%s\n" "${2:-}"
    printf '[checkpoint]\ndir = %s\nevery = 1\nkeep = 2\n' "$1"
}
run() {   # $1 name, then [train] lines; -> $tmp/$1.jsonl, $tmp/$1.err
    ini "$tmp/$1.ck" "$2" >"$tmp/$1.ini"
    "$g" train --fresh "$tmp/$1.ini" --metrics-out "$tmp/$1.jsonl" >"$tmp/$1.out" 2>"$tmp/$1.err"
}
metric() {   # $1 file, $2 name: "step value" lines of the train metric
    grep "\"split\":\"train\",\"name\":\"$2\"" "$1" \
        | sed 's/.*"step":\([0-9]*\).*"value":\([^}]*\)}.*/\1 \2/'
}
steps() { sed -n 's/.*: \([0-9]*\) steps of .*/\1/p' "$1" | head -1; }

# schedule NAME WARMUP DECAY DECAY_EPOCHS MIN: every logged scale against awk's
schedule() {
    run "$1" "$(printf 'lr_warmup = %s\nlr_decay = %s\nlr_decay_epochs = %s\nlr_min = %s' \
        "$2" "$3" "$4" "$5")" || { cat "$tmp/$1.err"; return 1; }
    N=$(steps "$tmp/$1.err")
    metric "$tmp/$1.jsonl" lr_scale | awk -v N="$N" -v w="$2" -v d="$3" -v de="$4" \
        -v lo="$5" 'function ceil(x) { return x == int(x) ? x : int(x) + 1 }
        BEGIN { E = N / 2; W = ceil(w * E); T = de > 0 ? ceil(de * E) : N; bad = 0; n = 0 }
        { s = $1; n++
          if (s <= W) want = s / W
          else if (d == "none") want = 1
          else { p = T > W ? (s - W) / (T - W) : 1; if (p > 1) p = 1
                 f = d == "cosine" ? 0.5 * (1 + cos(3.14159265358979324 * p)) : 1 - p
                 want = lo + (1 - lo) * f }
          e = $2 - want; if (e < 0) e = -e; if (e > 1e-8) { bad++; if (bad < 4) print "# step " s ": " $2 " want " want } }
        END { print "# " n " steps of " N " (E " E ", W " W ", T " T "), " bad " off"
              exit !(n == N && bad == 0) }'
}
schedule cos 0.5 cosine 1.5 0.1
ok $? "cosine: warm-up over half an epoch, then a half cosine to 0.1 x lr at epoch 1.5 (and held there): every step's scale is the formula's"
schedule lin 0.25 linear 0 0.2
ok $? "linear to 0.2 x lr at the run's last step (lr_decay_epochs = 0)"
schedule warm 1 none 0 0
ok $? "warm-up only: s / W for one epoch, then 1"
last=$(metric "$tmp/lin.jsonl" lr_scale | tail -1 | cut -d' ' -f2)
awk -v v="$last" 'BEGIN { exit !(v > 0.19999999 && v < 0.20000001) }'
ok $? "the linear decay ends on lr_min at the last step ($last)"

run none "" || cat "$tmp/none.err"
a=$(metric "$tmp/none.jsonl" loss | tail -1); b=$(metric "$tmp/cos.jsonl" loss | tail -1)
echo "# last loss without a schedule: $a; with the cosine schedule: $b"
[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] && [ "$(metric "$tmp/none.jsonl" lr_scale | wc -l)" = 0 ]
ok $? "a schedule changes the training (last losses differ) and a run without one logs no lr_scale"

# cut at step 9 and resumed: the rest of the run is the uninterrupted one's
sched='lr_warmup = 0.5
lr_decay = cosine
lr_decay_epochs = 1.5
lr_min = 0.1'
ini "$tmp/cut.ck" "$sched" >"$tmp/cut.ini"
"$g" train --fresh --max-steps 9 "$tmp/cut.ini" --metrics-out "$tmp/cut.jsonl" >/dev/null 2>"$tmp/cut.err" \
    && "$g" train "$tmp/cut.ini" --metrics-out "$tmp/cut.jsonl" >/dev/null 2>>"$tmp/cut.err"
rc=$?
metric "$tmp/cut.jsonl" loss >"$tmp/cut.loss"; metric "$tmp/cos.jsonl" loss >"$tmp/cos.loss"
metric "$tmp/cut.jsonl" lr_scale >"$tmp/cut.lr"; metric "$tmp/cos.jsonl" lr_scale >"$tmp/cos.lr"
echo "# $(wc -l <"$tmp/cut.loss") losses resumed, $(wc -l <"$tmp/cos.loss") uninterrupted"
test $rc -eq 0 && cmp -s "$tmp/cut.loss" "$tmp/cos.loss" && cmp -s "$tmp/cut.lr" "$tmp/cos.lr"
ok $? "cut at step 9 and resumed: every step's loss and scale equal the uninterrupted run's"

refused() {   # $1 key = value, $2 text
    ini "$tmp/bad.ck" "$1" >"$tmp/bad.ini"
    "$g" train --fresh "$tmp/bad.ini" >/dev/null 2>"$tmp/bad.err"
    rc=$?
    echo "# $(head -1 "$tmp/bad.err")"
    test $rc -ne 0 && grep -q "bad.ini:[0-9]*.*$2" "$tmp/bad.err"
}
refused "lr_min = 1.5" "lr_min"
ok $? "lr_min = 1.5 is refused naming the file, line and key"
refused "lr_decay = exp" "lr_decay"
ok $? "lr_decay = exp is refused naming the file, line and key"
refused "lr_warmup = -1" "lr_warmup"
ok $? "a negative warm-up is refused naming the file, line and key"

#!/bin/sh
# tests/test-pipelines-hstu.sh - the quality pipelines of issue 7:
# share/pipelines/beauty-hstu.ini, ml100k-hstu.ini, ml100k-sasrec.ini, ml1m-hstu.ini and
# beauty-sasrec-bce.ini, beauty-sasrec-ce.ini, ml100k-hstu-ref.ini pass `grmhost check` and wire the components they claim
# (dense-hstu with the bias terms of each file, the L2-normalised sampled softmax, the
# S3-Rec code's post-norm SASRec with BCE, SASRec with the full-catalog cross-entropy and
# its cadence in epochs); ml1m-hstu.ini reads a small synthetic
# file in MovieLens-1M's `UserID::MovieID::Rating::Timestamp` format written here (its
# path rewritten by sed) and trains a few steps on it;
# ml100k-hstu.ini, trained briefly on the real MovieLens 100K (GRM_DATA_DIR), beats the
# most-popular baseline on test HR@10 and NDCG@10. The ML-100K case skips without the
# data. TAP output.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
host="$GRM_TOP_BUILDDIR/grmhost"
pl="$GRM_TOP_SRCDIR/share/pipelines"
data="${GRM_DATA_DIR:-}/ml-100k/u.data.zst"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-pipelines-hstu-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "1..20"

# check NAME FILE.ini [check options]: `grmhost check` exits 0; its wiring is left in
# $tmp/NAME.check
check() {
    name=$1 file=$2
    shift 2
    "$host" check "$@" "$file" >"$tmp/$name.check" 2>"$tmp/$name.err"
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/# /' "$tmp/$name.err" | tail -3
    ok $rc "grmhost check $name.ini"
}
# has NAME PATTERN: how many lines of the wired pipeline of NAME show PATTERN (not counting
# the merged INI check prints after it)
has() { sed '/^merged INI/,$d' "$tmp/$1.check" | grep -c -- "$2"; }

# check opens the input's schema, so the public files' formats stand in for them here (the
# real files need not be present): ML-100K's `user item rating ts` TSV and Beauty's `user
# item item ...` lines, a few seeded rows each.
awk 'BEGIN { srand(3); for (u = 1; u <= 20; u++) for (k = 0; k < 8; k++)
        printf "%d\t%d\t%d\t%d\n", u, 1 + int(rand() * 50), 1 + int(rand() * 5), 1000 * u + k }' \
    >"$tmp/u.data"
awk 'BEGIN { srand(4); for (u = 1; u <= 20; u++) { printf "%d", u
        for (k = 0; k < 8; k++) printf " %d", 1 + int(rand() * 50); printf "\n" } }' >"$tmp/beauty.txt"
check beauty-hstu "$pl/beauty-hstu.ini" --set "reader.path=$tmp/beauty.txt"
check ml100k-hstu "$pl/ml100k-hstu.ini" --set "reader.path=$tmp/u.data"
check ml100k-sasrec "$pl/ml100k-sasrec.ini" --set "reader.path=$tmp/u.data"
check beauty-sasrec-bce "$pl/beauty-sasrec-bce.ini" --set "reader.path=$tmp/beauty.txt"
check beauty-sasrec-ce "$pl/beauty-sasrec-ce.ini" --set "reader.path=$tmp/beauty.txt"
check ml100k-hstu-ref "$pl/ml100k-hstu-ref.ini" --set "reader.path=$tmp/u.data"

# ml1m-hstu.ini on a synthetic ratings.dat: 40 users, 25..44 ratings each over 300
# movies, timestamps increasing per user (seeded awk, the same file every run).
awk 'BEGIN { srand(7); for (u = 1; u <= 40; u++) { t = 978300000 + u * 1000
        for (k = 0; k < 25 + u % 20; k++) { t += 1 + int(rand() * 5000)
            printf "%d::%d::%d::%d\n", u, 1 + int(rand() * 300), 1 + int(rand() * 5), t } } }' \
    >"$tmp/ratings.dat"
sed -e "s|^path = .*ratings.dat|path = $tmp/ratings.dat|" -e "s|^dir = .*|dir = $tmp/ck1m|" \
    "$pl/ml1m-hstu.ini" >"$tmp/ml1m.ini"
check ml1m-hstu "$tmp/ml1m.ini"

[ "$(has ml100k-hstu 'rab_time = true')" -eq 2 ] && [ "$(has ml100k-hstu 'rab_pos = true')" -eq 2 ]
ok $? "ml100k-hstu: two dense-hstu layers with both rab_pos and rab_time on"
[ "$(has beauty-hstu 'rab_time = false')" -ge 1 ] && [ "$(has beauty-hstu 'rab_pos = true')" -ge 1 ] \
    && [ "$(has beauty-hstu 'catalog = all')" -eq 1 ] && [ "$(has beauty-hstu 'eval_every = 0')" -eq 1 ] \
    && [ "$(has beauty-hstu 'pos_emb = true')" -eq 1 ] && [ "$(has beauty-hstu 'label_smoothing = 0.1')" -eq 1 ] \
    && [ "$(has beauty-hstu 'lr_decay = cosine')" -eq 1 ]
ok $? "beauty-hstu: relative-position bias on, time bias off (Beauty has no timestamps), the reference's positions on one block, full-catalog cross-entropy with label smoothing 0.1, a cosine learning-rate schedule, validation every epoch"
[ "$(has ml1m-hstu 'l2norm = true')" -eq 1 ] && [ "$(has ml1m-hstu 'temperature = 0.05')" -eq 1 ] \
    && [ "$(has ml1m-hstu 'negatives = 128')" -eq 1 ]
ok $? "ml1m-hstu: sampled softmax over 128 negatives, L2-normalised, temperature 0.05"
[ "$(has ml1m-hstu 'variant = adamw')" -eq 2 ] && [ "$(has ml1m-hstu 'beta2 = 0.98')" -eq 2 ] \
    && [ "$(has ml1m-hstu 'max_seq_len = 200')" -eq 1 ] && [ "$(has ml1m-hstu 'dqk = 50')" -eq 2 ]
ok $? "ml1m-hstu: AdamW betas 0.9/0.98, max length 200, dqk = dv = 50 (published setup)"
[ "$(has ml100k-hstu-ref 'pos_emb = true')" -eq 1 ] && [ "$(has ml100k-hstu-ref 'time_buckets = 128')" -eq 2 ] \
    && [ "$(has ml100k-hstu-ref 'row_negatives = 128')" -eq 1 ] && [ "$(has ml100k-hstu-ref 'share_k = 1')" -eq 1 ] \
    && [ "$(has ml100k-hstu-ref 'update = dense')" -eq 1 ] && [ "$(has ml100k-hstu-ref 'init = normal')" -eq 2 ] \
    && grep -q '^train_on_valid = true' "$pl/ml100k-hstu-ref.ini"
ok $? "ml100k-hstu-ref: the reference's positions, 128 time buckets, 128 negatives per token, dense table step, no validation split, f1 from N(0, 0.02^2)"
[ "$(has ml100k-sasrec 'dense-sasrec')" -ge 2 ]
ok $? "ml100k-sasrec: two dense-sasrec blocks"
[ "$(has beauty-sasrec-bce 'style = bert')" -eq 2 ] && [ "$(has beauty-sasrec-bce 'num_heads = 2')" -eq 2 ] \
    && [ "$(has beauty-sasrec-bce 'loss = bce')" -eq 1 ] && [ "$(has beauty-sasrec-bce 'batch_size = 256')" -eq 1 ] \
    && [ "$(has beauty-sasrec-bce 'select_k = 20')" -eq 1 ]
ok $? "beauty-sasrec-bce: two post-norm blocks of 2 heads, BCE, batch 256, selection on NDCG@20 (S3-Rec code)"
[ "$(has beauty-sasrec-ce 'catalog = all')" -eq 1 ] && [ "$(has beauty-sasrec-ce 'in_batch = false')" -eq 1 ] \
    && [ "$(has beauty-sasrec-ce 'eval_every = 0')" -eq 1 ] \
    && [ "$(has beauty-sasrec-ce 'dense-sasrec')" -ge 2 ]
ok $? "beauty-sasrec-ce: two SASRec blocks, full-catalog cross-entropy, validation every epoch"

"$host" train --fresh --max-steps 3 --metrics-out "$tmp/m1m.jsonl" "$tmp/ml1m.ini" \
    >"$tmp/m1m.out" 2>"$tmp/m1m.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/m1m.err" | tail -3
ok $rc "ml1m-hstu trains 3 steps on the synthetic '::' file"
users=$(grep -o '[0-9]* users' "$tmp/m1m.err" | head -1)
[ "$users" = "40 users" ]
ok $? "ml1m-hstu reads every user of the '::' file (${users:-none})"

# an error names the bad line: a row with a missing field fails with file:line
printf '1::2::3::978300760\n1::5::3\n' >"$tmp/bad.dat"
sed -e "s|^path = .*|path = $tmp/bad.dat|" "$tmp/ml1m.ini" >"$tmp/bad.ini"
"$host" train --fresh --max-steps 1 "$tmp/bad.ini" >/dev/null 2>"$tmp/bad.err"
rc=$?
[ $rc -ne 0 ] && grep -q "bad.dat:2" "$tmp/bad.err"
ok $? "a malformed '::' row fails with its file:line ($(head -c 120 "$tmp/bad.err" | tr '\n' ' '))"

if [ ! -f "$data" ]; then
    skip "$data not found" "ml100k-hstu trains on MovieLens 100K"
    skip "$data not found" "ml100k-hstu beats the most-popular baseline"
    exit 0
fi
sed -e "s|^path = .*u.data.zst|path = $data|" -e "s|^dir = .*|dir = $tmp/ck|" \
    -e "s|^epochs = .*|epochs = 60|" \
    "$pl/ml100k-hstu.ini" >"$tmp/ml.ini"
"$host" train --fresh --metrics-out "$tmp/m.jsonl" "$tmp/ml.ini" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/err" | tail -5
ok $rc "ml100k-hstu trains on MovieLens 100K (60 epochs, early stopping on validation)"
hr=$(metric "$tmp/m.jsonl" test hr@10); pop=$(metric "$tmp/m.jsonl" test mostpop_hr@10)
nd=$(metric "$tmp/m.jsonl" test ndcg@10); popnd=$(metric "$tmp/m.jsonl" test mostpop_ndcg@10)
awk -v a="${hr:-0}" -v b="${pop:-1}" -v c="${nd:-0}" -v d="${popnd:-1}" \
    'BEGIN { exit !(a > b && c > d) }'
ok $? "ml100k-hstu test HR@10 ${hr:-?} > most-popular ${pop:-?}, NDCG@10 ${nd:-?} > ${popnd:-?}"

#!/bin/sh
# bench/bench_quality.sh - model quality on real data (issue 7): HSTU with and without each
# relative attention bias (TurboGR §4.1.1: rab_pos, rab_time; 4 combinations) against
# grm's SASRec on MovieLens 100K, same split: leave-one-out, full ranking over all 1,682
# items, history excluded, early stopping on validation NDCG@10, test on the best model.
# The configs are share/pipelines/ml100k-hstu.ini and ml100k-sasrec.ini; the variants are
# made by sed into a temp dir. Every case is trained once per seed of BENCH_QUALITY_SEEDS
# (default 42 7 1234: the seed draws the initial weights, dropout masks, example order and
# negatives). One line per case and seed (DESIGN.md §8):
#   bench=quality case=ml100k_hstu_pos_time seed=42 hr10= ndcg10= hr20= ndcg20=
#     valid_ndcg10= steps= wall_s= peer=ml100k_sasrec ratio=<test ndcg10 / the peer's>
# then one per case over the seeds (mean and sample standard deviation):
#   bench=quality case=ml100k_hstu_pos_time seeds=3 hr10=<mean> hr10_sd= ndcg10= ndcg10_sd=
#     ... peer=ml100k_sasrec ratio=<mean test ndcg10 / the peer's mean>
# then a table. Quality numbers are deterministic for a seed and thread count; wall times
# on the 2-core shared machine are upper bounds. About 4 minutes per seed.
set -u
build=${GRM_TOP_BUILDDIR:-.}
src=${GRM_TOP_SRCDIR:-.}
data=${GRM_DATA_DIR:-}
host="$build/grmhost"
if [ ! -x "$host" ]; then echo "# bench_quality: $host not built; skipped"; exit 0; fi
if [ -z "$data" ] || [ ! -f "$data/ml-100k/u.data.zst" ]; then
    echo "# bench_quality: GRM_DATA_DIR/ml-100k/u.data.zst not found; skipped"; exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-bench-quality-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0
seeds=${BENCH_QUALITY_SEEDS:-42 7 1234}

# variant NAME INI POS TIME SEED: the INI with the data path, a private checkpoint dir, the
# two bias switches (every [dense.N] of an HSTU file) and the seed rewritten
variant() {
    sed -e "s|^path = .*u.data.zst|path = $data/ml-100k/u.data.zst|" \
        -e "s|^dir = .*|dir = $tmp/$1.ck|" \
        -e "s|^rab_pos = .*|rab_pos = $3|" -e "s|^rab_time = .*|rab_time = $4|" \
        -e '/^seed *=/d' -e "s|^\[train\]|[train]\nseed = $5|" \
        "$src/share/pipelines/$2" >"$tmp/$1.ini"
}
val() { grep "\"split\":\"$2\",\"name\":\"$3\"" "$1" | tail -1 | sed 's/.*"value":\([^}]*\)}/\1/'; }

run() {   # NAME SEED
    t0=$(date +%s.%N)
    "$host" train --fresh -q --metrics-out "$tmp/$1.jsonl" "$tmp/$1.ini" >"$tmp/$1.out" \
        2>"$tmp/$1.err"
    rc=$?
    t1=$(date +%s.%N)
    if [ $rc -ne 0 ]; then
        echo "# bench_quality: case $1 failed ($rc)"; sed 's/^/# /' "$tmp/$1.err" | tail -5
        status=1; return
    fi
    m="$tmp/$1.jsonl"
    steps=$(grep '"split":"test","name":"hr@10"' "$m" | tail -1 \
        | sed 's/.*"step":\([0-9]*\).*/\1/')
    awk -v c="$1" -v a="$(val "$m" test hr@10)" -v b="$(val "$m" test ndcg@10)" \
        -v e="$(val "$m" test hr@20)" -v f="$(val "$m" test ndcg@20)" \
        -v v="$(val "$m" valid ndcg@10)" -v s="$steps" -v t0="$t0" -v t1="$t1" \
        -v p="${peer_ndcg:-}" -v sd="$2" 'BEGIN {
            printf "bench=quality case=%s seed=%s hr10=%.4f ndcg10=%.4f", c, sd, a, b
            printf " hr20=%.4f ndcg20=%.4f", e, f
            printf " valid_ndcg10=%.4f steps=%d wall_s=%.1f", v, s, t1 - t0
            if (p != "") printf " peer=ml100k_sasrec ratio=%.3f", b / p
            else printf " peer=none"
            printf "\n" }' | tee -a "$tmp/lines"
}

for seed in $seeds; do
    variant ml100k_sasrec ml100k-sasrec.ini true true "$seed"
    peer_ndcg=
    run ml100k_sasrec "$seed"
    peer_ndcg=$(val "$tmp/ml100k_sasrec.jsonl" test ndcg@10 2>/dev/null)
    pop=$(val "$tmp/ml100k_sasrec.jsonl" test mostpop_hr@10 2>/dev/null)
    popn=$(val "$tmp/ml100k_sasrec.jsonl" test mostpop_ndcg@10 2>/dev/null)
    for c in pos_time:true:true pos:true:false time:false:true none:false:false; do
        name=${c%%:*}; flags=${c#*:}
        variant "ml100k_hstu_$name" ml100k-hstu.ini "${flags%:*}" "${flags#*:}" "$seed"
        run "ml100k_hstu_$name" "$seed"
    done
done

# over the seeds: mean and sample standard deviation of every metric, per case
[ -f "$tmp/lines" ] && awk '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      c = v["case"]; if (!(c in n)) order[++nc] = c; n[c]++
      for (k = 1; k <= 5; k++) { m = name[k]; s1[c, m] += v[m]; s2[c, m] += v[m] * v[m] } }
    BEGIN { split("hr10 ndcg10 hr20 ndcg20 valid_ndcg10", name, " ") }
    END {
      for (i = 1; i <= nc; i++) {
        c = order[i]; printf "bench=quality case=%s seeds=%d", c, n[c]
        for (k = 1; k <= 5; k++) {
          m = name[k]; mu = s1[c, m] / n[c]
          var = n[c] > 1 ? (s2[c, m] - n[c] * mu * mu) / (n[c] - 1) : 0
          sd = var > 0 ? sqrt(var) : 0
          printf " %s=%.4f %s_sd=%.4f", m, mu, m, sd }
        if ("ml100k_sasrec" in n)
          printf " peer=ml100k_sasrec ratio=%.3f\n",
                 (s1[c, "ndcg10"] / n[c]) / (s1["ml100k_sasrec", "ndcg10"] / n["ml100k_sasrec"])
        else printf " peer=none\n" } }' "$tmp/lines" | tee "$tmp/means"

echo "# ML-100K test split (leave-one-out, 1,682 items ranked)"
echo "# most popular: HR@10 ${pop:-?} NDCG@10 ${popn:-?}"
echo "# case                   seed  HR@10   NDCG@10 HR@20   NDCG@20 val_NDCG@10 wall_s"
[ -f "$tmp/lines" ] && awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
       printf "# %-22s %-5s %-7s %-7s %-7s %-7s %-11s %s\n", v["case"], v["seed"], v["hr10"],
              v["ndcg10"], v["hr20"], v["ndcg20"], v["valid_ndcg10"], v["wall_s"] }' "$tmp/lines"
echo "# mean +- sd over the seeds   HR@10            NDCG@10          NDCG@20"
[ -f "$tmp/means" ] && awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
       printf "# %-22s %.4f+-%.4f  %.4f+-%.4f  %.4f+-%.4f\n", v["case"], v["hr10"],
              v["hr10_sd"], v["ndcg10"], v["ndcg10_sd"], v["ndcg20"], v["ndcg20_sd"] }' \
    "$tmp/means"
exit $status

#!/bin/sh
# bench/bench_recommend.sh - batch top-K for every user (issue 21): `grmhost recommend` on
# a Beauty SASRec checkpoint (22,363 users, 12,101 items, D = 64, K = 10), against torch
# doing the same scoring on the same 2 threads: the exported user states times the item
# rows in blocks of 256 users, history masked, torch.topk. grm's time also includes
# computing each user's state (the SASRec forward over their history), which the peer is
# given precomputed, so the ratio is conservative for grm.
#   bench=recommend case=beauty-sasrec users=U items=C k=10 grm_s=.. grm_users_per_s=..
#     wall_s=<the whole command: data read, model load, scoring, writing> peer=torch
#     peer_s=.. ratio=<peer_s / grm_s> same_items_pct=<users whose top-10 equal torch's>
# And leave-one-out evaluation (`grmhost eval`: every user's valid and test target ranked
# against the whole catalog, history excluded, ties by id), against torch ranking as many
# users against the same item rows on 2 threads: the exported states stand in for the
# queries (the cost does not depend on their values), scores in blocks of 256 users,
# history masked, each target's rank counted (> its score, ties by id), twice (valid and
# test). grm's time is the two splits' ranking as its log gives it, the queries' forward
# and the most-popular baseline included.
#   bench=recommend case=beauty-sasrec-eval users=U items=C grm_s=.. peer=torch peer_s=..
#     ratio=<peer_s / grm_s>
# The model is trained for BENCH_RECOMMEND_STEPS steps (default 300): speed does not
# depend on how well it is trained.
set -u
build=${GRM_TOP_BUILDDIR:-.}
src=${GRM_TOP_SRCDIR:-.}
data=${GRM_DATA_DIR:-}
py=${PYTHON3:-python3}
g="$build/grmhost"
steps=${BENCH_RECOMMEND_STEPS:-300}
if [ -z "$data" ] || [ ! -r "$data/amazon-beauty/Beauty.txt.zst" ]; then
    echo "# bench_recommend: no \$GRM_DATA_DIR/amazon-beauty/Beauty.txt.zst; skipped"; exit 0
fi
# the peers' python (run.sh's PYTHON3: bench/setup-venv.sh's current PyTorch, which then
# needs `pip install safetensors`) first; the tests' /tmp/venv-st (Debian's torch) only
# when it lacks safetensors, and the torch it ran on is printed either way
for c in "$py" /tmp/venv-st/bin/python; do
    "$c" -c 'import torch, safetensors' 2>/dev/null && py=$c && break
done
if ! "$py" -c 'import torch, safetensors' 2>/dev/null; then
    echo "# bench_recommend: no python with torch and safetensors; skipped"; exit 0
fi
echo "# bench_recommend: peer torch $("$py" -c 'import torch; print(torch.__version__)') from $py"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-bench-recommend-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

sed -e "s|\.\./shared/data|$data|" -e "s|^dir *=.*|dir = $tmp/ck|" -e '/^early_stop *=/d' \
    -e "s|^epochs *=.*|steps = $steps|" "$src/share/pipelines/beauty-sasrec.ini" \
    | awk '{ print } /^\[pipeline\]/ { print "threads = 2" }' >"$tmp/b.ini"
printf 'every = %s\n' "$steps" >>"$tmp/b.ini"
"$g" train -q --fresh "$tmp/b.ini" >/dev/null 2>"$tmp/train.err" || {
    sed 's/^/# /' "$tmp/train.err" | tail -5; exit 1; }
"$g" export -q "$tmp/b.ini" --checkpoint "$tmp/ck" --out "$tmp/exp" || exit 1

t0=$(date +%s.%N)
"$g" recommend "$tmp/b.ini" --checkpoint "$tmp/ck" --k 10 --out "$tmp/rec.tsv" \
    2>"$tmp/rec.err" || { sed 's/^/# /' "$tmp/rec.err"; exit 1; }
t1=$(date +%s.%N)
line=$(grep 'recommended to' "$tmp/rec.err")
echo "# $line"
users=$(echo "$line" | sed 's/.*recommended to \([0-9]*\) users.*/\1/')
items=$(echo "$line" | sed 's/.* over \([0-9]*\) items.*/\1/')
grm_s=$(echo "$line" | sed 's/.* in \([0-9.]*\) s .*/\1/')

# leave-one-out evaluation of the same checkpoint
"$g" eval "$tmp/b.ini" --checkpoint "$tmp/ck" >/dev/null 2>"$tmp/eval.err" || {
    sed 's/^/# /' "$tmp/eval.err" | tail -3; exit 1; }
grep -E '(valid|test): hr@' "$tmp/eval.err" | sed 's/^/# /'
eval_s=$(sed -n 's/.*: hr@.* users (\([0-9.]*\) s)$/\1/p' "$tmp/eval.err" \
         | awk '{ s += $1 } END { if (NR == 2) printf "%.3f", s }')
[ -n "$eval_s" ] || { echo "# bench_recommend: no evaluation times in grmhost eval's log"; exit 1; }

"$py" - "$tmp/exp" "$tmp/rec.tsv" >"$tmp/peer.out" <<'EOF' || exit 1
import sys, time, torch
from safetensors.torch import load_file
torch.set_num_threads(2)
d = sys.argv[1]
it, us = load_file(d + "/items.safetensors"), load_file(d + "/users.safetensors")
W, ids = it["item.weight"], it["item.ids"]
S, off, hist = us["user.state"], us["user.history_offsets"], us["user.history"]
U, C = S.shape[0], W.shape[0]
pos = torch.searchsorted(ids, hist)     # every history item is in the catalog
rows = torch.repeat_interleave(torch.arange(U), off[1:] - off[:-1])
best = []
t0 = time.perf_counter()
for lo in range(0, U, 256):
    hi = min(U, lo + 256)
    sc = S[lo:hi] @ W.T                                   # [b, C]
    m = (rows >= lo) & (rows < hi)
    sc[rows[m] - lo, pos[m]] = float("-inf")
    best.append(torch.topk(sc, 10, dim=1).indices)
el = time.perf_counter() - t0
best = ids[torch.cat(best)]
grm = {}
for l in open(sys.argv[2]):
    u, r, i, s = l.split("\t")
    grm.setdefault(int(u), set()).add(int(i))
uid = us["user.ids"].tolist()
same = sum(grm.get(uid[k]) == set(best[k].tolist()) for k in range(U))
# evaluation: every user's valid and test target ranked (the states stand in for queries)
col = torch.arange(C)
t0 = time.perf_counter()
for back in (2, 1):                     # valid: the second-last item, test: the last
    tpos = pos[off[1:] - back]          # stand-in targets: those items of every user
    ranks = []
    for lo in range(0, U, 256):
        hi = min(U, lo + 256)
        sc = S[lo:hi] @ W.T                                   # [b, C]
        ts = sc[torch.arange(hi - lo), tpos[lo:hi]].clone()
        m = (rows >= lo) & (rows < hi)
        sc[rows[m] - lo, pos[m]] = float("-inf")
        t = tpos[lo:hi, None]
        above = (sc > ts[:, None]) | ((sc == ts[:, None]) & (col[None, :] < t))
        ranks.append(above.sum(1))
    torch.cat(ranks)
ev = time.perf_counter() - t0
print(f"{el:.4f} {100.0 * same / U:.1f} {ev:.4f}")
EOF
read -r peer_s same peer_eval_s <"$tmp/peer.out"
awk -v u="$users" -v c="$items" -v g="$grm_s" -v w0="$t0" -v w1="$t1" -v p="$peer_s" \
    -v same="$same" 'BEGIN {
    printf "bench=recommend case=beauty-sasrec users=%d items=%d k=10 grm_s=%.3f " \
           "grm_users_per_s=%.0f wall_s=%.2f peer=torch peer_s=%.3f ratio=%.2f " \
           "same_items_pct=%s\n", u, c, g, u / g, w1 - w0, p, p / g, same }'

awk -v u="$users" -v c="$items" -v g="$eval_s" -v p="$peer_eval_s" 'BEGIN {
    printf "bench=recommend case=beauty-sasrec-eval users=%d items=%d grm_s=%.3f " \
           "peer=torch peer_s=%.3f ratio=%.2f\n", u, c, g, p, p / g }'

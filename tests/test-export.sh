#!/bin/sh
# tests/test-export.sh - grmhost export and recommend on a trained ML-100K SASRec, read back
# without grm: Python's `safetensors` package (PyPI) and torch load the export, and
# share/export_topk.py recomputes the top-10 of 50 users, which must be the items
# `grmhost recommend` printed (a swap is allowed only between items whose scores agree to
# 1e-5, the rounding of two different GEMMs). Also: the manifest's shapes and names, fp16
# and bf16 exports against fp32, no recommended item from the user's history (checked on
# the raw u.data), --keep-history, JSON lines, usage errors. Skips with the reason when
# the data, torch or safetensors is missing (a venv: /usr/bin/python3 -m venv
# --system-site-packages /tmp/venv-st && /tmp/venv-st/bin/pip install safetensors).
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
. "$GRM_TOP_SRCDIR/tests/tap.sh"
data="${GRM_DATA_DIR:-/work/shared/data}/ml-100k/u.data.zst"
[ -r "$data" ] || skip_all "no ML-100K at $data (set GRM_DATA_DIR)"
py=
for c in "${GRM_PYTHON_ST:-}" /tmp/venv-st/bin/python /usr/bin/python3 python3; do
    [ -n "$c" ] && "$c" -c 'import torch, safetensors' 2>/dev/null && py=$c && break
done
[ -n "$py" ] || skip_all "no python with torch and safetensors (pip install safetensors into \
a venv made with --system-site-packages, e.g. /tmp/venv-st)"
command -v zstd >/dev/null 2>&1 || skip_all "no zstd command to read u.data.zst independently"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-export-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "1..13"

sed -e "s|^path = .*u.data.zst|path = $data|" -e "s|^dir = .*|dir = $tmp/ck|" \
    -e "s|^epochs = .*|steps = 200|" -e "s|^early_stop.*||" \
    "$GRM_TOP_SRCDIR/share/pipelines/ml100k-sasrec.ini" >"$tmp/s.ini"
echo "every = 200" >>"$tmp/s.ini"
"$g" train -q --fresh "$tmp/s.ini" >/dev/null 2>"$tmp/train.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/train.err" | tail -5
ok $rc "200 steps of ML-100K SASRec train and checkpoint"

"$g" export "$tmp/s.ini" --checkpoint "$tmp/ck" --out "$tmp/exp" 2>"$tmp/e.err"
rc=$?
for f in items users tables dense; do test -s "$tmp/exp/$f.safetensors" || rc=1; done
test -s "$tmp/exp/manifest.json" || rc=1
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/e.err" | tail -5
ok $rc "export writes items, users, tables, dense .safetensors and manifest.json"

"$py" - "$tmp/exp" >"$tmp/m.out" 2>&1 <<'EOF'
import json, sys
from safetensors.torch import load_file
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
it, us = load_file(d + "/items.safetensors"), load_file(d + "/users.safetensors")
dn = load_file(d + "/dense.safetensors")
assert m["step"] == 200 and m["dim"] == 50 and len(m["config_hash"]) == 16, m
assert [b["plugin"] for b in m["blocks"]] == ["dense-sasrec", "dense-sasrec"]
assert m["features"][0]["table"] == "item" and m["head"]["plugin"] == "head-sampled-softmax"
assert it["item.weight"].shape == (1682, 50) and it["item.ids"].tolist() == list(range(1, 1683))
assert us["user.state"].shape == (943, 50) and us["user.ids"].shape == (943,)
assert int(us["user.history_offsets"][-1]) == 100000
params = [p["name"] for b in m["blocks"] for p in b["parameters"]]
assert sorted(params) == sorted(dn.keys()) and len(params) == 27, (params, list(dn))
assert "dense.1.final_norm.weight" in dn and not any(k.startswith("optim.") for k in dn)
print("ok")
EOF
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/m.out" | tail -5
ok $rc "Python's safetensors loads it: 1682 items, 943 user states, 27 dense parameters \
named as the manifest's blocks list them"

# ml100k-sasrec's head has cosine logits (l2norm = true): the rows recommend and the
# evaluation rank by, and export writes as item.weight, are the table's rows normalised
"$py" - "$tmp/exp" >"$tmp/n.out" 2>&1 <<'EOF'
import sys, torch
from safetensors.torch import load_file
d = sys.argv[1]
it, tb = load_file(d + "/items.safetensors"), load_file(d + "/tables.safetensors")
ids, raw = tb["emb.item.ids"].tolist(), tb["emb.item.weight"]
row = {k: n for n, k in enumerate(ids)}
w = raw[[row[i] for i in it["item.ids"].tolist()]]
unit = w / w.norm(dim=1, keepdim=True)
assert float(w.norm(dim=1).std()) > 1e-3, "the raw rows' norms should differ"
err = float((it["item.weight"] - unit).abs().max())
assert err < 1e-6, err
print("max |item.weight - row / |row|| =", err)
EOF
rc=$?
sed 's/^/# /' "$tmp/n.out" | tail -3
ok $rc "a cosine head's item.weight is the table's rows normalised (head score_rows, ABI 1.8)"

zstd -dc "$data" | awk '{print $1}' | sort -un | head -50 >"$tmp/u50"
"$g" recommend -q "$tmp/s.ini" --checkpoint "$tmp/ck" --k 10 --users "$tmp/u50" \
    --out "$tmp/rec.tsv"
rc=$?
test "$(wc -l <"$tmp/rec.tsv")" -eq 500 || rc=1
ok $rc "recommend --k 10 --users (50 ids) writes 500 TSV lines"

"$py" "$GRM_TOP_SRCDIR/share/export_topk.py" "$tmp/exp" --users "$tmp/u50" --k 10 \
    >"$tmp/py.tsv" 2>"$tmp/py.err"
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/py.err" | tail -5
"$py" - "$tmp/rec.tsv" "$tmp/py.tsv" >"$tmp/cmp.out" 2>&1 <<'EOF' || rc=1
import sys
g = [l.split("\t") for l in open(sys.argv[1])]
p = [l.split("\t") for l in open(sys.argv[2])]
assert len(g) == len(p) == 500, (len(g), len(p))
pscore = {(l[0], l[2]): float(l[3]) for l in p}
same = swaps = 0
for a, b in zip(g, p):
    assert a[0] == b[0] and a[1] == b[1]
    if a[2] == b[2]:
        same += 1
        assert abs(float(a[3]) - float(b[3])) <= 1e-4 * max(1.0, abs(float(b[3]))), (a, b)
        continue
    # a near-tie ordered differently by the two GEMMs: both scores must agree to 1e-5
    s = pscore.get((a[0], a[2]))
    assert s is not None and abs(s - float(b[3])) <= 1e-5 * max(1.0, abs(s)), (a, b)
    swaps += 1
print(f"{same} of 500 identical, {swaps} near-tie swaps")
EOF
sed 's/^/# /' "$tmp/cmp.out" | tail -3
ok $rc "Python (safetensors + torch) recomputes the same top-10 items for the 50 users"

# history exclusion, checked on the raw data
zstd -dc "$data" | awk '{print $1 "\t" $2}' | sort -u >"$tmp/seen"
"$g" recommend -q "$tmp/s.ini" --checkpoint "$tmp/ck" --k 20 --out "$tmp/all.tsv"
rc=$?
test "$(wc -l <"$tmp/all.tsv")" -eq 18860 || rc=1
awk -F'\t' '{print $1 "\t" $3}' "$tmp/all.tsv" | sort -u | comm -12 - "$tmp/seen" >"$tmp/bad"
test -s "$tmp/bad" && rc=1
ok $rc "all 943 users x 20: no recommended item is one the user rated in u.data"
"$g" recommend -q "$tmp/s.ini" --checkpoint "$tmp/ck" --k 20 --keep-history \
    --out "$tmp/keep.tsv"
awk -F'\t' '{print $1 "\t" $3}' "$tmp/keep.tsv" | sort -u | comm -12 - "$tmp/seen" | grep -q .
ok $? "--keep-history lets rated items back in"

"$g" recommend -q "$tmp/s.ini" --checkpoint "$tmp/ck" --k 10 --users "$tmp/u50" \
    --format jsonl >"$tmp/rec.jsonl"
"$py" - "$tmp/rec.jsonl" "$tmp/rec.tsv" <<'EOF'
import json, sys
j = [json.loads(l) for l in open(sys.argv[1])]
t = [l.split("\t") for l in open(sys.argv[2])]
assert len(j) == 50 and all(len(x["items"]) == 10 == len(x["scores"]) for x in j)
assert [str(i) for x in j for i in x["items"]] == [l[2] for l in t]
EOF
ok $? "--format jsonl: one object per user with the same items as the TSV"

# fp16 and bf16 exports hold the fp32 values rounded
"$g" export -q "$tmp/s.ini" --checkpoint "$tmp/ck" --out "$tmp/e16" --dtype fp16 &&
"$g" export -q "$tmp/s.ini" --checkpoint "$tmp/ck" --out "$tmp/eb16" --dtype bf16 &&
"$py" - "$tmp/exp" "$tmp/e16" "$tmp/eb16" >"$tmp/h.out" 2>&1 <<'EOF'
import sys, torch
from safetensors.torch import load_file
f32, f16, b16 = (load_file(d + "/dense.safetensors") for d in sys.argv[1:4])
for k, v in f32.items():
    assert f16[k].dtype == torch.float16 and b16[k].dtype == torch.bfloat16
    assert torch.equal(f16[k], v.to(torch.float16)), k    # round to nearest even, as torch
    assert torch.equal(b16[k], v.to(torch.bfloat16)), k
i16 = load_file(sys.argv[2] + "/items.safetensors")
assert i16["item.ids"].dtype == torch.int64
EOF
rc=$?
[ $rc -ne 0 ] && sed 's/^/# /' "$tmp/h.out" | tail -5
ok $rc "--dtype fp16 and bf16: every weight equals torch's rounding of the fp32 one; ids stay int64"

# errors
echo 999999 >"$tmp/nouser"
"$g" recommend -q "$tmp/s.ini" --checkpoint "$tmp/ck" --k 5 --users "$tmp/nouser" \
    >/dev/null 2>"$tmp/e1"
[ $? -eq 2 ] && grep -q "$tmp/nouser:1: user 999999 has no history" "$tmp/e1"
ok $? "a user id not in the data is refused with FILE:LINE, exit 2"
"$g" recommend "$tmp/s.ini" --k 5 >/dev/null 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q "recommend needs --checkpoint" "$tmp/e2" &&
    "$g" export "$tmp/s.ini" --checkpoint "$tmp/ck" --out "$tmp/x" --dtype fp8 \
        >/dev/null 2>"$tmp/e3"
[ $? -eq 2 ] && grep -q "expected fp32, fp16 or bf16" "$tmp/e3"
ok $? "usage errors (no --checkpoint, --dtype fp8) exit 2 naming the fix"
"$g" recommend --help | grep -q "usage: grmhost recommend" &&
    "$g" export --help | grep -q "usage: grmhost export" &&
    "$g" --help | grep -q "recommend FILE.ini"
ok $? "recommend --help, export --help and the top-level help describe the commands"

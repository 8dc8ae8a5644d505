#!/bin/sh
# tests/test-train-device.sh - one trainer on every backend: the same small pipelines (a
# pooled-history retrieval model, and a sequence model with its jagged tokens) trained on
# [pipeline] device = ref (core/backend_ref.c's plain loops for the sparse ops and the
# scoring GEMM, and every plugin's `impl = auto` picking its reference loops: the store,
# dense-mlp, dense-sasrec, the head) and device = cpu (the threaded and BLAS paths) follow
# the same loss curve and reach the same metrics; a device no compute plugin runs on, and a
# device that is not one, are refused by `grmhost check` with file:line. TAP.
set -u
: "${GRM_TOP_BUILDDIR:?run through make check}" "${GRM_TOP_SRCDIR:?}"
g="$GRM_TOP_BUILDDIR/grmhost"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-device-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$GRM_TOP_SRCDIR/tests/tap.sh"
echo "1..10"

"$g" generate --users 300 --items 200 --clusters 6 --seed 5 --out "$tmp/ev.tsv" || exit 1
pooled() {   # $1 device
    printf '[pipeline]\nname = device\nthreads = 2\ndevice = %s\n' "$1"
    ini_events "$tmp/ev.tsv"
    ini_history
    ini_mlp_softmax
    printf '[train]\nbatch_size = 64\nepochs = 2\nseed = 3\nlog_every = 1\n'
}
tokens() {   # $1 device: a SASRec block on each user's jagged token sequence
    printf '[pipeline]\nname = device-seq\nthreads = 2\ndevice = %s\n' "$1"
    ini_events "$tmp/ev.tsv"
    cat <<EOI
[feature.seq]
source = item
table = item
dim = 16
pooling = none
window = 20
[dense.0]
plugin = dense-sasrec
num_heads = 2
[head]
plugin = head-sampled-softmax
negatives = 64
[train]
batch_size = 32
epochs = 2
seed = 3
log_every = 1
EOI
}
for model in pooled tokens; do
    for dev in ref cpu; do
        $model $dev >"$tmp/$model-$dev.ini"
        "$g" train "$tmp/$model-$dev.ini" --fresh -q --metrics-out "$tmp/$model-$dev.jsonl" \
            >/dev/null 2>"$tmp/$model-$dev.err"
        ok $? "$model model trains on device = $dev"
    done
    # The sparse ops of both backends sum in the same order (bitwise on the CPU); the dense
    # blocks and the head sum in another order on each (loops in double or float against
    # BLAS), so the curves agree to float rounding: 1e-5 relative per logged step.
    same_curve "$tmp/$model-ref.jsonl" "$tmp/$model-cpu.jsonl" 1e-5
    ok $? "$model model: device = ref and device = cpu give the same loss at every step"
    # evaluation scores the catalog with each backend's GEMM (ref accumulates in double)
    a=$(metric "$tmp/$model-ref.jsonl" test ndcg@10)
    b=$(metric "$tmp/$model-cpu.jsonl" test ndcg@10)
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 2e-3) }'
    ok $? "$model model: test ndcg@10 on ref ($a) and cpu ($b) agree within 2e-3"
done

pooled cuda:0 >"$tmp/cuda.ini"
line=$(grep -n '^device' "$tmp/cuda.ini" | cut -d: -f1)
"$g" check "$tmp/cuda.ini" >/dev/null 2>"$tmp/cuda.err"
rc=$?
grep -q "cuda.ini:$line: \[pipeline\] device = cuda:0: \[embedding\] plugin = emb-static does not run on cuda" "$tmp/cuda.err"
ok $(( rc == 2 ? $? : 1 )) "check refuses device = cuda:0 for CPU-only plugins, naming file:line and the plugin (exit $rc: $(cat "$tmp/cuda.err"))"
pooled tpu >"$tmp/bad.ini"
"$g" check "$tmp/bad.ini" >/dev/null 2>"$tmp/bad.err"
rc=$?
grep -q "bad.ini:$line: \[pipeline\] device 'tpu': expected cpu, ref or cuda:N" "$tmp/bad.err"
ok $(( rc == 2 ? $? : 1 )) "check refuses device = tpu with the allowed values (exit $rc)"

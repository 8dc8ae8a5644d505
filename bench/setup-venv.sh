#!/bin/sh
# bench/setup-venv.sh - the peers' Python for `make bench` (issue 24): a virtualenv with the
# current PyTorch from PyPI (and numpy), so that bench/ compares grm against what a user
# would otherwise run, not against Debian's torch 1.13. With --hstu-ref it adds fbgemm_gpu's
# CPU jagged ops that Meta's HSTU research layer calls (bench_hstu.py --ref), and the
# gin-config and pandas its trainer's modules import (bench_ref_train.py): the release
# fbgemm-gpu-cpu 1.9.0 is built for torch 2.14 and does not load on 2.15 (undefined symbol
# c10::report_overflow), so this takes the nightly CPU build (FBGEMM_NIGHTLY picks the date;
# 2026.10.16 loads on torch 2.15.0). bench/run.sh takes this venv's python when it exists
# (PYTHON3 overrides); each bench prints the torch version it ran against.
# (torchrec is not installed: its release needs that fbgemm release, so no bench uses it yet.)
# Usage: setup-venv.sh [--hstu-ref] [DIR]   (DIR default: bench/venv in the build
# tree). Needs network access to PyPI; nothing of the build or the tests uses it.
set -eu
hsturef=0
while :; do
    case "${1:-}" in
    --hstu-ref) hsturef=1; shift ;;
    *) break ;;
    esac
done
dir=${1:-${GRM_TOP_BUILDDIR:-.}/bench/venv}
py=${PYTHON3:-/usr/bin/python3}
TORCH=${TORCH_VERSION:-2.15.0}
if [ ! -x "$dir/bin/python" ]; then
    echo "bench: making the virtualenv $dir"
    "$py" -m venv "$dir"
fi
"$dir/bin/pip" install -q "torch==$TORCH" numpy safetensors   # safetensors: bench_recommend.sh
# the release and the nightly write the same fbgemm_gpu/ files: keep only the nightly
[ $hsturef -eq 1 ] && { "$dir/bin/pip" uninstall -y -q fbgemm-gpu-cpu 2>/dev/null || :; }
[ $hsturef -eq 1 ] && "$dir/bin/pip" install -q --no-deps \
    "fbgemm-gpu-nightly-cpu==${FBGEMM_NIGHTLY:-2026.10.16}"
# bench_ref_train.py imports the reference's trainer modules: gin-config and pandas too
[ $hsturef -eq 1 ] && "$dir/bin/pip" install -q gin-config pandas
"$dir/bin/python" -c 'import torch; print("bench: peers run on torch", torch.__version__, \
"threads", torch.get_num_threads())'

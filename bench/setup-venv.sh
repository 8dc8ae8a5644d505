#!/bin/sh
# bench/setup-venv.sh - the peers' Python for `make bench` (issue 24): a virtualenv with the
# current PyTorch from PyPI (and numpy), so that bench/ compares grm against what a user
# would otherwise run, not against Debian's torch 1.13. With --sparse it adds torchrec and
# fbgemm-gpu-cpu for the sparse cases that use them. bench/run.sh takes this venv's python
# when it exists (PYTHON3 overrides); each bench prints the torch version it ran against.
# Usage: setup-venv.sh [--sparse] [DIR]   (DIR default: bench/venv in the build tree)
# Needs network access to PyPI; nothing of the build or the tests uses it.
set -eu
sparse=0
[ "${1:-}" = "--sparse" ] && { sparse=1; shift; }
dir=${1:-${GRM_TOP_BUILDDIR:-.}/bench/venv}
py=${PYTHON3:-/usr/bin/python3}
TORCH=${TORCH_VERSION:-2.15.0}
if [ ! -x "$dir/bin/python" ]; then
    echo "bench: making the virtualenv $dir"
    "$py" -m venv "$dir"
fi
"$dir/bin/pip" install -q "torch==$TORCH" numpy
[ $sparse -eq 1 ] && "$dir/bin/pip" install -q torchrec fbgemm-gpu-cpu
"$dir/bin/python" -c 'import torch; print("bench: peers run on torch", torch.__version__, \
"threads", torch.get_num_threads())'

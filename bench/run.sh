#!/bin/sh
# bench/run.sh - run every benchmark of bench/ (DESIGN.md §8), one after another.
# Each bench_*.py / bench_*.sh prints `bench=... case=... key=value` lines with its peer
# measured in the same run. Environment (set by `make bench`): GRM_TOP_BUILDDIR,
# GRM_TOP_SRCDIR, GRM_DATA_DIR, PYTHON3. `make bench BENCH=hstu` runs only bench_hstu*.
# A benchmark that fails is reported and the others still run; the status is non-zero.
set -u
src=${GRM_TOP_SRCDIR:-.}
build=${GRM_TOP_BUILDDIR:-.}
# the peers' python: PYTHON3 when set, else bench/setup-venv.sh's venv (current PyTorch
# from PyPI) when it exists, else python3 (Debian's torch: an older peer, said so below)
venv="$build/bench/venv/bin/python"
if [ -n "${PYTHON3:-}" ]; then py=$PYTHON3
elif [ -x "$venv" ]; then py=$venv
else py=${GRM_PYTHON3:-python3}
fi
export PYTHON3="$py"   # for the bench_*.sh that run python themselves
echo "# peers: $("$py" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null \
    || echo "no torch") from $py$([ -x "$venv" ] || echo "; bench/setup-venv.sh installs current PyTorch")"
only=${BENCH:-}
status=0
for f in "$src"/bench/bench_*.py "$src"/bench/bench_*.sh; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    case "$name" in bench_"$only"*) ;; *) continue ;; esac
    echo "# $name"
    case "$f" in
    *.py) "$py" "$f" --grmhost "$build/grmhost" --build "$build" ;;
    *.sh) sh "$f" ;;
    esac
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "# $name failed with status $rc"
        status=1
    fi
done
exit $status

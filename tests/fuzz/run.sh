#!/bin/sh
# tests/fuzz/run.sh - build the libFuzzer targets with clang (-fsanitize=fuzzer,address,
# undefined) and run each for a bounded time over its seed corpus: fuzz_grmcol (the grmcol
# reader, core/grmcol.c), fuzz_text (reader-text's parser), fuzz_safetensors
# (ckpt-safetensors' header parser), fuzz_ini (the INI loader and the declared-parameter
# checks, core/config.c and core/params.c) and fuzz_ckpt (ckpt-grm's checkpoint loading).
# Run by `make fuzz`.
# Usage: run.sh [SRCDIR [BUILDDIR]]; env CLANG (default clang), FUZZ_TIME seconds per
# target (default 30). Skips cleanly (exit 0) without clang or
# libFuzzer. Exit 1 when a target finds a crash; the input is left in BUILDDIR/fuzz/.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=${1:-$(cd "$here/../.." && pwd)}
build=${2:-$PWD}
cc=${CLANG:-clang}
time=${FUZZ_TIME:-30}
out="$build/fuzz"

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz: $cc not found; skipping (install clang and libclang-rt for libFuzzer)"
    exit 0
fi
mkdir -p "$out" || exit 1
flags="-g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I$src/sdk/include -I$src/core -I$build"
# libFuzzer may be missing even with clang present (no libclang-rt): skip, do not fail.
cat >"$out/probe.c" <<'EOF'
int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);
int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return (int)(d && n) * 0; }
EOF
if ! $cc $flags -o "$out/probe" "$out/probe.c" >/dev/null 2>&1; then
    echo "fuzz: $cc cannot link -fsanitize=fuzzer; skipping"
    exit 0
fi

echo "fuzz: building targets in $out"
$cc $flags -o "$out/fuzz-grmcol" "$src/tests/fuzz/fuzz_grmcol.c" "$src/core/grmcol.c" \
    -lzstd || exit 1
$cc $flags -I"$src/plugins/reader-text" -o "$out/fuzz-text" "$src/tests/fuzz/fuzz_text.c" \
    "$src/tests/fuzz/fuzz_host.c" \
    "$src/plugins/reader-text/plugin.c" "$src/plugins/reader-text/text_ref.c" \
    "$src/plugins/reader-text/text_src.c" -lzstd -lm || exit 1
$cc $flags -I"$src/plugins/ckpt-safetensors" -I"$src/plugins/ckpt-common" -o "$out/fuzz-safetensors" \
    "$src/tests/fuzz/fuzz_safetensors.c" "$src/plugins/ckpt-safetensors/st_parse.c" || exit 1
$cc $flags -o "$out/fuzz-ini" "$src/tests/fuzz/fuzz_ini.c" "$src/core/config.c" \
    "$src/core/params.c" "$src/core/error.c" "$src/core/log.c" \
    $(pkg-config --cflags --libs inih) -lm || exit 1
$cc $flags -I"$src/plugins/ckpt-grm" -I"$src/plugins/ckpt-common" -o "$out/fuzz-ckpt" \
    "$src/tests/fuzz/fuzz_ckpt.c" "$src/tests/fuzz/fuzz_host.c" \
    "$src/plugins/ckpt-grm/plugin.c" "$src/plugins/ckpt-grm/ckpt_grm_load.c" \
    "$src/plugins/ckpt-grm/ckpt_grm_save.c" "$src/plugins/ckpt-common/ckpt_file.c" \
    -lzstd -lxxhash || exit 1

status=0
for t in grmcol text safetensors ini ckpt; do
    # New inputs go to the build tree's corpus; the seeds in the source tree stay as they are.
    mkdir -p "$out/corpus-$t"
    seeds=
    [ -d "$src/tests/fuzz/corpus-$t" ] && seeds="$src/tests/fuzz/corpus-$t"
    echo "fuzz: fuzz-$t for ${time}s"
    # shellcheck disable=SC2086 # $seeds is empty or one directory
    if ! "$out/fuzz-$t" -max_total_time="$time" -rss_limit_mb=2048 -timeout=10 \
            -artifact_prefix="$out/crash-$t-" "$out/corpus-$t" $seeds \
            >"$out/fuzz-$t.log" 2>&1; then
        echo "fuzz: fuzz-$t FAILED; see $out/fuzz-$t.log and $out/crash-$t-*"
        tail -40 "$out/fuzz-$t.log"
        status=1
    else
        tail -2 "$out/fuzz-$t.log" | sed "s/^/fuzz-$t: /"
    fi
done
exit $status

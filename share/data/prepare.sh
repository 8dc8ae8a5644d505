#!/bin/sh
# share/data/prepare.sh - make the inputs the shipped pipelines read (share/pipelines/*.ini:
# ${GRM_DATA_DIR:-../data}/...) from the public downloads, checked byte for byte against
# the files the README's results were measured on.
#
#   sh share/data/prepare.sh [--download] [--from DIR] [--out DIR]
#
# --from DIR   where the downloads are (default: the current directory): ml-100k.zip, or
#              its u.data, and Beauty.txt
# --download   fetch the missing downloads into DIR first (curl or wget)
# --out DIR    where the inputs go (default: this script's directory, share/data, which
#              the pipelines read when GRM_DATA_DIR is unset); then export GRM_DATA_DIR=DIR
#
# It writes, each one verified by the sha256 of its uncompressed content:
#   OUT/ml-100k/u.data.zst              MovieLens 100K ratings, `user item rating ts` TSV
#     from https://files.grouplens.org/datasets/movielens/ml-100k.zip (ml-100k/u.data)
#     sha256 06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490
#   OUT/amazon-beauty/Beauty.txt.zst    Amazon Beauty 5-core sequences `user item item ...`,
#     S3-Rec's preprocessing (CIKM 2020) of McAuley et al.'s reviews_Beauty_5 file, from
#     https://raw.githubusercontent.com/RUCAIBox/CIKM2020-S3Rec/COMMIT/data/Beauty.txt
#     (COMMIT 2a81540ae18615d88ef88227b0c066e5b74781e5)
#     sha256 226cce9c3105299ca0db9615d7d3fb32b3175e90da43100ae352599f0f0107b8
# Both licences forbid redistribution: grm ships this script, never the data. MovieLens 1M
# (ml1m-hstu.ini) is not made here: its checksum has not been verified by this project;
# unzip ml-1m.zip's ratings.dat into OUT/ml-1m/ yourself.
# Needs sha256sum, zstd, and unzip or python3 (for the zip). Exit 0 when every input is
# ready, 1 when a download is missing or does not match (nothing half-written is left).
set -eu

from=. out=$(dirname "$0") download=0
while [ $# -gt 0 ]; do
    case "$1" in
    --from) from=${2:?--from DIR}; shift 2 ;;
    --out) out=${2:?--out DIR}; shift 2 ;;
    --download) download=1; shift ;;
    -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "prepare.sh: unknown argument '$1'; see --help" >&2; exit 2 ;;
    esac
done

ML100K_URL=https://files.grouplens.org/datasets/movielens/ml-100k.zip
ML100K_SHA=06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490
S3REC=https://raw.githubusercontent.com/RUCAIBox/CIKM2020-S3Rec
BEAUTY_URL=$S3REC/2a81540ae18615d88ef88227b0c066e5b74781e5/data/Beauty.txt
BEAUTY_SHA=226cce9c3105299ca0db9615d7d3fb32b3175e90da43100ae352599f0f0107b8

for tool in sha256sum zstd; do
    command -v $tool >/dev/null ||
        { echo "prepare.sh: $tool not found; apt-get install $tool" >&2; exit 1; }
done

fetch() {   # URL FILE
    [ $download = 1 ] || return 1
    echo "prepare.sh: downloading $1" >&2
    if command -v curl >/dev/null; then curl -fsSL -o "$2.part" "$1"
    else wget -q -O "$2.part" "$1"; fi && mv "$2.part" "$2"
}

# put SRC SHA DEST: compress the plain file SRC to DEST (.zst) if its sha256 is SHA
put() {
    got=$(sha256sum <"$1" | cut -d' ' -f1)
    if [ "$got" != "$2" ]; then
        echo "prepare.sh: $3: the source's sha256 is $got, expected $2; not the published file" >&2
        return 1
    fi
    mkdir -p "$(dirname "$3")"
    zstd -q -19 -f "$1" -o "$3.tmp" && mv "$3.tmp" "$3"
    echo "prepare.sh: wrote $3 (sha256 of its content $2)"
}

mkdir -p "$from" "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grm-prepare-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0

# MovieLens 100K
if [ ! -f "$from/u.data" ] && [ ! -f "$from/ml-100k/u.data" ] && [ ! -f "$from/ml-100k.zip" ]; then
    fetch "$ML100K_URL" "$from/ml-100k.zip" || true
fi
if [ -f "$from/u.data" ]; then src="$from/u.data"
elif [ -f "$from/ml-100k/u.data" ]; then src="$from/ml-100k/u.data"
elif [ -f "$from/ml-100k.zip" ]; then
    src="$tmp/u.data"
    if command -v unzip >/dev/null; then unzip -p "$from/ml-100k.zip" ml-100k/u.data >"$src"
    else python3 -c 'import sys, zipfile
sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("ml-100k/u.data"))' \
        "$from/ml-100k.zip" >"$src"; fi
else
    src=""
    echo "prepare.sh: no ml-100k.zip (or u.data) in $from; download $ML100K_URL," \
         "or pass --download" >&2
    fail=1
fi
[ -n "$src" ] && { put "$src" "$ML100K_SHA" "$out/ml-100k/u.data.zst" || fail=1; }

# Amazon Beauty (S3-Rec's sequences)
[ -f "$from/Beauty.txt" ] || fetch "$BEAUTY_URL" "$from/Beauty.txt" || true
if [ -f "$from/Beauty.txt" ]; then
    put "$from/Beauty.txt" "$BEAUTY_SHA" "$out/amazon-beauty/Beauty.txt.zst" || fail=1
else
    echo "prepare.sh: no Beauty.txt in $from; download $BEAUTY_URL, or pass --download" >&2
    fail=1
fi

[ $fail = 0 ] && echo "prepare.sh: ready; export GRM_DATA_DIR=$(cd "$out" && pwd)"
exit $fail

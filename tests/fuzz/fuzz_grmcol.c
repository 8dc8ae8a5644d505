/* tests/fuzz/fuzz_grmcol.c - libFuzzer target for the grmcol reader (core/grmcol.c): the
 * input is a whole file. It is parsed as given, and again with its footer checksum
 * recomputed so that mutations reach the footer's own checks; every chunk of a file that
 * parses is decoded with its checksum as stored and, again, recomputed so that mutations
 * reach zstd and the CSR offset checks. Nothing may crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "grmcol.h"

/* Largest payload decoded (bigger claims are only parsed): keeps the fuzzer fast. */
#define FUZZ_MAX_PAYLOAD (1u << 24)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_decode(grm__grmcol_meta *m, const uint8_t *data)
{
    grm__grmcol_err e;
    for (int64_t g = 0; g < m->ngroups; g++) {
        for (int32_t c = 0; c < m->ncols; c++) {
            grm__grmcol_chunk *k = &m->chunks[g * m->ncols + c];
            if (k->usize > FUZZ_MAX_PAYLOAD) continue;
            void *payload = malloc((size_t)k->usize + 8);
            for (int pass = 0; pass < 2; pass++) {
                if (pass == 1) k->xxh64 = XXH64(data + k->offset, (size_t)k->csize, 0);
                if (grm__grmcol_decode(m, "fuzz", g, c, data + k->offset, payload, NULL, &e)
                    == GRM_OK) {
                    grm_column col;
                    grm__grmcol_column(m, g, c, payload, &col);
                    // Touch every value the offsets claim (ASan checks the bounds).
                    volatile uint8_t sink = 0;
                    if (col.offsets != NULL) {
                        const size_t w = col.type == GRM_COL_STR ? 1
                                         : col.type == GRM_COL_LIST_I64 ? 8 : 4;
                        const uint8_t *v = col.values;
                        for (int64_t r = 0; r < col.rows; r++) {
                            for (int64_t i = col.offsets[r]; i < col.offsets[r + 1]; i++) {
                                sink ^= v[(size_t)i * w + w - 1];
                            }
                        }
                    } else if (col.rows > 0) {
                        sink ^= ((const uint8_t *)col.values)[col.rows * 4 - 1];
                    }
                    (void)sink;
                    break;
                }
            }
            free(payload);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grm__grmcol_meta m;
    grm__grmcol_err e;
    if (grm__grmcol_parse_buffer(data, size, "fuzz", &m, &e) == GRM_OK) {
        fuzz_decode(&m, data);
        grm__grmcol_meta_fini(&m);
    }
    if (size < GRM__GRMCOL_HEADER_SIZE + GRM__GRMCOL_TRAILER_SIZE) return 0;
    uint8_t *copy = malloc(size);
    memcpy(copy, data, size);
    uint64_t flen = 0;
    for (int i = 7; i >= 0; i--) flen = (flen << 8) | copy[size - 24 + (size_t)i];
    if (flen <= size - GRM__GRMCOL_HEADER_SIZE - GRM__GRMCOL_TRAILER_SIZE) {
        const uint64_t s = XXH64(copy + size - 24 - flen, (size_t)flen, 0);
        for (int i = 0; i < 8; i++) copy[size - 16 + (size_t)i] = (uint8_t)(s >> (8 * i));
        if (grm__grmcol_parse_buffer(copy, size, "fuzz", &m, &e) == GRM_OK) {
            fuzz_decode(&m, copy);
            grm__grmcol_meta_fini(&m);
        }
    }
    // The incremental footer parse used on files: a tail shorter than the footer.
    size_t need = 0;
    const size_t tail = size / 2 > 24 ? size / 2 : 24;
    if (grm__grmcol_parse_footer(copy + size - tail, tail, size, "fuzz", &m, &need, &e) == GRM_OK
        && need == 0) {
        grm__grmcol_meta_fini(&m);
    }
    free(copy);
    return 0;
}

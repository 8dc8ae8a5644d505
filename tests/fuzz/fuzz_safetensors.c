/* tests/fuzz/fuzz_safetensors.c - libFuzzer target for ckpt-safetensors' header parser
 * (plugins/ckpt-safetensors/st_parse.c, st_parse): the input is a whole file image. It is
 * parsed as given, and again with its first 8 bytes replaced by the true header length
 * (input size - 8 - a tail taken from byte 0), so mutations get past the length check and
 * reach the JSON reader and the offset rules. On success every tensor's data range is
 * touched (ASan checks it lies inside the image) and the metadata read. Nothing may crash,
 * leak or read out of bounds; the parser never trusts a length for an allocation. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_err[1024];

static grm_status fz_errorf(grm_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fz_err, sizeof fz_err, fmt, ap);
    va_end(ap);
    return st;
}

static const char *fz_last_error(void) { return fz_err; }

/* Only errorf and last_error are reached by st_parse. */
static const grm_host_api fz_host = {
    .struct_size = sizeof(grm_host_api),
    .errorf = fz_errorf,
    .last_error = fz_last_error,
};

static void fz_one(const uint8_t *d, size_t size)
{
    st_header h;
    if (st_parse(&fz_host, "fuzz", d, size, &h) != GRM_OK) {
        // A refusal always says which file.
        if (strstr(fz_err, "fuzz") == NULL) abort();
        return;
    }
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < h.n; i++) {
        const st_entry *e = &h.entries[i];
        if (e->end > e->begin) {
            sink ^= d[h.data_start + e->begin];
            sink ^= d[h.data_start + e->end - 1];
        }
        sink ^= (uint8_t)e->name[strlen(e->name)];
    }
    for (int64_t i = 0; i < h.nmeta; i++) sink ^= (uint8_t)strlen(h.meta[i].value);
    (void)sink;
    st_header_fini(&h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_one(data, size);
    if (size < 9) return 0;
    // The same bytes with a consistent header length: data_len is data[0] % 64 bytes.
    uint8_t *copy = malloc(size);
    if (copy == NULL) return 0;
    memcpy(copy, data, size);
    const size_t tail = data[0] % 64 < size - 8 ? data[0] % 64 : 0;
    st_put_u64(copy, (uint64_t)(size - 8 - tail));
    fz_one(copy, size);
    free(copy);
    return 0;
}

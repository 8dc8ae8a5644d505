/* tests/fuzz/fuzz_ckpt.c - libFuzzer target for checkpoint loading in ckpt-grm
 * (plugins/ckpt-grm, byte layout in its README.md), through its ops table with the fuzz
 * host (fuzz_host.c). Byte 0: bit 0 recomputes the file's trailer checksum (XXH64 of every
 * byte before the last 16) so that mutations reach the header, tensor records and zstd
 * frames instead of stopping at the checksum; bit 1 reads the tensors a piece at a time,
 * through `load_rows` and `load_rows_interleaved` (ABI 1.13), instead of `load`; the rest is
 * the file. `meta` runs too; every byte of every tensor or piece visited is read so ASan
 * checks its bounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <grm/ckpt.h>

#include "fuzz_host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

GRM_PLUGIN_EXPORT const grm_plugin_info *const *grm_plugin_entry(const grm_host_api *host);

static grm_status fz_visit(void *user, const grm_named_tensor *t)
{
    static const size_t width[] = { 1, 4, 2, 2, 4, 8, 1 };
    size_t n = 1;
    for (int32_t d = 0; d < t->tensor.ndim; d++) n *= (size_t)t->tensor.shape[d];
    const int32_t dt = t->tensor.dtype;
    n *= dt >= 1 && dt <= 6 ? width[dt] : 1;
    volatile uint8_t sink = (uint8_t)strlen(t->name);
    for (size_t i = 0; i < n; i++) sink ^= ((const uint8_t *)t->tensor.data)[i];
    (void)sink;
    (*(int64_t *)user)++;
    return GRM_OK;
}

static grm_status fz_piece(void *user, const grm_named_tensor *t, int64_t row0, int64_t rows)
{
    (void)row0;
    (void)rows;
    return fz_visit(user, t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const grm_plugin_info *info = grm_plugin_entry(&fz_host)[0];
    const grm_ckpt_ops *ops = info->ops;
    const uint8_t mode = data[0];
    size_t n = size - 1;
    uint8_t *file = malloc(n ? n : 1);
    if (!file) return 0;
    memcpy(file, data + 1, n);
    if ((mode & 1) && n >= 16) {
        const uint64_t h = XXH64(file, n - 16, 0);
        for (int i = 0; i < 8; i++) file[n - 16 + (size_t)i] = (uint8_t)(h >> (8 * i));
    }
    char path[] = "/tmp/grm-fuzz-ckpt-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0 || write(fd, file, n) != (ssize_t)n) {
        if (fd >= 0) close(fd);
        unlink(path);
        free(file);
        return 0;
    }
    close(fd);
    void *inst = NULL;
    if (ops->create(NULL, &inst) == GRM_OK) {
        char meta[4096];
        int64_t visited = 0;
        ops->meta(inst, path, meta, sizeof meta);
        if (mode & 2) {
            ops->load_rows(inst, path, fz_piece, &visited);
            ops->load_rows_interleaved(inst, path, fz_piece, &visited);
        } else {
            ops->load(inst, path, fz_visit, &visited);
        }
        ops->destroy(inst);
    }
    unlink(path);
    free(file);
    return 0;
}

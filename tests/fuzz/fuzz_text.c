/* tests/fuzz/fuzz_text.c - libFuzzer target for reader-text's parser (plugins/reader-text),
 * driven through its ops table with a minimal host table. Input: byte 0 picks format,
 * header, on_bad_row and whether the file is read as .zst; byte 1 picks a columns spec;
 * the rest is the file. Every chunk's columns are walked so ASan checks their bounds. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_host.h"
#include "text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

GRM_PLUGIN_EXPORT const grm_plugin_info *const *grm_plugin_entry(const grm_host_api *host);

static const char *const fz_specs[][4] = {
    { "user:i64", "item:i64", "rating:f32", "ts:i64" },
    { "user:i64", "items:list_i64", NULL, NULL },
    { "name:str", "_", "w:list_f32", NULL },
    { "a:f32", "b:str", "c:i64", NULL },
    { "_:list_i64", NULL, NULL, NULL },            // invalid: nothing named
    { "x:i64", "x:i64", NULL, NULL },              // invalid: twice
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    const grm_plugin_info *info = grm_plugin_entry(&fz_host)[0];
    const grm_reader_ops *ops = info->ops;
    const uint8_t mode = data[0], pick = data[1];
    const int zst = (mode >> 4) & 1;
    char path[] = "/tmp/grm-fuzz-text-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return 0;
    if (size > 2 && write(fd, data + 2, size - 2) != (ssize_t)(size - 2)) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    char zpath[64];
    snprintf(zpath, sizeof zpath, "%s.zst", path);
    if (zst) rename(path, zpath);

    text_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.path = zst ? zpath : path;
    cfg.format = mode & 3;
    cfg.header = (mode >> 2) & 1;
    cfg.on_bad_row = (mode >> 3) & 1;
    cfg.chunk_rows = 1 + (pick >> 4);
    const int which = (pick & 15) % (int)(sizeof fz_specs / sizeof fz_specs[0]);
    for (int i = 0; i < 4 && fz_specs[which][i] != NULL; i++) {
        cfg.columns.v[cfg.columns.n++] = fz_specs[which][i];
    }
    void *inst = NULL;
    if (ops->open(&cfg, (pick >> 6) & 1, 1 + ((pick >> 6) & 1), &inst) == GRM_OK) {
        volatile uint8_t sink = 0;
        for (int guard = 0; guard < 100000; guard++) {
            const grm_chunk *ch = NULL;
            if (ops->next(inst, &ch) != GRM_OK || ch == NULL) break;
            for (int32_t c = 0; c < ch->ncols; c++) {
                const grm_column *col = &ch->cols[c];
                if (col->offsets != NULL) {
                    const uint8_t *v = col->values;
                    const int64_t n = col->offsets[col->rows];
                    const size_t w = col->type == GRM_COL_STR ? 1
                                     : col->type == GRM_COL_LIST_I64 ? 8 : 4;
                    if (n > 0) sink ^= v[(size_t)n * w - 1];
                } else if (col->rows > 0) {
                    sink ^= ((const uint8_t *)col->values)[col->rows * 4 - 1];
                }
            }
        }
        (void)sink;
        grm_reader_stats st;
        ops->stats(inst, &st);
    }
    ops->close(inst);
    unlink(zst ? zpath : path);
    return 0;
}

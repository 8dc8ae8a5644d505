/* bench/bench_read.c - the timing driver of bench/bench_read.py: read a whole dataset
 * through one reader plugin, loaded and configured as a pipeline's [reader] is, several
 * times, and print the best time with rows and uncompressed (column) bytes.
 *   bench-read --plugins DIR --repeat N PLUGIN key=value ...
 *   bench-read --dump FILE.grmcol OUT   (every decoded chunk payload, concatenated: the
 *                                        bytes the zstd -d peer decompresses)
 * Output: one line `rows=R bytes=B best_s=S median_s=M chunks=C`. */
#include "grm_core.h"
#include "grmcol.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Bytes a column holds in memory: values plus offsets. */
static int64_t column_bytes(const grm_column *c)
{
    switch (c->type) {
    case GRM_COL_I64: return 8 * c->rows;
    case GRM_COL_F32: return 4 * c->rows;
    case GRM_COL_STR: return c->offsets[c->rows] + 8 * (c->rows + 1);
    case GRM_COL_LIST_I64: return 8 * c->offsets[c->rows] + 8 * (c->rows + 1);
    default: return 4 * c->offsets[c->rows] + 8 * (c->rows + 1);
    }
}

static int dump(const char *path, const char *out)
{
    grm__grmcol_meta m;
    grm__grmcol_err e;
    int fd;
    if (grm__grmcol_open(path, &fd, &m, &e) != GRM_OK) {
        fprintf(stderr, "bench-read: %s\n", e.msg);
        return 1;
    }
    FILE *f = fopen(out, "wb");
    int rc = f == NULL;
    for (int64_t g = 0; g < m.ngroups && rc == 0; g++) {
        for (int32_t c = 0; c < m.ncols && rc == 0; c++) {
            const grm__grmcol_chunk *k = &m.chunks[g * m.ncols + c];
            void *s = malloc((size_t)k->csize), *p = malloc((size_t)k->usize + 8);
            rc = pread(fd, s, (size_t)k->csize, (off_t)k->offset) != (ssize_t)k->csize
                 || grm__grmcol_decode(&m, path, g, c, s, p, NULL, &e) != GRM_OK
                 || fwrite(p, 1, (size_t)k->usize, f) != k->usize;
            free(s);
            free(p);
        }
    }
    if (f != NULL && fclose(f) != 0) rc = 1;
    close(fd);
    grm__grmcol_meta_fini(&m);
    if (rc) fprintf(stderr, "bench-read: dumping %s to %s failed\n", path, out);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--dump") == 0) return dump(argv[2], argv[3]);
    if (argc < 6 || strcmp(argv[1], "--plugins") || strcmp(argv[3], "--repeat")) {
        fprintf(stderr, "usage: bench-read --plugins DIR --repeat N PLUGIN key=value ...\n"
                        "       bench-read --dump FILE.grmcol OUT\n");
        return 2;
    }
    const int repeat = atoi(argv[4]);
    grm__registry *reg;
    grm__pconfig pc;
    const grm__plugin *pl;
    grm_status st = grm__registry_create(&reg);
    if (st == GRM_OK) st = grm__registry_load_dir(reg, argv[2]);
    if (st == GRM_OK) st = grm__registry_get(reg, argv[5], GRM_KIND_READER, &pl);
    if (st == GRM_OK) {
        st = grm__params_fill_kv(pl->info, (const char *const *)argv + 6, argc - 6, &pc);
    }
    if (st != GRM_OK) {
        fprintf(stderr, "bench-read: %s\n", grm_last_error());
        return 1;
    }
    const grm_reader_ops *ops = pl->info->ops;
    double *times = calloc((size_t)(repeat > 0 ? repeat : 1), sizeof *times);
    int64_t rows = 0, bytes = 0, chunks = 0;
    for (int rep = 0; rep < repeat && st == GRM_OK; rep++) {
        void *inst = NULL;
        rows = bytes = chunks = 0;
        const double t0 = now_s();
        st = ops->open(pc.data, 0, 1, &inst);
        while (st == GRM_OK) {
            const grm_chunk *ch;
            if ((st = ops->next(inst, &ch)) != GRM_OK || ch == NULL) break;
            rows += ch->rows;
            chunks++;
            for (int32_t c = 0; c < ch->ncols; c++) bytes += column_bytes(&ch->cols[c]);
        }
        ops->close(inst);
        times[rep] = now_s() - t0;
    }
    if (st != GRM_OK) {
        fprintf(stderr, "bench-read: %s\n", grm_last_error());
        return 1;
    }
    qsort(times, (size_t)repeat, sizeof *times, cmp_double);
    printf("rows=%lld bytes=%lld best_s=%.6f median_s=%.6f chunks=%lld\n", (long long)rows,
           (long long)bytes, times[0], times[repeat / 2], (long long)chunks);
    free(times);
    grm__pconfig_fini(&pc);
    grm__registry_destroy(reg);
    return 0;
}

/* transform-filter - an out-of-tree grm plugin, built with nothing but the installed SDK:
 *
 *     cc -shared -fPIC $(pkg-config --cflags grm-sdk) filter.c -o transform-filter.so
 *
 * It keeps the rows whose numeric column is at least `min` (for MovieLens: only ratings of
 * 4 and 5 count as positive interactions) and passes every other column through. It shows
 * the whole plugin contract: the entry symbol, the descriptor, declared parameters, the
 * ops table, errors through the host, and memory that the instance owns. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <grm/grm.h>

static const grm_host_api *flt_host;   /* the only mutable global a plugin may have */

/* The config the host fills from the INI section; each field is one declared key. */
typedef struct flt_config {
    const char *column;
    double min;
} flt_config;

/* One GRM_PARAM_DECL_<TYPE>(config type, field = INI key, default, [range | choices,] help)
 * per key (grm/param.h); the field's C type is checked against the parameter type. */
static const grm_param_decl flt_params[] = {
    GRM_PARAM_DECL_STRING(flt_config, column, GRM_PARAM_REQUIRED,
                          "I64 or F32 column tested against min"),
    GRM_PARAM_DECL_DOUBLE(flt_config, min, "0", GRM_PARAM_ANY,
                          "rows whose column is below this are dropped"),
    GRM_PARAM_DECL_END
};

typedef struct flt {
    const flt_config *cfg;
    const grm_schema *schema;   /* borrowed: input schema equals output schema */
    int32_t key;                /* index of the tested column */
    int32_t ncols;
    grm_column *cols;           /* [ncols] output columns */
    void **buf;                 /* [ncols] value buffers */
    int64_t **offs;             /* [ncols] offsets buffers (STR only) */
    size_t *cap, *ocap;         /* [ncols] bytes */
    grm_chunk chunk;
} flt;

static const grm_device cpu = { GRM_DEVICE_CPU, 0 };

static void *grow(void *p, size_t *cap, size_t need)
{
    if (need <= *cap) return p;
    size_t n = *cap ? *cap : 4096;
    while (n < need) n *= 2;
    void *q = flt_host->alloc(cpu, n, 64);
    if (!q) return NULL;
    flt_host->free(cpu, p);
    *cap = n;
    return q;
}

static void flt_destroy(void *inst)
{
    flt *f = inst;
    if (!f) return;
    for (int32_t i = 0; i < f->ncols; i++) {
        if (f->buf) flt_host->free(cpu, f->buf[i]);
        if (f->offs) flt_host->free(cpu, f->offs[i]);
    }
    flt_host->free(cpu, f->cols);
    flt_host->free(cpu, f->buf);
    flt_host->free(cpu, f->offs);
    flt_host->free(cpu, f->cap);
    flt_host->free(cpu, f->ocap);
    flt_host->free(cpu, f);
}

static grm_status flt_create(const void *config, const grm_schema *schema, void **inst)
{
    const flt_config *c = config;
    int32_t n = schema->nfields, key = -1;
    for (int32_t i = 0; i < n; i++)
        if (strcmp(schema->fields[i].name, c->column) == 0) key = i;
    if (key < 0)
        return flt_host->errorf(GRM_EINVAL, "transform-filter: no column '%s' in the input",
                                c->column);
    if (schema->fields[key].type != GRM_COL_I64 && schema->fields[key].type != GRM_COL_F32)
        return flt_host->errorf(GRM_EINVAL, "transform-filter: column '%s' is not I64 or F32",
                                c->column);
    for (int32_t i = 0; i < n; i++)
        if (schema->fields[i].type == GRM_COL_LIST_I64
            || schema->fields[i].type == GRM_COL_LIST_F32)
            return flt_host->errorf(GRM_ENOTSUP, "transform-filter: list column '%s' is not "
                                    "supported; filter before building sequences",
                                    schema->fields[i].name);
    flt *f = flt_host->alloc(cpu, sizeof *f, 0);
    if (!f) return GRM_ENOMEM;
    memset(f, 0, sizeof *f);
    f->cfg = c;
    f->schema = schema;
    f->key = key;
    f->cols = flt_host->alloc(cpu, (size_t)n * sizeof *f->cols + 1, 0);
    f->buf = flt_host->alloc(cpu, (size_t)n * sizeof *f->buf + 1, 0);
    f->offs = flt_host->alloc(cpu, (size_t)n * sizeof *f->offs + 1, 0);
    f->cap = flt_host->alloc(cpu, (size_t)n * sizeof *f->cap + 1, 0);
    f->ocap = flt_host->alloc(cpu, (size_t)n * sizeof *f->ocap + 1, 0);
    if (!f->cols || !f->buf || !f->offs || !f->cap || !f->ocap) {
        flt_destroy(f);
        return GRM_ENOMEM;
    }
    f->ncols = n;
    memset(f->buf, 0, (size_t)n * sizeof *f->buf);
    memset(f->offs, 0, (size_t)n * sizeof *f->offs);
    memset(f->cap, 0, (size_t)n * sizeof *f->cap);
    memset(f->ocap, 0, (size_t)n * sizeof *f->ocap);
    *inst = f;
    return GRM_OK;
}

static grm_status flt_schema(void *inst, const grm_schema **schema)
{
    *schema = ((flt *)inst)->schema;
    return GRM_OK;
}

static int keep_row(const flt *f, const grm_column *k, int64_t r)
{
    double v = k->type == GRM_COL_I64 ? (double)((const int64_t *)k->values)[r]
                                      : (double)((const float *)k->values)[r];
    return v >= f->cfg->min;
}

static grm_status flt_apply(void *inst, const grm_chunk *in, const grm_chunk **out)
{
    flt *f = inst;
    const grm_column *k = &in->cols[f->key];
    int64_t kept = 0;
    for (int64_t r = 0; r < in->rows; r++) kept += keep_row(f, k, r);
    for (int32_t c = 0; c < f->ncols; c++) {
        const grm_column *src = &in->cols[c];
        grm_column *dst = &f->cols[c];
        *dst = *src;
        dst->rows = kept;
        if (src->type == GRM_COL_STR) {
            f->offs[c] = grow(f->offs[c], &f->ocap[c], (size_t)(kept + 1) * sizeof(int64_t));
            f->buf[c] = grow(f->buf[c], &f->cap[c], (size_t)src->offsets[in->rows] + 1);
            if (!f->offs[c] || !f->buf[c]) return GRM_ENOMEM;
            int64_t o = 0, j = 0;
            f->offs[c][0] = 0;
            for (int64_t r = 0; r < in->rows; r++) {
                if (!keep_row(f, k, r)) continue;
                int64_t len = src->offsets[r + 1] - src->offsets[r];
                memcpy((char *)f->buf[c] + o, (const char *)src->values + src->offsets[r],
                       (size_t)len);
                o += len;
                f->offs[c][++j] = o;
            }
            dst->values = f->buf[c];
            dst->offsets = f->offs[c];
        } else {
            size_t es = src->type == GRM_COL_I64 ? sizeof(int64_t) : sizeof(float);
            f->buf[c] = grow(f->buf[c], &f->cap[c], (size_t)kept * es + 1);
            if (!f->buf[c]) return GRM_ENOMEM;
            int64_t j = 0;
            for (int64_t r = 0; r < in->rows; r++)
                if (keep_row(f, k, r))
                    memcpy((char *)f->buf[c] + es * (size_t)j++,
                           (const char *)src->values + es * (size_t)r, es);
            dst->values = f->buf[c];
        }
    }
    f->chunk = (grm_chunk){ sizeof(grm_chunk), f->ncols, kept, f->cols };
    *out = &f->chunk;
    return GRM_OK;
}

static const grm_transform_ops flt_ops = {
    .struct_size = sizeof(grm_transform_ops),
    .create = flt_create,
    .schema = flt_schema,
    .apply = flt_apply,
    .flush = NULL,
    .destroy = flt_destroy,
};

static const grm_plugin_info flt_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_TRANSFORM,
    .name = "transform-filter",
    .version = "1.0.0",
    .description = "keep rows whose numeric column is >= min (out-of-tree SDK example)",
    .ops = &flt_ops,
    .params = flt_params,
    .config_size = sizeof(flt_config),
};

/* Defines the exported grm_plugin_entry: it keeps the host pointer in flt_host and returns
 * { &flt_info, NULL } (grm/plugin.h). */
GRM_PLUGIN_DEFINE(flt_host, &flt_info);

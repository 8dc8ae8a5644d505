/* plugins/transform-basic/plugin.c - glue for transform-basic: entry point, descriptor,
 * declared parameters, the grm_transform_ops table, and the checks that tie the config to
 * the input schema at create. The work is in basic_ref.c. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basic.h"

static const grm_host_api *basic_host;   /* the only mutable global (STYLE.md §5.2) */

static const grm_device basic_cpu = { GRM_DEVICE_CPU, 0 };

static const grm_param_decl basic_params[] = {
    { "hash", GRM_PARAM_STR_LIST, 0, offsetof(basic_config, hash), NULL, GRM_PARAM_ANY, NULL,
      "str or i64 columns replaced by an i64 XXH3-64 hash (masked to >= 0) of their bytes" },
    { "hash_buckets", GRM_PARAM_INT, 0, offsetof(basic_config, hash_buckets), "0",
      GRM_PARAM_RANGE(0, (double)INT64_MAX), NULL,
      "reduce hashes modulo this many buckets; 0 keeps the full 63-bit hash" },
    { "mod", GRM_PARAM_STR_LIST, 0, offsetof(basic_config, mod), NULL, GRM_PARAM_ANY, NULL,
      "column:N entries: i64 column x replaced by ((x % N) + N) % N, N > 0" },
    { "bucketize", GRM_PARAM_STR_LIST, 0, offsetof(basic_config, bucketize), NULL,
      GRM_PARAM_ANY, NULL,
      "column:b1/b2/... entries: i64 or f32 column x replaced by the i64 bucket index "
      "(number of ascending boundaries <= x), e.g. rating:4 or age:18/25/35" },
    { "keep", GRM_PARAM_STR_LIST, 0, offsetof(basic_config, keep), NULL, GRM_PARAM_ANY, NULL,
      "output only these columns, in this order (default: all)" },
    { "sequence_by", GRM_PARAM_STRING, 0, offsetof(basic_config, sequence_by), NULL,
      GRM_PARAM_ANY, NULL,
      "i64 key column; when set, rows are gathered into one row of lists per key" },
    { "sequence_order", GRM_PARAM_STRING, 0, offsetof(basic_config, sequence_order), NULL,
      GRM_PARAM_ANY, NULL,
      "i64 column ordering a key's events (ties keep input order); empty: input order" },
    { "sequence_columns", GRM_PARAM_STR_LIST, 0, offsetof(basic_config, sequence_columns),
      NULL, GRM_PARAM_ANY, NULL,
      "i64 or f32 columns gathered into list_i64 or list_f32 columns per key, e.g. item,ts" },
    { "min_length", GRM_PARAM_INT, 0, offsetof(basic_config, min_length), "1",
      GRM_PARAM_RANGE(1, (double)INT64_MAX), NULL,
      "keys with fewer events are dropped (and counted in the log)" },
    { "max_length", GRM_PARAM_INT, 0, offsetof(basic_config, max_length), "0",
      GRM_PARAM_RANGE(0, (double)INT64_MAX), NULL,
      "keep only the most recent N events of a key; 0: unlimited" },
    { NULL, 0, 0, 0, NULL, GRM_PARAM_ANY, NULL, NULL },
};

/* ---- helpers for create ---- */

static const char *basic_type_name(int32_t type)
{
    switch (type) {
    case GRM_COL_I64: return "i64";
    case GRM_COL_F32: return "f32";
    case GRM_COL_STR: return "str";
    case GRM_COL_LIST_I64: return "list_i64";
    case GRM_COL_LIST_F32: return "list_f32";
    default: return "unknown";
    }
}

/* Longest "available: ..." list written into an error message. */
#define BASIC_AVAIL_MAX 512

/* "user (i64), item (str), ..." for the first n fields, cut with "..." if too long. */
static const char *basic_available(char *buf, const grm_field *f, int32_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < n; i++) {
        const int w = snprintf(buf + at, BASIC_AVAIL_MAX - at, "%s%s (%s)", i > 0 ? ", " : "",
                               f[i].name, basic_type_name(f[i].type));
        if (w < 0 || (size_t)w >= BASIC_AVAIL_MAX - at) {
            strcpy(buf + BASIC_AVAIL_MAX - 4, "...");
            break;
        }
        at += (size_t)w;
    }
    return buf;
}

static int32_t basic_find(const grm_field *f, int32_t n, const char *name)
{
    for (int32_t i = 0; i < n; i++) {
        if (strcmp(f[i].name, name) == 0) return i;
    }
    return -1;
}

static int basic_set(const char *s)
{
    return s != NULL && s[0] != '\0';
}

static void basic_destroy(void *inst)
{
    basic_inst *const t = inst;
    if (t == NULL) return;
    const grm_host_api *const host = t->host;
    if (t->seqcols != NULL) {
        basic_seq_free(t);
        host->free(basic_cpu, t->seqcols);
    }
    if (t->plan != NULL) {
        for (int32_t j = 0; j < t->nin; j++) {
            host->free(basic_cpu, t->plan[j].name);
            host->free(basic_cpu, t->plan[j].buf);
            free(t->plan[j].bounds);
        }
        host->free(basic_cpu, t->plan);
    }
    if (t->full != t->row) host->free(basic_cpu, t->full);
    host->free(basic_cpu, t->row);
    host->free(basic_cpu, t->full_fields);
    host->free(basic_cpu, t->out_src);
    host->free(basic_cpu, t->fields);
    host->free(basic_cpu, t->cols);
    host->free(basic_cpu, t);
}

/* Allocate n zeroed elements of `size` bytes into *p (left NULL for n == 0). */
static grm_status basic_calloc(void *p, size_t n, size_t size)
{
    void **const pp = p;
    *pp = NULL;
    if (n == 0) return GRM_OK;
    *pp = basic_host->alloc(basic_cpu, n * size, 0);
    if (*pp == NULL) return GRM_ENOMEM;
    memset(*pp, 0, n * size);
    return GRM_OK;
}

/* The input columns as fields, typed before (hash errors) or after the row-wise pass. */
static void basic_plan_fields(const basic_inst *t, grm_field *f, int after)
{
    for (int32_t j = 0; j < t->nin; j++) {
        f[j].name = t->plan[j].name;
        f[j].type = after ? t->plan[j].out_type : t->plan[j].in_type;
        f[j].reserved = 0;
    }
}

/* Input column `name` for option `what`; GRM_EINVAL listing what is available. */
static grm_status basic_column(const basic_inst *t, const char *what, const char *name,
                               int after, int32_t *idx)
{
    char avail[BASIC_AVAIL_MAX];
    basic_plan_fields(t, t->full_fields, after);
    *idx = basic_find(t->full_fields, t->nin, name);
    if (*idx < 0) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: %s column '%s' is not in the "
                                  "input; available: %s", what, name,
                                  basic_available(avail, t->full_fields, t->nin));
    }
    return GRM_OK;
}

/* Type error for column idx of option `what`, which needs `need`. */
static grm_status basic_type_error(const basic_inst *t, const char *what, int32_t idx,
                                   int32_t type, const char *need)
{
    char avail[BASIC_AVAIL_MAX];
    return basic_host->errorf(GRM_EINVAL, "transform-basic: %s column '%s' is %s; %s needs %s "
                              "(available: %s)", what, t->plan[idx].name,
                              basic_type_name(type), what, need,
                              basic_available(avail, t->full_fields, t->nin));
}

/* ---- create: tie the config to the input schema ---- */

static grm_status basic_plan_hash_mod(basic_inst *t, const basic_config *cfg)
{
    grm_status st;
    int32_t idx;

    for (int64_t i = 0; i < cfg->hash.n; i++) {
        st = basic_column(t, "hash", cfg->hash.v[i], 0, &idx);
        if (st != GRM_OK) return st;
        basic_colplan *const p = &t->plan[idx];
        if (p->in_type != GRM_COL_STR && p->in_type != GRM_COL_I64) {
            return basic_type_error(t, "hash", idx, p->in_type, "str or i64");
        }
        if (p->hash) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: hash lists column '%s' "
                                      "twice; list it once", p->name);
        }
        p->hash = 1;
        p->out_type = GRM_COL_I64;
    }
    for (int64_t i = 0; i < cfg->bucketize.n; i++) {
        const char *const entry = cfg->bucketize.v[i];
        const char *const colon = strchr(entry, ':');
        char name[256];
        if (colon == NULL || colon == entry || (size_t)(colon - entry) >= sizeof(name)
            || colon[1] == '\0') {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: bucketize entry '%s': "
                                      "expected column:b1/b2/... with ascending numeric "
                                      "boundaries, e.g. rating:4", entry);
        }
        memcpy(name, entry, (size_t)(colon - entry));
        name[colon - entry] = '\0';
        st = basic_column(t, "bucketize", name, 0, &idx);
        if (st != GRM_OK) return st;
        basic_colplan *const p = &t->plan[idx];
        if (p->in_type != GRM_COL_I64 && p->in_type != GRM_COL_F32)
            return basic_type_error(t, "bucketize", idx, p->in_type, "i64 or f32");
        if (p->hash || p->nbounds > 0)
            return basic_host->errorf(GRM_EINVAL, "transform-basic: bucketize entry '%s': "
                                      "column '%s' is already %s; transform a column once",
                                      entry, p->name, p->hash ? "hashed" : "bucketized");
        int64_t n = 1;
        for (const char *q = colon + 1; *q; q++) n += *q == '/';
        p->bounds = malloc((size_t)n * sizeof *p->bounds);
        if (p->bounds == NULL)
            return basic_host->errorf(GRM_ENOMEM, "transform-basic: out of memory");
        const char *q = colon + 1;
        for (int64_t k = 0; k < n; k++) {
            char *end = NULL;
            errno = 0;
            const double b = strtod(q, &end);
            if (end == q || errno == ERANGE || (*end != '/' && *end != '\0') || b != b) {
                free(p->bounds);
                p->bounds = NULL;
                return basic_host->errorf(GRM_EINVAL, "transform-basic: bucketize entry '%s': "
                                          "boundary %lld is not a number", entry,
                                          (long long)k + 1);
            }
            if (k > 0 && !(b > p->bounds[k - 1])) {
                free(p->bounds);
                p->bounds = NULL;
                return basic_host->errorf(GRM_EINVAL, "transform-basic: bucketize entry '%s': "
                                          "boundaries must be strictly ascending", entry);
            }
            p->bounds[k] = b;
            q = *end ? end + 1 : end;
        }
        p->nbounds = n;
        p->out_type = GRM_COL_I64;
    }
    for (int64_t i = 0; i < cfg->mod.n; i++) {
        const char *const entry = cfg->mod.v[i];
        const char *const colon = strrchr(entry, ':');
        char name[256];
        char *end = NULL;
        if (colon == NULL || colon == entry || (size_t)(colon - entry) >= sizeof(name)
            || colon[1] == '\0') {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: mod entry '%s': expected "
                                      "column:N with an integer N > 0, e.g. item:1000", entry);
        }
        errno = 0;
        const long long n = strtoll(colon + 1, &end, 10);
        if (*end != '\0' || errno == ERANGE || colon[1] == ' ' || colon[1] == '+') {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: mod entry '%s': '%s' is "
                                      "not an integer; write column:N, e.g. item:1000", entry,
                                      colon + 1);
        }
        if (n <= 0) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: mod entry '%s': N must be "
                                      "> 0", entry);
        }
        memcpy(name, entry, (size_t)(colon - entry));
        name[colon - entry] = '\0';
        st = basic_column(t, "mod", name, 1, &idx);
        if (st != GRM_OK) return st;
        basic_colplan *const p = &t->plan[idx];
        if (p->out_type != GRM_COL_I64) return basic_type_error(t, "mod", idx, p->out_type, "i64");
        if (p->mod > 0) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: mod lists column '%s' "
                                      "twice; list it once", p->name);
        }
        p->mod = (int64_t)n;
    }
    return GRM_OK;
}

static grm_status basic_plan_sequence(basic_inst *t, const basic_config *cfg)
{
    grm_status st;
    int32_t idx;

    st = basic_column(t, "sequence_by", cfg->sequence_by, 1, &t->key_src);
    if (st != GRM_OK) return st;
    if (t->plan[t->key_src].out_type != GRM_COL_I64) {
        return basic_type_error(t, "sequence_by", t->key_src, t->plan[t->key_src].out_type,
                                "i64 (hash a str key first with hash = ...)");
    }
    t->order_src = -1;
    if (basic_set(cfg->sequence_order)) {
        st = basic_column(t, "sequence_order", cfg->sequence_order, 1, &t->order_src);
        if (st != GRM_OK) return st;
        if (t->plan[t->order_src].out_type != GRM_COL_I64) {
            return basic_type_error(t, "sequence_order", t->order_src,
                                    t->plan[t->order_src].out_type, "i64");
        }
    }
    if (cfg->sequence_columns.n <= 0) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: sequence_by = %s but "
                                  "sequence_columns is empty; list the columns to gather, "
                                  "e.g. item,ts", cfg->sequence_by);
    }
    if (cfg->min_length < 1 || cfg->max_length < 0
        || (cfg->max_length > 0 && cfg->max_length < cfg->min_length)) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: min_length = %lld, max_length "
                                  "= %lld; need min_length >= 1 and max_length = 0 or >= "
                                  "min_length", (long long)cfg->min_length,
                                  (long long)cfg->max_length);
    }
    t->min_length = cfg->min_length;
    t->max_length = cfg->max_length;
    t->nseq = (int32_t)cfg->sequence_columns.n;
    st = basic_calloc(&t->seqcols, (size_t)t->nseq, sizeof(*t->seqcols));
    if (st != GRM_OK) return st;
    for (int32_t j = 0; j < t->nseq; j++) {
        st = basic_column(t, "sequence_columns", cfg->sequence_columns.v[j], 1, &idx);
        if (st != GRM_OK) return st;
        const int32_t type = t->plan[idx].out_type;
        if (type != GRM_COL_I64 && type != GRM_COL_F32) {
            return basic_type_error(t, "sequence_columns", idx, type, "i64 or f32");
        }
        if (idx == t->key_src) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: sequence_columns lists "
                                      "the key column '%s'; the key is emitted on its own, "
                                      "remove it", t->plan[idx].name);
        }
        for (int32_t k = 0; k < j; k++) {
            if (t->seqcols[k].src == idx) {
                return basic_host->errorf(GRM_EINVAL, "transform-basic: sequence_columns "
                                          "lists column '%s' twice; list it once",
                                          t->plan[idx].name);
            }
        }
        t->seqcols[j].src = idx;
        t->seqcols[j].type = type;
    }
    return GRM_OK;
}

/* The columns before `keep` (full_fields), then `keep` itself (out_src, fields). */
static grm_status basic_plan_output(basic_inst *t, const basic_config *cfg)
{
    char avail[BASIC_AVAIL_MAX];
    grm_status st;

    if (t->seq) {
        t->nfull = 1 + t->nseq;
        t->full_fields[0].name = t->plan[t->key_src].name;
        t->full_fields[0].type = GRM_COL_I64;
        for (int32_t j = 0; j < t->nseq; j++) {
            t->full_fields[1 + j].name = t->plan[t->seqcols[j].src].name;
            t->full_fields[1 + j].type = t->seqcols[j].type == GRM_COL_I64 ? GRM_COL_LIST_I64
                                                                          : GRM_COL_LIST_F32;
            t->full_fields[1 + j].reserved = 0;
        }
        st = basic_calloc(&t->full, (size_t)t->nfull, sizeof(*t->full));
        if (st != GRM_OK) return st;
    } else {
        t->nfull = t->nin;
        basic_plan_fields(t, t->full_fields, 1);
        t->full = t->row;
    }
    t->nout = cfg->keep.n > 0 ? (int32_t)cfg->keep.n : t->nfull;
    st = basic_calloc(&t->out_src, (size_t)t->nout, sizeof(*t->out_src));
    if (st == GRM_OK) st = basic_calloc(&t->fields, (size_t)t->nout, sizeof(*t->fields));
    if (st == GRM_OK) st = basic_calloc(&t->cols, (size_t)t->nout, sizeof(*t->cols));
    if (st != GRM_OK) return st;
    for (int32_t k = 0; k < t->nout; k++) {
        int32_t idx = k;
        if (cfg->keep.n > 0) {
            idx = basic_find(t->full_fields, t->nfull, cfg->keep.v[k]);
            if (idx < 0) {
                return basic_host->errorf(GRM_EINVAL, "transform-basic: keep column '%s' is "
                                          "not in the %soutput; available: %s", cfg->keep.v[k],
                                          t->seq ? "sequence " : "",
                                          basic_available(avail, t->full_fields, t->nfull));
            }
            for (int32_t m = 0; m < k; m++) {
                if (t->out_src[m] == idx) {
                    return basic_host->errorf(GRM_EINVAL, "transform-basic: keep lists column "
                                              "'%s' twice; list it once", cfg->keep.v[k]);
                }
            }
        }
        t->out_src[k] = idx;
        t->fields[k] = t->full_fields[idx];
    }
    t->schema.struct_size = (uint32_t)sizeof(grm_schema);
    t->schema.nfields = t->nout;
    t->schema.fields = t->fields;
    return GRM_OK;
}

static grm_status basic_create(const void *config, const grm_schema *schema, void **inst)
{
    const basic_config *const cfg = config;
    basic_inst *t = NULL;
    grm_status st;

    if (config == NULL || schema == NULL || inst == NULL) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: create: config, schema and "
                                  "inst must not be NULL");
    }
    *inst = NULL;
    if (schema->nfields < 1 || schema->fields == NULL) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: create: the input schema has "
                                  "no columns");
    }
    if (!basic_set(cfg->sequence_by)
        && (basic_set(cfg->sequence_order) || cfg->sequence_columns.n > 0)) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: sequence_order or "
                                  "sequence_columns is set but sequence_by is not; set "
                                  "sequence_by to the key column, e.g. user");
    }
    if (cfg->hash_buckets < 0) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: hash_buckets = %lld; need 0 "
                                  "(no reduction) or a positive count",
                                  (long long)cfg->hash_buckets);
    }
    st = basic_calloc(&t, 1, sizeof(*t));
    if (st != GRM_OK) return st;
    t->host = basic_host;
    t->nin = schema->nfields;
    t->hash_buckets = cfg->hash_buckets;
    t->seq = basic_set(cfg->sequence_by);
    st = basic_calloc(&t->plan, (size_t)t->nin, sizeof(*t->plan));
    if (st == GRM_OK) st = basic_calloc(&t->row, (size_t)t->nin, sizeof(*t->row));
    // Sized for the larger of the two uses: input columns, or key + sequence columns.
    if (st == GRM_OK) {
        st = basic_calloc(&t->full_fields, (size_t)t->nin + 1, sizeof(*t->full_fields));
    }
    if (st != GRM_OK) goto fail;
    for (int32_t j = 0; j < t->nin; j++) {
        const grm_field *const f = &schema->fields[j];
        const size_t len = f->name != NULL ? strlen(f->name) : 0;
        if (len == 0) {
            st = basic_host->errorf(GRM_EINVAL, "transform-basic: create: input column %d has "
                                    "no name", j);
            goto fail;
        }
        if (f->type < GRM_COL_I64 || f->type > GRM_COL_LIST_F32) {
            st = basic_host->errorf(GRM_EINVAL, "transform-basic: create: input column '%s' "
                                    "has unknown type %d", f->name, f->type);
            goto fail;
        }
        t->plan[j].name = basic_host->alloc(basic_cpu, len + 1, 0);
        if (t->plan[j].name == NULL) {
            st = GRM_ENOMEM;
            goto fail;
        }
        memcpy(t->plan[j].name, f->name, len + 1);
        t->plan[j].in_type = f->type;
        t->plan[j].out_type = f->type;
    }
    st = basic_plan_hash_mod(t, cfg);
    if (st == GRM_OK && t->seq) st = basic_plan_sequence(t, cfg);
    if (st == GRM_OK) st = basic_plan_output(t, cfg);
    if (st != GRM_OK) goto fail;
    *inst = t;
    return GRM_OK;

fail:
    basic_destroy(t);
    return st;
}

/* ---- the other ops ---- */

static grm_status basic_schema(void *inst, const grm_schema **schema)
{
    if (inst == NULL || schema == NULL) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: schema: inst and schema must "
                                  "not be NULL");
    }
    *schema = &((basic_inst *)inst)->schema;
    return GRM_OK;
}

/* The chunk of `rows` rows selected by keep from t->full. */
static const grm_chunk *basic_emit(basic_inst *t, int64_t rows)
{
    for (int32_t k = 0; k < t->nout; k++) t->cols[k] = t->full[t->out_src[k]];
    t->chunk.struct_size = (uint32_t)sizeof(grm_chunk);
    t->chunk.ncols = t->nout;
    t->chunk.rows = rows;
    t->chunk.cols = t->cols;
    return &t->chunk;
}

static grm_status basic_apply(void *inst, const grm_chunk *in, const grm_chunk **out)
{
    basic_inst *const t = inst;
    grm_status st;

    if (t == NULL || in == NULL || out == NULL) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: apply: inst, in and out must "
                                  "not be NULL");
    }
    *out = NULL;
    if (in->ncols != t->nin || in->rows < 0 || (in->ncols > 0 && in->cols == NULL)) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: apply: chunk has %d columns "
                                  "and %lld rows; the schema given to create has %d columns",
                                  in->ncols, (long long)in->rows, t->nin);
    }
    for (int32_t j = 0; j < t->nin; j++) {
        const grm_column *const c = &in->cols[j];
        const basic_colplan *const p = &t->plan[j];
        if (c->name == NULL || strcmp(c->name, p->name) != 0 || c->type != p->in_type
            || c->rows != in->rows) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: apply: chunk column %d is "
                                      "'%s' (%s, %lld rows); create's schema has '%s' (%s, "
                                      "%lld rows)", j, c->name != NULL ? c->name : "(null)",
                                      basic_type_name(c->type), (long long)c->rows, p->name,
                                      basic_type_name(p->in_type), (long long)in->rows);
        }
    }
    if (t->seq && t->flushed) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: apply after flush; the "
                                  "sequences were already emitted, create a new instance");
    }
    st = basic_rows(t, in);
    if (st != GRM_OK) return st;
    if (t->seq) return basic_seq_append(t, in->rows);
    *out = basic_emit(t, in->rows);
    return GRM_OK;
}

static grm_status basic_flush(void *inst, const grm_chunk **out)
{
    basic_inst *const t = inst;
    int64_t nkeys = 0;

    if (t == NULL || out == NULL) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: flush: inst and out must not "
                                  "be NULL");
    }
    *out = NULL;
    if (!t->seq || t->flushed) return GRM_OK;
    t->flushed = 1;
    const grm_status st = basic_seq_build(t, &nkeys);
    if (st != GRM_OK) return st;
    if (nkeys > 0) *out = basic_emit(t, nkeys);
    return GRM_OK;
}

static const grm_transform_ops basic_ops = {
    .struct_size = (uint32_t)sizeof(grm_transform_ops),
    .create = basic_create,
    .schema = basic_schema,
    .apply = basic_apply,
    .flush = basic_flush,
    .destroy = basic_destroy,
};

static const grm_plugin_info basic_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_TRANSFORM,
    .name = "transform-basic",
    .version = "1.0.0",
    .description = "fused row-wise hash/mod/keep and per-key sequence building "
                   "(RecIS Table 1 ops; sequences for HSTU)",
    .ops = &basic_ops,
    .params = basic_params,
    .config_size = sizeof(basic_config),
};

// grm/plugin.h declares only the entry's type; this prototype keeps
// -Wmissing-prototypes quiet.
GRM_PLUGIN_EXPORT const grm_plugin_info *const *grm_plugin_entry(const grm_host_api *host);

GRM_PLUGIN_EXPORT const grm_plugin_info *const *
grm_plugin_entry(const grm_host_api *host)
{
    static const grm_plugin_info *const list[] = { &basic_info, NULL };
    basic_host = host;
    return list;
}

/* plugins/transform-basic/plugin.c - glue for transform-basic: entry point, descriptor,
 * declared parameters, the grm_transform_ops table, and the checks that tie the config to
 * the input schema at create (RecIS §2.1 Feature Engine: hash, bucketize, mod, cross,
 * truncate/pad, copy; per-key sequences or per-event histories, MTGRBoost §2). The work is
 * in basic_cpu.c (the fused pass) and basic_ref.c. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basic.h"

static const grm_host_api *basic_host;   /* the only mutable global (STYLE.md §5.2) */

static const grm_device basic_cpu = { GRM_DEVICE_CPU, 0 };

static const grm_param_decl basic_params[] = {
    GRM_PARAM_DECL_STR_LIST(basic_config, hash, NULL,
                            "str, i64 or list_i64 columns replaced by the XXH3-64 hash (masked "
                            "to >= 0) of each value's bytes"),
    GRM_PARAM_DECL_INT(basic_config, hash_buckets, "0", GRM_PARAM_RANGE(0, (double)INT64_MAX),
                       "reduce hashes modulo this many buckets; 0 keeps the full 63-bit hash"),
    GRM_PARAM_DECL_STR_LIST(basic_config, mod, NULL,
                            "column:N entries: i64 or list_i64 column x replaced by "
                            "((x % N) + N) % N, N > 0"),
    GRM_PARAM_DECL_STR_LIST(basic_config, bucketize, NULL,
                            "column:b1/b2/... entries: i64 or f32 column (or list) x replaced by "
                            "the bucket index (number of ascending boundaries <= x), e.g. "
                            "rating:4 or age:18/25/35"),
    GRM_PARAM_DECL_STR_LIST(basic_config, keep, NULL,
                            "output only these columns, in this order (default: all)"),
    GRM_PARAM_DECL_STRING(basic_config, sequence_by, NULL,
                          "i64 key column; when set, rows are gathered into one row of lists per "
                          "key"),
    GRM_PARAM_DECL_STRING(basic_config, sequence_order, NULL,
                          "i64 column ordering a key's events (ties keep input order); empty: "
                          "input order"),
    GRM_PARAM_DECL_STR_LIST(basic_config, sequence_columns, NULL,
                            "i64 or f32 columns gathered into list_i64 or list_f32 columns per "
                            "key, e.g. item,ts"),
    GRM_PARAM_DECL_INT(basic_config, min_length, "1", GRM_PARAM_RANGE(1, (double)INT64_MAX),
                       "keys with fewer events are dropped (and counted in the log)"),
    GRM_PARAM_DECL_INT(basic_config, max_length, "0", GRM_PARAM_RANGE(0, (double)INT64_MAX),
                       "keep only the most recent N events of a key; 0: unlimited"),
    GRM_PARAM_DECL_STR_LIST(basic_config, cross, NULL,
                            "a*b:out[:N] entries: new i64 column out = XXH3-64 of the ids of a "
                            "and b (after their hash/bucketize/mod), masked to >= 0, % N; a list "
                            "crossed with a scalar gives a list"),
    GRM_PARAM_DECL_STR_LIST(basic_config, truncate, NULL,
                            "column:N[:recent|first] entries: keep at most N values per row of a "
                            "list column, the last N (recent, default) or the first N"),
    GRM_PARAM_DECL_STR_LIST(basic_config, pad, NULL,
                            "column:N[:value] entries: pad rows of a list column shorter than N "
                            "at the back with value (default 0), after truncate"),
    GRM_PARAM_DECL_STR_LIST(basic_config, copy, NULL,
                            "src:dst entries: new column dst (after the inputs) starts as a copy "
                            "of input column src, then takes its own transforms, e.g. rating:top "
                            "with bucketize = rating:4, top:5"),
    GRM_PARAM_DECL_STRING(basic_config, history_by, NULL,
                          "i64 key column; when set, every row gets lists of its key's most "
                          "recent events (history_columns) and all rows are emitted at flush"),
    GRM_PARAM_DECL_STRING(basic_config, history_order, NULL,
                          "i64 column ordering a key's events (ties keep input order); empty: "
                          "input order"),
    GRM_PARAM_DECL_STR_LIST(basic_config, history_columns, NULL,
                            "src:dst entries: new list_i64 / list_f32 column dst = the values of "
                            "i64 / f32 column src over the key's recent events, oldest first, "
                            "e.g. item:hist_item"),
    GRM_PARAM_DECL_INT(basic_config, history_length, "0", GRM_PARAM_RANGE(0, (double)INT64_MAX),
                       "most events per history list (required > 0 with history_by)"),
    GRM_PARAM_DECL_BOOL(basic_config, history_self, "true",
                        "true: a row's own event is the last of its history lists; false: "
                        "earlier events only (lists may be empty)"),
    GRM_PARAM_DECL_END
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
    basic_hist_free(t);
    if (t->histcols != NULL) {
        for (int32_t k = 0; k < t->nhist; k++) host->free(basic_cpu, t->histcols[k].name);
        host->free(basic_cpu, t->histcols);
    }
    host->free(basic_cpu, t->kept);
    if (t->plan != NULL) {
        for (int32_t j = 0; j < t->nplan; j++) {
            host->free(basic_cpu, t->plan[j].name);
            host->free(basic_cpu, t->plan[j].buf);
            host->free(basic_cpu, t->plan[j].len.offsets);
            host->free(basic_cpu, t->plan[j].len.values);
            free(t->plan[j].bounds);
        }
        host->free(basic_cpu, t->plan);
    }
    host->free(basic_cpu, t->comp_cols);
    host->free(basic_cpu, t->comp_start);
    host->free(basic_cpu, t->len_cols);
    if (t->full != t->row) host->free(basic_cpu, t->full);
    host->free(basic_cpu, t->row);
    host->free(basic_cpu, t->mid);
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

/* The columns defined so far (inputs, then crosses) as fields, typed before (hash errors)
 * or after stage 1. */
static void basic_plan_fields(const basic_inst *t, grm_field *f, int after)
{
    for (int32_t j = 0; j < t->nplan; j++) {
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
    *idx = basic_find(t->full_fields, t->nplan, name);
    if (*idx < 0) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: %s column '%s' is not in the "
                                  "input; available: %s", what, name,
                                  basic_available(avail, t->full_fields, t->nplan));
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
                              basic_available(avail, t->full_fields, t->nplan));
}

/* ---- create: tie the config to the input schema ---- */

/* Copy entry[0, len) into buf (of BASIC_NAME_MAX bytes); 0 when it is empty or too long. */
#define BASIC_NAME_MAX 256

static int basic_part(char *buf, const char *s, size_t len)
{
    if (len == 0 || len >= BASIC_NAME_MAX) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return 1;
}

/* Split a "src:dst" entry (exactly one colon, both names non-empty); 0 when malformed. */
static int basic_pair(const char *entry, char *src, char *dst)
{
    const char *const colon = strchr(entry, ':');
    if (colon == NULL || strchr(colon + 1, ':') != NULL) return 0;
    return basic_part(src, entry, (size_t)(colon - entry))
           && basic_part(dst, colon + 1, strlen(colon + 1));
}

/* 1 when some cross entry's output (a*b:out[:N]) is `name`; malformed entries are left to
 * basic_plan_cross. */
static int basic_cross_output(const basic_config *cfg, const char *name)
{
    for (int64_t i = 0; i < cfg->cross.n; i++) {
        const char *const star = strchr(cfg->cross.v[i], '*');
        const char *const c1 = star != NULL ? strchr(star, ':') : NULL;
        if (c1 == NULL) continue;
        const char *const c2 = strchr(c1 + 1, ':');
        const size_t len = c2 != NULL ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
        if (len == strlen(name) && strncmp(c1 + 1, name, len) == 0) return 1;
    }
    return 0;
}

/* copy = src:dst (step 0): plan columns after the inputs whose raw values are the input
 * column src's, under their own name; hash/bucketize/mod/... then treat dst like any
 * other column (e.g. two labels from one rating: copy = rating:top, bucketize = rating:4,
 * top:5). Untransformed, a copy points into the input chunk like its source. */
static grm_status basic_plan_copy(basic_inst *t, const basic_config *cfg)
{
    char avail[BASIC_AVAIL_MAX], src[BASIC_NAME_MAX], dst[BASIC_NAME_MAX];

    for (int64_t i = 0; i < cfg->copy.n; i++) {
        const char *const entry = cfg->copy.v[i];
        if (!basic_pair(entry, src, dst)) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: copy entry '%s': expected "
                                      "src:dst with two non-empty names, e.g. rating:top",
                                      entry);
        }
        basic_plan_fields(t, t->full_fields, 0);
        const int32_t idx = basic_find(t->full_fields, t->nin, src);
        if (idx < 0) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: copy entry '%s': source "
                                      "column '%s' is not in the input; available: %s", entry,
                                      src, basic_available(avail, t->full_fields, t->nin));
        }
        if (basic_find(t->full_fields, t->nplan, dst) >= 0 || basic_cross_output(cfg, dst)) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: copy entry '%s': column "
                                      "'%s' already exists (an input, copy or cross output); "
                                      "give the copy a new name", entry, dst);
        }
        basic_colplan *const p = &t->plan[t->nplan];
        const size_t len = strlen(dst);
        p->name = basic_host->alloc(basic_cpu, len + 1, 0);
        if (p->name == NULL) return GRM_ENOMEM;
        memcpy(p->name, dst, len + 1);
        p->in_type = p->out_type = t->plan[idx].in_type;
        p->src = idx;
        p->cross_a = p->cross_b = -1;
        t->nplan++;
        t->ncopy++;
    }
    return GRM_OK;
}

static grm_status basic_plan_hash_mod(basic_inst *t, const basic_config *cfg)
{
    grm_status st;
    int32_t idx;

    for (int64_t i = 0; i < cfg->hash.n; i++) {
        st = basic_column(t, "hash", cfg->hash.v[i], 0, &idx);
        if (st != GRM_OK) return st;
        basic_colplan *const p = &t->plan[idx];
        if (p->in_type != GRM_COL_STR && p->in_type != GRM_COL_I64
            && p->in_type != GRM_COL_LIST_I64) {
            return basic_type_error(t, "hash", idx, p->in_type, "str or i64, or list_i64");
        }
        if (p->hash) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: hash lists column '%s' "
                                      "twice; list it once", p->name);
        }
        p->hash = 1;
        p->out_type = p->in_type == GRM_COL_LIST_I64 ? GRM_COL_LIST_I64 : GRM_COL_I64;
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
        if (p->in_type == GRM_COL_STR)
            return basic_type_error(t, "bucketize", idx, p->in_type,
                                    "i64 or f32 (or a list of them)");
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
        p->out_type = p->in_type == GRM_COL_I64 || p->in_type == GRM_COL_F32 ? GRM_COL_I64
                                                                             : GRM_COL_LIST_I64;
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
        if (p->out_type != GRM_COL_I64 && p->out_type != GRM_COL_LIST_I64)
            return basic_type_error(t, "mod", idx, p->out_type, "i64 or list_i64");
        if (p->mod > 0) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: mod lists column '%s' "
                                      "twice; list it once", p->name);
        }
        p->mod = (int64_t)n;
    }
    return GRM_OK;
}

/* The integer of s[0, len) into *n; 0 when it is not one (no sign, spaces or junk). */
static int basic_count(const char *s, size_t len, int64_t *n)
{
    char buf[32];
    char *end = NULL;
    if (len == 0 || len >= sizeof(buf) || s[0] == ' ' || s[0] == '+') return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    const long long v = strtoll(buf, &end, 10);
    if (*end != '\0' || errno == ERANGE) return 0;
    *n = (int64_t)v;
    return 1;
}

/* cross = a*b:out[:N]: a new column after the inputs, reading stage-1 ids of a and b. */
static grm_status basic_plan_cross(basic_inst *t, const basic_config *cfg)
{
    char a[BASIC_NAME_MAX], b[BASIC_NAME_MAX], out[BASIC_NAME_MAX];
    grm_status st;

    for (int64_t i = 0; i < cfg->cross.n; i++) {
        const char *const entry = cfg->cross.v[i];
        const char *const star = strchr(entry, '*');
        const char *const c1 = star != NULL ? strchr(star, ':') : NULL;
        const char *const c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        const char *const oend = c2 != NULL ? c2 : entry + strlen(entry);
        int64_t n = 0;
        int32_t ia, ib;
        if (star == NULL || c1 == NULL || !basic_part(a, entry, (size_t)(star - entry))
            || !basic_part(b, star + 1, (size_t)(c1 - star - 1))
            || !basic_part(out, c1 + 1, (size_t)(oend - c1 - 1))) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: cross entry '%s': expected "
                                      "a*b:out or a*b:out:N, e.g. user*item:user_item:1000000",
                                      entry);
        }
        if (c2 != NULL && (!basic_count(c2 + 1, strlen(c2 + 1), &n) || n <= 0)) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: cross entry '%s': N = '%s' "
                                      "must be an integer > 0", entry, c2 + 1);
        }
        st = basic_column(t, "cross", a, 1, &ia);
        if (st == GRM_OK) st = basic_column(t, "cross", b, 1, &ib);
        if (st != GRM_OK) return st;
        const int32_t ta = t->plan[ia].out_type, tb = t->plan[ib].out_type;
        for (int k = 0; k < 2; k++) {
            const int32_t ty = k == 0 ? ta : tb;
            if (ty != GRM_COL_I64 && ty != GRM_COL_LIST_I64) {
                return basic_host->errorf(GRM_EINVAL, "transform-basic: cross entry '%s': "
                                          "column '%s' is %s; cross needs i64 or list_i64 ids "
                                          "(hash or bucketize it first)", entry, k == 0 ? a : b,
                                          basic_type_name(ty));
            }
        }
        if (ta == GRM_COL_LIST_I64 && tb == GRM_COL_LIST_I64) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: cross entry '%s': '%s' and "
                                      "'%s' are both lists; cross a list with a scalar column "
                                      "(each list value with its row's value)", entry, a, b);
        }
        basic_plan_fields(t, t->full_fields, 1);
        if (basic_find(t->full_fields, t->nplan, out) >= 0) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: cross entry '%s': column "
                                      "'%s' already exists; give the cross a new name", entry,
                                      out);
        }
        basic_colplan *const p = &t->plan[t->nplan];
        const size_t len = strlen(out);
        p->name = basic_host->alloc(basic_cpu, len + 1, 0);
        if (p->name == NULL) return GRM_ENOMEM;
        memcpy(p->name, out, len + 1);
        p->in_type = p->out_type = ta == GRM_COL_LIST_I64 || tb == GRM_COL_LIST_I64
                                       ? GRM_COL_LIST_I64 : GRM_COL_I64;
        p->src = -1;
        p->cross_a = ia;
        p->cross_b = ib;
        p->cross_n = n;
        t->plan[ia].is_source = 1;
        t->plan[ib].is_source = 1;
        t->nplan++;
    }
    return GRM_OK;
}

/* The truncate (is_pad 0) or pad (is_pad 1) entries: the lenop of a list column of the
 * row-wise output, or in sequence mode of a sequence column's emitted lists. */
static grm_status basic_plan_len(basic_inst *t, const grm_str_list *list, int is_pad)
{
    const char *const what = is_pad ? "pad" : "truncate";
    char name[BASIC_NAME_MAX];

    for (int64_t i = 0; i < list->n; i++) {
        const char *const entry = list->v[i];
        const char *const c1 = strchr(entry, ':');
        const char *const c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        const char *const nend = c2 != NULL ? c2 : entry + strlen(entry);
        int64_t n = 0;
        if (c1 == NULL || !basic_part(name, entry, (size_t)(c1 - entry))
            || !basic_count(c1 + 1, (size_t)(nend - c1 - 1), &n) || n <= 0) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: %s entry '%s': expected "
                                      "column:N%s with an integer N > 0, e.g. %s", what, entry,
                                      is_pad ? "[:value]" : "[:recent|first]",
                                      is_pad ? "hist:50:0" : "hist:50:recent");
        }
        basic_lenop *l = NULL;
        int32_t type, *has_len;
        if (t->seq) {
            int32_t k = 0;
            while (k < t->nseq && strcmp(t->plan[t->seqcols[k].src].name, name) != 0) k++;
            if (k == t->nseq) {
                return basic_host->errorf(GRM_EINVAL, "transform-basic: %s column '%s' is not "
                                          "a sequence column; with sequence_by, truncate and "
                                          "pad apply to the lists of sequence_columns", what,
                                          name);
            }
            l = &t->seqcols[k].len;
            has_len = &t->seqcols[k].has_len;
            type = t->seqcols[k].type == GRM_COL_I64 ? GRM_COL_LIST_I64 : GRM_COL_LIST_F32;
        } else {
            int32_t idx;
            const grm_status st = basic_column(t, what, name, 1, &idx);
            if (st != GRM_OK) return st;
            type = t->plan[idx].out_type;
            if (type != GRM_COL_LIST_I64 && type != GRM_COL_LIST_F32) {
                return basic_type_error(t, what, idx, type, "list_i64 or list_f32");
            }
            l = &t->plan[idx].len;
            has_len = &t->plan[idx].has_len;
        }
        if (is_pad ? l->pad > 0 : l->trunc > 0) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: %s lists column '%s' "
                                      "twice; list it once", what, name);
        }
        const char *const opt = c2 != NULL ? c2 + 1 : NULL;
        if (!is_pad) {
            l->trunc = n;
            if (opt != NULL && strcmp(opt, "first") == 0) {
                l->first = 1;
            } else if (opt != NULL && strcmp(opt, "recent") != 0) {
                return basic_host->errorf(GRM_EINVAL, "transform-basic: truncate entry '%s': "
                                          "policy '%s' is not recent (keep the last N) or "
                                          "first (keep the first N)", entry, opt);
            }
        } else {
            l->pad = n;
            if (opt != NULL && type == GRM_COL_LIST_I64
                && !basic_count(opt, strlen(opt), &l->pad_i64)) {
                return basic_host->errorf(GRM_EINVAL, "transform-basic: pad entry '%s': value "
                                          "'%s' is not an integer (column '%s' is list_i64)",
                                          entry, opt, name);
            }
            if (opt != NULL && type == GRM_COL_LIST_F32) {
                char *end = NULL;
                errno = 0;
                const double v = strtod(opt, &end);
                if (end == opt || *end != '\0' || errno == ERANGE || v != v) {
                    return basic_host->errorf(GRM_EINVAL, "transform-basic: pad entry '%s': "
                                              "value '%s' is not a number", entry, opt);
                }
                l->pad_f32 = (float)v;
            }
        }
        *has_len = 1;
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

/* history_by (a third mode beside plain and sequence_by): every row keeps its columns and
 * gets, per history_columns entry, the list of src's values over its key's most recent
 * history_length events at or before it in (order, arrival) order: the historical
 * sequence T_hst of each ranking sample (MTGRBoost §2), the candidate last. */
static grm_status basic_plan_history(basic_inst *t, const basic_config *cfg)
{
    char src[BASIC_NAME_MAX], dst[BASIC_NAME_MAX];
    grm_status st;
    int32_t idx;

    st = basic_column(t, "history_by", cfg->history_by, 1, &t->key_src);
    if (st != GRM_OK) return st;
    if (t->plan[t->key_src].out_type != GRM_COL_I64) {
        return basic_type_error(t, "history_by", t->key_src, t->plan[t->key_src].out_type,
                                "i64 (hash a str key first with hash = ...)");
    }
    t->order_src = -1;
    if (basic_set(cfg->history_order)) {
        st = basic_column(t, "history_order", cfg->history_order, 1, &t->order_src);
        if (st != GRM_OK) return st;
        if (t->plan[t->order_src].out_type != GRM_COL_I64) {
            return basic_type_error(t, "history_order", t->order_src,
                                    t->plan[t->order_src].out_type, "i64");
        }
    }
    if (cfg->history_columns.n <= 0) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: history_by = %s but "
                                  "history_columns is empty; list src:dst entries, e.g. "
                                  "item:hist_item", cfg->history_by);
    }
    if (cfg->history_length <= 0) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: history_by = %s needs "
                                  "history_length > 0 (events per list), e.g. 200",
                                  cfg->history_by);
    }
    if (cfg->min_length != 1 || cfg->max_length != 0) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: min_length and max_length "
                                  "apply to sequence_by; with history_by every row is kept "
                                  "and history_length bounds its lists");
    }
    t->hist_length = cfg->history_length;
    t->hist_self = cfg->history_self != 0;
    t->nhist = (int32_t)cfg->history_columns.n;
    st = basic_calloc(&t->histcols, (size_t)t->nhist, sizeof(*t->histcols));
    if (st != GRM_OK) return st;
    for (int32_t k = 0; k < t->nhist; k++) {
        const char *const entry = cfg->history_columns.v[k];
        if (!basic_pair(entry, src, dst)) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: history_columns entry "
                                      "'%s': expected src:dst with two non-empty names, e.g. "
                                      "item:hist_item", entry);
        }
        st = basic_column(t, "history_columns", src, 1, &idx);
        if (st != GRM_OK) return st;
        const int32_t type = t->plan[idx].out_type;
        if (type != GRM_COL_I64 && type != GRM_COL_F32) {
            return basic_type_error(t, "history_columns", idx, type, "i64 or f32");
        }
        int taken = basic_find(t->full_fields, t->nplan, dst) >= 0;
        for (int32_t m = 0; m < k; m++) taken = taken || strcmp(t->histcols[m].name, dst) == 0;
        if (taken) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: history_columns entry "
                                      "'%s': column '%s' already exists (a column or an "
                                      "earlier history list); give the list a new name",
                                      entry, dst);
        }
        basic_histcol *const h = &t->histcols[k];
        const size_t len = strlen(dst);
        h->name = basic_host->alloc(basic_cpu, len + 1, 0);
        if (h->name == NULL) return GRM_ENOMEM;
        memcpy(h->name, dst, len + 1);
        h->src = idx;
        h->type = type;
    }
    return basic_calloc(&t->kept, (size_t)t->nplan, sizeof(*t->kept));
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
    } else if (t->hist) {
        t->nfull = t->nplan + t->nhist;
        basic_plan_fields(t, t->full_fields, 1);
        for (int32_t k = 0; k < t->nhist; k++) {
            t->full_fields[t->nplan + k].name = t->histcols[k].name;
            t->full_fields[t->nplan + k].type = t->histcols[k].type == GRM_COL_I64
                                                    ? GRM_COL_LIST_I64 : GRM_COL_LIST_F32;
            t->full_fields[t->nplan + k].reserved = 0;
        }
        st = basic_calloc(&t->full, (size_t)t->nfull, sizeof(*t->full));
        if (st != GRM_OK) return st;
    } else {
        t->nfull = t->nplan;
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
        // History mode buffers only what it emits or reads.
        if (t->hist && idx < t->nplan) t->kept[idx].need = 1;
    }
    if (t->hist) {
        t->kept[t->key_src].need = 1;
        if (t->order_src >= 0) t->kept[t->order_src].need = 1;
        for (int32_t k = 0; k < t->nhist; k++) t->kept[t->histcols[k].src].need = 1;
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
    if (!basic_set(cfg->history_by)
        && (basic_set(cfg->history_order) || cfg->history_columns.n > 0
            || cfg->history_length != 0)) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: history_order, "
                                  "history_columns or history_length is set but history_by "
                                  "is not; set history_by to the key column, e.g. user");
    }
    if (basic_set(cfg->history_by) && basic_set(cfg->sequence_by)) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: history_by = %s and "
                                  "sequence_by = %s are both set; choose one (sequence_by: "
                                  "one row of lists per key; history_by: every row with its "
                                  "key's recent events)", cfg->history_by, cfg->sequence_by);
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
    t->nplan = t->nin;   // copies, then crosses, are appended by basic_plan_copy/_cross
    t->hash_buckets = cfg->hash_buckets;
    t->seq = basic_set(cfg->sequence_by);
    t->hist = basic_set(cfg->history_by);
    const size_t nmax = (size_t)t->nin + (size_t)cfg->copy.n + (size_t)cfg->cross.n;
    st = basic_calloc(&t->plan, nmax, sizeof(*t->plan));
    if (st == GRM_OK) st = basic_calloc(&t->row, nmax, sizeof(*t->row));
    if (st == GRM_OK) st = basic_calloc(&t->mid, nmax, sizeof(*t->mid));
    // Sized for the largest use: all columns (and the history lists), or key + sequence
    // columns.
    if (st == GRM_OK) {
        st = basic_calloc(&t->full_fields, nmax + (size_t)cfg->history_columns.n + 1,
                          sizeof(*t->full_fields));
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
        t->plan[j].src = j;
        t->plan[j].cross_a = t->plan[j].cross_b = -1;
    }
    // The order of the pass: copy, hash | bucketize, mod, cross, truncate, pad (row-wise),
    // then sequence building, whose lists truncate and pad may name instead, or the
    // per-event history lists, then keep.
    st = basic_plan_copy(t, cfg);
    if (st == GRM_OK) st = basic_plan_hash_mod(t, cfg);
    if (st == GRM_OK) st = basic_plan_cross(t, cfg);
    if (st == GRM_OK && t->seq) st = basic_plan_sequence(t, cfg);
    if (st == GRM_OK && t->hist) st = basic_plan_history(t, cfg);
    if (st == GRM_OK) st = basic_plan_len(t, &cfg->truncate, 0);
    if (st == GRM_OK) st = basic_plan_len(t, &cfg->pad, 1);
    if (st == GRM_OK) st = basic_plan_output(t, cfg);
    if (st == GRM_OK && basic_fuse_plan(t) != GRM_OK) {
        st = basic_host->errorf(GRM_ENOMEM, "transform-basic: create: out of memory");
    }
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
            || c->rows != in->rows || (c->type >= GRM_COL_STR && c->offsets == NULL)) {
            return basic_host->errorf(GRM_EINVAL, "transform-basic: apply: chunk column %d is "
                                      "'%s' (%s, %lld rows); create's schema has '%s' (%s, "
                                      "%lld rows)", j, c->name != NULL ? c->name : "(null)",
                                      basic_type_name(c->type), (long long)c->rows, p->name,
                                      basic_type_name(p->in_type), (long long)in->rows);
        }
    }
    if ((t->seq || t->hist) && t->flushed) {
        return basic_host->errorf(GRM_EINVAL, "transform-basic: apply after flush; the %s "
                                  "were already emitted, create a new instance",
                                  t->seq ? "sequences" : "history rows");
    }
    st = basic_rows(t, in);
    if (st != GRM_OK) return st;
    if (t->seq) return basic_seq_append(t, in->rows);
    if (t->hist) return basic_hist_append(t, in->rows);
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
    if ((!t->seq && !t->hist) || t->flushed) return GRM_OK;
    t->flushed = 1;
    if (t->hist) {
        const grm_status st = basic_hist_build(t);
        if (st != GRM_OK) return st;
        if (t->nrows > 0) *out = basic_emit(t, t->nrows);
        return GRM_OK;
    }
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
    .version = "1.1.0",
    .description = "feature engine: copy, hash, bucketize, mod, cross, truncate/pad fused "
                   "into one multi-threaded pass; per-key sequences or per-event histories "
                   "(RecIS §2.1)",
    .ops = &basic_ops,
    .params = basic_params,
    .config_size = sizeof(basic_config),
};

// grm/plugin.h declares only the entry's type; this prototype keeps
// -Wmissing-prototypes quiet.
GRM_PLUGIN_DEFINE(basic_host, &basic_info);

/* core/data.c - the input side: reader -> transforms -> for retrieval one row per user
 * holding its time-ordered items, then the leave-one-out split used by the published
 * full-ranking protocols (last item: test, second last: validation, the rest: training),
 * the training examples and the item catalog; for ranking one sample per row, held out by
 * a seeded hash. grm__dataset_build reads it all before training (every rank, or each its
 * routed share); grm__stream reads a ranking input piece by piece beside training. */
#include "pipeline.h"
#include "route.h"

#include <grm/rng.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct vec64 {
    int64_t *v;
    int64_t n, cap;
} vec64;

static grm_status vec_push(vec64 *a, const int64_t *x, int64_t n)
{
    if (a->n + n > a->cap) {
        int64_t cap = a->cap ? a->cap : 1024;
        while (cap < a->n + n) cap *= 2;
        int64_t *nv = realloc(a->v, (size_t)cap * sizeof *nv);
        if (!nv) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
        a->v = nv;
        a->cap = cap;
    }
    memcpy(a->v + a->n, x, (size_t)n * sizeof *x);
    a->n += n;
    return GRM_OK;
}

typedef struct vecf {
    float *v;
    int64_t n, cap;
} vecf;

static grm_status vecf_push(vecf *a, float x)
{
    if (a->n == a->cap) {
        int64_t cap = a->cap ? a->cap * 2 : 1024;
        float *nv = realloc(a->v, (size_t)cap * sizeof *nv);
        if (!nv) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return GRM_OK;
}

typedef struct collector {
    const grm__pipeline *p;
    vec64 users, offsets, items, times;
    int want_times;
    /* ranking */
    vec64 *fofs, *fids;     /* [nfeatures] */
    vecf labels;
    vec64 groups;
    int want_groups;        /* -1: not decided yet (first chunk decides) */
} collector;

/* Timestamps are read: of a retrieval sequence, or of a ranking row's token list. */
static int wants_times(const grm__pipeline *p)
{
    int ranking = p->set.task == GRM__TASK_RANKING;
    return p->set.time_column[0] != '\0' && (!ranking || p->seq_feature >= 0);
}

static grm_status collector_init(collector *co, const grm__pipeline *p)
{
    *co = (collector){ .p = p, .want_times = wants_times(p), .want_groups = -1 };
    co->fofs = calloc((size_t)p->nfeatures + 1, sizeof *co->fofs);
    co->fids = calloc((size_t)p->nfeatures + 1, sizeof *co->fids);
    if (!co->fofs || !co->fids) {
        free(co->fofs);
        free(co->fids);
        co->fofs = co->fids = NULL;
        return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    }
    return GRM_OK;
}

static void collector_fini(collector *co)
{
    free(co->users.v);
    free(co->offsets.v);
    free(co->items.v);
    free(co->times.v);
    for (int32_t i = 0; co->fofs && i < co->p->nfeatures; i++) {
        free(co->fofs[i].v);
        free(co->fids[i].v);
    }
    free(co->fofs);
    free(co->fids);
    free(co->labels.v);
    free(co->groups.v);
    memset(co, 0, sizeof *co);
}

static const grm_column *find_col(const grm_chunk *c, const char *name)
{
    for (int32_t i = 0; i < c->ncols; i++)
        if (strcmp(c->cols[i].name, name) == 0) return &c->cols[i];
    return NULL;
}

/* "a, b, c" into out [cap] (cut short to fit): the n names at `name0` and every `stride`
 * bytes after it, e.g. &cols[0].name and sizeof cols[0]. */
static void join_names(char *out, size_t cap, const char *const *name0, size_t stride,
                       int32_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (int32_t i = 0; i < n && len + 64 < cap; i++) {
        const char *nm = *(const char *const *)((const char *)name0 + (size_t)i * stride);
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? ", " : "", nm);
    }
}

/* The type of column `name` among n records that begin `const char *name; int32_t type`
 * (grm_field of a schema, grm_column of a chunk), `stride` bytes apart from `rec0`; -1 when
 * there is none. */
static int32_t col_type(const void *rec0, size_t stride, int32_t n, const char *name)
{
    _Static_assert(offsetof(grm_field, type) == offsetof(grm_column, type)
                   && offsetof(grm_field, name) == offsetof(grm_column, name),
                   "grm_field and grm_column begin alike");
    for (int32_t i = 0; i < n; i++) {
        const grm_field *f = (const void *)((const char *)rec0 + (size_t)i * stride);
        if (strcmp(f->name, name) == 0) return f->type;
    }
    return -1;
}

/* Where [section] key was given: its file and line, its section's when defaulted. */
static void key_at(const grm__pipeline *p, const char *section, const char *key,
                   const char **file, int *line)
{
    const grm__section *sec = grm__config_section(p->cfg, section);
    const grm__kv *kv = sec ? grm__section_kv(sec, key) : NULL;
    *file = kv ? kv->file : sec ? sec->file : p->cfg->path;
    *line = kv ? kv->line : sec ? sec->line : 0;
}

/* "file:line: [section] key = name: the data ... has no TYPE column of that name (columns:
 * ...); fix", at the key's line in the INI (key_at). */
static grm_status col_error(const grm__pipeline *p, const void *rec0, size_t stride,
                            int32_t n, const char *section, const char *key, const char *name,
                            const char *type)
{
    char have[512];
    join_names(have, sizeof have, n ? (const char *const *)rec0 : NULL, stride, n);
    const char *file;
    int line;
    key_at(p, section, key, &file, &line);
    int has = col_type(rec0, stride, n, name) >= 0;
    return grm_errorf(GRM_EINVAL, "%s:%d: [%s] %s = %s: the data after the last transform "
                      "has no %s column of that name%s (columns: %s); %s", file, line,
                      section, key, name, type, has ? " (it has one of another type)" : "",
                      have, strcmp(key, "sequence_column") == 0
                      ? "build sequences with a transform (sequence_by) or fix the name"
                      : "fix the name, or produce the column with a transform");
}

/* Every column the settings and features name, with the type the trainer reads, among the
 * n records at rec0 (a schema's fields or a chunk's columns): checked on the schema when
 * the input opens, so `grmhost check` finds what `train` would at its first chunk. */
static grm_status check_columns(const grm__pipeline *p, const void *rec0, size_t stride,
                                int32_t n, int want_times, int want_groups)
{
    const grm__settings *s = &p->set;
#define COL_IS(name, t1, t2)                                                              \
    (col_type(rec0, stride, n, (name)) == (t1) || col_type(rec0, stride, n, (name)) == (t2))
    if (s->task != GRM__TASK_RANKING) {
        if (!COL_IS(s->user_column, GRM_COL_I64, GRM_COL_I64))
            return col_error(p, rec0, stride, n, "train", "user_column", s->user_column, "I64");
        if (!COL_IS(s->sequence_column, GRM_COL_LIST_I64, GRM_COL_LIST_I64))
            return col_error(p, rec0, stride, n, "train", "sequence_column",
                             s->sequence_column, "LIST_I64");
        if (want_times && !COL_IS(s->time_column, GRM_COL_LIST_I64, GRM_COL_LIST_I64))
            return col_error(p, rec0, stride, n, "train", "time_column", s->time_column,
                             "LIST_I64");
        return GRM_OK;
    }
    if (want_groups && !COL_IS(s->user_column, GRM_COL_I64, GRM_COL_I64))
        return col_error(p, rec0, stride, n, "train", "user_column", s->user_column, "I64");
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const grm__feature *f = &p->features[i];
        if (!COL_IS(f->source, GRM_COL_I64, GRM_COL_LIST_I64)) {
            char section[300];
            snprintf(section, sizeof section, "feature.%s", f->name);
            return col_error(p, rec0, stride, n, section, "source", f->source,
                             "I64 or LIST_I64");
        }
    }
    if (want_times && !COL_IS(s->time_column, GRM_COL_LIST_I64, GRM_COL_LIST_I64))
        return col_error(p, rec0, stride, n, "train", "time_column", s->time_column,
                         "LIST_I64");
    for (int64_t k = 0; k < s->label_columns.n; k++)
        if (!COL_IS(s->label_columns.v[k], GRM_COL_I64, GRM_COL_F32))
            return col_error(p, rec0, stride, n, "train", "label_columns",
                             s->label_columns.v[k], "I64 or F32");
#undef COL_IS
    return GRM_OK;
}

/* A chunk's columns, as check_columns sees them. */
static grm_status check_chunk(const collector *co, const grm_chunk *c)
{
    return check_columns(co->p, c->cols, sizeof *c->cols, c->ncols, co->want_times,
                         co->want_groups > 0);
}

/* Append one chunk of sequence rows. */
static grm_status collect(collector *co, const grm_chunk *c)
{
    const grm__settings *s = &co->p->set;
    const grm_column *u = find_col(c, s->user_column);
    const grm_column *seq = find_col(c, s->sequence_column);
    const grm_column *ts = co->want_times ? find_col(c, s->time_column) : NULL;
    grm_status st = check_chunk(co, c);
    if (st != GRM_OK) return st;
    const int64_t *uv = u->values, *sv = seq->values;
    for (int64_t r = 0; r < c->rows; r++) {
        int64_t b = seq->offsets[r], e = seq->offsets[r + 1];
        if (e - b <= 0) continue;
        if (ts && ts->offsets[r + 1] - ts->offsets[r] != e - b)
            return grm_errorf(GRM_EFORMAT, "%s: user %lld has %lld items but %lld timestamps",
                              co->p->cfg->path, (long long)uv[r], (long long)(e - b),
                              (long long)(ts->offsets[r + 1] - ts->offsets[r]));
        int64_t off = co->items.n;
        if ((st = vec_push(&co->users, &uv[r], 1)) != GRM_OK
            || (st = vec_push(&co->offsets, &off, 1)) != GRM_OK
            || (st = vec_push(&co->items, sv + b, e - b)) != GRM_OK)
            return st;
        if (ts && (st = vec_push(&co->times, (const int64_t *)ts->values + ts->offsets[r],
                                 e - b)) != GRM_OK)
            return st;
    }
    return GRM_OK;
}

/* Append one chunk of ranking samples: every feature's column, the labels, the group. */
static grm_status collect_ranking(collector *co, const grm_chunk *c)
{
    const grm__pipeline *p = co->p;
    const grm__settings *s = &p->set;
    grm_status st;
    const grm_column *g = find_col(c, s->user_column);
    if (co->want_groups < 0) co->want_groups = g && g->type == GRM_COL_I64;
    if ((st = check_chunk(co, c)) != GRM_OK) return st;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const grm__feature *f = &p->features[i];
        const grm_column *col = find_col(c, f->source);
        const int64_t *v = col->values;
        for (int64_t r = 0; r < c->rows; r++) {
            int64_t b = col->type == GRM_COL_I64 ? r : col->offsets[r];
            int64_t e = col->type == GRM_COL_I64 ? r + 1 : col->offsets[r + 1];
            if ((st = vec_push(&co->fids[i], v + b, e - b)) != GRM_OK
                || (st = vec_push(&co->fofs[i], &co->fids[i].n, 1)) != GRM_OK)
                return st;
        }
    }
    if (co->want_times) {   /* beside the token list, value for value */
        const grm__feature *f = &p->features[p->seq_feature];
        const grm_column *ts = find_col(c, s->time_column), *col = find_col(c, f->source);
        for (int64_t r = 0; r < c->rows; r++) {
            int64_t n = ts->offsets[r + 1] - ts->offsets[r];
            int64_t m = col->type == GRM_COL_I64 ? 1 : col->offsets[r + 1] - col->offsets[r];
            if (n != m)
                return grm_errorf(GRM_EFORMAT, "%s: a row's [feature.%s] list '%s' has %lld "
                                  "ids but time_column '%s' %lld timestamps; they must pair "
                                  "up", p->cfg->path, f->name, f->source, (long long)m,
                                  s->time_column, (long long)n);
            if ((st = vec_push(&co->times, (const int64_t *)ts->values + ts->offsets[r], n))
                != GRM_OK)
                return st;
        }
    }
    for (int64_t r = 0; r < c->rows; r++) {
        for (int64_t k = 0; k < s->label_columns.n; k++) {
            const grm_column *l = find_col(c, s->label_columns.v[k]);
            float y = l->type == GRM_COL_I64 ? (float)((const int64_t *)l->values)[r]
                                             : ((const float *)l->values)[r];
            if (!(y >= 0.0f && y <= 1.0f)) {
                const char *file;
                int line;
                key_at(p, "train", "label_columns", &file, &line);
                return grm_errorf(GRM_EFORMAT, "%s:%d: [train] label_columns: column '%s' "
                                  "holds %g; labels must lie in [0, 1] (bucketize a rating, "
                                  "e.g. rating:4)", file, line, s->label_columns.v[k],
                                  (double)y);
            }
            if ((st = vecf_push(&co->labels, y)) != GRM_OK) return st;
        }
        if (co->want_groups
            && (st = vec_push(&co->groups, (const int64_t *)g->values + r, 1)) != GRM_OK)
            return st;
    }
    return GRM_OK;
}

/* Push a chunk through transforms [from, n) and into the collector. */
static grm_status push(grm__pipeline *p, collector *co, int32_t from, const grm_chunk *c)
{
    for (int32_t i = from; c && i < p->ntransforms; i++) {
        const grm_transform_ops *ops = p->transforms[i].plugin->info->ops;
        const grm_chunk *out = NULL;
        grm_status st = ops->apply(p->transforms[i].inst, c, &out);
        if (st != GRM_OK) {
            grm_error_prefix("[%s] %s: ", p->transforms[i].label,
                             p->transforms[i].plugin->info->name);
            return st;
        }
        c = out;
    }
    if (!c) return GRM_OK;
    return p->set.task == GRM__TASK_RANKING ? collect_ranking(co, c) : collect(co, c);
}

static grm_status finish(grm__pipeline *p, collector *co, grm__dataset *ds)
{
    int64_t U = co->users.n, total = co->items.n;
    ds->nusers = U;
    ds->users = co->users.v;
    ds->items = co->items.v;
    ds->times = co->want_times ? co->times.v : NULL;
    co->users.v = co->items.v = NULL;
    if (!co->want_times) free(co->times.v);
    co->times.v = NULL;
    ds->offsets = malloc((size_t)(U + 1) * sizeof *ds->offsets);
    ds->train_end = malloc((size_t)(U ? U : 1) * sizeof *ds->train_end);
    ds->has_eval = calloc((size_t)(U ? U : 1), sizeof *ds->has_eval);
    if (!ds->offsets || !ds->train_end || !ds->has_eval)
        return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    if (U) memcpy(ds->offsets, co->offsets.v, (size_t)U * sizeof *ds->offsets);
    ds->offsets[U] = total;

    /* leave-one-out; users with fewer than 3 items only train */
    int64_t nex = 0;
    ds->fit_valid = p->set.train_on_valid;
    for (int64_t u = 0; u < U; u++) {
        int64_t b = ds->offsets[u], n = ds->offsets[u + 1] - b;
        ds->has_eval[u] = n >= 3;
        ds->train_end[u] = n >= 3 ? b + n - 2 : b + n;
        const int64_t targets = grm__fit_end(ds, u) - b - 1;
        nex += targets > 0 ? targets : 0;
        if (ds->users[u] > ds->max_user) ds->max_user = ds->users[u];
    }
    ds->ex_user = malloc((size_t)(nex ? nex : 1) * sizeof *ds->ex_user);
    ds->ex_pos = malloc((size_t)(nex ? nex : 1) * sizeof *ds->ex_pos);
    if (!ds->ex_user || !ds->ex_pos) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    ds->nexamples = 0;
    for (int64_t u = 0; u < U; u++)
        for (int64_t t = ds->offsets[u] + 1; t < grm__fit_end(ds, u); t++) {
            ds->ex_user[ds->nexamples] = u;
            ds->ex_pos[ds->nexamples++] = t;
        }

    /* catalog: every distinct item of the data; popularity from the training part */
    int64_t *sorted = malloc((size_t)(total ? total : 1) * sizeof *sorted);
    if (!sorted) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    memcpy(sorted, ds->items, (size_t)total * sizeof *sorted);
    qsort(sorted, (size_t)total, sizeof *sorted, grm__cmp_i64);
    int64_t C = 0;
    for (int64_t i = 0; i < total; i++)
        if (i == 0 || sorted[i] != sorted[i - 1]) sorted[C++] = sorted[i];
    ds->ncatalog = C;
    ds->catalog_ids = sorted;
    ds->catalog_counts = calloc((size_t)(C ? C : 1), sizeof *ds->catalog_counts);
    if (!ds->catalog_counts) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    for (int64_t u = 0; u < U; u++)
        for (int64_t t = ds->offsets[u]; t < grm__fit_end(ds, u); t++) {
            int64_t *hit = bsearch(&ds->items[t], sorted, (size_t)C, sizeof *sorted,
                                   grm__cmp_i64);
            ds->catalog_counts[hit - sorted]++;
        }
    ds->max_item = C ? sorted[C - 1] : 0;
    if (C && sorted[0] < 0)
        return grm_errorf(GRM_EFORMAT, "%s: item id %lld is negative; ids must be >= 0 (hash "
                          "or shift them in a transform)", p->cfg->path, (long long)sorted[0]);
    return GRM_OK;
}

/* The input stages are needed only while the dataset is built. */
static void close_input(grm__pipeline *p)
{
    const grm_reader_ops *rops = p->reader.plugin->info->ops;
    rops->close(p->reader.inst);
    p->reader.inst = NULL;
    for (int32_t i = 0; i < p->ntransforms; i++) {
        const grm_transform_ops *tops = p->transforms[i].plugin->info->ops;
        tops->destroy(p->transforms[i].inst);
        p->transforms[i].inst = NULL;
    }
}

/* A pure function of a ranking row's content: its ids, labels and group. */
static uint64_t row_key(const grm__dataset *ds, int64_t r)
{
    uint64_t h = 0x243f6a8885a308d3ULL;
    for (int32_t i = 0; i < ds->nfeat; i++) {
        h = grm_mix64(h + (uint64_t)i);
        for (int64_t j = ds->fofs[i][r]; j < ds->fofs[i][r + 1]; j++)
            h = grm_mix64(h ^ (uint64_t)ds->fids[i][j]);
    }
    for (int32_t t = 0; t < ds->ntasks; t++) {
        uint32_t bits;
        memcpy(&bits, &ds->labels[r * ds->ntasks + t], sizeof bits);
        h = grm_mix64(h ^ bits);
    }
    if (ds->groups) h = grm_mix64(h ^ (uint64_t)ds->groups[r]);
    return h;
}

/* Ranking: take the columns over, pick each row's split with a seeded hash of its index
 * (by_content: of its content, row_key), and the training positive rate per task (the
 * constant-prediction baseline). */
static grm_status finish_ranking(const grm__pipeline *p, collector *co, grm__dataset *ds,
                                 int by_content)
{
    const grm__settings *s = &p->set;
    int32_t F = p->nfeatures, T = (int32_t)s->label_columns.n;
    int64_t N = co->labels.n / (T ? T : 1);
    ds->nrows = N;
    ds->nfeat = F;
    ds->ntasks = T;
    ds->fofs = calloc((size_t)F, sizeof *ds->fofs);
    ds->fids = calloc((size_t)F, sizeof *ds->fids);
    ds->fmax = calloc((size_t)F, sizeof *ds->fmax);
    ds->fmaxlen = calloc((size_t)F, sizeof *ds->fmaxlen);
    ds->prior = calloc((size_t)T, sizeof *ds->prior);
    if (!ds->fofs || !ds->fids || !ds->fmax || !ds->fmaxlen || !ds->prior)
        return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    for (int32_t i = 0; i < F; i++) {
        /* fofs holds the end offsets; prepend the 0 */
        int64_t *o = malloc((size_t)(N + 1) * sizeof *o);
        if (!o) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
        o[0] = 0;
        if (N) memcpy(o + 1, co->fofs[i].v, (size_t)N * sizeof *o);
        ds->fofs[i] = o;
        ds->fids[i] = co->fids[i].v;
        co->fids[i].v = NULL;
        for (int64_t j = 0; j < o[N]; j++) {
            if (ds->fids[i][j] < 0)
                return grm_errorf(GRM_EFORMAT, "%s: [feature.%s] column '%s' holds id %lld; "
                                  "ids must be >= 0 (hash or mod them in a transform)",
                                  p->cfg->path, p->features[i].name, p->features[i].source,
                                  (long long)ds->fids[i][j]);
            if (ds->fids[i][j] > ds->fmax[i]) ds->fmax[i] = ds->fids[i][j];
        }
        for (int64_t r = 0; r < N; r++)
            if (o[r + 1] - o[r] > ds->fmaxlen[i]) ds->fmaxlen[i] = o[r + 1] - o[r];
    }
    ds->labels = co->labels.v;
    co->labels.v = NULL;
    if (co->want_times) {   /* aligned with fids[seq_feature] */
        ds->times = co->times.v;
        co->times.v = NULL;
    }
    if (co->want_groups > 0) {
        ds->groups = co->groups.v;
        co->groups.v = NULL;
    }
    for (int k = 0; k < 3; k++) {
        ds->split_rows[k] = malloc((size_t)(N ? N : 1) * sizeof(int64_t));
        if (!ds->split_rows[k]) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    }
    uint64_t salt = (uint64_t)s->seed * 0x9e3779b97f4a7c15ULL + 0x5b1;
    for (int64_t r = 0; r < N; r++) {
        /* a pure function of (seed, row); with input = sharded or stream a row's index
         * depends on the rank count and the chunking, so its content keys it instead */
        uint64_t state = salt + (by_content ? row_key(ds, r) : (uint64_t)r);
        double u = grm_rng_uniform01(&state);
        int k = u < s->test_fraction ? 2 : u < s->test_fraction + s->valid_fraction ? 1 : 0;
        ds->split_rows[k][ds->nsplit[k]++] = r;
        if (k == 0)
            for (int32_t t = 0; t < T; t++) ds->prior[t] += ds->labels[r * T + t];
    }
    for (int32_t t = 0; t < T; t++)
        ds->prior[t] /= ds->nsplit[0] ? (double)ds->nsplit[0] : 1.0;
    ds->nexamples = ds->nsplit[0];
    return GRM_OK;
}

/* ---- input = sharded (route.h) ---- */

typedef struct pusher {
    grm__pipeline *p;
    collector *co;
    grm_status st;
} pusher;

/* Rows routed to this rank go through every transform into the collector. */
static grm_status push_routed(void *ctx, const grm_chunk *c)
{
    pusher *pu = ctx;
    grm_status st = push(pu->p, pu->co, 0, c);
    if (st != GRM_OK && pu->st == GRM_OK) pu->st = st;
    return st;
}

static grm_status make_router(grm__pipeline *p, const grm_schema *raw, grm__router **out)
{
    const char *key = p->set.shard_by;
    for (int32_t i = 0; i < raw->nfields; i++)
        if (strcmp(raw->fields[i].name, key) == 0) {
            grm_status st = grm__router_create(&p->comm_handle, raw, i, out);
            if (st != GRM_OK)
                grm_error_prefix("%s: [train] input = sharded, shard_by = %s: ", p->cfg->path,
                                 key);
            return st;
        }
    char have[512];
    join_names(have, sizeof have, raw->nfields ? &raw->fields[0].name : NULL,
               sizeof raw->fields[0], raw->nfields);
    return grm_errorf(GRM_EINVAL, "%s: [train] input = sharded routes rows by shard_by = %s "
                      "(default: user_column), but the reader has no such column (it has: "
                      "%s); set shard_by to the reader's user column, before any transform",
                      p->cfg->path, key, have);
}

/* Collective: every rank learns whether any failed. Returns st, or GRM_EIO ("FILE: what (its
 * own message says why)") when this rank is fine and another is not. */
grm_status grm__agree(const grm__pipeline *p, grm_status st, const char *what)
{
    const grm_comm_handle *c = &p->comm_handle;
    int64_t bad = st != GRM_OK;
    grm_status cs = c->ops->allreduce(c->inst, &bad, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX);
    if (st != GRM_OK) return st;
    if (cs != GRM_OK) return cs;
    if (bad)
        return grm_errorf(GRM_EIO, "%s: %s (its own message says why)", p->cfg->path, what);
    return GRM_OK;
}

typedef struct cat_entry {
    int64_t id, count;
} cat_entry;

static int cmp_cat(const void *a, const void *b)
{
    const cat_entry *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* The union of the ranks' catalogs, counts summed: every rank ranks and samples over all
 * items, as with input = whole. */
static grm_status merge_catalogs(grm__pipeline *p, grm__dataset *ds)
{
    cat_entry *mine = malloc((size_t)(ds->ncatalog ? ds->ncatalog : 1) * sizeof *mine);
    if (!mine) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    for (int64_t i = 0; i < ds->ncatalog; i++)
        mine[i] = (cat_entry){ ds->catalog_ids[i], ds->catalog_counts[i] };
    cat_entry *all = NULL;
    int64_t total = 0, C = 0;
    grm_status st = grm__gatherv(&p->comm_handle, mine, ds->ncatalog, sizeof *mine,
                                 (void **)&all, &total);
    free(mine);
    if (st != GRM_OK) return st;
    qsort(all, (size_t)total, sizeof *all, cmp_cat);
    int64_t *ids = malloc((size_t)(total ? total : 1) * sizeof *ids);
    int64_t *counts = malloc((size_t)(total ? total : 1) * sizeof *counts);
    if (!ids || !counts) {
        free(ids);
        free(counts);
        free(all);
        return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    }
    for (int64_t i = 0; i < total; i++) {
        if (C && ids[C - 1] == all[i].id) {
            counts[C - 1] += all[i].count;
            continue;
        }
        ids[C] = all[i].id;
        counts[C++] = all[i].count;
    }
    free(all);
    free(ds->catalog_ids);
    free(ds->catalog_counts);
    ds->catalog_ids = ids;
    ds->catalog_counts = counts;
    ds->ncatalog = C;
    ds->max_item = C ? ids[C - 1] : 0;
    return GRM_OK;
}

/* The facts every rank must share (collective): catalog, largest ids, the training
 * positive rate, the counts summed; and every rank must hold training samples. */
static grm_status share_totals(grm__pipeline *p, grm__dataset *ds, int32_t size)
{
    int ranking = p->set.task == GRM__TASK_RANKING;
    const grm_comm_handle *c = &p->comm_handle;
    grm_status st = GRM_OK;
    enum { NSUM = 5 };
    /* users (rows), examples, raw rows, bad rows, training rows (ranking) */
    int64_t mine[NSUM] = { ranking ? ds->nrows : ds->nusers, ds->nexamples, ds->raw_rows,
                           ds->bad_rows, ranking ? ds->nsplit[0] : 0 };
    int64_t *all = malloc((size_t)size * NSUM * sizeof *all);
    if (!all) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    if ((st = grm__gather_bytes(c, all, mine, sizeof mine)) != GRM_OK) goto out;
    int64_t sum[NSUM] = { 0 };
    int32_t empty = -1;
    for (int32_t r = 0; r < size; r++) {
        for (int k = 0; k < NSUM; k++) sum[k] += all[r * NSUM + k];
        if (all[r * NSUM + 1] == 0 && empty < 0) empty = r;
    }
    ds->all_users = sum[0];
    ds->all_examples = sum[1];
    ds->raw_rows = sum[2];
    ds->bad_rows = sum[3];
    if (!ranking) {
        if ((st = merge_catalogs(p, ds)) != GRM_OK) goto out;
        st = c->ops->allreduce(c->inst, &ds->max_user, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX);
        if (st != GRM_OK) goto out;
    } else {
        if ((st = c->ops->allreduce(c->inst, ds->fmax, ds->nfeat, GRM_DTYPE_I64,
                                    GRM_REDUCE_MAX)) != GRM_OK
            || (st = c->ops->allreduce(c->inst, ds->fmaxlen, ds->nfeat, GRM_DTYPE_I64,
                                       GRM_REDUCE_MAX)) != GRM_OK)
            goto out;
        /* the prior: positives summed in rank order over the training rows of all ranks */
        int32_t T = ds->ntasks;
        for (int32_t t = 0; t < T; t++) ds->prior[t] *= (double)ds->nsplit[0];
        st = grm__sum_ranks(c, ds->prior, T);
        for (int32_t t = 0; st == GRM_OK && t < T; t++)
            ds->prior[t] = sum[4] ? ds->prior[t] / (double)sum[4] : 0.0;
        if (st != GRM_OK) goto out;
    }
out:
    free(all);
    if (st != GRM_OK) {
        grm_error_prefix("%s: sharing the ranks' data: ", p->cfg->path);
        return st;
    }
    if (empty >= 0 && sum[1] > 0)
        return grm_errorf(GRM_EINVAL, "%s: [train] input = sharded: rank %d of %d holds no "
                          "training samples of the %lld in all (no key of shard_by = %s "
                          "routes enough data there); use fewer ranks or input = whole",
                          p->cfg->path, empty, size, (long long)sum[1], p->set.shard_by);
    return GRM_OK;
}

/* Open the reader on shard `shard` of `nshards` and create the transforms on its schema;
 * *raw: the reader's own schema. close_input undoes it. */
static grm_status open_input(grm__pipeline *p, int32_t shard, int32_t nshards,
                             const grm_schema **raw)
{
    const grm_reader_ops *rops = p->reader.plugin->info->ops;
    const grm_schema *schema;
    grm_status st = rops->open(p->reader.config.data, shard, nshards, &p->reader.inst);
    if (st != GRM_OK) {   /* a missing file, mostly: name the INI line that gave the path */
        const grm__section *sec = grm__config_section(p->cfg, "reader");
        const grm__kv *kv = sec ? grm__section_kv(sec, "path") : NULL;
        grm_error_prefix("%s:%d: [reader] ", kv ? kv->file : sec ? sec->file : p->cfg->path,
                         kv ? kv->line : sec ? sec->line : 0);
        return st;
    }
    if ((st = rops->schema(p->reader.inst, &schema)) != GRM_OK) return st;
    *raw = schema;
    for (int32_t i = 0; i < p->ntransforms; i++) {
        const grm_transform_ops *tops = p->transforms[i].plugin->info->ops;
        if ((st = tops->create(p->transforms[i].config.data, schema, &p->transforms[i].inst))
            != GRM_OK) {
            grm_error_prefix("%s: [%s] %s: ", p->cfg->path, p->transforms[i].label,
                             p->transforms[i].plugin->info->name);
            return st;
        }
        if ((st = tops->schema(p->transforms[i].inst, &schema)) != GRM_OK) return st;
    }
    /* the columns the trainer will read, before any row is: what check finds, train finds */
    const grm__section *ts = grm__config_section(p->cfg, "train");
    int want_groups = p->set.task == GRM__TASK_RANKING && ts
                      && grm__section_kv(ts, "user_column");
    return check_columns(p, schema->fields, sizeof *schema->fields, schema->nfields,
                         wants_times(p), want_groups);
}

grm_status grm__input_check(grm__pipeline *p)
{
    const grm_schema *raw;
    grm_status st = open_input(p, 0, 1, &raw);
    close_input(p);
    return st;
}

/* What the transforms still hold at the end of the input (flush), through the rest of
 * them into the collector. */
static grm_status flush_input(grm__pipeline *p, collector *co)
{
    grm_status st;
    for (int32_t i = 0; i < p->ntransforms; i++) {
        const grm_transform_ops *tops = p->transforms[i].plugin->info->ops;
        if (!GRM_HAS_OP(grm_transform_ops, tops, flush)) continue;
        for (;;) {
            const grm_chunk *c = NULL;
            if ((st = tops->flush(p->transforms[i].inst, &c)) != GRM_OK) {
                grm_error_prefix("[%s] %s: ", p->transforms[i].label,
                                 p->transforms[i].plugin->info->name);
                return st;
            }
            if (!c) break;
            if ((st = push(p, co, i + 1, c)) != GRM_OK) return st;
        }
    }
    return GRM_OK;
}

/* What grm__agree says on a rank whose data was built when another rank's failed. */
static const char built[] = "another rank failed while building its share of the data";

/* Rows the reader skipped as malformed, or 0. */
static int64_t reader_bad_rows(const grm__pipeline *p)
{
    const grm_reader_ops *rops = p->reader.plugin->info->ops;
    grm_reader_stats rs = { 0 };
    if (GRM_HAS_OP(grm_reader_ops, rops, stats) && rops->stats(p->reader.inst, &rs) == GRM_OK)
        return rs.bad_rows;
    return 0;
}

grm_status grm__dataset_build(grm__pipeline *p, grm__dataset **out)
{
    grm_status st;
    int ranking = p->set.task == GRM__TASK_RANKING;
    collector co;
    grm__dataset *ds = calloc(1, sizeof *ds);
    *out = NULL;
    if (!ds) return grm_errorf(GRM_ENOMEM, "dataset: out of memory");
    if ((st = collector_init(&co, p)) != GRM_OK) {
        free(ds);
        return st;
    }
    grm__router *router = NULL;
    const grm_reader_ops *rops = p->reader.plugin->info->ops;
    const grm_comm_ops *cops = p->comm_handle.ops;
    int32_t rank = cops ? cops->rank(p->comm_handle.inst) : 0;
    int32_t size = cops ? cops->size(p->comm_handle.inst) : 1;

    /* input = whole: every rank reads everything (leave-one-out needs each user's whole
     * sequence, and the global batch plan every sample). input = sharded: rank r reads
     * shard r of n and the router sends each row to the rank of its key, before the
     * transforms, so each user's rows meet on one rank (route.h). */
    ds->sharded = p->set.input == GRM__INPUT_SHARDED && size > 1;
    int need_agree = ds->sharded;   /* a failure here is not yet known to the other ranks */
    const grm_schema *raw;
    if ((st = open_input(p, ds->sharded ? rank : 0, ds->sharded ? size : 1, &raw)) != GRM_OK)
        goto fail;
    if (ds->sharded) {
        if ((st = make_router(p, raw, &router)) != GRM_OK) goto fail;
        need_agree = 0;
        if ((st = grm__agree(p, GRM_OK, built)) != GRM_OK) goto fail;
    }
    pusher pu = { p, &co, GRM_OK };
    for (int failed = 0, eof = 0, done = 0; !done;) {
        const grm_chunk *c = NULL;
        if (!failed && !eof) {
            if ((st = rops->next(p->reader.inst, &c)) != GRM_OK) {
                grm_error_prefix("[reader] %s: ", p->reader.plugin->info->name);
                if (!router) goto fail;
                pu.st = st;
                failed = 1;
            } else if (!c) {
                eof = 1;
            } else {
                ds->raw_rows += c->rows;
            }
        }
        if (!router) {
            if (!c) break;
            if ((st = push(p, &co, 0, c)) != GRM_OK) goto fail;
            continue;
        }
        st = grm__route_round(router, c, failed, push_routed, &pu, &done);
        if (st != GRM_OK && pu.st == GRM_OK) pu.st = st;
        failed = failed || st != GRM_OK;
    }
    if (router && (st = pu.st) != GRM_OK) goto fail;   /* the rounds told every rank */
    need_agree = ds->sharded;
    if ((st = flush_input(p, &co)) != GRM_OK) goto fail;
    ds->bad_rows = reader_bad_rows(p);
    /* stream: the same split as grmhost train's, row by row (grm__stream) */
    int by_content = ds->sharded || p->set.input == GRM__INPUT_STREAM;
    if ((st = ranking ? finish_ranking(p, &co, ds, by_content) : finish(p, &co, ds)) != GRM_OK)
        goto fail;
    if (ds->sharded) {
        need_agree = 0;
        if ((st = grm__agree(p, GRM_OK, built)) != GRM_OK
            || (st = share_totals(p, ds, size)) != GRM_OK)
            goto fail;
    } else {
        ds->all_users = ranking ? ds->nrows : ds->nusers;
        ds->all_examples = ds->nexamples;
    }
    if (ds->all_examples == 0) {
        if (ranking)
            st = grm_errorf(GRM_EFORMAT, "%s: the data yields no training rows (%lld rows "
                            "read); check the reader's path and the split fractions",
                            p->cfg->path, (long long)ds->all_users);
        else
            st = grm_errorf(GRM_EFORMAT, "%s: the data yields no training examples (%lld "
                            "users of %lld rows read); check the reader's path and columns",
                            p->cfg->path, (long long)ds->all_users, (long long)ds->raw_rows);
        goto fail;
    }
    st = GRM_OK;
    *out = ds;
    ds = NULL;
fail:
    if (ds && need_agree) grm__agree(p, st, built);   /* the others learn before they go on */
    grm__router_destroy(router);
    close_input(p);
    collector_fini(&co);
    grm__dataset_destroy(ds);
    return st;
}


/* ---- input = stream (ranking): read, transform and split while training runs ---- */

struct grm__stream {
    grm__pipeline *p;
    int32_t shard, nshards;
    int64_t pass, passes;      /* the pass being read; how many to read */
    int open, eof;             /* the reader and transforms are open; the reader is at EOF */
    pthread_mutex_t lock;      /* guards what the trainer thread reads (the rest is the
                                * data thread's): */
    collector eval;            /* the valid and test rows of pass 0 so far */
    double *pos;               /* [T] positives among pass 0's training rows */
    int64_t ntrain;            /* pass 0's training rows */
    int64_t raw_rows, bad_rows;   /* of pass 0 */
    int first_done;            /* pass 0 is read through */
    int64_t chunk_rows;        /* rows the transforms passed on before the end of the pass */
};

grm_status grm__stream_open(grm__pipeline *p, int64_t passes, grm__stream **out)
{
    const grm_comm_ops *cops = p->comm_handle.ops;
    grm__stream *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) return grm_errorf(GRM_ENOMEM, "stream: out of memory");
    s->p = p;
    s->shard = cops ? cops->rank(p->comm_handle.inst) : 0;
    s->nshards = cops ? cops->size(p->comm_handle.inst) : 1;
    s->passes = passes;
    s->pos = calloc((size_t)p->set.label_columns.n + 1, sizeof *s->pos);
    grm_status st = s->pos ? collector_init(&s->eval, p)
                           : grm_errorf(GRM_ENOMEM, "stream: out of memory");
    if (st != GRM_OK) {
        free(s->pos);
        free(s);
        return st;
    }
    pthread_mutex_init(&s->lock, NULL);
    *out = s;
    return GRM_OK;
}

void grm__stream_close(grm__stream *s)
{
    if (!s) return;
    if (s->open) close_input(s->p);
    collector_fini(&s->eval);
    pthread_mutex_destroy(&s->lock);
    free(s->pos);
    free(s);
}

/* Rows `rows` [n] of a ranking dataset appended to a collector, as collect_ranking would
 * have taken them from a chunk. */
static grm_status collect_rows(collector *co, const grm__dataset *ds, const int64_t *rows,
                               int64_t n)
{
    const int32_t T = ds->ntasks, sf = co->p->seq_feature;
    grm_status st = GRM_OK;
    co->want_groups = ds->groups != NULL;
    co->want_times = ds->times != NULL;
    for (int64_t k = 0; k < n && st == GRM_OK; k++) {
        const int64_t r = rows[k];
        for (int32_t i = 0; i < ds->nfeat && st == GRM_OK; i++) {
            const int64_t b = ds->fofs[i][r], e = ds->fofs[i][r + 1];
            if ((st = vec_push(&co->fids[i], ds->fids[i] + b, e - b)) == GRM_OK)
                st = vec_push(&co->fofs[i], &co->fids[i].n, 1);
            if (st == GRM_OK && i == sf && ds->times)
                st = vec_push(&co->times, ds->times + b, e - b);
        }
        for (int32_t t = 0; t < T && st == GRM_OK; t++)
            st = vecf_push(&co->labels, ds->labels[r * T + t]);
        if (st == GRM_OK && ds->groups) st = vec_push(&co->groups, &ds->groups[r], 1);
    }
    return st;
}

/* The next piece of the stream: the rows of one reader chunk (or of the transforms' flush
 * at the end of a pass) as a ranking dataset, each row's split picked by its content as
 * grm__dataset_build picks it (split_rows[0]: the training rows). *piece is NULL after the
 * last pass. Pass 0's valid and test rows are kept for grm__stream_eval. Runs on one thread
 * (the data thread) at a time. */
grm_status grm__stream_next(grm__stream *s, grm__dataset **piece, int64_t *pass)
{
    grm__pipeline *p = s->p;
    const grm_reader_ops *rops = p->reader.plugin->info->ops;
    const int32_t T = (int32_t)p->set.label_columns.n;
    grm_status st = GRM_OK;
    *piece = NULL;
    while (s->pass < s->passes) {
        const grm_schema *raw;
        collector co;
        grm__dataset *ds = NULL;
        int64_t bad = 0;
        int pass_end = 0;
        if (!s->open) {
            if ((st = open_input(p, s->shard, s->nshards, &raw)) != GRM_OK) {
                close_input(p);
                return st;
            }
            s->open = 1;
            s->eof = 0;
        }
        if ((st = collector_init(&co, p)) != GRM_OK) return st;
        const grm_chunk *c = NULL;
        if ((st = rops->next(p->reader.inst, &c)) != GRM_OK) {
            grm_error_prefix("[reader] %s: ", p->reader.plugin->info->name);
            goto out;
        }
        if (c) {
            if (s->pass == 0) {
                pthread_mutex_lock(&s->lock);
                s->raw_rows += c->rows;
                pthread_mutex_unlock(&s->lock);
            }
            if ((st = push(p, &co, 0, c)) != GRM_OK) goto out;
        } else {   /* the end of this pass: what the transforms hold, then the next pass */
            if ((st = flush_input(p, &co)) != GRM_OK) goto out;
            bad = reader_bad_rows(p);
            close_input(p);
            s->open = 0;
            pass_end = 1;
        }
        if (pass_end && s->pass == 0 && s->chunk_rows == 0 && co.labels.n > 0)
            grm__log(GRM_LOG_WARN, "grmhost", "%s: input = stream: the transforms held every "
                     "row of the pass until its end (history_by/sequence_by order a user's "
                     "rows by time), so each pass is read before its first batch and held "
                     "in memory; give the reader rows that need no such transform to read "
                     "beside training", p->cfg->path);
        if (!pass_end) s->chunk_rows += co.labels.n;
        if (co.labels.n > 0) {
            if (!(ds = calloc(1, sizeof *ds))) {
                st = grm_errorf(GRM_ENOMEM, "stream: out of memory");
                goto out;
            }
            if ((st = finish_ranking(p, &co, ds, 1)) != GRM_OK) goto out;
            ds->raw_rows = ds->nrows;
            ds->all_users = ds->nrows;
            ds->all_examples = ds->nexamples;
        }
        if (s->pass == 0) {   /* keep the held-out rows; count the training positives */
            pthread_mutex_lock(&s->lock);
            for (int k = 1; ds && k < 3 && st == GRM_OK; k++)
                st = collect_rows(&s->eval, ds, ds->split_rows[k], ds->nsplit[k]);
            for (int32_t t = 0; ds && t < T; t++)
                s->pos[t] += ds->prior[t] * (double)ds->nsplit[0];
            if (ds) s->ntrain += ds->nsplit[0];
            if (pass_end) {
                s->bad_rows = bad;
                s->first_done = 1;
            }
            pthread_mutex_unlock(&s->lock);
            if (st != GRM_OK) goto out;
        }
        *pass = s->pass;
        if (pass_end) s->pass++;
    out:
        collector_fini(&co);
        if (st != GRM_OK || (ds && ds->nsplit[0] > 0)) {
            if (st == GRM_OK) *piece = ds;
            else grm__dataset_destroy(ds);
            return st;
        }
        grm__dataset_destroy(ds);   /* no training rows: on to the next chunk */
    }
    return GRM_OK;
}

static grm_status vec_dup(vec64 *d, const vec64 *a)
{
    return a->n ? vec_push(d, a->v, a->n) : GRM_OK;
}

/* The valid and test rows of pass 0 read so far as a ranking dataset (no training rows),
 * its prior from pass 0's training rows so far: *pos [T] their positives, *ntrain their
 * count (the caller sums them over the ranks). *done: pass 0 is read through. Safe beside
 * grm__stream_next on another thread. */
grm_status grm__stream_eval(grm__stream *s, grm__dataset **out, double *pos, int64_t *ntrain,
                            int *done)
{
    const grm__pipeline *p = s->p;
    const int32_t T = (int32_t)p->set.label_columns.n;
    collector co;
    grm_status st = collector_init(&co, p);
    grm__dataset *ds = calloc(1, sizeof *ds);
    *out = NULL;
    if (st == GRM_OK && !ds) st = grm_errorf(GRM_ENOMEM, "stream: out of memory");
    if (st != GRM_OK) {
        free(ds);
        collector_fini(&co);
        return st;
    }
    pthread_mutex_lock(&s->lock);
    co.want_groups = s->eval.want_groups;
    co.want_times = s->eval.want_times;
    for (int32_t i = 0; i < p->nfeatures && st == GRM_OK; i++)
        if ((st = vec_dup(&co.fofs[i], &s->eval.fofs[i])) == GRM_OK)
            st = vec_dup(&co.fids[i], &s->eval.fids[i]);
    if (st == GRM_OK) st = vec_dup(&co.times, &s->eval.times);
    if (st == GRM_OK) st = vec_dup(&co.groups, &s->eval.groups);
    for (int64_t k = 0; k < s->eval.labels.n && st == GRM_OK; k++)
        st = vecf_push(&co.labels, s->eval.labels.v[k]);
    for (int32_t t = 0; t < T; t++) pos[t] = s->pos[t];
    *ntrain = s->ntrain;
    *done = s->first_done;
    ds->raw_rows = s->raw_rows;
    ds->bad_rows = s->bad_rows;
    pthread_mutex_unlock(&s->lock);
    if (co.want_groups < 0) co.want_groups = 0;
    if (st == GRM_OK) st = finish_ranking(p, &co, ds, 1);
    collector_fini(&co);
    if (st != GRM_OK) {
        grm__dataset_destroy(ds);
        return st;
    }
    ds->all_users = ds->nrows;
    ds->all_eval = ds->nsplit[1] + ds->nsplit[2];
    *out = ds;
    return GRM_OK;
}

void grm__dataset_destroy(grm__dataset *ds)
{
    if (!ds) return;
    free(ds->users);
    free(ds->offsets);
    free(ds->items);
    free(ds->times);
    free(ds->train_end);
    free(ds->has_eval);
    free(ds->ex_user);
    free(ds->ex_pos);
    free(ds->catalog_ids);
    free(ds->catalog_counts);
    for (int32_t i = 0; i < ds->nfeat; i++) {
        if (ds->fofs) free(ds->fofs[i]);
        if (ds->fids) free(ds->fids[i]);
    }
    free(ds->fofs);
    free(ds->fids);
    free(ds->fmax);
    free(ds->fmaxlen);
    free(ds->labels);
    free(ds->groups);
    for (int k = 0; k < 3; k++) free(ds->split_rows[k]);
    free(ds->prior);
    free(ds);
}

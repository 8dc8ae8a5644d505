/* core/delta.c - incremental export ([export] every = N): every N steps the embedding rows
 * that changed since the last export, as delta-<seq>.safetensors beside the checkpoints, so
 * a serving system can follow training (DynamicEmb's and HugeCTR's incremental dumps). A
 * delta holds, per physical table, the keys and rows that differ from what the deltas
 * before it add up to, the keys that disappeared, and every dense parameter; its metadata
 * the sequence number and the step. Each file is written by ckpt-safetensors: atomic
 * (temp file, fsync, rename) and XXH64-checked, so a crash mid-write leaves the earlier
 * deltas whole and the half-written one is a temp file nobody reads.
 *
 * The trainer's baseline is the sum of the deltas on disk (read back at start), not its own
 * memory, so a resumed or restarted run diffs against what a follower has actually seen:
 * rows a crash rolled back to the checkpoint come out again in the next delta. It holds each
 * row's id and the XXH3-128 of its bytes (24 bytes a row), not the row, and a store that
 * reads its rows a range at a time (tensor_rows, ABI 1.10: emb-dynamic, tiered or not) is
 * diffed and written a range at a time, so that a table larger than memory exports in
 * memory bounded by its ids (a delta of it held the base's rows, the table's, and the
 * changed ones: three copies of its weights).
 * `grmhost export --since S` (grm__delta_export) adds up deltas S+1.. into one model: from
 * 0, the whole model at the newest delta's step. */
#include "checkpoint.h"
#include "train.h"

#define XXH_INLINE_ALL   /* as core/checkpoint.c: header-only xxHash */
#include <xxhash.h>

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the model a sequence of deltas adds up to ---- */

typedef struct dx_tab {
    char *name;                /* owned: the physical table */
    int64_t dim;
    int64_t n;
    int64_t *ids;              /* [n] sorted */
    float *rows;               /* [n, dim] */
    uint8_t *live;             /* [n] 0: removed (kept only when removals are reported) */
} dx_tab;

typedef struct dx_model {
    dx_tab *tabs;
    int32_t ntabs;
    char **dense_names;        /* the newest delta's dense parameters */
    grm_tensor *dense;         /* [ndense], data owned */
    int32_t ndense;
    int64_t seq, step;         /* of the newest delta added */
} dx_model;

static void dx_model_fini(dx_model *m)
{
    for (int32_t i = 0; i < m->ntabs; i++) {
        free(m->tabs[i].name);
        free(m->tabs[i].ids);
        free(m->tabs[i].rows);
        free(m->tabs[i].live);
    }
    free(m->tabs);
    for (int32_t i = 0; i < m->ndense; i++) {
        free(m->dense_names[i]);
        free(m->dense[i].data);
    }
    free(m->dense_names);
    free(m->dense);
    memset(m, 0, sizeof *m);
}

static dx_tab *dx_table(dx_model *m, const char *name, int64_t dim)
{
    for (int32_t i = 0; i < m->ntabs; i++)
        if (!strcmp(m->tabs[i].name, name)) return &m->tabs[i];
    dx_tab *nt = realloc(m->tabs, (size_t)(m->ntabs + 1) * sizeof *nt);
    if (!nt) return NULL;
    m->tabs = nt;
    dx_tab *t = &m->tabs[m->ntabs];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return NULL;
    t->dim = dim;
    m->ntabs++;
    return t;
}

/* Merge ids/rows [n] (new values) and removed [r] (all sorted) into t. keep_removed: a
 * removed key stays as a dead entry (export --since S reports it); else it is dropped. */
static grm_status dx_apply(dx_tab *t, const int64_t *ids, const float *rows, int64_t n,
                           const int64_t *removed, int64_t r, int keep_removed)
{
    const int64_t cap = t->n + n + r, D = t->dim;
    int64_t *ni = malloc((size_t)(cap + 1) * sizeof *ni);
    float *nr = malloc((size_t)(cap * D + 1) * sizeof *nr);
    uint8_t *nl = malloc((size_t)(cap + 1));
    if (!ni || !nr || !nl) {
        free(ni);
        free(nr);
        free(nl);
        return grm_errorf(GRM_ENOMEM, "out of memory");
    }
    int64_t a = 0, b = 0, c = 0, k = 0;
    while (a < t->n || b < n || c < r) {
        int64_t key = INT64_MAX;
        if (a < t->n && t->ids[a] < key) key = t->ids[a];
        if (b < n && ids[b] < key) key = ids[b];
        if (c < r && removed[c] < key) key = removed[c];
        const float *src = NULL;
        int live = 0;
        if (a < t->n && t->ids[a] == key) {
            src = t->rows + a * D;
            live = t->live[a];
            a++;
        }
        if (b < n && ids[b] == key) {
            src = rows + b * D;
            live = 1;
            b++;
        }
        if (c < r && removed[c] == key) {
            live = 0;
            c++;
        }
        if (!live && !keep_removed) continue;
        ni[k] = key;
        nl[k] = (uint8_t)live;
        if (src) memcpy(nr + k * D, src, (size_t)D * sizeof *nr);
        else memset(nr + k * D, 0, (size_t)D * sizeof *nr);
        k++;
    }
    free(t->ids);
    free(t->rows);
    free(t->live);
    t->ids = ni;
    t->rows = nr;
    t->live = nl;
    t->n = k;
    return GRM_OK;
}

/* ---- reading one delta ---- */

typedef struct dx_read {
    dx_model *m;
    int keep_removed;
    const char *path;
    /* the table being read: its ids, weight and removed come in that order */
    char cur[256];
    int64_t *ids, *removed, n, r;
    float *rows;
    int64_t dim;
    int32_t ndense_new;
} dx_read;

static grm_status dx_flush(dx_read *c)
{
    grm_status st = GRM_OK;
    if (c->cur[0]) {
        dx_tab *t = dx_table(c->m, c->cur, c->dim);
        if (!t) st = grm_errorf(GRM_ENOMEM, "out of memory");
        else if (t->dim != c->dim)
            st = grm_errorf(GRM_EFORMAT, "%s: table '%s' has rows of %lld floats, the deltas "
                            "before it %lld", c->path, c->cur, (long long)c->dim,
                            (long long)t->dim);
        else st = dx_apply(t, c->ids, c->rows, c->n, c->removed, c->r, c->keep_removed);
    }
    free(c->ids);
    free(c->rows);
    free(c->removed);
    c->ids = c->removed = NULL;
    c->rows = NULL;
    c->n = c->r = c->dim = 0;
    c->cur[0] = '\0';
    return st;
}

static void *dup_data(const grm_tensor *t, size_t *bytes)
{
    size_t b = grm_dtype_size(t->dtype);
    for (int32_t d = 0; d < t->ndim; d++) b *= (size_t)t->shape[d];
    void *p = malloc(b ? b : 1);
    if (p && b) memcpy(p, t->data, b);
    *bytes = b;
    return p;
}

static grm_status dx_visit(void *user, const grm_named_tensor *nt)
{
    dx_read *c = user;
    size_t bytes;
    if (strncmp(nt->name, "emb.", 4) == 0) {
        const char *dot = strrchr(nt->name, '.');
        char tab[256];
        snprintf(tab, sizeof tab, "%.*s", (int)(dot - nt->name - 4), nt->name + 4);
        grm_status st = GRM_OK;
        if (strcmp(tab, c->cur) != 0 && (st = dx_flush(c)) != GRM_OK) return st;
        snprintf(c->cur, sizeof c->cur, "%s", tab);
        void *p = dup_data(&nt->tensor, &bytes);
        if (!p) return grm_errorf(GRM_ENOMEM, "out of memory");
        const int i64 = nt->tensor.dtype == GRM_DTYPE_I64 && nt->tensor.ndim == 1;
        if (!strcmp(dot, ".ids") && i64) {
            free(c->ids);
            c->ids = p;
            c->n = nt->tensor.shape[0];
        } else if (!strcmp(dot, ".removed") && i64) {
            free(c->removed);
            c->removed = p;
            c->r = nt->tensor.shape[0];
        } else if (!strcmp(dot, ".weight") && nt->tensor.dtype == GRM_DTYPE_F32
                   && nt->tensor.ndim == 2) {
            free(c->rows);
            c->rows = p;
            c->dim = nt->tensor.shape[1];
        } else {
            free(p);
            return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' is not one of a delta's "
                              "(emb.<table>.ids, .weight, .removed)", c->path, nt->name);
        }
        return GRM_OK;
    }
    /* a dense parameter: the newest delta's replace the ones before */
    grm_status st = dx_flush(c);
    if (st != GRM_OK) return st;
    dx_model *m = c->m;
    if (c->ndense_new == 0) {
        for (int32_t i = 0; i < m->ndense; i++) {
            free(m->dense_names[i]);
            free(m->dense[i].data);
        }
        m->ndense = 0;
    }
    char **nn = realloc(m->dense_names, (size_t)(m->ndense + 1) * sizeof *nn);
    if (nn) m->dense_names = nn;
    grm_tensor *nd = realloc(m->dense, (size_t)(m->ndense + 1) * sizeof *nd);
    if (nd) m->dense = nd;
    if (!nn || !nd) return grm_errorf(GRM_ENOMEM, "out of memory");
    m->dense[m->ndense] = nt->tensor;
    m->dense[m->ndense].data = dup_data(&nt->tensor, &bytes);
    m->dense_names[m->ndense] = strdup(nt->name);
    if (!m->dense[m->ndense].data || !m->dense_names[m->ndense])
        return grm_errorf(GRM_ENOMEM, "out of memory");
    m->ndense++;
    c->ndense_new++;
    return GRM_OK;
}

/* ---- the files ---- */

void grm__delta_dir(const grm__pipeline *p, char *buf, size_t cap)
{
    if (p->set.export_dir && p->set.export_dir[0]) snprintf(buf, cap, "%s", p->set.export_dir);
    else snprintf(buf, cap, "%s/export", p->set.ckpt_dir);
}

static void delta_path(char *buf, size_t cap, const char *dir, int64_t seq)
{
    snprintf(buf, cap, "%s/delta-%010lld.safetensors", dir, (long long)seq);
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The sequence numbers of dir's delta files, sorted, into *seqs [*n] (malloc'd). A
 * missing directory holds none; temp files of an interrupted write are not deltas. */
static grm_status list_deltas(const char *dir, int64_t **seqs, int64_t *n)
{
    *seqs = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return GRM_OK;
        return grm_errorf(GRM_EIO, "%s: cannot read the export directory: %s", dir,
                          strerror(errno));
    }
    int64_t cap = 0;
    struct dirent *e;
    grm_status st = GRM_OK;
    while ((e = readdir(d)) != NULL) {
        long long s;
        int end = 0;
        if (sscanf(e->d_name, "delta-%lld.safetensors%n", &s, &end) != 1 || end == 0
            || e->d_name[end] != '\0' || s < 1)
            continue;
        if (*n == cap) {
            int64_t *v = realloc(*seqs, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
            if (!v) {
                st = grm_errorf(GRM_ENOMEM, "out of memory");
                break;
            }
            *seqs = v;
        }
        (*seqs)[(*n)++] = s;
    }
    closedir(d);
    if (st == GRM_OK && *n > 1) qsort(*seqs, (size_t)*n, sizeof **seqs, cmp_i64);
    return st;
}

/* Add up the deltas of dir with seq in (since, newest] into m. The sequence must have no
 * gap from its first file (seq 1) on: a missing delta would silently lose rows. */
/* The deltas of dir, 1 .. *n (none: *n 0). The sequence must have no gap from its first
 * file (seq 1) on: a missing delta would silently lose rows. */
static grm_status dx_count(const char *dir, int64_t *n)
{
    int64_t *seqs;
    grm_status st = list_deltas(dir, &seqs, n);
    for (int64_t i = 0; st == GRM_OK && i < *n; i++)
        if (seqs[i] != i + 1)
            st = grm_errorf(GRM_EFORMAT, "%s: delta %lld is missing (the sequence goes from 1 "
                            "to %lld); restore it, or move the deltas away to start a new "
                            "sequence from a full export", dir, (long long)(i + 1),
                            (long long)seqs[*n - 1]);
    free(seqs);
    return st;
}

/* The step delta `path` was written at, from its metadata. */
static grm_status dx_step(const grm__ckpt_fmt *fmt, const char *path, int64_t *step)
{
    char meta[4096];
    grm_status st = fmt->ops->meta(fmt->inst, path, meta, sizeof meta);
    long long v = -1;
    const char *sp = st == GRM_OK ? strstr(meta, "\"step\":") : NULL;
    if (st == GRM_OK && (!sp || sscanf(sp, "\"step\":%lld", &v) != 1))
        st = grm_errorf(GRM_EFORMAT, "%s: its metadata has no step; not a grm delta", path);
    *step = v;
    return st;
}

static grm_status dx_load(const grm__registry *reg, const char *dir, int64_t since,
                          int keep_removed, dx_model *m)
{
    int64_t n;
    grm__ckpt_fmt fmt = { 0 };
    memset(m, 0, sizeof *m);
    grm_status st = dx_count(dir, &n);
    if (st != GRM_OK || n == 0) return st;
    char path[4096 + 64];
    delta_path(path, sizeof path, dir, 1);
    if ((st = grm__ckpt_fmt_for(reg, path, &fmt)) != GRM_OK) goto out;
    for (int64_t i = 1; i <= n && st == GRM_OK; i++) {
        delta_path(path, sizeof path, dir, i);
        if (i <= since) continue;
        dx_read c = { .m = m, .keep_removed = keep_removed, .path = path };
        st = fmt.ops->load(fmt.inst, path, dx_visit, &c);
        if (st == GRM_OK) st = dx_flush(&c);
        else dx_flush(&c);
        if (st == GRM_OK) st = dx_step(&fmt, path, &m->step);
        m->seq = i;
    }
    if (st == GRM_OK && m->seq == 0) m->seq = n;
out:
    grm__ckpt_fmt_fini(&fmt);
    if (st != GRM_OK) dx_model_fini(m);
    return st;
}

/* ---- during training: the base as ids and row hashes ---- */

/* XXH3-128 of a row's bytes: a row is written again when any bit of it changed, and two
 * different rows have the same hash with a chance of 2^-128. */
typedef struct dx_hash {
    uint64_t lo, hi;
} dx_hash;

static dx_hash dx_row_hash(const float *row, int64_t D)
{
    const XXH128_hash_t h = XXH3_128bits(row, (size_t)D * sizeof *row);
    return (dx_hash){ h.low64, h.high64 };
}

static int dx_hash_eq(dx_hash a, dx_hash b)
{
    return a.lo == b.lo && a.hi == b.hi;
}

typedef struct dx_btab {
    char *name;                /* owned: the physical table */
    int64_t dim, n;
    int64_t *ids;              /* [n] sorted */
    dx_hash *hash;             /* [n] of their rows */
} dx_btab;

typedef struct dx_base {
    dx_btab *tabs;
    int32_t ntabs;
    int64_t seq, step;         /* of the newest delta */
} dx_base;

static void dx_base_fini(dx_base *b)
{
    for (int32_t i = 0; i < b->ntabs; i++) {
        free(b->tabs[i].name);
        free(b->tabs[i].ids);
        free(b->tabs[i].hash);
    }
    free(b->tabs);
    memset(b, 0, sizeof *b);
}

static dx_btab *dx_btable(dx_base *b, const char *name, int64_t dim)
{
    for (int32_t i = 0; i < b->ntabs; i++)
        if (!strcmp(b->tabs[i].name, name)) return &b->tabs[i];
    dx_btab *nt = realloc(b->tabs, (size_t)(b->ntabs + 1) * sizeof *nt);
    if (!nt) return NULL;
    b->tabs = nt;
    dx_btab *t = &b->tabs[b->ntabs];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return NULL;
    t->dim = dim;
    b->ntabs++;
    return t;
}

/* Merge ids/hash [n] (new rows) and removed [r] (all sorted) into t, as dx_apply does rows
 * (removed keys dropped). */
static grm_status dx_bapply(dx_btab *t, const int64_t *ids, const dx_hash *hash, int64_t n,
                            const int64_t *removed, int64_t r)
{
    const int64_t cap = t->n + n;
    int64_t *ni = malloc((size_t)(cap + 1) * sizeof *ni);
    dx_hash *nh = malloc((size_t)(cap + 1) * sizeof *nh);
    if (!ni || !nh) {
        free(ni);
        free(nh);
        return grm_errorf(GRM_ENOMEM, "out of memory for %lld row hashes", (long long)cap);
    }
    int64_t a = 0, b = 0, c = 0, k = 0;
    while (a < t->n || b < n) {
        int64_t key = INT64_MAX;
        if (a < t->n && t->ids[a] < key) key = t->ids[a];
        if (b < n && ids[b] < key) key = ids[b];
        dx_hash h = { 0, 0 };
        if (a < t->n && t->ids[a] == key) h = t->hash[a++];
        if (b < n && ids[b] == key) h = hash[b++];
        while (c < r && removed[c] < key) c++;
        if (c < r && removed[c] == key) continue;
        ni[k] = key;
        nh[k++] = h;
    }
    free(t->ids);
    free(t->hash);
    t->ids = ni;
    t->hash = nh;
    t->n = k;
    return GRM_OK;
}

/* One delta being read into the base a piece at a time (grm_ckpt_ops.load_rows): the
 * current table's ids and removed keys whole (8 bytes a row of the delta), its rows
 * hashed as their pieces pass. */
typedef struct dx_bread {
    dx_base *b;
    const char *path;
    char cur[256];
    int64_t *ids, *removed;
    dx_hash *hash;
    int64_t n, r, nh, dim;
} dx_bread;

static grm_status dx_bflush(dx_bread *c)
{
    grm_status st = GRM_OK;
    if (c->cur[0]) {
        dx_btab *t = dx_btable(c->b, c->cur, c->dim);
        if (!t) st = grm_errorf(GRM_ENOMEM, "out of memory");
        else if (c->nh != c->n)
            st = grm_errorf(GRM_EFORMAT, "%s: table '%s' has %lld ids and %lld rows", c->path,
                            c->cur, (long long)c->n, (long long)c->nh);
        else if (t->n > 0 && t->dim != c->dim && c->n > 0)
            st = grm_errorf(GRM_EFORMAT, "%s: table '%s' has rows of %lld floats, the deltas "
                            "before it %lld", c->path, c->cur, (long long)c->dim,
                            (long long)t->dim);
        else {
            if (c->n > 0) t->dim = c->dim;
            st = dx_bapply(t, c->ids, c->hash, c->n, c->removed, c->r);
        }
    }
    free(c->ids);
    free(c->removed);
    free(c->hash);
    c->ids = c->removed = NULL;
    c->hash = NULL;
    c->n = c->r = c->nh = c->dim = 0;
    c->cur[0] = '\0';
    return st;
}

/* A piece of an i64 vector into *v [rows] (allocated at its first piece). */
static grm_status dx_piece_i64(const grm_named_tensor *nt, int64_t row0, int64_t rows,
                               int64_t **v, int64_t *n)
{
    if (row0 == 0) {
        free(*v);
        if (!(*v = malloc((size_t)(rows + 1) * sizeof **v)))
            return grm_errorf(GRM_ENOMEM, "out of memory for %lld ids", (long long)rows);
        *n = rows;
    }
    memcpy(*v + row0, nt->tensor.data, (size_t)nt->tensor.shape[0] * sizeof **v);
    return GRM_OK;
}

static grm_status dx_bpiece(void *user, const grm_named_tensor *nt, int64_t row0, int64_t rows)
{
    dx_bread *c = user;
    grm_status st = grm__ckpt_piece_fits(c->path, nt, row0, rows);
    if (st != GRM_OK) return st;
    if (strncmp(nt->name, "emb.", 4) != 0) return dx_bflush(c);    /* dense: not kept */
    const char *dot = strrchr(nt->name, '.');
    char tab[256];
    snprintf(tab, sizeof tab, "%.*s", (int)(dot - nt->name - 4), nt->name + 4);
    if (strcmp(tab, c->cur) != 0 && (st = dx_bflush(c)) != GRM_OK) return st;
    snprintf(c->cur, sizeof c->cur, "%s", tab);
    const grm_tensor *x = &nt->tensor;
    const int i64 = x->dtype == GRM_DTYPE_I64 && x->ndim == 1;
    if (!strcmp(dot, ".ids") && i64) return dx_piece_i64(nt, row0, rows, &c->ids, &c->n);
    if (!strcmp(dot, ".removed") && i64) return dx_piece_i64(nt, row0, rows, &c->removed, &c->r);
    if (!strcmp(dot, ".weight") && x->dtype == GRM_DTYPE_F32 && x->ndim == 2) {
        if (row0 == 0) {
            free(c->hash);
            if (!(c->hash = malloc((size_t)(rows + 1) * sizeof *c->hash)))
                return grm_errorf(GRM_ENOMEM, "out of memory for %lld row hashes",
                                  (long long)rows);
            c->nh = rows;
            c->dim = x->shape[1];
        }
        const float *w = x->data;
        for (int64_t i = 0; i < x->shape[0]; i++)
            c->hash[row0 + i] = dx_row_hash(w + i * x->shape[1], x->shape[1]);
        return GRM_OK;
    }
    return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' is not one of a delta's "
                      "(emb.<table>.ids, .weight, .removed)", c->path, nt->name);
}

/* load_rows through load, for a format without it: each tensor one piece. */
typedef struct dx_whole {
    grm_ckpt_piece_fn fn;
    void *user;
} dx_whole;

static grm_status dx_whole_visit(void *user, const grm_named_tensor *nt)
{
    const dx_whole *w = user;
    return w->fn(w->user, nt, 0, nt->tensor.ndim > 0 ? nt->tensor.shape[0] : 1);
}

/* What the deltas of dir add up to, as ids and row hashes, into b. */
static grm_status dx_base_load(const grm__registry *reg, const char *dir, dx_base *b)
{
    int64_t n;
    grm__ckpt_fmt fmt = { 0 };
    memset(b, 0, sizeof *b);
    grm_status st = dx_count(dir, &n);
    if (st != GRM_OK || n == 0) return st;
    char path[4096 + 64];
    delta_path(path, sizeof path, dir, 1);
    if ((st = grm__ckpt_fmt_for(reg, path, &fmt)) != GRM_OK) return st;
    for (int64_t i = 1; i <= n && st == GRM_OK; i++) {
        delta_path(path, sizeof path, dir, i);
        dx_bread c = { .b = b, .path = path };
        dx_whole w = { dx_bpiece, &c };
        st = GRM_HAS_OP(grm_ckpt_ops, fmt.ops, load_rows)
            ? fmt.ops->load_rows(fmt.inst, path, dx_bpiece, &c)
            : fmt.ops->load(fmt.inst, path, dx_whole_visit, &w);
        if (st == GRM_OK) st = dx_bflush(&c);
        else dx_bflush(&c);
        if (st == GRM_OK) st = dx_step(&fmt, path, &b->step);
        b->seq = i;
    }
    grm__ckpt_fmt_fini(&fmt);
    if (st != GRM_OK) dx_base_fini(b);
    return st;
}

struct grm__delta {
    char dir[4096];
    dx_base base;              /* what the deltas on disk add up to */
    grm__ckpt_fmt fmt;         /* ckpt-safetensors */
    int64_t last_step;         /* step of the newest delta; -1 before any */
};

/* A delta write killed midway leaves "delta-<seq>.safetensors.tmp.<pid>"; no reader takes
 * it for a delta, but they would pile up. */
static void remove_temps(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "delta-", 6) != 0 || !strstr(e->d_name, ".tmp.")) continue;
        char path[4096 + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0)
            grm__log(GRM_LOG_INFO, "grmhost", "removed %s, left by an interrupted export",
                     path);
    }
    if (d) closedir(d);
}

grm_status grm__delta_start(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    if (p->set.export_every <= 0 || t->rank != 0 || t->nranks > 1) {
        if (p->set.export_every > 0 && t->nranks > 1 && t->rank == 0)
            grm__log(GRM_LOG_WARN, "grmhost", "[export] every: incremental export runs on one "
                     "rank; with %d ranks it is off", t->nranks);
        return GRM_OK;
    }
    grm__delta *dx = calloc(1, sizeof *dx);
    if (!dx) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm__delta_dir(p, dx->dir, sizeof dx->dir);
    const grm__plugin *pl;
    grm_status st = grm__registry_get(p->reg, "ckpt-safetensors", GRM_KIND_CKPT, &pl);
    if (st == GRM_OK) {
        dx->fmt.plugin = pl;
        dx->fmt.ops = pl->info->ops;
        st = dx->fmt.ops->create(NULL, &dx->fmt.inst);
    }
    if (st == GRM_OK) st = grm__ckpt_make_dirs(dx->dir);
    if (st == GRM_OK) remove_temps(dx->dir);
    if (st == GRM_OK) st = dx_base_load(p->reg, dx->dir, &dx->base);
    if (st != GRM_OK) {
        grm_error_prefix("[export] %s: ", dx->dir);
        grm__delta_stop(t, dx);
        return st;
    }
    dx->last_step = dx->base.seq ? dx->base.step : -1;
    if (dx->base.seq && !t->opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "incremental export continues after delta %lld "
                 "(step %lld) in %s", (long long)dx->base.seq, (long long)dx->base.step,
                 dx->dir);
    t->delta = dx;
    return GRM_OK;
}

void grm__delta_stop(grm__trainer *t, grm__delta *dx)
{
    if (!dx) dx = t->delta;
    if (!dx) return;
    dx_base_fini(&dx->base);
    grm__ckpt_fmt_fini(&dx->fmt);
    free(dx);
    if (t->delta == dx) t->delta = NULL;
}

/* Owned tensor names and buffers of one delta being written. */
typedef struct dx_out {
    grm_named_tensor *v;
    char **names;
    void **bufs;
    int64_t n, nb, cap;
} dx_out;

static grm_status dx_add(dx_out *o, const char *name, void *data, int32_t dtype, int32_t ndim,
                         const int64_t *shape, int own)
{
    if (o->n == o->cap) {
        const int64_t cap = o->cap ? 2 * o->cap : 64;
        grm_named_tensor *v = realloc(o->v, (size_t)cap * sizeof *v);
        if (v) o->v = v;
        char **nm = realloc(o->names, (size_t)cap * sizeof *nm);
        if (nm) o->names = nm;
        void **b = realloc(o->bufs, (size_t)cap * sizeof *b);
        if (b) o->bufs = b;
        if (!v || !nm || !b) {
            if (own) free(data);
            return grm_errorf(GRM_ENOMEM, "out of memory");
        }
        o->cap = cap;
    }
    char *s = strdup(name);
    if (!s) {
        if (own) free(data);
        return grm_errorf(GRM_ENOMEM, "out of memory");
    }
    grm_tensor t = { .data = data, .dtype = dtype, .ndim = ndim, .shape = { 1, 1, 1, 1 },
                     .device = CPU };
    for (int32_t d = 0; d < ndim; d++) t.shape[d] = shape[d];
    o->names[o->n] = s;
    o->v[o->n++] = (grm_named_tensor){ s, t };
    if (own && data) o->bufs[o->nb++] = data;
    return GRM_OK;
}

static void dx_out_fini(dx_out *o)
{
    for (int64_t i = 0; i < o->n; i++) free(o->names[i]);
    for (int64_t i = 0; i < o->nb; i++) free(o->bufs[i]);
    free(o->v);
    free(o->names);
    free(o->bufs);
}

/* Rows a range of a table is read in: 1 MiB of them (the reads cost the same per row from
 * 64 KiB up, and a test's tables of a few thousand rows span several ranges). */
static int64_t dx_range_rows(int64_t D)
{
    const int64_t r = ((int64_t)1 << 20) / (D > 0 ? 4 * D : 4);
    return r > 0 ? r : 1;
}

/* One table of the delta being written: its current keys, its rows (whole, or read a range
 * at a time through `weight`), the positions of the rows that changed and the hashes of
 * them all (the next base). */
typedef struct dx_cur {
    int64_t *keys;             /* [n] sorted, owned */
    float *rows;               /* [n, D] owned, or NULL: read through weight */
    int32_t weight;            /* grm__table_keys' weight tensor */
    int64_t n, D;
    int64_t *pos;              /* [nc] ascending: rows that differ from the base, owned */
    int64_t nc;
    dx_hash *hash;             /* [n] owned */
} dx_cur;

typedef struct dx_write {
    grm__trainer *t;
    dx_cur *cur;               /* [nphys] */
    int32_t *tab_of;           /* per tensor of out: its dx_cur, -1 when held whole */
    int32_t ntab_of;
    float *buf;                /* a range of rows, owned */
    int64_t buf_floats;         /* its size in floats */
} dx_write;

/* Rows [r0, r0 + n) of table c into out [n, D]. */
static grm_status dx_cur_rows(dx_write *w, const dx_cur *c, int64_t r0, int64_t n, float *out)
{
    if (c->rows) {
        memcpy(out, c->rows + r0 * c->D, (size_t)(n * c->D) * sizeof *out);
        return GRM_OK;
    }
    return grm__table_read_rows(w->t, c->weight, r0, n, out);
}

static grm_status dx_buf(dx_write *w, int64_t rows, int64_t D)
{
    if (w->buf_floats >= rows * D) return GRM_OK;
    float *b = realloc(w->buf, (size_t)(rows * D) * sizeof *b);
    if (!b) return grm_errorf(GRM_ENOMEM, "out of memory for %lld rows", (long long)rows);
    w->buf = b;
    w->buf_floats = rows * D;
    return GRM_OK;
}

/* grm_ckpt_rows_fn of save_rows: changed rows [row0, row0 + n) of a table's .weight. Runs
 * of changed rows less than 64 rows apart are read as one range (at most dx_range_rows),
 * the rows between them dropped. */
static grm_status dx_rows(void *user, int64_t index, int64_t row0, int64_t n, void *out)
{
    dx_write *w = user;
    if (index < 0 || index >= w->ntab_of || w->tab_of[index] < 0)
        return grm_errorf(GRM_EINTERNAL, "incremental export: tensor %lld is not read by rows",
                          (long long)index);
    const dx_cur *c = &w->cur[w->tab_of[index]];
    const int64_t D = c->D, P = dx_range_rows(D);
    grm_status st = dx_buf(w, P, D);
    float *o = out;
    for (int64_t i = row0; i < row0 + n && st == GRM_OK;) {
        const int64_t first = c->pos[i];
        int64_t j = i + 1;
        while (j < row0 + n && c->pos[j] - c->pos[j - 1] <= 64 && c->pos[j] - first < P) j++;
        const int64_t span = c->pos[j - 1] - first + 1;
        if ((st = dx_cur_rows(w, c, first, span, w->buf)) != GRM_OK) break;
        for (int64_t k = i; k < j; k++)
            memcpy(o + (k - row0) * D, w->buf + (c->pos[k] - first) * D,
                   (size_t)D * sizeof *o);
        i = j;
    }
    return st;
}

/* Diff table c against base table b: c->pos the rows that are new or changed, *gone [*ng]
 * (malloc'd) the base's keys no longer there, c->hash every row's. A range at a time. */
static grm_status dx_diff(dx_write *w, dx_cur *c, const dx_btab *b, int64_t **gone,
                          int64_t *ng)
{
    const int64_t n = c->n, D = c->D, P = dx_range_rows(D);
    *gone = malloc((size_t)(b->n + 1) * sizeof **gone);
    c->pos = malloc((size_t)(n + 1) * sizeof *c->pos);
    c->hash = malloc((size_t)(n + 1) * sizeof *c->hash);
    if (!*gone || !c->pos || !c->hash) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm_status st = c->rows ? GRM_OK : dx_buf(w, P, D);
    int64_t a = 0;
    *ng = 0;
    c->nc = 0;
    for (int64_t r0 = 0; r0 < n && st == GRM_OK; r0 += P) {
        const int64_t m = n - r0 < P ? n - r0 : P;
        const float *rows = c->rows ? c->rows + r0 * D : w->buf;
        if (!c->rows && (st = dx_cur_rows(w, c, r0, m, w->buf)) != GRM_OK) break;
        for (int64_t i = 0; i < m; i++) {
            const int64_t k = r0 + i, key = c->keys[k];
            const dx_hash h = dx_row_hash(rows + i * D, D);
            c->hash[k] = h;
            while (a < b->n && b->ids[a] < key) (*gone)[(*ng)++] = b->ids[a++];
            if (a < b->n && b->ids[a] == key) {
                if (!dx_hash_eq(b->hash[a++], h)) c->pos[c->nc++] = k;   /* changed */
            } else {
                c->pos[c->nc++] = k;                                     /* new */
            }
        }
    }
    while (st == GRM_OK && a < b->n) (*gone)[(*ng)++] = b->ids[a++];
    return st;
}

static grm_status dx_write_file(grm__delta *dx, dx_out *o, dx_write *w, const char *path,
                                const char *meta)
{
    if (GRM_HAS_OP(grm_ckpt_ops, dx->fmt.ops, save_rows))
        return dx->fmt.ops->save_rows(dx->fmt.inst, path, o->v, o->n, meta, dx_rows, w);
    /* a format without save_rows: the changed rows whole */
    grm_status st = GRM_OK;
    for (int64_t i = 0; i < o->n && st == GRM_OK; i++) {
        grm_tensor *x = &o->v[i].tensor;
        if (x->data) continue;
        const int64_t n = x->shape[0], D = x->shape[1];
        if (!(x->data = malloc((size_t)(n * D + 1) * sizeof(float))))
            return grm_errorf(GRM_ENOMEM, "out of memory for %lld rows", (long long)n);
        o->bufs[o->nb++] = x->data;
        st = dx_rows(w, i, 0, n, x->data);
    }
    return st == GRM_OK ? dx->fmt.ops->save(dx->fmt.inst, path, o->v, o->n, meta) : st;
}

grm_status grm__delta_write(grm__trainer *t)
{
    grm__delta *dx = t->delta;
    grm__pipeline *p = t->p;
    if (!dx || dx->last_step == t->step) return GRM_OK;
    grm_status st = grm__async_flush(t);
    if (st != GRM_OK) return st;
    const double t0 = now_s();
    dx_out o = { 0 };
    dx_write w = { .t = t };
    int64_t changed = 0, removed_n = 0;
    w.cur = calloc((size_t)p->nphys + 1, sizeof *w.cur);
    if (!w.cur) return grm_errorf(GRM_ENOMEM, "out of memory");
    /* per table: the keys and rows that differ from the base, the keys gone from it */
    for (int32_t s = 0; s < p->nphys && st == GRM_OK; s++) {
        dx_cur *c = &w.cur[s];
        if ((st = grm__table_keys(t, s, &c->keys, &c->n, &c->D, &c->weight)) != GRM_OK) break;
        if (!c->keys && (st = grm__table_rows(t, s, &c->keys, &c->rows, &c->n, &c->D)) != GRM_OK)
            break;
        if (!c->keys) continue;
        dx_btab *b = dx_btable(&dx->base, p->phys[s].name, c->D);
        if (!b) {
            st = grm_errorf(GRM_ENOMEM, "out of memory");
            break;
        }
        int64_t *gone = NULL, ng = 0;
        if ((st = dx_diff(&w, c, b, &gone, &ng)) != GRM_OK) {
            free(gone);
            break;
        }
        int64_t *ci = malloc((size_t)(c->nc + 1) * sizeof *ci);
        if (!ci) {
            free(gone);
            st = grm_errorf(GRM_ENOMEM, "out of memory");
            break;
        }
        for (int64_t i = 0; i < c->nc; i++) ci[i] = c->keys[c->pos[i]];
        char name[300];
        const int64_t s1[1] = { c->nc }, s2[2] = { c->nc, c->D }, s3[1] = { ng };
        snprintf(name, sizeof name, "emb.%s.ids", p->phys[s].name);
        st = dx_add(&o, name, ci, GRM_DTYPE_I64, 1, s1, 1);
        snprintf(name, sizeof name, "emb.%s.weight", p->phys[s].name);
        if (st == GRM_OK && (st = dx_add(&o, name, NULL, GRM_DTYPE_F32, 2, s2, 0)) == GRM_OK) {
            int32_t *tb = realloc(w.tab_of, (size_t)o.n * sizeof *tb);
            if (!tb) st = grm_errorf(GRM_ENOMEM, "out of memory");
            else {
                w.tab_of = tb;
                for (int32_t i = w.ntab_of; i < (int32_t)o.n; i++) w.tab_of[i] = -1;
                w.tab_of[o.n - 1] = s;
                w.ntab_of = (int32_t)o.n;
            }
        }
        snprintf(name, sizeof name, "emb.%s.removed", p->phys[s].name);
        if (st == GRM_OK) st = dx_add(&o, name, gone, GRM_DTYPE_I64, 1, s3, 1);
        else free(gone);
        changed += c->nc;
        removed_n += ng;
    }
    /* every dense parameter (small; each step changes them all) */
    for (int32_t i = 0; i < t->dn.nparams && st == GRM_OK; i++) {
        const grm__dparam *dp = &t->dn.params[i];
        st = dx_add(&o, dp->name, dp->value, GRM_DTYPE_F32, dp->shape.ndim, dp->shape.shape, 0);
    }
    if (st == GRM_OK && w.ntab_of < (int32_t)o.n) {
        int32_t *tb = realloc(w.tab_of, (size_t)o.n * sizeof *tb);
        if (!tb) st = grm_errorf(GRM_ENOMEM, "out of memory");
        else {
            w.tab_of = tb;
            for (int32_t i = w.ntab_of; i < (int32_t)o.n; i++) w.tab_of[i] = -1;
            w.ntab_of = (int32_t)o.n;
        }
    }
    if (st == GRM_OK) {
        char path[4096 + 64], meta[1024], name[512];
        const int64_t seq = dx->base.seq + 1;
        delta_path(path, sizeof path, dx->dir, seq);
        grm__json_escape(name, sizeof name, p->set.name);   /* a '"' in it stays JSON */
        snprintf(meta, sizeof meta, "{\"format\":\"grm-delta\",\"seq\":%lld,\"step\":%lld,"
                 "\"pipeline\":\"%s\",\"config_hash\":\"%016llx\",\"rows\":%lld,"
                 "\"removed\":%lld}", (long long)seq, (long long)t->step, name,
                 (unsigned long long)grm__ckpt_config_hash(p->cfg), (long long)changed,
                 (long long)removed_n);
        st = dx_write_file(dx, &o, &w, path, meta);
        if (st == GRM_OK) {
            /* the new base is the current tables */
            for (int32_t s = 0; s < p->nphys; s++) {
                dx_cur *c = &w.cur[s];
                if (!c->keys) continue;
                dx_btab *b = dx_btable(&dx->base, p->phys[s].name, c->D);
                free(b->ids);
                free(b->hash);
                b->ids = c->keys;
                b->hash = c->hash;
                b->n = c->n;
                b->dim = c->D;
                c->keys = NULL;
                c->hash = NULL;
            }
            dx->base.seq = seq;
            dx->base.step = dx->last_step = t->step;
            if (!t->opts->quiet)
                grm__log(GRM_LOG_INFO, "grmhost", "delta %lld at step %lld: %lld rows changed, "
                         "%lld removed, %s (%.2f s)", (long long)seq, (long long)t->step,
                         (long long)changed, (long long)removed_n, path, now_s() - t0);
        }
    }
    for (int32_t s = 0; s < p->nphys; s++) {
        free(w.cur[s].keys);
        free(w.cur[s].rows);
        free(w.cur[s].pos);
        free(w.cur[s].hash);
    }
    free(w.cur);
    free(w.tab_of);
    free(w.buf);
    if (st != GRM_OK) {
        /* start over from the files, which this delta did not change */
        dx_base_fini(&dx->base);
        grm_status st2 = dx_base_load(p->reg, dx->dir, &dx->base);
        (void)st2;
        dx->last_step = -1;
    }
    dx_out_fini(&o);
    return st;
}

/* ---- grmhost export --since ---- */

grm_status grm__delta_export(grm__pipeline *p, int64_t since, const char *out, int64_t *seq,
                             int64_t *step, int64_t *rows)
{
    char dir[4096];
    dx_model m;
    grm__delta_dir(p, dir, sizeof dir);
    grm_status st = dx_load(p->reg, dir, since, since > 0, &m);
    if (st != GRM_OK) return st;
    if (m.seq == 0) {
        dx_model_fini(&m);
        return grm_errorf(GRM_ENOTFOUND, "%s: no delta-*.safetensors here; train with "
                          "[export] every = N first", dir);
    }
    if (since > m.seq) {
        st = grm_errorf(GRM_EINVAL, "--since %lld: the newest delta in %s is %lld",
                        (long long)since, dir, (long long)m.seq);
        dx_model_fini(&m);
        return st;
    }
    grm__ckpt_fmt fmt = { 0 };
    const grm__plugin *pl;
    dx_out o = { 0 };
    *rows = 0;
    if ((st = grm__registry_get(p->reg, "ckpt-safetensors", GRM_KIND_CKPT, &pl)) == GRM_OK) {
        fmt.plugin = pl;
        fmt.ops = pl->info->ops;
        st = fmt.ops->create(NULL, &fmt.inst);
    }
    if (st == GRM_OK) st = grm__ckpt_make_dirs(out);
    char meta[512], path[4096 + 64];
    snprintf(meta, sizeof meta, "{\"format\":\"grm-export\",\"since\":%lld,\"seq\":%lld,"
             "\"step\":%lld}", (long long)since, (long long)m.seq, (long long)m.step);
    /* tables: the live rows; with --since S > 0 also the keys removed after S */
    for (int32_t i = 0; i < m.ntabs && st == GRM_OK; i++) {
        dx_tab *tb = &m.tabs[i];
        int64_t nl = 0, nr = 0;
        for (int64_t k = 0; k < tb->n; k++) nl += tb->live[k], nr += !tb->live[k];
        int64_t *ids = malloc((size_t)(nl + 1) * sizeof *ids);
        float *rw = malloc((size_t)(nl * tb->dim + 1) * sizeof *rw);
        int64_t *rm = malloc((size_t)(nr + 1) * sizeof *rm);
        if (!ids || !rw || !rm) {
            free(ids), free(rw), free(rm);
            st = grm_errorf(GRM_ENOMEM, "out of memory");
            break;
        }
        int64_t a = 0, b = 0;
        for (int64_t k = 0; k < tb->n; k++) {
            if (!tb->live[k]) {
                rm[b++] = tb->ids[k];
                continue;
            }
            ids[a] = tb->ids[k];
            memcpy(rw + a++ * tb->dim, tb->rows + k * tb->dim, (size_t)tb->dim * sizeof *rw);
        }
        *rows += nl;
        char name[300];
        const int64_t s1[1] = { nl }, s2[2] = { nl, tb->dim }, s3[1] = { nr };
        snprintf(name, sizeof name, "emb.%s.ids", tb->name);
        st = dx_add(&o, name, ids, GRM_DTYPE_I64, 1, s1, 1);
        snprintf(name, sizeof name, "emb.%s.weight", tb->name);
        if (st == GRM_OK) st = dx_add(&o, name, rw, GRM_DTYPE_F32, 2, s2, 1);
        else free(rw);
        snprintf(name, sizeof name, "emb.%s.removed", tb->name);
        if (st == GRM_OK && since > 0) st = dx_add(&o, name, rm, GRM_DTYPE_I64, 1, s3, 1);
        else free(rm);
    }
    if (st == GRM_OK) {
        snprintf(path, sizeof path, "%s/tables.safetensors", out);
        st = fmt.ops->save(fmt.inst, path, o.v, o.n, meta);
    }
    dx_out_fini(&o);
    memset(&o, 0, sizeof o);
    for (int32_t i = 0; i < m.ndense && st == GRM_OK; i++)
        st = dx_add(&o, m.dense_names[i], m.dense[i].data, m.dense[i].dtype, m.dense[i].ndim,
                    m.dense[i].shape, 0);
    if (st == GRM_OK) {
        snprintf(path, sizeof path, "%s/dense.safetensors", out);
        st = fmt.ops->save(fmt.inst, path, o.v, o.n, meta);
    }
    dx_out_fini(&o);
    *seq = m.seq;
    *step = m.step;
    grm__ckpt_fmt_fini(&fmt);
    dx_model_fini(&m);
    return st;
}

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
 * row's id and the XXH3-128 of its bytes (24 bytes a row), not the row, and the table is
 * diffed and written a range at a time (grm__table_src: through tensor_rows, ABI 1.10, or
 * from the weight tensors() hands out), so that a table larger than memory exports in
 * memory bounded by its ids (a delta of it held the base's rows, the table's, and the
 * changed ones: three copies of its weights).
 * `grmhost export --since S` (grm__delta_export) adds up deltas S+1.. into one model: from
 * 0, the whole model at the newest delta's step. It too holds the keys (and where each
 * key's newest row is), not the rows: those go through a scratch file. */
#include "checkpoint.h"
#include "train.h"

#define XXH_INLINE_ALL   /* as core/checkpoint.c: header-only xxHash */
#include <xxhash.h>

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- what a sequence of deltas adds up to, without its rows ---- */

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

/* Where a key's newest row is: the delta (its sequence number) and the row in it. */
typedef struct dx_loc {
    int64_t file, row;
} dx_loc;

/* One table of the sum: its keys, sorted, each with a payload (dx_psize bytes): the
 * dx_hash of its row (the trainer's base) or its dx_loc (export --since). */
typedef struct dx_set {
    char *name;                /* owned: the physical table */
    int64_t dim, n;
    int64_t *ids;              /* [n] sorted */
    char *pay;                 /* [n, dx_psize] */
    uint8_t *live;             /* [n] 0: removed; NULL when removals are not kept (all live) */
} dx_set;

typedef struct dx_sum {
    dx_set *tabs;
    int32_t ntabs;
    int loc;                   /* 1: payloads are dx_locs (export --since), 0: dx_hashes */
    int keep_removed;          /* a removed key stays as a dead entry (export --since S) */
    int64_t seq, step;         /* of the newest delta added */
    /* with dx_loc: the newest delta's dense parameters, whole (small) */
    char **dense_names;
    grm_tensor *dense;         /* data owned */
    int32_t ndense;
    int64_t dense_file;        /* the delta they come from */
} dx_sum;

static void dx_dense_fini(dx_sum *m)
{
    for (int32_t i = 0; i < m->ndense; i++) {
        free(m->dense_names[i]);
        free(m->dense[i].data);
    }
    m->ndense = 0;
}

static void dx_sum_fini(dx_sum *m)
{
    for (int32_t i = 0; i < m->ntabs; i++) {
        free(m->tabs[i].name);
        free(m->tabs[i].ids);
        free(m->tabs[i].pay);
        free(m->tabs[i].live);
    }
    free(m->tabs);
    dx_dense_fini(m);
    free(m->dense_names);
    free(m->dense);
    const int keep = m->keep_removed, loc = m->loc;
    memset(m, 0, sizeof *m);
    m->keep_removed = keep;
    m->loc = loc;
}

static size_t dx_psize(const dx_sum *m)
{
    return m->loc ? sizeof(dx_loc) : sizeof(dx_hash);
}

static dx_set *dx_table(dx_sum *m, const char *name, int64_t dim)
{
    for (int32_t i = 0; i < m->ntabs; i++)
        if (!strcmp(m->tabs[i].name, name)) return &m->tabs[i];
    dx_set *nt = realloc(m->tabs, (size_t)(m->ntabs + 1) * sizeof *nt);
    if (!nt) return NULL;
    m->tabs = nt;
    dx_set *t = &m->tabs[m->ntabs];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return NULL;
    t->dim = dim;
    m->ntabs++;
    return t;
}

/* Merge ids/pay [n] (newer rows) and removed [r] (all sorted) into t. A removed key stays
 * as a dead entry with keep_removed (t->live says which), else it is dropped (t->live
 * NULL: every key live). */
static grm_status dx_merge(dx_set *t, size_t psize, const int64_t *ids, const char *pay,
                           int64_t n, const int64_t *removed, int64_t r, int keep_removed)
{
    const int64_t cap = t->n + n + r;
    int64_t *ni = malloc((size_t)(cap + 1) * sizeof *ni);
    char *np = malloc((size_t)(cap + 1) * psize);
    uint8_t *nl = keep_removed ? malloc((size_t)(cap + 1)) : NULL;
    if (!ni || !np || (keep_removed && !nl)) {
        free(ni);
        free(np);
        free(nl);
        return grm_errorf(GRM_ENOMEM, "out of memory for %lld keys", (long long)cap);
    }
    int64_t a = 0, b = 0, c = 0, k = 0;
    while (a < t->n || b < n || c < r) {
        int64_t key = INT64_MAX;
        if (a < t->n && t->ids[a] < key) key = t->ids[a];
        if (b < n && ids[b] < key) key = ids[b];
        if (c < r && removed[c] < key) key = removed[c];
        const char *src = NULL;
        int live = 0;
        if (a < t->n && t->ids[a] == key) {
            src = t->pay + (size_t)a * psize;
            live = t->live ? t->live[a] : 1;
            a++;
        }
        if (b < n && ids[b] == key) {
            src = pay + (size_t)b * psize;
            live = 1;
            b++;
        }
        if (c < r && removed[c] == key) {
            live = 0;
            c++;
        }
        if (!live && !keep_removed) continue;
        ni[k] = key;
        if (nl) nl[k] = (uint8_t)live;
        if (src && live) memcpy(np + (size_t)k * psize, src, psize);
        else memset(np + (size_t)k * psize, 0, psize);
        k++;
    }
    free(t->ids);
    free(t->pay);
    free(t->live);
    t->ids = ni;
    t->pay = np;
    t->live = nl;
    t->n = k;
    return GRM_OK;
}

/* ---- reading one delta, a piece at a time (grm_ckpt_ops.load_rows) ---- */

/* The table being read: its ids and removed keys whole (8 bytes a row of the delta), its
 * rows hashed as their pieces pass (dx_hash), or only counted (dx_loc). */
typedef struct dx_read {
    dx_sum *m;
    const char *path;
    int64_t file;              /* the delta's sequence number */
    char cur[256];
    int64_t *ids, *removed;
    char *pay;                 /* dx_hash: [nw] */
    int64_t n, r, nw, dim;     /* ids, removed, weight rows, and their dim */
} dx_read;

static grm_status dx_flush(dx_read *c)
{
    dx_sum *m = c->m;
    grm_status st = GRM_OK;
    if (c->cur[0]) {
        dx_set *t = dx_table(m, c->cur, c->dim);
        if (!t) st = grm_errorf(GRM_ENOMEM, "out of memory");
        else if (c->nw != c->n)
            st = grm_errorf(GRM_EFORMAT, "%s: table '%s' has %lld ids and %lld rows", c->path,
                            c->cur, (long long)c->n, (long long)c->nw);
        else if (t->n > 0 && c->n > 0 && t->dim != c->dim)
            st = grm_errorf(GRM_EFORMAT, "%s: table '%s' has rows of %lld floats, the deltas "
                            "before it %lld", c->path, c->cur, (long long)c->dim,
                            (long long)t->dim);
        if (st == GRM_OK && m->loc &&
            !(c->pay = malloc((size_t)(c->n + 1) * sizeof(dx_loc))))
            st = grm_errorf(GRM_ENOMEM, "out of memory");
        if (st == GRM_OK && m->loc)
            for (int64_t i = 0; i < c->n; i++)
                ((dx_loc *)(void *)c->pay)[i] = (dx_loc){ c->file, i };
        if (st == GRM_OK) {
            if (c->n > 0) t->dim = c->dim;
            st = dx_merge(t, dx_psize(m), c->ids, c->pay, c->n, c->removed, c->r,
                          m->keep_removed);
        }
    }
    free(c->ids);
    free(c->removed);
    free(c->pay);
    c->ids = c->removed = NULL;
    c->pay = NULL;
    c->n = c->r = c->nw = c->dim = 0;
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
    if (nt->tensor.shape[0] > 0)    /* an empty tensor's piece has no data */
        memcpy(*v + row0, nt->tensor.data, (size_t)nt->tensor.shape[0] * sizeof **v);
    return GRM_OK;
}

/* A piece of a dense parameter: kept whole (with dx_loc), the newest delta's replacing the
 * ones before. */
static grm_status dx_dense_piece(dx_read *c, const grm_named_tensor *nt, int64_t row0,
                                 int64_t rows)
{
    dx_sum *m = c->m;
    if (!m->loc) return GRM_OK;
    if (m->dense_file != c->file) {
        dx_dense_fini(m);
        m->dense_file = c->file;
    }
    const size_t rb = grm__ckpt_row_bytes(&nt->tensor);
    if (row0 == 0) {
        char **nn = realloc(m->dense_names, (size_t)(m->ndense + 1) * sizeof *nn);
        if (nn) m->dense_names = nn;
        grm_tensor *nd = realloc(m->dense, (size_t)(m->ndense + 1) * sizeof *nd);
        if (nd) m->dense = nd;
        if (!nn || !nd) return grm_errorf(GRM_ENOMEM, "out of memory");
        grm_tensor *x = &m->dense[m->ndense];
        *x = nt->tensor;
        if (x->ndim > 0) x->shape[0] = rows;
        x->data = malloc((size_t)rows * rb + 1);
        m->dense_names[m->ndense] = strdup(nt->name);
        m->ndense++;
        if (!x->data || !m->dense_names[m->ndense - 1])
            return grm_errorf(GRM_ENOMEM, "out of memory");
    }
    grm_tensor *x = &m->dense[m->ndense - 1];
    const int64_t k = nt->tensor.ndim > 0 ? nt->tensor.shape[0] : 1;
    if (k > 0 && rb > 0) memcpy((char *)x->data + (size_t)row0 * rb, nt->tensor.data, (size_t)k * rb);
    return GRM_OK;
}

static grm_status dx_piece(void *user, const grm_named_tensor *nt, int64_t row0, int64_t rows)
{
    dx_read *c = user;
    grm_status st = grm__ckpt_piece_fits(c->path, nt, row0, rows);
    if (st != GRM_OK) return st;
    if (strncmp(nt->name, "emb.", 4) != 0) {
        if ((st = dx_flush(c)) != GRM_OK) return st;
        return dx_dense_piece(c, nt, row0, rows);
    }
    const char *dot = strrchr(nt->name, '.');
    char tab[256];
    snprintf(tab, sizeof tab, "%.*s", (int)(dot - nt->name - 4), nt->name + 4);
    if (strcmp(tab, c->cur) != 0 && (st = dx_flush(c)) != GRM_OK) return st;
    snprintf(c->cur, sizeof c->cur, "%s", tab);
    const grm_tensor *x = &nt->tensor;
    const int i64 = x->dtype == GRM_DTYPE_I64 && x->ndim == 1;
    if (!strcmp(dot, ".ids") && i64) return dx_piece_i64(nt, row0, rows, &c->ids, &c->n);
    if (!strcmp(dot, ".removed") && i64) return dx_piece_i64(nt, row0, rows, &c->removed, &c->r);
    if (!strcmp(dot, ".weight") && x->dtype == GRM_DTYPE_F32 && x->ndim == 2) {
        c->nw = rows;
        c->dim = x->shape[1];
        if (c->m->loc) return GRM_OK;
        if (row0 == 0) {
            free(c->pay);
            if (!(c->pay = malloc((size_t)(rows + 1) * sizeof(dx_hash))))
                return grm_errorf(GRM_ENOMEM, "out of memory for %lld row hashes",
                                  (long long)rows);
        }
        const float *w = x->data;
        dx_hash *h = (dx_hash *)(void *)c->pay;
        for (int64_t i = 0; i < x->shape[0]; i++) h[row0 + i] = dx_row_hash(w + i * c->dim, c->dim);
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

static grm_status dx_load_rows(const grm__ckpt_fmt *f, const char *path, grm_ckpt_piece_fn fn,
                               void *user)
{
    if (GRM_HAS_OP(grm_ckpt_ops, f->ops, load_rows))
        return f->ops->load_rows(f->inst, path, fn, user);
    dx_whole w = { fn, user };
    return f->ops->load(f->inst, path, dx_whole_visit, &w);
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
    if (st == GRM_OK && *n > 1) qsort(*seqs, (size_t)*n, sizeof **seqs, grm__cmp_i64);
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

/* Add up the deltas of dir with seq in (since, newest] into m (its loc and keep_removed
 * set by the caller); fmt gets their format. */
static grm_status dx_load(const grm__registry *reg, const char *dir, int64_t since, dx_sum *m,
                          grm__ckpt_fmt *fmt)
{
    int64_t n;
    grm_status st = dx_count(dir, &n);
    if (st != GRM_OK || n == 0) return st;
    char path[4096 + 64];
    delta_path(path, sizeof path, dir, 1);
    if ((st = grm__ckpt_fmt_for(reg, path, fmt)) != GRM_OK) return st;
    for (int64_t i = since + 1; i <= n && st == GRM_OK; i++) {
        delta_path(path, sizeof path, dir, i);
        dx_read c = { .m = m, .path = path, .file = i };
        st = dx_load_rows(fmt, path, dx_piece, &c);
        if (st == GRM_OK) st = dx_flush(&c);
        else dx_flush(&c);
        if (st == GRM_OK) st = dx_step(fmt, path, &m->step);
        m->seq = i;
    }
    if (st == GRM_OK && m->seq == 0) m->seq = n;
    if (st != GRM_OK) dx_sum_fini(m);
    return st;
}

/* What the deltas of dir add up to, as ids and row hashes, into b. */
static grm_status dx_base_load(const grm__registry *reg, const char *dir, dx_sum *b)
{
    grm__ckpt_fmt fmt = { 0 };
    const grm_status st = dx_load(reg, dir, 0, b, &fmt);
    grm__ckpt_fmt_fini(&fmt);
    return st;
}

struct grm__delta {
    char dir[4096];
    dx_sum base;               /* what the deltas on disk add up to: ids, row hashes */
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
    dx_sum_fini(&dx->base);
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

/* One table of the delta being written: its current rows (grm__table_src), the positions
 * of those that changed and the hashes of them all (the next base). */
typedef struct dx_cur {
    grm__table_src src;
    int64_t *pos;              /* [nc] ascending: rows that differ from the base, owned */
    int64_t nc;
    dx_hash *hash;             /* [src.n] owned */
    float *held;               /* [nc, dim] the changed rows, owned, or NULL: read again */
} dx_cur;

typedef struct dx_write {
    grm__trainer *t;
    dx_cur *cur;               /* [nphys] */
    int32_t *tab_of;           /* per tensor of out: its dx_cur, -1 when held whole */
    float *buf;                /* a range of rows, owned */
    int64_t buf_floats;         /* its size in floats */
    int64_t hold_left;         /* bytes of changed rows the tables may still hold */
} dx_write;

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
    if (w->tab_of[index] < 0)
        return grm_errorf(GRM_EINTERNAL, "incremental export: tensor %lld is not read by rows",
                          (long long)index);
    const dx_cur *c = &w->cur[w->tab_of[index]];
    const int64_t D = c->src.dim, P = dx_range_rows(D);
    if (c->held) {
        memcpy(out, c->held + row0 * D, (size_t)(n * D) * sizeof(float));
        return GRM_OK;
    }
    grm_status st = dx_buf(w, P, D);
    float *o = out;
    for (int64_t i = row0; i < row0 + n && st == GRM_OK;) {
        const int64_t first = c->pos[i];
        int64_t j = i + 1;
        while (j < row0 + n && c->pos[j] - c->pos[j - 1] <= 64 && c->pos[j] - first < P) j++;
        const int64_t span = c->pos[j - 1] - first + 1;
        if ((st = grm__table_read(w->t, &c->src, first, span, w->buf)) != GRM_OK) break;
        for (int64_t k = i; k < j; k++)
            memcpy(o + (k - row0) * D, w->buf + (c->pos[k] - first) * D,
                   (size_t)D * sizeof *o);
        i = j;
    }
    return st;
}

/* Changed row `row` [D] kept in c->held while the delta's budget (w->hold_left) allows,
 * else none is held: dx_rows reads them from the store again. */
static void dx_hold(dx_write *w, dx_cur *c, const float *row, int64_t D, int64_t *cap)
{
    const int64_t bytes = D * (int64_t)sizeof(float);
    if (*cap < 0) return;                       /* over the budget: none held */
    if (c->nc > *cap) {
        const int64_t want = *cap ? 2 * *cap : 1024;
        if (w->hold_left < c->nc * bytes) {     /* past it: let them all go */
            free(c->held);
            c->held = NULL;
            *cap = -1;
            return;
        }
        const int64_t nc = want * bytes > w->hold_left ? w->hold_left / bytes : want;
        float *h = realloc(c->held, (size_t)(nc * D) * sizeof *h);
        if (!h) {   /* no memory for it: read them again */
            free(c->held);
            c->held = NULL;
            *cap = -1;
            return;
        }
        c->held = h;
        *cap = nc;
    }
    memcpy(c->held + (c->nc - 1) * D, row, (size_t)bytes);
}

/* Diff table c against base table b: c->pos the rows that are new or changed, *gone [*ng]
 * (malloc'd) the base's keys no longer there, c->hash every row's. A range at a time; the
 * changed rows are kept (c->held) while they fit in [export] memory_mb. */
static grm_status dx_diff(dx_write *w, dx_cur *c, const dx_set *b, int64_t **gone,
                          int64_t *ng)
{
    const int64_t n = c->src.n, D = c->src.dim, P = dx_range_rows(D);
    *gone = malloc((size_t)(b->n + 1) * sizeof **gone);
    c->pos = malloc((size_t)(n + 1) * sizeof *c->pos);
    c->hash = malloc((size_t)(n + 1) * sizeof *c->hash);
    if (!*gone || !c->pos || !c->hash) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm_status st = dx_buf(w, P, D);
    const dx_hash *bh = (const dx_hash *)(const void *)b->pay;
    int64_t a = 0, cap = w->hold_left > 0 ? 0 : -1;
    *ng = 0;
    c->nc = 0;
    for (int64_t r0 = 0; r0 < n && st == GRM_OK; r0 += P) {
        const int64_t m = n - r0 < P ? n - r0 : P;
        if ((st = grm__table_read(w->t, &c->src, r0, m, w->buf)) != GRM_OK) break;
        for (int64_t i = 0; i < m; i++) {
            const int64_t k = r0 + i, key = c->src.keys[k];
            const dx_hash h = dx_row_hash(w->buf + i * D, D);
            c->hash[k] = h;
            while (a < b->n && b->ids[a] < key) (*gone)[(*ng)++] = b->ids[a++];
            if (a < b->n && b->ids[a] == key && dx_hash_eq(bh[a], h)) {
                a++;                                                 /* the same */
                continue;
            }
            if (a < b->n && b->ids[a] == key) a++;                   /* changed, else new */
            c->pos[c->nc++] = k;
            dx_hold(w, c, w->buf + i * D, D, &cap);
        }
    }
    while (st == GRM_OK && a < b->n) (*gone)[(*ng)++] = b->ids[a++];
    if (c->held) w->hold_left -= c->nc * D * (int64_t)sizeof(float);
    return st;
}

/* Tensor n - 1 of an output file is read by rows from table s (-1: it is held whole). */
static grm_status dx_tab_of(int32_t **tab_of, int64_t n, int32_t s)
{
    int32_t *tb = realloc(*tab_of, (size_t)n * sizeof *tb);
    if (!tb) return grm_errorf(GRM_ENOMEM, "out of memory");
    tb[n - 1] = s;
    *tab_of = tb;
    return GRM_OK;
}

/* Write o (its tensors with data NULL read through fn) to path with format f. */
static grm_status dx_save(const grm__ckpt_fmt *f, const char *path, dx_out *o,
                          const char *meta, grm_ckpt_rows_fn fn, void *user)
{
    if (GRM_HAS_OP(grm_ckpt_ops, f->ops, save_rows))
        return f->ops->save_rows(f->inst, path, o->v, o->n, meta, fn, user);
    /* a format without save_rows: those tensors whole */
    grm_status st = GRM_OK;
    for (int64_t i = 0; i < o->n && st == GRM_OK; i++) {
        grm_tensor *x = &o->v[i].tensor;
        if (x->data) continue;
        const int64_t n = x->shape[0], D = x->shape[1];
        if (!(x->data = malloc((size_t)(n * D + 1) * sizeof(float))))
            return grm_errorf(GRM_ENOMEM, "out of memory for %lld rows", (long long)n);
        o->bufs[o->nb++] = x->data;
        st = fn(user, i, 0, n, x->data);
    }
    return st == GRM_OK ? f->ops->save(f->inst, path, o->v, o->n, meta) : st;
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
    dx_write w = { .t = t, .hold_left = p->set.export_memory };
    int64_t changed = 0, removed_n = 0;
    w.cur = calloc((size_t)p->nphys + 1, sizeof *w.cur);
    if (!w.cur) return grm_errorf(GRM_ENOMEM, "out of memory");
    /* per table: the keys and rows that differ from the base, the keys gone from it */
    for (int32_t s = 0; s < p->nphys && st == GRM_OK; s++) {
        dx_cur *c = &w.cur[s];
        if ((st = grm__table_open(t, s, &c->src)) != GRM_OK) break;
        if (!c->src.keys) continue;
        dx_set *b = dx_table(&dx->base, p->phys[s].name, c->src.dim);
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
        for (int64_t i = 0; i < c->nc; i++) ci[i] = c->src.keys[c->pos[i]];
        char name[300];
        const int64_t s1[1] = { c->nc }, s2[2] = { c->nc, c->src.dim }, s3[1] = { ng };
        snprintf(name, sizeof name, "emb.%s.ids", p->phys[s].name);
        st = dx_add(&o, name, ci, GRM_DTYPE_I64, 1, s1, 1);
        if (st == GRM_OK) st = dx_tab_of(&w.tab_of, o.n, -1);
        snprintf(name, sizeof name, "emb.%s.weight", p->phys[s].name);
        if (st == GRM_OK) st = dx_add(&o, name, NULL, GRM_DTYPE_F32, 2, s2, 0);
        if (st == GRM_OK) st = dx_tab_of(&w.tab_of, o.n, s);
        snprintf(name, sizeof name, "emb.%s.removed", p->phys[s].name);
        if (st == GRM_OK) st = dx_add(&o, name, gone, GRM_DTYPE_I64, 1, s3, 1);
        else free(gone);
        if (st == GRM_OK) st = dx_tab_of(&w.tab_of, o.n, -1);
        changed += c->nc;
        removed_n += ng;
    }
    /* every dense parameter (small; each step changes them all) */
    for (int32_t i = 0; i < t->dn.nparams && st == GRM_OK; i++) {
        const grm__dparam *dp = &t->dn.params[i];
        st = dx_add(&o, dp->name, dp->value, GRM_DTYPE_F32, dp->shape.ndim, dp->shape.shape, 0);
        if (st == GRM_OK) st = dx_tab_of(&w.tab_of, o.n, -1);
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
        st = dx_save(&dx->fmt, path, &o, meta, dx_rows, &w);
        if (st == GRM_OK) {
            /* the new base is the current tables */
            for (int32_t s = 0; s < p->nphys; s++) {
                dx_cur *c = &w.cur[s];
                if (!c->src.keys) continue;
                dx_set *b = dx_table(&dx->base, p->phys[s].name, c->src.dim);
                free(b->ids);
                free(b->pay);
                free(b->live);
                b->ids = c->src.keys;
                b->pay = (char *)c->hash;
                b->live = NULL;         /* every key live */
                b->n = c->src.n;
                b->dim = c->src.dim;
                c->src.keys = NULL;
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
        grm__table_close(&w.cur[s].src);
        free(w.cur[s].pos);
        free(w.cur[s].hash);
        free(w.cur[s].held);
    }
    free(w.cur);
    free(w.tab_of);
    free(w.buf);
    if (st != GRM_OK) {
        /* start over from the files, which this delta did not change */
        dx_sum_fini(&dx->base);
        grm_status st2 = dx_base_load(p->reg, dx->dir, &dx->base);
        (void)st2;
        dx->last_step = -1;
    }
    dx_out_fini(&o);
    return st;
}

/* ---- grmhost export --since ---- */

/* export --since: the rows of the sum go to an unlinked spill file in the output directory
 * (each table's live rows in key order, one after the other) as the deltas that hold them
 * are read a piece at a time, and tables.safetensors is written from it a range at a time:
 * memory holds the keys and where their rows are (about 25 bytes a key), not the rows. */
typedef struct dx_spill {
    dx_sum *m;
    const char *path;          /* the delta being read */
    int64_t file;              /* its sequence number */
    int64_t first;             /* the first delta added (since + 1) */
    int fd;                    /* the spill file */
    int64_t *off;              /* [ntabs] byte offset of each table's rows in it */
    int64_t *live;             /* [ntabs] its live rows; their dx_loc, compacted, in pay */
    int64_t **order;           /* [ntabs][live] live rows by delta, then by row there */
    int64_t **bstart;          /* [ntabs][ndeltas + 1] each delta's slice of order */
    int32_t cur;               /* table of the weight being read, -1 none */
    int64_t pos;               /* the next of its slice of order */
    int32_t *tab_of;           /* per tensor of the output file: its table, -1 held whole */
} dx_spill;

/* Table i's live dx_locs compacted to the front of pay (a live key's place in the output
 * is its rank among the live keys), and sp->order[i] them by delta (counting sort: within
 * a delta by key, which is the order of its rows there). */
static grm_status dx_spill_index(dx_spill *sp, int32_t i, int64_t ndeltas)
{
    dx_set *t = &sp->m->tabs[i];
    dx_loc *loc = (dx_loc *)(void *)t->pay;
    int64_t p = 0;
    for (int64_t k = 0; k < t->n; k++)
        if (!t->live || t->live[k]) loc[p++] = loc[k];
    sp->live[i] = p;
    int64_t *b = calloc((size_t)ndeltas + 1, sizeof *b);
    int64_t *o = malloc((size_t)(p + 1) * sizeof *o);
    sp->bstart[i] = b;
    sp->order[i] = o;
    if (!b || !o) return grm_errorf(GRM_ENOMEM, "out of memory for %lld rows", (long long)p);
    for (int64_t k = 0; k < p; k++) b[loc[k].file - sp->first + 1]++;
    for (int64_t f = 0; f < ndeltas; f++) b[f + 1] += b[f];
    int64_t *cur = malloc((size_t)(ndeltas + 1) * sizeof *cur);
    if (!cur) return grm_errorf(GRM_ENOMEM, "out of memory");
    memcpy(cur, b, (size_t)ndeltas * sizeof *cur);
    for (int64_t k = 0; k < p; k++) o[cur[loc[k].file - sp->first]++] = k;
    free(cur);
    return GRM_OK;
}

static grm_status dx_spill_piece(void *user, const grm_named_tensor *nt, int64_t row0,
                                 int64_t rows)
{
    dx_spill *sp = user;
    grm_status st = grm__ckpt_piece_fits(sp->path, nt, row0, rows);
    if (st != GRM_OK || strncmp(nt->name, "emb.", 4) != 0) return st;
    const char *dot = strrchr(nt->name, '.');
    if (strcmp(dot, ".weight") != 0) return GRM_OK;
    dx_sum *m = sp->m;
    const int64_t f = sp->file - sp->first;
    if (row0 == 0) {
        char tab[256];
        snprintf(tab, sizeof tab, "%.*s", (int)(dot - nt->name - 4), nt->name + 4);
        sp->cur = -1;
        for (int32_t i = 0; i < m->ntabs; i++)
            if (!strcmp(m->tabs[i].name, tab)) sp->cur = i;
        if (sp->cur >= 0) sp->pos = sp->bstart[sp->cur][f];
    }
    if (sp->cur < 0) return GRM_OK;
    const dx_set *t = &m->tabs[sp->cur];
    const dx_loc *loc = (const dx_loc *)(const void *)t->pay;
    const int64_t *o = sp->order[sp->cur], end = sp->bstart[sp->cur][f + 1];
    const int64_t k = nt->tensor.shape[0];
    const size_t rb = (size_t)t->dim * sizeof(float);
    const char *src = nt->tensor.data;
    /* this delta's rows that are the newest of their keys, in row order: runs of them bound
     * for consecutive places go out in one pwrite */
    while (sp->pos < end && loc[o[sp->pos]].row < row0 + k) {
        const int64_t p0 = o[sp->pos], r0 = loc[p0].row;
        int64_t j = sp->pos + 1;
        while (j < end && o[j] == p0 + (j - sp->pos) && loc[o[j]].row == r0 + (j - sp->pos)
               && loc[o[j]].row < row0 + k)
            j++;
        const size_t bytes = (size_t)(j - sp->pos) * rb;
        const off_t at = (off_t)(sp->off[sp->cur] + p0 * (int64_t)rb);
        if (r0 < row0 || pwrite(sp->fd, src + (size_t)(r0 - row0) * rb, bytes, at)
                         != (ssize_t)bytes)
            return grm_errorf(GRM_EIO, "writing the rows of export --since to a scratch file "
                              "in the output directory: %s", r0 < row0 ? "rows out of order"
                              : strerror(errno));
        sp->pos = j;
    }
    return GRM_OK;
}

/* grm_ckpt_rows_fn: rows [row0, row0 + n) of a table's weight, from the spill file. */
static grm_status dx_spill_rows(void *user, int64_t index, int64_t row0, int64_t n, void *out)
{
    dx_spill *sp = user;
    const int32_t s = sp->tab_of[index];
    const size_t rb = (size_t)sp->m->tabs[s].dim * sizeof(float), bytes = (size_t)n * rb;
    if (pread(sp->fd, out, bytes, (off_t)(sp->off[s] + row0 * (int64_t)rb)) != (ssize_t)bytes)
        return grm_errorf(GRM_EIO, "reading the rows of export --since back from its scratch "
                          "file: %s", errno ? strerror(errno) : "short read");
    return GRM_OK;
}

grm_status grm__delta_export(grm__pipeline *p, int64_t since, const char *out, int64_t *seq,
                             int64_t *step, int64_t *rows)
{
    char dir[4096];
    dx_sum m = { .loc = 1, .keep_removed = since > 0, .dense_file = -1 };
    grm__ckpt_fmt in = { 0 };
    grm__delta_dir(p, dir, sizeof dir);
    grm_status st = dx_load(p->reg, dir, since, &m, &in);
    if (st != GRM_OK) {
        grm__ckpt_fmt_fini(&in);
        return st;
    }
    if (m.seq == 0) {
        dx_sum_fini(&m);
        return grm_errorf(GRM_ENOTFOUND, "%s: no delta-*.safetensors here; train with "
                          "[export] every = N first", dir);
    }
    if (since > m.seq) {
        st = grm_errorf(GRM_EINVAL, "--since %lld: the newest delta in %s is %lld",
                        (long long)since, dir, (long long)m.seq);
        dx_sum_fini(&m);
        grm__ckpt_fmt_fini(&in);
        return st;
    }
    grm__ckpt_fmt fmt = { 0 };
    const grm__plugin *pl;
    dx_out o = { 0 };
    dx_spill sp = { .m = &m, .fd = -1, .cur = -1 };
    char meta[512], path[4096 + 64];
    *rows = 0;
    if ((st = grm__registry_get(p->reg, "ckpt-safetensors", GRM_KIND_CKPT, &pl)) == GRM_OK) {
        fmt.plugin = pl;
        fmt.ops = pl->info->ops;
        st = fmt.ops->create(NULL, &fmt.inst);
    }
    if (st == GRM_OK) st = grm__ckpt_make_dirs(out);
    /* the live rows of every table into the spill file, delta by delta */
    sp.first = since + 1;
    sp.off = calloc((size_t)m.ntabs + 1, sizeof *sp.off);
    sp.live = calloc((size_t)m.ntabs + 1, sizeof *sp.live);
    sp.order = calloc((size_t)m.ntabs + 1, sizeof *sp.order);
    sp.bstart = calloc((size_t)m.ntabs + 1, sizeof *sp.bstart);
    if (st == GRM_OK && (!sp.off || !sp.live || !sp.order || !sp.bstart))
        st = grm_errorf(GRM_ENOMEM, "out of memory");
    if (st == GRM_OK) {
        snprintf(path, sizeof path, "%s/.since-XXXXXX", out);
        if ((sp.fd = mkstemp(path)) < 0)
            st = grm_errorf(GRM_EIO, "%s: cannot create a scratch file: %s", path,
                            strerror(errno));
        else
            unlink(path);
    }
    int64_t at = 0;
    for (int32_t i = 0; i < m.ntabs && st == GRM_OK; i++) {
        st = dx_spill_index(&sp, i, m.seq - since);
        sp.off[i] = at;
        at += sp.live[i] * m.tabs[i].dim * (int64_t)sizeof(float);
    }
    for (int64_t f = since + 1; f <= m.seq && st == GRM_OK; f++) {
        delta_path(path, sizeof path, dir, f);
        sp.path = path;
        sp.file = f;
        st = dx_load_rows(&in, path, dx_spill_piece, &sp);
    }
    snprintf(meta, sizeof meta, "{\"format\":\"grm-export\",\"since\":%lld,\"seq\":%lld,"
             "\"step\":%lld}", (long long)since, (long long)m.seq, (long long)m.step);
    /* tables: the live rows; with --since S > 0 also the keys removed after S */
    for (int32_t i = 0; i < m.ntabs && st == GRM_OK; i++) {
        const dx_set *tb = &m.tabs[i];
        const int64_t nl = sp.live[i], nr = tb->n - nl;
        int64_t *ids = malloc((size_t)(nl + 1) * sizeof *ids);
        int64_t *rm = malloc((size_t)(nr + 1) * sizeof *rm);
        if (!ids || !rm) {
            free(ids), free(rm);
            st = grm_errorf(GRM_ENOMEM, "out of memory");
            break;
        }
        int64_t a = 0, b = 0;
        for (int64_t k = 0; k < tb->n; k++) {
            if (!tb->live || tb->live[k]) ids[a++] = tb->ids[k];
            else rm[b++] = tb->ids[k];
        }
        *rows += nl;
        char name[300];
        const int64_t s1[1] = { nl }, s2[2] = { nl, tb->dim }, s3[1] = { nr };
        snprintf(name, sizeof name, "emb.%s.ids", tb->name);
        st = dx_add(&o, name, ids, GRM_DTYPE_I64, 1, s1, 1);
        if (st == GRM_OK) st = dx_tab_of(&sp.tab_of, o.n, -1);
        snprintf(name, sizeof name, "emb.%s.weight", tb->name);
        if (st == GRM_OK) st = dx_add(&o, name, NULL, GRM_DTYPE_F32, 2, s2, 0);
        if (st == GRM_OK) st = dx_tab_of(&sp.tab_of, o.n, i);
        snprintf(name, sizeof name, "emb.%s.removed", tb->name);
        if (st == GRM_OK && since > 0) st = dx_add(&o, name, rm, GRM_DTYPE_I64, 1, s3, 1);
        else free(rm);
        if (st == GRM_OK && since > 0) st = dx_tab_of(&sp.tab_of, o.n, -1);
    }
    if (st == GRM_OK) {
        snprintf(path, sizeof path, "%s/tables.safetensors", out);
        st = dx_save(&fmt, path, &o, meta, dx_spill_rows, &sp);
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
    if (sp.fd >= 0) close(sp.fd);
    for (int32_t i = 0; i < m.ntabs && sp.order && sp.bstart; i++) {
        free(sp.order[i]);
        free(sp.bstart[i]);
    }
    free(sp.off);
    free(sp.live);
    free(sp.order);
    free(sp.bstart);
    free(sp.tab_of);
    *seq = m.seq;
    *step = m.step;
    grm__ckpt_fmt_fini(&fmt);
    grm__ckpt_fmt_fini(&in);
    dx_sum_fini(&m);
    return st;
}

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
 * rows a crash rolled back to the checkpoint come out again in the next delta.
 * `grmhost export --since S` (grm__delta_export) adds up deltas S+1.. into one model: from
 * 0, the whole model at the newest delta's step. */
#include "checkpoint.h"
#include "train.h"

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
static grm_status dx_load(const grm__registry *reg, const char *dir, int64_t since,
                          int keep_removed, dx_model *m)
{
    int64_t *seqs, n;
    grm__ckpt_fmt fmt = { 0 };
    memset(m, 0, sizeof *m);
    grm_status st = list_deltas(dir, &seqs, &n);
    if (st != GRM_OK || n == 0) return st;
    for (int64_t i = 0; i < n; i++)
        if (seqs[i] != i + 1) {
            st = grm_errorf(GRM_EFORMAT, "%s: delta %lld is missing (the sequence goes from 1 "
                            "to %lld); restore it, or move the deltas away to start a new "
                            "sequence from a full export", dir, (long long)(i + 1),
                            (long long)seqs[n - 1]);
            free(seqs);
            return st;
        }
    char path[4096 + 64], meta[4096];
    delta_path(path, sizeof path, dir, 1);
    if ((st = grm__ckpt_fmt_for(reg, path, &fmt)) != GRM_OK) goto out;
    for (int64_t i = 0; i < n && st == GRM_OK; i++) {
        delta_path(path, sizeof path, dir, seqs[i]);
        if (seqs[i] <= since) continue;
        dx_read c = { .m = m, .keep_removed = keep_removed, .path = path };
        st = fmt.ops->load(fmt.inst, path, dx_visit, &c);
        if (st == GRM_OK) st = dx_flush(&c);
        else dx_flush(&c);
        if (st == GRM_OK) st = fmt.ops->meta(fmt.inst, path, meta, sizeof meta);
        long long step = -1;
        const char *sp = strstr(meta, "\"step\":");
        if (st == GRM_OK && (!sp || sscanf(sp, "\"step\":%lld", &step) != 1))
            st = grm_errorf(GRM_EFORMAT, "%s: its metadata has no step; not a grm delta", path);
        m->seq = seqs[i];
        m->step = step;
    }
    if (st == GRM_OK && m->seq == 0) m->seq = seqs[n - 1];
out:
    grm__ckpt_fmt_fini(&fmt);
    free(seqs);
    if (st != GRM_OK) dx_model_fini(m);
    return st;
}

/* ---- during training ---- */

struct grm__delta {
    char dir[4096];
    dx_model base;             /* what the deltas on disk add up to */
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
    if (st == GRM_OK) st = dx_load(p->reg, dx->dir, 0, 0, &dx->base);
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
    dx_model_fini(&dx->base);
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
    if (own) o->bufs[o->nb++] = data;
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

grm_status grm__delta_write(grm__trainer *t)
{
    grm__delta *dx = t->delta;
    grm__pipeline *p = t->p;
    if (!dx || dx->last_step == t->step) return GRM_OK;
    grm_status st = grm__async_flush(t);
    if (st != GRM_OK) return st;
    const double t0 = now_s();
    dx_out o = { 0 };
    int64_t changed = 0, removed_n = 0;
    /* per table: the keys and rows that differ from the base, the keys gone from it */
    for (int32_t s = 0; s < p->nphys && st == GRM_OK; s++) {
        int64_t *keys, n, D;
        float *rows;
        if ((st = grm__table_rows(t, s, &keys, &rows, &n, &D)) != GRM_OK) break;
        if (!keys) continue;
        dx_tab *b = dx_table(&dx->base, p->phys[s].name, D);
        int64_t *ci = malloc((size_t)(n + 1) * sizeof *ci);
        float *cr = malloc((size_t)(n * D + 1) * sizeof *cr);
        int64_t *ri = malloc((size_t)((b ? b->n : 0) + 1) * sizeof *ri);
        if (!b || !ci || !cr || !ri) {
            free(keys), free(rows), free(ci), free(cr), free(ri);
            st = grm_errorf(GRM_ENOMEM, "out of memory");
            break;
        }
        int64_t a = 0, k = 0, nc = 0, nr = 0;
        while (a < b->n || k < n) {
            if (k < n && (a >= b->n || keys[k] < b->ids[a])) {   /* new */
                ci[nc] = keys[k];
                memcpy(cr + nc++ * D, rows + k * D, (size_t)D * sizeof *cr);
                k++;
            } else if (a < b->n && (k >= n || b->ids[a] < keys[k])) {   /* gone */
                ri[nr++] = b->ids[a++];
            } else {   /* in both: changed when any bit differs */
                if (memcmp(rows + k * D, b->rows + a * D, (size_t)D * sizeof *rows) != 0) {
                    ci[nc] = keys[k];
                    memcpy(cr + nc++ * D, rows + k * D, (size_t)D * sizeof *cr);
                }
                a++, k++;
            }
        }
        /* the new base is the current table */
        free(b->ids), free(b->rows), free(b->live);
        b->ids = keys;
        b->rows = rows;
        b->n = n;
        b->live = malloc((size_t)(n + 1));
        if (b->live) memset(b->live, 1, (size_t)n);
        char name[300];
        const int64_t s1[1] = { nc }, s2[2] = { nc, D }, s3[1] = { nr };
        snprintf(name, sizeof name, "emb.%s.ids", p->phys[s].name);
        if (!b->live) st = grm_errorf(GRM_ENOMEM, "out of memory");
        if (st == GRM_OK) st = dx_add(&o, name, ci, GRM_DTYPE_I64, 1, s1, 1);
        else free(ci);
        snprintf(name, sizeof name, "emb.%s.weight", p->phys[s].name);
        if (st == GRM_OK) st = dx_add(&o, name, cr, GRM_DTYPE_F32, 2, s2, 1);
        else free(cr);
        snprintf(name, sizeof name, "emb.%s.removed", p->phys[s].name);
        if (st == GRM_OK) st = dx_add(&o, name, ri, GRM_DTYPE_I64, 1, s3, 1);
        else free(ri);
        changed += nc;
        removed_n += nr;
    }
    /* every dense parameter (small; each step changes them all) */
    for (int32_t i = 0; i < t->dn.nparams && st == GRM_OK; i++) {
        const grm__dparam *dp = &t->dn.params[i];
        st = dx_add(&o, dp->name, dp->value, GRM_DTYPE_F32, dp->shape.ndim, dp->shape.shape, 0);
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
        st = dx->fmt.ops->save(dx->fmt.inst, path, o.v, o.n, meta);
        if (st == GRM_OK) {
            dx->base.seq = seq;
            dx->base.step = dx->last_step = t->step;
            if (!t->opts->quiet)
                grm__log(GRM_LOG_INFO, "grmhost", "delta %lld at step %lld: %lld rows changed, "
                         "%lld removed, %s (%.2f s)", (long long)seq, (long long)t->step,
                         (long long)changed, (long long)removed_n, path, now_s() - t0);
        }
    }
    if (st != GRM_OK) {
        /* the base may hold rows no file recorded: start over from the files */
        dx_model_fini(&dx->base);
        grm_status st2 = dx_load(p->reg, dx->dir, 0, 0, &dx->base);
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

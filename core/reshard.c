/* core/reshard.c - `grmhost reshard`: a checkpoint of N ranks rewritten for M ranks; see
 * reshard.h for the layouts it understands and the order of its writes. With a format that
 * reads and writes by rows (load_rows, save_rows: ckpt-grm, ckpt-safetensors), the per-row
 * tensors of keyed tables are never held: each source is read twice, once for its ids and
 * everything else, once to write each row where it goes in spill files, from which the
 * targets are written a range of rows at a time (a table larger than memory is resharded in
 * about 60 bytes a row: its rs_key, rs_dest, position and id, beside the formats' pieces).
 * Otherwise (or with --in-memory) the whole step is held in memory (the N source files plus
 * the M targets' rows), one copy of each row. */
#include "checkpoint.h"
#include "reshard.h"
#include "dist.h"
#include "pipeline.h"
#include "sparse.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WHO "reshard"
#define PATH_CAP 4352

/* ---- tensors held in memory ---- */

typedef struct rs_tensor {
    char *name;          /* owned */
    grm_tensor t;        /* t.data owned (malloc); NULL when spilled */
    size_t bytes;
    int spilled;         /* a per-row tensor of a keyed table, not held: its rows are
                          * written to the spill files by a second read (spill_rows) */
} rs_tensor;

/* One checkpoint file, loaded whole (or, streaming, all but its spilled tensors). */
typedef struct rs_file {
    char path[PATH_CAP];
    rs_tensor *v;        /* [n] in file order */
    int64_t n, cap;
    int64_t got;         /* streaming: rows of v[n - 1] received */
    const struct rs_job *j;  /* streaming: the job (which tensors to spill) */
} rs_file;

/* One target file being assembled: tensors borrowed from the sources or from `owned`, or
 * (data NULL) read from the spill file of its position in its replica group. */
typedef struct rs_out {
    char path[PATH_CAP];     /* final name */
    char stage[PATH_CAP];    /* staged name, ignored by a resume */
    grm_named_tensor *v;     /* [n] */
    int64_t *spill_off;      /* [n] where v[i]'s rows start in the spill file; -1: held */
    int64_t n;
    void **owned;            /* [nowned] malloc'd payloads */
    int64_t nowned;
    int staged, spilled;     /* spilled: some tensor is read from the spill file */
} rs_out;

static int64_t numel_of(const grm_tensor *t)
{
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* Append tensor nt of `rows` rows to f: held (data allocated; its bytes copied when
 * nt holds them all) or, with spilled, described only. */
static grm_status file_add(rs_file *f, const grm_named_tensor *nt, int64_t rows, int spilled)
{
    const size_t es = grm_dtype_size(nt->tensor.dtype);
    if (!es)
        return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' has unknown dtype %d", f->path,
                          nt->name, (int)nt->tensor.dtype);
    if (f->n == f->cap) {
        int64_t cap = f->cap ? 2 * f->cap : 32;
        rs_tensor *v = realloc(f->v, (size_t)cap * sizeof *v);
        if (!v) return grm_errorf(GRM_ENOMEM, "%s: out of memory", f->path);
        f->v = v;
        f->cap = cap;
    }
    rs_tensor *x = &f->v[f->n];
    memset(x, 0, sizeof *x);
    x->t = nt->tensor;
    if (x->t.ndim >= 1) x->t.shape[0] = rows;
    x->bytes = (size_t)numel_of(&x->t) * es;
    x->name = strdup(nt->name);
    x->spilled = spilled;
    x->t.data = spilled ? NULL : malloc(x->bytes ? x->bytes : 1);
    if (!x->name || (!spilled && !x->t.data)) {
        free(x->name);
        free(x->t.data);
        return grm_errorf(GRM_ENOMEM, "%s: out of memory holding tensor '%s' (%zu bytes)",
                          f->path, nt->name, x->bytes);
    }
    if (!spilled && x->bytes && numel_of(&nt->tensor) == numel_of(&x->t))
        memcpy(x->t.data, nt->tensor.data, x->bytes);
    f->n++;
    f->got = x->t.ndim >= 1 ? nt->tensor.shape[0] : 1;
    return GRM_OK;
}

static grm_status file_visit(void *user, const grm_named_tensor *nt)
{
    return file_add(user, nt, nt->tensor.ndim >= 1 ? nt->tensor.shape[0] : 1, 0);
}

static int32_t table_of(const struct rs_job *j, const char *name);
static int spills(const struct rs_job *j, const rs_file *f, const grm_named_tensor *nt);

/* load_rows' visitor of the first read: every tensor held whole, but the per-row tensors of
 * keyed tables (spills) described only. */
static grm_status file_piece(void *user, const grm_named_tensor *nt, int64_t row0, int64_t rows)
{
    rs_file *f = user;
    const int64_t m = nt->tensor.ndim >= 1 ? nt->tensor.shape[0] : 1;
    grm_status st;
    if (row0 == 0) {
        if ((st = file_add(f, nt, rows, spills(f->j, f, nt))) != GRM_OK) return st;
        if (m == rows || nt->tensor.ndim == 0) return GRM_OK;
        f->got = 0;
    }
    rs_tensor *x = f->n ? &f->v[f->n - 1] : NULL;
    if (!x || strcmp(x->name, nt->name) != 0 || x->t.ndim < 1 || row0 != f->got
        || rows != x->t.shape[0])
        return grm_errorf(GRM_EINTERNAL, "%s: tensor '%s': rows from %lld arrive out of order",
                          f->path, nt->name, (long long)row0);
    if ((st = grm__ckpt_piece_fits(f->path, nt, row0, rows)) != GRM_OK) return st;
    const size_t rb = grm__ckpt_row_bytes(&x->t);
    if (!x->spilled && m > 0)
        memcpy((char *)x->t.data + (size_t)row0 * rb, nt->tensor.data, (size_t)m * rb);
    f->got = row0 + m;
    return GRM_OK;
}

static void file_fini(rs_file *f)
{
    for (int64_t i = 0; f->v && i < f->n; i++) {
        free(f->v[i].name);
        free(f->v[i].t.data);
    }
    free(f->v);
    f->v = NULL;
    f->n = f->cap = 0;
}

static const rs_tensor *file_find(const rs_file *f, const char *name)
{
    for (int64_t i = 0; i < f->n; i++)
        if (strcmp(f->v[i].name, name) == 0) return &f->v[i];
    return NULL;
}

static void out_fini(rs_out *o)
{
    for (int64_t i = 0; i < o->nowned; i++) free(o->owned[i]);
    free(o->owned);
    free(o->v);
    free(o->spill_off);
    o->owned = NULL;
    o->v = NULL;
    o->spill_off = NULL;
    o->n = o->nowned = 0;
    o->spilled = 0;
}

/* Append tensor (name borrowed, data borrowed or, with own, owned by o). */
static grm_status out_add(rs_out *o, int64_t cap, const char *name, grm_tensor t, int own)
{
    if (!o->v) {
        o->v = calloc((size_t)cap, sizeof *o->v);
        o->owned = calloc((size_t)cap, sizeof *o->owned);
        o->spill_off = malloc((size_t)cap * sizeof *o->spill_off);
        if (!o->v || !o->owned || !o->spill_off) return grm_errorf(GRM_ENOMEM, "out of memory");
    }
    GRM_ASSERT(o->n < cap);
    if (own) o->owned[o->nowned++] = t.data;
    o->spill_off[o->n] = -1;
    o->v[o->n++] = (grm_named_tensor){ name, t };
    return GRM_OK;
}

/* ---- where checkpoints live ---- */

/* A path into buf [cap]; GRM_EINVAL when it does not fit. */
static grm_status pathf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static grm_status pathf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap)
        return grm_errorf(GRM_EINVAL, "%.200s...: path longer than %zu bytes; use a shorter "
                          "[checkpoint] dir", buf, cap - 1);
    return GRM_OK;
}




/* The step-S.ext checkpoints of dir: the newest (-1: none), and the file of step `want` into
 * path [cap] ("" when absent). A missing dir holds none. */
static grm_status scan_dir(const char *dir, const char *ext, int64_t want, int64_t *newest,
                           char *path, size_t cap)
{
    *newest = -1;
    if (path) path[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return GRM_OK;
        return grm_errorf(GRM_EIO, "%s: cannot read the checkpoint directory: %s", dir,
                          strerror(errno));
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t s;
        if (!grm__ckpt_is_step_name(e->d_name, ext, &s)) continue;
        if (s > *newest) *newest = s;
        if (path && s == want) snprintf(path, cap, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return GRM_OK;
}

/* The world size whose checkpoints dir holds: o->from, or the only one found; `target`
 * (> 0: a reshard to it was cut short after it published, grm__reshard) is not counted. */
static grm_status find_world(const char *dir, const char *ext, int32_t from, int32_t target,
                             int32_t *world)
{
    DIR *d = opendir(dir);
    if (!d)
        return grm_errorf(errno == ENOENT ? GRM_ENOTFOUND : GRM_EIO, "%s: cannot read the "
                          "checkpoint directory: %s; train first, or check [checkpoint] dir",
                          dir, strerror(errno));
    int32_t seen[16];
    int nseen = 0, top = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int r, n;
        int64_t s;
        if (grm__ckpt_is_step_name(e->d_name, ext, &s)) top = 1;
        if (!grm__ckpt_is_rank_dir(e->d_name, &r, &n)) continue;
        int k = 0;
        while (k < nseen && seen[k] != n) k++;
        if (k == nseen && nseen < 16) seen[nseen++] = n;
    }
    closedir(d);
    if (top) seen[nseen < 16 ? nseen++ : 15] = 1;
    if (from > 0) {
        for (int k = 0; k < nseen; k++)
            if (seen[k] == from) {
                *world = from;
                return GRM_OK;
            }
        return grm_errorf(GRM_ENOTFOUND, "%s: holds no checkpoints of %d rank%s (%s); check "
                          "--from", dir, (int)from, from == 1 ? "" : "s",
                          from == 1 ? "step-S.ext files" : "rank-R-of-N directories");
    }
    if (target > 0 && nseen > 1)
        for (int k = 0; k < nseen; k++)
            if (seen[k] == target) {
                seen[k] = seen[--nseen];
                break;
            }
    if (nseen == 0)
        return grm_errorf(GRM_ENOTFOUND, "%s: holds no checkpoints (no step-S.%s file, no "
                          "rank-R-of-N directory); train first, or check [checkpoint] dir",
                          dir, ext);
    if (nseen > 1) {
        char list[128] = "";
        size_t w = 0;
        for (int k = 0; k < nseen && w < sizeof list - 16; k++)
            w += (size_t)snprintf(list + w, sizeof list - w, "%s%d", k ? ", " : "",
                                  (int)seen[k]);
        return grm_errorf(GRM_EINVAL, "%s: holds checkpoints of several world sizes (%s "
                          "ranks); pass --from N to pick one", dir, list);
    }
    *world = seen[0];
    return GRM_OK;
}


/* ---- ownership (core/dist.h) ---- */

/* Ranks per replica group on a world of n: [train] sparse_group, or the world. */
static int32_t group_of(int64_t sparse_group, int32_t n)
{
    return sparse_group > 0 && n > 1 ? (int32_t)sparse_group : n;
}

/* Position in its group of the rank that owns key (dist.h's ownership, seen from rank 0). */
static int32_t owner_in_group(int64_t key, int32_t I)
{
    return grm__dist_owner_of(key, 0, I);
}

/* ---- the job ---- */

/* Where a source row of a streamed table goes. */
typedef struct rs_dest {
    int64_t pos;             /* its row in the target files */
    int32_t to;              /* the targets' position in their replica group */
    int32_t replica;         /* 1: a copy of the row an earlier source rank holds (compared
                              * with it, its i64 counters merged) */
} rs_dest;

typedef struct rs_job {
    char stage_dir[PATH_CAP];   /* dir/.reshard-to-M: this run's staged files */
    const grm__pipeline *p;
    const grm_ckpt_ops *kops;
    void *kinst;
    const char *ext;
    const char *dir;
    int32_t N, M;            /* source and target world sizes */
    int32_t IN, IM;          /* their group sizes */
    int64_t step;
    int quiet;
    rs_file *src;            /* [N] */
    rs_out *dst;             /* [M] */
    int64_t *rows, *moved;   /* [nphys] per table: rows written (group 0), rows that changed
                                rank */
    char *settings;          /* rank 0's "settings":{...} member, carried to the new files
                                (NULL: it had none), owned */
    int stream;              /* keyed per-row tensors go through the spill files */
    rs_dest ***dest;         /* [nphys][N] per source row of a streamed table, or NULL */
    int64_t *spill_bytes;    /* [IM] size of the spill file of each position in a group */
    int *spill_fd;           /* [IM] (-1: none yet) */
} rs_job;

/* Table of tensor name (the longest "emb.<table>." prefix), or -1. */
static int32_t table_in(const grm__pipeline *p, const char *name)
{
    int32_t best = -1;
    size_t blen = 0;
    if (strncmp(name, "emb.", 4) != 0) return -1;
    for (int32_t T = 0; T < p->nphys; T++) {
        const char *tn = p->phys_names[T];
        size_t n = strlen(tn);
        if (strncmp(name + 4, tn, n) == 0 && name[4 + n] == '.' && n > blen) {
            best = T;
            blen = n;
        }
    }
    return best;
}

static int32_t table_of(const rs_job *j, const char *name)
{
    return table_in(j->p, name);
}

/* Is tensor nt of file f (being read) a per-row tensor of a keyed table whose rows go
 * through the spill files: streaming, 2-d or more, after its table's ids. A row tensor ahead
 * of its ids (no store grm ships writes one) is held, as without streaming. */
static int spills(const rs_job *j, const rs_file *f, const grm_named_tensor *nt)
{
    const int32_t T = j->stream ? table_of(j, nt->name) : -1;
    if (T < 0 || nt->tensor.ndim < 2) return 0;
    char ids_name[512];
    snprintf(ids_name, sizeof ids_name, "emb.%s.ids", j->p->phys_names[T]);
    return file_find(f, ids_name) != NULL;
}

/* Read "key":NUMBER from the metadata JSON; 0 when absent. */
static int meta_int(const char *meta, const char *key, long long *v)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *s = strstr(meta, pat);
    return s && sscanf(s + strlen(pat), "%lld", v) == 1;
}

/* Load the N source files of `stem` (a step, or "best"), checking the metadata of each. */
static grm_status load_sources(rs_job *j, const char *stem, int64_t expect_step)
{
    grm_status st;
    for (int32_t r = 0; r < j->N; r++) {
        rs_file *f = &j->src[r];
        char rd[PATH_CAP], *meta;
        grm__ckpt_rank_dir(rd, sizeof rd, j->dir, r, j->N);
        if ((st = pathf(f->path, sizeof f->path, "%s/%s.%s", rd, stem, j->ext)) != GRM_OK)
            return st;
        if (expect_step >= 0) {   /* the name as train wrote it, whatever its width */
            int64_t newest;
            char found[PATH_CAP];
            if ((st = scan_dir(rd, j->ext, expect_step, &newest, found, sizeof found))
                != GRM_OK)
                return st;
            if (found[0]) snprintf(f->path, sizeof f->path, "%s", found);
        }
        if (access(f->path, R_OK) != 0)
            return grm_errorf(GRM_ENOTFOUND, "%s: missing (rank %d of %d has no checkpoint "
                              "of %s); restore it, or pass --step with a step every rank "
                              "wrote", f->path, (int)r, (int)j->N, stem);
        if ((st = grm__ckpt_read_meta(j->kops, j->kinst, f->path, &meta)) != GRM_OK)
            return st;
        long long ws, rk;
        if (meta_int(meta, "world_size", &ws) && meta_int(meta, "rank", &rk)
            && (ws != j->N || rk != r)) {
            free(meta);
            return grm_errorf(GRM_EFORMAT, "%s: written by rank %lld of %lld but it sits "
                              "where rank %d of %d belongs; put the file back where it came "
                              "from", f->path, rk, ws, (int)r, (int)j->N);
        }
        size_t slen;
        const char *set = grm__ckpt_meta_settings(meta, &slen);
        if (r == 0) {   /* each file set (a step, then best) carries its own */
            free(j->settings);
            j->settings = NULL;
        }
        if (r == 0 && set && !(j->settings = strndup(set, slen))) {
            free(meta);
            return grm_errorf(GRM_ENOMEM, "out of memory");
        }
        free(meta);
        if (!j->quiet) grm__log(GRM_LOG_INFO, WHO, "reading %s", f->path);
        f->j = j;
        st = j->stream ? j->kops->load_rows(j->kinst, f->path, file_piece, f)
                       : j->kops->load(j->kinst, f->path, file_visit, f);
        if (st != GRM_OK) return st;
        if (f->n > 0 && f->v[f->n - 1].t.ndim >= 1 && f->got != f->v[f->n - 1].t.shape[0])
            return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' ends after %lld of its %lld rows",
                              f->path, f->v[f->n - 1].name, (long long)f->got,
                              (long long)f->v[f->n - 1].t.shape[0]);
        const rs_tensor *ts = file_find(f, "trainer.state");
        if (!ts || ts->t.dtype != GRM_DTYPE_I64 || numel_of(&ts->t) < 1)
            return grm_errorf(GRM_EFORMAT, "%s: has no trainer.state tensor; not a grmhost "
                              "training checkpoint", f->path);
        const int64_t fs = ((const int64_t *)ts->t.data)[0];
        if (expect_step >= 0 && fs != expect_step)
            return grm_errorf(GRM_EFORMAT, "%s: its trainer.state says step %lld but it is "
                              "named step %lld: the ranks disagree on the step; restore the "
                              "rank's own file, or pass --step with another step",
                              f->path, (long long)fs, (long long)expect_step);
    }
    return GRM_OK;
}

static int same_shape(const grm_tensor *a, const grm_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

/* The replicated state (every tensor outside emb.*) must be bitwise equal on every rank,
 * with the same tensor names; every emb.* tensor must belong to a table of the pipeline. */
static grm_status check_replicated(const rs_job *j)
{
    const rs_file *f0 = &j->src[0];
    for (int32_t r = 0; r < j->N; r++) {
        const rs_file *f = &j->src[r];
        int64_t nrep = 0;
        for (int64_t i = 0; i < f->n; i++) {
            const rs_tensor *x = &f->v[i];
            if (strncmp(x->name, "emb.", 4) == 0) {
                if (table_of(j, x->name) < 0)
                    return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' belongs to no table of "
                                      "this pipeline; pass the INI that wrote the "
                                      "checkpoint", f->path, x->name);
                continue;
            }
            nrep++;
            const rs_tensor *y = file_find(f0, x->name);
            if (!y)
                return grm_errorf(GRM_EFORMAT, "%s: holds '%s', which %s lacks: the ranks "
                                  "were written by different pipelines", f->path, x->name,
                                  f0->path);
            if (!same_shape(&x->t, &y->t) || memcmp(x->t.data, y->t.data, x->bytes) != 0) {
                int64_t ndiff = 0, n = 0;
                if (same_shape(&x->t, &y->t)) {
                    const size_t es = grm_dtype_size(x->t.dtype);
                    n = numel_of(&x->t);
                    for (int64_t k = 0; k < n; k++)
                        ndiff += memcmp((const char *)x->t.data + (size_t)k * es,
                                        (const char *)y->t.data + (size_t)k * es, es) != 0;
                }
                return grm_errorf(GRM_EFORMAT, "%s: replicated tensor '%s' differs from %s's "
                                  "(%lld of %lld values%s): the ranks disagree, so there is "
                                  "no one model to reshard; pass --step with an older step, "
                                  "or train again", f->path, x->name, f0->path,
                                  (long long)ndiff, (long long)n,
                                  n ? "" : "; the shapes differ");
            }
        }
        int64_t nrep0 = 0;
        for (int64_t i = 0; i < f0->n; i++) nrep0 += strncmp(f0->v[i].name, "emb.", 4) != 0;
        if (nrep != nrep0)
            return grm_errorf(GRM_EFORMAT, "%s: holds %lld replicated tensors, %s holds %lld: "
                              "the ranks were written by different pipelines", f->path,
                              (long long)nrep, f0->path, (long long)nrep0);
    }
    return GRM_OK;
}

typedef struct rs_key {
    int64_t key;
    int32_t rank;
    int64_t idx;
} rs_key;

static int cmp_key(const void *a, const void *b)
{
    const rs_key *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Bytes of one row of a per-row tensor (all dims but the first). */
static int is_row_tensor_keyed(const rs_tensor *x, const char *ids_name)
{
    return strcmp(x->name, ids_name) == 0 || x->t.ndim >= 2;
}

/* Table state of a keyed table (1-d, not .ids): equal on every rank, or (i64) the
 * element-wise maximum (emb-dynamic's clock, key slots and lookup counters). */
static grm_status table_state(rs_job *j, const char *name, grm_tensor *out, int *own)
{
    const rs_tensor *x0 = file_find(&j->src[0], name);
    int differ = 0;
    for (int32_t r = 1; r < j->N; r++) {
        const rs_tensor *x = file_find(&j->src[r], name);
        if (!x || !same_shape(&x->t, &x0->t))
            return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' is %s there than in %s; the ranks "
                              "were written by different pipelines", j->src[r].path, name,
                              x ? "shaped otherwise" : "missing", j->src[0].path);
        differ |= memcmp(x->t.data, x0->t.data, x0->bytes) != 0;
    }
    *out = x0->t;
    *own = 0;
    if (!differ) return GRM_OK;
    if (x0->t.dtype != GRM_DTYPE_I64)
        return grm_errorf(GRM_EFORMAT, "%s: table state '%s' differs between the ranks and is "
                          "not an integer counter; reshard cannot merge it", j->src[0].path,
                          name);
    const int64_t n = numel_of(&x0->t);
    int64_t *m = malloc((size_t)(n ? n : 1) * sizeof *m);
    if (!m) return grm_errorf(GRM_ENOMEM, "out of memory");
    memcpy(m, x0->t.data, x0->bytes);
    for (int32_t r = 1; r < j->N; r++) {
        const int64_t *v = file_find(&j->src[r], name)->t.data;
        for (int64_t k = 0; k < n; k++) if (v[k] > m[k]) m[k] = v[k];
    }
    out->data = m;
    *own = 1;
    return GRM_OK;
}

/* Rows of keyed table T: gather every rank's (key, rank, index), sort by key, check replicas
 * (hierarchical sharding) agree, and hand every target rank the rows it owns. Tensors are
 * added to the targets in the order of src[0]'s file. */
static grm_status reshard_keyed(rs_job *j, int32_t T, const char *ids_name, int64_t cap)
{
    const rs_file *f0 = &j->src[0];
    grm_status st = GRM_OK;
    int64_t total = 0;
    int streamed = 0;       /* some per-row tensor of T is spilled */
    for (int32_t r = 0; r < j->N; r++) {
        const rs_tensor *ids = file_find(&j->src[r], ids_name);
        if (!ids || ids->t.dtype != GRM_DTYPE_I64 || ids->t.ndim != 1)
            return grm_errorf(GRM_EFORMAT, "%s: '%s' is %s; the ranks were written by "
                              "different stores", j->src[r].path, ids_name,
                              ids ? "not an i64 vector" : "missing");
        total += ids->t.shape[0];
        /* every per-row tensor of rank r has its n rows, and the rows of rank 0's shape */
        for (int64_t i = 0; i < f0->n; i++) {
            const rs_tensor *y = &f0->v[i];
            if (table_of(j, y->name) != T || !is_row_tensor_keyed(y, ids_name)) continue;
            const rs_tensor *x = file_find(&j->src[r], y->name);
            if (!x || x->t.dtype != y->t.dtype || x->t.ndim != y->t.ndim
                || grm__ckpt_row_bytes(&x->t) != grm__ckpt_row_bytes(&y->t)
                || x->t.shape[0] != ids->t.shape[0])
                return grm_errorf(GRM_EFORMAT, "%s: per-row tensor '%s' is %s; expected %lld "
                                  "rows like '%s'", j->src[r].path, y->name,
                                  x ? "shaped otherwise" : "missing",
                                  (long long)ids->t.shape[0], ids_name);
            if (x->spilled != y->spilled)
                return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' comes %s its table's ids, "
                                  "unlike in %s: the ranks were written by different stores",
                                  j->src[r].path, y->name, x->spilled ? "after" : "before",
                                  f0->path);
            streamed |= y->spilled;
        }
    }
    rs_key *k = malloc((size_t)(total ? total : 1) * sizeof *k);
    int64_t *count = calloc((size_t)j->M, sizeof *count);
    int32_t *to = malloc((size_t)(total ? total : 1) * sizeof *to);
    int64_t *wpos = NULL;   /* streamed: [u] a kept row's position in its targets */
    rs_dest **dest = NULL;
    if (!k || !count || !to) {
        st = grm_errorf(GRM_ENOMEM, "out of memory sorting %lld rows", (long long)total);
        goto out;
    }
    if (streamed) {
        dest = j->dest[T] = calloc((size_t)j->N, sizeof *dest);
        wpos = malloc((size_t)(total ? total : 1) * sizeof *wpos);
        for (int32_t r = 0; dest && r < j->N; r++) {
            const int64_t nr = file_find(&j->src[r], ids_name)->t.shape[0];
            if (!(dest[r] = malloc((size_t)(nr ? nr : 1) * sizeof **dest))) break;
        }
        if (!dest || !wpos || !dest[j->N - 1]) {
            st = grm_errorf(GRM_ENOMEM, "out of memory placing %lld rows", (long long)total);
            goto out;
        }
    }
    int64_t n = 0;
    for (int32_t r = 0; r < j->N; r++) {
        const rs_tensor *ids = file_find(&j->src[r], ids_name);
        const int64_t *v = ids->t.data;
        for (int64_t i = 0; i < ids->t.shape[0]; i++) k[n++] = (rs_key){ v[i], r, i };
    }
    qsort(k, (size_t)n, sizeof *k, cmp_key);
    /* drop replicas (same key on several source ranks), checking they are equal */
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++) {
        const int dup = u > 0 && k[u - 1].key == k[i].key;
        /* streamed: the kept row it is (its position, once known, replaces it) */
        if (dest) dest[k[i].rank][k[i].idx] = (rs_dest){ dup ? u - 1 : u, 0, dup };
        if (dup) {
            for (int64_t t = 0; t < f0->n; t++) {
                const rs_tensor *y = &f0->v[t];
                if (table_of(j, y->name) != T || !is_row_tensor_keyed(y, ids_name)
                    || y->spilled)      /* compared as spill_rows writes it */
                    continue;
                const rs_tensor *a = file_find(&j->src[k[u - 1].rank], y->name);
                const rs_tensor *b = file_find(&j->src[k[i].rank], y->name);
                const size_t rb = grm__ckpt_row_bytes(&y->t);
                char *ra = (char *)a->t.data + (size_t)k[u - 1].idx * rb;
                const char *rb2 = (const char *)b->t.data + (size_t)k[i].idx * rb;
                if (memcmp(ra, rb2, rb) == 0) continue;
                if (y->t.dtype == GRM_DTYPE_I64) {   /* per-row counters: the maximum */
                    int64_t *va = (int64_t *)(void *)ra;
                    const int64_t *vb = (const int64_t *)(const void *)rb2;
                    for (size_t e = 0; e < rb / sizeof *va; e++)
                        if (vb[e] > va[e]) va[e] = vb[e];
                } else {
                    st = grm_errorf(GRM_EFORMAT, "%s and %s: key %lld of '%s' differs between "
                                    "the two replicas; the ranks disagree, so there is no one "
                                    "model to reshard", j->src[k[u - 1].rank].path,
                                    j->src[k[i].rank].path, (long long)k[i].key, y->name);
                    goto out;
                }
            }
            continue;
        }
        k[u++] = k[i];
    }
    /* target rank of group 0 of every row; a row goes to that position in every group */
    for (int64_t i = 0; i < u; i++) {
        to[i] = owner_in_group(k[i].key, j->IM);
        if (to[i] != k[i].rank % j->IN) j->moved[T]++;   /* held elsewhere before */
        if (wpos) wpos[i] = count[to[i]];
        for (int32_t t = to[i]; t < j->M; t += j->IM) count[t]++;
    }
    j->rows[T] = u;
    for (int32_t r = 0; dest && r < j->N; r++) {
        const int64_t nr = file_find(&j->src[r], ids_name)->t.shape[0];
        for (int64_t i = 0; i < nr; i++) {
            rs_dest *d = &dest[r][i];
            d->to = to[d->pos];
            d->pos = wpos[d->pos];
        }
    }
    for (int64_t t = 0; t < f0->n; t++) {
        const rs_tensor *y = &f0->v[t];
        if (table_of(j, y->name) != T) continue;
        if (!is_row_tensor_keyed(y, ids_name)) {
            grm_tensor ts;
            int own;
            if ((st = table_state(j, y->name, &ts, &own)) != GRM_OK) goto out;
            for (int32_t m = 0; m < j->M; m++)
                if ((st = out_add(&j->dst[m], cap, y->name, ts, own && m == 0)) != GRM_OK) {
                    if (own && m == 0) free(ts.data);
                    goto out;
                }
            continue;
        }
        const size_t rb = grm__ckpt_row_bytes(&y->t);
        for (int32_t m = 0; y->spilled && m < j->M; m++) {
            /* rows from the spill file of position m % IM, written by spill_rows; the
             * targets of one position (one per replica group) share its region */
            grm_tensor x = y->t;
            x.shape[0] = count[m];
            x.data = NULL;
            rs_out *o = &j->dst[m];
            if ((st = out_add(o, cap, y->name, x, 0)) != GRM_OK) goto out;
            o->spilled = 1;
            if (m < j->IM) {
                o->spill_off[o->n - 1] = j->spill_bytes[m];
                j->spill_bytes[m] += count[m] * (int64_t)rb;
            } else {
                o->spill_off[o->n - 1] = j->dst[m % j->IM].spill_off[o->n - 1];
            }
        }
        for (int32_t m = 0; !y->spilled && m < j->M; m++) {
            grm_tensor x = y->t;
            x.shape[0] = count[m];
            x.data = malloc(count[m] ? (size_t)count[m] * rb : 1);
            if (!x.data) {
                st = grm_errorf(GRM_ENOMEM, "out of memory for '%s' of rank %d", y->name,
                                (int)m);
                goto out;
            }
            if ((st = out_add(&j->dst[m], cap, y->name, x, 1)) != GRM_OK) {
                free(x.data);
                goto out;
            }
            int64_t w = 0;
            for (int64_t i = 0; i < u; i++) {
                if (to[i] != m % j->IM) continue;
                const rs_tensor *s = file_find(&j->src[k[i].rank], y->name);
                memcpy((char *)x.data + (size_t)w * rb,
                       (const char *)s->t.data + (size_t)k[i].idx * rb, rb);
                w++;
            }
        }
    }
out:
    free(k);
    free(count);
    free(to);
    free(wpos);
    return st;
}

/* ---- the spill files: per-row tensors of keyed tables, a range of rows at a time ---- */

static grm_status pwrite_all(int fd, const void *buf, size_t n, int64_t off, const char *what)
{
    for (size_t w = 0; w < n;) {
        const ssize_t k = pwrite(fd, (const char *)buf + w, n - w, (off_t)off + (off_t)w);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return grm_errorf(GRM_EIO, "%s: cannot write the spill file: %s; free space "
                              "there (it takes the table's size, uncompressed) or pass "
                              "--in-memory", what, k < 0 ? strerror(errno) : "short write");
        w += (size_t)k;
    }
    return GRM_OK;
}

static grm_status pread_all(int fd, void *buf, size_t n, int64_t off, const char *what)
{
    for (size_t r = 0; r < n;) {
        const ssize_t k = pread(fd, (char *)buf + r, n - r, (off_t)off + (off_t)r);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return grm_errorf(GRM_EIO, "%s: cannot read the spill file back: %s", what,
                              k < 0 ? strerror(errno) : "it is shorter than written");
        r += (size_t)k;
    }
    return GRM_OK;
}

/* The second read of source rank r: each row of a spilled tensor written where its dest
 * says, in runs of consecutive rows; a replica's row compared with the copy an earlier rank
 * wrote (float rows must be equal, i64 counters become their maximum), as reshard_keyed
 * does for held tensors. */
typedef struct rs_spill_ctx {
    rs_job *j;
    int32_t r;
    void *row;              /* [row bytes] a replica's stored copy */
    size_t cap;
} rs_spill_ctx;

static grm_status spill_piece(void *user, const grm_named_tensor *nt, int64_t row0, int64_t rows)
{
    rs_spill_ctx *c = user;
    rs_job *j = c->j;
    const rs_file *f = &j->src[c->r];
    const rs_tensor *x = file_find(f, nt->name);
    if (!x || !x->spilled) return GRM_OK;       /* held since the first read */
    const int64_t m = nt->tensor.shape[0];
    if (rows != x->t.shape[0] || m < 0 || row0 < 0 || m > rows - row0)
        return grm_errorf(GRM_EFORMAT, "%s: tensor '%s': rows [%lld, +%lld) of %lld, %lld at "
                          "the first read; the file changed while it was resharded", f->path,
                          nt->name, (long long)row0, (long long)m, (long long)rows,
                          (long long)x->t.shape[0]);
    const int32_t T = table_of(j, nt->name);
    int64_t oi = 0;         /* the tensor's index in the targets */
    while (oi < j->dst[0].n && strcmp(j->dst[0].v[oi].name, nt->name) != 0) oi++;
    GRM_ASSERT(T >= 0 && j->dest[T] && oi < j->dst[0].n);
    const rs_dest *d = j->dest[T][c->r] + row0;
    const size_t rb = grm__ckpt_row_bytes(&nt->tensor);
    const char *src = nt->tensor.data;
    grm_status st = GRM_OK;
    int64_t i = 0;
    while (i < m && st == GRM_OK) {
        const int32_t g = d[i].to;
        const int64_t off = j->dst[g].spill_off[oi] + d[i].pos * (int64_t)rb;
        if (!d[i].replica) {
            int64_t e = i + 1;  /* the run of rows that follow each other in the target */
            while (e < m && !d[e].replica && d[e].to == g && d[e].pos == d[e - 1].pos + 1) e++;
            st = pwrite_all(j->spill_fd[g], src + (size_t)i * rb, (size_t)(e - i) * rb, off,
                            j->stage_dir);
            i = e;
            continue;
        }
        if (rb > c->cap) {
            void *b = realloc(c->row, rb);
            if (!b) return grm_errorf(GRM_ENOMEM, "out of memory");
            c->row = b;
            c->cap = rb;
        }
        if ((st = pread_all(j->spill_fd[g], c->row, rb, off, j->stage_dir)) != GRM_OK) break;
        const char *mine = src + (size_t)i * rb;
        if (memcmp(c->row, mine, rb) != 0) {
            if (nt->tensor.dtype != GRM_DTYPE_I64) {
                char ids_name[512];
                snprintf(ids_name, sizeof ids_name, "emb.%s.ids", j->p->phys_names[T]);
                const int64_t *key = file_find(f, ids_name)->t.data;
                return grm_errorf(GRM_EFORMAT, "%s: key %lld of '%s' differs from the copy an "
                                  "earlier rank holds; the ranks disagree, so there is no one "
                                  "model to reshard", f->path, (long long)key[row0 + i],
                                  nt->name);
            }
            int64_t *a = c->row;            /* per-row counters: the maximum */
            const int64_t *b = (const void *)mine;
            for (size_t q = 0; q < rb / sizeof *a; q++)
                if (b[q] > a[q]) a[q] = b[q];
            st = pwrite_all(j->spill_fd[g], c->row, rb, off, j->stage_dir);
        }
        i++;
    }
    return st;
}

/* Create the spill files (one per position in a replica group, unlinked at once: nothing is
 * left behind by a kill) and write every spilled row into them, reading each source again. */
static grm_status spill_rows(rs_job *j)
{
    int any = 0;
    for (int32_t g = 0; g < j->IM; g++) any |= j->dst[g].spilled;
    if (!any) return GRM_OK;
    grm_status st = grm__ckpt_make_dirs(j->stage_dir);
    int64_t total = 0;
    for (int32_t g = 0; g < j->IM && st == GRM_OK; g++) {
        char path[PATH_CAP];
        if ((st = pathf(path, sizeof path, "%s/spill-XXXXXX", j->stage_dir)) != GRM_OK) break;
        j->spill_fd[g] = mkstemp(path);
        if (j->spill_fd[g] < 0)
            return grm_errorf(GRM_EIO, "%s: cannot create a spill file: %s", path,
                              strerror(errno));
        unlink(path);
        total += j->spill_bytes[g];
        if (ftruncate(j->spill_fd[g], (off_t)j->spill_bytes[g]) != 0)
            return grm_errorf(GRM_EIO, "%s: cannot size the spill file to %lld bytes: %s; "
                              "free space there or pass --in-memory", j->stage_dir,
                              (long long)j->spill_bytes[g], strerror(errno));
    }
    if (st != GRM_OK) return st;
    if (!j->quiet)
        grm__log(GRM_LOG_INFO, WHO, "moving the rows through %d spill file%s in %s (%.1f MB)",
                 (int)j->IM, j->IM == 1 ? "" : "s", j->stage_dir, (double)total / 1e6);
    rs_spill_ctx c = { .j = j };
    for (int32_t r = 0; r < j->N && st == GRM_OK; r++) {
        c.r = r;
        st = j->kops->load_rows(j->kinst, j->src[r].path, spill_piece, &c);
    }
    free(c.row);
    return st;
}

/* save_rows' reader: rows of target tensor `index` from its spill file. */
typedef struct rs_rows_ctx {
    const rs_out *o;
    int fd;
    const char *what;
} rs_rows_ctx;

static grm_status out_rows(void *user, int64_t index, int64_t row0, int64_t n, void *out)
{
    const rs_rows_ctx *c = user;
    const size_t rb = grm__ckpt_row_bytes(&c->o->v[index].tensor);
    GRM_ASSERT(c->o->spill_off[index] >= 0);
    return pread_all(c->fd, out, (size_t)n * rb, c->o->spill_off[index] + row0 * (int64_t)rb,
                     c->what);
}

static void spill_fini(rs_job *j)
{
    for (int32_t T = 0; j->dest && T < j->p->nphys; T++) {
        for (int32_t r = 0; j->dest[T] && r < j->N; r++) free(j->dest[T][r]);
        free(j->dest[T]);
        j->dest[T] = NULL;
    }
    for (int32_t g = 0; j->spill_fd && g < j->IM; g++) {
        if (j->spill_fd[g] >= 0) close(j->spill_fd[g]);
        j->spill_fd[g] = -1;
        j->spill_bytes[g] = 0;
    }
}

/* Rows of indexed table T: row i of every tensor comes from its owner among the N ranks;
 * every target file gets the assembled table. */
static grm_status reshard_indexed(rs_job *j, int32_t T, int64_t cap)
{
    const rs_file *f0 = &j->src[0];
    grm_status st;
    int64_t R = -1;
    for (int64_t t = 0; t < f0->n; t++) {
        const rs_tensor *y = &f0->v[t];
        if (table_of(j, y->name) != T) continue;
        if (y->t.ndim < 1 || (R >= 0 && y->t.shape[0] != R))
            return grm_errorf(GRM_EFORMAT, "%s: table tensor '%s' does not have the table's "
                              "%lld rows as its first dim and the table has no .ids tensor; "
                              "reshard knows keyed (.ids) and indexed stores only", f0->path,
                              y->name, (long long)R);
        R = y->t.shape[0];
        for (int32_t r = 1; r < j->N; r++) {
            const rs_tensor *x = file_find(&j->src[r], y->name);
            if (!x || !same_shape(&x->t, &y->t))
                return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' is %s there than in %s; the "
                                  "ranks were written by different pipelines",
                                  j->src[r].path, y->name, x ? "shaped otherwise" : "missing",
                                  f0->path);
        }
        const size_t rb = grm__ckpt_row_bytes(&y->t);
        grm_tensor x = y->t;
        x.data = malloc(R ? (size_t)R * rb : 1);
        if (!x.data) return grm_errorf(GRM_ENOMEM, "out of memory for '%s'", y->name);
        for (int64_t i = 0; i < R; i++) {
            const rs_tensor *s = file_find(&j->src[owner_in_group(i, j->IN)], y->name);
            memcpy((char *)x.data + (size_t)i * rb, (const char *)s->t.data + (size_t)i * rb,
                   rb);
        }
        for (int32_t m = 0; m < j->M; m++)
            if ((st = out_add(&j->dst[m], cap, y->name, x, m == 0)) != GRM_OK) {
                if (m == 0) free(x.data);
                return st;
            }
    }
    j->rows[T] = R > 0 ? R : 0;
    for (int64_t i = 0; i < R; i++)
        j->moved[T] += owner_in_group(i, j->IM) != owner_in_group(i, j->IN);
    return GRM_OK;
}

/* Reshard the file set `stem` (step-S, or best) from the N ranks to the M ranks: load, check,
 * assemble and stage the M files (renamed into place by the caller). */
static grm_status reshard_set(rs_job *j, const char *stem, int64_t expect_step)
{
    grm_status st;
    if ((st = load_sources(j, stem, expect_step)) != GRM_OK) return st;
    if ((st = check_replicated(j)) != GRM_OK) return st;
    const rs_file *f0 = &j->src[0];
    const int64_t cap = f0->n;
    const rs_tensor *state = file_find(f0, "trainer.state");
    const int64_t seed = numel_of(&state->t) > 1 ? ((const int64_t *)state->t.data)[1] : 0;
    memset(j->rows, 0, (size_t)j->p->nphys * sizeof *j->rows);
    memset(j->moved, 0, (size_t)j->p->nphys * sizeof *j->moved);
    /* tables first in file order of their first tensor; replicated tensors by pointer */
    for (int64_t i = 0; i < f0->n; i++) {
        const rs_tensor *y = &f0->v[i];
        const int32_t T = table_of(j, y->name);
        if (T < 0) {
            for (int32_t m = 0; m < j->M; m++)
                if ((st = out_add(&j->dst[m], cap, y->name, y->t, 0)) != GRM_OK) return st;
            continue;
        }
        int first = 1;   /* table already done at an earlier tensor? */
        for (int64_t q = 0; q < i && first; q++) first = table_of(j, f0->v[q].name) != T;
        if (!first) continue;
        char ids_name[512];
        snprintf(ids_name, sizeof ids_name, "emb.%s.ids", j->p->phys_names[T]);
        st = file_find(f0, ids_name) ? reshard_keyed(j, T, ids_name, cap)
                                     : reshard_indexed(j, T, cap);
        if (st != GRM_OK) return st;
    }
    GRM_ASSERT(j->dst[0].n == cap);
    if ((st = spill_rows(j)) != GRM_OK) return st;
    char name[512];
    grm__json_escape(name, sizeof name, j->p->set.name);
    for (int32_t m = 0; m < j->M; m++) {
        rs_out *o = &j->dst[m];
        char rd[PATH_CAP], sd[PATH_CAP];
        const char *file = strrchr(f0->path, '/') + 1;
        grm__ckpt_rank_dir(rd, sizeof rd, j->dir, m, j->M);
        /* staged under dir/.reshard-to-M/ (no rank-R-of-N name a resume or a rerun would
         * count as a world size), moved into rd by publish */
        if ((st = pathf(sd, sizeof sd, "%s/%s%s", j->stage_dir, j->M > 1 ? rd + strlen(j->dir)
                        + 1 : "", "")) != GRM_OK
            || (st = grm__ckpt_make_dirs(sd)) != GRM_OK)
            return st;
        if ((st = pathf(o->path, sizeof o->path, "%s/%s", rd, file)) != GRM_OK
            || (st = pathf(o->stage, sizeof o->stage, "%s/%s", sd, file)) != GRM_OK)
            return st;
        const size_t mcap = 1024 + (j->settings ? strlen(j->settings) : 0);
        char *meta = malloc(mcap);
        if (!meta) return grm_errorf(GRM_ENOMEM, "out of memory");
        snprintf(meta, mcap, "{\"format\":\"grm-train\",\"grm_version\":\"%s\","
                 "\"pipeline\":\"%s\",\"step\":%lld,\"world_size\":%d,\"rank\":%d,"
                 "\"seed\":%lld,\"resharded_from\":%d%s%s}", GRM_VERSION_STRING, name,
                 (long long)((const int64_t *)state->t.data)[0],
                 (int)j->M, (int)m, (long long)seed, (int)j->N, j->settings ? "," : "",
                 j->settings ? j->settings : "");
        rs_rows_ctx rc = { o, o->spilled ? j->spill_fd[m % j->IM] : -1, j->stage_dir };
        st = o->spilled ? j->kops->save_rows(j->kinst, o->stage, o->v, o->n, meta, out_rows, &rc)
                        : j->kops->save(j->kinst, o->stage, o->v, o->n, meta);
        free(meta);
        if (st != GRM_OK) return st;
        o->staged = 1;
        if (!j->quiet) grm__log(GRM_LOG_INFO, WHO, "wrote %s (%lld tensors)", o->path,
                                (long long)o->n);
    }
    return GRM_OK;
}

/* Rename the staged files into place. */
static grm_status publish(rs_job *j)
{
    for (int32_t m = 0; m < j->M; m++) {
        rs_out *o = &j->dst[m];
        char rd[PATH_CAP];
        grm__ckpt_rank_dir(rd, sizeof rd, j->dir, m, j->M);
        grm_status st = grm__ckpt_make_dirs(rd);
        if (st != GRM_OK) return st;
        if (rename(o->stage, o->path) != 0)
            return grm_errorf(GRM_EIO, "%s: cannot rename to %s: %s", o->stage, o->path,
                              strerror(errno));
        o->staged = 0;
    }
    return GRM_OK;
}

static void unstage(rs_job *j)
{
    spill_fini(j);
    for (int32_t m = 0; j->dst && m < j->M; m++) {
        if (j->dst[m].staged) remove(j->dst[m].stage);
        j->dst[m].staged = 0;
        out_fini(&j->dst[m]);
    }
    for (int32_t r = 0; j->src && r < j->N; r++) file_fini(&j->src[r]);
}

/* Move the N-rank checkpoints of dir (its rank-R-of-N directories; for N = 1 its step-* and
 * best.* files) into dir/resharded-from-N[-K], which *aside [cap] names, so that a resume
 * does not see them. Nothing is deleted. */
static grm_status move_aside(const char *dir, const char *ext, int32_t N, char *aside,
                             size_t cap)
{
    grm_status st;
    struct stat sb;
    snprintf(aside, cap, "%s/resharded-from-%d", dir, (int)N);
    for (int k = 2; stat(aside, &sb) == 0; k++)
        snprintf(aside, cap, "%s/resharded-from-%d-%d", dir, (int)N, k);
    if ((st = grm__ckpt_make_dirs(aside)) != GRM_OK) return st;
    char from[PATH_CAP], to[PATH_CAP];
    if (N > 1) {
        for (int32_t r = 0; r < N; r++) {
            grm__ckpt_rank_dir(from, sizeof from, dir, r, N);
            if ((st = pathf(to, sizeof to, "%s/rank-%d-of-%d", aside, (int)r, (int)N))
                != GRM_OK)
                return st;
            if (rename(from, to) != 0)
                return grm_errorf(GRM_EIO, "%s: cannot move to %s: %s", from, to,
                                  strerror(errno));
        }
        return GRM_OK;
    }
    /* one rank: its step-*, best.* (and leftover temporary) files at the top level */
    DIR *d = opendir(dir);
    if (!d) return grm_errorf(GRM_EIO, "%s: cannot read: %s", dir, strerror(errno));
    struct dirent *e;
    char best[64];
    snprintf(best, sizeof best, "best.%s", ext);
    st = GRM_OK;
    while ((e = readdir(d)) != NULL && st == GRM_OK) {
        if (strncmp(e->d_name, "step-", 5) != 0 && strncmp(e->d_name, best, strlen(best)) != 0)
            continue;
        if ((st = pathf(from, sizeof from, "%s/%s", dir, e->d_name)) != GRM_OK
            || (st = pathf(to, sizeof to, "%s/%s", aside, e->d_name)) != GRM_OK)
            break;
        if (rename(from, to) != 0)
            st = grm_errorf(GRM_EIO, "%s: cannot move to %s: %s", from, to, strerror(errno));
    }
    closedir(d);
    return st;
}

/* The step to reshard: o->step, or the newest one of rank 0, which every rank must have. */
static grm_status pick_step(rs_job *j, int64_t want)
{
    grm_status st;
    int64_t hi = -1, lo = INT64_MAX;
    int32_t rhi = 0;
    for (int32_t r = 0; r < j->N; r++) {
        char rd[PATH_CAP];
        int64_t newest;
        grm__ckpt_rank_dir(rd, sizeof rd, j->dir, r, j->N);
        if ((st = scan_dir(rd, j->ext, -1, &newest, NULL, 0)) != GRM_OK) return st;
        if (newest > hi) {
            hi = newest;
            rhi = r;
        }
        if (newest < lo) lo = newest;
    }
    if (want >= 0) {
        j->step = want;
        return GRM_OK;
    }
    if (hi < 0)
        return grm_errorf(GRM_ENOTFOUND, "%s: no rank directory of the %d-rank checkpoints "
                          "holds a step-S.%s file; train first", j->dir, (int)j->N, j->ext);
    if (hi != lo) {
        char rd[PATH_CAP];
        grm__ckpt_rank_dir(rd, sizeof rd, j->dir, rhi, j->N);
        if (lo < 0)
            grm__log(GRM_LOG_WARN, WHO, "%s: newest step %lld, but another rank has no "
                     "checkpoint at all", rd, (long long)hi);
        else
            grm__log(GRM_LOG_WARN, WHO, "%s: newest step %lld, but another rank's newest is "
                     "%lld (a run stopped while checkpointing?)", rd, (long long)hi,
                     (long long)lo);
    }
    j->step = hi;
    return GRM_OK;
}

/* Refuse (unless force) a target that already holds checkpoints. */
static grm_status check_target(const rs_job *j, int force)
{
    for (int32_t m = 0; m < j->M; m++) {
        char rd[PATH_CAP];
        int64_t newest;
        grm_status st;
        grm__ckpt_rank_dir(rd, sizeof rd, j->dir, m, j->M);
        if ((st = scan_dir(rd, j->ext, -1, &newest, NULL, 0)) != GRM_OK) return st;
        if (newest < 0) continue;
        if (!force)
            return grm_errorf(GRM_EINVAL, "%s: already holds checkpoints of %d rank%s (newest "
                              "step %lld); move them away, or pass --force to write step %lld "
                              "beside them", rd, (int)j->M, j->M == 1 ? "" : "s",
                              (long long)newest, (long long)j->step);
        if (newest > j->step)
            grm__log(GRM_LOG_WARN, WHO, "%s: holds step %lld, newer than the resharded step "
                     "%lld: a resume will pick step %lld", rd, (long long)newest,
                     (long long)j->step, (long long)newest);
    }
    return GRM_OK;
}

/* Remove dir/.reshard-to-*: the staging directories of a reshard that was killed
 * (issue 25 item 15; its staged files once sat in rank-R-of-M directories, where the
 * rerun counted them as a second world size and refused). Two levels: files, and the
 * rank-R-of-M directories holding files. */
static int staged_name(const char *name)
{
    const size_t n = strlen(name);
    return (n > 8 && strcmp(name + n - 8, ".reshard") == 0) || strstr(name, ".reshard.tmp.");
}

/* Staged files of grmhost before dir/.reshard-to-M existed: <file>.reshard(.tmp.PID) in dir
 * and in rank-R-of-M directories; a rank directory holding nothing else is removed. */
static void remove_old_debris(const char *dir, int quiet)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char sub[PATH_CAP], f[PATH_CAP];
    int r, n;
    while (d && (e = readdir(d)) != NULL) {
        if (staged_name(e->d_name) && !pathf(f, sizeof f, "%s/%s", dir, e->d_name)
            && unlink(f) == 0 && !quiet)
            grm__log(GRM_LOG_INFO, WHO, "removed %s, left by a reshard that was cut short", f);
        if (!grm__ckpt_is_rank_dir(e->d_name, &r, &n)
            || pathf(sub, sizeof sub, "%s/%s", dir, e->d_name))
            continue;
        DIR *rd = opendir(sub);
        struct dirent *x;
        int other = 0, staged = 0;
        while (rd && (x = readdir(rd)) != NULL) {
            if (x->d_name[0] == '.') continue;
            if (staged_name(x->d_name)) staged++;
            else other++;
        }
        if (rd) closedir(rd);
        if (other || !staged) continue;
        rd = opendir(sub);
        while (rd && (x = readdir(rd)) != NULL)
            if (x->d_name[0] != '.' && !pathf(f, sizeof f, "%s/%s", sub, x->d_name)) unlink(f);
        if (rd) closedir(rd);
        if (rmdir(sub) == 0 && !quiet)
            grm__log(GRM_LOG_INFO, WHO, "removed %s, left by a reshard that was cut short",
                     sub);
    }
    if (d) closedir(d);
}

static void remove_debris(const char *dir, int quiet)
{
    remove_old_debris(dir, quiet);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ".reshard-to-", 12) != 0) continue;
        char top[PATH_CAP], sub[PATH_CAP], f[PATH_CAP];
        if (pathf(top, sizeof top, "%s/%s", dir, e->d_name) != GRM_OK) continue;
        DIR *t = opendir(top);
        struct dirent *x;
        while (t && (x = readdir(t)) != NULL) {
            if (x->d_name[0] == '.' || pathf(sub, sizeof sub, "%s/%s", top, x->d_name))
                continue;
            DIR *r = opendir(sub);
            struct dirent *y;
            while (r && (y = readdir(r)) != NULL)
                if (y->d_name[0] != '.' && !pathf(f, sizeof f, "%s/%s", sub, y->d_name))
                    unlink(f);
            if (r) closedir(r);
            if (rmdir(sub) != 0) unlink(sub);
        }
        if (t) closedir(t);
        if (rmdir(top) == 0 && !quiet)
            grm__log(GRM_LOG_INFO, WHO, "removed %s, left by a reshard that was cut short",
                     top);
    }
    closedir(d);
}

grm_status grm__reshard(const char *ini, const grm__reshard_opts *o, FILE *out)
{
    if (!ini || !o || o->to < 1 || o->to > 65536 || o->from < 0)
        return grm_errorf(GRM_EINVAL, "reshard: -n M must be a rank count in 1 .. 65536");
    grm__pipeline *p = NULL;
    rs_job j = { 0 };
    grm_status st = grm__pipeline_load(ini, &p);
    if (st != GRM_OK) return st;
    j.p = p;
    j.quiet = o->quiet;
    j.dir = p->set.ckpt_dir;
    j.M = o->to;
    j.kops = p->ckpt.plugin->info->ops;
    if (!j.dir || !j.dir[0]) {
        st = grm_errorf(GRM_EINVAL, "%s: [checkpoint] dir is not set; reshard works on the "
                        "checkpoints it names", ini);
        goto out;
    }
    if ((st = j.kops->create(p->ckpt.config.data, &j.kinst)) != GRM_OK) goto out;
    j.ext = j.kops->extension(j.kinst);
    if ((st = pathf(j.stage_dir, sizeof j.stage_dir, "%s/.reshard-to-%d", j.dir, (int)j.M))
        != GRM_OK)
        goto out;
    /* dir/.reshard-to-M outlives a reshard to M killed after it published the M-rank files
     * and before it moved the sources aside: then both world sizes are there, and this
     * rerun redoes it from the sources (the files it rewrites are the ones it wrote) */
    struct stat sb;
    const int cut = stat(j.stage_dir, &sb) == 0 && S_ISDIR(sb.st_mode);
    remove_debris(j.dir, o->quiet);
    if ((st = find_world(j.dir, j.ext, o->from, cut ? j.M : 0, &j.N)) != GRM_OK) goto out;
    int cut_after_publish = 0;
    for (int32_t m = 0; cut && j.N != j.M && m < j.M && !cut_after_publish; m++) {
        char rd[PATH_CAP];
        int64_t newest = -1;
        grm__ckpt_rank_dir(rd, sizeof rd, j.dir, m, j.M);
        if (stat(rd, &sb) == 0 && scan_dir(rd, j.ext, -1, &newest, NULL, 0) == GRM_OK)
            cut_after_publish = newest >= 0;
    }
    for (int32_t r = 0; cut_after_publish && j.N > 1 && r < j.N; r++) {
        char rd[PATH_CAP];
        grm__ckpt_rank_dir(rd, sizeof rd, j.dir, r, j.N);
        if (stat(rd, &sb) != 0) {
            st = grm_errorf(GRM_EINVAL, "%s: a reshard to %d ranks was cut short while it "
                            "moved the %d-rank checkpoints aside (%s is gone, the %d-rank "
                            "files are complete): move the other rank-*-of-%d directories "
                            "into %s/resharded-from-%d too", j.dir, (int)j.M, (int)j.N, rd,
                            (int)j.M, (int)j.N, j.dir, (int)j.N);
            goto out;
        }
    }
    if (cut_after_publish && !o->quiet)
        grm__log(GRM_LOG_INFO, WHO, "%s: a reshard to %d ranks was cut short after it wrote "
                 "them; redoing it from the %d-rank checkpoints", j.dir, (int)j.M, (int)j.N);
    if (j.N == j.M) {
        st = grm_errorf(GRM_EINVAL, "%s: the checkpoints are already of %d rank%s; nothing to "
                        "reshard", j.dir, (int)j.M, j.M == 1 ? "" : "s");
        goto out;
    }
    const int64_t sg = p->set.sparse_group;
    j.IN = group_of(sg, j.N);
    j.IM = group_of(sg, j.M);
    if (j.N % j.IN != 0 || j.M % j.IM != 0) {
        const int32_t bad = j.M % j.IM != 0 ? j.M : j.N;
        st = grm_errorf(GRM_EINVAL, "%s: [train] sparse_group = %lld does not divide %d ranks "
                        "(replica groups of sparse_group ranks each); pick a multiple of it, "
                        "or change sparse_group", ini, (long long)sg, (int)bad);
        goto out;
    }
    if ((st = pick_step(&j, o->step)) != GRM_OK) goto out;
    if ((st = check_target(&j, o->force || cut_after_publish)) != GRM_OK) goto out;
    j.src = calloc((size_t)j.N, sizeof *j.src);
    j.dst = calloc((size_t)j.M, sizeof *j.dst);
    j.rows = calloc((size_t)p->nphys + 1, sizeof *j.rows);
    j.moved = calloc((size_t)p->nphys + 1, sizeof *j.moved);
    j.dest = calloc((size_t)p->nphys + 1, sizeof *j.dest);
    j.spill_bytes = calloc((size_t)j.IM, sizeof *j.spill_bytes);
    j.spill_fd = malloc((size_t)j.IM * sizeof *j.spill_fd);
    for (int32_t g = 0; j.spill_fd && g < j.IM; g++) j.spill_fd[g] = -1;
    j.stream = !o->in_memory && GRM_HAS_OP(grm_ckpt_ops, j.kops, load_rows)
               && GRM_HAS_OP(grm_ckpt_ops, j.kops, save_rows);
    if (!j.src || !j.dst || !j.rows || !j.moved || !j.dest || !j.spill_bytes || !j.spill_fd) {
        st = grm_errorf(GRM_ENOMEM, "out of memory");
        goto out;
    }
    if (!o->quiet)
        grm__log(GRM_LOG_INFO, WHO, "%s: step %lld of %d rank%s -> %d rank%s", j.dir,
                 (long long)j.step, (int)j.N, j.N == 1 ? "" : "s", (int)j.M,
                 j.M == 1 ? "" : "s");
    char stem[64];
    grm__ckpt_step_stem(stem, sizeof stem, j.step);
    if ((st = reshard_set(&j, stem, j.step)) != GRM_OK) goto out;
    if ((st = publish(&j)) != GRM_OK) goto out;
    fprintf(out, "%s: step %lld resharded from %d rank%s to %d rank%s\n", j.dir,
            (long long)j.step, (int)j.N, j.N == 1 ? "" : "s", (int)j.M, j.M == 1 ? "" : "s");
    fprintf(out, "%-24s %12s %12s %12s\n", "table", "rows", "moved", "stayed");
    for (int32_t T = 0; T < p->nphys; T++)
        fprintf(out, "%-24s %12lld %12lld %12lld\n", p->phys_names[T], (long long)j.rows[T],
                (long long)j.moved[T], (long long)(j.rows[T] - j.moved[T]));
    unstage(&j);
    /* early stopping's best model, when every rank kept one */
    int nbest = 0;
    for (int32_t r = 0; r < j.N; r++) {
        char rd[PATH_CAP], bp[PATH_CAP + 64];
        grm__ckpt_rank_dir(rd, sizeof rd, j.dir, r, j.N);
        snprintf(bp, sizeof bp, "%s/best.%s", rd, j.ext);
        nbest += access(bp, R_OK) == 0;
    }
    if (nbest == j.N) {
        if ((st = reshard_set(&j, "best", -1)) != GRM_OK) goto out;
        if ((st = publish(&j)) != GRM_OK) goto out;
        unstage(&j);
    } else if (nbest > 0) {
        grm__log(GRM_LOG_WARN, WHO, "only %d of %d ranks hold best.%s; it is not resharded",
                 nbest, (int)j.N, j.ext);
    }
    char aside[PATH_CAP];
    if ((st = move_aside(j.dir, j.ext, j.N, aside, sizeof aside)) != GRM_OK)
        goto out;
    fprintf(out, "the %d-rank checkpoints were moved (not deleted) to %s\n", (int)j.N, aside);
out:
    unstage(&j);
    if (j.stage_dir[0]) remove_debris(j.dir, 1);   /* the staging directories, now empty */
    free(j.src);
    free(j.dst);
    free(j.rows);
    free(j.moved);
    free(j.dest);
    free(j.spill_bytes);
    free(j.spill_fd);
    free(j.settings);
    if (j.kinst) j.kops->destroy(j.kinst);
    grm__pipeline_destroy(p);
    return st;
}

/* ---- resuming on kN ranks directly: MTGRBoost §5.2's modulo scheme ---- */

int grm__reshard_nests(int64_t sparse_group, int32_t N, int32_t M)
{
    const int32_t IN = group_of(sparse_group, N), IM = group_of(sparse_group, M);
    return N >= 1 && M > N && N % IN == 0 && M % IM == 0 && IM % IN == 0;
}

void grm__reshard_source_dir(char *buf, size_t cap, const char *dir, int32_t rank, int32_t N)
{
    grm__ckpt_rank_dir(buf, cap, dir, rank % N, N);
}

grm_status grm__reshard_source(const char *dir, const char *ext, int32_t rank, int32_t N,
                               int64_t want, int64_t *newest, char *path, size_t cap)
{
    char rd[PATH_CAP];
    grm__reshard_source_dir(rd, sizeof rd, dir, rank, N);
    return scan_dir(rd, ext, want, newest, path, cap);
}

grm_status grm__reshard_load_owned(const grm__pipeline *p, const grm_ckpt_ops *kops,
                                   void *kinst, const char *path, int32_t rank, int32_t M,
                                   grm_ckpt_visit_fn visit, void *user, int64_t *kept,
                                   int64_t *dropped)
{
    rs_file f = { 0 };
    uint8_t *keep = NULL;           /* [rows of mask_of]: this rank owns the row */
    const rs_tensor *mask_of = NULL; /* the .ids tensor keep was computed from */
    void *rows = NULL;
    const int32_t IM = group_of(p->set.sparse_group, M);
    grm_status st;
    *kept = *dropped = 0;
    snprintf(f.path, sizeof f.path, "%s", path);
    if ((st = kops->load(kinst, path, file_visit, &f)) != GRM_OK) goto out;
    for (int64_t i = 0; i < f.n; i++) {
        const rs_tensor *x = &f.v[i];
        const int32_t T = table_in(p, x->name);
        char ids_name[512];
        snprintf(ids_name, sizeof ids_name, "emb.%s.ids", T >= 0 ? p->phys_names[T] : "");
        const rs_tensor *ids = T >= 0 ? file_find(&f, ids_name) : NULL;
        /* indexed tables (no .ids) hold the whole table on every rank: the rows this rank
         * owns among M were owned by rank mod N, so they are current in this file */
        if (!ids || !is_row_tensor_keyed(x, ids_name) || x->t.shape[0] != ids->t.shape[0]) {
            grm_named_tensor nt = { x->name, x->t };
            if ((st = visit(user, &nt)) != GRM_OK) goto out;
            continue;
        }
        const int64_t n = ids->t.shape[0];
        if (mask_of != ids) {   /* the table's first per-row tensor: whose rows are whose */
            const int64_t *key = ids->t.data;
            free(keep);
            keep = malloc(n ? (size_t)n : 1);
            if (!keep) {
                st = grm_errorf(GRM_ENOMEM, "%s: out of memory filtering '%s'", path, ids_name);
                goto out;
            }
            int64_t w = 0;
            for (int64_t r = 0; r < n; r++) {
                keep[r] = owner_in_group(key[r], IM) == rank % IM;
                w += keep[r];
            }
            *kept += w;
            *dropped += n - w;
            mask_of = ids;
        }
        const size_t rb = grm__ckpt_row_bytes(&x->t);
        free(rows);
        rows = malloc(n ? (size_t)n * rb : 1);
        if (!rows) {
            st = grm_errorf(GRM_ENOMEM, "%s: out of memory filtering '%s'", path, x->name);
            goto out;
        }
        int64_t w = 0;
        for (int64_t r = 0; r < n; r++)
            if (keep[r])
                memcpy((char *)rows + (size_t)w++ * rb, (const char *)x->t.data + (size_t)r * rb,
                       rb);
        grm_named_tensor nt = { x->name, x->t };
        nt.tensor.shape[0] = w;
        nt.tensor.data = rows;
        if ((st = visit(user, &nt)) != GRM_OK) goto out;
    }
out:
    free(keep);
    free(rows);
    file_fini(&f);
    return st;
}

/* ---- the same, a piece at a time ---- */

typedef struct own_ctx {
    const grm__pipeline *p;
    const char *path;
    int32_t rank, IM;
    grm_ckpt_piece_fn visit;
    void *user;
    int64_t kept, dropped;
    int32_t T;                /* table whose ids made keep, -1: none yet */
    uint8_t *keep;            /* [n] this rank owns row r of table T */
    int64_t n, w;             /* rows of T in the file; of those, kept */
    int64_t *ids;             /* [<= n] the kept ids, while the ids tensor arrives */
    int64_t out;              /* rows of the current row tensor passed on */
    uint8_t *indexed;         /* [nphys] a row tensor came with no ids before it: an indexed
                               * table (emb-static), whole on every rank, passed unchanged */
    void *buf;                /* a filtered piece */
    size_t cap;
} own_ctx;

/* The table tensor `name` belongs to (-1: none), and whether it is that table's ids. */
static int32_t own_table_of(const grm__pipeline *p, const char *name, int *is_ids)
{
    const int32_t T = table_in(p, name);
    char ids_name[512];
    snprintf(ids_name, sizeof ids_name, "emb.%s.ids", T >= 0 ? p->phys_names[T] : "");
    *is_ids = T >= 0 && strcmp(name, ids_name) == 0;
    return T;
}

static grm_status ids_after_rows(const own_ctx *c, const char *table)
{
    return grm_errorf(GRM_EFORMAT, "%s: the ids of table '%s' come after its rows; rewrite "
                      "the checkpoints for this job with `grmhost reshard FILE.ini -n M` "
                      "instead", c->path, table);
}

static grm_status rows_unlike_ids(const own_ctx *c, const grm_named_tensor *nt, int64_t rows,
                                  int64_t ids)
{
    return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' holds %lld rows and its table's ids %lld; "
                      "the file is damaged or was not written by grmhost", c->path, nt->name,
                      (long long)rows, (long long)ids);
}

/* The rows of piece nt that keep[0..m) marks, into c->buf (grown as needed); *w of them. */
static grm_status own_filter(own_ctx *c, const grm_named_tensor *nt, const uint8_t *keep,
                             int64_t *w)
{
    const int64_t m = nt->tensor.shape[0];
    const size_t rb = grm__ckpt_row_bytes(&nt->tensor);
    if ((size_t)m * rb > c->cap) {
        void *b = realloc(c->buf, (size_t)m * rb);
        if (!b) return grm_errorf(GRM_ENOMEM, "%s: out of memory filtering '%s'", c->path,
                                  nt->name);
        c->buf = b;
        c->cap = (size_t)m * rb;
    }
    *w = 0;
    for (int64_t r = 0; r < m; r++)
        if (keep[r])
            memcpy((char *)c->buf + (size_t)(*w)++ * rb, (const char *)nt->tensor.data
                   + (size_t)r * rb, rb);
    return GRM_OK;
}

static grm_status own_piece(void *user, const grm_named_tensor *nt, int64_t row0, int64_t rows)
{
    own_ctx *c = user;
    int is_ids;
    const int32_t T = own_table_of(c->p, nt->name, &is_ids);
    const int64_t m = nt->tensor.shape[0];
    if (T < 0 || (!is_ids && nt->tensor.ndim < 2))      /* not per row: unchanged */
        return c->visit(c->user, nt, row0, rows);
    grm_status st = grm__ckpt_piece_fits(c->path, nt, row0, rows);
    if (st != GRM_OK) return st;
    if (is_ids && c->indexed[T]) return ids_after_rows(c, c->p->phys_names[T]);
    if (!is_ids && c->T != T) {     /* no ids: every rank holds the whole table */
        c->indexed[T] = 1;
        return c->visit(c->user, nt, row0, rows);
    }
    if (is_ids) {
        if (row0 == 0) {
            free(c->keep);
            free(c->ids);
            c->keep = malloc(rows ? (size_t)rows : 1);
            c->ids = malloc((rows ? (size_t)rows : 1) * sizeof *c->ids);
            c->T = -1;
            c->w = 0;
            if (!c->keep || !c->ids)
                return grm_errorf(GRM_ENOMEM, "%s: out of memory filtering '%s'", c->path,
                                  nt->name);
        }
        const int64_t *key = nt->tensor.data;
        for (int64_t r = 0; r < m; r++) {
            const int k = owner_in_group(key[r], c->IM) == c->rank % c->IM;
            c->keep[row0 + r] = (uint8_t)k;
            if (k) c->ids[c->w++] = key[r];
        }
        if (row0 + m < rows) return GRM_OK;
        c->T = T;
        c->n = rows;
        c->kept += c->w;
        c->dropped += rows - c->w;
        grm_named_tensor out = *nt;
        out.tensor.shape[0] = c->w;
        out.tensor.data = c->ids;
        st = c->visit(c->user, &out, 0, c->w);
        free(c->ids);
        c->ids = NULL;
        return st;
    }
    if (c->n != rows) return rows_unlike_ids(c, nt, rows, c->n);
    if (row0 == 0) c->out = 0;
    int64_t w;
    if ((st = own_filter(c, nt, c->keep + row0, &w)) != GRM_OK) return st;
    /* a piece that keeps nothing is passed on only when it is the tensor's first, so that a
     * tensor of no kept rows still arrives (once) */
    if (w == 0 && row0 != 0) return GRM_OK;
    grm_named_tensor out = *nt;
    out.tensor.shape[0] = w;
    out.tensor.data = c->buf;
    st = c->visit(c->user, &out, c->out, c->w);
    c->out += w;
    return st;
}

/* ---- the same, a range of each tensor in turn ---- */

/* A keyed table's ids arrive interleaved with its other row tensors (a format's
 * load_rows_interleaved), so the rows this rank keeps are only known once they have all
 * come, after the first pieces of the others must go on with the number of their kept rows.
 * The file is therefore read twice: a tensor at a time up to the last keyed table's ids,
 * which makes each table's mask of kept rows (own_mask), then a range of each tensor in
 * turn, every row tensor of a keyed table filtered as it comes (own_piece_il). A tiered
 * table then puts each kept record together once, as on a resume of as many ranks; the ids
 * are no longer held (8 bytes a kept row), only the masks (a byte a row of the file). */

typedef struct own_tab {
    uint8_t *keep;            /* [n] this rank owns row r; NULL: not (yet) keyed */
    int64_t n, got, w;        /* rows of the file, ids seen so far, rows kept */
    int indexed;              /* a row tensor came before any ids: whole on every rank */
} own_tab;

typedef struct own_cursor {   /* a keyed row tensor in flight in the second pass */
    char *name;               /* owned */
    int64_t next, out;        /* its next row in the file; rows passed on */
} own_cursor;

typedef struct own_il {
    own_ctx *c;               /* path, rank, IM, visit, buf; kept and dropped */
    own_tab *tab;             /* [nphys] */
    int32_t resolved;         /* tables whose ids are whole or that are indexed */
    own_cursor *cur;          /* [ncur] */
    int32_t ncur, cap_cur;
} own_il;

/* The first read: each keyed table's mask, then GRM_ECANCELED (with resolved == nphys) once
 * every table is keyed with all of its ids or indexed, so the rest of the file is not read. */
static grm_status own_mask(void *user, const grm_named_tensor *nt, int64_t row0, int64_t rows)
{
    own_il *il = user;
    own_ctx *c = il->c;
    int is_ids;
    const int32_t T = own_table_of(c->p, nt->name, &is_ids);
    own_tab *tb = T >= 0 ? &il->tab[T] : NULL;
    if (T >= 0 && !is_ids) {
        if (nt->tensor.ndim >= 2 && tb->keep == NULL && !tb->indexed) {
            tb->indexed = 1;
            il->resolved++;
        }
    } else if (is_ids) {
        if (tb->indexed) return ids_after_rows(c, c->p->phys_names[T]);
        grm_status st = grm__ckpt_piece_fits(c->path, nt, row0, rows);
        if (st != GRM_OK) return st;
        if (row0 == 0) {
            if (tb->keep != NULL)
                return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' comes twice; the file is "
                                  "damaged or was not written by grmhost", c->path, nt->name);
            tb->keep = malloc(rows ? (size_t)rows : 1);
            if (!tb->keep)
                return grm_errorf(GRM_ENOMEM, "%s: out of memory filtering '%s'", c->path,
                                  nt->name);
            tb->n = rows;
        }
        if (row0 != tb->got || rows != tb->n)
            return grm_errorf(GRM_EFORMAT, "%s: tensor '%s': rows from %lld of %lld arrive "
                              "out of order; the file is damaged or was not written by "
                              "grmhost", c->path, nt->name, (long long)row0, (long long)rows);
        const int64_t *key = nt->tensor.data;
        const int64_t m = nt->tensor.shape[0];
        for (int64_t r = 0; r < m; r++) {
            const int k = owner_in_group(key[r], c->IM) == c->rank % c->IM;
            tb->keep[row0 + r] = (uint8_t)k;
            tb->w += k;
        }
        tb->got += m;
        if (tb->got == rows) il->resolved++;
    }
    return il->resolved == c->p->nphys ? GRM_ECANCELED : GRM_OK;
}

/* The cursor of keyed row tensor `name` at file row row0: made at row 0, dropped by the
 * caller after its last row. NULL: out of memory, or its pieces out of order. */
static own_cursor *own_cursor_at(own_il *il, const char *name, int64_t row0, grm_status *st)
{
    int32_t i = 0;
    while (i < il->ncur && strcmp(il->cur[i].name, name) != 0) i++;
    if (i < il->ncur && il->cur[i].next == row0) return &il->cur[i];
    if (i < il->ncur || row0 != 0) {
        *st = grm_errorf(GRM_EFORMAT, "%s: tensor '%s': rows from %lld arrive out of order; "
                         "the file is damaged or was not written by grmhost", il->c->path, name,
                         (long long)row0);
        return NULL;
    }
    if (il->ncur == il->cap_cur) {
        const int32_t cap = il->cap_cur ? 2 * il->cap_cur : 8;
        own_cursor *n = realloc(il->cur, (size_t)cap * sizeof *n);
        if (!n) goto oom;
        il->cur = n;
        il->cap_cur = cap;
    }
    own_cursor *k = &il->cur[il->ncur];
    if (!(k->name = strdup(name))) goto oom;
    k->next = k->out = 0;
    il->ncur++;
    return k;
oom:
    *st = grm_errorf(GRM_ENOMEM, "%s: out of memory filtering '%s'", il->c->path, name);
    return NULL;
}

/* The second read: the row tensors of keyed tables filtered by their masks, a piece at a
 * time, the rest unchanged. */
static grm_status own_piece_il(void *user, const grm_named_tensor *nt, int64_t row0,
                               int64_t rows)
{
    own_il *il = user;
    own_ctx *c = il->c;
    int is_ids;
    const int32_t T = own_table_of(c->p, nt->name, &is_ids);
    if (T < 0 || (!is_ids && nt->tensor.ndim < 2) || il->tab[T].indexed) {
        if (is_ids) return ids_after_rows(c, c->p->phys_names[T]);
        return c->visit(c->user, nt, row0, rows);
    }
    const own_tab *tb = &il->tab[T];
    if (tb->keep == NULL || tb->got != tb->n)
        return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' came in the second read of the file "
                          "and its table's ids did not come whole in the first; the file is "
                          "damaged or changed while it was read", c->path, nt->name);
    if (rows != tb->n) return rows_unlike_ids(c, nt, rows, tb->n);
    grm_status st = grm__ckpt_piece_fits(c->path, nt, row0, rows);
    if (st != GRM_OK) return st;
    own_cursor *k = own_cursor_at(il, nt->name, row0, &st);
    if (k == NULL) return st;
    int64_t w;
    if ((st = own_filter(c, nt, tb->keep + row0, &w)) != GRM_OK) return st;
    k->next += nt->tensor.shape[0];
    // as own_piece: a piece that keeps nothing goes on only as its tensor's first
    if (w > 0 || row0 == 0) {
        grm_named_tensor out = *nt;
        out.tensor.shape[0] = w;
        out.tensor.data = c->buf;
        st = c->visit(c->user, &out, k->out, tb->w);
        k->out += w;
    }
    if (k->next == rows) {
        free(k->name);
        *k = il->cur[--il->ncur];
    }
    return st;
}

static grm_status load_owned_interleaved(own_ctx *c, const grm_ckpt_ops *kops, void *kinst)
{
    const grm__pipeline *p = c->p;
    own_il il = { .c = c, .tab = calloc((size_t)p->nphys + 1, sizeof(own_tab)) };
    grm_status st = il.tab ? kops->load_rows(kinst, c->path, own_mask, &il)
                           : grm_errorf(GRM_ENOMEM, "out of memory");
    if (st == GRM_ECANCELED && il.resolved == p->nphys) st = GRM_OK;   // own_mask's stop
    for (int32_t T = 0; st == GRM_OK && T < p->nphys; T++)
        if (il.tab[T].keep != NULL && il.tab[T].got != il.tab[T].n)
            st = grm_errorf(GRM_EFORMAT, "%s: the ids of table '%s' end at row %lld of %lld; "
                            "the file is damaged or was not written by grmhost", c->path,
                            p->phys_names[T], (long long)il.tab[T].got,
                            (long long)il.tab[T].n);
    for (int32_t T = 0; st == GRM_OK && T < p->nphys; T++) {
        c->kept += il.tab[T].w;
        c->dropped += il.tab[T].n - il.tab[T].w;
    }
    if (st == GRM_OK) {
        grm__log(GRM_LOG_DEBUG, "grmhost", "%s: the rows this rank owns known from the ids, "
                 "read a range of each tensor in turn (load_rows_interleaved)", c->path);
        st = kops->load_rows_interleaved(kinst, c->path, own_piece_il, &il);
    }
    for (int32_t i = 0; i < il.ncur; i++) free(il.cur[i].name);
    free(il.cur);
    for (int32_t T = 0; il.tab && T < p->nphys; T++) free(il.tab[T].keep);
    free(il.tab);
    return st;
}

grm_status grm__reshard_load_owned_rows(const grm__pipeline *p, const grm_ckpt_ops *kops,
                                        void *kinst, const char *path, int32_t rank,
                                        int32_t M, int interleaved, grm_ckpt_piece_fn visit,
                                        void *user, int64_t *kept, int64_t *dropped)
{
    own_ctx c = { .p = p, .path = path, .rank = rank, .IM = group_of(p->set.sparse_group, M),
                  .visit = visit, .user = user, .T = -1,
                  .indexed = calloc((size_t)p->nphys + 1, 1) };
    grm_status st = !c.indexed ? grm_errorf(GRM_ENOMEM, "out of memory")
                    : interleaved ? load_owned_interleaved(&c, kops, kinst)
                    : kops->load_rows(kinst, path, own_piece, &c);
    free(c.indexed);
    *kept = c.kept;
    *dropped = c.dropped;
    free(c.keep);
    free(c.ids);
    free(c.buf);
    return st;
}

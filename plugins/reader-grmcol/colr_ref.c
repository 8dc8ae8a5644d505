/* plugins/reader-grmcol/colr_ref.c - the reference parts of reader-grmcol: expand the
 * path into files, read their footers, check that they agree on the projected columns,
 * plan this shard's row groups, and load one row group (pread the projected chunks only,
 * verify, decompress, assemble CSR columns) in plain code. colr_uv.c runs colr_load on
 * libuv's pool; with prefetch = 0 it runs in the caller (RecIS §2.2.1, MTGRBoost §3). */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "colr.h"

static const grm_device colr_cpu = { GRM_DEVICE_CPU, 0 };

/* ---- files ---- */

static int colr_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int colr_has_glob(const char *s)
{
    return strpbrk(s, "*?[") != NULL;
}

static int colr_ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Append a copy of path to the host-allocated list *v [*n of *cap]. */
static grm_status colr_push(const grm_host_api *host, char ***v, int32_t *n, int32_t *cap,
                            const char *path)
{
    if (*n == *cap) {
        const int32_t ncap = *cap ? *cap * 2 : 16;
        char **const nv = host->alloc(colr_cpu, (size_t)ncap * sizeof *nv, 0);
        if (nv == NULL) return GRM_ENOMEM;
        if (*v != NULL) memcpy(nv, *v, (size_t)*n * sizeof *nv);
        host->free(colr_cpu, *v);
        *v = nv;
        *cap = ncap;
    }
    const size_t len = strlen(path);
    char *const p = host->alloc(colr_cpu, len + 1, 0);
    if (p == NULL) return GRM_ENOMEM;
    memcpy(p, path, len + 1);
    (*v)[(*n)++] = p;
    return GRM_OK;
}

/* The files cfg->path names, sorted: a glob's matches, a directory's *.grmcol, or the file. */
static grm_status colr_expand(colr_reader *r, char ***out, int32_t *nout)
{
    const grm_host_api *const host = r->host;
    const char *const path = r->cfg->path;
    char **v = NULL;
    int32_t n = 0, cap = 0;
    grm_status st = GRM_OK;
    struct stat sb;

    if (colr_has_glob(path)) {
        glob_t gl;
        const int rc = glob(path, 0, NULL, &gl);
        if (rc == GLOB_NOMATCH) {
            return host->errorf(GRM_ENOTFOUND, "reader-grmcol: path '%s' matches no file",
                                path);
        }
        if (rc != 0) {
            return host->errorf(GRM_EIO, "reader-grmcol: path '%s': glob failed", path);
        }
        for (size_t i = 0; i < gl.gl_pathc && st == GRM_OK; i++) {
            if (stat(gl.gl_pathv[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
                st = colr_push(host, &v, &n, &cap, gl.gl_pathv[i]);
            }
        }
        globfree(&gl);
    } else if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        DIR *const d = opendir(path);
        if (d == NULL) {
            return host->errorf(GRM_EIO, "reader-grmcol: %s: cannot open directory: %s", path,
                                strerror(errno));
        }
        const struct dirent *de;
        while (st == GRM_OK && (de = readdir(d)) != NULL) {
            if (!colr_ends_with(de->d_name, ".grmcol")) continue;
            const size_t len = strlen(path) + strlen(de->d_name) + 2;
            char *const full = malloc(len);
            if (full == NULL) {
                st = GRM_ENOMEM;
                break;
            }
            snprintf(full, len, "%s/%s", path, de->d_name);
            if (stat(full, &sb) == 0 && S_ISREG(sb.st_mode)) {
                st = colr_push(host, &v, &n, &cap, full);
            }
            free(full);
        }
        closedir(d);
        if (st == GRM_OK && n == 0) {
            st = host->errorf(GRM_ENOTFOUND, "reader-grmcol: directory '%s' holds no *.grmcol "
                              "file", path);
        }
    } else {
        st = colr_push(host, &v, &n, &cap, path);
    }
    if (st == GRM_OK && n == 0) {
        st = host->errorf(GRM_ENOTFOUND, "reader-grmcol: path '%s' matches no regular file",
                          path);
    }
    if (st != GRM_OK) {
        if (st == GRM_ENOMEM) host->errorf(GRM_ENOMEM, "reader-grmcol: out of memory");
        for (int32_t i = 0; i < n; i++) host->free(colr_cpu, v[i]);
        host->free(colr_cpu, v);
        return st;
    }
    qsort(v, (size_t)n, sizeof *v, colr_cmp_str);
    *out = v;
    *nout = n;
    return GRM_OK;
}

/* ---- the projection ---- */

/* Choose the output columns from the first readable file `f0`. */
static grm_status colr_project(colr_reader *r, const colr_file *f0)
{
    const grm_host_api *const host = r->host;
    const grm_str_list *const want = &r->cfg->columns;
    const grm__grmcol_meta *const m = &f0->meta;

    r->nout = want->n > 0 ? (int32_t)want->n : m->ncols;
    r->fields = host->alloc(colr_cpu, (size_t)r->nout * sizeof *r->fields, 0);
    if (r->fields == NULL) return GRM_ENOMEM;
    memset(r->fields, 0, (size_t)r->nout * sizeof *r->fields);
    for (int32_t i = 0; i < r->nout; i++) {
        const int32_t c = want->n > 0 ? grm__grmcol_find(m, want->v[i]) : i;
        if (c < 0) {
            char have[512];
            size_t len = 0;
            have[0] = '\0';
            for (int32_t j = 0; j < m->ncols && len + 64 < sizeof have; j++) {
                len += (size_t)snprintf(have + len, sizeof have - len, "%s%s", j ? ", " : "",
                                        m->fields[j].name);
            }
            return host->errorf(GRM_EINVAL, "reader-grmcol: columns: %s has no column '%s' "
                                "(it has: %s)", f0->path, want->v[i], have);
        }
        for (int32_t j = 0; j < i; j++) {
            if (strcmp(r->fields[j].name, m->fields[c].name) == 0) {
                return host->errorf(GRM_EINVAL, "reader-grmcol: columns: '%s' is listed "
                                    "twice", want->v[i]);
            }
        }
        r->fields[i].name = m->fields[c].name;
        r->fields[i].type = m->fields[c].type;
    }
    r->schema.struct_size = (uint32_t)sizeof(grm_schema);
    r->schema.nfields = r->nout;
    r->schema.fields = r->fields;
    return GRM_OK;
}

/* Map f's columns onto the output columns; every one must exist with the same type. */
static grm_status colr_map(colr_reader *r, colr_file *f)
{
    const grm_host_api *const host = r->host;
    f->colmap = host->alloc(colr_cpu, (size_t)r->nout * sizeof *f->colmap, 0);
    if (f->colmap == NULL) return GRM_ENOMEM;
    for (int32_t i = 0; i < r->nout; i++) {
        const int32_t c = grm__grmcol_find(&f->meta, r->fields[i].name);
        if (c < 0 || f->meta.fields[c].type != r->fields[i].type) {
            return host->errorf(GRM_EFORMAT, "reader-grmcol: %s: column '%s' is %s here but "
                                "%s in %s; every file of a dataset needs the same columns",
                                f->path, r->fields[i].name,
                                c < 0 ? "missing" : grm__grmcol_type_name(f->meta.fields[c].type),
                                grm__grmcol_type_name(r->fields[i].type), r->files[0].path);
        }
        f->colmap[i] = c;
    }
    return GRM_OK;
}

grm_status colr_plan(colr_reader *r, int32_t shard, int32_t nshards)
{
    const grm_host_api *const host = r->host;
    char **paths = NULL;
    int32_t npaths = 0, first = -1;
    grm_status st = colr_expand(r, &paths, &npaths);
    if (st != GRM_OK) return st;

    r->files = host->alloc(colr_cpu, (size_t)npaths * sizeof *r->files, 0);
    if (r->files == NULL) {
        st = GRM_ENOMEM;
        goto out;
    }
    memset(r->files, 0, (size_t)npaths * sizeof *r->files);
    r->nfiles = npaths;
    for (int32_t i = 0; i < npaths; i++) {
        r->files[i].fd = -1;
        r->files[i].path = paths[i];   // the file owns it from here
        paths[i] = NULL;
    }
    int64_t total = 0;
    for (int32_t i = 0; i < r->nfiles; i++) {
        colr_file *const f = &r->files[i];
        grm__grmcol_err e = { { 0 } };
        st = grm__grmcol_open(f->path, &f->fd, &f->meta, &e);
        // A bad file is skipped when asked to, but a newer format never is: it is not damage.
        if (st == GRM_EFORMAT && r->cfg->on_bad_chunk == COLR_BAD_SKIP) {
            if (r->bad_files++ < COLR_LOG_BAD_MAX) {
                host->log(GRM_LOG_WARN, "reader-grmcol", "skipping %s", e.msg);
            }
            st = GRM_OK;
            continue;
        }
        if (st != GRM_OK) {
            st = host->errorf(st, "reader-grmcol: %s", e.msg);
            goto out;
        }
        if (first < 0) {
            first = i;
            if ((st = colr_project(r, f)) != GRM_OK) goto out;
        }
        if ((st = colr_map(r, f)) != GRM_OK) goto out;
        total += f->meta.ngroups;
    }
    if (first < 0) {
        st = host->errorf(GRM_EFORMAT, "reader-grmcol: no readable file in '%s' (%d skipped "
                          "as damaged)", r->cfg->path, r->nfiles);
        goto out;
    }
    // Global row group k (files in sorted order, groups in file order) goes to shard
    // k % nshards: every shard gets a balanced, disjoint share (MTGRBoost §3).
    const int64_t mine = total / nshards + (shard < total % nshards ? 1 : 0);
    r->groups = host->alloc(colr_cpu, (size_t)(mine + 1) * sizeof *r->groups, 0);
    if (r->groups == NULL) {
        st = GRM_ENOMEM;
        goto out;
    }
    int64_t k = 0;
    for (int32_t i = 0; i < r->nfiles; i++) {
        const colr_file *const f = &r->files[i];
        if (f->fd < 0) continue;
        for (int64_t g = 0; g < f->meta.ngroups; g++, k++) {
            if (k % nshards != shard) continue;
            colr_group *const q = &r->groups[r->ngroups++];
            q->file = i;
            q->reserved = 0;
            q->g = g;
        }
    }
out:
    if (st == GRM_ENOMEM) st = host->errorf(GRM_ENOMEM, "reader-grmcol: out of memory");
    if (paths != NULL) {
        for (int32_t i = 0; i < npaths; i++) host->free(colr_cpu, paths[i]);
        host->free(colr_cpu, paths);
    }
    return st;
}

void colr_plan_free(colr_reader *r)
{
    const grm_host_api *const host = r->host;
    if (r->files != NULL) {
        for (int32_t i = 0; i < r->nfiles; i++) {
            colr_file *const f = &r->files[i];
            if (f->fd >= 0) close(f->fd);
            grm__grmcol_meta_fini(&f->meta);
            host->free(colr_cpu, f->colmap);
            host->free(colr_cpu, f->path);
        }
        host->free(colr_cpu, r->files);
    }
    host->free(colr_cpu, r->fields);
    host->free(colr_cpu, r->groups);
    r->files = NULL;
    r->fields = NULL;
    r->groups = NULL;
}

/* ---- slots ---- */

grm_status colr_slots_create(colr_reader *r, int32_t nslots)
{
    const grm_host_api *const host = r->host;
    const size_t n = (size_t)r->nout;
    r->slots = host->alloc(colr_cpu, (size_t)nslots * sizeof *r->slots, 0);
    if (r->slots == NULL) return host->errorf(GRM_ENOMEM, "reader-grmcol: out of memory");
    memset(r->slots, 0, (size_t)nslots * sizeof *r->slots);
    r->nslots = nslots;
    for (int32_t i = 0; i < nslots; i++) {
        colr_slot *const s = &r->slots[i];
        s->r = r;
        s->req.data = s;
        s->task = -1;
        s->stored = host->alloc(colr_cpu, n * sizeof(void *), 0);
        s->payload = host->alloc(colr_cpu, n * sizeof(void *), 0);
        s->stored_cap = host->alloc(colr_cpu, n * sizeof(size_t), 0);
        s->payload_cap = host->alloc(colr_cpu, n * sizeof(size_t), 0);
        s->cols = host->alloc(colr_cpu, n * sizeof(grm_column), 0);
        s->dctx = ZSTD_createDCtx();
        if (s->stored != NULL) memset(s->stored, 0, n * sizeof(void *));
        if (s->payload != NULL) memset(s->payload, 0, n * sizeof(void *));
        if (s->stored_cap != NULL) memset(s->stored_cap, 0, n * sizeof(size_t));
        if (s->payload_cap != NULL) memset(s->payload_cap, 0, n * sizeof(size_t));
        if (s->stored == NULL || s->payload == NULL || s->stored_cap == NULL
            || s->payload_cap == NULL || s->cols == NULL || s->dctx == NULL) {
            return host->errorf(GRM_ENOMEM, "reader-grmcol: out of memory");
        }
    }
    return GRM_OK;
}

void colr_slots_free(colr_reader *r)
{
    const grm_host_api *const host = r->host;
    if (r->slots == NULL) return;
    for (int32_t i = 0; i < r->nslots; i++) {
        colr_slot *const s = &r->slots[i];
        for (int32_t c = 0; c < r->nout; c++) {
            if (s->stored != NULL) host->free(colr_cpu, s->stored[c]);
            if (s->payload != NULL) host->free(colr_cpu, s->payload[c]);
        }
        host->free(colr_cpu, s->stored);
        host->free(colr_cpu, s->payload);
        host->free(colr_cpu, s->stored_cap);
        host->free(colr_cpu, s->payload_cap);
        host->free(colr_cpu, s->cols);
        ZSTD_freeDCtx(s->dctx);
    }
    host->free(colr_cpu, r->slots);
    r->slots = NULL;
}

/* ---- loading one row group ---- */

/* Make *p hold at least `need` bytes (contents not kept). 0 when out of memory. */
static int colr_reserve(const grm_host_api *host, void **p, size_t *cap, size_t need)
{
    if (need <= *cap && *p != NULL) return 1;
    size_t n = *cap > 0 ? *cap : 4096;
    while (n < need) n *= 2;
    host->free(colr_cpu, *p);
    *p = host->alloc(colr_cpu, n, 0);
    *cap = *p != NULL ? n : 0;
    return *p != NULL;
}

void colr_load(colr_slot *s)
{
    colr_reader *const r = s->r;
    const grm_host_api *const host = r->host;
    const colr_group *const q = &r->groups[s->task];
    const colr_file *const f = &r->files[q->file];

    s->st = GRM_OK;
    s->err.msg[0] = '\0';
    s->bytes = 0;
    // Only the projected columns are read and decompressed (RecIS §2.2.1: column
    // selection at the storage end).
    for (int32_t i = 0; i < r->nout; i++) {
        const int32_t c = f->colmap[i];
        const grm__grmcol_chunk *const k = &f->meta.chunks[q->g * f->meta.ncols + c];
        // +8: a payload is at least one offset; the buffer is never empty.
        if (!colr_reserve(host, &s->stored[i], &s->stored_cap[i], (size_t)k->csize)
            || !colr_reserve(host, &s->payload[i], &s->payload_cap[i], (size_t)k->usize + 8)) {
            s->st = GRM_ENOMEM;
            snprintf(s->err.msg, sizeof s->err.msg, "%s: row group %lld, column '%s': out of "
                     "memory for %llu bytes", f->path, (long long)q->g, f->meta.fields[c].name,
                     (unsigned long long)k->usize);
            return;
        }
        size_t done = 0;
        while (done < k->csize) {
            const ssize_t n = pread(f->fd, (char *)s->stored[i] + done,
                                    (size_t)k->csize - done, (off_t)(k->offset + done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                s->st = n < 0 ? GRM_EIO : GRM_EFORMAT;
                snprintf(s->err.msg, sizeof s->err.msg, "%s: row group %lld, column '%s': %s "
                         "at offset %llu", f->path, (long long)q->g, f->meta.fields[c].name,
                         n < 0 ? strerror(errno) : "truncated: the file ended",
                         (unsigned long long)(k->offset + done));
                return;
            }
            done += (size_t)n;
        }
        s->bytes += (int64_t)k->csize;
        s->st = grm__grmcol_decode(&f->meta, f->path, q->g, c, s->stored[i], s->payload[i],
                                   s->dctx, &s->err);
        if (s->st != GRM_OK) return;
        grm__grmcol_column(&f->meta, q->g, c, s->payload[i], &s->cols[i]);
    }
}

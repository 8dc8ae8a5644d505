/* plugins/ckpt-grm/ckpt_grm_save.c - write a ckpt-grm file (README.md "Byte layout").
 * Atomic: everything goes to "<path>.tmp.<pid>", which is fsynced and renamed over path,
 * and then the directory is fsynced, so a crash never leaves a loadable partial file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#include <zstd.h>

#include "ckpt_file.h"
#include "ckpt_grm.h"

/* Bytes of tensor t, or an error naming it. */
static grm_status cg_tensor_bytes(const grm_host_api *host, const char *path,
                                  const grm_named_tensor *nt, int64_t i, int streamed,
                                  size_t *bytes)
{
    const grm_tensor *t = &nt->tensor;
    if (nt->name == NULL || nt->name[0] == '\0')
        return host->errorf(GRM_EINVAL, "ckpt-grm: %s: tensor #%lld has no name", path,
                            (long long)i);
    if (strlen(nt->name) > CG_MAX_NAME)
        return host->errorf(GRM_EINVAL, "ckpt-grm: %s: tensor #%lld: name of %zu bytes is "
                            "longer than %u", path, (long long)i, strlen(nt->name),
                            CG_MAX_NAME);
    const size_t elem = grm_dtype_size(t->dtype);
    if (elem == 0)
        return host->errorf(GRM_EINVAL, "ckpt-grm: %s: tensor '%s': unknown dtype %d", path,
                            nt->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > GRM_TENSOR_MAX_DIMS)
        return host->errorf(GRM_EINVAL, "ckpt-grm: %s: tensor '%s': ndim %d outside [0, %d]",
                            path, nt->name, (int)t->ndim, GRM_TENSOR_MAX_DIMS);
    if (t->device.type != GRM_DEVICE_CPU)
        return host->errorf(GRM_ENOTSUP, "ckpt-grm: %s: tensor '%s' is not on the CPU; copy "
                            "it to the host before saving", path, nt->name);
    size_t b = elem;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return host->errorf(GRM_EINVAL, "ckpt-grm: %s: tensor '%s': dim %d is %lld",
                                path, nt->name, (int)d, (long long)t->shape[d]);
        if (t->shape[d] > 0 && b > SIZE_MAX / (size_t)t->shape[d])
            return host->errorf(GRM_EINVAL, "ckpt-grm: %s: tensor '%s' is too large", path,
                                nt->name);
        b *= (size_t)t->shape[d];
    }
    if (b > 0 && t->data == NULL && !streamed)
        return host->errorf(GRM_EINVAL, "ckpt-grm: %s: tensor '%s' holds %zu bytes but its "
                            "data is NULL", path, nt->name, b);
    if (b > 0 && t->data == NULL && t->ndim < 1)
        return host->errorf(GRM_EINVAL, "ckpt-grm: %s: tensor '%s' is read by rows but has "
                            "no dims", path, nt->name);
    *bytes = b;
    return GRM_OK;
}

/* A FILE plus the running XXH64 of every byte written so far. */
typedef struct cg_writer {
    FILE *f;
    XXH64_state_t *hash;
    int err;                   /* errno of the first failed write, or -1; 0 while fine */
} cg_writer;

static void cg_write(cg_writer *w, const void *p, size_t len)
{
    if (w->err != 0 || len == 0) return;
    errno = 0;
    if (fwrite(p, 1, len, w->f) != len) {
        w->err = errno != 0 ? errno : -1;
        return;
    }
    XXH64_update(w->hash, p, len);
}

static void cg_write_u32(cg_writer *w, uint32_t v)
{
    uint8_t b[4];
    cg_put_u32(b, v);
    cg_write(w, b, sizeof(b));
}

static void cg_write_u64(cg_writer *w, uint64_t v)
{
    uint8_t b[8];
    cg_put_u64(b, v);
    cg_write(w, b, sizeof(b));
}

/* A tensor header (2.0): name, dtype, ndim, shape, raw bytes, chunks. */
static void cg_write_head(cg_writer *w, const grm_named_tensor *nt, size_t raw, int64_t chunks)
{
    const uint32_t name_len = (uint32_t)strlen(nt->name);
    cg_write_u32(w, name_len);
    cg_write(w, nt->name, name_len);
    cg_write_u32(w, (uint32_t)nt->tensor.dtype);
    cg_write_u32(w, (uint32_t)nt->tensor.ndim);
    for (int d = 0; d < GRM_TENSOR_MAX_DIMS; d++)     // dims beyond ndim are stored as 1
        cg_write_u64(w, (uint64_t)(d < nt->tensor.ndim ? nt->tensor.shape[d] : 1));
    cg_write_u64(w, raw);
    cg_write_u64(w, (uint64_t)chunks);
}

/* What the save needs of each tensor: its bytes and how it is written. */
typedef struct cg_plan {
    size_t raw;             /* bytes */
    size_t rb;              /* bytes a row (by rows) */
    int64_t rows;           /* shape[0], or 1 for a 0-d tensor */
    int by_rows;            /* data NULL and bytes > 0: read through rows() */
    int64_t lead;           /* by rows: the first by-rows tensor of as many rows (its group) */
    int64_t per;            /* by rows: rows a chunk, the group's */
    int64_t chunks;
} cg_plan;

/* Rows [row0, row0 + n) of tensor i (src, bytes) as one chunk: its header and its zstd
 * frame. zbuf [*zcap] is the caller's scratch. */
static grm_status cg_put_chunk(const grm_host_api *host, const char *path, cg_writer *w,
                               ZSTD_CCtx *cctx, const char *name, int64_t i, int64_t row0,
                               int64_t n, const void *src, size_t bytes, void **zbuf,
                               size_t *zcap)
{
    const size_t bound = ZSTD_compressBound(bytes);
    if (bound > *zcap) {
        void *p = realloc(*zbuf, bound);
        if (p == NULL)
            return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: tensor '%s': cannot allocate %zu "
                                "bytes to compress it", path, name, bound);
        *zbuf = p;
        *zcap = bound;
    }
    const size_t comp = ZSTD_compress2(cctx, *zbuf, *zcap, src, bytes);
    if (ZSTD_isError(comp))
        return host->errorf(GRM_EINTERNAL, "ckpt-grm: %s: tensor '%s': zstd: %s", path, name,
                            ZSTD_getErrorName(comp));
    cg_write_u32(w, (uint32_t)i);
    cg_write_u32(w, 0);
    cg_write_u64(w, (uint64_t)row0);
    cg_write_u64(w, (uint64_t)n);
    cg_write_u64(w, comp);
    cg_write_u64(w, XXH64(src, bytes, CG_XXH_SEED));
    cg_write(w, *zbuf, comp);
    return GRM_OK;
}

/* The by-rows tensors of group `lead` (those of as many rows), a range of rows at a time:
 * each range of every tensor of the group read through rows() and written as a chunk
 * before the next range is read. A store whose rows live in a file (emb-dynamic's tiered
 * tables) then reads each range of its records once for all of its tensors, not once a
 * tensor. in [*cap] and zbuf [*zcap] are the caller's scratch. */
static grm_status cg_group(const grm_host_api *host, const char *path, cg_writer *w,
                           ZSTD_CCtx *cctx, const grm_named_tensor *tensors, const cg_plan *pl,
                           int64_t n, int64_t lead, grm_ckpt_rows_fn rows, void *user,
                           void **in, size_t *cap, void **zbuf, size_t *zcap)
{
    const int64_t nrows = pl[lead].rows, per = pl[lead].per;
    size_t want = 0;
    for (int64_t i = lead; i < n; i++)
        if (pl[i].by_rows && pl[i].lead == lead && (size_t)per * pl[i].rb > want)
            want = (size_t)per * pl[i].rb;
    if (want > *cap) {
        void *p = realloc(*in, want);
        if (p == NULL)
            return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: tensor '%s': cannot allocate %zu "
                                "bytes for a range of it", path, tensors[lead].name, want);
        *in = p;
        *cap = want;
    }
    grm_status st = GRM_OK;
    for (int64_t r0 = 0; r0 < nrows && st == GRM_OK && w->err == 0; r0 += per) {
        const int64_t nr = nrows - r0 < per ? nrows - r0 : per;
        for (int64_t i = lead; i < n && st == GRM_OK && w->err == 0; i++) {
            if (!pl[i].by_rows || pl[i].lead != lead) continue;
            if ((st = rows(user, i, r0, nr, *in)) != GRM_OK) break;
            st = cg_put_chunk(host, path, w, cctx, tensors[i].name, i, r0, nr, *in,
                              (size_t)nr * pl[i].rb, zbuf, zcap);
        }
    }
    return st;
}

grm_status cg_save(const grm_host_api *host, int level, const char *path,
                   const grm_named_tensor *tensors, int64_t n, const char *meta,
                   grm_ckpt_rows_fn rows, void *user)
{
    grm_status st = GRM_OK;
    void *zbuf = NULL, *in = NULL;
    size_t zcap = 0, cap = 0;
    ZSTD_CCtx *cctx = NULL;
    cg_plan *pl = NULL;
    cg_writer w = { NULL, NULL, 0 };
    ckpt_tmp o = { .fd = -1 };        // the temporary; o.name != NULL while it exists
    static const uint8_t empty = 0;   // a valid pointer for zero-byte payloads

    if (path == NULL || path[0] == '\0')
        return host->errorf(GRM_EINVAL, "ckpt-grm: save: path is empty");
    if (n < 0 || (n > 0 && tensors == NULL))
        return host->errorf(GRM_EINVAL, "ckpt-grm: %s: save of %lld tensors at %p", path,
                            (long long)n, (const void *)tensors);
    pl = calloc((size_t)(n > 0 ? n : 1), sizeof(*pl));
    if (pl == NULL) return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: out of memory", path);
    for (int64_t i = 0; i < n; i++) {
        cg_plan *p = &pl[i];
        const grm_tensor *t = &tensors[i].tensor;
        if ((st = cg_tensor_bytes(host, path, &tensors[i], i, rows != NULL, &p->raw)) != GRM_OK)
            goto out;
        p->rows = t->ndim >= 1 ? t->shape[0] : 1;
        p->by_rows = t->data == NULL && p->raw > 0;
        p->chunks = 1;
        if (!p->by_rows) continue;
        p->rb = p->raw / (size_t)p->rows;
        p->lead = i;
        for (int64_t j = 0; j < i; j++)
            if (pl[j].by_rows && pl[j].rows == p->rows) {
                p->lead = pl[j].lead;
                break;
            }
    }
    // a group's ranges: ckpt_group_rows of a row of all of its tensors
    for (int64_t i = 0; i < n; i++) {
        if (!pl[i].by_rows || pl[i].lead != i) continue;
        size_t rb = 0;
        for (int64_t j = i; j < n; j++)
            if (pl[j].by_rows && pl[j].lead == i) rb += pl[j].rb;
        const int64_t per = ckpt_group_rows(rb, pl[i].rows);
        for (int64_t j = i; j < n; j++)
            if (pl[j].by_rows && pl[j].lead == i) {
                pl[j].per = per;
                pl[j].chunks = (pl[j].rows + per - 1) / per;
            }
    }
    if (meta == NULL) meta = "{}";

    w.hash = XXH64_createState();
    cctx = ZSTD_createCCtx();
    if (w.hash == NULL || cctx == NULL) {
        st = host->errorf(GRM_ENOMEM, "ckpt-grm: %s: out of memory", path);
        goto out;
    }
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level))
        || ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1))) {
        st = host->errorf(GRM_EINVAL, "ckpt-grm: %s: zstd refuses level %d", path, level);
        goto out;
    }
    XXH64_reset(w.hash, CG_XXH_SEED);

    if ((st = ckpt_tmp_open(host, "ckpt-grm", path, 1, &o)) != GRM_OK) goto out;
    w.f = o.f;

    // Header: magic, version, metadata, tensor count, the tensors' headers.
    const size_t meta_len = strlen(meta);
    cg_write(&w, CG_MAGIC, CG_MAGIC_LEN);
    cg_write_u32(&w, CG_FORMAT_MAJOR);
    cg_write_u32(&w, CG_FORMAT_MINOR);
    cg_write_u64(&w, meta_len);
    cg_write(&w, meta, meta_len);
    cg_write_u64(&w, (uint64_t)n);
    for (int64_t i = 0; i < n; i++) cg_write_head(&w, &tensors[i], pl[i].raw, pl[i].chunks);

    // Chunks: a whole tensor as one, a group of by-rows tensors where its first one is.
    for (int64_t i = 0; i < n && w.err == 0; i++) {
        const grm_named_tensor *nt = &tensors[i];
        if (pl[i].by_rows) {
            if (pl[i].lead == i
                && (st = cg_group(host, path, &w, cctx, tensors, pl, n, i, rows, user, &in,
                                  &cap, &zbuf, &zcap)) != GRM_OK)
                goto out;
            continue;
        }
        const void *src = pl[i].raw > 0 ? nt->tensor.data : &empty;
        if ((st = cg_put_chunk(host, path, &w, cctx, nt->name, i, 0, pl[i].rows, src,
                               pl[i].raw, &zbuf, &zcap)) != GRM_OK)
            goto out;
    }

    // Trailer: the XXH64 of everything before it (not of itself), then the end marker.
    if (w.err == 0) {
        uint8_t trailer[CG_TRAILER_LEN];
        cg_put_u64(trailer, XXH64_digest(w.hash));
        memcpy(trailer + 8, CG_END_MAGIC, CG_MAGIC_LEN);
        errno = 0;
        if (fwrite(trailer, 1, sizeof(trailer), w.f) != sizeof(trailer))
            w.err = errno != 0 ? errno : -1;
    }
out:
    // written, fsynced and renamed over path when st is GRM_OK and every write went through
    // (w.err); otherwise removed
    if (o.name != NULL) {
        if (o.err == 0) o.err = w.err;
        st = ckpt_tmp_commit(host, &o, st);
    }
    free(zbuf);
    free(in);
    free(pl);
    ZSTD_freeCCtx(cctx);
    XXH64_freeState(w.hash);
    return st;
}

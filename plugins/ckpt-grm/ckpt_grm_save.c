/* plugins/ckpt-grm/ckpt_grm_save.c - write a ckpt-grm file (README.md "Byte layout").
 * Atomic: everything goes to "<path>.tmp.<pid>", which is fsynced and renamed over path,
 * and then the directory is fsynced, so a crash never leaves a loadable partial file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* A tensor header up to its raw size: name, dtype, ndim, shape, raw bytes. */
static void cg_write_head(cg_writer *w, const grm_named_tensor *nt, size_t raw)
{
    const uint32_t name_len = (uint32_t)strlen(nt->name);
    cg_write_u32(w, name_len);
    cg_write(w, nt->name, name_len);
    cg_write_u32(w, (uint32_t)nt->tensor.dtype);
    cg_write_u32(w, (uint32_t)nt->tensor.ndim);
    for (int d = 0; d < GRM_TENSOR_MAX_DIMS; d++)     // dims beyond ndim are stored as 1
        cg_write_u64(w, (uint64_t)(d < nt->tensor.ndim ? nt->tensor.shape[d] : 1));
    cg_write_u64(w, raw);
}

static const char *cg_errno_str(int err)
{
    return err > 0 ? strerror(err) : "short write";
}

/* Tensor i (raw bytes, its data NULL) read through rows() CG_PIECE_BYTES at a time and
 * compressed as it comes into one zstd frame of pledged size raw, written at the file's
 * end: *comp its size, *hash the XXH64 of the raw bytes, for the caller to patch into the
 * header written before it. in [*cap] is the caller's scratch. */
static grm_status cg_stream(const grm_host_api *host, const char *path, cg_writer *w,
                            ZSTD_CCtx *cctx, const grm_named_tensor *nt, int64_t i, size_t raw,
                            grm_ckpt_rows_fn rows, void *user, void **in, size_t *cap,
                            uint64_t *comp, uint64_t *hash)
{
    const int64_t nrows = nt->tensor.shape[0];
    const size_t rb = raw / (size_t)nrows;
    const int64_t per = ckpt_piece_rows(rb, nrows);
    const size_t want = (size_t)per * rb;
    const size_t ocap = ZSTD_CStreamOutSize();
    uint8_t out[1 << 17];
    const size_t olen = ocap < sizeof(out) ? ocap : sizeof(out);
    XXH64_state_t *rh = XXH64_createState();
    grm_status st = GRM_OK;
    if (want > *cap) {
        void *p = realloc(*in, want);
        if (p != NULL) {
            *in = p;
            *cap = want;
        }
    }
    if (want > *cap || rh == NULL) {
        XXH64_freeState(rh);
        return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: tensor '%s': cannot allocate %zu bytes "
                            "for a piece of it", path, nt->name, want);
    }
    XXH64_reset(rh, CG_XXH_SEED);
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
    ZSTD_CCtx_setPledgedSrcSize(cctx, (unsigned long long)raw);
    *comp = 0;
    for (int64_t r0 = 0; r0 < nrows && st == GRM_OK && w->err == 0; r0 += per) {
        const int64_t nr = nrows - r0 < per ? nrows - r0 : per;
        if ((st = rows(user, i, r0, nr, *in)) != GRM_OK) break;
        XXH64_update(rh, *in, (size_t)nr * rb);
        ZSTD_inBuffer ib = { *in, (size_t)nr * rb, 0 };
        const int end = r0 + nr == nrows;
        for (;;) {
            ZSTD_outBuffer ob = { out, olen, 0 };
            const size_t left = ZSTD_compressStream2(cctx, &ob, &ib,
                                                     end ? ZSTD_e_end : ZSTD_e_continue);
            if (ZSTD_isError(left)) {
                st = host->errorf(GRM_EINTERNAL, "ckpt-grm: %s: tensor '%s': zstd: %s", path,
                                  nt->name, ZSTD_getErrorName(left));
                break;
            }
            cg_write(w, out, ob.pos);
            *comp += ob.pos;
            if (end ? left == 0 : ib.pos == ib.size) break;
        }
    }
    *hash = XXH64_digest(rh);
    XXH64_freeState(rh);
    return st;
}

/* The XXH64 of the file's first `end` bytes, read back (a save that patched headers after
 * their payloads cannot keep a running one). */
static int cg_rehash(FILE *f, uint64_t end, uint64_t *out)
{
    static uint8_t buf[1 << 20];
    XXH64_state_t *h = XXH64_createState();
    if (h == NULL) return ENOMEM;
    XXH64_reset(h, CG_XXH_SEED);
    int err = 0;
    for (uint64_t off = 0; off < end && err == 0;) {
        const size_t want = end - off < sizeof(buf) ? (size_t)(end - off) : sizeof(buf);
        const ssize_t got = pread(fileno(f), buf, want, (off_t)off);
        if (got <= 0) err = got < 0 ? errno : -1;
        else {
            XXH64_update(h, buf, (size_t)got);
            off += (uint64_t)got;
        }
    }
    *out = XXH64_digest(h);
    XXH64_freeState(h);
    return err;
}

grm_status cg_save(const grm_host_api *host, int level, const char *path,
                   const grm_named_tensor *tensors, int64_t n, const char *meta,
                   grm_ckpt_rows_fn rows, void *user)
{
    grm_status st = GRM_OK;
    char *tmp = NULL;
    void *zbuf = NULL;
    size_t zcap = 0;
    ZSTD_CCtx *cctx = NULL;
    cg_writer w = { NULL, NULL, 0 };
    int created = 0;                  // tmp exists on disk and must be removed on failure
    static const uint8_t empty = 0;   // a valid pointer for zero-byte payloads

    if (path == NULL || path[0] == '\0')
        return host->errorf(GRM_EINVAL, "ckpt-grm: save: path is empty");
    if (n < 0 || (n > 0 && tensors == NULL))
        return host->errorf(GRM_EINVAL, "ckpt-grm: %s: save of %lld tensors at %p", path,
                            (long long)n, (const void *)tensors);
    for (int64_t i = 0; i < n; i++) {
        size_t bytes;
        if ((st = cg_tensor_bytes(host, path, &tensors[i], i, rows != NULL, &bytes)) != GRM_OK)
            return st;
    }
    if (meta == NULL) meta = "{}";

    const size_t tmp_len = strlen(path) + 32;
    tmp = malloc(tmp_len);
    w.hash = XXH64_createState();
    cctx = ZSTD_createCCtx();
    if (tmp == NULL || w.hash == NULL || cctx == NULL) {
        st = host->errorf(GRM_ENOMEM, "ckpt-grm: %s: out of memory", path);
        goto fail;
    }
    snprintf(tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level))
        || ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1))) {
        st = host->errorf(GRM_EINVAL, "ckpt-grm: %s: zstd refuses level %d", path, level);
        goto fail;
    }
    XXH64_reset(w.hash, CG_XXH_SEED);

    w.f = fopen(tmp, "w+b");     // read too: a patched file is rehashed (cg_rehash)
    if (w.f == NULL) {
        st = host->errorf(GRM_EIO, "ckpt-grm: %s: cannot create %s: %s", path, tmp,
                          strerror(errno));
        goto fail;
    }
    created = 1;

    // Header: magic, version, metadata, tensor count.
    const size_t meta_len = strlen(meta);
    cg_write(&w, CG_MAGIC, CG_MAGIC_LEN);
    cg_write_u32(&w, CG_FORMAT_MAJOR);
    cg_write_u32(&w, CG_FORMAT_MINOR);
    cg_write_u64(&w, meta_len);
    cg_write(&w, meta, meta_len);
    cg_write_u64(&w, (uint64_t)n);

    int patched = 0;     // a header was patched after its payload: the file is rehashed
    for (int64_t i = 0; i < n && w.err == 0; i++) {
        const grm_named_tensor *nt = &tensors[i];
        size_t raw;
        cg_tensor_bytes(host, path, nt, i, rows != NULL, &raw);      // checked above
        const void *src = raw > 0 ? nt->tensor.data : &empty;
        if (src == NULL) {
            // read by rows: the header goes first with its size and checksum as 0, and is
            // patched once the payload is out
            cg_write_head(&w, nt, raw);
            if (w.err == 0 && fflush(w.f) != 0) w.err = errno != 0 ? errno : -1;
            if (w.err != 0) break;
            const off_t at = ftello(w.f);
            cg_write_u64(&w, 0);
            cg_write_u64(&w, 0);
            uint64_t comp = 0, hash = 0;
            if ((st = cg_stream(host, path, &w, cctx, nt, i, raw, rows, user, &zbuf, &zcap,
                                &comp, &hash)) != GRM_OK)
                goto fail;
            uint8_t fix[16];
            cg_put_u64(fix, comp);
            cg_put_u64(fix + 8, hash);
            errno = 0;
            if (w.err == 0 && (fflush(w.f) != 0 || pwrite(fileno(w.f), fix, 16, at) != 16))
                w.err = errno != 0 ? errno : -1;
            patched = 1;
            continue;
        }

        const size_t bound = ZSTD_compressBound(raw);
        if (bound > zcap) {
            void *p = realloc(zbuf, bound);
            if (p == NULL) {
                st = host->errorf(GRM_ENOMEM, "ckpt-grm: %s: tensor '%s': cannot allocate "
                                  "%zu bytes to compress it", path, nt->name, bound);
                goto fail;
            }
            zbuf = p;
            zcap = bound;
        }
        const size_t comp = ZSTD_compress2(cctx, zbuf, zcap, src, raw);
        if (ZSTD_isError(comp)) {
            st = host->errorf(GRM_EINTERNAL, "ckpt-grm: %s: tensor '%s': zstd: %s", path,
                              nt->name, ZSTD_getErrorName(comp));
            goto fail;
        }

        cg_write_head(&w, nt, raw);
        cg_write_u64(&w, comp);
        cg_write_u64(&w, XXH64(src, raw, CG_XXH_SEED));
        cg_write(&w, zbuf, comp);
    }

    // Trailer: the XXH64 of everything before it (not of itself), then the end marker.
    if (w.err == 0) {
        uint8_t trailer[CG_TRAILER_LEN];
        uint64_t sum = XXH64_digest(w.hash);
        if (patched) {
            errno = 0;
            if (fflush(w.f) != 0) w.err = errno != 0 ? errno : -1;
            else w.err = cg_rehash(w.f, (uint64_t)ftello(w.f), &sum);
        }
        cg_put_u64(trailer, sum);
        memcpy(trailer + 8, CG_END_MAGIC, CG_MAGIC_LEN);
        errno = 0;
        if (w.err == 0 && fwrite(trailer, 1, sizeof(trailer), w.f) != sizeof(trailer))
            w.err = errno != 0 ? errno : -1;
    }
    if (w.err == 0 && fflush(w.f) != 0) w.err = errno;
    if (w.err == 0 && fsync(fileno(w.f)) != 0) w.err = errno;
    if (w.err != 0) {
        st = host->errorf(GRM_EIO, "ckpt-grm: %s: cannot write %s: %s", path, tmp,
                          cg_errno_str(w.err));
        goto fail;
    }
    FILE *f = w.f;
    w.f = NULL;
    if (fclose(f) != 0) {
        st = host->errorf(GRM_EIO, "ckpt-grm: %s: cannot close %s: %s", path, tmp,
                          strerror(errno));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        st = host->errorf(GRM_EIO, "ckpt-grm: %s: cannot rename %s to it: %s", path, tmp,
                          strerror(errno));
        goto fail;
    }
    created = 0;
    const int err = ckpt_fsync_dir(path);
    if (err != 0) {
        st = host->errorf(GRM_EIO, "ckpt-grm: %s: saved, but cannot fsync its directory: %s",
                          path, strerror(err));
        goto fail;
    }
    free(tmp);
    free(zbuf);
    ZSTD_freeCCtx(cctx);
    XXH64_freeState(w.hash);
    return GRM_OK;

fail:
    if (w.f != NULL) fclose(w.f);
    if (created) unlink(tmp);
    free(tmp);
    free(zbuf);
    ZSTD_freeCCtx(cctx);
    XXH64_freeState(w.hash);
    return st;
}

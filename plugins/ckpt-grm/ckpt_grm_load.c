/* plugins/ckpt-grm/ckpt_grm_load.c - verify and read a ckpt-grm file (README.md "Byte
 * layout", "Verification"). cg_open checks everything before any tensor reaches a caller:
 * magic, version, every header's bounds, every payload (zstd frame checksum, decompressed
 * size, XXH64) and the whole-file checksum in the trailer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#include <zstd.h>

#include "ckpt_file.h"
#include "ckpt_grm.h"

/* Fixed bytes of a tensor header besides the name: name length, dtype, ndim, shape[4],
 * raw bytes, compressed bytes, XXH64. */
#define CG_ENTRY_FIXED (4 + 4 + 4 + 8 * GRM_TENSOR_MAX_DIMS + 8 + 8 + 8)

/* Outcome of the structural parse. */
typedef enum cg_parse {
    CG_PARSE_OK = 0,
    CG_PARSE_SHORT,     /* the file ends inside `what` */
    CG_PARSE_BAD,       /* a field holds an impossible value; `what` says which */
    CG_PARSE_NOMEM      /* the header array could not grow */
} cg_parse;

void cg_close(cg_file *f)
{
    if (f == NULL) return;
    ckpt_unmap(f->data, f->size);
    free(f->entries);
    free(f->names);
    free(f->buf);
    ZSTD_freeDCtx(f->dctx);
    const char *path = f->path;
    memset(f, 0, sizeof(*f));
    f->path = path;
}

/* Walk the headers from byte 16 with bounds checks, filling f->entries, f->n, f->meta.
 * On SHORT or BAD, what [cap] says where; *end is the offset after the last payload. */
static cg_parse cg_parse_headers(cg_file *f, size_t *end, char *what, size_t cap)
{
    const uint8_t *d = f->data;
    const size_t size = f->size;
    size_t pos = 16;
    int64_t cap_entries = 0;

#define CG_NEED(n, ...)                                                                  \
    do {                                                                                 \
        if ((n) > size - pos) {                                                          \
            snprintf(what, cap, __VA_ARGS__);                                            \
            return CG_PARSE_SHORT;                                                       \
        }                                                                                \
    } while (0)
#define CG_BAD(...)                                                                      \
    do {                                                                                 \
        snprintf(what, cap, __VA_ARGS__);                                                \
        return CG_PARSE_BAD;                                                             \
    } while (0)

    CG_NEED(8, "the metadata length");
    const uint64_t meta_len = cg_get_u64(d + pos);
    pos += 8;
    CG_NEED(meta_len, "the metadata (%llu bytes at byte %zu)", (unsigned long long)meta_len,
            pos);
    f->meta = (const char *)d + pos;
    f->meta_len = (size_t)meta_len;
    pos += (size_t)meta_len;
    CG_NEED(8, "the tensor count");
    const uint64_t count = cg_get_u64(d + pos);
    pos += 8;

    // The count is not trusted for an allocation: the array grows as headers are read, and
    // every header takes at least CG_ENTRY_FIXED bytes, so the loop ends within the file.
    for (uint64_t i = 0; i < count; i++) {
        CG_NEED(4, "the header of tensor #%llu at byte %zu", (unsigned long long)i, pos);
        const uint32_t name_len = cg_get_u32(d + pos);
        if (name_len == 0 || name_len > CG_MAX_NAME)
            CG_BAD("tensor #%llu: name length %u outside [1, %u]", (unsigned long long)i,
                   name_len, CG_MAX_NAME);
        CG_NEED((size_t)name_len + CG_ENTRY_FIXED, "the header of tensor #%llu at byte %zu",
                (unsigned long long)i, pos);
        if (f->n == cap_entries) {
            cap_entries = cap_entries ? 2 * cap_entries : 16;
            cg_entry *p = realloc(f->entries, (size_t)cap_entries * sizeof(*p));
            if (p == NULL) return CG_PARSE_NOMEM;
            f->entries = p;
        }
        cg_entry *e = &f->entries[f->n++];
        memset(e, 0, sizeof(*e));
        e->name_len = name_len;
        e->name_off = pos + 4;
        if (memchr(d + e->name_off, '\0', name_len) != NULL)
            CG_BAD("tensor #%llu: name contains a NUL byte", (unsigned long long)i);
        const char *nm = (const char *)d + e->name_off;
        const int nl = (int)(name_len > 64 ? 64 : name_len);     // quoted in messages
        pos += 4 + name_len;
        e->dtype = (int32_t)cg_get_u32(d + pos);
        e->ndim = (int32_t)cg_get_u32(d + pos + 4);
        pos += 8;
        for (int k = 0; k < GRM_TENSOR_MAX_DIMS; k++, pos += 8)
            e->shape[k] = (int64_t)cg_get_u64(d + pos);
        e->raw_bytes = cg_get_u64(d + pos);
        e->comp_bytes = cg_get_u64(d + pos + 8);
        e->raw_hash = cg_get_u64(d + pos + 16);
        pos += 24;

        const size_t elem = grm_dtype_size(e->dtype);
        if (elem == 0) CG_BAD("tensor '%.*s': unknown dtype %d", nl, nm, (int)e->dtype);
        if (e->ndim < 0 || e->ndim > GRM_TENSOR_MAX_DIMS)
            CG_BAD("tensor '%.*s': ndim %d outside [0, %d]", nl, nm, (int)e->ndim,
                   GRM_TENSOR_MAX_DIMS);
        uint64_t want = elem;
        for (int k = 0; k < GRM_TENSOR_MAX_DIMS; k++) {
            const int64_t s = e->shape[k];
            if (k >= e->ndim ? s != 1 : s < 0)
                CG_BAD("tensor '%.*s': dim %d is %lld", nl, nm, k, (long long)s);
            if (s > 0 && want > UINT64_MAX / (uint64_t)s)
                CG_BAD("tensor '%.*s': shape overflows 64 bits", nl, nm);
            want *= (uint64_t)s;
        }
        if (e->raw_bytes != want)
            CG_BAD("tensor '%.*s': header says %llu raw bytes, its shape and dtype hold %llu",
                   nl, nm, (unsigned long long)e->raw_bytes, (unsigned long long)want);
        if (e->raw_bytes > SIZE_MAX / 2)
            CG_BAD("tensor '%.*s': %llu bytes do not fit in memory", nl, nm,
                   (unsigned long long)e->raw_bytes);
        CG_NEED(e->comp_bytes, "the payload of tensor '%.*s' (%llu bytes at byte %zu)", nl, nm,
                (unsigned long long)e->comp_bytes, pos);
        e->payload = pos;
        pos += (size_t)e->comp_bytes;
        e->pieces = f->lazy && e->raw_bytes > CG_PIECE_BYTES && e->ndim >= 1;
        if (!e->pieces && e->raw_bytes > f->max_raw) f->max_raw = (size_t)e->raw_bytes;
    }
    CG_NEED(CG_TRAILER_LEN, "the trailer at byte %zu", pos);
    if (size - pos > CG_TRAILER_LEN)
        CG_BAD("%zu unexpected bytes after the last tensor at byte %zu",
               size - pos - CG_TRAILER_LEN, pos);
    if (memcmp(d + pos + 8, CG_END_MAGIC, CG_MAGIC_LEN) != 0)
        CG_BAD("bad end marker at byte %zu", pos + 8);
    *end = pos;
    return CG_PARSE_OK;
#undef CG_NEED
#undef CG_BAD
}

/* Entry e's payload is one zstd frame of exactly comp_bytes that holds raw_bytes (a frame
 * without a recorded size passes unless sized: every tensor read by pieces must say it). */
static grm_status cg_check_frame(const grm_host_api *host, const cg_file *f, const cg_entry *e,
                                 int sized)
{
    const char *name = (const char *)f->data + e->name_off;
    const int nl = (int)e->name_len;
    const void *src = f->data + e->payload;
    const size_t comp = (size_t)e->comp_bytes;

    const size_t frame = ZSTD_findFrameCompressedSize(src, comp);
    if (ZSTD_isError(frame) || frame != comp)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                            "(its payload is not one zstd frame of %zu bytes: %s)", f->path,
                            nl, name, comp, ZSTD_isError(frame) ? ZSTD_getErrorName(frame)
                                                                : "size differs");
    const unsigned long long content = ZSTD_getFrameContentSize(src, comp);
    if ((content != ZSTD_CONTENTSIZE_UNKNOWN || sized) && content != e->raw_bytes)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                            "(its zstd frame holds %lld bytes, the header says %llu)",
                            f->path, nl, name,
                            content == ZSTD_CONTENTSIZE_ERROR
                                || content == ZSTD_CONTENTSIZE_UNKNOWN ? -1LL
                                                                       : (long long)content,
                            (unsigned long long)e->raw_bytes);
    return GRM_OK;
}

/* Decompress entry e into f->buf and check its size and XXH64. */
static grm_status cg_inflate(const grm_host_api *host, cg_file *f, const cg_entry *e)
{
    const char *name = (const char *)f->data + e->name_off;
    const int nl = (int)e->name_len;
    const void *src = f->data + e->payload;
    const size_t comp = (size_t)e->comp_bytes;
    grm_status st = cg_check_frame(host, f, e, 0);
    if (st != GRM_OK) return st;
    const size_t got = ZSTD_decompressDCtx(f->dctx, f->buf, (size_t)e->raw_bytes, src, comp);
    if (ZSTD_isError(got))
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                            "(zstd: %s)", f->path, nl, name, ZSTD_getErrorName(got));
    if (got != e->raw_bytes)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                            "(decompressed to %zu bytes, the header says %llu)", f->path, nl,
                            name, got, (unsigned long long)e->raw_bytes);
    const uint64_t h = XXH64(f->buf, got, CG_XXH_SEED);
    if (h != e->raw_hash)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                            "(XXH64 of its data is %016llx, the header says %016llx)",
                            f->path, nl, name, (unsigned long long)h,
                            (unsigned long long)e->raw_hash);
    return GRM_OK;
}

/* XXH64 of data [0, end); a reader of pieces lets the pages go as it walks them. */
static uint64_t cg_file_hash(const cg_file *f, size_t end)
{
    XXH64_state_t *st = f->lazy ? XXH64_createState() : NULL;
    if (st == NULL) return XXH64(f->data, end, CG_XXH_SEED);
    XXH64_reset(st, CG_XXH_SEED);
    const size_t win = (size_t)64 << 20;
    for (size_t off = 0; off < end; off += win) {
        const size_t len = end - off < win ? end - off : win;
        XXH64_update(st, f->data + off, len);
        ckpt_unneed(f->data, off, len);
    }
    const uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    return h;
}

static grm_status cg_verify(const grm_host_api *host, cg_file *f)
{
    const uint8_t *d = f->data;
    const size_t size = f->size;
    const char *path = f->path;

    // Magic and version come first: they say whether the rest is ours to read at all.
    if (size < CG_MAGIC_LEN) {
        if (size == 0 || memcmp(d, CG_MAGIC, size) == 0)
            return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: truncated at byte %zu (in the "
                                "magic)", path, size);
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: not a grm checkpoint (bad magic)",
                            path);
    }
    if (memcmp(d, CG_MAGIC, CG_MAGIC_LEN) != 0)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: not a grm checkpoint (bad magic)",
                            path);
    if (size < 16)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: truncated at byte %zu (in the format "
                            "version)", path, size);
    const uint32_t major = cg_get_u32(d + 8), minor = cg_get_u32(d + 12);
    if (major > CG_FORMAT_MAJOR)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: format version %u.%u is newer than "
                            "this ckpt-grm (%u.x); upgrade grm", path, major, minor,
                            CG_FORMAT_MAJOR);
    if (major < CG_FORMAT_MAJOR)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: format version %u.%u is not one this "
                            "ckpt-grm (%u.x) reads", path, major, minor, CG_FORMAT_MAJOR);

    // Headers. A file that stops early lacks the end marker; one that has it but still
    // runs short was corrupted, and the file checksum says so.
    char what[256];
    size_t end = 0;
    const cg_parse pr = cg_parse_headers(f, &end, what, sizeof(what));
    const int has_end = size >= 16 + 16 + CG_TRAILER_LEN
                        && memcmp(d + size - CG_MAGIC_LEN, CG_END_MAGIC, CG_MAGIC_LEN) == 0;
    if (pr == CG_PARSE_NOMEM)
        return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: out of memory for %lld tensor headers",
                            path, (long long)f->n);
    if (pr == CG_PARSE_SHORT && !has_end)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: truncated at byte %zu (in %s)", path,
                            size, what);
    if (pr == CG_PARSE_SHORT)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: corrupt header: %s runs past the end "
                            "of the file (%zu bytes)", path, what, size);
    if (pr == CG_PARSE_BAD)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: corrupt header: %s", path, what);

    // Payloads: each must be one zstd frame (whose own checksum zstd verifies) that
    // decompresses to exactly raw_bytes with the XXH64 its header records.
    f->dctx = ZSTD_createDCtx();
    f->buf = malloc(f->max_raw > 0 ? f->max_raw : 1);
    if (f->dctx == NULL || f->buf == NULL)
        return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: cannot allocate %zu bytes to "
                            "decompress its largest tensor", path, f->max_raw);
    for (int64_t i = 0; i < f->n; i++) {
        const cg_entry *e = &f->entries[i];
        // a tensor read by pieces: its frame now, its data through the file checksum (and
        // its own XXH64 after its last piece, cg_pieces); its pages are let go
        const grm_status st = e->pieces ? cg_check_frame(host, f, e, 1) : cg_inflate(host, f, e);
        if (e->pieces) ckpt_unneed(f->data, e->payload, (size_t)e->comp_bytes);
        if (st != GRM_OK) return st;
    }

    // The trailer's XXH64 covers every byte before it: names, shapes, metadata included.
    const uint64_t want = cg_get_u64(d + end), got = cg_file_hash(f, end);
    if (want != got)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in the file's "
                            "headers or metadata (XXH64 %016llx, the trailer says %016llx)",
                            path, (unsigned long long)got, (unsigned long long)want);

    size_t total = 0;
    for (int64_t i = 0; i < f->n; i++) total += f->entries[i].name_len + 1;
    f->names = malloc(total > 0 ? total : 1);
    if (f->names == NULL)
        return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: out of memory", path);
    char *p = f->names;
    for (int64_t i = 0; i < f->n; i++) {
        cg_entry *e = &f->entries[i];
        memcpy(p, d + e->name_off, e->name_len);
        p[e->name_len] = '\0';
        e->name = p;
        p += e->name_len + 1;
    }
    return GRM_OK;
}

static grm_status cg_open_as(const grm_host_api *host, const char *path, int lazy, cg_file *f)
{
    memset(f, 0, sizeof(*f));
    f->path = path;
    f->lazy = lazy;
    grm_status st = ckpt_map(host, "ckpt-grm", path, &f->data, &f->size);
    if (st != GRM_OK) return st;
    st = cg_verify(host, f);
    if (st != GRM_OK) cg_close(f);
    return st;
}

grm_status cg_open(const grm_host_api *host, const char *path, cg_file *f)
{
    return cg_open_as(host, path, 0, f);
}

grm_status cg_open_pieces(const grm_host_api *host, const char *path, cg_file *f)
{
    return cg_open_as(host, path, 1, f);
}

grm_status cg_read(const grm_host_api *host, cg_file *f, int64_t i, grm_named_tensor *out)
{
    const cg_entry *e = &f->entries[i];
    const grm_status st = cg_inflate(host, f, e);
    if (st != GRM_OK) return st;
    memset(out, 0, sizeof(*out));
    out->name = e->name;
    out->tensor.data = e->raw_bytes > 0 ? f->buf : NULL;
    out->tensor.dtype = e->dtype;
    out->tensor.ndim = e->ndim;
    for (int k = 0; k < GRM_TENSOR_MAX_DIMS; k++) out->tensor.shape[k] = e->shape[k];
    out->tensor.device.type = GRM_DEVICE_CPU;
    out->tensor.device.index = 0;
    return GRM_OK;
}

grm_status cg_pieces(const grm_host_api *host, cg_file *f, int64_t i, grm_ckpt_piece_fn visit,
                     void *user)
{
    const cg_entry *e = &f->entries[i];
    grm_named_tensor t;
    grm_status st;
    if (!e->pieces) {
        if ((st = cg_read(host, f, i, &t)) != GRM_OK) return st;
        return visit(user, &t, 0, t.tensor.ndim >= 1 ? t.tensor.shape[0] : 1);
    }
    const char *name = (const char *)f->data + e->name_off;
    const int nl = (int)e->name_len;
    const int64_t rows = e->shape[0];
    const size_t rb = (size_t)e->raw_bytes / (size_t)rows;
    const int64_t per = ckpt_piece_rows(rb, rows), first = per;
    void *buf = malloc((size_t)first * rb);
    XXH64_state_t *h = XXH64_createState();
    if (buf == NULL || h == NULL) {
        free(buf);
        XXH64_freeState(h);
        return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: tensor '%.*s': cannot allocate %zu "
                            "bytes for a piece of it", f->path, nl, name, (size_t)first * rb);
    }
    XXH64_reset(h, CG_XXH_SEED);
    ZSTD_DCtx_reset(f->dctx, ZSTD_reset_session_only);
    ZSTD_inBuffer ib = { f->data + e->payload, (size_t)e->comp_bytes, 0 };
    size_t left = 1, let_go = 0;
    st = GRM_OK;
    memset(&t, 0, sizeof(t));
    t.name = e->name;
    t.tensor.dtype = e->dtype;
    t.tensor.ndim = e->ndim;
    for (int k = 0; k < GRM_TENSOR_MAX_DIMS; k++) t.tensor.shape[k] = e->shape[k];
    t.tensor.device.type = GRM_DEVICE_CPU;
    t.tensor.data = buf;
    for (int64_t r0 = 0; r0 < rows && st == GRM_OK; r0 += per) {
        const int64_t nr = rows - r0 < per ? rows - r0 : per;
        ZSTD_outBuffer ob = { buf, (size_t)nr * rb, 0 };
        while (ob.pos < ob.size) {
            const size_t in0 = ib.pos, out0 = ob.pos;
            left = ZSTD_decompressStream(f->dctx, &ob, &ib);
            if (ZSTD_isError(left) || (ib.pos == in0 && ob.pos == out0)
                || (left == 0 && ob.pos < ob.size)) {
                st = host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor "
                                  "'%.*s' (its data end at row %lld of %lld%s%s)", f->path, nl,
                                  name, (long long)r0, (long long)rows,
                                  ZSTD_isError(left) ? ": zstd: " : "",
                                  ZSTD_isError(left) ? ZSTD_getErrorName(left) : "");
                break;
            }
        }
        if (st != GRM_OK) break;
        XXH64_update(h, buf, ob.pos);
        ckpt_unneed(f->data, e->payload + let_go, ib.pos - let_go);
        let_go = ib.pos;
        t.tensor.shape[0] = nr;
        st = visit(user, &t, r0, rows);
    }
    // every row is out; the frame must end here, its zstd checksum checked
    while (st == GRM_OK && left != 0) {
        uint8_t extra;
        ZSTD_outBuffer ob = { &extra, 1, 0 };
        const size_t in0 = ib.pos;
        left = ZSTD_decompressStream(f->dctx, &ob, &ib);
        if (ZSTD_isError(left) || ob.pos > 0 || (left != 0 && ib.pos == in0))
            st = host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                              "(its zstd frame does not end after its %lld rows)", f->path,
                              nl, name, (long long)rows);
    }
    const uint64_t got = XXH64_digest(h);
    if (st == GRM_OK && got != e->raw_hash)
        st = host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' (XXH64 "
                          "of its data is %016llx, the header says %016llx)", f->path, nl,
                          name, (unsigned long long)got, (unsigned long long)e->raw_hash);
    free(buf);
    XXH64_freeState(h);
    return st;
}

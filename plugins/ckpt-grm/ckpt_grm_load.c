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
 * raw bytes, then (1.0) compressed bytes and XXH64, or (2.0) the chunk count. */
#define CG_ENTRY_FIXED_1 (4 + 4 + 4 + 8 * GRM_TENSOR_MAX_DIMS + 8 + 8 + 8)
#define CG_ENTRY_FIXED_2 (4 + 4 + 4 + 8 * GRM_TENSOR_MAX_DIMS + 8 + 8)

/* Outcome of the structural parse. */
typedef enum cg_parse {
    CG_PARSE_OK = 0,
    CG_PARSE_SHORT,     /* the file ends inside `what` */
    CG_PARSE_BAD,       /* a field holds an impossible value; `what` says which */
    CG_PARSE_NOMEM      /* an array could not grow */
} cg_parse;

void cg_close(cg_file *f)
{
    if (f == NULL) return;
    ckpt_unmap(f->data, f->size);
    free(f->entries);
    free(f->chunks);
    free(f->order);
    free(f->names);
    free(f->buf);
    ZSTD_freeDCtx(f->dctx);
    const char *path = f->path;
    memset(f, 0, sizeof(*f));
    f->path = path;
}

/* Room for one more chunk; NULL when the array cannot grow. */
static cg_chunk *cg_chunk_push(cg_file *f, int64_t *cap)
{
    if (f->nchunks == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        cg_chunk *p = realloc(f->chunks, (size_t)*cap * sizeof(*p));
        if (p == NULL) return NULL;
        f->chunks = p;
    }
    return &f->chunks[f->nchunks++];
}

/* Bytes of one row of entry e (0 when it has no rows). */
static uint64_t cg_row_bytes(const cg_entry *e)
{
    return e->rows > 0 ? e->raw_bytes / (uint64_t)e->rows : 0;
}

/* Walk the headers from byte 16 with bounds checks, filling f->entries, f->n, f->chunks,
 * f->meta: a 1.0 file's tensor headers each followed by its one payload, a 2.0 file's
 * tensor headers and then its chunks. On SHORT or BAD, what [cap] says where; *end is the
 * offset after the last payload. */
static cg_parse cg_parse_headers(cg_file *f, size_t *end, char *what, size_t cap)
{
    const uint8_t *d = f->data;
    const size_t size = f->size;
    const int v2 = f->major >= 2;
    size_t pos = 16;
    int64_t cap_entries = 0, cap_chunks = 0;
    uint64_t total = 0;     /* 2.0: chunks the headers announce */

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

    // The counts are not trusted for an allocation: the arrays grow as headers are read,
    // and every header takes at least CG_ENTRY_FIXED_2 (CG_CHUNK_FIXED) bytes, so the
    // loops end within the file.
    const size_t fixed = v2 ? CG_ENTRY_FIXED_2 : CG_ENTRY_FIXED_1;
    for (uint64_t i = 0; i < count; i++) {
        CG_NEED(4, "the header of tensor #%llu at byte %zu", (unsigned long long)i, pos);
        const uint32_t name_len = cg_get_u32(d + pos);
        if (name_len == 0 || name_len > CG_MAX_NAME)
            CG_BAD("tensor #%llu: name length %u outside [1, %u]", (unsigned long long)i,
                   name_len, CG_MAX_NAME);
        CG_NEED((size_t)name_len + fixed, "the header of tensor #%llu at byte %zu",
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
        pos += 8;

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
        e->rows = e->ndim >= 1 ? e->shape[0] : 1;
        e->pieces = f->lazy && e->raw_bytes > CG_PIECE_BYTES && e->ndim >= 1;
        if (!e->pieces && e->raw_bytes > f->max_raw) f->max_raw = (size_t)e->raw_bytes;
        if (v2) {
            const uint64_t k = cg_get_u64(d + pos);
            pos += 8;
            // every row in some chunk, every chunk but an empty tensor's one a row or more
            if (k < 1 || k > (uint64_t)(e->rows > 1 ? e->rows : 1))
                CG_BAD("tensor '%.*s': %llu chunks for %lld rows", nl, nm,
                       (unsigned long long)k, (long long)e->rows);
            e->nchunks = (int64_t)k;
            total += k;
            continue;
        }
        // 1.0: the tensor's one payload follows its header
        cg_chunk *c = cg_chunk_push(f, &cap_chunks);
        if (c == NULL) return CG_PARSE_NOMEM;
        c->tensor = (int64_t)i;
        c->row0 = 0;
        c->rows = e->rows;
        c->raw_bytes = e->raw_bytes;
        c->comp_bytes = cg_get_u64(d + pos);
        c->raw_hash = cg_get_u64(d + pos + 8);
        pos += 16;
        e->nchunks = 1;
        CG_NEED(c->comp_bytes, "the payload of tensor '%.*s' (%llu bytes at byte %zu)", nl, nm,
                (unsigned long long)c->comp_bytes, pos);
        c->payload = pos;
        pos += (size_t)c->comp_bytes;
    }

    // 2.0: the chunks, in any order across tensors and in row order within each; e->first
    // counts a tensor's chunks seen so far, and the rows they cover run on from row 0
    for (uint64_t ci = 0; v2 && ci < total; ci++) {
        CG_NEED(CG_CHUNK_FIXED, "the header of chunk #%llu at byte %zu", (unsigned long long)ci,
                pos);
        const uint32_t ti = cg_get_u32(d + pos), zero = cg_get_u32(d + pos + 4);
        if (ti >= (uint64_t)f->n || zero != 0)
            CG_BAD("chunk #%llu at byte %zu: tensor %u of %lld%s", (unsigned long long)ci, pos,
                   ti, (long long)f->n, zero != 0 ? ", reserved field not 0" : "");
        cg_entry *e = &f->entries[ti];
        const char *nm = (const char *)d + e->name_off;
        const int nl = (int)(e->name_len > 64 ? 64 : e->name_len);
        const uint64_t row0 = cg_get_u64(d + pos + 8), rows = cg_get_u64(d + pos + 16);
        cg_chunk *c = cg_chunk_push(f, &cap_chunks);
        if (c == NULL) return CG_PARSE_NOMEM;
        c->tensor = ti;
        c->row0 = (int64_t)row0;
        c->rows = (int64_t)rows;
        c->comp_bytes = cg_get_u64(d + pos + 24);
        c->raw_hash = cg_get_u64(d + pos + 32);
        pos += CG_CHUNK_FIXED;
        // its rows start where the tensor's previous chunk ended, and its last ends at the
        // tensor's last row
        const int last = e->first + 1 == e->nchunks;
        if (e->first >= e->nchunks)
            CG_BAD("chunk #%llu: tensor '%.*s' has only %lld chunks", (unsigned long long)ci,
                   nl, nm, (long long)e->nchunks);
        if (row0 != (uint64_t)e->next || rows > (uint64_t)e->rows - row0
            || (rows == 0 && e->rows != 0) || (last && row0 + rows != (uint64_t)e->rows)
            || (!last && row0 + rows >= (uint64_t)e->rows))
            CG_BAD("chunk #%llu: rows [%llu, +%llu) of tensor '%.*s' (%lld rows, chunk %lld of "
                   "%lld)", (unsigned long long)ci, (unsigned long long)row0,
                   (unsigned long long)rows, nl, nm, (long long)e->rows,
                   (long long)e->first + 1, (long long)e->nchunks);
        c->raw_bytes = rows * cg_row_bytes(e);
        e->first++;
        e->next = (int64_t)(row0 + rows);
        CG_NEED(c->comp_bytes, "the payload of tensor '%.*s', rows [%llu, %llu) (%llu bytes at "
                "byte %zu)", nl, nm, (unsigned long long)row0, (unsigned long long)(row0 + rows),
                (unsigned long long)c->comp_bytes, pos);
        c->payload = pos;
        pos += (size_t)c->comp_bytes;
    }
    // every tensor has its chunks (the total the headers announce could have wrapped)
    for (int64_t i = 0; v2 && i < f->n; i++) {
        const cg_entry *e = &f->entries[i];
        const int nl = (int)(e->name_len > 64 ? 64 : e->name_len);
        if (e->first != e->nchunks)
            CG_BAD("tensor '%.*s': %lld of its %lld chunks", nl, (const char *)d + e->name_off,
                   (long long)e->first, (long long)e->nchunks);
    }
    CG_NEED(CG_TRAILER_LEN, "the trailer at byte %zu", pos);
    if (size - pos > CG_TRAILER_LEN)
        CG_BAD("%zu unexpected bytes after the last %s at byte %zu",
               size - pos - CG_TRAILER_LEN, v2 ? "chunk" : "tensor", pos);
    if (memcmp(d + pos + 8, CG_END_MAGIC, CG_MAGIC_LEN) != 0)
        CG_BAD("bad end marker at byte %zu", pos + 8);
    *end = pos;
    return CG_PARSE_OK;
#undef CG_NEED
#undef CG_BAD
}

/* Where chunk c is, for messages: "" for a tensor's only chunk, else its rows. */
static const char *cg_where(const cg_entry *e, const cg_chunk *c, char *buf, size_t cap)
{
    if (e->nchunks == 1) buf[0] = '\0';
    else snprintf(buf, cap, "rows [%lld, %lld): ", (long long)c->row0,
                  (long long)(c->row0 + c->rows));
    return buf;
}

/* Chunk c of entry e is one zstd frame of exactly comp_bytes that holds raw_bytes (a frame
 * without a recorded size passes unless sized: every chunk read by pieces must say it). */
static grm_status cg_check_frame(const grm_host_api *host, const cg_file *f, const cg_entry *e,
                                 const cg_chunk *c, int sized)
{
    const char *name = (const char *)f->data + e->name_off;
    const int nl = (int)e->name_len;
    const void *src = f->data + c->payload;
    const size_t comp = (size_t)c->comp_bytes;
    char w[96];

    const size_t frame = ZSTD_findFrameCompressedSize(src, comp);
    if (ZSTD_isError(frame) || frame != comp)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                            "(%sits payload is not one zstd frame of %zu bytes: %s)", f->path,
                            nl, name, cg_where(e, c, w, sizeof w), comp,
                            ZSTD_isError(frame) ? ZSTD_getErrorName(frame) : "size differs");
    const unsigned long long content = ZSTD_getFrameContentSize(src, comp);
    if ((content != ZSTD_CONTENTSIZE_UNKNOWN || sized) && content != c->raw_bytes)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                            "(%sits zstd frame holds %lld bytes, the header says %llu)",
                            f->path, nl, name, cg_where(e, c, w, sizeof w),
                            content == ZSTD_CONTENTSIZE_ERROR
                                || content == ZSTD_CONTENTSIZE_UNKNOWN ? -1LL
                                                                       : (long long)content,
                            (unsigned long long)c->raw_bytes);
    return GRM_OK;
}

/* The XXH64 h of chunk c's bytes is the one its header records. */
static grm_status cg_check_hash(const grm_host_api *host, const cg_file *f, const cg_entry *e,
                                const cg_chunk *c, uint64_t h)
{
    char w[96];
    if (h == c->raw_hash) return GRM_OK;
    return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' (%sXXH64 "
                        "of its data is %016llx, the header says %016llx)", f->path,
                        (int)e->name_len, (const char *)f->data + e->name_off,
                        cg_where(e, c, w, sizeof w), (unsigned long long)h,
                        (unsigned long long)c->raw_hash);
}

/* Decompress entry e, chunk by chunk, into f->buf and check each chunk's size and XXH64. */
static grm_status cg_inflate(const grm_host_api *host, cg_file *f, const cg_entry *e)
{
    const char *name = (const char *)f->data + e->name_off;
    const int nl = (int)e->name_len;
    const uint64_t rb = cg_row_bytes(e);
    char w[96];
    for (int64_t k = 0; k < e->nchunks; k++) {
        const cg_chunk *c = &f->chunks[f->order[e->first + k]];
        grm_status st = cg_check_frame(host, f, e, c, 0);
        if (st != GRM_OK) return st;
        uint8_t *dst = (uint8_t *)f->buf + (size_t)c->row0 * rb;
        const size_t got = ZSTD_decompressDCtx(f->dctx, dst, (size_t)c->raw_bytes,
                                               f->data + c->payload, (size_t)c->comp_bytes);
        if (ZSTD_isError(got))
            return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                                "(%szstd: %s)", f->path, nl, name, cg_where(e, c, w, sizeof w),
                                ZSTD_getErrorName(got));
        if (got != c->raw_bytes)
            return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor '%.*s' "
                                "(%sdecompressed to %zu bytes, the header says %llu)", f->path,
                                nl, name, cg_where(e, c, w, sizeof w), got,
                                (unsigned long long)c->raw_bytes);
        if ((st = cg_check_hash(host, f, e, c, XXH64(dst, got, CG_XXH_SEED))) != GRM_OK)
            return st;
    }
    return GRM_OK;
}

/* f->order and each entry's first: the chunks of tensor 0 in row order, then tensor 1's,
 * and so on (a tensor's chunks are in row order in the file). 0 when out of memory. */
static int cg_order(cg_file *f)
{
    f->order = malloc((size_t)(f->nchunks > 0 ? f->nchunks : 1) * sizeof(*f->order));
    if (f->order == NULL) return 0;
    int64_t at = 0;
    for (int64_t i = 0; i < f->n; i++) {
        f->entries[i].first = at;
        f->entries[i].next = at;    // where its next chunk goes in order
        at += f->entries[i].nchunks;
    }
    for (int64_t c = 0; c < f->nchunks; c++)
        f->order[f->entries[f->chunks[c].tensor].next++] = c;
    return 1;
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
    if (major < 1)
        return host->errorf(GRM_EFORMAT, "ckpt-grm: %s: format version %u.%u is not one this "
                            "ckpt-grm (1.x, %u.x) reads", path, major, minor, CG_FORMAT_MAJOR);
    f->major = major;

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
    if (!cg_order(f))
        return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: out of memory for %lld chunks", path,
                            (long long)f->nchunks);

    // Payloads: each must be one zstd frame (whose own checksum zstd verifies) that
    // decompresses to exactly raw_bytes with the XXH64 its header records.
    f->dctx = ZSTD_createDCtx();
    f->buf = malloc(f->max_raw > 0 ? f->max_raw : 1);
    if (f->dctx == NULL || f->buf == NULL)
        return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: cannot allocate %zu bytes to "
                            "decompress its largest tensor", path, f->max_raw);
    for (int64_t i = 0; i < f->n; i++) {
        const cg_entry *e = &f->entries[i];
        if (!e->pieces) {
            const grm_status st = cg_inflate(host, f, e);
            if (st != GRM_OK) return st;
            continue;
        }
        // a tensor read by pieces: its frames now, its data through the file checksum (and
        // each chunk's XXH64 after its last piece, cg_pieces); their pages are let go
        for (int64_t k = 0; k < e->nchunks; k++) {
            const cg_chunk *c = &f->chunks[f->order[e->first + k]];
            const grm_status st = cg_check_frame(host, f, e, c, 1);
            ckpt_unneed(f->data, c->payload, (size_t)c->comp_bytes);
            if (st != GRM_OK) return st;
        }
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

/* Scratch of a reader of pieces: a piece's rows and a chunk's running XXH64. */
typedef struct cg_scratch {
    void *buf;                 /* owned (malloc) [cap] */
    size_t cap;
    XXH64_state_t *h;          /* owned */
} cg_scratch;

static void cg_scratch_fini(cg_scratch *sc)
{
    free(sc->buf);
    XXH64_freeState(sc->h);
}

/* Rows a piece of tensor e holds, and room for one in sc; GRM_ENOMEM names the tensor. */
static grm_status cg_scratch_for(const grm_host_api *host, const cg_file *f, const cg_entry *e,
                                 cg_scratch *sc, int64_t *per)
{
    const size_t rb = (size_t)cg_row_bytes(e);
    *per = ckpt_piece_rows(rb, e->shape[0]);
    const size_t want = (size_t)*per * rb;
    if (sc->h == NULL) sc->h = XXH64_createState();
    if (sc->h != NULL && want > sc->cap) {
        free(sc->buf);
        sc->cap = 0;
        if ((sc->buf = malloc(want)) != NULL) sc->cap = want;
    }
    if (sc->h == NULL || want > sc->cap)
        return host->errorf(GRM_ENOMEM, "ckpt-grm: %s: tensor '%s': cannot allocate %zu bytes "
                            "for a piece of it", f->path, e->name, want);
    return GRM_OK;
}

/* Chunk c of tensor e (one read by pieces) to visit, decompressed a piece of at most `per`
 * rows at a time into sc->buf (a 1.0 file's one chunk a tensor may be far larger than a
 * piece); its frame's end and its XXH64 are checked after its last piece. */
static grm_status cg_chunk_pieces(const grm_host_api *host, cg_file *f, const cg_entry *e,
                                  const cg_chunk *c, int64_t per, cg_scratch *sc,
                                  grm_ckpt_piece_fn visit, void *user)
{
    const char *name = e->name;
    const int nl = (int)e->name_len;
    const int64_t rows = e->shape[0];
    const size_t rb = (size_t)cg_row_bytes(e);
    grm_named_tensor t;
    memset(&t, 0, sizeof(t));
    t.name = e->name;
    t.tensor.dtype = e->dtype;
    t.tensor.ndim = e->ndim;
    for (int k = 0; k < GRM_TENSOR_MAX_DIMS; k++) t.tensor.shape[k] = e->shape[k];
    t.tensor.device.type = GRM_DEVICE_CPU;
    t.tensor.data = sc->buf;
    grm_status st = GRM_OK;
    char w[96];
    XXH64_reset(sc->h, CG_XXH_SEED);
    ZSTD_DCtx_reset(f->dctx, ZSTD_reset_session_only);
    ZSTD_inBuffer ib = { f->data + c->payload, (size_t)c->comp_bytes, 0 };
    size_t left = 1, let_go = 0;
    const int64_t end = c->row0 + c->rows;
    for (int64_t r0 = c->row0; r0 < end && st == GRM_OK; r0 += per) {
        const int64_t nr = end - r0 < per ? end - r0 : per;
        ZSTD_outBuffer ob = { sc->buf, (size_t)nr * rb, 0 };
        while (ob.pos < ob.size) {
            const size_t in0 = ib.pos, out0 = ob.pos;
            left = ZSTD_decompressStream(f->dctx, &ob, &ib);
            if (ZSTD_isError(left) || (ib.pos == in0 && ob.pos == out0)
                || (left == 0 && ob.pos < ob.size)) {
                st = host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor "
                                  "'%.*s' (its data end at row %lld of %lld%s%s)", f->path,
                                  nl, name, (long long)r0, (long long)rows,
                                  ZSTD_isError(left) ? ": zstd: " : "",
                                  ZSTD_isError(left) ? ZSTD_getErrorName(left) : "");
                break;
            }
        }
        if (st != GRM_OK) break;
        XXH64_update(sc->h, sc->buf, ob.pos);
        ckpt_unneed(f->data, c->payload + let_go, ib.pos - let_go);
        let_go = ib.pos;
        t.tensor.shape[0] = nr;
        st = visit(user, &t, r0, rows);
    }
    // every row of the chunk is out; its frame must end here, its zstd checksum checked
    while (st == GRM_OK && left != 0) {
        uint8_t extra;
        ZSTD_outBuffer ob = { &extra, 1, 0 };
        const size_t in0 = ib.pos;
        left = ZSTD_decompressStream(f->dctx, &ob, &ib);
        if (ZSTD_isError(left) || ob.pos > 0 || (left != 0 && ib.pos == in0))
            st = host->errorf(GRM_EFORMAT, "ckpt-grm: %s: checksum mismatch in tensor "
                              "'%.*s' (%sits zstd frame does not end after its %lld rows)",
                              f->path, nl, name, cg_where(e, c, w, sizeof w),
                              (long long)c->rows);
    }
    if (st == GRM_OK) st = cg_check_hash(host, f, e, c, XXH64_digest(sc->h));
    return st;
}

/* Tensor i whole to visit (one piece): a tensor not read by pieces. */
static grm_status cg_whole(const grm_host_api *host, cg_file *f, int64_t i,
                           grm_ckpt_piece_fn visit, void *user)
{
    grm_named_tensor t;
    const grm_status st = cg_read(host, f, i, &t);
    if (st != GRM_OK) return st;
    return visit(user, &t, 0, t.tensor.ndim >= 1 ? t.tensor.shape[0] : 1);
}

grm_status cg_pieces(const grm_host_api *host, cg_file *f, int64_t i, grm_ckpt_piece_fn visit,
                     void *user)
{
    const cg_entry *e = &f->entries[i];
    if (!e->pieces) return cg_whole(host, f, i, visit, user);
    cg_scratch sc = { 0 };
    int64_t per;
    grm_status st = cg_scratch_for(host, f, e, &sc, &per);
    for (int64_t k = 0; k < e->nchunks && st == GRM_OK; k++)
        st = cg_chunk_pieces(host, f, e, &f->chunks[f->order[e->first + k]], per, &sc, visit,
                             user);
    cg_scratch_fini(&sc);
    return st;
}

grm_status cg_pieces_in_file_order(const grm_host_api *host, cg_file *f,
                                   grm_ckpt_piece_fn visit, void *user)
{
    cg_scratch sc = { 0 };
    grm_status st = GRM_OK;
    for (int64_t ci = 0; ci < f->nchunks && st == GRM_OK; ci++) {
        const cg_chunk *c = &f->chunks[ci];
        const cg_entry *e = &f->entries[c->tensor];
        if ((!e->pieces && e->nchunks == 1) || cg_row_bytes(e) == 0) {
            st = cg_whole(host, f, c->tensor, visit, user);
            continue;
        }
        // a chunk at a time, even of a tensor small enough to be read whole: its chunks are
        // ranges save_rows wrote beside another tensor's, and a reader that puts each row of
        // those tensors together (a tiered store) would otherwise get all of its rows first
        int64_t per;
        if ((st = cg_scratch_for(host, f, e, &sc, &per)) == GRM_OK)
            st = cg_chunk_pieces(host, f, e, c, per, &sc, visit, user);
    }
    cg_scratch_fini(&sc);
    return st;
}

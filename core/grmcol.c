/* core/grmcol.c - writer and reader of grmcol files (share/doc/grmcol.md): header, row
 * groups of zstd column chunks with XXH64 checksums, footer and trailer. Implements the
 * storage side of ColumnIO (RecIS §2.1, §2.2.1: columnar layout, compression, CSR for
 * strings and lists). Every byte read from a file is checked before it is trusted: this
 * code parses untrusted input and is fuzzed (tests/fuzz/fuzz_grmcol.c). */
#include "grmcol.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>
// Header-only xxHash: no library to link, the same code in grmhost and the plugin.
#define XXH_INLINE_ALL
#include <xxhash.h>

static const unsigned char grmcol_magic[8] = { 'G', 'R', 'M', 'C', 'O', 'L', '\r', '\n' };

static grm_status col_fail(grm__grmcol_err *e, grm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static grm_status col_fail(grm__grmcol_err *e, grm_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return st;
}

const char *grm__grmcol_type_name(int32_t type)
{
    switch (type) {
    case GRM_COL_I64: return "i64";
    case GRM_COL_F32: return "f32";
    case GRM_COL_STR: return "string";
    case GRM_COL_LIST_I64: return "list<i64>";
    case GRM_COL_LIST_F32: return "list<f32>";
    default: return NULL;
    }
}

/* Bytes per value of a column type (a string's value is a byte). */
static uint64_t col_elem(int32_t type)
{
    switch (type) {
    case GRM_COL_I64: case GRM_COL_LIST_I64: return 8;
    case GRM_COL_F32: case GRM_COL_LIST_F32: return 4;
    default: return 1;
    }
}

static int col_is_csr(int32_t type)
{
    return type == GRM_COL_STR || type == GRM_COL_LIST_I64 || type == GRM_COL_LIST_F32;
}

/* ---- little-endian encoding (grmcol.md §1) ---- */

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static int host_is_le(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Reverse every `width`-byte element of p [n * width] (big-endian hosts only). */
static void swap_elems(void *p, uint64_t n, int width)
{
    unsigned char *b = p;
    for (uint64_t i = 0; i < n; i++, b += width) {
        for (int j = 0; j < width / 2; j++) {
            const unsigned char t = b[j];
            b[j] = b[width - 1 - j];
            b[width - 1 - j] = t;
        }
    }
}

void grm__grmcol_meta_fini(grm__grmcol_meta *m)
{
    if (m == NULL) return;
    if (m->fields != NULL) {
        for (int32_t i = 0; i < m->ncols; i++) free((char *)m->fields[i].name);
    }
    free(m->fields);
    free(m->group_rows);
    free(m->chunks);
    memset(m, 0, sizeof *m);
}

int32_t grm__grmcol_find(const grm__grmcol_meta *m, const char *name)
{
    for (int32_t i = 0; i < m->ncols; i++) {
        if (strcmp(m->fields[i].name, name) == 0) return i;
    }
    return -1;
}

/* ---- reading: header, trailer, footer ---- */

grm_status grm__grmcol_check_header(const void *h, size_t n, const char *name,
                                    grm__grmcol_err *e)
{
    const unsigned char *const p = h;
    if (n < GRM__GRMCOL_HEADER_SIZE) {
        return col_fail(e, GRM_EFORMAT, "%s: truncated: %zu bytes, a grmcol file has at "
                        "least %d", name, n, GRM__GRMCOL_HEADER_SIZE + GRM__GRMCOL_TRAILER_SIZE);
    }
    if (memcmp(p, grmcol_magic, 8) != 0) {
        return col_fail(e, GRM_EFORMAT, "%s: not a grmcol file (no \"GRMCOL\\r\\n\" magic at "
                        "offset 0); write one with grmhost convert", name);
    }
    const unsigned major = (unsigned)get_le(p + 8, 2), minor = (unsigned)get_le(p + 10, 2);
    if (major > GRM__GRMCOL_MAJOR) {
        return col_fail(e, GRM_ENOTSUP, "%s: grmcol format %u.%u is newer than this reader "
                        "(%d.%d); rewrite the file with this grmhost's convert or use a newer "
                        "grm", name, major, minor, GRM__GRMCOL_MAJOR, GRM__GRMCOL_MINOR);
    }
    if (major < 1) {
        return col_fail(e, GRM_EFORMAT, "%s: grmcol format %u.%u does not exist (this reader "
                        "reads %d.x)", name, major, minor, GRM__GRMCOL_MAJOR);
    }
    const uint32_t flags = (uint32_t)get_le(p + 12, 4);
    if (flags != 0) {
        return col_fail(e, GRM_EFORMAT, "%s: header flags 0x%x are not known to grmcol "
                        "%d.%d (expected 0)", name, (unsigned)flags, GRM__GRMCOL_MAJOR,
                        GRM__GRMCOL_MINOR);
    }
    return GRM_OK;
}

/* A bounds-checked cursor over the footer bytes. */
typedef struct cursor {
    const unsigned char *p;
    size_t n, pos;
} cursor;

static int cur_get(cursor *c, int width, uint64_t *v)
{
    if (c->n - c->pos < (size_t)width) return 0;
    *v = get_le(c->p + c->pos, width);
    c->pos += (size_t)width;
    return 1;
}

#define FOOTER_BAD(...) \
    do { st = col_fail(e, GRM_EFORMAT, __VA_ARGS__); goto fail; } while (0)

grm_status grm__grmcol_parse_footer(const void *tail, size_t tail_len, uint64_t file_size,
                                    const char *name, grm__grmcol_meta *m, size_t *need,
                                    grm__grmcol_err *e)
{
    const unsigned char *const t = tail;
    const uint64_t min_size = GRM__GRMCOL_HEADER_SIZE + GRM__GRMCOL_TRAILER_SIZE;
    grm_status st = GRM_OK;

    memset(m, 0, sizeof *m);
    *need = 0;
    if (file_size < min_size || tail_len < GRM__GRMCOL_TRAILER_SIZE || tail_len > file_size) {
        return col_fail(e, GRM_EFORMAT, "%s: truncated: %llu bytes, a grmcol file has at "
                        "least %llu", name, (unsigned long long)file_size,
                        (unsigned long long)min_size);
    }
    const unsigned char *const tr = t + tail_len - GRM__GRMCOL_TRAILER_SIZE;
    if (memcmp(tr + 16, grmcol_magic, 8) != 0) {
        return col_fail(e, GRM_EFORMAT, "%s: truncated or damaged: no grmcol magic in the "
                        "last 8 bytes (%llu bytes in the file); the writer did not finish it",
                        name, (unsigned long long)file_size);
    }
    const uint64_t footer_len = get_le(tr, 8), footer_sum = get_le(tr + 8, 8);
    if (footer_len > file_size - min_size) {
        return col_fail(e, GRM_EFORMAT, "%s: bad footer: length %llu does not fit in a file "
                        "of %llu bytes", name, (unsigned long long)footer_len,
                        (unsigned long long)file_size);
    }
    if (tail_len < footer_len + GRM__GRMCOL_TRAILER_SIZE) {
        *need = (size_t)footer_len + GRM__GRMCOL_TRAILER_SIZE;
        return GRM_OK;
    }
    const unsigned char *const f = tr - footer_len;
    const uint64_t got_sum = XXH64(f, (size_t)footer_len, 0);
    if (got_sum != footer_sum) {
        return col_fail(e, GRM_EFORMAT, "%s: bad footer: checksum mismatch (stored %016llx, "
                        "computed %016llx)", name, (unsigned long long)footer_sum,
                        (unsigned long long)got_sum);
    }
    cursor c = { f, (size_t)footer_len, 0 };
    uint64_t v, major, minor, ncols;
    m->file_size = file_size;
    m->footer_offset = file_size - GRM__GRMCOL_TRAILER_SIZE - footer_len;
    if (!cur_get(&c, 2, &major) || !cur_get(&c, 2, &minor) || !cur_get(&c, 4, &ncols)) {
        FOOTER_BAD("%s: bad footer: %llu bytes is too short", name,
                   (unsigned long long)footer_len);
    }
    if (major != GRM__GRMCOL_MAJOR) {
        FOOTER_BAD("%s: bad footer: version %u.%u differs from the reader's major %d", name,
                   (unsigned)major, (unsigned)minor, GRM__GRMCOL_MAJOR);
    }
    m->major = (uint16_t)major;
    m->minor = (uint16_t)minor;
    if (ncols < 1 || ncols > GRM__GRMCOL_MAX_COLS) {
        FOOTER_BAD("%s: bad footer: %llu columns (allowed 1..%d)", name,
                   (unsigned long long)ncols, GRM__GRMCOL_MAX_COLS);
    }
    m->fields = calloc((size_t)ncols, sizeof *m->fields);
    if (m->fields == NULL) return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
    m->ncols = (int32_t)ncols;
    for (int32_t i = 0; i < m->ncols; i++) {
        uint64_t type, reserved, len;
        if (!cur_get(&c, 1, &type) || !cur_get(&c, 1, &reserved) || !cur_get(&c, 2, &len)) {
            FOOTER_BAD("%s: bad footer: ends inside column %d of %d", name, i, m->ncols);
        }
        if (grm__grmcol_type_name((int32_t)type) == NULL || reserved != 0) {
            FOOTER_BAD("%s: bad footer: column %d has type code %u (allowed 1..5)", name, i,
                       (unsigned)type);
        }
        if (len < 1 || len > GRM__GRMCOL_MAX_NAME || c.n - c.pos < len
            || memchr(f + c.pos, '\0', (size_t)len) != NULL) {
            FOOTER_BAD("%s: bad footer: column %d has a bad name (length %u)", name, i,
                       (unsigned)len);
        }
        char *const nm = malloc((size_t)len + 1);
        if (nm == NULL) {
            st = col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
            goto fail;
        }
        memcpy(nm, f + c.pos, (size_t)len);
        nm[len] = '\0';
        c.pos += (size_t)len;
        m->fields[i].name = nm;
        m->fields[i].type = (int32_t)type;
        for (int32_t j = 0; j < i; j++) {
            if (strcmp(m->fields[j].name, nm) == 0) {
                FOOTER_BAD("%s: bad footer: column name '%s' appears twice", name, nm);
            }
        }
    }
    uint64_t nrows, ngroups;
    if (!cur_get(&c, 8, &nrows) || !cur_get(&c, 4, &ngroups)) {
        FOOTER_BAD("%s: bad footer: ends before the row-group count", name);
    }
    // Each row group takes 8 + 32 * ncols footer bytes: bound G before allocating.
    const uint64_t per_group = 8 + 32 * ncols;
    if (ngroups > (c.n - c.pos) / per_group) {
        FOOTER_BAD("%s: bad footer: %llu row groups do not fit in %zu footer bytes", name,
                   (unsigned long long)ngroups, c.n - c.pos);
    }
    m->ngroups = (int64_t)ngroups;
    m->group_rows = calloc((size_t)ngroups + 1, sizeof *m->group_rows);
    m->chunks = calloc((size_t)(ngroups * ncols) + 1, sizeof *m->chunks);
    if (m->group_rows == NULL || m->chunks == NULL) {
        st = col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
        goto fail;
    }
    uint64_t sum_rows = 0;
    for (int64_t g = 0; g < m->ngroups; g++) {
        cur_get(&c, 8, &v);   // cannot fail: the size was checked above
        if (v < 1 || v > (uint64_t)GRM__GRMCOL_MAX_GROUP_ROWS) {
            FOOTER_BAD("%s: bad footer: row group %lld has %llu rows (allowed 1..%lld)", name,
                       (long long)g, (unsigned long long)v, GRM__GRMCOL_MAX_GROUP_ROWS);
        }
        m->group_rows[g] = (int64_t)v;
        sum_rows += v;
        const uint64_t rows = v;
        for (int32_t i = 0; i < m->ncols; i++) {
            grm__grmcol_chunk *const k = &m->chunks[g * m->ncols + i];
            cur_get(&c, 8, &k->offset);
            cur_get(&c, 8, &k->csize);
            cur_get(&c, 8, &k->usize);
            cur_get(&c, 8, &k->xxh64);
            const char *const cn = m->fields[i].name;
            if (k->csize < 1 || k->offset < GRM__GRMCOL_HEADER_SIZE
                || k->offset > m->footer_offset || k->csize > m->footer_offset - k->offset) {
                FOOTER_BAD("%s: bad footer: row group %lld, column '%s': chunk [%llu, +%llu) "
                           "lies outside the data area [%d, %llu)", name, (long long)g, cn,
                           (unsigned long long)k->offset, (unsigned long long)k->csize,
                           GRM__GRMCOL_HEADER_SIZE, (unsigned long long)m->footer_offset);
            }
            // Payload size rules of grmcol.md §4 (the offsets themselves are checked when
            // the chunk is decoded).
            const int32_t type = m->fields[i].type;
            const uint64_t el = col_elem(type);
            int ok;
            if (col_is_csr(type)) {
                ok = k->usize >= 8 * (rows + 1) && (k->usize - 8 * (rows + 1)) % el == 0;
            } else {
                ok = k->usize == el * rows;
            }
            if (!ok) {
                FOOTER_BAD("%s: bad footer: row group %lld, column '%s': payload size %llu "
                           "does not fit %llu rows of %s", name, (long long)g, cn,
                           (unsigned long long)k->usize, (unsigned long long)rows,
                           grm__grmcol_type_name(type));
            }
        }
    }
    if (sum_rows != nrows) {
        FOOTER_BAD("%s: bad footer: row groups hold %llu rows, the footer says %llu", name,
                   (unsigned long long)sum_rows, (unsigned long long)nrows);
    }
    m->nrows = (int64_t)nrows;
    if (m->minor == 0 && c.pos != c.n) {
        FOOTER_BAD("%s: bad footer: %zu bytes left after the last row group", name,
                   c.n - c.pos);
    }
    return GRM_OK;

fail:
    grm__grmcol_meta_fini(m);
    return st;
}

grm_status grm__grmcol_parse_buffer(const void *buf, size_t len, const char *name,
                                    grm__grmcol_meta *m, grm__grmcol_err *e)
{
    size_t need;
    memset(m, 0, sizeof *m);
    grm_status st = grm__grmcol_check_header(buf, len, name, e);
    if (st != GRM_OK) return st;
    st = grm__grmcol_parse_footer(buf, len, len, name, m, &need, e);
    if (st == GRM_OK && need != 0) {
        // The whole file was given, so the footer cannot be longer than it.
        return col_fail(e, GRM_EINTERNAL, "%s: footer needs %zu bytes of %zu", name, need,
                        len);
    }
    return st;
}

/* pread exactly n bytes at off, or fail naming the file. */
static grm_status read_at(int fd, void *buf, size_t n, uint64_t off, const char *path,
                          grm__grmcol_err *e)
{
    size_t done = 0;
    while (done < n) {
        const ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            return col_fail(e, GRM_EIO, "%s: read failed at offset %llu: %s", path,
                            (unsigned long long)(off + done), strerror(errno));
        }
        if (r == 0) {
            return col_fail(e, GRM_EFORMAT, "%s: truncated: the file ended at offset %llu "
                            "while reading %zu bytes", path,
                            (unsigned long long)(off + done), n);
        }
        done += (size_t)r;
    }
    return GRM_OK;
}

grm_status grm__grmcol_open(const char *path, int *fd_out, grm__grmcol_meta *m,
                            grm__grmcol_err *e)
{
    unsigned char head[GRM__GRMCOL_HEADER_SIZE];
    unsigned char *tail = NULL;
    struct stat sb;
    grm_status st;

    memset(m, 0, sizeof *m);
    *fd_out = -1;
    // O_NONBLOCK: open() of a FIFO would block before fstat could refuse it.
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return col_fail(e, GRM_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = col_fail(e, GRM_EIO, "%s: not a regular file", path);
        goto fail;
    }
    const uint64_t size = (uint64_t)sb.st_size;
    if (size < GRM__GRMCOL_HEADER_SIZE + GRM__GRMCOL_TRAILER_SIZE) {
        st = col_fail(e, GRM_EFORMAT, "%s: truncated: %llu bytes, a grmcol file has at least "
                      "%d", path, (unsigned long long)size,
                      GRM__GRMCOL_HEADER_SIZE + GRM__GRMCOL_TRAILER_SIZE);
        goto fail;
    }
    if ((st = read_at(fd, head, sizeof head, 0, path, e)) != GRM_OK) goto fail;
    if ((st = grm__grmcol_check_header(head, sizeof head, path, e)) != GRM_OK) goto fail;
    // Read a guess of the tail first; a long footer needs a second read of its length.
    size_t want = size < 65536 ? (size_t)size : 65536;
    for (int pass = 0; pass < 2; pass++) {
        size_t need;
        free(tail);
        tail = malloc(want);
        if (tail == NULL) {
            st = col_fail(e, GRM_ENOMEM, "%s: out of memory reading the footer", path);
            goto fail;
        }
        if ((st = read_at(fd, tail, want, size - want, path, e)) != GRM_OK) goto fail;
        st = grm__grmcol_parse_footer(tail, want, size, path, m, &need, e);
        if (st != GRM_OK) goto fail;
        if (need == 0) break;
        want = need;
    }
    free(tail);
    *fd_out = fd;
    return GRM_OK;

fail:
    free(tail);
    close(fd);
    grm__grmcol_meta_fini(m);
    return st;
}

/* ---- reading: one chunk ---- */

grm_status grm__grmcol_decode(const grm__grmcol_meta *m, const char *name, int64_t g,
                              int32_t c, const void *stored, void *payload, void *dctx,
                              grm__grmcol_err *e)
{
    const grm__grmcol_chunk *const k = &m->chunks[g * m->ncols + c];
    const char *const cn = m->fields[c].name;
    const int32_t type = m->fields[c].type;
    const uint64_t rows = (uint64_t)m->group_rows[g];

    const uint64_t sum = XXH64(stored, (size_t)k->csize, 0);
    if (sum != k->xxh64) {
        return col_fail(e, GRM_EFORMAT, "%s: row group %lld, column '%s': checksum mismatch "
                        "(stored %016llx, computed %016llx over %llu bytes at offset %llu)",
                        name, (long long)g, cn, (unsigned long long)k->xxh64,
                        (unsigned long long)sum, (unsigned long long)k->csize,
                        (unsigned long long)k->offset);
    }
    // The frame must decode to exactly usize bytes: a smaller or larger content is corrupt.
    const unsigned long long fcs = ZSTD_getFrameContentSize(stored, (size_t)k->csize);
    if (fcs == ZSTD_CONTENTSIZE_ERROR) {
        return col_fail(e, GRM_EFORMAT, "%s: row group %lld, column '%s': corrupt chunk: not "
                        "a zstd frame", name, (long long)g, cn);
    }
    if (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != k->usize) {
        return col_fail(e, GRM_EFORMAT, "%s: row group %lld, column '%s': corrupt chunk: "
                        "zstd frame holds %llu bytes, the footer says %llu", name,
                        (long long)g, cn, fcs, (unsigned long long)k->usize);
    }
    size_t got;
    if (dctx != NULL) {
        got = ZSTD_decompressDCtx(dctx, payload, (size_t)k->usize, stored, (size_t)k->csize);
    } else {
        got = ZSTD_decompress(payload, (size_t)k->usize, stored, (size_t)k->csize);
    }
    if (ZSTD_isError(got)) {
        return col_fail(e, GRM_EFORMAT, "%s: row group %lld, column '%s': corrupt chunk: %s",
                        name, (long long)g, cn, ZSTD_getErrorName(got));
    }
    if (got != k->usize) {
        return col_fail(e, GRM_EFORMAT, "%s: row group %lld, column '%s': corrupt chunk: "
                        "decoded %zu bytes, the footer says %llu", name, (long long)g, cn,
                        got, (unsigned long long)k->usize);
    }
    const int le = host_is_le();
    if (col_is_csr(type)) {
        int64_t *const off = payload;   /* [rows+1] */
        if (!le) swap_elems(off, rows + 1, 8);
        const uint64_t nvals = (k->usize - 8 * (rows + 1)) / col_elem(type);
        if (off[0] != 0 || (uint64_t)off[rows] != nvals) {
            return col_fail(e, GRM_EFORMAT, "%s: row group %lld, column '%s': bad offsets: "
                            "first %lld and last %lld, expected 0 and %llu", name,
                            (long long)g, cn, (long long)off[0], (long long)off[rows],
                            (unsigned long long)nvals);
        }
        for (uint64_t i = 0; i < rows; i++) {
            if (off[i + 1] < off[i]) {
                return col_fail(e, GRM_EFORMAT, "%s: row group %lld, column '%s': bad "
                                "offsets: row %llu ends at %lld before it starts at %lld",
                                name, (long long)g, cn, (unsigned long long)i,
                                (long long)off[i + 1], (long long)off[i]);
            }
        }
        if (!le && type != GRM_COL_STR) {
            swap_elems(off + rows + 1, nvals, (int)col_elem(type));
        }
    } else if (!le) {
        swap_elems(payload, rows, (int)col_elem(type));
    }
    return GRM_OK;
}

void grm__grmcol_column(const grm__grmcol_meta *m, int64_t g, int32_t c, void *payload,
                        grm_column *col)
{
    const int64_t rows = m->group_rows[g];
    memset(col, 0, sizeof *col);
    col->name = m->fields[c].name;
    col->type = m->fields[c].type;
    col->rows = rows;
    if (col_is_csr(col->type)) {
        col->offsets = payload;
        col->values = (int64_t *)payload + rows + 1;
    } else {
        col->values = payload;
    }
}

/* ---- writing ---- */

struct grm__grmcol_writer {
    char *path;                  /* owned: final name */
    char *tmp;                   /* owned: path.tmp; NULL for a memory writer */
    FILE *f;                     /* the file, or NULL for a memory writer */
    unsigned char *mem;          /* memory writer: [mlen] of [mcap] */
    size_t mlen, mcap;
    uint64_t pos;                /* bytes written so far */
    int32_t ncols;
    grm_field *fields;           /* [ncols]; names owned */
    int32_t level;
    ZSTD_CCtx *cctx;
    unsigned char *payload;      /* scratch: one chunk's payload */
    size_t payload_cap;
    unsigned char *zbuf;         /* scratch: one compressed chunk */
    size_t zbuf_cap;
    int64_t ngroups, groups_cap, nrows;
    int64_t *group_rows;         /* [groups_cap] */
    grm__grmcol_chunk *chunks;   /* [groups_cap * ncols] */
};

static int grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap) return 1;
    size_t n = *cap ? *cap : 4096;
    while (n < need) n *= 2;
    void *const q = realloc(*p, n);
    if (q == NULL) return 0;
    *p = q;
    *cap = n;
    return 1;
}

static grm_status w_put(grm__grmcol_writer *w, const void *data, size_t n, grm__grmcol_err *e)
{
    const char *const name = w->path != NULL ? w->path : "(memory)";
    if (w->f != NULL) {
        if (n > 0 && fwrite(data, 1, n, w->f) != n) {
            return col_fail(e, GRM_EIO, "%s: write failed: %s", w->tmp, strerror(errno));
        }
    } else {
        void *p = w->mem;
        if (!grow(&p, &w->mcap, w->mlen + n)) {
            return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
        }
        w->mem = p;
        if (n > 0) memcpy(w->mem + w->mlen, data, n);
        w->mlen += n;
    }
    w->pos += n;
    return GRM_OK;
}

static void w_free(grm__grmcol_writer *w)
{
    if (w->fields != NULL) {
        for (int32_t i = 0; i < w->ncols; i++) free((char *)w->fields[i].name);
    }
    free(w->fields);
    ZSTD_freeCCtx(w->cctx);
    free(w->payload);
    free(w->zbuf);
    free(w->group_rows);
    free(w->chunks);
    free(w->mem);
    free(w->path);
    free(w->tmp);
    free(w);
}

void grm__grmcol_writer_abort(grm__grmcol_writer *w)
{
    if (w == NULL) return;
    if (w->f != NULL) {
        fclose(w->f);
        remove(w->tmp);
    }
    w_free(w);
}

/* A writer on a file (path != NULL) or in memory (path == NULL). */
static grm_status w_open(const char *path, const grm_field *fields, int32_t nfields,
                         int32_t level, grm__grmcol_writer **out, grm__grmcol_err *e)
{
    const char *const name = path != NULL ? path : "(memory)";
    grm_status st = GRM_OK;

    *out = NULL;
    if (nfields < 1 || nfields > GRM__GRMCOL_MAX_COLS) {
        return col_fail(e, GRM_EINVAL, "%s: %d columns; grmcol allows 1..%d", name, nfields,
                        GRM__GRMCOL_MAX_COLS);
    }
    if (level < 1 || level > 19) {
        return col_fail(e, GRM_EINVAL, "%s: zstd level %d is out of range; use 1..19", name,
                        level);
    }
    for (int32_t i = 0; i < nfields; i++) {
        const char *const fn = fields[i].name;
        const size_t len = fn != NULL ? strlen(fn) : 0;
        if (len < 1 || len > GRM__GRMCOL_MAX_NAME) {
            return col_fail(e, GRM_EINVAL, "%s: column %d: a name has 1..%d bytes", name, i,
                            GRM__GRMCOL_MAX_NAME);
        }
        if (grm__grmcol_type_name(fields[i].type) == NULL) {
            return col_fail(e, GRM_EINVAL, "%s: column '%s': unknown type code %d", name, fn,
                            fields[i].type);
        }
        for (int32_t j = 0; j < i; j++) {
            if (strcmp(fields[j].name, fn) == 0) {
                return col_fail(e, GRM_EINVAL, "%s: column '%s' appears twice", name, fn);
            }
        }
    }
    grm__grmcol_writer *const w = calloc(1, sizeof *w);
    if (w == NULL) return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
    w->ncols = nfields;
    w->level = level;
    w->fields = calloc((size_t)nfields, sizeof *w->fields);
    w->cctx = ZSTD_createCCtx();
    if (w->fields == NULL || w->cctx == NULL) goto nomem;
    for (int32_t i = 0; i < nfields; i++) {
        w->fields[i].type = fields[i].type;
        w->fields[i].name = strdup(fields[i].name);
        if (w->fields[i].name == NULL) goto nomem;
    }
    if (path != NULL) {
        const size_t n = strlen(path);
        w->path = strdup(path);
        w->tmp = malloc(n + 5);
        if (w->path == NULL || w->tmp == NULL) goto nomem;
        memcpy(w->tmp, path, n);
        memcpy(w->tmp + n, ".tmp", 5);
        w->f = fopen(w->tmp, "wb");
        if (w->f == NULL) {
            st = col_fail(e, GRM_EIO, "%s: cannot create: %s", w->tmp, strerror(errno));
            w_free(w);
            return st;
        }
    }
    unsigned char h[GRM__GRMCOL_HEADER_SIZE];
    memcpy(h, grmcol_magic, 8);
    put_le(h + 8, GRM__GRMCOL_MAJOR, 2);
    put_le(h + 10, GRM__GRMCOL_MINOR, 2);
    put_le(h + 12, 0, 4);
    if ((st = w_put(w, h, sizeof h, e)) != GRM_OK) {
        grm__grmcol_writer_abort(w);
        return st;
    }
    *out = w;
    return GRM_OK;

nomem:
    grm__grmcol_writer_abort(w);
    return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
}

grm_status grm__grmcol_writer_open(const char *path, const grm_field *fields,
                                   int32_t nfields, int32_t level, grm__grmcol_writer **out,
                                   grm__grmcol_err *e)
{
    if (path == NULL || path[0] == '\0') {
        return col_fail(e, GRM_EINVAL, "grmcol: the output path is empty");
    }
    return w_open(path, fields, nfields, level, out, e);
}

/* Append `n` elements of `width` bytes from src to the payload, little-endian. */
static void put_elems(unsigned char *dst, const void *src, uint64_t n, int width)
{
    if (n == 0) return;
    memcpy(dst, src, (size_t)(n * (uint64_t)width));
    if (!host_is_le()) swap_elems(dst, n, width);
}

/* Write rows [r0, r1) of every column as one row group. */
static grm_status w_group(grm__grmcol_writer *w, const grm_column *cols, int64_t r0,
                          int64_t r1, grm__grmcol_err *e)
{
    const char *const name = w->path != NULL ? w->path : "(memory)";
    const int64_t rows = r1 - r0;
    grm_status st;

    if (w->ngroups == w->groups_cap) {
        const int64_t cap = w->groups_cap ? w->groups_cap * 2 : 64;
        int64_t *const gr = realloc(w->group_rows, (size_t)cap * sizeof *gr);
        if (gr == NULL) return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
        w->group_rows = gr;
        grm__grmcol_chunk *const ch = realloc(w->chunks,
                                              (size_t)(cap * w->ncols) * sizeof *ch);
        if (ch == NULL) return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
        w->chunks = ch;
        w->groups_cap = cap;
    }
    for (int32_t i = 0; i < w->ncols; i++) {
        const grm_column *const col = &cols[i];
        const int32_t type = w->fields[i].type;
        const int width = (int)col_elem(type);
        uint64_t usize;
        if (col_is_csr(type)) {
            const int64_t base = col->offsets[r0];
            const uint64_t nvals = (uint64_t)(col->offsets[r1] - base);
            usize = 8 * (uint64_t)(rows + 1) + nvals * (uint64_t)width;
            void *p = w->payload;
            if (!grow(&p, &w->payload_cap, (size_t)usize)) {
                return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
            }
            w->payload = p;
            for (int64_t r = 0; r <= rows; r++) {
                put_le(w->payload + 8 * r, (uint64_t)(col->offsets[r0 + r] - base), 8);
            }
            put_elems(w->payload + 8 * (rows + 1),
                      (const unsigned char *)col->values + (size_t)base * (size_t)width,
                      nvals, width);
        } else {
            usize = (uint64_t)rows * (uint64_t)width;
            void *p = w->payload;
            if (!grow(&p, &w->payload_cap, (size_t)usize)) {
                return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
            }
            w->payload = p;
            put_elems(w->payload, (const unsigned char *)col->values + r0 * width,
                      (uint64_t)rows, width);
        }
        const size_t bound = ZSTD_compressBound((size_t)usize);
        void *z = w->zbuf;
        if (!grow(&z, &w->zbuf_cap, bound)) {
            return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
        }
        w->zbuf = z;
        const size_t csize = ZSTD_compressCCtx(w->cctx, w->zbuf, w->zbuf_cap, w->payload,
                                               (size_t)usize, w->level);
        if (ZSTD_isError(csize)) {
            return col_fail(e, GRM_EINTERNAL, "%s: column '%s': zstd: %s", name,
                            w->fields[i].name, ZSTD_getErrorName(csize));
        }
        grm__grmcol_chunk *const k = &w->chunks[w->ngroups * w->ncols + i];
        k->offset = w->pos;
        k->csize = csize;
        k->usize = usize;
        k->xxh64 = XXH64(w->zbuf, csize, 0);
        if ((st = w_put(w, w->zbuf, csize, e)) != GRM_OK) return st;
    }
    w->group_rows[w->ngroups++] = rows;
    w->nrows += rows;
    return GRM_OK;
}

/* Check that cols [ncols] match the writer's schema and hold `rows` valid rows. */
static grm_status w_check(const grm__grmcol_writer *w, const grm_column *cols, int64_t rows,
                          grm__grmcol_err *e)
{
    const char *const name = w->path != NULL ? w->path : "(memory)";
    for (int32_t i = 0; i < w->ncols; i++) {
        const grm_column *const col = &cols[i];
        const char *const cn = w->fields[i].name;
        if (col->type != w->fields[i].type) {
            return col_fail(e, GRM_EINVAL, "%s: column '%s': type %d, the schema says %s",
                            name, cn, col->type, grm__grmcol_type_name(w->fields[i].type));
        }
        if (col->rows < rows || (rows > 0 && col->values == NULL && !col_is_csr(col->type))) {
            return col_fail(e, GRM_EINVAL, "%s: column '%s': %lld rows, expected %lld", name,
                            cn, (long long)col->rows, (long long)rows);
        }
        if (col_is_csr(col->type)) {
            if (col->offsets == NULL || col->offsets[0] < 0) {
                return col_fail(e, GRM_EINVAL, "%s: column '%s': offsets missing", name, cn);
            }
            for (int64_t r = 0; r < rows; r++) {
                if (col->offsets[r + 1] < col->offsets[r]) {
                    return col_fail(e, GRM_EINVAL, "%s: column '%s': offsets decrease at row "
                                    "%lld", name, cn, (long long)r);
                }
            }
            if (col->offsets[rows] > col->offsets[0] && col->values == NULL) {
                return col_fail(e, GRM_EINVAL, "%s: column '%s': values missing", name, cn);
            }
        }
    }
    return GRM_OK;
}

grm_status grm__grmcol_writer_append(grm__grmcol_writer *w, const grm_column *cols,
                                     int64_t rows, grm__grmcol_err *e)
{
    const char *const name = w->path != NULL ? w->path : "(memory)";
    if (rows < 1 || rows > GRM__GRMCOL_MAX_GROUP_ROWS) {
        return col_fail(e, GRM_EINVAL, "%s: a row group has 1..%lld rows, not %lld", name,
                        GRM__GRMCOL_MAX_GROUP_ROWS, (long long)rows);
    }
    const grm_status st = w_check(w, cols, rows, e);
    if (st != GRM_OK) return st;
    return w_group(w, cols, 0, rows, e);
}

/* Write footer and trailer (grmcol.md §5, §6). */
static grm_status w_finish(grm__grmcol_writer *w, grm__grmcol_err *e)
{
    const char *const name = w->path != NULL ? w->path : "(memory)";
    size_t n = 8 + 8 + 4 + (size_t)w->ngroups * (8 + 32 * (size_t)w->ncols);
    for (int32_t i = 0; i < w->ncols; i++) n += 4 + strlen(w->fields[i].name);
    unsigned char *const f = malloc(n + GRM__GRMCOL_TRAILER_SIZE);
    if (f == NULL) return col_fail(e, GRM_ENOMEM, "%s: out of memory", name);
    unsigned char *p = f;
    put_le(p, GRM__GRMCOL_MAJOR, 2);
    put_le(p + 2, GRM__GRMCOL_MINOR, 2);
    put_le(p + 4, (uint64_t)w->ncols, 4);
    p += 8;
    for (int32_t i = 0; i < w->ncols; i++) {
        const size_t len = strlen(w->fields[i].name);
        p[0] = (unsigned char)w->fields[i].type;
        p[1] = 0;
        put_le(p + 2, len, 2);
        memcpy(p + 4, w->fields[i].name, len);
        p += 4 + len;
    }
    put_le(p, (uint64_t)w->nrows, 8);
    put_le(p + 8, (uint64_t)w->ngroups, 4);
    p += 12;
    for (int64_t g = 0; g < w->ngroups; g++) {
        put_le(p, (uint64_t)w->group_rows[g], 8);
        p += 8;
        for (int32_t i = 0; i < w->ncols; i++) {
            const grm__grmcol_chunk *const k = &w->chunks[g * w->ncols + i];
            put_le(p, k->offset, 8);
            put_le(p + 8, k->csize, 8);
            put_le(p + 16, k->usize, 8);
            put_le(p + 24, k->xxh64, 8);
            p += 32;
        }
    }
    const size_t flen = (size_t)(p - f);
    put_le(p, flen, 8);
    put_le(p + 8, XXH64(f, flen, 0), 8);
    memcpy(p + 16, grmcol_magic, 8);
    const grm_status st = w_put(w, f, flen + GRM__GRMCOL_TRAILER_SIZE, e);
    free(f);
    return st;
}

grm_status grm__grmcol_writer_close(grm__grmcol_writer *w, grm__grmcol_err *e)
{
    grm_status st = w_finish(w, e);
    if (w->f != NULL) {
        if (fclose(w->f) != 0 && st == GRM_OK) {
            st = col_fail(e, GRM_EIO, "%s: write failed: %s", w->tmp, strerror(errno));
        }
        w->f = NULL;
        if (st == GRM_OK && rename(w->tmp, w->path) != 0) {
            st = col_fail(e, GRM_EIO, "%s: cannot rename %s to it: %s", w->path, w->tmp,
                          strerror(errno));
        }
        if (st != GRM_OK) remove(w->tmp);
    }
    w_free(w);
    return st;
}

grm_status grm__grmcol_write_buffer(const grm_field *fields, int32_t nfields,
                                    const grm_column *cols, int64_t rows,
                                    int64_t rows_per_group, int32_t level, void **buf,
                                    size_t *len, grm__grmcol_err *e)
{
    grm__grmcol_writer *w;
    *buf = NULL;
    *len = 0;
    if (rows < 0 || rows_per_group < 1 || rows_per_group > GRM__GRMCOL_MAX_GROUP_ROWS) {
        return col_fail(e, GRM_EINVAL, "(memory): %lld rows in groups of %lld", (long long)rows,
                        (long long)rows_per_group);
    }
    grm_status st = w_open(NULL, fields, nfields, level, &w, e);
    if (st != GRM_OK) return st;
    if ((st = w_check(w, cols, rows, e)) != GRM_OK) goto fail;
    for (int64_t r = 0; r < rows; r += rows_per_group) {
        const int64_t r1 = rows - r < rows_per_group ? rows : r + rows_per_group;
        if ((st = w_group(w, cols, r, r1, e)) != GRM_OK) goto fail;
    }
    if ((st = w_finish(w, e)) != GRM_OK) goto fail;
    *buf = w->mem;
    *len = w->mlen;
    w->mem = NULL;
    w_free(w);
    return GRM_OK;

fail:
    w_free(w);
    return st;
}

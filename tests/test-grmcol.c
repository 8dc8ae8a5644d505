/* tests/test-grmcol.c - the grmcol format library (core/grmcol.c) against its spec
 * (share/doc/grmcol.md): an independent encoder written here from the spec must produce
 * the writer's exact bytes; round trips of every column type with random data (empty
 * strings and lists included) through memory and files, in one and many row groups; and
 * every corruption the spec lists (truncation, magic, newer major, footer checksum,
 * chunk outside the data area, chunk checksum, corrupt zstd, bad CSR offsets) gives its
 * documented status and message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "grmcol.h"
#include "harness.h"
#include "tap.h"

/* ---- random columns ---- */

#define NCOLS 5

typedef struct table {
    int64_t rows;
    grm_field fields[NCOLS];
    grm_column cols[NCOLS];
} table;

static void table_make(table *t, int64_t rows, uint64_t seed)
{
    static const char *const names[NCOLS] = { "id", "score", "name", "items", "weights" };
    static const int32_t types[NCOLS] = { GRM_COL_I64, GRM_COL_F32, GRM_COL_STR,
                                          GRM_COL_LIST_I64, GRM_COL_LIST_F32 };
    uint64_t s = seed;
    memset(t, 0, sizeof *t);
    t->rows = rows;
    for (int c = 0; c < NCOLS; c++) {
        t->fields[c].name = names[c];
        t->fields[c].type = types[c];
        t->cols[c].name = names[c];
        t->cols[c].type = types[c];
        t->cols[c].rows = rows;
    }
    int64_t *id = malloc((size_t)(rows + 1) * 8);
    float *score = malloc((size_t)(rows + 1) * 4);
    int64_t *so = malloc((size_t)(rows + 1) * 8), *lo = malloc((size_t)(rows + 1) * 8);
    int64_t *fo = malloc((size_t)(rows + 1) * 8);
    char *sv = malloc((size_t)(rows * 6 + 1));
    int64_t *lv = malloc((size_t)(rows * 5 + 1) * 8);
    float *fv = malloc((size_t)(rows * 4 + 1) * 4);
    so[0] = lo[0] = fo[0] = 0;
    for (int64_t r = 0; r < rows; r++) {
        id[r] = (int64_t)(harness_rand(&s) >> 1) - (int64_t)(r & 1) * 4611686018427387904LL;
        score[r] = harness_randf(&s) * 1000.0f;
        const int64_t ns = (int64_t)(harness_rand(&s) % 6);      // 0..5 bytes, 0 = empty
        for (int64_t i = 0; i < ns; i++) sv[so[r] + i] = (char)(harness_rand(&s) & 0xff);
        so[r + 1] = so[r] + ns;
        const int64_t nl = (int64_t)(harness_rand(&s) % 5);      // 0..4 ids, 0 = empty
        for (int64_t i = 0; i < nl; i++) lv[lo[r] + i] = (int64_t)harness_rand(&s);
        lo[r + 1] = lo[r] + nl;
        const int64_t nf = (int64_t)(harness_rand(&s) % 4);
        for (int64_t i = 0; i < nf; i++) fv[fo[r] + i] = harness_randf(&s);
        fo[r + 1] = fo[r] + nf;
    }
    t->cols[0].values = id;
    t->cols[1].values = score;
    t->cols[2].values = sv;
    t->cols[2].offsets = so;
    t->cols[3].values = lv;
    t->cols[3].offsets = lo;
    t->cols[4].values = fv;
    t->cols[4].offsets = fo;
}

static void table_free(table *t)
{
    for (int c = 0; c < NCOLS; c++) {
        free(t->cols[c].values);
        free(t->cols[c].offsets);
    }
}

static size_t elem(int32_t type)
{
    return type == GRM_COL_I64 || type == GRM_COL_LIST_I64 ? 8 : type == GRM_COL_STR ? 1 : 4;
}

static int is_csr(int32_t type)
{
    return type >= GRM_COL_STR;
}

/* Row r of column a equals row r0 + r of the table column b, byte for byte. */
static int row_equal(const grm_column *a, int64_t r, const grm_column *b, int64_t rb)
{
    const size_t w = elem(a->type);
    if (!is_csr(a->type)) {
        return memcmp((const char *)a->values + r * (int64_t)w,
                      (const char *)b->values + rb * (int64_t)w, w) == 0;
    }
    const int64_t na = a->offsets[r + 1] - a->offsets[r];
    const int64_t nb = b->offsets[rb + 1] - b->offsets[rb];
    return na == nb && (na == 0 || memcmp((const char *)a->values + a->offsets[r] * (int64_t)w,
                                          (const char *)b->values + b->offsets[rb] * (int64_t)w,
                                          (size_t)na * w) == 0);
}

/* ---- an independent encoder, written from grmcol.md alone ---- */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void b_put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void b_le(buf *b, uint64_t v, int n)
{
    unsigned char t[8];
    for (int i = 0; i < n; i++) t[i] = (unsigned char)(v >> (8 * i));
    b_put(b, t, (size_t)n);
}

/* One chunk payload per §4 for rows [r0, r1) of column c. */
static void spec_payload(buf *out, const grm_column *c, int64_t r0, int64_t r1)
{
    const size_t w = elem(c->type);
    out->n = 0;
    if (!is_csr(c->type)) {
        for (int64_t r = r0; r < r1; r++) {
            uint64_t v = 0;
            memcpy(&v, (const char *)c->values + r * (int64_t)w, w);
            b_le(out, v, (int)w);
        }
        return;
    }
    for (int64_t r = r0; r <= r1; r++) b_le(out, (uint64_t)(c->offsets[r] - c->offsets[r0]), 8);
    for (int64_t i = c->offsets[r0]; i < c->offsets[r1]; i++) {
        uint64_t v = 0;
        memcpy(&v, (const char *)c->values + i * (int64_t)w, w);
        b_le(out, v, (int)w);
    }
}

/* A whole file per §2-§6, one row group per `per` rows, at zstd `level`. Chunks may be
 * replaced by `override` (payload bytes for chunk (g_over, c_over)). */
static void spec_encode(buf *file, const table *t, int64_t per, int level, int64_t g_over,
                        int c_over, const buf *override)
{
    buf pay = { 0 }, foot = { 0 };
    const int64_t ngroups = (t->rows + per - 1) / per;
    uint64_t *meta = calloc((size_t)(ngroups * NCOLS * 4 + 1), 8);
    file->n = 0;
    b_put(file, "GRMCOL\r\n", 8);
    b_le(file, 1, 2);
    b_le(file, 0, 2);
    b_le(file, 0, 4);
    for (int64_t g = 0; g < ngroups; g++) {
        const int64_t r0 = g * per, r1 = r0 + per < t->rows ? r0 + per : t->rows;
        for (int c = 0; c < NCOLS; c++) {
            spec_payload(&pay, &t->cols[c], r0, r1);
            const buf *src = g == g_over && c == c_over ? override : &pay;
            const size_t cap = ZSTD_compressBound(src->n);
            void *z = malloc(cap);
            const size_t zn = ZSTD_compress(z, cap, src->p, src->n, level);
            uint64_t *m = &meta[(g * NCOLS + c) * 4];
            m[0] = file->n;
            m[1] = zn;
            m[2] = src->n;
            m[3] = XXH64(z, zn, 0);
            b_put(file, z, zn);
            free(z);
        }
    }
    b_le(&foot, 1, 2);
    b_le(&foot, 0, 2);
    b_le(&foot, NCOLS, 4);
    for (int c = 0; c < NCOLS; c++) {
        b_le(&foot, (uint64_t)t->fields[c].type, 1);
        b_le(&foot, 0, 1);
        b_le(&foot, strlen(t->fields[c].name), 2);
        b_put(&foot, t->fields[c].name, strlen(t->fields[c].name));
    }
    b_le(&foot, (uint64_t)t->rows, 8);
    b_le(&foot, (uint64_t)ngroups, 4);
    for (int64_t g = 0; g < ngroups; g++) {
        const int64_t r0 = g * per, r1 = r0 + per < t->rows ? r0 + per : t->rows;
        b_le(&foot, (uint64_t)(r1 - r0), 8);
        for (int c = 0; c < NCOLS; c++) {
            for (int k = 0; k < 4; k++) b_le(&foot, meta[(g * NCOLS + c) * 4 + k], 8);
        }
    }
    b_put(file, foot.p, foot.n);
    b_le(file, foot.n, 8);
    b_le(file, XXH64(foot.p, foot.n, 0), 8);
    b_put(file, "GRMCOL\r\n", 8);
    free(meta);
    free(pay.p);
    free(foot.p);
}

/* Recompute the footer checksum after a test edited footer bytes in place. */
static void fix_footer_sum(unsigned char *p, size_t n)
{
    uint64_t flen = 0;
    for (int i = 7; i >= 0; i--) flen = (flen << 8) | p[n - 24 + (size_t)i];
    const uint64_t s = XXH64(p + n - 24 - flen, (size_t)flen, 0);
    for (int i = 0; i < 8; i++) p[n - 16 + (size_t)i] = (unsigned char)(s >> (8 * i));
}

/* ---- decoding a whole buffer ---- */

/* Parse and decode every chunk of buf; compare with t. Returns the first failing status
 * (message in *e) or GRM_OK; *same = 1 when every row matched. */
static grm_status decode_all(const void *p, size_t n, const table *t, int *same,
                             grm__grmcol_meta *keep, grm__grmcol_err *e)
{
    grm__grmcol_meta m;
    grm_status st = grm__grmcol_parse_buffer(p, n, "mem.grmcol", &m, e);
    *same = 0;
    if (st != GRM_OK) return st;
    int ok = m.ncols == NCOLS && (t == NULL || m.nrows == t->rows);
    int64_t base = 0;
    for (int64_t g = 0; g < m.ngroups && st == GRM_OK; g++) {
        for (int32_t c = 0; c < m.ncols && st == GRM_OK; c++) {
            const grm__grmcol_chunk *k = &m.chunks[g * m.ncols + c];
            void *payload = malloc((size_t)k->usize + 8);
            st = grm__grmcol_decode(&m, "mem.grmcol", g, c, (const char *)p + k->offset,
                                    payload, NULL, e);
            if (st == GRM_OK && t != NULL) {
                grm_column col;
                grm__grmcol_column(&m, g, c, payload, &col);
                ok = ok && col.type == t->cols[c].type && !strcmp(col.name, t->cols[c].name);
                for (int64_t r = 0; ok && r < col.rows; r++) {
                    ok = row_equal(&col, r, &t->cols[c], base + r);
                }
            }
            free(payload);
        }
        base += m.group_rows[g];
    }
    *same = ok && st == GRM_OK;
    if (keep != NULL) {
        *keep = m;
    } else {
        grm__grmcol_meta_fini(&m);
    }
    return st;
}

static int has(const char *msg, const char *a, const char *b, const char *c)
{
    const int ok = strstr(msg, a) != NULL && (b == NULL || strstr(msg, b) != NULL)
                   && (c == NULL || strstr(msg, c) != NULL);
    if (!ok) tap_diag("message: %s", msg);
    return ok;
}

int main(void)
{
    grm__grmcol_err e = { { 0 } };
    grm_status st;
    int same;
    tap_plan(34);

    // ---- writer bytes == the spec's bytes; round trips ----
    {
        table t;
        table_make(&t, 1000, 7);
        static const int64_t pers[] = { 1000, 7, 1 };
        for (int i = 0; i < 3; i++) {
            void *p;
            size_t n;
            buf ref = { 0 };
            st = grm__grmcol_write_buffer(t.fields, NCOLS, t.cols, t.rows, pers[i], 3, &p, &n,
                                          &e);
            spec_encode(&ref, &t, pers[i], 3, -1, -1, NULL);
            tap_ok(st == GRM_OK && n == ref.n && memcmp(p, ref.p, n) == 0,
                   "writer output equals the spec encoder byte for byte (1000 rows, %lld per "
                   "group, %zu bytes)", (long long)pers[i], n);
            st = decode_all(p, n, &t, &same, NULL, &e);
            tap_ok(st == GRM_OK && same, "round trip of i64, f32, string, list<i64>, "
                   "list<f32> with empty strings and lists (%lld rows per group)",
                   (long long)pers[i]);
            free(p);
            free(ref.p);
        }
        table_free(&t);
    }
    {
        table t;
        table_make(&t, 0, 1);
        void *p;
        size_t n;
        st = grm__grmcol_write_buffer(t.fields, NCOLS, t.cols, 0, 10, 3, &p, &n, &e);
        grm__grmcol_meta m;
        grm_status st2 = st == GRM_OK ? grm__grmcol_parse_buffer(p, n, "e", &m, &e) : st;
        tap_ok(st2 == GRM_OK && m.nrows == 0 && m.ngroups == 0 && m.ncols == NCOLS,
               "an empty table is a valid file with 0 row groups and its schema");
        if (st2 == GRM_OK) grm__grmcol_meta_fini(&m);
        free(p);
        table_free(&t);
    }

    // ---- files: writer_open/append/close, grm__grmcol_open ----
    const char *dir = harness_tmpdir("grmcol");
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/t.grmcol", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    {
        table t;
        table_make(&t, 300, 11);
        grm__grmcol_writer *w;
        st = grm__grmcol_writer_open(path, t.fields, NCOLS, 5, &w, &e);
        int ok = st == GRM_OK && access(tmp, F_OK) == 0 && access(path, F_OK) != 0;
        // Two row groups of 200 and 100 rows: slice the columns by hand (offsets rebased).
        grm_column part[NCOLS];
        for (int c = 0; c < NCOLS && ok; c++) part[c] = t.cols[c];
        ok = ok && grm__grmcol_writer_append(w, part, 200, &e) == GRM_OK;
        int64_t *offs[NCOLS] = { 0 };
        for (int c = 0; c < NCOLS && ok; c++) {
            const size_t wd = elem(t.cols[c].type);
            if (is_csr(t.cols[c].type)) {
                offs[c] = malloc(101 * 8);
                for (int r = 0; r <= 100; r++) {
                    offs[c][r] = t.cols[c].offsets[200 + r] - t.cols[c].offsets[200];
                }
                part[c].values = (char *)t.cols[c].values + t.cols[c].offsets[200] * (int64_t)wd;
                part[c].offsets = offs[c];
            } else {
                part[c].values = (char *)t.cols[c].values + 200 * wd;
            }
            part[c].rows = 100;
        }
        ok = ok && grm__grmcol_writer_append(w, part, 100, &e) == GRM_OK;
        ok = ok && grm__grmcol_writer_close(w, &e) == GRM_OK;
        tap_ok(ok && access(tmp, F_OK) != 0 && access(path, F_OK) == 0,
               "the writer writes NAME.tmp and renames it to NAME on close");
        int fd = -1;
        grm__grmcol_meta m;
        st = grm__grmcol_open(path, &fd, &m, &e);
        tap_ok(st == GRM_OK && m.ngroups == 2 && m.group_rows[0] == 200
               && m.group_rows[1] == 100 && m.nrows == 300, "open reads the footer: 2 row "
               "groups of 200 and 100 rows");
        // Read the file back whole and compare every row.
        FILE *f = fopen(path, "rb");
        static unsigned char whole[1 << 20];
        const size_t n = fread(whole, 1, sizeof whole, f);
        fclose(f);
        st = decode_all(whole, n, &t, &same, NULL, &e);
        tap_ok(st == GRM_OK && same, "file round trip of every type over two appends");
        if (fd >= 0) close(fd);
        grm__grmcol_meta_fini(&m);
        for (int c = 0; c < NCOLS; c++) free(offs[c]);
        table_free(&t);
    }

    // ---- writer argument errors ----
    {
        grm_field bad[2] = { { "a", GRM_COL_I64, 0 }, { "a", GRM_COL_F32, 0 } };
        grm__grmcol_writer *w = NULL;
        st = grm__grmcol_writer_open(path, bad, 2, 3, &w, &e);
        tap_ok(st == GRM_EINVAL && has(e.msg, "'a' appears twice", NULL, NULL),
               "writer refuses duplicate column names");
        bad[1].name = "b";
        st = grm__grmcol_writer_open(path, bad, 2, 25, &w, &e);
        tap_ok(st == GRM_EINVAL && has(e.msg, "level 25", "1..19", NULL),
               "writer refuses zstd level 25");
        bad[1].type = 9;
        st = grm__grmcol_writer_open(path, bad, 2, 3, &w, &e);
        tap_ok(st == GRM_EINVAL && has(e.msg, "unknown type code 9", NULL, NULL),
               "writer refuses an unknown column type");
        char missing[4300];
        snprintf(missing, sizeof missing, "%s/no/such/dir/x.grmcol", dir);
        bad[1].type = GRM_COL_F32;
        st = grm__grmcol_writer_open(missing, bad, 2, 3, &w, &e);
        tap_ok(st == GRM_EIO && has(e.msg, "cannot create", "x.grmcol.tmp", NULL),
               "writer reports an uncreatable file with its name");
    }

    // ---- corruption, on a 2-row-group file ----
    table t;
    table_make(&t, 40, 3);
    buf good = { 0 };
    spec_encode(&good, &t, 20, 3, -1, -1, NULL);
    unsigned char *p = malloc(good.n);
    grm__grmcol_meta gm;
    st = decode_all(good.p, good.n, &t, &same, &gm, &e);
    tap_ok(st == GRM_OK && same && gm.ngroups == 2, "the spec encoder's file decodes (the "
           "reader follows the spec)");

    memcpy(p, good.p, good.n);
    p[gm.chunks[1 * NCOLS + 3].offset + gm.chunks[1 * NCOLS + 3].csize / 2] ^= 0x40;
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "row group 1, column 'items': checksum mismatch",
                                    "mem.grmcol", NULL),
           "a flipped byte in chunk (1, items) is a checksum mismatch naming file, row group "
           "and column");

    st = decode_all(good.p, good.n - 1, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "truncated", NULL, NULL),
           "a file missing its last byte is reported truncated");
    st = decode_all(good.p, good.n / 2, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "truncated", NULL, NULL),
           "a file cut in half is reported truncated");
    st = decode_all(good.p, 30, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "truncated", "at least 40", NULL),
           "a 30-byte file is shorter than header + trailer");

    memcpy(p, good.p, good.n);
    p[0] = 'X';
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "not a grmcol file", NULL, NULL),
           "a wrong header magic is not a grmcol file");

    memcpy(p, good.p, good.n);
    p[8] = 2;
    p[10] = 3;
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_ENOTSUP && has(e.msg, "grmcol format 2.3 is newer than this reader",
                                    "(1.0)", "mem.grmcol"),
           "major version 2 is refused naming the file and both versions");
    memcpy(p, good.p, good.n);
    p[10] = 7;
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_OK && same, "a newer minor version (1.7) in the header is read");
    memcpy(p, good.p, good.n);
    p[12] = 1;
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "flags", NULL, NULL), "unknown header flags are "
           "refused");

    const size_t foot = (size_t)gm.footer_offset;
    memcpy(p, good.p, good.n);
    p[foot + 9] ^= 1;
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "bad footer", "checksum mismatch", NULL),
           "a flipped footer byte is a bad footer (checksum)");

    // Footer edits with a recomputed footer checksum: the footer's own rules must hold.
    // Layout: 8 bytes, then 5 columns (4 + name), R (8), G (4), then per group 8 + 32*C.
    size_t cols_len = 0;
    for (int c = 0; c < NCOLS; c++) cols_len += 4 + strlen(t.fields[c].name);
    const size_t g0 = foot + 8 + cols_len + 12;           // row group 0's entry
    const size_t k02 = g0 + 8 + 2 * 32;                   // chunk (0, name)
    memcpy(p, good.p, good.n);
    p[k02 + 0] = 0xff;   // offset far beyond the data area
    p[k02 + 1] = 0xff;
    p[k02 + 5] = 0x01;
    fix_footer_sum(p, good.n);
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "bad footer: row group 0, column 'name'",
                                    "outside the data area", NULL),
           "a chunk offset beyond the footer is refused naming row group and column");
    memcpy(p, good.p, good.n);
    p[k02 + 8] = 0xff;   // csize grows past the footer start
    p[k02 + 9] = 0xff;
    p[k02 + 10] = 0xff;
    fix_footer_sum(p, good.n);
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "column 'name'", "outside", NULL),
           "a chunk running into the footer is refused");
    memcpy(p, good.p, good.n);
    p[g0 + 8 + 32 + 16] += 1;   // chunk (0, score): usize 4n+1
    fix_footer_sum(p, good.n);
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "column 'score'", "payload size", NULL),
           "a payload size that does not fit the rows and type is a bad footer");
    memcpy(p, good.p, good.n);
    p[g0] = 21;   // row group 0 claims 21 rows: the totals disagree
    fix_footer_sum(p, good.n);
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "bad footer", NULL, NULL),
           "row counts that disagree are a bad footer");
    memcpy(p, good.p, good.n);
    p[foot + 8] = 7;   // type code of column 0
    fix_footer_sum(p, good.n);
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "bad footer", "type code 7", NULL),
           "an unknown type code is a bad footer");

    // Chunk content damaged with its checksum recomputed: zstd or CSR checks catch it.
    memcpy(p, good.p, good.n);
    const grm__grmcol_chunk *k = &gm.chunks[0 * NCOLS + 1];
    memset(p + k->offset + 4, 0xA5, (size_t)k->csize - 4);   // keep the frame magic only
    const uint64_t s = XXH64(p + k->offset, (size_t)k->csize, 0);
    for (int i = 0; i < 8; i++) p[g0 + 8 + 32 + 24 + (size_t)i] = (unsigned char)(s >> (8 * i));
    fix_footer_sum(p, good.n);
    st = decode_all(p, good.n, &t, &same, NULL, &e);
    tap_ok(st == GRM_EFORMAT && has(e.msg, "row group 0, column 'score': corrupt chunk",
                                    NULL, NULL),
           "a chunk that is not valid zstd (checksum matching) is a corrupt chunk");

    {
        // A list chunk whose offsets decrease, encoded with a correct checksum.
        buf bad = { 0 };
        spec_payload(&bad, &t.cols[3], 0, 20);
        int64_t o1;
        memcpy(&o1, bad.p + 8 * 2, 8);
        const uint64_t big = (uint64_t)o1 + 1000;
        for (int i = 0; i < 8; i++) bad.p[8 + i] = (unsigned char)(big >> (8 * i));
        buf f2 = { 0 };
        spec_encode(&f2, &t, 20, 3, 0, 3, &bad);
        st = decode_all(f2.p, f2.n, &t, &same, NULL, &e);
        tap_ok(st == GRM_EFORMAT && has(e.msg, "row group 0, column 'items': bad offsets",
                                        NULL, NULL),
               "decreasing CSR offsets are bad offsets naming row group and column");
        bad.p[8] = 0;
        spec_payload(&bad, &t.cols[3], 0, 20);
        bad.p[0] = 1;   // offsets[0] must be 0
        spec_encode(&f2, &t, 20, 3, 0, 3, &bad);
        st = decode_all(f2.p, f2.n, &t, &same, NULL, &e);
        tap_ok(st == GRM_EFORMAT && has(e.msg, "bad offsets", "first 1", NULL),
               "offsets[0] != 0 is bad offsets");
        free(bad.p);
        free(f2.p);
    }

    // ---- files on disk: open errors name the path ----
    {
        char bpath[4300];
        snprintf(bpath, sizeof bpath, "%s/cut.grmcol", dir);
        FILE *f = fopen(bpath, "wb");
        fwrite(good.p, 1, good.n - 10, f);
        fclose(f);
        int fd;
        grm__grmcol_meta m;
        st = grm__grmcol_open(bpath, &fd, &m, &e);
        tap_ok(st == GRM_EFORMAT && has(e.msg, bpath, "truncated", NULL),
               "open of a truncated file names the file and says truncated");
        snprintf(bpath, sizeof bpath, "%s/none.grmcol", dir);
        st = grm__grmcol_open(bpath, &fd, &m, &e);
        tap_ok(st == GRM_EIO && has(e.msg, bpath, "cannot open", NULL),
               "open of a missing file is GRM_EIO naming it");
    }

    grm__grmcol_meta_fini(&gm);
    free(p);
    free(good.p);
    table_free(&t);
    return tap_done();
}

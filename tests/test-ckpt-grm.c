/* tests/test-ckpt-grm.c - ckpt-grm save/load round trips, the byte layout of
 * plugins/ckpt-grm/README.md (parsed here independently, payloads decompressed with zstd
 * and hashed with XXH64 by the test itself), and the refusal of corrupt, truncated,
 * foreign and newer files before any tensor is visited. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#include <zstd.h>

#include <grm/ckpt.h>

#include "harness.h"
#include "tap.h"

static const grm_ckpt_ops *ops;
static void *ck;

/* ---- the tensors saved ---- */

#define NT 6
static float t_f32[3 * 5];
static int64_t t_i64[7];
static uint8_t t_u8[1000];
static uint16_t t_bf16[2 * 3 * 4 * 5];
static int32_t t_scalar = -123456;
static grm_named_tensor saved[NT];
static const size_t saved_bytes[NT] = { 60, 56, 1000, 0, 240, 4 };
static const char *const meta = "{\"step\": 42, \"model\": \"hstu\", \"note\": \"\\u00e9\"}";

static grm_named_tensor mk(const char *name, void *data, int32_t dtype, int32_t ndim,
                           int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    grm_named_tensor t = { name, { data, dtype, ndim, { d0, d1, d2, d3 },
                                   { GRM_DEVICE_CPU, 0 } } };
    return t;
}

static void make_tensors(void)
{
    uint64_t rs = 5;
    for (int i = 0; i < 15; i++) t_f32[i] = harness_randf(&rs) * 1e3f;
    t_f32[4] = -0.0f;
    for (int i = 0; i < 7; i++) t_i64[i] = (int64_t)harness_rand(&rs);
    t_i64[0] = INT64_MIN;
    for (int i = 0; i < 1000; i++)    // compressible runs with random bytes in between
        t_u8[i] = (uint8_t)(i % 7 == 0 ? harness_rand(&rs) : (uint64_t)(i / 50));
    for (int i = 0; i < 120; i++) t_bf16[i] = (uint16_t)harness_rand(&rs);
    saved[0] = mk("dense.0.weight", t_f32, GRM_DTYPE_F32, 2, 3, 5, 1, 1);
    saved[1] = mk("emb.item.steps", t_i64, GRM_DTYPE_I64, 1, 7, 1, 1, 1);
    saved[2] = mk("bytes", t_u8, GRM_DTYPE_U8, 1, 1000, 1, 1, 1);
    saved[3] = mk("empty", NULL, GRM_DTYPE_F32, 2, 0, 4, 1, 1);
    saved[4] = mk("four.d", t_bf16, GRM_DTYPE_BF16, 4, 2, 3, 4, 5);
    saved[5] = mk("scalar", &t_scalar, GRM_DTYPE_I32, 0, 1, 1, 1, 1);
}

/* ---- visiting ---- */

typedef struct visit_log {
    int visits;
    int mismatches;
    int stop_at;             /* return GRM_ECANCELED on this visit (1-based), 0: never */
} visit_log;

static grm_status visit(void *user, const grm_named_tensor *t)
{
    visit_log *v = user;
    const int i = v->visits++;
    if (v->stop_at != 0 && v->visits == v->stop_at) return GRM_ECANCELED;
    if (i >= NT) {
        v->mismatches++;
        return GRM_OK;
    }
    const grm_named_tensor *w = &saved[i];
    int same = strcmp(t->name, w->name) == 0 && t->tensor.dtype == w->tensor.dtype
               && t->tensor.ndim == w->tensor.ndim && t->tensor.device.type == GRM_DEVICE_CPU;
    for (int d = 0; d < 4; d++) same &= t->tensor.shape[d] == w->tensor.shape[d];
    if (saved_bytes[i] == 0)
        same &= t->tensor.data == NULL;
    else
        same &= t->tensor.data != NULL
                && memcmp(t->tensor.data, w->tensor.data, saved_bytes[i]) == 0;
    if (!same) {
        tap_diag("tensor #%d '%s' differs", i, t->name);
        v->mismatches++;
    }
    return GRM_OK;
}

/* ---- files ---- */

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*size + 1);
    if (fread(b, 1, *size, f) != *size) *size = 0;
    fclose(f);
    return b;
}

static void write_all(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(b, 1, n, f) != n) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* Where things are in the saved file, from the README layout (2.0; `save` writes every
 * tensor as one chunk). */
typedef struct layout {
    size_t meta_off, meta_len;
    size_t hdr[NT];          /* offset of each tensor header (its name length) */
    size_t raw_field[NT];    /* offset of each header's raw-size field */
    size_t chunk[NT];        /* offset of each tensor's chunk header */
    size_t payload[NT];
    size_t comp[NT];
    size_t trailer;
} layout;

/* Walk the file as README.md describes it and check every field against what was
 * saved; returns 1 when the file matches the documented layout. */
static int check_layout(const uint8_t *b, size_t size, layout *L)
{
    int ok = size > 64 && memcmp(b, "GRMCKPT\0", 8) == 0 && le32(b + 8) == 2
             && le32(b + 12) == 0;
    L->meta_len = (size_t)le64(b + 16);
    L->meta_off = 24;
    ok &= L->meta_len == strlen(meta) && memcmp(b + 24, meta, L->meta_len) == 0;
    size_t p = 24 + L->meta_len;
    ok &= le64(b + p) == NT;
    p += 8;
    for (int i = 0; i < NT && ok; i++) {
        const grm_named_tensor *w = &saved[i];
        L->hdr[i] = p;
        const uint32_t nl = le32(b + p);
        ok &= nl == strlen(w->name) && memcmp(b + p + 4, w->name, nl) == 0;
        p += 4 + nl;
        ok &= (int32_t)le32(b + p) == w->tensor.dtype && (int32_t)le32(b + p + 4)
                                                          == w->tensor.ndim;
        p += 8;
        for (int d = 0; d < 4; d++, p += 8)
            ok &= (int64_t)le64(b + p) == (d < w->tensor.ndim ? w->tensor.shape[d] : 1);
        L->raw_field[i] = p;
        ok &= le64(b + p) == saved_bytes[i] && le64(b + p + 8) == 1;    // one chunk
        p += 16;
    }
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    uint8_t out[2048];
    for (int i = 0; i < NT && ok; i++) {
        const grm_named_tensor *w = &saved[i];
        const int64_t rows = w->tensor.ndim >= 1 ? w->tensor.shape[0] : 1;
        L->chunk[i] = p;
        ok &= le32(b + p) == (uint32_t)i && le32(b + p + 4) == 0 && le64(b + p + 8) == 0
              && (int64_t)le64(b + p + 16) == rows;
        L->comp[i] = (size_t)le64(b + p + 24);
        const uint64_t h = le64(b + p + 32);
        p += 40;
        L->payload[i] = p;
        const size_t n = ZSTD_decompressDCtx(dctx, out, sizeof(out), b + p, L->comp[i]);
        ok &= !ZSTD_isError(n) && n == saved_bytes[i]
              && (n == 0 || memcmp(out, w->tensor.data, n) == 0)
              && h == XXH64(out, n, 0);
        p += L->comp[i];
    }
    ZSTD_freeDCtx(dctx);
    L->trailer = p;
    ok &= p + 16 == size && le64(b + p) == XXH64(b, p, 0)
          && memcmp(b + p + 8, "GRMEND\0\0", 8) == 0;
    return ok;
}

/* Load `path`; returns the status, *visits the number of visit calls. */
static grm_status try_load(const char *path, int *visits)
{
    visit_log v = { 0, 0, 0 };
    const grm_status st = ops->load(ck, path, visit, &v);
    *visits = v.visits;
    return st;
}

/* Write b with byte i xor-ed and expect GRM_EFORMAT with `needle`, nothing visited. */
static int flip_fails(const char *path, uint8_t *b, size_t size, size_t i, const char *needle)
{
    int visits;
    b[i] ^= 0x5A;
    write_all(path, b, size);
    b[i] ^= 0x5A;
    const grm_status st = try_load(path, &visits);
    if (st == GRM_EFORMAT && visits == 0 && (needle == NULL || harness_error_has(needle))) return 1;
    tap_diag("flip at byte %zu: status %d, %d visits: %s", i, (int)st, visits,
             harness_host()->last_error());
    return 0;
}


/* ---- by rows (ABI 1.10: save_rows, load_rows) ---- */

#include "ckpt_rows.h"

/* The chunks of a 2.0 file b, in file order, as README.md lays them out. */
typedef struct chunk_at {
    uint32_t tensor;
    int64_t row0, rows;
    size_t off, comp;        /* its payload */
    uint64_t hash;
} chunk_at;

/* Up to cap chunks of file b into c; returns how many, or -1 when the layout is off. Index
 * *which gets the tensor number of `name` (-1 when absent). */
static int find_chunks(const uint8_t *b, size_t size, const char *name, int *which,
                       chunk_at *c, int cap)
{
    if (size < 40 || le32(b + 8) != 2) return -1;
    size_t p = 24 + (size_t)le64(b + 16);
    const uint64_t n = le64(b + p);
    p += 8;
    uint64_t total = 0;
    *which = -1;
    for (uint64_t i = 0; i < n && p < size; i++) {
        const uint32_t nl = le32(b + p);
        if (nl == strlen(name) && memcmp(b + p + 4, name, nl) == 0) *which = (int)i;
        p += 4 + nl + 8 + 32 + 8;
        total += le64(b + p);
        p += 8;
    }
    int k = 0;
    for (uint64_t i = 0; i < total && p + 40 <= size && k < cap; i++, k++) {
        c[k].tensor = le32(b + p);
        c[k].row0 = (int64_t)le64(b + p + 8);
        c[k].rows = (int64_t)le64(b + p + 16);
        c[k].comp = (size_t)le64(b + p + 24);
        c[k].hash = le64(b + p + 32);
        c[k].off = p + 40;
        p = c[k].off + c[k].comp;
    }
    return p + 16 == size ? k : -1;
}

/* save_rows and load_rows: a 21 MB tensor goes through 16 MiB pieces both ways; the file is
 * the format's own (the whole-tensor load reads it); corruption is still refused. */
static void test_rows(const char *dir)
{
    char path[4200], whole[4200], bad[4200];
    snprintf(path, sizeof(path), "%s/rows.grm", dir);
    snprintf(whole, sizeof(whole), "%s/whole.grm", dir);
    snprintf(bad, sizeof(bad), "%s/rows-bad.grm", dir);
    grm_named_tensor t[3];
    rows_fixture(t, saved[0]);
    rows_log r = { 0, 0, 0 };
    const grm_status sst = ops->save_rows(ck, path, t, 3, meta, rows_fn, &r);
    tap_ok(sst == GRM_OK && r.calls == 4
           && r.most <= ((size_t)8 << 20),
           "save_rows: a 21 MB tensor is read in %d ranges of at most 8 MiB (largest %zu "
           "bytes), the small one in one", r.calls - 1, r.most);

    // the whole-tensor load reads it: the same format, every chunk's XXH64 and the file's
    size_t size = 0;
    uint8_t *b = read_all(path, &size);
    chunk_at c[8];
    int which = -1;
    const int nc = b != NULL ? find_chunks(b, size, "big", &which, c, 8) : -1;
    const size_t rb = BIG_COLS * sizeof(float), raw = (size_t)BIG_ROWS * rb;
    float *out = malloc(raw);
    int ok = nc == 5 && which == 1, bigs = 0;
    int64_t next = 0;
    for (int k = 0; k < nc && ok; k++) {
        if (c[k].tensor != 1) continue;
        const size_t want = (size_t)c[k].rows * rb;
        ok &= c[k].row0 == next
              && ZSTD_decompress((char *)out + (size_t)c[k].row0 * rb, want, b + c[k].off,
                                 c[k].comp) == want
              && XXH64((char *)out + (size_t)c[k].row0 * rb, want, 0) == c[k].hash;
        next += c[k].rows;
        bigs++;
    }
    ok = ok && bigs == 3 && next == BIG_ROWS && memcmp(out, big, raw) == 0
         && le64(b + size - 16) == XXH64(b, size - 16, 0);
    tap_ok(ok, "'big' is 3 chunks of rows in order, each a zstd frame with its rows' XXH64; "
           "the trailer the file's XXH64 (format 2.0, parsed here)");
    free(out);

    piece_log pl = { 0, 0, 0, 0, 0 };
    grm_status st = ops->load_rows(ck, path, piece_fn, &pl);
    tap_ok(st == GRM_OK && pl.bad == 0 && pl.big_pieces == 3 && pl.big_got == BIG_ROWS
           && pl.pieces == 5 && pl.most <= ((size_t)16 << 20),
           "load_rows: 'big' in %d pieces, its chunks, back to back, the small tensors whole, "
           "every byte as saved (%d bad)", pl.big_pieces, pl.bad);

    // a file of whole tensors reads by rows alike
    grm_named_tensor w[3] = { t[0], t[1], t[2] };
    w[1].tensor.data = big;
    w[2].tensor.data = small_src;
    pl = (piece_log){ 0, 0, 0, 0, 0 };
    tap_ok(ops->save(ck, whole, w, 3, meta) == GRM_OK
           && ops->load_rows(ck, whole, piece_fn, &pl) == GRM_OK && pl.bad == 0
           && pl.big_pieces == 2 && pl.most <= ((size_t)16 << 20),
           "load_rows of a file save wrote: 'big', one chunk, in 2 pieces of at most 16 MiB, "
           "every byte as saved");

    // a byte of big's first chunk changed: the file checksum refuses it before any piece
    const size_t off = nc > 0 ? c[0].tensor == 1 ? c[0].off : c[1].off : 0;
    const size_t comp = nc > 0 ? c[0].tensor == 1 ? c[0].comp : c[1].comp : 0;
    b[off + comp / 2] ^= 0x5A;
    write_all(bad, b, size);
    pl = (piece_log){ 0, 0, 0, 0, 0 };
    tap_ok(ops->load_rows(ck, bad, piece_fn, &pl) == GRM_EFORMAT && pl.pieces == 0
           && harness_error_has("checksum mismatch"),
           "a flipped byte in a piece-wise payload: GRM_EFORMAT before any piece");
    // ... and with the file checksum forged to match, the chunk's own check fails it
    uint8_t fix[8];
    const uint64_t forged = XXH64(b, size - 16, 0);
    for (int i = 0; i < 8; i++) fix[i] = (uint8_t)(forged >> (8 * i));
    memcpy(b + size - 16, fix, 8);
    write_all(bad, b, size);
    pl = (piece_log){ 0, 0, 0, 0, 0 };
    st = ops->load_rows(ck, bad, piece_fn, &pl);
    tap_ok(st == GRM_EFORMAT && harness_error_has("tensor 'big'") && pl.big_pieces < 3,
           "... its file checksum forged: GRM_EFORMAT naming 'big' at its pieces (%d of 3 "
           "visited)", pl.big_pieces);
    piece_log pi = { 0, 0, 0, 0, 0 };
    st = ops->load_rows_interleaved(ck, bad, piece_fn, &pi);
    tap_ok(st == GRM_EFORMAT && harness_error_has("tensor 'big'") && pi.big_pieces < 3
           && pi.bad == 0,
           "... and read in the file's order, the same: GRM_EFORMAT naming 'big' (%d of 3 "
           "visited)", pi.big_pieces);
    free(b);

    // a range that cannot be read fails the save and leaves nothing
    r = (rows_log){ 0, 2, 0 };
    remove(path);
    tap_ok(ops->save_rows(ck, path, t, 3, meta, rows_fn, &r) == GRM_EIO
           && read_all(path, &size) == NULL,
           "a range that fails to read fails save_rows with its status; no file is left");
    remove(whole);
    remove(bad);
}

/* ---- range-major: by-rows tensors of as many rows are read a range of all at a time ---- */

typedef struct ranks_log {
    int pieces, bad;
    int64_t got[3];          /* rows of each tensor handed over so far */
    int64_t order[16];       /* the tensor index of each piece */
} ranks_log;

static grm_status ranks_piece(void *user, const grm_named_tensor *t, int64_t row0, int64_t rows)
{
    ranks_log *p = user;
    const int i = strcmp(t->name, "big") == 0 ? 1 : strcmp(t->name, "ranks") == 0 ? 2 : 0;
    if (p->pieces < 16) p->order[p->pieces] = i;
    p->pieces++;
    const int64_t n = t->tensor.ndim >= 1 ? t->tensor.shape[0] : 1;
    p->bad += row0 != p->got[i];
    p->got[i] += n;
    if (i == 1) {
        p->bad += rows != BIG_ROWS || memcmp(t->tensor.data, big + (size_t)row0 * BIG_COLS,
                                              (size_t)n * BIG_COLS * sizeof(float)) != 0;
    } else if (i == 2) {
        const int64_t *v = t->tensor.data;
        for (int64_t r = 0; r < n; r++)
            for (int k = 0; k < 3; k++) p->bad += v[3 * r + k] != rank_at(row0 + r, k);
    }
    return GRM_OK;
}

static void test_range_major(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/ranges.grm", dir);
    grm_named_tensor t[3];
    t[0] = saved[0];
    t[1] = mk("big", NULL, GRM_DTYPE_F32, 2, BIG_ROWS, BIG_COLS, 1, 1);
    t[2] = mk("ranks", NULL, GRM_DTYPE_I64, 2, BIG_ROWS, 3, 1, 1);
    order_log o = { 0, { 0 }, { 0 } };
    const grm_status st = ops->save_rows(ck, path, t, 3, meta, order_rows, &o);
    // 216 bytes a row of both: 38,836 rows a range of 8 MiB, so 3 ranges
    int alternate = o.calls == 6;
    for (int c = 0; c < 6 && alternate; c++)
        alternate = o.index[c] == 1 + c % 2 && o.row0[c] == (int64_t)(c / 2) * 38836;
    tap_ok(st == GRM_OK && alternate,
           "save_rows reads tensors of as many rows a range of all of them at a time: big "
           "[0, +), ranks [0, +), big [38836, +), ranks [38836, +), ... (%d calls)", o.calls);

    size_t size = 0;
    uint8_t *b = read_all(path, &size);
    chunk_at c[8];
    int which = -1;
    const int nc = b != NULL ? find_chunks(b, size, "ranks", &which, c, 8) : -1;
    int inorder = nc == 7 && which == 2 && c[0].tensor == 0;
    for (int k = 1; k < nc && inorder; k++)
        inorder = c[k].tensor == (uint32_t)(2 - k % 2) && c[k].row0 == (int64_t)((k - 1) / 2)
                                                                      * 38836;
    tap_ok(inorder, "the file holds their chunks in that order: dense.0.weight, then big and "
           "ranks range by range");
    free(b);

    ranks_log p = { 0, 0, { 0, 0, 0 }, { 0 } };
    const grm_status lst = ops->load_rows(ck, path, ranks_piece, &p);
    tap_ok(lst == GRM_OK && p.bad == 0
           && p.pieces == 5 && p.order[0] == 0 && p.order[1] == 1 && p.order[2] == 1
           && p.order[3] == 1 && p.order[4] == 2 && p.got[1] == BIG_ROWS
           && p.got[2] == BIG_ROWS,
           "load_rows hands each tensor over back to back, in the order of the headers (big "
           "in its 3 chunks, ranks, 2.6 MB, whole), every byte as saved (%d bad)", p.bad);
    // in the file's order (ABI 1.13): ranks too a chunk at a time, though small enough to
    // be read whole, so a store that puts each row of the two together gets them range by
    // range
    p = (ranks_log){ 0, 0, { 0, 0, 0 }, { 0 } };
    int alt = ops->load_rows_interleaved(ck, path, ranks_piece, &p) == GRM_OK && p.bad == 0
              && p.pieces == 7 && p.order[0] == 0 && p.got[1] == BIG_ROWS
              && p.got[2] == BIG_ROWS;
    for (int k = 1; k < 7 && alt; k++) alt = p.order[k] == 2 - k % 2;
    tap_ok(alt, "load_rows_interleaved hands the pieces over in the file's order: "
           "dense.0.weight, then big and ranks a range of each in turn, each tensor's rows in "
           "order, every byte as saved (%d pieces, %d bad)", p.pieces, p.bad);
    remove(path);
}

/* ---- format 1.0, which this reader still reads ---- */

/* A checkpoint built by hand in memory for the format tests (README.md "Byte layout"):
 * fields appended in the host's (little-endian) order, payloads as zstd frames with their
 * size and XXH64 before them, then the trailer. */
typedef struct hand_file {
    uint8_t b[1 << 16];
    size_t len;
    ZSTD_CCtx *cctx;
} hand_file;

static void hf_put(hand_file *h, const void *p, size_t n)
{
    if (n > sizeof h->b - h->len) {
        printf("Bail out! a hand-built checkpoint outgrew %zu bytes\n", sizeof h->b);
        exit(1);
    }
    memcpy(h->b + h->len, p, n);
    h->len += n;
}

static void hf_u32(hand_file *h, uint32_t v)
{
    hf_put(h, &v, 4);
}

static void hf_u64(hand_file *h, uint64_t v)
{
    hf_put(h, &v, 8);
}

/* Magic, format major.0 and the metadata string. */
static void hf_begin(hand_file *h, uint32_t major, const char *m)
{
    h->len = 0;
    h->cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(h->cctx, ZSTD_c_checksumFlag, 1);
    hf_put(h, "GRMCKPT\0", 8);
    hf_u32(h, major);
    hf_u32(h, 0);
    hf_u64(h, strlen(m));
    hf_put(h, m, strlen(m));
}

/* The n bytes of src as a payload: its compressed size, their XXH64, its zstd frame. */
static void hf_payload(hand_file *h, const void *src, size_t n)
{
    uint8_t z[4096];
    const size_t comp = ZSTD_compress2(h->cctx, z, sizeof z, n > 0 ? src : "", n);
    hf_u64(h, comp);
    hf_u64(h, XXH64(n > 0 ? src : "", n, 0));
    hf_put(h, z, comp);
}

/* The trailer (the XXH64 of every byte before it, the end marker), and the file at path. */
static void hf_end(hand_file *h, const char *path)
{
    hf_u64(h, XXH64(h->b, h->len, 0));
    hf_put(h, "GRMEND\0\0", 8);
    write_all(path, h->b, h->len);
    ZSTD_freeCCtx(h->cctx);
}

/* A 1.0 file of tensors [n] (README.md "Format 1.0"). */
static void write_v1(const char *path, const grm_named_tensor *t, const size_t *bytes, int n)
{
    static hand_file h;
    hf_begin(&h, 1, meta);
    hf_u64(&h, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        hf_u32(&h, (uint32_t)strlen(t[i].name));
        hf_put(&h, t[i].name, strlen(t[i].name));
        hf_u32(&h, (uint32_t)t[i].tensor.dtype);
        hf_u32(&h, (uint32_t)t[i].tensor.ndim);
        for (int d = 0; d < 4; d++)
            hf_u64(&h, (uint64_t)(d < t[i].tensor.ndim ? t[i].tensor.shape[d] : 1));
        hf_u64(&h, bytes[i]);
        hf_payload(&h, t[i].tensor.data, bytes[i]);
    }
    hf_end(&h, path);
}

/* A 2.0 file whose chunk counts add up to 1 modulo 2^64: four u8 tensors of 2^62 rows
 * announce 2^62 chunks each, a fifth of one row 1 chunk, and one chunk follows (the
 * fifth's). Its checksum is right, so only the count of each tensor's chunks refuses it. */
static void write_wrapped(const char *path)
{
    static hand_file h;
    hf_begin(&h, 2, "{}");
    hf_u64(&h, 5);
    for (int i = 0; i < 5; i++) {
        const uint64_t rows = i < 4 ? UINT64_C(1) << 62 : 1;
        hf_u32(&h, 1);
        hf_put(&h, &"abcde"[i], 1);
        hf_u32(&h, GRM_DTYPE_U8);
        hf_u32(&h, 1);
        hf_u64(&h, rows);
        for (int d = 1; d < 4; d++) hf_u64(&h, 1);
        hf_u64(&h, rows);           // raw bytes
        hf_u64(&h, rows);           // chunks: 4 * 2^62 + 1 = 1 (mod 2^64)
    }
    const uint8_t one = 7;
    hf_u32(&h, 4);                  // the chunk: tensor 4, reserved, row 0, 1 row
    hf_u32(&h, 0);
    hf_u64(&h, 0);
    hf_u64(&h, 1);
    hf_payload(&h, &one, 1);
    hf_end(&h, path);
}

/* load_rows' pieces of the saved set, each a whole tensor, checked by visit: the index in
 * saved of each. */
typedef struct whole_log {
    visit_log v;
    int idx[NT], n;
} whole_log;

static grm_status whole_piece(void *user, const grm_named_tensor *t, int64_t row0, int64_t rows)
{
    whole_log *w = user;
    int i = 0;
    while (i < NT && strcmp(saved[i].name, t->name) != 0) i++;
    const int64_t all = t->tensor.ndim >= 1 ? t->tensor.shape[0] : 1;
    if (row0 != 0 || rows != all) w->v.mismatches++;
    if (w->n < NT) w->idx[w->n++] = i;
    return visit(&w->v, t);
}

static void test_v1(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/old.grm", dir);
    write_v1(path, saved, saved_bytes, NT);
    visit_log v = { 0, 0, 0 };
    char mbuf[256];
    tap_ok(ops->load(ck, path, visit, &v) == GRM_OK && v.visits == NT && v.mismatches == 0
           && ops->meta(ck, path, mbuf, sizeof mbuf) == GRM_OK && strcmp(mbuf, meta) == 0,
           "a format 1.0 file (written here by hand) loads: its 6 tensors exact, its metadata");
    whole_log wl;
    memset(&wl, 0, sizeof wl);
    const grm_status ist = ops->load_rows_interleaved(ck, path, whole_piece, &wl);
    int inorder = ist == GRM_OK && wl.n == NT;
    for (int i = 0; i < wl.n && inorder; i++) inorder = wl.v.visits == NT && wl.idx[i] == i;
    tap_ok(inorder && wl.v.mismatches == 0,
           "... and load_rows_interleaved hands its tensors over whole, in the file's order "
           "(%d, %d mismatches)", wl.n, wl.v.mismatches);
    size_t size = 0;
    uint8_t *b = read_all(path, &size);
    int all = b != NULL;
    for (size_t i = 0; b != NULL && i < size; i++) all &= flip_fails(path, b, size, i, NULL);
    tap_ok(all, "... and flipping any one of its %zu bytes gives GRM_EFORMAT before any visit",
           size);
    free(b);
    write_wrapped(path);
    int visits = 0;
    tap_ok(try_load(path, &visits) == GRM_EFORMAT && visits == 0
           && harness_error_has("corrupt header: tensor 'a': 0 of its 4611686018427387904 "
                                "chunks"),
           "a 2.0 file whose tensors' chunk counts wrap around to the chunks it holds: "
           "corrupt header naming the first tensor short of its chunks");
    remove(path);
}

int main(void)
{
    tap_plan(50);
    const grm_plugin_info *info = harness_plugin("ckpt-grm");
    ops = info->ops;
    make_tensors();
    const void *cfg = harness_config(info, (const char *)NULL);
    tap_ok(ops->create(cfg, &ck) == GRM_OK, "create with the default level 3");
    tap_ok(strcmp(ops->extension(ck), "grm") == 0, "extension is \"grm\"");

    char dir[4096], path[4200], bad[4200];
    snprintf(dir, sizeof(dir), "%s", harness_tmpdir("ckpt-grm"));
    snprintf(path, sizeof(path), "%s/model.grm", dir);
    snprintf(bad, sizeof(bad), "%s/bad.grm", dir);

    // ---- round trip ----
    tap_ok(ops->save(ck, path, saved, NT, meta) == GRM_OK,
           "save of 6 tensors (f32, i64, u8, 0-sized, 4-d bf16, 0-d i32) succeeds");
    int entries = 0, others = 0;
    DIR *dp = opendir(dir);
    for (struct dirent *de; dp != NULL && (de = readdir(dp)) != NULL;) {
        if (de->d_name[0] == '.') continue;
        entries++;
        others += strcmp(de->d_name, "model.grm") != 0;
    }
    if (dp != NULL) closedir(dp);
    tap_ok(entries == 1 && others == 0, "the directory holds model.grm only (no temp file)");

    visit_log v = { 0, 0, 0 };
    grm_status lst = ops->load(ck, path, visit, &v);
    tap_ok(lst == GRM_OK && v.visits == NT && v.mismatches == 0,
           "load visits 6 tensors in order, names, dtypes, shapes and bytes exact (%d visits, "
           "%d mismatches)", v.visits, v.mismatches);
    char mbuf[256];
    tap_ok(ops->meta(ck, path, mbuf, sizeof(mbuf)) == GRM_OK && strcmp(mbuf, meta) == 0,
           "meta returns the saved metadata string");
    tap_ok(ops->meta(ck, path, mbuf, 10) == GRM_EFORMAT && harness_error_has("does not fit in a buffer of 10"),
           "meta into a 10-byte buffer: GRM_EFORMAT");
    v = (visit_log){ 0, 0, 2 };
    tap_ok(ops->load(ck, path, visit, &v) == GRM_ECANCELED && v.visits == 2,
           "a visit returning GRM_ECANCELED stops the load and its status is returned");

    size_t size = 0;
    uint8_t *b = read_all(path, &size);
    layout L;
    tap_ok(b != NULL && check_layout(b, size, &L),
           "the file follows README.md: magic, 2.0, meta, count, headers, one chunk a tensor: "
           "a zstd payload whose XXH64 matches; file XXH64, GRMEND (%zu bytes)", size);

    const void *cfg19 = harness_config(info, "level=19", (const char *)NULL);
    void *ck19 = NULL;
    char path19[4200];
    snprintf(path19, sizeof(path19), "%s/model19.grm", dir);
    v = (visit_log){ 0, 0, 0 };
    tap_ok(ops->create(cfg19, &ck19) == GRM_OK
           && ops->save(ck19, path19, saved, NT, meta) == GRM_OK
           && ops->load(ck, path19, visit, &v) == GRM_OK && v.mismatches == 0
           && v.visits == NT, "a level-19 file loads with the same contents");
    ops->destroy(ck19);
    remove(path19);

    tap_ok(ops->save(ck, path, saved, 0, NULL) == GRM_OK
           && ops->meta(ck, path, mbuf, sizeof(mbuf)) == GRM_OK && strcmp(mbuf, "{}") == 0
           && try_load(path, &entries) == GRM_OK && entries == 0,
           "no tensors and NULL metadata: saves, loads nothing, meta is \"{}\"");
    write_all(path, b, size);

    // ---- corruption: every single byte, then specific places ----
    int all = 1;
    for (size_t i = 0; i < size; i++) all &= flip_fails(bad, b, size, i, NULL);
    tap_ok(all, "flipping any one of the %zu bytes gives GRM_EFORMAT before any visit", size);
    const size_t mid2 = L.payload[2] + L.comp[2] / 2;
    tap_ok(flip_fails(bad, b, size, mid2, "checksum mismatch in tensor 'bytes'"),
           "a flipped byte inside the payload of 'bytes': checksum mismatch in tensor 'bytes'");
    int each = 1;
    for (int i = 0; i < NT; i++) {
        char want[128];
        snprintf(want, sizeof(want), "checksum mismatch in tensor '%s'", saved[i].name);
        each &= flip_fails(bad, b, size, L.payload[i], want);
        each &= flip_fails(bad, b, size, L.payload[i] + L.comp[i] - 1, want);
    }
    tap_ok(each, "first and last payload byte of each tensor: checksum mismatch naming it");
    tap_ok(flip_fails(bad, b, size, L.payload[0] - 1, "checksum mismatch in tensor "
                      "'dense.0.weight'"),
           "a flipped XXH64 field in a header: checksum mismatch in that tensor");
    tap_ok(flip_fails(bad, b, size, L.hdr[1] + 6, "checksum mismatch in the file's headers or "
                      "metadata"),
           "a flipped byte in a tensor name: checksum mismatch in the headers");
    tap_ok(flip_fails(bad, b, size, L.meta_off + 3, "checksum mismatch in the file's headers "
                      "or metadata"),
           "a flipped byte in the metadata: checksum mismatch in the metadata");
    tap_ok(flip_fails(bad, b, size, L.raw_field[2], "corrupt header: tensor 'bytes': header "
                      "says"),
           "a flipped raw-size field: corrupt header naming the tensor");
    tap_ok(flip_fails(bad, b, size, size - 5, ": bad end marker at byte"),
           "a flipped end marker: bad end marker");
    tap_ok(flip_fails(bad, b, size, size - 16, "checksum mismatch in the file's headers"),
           "a flipped trailer checksum: checksum mismatch");
    tap_ok(flip_fails(bad, b, size, 2, "not a grm checkpoint (bad magic)"),
           "a flipped magic byte: not a grm checkpoint (bad magic)");

    // ---- truncation ----
    all = 1;
    int visits;
    for (size_t cut = 0; cut < size; cut++) {
        write_all(bad, b, cut);
        char want[64];
        snprintf(want, sizeof(want), "truncated at byte %zu", cut);
        const grm_status st = try_load(bad, &visits);
        if (st != GRM_EFORMAT || visits != 0 || !harness_error_has(want)) {
            tap_diag("cut at %zu: status %d, %d visits", cut, (int)st, visits);
            all = 0;
        }
    }
    tap_ok(all, "truncating at each of the %zu lengths: GRM_EFORMAT \"truncated at byte N\", "
           "nothing visited", size);
    const size_t cuts[4] = { 5, L.meta_off + 2, L.hdr[3] + 10, L.payload[4] + 3 };
    const char *const where[4] = { "(in the magic)", "(in the metadata", "(in the header of "
                                   "tensor #3", "(in the payload of tensor 'four.d'" };
    for (int k = 0; k < 4; k++) {
        write_all(bad, b, cuts[k]);
        char want[64];
        snprintf(want, sizeof(want), "truncated at byte %zu %s", cuts[k], where[k]);
        tap_ok(try_load(bad, &visits) == GRM_EFORMAT && harness_error_has(bad) && harness_error_has(want),
               "cut at %zu: message names the file and says %s", cuts[k], want);
    }
    write_all(bad, b, size - 3);
    tap_ok(ops->meta(ck, bad, mbuf, sizeof(mbuf)) == GRM_EFORMAT
           && harness_error_has("truncated at byte"), "meta of a truncated file: GRM_EFORMAT");

    // ---- foreign, newer, missing ----
    write_all(bad, "hello, this is not a checkpoint\n", 32);
    tap_ok(try_load(bad, &visits) == GRM_EFORMAT && harness_error_has("not a grm checkpoint (bad magic)"),
           "a text file: not a grm checkpoint (bad magic)");
    uint8_t *nb = malloc(size);
    memcpy(nb, b, size);
    nb[8] = 3, nb[9] = 0, nb[10] = 0, nb[11] = 0, nb[12] = 0;
    write_all(bad, nb, size);
    tap_ok(try_load(bad, &visits) == GRM_EFORMAT && visits == 0
           && harness_error_has("format version 3.0 is newer than this ckpt-grm (2.x); "
                                "upgrade grm"),
           "format major 3: newer than this ckpt-grm (2.x); upgrade grm");
    free(nb);
    remove(bad);
    tap_ok(try_load(bad, &visits) == GRM_EIO && harness_error_has("cannot open") && harness_error_has(bad),
           "a missing file: GRM_EIO naming it");

    char nodir[4300];
    snprintf(nodir, sizeof(nodir), "%s/no/such/dir/model.grm", dir);
    tap_ok(ops->save(ck, nodir, saved, NT, meta) == GRM_EIO && harness_error_has(nodir)
           && harness_error_has("No such file or directory"),
           "save into a missing directory: GRM_EIO naming the path and errno");

    // ---- bad tensors ----
    grm_named_tensor t = saved[0];
    t.tensor.device.type = GRM_DEVICE_CUDA;
    tap_ok(ops->save(ck, bad, &t, 1, meta) == GRM_ENOTSUP && harness_error_has("'dense.0.weight' is not on "
           "the CPU"), "save of a CUDA tensor: GRM_ENOTSUP");
    t = saved[0];
    t.tensor.dtype = 99;
    tap_ok(ops->save(ck, bad, &t, 1, meta) == GRM_EINVAL && harness_error_has("unknown dtype 99"),
           "save of dtype 99: GRM_EINVAL");
    int leftovers = 0;
    dp = opendir(dir);
    for (struct dirent *de; dp != NULL && (de = readdir(dp)) != NULL;)
        leftovers += strstr(de->d_name, ".tmp.") != NULL;
    if (dp != NULL) closedir(dp);
    tap_ok(leftovers == 0, "no temporary files remain after the failed saves");

    test_rows(dir);
    test_range_major(dir);
    free(big);
    test_v1(dir);

    free(b);
    remove(path);
    remove(dir);
    ops->destroy(ck);
    ops->destroy(NULL);
    return tap_done();
}

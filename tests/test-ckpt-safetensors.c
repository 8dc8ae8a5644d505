/* tests/test-ckpt-safetensors.c - ckpt-safetensors round trips (one file and shards; whole
 * and, ABI 1.10, by rows: save_rows and load_rows over a 21 MB tensor), the
 * SafeTensors layout read back here independently (8-byte length, JSON text, aligned data),
 * and the refusal, naming the file and before any tensor is visited, of hostile files
 * written by hand: header length past the end, overlapping, out-of-bounds and gapped
 * offsets, dtype/shape against the byte count, duplicate and non-UTF-8 names, bad JSON,
 * flipped data bytes, every truncation, and a shard from another save. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grm/ckpt.h>

#include "harness.h"
#include "tap.h"

static const grm_ckpt_ops *ops;
static void *ck;

/* ---- the tensors saved (the same set test-ckpt-grm saves) ---- */

#define NT 6
static float t_f32[3 * 5];
static int64_t t_i64[7];
static uint8_t t_u8[1001];
static uint16_t t_bf16[2 * 3 * 4 * 5];
static int32_t t_scalar = -123456;
static grm_named_tensor saved[NT];
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
    uint64_t rs = 7;
    for (int i = 0; i < 15; i++) t_f32[i] = harness_randf(&rs) * 1e3f;
    for (int i = 0; i < 7; i++) t_i64[i] = (int64_t)harness_rand(&rs);
    for (int i = 0; i < 1001; i++) t_u8[i] = (uint8_t)harness_rand(&rs);
    for (int i = 0; i < 120; i++) t_bf16[i] = (uint16_t)harness_rand(&rs);
    // The u8 tensor comes first and has an odd size: the writer must still align the rest.
    saved[0] = mk("bytes", t_u8, GRM_DTYPE_U8, 1, 1001, 1, 1, 1);
    saved[1] = mk("dense.0.weight", t_f32, GRM_DTYPE_F32, 2, 3, 5, 1, 1);
    saved[2] = mk("emb.item.steps", t_i64, GRM_DTYPE_I64, 1, 7, 1, 1, 1);
    saved[3] = mk("empty", NULL, GRM_DTYPE_F32, 2, 0, 4, 1, 1);
    saved[4] = mk("four.d \"q\"", t_bf16, GRM_DTYPE_BF16, 4, 2, 3, 4, 5);
    saved[5] = mk("scalar", &t_scalar, GRM_DTYPE_I32, 0, 1, 1, 1, 1);
}

typedef struct visit_log {
    int visits, mismatches, misaligned;
    int foreign;               /* count only: the tensors are not saved[] */
} visit_log;

static grm_status visit(void *user, const grm_named_tensor *t)
{
    visit_log *v = user;
    const int i = v->visits++;
    if (v->foreign) return GRM_OK;
    const grm_named_tensor *w = &saved[i < NT ? i : 0];
    size_t bytes = grm_dtype_size(w->tensor.dtype);
    for (int d = 0; d < w->tensor.ndim; d++) bytes *= (size_t)w->tensor.shape[d];
    int same = i < NT && strcmp(t->name, w->name) == 0 && t->tensor.dtype == w->tensor.dtype
               && t->tensor.ndim == w->tensor.ndim;
    for (int d = 0; same && d < w->tensor.ndim; d++)
        same = t->tensor.shape[d] == w->tensor.shape[d];
    if (same && bytes > 0) same = memcmp(t->tensor.data, w->tensor.data, bytes) == 0;
    if (!same) {
        v->mismatches++;
        tap_diag("tensor #%d '%s' differs", i, t->name);
    }
    if (t->tensor.data != NULL
        && (uintptr_t)t->tensor.data % grm_dtype_size(t->tensor.dtype) != 0)
        v->misaligned++;
    return GRM_OK;
}

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*size + 1);
    if (b != NULL && fread(b, 1, *size, f) != *size) {
        free(b);
        b = NULL;
    }
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

/* A file with header text json (padded as given) followed by ndata bytes of data. */
static void write_st(const char *path, const char *json, size_t ndata)
{
    const size_t hl = strlen(json);
    uint8_t *b = calloc(1, 8 + hl + ndata + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, json, hl);
    for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (uint8_t)(i * 37 + 1);
    write_all(path, b, 8 + hl + ndata);
    free(b);
}

static int foreign;

static grm_status try_load(const char *path, int *visits)
{
    visit_log v = { 0, 0, 0, foreign };
    const grm_status st = ops->load(ck, path, visit, &v);
    *visits = v.visits;
    return st;
}

/* A hand-written hostile file is refused with GRM_EFORMAT, the path and `needle`, before
 * any visit. */
static int refused(const char *path, const char *json, size_t ndata, const char *needle)
{
    int visits = 0;
    write_st(path, json, ndata);
    const grm_status st = try_load(path, &visits);
    if (st == GRM_EFORMAT && visits == 0 && harness_error_has(path) && harness_error_has(needle)) return 1;
    tap_diag("status %d, %d visits", (int)st, visits);
    return 0;
}

static int count_files(const char *dir, const char *prefix)
{
    int n = 0;
    DIR *dp = opendir(dir);
    for (struct dirent *de; dp != NULL && (de = readdir(dp)) != NULL;)
        n += de->d_name[0] != '.' && strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (dp != NULL) closedir(dp);
    return n;
}

/* ---- by rows (ABI 1.10: save_rows, load_rows) ---- */

#include "ckpt_rows.h"

/* What load_rows_interleaved hands over from the file of dense, big and ranks: the tensor
 * of each piece in order, each tensor's rows in order and as saved. */
typedef struct inter_log {
    int pieces, bad;
    int64_t got[3];
    int order[16];
    const int64_t *ranks;       /* [BIG_ROWS, 3] as saved */
} inter_log;

static grm_status inter_piece(void *user, const grm_named_tensor *t, int64_t row0,
                              int64_t rows)
{
    inter_log *p = user;
    const int i = strcmp(t->name, "big") == 0 ? 1 : strcmp(t->name, "ranks") == 0 ? 2 : 0;
    const int64_t n = t->tensor.ndim >= 1 ? t->tensor.shape[0] : 1;
    if (p->pieces < 16) p->order[p->pieces] = i;
    p->pieces++;
    p->bad += row0 != p->got[i] || (i > 0 && rows != BIG_ROWS);
    p->got[i] += n;
    if (i == 1)
        p->bad += memcmp(t->tensor.data, big + (size_t)row0 * BIG_COLS,
                         (size_t)n * BIG_COLS * sizeof(float)) != 0;
    else if (i == 2)
        p->bad += memcmp(t->tensor.data, p->ranks + 3 * row0, (size_t)n * 3 * 8) != 0;
    return GRM_OK;
}

/* save_rows writes the file save writes; load_rows hands a 21 MB tensor out in 16 MiB
 * pieces after every check; a flipped byte is refused before any piece; a failing range
 * leaves no file. Sharded too. */
static void test_rows(const char *dir, void *sh)
{
    char path[4200], whole[4200], bad[4200], spath[4200];
    snprintf(path, sizeof(path), "%s/rows.safetensors", dir);
    snprintf(whole, sizeof(whole), "%s/whole.safetensors", dir);
    snprintf(bad, sizeof(bad), "%s/rows-bad.safetensors", dir);
    snprintf(spath, sizeof(spath), "%s/rows-sharded.safetensors", dir);
    grm_named_tensor t[3];
    rows_fixture(t, saved[1]);
    rows_log r = { 0, 0, 0 };
    // big: 3 ranges of 8 MiB, each hashed and written at its offset; small: 1
    const grm_status rst = ops->save_rows(ck, path, t, 3, meta, rows_fn, &r);
    tap_ok(rst == GRM_OK && r.calls == 4 && r.most <= ((size_t)8 << 20),
           "save_rows: a 21 MB tensor is read once, in ranges of at most 8 MiB, each hashed "
           "and written where it goes (%d calls, largest %zu bytes)", r.calls, r.most);
    grm_named_tensor w[3] = { t[0], t[1], t[2] };
    w[1].tensor.data = big;
    w[2].tensor.data = small_src;
    size_t sa = 0, sb = 0;
    uint8_t *a = NULL, *b = NULL;
    int same = ops->save(ck, whole, w, 3, meta) == GRM_OK
               && (a = read_all(path, &sa)) != NULL && (b = read_all(whole, &sb)) != NULL
               && sa == sb && memcmp(a, b, sa) == 0;
    tap_ok(same, "the file is byte for byte the one save writes from the whole tensors");
    free(b);

    piece_log pl = { 0, 0, 0, 0, 0 };
    grm_status st = ops->load_rows(ck, path, piece_fn, &pl);
    tap_ok(st == GRM_OK && pl.bad == 0 && pl.big_pieces == 2 && pl.big_got == BIG_ROWS
           && pl.pieces == 4 && pl.most <= ((size_t)16 << 20),
           "load_rows: 'big' in %d pieces of at most 16 MiB, back to back, the small tensors "
           "whole, every byte as saved (%d bad)", pl.big_pieces, pl.bad);

    // a byte in the middle of big's data flipped: refused before any piece
    if (a != NULL) {
        a[sa / 2] ^= 0x5A;
        write_all(bad, a, sa);
    }
    pl = (piece_log){ 0, 0, 0, 0, 0 };
    tap_ok(a != NULL && ops->load_rows(ck, bad, piece_fn, &pl) == GRM_EFORMAT && pl.pieces == 0
           && harness_error_has("checksum mismatch in tensor 'big'"),
           "a flipped byte in a piece-wise tensor: GRM_EFORMAT naming it before any piece");
    free(a);

    // sharded (shard_bytes = 500: every tensor in its own shard) by rows, read back whole
    r = (rows_log){ 0, 0, 0 };
    visit_log v = { 0, 0, 0, 1 };
    pl = (piece_log){ 0, 0, 0, 0, 0 };
    const grm_status sst = ops->save_rows(sh, spath, t, 3, meta, rows_fn, &r);
    const grm_status lst = sst == GRM_OK ? ops->load(sh, spath, visit, &v) : sst;
    if (lst != GRM_OK) tap_diag("sharded: %s", harness_host()->last_error());
    tap_ok(lst == GRM_OK && v.visits == 3
           && ops->load_rows(sh, spath, piece_fn, &pl) == GRM_OK && pl.bad == 0
           && pl.big_pieces == 2, "sharded save_rows: load reads it, load_rows hands out the "
           "same pieces");

    // a range that cannot be read fails the save with its status and leaves nothing
    for (int at = 1; at <= 3; at += 2) {
        r = (rows_log){ 0, at, 0 };
        remove(path);
        size_t n = 0;
        uint8_t *gone = NULL;
        tap_ok(ops->save_rows(ck, path, t, 3, meta, rows_fn, &r) == GRM_EIO
               && (gone = read_all(path, &n)) == NULL,
               "a range that fails (call %d: %s) fails save_rows with its status; no file", at,
               at == 1 ? "the first" : "after two were written");
        free(gone);
    }
    remove(whole);
    remove(bad);

    // big and ranks, of as many rows: read a range of both at a time, once
    order_log o = { 0, { 0 }, { 0 } };
    grm_named_tensor g[3] = { saved[1], mk("big", NULL, GRM_DTYPE_F32, 2, BIG_ROWS, BIG_COLS,
                                            1, 1),
                              mk("ranks", NULL, GRM_DTYPE_I64, 2, BIG_ROWS, 3, 1, 1) };
    const grm_status gst = ops->save_rows(ck, path, g, 3, meta, order_rows, &o);
    int alternate = o.calls == 6;       // 3 ranges of both, each hashed and written
    for (int c = 0; c < 6 && alternate; c++)   // in the file's data order: ranks first
        alternate = o.index[c] == 2 - c % 2 && o.row0[c] == (int64_t)(c / 2) * 38836;
    int64_t *ranks = malloc((size_t)BIG_ROWS * 3 * sizeof(int64_t));
    for (int64_t q = 0; q < BIG_ROWS; q++)
        for (int k = 0; k < 3; k++) ranks[3 * q + k] = rank_at(q, k);
    grm_named_tensor gw[3] = { g[0], g[1], g[2] };
    gw[1].tensor.data = big;
    gw[2].tensor.data = ranks;
    size_t ga = 0, gb = 0;
    uint8_t *fa = NULL, *fb = NULL;
    const int gsame = gst == GRM_OK && ops->save(ck, whole, gw, 3, meta) == GRM_OK
                      && (fa = read_all(path, &ga)) != NULL
                      && (fb = read_all(whole, &gb)) != NULL && ga == gb
                      && memcmp(fa, fb, ga) == 0;
    if (!gsame) {
        size_t at = 0;
        while (fa != NULL && fb != NULL && at < ga && at < gb && fa[at] == fb[at]) at++;
        tap_diag("save_rows: %s; %zu bytes against save's %zu, first difference at byte %zu",
                 gst == GRM_OK ? "ok" : harness_host()->last_error(), ga, gb, at);
    }
    tap_ok(gsame && alternate,
           "two tensors of as many rows are read once, a range of both at a time (ranks, big, "
           "ranks, big, ...: %d calls), and the file is the one save writes", o.calls);
    free(fa);
    free(fb);
    // read back a range of each in turn (load_rows_interleaved, ABI 1.13): the dense tensor
    // whole, then big and ranks alternating, each range pointing at the bytes saved
    inter_log il = { 0, 0, { 0, 0, 0 }, { 0 }, ranks };
    const grm_status ist = ops->load_rows_interleaved(ck, path, inter_piece, &il);
    int inter = ist == GRM_OK && il.bad == 0 && il.pieces == 7 && il.order[0] == 0
                && il.got[1] == BIG_ROWS && il.got[2] == BIG_ROWS;
    for (int k = 1; k < 7 && inter; k++) inter = il.order[k] == 2 - k % 2;
    tap_ok(inter, "load_rows_interleaved hands big and ranks over a range of each in turn, "
           "every byte as saved (%d pieces, %d bad)", il.pieces, il.bad);
    free(ranks);
    remove(path);
    remove(whole);
    free(big);
}

int main(void)
{
    tap_plan(43);
    const grm_plugin_info *info = harness_plugin("ckpt-safetensors");
    ops = info->ops;
    make_tensors();
    tap_ok(ops->create(harness_config(info, (const char *)NULL), &ck) == GRM_OK,
           "create with the default shard_bytes");
    tap_ok(strcmp(ops->extension(ck), "safetensors") == 0, "extension is \"safetensors\"");

    char dir[4096], path[4200], bad[4200];
    snprintf(dir, sizeof(dir), "%s", harness_tmpdir("ckpt-st"));
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    snprintf(bad, sizeof(bad), "%s/bad.safetensors", dir);

    // ---- round trip, one file ----
    tap_ok(ops->save(ck, path, saved, NT, meta) == GRM_OK,
           "save of 6 tensors (u8 of odd size, f32, i64, 0-sized, 4-d bf16, 0-d i32)");
    tap_ok(count_files(dir, "") == 1, "the directory holds model.safetensors only (no temp "
           "file, no shard)");
    visit_log v = { 0, 0, 0, 0 };
    tap_ok(ops->load(ck, path, visit, &v) == GRM_OK && v.visits == NT && v.mismatches == 0,
           "load visits the 6 tensors in the saved order with the same names, shapes, bytes");
    tap_ok(v.misaligned == 0, "every tensor's data is aligned to its element size");
    char mbuf[512];
    tap_ok(ops->meta(ck, path, mbuf, sizeof(mbuf)) == GRM_OK && strcmp(mbuf, meta) == 0,
           "meta returns the metadata string unchanged");

    // ---- the layout, read here ----
    size_t size = 0;
    uint8_t *b = read_all(path, &size);
    uint64_t hl = 0;
    for (int i = 7; b != NULL && i >= 0; i--) hl = (hl << 8) | b[i];
    char *json = b != NULL ? strndup((const char *)b + 8, (size_t)hl) : NULL;
    tap_ok(json != NULL && hl % 8 == 0 && 8 + hl <= size
           && strstr(json, "{\"__metadata__\":{\"format\":\"pt\",\"grm\":") == json
           && strstr(json, "\"bytes\":{\"dtype\":\"U8\",\"shape\":[1001],\"data_offsets\":")
           && strstr(json, "\"four.d \\\"q\\\"\":{\"dtype\":\"BF16\",\"shape\":[2,3,4,5]")
           && strstr(json, "\"scalar\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\"")
           && strstr(json, "\"xxh64:dense.0.weight\":"),
           "layout: u64 LE header length (multiple of 8), JSON with __metadata__ (format pt, "
           "grm, xxh64:NAME), dtype names, shapes, a quoted name escaped");
    const char *pos = json != NULL ? strstr(json, "\"dense.0.weight\"") : NULL;
    unsigned long long b0 = 1, b1 = 0;
    pos = pos != NULL ? strstr(pos, "data_offsets\":[") : NULL;
    tap_ok(pos != NULL && sscanf(pos, "data_offsets\":[%llu,%llu]", &b0, &b1) == 2
           && b1 - b0 == 60 && 8 + hl + b1 <= size
           && memcmp(b + 8 + hl + b0, t_f32, 60) == 0,
           "dense.0.weight's data_offsets point at its 60 raw little-endian bytes");

    // ---- every flipped data byte and every truncation is refused before any visit ----
    int all = 1, visits = 0;
    for (size_t i = 8 + (size_t)hl; b != NULL && i < size && all; i++) {
        b[i] ^= 0x10;
        write_all(bad, b, size);
        b[i] ^= 0x10;
        all = try_load(bad, &visits) == GRM_EFORMAT && visits == 0
              && harness_error_has("checksum mismatch in tensor");
    }
    tap_ok(all, "flipping any data byte: GRM_EFORMAT \"checksum mismatch in tensor\", no visit");
    all = 1;
    for (size_t cut = 0; b != NULL && cut < size && all; cut += cut < 64 ? 1 : 13) {
        write_all(bad, b, cut);
        all = try_load(bad, &visits) == GRM_EFORMAT && visits == 0 && harness_error_has(bad);
        if (!all) tap_diag("cut at %zu", cut);
    }
    tap_ok(all, "truncating at each length: GRM_EFORMAT naming the file, no visit");
    free(json);
    free(b);

    // ---- hostile files written by hand ----
    write_all(bad, "\xff\xff\xff\xff\0\0\0\0{}", 10);
    tap_ok(try_load(bad, &visits) == GRM_EFORMAT && visits == 0
           && harness_error_has("header length 4294967295 runs past the end of the file (10 bytes)")
           && harness_error_has(bad), "header length past the end of the file: refused, file named");
    tap_ok(refused(bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
                   "tensors 'a' and 'b' overlap"), "overlapping data_offsets refused");
    tap_ok(refused(bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
                   "data_offsets [0, 8] are out of bounds (the data holds 4 bytes)"),
           "out-of-bounds data_offsets refused");
    tap_ok(refused(bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                   "end before they begin"), "data_offsets ending before they begin refused");
    tap_ok(refused(bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                   "tensor 'a': dtype F32 and shape hold 12 bytes, its data_offsets [0, 8] "
                   "give 8"), "dtype/shape against the byte count refused");
    tap_ok(refused(bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                   "duplicate tensor name 'a'"), "duplicate tensor names refused");
    tap_ok(refused(bad, "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                   4, "is not valid UTF-8")
           && refused(bad, "{\"a\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":"
                      "[0,1]}}", 1, "is not valid UTF-8")
           && refused(bad, "{\"a\\ud800\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":"
                      "[0,1]}}", 1, "lone high surrogate"),
           "non-UTF-8 names refused (a 0xff byte, an overlong '/', a lone surrogate escape)");
    tap_ok(refused(bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                   "a hole of 4 bytes before tensor 'a'")
           && refused(bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                      9, "5 bytes of data after the last tensor"),
           "a hole before a tensor and bytes after the last one refused");
    tap_ok(refused(bad, "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
                   "dtype 'F64' is not one grm reads")
           && refused(bad, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1],\"data_offsets\":"
                      "[0,1]}}", 1, "has more than 4 dims")
           && refused(bad, "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}",
                      1, "is not a non-negative integer")
           && refused(bad, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1,
                      "the header ends inside")
           && refused(bad, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 0, "lacks data_offsets")
           && refused(bad, "{\"__metadata__\":{\"k\":1}}", 0, "is not a string")
           && refused(bad, "{\"__metadata__\":{\"xxh64:zz\":\"0000000000000000\"}}", 0,
                      "is not the XXH64 of a tensor in this file"),
           "unknown dtypes, >4 dims, negative dims, cut JSON, missing fields, non-string "
           "metadata, a checksum for no tensor: refused");

    // ---- a file Python's safetensors writes (no grm metadata, keys in another order) ----
    write_st(bad, "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
             "\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"data_offsets\":[0,4],"
             "\"shape\":[1],\"dtype\":\"F32\"}}    ", 6);
    foreign = 1;
    const grm_status fst = try_load(bad, &visits);
    foreign = 0;
    tap_ok(fst == GRM_OK && visits == 2
           && ops->meta(ck, bad, mbuf, sizeof(mbuf)) == GRM_OK && strcmp(mbuf, "{}") == 0,
           "a foreign file without checksums loads (2 tensors, padding spaces) and its "
           "metadata reads as {}");

    // ---- shards ----
    void *sh = NULL;
    char spath[4200], sdir[4096], idx[4300];
    snprintf(sdir, sizeof(sdir), "%s", harness_tmpdir("ckpt-st-shards"));
    snprintf(spath, sizeof(spath), "%s/step-7.safetensors", sdir);
    snprintf(idx, sizeof(idx), "%s.index.json", spath);
    tap_ok(ops->create(harness_config(info, "shard_bytes=500", (const char *)NULL), &sh)
           == GRM_OK && ops->save(sh, spath, saved, NT, meta) == GRM_OK,
           "save with shard_bytes = 500 (1,361 bytes of tensors)");
    tap_ok(count_files(sdir, "step-7-0000") == 2 && access(idx, R_OK) == 0
           && count_files(sdir, "") == 4,
           "two shards step-7-0000{1,2}-of-00002.safetensors, the index and the file itself");
    size_t isz = 0;
    char *ix = (char *)read_all(idx, &isz);
    if (ix != NULL) ix[isz] = '\0';
    tap_ok(ix != NULL && strstr(ix, "{\"metadata\":{\"total_size\":1361},\"weight_map\":{")
           && strstr(ix, "\"bytes\":\"step-7-00001-of-00002.safetensors\""),
           "the index is Hugging Face's model.safetensors.index.json (total_size, weight_map)");
    free(ix);
    v = (visit_log){ 0, 0, 0, 0 };
    tap_ok(ops->load(sh, spath, visit, &v) == GRM_OK && v.visits == NT && v.mismatches == 0
           && ops->meta(sh, spath, mbuf, sizeof(mbuf)) == GRM_OK && strcmp(mbuf, meta) == 0,
           "load of the sharded checkpoint visits the same 6 tensors; meta is the same");
    v = (visit_log){ 0, 0, 0, 0 };
    tap_ok(ops->load(ck, spath, visit, &v) == GRM_OK && v.visits == NT,
           "an instance with another shard_bytes loads it too");
    char s1[4300];
    snprintf(s1, sizeof(s1), "%s/step-7-00001-of-00002.safetensors", sdir);
    size_t s1size = 0;
    uint8_t *s1b = read_all(s1, &s1size);
    // Save again with different data: shard 1 of the old save no longer matches the new one.
    t_u8[0] ^= 1;
    tap_ok(ops->save(sh, spath, saved, NT, meta) == GRM_OK && s1b != NULL
           && (write_all(s1, s1b, s1size), try_load(spath, &visits) == GRM_EFORMAT)
           && visits == 0 && harness_error_has("belongs to another save") && harness_error_has(s1),
           "a shard left from another save is refused, naming it, before any visit");
    free(s1b);
    t_u8[0] ^= 1;
    unlink(s1);
    tap_ok(try_load(spath, &visits) == GRM_EIO && harness_error_has(s1) && harness_error_has("cannot open"),
           "a missing shard is GRM_EIO naming it");

    // ---- refusals at save ----
    char nodir[4300];
    snprintf(nodir, sizeof(nodir), "%s/missing/model.safetensors", dir);
    tap_ok(ops->save(ck, nodir, saved, NT, meta) == GRM_EIO && harness_error_has(nodir)
           && harness_error_has("No such file"), "save into a missing directory: GRM_EIO naming the path");
    grm_named_tensor dup[2] = { saved[1], saved[1] };
    tap_ok(ops->save(ck, bad, dup, 2, meta) == GRM_EINVAL
           && harness_error_has("two tensors are named 'dense.0.weight'"), "save refuses duplicate names");
    grm_named_tensor t = saved[1];
    t.name = "bad\xff";
    tap_ok(ops->save(ck, bad, &t, 1, meta) == GRM_EINVAL && harness_error_has("is not valid UTF-8"),
           "save refuses a non-UTF-8 name");
    t = saved[1];
    t.tensor.dtype = 99;
    tap_ok(ops->save(ck, bad, &t, 1, meta) == GRM_EINVAL && harness_error_has("unknown dtype 99"),
           "save refuses an unknown dtype");
    t = saved[1];
    t.tensor.device.type = GRM_DEVICE_CUDA;
    tap_ok(ops->save(ck, bad, &t, 1, meta) == GRM_ENOTSUP && harness_error_has("is not on the CPU"),
           "save refuses a tensor that is not on the CPU");
    test_rows(dir, sh);
    int leftovers = 0;
    DIR *dp = opendir(dir);
    for (struct dirent *de; dp != NULL && (de = readdir(dp)) != NULL;)
        leftovers += strstr(de->d_name, ".tmp.") != NULL;
    if (dp != NULL) closedir(dp);
    tap_ok(leftovers == 0, "no temporary files remain after the failed saves");
    ops->destroy(sh);
    ops->destroy(ck);
    return tap_done();
}

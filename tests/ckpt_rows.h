/* tests/ckpt_rows.h - the by-rows fixture (ABI 1.10: save_rows, load_rows) that
 * test-ckpt-grm.c and test-ckpt-safetensors.c share: a 21 MB f32 tensor `big` read through
 * rows_fn a range at a time (above the formats' 16 MiB pieces), a small i64 one, and
 * piece_fn, which checks every piece load_rows hands over against them; order_rows, which
 * logs the order in which a save asks for the ranges of big and of `ranks`, a tensor of as
 * many rows. Include after the test's own t_f32[15] (dense.0.weight, the one whole tensor
 * of the set). */
#ifndef GRM_TESTS_CKPT_ROWS_H
#define GRM_TESTS_CKPT_ROWS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grm/ckpt.h>

#define BIG_ROWS 110000      /* x 48 floats: 21 MB, above ckpt-grm's 16 MiB piece */
#define BIG_COLS 48
static float *big;           /* [BIG_ROWS, BIG_COLS] the source rows() reads */
static int64_t small_src[5] = { 11, -22, 33, -44, 55 };

typedef struct rows_log {
    int calls, fail_at;      /* fail_at: return GRM_EIO on this call (1-based), 0: never */
    size_t most;             /* largest range asked for, bytes */
} rows_log;

static grm_status rows_fn(void *user, int64_t index, int64_t row0, int64_t n, void *out)
{
    rows_log *r = user;
    if (++r->calls == r->fail_at) return GRM_EIO;
    const size_t rb = index == 1 ? BIG_COLS * sizeof(float) : sizeof(int64_t);
    if ((size_t)n * rb > r->most) r->most = (size_t)n * rb;
    memcpy(out, index == 1 ? (const void *)(big + (size_t)row0 * BIG_COLS)
                           : (const void *)(small_src + row0), (size_t)n * rb);
    return GRM_OK;
}

/* What load_rows hands over: every piece put back together and checked against the
 * tensors of the rows file (dense.0.weight whole, big by rows, small whole). */
typedef struct piece_log {
    int pieces, big_pieces, bad;
    int64_t big_got;
    size_t most;
} piece_log;

static grm_status piece_fn(void *user, const grm_named_tensor *t, int64_t row0, int64_t rows)
{
    piece_log *p = user;
    p->pieces++;
    const size_t bytes = (size_t)t->tensor.shape[0] * grm_dtype_size(t->tensor.dtype)
                         * (size_t)(t->tensor.ndim > 1 ? t->tensor.shape[1] : 1);
    if (bytes > p->most) p->most = bytes;
    if (strcmp(t->name, "big") == 0) {
        p->big_pieces++;
        p->bad += rows != BIG_ROWS || row0 != p->big_got || t->tensor.shape[1] != BIG_COLS
                  || memcmp(t->tensor.data, big + (size_t)row0 * BIG_COLS, bytes) != 0;
        p->big_got += t->tensor.shape[0];
    } else if (strcmp(t->name, "small") == 0) {
        p->bad += row0 != 0 || rows != 5 || memcmp(t->tensor.data, small_src, 40) != 0;
    } else {
        p->bad += strcmp(t->name, "dense.0.weight") != 0 || row0 != 0 || rows != 3
                  || memcmp(t->tensor.data, t_f32, 60) != 0;
    }
    return GRM_OK;
}

/* big allocated and filled (the same values in both tests), and the set saved by rows:
 * dense whole, big and small with data NULL (read through rows_fn). Uses the test's mk. */
static void rows_fixture(grm_named_tensor t[3], grm_named_tensor dense)
{
    big = malloc((size_t)BIG_ROWS * BIG_COLS * sizeof(float));
    if (big == NULL) {
        printf("Bail out! out of memory for the by-rows tensor\n");
        exit(1);
    }
    uint64_t rs = 9;
    for (size_t i = 0; i < (size_t)BIG_ROWS * BIG_COLS; i++) big[i] = harness_randf(&rs);
    t[0] = dense;
    t[1] = mk("big", NULL, GRM_DTYPE_F32, 2, BIG_ROWS, BIG_COLS, 1, 1);
    t[2] = mk("small", NULL, GRM_DTYPE_I64, 1, 5, 1, 1, 1);
}

/* Two by-rows tensors of BIG_ROWS rows: 1 = big, 2 = `ranks` [BIG_ROWS, 3] i64 (row r holds
 * r, -r, 7r); each call's tensor and first row logged. */
typedef struct order_log {
    int calls;
    int64_t index[16], row0[16];
} order_log;

static int64_t rank_at(int64_t r, int k)
{
    return k == 0 ? r : k == 1 ? -r : 7 * r;
}

static grm_status order_rows(void *user, int64_t index, int64_t row0, int64_t n, void *out)
{
    order_log *o = user;
    if (o->calls < 16) {
        o->index[o->calls] = index;
        o->row0[o->calls] = row0;
    }
    o->calls++;
    if (index == 1) {
        memcpy(out, big + (size_t)row0 * BIG_COLS, (size_t)n * BIG_COLS * sizeof(float));
        return GRM_OK;
    }
    int64_t *v = out;
    for (int64_t r = 0; r < n; r++)
        for (int k = 0; k < 3; k++) v[3 * r + k] = rank_at(row0 + r, k);
    return GRM_OK;
}

#endif /* GRM_TESTS_CKPT_ROWS_H */

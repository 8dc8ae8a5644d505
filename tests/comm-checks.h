/* tests/comm-checks.h - the collective checks shared by tests/test-comm-mpi.c and
 * tests/test-comm-nccl.c. Each rank fills host buffers with values it computes alone from
 * (rank, peer, index), runs one collective through the plugin's ops and compares with the
 * result it computes alone. cc_dev/cc_back move a host buffer to the communicator's
 * device and back (identity for CPU communicators). Header-only, included once per test. */
#ifndef GRM_TEST_COMM_CHECKS_H
#define GRM_TEST_COMM_CHECKS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <grm/comm.h>

#include "harness.h"
#include "tap.h"

/* Where the buffers live: slot 0 is the send side, slot 1 the receive side. */
typedef struct cc_mover {
    void *(*dev)(int slot, const void *host, size_t bytes);    /* host -> device buffer */
    void (*back)(void *host, int slot, size_t bytes);          /* device buffer -> host */
} cc_mover;

static const grm_comm_ops *ops;
static int32_t me, R;          // this rank, number of ranks
static cc_mover mv;            // set by the test's main

static inline int has(const char *needle)
{
    const char *msg = harness_host()->last_error();
    if (strstr(msg, needle) != NULL) return 1;
    tap_diag("message: %s", msg);
    tap_diag("wanted:  %s", needle);
    return 0;
}

/* ---- typed values, encoded and decoded independently of the plugin ---- */

static const int32_t dtypes[] = { GRM_DTYPE_F32, GRM_DTYPE_F16, GRM_DTYPE_BF16, GRM_DTYPE_I32,
                                  GRM_DTYPE_I64, GRM_DTYPE_U8 };
static const char *const dnames[] = { "?", "f32", "f16", "bf16", "i32", "i64", "u8" };

// f16 of an exactly representable normal value or zero.
static inline uint16_t enc_f16(double v)
{
    if (v == 0) return 0;
    int e;
    const double m = frexp(fabs(v), &e);               // |v| = m 2^e, m in [0.5, 1)
    const uint16_t mant = (uint16_t)((2 * m - 1) * 1024);
    return (uint16_t)((v < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) | mant);
}

static inline double dec_f16(uint16_t h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const double a = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -a : a;
}

static inline uint16_t enc_bf16(double v)
{
    const float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);                         // exact for the values used here
}

static inline double dec_bf16(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline void put(void *buf, int32_t dt, int64_t i, double v)
{
    switch (dt) {
    case GRM_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case GRM_DTYPE_F16: ((uint16_t *)buf)[i] = enc_f16(v); break;
    case GRM_DTYPE_BF16: ((uint16_t *)buf)[i] = enc_bf16(v); break;
    case GRM_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case GRM_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    }
}

static inline double get(const void *buf, int32_t dt, int64_t i)
{
    switch (dt) {
    case GRM_DTYPE_F32: return ((const float *)buf)[i];
    case GRM_DTYPE_F16: return dec_f16(((const uint16_t *)buf)[i]);
    case GRM_DTYPE_BF16: return dec_bf16(((const uint16_t *)buf)[i]);
    case GRM_DTYPE_I32: return ((const int32_t *)buf)[i];
    case GRM_DTYPE_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}

/* Rank r's element i for allreduce: small integers (halves for floating types), so every
 * sum over <= 4 ranks is exact in every dtype and the order of reduction cannot matter. */
static inline double val(int32_t dt, int32_t r, int64_t i)
{
    const int64_t u = (r * 7 + i * 3) % 13;             // 0..12
    if (dt == GRM_DTYPE_U8) return (double)u;
    if (dt == GRM_DTYPE_I32 || dt == GRM_DTYPE_I64) return (double)(u - 6);
    return (double)(u - 6) / 2;
}

/* ---- collectives ---- */

static inline int check_allreduce(void *c, int32_t dt, int64_t n, const char *tag)
{
    char buf[64 * 8];
    int ok = 1;
    for (int32_t op = GRM_REDUCE_SUM; op <= GRM_REDUCE_MIN; op++) {
        for (int64_t i = 0; i < n; i++) put(buf, dt, i, val(dt, me, i));
        const size_t bytes = (size_t)n * grm_dtype_size(dt);
        if (ops->allreduce(c, mv.dev(1, buf, bytes), n, dt, op) != GRM_OK) {
            tap_diag("%s: %s", tag, harness_host()->last_error());
            return 0;
        }
        mv.back(buf, 1, bytes);
        for (int64_t i = 0; i < n; i++) {
            double want = val(dt, 0, i);
            for (int32_t r = 1; r < R; r++) {
                const double v = val(dt, r, i);
                want = op == GRM_REDUCE_SUM ? want + v : op == GRM_REDUCE_MAX ? fmax(want, v)
                     : fmin(want, v);
            }
            if (get(buf, dt, i) != want) {
                if (ok) tap_diag("%s %s op %d [%lld]: got %g want %g", tag, dnames[dt], op,
                                 (long long)i, get(buf, dt, i), want);
                ok = 0;
            }
        }
    }
    return ok;
}

// Element j of what rank r sends to rank p (alltoallv, allgather, broadcast).
static inline double code(int32_t dt, int32_t r, int32_t p, int64_t j)
{
    const int64_t v = r * 1000 + p * 100 + j;
    if (dt == GRM_DTYPE_U8) return (double)(v % 251);
    if (dt == GRM_DTYPE_F16) return (double)(v % 2000);  // integers <= 2048 are exact
    if (dt == GRM_DTYPE_BF16) return (double)(v % 250);  // integers <= 256 are exact
    if (dt == GRM_DTYPE_I64) return (double)v * 4294967296.0;
    return (double)v;
}

static inline int check_allgather(void *c, int32_t dt, int64_t n, int in_place,
                                   const char *tag)
{
    char send[16 * 8], recv[(4 * 16 + 1) * 8];
    const size_t row = (size_t)n * grm_dtype_size(dt);
    const size_t rbytes = (size_t)(R * n + 1) * grm_dtype_size(dt);
    for (int64_t i = 0; i < R * n + 1; i++) put(recv, dt, i, 99);
    char *const src = in_place ? recv + (size_t)me * row : send;
    for (int64_t j = 0; j < n; j++) put(src, dt, j, code(dt, me, 0, j));
    char *const drecv = mv.dev(1, recv, rbytes);
    const void *dsrc = in_place ? drecv + (size_t)me * row : mv.dev(0, send, row);
    if (ops->allgather(c, drecv, dsrc, n, dt) != GRM_OK) {
        tap_diag("%s: %s", tag, harness_host()->last_error());
        return 0;
    }
    mv.back(recv, 1, rbytes);
    for (int32_t p = 0; p < R; p++) {
        for (int64_t j = 0; j < n; j++) {
            if (get(recv, dt, p * n + j) != code(dt, p, 0, j)) {
                tap_diag("%s %s row %d [%lld]: got %g want %g", tag, dnames[dt], p,
                         (long long)j, get(recv, dt, p * n + j), code(dt, p, 0, j));
                return 0;
            }
        }
    }
    return get(recv, dt, R * n) == 99;                  // nothing written past [R, n]
}

// Elements rank r sends to rank p: uneven, zero for some pairs.
static inline int64_t a2a_count(int32_t r, int32_t p, int64_t k)
{
    return k * ((r + 2 * p + 1) % 4);
}

/* Send blocks in reverse peer order with 1-element gaps, receive blocks in peer order with
 * 2-element gaps; every gap must still hold the sentinel afterwards. */
static inline int check_alltoallv(void *c, int32_t dt, int64_t k, const char *tag)
{
    int64_t sc[4], sd[4], rc[4], rd[4], spos = 0, rpos = 0;
    for (int32_t p = R - 1; p >= 0; p--) {
        sc[p] = a2a_count(me, p, k);
        sd[p] = spos;
        spos += sc[p] + 1;
    }
    for (int32_t p = 0; p < R; p++) {
        rc[p] = a2a_count(p, me, k);
        rd[p] = rpos;
        rpos += rc[p] + 2;
    }
    char send[64 * 8], recv[64 * 8];
    for (int64_t i = 0; i < 64; i++) put(send, dt, i, 77), put(recv, dt, i, 77);
    for (int32_t p = 0; p < R; p++) {
        for (int64_t j = 0; j < sc[p]; j++) put(send, dt, sd[p] + j, code(dt, me, p, j));
    }
    const size_t bytes = 64 * grm_dtype_size(dt);
    if (ops->alltoallv(c, mv.dev(1, recv, bytes), rc, rd, mv.dev(0, send, bytes), sc, sd, dt)
        != GRM_OK) {
        tap_diag("%s: %s", tag, harness_host()->last_error());
        return 0;
    }
    mv.back(recv, 1, bytes);
    for (int32_t p = 0; p < R; p++) {
        for (int64_t j = 0; j < rc[p] + 2; j++) {
            const double want = j < rc[p] ? code(dt, p, me, j) : 77;
            if (get(recv, dt, rd[p] + j) != want) {
                tap_diag("%s %s from %d [%lld]: got %g want %g", tag, dnames[dt], p,
                         (long long)j, get(recv, dt, rd[p] + j), want);
                return 0;
            }
        }
    }
    return 1;
}

static inline int check_broadcast(void *c, int64_t n, const char *tag)
{
    static const int32_t bdt[] = { GRM_DTYPE_I64, GRM_DTYPE_F32, GRM_DTYPE_BF16, GRM_DTYPE_U8 };
    char buf[16 * 8];
    for (int32_t root = 0; root < R; root++) {
        for (int d = 0; d < 4; d++) {
            const int32_t dt = bdt[d];
            for (int64_t j = 0; j < n; j++) put(buf, dt, j, me == root ? code(dt, root, 1, j)
                                                                       : 5);
            const size_t bytes = (size_t)n * grm_dtype_size(dt);
            if (ops->broadcast(c, mv.dev(1, buf, bytes), n, dt, root) != GRM_OK) {
                tap_diag("%s: %s", tag, harness_host()->last_error());
                return 0;
            }
            mv.back(buf, 1, bytes);
            for (int64_t j = 0; j < n; j++) {
                if (get(buf, dt, j) != code(dt, root, 1, j)) {
                    tap_diag("%s %s root %d [%lld]: got %g", tag, dnames[dt], root,
                             (long long)j, get(buf, dt, j));
                    return 0;
                }
            }
        }
    }
    return 1;
}

#endif /* GRM_TEST_COMM_CHECKS_H */

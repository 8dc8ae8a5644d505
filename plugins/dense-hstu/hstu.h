/* plugins/dense-hstu/hstu.h - internal declarations of dense-hstu.so: the HSTU layer
 * (Zhai et al. 2024; MTGRBoost §2 eq. 1-3) as a dense block over jagged sequences, with
 * relative attention bias on position and bucketized time (TurboGR §4.1.1, App. A).
 * hstu.c is the layer (cache, dropout, layer norms, parameters); the numeric kernels
 * exist twice with the same types: hstu_ref.c (plain loops, the spec) and hstu_cpu.c
 * (OpenBLAS GEMMs on the host's thread pool, tiled causal attention, MTGRBoost §5.2).
 * Nothing here is exported: the .so's only visible symbol is grm_plugin_entry. */
#ifndef HSTU_H
#define HSTU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <grm/backend.h>
#include <grm/grm.h>
#include <grm/rng.h>

#include "linear.h"   /* dense-mlp's linear layer (plugins/dense-mlp), compiled in */

/* ---- configuration (filled by the host from the param table in plugin.c) ---- */

/* Implementations; the ENUM order of "cpu|ref". */
enum hstu_impl_kind { HSTU_IMPL_CPU = 0, HSTU_IMPL_REF = 1, HSTU_IMPL_AUTO = 2 };

/* Attention normalisation; the ENUM order of "max_len|length". */
enum hstu_norm { HSTU_NORM_MAX_LEN = 0, HSTU_NORM_LENGTH = 1 };
/* Initializer of f1 (the [U | V | Q | K] projection W1). */
enum hstu_init { HSTU_INIT_XAVIER_UNIFORM = 0, HSTU_INIT_NORMAL = 1 };

typedef struct hstu_config {
    int64_t num_heads;          /* H */
    int64_t dqk;                /* query/key features per head */
    int64_t dv;                 /* value (and U) features per head */
    int32_t rab_pos;            /* 1: learned bias per relative-position bucket, per head */
    int32_t rab_time;           /* 1: learned bias per log time-difference bucket, per head */
    int64_t max_len;            /* position buckets (clamp of i - j); also the 1/n norm */
    int64_t time_buckets;       /* time buckets (clamp of the log bucket) */
    double dropout;             /* rate on the f2 input Norm(AV) * U (training) */
    double input_dropout;       /* rate on the block input x, residual included (training) */
    int32_t input_norm;         /* 1: layer norm (no affine) on x before f1 */
    int32_t attn_norm;          /* enum hstu_norm */
    int32_t impl;               /* enum hstu_impl_kind */
    int32_t pos_emb;            /* 1: x sqrt(D) + a learned [max_len, D] position table */
    int32_t init;               /* enum hstu_init: W1's initializer */
    double init_std;            /* std of init = normal */
} hstu_config;

/* Largest accepted time_buckets: keeps exp(HSTU_TIME_LOG_STEP * b) below 2^63. */
#define HSTU_TIME_BUCKETS_MAX 128
/* Largest accepted num_heads, dqk, dv and max_len (keeps every product in int). */
#define HSTU_DIM_MAX 65536

/* Layer-norm epsilon of both norms, as the reference implementation (eps 1e-6). */
#define HSTU_LN_EPS 1e-6

/* ---- relative attention bias buckets (TurboGR App. A; Zhai et al.'s reference) ---- */

/* The divisor of the log in the time bucket function of the reference implementation of
 * Zhai et al. (RelativeBucketedTimeAndPositionBasedBias: log(|dt|.clamp(min=1)) / 0.301). */
#define HSTU_TIME_LOG_STEP 0.301

/* Position bucket of query i and key j (sequence-local, j <= i): min(i - j, max_len - 1). */
static inline int64_t hstu_pos_bucket(int64_t i, int64_t j, int64_t max_len)
{
    const int64_t d = i - j;
    return d < max_len - 1 ? d : max_len - 1;
}

/* The elementwise loops (SiLU, its gradient) are compiled for the baseline, AVX2 and
 * AVX-512 (x86-64-v4) and picked at load time by the CPU (an ifunc); local.mk turns the
 * vectorizer on for this plugin. Elsewhere the attribute is empty. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define HSTU_VECTOR_CLONES __attribute__((target_clones("default", "avx2", "arch=x86-64-v4")))
/* The attention's tile products (hstu_cpu.c's tile_madd): the same clones, the AVX2 one as
 * x86-64-v3 (AVX2 with FMA), and products fused into FMAs there and in the AVX-512 one
 * (-std=c11 turns contraction off everywhere else). A row's sums keep their order, so a
 * result does not depend on the thread count; the baseline clone rounds each product and
 * differs from the FMA clones in the last bits. */
#define HSTU_GEMM_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", \
                                                      "arch=x86-64-v4"), \
                                        optimize("fp-contract=fast")))
#endif
#endif
#ifndef HSTU_VECTOR_CLONES
#define HSTU_VECTOR_CLONES
#endif
#ifndef HSTU_GEMM_CLONES
#define HSTU_GEMM_CLONES
#endif

/* e^x in float without a libm call, so a loop of it vectorizes (the SiLU of f1's P columns
 * and of every attention score was a third of the layer's time through expf): Cody-Waite
 * reduction x = n ln2 + r with n rounded by the 1.5 * 2^23 trick, Cephes' degree-6
 * polynomial for e^r on |r| <= ln2/2, and 2^n put into the exponent bits. Relative error
 * at most 8.4e-8 over every float of the clamped range [-87, 88] (checked against exp);
 * below it the result is e^-87 (SiLU is 0 there to float precision either way), above it
 * e^88. For a NaN x the value is unspecified: SiLU and its gradient multiply by x, which
 * keeps the NaN that a diverged model must show. */
static inline float hstu_expf(float x)
{
    x = x > 88.0f ? 88.0f : x;          // two selects: with -fno-trapping-math (local.mk)
    x = x < -87.0f ? -87.0f : x;        // they vectorize, where fminf/fmaxf do not
    const float shift = 12582912.0f;                    /* 1.5 * 2^23 */
    const float t = x * 1.44269504088896341f + shift;   /* n + shift, rounded */
    const float n = t - shift;
    int32_t ti;
    memcpy(&ti, &t, sizeof ti);
    const int32_t ni = ti - 0x4b400000;                 /* n as an integer (0x4b400000: shift) */
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    int32_t yi;
    memcpy(&yi, &y, sizeof yi);
    yi += ni * (1 << 23);                               /* y * 2^n: n in [-126, 127] */
    memcpy(&y, &yi, sizeof y);
    return y;
}

/* The logistic sigmoid 1 / (1 + e^-x) through hstu_expf. */
static inline float hstu_sigmoid(float x)
{
    return 1.0f / (1.0f + hstu_expf(-x));
}

/* Time bucket of a time difference dt (seconds):
 * min(floor(ln(max(|dt|, 1)) / 0.301), nbuckets - 1). The reference evaluates this in
 * double; hstu_cpu.c uses the equivalent thresholds of hstu_time_thresholds. */
static inline int64_t hstu_time_bucket(int64_t dt, int64_t nbuckets)
{
    const uint64_t a = dt < 0 ? (uint64_t)0 - (uint64_t)dt : (uint64_t)dt;
    const double b = floor(log(a < 1 ? 1.0 : (double)a) / HSTU_TIME_LOG_STEP);
    return b >= (double)(nbuckets - 1) ? nbuckets - 1 : (int64_t)b;
}

/* ---- deterministic dropout (a pure function of seed, step and element index) ---- */

/* The key of step `step` of an instance seeded with `seed`. */
static inline uint64_t hstu_dropout_key(uint64_t seed, int64_t step)
{
    return grm_mix64(grm_mix64(seed ^ UINT64_C(0x48535455) /* "HSTU" */) + (uint64_t)step);
}

/* 1 when element `index` of the f2 input is kept: u = top 53 bits of
 * grm_mix64(key ^ grm_mix64(index)) as a double in [0, 1), kept when u >= p. */
static inline int hstu_dropout_keep(uint64_t key, int64_t index, double p)
{
    const uint64_t z = grm_mix64(key ^ grm_mix64((uint64_t)index));
    return (double)(z >> 11) * (1.0 / 9007199254740992.0) >= p;
}

/* ---- the attention kernels (STYLE.md §9: one type per operation) ---- */

/* One unit of attention work: the q-tile (forward, dQ) or k-tile (dK, dV) `tile` of
 * sequence `seq`, for every head. Lists are sorted by decreasing cost for balance. */
typedef struct hstu_item {
    int64_t seq;
    int64_t tile;
    int64_t cost;               /* tile pairs it visits */
} hstu_item;

/* Rows per attention tile of hstu_cpu.c (both the q and the k side). */
#define HSTU_TILE 64
/* Fixed partition of the dQ/RAB pass of hstu_cpu.c: each chunk owns one partial copy of
 * the RAB gradients, summed in chunk order, so results do not depend on thread timing
 * or thread count. */
#define HSTU_RAB_CHUNKS 32

/* The attention problem and its kernels' one signature are the SDK's (grm/backend.h:
 * grm_hstu_attn_args, grm_hstu_attn_fwd_fn, grm_hstu_attn_bwd_fn), so a backend with an
 * attention op (kernels/hstu_attn.cu) and the kernels below are interchangeable; the
 * plugin's enum hstu_norm is grm_hstu_norm. */
_Static_assert((int)HSTU_NORM_MAX_LEN == (int)GRM_HSTU_NORM_MAX_LEN
               && (int)HSTU_NORM_LENGTH == (int)GRM_HSTU_NORM_LENGTH,
               "enum hstu_norm is grm_hstu_norm");

/* Bytes of workspace the attention kernels of either implementation need for `rows` rows
 * in `nseq` sequences, H heads and nrab bias buckets per head (max_len when rab_pos is on
 * plus nbuckets when the time bias is on): two item lists, at most rows / HSTU_TILE + nseq
 * entries each, and HSTU_RAB_CHUNKS partial RAB gradients, which do not depend on the
 * lengths. Never O(L^2): no score matrix is stored. */
size_t hstu_attn_ws_bytes(int64_t rows, int64_t nseq, int64_t H, int64_t nrab);

/* thr [nbuckets]: thr[b] = the smallest |dt| whose hstu_time_bucket is >= b (thr[0] = 0),
 * so the bucket of |dt| is the number of b >= 1 with thr[b] <= |dt|. */
void hstu_time_thresholds(int64_t *thr, int64_t nbuckets);

/* hstu_ref.c: plain loops with double accumulators, one thread, the spec. */
grm_status hstu_attn_fwd_ref(void *ctx, float *out, const grm_hstu_attn_args *a, void *ws);
grm_status hstu_attn_bwd_ref(void *ctx, float *dq, float *dk, float *dv, float *d_rab_pos,
                             float *d_rab_time, const float *dout, const grm_hstu_attn_args *a,
                             void *ws);
/* hstu_cpu.c: tiled, fused, causal tiles skipped, BLAS per tile, (seq, tile) items on the
 * thread pool; backward recomputes the tile scores. */
grm_status hstu_attn_fwd_cpu(void *ctx, float *out, const grm_hstu_attn_args *a, void *ws);
grm_status hstu_attn_bwd_cpu(void *ctx, float *dq, float *dk, float *dv, float *d_rab_pos,
                             float *d_rab_time, const float *dout, const grm_hstu_attn_args *a,
                             void *ws);

/* ---- linear layers: dense-mlp's linear.h (one source for every dense block) ---- */

/* An implementation, picked once in create (STYLE.md §9). */
typedef struct hstu_impl {
    const char *name;
    int32_t parallel;           /* 1: run the row-wise elementwise steps on the pool */
    linear_fwd_fn linear_fwd;   /* dense-mlp's linear_fwd_ref or linear_fwd_cpu */
    linear_bwd_fn linear_bwd;
    grm_hstu_attn_fwd_fn attn_fwd;
    grm_hstu_attn_bwd_fn attn_bwd;
} hstu_impl;

extern const hstu_impl hstu_impl_ref;   /* static: hstu_ref.c */
extern const hstu_impl hstu_impl_cpu;   /* static: hstu_cpu.c */

/* ---- the layer (hstu.c) ---- */

typedef struct hstu hstu;

/* Create for in_dim features; cfg is copied. Errors name "dense-hstu". */
grm_status hstu_create(const grm_host_api *host, const hstu_config *cfg, int64_t in_dim,
                       uint64_t seed, hstu **out);
void hstu_destroy(hstu *m);
int64_t hstu_dim(const hstu *m);
/* y [rows, D] = HSTU(x [rows, D]) on the jagged sequences of ctx (see README.md). */
grm_status hstu_forward(hstu *m, float *y, const float *x, int64_t rows,
                        const grm_dense_ctx *ctx);
/* Gradients of the last training forward: grads += ..., dx [rows, D] (or NULL). */
grm_status hstu_backward(hstu *m, float *dx, const float *dy, int64_t rows);
grm_status hstu_params(hstu *m, int32_t index, grm_named_tensor *value, grm_tensor *grad);
double hstu_flops(const hstu *m, int64_t rows, int32_t backward);

/* Bytes of the per-row cache the layer keeps for `rows` rows in `nseq` sequences (the
 * forward cache, the backward temporaries and the attention workspace without the RAB
 * partials), for D = in_dim: O(rows), never O(L^2). The layer sizes its allocation with
 * this function; tests/test-dense-hstu.c checks the growth. */
size_t hstu_cache_bytes(const hstu_config *cfg, int64_t in_dim, int64_t rows, int64_t nseq);

#endif /* HSTU_H */

/* plugins/dense-sasrec/sasrec.h - internal declarations of dense-sasrec.so: one SASRec
 * self-attention block (Kang & McAuley, "Self-Attentive Sequential Recommendation", ICDM
 * 2018, Sec. III; reference code pmixer/SASRec.pytorch, model.py) on jagged sequences.
 * The block (sasrec.c) runs its GEMMs and its attention through an implementation picked
 * in create: sasrec_ref.c (plain loops, the spec) or sasrec_cpu.c (OpenBLAS on the host's
 * thread pool, online-softmax attention). Nothing here is exported. */
#ifndef SASREC_H
#define SASREC_H

#include <stddef.h>
#include <stdint.h>

#include <grm/grm.h>
#include <grm/rng.h>

#include "linear.h"   /* dense-mlp's linear layer (plugins/dense-mlp), compiled in */

/* ---- configuration (filled by the host from the param table in plugin.c) ---- */

/* Implementations; the ENUM order of "blas|ref". */
enum sasrec_impl_kind { SASREC_IMPL_BLAS = 0, SASREC_IMPL_REF = 1, SASREC_IMPL_AUTO = 2 };

/* Weight initializers; the ENUM order of "xavier_normal|xavier_uniform|normal". normal:
 * N(0, init_std^2), the BERT initializer the S3-Rec/ICLRec code uses (std 0.02). */
enum sasrec_init {
    SASREC_INIT_XAVIER_NORMAL = 0, SASREC_INIT_XAVIER_UNIFORM = 1, SASREC_INIT_NORMAL = 2
};

/* Block layout; the ENUM order of "sasrec|bert". sasrec: Kang & McAuley's block as
 * pmixer/SASRec.pytorch writes it (LayerNorm before each sub-layer). bert: the post-norm
 * Transformer block of the S3-Rec/ICLRec code (modules.py: Embeddings, SelfAttention,
 * Intermediate), which produced the published full-ranking SASRec tables. */
enum sasrec_style { SASREC_STYLE_SASREC = 0, SASREC_STYLE_BERT = 1 };

/* FFN activation; the ENUM order of "auto|relu|gelu". auto: relu for style sasrec, gelu
 * (the exact erf form) for style bert. */
enum sasrec_act { SASREC_ACT_AUTO = 0, SASREC_ACT_RELU = 1, SASREC_ACT_GELU = 2 };

/* Position numbering; the ENUM order of "right|left". right: the newest token of every
 * sequence has position max_len - 1 (the reference's left-padded layout); left: the oldest
 * token has position 0. */
enum sasrec_align { SASREC_ALIGN_RIGHT = 0, SASREC_ALIGN_LEFT = 1 };

typedef struct sasrec_config {
    int32_t style;              /* enum sasrec_style */
    int64_t num_heads;          /* H; must divide in_dim */
    int64_t ffn_dim;            /* F, hidden size of the FFN; 0: in_dim (sasrec), 4 in_dim
                                 * (bert) */
    int32_t activation;         /* enum sasrec_act */
    double dropout;             /* rate of every dropout of the block */
    int32_t pos_emb;            /* 1: first block: the embedding stage (P[pos], dropout) */
    int64_t max_len;            /* rows of P; longest sequence when pos_emb is on */
    int32_t pos_align;          /* enum sasrec_align */
    int32_t final_norm;         /* 1: last block: a LayerNorm after the FFN residual */
    double ln_eps;              /* LayerNorm epsilon (reference: 1e-8) */
    int32_t init;               /* enum sasrec_init */
    double init_std;            /* std of init = normal */
    int32_t impl;               /* enum sasrec_impl_kind */
} sasrec_config;

/* ---- kernels (STYLE.md §9: one type per operation, outputs first) ---- */

/* What the attention kernels share: jagged sequences, heads, dropout on the attention
 * probabilities. Borrowed for the call. Q rows have stride ldq, K and V rows ldkv (they
 * sit side by side in one [N, 2D] buffer); head h uses columns [h dh, (h + 1) dh). */
typedef struct sasrec_attn_args {
    const int64_t *offsets;     /* [nseq+1] row ranges, offsets[0] = 0, offsets[nseq] = N */
    int64_t nseq;
    int64_t H, dh;              /* heads, head dim (D = H dh) */
    int64_t ldq, ldkv, ldo;     /* row strides of q, k/v, o (floats) */
    float scale;                /* 1 / sqrt(dh) */
    double dropout;             /* p; 0: off */
    uint64_t drop_key;          /* sasrec_drop_key(..., SASREC_SITE_ATTN) */
} sasrec_attn_args;

/* Causal softmax attention per (sequence, head) (Kang & McAuley 2018, Sec. III,
 * "Self-Attention Block" and "Causality"): for query row i of a sequence starting at row
 * s, o_i = sum_{s <= j <= i} keep(i, j, h) softmax_j(scale q_i . k_j) v_j, and lse [N, H]
 * receives log sum_j exp(scale q_i . k_j) (for the backward's recomputation). */
typedef grm_status (*sasrec_attn_fwd_fn)(
        float *o,                                   /* [N, ldo]: head h at h dh */
        float *lse,                                 /* [N, H] */
        const float *q,                             /* [N, ldq] */
        const float *k, const float *v,             /* [N, ldkv] each */
        const sasrec_attn_args *a,
        const grm_host_api *host);

/* The backward of sasrec_attn_fwd_fn: writes dq, dk, dv (every row of every head) from do
 * and the forward's inputs, output o and lse. Nothing L x L is kept. */
typedef grm_status (*sasrec_attn_bwd_fn)(
        float *dq,                                  /* [N, ldq] */
        float *dk, float *dv,                       /* [N, ldkv] each */
        const float *dout,                          /* [N, ldo] */
        const float *q, const float *k, const float *v,
        const float *o,                             /* [N, ldo] */
        const float *lse,                           /* [N, H] */
        const sasrec_attn_args *a,
        const grm_host_api *host);

/* An implementation, picked once in create (STYLE.md §9). */
typedef struct sasrec_impl {
    const char *name;
    linear_fwd_fn linear_fwd;   /* dense-mlp's linear_fwd_ref or linear_fwd_cpu */
    linear_bwd_fn linear_bwd;
    sasrec_attn_fwd_fn attn_fwd;
    sasrec_attn_bwd_fn attn_bwd;
} sasrec_impl;

/* sasrec_ref.c: plain loops, double accumulators, single thread. */
grm_status sasrec_attn_fwd_ref(float *o, float *lse, const float *q, const float *k,
                               const float *v, const sasrec_attn_args *a,
                               const grm_host_api *host);
grm_status sasrec_attn_bwd_ref(float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *o,
                               const float *lse, const sasrec_attn_args *a,
                               const grm_host_api *host);
/* sasrec_cpu.c: attention per (sequence, head) on the thread pool with a one-pass online
 * softmax; the projections are linear.h's backend GEMMs. Sizes fit in int (checked in
 * create/forward). */
grm_status sasrec_attn_fwd_cpu(float *o, float *lse, const float *q, const float *k,
                               const float *v, const sasrec_attn_args *a,
                               const grm_host_api *host);
grm_status sasrec_attn_bwd_cpu(float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *o,
                               const float *lse, const sasrec_attn_args *a,
                               const grm_host_api *host);

extern const sasrec_impl sasrec_impl_ref;   /* static: sasrec_ref.c */
extern const sasrec_impl sasrec_impl_cpu;   /* static: sasrec_cpu.c */

/* ---- deterministic dropout (counter-based, grm/rng.h mixers) ---- */

/* Dropout sites of the block; each gets its own key. */
enum sasrec_site {
    SASREC_SITE_EMB = 1,        /* after the embedding stage */
    SASREC_SITE_ATTN = 2,       /* on the attention probabilities */
    SASREC_SITE_FFN1 = 3,       /* sasrec: after W1 u + b1, before the ReLU */
    SASREC_SITE_FFN2 = 4,       /* after W2 h + b2 */
    SASREC_SITE_ATTN_OUT = 5    /* bert: after the attention's output projection */
};

/* The key of one site of one step: a pure function of (seed, step, site). */
static inline uint64_t sasrec_drop_key(uint64_t seed, int64_t step, int32_t site)
{
    return grm_mix64(seed ^ grm_mix64((uint64_t)step ^ grm_mix64(0x5a5bec0000000000ULL
                                                                 + (uint64_t)site)));
}

/* Whether element `index` under `key` is kept by a dropout of rate p. */
static inline int sasrec_kept(uint64_t key, uint64_t index, double p)
{
    const uint64_t bits = grm_mix64(key + index * 0x9E3779B97F4A7C15ULL);
    const double u = (double)(bits >> 11) * (1.0 / 9007199254740992.0);   /* [0, 1) */
    return u >= p;
}

/* The inverted-dropout factor (0 or 1 / (1 - p)) of element `index` under `key`. */
static inline float sasrec_drop(uint64_t key, uint64_t index, double p)
{
    return sasrec_kept(key, index, p) ? (float)(1.0 / (1.0 - p)) : 0.0f;
}

/* The attention-dropout factor of (query row i, key row j, head h), rows global. */
static inline float sasrec_attn_drop(const sasrec_attn_args *a, int64_t i, int64_t j,
                                     int64_t h)
{
    const uint64_t row = grm_mix64(a->drop_key + (uint64_t)(i * a->H + h)
                                   * 0xBF58476D1CE4E5B9ULL);
    return sasrec_drop(row, (uint64_t)j, a->dropout);
}

/* ---- elementwise pieces (sasrec_ref.c), shared by every implementation ---- */

/* LayerNorm over the last dim (Ba et al. 2016), biased variance:
 * y = (x - mu) rstd gamma + beta, rstd = 1 / sqrt(var + eps). mu, rstd [rows] out. */
void sasrec_ln_fwd(float *y, float *mu, float *rstd, const float *x, const float *gamma,
                   const float *beta, int64_t rows, int64_t d, double eps);
/* dx [rows, d] = (accumulate ? dx + : ) LN'(x)^T dy; dgamma, dbeta [d] += ... (the two
 * parts below; dx may be dy) */
void sasrec_ln_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                   const float *mu, const float *rstd, const float *gamma, int64_t rows,
                   int64_t d, int32_t accumulate);
/* dgamma [d] += sum over the rows, in order, of dy xhat; dbeta [d] += of dy. */
void sasrec_ln_bwd_params(float *dgamma, float *dbeta, const float *dy, const float *x,
                          const float *mu, const float *rstd, int64_t rows, int64_t d);
/* dx's rows alone (each row its own: a range of rows may go to each thread). */
void sasrec_ln_bwd_dx(float *dx, const float *dy, const float *x, const float *mu,
                      const float *rstd, const float *gamma, int64_t rows, int64_t d,
                      int32_t accumulate);

/* ---- the block (sasrec.c) ---- */

typedef struct sasrec sasrec;

/* Create for in_dim = D inputs; cfg is copied. Errors name "dense-sasrec". */
grm_status sasrec_create(const grm_host_api *host, const sasrec_config *cfg, int64_t in_dim,
                         uint64_t seed, sasrec **out);
void sasrec_destroy(sasrec *s);
int64_t sasrec_dim(const sasrec *s);
/* y [rows, D] = block(x [rows, D]) over the jagged sequences offsets [nseq+1] (NULL: each
 * row its own sequence). training: dropout on, cache kept for backward. */
grm_status sasrec_forward(sasrec *s, float *y, const float *x, int64_t rows,
                          const int64_t *offsets, int64_t nseq, int32_t training,
                          int64_t step);
/* Gradients of the last training forward: grads += ..., dx [rows, D] (or NULL). */
grm_status sasrec_backward(sasrec *s, float *dx, const float *dy, int64_t rows);
grm_status sasrec_params(sasrec *s, int32_t index, grm_named_tensor *value, grm_tensor *grad);
double sasrec_flops(const sasrec *s, int64_t rows, int32_t backward);

#endif /* SASREC_H */

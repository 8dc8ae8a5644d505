/* plugins/dense-mlp/mlp.h - internal declarations of dense-mlp.so: the MLP block
 * (mlp.c) and its elementwise pieces (mlp_ref.c) over the linear layer of linear.h (shared
 * with dense-mmoe.so: linear.c, linear_ref.c, linear_cpu.c), and the two heads dense-bce
 * and dense-sampled-softmax (heads.c, numerics in heads_ref.c).
 * Nothing here is exported: the .so's only visible symbol is grm_plugin_entry. */
#ifndef MLP_H
#define MLP_H

#include <stddef.h>
#include <stdint.h>

#include <grm/grm.h>
#include <grm/rng.h>

#include "linear.h"  /* the linear layer: kernels, init, parameter views */

/* ---- deterministic generators (no global state) ---- */

/* splitmix64's finalizer: a bijective 64-bit mix (Steele, Lea, Flood 2014), for the
 * counter-based draws (dropout masks, negative seeds); sequential draws use grm/rng.h's
 * grm_splitmix64, which advances a state and applies this same finalizer. */
static inline uint64_t mlp_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform double in [0, 1) from the top 53 bits. */
static inline double mlp_unit(uint64_t bits)
{
    return (double)(bits >> 11) * 0x1.0p-53;
}

/* ---- configuration (filled by the host from the param tables in plugin.c) ---- */

/* Activation functions; the ENUM order of "relu|silu|tanh|none". */
enum mlp_act { MLP_ACT_RELU = 0, MLP_ACT_SILU = 1, MLP_ACT_TANH = 2, MLP_ACT_NONE = 3 };

/* Implementations; the ENUM order of "blas|ref". */
enum mlp_impl_kind { MLP_IMPL_BLAS = 0, MLP_IMPL_REF = 1 };

typedef struct mlp_config {
    grm_int_list dims;          /* output size of each layer */
    int32_t activation;         /* enum mlp_act, after every layer but the last */
    int32_t final_activation;   /* enum mlp_act, after the last layer */
    double dropout;             /* inverted dropout rate on hidden activations */
    int32_t l2norm;             /* 1: L2-normalize each output row */
    int32_t impl;               /* enum mlp_impl_kind */
} mlp_config;

/* Samplers; the ENUM order of "uniform|popularity". */
enum ssm_sampler { SSM_SAMPLER_UNIFORM = 0, SSM_SAMPLER_POPULARITY = 1 };

/* Losses of dense-sampled-softmax; the ENUM order of "softmax|bce". */
enum ssm_loss_kind { SSM_LOSS_SOFTMAX = 0, SSM_LOSS_BCE = 1 };

typedef struct ssm_config {
    int64_t negatives;          /* negatives drawn per step */
    int32_t sampler;            /* enum ssm_sampler */
    double alpha;               /* popularity exponent */
    double temperature;         /* logits are divided by it */
    int32_t in_batch;           /* 1: other rows' positives are negatives too */
    int32_t logq;               /* 1: subtract log Q from sampled-negative logits */
    int32_t impl;               /* enum mlp_impl_kind: BLAS (heads_cpu.c) or ref */
    int32_t l2norm;             /* 1: L2-normalize query and item rows before the dots */
    int64_t share_k;            /* 0: negatives shared by the batch; k >= 1: per-token
                                 * negatives, shared in shuffled groups of k (TurboGR eq. 2) */
    int32_t neg_fp16;           /* 1: negatives stored in FP16, read back as fp32 */
    int32_t loss;               /* enum ssm_loss_kind */
    int64_t row_negatives;      /* share_k >= 1: 0: each row owns nneg / rows negatives;
                                 * r >= 1: each row owns r, slots past rows r unused */
} ssm_config;

/* ---- elementwise pieces (mlp_ref.c), shared by every implementation ---- */

/* h [n] = act(z [n]); h may alias z. */
void mlp_act_fwd(float *h, const float *z, int64_t n, int32_t act);
/* dz [n] = g [n] * act'(z [n]); dz may alias g. */
void mlp_act_bwd(float *dz, const float *g, const float *z, int64_t n, int32_t act);
/* Inverted dropout on h [n] in place: each element is kept with probability 1 - p and
 * scaled by 1 / (1 - p); mask [n] receives the factor (0 or 1 / (1 - p)). The draw of
 * element i is a hash of (key, i), so it depends on nothing but key and i. */
void mlp_dropout_fwd(float *h, float *mask, int64_t n, double p, uint64_t key);
/* y [rows, d] = h / max(||h||, MLP_L2_EPS) per row; norm [rows] receives ||h||. */
void mlp_l2norm_fwd(float *y, float *norm, const float *h, int64_t rows, int64_t d);
/* dh [rows, d] from dy [rows, d], the forward input h and its norms. */
void mlp_l2norm_bwd(float *dh, const float *dy, const float *h, const float *norm,
                    int64_t rows, int64_t d);

/* The norm floor of the L2 normalization, as torch.nn.functional.normalize. */
#define MLP_L2_EPS 1e-12f

/* ---- the MLP block (mlp.c) ---- */

typedef struct mlp mlp;

/* Create for in_dim inputs; cfg is copied. Errors name "dense-mlp". */
grm_status mlp_create(const grm_host_api *host, const mlp_config *cfg, int64_t in_dim,
                      uint64_t seed, mlp **out);
void mlp_destroy(mlp *m);
int64_t mlp_in_dim(const mlp *m);
int64_t mlp_out_dim(const mlp *m);
/* y [rows, out_dim] = f(x [rows, in_dim]); training: dropout on, step seeds it. */
grm_status mlp_forward(mlp *m, float *y, const float *x, int64_t rows, int32_t training,
                       int64_t step);
/* Gradients of the last training forward: grads += ..., dx [rows, in_dim] (or NULL). */
grm_status mlp_backward(mlp *m, float *dx, const float *dy, int64_t rows);
/* Views of the index-th parameter and its gradient; GRM_ENOTFOUND past the last. */
grm_status mlp_params(mlp *m, int32_t index, grm_named_tensor *value, grm_tensor *grad);
double mlp_flops(const mlp *m, int64_t rows, int32_t backward);

/* ---- the heads (heads.c; numerics in heads_ref.c) ---- */

/* Stable BCE with logits (max(z,0) - z y + log1p(exp(-|z|))), summed over T, weighted
 * mean over B. d_pred [B, T] (NULL: skipped) and scores [B, T] (NULL: skipped) are
 * written. GRM_EINVAL (message set through host) when the weights sum to 0. */
grm_status bce_loss_ref(const grm_host_api *host, double *loss, float *d_pred,
                        float *scores, const float *pred, const float *labels,
                        const float *weights, int64_t B, int64_t T);

/* The sum of B rows' sample weights (weights NULL: each 1) into *wsum; GRM_EINVAL, with the
 * message set through host and naming `who`, when there are rows and the sum is not
 * positive. Every loss of this file starts with it. */
grm_status head_weight_sum(const grm_host_api *host, const char *who, const float *weights,
                           int64_t B, double *wsum);

/* Sampled softmax over [positive, R sampled negatives, B-1 in-batch positives] for each
 * row b; see README.md. logq [R] (or NULL) is subtracted from the negatives' logits.
 * Gradient outputs (each may be NULL) are overwritten. ssm_loss_ref (plain loops, double)
 * and ssm_loss_cpu (heads_cpu.c: OpenBLAS GEMMs, row and item chunks on the thread pool)
 * have this type. work holds ssm_work_doubles(B, R, in_batch) doubles. */
typedef grm_status (*ssm_loss_fn)(const grm_host_api *host, double *loss, float *d_pred,
                                  float *d_pos, float *d_neg, const float *pred,
                                  const float *pos, const float *neg, const int64_t *pos_ids,
                                  const int64_t *neg_ids, const float *weights,
                                  const double *logq, int32_t in_batch, double temperature,
                                  int64_t B, int64_t R, int64_t D, double *work);
grm_status ssm_loss_ref(const grm_host_api *host, double *loss, float *d_pred,
                        float *d_pos, float *d_neg, const float *pred, const float *pos,
                        const float *neg, const int64_t *pos_ids, const int64_t *neg_ids,
                        const float *weights, const double *logq, int32_t in_batch,
                        double temperature, int64_t B, int64_t R, int64_t D, double *work);
grm_status ssm_loss_cpu(const grm_host_api *host, double *loss, float *d_pred,
                        float *d_pos, float *d_neg, const float *pred, const float *pos,
                        const float *neg, const int64_t *pos_ids, const int64_t *neg_ids,
                        const float *weights, const double *logq, int32_t in_batch,
                        double temperature, int64_t B, int64_t R, int64_t D, double *work);
/* Doubles of work either implementation needs for B rows and R negatives. */
int64_t ssm_work_doubles(int64_t B, int64_t R, int32_t in_batch);

/* Intra-batch logit sharing (TurboGR §4.3.3, eq. 2). Row i owns the r negatives
 * neg [i r, (i+1) r); perm [B] is the token-level shuffle (perm[p] = row at shuffled
 * position p) and the rows at positions [g k, (g+1) k) form group g: every row of a group
 * is scored against the negatives of all its members (its own r plus (m-1) r auxiliary,
 * the Delta of eq. 2). Negatives equal to the row's positive are masked; no in-batch
 * term. logq [B r] or NULL. Gradients overwritten (each may be NULL). ssm_share_loss_ref
 * (plain loops, double) and ssm_share_loss_cpu (groups on the thread pool, OpenBLAS per
 * group) have this type; work holds ssm_share_work_floats(k, r, D, threads) floats. */
typedef grm_status (*ssm_share_fn)(const grm_host_api *host, double *loss, float *d_pred,
                                   float *d_pos, float *d_neg, const float *pred,
                                   const float *pos, const float *neg,
                                   const int64_t *pos_ids, const int64_t *neg_ids,
                                   const float *weights, const double *logq,
                                   const int64_t *perm, int64_t k, double temperature,
                                   int64_t B, int64_t r, int64_t D, float *work);
grm_status ssm_share_loss_ref(const grm_host_api *host, double *loss, float *d_pred,
                              float *d_pos, float *d_neg, const float *pred, const float *pos,
                              const float *neg, const int64_t *pos_ids,
                              const int64_t *neg_ids, const float *weights,
                              const double *logq, const int64_t *perm, int64_t k,
                              double temperature, int64_t B, int64_t r, int64_t D,
                              float *work);
grm_status ssm_share_loss_cpu(const grm_host_api *host, double *loss, float *d_pred,
                              float *d_pos, float *d_neg, const float *pred, const float *pos,
                              const float *neg, const int64_t *pos_ids,
                              const int64_t *neg_ids, const float *weights,
                              const double *logq, const int64_t *perm, int64_t k,
                              double temperature, int64_t B, int64_t r, int64_t D,
                              float *work);
/* Chunks the cpu share path splits the groups into, and the floats of work it needs. */
int64_t ssm_share_chunks(int64_t groups, int32_t threads);
int64_t ssm_share_work_floats(int64_t k, int64_t r, int64_t D, int64_t chunks);

/* Sampled binary cross-entropy (SASRec, Kang & McAuley 2018, §III-E "Network Training":
 * each token's positive next item and its sampled negatives): for row b with query u_b,
 *   loss_b = softplus(-u_b . pos_b / T) + sum_{j in N(b)} softplus(u_b . neg_j / T)
 * where N(b) = all R negatives (r = 0, shared) or the row's own neg [b r, (b+1) r)
 * (r >= 1; R >= B r, slots past B r are unused and get a zero gradient), minus the slots
 * whose id equals pos_ids[b]. loss = sum_b w_b loss_b / sum_b w_b. Gradients overwritten
 * (each may be NULL). ssm_bce_ref (plain loops, double) and ssm_bce_cpu (rows on the thread
 * pool; OpenBLAS GEMMs when shared) have this type; work holds ssm_bce_work_doubles(B, R, r)
 * doubles. */
typedef grm_status (*ssm_bce_fn)(const grm_host_api *host, double *loss, float *d_pred,
                                 float *d_pos, float *d_neg, const float *pred,
                                 const float *pos, const float *neg, const int64_t *pos_ids,
                                 const int64_t *neg_ids, const float *weights,
                                 double temperature, int64_t B, int64_t R, int64_t r,
                                 int64_t D, double *work);
grm_status ssm_bce_ref(const grm_host_api *host, double *loss, float *d_pred, float *d_pos,
                       float *d_neg, const float *pred, const float *pos, const float *neg,
                       const int64_t *pos_ids, const int64_t *neg_ids, const float *weights,
                       double temperature, int64_t B, int64_t R, int64_t r, int64_t D,
                       double *work);
grm_status ssm_bce_cpu(const grm_host_api *host, double *loss, float *d_pred, float *d_pos,
                       float *d_neg, const float *pred, const float *pos, const float *neg,
                       const int64_t *pos_ids, const int64_t *neg_ids, const float *weights,
                       double temperature, int64_t B, int64_t R, int64_t r, int64_t D,
                       double *work);
int64_t ssm_bce_work_doubles(int64_t B, int64_t R, int64_t r);

/* The token-level shuffle of eq. 2: perm [B] out, a Fisher-Yates shuffle of 0..B-1 driven by
 * grm_splitmix64 from key (j = next % (i + 1) for i = B-1 down to 1). */
void ssm_shuffle(int64_t *perm, int64_t B, uint64_t key);

/* IEEE binary16 <-> binary32, round to nearest even, with subnormals, infinities and NaN
 * (portable; no F16C). */
uint16_t ssm_f32_to_f16(float f);
float ssm_f16_to_f32(uint16_t h);

/* Draw n indices in [0, cdf_n) with probability proportional to the increments of the
 * cumulative table cdf [cdf_n] (or uniformly when cdf is NULL), with replacement, from a
 * generator seeded by seed. idx [n] out. */
void ssm_draw(int64_t *idx, int64_t n, const double *cdf, int64_t cdf_n, uint64_t seed);

typedef struct bce_head bce_head;
typedef struct ssm_head ssm_head;

grm_status bce_create(const grm_host_api *host, int64_t in_dim, bce_head **out);
void bce_destroy(bce_head *h);
int64_t bce_dim(const bce_head *h);
grm_status bce_loss(bce_head *h, grm_loss_io *io);

grm_status ssm_create(const grm_host_api *host, const ssm_config *cfg, int64_t in_dim,
                      uint64_t seed, ssm_head **out);
void ssm_destroy(ssm_head *h);
int64_t ssm_dim(const ssm_head *h);
grm_status ssm_loss(ssm_head *h, grm_loss_io *io);
grm_status ssm_negatives(ssm_head *h, int64_t *ids, int64_t *n, int64_t max,
                         const grm_catalog *catalog, uint64_t seed);

#endif /* MLP_H */

/* plugins/head-sampled-softmax/heads.h - internal declarations of the two heads,
 * head-sampled-softmax (this directory's plugin.c) and head-bce (plugins/head-bce/plugin.c),
 * whose numerics this directory holds for both: heads.c (instances, the loss ops and the
 * negative sampler), heads_ref.c (plain loops, double) and heads_cpu.c (OpenBLAS GEMMs on
 * the host's thread pool). Both .so files compile these files and dense-mlp's mlp_ref.c
 * (the L2 normalization). Nothing here is exported. */
#ifndef HEADS_H
#define HEADS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <grm/grm.h>

#include "mlp.h"   /* plugins/dense-mlp: mlp_mix64, MLP_IMPL_*, mlp_l2norm_* */

/* Samplers; the ENUM order of "uniform|popularity". */
enum ssm_sampler { SSM_SAMPLER_UNIFORM = 0, SSM_SAMPLER_POPULARITY = 1 };

/* Losses of head-sampled-softmax; the ENUM order of "softmax|bce". */
enum ssm_loss_kind { SSM_LOSS_SOFTMAX = 0, SSM_LOSS_BCE = 1 };

/* The classes of the softmax; the ENUM order of "sampled|all". */
enum ssm_catalog { SSM_CATALOG_SAMPLED = 0, SSM_CATALOG_ALL = 1 };

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
    int32_t catalog;            /* enum ssm_catalog: sampled negatives or every item */
    double label_smoothing;     /* catalog = all: epsilon of the smoothed target */
} ssm_config;

/* ---- the heads (heads.c; numerics in heads_ref.c, heads_cpu.c) ---- */

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
 * row b; see README.md. logq (or NULL) is subtracted from the negatives' logits: [R], or with
 * in_batch [R + B], the in-batch positive of row k at R + k.
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

/* Per-token negatives read in place (share_k = k >= 1 in a run, io->item_rows set): row b's
 * positive is rows[pos_slots[b]] and it owns r negatives rows[neg_slots[b r + j]], j < r,
 * all rows of the batch's unique item rows [nrows, D]. k = 1: row b against its own r;
 * k > 1: TurboGR eq. 2, the rows at shuffled positions [g k, (g+1) k) of perm [B] form a
 * group and each is scored against the negatives of all its members (ssm_share_loss_ref's
 * loss; perm NULL: identity). Negatives with the row's positive id are masked, logq [B r]
 * (or NULL) subtracted. Nothing is gathered to [B r, D]: each group copies its members' k r
 * rows into a tile once, the logits are one sgemm of the group's queries against the tile,
 * the log-sum-exp is fused, d_pred and the tile's gradient are two more sgemm, and the
 * tile's rows are added into d_rows [nrows, D] (overwritten: the sum over every slot of a
 * row); d_pred [B, D] overwritten. ssm_tok_ref (plain loops, double) and ssm_tok_cpu (group
 * chunks on the thread pool, each with its own copy of d_rows, summed in chunk order) have
 * this type; work holds ssm_tok_work_floats(B, nrows, k, r, D, threads) floats (8-byte
 * aligned). */
typedef grm_status (*ssm_tok_fn)(const grm_host_api *host, double *loss, float *d_pred,
                                 float *d_rows, const float *pred, const float *rows,
                                 int64_t nrows, const int64_t *pos_slots,
                                 const int64_t *neg_slots, const int64_t *pos_ids,
                                 const int64_t *neg_ids, const float *weights,
                                 const double *logq, const int64_t *perm, int64_t k,
                                 double temperature, int64_t B, int64_t r, int64_t D,
                                 float *work);
grm_status ssm_tok_ref(const grm_host_api *host, double *loss, float *d_pred, float *d_rows,
                       const float *pred, const float *rows, int64_t nrows,
                       const int64_t *pos_slots, const int64_t *neg_slots,
                       const int64_t *pos_ids, const int64_t *neg_ids, const float *weights,
                       const double *logq, const int64_t *perm, int64_t k, double temperature,
                       int64_t B, int64_t r, int64_t D, float *work);
grm_status ssm_tok_cpu(const grm_host_api *host, double *loss, float *d_pred, float *d_rows,
                       const float *pred, const float *rows, int64_t nrows,
                       const int64_t *pos_slots, const int64_t *neg_slots,
                       const int64_t *pos_ids, const int64_t *neg_ids, const float *weights,
                       const double *logq, const int64_t *perm, int64_t k, double temperature,
                       int64_t B, int64_t r, int64_t D, float *work);
int64_t ssm_tok_work_floats(int64_t B, int64_t nrows, int64_t k, int64_t r, int64_t D,
                            int32_t threads);

/* Full-catalog cross-entropy (catalog = all; "Turning Dross Into Gold Loss", Klenitskiy &
 * Vasilev 2023, §3: SASRec trained with the softmax over every item). Row b's classes are its
 * positive (logit u_b . pos_b / T) and the C catalog rows cat [C, D] whose id differs from
 * pos_ids[b] (the catalog's copy of the positive is masked, so the target is counted once
 * and a positive missing from the catalog is still a class). With K_b classes and label
 * smoothing eps (the target distribution (1 - eps) onehot + eps / K_b, as torch's
 * cross_entropy(label_smoothing = eps)):
 *   loss_b = lse_b - (1 - eps) s_pos - eps / K_b sum_k s_k,  loss = sum_b w_b loss_b / sum w.
 * With eps = 0 this is ssm_loss_ref with R = C and in_batch off. Gradients overwritten (each
 * may be NULL): d_pos gets the positive's logit, d_cat [C, D] the catalog columns'.
 * ssm_full_ref (plain loops, double, O(C) work) and ssm_full_cpu (heads_full.c: blocks of
 * items by OpenBLAS with a running log-sum-exp, O(threads x block^2) work) have this type;
 * work holds ssm_full_work_floats(B, C, D, threads) floats (8-byte aligned). */
typedef grm_status (*ssm_full_fn)(const grm_host_api *host, double *loss, float *d_pred,
                                  float *d_pos, float *d_cat, const float *pred,
                                  const float *pos, const float *cat, const int64_t *pos_ids,
                                  const int64_t *cat_ids, const float *weights,
                                  double smoothing, double temperature, int64_t B, int64_t C,
                                  int64_t D, float *work);
grm_status ssm_full_ref(const grm_host_api *host, double *loss, float *d_pred, float *d_pos,
                        float *d_cat, const float *pred, const float *pos, const float *cat,
                        const int64_t *pos_ids, const int64_t *cat_ids, const float *weights,
                        double smoothing, double temperature, int64_t B, int64_t C, int64_t D,
                        float *work);
grm_status ssm_full_cpu(const grm_host_api *host, double *loss, float *d_pred, float *d_pos,
                        float *d_cat, const float *pred, const float *pos, const float *cat,
                        const int64_t *pos_ids, const int64_t *cat_ids, const float *weights,
                        double smoothing, double temperature, int64_t B, int64_t C, int64_t D,
                        float *work);
int64_t ssm_full_work_floats(int64_t B, int64_t C, int64_t D, int32_t threads);

/* The heads' elementwise loops over rows and logits: GCC vectorizes them only at -O3 (its
 * -O2 cost model refuses loops whose trip count is known at run time alone), and the
 * exponential's clamps only with comparisons that cannot trap. */
#if defined(__GNUC__) && !defined(__clang__)
#define HEADS_VECTORIZE __attribute__((optimize("O3", "no-trapping-math")))
#else
#define HEADS_VECTORIZE
#endif

/* x [n] = exp(a x + b) in float, vectorized (heads_full.c): relative error about 2e-7, and
 * exactly 0 where a x + b is -inf (a masked logit). Every CPU softmax of the heads takes its
 * exponentials here. */
void ssm_exp_f(float *x, int64_t n, float a, float b);

/* A row's softmax (heads_cpu.c; ssm_loss_cpu, ssm_share_loss_cpu and heads_tok.c share it),
 * from its logits s [n] (a masked one -inf) and x0, a logit held apart (-inf for none), with
 * float mx >= each of them: s becomes e = exp(s - mx) (ssm_exp_f; 0 where masked) and the
 * return is z = exp(x0 - mx) + sum e, summed in double. The log-sum-exp is mx + log(z), a
 * logit's probability e / z. ssm_softmax_grads then scales e to g e / z, each logit's
 * gradient g (p - y) but for a target's -g. */
double ssm_softmax_exps(float *s, int64_t n, float mx, double x0);
void ssm_softmax_grads(float *s, int64_t n, double g_over_z);

/* The float max for ssm_softmax_exps of a logit x held in double: x rounded up. */
static inline float ssm_max_start(double x)
{
    float f = (float)x;
    return (double)f < x ? nextafterf(f, INFINITY) : f;
}
/* Floating-point operations of ssm_full_cpu on B rows and C items: forward (logits and the
 * softmax-weighted sum of rows, 4 B C D) or backward (the logits recomputed and d_cat,
 * 4 B C D). */
double ssm_full_flops(int64_t B, int64_t C, int64_t D, int32_t backward);

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
/* Floating-point operations of the last loss call's forward (backward = 0) or backward,
 * scaled to `rows` rows (0 before the first call): the flops op, for --profile's MFU. */
double ssm_flops(const ssm_head *h, int64_t rows, int32_t backward);
/* The score_rows op: with l2norm, each of the n rows [n, dim] divided by its norm in place
 * (mlp_l2norm_fwd, the loss's own normalisation), so a dot product with any query ranks
 * items as the cosine logits do; without it, nothing. */
grm_status ssm_score_rows(const ssm_head *h, float *rows, int64_t n, int64_t dim);
/* 1 when the head's loss on item rows runs in place (ssm_loss_in_place): per-token
 * negatives (share_k >= 1) of the softmax, sampled, fp32. */
int ssm_rows_in_place(const ssm_head *h);
/* The loss on io->item_rows without gathering (ssm_tok_*): d_pred written and scaled by
 * grad_scale, the rows' gradients scaled and added into io->d_item_rows. Needs the 1.5
 * fields (the caller checks struct_size). */
grm_status ssm_loss_in_place(ssm_head *h, grm_loss_io *io);
grm_status ssm_negatives(ssm_head *h, int64_t *ids, int64_t *n, int64_t max,
                         const grm_catalog *catalog, uint64_t seed);

/* The targets' and negatives' rows of a grm_head_ops loss (io->item_rows set): gathered
 * into pos [rows, D] and neg [nneg, D] through the host's backend (plain loops without one),
 * and, after the loss, d_pos and d_neg scaled by io->grad_scale and added into
 * io->d_item_rows. head_rows_* return GRM_EINVAL (message set) for a slot out of range. */
/* v [n] *= s, in place (v NULL or s 1: nothing): a head's gradients times grad_scale. */
void head_scale(float *v, int64_t n, float s);

/* head-sampled-softmax's declared INI keys (heads.c), ending with a NULL name. */
extern const grm_param_decl ssm_params_decl[];

typedef struct head_rows_work {
    const grm_backend *be;      /* the backend the scratch belongs to, or NULL */
    void *work;                 /* its work handle for scatter-add */
} head_rows_work;
grm_status head_rows_gather(const grm_host_api *host, const grm_loss_io *io, float *pos,
                            float *neg, int64_t D);
grm_status head_rows_scatter(const grm_host_api *host, head_rows_work *w, const grm_loss_io *io,
                             const float *d_pos, const float *d_neg, int64_t D);
/* Release the scratch (before the backend goes; head destroy). */
void head_rows_work_fini(head_rows_work *w);

#endif /* HEADS_H */

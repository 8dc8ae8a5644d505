/* plugins/dense-mlp/mlp.h - internal declarations of dense-mlp.so: the MLP block
 * (mlp.c) and its elementwise pieces (mlp_ref.c) over the linear layer of linear.h (shared
 * with dense-mmoe.so: linear.c, linear_ref.c, linear_cpu.c). mlp_ref.c's L2 normalization is
 * compiled into the heads too (plugins/head-sampled-softmax/heads.h).
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
enum mlp_impl_kind { MLP_IMPL_BLAS = 0, MLP_IMPL_REF = 1, MLP_IMPL_AUTO = 2 };

/* The implementation `impl` names on this run: auto follows the host's backend. */
static inline int32_t mlp_impl_of(const grm_host_api *host, int32_t impl)
{
    if (impl != MLP_IMPL_AUTO) return impl;
    return grm_backend_wants_ref(host) ? MLP_IMPL_REF : MLP_IMPL_BLAS;
}

typedef struct mlp_config {
    grm_int_list dims;          /* output size of each layer */
    int32_t activation;         /* enum mlp_act, after every layer but the last */
    int32_t final_activation;   /* enum mlp_act, after the last layer */
    double dropout;             /* inverted dropout rate on hidden activations */
    int32_t l2norm;             /* 1: L2-normalize each output row */
    int32_t impl;               /* enum mlp_impl_kind */
} mlp_config;


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

#endif /* MLP_H */

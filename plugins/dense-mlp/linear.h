/* plugins/dense-mlp/linear.h - the linear layer z = x W^T + b, the one source that every
 * dense block with linear layers compiles in (dense-mlp.so, dense-mmoe.so, dense-sasrec.so,
 * dense-hstu.so): the parameter views, Xavier init and one-block allocation (linear.c),
 * the kernels as plain loops (linear_ref.c, the spec) and as the backend's GEMMs
 * (linear_cpu.c: grm_backend_iface.gemm, so the products run wherever the pipeline's
 * device is). The activations are not here: each block keeps its own (they round
 * differently). Nothing here is exported: symbols are hidden, the .so's only visible one
 * is grm_plugin_entry. */
#ifndef LINEAR_H
#define LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include <grm/backend.h>
#include <grm/grm.h>

/* Where a linear call runs: the backend whose gemm op the fast kernels call (the reference
 * loops ignore it), the host whose parallel_for splits the products into chunks (NULL: one
 * call on the calling thread: the CPU analogue of one stream) and the chunk sizes (0: the
 * defaults, LINEAR_GRAIN_ROWS rows of z and dx, LINEAR_GRAIN_COLS output columns of dw). */
typedef struct linear_exec {
    const grm_backend *be;
    const grm_host_api *pool;
    int64_t grain_rows;
    int64_t grain_cols;
} linear_exec;

/* Rows per chunk of z and dx: large enough for GEMM efficiency. */
#define LINEAR_GRAIN_ROWS 64
/* Output columns per chunk of dw and db: a layer has few of them; split them thinly. */
#define LINEAR_GRAIN_COLS 8

/* ex for a block created on host: the host's backend, and the host as the pool when
 * parallel is 1. GRM_ENOTSUP, naming who ("dense-mlp"), when the host gives no backend (a
 * host of ABI < 1.4). */
static inline grm_status linear_exec_init(linear_exec *ex, const grm_host_api *host,
                                          int parallel, const char *who)
{
    ex->be = GRM_HAS_OP(grm_host_api, host, backend) ? host->backend() : NULL;
    ex->pool = parallel ? host : NULL;
    ex->grain_rows = 0;
    ex->grain_cols = 0;
    if (ex->be == NULL)
        return host->errorf(GRM_ENOTSUP, "%s: create: the host gives no compute backend "
                            "(grm_host_api.backend, ABI 1.4); run it in grmhost", who);
    return GRM_OK;
}

/* ---- kernels (STYLE.md §9: one type per operation) ---- */

/* z [rows, out] = x [rows, in] W^T + b, with W [out, in] and b [out], run as ex says; b
 * NULL: z = x W^T (the caller adds a bias itself). */
typedef grm_status (*linear_fwd_fn)(
        float *z,                                   /* [rows, out] */
        const float *x,                             /* [rows, in]  */
        const float *w,                             /* [out, in]   */
        const float *b,                             /* [out] or NULL */
        int64_t rows, int64_t in, int64_t out,
        const linear_exec *ex);

/* The backward of linear_fwd_fn given dz = d(loss)/dz: dw [out, in] += dz^T x, db [out] +=
 * column sums of dz, and dx [rows, in] = dz W (dx_accumulate 0) or += dz W (1); dx NULL:
 * not computed; db NULL: not computed (a caller that sums dz's columns as it writes dz,
 * while it is in cache). dx must not alias dz. ex as in linear_fwd_fn. */
typedef grm_status (*linear_bwd_fn)(
        float *dx,                                  /* [rows, in] or NULL */
        float *dw,                                  /* [out, in]   */
        float *db,                                  /* [out] or NULL */
        const float *dz,                            /* [rows, out] */
        const float *x,                             /* [rows, in]  */
        const float *w,                             /* [out, in]   */
        int64_t rows, int64_t in, int64_t out,
        int32_t dx_accumulate,                      /* 1: dx +=, 0: dx = */
        const linear_exec *ex);

/* An implementation of the linear layer, picked once in create (STYLE.md §9). */
typedef struct linear_impl {
    const char *name;
    linear_fwd_fn fwd;
    linear_bwd_fn bwd;
} linear_impl;

/* linear_ref.c: plain loops with double accumulators, the spec. */
grm_status linear_fwd_ref(float *z, const float *x, const float *w, const float *b,
                          int64_t rows, int64_t in, int64_t out, const linear_exec *ex);
grm_status linear_bwd_ref(float *dx, float *dw, float *db, const float *dz, const float *x,
                          const float *w, int64_t rows, int64_t in, int64_t out,
                          int32_t dx_accumulate, const linear_exec *ex);
/* linear_cpu.c: the backend's gemm, per chunk on ex->pool. */
grm_status linear_fwd_cpu(float *z, const float *x, const float *w, const float *b,
                          int64_t rows, int64_t in, int64_t out, const linear_exec *ex);
grm_status linear_bwd_cpu(float *dx, float *dw, float *db, const float *dz, const float *x,
                          const float *w, int64_t rows, int64_t in, int64_t out,
                          int32_t dx_accumulate, const linear_exec *ex);

extern const linear_impl linear_impl_ref;   /* static: linear_ref.c */
extern const linear_impl linear_impl_cpu;   /* static: linear_cpu.c */

/* ---- parameters (linear.c) ---- */

/* One layer's parameters and gradients: views into its owner's block (STYLE.md §8). */
typedef struct linear_layer {
    int64_t in, out;
    float *w, *b;               /* [out, in], [out] */
    float *dw, *db;             /* [out, in], [out]: the same offsets in the grads half */
} linear_layer;

/* Floats of one layer's parameters: in out + out. */
size_t linear_nparams(const linear_layer *ly);

/* Allocate, through host, one zeroed CPU block of 2 nparams floats (all parameters, then
 * all gradients) into *block (owned; host->free on CPU). GRM_ENOMEM with a message that
 * starts with who ("dense-mlp") when it cannot. */
grm_status linear_block_alloc(const grm_host_api *host, const char *who, size_t nparams,
                              float **block);

/* Bind ly to the next parameters at *p and gradients at *g (weight, then bias), advance
 * both past them, and fill the weight with Xavier/Glorot uniform draws from *state; the
 * bias keeps the block's zeros. Layers bound in order from one state give the same
 * weights as before this file existed: the draws are sequential. */
void linear_bind(linear_layer *ly, float **p, float **g, uint64_t *state);

/* Xavier/Glorot uniform (Glorot & Bengio 2010): w [out, in] ~ U(-a, a),
 * a = sqrt(6 / (in + out)), in out sequential draws of grm_rng_uniform01(state). */
void linear_xavier_uniform(float *w, int64_t in, int64_t out, uint64_t *state);

/* Views of ly's weight (is_bias 0: [out, in]) or bias (1: [out]) as value (named name,
 * borrowed) and its gradient as grad; either may be NULL. */
void linear_views(const linear_layer *ly, int32_t is_bias, const char *name,
                  grm_named_tensor *value, grm_tensor *grad);

/* The activation cache of a block: make *cache (malloc, *rows_cap rows of per_row floats)
 * hold `rows` rows, growing by at least half so growth stays rare. *grown is set to 1 when
 * it was reallocated (its old contents are gone: the caller re-binds its views), else 0.
 * GRM_ENOMEM with a message that starts with who ("dense-mlp") when it cannot. */
grm_status linear_cache_reserve(const grm_host_api *host, const char *who, float **cache,
                                int64_t *rows_cap, int64_t per_row, int64_t rows,
                                int *grown);

#endif /* LINEAR_H */

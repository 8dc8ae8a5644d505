/* plugins/dense-mmoe/mmoe.h - internal declarations of dense-mmoe.so: the multi-gate
 * mixture-of-experts block (MTGRBoost §2, eq. 4; Ma et al. 2018, "Modeling Task
 * Relationships in Multi-task Learning with Multi-gate Mixture-of-Experts") in mmoe.c over
 * the linear layer of plugins/dense-mlp/linear.h (compiled into this .so too), and the
 * elementwise pieces (activations, top-k softmax gate) in mmoe_ref.c. Nothing here is
 * exported. */
#ifndef MMOE_H
#define MMOE_H

#include <stddef.h>
#include <stdint.h>

#include <grm/grm.h>

#include "linear.h"     /* plugins/dense-mlp: the linear layer, kernels, init, views */

/* Activations; the ENUM order of "relu|silu". */
enum mmoe_act { MMOE_ACT_RELU = 0, MMOE_ACT_SILU = 1, MMOE_ACT_NONE = 2 };

/* Implementations; the ENUM order of "blas|ref". */
enum mmoe_impl_kind { MMOE_IMPL_BLAS = 0, MMOE_IMPL_REF = 1, MMOE_IMPL_AUTO = 2 };

/* Largest number of experts and of tasks (gate softmax rows live on the stack). */
#define MMOE_MAX_EXPERTS 64
#define MMOE_MAX_TASKS 64

typedef struct mmoe_config {
    int64_t experts;            /* E */
    int64_t tasks;              /* T: gates, towers and output columns */
    grm_int_list expert_dims;   /* output size of each expert layer */
    grm_int_list tower_dims;    /* output size of each tower layer; the last must be 1 */
    int64_t top_k;              /* experts mixed per task and row; 0 = all (plain MMoE) */
    int32_t activation;         /* enum mmoe_act: after every expert layer and every tower
                                 * layer but the last */
    int32_t impl;               /* enum mmoe_impl_kind */
} mmoe_config;

/* ---- elementwise pieces (mmoe_ref.c) ---- */

/* h [n] = act(z [n]); h may alias z. */
void mmoe_act_fwd(float *h, const float *z, int64_t n, int32_t act);
/* dz [n] = g [n] * act'(z [n]); dz may alias g. */
void mmoe_act_bwd(float *dz, const float *g, const float *z, int64_t n, int32_t act);

/* The top-k softmax gate of one task: for each row, keep the k largest logits of q
 * [rows, E] (ties: the lower expert index wins), g = softmax over those k, and exactly 0
 * for the others. g [rows, E] out. 1 <= k <= E <= MMOE_MAX_EXPERTS. */
void mmoe_gate_fwd(float *g, const float *q, int64_t rows, int32_t E, int32_t k);
/* Backward of the gate given dg = d(loss)/dg: dq = g (dg - sum_e g_e dg_e) per row; the
 * unselected experts (g = 0) get exactly 0. dq [rows, E] out. */
void mmoe_gate_bwd(float *dq, const float *dg, const float *g, int64_t rows, int32_t E);

/* ---- the block (mmoe.c) ---- */

typedef struct mmoe mmoe;

/* Create for in_dim inputs; cfg is copied. Errors name "dense-mmoe". */
grm_status mmoe_create(const grm_host_api *host, const mmoe_config *cfg, int64_t in_dim,
                       uint64_t seed, mmoe **out);
void mmoe_destroy(mmoe *m);
int64_t mmoe_in_dim(const mmoe *m);
int64_t mmoe_out_dim(const mmoe *m);
/* y [rows, T] task logits of x [rows, in_dim]; training: keep the cache for backward. */
grm_status mmoe_forward(mmoe *m, float *y, const float *x, int64_t rows, int32_t training);
/* Gradients of the last training forward: grads += ..., dx [rows, in_dim] written (NULL:
 * skipped). */
grm_status mmoe_backward(mmoe *m, float *dx, const float *dy, int64_t rows);
grm_status mmoe_params(mmoe *m, int32_t index, grm_named_tensor *value, grm_tensor *grad);
double mmoe_flops(const mmoe *m, int64_t rows, int32_t backward);

#endif /* MMOE_H */

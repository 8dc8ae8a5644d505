/* plugins/opt-adam/adam.h - internal declarations of opt-adam.so: the config the host
 * fills and the reference update shared by the dense step and the sparse row step. */
#ifndef ADAM_H
#define ADAM_H

#include <stdint.h>

/* Variants; the ENUM order of "adam|adamw". */
enum adam_variant { ADAM_VARIANT_ADAM = 0, ADAM_VARIANT_ADAMW = 1 };

typedef struct adam_config {
    double lr;              /* learning rate, > 0 */
    double beta1;           /* first-moment decay, [0, 1) */
    double beta2;           /* second-moment decay, [0, 1) */
    double eps;             /* denominator floor */
    double weight_decay;    /* L2 (adam) or decoupled (adamw) decay */
    int32_t variant;        /* enum adam_variant */
} adam_config;

/* The per-call constants of one update, in the precision the loop uses. */
typedef struct adam_coef {
    float beta1, beta2;     /* decays */
    float one_m_beta1;      /* 1 - beta1 */
    float one_m_beta2;      /* 1 - beta2 */
    float eps;
    float l2;               /* weight_decay added to the gradient (adam), else 0 */
    float decay;            /* 1 - lr * weight_decay (adamw), else 1 */
    float step_size;        /* lr / (1 - beta1^t), computed in double */
    float inv_sqrt_bc2;     /* 1 / sqrt(1 - beta2^t) */
} adam_coef;

/* The constants for update number `step` (1-based) of cfg. */
adam_coef adam_coef_at(const adam_config *cfg, int64_t step);

/* One Adam/AdamW update of n elements in place (Kingma & Ba 2015, Alg. 1; AdamW:
 * Loshchilov & Hutter 2019, Alg. 2), in the form of torch.optim.Adam(W).
 * param [n], m [n] first moments, v [n] second moments, grad [n]. */
void adam_update_ref(float *param, float *m, float *v, const float *grad, int64_t n,
                     const adam_coef *c);

#endif /* ADAM_H */

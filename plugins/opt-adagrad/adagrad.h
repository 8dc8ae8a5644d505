/* plugins/opt-adagrad/adagrad.h - internal declarations of opt-adagrad.so: the config the
 * host fills and the reference update shared by the dense step and the sparse row step
 * (Duchi, Hazan & Singer 2011, diagonal form, as torch.optim.Adagrad computes it). */
#ifndef ADAGRAD_H
#define ADAGRAD_H

#include <stdint.h>

typedef struct adagrad_config {
    double lr;                          /* learning rate, > 0 */
    double lr_decay;                    /* clr = lr / (1 + (t - 1) lr_decay), >= 0 */
    double weight_decay;                /* L2 penalty added to the gradient, >= 0 */
    double initial_accumulator_value;   /* the sum of squares before the first step, >= 0 */
    double eps;                         /* added to sqrt(sum) in the denominator, >= 0 */
} adagrad_config;

/* The per-call constants of one update, in the precision the loop uses. */
typedef struct adagrad_coef {
    float clr;          /* lr / (1 + (t - 1) lr_decay), computed in double */
    float wd;           /* weight_decay */
    float eps;
    float init;         /* initial_accumulator_value */
    int first;          /* 1 on the tensor's (or row's) first update: sum starts at init */
} adagrad_coef;

/* The constants for update number `step` (1-based) of cfg. */
adagrad_coef adagrad_coef_at(const adagrad_config *cfg, int64_t step);

/* One Adagrad update of n elements in place, in the form of torch.optim.Adagrad
 * (foreach = False): g = grad + wd p; sum = (first ? init : sum) + g^2;
 * p -= clr g / (sqrt(sum) + eps). The first update overwrites whatever sum holds, so a
 * zeroed state plays the part of torch's sum initialised to init.
 * param [n], sum [n] running sum of squared gradients, grad [n]. */
void adagrad_update_ref(float *param, float *sum, const float *grad, int64_t n,
                        const adagrad_coef *c);

#endif /* ADAGRAD_H */

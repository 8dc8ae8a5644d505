/* plugins/opt-sgd/sgd.h - internal declarations of opt-sgd.so: the config the host fills
 * and the reference update shared by the dense step and the sparse row step. */
#ifndef SGD_H
#define SGD_H

#include <stdint.h>

typedef struct sgd_config {
    double lr;              /* learning rate, > 0 */
    double momentum;        /* heavy-ball momentum, [0, 1]; 0: plain SGD, no state */
    int32_t nesterov;       /* 1: Nesterov momentum (needs momentum > 0) */
    double weight_decay;    /* L2 penalty added to the gradient */
} sgd_config;

/* One SGD update of n elements in place, in the form of torch.optim.SGD with
 * dampening 0: g = grad + wd p; buf = g on the first step (first = 1), else
 * buf = momentum buf + g; g = nesterov ? g + momentum buf : buf; p -= lr g.
 * param [n], buf [n] (NULL when momentum is 0), grad [n]. */
void sgd_update_ref(float *param, float *buf, const float *grad, int64_t n,
                    const sgd_config *cfg, int first);

#endif /* SGD_H */

/* plugins/opt-adagrad/adagrad_ref.c - the Adagrad update as plain loops: float arithmetic
 * per element, the decayed learning rate computed in double. Diagonal Adagrad (Duchi,
 * Hazan & Singer 2011, JMLR 12, §1 and Fig. 1: x -= eta g / sqrt(sum of g^2)) with the
 * lr decay, L2 weight decay, initial accumulator and eps of torch.optim.Adagrad
 * (foreach = False), which kernels/row_opt.cu (GRM_CUDA_OPT_ADAGRAD) also mirrors. */
#include <math.h>

#include "adagrad.h"

adagrad_coef adagrad_coef_at(const adagrad_config *cfg, int64_t step)
{
    // torch: clr = lr / (1 + (step - 1) * lr_decay), step counted from 1
    const double clr = cfg->lr / (1.0 + (double)(step - 1) * cfg->lr_decay);
    adagrad_coef c = {
        .clr = (float)clr,
        .wd = (float)cfg->weight_decay,
        .eps = (float)cfg->eps,
        .init = (float)cfg->initial_accumulator_value,
        .first = step == 1,
    };
    return c;
}

void adagrad_update_ref(float *param, float *sum, const float *grad, int64_t n,
                        const adagrad_coef *c)
{
    for (int64_t i = 0; i < n; i++) {
        // L2 regularization enters through the gradient, as in torch
        const float g = grad[i] + c->wd * param[i];
        // the caller zeroes state; torch starts the sum at initial_accumulator_value
        const float s = (c->first ? c->init : sum[i]) + g * g;
        sum[i] = s;
        param[i] -= c->clr * g / (sqrtf(s) + c->eps);
    }
}

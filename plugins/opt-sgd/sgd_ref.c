/* plugins/opt-sgd/sgd_ref.c - SGD with optional (Nesterov) momentum and L2 weight decay
 * as plain loops in float; mirrors torch.optim.SGD (dampening 0, foreach = False).
 * Nesterov form: Sutskever et al. 2013, as PyTorch writes it. */
#include <stddef.h>

#include "sgd.h"

void sgd_update_ref(float *param, float *buf, const float *grad, int64_t n,
                    const sgd_config *cfg, int first)
{
    const float lr = (float)cfg->lr, mu = (float)cfg->momentum;
    const float wd = (float)cfg->weight_decay;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] + wd * param[i];
        if (buf != NULL) {
            // the first step starts the buffer at g rather than decaying a zero buffer
            buf[i] = first ? g : mu * buf[i] + g;
            g = cfg->nesterov ? g + mu * buf[i] : buf[i];
        }
        param[i] -= lr * g;
    }
}

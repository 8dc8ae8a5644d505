/* plugins/opt-adam/plugin.c - glue of opt-adam.so: entry point, descriptor, parameter
 * and ops tables, argument checks. The update itself is adam_update_ref (adam_ref.c). */
#include <stddef.h>
#include <stdlib.h>

#include <grm/grm.h>

#include "adam.h"

static const grm_host_api *adam_host;   /* the only mutable global */

typedef struct adam {
    adam_config cfg;    /* copy of the config */
} adam;

static const grm_param_decl adam_params[] = {
    GRM_PARAM_DECL_DOUBLE(adam_config, lr, "1e-3", GRM_PARAM_RANGE(0, 1e3), "learning rate (> 0)"),
    GRM_PARAM_DECL_DOUBLE(adam_config, beta1, "0.9", GRM_PARAM_RANGE(0, 1),
                          "first-moment decay, in [0, 1)"),
    GRM_PARAM_DECL_DOUBLE(adam_config, beta2, "0.999", GRM_PARAM_RANGE(0, 1),
                          "second-moment decay, in [0, 1)"),
    GRM_PARAM_DECL_DOUBLE(adam_config, eps, "1e-8", GRM_PARAM_RANGE(0, 1),
                          "added to sqrt(v_hat) in the denominator"),
    GRM_PARAM_DECL_DOUBLE(adam_config, weight_decay, "0", GRM_PARAM_RANGE(0, 1e3),
                          "L2 penalty (adam) or decoupled decay (adamw)"),
    GRM_PARAM_DECL_ENUM(adam_config, variant, "adam", "adam|adamw",
                        "adam: decay through the gradient; adamw: decoupled"),
    GRM_PARAM_DECL_END
};

static grm_status adam_create(const void *config, void **inst)
{
    if (config == NULL || inst == NULL)
        return adam_host->errorf(GRM_EINVAL, "opt-adam: create: config and inst must not be "
                                 "NULL");
    const adam_config *cfg = config;
    *inst = NULL;
    if (!(cfg->lr > 0))
        return adam_host->errorf(GRM_EINVAL, "opt-adam: lr: %g must be > 0", cfg->lr);
    if (!(cfg->beta1 >= 0 && cfg->beta1 < 1))
        return adam_host->errorf(GRM_EINVAL, "opt-adam: beta1: %g out of range [0, 1)",
                                 cfg->beta1);
    if (!(cfg->beta2 >= 0 && cfg->beta2 < 1))
        return adam_host->errorf(GRM_EINVAL, "opt-adam: beta2: %g out of range [0, 1)",
                                 cfg->beta2);
    if (!(cfg->eps >= 0))
        return adam_host->errorf(GRM_EINVAL, "opt-adam: eps: %g must be >= 0", cfg->eps);
    if (!(cfg->weight_decay >= 0))
        return adam_host->errorf(GRM_EINVAL, "opt-adam: weight_decay: %g must be >= 0",
                                 cfg->weight_decay);
    if (cfg->variant != ADAM_VARIANT_ADAM && cfg->variant != ADAM_VARIANT_ADAMW)
        return adam_host->errorf(GRM_EINVAL, "opt-adam: variant: unknown index %d; use adam "
                                 "or adamw", (int)cfg->variant);
    adam *a = malloc(sizeof *a);
    if (a == NULL)
        return adam_host->errorf(GRM_ENOMEM, "opt-adam: create: out of memory");
    a->cfg = *cfg;
    *inst = a;
    return GRM_OK;
}

static void adam_destroy(void *inst)
{
    free(inst);
}

static int32_t adam_state_floats(void *inst)
{
    (void)inst;
    return 2;   // m then v
}

static grm_status adam_check(const char *op, const float *param, const float *state,
                             const float *grad, int64_t n, int64_t step)
{
    if (n < 0)
        return adam_host->errorf(GRM_EINVAL, "opt-adam: %s: %lld elements is negative", op,
                                 (long long)n);
    if (step < 1)
        return adam_host->errorf(GRM_EINVAL, "opt-adam: %s: step %lld must be >= 1 (1 for "
                                 "the first update)", op, (long long)step);
    if (n > 0 && (param == NULL || state == NULL || grad == NULL))
        return adam_host->errorf(GRM_EINVAL, "opt-adam: %s: param, state and grad must not "
                                 "be NULL", op);
    return GRM_OK;
}

/* state [2 * n]: m [n] then v [n]. */
static grm_status adam_step(void *inst, float *param, float *state, const float *grad,
                            int64_t n, int64_t step)
{
    const adam *a = inst;
    grm_status st = adam_check("step", param, state, grad, n, step);
    if (st != GRM_OK || n == 0)
        return st;
    const adam_coef c = adam_coef_at(&a->cfg, step);
    adam_update_ref(param, state, state + n, grad, n, &c);
    return GRM_OK;
}

/* state [2 * dim]: m [dim] then v [dim]; step counts this row's updates. */
static grm_status adam_row_step(void *inst, float *row, float *state, const float *grad,
                                int32_t dim, int64_t step)
{
    const adam *a = inst;
    grm_status st = adam_check("row_step", row, state, grad, dim, step);
    if (st != GRM_OK || dim == 0)
        return st;
    const adam_coef c = adam_coef_at(&a->cfg, step);
    adam_update_ref(row, state, state + dim, grad, dim, &c);
    return GRM_OK;
}

static const grm_opt_ops adam_ops = {
    .struct_size = sizeof(grm_opt_ops),
    .create = adam_create,
    .destroy = adam_destroy,
    .state_floats = adam_state_floats,
    .step = adam_step,
    .row_step = adam_row_step,
};

static const grm_plugin_info adam_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_OPT,
    .name = "opt-adam",
    .version = "1.0.0",
    .description = "Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), dense and "
                   "sparse-row steps with per-row step counts",
    .ops = &adam_ops,
    .params = adam_params,
    .config_size = sizeof(adam_config),
};

GRM_PLUGIN_DEFINE(adam_host, &adam_info);

/* plugins/opt-adam/plugin.c - opt-adam.so: its parameters, their checks and its update
 * rule (adam_coef_at, adam_update_ref, adam_ref.c); the ops table, create and the step
 * calls are the glue every optimizer shares (plugins/opt-common/opt_glue.c). */
#include <stddef.h>

#include <grm/grm.h>

#include "adam.h"
#include "opt_glue.h"

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

static grm_status adam_check(const void *config)
{
    const adam_config *cfg = config;
    if (!(cfg->lr > 0))
        return opt_host->errorf(GRM_EINVAL, "opt-adam: lr: %g must be > 0", cfg->lr);
    if (!(cfg->beta1 >= 0 && cfg->beta1 < 1))
        return opt_host->errorf(GRM_EINVAL, "opt-adam: beta1: %g out of range [0, 1)",
                                cfg->beta1);
    if (!(cfg->beta2 >= 0 && cfg->beta2 < 1))
        return opt_host->errorf(GRM_EINVAL, "opt-adam: beta2: %g out of range [0, 1)",
                                cfg->beta2);
    if (!(cfg->eps >= 0))
        return opt_host->errorf(GRM_EINVAL, "opt-adam: eps: %g must be >= 0", cfg->eps);
    if (!(cfg->weight_decay >= 0))
        return opt_host->errorf(GRM_EINVAL, "opt-adam: weight_decay: %g must be >= 0",
                                cfg->weight_decay);
    if (cfg->variant != ADAM_VARIANT_ADAM && cfg->variant != ADAM_VARIANT_ADAMW)
        return opt_host->errorf(GRM_EINVAL, "opt-adam: variant: unknown index %d; use adam "
                                "or adamw", (int)cfg->variant);
    return GRM_OK;
}

static int32_t adam_state_floats(const void *config)
{
    (void)config;
    return 2;   // m then v
}

/* state [2 * n]: m [n] then v [n]. */
static void adam_update(const void *config, float *param, float *state, const float *grad,
                        int64_t n, int64_t step)
{
    const adam_coef c = adam_coef_at(config, step);
    adam_update_ref(param, state, state + n, grad, n, &c);
}

static const grm_plugin_info adam_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_OPT,
    .name = "opt-adam",
    .version = "1.0.0",
    .description = "Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), dense and "
                   "sparse-row steps with per-row step counts",
    .ops = &opt_glue_ops,
    .params = adam_params,
    .config_size = sizeof(adam_config),
};

const opt_rule opt_rule_this = {
    .info = &adam_info,
    .check = adam_check,
    .state_floats = adam_state_floats,
    .update = adam_update,
    .lr_offset = offsetof(adam_config, lr),
};

GRM_PLUGIN_DEFINE(opt_host, &adam_info);

/* plugins/opt-sgd/plugin.c - opt-sgd.so: its parameters, their checks and its update rule
 * (sgd_update_ref, sgd_ref.c); the ops table, create and the step calls are the glue every
 * optimizer shares (plugins/opt-common/opt_glue.c). */
#include <stddef.h>

#include <grm/grm.h>

#include "opt_glue.h"
#include "sgd.h"

static const grm_param_decl sgd_params[] = {
    GRM_PARAM_DECL_DOUBLE(sgd_config, lr, "0.01", GRM_PARAM_RANGE(0, 1e3), "learning rate (> 0)"),
    GRM_PARAM_DECL_DOUBLE(sgd_config, momentum, "0", GRM_PARAM_RANGE(0, 1),
                          "momentum factor; 0 keeps no state"),
    GRM_PARAM_DECL_BOOL(sgd_config, nesterov, "false", "Nesterov momentum (needs momentum > 0)"),
    GRM_PARAM_DECL_DOUBLE(sgd_config, weight_decay, "0", GRM_PARAM_RANGE(0, 1e3),
                          "L2 penalty added to the gradient"),
    GRM_PARAM_DECL_END
};

static grm_status sgd_check(const void *config)
{
    const sgd_config *cfg = config;
    if (!(cfg->lr > 0))
        return opt_host->errorf(GRM_EINVAL, "opt-sgd: lr: %g must be > 0", cfg->lr);
    if (!(cfg->momentum >= 0 && cfg->momentum <= 1))
        return opt_host->errorf(GRM_EINVAL, "opt-sgd: momentum: %g out of range [0, 1]",
                                cfg->momentum);
    if (!(cfg->weight_decay >= 0))
        return opt_host->errorf(GRM_EINVAL, "opt-sgd: weight_decay: %g must be >= 0",
                                cfg->weight_decay);
    if (cfg->nesterov && !(cfg->momentum > 0))
        return opt_host->errorf(GRM_EINVAL, "opt-sgd: nesterov: Nesterov momentum needs "
                                "momentum > 0; set momentum (e.g. 0.9) or nesterov = false");
    return GRM_OK;
}

static int32_t sgd_state_floats(const void *config)
{
    const sgd_config *cfg = config;
    return cfg->momentum > 0 ? 1 : 0;   // the momentum buffer
}

/* state [n]: the momentum buffer when momentum > 0, else NULL. */
static void sgd_update(const void *config, float *param, float *state, const float *grad,
                       int64_t n, int64_t step)
{
    sgd_update_ref(param, state, grad, n, config, step == 1);
}

static const grm_plugin_info sgd_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_OPT,
    .name = "opt-sgd",
    .version = "1.0.0",
    .description = "SGD with optional momentum, Nesterov momentum and L2 weight decay "
                   "(torch.optim.SGD semantics)",
    .ops = &opt_glue_ops,
    .params = sgd_params,
    .config_size = sizeof(sgd_config),
};

const opt_rule opt_rule_this = {
    .info = &sgd_info,
    .check = sgd_check,
    .state_floats = sgd_state_floats,
    .update = sgd_update,
    .lr_offset = offsetof(sgd_config, lr),
};

GRM_PLUGIN_DEFINE(opt_host, &sgd_info);

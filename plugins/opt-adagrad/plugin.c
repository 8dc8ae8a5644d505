/* plugins/opt-adagrad/plugin.c - opt-adagrad.so: its parameters, their checks and its
 * update rule (adagrad_coef_at, adagrad_update_ref, adagrad_ref.c; torch.optim.Adagrad
 * semantics); the ops table, create and the step calls, per-row step counts included, are
 * the glue every optimizer shares (plugins/opt-common/opt_glue.c). */
#include <math.h>
#include <stddef.h>

#include <grm/grm.h>

#include "adagrad.h"
#include "opt_glue.h"

static const grm_param_decl adagrad_params[] = {
    GRM_PARAM_DECL_DOUBLE(adagrad_config, lr, "0.01", GRM_PARAM_RANGE(0, 1e3),
                          "learning rate (> 0)"),
    GRM_PARAM_DECL_DOUBLE(adagrad_config, lr_decay, "0", GRM_PARAM_RANGE(0, 1e3),
                          "step t uses lr / (1 + (t - 1) lr_decay)"),
    GRM_PARAM_DECL_DOUBLE(adagrad_config, weight_decay, "0", GRM_PARAM_RANGE(0, 1e3),
                          "L2 penalty added to the gradient"),
    GRM_PARAM_DECL_DOUBLE(adagrad_config, initial_accumulator_value, "0", GRM_PARAM_RANGE(0, 1e6),
                          "sum of squared gradients before the first update"),
    GRM_PARAM_DECL_DOUBLE(adagrad_config, eps, "1e-10", GRM_PARAM_RANGE(0, 1),
                          "added to sqrt(sum) in the denominator"),
    GRM_PARAM_DECL_END
};

/* GRM_OK when v is finite and >= 0; the error names the parameter otherwise. */
static grm_status adagrad_check_nonneg(const char *name, double v)
{
    if (!(v >= 0 && isfinite(v)))
        return opt_host->errorf(GRM_EINVAL, "opt-adagrad: %s: %g must be a finite number "
                                ">= 0", name, v);
    return GRM_OK;
}

static grm_status adagrad_check(const void *config)
{
    const adagrad_config *cfg = config;
    if (!(cfg->lr > 0 && isfinite(cfg->lr)))
        return opt_host->errorf(GRM_EINVAL, "opt-adagrad: lr: %g must be a finite number > 0",
                                cfg->lr);
    grm_status st = adagrad_check_nonneg("lr_decay", cfg->lr_decay);
    if (st == GRM_OK)
        st = adagrad_check_nonneg("weight_decay", cfg->weight_decay);
    if (st == GRM_OK)
        st = adagrad_check_nonneg("initial_accumulator_value",
                                  cfg->initial_accumulator_value);
    if (st == GRM_OK)
        st = adagrad_check_nonneg("eps", cfg->eps);
    if (st != GRM_OK)
        return st;
    // torch accepts this pair, but then an element whose gradients so far are all zero
    // computes 0 / 0 and its parameter becomes NaN
    if (cfg->eps == 0 && cfg->initial_accumulator_value == 0)
        return opt_host->errorf(GRM_EINVAL, "opt-adagrad: eps: 0 together with "
                                "initial_accumulator_value 0 divides 0 by 0 on a zero "
                                "gradient; set eps > 0 (default 1e-10) or "
                                "initial_accumulator_value > 0");
    return GRM_OK;
}

static int32_t adagrad_state_floats(const void *config)
{
    (void)config;
    return 1;   // the running sum of squared gradients
}

/* state [n]: the running sum of squares of this tensor (or row). */
static void adagrad_update(const void *config, float *param, float *state, const float *grad,
                           int64_t n, int64_t step)
{
    const adagrad_coef c = adagrad_coef_at(config, step);
    adagrad_update_ref(param, state, grad, n, &c);
}

static const grm_plugin_info adagrad_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_OPT,
    .name = "opt-adagrad",
    .version = "1.0.0",
    .description = "Adagrad (Duchi et al. 2011; torch.optim.Adagrad semantics), dense and "
                   "sparse-row steps with per-row step counts",
    .ops = &opt_glue_ops,
    .params = adagrad_params,
    .config_size = sizeof(adagrad_config),
};

const opt_rule opt_rule_this = {
    .info = &adagrad_info,
    .check = adagrad_check,
    .state_floats = adagrad_state_floats,
    .update = adagrad_update,
    .lr_offset = offsetof(adagrad_config, lr),
};

GRM_PLUGIN_DEFINE(opt_host, &adagrad_info);

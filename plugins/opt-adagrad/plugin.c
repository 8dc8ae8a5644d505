/* plugins/opt-adagrad/plugin.c - glue of opt-adagrad.so: entry point, descriptor,
 * parameter and ops tables, argument checks. The update itself is adagrad_update_ref
 * (adagrad_ref.c); torch.optim.Adagrad semantics, per-row step counts for rows. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include <grm/grm.h>

#include "adagrad.h"

static const grm_host_api *adagrad_host;   /* the only mutable global */

typedef struct adagrad {
    adagrad_config cfg;     /* copy of the config */
} adagrad;

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
        return adagrad_host->errorf(GRM_EINVAL, "opt-adagrad: %s: %g must be a finite "
                                    "number >= 0", name, v);
    return GRM_OK;
}

static grm_status adagrad_create(const void *config, void **inst)
{
    if (config == NULL || inst == NULL)
        return adagrad_host->errorf(GRM_EINVAL, "opt-adagrad: create: config and inst must "
                                    "not be NULL");
    const adagrad_config *cfg = config;
    *inst = NULL;
    if (!(cfg->lr > 0 && isfinite(cfg->lr)))
        return adagrad_host->errorf(GRM_EINVAL, "opt-adagrad: lr: %g must be a finite "
                                    "number > 0", cfg->lr);
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
        return adagrad_host->errorf(GRM_EINVAL, "opt-adagrad: eps: 0 together with "
                                    "initial_accumulator_value 0 divides 0 by 0 on a zero "
                                    "gradient; set eps > 0 (default 1e-10) or "
                                    "initial_accumulator_value > 0");
    adagrad *a = malloc(sizeof *a);
    if (a == NULL)
        return adagrad_host->errorf(GRM_ENOMEM, "opt-adagrad: create: out of memory");
    a->cfg = *cfg;
    *inst = a;
    return GRM_OK;
}

static void adagrad_destroy(void *inst)
{
    free(inst);
}

static int32_t adagrad_state_floats(void *inst)
{
    (void)inst;
    return 1;   // the running sum of squared gradients
}

static grm_status adagrad_check(const char *op, const float *param, const float *state,
                                const float *grad, int64_t n, int64_t step)
{
    if (n < 0)
        return adagrad_host->errorf(GRM_EINVAL, "opt-adagrad: %s: %lld elements is negative",
                                    op, (long long)n);
    if (step < 1)
        return adagrad_host->errorf(GRM_EINVAL, "opt-adagrad: %s: step %lld must be >= 1 "
                                    "(1 for the first update)", op, (long long)step);
    if (n > 0 && (param == NULL || state == NULL || grad == NULL))
        return adagrad_host->errorf(GRM_EINVAL, "opt-adagrad: %s: param, state and grad "
                                    "must not be NULL", op);
    return GRM_OK;
}

/* param [n], state [n] sum of squares, grad [n]; step counts this tensor's updates. */
static grm_status adagrad_step(void *inst, float *param, float *state, const float *grad,
                               int64_t n, int64_t step)
{
    const adagrad *a = inst;
    grm_status st = adagrad_check("step", param, state, grad, n, step);
    if (st != GRM_OK || n == 0)
        return st;
    const adagrad_coef c = adagrad_coef_at(&a->cfg, step);
    adagrad_update_ref(param, state, grad, n, &c);
    return GRM_OK;
}

/* row [dim], state [dim] this row's sum of squares, grad [dim]; step counts this row's
 * updates, so lr_decay and the initial accumulator follow the row, not the trainer (only
 * the rows a batch touches are updated, MTGRBoost §5.2). */
static grm_status adagrad_row_step(void *inst, float *row, float *state, const float *grad,
                                   int32_t dim, int64_t step)
{
    const adagrad *a = inst;
    grm_status st = adagrad_check("row_step", row, state, grad, dim, step);
    if (st != GRM_OK || dim == 0)
        return st;
    const adagrad_coef c = adagrad_coef_at(&a->cfg, step);
    adagrad_update_ref(row, state, grad, dim, &c);
    return GRM_OK;
}

static const grm_opt_ops adagrad_ops = {
    .struct_size = sizeof(grm_opt_ops),
    .create = adagrad_create,
    .destroy = adagrad_destroy,
    .state_floats = adagrad_state_floats,
    .step = adagrad_step,
    .row_step = adagrad_row_step,
};

static const grm_plugin_info adagrad_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_OPT,
    .name = "opt-adagrad",
    .version = "1.0.0",
    .description = "Adagrad (Duchi et al. 2011; torch.optim.Adagrad semantics), dense and "
                   "sparse-row steps with per-row step counts",
    .ops = &adagrad_ops,
    .params = adagrad_params,
    .config_size = sizeof(adagrad_config),
};

GRM_PLUGIN_DEFINE(adagrad_host, &adagrad_info);

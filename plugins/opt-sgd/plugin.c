/* plugins/opt-sgd/plugin.c - glue of opt-sgd.so: entry point, descriptor, parameter and
 * ops tables, argument checks. The update itself is sgd_update_ref (sgd_ref.c). */
#include <stddef.h>
#include <stdlib.h>

#include <grm/grm.h>

#include "sgd.h"

static const grm_host_api *sgd_host;   /* the only mutable global */

typedef struct sgd {
    sgd_config cfg;     /* copy of the config */
} sgd;

static const grm_param_decl sgd_params[] = {
    GRM_PARAM_DECL_DOUBLE(sgd_config, lr, "0.01", GRM_PARAM_RANGE(0, 1e3), "learning rate (> 0)"),
    GRM_PARAM_DECL_DOUBLE(sgd_config, momentum, "0", GRM_PARAM_RANGE(0, 1),
                          "momentum factor; 0 keeps no state"),
    GRM_PARAM_DECL_BOOL(sgd_config, nesterov, "false", "Nesterov momentum (needs momentum > 0)"),
    GRM_PARAM_DECL_DOUBLE(sgd_config, weight_decay, "0", GRM_PARAM_RANGE(0, 1e3),
                          "L2 penalty added to the gradient"),
    GRM_PARAM_DECL_END
};

static grm_status sgd_create(const void *config, void **inst)
{
    if (config == NULL || inst == NULL)
        return sgd_host->errorf(GRM_EINVAL, "opt-sgd: create: config and inst must not be "
                                "NULL");
    const sgd_config *cfg = config;
    *inst = NULL;
    if (!(cfg->lr > 0))
        return sgd_host->errorf(GRM_EINVAL, "opt-sgd: lr: %g must be > 0", cfg->lr);
    if (!(cfg->momentum >= 0 && cfg->momentum <= 1))
        return sgd_host->errorf(GRM_EINVAL, "opt-sgd: momentum: %g out of range [0, 1]",
                                cfg->momentum);
    if (!(cfg->weight_decay >= 0))
        return sgd_host->errorf(GRM_EINVAL, "opt-sgd: weight_decay: %g must be >= 0",
                                cfg->weight_decay);
    if (cfg->nesterov && !(cfg->momentum > 0))
        return sgd_host->errorf(GRM_EINVAL, "opt-sgd: nesterov: Nesterov momentum needs "
                                "momentum > 0; set momentum (e.g. 0.9) or nesterov = false");
    sgd *s = malloc(sizeof *s);
    if (s == NULL)
        return sgd_host->errorf(GRM_ENOMEM, "opt-sgd: create: out of memory");
    s->cfg = *cfg;
    *inst = s;
    return GRM_OK;
}

static void sgd_destroy(void *inst)
{
    free(inst);
}

static int32_t sgd_state_floats(void *inst)
{
    const sgd *s = inst;
    return s->cfg.momentum > 0 ? 1 : 0;   // the momentum buffer
}

static grm_status sgd_check(const char *op, const float *param, const float *state,
                            const float *grad, int64_t n, int64_t step, int stateful)
{
    if (n < 0)
        return sgd_host->errorf(GRM_EINVAL, "opt-sgd: %s: %lld elements is negative", op,
                                (long long)n);
    if (step < 1)
        return sgd_host->errorf(GRM_EINVAL, "opt-sgd: %s: step %lld must be >= 1 (1 for "
                                "the first update)", op, (long long)step);
    if (n > 0 && (param == NULL || grad == NULL || (stateful && state == NULL)))
        return sgd_host->errorf(GRM_EINVAL, "opt-sgd: %s: param, grad%s must not be NULL",
                                op, stateful ? " and state (momentum > 0)" : "");
    return GRM_OK;
}

/* state [n] momentum buffer when momentum > 0, else unused. */
static grm_status sgd_step(void *inst, float *param, float *state, const float *grad,
                           int64_t n, int64_t step)
{
    const sgd *s = inst;
    const int stateful = s->cfg.momentum > 0;
    grm_status st = sgd_check("step", param, state, grad, n, step, stateful);
    if (st != GRM_OK || n == 0)
        return st;
    sgd_update_ref(param, stateful ? state : NULL, grad, n, &s->cfg, step == 1);
    return GRM_OK;
}

/* state [dim] momentum buffer of this row when momentum > 0; step counts its updates. */
static grm_status sgd_row_step(void *inst, float *row, float *state, const float *grad,
                               int32_t dim, int64_t step)
{
    const sgd *s = inst;
    const int stateful = s->cfg.momentum > 0;
    grm_status st = sgd_check("row_step", row, state, grad, dim, step, stateful);
    if (st != GRM_OK || dim == 0)
        return st;
    sgd_update_ref(row, stateful ? state : NULL, grad, dim, &s->cfg, step == 1);
    return GRM_OK;
}

static const grm_opt_ops sgd_ops = {
    .struct_size = sizeof(grm_opt_ops),
    .create = sgd_create,
    .destroy = sgd_destroy,
    .state_floats = sgd_state_floats,
    .step = sgd_step,
    .row_step = sgd_row_step,
};

static const grm_plugin_info sgd_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_OPT,
    .name = "opt-sgd",
    .version = "1.0.0",
    .description = "SGD with optional momentum, Nesterov momentum and L2 weight decay "
                   "(torch.optim.SGD semantics)",
    .ops = &sgd_ops,
    .params = sgd_params,
    .config_size = sizeof(sgd_config),
};

GRM_PLUGIN_DEFINE(sgd_host, &sgd_info);

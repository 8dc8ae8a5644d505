/* plugins/opt-common/opt_glue.c - the grm_opt_ops of every optimizer .so (opt_glue.h):
 * create copies the checked config, step and row_step check their arguments and run the
 * .so's opt_rule_this.update on the same state layout, set_lr_scale rewrites the copy's
 * learning rate. The instance is the config copy the rule reads, followed by the
 * configured learning rate (the base set_lr_scale multiplies). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "opt_glue.h"

const grm_host_api *opt_host;

/* Where the configured learning rate is kept in the instance: after the config copy. */
static size_t opt_base_offset(void)
{
    return (opt_rule_this.info->config_size + 7) & ~(size_t)7;
}

static grm_status opt_create(const void *config, void **inst)
{
    const opt_rule *r = &opt_rule_this;
    const char *name = r->info->name;
    if (config == NULL || inst == NULL)
        return opt_host->errorf(GRM_EINVAL, "%s: create: config and inst must not be NULL",
                                name);
    *inst = NULL;
    grm_status st = r->check(config);
    if (st != GRM_OK)
        return st;
    char *copy = malloc(opt_base_offset() + sizeof(double));
    if (copy == NULL)
        return opt_host->errorf(GRM_ENOMEM, "%s: create: out of memory", name);
    memcpy(copy, config, r->info->config_size);
    memcpy(copy + opt_base_offset(), copy + r->lr_offset, sizeof(double));
    *inst = copy;
    return GRM_OK;
}

static void opt_destroy(void *inst)
{
    free(inst);
}

static int32_t opt_state_floats(void *inst)
{
    return opt_rule_this.state_floats(inst);
}

/* Checks the arguments of `op` (step or row_step), then runs the update when n > 0. */
static grm_status opt_run(const char *op, const void *cfg, float *param, float *state,
                          const float *grad, int64_t n, int64_t step)
{
    const opt_rule *r = &opt_rule_this;
    const char *name = r->info->name;
    const int stateful = r->state_floats(cfg) > 0;
    if (n < 0)
        return opt_host->errorf(GRM_EINVAL, "%s: %s: %lld elements is negative", name, op,
                                (long long)n);
    if (step < 1)
        return opt_host->errorf(GRM_EINVAL, "%s: %s: step %lld must be >= 1 (1 for the first "
                                "update)", name, op, (long long)step);
    if (n > 0 && (param == NULL || grad == NULL || (stateful && state == NULL)))
        return opt_host->errorf(GRM_EINVAL, "%s: %s: param, %sgrad must not be NULL", name, op,
                                stateful ? "state and " : "");
    if (n > 0)
        r->update(cfg, param, stateful ? state : NULL, grad, n, step);
    return GRM_OK;
}

/* param [n], state [state_floats * n], grad [n]; step counts this tensor's updates. */
static grm_status opt_step(void *inst, float *param, float *state, const float *grad,
                           int64_t n, int64_t step)
{
    return opt_run("step", inst, param, state, grad, n, step);
}

/* row [dim], state [state_floats * dim], grad [dim]; step counts this row's updates, so
 * step-dependent terms (bias correction, lr decay, first-step initialisation) follow the
 * row, not the trainer (only the rows a batch touches are updated, MTGRBoost §5.2). */
static grm_status opt_row_step(void *inst, float *row, float *state, const float *grad,
                               int32_t dim, int64_t step)
{
    return opt_run("row_step", inst, row, state, grad, dim, step);
}

/* The learning rate of the updates that follow: the configured one times scale. */
static grm_status opt_set_lr_scale(void *inst, double scale)
{
    if (!(scale >= 0) || !isfinite(scale))
        return opt_host->errorf(GRM_EINVAL, "%s: set_lr_scale: scale %g must be a finite "
                                "number >= 0", opt_rule_this.info->name, scale);
    char *c = inst;
    double base;
    memcpy(&base, c + opt_base_offset(), sizeof base);
    const double lr = base * scale;
    memcpy(c + opt_rule_this.lr_offset, &lr, sizeof lr);
    return GRM_OK;
}

const grm_opt_ops opt_glue_ops = {
    .struct_size = sizeof(grm_opt_ops),
    .create = opt_create,
    .destroy = opt_destroy,
    .state_floats = opt_state_floats,
    .step = opt_step,
    .row_step = opt_row_step,
    .set_lr_scale = opt_set_lr_scale,
};

/* plugins/opt-common/opt_glue.h - the glue opt-adam, opt-adagrad and opt-sgd share: the
 * grm_opt_ops table, create/destroy (the instance is a copy of the config), argument
 * checks, the learning-rate scale (set_lr_scale), and the dense step and sparse row step,
 * which differ only in the length's type and so run one update function on one state
 * layout (grm/opt.h). opt_glue.c is compiled
 * into each optimizer's .so (see its local.mk); each optimizer's plugin.c holds only its
 * parameters, their checks and its update rule, bound together in one opt_rule. */
#ifndef OPT_GLUE_H
#define OPT_GLUE_H

#include <stddef.h>
#include <stdint.h>

#include <grm/grm.h>

/* One optimizer's rule. `cfg` is always the instance: the copy of the config struct the
 * host filled (info->config_size bytes). */
typedef struct opt_rule {
    const grm_plugin_info *info;   /* the .so's descriptor: name (begins every message),
                                      config_size, .ops = &opt_glue_ops */

    /* GRM_OK when the config's values are usable, else host->errorf naming the
     * parameter (the host has already checked types and declared ranges). */
    grm_status (*check)(const void *cfg);

    /* Floats of state per parameter element; 0: no state, update gets state NULL. */
    int32_t (*state_floats)(const void *cfg);

    /* One update of n > 0 elements in place; the arguments are already checked.
     * param [n], state [state_floats * n] (NULL when state_floats is 0), grad [n];
     * step counts the updates of this tensor (or row), 1 for the first. */
    void (*update)(const void *cfg, float *param, float *state, const float *grad, int64_t n,
                   int64_t step);

    /* offsetof(config, lr): the double the update reads as its learning rate, which
     * set_lr_scale rewrites as the configured value times the scale. */
    size_t lr_offset;
} opt_rule;

/* The rule of the .so being built; each optimizer's plugin.c defines it. Static. */
extern const opt_rule opt_rule_this;

/* The host table, set by the entry: plugin.c ends with GRM_PLUGIN_DEFINE(opt_host, ...).
 * The only mutable global of the .so. */
extern const grm_host_api *opt_host;

/* The ops table of every optimizer descriptor (.ops = &opt_glue_ops); it runs
 * opt_rule_this. Static. */
extern const grm_opt_ops opt_glue_ops;

#endif /* OPT_GLUE_H */

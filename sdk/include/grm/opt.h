/* grm/opt.h - optimizers: a dense step over a whole parameter tensor and a sparse step
 * over one embedding row whose state the store keeps beside the row (DESIGN.md §3).
 * Both see the same state layout: state_floats(inst) floats per parameter element,
 * laid out as that many arrays of n (dense) or dim (row) floats, one after another. */
#ifndef GRM_OPT_H
#define GRM_OPT_H

#include <stdint.h>

#include <grm/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grm_opt_ops {
    uint32_t struct_size;  /* sizeof(grm_opt_ops) */

    /* (required) Create from the filled config struct (borrowed for the instance's
     * life). *inst: owned, release with destroy. */
    grm_status (*create)(const void *config, void **inst);

    /* (required) Release the instance; NULL is accepted. */
    void (*destroy)(void *inst);

    /* (required) Floats of optimizer state per parameter element (Adam: 2, SGD: 0).
     * The caller allocates state zeroed. */
    int32_t (*state_floats)(void *inst);

    /* (required) One dense update of n elements in place.
     * param [n], state [state_floats * n], grad [n] (already averaged by the host).
     * step: 1 for the first update of this tensor. Thread-safe for distinct tensors. */
    grm_status (*step)(void *inst, float *param, float *state, const float *grad,
                       int64_t n, int64_t step);

    /* (required) One sparse update of one embedding row in place (TF-style sparse
     * semantics: `step` counts the updates of this row, 1 for its first).
     * row [dim], state [state_floats * dim], grad [dim]. Thread-safe for distinct rows. */
    grm_status (*row_step)(void *inst, float *row, float *state, const float *grad,
                           int32_t dim, int64_t step);

    /* (optional, ABI 1.9) Scale the configured learning rate by `scale` (>= 0) for the
     * updates that follow, until the next call; 1 restores it. The host calls it before
     * each optimizer step when [train] sets a learning-rate schedule (lr_warmup,
     * lr_decay), never while step or row_step run. NULL, or a plugin older than 1.9:
     * the host refuses a schedule with this optimizer. */
    grm_status (*set_lr_scale)(void *inst, double scale);
} grm_opt_ops;

/* An optimizer instance as the host hands it to an embedding store. Borrowed. */
typedef struct grm_optimizer {
    const grm_opt_ops *ops;
    void *inst;
} grm_optimizer;

#ifdef __cplusplus
}
#endif
#endif /* GRM_OPT_H */

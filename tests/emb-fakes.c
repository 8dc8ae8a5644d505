/* tests/emb-fakes.c - the embedding-store tests' fake optimizer and helpers
 * (tests/emb-fakes.h). */
#include <string.h>

#include "emb-fakes.h"
#include "harness.h"
#include "tap.h"

const grm_plugin_info *info;
const grm_emb_ops *ops;

static int32_t fake_state_floats(void *inst)
{
    return ((fake_opt *)inst)->S;
}

static grm_status fake_step(void *inst, float *param, float *state, const float *grad,
                            int64_t n, int64_t step)
{
    (void)inst, (void)param, (void)state, (void)grad, (void)n, (void)step;
    return GRM_OK;
}

/* row -= 0.5 * grad; state[0 .. dim) counts updates, state[dim .. 2 dim) = step. */
static grm_status fake_row_step(void *inst, float *row, float *state, const float *grad,
                                int32_t dim, int64_t step)
{
    fake_opt *o = inst;
    for (int32_t j = 0; j < dim; j++) row[j] -= 0.5f * grad[j];
    if (o->S >= 2) {
        for (int32_t j = 0; j < dim; j++) {
            state[j] += 1.0f;
            state[dim + j] = (float)step;
        }
    }
    const int64_t k = __atomic_fetch_add(&o->calls, 1, __ATOMIC_RELAXED);
    if (k < FAKE_LOG_MAX) {
        o->rows[k] = row;
        o->states[k] = state;
        o->steps[k] = step;
    }
    return GRM_OK;
}

const grm_opt_ops fake_ops = {
    .struct_size = sizeof(grm_opt_ops),
    .create = NULL,
    .destroy = NULL,
    .state_floats = fake_state_floats,
    .step = fake_step,
    .row_step = fake_row_step,
};

int has(const char *needle)
{
    return harness_error_has(needle);
}

grm_named_tensor find_tensor(void *s, const char *name)
{
    grm_named_tensor t;
    for (int32_t i = 0; ops->tensors(s, i, &t) == GRM_OK; i++)
        if (strcmp(t.name, name) == 0) return t;
    memset(&t, 0, sizeof(t));
    return t;
}

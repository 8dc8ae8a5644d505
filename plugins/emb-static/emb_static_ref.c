/* plugins/emb-static/emb_static_ref.c - the reference lookup and update of emb-static:
 * plain loops on the calling thread, obviously correct. emb_static_cpu.c computes the
 * same thing with the host's thread pool and is tested against this file. */
#include <string.h>

#include "emb_static.h"

grm_status es_gather_ref(const es_store *s, const es_table *t, float *out, /* [n, D] */
                         const int64_t *ids /* [n] */, int64_t n)
{
    const size_t D = (size_t)t->dim;
    for (int64_t i = 0; i < n; i++) {
        const int64_t row = es_row_of(t, s->range_mode, ids[i]);
        memcpy(out + (size_t)i * D, t->weight + (size_t)row * D, D * sizeof(float));
    }
    return GRM_OK;
}

grm_status es_update_ref(const es_store *s, es_table *t, const int64_t *ids /* [n] */,
                         const float *grads /* [n, D] */, int64_t n)
{
    const size_t D = (size_t)t->dim;
    const size_t SD = (size_t)s->state_floats * D;
    for (int64_t i = 0; i < n; i++) {
        const int64_t row = es_row_of(t, s->range_mode, ids[i]);
        // The count moves only when the step succeeded, so a failed update can be retried.
        const int64_t step = t->steps[row] + 1;
        const grm_status st = s->opt.ops->row_step(s->opt.inst, t->weight + (size_t)row * D,
                                                   SD ? t->state + (size_t)row * SD : NULL,
                                                   grads + (size_t)i * D, t->dim, step);
        if (st != GRM_OK) return st;
        t->steps[row] = step;
    }
    return GRM_OK;
}

/* plugins/emb-static/emb_static_cpu.c - threaded lookup and update of emb-static on the
 * host's pool (host->parallel_for). Same results as emb_static_ref.c, bit for bit: every
 * row is read or written by exactly one thread, and row_step is deterministic. */
#include <string.h>

#include "emb_static.h"

/* Ids per parallel_for range; below this the call runs the reference on this thread. */
#define ES_GRAIN 1024

typedef struct es_job {
    const es_store *s;
    es_table *t;
    float *out;                 /* gather: [n, D] */
    const int64_t *ids;         /* [n] */
    const float *grads;         /* update: [n, D] */
    int64_t n;
    int64_t parts;              /* update in modulo mode: row partitions */
} es_job;

static grm_status es_gather_range(void *ctx, int64_t begin, int64_t end)
{
    const es_job *j = ctx;
    return es_gather_ref(j->s, j->t, j->out + (size_t)begin * (size_t)j->t->dim,
                         j->ids + begin, end - begin);
}

grm_status es_gather_cpu(const es_store *s, const es_table *t, float *out, /* [n, D] */
                         const int64_t *ids /* [n] */, int64_t n)
{
    if (n <= ES_GRAIN) return es_gather_ref(s, t, out, ids, n);
    es_job j = { .s = s, .t = (es_table *)t, .out = out, .ids = ids, .n = n };
    return s->host->parallel_for(n, ES_GRAIN, es_gather_range, &j);
}

// Ids are unique in error mode, so a split over ids gives each thread disjoint rows.
static grm_status es_update_ids_range(void *ctx, int64_t begin, int64_t end)
{
    const es_job *j = ctx;
    return es_update_ref(j->s, j->t, j->ids + begin,
                         j->grads + (size_t)begin * (size_t)j->t->dim, end - begin);
}

// In modulo mode two distinct ids may share a row, so the split is over rows instead:
// partition p owns a contiguous 1/P share of the rows and applies, in id order, the ids
// that land there, exactly as the reference does. Each partition scans all n ids (n*P
// compares, small next to the n*D optimizer work).
static grm_status es_update_rows_range(void *ctx, int64_t begin, int64_t end)
{
    const es_job *j = ctx;
    const es_store *s = j->s;
    es_table *t = j->t;
    const size_t D = (size_t)t->dim;
    const size_t SD = (size_t)s->state_floats * D;
    for (int64_t p = begin; p < end; p++) {
        const int64_t q = t->rows / j->parts, r = t->rows % j->parts;
        const int64_t lo = p * q + (p < r ? p : r);
        const int64_t hi = lo + q + (p < r ? 1 : 0);
        for (int64_t i = 0; i < j->n; i++) {
            const int64_t row = es_row_of(t, s->range_mode, j->ids[i]);
            if (row < lo || row >= hi) continue;
            const int64_t step = t->steps[row] + 1;
            const grm_status st = s->opt.ops->row_step(
                s->opt.inst, t->weight + (size_t)row * D,
                SD ? t->state + (size_t)row * SD : NULL, j->grads + (size_t)i * D,
                t->dim, step);
            if (st != GRM_OK) return st;
            t->steps[row] = step;
        }
    }
    return GRM_OK;
}

grm_status es_update_cpu(const es_store *s, es_table *t, const int64_t *ids /* [n] */,
                         const float *grads /* [n, D] */, int64_t n)
{
    if (n <= ES_GRAIN) return es_update_ref(s, t, ids, grads, n);
    es_job j = { .s = s, .t = t, .ids = ids, .grads = grads, .n = n };
    if (s->range_mode != ES_RANGE_MODULO)
        return s->host->parallel_for(n, ES_GRAIN, es_update_ids_range, &j);
    j.parts = s->host->num_threads();
    if (j.parts > t->rows) j.parts = t->rows;
    if (j.parts <= 1) return es_update_ref(s, t, ids, grads, n);
    return s->host->parallel_for(j.parts, 1, es_update_rows_range, &j);
}

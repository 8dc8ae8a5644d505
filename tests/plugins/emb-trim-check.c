/* tests/plugins/emb-trim-check.c - emb-dynamic with an oracle of the host's keep_from
 * (grm_emb_ops.trim, ABI 1.12). The host promises that a trim keeps every row of the
 * batches in flight: keep_from is at most the stamp any prefetch of a batch not yet looked
 * up gave its rows (seed 003 §2.2). This fixture watches the calls the store gets and
 * checks that promise at every trim, before passing the call on:
 *   - the data thread's prefetch calls between two trims are one batch's (core/prefetch.c
 *     prefetches a batch's keys, its negatives', then trims every table), and each gave
 *     its rows the stamp clock + 1, the clock read when the call came (the store reads it
 *     after, so its stamp is that or later);
 *   - the trainer's first lookup with GRM_EMB_INSERT after an update (or the run's first)
 *     is the next batch's, in the order the batches were prefetched: that batch leaves the
 *     oracle (its lookup stamps its rows with the step in progress, which the trim keeps).
 * A trim whose keep_from passes the least stamp of a batch still waiting for its lookup
 * fails with GRM_EINTERNAL naming both, so the run stops; at destroy the fixture logs how
 * many trims it checked. With [train] accumulate 1 and sparse_async false only (the order
 * above). tests/test-train-tiered.sh trains through it. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <grm/grm.h>

/* emb-dynamic's own entry gives way to this file's; its descriptor is kept, unused */
#undef GRM_PLUGIN_DEFINE
#define GRM_PLUGIN_DEFINE(host_var, ...)                                                       \
    static const grm_plugin_info *const tc_replaced[] __attribute__((unused)) = { __VA_ARGS__ }
#include "../../plugins/emb-dynamic/plugin.c"

enum { TC_MAX = 4096 };     /* batches prefetched and not yet looked up, at most */

static struct {
    pthread_mutex_t lock;
    int64_t least[TC_MAX];  /* a ring: the least stamp each waiting batch's prefetch gave */
    int64_t head, tail;     /* batches [head, tail) wait for their lookup */
    int open;               /* the batch at tail - 1 still takes prefetch calls */
    int updated;            /* an update came since the last batch's first lookup */
    int64_t trims, checked, dropped, bad;
} tc = { .lock = PTHREAD_MUTEX_INITIALIZER, .updated = 1 };

static int64_t tc_clock(void *inst)
{
    const ed_store *s = inst;
    int64_t c = 0;
    for (int32_t i = 0; i < s->ntables; i++) {
        const int64_t x = atomic_load(&s->tables[i].clock);
        if (x > c) c = x;
    }
    return c;
}

static grm_status tc_prefetch(void *inst, int32_t table, const int64_t *ids, int64_t n)
{
    if (n > 0) {
        pthread_mutex_lock(&tc.lock);
        const int64_t stamp = tc_clock(inst) + 1;
        if (!tc.open) {
            if (tc.tail - tc.head == TC_MAX) tc.head++, tc.dropped++;
            tc.least[tc.tail++ % TC_MAX] = stamp;
            tc.open = 1;
        } else if (stamp < tc.least[(tc.tail - 1) % TC_MAX]) {
            tc.least[(tc.tail - 1) % TC_MAX] = stamp;
        }
        pthread_mutex_unlock(&tc.lock);
    }
    return ed_prefetch(inst, table, ids, n);
}

static grm_status tc_lookup(void *inst, float *rows, int32_t table, const int64_t *ids,
                            int64_t n, uint32_t flags)
{
    if (flags & GRM_EMB_INSERT) {
        pthread_mutex_lock(&tc.lock);
        if (tc.updated && tc.head < tc.tail) tc.head++;
        tc.updated = 0;
        pthread_mutex_unlock(&tc.lock);
    }
    return ed_lookup(inst, rows, table, ids, n, flags);
}

static grm_status tc_update(void *inst, int32_t table, const int64_t *ids, const float *grads,
                            int64_t n, int64_t step)
{
    const grm_status st = ed_update(inst, table, ids, grads, n, step);
    pthread_mutex_lock(&tc.lock);
    tc.updated = 1;
    pthread_mutex_unlock(&tc.lock);
    return st;
}

static grm_status tc_trim(void *inst, int32_t table, int64_t keep_from)
{
    pthread_mutex_lock(&tc.lock);
    tc.open = 0;
    tc.trims++;
    int64_t least = INT64_MAX;
    for (int64_t b = tc.head; b < tc.tail; b++)
        if (tc.least[b % TC_MAX] < least) least = tc.least[b % TC_MAX];
    if (least != INT64_MAX) tc.checked++;
    const int64_t waiting = tc.tail - tc.head;
    if (keep_from > least) tc.bad++;
    pthread_mutex_unlock(&tc.lock);
    if (keep_from > least)
        return ed_host->errorf(GRM_EINTERNAL, "emb-trim-check: trim of table %d keeps from "
                               "step %lld, but one of the %lld batches waiting for their "
                               "lookup was prefetched with stamp %lld: its rows could go",
                               (int)table, (long long)keep_from, (long long)waiting,
                               (long long)least);
    return ed_trim_op(inst, table, keep_from);
}

static void tc_destroy(void *inst)
{
    if (inst != NULL)
        ed_host->log(GRM_LOG_INFO, "emb-trim-check", "%lld trims, %lld checked against a "
                     "batch in flight, %lld kept too little (%lld batches past the oracle's "
                     "ring)", (long long)tc.trims, (long long)tc.checked, (long long)tc.bad,
                     (long long)tc.dropped);
    ed_destroy(inst);
}

static const grm_emb_ops tc_ops = {
    .struct_size = sizeof(grm_emb_ops),
    .create = ed_create,
    .destroy = tc_destroy,
    .lookup = tc_lookup,
    .update = tc_update,
    .tensors = ed_tensors,
    .load = ed_load,
    .stats = ed_stats,
    .flags = GRM_EMB_ANY_ID,
    .prefetch = tc_prefetch,
    .trim = tc_trim,
    .tensor_rows = ed_tensor_rows,
    .load_rows = ed_load_piece,
    .placement = ed_placement,
};

static const grm_plugin_info tc_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_EMB,
    .name = "emb-trim-check",
    .version = "1.0.0",
    .description = "emb-dynamic that checks the host's trim keeps the batches in flight "
                   "(a test fixture)",
    .ops = &tc_ops,
    .params = ed_params,
    .config_size = sizeof(ed_config),
};

GRM_PLUGIN_EXPORT const grm_plugin_info *const *grm_plugin_entry(const grm_host_api *host)
{
    static const grm_plugin_info *const list[] = { &tc_info, NULL };
    ed_host = host;
    return list;
}

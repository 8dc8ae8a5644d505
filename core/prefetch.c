/* core/prefetch.c - the data thread: with [train] prefetch = N it assembles batches
 * (core/batch.c) into a ring of N + 1 slots ahead of the trainer (MTGRBoost §3 prefetch;
 * TurboGR's pipelined stages), so the data work overlaps the compute of the batches before;
 * a store with a prefetch op (a tiered emb-dynamic) also gets each batch's keys then.
 * --batches-in-memory gives it a slot for every batch of the run (the benchmark peer). */
#include "train.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* ---- the data thread ---- */

/* The keys of keys [n] to prefetch into *out [*m]: all of them on one rank; with several,
 * those this rank owns, packed into *buf (grown to n). */
static grm_status pf_owned(grm__trainer *t, const int64_t *keys, int64_t n, int64_t **buf,
                           int64_t *cap, const int64_t **out, int64_t *m)
{
    *out = keys;
    *m = n;
    if (!t->sp.dist || n <= 0) return GRM_OK;
    if (*cap < n) {
        int64_t *k = realloc(*buf, (size_t)n * sizeof *k);
        if (k == NULL)
            return grm_errorf(GRM_ENOMEM, "prefetch: out of memory for %lld keys",
                              (long long)n);
        *buf = k;
        *cap = n;
    }
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++)
        if (grm__dist_owner(t->sp.dist, t->rank, keys[i]) == t->rank) (*buf)[j++] = keys[i];
    *out = *buf;
    *m = j;
    return GRM_OK;
}

static grm_status pf_prefetch_keys(grm__trainer *t, int32_t T, const int64_t *keys, int64_t n)
{
    if (n <= 0) return GRM_OK;
    grm_status st = t->sp.eops->prefetch(t->p->emb.inst, T, keys, n);
    if (st != GRM_OK)
        grm_error_prefix("[embedding] %s: prefetch: ", t->p->emb.plugin->info->name);
    return st;
}

/* The rows of batch bt's keys brought into the store's fast tier while the trainer still
 * computes the batches before (grm_emb_ops.prefetch, ABI 1.6; seed 003 §2.2: batch i+1's
 * rows come in during batch i, which the store must not evict), the negatives' too. With
 * several ranks a key's row lives in the store of the rank that owns it (core/dist.c),
 * and this thread knows only this rank's batch: it prefetches the keys this rank owns, a
 * 1/nranks share of what its store will serve. The keys of the other ranks' samples it
 * owns come from pf->global (every rank's samples assembled here), or, on larger worlds
 * and unshared orders, with the trainer's lookups (pf->ahead, pf_ahead_run); otherwise
 * the owner's lookup fetches them. */
static grm_status pf_prefetch_rows(grm__trainer *t, grm__batch *bt)
{
    const grm_emb_ops *e = t->sp.eops;
    if (!GRM_HAS_OP(grm_emb_ops, e, prefetch)) return GRM_OK;
    grm_status st = GRM_OK;
    grm__prefetcher *pf = &t->pf;
    /* every rank's samples of batch g (pf->global): the keys this rank owns of the whole
     * batch, the ones the other ranks will send it at the exchange included */
    grm__batch *src = bt;
    if (pf->global && (st = grm__batch_assemble_global(t, pf->global, bt->g)) == GRM_OK)
        src = pf->global;
    for (int32_t T = 0; T < t->p->nphys && st == GRM_OK; T++) {
        grm__batch_tab *w = &src->tab[T];
        const int64_t *keys;
        int64_t n;
        if ((st = pf_owned(t, w->keys, w->nu, &w->pfkeys, &w->pfcap, &keys, &n)) == GRM_OK)
            st = pf_prefetch_keys(t, T, keys, n);
    }
    /* The negatives of batch g, drawn again by the data thread's own head: the same ids
     * as the trainer's draw (the seed is batch g's), so their rows are in the fast tier
     * when its lookup asks (the trainer's draw itself stays where the head keeps its state
     * for the loss). */
    if (st == GRM_OK && pf->have_head) {
        const grm__dataset *ds = t->ds;
        grm_catalog cat = { ds->ncatalog, ds->catalog_ids, ds->catalog_counts };
        int64_t nneg = 0;
        st = grm__head_negatives(&pf->head, pf->neg, &nneg, t->R, &cat,
                                 grm__negatives_seed(t->p, bt->g));
        if (st == GRM_OK)
            st = grm__sparse_plan_encode(t->p->plan, t->item_table, pf->negk, pf->neg, nneg);
        grm__batch_tab *w = &bt->tab[t->item_phys];
        const int64_t *keys;
        int64_t n;
        if (st == GRM_OK &&
            (st = pf_owned(t, pf->negk, nneg, &w->pfkeys, &w->pfcap, &keys, &n)) == GRM_OK)
            st = pf_prefetch_keys(t, t->item_phys, keys, n);
    }
    return st;
}

/* Whether any table of the store has a slower tier to prefetch from (grm_emb_ops.prefetch
 * of 0 ids answers GRM_OK; GRM_ENOTSUP when all its rows are in memory). */
static int pf_any_tiered(const grm__trainer *t)
{
    const grm_emb_ops *e = t->sp.eops;
    if (!e || !GRM_HAS_OP(grm_emb_ops, e, prefetch)) return 0;
    for (int32_t T = 0; T < t->p->nphys; T++)
        if (e->prefetch(t->p->emb.inst, T, NULL, 0) == GRM_OK) return 1;
    return 0;
}

/* After the prefetch of batch hi: every table brought back under its budget by its store
 * (grm_emb_ops.trim, ABI 1.12), so the trainer's lookups and updates find room instead of
 * evicting on the trainer's time. The batches in flight are those after the last step
 * applied (d): their prefetches stamped their rows with d' + 1 or more, d' the steps
 * applied then (pf->from), so the trim keeps every row stamped since the oldest of them
 * was prefetched, and the rows of batch hi + 1 on are stamped d + 1 or more when their
 * prefetch comes (seed 003 §2.2: prefetching i+1 never evicts i). The keys the other ranks
 * sent ahead are kept the same way (pf->ahead_from). Runs on the data thread, the pf lock
 * not held. */
static grm_status pf_trim(grm__trainer *t, int64_t hi)
{
    grm__prefetcher *pf = &t->pf;
    if (!pf->trim) return GRM_OK;
    const int64_t d = atomic_load(&pf->done), g0 = d * t->p->set.accumulate + 1;
    int64_t keep = d + 1;
    if (g0 <= hi && pf->from[g0 % pf->nfrom] < keep) keep = pf->from[g0 % pf->nfrom];
    if (pf->ahead_from < keep) keep = pf->ahead_from;
    grm_status st = GRM_OK;
    for (int32_t T = 0; T < t->p->nphys && st == GRM_OK; T++)
        st = t->sp.eops->trim(t->p->emb.inst, T, keep);
    if (st != GRM_OK)
        grm_error_prefix("[embedding] %s: trim: ", t->p->emb.plugin->info->name);
    return st;
}

/* Whether the data thread trims (pf->trim): [train] prefetch_evict, a store with a trim op
 * and a table with a slower tier; from's ring covers the batches that can be in flight
 * (the ring's, a step's, and with sparse_async one step more whose update is pending). */
static grm_status pf_trim_init(grm__trainer *t)
{
    grm__prefetcher *pf = &t->pf;
    const grm_emb_ops *e = t->sp.eops;
    pf->trim = 0;
    pf->ahead_from = INT64_MAX;
    if (!t->p->set.prefetch_evict || t->opts->batches_in_memory || !e
        || !GRM_HAS_OP(grm_emb_ops, e, trim) || !pf_any_tiered(t))
        return GRM_OK;
    const int64_t n = (int64_t)pf->nslots + 2 * t->p->set.accumulate + 1;
    if (n > INT32_MAX || !(pf->from = calloc((size_t)n, sizeof *pf->from)))
        return grm_errorf(GRM_ENOMEM, "data thread: out of memory");
    pf->nfrom = (int32_t)n;
    pf->trim = 1;
    return GRM_OK;
}

/* The data thread's batch of every rank's samples (see grm__prefetcher): several ranks that
 * share one order (not sharded, not streamed) over a store with a slower tier, on a world
 * of at most [train] prefetch_ranks. Without it each rank prefetches the keys it owns of
 * its own samples, and those of the other ranks' that they send ahead (pf->ahead), or else
 * its lookup reads them, on the trainer's time. The cost is the other ranks' assembly on
 * this rank's data thread, which grows with the world; the keys sent ahead cost an
 * exchange a lookup instead. Not fatal: without it those rows are fetched as before. */
static void pf_global_init(grm__trainer *t)
{
    grm__prefetcher *pf = &t->pf;
    if (pf->global || !t->sp.dist || t->nranks < 2 || t->sharded || t->src.stream
        || !t->sp.eops || !GRM_HAS_OP(grm_emb_ops, t->sp.eops, prefetch))
        return;
    if (t->nranks > t->p->set.prefetch_ranks) {
        if (!t->opts->quiet && t->rank == 0 && t->p->set.prefetch_ranks > 0)
            grm__log(GRM_LOG_INFO, "grmhost", "data thread: %d ranks are more than [train] "
                     "prefetch_ranks = %lld: each rank prefetches the keys it owns of its own "
                     "samples%s", (int)t->nranks, (long long)t->p->set.prefetch_ranks,
                     t->p->set.prefetch_ahead ? " and of those the others send ahead" : " only");
        return;
    }
    if (!pf_any_tiered(t)) return;
    if (!(pf->global = malloc(sizeof *pf->global))
        || grm__batch_init(t, pf->global) != GRM_OK) {
        grm__log(GRM_LOG_DEBUG, "grmhost", "data thread: no batch of every rank's samples "
                 "(%s): the rows the other ranks ask for are fetched by the lookups",
                 pf->global ? grm_last_error() : "out of memory");
        free(pf->global);       /* a failed grm__batch_init freed what it held */
        pf->global = NULL;
        return;
    }
    if (!t->opts->quiet && t->rank == 0)
        grm__log(GRM_LOG_INFO, "grmhost", "data thread: each rank prefetches the keys it "
                 "owns of every rank's samples of the next batches (%d ranks, one order)",
                 (int)t->nranks);
}

/* The data thread's head (see grm__prefetcher): for a store that prefetches, in a run that
 * draws negatives from a fixed catalog. Not fatal: without it the lookups fetch them. */
static void pf_head_init(grm__trainer *t)
{
    grm__prefetcher *pf = &t->pf;
    if (pf->have_head || t->ranking || t->R <= 0 || t->src.stream || !t->sp.eops ||
        !GRM_HAS_OP(grm_emb_ops, t->sp.eops, prefetch) || !t->dn.head.stage)
        return;
    /* the item table has no slower tier (grm_emb_ops.prefetch with n == 0): nothing to do */
    if (t->sp.eops->prefetch(t->p->emb.inst, t->item_phys, NULL, 0) == GRM_ENOTSUP) return;
    pf->neg = malloc((size_t)t->R * sizeof *pf->neg);
    pf->negk = malloc((size_t)t->R * sizeof *pf->negk);
    if (pf->neg && pf->negk &&
        grm__head_create(&pf->head, t->dn.head.stage, t->dn.head_in,
                         (uint64_t)t->p->set.seed) == GRM_OK) {
        pf->have_head = 1;
        return;
    }
    grm__log(GRM_LOG_DEBUG, "grmhost", "data thread: no head of its own (%s): the negatives' "
             "rows are fetched by the lookups", grm_last_error());
    free(pf->neg);
    free(pf->negk);
    pf->neg = pf->negk = NULL;
}

/* ---- next-batch keys from the other ranks (grm__prefetcher.ahead) ---- */

int grm__prefetch_ahead_wanted(const grm__trainer *t)
{
    const grm__pipeline *p = t->p;
    if (t->nranks < 2 || p->set.prefetch <= 0 || !p->set.prefetch_ahead) return 0;
    // pf_global_init's case (every rank's batches assembled here) needs none of it
    if (!t->sharded && !t->src.stream && t->nranks <= p->set.prefetch_ranks) return 0;
    return pf_any_tiered(t);
}

static grm_status pf_ahead_init(grm__trainer *t)
{
    grm__prefetcher *pf = &t->pf;
    const size_t n = (size_t)t->p->nphys;
    pf->ahead = 0;
    if (!t->sp.dist || !grm__prefetch_ahead_wanted(t)) return GRM_OK;
    pf->aq = calloc(n, sizeof *pf->aq);
    pf->aw = calloc(n, sizeof *pf->aw);
    pf->aqn = calloc(n, sizeof *pf->aqn);
    pf->aqcap = calloc(n, sizeof *pf->aqcap);
    pf->awcap = calloc(n, sizeof *pf->awcap);
    if (!pf->aq || !pf->aw || !pf->aqn || !pf->aqcap || !pf->awcap)
        return grm_errorf(GRM_ENOMEM, "data thread: out of memory");
    pf->ahead = 1;
    if (!t->opts->quiet && t->rank == 0)
        grm__log(GRM_LOG_INFO, "grmhost", "data thread: each rank sends the keys of its next "
                 "batch to their owners with its lookups, and prefetches those the other "
                 "ranks send it (%d ranks%s)", (int)t->nranks,
                 t->src.stream ? ", input streamed" : t->sharded ? ", input sharded" : "");
    return GRM_OK;
}

static int pf_ahead_queued(const grm__prefetcher *pf)
{
    for (int32_t T = 0; T < pf->nphys_ahead; T++)
        if (pf->aqn[T] > 0) return 1;
    return 0;
}

/* The first failure of the data thread's work for the other ranks, kept for the trainer's
 * next lookup to report (grm__prefetch_ahead_got). Called with pf->lock held. */
static void pf_ahead_fail(grm__prefetcher *pf, grm_status st)
{
    if (st == GRM_OK || pf->aerr != GRM_OK) return;
    pf->aerr = st;
    snprintf(pf->aerr_msg, sizeof pf->aerr_msg, "%s", grm_last_error());
}

/* The queued keys, prefetched. Called and returns with pf->lock held; lets it go meanwhile. */
static void pf_ahead_run(grm__trainer *t)
{
    grm__prefetcher *pf = &t->pf;
    pf->abusy = 1;
    pf->ahead_from = atomic_load(&pf->done) + 1;   // what these keys' rows are stamped with
    for (int32_t T = 0; T < pf->nphys_ahead; T++) {
        const int64_t n = pf->aqn[T];
        if (n == 0) continue;
        int64_t *keys = pf->aq[T], cap = pf->aqcap[T];   // take the queue, leave ours
        pf->aq[T] = pf->aw[T];
        pf->aqcap[T] = pf->awcap[T];
        pf->aqn[T] = 0;
        pf->aw[T] = keys;
        pf->awcap[T] = cap;
        pthread_mutex_unlock(&pf->lock);
        const grm_status st = pf_prefetch_keys(t, T, keys, n);
        pthread_mutex_lock(&pf->lock);
        pf->ahead_keys += n;
        pf_ahead_fail(pf, st);
    }
    pf->abusy = 0;
    pthread_cond_broadcast(&pf->cond);   // grm__prefetch_take waits for this
    if (!pf->trim || pf->aerr != GRM_OK) return;
    const int64_t hi = pf->ready;
    pthread_mutex_unlock(&pf->lock);     // the trainer need not wait for the trim
    const grm_status st = pf_trim(t, hi);
    pthread_mutex_lock(&pf->lock);
    pf_ahead_fail(pf, st);
}

grm_status grm__prefetch_ahead_got(grm__trainer *t, int32_t T, const int64_t *keys, int64_t n)
{
    grm__prefetcher *pf = &t->pf;
    grm_status st = GRM_OK;
    if (!pf->ahead || !pf->running) return GRM_OK;
    pthread_mutex_lock(&pf->lock);
    if (pf->aerr != GRM_OK) {
        st = grm_errorf(pf->aerr, "data thread: prefetching the rows other ranks asked for "
                        "ahead: %s", pf->aerr_msg);
    } else if (n > 0) {
        if (pf->aqn[T] + n > pf->aqcap[T]) {
            const int64_t cap = 2 * (pf->aqn[T] + n);
            int64_t *k = realloc(pf->aq[T], (size_t)cap * sizeof *k);
            if (k == NULL) {   // not fatal: the lookups fetch these rows
                pthread_mutex_unlock(&pf->lock);
                return GRM_OK;
            }
            pf->aq[T] = k;
            pf->aqcap[T] = cap;
        }
        memcpy(pf->aq[T] + pf->aqn[T], keys, (size_t)n * sizeof *keys);
        pf->aqn[T] += n;
        pthread_cond_broadcast(&pf->cond);
    }
    pthread_mutex_unlock(&pf->lock);
    return st;
}

const grm__batch *grm__prefetch_peek(grm__trainer *t, int64_t g)
{
    grm__prefetcher *pf = &t->pf;
    if (!pf->running || g > pf->last) return NULL;
    double t0 = now_s();
    pthread_mutex_lock(&pf->lock);
    // The data thread may assemble g without the trainer's release of g - 1, which it holds
    // (the ring has 2 slots or more), and g's slot is not reused before g is released.
    const int may = g > pf->released && g <= pf->released + pf->nslots;
    while (may && pf->ready < g && pf->next <= pf->last && !pf->stop)
        pthread_cond_wait(&pf->cond, &pf->lock);
    const int ok = may && pf->ready >= g;
    pthread_mutex_unlock(&pf->lock);
    t->rep.t_wait += now_s() - t0;
    const grm__batch *bt = ok ? &pf->ring[(g - 1) % pf->nslots] : NULL;
    return bt && bt->st == GRM_OK ? bt : NULL;
}

static void *pf_main(void *arg)
{
    grm__trainer *t = arg;
    grm__prefetcher *pf = &t->pf;
    grm__pool_inline_thread();   /* the pool belongs to the trainer thread */
    /* Lowest priority (SCHED_IDLE): the data thread runs on cores the compute leaves idle
     * (the trainer's serial parts, its waits) instead of preempting a pool worker, which
     * stalls the whole fork-join; starved, it still runs as soon as the trainer waits for
     * it. With every core in the pool (the default) that keeps prefetch from ever costing
     * compute time, at the price of less of the data work hidden; with a spare core it
     * runs there. bench/bench_pipeline.sh measures both (nice 19 still cost 4% here). A
     * system that refuses it keeps the default priority. */
    struct sched_param sp = { 0 };
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    pthread_mutex_lock(&pf->lock);
    for (;;) {
        // with pf->ahead the thread stays after the last batch: the other ranks' keys of
        // their last batches still come
        while (!pf->stop && !pf_ahead_queued(pf)
               && (pf->next <= pf->last ? pf->next > pf->released + pf->nslots : pf->ahead))
            pthread_cond_wait(&pf->cond, &pf->lock);
        if (pf->stop) break;
        if (pf_ahead_queued(pf)) {   // first: their lookup is the next step's
            pf_ahead_run(t);
            continue;
        }
        if (pf->next > pf->last) break;
        int64_t g = pf->next;
        grm__batch *bt = &pf->ring[(g - 1) % pf->nslots];
        pthread_mutex_unlock(&pf->lock);
        double t0 = now_s();
        bt->st = grm__batch_assemble_train(t, bt, g);
        if (pf->trim) pf->from[g % pf->nfrom] = atomic_load(&pf->done) + 1;
        if (bt->st == GRM_OK) bt->st = pf_prefetch_rows(t, bt);
        if (bt->st == GRM_OK) bt->st = pf_trim(t, g);
        if (bt->st != GRM_OK) snprintf(bt->err, sizeof bt->err, "%s", grm_last_error());
        double dt = now_s() - t0;
        pthread_mutex_lock(&pf->lock);
        pf->busy_s += dt;
        pf->ready = g;
        pf->next = bt->st == GRM_OK ? g + 1 : pf->last + 1;   /* a failure ends the thread */
        pthread_cond_broadcast(&pf->cond);
    }
    pthread_mutex_unlock(&pf->lock);
    return NULL;
}

/* Start assembling batches first .. last ahead (prefetch > 0; otherwise nothing to do). */
grm_status grm__prefetch_start(grm__trainer *t, int64_t first, int64_t last)
{
    grm__prefetcher *pf = &t->pf;
    grm_status st;
    const int all = t->opts->batches_in_memory;
    if ((t->p->set.prefetch <= 0 && !all) || first > last) return GRM_OK;
    if (all && last - first + 1 > INT32_MAX - 1)
        return grm_errorf(GRM_EINVAL, "--batches-in-memory: %lld batches are too many; "
                          "bound the run with --max-steps", (long long)(last - first + 1));
    if (!pf->ring) {
        /* --batches-in-memory: a slot for every batch of the run */
        pf->nslots = all ? (int32_t)(last - first + 1) : (int32_t)t->p->set.prefetch + 1;
        pf->ring = calloc((size_t)pf->nslots, sizeof *pf->ring);
        if (!pf->ring) return grm_errorf(GRM_ENOMEM, "out of memory");
        for (int32_t k = 0; k < pf->nslots; k++)
            if ((st = grm__batch_init(t, &pf->ring[k])) != GRM_OK) return st;
        pthread_mutex_init(&pf->lock, NULL);
        pthread_cond_init(&pf->cond, NULL);
        pf_head_init(t);
        pf_global_init(t);
        if ((st = pf_ahead_init(t)) != GRM_OK) return st;
        pf->nphys_ahead = pf->ahead ? t->p->nphys : 0;
        if ((st = pf_trim_init(t)) != GRM_OK) return st;
    }
    atomic_store(&pf->done, (first - 1) / t->p->set.accumulate);
    pf->stop = 0;
    pf->next = first;
    pf->last = last;
    pf->ready = pf->released = first - 1;
    int rc = pthread_create(&pf->thread, NULL, pf_main, t);
    if (rc != 0)
        return grm_errorf(GRM_EINTERNAL, "data thread: pthread_create: %s", strerror(rc));
    pf->running = 1;
    if (all) {   /* the benchmark peer: every batch assembled before the first step */
        double t0 = now_s();
        pthread_mutex_lock(&pf->lock);
        while (pf->ready < last && pf->next <= pf->last) pthread_cond_wait(&pf->cond, &pf->lock);
        pthread_mutex_unlock(&pf->lock);
        if (!t->opts->quiet)
            grm__log(GRM_LOG_INFO, "grmhost", "--batches-in-memory: %lld batches assembled "
                     "before step 1 in %.2fs", (long long)(last - first + 1), now_s() - t0);
        t->rep.t_plan = 0;   /* not part of the loop: the data thread is done */
        pf->busy_s = 0;
    }
    return GRM_OK;
}

void grm__prefetch_stop(grm__trainer *t)
{
    grm__prefetcher *pf = &t->pf;
    if (!pf->running) return;
    pthread_mutex_lock(&pf->lock);
    pf->stop = 1;
    pthread_cond_broadcast(&pf->cond);
    pthread_mutex_unlock(&pf->lock);
    pthread_join(pf->thread, NULL);
    pf->running = 0;
    t->rep.t_batch += pf->busy_s;   /* assembly time, spent on the data thread */
    pf->busy_s = 0;
    if (pf->ahead && !t->opts->quiet)
        grm__log(GRM_LOG_DEBUG, "grmhost", "data thread: rank %d prefetched %lld keys the "
                 "other ranks sent ahead", (int)t->rank, (long long)pf->ahead_keys);
}

/* Batch g, assembled: from the ring (waiting for the data thread if it is behind), or built
 * here into the evaluation batch when nothing prefetches. */
grm_status grm__prefetch_take(grm__trainer *t, int64_t g, grm__batch **out)
{
    grm__prefetcher *pf = &t->pf;
    if (!pf->running) {
        double t0 = now_s();
        grm_status st = grm__batch_assemble_train(t, &t->eb, g);
        t->rep.t_batch += now_s() - t0;
        *out = &t->eb;
        return st;
    }
    if (g != pf->released + 1)
        return grm_errorf(GRM_EINTERNAL, "data thread: batch %lld asked for out of order "
                          "(next is %lld)", (long long)g, (long long)pf->released + 1);
    double t0 = now_s();
    pthread_mutex_lock(&pf->lock);
    // with pf->ahead, also until the keys the other ranks sent at the last lookups are
    // prefetched: their lookups of them come with this batch's
    while ((pf->ready < g || (pf->ahead && (pf->abusy || pf_ahead_queued(pf))))
           && pf->running && !pf->stop)
        pthread_cond_wait(&pf->cond, &pf->lock);
    pthread_mutex_unlock(&pf->lock);
    t->rep.t_wait += now_s() - t0;
    grm__batch *bt = &pf->ring[(g - 1) % pf->nslots];
    if (bt->st != GRM_OK) return grm_errorf(bt->st, "%s", bt->err);
    *out = bt;
    return GRM_OK;
}

/* The trainer is done with batch g: its slot may take batch g + nslots. */
void grm__prefetch_release(grm__trainer *t, int64_t g)
{
    grm__prefetcher *pf = &t->pf;
    if (!pf->running) return;
    pthread_mutex_lock(&pf->lock);
    pf->released = g;
    pthread_cond_broadcast(&pf->cond);
    pthread_mutex_unlock(&pf->lock);
}

void grm__prefetch_applied(grm__trainer *t, int64_t step)
{
    atomic_store(&t->pf.done, step);
}

/* The ring's batches freed (the thread stopped first). */
void grm__prefetch_fini(grm__trainer *t)
{
    grm__prefetch_stop(t);
    for (int32_t k = 0; t->pf.ring && k < t->pf.nslots; k++) grm__batch_fini(t, &t->pf.ring[k]);
    free(t->pf.ring);
    t->pf.ring = NULL;
    if (t->pf.have_head) grm__head_destroy(&t->pf.head);
    t->pf.have_head = 0;
    free(t->pf.neg);
    free(t->pf.negk);
    t->pf.neg = t->pf.negk = NULL;
    if (t->pf.global) grm__batch_fini(t, t->pf.global);
    free(t->pf.global);
    t->pf.global = NULL;
    for (int32_t T = 0; T < t->pf.nphys_ahead; T++) {
        free(t->pf.aq[T]);
        free(t->pf.aw[T]);
    }
    free(t->pf.aq);
    free(t->pf.aw);
    free(t->pf.aqn);
    free(t->pf.aqcap);
    free(t->pf.awcap);
    t->pf.aq = t->pf.aw = NULL;
    t->pf.aqn = t->pf.aqcap = t->pf.awcap = NULL;
    t->pf.ahead = 0;
    t->pf.nphys_ahead = 0;
    free(t->pf.from);
    t->pf.from = NULL;
    t->pf.trim = 0;
}

/* plugins/emb-dynamic/ops.c - batched lookup and update of emb-dynamic (MTGRBoost §4.1
 * "Table Lookup", eq. 7: id -> hash -> probe -> row reference -> record in its chunk).
 * A batch reserves room and holds the table's read lock; its ids run on the host's pool
 * (impl = cpu) or in a plain loop on the calling thread (impl = ref, the reference). Keys
 * are claimed with a CAS (table.c); a row is written only under its striped sequence lock
 * and read under none (emb_dynamic.h), so batches may also run concurrently with each
 * other. Eviction runs after the batch, under the write lock (evict.c). */
#include <string.h>

#include "emb_dynamic.h"

/* Ids per parallel_for range; a batch this small runs on the calling thread. */
#define ED_GRAIN 512

typedef struct ed_job {
    const ed_store *s;
    ed_table *t;
    float *out;                 /* lookup: [n, D] */
    const int64_t *ids;         /* [n] */
    const float *grads;         /* update: [n, D] */
    int insert;                 /* lookup: GRM_EMB_INSERT given */
    int64_t now;                /* step stamped into the metadata */
    _Atomic int64_t misses;
} ed_job;

/* Claim (or find) the key of id and, when this thread claimed it, create its record in
 * pool `pool` (tiered: read back from the backing file when the row is there). Returns the
 * slot, NULL when absent and insert is 0; *st is not GRM_OK when the backing read failed
 * (the record is then initialized, and the batch fails with *st). */
static ed_slot *ed_acquire(const ed_job *j, int64_t id, uint64_t h, int insert, int pool,
                           int *inserted, grm_status *st)
{
    ed_table *t = j->t;
    ed_slot *slot;
    *inserted = 0;
    *st = GRM_OK;
    if (!insert) {
        slot = ed_keys_find(&t->keys, id, h);
        if (slot != NULL) ed_wait_ref(slot);
        return slot;
    }
    slot = ed_keys_find_or_insert(&t->keys, id, h, inserted);
    if (slot == NULL) return NULL;
    if (*inserted) {
        const int64_t ref = (ed_pool_alloc(&t->pools[pool]) << 1) | pool;
        if (j->s->tiered) *st = ed_tier_fetch(j->s, t, ref, id, j->now);
        else ed_record_fill(j->s, t, ref, id, j->now);
        atomic_store_explicit(&slot->ref, ref, memory_order_release);
    } else {
        ed_wait_ref(slot);
    }
    return slot;
}

/* Move a cold row to the FP32 pool (MTGRBoost §5.2: hot rows stay FP32). Under the row's
 * stripe lock; a lock-free reader that saw the old reference sees the stripe's sequence
 * move and reads the slot again. */
static int64_t ed_promote(const ed_store *s, ed_table *t, ed_slot *slot, int64_t ref)
{
    const int64_t hot = ed_pool_alloc(&t->pools[0]) << 1;
    char *src = ed_record(t, ref), *dst = ed_record(t, hot);
    *ed_rec_meta(dst) = *ed_rec_meta(src);
    s->from_f16(ed_rec_row(dst), ed_rec_row(src), t->dim);
    if (s->S > 0)
        memcpy(ed_rec_state(&t->pools[0], dst), ed_rec_state(&t->pools[1], src),
               (size_t)s->S * (size_t)t->dim * sizeof(float));
    atomic_store_explicit(&slot->ref, hot, memory_order_release);
    ed_pool_release(&t->pools[1], ref >> 1);
    return hot;
}

/* Ids resolved together by the cpu path (group prefetching, Chen, Ailamaki, Gibbons and
 * Mowry, "Improving Hash Join Performance through Prefetching", ICDE 2004, §4): the slot
 * lines of a whole group are requested before the first one is probed, and the records of
 * the group before the first one is read, so up to ED_GROUP cache misses overlap instead of
 * following one another. The per-id work is the reference's, in the same order. */
#define ED_GROUP 8

/* The per-id work of a lookup once its slot is known (NULL: absent, not inserted). */
static grm_status ed_lookup_one(ed_job *j, int64_t i, uint64_t h, ed_slot *slot, int inserted,
                                int64_t *misses)
{
    const ed_store *s = j->s;
    ed_table *t = j->t;
    const int64_t id = j->ids[i];
    float *out = j->out + (size_t)i * (size_t)t->dim;   /* [D] */
    if (slot == NULL) {
        if (j->insert)
            return s->host->errorf(GRM_EINTERNAL, "emb-dynamic: table '%s': key structure "
                                   "full inserting id %lld", t->name, (long long)id);
        int found = 0;
        if (s->tiered) {
            const grm_status st = ed_tier_read_row(s, t, id, out, &found);
            if (st != GRM_OK) return st;
        }
        if (!found) ed_row_initial(s, t, out, id);
        (*misses)++;
        return GRM_OK;
    }
    *misses += inserted;
    if (!j->insert) {   // a plain lookup writes nothing: no lock (emb_dynamic.h, seqlocks)
        ed_row_read_shared(s, t, h, slot, out);
        return GRM_OK;
    }
    // A training access counts for LFU, LRU, TTL and promotion: under the row's lock.
    ed_stripe_lock(t, h);
    int64_t ref = atomic_load_explicit(&slot->ref, memory_order_acquire);
    ed_meta *m = ed_rec_meta(ed_record(t, ref));
    m->count++;
    m->flags |= ED_FLAG_DIRTY;
    if (m->last < j->now) m->last = j->now;
    if ((ref & 1) && m->count >= s->cfg.hot_threshold) ref = ed_promote(s, t, slot, ref);
    ed_row_read(s, t, ref, out);
    ed_stripe_unlock(t, h);
    return GRM_OK;
}

/* A row inserted by a lookup is accessed once at once: it starts hot when that access
 * already reaches the threshold. */
static int ed_lookup_pool(const ed_store *s)
{
    return s->cfg.fp16_cold && s->cfg.hot_threshold > 1;
}

/* impl = ref: one id after the other. */
static grm_status ed_lookup_range(void *ctx, int64_t begin, int64_t end)
{
    ed_job *j = ctx;
    const int pool = ed_lookup_pool(j->s);
    int64_t misses = 0;
    grm_status st = GRM_OK;

    for (int64_t i = begin; i < end && st == GRM_OK; i++) {
        const uint64_t h = ed_hash(j->ids[i]);
        int inserted;
        ed_slot *slot = ed_acquire(j, j->ids[i], h, j->insert, pool, &inserted, &st);
        if (st == GRM_OK) st = ed_lookup_one(j, i, h, slot, inserted, &misses);
    }
    atomic_fetch_add_explicit(&j->misses, misses, memory_order_relaxed);
    return st;
}

/* A plain lookup (no insert, no access counted) reads only an id's slot and row, so the
 * cpu path runs it as a software pipeline of three stages instead of groups (Chen et al.,
 * ICDE 2004, §5, software-pipelined prefetching): id i + 2A has its hash computed and its
 * slot line requested, id i + A is probed and its record's lines requested, and id i's row
 * is copied. About 2A misses are in flight at every moment rather than in bursts of a
 * group. Training lookups and updates keep the groups: their per-id work (the row lock,
 * the metadata, the optimizer step) is long enough to hide a group's misses. */
#define ED_AHEAD 8
/* The ring of per-id state: an id's entry lives from stage 1 to stage 3, 2A iterations, so
 * the ring must be longer than 2A or stage 1 of id i would overwrite the entry stage 3 of
 * id i - 2A still reads in the same iteration (a power of two, for the modulo). */
#define ED_RING (4 * ED_AHEAD)

/* impl = cpu, a plain lookup: the pipeline above. An absent id (a new row or one in the
 * backing file) takes ed_lookup_one's path. */
static grm_status ed_find_pipeline(ed_job *j, int64_t begin, int64_t end)
{
    const ed_store *s = j->s;
    ed_table *t = j->t;
    const ed_keys *k = &t->keys;
    const size_t D = (size_t)t->dim;
    uint64_t h[ED_RING];
    ed_slot *slot[ED_RING];
    int64_t misses = 0;
    grm_status st = GRM_OK;

    for (int64_t i = begin; i < end + 2 * ED_AHEAD && st == GRM_OK; i++) {
        if (i < end) {
            const int r = (int)(i % ED_RING);
            h[r] = ed_hash(j->ids[i]);
            ed_keys_prefetch(k, h[r]);
        }
        const int64_t p = i - ED_AHEAD;
        if (p >= begin && p < end) {
            const int r = (int)(p % ED_RING);
            slot[r] = ed_keys_find(k, j->ids[p], h[r]);
            if (slot[r] != NULL) ed_record_prefetch(t, ed_wait_ref(slot[r]));
        }
        const int64_t w = i - 2 * ED_AHEAD;
        if (w >= begin) {
            const int r = (int)(w % ED_RING);
            if (slot[r] != NULL) ed_row_read_shared(s, t, h[r], slot[r], j->out + (size_t)w * D);
            else st = ed_lookup_one(j, w, h[r], NULL, 0, &misses);
        }
    }
    atomic_fetch_add_explicit(&j->misses, misses, memory_order_relaxed);
    return st;
}

/* impl = cpu: a plain lookup runs the pipeline above; a training lookup, groups of
 * ED_GROUP ids, their memory requested ahead. */
static grm_status ed_lookup_range_cpu(void *ctx, int64_t begin, int64_t end)
{
    ed_job *j = ctx;
    if (!j->insert) return ed_find_pipeline(j, begin, end);
    ed_table *t = j->t;
    const int pool = ed_lookup_pool(j->s);
    int64_t misses = 0;
    grm_status st = GRM_OK;

    for (int64_t g = begin; g < end && st == GRM_OK; g += ED_GROUP) {
        const int m = end - g < ED_GROUP ? (int)(end - g) : ED_GROUP;
        uint64_t h[ED_GROUP];
        ed_slot *slot[ED_GROUP];
        int inserted[ED_GROUP];
        for (int k = 0; k < m; k++) {
            h[k] = ed_hash(j->ids[g + k]);
            ed_keys_prefetch(&t->keys, h[k]);
        }
        for (int k = 0; k < m && st == GRM_OK; k++) {
            slot[k] = ed_acquire(j, j->ids[g + k], h[k], j->insert, pool, &inserted[k], &st);
            if (slot[k] != NULL)
                ed_record_prefetch(t, atomic_load_explicit(&slot[k]->ref,
                                                           memory_order_acquire));
        }
        for (int k = 0; k < m && st == GRM_OK; k++)
            st = ed_lookup_one(j, g + k, h[k], slot[k], inserted[k], &misses);
    }
    atomic_fetch_add_explicit(&j->misses, misses, memory_order_relaxed);
    return st;
}

/* The per-id work of an update once its slot is known. */
static grm_status ed_update_one(ed_job *j, int64_t i, uint64_t h, ed_slot *slot)
{
    const ed_store *s = j->s;
    ed_table *t = j->t;
    const float *grad = j->grads + (size_t)i * (size_t)t->dim;     /* [D] */
    if (slot == NULL)
        return s->host->errorf(GRM_EINTERNAL, "emb-dynamic: table '%s': key structure full "
                               "inserting id %lld", t->name, (long long)j->ids[i]);
    ed_stripe_lock(t, h);
    const int64_t ref = atomic_load_explicit(&slot->ref, memory_order_acquire);
    const ed_pool *p = &t->pools[ref & 1];
    char *rec = ed_record(t, ref);
    ed_meta *m = ed_rec_meta(rec);
    float *state = s->S > 0 ? ed_rec_state(p, rec) : NULL;  /* [S*D] */
    const int64_t step = m->steps + 1;
    grm_status st;
    if (p->half) {
        // Cold rows are updated in FP32 and stored back rounded (MTGRBoost §5.2).
        float tmp[ED_MAX_DIM];
        s->from_f16(tmp, ed_rec_row(rec), t->dim);
        st = s->opt.ops->row_step(s->opt.inst, tmp, state, grad, t->dim, step);
        if (st == GRM_OK) s->to_f16(ed_rec_row(rec), tmp, t->dim);
    } else {
        st = s->opt.ops->row_step(s->opt.inst, ed_rec_row(rec), state, grad, t->dim, step);
    }
    if (st == GRM_OK) {
        m->steps = step;
        m->flags |= ED_FLAG_DIRTY;
        if (m->last < j->now) m->last = j->now;
    }
    ed_stripe_unlock(t, h);
    return st;
}

/* impl = ref: one id after the other. An id updated without a lookup (or evicted since) is
 * created first; it has not been accessed, so it starts cold when FP16 storage is on. */
static grm_status ed_update_range(void *ctx, int64_t begin, int64_t end)
{
    ed_job *j = ctx;
    grm_status st = GRM_OK;
    for (int64_t i = begin; i < end && st == GRM_OK; i++) {
        const uint64_t h = ed_hash(j->ids[i]);
        int inserted;
        ed_slot *slot = ed_acquire(j, j->ids[i], h, 1, j->s->cfg.fp16_cold, &inserted, &st);
        if (st == GRM_OK) st = ed_update_one(j, i, h, slot);
    }
    return st;
}

/* impl = cpu: groups of ED_GROUP ids, as ed_lookup_range_cpu. */
static grm_status ed_update_range_cpu(void *ctx, int64_t begin, int64_t end)
{
    ed_job *j = ctx;
    ed_table *t = j->t;
    grm_status st = GRM_OK;
    for (int64_t g = begin; g < end && st == GRM_OK; g += ED_GROUP) {
        const int m = end - g < ED_GROUP ? (int)(end - g) : ED_GROUP;
        uint64_t h[ED_GROUP];
        ed_slot *slot[ED_GROUP];
        for (int k = 0; k < m; k++) {
            h[k] = ed_hash(j->ids[g + k]);
            ed_keys_prefetch(&t->keys, h[k]);
        }
        for (int k = 0; k < m && st == GRM_OK; k++) {
            int inserted;
            slot[k] = ed_acquire(j, j->ids[g + k], h[k], 1, j->s->cfg.fp16_cold, &inserted,
                                 &st);
            if (slot[k] != NULL)
                ed_record_prefetch(t, atomic_load_explicit(&slot[k]->ref,
                                                           memory_order_acquire));
        }
        for (int k = 0; k < m && st == GRM_OK; k++) st = ed_update_one(j, g + k, h[k], slot[k]);
    }
    return st;
}

/* ref: the plain loop on the calling thread; cpu: the grouped loop on the host's pool. */
static grm_status ed_run(const ed_store *s, int64_t n, grm_range_fn ref, grm_range_fn cpu,
                         ed_job *j)
{
    if (s->cfg.impl == ED_IMPL_REF) return ref(j, 0, n);
    if (n <= ED_GRAIN) return cpu(j, 0, n);
    return s->host->parallel_for(n, ED_GRAIN, cpu, j);
}

static void ed_clock_advance(ed_table *t, int64_t step)
{
    int64_t c = atomic_load(&t->clock);
    while (c < step && !atomic_compare_exchange_weak(&t->clock, &c, step)) {}
}

grm_status ed_lookup_batch(const ed_store *s, ed_table *t, float *out /* [n, D] */,
                           const int64_t *ids /* [n] */, int64_t n, int insert)
{
    grm_status st;
    ed_job j = { .s = s, .t = t, .out = out, .ids = ids, .insert = insert };
    atomic_init(&j.misses, 0);

    if (insert) {
        if ((st = ed_reserve(s, t, n)) != GRM_OK) return st;
    } else {
        pthread_rwlock_rdlock(&t->lock);
    }
    j.now = atomic_load(&t->clock) + 1;     // the step in progress
    st = ed_run(s, n, ed_lookup_range, ed_lookup_range_cpu, &j);
    atomic_fetch_add(&t->lookups, n);
    atomic_fetch_add(&t->misses, atomic_load(&j.misses));
    if (insert) {
        atomic_fetch_add(&t->version, 1);
        ed_release(t, n);
    } else {
        pthread_rwlock_unlock(&t->lock);
    }
    if (st == GRM_OK && insert && s->tiered && s->cache_bytes < 0 && t->max_rows == 0)
        st = ed_profile_batch(s, t, ids, n);
    if (st != GRM_OK || !insert || t->max_rows <= 0 || atomic_load(&t->keys.live) <= t->max_rows)
        return st;
    pthread_rwlock_wrlock(&t->lock);
    st = ed_evict_budget(s, t, j.now);
    pthread_rwlock_unlock(&t->lock);
    return st;
}

grm_status ed_update_batch(const ed_store *s, ed_table *t, const int64_t *ids /* [n] */,
                           const float *grads /* [n, D] */, int64_t n, int64_t step)
{
    grm_status st;
    ed_job j = { .s = s, .t = t, .ids = ids, .grads = grads, .now = step };
    atomic_init(&j.misses, 0);

    if ((st = ed_reserve(s, t, n)) != GRM_OK) return st;
    st = ed_run(s, n, ed_update_range, ed_update_range_cpu, &j);
    atomic_fetch_add(&t->version, 1);
    ed_release(t, n);
    if (st != GRM_OK) return st;
    // The step is the store's: a table that is only read still ages (LRU, TTL).
    for (int32_t i = 0; i < s->ntables; i++) ed_clock_advance(&s->tables[i], step);

    const int ttl = s->cfg.ttl_steps > 0 && step > t->last_sweep;
    const int budget = t->max_rows > 0 && atomic_load(&t->keys.live) > t->max_rows;
    if (!ttl && !budget) return GRM_OK;
    pthread_rwlock_wrlock(&t->lock);
    if (ttl && step > t->last_sweep) st = ed_evict_ttl(s, t, step);
    if (st == GRM_OK && budget) st = ed_evict_budget(s, t, step);
    pthread_rwlock_unlock(&t->lock);
    return st;
}

/* Bring the rows of ids [n] that live in the backing file into the cache ahead of their
 * lookup (seed 003 §2.2: batch i+1's rows are fetched while batch i computes). Ids in
 * neither tier are left to the lookup (a new row costs no I/O), so prefetching changes no
 * row and adds none: a checkpoint taken meanwhile is the same, and the table's version
 * (which keys the export snapshot) does not move. No access is counted; the rows are
 * stamped with the step in progress, like the rows batch i looked up, so the eviction that
 * follows (and any until batch i+1's own lookup) keeps both: prefetching batch i+1 never
 * evicts batch i. Runs on the calling thread only (the data thread calls it while the
 * trainer's thread uses the host pool). */
grm_status ed_prefetch_batch(const ed_store *s, ed_table *t, const int64_t *ids /* [n] */,
                             int64_t n)
{
    grm_status st;
    ed_job j = { .s = s, .t = t, .ids = ids, .insert = 1 };
    atomic_init(&j.misses, 0);

    if ((st = ed_reserve(s, t, n)) != GRM_OK) return st;
    j.now = atomic_load(&t->clock) + 1;     // the step in progress
    int64_t fetched = 0;
    for (int64_t i = 0; i < n && st == GRM_OK; i++) {
        const uint64_t h = ed_hash(ids[i]);
        int inserted = 0;
        ed_slot *slot = ed_keys_find(&t->keys, ids[i], h);
        if (slot == NULL) {
            if (ed_keys_find(&t->tier.index, ids[i], h) == NULL) continue;
            slot = ed_acquire(&j, ids[i], h, 1, 0, &inserted, &st);
            if (st != GRM_OK || slot == NULL) break;
        } else {
            ed_wait_ref(slot);
        }
        fetched += inserted;
        ed_stripe_lock(t, h);
        ed_meta *m = ed_rec_meta(ed_record(t, atomic_load_explicit(&slot->ref,
                                                                   memory_order_acquire)));
        if (m->last < j.now) m->last = j.now;
        ed_stripe_unlock(t, h);
    }
    atomic_fetch_add(&t->tier.prefetched, fetched);
    ed_release(t, n);
    if (st != GRM_OK || t->max_rows <= 0 || atomic_load(&t->keys.live) <= t->max_rows)
        return st;
    pthread_rwlock_wrlock(&t->lock);
    st = ed_evict_budget(s, t, j.now);
    pthread_rwlock_unlock(&t->lock);
    return st;
}

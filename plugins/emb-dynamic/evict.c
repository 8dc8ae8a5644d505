/* plugins/emb-dynamic/evict.c - eviction of emb-dynamic from the metadata kept beside each
 * row (MTGRBoost §4.1 "Storage Layout": counters and timestamps for LRU and LFU):
 *   TTL     rows whose last access is ttl_steps or more steps old;
 *   budget  when more than max_rows rows live, the surplus in policy order: LRU (oldest
 *           last access, then smallest id) or LFU (fewest accesses, then oldest last access,
 *           then smallest id). Rows touched in the step in progress are never chosen.
 * An evicted key becomes a tombstone and its record goes to its pool's free list; the id
 * comes back freshly initialized. Every function here runs under the table's write lock. */
#include <stdlib.h>

#include "emb_dynamic.h"

static int ed_cand_less(const ed_candidate *a, const ed_candidate *b)
{
    if (a->k1 != b->k1) return a->k1 < b->k1;
    if (a->k2 != b->k2) return a->k2 < b->k2;
    return a->id < b->id;
}

static void ed_cand_swap(ed_candidate *a, ed_candidate *b)
{
    const ed_candidate x = *a;
    *a = *b;
    *b = x;
}

/* Quickselect (Hoare partition, median-of-three pivot): afterwards c[0, k) are the k
 * smallest of c[0, n) in ed_cand_less order. Keys are distinct (ids are), so the chosen
 * set depends on nothing but the candidates. O(n) expected. */
static void ed_select(ed_candidate *c, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    const int64_t want = k - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (ed_cand_less(&c[mid], &c[lo])) ed_cand_swap(&c[mid], &c[lo]);
        if (ed_cand_less(&c[hi], &c[lo])) ed_cand_swap(&c[hi], &c[lo]);
        if (ed_cand_less(&c[hi], &c[mid])) ed_cand_swap(&c[hi], &c[mid]);
        const ed_candidate pivot = c[mid];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (ed_cand_less(&c[i], &pivot)) i++;
            while (ed_cand_less(&pivot, &c[j])) j--;
            if (i <= j) {
                ed_cand_swap(&c[i], &c[j]);
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
}

/* Remove the key of record `ref` and free the record; when tiered, the row goes to the
 * backing file first (write-back when dirty). */
grm_status ed_evict_ref(const ed_store *s, ed_table *t, int64_t ref)
{
    if (s->tiered) {
        const grm_status st = ed_tier_evict(s, t, ref);
        if (st != GRM_OK) return st;
    }
    const int64_t id = ed_rec_meta(ed_record(t, ref))->id;
    ed_slot *slot = ed_keys_find(&t->keys, id, ed_hash(id));
    if (slot != NULL) ed_keys_remove(&t->keys, slot);
    ed_pool_release(&t->pools[ref & 1], ref >> 1);
    atomic_fetch_add_explicit(&t->evictions, 1, memory_order_relaxed);
    return GRM_OK;
}

grm_status ed_evict_ttl(const ed_store *s, ed_table *t, int64_t now)
{
    const int64_t ttl = s->cfg.ttl_steps;
    int64_t evicted = 0;
    for (int i = 0; i < 2; i++) {
        const ed_pool *p = &t->pools[i];
        const int64_t end = atomic_load(&p->next);
        for (int64_t r = 0; r < end; r++) {
            const ed_meta *m = ed_rec_meta(ed_pool_record(p, r));
            if (m->id == ED_KEY_EMPTY || now - m->last < ttl) continue;
            const grm_status st = ed_evict_ref(s, t, (r << 1) | i);
            if (st != GRM_OK) return st;
            evicted++;
        }
    }
    t->last_sweep = now;
    if (evicted > 0)
        s->host->log(GRM_LOG_DEBUG, "emb-dynamic", "table '%s': step %lld: evicted %lld rows "
                     "untouched for %lld steps (%lld evictions so far)", t->name,
                     (long long)now, (long long)evicted, (long long)ttl,
                     (long long)atomic_load(&t->evictions));
    return GRM_OK;
}

/* Candidates ahead whose key slots an eviction requests. */
#define ED_EVICT_AHEAD 8

/* Row `ref` (its metadata m) into the candidates c [*n] when it was not stamped at
 * keep_from or later. */
static void ed_cand_add(const ed_store *s, const ed_meta *m, int64_t ref, int64_t keep_from,
                        ed_candidate *c, int64_t *n)
{
    const int64_t last = __atomic_load_n(&m->last, __ATOMIC_RELAXED);
    const int64_t id = __atomic_load_n(&m->id, __ATOMIC_RELAXED);
    if (id == ED_KEY_EMPTY || last >= keep_from) return;
    ed_candidate *x = &c[(*n)++];
    x->k1 = s->cfg.evict == ED_EVICT_LFU ? __atomic_load_n(&m->count, __ATOMIC_RELAXED) : last;
    x->k2 = s->cfg.evict == ED_EVICT_LFU ? last : 0;
    x->id = id;
    x->ref = ref;
}

/* The rows not stamped at keep_from or later into cand (grown to the live rows), and the
 * k of them to evict first, down to `goal` live rows, selected to its front (*k_out; 0
 * when none may go: rows stamped since keep_from stay, even over budget). Caller holds the
 * write lock: every record in [0, next) of a pool is free or written. Or (ed_trim,
 * `shared`) the read lock: lookups may then take, fill and stamp records meanwhile, so
 * only the records a key slot's published reference points at are read (a lookup
 * publishes it once the record is written; a record taken and not yet written held
 * uninitialised bytes, which valgrind saw read), each field is read once, atomically, and
 * the choice is checked again before each eviction (ed_cand_still). */
static grm_status ed_evict_pick(const ed_store *s, ed_table *t, ed_candidate **cand,
                                int64_t *cap, int64_t keep_from, int64_t goal, int shared,
                                int64_t *k_out)
{
    const int64_t live = atomic_load(&t->keys.live);
    *k_out = 0;
    if (*cap < live) {
        ed_candidate *c = realloc(*cand, (size_t)live * sizeof(*c));
        if (c == NULL)
            return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory for "
                                   "%lld eviction candidates", t->name, (long long)live);
        *cand = c;
        *cap = live;
    }
    int64_t n = 0;
    // shared: the records a published key slot references, a bit each, so the records are
    // still read in their order (sequential reads, and the order of candidates, hence of
    // the evictions and of the backing file's records, is the write lock's)
    uint64_t *pub[2] = { NULL, NULL };
    int64_t end[2];
    for (int i = 0; i < 2; i++) {
        end[i] = atomic_load(&t->pools[i].next);
        if (shared && (pub[i] = calloc((size_t)(end[i] / 64 + 1), sizeof(uint64_t))) == NULL) {
            free(pub[0]);
            return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory for "
                                   "the trim's scan of %lld rows", t->name, (long long)end[i]);
        }
    }
    for (int64_t q = 0; shared && q < t->keys.M; q++) {
        const ed_slot *sl = &t->keys.slots[q];
        const int64_t key = atomic_load_explicit(&sl->key, memory_order_acquire);
        if (key == ED_KEY_EMPTY || key == ED_KEY_TOMB) continue;
        const int64_t ref = atomic_load_explicit(&sl->ref, memory_order_acquire);
        if (ref < 0 || (ref >> 1) >= end[ref & 1]) continue;     // being inserted, or new
        pub[ref & 1][(ref >> 1) / 64] |= UINT64_C(1) << ((ref >> 1) % 64);
    }
    for (int i = 0; i < 2; i++) {
        const ed_pool *p = &t->pools[i];
        for (int64_t r = 0; r < end[i] && n < live; r++)
            if (!shared || (pub[i][r / 64] >> (r % 64) & 1))
                ed_cand_add(s, ed_rec_meta(ed_pool_record(p, r)), (r << 1) | i, keep_from,
                            *cand, &n);
    }
    free(pub[0]);
    free(pub[1]);
    int64_t k = live - goal;
    if (k > n) k = n;
    if (k <= 0) return GRM_OK;
    if (k < n) ed_select(*cand, n, k);
    *k_out = k;
    return GRM_OK;
}

/* The row a candidate was chosen for still holds its record and was not stamped since
 * (ed_trim chose it under the read lock, and evicts under a later hold of the write
 * lock). */
static int ed_cand_still(const ed_store *s, const ed_table *t, const ed_candidate *c)
{
    const ed_meta *m = ed_rec_meta(ed_record(t, c->ref));
    const int64_t last = __atomic_load_n(&m->last, __ATOMIC_RELAXED);
    return m->id == c->id && last == (s->cfg.evict == ED_EVICT_LFU ? c->k2 : c->k1);
}

/* Evict candidates c [n] in order (all of them, or with `recheck` those ed_cand_still
 * keeps), to the backing file when tiered; *done: rows evicted. Caller holds the write
 * lock. */
static grm_status ed_evict_cands(const ed_store *s, ed_table *t, const ed_candidate *c,
                                 int64_t n, int recheck, int64_t *done)
{
    grm_status st;
    *done = 0;
    if (s->tiered && (st = ed_tier_reserve(s, t, n)) != GRM_OK) return st;
    for (int64_t i = 0; i < n; i++) {
        // The key slots an eviction probes (the cache's, and the backing index's when
        // tiered) and the record's metadata are requested ED_EVICT_AHEAD candidates
        // early, so their misses overlap (group prefetching, as ops.c's lookups): in the
        // synthetic-tiered run's evictions the two probes were over a quarter of the
        // time, a miss each.
        if (i + ED_EVICT_AHEAD < n) {
            const ed_candidate *a = &c[i + ED_EVICT_AHEAD];
            const uint64_t h = ed_hash(a->id);
            ed_keys_prefetch(&t->keys, h);
            if (s->tiered) ed_keys_prefetch(&t->tier.index, h);
            __builtin_prefetch(ed_record(t, a->ref));  // its metadata: dirty or not
        }
        if (recheck && !ed_cand_still(s, t, &c[i])) continue;
        if ((st = ed_evict_ref(s, t, c[i].ref)) != GRM_OK) return st;
        (*done)++;
    }
    return s->tiered ? ed_tier_flush(s, t) : GRM_OK;
}

static void ed_evict_log(const ed_store *s, const ed_table *t, int64_t k, const char *who)
{
    s->host->log(GRM_LOG_DEBUG, "emb-dynamic", "table '%s': %s %lld %s rows to keep "
                 "%lld rows%s (%lld evictions so far)", t->name,
                 s->tiered ? "moved to the backing file" : "evicted", (long long)k,
                 s->cfg.evict == ED_EVICT_LFU ? "least frequently used" : "least recently used",
                 (long long)t->max_rows, who, (long long)atomic_load(&t->evictions));
}

grm_status ed_evict_budget(const ed_store *s, ed_table *t, int64_t protect_from)
{
    const int64_t max_rows = t->max_rows;
    if (max_rows <= 0 || atomic_load(&t->keys.live) <= max_rows) return GRM_OK;
    // Tiered: down to 7/8 of the budget, so the O(rows) scan and selection run once per
    // max_rows/8 rows moved out, not after every batch (they were 29% of a step's time).
    const int64_t goal = s->tiered ? max_rows - max_rows / 8 : max_rows;
    int64_t k, done;
    grm_status st = ed_evict_pick(s, t, &t->cand, &t->cand_cap, protect_from, goal, 0, &k);
    if (st != GRM_OK || k == 0) return st;
    if ((st = ed_evict_cands(s, t, t->cand, k, 0, &done)) != GRM_OK) return st;
    ed_evict_log(s, t, k, "");
    return GRM_OK;
}

/* Candidates a trim evicts under one hold of the write lock: the trainer's lookups and
 * updates wait for a hold, never for the whole trim. */
#define ED_TRIM_CHUNK 256

/* Tiered: when the cache is within max_rows/64 of its budget, move rows out down to 7/8
 * of it, keeping every row stamped at keep_from or later. The host's data thread calls
 * this after its prefetch (grm_emb_ops.trim), so the trainer finds room and evicts nothing
 * itself (seed 003 §2.2: the rows of batch i and of the prefetched i+1 stay).
 *   - Cadence: a trim scans every record's metadata, a cache miss each, so it runs about
 *     as often as ed_evict_budget's cut (once per 7/64 of the budget brought in, against
 *     1/8). Trimming at 31/32 down to 15/16 scanned three times as often (the scan 2.4 %
 *     of synthetic-tiered's samples against 0.8 %), CPU that on 2 cores the trainer's pool
 *     would have used.
 *   - Locks: the candidates are chosen under the read lock (the scan takes milliseconds
 *     for a cache of 10^5 rows, which the trainer's lookups need not wait out: under the
 *     write lock synthetic-tiered trained 17 % slower than without the trim) and evicted
 *     ED_TRIM_CHUNK at a time under the write lock, each rechecked (ed_cand_still): a row
 *     the trainer touched in between stays.
 * Moving rows between the tiers changes no row, so the table's version (an export's
 * snapshot) stays. */
grm_status ed_trim(const ed_store *s, ed_table *t, int64_t keep_from)
{
    const int64_t max_rows = t->max_rows;
    // Room is made for the rows the lookups of the prefetched batches will create too (ids
    // in neither tier, which the prefetch leaves to them): in a first epoch most ids are
    // new, and without them the trainer's own lookups went over budget and evicted a tenth
    // of synthetic-tiered's rows.
    const int64_t fresh = atomic_load(&t->tier.fresh);
    if (!s->tiered || max_rows <= 0
        || atomic_load(&t->keys.live) + fresh <= max_rows - max_rows / 64)
        return GRM_OK;
    atomic_fetch_sub(&t->tier.fresh, fresh);
    const int64_t goal = max_rows - max_rows / 8 - fresh;
    int64_t k, done, moved = 0;
    pthread_rwlock_rdlock(&t->lock);
    grm_status st = ed_evict_pick(s, t, &t->tcand, &t->tcand_cap, keep_from,
                                  goal > max_rows / 2 ? goal : max_rows / 2, 1, &k);
    pthread_rwlock_unlock(&t->lock);
    for (int64_t i = 0; i < k && st == GRM_OK; i += ED_TRIM_CHUNK) {
        const int64_t m = k - i < ED_TRIM_CHUNK ? k - i : ED_TRIM_CHUNK;
        pthread_rwlock_wrlock(&t->lock);
        st = ed_evict_cands(s, t, t->tcand + i, m, 1, &done);
        pthread_rwlock_unlock(&t->lock);
        moved += done;
    }
    atomic_fetch_add_explicit(&t->tier.trimmed, moved, memory_order_relaxed);
    if (st == GRM_OK && moved > 0) ed_evict_log(s, t, moved, " (the data thread's trim)");
    return st;
}

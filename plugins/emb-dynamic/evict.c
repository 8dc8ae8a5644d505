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

grm_status ed_evict_budget(const ed_store *s, ed_table *t, int64_t protect_from)
{
    const int64_t live = atomic_load(&t->keys.live);
    const int64_t max_rows = t->max_rows;
    if (max_rows <= 0 || live <= max_rows) return GRM_OK;

    if (t->cand_cap < live) {
        ed_candidate *c = realloc(t->cand, (size_t)live * sizeof(*c));
        if (c == NULL)
            return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory for "
                                   "%lld eviction candidates", t->name, (long long)live);
        t->cand = c;
        t->cand_cap = live;
    }
    int64_t n = 0;
    for (int i = 0; i < 2; i++) {
        const ed_pool *p = &t->pools[i];
        const int64_t end = atomic_load(&p->next);
        for (int64_t r = 0; r < end && n < live; r++) {
            const ed_meta *m = ed_rec_meta(ed_pool_record(p, r));
            if (m->id == ED_KEY_EMPTY || m->last >= protect_from) continue;
            ed_candidate *c = &t->cand[n++];
            c->k1 = s->cfg.evict == ED_EVICT_LFU ? m->count : m->last;
            c->k2 = s->cfg.evict == ED_EVICT_LFU ? m->last : 0;
            c->id = m->id;
            c->ref = (r << 1) | i;
        }
    }
    // Tiered: down to 7/8 of the budget, so the O(rows) scan and selection run once per
    // max_rows/8 rows moved out, not after every batch (they were 29% of a step's time).
    int64_t k = live - (s->tiered ? max_rows - max_rows / 8 : max_rows);
    if (k > n) k = n;       // rows of the step in progress stay, even over budget
    if (k <= 0) return GRM_OK;
    if (k < n) ed_select(t->cand, n, k);
    grm_status st;
    if (s->tiered && (st = ed_tier_reserve(s, t, k)) != GRM_OK) return st;
    for (int64_t i = 0; i < k; i++) {
        // The key slots an eviction probes (the cache's, and the backing index's when
        // tiered) and the record's metadata are requested ED_EVICT_AHEAD candidates
        // early, so their misses overlap (group prefetching, as ops.c's lookups): in the
        // synthetic-tiered run's evictions the two probes were over a quarter of the
        // time, a miss each.
        if (i + ED_EVICT_AHEAD < k) {
            const ed_candidate *c = &t->cand[i + ED_EVICT_AHEAD];
            const uint64_t h = ed_hash(c->id);
            ed_keys_prefetch(&t->keys, h);
            if (s->tiered) ed_keys_prefetch(&t->tier.index, h);
            __builtin_prefetch(ed_record(t, c->ref));  // its metadata: dirty or not
        }
        if ((st = ed_evict_ref(s, t, t->cand[i].ref)) != GRM_OK) return st;
    }
    if (s->tiered && (st = ed_tier_flush(s, t)) != GRM_OK) return st;
    s->host->log(GRM_LOG_DEBUG, "emb-dynamic", "table '%s': %s %lld %s rows to keep "
                 "%lld rows (%lld evictions so far)", t->name,
                 s->tiered ? "moved to the backing file" : "evicted", (long long)k,
                 s->cfg.evict == ED_EVICT_LFU ? "least frequently used" : "least recently used",
                 (long long)max_rows, (long long)atomic_load(&t->evictions));
    return GRM_OK;
}

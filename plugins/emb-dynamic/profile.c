/* plugins/emb-dynamic/profile.c - cache_bytes = auto for the tiered mode (issue 20): the
 * ids of the first profile_batches training lookups of a table are kept; then the LRU
 * stack (reuse) distance of every access is computed (Mattson et al., "Evaluation
 * techniques for storage hierarchies", IBM Systems Journal 1970: an LRU cache of C rows
 * hits exactly the accesses whose distance is < C, so one pass gives the whole miss-ratio
 * curve), and the cache gets the smallest C whose hit rate reaches target_hit_rate, never
 * less than two batches' distinct rows (seed 003 §2.3: the batch in training and the one
 * being prefetched must both fit). Until then the table is not limited.
 *
 * Hit rate here is over re-references: a first touch inside the window misses at every
 * cache size (its share depends on the window's length, not on C), so it is left out.
 * Distances use a Fenwick tree over positions holding 1 at each id's latest access:
 * O(N log N) for N profiled ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emb_dynamic.h"

/* Fenwick tree over [0, n): add v at i; sum of [0, i]. */
static void ed_fw_add(int32_t *fw, int64_t n, int64_t i, int32_t v)
{
    for (i++; i <= n; i += i & -i) fw[i - 1] += v;
}

static int64_t ed_fw_sum(const int32_t *fw, int64_t i)
{
    int64_t s = 0;
    for (i++; i > 0; i -= i & -i) s += fw[i - 1];
    return s;
}

static int ed_cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Distinct ids of ids [n], using scratch [n]. */
static int64_t ed_distinct(const int64_t *ids, int64_t n, int64_t *scratch)
{
    memcpy(scratch, ids, (size_t)n * sizeof(int64_t));
    qsort(scratch, (size_t)n, sizeof(int64_t), ed_cmp_i64);
    int64_t u = n > 0;
    for (int64_t i = 1; i < n; i++) u += scratch[i] != scratch[i - 1];
    return u;
}

/* Histogram hist [U] of the LRU stack distances of ids [N] (first touches not counted);
 * returns the re-references, or -1 when out of memory. */
static int64_t ed_stack_distances(const ed_store *s, const int64_t *ids, int64_t N,
                                  int64_t *hist)
{
    int32_t *fw = calloc((size_t)(N > 0 ? N : 1), sizeof(int32_t));
    ed_keys last;
    if (fw == NULL) return -1;
    if (ed_keys_init(s, &last, ed_keys_slots_for(N, 1), 1) != GRM_OK) {
        free(fw);
        return -1;
    }
    int64_t reuses = 0;
    for (int64_t p = 0; p < N; p++) {
        int inserted;
        ed_slot *sl = ed_keys_find_or_insert(&last, ids[p], ed_hash(ids[p]), &inserted);
        if (!inserted) {
            const int64_t q = atomic_load_explicit(&sl->ref, memory_order_relaxed);
            // distinct ids touched after q: the marks in (q, p)
            const int64_t d = ed_fw_sum(fw, p - 1) - ed_fw_sum(fw, q);
            hist[d]++;
            reuses++;
            ed_fw_add(fw, N, q, -1);
        }
        ed_fw_add(fw, N, p, 1);
        atomic_store_explicit(&sl->ref, p, memory_order_relaxed);
    }
    ed_keys_fini(s, &last);
    free(fw);
    return reuses;
}

/* Bytes a cached row costs: its record and two key slots (a budgeted table's slot array is
 * at most half full after a rebuild, chunks.c). */
int64_t ed_cache_row_bytes(const ed_table *t)
{
    return (int64_t)t->pools[0].rec_bytes + 2 * (int64_t)sizeof(ed_slot);
}

/* Choose t->max_rows from the profile and log the curve. Caller holds the write lock. */
static grm_status ed_profile_choose(const ed_store *s, ed_table *t)
{
    ed_tier *tr = &t->tier;
    const int64_t N = tr->nprofile;
    int64_t *sorted = malloc((size_t)(N > 0 ? N : 1) * sizeof(int64_t));
    int64_t *hist = calloc((size_t)(N > 0 ? N : 1), sizeof(int64_t));
    if (sorted == NULL || hist == NULL) {
        free(sorted);
        free(hist);
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                               "profiling %lld ids for cache_bytes = auto", t->name,
                               (long long)N);
    }
    const int64_t U = ed_distinct(tr->profile, N, sorted);
    const int64_t reuses = ed_stack_distances(s, tr->profile, N, hist);
    free(sorted);
    if (reuses < 0) {
        free(hist);
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                               "profiling %lld ids for cache_bytes = auto", t->name,
                               (long long)N);
    }
    // hit(C) = sum of hist[d] for d < C, over the re-references.
    const double target = s->cfg.target_hit_rate;
    const int64_t floor_rows = 2 * tr->max_batch;
    int64_t C = U, hits = 0;
    for (int64_t c = 1; c <= U; c++) {
        hits += hist[c - 1];
        if (reuses == 0 || (double)hits >= target * (double)reuses) {
            C = c;
            break;
        }
    }
    const int64_t chosen = C > floor_rows ? C : floor_rows;
    const int64_t row_bytes = ed_cache_row_bytes(t);

    // The curve, at cache sizes of 1/32 .. 1 of the rows seen, and the choice.
    char line[1024];
    size_t off = 0;
    int64_t acc = 0, d = 0;
    for (int k = 5; k >= 0; k--) {
        const int64_t c = U >> k;
        if (c <= 0) continue;
        while (d < c) acc += hist[d++];
        off += (size_t)snprintf(line + off, sizeof(line) - off, " %lld rows %.3f;",
                                (long long)c, reuses > 0 ? (double)acc / (double)reuses : 1.0);
        if (off >= sizeof(line)) break;
    }
    free(hist);
    s->host->log(GRM_LOG_INFO, "emb-dynamic", "table '%s': cache_bytes = auto profiled %lld "
                 "ids of %lld batches (%lld distinct, %lld re-references); LRU hit rate "
                 "of the re-references:%s target %.3f reached at %lld rows; two batches' "
                 "working set %lld rows; cache = %lld rows = %lld bytes", t->name,
                 (long long)N, (long long)tr->batches, (long long)U, (long long)reuses, line,
                 target, (long long)C, (long long)floor_rows, (long long)chosen,
                 (long long)(chosen * row_bytes));
    t->max_rows = chosen > 0 ? chosen : 1;
    tr->chosen_rows = t->max_rows;
    free(tr->profile);
    tr->profile = NULL;
    tr->nprofile = tr->profile_cap = 0;
    return GRM_OK;
}

/* Record the ids of one training lookup; after profile_batches of them, choose the cache
 * size. */
grm_status ed_profile_batch(const ed_store *s, ed_table *t, const int64_t *ids, int64_t n)
{
    ed_tier *tr = &t->tier;
    grm_status st = GRM_OK;
    pthread_rwlock_wrlock(&t->lock);
    if (t->max_rows != 0) goto done;    // another thread chose already
    if (tr->nprofile + n > tr->profile_cap) {
        int64_t cap = tr->profile_cap > 0 ? tr->profile_cap : 4096;
        while (cap < tr->nprofile + n) cap *= 2;
        int64_t *p = realloc(tr->profile, (size_t)cap * sizeof(int64_t));
        if (p == NULL) {
            st = s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                                 "profiling ids for cache_bytes = auto", t->name);
            goto done;
        }
        tr->profile = p;
        tr->profile_cap = cap;
    }
    int64_t *scratch = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (scratch == NULL) {
        st = s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory profiling "
                             "ids for cache_bytes = auto", t->name);
        goto done;
    }
    const int64_t u = ed_distinct(ids, n, scratch);
    free(scratch);
    if (u > tr->max_batch) tr->max_batch = u;
    memcpy(tr->profile + tr->nprofile, ids, (size_t)n * sizeof(int64_t));
    tr->nprofile += n;
    if (++tr->batches >= s->cfg.profile_batches) st = ed_profile_choose(s, t);
done:
    pthread_rwlock_unlock(&t->lock);
    return st;
}

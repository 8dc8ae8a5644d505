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
 * O(N log N) for N profiled ids.
 *
 * The window cannot see reuse longer than itself: on long-tailed streams (Amazon Beauty, a
 * Zipf catalogue) and across epochs most re-references are farther apart than 20 batches,
 * and a cache chosen from the window alone reached 0.44-0.61 for a target of 0.9. So the
 * profile goes on for the rest of the run on a spatially hashed sample of the ids (SHARDS:
 * Waldspurger, Park, Garthwaite and Ahmad, "Efficient MRC Construction with SHARDS", FAST
 * 2015, §3): an id is sampled iff its hash falls under a threshold, rate R = threshold /
 * 2^32, so every access of a sampled id is seen; the LRU stack distances of the sampled
 * stream, divided by R, estimate those of the whole stream, each re-reference weighing
 * 1/R. The sample holds more or fewer references than R times the stream's when it got
 * the wrong share of hot ids; the difference goes to the first bucket (the paper's
 * SHARDS_adj). R starts at ED_SH_PER_BATCH accesses a batch and halves whenever more
 * than ED_SH_MAX_IDS ids are tracked (its fixed-size variant), which bounds the
 * time (about ED_SH_PER_BATCH hash-map and Fenwick operations a batch, a hash and a
 * compare for every other id) and the memory. After 2, 4, 8, ... times profile_batches
 * lookups the cache size is chosen again from this curve; it only grows (a re-choice
 * that saw less than the window chose nothing smaller). */
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

/* The budget in rows whose trimmed size still holds C rows: past its budget a tiered cache
 * is cut to 7/8 of it (evict.c), so with a budget of C rows it would be an LRU cache of C
 * rows only just before each cut, and hit less than the curve says at C. */
static int64_t ed_budget_for(int64_t C)
{
    // b - b/8 grows with b and is exactly C at b = C + C/7 (C = 7q + r: b = 8q + r, b/8 =
    // q); the smallest such b is that or one less, so the search starts just below
    int64_t b = C + C / 7 - 1;
    if (b < C) b = C;
    while (b - b / 8 < C) b++;
    return b;
}

/* Choose the cache's rows from the exact profile and log the curve; frees the profile.
 * Caller holds the profile's lock, not the table's. */
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
    const int64_t chosen = ed_budget_for(C > floor_rows ? C : floor_rows);
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
                 "working set %lld rows; cache = %lld rows (cut to 7/8 when full) = %lld "
                 "bytes", t->name,
                 (long long)N, (long long)tr->batches, (long long)U, (long long)reuses, line,
                 target, (long long)C, (long long)floor_rows, (long long)chosen,
                 (long long)(chosen * row_bytes));
    pthread_rwlock_wrlock(&t->lock);
    t->max_rows = chosen > 0 ? chosen : 1;
    tr->chosen_rows = t->max_rows;
    pthread_rwlock_unlock(&t->lock);
    free(tr->profile);
    tr->profile = NULL;
    tr->nprofile = tr->profile_cap = 0;
    return GRM_OK;
}

/* ---- the rest of the run: a spatially hashed sample (SHARDS) ---- */

#define ED_SH_PER_BATCH 64      /* sampled accesses a batch the rate starts at */
#define ED_SH_MAX_IDS 16384     /* ids tracked at once (fixed-size SHARDS) */
#define ED_SH_MIN_REUSES 256    /* sampled re-references before the curve is used */
#define ED_SH_FULL (UINT64_C(1) << 32)

/* Log-linear buckets of a scaled distance: exact below 32, then 32 a power of two (3%). */
static int ed_sh_bucket(int64_t x)
{
    if (x < 32) return (int)(x < 0 ? 0 : x);
    const int k = 63 - __builtin_clzll((uint64_t)x);
    const int b = 32 + (k - 5) * 32 + (int)((x >> (k - 5)) - 32);
    return b < ED_SH_BUCKETS ? b : ED_SH_BUCKETS - 1;
}

/* The smallest distance past bucket b: a cache of that many rows hits all of b. */
static int64_t ed_sh_upper(int b)
{
    if (b < 32) return b + 1;
    const int k = (b - 32) / 32 + 5, sub = (b - 32) % 32;
    return (int64_t)(32 + sub + 1) << (k - 5);
}

static double ed_sh_rate(const ed_shards *sh)
{
    return (double)sh->thresh / (double)ED_SH_FULL;
}

/* The rate from the first batch's size: ED_SH_PER_BATCH of its n ids. */
static grm_status ed_sh_init(const ed_store *s, ed_table *t, int64_t n)
{
    ed_shards *sh = &t->tier.sh;
    sh->thresh = n <= ED_SH_PER_BATCH ? ED_SH_FULL
                                      : (uint64_t)((double)ED_SH_FULL * ED_SH_PER_BATCH / (double)n);
    if (sh->thresh == 0) sh->thresh = 1;
    sh->fw_n = 4 * ED_SH_MAX_IDS;
    sh->fw = calloc((size_t)sh->fw_n, sizeof(int32_t));
    sh->hist = calloc(ED_SH_BUCKETS, sizeof(double));
    if (sh->fw == NULL || sh->hist == NULL ||
        ed_keys_init(s, &sh->last, ed_keys_slots_for(2 * ED_SH_MAX_IDS, 1), 1) != GRM_OK) {
        free(sh->fw);
        free(sh->hist);
        sh->fw = NULL;      // not started: the next batch tries again
        sh->hist = NULL;
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory for the "
                               "sampled profile of cache_bytes = auto", t->name);
    }
    sh->next_check = 2 * s->cfg.profile_batches;
    return GRM_OK;
}

typedef struct ed_sh_pos {
    int64_t pos;
    ed_slot *slot;
} ed_sh_pos;

static int ed_cmp_pos(const void *a, const void *b)
{
    const int64_t x = ((const ed_sh_pos *)a)->pos, y = ((const ed_sh_pos *)b)->pos;
    return x < y ? -1 : x > y;
}

/* The positions ran out: number the tracked ids' last accesses 0..U-1 in their order
 * (distances count marks between positions, so only the order matters). */
static grm_status ed_sh_renumber(const ed_store *s, const ed_table *t, ed_shards *sh)
{
    const int64_t U = atomic_load(&sh->last.live);
    ed_sh_pos *p = malloc((size_t)(U > 0 ? U : 1) * sizeof(*p));
    if (p == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory in the "
                               "sampled profile", t->name);
    int64_t u = 0;
    for (int64_t i = 0; i < sh->last.M && u < U; i++) {
        ed_slot *sl = &sh->last.slots[i];
        const int64_t key = atomic_load_explicit(&sl->key, memory_order_relaxed);
        if (key == ED_KEY_EMPTY || key == ED_KEY_TOMB) continue;
        p[u].pos = atomic_load_explicit(&sl->ref, memory_order_relaxed);
        p[u++].slot = sl;
    }
    qsort(p, (size_t)u, sizeof(*p), ed_cmp_pos);
    memset(sh->fw, 0, (size_t)sh->fw_n * sizeof(int32_t));
    for (int64_t i = 0; i < u; i++) {
        atomic_store_explicit(&p[i].slot->ref, i, memory_order_relaxed);
        ed_fw_add(sh->fw, sh->fw_n, i, 1);
    }
    sh->pos = u;
    free(p);
    return GRM_OK;
}

/* More than ED_SH_MAX_IDS ids tracked: halve the rate and drop the ids above it. */
static grm_status ed_sh_halve(const ed_store *s, ed_shards *sh)
{
    sh->thresh = sh->thresh > 1 ? sh->thresh / 2 : 1;
    for (int64_t i = 0; i < sh->last.M; i++) {
        ed_slot *sl = &sh->last.slots[i];
        const int64_t key = atomic_load_explicit(&sl->key, memory_order_relaxed);
        if (key == ED_KEY_EMPTY || key == ED_KEY_TOMB) continue;
        if (ed_hash(key) >> 32 < sh->thresh) continue;
        ed_fw_add(sh->fw, sh->fw_n, atomic_load_explicit(&sl->ref, memory_order_relaxed), -1);
        ed_keys_remove(&sh->last, sl);
    }
    return ed_keys_rebuild(s, &sh->last, sh->last.M);    // drops the tombstones
}

/* One access of a sampled id: its stack distance in the sample, scaled by 1/R. */
static grm_status ed_sh_access(const ed_store *s, const ed_table *t, ed_shards *sh,
                               int64_t id, uint64_t h)
{
    grm_status st;
    if (sh->pos == sh->fw_n && (st = ed_sh_renumber(s, t, sh)) != GRM_OK) return st;
    int inserted;
    ed_slot *sl = ed_keys_find_or_insert(&sh->last, id, h, &inserted);
    if (!inserted) {
        const int64_t q = atomic_load_explicit(&sl->ref, memory_order_relaxed);
        const int64_t d = ed_fw_sum(sh->fw, sh->pos - 1) - ed_fw_sum(sh->fw, q);
        const double inv = 1.0 / ed_sh_rate(sh);
        sh->hist[ed_sh_bucket((int64_t)((double)d * inv))] += inv;
        sh->reuse_w += inv;
        sh->reuses++;
        ed_fw_add(sh->fw, sh->fw_n, q, -1);
    }
    ed_fw_add(sh->fw, sh->fw_n, sh->pos, 1);
    atomic_store_explicit(&sl->ref, sh->pos++, memory_order_relaxed);
    if (atomic_load(&sh->last.live) > ED_SH_MAX_IDS) return ed_sh_halve(s, sh);
    return GRM_OK;
}

/* The smallest cache whose estimated hit rate of the re-references reaches target (the
 * correction counts as re-references at distance 0, hits at every size). */
static int64_t ed_sh_rows(const ed_shards *sh, double target)
{
    double acc = sh->adj;
    const double total = sh->reuse_w + sh->adj;
    int b = 0;
    for (; b < ED_SH_BUCKETS - 1; b++) {
        acc += sh->hist[b];
        if (acc >= target * total) break;
    }
    return ed_sh_upper(b);
}

/* The estimated hit rate of the re-references at a cache of C rows. */
static double ed_sh_hit(const ed_shards *sh, int64_t C)
{
    double acc = sh->adj;
    const double total = sh->reuse_w + sh->adj;
    for (int b = 0; b < ED_SH_BUCKETS && ed_sh_upper(b) <= C; b++) acc += sh->hist[b];
    return total > 0 ? acc / total : 1.0;
}

/* After 2, 4, 8, ... times profile_batches lookups: grow the cache when the sample's curve
 * needs more rows for the target than it has. Caller holds the profile's lock. */
static void ed_sh_rechoose(const ed_store *s, ed_table *t)
{
    ed_tier *tr = &t->tier;
    ed_shards *sh = &tr->sh;
    while (sh->next_check <= tr->batches) sh->next_check *= 2;
    if (sh->reuses < ED_SH_MIN_REUSES) return;
    const double target = s->cfg.target_hit_rate;
    if (sh->reuse_w + sh->adj <= 0) return;
    const int64_t want = ed_sh_rows(sh, target);
    int64_t C = ed_budget_for(want > 2 * tr->max_batch ? want : 2 * tr->max_batch);
    // Never more rows than both tiers hold now (the curve's buckets round up: on a Zipf
    // stream the choice was 103% of the table); a table that grows is seen again at the
    // next check.
    const int64_t rows = atomic_load(&t->keys.live) + atomic_load(&tr->file_only);
    if (C > rows) C = rows;
    const int64_t old = t->max_rows;
    if (C <= old) return;
    pthread_rwlock_wrlock(&t->lock);
    t->max_rows = C;
    tr->chosen_rows = C;
    pthread_rwlock_unlock(&t->lock);
    s->host->log(GRM_LOG_INFO, "emb-dynamic", "table '%s': cache_bytes = auto: over %lld "
                 "batches (a 1/%.0f sample of the ids, %lld re-references) the LRU hit rate "
                 "of the re-references is %.3f at the %lld rows the cache keeps (7/8 of "
                 "%lld); target %.3f reached at %lld rows: cache = %lld rows%s = %lld bytes",
                 t->name, (long long)tr->batches, 1.0 / ed_sh_rate(sh), (long long)sh->reuses,
                 ed_sh_hit(sh, old - old / 8), (long long)(old - old / 8), (long long)old,
                 target, (long long)want, (long long)C,
                 C == rows ? " (every row of the table)" : "",
                 (long long)(C * ed_cache_row_bytes(t)));
}

/* Record the ids of one training lookup: the first profile_batches of them in full (then
 * the cache size is chosen), every one in the sample. */
grm_status ed_profile_batch(const ed_store *s, ed_table *t, const int64_t *ids, int64_t n)
{
    ed_tier *tr = &t->tier;
    ed_shards *sh = &tr->sh;
    grm_status st = GRM_OK;
    pthread_mutex_lock(&tr->plock);
    if (sh->fw == NULL && (st = ed_sh_init(s, t, n)) != GRM_OK) goto done;
    int64_t ns = 0;
    for (int64_t i = 0; i < n && st == GRM_OK; i++) {
        const uint64_t h = ed_hash(ids[i]);
        if (h >> 32 < sh->thresh) {
            st = ed_sh_access(s, t, sh, ids[i], h);
            ns++;
        }
    }
    if (st != GRM_OK) goto done;
    sh->adj += (double)n - (double)ns / ed_sh_rate(sh);
    tr->batches++;
    if (t->max_rows != 0) {     // the window is over: the sample's curve, now and then
        if (tr->batches >= sh->next_check) ed_sh_rechoose(s, t);
        goto done;
    }
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
    if (tr->batches >= s->cfg.profile_batches) st = ed_profile_choose(s, t);
done:
    pthread_mutex_unlock(&tr->plock);
    return st;
}

void ed_profile_fini(const ed_store *s, ed_table *t)
{
    ed_tier *tr = &t->tier;
    free(tr->profile);
    tr->profile = NULL;
    if (tr->sh.last.slots != NULL) ed_keys_fini(s, &tr->sh.last);
    free(tr->sh.fw);
    free(tr->sh.hist);
    memset(&tr->sh, 0, sizeof(tr->sh));
    if (tr->plock_ready) pthread_mutex_destroy(&tr->plock);
    tr->plock_ready = 0;
}

/* plugins/emb-dynamic/chunks.c - the embedding structure of emb-dynamic (MTGRBoost §4.1
 * "Storage Layout"; RecIS §2.2.2 "Blocks"): fixed-size records (metadata, row, optimizer
 * state) in large chunks, so rows are allocated in bulk and never move; freed records go
 * to a free list. A batch first reserves room (ed_reserve): the key structure is grown
 * and chunks are allocated under the write lock before any id of the batch is touched,
 * always keeping one whole spare chunk (the paper's "next chunk"), so an insert inside the
 * batch never waits on an allocation. Also: FP16 storage of cold rows (MTGRBoost §5.2),
 * F16C or portable conversion, and the striped row locks. */
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ED_X86 1
#endif

#include <grm/rng.h>

#include "emb_dynamic.h"

static const grm_device ed_cpu = { GRM_DEVICE_CPU, 0 };

/* ---- FP16 conversion (IEEE binary16, round to nearest even) ---- */

static uint32_t ed_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float ed_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* After F. Giesen's float_to_half_fast3_rtne (public domain): normals round by adding
 * 0xfff plus the lowest kept mantissa bit; subnormals let the FPU round by adding 0.5f,
 * whose exponent puts the half's subnormal unit 2^-24 in the last mantissa place. */
static uint16_t ed_f32_to_f16_one(float f)
{
    uint32_t x = ed_bits(f);
    const uint32_t sign = x & UINT32_C(0x80000000);
    uint16_t o;
    x ^= sign;
    if (x >= UINT32_C(143) << 23) {                 // >= 65536, inf or NaN
        o = x > UINT32_C(0x7F800000) ? 0x7E00 : 0x7C00;
    } else if (x < UINT32_C(113) << 23) {           // below 2^-14: subnormal or zero
        const uint32_t magic = UINT32_C(126) << 23;  // 0.5f
        o = (uint16_t)(ed_bits(ed_float(x) + ed_float(magic)) - magic);
    } else {
        const uint32_t odd = (x >> 13) & 1;
        x += (UINT32_C(15) - 127) * (UINT32_C(1) << 23) + 0xFFF + odd;
        o = (uint16_t)(x >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

static float ed_f16_to_f32_one(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0) {
        const float v = (float)m * 5.9604644775390625e-8f;  // m * 2^-24, exact
        return ed_float(ed_bits(v) | sign);
    }
    if (e == 31) return ed_float(sign | UINT32_C(0x7F800000) | (m << 13));
    return ed_float(sign | ((e + 112) << 23) | (m << 13));
}

void ed_to_f16_soft(uint16_t *dst /* [n] */, const float *src /* [n] */, int32_t n)
{
    for (int32_t i = 0; i < n; i++) dst[i] = ed_f32_to_f16_one(src[i]);
}

void ed_from_f16_soft(float *dst /* [n] */, const uint16_t *src /* [n] */, int32_t n)
{
    for (int32_t i = 0; i < n; i++) dst[i] = ed_f16_to_f32_one(src[i]);
}

#ifdef ED_X86
int ed_have_f16c(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") != 0;
}

__attribute__((target("f16c")))
void ed_to_f16_f16c(uint16_t *dst /* [n] */, const float *src /* [n] */, int32_t n)
{
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m128i h = _mm_cvtps_ph(_mm_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storel_epi64((__m128i *)(void *)(dst + i), h);
    }
    for (; i < n; i++) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c")))
void ed_from_f16_f16c(float *dst /* [n] */, const uint16_t *src /* [n] */, int32_t n)
{
    int32_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm_storeu_ps(dst + i, _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)
                                                             (src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}
#else
int ed_have_f16c(void)
{
    return 0;
}

void ed_to_f16_f16c(uint16_t *dst, const float *src, int32_t n)
{
    ed_to_f16_soft(dst, src, n);
}

void ed_from_f16_f16c(float *dst, const uint16_t *src, int32_t n)
{
    ed_from_f16_soft(dst, src, n);
}
#endif

/* ---- pools of records ---- */

static size_t ed_round8(size_t x)
{
    return (x + 7) & ~(size_t)7;
}

void ed_pool_setup(ed_pool *p, int32_t half, int32_t D, int32_t S, int64_t chunk_rows)
{
    memset(p, 0, sizeof(*p));
    p->half = half;
    p->row_bytes = ed_round8((size_t)D * (half ? sizeof(uint16_t) : sizeof(float)));
    p->rec_bytes = ed_round8(sizeof(ed_meta) + p->row_bytes
                             + (size_t)S * (size_t)D * sizeof(float));
    p->chunk_rows = chunk_rows;
    p->chunk_shift = 0;
    while ((INT64_C(1) << p->chunk_shift) < chunk_rows) p->chunk_shift++;
    atomic_init(&p->next, 0);
    atomic_flag_clear(&p->free_lock);
}

void ed_pool_fini(const ed_store *s, ed_pool *p)
{
    for (int64_t c = 0; c < p->nchunks; c++) s->host->free(ed_cpu, p->chunks[c]);
    free(p->chunks);
    free(p->free_list);
    p->chunks = NULL;
    p->free_list = NULL;
    p->nchunks = 0;
}

int64_t ed_pool_capacity(const ed_pool *p)
{
    return p->nchunks * p->chunk_rows;
}

size_t ed_pool_bytes(const ed_pool *p)
{
    return (size_t)p->nchunks * ((size_t)p->chunk_rows * (p->rec_bytes + sizeof(int64_t))
                                 + sizeof(char *));
}

/* Allocate chunks until `rows` records fit. Caller holds the write lock (or is create). */
grm_status ed_pool_ensure(const ed_store *s, const ed_table *t, ed_pool *p, int64_t rows)
{
    while (ed_pool_capacity(p) < rows) {
        const int64_t cap = ed_pool_capacity(p) + p->chunk_rows;
        char **chunks = realloc(p->chunks, (size_t)(p->nchunks + 1) * sizeof(char *));
        if (chunks == NULL) goto oom;
        p->chunks = chunks;
        int64_t *fl = realloc(p->free_list, (size_t)cap * sizeof(int64_t));
        if (fl == NULL) goto oom;
        p->free_list = fl;
        const size_t bytes = (size_t)p->chunk_rows * p->rec_bytes;
        char *chunk = s->host->alloc(ed_cpu, bytes, 64);
        if (chunk == NULL)
            return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': cannot allocate a "
                                   "chunk of %zu bytes (%lld rows); lower chunk_rows or set "
                                   "max_rows", t->name, bytes, (long long)p->chunk_rows);
        p->chunks[p->nchunks++] = chunk;
    }
    return GRM_OK;

oom:
    return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory growing the "
                           "chunk directory", t->name);
}

/* A free record: a recycled one first, else fresh chunk space. Room was reserved. */
int64_t ed_pool_alloc(ed_pool *p)
{
    int64_t index = -1;
    // The free list is empty until rows are evicted or promoted: then the lock is not
    // taken at all (two atomic operations a new row fewer). A record freed while this
    // looks is used by a later allocation.
    if (atomic_load_explicit(&p->nfree, memory_order_relaxed) > 0) {
        while (atomic_flag_test_and_set_explicit(&p->free_lock, memory_order_acquire)) {}
        const int64_t n = atomic_load_explicit(&p->nfree, memory_order_relaxed);
        if (n > 0) {
            index = p->free_list[n - 1];
            atomic_store_explicit(&p->nfree, n - 1, memory_order_relaxed);
        }
        atomic_flag_clear_explicit(&p->free_lock, memory_order_release);
    }
    if (index < 0) index = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    return index;
}

void ed_pool_release(ed_pool *p, int64_t index)
{
    ed_rec_meta(ed_pool_record(p, index))->id = ED_KEY_EMPTY;
    while (atomic_flag_test_and_set_explicit(&p->free_lock, memory_order_acquire)) {}
    const int64_t n = atomic_load_explicit(&p->nfree, memory_order_relaxed);
    p->free_list[n] = index;
    atomic_store_explicit(&p->nfree, n + 1, memory_order_relaxed);
    atomic_flag_clear_explicit(&p->free_lock, memory_order_release);
}

void ed_pool_reset(ed_pool *p)
{
    atomic_store(&p->next, 0);
    atomic_store_explicit(&p->nfree, 0, memory_order_relaxed);
}

/* ---- reservation: grow before the batch, never inside it ---- */

/* A table under a row budget (max_rows: eviction, or the tiered cache) keeps a slot array
 * sized by its budget, not by the spec's row hint: at most half full after a rebuild
 * (the budget or the live rows, whichever is more, plus two batches), so that the array of
 * a tiered table stays in cache and is counted in cache_bytes (ed_cache_row_bytes).
 *
 * Each eviction turns a key into a tombstone, and claims never reuse tombstones
 * (concurrent inserters of one id must meet at the same slot, the first EMPTY one). Left
 * to fill the array up to the load factor, they pushed every new key and every miss's
 * search far down its probe sequence: a tiered table keeping 1,312 rows in 131,072 slots
 * reached 3/4 full, and the claims of its updates became the loop's largest cost. Such a
 * table is rebuilt (tombstones dropped) once they pass 1/8 of the slots: O(M) work every
 * M/8 evictions. */
static int64_t ed_budget_slots(const ed_table *t, int64_t live, int64_t n)
{
    // two batches: the one in training and the one being prefetched reserve together
    const int64_t need = (live > t->max_rows ? live : t->max_rows) + 2 * n;
    int64_t M = ED_MIN_SLOTS;
    while (M < 2 * (int64_t)t->keys.lanes) M *= 2;
    while (M / 2 < need && M < (INT64_C(1) << 40)) M *= 2;
    return M;
}

static int ed_budget_rebuild(const ed_table *t, int64_t used, int64_t live, int64_t n)
{
    const ed_keys *k = &t->keys;
    return t->max_rows > 0 &&
           (used - live > k->M / 8 || k->M > 4 * ed_budget_slots(t, live, n));
}

static int ed_room(const ed_store *s, const ed_table *t, int64_t pend)
{
    const ed_keys *k = &t->keys;
    const int64_t used = atomic_load(&k->used);
    if (used + pend > k->M / ED_GROW_DEN * ED_GROW_NUM) return 0;
    if (ed_budget_rebuild(t, used, atomic_load(&k->live), pend)) return 0;
    for (int i = 0; i < (s->cfg.fp16_cold ? 2 : 1); i++)
        if (atomic_load(&t->pools[i].next) + pend > ed_pool_capacity(&t->pools[i])) return 0;
    return 1;
}

/* Under the write lock (no batch in flight): make room for n more keys and records. */
static grm_status ed_make_room(const ed_store *s, ed_table *t, int64_t n)
{
    ed_keys *k = &t->keys;
    const int64_t used = atomic_load(&k->used), live = atomic_load(&k->live);
    grm_status st;

    const int64_t budget = t->max_rows > 0;
    if (used + n > k->M / ED_GROW_DEN * ED_GROW_NUM || ed_budget_rebuild(t, used, live, n)) {
        // Double past load factor 3/4 (MTGRBoost §4.1). When tombstones rather than live
        // keys fill the array, a rebuild at the same size clears them, but only while the
        // live keys stay under 1/2 so that evict-insert churn cannot rebuild every batch.
        // A budgeted table takes its budget's size.
        const int64_t old_M = k->M;
        int64_t M = budget ? ed_budget_slots(t, live, n) : old_M;
        if (!budget && live + n > M / 2) M *= 2;
        while (live + n > M / ED_GROW_DEN * ED_GROW_NUM && M < (INT64_C(1) << 40)) M *= 2;
        if (live + n > M / ED_GROW_DEN * ED_GROW_NUM)
            return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': %lld keys exceed "
                                   "the largest key structure", t->name,
                                   (long long)(live + n));
        if ((st = ed_keys_rebuild(s, &t->keys, M)) != GRM_OK) return st;
        s->host->log(GRM_LOG_DEBUG, "emb-dynamic", "table '%s': key structure %lld -> %lld "
                     "slots (%lld live keys, %lld tombstones dropped)", t->name,
                     (long long)old_M, (long long)M, (long long)live,
                     (long long)(used - live));
    }
    for (int i = 0; i < (s->cfg.fp16_cold ? 2 : 1); i++) {
        ed_pool *p = &t->pools[i];
        // One whole chunk beyond the batch's worst case: the "next chunk" of §4.1.
        if ((st = ed_pool_ensure(s, t, p, atomic_load(&p->next) + n + p->chunk_rows))
            != GRM_OK)
            return st;
    }
    return GRM_OK;
}

/* Reserve room for a batch of n ids and take the table's read lock; ed_release ends it. */
grm_status ed_reserve(const ed_store *s, ed_table *t, int64_t n)
{
    for (;;) {
        pthread_rwlock_rdlock(&t->lock);
        const int64_t pend = atomic_fetch_add(&t->pending, n) + n;
        if (ed_room(s, t, pend)) return GRM_OK;
        atomic_fetch_sub(&t->pending, n);
        pthread_rwlock_unlock(&t->lock);

        // Under the write lock no batch is in flight, so pending is 0 and n is all we need.
        pthread_rwlock_wrlock(&t->lock);
        const grm_status st = ed_make_room(s, t, n);
        pthread_rwlock_unlock(&t->lock);
        if (st != GRM_OK) return st;
    }
}

void ed_release(ed_table *t, int64_t n)
{
    atomic_fetch_sub(&t->pending, n);
    pthread_rwlock_unlock(&t->lock);
}

/* ---- rows ---- */

/* Initialize the record of a new key: grm_row_init, zero state, fresh metadata. */
void ed_record_fill(const ed_store *s, const ed_table *t, int64_t ref, int64_t id,
                    int64_t now)
{
    const ed_pool *p = &t->pools[ref & 1];
    char *rec = ed_record(t, ref);
    ed_meta *m = ed_rec_meta(rec);
    m->id = id;
    m->steps = 0;
    m->count = 0;
    m->last = now;
    m->flags = ED_FLAG_DIRTY;   // not in a backing file yet
    if (p->half) {
        float tmp[ED_MAX_DIM];
        grm_row_init(tmp, t->dim, t->init, t->init_scale, t->seed, t->name_hash, id);
        s->to_f16(ed_rec_row(rec), tmp, t->dim);
    } else {
        grm_row_init(ed_rec_row(rec), t->dim, t->init, t->init_scale, t->seed, t->name_hash,
                     id);
    }
    if (s->S > 0) memset(ed_rec_state(p, rec), 0, (size_t)s->S * (size_t)t->dim * sizeof(float));
}

/* The value a lookup with INSERT would store for a missing id (FP16-rounded when such a
 * row starts cold), without storing it. */
void ed_row_initial(const ed_store *s, const ed_table *t, float *out /* [D] */, int64_t id)
{
    grm_row_init(out, t->dim, t->init, t->init_scale, t->seed, t->name_hash, id);
    if (s->cfg.fp16_cold && s->cfg.hot_threshold > 1) {
        uint16_t tmp[ED_MAX_DIM];
        s->to_f16(tmp, out, t->dim);
        s->from_f16(out, tmp, t->dim);
    }
}

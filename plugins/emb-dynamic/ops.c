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

/* A training access of a row, in its metadata: LFU's count, the dirty flag, LRU's and TTL's
 * time. Under the row's lock, or before the row is published. */
static inline void ed_count_access(ed_meta *m, int64_t now)
{
    m->count++;
    m->flags |= ED_FLAG_DIRTY;
    ed_meta_stamp(m, now);
}

/* The record of id, whose key this thread has just claimed in slot: ed_acquire's work once
 * the claim succeeded (*st and out as there). Returns what *inserted becomes: 2 when out
 * took the row and the first access was counted, else 1. */
static int ed_create(const ed_job *j, ed_slot *slot, int64_t id, int pool, grm_status *st,
                     float *out)
{
    ed_table *t = j->t;
    int inserted = 1;
    const int64_t ref = (ed_pool_alloc(&t->pools[pool]) << 1) | pool;
    if (j->s->tiered) *st = ed_tier_fetch(j->s, t, ref, id, j->now);
    else ed_record_fill(j->s, t, ref, id, j->now);
    if (out != NULL && !(ref & 1)) {
        char *rec = ed_record(t, ref);
        ed_count_access(ed_rec_meta(rec), j->now);
        ed_copy_floats(out, (const float *)ed_rec_row(rec), t->dim);
        inserted = 2;
    }
    atomic_store_explicit(&slot->ref, ref, memory_order_release);
    return inserted;
}

/* Claim (or find) the key of id and, when this thread claimed it, create its record in
 * pool `pool` (tiered: read back from the backing file when the row is there). Returns the
 * slot, NULL when absent and insert is 0; *st is not GRM_OK when the backing read failed
 * (the record is then initialized, and the batch fails with *st). New keys are counted in
 * *new_keys, for the caller to add to the key structure's counts once (ed_keys_add).
 *
 * out: a training lookup's row. When this thread created an FP32 record, no other thread
 * can reach it before its reference is published, so its first access (ed_lookup_one's
 * count, dirty flag and time) and the copy into out are done here, without the row's
 * lock, and *inserted is 2 (ed_lookup_one then only counts the miss). An FP16 record
 * (which the access may promote) and out NULL (an update) leave *inserted at 1. */
static ed_slot *ed_acquire(const ed_job *j, int64_t id, uint64_t h, int insert, int pool,
                           int *inserted, grm_status *st, float *out, int64_t *new_keys)
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
    slot = ed_keys_claim(&t->keys, id, h, inserted);
    if (slot == NULL) return NULL;
    if (*inserted) {
        (*new_keys)++;
        *inserted = ed_create(j, slot, id, pool, st, out);
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

/* Ids an update's cpu path resolves together (group prefetching, Chen, Ailamaki, Gibbons and
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
    *misses += inserted != 0;
    if (inserted == 2) return GRM_OK;   // accessed and copied by ed_acquire
    if (!j->insert) {   // a plain lookup writes nothing: no lock (emb_dynamic.h, seqlocks)
        ed_row_read_shared(s, t, h, slot, out);
        return GRM_OK;
    }
    // A training access counts for LFU, LRU, TTL and promotion: under the row's lock.
    ed_stripe_lock(t, h);
    int64_t ref = atomic_load_explicit(&slot->ref, memory_order_acquire);
    ed_meta *m = ed_rec_meta(ed_record(t, ref));
    ed_count_access(m, j->now);
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

    int64_t new_keys = 0;
    for (int64_t i = begin; i < end && st == GRM_OK; i++) {
        const uint64_t h = ed_hash(j->ids[i]);
        int inserted;
        ed_slot *slot = ed_acquire(j, j->ids[i], h, j->insert, pool, &inserted, &st,
                                   j->out + i * j->t->dim, &new_keys);
        if (st == GRM_OK) st = ed_lookup_one(j, i, h, slot, inserted, &misses);
    }
    ed_keys_add(&j->t->keys, new_keys);
    atomic_fetch_add_explicit(&j->misses, misses, memory_order_relaxed);
    return st;
}

/* A plain lookup (no insert, no access counted) reads only an id's slot and row. Its cpu
 * path is written for the common case and hands the rest to ed_find_slow: it checks the T
 * slots of an id's first probe round (at load <= 3/4 about 90% of the ids sit there; the
 * four keys of T = 4 are compared at once), and copies an FP32 row under the stripe's
 * sequence (ed_row_read_shared's protocol) with the table's constants in a local context;
 * an id in a later round is probed there in line (ed_find_later); an FP16 row, a slot still
 * being inserted, a writer in the stripe and an absent id take the general path. The
 * common T and D are compile-time constants of their own copies of the code. The steps run
 * as a software pipeline (ed_run_pipe). The first version of this pipeline ran each id
 * through the general functions: about 2.5x the instructions an id, a probe loop whose exit
 * lane the branch predictor missed about once an id, and 0.5x abseil's find at dim 16
 * (bench/README.md has both). */
typedef struct ed_find_ctx {
    ed_job *j;
    ed_table *t;
    ed_slot *slots;
    uint64_t first;         /* (M - 1) & ~(T - 1): an id's first round starts at h & first */
    char *const *chunks;    /* the FP32 pool's */
    int32_t shift;
    int64_t in_chunk;       /* chunk_rows - 1 */
    size_t rec_bytes;
    int64_t misses;
} ed_find_ctx;

/* Id i's row into out by the general code, from its slot (found: an absent id goes to
 * ed_lookup_one). */
static __attribute__((noinline)) grm_status ed_find_slow(ed_find_ctx *c, int64_t i, uint64_t h,
                                                         ed_slot *slot, float *out)
{
    ed_wait_ref(slot);
    ed_row_read_shared(c->j->s, c->t, h, slot, out);
    return GRM_OK;
}

/* Id id's slot among the T slots of its first probe round (hash h); NULL if not there,
 * with *hole the round's first empty slot when it holds one (then the id is absent, and a
 * claim of it would take that slot: ed_train_copy), else NULL. Slots fill in probe order,
 * so an id present in the round sits before any empty slot of it. */
static inline __attribute__((always_inline)) ed_slot *
ed_find_first(ed_slot *base, int64_t id, const int32_t T, ed_slot **hole)
{
    *hole = NULL;
    if (T == 4) {
        // the four keys compared at once: a loop that left at the matching lane
        // mispredicted about once an id (a plain lookup at dim 16: 44M -> 52M ids/s)
        const int64_t k0 = atomic_load_explicit(&base[0].key, memory_order_acquire);
        const int64_t k1 = atomic_load_explicit(&base[1].key, memory_order_acquire);
        const int64_t k2 = atomic_load_explicit(&base[2].key, memory_order_acquire);
        const int64_t k3 = atomic_load_explicit(&base[3].key, memory_order_acquire);
        const unsigned hit = (unsigned)(k0 == id) | (unsigned)(k1 == id) << 1
                             | (unsigned)(k2 == id) << 2 | (unsigned)(k3 == id) << 3;
        if (hit != 0) return &base[__builtin_ctz(hit)];
        const unsigned none = (unsigned)(k0 == ED_KEY_EMPTY)
                              | (unsigned)(k1 == ED_KEY_EMPTY) << 1
                              | (unsigned)(k2 == ED_KEY_EMPTY) << 2
                              | (unsigned)(k3 == ED_KEY_EMPTY) << 3;
        if (none != 0) *hole = &base[__builtin_ctz(none)];
        return NULL;
    }
    for (int32_t g = 0; g < T; g++) {
        const int64_t key = atomic_load_explicit(&base[g].key, memory_order_acquire);
        if (key == id) return &base[g];
        if (key == ED_KEY_EMPTY) {
            *hole = &base[g];
            return NULL;
        }
    }
    return NULL;
}

/* The record of reference ref in the hot pool (ed_record with the pool's constants in
 * locals). */
static inline char *ed_find_rec(const ed_find_ctx *c, int64_t ref)
{
    const int64_t x = ref >> 1;
    return c->chunks[x >> c->shift] + (size_t)(x & c->in_chunk) * c->rec_bytes;
}

/* Both lookups run as a pipeline of three stages (Chen et al., ICDE 2004, §5): id i + 2A's
 * slot line is requested (ed_pipe_hash), id i + A is probed and its row's lines requested
 * (ed_pipe_probe), id i's row is copied (ed_find_copy, ed_train_copy). An id's state passes
 * from stage to stage in a ring of ed_pipe entries. */
#define ED_AHEAD 8
#define ED_RING (4 * ED_AHEAD)      /* > 2A, a power of two */

typedef struct ed_pipe {
    uint64_t h;             /* the id's hash */
    ed_slot *slot;          /* its slot; NULL: absent, or not found */
    ed_slot *hole;          /* absent: its first round's first empty slot, or NULL */
    char *rec;              /* the FP32 record of ref; NULL when ref is not one */
    int64_t ref;            /* slot's reference as stage 2 read it */
} ed_pipe;

/* Stage 1: id i's hash, its first round's slot line requested (rw: for writing). */
static inline __attribute__((always_inline)) void
ed_pipe_hash(const ed_find_ctx *c, int64_t id, ed_pipe *e, int rw)
{
    e->h = ed_hash(id);
    if (rw) __builtin_prefetch(&c->slots[e->h & c->first], 1, 3);
    else __builtin_prefetch(&c->slots[e->h & c->first], 0, 3);
}

/* Id id's slot when its first round (hash h) held neither it nor an empty slot: the key
 * structure's probe from round 1, NULL when absent. About one id in ten at load 3/4, but a
 * Zipf stream may send a hot id there on most accesses: handing such ids to the general
 * path (ed_find_slow, ed_acquire) cost a 64-float copy through memcpy and a second probe
 * from round 0 (bench/README.md). Not inlined: it stays out of the pipeline's loop. */
static __attribute__((noinline)) ed_slot *ed_find_later(const ed_find_ctx *c, int64_t id,
                                                        uint64_t h)
{
    return ed_keys_find_from(&c->t->keys, id, h, 1);
}

/* Stage 2: the slot of id, in its first round (ed_find_first) or a later one
 * (ed_find_later), and, when it holds an FP32 row, the record's address kept for stage 3
 * and its lines requested: the row alone for a plain lookup, with its metadata and for
 * writing (rw) for a training lookup, which counts the access. */
static inline __attribute__((always_inline)) void
ed_pipe_probe(const ed_find_ctx *c, int64_t id, ed_pipe *e, const int32_t T, const int64_t D,
              int rw)
{
    e->rec = NULL;
    e->slot = ed_find_first(&c->slots[e->h & c->first], id, T, &e->hole);
    if (e->slot == NULL && e->hole == NULL) e->slot = ed_find_later(c, id, e->h);
    if (e->slot == NULL) return;
    e->ref = atomic_load_explicit(&e->slot->ref, memory_order_relaxed);
    if (e->ref < 0 || (e->ref & 1)) return;
    char *rec = e->rec = ed_find_rec(c, e->ref);
    const char *from = rw ? rec : rec + sizeof(ed_meta), *end = rec + sizeof(ed_meta) + D * 4;
    for (const char *a = from; a < end; a += 64) {
        if (rw) __builtin_prefetch(a, 1, 3);
        else __builtin_prefetch(a, 0, 3);
    }
    if (rw) __builtin_prefetch(end - 1, 1, 3);
    else __builtin_prefetch(end - 1, 0, 3);
}

/* Stage 3 of a plain lookup: id i's row into out, copied under the stripe's sequence when
 * the slot still holds the FP32 record stage 2 found and no writer is in the stripe, else
 * by ed_find_slow (or ed_lookup_one for an absent id). */
static inline __attribute__((always_inline)) grm_status
ed_find_copy(ed_find_ctx *c, int64_t i, const ed_pipe *e, float *out, const int64_t D)
{
    if (e->rec != NULL) {
        _Atomic uint32_t *q = ed_stripe(c->t, e->h);
        const uint32_t v = atomic_load_explicit(q, memory_order_acquire);
        const int64_t ref = atomic_load_explicit(&e->slot->ref, memory_order_acquire);
        if (!(v & 1) && ref == e->ref) {
            ed_copy_floats(out, (const float *)ed_rec_row(e->rec), D);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(q, memory_order_relaxed) == v) return GRM_OK;
        }
    } else if (e->slot == NULL) {   // absent: a new row, or one in the backing file
        return ed_lookup_one(c->j, i, e->h, NULL, 0, &c->misses);
    }
    return ed_find_slow(c, i, e->h, e->slot, out);
}

/* Stage 3 of a training lookup (find-or-insert, the access counted): a present id whose
 * slot still holds the FP32 record stage 2 found takes the row's lock, counts the access
 * and copies the row in line (ed_lookup_one's locked path for a hot row, which no access
 * promotes); a new id whose first round had an empty slot claims that slot (the claim
 * re-probed from round 0: about 80 of an insert's 400 instructions beside grm_row_init,
 * callgrind); another new id, a pending insert and an FP16 row (which the access may
 * promote) take ed_acquire and ed_lookup_one. */
static inline __attribute__((always_inline)) grm_status
ed_train_copy(ed_find_ctx *c, int64_t i, const ed_pipe *e, float *out, const int64_t D,
              int pool, int64_t *new_keys)
{
    ed_table *const t = c->t;
    if (e->rec != NULL) {
        ed_stripe_lock(t, e->h);
        if (atomic_load_explicit(&e->slot->ref, memory_order_acquire) == e->ref) {
            char *rec = e->rec;
            ed_count_access(ed_rec_meta(rec), c->j->now);
            ed_copy_floats(out, (const float *)ed_rec_row(rec), D);
            ed_stripe_unlock(t, e->h);
            return GRM_OK;
        }
        ed_stripe_unlock(t, e->h);
    }
    const int64_t id = c->j->ids[i];
    int inserted = 0;
    grm_status st = GRM_OK;
    ed_slot *sl = e->hole;
    int64_t key = ED_KEY_EMPTY;
    // absent, with an empty slot in its first round: claimed there when it is still empty
    // (the slots before it still hold other keys), without a second probe
    if (sl != NULL && ed_slot_claim(sl, &key, id)) {
        (*new_keys)++;
        inserted = ed_create(c->j, sl, id, pool, &st, out);
    } else {
        sl = ed_acquire(c->j, id, e->h, 1, pool, &inserted, &st, out, new_keys);
    }
    if (st != GRM_OK) return st;
    if (inserted == 2) {    // created, its first access counted and its row copied
        c->misses++;
        return GRM_OK;
    }
    return ed_lookup_one(c->j, i, e->h, sl, inserted, &c->misses);
}

/* One turn of the pipeline at i: id i hashed, id i - A probed, id i - 2A copied (train:
 * a training lookup's stage 3). The three loops of ed_run_pipe pass which stages run as
 * constants, so the turns of a range's middle test no bounds. */
static inline __attribute__((always_inline)) grm_status
ed_pipe_turn(ed_find_ctx *c, ed_pipe *ring, int64_t i, int hash, int probe, int copy,
             const int32_t T, const int64_t D, int train, int pool, int64_t *new_keys)
{
    const int64_t *const ids = c->j->ids;
    if (hash) ed_pipe_hash(c, ids[i], &ring[(size_t)i & (ED_RING - 1)], train);
    if (probe) {
        const int64_t p = i - ED_AHEAD;
        ed_pipe_probe(c, ids[p], &ring[(size_t)p & (ED_RING - 1)], T, D, train);
    }
    if (!copy) return GRM_OK;
    const int64_t w = i - 2 * ED_AHEAD;
    const ed_pipe *e = &ring[(size_t)w & (ED_RING - 1)];
    float *out = c->j->out + w * D;
    if (train) return ed_train_copy(c, w, e, out, D, pool, new_keys);
    return ed_find_copy(c, w, e, out, D);
}

/* Ids [begin, end) through the pipeline: its filling, its middle and its draining. */
static inline __attribute__((always_inline)) grm_status
ed_run_pipe(ed_find_ctx *c, int64_t begin, int64_t end, const int32_t T, const int64_t D,
            int train)
{
    const int pool = train ? ed_lookup_pool(c->j->s) : 0;
    ed_pipe ring[ED_RING];
    int64_t new_keys = 0;
    grm_status st = GRM_OK;
    int64_t i = begin;
    if (end - begin >= 2 * ED_AHEAD) {
        for (; i < begin + ED_AHEAD; i++)
            ed_pipe_turn(c, ring, i, 1, 0, 0, T, D, train, pool, &new_keys);
        for (; i < begin + 2 * ED_AHEAD; i++)
            ed_pipe_turn(c, ring, i, 1, 1, 0, T, D, train, pool, &new_keys);
        for (; i < end && st == GRM_OK; i++)
            st = ed_pipe_turn(c, ring, i, 1, 1, 1, T, D, train, pool, &new_keys);
    }
    // The draining (and a range shorter than the pipeline), each stage where its id is in
    // the range.
    for (; i < end + 2 * ED_AHEAD && st == GRM_OK; i++) {
        const int64_t p = i - ED_AHEAD, w = i - 2 * ED_AHEAD;
        if (i < end) ed_pipe_turn(c, ring, i, 1, 0, 0, T, D, train, pool, &new_keys);
        if (p >= begin && p < end)
            ed_pipe_turn(c, ring, i, 0, 1, 0, T, D, train, pool, &new_keys);
        if (w >= begin) st = ed_pipe_turn(c, ring, i, 0, 0, 1, T, D, train, pool, &new_keys);
    }
    if (train) ed_keys_add(&c->t->keys, new_keys);
    return st;
}

/* impl = cpu: plain and training lookups, the pipelines above. */
static grm_status ed_lookup_range_cpu(void *ctx, int64_t begin, int64_t end)
{
    ed_job *j = ctx;
    ed_table *t = j->t;
    const ed_pool *hot = &t->pools[0];
    ed_find_ctx c = {
        .j = j, .t = t, .slots = t->keys.slots,
        .first = ((uint64_t)t->keys.M - 1) & ~((uint64_t)t->keys.lanes - 1),
        .chunks = hot->chunks, .shift = hot->chunk_shift, .in_chunk = hot->chunk_rows - 1,
        .rec_bytes = hot->rec_bytes,
    };
    const int32_t T = t->keys.lanes;
    const int64_t D = t->dim;
    grm_status st;
    if (j->insert) {
        if (T == 4 && D == 16) st = ed_run_pipe(&c, begin, end, 4, 16, 1);
        else if (T == 4 && D == 32) st = ed_run_pipe(&c, begin, end, 4, 32, 1);
        else if (T == 4 && D == 64) st = ed_run_pipe(&c, begin, end, 4, 64, 1);
        else if (T == 4 && D == 128) st = ed_run_pipe(&c, begin, end, 4, 128, 1);
        else st = ed_run_pipe(&c, begin, end, T, D, 1);
    } else {
        if (T == 4 && D == 16) st = ed_run_pipe(&c, begin, end, 4, 16, 0);
        else if (T == 4 && D == 32) st = ed_run_pipe(&c, begin, end, 4, 32, 0);
        else if (T == 4 && D == 64) st = ed_run_pipe(&c, begin, end, 4, 64, 0);
        else if (T == 4 && D == 128) st = ed_run_pipe(&c, begin, end, 4, 128, 0);
        else st = ed_run_pipe(&c, begin, end, T, D, 0);
    }
    atomic_fetch_add_explicit(&j->misses, c.misses, memory_order_relaxed);
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
        ed_meta_stamp(m, j->now);
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
    int64_t new_keys = 0;
    for (int64_t i = begin; i < end && st == GRM_OK; i++) {
        const uint64_t h = ed_hash(j->ids[i]);
        int inserted;
        ed_slot *slot = ed_acquire(j, j->ids[i], h, 1, j->s->cfg.fp16_cold, &inserted, &st,
                                   NULL, &new_keys);
        if (st == GRM_OK) st = ed_update_one(j, i, h, slot);
    }
    ed_keys_add(&j->t->keys, new_keys);
    return st;
}

/* The ids of the group from g: ED_GROUP, fewer at the end. */
static int ed_group_len(int64_t g, int64_t end)
{
    return end - g < ED_GROUP ? (int)(end - g) : ED_GROUP;
}

/* impl = cpu: groups of ED_GROUP ids in a pipeline of three stages, a group apart (the
 * lookups run ed_lookup_range_cpu's pipelines): the slot lines of group i + 2 are
 * requested, group i + 1 is probed and its records requested, group i is updated. With the
 * three stages inside one group, the first records of a group were read as soon as they
 * were requested: in synthetic-tiered, 90% of ed_update_one's samples waited on its
 * record's first line (perf). Ids are unique in an update, so the order in which their
 * rows are updated does not change them. */
static grm_status ed_update_range_cpu(void *ctx, int64_t begin, int64_t end)
{
    ed_job *j = ctx;
    ed_table *t = j->t;
    grm_status st = GRM_OK;
    int64_t new_keys = 0;
    uint64_t h[3][ED_GROUP];
    ed_slot *slot[3][ED_GROUP];
    const int64_t ngroups = (end - begin + ED_GROUP - 1) / ED_GROUP;
    for (int64_t i = 0; i < ngroups + 2 && st == GRM_OK; i++) {
        if (i < ngroups) {                      // group i: hash, slot lines
            const int64_t g = begin + i * ED_GROUP;
            const int m = ed_group_len(g, end);
            for (int k = 0; k < m; k++) {
                h[i % 3][k] = ed_hash(j->ids[g + k]);
                ed_keys_prefetch(&t->keys, h[i % 3][k]);
            }
        }
        const int64_t p = i - 1;                // group i - 1: probe, record lines
        if (p >= 0 && p < ngroups) {
            const int64_t g = begin + p * ED_GROUP;
            const int m = ed_group_len(g, end);
            for (int k = 0; k < m && st == GRM_OK; k++) {
                int inserted;
                ed_slot *sl = ed_acquire(j, j->ids[g + k], h[p % 3][k], 1,
                                         j->s->cfg.fp16_cold, &inserted, &st, NULL, &new_keys);
                slot[p % 3][k] = sl;
                if (sl != NULL)
                    ed_record_prefetch(t, atomic_load_explicit(&sl->ref, memory_order_acquire));
            }
        }
        const int64_t u = i - 2;                // group i - 2: the updates
        if (u >= 0 && st == GRM_OK) {
            const int64_t g = begin + u * ED_GROUP;
            const int m = ed_group_len(g, end);
            for (int k = 0; k < m && st == GRM_OK; k++)
                st = ed_update_one(j, g + k, h[u % 3][k], slot[u % 3][k]);
        }
    }
    ed_keys_add(&t->keys, new_keys);
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
    if (st == GRM_OK && insert && s->tiered && s->cache_bytes < 0)
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

/* Ids the prefetch reserves (and holds the table's read lock for) at a time: the trainer's
 * evictions take the write lock, and a whole batch's fetches under one read lock (~1,200
 * preads a step in synthetic-tiered) kept them waiting. Their misses are read
 * ED_TIER_RING at a time (one ring submission each). */
#define ED_PF_CHUNK 256

/* Stamp the row of slot with the step in progress `now` (at least), under no lock
 * (ed_meta_stamp). */
static void ed_prefetch_stamp(ed_table *t, ed_slot *slot, int64_t now)
{
    ed_meta_stamp(ed_rec_meta(ed_record(t, atomic_load_explicit(&slot->ref,
                                                                memory_order_acquire))), now);
}

/* Bring the rows of ids [n] that live in the backing file into the cache ahead of their
 * lookup (seed 003 §2.2: batch i+1's rows are fetched while batch i computes). Ids in
 * neither tier are left to the lookup (a new row costs no I/O), so prefetching changes no
 * row and adds none: a checkpoint taken meanwhile is the same, and the table's version
 * (which keys the export snapshot) does not move. No access is counted; the rows are
 * stamped with the step in progress, like the rows batch i looked up, so the evictions of
 * batch i's lookup and update keep both.
 *
 * Prefetching evicts nothing (seed 003 §2.2: prefetching i+1 must never evict i): the cache
 * is trimmed back to its budget by the trainer's own lookups and updates. The data thread
 * may prefetch batch i+1 before batch i's lookup has stamped batch i's rows with the step
 * in progress (the data thread's ring runs ahead of the trainer): an eviction here
 * then took rows batch i was about to look up, and on ML-100K with a cache of a quarter of
 * the rows, a third of the lookups missed rows that had been in the cache. Ids may repeat.
 * Runs on the calling thread only (the data thread calls it while the trainer's thread
 * uses the host pool). */
/* The misses of a chunk claimed so far (their slots pending): read together (one ring
 * submission, or a pread each), then published and stamped. */
typedef struct ed_pf_miss {
    ed_slot *slot[ED_TIER_RING];
    int64_t ref[ED_TIER_RING], id[ED_TIER_RING], index[ED_TIER_RING];
    int n;
} ed_pf_miss;

static grm_status ed_pf_flush(const ed_store *s, ed_table *t, ed_pf_miss *q, int64_t now,
                              int64_t *fetched)
{
    if (q->n == 0) return GRM_OK;
    // every record is defined even when a read fails, so all are published
    const grm_status e = ed_tier_fetch_many(s, t, q->ref, q->id, q->index, q->n);
    for (int i = 0; i < q->n; i++) {
        ed_meta_stamp(ed_rec_meta(ed_record(t, q->ref[i])), now);   // before it is seen
        atomic_store_explicit(&q->slot[i]->ref, q->ref[i], memory_order_release);
    }
    ed_keys_add(&t->keys, q->n);
    *fetched += q->n;
    q->n = 0;
    return e;
}

/* The per-id work of the prefetch, once id's slot in the cache (NULL: not found) is
 * known: a row only the file holds is claimed and queued for reading; a cached one is
 * stamped with the step in progress unless it already is. */
static grm_status ed_pf_one(const ed_store *s, ed_table *t, int64_t id, uint64_t h,
                            ed_slot *slot, int64_t now, ed_pf_miss *q, int64_t *fetched)
{
    if (slot == NULL) {
        // ids in neither tier are left to the lookup (a new row costs no I/O)
        const ed_slot *fs = ed_keys_find(&t->tier.index, id, h);
        if (fs == NULL) {   // a row the lookup will create: room for it (ed_trim)
            atomic_fetch_add_explicit(&t->tier.fresh, 1, memory_order_relaxed);
            return GRM_OK;
        }
        int inserted = 0;
        slot = ed_keys_claim(&t->keys, id, h, &inserted);
        if (slot == NULL) return GRM_OK;    // full: the lookup will fetch it
        if (inserted) {
            const int i = q->n++;
            q->slot[i] = slot;
            q->ref[i] = ed_pool_alloc(&t->pools[0]) << 1;
            q->id[i] = id;
            q->index[i] = atomic_load_explicit(&fs->ref, memory_order_relaxed);
            return q->n == ED_TIER_RING ? ed_pf_flush(s, t, q, now, fetched) : GRM_OK;
        }
    }
    // a repeated id whose first occurrence is queued: its read is ours, at the flush
    // (waiting here would wait for ourselves)
    if (atomic_load_explicit(&slot->ref, memory_order_acquire) == ED_REF_PENDING)
        for (int i = 0; i < q->n; i++)
            if (q->slot[i] == slot) return GRM_OK;
    ed_wait_ref(slot);
    // Most rows of batch i+1 were also in batch i, which stamped them already: a read
    // tells, and writes nothing to the line the trainer's updates write.
    ed_prefetch_stamp(t, slot, now);
    return GRM_OK;
}

/* Bring the rows of ids [n] that live in the backing file into the cache ahead of their
 * lookup (seed 003 §2.2: batch i+1's rows are fetched while batch i computes). Ids in
 * neither tier are left to the lookup (a new row costs no I/O), so prefetching changes no
 * row and adds none: a checkpoint taken meanwhile is the same, and the table's version
 * (which keys the export snapshot) does not move. No access is counted; the rows are
 * stamped with the step in progress, like the rows batch i looked up, so the evictions of
 * batch i's lookup and update keep both.
 *
 * Prefetching evicts nothing (seed 003 §2.2: prefetching i+1 must never evict i): the cache
 * is trimmed back to its budget by the trainer's own lookups and updates. The data thread
 * may prefetch batch i+1 before batch i's lookup has stamped batch i's rows with the step
 * in progress (the data thread's ring runs ahead of the trainer): an eviction here
 * then took rows batch i was about to look up, and on ML-100K with a cache of a quarter of
 * the rows, a third of the lookups missed rows that had been in the cache. Ids may repeat.
 * Runs on the calling thread only (the data thread calls it while the trainer's thread
 * uses the host pool).
 *
 * Each chunk runs as the lookups' pipeline (ed_run_pipe; Chen et al., ICDE 2004, §5): id
 * i + 2A's slot line is requested, id i + A is probed and the line of its row's metadata
 * (found) or of its backing index slot (not found) requested, id i is handled. Groups of
 * 8 ids, each waiting for its first miss twice, left this thread's time on those loads
 * (perf: 76% of ed_prefetch_batch's samples on the slot, metadata and index loads) with
 * 1.3 s of the data thread's CPU over the synthetic-tiered run. A probe and its handling
 * stay inside one chunk's reservation: no eviction moves a slot between them. */
grm_status ed_prefetch_batch(const ed_store *s, ed_table *t, const int64_t *ids /* [n] */,
                             int64_t n)
{
    grm_status st = GRM_OK;
    const int64_t now = atomic_load(&t->clock) + 1;     // the step in progress
    int64_t fetched = 0;
    ed_pf_miss q;
    q.n = 0;
    uint64_t h[ED_RING];
    ed_slot *found[ED_RING];
    for (int64_t c = 0; c < n && st == GRM_OK; c += ED_PF_CHUNK) {
        const int64_t cn = n - c < ED_PF_CHUNK ? n - c : ED_PF_CHUNK, end = c + cn;
        if ((st = ed_reserve(s, t, cn)) != GRM_OK) break;
        const ed_keys *k = &t->keys;
        for (int64_t i = c; i < end + 2 * ED_AHEAD && st == GRM_OK; i++) {
            if (i < end) {
                h[i & (ED_RING - 1)] = ed_hash(ids[i]);
                ed_keys_prefetch(k, h[i & (ED_RING - 1)]);
            }
            const int64_t pi = i - ED_AHEAD;
            if (pi >= c && pi < end) {
                const size_t r = (size_t)pi & (ED_RING - 1);
                found[r] = ed_keys_find(k, ids[pi], h[r]);
                const int64_t ref = found[r] != NULL
                    ? atomic_load_explicit(&found[r]->ref, memory_order_relaxed) : ED_REF_NONE;
                if (ref >= 0) __builtin_prefetch(ed_rec_meta(ed_record(t, ref)));
                else if (found[r] == NULL) ed_keys_prefetch(&t->tier.index, h[r]);
            }
            const int64_t w = i - 2 * ED_AHEAD;
            if (w >= c) {
                const size_t r = (size_t)w & (ED_RING - 1);
                st = ed_pf_one(s, t, ids[w], h[r], found[r], now, &q, &fetched);
            }
        }
        const grm_status e = ed_pf_flush(s, t, &q, now, &fetched);
        if (st == GRM_OK) st = e;
        ed_release(t, cn);
    }
    atomic_fetch_add(&t->tier.prefetched, fetched);
    return st;
}

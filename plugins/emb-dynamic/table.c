/* plugins/emb-dynamic/table.c - the key structure of emb-dynamic (MTGRBoost §4.1,
 * Figure 6): an open-addressing array of (id, row reference) slots, hashed with
 * MurmurHash3's fmix64 and probed with grouped parallel probing (eq. 5, Theorem 1; the
 * sequence is in emb_dynamic.h). Keys are claimed lock-free with a CAS from EMPTY; a key
 * is never moved or removed while batches run (removal and growth take the table's write
 * lock), which is what makes "first EMPTY slot of the sequence" a safe place to insert.
 * Growth doubles the slot array and migrates only (key, reference) pairs: rows never move. */
#include <sched.h>
#include <string.h>

#include "emb_dynamic.h"

static const grm_device ed_cpu = { GRM_DEVICE_CPU, 0 };

/* Slots holding `rows` keys at a load factor <= 3/4, a power of two >= 2 lanes. */
int64_t ed_keys_slots_for(int64_t rows, int32_t lanes)
{
    int64_t M = ED_MIN_SLOTS;
    while (M < 2 * (int64_t)lanes) M *= 2;
    while (M < (INT64_C(1) << 60) && rows > M / ED_GROW_DEN * ED_GROW_NUM) M *= 2;
    return M;
}

static void ed_slots_clear(ed_slot *slots, int64_t M)
{
    for (int64_t i = 0; i < M; i++) {
        atomic_init(&slots[i].key, ED_KEY_EMPTY);
        atomic_init(&slots[i].ref, ED_REF_PENDING);
    }
}

grm_status ed_keys_init(const ed_store *s, ed_keys *k, int64_t M, int32_t lanes)
{
    if ((uint64_t)M > SIZE_MAX / sizeof(ed_slot))
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: %lld key slots do not fit in memory",
                               (long long)M);
    k->slots = s->host->alloc(ed_cpu, (size_t)M * sizeof(ed_slot), 64);
    if (k->slots == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: cannot allocate %zu bytes for %lld "
                               "key slots", (size_t)M * sizeof(ed_slot), (long long)M);
    k->M = M;
    k->lanes = lanes;
    atomic_init(&k->used, 0);
    atomic_init(&k->live, 0);
    ed_slots_clear(k->slots, M);
    return GRM_OK;
}

void ed_keys_fini(const ed_store *s, ed_keys *k)
{
    s->host->free(ed_cpu, k->slots);
    k->slots = NULL;
    k->M = 0;
}

/* Every thread looking for `id` walks the same sequence, and a slot only ever goes from
 * EMPTY to a key while batches run, so they all meet at the first EMPTY slot: one CAS
 * wins, the others re-read the slot and see either `id` (found) or another key (go on). */
ed_slot *ed_keys_claim(ed_keys *k, int64_t id, uint64_t h, int *inserted)
{
    ed_probe p = ed_probe_lazy(h, k->M, k->lanes);
    *inserted = 0;
    for (uint64_t r = 0; r < p.rounds; r++) {
        if (r == 1) ed_probe_lazy_step(&p, h, k->M, k->lanes);
        for (uint32_t g = 0; g < (uint32_t)k->lanes; g++) {
            ed_slot *sl = &k->slots[ed_probe_slot(&p, r, g)];
            int64_t key = atomic_load_explicit(&sl->key, memory_order_acquire);
            for (;;) {
                if (key == id) return sl;
                if (key != ED_KEY_EMPTY) break;
                if (ed_slot_claim(sl, &key, id)) {
                    *inserted = 1;
                    return sl;
                }
            }
        }
    }
    return NULL;    // full: cannot happen after ed_reserve
}

void ed_keys_add(ed_keys *k, int64_t n)
{
    if (n == 0) return;
    atomic_fetch_add_explicit(&k->used, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->live, n, memory_order_relaxed);
}

ed_slot *ed_keys_find_or_insert(ed_keys *k, int64_t id, uint64_t h, int *inserted)
{
    ed_slot *sl = ed_keys_claim(k, id, h, inserted);
    ed_keys_add(k, *inserted);
    return sl;
}

/* Removal leaves a tombstone so the probe sequences that pass this slot stay intact.
 * Caller holds the table's write lock. */
void ed_keys_remove(ed_keys *k, ed_slot *slot)
{
    atomic_store_explicit(&slot->key, ED_KEY_TOMB, memory_order_relaxed);
    atomic_store_explicit(&slot->ref, ED_REF_NONE, memory_order_relaxed);
    atomic_fetch_sub_explicit(&k->live, 1, memory_order_relaxed);
}

typedef struct ed_migrate_job {
    const ed_keys *old;
    ed_keys *neu;
} ed_migrate_job;

static grm_status ed_migrate_range(void *ctx, int64_t begin, int64_t end)
{
    const ed_migrate_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        const ed_slot *o = &j->old->slots[i];
        const int64_t key = atomic_load_explicit(&o->key, memory_order_relaxed);
        if (key == ED_KEY_EMPTY || key == ED_KEY_TOMB) continue;
        int inserted;
        ed_slot *sl = ed_keys_find_or_insert(j->neu, key, ed_hash(key), &inserted);
        atomic_store_explicit(&sl->ref, atomic_load_explicit(&o->ref, memory_order_relaxed),
                              memory_order_release);
    }
    return GRM_OK;
}

/* Replace the slot array of k by one of M slots holding the same live keys (tombstones are
 * dropped); only keys and references move (MTGRBoost §4.1 "Capacity Expansion"). Caller
 * holds the table's write lock. On failure the old array is kept. */
grm_status ed_keys_rebuild(const ed_store *s, ed_keys *k, int64_t M)
{
    ed_keys neu;
    grm_status st = ed_keys_init(s, &neu, M, k->lanes);
    if (st != GRM_OK) return st;
    ed_migrate_job j = { k, &neu };
    if (s->cfg.impl == ED_IMPL_REF) st = ed_migrate_range(&j, 0, k->M);
    else st = s->host->parallel_for(k->M, 65536, ed_migrate_range, &j);
    if (st != GRM_OK) {
        ed_keys_fini(s, &neu);
        return st;
    }
    ed_keys_fini(s, k);
    k->slots = neu.slots;
    k->M = neu.M;
    atomic_store(&k->used, atomic_load(&neu.used));
    atomic_store(&k->live, atomic_load(&neu.live));
    return GRM_OK;
}

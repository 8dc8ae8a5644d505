/* plugins/emb-dynamic/emb_dynamic.h - internal declarations of emb-dynamic, the dynamic
 * hash embedding store of MTGRBoost §4.1 (RecIS §2.2.2 calls the same split IDMap +
 * Blocks): a key structure (open addressing, id -> row reference; table.c) decoupled from
 * an embedding structure of large chunks holding row, optimizer state and metadata
 * (chunks.c), LRU/LFU/TTL eviction (evict.c), FP32 hot / FP16 cold rows (MTGRBoost §5.2),
 * batched lookup and update (ops.c), checkpoint export and restore (ckpt.c). */
#ifndef EMB_DYNAMIC_H
#define EMB_DYNAMIC_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <grm/emb.h>
#include <grm/host.h>
#include <grm/opt.h>
#include <grm/rng.h>

/* ---- configuration ---- */

/* evict values (the ENUM parameter's choice index). */
enum ed_evict_mode {
    ED_EVICT_NONE = 0,
    ED_EVICT_LRU = 1,       /* oldest last-access step first, then smallest id */
    ED_EVICT_LFU = 2        /* fewest accesses first, then oldest last access, then id */
};

/* impl values. */
enum ed_impl {
    ED_IMPL_CPU = 0,        /* host->parallel_for over ids, F16C conversion when present */
    ED_IMPL_REF = 1,        /* one thread, portable FP16 conversion: the reference */
    ED_IMPL_AUTO = 2        /* ref on [pipeline] device = ref, else cpu (grm/backend.h) */
};

/* backing_io values: how the prefetch reads its misses from the backing file. */
enum ed_backing_io {
    ED_IO_AUTO = 0,         /* io_uring when built with liburing and the kernel allows it */
    ED_IO_PREAD = 1,        /* one pread a record */
    ED_IO_URING = 2         /* io_uring, or an error at create naming why not */
};

/* The config struct the declared parameters fill (plugin.c: ed_params). */
typedef struct ed_config {
    int32_t evict;          /* ed_evict_mode */
    int32_t fp16_cold;      /* bool: rows below hot_threshold accesses are stored FP16 */
    int64_t max_rows;       /* live-row budget per table; 0 = none */
    int64_t ttl_steps;      /* evict rows not touched for this many steps; 0 = never */
    int64_t hot_threshold;  /* accesses at which an FP16 row is promoted to FP32 */
    int64_t initial_rows;   /* rows the key structure holds at create; -1 = spec hint */
    int64_t chunk_rows;     /* rows per embedding chunk (power of two) */
    int64_t probe_lanes;    /* thread groups of eq. 5 (power of two) */
    int32_t impl;           /* ed_impl */
    const char *backing;    /* tiered mode: directory of the backing files; "" = off */
    const char *cache_bytes;    /* tiered mode: cache budget per table, bytes or "auto" */
    int32_t backing_io;         /* tiered mode: ed_backing_io */
    int64_t backing_garbage_min;    /* tiered mode: garbage records before cleaning */
    double target_hit_rate;     /* cache_bytes = auto: the hit rate the cache must reach */
    int64_t profile_batches;    /* cache_bytes = auto: training lookups profiled first */
} ed_config;

/* ---- keys: the key structure (table.c) ---- */

/* Reserved key values; ids equal to them are refused (GRM_EINVAL). */
#define ED_KEY_EMPTY INT64_MIN          /* never used: ends a probe sequence */
#define ED_KEY_TOMB (INT64_MIN + 1)     /* evicted: probing goes on past it */

/* Row references: (index << 1) | pool, pool 0 = FP32 (hot), 1 = FP16 (cold). */
#define ED_REF_PENDING INT64_C(-1)      /* key claimed, row being initialized */
#define ED_REF_NONE INT64_C(-2)

/* Load factor at which the key structure grows (MTGRBoost §4.1 "Capacity Expansion"). */
#define ED_GROW_NUM 3
#define ED_GROW_DEN 4
#define ED_MIN_SLOTS 64

/* One slot: 16 bytes, so 4 lanes of a probe round share one 64-byte cache line. */
typedef struct ed_slot {
    _Atomic int64_t key;    /* id, ED_KEY_EMPTY or ED_KEY_TOMB */
    _Atomic int64_t ref;    /* row reference, ED_REF_PENDING while being inserted */
} ed_slot;

/* Claim slot sl for id when its key is still *key (ED_KEY_EMPTY): 1 when this thread won,
 * else 0 with *key the key another thread put there. The one CAS every insert goes through
 * (ed_keys_claim, and a training lookup's claim of the empty slot its find saw). */
static inline int ed_slot_claim(ed_slot *sl, int64_t *key, int64_t id)
{
    return atomic_compare_exchange_strong_explicit(&sl->key, key, id, memory_order_acq_rel,
                                                   memory_order_acquire);
}

typedef struct ed_keys {
    ed_slot *slots;         /* [M] owned (host->alloc) */
    int64_t M;              /* slots, a power of two >= 2 * lanes */
    int32_t lanes;          /* T of eq. 5 */
    _Atomic int64_t used;   /* slots not EMPTY: live keys + tombstones */
    _Atomic int64_t live;   /* live keys */
} ed_keys;

/* The hash of a key: MurmurHash3's fmix64 finalizer of the id (MTGRBoost §4.1 "Handling
 * Hash Function"), the SDK's grm_mix64. */
static inline uint64_t ed_hash(int64_t id)
{
    return grm_mix64((uint64_t)id);
}

/* Grouped parallel probing, eq. 5 of MTGRBoost §4.1:
 *   S = ((k mod (M/T - 1)) + 1 | 1) * T
 * with M slots, T = lanes (thread groups) and k the key's hash (its high 32 bits, so the
 * start, taken from the low bits, and the step are independent). The start h0 is aligned
 * to T; round r visits the T consecutive slots ((h0 + r*S) mod M) + g, g in [0, T): lane g
 * only ever sees slots = g (mod T), so lanes probe disjoint regions, and since S/T is odd
 * and M/T a power of two, each lane's M/T rounds visit every slot of its residue class
 * (Theorem 1 applied to M/T): the M/T rounds of T lanes visit all M slots exactly once. */
typedef struct ed_probe {
    uint64_t h0;            /* first round's first slot, a multiple of T */
    uint64_t step;          /* S */
    uint64_t mask;          /* M - 1 */
    uint64_t rounds;        /* M / T */
} ed_probe;

/* M / T: both are powers of two, and this 64-bit division took 28% of a claim's samples
 * (perf of inserts at dim 16). */
static inline uint64_t ed_probe_groups(int64_t M, int32_t T)
{
    return (uint64_t)M >> __builtin_ctz((unsigned)T);
}

static inline ed_probe ed_probe_start(uint64_t h, int64_t M, int32_t T)
{
    ed_probe p;
    const uint64_t groups = ed_probe_groups(M, T);
    p.mask = (uint64_t)M - 1;
    p.h0 = h & p.mask & ~((uint64_t)T - 1);
    p.step = (groups > 1 ? (((h >> 32) % (groups - 1)) + 1) | 1 : 1) * (uint64_t)T;
    p.rounds = groups;
    return p;
}

/* Slot of lane g in round r. */
static inline uint64_t ed_probe_slot(const ed_probe *p, uint64_t r, uint32_t g)
{
    return ((p->h0 + r * p->step) & p->mask) + g;
}

/* ---- the key structure's read side, inline: every lookup runs it (table.c has the rest) */

/* The probe of eq. 5 with its step left for later: round 0 needs only h0, and the step
 * (a 64-bit modulo) is computed once a probe goes past its first T slots, which at load
 * factors <= 3/4 most do not. ed_probe_lazy_step fills it in. */
static inline ed_probe ed_probe_lazy(uint64_t h, int64_t M, int32_t T)
{
    ed_probe p;
    p.mask = (uint64_t)M - 1;
    p.h0 = h & p.mask & ~((uint64_t)T - 1);
    p.rounds = ed_probe_groups(M, T);
    p.step = 0;
    return p;
}

static inline void ed_probe_lazy_step(ed_probe *p, uint64_t h, int64_t M, int32_t T)
{
    p->step = ed_probe_start(h, M, T).step;
}

/* Id's slot (hash h), NULL when absent, probing from round r0: a caller that has already
 * looked through the rounds before it (ops.c's pipeline, its first round) starts past
 * them. */
static inline ed_slot *ed_keys_find_from(const ed_keys *k, int64_t id, uint64_t h, uint64_t r0)
{
    ed_probe p = ed_probe_lazy(h, k->M, k->lanes);
    if (r0 > 0) ed_probe_lazy_step(&p, h, k->M, k->lanes);
    for (uint64_t r = r0; r < p.rounds; r++) {
        if (r == 1 && r0 == 0) ed_probe_lazy_step(&p, h, k->M, k->lanes);
        for (uint32_t g = 0; g < (uint32_t)k->lanes; g++) {
            ed_slot *sl = &k->slots[ed_probe_slot(&p, r, g)];
            const int64_t key = atomic_load_explicit(&sl->key, memory_order_acquire);
            if (key == id) return sl;
            if (key == ED_KEY_EMPTY) return NULL;
        }
    }
    return NULL;
}

static inline ed_slot *ed_keys_find(const ed_keys *k, int64_t id, uint64_t h)
{
    return ed_keys_find_from(k, id, h, 0);
}

/* The reference of a found slot; waits while its inserter is still filling the row. */
static inline int64_t ed_wait_ref(const ed_slot *slot)
{
    for (int spins = 0;; spins++) {
        const int64_t ref = atomic_load_explicit(&slot->ref, memory_order_acquire);
        if (ref != ED_REF_PENDING) return ref;
        if (spins > 64) sched_yield();
    }
}

/* Ask for the cache line of the first probe round of hash h (T = 4 slots of 16 bytes: one
 * 64-byte line), so that the lines of a whole group of ids are in flight at once. */
static inline void ed_keys_prefetch(const ed_keys *k, uint64_t h)
{
    const uint64_t h0 = h & ((uint64_t)k->M - 1) & ~((uint64_t)k->lanes - 1);
    __builtin_prefetch(&k->slots[h0], 1, 3);
}

/* ---- embedding structure (chunks.c) ---- */

/* Metadata kept beside every row (MTGRBoost §4.1: counters and timestamps for LRU/LFU). */
typedef struct ed_meta {
    int64_t id;             /* the row's id, ED_KEY_EMPTY while the record is free */
    int64_t steps;          /* updates applied: row_step's per-row step (grm/opt.h) */
    int64_t count;          /* accesses (lookups): LFU order and the hot threshold */
    int64_t last;           /* step of the last access: LRU order and TTL */
    int64_t flags;          /* ED_FLAG_*; in a backing file record: its XXH3-64 (tier.c) */
} ed_meta;

#define ED_FLAG_DIRTY 1     /* the cache record differs from its backing copy, or has none */

/* A row's LRU/TTL time raised to `now`: an atomic maximum, so that the data thread's
 * prefetch (ops.c) stamps rows without taking their stripe's lock. The data thread runs at
 * SCHED_IDLE (core/prefetch.c): preempted while it held a stripe, it left the trainer's
 * threads spinning on that stripe until the scheduler gave it a turn, 75% of the
 * update's time in the synthetic-tiered run (perf). Every other write of `last` happens
 * under the table's write lock or before the record is published; plain reads of it
 * under the write lock see no stamp in flight (the prefetch holds a reservation). */
static inline void ed_meta_stamp(ed_meta *m, int64_t now)
{
    int64_t last = __atomic_load_n(&m->last, __ATOMIC_RELAXED);
    while (last < now && !__atomic_compare_exchange_n(&m->last, &last, now, 1,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

/* One pool of fixed-size records in chunks of chunk_rows. Record layout:
 * ed_meta | row [D] (f32, or f16 in the cold pool) padded to 8 bytes | state [S*D] f32. */
typedef struct ed_pool {
    int32_t half;           /* 1: rows stored FP16 */
    size_t row_bytes;       /* D * 4 or D * 2, rounded up to 8 */
    size_t rec_bytes;       /* sizeof(ed_meta) + row_bytes + S*D*4 */
    int64_t chunk_rows;     /* power of two */
    int32_t chunk_shift;    /* log2(chunk_rows) */
    char **chunks;          /* [nchunks] owned (malloc), each owned (host->alloc) */
    int64_t nchunks;
    _Atomic int64_t next;   /* records handed out from fresh chunk space */
    int64_t *free_list;     /* [cap rows] owned (malloc): freed record indices */
    _Atomic int64_t nfree;  /* changed under free_lock; read without it by ed_pool_alloc */
    atomic_flag free_lock;
} ed_pool;

/* FP16 conversions, chosen at create: F16C or the portable version. */
typedef void (*ed_to_f16_fn)(uint16_t *dst, const float *src, int32_t n);
typedef void (*ed_from_f16_fn)(float *dst, const uint16_t *src, int32_t n);

#define ED_STRIPES 1024     /* row sequence locks, striped by the id's hash */
#define ED_MAX_DIM 4096     /* FP16 rows are converted through a stack buffer of this */

/* The export (ckpt.c): the ids of every row of both tiers, ascending, taken at a table
 * version; tensor_rows reads any range of their rows, tensors() all of them into the
 * buffers below. */
typedef struct ed_export {
    int64_t version;        /* table version the ids were taken at; -1 = none */
    int64_t n;
    int64_t cap;            /* of ids */
    int64_t *ids;           /* [n] ascending */
    int64_t full;           /* version the whole-tensor buffers hold; -1 = none */
    int64_t wcap;           /* rows the buffers hold */
    float *weight;          /* [n, D] */
    float *state;           /* [n, S*D] */
    int64_t *meta;          /* [n, 3]: steps, count, last */
    int64_t counters[5];    /* clock, key slots, lookups, misses, evictions */
    /* Tiered: the rows [r0, r0 + rn) of the weight, state and meta tensors read last
     * (tensor_rows), at version rver (-1: none), so that a save which asks for each tensor
     * of a range in turn (ckpt-grm 2.0) reads the backing file once a range, not once a
     * tensor. */
    int64_t rver, r0, rn;
    int64_t rcap;           /* rows the range buffers hold */
    float *rw, *rstate;     /* [rcap, D], [rcap, S*D] */
    int64_t *rmeta;         /* [rcap, 3] */
    int32_t rtaken;         /* bit k: tensor k copied from the range read last */
} ed_export;

#define ED_NTENSORS 5       /* ids, weight, opt_state, meta, counters */

/* Tensors of one table as load_rows() receives them: an all-in-memory table stages whole
 * copies until the set is complete; a tiered one writes each piece into the backing
 * file's records at once (record i: row i of the checkpoint). */
typedef struct ed_stage {
    void *data[ED_NTENSORS];    /* owned (malloc) whole copies (tiered: counters only) */
    int64_t n[ED_NTENSORS];     /* rows of each */
    int64_t got[ED_NTENSORS];   /* rows arrived */
    int32_t have;               /* bit k: tensor k complete */
    int32_t begun;              /* tiered: the backing file was emptied for this load */
    ed_keys index;              /* tiered: id -> record, as records are finished */
    /* tiered: records [0, flushed) are in the file, finished or waiting for the row
     * tensors still to reach them; the window holds records [flushed, flushed + win_cap),
     * put together in memory from the pieces that reached them (ckpt.c ed_tier_piece) */
    char *win;                  /* owned (calloc) [win_cap records]; those from `used` on
                                 * are zero and were never touched (their pages unmapped) */
    int64_t win_cap, flushed, used;
    int64_t read0, written0;    /* tiered: the file's byte counters when the load began */
} ed_stage;

typedef struct ed_candidate {
    int64_t k1, k2, id;     /* sort keys: (k1, k2, id) ascending is eviction order */
    int64_t ref;
} ed_candidate;

/* The backing tier of one table (tier.c). */
/* cache_bytes = auto after the exact profile: a spatially hashed sample of the id stream
 * for the rest of the run (profile.c, SHARDS), whose stack distances see reuse longer
 * than the profiled window. */
#define ED_SH_BUCKETS 1408      /* log-linear: 32 a power of two, distances below 2^48 */
typedef struct ed_shards {
    uint64_t thresh;        /* an id is sampled iff ed_hash(id) >> 32 < thresh (>= 1) */
    ed_keys last;           /* sampled id -> position of its last sampled access */
    int32_t *fw;            /* Fenwick tree over positions [0, fw_n): 1 at each last access;
                             * NULL until the first profiled batch starts the sample */
    int64_t fw_n, pos;      /* its size; the next position */
    double *hist;           /* [ED_SH_BUCKETS] reuse weight (1/rate) by scaled distance */
    double reuse_w;         /* their sum */
    double adj;             /* ids seen - sampled ids / rate: SHARDS_adj's correction */
    int64_t reuses;         /* sampled re-references counted */
    int64_t next_check;     /* profiled batch at which the cache size is chosen again */
} ed_shards;

typedef struct ed_tier {
    int fd;                 /* the backing file, -1 when tiering is off */
    char *path;             /* owned (malloc) */
    ed_keys index;          /* id -> record number in the file */
    _Atomic int64_t file_only;      /* rows in the file and not in the cache */
    _Atomic int64_t fetches, writebacks, bytes_read, bytes_written;
    _Atomic int64_t prefetched;     /* rows brought in by prefetch (not by a lookup) */
    _Atomic int64_t trimmed;        /* rows moved out by ed_trim (the host's data thread) */
    _Atomic int64_t fresh;          /* ids in neither tier the prefetch saw since the last
                                     * trim: rows the lookups will create */
    int64_t *profile;       /* cache_bytes = auto: ids of the profiled batches, owned */
    int64_t nprofile, profile_cap;
    int64_t batches;        /* training lookups profiled so far */
    int64_t max_batch;      /* largest distinct ids of one profiled batch */
    int64_t chosen_rows;    /* the rows cache_bytes = auto chose; 0 before */
    ed_shards sh;           /* cache_bytes = auto: the sample of the rest of the run */
    pthread_mutex_t plock;  /* the profile's state (training lookups of several threads) */
    int plock_ready;
    /* The file is a sequence of segments of wcap records (1 MiB, tier.c): records are
     * appended to the open one, staged in wbuf, and cleaning empties the others. */
    char *wbuf;             /* the open segment's records, owned (malloc) [wcap] */
    int64_t wcap;           /* records a segment */
    int64_t wseg;           /* the open segment, -1 when none */
    int64_t wn, wdone;      /* its records staged; of those, written to the file */
    int64_t nseg, seg_cap;  /* segments the file spans; seg_live's and seg_free's size */
    int32_t *seg_live;      /* [seg_cap] live records of each segment, -1 when free */
    int64_t *seg_free;      /* [seg_cap] the free segments, a stack */
    int64_t nfree;
    int64_t garbage;        /* dead records of the closed segments (neither open nor free) */
    int64_t cleaned;        /* segments cleaned */
    int64_t moved;          /* live records cleaning moved to the open segment */
    int64_t from_cache;     /* of those, written from the cache, not read from the file */
    void *ring;             /* struct io_uring of the prefetch's reads (owned), or NULL:
                             * pread (backing_io, tier.c) */
    _Atomic int64_t ring_reads;     /* records read through it */
} ed_tier;

typedef struct ed_table {
    const char *name;       /* borrowed from the spec */
    int32_t dim;            /* D */
    int32_t init;           /* grm_emb_init */
    double init_scale;
    uint64_t seed;
    uint64_t name_hash;     /* grm_str_hash64(name) */

    pthread_rwlock_t lock;  /* read: lookup/update batches; write: grow, evict, load */
    int lock_ready;
    ed_keys keys;
    ed_pool pools[2];       /* [0] hot FP32, [1] cold FP16 */
    _Atomic int64_t pending;    /* ids of batches in flight (reserved room) */
    _Atomic uint32_t stripes[ED_STRIPES];   /* row sequence locks: odd while written */

    _Atomic int64_t clock;      /* largest step passed to update */
    _Atomic int64_t lookups, misses, evictions, version;
    _Atomic int64_t last_sweep; /* step of the last TTL sweep */

    int64_t max_rows;           /* live-row budget: cfg.max_rows, or the cache's rows when
                                 * tiered (0 while cache_bytes = auto is profiling) */
    ed_tier tier;
    ed_candidate *cand;         /* eviction workspace, owned (malloc) */
    int64_t cand_cap;
    ed_candidate *tcand;        /* ed_trim's, kept across its holds of the lock (owned) */
    int64_t tcand_cap;
    ed_export exp;
    ed_stage stage;
    char *tensor_names[ED_NTENSORS];    /* owned (malloc) */
} ed_table;

typedef struct ed_store {
    const grm_host_api *host;   /* static */
    ed_config cfg;
    grm_optimizer opt;          /* ops NULL when none given */
    int32_t S;                  /* optimizer state floats per element */
    int32_t ntables;
    ed_table *tables;           /* owned (malloc) [ntables] */
    ed_to_f16_fn to_f16;
    ed_from_f16_fn from_f16;
    int tiered;                 /* backing given: a cache over a backing file per table */
    int64_t cache_bytes;        /* tiered: budget per table; -1 = auto */
} ed_store;

/* ---- table.c ---- */
grm_status ed_keys_init(const ed_store *s, ed_keys *k, int64_t M, int32_t lanes);
void ed_keys_fini(const ed_store *s, ed_keys *k);
int64_t ed_keys_slots_for(int64_t rows, int32_t lanes);
ed_slot *ed_keys_find_or_insert(ed_keys *k, int64_t id, uint64_t h, int *inserted);
/* ed_keys_find_or_insert without the counts: a batch claims its new keys and adds their
 * number to used and live once a range (ed_keys_add), not with two atomic adds a key.
 * Room for them was reserved before the batch (ed_reserve counts pending ids), so nothing
 * reads the counts short meanwhile. */
ed_slot *ed_keys_claim(ed_keys *k, int64_t id, uint64_t h, int *inserted);
void ed_keys_add(ed_keys *k, int64_t n);
grm_status ed_keys_rebuild(const ed_store *s, ed_keys *k, int64_t M);
void ed_keys_remove(ed_keys *k, ed_slot *slot);

/* ---- chunks.c ---- */
void ed_pool_setup(ed_pool *p, int32_t half, int32_t D, int32_t S, int64_t chunk_rows);
void ed_pool_fini(const ed_store *s, ed_pool *p);
int64_t ed_pool_capacity(const ed_pool *p);
grm_status ed_pool_ensure(const ed_store *s, const ed_table *t, ed_pool *p, int64_t rows);
int64_t ed_pool_alloc(ed_pool *p);
void ed_pool_release(ed_pool *p, int64_t index);
void ed_pool_reset(ed_pool *p);
size_t ed_pool_bytes(const ed_pool *p);

static inline char *ed_pool_record(const ed_pool *p, int64_t index)
{
    return p->chunks[index >> p->chunk_shift]
           + (size_t)(index & (p->chunk_rows - 1)) * p->rec_bytes;
}

static inline char *ed_record(const ed_table *t, int64_t ref)
{
    return ed_pool_record(&t->pools[ref & 1], ref >> 1);
}

/* Ask for the cache lines of the metadata and the row of record ref (records are not
 * line-aligned, so the lines from its first byte to its row's last), at most ED_PF_LINES. */
#define ED_PF_LINES 10
static inline void ed_record_prefetch(const ed_table *t, int64_t ref)
{
    const char *rec = ed_record(t, ref);
    const uintptr_t first = (uintptr_t)rec & ~(uintptr_t)63;
    const uintptr_t last = (uintptr_t)rec + sizeof(ed_meta) + t->pools[ref & 1].row_bytes - 1;
    int lines = (int)((last - first) / 64) + 1;
    if (lines > ED_PF_LINES) lines = ED_PF_LINES;
    for (int l = 0; l < lines; l++) __builtin_prefetch((const char *)first + 64 * l, 1, 3);
}

static inline ed_meta *ed_rec_meta(char *rec)
{
    return (ed_meta *)(void *)rec;
}

static inline void *ed_rec_row(char *rec)
{
    return rec + sizeof(ed_meta);
}

static inline float *ed_rec_state(const ed_pool *p, char *rec)
{
    return (float *)(void *)(rec + sizeof(ed_meta) + p->row_bytes);
}

void ed_to_f16_soft(uint16_t *dst, const float *src, int32_t n);
void ed_from_f16_soft(float *dst, const uint16_t *src, int32_t n);
int ed_have_f16c(void);
void ed_to_f16_f16c(uint16_t *dst, const float *src, int32_t n);
void ed_from_f16_f16c(float *dst, const uint16_t *src, int32_t n);

grm_status ed_reserve(const ed_store *s, ed_table *t, int64_t n);
void ed_release(ed_table *t, int64_t n);
void ed_record_fill(const ed_store *s, const ed_table *t, int64_t ref, int64_t id,
                    int64_t now);
void ed_row_initial(const ed_store *s, const ed_table *t, float *out, int64_t id);

/* ---- rows and row locks, inline: every lookup and update runs them ---- */

/* n floats from src to dst: whole 64-byte blocks as fixed-size copies, which the compiler
 * turns into vector moves in place of a call to libc's memcpy for every row, and the rest
 * through memcpy. */
static inline void ed_copy_floats(float *restrict dst, const float *restrict src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) memcpy(dst + i, src + i, 64);
    if (i < n) memcpy(dst + i, src + i, (size_t)(n - i) * sizeof(float));
}

static inline void ed_row_read(const ed_store *s, const ed_table *t, int64_t ref,
                               float *out /* [D] */)
{
    char *rec = ed_record(t, ref);
    if (t->pools[ref & 1].half) s->from_f16(out, ed_rec_row(rec), t->dim);
    else ed_copy_floats(out, (const float *)ed_rec_row(rec), t->dim);
}

/* Row locks are sequence locks (seqlocks: Lameter, "Effective Synchronization on
 * Linux/NUMA Systems", 2005; Linux's seqcount_t), one per stripe of ids. A writer (an
 * update, a training lookup's access count, a promotion) makes the stripe's sequence odd
 * with a CAS, writes, and makes it even again; a plain lookup takes no lock and writes no
 * shared memory: it reads the sequence, copies the row, and copies again when the
 * sequence was odd or has moved. A reader therefore never returns a torn row or one a
 * promotion has freed (chunks are never unmapped while batches run), and lookups of the
 * same hot rows from several threads do not bounce a lock's cache line between them.
 * The copy races with a writer by design; its result is used only when the sequence says
 * no writer ran (Boehm, "Can Seqlocks Get Along with Programming Language Memory
 * Models?", MSPC 2012, §3: the fences below are the ones it derives). */
static inline _Atomic uint32_t *ed_stripe(ed_table *t, uint64_t h)
{
    return &t->stripes[(h >> 40) & (ED_STRIPES - 1)];
}

static inline void ed_stripe_lock(ed_table *t, uint64_t h)
{
    _Atomic uint32_t *q = ed_stripe(t, h);
    for (int spins = 0;; spins++) {
        uint32_t v = atomic_load_explicit(q, memory_order_relaxed);
        if (!(v & 1)
            && atomic_compare_exchange_weak_explicit(q, &v, v + 1, memory_order_acquire,
                                                     memory_order_relaxed))
            return;
        if (spins > 64) sched_yield();     // a holder that lost its core gets it back
    }
}

static inline void ed_stripe_unlock(ed_table *t, uint64_t h)
{
    _Atomic uint32_t *q = ed_stripe(t, h);
    atomic_store_explicit(q, atomic_load_explicit(q, memory_order_relaxed) + 1,
                          memory_order_release);
}

/* The sequence a reader starts from: even, and read before the row. */
static inline uint32_t ed_stripe_read_begin(ed_table *t, uint64_t h)
{
    _Atomic uint32_t *q = ed_stripe(t, h);
    for (int spins = 0;; spins++) {
        const uint32_t v = atomic_load_explicit(q, memory_order_acquire);
        if (!(v & 1)) return v;
        if (spins > 64) sched_yield();
    }
}

/* 1 when a writer ran since ed_stripe_read_begin returned v: what was read is discarded. */
static inline int ed_stripe_read_retry(ed_table *t, uint64_t h, uint32_t v)
{
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(ed_stripe(t, h), memory_order_relaxed) != v;
}

/* A plain lookup's row: the slot's current reference and its row, copied under no lock. */
static inline void ed_row_read_shared(const ed_store *s, ed_table *t, uint64_t h,
                                      const ed_slot *slot, float *out /* [D] */)
{
    for (;;) {
        const uint32_t v = ed_stripe_read_begin(t, h);
        const int64_t ref = atomic_load_explicit(&slot->ref, memory_order_acquire);
        ed_row_read(s, t, ref, out);
        if (!ed_stripe_read_retry(t, h, v)) return;
    }
}

/* ---- evict.c ---- */
grm_status ed_evict_ttl(const ed_store *s, ed_table *t, int64_t now);
grm_status ed_evict_budget(const ed_store *s, ed_table *t, int64_t protect_from);
grm_status ed_evict_ref(const ed_store *s, ed_table *t, int64_t ref);
grm_status ed_trim(const ed_store *s, ed_table *t, int64_t keep_from);

/* ---- ops.c ---- */
grm_status ed_lookup_batch(const ed_store *s, ed_table *t, float *out, const int64_t *ids,
                           int64_t n, int insert);
grm_status ed_update_batch(const ed_store *s, ed_table *t, const int64_t *ids,
                           const float *grads, int64_t n, int64_t step);
grm_status ed_prefetch_batch(const ed_store *s, ed_table *t, const int64_t *ids, int64_t n);

/* ---- tier.c ---- */
grm_status ed_tier_open(const ed_store *s, ed_table *t);
void ed_tier_close(const ed_store *s, ed_table *t);
grm_status ed_tier_fetch(const ed_store *s, ed_table *t, int64_t ref, int64_t id, int64_t now);
/* Up to ED_TIER_RING records at once: refs [n] fresh cache records of ids [n], index [n]
 * their file records (the prefetch's misses of one chunk). */
#define ED_TIER_RING 64
grm_status ed_tier_fetch_many(const ed_store *s, ed_table *t, const int64_t *refs,
                              const int64_t *ids, const int64_t *index, int64_t n);
grm_status ed_tier_read_row(const ed_store *s, ed_table *t, int64_t id, float *out,
                            int *found);
grm_status ed_tier_reserve(const ed_store *s, ed_table *t, int64_t n);
grm_status ed_tier_evict(const ed_store *s, ed_table *t, int64_t ref);
grm_status ed_tier_flush(const ed_store *s, ed_table *t);
/* The ids of the rows only the file holds, appended to ids from position n; returns the
 * new count. Caller holds the write lock and sized ids for n + file_only. */
int64_t ed_tier_collect(const ed_table *t, int64_t *ids, int64_t n);
/* A file record wanted by a reader: its number and the caller's tag. */
typedef struct ed_recref {
    int64_t r, tag;
} ed_recref;
/* Called by ed_tier_visit for each wanted file record r with its checked bytes rec,
 * valid for the call. */
typedef grm_status (*ed_tier_visit_fn)(void *ctx, int64_t tag, int64_t r, char *rec);
grm_status ed_tier_visit(const ed_store *s, ed_table *t, const ed_recref *want, int64_t n,
                         ed_tier_visit_fn visit, void *ctx);
/* Record numbers the backing file spans: its segments' records. */
static inline int64_t ed_tier_nrec(const ed_tier *tr)
{
    return tr->nseg * tr->wcap;
}
grm_status ed_tier_expect(const ed_store *s, const ed_table *t, int64_t r, const char *rec,
                          int64_t id);
/* Load (ckpt.c): the file restarts empty (and the cache with it); records [first,
 * first + n) are then read (read: 1) or written as a block; ed_tier_seal stores a finished
 * record's checksum; ed_tier_load_end makes records [0, n) the file's, index theirs. */
grm_status ed_tier_load_begin(const ed_store *s, ed_table *t);
grm_status ed_tier_block(const ed_store *s, ed_table *t, int64_t first, int64_t n, char *buf,
                         int read);
void ed_tier_seal(const ed_table *t, char *rec);
grm_status ed_tier_load_end(const ed_store *s, ed_table *t, ed_keys *index, int64_t n);

/* ---- profile.c: cache_bytes = auto ---- */
grm_status ed_profile_batch(const ed_store *s, ed_table *t, const int64_t *ids, int64_t n);
int64_t ed_cache_row_bytes(const ed_table *t);
void ed_profile_fini(const ed_store *s, ed_table *t);

/* ---- ckpt.c ---- */
grm_status ed_export_table(const ed_store *s, ed_table *t);
/* Rows [row0, row0 + n) of tensor k of table t into out (ids, weight, state, meta; the
 * counters' row0/n index them), from the ids snapshot taken by ed_export_describe; a
 * table changed since is GRM_EINTERNAL. */
grm_status ed_export_rows(const ed_store *s, ed_table *t, int k, int64_t row0, int64_t n,
                          void *out);
/* The snapshot of table t's ids at its version (taken when the version moved): *rows. */
grm_status ed_export_describe(const ed_store *s, ed_table *t, int64_t *rows);
grm_status ed_load_rows(const ed_store *s, ed_table *t, int k, const grm_named_tensor *in,
                        int64_t row0, int64_t rows);
void ed_stage_clear(const ed_store *s, ed_stage *st);
void ed_export_free(ed_export *e);

#endif /* EMB_DYNAMIC_H */

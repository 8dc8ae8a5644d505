/* grm/emb.h - embedding stores: tables of rows keyed by int64 ids, the row optimizer
 * kept beside them (DESIGN.md §3). The host dedups ids and sums their gradients before
 * calling update, so a store sees each id at most once per update call. */
#ifndef GRM_EMB_H
#define GRM_EMB_H

#include <stdint.h>

#include <grm/opt.h>
#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Row initializers. Stored in int32_t. */
typedef enum grm_emb_init {
    GRM_EMB_INIT_ZEROS = 0,
    GRM_EMB_INIT_UNIFORM = 1,   /* U(-a, a) */
    GRM_EMB_INIT_NORMAL = 2     /* N(0, a^2) */
} grm_emb_init;

/* One physical table, as the host derives it from the [feature.*] sections. */
typedef struct grm_emb_table_spec {
    const char *name;       /* table name, borrowed for the instance's life */
    int64_t rows;           /* capacity hint (static stores: exact; ids in [0, rows)) */
    int32_t dim;            /* floats per row */
    int32_t init;           /* grm_emb_init */
    double init_scale;      /* `a` of the initializer */
    uint64_t seed;          /* rows are a pure function of (seed, table, id) */
} grm_emb_table_spec;

/* lookup flags */
#define GRM_EMB_INSERT 1u   /* create missing rows with the initializer (training) */

/* grm_emb_ops.flags (since 1.3) */
#define GRM_EMB_ANY_ID 1u   /* any int64 id is a key (a hash store), not a row index in
                             * [0, rows): the host may then merge tables whose specs agree
                             * into one key space (MTGRBoost §4.2) */
#define GRM_EMB_LOAD_INTERLEAVED 2u /* load_rows takes the pieces of its tensors
                             * interleaved (each tensor's in order from row 0), as
                             * grm_ckpt_ops.load_rows_interleaved hands them. since 1.13 */

/* Counters of one table; filled by the optional stats op. */
typedef struct grm_emb_stats {
    int64_t rows;           /* rows present */
    int64_t capacity;       /* rows that fit without growing */
    int64_t bytes;          /* memory held, rows and state */
    int64_t lookups;        /* ids looked up */
    int64_t misses;         /* ids not present at lookup */
    int64_t evictions;      /* rows evicted */
} grm_emb_stats;

typedef struct grm_emb_ops {
    uint32_t struct_size;  /* sizeof(grm_emb_ops) */

    /* (required) Create the tables. tables [ntables] and opt are borrowed for the
     * instance's life. *inst: owned, release with destroy. Fails cleanly (nothing left
     * allocated) with GRM_ENOMEM or GRM_EINVAL. */
    grm_status (*create)(const void *config, const grm_emb_table_spec *tables,
                         int32_t ntables, const grm_optimizer *opt, void **inst);

    /* (required) Release everything; NULL is accepted. */
    void (*destroy)(void *inst);

    /* (required) Copy the rows of ids [n] of `table` into rows [n, dim]. A missing id is
     * created (flags & GRM_EMB_INSERT) or read as its initial value without being stored.
     * An id the store cannot hold is GRM_EINVAL naming the table and id. Thread-safe
     * against concurrent lookups without INSERT only. */
    grm_status (*lookup)(void *inst, float *rows, int32_t table, const int64_t *ids,
                         int64_t n, uint32_t flags);

    /* (required) Apply the row optimizer to the rows of unique ids [n] with summed
     * gradients grads [n, dim]; only those rows change. `step` is the global step. */
    grm_status (*update)(void *inst, int32_t table, const int64_t *ids, const float *grads,
                         int64_t n, int64_t step);

    /* (required) The index-th tensor of the store's state for checkpoints (rows,
     * optimizer state, counters), or GRM_ENOTFOUND past the last. The tensor borrows the
     * store's memory until the next non-const call. */
    grm_status (*tensors)(void *inst, int32_t index, grm_named_tensor *out);

    /* (required) Restore one tensor written by tensors(); GRM_ENOTFOUND for a name the
     * store does not know, GRM_EFORMAT for a shape that does not fit. */
    grm_status (*load)(void *inst, const grm_named_tensor *t);

    /* (optional; if NULL, the host reports no table counters) Counters of `table`.
     * since 1.1 */
    grm_status (*stats)(void *inst, int32_t table, grm_emb_stats *out);

    /* GRM_EMB_* capability bits; a store built before 1.3 (a shorter struct_size) reads as
     * 0: ids index rows, tables are never merged. since 1.3 */
    uint32_t flags;

    /* (optional; if NULL, nothing is prefetched and lookups fetch what they miss) Bring
     * the rows of ids [n] of `table` into the store's fast tier ahead of the lookup that
     * will ask for them (the host calls it from its data thread with the next batch's ids
     * while the current batch trains). It changes no row value and counts no access, and
     * it must not evict the rows the current batch looked up before that batch's update
     * (seed 003 §2.2). Thread-safe against one concurrent lookup or update of the
     * trainer's thread; it must not use host->parallel_for. ids: borrowed for the call.
     * GRM_EIO / GRM_EFORMAT when a slower tier fails. With n == 0 it is a question: GRM_OK
     * when `table` has a slower tier to prefetch from, GRM_ENOTSUP (no message) when all
     * its rows are in memory, so the host spares the work of finding ids to prefetch (a
     * store of 1.6 answers GRM_OK). since 1.6 */
    grm_status (*prefetch)(void *inst, int32_t table, const int64_t *ids, int64_t n);

    /* (optional; if NULL, the host checkpoints the store through tensors() and load(),
     * each tensor whole in memory) The checkpoint's tensors a range of rows at a time, so
     * that a store larger than memory (a tiered one) is saved in memory bounded by the
     * range. With rows NULL: describe the index-th tensor as tensors() would (name, dtype,
     * the whole tensor's shape) with data NULL, or GRM_ENOTFOUND past the last, copying no
     * row. With rows non-NULL: copy rows [row0, row0 + n) of that tensor (a row: its first
     * dim) into rows, in the order tensors() exports them; out may be NULL. Between the
     * description and the last range the host calls no lookup with GRM_EINSERT and no
     * update; a store that changed meanwhile answers GRM_EINTERNAL. Thread-safe against
     * prefetch. since 1.10 */
    grm_status (*tensor_rows)(void *inst, int32_t index, grm_named_tensor *out, int64_t row0,
                              int64_t n, void *rows);

    /* (optional; if NULL, the host restores whole tensors with load()) Restore a piece of
     * a tensor written by tensors(): rows [row0, row0 + piece->tensor.shape[0]) of a
     * tensor of `rows` rows, its other dims those of the whole tensor. A tensor's pieces
     * come in order, back to back from row 0, and end before another tensor's begin
     * (with GRM_EMB_LOAD_INTERLEAVED in flags: or between other tensors' pieces); tensors
     * come in any order. load(t) is load_rows(t, 0, t's rows). since 1.10 */
    grm_status (*load_rows)(void *inst, const grm_named_tensor *piece, int64_t row0,
                            int64_t rows);

    /* (optional; if NULL, every key of [embedding] defines the model) 1 when parameter
     * `key` of this store, as configured, only places its rows: where they are kept and
     * how they are found and read (a cache's size, a backing directory), not what
     * training computes; else 0. A checkpoint resumed under other values of such keys
     * trains the same model, so the host does not warn that it trains another. since
     * 1.11 */
    int (*placement)(void *inst, const char *key);

    /* (optional; if NULL, the trainer's own lookups and updates keep the fast tier within
     * its budget, on the trainer's time) Bring `table`'s fast tier back under its budget
     * now, ahead of the lookups that would otherwise have to make room: the host calls it
     * from its data thread after each prefetch, so the rows leave the cache (and dirty
     * ones are written back) while the trainer computes. keep_from is a global step: every
     * row the store stamped at a step in progress >= keep_from (looked up, updated or
     * prefetched while the last update applied was keep_from - 1 or later) must stay; the
     * host passes the step at which the oldest batch not yet applied was prefetched, so
     * the rows of every batch in flight stay (seed 003 §2.2). It changes no row value, so
     * a checkpoint between two calls of tensor_rows() is the same. GRM_OK when there was
     * nothing to do. Thread-safety and I/O errors as prefetch. since 1.12 */
    grm_status (*trim)(void *inst, int32_t table, int64_t keep_from);
} grm_emb_ops;

#ifdef __cplusplus
}
#endif
#endif /* GRM_EMB_H */

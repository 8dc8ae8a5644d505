/* core/dist.h - model-parallel embedding lookup and update over a communicator, with two-stage
 * id dedup (MTGRBoost §3 hybrid parallelism, §4.3 two-stage ID deduplication; FusedRec §3,
 * Algorithm 1: segment unique, rankwise sort, alltoall, deferred category-aware lookup at the
 * destination, recovery from the saved inverse indices) and optional hierarchical sparse
 * parallelism (TurboGR §4.2.1).
 *
 * Sharding. Rank r of a job of N ranks owns the rows of the ids with
 *   owner(id) = base(r) + fmix64(id) % I
 * where I is the group size (opts.group_size; 0 means I = N, one group, base 0) and base(r) =
 * (r / I) * I. fmix64 is grm_mix64, the function grm__sparse_ids_partition uses, so
 * with I = N this is exactly core/sparse.h's partition. Each rank's `store` holds only the rows
 * it owns (an emb-dynamic store simply never sees the others).
 *
 * Lookup of one physical table (after table merging, MTGRBoost §4.2, one table is one fused
 * spec group of FusedRec §3):
 *   1. stage-1 dedup of the caller's ids (opts.dedup1; or the caller already ran
 *      grm__sparse_segment_unique and passes unique ids and its pre-dedup count n_raw),
 *   2. ids partition by owner (rankwise sort; positions I_s kept),
 *   3. alltoallv of the per-owner counts, then of the ids (and, when opts.nfeatures > 0, of the
 *      per-id feature index: FusedRec's category information, deferred to the owner),
 *   4. stage-2 dedup of the received ids (ids from different ranks repeat; inverse I_l kept),
 *   5. one store lookup of the unique received ids,
 *   6. alltoallv of the rows back (each block carries one status float, so a failed store
 *      lookup on an owner fails the call on every requester without an extra collective),
 *   7. recovery into the caller's order through I_s and the stage-1 inverse.
 * Update mirrors it: gradients go to the owners (alltoallv), the owner sums the gradients of
 * equal ids from all ranks (scatter-add over I_l) and calls the store's update once per unique
 * id. Update may reuse the routing of the table's last lookup (ids == NULL): then only the
 * gradient rows travel.
 *
 * Hierarchical mode (I < N, N % I == 0): M = N / I groups each hold a full replica sharded
 * inside the group; id and row exchanges are confined to the group (zero counts to the other
 * ranks of the world alltoallv, since the comm ABI has no split). Replicas stay identical:
 * after the in-group gradient exchange, the M owners of one shard position (ranks l, l + I,
 * l + 2I, ...) exchange their (unique id, summed gradient) lists with one alltoallv of counts,
 * one of ids and one of rows confined to those peers; every peer concatenates the lists in
 * group order, dedups the union and sums in that order, so all replicas apply bitwise the same
 * update. Cost per update: each owner sends its U unique ids (8 B) and rows (4 D B) to M - 1
 * peers, (M - 1) * U * (8 + 4 D) bytes, against an allreduce over a union id list, which would
 * first need the union (an id allgather) and then reduce [union, D] rows that are mostly
 * zeros for any one group. Summation order differs from flat mode (per group, then across
 * groups), so hierarchical and flat results agree bitwise only when the sums are exact.
 *
 * Collectives: every call below except grm__dist_counters / grm__dist_feature_served is
 * collective. Every rank must make the same sequence of calls with the same table; argument
 * errors are reported before any communication. A failing store lookup fails the lookup on
 * every rank; a failing store update fails only on the owner that saw it (the others return
 * GRM_OK), and the caller is expected to stop the job.
 *
 * Threads: one thread per grm__dist at a time. Memory grows on first use and is reused
 * (no allocation in steady state). CPU buffers, float32 rows. Not part of the plugin ABI. */
#ifndef GRM_DIST_H
#define GRM_DIST_H

#include <stdint.h>

#include <grm/grm.h>

typedef struct grm__dist grm__dist;

/* Options; zero-initialised is flat, no stage-1 dedup inside, stage-2 dedup off. Use
 * grm__dist_opts_default for the usual settings. Identical on every rank (checked). */
typedef struct grm__dist_opts {
    int32_t group_size;        /* I of TurboGR §4.2.1: ranks per replica group; 0: the world */
    int32_t dedup1;            /* 1: lookup/update dedup the caller's ids first (stage 1) */
    int32_t dedup2;            /* 1: the owner dedups the received ids before its store lookup
                                  (stage 2); update always dedups, the store needs unique ids */
    int32_t nfeatures;         /* > 0: lookups carry a feature index per id (FusedRec deferred
                                  category information) and the owner counts ids served per
                                  feature; 0: no feature exchange */
    int32_t ahead;             /* 1: every lookup also carries the keys of the caller's next
                                  batch to their owners (grm__dist_lookup_ahead; none from a
                                  plain grm__dist_lookup), one more count per pair and one
                                  more alltoallv of ids; 0: no such exchange */
    const char *const *table_names;   /* [ntables] borrowed for the instance's life, or NULL
                                         (tables are then named by index in messages) */
} grm__dist_opts;

/* group_size 0, dedup1 1, dedup2 1, nfeatures 0, table_names NULL. */
grm__dist_opts grm__dist_opts_default(void);

/* Counters of one operation (lookup or update). Bytes count only data that leaves the rank
 * (the block a rank sends itself is not communication). */
typedef struct grm__dist_stats {
    int64_t calls;
    int64_t ids_raw;           /* ids before stage 1 (the caller's n_raw, or n) */
    int64_t ids_unique;        /* after stage 1: ids partitioned and sent (own rank included) */
    int64_t ids_sent;          /* of those, ids sent to other ranks */
    int64_t ids_recv;          /* ids received as owner (own rank included): input of stage 2 */
    int64_t ids_store;         /* ids passed to the store (after stage 2 when it is on) */
    int64_t id_bytes;          /* bytes sent in count, id and feature exchanges */
    int64_t row_bytes;         /* bytes sent in row / gradient exchanges (status floats too) */
    int64_t rounds;            /* alltoallv calls */
    int64_t sync_ids;          /* hierarchical: ids sent to peer owners of other groups */
    int64_t sync_bytes;        /* hierarchical: bytes of the replica sync (counts, ids, rows) */
    int64_t ids_ahead;         /* opts.ahead: next-batch keys sent to other ranks */
    int64_t ids_ahead_recv;    /* opts.ahead: next-batch keys received from other ranks */
} grm__dist_stats;

enum { GRM__DIST_LOOKUP = 0, GRM__DIST_UPDATE = 1 };

/* Create the distributed view of `store` (collective).
 *   comm    borrowed for the instance's life: the job's communicator
 *   ops     borrowed: the store's ops; store: borrowed, the local store (rows this rank owns)
 *   dims    [ntables] borrowed for the call: floats per row of each table, as the store's
 *   opts    borrowed for the call (table_names kept); NULL: grm__dist_opts_default()
 * All ranks must pass the same ntables, dims and opts: create allgathers them and every rank
 * refuses (GRM_EINVAL naming the first differing rank and value) when they differ.
 * Returns GRM_EINVAL (NULL argument, ntables < 1, dim < 1, group_size not dividing the world,
 * mismatch across ranks), GRM_ENOMEM, or the communicator's error. *out: owned, free with
 * grm__dist_destroy. */
grm_status grm__dist_create(const grm_comm_handle *comm, const grm_emb_ops *ops, void *store,
                            int32_t ntables, const int32_t *dims, const grm__dist_opts *opts,
                            grm__dist **out);
void grm__dist_destroy(grm__dist *d);   /* accepts NULL; not collective */

/* Look up the rows of ids [n] of `table` wherever they live (collective).
 *   ids   [n] borrowed: keys of the physical table; unique when the caller ran stage 1
 *         itself (duplicates are correct, they only cost bandwidth unless opts.dedup1)
 *   feat  [n] borrowed or NULL: feature index of each id in [0, opts.nfeatures) (ignored when
 *         opts.nfeatures is 0; NULL then counts nothing for this rank's ids)
 *   n_raw ids before the caller's own stage-1 dedup, for the counters (0: n)
 *   rows  [n, dim] out: rows[i] is the row of ids[i]
 *   flags grm_emb lookup flags (GRM_EMB_INSERT), passed to the owners' store lookups
 * The routing (positions, received ids, stage-2 inverse) is kept for grm__dist_update with
 * ids == NULL. Returns GRM_EINVAL (bad table, n < 0, NULL buffer with n > 0, feature index out
 * of range), GRM_ENOMEM, the communicator's error prefixed "dist lookup: table T: OP", or the
 * store's error (on the failing owner; the other ranks get GRM_EINTERNAL naming that rank). */
grm_status grm__dist_lookup(grm__dist *d, int32_t table, const int64_t *ids, const int32_t *feat,
                            int64_t n, int64_t n_raw, float *rows, uint32_t flags);

/* grm__dist_lookup that also sends the keys of the caller's next batch of `table`, ahead
 * [n_ahead] (borrowed, may repeat; NULL with 0), to their owners, so that an owner with a
 * slower tier can bring their rows in before that batch's lookup (seed 003 §2.2: the ids of
 * batch i+1 are known during batch i). The keys this rank owns are not sent (its own data
 * thread has them). The keys the other ranks sent this one, all owned here, come back in
 * *got [*n_got] (owned by d, valid until its next call; may repeat). Needs opts.ahead = 1,
 * and then every rank's lookups of a table exchange them, a plain grm__dist_lookup's none
 * (collective as grm__dist_lookup). Without opts.ahead, ahead is ignored and *n_got is 0. */
grm_status grm__dist_lookup_ahead(grm__dist *d, int32_t table, const int64_t *ids,
                                  const int32_t *feat, int64_t n, int64_t n_raw, float *rows,
                                  uint32_t flags, const int64_t *ahead, int64_t n_ahead,
                                  const int64_t **got, int64_t *n_got);

/* Apply gradients (collective): every id's owner receives the gradients of that id from all
 * ranks, sums them and calls the store's update once per unique id with `step`.
 *   ids   [n] borrowed, or NULL: the ids of this table's last grm__dist_lookup (then n must
 *         be that lookup's n, and only gradients travel)
 *   grads [n, dim] borrowed: grads[i] is the gradient of ids[i] (duplicates are summed)
 * Returns GRM_EINVAL (bad table, n < 0, NULL grads with n > 0, ids NULL without a matching
 * lookup), GRM_ENOMEM, the communicator's error prefixed "dist update: table T: OP", or the
 * store's error (on the owner that saw it only). */
grm_status grm__dist_update(grm__dist *d, int32_t table, const int64_t *ids, const float *grads,
                            int64_t n, int64_t step);

/* Counters of `op` (GRM__DIST_LOOKUP or GRM__DIST_UPDATE) of `table` (-1: summed over tables):
 * *last = the most recent call (of that table; with -1 the most recent call of any table),
 * *total = since create. Either output may be NULL. Not collective. GRM_EINVAL on bad table
 * or op. */
grm_status grm__dist_counters(const grm__dist *d, int32_t table, int32_t op,
                              grm__dist_stats *last, grm__dist_stats *total);

/* Ids this rank served as owner per feature for `table` since create, counted before stage 2
 * (one per requesting (rank, id) pair): served [opts.nfeatures] out. GRM_EINVAL when
 * opts.nfeatures is 0 or the table is bad. Not collective. */
grm_status grm__dist_feature_served(const grm__dist *d, int32_t table, int64_t *served);

/* The rank that owns `id` as seen from `rank` (the formula above); for tests and tools. */
int32_t grm__dist_owner(const grm__dist *d, int32_t rank, int64_t id);
/* The same without an instance: groups of `group` ranks (the world when not grouped); the
 * one definition of the ownership, also used by `grmhost reshard`. */
int32_t grm__dist_owner_of(int64_t id, int32_t rank, int32_t group);

#endif /* GRM_DIST_H */

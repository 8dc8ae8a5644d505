/* core/sparse.h - sparse-side services of the trainer: automatic table merging (MTGRBoost §4.2),
 * segment unique with layout recovery (FusedRec §3, Fig. 5, Algorithm 1; the first stage of
 * MTGRBoost §4.3's two-stage dedup), ids partition by destination rank (FusedRec §3 "rankwise
 * sort") and the pooling / feature operators of RecIS Table 1 (gather, scatter-add, reduce
 * sum/mean, sequence tile, bucketize, mod).
 *
 * Everything here is CPU, float32 rows and int64 ids, and free of trainer assumptions: the
 * caller owns every buffer it passes (borrowed for the call). Operators that need temporary
 * memory take a grm__sparse_work, a caller-owned growable buffer: it grows on first use and is
 * reused afterwards, so a training loop does no allocation in steady state (STYLE.md §8).
 * Parallel loops go through grm__parallel_for; every result is bitwise identical for any
 * number of threads (partitions and reduction orders never depend on the thread count).
 * Thread-safety: a function may be called from one thread at a time per workspace; plans are
 * immutable after build and may be shared. Not part of the plugin ABI. */
#ifndef GRM_SPARSE_H
#define GRM_SPARSE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <grm/grm.h>
#include <grm/rng.h>

/* ---- hashing ---- */

/* Ids are hashed with grm_mix64 (grm/rng.h): MurmurHash3's 64-bit finaliser (fmix64), the
 * mixing step MTGRBoost §4.1 uses, a bijection on 64-bit values. It picks unique partitions
 * and destination ranks here and in core/dist.c, and the SDK gives plugins the same one. */

/* ---- workspace ---- */

/* Temporary memory of the operators below. Zero-initialise (or grm__sparse_work_init) and
 * release with grm__sparse_work_fini. Owned by the caller; one per thread calling in. */
typedef struct grm__sparse_work {
    void *mem;       /* owned: 64-byte aligned */
    size_t bytes;    /* capacity of mem */
} grm__sparse_work;

void grm__sparse_work_init(grm__sparse_work *work);
void grm__sparse_work_fini(grm__sparse_work *work);   /* accepts NULL */

/* ---- table merging (MTGRBoost §4.2; fusion criterion of FusedRec §3) ---- */

/* How one feature wants its embedding table. Features with equal (dim, optimizer, init,
 * init_scale) and no explicit table share one physical table, each keeping its own id space
 * through the feature bits of the merged id. An explicit `table` name forces both sharing and
 * separation: all features naming the same table read the same rows (same id space, e.g. a
 * long and a short view of one item history) and that table is never merged with others.
 * All strings are borrowed for the duration of grm__sparse_plan_build (the plan copies). */
typedef struct grm__sparse_feature_spec {
    const char *name;        /* feature name, unique among the specs */
    int32_t dim;             /* embedding dimension, > 0 */
    const char *optimizer;   /* optimizer name ("adam", "sgd", ...) */
    const char *init;        /* initializer kind ("normal", "uniform", "zeros", ...) */
    double init_scale;       /* initializer scale (std or bound); compared exactly */
    const char *table;       /* explicit table name or NULL / "" for automatic merging */
} grm__sparse_feature_spec;

/* One physical table of a plan. */
typedef struct grm__sparse_table {
    char *name;              /* owned: the explicit name, or "merged<i>" */
    int32_t dim;
    char *optimizer;         /* owned */
    char *init;              /* owned */
    double init_scale;
    int32_t explicit_name;   /* 1 when named by the specs (never merged), else 0 */
    int32_t nslots;          /* m: id spaces held by this table (eq. 8's feature tables) */
    int32_t k;               /* ceil(log2(m + 1)): feature-identifier bits, MTGRBoost §4.2 */
    int64_t max_id;          /* 2^(63-k) - 1: the largest raw id a slot can hold */
    int32_t nfeatures;       /* features reading this table (>= nslots when shared) */
    int32_t *features;       /* owned: [nfeatures] indices into the specs, in spec order */
} grm__sparse_table;

/* Where one feature's ids go. */
typedef struct grm__sparse_slot {
    int32_t table;           /* index into plan->tables */
    int32_t index;           /* i of eq. 8: the feature's id space inside the table, [0, m) */
    int32_t k;               /* the table's k */
} grm__sparse_slot;

typedef struct grm__sparse_plan {
    int32_t ntables;
    grm__sparse_table *tables;   /* owned: [ntables], in order of their first feature */
    int32_t nfeatures;
    grm__sparse_slot *slots;     /* owned: [nfeatures], in spec order */
    char **feature_names;        /* owned: [nfeatures] copies of the spec names */
} grm__sparse_plan;

/* Build the merge plan of `n` features: group equal specs into tables, give each id space
 * its index i and each table its k = ceil(log2(m + 1)) (MTGRBoost §4.2).
 * specs: borrowed [n]. *out: owned, free with grm__sparse_plan_destroy.
 * Returns GRM_EINVAL (empty or duplicate feature name, dim <= 0, missing optimizer or init,
 * two features naming one table with different specs, more than 2^24 features), GRM_ENOMEM. */
grm_status grm__sparse_plan_build(const grm__sparse_feature_spec *specs, int32_t n,
                                  grm__sparse_plan **out);
void grm__sparse_plan_destroy(grm__sparse_plan *plan);   /* accepts NULL */

/* Encode a batch of raw ids of feature `feature` into its table's key space:
 * key = (i << (63 - k)) | x (eq. 8, MTGRBoost §4.2). out [n] may alias ids [n].
 * An id that does not fit (x < 0 or x > table max_id) is GRM_EINVAL naming the feature, the
 * id and the allowed range; out is then unspecified. Never a silent collision. */
grm_status grm__sparse_plan_encode(const grm__sparse_plan *plan, int32_t feature,
                                   int64_t *out, const int64_t *ids, int64_t n);

/* Decode keys [n] of table `table` back into (slot index i [n], raw id [n]). Either output may
 * be NULL. A key whose slot is >= the table's m is GRM_EINVAL. */
grm_status grm__sparse_plan_decode(const grm__sparse_plan *plan, int32_t table,
                                   int32_t *index, int64_t *ids, const int64_t *keys,
                                   int64_t n);

/* Print the plan, one line per table then one per feature, each line starting with
 * `indent` (e.g. for `grmhost check`). */
void grm__sparse_plan_print(FILE *f, const grm__sparse_plan *plan, const char *indent);

/* ---- segment unique (FusedRec §3, Fig. 5) ---- */

/* Remove duplicate ids within each feature of a fused group while keeping equal ids of
 * different features apart, in one pass over the group.
 *   ids       [n]    borrowed: the F features' ids, concatenated
 *   offsets   [F+1]  borrowed: feature f owns ids[offsets[f] .. offsets[f+1]); offsets[0] = 0,
 *                    non-decreasing, offsets[F] = n
 *   uniq_ids  [n]    out: the first *nuniq entries are the unique (feature, id) pairs
 *   uniq_feat [n]    out (may be NULL): their feature index
 *   counts    [F]    out (may be NULL): unique pairs per feature (they are contiguous in the
 *                    output, in feature order, so offsets of the unique group are its scan)
 *   inverse   [n]    out: I_u of FusedRec, uniq_ids[inverse[j]] == ids[j]
 *   *nuniq           out: U
 * Output order is first-occurrence order, which is feature-major because the input is; it does
 * not depend on the thread count. Work is hash-partitioned on hash(feature, id) so threads own
 * disjoint partitions (no atomics). O(n) expected time, ~40 bytes of workspace per id.
 * Returns GRM_EINVAL (bad offsets, n >= 2^40 or F >= 2^23), GRM_ENOMEM. */
grm_status grm__sparse_segment_unique(int64_t *uniq_ids, int32_t *uniq_feat, int64_t *counts,
                                      int64_t *inverse, int64_t *nuniq, const int64_t *ids,
                                      const int64_t *offsets, int64_t n, int32_t F,
                                      grm__sparse_work *work);

/* ---- ids partition (FusedRec §3 rankwise sort; RecIS Table 1 "ids partition") ---- */

/* Split ids [n] into contiguous runs by destination rank r = hash64(id) % nranks (equal ids of
 * different features go to the same rank, FusedRec §3), stable within each run.
 *   sorted_ids  [n]       out: the send buffer, rank-major
 *   sorted_feat [n]       out (may be NULL): feat[] permuted alike (feat may then not be NULL)
 *   pos         [n]       out: I_s of FusedRec, sorted_ids[pos[i]] == ids[i]
 *   rank_counts [nranks]  out: run lengths (the alltoall split sizes)
 *   feat        [n]       borrowed, may be NULL unless sorted_feat is wanted
 * Returns GRM_EINVAL (nranks < 1, sorted_feat without feat), GRM_ENOMEM. */
grm_status grm__sparse_ids_partition(int64_t *sorted_ids, int32_t *sorted_feat, int64_t *pos,
                                     int64_t *rank_counts, const int64_t *ids,
                                     const int32_t *feat, int64_t n, int32_t nranks,
                                     grm__sparse_work *work);

/* ---- embedding operators (RecIS Table 1: gather, scatter) ---- */

/* out[j, :] = rows[idx[j], :]. Also the forward recovery of FusedRec §3 (idx = I_u).
 *   out [n, D] out; rows [nrows, D] borrowed; idx [n] borrowed.
 * Returns GRM_EINVAL naming the first index outside [0, nrows) (out is then unspecified). */
grm_status grm__sparse_gather(float *out, const float *rows, const int64_t *idx, int64_t n,
                              int64_t nrows, int64_t D);

/* rows[idx[j], :] += src[j, :] for j in [0, n), duplicates summed. Also the backward of the
 * recovery (idx = I_u: gradients of the full layout summed into the unique rows).
 *   rows [nrows, D] in/out; src [n, D] borrowed; idx [n] borrowed.
 * Each row receives its contributions in increasing j, the order of the plain loop, so the
 * result is bitwise that of the sequential loop for any thread count: threads own disjoint
 * row partitions (hash of the row), no atomics.
 * Returns GRM_EINVAL naming the first index outside [0, nrows) (rows then unchanged),
 * GRM_ENOMEM. */
grm_status grm__sparse_scatter_add(float *rows, const float *src, const int64_t *idx,
                                   int64_t n, int64_t nrows, int64_t D,
                                   grm__sparse_work *work);

/* ---- pooling over jagged segments (RecIS Table 1: reduce, sequence tile) ---- */

typedef enum grm__sparse_pool_mode {
    GRM_SPARSE_POOL_SUM = 0,
    GRM_SPARSE_POOL_MEAN = 1,   /* an empty segment pools to zeros */
} grm__sparse_pool_mode;

/* out[b, :] = reduce over j in [offsets[b], offsets[b+1]) of rows[idx[j], :] (idx NULL: of
 * rows[j, :]); sum or mean. Summation in increasing j (deterministic).
 *   out [B, D] out; rows [nrows, D] (or [n, D] when idx is NULL); idx [n]; offsets [B+1].
 * Threads take ranges of segments balanced by element count (long-tailed segments).
 * Returns GRM_EINVAL (bad offsets, index out of range, bad mode). */
grm_status grm__sparse_segment_reduce(float *out, const float *rows, const int64_t *idx,
                                      const int64_t *offsets, int64_t B, int64_t nrows,
                                      int64_t D, int32_t mode);

/* Backward of grm__sparse_segment_reduce to the gathered layout:
 * grad_in[j, :] = grad_out[b, :] (sum) or grad_out[b, :] / len_b (mean) for j in segment b.
 * Chain with grm__sparse_scatter_add(idx) for the gradient of rows.
 *   grad_in [n, D] out (n = offsets[B]); grad_out [B, D]; offsets [B+1].
 * Returns GRM_EINVAL (bad offsets, bad mode). */
grm_status grm__sparse_segment_reduce_bwd(float *grad_in, const float *grad_out,
                                          const int64_t *offsets, int64_t B, int64_t D,
                                          int32_t mode);

typedef enum grm__sparse_tile_side {
    GRM_SPARSE_TILE_FIRST = 0,   /* rows offsets[b] .. offsets[b] + t - 1 */
    GRM_SPARSE_TILE_LAST = 1,    /* rows offsets[b+1] - t .. offsets[b+1] - 1 (most recent) */
} grm__sparse_tile_side;

/* Sequence tile, RecIS's "concat" pooling: out[b, s, :] for s < t = min(len_b, L) holds the
 * s-th of the first (or last) t rows of segment b, in sequence order; out[b, s, :] = 0 for
 * s >= t. Rows come from rows[idx[j]] (idx NULL: rows[j]).
 *   out [B, L, D] out; rows, idx, offsets as grm__sparse_segment_reduce.
 * Returns GRM_EINVAL (bad offsets, index out of range, L < 1, bad side). */
grm_status grm__sparse_tile(float *out, const float *rows, const int64_t *idx,
                            const int64_t *offsets, int64_t B, int64_t L, int64_t nrows,
                            int64_t D, int32_t side);

/* Backward of grm__sparse_tile to the gathered layout: grad_in[j, :] = grad_out[b, s, :] for
 * the rows the forward took, 0 for the others.
 *   grad_in [n, D] out (n = offsets[B]); grad_out [B, L, D]; offsets [B+1].
 * Returns GRM_EINVAL (bad offsets, L < 1, bad side). */
grm_status grm__sparse_tile_bwd(float *grad_in, const float *grad_out, const int64_t *offsets,
                                int64_t B, int64_t L, int64_t D, int32_t side);

/* ---- feature transforms (RecIS Table 1: bucketize, mod) ---- */

/* out[j] = the number of boundaries b <= values[j] (a value on a boundary goes to the bucket
 * above it; NaN past the last boundary): grm_bucketize of grm/transform.h, which says why,
 * checked and run on the pool.
 *   out [n] out; values [n]; boundaries [nb] sorted non-decreasing (nb may be 0).
 * Returns GRM_EINVAL (boundaries not sorted or NaN). */
grm_status grm__sparse_bucketize(int64_t *out, const float *values, int64_t n,
                                 const double *boundaries, int64_t nb);

/* out[j] = ids[j] mod m in [0, m) (floored, as torch.remainder / Python %), m >= 1.
 * Division by a precomputed reciprocal (no hardware divide). out may alias ids.
 * Returns GRM_EINVAL (m < 1). */
grm_status grm__sparse_mod(int64_t *out, const int64_t *ids, int64_t n, int64_t m);

#endif /* GRM_SPARSE_H */

/* kernels/grm_cuda.h - the C-callable launchers of grm's CUDA backend (STYLE.md §9, §12).
 *
 * Every function here is implemented in a kernels/<op>.cu file, compiled by nvcc as C++17 and
 * exported with C linkage; this header includes no CUDA header, so plain C11 code (plugins,
 * tests) calls the kernels through it: a stream travels as `void *` (NULL: the default
 * stream), device memory as plain pointers. Conventions:
 *  - arguments in memcpy order: outputs, inputs, sizes, workspace, stream;
 *  - pointers marked "device" point to GPU memory (grm_cuda_malloc); sizes given as
 *    integers are host values; shapes are written beside each pointer;
 *  - every launcher only enqueues work on the stream (no synchronisation) unless it says
 *    otherwise, and returns GRM_OK, GRM_EINVAL (bad sizes, named in the message),
 *    GRM_ENOTSUP (dtype), GRM_ENOMEM or GRM_EDEVICE (a CUDA error, with CUDA's string);
 *    the message is kept per thread and read with grm_cuda_last_error();
 *  - row kernels take a grm_dtype (GRM_DTYPE_F32, _F16, _BF16) for their row elements and
 *    accumulate in fp32;
 *  - thread-safety: launchers are reentrant; concurrent launches that write the same memory
 *    race as any two CUDA kernels would.
 * The CPU references the kernels mirror are listed in kernels/README.md. */
#ifndef GRM_CUDA_H
#define GRM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <grm/backend.h>
#include <grm/emb.h>
#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device and memory helpers (cuda_util.cu) ---- */

/* The number of usable CUDA devices; 0 when the driver is missing or too old, no device is
 * present or any other CUDA error occurs (never fails, never aborts). */
int grm_cuda_device_count(void);

/* The message of the last failed grm_cuda_* call on this thread ("" if none). Static per
 * thread; valid until the next failing call on the thread. */
const char *grm_cuda_last_error(void);

/* Allocate bytes of device memory into *ptr (owned; free with grm_cuda_free). bytes 0
 * gives NULL. GRM_ENOMEM or GRM_EDEVICE. */
grm_status grm_cuda_malloc(void **ptr, size_t bytes);
/* Free device memory from grm_cuda_malloc; NULL is accepted. */
void grm_cuda_free(void *ptr);
/* Synchronous copies host to device, device to host, and a device memset. */
grm_status grm_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes);
grm_status grm_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes);
grm_status grm_cuda_memset(void *dst, int value, size_t bytes);
/* Wait for the stream (NULL: the whole device) and report any asynchronous error. */
grm_status grm_cuda_sync(void *stream);

/* ---- rows: gather, scatter-add, pooling, sequence tile (embedding_ops.cu) ---- */

/* Pooling modes of grm_cuda_pool_fwd/bwd. */
enum grm_cuda_pool { GRM_CUDA_POOL_SUM = 0, GRM_CUDA_POOL_MEAN = 1 };

/* Gather rows: out[i] = table[idx[i]] for i < n; an index outside [0, rows) gives a zero
 * row. 128-bit loads and stores when D * element size is a multiple of 16 and the
 * pointers are 16-byte aligned. out [n, D] device, table [rows, D] device, idx [n] device
 * int64; dtype: grm_dtype of both; D in [1, 65536]. */
grm_status grm_cuda_gather_fwd(void *out, const void *table, const int64_t *idx, int64_t n,
                               int64_t rows, int32_t D, int32_t dtype, void *stream);

/* Scatter-add rows (the backward of gather): table[idx[i]] += src[i] for i < n; indices
 * outside [0, rows) are skipped. A warp walks a run of consecutive i and merges equal
 * neighbouring indices in registers before its atomic adds (RecIS §2.2.2), so sorted or
 * clustered index streams cost one atomic per run; the summation order of duplicates is
 * unspecified (fp32 atomics). table [rows, D] device, src [n, D] device, idx [n] device. */
grm_status grm_cuda_gather_bwd(void *table, const void *src, const int64_t *idx, int64_t n,
                               int64_t rows, int32_t D, int32_t dtype, void *stream);

/* Pooled reduction over jagged segments (an embedding bag): for s < S,
 * out[s] = sum over i in [offsets[s], offsets[s+1]) of table[idx[i]] (MEAN: divided by the
 * segment length; an empty segment gives 0). idx NULL means idx[i] = i (pool the rows of
 * table directly); indices outside [0, rows) count as zero rows. One warp per segment,
 * fp32 accumulation in registers, no atomics. out [S, D] device, table [rows, D] device,
 * idx [offsets[S]] device or NULL, offsets [S+1] device int64, non-decreasing. */
grm_status grm_cuda_pool_fwd(void *out, const void *table, const int64_t *idx,
                             const int64_t *offsets, int64_t S, int64_t rows, int32_t D,
                             int32_t dtype, int32_t mode, void *stream);

/* Backward of grm_cuda_pool_fwd: table_grad[idx[i]] += grad_out[s] (MEAN: / length) for
 * every i of segment s, accumulated into table_grad (not zeroed here), merging equal
 * consecutive ids of a segment before the atomic adds. Arguments as in pool_fwd. */
grm_status grm_cuda_pool_bwd(void *table_grad, const void *grad_out, const int64_t *idx,
                             const int64_t *offsets, int64_t S, int64_t rows, int32_t D,
                             int32_t dtype, int32_t mode, void *stream);

/* Sequence tile (jagged broadcast): out[t] = in[s] for every t in [offsets[s],
 * offsets[s+1]), e.g. a per-user vector repeated on each token of the user's sequence
 * (TurboGR §4.1: jagged, no padding). out [offsets[S], D] device, in [S, D] device. Its
 * backward is grm_cuda_seq_tile_bwd, a SUM pool over the same offsets. */
grm_status grm_cuda_seq_tile_fwd(void *out, const void *in, const int64_t *offsets, int64_t S,
                                 int32_t D, int32_t dtype, void *stream);
grm_status grm_cuda_seq_tile_bwd(void *grad_in, const void *grad_out, const int64_t *offsets,
                                 int64_t S, int32_t D, int32_t dtype, void *stream);

/* ---- ids: segment unique, rank partition, CSR of duplicates (segment_unique.cu) ---- */

/* Workspace bytes grm_cuda_segment_unique needs for n ids. */
grm_status grm_cuda_segment_unique_workspace(int64_t n, size_t *bytes);

/* Segment unique over a fused group (FusedRec §3, Fig. 5): the n ids are F features laid
 * end to end (feature f owns [offsets[f], offsets[f+1])); duplicates are removed inside
 * each feature while equal ids of different features are kept apart. The unique keys come
 * out in order of first occurrence (so grouped by feature, in feature order):
 * uniq_ids [n] device (first U used), uniq_feat [n] device int32 feature of each,
 * uniq_offsets [F+1] device int64 (U = uniq_offsets[F]), inverse [n] device int64 with
 * uniq_ids[inverse[i]] == ids[i] (the paper's I_u). ids [n] device, offsets [F+1] device.
 * n <= 2^31 - 1. Deterministic. workspace: device, >= the size from _workspace. */
grm_status grm_cuda_segment_unique(int64_t *uniq_ids, int32_t *uniq_feat, int64_t *uniq_offsets,
                                   int64_t *inverse, const int64_t *ids, const int64_t *offsets,
                                   int64_t n, int64_t F, void *workspace,
                                   size_t workspace_bytes, void *stream);

/* Workspace bytes grm_cuda_rank_partition needs for n keys. */
grm_status grm_cuda_rank_partition_workspace(int64_t n, size_t *bytes);

/* Rank-wise partition (FusedRec §3 "rankwise sort"): destination of key i is
 * grm_mix64((uint64_t)ids[i]) % nranks; keys are reordered stably by destination.
 * sorted_ids [n] device, sorted_feat [n] device or NULL (then feat must be NULL),
 * rank_counts [nranks] device int64 (keys per destination), positions [n] device int64
 * with sorted_ids[positions[i]] == ids[i] (the paper's I_s); ids [n] device, feat [n]
 * device int32 or NULL. n <= 2^31 - 1, nranks in [1, 65536]. Deterministic. */
grm_status grm_cuda_rank_partition(int64_t *sorted_ids, int32_t *sorted_feat,
                                   int64_t *rank_counts, int64_t *positions, const int64_t *ids,
                                   const int32_t *feat, int64_t n, int32_t nranks,
                                   void *workspace, size_t workspace_bytes, void *stream);

/* Workspace bytes grm_cuda_csr_from_inverse needs for n occurrences. */
grm_status grm_cuda_csr_from_inverse_workspace(int64_t n, size_t *bytes);

/* Group occurrences by unique key: csr_index [n] device lists, for each unique u in turn,
 * the occurrences i with inverse[i] == u in increasing i; csr_offsets [U+1] device int64
 * delimits them. inverse [n] device with values in [0, U). n <= 2^31 - 1. Deterministic. */
grm_status grm_cuda_csr_from_inverse(int64_t *csr_offsets, int64_t *csr_index,
                                     const int64_t *inverse, int64_t n, int64_t U,
                                     void *workspace, size_t workspace_bytes, void *stream);

/* ---- row optimizers fused with duplicate aggregation (row_opt.cu) ---- */

/* Row optimizer kinds. */
enum grm_cuda_opt_kind {
    GRM_CUDA_OPT_SGD = 0,       /* plugins/opt-sgd: torch.optim.SGD, dampening 0 */
    GRM_CUDA_OPT_ADAM = 1,      /* plugins/opt-adam variant adam */
    GRM_CUDA_OPT_ADAMW = 2,     /* plugins/opt-adam variant adamw */
    GRM_CUDA_OPT_ADAGRAD = 3    /* torch.optim.Adagrad */
};

/* Hyper-parameters of one optimizer (caller's storage, read during the call). */
typedef struct grm_cuda_row_opt {
    int32_t kind;           /* enum grm_cuda_opt_kind */
    int32_t nesterov;       /* SGD: 1 for Nesterov momentum (needs momentum > 0) */
    double lr;              /* > 0 */
    double momentum;        /* SGD: [0, 1]; 0 means no state */
    double beta1, beta2;    /* Adam(W): [0, 1) */
    double eps;             /* Adam(W), Adagrad: denominator floor */
    double weight_decay;    /* L2 (SGD, Adam, Adagrad) or decoupled (AdamW) */
    double lr_decay;        /* Adagrad: lr / (1 + (t - 1) lr_decay) */
    double initial_accumulator_value;   /* Adagrad: the sum at a row's first step (t = 1),
                                         * plugins/opt-adagrad's semantics */
} grm_cuda_row_opt;

/* State floats per row element: SGD 1 when momentum > 0 else 0; Adam(W) 2 (m, then v);
 * Adagrad 1 (the running sum of squares). -1 for an unknown kind. */
int32_t grm_cuda_row_opt_state_floats(const grm_cuda_row_opt *opt);

/* One sparse step over U distinct rows, fused with the aggregation of duplicate ids: for
 * each u < U, g = sum of grad[csr_index[j]] for j in [csr_offsets[u], csr_offsets[u+1])
 * (in that order, fp32), then row = table[rows[u]] is updated by the optimizer with
 * step t = steps[rows[u]] + 1 (TF-style per-row counts, as grm_opt_ops.row_step), and
 * steps[rows[u]] = t. A unique row with no occurrences is left untouched.
 * table [n_rows, D] device f32, state [n_rows, state_floats * D] device (m [D] then v [D]
 * for Adam, as opt-adam's row state; NULL when state_floats is 0), steps [n_rows] device
 * int64, grad [n, D] device f32, rows [U] device int64 (distinct, in [0, n_rows)),
 * csr_offsets [U+1], csr_index [n] device (grm_cuda_csr_from_inverse). One warp per row. */
grm_status grm_cuda_row_opt_step(float *table, float *state, int64_t *steps, const float *grad,
                                 const int64_t *rows, const int64_t *csr_offsets,
                                 const int64_t *csr_index, int64_t U, int32_t D,
                                 const grm_cuda_row_opt *opt, void *stream);

/* ---- dynamic hash table of embedding rows (hash_table.cu; MTGRBoost §4.1) ---- */

/* A device hash table mapping int64 ids (any value, INT64_MIN..INT64_MAX) to rows of dim
 * floats. Keys and row indices live in a key structure probed with grouped parallel
 * probing (eq. 5); the rows live in fixed-size chunks that never move: growth doubles the
 * key structure only (at load factor 0.75, counting erased slots) and adds chunks. */
typedef struct grm_cuda_hash grm_cuda_hash;

/* Options of grm_cuda_hash_create. */
typedef struct grm_cuda_hash_opts {
    int64_t capacity;       /* initial key slots, rounded up to a power of two >= 64 */
    int32_t dim;            /* floats per row, [1, 4096] */
    int32_t init;           /* enum grm_emb_init of new rows (find_or_insert) */
    int64_t chunk_rows;     /* rows per chunk, >= 1 (e.g. 65536) */
    double init_scale;      /* grm_row_init scale */
    uint64_t seed;          /* grm_row_init seed */
    uint64_t table_hash;    /* grm_str_hash64(table name) */
} grm_cuda_hash_opts;

/* Create an empty table (owned; grm_cuda_hash_destroy). opts: borrowed. */
grm_status grm_cuda_hash_create(grm_cuda_hash **out, const grm_cuda_hash_opts *opts);
/* Destroy; NULL accepted. */
void grm_cuda_hash_destroy(grm_cuda_hash *h);

/* rows [n] device int64: the row of keys[i], -1 if absent. keys [n] device. */
grm_status grm_cuda_hash_find(grm_cuda_hash *h, int64_t *rows, const int64_t *keys, int64_t n,
                              void *stream);
/* rows [n] device: the row of keys[i], inserted first when absent with the value of
 * grm_row_init(row, dim, init, init_scale, seed, table_hash, key) (grm/rng.h, ported).
 * Duplicates in keys get the same row. May grow the table; synchronises the stream. */
grm_status grm_cuda_hash_find_or_insert(grm_cuda_hash *h, int64_t *rows, const int64_t *keys,
                                        int64_t n, void *stream);
/* Insert or overwrite: the row of keys[i] becomes values[i] (values [n, dim] device f32).
 * With duplicate keys one of their values wins. Synchronises the stream. */
grm_status grm_cuda_hash_insert_or_assign(grm_cuda_hash *h, const int64_t *keys,
                                          const float *values, int64_t n, void *stream);
/* Erase keys [n] device (absent keys are ignored); their rows are recycled by later
 * inserts. Synchronises the stream. */
grm_status grm_cuda_hash_erase(grm_cuda_hash *h, const int64_t *keys, int64_t n, void *stream);
/* out[i] = row rows[i] (out [n, dim] device f32; rows [n] device, -1 gives zeros). */
grm_status grm_cuda_hash_gather(grm_cuda_hash *h, float *out, const int64_t *rows, int64_t n,
                                void *stream);
/* Live keys, key slots and allocated rows, as of the last synchronising call. */
int64_t grm_cuda_hash_size(const grm_cuda_hash *h);
int64_t grm_cuda_hash_capacity(const grm_cuda_hash *h);

/* ---- HBM cache of embedding rows over a host-RAM tier (emb_cache.cu; seed 003 §2.2) ---- */

/* A fixed budget of rows in device memory -- each row's dim floats, its optimizer state and
 * its step count, which move together -- over a slower tier the caller provides (host RAM,
 * or a file-backed store behind it). Ids are made resident by ensure(): missing rows are
 * read from the tier (or initialised by grm_row_init when the tier has none) and, when the
 * budget is full, least-recently-used rows are evicted, dirty ones written back. A call
 * carries a stamp (the batch number) and a protect bound: rows stamped at or after it are
 * never evicted, so the prefetch of batch i+1 (stamp i+1, protect i) cannot take the rows
 * that batch i looked up before its update (seed 003 §2.2, "prefetch i+1 without evicting
 * i"). The resident rows sit in three plain device arrays in the layout of
 * grm_cuda_row_opt_step, addressed by the slots ensure() returns, so gathers and the
 * optimizer run on the cache directly. */
typedef struct grm_cuda_cache grm_cuda_cache;

/* The slower tier: host callbacks over host memory (pinned staging buffers of the cache).
 * A record is W = dim * (1 + state_floats) floats (the row, then its state) and one int64
 * step count. */
typedef struct grm_cuda_cache_backing {
    void *ctx;
    /* For i < n: the record of keys[i] into vals [n, W] and steps [n], found[i] = 1; or
     * found[i] = 0 when the tier holds no such key (the cache initialises the row, state
     * 0, step 0). Keys are distinct. */
    grm_status (*fetch)(void *ctx, float *vals, int64_t *steps, uint8_t *found,
                        const int64_t *keys, int64_t n);
    /* Keep the records of keys [n] (write-back of dirty rows; keys distinct). */
    grm_status (*store)(void *ctx, const int64_t *keys, const float *vals,
                        const int64_t *steps, int64_t n);
} grm_cuda_cache_backing;

typedef struct grm_cuda_cache_opts {
    int64_t budget_rows;    /* rows resident at most, >= 1 (grm_cuda_cache_row_bytes) */
    int32_t dim;            /* floats per row, [1, 4096] */
    int32_t state_floats;   /* optimizer floats per row element (grm_cuda_row_opt_state_floats) */
    int32_t init;           /* enum grm_emb_init of rows the tier does not hold */
    double init_scale;
    uint64_t seed, table_hash;  /* grm_row_init's, as the CPU stores */
    grm_cuda_cache_backing backing;   /* fetch and store required */
} grm_cuda_cache_opts;

/* ensure() flags */
#define GRM_CUDA_CACHE_UPDATE 1u    /* the rows will be updated: mark them dirty */
#define GRM_CUDA_CACHE_PREFETCH 2u  /* count the call as a prefetch, not a lookup */

typedef struct grm_cuda_cache_stats {
    int64_t rows, budget_rows;  /* resident now; the budget */
    int64_t lookups;            /* ids asked by lookups (not prefetches), duplicates counted */
    int64_t unique;             /* distinct ids of lookups, summed over calls */
    int64_t hits;               /* of those, found resident */
    int64_t prefetched;         /* rows made resident by prefetches */
    int64_t fetched;            /* records read from the tier */
    int64_t initialised;        /* rows created by the initializer */
    int64_t evicted;            /* rows evicted */
    int64_t written_back;       /* dirty records stored to the tier (evictions and flushes) */
    int64_t bytes_h2d, bytes_d2h;   /* record bytes moved between the tiers */
} grm_cuda_cache_stats;

/* Device bytes one budget row costs: the record, its stamp, key and dirty flag, and the key
 * structure's share (two slots and a free-list entry). budget_rows = bytes / this. */
int64_t grm_cuda_cache_row_bytes(int32_t dim, int32_t state_floats);

/* Create an empty cache (owned; grm_cuda_cache_destroy). opts: copied. GRM_EINVAL names a
 * bad option before anything is allocated. */
grm_status grm_cuda_cache_create(grm_cuda_cache **out, const grm_cuda_cache_opts *opts);
void grm_cuda_cache_destroy(grm_cuda_cache *c);

/* The resident rows: table [budget, dim] f32, state [budget, state_floats * dim] (NULL when
 * state_floats is 0), steps [budget] int64, all device memory indexed by slot. */
void grm_cuda_cache_arrays(grm_cuda_cache *c, float **table, float **state, int64_t **steps);

/* Make the rows of keys [n] (device, duplicates allowed) resident; slots [n] device (or
 * NULL) receives each key's slot. Every row stamped >= protect stays (GRM_ENOMEM names the
 * budget when the others cannot make room: it must hold two batches' distinct ids); the
 * rows of keys get max(their stamp, stamp). Synchronises the stream. One ensure or flush
 * at a time on a cache; kernels on other streams may use the rows stamped >= protect
 * meanwhile (only other rows are evicted or filled). GRM_EIO etc. from the tier. */
grm_status grm_cuda_cache_ensure(grm_cuda_cache *c, int64_t *slots, const int64_t *keys,
                                 int64_t n, int64_t stamp, int64_t protect, uint32_t flags,
                                 void *stream);
/* slots [n] device: the slot of keys[i], -1 when not resident (changes nothing). */
grm_status grm_cuda_cache_find(grm_cuda_cache *c, int64_t *slots, const int64_t *keys,
                               int64_t n, void *stream);
/* Store every dirty resident record to the tier (a checkpoint's consistent point); rows
 * stay resident and become clean. Synchronises the stream. */
grm_status grm_cuda_cache_flush(grm_cuda_cache *c, void *stream);
void grm_cuda_cache_get_stats(const grm_cuda_cache *c, grm_cuda_cache_stats *out);

/* ---- fused jagged HSTU attention (hstu_attn.cu) ---- */

/* The HSTU attention of grm_hstu_attn_args (grm/backend.h, the contract; its spec is
 * plugins/dense-hstu/hstu_ref.c), with the types grm_hstu_attn_ws_fn, _fwd_fn and _bwd_fn:
 * the cuda backend's iface entries and what a plugin calls on its own. Pointwise SiLU
 * causal attention over jagged sequences with the position and time biases, tiles of 64
 * queries x 64 keys, tiles above the diagonal skipped, no L x L tensor in global memory,
 * fp32 in, out and accumulation.
 *  - ctx: ignored (the backend's context, or NULL); a->host: unused; a->stream: the
 *    cudaStream_t (NULL: the default stream);
 *  - every pointer in *a (offsets, times, time_thr included) and every array argument is
 *    device memory; ws is ws_bytes() bytes of device memory (a constant 256 bytes);
 *  - limits: H in [1, 65535], dqk and dv in [1, 128], ld >= H * max(dqk, dv), max_len >= 1,
 *    nbuckets in [1, 128] when the time bias is on, sequences of at most 4,194,240 rows,
 *    nseq < 2^31; GRM_EINVAL names the value past them (broken offsets included), and
 *    GRM_ENOTSUP a shape whose tiles exceed the GPU's shared memory per block (dqk = dv =
 *    128 with 128 time buckets fits sm_80's 163 KB exactly);
 *  - each call synchronises a->stream once: it reads the longest sequence back to size the
 *    grid (the arguments have no host-side lengths). */
size_t grm_cuda_hstu_attn_ws_bytes(void *ctx, int64_t rows, int64_t nseq, int64_t H,
                                   int64_t nrab);
/* out [N, H*dv] = the attention (overwritten). */
grm_status grm_cuda_hstu_attn_fwd(void *ctx, float *out, const grm_hstu_attn_args *a,
                                  void *ws);
/* Its backward from dout [N, H*dv], recomputing the scores tile by tile: dq, dk, dv (views
 * with stride a->ld) are overwritten; d_rab_pos [H, max_len] and d_rab_time [H, nbuckets]
 * (each NULL when not wanted) are accumulated into with fp32 atomics, so their last bits
 * depend on block order; without a->times nothing is added to d_rab_time. */
grm_status grm_cuda_hstu_attn_bwd(void *ctx, float *dq, float *dk, float *dv, float *d_rab_pos,
                                  float *d_rab_time, const float *dout,
                                  const grm_hstu_attn_args *a, void *ws);

#ifdef __cplusplus
}
#endif
#endif /* GRM_CUDA_H */

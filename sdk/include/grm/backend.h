/* grm/backend.h - a compute backend: where tensors live and what runs the hot ops
 * (DESIGN.md §6), in the style of ggml-backend's {iface, context}.
 *
 * A backend owns one device (grm_tensor.device names it): it allocates, copies and
 * synchronises memory there and runs the operators every training step spends its sparse
 * time in (RecIS Table 1: gather, scatter-add, pooling; FusedRec §3: segment unique) and the
 * GEMM of the dense blocks. The host picks one per pipeline ([pipeline] device = cpu | ref |
 * cuda:N) and hands it to plugins through host->backend (grm/host.h). Two backends run on
 * the CPU: `ref`, the plain loops that are the specification (STYLE.md §9), and `cpu`, the
 * threaded, hash-partitioned and BLAS paths; `cuda` wraps kernels/ (built with nvcc). Every
 * implementation of an op has the one signature below, and the results of `cpu` and `cuda`
 * are tested against `ref`.
 *
 * All pointers an op takes live on the backend's device. `stream` is a cudaStream_t on CUDA
 * and NULL on the CPU. Ops are reentrant: an op's scratch memory comes from a `work` handle
 * (work_create), one per calling thread. */
#ifndef GRM_BACKEND_H
#define GRM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <grm/host.h>
#include <grm/status.h>
#include <grm/tensor.h>

#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pooling modes of segment_reduce. Stored in int32_t. */
typedef enum grm_pool_mode {
    GRM_POOL_SUM = 0,
    GRM_POOL_MEAN = 1           /* an empty segment pools to zeros */
} grm_pool_mode;

/* Attention-score normalisation of the HSTU attention (Zhai et al. 2024 eq. 2). */
typedef enum grm_hstu_norm {
    GRM_HSTU_NORM_MAX_LEN = 0,  /* c = 1 / max_len */
    GRM_HSTU_NORM_LENGTH = 1    /* c = 1 / L, the length of the query's sequence */
} grm_hstu_norm;

/* One call of the HSTU pointwise attention over jagged sequences (Zhai et al. 2024 eq. 2,
 * MTGRBoost §2 eq. 1-3; relative bias on position and bucketized time, TurboGR App. A),
 * per sequence b, head h and query i of b:
 *   s_ij = q_i . k_j + rab_pos[h, min(i - j, max_len - 1)] + rab_time[h, tb(|t_i - t_j|)]
 *   a_ij = SiLU(s_ij) c   for j <= i in the same sequence, else 0
 *   o_i  = sum_j a_ij v_j
 * where tb(dt) = the number of b >= 1 with time_thr[b] <= dt (time_thr[0] = 0), i.e.
 * min(floor(ln(max(dt, 1)) / 0.301), nbuckets - 1), and c = 1 / max_len
 * (GRM_HSTU_NORM_MAX_LEN) or 1 / L_b (GRM_HSTU_NORM_LENGTH). A NULL rab_pos, rab_time or
 * times drops that term. Every pointer lives on the backend's device; all are borrowed for
 * the call. plugins/dense-hstu's hstu_ref.c is the specification. Since 1.7. */
typedef struct grm_hstu_attn_args {
    const grm_host_api *host;   /* the CPU kernels' thread pool (parallel_for); else unused */
    void *stream;               /* a cudaStream_t on CUDA; NULL on the CPU */
    int64_t nseq;               /* B */
    const int64_t *offsets;     /* [B+1] row ranges, offsets[0] = 0, nondecreasing */
    const int64_t *times;       /* [N] seconds, or NULL: no time bias */
    int64_t H, dqk, dv;
    int64_t ld;                 /* row stride (floats) of q, k, v and of dq, dk, dv */
    const float *q;             /* [N, ld] view: head h at columns h*dqk .. */
    const float *k;             /* [N, ld] view: head h at columns h*dqk .. */
    const float *v;             /* [N, ld] view: head h at columns h*dv .. */
    const float *rab_pos;       /* [H, max_len], or NULL */
    const float *rab_time;      /* [H, nbuckets], or NULL */
    int64_t max_len;            /* position buckets (the clamp of i - j); also c of max_len */
    int64_t nbuckets;           /* time buckets */
    const int64_t *time_thr;    /* [nbuckets] the thresholds of tb above */
    int32_t norm;               /* grm_hstu_norm */
    int32_t reserved;
} grm_hstu_attn_args;

/* The one signature of the attention, wherever it runs (a backend's op, or a plugin's own
 * kernel on a backend that has none): out [N, H*dv] = the attention (overwritten). ws:
 * workspace of the implementation's ws_bytes, on the same device. ctx: the backend's
 * context (a plugin's own kernel ignores it). */
typedef grm_status (*grm_hstu_attn_fwd_fn)(void *ctx, float *out, const grm_hstu_attn_args *a,
                                           void *ws);
/* Its backward given dout [N, H*dv]: dq, dk, dv (views with stride a->ld, the column layout
 * of q, k, v) are overwritten; d_rab_pos [H, max_len] and d_rab_time [H, nbuckets] (each
 * NULL when that bias is off) are accumulated into. */
typedef grm_status (*grm_hstu_attn_bwd_fn)(void *ctx, float *dq, float *dk, float *dv,
                                           float *d_rab_pos, float *d_rab_time,
                                           const float *dout, const grm_hstu_attn_args *a,
                                           void *ws);
/* Bytes of workspace for `rows` rows in `nseq` sequences, H heads and nrab bias buckets per
 * head (max_len when rab_pos is on plus nbuckets when rab_time is on). */
typedef size_t (*grm_hstu_attn_ws_fn)(void *ctx, int64_t rows, int64_t nseq, int64_t H,
                                      int64_t nrab);

/* A backend's operations. Every member is required unless marked optional. */
typedef struct grm_backend_iface {
    uint32_t struct_size;       /* sizeof(grm_backend_iface) */

    /* "ref", "cpu", "cuda". Static. */
    const char *(*name)(void *ctx);

    /* `bytes` on the device, aligned to `align` (a power of two; 0 = 64). NULL on failure
     * (with the error set). Owned: release with free. */
    void *(*alloc)(void *ctx, size_t bytes, size_t align);
    /* Release memory from alloc; NULL is accepted. */
    void (*free)(void *ctx, void *ptr);
    /* Copy `bytes` from src on src_dev to dst on dst_dev (one of them is the backend's
     * device, the other may be the CPU). Ordered on `stream`. */
    grm_status (*copy)(void *ctx, void *dst, grm_device dst_dev, const void *src,
                       grm_device src_dev, size_t bytes, void *stream);
    /* Wait until everything queued on `stream` is done. */
    grm_status (*synchronize)(void *ctx, void *stream);

    /* Scratch for one calling thread's ops (*work owned: work_destroy); NULL is a valid
     * handle for backends that need none. */
    grm_status (*work_create)(void *ctx, void **work);
    void (*work_destroy)(void *ctx, void *work);

    /* out[j, :] = rows[idx[j], :] for j < n.   out [n, D]; rows [nrows, D]; idx [n].
     * GRM_EINVAL naming the first index outside [0, nrows). */
    grm_status (*gather)(void *ctx, float *out, const float *rows, const int64_t *idx,
                         int64_t n, int64_t nrows, int64_t D, void *stream);

    /* rows[idx[j], :] += src[j, :] for j < n, duplicates summed in increasing j (so every
     * backend gives the sequential loop's bits on the CPU).   rows [nrows, D] in/out. */
    grm_status (*scatter_add)(void *ctx, float *rows, const float *src, const int64_t *idx,
                              int64_t n, int64_t nrows, int64_t D, void *work, void *stream);

    /* out[b, :] = sum or mean over j in [offsets[b], offsets[b+1]) of rows[idx[j], :]
     * (idx NULL: rows[j, :]), in increasing j.   out [B, D]; offsets [B+1]; mode
     * grm_pool_mode. */
    grm_status (*segment_reduce)(void *ctx, float *out, const float *rows, const int64_t *idx,
                                 const int64_t *offsets, int64_t B, int64_t nrows, int64_t D,
                                 int32_t mode, void *stream);

    /* Backward of segment_reduce to the gathered layout: grad_in[j, :] = grad_out[b, :]
     * (sum) or grad_out[b, :] / len_b (mean) for j in segment b.   grad_in [offsets[B], D]. */
    grm_status (*segment_reduce_bwd)(void *ctx, float *grad_in, const float *grad_out,
                                     const int64_t *offsets, int64_t B, int64_t D,
                                     int32_t mode, void *stream);

    /* Segment unique (FusedRec §3): the distinct ids of each of F segments of ids [n]
     * (segment f is ids[offsets[f] .. offsets[f+1])), equal ids of different segments kept
     * apart, in first-occurrence order: uniq_ids [n] (the first *nuniq used), uniq_feat [n]
     * (optional) their segment, counts [F] (optional) per segment, inverse [n] with
     * uniq_ids[inverse[j]] == ids[j]. */
    grm_status (*segment_unique)(void *ctx, int64_t *uniq_ids, int32_t *uniq_feat,
                                 int64_t *counts, int64_t *inverse, int64_t *nuniq,
                                 const int64_t *ids, const int64_t *offsets, int64_t n,
                                 int32_t F, void *work, void *stream);

    /* C [M, N] = alpha op(A) op(B) + beta C, row-major; op transposes when trans_* is 1.
     * lda, ldb, ldc are row strides in elements. */
    grm_status (*gemm)(void *ctx, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N,
                       int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                       int64_t ldb, float beta, float *C, int64_t ldc, void *stream);

    /* Since 1.7, optional (test with GRM_HAS_OP(grm_backend_iface, iface, hstu_attn_fwd)
     * and non-NULL): the HSTU attention of grm_hstu_attn_args. A backend without them
     * leaves the attention to the dense block's own kernels, which have the same
     * signature (the CPU backends: plugins/dense-hstu keeps its tiled CPU kernel next to
     * the layer it was tuned with). */
    grm_hstu_attn_ws_fn hstu_attn_ws_bytes;
    grm_hstu_attn_fwd_fn hstu_attn_fwd;
    grm_hstu_attn_bwd_fn hstu_attn_bwd;
} grm_backend_iface;

/* A backend instance. Owned by the host; plugins borrow it for the run. */
typedef struct grm_backend {
    const grm_backend_iface *iface;   /* static */
    void *context;                    /* the backend's state; passed as `ctx` to every op */
    grm_device device;                /* where its memory lives */
} grm_backend;

/* 1 when the host runs the pipeline on the `ref` backend ([pipeline] device = ref), else 0
 * (another backend, or no run: a plugin created by a test). A plugin whose `impl` key is
 * `auto` calls it in create and picks its plain reference loops when it is 1 (STYLE.md §7:
 * the implementation is chosen per device in create, never per call). Since 1.4. */
static inline int grm_backend_wants_ref(const grm_host_api *host)
{
    const struct grm_backend *be =
        host && GRM_HAS_OP(grm_host_api, host, backend) ? host->backend() : NULL;
    return be != NULL && strcmp(be->iface->name(be->context), "ref") == 0;
}

#ifdef __cplusplus
}
#endif
#endif /* GRM_BACKEND_H */

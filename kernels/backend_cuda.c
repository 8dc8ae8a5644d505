/* kernels/backend_cuda.c - the `cuda` backend of grm/backend.h ([pipeline] device = cuda:N):
 * the iface over the launchers of kernels/ (embedding_ops.cu, segment_unique.cu,
 * hstu_attn.cu) and cuBLAS for the GEMM, in C against the CUDA runtime. Built with CUDA only
 * (HAVE_CUDA), as the module grm-cuda.so together with libgrmcuda.la, so that grmhost loads
 * the CUDA runtime and cuBLAS only for a pipeline that runs on cuda:N: core/backend.c
 * dlopens it on the first open and reaches it through grm_cuda_backend_entry, its only
 * exported symbol (grm__cuda_module, core/backend.h). Like a plugin it links no libgrmcore
 * and sets errors through the host API it is handed. tests/test-cuda-backend.c holds it to
 * the `ref` backend op by op on a GPU (and the attention to the C reference of
 * tests/hstu-ref.h) and skips without one.
 *
 * Where the device ops differ from the CPU backends, by design of the kernels: gather gives
 * a zero row and scatter-add skips an index outside [0, nrows) instead of refusing it;
 * scatter-add and the pooling backward sum duplicates with fp32 atomics, so their order
 * (and the last bits) is unspecified; segment_reduce_bwd has no mean-pooling kernel yet;
 * the attention synchronises its stream once per call (kernels/grm_cuda.h).
 * TODO(issue-19): run it, streams per stage (MTGRBoost §3), the mean backward. */
#include "backend.h"
#include "grm_cuda.h"

#include <grm/backend.h>
#include <grm/plugin.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

/* The host API of grm_cuda_backend_entry: errors go to the host's per-thread message. */
static const grm_host_api *cu_host;

typedef struct cuda_ctx {
    int device;
    cublasHandle_t blas;
} cuda_ctx;

typedef struct cuda_work {
    void *ws;                   /* segment unique's workspace */
    size_t ws_bytes;
    int64_t *offs;              /* [F + 1] device: its unique offsets */
    int64_t ncap;
    int32_t *feat;              /* [n] device: the segments when the caller wants none */
    int64_t fcap;
} cuda_work;

static grm_status fail(grm_status st)
{
    return st == GRM_OK ? st : cu_host->errorf(st, "cuda backend: %s", grm_cuda_last_error());
}

static const char *cu_name(void *ctx)
{
    (void)ctx;
    return "cuda";
}

static void *cu_alloc(void *ctx, size_t bytes, size_t align)
{
    (void)ctx;
    (void)align;   /* cudaMalloc aligns to 256 bytes */
    void *p = NULL;
    if (fail(grm_cuda_malloc(&p, bytes ? bytes : 1)) != GRM_OK) return NULL;
    return p;
}

static void cu_free(void *ctx, void *ptr)
{
    (void)ctx;
    grm_cuda_free(ptr);
}

static grm_status cu_copy(void *ctx, void *dst, grm_device dst_dev, const void *src,
                          grm_device src_dev, size_t bytes, void *stream)
{
    (void)ctx;
    (void)dst_dev;
    (void)src_dev;
    if (bytes == 0) return GRM_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
    if (e != cudaSuccess)
        return cu_host->errorf(GRM_EDEVICE, "cuda backend: copy of %zu bytes: %s", bytes,
                               cudaGetErrorString(e));
    return GRM_OK;
}

static grm_status cu_sync(void *ctx, void *stream)
{
    (void)ctx;
    return fail(grm_cuda_sync(stream));
}

static grm_status cu_work_create(void *ctx, void **work)
{
    (void)ctx;
    *work = calloc(1, sizeof(cuda_work));
    return *work ? GRM_OK : cu_host->errorf(GRM_ENOMEM, "cuda backend: out of memory");
}

static void cu_work_destroy(void *ctx, void *work)
{
    (void)ctx;
    cuda_work *w = work;
    if (!w) return;
    grm_cuda_free(w->ws);
    grm_cuda_free(w->offs);
    grm_cuda_free(w->feat);
    free(w);
}

static grm_status cu_gather(void *ctx, float *out, const float *rows, const int64_t *idx,
                            int64_t n, int64_t nrows, int64_t D, void *stream)
{
    (void)ctx;
    return fail(grm_cuda_gather_fwd(out, rows, idx, n, nrows, (int32_t)D, GRM_DTYPE_F32,
                                    stream));
}

static grm_status cu_scatter_add(void *ctx, float *rows, const float *src, const int64_t *idx,
                                 int64_t n, int64_t nrows, int64_t D, void *work, void *stream)
{
    (void)ctx;
    (void)work;
    return fail(grm_cuda_gather_bwd(rows, src, idx, n, nrows, (int32_t)D, GRM_DTYPE_F32,
                                    stream));
}

static grm_status cu_segment_reduce(void *ctx, float *out, const float *rows,
                                    const int64_t *idx, const int64_t *offsets, int64_t B,
                                    int64_t nrows, int64_t D, int32_t mode, void *stream)
{
    (void)ctx;
    return fail(grm_cuda_pool_fwd(out, rows, idx, offsets, B, nrows, (int32_t)D, GRM_DTYPE_F32,
                                  mode == GRM_POOL_MEAN ? GRM_CUDA_POOL_MEAN : GRM_CUDA_POOL_SUM,
                                  stream));
}

static grm_status cu_segment_reduce_bwd(void *ctx, float *grad_in, const float *grad_out,
                                        const int64_t *offsets, int64_t B, int64_t D,
                                        int32_t mode, void *stream)
{
    (void)ctx;
    if (mode != GRM_POOL_SUM)
        return cu_host->errorf(GRM_ENOTSUP, "cuda backend: segment_reduce_bwd of mean pooling "
                               "has no kernel yet; use pooling = sum or device = cpu");
    /* grad_in[j] = grad_out[b] for j in segment b: the jagged broadcast */
    return fail(grm_cuda_seq_tile_fwd(grad_in, grad_out, offsets, B, (int32_t)D, GRM_DTYPE_F32,
                                      stream));
}

static grm_status cu_segment_unique(void *ctx, int64_t *uniq_ids, int32_t *uniq_feat,
                                    int64_t *counts, int64_t *inverse, int64_t *nuniq,
                                    const int64_t *ids, const int64_t *offsets, int64_t n,
                                    int32_t F, void *work, void *stream)
{
    (void)ctx;
    cuda_work *w = work;
    size_t bytes = 0;
    grm_status st = fail(grm_cuda_segment_unique_workspace(n, &bytes));
    if (st != GRM_OK) return st;
    if (bytes > w->ws_bytes) {
        grm_cuda_free(w->ws);
        w->ws = NULL;
        w->ws_bytes = 0;
        if ((st = fail(grm_cuda_malloc(&w->ws, bytes))) != GRM_OK) return st;
        w->ws_bytes = bytes;
    }
    if (F + 1 > w->ncap) {
        grm_cuda_free(w->offs);
        w->offs = NULL;
        if ((st = fail(grm_cuda_malloc((void **)&w->offs,
                                       (size_t)(F + 1) * sizeof(int64_t)))) != GRM_OK)
            return st;
        w->ncap = F + 1;
    }
    int32_t *feat = uniq_feat;
    if (!feat) {   /* the kernel writes the segment of every unique id */
        if (n > w->fcap) {
            grm_cuda_free(w->feat);
            w->feat = NULL;
            w->fcap = 0;
            if ((st = fail(grm_cuda_malloc((void **)&w->feat, (size_t)n * sizeof(int32_t))))
                != GRM_OK)
                return st;
            w->fcap = n;
        }
        feat = w->feat;
    }
    if ((st = fail(grm_cuda_segment_unique(uniq_ids, feat, w->offs, inverse, ids, offsets, n, F,
                                           w->ws, w->ws_bytes, stream))) != GRM_OK)
        return st;
    /* the unique offsets to the host: the count (a host scalar) and the per-segment counts */
    int64_t *h = malloc((size_t)(F + 1) * sizeof *h);
    if (!h) return cu_host->errorf(GRM_ENOMEM, "cuda backend: out of memory");
    if ((st = fail(grm_cuda_sync(stream))) == GRM_OK
        && (st = fail(grm_cuda_memcpy_d2h(h, w->offs, (size_t)(F + 1) * sizeof *h))) == GRM_OK) {
        *nuniq = h[F];
        if (counts) {
            for (int32_t f = 0; f < F; f++) h[f] = h[f + 1] - h[f];
            st = fail(grm_cuda_memcpy_h2d(counts, h, (size_t)F * sizeof *h));
        }
    }
    free(h);
    return st;
}

/* Row-major C = alpha op(A) op(B) + beta C through column-major cuBLAS: C^T = op(B)^T op(A)^T. */
static grm_status cu_gemm(void *ctx, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N,
                          int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                          int64_t ldb, float beta, float *C, int64_t ldc, void *stream)
{
    cuda_ctx *c = ctx;
    if (M <= 0 || N <= 0) return GRM_OK;
    cublasSetStream(c->blas, (cudaStream_t)stream);
    cublasStatus_t s = cublasSgemm(c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                   &alpha, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc);
    if (s != CUBLAS_STATUS_SUCCESS)
        return cu_host->errorf(GRM_EDEVICE, "cuda backend: cublasSgemm [%lld x %lld x %lld]: "
                               "status %d", (long long)M, (long long)N, (long long)K, (int)s);
    return GRM_OK;
}

/* The attention: the launchers have the iface's types; these only carry their message to the
 * host's error (a plugin that calls them itself reads grm_cuda_last_error()). */
static size_t cu_hstu_attn_ws_bytes(void *ctx, int64_t rows, int64_t nseq, int64_t H,
                                    int64_t nrab)
{
    return grm_cuda_hstu_attn_ws_bytes(ctx, rows, nseq, H, nrab);
}

static grm_status cu_hstu_attn_fwd(void *ctx, float *out, const grm_hstu_attn_args *a, void *ws)
{
    return fail(grm_cuda_hstu_attn_fwd(ctx, out, a, ws));
}

static grm_status cu_hstu_attn_bwd(void *ctx, float *dq, float *dk, float *dv, float *d_rab_pos,
                                   float *d_rab_time, const float *dout,
                                   const grm_hstu_attn_args *a, void *ws)
{
    return fail(grm_cuda_hstu_attn_bwd(ctx, dq, dk, dv, d_rab_pos, d_rab_time, dout, a, ws));
}

static const grm_backend_iface cu_iface = {
    .struct_size = sizeof(grm_backend_iface),
    .name = cu_name,
    .alloc = cu_alloc,
    .free = cu_free,
    .copy = cu_copy,
    .synchronize = cu_sync,
    .work_create = cu_work_create,
    .work_destroy = cu_work_destroy,
    .gather = cu_gather,
    .scatter_add = cu_scatter_add,
    .segment_reduce = cu_segment_reduce,
    .segment_reduce_bwd = cu_segment_reduce_bwd,
    .segment_unique = cu_segment_unique,
    .gemm = cu_gemm,
    .hstu_attn_ws_bytes = cu_hstu_attn_ws_bytes,
    .hstu_attn_fwd = cu_hstu_attn_fwd,
    .hstu_attn_bwd = cu_hstu_attn_bwd,
};

static grm_status cu_open(int32_t device, void **ctx)
{
    const int n = grm_cuda_device_count();
    if (n == 0)
        return cu_host->errorf(GRM_ENOTSUP, "cuda:%d: this machine has 0 CUDA devices; use "
                               "device = cpu", (int)device);
    if (device >= n)
        return cu_host->errorf(GRM_ENOTSUP, "cuda:%d: this machine has %d CUDA device%s; use "
                               "cuda:0 .. cuda:%d or device = cpu", (int)device, n,
                               n == 1 ? "" : "s", n - 1);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cu_host->errorf(GRM_EDEVICE, "cuda:%d: %s", (int)device, cudaGetErrorString(e));
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return cu_host->errorf(GRM_ENOMEM, "cuda backend: out of memory");
    c->device = device;
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        free(c);
        return cu_host->errorf(GRM_EDEVICE, "cuda:%d: cublasCreate failed", (int)device);
    }
    *ctx = c;
    return GRM_OK;
}

static void cu_close(void *ctx)
{
    cuda_ctx *c = ctx;
    if (!c) return;
    cublasDestroy(c->blas);
    free(c);
}

GRM_PLUGIN_EXPORT const grm__cuda_module *grm_cuda_backend_entry(const grm_host_api *host);

GRM_PLUGIN_EXPORT const grm__cuda_module *grm_cuda_backend_entry(const grm_host_api *host)
{
    static const grm__cuda_module mod = {
        .struct_size = sizeof(grm__cuda_module),
        .iface = &cu_iface,
        .open = cu_open,
        .close = cu_close,
    };
    cu_host = host;
    return &mod;
}

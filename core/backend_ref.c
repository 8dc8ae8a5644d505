/* core/backend_ref.c - the `ref` backend (grm/backend.h): every operator as the plain loop
 * that defines it, single-threaded and obviously correct (STYLE.md §9 "the plain version is
 * the spec"). `[pipeline] device = ref` trains on it; tests/test-backend.c holds the `cpu`
 * backend to it op by op, and tests/test-train-device.sh a whole training run. */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

static const char *ref_name(void *ctx)
{
    (void)ctx;
    return "ref";
}

static grm_status ref_work_create(void *ctx, void **work)
{
    (void)ctx;
    *work = NULL;
    return GRM_OK;
}

static void ref_work_destroy(void *ctx, void *work)
{
    (void)ctx;
    (void)work;
}

static grm_status bad_index(const char *op, int64_t j, int64_t i, int64_t nrows)
{
    return grm_errorf(GRM_EINVAL, "%s: index %lld (position %lld) outside [0, %lld)", op,
                      (long long)i, (long long)j, (long long)nrows);
}

static grm_status ref_gather(void *ctx, float *out, const float *rows, const int64_t *idx,
                             int64_t n, int64_t nrows, int64_t D, void *stream)
{
    (void)ctx;
    (void)stream;
    for (int64_t j = 0; j < n; j++) {
        if (idx[j] < 0 || idx[j] >= nrows) return bad_index("gather", j, idx[j], nrows);
        for (int64_t d = 0; d < D; d++) out[j * D + d] = rows[idx[j] * D + d];
    }
    return GRM_OK;
}

static grm_status ref_scatter_add(void *ctx, float *rows, const float *src, const int64_t *idx,
                                  int64_t n, int64_t nrows, int64_t D, void *work, void *stream)
{
    (void)ctx;
    (void)work;
    (void)stream;
    for (int64_t j = 0; j < n; j++)   /* checked first: rows stay unchanged on an error */
        if (idx[j] < 0 || idx[j] >= nrows) return bad_index("scatter_add", j, idx[j], nrows);
    for (int64_t j = 0; j < n; j++)
        for (int64_t d = 0; d < D; d++) rows[idx[j] * D + d] += src[j * D + d];
    return GRM_OK;
}

static grm_status check_offsets(const char *op, const int64_t *offsets, int64_t B)
{
    if (offsets[0] != 0) return grm_errorf(GRM_EINVAL, "%s: offsets[0] is not 0", op);
    for (int64_t b = 0; b < B; b++)
        if (offsets[b + 1] < offsets[b])
            return grm_errorf(GRM_EINVAL, "%s: offsets decrease at %lld", op, (long long)b);
    return GRM_OK;
}

static grm_status ref_segment_reduce(void *ctx, float *out, const float *rows,
                                     const int64_t *idx, const int64_t *offsets, int64_t B,
                                     int64_t nrows, int64_t D, int32_t mode, void *stream)
{
    (void)ctx;
    (void)stream;
    grm_status st = check_offsets("segment_reduce", offsets, B);
    if (st != GRM_OK) return st;
    if (mode != GRM_POOL_SUM && mode != GRM_POOL_MEAN)
        return grm_errorf(GRM_EINVAL, "segment_reduce: mode %d is not sum or mean", (int)mode);
    for (int64_t b = 0; b < B; b++) {
        float *o = out + b * D;
        for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
        for (int64_t j = offsets[b]; j < offsets[b + 1]; j++) {
            int64_t r = idx ? idx[j] : j;
            if (idx && (r < 0 || r >= nrows)) return bad_index("segment_reduce", j, r, nrows);
            for (int64_t d = 0; d < D; d++) o[d] += rows[r * D + d];
        }
        int64_t len = offsets[b + 1] - offsets[b];
        if (mode == GRM_POOL_MEAN && len > 0)
            for (int64_t d = 0; d < D; d++) o[d] /= (float)len;
    }
    return GRM_OK;
}

static grm_status ref_segment_reduce_bwd(void *ctx, float *grad_in, const float *grad_out,
                                         const int64_t *offsets, int64_t B, int64_t D,
                                         int32_t mode, void *stream)
{
    (void)ctx;
    (void)stream;
    grm_status st = check_offsets("segment_reduce_bwd", offsets, B);
    if (st != GRM_OK) return st;
    for (int64_t b = 0; b < B; b++) {
        int64_t len = offsets[b + 1] - offsets[b];
        for (int64_t j = offsets[b]; j < offsets[b + 1]; j++)
            for (int64_t d = 0; d < D; d++)
                grad_in[j * D + d] = mode == GRM_POOL_MEAN ? grad_out[b * D + d] / (float)len
                                                           : grad_out[b * D + d];
    }
    return GRM_OK;
}

/* Segment unique by an open-addressing map keyed on (segment, id), filled segment by segment
 * in input order: the first occurrence of a pair takes the next unique slot. */
static grm_status ref_segment_unique(void *ctx, int64_t *uniq_ids, int32_t *uniq_feat,
                                     int64_t *counts, int64_t *inverse, int64_t *nuniq,
                                     const int64_t *ids, const int64_t *offsets, int64_t n,
                                     int32_t F, void *work, void *stream)
{
    (void)ctx;
    (void)work;
    (void)stream;
    grm_status st = check_offsets("segment_unique", offsets, F);
    if (st != GRM_OK) return st;
    if (offsets[F] != n)
        return grm_errorf(GRM_EINVAL, "segment_unique: offsets[F] = %lld, n = %lld",
                          (long long)offsets[F], (long long)n);
    int64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    int64_t *slot = malloc((size_t)cap * sizeof *slot);   /* unique index + 1, 0 empty */
    if (!slot) return grm_errorf(GRM_ENOMEM, "segment_unique: out of memory");
    memset(slot, 0, (size_t)cap * sizeof *slot);
    int64_t u = 0;
    for (int32_t f = 0; f < F; f++) {
        int64_t first = u;
        for (int64_t j = offsets[f]; j < offsets[f + 1]; j++) {
            uint64_t h = ((uint64_t)ids[j] * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)f << 32);
            h = (h ^ (h >> 29)) & (uint64_t)(cap - 1);
            /* a slot of this segment (indices >= first) holding this id, or an empty one */
            while (slot[h] && !(slot[h] - 1 >= first && uniq_ids[slot[h] - 1] == ids[j]))
                h = (h + 1) & (uint64_t)(cap - 1);
            if (!slot[h]) {
                uniq_ids[u] = ids[j];
                if (uniq_feat) uniq_feat[u] = f;
                slot[h] = ++u;
            }
            inverse[j] = slot[h] - 1;
        }
        if (counts) counts[f] = u - first;
    }
    free(slot);
    *nuniq = u;
    return GRM_OK;
}

/* The GEMM as its triple loop, accumulated in double (the reference's precision). */
static grm_status ref_gemm(void *ctx, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N,
                           int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                           int64_t ldb, float beta, float *C, int64_t ldc, void *stream)
{
    (void)ctx;
    (void)stream;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) {
                float a = trans_a ? A[k * lda + i] : A[i * lda + k];
                float b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                acc += (double)a * (double)b;
            }
            C[i * ldc + j] = (float)(alpha * acc + (beta != 0.0f ? beta * C[i * ldc + j] : 0.0f));
        }
    return GRM_OK;
}

const grm_backend_iface grm__backend_ref_iface = {
    .struct_size = sizeof(grm_backend_iface),
    .name = ref_name,
    .alloc = grm__backend_host_alloc,
    .free = grm__backend_host_free,
    .copy = grm__backend_host_copy,
    .synchronize = grm__backend_host_sync,
    .work_create = ref_work_create,
    .work_destroy = ref_work_destroy,
    .gather = ref_gather,
    .scatter_add = ref_scatter_add,
    .segment_reduce = ref_segment_reduce,
    .segment_reduce_bwd = ref_segment_reduce_bwd,
    .segment_unique = ref_segment_unique,
    .gemm = ref_gemm,
};

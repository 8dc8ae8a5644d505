/* plugins/dense-mmoe/mmoe_cpu.c - the fast CPU linear layer of dense-mmoe: cblas_sgemm
 * per chunk on the host thread pool (the host keeps OpenBLAS single-threaded). Mirrors
 * mmoe_ref.c: mmoe_linear_fwd_ref / mmoe_linear_bwd_ref; tests/test-dense-mmoe.c compares
 * them at rtol 1e-4. Row chunks for z and dx, output-column chunks for dw and db, so no
 * two chunks write the same memory. Callers guarantee every size fits in int. */
#include <cblas.h>
#include <string.h>

#include "mmoe.h"

/* Rows (or output columns) per chunk: large enough for GEMM efficiency. */
#define MMOE_GRAIN 64

typedef struct lin_ctx {
    float *z, *dx, *dw, *db;
    const float *x, *w, *b, *dz;
    int64_t rows, in, out;
} lin_ctx;

static grm_status fwd_rows(void *vctx, int64_t lo, int64_t hi)
{
    const lin_ctx *c = vctx;
    for (int64_t r = lo; r < hi; r++)
        memcpy(c->z + r * c->out, c->b, (size_t)c->out * sizeof *c->z);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(hi - lo), (int)c->out,
                (int)c->in, 1.0f, c->x + lo * c->in, (int)c->in, c->w, (int)c->in, 1.0f,
                c->z + lo * c->out, (int)c->out);
    return GRM_OK;
}

grm_status mmoe_linear_fwd_cpu(float *z, const float *x, const float *w, const float *b,
                               int64_t rows, int64_t in, int64_t out,
                               const grm_host_api *host)
{
    if (rows == 0)
        return GRM_OK;
    lin_ctx c = { .z = z, .x = x, .w = w, .b = b, .rows = rows, .in = in, .out = out };
    return host->parallel_for(rows, MMOE_GRAIN, fwd_rows, &c);
}

/* dx [lo:hi, :] += dz [lo:hi, :] W */
static grm_status bwd_dx_rows(void *vctx, int64_t lo, int64_t hi)
{
    const lin_ctx *c = vctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo), (int)c->in,
                (int)c->out, 1.0f, c->dz + lo * c->out, (int)c->out, c->w, (int)c->in, 1.0f,
                c->dx + lo * c->in, (int)c->in);
    return GRM_OK;
}

/* dw [lo:hi, :] += dz[:, lo:hi]^T x; db [lo:hi] += column sums of dz[:, lo:hi] */
static grm_status bwd_dw_cols(void *vctx, int64_t lo, int64_t hi)
{
    const lin_ctx *c = vctx;
    for (int64_t r = 0; r < c->rows; r++) {
        const float *dzr = c->dz + r * c->out;          /* [out] */
        for (int64_t o = lo; o < hi; o++)
            c->db[o] += dzr[o];
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), (int)c->in,
                (int)c->rows, 1.0f, c->dz + lo, (int)c->out, c->x, (int)c->in, 1.0f,
                c->dw + lo * c->in, (int)c->in);
    return GRM_OK;
}

grm_status mmoe_linear_bwd_cpu(float *dx, float *dw, float *db, const float *dz,
                               const float *x, const float *w, int64_t rows, int64_t in,
                               int64_t out, const grm_host_api *host)
{
    if (rows == 0)
        return GRM_OK;
    lin_ctx c = { .dx = dx, .dw = dw, .db = db, .dz = dz, .x = x, .w = w, .rows = rows,
                  .in = in, .out = out };
    // the weight gradient has few output columns per layer; split them thinly
    grm_status st = host->parallel_for(out, 8, bwd_dw_cols, &c);
    if (st != GRM_OK || dx == NULL)
        return st;
    return host->parallel_for(rows, MMOE_GRAIN, bwd_dx_rows, &c);
}

const mmoe_impl mmoe_impl_cpu = { "blas", mmoe_linear_fwd_cpu, mmoe_linear_bwd_cpu };

/* plugins/dense-mlp/linear_cpu.c - the fast CPU linear layer of linear.h: the three
 * products as OpenBLAS cblas_sgemm calls (fp32 accumulation). With a pool, cblas runs per
 * chunk on the host's parallel_for (the host keeps OpenBLAS single-threaded): row chunks
 * for z and dx, output-column chunks for dw and db, so no two chunks write the same
 * memory; without one, each product is a single call covering every row or column.
 * Mirrors linear_ref.c; tests/test-dense-mlp.c and tests/test-dense-mmoe.c compare the two
 * at rtol 1e-4. Callers guarantee every size fits in int. */
#include <cblas.h>
#include <string.h>

#include "linear.h"

/* Rows per chunk of z and dx: large enough for GEMM efficiency. */
#define LINEAR_GRAIN_ROWS 64
/* Output columns per chunk of dw and db: a layer has few of them; split them thinly. */
#define LINEAR_GRAIN_COLS 8

typedef struct lin_ctx {
    float *z, *dx, *dw, *db;
    const float *x, *w, *b, *dz;
    int64_t rows, in, out;
    float dx_beta;              /* 0: dx = dz W, 1: dx += dz W */
} lin_ctx;

/* z [lo:hi, :] = b, then += x [lo:hi, :] W^T (beta = 1) */
static grm_status fwd_rows(void *vctx, int64_t lo, int64_t hi)
{
    const lin_ctx *c = vctx;
    for (int64_t r = lo; r < hi; r++)
        memcpy(c->z + r * c->out, c->b, (size_t)c->out * sizeof *c->z);
    if (c->in == 0)
        return GRM_OK;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(hi - lo), (int)c->out,
                (int)c->in, 1.0f, c->x + lo * c->in, (int)c->in, c->w, (int)c->in, 1.0f,
                c->z + lo * c->out, (int)c->out);
    return GRM_OK;
}

grm_status linear_fwd_cpu(float *z, const float *x, const float *w, const float *b,
                          int64_t rows, int64_t in, int64_t out, const grm_host_api *pool)
{
    if (rows == 0)
        return GRM_OK;
    lin_ctx c = { .z = z, .x = x, .w = w, .b = b, .rows = rows, .in = in, .out = out };
    if (pool == NULL)
        return fwd_rows(&c, 0, rows);
    return pool->parallel_for(rows, LINEAR_GRAIN_ROWS, fwd_rows, &c);
}

/* db [lo:hi] += column sums of dz[:, lo:hi] (rows outer keeps dz reads sequential);
 * dw [lo:hi, :] += dz[:, lo:hi]^T x */
static grm_status bwd_dw_cols(void *vctx, int64_t lo, int64_t hi)
{
    const lin_ctx *c = vctx;
    for (int64_t r = 0; r < c->rows; r++) {
        const float *dzr = c->dz + r * c->out;          /* [out] */
        for (int64_t o = lo; o < hi; o++)
            c->db[o] += dzr[o];
    }
    if (c->in == 0)
        return GRM_OK;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), (int)c->in,
                (int)c->rows, 1.0f, c->dz + lo, (int)c->out, c->x, (int)c->in, 1.0f,
                c->dw + lo * c->in, (int)c->in);
    return GRM_OK;
}

/* dx [lo:hi, :] (+)= dz [lo:hi, :] W */
static grm_status bwd_dx_rows(void *vctx, int64_t lo, int64_t hi)
{
    const lin_ctx *c = vctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo), (int)c->in,
                (int)c->out, 1.0f, c->dz + lo * c->out, (int)c->out, c->w, (int)c->in,
                c->dx_beta, c->dx + lo * c->in, (int)c->in);
    return GRM_OK;
}

grm_status linear_bwd_cpu(float *dx, float *dw, float *db, const float *dz, const float *x,
                          const float *w, int64_t rows, int64_t in, int64_t out,
                          int32_t dx_accumulate, const grm_host_api *pool)
{
    if (rows == 0)
        return GRM_OK;
    lin_ctx c = { .dx = dx, .dw = dw, .db = db, .dz = dz, .x = x, .w = w, .rows = rows,
                  .in = in, .out = out, .dx_beta = dx_accumulate ? 1.0f : 0.0f };
    grm_status st = pool == NULL ? bwd_dw_cols(&c, 0, out)
                                 : pool->parallel_for(out, LINEAR_GRAIN_COLS, bwd_dw_cols, &c);
    if (st != GRM_OK || dx == NULL || in == 0)
        return st;
    if (pool == NULL)
        return bwd_dx_rows(&c, 0, rows);
    return pool->parallel_for(rows, LINEAR_GRAIN_ROWS, bwd_dx_rows, &c);
}

const linear_impl linear_impl_cpu = { "blas", linear_fwd_cpu, linear_bwd_cpu };

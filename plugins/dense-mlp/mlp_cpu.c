/* plugins/dense-mlp/mlp_cpu.c - the fast CPU linear layer: the three products of a
 * linear layer as OpenBLAS cblas_sgemm calls (fp32 accumulation). Mirrors
 * mlp_ref.c: mlp_linear_fwd_ref / mlp_linear_bwd_ref; tests/test-dense-mlp.c compares
 * the two at rtol 1e-4, atol 1e-5. Callers guarantee every size fits in int. */
#include <cblas.h>
#include <string.h>

#include "mlp.h"

grm_status mlp_linear_fwd_cpu(float *z, const float *x, const float *w, const float *b,
                              int64_t rows, int64_t in, int64_t out, void *stream)
{
    (void)stream;
    if (rows == 0)
        return GRM_OK;
    // z starts as the bias in every row, then z += x W^T (beta = 1)
    for (int64_t r = 0; r < rows; r++)
        memcpy(z + r * out, b, (size_t)out * sizeof *z);
    if (in == 0)
        return GRM_OK;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)out, (int)in,
                1.0f, x, (int)in, w, (int)in, 1.0f, z, (int)out);
    return GRM_OK;
}

grm_status mlp_linear_bwd_cpu(float *dx, float *dw, float *db, const float *dz,
                              const float *x, const float *w, int64_t rows, int64_t in,
                              int64_t out, void *stream)
{
    (void)stream;
    if (rows == 0)
        return GRM_OK;
    // db [out] += column sums of dz [rows, out]; rows outer keeps dz reads sequential
    for (int64_t r = 0; r < rows; r++) {
        const float *dzr = dz + r * out;   /* [out] */
        for (int64_t o = 0; o < out; o++)
            db[o] += dzr[o];
    }
    if (in == 0)
        return GRM_OK;
    // dw [out, in] += dz^T [out, rows] x [rows, in]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)rows,
                1.0f, dz, (int)out, x, (int)in, 1.0f, dw, (int)in);
    // dx [rows, in] = dz [rows, out] W [out, in]
    if (dx != NULL)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)in, (int)out,
                    1.0f, dz, (int)out, w, (int)in, 0.0f, dx, (int)in);
    return GRM_OK;
}

const mlp_impl mlp_impl_cpu = { "blas", mlp_linear_fwd_cpu, mlp_linear_bwd_cpu };

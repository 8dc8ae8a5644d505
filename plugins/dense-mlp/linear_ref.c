/* plugins/dense-mlp/linear_ref.c - the reference linear layer of linear.h: plain loops,
 * single thread, double accumulators; the spec that linear_cpu.c is tested against
 * (tests/test-dense-mlp.c and tests/test-dense-mmoe.c compare blas with ref). */
#include "linear.h"

grm_status linear_fwd_ref(float *z, const float *x, const float *w, const float *b,
                          int64_t rows, int64_t in, int64_t out, const linear_exec *ex)
{
    (void)ex;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * in;       /* [in] */
        for (int64_t o = 0; o < out; o++) {
            const float *wo = w + o * in;   /* [in] */
            double acc = b != NULL ? b[o] : 0.0;
            for (int64_t i = 0; i < in; i++)
                acc += (double)xr[i] * wo[i];
            z[r * out + o] = (float)acc;
        }
    }
    return GRM_OK;
}

grm_status linear_bwd_ref(float *dx, float *dw, float *db, const float *dz, const float *x,
                          const float *w, int64_t rows, int64_t in, int64_t out,
                          int32_t dx_accumulate, const linear_exec *ex)
{
    (void)ex;
    // dw[o, i] += sum_r dz[r, o] x[r, i]; db[o] += sum_r dz[r, o]
    for (int64_t o = 0; o < out; o++) {
        if (db != NULL) {
            double bacc = 0;
            for (int64_t r = 0; r < rows; r++)
                bacc += dz[r * out + o];
            db[o] += (float)bacc;
        }
        for (int64_t i = 0; i < in; i++) {
            double acc = 0;
            for (int64_t r = 0; r < rows; r++)
                acc += (double)dz[r * out + o] * x[r * in + i];
            dw[o * in + i] += (float)acc;
        }
    }
    if (dx == NULL)
        return GRM_OK;
    // dx[r, i] (+)= sum_o dz[r, o] w[o, i]; the sum is rounded to float before it is added
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < in; i++) {
            double acc = 0;
            for (int64_t o = 0; o < out; o++)
                acc += (double)dz[r * out + o] * w[o * in + i];
            if (dx_accumulate)
                dx[r * in + i] += (float)acc;
            else
                dx[r * in + i] = (float)acc;
        }
    }
    return GRM_OK;
}

const linear_impl linear_impl_ref = { "ref", linear_fwd_ref, linear_bwd_ref };

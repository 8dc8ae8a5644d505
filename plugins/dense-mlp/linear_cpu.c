/* plugins/dense-mlp/linear_cpu.c - the fast linear layer of linear.h: the three products as
 * the backend's gemm op (grm_backend_iface.gemm: OpenBLAS SGEMM on the `cpu` backend, fp32
 * accumulation). With a pool, the gemm runs per chunk on the host's parallel_for (the host
 * keeps OpenBLAS single-threaded): row chunks for z and dx, output-column chunks for dw
 * and db, so no two chunks write the same memory; without one, each product is a single
 * call covering every row or column. Mirrors linear_ref.c; tests/test-dense-mlp.c and
 * tests/test-dense-mmoe.c compare the two at rtol 1e-4. */
#include <string.h>

#include "linear.h"

typedef struct lin_ctx {
    const grm_backend *be;
    float *z, *dx, *dw, *db;
    const float *x, *w, *b, *dz;
    int64_t rows, in, out;
    float dx_beta;              /* 0: dx = dz W, 1: dx += dz W */
} lin_ctx;

/* C [M, N] = alpha op(A) op(B) + beta C on the backend, row-major (grm/backend.h). */
static grm_status gemm(const lin_ctx *c, int32_t ta, int32_t tb, int64_t M, int64_t N,
                       int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc)
{
    return c->be->iface->gemm(c->be->context, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C,
                              ldc, NULL);
}

/* z [lo:hi, :] = b, then += x [lo:hi, :] W^T (beta = 1); b NULL: z = x W^T (beta = 0),
 * the caller adds the bias in a pass of its own over z (dense-hstu does, in the pass that
 * reads z next, which saves the copy of b into every row and the GEMM's read of z). */
static grm_status fwd_rows(void *vctx, int64_t lo, int64_t hi)
{
    const lin_ctx *c = vctx;
    for (int64_t r = lo; r < hi; r++) {
        float *zr = c->z + r * c->out;
        if (c->b != NULL) memcpy(zr, c->b, (size_t)c->out * sizeof *zr);
        else if (c->in == 0) memset(zr, 0, (size_t)c->out * sizeof *zr);
    }
    if (c->in == 0)
        return GRM_OK;
    return gemm(c, 0, 1, hi - lo, c->out, c->in, c->x + lo * c->in, c->in, c->w, c->in,
                c->b != NULL ? 1.0f : 0.0f, c->z + lo * c->out, c->out);
}

static int64_t grain(int64_t g, int64_t dflt)
{
    return g > 0 ? g : dflt;
}

grm_status linear_fwd_cpu(float *z, const float *x, const float *w, const float *b,
                          int64_t rows, int64_t in, int64_t out, const linear_exec *ex)
{
    if (rows == 0)
        return GRM_OK;
    lin_ctx c = { .be = ex->be, .z = z, .x = x, .w = w, .b = b, .rows = rows, .in = in,
                  .out = out };
    if (ex->pool == NULL)
        return fwd_rows(&c, 0, rows);
    return ex->pool->parallel_for(rows, grain(ex->grain_rows, LINEAR_GRAIN_ROWS), fwd_rows,
                                  &c);
}

/* db [lo:hi] += column sums of dz[:, lo:hi] (rows outer keeps dz reads sequential);
 * dw [lo:hi, :] += dz[:, lo:hi]^T x */
static grm_status bwd_dw_cols(void *vctx, int64_t lo, int64_t hi)
{
    const lin_ctx *c = vctx;
    // the sums in a local block of columns, in registers or L1: through c->db the compiler
    // had to load and store db at every row (db might alias dz), 8% of dense-hstu's layer
    // at 2 threads. Each column still adds its rows in order onto db's value: same bits.
    enum { BLOCK = 64 };
    const float *restrict dz = c->dz;
    const int64_t out = c->out, rows = c->rows;
    if (c->db != NULL)      // NULL: the caller sums the columns itself (linear.h)
        for (int64_t o0 = lo; o0 < hi; o0 += BLOCK) {
            const int64_t n = hi - o0 < BLOCK ? hi - o0 : BLOCK;
            float acc[BLOCK];
            memcpy(acc, c->db + o0, (size_t)n * sizeof *acc);
            for (int64_t r = 0; r < rows; r++) {
                const float *restrict dzr = dz + r * out + o0;      /* [n] */
                for (int64_t o = 0; o < n; o++)
                    acc[o] += dzr[o];
            }
            memcpy(c->db + o0, acc, (size_t)n * sizeof *acc);
        }
    if (c->in == 0)
        return GRM_OK;
    return gemm(c, 1, 0, hi - lo, c->in, c->rows, c->dz + lo, c->out, c->x, c->in, 1.0f,
                c->dw + lo * c->in, c->in);
}

/* dx [lo:hi, :] (+)= dz [lo:hi, :] W */
static grm_status bwd_dx_rows(void *vctx, int64_t lo, int64_t hi)
{
    const lin_ctx *c = vctx;
    return gemm(c, 0, 0, hi - lo, c->in, c->out, c->dz + lo * c->out, c->out, c->w, c->in,
                c->dx_beta, c->dx + lo * c->in, c->in);
}

grm_status linear_bwd_cpu(float *dx, float *dw, float *db, const float *dz, const float *x,
                          const float *w, int64_t rows, int64_t in, int64_t out,
                          int32_t dx_accumulate, const linear_exec *ex)
{
    if (rows == 0)
        return GRM_OK;
    lin_ctx c = { .be = ex->be, .dx = dx, .dw = dw, .db = db, .dz = dz, .x = x, .w = w,
                  .rows = rows, .in = in, .out = out, .dx_beta = dx_accumulate ? 1.0f : 0.0f };
    grm_status st = ex->pool == NULL
        ? bwd_dw_cols(&c, 0, out)
        : ex->pool->parallel_for(out, grain(ex->grain_cols, LINEAR_GRAIN_COLS), bwd_dw_cols, &c);
    if (st != GRM_OK || dx == NULL || in == 0)
        return st;
    if (ex->pool == NULL)
        return bwd_dx_rows(&c, 0, rows);
    return ex->pool->parallel_for(rows, grain(ex->grain_rows, LINEAR_GRAIN_ROWS), bwd_dx_rows,
                                  &c);
}

const linear_impl linear_impl_cpu = { "blas", linear_fwd_cpu, linear_bwd_cpu };

/* grm/transform.h - feature transforms: chunk in, chunk out (DESIGN.md §3).
 * Row-wise transforms (hash, mod, bucketize) answer each chunk at once; aggregating
 * transforms (sequence building) may hold rows back and emit them from flush. */
#ifndef GRM_TRANSFORM_H
#define GRM_TRANSFORM_H

#include <stdint.h>

#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grm_transform_ops {
    uint32_t struct_size;  /* sizeof(grm_transform_ops) */

    /* (required) Create an instance for input `schema` (borrowed for the call). Fails
     * with GRM_EINVAL naming the column when the config refers to a missing column or
     * one of the wrong type. *inst: owned, release with destroy. */
    grm_status (*create)(const void *config, const grm_schema *schema, void **inst);

    /* (required) The output schema. *schema: borrowed, valid until destroy. */
    grm_status (*schema)(void *inst, const grm_schema **schema);

    /* (required) Transform one chunk. *out: borrowed, valid until the next call on the
     * instance and while `in` is unchanged (untouched columns may point into `in`); NULL
     * when the transform buffered the rows (see flush). */
    grm_status (*apply)(void *inst, const grm_chunk *in, const grm_chunk **out);

    /* (optional; if NULL, nothing is buffered) Emit what was held back, after the last
     * chunk. *out as for apply; NULL when nothing remains. Called until it yields NULL. */
    grm_status (*flush)(void *inst, const grm_chunk **out);

    /* (required) Release the instance; NULL is accepted. */
    void (*destroy)(void *inst);
} grm_transform_ops;

/* Bucketize (RecIS Table 1), the one implementation in grm (transform-basic's `bucketize`
 * and core/sparse.c call it): out[j] = the number of boundaries b with b <= x[j], where x
 * is values[j] as a double (exact for f32, and for i64 up to 2^53 in magnitude).
 * A value equal to a boundary goes to the bucket above it, so `bucketize = rating:4` makes
 * a rating of 4 or 5 the label 1; this is RecIS's rule (its fused bucketize kernel counts
 * the boundaries b with !(x < b)), tf.raw_ops.Bucketize's and torch.bucketize(right=True)'s.
 * NaN goes past the last boundary (out = nb), as in RecIS.
 *   out [n] written; values [n] borrowed, f32 or i64 as dtype says (GRM_DTYPE_F32 or
 *   GRM_DTYPE_I64; any other dtype is read as f32); bounds [nb] borrowed, non-decreasing
 *   and not NaN (callers validate them when they parse them); nb >= 0; n >= 0.
 * Blocks of 256 values descend the boundaries together, a number of levels that depends
 * on nb alone, so the loops over a block have no data-dependent branch and vectorise
 * (gathers). Cannot fail. Thread-safe. Since 1.3 (header-only: no ABI change). */
static inline void grm_bucketize(int64_t *out, const void *values, int32_t dtype, int64_t n,
                                 const double *bounds, int64_t nb)
{
    double x[256];
    int64_t base[256];
    int64_t s, j, len;
    for (s = 0; s < n; s += 256) {
        const int64_t m = n - s < 256 ? n - s : 256;
        if (nb <= 0) {
            for (j = 0; j < m; j++) out[s + j] = 0;
            continue;
        }
        if (dtype == GRM_DTYPE_I64) {
            for (j = 0; j < m; j++) x[j] = (double)((const int64_t *)values)[s + j];
        } else {
            for (j = 0; j < m; j++) x[j] = (double)((const float *)values)[s + j];
        }
        for (j = 0; j < m; j++) base[j] = 0;
        /* Invariant: the answer lies in [base, base + len]; bounds[base + half] decides. */
        for (len = nb; len > 1; len -= len / 2) {
            const int64_t half = len / 2;
            for (j = 0; j < m; j++) base[j] += !(x[j] < bounds[base[j] + half]) ? half : 0;
        }
        for (j = 0; j < m; j++) out[s + j] = base[j] + !(x[j] < bounds[base[j]]);
    }
}

#ifdef __cplusplus
}
#endif
#endif /* GRM_TRANSFORM_H */

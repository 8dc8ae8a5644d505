/* tests/hstu-ref.h - the HSTU attention of grm_hstu_attn_args (grm/backend.h) as plain C
 * with double accumulators, for the tests of kernels/hstu_attn.cu (test-cuda-hstu.c,
 * test-cuda-backend.c). It restates the spec, plugins/dense-hstu/hstu_ref.c
 * (hstu_attn_fwd_ref, hstu_attn_bwd_ref), over host copies of the arguments: dense-hstu's
 * internals are not a library a test can link (its .so exports its entry alone). The time
 * bucket is the log formula of hstu.h's hstu_time_bucket, not the thresholds the kernel
 * counts, so a comparison with the kernel checks the thresholds too. Per sequence b, head h,
 * rows i, j of b (local indices), j <= i:
 *   s_ij = q_i . k_j + rab_pos[h, min(i - j, max_len - 1)] + rab_time[h, tb(|t_i - t_j|)]
 *   out_i = sum_j SiLU(s_ij) c v_j,   c = 1 / max_len or 1 / L_b. */
#ifndef GRM_TEST_HSTU_REF_H
#define GRM_TEST_HSTU_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <grm/backend.h>

/* hstu.h's HSTU_TIME_LOG_STEP: the divisor of the log in the time bucket of Zhai et al.'s
 * reference (RelativeBucketedTimeAndPositionBasedBias: log(|dt|.clamp(min=1)) / 0.301). */
#define HREF_TIME_LOG_STEP 0.301

/* hstu.h's hstu_time_bucket, the spec of tb: min(floor(ln(max(|dt|, 1)) / 0.301),
 * nbuckets - 1), in double. */
static inline int64_t href_time_bucket(int64_t dt, int64_t nbuckets)
{
    const uint64_t a = dt < 0 ? (uint64_t)0 - (uint64_t)dt : (uint64_t)dt;
    const double b = floor(log(a < 1 ? 1.0 : (double)a) / HREF_TIME_LOG_STEP);
    return b >= (double)(nbuckets - 1) ? nbuckets - 1 : (int64_t)b;
}

/* plugins/dense-hstu/hstu_cpu.c's hstu_time_thresholds, what a caller passes as time_thr:
 * thr[b] = the smallest |dt| whose bucket is >= b (thr[0] = 0), so tb(|dt|) is the number
 * of b >= 1 with thr[b] <= |dt|. */
static inline void href_time_thresholds(int64_t *thr, int64_t nbuckets)
{
    if (nbuckets > 0)
        thr[0] = 0;
    for (int64_t b = 1; b < nbuckets; b++) {
        int64_t t = (int64_t)ceil(exp(HREF_TIME_LOG_STEP * (double)b));
        while (t > 1 && href_time_bucket(t - 1, INT64_MAX) >= b)
            t--;
        while (href_time_bucket(t, INT64_MAX) < b)
            t++;
        thr[b] = t;
    }
}

/* s_ij of head h for global rows i, j of one sequence. */
static inline double href_score(const grm_hstu_attn_args *a, int64_t h, int64_t i, int64_t j)
{
    const float *q = a->q + i * a->ld + h * a->dqk, *k = a->k + j * a->ld + h * a->dqk;
    double s = 0;
    for (int64_t d = 0; d < a->dqk; d++)
        s += (double)q[d] * (double)k[d];
    if (a->rab_pos != NULL) {
        const int64_t rel = i - j;
        s += a->rab_pos[h * a->max_len + (rel < a->max_len - 1 ? rel : a->max_len - 1)];
    }
    if (a->rab_time != NULL && a->times != NULL)
        s += a->rab_time[h * a->nbuckets
                         + href_time_bucket(a->times[i] - a->times[j], a->nbuckets)];
    return s;
}

static inline double href_norm(const grm_hstu_attn_args *a, int64_t len)
{
    return a->norm == GRM_HSTU_NORM_LENGTH ? 1.0 / (double)len : 1.0 / (double)a->max_len;
}

/* out [N, H*dv] = the attention of *a (host pointers). */
static inline void href_fwd(double *out, const grm_hstu_attn_args *a)
{
    const int64_t HV = a->H * a->dv;
    memset(out, 0, (size_t)(a->offsets[a->nseq] * HV) * sizeof *out);
    for (int64_t b = 0; b < a->nseq; b++) {
        const int64_t o = a->offsets[b], e = a->offsets[b + 1];
        const double c = href_norm(a, e - o);
        for (int64_t h = 0; h < a->H; h++)
            for (int64_t i = o; i < e; i++)
                for (int64_t j = o; j <= i; j++) {
                    const double s = href_score(a, h, i, j);
                    const double w = s / (1.0 + exp(-s)) * c;
                    for (int64_t d = 0; d < a->dv; d++)
                        out[i * HV + h * a->dv + d] += w * a->v[j * a->ld + h * a->dv + d];
                }
    }
}

/* The backward from dout [N, H*dv]: the head columns of dq, dk, dv [N, ld] are overwritten
 * (the other columns untouched); d_rab_pos [H, max_len] and d_rab_time [H, nbuckets] are
 * added to (NULL: skipped; nothing is added to d_rab_time without times), as the spec's. */
static inline void href_bwd(double *dq, double *dk, double *dv, double *d_rab_pos,
                            double *d_rab_time, const float *dout, const grm_hstu_attn_args *a)
{
    const int64_t HV = a->H * a->dv, N = a->offsets[a->nseq];
    for (int64_t r = 0; r < N; r++) {
        for (int64_t x = 0; x < a->H * a->dqk; x++)
            dq[r * a->ld + x] = dk[r * a->ld + x] = 0;
        for (int64_t x = 0; x < HV; x++)
            dv[r * a->ld + x] = 0;
    }
    for (int64_t b = 0; b < a->nseq; b++) {
        const int64_t o = a->offsets[b], e = a->offsets[b + 1];
        const double c = href_norm(a, e - o);
        for (int64_t h = 0; h < a->H; h++)
            for (int64_t i = o; i < e; i++)
                for (int64_t j = o; j <= i; j++) {
                    const double s = href_score(a, h, i, j), sg = 1.0 / (1.0 + exp(-s));
                    const float *doi = dout + i * HV + h * a->dv;
                    double dp = 0;
                    for (int64_t d = 0; d < a->dv; d++) {
                        dp += (double)doi[d] * a->v[j * a->ld + h * a->dv + d];
                        dv[j * a->ld + h * a->dv + d] += s * sg * c * doi[d];
                    }
                    const double ds = dp * c * sg * (1.0 + s * (1.0 - sg));
                    for (int64_t d = 0; d < a->dqk; d++) {
                        dq[i * a->ld + h * a->dqk + d] += ds * a->k[j * a->ld + h * a->dqk + d];
                        dk[j * a->ld + h * a->dqk + d] += ds * a->q[i * a->ld + h * a->dqk + d];
                    }
                    const int64_t rel = i - j;
                    if (d_rab_pos != NULL)
                        d_rab_pos[h * a->max_len + (rel < a->max_len - 1 ? rel : a->max_len - 1)]
                            += ds;
                    if (d_rab_time != NULL && a->times != NULL)
                        d_rab_time[h * a->nbuckets
                                   + href_time_bucket(a->times[i] - a->times[j], a->nbuckets)]
                            += ds;
                }
    }
}

#endif /* GRM_TEST_HSTU_REF_H */

/* plugins/dense-hstu/hstu_ref.c - the reference attention of dense-hstu: the jagged causal
 * pointwise attention with relative attention bias (MTGRBoost §2 eq. 2; TurboGR §4.1.1,
 * App. A), as plain loops with double accumulators on one thread (its linear layers are
 * dense-mlp's linear_ref.c). This is the spec the fast path (hstu_cpu.c) and the CUDA
 * backend's op (kernels/hstu_attn.cu) are tested against. */
#include <stdlib.h>
#include <string.h>

#include "hstu.h"

/* ---- attention ---- */

static double sigmoid_d(double s)
{
    return 1.0 / (1.0 + exp(-s));
}

/* s_ij of head h for global rows i, j of the sequence starting at row o (j <= i). */
static double score_ref(const grm_hstu_attn_args *a, int64_t h, int64_t o, int64_t i, int64_t j)
{
    const float *q = a->q + i * a->ld + h * a->dqk;     /* [dqk] */
    const float *k = a->k + j * a->ld + h * a->dqk;     /* [dqk] */
    double s = 0;
    for (int64_t d = 0; d < a->dqk; d++)
        s += (double)q[d] * (double)k[d];
    if (a->rab_pos != NULL)
        s += a->rab_pos[h * a->max_len + hstu_pos_bucket(i - o, j - o, a->max_len)];
    if (a->rab_time != NULL && a->times != NULL)
        s += a->rab_time[h * a->nbuckets
                         + hstu_time_bucket(a->times[i] - a->times[j], a->nbuckets)];
    return s;
}

static double norm_scale(const grm_hstu_attn_args *a, int64_t len)
{
    return a->norm == HSTU_NORM_LENGTH ? 1.0 / (double)len : 1.0 / (double)a->max_len;
}

grm_status hstu_attn_fwd_ref(void *ctx, float *out, const grm_hstu_attn_args *a, void *ws)
{
    (void)ctx;
    (void)ws;
    const int64_t HV = a->H * a->dv;
    double *acc = malloc((size_t)(a->dv + 1) * sizeof *acc);    /* [dv] */
    if (acc == NULL)
        return a->host->errorf(GRM_ENOMEM, "dense-hstu: forward: out of memory");
    for (int64_t s = 0; s < a->nseq; s++) {
        const int64_t o = a->offsets[s], e = a->offsets[s + 1];
        const double c = norm_scale(a, e - o);
        for (int64_t h = 0; h < a->H; h++)
            for (int64_t i = o; i < e; i++) {
                memset(acc, 0, (size_t)a->dv * sizeof *acc);
                for (int64_t j = o; j <= i; j++) {
                    const double sc = score_ref(a, h, o, i, j);
                    const double att = sc * sigmoid_d(sc) * c;     /* SiLU(s) / n */
                    for (int64_t d = 0; d < a->dv; d++)
                        acc[d] += att * a->v[j * a->ld + h * a->dv + d];
                }
                for (int64_t d = 0; d < a->dv; d++)
                    out[i * HV + h * a->dv + d] = (float)acc[d];
            }
    }
    free(acc);
    return GRM_OK;
}

/* d a_ij / d s_ij = c * SiLU'(s) = c * sigma(s) (1 + s (1 - sigma(s))), times
 * da_ij = do_i . v_j. */
static double dscore_ref(const grm_hstu_attn_args *a, const float *dout, int64_t h, int64_t o,
                         int64_t i, int64_t j, double c, double *att)
{
    const double sc = score_ref(a, h, o, i, j), sg = sigmoid_d(sc);
    const float *doi = dout + i * a->H * a->dv + h * a->dv;    /* [dv] */
    const float *vj = a->v + j * a->ld + h * a->dv;            /* [dv] */
    double da = 0;
    for (int64_t d = 0; d < a->dv; d++)
        da += (double)doi[d] * (double)vj[d];
    *att = sc * sg * c;
    return da * c * sg * (1.0 + sc * (1.0 - sg));
}

grm_status hstu_attn_bwd_ref(void *ctx, float *dq, float *dk, float *dv, float *d_rab_pos,
                             float *d_rab_time, const float *dout, const grm_hstu_attn_args *a,
                             void *ws)
{
    (void)ctx;
    (void)ws;
    const int64_t HV = a->H * a->dv;
    const int64_t nrab = a->max_len + a->nbuckets;
    double *grab = calloc((size_t)nrab, sizeof *grab);   /* [max_len + nbuckets] per head */
    double *acc = malloc((size_t)(a->dqk + a->dv + 1) * sizeof *acc);
    if (grab == NULL || acc == NULL) {
        free(grab);
        free(acc);
        return a->host->errorf(GRM_ENOMEM, "dense-hstu: backward: out of memory");
    }
    for (int64_t h = 0; h < a->H; h++) {
        memset(grab, 0, (size_t)nrab * sizeof *grab);
        for (int64_t s = 0; s < a->nseq; s++) {
            const int64_t o = a->offsets[s], e = a->offsets[s + 1];
            const double c = norm_scale(a, e - o);
            // dq_i = sum_{j <= i} ds_ij k_j, and the bias gradients
            for (int64_t i = o; i < e; i++) {
                memset(acc, 0, (size_t)a->dqk * sizeof *acc);
                for (int64_t j = o; j <= i; j++) {
                    double att;
                    const double ds = dscore_ref(a, dout, h, o, i, j, c, &att);
                    for (int64_t d = 0; d < a->dqk; d++)
                        acc[d] += ds * a->k[j * a->ld + h * a->dqk + d];
                    grab[hstu_pos_bucket(i - o, j - o, a->max_len)] += ds;
                    if (a->times != NULL)
                        grab[a->max_len
                             + hstu_time_bucket(a->times[i] - a->times[j], a->nbuckets)] += ds;
                }
                for (int64_t d = 0; d < a->dqk; d++)
                    dq[i * a->ld + h * a->dqk + d] = (float)acc[d];
            }
            // dk_j = sum_{i >= j} ds_ij q_i, dv_j = sum_{i >= j} a_ij do_i
            for (int64_t j = o; j < e; j++) {
                memset(acc, 0, (size_t)(a->dqk + a->dv) * sizeof *acc);
                for (int64_t i = j; i < e; i++) {
                    double att;
                    const double ds = dscore_ref(a, dout, h, o, i, j, c, &att);
                    for (int64_t d = 0; d < a->dqk; d++)
                        acc[d] += ds * a->q[i * a->ld + h * a->dqk + d];
                    for (int64_t d = 0; d < a->dv; d++)
                        acc[a->dqk + d] += att * dout[i * HV + h * a->dv + d];
                }
                for (int64_t d = 0; d < a->dqk; d++)
                    dk[j * a->ld + h * a->dqk + d] = (float)acc[d];
                for (int64_t d = 0; d < a->dv; d++)
                    dv[j * a->ld + h * a->dv + d] = (float)acc[a->dqk + d];
            }
        }
        if (d_rab_pos != NULL)
            for (int64_t b = 0; b < a->max_len; b++)
                d_rab_pos[h * a->max_len + b] += (float)grab[b];
        if (d_rab_time != NULL)
            for (int64_t b = 0; b < a->nbuckets; b++)
                d_rab_time[h * a->nbuckets + b] += (float)grab[a->max_len + b];
    }
    free(grab);
    free(acc);
    return GRM_OK;
}

const hstu_impl hstu_impl_ref = {
    "ref", 0, linear_fwd_ref, linear_bwd_ref, hstu_attn_fwd_ref, hstu_attn_bwd_ref
};

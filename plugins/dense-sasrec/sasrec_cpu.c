/* plugins/dense-sasrec/sasrec_cpu.c - the fast CPU kernels of the SASRec block.
 * Linear layers are dense-mlp's (linear_cpu.c). Attention: one task
 * per (sequence, head) on the thread pool; each query row makes one pass over its causal
 * keys with an online softmax (running max and sum, Milakov & Gimelshein 2018), so no
 * L x L matrix exists; the backward recomputes the probabilities from the saved row
 * log-sum-exp (as FlashAttention-2, Dao 2023). Mirrors sasrec_ref.c; tests/
 * test-dense-sasrec.c compares the two at rtol 1e-4, atol 1e-5. */
#include <math.h>
#include <string.h>

#include "sasrec.h"

/* ---- attention ---- */

typedef struct attn_task {
    const sasrec_attn_args *a;
    float *o, *lse, *dq, *dk, *dv;
    const float *q, *k, *v, *dout, *oin, *lsein;
} attn_task;

static float dotf(const float *x, const float *y, int64_t n)
{
    float acc = 0;
    for (int64_t c = 0; c < n; c++)
        acc += x[c] * y[c];
    return acc;
}

/* Tasks t = s H + h over [t0, t1). */
static grm_status attn_fwd_range(void *ctx, int64_t t0, int64_t t1)
{
    const attn_task *t = ctx;
    const sasrec_attn_args *a = t->a;
    const int64_t dh = a->dh;
    for (int64_t task = t0; task < t1; task++) {
        const int64_t s = task / a->H, h = task % a->H;
        const int64_t first = a->offsets[s], end = a->offsets[s + 1];
        for (int64_t i = first; i < end; i++) {
            const float *qi = t->q + i * a->ldq + h * dh;    /* [dh] */
            float *oi = t->o + i * a->ldo + h * dh;          /* [dh] accumulator */
            float m = -INFINITY, l = 0;
            memset(oi, 0, (size_t)dh * sizeof *oi);
            for (int64_t j = first; j <= i; j++) {           // causal keys only
                const float *kj = t->k + j * a->ldkv + h * dh;   /* [dh] */
                const float *vj = t->v + j * a->ldkv + h * dh;   /* [dh] */
                const float sc = a->scale * dotf(qi, kj, dh);
                if (sc > m) {
                    // a new running max: rescale what was summed under the old one
                    const float corr = expf(m - sc);          // 0 on the first key
                    l *= corr;
                    for (int64_t c = 0; c < dh; c++)
                        oi[c] *= corr;
                    m = sc;
                }
                const float p = expf(sc - m);
                l += p;
                // dropout acts on the normalized probability; the normalizer l does not
                // see it, so the factor only scales this key's contribution
                const float w = a->dropout > 0 ? p * sasrec_attn_drop(a, i, j, h) : p;
                if (w != 0.0f)
                    for (int64_t c = 0; c < dh; c++)
                        oi[c] += w * vj[c];
            }
            const float inv = 1.0f / l;                      // l >= 1: the max term is 1
            for (int64_t c = 0; c < dh; c++)
                oi[c] *= inv;
            t->lse[i * a->H + h] = m + logf(l);
        }
    }
    return GRM_OK;
}

grm_status sasrec_attn_fwd_cpu(float *o, float *lse, const float *q, const float *k,
                               const float *v, const sasrec_attn_args *a,
                               const grm_host_api *host)
{
    const int64_t n = a->nseq * a->H;
    if (n == 0)
        return GRM_OK;
    attn_task t = { .a = a, .o = o, .lse = lse, .q = q, .k = k, .v = v };
    return host->parallel_for(n, 1, attn_fwd_range, &t);
}

/* The gradients of one (sequence, head) touch only that head's columns of that
 * sequence's rows, so tasks write disjoint memory. */
static grm_status attn_bwd_range(void *ctx, int64_t t0, int64_t t1)
{
    const attn_task *t = ctx;
    const sasrec_attn_args *a = t->a;
    const int64_t dh = a->dh;
    for (int64_t task = t0; task < t1; task++) {
        const int64_t s = task / a->H, h = task % a->H;
        const int64_t first = a->offsets[s], end = a->offsets[s + 1];
        for (int64_t i = first; i < end; i++) {
            memset(t->dq + i * a->ldq + h * dh, 0, (size_t)dh * sizeof(float));
            memset(t->dk + i * a->ldkv + h * dh, 0, (size_t)dh * sizeof(float));
            memset(t->dv + i * a->ldkv + h * dh, 0, (size_t)dh * sizeof(float));
        }
        for (int64_t i = first; i < end; i++) {
            const float *qi = t->q + i * a->ldq + h * dh;         /* [dh] */
            const float *doi = t->dout + i * a->ldo + h * dh;     /* [dh] */
            float *dqi = t->dq + i * a->ldq + h * dh;             /* [dh] */
            const float Di = dotf(doi, t->oin + i * a->ldo + h * dh, dh);
            const float lse = t->lsein[i * a->H + h];
            for (int64_t j = first; j <= i; j++) {
                const float *kj = t->k + j * a->ldkv + h * dh;    /* [dh] */
                const float *vj = t->v + j * a->ldkv + h * dh;    /* [dh] */
                float *dkj = t->dk + j * a->ldkv + h * dh;        /* [dh] */
                float *dvj = t->dv + j * a->ldkv + h * dh;        /* [dh] */
                const float p = expf(a->scale * dotf(qi, kj, dh) - lse);
                const float z = a->dropout > 0 ? sasrec_attn_drop(a, i, j, h) : 1.0f;
                const float dp = z * dotf(doi, vj, dh);
                const float ds = p * (dp - Di) * a->scale;
                const float zp = z * p;
                for (int64_t c = 0; c < dh; c++) {
                    dvj[c] += zp * doi[c];
                    dqi[c] += ds * kj[c];
                    dkj[c] += ds * qi[c];
                }
            }
        }
    }
    return GRM_OK;
}

grm_status sasrec_attn_bwd_cpu(float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *o,
                               const float *lse, const sasrec_attn_args *a,
                               const grm_host_api *host)
{
    const int64_t n = a->nseq * a->H;
    if (n == 0)
        return GRM_OK;
    attn_task t = { .a = a, .dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k,
                    .v = v, .oin = o, .lsein = lse };
    return host->parallel_for(n, 1, attn_bwd_range, &t);
}

const sasrec_impl sasrec_impl_cpu = {
    "blas", linear_fwd_cpu, linear_bwd_cpu, sasrec_attn_fwd_cpu,
    sasrec_attn_bwd_cpu
};

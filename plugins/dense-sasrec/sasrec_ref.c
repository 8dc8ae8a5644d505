/* plugins/dense-sasrec/sasrec_ref.c - the reference kernels of the SASRec block (plain
 * loops, single thread, double accumulators for dot products and reductions: the spec that
 * sasrec_cpu.c is tested against) and the elementwise pieces every implementation shares
 * (LayerNorm forward and backward). Attention: Kang & McAuley 2018, Sec. III
 * "Self-Attention Block", softmax(Q K^T / sqrt(d)) V with the causal mask of "Causality". */
#include <math.h>
#include <string.h>

#include "sasrec.h"

/* ---- causal attention ---- */

/* scale q_i . k_j for head h (double). */
static double score(const float *q, const float *k, const sasrec_attn_args *a, int64_t i,
                    int64_t j, int64_t h)
{
    const float *qi = q + i * a->ldq + h * a->dh;     /* [dh] */
    const float *kj = k + j * a->ldkv + h * a->dh;    /* [dh] */
    double acc = 0;
    for (int64_t c = 0; c < a->dh; c++)
        acc += (double)qi[c] * kj[c];
    return acc * a->scale;
}

/* Three plain passes per query row (max, sum, weighted values) recompute the scores, so
 * the reference needs no buffer at all. */
grm_status sasrec_attn_fwd_ref(float *o, float *lse, const float *q, const float *k,
                               const float *v, const sasrec_attn_args *a,
                               const grm_host_api *host)
{
    (void)host;
    const int64_t dh = a->dh;
    for (int64_t s = 0; s < a->nseq; s++) {
        const int64_t first = a->offsets[s], end = a->offsets[s + 1];
        for (int64_t h = 0; h < a->H; h++) {
            for (int64_t i = first; i < end; i++) {
                // causality: query i sees keys first..i only
                double m = -INFINITY;
                for (int64_t j = first; j <= i; j++) {
                    const double sc = score(q, k, a, i, j, h);
                    if (sc > m)
                        m = sc;
                }
                double sum = 0;
                for (int64_t j = first; j <= i; j++)
                    sum += exp(score(q, k, a, i, j, h) - m);
                float *oi = o + i * a->ldo + h * dh;     /* [dh] */
                memset(oi, 0, (size_t)dh * sizeof *oi);
                for (int64_t j = first; j <= i; j++) {
                    double p = exp(score(q, k, a, i, j, h) - m) / sum;
                    if (a->dropout > 0)
                        p *= sasrec_attn_drop(a, i, j, h);
                    const float *vj = v + j * a->ldkv + h * dh;     /* [dh] */
                    for (int64_t c = 0; c < dh; c++)
                        oi[c] += (float)(p * vj[c]);
                }
                lse[i * a->H + h] = (float)(m + log(sum));
            }
        }
    }
    return GRM_OK;
}

/* With P_ij = exp(S_ij - lse_i), Z the dropout factors and O = (Z * P) V:
 *   dV_j += Z_ij P_ij dO_i,  dP_ij = Z_ij dO_i . v_j,
 *   dS_ij = P_ij (dP_ij - D_i) with D_i = sum_j P_ij dP_ij = dO_i . O_i,
 *   dQ_i += scale sum_j dS_ij k_j,  dK_j += scale dS_ij q_i. */
grm_status sasrec_attn_bwd_ref(float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *o,
                               const float *lse, const sasrec_attn_args *a,
                               const grm_host_api *host)
{
    (void)host;
    const int64_t dh = a->dh, N = a->offsets[a->nseq];
    for (int64_t i = 0; i < N; i++) {
        for (int64_t h = 0; h < a->H; h++) {
            memset(dq + i * a->ldq + h * dh, 0, (size_t)dh * sizeof *dq);
            memset(dk + i * a->ldkv + h * dh, 0, (size_t)dh * sizeof *dk);
            memset(dv + i * a->ldkv + h * dh, 0, (size_t)dh * sizeof *dv);
        }
    }
    for (int64_t s = 0; s < a->nseq; s++) {
        const int64_t first = a->offsets[s], end = a->offsets[s + 1];
        for (int64_t h = 0; h < a->H; h++) {
            for (int64_t i = first; i < end; i++) {
                const float *doi = dout + i * a->ldo + h * dh;   /* [dh] */
                const float *oi = o + i * a->ldo + h * dh;       /* [dh] */
                const float *qi = q + i * a->ldq + h * dh;       /* [dh] */
                float *dqi = dq + i * a->ldq + h * dh;           /* [dh] */
                double Di = 0;
                for (int64_t c = 0; c < dh; c++)
                    Di += (double)doi[c] * oi[c];
                for (int64_t j = first; j <= i; j++) {
                    const float *vj = v + j * a->ldkv + h * dh;  /* [dh] */
                    const float *kj = k + j * a->ldkv + h * dh;  /* [dh] */
                    float *dkj = dk + j * a->ldkv + h * dh;      /* [dh] */
                    float *dvj = dv + j * a->ldkv + h * dh;      /* [dh] */
                    const double p = exp(score(q, k, a, i, j, h) - lse[i * a->H + h]);
                    const double z = a->dropout > 0 ? sasrec_attn_drop(a, i, j, h) : 1.0;
                    double dp = 0;
                    for (int64_t c = 0; c < dh; c++)
                        dp += (double)doi[c] * vj[c];
                    dp *= z;
                    const double ds = p * (dp - Di) * a->scale;
                    for (int64_t c = 0; c < dh; c++) {
                        dvj[c] += (float)(z * p * doi[c]);
                        dqi[c] += (float)(ds * kj[c]);
                        dkj[c] += (float)(ds * qi[c]);
                    }
                }
            }
        }
    }
    return GRM_OK;
}

const sasrec_impl sasrec_impl_ref = {
    "ref", linear_fwd_ref, linear_bwd_ref, sasrec_attn_fwd_ref,
    sasrec_attn_bwd_ref
};

/* ---- LayerNorm ---- */

void sasrec_ln_fwd(float *y, float *mu, float *rstd, const float *x, const float *gamma,
                   const float *beta, int64_t rows, int64_t d, double eps)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;    /* [d] */
        float *yr = y + r * d;          /* [d] */
        double m = 0, var = 0;
        for (int64_t c = 0; c < d; c++)
            m += xr[c];
        m /= (double)d;
        for (int64_t c = 0; c < d; c++)
            var += ((double)xr[c] - m) * ((double)xr[c] - m);
        var /= (double)d;               // biased, as torch.nn.LayerNorm
        const double rs = 1.0 / sqrt(var + eps);
        for (int64_t c = 0; c < d; c++)
            yr[c] = (float)(((double)xr[c] - m) * rs * gamma[c] + beta[c]);
        mu[r] = (float)m;
        rstd[r] = (float)rs;
    }
}

/* xhat = (x - mu) rstd, g = dy gamma:
 * dx = rstd (g - mean(g) - xhat mean(g xhat)), dgamma += dy xhat, dbeta += dy. */
void sasrec_ln_bwd_params(float *dgamma, float *dbeta, const float *dy, const float *x,
                          const float *mu, const float *rstd, int64_t rows, int64_t d)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *gr = dy + r * d;   /* [d] */
        const double m = mu[r], rs = rstd[r];
        for (int64_t c = 0; c < d; c++) {
            const double xh = ((double)xr[c] - m) * rs;
            dgamma[c] += (float)(gr[c] * xh);
            dbeta[c] += gr[c];
        }
    }
}

void sasrec_ln_bwd_dx(float *dx, const float *dy, const float *x, const float *mu,
                      const float *rstd, const float *gamma, int64_t rows, int64_t d,
                      int32_t accumulate)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *gr = dy + r * d;   /* [d] */
        float *dr = dx + r * d;                           /* [d] */
        const double m = mu[r], rs = rstd[r];
        double mg = 0, mgx = 0;
        for (int64_t c = 0; c < d; c++) {
            const double xh = ((double)xr[c] - m) * rs;
            const double g = (double)gr[c] * gamma[c];
            mg += g;
            mgx += g * xh;
        }
        mg /= (double)d;
        mgx /= (double)d;
        for (int64_t c = 0; c < d; c++) {
            const double xh = ((double)xr[c] - m) * rs;
            const double g = (double)gr[c] * gamma[c];
            const float v = (float)(rs * (g - mg - xh * mgx));
            dr[c] = accumulate ? dr[c] + v : v;
        }
    }
}

void sasrec_ln_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                   const float *mu, const float *rstd, const float *gamma, int64_t rows,
                   int64_t d, int32_t accumulate)
{
    sasrec_ln_bwd_params(dgamma, dbeta, dy, x, mu, rstd, rows, d);   /* before dx: dx may be dy */
    sasrec_ln_bwd_dx(dx, dy, x, mu, rstd, gamma, rows, d, accumulate);
}

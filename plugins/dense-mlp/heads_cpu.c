/* plugins/dense-mlp/heads_cpu.c - the fast CPU path of the sampled-softmax loss: the same
 * function type as ssm_loss_ref (heads_ref.c), with the B x (B + R) logits and their
 * gradients as four OpenBLAS GEMMs and the row-wise softmax on the host thread pool.
 *
 * Layout of work: S [B, B + R] floats (column k < B: u_b . pos_k, the diagonal being the
 * row's own positive and the rest in-batch negatives; column B + j: u_b . neg_j), then
 * the per-row losses [B] doubles. The softmax, max and log-sum-exp run in double, as in
 * the reference; the dot products accumulate in float (tests compare with rtol 1e-4). */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "mlp.h"

int64_t ssm_work_doubles(int64_t B, int64_t R)
{
    int64_t ref = 1 + R + B;
    int64_t cpu = (B * (B + R) + 1) / 2 + B;
    return ref > cpu ? ref : cpu;
}

typedef struct ssm_rows_ctx {
    float *S;                   /* [B, B + R] logits in, gradients of the logits out */
    double *rowloss;            /* [B] */
    const int64_t *pos_ids, *neg_ids;
    const float *weights;
    const double *logq;
    int32_t in_batch;
    double inv_t, wsum;
    int64_t B, R;
} ssm_rows_ctx;

/* Rows [lo, hi): softmax over the unmasked logits of each row, loss, and
 * d loss / d logit = w / wsum / T * (p - [positive]) written back into S. */
static grm_status ssm_rows(void *vctx, int64_t lo, int64_t hi)
{
    const ssm_rows_ctx *c = vctx;
    const int64_t B = c->B, R = c->R, n = B + R;
    for (int64_t b = lo; b < hi; b++) {
        float *s = c->S + b * n;
        const double w = c->weights != NULL ? (double)c->weights[b] : 1.0;
        const int64_t pid = c->pos_ids != NULL ? c->pos_ids[b] : INT64_MIN;
        double mx = (double)s[b] * c->inv_t;
        // mask: in-batch columns off, or equal to the row's positive; sampled negatives
        // equal to the positive (as in ssm_loss_ref)
        for (int64_t k = 0; k < n; k++) {
            int masked;
            double v;
            if (k < B) {
                masked = k != b && (!c->in_batch || (c->pos_ids != NULL && c->pos_ids[k] == pid));
                v = (double)s[k] * c->inv_t;
            } else {
                masked = c->neg_ids != NULL && c->pos_ids != NULL && c->neg_ids[k - B] == pid;
                v = (double)s[k] * c->inv_t - (c->logq != NULL ? c->logq[k - B] : 0.0);
            }
            if (masked) {
                s[k] = -INFINITY;
                continue;
            }
            s[k] = (float)v;
            if (v > mx) mx = v;
        }
        double z = 0;
        for (int64_t k = 0; k < n; k++)
            if (s[k] != -INFINITY) z += exp((double)s[k] - mx);
        const double lse = mx + log(z);
        c->rowloss[b] = w * (lse - (double)s[b]);
        const double g = w / c->wsum * c->inv_t;
        for (int64_t k = 0; k < n; k++) {
            const double p = s[k] == -INFINITY ? 0.0 : exp((double)s[k] - lse);
            s[k] = (float)(g * (p - (k == b ? 1.0 : 0.0)));
        }
    }
    return GRM_OK;
}

grm_status ssm_loss_cpu(const grm_host_api *host, double *loss, float *d_pred,
                        float *d_pos, float *d_neg, const float *pred, const float *pos,
                        const float *neg, const int64_t *pos_ids, const int64_t *neg_ids,
                        const float *weights, const double *logq, int32_t in_batch,
                        double temperature, int64_t B, int64_t R, int64_t D, double *work)
{
    double wsum = 0;
    for (int64_t b = 0; b < B; b++) wsum += weights != NULL ? (double)weights[b] : 1.0;
    if (B > 0 && !(wsum > 0))
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: loss: sample weights sum to "
                            "%g over %lld rows; at least one weight must be positive", wsum,
                            (long long)B);
    if (d_neg != NULL && R > 0 && B == 0) memset(d_neg, 0, (size_t)(R * D) * sizeof *d_neg);
    if (B == 0) {
        *loss = 0.0;
        return GRM_OK;
    }
    const int64_t n = B + R;
    float *S = (float *)work;                               /* [B, B + R] */
    double *rowloss = work + (B * n + 1) / 2;               /* [B] */
    const int M = (int)B, N = (int)n, K = (int)D;
    // S[:, :B] = pred pos^T; S[:, B:] = pred neg^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, K, 1.0f, pred, K, pos, K, 0.0f,
                S, N);
    if (R > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, (int)R, K, 1.0f, pred, K, neg,
                    K, 0.0f, S + B, N);
    ssm_rows_ctx ctx = { S, rowloss, pos_ids, neg_ids, weights, logq, in_batch,
                         1.0 / temperature, wsum, B, R };
    grm_status st = host->parallel_for(B, 16, ssm_rows, &ctx);
    if (st != GRM_OK) return st;
    double total = 0;
    for (int64_t b = 0; b < B; b++) total += rowloss[b];   /* fixed order: deterministic */
    *loss = total / wsum;
    // with G = S now holding d loss / d logits:
    // d_pred = G[:, :B] pos + G[:, B:] neg; d_pos = G[:, :B]^T pred; d_neg = G[:, B:]^T pred
    if (d_pred != NULL) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, M, 1.0f, S, N, pos, K,
                    0.0f, d_pred, K);
        if (R > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, (int)R, 1.0f, S + B,
                        N, neg, K, 1.0f, d_pred, K);
    }
    if (d_pos != NULL)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, K, M, 1.0f, S, N, pred, K, 0.0f,
                    d_pos, K);
    if (d_neg != NULL && R > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)R, K, M, 1.0f, S + B, N, pred,
                    K, 0.0f, d_neg, K);
    return GRM_OK;
}

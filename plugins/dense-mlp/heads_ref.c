/* plugins/dense-mlp/heads_ref.c - numerics of the two heads, plain loops in double:
 * binary cross-entropy with logits (multi-task, weighted) and sampled softmax with
 * shared sampled negatives and in-batch negatives (Jean et al. 2015; Yi et al. 2019,
 * "Sampling-bias-corrected neural modeling", for the logQ correction), and the
 * with-replacement negative draw. */
#include <math.h>
#include <string.h>

#include "mlp.h"

/* ---- binary cross-entropy with logits ---- */

grm_status bce_loss_ref(const grm_host_api *host, double *loss, float *d_pred,
                        float *scores, const float *pred, const float *labels,
                        const float *weights, int64_t B, int64_t T)
{
    double wsum = 0;
    for (int64_t b = 0; b < B; b++)
        wsum += weights != NULL ? (double)weights[b] : 1.0;
    if (B > 0 && !(wsum > 0))
        return host->errorf(GRM_EINVAL, "dense-bce: loss: sample weights sum to %g over %lld "
                            "rows; at least one weight must be positive", wsum, (long long)B);
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        const double w = weights != NULL ? (double)weights[b] : 1.0;
        double lb = 0;
        for (int64_t t = 0; t < T; t++) {
            const double z = pred[b * T + t], y = labels[b * T + t];
            // stable: max(z, 0) - z y + log(1 + exp(-|z|)), never exp of a positive
            lb += fmax(z, 0.0) - z * y + log1p(exp(-fabs(z)));
            const double e = exp(-fabs(z));
            const double s = z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);   // sigmoid(z)
            if (d_pred != NULL)
                d_pred[b * T + t] = (float)(w * (s - y) / wsum);
            if (scores != NULL)
                scores[b * T + t] = (float)s;
        }
        total += w * lb;
    }
    *loss = B > 0 ? total / wsum : 0.0;
    return GRM_OK;
}

/* ---- sampled softmax ---- */

static double dot(const float *a, const float *b, int64_t D)
{
    double acc = 0;
    for (int64_t j = 0; j < D; j++)
        acc += (double)a[j] * b[j];
    return acc;
}

/* dst [D] += c * src [D] */
static void axpy(float *dst, double c, const float *src, int64_t D)
{
    for (int64_t j = 0; j < D; j++)
        dst[j] += (float)(c * src[j]);
}

grm_status ssm_loss_ref(const grm_host_api *host, double *loss, float *d_pred,
                        float *d_pos, float *d_neg, const float *pred, const float *pos,
                        const float *neg, const int64_t *pos_ids, const int64_t *neg_ids,
                        const float *weights, const double *logq, int32_t in_batch,
                        double temperature, int64_t B, int64_t R, int64_t D, double *work)
{
    if (d_pred != NULL)
        memset(d_pred, 0, (size_t)(B * D) * sizeof *d_pred);
    if (d_pos != NULL)
        memset(d_pos, 0, (size_t)(B * D) * sizeof *d_pos);
    if (d_neg != NULL)
        memset(d_neg, 0, (size_t)(R * D) * sizeof *d_neg);
    double wsum = 0;
    for (int64_t b = 0; b < B; b++)
        wsum += weights != NULL ? (double)weights[b] : 1.0;
    if (B > 0 && !(wsum > 0))
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: loss: sample weights sum to "
                            "%g over %lld rows; at least one weight must be positive", wsum,
                            (long long)B);
    const double inv_t = 1.0 / temperature;
    // work [1 + R + B]: logits of row b, then softmax probabilities in place.
    // Slot 0 is the positive, 1..R the sampled negatives, 1+R+k the positive of row k.
    double *s = work;
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        const float *u = pred + b * D;                      /* [D] query of row b */
        const double w = weights != NULL ? (double)weights[b] : 1.0;
        const int64_t n = 1 + R + B;
        s[0] = dot(u, pos + b * D, D) * inv_t;
        double mx = s[0];
        for (int64_t j = 0; j < R; j++) {
            // a negative equal to the row's positive is masked out: it is not a negative
            if (neg_ids != NULL && pos_ids != NULL && neg_ids[j] == pos_ids[b]) {
                s[1 + j] = -INFINITY;
                continue;
            }
            s[1 + j] = dot(u, neg + j * D, D) * inv_t - (logq != NULL ? logq[j] : 0.0);
            mx = fmax(mx, s[1 + j]);
        }
        for (int64_t k = 0; k < B; k++) {
            if (!in_batch || k == b || (pos_ids != NULL && pos_ids[k] == pos_ids[b])) {
                s[1 + R + k] = -INFINITY;
                continue;
            }
            s[1 + R + k] = dot(u, pos + k * D, D) * inv_t;
            mx = fmax(mx, s[1 + R + k]);
        }
        // loss_b = logsumexp(s) - s[0], stabilized by the max
        double z = 0;
        for (int64_t i = 0; i < n; i++)
            z += s[i] == -INFINITY ? 0.0 : exp(s[i] - mx);
        const double lse = mx + log(z);
        total += w * (lse - s[0]);
        // d loss_b / d s_i = softmax_i - [i == 0]; scaled by w / wsum and 1 / temperature
        const double c = w / wsum * inv_t;
        for (int64_t i = 0; i < n; i++) {
            const double p = s[i] == -INFINITY ? 0.0 : exp(s[i] - lse);
            const double gi = c * (p - (i == 0 ? 1.0 : 0.0));
            if (gi == 0.0)
                continue;
            const float *v = i == 0 ? pos + b * D                       /* [D] item row */
                           : i <= R ? neg + (i - 1) * D
                           : pos + (i - 1 - R) * D;
            if (d_pred != NULL)
                axpy(d_pred + b * D, gi, v, D);
            float *dv = i == 0 ? (d_pos != NULL ? d_pos + b * D : NULL)
                      : i <= R ? (d_neg != NULL ? d_neg + (i - 1) * D : NULL)
                      : (d_pos != NULL ? d_pos + (i - 1 - R) * D : NULL);
            if (dv != NULL)
                axpy(dv, gi, u, D);
        }
    }
    *loss = B > 0 ? total / wsum : 0.0;
    return GRM_OK;
}

/* ---- negative sampling ---- */

void ssm_draw(int64_t *idx, int64_t n, const double *cdf, int64_t cdf_n, uint64_t seed)
{
    uint64_t state = mlp_mix64(seed ^ 0x3c6ef372fe94f82bULL);
    for (int64_t i = 0; i < n; i++) {
        const double u = grm_rng_uniform01(&state);   /* [0, 1) */
        int64_t k;
        if (cdf == NULL) {
            k = (int64_t)(u * (double)cdf_n);
        } else {
            // first k with cdf[k] > u * total: item k owns [cdf[k-1], cdf[k])
            const double target = u * cdf[cdf_n - 1];
            int64_t lo = 0, hi = cdf_n - 1;
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                if (cdf[mid] > target)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            k = lo;
        }
        idx[i] = k < cdf_n ? k : cdf_n - 1;
    }
}

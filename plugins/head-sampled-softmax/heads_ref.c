/* plugins/head-sampled-softmax/heads_ref.c - numerics of the two heads, plain loops in double:
 * binary cross-entropy with logits (multi-task, weighted), sampled softmax with
 * shared sampled negatives and in-batch negatives (Jean et al. 2015; Yi et al. 2019,
 * "Sampling-bias-corrected neural modeling", for the logQ correction), SASRec's sampled
 * binary cross-entropy (Kang & McAuley 2018, §III-E) over own or shared negatives, and
 * the with-replacement negative draw. */
#include <math.h>
#include <string.h>

#include "heads.h"

grm_status head_weight_sum(const grm_host_api *host, const char *who, const float *weights,
                           int64_t B, double *wsum)
{
    double sum = 0;
    for (int64_t b = 0; b < B; b++)
        sum += weights != NULL ? (double)weights[b] : 1.0;
    *wsum = sum;
    if (B > 0 && !(sum > 0))
        return host->errorf(GRM_EINVAL, "%s: loss: sample weights sum to %g over %lld rows; "
                            "at least one weight must be positive", who, sum, (long long)B);
    return GRM_OK;
}

/* The start of every reference retrieval loss: the gradients d_pred, d_pos [B, D] and
 * d_neg [nneg, D] (each may be NULL) zeroed, the sample weights summed into *wsum. */
static grm_status ssm_ref_begin(const grm_host_api *host, float *d_pred, float *d_pos,
                                float *d_neg, int64_t nneg, const float *weights, int64_t B,
                                int64_t D, double *wsum)
{
    if (d_pred != NULL)
        memset(d_pred, 0, (size_t)(B * D) * sizeof *d_pred);
    if (d_pos != NULL)
        memset(d_pos, 0, (size_t)(B * D) * sizeof *d_pos);
    if (d_neg != NULL)
        memset(d_neg, 0, (size_t)(nneg * D) * sizeof *d_neg);
    return head_weight_sum(host, "head-sampled-softmax", weights, B, wsum);
}

/* ---- binary cross-entropy with logits ---- */

grm_status bce_loss_ref(const grm_host_api *host, double *loss, float *d_pred,
                        float *scores, const float *pred, const float *labels,
                        const float *weights, int64_t B, int64_t T)
{
    double wsum;
    grm_status wst = head_weight_sum(host, "head-bce", weights, B, &wsum);
    if (wst != GRM_OK)
        return wst;
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
    double wsum;
    grm_status wst = ssm_ref_begin(host, d_pred, d_pos, d_neg, R, weights, B, D, &wsum);
    if (wst != GRM_OK)
        return wst;
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
            s[1 + R + k] = dot(u, pos + k * D, D) * inv_t - (logq != NULL ? logq[R + k] : 0.0);
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

/* ---- per-token negatives read in place (share_k >= 1, item_rows) ---- */

grm_status ssm_tok_ref(const grm_host_api *host, double *loss, float *d_pred, float *d_rows,
                       const float *pred, const float *rows, int64_t nrows,
                       const int64_t *pos_slots, const int64_t *neg_slots,
                       const int64_t *pos_ids, const int64_t *neg_ids, const float *weights,
                       const double *logq, const int64_t *perm, int64_t k, double temperature,
                       int64_t B, int64_t r, int64_t D, float *work)
{
    double wsum;
    grm_status wst = ssm_ref_begin(host, d_pred, NULL, d_rows, nrows, weights, B, D, &wsum);
    if (wst != GRM_OK)
        return wst;
    const double inv_t = 1.0 / temperature;
    double *s = (double *)work;                             /* [k r] logits of a row */
    double total = 0;
    for (int64_t q = 0; q < B; q++) {                       /* shuffled position q */
        const int64_t b = perm != NULL ? perm[q] : q, g0 = q / k * k;
        const int64_t m = B - g0 < k ? B - g0 : k, n = m * r;   /* the group's negatives */
        const float *u = pred + b * D, *p = rows + pos_slots[b] * D;   /* [D] */
        const double w = weights != NULL ? (double)weights[b] : 1.0;
        const double sp = dot(u, p, D) * inv_t;
        double mx = sp;
        for (int64_t j = 0; j < n; j++) {
            const int64_t mb = perm != NULL ? perm[g0 + j / r] : g0 + j / r;
            const int64_t slot = mb * r + j % r;
            if (neg_ids != NULL && pos_ids != NULL && neg_ids[slot] == pos_ids[b]) {
                s[j] = -INFINITY;
                continue;
            }
            s[j] = dot(u, rows + neg_slots[slot] * D, D) * inv_t
                   - (logq != NULL ? logq[slot] : 0.0);
            mx = fmax(mx, s[j]);
        }
        double z = exp(sp - mx);
        for (int64_t j = 0; j < n; j++)
            z += s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
        const double lse = mx + log(z), c = w / wsum * inv_t;
        total += w * (lse - sp);
        const double gp = c * (exp(sp - lse) - 1.0);
        if (d_pred != NULL) axpy(d_pred + b * D, gp, p, D);
        if (d_rows != NULL) axpy(d_rows + pos_slots[b] * D, gp, u, D);
        for (int64_t j = 0; j < n; j++) {
            if (s[j] == -INFINITY)
                continue;
            const int64_t mb = perm != NULL ? perm[g0 + j / r] : g0 + j / r;
            const int64_t row = neg_slots[mb * r + j % r];
            const double g = c * exp(s[j] - lse);
            if (d_pred != NULL) axpy(d_pred + b * D, g, rows + row * D, D);
            if (d_rows != NULL) axpy(d_rows + row * D, g, u, D);
        }
    }
    *loss = B > 0 ? total / wsum : 0.0;
    return GRM_OK;
}

/* ---- full-catalog cross-entropy (catalog = all) ---- */

grm_status ssm_full_ref(const grm_host_api *host, double *loss, float *d_pred, float *d_pos,
                        float *d_cat, const float *pred, const float *pos, const float *cat,
                        const int64_t *pos_ids, const int64_t *cat_ids, const float *weights,
                        double smoothing, double temperature, int64_t B, int64_t C, int64_t D,
                        float *work)
{
    double wsum;
    grm_status wst = ssm_ref_begin(host, d_pred, d_pos, d_cat, C, weights, B, D, &wsum);
    if (wst != GRM_OK)
        return wst;
    const double inv_t = 1.0 / temperature, eps = smoothing;
    double *s = (double *)work;                             /* [C] logits of row b */
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        const float *u = pred + b * D;                      /* [D] */
        const double w = weights != NULL ? (double)weights[b] : 1.0;
        const double sp = dot(u, pos + b * D, D) * inv_t;
        double mx = sp, sum = sp;
        int64_t K = 1;
        for (int64_t j = 0; j < C; j++) {
            if (cat_ids != NULL && pos_ids != NULL && cat_ids[j] == pos_ids[b]) {
                s[j] = -INFINITY;                           // the positive, counted once
                continue;
            }
            s[j] = dot(u, cat + j * D, D) * inv_t;
            mx = fmax(mx, s[j]);
            sum += s[j];
            K++;
        }
        double z = exp(sp - mx);
        for (int64_t j = 0; j < C; j++)
            z += s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
        const double lse = mx + log(z), ek = eps / (double)K;
        // smoothed target: (1 - eps) on the positive, eps / K on every class
        total += w * (lse - (1.0 - eps) * sp - ek * sum);
        const double c = w / wsum * inv_t;
        const double gp = c * (exp(sp - lse) - (1.0 - eps) - ek);
        if (d_pred != NULL)
            axpy(d_pred + b * D, gp, pos + b * D, D);
        if (d_pos != NULL)
            axpy(d_pos + b * D, gp, u, D);
        for (int64_t j = 0; j < C; j++) {
            if (s[j] == -INFINITY)
                continue;
            const double g = c * (exp(s[j] - lse) - ek);
            if (d_pred != NULL)
                axpy(d_pred + b * D, g, cat + j * D, D);
            if (d_cat != NULL)
                axpy(d_cat + j * D, g, u, D);
        }
    }
    *loss = B > 0 ? total / wsum : 0.0;
    return GRM_OK;
}

/* ---- sampled binary cross-entropy (SASRec) ---- */

/* softplus(x) = log(1 + exp(x)), stable: max(x, 0) + log1p(exp(-|x|)). */
static double softplus(double x)
{
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

/* sigmoid(x) without exp of a positive number. */
static double sigmoid(double x)
{
    const double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

grm_status ssm_bce_ref(const grm_host_api *host, double *loss, float *d_pred, float *d_pos,
                       float *d_neg, const float *pred, const float *pos, const float *neg,
                       const int64_t *pos_ids, const int64_t *neg_ids, const float *weights,
                       double temperature, int64_t B, int64_t R, int64_t r, int64_t D,
                       double *work)
{
    (void)work;
    double wsum;
    grm_status wst = ssm_ref_begin(host, d_pred, d_pos, d_neg, R, weights, B, D, &wsum);
    if (wst != GRM_OK)
        return wst;
    const double inv_t = 1.0 / temperature;
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        const float *u = pred + b * D;                      /* [D] query of row b */
        const double w = weights != NULL ? (double)weights[b] : 1.0;
        const double c = w / wsum * inv_t;
        // -log sigmoid(s+) = softplus(-s+); d/ds+ = sigmoid(s+) - 1
        const double sp = dot(u, pos + b * D, D) * inv_t;
        double lb = softplus(-sp);
        const double gp = c * (sigmoid(sp) - 1.0);
        if (d_pred != NULL)
            axpy(d_pred + b * D, gp, pos + b * D, D);
        if (d_pos != NULL)
            axpy(d_pos + b * D, gp, u, D);
        // -log(1 - sigmoid(s-)) = softplus(s-); d/ds- = sigmoid(s-)
        const int64_t j0 = r == 0 ? 0 : b * r, j1 = r == 0 ? R : (b + 1) * r;
        for (int64_t j = j0; j < j1; j++) {
            if (neg_ids != NULL && pos_ids != NULL && neg_ids[j] == pos_ids[b])
                continue;                                   // not a negative of this row
            const double sn = dot(u, neg + j * D, D) * inv_t;
            lb += softplus(sn);
            const double gn = c * sigmoid(sn);
            if (d_pred != NULL)
                axpy(d_pred + b * D, gn, neg + j * D, D);
            if (d_neg != NULL)
                axpy(d_neg + j * D, gn, u, D);
        }
        total += w * lb;
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

/* ---- intra-batch logit sharing (TurboGR §4.3.3, eq. 2) ---- */

void ssm_shuffle(int64_t *perm, int64_t B, uint64_t key)
{
    for (int64_t i = 0; i < B; i++)
        perm[i] = i;
    uint64_t state = key;
    for (int64_t i = B - 1; i > 0; i--) {
        const int64_t j = (int64_t)(grm_splitmix64(&state) % (uint64_t)(i + 1));
        const int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

grm_status ssm_share_loss_ref(const grm_host_api *host, double *loss, float *d_pred,
                              float *d_pos, float *d_neg, const float *pred, const float *pos,
                              const float *neg, const int64_t *pos_ids,
                              const int64_t *neg_ids, const float *weights,
                              const double *logq, const int64_t *perm, int64_t k,
                              double temperature, int64_t B, int64_t r, int64_t D,
                              float *work)
{
    (void)work;
    double wsum;
    grm_status wst = ssm_ref_begin(host, d_pred, d_pos, d_neg, B * r, weights, B, D, &wsum);
    if (wst != GRM_OK)
        return wst;
    const double inv_t = 1.0 / temperature;
    double total = 0;
    for (int64_t p = 0; p < B; p++) {
        const int64_t i = perm[p];                          /* the token */
        const int64_t g0 = p - p % k;                       /* its group's first position */
        const int64_t m = B - g0 < k ? B - g0 : k;          /* members of the group */
        const float *u = pred + i * D;                      /* [D] */
        const double w = weights != NULL ? (double)weights[i] : 1.0;
        // eq. 2: l+ against exp(l+) + sum over own and auxiliary negatives; the
        // log-sum-exp runs over the group's m r negatives, stabilized by the max
        const double sp = dot(u, pos + i * D, D) * inv_t;
        double mx = sp;
        for (int64_t a = 0; a < m; a++) {
            const int64_t owner = perm[g0 + a];
            for (int64_t j = 0; j < r; j++) {
                const int64_t slot = owner * r + j;
                if (neg_ids != NULL && pos_ids != NULL && neg_ids[slot] == pos_ids[i])
                    continue;
                const double s = dot(u, neg + slot * D, D) * inv_t
                                 - (logq != NULL ? logq[slot] : 0.0);
                mx = fmax(mx, s);
            }
        }
        double z = exp(sp - mx);
        for (int64_t a = 0; a < m; a++) {
            const int64_t owner = perm[g0 + a];
            for (int64_t j = 0; j < r; j++) {
                const int64_t slot = owner * r + j;
                if (neg_ids != NULL && pos_ids != NULL && neg_ids[slot] == pos_ids[i])
                    continue;
                z += exp(dot(u, neg + slot * D, D) * inv_t
                         - (logq != NULL ? logq[slot] : 0.0) - mx);
            }
        }
        const double lse = mx + log(z);
        total += w * (lse - sp);
        const double c = w / wsum * inv_t;
        const double gp = c * (exp(sp - lse) - 1.0);
        if (d_pred != NULL)
            axpy(d_pred + i * D, gp, pos + i * D, D);
        if (d_pos != NULL)
            axpy(d_pos + i * D, gp, u, D);
        for (int64_t a = 0; a < m; a++) {
            const int64_t owner = perm[g0 + a];
            for (int64_t j = 0; j < r; j++) {
                const int64_t slot = owner * r + j;
                if (neg_ids != NULL && pos_ids != NULL && neg_ids[slot] == pos_ids[i])
                    continue;
                const double s = dot(u, neg + slot * D, D) * inv_t
                                 - (logq != NULL ? logq[slot] : 0.0);
                const double gi = c * exp(s - lse);
                if (d_pred != NULL)
                    axpy(d_pred + i * D, gi, neg + slot * D, D);
                if (d_neg != NULL)
                    axpy(d_neg + slot * D, gi, u, D);
            }
        }
    }
    *loss = B > 0 ? total / wsum : 0.0;
    return GRM_OK;
}

/* ---- FP16 storage of negatives (TurboGR §4.3.2) ---- */

uint16_t ssm_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)                                  // inf or NaN (quiet, keep top bits)
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | (ax >> 13) : 0));
    if (ax >= 0x477ff000u)                                  // rounds to >= 65520: overflow
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {                                 // below 2^-14: subnormal or zero
        if (ax < 0x33000000u)                               // below 2^-25: rounds to 0
            return sign;
        const uint32_t e = ax >> 23;                        // 102..112
        const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;                     // 14..24
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u)))        // round to nearest even
            h++;
        return (uint16_t)(sign | h);
    }
    // normal: rebias the exponent (127 -> 15), round the 13 dropped bits to nearest even
    uint32_t h = ((ax >> 13) - ((127u - 15u) << 10));
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;                                                // a carry into the exponent is right
    return (uint16_t)(sign | h);
}

float ssm_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (mant << 13);
    } else if (e != 0) {
        x = sign | ((e + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        x = sign;
    } else {
        // subnormal: mant 2^-24, exact in binary32
        const float v = (float)mant * 0x1.0p-24f;
        memcpy(&x, &v, sizeof x);
        x |= sign;
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

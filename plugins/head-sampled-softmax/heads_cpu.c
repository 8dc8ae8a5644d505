/* plugins/head-sampled-softmax/heads_cpu.c - the fast CPU paths of the sampled-softmax loss,
 * with the same function types as ssm_loss_ref and ssm_share_loss_ref (heads_ref.c).
 *
 * ssm_loss_cpu: the logits as OpenBLAS GEMMs, in two phases on the host thread pool (the
 * host keeps OpenBLAS single-threaded): row chunks compute their logits, softmax, losses
 * and d_pred; item chunks then compute d_pos and d_neg from the stored logit gradients.
 * Layout of work: S [B, n] floats, then the per-row losses [B] doubles. With in_batch,
 * n = B + R (column k < B: u_b . pos_k, the diagonal being the row's own positive; column
 * B + j: u_b . neg_j). Without, n = 1 + R (column 0: u_b . pos_b), so rows = N tokens
 * cost O(N R) memory, not O(N^2). The exponentials are float (ssm_exp_f, vectorized), their
 * sum and the log-sum-exp double; the dot products accumulate in float (tests compare with
 * rtol 1e-4).
 *
 * ssm_share_loss_cpu: TurboGR eq. 2 groups on the thread pool; each group's negative rows
 * are read once, by one GEMM per member block, for all its k tokens.
 *
 * ssm_bce_cpu: SASRec's sampled BCE (Kang & McAuley 2018, §III-E). Own negatives: row
 * chunks on the thread pool, each row writing only its own d_pred, d_pos and negative
 * slots. Shared negatives: the logits S [B, R] by GEMM per row chunk, then d_neg = G^T U
 * per item chunk, as ssm_loss_cpu without in-batch. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "heads.h"

/* Rows and items per chunk of the two phases. */
#define SSM_ROW_GRAIN 32
#define SSM_ITEM_GRAIN 32

int64_t ssm_work_doubles(int64_t B, int64_t R, int32_t in_batch)
{
    const int64_t ref = 1 + R + B;
    const int64_t n = in_batch ? B + R : 1 + R;
    const int64_t cpu = (B * n + 1) / 2 + B;
    return ref > cpu ? ref : cpu;
}

typedef struct ssm_cpu_ctx {
    float *S;                   /* [B, n] logits in, gradients of the logits out */
    double *rowloss;            /* [B] */
    float *d_pred, *d_pos, *d_neg;
    const float *pred, *pos, *neg;
    const int64_t *pos_ids, *neg_ids;
    const float *weights;
    const double *logq;
    int32_t in_batch;
    double inv_t, wsum;
    int64_t B, R, D, n, c0;     /* c0: column of negative 0 (B or 1) */
} ssm_cpu_ctx;

/* A row's softmax (heads.h). The exponentials are float and vectorized: exp in double,
 * twice a logit, was 8% of synthetic-tiered's training. */
double ssm_softmax_exps(float *s, int64_t n, float mx, double x0)
{
    ssm_exp_f(s, n, 1.0f, -mx);
    double z = exp(x0 - (double)mx);       /* x0 = -inf: 0 */
    for (int64_t k = 0; k < n; k++) z += (double)s[k];
    return z;
}

void ssm_softmax_grads(float *s, int64_t n, double g_over_z)
{
    for (int64_t k = 0; k < n; k++) s[k] = (float)(g_over_z * (double)s[k]);
}

/* Phase 1, rows [lo, hi): logits by GEMM, softmax over the unmasked ones, the loss, then
 * d loss / d logit = w / wsum / T * (p - [positive]) in place, and d_pred of the rows. */
static grm_status ssm_rows(void *vctx, int64_t lo, int64_t hi)
{
    const ssm_cpu_ctx *c = vctx;
    const int64_t B = c->B, R = c->R, n = c->n, c0 = c->c0;
    const int M = (int)(hi - lo), K = (int)c->D, N = (int)n;
    float *S = c->S + lo * n;                               /* [M, n] */
    const float *U = c->pred + lo * c->D;                   /* [M, D] */
    if (c->in_batch)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, (int)B, K, 1.0f, U, K,
                    c->pos, K, 0.0f, S, N);
    else
        for (int64_t b = lo; b < hi; b++)
            S[(b - lo) * n] = cblas_sdot(K, c->pred + b * c->D, 1, c->pos + b * c->D, 1);
    if (R > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, (int)R, K, 1.0f, U, K,
                    c->neg, K, 0.0f, S + c0, N);
    for (int64_t b = lo; b < hi; b++) {
        float *s = c->S + b * n;                            /* [n] */
        const int64_t self = c->in_batch ? b : 0;           /* the positive's column */
        const double w = c->weights != NULL ? (double)c->weights[b] : 1.0;
        const int64_t pid = c->pos_ids != NULL ? c->pos_ids[b] : INT64_MIN;
        float mx = -INFINITY;   // of the logits as stored (the positive's is never masked)
        // mask in-batch columns equal to the row's positive, and sampled negatives equal
        // to it (as in ssm_loss_ref)
        for (int64_t k = 0; k < n; k++) {
            int masked = 0;
            double v;
            if (k < c0) {
                masked = k != self && c->pos_ids != NULL && c->pos_ids[k] == pid;
                // in-batch positives carry their own logQ after the R sampled ones
                v = (double)s[k] * c->inv_t
                    - (c->in_batch && k != self && c->logq != NULL ? c->logq[c->R + k] : 0.0);
            } else {
                masked = c->neg_ids != NULL && c->pos_ids != NULL && c->neg_ids[k - c0] == pid;
                v = (double)s[k] * c->inv_t - (c->logq != NULL ? c->logq[k - c0] : 0.0);
            }
            if (masked) {
                s[k] = -INFINITY;
                continue;
            }
            s[k] = (float)v;
            if (s[k] > mx) mx = s[k];
        }
        const double sp = (double)s[self];
        const double z = ssm_softmax_exps(s, n, mx, -INFINITY);
        c->rowloss[b] = w * ((double)mx + log(z) - sp);
        const double g = w / c->wsum * c->inv_t, eself = (double)s[self];
        ssm_softmax_grads(s, n, g / z);
        s[self] = (float)(g / z * eself - g);
    }
    if (c->d_pred == NULL)
        return GRM_OK;
    // d_pred = G[:, :c0] (pos or its own positive) + G[:, c0:] neg
    float *dU = c->d_pred + lo * c->D;                      /* [M, D] */
    if (c->in_batch) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, (int)B, 1.0f, S, N,
                    c->pos, K, 0.0f, dU, K);
    } else {
        for (int64_t b = lo; b < hi; b++) {
            const float gp = c->S[b * n];
            for (int64_t d = 0; d < c->D; d++)
                c->d_pred[b * c->D + d] = gp * c->pos[b * c->D + d];
        }
    }
    if (R > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, (int)R, 1.0f, S + c0, N,
                    c->neg, K, 1.0f, dU, K);
    return GRM_OK;
}

/* Phase 2, items [lo, hi) of the B positives (in_batch) then the R negatives:
 * d_item = G[:, column]^T pred. */
static grm_status ssm_items(void *vctx, int64_t lo, int64_t hi)
{
    const ssm_cpu_ctx *c = vctx;
    const int K = (int)c->D, N = (int)c->n, M = (int)c->B;
    const int64_t npos = c->in_batch ? c->B : 0;
    // positives [lo, min(hi, npos)), then negatives
    const int64_t p1 = hi < npos ? hi : npos;
    if (lo < p1 && c->d_pos != NULL)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(p1 - lo), K, M, 1.0f,
                    c->S + lo, N, c->pred, K, 0.0f, c->d_pos + lo * c->D, K);
    const int64_t n0 = (lo > npos ? lo : npos) - npos, n1 = hi - npos;
    if (n0 < n1 && c->d_neg != NULL)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(n1 - n0), K, M, 1.0f,
                    c->S + c->c0 + n0, N, c->pred, K, 0.0f, c->d_neg + n0 * c->D, K);
    return GRM_OK;
}

grm_status ssm_loss_cpu(const grm_host_api *host, double *loss, float *d_pred,
                        float *d_pos, float *d_neg, const float *pred, const float *pos,
                        const float *neg, const int64_t *pos_ids, const int64_t *neg_ids,
                        const float *weights, const double *logq, int32_t in_batch,
                        double temperature, int64_t B, int64_t R, int64_t D, double *work)
{
    double wsum;
    grm_status wst = head_weight_sum(host, "head-sampled-softmax", weights, B, &wsum);
    if (wst != GRM_OK)
        return wst;
    if (d_neg != NULL && R > 0 && B == 0) memset(d_neg, 0, (size_t)(R * D) * sizeof *d_neg);
    if (B == 0) {
        *loss = 0.0;
        return GRM_OK;
    }
    const int64_t n = in_batch ? B + R : 1 + R;
    ssm_cpu_ctx ctx = { .S = (float *)work, .rowloss = work + (B * n + 1) / 2,
                        .d_pred = d_pred, .d_pos = d_pos, .d_neg = d_neg, .pred = pred,
                        .pos = pos, .neg = neg, .pos_ids = pos_ids, .neg_ids = neg_ids,
                        .weights = weights, .logq = logq, .in_batch = in_batch,
                        .inv_t = 1.0 / temperature, .wsum = wsum, .B = B, .R = R, .D = D,
                        .n = n, .c0 = in_batch ? B : 1 };
    grm_status st = host->parallel_for(B, SSM_ROW_GRAIN, ssm_rows, &ctx);
    if (st != GRM_OK) return st;
    double total = 0;
    for (int64_t b = 0; b < B; b++) total += ctx.rowloss[b];   /* fixed order */
    *loss = total / wsum;
    if (!in_batch && d_pos != NULL)
        for (int64_t b = 0; b < B; b++) {
            const float gp = ctx.S[b * n];
            for (int64_t d = 0; d < D; d++)
                d_pos[b * D + d] = gp * pred[b * D + d];
        }
    return host->parallel_for((in_batch ? B : 0) + R, SSM_ITEM_GRAIN, ssm_items, &ctx);
}

/* ---- intra-batch logit sharing (TurboGR eq. 2) ---- */

int64_t ssm_share_chunks(int64_t groups, int32_t threads)
{
    int64_t c = 4 * (int64_t)(threads > 0 ? threads : 1);
    return groups < c ? (groups > 0 ? groups : 1) : c;
}

int64_t ssm_share_work_floats(int64_t k, int64_t r, int64_t D, int64_t chunks)
{
    // per chunk: the group's queries Q [k, D] and logits S [k, k r]
    return chunks * (k * D + k * k * r);
}

typedef struct ssm_share_ctx {
    float *work;
    double *rowloss;            /* [B] weighted losses, in token order */
    float *d_pred, *d_pos, *d_neg;
    const float *pred, *pos, *neg;
    const int64_t *pos_ids, *neg_ids;
    const float *weights;
    const double *logq;
    const int64_t *perm;
    double inv_t, wsum;
    int64_t B, r, D, k, groups, chunks;
} ssm_share_ctx;

/* Chunks [lo, hi) of groups; chunk q owns work slot q, so no two chunks share scratch. */
static grm_status ssm_share_chunk(void *vctx, int64_t lo, int64_t hi)
{
    const ssm_share_ctx *c = vctx;
    const int64_t k = c->k, r = c->r, D = c->D;
    const int K = (int)D;
    for (int64_t q = lo; q < hi; q++) {
        float *Q = c->work + q * (k * D + k * k * r);       /* [m, D] */
        float *S = Q + k * D;                               /* [m, m r] */
        const int64_t ga = q * c->groups / c->chunks, gb = (q + 1) * c->groups / c->chunks;
        for (int64_t g = ga; g < gb; g++) {
            const int64_t p0 = g * k, m = c->B - p0 < k ? c->B - p0 : k;
            const int64_t n = m * r;
            for (int64_t a = 0; a < m; a++)
                memcpy(Q + a * D, c->pred + c->perm[p0 + a] * D, (size_t)D * sizeof *Q);
            // logits of the m tokens against each member's r negatives: the group's
            // negative rows are read once, for all its tokens
            for (int64_t a = 0; a < m; a++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)r, K, 1.0f,
                            Q, K, c->neg + c->perm[p0 + a] * r * D, K, 0.0f, S + a * r,
                            (int)n);
            for (int64_t t = 0; t < m; t++) {
                const int64_t i = c->perm[p0 + t];
                float *s = S + t * n;                       /* [m r] */
                const double w = c->weights != NULL ? (double)c->weights[i] : 1.0;
                const double sp = (double)cblas_sdot(K, Q + t * D, 1, c->pos + i * D, 1)
                                  * c->inv_t;
                float mx = ssm_max_start(sp);
                for (int64_t j = 0; j < n; j++) {
                    const int64_t slot = c->perm[p0 + j / r] * r + j % r;
                    if (c->neg_ids != NULL && c->pos_ids != NULL
                        && c->neg_ids[slot] == c->pos_ids[i]) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    const double v = (double)s[j] * c->inv_t
                                     - (c->logq != NULL ? c->logq[slot] : 0.0);
                    s[j] = (float)v;
                    if (s[j] > mx) mx = s[j];
                }
                const double z = ssm_softmax_exps(s, n, mx, sp);
                const double lse = (double)mx + log(z);
                c->rowloss[i] = w * (lse - sp);
                const double gsc = w / c->wsum * c->inv_t;
                ssm_softmax_grads(s, n, gsc / z);
                const float gp = (float)(gsc * (exp(sp - lse) - 1.0));
                for (int64_t d = 0; d < D; d++) {
                    if (c->d_pred != NULL) c->d_pred[i * D + d] = gp * c->pos[i * D + d];
                    if (c->d_pos != NULL) c->d_pos[i * D + d] = gp * Q[t * D + d];
                }
            }
            // d_pred of the tokens += G N; d_neg of each member block = G^T Q
            for (int64_t a = 0; a < m; a++) {
                const float *Nb = c->neg + c->perm[p0 + a] * r * D;   /* [r, D] */
                for (int64_t t = 0; t < m && c->d_pred != NULL; t++)
                    cblas_sgemv(CblasRowMajor, CblasTrans, (int)r, K, 1.0f, Nb, K,
                                S + t * n + a * r, 1, 1.0f, c->d_pred + c->perm[p0 + t] * D, 1);
                if (c->d_neg != NULL)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)r, K, (int)m,
                                1.0f, S + a * r, (int)n, Q, K, 0.0f,
                                c->d_neg + c->perm[p0 + a] * r * D, K);
            }
        }
    }
    return GRM_OK;
}

grm_status ssm_share_loss_cpu(const grm_host_api *host, double *loss, float *d_pred,
                              float *d_pos, float *d_neg, const float *pred, const float *pos,
                              const float *neg, const int64_t *pos_ids,
                              const int64_t *neg_ids, const float *weights,
                              const double *logq, const int64_t *perm, int64_t k,
                              double temperature, int64_t B, int64_t r, int64_t D,
                              float *work)
{
    double wsum;
    grm_status wst = head_weight_sum(host, "head-sampled-softmax", weights, B, &wsum);
    if (wst != GRM_OK)
        return wst;
    if (B == 0) {
        *loss = 0.0;
        return GRM_OK;
    }
    const int64_t groups = (B + k - 1) / k;
    const int64_t chunks = ssm_share_chunks(groups, host->num_threads());
    // the per-row losses follow the chunk scratch in work (see ssm_share_work_floats)
    double *rowloss = (double *)(work + ((ssm_share_work_floats(k, r, D, chunks) + 1) & ~1));
    ssm_share_ctx ctx = { .work = work, .rowloss = rowloss, .d_pred = d_pred, .d_pos = d_pos,
                          .d_neg = d_neg, .pred = pred, .pos = pos, .neg = neg,
                          .pos_ids = pos_ids, .neg_ids = neg_ids, .weights = weights,
                          .logq = logq, .perm = perm, .inv_t = 1.0 / temperature,
                          .wsum = wsum, .B = B, .r = r, .D = D, .k = k, .groups = groups,
                          .chunks = chunks };
    grm_status st = host->parallel_for(chunks, 1, ssm_share_chunk, &ctx);
    if (st != GRM_OK) return st;
    double total = 0;
    for (int64_t b = 0; b < B; b++) total += rowloss[b];
    *loss = total / wsum;
    return GRM_OK;
}

/* ---- sampled binary cross-entropy (SASRec) ---- */

int64_t ssm_bce_work_doubles(int64_t B, int64_t R, int64_t r)
{
    // the logits [B, R] floats when shared, then the per-row losses [B] doubles
    return (r == 0 ? (B * R + 1) / 2 : 0) + B + 1;
}

typedef struct ssm_bce_ctx {
    float *S;                   /* [B, R] logits, then their gradients (shared only) */
    double *rowloss;            /* [B] weighted losses */
    float *d_pred, *d_pos, *d_neg;
    const float *pred, *pos, *neg;
    const int64_t *pos_ids, *neg_ids;
    const float *weights;
    double inv_t, wsum;
    int64_t B, R, r, D;
} ssm_bce_ctx;

static double bce_sigmoid(double x)
{
    const double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

static double bce_softplus(double x)
{
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

/* Row b's positive term: its loss, d_pos (written) and d_pred = gp pos_b (written, the
 * negatives add to it). Returns the loss term. */
static double bce_positive(const ssm_bce_ctx *c, int64_t b, double cw)
{
    const int K = (int)c->D;
    const float *u = c->pred + b * c->D;                    /* [D] */
    const double sp = (double)cblas_sdot(K, u, 1, c->pos + b * c->D, 1) * c->inv_t;
    const float gp = (float)(cw * (bce_sigmoid(sp) - 1.0));
    for (int64_t d = 0; d < c->D; d++) {
        if (c->d_pred != NULL) c->d_pred[b * c->D + d] = gp * c->pos[b * c->D + d];
        if (c->d_pos != NULL) c->d_pos[b * c->D + d] = gp * u[d];
    }
    return bce_softplus(-sp);
}

/* Own negatives (r >= 1), rows [lo, hi): row b alone reads and writes neg [b r, (b+1) r),
 * so the rows of a chunk touch no other chunk's memory. */
static grm_status bce_own_rows(void *vctx, int64_t lo, int64_t hi)
{
    const ssm_bce_ctx *c = vctx;
    const int K = (int)c->D;
    for (int64_t b = lo; b < hi; b++) {
        const float *u = c->pred + b * c->D;                /* [D] */
        const double w = c->weights != NULL ? (double)c->weights[b] : 1.0;
        const double cw = w / c->wsum * c->inv_t;
        double lb = bce_positive(c, b, cw);
        for (int64_t j = b * c->r; j < (b + 1) * c->r; j++) {
            float *dn = c->d_neg != NULL ? c->d_neg + j * c->D : NULL;   /* [D] */
            if (c->neg_ids != NULL && c->pos_ids != NULL && c->neg_ids[j] == c->pos_ids[b]) {
                if (dn != NULL) memset(dn, 0, (size_t)c->D * sizeof *dn);
                continue;
            }
            const double sn = (double)cblas_sdot(K, u, 1, c->neg + j * c->D, 1) * c->inv_t;
            lb += bce_softplus(sn);
            const float gn = (float)(cw * bce_sigmoid(sn));
            if (c->d_pred != NULL) cblas_saxpy(K, gn, c->neg + j * c->D, 1,
                                               c->d_pred + b * c->D, 1);
            if (dn != NULL)
                for (int64_t d = 0; d < c->D; d++) dn[d] = gn * u[d];
        }
        c->rowloss[b] = w * lb;
    }
    return GRM_OK;
}

/* Shared negatives (r = 0), rows [lo, hi): S = U N^T by GEMM, the loss and the logit
 * gradients in place, d_pred += G N by GEMM. */
static grm_status bce_shared_rows(void *vctx, int64_t lo, int64_t hi)
{
    const ssm_bce_ctx *c = vctx;
    const int64_t R = c->R;
    const int M = (int)(hi - lo), K = (int)c->D, N = (int)R;
    float *S = c->S + lo * R;                               /* [M, R] */
    if (R > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f,
                    c->pred + lo * c->D, K, c->neg, K, 0.0f, S, N);
    for (int64_t b = lo; b < hi; b++) {
        float *s = c->S + b * R;                            /* [R] */
        const double w = c->weights != NULL ? (double)c->weights[b] : 1.0;
        const double cw = w / c->wsum * c->inv_t;
        double lb = bce_positive(c, b, cw);
        for (int64_t j = 0; j < R; j++) {
            if (c->neg_ids != NULL && c->pos_ids != NULL && c->neg_ids[j] == c->pos_ids[b]) {
                s[j] = 0.0f;
                continue;
            }
            const double sn = (double)s[j] * c->inv_t;
            lb += bce_softplus(sn);
            s[j] = (float)(cw * bce_sigmoid(sn));
        }
        c->rowloss[b] = w * lb;
    }
    if (c->d_pred != NULL && R > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, S, N, c->neg, K,
                    1.0f, c->d_pred + lo * c->D, K);
    return GRM_OK;
}

/* Shared negatives, items [lo, hi): d_neg = G[:, lo:hi]^T U. */
static grm_status bce_shared_items(void *vctx, int64_t lo, int64_t hi)
{
    const ssm_bce_ctx *c = vctx;
    const int K = (int)c->D;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), K, (int)c->B, 1.0f,
                c->S + lo, (int)c->R, c->pred, K, 0.0f, c->d_neg + lo * c->D, K);
    return GRM_OK;
}

grm_status ssm_bce_cpu(const grm_host_api *host, double *loss, float *d_pred, float *d_pos,
                       float *d_neg, const float *pred, const float *pos, const float *neg,
                       const int64_t *pos_ids, const int64_t *neg_ids, const float *weights,
                       double temperature, int64_t B, int64_t R, int64_t r, int64_t D,
                       double *work)
{
    double wsum;
    grm_status wst = head_weight_sum(host, "head-sampled-softmax", weights, B, &wsum);
    if (wst != GRM_OK)
        return wst;
    // slots no row owns (all of them when B = 0; past B r with own negatives) get zero
    const int64_t used = B == 0 ? 0 : r == 0 ? R : B * r;
    if (d_neg != NULL && R > used)
        memset(d_neg + used * D, 0, (size_t)((R - used) * D) * sizeof *d_neg);
    if (B == 0) {
        *loss = 0.0;
        return GRM_OK;
    }
    ssm_bce_ctx ctx = { .S = (float *)work, .d_pred = d_pred, .d_pos = d_pos, .d_neg = d_neg,
                        .pred = pred, .pos = pos, .neg = neg, .pos_ids = pos_ids,
                        .neg_ids = neg_ids, .weights = weights, .inv_t = 1.0 / temperature,
                        .wsum = wsum, .B = B, .R = R, .r = r, .D = D };
    ctx.rowloss = work + (r == 0 ? (B * R + 1) / 2 : 0);
    grm_status st = host->parallel_for(B, SSM_ROW_GRAIN, r == 0 ? bce_shared_rows : bce_own_rows,
                                       &ctx);
    if (st == GRM_OK && r == 0 && d_neg != NULL && R > 0)
        st = host->parallel_for(R, SSM_ITEM_GRAIN, bce_shared_items, &ctx);
    if (st != GRM_OK) return st;
    double total = 0;
    for (int64_t b = 0; b < B; b++) total += ctx.rowloss[b];   /* fixed order */
    *loss = total / wsum;
    return GRM_OK;
}

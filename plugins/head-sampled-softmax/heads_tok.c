/* plugins/head-sampled-softmax/heads_tok.c - the fast CPU path of per-token negatives read
 * in place (share_k = 1 in a run), of the type of ssm_tok_ref (heads_ref.c), which the tests
 * hold it to. With r negatives per token the [B r, D] negatives never exist: a step's
 * B r slots name rows of the batch's unique item rows (a few thousand rows, in cache), so
 * each token gathers its r rows into a tile [r, D] once, computes its r logits by one sgemv,
 * fuses the max, the log-sum-exp and the softmax gradient over the tile, takes d_pred from
 * the same tile (a second sgemv) and adds g_j u into the rows' gradients. Token chunks run on
 * the host thread pool; chunk 0 writes d_rows, chunk q > 0 its own copy, summed after in
 * chunk order, so the result depends on the thread count only through that order. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "heads.h"

static int64_t tok_chunks(int64_t B, int32_t threads)
{
    const int64_t t = threads > 0 ? threads : 1;
    return B < t ? (B > 0 ? B : 1) : t;
}

int64_t ssm_tok_work_floats(int64_t B, int64_t nrows, int64_t r, int64_t D, int32_t threads)
{
    // per chunk: the tile [r, D] and the logits [r]; chunks past 0: a copy of d_rows
    // [nrows, D]; then the per-token losses [B] doubles. ref: r doubles.
    const int64_t P = tok_chunks(B, threads);
    const int64_t tile = (r * D + r + 1) & ~(int64_t)1;
    const int64_t cpu = P * tile + (P - 1) * ((nrows * D + 1) & ~(int64_t)1) + 2 * B + 2;
    return cpu > 2 * r + 2 ? cpu : 2 * r + 2;
}

typedef struct tok_ctx {
    float *work;
    double *rowloss;            /* [B] */
    float *d_pred, *d_rows;
    const float *pred, *rows;
    const int64_t *pos_slots, *neg_slots, *pos_ids, *neg_ids;
    const float *weights;
    const double *logq;
    double inv_t, wsum;
    int64_t B, r, D, nrows, P, tile;
} tok_ctx;

/* Chunks [lo, hi) of tokens; chunk q owns tokens [q B / P, (q+1) B / P), tile q and, for
 * q > 0, copy q - 1 of d_rows (zeroed here). */
static grm_status tok_chunk(void *vctx, int64_t lo, int64_t hi)
{
    const tok_ctx *c = vctx;
    const int64_t r = c->r, D = c->D;
    const int K = (int)D;
    for (int64_t q = lo; q < hi; q++) {
        float *T = c->work + q * c->tile;                   /* [r, D] the token's rows */
        float *s = T + r * D;                               /* [r] logits, then gradients */
        float *dR = c->d_rows;                              /* [nrows, D] */
        if (dR != NULL && q > 0)
            dR = c->work + c->P * c->tile + (q - 1) * ((c->nrows * D + 1) & ~(int64_t)1);
        if (dR != NULL) memset(dR, 0, (size_t)(c->nrows * D) * sizeof *dR);
        const int64_t ba = q * c->B / c->P, bb = (q + 1) * c->B / c->P;
        for (int64_t b = ba; b < bb; b++) {
            const float *u = c->pred + b * D;               /* [D] */
            const float *p = c->rows + c->pos_slots[b] * D; /* [D] */
            const int64_t *slot = c->neg_slots + b * r;     /* [r] */
            const double w = c->weights != NULL ? (double)c->weights[b] : 1.0;
            const int64_t pid = c->pos_ids != NULL ? c->pos_ids[b] : INT64_MIN;
            for (int64_t j = 0; j < r; j++)
                memcpy(T + j * D, c->rows + slot[j] * D, (size_t)D * sizeof *T);
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)r, K, 1.0f, T, K, u, 1, 0.0f, s, 1);
            const double sp = (double)cblas_sdot(K, u, 1, p, 1) * c->inv_t;
            double mx = sp;
            for (int64_t j = 0; j < r; j++) {
                const int64_t k = b * r + j;
                if (c->neg_ids != NULL && c->neg_ids[k] == pid) {
                    s[j] = -INFINITY;
                    continue;
                }
                const double v = (double)s[j] * c->inv_t - (c->logq != NULL ? c->logq[k] : 0);
                s[j] = (float)v;
                mx = v > mx ? v : mx;
            }
            double z = exp(sp - mx);
            for (int64_t j = 0; j < r; j++) z += exp((double)s[j] - mx);   /* exp(-inf) = 0 */
            const double lse = mx + log(z), cf = w / c->wsum * c->inv_t;
            c->rowloss[b] = w * (lse - sp);
            for (int64_t j = 0; j < r; j++) s[j] = (float)(cf * exp((double)s[j] - lse));
            const float gp = (float)(cf * (exp(sp - lse) - 1.0));
            if (c->d_pred != NULL) {
                float *dp = c->d_pred + b * D;              /* [D] = gp p + T^T s */
                for (int64_t d = 0; d < D; d++) dp[d] = gp * p[d];
                cblas_sgemv(CblasRowMajor, CblasTrans, (int)r, K, 1.0f, T, K, s, 1, 1.0f, dp,
                            1);
            }
            if (dR == NULL) continue;
            float *dp = dR + c->pos_slots[b] * D;
            for (int64_t d = 0; d < D; d++) dp[d] += gp * u[d];
            for (int64_t j = 0; j < r; j++) {
                const float g = s[j];
                if (g == 0.0f) continue;
                float *dn = dR + slot[j] * D;               /* [D] */
                for (int64_t d = 0; d < D; d++) dn[d] += g * u[d];
            }
        }
    }
    return GRM_OK;
}

grm_status ssm_tok_cpu(const grm_host_api *host, double *loss, float *d_pred, float *d_rows,
                       const float *pred, const float *rows, int64_t nrows,
                       const int64_t *pos_slots, const int64_t *neg_slots,
                       const int64_t *pos_ids, const int64_t *neg_ids, const float *weights,
                       const double *logq, double temperature, int64_t B, int64_t r, int64_t D,
                       float *work)
{
    double wsum;
    grm_status st = head_weight_sum(host, "head-sampled-softmax", weights, B, &wsum);
    if (st != GRM_OK)
        return st;
    if (B == 0) {
        if (d_rows != NULL) memset(d_rows, 0, (size_t)(nrows * D) * sizeof *d_rows);
        *loss = 0.0;
        return GRM_OK;
    }
    const int64_t P = tok_chunks(B, host->num_threads());
    const int64_t tile = (r * D + r + 1) & ~(int64_t)1;
    const int64_t copy = (nrows * D + 1) & ~(int64_t)1;
    tok_ctx ctx = { .work = work, .rowloss = (double *)(work + P * tile + (P - 1) * copy),
                    .d_pred = d_pred, .d_rows = d_rows, .pred = pred, .rows = rows,
                    .pos_slots = pos_slots, .neg_slots = neg_slots, .pos_ids = pos_ids,
                    .neg_ids = neg_ids, .weights = weights, .logq = logq,
                    .inv_t = 1.0 / temperature, .wsum = wsum, .B = B, .r = r, .D = D,
                    .nrows = nrows, .P = P, .tile = tile };
    if ((st = host->parallel_for(P, 1, tok_chunk, &ctx)) != GRM_OK) return st;
    for (int64_t q = 1; d_rows != NULL && q < P; q++) {   /* chunk order: deterministic */
        const float *cp = work + P * tile + (q - 1) * copy;
        for (int64_t i = 0; i < nrows * D; i++) d_rows[i] += cp[i];
    }
    double total = 0;
    for (int64_t b = 0; b < B; b++) total += ctx.rowloss[b];
    *loss = total / wsum;
    return GRM_OK;
}

/* plugins/head-sampled-softmax/heads_tok.c - the fast CPU path of per-token negatives read
 * in place (share_k = k >= 1 in a run), of the type of ssm_tok_ref (heads_ref.c), which the
 * tests hold it to. With r negatives per token the [B r, D] negatives never exist: a step's
 * B r slots name rows of the batch's unique item rows (a few thousand rows, in cache). Each
 * group of k tokens (TurboGR §4.3.3 eq. 2; k = 1: one token) copies its members' k r rows
 * into a tile [k r, D] once, computes the [k, k r] logits by one sgemm (sgemv for k = 1),
 * fuses the max, the log-sum-exp and the softmax gradient over each row of them, takes
 * d_pred = G T and the tile's gradient G^T Q by two more, and adds the tile's rows into the
 * rows' gradients. Group chunks run on the host thread pool; chunk 0 writes d_rows, chunk
 * q > 0 its own copy, summed after in chunk order, so the result depends on the thread count
 * only through that order. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "heads.h"

static int64_t tok_chunks(int64_t groups, int32_t threads)
{
    const int64_t t = threads > 0 ? threads : 1;
    return groups < t ? (groups > 0 ? groups : 1) : t;
}

/* Floats of one chunk's tile: Q [k, D], dQ [k, D], T [k r, D], S [k, k r]; even. */
static int64_t tok_tile(int64_t k, int64_t r, int64_t D)
{
    return (2 * k * D + k * r * D + k * k * r + 1) & ~(int64_t)1;
}

int64_t ssm_tok_work_floats(int64_t B, int64_t nrows, int64_t k, int64_t r, int64_t D,
                            int32_t threads)
{
    // per chunk its tile; chunks past 0 a copy of d_rows [nrows, D]; then the per-token
    // losses [B] doubles. ref: k r doubles.
    const int64_t P = tok_chunks((B + k - 1) / k, threads);
    const int64_t cpu = P * tok_tile(k, r, D) + (P - 1) * ((nrows * D + 1) & ~(int64_t)1)
                        + 2 * B + 2;
    return cpu > 2 * k * r + 2 ? cpu : 2 * k * r + 2;
}

typedef struct tok_ctx {
    float *work;
    double *rowloss;            /* [B] */
    float *d_pred, *d_rows;
    const float *pred, *rows;
    const int64_t *pos_slots, *neg_slots, *pos_ids, *neg_ids, *perm;
    const float *weights;
    const double *logq;
    double inv_t, wsum;
    int64_t B, k, r, D, nrows, P, groups, tile;
} tok_ctx;

/* y [D] += a x [D]. Apart, with restrict, so that the compiler vectorizes it: inline, the
 * rows' loops stayed scalar (the tile and d_rows share the work buffer), and their speed
 * then moved by 20% with where the code happened to be laid out. */
HEADS_VECTORIZE static void tok_axpy(float *restrict y, float a, const float *restrict x,
                                     int64_t D)
{
    for (int64_t d = 0; d < D; d++) y[d] += a * x[d];
}

/* y [D] = a x [D]. */
HEADS_VECTORIZE static void tok_scale(float *restrict y, float a, const float *restrict x,
                                      int64_t D)
{
    for (int64_t d = 0; d < D; d++) y[d] = a * x[d];
}

/* Chunks [lo, hi) of groups; chunk q owns groups [q G / P, (q+1) G / P), tile q and, for
 * q > 0, copy q - 1 of d_rows (zeroed here). */
static grm_status tok_chunk(void *vctx, int64_t lo, int64_t hi)
{
    const tok_ctx *c = vctx;
    const int64_t k = c->k, r = c->r, D = c->D;
    const int K = (int)D;
    for (int64_t q = lo; q < hi; q++) {
        float *Q = c->work + q * c->tile;                   /* [m, D] the group's queries */
        float *dQ = Q + k * D;                              /* [m, D] */
        float *T = dQ + k * D;                              /* [m r, D] its negatives' rows */
        float *S = T + k * r * D;                           /* [m, m r] logits, gradients */
        float *dR = c->d_rows;                              /* [nrows, D] */
        if (dR != NULL && q > 0)
            dR = c->work + c->P * c->tile + (q - 1) * ((c->nrows * D + 1) & ~(int64_t)1);
        if (dR != NULL) memset(dR, 0, (size_t)(c->nrows * D) * sizeof *dR);
        const int64_t ga = q * c->groups / c->P, gb = (q + 1) * c->groups / c->P;
        for (int64_t g = ga; g < gb; g++) {
            const int64_t p0 = g * k, m = c->B - p0 < k ? c->B - p0 : k, n = m * r;
            const int64_t *mem = c->perm != NULL ? c->perm + p0 : NULL;   /* [m] */
            for (int64_t a = 0; a < m; a++) {
                const int64_t i = mem != NULL ? mem[a] : p0 + a;
                memcpy(Q + a * D, c->pred + i * D, (size_t)D * sizeof *Q);
                for (int64_t j = 0; j < r; j++)
                    memcpy(T + (a * r + j) * D, c->rows + c->neg_slots[i * r + j] * D,
                           (size_t)D * sizeof *T);
            }
            if (m == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, K, 1.0f, T, K, Q, 1, 0.0f, S,
                            1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, K, 1.0f,
                            Q, K, T, K, 0.0f, S, (int)n);
            for (int64_t t = 0; t < m; t++) {
                const int64_t i = mem != NULL ? mem[t] : p0 + t;
                float *s = S + t * n;                       /* [n] */
                const float *p = c->rows + c->pos_slots[i] * D;   /* [D] */
                const double w = c->weights != NULL ? (double)c->weights[i] : 1.0;
                const int64_t pid = c->pos_ids != NULL ? c->pos_ids[i] : INT64_MIN;
                const double sp = (double)cblas_sdot(K, Q + t * D, 1, p, 1) * c->inv_t;
                float mx = ssm_max_start(sp);
                for (int64_t j = 0; j < n; j++) {
                    const int64_t slot = (mem != NULL ? mem[j / r] : p0 + j / r) * r + j % r;
                    if (c->neg_ids != NULL && c->neg_ids[slot] == pid) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    const double v = (double)s[j] * c->inv_t
                                     - (c->logq != NULL ? c->logq[slot] : 0.0);
                    s[j] = (float)v;
                    mx = s[j] > mx ? s[j] : mx;
                }
                const double z = ssm_softmax_exps(s, n, mx, sp);
                const double lse = (double)mx + log(z), cf = w / c->wsum * c->inv_t;
                c->rowloss[i] = w * (lse - sp);
                ssm_softmax_grads(s, n, cf / z);
                const float gp = (float)(cf * (exp(sp - lse) - 1.0));
                tok_scale(dQ + t * D, gp, p, D);
                if (dR != NULL) {
                    float *dp = dR + c->pos_slots[i] * D;
                    tok_axpy(dp, gp, Q + t * D, D);
                }
            }
            // d_pred = gp pos + G T; the tile's gradient G^T Q overwrites T (no longer read)
            if (m == 1)
                cblas_sgemv(CblasRowMajor, CblasTrans, (int)n, K, 1.0f, T, K, S, 1, 1.0f, dQ,
                            1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, K, (int)n, 1.0f,
                            S, (int)n, T, K, 1.0f, dQ, K);
            for (int64_t a = 0; c->d_pred != NULL && a < m; a++)
                memcpy(c->d_pred + (mem != NULL ? mem[a] : p0 + a) * D, dQ + a * D,
                       (size_t)D * sizeof *dQ);
            if (dR == NULL) continue;
            if (m == 1) {
                for (int64_t j = 0; j < n; j++)
                    tok_scale(T + j * D, S[j], Q, D);
            } else {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, K, (int)m, 1.0f, S,
                            (int)n, Q, K, 0.0f, T, K);
            }
            for (int64_t j = 0; j < n; j++) {
                const int64_t slot = (mem != NULL ? mem[j / r] : p0 + j / r) * r + j % r;
                float *dn = dR + c->neg_slots[slot] * D;    /* [D] */
                const float *src = T + j * D;
                tok_axpy(dn, 1.0f, src, D);
            }
        }
    }
    return GRM_OK;
}

grm_status ssm_tok_cpu(const grm_host_api *host, double *loss, float *d_pred, float *d_rows,
                       const float *pred, const float *rows, int64_t nrows,
                       const int64_t *pos_slots, const int64_t *neg_slots,
                       const int64_t *pos_ids, const int64_t *neg_ids, const float *weights,
                       const double *logq, const int64_t *perm, int64_t k, double temperature,
                       int64_t B, int64_t r, int64_t D, float *work)
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
    const int64_t groups = (B + k - 1) / k, P = tok_chunks(groups, host->num_threads());
    const int64_t tile = tok_tile(k, r, D), copy = (nrows * D + 1) & ~(int64_t)1;
    tok_ctx ctx = { .work = work, .rowloss = (double *)(work + P * tile + (P - 1) * copy),
                    .d_pred = d_pred, .d_rows = d_rows, .pred = pred, .rows = rows,
                    .pos_slots = pos_slots, .neg_slots = neg_slots, .pos_ids = pos_ids,
                    .neg_ids = neg_ids, .perm = perm, .weights = weights, .logq = logq,
                    .inv_t = 1.0 / temperature, .wsum = wsum, .B = B, .k = k, .r = r, .D = D,
                    .nrows = nrows, .P = P, .groups = groups, .tile = tile };
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

/* plugins/head-sampled-softmax/heads_full.c - the blocked CPU path of the full-catalog
 * cross-entropy (catalog = all), of the type of ssm_full_ref (heads_ref.c), which the tests
 * hold it to. No [B, C] matrix is ever held: work is one [FULL_MB, FULL_NB] tile per chunk.
 *
 * Pass 1, row chunks on the host thread pool: for each block of FULL_NB items the tile
 * S = U N_blk^T (one sgemm), masked and divided by T, is folded into each row's running max
 * and sum (the online normalizer, Milakov & Gimelshein 2018, "Online normalizer calculation
 * for softmax", Algorithm 3), and exp(S - max) N_blk is added into d_pred by a second sgemm,
 * rescaled when the max moves (FlashAttention's output update, Dao et al. 2022, Algorithm 1
 * line 12). At the end of the catalog each row knows its log-sum-exp, its loss and d_pred.
 * Pass 2, item blocks on the thread pool: the block's tile is recomputed for every row,
 * turned into the logit gradients and d_cat_blk = G^T U (sgemm), so each item row is
 * written by one thread. Flops: 4 B C D in pass 1, 4 B C D in pass 2 (ssm_full_flops). The
 * exponentials are a branch-free polynomial the compiler vectorizes (ssm_exp_f), and each row
 * finds the column it masks once, by id, so the tiles are never compared id by id. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "heads.h"

#define FULL_NB 256             /* items per block */
#define FULL_MA 64              /* rows per tile of pass 1 (running state on the stack) */
#define FULL_MB 256             /* rows per tile of pass 2 */
#define FULL_SLOT ((int64_t)FULL_MB * FULL_NB)   /* floats of one chunk's tile */

static int64_t full_slots(int32_t threads)
{
    return 4 * (int64_t)(threads > 0 ? threads : 1);
}

int64_t ssm_full_work_floats(int64_t B, int64_t C, int64_t D, int32_t threads)
{
    // cpu: the chunks' tiles, [4, B] doubles (lse, coef, eps / K, loss), the catalog's
    // (id, column) pairs [C, 2] and each row's masked column [B] (int64), the rows' sum [D];
    // ref: C doubles of logits
    const int64_t cpu = full_slots(threads) * FULL_SLOT + 8 * B + 4 * C + 2 * B + D;
    const int64_t ref = 2 * (C + 1);
    return cpu > ref ? cpu : ref;
}

double ssm_full_flops(int64_t B, int64_t C, int64_t D, int32_t backward)
{
    (void)backward;             /* 4 B C D either way: two sgemms over the catalog */
    return 4.0 * (double)B * (double)C * (double)D;
}

typedef struct full_ctx {
    float *work;                /* [slots, FULL_SLOT] tiles, chunk q owns tile q */
    double *lse, *coef, *ek, *rowloss;   /* [B] each */
    const float *nsum;          /* [D] sum of the catalog rows (label smoothing), or NULL */
    float *d_pred, *d_pos, *d_cat;
    const float *pred, *pos, *cat;
    const int64_t *pos_ids, *cat_ids;
    const float *weights;
    const int64_t *jm;          /* [B] the catalog column of row b's positive, -1: none */
    int32_t dup;                /* the catalog repeats an id: mask by comparing every id */
    double inv_t, eps, wsum;
    int64_t B, C, D, pa, pb, nblocks;
} full_ctx;

static int masked(const full_ctx *c, int64_t b, int64_t j)
{
    return c->cat_ids != NULL && c->pos_ids != NULL && c->cat_ids[j] == c->pos_ids[b];
}

/* Cephes expf's range reduction (x = k ln 2 + r, ln 2 split in two) and degree-5
 * polynomial, branch-free so that the compiler vectorizes it, relative error about 2e-7
 * (the tests hold the heads to torch at rtol 1e-4). Arguments are clamped to [-87, 88]
 * (exp(-87) = 1.6e-38), and a masked logit (a x + b = -inf) gives exactly 0. */
HEADS_VECTORIZE void ssm_exp_f(float *x, int64_t n, float a, float b)
{
    for (int64_t i = 0; i < n; i++) {
        const float u = a * x[i] + b;
        float v = u < -87.0f ? -87.0f : u;
        v = v > 88.0f ? 88.0f : v;
        const float k = (v * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   /* round */
        const float r = v - k * 0.693359375f + k * 2.12194440e-4f;
        float p = 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * r * r + r + 1.0f;
        union { int32_t i; float f; } e;
        e.i = ((int32_t)k + 127) << 23;                    /* 2^k */
        x[i] = u == -INFINITY ? 0.0f : p * e.f;
    }
}

/* The column of block [j0, j0 + n) that row b masks (its positive's id), -1 for none, or
 * -2 when the catalog has repeated ids (the per-element check of masked() decides). */
static int64_t masked_col(const full_ctx *c, int64_t b, int64_t j0, int64_t n)
{
    if (c->dup) return -2;
    const int64_t j = c->jm != NULL ? c->jm[b] : -1;
    return j >= j0 && j < j0 + n ? j - j0 : -1;
}

/* The end of pass 1 for row b: loss, d_pred (A holds sum_j exp(s_j - m) cat_j) and d_pos. */
static void full_row_end(const full_ctx *c, int64_t b, double m, double z, double sum,
                         double sp, int64_t nmask, int64_t jmask, float *A)
{
    const int64_t D = c->D;
    const float *u = c->pred + b * D;                       /* [D] */
    const double w = c->weights != NULL ? (double)c->weights[b] : 1.0;
    const double lse = m + log(z), eps = c->eps;
    const double ek = eps / (double)(1 + c->C - nmask);     /* eps / K_b */
    c->rowloss[b] = w * (lse - (1.0 - eps) * sp - ek * sum);
    const double cf = w / c->wsum * c->inv_t;
    const float gp = (float)(cf * (exp(sp - lse) - (1.0 - eps) - ek));
    c->lse[b] = lse;
    c->coef[b] = cf;
    c->ek[b] = ek;
    if (A != NULL) {
        // d_pred = cf (sum_j p_j cat_j - ek sum_unmasked cat_j) + gp pos, p_j = A / z
        const float az = (float)(cf / z), ce = (float)(cf * ek);
        const float *p = c->pos + b * D;                    /* [D] */
        for (int64_t d = 0; d < D; d++) A[d] = az * A[d] + gp * p[d];
        if (ce != 0.0f) {
            for (int64_t d = 0; d < D; d++) A[d] -= ce * c->nsum[d];
            // the masked copies of the positive are not classes: add them back
            for (int64_t j = nmask == 1 ? jmask : 0; nmask > 0 && j < c->C; j++) {
                if (!masked(c, b, j)) continue;
                for (int64_t d = 0; d < D; d++) A[d] += ce * c->cat[j * D + d];
                if (nmask == 1) break;
            }
        }
    }
    if (c->d_pos != NULL)
        for (int64_t d = 0; d < D; d++) c->d_pos[b * D + d] = gp * u[d];
}

/* Pass 1, chunks [lo, hi) of rows; chunk q owns rows [q B / pa, (q+1) B / pa) and tile q. */
static grm_status full_rows(void *vctx, int64_t lo, int64_t hi)
{
    const full_ctx *c = vctx;
    const int64_t B = c->B, C = c->C, D = c->D;
    const int K = (int)D;
    const float inv_tf = (float)c->inv_t;
    double m[FULL_MA], z[FULL_MA], sum[FULL_MA], sp[FULL_MA];
    int64_t nmask[FULL_MA], jmask[FULL_MA];
    for (int64_t q = lo; q < hi; q++) {
        float *S = c->work + q * FULL_SLOT;                 /* [M, n] */
        const int64_t ra = q * B / c->pa, rb = (q + 1) * B / c->pa;
        for (int64_t r0 = ra; r0 < rb; r0 += FULL_MA) {
            const int64_t M = rb - r0 < FULL_MA ? rb - r0 : FULL_MA;
            const float *U = c->pred + r0 * D;              /* [M, D] */
            float *A = c->d_pred != NULL ? c->d_pred + r0 * D : NULL;   /* [M, D] */
            for (int64_t i = 0; i < M; i++) {
                sp[i] = (double)cblas_sdot(K, U + i * D, 1, c->pos + (r0 + i) * D, 1)
                        * c->inv_t;
                m[i] = sp[i];
                z[i] = 1.0;                                 /* exp(sp - m) */
                sum[i] = sp[i];
                nmask[i] = 0;
                jmask[i] = -1;
            }
            if (A != NULL) memset(A, 0, (size_t)(M * D) * sizeof *A);
            for (int64_t j0 = 0; j0 < C; j0 += FULL_NB) {
                const int64_t n = C - j0 < FULL_NB ? C - j0 : FULL_NB;
                const float *N = c->cat + j0 * D;           /* [n, D] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)n, K, 1.0f,
                            U, K, N, K, 0.0f, S, (int)n);
                for (int64_t i = 0; i < M; i++) {
                    float *s = S + i * n;                   /* [n] */
                    const int64_t jl = masked_col(c, r0 + i, j0, n);
                    float bm = -INFINITY;
                    double bs = 0;
                    if (jl == -2) {
                        for (int64_t k = 0; k < n; k++) {
                            if (masked(c, r0 + i, j0 + k)) {
                                s[k] = -INFINITY;
                                if (nmask[i]++ == 0) jmask[i] = j0 + k;
                                continue;
                            }
                            s[k] *= inv_tf;
                        }
                    } else {
                        for (int64_t k = 0; k < n; k++) s[k] *= inv_tf;
                        if (jl >= 0) {
                            s[jl] = -INFINITY;
                            if (nmask[i]++ == 0) jmask[i] = j0 + jl;
                        }
                    }
                    for (int64_t k = 0; k < n; k++) bm = s[k] > bm ? s[k] : bm;
                    if (c->eps > 0)                         // the smoothed target's share
                        for (int64_t k = 0; k < n; k++) bs += s[k] != -INFINITY ? s[k] : 0.0f;
                    sum[i] += bs;
                    if ((double)bm > m[i]) {                // the max moved: rescale
                        const double r = exp(m[i] - (double)bm);
                        z[i] *= r;
                        if (A != NULL) {
                            const float rf = (float)r;
                            for (int64_t d = 0; d < D; d++) A[i * D + d] *= rf;
                        }
                        m[i] = bm;
                    }
                    const float mf = (float)m[i];
                    ssm_exp_f(s, n, 1.0f, -mf);
                    if (jl >= 0) s[jl] = 0.0f;
                    for (int64_t k = 0; jl == -2 && k < n; k++)
                        if (masked(c, r0 + i, j0 + k)) s[k] = 0.0f;
                    float bz = 0;
                    for (int64_t k = 0; k < n; k++) bz += s[k];
                    z[i] += bz;
                }
                if (A != NULL)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, K, (int)n,
                                1.0f, S, (int)n, N, K, 1.0f, A, K);
            }
            for (int64_t i = 0; i < M; i++)
                full_row_end(c, r0 + i, m[i], z[i], sum[i], sp[i], nmask[i], jmask[i],
                             A != NULL ? A + i * D : NULL);
        }
    }
    return GRM_OK;
}

/* Pass 2, chunks [lo, hi) of item blocks; chunk q owns blocks [q nb / pb, (q+1) nb / pb)
 * and tile q: G = cf (exp(s - lse) - eps / K) per unmasked logit, d_cat_blk = G^T U. */
static grm_status full_items(void *vctx, int64_t lo, int64_t hi)
{
    const full_ctx *c = vctx;
    const int64_t B = c->B, C = c->C, D = c->D;
    const int K = (int)D;
    const float inv_tf = (float)c->inv_t;
    for (int64_t q = lo; q < hi; q++) {
        float *S = c->work + q * FULL_SLOT;                 /* [M, n] */
        const int64_t ba = q * c->nblocks / c->pb, bb = (q + 1) * c->nblocks / c->pb;
        for (int64_t blk = ba; blk < bb; blk++) {
            const int64_t j0 = blk * FULL_NB, n = C - j0 < FULL_NB ? C - j0 : FULL_NB;
            const float *N = c->cat + j0 * D;               /* [n, D] */
            float *dN = c->d_cat + j0 * D;                  /* [n, D] */
            memset(dN, 0, (size_t)(n * D) * sizeof *dN);
            for (int64_t r0 = 0; r0 < B; r0 += FULL_MB) {
                const int64_t M = B - r0 < FULL_MB ? B - r0 : FULL_MB;
                const float *U = c->pred + r0 * D;          /* [M, D] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)n, K, 1.0f,
                            U, K, N, K, 0.0f, S, (int)n);
                for (int64_t i = 0; i < M; i++) {
                    const int64_t b = r0 + i, jl = masked_col(c, b, j0, n);
                    float *s = S + i * n;                   /* [n] */
                    const float lse = (float)c->lse[b], cf = (float)c->coef[b];
                    const float ek = (float)c->ek[b];
                    ssm_exp_f(s, n, inv_tf, -lse);
                    for (int64_t k = 0; k < n; k++) s[k] = cf * (s[k] - ek);
                    if (jl >= 0) s[jl] = 0.0f;
                    for (int64_t k = 0; jl == -2 && k < n; k++)
                        if (masked(c, b, j0 + k)) s[k] = 0.0f;
                }
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, K, (int)M, 1.0f,
                            S, (int)n, U, K, 1.0f, dN, K);
            }
        }
    }
    return GRM_OK;
}

static int full_cmp_id(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

grm_status ssm_full_cpu(const grm_host_api *host, double *loss, float *d_pred, float *d_pos,
                        float *d_cat, const float *pred, const float *pos, const float *cat,
                        const int64_t *pos_ids, const int64_t *cat_ids, const float *weights,
                        double smoothing, double temperature, int64_t B, int64_t C, int64_t D,
                        float *work)
{
    double wsum;
    grm_status st = head_weight_sum(host, "head-sampled-softmax", weights, B, &wsum);
    if (st != GRM_OK)
        return st;
    if (B == 0) {
        if (d_cat != NULL) memset(d_cat, 0, (size_t)(C * D) * sizeof *d_cat);
        *loss = 0.0;
        return GRM_OK;
    }
    const int32_t threads = host->num_threads();
    const int64_t slots = full_slots(threads), nblocks = (C + FULL_NB - 1) / FULL_NB;
    double *rowd = (double *)(work + slots * FULL_SLOT);    /* [4, B] */
    full_ctx ctx = { .work = work, .lse = rowd, .coef = rowd + B, .ek = rowd + 2 * B,
                     .rowloss = rowd + 3 * B, .d_pred = d_pred, .d_pos = d_pos,
                     .d_cat = d_cat, .pred = pred, .pos = pos, .cat = cat, .pos_ids = pos_ids,
                     .cat_ids = cat_ids, .weights = weights, .inv_t = 1.0 / temperature,
                     .eps = smoothing, .wsum = wsum, .B = B, .C = C, .D = D,
                     .pa = B < slots ? B : slots, .nblocks = nblocks,
                     .pb = nblocks < slots ? (nblocks > 0 ? nblocks : 1) : slots };
    int64_t *pairs = (int64_t *)(rowd + 4 * B), *jm = pairs + 2 * C;   /* [C, 2], [B] */
    if (pos_ids != NULL && cat_ids != NULL) {
        // each row's masked column found once, by id, instead of comparing B x C ids
        for (int64_t j = 0; j < C; j++) {
            pairs[2 * j] = cat_ids[j];
            pairs[2 * j + 1] = j;
        }
        qsort(pairs, (size_t)C, 2 * sizeof *pairs, full_cmp_id);
        for (int64_t j = 1; j < C && !ctx.dup; j++) ctx.dup = pairs[2 * j] == pairs[2 * j - 2];
        for (int64_t b = 0; b < B; b++) {
            const int64_t *hit = bsearch(&pos_ids[b], pairs, (size_t)C, 2 * sizeof *pairs,
                                         full_cmp_id);
            jm[b] = hit != NULL ? hit[1] : -1;
        }
        ctx.jm = jm;
    }
    if (smoothing > 0 && d_pred != NULL) {
        // the sum of the catalog rows, for the eps / K share of every class in d_pred
        float *nsum = (float *)(jm + B);                    /* [D] */
        for (int64_t d = 0; d < D; d++) {
            double acc = 0;
            for (int64_t j = 0; j < C; j++) acc += (double)cat[j * D + d];
            nsum[d] = (float)acc;
        }
        ctx.nsum = nsum;
    }
    if ((st = host->parallel_for(ctx.pa, 1, full_rows, &ctx)) != GRM_OK) return st;
    double total = 0;
    for (int64_t b = 0; b < B; b++) total += ctx.rowloss[b];   /* fixed order */
    *loss = total / wsum;
    if (d_cat == NULL || C == 0) return GRM_OK;
    return host->parallel_for(ctx.pb, 1, full_items, &ctx);
}

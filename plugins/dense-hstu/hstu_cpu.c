/* plugins/dense-hstu/hstu_cpu.c - the fast CPU attention of dense-hstu (its linear layers
 * are dense-mlp's linear.h, the backend's GEMMs on the host's thread pool). The attention is fused and tiled as FlashAttention (MTGRBoost §5.2): a q-tile meets the
 * k-tiles at or below the causal diagonal only (tiles above it are skipped), the scores of
 * one HSTU_TILE x HSTU_TILE tile live on the stack, and backward recomputes them, so no
 * O(L^2) buffer ever exists. Mirrors hstu_ref.c (hstu_attn_fwd_ref, hstu_attn_bwd_ref);
 * tests/test-dense-hstu.c compares the two at rtol 1e-4. Callers keep sizes within int. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "hstu.h"

/* ---- attention: work lists ---- */

void hstu_time_thresholds(int64_t *thr, int64_t nbuckets)
{
    if (nbuckets > 0)
        thr[0] = 0;
    for (int64_t b = 1; b < nbuckets; b++) {
        // start near exp(0.301 b) and step to the exact edge of the double formula
        int64_t t = (int64_t)ceil(exp(HSTU_TIME_LOG_STEP * (double)b));
        while (t > 1 && hstu_time_bucket(t - 1, INT64_MAX) >= b)
            t--;
        while (hstu_time_bucket(t, INT64_MAX) < b)
            t++;
        thr[b] = t;
    }
}

/* tlo [64]: tlo[k] = the bucket of 2^k (clamped to nbuckets - 1), the start of
 * time_bucket_fast's search. */
static void time_bucket_starts(uint8_t *tlo, const int64_t *thr, int64_t nbuckets)
{
    for (int k = 0; k < 64; k++) {
        const uint64_t a = UINT64_C(1) << k;
        int64_t b = 0;
        while (b + 1 < nbuckets && (uint64_t)thr[b + 1] <= a)
            b++;
        tlo[k] = (uint8_t)b;
    }
}

/* The bucket of |dt|: the number of b >= 1 with thr[b] <= |dt| (thr is nondecreasing).
 * |dt| in [2^k, 2^(k+1)) spans at most ceil(ln 2 / 0.301) + 1 = 4 buckets, so the search
 * starts at the bucket of 2^k and steps at most 3 times, where a binary search over 32
 * buckets took 5 unpredictable branches (it was 14% of the layer's time). */
static inline int32_t time_bucket_fast(const int64_t *thr, const uint8_t *tlo,
                                       int64_t nbuckets, int64_t dt)
{
    const uint64_t a = dt < 0 ? (uint64_t)0 - (uint64_t)dt : (uint64_t)dt;
    if (a >= (uint64_t)thr[nbuckets - 1])
        return (int32_t)(nbuckets - 1);
    int64_t b = a < 2 ? 0 : tlo[63 - __builtin_clzll(a)];
    while ((uint64_t)thr[b + 1] <= a)       // a < thr[nbuckets - 1]: b stays below it
        b++;
    return (int32_t)b;
}

static int64_t ntiles(int64_t len)
{
    return (len + HSTU_TILE - 1) / HSTU_TILE;
}

/* Upper bound of the items of N rows in B sequences: sum ceil(L/T) <= N/T + B. */
static int64_t max_items(int64_t N, int64_t B)
{
    return N / HSTU_TILE + B;
}

size_t hstu_attn_ws_bytes(int64_t rows, int64_t nseq, int64_t H, int64_t nrab)
{
    return 2 * (size_t)max_items(rows, nseq) * sizeof(hstu_item)
           + (size_t)HSTU_RAB_CHUNKS * (size_t)(H * nrab) * sizeof(float);
}

static int item_cmp(const void *pa, const void *pb)
{
    const hstu_item *x = pa, *y = pb;
    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->tile < y->tile ? -1 : x->tile > y->tile;
}

/* Which work items build_items lists. */
enum item_kind {
    ITEMS_Q,            /* the q-tiles of every sequence (forward) */
    ITEMS_Q_LONG,       /* the q-tiles of the sequences longer than HSTU_FUSED_TILES tiles */
    ITEMS_K_LONG,       /* the k-tiles of those sequences */
    ITEMS_FUSED,        /* one item a sequence of at most HSTU_FUSED_TILES tiles */
};

/* Backward does a sequence of at most this many tiles in one pass over its tile pairs (dQ,
 * dK and dV together); a longer one is split into k-tile and q-tile items, which recompute
 * each pair twice but spread one long sequence over the threads. Fixed, so the split (and
 * the result) does not depend on the batch or the thread count. */
#define HSTU_FUSED_TILES 4

/* list [n] of the items of kind `kind`, sorted by decreasing cost: a q-tile t visits t + 1
 * k-tiles; a k-tile t is visited by ntiles - t q-tiles; a fused sequence visits
 * nt (nt + 1) / 2 tile pairs. */
static int64_t build_items(hstu_item *list, const grm_hstu_attn_args *a, enum item_kind kind)
{
    int64_t n = 0;
    for (int64_t s = 0; s < a->nseq; s++) {
        const int64_t nt = ntiles(a->offsets[s + 1] - a->offsets[s]);
        const int fused = nt <= HSTU_FUSED_TILES;
        if (kind == ITEMS_FUSED) {
            if (fused && nt > 0)
                list[n++] = (hstu_item){ s, 0, nt * (nt + 1) / 2 };
            continue;
        }
        if (kind != ITEMS_Q && fused)
            continue;
        for (int64_t t = 0; t < nt; t++)
            list[n++] = (hstu_item){ s, t, kind == ITEMS_K_LONG ? nt - t : t + 1 };
    }
    qsort(list, (size_t)n, sizeof *list, item_cmp);
    return n;
}

/* ---- attention: one tile pair ---- */

/* The shape and bias of tile pair (q-tile rows [i0, i0 + bq), k-tile rows [j0, j0 + bk))
 * of the sequence starting at row o, shared by all heads. */
typedef struct tile_pair {
    int64_t o, i0, j0, bq, bk;
    double c;                               /* 1/n */
    int32_t pos[HSTU_TILE * HSTU_TILE];     /* [bq, bk] position bucket, -1: masked */
    int32_t tb[HSTU_TILE * HSTU_TILE];      /* [bq, bk] time bucket (times set) */
} tile_pair;

/* Fill pos (and tb) of a tile pair: bucket indices are head-independent, so they are
 * computed once per pair and reused by every head. tlo: time_bucket_starts. */
static void tile_buckets(tile_pair *tp, const grm_hstu_attn_args *a, const uint8_t *tlo)
{
    for (int64_t r = 0; r < tp->bq; r++) {
        const int64_t i = tp->i0 + r;
        int32_t *pos = tp->pos + r * tp->bk, *tb = tp->tb + r * tp->bk;
        for (int64_t cc = 0; cc < tp->bk; cc++) {
            const int64_t j = tp->j0 + cc;
            pos[cc] = j > i ? -1 : (int32_t)hstu_pos_bucket(i - tp->o, j - tp->o, a->max_len);
        }
        if (a->times != NULL)
            for (int64_t cc = 0; cc < tp->bk; cc++)
                tb[cc] = pos[cc] < 0 ? 0 : time_bucket_fast(a->time_thr, tlo, a->nbuckets,
                                                             a->times[i] - a->times[tp->j0 + cc]);
    }
}

/* S [bq, bk] = Q_i K_j^T + bias of head h (eq. 2 before the SiLU). */
static void tile_scores(float *S, const tile_pair *tp, const grm_hstu_attn_args *a, int64_t h)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)tp->bq, (int)tp->bk,
                (int)a->dqk, 1.0f, a->q + tp->i0 * a->ld + h * a->dqk, (int)a->ld,
                a->k + tp->j0 * a->ld + h * a->dqk, (int)a->ld, 0.0f, S, (int)tp->bk);
    const float *rp = a->rab_pos != NULL ? a->rab_pos + h * a->max_len : NULL;
    const float *rt = a->rab_time != NULL && a->times != NULL
                      ? a->rab_time + h * a->nbuckets : NULL;
    const int64_t n = tp->bq * tp->bk;
    if (rp != NULL)
        for (int64_t e = 0; e < n; e++)
            S[e] += tp->pos[e] >= 0 ? rp[tp->pos[e]] : 0.0f;
    if (rt != NULL)
        for (int64_t e = 0; e < n; e++)
            S[e] += rt[tp->tb[e]];
}

/* A [bq, bk] = SiLU(S) * c, 0 above the diagonal. With dA (holding dO_i V_j^T): also
 * dS = dA * c * SiLU'(S), 0 above the diagonal, in place of dA. */
HSTU_VECTOR_CLONES
static void tile_silu(float *restrict A, float *restrict dA, const float *restrict S,
                      const tile_pair *tp)
{
    const int64_t n = tp->bq * tp->bk;
    const float c = (float)tp->c;
    const int32_t *restrict pos = tp->pos;
    // branch-free: a masked element gets the factor 0 (S is finite there, so 0 * S is 0)
    if (dA == NULL) {
        for (int64_t e = 0; e < n; e++) {
            const float s = S[e], keep = pos[e] >= 0 ? c : 0.0f;
            A[e] = s * keep * hstu_sigmoid(s);
        }
        return;
    }
    for (int64_t e = 0; e < n; e++) {
        const float s = S[e], sg = hstu_sigmoid(s);
        const float keep = pos[e] >= 0 ? c : 0.0f;
        A[e] = s * sg * keep;
        dA[e] *= keep * sg * (1.0f + s * (1.0f - sg));
    }
}

static void tile_pair_init(tile_pair *tp, const grm_hstu_attn_args *a, int64_t s, int64_t qt,
                           int64_t kt)
{
    const int64_t o = a->offsets[s], e = a->offsets[s + 1];
    tp->o = o;
    tp->i0 = o + qt * HSTU_TILE;
    tp->j0 = o + kt * HSTU_TILE;
    tp->bq = e - tp->i0 < HSTU_TILE ? e - tp->i0 : HSTU_TILE;
    tp->bk = e - tp->j0 < HSTU_TILE ? e - tp->j0 : HSTU_TILE;
    tp->c = a->norm == HSTU_NORM_LENGTH ? 1.0 / (double)(e - o) : 1.0 / (double)a->max_len;
}

/* ---- attention: forward ---- */

typedef struct attn_job {
    const grm_hstu_attn_args *a;
    const hstu_item *items;
    int64_t nitems;
    float *out, *dq, *dk, *dv;
    const float *dout;
    float *partial;             /* [HSTU_RAB_CHUNKS, H * nrab] */
    int64_t nrab;               /* max_len (if rab_pos) + nbuckets (if time bias) */
    const hstu_item *fused;     /* backward: the sequences done in one pass */
    int64_t nfused;
    uint8_t tlo[64];            /* time_bucket_starts */
} attn_job;

/* Scratch of one tile pair (about 80 KB), on the worker's stack: the kernels allocate
 * nothing, and the scratch does not grow with L. */
typedef struct tile_scratch {
    tile_pair tp;
    float S[HSTU_TILE * HSTU_TILE];
    float A[HSTU_TILE * HSTU_TILE];
    float dA[HSTU_TILE * HSTU_TILE];
} tile_scratch;

/* Items [b, e): for each q-tile, every head, every k-tile at or below the diagonal:
 * O_i += SiLU(Q_i K_j^T + bias) / n V_j. */
static grm_status attn_fwd_items(void *ctx, int64_t b, int64_t e)
{
    const attn_job *job = ctx;
    const grm_hstu_attn_args *a = job->a;
    const int64_t HV = a->H * a->dv;
    tile_scratch scratch;                   // on the worker stack: no allocation
    tile_scratch *ts = &scratch;
    for (int64_t it = b; it < e; it++) {
        const hstu_item *item = &job->items[it];
        for (int64_t kt = 0; kt <= item->tile; kt++) {
            tile_pair_init(&ts->tp, a, item->seq, item->tile, kt);
            tile_buckets(&ts->tp, a, job->tlo);
            for (int64_t h = 0; h < a->H; h++) {
                float *O = job->out + ts->tp.i0 * HV + h * a->dv;   /* [bq, dv], ld HV */
                if (kt == 0)
                    for (int64_t r = 0; r < ts->tp.bq; r++)
                        memset(O + r * HV, 0, (size_t)a->dv * sizeof *O);
                tile_scores(ts->S, &ts->tp, a, h);
                tile_silu(ts->A, NULL, ts->S, &ts->tp);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ts->tp.bq,
                            (int)a->dv, (int)ts->tp.bk, 1.0f, ts->A, (int)ts->tp.bk,
                            a->v + ts->tp.j0 * a->ld + h * a->dv, (int)a->ld, 1.0f, O,
                            (int)HV);
            }
        }
    }
    return GRM_OK;
}

grm_status hstu_attn_fwd_cpu(void *ctx, float *out, const grm_hstu_attn_args *a, void *ws)
{
    (void)ctx;
    attn_job job = { .a = a, .items = ws, .out = out };
    if (a->times != NULL)
        time_bucket_starts(job.tlo, a->time_thr, a->nbuckets);
    job.nitems = build_items(ws, a, ITEMS_Q);
    return a->host->parallel_for(job.nitems, 1, attn_fwd_items, &job);
}

/* ---- attention: backward ---- */

/* Recompute A and dS of tile pair tp for head h (dA = dO_i V_j^T first). */
static void tile_grad(tile_scratch *ts, const attn_job *job, int64_t h)
{
    const grm_hstu_attn_args *a = job->a;
    const int64_t HV = a->H * a->dv;
    tile_scores(ts->S, &ts->tp, a, h);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ts->tp.bq, (int)ts->tp.bk,
                (int)a->dv, 1.0f, job->dout + ts->tp.i0 * HV + h * a->dv, (int)HV,
                a->v + ts->tp.j0 * a->ld + h * a->dv, (int)a->ld, 0.0f, ts->dA,
                (int)ts->tp.bk);
    tile_silu(ts->A, ts->dA, ts->S, &ts->tp);
}

/* Accumulate the RAB gradients of tile pair tp, head h (dS in ts->dA) into ph [nrab]. */
static void tile_rab_grad(float *ph, const tile_scratch *ts, const attn_job *job)
{
    const grm_hstu_attn_args *a = job->a;
    const int64_t n = ts->tp.bq * ts->tp.bk;
    const int64_t time_off = a->rab_pos != NULL ? a->max_len : 0;
    if (a->rab_pos != NULL)
        for (int64_t x = 0; x < n; x++)
            if (ts->tp.pos[x] >= 0)
                ph[ts->tp.pos[x]] += ts->dA[x];
    if (a->rab_time != NULL && a->times != NULL)
        for (int64_t x = 0; x < n; x++)
            if (ts->tp.pos[x] >= 0)
                ph[time_off + ts->tp.tb[x]] += ts->dA[x];
}

/* dQ_i += dS_ij K_j of tile pair tp, head h (dS in ts->dA). */
static void tile_dq(const tile_scratch *ts, const attn_job *job, int64_t h)
{
    const grm_hstu_attn_args *a = job->a;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ts->tp.bq, (int)a->dqk,
                (int)ts->tp.bk, 1.0f, ts->dA, (int)ts->tp.bk,
                a->k + ts->tp.j0 * a->ld + h * a->dqk, (int)a->ld, 1.0f,
                job->dq + ts->tp.i0 * a->ld + h * a->dqk, (int)a->ld);
}

/* dV_j += A_ij^T dO_i and dK_j += dS_ij^T Q_i of tile pair tp, head h. */
static void tile_dkv(const tile_scratch *ts, const attn_job *job, int64_t h)
{
    const grm_hstu_attn_args *a = job->a;
    const int64_t HV = a->H * a->dv;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ts->tp.bk, (int)a->dv,
                (int)ts->tp.bq, 1.0f, ts->A, (int)ts->tp.bk,
                job->dout + ts->tp.i0 * HV + h * a->dv, (int)HV, 1.0f,
                job->dv + ts->tp.j0 * a->ld + h * a->dv, (int)a->ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ts->tp.bk, (int)a->dqk,
                (int)ts->tp.bq, 1.0f, ts->dA, (int)ts->tp.bk,
                a->q + ts->tp.i0 * a->ld + h * a->dqk, (int)a->ld, 1.0f,
                job->dk + ts->tp.j0 * a->ld + h * a->dqk, (int)a->ld);
}

/* Zero rows [r0, r0 + n) of columns [c0, c0 + w) of x (stride ld). */
static void zero_rows(float *x, int64_t r0, int64_t n, int64_t c0, int64_t w, int64_t ld)
{
    for (int64_t r = r0; r < r0 + n; r++)
        memset(x + r * ld + c0, 0, (size_t)w * sizeof *x);
}

/* The long sequences' k-tile items [b, e): dV_j = sum_i A_ij^T dO_i, dK_j = sum_i
 * dS_ij^T Q_i over the q-tiles at or below the diagonal. Each k-tile is owned by one item:
 * no races. */
static grm_status attn_bwd_kv_items(void *ctx, int64_t b, int64_t e)
{
    const attn_job *job = ctx;
    const grm_hstu_attn_args *a = job->a;
    tile_scratch scratch;                   // on the worker stack: no allocation
    tile_scratch *ts = &scratch;
    for (int64_t it = b; it < e; it++) {
        const hstu_item *item = &job->items[it];
        const int64_t nt = ntiles(a->offsets[item->seq + 1] - a->offsets[item->seq]);
        for (int64_t qt = item->tile; qt < nt; qt++) {
            tile_pair_init(&ts->tp, a, item->seq, qt, item->tile);
            tile_buckets(&ts->tp, a, job->tlo);
            for (int64_t h = 0; h < a->H; h++) {
                if (qt == item->tile) {
                    zero_rows(job->dk, ts->tp.j0, ts->tp.bk, h * a->dqk, a->dqk, a->ld);
                    zero_rows(job->dv, ts->tp.j0, ts->tp.bk, h * a->dv, a->dv, a->ld);
                }
                tile_grad(ts, job, h);
                tile_dkv(ts, job, h);
            }
        }
    }
    return GRM_OK;
}

/* One short sequence in one pass: each tile pair's scores and dS are computed once and
 * give dQ, dK, dV and the RAB gradients together (FlashAttention-2's backward, which
 * recomputes each tile once). q-tiles ascend and k-tiles ascend inside them, so dQ_i sums
 * over j and dK_j, dV_j over i in the same order as the two-pass path. */
static void attn_bwd_fused(tile_scratch *ts, const attn_job *job, int64_t s, float *part)
{
    const grm_hstu_attn_args *a = job->a;
    const int64_t nt = ntiles(a->offsets[s + 1] - a->offsets[s]);
    for (int64_t qt = 0; qt < nt; qt++)
        for (int64_t kt = 0; kt <= qt; kt++) {
            tile_pair_init(&ts->tp, a, s, qt, kt);
            tile_buckets(&ts->tp, a, job->tlo);
            for (int64_t h = 0; h < a->H; h++) {
                if (kt == 0)
                    zero_rows(job->dq, ts->tp.i0, ts->tp.bq, h * a->dqk, a->dqk, a->ld);
                if (qt == kt) {
                    zero_rows(job->dk, ts->tp.j0, ts->tp.bk, h * a->dqk, a->dqk, a->ld);
                    zero_rows(job->dv, ts->tp.j0, ts->tp.bk, h * a->dv, a->dv, a->ld);
                }
                tile_grad(ts, job, h);
                tile_dq(ts, job, h);
                tile_dkv(ts, job, h);
                if (job->nrab > 0)
                    tile_rab_grad(part + h * job->nrab, ts, job);
            }
        }
}

/* Chunks [b, e) of the fixed partition: chunk c takes the short sequences c, c + C, ... and
 * the long sequences' q-tiles c, c + C, ... of the sorted lists (dQ_i = sum_j dS_ij K_j
 * there), and owns one partial copy of the RAB gradients. */
static grm_status attn_bwd_q_chunks(void *ctx, int64_t b, int64_t e)
{
    const attn_job *job = ctx;
    const grm_hstu_attn_args *a = job->a;
    tile_scratch scratch;                   // on the worker stack: no allocation
    tile_scratch *ts = &scratch;
    for (int64_t ch = b; ch < e; ch++) {
        float *part = job->partial + ch * a->H * job->nrab;     /* [H, nrab] */
        memset(part, 0, (size_t)(a->H * job->nrab) * sizeof *part);
        for (int64_t it = ch; it < job->nfused; it += HSTU_RAB_CHUNKS)
            attn_bwd_fused(ts, job, job->fused[it].seq, part);
        for (int64_t it = ch; it < job->nitems; it += HSTU_RAB_CHUNKS) {
            const hstu_item *item = &job->items[it];
            for (int64_t kt = 0; kt <= item->tile; kt++) {
                tile_pair_init(&ts->tp, a, item->seq, item->tile, kt);
                tile_buckets(&ts->tp, a, job->tlo);
                for (int64_t h = 0; h < a->H; h++) {
                    if (kt == 0)
                        zero_rows(job->dq, ts->tp.i0, ts->tp.bq, h * a->dqk, a->dqk, a->ld);
                    tile_grad(ts, job, h);
                    tile_dq(ts, job, h);
                    if (job->nrab > 0)
                        tile_rab_grad(part + h * job->nrab, ts, job);
                }
            }
        }
    }
    return GRM_OK;
}

grm_status hstu_attn_bwd_cpu(void *ctx, float *dq, float *dk, float *dv, float *d_rab_pos,
                             float *d_rab_time, const float *dout, const grm_hstu_attn_args *a,
                             void *ws)
{
    (void)ctx;
    const int64_t N = a->offsets[a->nseq], cap = max_items(N, a->nseq);
    hstu_item *items = ws;
    const int has_time = a->rab_time != NULL && a->times != NULL;
    attn_job job = { .a = a, .dq = dq, .dk = dk, .dv = dv, .dout = dout };
    job.nrab = (a->rab_pos != NULL ? a->max_len : 0) + (has_time ? a->nbuckets : 0);
    job.partial = (float *)(items + 2 * cap);
    if (a->times != NULL)
        time_bucket_starts(job.tlo, a->time_thr, a->nbuckets);

    // the long sequences' k-tiles (dK, dV) in [0, cap); their q-tiles, then the short
    // sequences, in [cap, 2 cap): 2 (N_long / T + B_long) + B_short <= 2 cap entries
    job.items = items;
    job.nitems = build_items(items, a, ITEMS_K_LONG);
    grm_status st = GRM_OK;
    if (job.nitems > 0)
        st = a->host->parallel_for(job.nitems, 1, attn_bwd_kv_items, &job);
    if (st != GRM_OK)
        return st;

    job.items = items + cap;
    job.nitems = build_items(items + cap, a, ITEMS_Q_LONG);
    job.fused = job.items + job.nitems;
    job.nfused = build_items(items + cap + job.nitems, a, ITEMS_FUSED);
    st = a->host->parallel_for(HSTU_RAB_CHUNKS, 1, attn_bwd_q_chunks, &job);
    if (st != GRM_OK || job.nrab == 0)
        return st;
    // the partial RAB gradients, summed in chunk order (deterministic)
    for (int64_t ch = 0; ch < HSTU_RAB_CHUNKS; ch++) {
        const float *part = job.partial + ch * a->H * job.nrab;    /* [H, nrab] */
        for (int64_t h = 0; h < a->H; h++) {
            if (d_rab_pos != NULL && a->rab_pos != NULL)
                for (int64_t x = 0; x < a->max_len; x++)
                    d_rab_pos[h * a->max_len + x] += part[h * job.nrab + x];
            if (d_rab_time != NULL && has_time) {
                const int64_t off = a->rab_pos != NULL ? a->max_len : 0;
                for (int64_t x = 0; x < a->nbuckets; x++)
                    d_rab_time[h * a->nbuckets + x] += part[h * job.nrab + off + x];
            }
        }
    }
    return GRM_OK;
}

const hstu_impl hstu_impl_cpu = {
    "cpu", 1, linear_fwd_cpu, linear_bwd_cpu, hstu_attn_fwd_cpu, hstu_attn_bwd_cpu
};

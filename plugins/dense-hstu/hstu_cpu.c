/* plugins/dense-hstu/hstu_cpu.c - the fast CPU kernels of dense-hstu. Linear layers are
 * cblas_sgemm calls split over the host's thread pool (OpenBLAS runs single-threaded).
 * The attention is fused and tiled as FlashAttention (MTGRBoost §5.2): a q-tile meets the
 * k-tiles at or below the causal diagonal only (tiles above it are skipped), the scores of
 * one HSTU_TILE x HSTU_TILE tile live on the stack, and backward recomputes them, so no
 * O(L^2) buffer ever exists. Mirrors hstu_ref.c (hstu_attn_fwd_ref, hstu_attn_bwd_ref);
 * tests/test-dense-hstu.c compares the two at rtol 1e-4. Callers keep sizes within int. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "hstu.h"

/* ---- linear layers ---- */

typedef struct linear_job {
    float *z, *dx, *dw, *db;
    const float *x, *w, *b, *dz;
    int64_t rows, in, out;
} linear_job;

/* Rows [r0, r1): z = x W^T + b. */
static grm_status linear_fwd_rows(void *ctx, int64_t r0, int64_t r1)
{
    const linear_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        memcpy(j->z + r * j->out, j->b, (size_t)j->out * sizeof *j->z);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(r1 - r0), (int)j->out,
                (int)j->in, 1.0f, j->x + r0 * j->in, (int)j->in, j->w, (int)j->in, 1.0f,
                j->z + r0 * j->out, (int)j->out);
    return GRM_OK;
}

grm_status hstu_linear_fwd_cpu(const grm_host_api *host, float *z, const float *x,
                               const float *w, const float *b, int64_t rows, int64_t in,
                               int64_t out)
{
    linear_job j = { .z = z, .x = x, .w = w, .b = b, .rows = rows, .in = in, .out = out };
    if (rows == 0)
        return GRM_OK;
    return host->parallel_for(rows, 32, linear_fwd_rows, &j);
}

/* Output features [o0, o1): dw[o0:o1] += dz[:, o0:o1]^T x, db[o0:o1] += column sums. Each
 * range owns its slice of dw and db, so no reduction between threads. */
static grm_status linear_bwd_w_cols(void *ctx, int64_t o0, int64_t o1)
{
    const linear_job *j = ctx;
    for (int64_t r = 0; r < j->rows; r++) {
        const float *dzr = j->dz + r * j->out;    /* [out] */
        for (int64_t o = o0; o < o1; o++)
            j->db[o] += dzr[o];
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(o1 - o0), (int)j->in,
                (int)j->rows, 1.0f, j->dz + o0, (int)j->out, j->x, (int)j->in, 1.0f,
                j->dw + o0 * j->in, (int)j->in);
    return GRM_OK;
}

/* Rows [r0, r1): dx = dz W. */
static grm_status linear_bwd_x_rows(void *ctx, int64_t r0, int64_t r1)
{
    const linear_job *j = ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(r1 - r0), (int)j->in,
                (int)j->out, 1.0f, j->dz + r0 * j->out, (int)j->out, j->w, (int)j->in, 0.0f,
                j->dx + r0 * j->in, (int)j->in);
    return GRM_OK;
}

grm_status hstu_linear_bwd_cpu(const grm_host_api *host, float *dx, float *dw, float *db,
                               const float *dz, const float *x, const float *w, int64_t rows,
                               int64_t in, int64_t out)
{
    linear_job j = { .dx = dx, .dw = dw, .db = db, .dz = dz, .x = x, .w = w, .rows = rows,
                     .in = in, .out = out };
    if (rows == 0)
        return GRM_OK;
    grm_status st = host->parallel_for(out, 16, linear_bwd_w_cols, &j);
    if (st == GRM_OK && dx != NULL)
        st = host->parallel_for(rows, 32, linear_bwd_x_rows, &j);
    return st;
}

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

/* The bucket of |dt|: the number of b >= 1 with thr[b] <= |dt| (thr is nondecreasing). */
static inline int32_t time_bucket_thr(const int64_t *thr, int64_t nbuckets, int64_t dt)
{
    const int64_t a = dt < 0 ? -dt : dt;
    int64_t lo = 1, hi = nbuckets;          // first index in [1, nbuckets) with thr > a
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (thr[mid] <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int32_t)(lo - 1);
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

/* list [n] of the tiles of every sequence, sorted by decreasing cost: a q-tile t visits
 * t + 1 k-tiles (by_k = 0); a k-tile t is visited by ntiles - t q-tiles (by_k = 1). */
static int64_t build_items(hstu_item *list, const hstu_attn_args *a, int by_k)
{
    int64_t n = 0;
    for (int64_t s = 0; s < a->nseq; s++) {
        const int64_t nt = ntiles(a->offsets[s + 1] - a->offsets[s]);
        for (int64_t t = 0; t < nt; t++)
            list[n++] = (hstu_item){ s, t, by_k ? nt - t : t + 1 };
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
 * computed once per pair and reused by every head. */
static void tile_buckets(tile_pair *tp, const hstu_attn_args *a)
{
    for (int64_t r = 0; r < tp->bq; r++) {
        const int64_t i = tp->i0 + r;
        for (int64_t cc = 0; cc < tp->bk; cc++) {
            const int64_t j = tp->j0 + cc;
            tp->pos[r * tp->bk + cc] = j > i ? -1
                                       : (int32_t)hstu_pos_bucket(i - tp->o, j - tp->o,
                                                                  a->max_len);
            if (a->times != NULL)
                tp->tb[r * tp->bk + cc] = time_bucket_thr(a->time_thr, a->nbuckets,
                                                          a->times[i] - a->times[j]);
        }
    }
}

/* S [bq, bk] = Q_i K_j^T + bias of head h (eq. 2 before the SiLU). */
static void tile_scores(float *S, const tile_pair *tp, const hstu_attn_args *a, int64_t h)
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
static void tile_silu(float *A, float *dA, const float *S, const tile_pair *tp)
{
    const int64_t n = tp->bq * tp->bk;
    const float c = (float)tp->c;
    // branch-free: a masked element gets the factor 0 (S is finite there, so 0 * S is 0)
    if (dA == NULL) {
        for (int64_t e = 0; e < n; e++) {
            const float s = S[e], keep = tp->pos[e] >= 0 ? c : 0.0f;
            A[e] = s * keep / (1.0f + expf(-s));
        }
        return;
    }
    for (int64_t e = 0; e < n; e++) {
        const float s = S[e], sg = 1.0f / (1.0f + expf(-s));
        const float keep = tp->pos[e] >= 0 ? c : 0.0f;
        A[e] = s * sg * keep;
        dA[e] *= keep * sg * (1.0f + s * (1.0f - sg));
    }
}

static void tile_pair_init(tile_pair *tp, const hstu_attn_args *a, int64_t s, int64_t qt,
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
    const hstu_attn_args *a;
    const hstu_item *items;
    int64_t nitems;
    float *out, *dq, *dk, *dv;
    const float *dout;
    float *partial;             /* [HSTU_RAB_CHUNKS, H * nrab] */
    int64_t nrab;               /* max_len (if rab_pos) + nbuckets (if time bias) */
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
    const hstu_attn_args *a = job->a;
    const int64_t HV = a->H * a->dv;
    tile_scratch scratch;                   // on the worker stack: no allocation
    tile_scratch *ts = &scratch;
    for (int64_t it = b; it < e; it++) {
        const hstu_item *item = &job->items[it];
        for (int64_t kt = 0; kt <= item->tile; kt++) {
            tile_pair_init(&ts->tp, a, item->seq, item->tile, kt);
            tile_buckets(&ts->tp, a);
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

grm_status hstu_attn_fwd_cpu(float *out, const hstu_attn_args *a, void *ws)
{
    attn_job job = { .a = a, .items = ws, .out = out };
    job.nitems = build_items(ws, a, 0);
    return a->host->parallel_for(job.nitems, 1, attn_fwd_items, &job);
}

/* ---- attention: backward ---- */

/* Recompute A and dS of tile pair tp for head h (dA = dO_i V_j^T first). */
static void tile_grad(tile_scratch *ts, const attn_job *job, int64_t h)
{
    const hstu_attn_args *a = job->a;
    const int64_t HV = a->H * a->dv;
    tile_scores(ts->S, &ts->tp, a, h);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ts->tp.bq, (int)ts->tp.bk,
                (int)a->dv, 1.0f, job->dout + ts->tp.i0 * HV + h * a->dv, (int)HV,
                a->v + ts->tp.j0 * a->ld + h * a->dv, (int)a->ld, 0.0f, ts->dA,
                (int)ts->tp.bk);
    tile_silu(ts->A, ts->dA, ts->S, &ts->tp);
}

/* Pass 1, items [b, e) of k-tiles: dV_j = sum_i A_ij^T dO_i, dK_j = sum_i dS_ij^T Q_i over
 * the q-tiles at or below the diagonal. Each k-tile is owned by one item: no races. */
static grm_status attn_bwd_kv_items(void *ctx, int64_t b, int64_t e)
{
    const attn_job *job = ctx;
    const hstu_attn_args *a = job->a;
    const int64_t HV = a->H * a->dv;
    tile_scratch scratch;                   // on the worker stack: no allocation
    tile_scratch *ts = &scratch;
    for (int64_t it = b; it < e; it++) {
        const hstu_item *item = &job->items[it];
        const int64_t nt = ntiles(a->offsets[item->seq + 1] - a->offsets[item->seq]);
        for (int64_t qt = item->tile; qt < nt; qt++) {
            tile_pair_init(&ts->tp, a, item->seq, qt, item->tile);
            tile_buckets(&ts->tp, a);
            for (int64_t h = 0; h < a->H; h++) {
                float *dK = job->dk + ts->tp.j0 * a->ld + h * a->dqk;    /* [bk, dqk] */
                float *dV = job->dv + ts->tp.j0 * a->ld + h * a->dv;     /* [bk, dv]  */
                if (qt == item->tile)
                    for (int64_t r = 0; r < ts->tp.bk; r++) {
                        memset(dK + r * a->ld, 0, (size_t)a->dqk * sizeof *dK);
                        memset(dV + r * a->ld, 0, (size_t)a->dv * sizeof *dV);
                    }
                tile_grad(ts, job, h);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ts->tp.bk,
                            (int)a->dv, (int)ts->tp.bq, 1.0f, ts->A, (int)ts->tp.bk,
                            job->dout + ts->tp.i0 * HV + h * a->dv, (int)HV, 1.0f, dV,
                            (int)a->ld);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ts->tp.bk,
                            (int)a->dqk, (int)ts->tp.bq, 1.0f, ts->dA, (int)ts->tp.bk,
                            a->q + ts->tp.i0 * a->ld + h * a->dqk, (int)a->ld, 1.0f, dK,
                            (int)a->ld);
            }
        }
    }
    return GRM_OK;
}

/* Pass 2, chunks [b, e) of the fixed partition: chunk c takes the q-tiles c, c + C, ...
 * of the sorted list; dQ_i = sum_j dS_ij K_j, and the chunk's partial RAB gradients. */
static grm_status attn_bwd_q_chunks(void *ctx, int64_t b, int64_t e)
{
    const attn_job *job = ctx;
    const hstu_attn_args *a = job->a;
    const int64_t time_off = a->rab_pos != NULL ? a->max_len : 0;
    tile_scratch scratch;                   // on the worker stack: no allocation
    tile_scratch *ts = &scratch;
    for (int64_t ch = b; ch < e; ch++) {
        float *part = job->partial + ch * a->H * job->nrab;     /* [H, nrab] */
        memset(part, 0, (size_t)(a->H * job->nrab) * sizeof *part);
        for (int64_t it = ch; it < job->nitems; it += HSTU_RAB_CHUNKS) {
            const hstu_item *item = &job->items[it];
            for (int64_t kt = 0; kt <= item->tile; kt++) {
                tile_pair_init(&ts->tp, a, item->seq, item->tile, kt);
                tile_buckets(&ts->tp, a);
                const int64_t n = ts->tp.bq * ts->tp.bk;
                for (int64_t h = 0; h < a->H; h++) {
                    float *dQ = job->dq + ts->tp.i0 * a->ld + h * a->dqk;  /* [bq, dqk] */
                    if (kt == 0)
                        for (int64_t r = 0; r < ts->tp.bq; r++)
                            memset(dQ + r * a->ld, 0, (size_t)a->dqk * sizeof *dQ);
                    tile_grad(ts, job, h);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ts->tp.bq,
                                (int)a->dqk, (int)ts->tp.bk, 1.0f, ts->dA, (int)ts->tp.bk,
                                a->k + ts->tp.j0 * a->ld + h * a->dqk, (int)a->ld, 1.0f, dQ,
                                (int)a->ld);
                    float *ph = part + h * job->nrab;
                    if (a->rab_pos != NULL)
                        for (int64_t x = 0; x < n; x++)
                            if (ts->tp.pos[x] >= 0)
                                ph[ts->tp.pos[x]] += ts->dA[x];
                    if (a->rab_time != NULL && a->times != NULL)
                        for (int64_t x = 0; x < n; x++)
                            if (ts->tp.pos[x] >= 0)
                                ph[time_off + ts->tp.tb[x]] += ts->dA[x];
                }
            }
        }
    }
    return GRM_OK;
}

grm_status hstu_attn_bwd_cpu(float *dq, float *dk, float *dv, float *d_rab_pos,
                             float *d_rab_time, const float *dout, const hstu_attn_args *a,
                             void *ws)
{
    const int64_t N = a->offsets[a->nseq];
    hstu_item *items = ws;
    const int has_time = a->rab_time != NULL && a->times != NULL;
    attn_job job = { .a = a, .dq = dq, .dk = dk, .dv = dv, .dout = dout };
    job.nrab = (a->rab_pos != NULL ? a->max_len : 0) + (has_time ? a->nbuckets : 0);
    job.partial = (float *)(items + 2 * max_items(N, a->nseq));

    job.items = items;
    job.nitems = build_items(items, a, 1);
    grm_status st = a->host->parallel_for(job.nitems, 1, attn_bwd_kv_items, &job);
    if (st != GRM_OK)
        return st;

    job.items = items + max_items(N, a->nseq);
    job.nitems = build_items(items + max_items(N, a->nseq), a, 0);
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
    "cpu", 1, hstu_linear_fwd_cpu, hstu_linear_bwd_cpu, hstu_attn_fwd_cpu, hstu_attn_bwd_cpu
};

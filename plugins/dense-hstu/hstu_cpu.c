/* plugins/dense-hstu/hstu_cpu.c - the fast CPU attention of dense-hstu (its linear layers
 * are dense-mlp's linear.h, the backend's GEMMs on the host's thread pool). The attention
 * is fused and tiled as FlashAttention (MTGRBoost §5.2): a q-tile meets the k-tiles at or
 * below the causal diagonal only (tiles above it are skipped, and so is the masked half of
 * a diagonal tile), the scores of one HSTU_TILE x HSTU_TILE tile live on the stack, and
 * backward recomputes them, so no O(L^2) buffer ever exists. The tile products are one
 * register-blocked kernel (tile_madd). Mirrors hstu_ref.c (hstu_attn_fwd_ref,
 * hstu_attn_bwd_ref); tests/test-dense-hstu.c compares the two at rtol 1e-4. Callers keep
 * sizes within int. */
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
 * time_bucket_row's search. */
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

/* ---- attention: the tile products ---- */

/* The six products of a tile pair (S = Q K^T, O += A V, dA = dO V^T, dQ += dS K,
 * dV += A^T dO, dK += dS^T Q) are at most 64 x 64 x d. Through cblas_sgemm each paid
 * OpenBLAS's packing and dispatch, which at L = 50 and d = 32 (ml100k-hstu's layer) cost
 * more than the arithmetic: the attention ran at 8 GFLOP/s on a core that does 40. Every
 * one of them is "rows of C (+)= sum over k of a scalar times a contiguous row of B", so one
 * register-blocked kernel does all six: two rows of C by 32 columns held in eight 8-float
 * vectors, B's row loaded once for both rows (the outer-product form of a GEMM micro-kernel,
 * Goto and van de Geijn 2008 §4). Q K^T and dO V^T read B transposed, so K's and V's tile
 * is first copied to [d][bk] (tile_transpose), 64 of d at a time. Each element sums over k
 * in ascending order, so results do not depend on the thread count (HSTU_GEMM_CLONES: the
 * FMA clones differ from the baseline one in the last bits). */
typedef float hv8 __attribute__((vector_size(32)));

/* Loads and stores through memcpy (unaligned, no aliasing issue), as statements: a helper
 * that returned an hv8 would change its ABI between the clones (-Wpsabi). */
#define HV8_LD(v, p) memcpy(&(v), (p), sizeof(hv8))
#define HV8_ST(p, v) memcpy((p), &(v), sizeof(hv8))

/* Which part of a diagonal tile pair (q-tile = k-tile: row r of Q meets keys j <= r only)
 * a product computes. Above the diagonal every A and dS entry is 0, so the products skip
 * it: at L <= 64 (one tile a sequence, ml100k-hstu's layer) that is half of them. */
enum tri {
    TRI_NONE,           /* the whole tile */
    TRI_K_LE_ROW,       /* row r sums over k <= r (O += A V, dQ += dS K) */
    TRI_K_GE_ROW,       /* row r sums over k >= r (dV += A^T dO, dK += dS^T Q) */
    TRI_W_LE_ROW,       /* row r's columns c <= r, rounded up to a multiple of 8 (S = Q K^T,
                         * dA = dO V^T); the others are set to 0 when accumulate is 0 */
};

/* The sums [k0, k1) and columns [0, wr) of the block of m rows from row r under tri (the
 * bounds of its last row: the others' extra terms are the zeros above the diagonal).
 * Columns are rounded up to whole vectors: the extra ones are masked entries, set to their
 * dot products, which the caller multiplies by 0. */
static inline void tri_bounds(enum tri tri, int64_t r, int64_t m, int64_t n, int64_t w,
                              int64_t *k0, int64_t *k1, int64_t *wr)
{
    const int64_t last = r + m, wv = (last + 7) & ~(int64_t)7;
    *k0 = tri == TRI_K_GE_ROW ? r : 0;
    *k1 = tri == TRI_K_LE_ROW && last < n ? last : n;
    *wr = tri == TRI_W_LE_ROW && wv < w ? wv : w;
}

/* Rows r in [0, rows) of C (stride ldc), columns [0, w): C_r (+)= sum_{k < n} a_r(k) B_k,
 * where a_r(k) = a[r * lar + k * lak] and B_k = b + k * ldb, restricted by tri (rows are
 * done two at a time, so a pair's bounds are those of its second row: the extra terms are
 * the zeros above the diagonal). accumulate 0 overwrites C. */
HSTU_GEMM_CLONES
static void tile_madd(float *restrict c, int64_t ldc, int64_t rows, int64_t w,
                      const float *restrict a, int64_t lar, int64_t lak,
                      const float *restrict b, int64_t ldb, int64_t n, int accumulate,
                      enum tri tri)
{
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2) {
        const float *a0 = a + r * lar, *a1 = a0 + lar;
        float *c0 = c + r * ldc, *c1 = c0 + ldc;
        int64_t k0, k1, wr;
        tri_bounds(tri, r, 2, n, w, &k0, &k1, &wr);
        int64_t x = 0;
        for (; x + 32 <= wr; x += 32) {
            // eight named accumulators: an array of them stayed on the stack
            hv8 s00 = { 0 }, s01 = { 0 }, s02 = { 0 }, s03 = { 0 };
            hv8 s10 = { 0 }, s11 = { 0 }, s12 = { 0 }, s13 = { 0 };
            if (accumulate) {
                HV8_LD(s00, c0 + x), HV8_LD(s01, c0 + x + 8);
                HV8_LD(s02, c0 + x + 16), HV8_LD(s03, c0 + x + 24);
                HV8_LD(s10, c1 + x), HV8_LD(s11, c1 + x + 8);
                HV8_LD(s12, c1 + x + 16), HV8_LD(s13, c1 + x + 24);
            }
            for (int64_t k = k0; k < k1; k++) {
                const float *bk = b + k * ldb + x;
                const float f0 = a0[k * lak], f1 = a1[k * lak];
                hv8 v0, v1, v2, v3;
                HV8_LD(v0, bk), HV8_LD(v1, bk + 8), HV8_LD(v2, bk + 16), HV8_LD(v3, bk + 24);
                s00 += f0 * v0, s01 += f0 * v1, s02 += f0 * v2, s03 += f0 * v3;
                s10 += f1 * v0, s11 += f1 * v1, s12 += f1 * v2, s13 += f1 * v3;
            }
            HV8_ST(c0 + x, s00), HV8_ST(c0 + x + 8, s01);
            HV8_ST(c0 + x + 16, s02), HV8_ST(c0 + x + 24, s03);
            HV8_ST(c1 + x, s10), HV8_ST(c1 + x + 8, s11);
            HV8_ST(c1 + x + 16, s12), HV8_ST(c1 + x + 24, s13);
        }
        // Without accumulation the last columns go as one vector ending at wr: it
        // recomputes a few columns with the same sums in the same order (so the same
        // values), where a scalar tail of 2 of 50 columns cost a quarter of the tile.
        for (; x + 8 <= wr || (x < wr && !accumulate && wr >= 8); x += 8) {
            const int64_t xs = x + 8 <= wr ? x : wr - 8;
            hv8 s0 = { 0 }, s1 = { 0 };
            if (accumulate)
                HV8_LD(s0, c0 + xs), HV8_LD(s1, c1 + xs);
            for (int64_t k = k0; k < k1; k++) {
                hv8 v;
                HV8_LD(v, b + k * ldb + xs);
                s0 += a0[k * lak] * v;
                s1 += a1[k * lak] * v;
            }
            HV8_ST(c0 + xs, s0);
            HV8_ST(c1 + xs, s1);
        }
        for (; x < wr; x++) {
            float s0 = accumulate ? c0[x] : 0.0f, s1 = accumulate ? c1[x] : 0.0f;
            for (int64_t k = k0; k < k1; k++) {
                s0 += a0[k * lak] * b[k * ldb + x];
                s1 += a1[k * lak] * b[k * ldb + x];
            }
            c0[x] = s0;
            c1[x] = s1;
        }
        if (!accumulate && wr < w) {
            memset(c0 + wr, 0, (size_t)(w - wr) * sizeof *c0);
            memset(c1 + wr, 0, (size_t)(w - wr) * sizeof *c1);
        }
    }
    for (; r < rows; r++) {
        const float *a0 = a + r * lar;
        float *c0 = c + r * ldc;
        int64_t k0, k1, wr;
        tri_bounds(tri, r, 1, n, w, &k0, &k1, &wr);
        int64_t x = 0;
        for (; x + 8 <= wr; x += 8) {
            hv8 s0 = { 0 };
            if (accumulate)
                HV8_LD(s0, c0 + x);
            for (int64_t k = k0; k < k1; k++) {
                hv8 v;
                HV8_LD(v, b + k * ldb + x);
                s0 += a0[k * lak] * v;
            }
            HV8_ST(c0 + x, s0);
        }
        for (; x < wr; x++) {
            float s0 = accumulate ? c0[x] : 0.0f;
            for (int64_t k = k0; k < k1; k++)
                s0 += a0[k * lak] * b[k * ldb + x];
            c0[x] = s0;
        }
        if (!accumulate && wr < w)
            memset(c0 + wr, 0, (size_t)(w - wr) * sizeof *c0);
    }
}

/* t [d][rows] = columns [d0, d0 + d) of rows [0, rows) of x (stride ldx). 8 x 8 blocks go
 * through registers: unpack, shuffle and a 128-bit lane swap, 24 shuffles a block (the
 * usual AVX transpose); element by element the strided stores were 11% of ml100k-hstu's
 * layer time. The rest, element by element. */
typedef int hi8 __attribute__((vector_size(32)));

HSTU_VECTOR_CLONES
static void tile_transpose(float *restrict t, const float *restrict x, int64_t ldx,
                           int64_t rows, int64_t d0, int64_t d)
{
    const hi8 lo = { 0, 8, 1, 9, 4, 12, 5, 13 }, hi = { 2, 10, 3, 11, 6, 14, 7, 15 };
    const hi8 s0 = { 0, 1, 8, 9, 4, 5, 12, 13 }, s1 = { 2, 3, 10, 11, 6, 7, 14, 15 };
    const hi8 p0 = { 0, 1, 2, 3, 8, 9, 10, 11 }, p1 = { 4, 5, 6, 7, 12, 13, 14, 15 };
    const int64_t r8 = rows & ~(int64_t)7, e8 = d & ~(int64_t)7;
    for (int64_t r = 0; r < r8; r += 8)
        for (int64_t e = 0; e < e8; e += 8) {
            const float *src = x + r * ldx + d0 + e;
            hv8 a0, a1, a2, a3, a4, a5, a6, a7;
            HV8_LD(a0, src), HV8_LD(a1, src + ldx), HV8_LD(a2, src + 2 * ldx);
            HV8_LD(a3, src + 3 * ldx), HV8_LD(a4, src + 4 * ldx), HV8_LD(a5, src + 5 * ldx);
            HV8_LD(a6, src + 6 * ldx), HV8_LD(a7, src + 7 * ldx);
            const hv8 t0 = __builtin_shuffle(a0, a1, lo), t1 = __builtin_shuffle(a0, a1, hi);
            const hv8 t2 = __builtin_shuffle(a2, a3, lo), t3 = __builtin_shuffle(a2, a3, hi);
            const hv8 t4 = __builtin_shuffle(a4, a5, lo), t5 = __builtin_shuffle(a4, a5, hi);
            const hv8 t6 = __builtin_shuffle(a6, a7, lo), t7 = __builtin_shuffle(a6, a7, hi);
            const hv8 u0 = __builtin_shuffle(t0, t2, s0), u1 = __builtin_shuffle(t0, t2, s1);
            const hv8 u2 = __builtin_shuffle(t1, t3, s0), u3 = __builtin_shuffle(t1, t3, s1);
            const hv8 u4 = __builtin_shuffle(t4, t6, s0), u5 = __builtin_shuffle(t4, t6, s1);
            const hv8 u6 = __builtin_shuffle(t5, t7, s0), u7 = __builtin_shuffle(t5, t7, s1);
            const hv8 c0 = __builtin_shuffle(u0, u4, p0), c1 = __builtin_shuffle(u1, u5, p0);
            const hv8 c2 = __builtin_shuffle(u2, u6, p0), c3 = __builtin_shuffle(u3, u7, p0);
            const hv8 c4 = __builtin_shuffle(u0, u4, p1), c5 = __builtin_shuffle(u1, u5, p1);
            const hv8 c6 = __builtin_shuffle(u2, u6, p1), c7 = __builtin_shuffle(u3, u7, p1);
            float *dst = t + e * rows + r;
            HV8_ST(dst, c0), HV8_ST(dst + rows, c1), HV8_ST(dst + 2 * rows, c2);
            HV8_ST(dst + 3 * rows, c3), HV8_ST(dst + 4 * rows, c4), HV8_ST(dst + 5 * rows, c5);
            HV8_ST(dst + 6 * rows, c6), HV8_ST(dst + 7 * rows, c7);
        }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = r < r8 ? e8 : 0; e < d; e++)
            t[e * rows + r] = x[r * ldx + d0 + e];
}

/* C [bq, bk] = X Y^T of X [bq, d] (stride ldx) and Y [bk, d] (stride ldy), through the
 * transposed copy t [HSTU_TILE * HSTU_TILE], HSTU_TILE of d at a time; tri: TRI_NONE or
 * TRI_W_LE_ROW. */
static void tile_abt(float *c, const float *x, int64_t ldx, const float *y, int64_t ldy,
                     int64_t bq, int64_t bk, int64_t d, float *t, enum tri tri)
{
    for (int64_t d0 = 0; d0 < d; d0 += HSTU_TILE) {
        const int64_t dc = d - d0 < HSTU_TILE ? d - d0 : HSTU_TILE;
        tile_transpose(t, y, ldy, bk, d0, dc);
        tile_madd(c, bk, bq, bk, x + d0, ldx, 1, t, bk, dc, d0 > 0, tri);
    }
}

/* ---- attention: one tile pair ---- */

/* The shape and bias of tile pair (q-tile rows [i0, i0 + bq), k-tile rows [j0, j0 + bk))
 * of the sequence starting at row o, shared by all heads. */
typedef struct tile_pair {
    int64_t o, i0, j0, bq, bk;
    double c;                               /* 1/n */
    int diag;                               /* q-tile = k-tile: products skip j > i */
    int32_t pos[HSTU_TILE * HSTU_TILE];     /* [bq, bk] position bucket, -1: masked */
    int32_t tb[HSTU_TILE * HSTU_TILE];      /* [bq, bk] time bucket (times set) */
} tile_pair;

/* Columns [0, tile_cols(tp, r)) of row r of a tile pair are at or below the diagonal (key j
 * <= query i); the rest are masked. */
static inline int64_t tile_cols(const tile_pair *tp, int64_t r)
{
    const int64_t n = tp->i0 + r - tp->j0 + 1;
    return n < 0 ? 0 : n < tp->bk ? n : tp->bk;
}

/* The buckets tb [n] of dt = ti - tj[c]: the number of b >= 1 with thr[b] <= |dt| (thr is
 * nondecreasing). |dt| in [2^k, 2^(k+1)) spans at most ceil(ln 2 / 0.301) + 1 = 4
 * buckets, so the search starts at the bucket of 2^k and steps at most 3 times, where a
 * binary search over 32 buckets takes 5. Since thr is nondecreasing, the steps are the
 * count of the next three thresholds at or below |dt|: three independent loads, no
 * branch (the branchy search was 6% of a B 128, L 50 layer, the dependent one 4%). */
HSTU_VECTOR_CLONES
static void time_bucket_row(int32_t *restrict tb, int64_t ti, const int64_t *restrict tj,
                            int64_t n, const int64_t *restrict thr, const uint8_t *restrict tlo,
                            int64_t nbuckets)
{
    const int64_t last = nbuckets - 1;
    const uint64_t top = (uint64_t)thr[last];
    for (int64_t c = 0; c < n; c++) {
        const int64_t dt = ti - tj[c];
        const uint64_t x = dt < 0 ? (uint64_t)0 - (uint64_t)dt : (uint64_t)dt;
        const int64_t b = x < 2 ? 0 : tlo[63 - __builtin_clzll(x | 1)];
        const int64_t n1 = b + 1 < last ? b + 1 : last, n2 = b + 2 < last ? b + 2 : last,
                      n3 = b + 3 < last ? b + 3 : last;
        const int64_t steps = ((uint64_t)thr[n1] <= x) + ((uint64_t)thr[n2] <= x) +
                              ((uint64_t)thr[n3] <= x);
        tb[c] = (int32_t)(x >= top ? last : b + steps);
    }
}

/* Fill pos (and tb) of a tile pair: bucket indices are head-independent, so they are
 * computed once per pair and reused by every head. tlo: time_bucket_starts. */
static void tile_buckets(tile_pair *tp, const grm_hstu_attn_args *a, const uint8_t *tlo)
{
    for (int64_t r = 0; r < tp->bq; r++) {
        const int64_t i = tp->i0 + r, nc = tile_cols(tp, r);
        int32_t *pos = tp->pos + r * tp->bk, *tb = tp->tb + r * tp->bk;
        for (int64_t cc = 0; cc < nc; cc++)
            pos[cc] = (int32_t)hstu_pos_bucket(i - tp->o, tp->j0 + cc - tp->o, a->max_len);
        for (int64_t cc = nc; cc < tp->bk; cc++)
            pos[cc] = -1;
        if (a->times != NULL) {
            time_bucket_row(tb, a->times[i], a->times + tp->j0, nc, a->time_thr, tlo,
                            a->nbuckets);
            for (int64_t cc = nc; cc < tp->bk; cc++)
                tb[cc] = 0;
        }
    }
}

/* S [bq, bk] = Q_i K_j^T + bias of head h (eq. 2 before the SiLU); T: tile_abt's. The
 * bias goes on the unmasked entries only (the masked ones are multiplied by 0 later). */
static void tile_scores(float *S, float *T, const tile_pair *tp, const grm_hstu_attn_args *a,
                        int64_t h)
{
    tile_abt(S, a->q + tp->i0 * a->ld + h * a->dqk, a->ld, a->k + tp->j0 * a->ld + h * a->dqk,
             a->ld, tp->bq, tp->bk, a->dqk, T, tp->diag ? TRI_W_LE_ROW : TRI_NONE);
    const float *rp = a->rab_pos != NULL ? a->rab_pos + h * a->max_len : NULL;
    const float *rt = a->rab_time != NULL && a->times != NULL
                      ? a->rab_time + h * a->nbuckets : NULL;
    for (int64_t r = 0; r < tp->bq; r++) {
        const int64_t nc = tile_cols(tp, r), e0 = r * tp->bk;
        if (rp != NULL)
            for (int64_t e = e0; e < e0 + nc; e++)
                S[e] += rp[tp->pos[e]];
        if (rt != NULL)
            for (int64_t e = e0; e < e0 + nc; e++)
                S[e] += rt[tp->tb[e]];
    }
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
    tp->diag = qt == kt;
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

/* Scratch of one tile pair (about 96 KB), on the worker's stack: the kernels allocate
 * nothing, and the scratch does not grow with L. */
typedef struct tile_scratch {
    tile_pair tp;
    float S[HSTU_TILE * HSTU_TILE];
    float A[HSTU_TILE * HSTU_TILE];
    float dA[HSTU_TILE * HSTU_TILE];
    float T[HSTU_TILE * HSTU_TILE];         /* tile_abt's transposed copy */
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
                tile_scores(ts->S, ts->T, &ts->tp, a, h);
                tile_silu(ts->A, NULL, ts->S, &ts->tp);
                // the first k-tile writes O (every row has a term), the others add
                tile_madd(O, HV, ts->tp.bq, a->dv, ts->A, ts->tp.bk, 1,
                          a->v + ts->tp.j0 * a->ld + h * a->dv, a->ld, ts->tp.bk, kt > 0,
                          ts->tp.diag ? TRI_K_LE_ROW : TRI_NONE);
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
    tile_scores(ts->S, ts->T, &ts->tp, a, h);
    tile_abt(ts->dA, job->dout + ts->tp.i0 * HV + h * a->dv, HV,
             a->v + ts->tp.j0 * a->ld + h * a->dv, a->ld, ts->tp.bq, ts->tp.bk, a->dv, ts->T,
             ts->tp.diag ? TRI_W_LE_ROW : TRI_NONE);
    tile_silu(ts->A, ts->dA, ts->S, &ts->tp);
}

/* Accumulate the RAB gradients of tile pair tp, head h (dS in ts->dA) into ph [nrab]: the
 * unmasked entries only. */
static void tile_rab_grad(float *ph, const tile_scratch *ts, const attn_job *job)
{
    const grm_hstu_attn_args *a = job->a;
    const tile_pair *tp = &ts->tp;
    const int has_time = a->rab_time != NULL && a->times != NULL;
    float *pt = ph + (a->rab_pos != NULL ? a->max_len : 0);
    for (int64_t r = 0; r < tp->bq; r++) {
        const int64_t nc = tile_cols(tp, r), e0 = r * tp->bk;
        if (a->rab_pos != NULL)
            for (int64_t e = e0; e < e0 + nc; e++)
                ph[tp->pos[e]] += ts->dA[e];
        if (has_time)
            for (int64_t e = e0; e < e0 + nc; e++)
                pt[tp->tb[e]] += ts->dA[e];
    }
}

/* dQ_i (+)= dS_ij K_j of tile pair tp, head h (dS in ts->dA). The first k-tile of a
 * q-tile (kt 0) writes dQ_i instead of adding: every row has a term, and a sum started
 * from a register 0 is the one started from a stored 0, bit for bit (zeroing the rows
 * first was 4% of a B 128, L 50 layer). */
static void tile_dq(const tile_scratch *ts, const attn_job *job, int64_t h, int first)
{
    const grm_hstu_attn_args *a = job->a;
    tile_madd(job->dq + ts->tp.i0 * a->ld + h * a->dqk, a->ld, ts->tp.bq, a->dqk, ts->dA,
              ts->tp.bk, 1, a->k + ts->tp.j0 * a->ld + h * a->dqk, a->ld, ts->tp.bk, !first,
              ts->tp.diag ? TRI_K_LE_ROW : TRI_NONE);
}

/* dV_j (+)= A_ij^T dO_i and dK_j (+)= dS_ij^T Q_i of tile pair tp, head h; the first q-tile
 * of a k-tile (the diagonal one: q-tiles ascend from it) writes them. */
static void tile_dkv(const tile_scratch *ts, const attn_job *job, int64_t h, int first)
{
    const grm_hstu_attn_args *a = job->a;
    const int64_t HV = a->H * a->dv;
    const enum tri tri = ts->tp.diag ? TRI_K_GE_ROW : TRI_NONE;
    tile_madd(job->dv + ts->tp.j0 * a->ld + h * a->dv, a->ld, ts->tp.bk, a->dv, ts->A, 1,
              ts->tp.bk, job->dout + ts->tp.i0 * HV + h * a->dv, HV, ts->tp.bq, !first, tri);
    tile_madd(job->dk + ts->tp.j0 * a->ld + h * a->dqk, a->ld, ts->tp.bk, a->dqk, ts->dA, 1,
              ts->tp.bk, a->q + ts->tp.i0 * a->ld + h * a->dqk, a->ld, ts->tp.bq, !first, tri);
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
                tile_grad(ts, job, h);
                tile_dkv(ts, job, h, qt == item->tile);
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
                tile_grad(ts, job, h);
                tile_dq(ts, job, h, kt == 0);
                tile_dkv(ts, job, h, qt == kt);
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
                    tile_grad(ts, job, h);
                    tile_dq(ts, job, h, kt == 0);
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

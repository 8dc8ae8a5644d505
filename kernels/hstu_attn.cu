// kernels/hstu_attn.cu - fused jagged HSTU pointwise attention with relative attention bias,
// forward and backward, with the semantics of grm_hstu_attn_args (sdk/include/grm/backend.h)
// and the types of grm_hstu_attn_fwd_fn / _bwd_fn / _ws_fn. MTGRBoost §2 eq. 1-3 and §5.2
// "operator fusion" (tiles in shared memory, causal tiles skipped); TurboGR §4.1.1 (jagged
// sequences, no padding) and App. A (position and bucketized time bias). The reference it
// mirrors: plugins/dense-hstu/hstu_ref.c: hstu_attn_fwd_ref, hstu_attn_bwd_ref.
// Per sequence b, head h, rows i, j of b (local indices, j <= i < L_b):
//   s_ij = q_i . k_j + rab_pos[h, min(i - j, max_len - 1)] + rab_time[h, tb(|t_i - t_j|)]
//   a_ij = SiLU(s_ij) c,   out_i = sum_j a_ij v_j,   c = 1 / max_len or 1 / L_b (norm)
// with tb(dt) = the number of b >= 1 with time_thr[b] <= dt. Backward (sigma the logistic):
//   ds_ij = (do_i . v_j) c sigma(s_ij) (1 + s_ij (1 - sigma(s_ij))),  dv_j = sum_i a_ij do_i,
//   dq_i = sum_j ds_ij k_j,  dk_j = sum_i ds_ij q_i,  d_rab_pos and d_rab_time += ds_ij at
//   the buckets of s_ij (accumulated: the caller zeroes them once per step).
// Layout: q, k, v, dq, dk, dv are [N, ld] views, head h at column h*dqk (q, k) or h*dv (v);
// out and dout dense [N, H*dv]; offsets [B+1]. fp32 in, out and accumulation (SIMT, no
// tensor cores). Tiles of 64 queries x 64 keys, 256 threads, each thread a 4 x 4 patch of the
// score tile; no L x L tensor in global memory; the backward recomputes the scores (one
// kernel for dk, dv and the bias gradients per key tile, one for dq per query tile), so dq,
// dk, dv need no atomics; the bias gradients are summed per block in shared memory and added
// with global atomics (their last bits depend on block order). Test: tests/test-cuda-hstu.c,
// rtol 1e-4, atol 1e-5 (bias gradients atol 1e-4: sums of up to L^2/2 terms).
#include "cuda_common.cuh"

namespace {

constexpr int kT = 64;              // tile rows (queries) and columns (keys)
constexpr int kThreads = 256;       // 16 x 16 threads, 4 x 4 score patch each
constexpr int kMaxD = 128;          // dqk, dv: 32 registers per thread per accumulated row
constexpr int kMaxBuckets = 128;    // time buckets: the thresholds live in shared memory
constexpr int64_t kMaxTiles = 65535;            // grid.z
constexpr int kStatsThreads = 256;
constexpr size_t kWsBytes = 256;    // seq_stats' two int64, padded to cudaMalloc's alignment

// Device copy of one call's arguments. rab_time and d_rab_time are NULL when times is.
struct attn_params {
    const float *q, *k, *v;         // [N, ld] views
    const float *dout;              // [N, H*Dv]
    const float *rab_pos;           // [H, max_len] or NULL
    const float *rab_time;          // [H, nb] or NULL
    const int64_t *offsets;         // [B+1]
    const int64_t *times;           // [N] or NULL
    const int64_t *thr;             // [nb] nondecreasing, thr[0] = 0
    float *out;                     // [N, H*Dv]
    float *dq, *dk, *dv;            // [N, ld] views
    float *d_rab_pos, *d_rab_time;  // accumulated into, or NULL
    int64_t ld, max_len;
    int32_t H, D, Dv, nb, norm, ntiles;
};

// Load rows [row0, row0 + kT) of a [L, w] slice with row stride lds into s ([kT, w + 1]:
// the +1 keeps dot_patch's column walks off a single bank); rows past L are zero.
__device__ void load_tile(float *s, const float *src, int64_t lds, int64_t row0, int64_t L,
                          int w)
{
    const int ld = w + 1;
    for (int e = threadIdx.x; e < kT * w; e += kThreads) {
        const int r = e / w, c = e % w;
        const int64_t t = row0 + r;
        s[r * ld + c] = t < L ? src[t * lds + c] : 0.0f;
    }
}

__device__ void load_thr(int64_t *s, const int64_t *thr, int n)
{
    for (int e = threadIdx.x; e < n; e += kThreads) s[e] = thr[e];
}

// acc[r][c] = sum_d X[ty + 16 r][d] * Y[tx + 16 c][d] for the thread's 4 x 4 patch.
__device__ __forceinline__ void dot_patch(float (&acc)[4][4], const float *X, const float *Y,
                                          int w, int ty, int tx)
{
    const int ld = w + 1;
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] = 0.0f;
    for (int d = 0; d < w; d++) {
        float a[4], b[4];
#pragma unroll
        for (int r = 0; r < 4; r++) a[r] = X[(ty + 16 * r) * ld + d];
#pragma unroll
        for (int c = 0; c < 4; c++) b[c] = Y[(tx + 16 * c) * ld + d];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
    }
}

__device__ __forceinline__ float sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

// tb(|ti - tj|): the number of b in [1, nb) with thr[b] <= |ti - tj|, by binary search
// (thr nondecreasing). The difference is taken in uint64, exact for any two int64 times.
__device__ __forceinline__ int time_bucket(const int64_t *thr, int nb, int64_t ti, int64_t tj)
{
    const uint64_t a = ti >= tj ? (uint64_t)ti - (uint64_t)tj : (uint64_t)tj - (uint64_t)ti;
    int lo = 1, hi = nb;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if ((uint64_t)thr[mid] <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

// s_ij from the dot product: the terms in the order of hstu_ref.c's score_ref.
__device__ __forceinline__ float score(const attn_params &p, float qk, int h, int64_t rel,
                                       int tb)
{
    float s = qk;
    if (p.rab_pos != nullptr)
        s += p.rab_pos[(int64_t)h * p.max_len + (rel < p.max_len - 1 ? rel : p.max_len - 1)];
    if (p.rab_time != nullptr) s += p.rab_time[(int64_t)h * p.nb + tb];
    return s;
}

__device__ __forceinline__ float norm_scale(const attn_params &p, int64_t L)
{
    return p.norm == GRM_HSTU_NORM_LENGTH ? 1.0f / (float)L : 1.0f / (float)p.max_len;
}

// The times of the thread's 4 patch rows (or columns) of the tile at row0: 0 past L or
// without a time term.
__device__ __forceinline__ void load_times(int64_t (&t)[4], const attn_params &p, int64_t off,
                                           int64_t row0, int64_t L, int lane, int need)
{
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int64_t i = row0 + lane + 16 * r;
        t[r] = need && i < L ? p.times[off + i] : 0;
    }
}

// ---- forward: one block per (sequence, head, query tile) ----

// Sequences run along grid x (up to 2^31 - 1), heads along y, tiles along z. The forward
// and dq kernels take tiles in decreasing order, so the costliest (the most key tiles
// below the diagonal) start first and short ones fill in at the end.
__global__ void __launch_bounds__(kThreads) fwd_kernel(attn_params p)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int64_t b = blockIdx.x;
    const int h = blockIdx.y;
    const int64_t off = p.offsets[b], L = p.offsets[b + 1] - off;
    const int64_t q0 = (int64_t)(p.ntiles - 1 - (int)blockIdx.z) * kT;
    if (q0 >= L) return;
    const int D = p.D, Dv = p.Dv, nthr = p.rab_time ? p.nb : 0;
    int64_t *thr = reinterpret_cast<int64_t *>(smem);                     // [nthr]
    float *Qs = reinterpret_cast<float *>(thr + nthr), *Ks = Qs + kT * (D + 1);
    float *Vs = Ks + kT * (D + 1), *Ps = Vs + kT * (Dv + 1);              // Ps [kT, kT + 1]
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int orow = threadIdx.x / 4, ocol = threadIdx.x % 4;
    const float cn = norm_scale(p, L);
    float o[kMaxD / 4];
#pragma unroll
    for (int m = 0; m < kMaxD / 4; m++) o[m] = 0.0f;
    int64_t ti[4], tj[4];
    load_times(ti, p, off, q0, L, ty, nthr > 0);

    load_thr(thr, p.thr, nthr);
    load_tile(Qs, p.q + off * p.ld + (int64_t)h * D, p.ld, q0, L, D);
    for (int64_t k0 = 0; k0 <= q0; k0 += kT) {            // tiles above the diagonal skipped
        __syncthreads();
        load_tile(Ks, p.k + off * p.ld + (int64_t)h * D, p.ld, k0, L, D);
        load_tile(Vs, p.v + off * p.ld + (int64_t)h * Dv, p.ld, k0, L, Dv);
        load_times(tj, p, off, k0, L, tx, nthr > 0);
        __syncthreads();
        float acc[4][4];
        dot_patch(acc, Qs, Ks, D, ty, tx);
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int64_t i = q0 + ty + 16 * r, j = k0 + tx + 16 * c;
                float a = 0.0f;
                if (i < L && j <= i) {
                    const int tb = nthr ? time_bucket(thr, p.nb, ti[r], tj[c]) : 0;
                    const float s = score(p, acc[r][c], h, i - j, tb);
                    a = s * sigmoid(s) * cn;
                }
                Ps[(ty + 16 * r) * (kT + 1) + tx + 16 * c] = a;
            }
        __syncthreads();
        for (int j = 0; j < kT; j++) {
            const float a = Ps[orow * (kT + 1) + j];
#pragma unroll
            for (int m = 0; m < kMaxD / 4; m++) {
                const int c = ocol + 4 * m;
                if (c < Dv) o[m] = fmaf(a, Vs[j * (Dv + 1) + c], o[m]);
            }
        }
    }
    const int64_t i = q0 + orow;
    if (i < L) {
        float *dst = p.out + (off + i) * ((int64_t)p.H * Dv) + (int64_t)h * Dv;
#pragma unroll
        for (int m = 0; m < kMaxD / 4; m++) {
            const int c = ocol + 4 * m;
            if (c < Dv) dst[c] = o[m];
        }
    }
}

// ---- backward ----

// The weights of one tile pair into A (a_ij; NULL: not wanted) and dS (ds_ij), row stride
// lds, masked to 0. bins [2 kT - 1] (or NULL) gets ds summed per diagonal i - j of the tile;
// tbins [nb] (or NULL) per time bucket, a thread merging runs of equal buckets of its patch
// before each shared atomic (neighbouring events mostly share a bucket).
__device__ void tile_weights(const attn_params &p, const int64_t *thr, int nthr, float *A,
                             float *dS, int lds, const float *Qs, const float *Ks,
                             const float *Vs, const float *dOs, int64_t q0, int64_t k0,
                             int64_t L, int h, float cn, const int64_t (&ti)[4],
                             const int64_t (&tj)[4], float *bins, float *tbins)
{
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    float qk[4][4], dp[4][4];
    dot_patch(qk, Qs, Ks, p.D, ty, tx);
    dot_patch(dp, dOs, Vs, p.Dv, ty, tx);
    int run_b = -1;
    float run = 0.0f;
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int li = ty + 16 * r, lj = tx + 16 * c;
            const int64_t i = q0 + li, j = k0 + lj;
            float w = 0.0f, ds = 0.0f;
            if (i < L && j <= i) {
                const int tb = nthr ? time_bucket(thr, p.nb, ti[r], tj[c]) : 0;
                const float s = score(p, qk[r][c], h, i - j, tb);
                const float sg = sigmoid(s);
                w = s * sg * cn;
                ds = dp[r][c] * cn * sg * (1.0f + s * (1.0f - sg));
                if (bins != nullptr) atomicAdd(bins + (li - lj + kT - 1), ds);
                if (tbins != nullptr) {
                    if (tb != run_b) {
                        if (run_b >= 0) atomicAdd(tbins + run_b, run);
                        run_b = tb;
                        run = 0.0f;
                    }
                    run += ds;
                }
            }
            if (A != nullptr) A[li * lds + lj] = w;
            dS[li * lds + lj] = ds;
        }
    if (run_b >= 0) atomicAdd(tbins + run_b, run);
}

// Add one tile pair's diagonal sums bins [2 kT - 1] (diagonal e is i - j = dq0 + e - kT + 1,
// dq0 = q0 - k0) to d_rab_pos. The diagonals at or past max_len - 1 share the last bucket:
// they are summed per warp into bins[2 kT - 1], the block's tail, which goes out with one
// global atomic at the end of the block instead of up to 127 per tile pair on one address.
__device__ void flush_diagonals(const attn_params &p, float *bins, int64_t dq0, int h)
{
    const int e = threadIdx.x;
    float tail = 0.0f;
    if (e < 2 * kT - 1) {
        const float s = bins[e];
        const int64_t rel = dq0 + e - (kT - 1);
        if (rel >= p.max_len - 1) tail = s;
        else if (rel >= 0 && s != 0.0f)
            atomicAdd(p.d_rab_pos + (int64_t)h * p.max_len + rel, s);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tail += __shfl_down_sync(0xffffffffu, tail, o);
    if ((threadIdx.x & 31) == 0 && tail != 0.0f) atomicAdd(bins + 2 * kT - 1, tail);
}

// dk, dv and the bias gradients: one block per (sequence, head, key tile), walking the
// query tiles at or below the diagonal. Key tiles in increasing order: tile 0 is the
// costliest here.
__global__ void __launch_bounds__(kThreads) bwd_kv_kernel(attn_params p)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int64_t b = blockIdx.x;
    const int h = blockIdx.y;
    const int64_t off = p.offsets[b], L = p.offsets[b + 1] - off;
    const int64_t k0 = (int64_t)blockIdx.z * kT;
    if (k0 >= L) return;
    const int D = p.D, Dv = p.Dv;
    const int nthr = (p.rab_time || p.d_rab_time) ? p.nb : 0, ntb = p.d_rab_time ? p.nb : 0;
    int64_t *thr = reinterpret_cast<int64_t *>(smem);                     // [nthr]
    float *tbins = reinterpret_cast<float *>(thr + nthr);                  // [ntb]
    float *Ks = tbins + ntb, *Vs = Ks + kT * (D + 1), *Qs = Vs + kT * (Dv + 1);
    float *dOs = Qs + kT * (D + 1);
    // A and dS are read along their rows (neighbouring threads, neighbouring keys): they
    // need no padding, which keeps dqk = dv = 128 with 128 time buckets within sm_80's 163 KB
    float *A = dOs + kT * (Dv + 1), *dS = A + kT * kT;
    float *bins = p.d_rab_pos ? dS + kT * kT : nullptr;   // [2 kT]: diagonals, then the tail
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int jrow = threadIdx.x / 4, jcol = threadIdx.x % 4;
    const float cn = norm_scale(p, L);
    const int64_t HV = (int64_t)p.H * Dv;
    float dk[kMaxD / 4], dv[kMaxD / 4];
#pragma unroll
    for (int m = 0; m < kMaxD / 4; m++) dk[m] = dv[m] = 0.0f;
    int64_t ti[4], tj[4];
    load_times(tj, p, off, k0, L, tx, nthr > 0);

    load_thr(thr, p.thr, nthr);
    for (int e = threadIdx.x; e < ntb; e += kThreads) tbins[e] = 0.0f;
    if (bins != nullptr && threadIdx.x == 0) bins[2 * kT - 1] = 0.0f;
    load_tile(Ks, p.k + off * p.ld + (int64_t)h * D, p.ld, k0, L, D);
    load_tile(Vs, p.v + off * p.ld + (int64_t)h * Dv, p.ld, k0, L, Dv);
    for (int64_t q0 = k0; q0 < L; q0 += kT) {
        __syncthreads();
        load_tile(Qs, p.q + off * p.ld + (int64_t)h * D, p.ld, q0, L, D);
        load_tile(dOs, p.dout + off * HV + (int64_t)h * Dv, HV, q0, L, Dv);
        if (bins != nullptr)
            for (int e = threadIdx.x; e < 2 * kT - 1; e += kThreads) bins[e] = 0.0f;
        load_times(ti, p, off, q0, L, ty, nthr > 0);
        __syncthreads();
        tile_weights(p, thr, nthr, A, dS, kT, Qs, Ks, Vs, dOs, q0, k0, L, h, cn, ti, tj, bins,
                     ntb ? tbins : nullptr);
        __syncthreads();
        for (int i = 0; i < kT; i++) {
            const float w = A[i * kT + jrow], ds = dS[i * kT + jrow];
#pragma unroll
            for (int m = 0; m < kMaxD / 4; m++) {
                const int c = jcol + 4 * m;
                if (c < Dv) dv[m] = fmaf(w, dOs[i * (Dv + 1) + c], dv[m]);
                if (c < D) dk[m] = fmaf(ds, Qs[i * (D + 1) + c], dk[m]);
            }
        }
        if (bins != nullptr) flush_diagonals(p, bins, q0 - k0, h);
    }
    __syncthreads();
    if (bins != nullptr && threadIdx.x == 0 && bins[2 * kT - 1] != 0.0f)
        atomicAdd(p.d_rab_pos + (int64_t)h * p.max_len + p.max_len - 1, bins[2 * kT - 1]);
    for (int e = threadIdx.x; e < ntb; e += kThreads)
        if (tbins[e] != 0.0f) atomicAdd(p.d_rab_time + (int64_t)h * p.nb + e, tbins[e]);
    const int64_t j = k0 + jrow;
    if (j < L) {
        float *dkp = p.dk + (off + j) * p.ld + (int64_t)h * D;
        float *dvp = p.dv + (off + j) * p.ld + (int64_t)h * Dv;
#pragma unroll
        for (int m = 0; m < kMaxD / 4; m++) {
            const int c = jcol + 4 * m;
            if (c < D) dkp[c] = dk[m];
            if (c < Dv) dvp[c] = dv[m];
        }
    }
}

// dq: one block per (sequence, head, query tile), tiles in decreasing order as forward.
__global__ void __launch_bounds__(kThreads) bwd_q_kernel(attn_params p)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int64_t b = blockIdx.x;
    const int h = blockIdx.y;
    const int64_t off = p.offsets[b], L = p.offsets[b + 1] - off;
    const int64_t q0 = (int64_t)(p.ntiles - 1 - (int)blockIdx.z) * kT;
    if (q0 >= L) return;
    const int D = p.D, Dv = p.Dv, nthr = p.rab_time ? p.nb : 0;
    int64_t *thr = reinterpret_cast<int64_t *>(smem);                     // [nthr]
    float *Qs = reinterpret_cast<float *>(thr + nthr), *dOs = Qs + kT * (D + 1);
    float *Ks = dOs + kT * (Dv + 1), *Vs = Ks + kT * (D + 1);
    float *dS = Vs + kT * (Dv + 1);                                        // [kT, kT + 1]
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int irow = threadIdx.x / 4, icol = threadIdx.x % 4;
    const float cn = norm_scale(p, L);
    const int64_t HV = (int64_t)p.H * Dv;
    float dq[kMaxD / 4];
#pragma unroll
    for (int m = 0; m < kMaxD / 4; m++) dq[m] = 0.0f;
    int64_t ti[4], tj[4];
    load_times(ti, p, off, q0, L, ty, nthr > 0);

    load_thr(thr, p.thr, nthr);
    load_tile(Qs, p.q + off * p.ld + (int64_t)h * D, p.ld, q0, L, D);
    load_tile(dOs, p.dout + off * HV + (int64_t)h * Dv, HV, q0, L, Dv);
    for (int64_t k0 = 0; k0 <= q0; k0 += kT) {
        __syncthreads();
        load_tile(Ks, p.k + off * p.ld + (int64_t)h * D, p.ld, k0, L, D);
        load_tile(Vs, p.v + off * p.ld + (int64_t)h * Dv, p.ld, k0, L, Dv);
        load_times(tj, p, off, k0, L, tx, nthr > 0);
        __syncthreads();
        tile_weights(p, thr, nthr, nullptr, dS, kT + 1, Qs, Ks, Vs, dOs, q0, k0, L, h, cn, ti,
                     tj, nullptr, nullptr);
        __syncthreads();
        for (int j = 0; j < kT; j++) {
            const float ds = dS[irow * (kT + 1) + j];
#pragma unroll
            for (int m = 0; m < kMaxD / 4; m++) {
                const int c = icol + 4 * m;
                if (c < D) dq[m] = fmaf(ds, Ks[j * (D + 1) + c], dq[m]);
            }
        }
    }
    const int64_t i = q0 + irow;
    if (i < L) {
        float *dst = p.dq + (off + i) * p.ld + (int64_t)h * D;
#pragma unroll
        for (int m = 0; m < kMaxD / 4; m++) {
            const int c = icol + 4 * m;
            if (c < D) dst[c] = dq[m];
        }
    }
}

// ---- host side ----

// out [2]: the longest sequence, and the first index k with offsets[0] != 0 (k = 0) or
// offsets[k] < offsets[k - 1], else -1. One block: B is at most a few thousand sequences.
__global__ void __launch_bounds__(kStatsThreads) stats_kernel(const int64_t *offsets,
                                                              int64_t nseq, int64_t *out)
{
    __shared__ int64_t smax[kStatsThreads], sbad[kStatsThreads];
    int64_t mx = 0, bad = INT64_MAX;
    if (threadIdx.x == 0 && offsets[0] != 0) bad = 0;
    for (int64_t b = threadIdx.x; b < nseq; b += kStatsThreads) {
        const int64_t len = offsets[b + 1] - offsets[b];
        if (len < 0 && b + 1 < bad) bad = b + 1;
        if (len > mx) mx = len;
    }
    smax[threadIdx.x] = mx;
    sbad[threadIdx.x] = bad;
    __syncthreads();
    for (int s = kStatsThreads / 2; s > 0; s >>= 1) {
        const int t = threadIdx.x;
        if (t < s) {
            if (smax[t + s] > smax[t]) smax[t] = smax[t + s];
            if (sbad[t + s] < sbad[t]) sbad[t] = sbad[t + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[0] = smax[0];
        out[1] = sbad[0] == INT64_MAX ? -1 : sbad[0];
    }
}

// The number of query (or key) tiles of the longest sequence into *ntiles. The grid must
// be sized on the host and grm_hstu_attn_args holds device offsets only (no row count, no
// longest length), so a one-block reduction finds the longest sequence, and its 16 bytes
// come back through ws: one stream synchronisation per call. The same pass refuses broken
// offsets, which would otherwise index out of bounds.
// TODO(issue-19): a device-side tile list walked by a persistent grid would keep the call
// asynchronous.
grm_status seq_tiles(const char *fn, const grm_hstu_attn_args *a, void *ws, cudaStream_t st,
                     int *ntiles)
{
    int64_t *dws = static_cast<int64_t *>(ws);
    stats_kernel<<<1, kStatsThreads, 0, st>>>(a->offsets, a->nseq, dws);
    GRM_CUDA_CHECK_LAUNCH();
    int64_t h[2];
    GRM_CUDA_CHECK(cudaMemcpyAsync(h, dws, sizeof h, cudaMemcpyDeviceToHost, st));
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    if (h[1] >= 0)
        return grm_cuda__errorf(GRM_EINVAL, "%s: offsets[%lld] breaks the row ranges "
                                "(offsets[0] = 0, nondecreasing); pass the [nseq+1] prefix "
                                "sums of the sequence lengths", fn, (long long)h[1]);
    const int64_t tiles = (h[0] + kT - 1) / kT;
    if (tiles > kMaxTiles)
        return grm_cuda__errorf(GRM_EINVAL, "%s: a sequence of %lld rows, longer than the "
                                "%lld rows (%lld tiles of %d) the grid holds; cut the "
                                "sequences or use device = cpu", fn, (long long)h[0],
                                (long long)(kMaxTiles * kT), (long long)kMaxTiles, kT);
    *ntiles = (int)tiles;
    return GRM_OK;
}

// Arguments both directions share. time_grad: the backward accumulates d_rab_time.
grm_status check_args(const char *fn, const grm_hstu_attn_args *a, int time_grad)
{
    if (a == nullptr) return grm_cuda__errorf(GRM_EINVAL, "%s: args is NULL", fn);
    if (a->nseq < 0 || a->nseq > INT32_MAX)
        return grm_cuda__errorf(GRM_EINVAL, "%s: nseq %lld outside [0, %d] (grid x)", fn,
                                (long long)a->nseq, INT32_MAX);
    if (a->H < 1 || a->H > 65535)
        return grm_cuda__errorf(GRM_EINVAL, "%s: H %lld outside [1, 65535] (grid y)", fn,
                                (long long)a->H);
    if (a->dqk < 1 || a->dqk > kMaxD || a->dv < 1 || a->dv > kMaxD)
        return grm_cuda__errorf(GRM_EINVAL, "%s: dqk %lld, dv %lld: each must lie in [1, %d] "
                                "(a thread holds a 32nd of a head's row in registers); use "
                                "narrower heads or device = cpu", fn, (long long)a->dqk,
                                (long long)a->dv, kMaxD);
    const int64_t wide = a->H * (a->dqk > a->dv ? a->dqk : a->dv);
    if (a->ld < wide)
        return grm_cuda__errorf(GRM_EINVAL, "%s: ld %lld < H * max(dqk, dv) = %lld; the rows "
                                "of the q, k, v views would overlap", fn, (long long)a->ld,
                                (long long)wide);
    if (a->max_len < 1)
        return grm_cuda__errorf(GRM_EINVAL, "%s: max_len %lld < 1", fn,
                                (long long)a->max_len);
    if (a->norm != GRM_HSTU_NORM_MAX_LEN && a->norm != GRM_HSTU_NORM_LENGTH)
        return grm_cuda__errorf(GRM_EINVAL, "%s: norm %d is not a grm_hstu_norm (0 max_len, "
                                "1 length)", fn, (int)a->norm);
    if (a->times != nullptr && (a->rab_time != nullptr || time_grad)) {
        if (a->nbuckets < 1 || a->nbuckets > kMaxBuckets)
            return grm_cuda__errorf(GRM_EINVAL, "%s: nbuckets %lld outside [1, %d] with the "
                                    "time bias on (its thresholds live in shared memory)",
                                    fn, (long long)a->nbuckets, kMaxBuckets);
        if (a->time_thr == nullptr)
            return grm_cuda__errorf(GRM_EINVAL, "%s: time_thr is NULL with the time bias on; "
                                    "pass the [nbuckets] thresholds in device memory", fn);
    }
    if (a->nseq > 0 && (a->offsets == nullptr || a->q == nullptr || a->k == nullptr
                        || a->v == nullptr))
        return grm_cuda__errorf(GRM_EINVAL, "%s: offsets, q, k and v must be device pointers, "
                                "one is NULL", fn);
    return GRM_OK;
}

attn_params make_params(const grm_hstu_attn_args *a)
{
    attn_params p = {};
    p.q = a->q, p.k = a->k, p.v = a->v;
    p.rab_pos = a->rab_pos;
    p.rab_time = a->times ? a->rab_time : nullptr;      // no times: no time term
    p.offsets = a->offsets, p.times = a->times, p.thr = a->time_thr;
    p.ld = a->ld, p.max_len = a->max_len;
    p.H = (int32_t)a->H, p.D = (int32_t)a->dqk, p.Dv = (int32_t)a->dv;
    p.nb = (int32_t)a->nbuckets, p.norm = a->norm;
    return p;
}

// Shared memory and launch of one kernel over (sequence, head, tile). A shape past the
// device's opt-in limit is GRM_ENOTSUP with the numbers, not a bare launch failure.
template <typename K>
grm_status launch(const char *fn, K kernel, size_t smem, const attn_params &p, int64_t nseq,
                  cudaStream_t st)
{
    int dev = 0, optin = 0;
    GRM_CUDA_CHECK(cudaGetDevice(&dev));
    GRM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem > (size_t)optin)
        return grm_cuda__errorf(GRM_ENOTSUP, "%s: dqk %d, dv %d with %d time buckets need %zu "
                                "bytes of shared memory per block, this GPU allows %d; use "
                                "narrower heads or fewer time buckets", fn, (int)p.D,
                                (int)p.Dv, p.rab_time || p.d_rab_time ? (int)p.nb : 0, smem,
                                optin);
    GRM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    const dim3 grid((unsigned)nseq, (unsigned)p.H, (unsigned)p.ntiles);
    kernel<<<grid, kThreads, smem, st>>>(p);
    GRM_CUDA_CHECK_LAUNCH();
    return GRM_OK;
}

size_t floats(int64_t n)
{
    return sizeof(float) * (size_t)n;
}

} // namespace

extern "C" size_t grm_cuda_hstu_attn_ws_bytes(void *ctx, int64_t rows, int64_t nseq, int64_t H,
                                              int64_t nrab)
{
    (void)ctx, (void)rows, (void)nseq, (void)H, (void)nrab;
    return kWsBytes;
}

extern "C" grm_status grm_cuda_hstu_attn_fwd(void *ctx, float *out, const grm_hstu_attn_args *a,
                                             void *ws)
{
    const char *fn = "grm_cuda_hstu_attn_fwd";
    (void)ctx;
    grm_status s = check_args(fn, a, 0);
    if (s != GRM_OK || a->nseq == 0) return s;
    if (out == nullptr || ws == nullptr)
        return grm_cuda__errorf(GRM_EINVAL, "%s: out and ws (grm_cuda_hstu_attn_ws_bytes "
                                "bytes) must be device pointers, one is NULL", fn);
    const cudaStream_t st = grm_cuda__stream(a->stream);
    attn_params p = make_params(a);
    p.out = out;
    if ((s = seq_tiles(fn, a, ws, st, &p.ntiles)) != GRM_OK || p.ntiles == 0) return s;
    const int nthr = p.rab_time ? p.nb : 0;
    const size_t smem = sizeof(int64_t) * (size_t)nthr
                        + floats(2 * kT * (p.D + 1) + kT * (p.Dv + 1) + kT * (kT + 1));
    return launch(fn, fwd_kernel, smem, p, a->nseq, st);
}

extern "C" grm_status grm_cuda_hstu_attn_bwd(void *ctx, float *dq, float *dk, float *dv,
                                             float *d_rab_pos, float *d_rab_time,
                                             const float *dout, const grm_hstu_attn_args *a,
                                             void *ws)
{
    const char *fn = "grm_cuda_hstu_attn_bwd";
    (void)ctx;
    grm_status s = check_args(fn, a, d_rab_time != nullptr);
    if (s != GRM_OK || a->nseq == 0) return s;
    if (dq == nullptr || dk == nullptr || dv == nullptr || dout == nullptr || ws == nullptr)
        return grm_cuda__errorf(GRM_EINVAL, "%s: dq, dk, dv, dout and ws "
                                "(grm_cuda_hstu_attn_ws_bytes bytes) must be device "
                                "pointers, one is NULL", fn);
    const cudaStream_t st = grm_cuda__stream(a->stream);
    attn_params p = make_params(a);
    p.dout = dout, p.dq = dq, p.dk = dk, p.dv = dv;
    p.d_rab_pos = d_rab_pos;
    p.d_rab_time = a->times ? d_rab_time : nullptr;   // hstu_ref.c adds nothing without times
    if ((s = seq_tiles(fn, a, ws, st, &p.ntiles)) != GRM_OK || p.ntiles == 0) return s;
    const int nthr_kv = (p.rab_time || p.d_rab_time) ? p.nb : 0;
    const int ntb = p.d_rab_time ? p.nb : 0;
    const size_t smem_kv = sizeof(int64_t) * (size_t)nthr_kv
                           + floats(ntb + 2 * kT * (p.D + 1) + 2 * kT * (p.Dv + 1)
                                    + 2 * kT * kT + (p.d_rab_pos ? 2 * kT : 0));
    if ((s = launch(fn, bwd_kv_kernel, smem_kv, p, a->nseq, st)) != GRM_OK) return s;
    const int nthr_q = p.rab_time ? p.nb : 0;
    const size_t smem_q = sizeof(int64_t) * (size_t)nthr_q
                          + floats(2 * kT * (p.D + 1) + 2 * kT * (p.Dv + 1) + kT * (kT + 1));
    return launch(fn, bwd_q_kernel, smem_q, p, a->nseq, st);
}

// kernels/hstu_attn.cu - fused jagged HSTU pointwise attention, forward and backward
// (MTGRBoost §2 eq. 1-3 and §5.2 "operator fusion": tiles in shared memory, causal tiles
// skipped; TurboGR §4.1.1: jagged sequences, no padding). Per sequence b, head h, i < L_b:
//   s_ij = alpha q_i . k_j + rab[h, min(i - j, R - 1)],  out_i = sum_{j <= i} SiLU(s_ij) v_j / n
// Backward (a_ij = SiLU(s_ij) / n, sigma the logistic function):
//   dv_j = sum_i a_ij do_i,  ds_ij = (do_i . v_j) sigma(s_ij) (1 + s_ij (1 - sigma(s_ij))) / n,
//   dq_i = alpha sum_j ds_ij k_j,  dk_j = alpha sum_i ds_ij q_i,  drab[h, min(i-j, R-1)] += ds_ij.
// The reference is the plain C of tests/test-cuda-hstu.c (the same formula; plugins/dense-hstu
// will carry the CPU block). Layout: token-major [T, H, D]; offsets [B+1]. fp32 in, out and
// accumulation (SIMT, no tensor cores). Tiles: 64 queries x 64 keys, 256 threads, each
// thread a 4 x 4 patch of the score tile; no L x L tensor touches global memory; the
// backward recomputes scores (one kernel for dk, dv, drab per key tile, one for dq per
// query tile, so neither needs atomics on dq/dk/dv). Test tolerance: rtol 1e-4, atol 1e-5.
#include "cuda_common.cuh"

namespace {

constexpr int kT = 64;          // tile rows (queries) and columns (keys)
constexpr int kThreads = 256;
constexpr int kMaxD = 128;

struct attn_args {
    const float *q, *k, *v, *rab, *dout;
    float *out, *dq, *dk, *dv, *drab;
    const int64_t *offsets;
    int32_t H, D, Dv, R;
    float alpha, inv_n;
};

// Load rows [row0, row0 + kT) of head h of x ([T, H, w]) into s ([kT, w + 1]); rows past
// the sequence end are zero.
__device__ void load_tile(float *s, const float *x, int64_t off, int64_t row0, int64_t L,
                          int32_t H, int32_t h, int32_t w)
{
    const int ld = w + 1;
    for (int e = threadIdx.x; e < kT * w; e += kThreads) {
        const int r = e / w, c = e % w;
        const int64_t t = row0 + r;
        s[r * ld + c] = t < L ? x[((off + t) * H + h) * (int64_t)w + c] : 0.0f;
    }
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

__device__ __forceinline__ float score(const attn_args &a, float qk, int32_t h, int64_t rel)
{
    float s = a.alpha * qk;
    if (a.rab != nullptr) s += a.rab[(int64_t)h * a.R + (rel < a.R - 1 ? rel : a.R - 1)];
    return s;
}

// ---- forward: one block per (query tile, head, sequence) ----

__global__ void __launch_bounds__(kThreads) fwd_kernel(attn_args a)
{
    extern __shared__ float smem[];
    const int32_t h = blockIdx.y;
    const int64_t b = blockIdx.z;
    const int64_t off = a.offsets[b], L = a.offsets[b + 1] - off;
    const int64_t q0 = (int64_t)blockIdx.x * kT;
    if (q0 >= L) return;
    const int D = a.D, Dv = a.Dv;
    float *Qs = smem, *Ks = Qs + kT * (D + 1), *Vs = Ks + kT * (D + 1);
    float *Ps = Vs + kT * (Dv + 1);                       // [kT, kT + 1]
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int orow = threadIdx.x / 4, ocol = threadIdx.x % 4;
    float o[kMaxD / 4];
#pragma unroll
    for (int m = 0; m < kMaxD / 4; m++) o[m] = 0.0f;

    load_tile(Qs, a.q, off, q0, L, a.H, h, D);
    for (int64_t k0 = 0; k0 <= q0; k0 += kT) {            // tiles above the diagonal skipped
        __syncthreads();
        load_tile(Ks, a.k, off, k0, L, a.H, h, D);
        load_tile(Vs, a.v, off, k0, L, a.H, h, Dv);
        __syncthreads();
        float acc[4][4];
        dot_patch(acc, Qs, Ks, D, ty, tx);
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int64_t i = q0 + ty + 16 * r, j = k0 + tx + 16 * c;
                float p = 0.0f;
                if (i < L && j <= i) {
                    const float s = score(a, acc[r][c], h, i - j);
                    p = s * sigmoid(s) * a.inv_n;
                }
                Ps[(ty + 16 * r) * (kT + 1) + tx + 16 * c] = p;
            }
        __syncthreads();
        for (int j = 0; j < kT; j++) {
            const float p = Ps[orow * (kT + 1) + j];
#pragma unroll
            for (int m = 0; m < kMaxD / 4; m++) {
                const int c = ocol + 4 * m;
                if (c < Dv) o[m] = fmaf(p, Vs[j * (Dv + 1) + c], o[m]);
            }
        }
    }
    const int64_t i = q0 + orow;
    if (i < L) {
        float *dst = a.out + ((off + i) * a.H + h) * (int64_t)Dv;
#pragma unroll
        for (int m = 0; m < kMaxD / 4; m++) {
            const int c = ocol + 4 * m;
            if (c < Dv) dst[c] = o[m];
        }
    }
}

// The weights of one tile pair into A (a_ij, may be NULL) and dS (ds_ij), masked to 0.
__device__ void tile_weights(const attn_args &a, float *A, float *dS, const float *Qs,
                             const float *Ks, const float *Vs, const float *dOs, int64_t q0,
                             int64_t k0, int64_t L, int32_t h, float *bins)
{
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    float qk[4][4], dp[4][4];
    dot_patch(qk, Qs, Ks, a.D, ty, tx);
    dot_patch(dp, dOs, Vs, a.Dv, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int li = ty + 16 * r, lj = tx + 16 * c;
            const int64_t i = q0 + li, j = k0 + lj;
            float w = 0.0f, ds = 0.0f;
            if (i < L && j < L && j <= i) {
                const float s = score(a, qk[r][c], h, i - j);
                const float sg = sigmoid(s);
                w = s * sg * a.inv_n;
                ds = dp[r][c] * sg * (1.0f + s * (1.0f - sg)) * a.inv_n;
                if (bins != nullptr) atomicAdd(bins + (li - lj + kT - 1), ds);
            }
            if (A != nullptr) A[li * (kT + 1) + lj] = w;
            dS[li * (kT + 1) + lj] = ds;
        }
}

// ---- backward 1: dk, dv and drab, one block per (key tile, head, sequence) ----

__global__ void __launch_bounds__(kThreads) bwd_kv_kernel(attn_args a)
{
    extern __shared__ float smem[];
    const int32_t h = blockIdx.y;
    const int64_t b = blockIdx.z;
    const int64_t off = a.offsets[b], L = a.offsets[b + 1] - off;
    const int64_t k0 = (int64_t)blockIdx.x * kT;
    if (k0 >= L) return;
    const int D = a.D, Dv = a.Dv;
    float *Ks = smem, *Vs = Ks + kT * (D + 1), *Qs = Vs + kT * (Dv + 1);
    float *dOs = Qs + kT * (D + 1), *A = dOs + kT * (Dv + 1), *dS = A + kT * (kT + 1);
    float *bins = dS + kT * (kT + 1);                     // [2 kT - 1] diagonals of a tile
    const int jrow = threadIdx.x / 4, jcol = threadIdx.x % 4;
    float dk[kMaxD / 4], dv[kMaxD / 4];
#pragma unroll
    for (int m = 0; m < kMaxD / 4; m++) dk[m] = dv[m] = 0.0f;

    load_tile(Ks, a.k, off, k0, L, a.H, h, D);
    load_tile(Vs, a.v, off, k0, L, a.H, h, Dv);
    for (int64_t q0 = k0; q0 < L; q0 += kT) {            // query tiles at or below the diagonal
        __syncthreads();
        load_tile(Qs, a.q, off, q0, L, a.H, h, D);
        load_tile(dOs, a.dout, off, q0, L, a.H, h, Dv);
        if (a.drab != nullptr)
            for (int e = threadIdx.x; e < 2 * kT - 1; e += kThreads) bins[e] = 0.0f;
        __syncthreads();
        tile_weights(a, A, dS, Qs, Ks, Vs, dOs, q0, k0, L, h, a.drab ? bins : nullptr);
        __syncthreads();
        for (int i = 0; i < kT; i++) {
            const float w = A[i * (kT + 1) + jrow], ds = dS[i * (kT + 1) + jrow];
#pragma unroll
            for (int m = 0; m < kMaxD / 4; m++) {
                const int c = jcol + 4 * m;
                if (c < Dv) dv[m] = fmaf(w, dOs[i * (Dv + 1) + c], dv[m]);
                if (c < D) dk[m] = fmaf(ds, Qs[i * (D + 1) + c], dk[m]);
            }
        }
        if (a.drab != nullptr) {
            for (int e = threadIdx.x; e < 2 * kT - 1; e += kThreads) {
                const int64_t rel = q0 - k0 + e - (kT - 1);   // i - j of diagonal e
                if (rel >= 0 && bins[e] != 0.0f)
                    atomicAdd(a.drab + (int64_t)h * a.R + (rel < a.R - 1 ? rel : a.R - 1),
                              bins[e]);
            }
        }
    }
    const int64_t j = k0 + jrow;
    if (j < L) {
        float *dkp = a.dk + ((off + j) * a.H + h) * (int64_t)D;
        float *dvp = a.dv + ((off + j) * a.H + h) * (int64_t)Dv;
#pragma unroll
        for (int m = 0; m < kMaxD / 4; m++) {
            const int c = jcol + 4 * m;
            if (c < D) dkp[c] = a.alpha * dk[m];
            if (c < Dv) dvp[c] = dv[m];
        }
    }
}

// ---- backward 2: dq, one block per (query tile, head, sequence) ----

__global__ void __launch_bounds__(kThreads) bwd_q_kernel(attn_args a)
{
    extern __shared__ float smem[];
    const int32_t h = blockIdx.y;
    const int64_t b = blockIdx.z;
    const int64_t off = a.offsets[b], L = a.offsets[b + 1] - off;
    const int64_t q0 = (int64_t)blockIdx.x * kT;
    if (q0 >= L) return;
    const int D = a.D, Dv = a.Dv;
    float *Qs = smem, *dOs = Qs + kT * (D + 1), *Ks = dOs + kT * (Dv + 1);
    float *Vs = Ks + kT * (D + 1), *dS = Vs + kT * (Dv + 1);
    const int irow = threadIdx.x / 4, icol = threadIdx.x % 4;
    float dq[kMaxD / 4];
#pragma unroll
    for (int m = 0; m < kMaxD / 4; m++) dq[m] = 0.0f;

    load_tile(Qs, a.q, off, q0, L, a.H, h, D);
    load_tile(dOs, a.dout, off, q0, L, a.H, h, Dv);
    for (int64_t k0 = 0; k0 <= q0; k0 += kT) {
        __syncthreads();
        load_tile(Ks, a.k, off, k0, L, a.H, h, D);
        load_tile(Vs, a.v, off, k0, L, a.H, h, Dv);
        __syncthreads();
        tile_weights(a, nullptr, dS, Qs, Ks, Vs, dOs, q0, k0, L, h, nullptr);
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
        float *dst = a.dq + ((off + i) * a.H + h) * (int64_t)D;
#pragma unroll
        for (int m = 0; m < kMaxD / 4; m++) {
            const int c = icol + 4 * m;
            if (c < D) dst[c] = a.alpha * dq[m];
        }
    }
}

grm_status check(const char *fn, int64_t B, int32_t H, int32_t D, int32_t Dv, int32_t R,
                 const float *rab, int64_t max_len, float n)
{
    if (B < 0 || B > 65535)
        return grm_cuda__errorf(GRM_EINVAL, "%s: B %lld outside [0, 65535]", fn, (long long)B);
    if (H < 1 || H > 65535)
        return grm_cuda__errorf(GRM_EINVAL, "%s: H %d outside [1, 65535]", fn, (int)H);
    if (D < 1 || D > kMaxD || Dv < 1 || Dv > kMaxD)
        return grm_cuda__errorf(GRM_EINVAL, "%s: D %d and Dv %d must lie in [1, %d]", fn,
                                (int)D, (int)Dv, kMaxD);
    if (rab != nullptr && R < 1)
        return grm_cuda__errorf(GRM_EINVAL, "%s: R %d < 1 with a rab table", fn, (int)R);
    if (max_len < 0)
        return grm_cuda__errorf(GRM_EINVAL, "%s: max_len %lld < 0", fn, (long long)max_len);
    if (!(n > 0))
        return grm_cuda__errorf(GRM_EINVAL, "%s: n %g must be > 0", fn, (double)n);
    return GRM_OK;
}

template <typename K>
grm_status launch(K kernel, size_t smem, int64_t B, int32_t H, int64_t max_len,
                  const attn_args &a, cudaStream_t st)
{
    GRM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    const dim3 grid((unsigned)((max_len + kT - 1) / kT), (unsigned)H, (unsigned)B);
    kernel<<<grid, kThreads, smem, st>>>(a);
    GRM_CUDA_CHECK_LAUNCH();
    return GRM_OK;
}

} // namespace

extern "C" grm_status grm_cuda_hstu_attn_fwd(float *out, const float *q, const float *k,
                                             const float *v, const float *rab,
                                             const int64_t *offsets, int64_t B, int32_t H,
                                             int32_t D, int32_t Dv, int32_t R, int64_t max_len,
                                             float alpha, float n, void *stream)
{
    grm_status s = check("grm_cuda_hstu_attn_fwd", B, H, D, Dv, R, rab, max_len, n);
    if (s != GRM_OK || B == 0 || max_len == 0) return s;
    attn_args a = {};
    a.q = q, a.k = k, a.v = v, a.rab = rab, a.out = out, a.offsets = offsets;
    a.H = H, a.D = D, a.Dv = Dv, a.R = R, a.alpha = alpha, a.inv_n = 1.0f / n;
    const size_t smem = sizeof(float) * (size_t)(2 * kT * (D + 1) + kT * (Dv + 1) +
                                                 kT * (kT + 1));
    return launch(fwd_kernel, smem, B, H, max_len, a, grm_cuda__stream(stream));
}

extern "C" grm_status grm_cuda_hstu_attn_bwd(float *dq, float *dk, float *dv, float *drab,
                                             const float *dout, const float *q, const float *k,
                                             const float *v, const float *rab,
                                             const int64_t *offsets, int64_t B, int32_t H,
                                             int32_t D, int32_t Dv, int32_t R, int64_t max_len,
                                             float alpha, float n, void *stream)
{
    const char *fn = "grm_cuda_hstu_attn_bwd";
    grm_status s = check(fn, B, H, D, Dv, R, rab, max_len, n);
    if (s != GRM_OK) return s;
    if ((drab == nullptr) != (rab == nullptr))
        return grm_cuda__errorf(GRM_EINVAL, "%s: drab and rab must both be given or both be "
                                "NULL", fn);
    const cudaStream_t st = grm_cuda__stream(stream);
    if (drab != nullptr)
        GRM_CUDA_CHECK(cudaMemsetAsync(drab, 0, (size_t)H * R * sizeof(float), st));
    if (B == 0 || max_len == 0) return GRM_OK;
    attn_args a = {};
    a.q = q, a.k = k, a.v = v, a.rab = rab, a.dout = dout, a.offsets = offsets;
    a.dq = dq, a.dk = dk, a.dv = dv, a.drab = drab;
    a.H = H, a.D = D, a.Dv = Dv, a.R = R, a.alpha = alpha, a.inv_n = 1.0f / n;
    const size_t smem_kv = sizeof(float) * (size_t)(2 * kT * (D + 1) + 2 * kT * (Dv + 1) +
                                                    2 * kT * (kT + 1) + 2 * kT);
    s = launch(bwd_kv_kernel, smem_kv, B, H, max_len, a, st);
    if (s != GRM_OK) return s;
    const size_t smem_q = sizeof(float) * (size_t)(2 * kT * (D + 1) + 2 * kT * (Dv + 1) +
                                                   kT * (kT + 1));
    return launch(bwd_q_kernel, smem_q, B, H, max_len, a, st);
}

// kernels/embedding_ops.cu - row movement of the embedding hot path: gather, scatter-add
// (its backward), pooled sum/mean over jagged segments and its backward, and the sequence
// tile (jagged broadcast). Mirrors the plain loops of plugins/emb-static/emb_static_ref.c
// (es_gather_ref) and the pooling of the CPU stores; the references the tests compare with
// are written out in tests/test-cuda-embedding.c.
// Layout: rows of D elements of f32, f16 or bf16, row-major; ids and offsets int64.
// Accumulation is fp32 (RecIS §2.2.2: 128-bit vectorised access, warp-level merging of
// equal ids before atomics). Test tolerance: exact for gather and tile; rtol 1e-5 for f32
// sums, 1e-2 for half types.
#include "cuda_common.cuh"

namespace {

// VEC elements of T moved as one access: 16 bytes when VEC * sizeof(T) == 16.
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) vec_t {
    T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ void load_f32(float (&acc)[VEC], const T *p)
{
    const vec_t<T, VEC> x = *reinterpret_cast<const vec_t<T, VEC> *>(p);
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] = grm_to_f32(x.v[e]);
}

template <typename T, int VEC>
__device__ __forceinline__ void add_f32(float (&acc)[VEC], const T *p, float scale = 1.0f)
{
    const vec_t<T, VEC> x = *reinterpret_cast<const vec_t<T, VEC> *>(p);
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] += scale * grm_to_f32(x.v[e]);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_f32(T *p, const float (&acc)[VEC])
{
    vec_t<T, VEC> x;
#pragma unroll
    for (int e = 0; e < VEC; e++) x.v[e] = grm_from_f32<T>(acc[e]);
    *reinterpret_cast<vec_t<T, VEC> *>(p) = x;
}

// Atomic p[e] += acc[e] * mult for e < VEC; pairs of half types use the paired atomics.
// On sm_90 four floats go as one 16-byte vector atomic (CUDA 12.1's atomicAdd(float4 *),
// global memory only; p is 16-byte aligned whenever VEC is 4, see vec16_ok): one L2
// read-modify-write instead of four. Measured on an H100 80GB (bench-cuda, 2M uniform ids
// over 1M rows): scatter-add f32 went from 0.51-0.52 to 0.84-0.86 of the copy bandwidth.
template <int VEC>
__device__ __forceinline__ void atomic_add_row(float *p, const float (&acc)[VEC], float mult)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (VEC == 4) {
        atomicAdd(reinterpret_cast<float4 *>(p),
                  make_float4(acc[0] * mult, acc[1] * mult, acc[2] * mult, acc[3] * mult));
    } else
#endif
    {
#pragma unroll
        for (int e = 0; e < VEC; e++) atomicAdd(p + e, acc[e] * mult);
    }
}
template <int VEC>
__device__ __forceinline__ void atomic_add_row(__half *p, const float (&acc)[VEC], float mult)
{
    if constexpr (VEC % 2 == 0) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2)
            atomicAdd(reinterpret_cast<__half2 *>(p + e),
                      __floats2half2_rn(acc[e] * mult, acc[e + 1] * mult));
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++) atomicAdd(p + e, __float2half_rn(acc[e] * mult));
    }
}
template <int VEC>
__device__ __forceinline__ void atomic_add_row(__nv_bfloat16 *p, const float (&acc)[VEC],
                                               float mult)
{
    if constexpr (VEC % 2 == 0) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2)
            atomicAdd(reinterpret_cast<__nv_bfloat162 *>(p + e),
                      __floats2bfloat162_rn(acc[e] * mult, acc[e + 1] * mult));
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++) atomicAdd(p + e, __float2bfloat16_rn(acc[e] * mult));
    }
}

// ---- gather: a pure copy of row bytes, in units of W (16, 8, 4 or 2 bytes) ----

template <typename W>
__global__ void gather_kernel(W *__restrict__ out, const W *__restrict__ table,
                              const int64_t *__restrict__ idx, int64_t n, int64_t rows,
                              int64_t nvec)
{
    const int64_t total = n * nvec;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / nvec, c = t - i * nvec;
        const int64_t r = __ldg(idx + i);
        W w;
        if (r >= 0 && r < rows) {
            w = __ldg(table + r * nvec + c);
        } else {
            memset(&w, 0, sizeof w);
        }
        out[t] = w;
    }
}

template <typename W>
static grm_status gather_launch(void *out, const void *table, const int64_t *idx, int64_t n,
                                int64_t rows, size_t row_bytes, cudaStream_t st)
{
    const int64_t nvec = (int64_t)(row_bytes / sizeof(W));
    gather_kernel<W><<<grm_cuda__blocks(n * nvec, 256), 256, 0, st>>>(
        static_cast<W *>(out), static_cast<const W *>(table), idx, n, rows, nvec);
    GRM_CUDA_CHECK_LAUNCH();
    return GRM_OK;
}

static bool aligned(const void *p, size_t a)
{
    return ((uintptr_t)p % a) == 0;
}

// ---- scatter-add with warp-level merging of equal consecutive ids ----

constexpr int kRun = 32;   // consecutive occurrences one warp walks

template <typename T, int VEC>
__global__ void scatter_add_kernel(T *__restrict__ table, const T *__restrict__ src,
                                   const int64_t *__restrict__ idx, int64_t n, int64_t rows,
                                   int32_t D)
{
    const int lane = threadIdx.x & 31;
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const int64_t nruns = (n + kRun - 1) / kRun;
    for (int64_t run = warp; run < nruns; run += nwarps) {
        const int64_t i0 = run * kRun, i1 = min(n, i0 + kRun);
        for (int32_t c = lane * VEC; c < D; c += 32 * VEC) {
            float acc[VEC] = {};
            int64_t cur = __ldg(idx + i0);
            for (int64_t i = i0; i < i1; i++) {
                const int64_t r = __ldg(idx + i);
                if (r != cur) {
                    if (cur >= 0 && cur < rows) atomic_add_row<VEC>(table + cur * D + c, acc, 1.0f);
#pragma unroll
                    for (int e = 0; e < VEC; e++) acc[e] = 0.0f;
                    cur = r;
                }
                add_f32<T, VEC>(acc, src + i * D + c);
            }
            if (cur >= 0 && cur < rows) atomic_add_row<VEC>(table + cur * D + c, acc, 1.0f);
        }
    }
}

// ---- pooling: one warp per segment ----

template <typename T, int VEC>
__global__ void pool_fwd_kernel(T *__restrict__ out, const T *__restrict__ table,
                                const int64_t *__restrict__ idx,
                                const int64_t *__restrict__ offsets, int64_t S, int64_t rows,
                                int32_t D, int32_t mode)
{
    const int lane = threadIdx.x & 31;
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t s = warp; s < S; s += nwarps) {
        const int64_t b = __ldg(offsets + s), e = __ldg(offsets + s + 1);
        const float scale = (mode == GRM_CUDA_POOL_MEAN && e > b) ? 1.0f / (float)(e - b) : 1.0f;
        for (int32_t c = lane * VEC; c < D; c += 32 * VEC) {
            float acc[VEC] = {};
            for (int64_t i = b; i < e; i++) {
                const int64_t r = idx != nullptr ? __ldg(idx + i) : i;
                if (r >= 0 && r < rows) add_f32<T, VEC>(acc, table + r * D + c);
            }
#pragma unroll
            for (int k = 0; k < VEC; k++) acc[k] *= scale;
            store_f32<T, VEC>(out + s * D + c, acc);
        }
    }
}

template <typename T, int VEC>
__global__ void pool_bwd_kernel(T *__restrict__ table_grad, const T *__restrict__ grad_out,
                                const int64_t *__restrict__ idx,
                                const int64_t *__restrict__ offsets, int64_t S, int64_t rows,
                                int32_t D, int32_t mode)
{
    const int lane = threadIdx.x & 31;
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t s = warp; s < S; s += nwarps) {
        const int64_t b = __ldg(offsets + s), e = __ldg(offsets + s + 1);
        if (e <= b) continue;
        const float scale = mode == GRM_CUDA_POOL_MEAN ? 1.0f / (float)(e - b) : 1.0f;
        for (int32_t c = lane * VEC; c < D; c += 32 * VEC) {
            float g[VEC];
            load_f32<T, VEC>(g, grad_out + s * D + c);
            // a run of equal ids adds its multiplicity times g with one set of atomics
            int64_t cur = idx != nullptr ? __ldg(idx + b) : b;
            float mult = 0.0f;
            for (int64_t i = b; i < e; i++) {
                const int64_t r = idx != nullptr ? __ldg(idx + i) : i;
                if (r != cur) {
                    if (cur >= 0 && cur < rows)
                        atomic_add_row<VEC>(table_grad + cur * D + c, g, mult * scale);
                    cur = r;
                    mult = 0.0f;
                }
                mult += 1.0f;
            }
            if (cur >= 0 && cur < rows)
                atomic_add_row<VEC>(table_grad + cur * D + c, g, mult * scale);
        }
    }
}

// ---- sequence tile: one block per segment, copies in units of W ----

template <typename W>
__global__ void seq_tile_kernel(W *__restrict__ out, const W *__restrict__ in,
                                const int64_t *__restrict__ offsets, int64_t S, int64_t nvec)
{
    for (int64_t s = blockIdx.x; s < S; s += gridDim.x) {
        const int64_t b = __ldg(offsets + s), e = __ldg(offsets + s + 1);
        const int64_t total = (e - b) * nvec;
        for (int64_t t = threadIdx.x; t < total; t += blockDim.x) {
            const int64_t c = t % nvec;
            out[b * nvec + t] = __ldg(in + s * nvec + c);
        }
    }
}

// The widest access unit that divides the row and the pointers' alignment.
static int vec_bytes(size_t row_bytes, const void *a, const void *b)
{
    const size_t cands[] = {16, 8, 4, 2};
    for (size_t w : cands)
        if (row_bytes % w == 0 && aligned(a, w) && aligned(b, w)) return (int)w;
    return 1;
}

// Run body<T, VEC>() for the dtype: VEC = 16 / sizeof(T) when 16-byte access fits, else 1.
template <template <typename, int> class F, typename... A>
static grm_status dispatch_rows(int32_t dtype, bool vec16, A... args)
{
    switch (dtype) {
    case GRM_DTYPE_F32:
        return vec16 ? F<float, 4>::run(args...) : F<float, 1>::run(args...);
    case GRM_DTYPE_F16:
        return vec16 ? F<__half, 8>::run(args...) : F<__half, 1>::run(args...);
    case GRM_DTYPE_BF16:
        return vec16 ? F<__nv_bfloat16, 8>::run(args...) : F<__nv_bfloat16, 1>::run(args...);
    default:
        return grm_cuda__errorf(GRM_ENOTSUP, "grm_cuda: dtype %d not supported for rows; "
                                "use GRM_DTYPE_F32, _F16 or _BF16", (int)dtype);
    }
}

template <typename T, int VEC> struct scatter_run {
    static grm_status run(void *table, const void *src, const int64_t *idx, int64_t n,
                          int64_t rows, int32_t D, cudaStream_t st)
    {
        const int64_t warps = (n + kRun - 1) / kRun;
        scatter_add_kernel<T, VEC><<<grm_cuda__blocks(warps * 32, 256), 256, 0, st>>>(
            static_cast<T *>(table), static_cast<const T *>(src), idx, n, rows, D);
        GRM_CUDA_CHECK_LAUNCH();
        return GRM_OK;
    }
};

template <typename T, int VEC> struct pool_run {
    static grm_status run(bool fwd, void *out, const void *in, const int64_t *idx,
                          const int64_t *offsets, int64_t S, int64_t rows, int32_t D,
                          int32_t mode, cudaStream_t st)
    {
        const unsigned blocks = grm_cuda__blocks(S * 32, 256);
        if (fwd) {
            pool_fwd_kernel<T, VEC><<<blocks, 256, 0, st>>>(
                static_cast<T *>(out), static_cast<const T *>(in), idx, offsets, S, rows, D,
                mode);
        } else {
            pool_bwd_kernel<T, VEC><<<blocks, 256, 0, st>>>(
                static_cast<T *>(out), static_cast<const T *>(in), idx, offsets, S, rows, D,
                mode);
        }
        GRM_CUDA_CHECK_LAUNCH();
        return GRM_OK;
    }
};

static grm_status check_rows(const char *fn, int64_t n, int32_t D, int32_t dtype)
{
    if (n < 0) return grm_cuda__errorf(GRM_EINVAL, "%s: count %lld < 0", fn, (long long)n);
    if (D < 1 || D > 65536)
        return grm_cuda__errorf(GRM_EINVAL, "%s: D %d outside [1, 65536]", fn, (int)D);
    if (grm_cuda__row_esize(dtype) == 0)
        return grm_cuda__errorf(GRM_ENOTSUP, "%s: dtype %d not supported; use "
                                "GRM_DTYPE_F32, _F16 or _BF16", fn, (int)dtype);
    return GRM_OK;
}

static bool vec16_ok(int32_t D, int32_t dtype, const void *a, const void *b)
{
    const size_t row_bytes = (size_t)D * grm_cuda__row_esize(dtype);
    return row_bytes % 16 == 0 && aligned(a, 16) && aligned(b, 16);
}

} // namespace

extern "C" grm_status grm_cuda_gather_fwd(void *out, const void *table, const int64_t *idx,
                                          int64_t n, int64_t rows, int32_t D, int32_t dtype,
                                          void *stream)
{
    grm_status s = check_rows("grm_cuda_gather_fwd", n, D, dtype);
    if (s != GRM_OK || n == 0) return s;
    const size_t row_bytes = (size_t)D * grm_cuda__row_esize(dtype);
    const cudaStream_t st = grm_cuda__stream(stream);
    switch (vec_bytes(row_bytes, out, table)) {
    case 16: return gather_launch<uint4>(out, table, idx, n, rows, row_bytes, st);
    case 8: return gather_launch<uint2>(out, table, idx, n, rows, row_bytes, st);
    case 4: return gather_launch<uint32_t>(out, table, idx, n, rows, row_bytes, st);
    default: return gather_launch<uint16_t>(out, table, idx, n, rows, row_bytes, st);
    }
}

extern "C" grm_status grm_cuda_gather_bwd(void *table, const void *src, const int64_t *idx,
                                          int64_t n, int64_t rows, int32_t D, int32_t dtype,
                                          void *stream)
{
    grm_status s = check_rows("grm_cuda_gather_bwd", n, D, dtype);
    if (s != GRM_OK || n == 0) return s;
    return dispatch_rows<scatter_run>(dtype, vec16_ok(D, dtype, table, src), table, src, idx,
                                      n, rows, D, grm_cuda__stream(stream));
}

static grm_status pool_common(const char *fn, bool fwd, void *out, const void *in,
                              const int64_t *idx, const int64_t *offsets, int64_t S,
                              int64_t rows, int32_t D, int32_t dtype, int32_t mode,
                              void *stream)
{
    grm_status s = check_rows(fn, S, D, dtype);
    if (s != GRM_OK) return s;
    if (mode != GRM_CUDA_POOL_SUM && mode != GRM_CUDA_POOL_MEAN)
        return grm_cuda__errorf(GRM_EINVAL, "%s: mode %d is not GRM_CUDA_POOL_SUM or _MEAN",
                                fn, (int)mode);
    if (S == 0) return GRM_OK;
    return dispatch_rows<pool_run>(dtype, vec16_ok(D, dtype, out, in), fwd, out, in, idx,
                                   offsets, S, rows, D, mode, grm_cuda__stream(stream));
}

extern "C" grm_status grm_cuda_pool_fwd(void *out, const void *table, const int64_t *idx,
                                        const int64_t *offsets, int64_t S, int64_t rows,
                                        int32_t D, int32_t dtype, int32_t mode, void *stream)
{
    return pool_common("grm_cuda_pool_fwd", true, out, table, idx, offsets, S, rows, D, dtype,
                       mode, stream);
}

extern "C" grm_status grm_cuda_pool_bwd(void *table_grad, const void *grad_out,
                                        const int64_t *idx, const int64_t *offsets, int64_t S,
                                        int64_t rows, int32_t D, int32_t dtype, int32_t mode,
                                        void *stream)
{
    return pool_common("grm_cuda_pool_bwd", false, table_grad, grad_out, idx, offsets, S, rows,
                       D, dtype, mode, stream);
}

extern "C" grm_status grm_cuda_seq_tile_fwd(void *out, const void *in, const int64_t *offsets,
                                            int64_t S, int32_t D, int32_t dtype, void *stream)
{
    grm_status s = check_rows("grm_cuda_seq_tile_fwd", S, D, dtype);
    if (s != GRM_OK || S == 0) return s;
    const size_t row_bytes = (size_t)D * grm_cuda__row_esize(dtype);
    const cudaStream_t st = grm_cuda__stream(stream);
    const unsigned blocks = grm_cuda__blocks(S, 1);
    switch (vec_bytes(row_bytes, out, in)) {
    case 16:
        seq_tile_kernel<uint4><<<blocks, 128, 0, st>>>(static_cast<uint4 *>(out),
            static_cast<const uint4 *>(in), offsets, S, (int64_t)(row_bytes / 16));
        break;
    case 8:
        seq_tile_kernel<uint2><<<blocks, 128, 0, st>>>(static_cast<uint2 *>(out),
            static_cast<const uint2 *>(in), offsets, S, (int64_t)(row_bytes / 8));
        break;
    case 4:
        seq_tile_kernel<uint32_t><<<blocks, 128, 0, st>>>(static_cast<uint32_t *>(out),
            static_cast<const uint32_t *>(in), offsets, S, (int64_t)(row_bytes / 4));
        break;
    default:
        seq_tile_kernel<uint16_t><<<blocks, 128, 0, st>>>(static_cast<uint16_t *>(out),
            static_cast<const uint16_t *>(in), offsets, S, (int64_t)(row_bytes / 2));
        break;
    }
    GRM_CUDA_CHECK_LAUNCH();
    return GRM_OK;
}

extern "C" grm_status grm_cuda_seq_tile_bwd(void *grad_in, const void *grad_out,
                                            const int64_t *offsets, int64_t S, int32_t D,
                                            int32_t dtype, void *stream)
{
    // the tile copies in[s] to every token of segment s, so its gradient is the segment sum
    return pool_common("grm_cuda_seq_tile_bwd", true, grad_in, grad_out, NULL, offsets, S,
                       INT64_MAX, D, dtype, GRM_CUDA_POOL_SUM, stream);
}

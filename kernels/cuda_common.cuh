// kernels/cuda_common.cuh - what every kernels/*.cu shares: the error capture behind
// grm_cuda_last_error(), GRM_CUDA_CHECK, the dtype load/store helpers used by the row
// kernels, and grm/rng.h, whose grm_mix64 and grm_row_seed the kernels call on the device.
#ifndef GRM_CUDA_COMMON_CUH
#define GRM_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <grm/rng.h>

#include "grm_cuda.h"

// Record a message for grm_cuda_last_error() and return st (cuda_util.cu). printf format.
grm_status grm_cuda__errorf(grm_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Turn a CUDA runtime error into GRM_EDEVICE with file:line and CUDA's own string.
#define GRM_CUDA_CHECK(expr)                                                            \
    do {                                                                                \
        const cudaError_t grm_cuda_e_ = (expr);                                         \
        if (grm_cuda_e_ != cudaSuccess)                                                 \
            return grm_cuda__errorf(GRM_EDEVICE, "%s:%d: %s: %s", __FILE__, __LINE__,  \
                                    #expr, cudaGetErrorString(grm_cuda_e_));            \
    } while (0)

// After a launch: report a bad configuration (too much shared memory, too many blocks).
#define GRM_CUDA_CHECK_LAUNCH() GRM_CUDA_CHECK(cudaGetLastError())

static inline cudaStream_t grm_cuda__stream(void *stream)
{
    return static_cast<cudaStream_t>(stream);
}

static inline unsigned grm_cuda__blocks(int64_t work, int per_block, unsigned cap = 65535u * 8)
{
    int64_t b = (work + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > (int64_t)cap) b = (int64_t)cap;
    return (unsigned)b;
}

// ---- element types: every row kernel is a template over these three ----

__device__ __forceinline__ float grm_to_f32(float x) { return x; }
__device__ __forceinline__ float grm_to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float grm_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T grm_from_f32(float x);
template <> __device__ __forceinline__ float grm_from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half grm_from_f32<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 grm_from_f32<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

// The element size of a dtype the row kernels take (f32, f16, bf16), 0 for the others.
static inline size_t grm_cuda__row_esize(int32_t dtype)
{
    const int row = dtype == GRM_DTYPE_F32 || dtype == GRM_DTYPE_F16 || dtype == GRM_DTYPE_BF16;
    return row ? grm_dtype_size(dtype) : 0;
}

// ---- grm/rng.h on the device: grm_mix64 and grm_row_seed are __host__ __device__ ----

// Output number j (0-based) of the SplitMix64 stream that starts at `state`: the state
// after j + 1 steps is state + (j + 1) * gamma, so any element can be computed on its own,
// which lets a thread group fill one row in parallel and still match grm_row_init.
__device__ __forceinline__ uint64_t grm_dev_splitmix64_at(uint64_t state, uint64_t j)
{
    uint64_t z = state + (j + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ double grm_dev_uniform01_at(uint64_t state, uint64_t j)
{
    return (double)(grm_dev_splitmix64_at(state, j) >> 11) * (1.0 / 9007199254740992.0);
}

// Element j of grm_row_init(row, dim, init, scale, seed, table_hash, id). The uniform case
// is bit-exact (only exactly rounded double operations, no contraction); the normal case
// uses the device's log/sqrt/cos/sin, within 2 ulp of glibc in double, so the float results
// agree with the CPU store to about 1e-7 relative.
__device__ __forceinline__ float grm_dev_row_init_elem(int32_t j, int32_t init, double scale,
                                                       uint64_t row_state)
{
    if (init == GRM_EMB_INIT_UNIFORM) {
        const double u = grm_dev_uniform01_at(row_state, (uint64_t)j);
        return (float)__dmul_rn(scale, __dsub_rn(__dmul_rn(2.0, u), 1.0));
    }
    if (init == GRM_EMB_INIT_NORMAL) {
        const double two_pi = 6.283185307179586476925286766559;
        const uint64_t pair = (uint64_t)(j / 2);
        const double u1 = __dsub_rn(1.0, grm_dev_uniform01_at(row_state, 2 * pair));
        const double u2 = grm_dev_uniform01_at(row_state, 2 * pair + 1);
        const double r = sqrt(__dmul_rn(-2.0, log(u1)));
        const double a = __dmul_rn(two_pi, u2);
        return (float)__dmul_rn(__dmul_rn(scale, r), (j & 1) ? sin(a) : cos(a));
    }
    return 0.0f;
}

#endif // GRM_CUDA_COMMON_CUH

// kernels/cuda_util.cu - device discovery, memory helpers and the per-thread error message
// of the CUDA backend (grm_cuda.h). No kernels here; no reference to mirror.
#include <stdarg.h>
#include <stdio.h>

#include "cuda_common.cuh"

static thread_local char grm_cuda_msg[512];

grm_status grm_cuda__errorf(grm_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(grm_cuda_msg, sizeof grm_cuda_msg, fmt, ap);
    va_end(ap);
    return st;
}

extern "C" const char *grm_cuda_last_error(void)
{
    return grm_cuda_msg;
}

extern "C" int grm_cuda_device_count(void)
{
    int n = 0;
    // Any error (no driver, driver older than the runtime, no device, MIG without access)
    // means "no device"; clear it so later calls do not see a sticky error.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n > 0 ? n : 0;
}

extern "C" grm_status grm_cuda_malloc(void **ptr, size_t bytes)
{
    *ptr = NULL;
    if (bytes == 0) return GRM_OK;
    const cudaError_t e = cudaMalloc(ptr, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        *ptr = NULL;
        return grm_cuda__errorf(GRM_ENOMEM, "grm_cuda_malloc: %zu bytes: %s", bytes,
                                cudaGetErrorString(e));
    }
    GRM_CUDA_CHECK(e);
    return GRM_OK;
}

extern "C" void grm_cuda_free(void *ptr)
{
    if (ptr != NULL) (void)cudaFree(ptr);
}

extern "C" grm_status grm_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) return GRM_OK;
    GRM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return GRM_OK;
}

extern "C" grm_status grm_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) return GRM_OK;
    GRM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return GRM_OK;
}

extern "C" grm_status grm_cuda_memset(void *dst, int value, size_t bytes)
{
    if (bytes == 0) return GRM_OK;
    GRM_CUDA_CHECK(cudaMemset(dst, value, bytes));
    return GRM_OK;
}

extern "C" grm_status grm_cuda_sync(void *stream)
{
    if (stream == NULL) {
        GRM_CUDA_CHECK(cudaDeviceSynchronize());
    } else {
        GRM_CUDA_CHECK(cudaStreamSynchronize(grm_cuda__stream(stream)));
    }
    GRM_CUDA_CHECK(cudaGetLastError());
    return GRM_OK;
}

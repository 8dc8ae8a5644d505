/* tests/cuda-common.h - helpers shared by the tests/test-cuda-*.c programs: device
 * detection (a missing device or driver makes the device cases SKIP), upload/download
 * with TAP bail-out, and host conversions between float and f16/bf16 bits written from
 * the IEEE formats (round to nearest even), independent of the CUDA headers. */
#ifndef GRM_TEST_CUDA_COMMON_H
#define GRM_TEST_CUDA_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grm/backend.h>

#include "grm_cuda.h"
#include "harness.h"
#include "tap.h"

#define CUDA_SKIP "no CUDA device"

/* 1 when a CUDA device is usable; every CUDA error counts as "no device". */
static inline int tc_have_device(void)
{
    static int have = -1;
    if (have < 0) have = grm_cuda_device_count() > 0;
    return have;
}

static inline void tc_bail(const char *what)
{
    printf("Bail out! %s: %s\n", what, grm_cuda_last_error());
    exit(1);
}

/* A device copy of host [bytes] (owned; grm_cuda_free). bytes 0 gives a 16-byte buffer so
 * the pointer is never NULL. */
static inline void *tc_upload(const void *host, size_t bytes)
{
    void *d = NULL;
    if (grm_cuda_malloc(&d, bytes ? bytes : 16) != GRM_OK) tc_bail("grm_cuda_malloc");
    if (bytes && grm_cuda_memcpy_h2d(d, host, bytes) != GRM_OK) tc_bail("grm_cuda_memcpy_h2d");
    return d;
}

static inline void *tc_alloc(size_t bytes)
{
    void *d = NULL;
    if (grm_cuda_malloc(&d, bytes ? bytes : 16) != GRM_OK) tc_bail("grm_cuda_malloc");
    if (grm_cuda_memset(d, 0, bytes ? bytes : 16) != GRM_OK) tc_bail("grm_cuda_memset");
    return d;
}

static inline void tc_download(void *host, const void *dev, size_t bytes)
{
    if (grm_cuda_sync(NULL) != GRM_OK) tc_bail("grm_cuda_sync");
    if (bytes && grm_cuda_memcpy_d2h(host, dev, bytes) != GRM_OK)
        tc_bail("grm_cuda_memcpy_d2h");
}

static inline void *tc_xmalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (p == NULL) {
        printf("Bail out! out of host memory\n");
        exit(1);
    }
    return p;
}

/* ---- f16 / bf16 bits on the host ---- */

static inline uint32_t tc_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float tc_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t tc_f32_to_bf16(float f)
{
    uint32_t u = tc_f32_bits(f);
    u += 0x7FFFu + ((u >> 16) & 1u);          /* round to nearest even (finite inputs) */
    return (uint16_t)(u >> 16);
}

static inline float tc_bf16_to_f32(uint16_t h)
{
    return tc_bits_f32((uint32_t)h << 16);
}

static inline float tc_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    const int32_t e = (h >> 10) & 0x1F;
    const uint32_t m = h & 0x3FFu;
    if (e == 0) {                              /* zero or subnormal: m * 2^-24 */
        const float v = (float)m * 0x1.0p-24f;
        return sign ? -v : v;
    }
    if (e == 31) return tc_bits_f32(sign | 0x7F800000u | (m << 13));
    return tc_bits_f32(sign | (uint32_t)(e - 15 + 127) << 23 | (m << 13));
}

/* float to f16, round to nearest even, for |f| < 65504 (what the tests produce). */
static inline uint16_t tc_f32_to_f16(float f)
{
    const uint32_t u = tc_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const float a = f < 0 ? -f : f;
    if (a < 0x1.0p-14f) {                       /* subnormal range: multiples of 2^-24 */
        const float q = a * 0x1.0p24f;
        float r = (float)(int64_t)q;
        const float frac = q - r;
        if (frac > 0.5f || (frac == 0.5f && ((int64_t)r & 1))) r += 1.0f;
        return (uint16_t)(sign | (uint16_t)r);
    }
    const int32_t e = (int32_t)((u >> 23) & 0xFF) - 127 + 15;
    uint32_t m = u & 0x7FFFFFu;
    uint32_t h = ((uint32_t)e << 10) | (m >> 13);
    const uint32_t rest = m & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* Conversions of element i of a host buffer of a row dtype. */
static inline float tc_get(const void *buf, int32_t dtype, int64_t i)
{
    if (dtype == GRM_DTYPE_F32) return ((const float *)buf)[i];
    if (dtype == GRM_DTYPE_F16) return tc_f16_to_f32(((const uint16_t *)buf)[i]);
    return tc_bf16_to_f32(((const uint16_t *)buf)[i]);
}

static inline void tc_set(void *buf, int32_t dtype, int64_t i, float v)
{
    if (dtype == GRM_DTYPE_F32) ((float *)buf)[i] = v;
    else if (dtype == GRM_DTYPE_F16) ((uint16_t *)buf)[i] = tc_f32_to_f16(v);
    else ((uint16_t *)buf)[i] = tc_f32_to_bf16(v);
}

static inline const char *tc_dtype_name(int32_t dtype)
{
    return dtype == GRM_DTYPE_F32 ? "f32" : dtype == GRM_DTYPE_F16 ? "f16" : "bf16";
}

/* Check the status and a substring of grm_cuda_last_error(). */
static inline void tc_expect_error(grm_status st, grm_status want, const char *substr,
                                   const char *what)
{
    const char *msg = grm_cuda_last_error();
    tap_ok(st == want && strstr(msg, substr) != NULL, "%s: status %d (want %d), message '%s'",
           what, (int)st, (int)want, msg);
}

/* Free the device arrays of attention arguments the tests uploaded (NULL ones too). */
static inline void tc_free_attn_args(const grm_hstu_attn_args *a)
{
    grm_cuda_free((void *)a->offsets), grm_cuda_free((void *)a->times);
    grm_cuda_free((void *)a->time_thr), grm_cuda_free((void *)a->q), grm_cuda_free((void *)a->k);
    grm_cuda_free((void *)a->v), grm_cuda_free((void *)a->rab_pos);
    grm_cuda_free((void *)a->rab_time);
}

#endif /* GRM_TEST_CUDA_COMMON_H */

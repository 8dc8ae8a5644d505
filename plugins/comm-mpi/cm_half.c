/* plugins/comm-mpi/cm_half.c - bf16 and f16 for comm-mpi: conversions to and from float
 * and the six MPI user reductions (sum, max, min of each) that MPI lacks for them. Each
 * pairwise step widens to float, reduces, and rounds back to nearest even, so a sum over
 * R ranks rounds R - 1 times (the same as NCCL's half-precision allreduce). */
#include <math.h>
#include <string.h>

#include "cm.h"

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// bf16 is the top half of an IEEE float.
float cm_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t cm_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                          // nearest even
    return (uint16_t)(u >> 16);
}

// f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
float cm_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {                                       // zero or subnormal: m * 2^-24
        const float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));     // inf, NaN
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t cm_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (x >= 0x477ff000u) return sign | 0x7c00u;       // >= 65520 rounds to inf
    if (x < 0x38800000u) {                              // below 2^-14: subnormal result
        // |f| * 2^24 is exact; rintf rounds to nearest even in the default mode.
        return sign | (uint16_t)rintf(bits_f32(x) * 16777216.0f);
    }
    x += 0xfffu + ((x >> 13) & 1u);                     // nearest even at bit 13
    return sign | (uint16_t)((x - (112u << 23)) >> 13);
}

// MPI_User_function bodies: inout[i] = inout[i] OP in[i], widened to float.
#define CM_HALF_OP(name, to_f32, from_f32, expr)                                   \
    void name(void *in, void *inout, int *len, MPI_Datatype *type)                 \
    {                                                                              \
        const uint16_t *a = in;                                                    \
        uint16_t *b = inout;                                                       \
        (void)type;                                                                \
        for (int i = 0; i < *len; i++) {                                           \
            const float x = to_f32(a[i]), y = to_f32(b[i]);                        \
            b[i] = from_f32(expr);                                                 \
        }                                                                          \
    }

CM_HALF_OP(cm_op_bf16_sum, cm_bf16_to_f32, cm_f32_to_bf16, x + y)
CM_HALF_OP(cm_op_bf16_max, cm_bf16_to_f32, cm_f32_to_bf16, fmaxf(x, y))
CM_HALF_OP(cm_op_bf16_min, cm_bf16_to_f32, cm_f32_to_bf16, fminf(x, y))
CM_HALF_OP(cm_op_f16_sum, cm_f16_to_f32, cm_f32_to_f16, x + y)
CM_HALF_OP(cm_op_f16_max, cm_f16_to_f32, cm_f32_to_f16, fmaxf(x, y))
CM_HALF_OP(cm_op_f16_min, cm_f16_to_f32, cm_f32_to_f16, fminf(x, y))

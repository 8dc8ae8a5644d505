/* plugins/dense-mlp/mlp_ref.c - the elementwise pieces of the MLP, shared by both linear-layer
 * implementations (linear_ref.c, linear_cpu.c): activations, inverted dropout (Srivastava
 * et al. 2014) and row-wise L2 normalization. */
#include <math.h>
#include <string.h>

#include "mlp.h"

/* ---- activations ---- */

static float sigmoidf_stable(float z)
{
    if (z >= 0)
        return 1.0f / (1.0f + expf(-z));
    const float e = expf(z);    // z < 0: exp cannot overflow
    return e / (1.0f + e);
}

void mlp_act_fwd(float *h, const float *z, int64_t n, int32_t act)
{
    switch (act) {
    case MLP_ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            h[i] = z[i] > 0 ? z[i] : 0.0f;
        break;
    case MLP_ACT_SILU:          // silu(z) = z sigmoid(z) (Elfwing et al. 2018)
        for (int64_t i = 0; i < n; i++)
            h[i] = z[i] * sigmoidf_stable(z[i]);
        break;
    case MLP_ACT_TANH:
        for (int64_t i = 0; i < n; i++)
            h[i] = tanhf(z[i]);
        break;
    default:
        if (h != z)
            memmove(h, z, (size_t)n * sizeof *h);
        break;
    }
}

void mlp_act_bwd(float *dz, const float *g, const float *z, int64_t n, int32_t act)
{
    switch (act) {
    case MLP_ACT_RELU:          // relu'(0) = 0, as PyTorch
        for (int64_t i = 0; i < n; i++)
            dz[i] = z[i] > 0 ? g[i] : 0.0f;
        break;
    case MLP_ACT_SILU:          // silu'(z) = s (1 + z (1 - s)), s = sigmoid(z)
        for (int64_t i = 0; i < n; i++) {
            const float s = sigmoidf_stable(z[i]);
            dz[i] = g[i] * s * (1.0f + z[i] * (1.0f - s));
        }
        break;
    case MLP_ACT_TANH:          // tanh'(z) = 1 - tanh(z)^2, recomputed from z
        for (int64_t i = 0; i < n; i++) {
            const float t = tanhf(z[i]);
            dz[i] = g[i] * (1.0f - t * t);
        }
        break;
    default:
        if (dz != g)
            memmove(dz, g, (size_t)n * sizeof *dz);
        break;
    }
}

/* ---- dropout ---- */

void mlp_dropout_fwd(float *h, float *mask, int64_t n, double p, uint64_t key)
{
    const float scale = (float)(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; i++) {
        // counter-based: the draw of element i is mix64(key + i), no sequential state
        const double u = mlp_unit(mlp_mix64(key + (uint64_t)i * 0x9e3779b97f4a7c15ULL));
        mask[i] = u >= p ? scale : 0.0f;
        h[i] *= mask[i];
    }
}

/* ---- row-wise L2 normalization ---- */

void mlp_l2norm_fwd(float *y, float *norm, const float *h, int64_t rows, int64_t d)
{
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t j = 0; j < d; j++)
            ss += (double)h[r * d + j] * h[r * d + j];
        norm[r] = (float)sqrt(ss);
        const float inv = 1.0f / (norm[r] > MLP_L2_EPS ? norm[r] : MLP_L2_EPS);
        for (int64_t j = 0; j < d; j++)
            y[r * d + j] = h[r * d + j] * inv;
    }
}

void mlp_l2norm_bwd(float *dh, const float *dy, const float *h, const float *norm,
                    int64_t rows, int64_t d)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *hr = h + r * d, *gr = dy + r * d;   /* [d] */
        float *dr = dh + r * d;                           /* [d] */
        if (!(norm[r] > MLP_L2_EPS)) {
            // the floor is active: y = h / eps, a linear map
            for (int64_t j = 0; j < d; j++)
                dr[j] = gr[j] / MLP_L2_EPS;
            continue;
        }
        // y = h / n:  dh = (dy - y (y . dy)) / n
        const double n = norm[r];
        double ydy = 0;
        for (int64_t j = 0; j < d; j++)
            ydy += (double)hr[j] / n * gr[j];
        for (int64_t j = 0; j < d; j++)
            dr[j] = (float)((gr[j] - hr[j] / n * ydy) / n);
    }
}

/* plugins/dense-mmoe/mmoe_ref.c - the elementwise pieces of dense-mmoe, shared by both
 * linear-layer implementations (plugins/dense-mlp/linear_ref.c, linear_cpu.c): activations
 * (in double, unlike dense-mlp's float ones) and the top-k softmax gate of MTGRBoost §2
 * eq. 4 (g_i over the k selected experts). */
#include <math.h>
#include <string.h>

#include "mmoe.h"

/* ---- activations ---- */

void mmoe_act_fwd(float *h, const float *z, int64_t n, int32_t act)
{
    for (int64_t i = 0; i < n; i++) {
        const double v = z[i];
        if (act == MMOE_ACT_RELU)
            h[i] = v > 0 ? (float)v : 0.0f;
        else if (act == MMOE_ACT_SILU)
            h[i] = (float)(v / (1.0 + exp(-v)));        // SiLU (MTGRBoost eq. 1-3)
        else
            h[i] = (float)v;
    }
}

void mmoe_act_bwd(float *dz, const float *g, const float *z, int64_t n, int32_t act)
{
    for (int64_t i = 0; i < n; i++) {
        const double v = z[i];
        double d = 1.0;
        if (act == MMOE_ACT_RELU) {
            d = v > 0 ? 1.0 : 0.0;
        } else if (act == MMOE_ACT_SILU) {
            const double s = 1.0 / (1.0 + exp(-v));
            d = s * (1.0 + v * (1.0 - s));              // d/dv v sigmoid(v)
        }
        dz[i] = (float)(g[i] * d);
    }
}

/* ---- the top-k softmax gate ---- */

void mmoe_gate_fwd(float *g, const float *q, int64_t rows, int32_t E, int32_t k)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *qr = q + r * E;                    /* [E] logits */
        float *gr = g + r * E;                          /* [E] weights */
        unsigned char sel[MMOE_MAX_EXPERTS] = { 0 };
        // k rounds of "largest unselected logit"; the strict > keeps the lowest index
        // among equal logits, so ties are broken by expert index, deterministically
        double mx = -INFINITY;
        for (int32_t round = 0; round < k; round++) {
            int32_t best = -1;
            for (int32_t e = 0; e < E; e++)
                if (!sel[e] && (best < 0 || qr[e] > qr[best]))
                    best = e;
            sel[best] = 1;
            if (round == 0)
                mx = qr[best];
        }
        double z = 0;
        for (int32_t e = 0; e < E; e++)
            if (sel[e])
                z += exp((double)qr[e] - mx);
        for (int32_t e = 0; e < E; e++)
            gr[e] = sel[e] ? (float)(exp((double)qr[e] - mx) / z) : 0.0f;
    }
}

void mmoe_gate_bwd(float *dq, const float *dg, const float *g, int64_t rows, int32_t E)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = g + r * E, *dgr = dg + r * E;  /* [E] */
        double s = 0;
        for (int32_t e = 0; e < E; e++)
            s += (double)gr[e] * dgr[e];
        // softmax Jacobian restricted to the selected experts; g_e = 0 outside them
        for (int32_t e = 0; e < E; e++)
            dq[r * E + e] = gr[e] == 0.0f ? 0.0f : (float)(gr[e] * (dgr[e] - s));
    }
}

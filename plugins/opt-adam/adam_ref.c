/* plugins/opt-adam/adam_ref.c - the Adam and AdamW update as plain loops: float
 * arithmetic per element, bias-correction factors computed in double (Kingma & Ba 2015,
 * Alg. 1; decoupled weight decay: Loshchilov & Hutter 2019, Alg. 2). Mirrors
 * torch.optim.Adam / AdamW (foreach = False). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "adam.h"

static adam_coef adam_coef_compute(const adam_config *cfg, int64_t step)
{
    const double t = (double)step;
    const double bc1 = 1.0 - pow(cfg->beta1, t);   /* 1 - beta1^t */
    const double bc2 = 1.0 - pow(cfg->beta2, t);   /* 1 - beta2^t */
    const int decoupled = cfg->variant == ADAM_VARIANT_ADAMW;
    adam_coef c = {
        .beta1 = (float)cfg->beta1,
        .beta2 = (float)cfg->beta2,
        .one_m_beta1 = (float)(1.0 - cfg->beta1),
        .one_m_beta2 = (float)(1.0 - cfg->beta2),
        .eps = (float)cfg->eps,
        .l2 = decoupled ? 0.0f : (float)cfg->weight_decay,
        .decay = decoupled ? (float)(1.0 - cfg->lr * cfg->weight_decay) : 1.0f,
        .step_size = (float)(cfg->lr / bc1),
        .inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)),
    };
    return c;
}

/* The constants of recent steps, per thread: a sparse step asks for each row's own step
 * (grm/opt.h row_step), and computing them (two pow a row) was 8.8% of the perf samples of
 * bench-tiered's in-memory Zipf loop; with 512 entries 4.3% (64 entries: 6.5%). An entry
 * is keyed by the step and every field of the config, so what it returns is what
 * adam_coef_compute returns, bit for bit. Direct-mapped by the step: the rows of a batch
 * repeat step counts (the rare ones, and a row updated every step has the step's own). */
#define ADAM_MEMO 512
typedef struct adam_memo {
    int valid;
    int64_t step;
    adam_config cfg;
    adam_coef c;
} adam_memo;
static _Thread_local adam_memo adam_memo_tab[ADAM_MEMO];

static int adam_same_config(const adam_config *a, const adam_config *b)
{
    // the doubles by their bits (0 and -0 differ), then the variant; no padding compared
    return memcmp(a, b, offsetof(adam_config, variant)) == 0 && a->variant == b->variant;
}

adam_coef adam_coef_at(const adam_config *cfg, int64_t step)
{
    adam_memo *e = &adam_memo_tab[(uint64_t)step % ADAM_MEMO];
    if (e->valid && e->step == step && adam_same_config(&e->cfg, cfg)) return e->c;
    e->c = adam_coef_compute(cfg, step);
    e->cfg = *cfg;
    e->step = step;
    e->valid = 1;
    return e->c;
}

/* One clone per ISA at -O3 (and -fno-math-errno, local.mk): gcc's -O2 left this loop
 * scalar, 10% of synthetic-tiered's training. Each element's operations and their order
 * are unchanged (no contraction into fused multiply-adds; IEEE sqrt and division in SIMD
 * lanes round as the scalar ones), so every clone gives the scalar loop's bits. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default"),
               optimize("O3", "fp-contract=off")))
#endif
static void adam_loop(float *restrict param, float *restrict m, float *restrict v,
                      const float *restrict grad, int64_t n, const adam_coef *c)
{
    // the coefficients in locals: read through c, each store could have changed them
    const float l2 = c->l2, beta1 = c->beta1, beta2 = c->beta2, one_m_beta1 = c->one_m_beta1;
    const float one_m_beta2 = c->one_m_beta2, decay = c->decay, step_size = c->step_size;
    const float inv_sqrt_bc2 = c->inv_sqrt_bc2, eps = c->eps;
    for (int64_t i = 0; i < n; i++) {
        // adam: L2 regularization enters through the gradient
        const float g = grad[i] + l2 * param[i];
        m[i] = beta1 * m[i] + one_m_beta1 * g;
        v[i] = beta2 * v[i] + one_m_beta2 * g * g;
        // adamw: the parameter decays directly, before the moment step
        const float p = param[i] * decay;
        // p -= lr * m_hat / (sqrt(v_hat) + eps), m_hat = m / bc1, v_hat = v / bc2
        param[i] = p - step_size * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
    }
}

/* The clones' resolver of an extern function is exported whatever the visibility; the
 * plugin exports grm_plugin_entry alone (tests/test-loader), so the clones stay static. */
void adam_update_ref(float *param, float *m, float *v, const float *grad, int64_t n,
                     const adam_coef *c)
{
    adam_loop(param, m, v, grad, n, c);
}

// kernels/row_opt.cu - sparse row optimizers fused with the aggregation of duplicate ids:
// one warp per unique row sums the gradients of the row's occurrences (CSR from
// grm_cuda_csr_from_inverse, in occurrence order, fp32) and applies the update in the same
// pass, so the aggregated gradient never goes to global memory (MTGRBoost §5.2 "sparse
// gradient accumulation"; RecIS §2.2.2 kernel fusion). Mirrors plugins/opt-sgd/sgd_ref.c
// (sgd_update_ref), plugins/opt-adam/adam_ref.c (adam_coef_at, adam_update_ref) with their
// row_step semantics (per-row step counts), and torch.optim.Adagrad. fp32 throughout; the
// bias corrections are computed in double as adam_coef_at does. Test tolerance
// (tests/test-cuda-opt.c): rtol 1e-4, atol 1e-5 (fused multiply-add contractions).
#include <math.h>

#include "cuda_common.cuh"

namespace {

// The per-row constants of one update; mirrors adam_coef (plugins/opt-adam/adam.h).
struct coef {
    float lr, wd, mu;               // SGD, Adagrad: lr, L2; SGD momentum
    float beta1, beta2, omb1, omb2; // Adam: decays and 1 - decays
    float eps, l2, decay;           // Adam: floor, L2 (adam), 1 - lr wd (adamw)
    float step_size, inv_sqrt_bc2;  // Adam: lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t)
    float acc0;                     // Adagrad: initial_accumulator_value
};

__device__ coef coef_at(const grm_cuda_row_opt &o, int64_t step)
{
    coef c;
    const double t = (double)step;
    c.lr = (float)o.lr;
    c.wd = (float)o.weight_decay;
    c.mu = (float)o.momentum;
    c.beta1 = (float)o.beta1;
    c.beta2 = (float)o.beta2;
    c.omb1 = (float)(1.0 - o.beta1);
    c.omb2 = (float)(1.0 - o.beta2);
    c.eps = (float)o.eps;
    c.acc0 = (float)o.initial_accumulator_value;
    const bool decoupled = o.kind == GRM_CUDA_OPT_ADAMW;
    c.l2 = decoupled ? 0.0f : (float)o.weight_decay;
    c.decay = decoupled ? (float)(1.0 - o.lr * o.weight_decay) : 1.0f;
    if (o.kind == GRM_CUDA_OPT_ADAM || o.kind == GRM_CUDA_OPT_ADAMW) {
        c.step_size = (float)(o.lr / (1.0 - pow(o.beta1, t)));
        c.inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(o.beta2, t)));
    } else if (o.kind == GRM_CUDA_OPT_ADAGRAD) {
        c.step_size = (float)(o.lr / (1.0 + (t - 1.0) * o.lr_decay));   // torch: clr
        c.inv_sqrt_bc2 = 1.0f;
    } else {
        c.step_size = c.lr;
        c.inv_sqrt_bc2 = 1.0f;
    }
    return c;
}

__global__ void row_opt_kernel(float *__restrict__ table, float *__restrict__ state,
                               int64_t *__restrict__ steps, const float *__restrict__ grad,
                               const int64_t *__restrict__ rows,
                               const int64_t *__restrict__ csr_offsets,
                               const int64_t *__restrict__ csr_index, int64_t U, int32_t D,
                               int32_t S, grm_cuda_row_opt o)
{
    const int lane = threadIdx.x & 31;
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t u = warp; u < U; u += nwarps) {
        const int64_t b = csr_offsets[u], e = csr_offsets[u + 1];
        if (e <= b) continue;                          // no gradient: no step
        const int64_t row = rows[u];
        const int64_t t = steps[row] + 1;
        const coef c = coef_at(o, t);
        float *p = table + row * D;
        float *st = state != nullptr ? state + row * (int64_t)S * D : nullptr;
        for (int32_t j = lane; j < D; j += 32) {
            float g = 0.0f;
            for (int64_t k = b; k < e; k++) g += grad[csr_index[k] * D + j];
            float x = p[j];
            switch (o.kind) {
            case GRM_CUDA_OPT_SGD: {                   // sgd_update_ref
                g = g + c.wd * x;
                if (st != nullptr) {
                    const float buf = t == 1 ? g : c.mu * st[j] + g;
                    st[j] = buf;
                    g = o.nesterov ? g + c.mu * buf : buf;
                }
                x -= c.lr * g;
                break;
            }
            case GRM_CUDA_OPT_ADAM:
            case GRM_CUDA_OPT_ADAMW: {                 // adam_update_ref
                g = g + c.l2 * x;
                const float m = c.beta1 * st[j] + c.omb1 * g;
                const float v = c.beta2 * st[D + j] + c.omb2 * g * g;
                st[j] = m;
                st[D + j] = v;
                x = x * c.decay;
                x = x - c.step_size * m / (sqrtf(v) * c.inv_sqrt_bc2 + c.eps);
                break;
            }
            default: {                                 // torch.optim.Adagrad
                g = g + c.wd * x;
                const float sum = (t == 1 ? c.acc0 : st[j]) + g * g;   // opt-adagrad
                st[j] = sum;
                x = x - c.step_size * g / (sqrtf(sum) + c.eps);
                break;
            }
            }
            p[j] = x;
        }
        __syncwarp();
        if (lane == 0) steps[row] = t;
    }
}

} // namespace

extern "C" int32_t grm_cuda_row_opt_state_floats(const grm_cuda_row_opt *opt)
{
    switch (opt->kind) {
    case GRM_CUDA_OPT_SGD: return opt->momentum > 0 ? 1 : 0;
    case GRM_CUDA_OPT_ADAM:
    case GRM_CUDA_OPT_ADAMW: return 2;
    case GRM_CUDA_OPT_ADAGRAD: return 1;
    default: return -1;
    }
}

extern "C" grm_status grm_cuda_row_opt_step(float *table, float *state, int64_t *steps,
                                            const float *grad, const int64_t *rows,
                                            const int64_t *csr_offsets,
                                            const int64_t *csr_index, int64_t U, int32_t D,
                                            const grm_cuda_row_opt *opt, void *stream)
{
    const char *fn = "grm_cuda_row_opt_step";
    const int32_t S = grm_cuda_row_opt_state_floats(opt);
    if (S < 0)
        return grm_cuda__errorf(GRM_EINVAL, "%s: optimizer kind %d unknown; use "
                                "GRM_CUDA_OPT_SGD, _ADAM, _ADAMW or _ADAGRAD", fn,
                                (int)opt->kind);
    if (!(opt->lr > 0))
        return grm_cuda__errorf(GRM_EINVAL, "%s: lr %g must be > 0", fn, opt->lr);
    if (D < 1) return grm_cuda__errorf(GRM_EINVAL, "%s: D %d < 1", fn, (int)D);
    if (U < 0) return grm_cuda__errorf(GRM_EINVAL, "%s: U %lld < 0", fn, (long long)U);
    if (S > 0 && state == nullptr)
        return grm_cuda__errorf(GRM_EINVAL, "%s: state is NULL but the optimizer keeps %d "
                                "floats per element", fn, (int)S);
    if (U == 0) return GRM_OK;
    row_opt_kernel<<<grm_cuda__blocks(U * 32, 256), 256, 0, grm_cuda__stream(stream)>>>(
        table, S > 0 ? state : nullptr, steps, grad, rows, csr_offsets, csr_index, U, D, S,
        *opt);
    GRM_CUDA_CHECK_LAUNCH();
    return GRM_OK;
}

/* tests/test-cuda-hstu.c - kernels/hstu_attn.cu against plain C written here (double
 * accumulation) of the HSTU pointwise attention, per sequence b and head h, i < L_b:
 *   s_ij = alpha q_i . k_j + rab[h, min(i - j, R - 1)],  out_i = sum_{j<=i} SiLU(s_ij) v_j / n
 * and its analytic backward (dq, dk, dv, drab). The C backward is itself checked against
 * central finite differences of the C forward (runs without a device). Cases: jagged
 * lengths 0, 1, 63, 64, 65, 130, 200 (tile edges, empty and length-1 sequences), D 32 with
 * Dv 48, rab with clipping (R 50 < L); and D = Dv = 128 without rab. Tolerance: rtol 1e-4,
 * atol 1e-5 (fp32 accumulation over up to 200 terms). */
#include <math.h>

#include "cuda-common.h"

#define N_NEG 3
#define N_CASES 2
#define N_PER_CASE 5

typedef struct acase {
    const char *name;
    int64_t B;
    const int64_t *lens;
    int32_t H, D, Dv, R;    /* R 0: no rab */
    float alpha, n;
} acase;

typedef struct adata {
    int64_t T, max_len;
    int64_t *offsets;               /* [B+1] */
    float *q, *k, *v, *rab, *dout;  /* [T,H,D] [T,H,D] [T,H,Dv] [H,R] [T,H,Dv] */
} adata;

/* ---- the reference ---- */

static double silu(double x)
{
    return x / (1.0 + exp(-x));
}

static double ref_score(const acase *c, const adata *d, int64_t ti, int64_t tj, int32_t h,
                        int64_t rel)
{
    double qk = 0;
    for (int32_t e = 0; e < c->D; e++)
        qk += (double)d->q[(ti * c->H + h) * c->D + e] * d->k[(tj * c->H + h) * c->D + e];
    double s = c->alpha * qk;
    if (c->R > 0) s += d->rab[h * c->R + (rel < c->R - 1 ? rel : c->R - 1)];
    return s;
}

static void ref_fwd(const acase *c, const adata *d, double *out /* [T,H,Dv] */)
{
    memset(out, 0, (size_t)d->T * c->H * c->Dv * sizeof(double));
    for (int64_t b = 0; b < c->B; b++)
        for (int32_t h = 0; h < c->H; h++)
            for (int64_t ti = d->offsets[b]; ti < d->offsets[b + 1]; ti++)
                for (int64_t tj = d->offsets[b]; tj <= ti; tj++) {
                    const double a = silu(ref_score(c, d, ti, tj, h, ti - tj)) / c->n;
                    for (int32_t e = 0; e < c->Dv; e++)
                        out[(ti * c->H + h) * c->Dv + e] +=
                            a * d->v[(tj * c->H + h) * c->Dv + e];
                }
}

static void ref_bwd(const acase *c, const adata *d, double *dq, double *dk, double *dv,
                    double *drab)
{
    const int32_t H = c->H, D = c->D, Dv = c->Dv;
    memset(dq, 0, (size_t)d->T * H * D * sizeof(double));
    memset(dk, 0, (size_t)d->T * H * D * sizeof(double));
    memset(dv, 0, (size_t)d->T * H * Dv * sizeof(double));
    memset(drab, 0, (size_t)H * (c->R > 0 ? c->R : 1) * sizeof(double));
    for (int64_t b = 0; b < c->B; b++)
        for (int32_t h = 0; h < H; h++)
            for (int64_t ti = d->offsets[b]; ti < d->offsets[b + 1]; ti++)
                for (int64_t tj = d->offsets[b]; tj <= ti; tj++) {
                    const int64_t rel = ti - tj;
                    const double s = ref_score(c, d, ti, tj, h, rel);
                    const double sg = 1.0 / (1.0 + exp(-s));
                    double dp = 0;
                    for (int32_t e = 0; e < Dv; e++) {
                        dp += (double)d->dout[(ti * H + h) * Dv + e] * d->v[(tj * H + h) * Dv + e];
                        dv[(tj * H + h) * Dv + e] +=
                            s * sg / c->n * d->dout[(ti * H + h) * Dv + e];
                    }
                    const double ds = dp * sg * (1.0 + s * (1.0 - sg)) / c->n;
                    for (int32_t e = 0; e < D; e++) {
                        dq[(ti * H + h) * D + e] += c->alpha * ds * d->k[(tj * H + h) * D + e];
                        dk[(tj * H + h) * D + e] += c->alpha * ds * d->q[(ti * H + h) * D + e];
                    }
                    if (c->R > 0) drab[h * c->R + (rel < c->R - 1 ? rel : c->R - 1)] += ds;
                }
}

/* ---- inputs ---- */

static adata make_data(const acase *c, uint64_t *rng)
{
    adata d;
    d.offsets = tc_xmalloc((size_t)(c->B + 1) * 8);
    d.max_len = 0;
    for (int64_t b = 0; b < c->B; b++) {
        d.offsets[b + 1] = d.offsets[b] + c->lens[b];
        if (c->lens[b] > d.max_len) d.max_len = c->lens[b];
    }
    d.T = d.offsets[c->B];
    const size_t nq = (size_t)d.T * c->H * c->D, nv = (size_t)d.T * c->H * c->Dv;
    d.q = tc_xmalloc(nq * 4), d.k = tc_xmalloc(nq * 4), d.v = tc_xmalloc(nv * 4);
    d.dout = tc_xmalloc(nv * 4);
    d.rab = tc_xmalloc((size_t)c->H * (c->R > 0 ? c->R : 1) * 4);
    for (size_t i = 0; i < nq; i++) d.q[i] = harness_randf(rng), d.k[i] = harness_randf(rng);
    for (size_t i = 0; i < nv; i++) d.v[i] = harness_randf(rng), d.dout[i] = harness_randf(rng);
    for (int64_t i = 0; i < (int64_t)c->H * c->R; i++) d.rab[i] = 0.5f * harness_randf(rng);
    return d;
}

static void free_data(adata *d)
{
    free(d->offsets), free(d->q), free(d->k), free(d->v), free(d->dout), free(d->rab);
}

static void to_f32(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

/* loss = sum out . dout; its gradient by central differences at a few entries of q, k, v,
 * rab against ref_bwd (double, so tight) */
static void fd_check(const acase *c, uint64_t *rng)
{
    adata d = make_data(c, rng);
    const size_t nq = (size_t)d.T * c->H * c->D, nv = (size_t)d.T * c->H * c->Dv;
    double *out = tc_xmalloc(nv * 8), *dq = tc_xmalloc(nq * 8), *dk = tc_xmalloc(nq * 8);
    double *dv = tc_xmalloc(nv * 8), *drab = tc_xmalloc((size_t)c->H * c->R * 8);
    ref_bwd(c, &d, dq, dk, dv, drab);
    double max_err = 0;
    float *tensors[4] = {d.q, d.k, d.v, d.rab};
    const double *grads[4] = {dq, dk, dv, drab};
    const size_t sizes[4] = {nq, nq, nv, (size_t)c->H * c->R};
    for (int t = 0; t < 4; t++)
        for (int p = 0; p < 6; p++) {
            const size_t idx = (size_t)(harness_rand(rng) % sizes[t]);
            const float keep = tensors[t][idx];
            const float eps = 1e-2f;
            double lp = 0, lm = 0;
            tensors[t][idx] = keep + eps;
            ref_fwd(c, &d, out);
            for (size_t i = 0; i < nv; i++) lp += out[i] * d.dout[i];
            tensors[t][idx] = keep - eps;
            ref_fwd(c, &d, out);
            for (size_t i = 0; i < nv; i++) lm += out[i] * d.dout[i];
            tensors[t][idx] = keep;
            const double fd = (lp - lm) / (2.0 * (double)eps);
            const double err = fabs(fd - grads[t][idx]) / (fabs(grads[t][idx]) + 1e-3);
            if (err > max_err) max_err = err;
        }
    tap_ok(max_err < 1e-3, "C reference backward (dq, dk, dv, drab) matches central finite "
           "differences of the C forward: max rel err %.2g", max_err);
    free(out), free(dq), free(dk), free(dv), free(drab);
    free_data(&d);
}

static void run_case(const acase *c, uint64_t *rng)
{
    adata d = make_data(c, rng);
    const int32_t H = c->H;
    const size_t nq = (size_t)d.T * H * c->D, nv = (size_t)d.T * H * c->Dv;
    const size_t nr = (size_t)H * (c->R > 0 ? c->R : 1);
    double *out = tc_xmalloc(nv * 8), *dq = tc_xmalloc(nq * 8), *dk = tc_xmalloc(nq * 8);
    double *dv = tc_xmalloc(nv * 8), *drab = tc_xmalloc(nr * 8);
    float *want = tc_xmalloc((nq > nv ? nq : nv) * 4 + nr * 4);
    float *got = tc_xmalloc((nq > nv ? nq : nv) * 4 + nr * 4);
    ref_fwd(c, &d, out);
    ref_bwd(c, &d, dq, dk, dv, drab);
    int64_t *d_off = tc_upload(d.offsets, (size_t)(c->B + 1) * 8);
    float *d_q = tc_upload(d.q, nq * 4), *d_k = tc_upload(d.k, nq * 4);
    float *d_v = tc_upload(d.v, nv * 4), *d_do = tc_upload(d.dout, nv * 4);
    float *d_rab = c->R > 0 ? tc_upload(d.rab, nr * 4) : NULL;
    float *d_out = tc_alloc(nv * 4), *d_dq = tc_alloc(nq * 4), *d_dk = tc_alloc(nq * 4);
    float *d_dv = tc_alloc(nv * 4), *d_drab = c->R > 0 ? tc_alloc(nr * 4) : NULL;
    char what[160];

    grm_status st = grm_cuda_hstu_attn_fwd(d_out, d_q, d_k, d_v, d_rab, d_off, c->B, H, c->D,
                                           c->Dv, c->R, d.max_len, c->alpha, c->n, NULL);
    tc_download(got, d_out, nv * 4);
    to_f32(want, out, nv);
    snprintf(what, sizeof what, "hstu_attn_fwd %s: out (st=%d)", c->name, (int)st);
    tap_close_f32(got, want, (int64_t)nv, 1e-4, 1e-5, what);

    st = grm_cuda_hstu_attn_bwd(d_dq, d_dk, d_dv, d_drab, d_do, d_q, d_k, d_v, d_rab, d_off,
                                c->B, H, c->D, c->Dv, c->R, d.max_len, c->alpha, c->n, NULL);
    tc_download(got, d_dq, nq * 4);
    to_f32(want, dq, nq);
    snprintf(what, sizeof what, "hstu_attn_bwd %s: dq (st=%d)", c->name, (int)st);
    tap_close_f32(got, want, (int64_t)nq, 1e-4, 1e-5, what);
    tc_download(got, d_dk, nq * 4);
    to_f32(want, dk, nq);
    snprintf(what, sizeof what, "hstu_attn_bwd %s: dk", c->name);
    tap_close_f32(got, want, (int64_t)nq, 1e-4, 1e-5, what);
    tc_download(got, d_dv, nv * 4);
    to_f32(want, dv, nv);
    snprintf(what, sizeof what, "hstu_attn_bwd %s: dv", c->name);
    tap_close_f32(got, want, (int64_t)nv, 1e-4, 1e-5, what);
    if (c->R > 0) {
        tc_download(got, d_drab, nr * 4);
        to_f32(want, drab, nr);
        snprintf(what, sizeof what, "hstu_attn_bwd %s: drab [H, R] (clipped at R - 1)",
                 c->name);
        tap_close_f32(got, want, (int64_t)nr, 1e-4, 1e-4, what);
    } else {
        tap_ok(st == GRM_OK, "hstu_attn_bwd %s: no rab, no drab", c->name);
    }
    grm_cuda_free(d_off), grm_cuda_free(d_q), grm_cuda_free(d_k), grm_cuda_free(d_v);
    grm_cuda_free(d_do), grm_cuda_free(d_rab), grm_cuda_free(d_out), grm_cuda_free(d_dq);
    grm_cuda_free(d_dk), grm_cuda_free(d_dv), grm_cuda_free(d_drab);
    free(out), free(dq), free(dk), free(dv), free(drab), free(want), free(got);
    free_data(&d);
}

static void negative_tests(void)
{
    float x = 0;
    int64_t o[2] = {0, 1};
    tc_expect_error(grm_cuda_hstu_attn_fwd(&x, &x, &x, &x, NULL, o, 1, 1, 129, 8, 0, 1, 1.0f,
                                           1.0f, NULL),
                    GRM_EINVAL, "D 129 and Dv 8 must lie in [1, 128]", "attn_fwd refuses D 129");
    tc_expect_error(grm_cuda_hstu_attn_fwd(&x, &x, &x, &x, NULL, o, 1, 1, 8, 8, 0, 1, 1.0f,
                                           0.0f, NULL),
                    GRM_EINVAL, "n 0 must be > 0", "attn_fwd refuses n 0");
    tc_expect_error(grm_cuda_hstu_attn_bwd(&x, &x, &x, NULL, &x, &x, &x, &x, &x, o, 1, 1, 8, 8,
                                           4, 1, 1.0f, 1.0f, NULL),
                    GRM_EINVAL, "drab and rab must both be given",
                    "attn_bwd refuses rab without drab");
}

int main(void)
{
    static const int64_t lens1[] = {0, 1, 63, 64, 65, 130, 200};
    static const int64_t lens2[] = {1, 129};
    static const int64_t lens_fd[] = {3, 0, 7};
    const acase cases[N_CASES] = {
        {"jagged 0/1/63/64/65/130/200, H 2, D 32, Dv 48, rab R 50", 7, lens1, 2, 32, 48, 50,
         0.3f, 200.0f},
        {"lengths 1/129, H 1, D = Dv = 128, no rab", 2, lens2, 1, 128, 128, 0, 0.125f, 129.0f},
    };
    const acase fd_case = {"fd", 3, lens_fd, 2, 5, 4, 4, 0.7f, 7.0f};
    uint64_t rng = 0x68737475ULL;
    tap_plan(N_NEG + 1 + N_CASES * N_PER_CASE);
    negative_tests();
    fd_check(&fd_case, &rng);
    if (!tc_have_device()) {
        for (int k = 0; k < N_CASES * N_PER_CASE; k++)
            tap_skip(CUDA_SKIP, "hstu attention case %d", k + 1);
        return tap_done();
    }
    for (int k = 0; k < N_CASES; k++) run_case(&cases[k], &rng);
    return tap_done();
}

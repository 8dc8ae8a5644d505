/* tests/test-cuda-backend.c - the cuda backend of grm/backend.h (kernels/backend_cuda.c),
 * opened as the trainer opens it (grm__backend_open("cuda:0"): the grm-cuda.so module),
 * against the ref backend (core/backend_ref.c) on the same seeded inputs: gather, scatter-add
 * with duplicate-heavy indices, sum and mean pooling over segments with empty ones, the sum
 * pooling backward, segment unique over several segments (its ids, segments, counts, inverse
 * and count), and the GEMM in all four transposes. The CPU backends have no attention op,
 * so the iface's HSTU attention (both biases, a strided view) is held to tests/hstu-ref.h,
 * the C restatement of dense-hstu's hstu_ref.c. Atomics make the device's duplicate sums
 * unordered: fp32 tolerance there, equality for the rest. Every case SKIPs without a GPU. */
#include "backend.h"
#include "cuda-common.h"
#include "hstu-ref.h"

#include <grm/rng.h>

enum { NCASES = 11 };

static uint64_t rs = 99;

static float rndf(void)
{
    rs = grm_mix64(rs + 0x9e3779b97f4a7c15ULL);
    return (float)(rs % 2000001) / 1e6f - 1.0f;
}

static int64_t rnd(int64_t n)
{
    rs = grm_mix64(rs + 0x9e3779b97f4a7c15ULL);
    return (int64_t)(rs % (uint64_t)n);
}

/* A host copy of device [bytes] (owned; free). */
static void *down(const void *d, size_t bytes)
{
    void *h = tc_xmalloc(bytes);
    tc_download(h, d, bytes);
    return h;
}

/* The iface's HSTU attention on one jagged batch (lengths 0, 3, 70, 129: tile edges and a
 * sequence past max_len 40), H 2, dqk 16, dv 24 in a view of ld 53, both biases with 12
 * time buckets, norm max_len: out, then dq, dk, dv and the bias gradients accumulated onto
 * nonzero starts, against hstu-ref.h. Three cases. */
static void check_attention(const grm_backend_iface *C, void *ctx)
{
    enum { B = 4, H = 2, DQK = 16, DV = 24, LD = 53, ML = 40, NB = 12, HV = H * DV };
    const int64_t off[B + 1] = { 0, 0, 3, 73, 202 }, N = off[B];
    int64_t times[202], thr[NB];
    float *q = malloc(sizeof(float) * N * LD), *k = malloc(sizeof(float) * N * LD);
    float *v = malloc(sizeof(float) * N * LD), *dov = malloc(sizeof(float) * N * HV);
    float rp[H * ML], rt[H * NB], gp0[H * ML], gt0[H * NB];
    for (int64_t i = 0; i < N * LD; i++) q[i] = rndf(), k[i] = rndf(), v[i] = rndf();
    for (int64_t i = 0; i < N * HV; i++) dov[i] = rndf();
    for (int i = 0; i < H * ML; i++) rp[i] = 0.5f * rndf(), gp0[i] = rndf();
    for (int i = 0; i < H * NB; i++) rt[i] = 0.5f * rndf(), gt0[i] = rndf();
    for (int64_t i = 0; i < N; i++) times[i] = 1700000000 + rnd(300);
    href_time_thresholds(thr, NB);
    grm_hstu_attn_args a = {
        .nseq = B, .offsets = off, .times = times, .H = H, .dqk = DQK, .dv = DV, .ld = LD,
        .q = q, .k = k, .v = v, .rab_pos = rp, .rab_time = rt, .max_len = ML, .nbuckets = NB,
        .time_thr = thr, .norm = GRM_HSTU_NORM_MAX_LEN,
    };
    double *out = calloc((size_t)(N * HV), 8), *dq = calloc((size_t)(N * LD), 8);
    double *dk = calloc((size_t)(N * LD), 8), *dv = calloc((size_t)(N * LD), 8);
    double gp[H * ML], gt[H * NB];
    for (int i = 0; i < H * ML; i++) gp[i] = gp0[i];
    for (int i = 0; i < H * NB; i++) gt[i] = gt0[i];
    href_fwd(out, &a);
    href_bwd(dq, dk, dv, gp, gt, dov, &a);

    tap_ok(GRM_HAS_OP(grm_backend_iface, C, hstu_attn_fwd)
               && GRM_HAS_OP(grm_backend_iface, C, hstu_attn_bwd)
               && GRM_HAS_OP(grm_backend_iface, C, hstu_attn_ws_bytes),
           "the cuda iface has the HSTU attention ops (since 1.7)");
    grm_hstu_attn_args d = a;
    d.offsets = tc_upload(off, sizeof off), d.times = tc_upload(times, sizeof(int64_t) * N);
    d.time_thr = tc_upload(thr, sizeof thr);
    d.q = tc_upload(q, sizeof(float) * N * LD), d.k = tc_upload(k, sizeof(float) * N * LD);
    d.v = tc_upload(v, sizeof(float) * N * LD);
    d.rab_pos = tc_upload(rp, sizeof rp), d.rab_time = tc_upload(rt, sizeof rt);
    float *ddo = tc_upload(dov, sizeof(float) * N * HV), *dout = tc_alloc(sizeof(float) * N * HV);
    float *ddq = tc_alloc(sizeof(float) * N * LD), *ddk = tc_alloc(sizeof(float) * N * LD);
    float *ddv = tc_alloc(sizeof(float) * N * LD);
    float *dgp = tc_upload(gp0, sizeof gp0), *dgt = tc_upload(gt0, sizeof gt0);
    void *ws = tc_alloc(C->hstu_attn_ws_bytes(ctx, N, B, H, ML + NB));
    grm_status st = C->hstu_attn_fwd(ctx, dout, &d, ws);
    float *got = down(dout, sizeof(float) * N * HV), *want = malloc(sizeof(float) * N * LD);
    for (int64_t i = 0; i < N * HV; i++) want[i] = (float)out[i];
    if (st != GRM_OK) tap_ok(0, "hstu_attn_fwd: %s", grm_last_error());
    else tap_close_f32(got, want, N * HV, 1e-4, 1e-5, "hstu_attn_fwd vs hstu-ref.h");
    free(got);
    st = C->hstu_attn_bwd(ctx, ddq, ddk, ddv, dgp, dgt, ddo, &d, ws);
    int ok = st == GRM_OK;
    double worst = 0;
    const float *dev[3] = { ddq, ddk, ddv };
    const double *ref[3] = { dq, dk, dv };
    const int64_t w[3] = { H * DQK, H * DQK, HV };
    for (int t = 0; t < 3; t++) {
        float *g = down(dev[t], sizeof(float) * N * LD);
        for (int64_t r = 0; r < N; r++)
            for (int64_t x = 0; x < w[t]; x++) {
                const double e = fabs(g[r * LD + x] - ref[t][r * LD + x]);
                ok &= e <= 1e-5 + 1e-4 * fabs(ref[t][r * LD + x]);
                if (e > worst) worst = e;
            }
        free(g);
    }
    float *g = down(dgp, sizeof gp0);
    for (int i = 0; i < H * ML; i++) ok &= fabs(g[i] - gp[i]) <= 1e-4 + 1e-4 * fabs(gp[i]);
    free(g);
    g = down(dgt, sizeof gt0);
    for (int i = 0; i < H * NB; i++) ok &= fabs(g[i] - gt[i]) <= 1e-4 + 1e-4 * fabs(gt[i]);
    free(g);
    tap_ok(ok, "hstu_attn_bwd: dq, dk, dv and the accumulated d_rab_pos, d_rab_time within "
           "fp32 tolerance of hstu-ref.h (max abs err of dq/dk/dv %.3g; %s)", worst,
           st ? grm_last_error() : "ok");
    tc_free_attn_args(&d);
    grm_cuda_free(ddo), grm_cuda_free(dout);
    grm_cuda_free(ddq), grm_cuda_free(ddk), grm_cuda_free(ddv), grm_cuda_free(dgp);
    grm_cuda_free(dgt), grm_cuda_free(ws);
    free(q), free(k), free(v), free(dov), free(out), free(dq), free(dk), free(dv), free(want);
}

int main(void)
{
    const grm_backend_iface *R = &grm__backend_ref_iface;
    tap_plan(NCASES);
    if (!tc_have_device()) {
        for (int i = 0; i < NCASES; i++)
            printf("ok %d - cuda backend case %d against ref # SKIP %s\n", i + 1, i + 1,
                   CUDA_SKIP);
        return 0;
    }
    grm_backend be;
    grm_status st = grm__backend_open("cuda:0", &be);
    tap_ok(st == GRM_OK && be.iface && strcmp(be.iface->name(be.context), "cuda") == 0,
           "device = cuda:0 opens the cuda backend from its module (%s)",
           st ? grm_last_error() : "ok");
    if (st != GRM_OK) {
        printf("Bail out! no cuda backend on a machine with a device\n");
        return 1;
    }
    const grm_backend_iface *C = be.iface;
    void *ctx = be.context;
    enum { N = 3000, NR = 200, D = 24, B = 150, F = 3 };
    float *rows = malloc(sizeof(float) * NR * D), *src = malloc(sizeof(float) * N * D);
    int64_t idx[N], off[B + 1], soff[F + 1] = { 0, 1000, 1000, N };
    for (int i = 0; i < NR * D; i++) rows[i] = rndf();
    for (int i = 0; i < N * D; i++) src[i] = rndf();
    for (int i = 0; i < N; i++) idx[i] = rnd(i % 3 ? NR : 4);   /* duplicate-heavy */
    off[0] = 0;
    for (int b = 0; b < B; b++) off[b + 1] = b % 5 == 0 ? off[b] : off[b] + rnd(40);
    if (off[B] > N) off[B] = N;
    for (int b = 0; b < B; b++) if (off[b + 1] > off[B]) off[b + 1] = off[B];
    float *dr = tc_upload(rows, sizeof(float) * NR * D);
    float *ds = tc_upload(src, sizeof(float) * N * D);
    int64_t *di = tc_upload(idx, sizeof idx), *doff = tc_upload(off, sizeof off);
    float *hout = malloc(sizeof(float) * N * D), *dout = tc_alloc(sizeof(float) * N * D);
    void *work = NULL;
    C->work_create(ctx, &work);

    // gather
    R->gather(NULL, hout, rows, idx, N, NR, D, NULL);
    st = C->gather(ctx, dout, dr, di, N, NR, D, NULL);
    float *got = down(dout, sizeof(float) * N * D);
    tap_ok(st == GRM_OK && memcmp(got, hout, sizeof(float) * N * D) == 0,
           "gather of %d rows equals ref", N);
    free(got);
    // scatter-add, duplicates summed by atomics
    float *acc = malloc(sizeof(float) * NR * D);
    memcpy(acc, rows, sizeof(float) * NR * D);
    R->scatter_add(NULL, acc, src, idx, N, NR, D, NULL, NULL);
    st = C->scatter_add(ctx, dr, ds, di, N, NR, D, work, NULL);
    got = down(dr, sizeof(float) * NR * D);
    if (st != GRM_OK) tap_ok(0, "scatter-add: %s", grm_last_error());
    else tap_close_f32(got, acc, NR * D, 1e-4, 1e-4, "scatter-add (duplicate-heavy) vs ref");
    free(got);
    // pooling: sum and mean, forward; sum backward
    for (int32_t mode = GRM_POOL_SUM; mode <= GRM_POOL_MEAN; mode++) {
        float *dr2 = tc_upload(rows, sizeof(float) * NR * D);
        R->segment_reduce(NULL, hout, rows, idx, off, B, NR, D, mode, NULL);
        st = C->segment_reduce(ctx, dout, dr2, di, doff, B, NR, D, mode, NULL);
        got = down(dout, sizeof(float) * B * D);
        if (st != GRM_OK) tap_ok(0, "segment_reduce: %s", grm_last_error());
        else tap_close_f32(got, hout, B * D, 1e-5, 1e-5,
                           mode ? "mean pooling vs ref" : "sum pooling vs ref");
        free(got);
        grm_cuda_free(dr2);
    }
    R->segment_reduce_bwd(NULL, hout, src, off, B, D, GRM_POOL_SUM, NULL);
    st = C->segment_reduce_bwd(ctx, dout, ds, doff, B, D, GRM_POOL_SUM, NULL);
    got = down(dout, sizeof(float) * off[B] * D);
    tap_ok(st == GRM_OK && memcmp(got, hout, sizeof(float) * off[B] * D) == 0,
           "sum pooling backward equals ref");
    free(got);
    // segment unique
    int64_t hu[N], hinv[N], hc[F], nu = 0, dnu = 0;
    int32_t hf[N];
    R->segment_unique(NULL, hu, hf, hc, hinv, &nu, idx, soff, N, F, NULL, NULL);
    int64_t *du = tc_alloc(sizeof hu), *dinv = tc_alloc(sizeof hinv);
    int64_t *dc = tc_alloc(sizeof hc), *dso = tc_upload(soff, sizeof soff);
    int32_t *df = tc_alloc(sizeof hf);
    st = C->segment_unique(ctx, du, df, dc, dinv, &dnu, di, dso, N, F, work, NULL);
    int64_t *gu = down(du, sizeof hu), *ginv = down(dinv, sizeof hinv), *gc = down(dc, sizeof hc);
    int32_t *gf = down(df, sizeof hf);
    tap_ok(st == GRM_OK && dnu == nu && memcmp(gu, hu, sizeof(int64_t) * nu) == 0
               && memcmp(gf, hf, sizeof(int32_t) * nu) == 0 && memcmp(gc, hc, sizeof hc) == 0
               && memcmp(ginv, hinv, sizeof hinv) == 0,
           "segment unique of %d ids in %d segments (%lld unique) equals ref", N, F,
           (long long)nu);
    // gemm, four transposes
    int ok = 1;
    for (int t = 0; t < 4; t++) {
        const int ta = t & 1, tb = t >> 1, M = 37, Nn = 29, K = 53;
        float A[M * K], Bm[K * Nn], c1[M * Nn], c2[M * Nn];
        for (int i = 0; i < M * K; i++) A[i] = rndf();
        for (int i = 0; i < K * Nn; i++) Bm[i] = rndf();
        for (int i = 0; i < M * Nn; i++) c1[i] = c2[i] = rndf();
        R->gemm(NULL, ta, tb, M, Nn, K, 0.5f, A, ta ? M : K, Bm, tb ? K : Nn, 2.0f, c1, Nn, NULL);
        float *dA = tc_upload(A, sizeof A), *dB = tc_upload(Bm, sizeof Bm);
        float *dC = tc_upload(c2, sizeof c2);
        st = C->gemm(ctx, ta, tb, M, Nn, K, 0.5f, dA, ta ? M : K, dB, tb ? K : Nn, 2.0f, dC, Nn,
                     NULL);
        float *g = down(dC, sizeof c2);
        for (int i = 0; i < M * Nn; i++)
            ok &= st == GRM_OK && fabsf(g[i] - c1[i]) <= 1e-4f + 1e-4f * fabsf(c1[i]);
        free(g);
        grm_cuda_free(dA);
        grm_cuda_free(dB);
        grm_cuda_free(dC);
    }
    tap_ok(ok, "gemm NN, TN, NT, TT with alpha and beta within fp32 tolerance of ref");
    check_attention(C, ctx);
    C->work_destroy(ctx, work);
    grm__backend_close(&be);
    return tap_done();
}

/* tests/test-cuda-hstu.c - kernels/hstu_attn.cu (grm_cuda_hstu_attn_fwd, _bwd: the types and
 * semantics of grm_hstu_attn_args, grm/backend.h) against tests/hstu-ref.h, plain C with
 * double accumulators that restates plugins/dense-hstu/hstu_ref.c. Without a device: the
 * argument checks (each message names the value), the thresholds the kernel counts against
 * the log bucket formula, and the C backward against central finite differences of the C
 * forward, with both biases and either norm. On a device: jagged lengths 0, 1, 63, 64, 65,
 * 130, 200 (tile edges, empty and length-1 sequences, most longer than max_len 50, so the
 * position bias clips and the grid cannot come from max_len), dqk 32 and dv 48 in a strided
 * view (ld > H * max(dqk, dv)), both biases with 16 time buckets over epoch-second times,
 * norm max_len; dqk = dv = 128 with no bias, norm length; rab_pos with rab_time but no
 * times (no time term, nothing added to d_rab_time); broken offsets. Each case checks out,
 * dq, dk, dv (written over garbage: overwritten), d_rab_pos and d_rab_time (over nonzero
 * starts: accumulated) and the view columns outside the heads (untouched). Tolerance:
 * rtol 1e-4, atol 1e-5; bias gradients atol 1e-4 (sums of up to L^2/2 terms in fp32). */
#include <math.h>

#include "cuda-common.h"
#include "hstu-ref.h"

#define N_NEG 8
#define N_CPU 3
#define N_CASES 3
#define N_PER_CASE 7
#define N_DEV_EXTRA 1

static const float kGarbage = 7.0f;     /* what the outputs hold before a call */

typedef struct acase {
    const char *name;
    int64_t B;
    const int64_t *lens;
    int64_t H, dqk, dv, ld_pad;         /* ld = H * max(dqk, dv) + ld_pad */
    int pos;                            /* rab_pos and d_rab_pos given */
    int rt;                             /* rab_time and d_rab_time given */
    int times;                          /* times given */
    int64_t max_len, nbuckets;
    int32_t norm;                       /* grm_hstu_norm */
} acase;

/* One problem on the host: a.* point at the arrays below. */
typedef struct adata {
    grm_hstu_attn_args a;
    int64_t N;
    int64_t *offsets, *times, *thr;     /* [B+1], [N], [nbuckets] */
    float *q, *k, *v;                   /* [N, ld] */
    float *rab_pos, *rab_time;          /* [H, max_len], [H, nbuckets] */
    float *dout;                        /* [N, H*dv] */
} adata;

static adata make_data(const acase *c, uint64_t *rng)
{
    adata d;
    memset(&d, 0, sizeof d);
    d.offsets = tc_xmalloc((size_t)(c->B + 1) * 8);
    for (int64_t b = 0; b < c->B; b++) d.offsets[b + 1] = d.offsets[b] + c->lens[b];
    d.N = d.offsets[c->B];
    const int64_t ld = c->H * (c->dqk > c->dv ? c->dqk : c->dv) + c->ld_pad;
    const size_t nx = (size_t)(d.N * ld), no = (size_t)(d.N * c->H * c->dv);
    d.q = tc_xmalloc(nx * 4), d.k = tc_xmalloc(nx * 4), d.v = tc_xmalloc(nx * 4);
    d.dout = tc_xmalloc(no * 4);
    for (size_t i = 0; i < nx; i++)
        d.q[i] = harness_randf(rng), d.k[i] = harness_randf(rng), d.v[i] = harness_randf(rng);
    for (size_t i = 0; i < no; i++) d.dout[i] = harness_randf(rng);
    d.rab_pos = tc_xmalloc((size_t)(c->H * c->max_len) * 4);
    d.rab_time = tc_xmalloc((size_t)(c->H * c->nbuckets) * 4);
    for (int64_t i = 0; i < c->H * c->max_len; i++) d.rab_pos[i] = 0.5f * harness_randf(rng);
    for (int64_t i = 0; i < c->H * c->nbuckets; i++) d.rab_time[i] = 0.5f * harness_randf(rng);
    // epoch seconds: ties, a few seconds and minutes apart, so every bucket below 16 is hit
    d.times = tc_xmalloc((size_t)d.N * 8 + 8);
    for (int64_t r = 0; r < d.N; r++) {
        const uint64_t u = harness_rand(rng);
        d.times[r] = 1700000000 + (int64_t)(u % 4 == 0 ? u % 5 : u % 400);
    }
    d.thr = tc_xmalloc((size_t)c->nbuckets * 8);
    href_time_thresholds(d.thr, c->nbuckets);

    grm_hstu_attn_args *a = &d.a;
    a->nseq = c->B;
    a->offsets = d.offsets;
    a->times = c->times ? d.times : NULL;
    a->H = c->H, a->dqk = c->dqk, a->dv = c->dv, a->ld = ld;
    a->q = d.q, a->k = d.k, a->v = d.v;
    a->rab_pos = c->pos ? d.rab_pos : NULL;
    a->rab_time = c->rt ? d.rab_time : NULL;
    a->max_len = c->max_len, a->nbuckets = c->nbuckets, a->time_thr = d.thr;
    a->norm = c->norm;
    return d;
}

static void free_data(adata *d)
{
    free(d->offsets), free(d->times), free(d->thr), free(d->q), free(d->k), free(d->v);
    free(d->rab_pos), free(d->rab_time), free(d->dout);
}

/* ---- without a device: argument checks ---- */

static void negative_tests(void)
{
    float x[64] = { 0 };
    int64_t off[2] = { 0, 1 }, t[1] = { 0 }, thr[4] = { 0, 2, 4, 8 };
    const grm_hstu_attn_args good = {
        .nseq = 1, .offsets = off, .times = t, .H = 2, .dqk = 8, .dv = 4, .ld = 16,
        .q = x, .k = x, .v = x, .rab_pos = x, .rab_time = x, .max_len = 4, .nbuckets = 4,
        .time_thr = thr, .norm = GRM_HSTU_NORM_MAX_LEN,
    };
    grm_hstu_attn_args a = good;
    a.dqk = 129;
    tc_expect_error(grm_cuda_hstu_attn_fwd(NULL, x, &a, x), GRM_EINVAL,
                    "dqk 129, dv 4: each must lie in [1, 128]", "fwd refuses dqk 129");
    a = good, a.dv = 129, a.ld = 2 * 129;
    tc_expect_error(grm_cuda_hstu_attn_bwd(NULL, x, x, x, x, x, x, &a, x), GRM_EINVAL,
                    "dqk 8, dv 129: each must lie in [1, 128]", "bwd refuses dv 129");
    a = good, a.ld = 15;
    tc_expect_error(grm_cuda_hstu_attn_fwd(NULL, x, &a, x), GRM_EINVAL,
                    "ld 15 < H * max(dqk, dv) = 16", "fwd refuses a view narrower than H heads");
    a = good, a.nbuckets = 129;
    tc_expect_error(grm_cuda_hstu_attn_fwd(NULL, x, &a, x), GRM_EINVAL,
                    "nbuckets 129 outside [1, 128] with the time bias on",
                    "fwd refuses 129 time buckets");
    a = good, a.rab_time = NULL, a.time_thr = NULL;     /* the gradient alone needs them */
    tc_expect_error(grm_cuda_hstu_attn_bwd(NULL, x, x, x, NULL, x, x, &a, x), GRM_EINVAL,
                    "time_thr is NULL with the time bias on",
                    "bwd refuses d_rab_time with times but no thresholds");
    a = good, a.norm = 2;
    tc_expect_error(grm_cuda_hstu_attn_fwd(NULL, x, &a, x), GRM_EINVAL,
                    "norm 2 is not a grm_hstu_norm", "fwd refuses norm 2");
    tc_expect_error(grm_cuda_hstu_attn_fwd(NULL, x, &good, NULL), GRM_EINVAL,
                    "ws (grm_cuda_hstu_attn_ws_bytes bytes)", "fwd refuses a NULL workspace");
    a = good, a.nseq = 0, a.offsets = NULL, a.q = a.k = a.v = NULL;
    const grm_status s1 = grm_cuda_hstu_attn_fwd(NULL, NULL, &a, NULL);
    const grm_status s2 = grm_cuda_hstu_attn_bwd(NULL, NULL, NULL, NULL, NULL, NULL, NULL, &a,
                                                 NULL);
    tap_ok(s1 == GRM_OK && s2 == GRM_OK, "no sequences: fwd and bwd return GRM_OK with NULL "
           "outputs and workspace (%d, %d)", (int)s1, (int)s2);
}

/* ---- without a device: the spec's pieces ---- */

/* tb(|dt|) as the header defines it from the thresholds: the number of b >= 1 with
 * thr[b] <= |dt|; the kernel binary-searches the same count. */
static int64_t count_bucket(const int64_t *thr, int64_t nb, int64_t dt)
{
    const uint64_t a = dt < 0 ? (uint64_t)0 - (uint64_t)dt : (uint64_t)dt;
    int64_t n = 0;
    for (int64_t b = 1; b < nb; b++) n += (uint64_t)thr[b] <= a;
    return n;
}

static void thresholds_check(uint64_t *rng)
{
    static const int64_t nbs[] = { 1, 2, 16, 32, 128 };
    int64_t thr[128];
    int bad = 0;
    for (size_t n = 0; n < sizeof nbs / sizeof *nbs; n++) {
        const int64_t nb = nbs[n];
        href_time_thresholds(thr, nb);
        for (int64_t b = 1; b < nb; b++) {
            if (thr[b] < thr[b - 1] || thr[b] < 1) bad++;
            const int64_t probes[] = { thr[b] - 1, thr[b], thr[b] + 1, -thr[b], -thr[b] + 1 };
            for (size_t p = 0; p < sizeof probes / sizeof *probes; p++)
                if (count_bucket(thr, nb, probes[p]) != href_time_bucket(probes[p], nb)) {
                    if (bad++ < 5)
                        tap_diag("nb %lld dt %lld: count %lld, formula %lld", (long long)nb,
                                 (long long)probes[p],
                                 (long long)count_bucket(thr, nb, probes[p]),
                                 (long long)href_time_bucket(probes[p], nb));
                }
        }
        for (int i = 0; i < 2000; i++) {
            const int64_t dt = (int64_t)(harness_rand(rng) >> (harness_rand(rng) % 64));
            const int64_t sdt = i % 2 ? -dt : dt;
            bad += count_bucket(thr, nb, sdt) != href_time_bucket(sdt, nb);
        }
        const int64_t edges[] = { 0, 1, -1, INT64_MAX, INT64_MIN + 1 };
        for (size_t p = 0; p < sizeof edges / sizeof *edges; p++)
            bad += count_bucket(thr, nb, edges[p]) != href_time_bucket(edges[p], nb);
    }
    tap_ok(bad == 0, "time buckets counted from the thresholds (what the kernel does) equal "
           "the log formula at every threshold +-1, 10000 random and the extreme dt, for 1 to "
           "128 buckets (%d mismatches)", bad);
}

/* loss = sum out . dout; its gradient by central differences at sampled entries of q, k, v
 * (head columns of the view), rab_pos and rab_time, against href_bwd. */
static void fd_check(const acase *c, uint64_t *rng)
{
    adata d = make_data(c, rng);
    const grm_hstu_attn_args *a = &d.a;
    const int64_t ld = a->ld, HV = c->H * c->dv;
    const size_t nx = (size_t)(d.N * ld), no = (size_t)(d.N * HV);
    double *out = tc_xmalloc(no * 8), *dq = tc_xmalloc(nx * 8), *dk = tc_xmalloc(nx * 8);
    double *dv = tc_xmalloc(nx * 8);
    double *gp = tc_xmalloc((size_t)(c->H * c->max_len) * 8);
    double *gt = tc_xmalloc((size_t)(c->H * c->nbuckets) * 8);
    href_bwd(dq, dk, dv, gp, gt, d.dout, a);
    float *tensors[5] = { d.q, d.k, d.v, d.rab_pos, d.rab_time };
    const double *grads[5] = { dq, dk, dv, gp, gt };
    const int64_t cols[3] = { c->H * c->dqk, c->H * c->dqk, HV };
    const int ntensors = c->rt && c->times ? 5 : c->pos ? 4 : 3;
    double max_err = 0;
    for (int t = 0; t < ntensors; t++)
        for (int p = 0; p < 8; p++) {
            size_t idx;
            if (t < 3)
                idx = (size_t)((int64_t)(harness_rand(rng) % (uint64_t)d.N) * ld
                               + (int64_t)(harness_rand(rng) % (uint64_t)cols[t]));
            else
                idx = (size_t)(harness_rand(rng) % (uint64_t)(c->H * (t == 3 ? c->max_len
                                                                           : c->nbuckets)));
            const float keep = tensors[t][idx];
            double lp = 0, lm = 0;
            tensors[t][idx] = keep + 1e-2f;
            const double up = tensors[t][idx];
            href_fwd(out, a);
            for (size_t i = 0; i < no; i++) lp += out[i] * d.dout[i];
            tensors[t][idx] = keep - 1e-2f;
            const double down = tensors[t][idx];
            href_fwd(out, a);
            for (size_t i = 0; i < no; i++) lm += out[i] * d.dout[i];
            tensors[t][idx] = keep;
            const double fd = (lp - lm) / (up - down);
            const double err = fabs(fd - grads[t][idx]) / (fabs(grads[t][idx]) + 1e-3);
            if (err > max_err) max_err = err;
        }
    tap_ok(max_err < 1e-3, "C reference backward (%s) matches central finite differences of "
           "the C forward at 8 entries of each of %d tensors: max rel err %.2g", c->name,
           ntensors, max_err);
    free(out), free(dq), free(dk), free(dv), free(gp), free(gt);
    free_data(&d);
}

/* ---- on a device ---- */

/* A device copy of host [n] floats all equal to v (owned). */
static float *upload_fill(float v, size_t n)
{
    float *h = tc_xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = v;
    float *dp = tc_upload(h, n * 4);
    free(h);
    return dp;
}

/* The head columns [0, w) of each of N rows of a [N, ld] view, as floats. */
static void heads_f(float *dst, const float *src, int64_t N, int64_t ld, int64_t w)
{
    for (int64_t r = 0; r < N; r++)
        for (int64_t x = 0; x < w; x++) dst[r * w + x] = src[r * ld + x];
}

static void heads_d(float *dst, const double *src, int64_t N, int64_t ld, int64_t w)
{
    for (int64_t r = 0; r < N; r++)
        for (int64_t x = 0; x < w; x++) dst[r * w + x] = (float)src[r * ld + x];
}

/* The number of entries of a [N, ld] view outside its head columns [0, w) that changed. */
static int64_t gaps_changed(const float *got, int64_t N, int64_t ld, int64_t w)
{
    int64_t n = 0;
    for (int64_t r = 0; r < N; r++)
        for (int64_t x = w; x < ld; x++) n += got[r * ld + x] != kGarbage;
    return n;
}

static void run_case(const acase *c, uint64_t *rng)
{
    adata d = make_data(c, rng);
    const grm_hstu_attn_args *h = &d.a;
    const int64_t N = d.N, ld = h->ld, HV = c->H * c->dv, HQ = c->H * c->dqk;
    const size_t nx = (size_t)(N * ld), no = (size_t)(N * HV);
    const size_t np = (size_t)(c->H * c->max_len), nt = (size_t)(c->H * c->nbuckets);
    // the reference; the bias gradients start from nonzero values, as the device's
    float *start_p = tc_xmalloc(np * 4), *start_t = tc_xmalloc(nt * 4);
    for (size_t i = 0; i < np; i++) start_p[i] = 0.25f * harness_randf(rng);
    for (size_t i = 0; i < nt; i++) start_t[i] = 0.25f * harness_randf(rng);
    double *out = tc_xmalloc(no * 8), *dq = tc_xmalloc(nx * 8), *dk = tc_xmalloc(nx * 8);
    double *dv = tc_xmalloc(nx * 8), *gp = tc_xmalloc(np * 8), *gt = tc_xmalloc(nt * 8);
    for (size_t i = 0; i < np; i++) gp[i] = start_p[i];
    for (size_t i = 0; i < nt; i++) gt[i] = start_t[i];
    href_fwd(out, h);
    href_bwd(dq, dk, dv, c->pos ? gp : NULL, c->rt ? gt : NULL, d.dout, h);

    // the device copy of the arguments
    grm_hstu_attn_args a = *h;
    a.offsets = tc_upload(d.offsets, (size_t)(c->B + 1) * 8);
    a.times = c->times ? tc_upload(d.times, (size_t)N * 8) : NULL;
    a.time_thr = tc_upload(d.thr, (size_t)c->nbuckets * 8);
    a.q = tc_upload(d.q, nx * 4), a.k = tc_upload(d.k, nx * 4), a.v = tc_upload(d.v, nx * 4);
    a.rab_pos = c->pos ? tc_upload(d.rab_pos, np * 4) : NULL;
    a.rab_time = c->rt ? tc_upload(d.rab_time, nt * 4) : NULL;
    float *d_do = tc_upload(d.dout, no * 4), *d_out = upload_fill(kGarbage, no);
    float *d_dq = upload_fill(kGarbage, nx), *d_dk = upload_fill(kGarbage, nx);
    float *d_dv = upload_fill(kGarbage, nx);
    float *d_gp = c->pos ? tc_upload(start_p, np * 4) : NULL;
    float *d_gt = c->rt ? tc_upload(start_t, nt * 4) : NULL;
    void *ws = tc_alloc(grm_cuda_hstu_attn_ws_bytes(NULL, N, c->B, c->H,
                                                    c->max_len + c->nbuckets));
    size_t nmax = nx > no ? nx : no;
    nmax = nmax > np ? nmax : np;
    nmax = nmax > nt ? nmax : nt;
    float *got = tc_xmalloc(nmax * 4), *want = tc_xmalloc(nmax * 4);
    char what[200];

    const grm_status sf = grm_cuda_hstu_attn_fwd(NULL, d_out, &a, ws);
    tc_download(got, d_out, no * 4);
    for (size_t i = 0; i < no; i++) want[i] = (float)out[i];
    snprintf(what, sizeof what, "fwd %s: out (status %d %s)", c->name, (int)sf,
             sf ? grm_cuda_last_error() : "");
    tap_close_f32(got, want, (int64_t)no, 1e-4, 1e-5, what);

    const grm_status sb = grm_cuda_hstu_attn_bwd(NULL, d_dq, d_dk, d_dv, d_gp, d_gt, d_do, &a,
                                                 ws);
    int64_t changed = 0;
    float *views[3] = { d_dq, d_dk, d_dv };
    const double *refs[3] = { dq, dk, dv };
    const int64_t widths[3] = { HQ, HQ, HV };
    static const char *const names[3] = { "dq", "dk", "dv" };
    for (int t = 0; t < 3; t++) {
        tc_download(got, views[t], nx * 4);
        changed += gaps_changed(got, N, ld, widths[t]);
        heads_f(got, got, N, ld, widths[t]);
        heads_d(want, refs[t], N, ld, widths[t]);
        snprintf(what, sizeof what, "bwd %s: %s over garbage (status %d %s)", c->name,
                 names[t], (int)sb, sb ? grm_cuda_last_error() : "");
        tap_close_f32(got, want, N * widths[t], 1e-4, 1e-5, what);
    }
    if (c->pos) {
        tc_download(got, d_gp, np * 4);
        for (size_t i = 0; i < np; i++) want[i] = (float)gp[i];
        snprintf(what, sizeof what, "bwd %s: d_rab_pos [%lld, %lld] accumulated (clipped at "
                 "max_len - 1)", c->name, (long long)c->H, (long long)c->max_len);
        tap_close_f32(got, want, (int64_t)np, 1e-4, 1e-4, what);
    } else {
        tap_ok(sf == GRM_OK && sb == GRM_OK, "%s: no rab_pos and a NULL d_rab_pos (%s)",
               c->name, grm_cuda_last_error());
    }
    if (c->rt) {
        tc_download(got, d_gt, nt * 4);
        for (size_t i = 0; i < nt; i++) want[i] = (float)gt[i];   /* = start without times */
        snprintf(what, sizeof what, "bwd %s: d_rab_time [%lld, %lld] %s", c->name,
                 (long long)c->H, (long long)c->nbuckets,
                 c->times ? "accumulated" : "unchanged without times");
        tap_close_f32(got, want, (int64_t)nt, 1e-4, 1e-4, what);
    } else {
        tap_ok(sf == GRM_OK && sb == GRM_OK, "%s: no rab_time and a NULL d_rab_time",
               c->name);
    }
    tap_ok(changed == 0, "bwd %s: the columns of the dq, dk, dv views (ld %lld) outside the "
           "heads are untouched (%lld changed)", c->name, (long long)ld, (long long)changed);

    tc_free_attn_args(&a);
    grm_cuda_free(d_do), grm_cuda_free(d_out);
    grm_cuda_free(d_dq), grm_cuda_free(d_dk), grm_cuda_free(d_dv), grm_cuda_free(d_gp);
    grm_cuda_free(d_gt), grm_cuda_free(ws);
    free(start_p), free(start_t), free(out), free(dq), free(dk), free(dv), free(gp), free(gt);
    free(got), free(want);
    free_data(&d);
}

/* Broken offsets come back as GRM_EINVAL naming the index (the one read-back per call). */
static void bad_offsets(void)
{
    const int64_t off[4] = { 0, 5, 3, 8 };
    float *x = tc_alloc(8 * 8 * 4);
    int64_t *doff = tc_upload(off, sizeof off);
    void *ws = tc_alloc(grm_cuda_hstu_attn_ws_bytes(NULL, 8, 3, 1, 0));
    const grm_hstu_attn_args a = {
        .nseq = 3, .offsets = doff, .H = 1, .dqk = 8, .dv = 8, .ld = 8, .q = x, .k = x,
        .v = x, .max_len = 8, .norm = GRM_HSTU_NORM_LENGTH,
    };
    tc_expect_error(grm_cuda_hstu_attn_fwd(NULL, x, &a, ws), GRM_EINVAL,
                    "offsets[2] breaks the row ranges", "fwd refuses offsets 0, 5, 3, 8");
    grm_cuda_free(x), grm_cuda_free(doff), grm_cuda_free(ws);
}

int main(void)
{
    static const int64_t lens1[] = { 0, 1, 63, 64, 65, 130, 200 };
    static const int64_t lens2[] = { 1, 129 };
    static const int64_t lens3[] = { 5, 70, 3 };
    static const int64_t lens_fd[] = { 3, 0, 7 };
    const acase cases[N_CASES] = {
        { "jagged 0/1/63/64/65/130/200, H 2, dqk 32, dv 48, ld 101, rab_pos 50, 16 time "
          "buckets, norm max_len", 7, lens1, 2, 32, 48, 5, 1, 1, 1, 50, 16,
          GRM_HSTU_NORM_MAX_LEN },
        { "lengths 1/129, H 1, dqk = dv = 128, no bias, norm length", 2, lens2, 1, 128, 128,
          0, 0, 0, 0, 256, 1, GRM_HSTU_NORM_LENGTH },
        { "lengths 5/70/3, H 3, dqk 16, dv 8, rab_pos 32, rab_time without times, norm "
          "length", 3, lens3, 3, 16, 8, 0, 1, 1, 0, 32, 8, GRM_HSTU_NORM_LENGTH },
    };
    const acase fd_cases[2] = {
        { "both biases, norm max_len, ld 12", 3, lens_fd, 2, 5, 4, 2, 1, 1, 1, 4, 6,
          GRM_HSTU_NORM_MAX_LEN },
        { "rab_pos, norm length", 3, lens_fd, 2, 3, 6, 0, 1, 0, 0, 5, 1,
          GRM_HSTU_NORM_LENGTH },
    };
    uint64_t rng = 0x68737475ULL;
    tap_plan(N_NEG + N_CPU + N_CASES * N_PER_CASE + N_DEV_EXTRA);
    negative_tests();
    thresholds_check(&rng);
    fd_check(&fd_cases[0], &rng);
    fd_check(&fd_cases[1], &rng);
    if (!tc_have_device()) {
        for (int k = 0; k < N_CASES * N_PER_CASE + N_DEV_EXTRA; k++)
            tap_skip(CUDA_SKIP, "hstu attention device check %d", k + 1);
        return tap_done();
    }
    for (int k = 0; k < N_CASES; k++) run_case(&cases[k], &rng);
    bad_offsets();
    return tap_done();
}

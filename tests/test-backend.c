/* tests/test-backend.c - the backends of grm/backend.h op by op: the `cpu` backend (core/
 * backend.c, threaded) against the `ref` backend (core/backend_ref.c, the plain loops) on the
 * same seeded inputs, random and adversarial: empty segments, length-1 segments, duplicate-
 * heavy index streams, ids at the 64-bit edges, a segment count of one. Sums run in the same
 * order on both, so gather, scatter-add, pooling and segment unique must agree bitwise; the
 * GEMM within fp32 tolerance (ref accumulates in double). Both refuse an index out of range.
 * device = cuda:0 opens the cuda module, or names why not: a build without CUDA, a machine
 * without a GPU; on a GPU it runs a GEMM against ref and closes. */
#include "config.h"

#include "backend.h"
#include "grm_core.h"
#include "tap.h"

#include <grm/rng.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 42;

static int64_t rnd(int64_t n)
{
    rs = grm_mix64(rs + 0x9e3779b97f4a7c15ULL);
    return (int64_t)(rs % (uint64_t)n);
}

static float rndf(void)
{
    return (float)rnd(2000001) / 1e6f - 1.0f;
}

static const grm_backend_iface *const R = &grm__backend_ref_iface;
static const grm_backend_iface *const C = &grm__backend_cpu_iface;

/* n indices into nrows rows: uniform, or `dup` heavy (a few rows take most). */
static void make_idx(int64_t *idx, int64_t n, int64_t nrows, int dup)
{
    for (int64_t j = 0; j < n; j++) idx[j] = dup ? rnd(nrows < 3 ? nrows : 3) : rnd(nrows);
}

/* B segments of n ids; `empty` makes every third segment empty, len1 gives every segment
 * one id where it can. */
static void make_offsets(int64_t *off, int64_t B, int64_t n, int empty)
{
    off[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t left = n - off[b], take = b == B - 1 ? left : (empty && b % 3 == 0) ? 0
                                                             : rnd(left / (B - b) * 2 + 1);
        if (take > left) take = left;
        off[b + 1] = off[b] + take;
    }
}

static void check_sparse_ops(const char *what, int64_t n, int64_t nrows, int64_t D, int64_t B,
                             int dup, int empty)
{
    float *rows = malloc((size_t)(nrows * D) * sizeof(float));
    float *a = calloc((size_t)(n * D + B * D + 1), sizeof(float));
    float *b = calloc((size_t)(n * D + B * D + 1), sizeof(float));
    float *src = malloc((size_t)(n * D + 1) * sizeof(float));
    int64_t *idx = malloc((size_t)(n + 1) * sizeof(int64_t));
    int64_t *off = malloc((size_t)(B + 1) * sizeof(int64_t));
    for (int64_t i = 0; i < nrows * D; i++) rows[i] = rndf();
    for (int64_t i = 0; i < n * D; i++) src[i] = rndf();
    make_idx(idx, n, nrows, dup);
    make_offsets(off, B, n, empty);
    void *work = NULL;
    C->work_create(NULL, &work);

    grm_status s1 = R->gather(NULL, a, rows, idx, n, nrows, D, NULL);
    grm_status s2 = C->gather(NULL, b, rows, idx, n, nrows, D, NULL);
    tap_ok(s1 == GRM_OK && s2 == GRM_OK && memcmp(a, b, (size_t)(n * D) * sizeof(float)) == 0,
           "%s: gather of %lld rows is bitwise equal on ref and cpu", what, (long long)n);

    float *ra = malloc((size_t)(nrows * D) * sizeof(float));
    float *rb = malloc((size_t)(nrows * D) * sizeof(float));
    memcpy(ra, rows, (size_t)(nrows * D) * sizeof(float));
    memcpy(rb, rows, (size_t)(nrows * D) * sizeof(float));
    s1 = R->scatter_add(NULL, ra, src, idx, n, nrows, D, NULL, NULL);
    s2 = C->scatter_add(NULL, rb, src, idx, n, nrows, D, work, NULL);
    tap_ok(s1 == GRM_OK && s2 == GRM_OK
               && memcmp(ra, rb, (size_t)(nrows * D) * sizeof(float)) == 0,
           "%s: scatter-add of %lld rows into %lld is bitwise equal on ref and cpu", what,
           (long long)n, (long long)nrows);

    for (int32_t mode = GRM_POOL_SUM; mode <= GRM_POOL_MEAN; mode++) {
        s1 = R->segment_reduce(NULL, a, rows, idx, off, B, nrows, D, mode, NULL);
        s2 = C->segment_reduce(NULL, b, rows, idx, off, B, nrows, D, mode, NULL);
        int same = s1 == GRM_OK && s2 == GRM_OK
                   && memcmp(a, b, (size_t)(B * D) * sizeof(float)) == 0;
        s1 = R->segment_reduce_bwd(NULL, a, src, off, B, D, mode, NULL);
        s2 = C->segment_reduce_bwd(NULL, b, src, off, B, D, mode, NULL);
        same &= s1 == GRM_OK && s2 == GRM_OK
                && memcmp(a, b, (size_t)(n * D) * sizeof(float)) == 0;
        tap_ok(same, "%s: %s pooling of %lld segments and its backward are bitwise equal", what,
               mode == GRM_POOL_SUM ? "sum" : "mean", (long long)B);
    }
    C->work_destroy(NULL, work);
    free(rows);
    free(a);
    free(b);
    free(src);
    free(idx);
    free(off);
    free(ra);
    free(rb);
}

/* Segment unique on ids drawn from `pool` values (edge ids included), F segments. */
static void check_unique(const char *what, int64_t n, int32_t F, const int64_t *pool,
                         int64_t npool, int empty)
{
    int64_t *ids = malloc((size_t)(n + 1) * sizeof(int64_t));
    int64_t *off = malloc((size_t)(F + 1) * sizeof(int64_t));
    int64_t *u[2], *cnt[2], *inv[2], nu[2];
    int32_t *uf[2];
    for (int k = 0; k < 2; k++) {
        u[k] = malloc((size_t)(n + 1) * sizeof(int64_t));
        inv[k] = malloc((size_t)(n + 1) * sizeof(int64_t));
        uf[k] = malloc((size_t)(n + 1) * sizeof(int32_t));
        cnt[k] = malloc((size_t)F * sizeof(int64_t));
    }
    for (int64_t j = 0; j < n; j++) ids[j] = pool[rnd(npool)];
    make_offsets(off, F, n, empty);
    void *work = NULL;
    C->work_create(NULL, &work);
    grm_status s1 = R->segment_unique(NULL, u[0], uf[0], cnt[0], inv[0], &nu[0], ids, off, n, F,
                                      NULL, NULL);
    grm_status s2 = C->segment_unique(NULL, u[1], uf[1], cnt[1], inv[1], &nu[1], ids, off, n, F,
                                      work, NULL);
    int ok = s1 == GRM_OK && s2 == GRM_OK && nu[0] == nu[1]
             && memcmp(u[0], u[1], (size_t)nu[0] * sizeof(int64_t)) == 0
             && memcmp(uf[0], uf[1], (size_t)nu[0] * sizeof(int32_t)) == 0
             && memcmp(cnt[0], cnt[1], (size_t)F * sizeof(int64_t)) == 0
             && memcmp(inv[0], inv[1], (size_t)n * sizeof(int64_t)) == 0;
    /* and the definition: every id names a unique pair of its own segment */
    for (int32_t f = 0; ok && f < F; f++)
        for (int64_t j = off[f]; j < off[f + 1]; j++)
            ok &= u[0][inv[0][j]] == ids[j] && uf[0][inv[0][j]] == f;
    tap_ok(ok, "%s: segment unique of %lld ids in %d segments: %lld unique, equal on ref and "
           "cpu", what, (long long)n, (int)F, (long long)nu[0]);
    C->work_destroy(NULL, work);
    for (int k = 0; k < 2; k++) {
        free(u[k]);
        free(inv[k]);
        free(uf[k]);
        free(cnt[k]);
    }
    free(ids);
    free(off);
}

static void check_gemm(int32_t ta, int32_t tb, int64_t M, int64_t N, int64_t K)
{
    float *A = malloc((size_t)(M * K + 1) * sizeof(float));
    float *B = malloc((size_t)(K * N + 1) * sizeof(float));
    float *c1 = malloc((size_t)(M * N + 1) * sizeof(float));
    float *c2 = malloc((size_t)(M * N + 1) * sizeof(float));
    for (int64_t i = 0; i < M * K; i++) A[i] = rndf();
    for (int64_t i = 0; i < K * N; i++) B[i] = rndf();
    for (int64_t i = 0; i < M * N; i++) c1[i] = c2[i] = rndf();
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    grm_status s1 = R->gemm(NULL, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, c1, N, NULL);
    grm_status s2 = C->gemm(NULL, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, c2, N, NULL);
    char what[96];
    snprintf(what, sizeof what, "gemm %s%s [%lld x %lld x %lld] with alpha, beta: cpu vs ref",
             ta ? "T" : "N", tb ? "T" : "N", (long long)M, (long long)N, (long long)K);
    if (s1 != GRM_OK || s2 != GRM_OK) tap_ok(0, "%s: %s", what, grm_last_error());
    else tap_close_f32(c2, c1, M * N, 1e-4, 1e-5, what);
    free(A);
    free(B);
    free(c1);
    free(c2);
}

/* device = cuda:0 through grm__backend_open, as the trainer opens it (three checks). */
static void check_cuda(void)
{
    grm_backend be;
    grm_status st = grm__backend_open("cuda:0", &be);
#ifndef GRM_HAVE_CUDA
    tap_ok(st == GRM_ENOTSUP && strstr(grm_last_error(), "device 'cuda:0': this grmhost was "
                                       "built without CUDA (configure found no nvcc/cuBLAS); "
                                       "use device = cpu"),
           "without CUDA in the build, cuda:0 is refused naming why: %s", grm_last_error());
    tap_skip("built without CUDA", "the cuda module exports grm_cuda_backend_entry alone");
    tap_skip("built without CUDA", "cuda:0 runs a gemm against ref and closes");
#else
    char path[4096];
    const int found = grm__module_path(GRM__CUDA_MODULE, path, sizeof path);
    if (st != GRM_OK)
        tap_ok(st == GRM_ENOTSUP && strstr(grm_last_error(), "cuda:0: this machine has 0 CUDA "
                                           "devices; use device = cpu"),
               "the cuda module loads, and on a machine without a GPU cuda:0 is refused "
               "naming why: %s", grm_last_error());
    else
        tap_ok(be.iface && strcmp(be.iface->name(be.context), "cuda") == 0,
               "device = cuda:0 opens the cuda backend from its module");
    // the module links like a plugin: one exported function, its entry
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' | awk '$2 == \"T\" || $2 == \"W\" "
             "{print $3}'", path);
    FILE *f = found ? popen(cmd, "r") : NULL;
    char line[512];
    int entry = 0, extra = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strcmp(line, GRM__CUDA_ENTRY) == 0) entry++;
        else if (extra++ < 5) tap_diag("extra export of %s: %s", path, line);
    }
    const int rc = f ? pclose(f) : -1;
    tap_ok(found && strstr(path, "/kernels/.libs/" GRM__CUDA_MODULE) && rc == 0 && entry == 1
               && extra == 0,
           "the build tree's cuda module (%s) exports %s alone (nm -D)", path, GRM__CUDA_ENTRY);
    if (st != GRM_OK) {
        tap_skip("no CUDA device", "cuda:0 runs a gemm against ref and closes");
        return;
    }
    const grm_backend_iface *G = be.iface;
    const grm_device host = { GRM_DEVICE_CPU, 0 };
    enum { M = 19, N = 23, K = 31 };
    float A[M * K], B[K * N], c1[M * N], c2[M * N];
    for (int i = 0; i < M * K; i++) A[i] = rndf();
    for (int i = 0; i < K * N; i++) B[i] = rndf();
    for (int i = 0; i < M * N; i++) c1[i] = c2[i] = rndf();
    R->gemm(NULL, 0, 1, M, N, K, 0.5f, A, K, B, K, 2.0f, c1, N, NULL);
    float *dA = G->alloc(be.context, sizeof A, 0), *dB = G->alloc(be.context, sizeof B, 0);
    float *dC = G->alloc(be.context, sizeof c2, 0);
    st = dA && dB && dC ? GRM_OK : GRM_ENOMEM;
    if (st == GRM_OK) st = G->copy(be.context, dA, be.device, A, host, sizeof A, NULL);
    if (st == GRM_OK) st = G->copy(be.context, dB, be.device, B, host, sizeof B, NULL);
    if (st == GRM_OK) st = G->copy(be.context, dC, be.device, c2, host, sizeof c2, NULL);
    if (st == GRM_OK)
        st = G->gemm(be.context, 0, 1, M, N, K, 0.5f, dA, K, dB, K, 2.0f, dC, N, NULL);
    if (st == GRM_OK) st = G->copy(be.context, c2, host, dC, be.device, sizeof c2, NULL);
    if (st == GRM_OK) st = G->synchronize(be.context, NULL);
    int ok = st == GRM_OK;
    for (int i = 0; ok && i < M * N; i++) ok = fabsf(c2[i] - c1[i]) <= 1e-4f + 1e-4f * fabsf(c1[i]);
    G->free(be.context, dA), G->free(be.context, dB), G->free(be.context, dC);
    grm__backend_close(&be);
    tap_ok(ok && be.iface == NULL, "cuda:0 runs a gemm NT [%d x %d x %d] within fp32 tolerance "
           "of ref and closes (%s)", M, N, K, st ? grm_last_error() : "ok");
#endif
}

int main(void)
{
    tap_plan(4 * 4 + 4 + 4 + 5 + 3);
    grm__pool_init(2);
    check_sparse_ops("random", 5000, 700, 16, 300, 0, 0);
    check_sparse_ops("duplicate-heavy", 4000, 50, 8, 100, 1, 0);
    check_sparse_ops("empty segments", 3000, 400, 5, 200, 0, 1);
    check_sparse_ops("length-1 segments", 64, 64, 3, 64, 0, 0);

    const int64_t edges[] = { INT64_MIN + 2, INT64_MAX, INT64_MAX - 1, -1, 0, 1, 1LL << 62,
                              -(1LL << 40), 12345 };
    int64_t wide[4096];
    for (int i = 0; i < 4096; i++) wide[i] = (int64_t)grm_mix64((uint64_t)i);
    check_unique("edge ids", 3000, 4, edges, 9, 0);
    check_unique("random 64-bit ids", 20000, 3, wide, 4096, 0);
    check_unique("empty segments", 5000, 7, wide, 300, 1);
    check_unique("one segment", 8000, 1, wide, 1000, 0);

    check_gemm(0, 0, 33, 17, 65);
    check_gemm(0, 1, 64, 128, 32);
    check_gemm(1, 0, 5, 9, 70);
    check_gemm(1, 1, 1, 1, 1);

    /* an index out of range is refused by both, and scatter-add leaves the rows unchanged */
    float rows[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, out[8], src[8] = { 0 };
    const int64_t bad[2] = { 1, 4 };
    grm_status s1 = R->gather(NULL, out, rows, bad, 2, 4, 2, NULL);
    grm_status s2 = C->gather(NULL, out, rows, bad, 2, 4, 2, NULL);
    tap_ok(s1 == GRM_EINVAL && s2 == GRM_EINVAL, "gather refuses index 4 of 4 rows on both");
    void *work = NULL;
    C->work_create(NULL, &work);
    s1 = R->scatter_add(NULL, rows, src, bad, 2, 4, 2, NULL, NULL);
    s2 = C->scatter_add(NULL, rows, src, bad, 2, 4, 2, work, NULL);
    C->work_destroy(NULL, work);
    tap_ok(s1 == GRM_EINVAL && s2 == GRM_EINVAL && rows[2] == 3,
           "scatter-add refuses index 4 of 4 rows on both, rows unchanged");
    tap_ok(strstr(grm_last_error(), "4") != NULL, "the message names the index: %s",
           grm_last_error());
    grm_backend be;
    tap_ok(grm__backend_open("ref", &be) == GRM_OK && be.iface == R
               && grm__backend_open("cpu", &be) == GRM_OK && be.iface == C,
           "device = ref and device = cpu open their backends");
    tap_ok(grm__backend_open("cuda:x", &be) == GRM_EINVAL
               && strstr(grm_last_error(), "cuda:N") != NULL,
           "a malformed cuda:N is refused: %s", grm_last_error());
    check_cuda();
    return tap_done();
}

/* tests/test-cuda-embedding.c - kernels/embedding_ops.cu against plain C loops written here:
 * gather (exact), scatter-add (its backward), pooled sum/mean over jagged segments and its
 * backward, sequence tile and its backward, for f32, f16 and bf16 rows of D = 8, 33 (no
 * 128-bit path), 128 and 1024. Inputs: duplicate-heavy ids with a sorted run (exercising
 * the warp-level merge), out-of-range ids, empty and length-1 segments. Tolerances:
 * f32 rtol 1e-5, atol 1e-5; f16 rtol 1e-2, atol 1e-3 for one rounding (fwd) and atol 2e-2
 * where atomic adds round the running sum to f16 several times; bf16 likewise with atol
 * 6e-2 (8-bit mantissa, sums up to ~8). Argument errors are checked without a device. */
#include "cuda-common.h"

#define ROWS 257

static const int32_t dtypes[] = {GRM_DTYPE_F32, GRM_DTYPE_F16, GRM_DTYPE_BF16};
static const int32_t dims[] = {8, 33, 128, 1024};
#define N_DT 3
#define N_DIM 4
#define N_PER_CASE 8
#define N_NEG 6

typedef struct emb_case {
    int64_t S, n;
    int64_t *offsets;   /* [S+1] */
    int64_t *idx;       /* [n] */
} emb_case;

/* S segments with lengths in [0, 24], forced empty and length-1 ones; ids duplicate-heavy
 * (a quarter of the rows), a sorted run at the start, and two out-of-range ids. */
static emb_case make_case(uint64_t *rng)
{
    emb_case c;
    c.S = 41;
    c.offsets = tc_xmalloc((size_t)(c.S + 1) * sizeof(int64_t));
    c.offsets[0] = 0;
    for (int64_t s = 0; s < c.S; s++) {
        int64_t len = (int64_t)(harness_rand(rng) % 25);
        if (s == 0 || s == 7 || s == c.S - 1) len = 0;
        if (s == 3 || s == 11) len = 1;
        c.offsets[s + 1] = c.offsets[s] + len;
    }
    c.n = c.offsets[c.S];
    c.idx = tc_xmalloc((size_t)c.n * sizeof(int64_t));
    for (int64_t i = 0; i < c.n; i++) c.idx[i] = (int64_t)(harness_rand(rng) % (ROWS / 4));
    for (int64_t i = 0; i < c.n / 3; i++) c.idx[i] = i / 5;      /* sorted, runs of 5 */
    c.idx[c.n / 2] = -1;
    c.idx[c.n / 2 + 1] = ROWS;
    return c;
}

static void *rand_rows(int64_t rows, int32_t D, int32_t dtype, uint64_t *rng)
{
    void *h = tc_xmalloc((size_t)rows * (size_t)D * grm_dtype_size(dtype));
    for (int64_t i = 0; i < rows * D; i++) tc_set(h, dtype, i, harness_randf(rng));
    return h;
}

/* got (device dtype buffer, downloaded) vs want (float) */
static void compare(const void *got_h, int32_t dtype, const float *want, int64_t n,
                    double rtol, double atol, const char *what)
{
    float *got = tc_xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) got[i] = tc_get(got_h, dtype, i);
    tap_close_f32(got, want, n, rtol, atol, what);
    free(got);
}

static void run_case(const emb_case *c, int32_t dtype, int32_t D, uint64_t *rng)
{
    const size_t es = grm_dtype_size(dtype);
    const int64_t S = c->S, n = c->n;
    const double rtol = dtype == GRM_DTYPE_F32 ? 1e-5 : 1e-2;
    const double atol1 = dtype == GRM_DTYPE_F32 ? 1e-5 : 1e-3;
    const double atolN = dtype == GRM_DTYPE_F32 ? 1e-5 : dtype == GRM_DTYPE_F16 ? 2e-2 : 6e-2;
    char what[128];
    void *table_h = rand_rows(ROWS, D, dtype, rng);     /* [ROWS, D] */
    void *src_h = rand_rows(n, D, dtype, rng);          /* [n, D] */
    void *seg_h = rand_rows(S, D, dtype, rng);          /* [S, D] */
    float *want = tc_xmalloc((size_t)(n > ROWS ? n : ROWS) * (size_t)D * sizeof(float));
    void *got_h = tc_xmalloc((size_t)(n > ROWS ? n : ROWS) * (size_t)D * es);
    int64_t *d_idx = tc_upload(c->idx, (size_t)n * sizeof(int64_t));
    int64_t *d_off = tc_upload(c->offsets, (size_t)(S + 1) * sizeof(int64_t));
    void *d_table = tc_upload(table_h, (size_t)ROWS * D * es);
    void *d_src = tc_upload(src_h, (size_t)n * D * es);
    void *d_seg = tc_upload(seg_h, (size_t)S * D * es);
    void *d_out = tc_alloc((size_t)(n > ROWS ? n : ROWS) * D * es);
    grm_status st;
    const char *dn = tc_dtype_name(dtype);

    /* gather: out[i] = table[idx[i]], zero row when out of range; exact */
    st = grm_cuda_gather_fwd(d_out, d_table, d_idx, n, ROWS, D, dtype, NULL);
    tc_download(got_h, d_out, (size_t)n * D * es);
    int bad = st != GRM_OK;
    for (int64_t i = 0; i < n && !bad; i++)
        for (int32_t j = 0; j < D; j++) {
            const int64_t r = c->idx[i];
            const float w = (r >= 0 && r < ROWS) ? tc_get(table_h, dtype, r * D + j) : 0.0f;
            if (tc_get(got_h, dtype, i * D + j) != w) {
                tap_diag("gather: row %lld col %d: expected %g got %g", (long long)i, j, w,
                         tc_get(got_h, dtype, i * D + j));
                bad = 1;
                break;
            }
        }
    tap_ok(!bad, "gather_fwd %s D=%d n=%lld exact, out-of-range ids give zero rows", dn, D,
           (long long)n);

    /* scatter-add: table[idx[i]] += src[i] */
    for (int64_t i = 0; i < (int64_t)ROWS * D; i++) want[i] = tc_get(table_h, dtype, i);
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = c->idx[i];
        if (r < 0 || r >= ROWS) continue;
        for (int32_t j = 0; j < D; j++) want[r * D + j] += tc_get(src_h, dtype, i * D + j);
    }
    st = grm_cuda_gather_bwd(d_table, d_src, d_idx, n, ROWS, D, dtype, NULL);
    tc_download(got_h, d_table, (size_t)ROWS * D * es);
    snprintf(what, sizeof what, "gather_bwd (scatter-add) %s D=%d st=%d", dn, D, (int)st);
    compare(got_h, dtype, want, (int64_t)ROWS * D, rtol, atolN, what);
    if (grm_cuda_memcpy_h2d(d_table, table_h, (size_t)ROWS * D * es) != GRM_OK)
        tc_bail("restore table");

    /* pooled sum and mean over segments of table[idx] */
    for (int mode = GRM_CUDA_POOL_SUM; mode <= GRM_CUDA_POOL_MEAN; mode++) {
        for (int64_t s = 0; s < S; s++) {
            const int64_t b = c->offsets[s], e = c->offsets[s + 1];
            for (int32_t j = 0; j < D; j++) {
                double acc = 0;
                for (int64_t i = b; i < e; i++) {
                    const int64_t r = c->idx[i];
                    if (r >= 0 && r < ROWS) acc += tc_get(table_h, dtype, r * D + j);
                }
                if (mode == GRM_CUDA_POOL_MEAN && e > b) acc /= (double)(e - b);
                want[s * D + j] = (float)acc;
            }
        }
        st = grm_cuda_pool_fwd(d_out, d_table, d_idx, d_off, S, ROWS, D, dtype, mode, NULL);
        tc_download(got_h, d_out, (size_t)S * D * es);
        snprintf(what, sizeof what, "pool_fwd %s %s D=%d st=%d", mode ? "mean" : "sum", dn, D,
                 (int)st);
        compare(got_h, dtype, want, S * D, rtol, atol1, what);
    }

    /* pool backward (mean): table_grad[idx[i]] += grad_out[s] / len */
    memset(want, 0, (size_t)ROWS * D * sizeof(float));
    for (int64_t s = 0; s < S; s++) {
        const int64_t b = c->offsets[s], e = c->offsets[s + 1];
        for (int64_t i = b; i < e; i++) {
            const int64_t r = c->idx[i];
            if (r < 0 || r >= ROWS) continue;
            for (int32_t j = 0; j < D; j++)
                want[r * D + j] += tc_get(seg_h, dtype, s * D + j) / (float)(e - b);
        }
    }
    if (grm_cuda_memset(d_out, 0, (size_t)ROWS * D * es) != GRM_OK) tc_bail("memset");
    st = grm_cuda_pool_bwd(d_out, d_seg, d_idx, d_off, S, ROWS, D, dtype, GRM_CUDA_POOL_MEAN,
                           NULL);
    tc_download(got_h, d_out, (size_t)ROWS * D * es);
    snprintf(what, sizeof what, "pool_bwd mean %s D=%d st=%d", dn, D, (int)st);
    compare(got_h, dtype, want, (int64_t)ROWS * D, rtol, atolN, what);

    /* pooling with idx NULL: sum of rows [offsets[s], offsets[s+1]) of src */
    for (int64_t s = 0; s < S; s++)
        for (int32_t j = 0; j < D; j++) {
            double acc = 0;
            for (int64_t i = c->offsets[s]; i < c->offsets[s + 1]; i++)
                acc += tc_get(src_h, dtype, i * D + j);
            want[s * D + j] = (float)acc;
        }
    st = grm_cuda_pool_fwd(d_out, d_src, NULL, d_off, S, n, D, dtype, GRM_CUDA_POOL_SUM, NULL);
    tc_download(got_h, d_out, (size_t)S * D * es);
    snprintf(what, sizeof what, "pool_fwd sum of contiguous rows (idx NULL) %s D=%d st=%d", dn,
             D, (int)st);
    compare(got_h, dtype, want, S * D, rtol, atol1, what);

    /* sequence tile: out[t] = seg[s] for t in segment s; exact */
    st = grm_cuda_seq_tile_fwd(d_out, d_seg, d_off, S, D, dtype, NULL);
    tc_download(got_h, d_out, (size_t)n * D * es);
    bad = st != GRM_OK;
    for (int64_t s = 0; s < S && !bad; s++)
        for (int64_t t = c->offsets[s]; t < c->offsets[s + 1] && !bad; t++)
            for (int32_t j = 0; j < D; j++)
                if (tc_get(got_h, dtype, t * D + j) != tc_get(seg_h, dtype, s * D + j)) {
                    tap_diag("seq_tile: token %lld col %d differs", (long long)t, j);
                    bad = 1;
                    break;
                }
    tap_ok(!bad, "seq_tile_fwd %s D=%d exact over %lld tokens", dn, D, (long long)n);

    /* its backward: grad_in[s] = sum of grad_out over the tokens of s (src as grad_out) */
    st = grm_cuda_seq_tile_bwd(d_out, d_src, d_off, S, D, dtype, NULL);
    tc_download(got_h, d_out, (size_t)S * D * es);
    snprintf(what, sizeof what, "seq_tile_bwd %s D=%d st=%d", dn, D, (int)st);
    compare(got_h, dtype, want, S * D, rtol, atol1, what);

    grm_cuda_free(d_idx);
    grm_cuda_free(d_off);
    grm_cuda_free(d_table);
    grm_cuda_free(d_src);
    grm_cuda_free(d_seg);
    grm_cuda_free(d_out);
    free(table_h);
    free(src_h);
    free(seg_h);
    free(want);
    free(got_h);
}

/* Argument errors are found before any device work, so they run without a GPU. */
static void negative_tests(void)
{
    tc_expect_error(grm_cuda_gather_fwd(NULL, NULL, NULL, 4, 4, 8, GRM_DTYPE_I32, NULL),
                    GRM_ENOTSUP, "dtype 4 not supported", "gather_fwd refuses dtype i32");
    tc_expect_error(grm_cuda_gather_fwd(NULL, NULL, NULL, 4, 4, 0, GRM_DTYPE_F32, NULL),
                    GRM_EINVAL, "D 0 outside [1, 65536]", "gather_fwd refuses D 0");
    tc_expect_error(grm_cuda_gather_bwd(NULL, NULL, NULL, -1, 4, 8, GRM_DTYPE_F32, NULL),
                    GRM_EINVAL, "count -1 < 0", "gather_bwd refuses n -1");
    tc_expect_error(grm_cuda_pool_fwd(NULL, NULL, NULL, NULL, 3, 4, 8, GRM_DTYPE_F32, 7, NULL),
                    GRM_EINVAL, "mode 7 is not", "pool_fwd refuses mode 7");
    tc_expect_error(grm_cuda_pool_bwd(NULL, NULL, NULL, NULL, 3, 4, 70000, GRM_DTYPE_F16, 0,
                                      NULL),
                    GRM_EINVAL, "D 70000 outside", "pool_bwd refuses D 70000");
    tc_expect_error(grm_cuda_seq_tile_fwd(NULL, NULL, NULL, 3, 8, GRM_DTYPE_U8, NULL),
                    GRM_ENOTSUP, "grm_cuda_seq_tile_fwd: dtype 6", "seq_tile_fwd refuses u8");
}

int main(void)
{
    uint64_t rng = 0x6b65726e656c73ULL;
    tap_plan(N_NEG + N_DT * N_DIM * N_PER_CASE);
    negative_tests();
    if (!tc_have_device()) {
        for (int k = 0; k < N_DT * N_DIM * N_PER_CASE; k++)
            tap_skip(CUDA_SKIP, "embedding kernel case %d", k + 1);
        return tap_done();
    }
    emb_case c = make_case(&rng);
    tap_diag("S=%lld segments, n=%lld ids", (long long)c.S, (long long)c.n);
    for (int a = 0; a < N_DT; a++)
        for (int b = 0; b < N_DIM; b++) run_case(&c, dtypes[a], dims[b], &rng);
    free(c.offsets);
    free(c.idx);
    return tap_done();
}

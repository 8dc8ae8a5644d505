/* plugins/dense-hstu/hstu.c - the HSTU layer of dense-hstu (Zhai et al. 2024; MTGRBoost §2
 * eq. 1-3) on jagged sequences:
 *   U, V, Q, K = split(SiLU(f1(LN(x))))                       eq. 1
 *   O = SiLU(Q K^T + rab_pos + rab_time) / n V, causal          eq. 2 (hstu_attn_*)
 *   y = x + f2(Dropout(LN(O) * U))                              eq. 3 plus the residual
 * Forward cache, backward, parameters and flops. Linear layers and the attention run in
 * the implementation picked in create (hstu_ref.c or hstu_cpu.c); the row-wise steps
 * (layer norms, SiLU, dropout) are here, shared by both. See README.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hstu.h"

static const grm_device cpu_device = { GRM_DEVICE_CPU, 0 };

enum { P_W1, P_B1, P_W2, P_B2, P_RAB_POS, P_RAB_TIME, P_POS, P_COUNT };

static const char *const param_names[P_COUNT] = {
    "f1.weight", "f1.bias", "f2.weight", "f2.bias", "rab_pos", "rab_time", "pos_emb.weight"
};

struct hstu {
    const grm_host_api *host;
    hstu_config cfg;            /* copy */
    const hstu_impl *impl;      /* static */
    linear_exec ex;             /* f1, f2: the backend's GEMMs on the host's pool */
    /* The attention: the backend's op when it has one (grm/backend.h, since 1.7), else the
     * impl's kernel; one signature either way. attn_ctx is the backend's context or NULL. */
    grm_hstu_attn_fwd_fn attn_fwd;
    grm_hstu_attn_bwd_fn attn_bwd;
    grm_hstu_attn_ws_fn attn_ws_bytes;   /* NULL: hstu_attn_ws_bytes */
    void *attn_ctx;
    int64_t D;                  /* in_dim = out_dim */
    int64_t H, dqk, dv;
    int64_t HV;                 /* H * dv: width of U, V and of the attention output */
    int64_t P;                  /* H * (2 dv + 2 dqk): width of f1, columns [U | V | Q | K] */
    uint64_t seed;

    float *block;               /* owned (host->alloc): all params, then all grads */
    size_t nparams;             /* floats in the params half */
    float *value[P_COUNT];      /* views into block; NULL when the bias is off */
    float *grad[P_COUNT];
    int64_t shape[P_COUNT][2];
    int32_t order[P_COUNT];     /* params() index -> P_*; */
    int32_t ntensors;

    int64_t *time_thr;          /* owned (malloc): [time_buckets] */

    void *cache;                /* owned (host->alloc): hstu_cache_bytes(cap_rows, cap_seq) */
    int64_t cap_rows, cap_seq;
    /* views into cache, valid for cap_rows rows */
    float *xn;                  /* [N, D]  f1 input (x, or LN(x)) */
    float *rstd_in;             /* [N]     1/sigma of the input norm */
    float *z1;                  /* [N, P]  f1 output before SiLU */
    float *h1;                  /* [N, P]  SiLU(z1) = [U | V | Q | K] */
    float *on;                  /* [N, HV] attention output, then LN of it */
    float *rstd_o;              /* [N]     1/sigma of the attention-output norm */
    float *gd;                  /* [N, HV] f2 input: Dropout(LN(O) * U) */
    float *dh1;                 /* [N, P]  backward: d/d h1, then d/d z1 */
    float *dg;                  /* [N, HV] backward: d/d gd, then d/d O */
    float *tmp;                 /* [N, D]  f2 output (forward), d/d xn (backward) */
    int64_t *offsets;           /* [nseq+1] copy of the last forward's offsets */
    int64_t *times;             /* [N]     copy of the last forward's times */
    void *ws;                   /* hstu_attn_ws_bytes */

    int64_t rows;               /* rows of the last training forward; -1: none */
    int64_t nseq;               /* sequences of the last forward */
    int32_t has_times;          /* the last forward had a time bias */
    uint64_t dkey;              /* dropout key of the last training forward */
    int32_t dropped;            /* the last training forward applied dropout */
    int32_t in_dropped;         /* ... and input dropout, into xd */
    float *xd;                  /* [cap_xd, D] the block input as the layer saw it (pos_emb,
                                 * input dropout); the backward's scratch for dx after that */
    int64_t cap_xd;
    double pairs;               /* sum over sequences of L (L + 1) / 2, last forward */
    int64_t pairs_rows;         /* rows of that forward; 0: none yet */
};

/* ---- sizes ---- */

static int64_t proj_width(const hstu_config *cfg)
{
    return cfg->num_heads * (2 * cfg->dv + 2 * cfg->dqk);
}

/* Floats per row of the cache (see the views in struct hstu). */
static int64_t floats_per_row(const hstu_config *cfg, int64_t D)
{
    const int64_t P = proj_width(cfg), HV = cfg->num_heads * cfg->dv;
    return D + 1 + P + P + HV + 1 + HV + P + HV + D;
}

/* Attention workspace of rows rows in nseq sequences (the RAB buckets of the config): the
 * plugin's kernels' (ws NULL), or what the backend's attention op asks for. */
static size_t ws_bytes_for(const hstu_config *cfg, int64_t rows, int64_t nseq,
                           grm_hstu_attn_ws_fn ws, void *ws_ctx)
{
    const int64_t nrab = (cfg->rab_pos ? cfg->max_len : 0)
                         + (cfg->rab_time ? cfg->time_buckets : 0);
    return ws ? ws(ws_ctx, rows, nseq, cfg->num_heads, nrab)
              : hstu_attn_ws_bytes(rows, nseq, cfg->num_heads, nrab);
}

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* hstu_cache_bytes with the attention workspace of the chosen kernels. */
static size_t cache_bytes(const hstu_config *cfg, int64_t in_dim, int64_t rows, int64_t nseq,
                          grm_hstu_attn_ws_fn ws, void *ws_ctx)
{
    return align64((size_t)rows * (size_t)floats_per_row(cfg, in_dim) * sizeof(float))
           + align64((size_t)(nseq + 1) * sizeof(int64_t)) + align64((size_t)rows * sizeof(int64_t))
           + align64(ws_bytes_for(cfg, rows, nseq, ws, ws_ctx));
}

size_t hstu_cache_bytes(const hstu_config *cfg, int64_t in_dim, int64_t rows, int64_t nseq)
{
    return cache_bytes(cfg, in_dim, rows, nseq, NULL, NULL);
}

/* Lay the cache out for cap_rows rows and cap_seq sequences. */
static void cache_bind(hstu *m)
{
    const int64_t N = m->cap_rows;
    float *p = m->cache;
    m->xn = p;
    p += N * m->D;
    m->rstd_in = p;
    p += N;
    m->z1 = p;
    p += N * m->P;
    m->h1 = p;
    p += N * m->P;
    m->on = p;
    p += N * m->HV;
    m->rstd_o = p;
    p += N;
    m->gd = p;
    p += N * m->HV;
    m->dh1 = p;
    p += N * m->P;
    m->dg = p;
    p += N * m->HV;
    m->tmp = p;
    char *c = (char *)m->cache
              + align64((size_t)N * (size_t)floats_per_row(&m->cfg, m->D) * sizeof(float));
    m->offsets = (int64_t *)c;
    c += align64((size_t)(m->cap_seq + 1) * sizeof(int64_t));
    m->times = (int64_t *)c;
    c += align64((size_t)N * sizeof(int64_t));
    m->ws = c;
}

/* Make room for rows rows in nseq sequences; grows by at least half. */
static grm_status cache_reserve(hstu *m, int64_t rows, int64_t nseq)
{
    if (rows <= m->cap_rows && nseq <= m->cap_seq && m->cache != NULL)
        return GRM_OK;
    int64_t cap = rows > m->cap_rows ? m->cap_rows + m->cap_rows / 2 : m->cap_rows;
    int64_t cap_seq = nseq > m->cap_seq ? m->cap_seq + m->cap_seq / 2 : m->cap_seq;
    if (cap < rows)
        cap = rows;
    if (cap_seq < nseq)
        cap_seq = nseq;
    if ((uint64_t)cap > (SIZE_MAX / 4) / sizeof(float) / (uint64_t)floats_per_row(&m->cfg, m->D))
        return m->host->errorf(GRM_ENOMEM, "dense-hstu: forward: %lld rows overflow size_t",
                               (long long)cap);
    const size_t bytes = cache_bytes(&m->cfg, m->D, cap, cap_seq, m->attn_ws_bytes, m->attn_ctx);
    void *c = m->host->alloc(cpu_device, bytes, 64);
    if (c == NULL)
        return m->host->errorf(GRM_ENOMEM, "dense-hstu: forward: cannot allocate the cache "
                               "for %lld rows (%zu bytes)", (long long)cap, bytes);
    m->host->free(cpu_device, m->cache);
    m->cache = c;
    m->cap_rows = cap;
    m->cap_seq = cap_seq;
    m->rows = -1;
    cache_bind(m);
    return GRM_OK;
}

/* ---- create / destroy ---- */

static grm_status check_config(const grm_host_api *host, const hstu_config *cfg,
                               int64_t in_dim)
{
    static const char *const names[4] = { "num_heads", "dqk", "dv", "max_len" };
    const int64_t vals[4] = { cfg->num_heads, cfg->dqk, cfg->dv, cfg->max_len };
    for (int i = 0; i < 4; i++)
        if (vals[i] < 1 || vals[i] > HSTU_DIM_MAX)
            return host->errorf(GRM_EINVAL, "dense-hstu: %s: %lld out of range 1..%d",
                                names[i], (long long)vals[i], HSTU_DIM_MAX);
    if (cfg->time_buckets < 1 || cfg->time_buckets > HSTU_TIME_BUCKETS_MAX)
        return host->errorf(GRM_EINVAL, "dense-hstu: time_buckets: %lld out of range 1..%d",
                            (long long)cfg->time_buckets, HSTU_TIME_BUCKETS_MAX);
    if (!(cfg->dropout >= 0 && cfg->dropout < 1))
        return host->errorf(GRM_EINVAL, "dense-hstu: dropout: %g out of range [0, 1)",
                            cfg->dropout);
    if (cfg->attn_norm != HSTU_NORM_MAX_LEN && cfg->attn_norm != HSTU_NORM_LENGTH)
        return host->errorf(GRM_EINVAL, "dense-hstu: attn_norm: unknown index %d; use "
                            "max_len or length", (int)cfg->attn_norm);
    if (cfg->impl != HSTU_IMPL_CPU && cfg->impl != HSTU_IMPL_REF && cfg->impl != HSTU_IMPL_AUTO)
        return host->errorf(GRM_EINVAL, "dense-hstu: impl: unknown index %d; use cpu, ref or "
                            "auto", (int)cfg->impl);
    if (in_dim < 1 || in_dim > HSTU_DIM_MAX)
        return host->errorf(GRM_EINVAL, "dense-hstu: create: in_dim %lld out of range 1..%d",
                            (long long)in_dim, HSTU_DIM_MAX);
    const int64_t P = proj_width(cfg);
    if (P > HSTU_DIM_MAX || P * in_dim > INT32_MAX)
        return host->errorf(GRM_EINVAL, "dense-hstu: create: num_heads * (2 dv + 2 dqk) = "
                            "%lld features (in_dim %lld) is too large; at most %d and %d "
                            "weights", (long long)P, (long long)in_dim, HSTU_DIM_MAX,
                            INT32_MAX);
    return GRM_OK;
}

/* The position table [L, D] as the reference's input preprocessor initialises it
 * (generative-recommenders research code, LearnablePositionalEmbeddingInputFeatures-
 * Preprocessor.reset_state: truncated_normal(mean 0, std sqrt(1 / D)), which draws four
 * N(0, 1) values per weight and keeps the first inside (-2, 2), the first of the four when
 * none is). Row r is a pure function of (seed, r). */
static void init_positions(float *pos, int64_t L, int64_t D, uint64_t seed)
{
    const double sd = sqrt(1.0 / (double)D);
    const uint64_t name = grm_str_hash64("pos_emb.weight");
    for (int64_t r = 0; r < L; r++) {
        uint64_t st = grm_mix64(seed ^ grm_mix64(name + (uint64_t)r));
        for (int64_t c = 0; c < D; c++) {
            double z[4];
            for (int k = 0; k < 4; k += 2) {   /* Box-Muller, two normals a pair */
                const double u1 = 1.0 - grm_rng_uniform01(&st), u2 = grm_rng_uniform01(&st);
                const double rad = sqrt(-2.0 * log(u1));
                z[k] = rad * cos(6.283185307179586 * u2);
                z[k + 1] = rad * sin(6.283185307179586 * u2);
            }
            int k = 0;
            while (k < 4 && !(z[k] > -2.0 && z[k] < 2.0))
                k++;
            pos[r * D + c] = (float)(sd * z[k < 4 ? k : 0]);
        }
    }
}

grm_status hstu_create(const grm_host_api *host, const hstu_config *cfg, int64_t in_dim,
                       uint64_t seed, hstu **out)
{
    grm_status st;
    *out = NULL;
    st = check_config(host, cfg, in_dim);
    if (st != GRM_OK)
        return st;
    hstu *m = calloc(1, sizeof *m);
    if (m == NULL)
        return host->errorf(GRM_ENOMEM, "dense-hstu: create: out of memory");
    m->host = host;
    m->cfg = *cfg;
    if (m->cfg.impl == HSTU_IMPL_AUTO)   /* the run's backend decides (grm/backend.h) */
        m->cfg.impl = grm_backend_wants_ref(host) ? HSTU_IMPL_REF : HSTU_IMPL_CPU;
    m->impl = m->cfg.impl == HSTU_IMPL_REF ? &hstu_impl_ref : &hstu_impl_cpu;
    if ((st = linear_exec_init(&m->ex, host, m->impl->parallel, "dense-hstu")) != GRM_OK) {
        free(m);
        return st;
    }
    m->ex.grain_rows = 32;      // the chunks dense-hstu's projections were tuned with
    m->ex.grain_cols = 16;
    // the attention: the backend's op when it has one (a device kernel, kernels/), unless
    // impl = ref asks for the spec; else this plugin's kernel of the same signature
    const grm_backend_iface *bi = m->ex.be->iface;
    if (m->cfg.impl != HSTU_IMPL_REF && GRM_HAS_OP(grm_backend_iface, bi, hstu_attn_bwd)
        && bi->hstu_attn_fwd && bi->hstu_attn_bwd && bi->hstu_attn_ws_bytes) {
        m->attn_fwd = bi->hstu_attn_fwd;
        m->attn_bwd = bi->hstu_attn_bwd;
        m->attn_ws_bytes = bi->hstu_attn_ws_bytes;
        m->attn_ctx = m->ex.be->context;
    } else {
        m->attn_fwd = m->impl->attn_fwd;
        m->attn_bwd = m->impl->attn_bwd;
    }
    m->D = in_dim;
    m->H = cfg->num_heads;
    m->dqk = cfg->dqk;
    m->dv = cfg->dv;
    m->HV = m->H * m->dv;
    m->P = proj_width(cfg);
    m->seed = seed;
    m->rows = -1;

    const int64_t shapes[P_COUNT][2] = {
        { m->P, m->D }, { m->P, 1 }, { m->D, m->HV }, { m->D, 1 },
        { m->H, cfg->max_len }, { m->H, cfg->time_buckets }, { cfg->max_len, m->D }
    };
    const int on[P_COUNT] = { 1, 1, 1, 1, cfg->rab_pos != 0, cfg->rab_time != 0,
                              cfg->pos_emb != 0 };
    size_t nparams = 0;
    for (int i = 0; i < P_COUNT; i++) {
        m->shape[i][0] = shapes[i][0];
        m->shape[i][1] = shapes[i][1];
        if (on[i]) {
            m->order[m->ntensors++] = i;
            nparams += (size_t)(shapes[i][0] * shapes[i][1]);
        }
    }
    m->nparams = nparams;

    m->time_thr = malloc((size_t)cfg->time_buckets * sizeof *m->time_thr);
    // STYLE.md §8: parameters and gradients are one block, typed views into it
    m->block = host->alloc(cpu_device, 2 * nparams * sizeof(float), 64);
    if (m->time_thr == NULL || m->block == NULL) {
        st = host->errorf(GRM_ENOMEM, "dense-hstu: create: cannot allocate %zu parameters",
                          nparams);
        goto fail;
    }
    hstu_time_thresholds(m->time_thr, cfg->time_buckets);
    memset(m->block, 0, 2 * nparams * sizeof(float));
    float *p = m->block, *g = m->block + nparams;
    for (int32_t t = 0; t < m->ntensors; t++) {
        const int i = m->order[t];
        m->value[i] = p;
        m->grad[i] = g;
        p += m->shape[i][0] * m->shape[i][1];
        g += m->shape[i][0] * m->shape[i][1];
    }
    // f1, f2: Xavier uniform; biases 0; RAB tables N(0, 0.02^2) as the reference
    // implementation, each row drawn by grm_row_init (a pure function of seed and row).
    // init = normal draws W1 from N(0, init_std^2) instead, the reference's _uvqk
    // (SequentialTransductionUnitJagged: torch.empty(...).normal_(mean=0, std=0.02)); its
    // _o is Xavier uniform, as f2 here. W1's Xavier draw is made (and then replaced) either
    // way: W2 is the next draw of the same stream, so it stays the same for both inits.
    uint64_t state = seed;
    linear_xavier_uniform(m->value[P_W1], m->D, m->P, &state);
    linear_xavier_uniform(m->value[P_W2], m->HV, m->D, &state);
    if (cfg->init == HSTU_INIT_NORMAL)
        for (int64_t r = 0; r < m->P; r++)
            grm_row_init(m->value[P_W1] + r * m->D, (int32_t)m->D, GRM_EMB_INIT_NORMAL,
                         cfg->init_std, seed, grm_str_hash64(param_names[P_W1]), r);
    for (int i = P_RAB_POS; i <= P_RAB_TIME; i++)
        if (m->value[i] != NULL)
            for (int64_t h = 0; h < m->H; h++)
                grm_row_init(m->value[i] + h * m->shape[i][1], (int32_t)m->shape[i][1],
                             GRM_EMB_INIT_NORMAL, 0.02, seed, grm_str_hash64(param_names[i]),
                             h);
    if (m->value[P_POS] != NULL)
        init_positions(m->value[P_POS], cfg->max_len, m->D, seed);
    *out = m;
    return GRM_OK;

fail:
    hstu_destroy(m);
    return st;
}

void hstu_destroy(hstu *m)
{
    if (m == NULL)
        return;
    if (m->block != NULL)
        m->host->free(cpu_device, m->block);
    if (m->cache != NULL)
        m->host->free(cpu_device, m->cache);
    if (m->xd != NULL)
        m->host->free(cpu_device, m->xd);
    free(m->time_thr);
    free(m);
}

int64_t hstu_dim(const hstu *m)
{
    return m->D;
}

/* ---- row-wise steps ---- */

typedef struct rows_job {
    hstu *m;
    int fuse_bias;          /* the cpu path: the row passes add the linear layers' biases
                             * (forward) and sum f1's bias gradient (backward) */
    float *y;
    const float *x;
    const float *dy;
    float *dx;
} rows_job;

/* Run fn over [0, rows): on the pool for the cpu implementation, else in one call. */
static grm_status run_rows(hstu *m, int64_t rows, grm_range_fn fn, rows_job *job)
{
    if (rows == 0)
        return GRM_OK;
    if (m->impl->parallel)
        return m->host->parallel_for(rows, 16, fn, job);
    return fn(job, 0, rows);
}

/* The norms sum in double, four lanes at a time (lane l takes elements l, l + 4, ...),
 * then the lanes in order: a plain double loop was a chain of dependent adds, 9% of the
 * layer's instructions at ml100k-hstu's width (64). The order is fixed, so a row's result
 * does not depend on the thread that computes it. */
typedef double hd4 __attribute__((vector_size(32)));
typedef float hf4 __attribute__((vector_size(16)));

#define HF4_TO_HD4(v, p) do { hf4 f_; memcpy(&f_, (p), sizeof f_); \
                              (v) = __builtin_convertvector(f_, hd4); } while (0)

#define HD4_SUM(v) (((v)[0] + (v)[1]) + ((v)[2] + (v)[3]))

/* Layer norm without affine of x [n] into y [n]; returns 1/sigma. */
static inline __attribute__((always_inline)) float ln_row(float *y, const float *x, int64_t n)
{
    hd4 s = { 0 }, v;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        HF4_TO_HD4(v, x + i);
        s += v;
    }
    double mean = HD4_SUM(s);
    for (; i < n; i++)
        mean += x[i];
    mean /= (double)n;
    s = (hd4){ 0 };
    for (i = 0; i + 4 <= n; i += 4) {
        HF4_TO_HD4(v, x + i);
        v -= mean;
        s += v * v;
    }
    double var = HD4_SUM(s);
    for (; i < n; i++)
        var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= (double)n;
    const double rstd = 1.0 / sqrt(var + HSTU_LN_EPS);
    for (i = 0; i < n; i++)
        y[i] = (float)(((double)x[i] - mean) * rstd);
    return (float)rstd;
}

/* Backward of ln_row: dx [n] = rstd (g - mean(g) - y mean(g y)) from g [n] = d/dy and the
 * normalized output y [n]; dx may alias g. */
static inline __attribute__((always_inline)) void
ln_row_bwd(float *dx, const float *g, const float *y, float rstd, int64_t n)
{
    hd4 sg = { 0 }, sgy = { 0 }, vg, vy;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        HF4_TO_HD4(vg, g + i);
        HF4_TO_HD4(vy, y + i);
        sg += vg;
        sgy += vg * vy;
    }
    double mg = HD4_SUM(sg), mgy = HD4_SUM(sgy);
    for (; i < n; i++) {
        mg += g[i];
        mgy += (double)g[i] * (double)y[i];
    }
    mg /= (double)n;
    mgy /= (double)n;
    for (i = 0; i < n; i++)
        dx[i] = (float)(rstd * ((double)g[i] - mg - (double)y[i] * mgy));
}

static float silu(float z)
{
    return z * hstu_sigmoid(z);
}

/* d SiLU(z) / dz = sigmoid(z) (1 + z (1 - sigmoid(z))). */
static inline float silu_grad(float z)
{
    const float sg = hstu_sigmoid(z);
    return sg * (1.0f + z * (1.0f - sg));
}

/* Rows [r0, r1): xn = LN(x) or x. */
HSTU_VECTOR_CLONES
static grm_status fwd_in_rows(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    const hstu *m = j->m;
    for (int64_t r = r0; r < r1; r++) {
        if (m->cfg.input_norm)
            m->rstd_in[r] = ln_row(m->xn + r * m->D, j->x + r * m->D, m->D);
        else
            memcpy(m->xn + r * m->D, j->x + r * m->D, (size_t)m->D * sizeof *m->xn);
    }
    return GRM_OK;
}

/* Rows [r0, r1): h1 = SiLU(z1) (eq. 1). */
HSTU_VECTOR_CLONES
static grm_status fwd_silu_rows(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    const hstu *m = j->m;
    // restrict locals: through m the store to h1 could alias m->P, and nothing vectorizes
    float *restrict h1 = m->h1;
    float *restrict z1 = m->z1;
    const int64_t P = m->P;
    if (j->fuse_bias) {     // z1 came without f1's bias: add it here, where z1 is read anyway
        const float *restrict b1 = m->value[P_B1];
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = 0; c < P; c++) {
                const float z = z1[r * P + c] + b1[c];
                z1[r * P + c] = z;
                h1[r * P + c] = silu(z);
            }
        return GRM_OK;
    }
    for (int64_t e = r0 * P, end = r1 * P; e < end; e++)
        h1[e] = silu(z1[e]);
    return GRM_OK;
}

/* Rows [r0, r1): on = LN(O) in place, gd = Dropout(on * U) (eq. 3). */
HSTU_VECTOR_CLONES
static grm_status fwd_out_rows(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    const hstu *m = j->m;
    // locals, so that the stores to gd cannot alias them and the no-dropout loop vectorizes
    const int dropped = m->dropped;
    const int64_t HV = m->HV, P = m->P;
    const float scale = dropped ? (float)(1.0 / (1.0 - m->cfg.dropout)) : 1.0f;
    for (int64_t r = r0; r < r1; r++) {
        float *restrict on = m->on + r * HV, *restrict gd = m->gd + r * HV;   /* [HV] */
        const float *restrict u = m->h1 + r * P;                               /* [HV] */
        m->rstd_o[r] = ln_row(on, on, HV);
        if (!dropped) {
            for (int64_t c = 0; c < HV; c++)
                gd[c] = on[c] * u[c];
            continue;
        }
        for (int64_t c = 0; c < HV; c++) {
            const int keep = hstu_dropout_keep(m->dkey, r * HV + c, m->cfg.dropout);
            gd[c] = keep ? on[c] * u[c] * scale : 0.0f;
        }
    }
    return GRM_OK;
}

/* Rows [r0, r1): y = x + tmp (the residual). */
static grm_status fwd_residual_rows(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    const hstu *m = j->m;
    const int64_t D = m->D;
    if (j->fuse_bias) {     // tmp came without f2's bias
        const float *b2 = m->value[P_B2];
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = 0; c < D; c++)
                j->y[r * D + c] = j->x[r * D + c] + (m->tmp[r * D + c] + b2[c]);
        return GRM_OK;
    }
    for (int64_t e = r0 * D; e < r1 * D; e++)
        j->y[e] = j->x[e] + m->tmp[e];
    return GRM_OK;
}

/* ---- forward ---- */

/* Copy and check the jagged layout of ctx (or make each row its own sequence). */
static grm_status load_layout(hstu *m, int64_t rows, const grm_dense_ctx *ctx)
{
    const int jagged = ctx != NULL && ctx->offsets != NULL;
    const int64_t nseq = jagged ? ctx->nseq : rows;
    if (nseq < 0)
        return m->host->errorf(GRM_EINVAL, "dense-hstu: forward: ctx->nseq %lld is negative",
                               (long long)nseq);
    if (jagged && nseq == 0 && rows != 0)
        return m->host->errorf(GRM_EINVAL, "dense-hstu: forward: ctx->nseq is 0 but x has "
                               "%lld rows", (long long)rows);
    grm_status st = cache_reserve(m, rows, nseq);
    if (st != GRM_OK)
        return st;
    m->nseq = nseq;
    m->pairs = 0;
    m->offsets[0] = 0;
    for (int64_t s = 0; s < nseq; s++) {
        const int64_t o = jagged ? ctx->offsets[s] : s, e = jagged ? ctx->offsets[s + 1] : s + 1;
        if ((s == 0 && o != 0) || e < o)
            return m->host->errorf(GRM_EINVAL, "dense-hstu: forward: ctx->offsets[%lld..%lld] "
                                   "= %lld, %lld; offsets must start at 0 and not decrease",
                                   (long long)s, (long long)s + 1, (long long)o, (long long)e);
        m->offsets[s + 1] = e;
        m->pairs += 0.5 * (double)(e - o) * (double)(e - o + 1);
    }
    if (m->offsets[nseq] != rows)
        return m->host->errorf(GRM_EINVAL, "dense-hstu: forward: ctx->offsets[%lld] = %lld, "
                               "expected the %lld rows of x", (long long)nseq,
                               (long long)m->offsets[nseq], (long long)rows);
    m->pairs_rows = rows;
    m->has_times = m->cfg.rab_time && GRM_HAS_OP(grm_dense_ctx, ctx, times);
    if (m->has_times)
        memcpy(m->times, ctx->times, (size_t)rows * sizeof *m->times);
    return GRM_OK;
}

static grm_hstu_attn_args attn_args(const hstu *m)
{
    grm_hstu_attn_args a = { 0 };
    a.host = m->host;
    a.nseq = m->nseq;
    a.offsets = m->offsets;
    a.times = m->has_times ? m->times : NULL;
    a.H = m->H;
    a.dqk = m->dqk;
    a.dv = m->dv;
    a.ld = m->P;
    a.v = m->h1 + m->HV;                    // columns [U | V | Q | K], as the reference
    a.q = m->h1 + 2 * m->HV;
    a.k = m->h1 + 2 * m->HV + m->H * m->dqk;
    a.rab_pos = m->value[P_RAB_POS];
    a.rab_time = m->value[P_RAB_TIME];
    a.max_len = m->cfg.max_len;
    a.nbuckets = m->cfg.time_buckets;
    a.time_thr = m->time_thr;
    a.norm = m->cfg.attn_norm;
    return a;
}

/* Room for the block input as the layer sees it (xd, [rows, D]). */
static grm_status reserve_xd(hstu *m, int64_t rows)
{
    if (rows <= m->cap_xd)
        return GRM_OK;
    float *nx = m->host->alloc(cpu_device, (size_t)(rows * m->D) * sizeof(float), 64);
    if (nx == NULL)
        return m->host->errorf(GRM_ENOMEM, "dense-hstu: forward: cannot allocate the input "
                               "buffer for %lld rows", (long long)rows);
    if (m->xd != NULL)
        m->host->free(cpu_device, m->xd);
    m->xd = nx;
    m->cap_xd = rows;
    return GRM_OK;
}

/* v [rows, D] *= the input dropout mask of the last training forward, / (1 - p); the same
 * call on a gradient is the backward. */
static void input_mask(const hstu *m, float *v, int64_t rows)
{
    const uint64_t key = grm_mix64(m->dkey ^ UINT64_C(0x494e505554) /* "INPUT" */);
    const float s = (float)(1.0 / (1.0 - m->cfg.input_dropout));
    for (int64_t e = 0; e < rows * m->D; e++)
        v[e] = hstu_dropout_keep(key, e, m->cfg.input_dropout) ? v[e] * s : 0.0f;
}

/* xd = Dropout(x sqrt(D) + P[t]) with pos_emb, else Dropout(x), over the sequences of the
 * last load_layout. */
static grm_status embed_input(hstu *m, const float *x, int64_t rows)
{
    grm_status st = reserve_xd(m, rows);
    if (st != GRM_OK)
        return st;
    const int64_t D = m->D;
    if (m->cfg.pos_emb) {
        const float scale = (float)sqrt((double)D);
        const float *P = m->value[P_POS];     /* [max_len, D] */
        for (int64_t q = 0; q < m->nseq; q++) {
            const int64_t first = m->offsets[q], L = m->offsets[q + 1] - first;
            if (L > m->cfg.max_len)
                return m->host->errorf(GRM_EINVAL, "dense-hstu: forward: sequence %lld has "
                                       "%lld rows, more than the max_len = %lld positions of "
                                       "pos_emb; raise max_len or cut the sequences ([train] "
                                       "max_seq_len)", (long long)q, (long long)L,
                                       (long long)m->cfg.max_len);
            for (int64_t t = 0; t < L; t++)
                for (int64_t c = 0; c < D; c++)
                    m->xd[(first + t) * D + c] = x[(first + t) * D + c] * scale + P[t * D + c];
        }
    } else {
        memcpy(m->xd, x, (size_t)(rows * D) * sizeof *x);
    }
    if (m->in_dropped)
        input_mask(m, m->xd, rows);
    return GRM_OK;
}

/* The backward of embed_input: g [rows, D] = d/d xd in, d/d x out; dP[t] += d/d (x sqrt(D)
 * + P[t]). */
static void embed_input_bwd(hstu *m, float *g, int64_t rows)
{
    const int64_t D = m->D;
    if (m->in_dropped)
        input_mask(m, g, rows);
    if (!m->cfg.pos_emb)
        return;
    const float scale = (float)sqrt((double)D);
    float *dP = m->grad[P_POS];
    for (int64_t q = 0; q < m->nseq; q++) {
        const int64_t first = m->offsets[q], L = m->offsets[q + 1] - first;
        for (int64_t t = 0; t < L; t++)
            for (int64_t c = 0; c < D; c++) {
                dP[t * D + c] += g[(first + t) * D + c];
                g[(first + t) * D + c] *= scale;
            }
    }
}

grm_status hstu_forward(hstu *m, float *y, const float *x, int64_t rows,
                        const grm_dense_ctx *ctx)
{
    const int32_t training = ctx != NULL && ctx->training;
    m->rows = -1;
    grm_status st = load_layout(m, rows, ctx);
    if (st != GRM_OK || rows == 0) {
        if (st == GRM_OK && training)
            m->rows = 0;
        return st;
    }
    m->dropped = training && m->cfg.dropout > 0;
    m->dkey = hstu_dropout_key(m->seed, ctx != NULL ? ctx->step : 0);
    // The cpu path leaves f1's and f2's biases to the passes that read their outputs next
    // (fwd_silu_rows, fwd_residual_rows): no copy of the bias into every row and no GEMM
    // read of it, two passes over [rows, P] and [rows, D] fewer. Measured beside the copy,
    // the difference was inside this machine's spread; it is kept for the traffic it
    // removes. The sums are (x W^T) + b either way.
    rows_job job = { .m = m, .y = y, .x = x, .fuse_bias = m->impl->parallel };
    // the reference's input preprocessor, here per block: with pos_emb the layer sees
    // x sqrt(D) + P[t] (t: the row's position from its sequence's start), then input
    // dropout (the reference's embedding dropout): xd = that * mask / (1 - p); the
    // residual sees xd too
    m->in_dropped = training && m->cfg.input_dropout > 0;
    if (m->in_dropped || m->cfg.pos_emb) {
        if ((st = embed_input(m, x, rows)) != GRM_OK)
            return st;
        job.x = m->xd;
    }

    // eq. 1: U, V, Q, K = split(SiLU(f1(LN(x))))
    st = run_rows(m, rows, fwd_in_rows, &job);
    if (st == GRM_OK)
        st = m->impl->linear_fwd(m->z1, m->xn, m->value[P_W1],
                                 job.fuse_bias ? NULL : m->value[P_B1], rows, m->D,
                                 m->P, &m->ex);
    if (st == GRM_OK)
        st = run_rows(m, rows, fwd_silu_rows, &job);
    // eq. 2: O = SiLU(Q K^T + rab) / n V
    const grm_hstu_attn_args a = attn_args(m);
    if (st == GRM_OK)
        st = m->attn_fwd(m->attn_ctx, m->on, &a, m->ws);
    // eq. 3: y = x + f2(Dropout(LN(O) * U))
    if (st == GRM_OK)
        st = run_rows(m, rows, fwd_out_rows, &job);
    if (st == GRM_OK)
        st = m->impl->linear_fwd(m->tmp, m->gd, m->value[P_W2],
                                 job.fuse_bias ? NULL : m->value[P_B2], rows, m->HV,
                                 m->D, &m->ex);
    if (st == GRM_OK)
        st = run_rows(m, rows, fwd_residual_rows, &job);
    if (st == GRM_OK && training)
        m->rows = rows;
    return st;
}

/* ---- backward ---- */

/* Rows [r0, r1): dg (d/d gd) -> dU into dh1, then d/d O in place of dg. */
HSTU_VECTOR_CLONES
static grm_status bwd_out_rows(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    const hstu *m = j->m;
    const int dropped = m->dropped;
    const int64_t HV = m->HV, P = m->P;
    const float scale = dropped ? (float)(1.0 / (1.0 - m->cfg.dropout)) : 1.0f;
    for (int64_t r = r0; r < r1; r++) {
        float *restrict dg = m->dg + r * HV, *restrict du = m->dh1 + r * P;       /* [HV] */
        const float *restrict on = m->on + r * HV, *restrict u = m->h1 + r * P;   /* [HV] */
        if (!dropped) {
            for (int64_t c = 0; c < HV; c++) {
                const float g = dg[c];              /* d/d (on * u) */
                du[c] = g * on[c];
                dg[c] = g * u[c];
            }
        } else {
            for (int64_t c = 0; c < HV; c++) {
                const int keep = hstu_dropout_keep(m->dkey, r * HV + c, m->cfg.dropout);
                const float g = keep ? dg[c] * scale : 0.0f;
                du[c] = g * on[c];
                dg[c] = g * u[c];
            }
        }
        ln_row_bwd(dg, dg, on, m->rstd_o[r], HV);
    }
    return GRM_OK;
}

/* Rows [r0, r1): dh1 -> dz1 = dh1 SiLU'(z1) in place. */
HSTU_VECTOR_CLONES
static grm_status bwd_silu_rows(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    const hstu *m = j->m;
    float *restrict dh1 = m->dh1;
    const float *restrict z1 = m->z1;
    for (int64_t e = r0 * m->P, end = r1 * m->P; e < end; e++)
        dh1[e] *= silu_grad(z1[e]);
    return GRM_OK;
}

/* f1's bias gradient is summed as dz1 is written (the cpu implementation): over fixed
 * blocks of HSTU_DB_ROWS rows, each block's column sums in part [block, P], then the blocks
 * in order, so the sums do not depend on the threads. Summed by the linear backward, the
 * columns of the [rows, P] dz1 were read from memory a second time: 5% of a B 128, L 50
 * layer (dense-mlp's bwd_dw_cols). */
#define HSTU_DB_ROWS 64

typedef struct silu_db_job {
    const hstu *m;
    float *part;                /* [blocks, P] */
    int64_t rows;
} silu_db_job;

/* Blocks [b0, b1): dh1 -> dz1 = dh1 SiLU'(z1) in place, and the block's column sums. */
HSTU_VECTOR_CLONES
static grm_status bwd_silu_db_blocks(void *ctx, int64_t b0, int64_t b1)
{
    const silu_db_job *j = ctx;
    const hstu *m = j->m;
    const int64_t P = m->P;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t r0 = b * HSTU_DB_ROWS;
        const int64_t r1 = r0 + HSTU_DB_ROWS < j->rows ? r0 + HSTU_DB_ROWS : j->rows;
        float *restrict acc = j->part + b * P;                      /* [P] */
        memset(acc, 0, (size_t)P * sizeof *acc);
        for (int64_t r = r0; r < r1; r++) {
            float *restrict dh = m->dh1 + r * P;                    /* [P] */
            const float *restrict z1 = m->z1 + r * P;
            for (int64_t c = 0; c < P; c++) {
                const float v = dh[c] * silu_grad(z1[c]);
                dh[c] = v;
                acc[c] += v;
            }
        }
    }
    return GRM_OK;
}

/* dz1 and db1 += its column sums (bwd_silu_db_blocks), on the pool. */
static grm_status bwd_silu_db(hstu *m, int64_t rows)
{
    const int64_t nb = (rows + HSTU_DB_ROWS - 1) / HSTU_DB_ROWS, P = m->P;
    float *part = malloc((size_t)(nb * P) * sizeof *part);
    if (part == NULL)
        return m->host->errorf(GRM_ENOMEM, "dense-hstu: backward: out of memory for %lld "
                               "bias partial sums", (long long)(nb * P));
    silu_db_job job = { .m = m, .part = part, .rows = rows };
    const grm_status st = m->host->parallel_for(nb, 1, bwd_silu_db_blocks, &job);
    if (st == GRM_OK) {
        float *db = m->grad[P_B1];
        for (int64_t b = 0; b < nb; b++)
            for (int64_t c = 0; c < P; c++)
                db[c] += part[b * P + c];
    }
    free(part);
    return st;
}

/* Rows [r0, r1): dx = dy + d/dx of the input norm applied to tmp (= d/d xn). */
HSTU_VECTOR_CLONES
static grm_status bwd_in_rows(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    const hstu *m = j->m;
    for (int64_t r = r0; r < r1; r++) {
        float *t = m->tmp + r * m->D;        /* [D] */
        if (m->cfg.input_norm)
            ln_row_bwd(t, t, m->xn + r * m->D, m->rstd_in[r], m->D);
        for (int64_t c = 0; c < m->D; c++)
            j->dx[r * m->D + c] = j->dy[r * m->D + c] + t[c];
    }
    return GRM_OK;
}

grm_status hstu_backward(hstu *m, float *dx, const float *dy, int64_t rows)
{
    if (m->rows < 0)
        return m->host->errorf(GRM_EINVAL, "dense-hstu: backward: no training forward to "
                               "differentiate; call forward with ctx->training = 1 first");
    if (rows != m->rows)
        return m->host->errorf(GRM_EINVAL, "dense-hstu: backward: dy has %lld rows, the last "
                               "forward had %lld", (long long)rows, (long long)m->rows);
    if (rows == 0)
        return GRM_OK;
    rows_job job = { .m = m, .dy = dy, .dx = dx, .fuse_bias = m->impl->parallel };
    // eq. 3 backward: f2, dropout, the product with U, the norm of O
    grm_status st = m->impl->linear_bwd(m->dg, m->grad[P_W2], m->grad[P_B2], dy, m->gd,
                                        m->value[P_W2], rows, m->HV, m->D, 0, &m->ex);
    if (st == GRM_OK)
        st = run_rows(m, rows, bwd_out_rows, &job);
    // eq. 2 backward: dQ, dK, dV into their columns of dh1, and the RAB tables
    const grm_hstu_attn_args a = attn_args(m);
    if (st == GRM_OK)
        st = m->attn_bwd(m->attn_ctx, m->dh1 + 2 * m->HV, m->dh1 + 2 * m->HV + m->H * m->dqk,
                         m->dh1 + m->HV, m->grad[P_RAB_POS],
                         m->has_times ? m->grad[P_RAB_TIME] : NULL, m->dg, &a, m->ws);
    // eq. 1 backward: SiLU, f1, the input norm, and the residual
    if (st == GRM_OK)
        st = job.fuse_bias ? bwd_silu_db(m, rows) : run_rows(m, rows, bwd_silu_rows, &job);
    // the position table's gradient needs d/d xd even when the caller wants no dx: it is
    // computed into xd, which the backward no longer reads
    if (dx == NULL && m->cfg.pos_emb)
        job.dx = m->xd;
    if (st == GRM_OK)
        st = m->impl->linear_bwd(job.dx != NULL ? m->tmp : NULL, m->grad[P_W1],
                                 job.fuse_bias ? NULL : m->grad[P_B1], m->dh1, m->xn,
                                 m->value[P_W1], rows, m->D, m->P, 0, &m->ex);
    if (st == GRM_OK && job.dx != NULL)
        st = run_rows(m, rows, bwd_in_rows, &job);
    if (st == GRM_OK && job.dx != NULL && (m->in_dropped || m->cfg.pos_emb))
        embed_input_bwd(m, job.dx, rows);   // through the mask and the positions
    return st;
}

/* ---- parameters and flops ---- */

grm_status hstu_params(hstu *m, int32_t index, grm_named_tensor *value, grm_tensor *grad)
{
    if (index < 0 || index >= m->ntensors)
        return m->host->errorf(GRM_ENOTFOUND, "dense-hstu: params: no parameter %d; the "
                               "block has %d", (int)index, (int)m->ntensors);
    const int i = m->order[index];
    grm_tensor t = { 0 };
    t.dtype = GRM_DTYPE_F32;
    t.device.type = GRM_DEVICE_CPU;
    for (int d = 0; d < GRM_TENSOR_MAX_DIMS; d++)
        t.shape[d] = 1;
    const int is_vec = i == P_B1 || i == P_B2;
    t.ndim = is_vec ? 1 : 2;
    t.shape[0] = m->shape[i][0];
    if (!is_vec)
        t.shape[1] = m->shape[i][1];
    if (value != NULL) {
        value->name = param_names[i];
        value->tensor = t;
        value->tensor.data = m->value[i];
    }
    if (grad != NULL) {
        *grad = t;
        grad->data = m->grad[i];
    }
    return GRM_OK;
}

double hstu_flops(const hstu *m, int64_t rows, int32_t backward)
{
    // projections: f1 [rows, D] x [D, P] and f2 [rows, HV] x [HV, D]
    const double proj = 2.0 * (double)rows * (double)m->D * (double)(m->P + m->HV);
    // attention: per head and causal pair, q.k (2 dqk) and a v (2 dv); the pair count is
    // the last forward's sum of L (L + 1) / 2, scaled to `rows` (none yet: length-1)
    double pairs = (double)rows;
    if (m->pairs_rows > 0)
        pairs = m->pairs * (double)rows / (double)m->pairs_rows;
    const double attn = pairs * (double)m->H * 2.0 * (double)(m->dqk + m->dv);
    return backward ? 2.0 * (proj + attn) : proj + attn;
}

/* plugins/dense-mlp/mlp.c - the dense-mlp block: a stack of linear layers
 * y = act(x W_l^T + b_l) with optional inverted dropout on hidden activations and
 * optional row-wise L2 normalization of the output; forward, backward and the named
 * parameters. The linear products go through the implementation picked in create
 * (linear_ref.c or linear_cpu.c, shared with dense-mmoe); the elementwise steps are in
 * mlp_ref.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

typedef struct mlp_layer {
    linear_layer lin;       /* in, out; w, b, dw, db: views into mlp.block */
    char wname[32], bname[32];
    /* activation cache, views into mlp.cache (valid for rows_cap rows) */
    float *z;               /* [rows, out] pre-activation */
    float *h;               /* [rows, out] activation (after dropout for hidden layers) */
    float *mask;            /* [rows, out] dropout factors, or NULL */
} mlp_layer;

struct mlp {
    const grm_host_api *host;
    mlp_config cfg;             /* copy of the config */
    const linear_impl *impl;    /* static */
    linear_exec ex;             /* the host's backend; no pool (one GEMM per product) */
    int64_t in_dim;
    int32_t nlayers;
    int64_t max_width;          /* widest layer output */
    uint64_t seed;
    mlp_layer layer[GRM_PARAM_LIST_MAX];

    float *block;               /* owned (host->alloc): all params, then all grads */
    size_t nparams;             /* floats in the params half */

    float *cache;               /* owned (malloc): rows_cap rows of per_row floats */
    int64_t rows_cap;
    int64_t per_row;            /* floats per row: x, z/h/mask per layer, norm, 2 grads */
    float *x;                   /* [rows, in_dim] copy of the last forward's input */
    float *norm;                /* [rows] output norms (l2norm) */
    float *g0, *g1;             /* [rows, max_width] backward ping-pong buffers */

    int64_t rows;               /* rows of the last training forward; -1: none */
};

static int has_dropout(const mlp *m)
{
    return m->cfg.dropout > 0 && m->nlayers > 1;
}

/* Lay the cache out for `cap` rows; the pointers are views into m->cache. */
static void cache_bind(mlp *m, int64_t cap)
{
    float *p = m->cache;
    m->x = p;
    p += cap * m->in_dim;
    for (int32_t l = 0; l < m->nlayers; l++) {
        mlp_layer *ly = &m->layer[l];
        ly->z = p;
        p += cap * ly->lin.out;
        ly->h = p;
        p += cap * ly->lin.out;
        ly->mask = NULL;
        if (has_dropout(m) && l < m->nlayers - 1) {
            ly->mask = p;
            p += cap * ly->lin.out;
        }
    }
    m->norm = p;
    p += cap;
    m->g0 = p;
    p += cap * m->max_width;
    m->g1 = p;
}

/* Make room for `rows` rows; grows by at least half so growth stays rare. */
static grm_status cache_reserve(mlp *m, int64_t rows)
{
    int grown;
    grm_status st = linear_cache_reserve(m->host, "dense-mlp", &m->cache, &m->rows_cap,
                                         m->per_row, rows, &grown);
    if (st == GRM_OK && grown) {
        m->rows = -1;
        cache_bind(m, m->rows_cap);
    }
    return st;
}

grm_status mlp_create(const grm_host_api *host, const mlp_config *cfg, int64_t in_dim,
                      uint64_t seed, mlp **out)
{
    grm_status st;
    *out = NULL;
    if (cfg->dims.n <= 0 || cfg->dims.n > GRM_PARAM_LIST_MAX)
        return host->errorf(GRM_EINVAL, "dense-mlp: dims: empty; give the output size of "
                            "each layer, e.g. dims = 256,64");
    for (int64_t l = 0; l < cfg->dims.n; l++) {
        if (cfg->dims.v[l] < 1 || cfg->dims.v[l] > INT32_MAX)
            return host->errorf(GRM_EINVAL, "dense-mlp: dims[%lld]: layer size %lld out of "
                                "range; each entry must be in 1..%d", (long long)l,
                                (long long)cfg->dims.v[l], INT32_MAX);
    }
    if (in_dim < 1 || in_dim > INT32_MAX)
        return host->errorf(GRM_EINVAL, "dense-mlp: create: in_dim %lld out of range 1..%d",
                            (long long)in_dim, INT32_MAX);
    if (!(cfg->dropout >= 0 && cfg->dropout < 1))
        return host->errorf(GRM_EINVAL, "dense-mlp: dropout: %g out of range [0, 1)",
                            cfg->dropout);
    if (cfg->activation < MLP_ACT_RELU || cfg->activation > MLP_ACT_NONE
        || cfg->final_activation < MLP_ACT_RELU || cfg->final_activation > MLP_ACT_NONE)
        return host->errorf(GRM_EINVAL, "dense-mlp: activation: unknown index %d/%d; use "
                            "relu, silu, tanh or none", cfg->activation,
                            cfg->final_activation);

    mlp *m = calloc(1, sizeof *m);
    if (m == NULL)
        return host->errorf(GRM_ENOMEM, "dense-mlp: create: out of memory");
    m->host = host;
    m->cfg = *cfg;
    m->impl = mlp_impl_of(host, cfg->impl) == MLP_IMPL_REF ? &linear_impl_ref : &linear_impl_cpu;
    if ((st = linear_exec_init(&m->ex, host, 0, "dense-mlp")) != GRM_OK)
        goto fail;
    m->in_dim = in_dim;
    m->nlayers = (int32_t)cfg->dims.n;
    m->seed = seed;
    m->rows = -1;

    int64_t prev = in_dim;
    size_t nparams = 0;
    for (int32_t l = 0; l < m->nlayers; l++) {
        mlp_layer *ly = &m->layer[l];
        ly->lin.in = prev;
        ly->lin.out = cfg->dims.v[l];
        nparams += linear_nparams(&ly->lin);
        if (ly->lin.out > m->max_width)
            m->max_width = ly->lin.out;
        snprintf(ly->wname, sizeof ly->wname, "layer%d.weight", (int)l);
        snprintf(ly->bname, sizeof ly->bname, "layer%d.bias", (int)l);
        prev = ly->lin.out;
    }
    m->nparams = nparams;
    m->per_row = in_dim + 1 + 2 * m->max_width;
    for (int32_t l = 0; l < m->nlayers; l++)
        m->per_row += (has_dropout(m) && l < m->nlayers - 1 ? 3 : 2) * m->layer[l].lin.out;

    // STYLE.md §8: parameters and gradients are one block, typed views into it
    if ((st = linear_block_alloc(host, "dense-mlp", nparams, &m->block)) != GRM_OK)
        goto fail;
    float *p = m->block, *g = m->block + nparams;
    uint64_t state = seed;      // Xavier draws run on through the layers in order
    for (int32_t l = 0; l < m->nlayers; l++)
        linear_bind(&m->layer[l].lin, &p, &g, &state);
    *out = m;
    return GRM_OK;

fail:
    mlp_destroy(m);
    return st;
}

void mlp_destroy(mlp *m)
{
    static const grm_device cpu = { GRM_DEVICE_CPU, 0 };
    if (m == NULL)
        return;
    if (m->block != NULL)
        m->host->free(cpu, m->block);
    free(m->cache);
    free(m);
}

int64_t mlp_in_dim(const mlp *m)
{
    return m->in_dim;
}

int64_t mlp_out_dim(const mlp *m)
{
    return m->layer[m->nlayers - 1].lin.out;
}

/* ---- forward ---- */

grm_status mlp_forward(mlp *m, float *y, const float *x, int64_t rows, int32_t training,
                       int64_t step)
{
    m->rows = -1;
    if (rows == 0) {
        m->rows = training ? 0 : -1;
        return GRM_OK;
    }
    grm_status st = cache_reserve(m, rows);
    if (st != GRM_OK)
        return st;
    memcpy(m->x, x, (size_t)(rows * m->in_dim) * sizeof *x);
    const float *in = m->x;                             /* [rows, layer in] */
    const int32_t L = m->nlayers;
    // dropout key: a function of (seed, step) only, so a step replays exactly
    const uint64_t key = mlp_mix64(mlp_mix64(m->seed ^ 0x6a09e667f3bcc909ULL)
                                   + (uint64_t)step);
    for (int32_t l = 0; l < L; l++) {
        mlp_layer *ly = &m->layer[l];
        const linear_layer *lin = &ly->lin;
        const int64_t n = rows * lin->out;
        // one GEMM on this thread (no pool), as dense-mlp always ran it
        st = m->impl->fwd(ly->z, in, lin->w, lin->b, rows, lin->in, lin->out, &m->ex);
        if (st != GRM_OK)
            return st;
        mlp_act_fwd(ly->h, ly->z, n, l < L - 1 ? m->cfg.activation : m->cfg.final_activation);
        if (ly->mask != NULL && training)
            mlp_dropout_fwd(ly->h, ly->mask, n, m->cfg.dropout,
                            key + (uint64_t)l * 0xbb67ae8584caa73bULL);
        in = ly->h;
    }
    const mlp_layer *last = &m->layer[L - 1];
    if (m->cfg.l2norm)
        mlp_l2norm_fwd(y, m->norm, last->h, rows, last->lin.out);
    else
        memcpy(y, last->h, (size_t)(rows * last->lin.out) * sizeof *y);
    if (training)
        m->rows = rows;
    return GRM_OK;
}

/* ---- backward ---- */

grm_status mlp_backward(mlp *m, float *dx, const float *dy, int64_t rows)
{
    if (m->rows < 0)
        return m->host->errorf(GRM_EINVAL, "dense-mlp: backward: no training forward to "
                               "differentiate; call forward with ctx->training = 1 first");
    if (rows != m->rows)
        return m->host->errorf(GRM_EINVAL, "dense-mlp: backward: dy has %lld rows, the last "
                               "forward had %lld", (long long)rows, (long long)m->rows);
    if (rows == 0)
        return GRM_OK;
    const int32_t L = m->nlayers;
    const mlp_layer *last = &m->layer[L - 1];
    float *g = m->g0, *other = m->g1;   /* [rows, max_width] each */
    // g = d(loss)/d(h of the last layer)
    if (m->cfg.l2norm)
        mlp_l2norm_bwd(g, dy, last->h, m->norm, rows, last->lin.out);
    else
        memcpy(g, dy, (size_t)(rows * last->lin.out) * sizeof *g);
    for (int32_t l = L - 1; l >= 0; l--) {
        const mlp_layer *ly = &m->layer[l];
        const linear_layer *lin = &ly->lin;
        const int64_t n = rows * lin->out;
        if (ly->mask != NULL)   // the last forward was a training one: masks are set
            for (int64_t i = 0; i < n; i++)
                g[i] *= ly->mask[i];
        // g becomes dz in place
        mlp_act_bwd(g, g, ly->z, n, l < L - 1 ? m->cfg.activation : m->cfg.final_activation);
        const float *in = l > 0 ? m->layer[l - 1].h : m->x;   /* [rows, lin->in] */
        float *d_in = l > 0 ? other : dx;                      /* [rows, lin->in] or NULL */
        // d_in is overwritten (dx_accumulate 0): dense-mlp's dx is written, not added to
        grm_status st = m->impl->bwd(d_in, lin->dw, lin->db, g, in, lin->w, rows, lin->in,
                                     lin->out, 0, &m->ex);
        if (st != GRM_OK)
            return st;
        other = g;
        g = d_in;
    }
    return GRM_OK;
}

/* ---- parameters ---- */

grm_status mlp_params(mlp *m, int32_t index, grm_named_tensor *value, grm_tensor *grad)
{
    if (index < 0 || index >= 2 * m->nlayers)
        return m->host->errorf(GRM_ENOTFOUND, "dense-mlp: params: no parameter %d; the "
                               "block has %d", (int)index, 2 * (int)m->nlayers);
    const mlp_layer *ly = &m->layer[index / 2];
    const int32_t is_bias = index % 2;
    linear_views(&ly->lin, is_bias, is_bias ? ly->bname : ly->wname, value, grad);
    return GRM_OK;
}

double mlp_flops(const mlp *m, int64_t rows, int32_t backward)
{
    double f = 0;
    for (int32_t l = 0; l < m->nlayers; l++)
        f += (backward ? 4.0 : 2.0) * (double)rows * (double)m->layer[l].lin.in
             * (double)m->layer[l].lin.out;
    return f;
}

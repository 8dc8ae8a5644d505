/* plugins/dense-mmoe/mmoe.c - the dense-mmoe block: E expert MLPs on the shared input, one
 * softmax gate per task over the experts with top-k selection, and one tower MLP per task
 * ending in a single logit (MTGRBoost §2, eq. 4: y = sum_{i<=k} g_i(H) Expert_i(H); Ma et
 * al. 2018 for the multi-gate form). Forward, backward, named parameters and flops. The
 * linear products go through the implementation picked in create (linear_ref.c or
 * linear_cpu.c of plugins/dense-mlp, shared with dense-mlp); the gate and activations are
 * in mmoe_ref.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmoe.h"

/* One linear layer with its activation; the parameter views point into mmoe.block and the
 * cache views into mmoe.cache. */
typedef struct mmoe_layer {
    linear_layer lin;           /* in, out; w, b, dw, db: views into mmoe.block */
    int32_t act;                /* enum mmoe_act after this layer */
    float *z, *h;               /* [rows, out] pre-activation, activation (h = z if none) */
    char wname[48], bname[48];
} mmoe_layer;

/* A chain of layers: expert e is chains[e], tower t is chains[E + t]. */
typedef struct mmoe_chain {
    int32_t first, n;           /* layers [first, first + n) of mmoe.layer */
} mmoe_chain;

struct mmoe {
    const grm_host_api *host;
    mmoe_config cfg;            /* copy */
    const linear_impl *impl;    /* static */
    linear_exec ex;             /* the host's backend and its pool */
    int64_t in_dim;
    int32_t E, T, k;
    int64_t He;                 /* expert output width */
    int64_t max_width;          /* widest layer input or output */

    mmoe_layer *layer;          /* owned (malloc): experts' layers, gates, towers' layers */
    int32_t nlayers;
    mmoe_chain chain[MMOE_MAX_EXPERTS + MMOE_MAX_TASKS];
    int32_t gate0;              /* index of gate 0 in layer[] (gate t = gate0 + t) */

    float *block;               /* owned (host->alloc): all params, then all grads */
    size_t nparams;

    float *cache;               /* owned (malloc): rows_cap rows of per_row floats */
    int64_t rows_cap, per_row;
    float *x;                   /* [rows, in_dim] copy of the input */
    float *gate;                /* [T, rows, E] gate weights g_t */
    float *mixed;               /* [T, rows, He] sum_e g_te h_e */
    float *dh;                  /* [E, rows, He] d loss / d expert output */
    float *dmix;                /* [rows, He] */
    float *dg, *dq;             /* [rows, E] each */
    float *p0, *p1;             /* [rows, max_width] backward ping-pong buffers */

    int64_t rows;               /* rows of the last training forward; -1: none */
};

static int64_t chain_out(const mmoe *m, int32_t c)
{
    return m->layer[m->chain[c].first + m->chain[c].n - 1].lin.out;
}

/* Lay the cache out for cap rows; every pointer is a view into m->cache. */
static void cache_bind(mmoe *m, int64_t cap)
{
    float *p = m->cache;
    m->x = p;
    p += cap * m->in_dim;
    for (int32_t l = 0; l < m->nlayers; l++) {
        mmoe_layer *ly = &m->layer[l];
        ly->z = p;
        p += cap * ly->lin.out;
        ly->h = ly->z;
        if (ly->act != MMOE_ACT_NONE) {
            ly->h = p;
            p += cap * ly->lin.out;
        }
    }
    m->gate = p;
    p += cap * m->T * m->E;
    m->mixed = p;
    p += cap * m->T * m->He;
    m->dh = p;
    p += cap * m->E * m->He;
    m->dmix = p;
    p += cap * m->He;
    m->dg = p;
    p += cap * m->E;
    m->dq = p;
    p += cap * m->E;
    m->p0 = p;
    p += cap * m->max_width;
    m->p1 = p;
}

static grm_status cache_reserve(mmoe *m, int64_t rows)
{
    int grown;
    grm_status st = linear_cache_reserve(m->host, "dense-mmoe", &m->cache, &m->rows_cap,
                                         m->per_row, rows, &grown);
    if (st == GRM_OK && grown) {
        m->rows = -1;
        cache_bind(m, m->rows_cap);
    }
    return st;
}

static grm_status check_dims(const grm_host_api *host, const char *name,
                             const grm_int_list *dims)
{
    if (dims->n <= 0 || dims->n > GRM_PARAM_LIST_MAX)
        return host->errorf(GRM_EINVAL, "dense-mmoe: %s: empty; give the output size of "
                            "each layer, e.g. %s = 64,32", name, name);
    for (int64_t l = 0; l < dims->n; l++)
        if (dims->v[l] < 1 || dims->v[l] > (1 << 24))
            return host->errorf(GRM_EINVAL, "dense-mmoe: %s[%lld]: layer size %lld out of "
                                "range 1..%d", name, (long long)l, (long long)dims->v[l],
                                1 << 24);
    return GRM_OK;
}

/* Append the layers of one chain (or a gate, dims of length 1) reading `in` features. */
static void add_chain(mmoe *m, int32_t c, const grm_int_list *dims, int64_t in,
                      int32_t last_act, const char *prefix, int32_t idx)
{
    m->chain[c].first = m->nlayers;
    m->chain[c].n = (int32_t)dims->n;
    for (int32_t l = 0; l < (int32_t)dims->n; l++) {
        mmoe_layer *ly = &m->layer[m->nlayers++];
        ly->lin.in = in;
        ly->lin.out = dims->v[l];
        ly->act = l < dims->n - 1 ? m->cfg.activation : last_act;
        snprintf(ly->wname, sizeof ly->wname, "%s%d.layer%d.weight", prefix, (int)idx, (int)l);
        snprintf(ly->bname, sizeof ly->bname, "%s%d.layer%d.bias", prefix, (int)idx, (int)l);
        in = ly->lin.out;
    }
}

grm_status mmoe_create(const grm_host_api *host, const mmoe_config *cfg, int64_t in_dim,
                       uint64_t seed, mmoe **out)
{
    grm_status st;
    *out = NULL;
    if (in_dim < 1 || in_dim > INT32_MAX)
        return host->errorf(GRM_EINVAL, "dense-mmoe: create: in_dim %lld out of range 1..%d",
                            (long long)in_dim, INT32_MAX);
    if (cfg->experts < 1 || cfg->experts > MMOE_MAX_EXPERTS)
        return host->errorf(GRM_EINVAL, "dense-mmoe: experts: %lld out of range 1..%d",
                            (long long)cfg->experts, MMOE_MAX_EXPERTS);
    if (cfg->tasks < 1 || cfg->tasks > MMOE_MAX_TASKS)
        return host->errorf(GRM_EINVAL, "dense-mmoe: tasks: %lld out of range 1..%d",
                            (long long)cfg->tasks, MMOE_MAX_TASKS);
    if (cfg->top_k < 0 || cfg->top_k > cfg->experts)
        return host->errorf(GRM_EINVAL, "dense-mmoe: top_k: %lld exceeds experts = %lld; use "
                            "1..%lld, or 0 for all experts", (long long)cfg->top_k,
                            (long long)cfg->experts, (long long)cfg->experts);
    if ((st = check_dims(host, "expert_dims", &cfg->expert_dims)) != GRM_OK
        || (st = check_dims(host, "tower_dims", &cfg->tower_dims)) != GRM_OK)
        return st;
    if (cfg->tower_dims.v[cfg->tower_dims.n - 1] != 1)
        return host->errorf(GRM_EINVAL, "dense-mmoe: tower_dims: the last layer has %lld "
                            "outputs; a tower ends in one logit, e.g. tower_dims = 16,1",
                            (long long)cfg->tower_dims.v[cfg->tower_dims.n - 1]);
    if (cfg->activation != MMOE_ACT_RELU && cfg->activation != MMOE_ACT_SILU)
        return host->errorf(GRM_EINVAL, "dense-mmoe: activation: unknown index %d; use relu "
                            "or silu", (int)cfg->activation);

    mmoe *m = calloc(1, sizeof *m);
    if (m == NULL)
        return host->errorf(GRM_ENOMEM, "dense-mmoe: create: out of memory");
    m->host = host;
    m->cfg = *cfg;
    const int ref = cfg->impl == MMOE_IMPL_REF
                    || (cfg->impl == MMOE_IMPL_AUTO && grm_backend_wants_ref(host));
    m->impl = ref ? &linear_impl_ref : &linear_impl_cpu;
    if ((st = linear_exec_init(&m->ex, host, 1, "dense-mmoe")) != GRM_OK) {
        free(m);
        return st;
    }
    m->in_dim = in_dim;
    m->E = (int32_t)cfg->experts;
    m->T = (int32_t)cfg->tasks;
    m->k = cfg->top_k == 0 ? m->E : (int32_t)cfg->top_k;
    m->He = cfg->expert_dims.v[cfg->expert_dims.n - 1];
    m->rows = -1;
    const int64_t total = m->E * cfg->expert_dims.n + m->T + m->T * cfg->tower_dims.n;
    m->layer = calloc((size_t)total, sizeof *m->layer);
    if (m->layer == NULL) {
        st = host->errorf(GRM_ENOMEM, "dense-mmoe: create: out of memory");
        goto fail;
    }
    // layer order = params() order: experts, gates, towers
    for (int32_t e = 0; e < m->E; e++)
        add_chain(m, e, &cfg->expert_dims, in_dim, cfg->activation, "expert", e);
    m->gate0 = m->nlayers;
    for (int32_t t = 0; t < m->T; t++) {
        mmoe_layer *ly = &m->layer[m->nlayers++];
        ly->lin.in = in_dim;
        ly->lin.out = m->E;
        ly->act = MMOE_ACT_NONE;
        snprintf(ly->wname, sizeof ly->wname, "gate%d.weight", (int)t);
        snprintf(ly->bname, sizeof ly->bname, "gate%d.bias", (int)t);
    }
    for (int32_t t = 0; t < m->T; t++)
        add_chain(m, m->E + t, &cfg->tower_dims, m->He, MMOE_ACT_NONE, "tower", t);

    size_t nparams = 0;
    m->max_width = in_dim;
    m->per_row = in_dim;
    for (int32_t l = 0; l < m->nlayers; l++) {
        const mmoe_layer *ly = &m->layer[l];
        nparams += linear_nparams(&ly->lin);
        if (ly->lin.out > m->max_width)
            m->max_width = ly->lin.out;
        m->per_row += (ly->act != MMOE_ACT_NONE ? 2 : 1) * ly->lin.out;
    }
    m->per_row += m->T * m->E + m->T * m->He + m->E * m->He + m->He + 2 * m->E
                  + 2 * m->max_width;
    m->nparams = nparams;

    // STYLE.md §8: parameters and gradients are one block, typed views into it
    if ((st = linear_block_alloc(host, "dense-mmoe", nparams, &m->block)) != GRM_OK)
        goto fail;
    float *p = m->block, *g = m->block + nparams;
    uint64_t state = seed;      // Xavier draws run on through the layers in params() order
    for (int32_t l = 0; l < m->nlayers; l++)
        linear_bind(&m->layer[l].lin, &p, &g, &state);
    *out = m;
    return GRM_OK;

fail:
    mmoe_destroy(m);
    return st;
}

void mmoe_destroy(mmoe *m)
{
    static const grm_device cpu = { GRM_DEVICE_CPU, 0 };
    if (m == NULL)
        return;
    if (m->block != NULL)
        m->host->free(cpu, m->block);
    free(m->cache);
    free(m->layer);
    free(m);
}

int64_t mmoe_in_dim(const mmoe *m)
{
    return m->in_dim;
}

int64_t mmoe_out_dim(const mmoe *m)
{
    return m->T;
}

/* ---- forward ---- */

/* Run chain c on in [rows, layer in]; the output is the last layer's h. */
static grm_status chain_fwd(mmoe *m, int32_t c, const float *in, int64_t rows)
{
    for (int32_t l = 0; l < m->chain[c].n; l++) {
        mmoe_layer *ly = &m->layer[m->chain[c].first + l];
        const linear_layer *lin = &ly->lin;
        grm_status st = m->impl->fwd(ly->z, in, lin->w, lin->b, rows, lin->in, lin->out,
                                     &m->ex);
        if (st != GRM_OK)
            return st;
        if (ly->act != MMOE_ACT_NONE)
            mmoe_act_fwd(ly->h, ly->z, rows * lin->out, ly->act);
        in = ly->h;
    }
    return GRM_OK;
}

grm_status mmoe_forward(mmoe *m, float *y, const float *x, int64_t rows, int32_t training)
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
    const int64_t E = m->E, T = m->T, He = m->He;
    for (int32_t e = 0; e < E; e++)
        if ((st = chain_fwd(m, e, m->x, rows)) != GRM_OK)
            return st;
    for (int32_t t = 0; t < T; t++) {
        mmoe_layer *gl = &m->layer[m->gate0 + t];
        float *g = m->gate + t * rows * E;              /* [rows, E] */
        float *mix = m->mixed + t * rows * He;          /* [rows, He] */
        // gate logits q_t = W_t x + b_t into the gate layer's z, then the top-k softmax
        if ((st = m->impl->fwd(gl->z, m->x, gl->lin.w, gl->lin.b, rows, m->in_dim, E,
                               &m->ex)) != GRM_OK)
            return st;
        mmoe_gate_fwd(g, gl->z, rows, (int32_t)E, m->k);
        // mixed_t = sum_e g_te expert_e(x) (eq. 4); g_te = 0 outside the top k
        memset(mix, 0, (size_t)(rows * He) * sizeof *mix);
        for (int32_t e = 0; e < E; e++) {
            const float *h = m->layer[m->chain[e].first + m->chain[e].n - 1].h; /* [rows, He] */
            for (int64_t r = 0; r < rows; r++) {
                const float ge = g[r * E + e];
                if (ge == 0.0f)
                    continue;
                for (int64_t j = 0; j < He; j++)
                    mix[r * He + j] += ge * h[r * He + j];
            }
        }
        if ((st = chain_fwd(m, (int32_t)E + t, mix, rows)) != GRM_OK)
            return st;
        const float *logit = m->layer[m->chain[E + t].first + m->chain[E + t].n - 1].h;
        for (int64_t r = 0; r < rows; r++)
            y[r * T + t] = logit[r];                    // [rows, 1] -> column t of y
    }
    if (training)
        m->rows = rows;
    return GRM_OK;
}

/* ---- backward ---- */

/* Backward of chain c given dout [rows, chain out] (d loss / d last h) and its input in
 * [rows, first layer in]; din [rows, first layer in] += d loss / d in (NULL: skipped). */
static grm_status chain_bwd(mmoe *m, int32_t c, float *din, const float *dout,
                            const float *in, int64_t rows)
{
    const mmoe_chain *ch = &m->chain[c];
    float *gbuf = m->p0, *other = m->p1;                /* [rows, max_width] each */
    memcpy(gbuf, dout, (size_t)(rows * chain_out(m, c)) * sizeof *gbuf);
    for (int32_t l = ch->n - 1; l >= 0; l--) {
        const mmoe_layer *ly = &m->layer[ch->first + l];
        const linear_layer *lin = &ly->lin;
        if (ly->act != MMOE_ACT_NONE)
            mmoe_act_bwd(gbuf, gbuf, ly->z, rows * lin->out, ly->act);  // g becomes dz
        const float *x_l = l > 0 ? m->layer[ch->first + l - 1].h : in;
        float *d_in = din;
        if (l > 0) {
            d_in = other;
            memset(d_in, 0, (size_t)(rows * lin->in) * sizeof *d_in);
        }
        // dx_accumulate 1: every chain and gate adds into the caller's din (the inner
        // layers into the buffer zeroed above)
        grm_status st = m->impl->bwd(d_in, lin->dw, lin->db, gbuf, x_l, lin->w, rows, lin->in,
                                     lin->out, 1, &m->ex);
        if (st != GRM_OK)
            return st;
        other = gbuf;
        gbuf = d_in;
    }
    return GRM_OK;
}

grm_status mmoe_backward(mmoe *m, float *dx, const float *dy, int64_t rows)
{
    if (m->rows < 0)
        return m->host->errorf(GRM_EINVAL, "dense-mmoe: backward: no training forward to "
                               "differentiate; call forward with ctx->training = 1 first");
    if (rows != m->rows)
        return m->host->errorf(GRM_EINVAL, "dense-mmoe: backward: dy has %lld rows, the last "
                               "forward had %lld", (long long)rows, (long long)m->rows);
    if (dx != NULL)
        memset(dx, 0, (size_t)(rows * m->in_dim) * sizeof *dx);
    if (rows == 0)
        return GRM_OK;
    const int64_t E = m->E, T = m->T, He = m->He;
    grm_status st;
    memset(m->dh, 0, (size_t)(E * rows * He) * sizeof *m->dh);
    float *dcol = m->dg;                                /* [rows] scratch: dy[:, t] */
    for (int32_t t = 0; t < T; t++) {
        for (int64_t r = 0; r < rows; r++)
            dcol[r] = dy[r * T + t];
        memset(m->dmix, 0, (size_t)(rows * He) * sizeof *m->dmix);
        if ((st = chain_bwd(m, (int32_t)E + t, m->dmix, dcol, m->mixed + t * rows * He,
                            rows)) != GRM_OK)
            return st;
        // through eq. 4: dg_te = dmix . h_e, dh_e += g_te dmix (only selected experts)
        const float *g = m->gate + t * rows * E;        /* [rows, E] */
        for (int32_t e = 0; e < E; e++) {
            const float *h = m->layer[m->chain[e].first + m->chain[e].n - 1].h; /* [rows, He] */
            float *dh = m->dh + e * rows * He;          /* [rows, He] */
            for (int64_t r = 0; r < rows; r++) {
                const float ge = g[r * E + e];
                double acc = 0;
                for (int64_t j = 0; j < He; j++) {
                    acc += (double)m->dmix[r * He + j] * h[r * He + j];
                    dh[r * He + j] += ge * m->dmix[r * He + j];
                }
                m->dq[r * E + e] = (float)acc;          // dg, staged in dq
            }
        }
        float *dq = m->dg;                              /* [rows, E]; dcol is consumed */
        mmoe_gate_bwd(dq, m->dq, g, rows, (int32_t)E);
        mmoe_layer *gl = &m->layer[m->gate0 + t];
        if ((st = m->impl->bwd(dx, gl->lin.dw, gl->lin.db, dq, m->x, gl->lin.w, rows,
                               m->in_dim, E, 1, &m->ex)) != GRM_OK)
            return st;
    }
    for (int32_t e = 0; e < E; e++)
        if ((st = chain_bwd(m, e, dx, m->dh + e * rows * He, m->x, rows)) != GRM_OK)
            return st;
    return GRM_OK;
}

/* ---- parameters ---- */

grm_status mmoe_params(mmoe *m, int32_t index, grm_named_tensor *value, grm_tensor *grad)
{
    if (index < 0 || index >= 2 * m->nlayers)
        return m->host->errorf(GRM_ENOTFOUND, "dense-mmoe: params: no parameter %d; the "
                               "block has %d", (int)index, 2 * (int)m->nlayers);
    const mmoe_layer *ly = &m->layer[index / 2];
    const int32_t is_bias = index % 2;
    linear_views(&ly->lin, is_bias, is_bias ? ly->bname : ly->wname, value, grad);
    return GRM_OK;
}

double mmoe_flops(const mmoe *m, int64_t rows, int32_t backward)
{
    // linear layers: 2 N in out forward, 4 N in out backward; the mixing of eq. 4:
    // 2 N T E He forward (multiply-add), 4 N T E He backward (dg and dh)
    double f = 0;
    for (int32_t l = 0; l < m->nlayers; l++)
        f += (double)m->layer[l].lin.in * (double)m->layer[l].lin.out;
    f += (double)m->T * (double)m->E * (double)m->He;
    return (backward ? 4.0 : 2.0) * (double)rows * f;
}

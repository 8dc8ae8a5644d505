/* plugins/dense-sasrec/sasrec.c - one SASRec self-attention block on jagged sequences:
 * create (parameters, Xavier init), forward, backward, named parameters, flops.
 * Kang & McAuley, "Self-Attentive Sequential Recommendation", ICDM 2018, Sec. III
 * ("Embedding Layer", "Self-Attention Block", "Point-Wise Feed-Forward Network",
 * "Stacking Self-Attention Blocks"), in the form of the reference code
 * pmixer/SASRec.pytorch (model.py: SASRec.log2feats), which the S3-Rec/ICLRec baselines
 * follow:
 *   (pos_emb)    h0 = Dropout(x sqrt(D) + P[pos])               else h0 = x
 *                q  = LN1(h0)
 *                r1 = q + MHA(q, h0, h0)        causal, H heads, in/out projections
 *                u  = LN2(r1)
 *                r2 = u + Dropout(W2 ReLU(Dropout(W1 u + b1)) + b2)
 *   (final_norm) y  = LN3(r2)                                    else y = r2
 * style = bert is the post-norm Transformer block of the S3-Rec/ICLRec code (modules.py:
 * Embeddings, SelfAttention, Intermediate; Devlin et al. 2019), which produced the
 * published full-ranking SASRec tables (S3-Rec run_finetune_full.py: "The Model is same as
 * SASRec"):
 *   (pos_emb)    h0 = Dropout(LN0(x + P[pos]))                   else h0 = x
 *                u  = LN1(h0 + Dropout(MHA(h0, h0, h0)))
 *                y  = LN2(u + Dropout(W2 GELU(W1 u + b1) + b2))
 * GEMMs and attention go through the implementation picked in create (sasrec_ref.c or
 * sasrec_cpu.c); LayerNorm, dropout and the embedding stage are shared code here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sasrec.h"

/* One named parameter: a view into the block and its gradient. */
typedef struct sasrec_param {
    const char *name;
    float *value, *grad;        /* [rows, cols] or [rows] views into sasrec.block */
    int64_t rows, cols;         /* cols 0: a vector */
} sasrec_param;

enum { SASREC_MAX_PARAMS = 16 };

struct sasrec {
    const grm_host_api *host;
    sasrec_config cfg;          /* copy of the config */
    const sasrec_impl *impl;    /* static */
    linear_exec ex;             /* the host's backend and its pool */
    int64_t D, H, dh, F;        /* model dim, heads, head dim, FFN hidden */
    int32_t bert;               /* 1: style = bert */
    int32_t gelu;               /* 1: the FFN activation is GELU, else ReLU */
    uint64_t seed;

    float *block;               /* owned (host->alloc): all params, then all grads */
    size_t nfloats;             /* floats in the params half */
    sasrec_param param[SASREC_MAX_PARAMS];
    int32_t nparam;

    /* parameter views (grads: the same offsets in the second half of block) */
    float *pos, *dpos;              /* [max_len, D] (pos_emb only) */
    float *ln0_g, *ln0_b, *dln0_g, *dln0_b;     /* [D] (bert, pos_emb only) */
    float *ln1_g, *ln1_b, *dln1_g, *dln1_b;     /* [D] */
    float *w_in, *b_in, *dw_in, *db_in;         /* [3D, D], [3D]: rows q, k, v */
    float *w_out, *b_out, *dw_out, *db_out;     /* [D, D], [D] */
    float *ln2_g, *ln2_b, *dln2_g, *dln2_b;     /* [D] */
    float *w1, *b1, *dw1, *db1;                 /* [F, D], [F] */
    float *w2, *b2, *dw2, *db2;                 /* [D, F], [D] */
    float *ln3_g, *ln3_b, *dln3_g, *dln3_b;     /* [D] (final_norm only) */

    /* forward cache, views into fwd (valid for fwd_cap rows) */
    float *fwd;                 /* owned (malloc) */
    int64_t fwd_cap, fwd_per_row;
    float *e;                   /* [N, D] x + P[pos] (bert, pos_emb) */
    float *mu0, *rs0;           /* [N] LN0 statistics (bert, pos_emb) */
    float *h0;                  /* [N, D] block input after the embedding stage */
    float *qin;                 /* [N, D] LN1(h0), the attention queries' input (sasrec) */
    float *mu1, *rs1;           /* [N] LN1 statistics */
    float *qp;                  /* [N, D] projected queries */
    float *kv;                  /* [N, 2D] projected keys (cols 0..D-1), values (D..2D-1) */
    float *att;                 /* [N, D] attention output, heads side by side */
    float *lse;                 /* [N, H] row log-sum-exp of the attention scores */
    float *r1;                  /* [N, D] qin + out_proj(att); bert: h0 + Dropout(..) */
    float *u;                   /* [N, D] LN2(r1); bert: LN1(r1) */
    float *mu2, *rs2;           /* [N] */
    float *z1;                  /* [N, F] W1 u + b1 (before dropout) */
    float *h1;                  /* [N, F] ReLU(Dropout(z1)); bert: act(z1) */
    float *r2;                  /* [N, D] u + FFN(u) (final_norm or bert) */
    float *mu3, *rs3;           /* [N] (final_norm only) */

    /* backward workspace, views into bwd (valid for bwd_cap rows) */
    float *bwd;                 /* owned (malloc) */
    int64_t bwd_cap, bwd_per_row;
    float *g_r2;                /* [N, D] d r2 (final_norm) */
    float *g_z2;                /* [N, D] d z2 */
    float *g_h1;                /* [N, F] d h1, then d z1 in place */
    float *g_u;                 /* [N, D] */
    float *g_r1;                /* [N, D] */
    float *g_att;               /* [N, D] */
    float *g_qp;                /* [N, D] */
    float *g_kv;                /* [N, 2D] */
    float *g_qin;               /* [N, D]; bert: d of the attention output, then d e */
    float *g_h0;                /* [N, D] */

    int64_t *off;               /* owned (malloc): [nseq+1] offsets of the last forward */
    int64_t off_cap, nseq;
    int64_t rows;               /* rows of the last training forward; -1: none */
    int64_t step;               /* ctx->step of the last training forward */
    double pairs;               /* causal (query, key) pairs of the last forward */
    int64_t pairs_rows;         /* rows of the forward that counted them */
};

static const grm_device sasrec_cpu = { GRM_DEVICE_CPU, 0 };

/* ---- create / destroy ---- */

/* Fill w [rows, cols] with Xavier/Glorot (Glorot & Bengio 2010) for fan_in = cols,
 * fan_out = rows, as torch.nn.init.xavier_*_ on a [rows, cols] tensor: normal with std
 * sqrt(2 / (fan_in + fan_out)) (the reference's xavier_normal_) or uniform on (-a, a),
 * a = sqrt(6 / (fan_in + fan_out)). Row r is drawn by grm_row_init from (seed, name, r). */
static void xavier(float *w, int64_t rows, int64_t cols, int32_t init, uint64_t seed,
                   const char *name)
{
    const double fan = (double)(rows + cols);
    const int32_t kind = init == SASREC_INIT_XAVIER_UNIFORM ? GRM_EMB_INIT_UNIFORM
                                                            : GRM_EMB_INIT_NORMAL;
    const double scale = kind == GRM_EMB_INIT_UNIFORM ? sqrt(6.0 / fan) : sqrt(2.0 / fan);
    const uint64_t table = grm_str_hash64(name);
    for (int64_t r = 0; r < rows; r++)
        grm_row_init(w + r * cols, (int32_t)cols, kind, scale, seed, table, r);
}

/* Fill w [rows, cols] with init: Xavier as above, or N(0, std^2) (init = normal). */
static void init_matrix(float *w, int64_t rows, int64_t cols, const sasrec_config *cfg,
                        uint64_t seed, const char *name)
{
    if (cfg->init != SASREC_INIT_NORMAL) {
        xavier(w, rows, cols, cfg->init, seed, name);
        return;
    }
    const uint64_t table = grm_str_hash64(name);
    for (int64_t r = 0; r < rows; r++)
        grm_row_init(w + r * cols, (int32_t)cols, GRM_EMB_INIT_NORMAL, cfg->init_std, seed,
                     table, r);
}

static void fill(float *v, int64_t n, float x)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = x;
}

/* Append a parameter of rows x cols (cols 0: vector) at *p; advance *p. */
static float *add_param(sasrec *s, size_t *at, const char *name, int64_t rows, int64_t cols)
{
    sasrec_param *pr = &s->param[s->nparam++];
    pr->name = name;
    pr->rows = rows;
    pr->cols = cols;
    pr->value = s->block + *at;     // grads are bound after the block is allocated
    *at += (size_t)(rows * (cols > 0 ? cols : 1));
    return pr->value;
}

grm_status sasrec_create(const grm_host_api *host, const sasrec_config *cfg, int64_t in_dim,
                         uint64_t seed, sasrec **out)
{
    grm_status st;
    *out = NULL;
    if (in_dim < 1 || in_dim > (1 << 20))
        return host->errorf(GRM_EINVAL, "dense-sasrec: create: in_dim %lld out of range "
                            "1..%d", (long long)in_dim, 1 << 20);
    if (cfg->num_heads < 1 || in_dim % cfg->num_heads != 0)
        return host->errorf(GRM_EINVAL, "dense-sasrec: num_heads: %lld does not divide the "
                            "model dim %lld; pick a divisor of %lld", (long long)cfg->num_heads,
                            (long long)in_dim, (long long)in_dim);
    if (cfg->ffn_dim < 0 || cfg->ffn_dim > (1 << 24))
        return host->errorf(GRM_EINVAL, "dense-sasrec: ffn_dim: %lld out of range 0..%d "
                            "(0: the model dim)", (long long)cfg->ffn_dim, 1 << 24);
    if (!(cfg->dropout >= 0 && cfg->dropout < 1))
        return host->errorf(GRM_EINVAL, "dense-sasrec: dropout: %g out of range [0, 1)",
                            cfg->dropout);
    if (cfg->pos_emb && (cfg->max_len < 1 || cfg->max_len > (1 << 24)))
        return host->errorf(GRM_EINVAL, "dense-sasrec: max_len: %lld out of range 1..%d; "
                            "pos_emb needs the longest sequence length",
                            (long long)cfg->max_len, 1 << 24);
    if (!(cfg->ln_eps > 0))
        return host->errorf(GRM_EINVAL, "dense-sasrec: ln_eps: %g must be > 0", cfg->ln_eps);
    if (cfg->style == SASREC_STYLE_BERT && cfg->final_norm)
        return host->errorf(GRM_EINVAL, "dense-sasrec: final_norm: style = bert already ends "
                            "every block with a LayerNorm; drop final_norm");
    if (cfg->init == SASREC_INIT_NORMAL && !(cfg->init_std > 0))
        return host->errorf(GRM_EINVAL, "dense-sasrec: init_std: %g must be > 0 for init = "
                            "normal", cfg->init_std);

    sasrec *s = calloc(1, sizeof *s);
    if (s == NULL)
        return host->errorf(GRM_ENOMEM, "dense-sasrec: create: out of memory");
    s->host = host;
    s->cfg = *cfg;
    const int ref = cfg->impl == SASREC_IMPL_REF
                    || (cfg->impl == SASREC_IMPL_AUTO && grm_backend_wants_ref(host));
    s->impl = ref ? &sasrec_impl_ref : &sasrec_impl_cpu;
    if ((st = linear_exec_init(&s->ex, host, 1, "dense-sasrec")) != GRM_OK) {
        free(s);
        return st;
    }
    s->D = in_dim;
    s->H = cfg->num_heads;
    s->dh = in_dim / cfg->num_heads;
    s->bert = cfg->style == SASREC_STYLE_BERT;
    s->gelu = cfg->activation == SASREC_ACT_GELU
              || (cfg->activation == SASREC_ACT_AUTO && s->bert);
    s->F = cfg->ffn_dim > 0 ? cfg->ffn_dim : s->bert ? 4 * in_dim : in_dim;
    s->seed = seed;
    s->rows = -1;
    const int64_t D = s->D, F = s->F;

    s->nfloats = (size_t)((cfg->pos_emb ? cfg->max_len * D : 0)
                          + (s->bert && cfg->pos_emb ? 2 * D : 0) + 2 * D + 3 * D * D
                          + 3 * D + D * D + D + 2 * D + F * D + F + D * F + D
                          + (cfg->final_norm ? 2 * D : 0));
    // STYLE.md §8: parameters and gradients are one block, typed views into it
    s->block = host->alloc(sasrec_cpu, 2 * s->nfloats * sizeof(float), 64);
    if (s->block == NULL) {
        st = host->errorf(GRM_ENOMEM, "dense-sasrec: create: cannot allocate %zu parameters",
                          s->nfloats);
        goto fail;
    }
    memset(s->block, 0, 2 * s->nfloats * sizeof(float));
    // params() lists them in the order the forward uses them: sasrec puts each LayerNorm
    // before its sub-layer, bert after it
    size_t at = 0;
    if (cfg->pos_emb)
        s->pos = add_param(s, &at, "pos_emb.weight", cfg->max_len, D);
    if (s->bert && cfg->pos_emb) {
        s->ln0_g = add_param(s, &at, "emb_norm.weight", D, 0);
        s->ln0_b = add_param(s, &at, "emb_norm.bias", D, 0);
    }
    if (!s->bert) {
        s->ln1_g = add_param(s, &at, "attn_norm.weight", D, 0);
        s->ln1_b = add_param(s, &at, "attn_norm.bias", D, 0);
    }
    s->w_in = add_param(s, &at, "attn.in_proj_weight", 3 * D, D);
    s->b_in = add_param(s, &at, "attn.in_proj_bias", 3 * D, 0);
    s->w_out = add_param(s, &at, "attn.out_proj.weight", D, D);
    s->b_out = add_param(s, &at, "attn.out_proj.bias", D, 0);
    if (s->bert) {
        s->ln1_g = add_param(s, &at, "attn_norm.weight", D, 0);
        s->ln1_b = add_param(s, &at, "attn_norm.bias", D, 0);
    } else {
        s->ln2_g = add_param(s, &at, "ffn_norm.weight", D, 0);
        s->ln2_b = add_param(s, &at, "ffn_norm.bias", D, 0);
    }
    s->w1 = add_param(s, &at, "ffn.linear1.weight", F, D);
    s->b1 = add_param(s, &at, "ffn.linear1.bias", F, 0);
    s->w2 = add_param(s, &at, "ffn.linear2.weight", D, F);
    s->b2 = add_param(s, &at, "ffn.linear2.bias", D, 0);
    if (s->bert) {
        s->ln2_g = add_param(s, &at, "ffn_norm.weight", D, 0);
        s->ln2_b = add_param(s, &at, "ffn_norm.bias", D, 0);
    }
    if (cfg->final_norm) {
        s->ln3_g = add_param(s, &at, "final_norm.weight", D, 0);
        s->ln3_b = add_param(s, &at, "final_norm.bias", D, 0);
    }
    for (int32_t i = 0; i < s->nparam; i++)
        s->param[i].grad = s->param[i].value + s->nfloats;
#define GRAD(p) ((p) != NULL ? (p) + s->nfloats : NULL)
    s->dpos = GRAD(s->pos);
    s->dln0_g = GRAD(s->ln0_g);
    s->dln0_b = GRAD(s->ln0_b);
    s->dln1_g = GRAD(s->ln1_g);
    s->dln1_b = GRAD(s->ln1_b);
    s->dw_in = GRAD(s->w_in);
    s->db_in = GRAD(s->b_in);
    s->dw_out = GRAD(s->w_out);
    s->db_out = GRAD(s->b_out);
    s->dln2_g = GRAD(s->ln2_g);
    s->dln2_b = GRAD(s->ln2_b);
    s->dw1 = GRAD(s->w1);
    s->db1 = GRAD(s->b1);
    s->dw2 = GRAD(s->w2);
    s->db2 = GRAD(s->b2);
    s->dln3_g = GRAD(s->ln3_g);
    s->dln3_b = GRAD(s->ln3_b);
#undef GRAD

    // initialization: Xavier for every matrix (the reference runs xavier_normal_ over all
    // parameters of 2+ dims, the position embedding included, in_proj as one [3D, D]
    // matrix) or N(0, init_std^2) (S3-Rec init_weights), zero biases (memset above),
    // LayerNorm gamma 1, beta 0
    for (int32_t i = 0; i < s->nparam; i++)
        if (s->param[i].cols > 0)
            init_matrix(s->param[i].value, s->param[i].rows, s->param[i].cols, cfg, seed,
                        s->param[i].name);
    fill(s->ln1_g, D, 1.0f);
    fill(s->ln2_g, D, 1.0f);
    if (s->ln0_g != NULL)
        fill(s->ln0_g, D, 1.0f);
    if (cfg->final_norm)
        fill(s->ln3_g, D, 1.0f);

    s->fwd_per_row = 8 * D + 2 * F + s->H + 4 + (s->ln0_g != NULL ? D + 2 : 0)
                     + (cfg->final_norm || s->bert ? D : 0) + (cfg->final_norm ? 2 : 0);
    s->bwd_per_row = 10 * D + F;
    *out = s;
    return GRM_OK;

fail:
    sasrec_destroy(s);
    return st;
}

void sasrec_destroy(sasrec *s)
{
    if (s == NULL)
        return;
    if (s->block != NULL)
        s->host->free(sasrec_cpu, s->block);
    free(s->fwd);
    free(s->bwd);
    free(s->off);
    free(s);
}

int64_t sasrec_dim(const sasrec *s)
{
    return s->D;
}

/* ---- buffers (instance lifetime; grow by at least half, never shrink) ---- */

static grm_status grow(sasrec *s, float **buf, int64_t *cap, int64_t per_row, int64_t rows,
                       const char *what)
{
    if (rows <= *cap)
        return GRM_OK;
    int64_t n = *cap + *cap / 2;
    if (n < rows)
        n = rows;
    if ((uint64_t)n > SIZE_MAX / sizeof(float) / (uint64_t)per_row)
        return s->host->errorf(GRM_ENOMEM, "dense-sasrec: %s: %lld rows of %lld floats "
                               "overflow size_t", what, (long long)n, (long long)per_row);
    float *b = malloc((size_t)n * (size_t)per_row * sizeof *b);
    if (b == NULL)
        return s->host->errorf(GRM_ENOMEM, "dense-sasrec: %s: cannot allocate %zu bytes for "
                               "%lld rows", what, (size_t)n * (size_t)per_row * sizeof *b,
                               (long long)n);
    free(*buf);
    *buf = b;
    *cap = n;
    return GRM_OK;
}

static void bind_fwd(sasrec *s)
{
    const int64_t c = s->fwd_cap, D = s->D, F = s->F;
    float *p = s->fwd;
#define TAKE(field, n) do { s->field = p; p += c * (n); } while (0)
    if (s->ln0_g != NULL) {     // bert with pos_emb: the embedding LayerNorm's input
        TAKE(e, D);
        TAKE(mu0, 1);
        TAKE(rs0, 1);
    }
    TAKE(h0, D);
    TAKE(qin, D);
    TAKE(mu1, 1);
    TAKE(rs1, 1);
    TAKE(qp, D);
    TAKE(kv, 2 * D);
    TAKE(att, D);
    TAKE(lse, s->H);
    TAKE(r1, D);
    TAKE(u, D);
    TAKE(mu2, 1);
    TAKE(rs2, 1);
    TAKE(z1, F);
    TAKE(h1, F);
    if (s->cfg.final_norm || s->bert)
        TAKE(r2, D);
    if (s->cfg.final_norm) {
        TAKE(mu3, 1);
        TAKE(rs3, 1);
    }
}

static void bind_bwd(sasrec *s)
{
    const int64_t c = s->bwd_cap, D = s->D, F = s->F;
    float *p = s->bwd;
    TAKE(g_r2, D);
    TAKE(g_z2, D);
    TAKE(g_h1, F);
    TAKE(g_u, D);
    TAKE(g_r1, D);
    TAKE(g_att, D);
    TAKE(g_qp, D);
    TAKE(g_kv, 2 * D);
    TAKE(g_qin, D);
    TAKE(g_h0, D);
#undef TAKE
}

/* Copy and check the jagged layout: offsets [nseq+1] from 0 to rows, non-decreasing;
 * offsets NULL: each row its own sequence. With pos_emb, no sequence exceeds max_len. */
static grm_status take_offsets(sasrec *s, const int64_t *offsets, int64_t nseq, int64_t rows)
{
    if (offsets != NULL && nseq < 0)
        return s->host->errorf(GRM_EINVAL, "dense-sasrec: forward: ctx->nseq %lld is "
                               "negative", (long long)nseq);
    const int64_t n = offsets != NULL ? nseq : rows;
    if (n + 1 > s->off_cap) {
        int64_t *o = malloc((size_t)(n + 1) * sizeof *o);
        if (o == NULL)
            return s->host->errorf(GRM_ENOMEM, "dense-sasrec: forward: cannot allocate %lld "
                                   "offsets", (long long)(n + 1));
        free(s->off);
        s->off = o;
        s->off_cap = n + 1;
    }
    if (offsets == NULL) {
        for (int64_t i = 0; i <= n; i++)
            s->off[i] = i;
    } else {
        if (offsets[0] != 0 || offsets[nseq] != rows)
            return s->host->errorf(GRM_EINVAL, "dense-sasrec: forward: ctx->offsets run from "
                                   "%lld to %lld, expected 0 to the %lld rows of x",
                                   (long long)offsets[0], (long long)offsets[nseq],
                                   (long long)rows);
        for (int64_t i = 0; i < nseq; i++)
            if (offsets[i + 1] < offsets[i])
                return s->host->errorf(GRM_EINVAL, "dense-sasrec: forward: ctx->offsets "
                                       "decrease at sequence %lld (%lld > %lld)",
                                       (long long)i, (long long)offsets[i],
                                       (long long)offsets[i + 1]);
        memcpy(s->off, offsets, (size_t)(n + 1) * sizeof *s->off);
    }
    s->nseq = n;
    double pairs = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t L = s->off[i + 1] - s->off[i];
        if (s->cfg.pos_emb && L > s->cfg.max_len)
            return s->host->errorf(GRM_EINVAL, "dense-sasrec: forward: sequence %lld has %lld "
                                   "tokens, more than max_len %lld; raise max_len or truncate "
                                   "the sequences", (long long)i, (long long)L,
                                   (long long)s->cfg.max_len);
        pairs += 0.5 * (double)L * (double)(L + 1);
    }
    s->pairs = pairs;
    s->pairs_rows = rows;
    return GRM_OK;
}

/* Position of token t (0 = oldest) of a sequence of L tokens (Sec. III "Embedding
 * Layer": learned P [max_len, D]). right: max_len - L + t, the reference's layout, where
 * sequences are left-padded to maxlen so the newest token always has the last position;
 * left: t. */
static int64_t position(const sasrec *s, int64_t t, int64_t L)
{
    return s->cfg.pos_align == SASREC_ALIGN_LEFT ? t : s->cfg.max_len - L + t;
}

static sasrec_attn_args attn_args(const sasrec *s, int32_t training, int64_t step)
{
    sasrec_attn_args a = {
        .offsets = s->off, .nseq = s->nseq, .H = s->H, .dh = s->dh,
        .ldq = s->D, .ldkv = 2 * s->D, .ldo = s->D,
        .scale = (float)(1.0 / sqrt((double)s->dh)),
        .dropout = training ? s->cfg.dropout : 0.0,
        .drop_key = sasrec_drop_key(s->seed, step, SASREC_SITE_ATTN),
    };
    return a;
}

/* ---- pieces both styles use ---- */

/* out [rows, D] = x scale + P[pos] over the sequences of the last take_offsets (the
 * embedding stage's sum; Sec. III "Embedding Layer"). */
static void add_positions(const sasrec *s, float *out, const float *x, float scale)
{
    const int64_t D = s->D;
    for (int64_t q = 0; q < s->nseq; q++) {
        const int64_t first = s->off[q], L = s->off[q + 1] - first;
        for (int64_t t = 0; t < L; t++) {
            const float *pr = s->pos + position(s, t, L) * D;    /* [D] */
            const float *xr = x + (first + t) * D;
            float *o = out + (first + t) * D;
            for (int64_t c = 0; c < D; c++)
                o[c] = xr[c] * scale + pr[c];
        }
    }
}

/* The backward of add_positions for g = d out: dP[pos] += g, dx = g scale (dx NULL: not
 * written). */
static void position_grads(sasrec *s, float *dx, const float *g, float scale)
{
    const int64_t D = s->D;
    for (int64_t q = 0; q < s->nseq; q++) {
        const int64_t first = s->off[q], L = s->off[q + 1] - first;
        for (int64_t t = 0; t < L; t++) {
            float *dp = s->dpos + position(s, t, L) * D;         /* [D] */
            const float *gr = g + (first + t) * D;
            for (int64_t c = 0; c < D; c++) {
                dp[c] += gr[c];
                if (dx != NULL)
                    dx[(first + t) * D + c] = gr[c] * scale;
            }
        }
    }
}

/* The FFN activation and its derivative at z. GELU is the exact form of the reference
 * (modules.py gelu: x 0.5 (1 + erf(x / sqrt 2))); ReLU'(0) = 0, as torch. */
static inline float act_fwd(int32_t gelu, float z)
{
    if (gelu)
        return 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    return z > 0 ? z : 0.0f;
}

static inline float act_grad(int32_t gelu, float z)
{
    if (gelu)
        return 0.5f * (1.0f + erff(z * 0.70710678118654752f))
               + z * expf(-0.5f * z * z) * 0.39894228040143268f;
    return z > 0 ? 1.0f : 0.0f;
}

/* The block's row-wise and element-wise stages (LayerNorm, residual sums, dropout, the FFN
 * activation) on the host's threads. Each row's or element's arithmetic is the serial
 * loop's, so the result does not depend on the threads. Serial, they were a fifth of a
 * Beauty SASRec run's samples under perf (sasrec_ln_fwd 8 %, the sums and activation in
 * sasrec_forward 6 %, drop_inplace 5 %) while the other core waited. */
enum { EW_ADD, EW_DROP, EW_ACT, EW_ACT_GRAD };
typedef struct ew_job {
    int op;
    /* EW_ADD: y += x; EW_DROP: y *= drop; EW_ACT: y = act(x drop); EW_ACT_GRAD:
     * y *= act'(x drop) drop */
    float *y;
    const float *x;
    uint64_t key;              /* the dropout key, with p > 0 */
    double p;
    int32_t gelu;
} ew_job;

/* The loops below are compiled for the baseline, AVX2 and AVX-512 (x86-64-v4) and vectorised
 * (picked at load time by the CPU); each element's result is the scalar loop's: a dropout
 * keeps or zeroes by the same hash, and 1 / (1 - p) is computed once, not per element (a
 * division an element was most of drop_inplace's time). */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define SASREC_VECTOR_CLONES \
    __attribute__((target_clones("default", "avx2", "arch=x86-64-v4"), optimize("O3")))
#endif
#endif
#ifndef SASREC_VECTOR_CLONES
#define SASREC_VECTOR_CLONES
#endif

SASREC_VECTOR_CLONES static void ew_drop(float *y, int64_t lo, int64_t hi, uint64_t key,
                                         double p)
{
    const float keep = (float)(1.0 / (1.0 - p));
    for (int64_t i = lo; i < hi; i++)
        y[i] *= sasrec_kept(key, (uint64_t)i, p) ? keep : 0.0f;
}

SASREC_VECTOR_CLONES static void ew_add(float *y, const float *x, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++)
        y[i] += x[i];
}

static grm_status ew_range(void *ctx, int64_t lo, int64_t hi)
{
    const ew_job *j = ctx;
    switch (j->op) {
    case EW_ADD:
        ew_add(j->y, j->x, lo, hi);
        break;
    case EW_DROP:
        ew_drop(j->y, lo, hi, j->key, j->p);
        break;
    case EW_ACT_GRAD:
        for (int64_t i = lo; i < hi; i++) {
            const float m = j->p > 0 ? sasrec_drop(j->key, (uint64_t)i, j->p) : 1.0f;
            j->y[i] *= act_grad(j->gelu, j->x[i] * m) * m;
        }
        break;
    default:   // EW_ACT: y = act(x), x after its dropout (erff keeps this loop scalar)
        if (j->p > 0) {
            memcpy(j->y + lo, j->x + lo, (size_t)(hi - lo) * sizeof *j->y);
            ew_drop(j->y, lo, hi, j->key, j->p);
            for (int64_t i = lo; i < hi; i++)
                j->y[i] = act_fwd(j->gelu, j->y[i]);
        } else {
            for (int64_t i = lo; i < hi; i++)
                j->y[i] = act_fwd(j->gelu, j->x[i]);
        }
    }
    return GRM_OK;
}

static void ew(const sasrec *s, const ew_job *j, int64_t n)
{
    (void)s->host->parallel_for(n, 16384, ew_range, (void *)j);   /* ew_range cannot fail */
}

/* y [n] += x [n]. */
static void add_into(const sasrec *s, float *y, const float *x, int64_t n)
{
    const ew_job j = { .op = EW_ADD, .y = y, .x = x };
    ew(s, &j, n);
}

/* v [n] *= the dropout factors of `site` at `step` (p = 0: nothing); the same call on a
 * gradient is the backward. */
static void drop_inplace(const sasrec *s, float *v, int64_t n, int64_t step, int32_t site,
                         double p)
{
    if (p <= 0)
        return;
    const ew_job j = { .op = EW_DROP, .y = v, .key = sasrec_drop_key(s->seed, step, site),
                       .p = p };
    ew(s, &j, n);
}

typedef struct ln_job {
    float *y, *mu, *rs;
    const float *x, *g, *b;
    int64_t d;
    double eps;
} ln_job;

static grm_status ln_range(void *ctx, int64_t lo, int64_t hi)
{
    const ln_job *j = ctx;
    sasrec_ln_fwd(j->y + lo * j->d, j->mu + lo, j->rs + lo, j->x + lo * j->d, j->g, j->b,
                  hi - lo, j->d, j->eps);
    return GRM_OK;
}

/* sasrec_ln_fwd over the rows, a range of them a thread. */
static void ln_fwd(const sasrec *s, float *y, float *mu, float *rs, const float *x,
                   const float *g, const float *b, int64_t rows)
{
    const ln_job j = { .y = y, .mu = mu, .rs = rs, .x = x, .g = g, .b = b, .d = s->D,
                       .eps = s->cfg.ln_eps };
    (void)s->host->parallel_for(rows, 64, ln_range, (void *)&j);   /* ln_range cannot fail */
}

typedef struct ln_bwd_job {
    float *dx;
    const float *dy, *x, *mu, *rs, *g;
    int64_t d;
    int32_t accumulate;
} ln_bwd_job;

static grm_status ln_bwd_range(void *ctx, int64_t lo, int64_t hi)
{
    const ln_bwd_job *j = ctx;
    sasrec_ln_bwd_dx(j->dx + lo * j->d, j->dy + lo * j->d, j->x + lo * j->d, j->mu + lo,
                     j->rs + lo, j->g, hi - lo, j->d, j->accumulate);
    return GRM_OK;
}

/* sasrec_ln_bwd: dgamma and dbeta summed over the rows in order on this thread (so they do
 * not depend on the thread count), then dx a range of rows a thread. */
static void ln_bwd(const sasrec *s, float *dx, float *dgamma, float *dbeta, const float *dy,
                   const float *x, const float *mu, const float *rs, const float *g,
                   int64_t rows, int32_t accumulate)
{
    sasrec_ln_bwd_params(dgamma, dbeta, dy, x, mu, rs, rows, s->D);   /* first: dx may be dy */
    const ln_bwd_job j = { .dx = dx, .dy = dy, .x = x, .mu = mu, .rs = rs, .g = g, .d = s->D,
                           .accumulate = accumulate };
    (void)s->host->parallel_for(rows, 64, ln_bwd_range, (void *)&j);   /* cannot fail */
}

/* The attention sub-layer up to its output projection, r1 = out_proj(MHA(q_in, h0, h0)):
 * queries from q_in (LN1(h0) in style sasrec, h0 in bert), keys and values from h0. */
static grm_status attention_fwd(sasrec *s, const float *q_in, int64_t rows, int32_t training,
                                int64_t step)
{
    const int64_t D = s->D;
    const sasrec_impl *im = s->impl;
    grm_status st;
    if ((st = im->linear_fwd(s->qp, q_in, s->w_in, s->b_in, rows, D, D, &s->ex)) != GRM_OK
        || (st = im->linear_fwd(s->kv, s->h0, s->w_in + D * D, s->b_in + D, rows, D, 2 * D,
                                &s->ex)) != GRM_OK)
        return st;
    const sasrec_attn_args a = attn_args(s, training, step);
    if ((st = im->attn_fwd(s->att, s->lse, s->qp, s->kv, s->kv + D, &a, s->host)) != GRM_OK)
        return st;
    return im->linear_fwd(s->r1, s->att, s->w_out, s->b_out, rows, D, D, &s->ex);
}

/* The backward of attention_fwd from g_o = d out_proj's output: parameter gradients, d q_in
 * added into g_q, d h0 (keys and values) added into g_h0 (kv_accumulate) or written. */
static grm_status attention_bwd(sasrec *s, float *g_q, const float *g_o, const float *q_in,
                                int64_t rows, int32_t kv_accumulate)
{
    const int64_t D = s->D;
    const sasrec_impl *im = s->impl;
    grm_status st;
    if ((st = im->linear_bwd(s->g_att, s->dw_out, s->db_out, g_o, s->att, s->w_out, rows, D,
                             D, 0, &s->ex)) != GRM_OK)
        return st;
    const sasrec_attn_args a = attn_args(s, 1, s->step);
    if ((st = im->attn_bwd(s->g_qp, s->g_kv, s->g_kv + D, s->g_att, s->qp, s->kv, s->kv + D,
                           s->att, s->lse, &a, s->host)) != GRM_OK)
        return st;
    if ((st = im->linear_bwd(g_q, s->dw_in, s->db_in, s->g_qp, q_in, s->w_in, rows, D, D, 1,
                             &s->ex)) != GRM_OK)
        return st;
    return im->linear_bwd(s->g_h0, s->dw_in + D * D, s->db_in + D, s->g_kv, s->h0,
                          s->w_in + D * D, rows, D, 2 * D, kv_accumulate, &s->ex);
}

/* ---- forward ---- */

/* style = sasrec (pmixer/SASRec.pytorch SASRec.log2feats); see the file comment. */
static grm_status forward_sasrec(sasrec *s, float *y, const float *x, int64_t rows,
                                 int32_t training, int64_t step)
{
    const int64_t D = s->D, F = s->F;
    const double p = training ? s->cfg.dropout : 0.0;
    const sasrec_impl *im = s->impl;
    grm_status st;

    // embedding stage (Sec. III "Embedding Layer"; reference: seqs *= D ** 0.5,
    // seqs += pos_emb(positions), emb_dropout)
    if (s->cfg.pos_emb) {
        add_positions(s, s->h0, x, (float)sqrt((double)D));
        drop_inplace(s, s->h0, rows * D, step, SASREC_SITE_EMB, p);
    } else {
        memcpy(s->h0, x, (size_t)(rows * D) * sizeof *x);
    }

    // attention sub-layer (reference: Q = attention_layernorms[i](seqs);
    // mha_outputs = attention_layers[i](Q, seqs, seqs, attn_mask); seqs = Q + mha_outputs)
    ln_fwd(s, s->qin, s->mu1, s->rs1, s->h0, s->ln1_g, s->ln1_b, rows);
    if ((st = attention_fwd(s, s->qin, rows, training, step)) != GRM_OK)
        return st;
    add_into(s, s->r1, s->qin, rows * D);

    // feed-forward sub-layer (Sec. III "Point-Wise Feed-Forward Network"; reference:
    // seqs = forward_layernorms[i](seqs); seqs = forward_layers[i](seqs), which adds its
    // input back: dropout2(conv2(relu(dropout1(conv1(x))))) + x)
    ln_fwd(s, s->u, s->mu2, s->rs2, s->r1, s->ln2_g, s->ln2_b, rows);
    if ((st = im->linear_fwd(s->z1, s->u, s->w1, s->b1, rows, D, F, &s->ex)) != GRM_OK)
        return st;
    const ew_job act = { .op = EW_ACT, .y = s->h1, .x = s->z1, .p = p, .gelu = s->gelu,
                         .key = sasrec_drop_key(s->seed, step, SASREC_SITE_FFN1) };
    ew(s, &act, rows * F);
    float *r2 = s->cfg.final_norm ? s->r2 : y;           /* [rows, D] */
    if ((st = im->linear_fwd(r2, s->h1, s->w2, s->b2, rows, F, D, &s->ex)) != GRM_OK)
        return st;
    drop_inplace(s, r2, rows * D, step, SASREC_SITE_FFN2, p);
    add_into(s, r2, s->u, rows * D);

    // reference: log_feats = self.last_layernorm(seqs) after the last block
    if (s->cfg.final_norm)
        ln_fwd(s, y, s->mu3, s->rs3, s->r2, s->ln3_g, s->ln3_b, rows);
    return GRM_OK;
}

/* style = bert (S3-Rec modules.py); see the file comment. */
static grm_status forward_bert(sasrec *s, float *y, const float *x, int64_t rows,
                               int32_t training, int64_t step)
{
    const int64_t D = s->D, F = s->F;
    const double p = training ? s->cfg.dropout : 0.0;
    const sasrec_impl *im = s->impl;
    grm_status st;

    // embedding stage (S3RecModel.add_position_embedding: item + position embeddings,
    // LayerNorm, dropout; no sqrt(D) scale)
    if (s->cfg.pos_emb) {
        add_positions(s, s->e, x, 1.0f);
        ln_fwd(s, s->h0, s->mu0, s->rs0, s->e, s->ln0_g, s->ln0_b, rows);
        drop_inplace(s, s->h0, rows * D, step, SASREC_SITE_EMB, p);
    } else {
        memcpy(s->h0, x, (size_t)(rows * D) * sizeof *x);
    }

    // attention sub-layer (SelfAttention.forward: query, key and value of the same input,
    // softmax, attention dropout, dense, out_dropout, LayerNorm(hidden + input))
    if ((st = attention_fwd(s, s->h0, rows, training, step)) != GRM_OK)
        return st;
    drop_inplace(s, s->r1, rows * D, step, SASREC_SITE_ATTN_OUT, p);
    add_into(s, s->r1, s->h0, rows * D);
    ln_fwd(s, s->u, s->mu1, s->rs1, s->r1, s->ln1_g, s->ln1_b, rows);

    // feed-forward sub-layer (Intermediate.forward: dense_1, activation, dense_2, dropout,
    // LayerNorm(hidden + input))
    if ((st = im->linear_fwd(s->z1, s->u, s->w1, s->b1, rows, D, F, &s->ex)) != GRM_OK)
        return st;
    const ew_job act = { .op = EW_ACT, .y = s->h1, .x = s->z1, .gelu = s->gelu };
    ew(s, &act, rows * F);
    if ((st = im->linear_fwd(s->r2, s->h1, s->w2, s->b2, rows, F, D, &s->ex)) != GRM_OK)
        return st;
    drop_inplace(s, s->r2, rows * D, step, SASREC_SITE_FFN2, p);
    add_into(s, s->r2, s->u, rows * D);
    ln_fwd(s, y, s->mu2, s->rs2, s->r2, s->ln2_g, s->ln2_b, rows);
    return GRM_OK;
}

grm_status sasrec_forward(sasrec *s, float *y, const float *x, int64_t rows,
                          const int64_t *offsets, int64_t nseq, int32_t training,
                          int64_t step)
{
    s->rows = -1;
    grm_status st = take_offsets(s, offsets, nseq, rows);
    if (st != GRM_OK)
        return st;
    if (rows > 0) {
        if ((st = grow(s, &s->fwd, &s->fwd_cap, s->fwd_per_row, rows, "forward")) != GRM_OK)
            return st;
        bind_fwd(s);
        st = s->bert ? forward_bert(s, y, x, rows, training, step)
                     : forward_sasrec(s, y, x, rows, training, step);
        if (st != GRM_OK)
            return st;
    }
    if (training) {
        s->rows = rows;
        s->step = step;
    }
    return GRM_OK;
}

/* ---- backward ---- */

/* style = sasrec: the chain of forward_sasrec backwards. dy is read only in the first
 * part, and dx written only at the end, so the caller may pass one buffer for both. */
static grm_status backward_sasrec(sasrec *s, float *dx, const float *dy, int64_t rows)
{
    const int64_t D = s->D, F = s->F, step = s->step;
    const double p = s->cfg.dropout;
    const sasrec_impl *im = s->impl;
    grm_status st;

    const float *g = dy;                                  /* [rows, D] d r2 */
    if (s->cfg.final_norm) {
        ln_bwd(s, s->g_r2, s->dln3_g, s->dln3_b, dy, s->r2, s->mu3, s->rs3, s->ln3_g, rows, 0);
        g = s->g_r2;
    }
    // r2 = u + drop2(z2): d u = g (residual), d z2 = g * mask2
    memcpy(s->g_u, g, (size_t)(rows * D) * sizeof *g);
    memcpy(s->g_z2, g, (size_t)(rows * D) * sizeof *g);
    drop_inplace(s, s->g_z2, rows * D, step, SASREC_SITE_FFN2, p);
    if ((st = im->linear_bwd(s->g_h1, s->dw2, s->db2, s->g_z2, s->h1, s->w2, rows, F, D, 0,
                             &s->ex)) != GRM_OK)
        return st;
    // h1 = act(mask1 z1): d z1 = d h1 act'(mask1 z1) mask1
    const ew_job dact = { .op = EW_ACT_GRAD, .y = s->g_h1, .x = s->z1, .p = p,
                          .gelu = s->gelu,
                          .key = sasrec_drop_key(s->seed, step, SASREC_SITE_FFN1) };
    ew(s, &dact, rows * F);
    if ((st = im->linear_bwd(s->g_u, s->dw1, s->db1, s->g_h1, s->u, s->w1, rows, D, F, 1,
                             &s->ex)) != GRM_OK)
        return st;
    ln_bwd(s, s->g_r1, s->dln2_g, s->dln2_b, s->g_u, s->r1, s->mu2, s->rs2, s->ln2_g, rows, 0);

    // r1 = qin + out_proj(att): d qin = d r1 (residual) + the query path below
    memcpy(s->g_qin, s->g_r1, (size_t)(rows * D) * sizeof *s->g_qin);
    if ((st = attention_bwd(s, s->g_qin, s->g_r1, s->qin, rows, 0)) != GRM_OK)
        return st;
    // qin = LN1(h0); h0 also fed keys and values (g_h0 so far)
    ln_bwd(s, s->g_h0, s->dln1_g, s->dln1_b, s->g_qin, s->h0, s->mu1, s->rs1, s->ln1_g, rows, 1);

    if (s->cfg.pos_emb) {
        // h0 = drop(x sqrt(D) + P[pos]): dP[pos] += d h0 mask, dx = sqrt(D) d h0 mask
        drop_inplace(s, s->g_h0, rows * D, step, SASREC_SITE_EMB, p);
        position_grads(s, dx, s->g_h0, (float)sqrt((double)D));
    } else if (dx != NULL) {
        memcpy(dx, s->g_h0, (size_t)(rows * D) * sizeof *dx);
    }
    return GRM_OK;
}

/* style = bert: the chain of forward_bert backwards; dx may alias dy as above. */
static grm_status backward_bert(sasrec *s, float *dx, const float *dy, int64_t rows)
{
    const int64_t D = s->D, F = s->F, step = s->step;
    const double p = s->cfg.dropout;
    const sasrec_impl *im = s->impl;
    grm_status st;

    // y = LN2(r2), r2 = u + drop(W2 h1 + b2): d u = d r2, d z2 = d r2 mask
    ln_bwd(s, s->g_r2, s->dln2_g, s->dln2_b, dy, s->r2, s->mu2, s->rs2, s->ln2_g, rows, 0);
    memcpy(s->g_u, s->g_r2, (size_t)(rows * D) * sizeof *s->g_u);
    drop_inplace(s, s->g_r2, rows * D, step, SASREC_SITE_FFN2, p);
    if ((st = im->linear_bwd(s->g_h1, s->dw2, s->db2, s->g_r2, s->h1, s->w2, rows, F, D, 0,
                             &s->ex)) != GRM_OK)
        return st;
    const ew_job dact = { .op = EW_ACT_GRAD, .y = s->g_h1, .x = s->z1, .gelu = s->gelu };
    ew(s, &dact, rows * F);
    if ((st = im->linear_bwd(s->g_u, s->dw1, s->db1, s->g_h1, s->u, s->w1, rows, D, F, 1,
                             &s->ex)) != GRM_OK)
        return st;

    // u = LN1(r1), r1 = h0 + drop(out_proj(att)): d h0 = d r1 + the q, k, v paths below
    ln_bwd(s, s->g_r1, s->dln1_g, s->dln1_b, s->g_u, s->r1, s->mu1, s->rs1, s->ln1_g, rows, 0);
    memcpy(s->g_h0, s->g_r1, (size_t)(rows * D) * sizeof *s->g_h0);
    drop_inplace(s, s->g_r1, rows * D, step, SASREC_SITE_ATTN_OUT, p);
    if ((st = attention_bwd(s, s->g_h0, s->g_r1, s->h0, rows, 1)) != GRM_OK)
        return st;

    if (s->cfg.pos_emb) {
        // h0 = drop(LN0(e)), e = x + P[pos]: d e = LN0'(d h0 mask); dP[pos] += d e, dx = d e
        drop_inplace(s, s->g_h0, rows * D, step, SASREC_SITE_EMB, p);
        ln_bwd(s, s->g_qin, s->dln0_g, s->dln0_b, s->g_h0, s->e, s->mu0, s->rs0, s->ln0_g, rows, 0);
        position_grads(s, dx, s->g_qin, 1.0f);
    } else if (dx != NULL) {
        memcpy(dx, s->g_h0, (size_t)(rows * D) * sizeof *dx);
    }
    return GRM_OK;
}

grm_status sasrec_backward(sasrec *s, float *dx, const float *dy, int64_t rows)
{
    if (s->rows < 0)
        return s->host->errorf(GRM_EINVAL, "dense-sasrec: backward: no training forward to "
                               "differentiate; call forward with ctx->training = 1 first");
    if (rows != s->rows)
        return s->host->errorf(GRM_EINVAL, "dense-sasrec: backward: dy has %lld rows, the "
                               "last forward had %lld", (long long)rows, (long long)s->rows);
    if (rows == 0)
        return GRM_OK;
    grm_status st = grow(s, &s->bwd, &s->bwd_cap, s->bwd_per_row, rows, "backward");
    if (st != GRM_OK)
        return st;
    bind_bwd(s);
    return s->bert ? backward_bert(s, dx, dy, rows) : backward_sasrec(s, dx, dy, rows);
}

/* ---- parameters, flops ---- */

grm_status sasrec_params(sasrec *s, int32_t index, grm_named_tensor *value, grm_tensor *grad)
{
    if (index < 0 || index >= s->nparam)
        return s->host->errorf(GRM_ENOTFOUND, "dense-sasrec: params: no parameter %d; the "
                               "block has %d", (int)index, (int)s->nparam);
    const sasrec_param *pr = &s->param[index];
    grm_tensor t = { 0 };
    t.dtype = GRM_DTYPE_F32;
    t.device.type = GRM_DEVICE_CPU;
    for (int d = 0; d < GRM_TENSOR_MAX_DIMS; d++)
        t.shape[d] = 1;
    t.ndim = pr->cols > 0 ? 2 : 1;
    t.shape[0] = pr->rows;
    if (pr->cols > 0)
        t.shape[1] = pr->cols;
    if (value != NULL) {
        value->name = pr->name;
        value->tensor = t;
        value->tensor.data = pr->value;
    }
    if (grad != NULL) {
        *grad = t;
        grad->data = pr->grad;
    }
    return GRM_OK;
}

/* GEMMs: 2 rows (D 3D + D D + 2 D F) forward (q, k, v, out, FFN), twice that backward
 * (dx and dW). Attention: per causal (query, key) pair and head, 2 dh for the score and
 * 2 dh for the value sum forward; 10 dh backward (score recomputation, dP, dV, dQ, dK).
 * The pairs are those of the last forward, scaled to `rows` when rows differs (rows
 * alone, i.e. length-1 sequences, before any forward). Elementwise work is not counted. */
double sasrec_flops(const sasrec *s, int64_t rows, int32_t backward)
{
    const double D = (double)s->D, F = (double)s->F, n = (double)rows;
    const double gemm = 2.0 * n * (4.0 * D * D + 2.0 * D * F);
    double pairs = n;
    if (s->pairs_rows > 0)
        pairs = s->pairs * n / (double)s->pairs_rows;
    return backward ? 2.0 * gemm + 10.0 * D * pairs : gemm + 4.0 * D * pairs;
}

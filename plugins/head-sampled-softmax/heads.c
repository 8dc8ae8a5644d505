/* plugins/head-sampled-softmax/heads.c - the two heads of dense-mlp.so: head-bce (multi-task
 * binary cross-entropy on logits) and head-sampled-softmax (retrieval loss over sampled
 * and in-batch negatives, with the negative sampler, optional L2 normalization, FP16
 * negatives (TurboGR §4.3.2), intra-batch logit sharing (TurboGR §4.3.3, eq. 2) and, with
 * loss = bce, SASRec's sampled binary cross-entropy (Kang & McAuley 2018, §III-E)). Both
 * pass rows through unchanged (out_dim = in_dim); the numerics are in heads_ref.c and
 * heads_cpu.c. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "heads.h"

/* The grm_loss_io fields this code reads exist (the struct is 1.0-sized or larger; the
 * fields of 1.5 are read by plugin.c after its own struct_size check). */
static grm_status check_io(const grm_host_api *host, const char *who, const grm_loss_io *io)
{
    const size_t v10 = offsetof(grm_loss_io, batch);   /* sizeof the 1.0 grm_loss_io */
    if (io == NULL)
        return host->errorf(GRM_EINVAL, "%s: loss: io is NULL", who);
    if (io->struct_size < v10)
        return host->errorf(GRM_EINVAL, "%s: loss: io->struct_size %u is smaller than the "
                            "1.0 grm_loss_io (%zu); set it to sizeof(grm_loss_io)", who,
                            (unsigned)io->struct_size, v10);
    if (io->rows < 0)
        return host->errorf(GRM_EINVAL, "%s: loss: io->rows %lld is negative", who,
                            (long long)io->rows);
    return GRM_OK;
}

/* ---- head-bce ---- */

struct bce_head {
    const grm_host_api *host;
    int64_t dim;
};

grm_status bce_create(const grm_host_api *host, int64_t in_dim, bce_head **out)
{
    *out = NULL;
    if (in_dim < 1)
        return host->errorf(GRM_EINVAL, "head-bce: create: in_dim %lld must be >= 1",
                            (long long)in_dim);
    bce_head *h = calloc(1, sizeof *h);
    if (h == NULL)
        return host->errorf(GRM_ENOMEM, "head-bce: create: out of memory");
    h->host = host;
    h->dim = in_dim;
    *out = h;
    return GRM_OK;
}

void bce_destroy(bce_head *h)
{
    free(h);
}

int64_t bce_dim(const bce_head *h)
{
    return h->dim;
}

grm_status bce_loss(bce_head *h, grm_loss_io *io)
{
    grm_status st = check_io(h->host, "head-bce", io);
    if (st != GRM_OK)
        return st;
    if (io->ntasks < 1 || io->dim != io->ntasks)
        return h->host->errorf(GRM_EINVAL, "head-bce: loss: io->dim %lld and io->ntasks %d "
                               "must be equal and >= 1 (pred is [B, T] logits)",
                               (long long)io->dim, (int)io->ntasks);
    if (io->dim != h->dim)
        return h->host->errorf(GRM_EINVAL, "head-bce: loss: pred has %lld columns, the "
                               "head was created for %lld", (long long)io->dim,
                               (long long)h->dim);
    if (io->rows > 0 && (io->pred == NULL || io->labels == NULL))
        return h->host->errorf(GRM_EINVAL, "head-bce: loss: io->%s is NULL; BCE needs "
                               "logits and labels", io->pred == NULL ? "pred" : "labels");
    return bce_loss_ref(h->host, &io->loss, io->d_pred, io->scores, io->pred, io->labels,
                        io->weights, io->rows, io->ntasks);
}

/* ---- head-sampled-softmax ---- */

struct ssm_head {
    const grm_host_api *host;
    ssm_config cfg;             /* copy */
    int64_t dim;
    uint64_t seed;              /* of the token-level shuffle */

    ssm_loss_fn loss;           /* picked at create from cfg.impl (STYLE.md §7) */
    ssm_share_fn share;         /* the same, for share_k > 0 */
    ssm_bce_fn bce;             /* the same, for loss = bce */
    ssm_full_fn full;           /* the same, for catalog = all */
    ssm_tok_fn tok;             /* the same, for share_k = 1 on item rows in place */
    double *work;               /* owned: [work_cap], see ssm_work_doubles */
    int64_t work_cap;

    /* per-step buffers, grown to the largest batch seen (owned, malloc) */
    uint16_t *neg16;            /* [R, D] negatives stored in FP16 (neg_fp16) */
    float *negq;                /* [R, D] the FP16 negatives read back as fp32 */
    float *unit;                /* [2 B + R, D] normalized pred, pos, neg (l2norm) */
    float *norms;               /* [2 B + R] their norms before normalization */
    int64_t *perm;              /* [B] token-level shuffle (share_k) */
    float *drows;               /* [nitems, D] gradients of the rows in place (ssm_tok_*) */
    int64_t neg16_cap, negq_cap, unit_cap, norms_cap, perm_cap, drows_cap;

    /* the last loss call's work, for the flops op (ssm_flops): its rows, forward and
     * backward floating-point operations */
    int64_t fl_rows;
    double fl_fwd, fl_bwd;

    /* popularity table, cached per catalog (ids, counts, n) */
    double *cdf;                /* owned: [cdf_n] cumulative counts^alpha */
    int64_t cdf_n;
    const int64_t *cdf_ids, *cdf_counts;   /* identity of the cached catalog */

    /* the last draw, for the logQ correction */
    int64_t *drawn_idx;         /* owned: [negatives] catalog indices, then reused */
    int64_t *drawn_ids;         /* owned: [negatives] ids */
    double *drawn_logq;         /* owned: [negatives] log expected count of each slot */
    int64_t ndrawn;             /* -1: nothing drawn yet */

    /* mixed negatives (logq with in_batch; Yang et al. 2020, "Mixed Negative Sampling"):
     * each negative's logQ is the log of its expected count among a row's B - 1 in-batch
     * positives (drawn from the data, p_data = count / total) and R sampled ones (p_s) */
    double *drawn_pd, *drawn_ps;   /* owned: [negatives] p_data, p_s of each drawn slot */
    int64_t *mix_ids;           /* owned: [mix_n] the catalog's ids, increasing */
    double *mix_pd, *mix_ps;    /* owned: [mix_n] their p_data and p_s */
    int64_t mix_n;
    const int64_t *mix_src;     /* identity of the catalog they came from */
    double mix_floor;           /* p_data of an id outside the catalog: 1 / total */
    double *mixq;               /* [R + B] the step's corrections, grown */
    int64_t mixq_cap;
};

grm_status ssm_create(const grm_host_api *host, const ssm_config *cfg, int64_t in_dim,
                      uint64_t seed, ssm_head **out)
{
    grm_status st;
    *out = NULL;
    if (in_dim < 1)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: create: in_dim %lld must be "
                            ">= 1", (long long)in_dim);
    if (!(cfg->temperature > 0))
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: temperature: %g must be > 0",
                            cfg->temperature);
    if (cfg->negatives < 0 || cfg->negatives > (1 << 20))
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: negatives: %lld out of range "
                            "0..%d", (long long)cfg->negatives, 1 << 20);
    if (!(cfg->alpha >= 0 && cfg->alpha <= 2))
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: alpha: %g out of range "
                            "[0, 2]", cfg->alpha);
    if (cfg->share_k < 0 || cfg->share_k > (1 << 16))
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: share_k: %lld out of range "
                            "0..%d", (long long)cfg->share_k, 1 << 16);
    if (cfg->share_k > 0 && cfg->in_batch)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: share_k: logit sharing "
                            "(TurboGR eq. 2) has no in-batch term; set in_batch = false");
    if (cfg->loss != SSM_LOSS_SOFTMAX && cfg->loss != SSM_LOSS_BCE)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: %d is not softmax (0) "
                            "or bce (1)", (int)cfg->loss);
    if (cfg->row_negatives < 0 || cfg->row_negatives > (1 << 20))
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: row_negatives: %lld out of "
                            "range 0..%d", (long long)cfg->row_negatives, 1 << 20);
    if (cfg->row_negatives > 0 && cfg->share_k == 0)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: row_negatives: per-row "
                            "negatives need share_k >= 1 (with share_k = 0 every row uses "
                            "all negatives); set share_k = 1 or row_negatives = 0");
    if (cfg->catalog != SSM_CATALOG_SAMPLED && cfg->catalog != SSM_CATALOG_ALL)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: catalog: %d is not sampled (0) "
                            "or all (1)", (int)cfg->catalog);
    if (!(cfg->label_smoothing >= 0 && cfg->label_smoothing < 1))
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: label_smoothing: %g out of "
                            "range [0, 1)", cfg->label_smoothing);
    if (cfg->label_smoothing > 0 && cfg->catalog != SSM_CATALOG_ALL)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: label_smoothing: %g spreads "
                            "the target over every item, which needs catalog = all; set "
                            "catalog = all or label_smoothing = 0", cfg->label_smoothing);
    if (cfg->catalog == SSM_CATALOG_ALL) {
        // every item is a class: nothing is sampled, and the in-batch positives are items
        // of the catalog already
        const char *bad = cfg->in_batch ? "in_batch = true (the batch's positives are in the "
                                          "catalog already); set in_batch = false"
                        : cfg->logq ? "logq = true (nothing is sampled, there is no Q to "
                                      "correct); set logq = false"
                        : cfg->share_k > 0 ? "share_k (logit sharing is for sampled "
                                             "negatives); set share_k = 0"
                        : cfg->loss == SSM_LOSS_BCE ? "loss = bce; use loss = softmax"
                        : NULL;
        if (bad != NULL)
            return host->errorf(GRM_EINVAL, "head-sampled-softmax: catalog = all: %s", bad);
    }
    if (cfg->loss == SSM_LOSS_BCE) {
        // SASRec's loss (Kang & McAuley 2018, §III-E): each row against its positive and
        // its own (share_k = 1) or all (share_k = 0) sampled negatives; the softmax-only
        // options have no meaning there
        if (cfg->in_batch)
            return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss = bce: in-batch "
                                "negatives are a softmax term; set in_batch = false");
        if (cfg->logq)
            return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss = bce: the logQ "
                                "correction estimates a softmax partition function; set "
                                "logq = false");
        if (cfg->share_k > 1)
            return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss = bce: share_k = "
                                "%lld shares negatives in groups of a softmax (TurboGR eq. 2); "
                                "use share_k = 1 (own negatives) or 0 (shared by the batch)",
                                (long long)cfg->share_k);
    }
    ssm_head *h = calloc(1, sizeof *h);
    if (h == NULL)
        return host->errorf(GRM_ENOMEM, "head-sampled-softmax: create: out of memory");
    h->host = host;
    h->cfg = *cfg;
    h->dim = in_dim;
    h->seed = seed;
    h->ndrawn = -1;
    const int ref = mlp_impl_of(host, cfg->impl) == MLP_IMPL_REF;
    h->loss = ref ? ssm_loss_ref : ssm_loss_cpu;
    h->share = ref ? ssm_share_loss_ref : ssm_share_loss_cpu;
    h->bce = ref ? ssm_bce_ref : ssm_bce_cpu;
    h->full = ref ? ssm_full_ref : ssm_full_cpu;
    h->tok = ref ? ssm_tok_ref : ssm_tok_cpu;
    if (cfg->negatives > 0) {
        const size_t n = (size_t)cfg->negatives;
        h->drawn_idx = malloc(n * sizeof *h->drawn_idx);
        h->drawn_ids = malloc(n * sizeof *h->drawn_ids);
        h->drawn_logq = malloc(n * sizeof *h->drawn_logq);
        h->drawn_pd = malloc(n * sizeof *h->drawn_pd);
        h->drawn_ps = malloc(n * sizeof *h->drawn_ps);
        if (h->drawn_idx == NULL || h->drawn_ids == NULL || h->drawn_logq == NULL
            || h->drawn_pd == NULL || h->drawn_ps == NULL) {
            st = host->errorf(GRM_ENOMEM, "head-sampled-softmax: create: cannot allocate "
                              "the draw buffers for %lld negatives",
                              (long long)cfg->negatives);
            goto fail;
        }
    }
    *out = h;
    return GRM_OK;

fail:
    ssm_destroy(h);
    return st;
}

void ssm_destroy(ssm_head *h)
{
    if (h == NULL)
        return;
    free(h->work);
    free(h->neg16);
    free(h->negq);
    free(h->unit);
    free(h->norms);
    free(h->perm);
    free(h->drows);
    free(h->cdf);
    free(h->drawn_idx);
    free(h->drawn_ids);
    free(h->drawn_logq);
    free(h->drawn_pd);
    free(h->drawn_ps);
    free(h->mix_ids);
    free(h->mix_pd);
    free(h->mix_ps);
    free(h->mixq);
    free(h);
}

int64_t ssm_dim(const ssm_head *h)
{
    return h->dim;
}

/* Make *buf hold `need` elements of `elem` bytes; grows to the largest batch seen, then
 * stays (no allocation in the step once warm). */
static grm_status grow(ssm_head *h, void **buf, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return GRM_OK;
    void *p = malloc((size_t)need * elem);
    if (p == NULL)
        return h->host->errorf(GRM_ENOMEM, "head-sampled-softmax: loss: cannot allocate "
                               "%lld elements of %zu bytes of scratch", (long long)need, elem);
    free(*buf);
    *buf = p;
    *cap = need;
    return GRM_OK;
}

/* The logQ of the step's negatives (*logq NULL without logq): only known for negatives this
 * head drew itself. */
static grm_status step_logq(const ssm_head *h, const grm_loss_io *io, const double **logq)
{
    const int64_t R = io->nneg;
    *logq = NULL;
    if (!h->cfg.logq || R <= 0)
        return GRM_OK;
    int same = h->ndrawn == R && io->neg_ids != NULL;
    for (int64_t j = 0; same && j < R; j++)
        same = io->neg_ids[j] == h->drawn_ids[j];
    if (!same)
        return h->host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: logq needs the "
                               "negatives drawn by this head's negatives op, but io->neg_ids "
                               "differ from the last draw; set logq = false to use other "
                               "negatives");
    *logq = h->drawn_logq;
    return GRM_OK;
}

/* The negatives each of B rows owns among R (share_k >= 1), into *r; 0 when shared. */
static grm_status step_r(const ssm_head *h, int64_t B, int64_t R, int64_t *r)
{
    *r = 0;
    if (h->cfg.share_k > 0 && h->cfg.row_negatives > 0) {
        // the trainer draws one fixed count per step before it knows the step's rows
        // (tokens): row i owns neg [i r, (i+1) r), the slots past rows r are unused
        *r = h->cfg.row_negatives;
        if (R < B * *r)
            return h->host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: io->nneg %lld is "
                                   "less than io->rows %lld x row_negatives %lld; raise "
                                   "negatives to at least the most rows of a step x "
                                   "row_negatives (batch_size x max_seq_len for tokens)",
                                   (long long)R, (long long)B, (long long)*r);
    } else if (h->cfg.share_k > 0) {
        if ((B == 0 && R != 0) || (B > 0 && R % B != 0))
            return h->host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: io->nneg %lld is "
                                   "not a multiple of io->rows %lld; with share_k each row "
                                   "owns nneg / rows negatives (rows [i r, (i+1) r) of "
                                   "io->neg)", (long long)R, (long long)B);
        *r = B > 0 ? R / B : 0;
    }
    return GRM_OK;
}

static int cmp_id(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Mixed negatives (Yang et al. 2020, §3; the correction of Yi et al. 2019 applied to both
 * kinds): *logq becomes h->mixq [R + B], log((B - 1) p_data + R p_s) of each sampled
 * negative and, at R + k, of row k's positive as an in-batch negative. */
static grm_status mixed_logq(ssm_head *h, const grm_loss_io *io, const double **logq)
{
    const int64_t B = io->rows, R = io->nneg;
    if (io->pos_ids == NULL || h->mix_ids == NULL)
        return h->host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: logq with in_batch "
                               "needs io->pos_ids and a draw from a catalog with counts");
    grm_status st = grow(h, (void **)&h->mixq, &h->mixq_cap, R + B, sizeof(double));
    if (st != GRM_OK)
        return st;
    const double nb = (double)(B - 1), nr = (double)R;
    for (int64_t j = 0; j < R; j++)
        h->mixq[j] = log(nb * h->drawn_pd[j] + nr * h->drawn_ps[j]);
    for (int64_t k = 0; k < B; k++) {
        const int64_t *hit = bsearch(&io->pos_ids[k], h->mix_ids, (size_t)h->mix_n,
                                     sizeof *h->mix_ids, cmp_id);
        const int64_t i = hit != NULL ? hit - h->mix_ids : -1;
        const double pd = i >= 0 ? h->mix_pd[i] : h->mix_floor;
        const double ps = i >= 0 ? h->mix_ps[i] : 0.0;
        h->mixq[R + k] = log(nb * pd + nr * ps);
    }
    *logq = h->mixq;
    return GRM_OK;
}

/* The token-level shuffle of eq. 2 into h->perm [io->rows], keyed by the seed and the
 * step's negatives (a pure function of the data: replays exactly, changes every step). */
static void share_perm(ssm_head *h, const grm_loss_io *io)
{
    uint64_t key = grm_mix64(h->seed ^ 0x9b05688c2b3e6c1fULL);
    for (int64_t j = 0; io->neg_ids != NULL && j < io->nneg; j++)
        key = grm_mix64(key ^ (uint64_t)io->neg_ids[j]);
    key = grm_mix64(key ^ (uint64_t)io->rows);
    ssm_shuffle(h->perm, io->rows, key);
}

static void note_flops(ssm_head *h, int64_t B, double fwd, double bwd)
{
    h->fl_rows = B;
    h->fl_fwd = fwd;
    h->fl_bwd = bwd;
}

/* A loss over `logits` dot products of D: 2 D flops each forward; backward 4 D (the query's
 * and the item row's gradient). The softmax's own exp and sums are left out (O(logits)). */
static void note_logits(ssm_head *h, int64_t B, double logits, int64_t D)
{
    note_flops(h, B, 2.0 * logits * (double)D, 4.0 * logits * (double)D);
}

double ssm_flops(const ssm_head *h, int64_t rows, int32_t backward)
{
    if (h->fl_rows <= 0) return 0;
    return (backward ? h->fl_bwd : h->fl_fwd) * (double)rows / (double)h->fl_rows;
}

grm_status ssm_loss(ssm_head *h, grm_loss_io *io)
{
    const grm_host_api *host = h->host;
    grm_status st = check_io(host, "head-sampled-softmax", io);
    if (st != GRM_OK)
        return st;
    const int64_t B = io->rows, R = io->nneg, D = io->dim;
    if (D != h->dim)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: pred has %lld columns, "
                            "the head was created for %lld", (long long)D, (long long)h->dim);
    if (R < 0)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: io->nneg %lld is "
                            "negative", (long long)R);
    if (B > 0 && (io->pred == NULL || io->pos == NULL))
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: io->%s is NULL; the "
                            "retrieval loss needs query and positive rows",
                            io->pred == NULL ? "pred" : "pos");
    if (R > 0 && io->neg == NULL)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: io->neg is NULL with "
                            "io->nneg = %lld", (long long)R);
    const double *logq = NULL;
    int64_t r = 0;              /* negatives per row (share_k) */
    if ((st = step_logq(h, io, &logq)) != GRM_OK || (st = step_r(h, B, R, &r)) != GRM_OK)
        return st;
    if (logq != NULL && h->cfg.in_batch && (st = mixed_logq(h, io, &logq)) != GRM_OK)
        return st;
    const int64_t nunit = 2 * B + R;
    const int bce = h->cfg.loss == SSM_LOSS_BCE, full = h->cfg.catalog == SSM_CATALOG_ALL;
    grm_status st2 = GRM_OK;
    if (full) {
        const int64_t fl = ssm_full_work_floats(B, R, D, host->num_threads());
        st2 = grow(h, (void **)&h->work, &h->work_cap, (fl + 1) / 2, sizeof(double));
    } else if (bce) {
        st2 = grow(h, (void **)&h->work, &h->work_cap, ssm_bce_work_doubles(B, R, r),
                   sizeof(double));
    } else if (h->cfg.share_k > 0) {
        const int64_t chunks = ssm_share_chunks((B + h->cfg.share_k - 1) / h->cfg.share_k,
                                                host->num_threads());
        const int64_t fl = ssm_share_work_floats(h->cfg.share_k, r, D, chunks);
        st2 = grow(h, (void **)&h->work, &h->work_cap, (fl + 1) / 2 + 1 + B, sizeof(double));
        if (st2 == GRM_OK)
            st2 = grow(h, (void **)&h->perm, &h->perm_cap, B, sizeof(int64_t));
    } else {
        st2 = grow(h, (void **)&h->work, &h->work_cap, ssm_work_doubles(B, R, h->cfg.in_batch),
                   sizeof(double));
    }
    if (st2 == GRM_OK && h->cfg.neg_fp16)
        st2 = grow(h, (void **)&h->neg16, &h->neg16_cap, R * D, sizeof(uint16_t));
    if (st2 == GRM_OK && h->cfg.neg_fp16)
        st2 = grow(h, (void **)&h->negq, &h->negq_cap, R * D, sizeof(float));
    if (st2 == GRM_OK && h->cfg.l2norm)
        st2 = grow(h, (void **)&h->unit, &h->unit_cap, nunit * D, sizeof(float));
    if (st2 == GRM_OK && h->cfg.l2norm)
        st2 = grow(h, (void **)&h->norms, &h->norms_cap, nunit, sizeof(float));
    if (st2 != GRM_OK)
        return st2;

    const float *pred = io->pred, *pos = io->pos, *neg = io->neg;   /* [B|R, D] */
    if (h->cfg.neg_fp16 && R > 0) {
        // TurboGR §4.3.2: the negatives are stored in FP16 and read back as fp32; the
        // gradient d_neg stays fp32 (straight through the rounding)
        for (int64_t i = 0; i < R * D; i++)
            h->neg16[i] = ssm_f32_to_f16(neg[i]);
        for (int64_t i = 0; i < R * D; i++)
            h->negq[i] = ssm_f16_to_f32(h->neg16[i]);
        neg = h->negq;
    }
    const float *raw_pred = pred, *raw_pos = pos, *raw_neg = neg;
    if (h->cfg.l2norm) {
        // cosine logits: u / |u| . v / |v|, as HSTU's MovieLens setup (with a small
        // temperature, e.g. 0.05); the gradients go back through the normalization below
        float *up = h->unit, *pp = h->unit + B * D, *np = h->unit + 2 * B * D;
        mlp_l2norm_fwd(up, h->norms, pred, B, D);
        mlp_l2norm_fwd(pp, h->norms + B, pos, B, D);
        if (R > 0)
            mlp_l2norm_fwd(np, h->norms + 2 * B, neg, R, D);
        pred = up;
        pos = pp;
        neg = R > 0 ? np : neg;
    }
    if (full) {
        st = h->full(host, &io->loss, io->d_pred, io->d_pos, io->d_neg, pred, pos, neg,
                     io->pos_ids, io->neg_ids, io->weights, h->cfg.label_smoothing,
                     h->cfg.temperature, B, R, D, (float *)h->work);
    } else if (bce) {
        st = h->bce(host, &io->loss, io->d_pred, io->d_pos, io->d_neg, pred, pos, neg,
                    io->pos_ids, io->neg_ids, io->weights, h->cfg.temperature, B, R, r, D,
                    h->work);
    } else if (h->cfg.share_k > 0) {
        share_perm(h, io);
        st = h->share(host, &io->loss, io->d_pred, io->d_pos, io->d_neg, pred, pos, neg,
                      io->pos_ids, io->neg_ids, io->weights, logq, h->perm, h->cfg.share_k,
                      h->cfg.temperature, B, r, D, (float *)h->work);
        // slots past rows r (row_negatives) belong to no row
        if (st == GRM_OK && io->d_neg != NULL && R > B * r)
            memset(io->d_neg + B * r * D, 0, (size_t)((R - B * r) * D) * sizeof *io->d_neg);
    } else {
        st = h->loss(host, &io->loss, io->d_pred, io->d_pos, io->d_neg, pred, pos, neg,
                     io->pos_ids, io->neg_ids, io->weights, logq, h->cfg.in_batch,
                     h->cfg.temperature, B, R, D, h->work);
    }
    if (st == GRM_OK && full)
        note_flops(h, B, ssm_full_flops(B, R, D, 0), ssm_full_flops(B, R, D, 1));
    else if (st == GRM_OK)   /* logits: the target and r (or R, and the batch's) per row */
        note_logits(h, B, (double)B * (double)(1 + (bce || h->cfg.share_k > 0 ? r
                                                    : R + (h->cfg.in_batch ? B - 1 : 0))), D);
    if (st != GRM_OK || !h->cfg.l2norm)
        return st;
    if (io->d_pred != NULL)
        mlp_l2norm_bwd(io->d_pred, io->d_pred, raw_pred, h->norms, B, D);
    if (io->d_pos != NULL)
        mlp_l2norm_bwd(io->d_pos, io->d_pos, raw_pos, h->norms + B, B, D);
    if (io->d_neg != NULL && R > 0)
        mlp_l2norm_bwd(io->d_neg, io->d_neg, raw_neg, h->norms + 2 * B, R, D);
    return GRM_OK;
}

grm_status ssm_score_rows(const ssm_head *h, float *rows, int64_t n, int64_t dim)
{
    if (dim != h->dim || n < 0 || (n > 0 && rows == NULL))
        return h->host->errorf(GRM_EINVAL, "head-sampled-softmax: score_rows: %lld rows of "
                               "%lld columns (rows %s); the head was created for %lld",
                               (long long)n, (long long)dim, rows ? "set" : "NULL",
                               (long long)h->dim);
    if (h->cfg.l2norm)
        for (int64_t i = 0; i < n; i++) {
            float norm;
            mlp_l2norm_fwd(rows + i * dim, &norm, rows + i * dim, 1, dim);
        }
    return GRM_OK;
}

int ssm_rows_in_place(const ssm_head *h)
{
    return h->cfg.share_k >= 1 && h->cfg.loss == SSM_LOSS_SOFTMAX
           && h->cfg.catalog == SSM_CATALOG_SAMPLED && !h->cfg.neg_fp16;
}

grm_status ssm_loss_in_place(ssm_head *h, grm_loss_io *io)
{
    const grm_host_api *host = h->host;
    grm_status st = check_io(host, "head-sampled-softmax", io);
    if (st != GRM_OK)
        return st;
    const int64_t B = io->rows, R = io->nneg, D = io->dim, N = io->nitems;
    const int train = io->d_pred != NULL;
    if (D != h->dim)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: pred has %lld columns, "
                            "the head was created for %lld", (long long)D, (long long)h->dim);
    if (R < 0 || N < 0 || (B > 0 && (io->pred == NULL || io->pos_slots == NULL))
        || (R > 0 && io->neg_slots == NULL) || (train && io->d_item_rows == NULL))
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: item_rows needs pred, "
                            "pos_slots, neg_slots%s, nneg >= 0 and nitems >= 0",
                            train ? " and d_item_rows" : "");
    const double *logq = NULL;
    int64_t r = 0;
    if ((st = step_logq(h, io, &logq)) != GRM_OK || (st = step_r(h, B, R, &r)) != GRM_OK)
        return st;
    for (int64_t i = 0; i < B + B * r; i++) {
        const int64_t k = i < B ? io->pos_slots[i] : io->neg_slots[i - B];
        if (k < 0 || k >= N)
            return host->errorf(GRM_EINVAL, "head: item slot %lld (%s position %lld) outside "
                                "[0, %lld)", (long long)k, i < B ? "target" : "negative",
                                (long long)(i < B ? i : i - B), (long long)N);
    }
    const int64_t k = h->cfg.share_k;
    const int64_t fl = ssm_tok_work_floats(B, N, k, r, D, host->num_threads());
    st = grow(h, (void **)&h->work, &h->work_cap, (fl + 1) / 2, sizeof(double));
    if (st == GRM_OK && k > 1)
        st = grow(h, (void **)&h->perm, &h->perm_cap, B, sizeof(int64_t));
    if (st == GRM_OK && train)
        st = grow(h, (void **)&h->drows, &h->drows_cap, N * D, sizeof(float));
    if (st == GRM_OK && h->cfg.l2norm)
        st = grow(h, (void **)&h->unit, &h->unit_cap, (N + B) * D, sizeof(float));
    if (st == GRM_OK && h->cfg.l2norm)
        st = grow(h, (void **)&h->norms, &h->norms_cap, N + B, sizeof(float));
    if (st != GRM_OK)
        return st;
    const float *pred = io->pred, *rows = io->item_rows;   /* [B, D], [N, D] */
    if (h->cfg.l2norm) {
        // each unique row normalized once, however many slots name it; its gradient is
        // the sum over them, taken back through the normalization once
        mlp_l2norm_fwd(h->unit, h->norms, rows, N, D);
        mlp_l2norm_fwd(h->unit + N * D, h->norms + N, pred, B, D);
        rows = h->unit;
        pred = h->unit + N * D;
    }
    if (k > 1)
        share_perm(h, io);
    st = h->tok(host, &io->loss, io->d_pred, train ? h->drows : NULL, pred, rows, N,
                io->pos_slots, io->neg_slots, io->pos_ids, io->neg_ids, io->weights, logq,
                k > 1 ? h->perm : NULL, k, h->cfg.temperature, B, r, D, (float *)h->work);
    if (st == GRM_OK)
        note_logits(h, B, (double)B * (double)(1 + r), D);
    if (st != GRM_OK || !train)
        return st;
    if (h->cfg.l2norm) {
        mlp_l2norm_bwd(io->d_pred, io->d_pred, io->pred, h->norms + N, B, D);
        mlp_l2norm_bwd(h->drows, h->drows, io->item_rows, h->norms, N, D);
    }
    const float s = grm_loss_io_grad_scale(io);
    head_scale(io->d_pred, B * D, s);
    for (int64_t i = 0; i < N * D; i++) io->d_item_rows[i] += s * h->drows[i];
    return GRM_OK;
}

/* Build (or reuse) the cumulative popularity table counts[i]^alpha of `catalog`. */
static grm_status popularity_table(ssm_head *h, const grm_catalog *catalog)
{
    const grm_host_api *host = h->host;
    if (h->cdf != NULL && h->cdf_n == catalog->n && h->cdf_ids == catalog->ids
        && h->cdf_counts == catalog->counts)
        return GRM_OK;
    if (catalog->counts == NULL)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: negatives: sampler = "
                            "popularity needs catalog counts, but catalog->counts is NULL; "
                            "use sampler = uniform");
    double *cdf = malloc((size_t)catalog->n * sizeof *cdf);
    if (cdf == NULL)
        return host->errorf(GRM_ENOMEM, "head-sampled-softmax: negatives: cannot allocate "
                            "the popularity table for %lld items", (long long)catalog->n);
    double acc = 0;
    for (int64_t i = 0; i < catalog->n; i++) {
        if (catalog->counts[i] < 0) {
            free(cdf);
            return host->errorf(GRM_EINVAL, "head-sampled-softmax: negatives: catalog "
                                "count %lld of item %lld (index %lld) is negative",
                                (long long)catalog->counts[i], (long long)catalog->ids[i],
                                (long long)i);
        }
        acc += pow((double)catalog->counts[i], h->cfg.alpha);
        cdf[i] = acc;
    }
    if (!(acc > 0) || !isfinite(acc)) {
        free(cdf);
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: negatives: the popularity "
                            "weights of %lld items sum to %g; some count must be positive",
                            (long long)catalog->n, acc);
    }
    free(h->cdf);
    h->cdf = cdf;
    h->cdf_n = catalog->n;
    h->cdf_ids = catalog->ids;
    h->cdf_counts = catalog->counts;
    return GRM_OK;
}

/* The catalog's ids in increasing order with p_data and p_s (mixed negatives), rebuilt when
 * the catalog changes. cdf: the popularity table, or NULL (uniform). */
static grm_status mix_table(ssm_head *h, const grm_catalog *catalog, const double *cdf)
{
    const grm_host_api *host = h->host;
    if (h->mix_ids != NULL && h->mix_src == catalog->ids && h->mix_n == catalog->n)
        return GRM_OK;
    if (catalog->counts == NULL)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: negatives: logq with in_batch "
                            "corrects the in-batch negatives by their popularity, but "
                            "catalog->counts is NULL; set logq = false or in_batch = false");
    const int64_t n = catalog->n;
    int64_t *pairs = malloc((size_t)(2 * n) * sizeof *pairs);   /* (id, index), by id */
    int64_t *ids = malloc((size_t)n * sizeof *ids);
    double *pd = malloc((size_t)n * sizeof *pd), *ps = malloc((size_t)n * sizeof *ps);
    if (pairs == NULL || ids == NULL || pd == NULL || ps == NULL) {
        free(pairs);
        free(ids);
        free(pd);
        free(ps);
        return host->errorf(GRM_ENOMEM, "head-sampled-softmax: negatives: cannot allocate "
                            "the mixed-negatives table for %lld items", (long long)n);
    }
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        pairs[2 * i] = catalog->ids[i];
        pairs[2 * i + 1] = i;
        total += (double)catalog->counts[i];
    }
    qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_id);
    const double inv = total > 0 ? 1.0 / total : 1.0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = pairs[2 * i + 1];
        ids[i] = pairs[2 * i];
        pd[i] = (double)catalog->counts[k] * inv;
        ps[i] = cdf == NULL ? 1.0 / (double)n
                            : (cdf[k] - (k > 0 ? cdf[k - 1] : 0.0)) / cdf[n - 1];
    }
    free(pairs);
    free(h->mix_ids);
    free(h->mix_pd);
    free(h->mix_ps);
    h->mix_ids = ids;
    h->mix_pd = pd;
    h->mix_ps = ps;
    h->mix_n = n;
    h->mix_src = catalog->ids;
    h->mix_floor = inv;
    return GRM_OK;
}

grm_status ssm_negatives(ssm_head *h, int64_t *ids, int64_t *n, int64_t max,
                         const grm_catalog *catalog, uint64_t seed)
{
    const grm_host_api *host = h->host;
    if (n == NULL)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: negatives: n is NULL");
    *n = 0;
    if (h->cfg.catalog == SSM_CATALOG_ALL) {
        // every item, in the catalog's order: the trainer looks up and updates every row
        if (catalog == NULL || catalog->n <= 0 || catalog->ids == NULL)
            return host->errorf(GRM_EINVAL, "head-sampled-softmax: negatives: the catalog is "
                                "empty; catalog = all has no items to score");
        if (ids == NULL || catalog->n > max)
            return host->errorf(GRM_EINVAL, "head-sampled-softmax: catalog = all: the "
                                "catalog's %lld items exceed the %lld negatives a step can "
                                "hold; use catalog = sampled with negatives and logq = true",
                                (long long)catalog->n, (long long)max);
        memcpy(ids, catalog->ids, (size_t)catalog->n * sizeof *ids);
        h->ndrawn = catalog->n;
        *n = catalog->n;
        return GRM_OK;
    }
    const int64_t want = h->cfg.negatives < max ? h->cfg.negatives : max;
    if (want <= 0) {
        h->ndrawn = 0;
        return GRM_OK;
    }
    if (ids == NULL)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: negatives: ids is NULL");
    if (catalog == NULL || catalog->n <= 0 || catalog->ids == NULL)
        return host->errorf(GRM_EINVAL, "head-sampled-softmax: negatives: the catalog is "
                            "empty; there are no items to draw negatives from");
    const double *cdf = NULL;
    if (h->cfg.sampler == SSM_SAMPLER_POPULARITY) {
        grm_status st = popularity_table(h, catalog);
        if (st != GRM_OK)
            return st;
        cdf = h->cdf;
    }
    ssm_draw(h->drawn_idx, want, cdf, catalog->n, seed);
    // logQ = log of the slot's expected count, R * p(item) (TF sampled_softmax_loss
    // with a with-replacement sampler); it makes sum_j exp(s_j - logQ_j) estimate the
    // partition function over the whole catalog (Yi et al. 2019)
    const int mixed = h->cfg.logq && h->cfg.in_batch;
    if (mixed) {
        grm_status st = mix_table(h, catalog, cdf);
        if (st != GRM_OK)
            return st;
    }
    const double logR = log((double)want), pu = 1.0 / (double)catalog->n;
    const double logqu = logR + log(pu);   /* uniform: one value (a step may draw 10^5) */
    for (int64_t j = 0; j < want; j++) {
        const int64_t k = h->drawn_idx[j];
        double p;
        if (cdf == NULL)
            p = pu;
        else
            p = (cdf[k] - (k > 0 ? cdf[k - 1] : 0.0)) / cdf[catalog->n - 1];
        ids[j] = catalog->ids[k];
        h->drawn_ids[j] = ids[j];
        h->drawn_logq[j] = cdf == NULL ? logqu : logR + log(p);
        h->drawn_ps[j] = p;
        h->drawn_pd[j] = mixed ? (double)catalog->counts[k] * h->mix_floor : 0.0;
    }
    h->ndrawn = want;
    *n = want;
    return GRM_OK;
}

/* ---- the parameters of head-sampled-softmax (plugin.c; also the 1.4 test fixture) ---- */

const grm_param_decl ssm_params_decl[] = {
    GRM_PARAM_DECL_INT(ssm_config, negatives, "128", GRM_PARAM_RANGE(0, 1 << 20),
                       "sampled negatives per step, shared by the batch"),
    GRM_PARAM_DECL_ENUM(ssm_config, sampler, "uniform", "uniform|popularity",
                        "draw items uniformly or with probability proportional to count^alpha"),
    GRM_PARAM_DECL_DOUBLE(ssm_config, alpha, "1.0", GRM_PARAM_RANGE(0, 2),
                          "popularity exponent of the popularity sampler"),
    GRM_PARAM_DECL_DOUBLE(ssm_config, temperature, "1.0", GRM_PARAM_RANGE(1e-6, 1e6),
                          "logits are divided by the temperature"),
    GRM_PARAM_DECL_BOOL(ssm_config, in_batch, "true", "other rows' positives are negatives too"),
    GRM_PARAM_DECL_BOOL(ssm_config, logq, "false",
                        "subtract log Q (expected count) from sampled-negative logits; with "
                        "in_batch, from in-batch ones too (mixed negatives, Yang et al. 2020)"),
    GRM_PARAM_DECL_ENUM(ssm_config, impl, "auto", "blas|ref|auto",
                        "loss implementation: OpenBLAS GEMMs or plain loops"
                        " (auto: ref on [pipeline] device = ref, else the fast path)"),
    GRM_PARAM_DECL_BOOL(ssm_config, l2norm, "false",
                        "L2-normalize query and item rows (cosine logits; use a small "
                        "temperature such as 0.05)"),
    GRM_PARAM_DECL_INT(ssm_config, share_k, "0", GRM_PARAM_RANGE(0, 1 << 16),
                       "0: negatives shared by the batch; k >= 1: each row owns nneg/rows "
                       "negatives, shared in shuffled groups of k (TurboGR eq. 2)"),
    GRM_PARAM_DECL_BOOL(ssm_config, neg_fp16, "false",
                        "store negatives in FP16 and read them back as fp32 (TurboGR §4.3.2)"),
    GRM_PARAM_DECL_ENUM(ssm_config, loss, "softmax", "softmax|bce",
                        "softmax: cross-entropy of the positive against the negatives; bce: -log "
                        "sigmoid(s+) - sum log sigmoid(-s-) per row (SASRec, Kang & McAuley 2018 "
                        "§III-E); bce needs in_batch = false, logq = false, share_k 0 or 1"),
    GRM_PARAM_DECL_INT(ssm_config, row_negatives, "0", GRM_PARAM_RANGE(0, 1 << 20),
                       "with share_k >= 1: 0: each row owns nneg/rows negatives (must divide); "
                       "r >= 1: each row owns r, nneg >= rows r, the rest unused (set "
                       "negatives = batch_size x max_seq_len x r for token rows)"),
    GRM_PARAM_DECL_ENUM(ssm_config, catalog, "sampled", "sampled|all",
                        "sampled: the positive against the drawn (and in-batch) negatives; all: "
                        "cross-entropy over every item of the catalog, in blocks (negatives, "
                        "sampler, in_batch, logq and share_k unused; set in_batch = false)"),
    GRM_PARAM_DECL_DOUBLE(ssm_config, label_smoothing, "0", GRM_PARAM_RANGE(0, 0.999),
                          "catalog = all: target (1 - eps) on the positive plus eps / K on "
                          "each of the K items (torch cross_entropy's label_smoothing)"),
    GRM_PARAM_DECL_END
};

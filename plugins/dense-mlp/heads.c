/* plugins/dense-mlp/heads.c - the two heads of dense-mlp.so: dense-bce (multi-task
 * binary cross-entropy on logits) and dense-sampled-softmax (retrieval loss over sampled
 * and in-batch negatives, with the negative sampler). Both pass rows through unchanged
 * (out_dim = in_dim); the numerics are in heads_ref.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

/* The grm_loss_io fields this code reads exist (the struct is 1.0-sized or larger). */
static grm_status check_io(const grm_host_api *host, const char *who, const grm_loss_io *io)
{
    if (io == NULL)
        return host->errorf(GRM_EINVAL, "%s: loss: io is NULL", who);
    if (io->struct_size < sizeof(grm_loss_io))
        return host->errorf(GRM_EINVAL, "%s: loss: io->struct_size %u is smaller than the "
                            "1.0 grm_loss_io (%zu); set it to sizeof(grm_loss_io)", who,
                            (unsigned)io->struct_size, sizeof(grm_loss_io));
    if (io->rows < 0)
        return host->errorf(GRM_EINVAL, "%s: loss: io->rows %lld is negative", who,
                            (long long)io->rows);
    return GRM_OK;
}

/* ---- dense-bce ---- */

struct bce_head {
    const grm_host_api *host;
    int64_t dim;
};

grm_status bce_create(const grm_host_api *host, int64_t in_dim, bce_head **out)
{
    *out = NULL;
    if (in_dim < 1)
        return host->errorf(GRM_EINVAL, "dense-bce: create: in_dim %lld must be >= 1",
                            (long long)in_dim);
    bce_head *h = calloc(1, sizeof *h);
    if (h == NULL)
        return host->errorf(GRM_ENOMEM, "dense-bce: create: out of memory");
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
    grm_status st = check_io(h->host, "dense-bce", io);
    if (st != GRM_OK)
        return st;
    if (io->ntasks < 1 || io->dim != io->ntasks)
        return h->host->errorf(GRM_EINVAL, "dense-bce: loss: io->dim %lld and io->ntasks %d "
                               "must be equal and >= 1 (pred is [B, T] logits)",
                               (long long)io->dim, (int)io->ntasks);
    if (io->dim != h->dim)
        return h->host->errorf(GRM_EINVAL, "dense-bce: loss: pred has %lld columns, the "
                               "head was created for %lld", (long long)io->dim,
                               (long long)h->dim);
    if (io->rows > 0 && (io->pred == NULL || io->labels == NULL))
        return h->host->errorf(GRM_EINVAL, "dense-bce: loss: io->%s is NULL; BCE needs "
                               "logits and labels", io->pred == NULL ? "pred" : "labels");
    return bce_loss_ref(h->host, &io->loss, io->d_pred, io->scores, io->pred, io->labels,
                        io->weights, io->rows, io->ntasks);
}

/* ---- dense-sampled-softmax ---- */

struct ssm_head {
    const grm_host_api *host;
    ssm_config cfg;             /* copy */
    int64_t dim;

    ssm_loss_fn loss;           /* picked at create from cfg.impl (STYLE.md §7) */
    double *work;               /* owned: [work_cap], see ssm_work_doubles */
    int64_t work_cap;

    /* popularity table, cached per catalog (ids, counts, n) */
    double *cdf;                /* owned: [cdf_n] cumulative counts^alpha */
    int64_t cdf_n;
    const int64_t *cdf_ids, *cdf_counts;   /* identity of the cached catalog */

    /* the last draw, for the logQ correction */
    int64_t *drawn_idx;         /* owned: [negatives] catalog indices, then reused */
    int64_t *drawn_ids;         /* owned: [negatives] ids */
    double *drawn_logq;         /* owned: [negatives] log expected count of each slot */
    int64_t ndrawn;             /* -1: nothing drawn yet */
};

grm_status ssm_create(const grm_host_api *host, const ssm_config *cfg, int64_t in_dim,
                      ssm_head **out)
{
    grm_status st;
    *out = NULL;
    if (in_dim < 1)
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: create: in_dim %lld must be "
                            ">= 1", (long long)in_dim);
    if (!(cfg->temperature > 0))
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: temperature: %g must be > 0",
                            cfg->temperature);
    if (cfg->negatives < 0 || cfg->negatives > (1 << 20))
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: negatives: %lld out of range "
                            "0..%d", (long long)cfg->negatives, 1 << 20);
    if (!(cfg->alpha >= 0 && cfg->alpha <= 2))
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: alpha: %g out of range "
                            "[0, 2]", cfg->alpha);
    ssm_head *h = calloc(1, sizeof *h);
    if (h == NULL)
        return host->errorf(GRM_ENOMEM, "dense-sampled-softmax: create: out of memory");
    h->host = host;
    h->cfg = *cfg;
    h->dim = in_dim;
    h->ndrawn = -1;
    h->loss = cfg->impl == MLP_IMPL_REF ? ssm_loss_ref : ssm_loss_cpu;
    if (cfg->negatives > 0) {
        const size_t n = (size_t)cfg->negatives;
        h->drawn_idx = malloc(n * sizeof *h->drawn_idx);
        h->drawn_ids = malloc(n * sizeof *h->drawn_ids);
        h->drawn_logq = malloc(n * sizeof *h->drawn_logq);
        if (h->drawn_idx == NULL || h->drawn_ids == NULL || h->drawn_logq == NULL) {
            st = host->errorf(GRM_ENOMEM, "dense-sampled-softmax: create: cannot allocate "
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
    free(h->cdf);
    free(h->drawn_idx);
    free(h->drawn_ids);
    free(h->drawn_logq);
    free(h);
}

int64_t ssm_dim(const ssm_head *h)
{
    return h->dim;
}

grm_status ssm_loss(ssm_head *h, grm_loss_io *io)
{
    const grm_host_api *host = h->host;
    grm_status st = check_io(host, "dense-sampled-softmax", io);
    if (st != GRM_OK)
        return st;
    const int64_t B = io->rows, R = io->nneg, D = io->dim;
    if (D != h->dim)
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: loss: pred has %lld columns, "
                            "the head was created for %lld", (long long)D, (long long)h->dim);
    if (R < 0)
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: loss: io->nneg %lld is "
                            "negative", (long long)R);
    if (B > 0 && (io->pred == NULL || io->pos == NULL))
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: loss: io->%s is NULL; the "
                            "retrieval loss needs query and positive rows",
                            io->pred == NULL ? "pred" : "pos");
    if (R > 0 && io->neg == NULL)
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: loss: io->neg is NULL with "
                            "io->nneg = %lld", (long long)R);
    const double *logq = NULL;
    if (h->cfg.logq && R > 0) {
        // Q of each slot is only known for negatives this head drew itself
        int same = h->ndrawn == R && io->neg_ids != NULL;
        for (int64_t j = 0; same && j < R; j++)
            same = io->neg_ids[j] == h->drawn_ids[j];
        if (!same)
            return host->errorf(GRM_EINVAL, "dense-sampled-softmax: loss: logq needs the "
                                "negatives drawn by this head's negatives op, but io->neg_ids "
                                "differ from the last draw; set logq = false to use other "
                                "negatives");
        logq = h->drawn_logq;
    }
    const int64_t need = ssm_work_doubles(B, R);
    if (need > h->work_cap) {
        // grows to the largest batch seen, then stays
        double *w = malloc((size_t)need * sizeof *w);
        if (w == NULL)
            return host->errorf(GRM_ENOMEM, "dense-sampled-softmax: loss: cannot allocate "
                                "%lld doubles of logits", (long long)need);
        free(h->work);
        h->work = w;
        h->work_cap = need;
    }
    return h->loss(host, &io->loss, io->d_pred, io->d_pos, io->d_neg, io->pred, io->pos,
                        io->neg, io->pos_ids, io->neg_ids, io->weights, logq,
                        h->cfg.in_batch, h->cfg.temperature, B, R, D, h->work);
}

/* Build (or reuse) the cumulative popularity table counts[i]^alpha of `catalog`. */
static grm_status popularity_table(ssm_head *h, const grm_catalog *catalog)
{
    const grm_host_api *host = h->host;
    if (h->cdf != NULL && h->cdf_n == catalog->n && h->cdf_ids == catalog->ids
        && h->cdf_counts == catalog->counts)
        return GRM_OK;
    if (catalog->counts == NULL)
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: negatives: sampler = "
                            "popularity needs catalog counts, but catalog->counts is NULL; "
                            "use sampler = uniform");
    double *cdf = malloc((size_t)catalog->n * sizeof *cdf);
    if (cdf == NULL)
        return host->errorf(GRM_ENOMEM, "dense-sampled-softmax: negatives: cannot allocate "
                            "the popularity table for %lld items", (long long)catalog->n);
    double acc = 0;
    for (int64_t i = 0; i < catalog->n; i++) {
        if (catalog->counts[i] < 0) {
            free(cdf);
            return host->errorf(GRM_EINVAL, "dense-sampled-softmax: negatives: catalog "
                                "count %lld of item %lld (index %lld) is negative",
                                (long long)catalog->counts[i], (long long)catalog->ids[i],
                                (long long)i);
        }
        acc += pow((double)catalog->counts[i], h->cfg.alpha);
        cdf[i] = acc;
    }
    if (!(acc > 0) || !isfinite(acc)) {
        free(cdf);
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: negatives: the popularity "
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

grm_status ssm_negatives(ssm_head *h, int64_t *ids, int64_t *n, int64_t max,
                         const grm_catalog *catalog, uint64_t seed)
{
    const grm_host_api *host = h->host;
    if (n == NULL)
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: negatives: n is NULL");
    *n = 0;
    const int64_t want = h->cfg.negatives < max ? h->cfg.negatives : max;
    if (want <= 0) {
        h->ndrawn = 0;
        return GRM_OK;
    }
    if (ids == NULL)
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: negatives: ids is NULL");
    if (catalog == NULL || catalog->n <= 0 || catalog->ids == NULL)
        return host->errorf(GRM_EINVAL, "dense-sampled-softmax: negatives: the catalog is "
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
    const double logR = log((double)want);
    for (int64_t j = 0; j < want; j++) {
        const int64_t k = h->drawn_idx[j];
        double p;
        if (cdf == NULL)
            p = 1.0 / (double)catalog->n;
        else
            p = (cdf[k] - (k > 0 ? cdf[k - 1] : 0.0)) / cdf[catalog->n - 1];
        ids[j] = catalog->ids[k];
        h->drawn_ids[j] = ids[j];
        h->drawn_logq[j] = logR + log(p);
    }
    h->ndrawn = want;
    *n = want;
    return GRM_OK;
}

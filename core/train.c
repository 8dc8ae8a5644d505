/* core/train.c - the CPU training loop of DESIGN.md §5 for retrieval pipelines, and
 * full-ranking evaluation.
 *
 * One step: sample B (user, position) examples -> for each feature, the ids of the
 * history window -> per physical table, one segment unique over the fused ids of all its id
 * spaces (FusedRec §3; each id looked up once and its gradient summed once, MTGRBoost §4.3's
 * first stage), encoded as merged keys (MTGRBoost §4.2) -> store lookup -> pooling ->
 * dense stack -> head (sampled softmax: positives and negatives are rows of the item
 * table) -> backward -> dense optimizer on every parameter, sparse optimizer on touched
 * rows only -> periodic evaluation and checkpoint.
 *
 * Several ranks (MTGRBoost §3 hybrid parallelism): every rank plans the same global batches
 * and trains its contiguous slice of each; rows of every physical table are sharded over the
 * ranks by a hash of the key and looked up and updated through core/dist.c (two-stage dedup,
 * MTGRBoost §4.3), dense gradients are allreduced, and each batch's gradients are weighted by
 * its share of the global step's samples (MTGRBoost §5.1), so N ranks take the steps of one.
 * With [train] input = sharded or stream each rank plans (or draws) its own batches instead,
 * and a step is every rank's next batch.
 *
 * Everything is a pure function of (seed, step): example order per epoch, negatives and
 * dropout are seeded from them, and parallel loops write disjoint outputs, so a run
 * resumed from a checkpoint continues exactly as the uninterrupted run would have. */
#include "pipeline.h"
#include "dist.h"
#include "reshard.h"
#include "route.h"

#include <grm/rng.h>

#include <cblas.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define CPU ((grm_device){ GRM_DEVICE_CPU, 0 })

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- one batch's input, assembled ahead of its compute ----
 * Everything a batch needs from the data before the store is touched: its samples, every
 * feature's ids, the targets, and per physical table the ids of all the id spaces it holds,
 * gathered id space by id space (the segments of a fused group), deduplicated by segment
 * unique (FusedRec §3, Fig. 5: equal ids of different id spaces stay apart) and encoded as
 * keys (i << (63 - k)) | id (MTGRBoost §4.2 eq. 8); every gathered id then names its unique
 * row through inv (FusedRec's I_u). With [train] prefetch = N a data thread fills a ring of
 * N + 1 such batches ahead of the trainer (MTGRBoost §3 prefetch; TurboGR's pipelined
 * stages), so this work overlaps the compute of the batches before.
 * Negatives are the exception: a head keeps the state of its last draw for its loss (logQ),
 * so the trainer draws them just before the batch computes and merges them into the item
 * table's unique keys through imap, which the data thread builds. */

typedef struct batch_tab {
    int64_t n;            /* ids gathered (negatives not counted) */
    int64_t nu;           /* unique keys, merged negatives included */
    int64_t *ids;         /* [cap] gathered raw ids, id space major */
    int64_t *segoff;      /* [nspace + 1] segment offsets into ids */
    int64_t *counts;      /* [nspace] unique ids per segment */
    int64_t *inv;         /* [cap] unique index of ids[j] */
    int64_t *keys;        /* [cap] the unique keys, first-seen order, then new negatives */
    int32_t *ufeat;       /* [cap] id space (segment) of each key: FusedRec's category */
} batch_tab;

typedef struct batch {
    int64_t g;            /* global batch index, 1-based (0: evaluation) */
    int64_t b;            /* this rank's samples */
    int64_t rows;         /* rows of the dense stack: samples, or a sequence model's tokens */
    int64_t tokens;       /* sample_tokens summed over the samples */
    double step_rows;     /* rows of the whole step (all ranks, all batches): the weights */
    int64_t *ex;          /* [B] training examples (indices of sample_tokens) */
    int64_t *users;       /* [B] dataset user index (ranking: row index) */
    int64_t *hist_end;    /* [B] history end (exclusive absolute item index) */
    float *labels;        /* [B, T] ranking labels */
    int64_t *pos_ids;     /* [RB] the targets: next item of each sample or token */
    int64_t *tok_src;     /* [RB] sequence model: absolute item index of each token */
    int64_t *tok_times;   /* [RB] sequence model: its timestamp, when the data has them */
    int64_t **fids;       /* [nfeatures][B * window] gathered raw ids */
    int64_t **foff;       /* [nfeatures][B + 1] */
    int64_t *fbase;       /* [nfeatures] where feature i's ids sit in its table's ids */
    int64_t pos_base;     /* where the targets sit in the item table's ids */
    int64_t nneg;         /* negatives drawn for the batch */
    int64_t *neg_ids;     /* [R] */
    int64_t *neg_slot;    /* [R] unique row of each negative in the item table */
    int64_t *imap;        /* [mcap] item table keys -> unique index + 1 (open addressing) */
    int64_t mcap;         /* power of two */
    batch_tab *tab;       /* [nphys] */
    /* input = stream: each sample's row is row users[k] of piece src[k] (not of the
     * dataset) when `streamed`; `done`: this rank's stream is used up (b = 0); `pass`: the
     * pass the reader was in when the batch was drawn */
    struct piece **src;   /* [B] */
    int streamed, done;
    int64_t pass;
    grm__sparse_work work;
    grm_status st;        /* the data thread's failure, raised by the trainer */
    char err[1024];
} batch;

/* ---- per physical table: the looked-up rows and their gradients ---- */

typedef struct table_ws {
    int32_t dim;
    int32_t nspace;       /* id spaces held: segments of the fused group */
    int64_t cap;          /* most ids gathered per batch, negatives included */
    float *rows;          /* [cap, dim] looked-up rows of the batch's keys */
    float *grads;         /* [cap, dim] summed row gradients */
    /* gradient accumulation (accumulate > 1): keys and gradients of the step's batches,
     * aggregated by key before the one update */
    int64_t acap, an;
    int64_t *akeys;       /* [acap] */
    float *agrads;        /* [acap, dim] */
    int64_t *ainv;        /* [acap] */
    int64_t *ukeys;       /* [acap] */
    float *ugrads;        /* [acap, dim] */
} table_ws;

/* The data thread and its ring of batches. Batch g lives in ring[(g - 1) % nslots]; the data
 * thread assembles g once g - nslots has been released by the trainer. */
typedef struct prefetcher {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running;          /* the thread exists */
    int stop;             /* asked to stop */
    batch *ring;          /* [nslots] */
    int32_t nslots;
    int64_t next;         /* next batch to assemble */
    int64_t last;         /* last batch of the run */
    int64_t ready;        /* batches up to here are assembled (or failed) */
    int64_t released;     /* the trainer is done with batches up to here */
    double busy_s;        /* seconds the data thread spent assembling */
    double step_rows;     /* cache: rows of step cached_step */
    int64_t cached_step;
} prefetcher;

/* ---- input = stream: the shuffle buffer (MTGRBoost §3: input read beside training) ----
 * The data thread reads this rank's stream piece by piece (one reader chunk, transformed and
 * split, core/data.c) into a buffer of training rows, and draws each batch's samples from it
 * at random: a shuffle buffer, where a row waits among shuffle_buffer others. So reading,
 * decompression, transforms and batch assembly of the coming batches all overlap the compute
 * of the current one, and memory holds the buffer, not the input. A piece is freed once its
 * last row is drawn. The buffer runs on across passes (epochs); this rank's input is used up
 * when the last pass is read and the buffer is empty. Batch g is a pure function of (data,
 * shard, seed, buffer size, batch size), so resume draws batches 1 .. g - 1 again without
 * assembling them and goes on exactly as the uninterrupted run. */

typedef struct piece {
    grm__dataset *ds;
    int64_t left;         /* its training rows not yet drawn */
} piece;

typedef struct stream_src {
    struct srow {
        piece *pc;
        int64_t row;
    } *buf;               /* [cap] the rows waiting, buf[0 .. n) */
    int64_t n, cap;
    int64_t want;         /* rows held before each draw (while the input lasts) */
    uint64_t rng;
    int64_t drawn;        /* batches drawn so far */
    int64_t step_rows;    /* this rank's rows of the step being drawn */
    int ended;            /* the last pass is read */
    int64_t pass;         /* the pass being read */
    double read_s;        /* seconds reading, transforming and splitting pieces */
} stream_src;

/* ---- dense parameters with their optimizer state ---- */

typedef struct dparam {
    char *name;               /* owned: "dense.0.layer0.weight" */
    float *value, *grad;      /* borrowed from the block */
    int64_t numel;
    float *state;             /* owned: [state_floats * numel] */
    int64_t steps;
    grm_tensor shape;         /* value's tensor descriptor */
} dparam;

typedef struct trainer {
    grm__pipeline *p;
    grm__dataset *ds;
    const grm__run_opts *opts;
    const grm_emb_ops *eops;
    const grm_dense_ops *hops;
    const grm_opt_ops *dops;
    void *dopt;
    int32_t item_table;       /* the id space of the candidate items */
    int32_t item_phys;        /* its physical table */
    int32_t item_seg;         /* its segment (FusedRec category) in that table's fused group */
    int64_t B;                /* buffer samples: max(batch_size, eval_batch) */
    int64_t RB;               /* buffer rows of the dense stack: B, or B * window tokens */
    /* sequence model ([feature.*] pooling = none): a sample is a user's jagged token
     * sequence; every token predicts the next item (training), the last token's output
     * is the query (evaluation) */
    int seqmode;
    int64_t nex;              /* training samples: (user, position) pairs or users */
    /* [train] input = sharded on several ranks (core/route.h): the samples are this rank's
     * own and so is the batch plan; a step is every rank's next batch */
    int sharded;
    int64_t bsz;              /* samples per batch on this rank: batch_size, or its share */
    int64_t nex_all;          /* training samples of all ranks */
    int64_t *seq_users;       /* [nex] seqmode: users with at least two training items */
    float *queries;           /* [B, D] seqmode evaluation: last-token outputs */
    /* ranking on a token list (pooling = none, [train] sequence_blocks = S, MTGRBoost §2):
     * blocks [0, S) run on the rows' jagged tokens, block S (or the head) on each row's
     * last token output beside the pooled features */
    int seqrank;
    int32_t S;
    int64_t tok_dim;          /* features of block S - 1's token output */
    float *tacts, *dtacts;    /* [RB, tok_dim] that output and its gradient */
    int64_t tokens;           /* tokens trained on so far, for throughput */
    int64_t R;                /* most negatives per step: capacity of the neg buffers */
    table_ws *ws;             /* [nphys] */
    batch eb;                 /* the evaluation batch (and the training one with prefetch 0) */
    prefetcher pf;            /* the data thread (prefetch > 0) */
    int64_t din;              /* sum of feature widths */
    float *ptmp;              /* [B, widest feature] one feature's pooled block */
    float *gin;               /* [most ids of a feature, widest dim] gradient per gathered id */
    int64_t *cat_keys;        /* [C] keys of the catalog items */
    grm__sparse_work work;
    /* several ranks */
    int32_t rank, nranks;
    grm__dist *dist;          /* model-parallel rows (NULL on one rank) */
    float *gbuf;              /* [gnumel] dense gradients packed for one allreduce */
    int64_t gnumel;
    grm__run_opts lopts;      /* the run's options; quiet on ranks other than 0 */
    char ckdir[4096];         /* checkpoint directory of this rank ("" for none) */
    int32_t ck_other;         /* [checkpoint] dir also holds checkpoints of this many ranks */
    grm__dist_stats dlast[2]; /* dist totals (lookup, update) at the last logged step */
    int64_t dstep;            /* that step */
    float **acts;             /* [ndense + 2]: x, block outputs, head output; [B, dim_i] */
    float **dacts;            /* same shapes */
    int64_t *dims;            /* [ndense + 2] */
    float *pos_rows, *neg_rows, *d_pos, *d_neg;
    dparam *params;
    int32_t nparams;
    int32_t state_floats;
    /* [train] input = stream (ranking): ds holds only the held-out rows read so far, taken
     * afresh before each evaluation; the training rows come through src on the data thread */
    grm__stream *stream;
    stream_src src;
    int ended;                /* every rank's stream is used up: the run is over */
    int64_t step_pass;        /* the pass of the last step's batches (the most of any rank) */
    int stream_full;          /* ds holds every held-out row (pass 0 read on every rank) */
    int has_times;            /* the samples carry timestamps (time_column) */
    int64_t *perm;            /* [nex] current epoch's order */
    int64_t perm_epoch;
    /* the epoch's batches: batch i is perm[bstart[i] .. bstart[i + 1]) */
    int64_t *bstart;          /* [nex + 1] */
    int64_t nb;               /* batches of perm_epoch */
    int64_t *tok_cum;         /* [nex + 1] tokens of perm[0 .. i) */
    int64_t *ep_cum;          /* [nep + 1] batches before epoch e */
    int64_t nep;
    int64_t target_tokens;    /* batching = tokens: N of Algorithm 1 */
    int64_t step_tokens;      /* tokens of the last step, all ranks */
    int64_t my_tokens, my_samples;   /* this rank's tokens and samples of the last step */
    int64_t step;             /* steps done */
    int64_t total_steps, steps_per_epoch;
    int64_t total_mb;         /* batches of the whole run (0: [train] steps decides) */
    int64_t mb_per_epoch;     /* batches of epoch 0 (sharded: the most of any rank's) */
    int64_t mb_local;         /* batches of this rank's epoch 0 */
    grm__metrics *metrics;
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    int loop_ok;
    volatile int stop;
    double t_batch, t_lookup, t_fwd, t_bwd, t_opt;
    double t_read, t_plan, t_ckpt, t_eval;   /* --profile: seconds in each stage */
    double t_wait;            /* seconds the trainer waited for the data thread */
    double t_read0;           /* input = stream: src.read_s when step 1 began */
    double read_most[2];      /* the slowest rank's t_read, the largest rank's peak KB */
    int read_logged;          /* read_most is in the metrics */
    /* [train] sparse_async (TurboGR §4.2.2 semi-async sparse): step i's row gradients wait
     * in pend until the lookup of step i + 1 is done, then a sparse thread applies them
     * (the exchange and the row optimizer) while the trainer runs the dense stack */
    int async;
    struct pending {
        int64_t n;            /* unique keys of the step */
        int64_t *keys;        /* [ws cap] */
        float *grads;         /* [ws cap, dim] their summed gradients */
    } *pend;                  /* [nphys] */
    int64_t pend_step;        /* the step pend belongs to (0: nothing pending) */
    pthread_t sthread;
    int srunning;
    grm_status sst;           /* the sparse thread's result, raised at the join */
    char serr[1024];
    double t_async;           /* seconds the trainer waited for the sparse thread */
    /* evaluation */
    float *cat_rows;          /* [C, D] */
    float *scores;            /* [eval_batch, C] */
    int ranking;              /* [train] task = ranking */
    int64_t ckpt_state[7];    /* trainer.state as checkpoints store it */
    double best_score;        /* early stopping: best validation score so far */
    int64_t best_step;        /* its step (0: none yet) */
    int64_t bad_evals;        /* validation runs since it */
} trainer;

/* ---- setup ---- */

static void *xalloc(size_t bytes)
{
    return grm__alloc(CPU, bytes ? bytes : 1, 64);
}

static grm_status create_instances(trainer *t)
{
    grm__pipeline *p = t->p;
    grm_status st;
    const grm_comm_ops *cops = p->comm.plugin->info->ops;
    if ((st = cops->create(p->comm.config.data, &p->comm.inst)) != GRM_OK) return st;
    p->comm_handle = (grm_comm_handle){ cops, p->comm.inst };
    grm__host_set_comm(&p->comm_handle);

    const grm_opt_ops *sops = p->opt_sparse.plugin->info->ops;
    if ((st = sops->create(p->opt_sparse.config.data, &p->opt_sparse.inst)) != GRM_OK) {
        grm_error_prefix("[optimizer.sparse] %s: ", p->opt_sparse.plugin->info->name);
        return st;
    }
    p->sparse_opt = (grm_optimizer){ sops, p->opt_sparse.inst };
    t->dops = p->opt_dense.plugin->info->ops;
    if ((st = t->dops->create(p->opt_dense.config.data, &p->opt_dense.inst)) != GRM_OK) {
        grm_error_prefix("[optimizer.dense] %s: ", p->opt_dense.plugin->info->name);
        return st;
    }
    t->dopt = p->opt_dense.inst;
    const grm_ckpt_ops *kops = p->ckpt.plugin->info->ops;
    if ((st = kops->create(p->ckpt.config.data, &p->ckpt.inst)) != GRM_OK) return st;
    return GRM_OK;
}

static int64_t sample_tokens(const trainer *t, int64_t e);
/* The physical table of feature i. */
static int32_t phys_of(const grm__pipeline *p, int32_t i)
{
    return p->plan->slots[p->features[i].table_idx].table;
}

/* Most ids feature i gathers for one batch. */
static int64_t feature_ids_cap(const trainer *t, int32_t i)
{
    const grm__feature *f = &t->p->features[i];
    int64_t per = f->is_sequence ? f->window : 1;
    if (t->ranking) per = t->ds->fmaxlen[i] < f->window ? t->ds->fmaxlen[i] : f->window;
    if (per < 1) per = 1;
    return t->seqmode ? t->RB : t->B * per;
}

static void batch_fini(const grm__pipeline *p, batch *bt)
{
    for (int32_t i = 0; bt->fids && i < p->nfeatures; i++) grm__free(CPU, bt->fids[i]);
    for (int32_t i = 0; bt->foff && i < p->nfeatures; i++) grm__free(CPU, bt->foff[i]);
    for (int32_t T = 0; bt->tab && T < p->nphys; T++) {
        batch_tab *w = &bt->tab[T];
        void *wb[] = { w->ids, w->segoff, w->counts, w->inv, w->keys, w->ufeat };
        for (size_t i = 0; i < sizeof wb / sizeof *wb; i++) grm__free(CPU, wb[i]);
    }
    void *bufs[] = { bt->ex, bt->users, bt->hist_end, bt->labels, bt->pos_ids, bt->tok_src,
                     bt->tok_times, bt->neg_ids, bt->neg_slot, bt->imap };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) grm__free(CPU, bufs[i]);
    free(bt->src);
    free(bt->fids);
    free(bt->foff);
    free(bt->fbase);
    free(bt->tab);
    grm__sparse_work_fini(&bt->work);
    memset(bt, 0, sizeof *bt);
}

/* The buffers of one batch, sized by setup's capacities (t->ws[].cap, B, RB, R). */
static grm_status batch_init(trainer *t, batch *bt)
{
    const grm__pipeline *p = t->p;
    int64_t T = t->ranking ? t->ds->ntasks : 1, R = t->R ? t->R : 1;
    memset(bt, 0, sizeof *bt);
    bt->fids = calloc((size_t)p->nfeatures, sizeof *bt->fids);
    bt->foff = calloc((size_t)p->nfeatures, sizeof *bt->foff);
    bt->fbase = calloc((size_t)p->nfeatures, sizeof *bt->fbase);
    bt->tab = calloc((size_t)p->nphys, sizeof *bt->tab);
    if (!bt->fids || !bt->foff || !bt->fbase || !bt->tab) goto oom;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        bt->fids[i] = xalloc((size_t)feature_ids_cap(t, i) * sizeof(int64_t));
        bt->foff[i] = xalloc((size_t)(t->B + 1) * sizeof(int64_t));
        if (!bt->fids[i] || !bt->foff[i]) goto oom;
    }
    for (int32_t k = 0; k < p->nphys; k++) {
        batch_tab *w = &bt->tab[k];
        int64_t cap = t->ws[k].cap, ns = p->plan->tables[k].nfeatures;
        w->ids = xalloc((size_t)cap * sizeof *w->ids);
        w->segoff = xalloc((size_t)(ns + 1) * sizeof *w->segoff);
        w->counts = xalloc((size_t)(ns ? ns : 1) * sizeof *w->counts);
        w->inv = xalloc((size_t)cap * sizeof *w->inv);
        w->keys = xalloc((size_t)cap * sizeof *w->keys);
        w->ufeat = xalloc((size_t)cap * sizeof *w->ufeat);
        if (!w->ids || !w->segoff || !w->counts || !w->inv || !w->keys || !w->ufeat) goto oom;
    }
    bt->ex = xalloc((size_t)t->B * sizeof(int64_t));
    bt->src = calloc((size_t)t->B, sizeof *bt->src);
    bt->users = xalloc((size_t)t->B * sizeof(int64_t));
    bt->hist_end = xalloc((size_t)t->B * sizeof(int64_t));
    bt->labels = xalloc((size_t)(t->B * T) * sizeof(float));
    bt->pos_ids = xalloc((size_t)t->RB * sizeof(int64_t));
    bt->tok_src = xalloc((size_t)t->RB * sizeof(int64_t));
    bt->tok_times = xalloc((size_t)t->RB * sizeof(int64_t));
    bt->neg_ids = xalloc((size_t)R * sizeof(int64_t));
    bt->neg_slot = xalloc((size_t)R * sizeof(int64_t));
    if (!t->ranking) {   /* the item table's key map: load factor at most one half */
        bt->mcap = 64;
        while (bt->mcap < 2 * t->ws[t->item_phys].cap) bt->mcap *= 2;
        bt->imap = xalloc((size_t)bt->mcap * sizeof(int64_t));
        if (!bt->imap) goto oom;
    }
    if (!bt->ex || !bt->src || !bt->users || !bt->hist_end || !bt->labels || !bt->pos_ids
        || !bt->tok_src || !bt->tok_times || !bt->neg_ids || !bt->neg_slot)
        goto oom;
    return GRM_OK;
oom:
    batch_fini(p, bt);
    return grm_errorf(GRM_ENOMEM, "out of memory allocating a batch");
}

static grm_status epoch_start(trainer *t, int64_t e, int64_t *first);

/* Rank r's part of x split over n ranks: floor(x (r + 1) / n) - floor(x r / n); the parts
 * differ by at most one and sum to x. */
static int64_t rank_share(int64_t x, int32_t r, int32_t n)
{
    return x * (r + 1) / n - x * r / n;
}

static grm_status setup(trainer *t)
{
    grm__pipeline *p = t->p;
    grm__dataset *ds = t->ds;
    grm_status st;
    const grm__settings *s = &p->set;

    t->B = s->batch_size > s->eval_batch ? s->batch_size : s->eval_batch;
    t->seqmode = p->seq_feature >= 0 && !t->ranking;
    t->seqrank = p->seq_feature >= 0 && t->ranking;
    t->S = t->seqrank ? (int32_t)s->sequence_blocks : 0;
    t->nex = t->stream ? t->src.n : ds->nexamples;
    t->sharded = ds->sharded;
    t->has_times = ds->times != NULL
                   || (t->stream && s->time_column[0] && p->seq_feature >= 0);
    /* sharded: rank r plans batches of its share of batch_size from its own samples */
    t->bsz = t->sharded ? rank_share(s->batch_size, t->rank, t->nranks) : s->batch_size;
    if (t->sharded && s->rank_split == GRM__SPLIT_TOKENS && t->rank == 0)
        grm__log(GRM_LOG_WARN, "grmhost", "%s: [train] rank_split = tokens splits a global "
                 "batch, and input = sharded has none: each rank cuts its own batches "
                 "(batching = tokens levels their tokens)", p->cfg->path);
    if (t->sharded && s->batch_size < t->nranks)   /* the same verdict on every rank */
        return grm_errorf(GRM_EINVAL, "%s: [train] input = %s with batch_size = %lld on %d "
                          "ranks leaves a rank no sample per batch; use batch_size >= %d",
                          p->cfg->path, t->stream ? "stream" : "sharded",
                          (long long)s->batch_size, t->nranks, t->nranks);
    if (t->seqmode) {
        t->seq_users = xalloc((size_t)(ds->nusers ? ds->nusers : 1) * sizeof(int64_t));
        if (!t->seq_users) return GRM_ENOMEM;
        t->nex = 0;
        for (int64_t u = 0; u < ds->nusers; u++)
            if (ds->train_end[u] - ds->offsets[u] >= 2) t->seq_users[t->nex++] = u;
    }
    if (!t->ranking && s->batching == GRM__BATCH_TOKENS) {
        /* N of Algorithm 1; a batch holds at most N + one sample's tokens, and at least one
         * token per sample */
        int64_t tot = 0;
        for (int64_t e = 0; e < t->nex; e++) tot += sample_tokens(t, e);
        int64_t nex = t->nex ? t->nex : 1;
        int64_t given = t->sharded ? rank_share(s->batch_tokens, t->rank, t->nranks)
                                   : s->batch_tokens;
        t->target_tokens = s->batch_tokens ? given : (tot * t->bsz + nex - 1) / nex;
        if (t->target_tokens < 1) t->target_tokens = 1;
        if (t->B < t->target_tokens) t->B = t->target_tokens;
    }
    t->RB = t->B;
    if (t->seqrank) t->RB = feature_ids_cap(t, p->seq_feature);   /* B * tokens per row */
    if (t->seqmode) {
        int64_t w = p->features[p->seq_feature].window;
        t->RB = (s->batch_size > s->eval_batch ? s->batch_size : s->eval_batch) * w;
        if (t->target_tokens && t->RB < t->target_tokens + w) t->RB = t->target_tokens + w;
    }
    /* table sizes for fixed-capacity stores come from the data unless given */
    for (int32_t i = 0; i < p->nfeatures; i++) {
        grm__feature *f = &p->features[i];
        grm_emb_table_spec *ts = &p->tables[f->table_idx];
        int64_t need = (t->ranking ? ds->fmax[i] : f->is_sequence ? ds->max_item
                                                                  : ds->max_user) + 1;
        if (f->rows == 0 && ts->rows < need) ts->rows = need;
        if (f->rows > ts->rows) ts->rows = f->rows;
    }
    for (int32_t i = 0; i < p->ntables; i++)
        if (strcmp(p->tables[i].name, s->item_table) == 0) t->item_table = i;
    t->item_phys = p->plan->slots[t->item_table].table;
    for (int32_t j = 0; j < p->plan->tables[t->item_phys].nfeatures; j++)
        if (p->plan->tables[t->item_phys].features[j] == t->item_table) t->item_seg = j;
    /* a merged table's capacity: the sum of its id spaces' */
    for (int32_t T = 0; T < p->nphys; T++) p->phys[T].rows = 0;
    for (int32_t i = 0; i < p->ntables; i++)
        p->phys[p->plan->slots[i].table].rows += p->tables[i].rows;
    t->eops = p->emb.plugin->info->ops;
    if ((st = t->eops->create(p->emb.config.data, p->phys, p->nphys, &p->sparse_opt,
                              &p->emb.inst)) != GRM_OK) {
        grm_error_prefix("[embedding] %s: ", p->emb.plugin->info->name);
        return st;
    }
    if (t->nranks > 1) {   /* rows sharded over the ranks by a hash of the key */
        int32_t *dims = calloc((size_t)p->nphys, sizeof *dims);
        if (!dims) return grm_errorf(GRM_ENOMEM, "out of memory");
        grm__dist_opts o = grm__dist_opts_default();
        o.dedup1 = 0;   /* the trainer's segment unique is stage 1 */
        o.group_size = (int32_t)s->sparse_group;
        o.table_names = (const char *const *)p->phys_names;
        for (int32_t T = 0; T < p->nphys; T++) {
            dims[T] = p->phys[T].dim;
            if (p->plan->tables[T].nfeatures > o.nfeatures)
                o.nfeatures = p->plan->tables[T].nfeatures;
        }
        st = grm__dist_create(&p->comm_handle, t->eops, p->emb.inst, p->nphys, dims, &o,
                              &t->dist);
        free(dims);
        if (st != GRM_OK) return st;
    }

    /* dense stack */
    t->dims = calloc((size_t)p->ndense + 2, sizeof *t->dims);
    t->acts = calloc((size_t)p->ndense + 2, sizeof *t->acts);
    t->dacts = calloc((size_t)p->ndense + 2, sizeof *t->dacts);
    if (!t->dims || !t->acts || !t->dacts) return grm_errorf(GRM_ENOMEM, "out of memory");
    for (int32_t i = 0; i < p->nfeatures; i++)
        if (!t->seqrank || i != p->seq_feature) t->din += p->features[i].width;
    t->dims[0] = t->seqrank ? p->features[p->seq_feature].dim : t->din;
    for (int32_t i = 0; i < p->ndense; i++) {
        const grm_dense_ops *ops = p->dense[i].plugin->info->ops;
        uint64_t seed = grm_mix64((uint64_t)s->seed ^ grm_mix64(0xd5e0 + (uint64_t)i));
        if ((st = ops->create(p->dense[i].config.data, t->dims[i], seed, &p->dense[i].inst))
            != GRM_OK) {
            grm_error_prefix("[%s] %s: ", p->dense[i].label, p->dense[i].plugin->info->name);
            return st;
        }
        t->dims[i + 1] = ops->out_dim(p->dense[i].inst);
        if (t->seqrank && i + 1 == t->S) {   /* the last token's output beside the pooled */
            t->tok_dim = t->dims[i + 1];
            t->dims[i + 1] += t->din;
        }
    }
    t->hops = p->head.plugin->info->ops;
    if ((st = t->hops->create(p->head.config.data, t->dims[p->ndense], (uint64_t)s->seed,
                              &p->head.inst)) != GRM_OK) {
        grm_error_prefix("[head] %s: ", p->head.plugin->info->name);
        return st;
    }
    t->dims[p->ndense + 1] = t->hops->out_dim(p->head.inst);
    /* retrieval: queries live in the item table's space; ranking: one logit per task */
    int32_t D = t->ranking ? (int32_t)ds->ntasks : p->tables[t->item_table].dim;
    if (t->dims[p->ndense + 1] != D) {
        if (t->ranking)
            return grm_errorf(GRM_EINVAL, "%s: the dense stack ends in %lld features but "
                              "[train] label_columns names %d tasks; make the last [dense.N] "
                              "output %d", p->cfg->path, (long long)t->dims[p->ndense + 1], D,
                              D);
        return grm_errorf(GRM_EINVAL, "%s: the dense stack ends in %lld features but item "
                          "table '%s' has dim %d; make the last [dense.N] output %d",
                          p->cfg->path, (long long)t->dims[p->ndense + 1], s->item_table, D, D);
    }
    int32_t want_kind = t->ranking ? GRM_LOSS_BCE : GRM_LOSS_RETRIEVAL;
    if (t->hops->loss_kind(p->head.inst) != want_kind)
        return grm_errorf(GRM_EINVAL, "%s: [head] %s is not a %s head; use %s", p->cfg->path,
                          p->head.plugin->info->name, t->ranking ? "ranking" : "retrieval",
                          t->ranking ? "dense-bce" : "dense-sampled-softmax");
    for (int32_t i = 0; i < p->ndense + 2; i++) {
        t->acts[i] = xalloc((size_t)(t->RB * t->dims[i]) * sizeof(float));
        t->dacts[i] = xalloc((size_t)(t->RB * t->dims[i]) * sizeof(float));
        if (!t->acts[i] || !t->dacts[i]) return GRM_ENOMEM;
    }
    if (t->seqrank) {
        t->tacts = xalloc((size_t)(t->RB * t->tok_dim) * sizeof(float));
        t->dtacts = xalloc((size_t)(t->RB * t->tok_dim) * sizeof(float));
        if (!t->tacts || !t->dtacts) return GRM_ENOMEM;
    }

    /* negatives: the head draws as many as its configuration asks for; one draw with a
     * generous bound tells how many buffers must hold */
    if (!t->ranking) {
        int64_t cap = 1 << 20, n = 0;
        int64_t *tmp = xalloc((size_t)cap * sizeof *tmp);
        grm_catalog cat = { ds->ncatalog, ds->catalog_ids, ds->catalog_counts };
        if (!tmp) return GRM_ENOMEM;
        st = t->hops->negatives(p->head.inst, tmp, &n, cap, &cat, 1);
        grm__free(CPU, tmp);
        if (st != GRM_OK) {
            grm_error_prefix("[head] %s negatives: ", p->head.plugin->info->name);
            return st;
        }
        t->R = n;
    }

    /* step working sets, one per physical table */
    t->ws = calloc((size_t)p->nphys, sizeof *t->ws);
    if (!t->ws) return grm_errorf(GRM_ENOMEM, "out of memory");
    int64_t wmax = 1, gmax = 1;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        grm__feature *f = &p->features[i];
        int64_t nid = feature_ids_cap(t, i);
        t->ws[phys_of(p, i)].cap += nid;
        if (f->width > wmax) wmax = f->width;
        if (nid * f->dim > gmax) gmax = nid * f->dim;
    }
    t->ptmp = xalloc((size_t)(t->B * wmax) * sizeof(float));
    t->gin = xalloc((size_t)gmax * sizeof(float));
    t->cat_keys = xalloc((size_t)(ds->ncatalog ? ds->ncatalog : 1) * sizeof(int64_t));
    if (!t->ptmp || !t->gin || !t->cat_keys) return GRM_ENOMEM;
    if (!t->ranking) t->ws[t->item_phys].cap += t->RB + t->R;
    for (int32_t T = 0; T < p->nphys; T++) {
        table_ws *w = &t->ws[T];
        w->dim = p->phys[T].dim;
        w->nspace = p->plan->tables[T].nfeatures;
        if (w->cap < 1) w->cap = 1;
        w->rows = xalloc((size_t)(w->cap * w->dim) * sizeof(float));
        w->grads = xalloc((size_t)(w->cap * w->dim) * sizeof(float));
        if (!w->rows || !w->grads) return grm_errorf(GRM_ENOMEM, "out of memory");
        if (s->accumulate > 1) {
            w->acap = w->cap * s->accumulate;
            w->akeys = xalloc((size_t)w->acap * sizeof *w->akeys);
            w->ainv = xalloc((size_t)w->acap * sizeof *w->ainv);
            w->ukeys = xalloc((size_t)w->acap * sizeof *w->ukeys);
            w->agrads = xalloc((size_t)(w->acap * w->dim) * sizeof(float));
            w->ugrads = xalloc((size_t)(w->acap * w->dim) * sizeof(float));
            if (!w->akeys || !w->ainv || !w->ukeys || !w->agrads || !w->ugrads)
                return grm_errorf(GRM_ENOMEM, "out of memory");
        }
    }
    t->async = (int)s->sparse_async;
    if (t->async) {
        t->pend = calloc((size_t)p->nphys, sizeof *t->pend);
        if (!t->pend) return grm_errorf(GRM_ENOMEM, "out of memory");
        for (int32_t T = 0; T < p->nphys; T++) {
            t->pend[T].keys = xalloc((size_t)t->ws[T].cap * sizeof(int64_t));
            t->pend[T].grads = xalloc((size_t)(t->ws[T].cap * t->ws[T].dim) * sizeof(float));
            if (!t->pend[T].keys || !t->pend[T].grads) return GRM_ENOMEM;
        }
    }
    t->pos_rows = xalloc((size_t)(t->RB * D) * sizeof(float));
    t->d_pos = xalloc((size_t)(t->RB * D) * sizeof(float));
    t->queries = xalloc((size_t)(t->B * D) * sizeof(float));
    t->neg_rows = xalloc((size_t)((t->R ? t->R : 1) * D) * sizeof(float));
    t->d_neg = xalloc((size_t)((t->R ? t->R : 1) * D) * sizeof(float));
    t->perm = xalloc((size_t)(t->nex ? t->nex : 1) * sizeof(int64_t));
    t->bstart = xalloc((size_t)(t->nex + 1) * sizeof(int64_t));
    t->tok_cum = xalloc((size_t)(t->nex + 1) * sizeof(int64_t));
    if (!t->bstart || !t->tok_cum) return GRM_ENOMEM;
    t->cat_rows = xalloc((size_t)(ds->ncatalog * D) * sizeof(float));
    t->scores = xalloc((size_t)(s->eval_batch * ds->ncatalog) * sizeof(float));
    if (!t->pos_rows || !t->d_pos || !t->neg_rows || !t->d_neg || !t->perm || !t->cat_rows
        || !t->scores || !t->queries)
        return GRM_ENOMEM;
    if ((st = batch_init(t, &t->eb)) != GRM_OK) return st;
    t->perm_epoch = -1;

    /* dense parameters and their optimizer state */
    t->state_floats = t->dops->state_floats(t->dopt);
    for (int32_t pass = 0; pass < 2; pass++) {
        int32_t n = 0;
        for (int32_t i = 0; i <= p->ndense; i++) {
            grm__stage *stg = i < p->ndense ? &p->dense[i] : &p->head;
            const grm_dense_ops *ops = stg->plugin->info->ops;
            for (int32_t k = 0;; k++) {
                grm_named_tensor v;
                grm_tensor g;
                st = ops->params(stg->inst, k, &v, &g);
                if (st == GRM_ENOTFOUND) break;
                if (st != GRM_OK) return st;
                if (pass == 1) {
                    dparam *dp = &t->params[n];
                    char name[256];
                    snprintf(name, sizeof name, "%s.%s", stg->label, v.name);
                    dp->name = strdup(name);
                    dp->value = v.tensor.data;
                    dp->grad = g.data;
                    dp->shape = v.tensor;
                    dp->numel = 1;
                    for (int32_t d = 0; d < v.tensor.ndim; d++) dp->numel *= v.tensor.shape[d];
                    dp->state = calloc((size_t)(t->state_floats * dp->numel) + 1, sizeof(float));
                    if (!dp->name || !dp->state) return grm_errorf(GRM_ENOMEM, "out of memory");
                }
                n++;
            }
        }
        if (pass == 0) {
            t->nparams = n;
            t->params = calloc((size_t)n + 1, sizeof *t->params);
            if (!t->params) return grm_errorf(GRM_ENOMEM, "out of memory");
        }
    }
    if (t->nranks > 1) {
        for (int32_t i = 0; i < t->nparams; i++) t->gnumel += t->params[i].numel;
        t->gbuf = xalloc((size_t)(t->gnumel + 1) * sizeof(float));
        if (!t->gbuf) return GRM_ENOMEM;
    }
    if (t->stream) {   /* steps: until every rank's input is used up, or [train] steps */
        t->total_steps = s->steps;
        return GRM_OK;
    }
    if (t->nex == 0)
        return grm_errorf(GRM_EINVAL, "%s: no training samples (every user has fewer than two "
                          "training items)", p->cfg->path);
    /* steps are optimizer steps of `accumulate` batches each; batches run on across epochs */
    int64_t N = s->accumulate;
    if ((st = epoch_start(t, 1, &t->mb_local)) != GRM_OK) return st;   /* epoch 0 */
    t->mb_per_epoch = t->mb_local;
    if (!s->steps && (st = epoch_start(t, s->epochs, &t->total_mb)) != GRM_OK) return st;
    t->nex_all = t->nex;
    if (t->sharded) {
        /* every rank runs the longest rank's count of batches: a rank whose share is used
         * up goes on into its next epoch, so no step lacks a rank (a step is collective) */
        const grm_comm_handle *c = &p->comm_handle;
        int64_t mx[2] = { t->mb_per_epoch, t->total_mb };
        if ((st = c->ops->allreduce(c->inst, mx, 2, GRM_DTYPE_I64, GRM_REDUCE_MAX)) != GRM_OK
            || (st = c->ops->allreduce(c->inst, &t->nex_all, 1, GRM_DTYPE_I64,
                                       GRM_REDUCE_SUM)) != GRM_OK)
            return st;
        t->mb_per_epoch = mx[0];
        t->total_mb = mx[1];
    }
    t->steps_per_epoch = (t->mb_per_epoch + N - 1) / N;
    t->total_steps = s->steps ? s->steps : (t->total_mb + N - 1) / N;
    return GRM_OK;
}

static void pf_stop(trainer *t);
static grm_status async_join(trainer *t);
static void stream_free(trainer *t);

static void teardown(trainer *t)
{
    grm__pipeline *p = t->p;
    pf_stop(t);
    stream_free(t);
    if (p->emb.inst) t->eops->destroy(p->emb.inst);
    p->emb.inst = NULL;
    for (int32_t i = 0; i < p->ndense; i++) {
        const grm_dense_ops *ops = p->dense[i].plugin->info->ops;
        if (p->dense[i].inst) ops->destroy(p->dense[i].inst);
        p->dense[i].inst = NULL;
    }
    if (p->head.inst) t->hops->destroy(p->head.inst);
    p->head.inst = NULL;
    const grm_opt_ops *sops = p->opt_sparse.plugin->info->ops;
    if (p->opt_sparse.inst) sops->destroy(p->opt_sparse.inst);
    if (p->opt_dense.inst) t->dops->destroy(p->opt_dense.inst);
    if (p->ckpt.inst) ((const grm_ckpt_ops *)p->ckpt.plugin->info->ops)->destroy(p->ckpt.inst);
    if (p->comm.inst) ((const grm_comm_ops *)p->comm.plugin->info->ops)->destroy(p->comm.inst);
    p->opt_sparse.inst = p->opt_dense.inst = p->ckpt.inst = p->comm.inst = NULL;
    grm__host_set_comm(NULL);
    if (t->ws) {
        for (int32_t T = 0; T < p->nphys; T++) {
            table_ws *w = &t->ws[T];
            void *wb[] = { w->rows, w->grads, w->akeys, w->agrads, w->ainv, w->ukeys,
                           w->ugrads };
            for (size_t i = 0; i < sizeof wb / sizeof *wb; i++) grm__free(CPU, wb[i]);
        }
    }
    async_join(t);
    for (int32_t T = 0; t->pend && T < p->nphys; T++) {
        grm__free(CPU, t->pend[T].keys);
        grm__free(CPU, t->pend[T].grads);
    }
    free(t->pend);
    for (int32_t k = 0; t->pf.ring && k < t->pf.nslots; k++) batch_fini(p, &t->pf.ring[k]);
    free(t->pf.ring);
    batch_fini(p, &t->eb);
    free(t->ws);
    grm__sparse_work_fini(&t->work);
    grm__dist_destroy(t->dist);
    grm__free(CPU, t->gbuf);
    for (int32_t i = 0; t->acts && i < p->ndense + 2; i++) {
        grm__free(CPU, t->acts[i]);
        grm__free(CPU, t->dacts[i]);
    }
    free(t->acts);
    free(t->dacts);
    free(t->dims);
    void *bufs[] = { t->ptmp, t->gin, t->cat_keys, t->pos_rows, t->d_pos, t->neg_rows,
                     t->d_neg, t->perm, t->cat_rows, t->scores, t->seq_users, t->queries,
                     t->bstart, t->tok_cum, t->tacts, t->dtacts };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) grm__free(CPU, bufs[i]);
    for (int32_t i = 0; t->params && i < t->nparams; i++) {
        free(t->params[i].name);
        free(t->params[i].state);
    }
    free(t->params);
    free(t->ep_cum);
    grm__metrics_close(t->metrics);
    grm__scratch_fini();
}

/* ---- one batch: features -> fused dedup -> lookup -> pooled input x ---- */

/* The unique row, among its table's keys of the batch, of each id feature i gathered
 * (FusedRec's I_u): [foff[i][b]]. */
static const int64_t *fslots(const trainer *t, const batch *bt, int32_t i)
{
    return bt->tab[phys_of(t->p, i)].inv + bt->fbase[i];
}

/* The same for the targets (retrieval): [rows] rows of the item table. */
static const int64_t *pos_slots(const trainer *t, const batch *bt)
{
    return bt->tab[t->item_phys].inv + bt->pos_base;
}

/* Feature i's ids of the batch's samples into bt->fids[i], segment k being
 * fids[i][foff[i][k] .. foff[i][k+1]); a sequence model's token sources and times too. */
static void gather_feature(const trainer *t, batch *bt, int32_t i)
{
    const grm__feature *f = &t->p->features[i];
    const grm__dataset *ds = bt->streamed ? NULL : t->ds;   /* the trainer may swap t->ds */
    int64_t *out = bt->fids[i], n = 0;
    bt->foff[i][0] = 0;
    for (int64_t k = 0; k < bt->b; k++) {
        int64_t u = bt->users[k];
        if (t->ranking) {
            if (bt->streamed) ds = bt->src[k]->ds;
            /* the row's ids of this feature, the most recent `window` of a list */
            int64_t end = ds->fofs[i][u + 1], beg = end - f->window;
            if (beg < ds->fofs[i][u]) beg = ds->fofs[i][u];
            if (t->seqrank && i == t->p->seq_feature && ds->times)
                memcpy(bt->tok_times + n, ds->times + beg, (size_t)(end - beg) * sizeof(int64_t));
            for (int64_t j = beg; j < end; j++) out[n++] = ds->fids[i][j];
        } else if (f->is_sequence) {
            int64_t end = bt->hist_end[k], beg = end - f->window;
            if (beg < ds->offsets[u]) beg = ds->offsets[u];
            for (int64_t j = beg; j < end; j++) {
                if (t->seqmode) {
                    bt->tok_src[n] = j;
                    bt->tok_times[n] = ds->times ? ds->times[j] : 0;
                }
                out[n++] = ds->items[j];
            }
        } else {
            out[n++] = ds->users[u];
        }
        bt->foff[i][k + 1] = n;
    }
}

static grm_status ws_overflow(const grm__pipeline *p, int32_t T, int64_t cap)
{
    return grm_errorf(GRM_EINTERNAL, "table %s: step working set overflow (more than %lld "
                      "ids)", p->phys[T].name, (long long)cap);
}

static uint64_t imap_hash(int64_t key)
{
    return grm_mix64((uint64_t)key);
}

/* The item table's unique keys into bt->imap (key -> index + 1), for merging negatives. */
static void imap_build(batch *bt, const batch_tab *w)
{
    const uint64_t mask = (uint64_t)bt->mcap - 1;
    memset(bt->imap, 0, (size_t)bt->mcap * sizeof *bt->imap);
    for (int64_t u = 0; u < w->nu; u++) {
        uint64_t h = imap_hash(w->keys[u]) & mask;
        while (bt->imap[h]) h = (h + 1) & mask;
        bt->imap[h] = u + 1;
    }
}

/* The data side of a batch whose samples (users, hist_end, labels) are set: every feature's
 * ids, the targets (when `targets`: a sequence model's next item per token, or the samples'
 * pos_ids set by the caller), then per physical table one segment unique over the segments
 * of its id spaces (FusedRec §3, Fig. 5) and the keys (MTGRBoost §4.2 eq. 8). Touches only
 * the batch and read-only data, so it runs on the data thread. */
static grm_status assemble_ids(const trainer *t, batch *bt, int targets)
{
    const grm__pipeline *p = t->p;
    grm_status st;
    for (int32_t i = 0; i < p->nfeatures; i++) gather_feature(t, bt, i);
    bt->rows = t->seqmode ? bt->foff[p->seq_feature][bt->b] : bt->b;
    if (targets && t->seqmode)
        for (int64_t n = 0; n < bt->rows; n++) bt->pos_ids[n] = t->ds->items[bt->tok_src[n] + 1];
    bt->nneg = 0;
    for (int32_t T = 0; T < p->nphys; T++) {
        const grm__sparse_table *tb = &p->plan->tables[T];
        batch_tab *w = &bt->tab[T];
        const int64_t cap = t->ws[T].cap;
        int64_t n = 0;
        for (int32_t j = 0; j < tb->nfeatures; j++) {
            int32_t space = tb->features[j];
            w->segoff[j] = n;
            for (int32_t i = 0; i < p->nfeatures; i++) {
                if (p->features[i].table_idx != space) continue;
                int64_t m = bt->foff[i][bt->b];
                if (n + m > cap) return ws_overflow(p, T, cap);
                memcpy(w->ids + n, bt->fids[i], (size_t)m * sizeof *w->ids);
                bt->fbase[i] = n;
                n += m;
            }
            if (space == t->item_table && targets) {
                if (n + bt->rows + t->R > cap) return ws_overflow(p, T, cap);
                memcpy(w->ids + n, bt->pos_ids, (size_t)bt->rows * sizeof *w->ids);
                bt->pos_base = n;
                n += bt->rows;
            }
        }
        w->segoff[tb->nfeatures] = n;
        w->n = n;
        st = grm__sparse_segment_unique(w->keys, w->ufeat, w->counts, w->inv, &w->nu, w->ids,
                                        w->segoff, n, tb->nfeatures, &bt->work);
        if (st != GRM_OK) return st;
        /* unique ids come out segment by segment: encode each run with its id space */
        int64_t at = 0;
        for (int32_t j = 0; j < tb->nfeatures; j++) {
            st = grm__sparse_plan_encode(p->plan, tb->features[j], w->keys + at, w->keys + at,
                                         w->counts[j]);
            if (st != GRM_OK) {
                grm_error_prefix("[embedding] table %s: ", p->phys[T].name);
                return st;
            }
            at += w->counts[j];
        }
    }
    if (!t->ranking) imap_build(bt, &bt->tab[t->item_phys]);
    return GRM_OK;
}

/* Negatives ids [nneg] of the item id space into the batch: each finds its unique row in
 * the item table through imap, or becomes a new unique key; bt->neg_slot names the rows. */
static grm_status merge_negatives(const trainer *t, batch *bt, const int64_t *ids, int64_t nneg)
{
    const grm__pipeline *p = t->p;
    batch_tab *w = &bt->tab[t->item_phys];
    const uint64_t mask = (uint64_t)bt->mcap - 1;
    if (w->n + nneg > t->ws[t->item_phys].cap)
        return ws_overflow(p, t->item_phys, t->ws[t->item_phys].cap);
    grm_status st = grm__sparse_plan_encode(p->plan, t->item_table, bt->neg_slot, ids, nneg);
    if (st != GRM_OK) {
        grm_error_prefix("[embedding] table %s: ", p->phys[t->item_phys].name);
        return st;
    }
    for (int64_t j = 0; j < nneg; j++) {
        const int64_t key = bt->neg_slot[j];
        uint64_t h = imap_hash(key) & mask;
        while (bt->imap[h] && w->keys[bt->imap[h] - 1] != key) h = (h + 1) & mask;
        if (!bt->imap[h]) {
            w->keys[w->nu] = key;
            w->ufeat[w->nu] = t->item_seg;
            bt->imap[h] = ++w->nu;
        }
        bt->neg_slot[j] = bt->imap[h] - 1;
    }
    if (ids != bt->neg_ids) memcpy(bt->neg_ids, ids, (size_t)nneg * sizeof *ids);
    bt->nneg = nneg;
    return GRM_OK;
}

/* The rows of the batch's keys from the store (every rank's, with several), once per
 * physical table. */
static grm_status lookup_batch(trainer *t, batch *bt, int training)
{
    grm__pipeline *p = t->p;
    grm_status st;
    for (int32_t T = 0; T < p->nphys; T++) {
        const batch_tab *w = &bt->tab[T];
        if (t->dist) {   /* collective: every rank, every table, even with no ids */
            st = grm__dist_lookup(t->dist, T, w->keys, w->ufeat, w->nu,
                                  w->n + (T == t->item_phys ? bt->nneg : 0), t->ws[T].rows,
                                  training ? GRM_EMB_INSERT : 0);
            if (st != GRM_OK) return st;
        } else if (w->nu > 0) {
            st = t->eops->lookup(p->emb.inst, t->ws[T].rows, T, w->keys, w->nu,
                                 training ? GRM_EMB_INSERT : 0);
            if (st != GRM_OK) {
                grm_error_prefix("[embedding] %s: ", p->emb.plugin->info->name);
                return st;
            }
        }
    }
    return GRM_OK;
}

/* The dense input x [rows, din]: a sequence model's token rows as they are, otherwise each
 * feature pooled (sum, mean) or tiled (RecIS Table 1) into its columns. */
static grm_status pool_forward(trainer *t, const batch *bt)
{
    grm__pipeline *p = t->p;
    grm_status st;
    const int64_t b = bt->b;
    if (t->seqmode || t->seqrank) {   /* the token rows as they are */
        int32_t T = phys_of(p, p->seq_feature);
        st = grm__sparse_gather(t->acts[0], t->ws[T].rows, fslots(t, bt, p->seq_feature),
                                bt->foff[p->seq_feature][b], bt->tab[T].nu, t->ws[T].dim);
        if (st != GRM_OK || t->seqmode) return st;
    }
    /* pooled features: the columns of x, or with seqrank those of block S's input after
     * the last token's tok_dim */
    float *x = t->acts[t->S];
    const int64_t stride = t->dims[t->S];
    int64_t col = t->tok_dim;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const grm__feature *f = &p->features[i];
        int32_t T = phys_of(p, i);
        const table_ws *w = &t->ws[T];
        if (t->seqrank && i == p->seq_feature) continue;
        if (f->pooling == GRM__POOL_TILE)
            st = grm__sparse_tile(t->ptmp, w->rows, fslots(t, bt, i), bt->foff[i], b, f->window,
                                  bt->tab[T].nu, f->dim, GRM_SPARSE_TILE_LAST);
        else
            st = grm__sparse_segment_reduce(t->ptmp, w->rows, fslots(t, bt, i), bt->foff[i], b,
                                            bt->tab[T].nu, f->dim,
                                            f->pooling == GRM__POOL_MEAN ? GRM_SPARSE_POOL_MEAN
                                                                         : GRM_SPARSE_POOL_SUM);
        if (st != GRM_OK) return st;
        for (int64_t k = 0; k < b; k++)
            memcpy(x + k * stride + col, t->ptmp + k * f->width, (size_t)f->width * sizeof(float));
        col += f->width;
    }
    return GRM_OK;
}

/* Backward of pool_forward: dx [rows, din] into the summed row gradients of the tables. */
static grm_status pool_backward(trainer *t, const batch *bt)
{
    grm__pipeline *p = t->p;
    grm_status st;
    const int64_t b = bt->b;
    if (t->seqmode || t->seqrank) {   /* token n's input gradient goes to its row, unscaled */
        int32_t T = phys_of(p, p->seq_feature);
        st = grm__sparse_scatter_add(t->ws[T].grads, t->dacts[0], fslots(t, bt, p->seq_feature),
                                     bt->foff[p->seq_feature][b], bt->tab[T].nu, t->ws[T].dim,
                                     &t->work);
        if (st != GRM_OK || t->seqmode) return st;
    }
    const float *dx = t->dacts[t->S];
    const int64_t stride = t->dims[t->S];
    int64_t col = t->tok_dim;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const grm__feature *f = &p->features[i];
        int32_t T = phys_of(p, i);
        if (t->seqrank && i == p->seq_feature) continue;
        for (int64_t k = 0; k < b; k++)
            memcpy(t->ptmp + k * f->width, dx + k * stride + col, (size_t)f->width * sizeof(float));
        col += f->width;
        if (f->pooling == GRM__POOL_TILE)
            st = grm__sparse_tile_bwd(t->gin, t->ptmp, bt->foff[i], b, f->window, f->dim,
                                      GRM_SPARSE_TILE_LAST);
        else
            st = grm__sparse_segment_reduce_bwd(t->gin, t->ptmp, bt->foff[i], b, f->dim,
                                                f->pooling == GRM__POOL_MEAN
                                                    ? GRM_SPARSE_POOL_MEAN
                                                    : GRM_SPARSE_POOL_SUM);
        if (st != GRM_OK) return st;
        st = grm__sparse_scatter_add(t->ws[T].grads, t->gin, fslots(t, bt, i), bt->foff[i][b],
                                     bt->tab[T].nu, f->dim, &t->work);
        if (st != GRM_OK) return st;
    }
    return GRM_OK;
}

/* Lookup and the dense input of an assembled batch. */
static grm_status embed_batch(trainer *t, batch *bt, int training)
{
    double t0 = now_s();
    grm_status st = lookup_batch(t, bt, training);
    if (st == GRM_OK) st = pool_forward(t, bt);
    if (training) t->t_lookup += now_s() - t0;   /* evaluation has a row of its own */
    return st;
}

/* Does block i (ndense: the head) run on the jagged tokens? */
static int on_tokens(const trainer *t, int32_t i)
{
    return t->seqmode || (t->seqrank && i < t->S);
}

/* What block i learns about the batch: the step, and on tokens their jagged layout. */
static grm_dense_ctx dense_ctx(const trainer *t, const batch *bt, int32_t i, int training,
                               int64_t step)
{
    grm_dense_ctx ctx = { .struct_size = sizeof ctx, .training = training, .step = step };
    if (on_tokens(t, i)) {
        ctx.offsets = bt->foff[t->p->seq_feature];   /* [nseq + 1] token rows */
        ctx.nseq = bt->b;
        ctx.times = t->has_times ? bt->tok_times : NULL;
    }
    return ctx;
}

/* Block i's input x and output y as the stack lays them out: [rows, dims] on tokens or
 * samples; with seqrank block S - 1 writes the token buffer tacts instead of block S's
 * input, which holds one row per sample (pool_forward filled its pooled columns). */
static void block_io(const trainer *t, const batch *bt, int32_t i, int grad, grm_tensor *x,
                     grm_tensor *y)
{
    const int64_t rows = on_tokens(t, i) ? bt->foff[t->p->seq_feature][bt->b] : bt->rows;
    float *const *a = grad ? t->dacts : t->acts;
    const int last_tok = t->seqrank && i == t->S - 1;
    *x = (grm_tensor){ .data = a[i], .dtype = GRM_DTYPE_F32, .ndim = 2,
                       .shape = { rows, t->dims[i], 1, 1 }, .device = CPU };
    *y = (grm_tensor){ .data = last_tok ? (grad ? t->dtacts : t->tacts) : a[i + 1],
                       .dtype = GRM_DTYPE_F32, .ndim = 2,
                       .shape = { rows, last_tok ? t->tok_dim : t->dims[i + 1], 1, 1 },
                       .device = CPU };
}

/* seqrank: each row's last token output into the first tok_dim columns of block S's input
 * (backward: the gradient of those columns to the last tokens, zero for the others). A row
 * with no tokens gets zeros. */
static void last_tokens(trainer *t, const batch *bt, int backward)
{
    const int64_t *off = bt->foff[t->p->seq_feature], dt = t->tok_dim, ds = t->dims[t->S];
    float *x = backward ? t->dacts[t->S] : t->acts[t->S];
    if (backward) memset(t->dtacts, 0, (size_t)(off[bt->b] * dt) * sizeof(float));
    for (int64_t k = 0; k < bt->b; k++) {
        float *tok = (backward ? t->dtacts : t->tacts) + (off[k + 1] - 1) * dt;
        if (off[k + 1] == off[k]) {
            if (!backward) memset(x + k * ds, 0, (size_t)dt * sizeof(float));
        } else if (backward) {
            memcpy(tok, x + k * ds, (size_t)dt * sizeof(float));
        } else {
            memcpy(x + k * ds, tok, (size_t)dt * sizeof(float));
        }
    }
}

/* The stack and the head's forward on the batch. */
static grm_status dense_forward(trainer *t, const batch *bt, int training, int64_t step)
{
    grm__pipeline *p = t->p;
    for (int32_t i = 0; i <= p->ndense; i++) {
        grm__stage *stg = i < p->ndense ? &p->dense[i] : &p->head;
        const grm_dense_ops *ops = stg->plugin->info->ops;
        grm_dense_ctx ctx = dense_ctx(t, bt, i, training, step);
        grm_tensor x, y;
        block_io(t, bt, i, 0, &x, &y);
        grm_status st = ops->forward(stg->inst, &y, &x, &ctx);
        if (st != GRM_OK) {
            grm_error_prefix("[%s] %s forward: ", stg->label, stg->plugin->info->name);
            return st;
        }
        if (t->seqrank && i == t->S - 1) last_tokens(t, bt, 0);
    }
    return GRM_OK;
}

/* ---- training step ---- */

/* Tokens of training sample e: the ids it looks up from the sequence (a sequence model's
 * token rows, or a pooled history plus the target); a ranking row counts one. */
static int64_t sample_tokens(const trainer *t, int64_t e)
{
    const grm__dataset *ds = t->ds;
    int64_t w = t->p->set.max_seq_len, n;
    if (t->seqrank) {   /* the row's token list, its most recent `window` */
        const int32_t f = t->p->seq_feature;
        const int64_t r = ds->split_rows[0][e];
        n = ds->fofs[f][r + 1] - ds->fofs[f][r];
        w = t->p->features[f].window;
        return n < w ? n : w;
    }
    if (t->ranking) return 1;
    if (t->seqmode) {
        int64_t u = t->seq_users[e];
        w = t->p->features[t->p->seq_feature].window;
        n = ds->train_end[u] - 1 - ds->offsets[u];
    } else {
        n = ds->ex_pos[e] - ds->offsets[ds->ex_user[e]] + 1;
    }
    return n < w ? n : w;
}

static void ensure_perm(trainer *t, int64_t epoch)
{
    if (t->perm_epoch == epoch) return;
    double t0 = now_s();
    int64_t n = t->nex;
    uint64_t s = grm_mix64((uint64_t)t->p->set.seed ^ grm_mix64(0xe90c + (uint64_t)epoch));
    for (int64_t i = 0; i < n; i++) t->perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        s = grm_mix64(s + 0x9e3779b97f4a7c15ULL);
        int64_t j = (int64_t)(s % (uint64_t)(i + 1));
        int64_t tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
    t->perm_epoch = epoch;

    /* the epoch's batches, cut by the running token sums of the shuffled samples */
    const grm__settings *st = &t->p->set;
    int64_t *S = t->tok_cum;
    S[0] = 0;
    for (int64_t i = 0; i < n; i++) S[i + 1] = S[i] + sample_tokens(t, t->perm[i]);
    t->nb = 0;
    t->bstart[0] = 0;
    if (st->batching == GRM__BATCH_FIXED) {
        t->nb = (n + t->bsz - 1) / t->bsz;
        for (int64_t i = 0; i <= t->nb; i++) t->bstart[i] = i * t->bsz < n ? i * t->bsz : n;
        t->t_plan += now_s() - t0;
        return;
    }
    /* MTGRBoost §5.1, Algorithm 1: a buffer Q (here perm[q0, qn)) takes whole input
     * chunks of batch_size samples while it holds fewer than N tokens; the cut is the k
     * whose cumulative token count is closest to N (binary search over the running sums);
     * the first k samples are the batch and the rest carry over. A batch is also cut when
     * all of Q is closest but holds N or more, and the last chunk's leftovers are flushed. */
    int64_t N = t->target_tokens;
    int64_t q0 = 0, qn = 0;
    while (q0 < n) {
        while (S[qn] - S[q0] < N && qn < n) qn = qn + t->bsz < n ? qn + t->bsz : n;
        /* first j in (q0, qn] with S[j] - S[q0] >= N, or qn */
        int64_t lo = q0 + 1, hi = qn;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (S[mid] - S[q0] >= N) hi = mid;
            else lo = mid + 1;
        }
        int64_t k = lo;
        if (k > q0 + 1 && N - (S[k - 1] - S[q0]) <= (S[k] - S[q0]) - N) k--;
        if (k - q0 > t->B) k = q0 + t->B;   /* buffer capacity: one token per sample at least */
        if (k < qn || S[qn] - S[q0] >= N || qn == n) {
            q0 = k;
            t->bstart[++t->nb] = q0;
        }
    }
    t->t_plan += now_s() - t0;
}

/* Batches before epoch e (extending the table of epochs as needed): the step numbers of
 * epoch e are (*first, first + batches of e]. */
static grm_status epoch_start(trainer *t, int64_t e, int64_t *first)
{
    while (t->nep <= e) {
        int64_t *nc = realloc(t->ep_cum, (size_t)(t->nep + 2) * sizeof *nc);
        if (!nc) return grm_errorf(GRM_ENOMEM, "out of memory");
        t->ep_cum = nc;
        if (t->nep == 0) t->ep_cum[0] = 0;
        int64_t nb;
        if (t->p->set.batching == GRM__BATCH_FIXED) {   /* every epoch: ceil(nex / batch) */
            nb = (t->nex + t->bsz - 1) / t->bsz;
        } else {                                      /* cuts depend on the epoch's order */
            ensure_perm(t, t->nep);
            nb = t->nb;
        }
        t->ep_cum[t->nep + 1] = t->ep_cum[t->nep] + nb;
        t->nep++;
    }
    *first = t->ep_cum[e];
    return GRM_OK;
}

/* The epoch and batch of global step `step` (1-based). */
static grm_status locate(trainer *t, int64_t step, int64_t *epoch, int64_t *bi)
{
    grm_status st;
    int64_t e = 0, first;
    /* epochs hold about the same number of batches: start from the nominal guess */
    if (t->mb_local > 0) e = (step - 1) / t->mb_local;
    for (;;) {
        if ((st = epoch_start(t, e, &first)) != GRM_OK) return st;
        if (first >= step && e > 0) { e--; continue; }
        int64_t next;
        if ((st = epoch_start(t, e + 1, &next)) != GRM_OK) return st;
        if (step > next) { e++; continue; }
        break;
    }
    *epoch = e;
    *bi = step - 1 - first;
    ensure_perm(t, e);
    return GRM_OK;
}

/* Samples and rows (tokens for a sequence model) of batch g (1-based, counted across
 * epochs); *pos and perm then locate it. */
static grm_status batch_size_of(trainer *t, int64_t g, int64_t *pos, int64_t *b, int64_t *rows)
{
    int64_t epoch, bi;
    grm_status st = locate(t, g, &epoch, &bi);
    if (st != GRM_OK) return st;
    *pos = t->bstart[bi];
    *b = t->bstart[bi + 1] - *pos;
    *rows = t->seqmode ? t->tok_cum[*pos + *b] - t->tok_cum[*pos] : *b;
    return GRM_OK;
}

typedef struct split_item {
    int64_t tokens, at;
} split_item;

static int by_tokens_desc(const void *x, const void *y)
{
    const split_item *a = x, *b = y;
    if (a->tokens != b->tokens) return a->tokens > b->tokens ? -1 : 1;
    return (a->at > b->at) - (a->at < b->at);
}

/* This rank's samples of global batch g into bt (ex, b, tokens). contiguous: the r-th of
 * nranks contiguous parts of the batch (sizes differ by at most one sample). tokens: global
 * token reallocation (TurboGR §4.1.3): the batch's samples sorted by token count, longest
 * first, each given to the rank with the fewest tokens so far (ties: the lower rank), so
 * the ranks' token counts, not their sample counts, come out level; a rank keeps its
 * samples in batch order. Every rank computes the same assignment from the same order. */
static grm_status slice_of(trainer *t, int64_t g, batch *bt)
{
    int64_t gpos, gb, grows;
    grm_status st = batch_size_of(t, g, &gpos, &gb, &grows);
    if (st != GRM_OK) return st;
    bt->g = g;
    bt->b = 0;
    bt->tokens = 0;
    if (t->sharded || t->nranks == 1 || t->p->set.rank_split == GRM__SPLIT_CONTIGUOUS) {
        /* sharded: the batch is this rank's own, whole */
        const int64_t parts = t->sharded ? 1 : t->nranks, me = t->sharded ? 0 : t->rank;
        int64_t lo = gpos + gb * me / parts, hi = gpos + gb * (me + 1) / parts;
        for (int64_t i = lo; i < hi; i++) bt->ex[bt->b++] = t->perm[i];
        bt->tokens = t->tok_cum[hi] - t->tok_cum[lo];
        return GRM_OK;
    }
    split_item *it = malloc((size_t)(gb ? gb : 1) * sizeof *it);
    int64_t *load = calloc((size_t)t->nranks, sizeof *load);
    int32_t *owner = malloc((size_t)(gb ? gb : 1) * sizeof *owner);
    if (!it || !load || !owner) {
        free(it);
        free(load);
        free(owner);
        return grm_errorf(GRM_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < gb; i++)
        it[i] = (split_item){ t->tok_cum[gpos + i + 1] - t->tok_cum[gpos + i], i };
    qsort(it, (size_t)gb, sizeof *it, by_tokens_desc);
    for (int64_t i = 0; i < gb; i++) {
        int32_t r = 0;
        for (int32_t q = 1; q < t->nranks; q++)
            if (load[q] < load[r]) r = q;
        load[r] += it[i].tokens;
        owner[it[i].at] = r;
    }
    for (int64_t i = 0; i < gb; i++)
        if (owner[i] == t->rank) {
            bt->ex[bt->b++] = t->perm[gpos + i];
            bt->tokens += t->tok_cum[gpos + i + 1] - t->tok_cum[gpos + i];
        }
    free(it);
    free(load);
    free(owner);
    return GRM_OK;
}

/* Rows of every rank's slices of every batch of the step holding batch g: the denominator
 * of the batch weights. Sharded: this rank's batches only; the trainer sums the ranks'. */
static grm_status step_rows_of(trainer *t, int64_t g, double *out)
{
    const int64_t N = t->p->set.accumulate, step = (g - 1) / N + 1;
    if (t->pf.cached_step == step) {
        *out = t->pf.step_rows;
        return GRM_OK;
    }
    int64_t g0 = (step - 1) * N, nb = N;
    if (t->total_mb && g0 + nb > t->total_mb) nb = t->total_mb - g0;
    double total = 0;
    for (int64_t j = 0; j < nb; j++) {
        int64_t pos, b, rows;
        grm_status st = batch_size_of(t, g0 + j + 1, &pos, &b, &rows);
        if (st != GRM_OK) return st;
        total += (double)rows;
    }
    t->pf.cached_step = step;
    t->pf.step_rows = total;
    *out = total;
    return GRM_OK;
}

/* ---- input = stream ---- */

/* Read pieces until the buffer holds `want` rows or the last pass is read. */
static grm_status stream_fill(trainer *t)
{
    stream_src *sc = &t->src;
    while (!sc->ended && sc->n < sc->want) {
        grm__dataset *ds = NULL;
        int64_t pass = 0;
        double t0 = now_s();
        grm_status st = grm__stream_next(t->stream, &ds, &pass);
        sc->read_s += now_s() - t0;
        if (st != GRM_OK) return st;
        if (!ds) {
            sc->ended = 1;
            break;
        }
        const int64_t m = ds->nsplit[0];
        piece *pc = malloc(sizeof *pc);
        if (sc->n + m > sc->cap) {
            int64_t cap = sc->cap ? sc->cap : 1024;
            while (cap < sc->n + m) cap *= 2;
            struct srow *nb = realloc(sc->buf, (size_t)cap * sizeof *nb);
            if (nb) {
                sc->buf = nb;
                sc->cap = cap;
            }
        }
        if (!pc || sc->n + m > sc->cap) {
            free(pc);
            grm__dataset_destroy(ds);
            return grm_errorf(GRM_ENOMEM, "input = stream: out of memory for the shuffle "
                              "buffer; lower [train] shuffle_buffer");
        }
        *pc = (piece){ ds, m };
        for (int64_t k = 0; k < m; k++)
            sc->buf[sc->n++] = (struct srow){ pc, ds->split_rows[0][k] };
        sc->pass = pass;
    }
    return GRM_OK;
}

/* The piece's row is drawn (and, when assembled, copied into its batch). */
static void piece_release(piece *pc)
{
    if (--pc->left > 0) return;
    grm__dataset_destroy(pc->ds);
    free(pc);
}

/* Draw the next batch's samples from the shuffle buffer into bt and, when `assemble`, its
 * ids and keys; every batch of a step has bsz samples while the input lasts, so the step's
 * rows are known at its first batch (the buffer holds at least accumulate * bsz rows). */
static grm_status stream_draw(trainer *t, batch *bt, int assemble)
{
    stream_src *sc = &t->src;
    const int32_t T = (int32_t)t->p->set.label_columns.n;
    const int64_t N = t->p->set.accumulate;
    grm_status st = stream_fill(t);
    if (st != GRM_OK) return st;
    if (sc->drawn % N == 0) sc->step_rows = sc->n < N * t->bsz ? sc->n : N * t->bsz;
    const int64_t b = sc->n < t->bsz ? sc->n : t->bsz;
    bt->b = b;
    bt->streamed = 1;
    bt->done = b == 0;
    bt->pass = sc->pass;
    bt->step_rows = (double)sc->step_rows;
    bt->tokens = 0;
    for (int64_t k = 0; k < b; k++) {
        sc->rng = grm_mix64(sc->rng + 0x9e3779b97f4a7c15ULL);
        const int64_t j = (int64_t)(sc->rng % (uint64_t)sc->n);
        const struct srow r = sc->buf[j];
        sc->buf[j] = sc->buf[--sc->n];
        bt->src[k] = r.pc;
        bt->users[k] = r.row;
        memcpy(bt->labels + k * T, r.pc->ds->labels + r.row * T, (size_t)T * sizeof(float));
        int64_t tok = 1;
        if (t->seqrank) {   /* the row's token list, its most recent `window` */
            const int32_t f = t->p->seq_feature;
            const int64_t w = t->p->features[f].window;
            tok = r.pc->ds->fofs[f][r.row + 1] - r.pc->ds->fofs[f][r.row];
            if (tok > w) tok = w;
        }
        bt->tokens += tok;
    }
    sc->drawn++;
    if (assemble) st = assemble_ids(t, bt, 0);
    for (int64_t k = 0; k < b; k++) piece_release(bt->src[k]);
    return st;
}

/* Batch g of the stream: the batches before it drawn (and dropped) first when resuming. */
static grm_status stream_batch(trainer *t, batch *bt, int64_t g)
{
    grm_status st = GRM_OK;
    while (st == GRM_OK && t->src.drawn < g - 1) st = stream_draw(t, bt, 0);
    if (st != GRM_OK) return st;
    if (t->src.drawn != g - 1)
        return grm_errorf(GRM_EINTERNAL, "input = stream: batch %lld asked for after batch "
                          "%lld was drawn", (long long)g, (long long)t->src.drawn);
    bt->g = g;
    return stream_draw(t, bt, 1);
}

/* The rows still in the buffer give their pieces back (teardown). */
static void stream_free(trainer *t)
{
    stream_src *sc = &t->src;
    for (int64_t k = 0; k < sc->n; k++) piece_release(sc->buf[k].pc);
    free(sc->buf);
    memset(sc, 0, sizeof *sc);
    grm__stream_close(t->stream);
    t->stream = NULL;
}

/* t->ds afresh from the stream: the held-out rows of pass 0 read so far on this rank, the
 * training positive rate over every rank's rows so far (collective with several ranks). */
static grm_status stream_snapshot(trainer *t)
{
    const int32_t T = (int32_t)t->p->set.label_columns.n;
    grm__dataset *ds = NULL;
    double *pos = calloc((size_t)T + 1, sizeof *pos);   /* [T] positives, [T] rows */
    int64_t ntrain = 0, done = 0;
    int mine = 0;
    if (!pos) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm_status st = grm__stream_eval(t->stream, &ds, pos, &ntrain, &mine);
    pos[T] = (double)ntrain;
    done = mine;
    if (st == GRM_OK && t->nranks > 1) {   /* the same prior on every rank */
        const grm_comm_handle *c = &t->p->comm_handle;
        st = grm__sum_ranks(c, pos, T + 1);
        if (st == GRM_OK) st = c->ops->allreduce(c->inst, &done, 1, GRM_DTYPE_I64, GRM_REDUCE_MIN);
    }
    if (st == GRM_OK) {
        for (int32_t k = 0; k < T; k++) ds->prior[k] = pos[T] > 0 ? pos[k] / pos[T] : 0.0;
        ds->sharded = t->nranks > 1;
        grm__dataset_destroy(t->ds);
        t->ds = ds;
        t->stream_full = (int)done;
        ds = NULL;
    }
    free(pos);
    grm__dataset_destroy(ds);
    if (st != GRM_OK) grm_error_prefix("input = stream: the held-out rows: ");
    return st;
}

/* Everything of training batch g that comes from the data (this rank's samples, their ids,
 * targets, keys), into bt. Runs on the data thread when prefetch > 0: it alone then touches
 * the epoch order (perm, bstart, tok_cum, ep_cum). */
static grm_status assemble_train(trainer *t, batch *bt, int64_t g)
{
    if (t->stream) return stream_batch(t, bt, g);
    const grm__dataset *ds = t->ds;
    const int32_t T = ds->ntasks;
    bt->streamed = 0;
    grm_status st = slice_of(t, g, bt);
    if (st == GRM_OK) st = step_rows_of(t, g, &bt->step_rows);
    if (st != GRM_OK) return st;
    for (int64_t k = 0; k < bt->b; k++) {
        int64_t e = bt->ex[k];
        if (t->ranking) {
            int64_t r = ds->split_rows[0][e];
            bt->users[k] = r;
            memcpy(bt->labels + k * T, ds->labels + r * T, (size_t)T * sizeof(float));
        } else if (t->seqmode) {
            /* the user's training items: tokens items[beg, end - 1), each predicting the
             * next */
            int64_t u = t->seq_users[e];
            bt->users[k] = u;
            bt->hist_end[k] = ds->train_end[u] - 1;
        } else {
            bt->users[k] = ds->ex_user[e];
            bt->hist_end[k] = ds->ex_pos[e];
            bt->pos_ids[k] = ds->items[ds->ex_pos[e]];
        }
    }
    return assemble_ids(t, bt, !t->ranking);
}

/* ---- the data thread ---- */

static void *pf_main(void *arg)
{
    trainer *t = arg;
    prefetcher *pf = &t->pf;
    grm__pool_inline_thread();   /* the pool belongs to the trainer thread */
    /* Lowest priority (SCHED_IDLE): the data thread runs on cores the compute leaves idle
     * (the trainer's serial parts, its waits) instead of preempting a pool worker, which
     * stalls the whole fork-join; starved, it still runs as soon as the trainer waits for
     * it. With every core in the pool (the default) that keeps prefetch from ever costing
     * compute time, at the price of less of the data work hidden; with a spare core it
     * runs there. bench/bench_pipeline.sh measures both (nice 19 still cost 4% here). A
     * system that refuses it keeps the default priority. */
    struct sched_param sp = { 0 };
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    pthread_mutex_lock(&pf->lock);
    for (;;) {
        while (!pf->stop && pf->next <= pf->last && pf->next > pf->released + pf->nslots)
            pthread_cond_wait(&pf->cond, &pf->lock);
        if (pf->stop || pf->next > pf->last) break;
        int64_t g = pf->next;
        batch *bt = &pf->ring[(g - 1) % pf->nslots];
        pthread_mutex_unlock(&pf->lock);
        double t0 = now_s();
        bt->st = assemble_train(t, bt, g);
        if (bt->st != GRM_OK) snprintf(bt->err, sizeof bt->err, "%s", grm_last_error());
        double dt = now_s() - t0;
        pthread_mutex_lock(&pf->lock);
        pf->busy_s += dt;
        pf->ready = g;
        pf->next = bt->st == GRM_OK ? g + 1 : pf->last + 1;   /* a failure ends the thread */
        pthread_cond_broadcast(&pf->cond);
    }
    pthread_mutex_unlock(&pf->lock);
    return NULL;
}

/* Start assembling batches first .. last ahead (prefetch > 0; otherwise nothing to do). */
static grm_status pf_start(trainer *t, int64_t first, int64_t last)
{
    prefetcher *pf = &t->pf;
    grm_status st;
    const int all = t->opts->batches_in_memory;
    if ((t->p->set.prefetch <= 0 && !all) || first > last) return GRM_OK;
    if (all && last - first + 1 > INT32_MAX - 1)
        return grm_errorf(GRM_EINVAL, "--batches-in-memory: %lld batches are too many; "
                          "bound the run with --max-steps", (long long)(last - first + 1));
    if (!pf->ring) {
        /* --batches-in-memory: a slot for every batch of the run */
        pf->nslots = all ? (int32_t)(last - first + 1) : (int32_t)t->p->set.prefetch + 1;
        pf->ring = calloc((size_t)pf->nslots, sizeof *pf->ring);
        if (!pf->ring) return grm_errorf(GRM_ENOMEM, "out of memory");
        for (int32_t k = 0; k < pf->nslots; k++)
            if ((st = batch_init(t, &pf->ring[k])) != GRM_OK) return st;
        pthread_mutex_init(&pf->lock, NULL);
        pthread_cond_init(&pf->cond, NULL);
    }
    pf->stop = 0;
    pf->next = first;
    pf->last = last;
    pf->ready = pf->released = first - 1;
    int rc = pthread_create(&pf->thread, NULL, pf_main, t);
    if (rc != 0)
        return grm_errorf(GRM_EINTERNAL, "data thread: pthread_create: %s", strerror(rc));
    pf->running = 1;
    if (all) {   /* the benchmark peer: every batch assembled before the first step */
        double t0 = now_s();
        pthread_mutex_lock(&pf->lock);
        while (pf->ready < last && pf->next <= pf->last) pthread_cond_wait(&pf->cond, &pf->lock);
        pthread_mutex_unlock(&pf->lock);
        if (!t->opts->quiet)
            grm__log(GRM_LOG_INFO, "grmhost", "--batches-in-memory: %lld batches assembled "
                     "before step 1 in %.2fs", (long long)(last - first + 1), now_s() - t0);
        t->t_plan = 0;   /* not part of the loop: the data thread is done */
        pf->busy_s = 0;
    }
    return GRM_OK;
}

static void pf_stop(trainer *t)
{
    prefetcher *pf = &t->pf;
    if (!pf->running) return;
    pthread_mutex_lock(&pf->lock);
    pf->stop = 1;
    pthread_cond_broadcast(&pf->cond);
    pthread_mutex_unlock(&pf->lock);
    pthread_join(pf->thread, NULL);
    pf->running = 0;
    t->t_batch += pf->busy_s;   /* assembly time, spent on the data thread */
    pf->busy_s = 0;
}

/* Batch g, assembled: from the ring (waiting for the data thread if it is behind), or built
 * here into the evaluation batch when nothing prefetches. */
static grm_status pf_take(trainer *t, int64_t g, batch **out)
{
    prefetcher *pf = &t->pf;
    if (!pf->running) {
        double t0 = now_s();
        grm_status st = assemble_train(t, &t->eb, g);
        t->t_batch += now_s() - t0;
        *out = &t->eb;
        return st;
    }
    if (g != pf->released + 1)
        return grm_errorf(GRM_EINTERNAL, "data thread: batch %lld asked for out of order "
                          "(next is %lld)", (long long)g, (long long)pf->released + 1);
    double t0 = now_s();
    pthread_mutex_lock(&pf->lock);
    while (pf->ready < g && pf->running) pthread_cond_wait(&pf->cond, &pf->lock);
    pthread_mutex_unlock(&pf->lock);
    t->t_wait += now_s() - t0;
    batch *bt = &pf->ring[(g - 1) % pf->nslots];
    if (bt->st != GRM_OK) return grm_errorf(bt->st, "%s", bt->err);
    *out = bt;
    return GRM_OK;
}

/* The trainer is done with batch g: its slot may take batch g + nslots. */
static void pf_release(trainer *t, int64_t g)
{
    prefetcher *pf = &t->pf;
    if (!pf->running) return;
    pthread_mutex_lock(&pf->lock);
    pf->released = g;
    pthread_cond_broadcast(&pf->cond);
    pthread_mutex_unlock(&pf->lock);
}

/* Forward and backward of batch bt (this rank's samples of global batch bt->g): negatives
 * drawn and merged, rows looked up, dense gradients added into the parameters' grads, the
 * batch's row gradients summed per unique key into each table's working set. Gradients are
 * weighted by `weight`, the batch's share of the step's rows, so a step of several batches
 * averages over its samples, not over its batches (MTGRBoost §5.1). */
/* The row optimizer on n keys of physical table T with their summed gradients [n, dim]:
 * the store's update on one rank, the exchange to the owners with several. `routed`: the
 * keys are those of T's last lookup, whose routing the exchange reuses (only gradients
 * travel). */
static grm_status update_table(trainer *t, int32_t T, const int64_t *keys, const float *grads,
                               int64_t n, int64_t step, int routed)
{
    grm__pipeline *p = t->p;
    grm_status st = t->dist ? grm__dist_update(t->dist, T, routed ? NULL : keys, grads, n, step)
                            : t->eops->update(p->emb.inst, T, keys, grads, n, step);
    if (st != GRM_OK) grm_error_prefix("[embedding] %s update: ", p->emb.plugin->info->name);
    return st;
}

/* ---- semi-async sparse (TurboGR §4.2.2) ---- */

/* Apply the pending row gradients: the exchange to the owners and the row optimizer,
 * collective with several ranks. */
static grm_status apply_pending(trainer *t)
{
    grm_status st = GRM_OK;
    for (int32_t i = 0; i < t->p->nphys && st == GRM_OK; i++) {
        const struct pending *q = &t->pend[i];
        st = update_table(t, i, q->keys, q->grads, q->n, t->pend_step, 0);
    }
    t->pend_step = 0;
    return st;
}

static void *async_main(void *arg)
{
    trainer *t = arg;
    grm__pool_inline_thread();   /* the pool belongs to the trainer thread */
    t->sst = apply_pending(t);
    if (t->sst != GRM_OK) snprintf(t->serr, sizeof t->serr, "%s", grm_last_error());
    return NULL;
}

/* After the lookup of step i + 1: step i's update starts on the sparse thread. The trainer
 * makes no collective call until async_join, so the two threads' calls never interleave
 * (comm-mpi asks for MPI_THREAD_MULTIPLE and needs at least MPI_THREAD_SERIALIZED). */
static grm_status async_start(trainer *t)
{
    if (!t->async || !t->pend_step) return GRM_OK;
    if (pthread_create(&t->sthread, NULL, async_main, t) != 0)
        return grm_errorf(GRM_EINTERNAL, "cannot start the sparse update thread");
    t->srunning = 1;
    return GRM_OK;
}

/* Wait for the sparse thread; its failure becomes the trainer's. */
static grm_status async_join(trainer *t)
{
    if (!t->srunning) return GRM_OK;
    double t0 = now_s();
    pthread_join(t->sthread, NULL);
    t->srunning = 0;
    t->t_async += now_s() - t0;
    if (t->sst != GRM_OK) return grm_errorf(t->sst, "%s", t->serr);
    return GRM_OK;
}

/* Everything pending applied now (before evaluation, checkpoints and the end of the run, at
 * the same steps on every rank). */
static grm_status async_flush(trainer *t)
{
    grm_status st = async_join(t);
    if (st == GRM_OK && t->async && t->pend_step) st = apply_pending(t);
    return st;
}

static grm_status run_batch(trainer *t, batch *bt, float weight, double *loss_out,
                            int64_t *samples_out, int64_t *tokens_out)
{
    grm__pipeline *p = t->p;
    grm__dataset *ds = t->ds;
    const grm__settings *s = &p->set;
    grm_status st;
    int32_t D = t->ranking ? 0 : p->tables[t->item_table].dim;
    int32_t T = ds->ntasks;
    int64_t nneg = 0;

    if (!t->ranking) {
        grm_catalog cat = { ds->ncatalog, ds->catalog_ids, ds->catalog_counts };
        uint64_t nseed = grm_mix64((uint64_t)s->seed ^ grm_mix64(0x5eed + (uint64_t)bt->g));
        int64_t *neg = grm__scratch((size_t)(t->R ? t->R : 1) * sizeof *neg, 64);
        if (!neg) return GRM_ENOMEM;
        if ((st = t->hops->negatives(p->head.inst, neg, &nneg, t->R, &cat, nseed)) != GRM_OK)
            return st;
        if ((st = merge_negatives(t, bt, neg, nneg)) != GRM_OK) return st;
    }
    if ((st = embed_batch(t, bt, 1)) != GRM_OK) return st;
    if ((st = async_start(t)) != GRM_OK) return st;   /* the last step's rows, meanwhile */
    int64_t rows = bt->rows;   /* samples, or tokens of a sequence model */
    for (int32_t i = 0; i < p->nphys; i++)
        memset(t->ws[i].grads, 0, (size_t)(bt->tab[i].nu * t->ws[i].dim) * sizeof(float));
    *loss_out = 0;
    *samples_out = 0;
    *tokens_out = 0;
    if (rows == 0) return GRM_OK;   /* an empty slice: no gradient, the collectives only */

    double t0 = now_s();
    if ((st = dense_forward(t, bt, 1, bt->g)) != GRM_OK) return st;
    int32_t L = p->ndense + 1;
    grm_loss_io io;
    table_ws *iw = t->ranking ? NULL : &t->ws[t->item_phys];
    const int64_t inu = t->ranking ? 0 : bt->tab[t->item_phys].nu;
    memset(t->dacts[L], 0, (size_t)(rows * t->dims[L]) * sizeof(float));
    if (t->ranking) {
        io = (grm_loss_io){ .struct_size = sizeof io, .ntasks = T, .rows = bt->b, .dim = T,
                            .pred = t->acts[L], .d_pred = t->dacts[L], .labels = bt->labels };
    } else {
        /* positives and negatives are rows of the item table, gathered from the step set */
        if ((st = grm__sparse_gather(t->pos_rows, iw->rows, pos_slots(t, bt), rows, inu, D))
                != GRM_OK
            || (st = grm__sparse_gather(t->neg_rows, iw->rows, bt->neg_slot, nneg, inu, D))
                   != GRM_OK)
            return st;
        memset(t->d_pos, 0, (size_t)(rows * D) * sizeof(float));
        memset(t->d_neg, 0, (size_t)((nneg ? nneg : 1) * D) * sizeof(float));
        io = (grm_loss_io){ .struct_size = sizeof io, .rows = rows, .dim = D, .pred = t->acts[L],
                            .d_pred = t->dacts[L], .pos = t->pos_rows, .d_pos = t->d_pos,
                            .pos_ids = bt->pos_ids, .neg = t->neg_rows, .d_neg = t->d_neg,
                            .neg_ids = bt->neg_ids, .nneg = nneg };
    }
    if ((st = t->hops->loss(p->head.inst, &io)) != GRM_OK) {
        grm_error_prefix("[head] %s loss: ", p->head.plugin->info->name);
        return st;
    }
    if (!isfinite(io.loss))
        return grm_errorf(GRM_EINVAL, "step %lld: loss is %g; lower the learning rates or "
                          "check the data", (long long)t->step + 1, io.loss);
    if (weight != 1.0f) {   /* the loss is linear in these: weight them once, here */
        cblas_sscal((int)(rows * t->dims[L]), weight, t->dacts[L], 1);
        if (!t->ranking) {
            cblas_sscal((int)(rows * D), weight, t->d_pos, 1);
            if (nneg > 0) cblas_sscal((int)(nneg * D), weight, t->d_neg, 1);
        }
    }
    double t1 = now_s();

    /* backward through head and stack (parameter gradients accumulate in the blocks) */
    for (int32_t i = p->ndense; i >= 0; i--) {
        grm__stage *stg = i < p->ndense ? &p->dense[i] : &p->head;
        const grm_dense_ops *ops = stg->plugin->info->ops;
        grm_dense_ctx ctx = dense_ctx(t, bt, i, 1, bt->g);
        grm_tensor dx, dy;
        if (t->seqrank && i == t->S - 1) last_tokens(t, bt, 1);
        block_io(t, bt, i, 1, &dx, &dy);
        if ((st = ops->backward(stg->inst, &dx, &dy, &ctx)) != GRM_OK) {
            grm_error_prefix("[%s] %s backward: ", stg->label, stg->plugin->info->name);
            return st;
        }
    }
    /* sparse gradients: summed per unique key (duplicates of a step meet in one row) */
    if (iw
        && ((st = grm__sparse_scatter_add(iw->grads, t->d_pos, pos_slots(t, bt), rows, inu, D,
                                          &t->work)) != GRM_OK
            || (st = grm__sparse_scatter_add(iw->grads, t->d_neg, bt->neg_slot, nneg, inu, D,
                                             &t->work)) != GRM_OK))
        return st;
    if ((st = pool_backward(t, bt)) != GRM_OK) return st;
    t->t_fwd += t1 - t0;
    t->t_bwd += now_s() - t1;
    *loss_out = io.loss;
    *samples_out = bt->b;
    *tokens_out = bt->tokens;
    return GRM_OK;
}

/* Keep the row gradients of the batch just run for the step's one update. */
static void stash_rows(trainer *t, const batch *bt)
{
    for (int32_t i = 0; i < t->p->nphys; i++) {
        table_ws *w = &t->ws[i];
        const batch_tab *bw = &bt->tab[i];
        memcpy(w->akeys + w->an, bw->keys, (size_t)bw->nu * sizeof *bw->keys);
        memcpy(w->agrads + w->an * w->dim, w->grads, (size_t)(bw->nu * w->dim) * sizeof(float));
        w->an += bw->nu;
    }
}

/* Sparse gradient accumulation: the stashed (key, gradient) pairs of the step's batches
 * aggregated by key (segment unique with one segment, then a scatter-add), so each touched
 * row sees one update with its summed gradient. */
static grm_status update_accumulated(trainer *t, int64_t step)
{
    grm__pipeline *p = t->p;
    grm_status st;
    for (int32_t T = 0; T < p->nphys; T++) {
        table_ws *w = &t->ws[T];
        int64_t off[2] = { 0, w->an }, nu = 0;
        st = grm__sparse_segment_unique(w->ukeys, NULL, NULL, w->ainv, &nu, w->akeys, off,
                                        w->an, 1, &t->work);
        if (st != GRM_OK) return st;
        memset(w->ugrads, 0, (size_t)(nu * w->dim) * sizeof(float));
        st = grm__sparse_scatter_add(w->ugrads, w->agrads, w->ainv, w->an, nu, w->dim,
                                     &t->work);
        if (st != GRM_OK) return st;
        w->an = 0;
        if ((st = update_table(t, T, w->ukeys, w->ugrads, nu, step, 0)) != GRM_OK) return st;
    }
    return GRM_OK;
}

/* Data-parallel dense side (MTGRBoost §3): the weighted dense gradients of all ranks summed
 * in one allreduce, so every rank applies the same update; the step's loss, samples and
 * tokens summed alike. */
static grm_status allreduce_step(trainer *t, double *loss, int64_t *samples, int64_t *tokens)
{
    const grm_comm_handle *c = &t->p->comm_handle;
    grm_status st;
    int64_t at = 0;
    for (int32_t i = 0; i < t->nparams; i++) {
        memcpy(t->gbuf + at, t->params[i].grad, (size_t)t->params[i].numel * sizeof(float));
        at += t->params[i].numel;
    }
    t->gbuf[at] = (float)*loss;   /* the weighted loss travels with the gradients */
    if ((st = c->ops->allreduce(c->inst, t->gbuf, at + 1, GRM_DTYPE_F32, GRM_REDUCE_SUM))
        != GRM_OK)
        return st;
    double l = t->gbuf[at];
    at = 0;
    for (int32_t i = 0; i < t->nparams; i++) {
        memcpy(t->params[i].grad, t->gbuf + at, (size_t)t->params[i].numel * sizeof(float));
        at += t->params[i].numel;
    }
    int64_t n[2] = { *samples, *tokens };
    if ((st = c->ops->allreduce(c->inst, n, 2, GRM_DTYPE_I64, GRM_REDUCE_SUM)) != GRM_OK)
        return st;
    *loss = l;
    *samples = n[0];
    *tokens = n[1];
    return GRM_OK;
}

/* The rows of the whole step on every rank: the batch's own count, or with input = sharded
 * (each rank's plan its own) the ranks' counts summed (MTGRBoost §5.1: the sample count
 * travels with the batch, so the gradient is a mean over the step's samples). */
static grm_status step_rows_all(trainer *t, double mine, double *out)
{
    *out = mine;
    if (!t->sharded) return GRM_OK;
    const grm_comm_handle *c = &t->p->comm_handle;
    int64_t n = (int64_t)mine;
    grm_status st = c->ops->allreduce(c->inst, &n, 1, GRM_DTYPE_I64, GRM_REDUCE_SUM);
    if (st != GRM_OK) grm_error_prefix("summing the step's rows over the ranks: ");
    *out = (double)n;
    return st;
}

/* input = stream: the step's rows summed over the ranks as step_rows_all sums them, and
 * whether the run is over (every rank's input used up: t->ended) and the step's pass (the
 * most of any rank's, t->step_pass). `failed`: this rank could not take its batch; every rank
 * then stops, the others with an error naming it. */
static grm_status stream_step(trainer *t, const batch *bt, int failed, double *rows)
{
    int64_t v[3] = { failed ? 0 : (int64_t)bt->step_rows, failed ? 0 : bt->done, failed },
            pass = failed ? 0 : bt->pass;
    grm_status st = GRM_OK;
    if (t->nranks > 1) {
        const grm_comm_handle *c = &t->p->comm_handle;
        st = c->ops->allreduce(c->inst, v, 3, GRM_DTYPE_I64, GRM_REDUCE_SUM);
        if (st == GRM_OK) st = c->ops->allreduce(c->inst, &pass, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX);
        if (st != GRM_OK) {
            grm_error_prefix("input = stream: agreeing on the step: ");
            return st;
        }
    }
    if (v[2] && !failed)
        return grm_errorf(GRM_EIO, "input = stream: another rank failed reading its input "
                          "(its own message says why)");
    *rows = (double)v[0];
    t->ended = v[1] == t->nranks;
    t->step_pass = pass;
    return GRM_OK;
}

/* One optimizer step: [train] accumulate batches (fewer at the very end of the run), their
 * gradients summed with weights by rows, then the dense optimizer on every parameter and the
 * sparse optimizer on the touched rows only. */
static grm_status train_step(trainer *t, double *loss_out, int64_t *samples_out)
{
    grm__pipeline *p = t->p;
    grm_status st = GRM_OK;
    int64_t step = t->step + 1, N = p->set.accumulate;
    int64_t g0 = (step - 1) * N, nb = N;
    if (t->total_mb && g0 + nb > t->total_mb) nb = t->total_mb - g0;
    if (nb < 1) return grm_errorf(GRM_EINTERNAL, "step %lld is past the run", (long long)step);

    int weighted = nb > 1 || t->nranks > 1;
    for (int32_t i = 0; i < t->nparams; i++)
        memset(t->params[i].grad, 0, (size_t)t->params[i].numel * sizeof(float));
    double loss = 0;
    int64_t samples = 0, tokens = 0, rows0 = t->tokens;
    batch *bt = NULL;
    double step_rows = 0;
    for (int64_t j = 0; j < nb; j++) {
        int64_t g = g0 + j + 1;
        if ((st = pf_take(t, g, &bt)) != GRM_OK) {
            if (t->stream && j == 0) stream_step(t, NULL, 1, &step_rows);   /* tell the others */
            goto out;
        }
        if (j == 0) {   /* the step's rows over the ranks (and, streaming, its end) */
            st = t->stream ? stream_step(t, bt, 0, &step_rows)
                           : step_rows_all(t, bt->step_rows, &step_rows);
            if (st != GRM_OK) goto out;
            if (t->ended) {   /* nothing left on any rank: no step */
                pf_release(t, g);
                goto out;
            }
        }
        /* the weight: this slice's share of the rows of the whole step (all ranks) */
        float weight = weighted ? (float)((double)bt->rows / step_rows) : 1.0f;
        double l = 0;
        int64_t bs = 0, bts = 0;
        if ((st = run_batch(t, bt, weight, &l, &bs, &bts)) != GRM_OK) goto out;
        loss += weight * l;
        samples += bs;
        tokens += bts;
        t->tokens += t->seqrank ? bt->foff[p->seq_feature][bt->b] : bt->rows;
        if (N > 1) {
            stash_rows(t, bt);
            pf_release(t, g);
        }
        grm__scratch_reset();
    }
    int64_t my_samples = samples, my_tokens = tokens;   /* this rank's, for the balance report */
    if ((st = async_join(t)) != GRM_OK) goto out;
    if (t->nranks > 1 && (st = allreduce_step(t, &loss, &samples, &tokens)) != GRM_OK) goto out;
    double t2 = now_s();
    for (int32_t i = 0; i < t->nparams; i++) {
        dparam *dp = &t->params[i];
        dp->steps++;
        if ((st = t->dops->step(t->dopt, dp->value, dp->state, dp->grad, dp->numel, dp->steps))
            != GRM_OK)
            goto out;
    }
    if (N > 1) {
        st = update_accumulated(t, step);
    } else if (t->async) {   /* the update waits for the next step's lookup */
        for (int32_t i = 0; i < p->nphys; i++) {
            struct pending *q = &t->pend[i];
            q->n = bt->tab[i].nu;
            memcpy(q->keys, bt->tab[i].keys, (size_t)q->n * sizeof *q->keys);
            memcpy(q->grads, t->ws[i].grads, (size_t)(q->n * t->ws[i].dim) * sizeof(float));
        }
        t->pend_step = step;
        pf_release(t, g0 + 1);
    } else {
        for (int32_t i = 0; i < p->nphys && st == GRM_OK; i++)
            st = update_table(t, i, bt->tab[i].keys, t->ws[i].grads, bt->tab[i].nu, step, 1);
        pf_release(t, g0 + 1);
    }
    if (st != GRM_OK) goto out;
    t->t_opt += now_s() - t2;
    t->step = step;
    t->step_tokens = tokens;
    t->my_tokens = my_tokens;
    t->my_samples = my_samples;
    *loss_out = loss;
    *samples_out = samples;
out:
    if (st != GRM_OK) {
        async_join(t);
        t->tokens = rows0;
        for (int32_t i = 0; i < p->nphys; i++) t->ws[i].an = 0;
    }
    grm__scratch_reset();
    return st;
}

/* ---- evaluation: leave-one-out, full ranking over the catalog ---- */

typedef struct rank_ctx {
    trainer *t;
    int64_t b;
    int split;                 /* 0 valid, 1 test */
    int popularity;            /* score by training popularity instead of the model */
    grm__rank_acc *acc;        /* [b] per-row results merged afterwards */
    int64_t *ranks;            /* [b] */
} rank_ctx;

static int64_t catalog_index(const grm__dataset *ds, int64_t id)
{
    int64_t lo = 0, hi = ds->ncatalog - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (ds->catalog_ids[mid] == id) return mid;
        if (ds->catalog_ids[mid] < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static grm_status rank_range(void *vctx, int64_t lo, int64_t hi)
{
    rank_ctx *c = vctx;
    trainer *t = c->t;
    const grm__dataset *ds = t->ds;
    int64_t C = ds->ncatalog;
    for (int64_t k = lo; k < hi; k++) {
        int64_t u = t->eb.users[k], end = t->eb.hist_end[k];
        int64_t target = ds->items[end];
        float *sc = t->scores + k * C;
        if (c->popularity)
            for (int64_t j = 0; j < C; j++) sc[j] = (float)ds->catalog_counts[j];
        /* items already in the user's history are not candidates */
        for (int64_t j = ds->offsets[u]; j < end; j++) {
            int64_t ci = catalog_index(ds, ds->items[j]);
            if (ci >= 0 && ds->items[j] != target) sc[ci] = -FLT_MAX;
        }
        int64_t ti = catalog_index(ds, target);
        float ts = sc[ti];
        int64_t rank = 0;
        for (int64_t j = 0; j < C; j++)
            rank += sc[j] > ts || (sc[j] == ts && j < ti);
        c->ranks[k] = rank;
    }
    return GRM_OK;
}

/* Evaluation is sharded over the ranks: rank r scores its contiguous share [*lo, *hi) of
 * n items (users or rows) in *nb batches of at most EB, the same *nb on every rank because
 * the lookups are collective (a rank past its share looks up nothing). With input =
 * sharded, n counts this rank's own items, all of them its share, and *nb is the most
 * any rank needs. */
static grm_status eval_share(const trainer *t, int64_t n, int64_t EB, int64_t *lo, int64_t *hi,
                             int64_t *nb)
{
    if (t->sharded) {
        const grm_comm_handle *c = &t->p->comm_handle;
        *lo = 0;
        *hi = n;
        *nb = (n + EB - 1) / EB;
        grm_status st = c->ops->allreduce(c->inst, nb, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX);
        if (st != GRM_OK) grm_error_prefix("evaluation: agreeing on the batches: ");
        return st;
    }
    const int64_t N = t->nranks, per = (n + N - 1) / N;
    *lo = n * t->rank / N;
    *hi = n * (t->rank + 1) / N;
    *nb = (per + EB - 1) / EB;
    return GRM_OK;
}

/* Every rank's `bytes` bytes at `mine`, in rank order, into all [nranks * bytes]. */
static grm_status gather_bytes(trainer *t, void *all, const void *mine, size_t bytes)
{
    grm_status st = grm__gather_bytes(&t->p->comm_handle, all, mine, bytes);
    if (st != GRM_OK) grm_error_prefix("evaluation: gathering the ranks' results: ");
    return st;
}

/* The ranks' accumulators summed in rank order, on every rank. */
static grm_status merge_accs(trainer *t, grm__rank_acc *acc)
{
    if (t->nranks == 1) return GRM_OK;
    grm__rank_acc *all = calloc((size_t)t->nranks, sizeof *all);
    if (!all) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm_status st = gather_bytes(t, all, acc, sizeof *acc);
    if (st == GRM_OK) {
        grm__rank_acc sum = all[0];
        for (int32_t r = 1; r < t->nranks; r++) grm__rank_acc_merge(&sum, &all[r]);
        *acc = sum;
    }
    free(all);
    return st;
}

/* Rank the split's targets for the evaluated users (this rank's share); the results of all
 * ranks into acc (and pop). */
static grm_status evaluate(trainer *t, int split, grm__rank_acc *acc, grm__rank_acc *pop)
{
    grm__pipeline *p = t->p;
    grm__dataset *ds = t->ds;
    grm_status st;
    int64_t C = ds->ncatalog, EB = p->set.eval_batch;
    int32_t D = p->tables[t->item_table].dim, L = p->ndense + 1;
    grm__rank_acc_init(acc, &p->set.topk);
    if (pop) grm__rank_acc_init(pop, &p->set.topk);
    st = grm__sparse_plan_encode(p->plan, t->item_table, t->cat_keys, ds->catalog_ids, C);
    if (st == GRM_OK && t->dist)
        st = grm__dist_lookup(t->dist, t->item_phys, t->cat_keys, NULL, C, 0, t->cat_rows, 0);
    else if (st == GRM_OK)
        st = t->eops->lookup(p->emb.inst, t->cat_rows, t->item_phys, t->cat_keys, C, 0);
    if (st != GRM_OK) return st;
    int64_t *ranks = xalloc((size_t)EB * sizeof *ranks);
    if (!ranks) return GRM_ENOMEM;
    int64_t ne = 0, lo, hi, nb;
    for (int64_t u = 0; u < ds->nusers; u++) ne += ds->has_eval[u];
    if ((st = eval_share(t, ne, EB, &lo, &hi, &nb)) != GRM_OK) {
        grm__free(CPU, ranks);
        return st;
    }
    int64_t u0 = 0, seen = 0;   /* the next user, and evaluated users before it */
    for (int64_t ib = 0; ib < nb; ib++) {
        int64_t b = 0;
        for (; u0 < ds->nusers && b < EB && seen < hi; u0++) {
            if (!ds->has_eval[u0]) continue;
            if (seen++ < lo) continue;
            t->eb.users[b] = u0;
            t->eb.hist_end[b] = ds->train_end[u0] + split;
            b++;
        }
        t->eb.b = b;
        if ((st = assemble_ids(t, &t->eb, 0)) != GRM_OK
            || (st = embed_batch(t, &t->eb, 0)) != GRM_OK)
            break;
        if (b == 0) continue;   /* past this rank's share: the collective lookup only */
        if ((st = dense_forward(t, &t->eb, 0, t->step)) != GRM_OK) break;
        const float *q = t->acts[L];   /* [b, D] queries */
        if (t->seqmode) {   /* a sequence's query is its last token's output */
            const int64_t *off = t->eb.foff[p->seq_feature];
            for (int64_t k = 0; k < b; k++) {
                if (off[k + 1] > off[k])
                    memcpy(t->queries + k * D, t->acts[L] + (off[k + 1] - 1) * D,
                           (size_t)D * sizeof(float));
                else
                    memset(t->queries + k * D, 0, (size_t)D * sizeof(float));
            }
            q = t->queries;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)C, D, 1.0f,
                    q, D, t->cat_rows, D, 0.0f, t->scores, (int)C);
        rank_ctx rc = { .t = t, .b = b, .split = split, .ranks = ranks };
        if ((st = grm__parallel_for(b, 8, rank_range, &rc)) != GRM_OK) break;
        for (int64_t k = 0; k < b; k++) grm__rank_acc_add(acc, ranks[k]);
        if (pop) {
            rc.popularity = 1;
            if ((st = grm__parallel_for(b, 8, rank_range, &rc)) != GRM_OK) break;
            for (int64_t k = 0; k < b; k++) grm__rank_acc_add(pop, ranks[k]);
        }
        grm__scratch_reset();
    }
    grm__free(CPU, ranks);
    if (st == GRM_OK) st = merge_accs(t, acc);
    if (st == GRM_OK && pop) st = merge_accs(t, pop);
    return st;
}

static void emit_ranks(trainer *t, const char *split, const char *prefix,
                       const grm__rank_acc *a)
{
    char name[64];
    double n = a->n ? (double)a->n : 1.0;
    for (int32_t i = 0; i < a->nk; i++) {
        snprintf(name, sizeof name, "%shr@%lld", prefix, (long long)a->k[i]);
        grm__metrics_emit(t->metrics, t->step, split, name, a->hr[i] / n);
        snprintf(name, sizeof name, "%sndcg@%lld", prefix, (long long)a->k[i]);
        grm__metrics_emit(t->metrics, t->step, split, name, a->ndcg[i] / n);
    }
    snprintf(name, sizeof name, "%smrr", prefix);
    grm__metrics_emit(t->metrics, t->step, split, name, a->mrr / n);
    if (!prefix[0]) grm__metrics_emit(t->metrics, t->step, split, "users", (double)a->n);
}

static int64_t pick_k(const grm__rank_acc *a, int64_t want, int32_t *idx)
{
    for (int32_t i = 0; i < a->nk; i++)
        if (a->k[i] == want) {
            *idx = i;
            return want;
        }
    *idx = a->nk - 1;
    return a->k[a->nk - 1];
}

/* Replace *n rows of scores and labels [*n, T] and groups [*n] with every rank's rows, in
 * rank order (input = sharded: each rank scored its own rows). */
static grm_status gather_rows(trainer *t, int64_t *n, float **scores, float **labels,
                              int64_t **groups, int32_t T)
{
    const grm_comm_handle *c = &t->p->comm_handle;
    void *s2 = NULL, *l2 = NULL, *g2 = NULL;
    int64_t total = 0;
    grm_status st = grm__gatherv(c, *scores, *n * T, sizeof(float), &s2, &total);
    if (st == GRM_OK) st = grm__gatherv(c, *labels, *n * T, sizeof(float), &l2, &total);
    if (st == GRM_OK) st = grm__gatherv(c, *groups, *n, sizeof(int64_t), &g2, &total);
    if (st != GRM_OK) {
        free(s2);
        free(l2);
        free(g2);
        grm_error_prefix("evaluation: gathering the ranks' rows: ");
        return st;
    }
    grm__free(CPU, *scores);
    grm__free(CPU, *labels);
    grm__free(CPU, *groups);
    *scores = s2;
    *labels = l2;
    *groups = g2;
    *n = total;
    return GRM_OK;
}

/* Ranking evaluation of split (1 valid, 2 test): AUC, GAUC (grouped by user_column,
 * MTGRBoost §6.1) and logloss per task, beside the logloss of predicting the training
 * positive rate for every row (the constant baseline; its AUC is 0.5). */
static grm_status run_eval_ranking(trainer *t, int split, double *score)
{
    grm__pipeline *p = t->p;
    grm__dataset *ds = t->ds;
    const char *name = split == 1 ? "valid" : "test";
    int32_t T = ds->ntasks, L = p->ndense + 1;
    int64_t n = ds->nsplit[split], EB = p->set.eval_batch;
    const int64_t *rows = ds->split_rows[split];
    grm_status st = GRM_OK;
    if (n == 0 && !t->sharded) return GRM_OK;   /* sharded: the others may have rows */
    const int64_t n1 = n ? n : 1;
    float *scores = xalloc((size_t)(n1 * T) * sizeof(float));
    float *labels = xalloc((size_t)(n1 * T) * sizeof(float));
    float *col_s = NULL, *col_y = NULL;
    int64_t *groups = xalloc((size_t)n1 * sizeof(int64_t));
    if (!scores || !labels || !groups) {
        st = GRM_ENOMEM;
        goto out;
    }
    double logloss = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rows[i];
        memcpy(labels + i * T, ds->labels + r * T, (size_t)T * sizeof(float));
        groups[i] = ds->groups ? ds->groups[r] : 0;
    }
    memset(scores, 0, (size_t)(n * T) * sizeof(float));
    int64_t lo, hi, nb;
    if ((st = eval_share(t, n, EB, &lo, &hi, &nb)) != GRM_OK) goto out;
    for (int64_t ib = 0; ib < nb; ib++) {   /* this rank's share of the rows */
        int64_t r0 = lo + ib * EB, b = hi - r0 < EB ? hi - r0 : EB;
        if (b < 0) b = 0;
        for (int64_t k = 0; k < b; k++) t->eb.users[k] = rows[r0 + k];
        t->eb.b = b;
        t->eb.streamed = 0;
        if ((st = assemble_ids(t, &t->eb, 0)) != GRM_OK
            || (st = embed_batch(t, &t->eb, 0)) != GRM_OK)
            goto out;
        if (b == 0) continue;   /* the collective lookup only */
        if ((st = dense_forward(t, &t->eb, 0, t->step)) != GRM_OK) goto out;
        grm_loss_io io = { .struct_size = sizeof io, .ntasks = T, .rows = b, .dim = T,
                           .pred = t->acts[L], .labels = labels + r0 * T,
                           .scores = scores + r0 * T };
        if ((st = t->hops->loss(p->head.inst, &io)) != GRM_OK) goto out;
        logloss += io.loss * (double)b;
        grm__scratch_reset();
    }
    if (t->nranks > 1) {
        const grm_comm_handle *c = &p->comm_handle;
        double *lls = calloc((size_t)t->nranks, sizeof *lls);
        if (!lls) {
            st = grm_errorf(GRM_ENOMEM, "out of memory");
            goto out;
        }
        if (t->sharded)   /* every rank's own rows, in rank order */
            st = gather_rows(t, &n, &scores, &labels, &groups, T);
        else              /* every rank's scores (zeros elsewhere: the sum is exact) */
            st = c->ops->allreduce(c->inst, scores, n * T, GRM_DTYPE_F32, GRM_REDUCE_SUM);
        if (st == GRM_OK) st = gather_bytes(t, lls, &logloss, sizeof logloss);
        logloss = 0;
        for (int32_t r = 0; r < t->nranks; r++) logloss += lls[r];
        free(lls);
        if (st != GRM_OK) goto out;
    }
    if (n == 0) goto out;
    col_s = xalloc((size_t)n * sizeof(float));
    col_y = xalloc((size_t)n * sizeof(float));
    if (!col_s || !col_y) {
        st = GRM_ENOMEM;
        goto out;
    }
    for (int32_t k = 0; k < T; k++) {
        char metric[128];
        const char *task = p->set.label_columns.v[k];
        const char *sep = T > 1 ? "." : "";
        double prior = ds->prior[k], pl = 0;
        for (int64_t i = 0; i < n; i++) {
            col_s[i] = scores[i * T + k];
            col_y[i] = labels[i * T + k];
            double y = col_y[i], q = prior < 1e-7 ? 1e-7 : prior > 1 - 1e-7 ? 1 - 1e-7 : prior;
            pl -= y * log(q) + (1 - y) * log(1 - q);
        }
        double auc = grm__auc(col_s, col_y, n);
        if (k == 0 && score) *score = auc;
        snprintf(metric, sizeof metric, "auc%s%s", sep, T > 1 ? task : "");
        grm__metrics_emit(t->metrics, t->step, name, metric, auc);
        double gauc = NAN;
        if (ds->groups) {
            gauc = grm__gauc(col_s, col_y, groups, n);
            snprintf(metric, sizeof metric, "gauc%s%s", sep, T > 1 ? task : "");
            grm__metrics_emit(t->metrics, t->step, name, metric, gauc);
        }
        snprintf(metric, sizeof metric, "prior_logloss%s%s", sep, T > 1 ? task : "");
        grm__metrics_emit(t->metrics, t->step, name, metric, pl / (double)n);
        if (!t->opts->quiet)
            grm__log(GRM_LOG_INFO, "grmhost", "step %lld %s%s%s: auc %.4f gauc %.4f over %lld "
                     "rows; constant-prior logloss %.4f", (long long)t->step, name,
                     T > 1 ? " " : "", T > 1 ? task : "", auc, gauc, (long long)n,
                     pl / (double)n);
    }
    /* the head reports the loss summed over tasks and averaged over rows */
    grm__metrics_emit(t->metrics, t->step, name, "logloss", logloss / (double)n);
    grm__metrics_emit(t->metrics, t->step, name, "rows", (double)n);
    if (!t->opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "step %lld %s: logloss %.4f (summed over %d tasks)",
                 (long long)t->step, name, logloss / (double)n, T);
out:
    grm__free(CPU, scores);
    grm__free(CPU, labels);
    grm__free(CPU, col_s);
    grm__free(CPU, col_y);
    grm__free(CPU, groups);
    return st;
}

/* Evaluate split (0 valid, 1 test); *score (optional) gets the model-selection metric:
 * NDCG@select_k (the largest K when topk lacks it) for retrieval, the first task's AUC for
 * ranking. */
static grm_status run_eval_timed(trainer *t, int split, int with_pop, double *score);

static grm_status run_eval(trainer *t, int split, int with_pop, double *score)
{
    double t0 = now_s();
    grm_status st = async_flush(t);
    if (st == GRM_OK && t->stream && !t->stream_full) {   /* the held-out rows read so far */
        if ((st = stream_snapshot(t)) == GRM_OK && !t->stream_full && !t->opts->quiet)
            grm__log(GRM_LOG_INFO, "grmhost", "step %lld: input = stream: the first pass is "
                     "not read through, so validation and test cover the held-out rows read "
                     "so far", (long long)t->step);
    }
    if (st == GRM_OK) st = run_eval_timed(t, split, with_pop, score);
    t->t_eval += now_s() - t0;
    return st;
}

static grm_status run_eval_timed(trainer *t, int split, int with_pop, double *score)
{
    if (t->ranking) return run_eval_ranking(t, split + 1, score);
    grm__rank_acc acc, pop;
    const char *name = split ? "test" : "valid";
    grm_status st = evaluate(t, split, &acc, with_pop ? &pop : NULL);
    if (st != GRM_OK) return st;
    emit_ranks(t, name, "", &acc);
    if (with_pop) emit_ranks(t, name, "mostpop_", &pop);
    int32_t ki;
    int64_t k = pick_k(&acc, t->p->set.select_k, &ki);
    double n = acc.n ? (double)acc.n : 1.0;
    if (score) *score = acc.ndcg[ki] / n;
    if (!t->opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "step %lld %s: hr@%lld %.4f ndcg@%lld %.4f over %lld "
                 "users%s", (long long)t->step, name, (long long)k, acc.hr[ki] / n,
                 (long long)k, acc.ndcg[ki] / n, (long long)acc.n, "");
    if (with_pop && !t->opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "step %lld %s: most-popular baseline hr@%lld %.4f "
                 "ndcg@%lld %.4f", (long long)t->step, name, (long long)k, pop.hr[ki] / n,
                 (long long)k, pop.ndcg[ki] / n);
    return GRM_OK;
}

/* ---- checkpoints ---- */

typedef struct ckpt_list {
    grm_named_tensor *v;
    char **names;
    int64_t n, cap;
} ckpt_list;

static grm_status ckl_add(ckpt_list *l, const char *prefix, const char *name, grm_tensor t)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 64;
        grm_named_tensor *nv = realloc(l->v, (size_t)cap * sizeof *nv);
        char **nn = realloc(l->names, (size_t)cap * sizeof *nn);
        if (nv) l->v = nv;
        if (nn) l->names = nn;
        if (!nv || !nn) return grm_errorf(GRM_ENOMEM, "out of memory");
        l->cap = cap;
    }
    size_t len = strlen(prefix) + strlen(name) + 1;
    char *full = malloc(len);
    if (!full) return grm_errorf(GRM_ENOMEM, "out of memory");
    snprintf(full, len, "%s%s", prefix, name);
    l->names[l->n] = full;
    l->v[l->n] = (grm_named_tensor){ full, t };
    l->n++;
    return GRM_OK;
}

static void ckl_free(ckpt_list *l)
{
    for (int64_t i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    free(l->v);
}

static grm_tensor tensor1(void *data, int32_t dtype, int64_t n)
{
    return (grm_tensor){ .data = data, .dtype = dtype, .ndim = 1, .shape = { n, 1, 1, 1 },
                         .device = CPU };
}

static grm_status collect_state(trainer *t, ckpt_list *l, int64_t *steps_buf)
{
    grm__pipeline *p = t->p;
    grm_status st;
    for (int32_t k = 0;; k++) {
        grm_named_tensor nt;
        st = t->eops->tensors(p->emb.inst, k, &nt);
        if (st == GRM_ENOTFOUND) break;
        if (st != GRM_OK) return st;
        if ((st = ckl_add(l, "emb.", nt.name, nt.tensor)) != GRM_OK) return st;
    }
    for (int32_t i = 0; i < t->nparams; i++) {
        dparam *dp = &t->params[i];
        if ((st = ckl_add(l, "", dp->name, dp->shape)) != GRM_OK) return st;
        if (t->state_floats
            && (st = ckl_add(l, "optim.", dp->name,
                             tensor1(dp->state, GRM_DTYPE_F32, t->state_floats * dp->numel)))
                   != GRM_OK)
            return st;
        steps_buf[i] = dp->steps;
    }
    if ((st = ckl_add(l, "", "trainer.param_steps",
                      tensor1(steps_buf, GRM_DTYPE_I64, t->nparams))) != GRM_OK)
        return st;
    /* step, seed, examples, batch size, then the early-stopping state */
    t->ckpt_state[0] = t->step;
    t->ckpt_state[1] = p->set.seed;
    t->ckpt_state[2] = t->nex_all;
    t->ckpt_state[3] = p->set.batch_size;
    t->ckpt_state[4] = t->best_step;
    memcpy(&t->ckpt_state[5], &t->best_score, sizeof(double));
    t->ckpt_state[6] = t->bad_evals;
    return ckl_add(l, "", "trainer.state", tensor1(t->ckpt_state, GRM_DTYPE_I64, 7));
}

static int is_ckpt_name(const char *name, const char *ext, int64_t *step)
{
    char tail[32];
    long long s;
    if (sscanf(name, "step-%lld.%31s", &s, tail) != 2) return 0;
    if (strcmp(tail, ext) != 0) return 0;
    *step = s;
    return 1;
}

/* One pass over dir's step-N.ext checkpoints: the newest and the oldest (paths of cap
 * bytes, empty when none) and how many there are. A missing dir holds none. */
static grm_status scan_ckpts(const char *dir, const char *ext, char *newest, char *oldest,
                             size_t cap, int64_t *count)
{
    DIR *d = opendir(dir);
    int64_t hi = -1, lo = INT64_MAX, n = 0;
    newest[0] = oldest[0] = '\0';
    *count = 0;
    if (!d) {
        if (errno == ENOENT) return GRM_OK;
        return grm_errorf(GRM_EIO, "%s: cannot read checkpoint directory: %s", dir,
                          strerror(errno));
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s;
        if (!is_ckpt_name(e->d_name, ext, &s)) continue;
        n++;
        if (s > hi) {
            hi = s;
            snprintf(newest, cap, "%s/%s", dir, e->d_name);
        }
        if (s < lo) {
            lo = s;
            snprintf(oldest, cap, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    *count = n;
    return GRM_OK;
}

/* Newest checkpoint in dir into path [cap] (empty when none). */
static grm_status newest_ckpt(const char *dir, const char *ext, char *path, size_t cap)
{
    char oldest[4096];
    int64_t n;
    return scan_ckpts(dir, ext, path, oldest, cap < sizeof oldest ? cap : sizeof oldest, &n);
}

/* Delete the oldest checkpoints until at most keep remain. */
static void prune_ckpts(const char *dir, const char *ext, int64_t keep)
{
    char newest[4096], oldest[4096];
    int64_t n;
    while (scan_ckpts(dir, ext, newest, oldest, sizeof oldest, &n) == GRM_OK && n > keep
           && oldest[0] && unlink(oldest) == 0)
        ;
}

/* mkdir -p */
static grm_status make_dirs(const char *dir)
{
    char buf[4096];
    size_t n = strlen(dir);
    if (n >= sizeof buf)
        return grm_errorf(GRM_EINVAL, "%s: checkpoint directory path is too long", dir);
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return grm_errorf(GRM_EIO, "%s: cannot create checkpoint directory: %s", buf,
                              strerror(errno));
        buf[i] = c;
    }
    return GRM_OK;
}

/* Write a checkpoint named `file` in the checkpoint directory (NULL: step-N.ext, with
 * pruning of the oldest). */
static grm_status save_ckpt_as(trainer *t, const char *file)
{
    grm__pipeline *p = t->p;
    const grm_ckpt_ops *kops = p->ckpt.plugin->info->ops;
    const char *dir = t->ckdir;
    char path[4096 + 64], meta[1024];
    ckpt_list l = { 0 };
    grm_status st;
    if (!dir[0]) return GRM_OK;
    if ((st = make_dirs(dir)) != GRM_OK) return st;
    int64_t *steps_buf = calloc((size_t)t->nparams + 1, sizeof *steps_buf);
    if (!steps_buf) return grm_errorf(GRM_ENOMEM, "out of memory");
    if ((st = collect_state(t, &l, steps_buf)) != GRM_OK) goto out;
    if (file)
        snprintf(path, sizeof path, "%s/%s.%s", dir, file, kops->extension(p->ckpt.inst));
    else
        snprintf(path, sizeof path, "%s/step-%010lld.%s", dir, (long long)t->step,
                 kops->extension(p->ckpt.inst));
    /* the manifest of the shard: world size, the sharding function (core/dist.h
     * grm__dist_owner_of) and its replica group, the step */
    const int64_t grp = p->set.sparse_group > 0 ? p->set.sparse_group : t->nranks;
    snprintf(meta, sizeof meta, "{\"format\":\"grm-train\",\"grm_version\":\"%s\","
             "\"pipeline\":\"%s\",\"step\":%lld,\"world_size\":%d,\"rank\":%d,\"seed\":%lld,"
             "\"sharding\":\"fmix64(key) %% group + rank / group * group\","
             "\"sparse_group\":%lld}",
             GRM_VERSION_STRING, p->set.name, (long long)t->step, t->nranks, t->rank,
             (long long)p->set.seed, (long long)grp);
    if ((st = kops->save(p->ckpt.inst, path, l.v, l.n, meta)) != GRM_OK) goto out;
    if (!file) prune_ckpts(dir, kops->extension(p->ckpt.inst), p->set.ckpt_keep);
    if (!t->opts->quiet) grm__log(GRM_LOG_INFO, "grmhost", "checkpoint %s", path);
out:
    ckl_free(&l);
    free(steps_buf);
    return st;
}

typedef struct load_ctx {
    trainer *t;
    int64_t loaded;
    int64_t state[7];
    int have_state;
    int64_t *param_steps;
    const char *path;
} load_ctx;

static grm_status load_visit(void *user, const grm_named_tensor *nt)
{
    load_ctx *c = user;
    trainer *t = c->t;
    const char *name = nt->name;
    int64_t numel = 1;
    for (int32_t d = 0; d < nt->tensor.ndim; d++) numel *= nt->tensor.shape[d];
    if (strncmp(name, "emb.", 4) == 0) {
        grm_named_tensor inner = { name + 4, nt->tensor };
        grm_status st = t->eops->load(t->p->emb.inst, &inner);
        if (st != GRM_OK) {
            grm_error_prefix("%s: tensor '%s': ", c->path, name);
            return st;
        }
        c->loaded++;
        return GRM_OK;
    }
    if (strcmp(name, "trainer.state") == 0 && (numel == 4 || numel == 7)
        && nt->tensor.dtype == GRM_DTYPE_I64) {
        memcpy(c->state, nt->tensor.data, (size_t)numel * sizeof(int64_t));
        c->have_state = 1;
        return GRM_OK;
    }
    if (strcmp(name, "trainer.param_steps") == 0 && nt->tensor.dtype == GRM_DTYPE_I64) {
        if (numel != t->nparams)
            return grm_errorf(GRM_EFORMAT, "%s: holds %lld dense parameters, this pipeline has "
                              "%d; it was written by a different model", c->path,
                              (long long)numel, t->nparams);
        memcpy(c->param_steps, nt->tensor.data, (size_t)numel * sizeof(int64_t));
        return GRM_OK;
    }
    int optim = strncmp(name, "optim.", 6) == 0;
    const char *pname = optim ? name + 6 : name;
    for (int32_t i = 0; i < t->nparams; i++) {
        dparam *dp = &t->params[i];
        if (strcmp(dp->name, pname) != 0) continue;
        int64_t want = optim ? t->state_floats * dp->numel : dp->numel;
        if (numel != want || nt->tensor.dtype != GRM_DTYPE_F32)
            return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' has %lld elements, this pipeline "
                              "expects %lld; it was written by a different model", c->path,
                              name, (long long)numel, (long long)want);
        memcpy(optim ? dp->state : dp->value, nt->tensor.data, (size_t)want * sizeof(float));
        c->loaded++;
        return GRM_OK;
    }
    return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' belongs to no part of this pipeline; it was "
                      "written by a different model (start over with --fresh)", c->path, name);
}

/* Load checkpoint `path`: this rank's own, or (owned_only) one written by rank r mod N of N
 * ranks, of which only the rows this rank owns are kept (the modulo scheme, reshard.h). */
static grm_status load_ckpt_as(trainer *t, const char *path, int owned_only)
{
    const grm_ckpt_ops *kops = t->p->ckpt.plugin->info->ops;
    load_ctx c = { .t = t, .path = path };
    c.param_steps = calloc((size_t)t->nparams + 1, sizeof *c.param_steps);
    if (!c.param_steps) return grm_errorf(GRM_ENOMEM, "out of memory");
    int64_t kept = 0, dropped = 0;
    grm_status st = owned_only
        ? grm__reshard_load_owned(t->p, kops, t->p->ckpt.inst, path, t->rank, t->nranks,
                                  load_visit, &c, &kept, &dropped)
        : kops->load(t->p->ckpt.inst, path, load_visit, &c);
    if (st == GRM_OK && owned_only)
        grm__log(GRM_LOG_INFO, "grmhost", "%s: kept the %lld keyed rows this rank owns, "
                 "left %lld to the other ranks", path, (long long)kept, (long long)dropped);
    if (st == GRM_OK && !c.have_state)
        st = grm_errorf(GRM_EFORMAT, "%s: has no trainer.state tensor; not a grmhost training "
                        "checkpoint", path);
    int64_t expect = t->nparams * (t->state_floats ? 2 : 1);
    if (st == GRM_OK && c.loaded < expect)
        st = grm_errorf(GRM_EFORMAT, "%s: restores %lld tensors, fewer than the %lld dense "
                        "tensors of this pipeline", path, (long long)c.loaded,
                        (long long)expect);
    if (st == GRM_OK) {
        t->step = c.state[0];
        t->best_step = c.state[4];
        memcpy(&t->best_score, &c.state[5], sizeof(double));
        t->bad_evals = c.state[6];
        for (int32_t i = 0; i < t->nparams; i++) t->params[i].steps = c.param_steps[i];
        if (c.state[2] != t->nex_all || c.state[3] != t->p->set.batch_size)
            grm__log(GRM_LOG_WARN, "grmhost", "%s: written with %lld examples and batch size "
                     "%lld, now %lld and %lld: the example order differs from the original run",
                     path, (long long)c.state[2], (long long)c.state[3],
                     (long long)t->nex_all, (long long)t->p->set.batch_size);
    }
    free(c.param_steps);
    return st;
}

static grm_status load_ckpt(trainer *t, const char *path)
{
    return load_ckpt_as(t, path, 0);
}

/* The step of checkpoint file `path` (its name step-S.ext), or -1. */
static int64_t step_of(const char *path, const char *ext)
{
    const char *base = strrchr(path, '/');
    int64_t s;
    return path[0] && is_ckpt_name(base ? base + 1 : path, ext, &s) ? s : -1;
}

/* Resume from the newest checkpoint: this job's own, or, when [checkpoint] dir holds a newer
 * step written by N other ranks, that one. N -> M = kN is read directly by MTGRBoost §5.2's
 * modulo scheme (reshard.h: rank r reads rank r mod N's file and keeps its own rows); other
 * world sizes are refused with `grmhost reshard` as the fix. Every rank decides alike: the
 * steps compared are the minimum (the step every rank has) and maximum over the ranks. */
static grm_status resume(trainer *t)
{
    const grm__pipeline *p = t->p;
    const grm_ckpt_ops *kops = p->ckpt.plugin->info->ops;
    const char *ext = kops->extension(p->ckpt.inst);
    const grm_comm_handle *c = &p->comm_handle;
    const int32_t N = t->ck_other, M = t->nranks;
    char path[4096], src[4096];
    grm_status st = newest_ckpt(t->ckdir, ext, path, sizeof path);
    if (st != GRM_OK) return st;
    int64_t own = step_of(path, ext), other = -1, other_max = -1;
    if (N) {
        if ((st = grm__reshard_source(p->set.ckpt_dir, ext, t->rank, N, -1, &other, NULL, 0))
            != GRM_OK)
            return st;
        int64_t lo[2] = { own, other }, hi = other;
        if (M > 1 && ((st = c->ops->allreduce(c->inst, lo, 2, GRM_DTYPE_I64, GRM_REDUCE_MIN))
                      != GRM_OK
                      || (st = c->ops->allreduce(c->inst, &hi, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX))
                      != GRM_OK))
            return st;
        own = lo[0];
        other = lo[1];
        other_max = hi;
    }
    if (other_max > own) {   /* the other world size holds the newest step */
        if (!grm__reshard_nests(p->set.sparse_group, N, M))
            return grm_errorf(GRM_EINVAL, "%s: checkpoints there were written by %d rank%s and "
                              "this job has %d; resuming on another world size needs `grmhost "
                              "reshard FILE.ini -n %d` first (it moves the old ones aside), or "
                              "run with %d ranks or a multiple of %d, or pass --fresh",
                              p->set.ckpt_dir, N, N > 1 ? "s" : "", M, M, N, N);
        int64_t have;
        if (other >= 0
            && (st = grm__reshard_source(p->set.ckpt_dir, ext, t->rank, N, other, &have, src,
                                         sizeof src)) != GRM_OK)
            return st;
        if (other < 0 || !src[0])
            return grm_errorf(GRM_ENOTFOUND, "%s: rank %d of the %d that wrote checkpoints "
                              "there has no step-%lld file, the newest step all of them wrote; "
                              "restore it, or rewrite another step with `grmhost reshard "
                              "FILE.ini -n %d --step S`", p->set.ckpt_dir, (int)(t->rank % N),
                              N, (long long)other, M);
        if ((st = load_ckpt_as(t, src, 1)) != GRM_OK) {
            grm_error_suffix("; `grmhost reshard FILE.ini -n %d` rewrites the checkpoints for "
                             "this job instead, or pass --fresh", M);
            return st;
        }
        grm__log(GRM_LOG_INFO, "grmhost", "resuming %d ranks from step %lld of the %d-rank "
                 "checkpoints in %s: rank r reads rank r mod %d's file only (MTGRBoost §5.2); "
                 "they stay where they are", M, (long long)t->step, N, p->set.ckpt_dir, N);
        return GRM_OK;
    }
    if (!path[0]) return GRM_OK;
    if (N)
        grm__log(GRM_LOG_WARN, "grmhost", "%s also holds checkpoints of %d rank%s, none newer "
                 "than this job's step %lld; they are ignored", p->set.ckpt_dir, N,
                 N > 1 ? "s" : "", (long long)own);
    if ((st = load_ckpt(t, path)) != GRM_OK) {
        grm_error_suffix("; to resume from the checkpoint before it, move this one away, or "
                         "pass --fresh to start over");
        return st;
    }
    grm__log(GRM_LOG_INFO, "grmhost", "resuming from %s at step %lld (use --fresh to start "
             "over)", path, (long long)t->step);
    return GRM_OK;
}

/* Restore early stopping's best model: this rank's best.ext, or, when this job resumed from
 * N other ranks before it saved a best of its own, rank r mod N's (modulo scheme). */
static grm_status load_best(trainer *t, char *path, size_t cap)
{
    const grm__pipeline *p = t->p;
    const grm_ckpt_ops *kops = p->ckpt.plugin->info->ops;
    const char *ext = kops->extension(p->ckpt.inst);
    snprintf(path, cap, "%s/best.%s", t->ckdir, ext);
    const int32_t N = t->ck_other;
    if (access(path, R_OK) == 0 || !N || !grm__reshard_nests(p->set.sparse_group, N, t->nranks))
        return load_ckpt(t, path);
    char src[4096];
    grm__reshard_source_dir(src, sizeof src, p->set.ckpt_dir, t->rank, N);
    snprintf(path, cap, "%s/best.%s", src, ext);
    return load_ckpt_as(t, path, 1);
}

static grm_status save_ckpt(trainer *t)
{
    double t0 = now_s();
    grm_status st = async_flush(t);
    if (st == GRM_OK) st = save_ckpt_as(t, NULL);
    t->t_ckpt += now_s() - t0;
    return st;
}

/* Early stopping: record a validation score; keep the model when it is the best so far.
 * Sets *stop when the patience is exhausted. */
static grm_status track_best(trainer *t, double score, int *stop)
{
    int64_t patience = t->p->set.early_stop;
    *stop = 0;
    if (patience <= 0) return GRM_OK;
    if (t->best_step == 0 || score > t->best_score) {
        t->best_score = score;
        t->best_step = t->step;
        t->bad_evals = 0;
        return save_ckpt_as(t, "best");
    }
    if (++t->bad_evals >= patience) {
        grm__log(GRM_LOG_INFO, "grmhost", "early stop at step %lld: no better validation "
                 "score in %lld runs (best %.4f at step %lld)", (long long)t->step,
                 (long long)t->bad_evals, t->best_score, (long long)t->best_step);
        *stop = 1;
    }
    return GRM_OK;
}

/* ---- signals and progress ---- */

static void on_signal(uv_signal_t *h, int signum)
{
    trainer *t = h->data;
    t->stop = signum;
}

/* The step's samples and tokens on this rank, and the largest token difference between
 * ranks (TurboGR Table 3's figure; 0 on one rank). */
/* The store's counters per physical table, when it has the stats op: rows held, bytes,
 * misses and evictions (MTGRBoost §4.1 eviction is reported, not silent). */
static void emit_tables(trainer *t)
{
    const grm__pipeline *p = t->p;
    if (!GRM_HAS_OP(grm_emb_ops, t->eops, stats)) return;
    for (int32_t T = 0; T < p->nphys; T++) {
        grm_emb_stats es = { 0 };
        if (t->eops->stats(p->emb.inst, T, &es) != GRM_OK) continue;
        char name[256];
        const struct { const char *what; int64_t v; } c[] = {
            { "rows", es.rows }, { "bytes", es.bytes }, { "misses", es.misses },
            { "evictions", es.evictions },
        };
        for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
            snprintf(name, sizeof name, "table.%s.%s", p->phys[T].name, c[i].what);
            grm__metrics_emit(t->metrics, t->step, "train", name, (double)c[i].v);
        }
    }
}

/* The exchange of model-parallel rows per step since the last logged one (MTGRBoost §4.3,
 * FusedRec Fig. 7): ids before and after stage-1 dedup, ids sent to other ranks, ids the
 * owners looked up after stage 2, bytes of ids and of rows, alltoall rounds; this rank's. */
static void emit_dist(trainer *t)
{
    if (!t->dist || t->step <= t->dstep) return;
    static const char *const opn[2] = { "lookup", "update" };
    double n = (double)(t->step - t->dstep);
    for (int32_t op = 0; op < 2; op++) {
        grm__dist_stats tot, *l = &t->dlast[op];
        if (grm__dist_counters(t->dist, -1, op, NULL, &tot) != GRM_OK) continue;
        const struct { const char *what; int64_t v; } c[] = {
            { "ids_raw", tot.ids_raw - l->ids_raw },
            { "ids_unique", tot.ids_unique - l->ids_unique },
            { "ids_sent", tot.ids_sent - l->ids_sent },
            { "ids_store", tot.ids_store - l->ids_store },
            { "id_bytes", tot.id_bytes - l->id_bytes },
            { "row_bytes", tot.row_bytes - l->row_bytes },
            { "rounds", tot.rounds - l->rounds },
        };
        for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
            char name[64];
            snprintf(name, sizeof name, "dist.%s.%s", opn[op], c[i].what);
            grm__metrics_emit(t->metrics, t->step, "train", name, (double)c[i].v / n);
        }
        *l = tot;
    }
    t->dstep = t->step;
}

/* Data parallelism keeps the dense parameters identical on every rank; a hash of their
 * bits, compared at each logged step (max and min over the ranks), proves it. */
static grm_status check_replicas(trainer *t)
{
    if (t->nranks < 2) return GRM_OK;
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int32_t i = 0; i < t->nparams; i++) {
        const uint32_t *v = (const uint32_t *)t->params[i].value;
        for (int64_t k = 0; k < t->params[i].numel; k++) h = grm_mix64(h ^ v[k]);
    }
    int64_t mm[2] = { (int64_t)(h >> 1), -(int64_t)(h >> 1) };
    const grm_comm_handle *c = &t->p->comm_handle;
    grm_status st = c->ops->allreduce(c->inst, mm, 2, GRM_DTYPE_I64, GRM_REDUCE_MAX);
    if (st != GRM_OK) return st;
    if (mm[0] != -mm[1])
        return grm_errorf(GRM_EINTERNAL, "step %lld: the dense parameters differ across ranks "
                          "(data-parallel replicas diverged)", (long long)t->step);
    return GRM_OK;
}

/* The step's balance (MTGRBoost §5.1, TurboGR Table 3): samples and tokens of the step, and
 * with several ranks the least and most any rank had, and token_spread, the largest token
 * difference between two ranks. */
static grm_status emit_balance(trainer *t, int64_t samples)
{
    const grm_comm_handle *c = &t->p->comm_handle;
    grm__metrics_emit(t->metrics, t->step, "train", "samples", (double)samples);
    grm__metrics_emit(t->metrics, t->step, "train", "tokens", (double)t->step_tokens);
    int64_t spread = 0;
    if (t->nranks > 1) {
        int64_t mm[4] = { t->my_tokens, -t->my_tokens, t->my_samples, -t->my_samples };
        grm_status st = c->ops->allreduce(c->inst, mm, 4, GRM_DTYPE_I64, GRM_REDUCE_MAX);
        if (st != GRM_OK) return st;
        spread = mm[0] + mm[1];
        grm__metrics_emit(t->metrics, t->step, "train", "rank_tokens_min", (double)-mm[1]);
        grm__metrics_emit(t->metrics, t->step, "train", "rank_tokens_max", (double)mm[0]);
        grm__metrics_emit(t->metrics, t->step, "train", "rank_samples_min", (double)-mm[3]);
        grm__metrics_emit(t->metrics, t->step, "train", "rank_samples_max", (double)mm[2]);
    }
    grm__metrics_emit(t->metrics, t->step, "train", "token_spread", (double)spread);
    return GRM_OK;
}

/* --profile: where the time of the run went, per stage. The reader and the transforms run
 * once, before the first step (the leave-one-out split needs every user's whole history);
 * the per-batch data work (samples, ids, targets, segment unique, keys) runs on the data
 * thread with [train] prefetch > 0, and only the time the trainer waited for it counts in
 * the loop. */
static void print_profile(const trainer *t, double loop_s, int64_t steps)
{
    const int ahead = t->p->set.prefetch > 0;
    /* input = stream: the reading after step 1 is part of the batch work (t_batch) */
    const double sread = t->stream ? t->src.read_s - t->t_read0 : 0;
    const struct { const char *name; double s; int in_loop; const char *what; } row[] = {
        { "read+transform", t->stream ? sread : t->t_read, t->stream && !ahead,
          !t->stream ? "reader, transforms, split (before step 1)"
          : ahead ? "reader, transforms, split of the stream (on the data thread)"
                  : "reader, transforms, split of the stream" },
        { "balance", t->t_plan, !ahead, "epoch order and batch cuts (Algorithm 1 with tokens)" },
        { "batch", t->t_batch - sread, !ahead,
          ahead ? "samples, ids, targets, segment unique, keys (on the data thread)"
                : "samples, ids, targets, segment unique, keys" },
        { "data wait", t->t_wait, 1, "the trainer waiting for the data thread" },
        { "lookup", t->t_lookup, 1, "negatives merged, store lookup, pooling" },
        { "dense fwd", t->t_fwd, 1, "dense blocks and head forward, loss" },
        { "dense bwd", t->t_bwd, 1, "dense backward, row gradient sums" },
        { "optimizer", t->t_opt, 1, t->async ? "dense optimizer (sparse rows: on their thread)"
                                             : "dense optimizer, sparse row updates" },
        { "sparse wait", t->t_async, 1, "the trainer waiting for the semi-async sparse "
                                        "update thread (sparse_async)" },
        { "checkpoint", t->t_ckpt, 1, "writing checkpoints" },
        { "evaluation", t->t_eval, 1, "validation runs inside the loop" },
    };
    double n = steps > 0 ? (double)steps : 1.0, acc = 0;
    fprintf(stderr, "profile: %lld steps, %.2f s in the training loop\n", (long long)steps,
            loop_s);
    fprintf(stderr, "  %-15s %9s %9s %7s  %s\n", "stage", "total s", "ms/step", "loop %",
            "what");
    for (size_t i = 0; i < sizeof row / sizeof *row; i++) {
        if (row[i].in_loop) acc += row[i].s;
        const int before = i == 0 && !t->stream;   /* not part of the loop at all */
        fprintf(stderr, "  %-15s %9.3f %9.3f %6.1f%%%s %s\n", row[i].name, row[i].s,
                before ? 0.0 : 1e3 * row[i].s / n,
                before || loop_s <= 0 ? 0.0 : 100.0 * row[i].s / loop_s,
                before || row[i].in_loop ? " " : "*", row[i].what);
    }
    fprintf(stderr, "  %-15s %9.3f %9.3f %6.1f%%  %s\n", "other", loop_s - acc,
            1e3 * (loop_s - acc) / n, loop_s > 0 ? 100.0 * (loop_s - acc) / loop_s : 0.0,
            "logging, signals, metrics");
    double work = t->t_batch + t->t_plan;
    char when[160];
    if (t->stream)
        snprintf(when, sizeof when, "read+transform runs beside training; %.3f s of it "
                 "filled the shuffle buffer before step 1", t->t_read);
    else
        snprintf(when, sizeof when, "read+transform (%.3f s) happens once before step 1",
                 t->t_read);
    if (ahead) {
        double hidden = work > 0 ? 1.0 - t->t_wait / work : 1.0;
        if (hidden < 0) hidden = 0;
        fprintf(stderr, "  (* on the data thread, %lld batches ahead, beside the loop)\n"
                "  data work hidden behind compute: %.1f%% (%.3f s of %s, %.3f s waited); "
                "%s\n", (long long)t->p->set.prefetch, 100.0 * hidden, work,
                t->stream ? "reading and batch assembly" : "batch assembly", t->t_wait, when);
    } else if (t->stream) {
        fprintf(stderr, "  data work hidden behind compute: 0%% ([train] prefetch = 0: the "
                "stream is read and batches assembled on the trainer thread); %s\n", when);
    } else {
        fprintf(stderr, "  data work hidden behind compute: 0%% "
                "([train] prefetch = 0: batches are assembled on the trainer thread); "
                "read+transform (%.3f s) happens once before step 1\n", t->t_read);
    }
}

static void progress(trainer *t, double loss, double sps, double elapsed, int tty, int final)
{
    char line[256];
    if (!t->steps_per_epoch) {   /* input = stream: the input's end decides, no ETA */
        char of[32] = "";
        if (t->total_steps) snprintf(of, sizeof of, "/%lld", (long long)t->total_steps);
        snprintf(line, sizeof line, "step %lld%s epoch %lld/%lld loss %.4f %.0f samples/s",
                 (long long)t->step, of, (long long)t->step_pass + 1,
                 (long long)t->p->set.epochs, loss, sps);
    } else {
        double left = t->total_steps > t->step && t->step > 0
                          ? elapsed / (double)t->step * (double)(t->total_steps - t->step) : 0;
        int64_t epoch = t->step ? (t->step - 1) / t->steps_per_epoch + 1 : 1;
        snprintf(line, sizeof line, "step %lld/%lld epoch %lld/%lld loss %.4f %.0f samples/s "
                 "ETA %dm%02ds", (long long)t->step, (long long)t->total_steps,
                 (long long)epoch,
                 (long long)((t->total_steps + t->steps_per_epoch - 1) / t->steps_per_epoch),
                 loss, sps, (int)(left / 60), (int)left % 60);
    }
    if (tty) {
        fprintf(stderr, "\r%-79s%s", line, final ? "\n" : "");
        fflush(stderr);
    } else {
        grm__log(GRM_LOG_INFO, "grmhost", "%s", line);
    }
}

/* ---- entry points ---- */

/* This rank's checkpoint directory: [checkpoint] dir itself on one rank, dir/rank-R-of-N
 * with several (each rank writes the rows it owns and its copy of the dense state). A
 * directory written by another world size is refused, with `grmhost reshard` as the fix
 * (core/reshard.c rewrites it for this world size and moves the old files aside). */
/* A save killed midway (kill -9, power loss) leaves its "<name>.tmp.<pid>" behind; resume
 * never reads one, but they would pile up. Only names of this trainer's checkpoints. */
static void remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if ((strncmp(e->d_name, "step-", 5) != 0 && strncmp(e->d_name, "best.", 5) != 0)
            || !strstr(e->d_name, ".tmp."))
            continue;
        char path[4096 + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0)
            grm__log(GRM_LOG_INFO, "grmhost", "removed %s, left by an interrupted save", path);
    }
    closedir(d);
}

static grm_status ckpt_dir_of(trainer *t)
{
    const char *dir = t->p->set.ckpt_dir;
    t->ckdir[0] = 0;
    t->ck_other = 0;
    if (!dir[0]) return GRM_OK;
    if (t->nranks == 1) snprintf(t->ckdir, sizeof t->ckdir, "%s", dir);
    else snprintf(t->ckdir, sizeof t->ckdir, "%s/rank-%d-of-%d", dir, t->rank, t->nranks);
    if (t->opts->fresh) return GRM_OK;
    DIR *d = opendir(dir);
    if (!d) return GRM_OK;
    struct dirent *e;
    int other = 0, top = 0, several = 0;
    while ((e = readdir(d)) != NULL) {
        int r, n;
        if (sscanf(e->d_name, "rank-%d-of-%d", &r, &n) == 2 && n != t->nranks) {
            several |= other && other != n;
            other = n;
        }
        if (strncmp(e->d_name, "step-", 5) == 0 && t->nranks > 1) top = 1;
    }
    closedir(d);
    if (several || (other && top))
        return grm_errorf(GRM_EINVAL, "%s: holds checkpoints of several other world sizes; "
                          "keep one (`grmhost reshard FILE.ini -n %d --from N` rewrites one "
                          "for this job), or pass --fresh", dir, t->nranks);
    t->ck_other = other ? other : top;
    return GRM_OK;
}

/* input = stream: open this rank's stream and, to train, fill the shuffle buffer (all
 * that is read before step 1); to evaluate, read one pass for its held-out rows. Then the
 * first t->ds (stream_snapshot). Collective with several ranks. */
static grm_status stream_start(trainer *t, int training)
{
    grm__pipeline *p = t->p;
    const grm__settings *s = &p->set;
    grm_status st = grm__stream_open(p, training ? s->epochs : 1, &t->stream);
    if (st == GRM_OK) {
        const int64_t bsz = t->nranks > 1 ? rank_share(s->batch_size, t->rank, t->nranks)
                                          : s->batch_size;
        stream_src *sc = &t->src;
        sc->want = s->shuffle_buffer ? s->shuffle_buffer : 64 * bsz;
        if (sc->want < s->accumulate * bsz) sc->want = s->accumulate * bsz;
        sc->rng = grm_mix64((uint64_t)s->seed ^ grm_mix64(0x57e4 + (uint64_t)t->rank));
        if (training) {
            st = stream_fill(t);
            if (st == GRM_OK && t->src.n == 0 && t->nranks == 1)
                st = grm_errorf(GRM_EFORMAT, "%s: input = stream: the data yields no training "
                                "rows; check the reader's path and the split fractions",
                                p->cfg->path);
        } else {
            for (grm__dataset *ds = NULL; st == GRM_OK; grm__dataset_destroy(ds)) {
                int64_t pass;
                st = grm__stream_next(t->stream, &ds, &pass);
                if (!ds) break;
            }
        }
    }
    if (t->nranks > 1)   /* the others learn before they go on */
        st = grm__agree(p, st, "input = stream: another rank failed reading its input");
    return st == GRM_OK ? stream_snapshot(t) : st;
}

static grm_status prepare(grm__pipeline *p, const grm__run_opts *opts, trainer *t, int training)
{
    grm_status st;
    memset(t, 0, sizeof *t);
    t->p = p;
    t->lopts = *opts;
    t->opts = opts = &t->lopts;
    t->ranking = p->set.task == GRM__TASK_RANKING;
    openblas_set_num_threads(1);   /* the host pool owns the cores; BLAS calls stay small */
    if ((st = grm__pool_init((int32_t)p->set.threads)) != GRM_OK) return st;
    if ((st = create_instances(t)) != GRM_OK) return st;
    const grm_comm_handle *c = &p->comm_handle;
    t->rank = c->ops->rank(c->inst);
    t->nranks = c->ops->size(c->inst);
    if (t->rank > 0) {   /* rank 0 speaks for the job */
        t->lopts.quiet = 1;
        t->lopts.profile = 0;
        if (grm__log_level() > GRM_LOG_WARN) grm__log_set_level(GRM_LOG_WARN);
    }
    if ((st = ckpt_dir_of(t)) != GRM_OK) return st;
    double t0 = now_s();
    if (p->set.input == GRM__INPUT_STREAM) {
        if ((st = stream_start(t, training)) != GRM_OK) return st;
    } else if ((st = grm__dataset_build(p, &t->ds)) != GRM_OK) {
        return st;
    }
    t->t_read = now_s() - t0;
    t->t_read0 = t->src.read_s;
    grm__dataset *ds = t->ds;
    int64_t evaluated = 0;
    for (int64_t u = 0; u < ds->nusers; u++) evaluated += ds->has_eval[u];
    if (ds->sharded && !t->ranking) {
        if ((st = c->ops->allreduce(c->inst, &evaluated, 1, GRM_DTYPE_I64, GRM_REDUCE_SUM))
            != GRM_OK)
            return st;
    }
    int64_t nsplit[3] = { ds->nsplit[0], ds->nsplit[1], ds->nsplit[2] };
    if (ds->sharded && t->ranking) {
        if ((st = c->ops->allreduce(c->inst, nsplit, 3, GRM_DTYPE_I64, GRM_REDUCE_SUM))
            != GRM_OK)
            return st;
    }
    if (!opts->quiet && t->stream && training)
        grm__log(GRM_LOG_INFO, "grmhost", "data: input = stream: %lld rows read before step 1 "
                 "(%lld training rows in the shuffle buffer of %lld%s); the rest is read while "
                 "training runs, %lld pass%s", (long long)ds->raw_rows, (long long)t->src.n,
                 (long long)t->src.want, t->nranks > 1 ? " on rank 0" : "",
                 (long long)p->set.epochs, p->set.epochs > 1 ? "es" : "");
    else if (!opts->quiet && t->ranking)
        grm__log(GRM_LOG_INFO, "grmhost", "data: %lld rows -> %lld train, %lld valid, %lld "
                 "test rows, %d tasks (%.1fs)", (long long)ds->raw_rows, (long long)nsplit[0],
                 (long long)nsplit[1], (long long)nsplit[2], ds->ntasks, now_s() - t0);
    else if (!opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "data: %lld rows -> %lld users, %lld items, %lld "
                 "training examples, %lld evaluated users (%.1fs)", (long long)ds->raw_rows,
                 (long long)ds->all_users, (long long)ds->ncatalog,
                 (long long)ds->all_examples, (long long)evaluated, now_s() - t0);
    if (!opts->quiet && ds->sharded && !t->stream)
        grm__log(GRM_LOG_INFO, "grmhost", "data: input = sharded: rank 0 of %d holds %lld of "
                 "the %lld %s and %lld of the %lld training samples", t->nranks,
                 (long long)(t->ranking ? ds->nrows : ds->nusers), (long long)ds->all_users,
                 t->ranking ? "rows" : "users", (long long)ds->nexamples,
                 (long long)ds->all_examples);
    if (ds->bad_rows)
        grm__log(GRM_LOG_WARN, "grmhost", "reader skipped %lld malformed rows",
                 (long long)ds->bad_rows);
    if ((st = setup(t)) != GRM_OK) return st;
    /* the slowest rank's read + transform time and the largest rank's peak memory so far
     * (the data built, training not begun): what input = sharded shrinks */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int64_t most[2] = { (int64_t)(t->t_read * 1e6), (int64_t)ru.ru_maxrss };
    if (t->nranks > 1
        && (st = c->ops->allreduce(c->inst, most, 2, GRM_DTYPE_I64, GRM_REDUCE_MAX)) != GRM_OK)
        return st;
    t->read_most[0] = (double)most[0] * 1e-6;
    t->read_most[1] = (double)most[1];
    const char *mpath = opts->metrics_out ? opts->metrics_out : p->set.metrics_out;
    return grm__metrics_open(t->rank == 0 ? mpath : NULL, &t->metrics);
}

static void finish_summary(trainer *t, FILE *f)
{
    fprintf(f, "\n");
    grm__metrics_summary(t->metrics, f);
}

grm_status grm__train(grm__pipeline *p, const grm__run_opts *opts)
{
    trainer t;
    grm_status st = prepare(p, opts, &t, 1);
    const grm__settings *s = &p->set;
    opts = t.opts;
    int tty = isatty(2) && !opts->quiet;
    if (st != GRM_OK) goto out;

    if (t.ckdir[0]) remove_stale_temps(t.ckdir);   /* train only: eval may run beside it */
    if (t.ckdir[0] && !opts->fresh && (st = resume(&t)) != GRM_OK) goto out;
    if (uv_loop_init(&t.loop) == 0) {
        t.loop_ok = 1;
        uv_signal_init(&t.loop, &t.sigint);
        uv_signal_init(&t.loop, &t.sigterm);
        t.sigint.data = t.sigterm.data = &t;
        uv_signal_start(&t.sigint, on_signal, SIGINT);
        uv_signal_start(&t.sigterm, on_signal, SIGTERM);
    }
    char nsteps[64] = "steps";   /* input = stream: as many as the input gives */
    if (t.total_steps) snprintf(nsteps, sizeof nsteps, "%lld steps", (long long)t.total_steps);
    if (!opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "training '%s': %s of %lld %s%s, %d threads, %d "
                 "dense parameter tensors, %lld negatives per step", s->name, nsteps,
                 (long long)(t.target_tokens ? t.target_tokens : s->batch_size),
                 t.target_tokens ? "tokens (batching = tokens)" : "samples",
                 t.total_steps ? "" : " until the input is used up (input = stream)",
                 grm__num_threads(), t.nparams, (long long)t.R);

    /* input = stream without [train] steps: until the input is used up (t.ended) */
    const int64_t open_end = INT64_MAX / 2 / s->accumulate;
    int64_t limit = t.total_steps ? t.total_steps : open_end;
    if (opts->max_steps > 0 && t.step + opts->max_steps < limit) limit = t.step + opts->max_steps;
    int64_t last_g = limit * s->accumulate;
    if (t.total_mb && last_g > t.total_mb) last_g = t.total_mb;
    if ((st = pf_start(&t, t.step * s->accumulate + 1, last_g)) != GRM_OK) goto out;
    double start = now_s(), last_print = 0, loss_sum = 0;
    int64_t samples = 0, loss_n = 0, start_step = t.step;
    /* every epoch by default; a stream's epoch ends when its reader starts the next pass */
    int64_t eval_every = s->eval_every ? s->eval_every : t.steps_per_epoch;
    int64_t ckpt_every = s->ckpt_every ? s->ckpt_every : t.steps_per_epoch;
    int64_t pass_seen = -1;
    int early_stopped = 0;
    while (t.step < limit && !t.stop) {
        double loss = 0;
        int64_t b = 0;
        if ((st = train_step(&t, &loss, &b)) != GRM_OK) goto out;
        if (t.ended) {   /* no step was taken */
            limit = t.step;
            if (loss_n == 0) break;
            /* the last log line below */
        }
        if (t.nranks > 1) {   /* a signal to one rank stops every rank after the same step */
            int64_t sv = t.stop;
            const grm_comm_handle *c = &p->comm_handle;
            if ((st = c->ops->allreduce(c->inst, &sv, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX))
                != GRM_OK)
                goto out;
            t.stop = (int)sv;
        }
        if (!t.ended) {
            samples += b;
            loss_sum += loss;
            loss_n++;
        }
        const int new_pass = t.stream && pass_seen >= 0 && t.step_pass != pass_seen;
        pass_seen = t.step_pass;
        double el = now_s() - start;
        if (t.step % s->log_every == 0 || t.step == limit) {
            grm__metrics_emit(t.metrics, t.step, "train", "loss", loss_sum / (double)loss_n);
            grm__metrics_emit(t.metrics, t.step, "train", "samples_per_s",
                              (double)samples / (el > 0 ? el : 1e-9));
            if (!t.read_logged) {   /* wall clock and memory, like samples_per_s */
                grm__metrics_emit(t.metrics, t.step, "train", "read_s", t.read_most[0]);
                grm__metrics_emit(t.metrics, t.step, "train", "read_maxrss_kb", t.read_most[1]);
                t.read_logged = 1;
            }
            if ((st = emit_balance(&t, b)) != GRM_OK) goto out;
            if ((st = check_replicas(&t)) != GRM_OK) goto out;
            emit_tables(&t);
            emit_dist(&t);
            if (!tty && !opts->quiet)
                progress(&t, loss_sum / (double)loss_n, (double)samples / el,
                         el / (double)(t.step - start_step) * (double)t.step, 0, 0);
            loss_sum = 0;
            loss_n = 0;
        }
        if (tty && (el - last_print > 0.25 || t.step == limit)) {
            progress(&t, loss, (double)samples / (el > 0 ? el : 1e-9),
                     el / (double)(t.step - start_step) * (double)t.step, 1, 0);
            last_print = el;
        }
        if (t.loop_ok) uv_run(&t.loop, UV_RUN_NOWAIT);
        if (t.ended) break;
        if ((eval_every ? t.step % eval_every == 0 : new_pass) && t.step != limit) {
            if (tty) fputc('\n', stderr);
            double score = 0;
            if ((st = run_eval(&t, 0, 0, &score)) != GRM_OK) goto out;
            if ((st = track_best(&t, score, &early_stopped)) != GRM_OK) goto out;
            if (early_stopped) break;
        }
        if ((ckpt_every ? t.step % ckpt_every == 0 : new_pass) && t.step != limit && !t.stop)
            if ((st = save_ckpt(&t)) != GRM_OK) goto out;
    }
    pf_stop(&t);
    if (tty) fputc('\n', stderr);
    if (t.stop) {
        grm__log(GRM_LOG_WARN, "grmhost", "%s: stopping after step %lld",
                 t.stop == SIGINT ? "SIGINT" : "SIGTERM", (long long)t.step);
        if (!s->ckpt_dir[0])
            grm__log(GRM_LOG_WARN, "grmhost", "no [checkpoint] dir is configured: this run's "
                     "progress is not saved");
        st = save_ckpt(&t);
        goto out;
    }
    if ((st = save_ckpt(&t)) != GRM_OK) goto out;
    double el = now_s() - start;
    if (!opts->quiet && t.step > start_step) {
        double n = (double)(t.step - start_step);
        char toks[64] = "";
        if (t.seqmode || t.seqrank)
            snprintf(toks, sizeof toks, ", %.0f tokens/s", (double)t.tokens / (el > 0 ? el : 1e-9));
        grm__log(GRM_LOG_INFO, "grmhost", "trained %lld steps in %.1fs: %.0f samples/s%s; per "
                 "step: batch %.2fms, lookup %.2fms, forward+loss %.2fms, backward %.2fms, "
                 "optimizers %.2fms", (long long)(t.step - start_step), el,
                 (double)samples / (el > 0 ? el : 1e-9), toks, 1e3 * t.t_batch / n,
                 1e3 * t.t_lookup / n, 1e3 * t.t_fwd / n, 1e3 * t.t_bwd / n, 1e3 * t.t_opt / n);
    }
    if (opts->profile) print_profile(&t, el, t.step - start_step);
    if (s->early_stop > 0) {
        /* the final model competes too; then test the best one */
        double score = 0;
        char best[4096 + 64];
        if (!early_stopped) {
            if ((st = run_eval(&t, 0, 0, &score)) != GRM_OK) goto out;
            if ((st = track_best(&t, score, &early_stopped)) != GRM_OK) goto out;
        }
        if (t.best_step != t.step) {
            if ((st = load_best(&t, best, sizeof best)) != GRM_OK) goto out;
            grm__log(GRM_LOG_INFO, "grmhost", "restored the best model (step %lld, validation "
                     "%s %.4f) from %s", (long long)t.step, t.ranking ? "auc" : "ndcg",
                     t.best_score, best);
        }
    }
    if ((st = run_eval(&t, 0, 1, NULL)) != GRM_OK) goto out;
    if ((st = run_eval(&t, 1, 1, NULL)) != GRM_OK) goto out;
    if (t.rank == 0) finish_summary(&t, stdout);
out:
    if (t.loop_ok) {
        uv_close((uv_handle_t *)&t.sigint, NULL);
        uv_close((uv_handle_t *)&t.sigterm, NULL);
        uv_run(&t.loop, UV_RUN_DEFAULT);
        uv_loop_close(&t.loop);
    }
    grm__dataset_destroy(t.ds);
    teardown(&t);
    return st;
}

grm_status grm__eval(grm__pipeline *p, const grm__run_opts *opts)
{
    trainer t;
    grm_status st = prepare(p, opts, &t, 0);
    const grm_ckpt_ops *kops = p->ckpt.plugin->info->ops;
    char path[4096];
    if (st != GRM_OK) goto out;
    struct stat sb;
    if (stat(opts->checkpoint, &sb) != 0) {
        st = grm_errorf(GRM_EIO, "%s: %s", opts->checkpoint, strerror(errno));
        goto out;
    }
    if (S_ISDIR(sb.st_mode)) {
        /* several ranks: each reads its own shard, DIR/rank-R-of-N */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", opts->checkpoint);
        if (t.nranks > 1) {
            snprintf(dir, sizeof dir, "%s/rank-%d-of-%d", opts->checkpoint, t.rank, t.nranks);
            if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
                st = grm_errorf(GRM_ENOTFOUND, "%s: no %s here: %d ranks evaluate the "
                                "checkpoints %d ranks wrote (or `grmhost reshard` them)",
                                opts->checkpoint, dir + strlen(opts->checkpoint) + 1,
                                t.nranks, t.nranks);
                goto out;
            }
        }
        if ((st = newest_ckpt(dir, kops->extension(p->ckpt.inst), path, sizeof path))
            != GRM_OK)
            goto out;
        if (!path[0]) {
            st = grm_errorf(GRM_ENOTFOUND, "%s: no step-*.%s checkpoint in this directory",
                            dir, kops->extension(p->ckpt.inst));
            goto out;
        }
    } else {
        snprintf(path, sizeof path, "%s", opts->checkpoint);
    }
    if ((st = load_ckpt(&t, path)) != GRM_OK) goto out;
    if (!opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "evaluating %s (step %lld)", path, (long long)t.step);
    if ((st = run_eval(&t, 0, 1, NULL)) != GRM_OK) goto out;
    if ((st = run_eval(&t, 1, 1, NULL)) != GRM_OK) goto out;
    if (t.rank == 0) finish_summary(&t, stdout);
out:
    grm__dataset_destroy(t.ds);
    teardown(&t);
    return st;
}

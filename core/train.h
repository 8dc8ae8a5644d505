/* core/train.h - the trainer's parts, one concept per file (DESIGN.md §5 "one training step").
 *
 * core/train.c holds preparation, the step and the entry points (grm__train, grm__eval); the
 * trainer struct is made of the sub-structs below, each owned (allocated, filled and freed)
 * by the file named above it:
 *   batch.c       one batch's input: samples, ids, segment unique, keys, merged negatives
 *   plan.c        the epoch order and the batch cuts (MTGRBoost §5.1 Algorithm 1), rank slices
 *   stream.c      input = stream: the shuffle buffer over the reader's pieces
 *   prefetch.c    the data thread and its ring of batches
 *   sparse_step.c lookup, pooling, the row exchange and row updates, semi-async sparse
 *   dense_stack.c the dense blocks and the head, their parameters and the dense optimizer
 *   eval.c        leave-one-out full ranking (retrieval), AUC/GAUC/logloss (ranking)
 *   checkpoint.c  checkpoint naming, save, load, resume, early stopping's best model
 *   report.c      metrics per step, the progress line, --profile
 * Internal to libgrmcore. */
#ifndef GRM_TRAIN_H
#define GRM_TRAIN_H

#include "backend.h"
#include "dist.h"
#include "head.h"
#include "pipeline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <uv.h>

#define CPU ((grm_device){ GRM_DEVICE_CPU, 0 })

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Host memory for the trainer's buffers (64-byte aligned; 0 bytes gives a valid pointer). */
static inline void *xalloc(size_t bytes)
{
    return grm__alloc(CPU, bytes ? bytes : 1, 64);
}

/* Rank r's part of x split over n ranks: floor(x (r + 1) / n) - floor(x r / n); the parts
 * differ by at most one and sum to x. */
static inline int64_t rank_share(int64_t x, int32_t r, int32_t n)
{
    return x * (r + 1) / n - x * r / n;
}

/* The physical table of feature i. */
static inline int32_t phys_of(const grm__pipeline *p, int32_t i)
{
    return p->plan->slots[p->features[i].table_idx].table;
}

/* ---- batch.c: one batch's input, assembled ahead of its compute ----
 * Everything a batch needs from the data before the store is touched: its samples, every
 * feature's ids, the targets, and per physical table the ids of all the id spaces it holds,
 * gathered id space by id space (the segments of a fused group), deduplicated by segment
 * unique (FusedRec §3, Fig. 5: equal ids of different id spaces stay apart) and encoded as
 * keys (i << (63 - k)) | id (MTGRBoost §4.2 eq. 8); every gathered id then names its unique
 * row through inv (FusedRec's I_u). With [train] prefetch = N the data thread (prefetch.c)
 * fills a ring of N + 1 such batches ahead of the trainer, so this work overlaps the compute
 * of the batches before. Negatives are the exception: a head keeps the state of its last
 * draw for its loss (logQ), so the trainer draws them just before the batch computes and
 * merges them into the item table's unique keys through imap, which the data thread builds.
 *
 * `view` is the batch as plugins see it (grm/tensor.h grm_batch, its KJT and jagged token
 * layout): blocks and heads receive it in grm_dense_ctx.batch. */

typedef struct grm__batch_tab {
    int64_t n;            /* ids gathered (negatives not counted) */
    int64_t nu;           /* unique keys, merged negatives included */
    int64_t *ids;         /* [cap] gathered raw ids, id space major */
    int64_t *segoff;      /* [nspace + 1] segment offsets into ids */
    int64_t *counts;      /* [nspace] unique ids per segment */
    int64_t *inv;         /* [cap] unique index of ids[j] */
    int64_t *keys;        /* [cap] the unique keys, first-seen order, then new negatives */
    int32_t *ufeat;       /* [cap] id space (segment) of each key: FusedRec's category */
    int64_t *pfkeys;      /* [pfcap] several ranks: the keys this rank owns, for the data
                           * thread's prefetch (prefetch.c); malloc'ed, grown on demand */
    int64_t pfcap;
} grm__batch_tab;

struct grm__piece;

typedef struct grm__batch {
    int64_t g;            /* global batch index, 1-based (0: evaluation) */
    int64_t b;            /* this rank's samples */
    int64_t rows;         /* rows of the dense stack: samples, or a sequence model's tokens */
    int64_t tokens;       /* sample_tokens summed over the samples */
    double step_rows;     /* rows of the whole step (all ranks, all batches): the weights */
    int64_t *ex;          /* [B] training examples (indices of sample_tokens) */
    int64_t *users;       /* [B] dataset user index (ranking: row index) */
    int64_t *gids;        /* [B] user id (ranking: the row's group, or its index) */
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
    grm__batch_tab *tab;  /* [nphys] */
    /* input = stream: each sample's row is row users[k] of piece src[k] (not of the
     * dataset) when `streamed`; `done`: this rank's stream is used up (b = 0); `pass`: the
     * pass the reader was in when the batch was drawn */
    struct grm__piece **src;   /* [B] */
    int streamed, done;
    int64_t pass;
    /* the public view (grm/tensor.h), filled by grm__batch_view */
    grm_batch view;
    grm_kjt kjt;
    const char **keys;    /* [nfeatures] the KJT's keys: [feature.NAME] names */
    int64_t *kjt_off;     /* [nfeatures * B + 1] */
    int64_t *kjt_ids;     /* [sum of the features' id capacities] */
    void *work;           /* the backend's scratch for the data thread's ops */
    grm_status st;        /* the data thread's failure, raised by the trainer */
    char err[1024];
} grm__batch;

/* ---- plan.c: the epoch order and the batch plan ---- */

typedef struct grm__plan {
    int64_t nex;              /* training samples: (user, position) pairs or users */
    int64_t nex_all;          /* training samples of all ranks */
    int64_t bsz;              /* samples per batch on this rank: batch_size, or its share */
    int64_t *seq_users;       /* [nex] seqmode: users with at least two training items */
    int64_t *perm;            /* [nex] current epoch's order */
    int64_t perm_epoch;
    /* the epoch's batches: batch i is perm[bstart[i] .. bstart[i + 1]) */
    int64_t *bstart;          /* [nex + 1] */
    int64_t nb;               /* batches of perm_epoch */
    int64_t *tok_cum;         /* [nex + 1] tokens of perm[0 .. i) */
    int64_t *ep_cum;          /* [nep + 1] batches before epoch e */
    int64_t nep;
    int64_t target_tokens;    /* batching = tokens: N of Algorithm 1 */
    int64_t total_mb;         /* batches of the whole run (0: [train] steps decides) */
    int64_t mb_per_epoch;     /* batches of epoch 0 (sharded: the most of any rank's) */
    int64_t mb_local;         /* batches of this rank's epoch 0 */
    double step_rows;         /* cache: rows of step cached_step */
    int64_t cached_step;
} grm__plan;

/* ---- stream.c: input = stream, the shuffle buffer (MTGRBoost §3: input read beside
 * training) ----
 * The data thread reads this rank's stream piece by piece (one reader chunk, transformed and
 * split, core/data.c) into a buffer of training rows, and draws each batch's samples from it
 * at random: a shuffle buffer, where a row waits among shuffle_buffer others. So reading,
 * decompression, transforms and batch assembly of the coming batches all overlap the compute
 * of the current one, and memory holds the buffer, not the input. A piece is freed once its
 * last row is drawn. The buffer runs on across passes (epochs); this rank's input is used up
 * when the last pass is read and the buffer is empty. Batch g is a pure function of (data,
 * shard, seed, buffer size, batch size), so resume draws batches 1 .. g - 1 again without
 * assembling them and goes on exactly as the uninterrupted run. */

typedef struct grm__piece {
    grm__dataset *ds;
    int64_t left;         /* its training rows not yet drawn */
} grm__piece;

typedef struct grm__stream_src {
    grm__stream *stream;  /* NULL unless [train] input = stream */
    struct grm__srow {
        grm__piece *pc;
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
    int all_ended;        /* every rank's stream is used up: the run is over */
    int64_t step_pass;    /* the pass of the last step's batches (the most of any rank) */
    int full;             /* t->ds holds every held-out row (pass 0 read on every rank) */
} grm__stream_src;

/* ---- prefetch.c: the data thread and its ring of batches ----
 * Batch g lives in ring[(g - 1) % nslots]; the data thread assembles g once g - nslots has
 * been released by the trainer. */
typedef struct grm__prefetcher {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running;          /* the thread exists */
    int stop;             /* asked to stop */
    grm__batch *ring;     /* [nslots] */
    int32_t nslots;
    int64_t next;         /* next batch to assemble */
    int64_t last;         /* last batch of the run */
    int64_t ready;        /* batches up to here are assembled (or failed) */
    int64_t released;     /* the trainer is done with batches up to here */
    double busy_s;        /* seconds the data thread spent assembling */
    /* A second instance of the [head], used by the data thread alone: its draw for batch g
     * (deterministic given the seed, grm/head.h) is the trainer's, so a store with a
     * prefetch op gets the negatives' keys too (prefetch.c). have_head 0: none made. */
    grm__head head;
    int have_head;
    int64_t *neg, *negk;  /* [R] the draw and its keys */
    /* Several ranks, not sharded, a store with a slower tier: every rank's samples of the
     * batch being prefetched (each rank's order is the same), so the rows this rank owns
     * that the other ranks will ask for are brought in too. NULL: none. */
    grm__batch *global;
    /* Several ranks over a store with a slower tier whose data thread does not assemble
     * every rank's batches (more ranks than [train] prefetch_ranks, input = sharded or
     * stream: grm__prefetch_ahead_wanted): each training lookup sends the keys of this
     * rank's next batch to their owners (grm__dist_lookup_ahead), and the keys the other
     * ranks sent this one wait in aq for the data thread to prefetch. The trainer appends,
     * the data thread swaps aq with its aw and empties it, both under lock; a failure of
     * that prefetch is kept in aerr for the trainer's next lookup to report. */
    int ahead;
    int32_t nphys_ahead;      /* tables of aq and aw (0 without ahead) */
    int64_t **aq, **aw;       /* [nphys] keys queued, and the data thread's */
    int64_t *aqn, *aqcap, *awcap;
    int abusy;                /* the data thread is prefetching what it took of aq */
    grm_status aerr;
    char aerr_msg[512];
    int64_t ahead_keys;       /* keys received and prefetched ahead (the run's report) */
    /* [train] prefetch_evict over a store with a trim op (grm_emb_ops.trim, ABI 1.12):
     * after each prefetch the data thread trims every table, keeping the rows stamped
     * since the oldest batch not yet applied was prefetched (pf_trim). from [nfrom]: at
     * g % nfrom, the least stamp batch g's prefetch gave (the steps applied then, plus
     * one); ahead_from: the same of the last keys prefetched for the other ranks; done:
     * the last step whose update the store has applied (grm__prefetch_applied). */
    int trim;
    int64_t *from;
    int32_t nfrom;
    int64_t ahead_from;
    _Atomic int64_t done;
} grm__prefetcher;

/* ---- sparse_step.c: per physical table, the looked-up rows and their gradients ---- */

typedef struct grm__table_ws {
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
} grm__table_ws;

typedef struct grm__sparse_side {
    const grm_emb_ops *eops;
    grm__table_ws *ws;        /* [nphys] */
    grm__dist *dist;          /* model-parallel rows (NULL on one rank) */
    float *ptmp;              /* [B, widest feature] one feature's pooled block */
    float *gin;               /* [most ids of a feature, widest dim] gradient per gathered id */
    void *work;               /* the backend's scratch for the trainer thread's ops */
    /* [train] sparse_async (TurboGR §4.2.2 semi-async sparse): step i's row gradients wait
     * in pend until the lookup of step i + 1 is done, then a sparse thread applies them
     * (the exchange and the row optimizer) while the trainer runs the dense stack */
    int async;
    struct grm__pending {
        int64_t n;            /* unique keys of the step */
        int64_t *keys;        /* [ws cap] */
        float *grads;         /* [ws cap, dim] their summed gradients */
    } *pend;                  /* [nphys] */
    int64_t pend_step;        /* the step pend belongs to (0: nothing pending) */
    pthread_t sthread;
    int srunning;
    grm_status sst;           /* the sparse thread's result, raised at the join */
    char serr[1024];
} grm__sparse_side;

/* ---- dense_stack.c: the dense blocks and the head, their parameters ---- */

typedef struct grm__dparam {
    char *name;               /* owned: "dense.0.layer0.weight" */
    float *value, *grad;      /* borrowed from the block */
    int64_t numel;
    float *state;             /* owned: [state_floats * numel] */
    int64_t steps;
    grm_tensor shape;         /* value's tensor descriptor */
} grm__dparam;

typedef struct grm__dense_stack {
    grm__head head;           /* [head] (core/head.c) */
    int64_t head_in;          /* its input width */
    const grm_opt_ops *dops;
    void *dopt;
    int64_t din;              /* sum of feature widths */
    /* ranking on a token list (pooling = none, [train] sequence_blocks = S, MTGRBoost §2):
     * blocks [0, S) run on the rows' jagged tokens, block S (or the head) on each row's
     * last token output beside the pooled features */
    int32_t S;
    int64_t tok_dim;          /* features of block S - 1's token output */
    float *tacts, *dtacts;    /* [RB, tok_dim] that output and its gradient */
    float **acts;             /* [ndense + 1]: x, block outputs (the head's input); [B, dim_i] */
    float **dacts;            /* same shapes */
    int64_t *dims;            /* [ndense + 1] */
    grm__dparam *params;
    int32_t nparams;
    int32_t state_floats;
    float *gbuf;              /* [gnumel] dense gradients packed for one allreduce */
    int64_t gnumel;
} grm__dense_stack;

/* ---- eval.c ---- */

typedef struct grm__eval_bufs {
    int64_t *cat_keys;        /* [chunk] keys of the catalog items */
    float *cat_rows;          /* [chunk, D] */
    float *scores;            /* [eval_batch, chunk] */
    int64_t chunk;            /* catalog items the buffers hold: every one (C), or a chunk
                               * of them when C would take more than [train] eval_memory_mb */
    float *queries;           /* [B, D] seqmode evaluation: last-token outputs */
} grm__eval_bufs;

/* ---- checkpoint.c ---- */

/* trainer.state, as checkpoints store it (int64 each; doubles as their bits). Files of 4 or
 * 7 entries, written before the fields after bad_evals existed, load with those fields 0. */
enum {
    GRM__ST_STEP, GRM__ST_SEED, GRM__ST_EXAMPLES, GRM__ST_BATCH,
    GRM__ST_BEST_STEP, GRM__ST_BEST_SCORE, GRM__ST_BAD_EVALS,
    GRM__ST_STOPPED,          /* 1: early stopping ended the run */
    GRM__ST_METRICS_AT,       /* bytes of the metrics file when it was saved (-1: none) */
    GRM__ST_WIN_N,            /* steps in the loss window not yet logged */
    GRM__ST_WIN_SUM,          /* their summed loss (double bits) */
    GRM__CKPT_STATE_N
};

typedef struct grm__ckpt_state {
    char dir[4096];           /* checkpoint directory of this rank ("" for none) */
    int32_t other;            /* [checkpoint] dir also holds checkpoints of this many ranks */
    int64_t state[GRM__CKPT_STATE_N];   /* trainer.state as checkpoints store it */
    double best_score;        /* early stopping: best validation score so far */
    int64_t best_step;        /* its step (0: none yet) */
    int64_t bad_evals;        /* validation runs since it */
    int stopped;              /* early stopping ended the run: it is finished */
    int64_t metrics_at;       /* resumed: the metrics file's bytes at the save (-1: none) */
    int lock_fd;              /* the open lock file of dir (-1: none) */
} grm__ckpt_state;

/* ---- report.c: metrics, time per stage ---- */

typedef struct grm__report {
    grm__metrics *metrics;
    grm__serve *serve;        /* --metrics-port: the HTTP endpoint, or NULL */
    double t_batch, t_lookup, t_fwd, t_bwd, t_opt;
    double t_read, t_plan, t_ckpt, t_eval;   /* --profile: seconds in each stage */
    double t_wait;            /* seconds the trainer waited for the data thread */
    double t_async;           /* seconds the trainer waited for the sparse thread */
    double t_head;            /* seconds of t_fwd in the head's loss and its gradients */
    double flops_dense, flops_head;   /* counted by the blocks' and the head's flops ops:
                                         forward and backward of every training batch */
    double t_read0;           /* input = stream: src.read_s when step 1 began */
    double read_most[2];      /* the slowest rank's t_read, the largest rank's peak KB */
    int read_logged;          /* read_most is in the metrics */
    double loss_sum;          /* the loss window: losses of the steps since the last log */
    int64_t loss_n;           /* and their count (checkpointed, so a resumed run logs as one) */
    int64_t tokens;           /* tokens trained on so far, for throughput */
    int64_t step_tokens;      /* tokens of the last step, all ranks */
    int64_t my_tokens, my_samples;   /* this rank's tokens and samples of the last step */
    grm__dist_stats dlast[2]; /* dist totals (lookup, update) at the last logged step */
    int64_t dstep;            /* that step */
    double lr_scale;          /* the schedule's scale of the last step (1 without one) */
} grm__report;

/* ---- the trainer ---- */

typedef struct grm__trainer {
    grm__pipeline *p;
    grm__dataset *ds;
    const grm__run_opts *opts;
    grm__run_opts lopts;      /* the run's options; quiet on ranks other than 0 */
    int ranking;              /* [train] task = ranking */
    /* sequence model ([feature.*] pooling = none): a sample is a user's jagged token
     * sequence; every token predicts the next item (training), the last token's output
     * is the query (evaluation) */
    int seqmode;
    int seqrank;              /* ranking on a token list (see grm__dense_stack.S) */
    /* [train] input = sharded on several ranks (core/route.h): the samples are this rank's
     * own and so is the batch plan; a step is every rank's next batch */
    int sharded;
    int has_times;            /* the samples carry timestamps (time_column) */
    int32_t rank, nranks;
    grm_backend be;           /* [pipeline] device: runs the hot ops (grm/backend.h) */
    int32_t item_table;       /* the id space of the candidate items */
    int32_t item_phys;        /* its physical table */
    int32_t item_seg;         /* its segment (FusedRec category) in that table's fused group */
    int64_t B;                /* buffer samples: max(batch_size, eval_batch) */
    int64_t RB;               /* buffer rows of the dense stack: B, or B * window tokens */
    int64_t R;                /* most negatives per step: capacity of the neg buffers */
    int64_t step;             /* steps done */
    int64_t total_steps, steps_per_epoch;
    grm__batch eb;            /* the evaluation batch (and the training one with prefetch 0) */
    grm__plan plan;
    grm__stream_src src;
    grm__prefetcher pf;
    grm__sparse_side sp;
    grm__dense_stack dn;
    grm__eval_bufs ev;
    grm__ckpt_state ck;
    struct grm__delta *delta;  /* [export] every: incremental export (core/delta.c), or NULL */
    grm__report rep;
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    int loop_ok;
    volatile int stop;
} grm__trainer;

/* ---- the backend's ops on host memory (stream NULL) ---- */

static inline grm_status be_gather(const grm__trainer *t, float *out, const float *rows,
                                   const int64_t *idx, int64_t n, int64_t nrows, int64_t D)
{
    return t->be.iface->gather(t->be.context, out, rows, idx, n, nrows, D, NULL);
}

static inline grm_status be_scatter_add(const grm__trainer *t, float *rows, const float *src,
                                        const int64_t *idx, int64_t n, int64_t nrows, int64_t D,
                                        void *work)
{
    return t->be.iface->scatter_add(t->be.context, rows, src, idx, n, nrows, D, work, NULL);
}

static inline grm_status be_segment_reduce(const grm__trainer *t, float *out, const float *rows,
                                           const int64_t *idx, const int64_t *offsets, int64_t B,
                                           int64_t nrows, int64_t D, int32_t mode)
{
    return t->be.iface->segment_reduce(t->be.context, out, rows, idx, offsets, B, nrows, D,
                                       mode, NULL);
}

static inline grm_status be_segment_reduce_bwd(const grm__trainer *t, float *grad_in,
                                               const float *grad_out, const int64_t *offsets,
                                               int64_t B, int64_t D, int32_t mode)
{
    return t->be.iface->segment_reduce_bwd(t->be.context, grad_in, grad_out, offsets, B, D,
                                           mode, NULL);
}

static inline grm_status be_segment_unique(const grm__trainer *t, int64_t *uniq_ids,
                                           int32_t *uniq_feat, int64_t *counts,
                                           int64_t *inverse, int64_t *nuniq, const int64_t *ids,
                                           const int64_t *offsets, int64_t n, int32_t F,
                                           void *work)
{
    return t->be.iface->segment_unique(t->be.context, uniq_ids, uniq_feat, counts, inverse,
                                       nuniq, ids, offsets, n, F, work, NULL);
}

/* ---- batch.c ---- */

/* Most ids feature i gathers for one batch. */
int64_t grm__batch_ids_cap(const grm__trainer *t, int32_t i);
/* The buffers of one batch, sized by the trainer's capacities (sp.ws[].cap, B, RB, R). */
grm_status grm__batch_init(grm__trainer *t, grm__batch *bt);
void grm__batch_fini(const grm__trainer *t, grm__batch *bt);
/* The data side of a batch whose samples are set: ids, targets, segment unique, keys. */
grm_status grm__batch_assemble_ids(const grm__trainer *t, grm__batch *bt, int targets);
/* Everything of training batch g that comes from the data, into bt. */
grm_status grm__batch_assemble_train(grm__trainer *t, grm__batch *bt, int64_t g);
/* The ids and keys of every rank's samples of batch g (not sharded), into bt: what the data
 * thread prefetches of the rows the other ranks will ask this rank for. */
grm_status grm__batch_assemble_global(grm__trainer *t, grm__batch *bt, int64_t g);
/* Negative ids [nneg] of the item id space merged into the batch's unique keys. */
grm_status grm__batch_merge_negatives(const grm__trainer *t, grm__batch *bt, const int64_t *ids,
                                      int64_t nneg);
/* Fill bt->view (and its KJT) from the assembled batch: what blocks and heads receive. */
void grm__batch_view(const grm__trainer *t, grm__batch *bt);

/* The unique row, among its table's keys of the batch, of each id feature i gathered
 * (FusedRec's I_u): [foff[i][b]]. */
static inline const int64_t *fslots(const grm__trainer *t, const grm__batch *bt, int32_t i)
{
    return bt->tab[phys_of(t->p, i)].inv + bt->fbase[i];
}

/* The same for the targets (retrieval): [rows] rows of the item table. */
static inline const int64_t *pos_slots(const grm__trainer *t, const grm__batch *bt)
{
    return bt->tab[t->item_phys].inv + bt->pos_base;
}

/* ---- plan.c ---- */

/* Sizes the plan (seq_users, target tokens, B and RB adjustments) before the stores exist. */
grm_status grm__plan_setup(grm__trainer *t);
/* The order buffers and the run's steps, once every capacity is known. */
grm_status grm__plan_steps(grm__trainer *t);
void grm__plan_fini(grm__plan *pl);
/* Tokens of training sample e. */
int64_t grm__plan_sample_tokens(const grm__trainer *t, int64_t e);
/* This rank's samples of global batch g into bt (ex, b, tokens). */
grm_status grm__plan_slice(grm__trainer *t, int64_t g, grm__batch *bt);
/* Every rank's samples of global batch g into bt (not sharded: each rank's order is the
 * same, so each knows the whole batch). */
grm_status grm__plan_slice_all(grm__trainer *t, int64_t g, grm__batch *bt);
/* Rows of every rank's slices of every batch of the step holding batch g. */
grm_status grm__plan_step_rows(grm__trainer *t, int64_t g, double *out);
/* The rows of the whole step on every rank (input = sharded: summed over the ranks). */
grm_status grm__plan_step_rows_all(grm__trainer *t, double mine, double *out);

/* ---- stream.c ---- */

/* Open this rank's stream and fill the shuffle buffer (training) or read one pass (eval). */
grm_status grm__stream_start(grm__trainer *t, int training);
/* Batch g of the stream (the batches before it drawn and dropped when resuming). */
grm_status grm__stream_batch(grm__trainer *t, grm__batch *bt, int64_t g);
/* t->ds afresh from the stream: the held-out rows read so far. */
grm_status grm__stream_snapshot(grm__trainer *t);
/* The step's rows over the ranks, and whether every rank's input is used up. */
grm_status grm__stream_step(grm__trainer *t, const grm__batch *bt, int failed, double *rows);
void grm__stream_free(grm__trainer *t);

/* The seed of batch g's negatives draw (train.c; the data thread draws them again to
 * prefetch their rows). */
uint64_t grm__negatives_seed(const grm__pipeline *p, int64_t g);

/* ---- prefetch.c ---- */

grm_status grm__prefetch_start(grm__trainer *t, int64_t first, int64_t last);
void grm__prefetch_stop(grm__trainer *t);
grm_status grm__prefetch_take(grm__trainer *t, int64_t g, grm__batch **out);
void grm__prefetch_release(grm__trainer *t, int64_t g);
/* The store has applied the update of `step` (every table): the data thread's trims keep
 * what the batches after it were stamped with. */
void grm__prefetch_applied(grm__trainer *t, int64_t step);
void grm__prefetch_fini(grm__trainer *t);
/* Whether the run's lookups send next-batch keys to their owners (the same answer on every
 * rank: it depends on the config alone); grm__sparse_setup makes the distribution so. */
int grm__prefetch_ahead_wanted(const grm__trainer *t);
/* Batch g, once the data thread has assembled it (the trainer holds g - 1, so the data
 * thread can); NULL past the run, or when g failed (grm__prefetch_take reports it). */
const grm__batch *grm__prefetch_peek(grm__trainer *t, int64_t g);
/* Keys [n] of table T that other ranks sent ahead, queued for the data thread; returns the
 * failure of an earlier such prefetch, if any. */
grm_status grm__prefetch_ahead_got(grm__trainer *t, int32_t T, const int64_t *keys, int64_t n);

/* ---- sparse_step.c ---- */

/* The store, its sharding over the ranks and the step's working sets. */
grm_status grm__sparse_setup(grm__trainer *t);
/* The working sets, once the head has said how many negatives a step draws. */
grm_status grm__sparse_buffers(grm__trainer *t);
void grm__sparse_teardown(grm__trainer *t);
/* Lookup and the dense input of an assembled batch. */
grm_status grm__embed_batch(grm__trainer *t, grm__batch *bt, int training);
/* The keys of the run's first batch g sent to their owners (pf.ahead; collective). */
grm_status grm__sparse_announce(grm__trainer *t, int64_t g);
/* Backward of the pooling: dx into the summed row gradients of the tables. */
grm_status grm__pool_backward(grm__trainer *t, const grm__batch *bt);
/* The row optimizer on n keys of physical table T (the exchange with several ranks). */
grm_status grm__update_table(grm__trainer *t, int32_t T, const int64_t *keys,
                             const float *grads, int64_t n, int64_t step, int routed);
/* The step's row updates: now, pending for the sparse thread, or accumulated. */
grm_status grm__sparse_apply(grm__trainer *t, const grm__batch *bt, int64_t step);
void grm__stash_rows(grm__trainer *t, const grm__batch *bt);
grm_status grm__async_start(grm__trainer *t);
grm_status grm__async_join(grm__trainer *t);
grm_status grm__async_flush(grm__trainer *t);

/* ---- lr.c: the learning-rate schedule of [train] ---- */

/* 1 when [train] sets a warm-up or a decay. */
int grm__lr_active(const grm__settings *s);
int64_t grm__lr_warmup_steps(const grm__settings *s, int64_t steps_per_epoch);
/* Steps from step 1 to the end of the decay. */
int64_t grm__lr_decay_steps(const grm__settings *s, int64_t steps_per_epoch,
                            int64_t total_steps);
/* The scale of every optimizer's lr at step (1 for the first). */
double grm__lr_scale(const grm__settings *s, int64_t steps_per_epoch, int64_t total_steps,
                     int64_t step);
/* Refuse a schedule an optimizer cannot follow; log the schedule. */
grm_status grm__lr_setup(grm__trainer *t);
/* Set step's scale on both optimizers (no-op without a schedule). */
grm_status grm__lr_apply(grm__trainer *t, int64_t step);

/* ---- dense_stack.c ---- */

/* The blocks created on their widths, the output checked against D, the head created. */
grm_status grm__dense_wire(grm__trainer *t, int32_t D);
grm_status grm__dense_setup(grm__trainer *t);
void grm__dense_teardown(grm__trainer *t);
/* The stack's forward on the batch: acts[ndense] is the head's input. */
grm_status grm__dense_forward(grm__trainer *t, const grm__batch *bt, int training,
                              int64_t step);
/* Backward through the stack from the head's d_pred (parameter gradients accumulate). */
grm_status grm__dense_backward(grm__trainer *t, const grm__batch *bt);
/* Zero every parameter gradient before a step. */
void grm__dense_zero_grads(grm__trainer *t);
/* The dense optimizer on every parameter. */
grm_status grm__dense_step(grm__trainer *t);
/* Data-parallel: the dense gradients, loss, samples and tokens summed over the ranks. */
grm_status grm__dense_allreduce(grm__trainer *t, double *loss, int64_t *samples,
                                int64_t *tokens);
/* The dense parameters are identical on every rank (a hash compared over the ranks). */
grm_status grm__dense_check_replicas(grm__trainer *t);

/* ---- eval.c ---- */

grm_status grm__eval_setup(grm__trainer *t);
/* A trained model ready to score: the pipeline's data read, every instance created, the
 * checkpoint opts->checkpoint (a file, or a directory's newest) loaded; its path into path
 * [cap]. What `grmhost eval`, `recommend` and `export` start from. Close with
 * grm__trainer_close, also after a failure. */
grm_status grm__trainer_open(grm__pipeline *p, const grm__run_opts *opts, grm__trainer *t,
                             char *path, size_t cap);
void grm__trainer_close(grm__trainer *t);
void grm__eval_teardown(grm__trainer *t);
/* Evaluate split (0 valid, 1 test); *score (optional) gets the model-selection metric. */
grm_status grm__run_eval(grm__trainer *t, int split, int with_pop, double *score);
/* The catalog's item rows into t->ev.cat_rows [ncatalog, D], the candidates every query is
 * scored against (collective with several ranks); the buffers grow to the whole catalog
 * if they held a chunk. What `recommend` and `export` score with. */
grm_status grm__eval_catalog(grm__trainer *t);
/* Catalog items [c0, c0 + n) into t->ev.cat_rows, n <= t->ev.chunk (the chunk [train]
 * eval_memory_mb allows): recommend and export take a catalog larger than it a chunk at a
 * time. */
grm_status grm__eval_catalog_rows(grm__trainer *t, int64_t c0, int64_t n);
/* The index of item id in ds->catalog_ids (sorted), or -1. */
int64_t grm__eval_catalog_index(const grm__dataset *ds, int64_t id);
/* The query (user state) of each of t->eb's b users (t->eb.users, .hist_end, .b set by the
 * caller) after the history [offsets[u], hist_end): the dense stack's output, for sequence
 * models its last token's. *q [b, D] is borrowed until the next batch; NULL when b is 0.
 * The lookups are collective: with several ranks every rank calls, b possibly 0. The one
 * user-state computation of evaluation, `grmhost recommend` and `grmhost export`. */
grm_status grm__eval_queries(grm__trainer *t, const float **q);
/* A physical table's existing rows (what `grmhost export` writes and incremental export
 * diffs: a hash store's keys, a static table's rows training updated), read a range at a
 * time: keys [n] sorted (malloc'd, 8 bytes a row) and the rows either through the store's
 * tensor_rows (ABI 1.10; weight its tensor) or from the weight tensors() hands out
 * (borrowed base; row k is base row row[k], or keys[k] when row is NULL), never copied
 * whole. */
typedef struct grm__table_src {
    int64_t *keys;          /* [n] sorted; NULL: the store has no such table */
    int64_t n, dim;
    int32_t weight;         /* tensor_rows' index of the weight, or -1 */
    const float *base;      /* weight < 0: [rows, dim], borrowed from tensors() */
    int64_t *row;           /* weight < 0: [n] each key's row in base, or NULL (row = key) */
} grm__table_src;
/* Table s as a grm__table_src (src->keys NULL when the store has no such table). Between
 * this and the last read, no lookup with GRM_EMB_INSERT and no update. */
grm_status grm__table_open(grm__trainer *t, int32_t s, grm__table_src *src);
/* Rows [row0, row0 + n) of src into out [n, dim]. */
grm_status grm__table_read(grm__trainer *t, const grm__table_src *src, int64_t row0, int64_t n,
                           float *out);
void grm__table_close(grm__table_src *src);
/* Between evaluation batches: deliver pending signals (train.c); GRM_ECANCELED once
 * SIGINT or SIGTERM came, agreed by every rank. */
grm_status grm__poll_stop(grm__trainer *t);

/* ---- checkpoint.c ---- */

/* This rank's checkpoint directory; a directory of several other world sizes is refused. */
grm_status grm__ckpt_dir_of(grm__trainer *t);
/* Lock dir for this process (a live holder refuses, a dead one's lock is taken over);
 * unlock releases it (no lock: nothing). */
grm_status grm__ckpt_lock(grm__trainer *t, const char *dir);
void grm__ckpt_unlock(grm__trainer *t);
/* --fresh: move an earlier run's checkpoints in dir aside (replaced-by-fresh-*). */
grm_status grm__ckpt_fresh(const char *dir);
/* Remove the temporaries a killed save left behind (whose writer is gone). */
void grm__ckpt_remove_stale(const char *dir);
/* Resume from the newest checkpoint (this job's own, or N other ranks'). */
grm_status grm__ckpt_resume(grm__trainer *t);
/* Write step-N (async updates flushed first). */
grm_status grm__ckpt_save(grm__trainer *t);

/* ---- delta.c: incremental export ([export] every = N) ---- */
typedef struct grm__delta grm__delta;
/* Start: read back what the deltas already on disk add up to (the baseline the next delta
 * is diffed against). Off (t->delta NULL) without [export] every or with several ranks. */
grm_status grm__delta_start(grm__trainer *t);
/* Write the next delta: the rows that changed since the baseline, every dense parameter.
 * Nothing when the newest delta is of this step already. */
grm_status grm__delta_write(grm__trainer *t);
/* Free dx (NULL: t->delta). */
void grm__delta_stop(grm__trainer *t, grm__delta *dx);
/* Load one checkpoint file. */
grm_status grm__ckpt_load(grm__trainer *t, const char *path);
/* Restore early stopping's best model; path [cap] names the file read. */
grm_status grm__ckpt_load_best(grm__trainer *t, char *path, size_t cap);
/* Early stopping: record a validation score, keep the best model, set *stop. */
grm_status grm__ckpt_track_best(grm__trainer *t, double score, int *stop);
/* eval --checkpoint DIR|FILE: the file this rank reads into path [cap]. */
grm_status grm__ckpt_eval_path(grm__trainer *t, const char *given, char *path, size_t cap);

/* ---- report.c ---- */

void grm__report_data(grm__trainer *t, int training, int64_t evaluated, const int64_t *nsplit,
                      double read_s);
void grm__report_start(grm__trainer *t);
/* Metrics of a logged step: loss, throughput, balance, store and exchange counters, the
 * replica check. */
grm_status grm__report_step(grm__trainer *t, int64_t samples, double loss, double sps);
void grm__report_trained(grm__trainer *t, double el, int64_t steps, int64_t samples);
void grm__report_progress(grm__trainer *t, double loss, double sps, double elapsed, int tty,
                          int final);
void grm__report_profile(const grm__trainer *t, double loop_s, int64_t steps);
void grm__report_summary(grm__trainer *t, FILE *f);

#endif /* GRM_TRAIN_H */

/* core/pipeline.h - a pipeline INI wired to plugin instances (DESIGN.md §4, §5), the
 * in-memory dataset it reads, and the trainer that runs it. Internal to libgrmcore. */
#ifndef GRM_PIPELINE_H
#define GRM_PIPELINE_H

#include "grm_core.h"
#include "sparse.h"

/* A plugin instance: which plugin, its filled config, its section. */
typedef struct grm__stage {
    const grm__plugin *plugin;     /* borrowed from the registry */
    grm__pconfig config;           /* owned */
    const grm__section *section;   /* borrowed from the config; NULL when defaulted */
    char *label;                   /* owned: "reader", "dense.0", ... */
    void *inst;                    /* owned: created by the kind's create/open */
} grm__stage;

/* A [feature.NAME] section: one id or sequence column looked up in one table. */
enum { GRM__BATCH_FIXED = 0, GRM__BATCH_TOKENS = 1 };
enum { GRM__POOL_MEAN = 0, GRM__POOL_SUM = 1, GRM__POOL_NONE = 2, GRM__POOL_TILE = 3 };

typedef struct grm__feature {
    char *name;                    /* owned: NAME */
    char *source;                  /* owned: column */
    char *table;                   /* owned: its id space (logical table) name */
    int32_t table_idx;             /* index into pipeline tables (id spaces) */
    int32_t dim;
    int32_t pooling;               /* GRM__POOL_* */
    int64_t window;                /* most recent ids used from a sequence (0: max_seq_len) */
    int64_t width;                 /* columns of the dense input: dim, or window * dim (tile) */
    int32_t merge;                 /* 0: its id space keeps a physical table of its own */
    int32_t is_sequence;           /* source is the sequence column */
    int32_t init;                  /* grm_emb_init */
    double init_scale;
    int64_t rows;                  /* 0: from the data */
    const char *file;              /* the INI file of its section (an include's) */
    int line;
} grm__feature;

/* [train] rank_split: contiguous slices, or TurboGR §4.1.3 global token reallocation. */
enum { GRM__SPLIT_CONTIGUOUS = 0, GRM__SPLIT_TOKENS = 1 };

/* [train] input: every rank reads everything, or its own share routed by key (route.h), or
 * (ranking) its own share read while training runs (grm__stream). */
enum { GRM__INPUT_WHOLE = 0, GRM__INPUT_SHARDED = 1, GRM__INPUT_STREAM = 2 };

/* What [train] task = trains. */
enum { GRM__TASK_RETRIEVAL = 0, GRM__TASK_RANKING = 1 };
/* [train] lr_decay: how the learning rate falls after the warm-up (core/lr.c). */
enum { GRM__LR_NONE = 0, GRM__LR_COSINE = 1, GRM__LR_LINEAR = 2 };

/* Host settings from [pipeline], [train], [checkpoint]. */
typedef struct grm__settings {
    /* [pipeline] */
    const char *name;
    grm_str_list plugin_dirs;
    int64_t threads;
    const char *device;            /* cpu, ref or cuda:N (core/backend.h) */
    /* [train] */
    int32_t task;                  /* GRM__TASK_* */
    grm_str_list label_columns;    /* ranking: one task per column */
    double valid_fraction, test_fraction;
    const char *user_column, *sequence_column, *time_column;
    int64_t max_seq_len, batch_size, epochs, steps, seed, log_every, eval_every;
    int64_t eval_batch, early_stop;
    int64_t eval_memory_mb;   /* [train] eval_memory_mb: catalog rows and scores, MiB */
    int32_t train_on_valid;        /* retrieval: the validation item trains too */
    int64_t accumulate;            /* batches per optimizer step (gradient accumulation) */
    int64_t sparse_group;          /* ranks per replica group of the rows (0: all) */
    int64_t prefetch;              /* batches assembled ahead on the data thread (0: none) */
    int64_t prefetch_ranks;        /* the most ranks whose samples a data thread assembles
                                    * to prefetch the rows they will ask it for (0: none) */
    int32_t prefetch_ahead;        /* lookups send the next batch's keys to their owners
                                    * (prefetch.c, core/dist.c) where prefetch_ranks does
                                    * not cover the world */
    int32_t prefetch_evict;        /* the data thread trims a tiered store's cache after
                                    * each prefetch (grm_emb_ops.trim, prefetch.c) */
    int32_t rank_split;            /* GRM__SPLIT_*: a global batch's samples over the ranks */
    int32_t input;                 /* GRM__INPUT_* */
    const char *shard_by;          /* input = sharded: the reader's column routing rows */
    int64_t shuffle_buffer;        /* input = stream: rows drawn from at random (0: derived) */
    int64_t sequence_blocks;       /* ranking: leading blocks on the pooling = none tokens */
    int32_t batching;              /* GRM__BATCH_* */
    int64_t batch_tokens;          /* batching = tokens: target tokens per step (0: derived) */
    grm_int_list topk;
    int64_t select_k;              /* K of the validation NDCG@K that selects the model */
    int32_t sparse_async;          /* TurboGR §4.2.2: sparse updates lag one step */
    double lr_warmup;              /* epochs of linear learning-rate warm-up (0: none) */
    int32_t lr_decay;              /* GRM__LR_* after the warm-up */
    double lr_decay_epochs;        /* epochs from step 1 to the end of the decay (0: run) */
    double lr_min;                 /* the decay's floor, a fraction of each optimizer's lr */
    const char *metrics_out;
    const char *item_table;
    /* [checkpoint] */
    const char *ckpt_dir;
    int64_t ckpt_every, ckpt_keep;
    /* [export] */
    int64_t export_every;          /* 0: no incremental export */
    const char *export_dir;        /* "": [checkpoint] dir/export */
    int64_t export_memory;         /* bytes of a delta's changed rows it may hold */
} grm__settings;

/* The dataset: one row per user with its time-ordered items (from the reader and the
 * transforms), split leave-one-out. */
typedef struct grm__dataset {
    int64_t nusers;
    int64_t *users;                /* [U] user ids */
    int64_t *offsets;              /* [U+1] into items */
    int64_t *items;                /* [total] item ids, time order within a user */
    int64_t *times;                /* [total] or NULL; ranking: beside fids[seq_feature] */
    /* leave-one-out: user u trains on items[offsets[u] .. train_end[u]) */
    int64_t *train_end;            /* [U] */
    int32_t *has_eval;             /* [U] 1 when the user has valid and test targets */
    int32_t fit_valid;             /* [train] train_on_valid: see grm__fit_end */
    /* training examples: (user, position t) predicting items[t] from items before t */
    int64_t nexamples;
    int64_t *ex_user;              /* [N] user index */
    int64_t *ex_pos;               /* [N] absolute index into items */
    /* the catalog for full ranking and negatives */
    int64_t ncatalog;
    int64_t *catalog_ids;          /* [C] sorted distinct item ids */
    int64_t *catalog_counts;       /* [C] occurrences in the training part */
    int64_t max_item, max_user;
    int64_t bad_rows, raw_rows;    /* of the whole input (every rank's share summed) */
    /* input = sharded on several ranks: this rank holds only the users (ranking: rows)
     * routed to it; the catalog, max_*, fmax, fmaxlen and prior still describe all ranks'
     * data, and all_* sum the ranks' users, examples (ranking: training rows) and eval
     * users (ranking: rows of valid and test). Equal to the local counts otherwise. */
    int32_t sharded;
    int64_t all_users, all_examples, all_eval;

    /* ranking: one sample per row; feature f of row r is the ids
     * fids[f][fofs[f][r] .. fofs[f][r+1]) (one id for an I64 column, a list for LIST_I64) */
    int64_t nrows;
    int32_t nfeat, ntasks;
    int64_t **fofs;                /* [nfeat][nrows+1] */
    int64_t **fids;                /* [nfeat][...] */
    int64_t *fmax;                 /* [nfeat] largest id */
    int64_t *fmaxlen;              /* [nfeat] longest list */
    float *labels;                 /* [nrows, ntasks] */
    int64_t *groups;               /* [nrows] user id per row (GAUC), or NULL */
    int64_t *split_rows[3];        /* train, valid, test row indices */
    int64_t nsplit[3];
    double *prior;                 /* [ntasks] positive rate of the training rows */
} grm__dataset;

/* The end of user u's training items: train_end, or one further with [train]
 * train_on_valid (the validation item is then a training target too; evaluation keeps
 * train_end as the end of the validation history). */
static inline int64_t grm__fit_end(const grm__dataset *ds, int64_t u)
{
    return ds->train_end[u] + (ds->fit_valid && ds->has_eval[u]);
}

typedef struct grm__pipeline {
    grm__config *cfg;              /* owned */
    grm__registry *reg;            /* owned */
    grm__settings set;
    grm__pconfig set_pipeline, set_train, set_ckpt, set_export;   /* owned backing of `set` */

    grm__stage reader;
    grm__stage *transforms;        /* [ntransforms] in file order */
    int32_t ntransforms;
    grm__feature *features;        /* [nfeatures] in file order */
    int32_t nfeatures;
    /* the pooling = none feature, or -1: a retrieval sequence model's item sequence, or a
     * ranking row's token list (the first set.sequence_blocks blocks run on its tokens) */
    int32_t seq_feature;
    /* id spaces (logical tables): one per distinct [feature.*] table name; features naming
     * the same table read the same rows */
    grm_emb_table_spec *tables;    /* [ntables] */
    int32_t ntables;
    /* MTGRBoost §4.2 table merging: id spaces with equal (dim, optimizer, init) share one
     * physical table of the store when it takes any id (GRM_EMB_ANY_ID); plan feature s is
     * id space s, and its keys are (i << (63 - k)) | id */
    grm__sparse_plan *plan;        /* owned */
    grm_emb_table_spec *phys;      /* [nphys] the tables the store holds */
    char **phys_names;             /* [nphys] owned backing of phys[].name */
    int32_t nphys;
    grm__stage emb;
    grm__stage opt_sparse, opt_dense;
    grm__stage *dense;             /* [ndense] in [dense.N] order */
    int32_t ndense;
    grm__stage head;
    grm__stage ckpt;
    grm__stage comm;
    grm_comm_handle comm_handle;
    grm_optimizer sparse_opt;
} grm__pipeline;

/* Descriptors of the host's own sections ([pipeline], [train], [checkpoint],
 * [feature.*]), NULL-terminated, for help output. */
extern const grm_plugin_info *const grm__host_sections[];

/* Load the file, load plugins, validate every section against the declared parameters,
 * and resolve the wiring (no plugin instance is created yet). */
grm_status grm__pipeline_load(const char *path, grm__pipeline **out);
/* The same, with `--set section.key=value` overrides sets [nsets] applied over the file. */
grm_status grm__pipeline_load_with(const char *path, const char *const *sets, int nsets,
                                   grm__pipeline **out);
void grm__pipeline_destroy(grm__pipeline *p);
/* Print the wired pipeline (grmhost check). */
void grm__pipeline_print(FILE *f, const grm__pipeline *p);

/* Open the reader and the transforms on the input's schema, check that every column the
 * pipeline reads is there with its type (the check train makes before reading), close them
 * (core/data.c). */
grm_status grm__input_check(grm__pipeline *p);
/* Every wiring check train makes before step 1, without reading the data: the input's
 * schema (grm__input_check), the dense blocks created on their widths and the stack's
 * output against the item dim or the tasks, the head against the task (grmhost check;
 * core/train.c). Creates nothing that outlives the call. */
grm_status grm__check(grm__pipeline *p);

/* Read the data through the reader and transforms and split it (core/data.c). */
grm_status grm__dataset_build(grm__pipeline *p, grm__dataset **out);
void grm__dataset_destroy(grm__dataset *ds);
/* Collective: st on every rank that failed, GRM_EIO with "FILE: what" on the others. */
grm_status grm__agree(const grm__pipeline *p, grm_status st, const char *what);

/* [train] input = stream (ranking, MTGRBoost §3): this rank's reader shard read, transformed
 * and split in pieces of one chunk while training runs, `passes` times over (core/data.c).
 * grm__stream_next runs on the data thread; grm__stream_eval may run beside it. */
typedef struct grm__stream grm__stream;
grm_status grm__stream_open(grm__pipeline *p, int64_t passes, grm__stream **out);
grm_status grm__stream_next(grm__stream *s, grm__dataset **piece, int64_t *pass);
grm_status grm__stream_eval(grm__stream *s, grm__dataset **out, double *pos, int64_t *ntrain,
                            int *done);
void grm__stream_close(grm__stream *s);

/* Options of a train or eval run (grmhost's flags). */
typedef struct grm__run_opts {
    int fresh;                     /* ignore existing checkpoints */
    int quiet, verbose;
    const char *metrics_out;       /* overrides [train] metrics_out */
    const char *checkpoint;        /* eval: directory or file */
    int64_t max_steps;             /* >0: stop after this many steps (tests) */
    int profile;                   /* print the per-stage time breakdown at the end */
    int batches_in_memory;         /* benchmark: assemble every batch before step 1 */
    int serve_metrics;             /* --metrics-port given: serve them on 127.0.0.1 */
    int metrics_port;              /* its port (0: any free one, logged) */
    int ids_only;                  /* `grmhost profile`: run the steps for their id stream;
                                      no checkpoint, export or evaluation after them */
} grm__run_opts;

grm_status grm__train(grm__pipeline *p, const grm__run_opts *opts);

/* `grmhost recommend` (core/recommend.c): top-K catalog items per user of a retrieval model. */
typedef struct grm__rec_opts {
    int64_t k;                     /* items per user */
    const char *users_path;        /* user ids, one per line; NULL: every user of the data */
    FILE *out;                     /* borrowed: where the lines go */
    const char *out_name;          /* for messages */
    int jsonl;                     /* 0: TSV user, rank, item, score; 1: one JSON per user */
    int keep_history;              /* 1: items the user already has stay candidates */
    int progress;                  /* draw a progress bar on stderr */
} grm__rec_opts;
typedef struct grm__rec_stats {
    int64_t users, candidates;
    double seconds;                /* scoring and writing, the data read and model load apart */
} grm__rec_stats;
grm_status grm__recommend(grm__pipeline *p, const grm__run_opts *opts,
                          const grm__rec_opts *ro, grm__rec_stats *stats);
/* `grmhost export` (core/recommend.c): the model a server needs as SafeTensors files in dir
 * (items, users, tables, dense) plus manifest.json; floats as dtype (F32, F16, BF16). */
/* `grmhost export --since S` (core/delta.c): the deltas after S added up into out/tables
 * and out/dense.safetensors (S = 0: the whole model at the newest delta's step); *seq and
 * *step of the newest delta, *rows the rows written. */
grm_status grm__delta_export(grm__pipeline *p, int64_t since, const char *out, int64_t *seq,
                             int64_t *step, int64_t *rows);
/* The directory of the delta files: [export] dir, or [checkpoint] dir/export. */
void grm__delta_dir(const grm__pipeline *p, char *buf, size_t cap);
grm_status grm__export(grm__pipeline *p, const grm__run_opts *opts, const char *dir,
                       int32_t dtype, int64_t *nfiles);
grm_status grm__eval(grm__pipeline *p, const grm__run_opts *opts);

/* ---- metrics (core/metrics.c) ---- */

/* Rank of the target among candidates: the number of items scoring higher, plus those
 * scoring equal with a smaller id (a deterministic tie rule shared by every scorer). */
typedef struct grm__rank_acc {
    int32_t nk;
    int64_t k[GRM_PARAM_LIST_MAX];
    double hr[GRM_PARAM_LIST_MAX], ndcg[GRM_PARAM_LIST_MAX];
    double mrr;
    int64_t n;
} grm__rank_acc;

void grm__rank_acc_init(grm__rank_acc *a, const grm_int_list *topk);
void grm__rank_acc_add(grm__rank_acc *a, int64_t rank);
void grm__rank_acc_merge(grm__rank_acc *into, const grm__rank_acc *from);

/* The store's grm_emb_ops.flags (GRM_EMB_*; 0 for a store built before ABI 1.3). */
uint32_t grm__emb_flags(const grm__pipeline *p);

/* Metrics sink: JSON lines (one object per metric) and the final summary table. */
typedef struct grm__metrics grm__metrics;
/* Open the sink (path NULL or "": the summary only). Every record carries its wall-clock
 * time (UTC), the run's id and pipeline_hash (grm__config_hash). fresh: a non-empty file
 * at path is moved aside to PATH.N first, and the log says so. */
grm_status grm__metrics_open(const char *path, uint64_t pipeline_hash, int fresh,
                             grm__metrics **out);
/* The run id the records carry: "20261124T175001Z-1a2b3c4d" (static in m). */
const char *grm__metrics_run(const grm__metrics *m);
void grm__metrics_close(grm__metrics *m);
/* GRM_EIO naming the file and the error when a metrics write has failed (a full disk,
 * /dev/full): the run stops at its next logged step rather than lose records silently. */
grm_status grm__metrics_check(const grm__metrics *m);
void grm__metrics_emit(grm__metrics *m, int64_t step, const char *split, const char *name,
                       double value);
/* The metrics file's size in bytes (-1: no file), recorded in each checkpoint. */
int64_t grm__metrics_tell(const grm__metrics *m);
/* A resumed run: cut the file back to `bytes`, its size when the checkpoint of `step` was
 * saved, so that the records a crashed run wrote after it are not there twice, and go on
 * under the run id of the records before it (the file reads as one run). */
grm_status grm__metrics_cut(grm__metrics *m, int64_t bytes, int64_t step);
/* JSON string contents of s into buf [cap] (NUL-terminated, cut to fit): `"` and `\`
 * escaped, control bytes (ESC among them) as \u00XX. Returns the escaped length. */
size_t grm__json_escape(char *buf, size_t cap, const char *s);
/* The latest value of each (split, name) in Prometheus' text format (thread-safe: the
 * --metrics-port thread calls it while the trainer emits). */
void grm__metrics_prometheus(grm__metrics *m, FILE *f);
/* --metrics-port N (core/serve.c): serve grm__metrics_prometheus over HTTP on
 * 127.0.0.1:N (0: any free port) from a libuv loop on its own thread. */
typedef struct grm__serve grm__serve;
grm_status grm__serve_start(int port, grm__metrics *metrics, grm__serve **out);
int grm__serve_port(const grm__serve *s);   /* the port bound */
void grm__serve_stop(grm__serve *s);        /* NULL: nothing */
/* Print every value emitted last for each (split, name) as a table. */
void grm__metrics_summary(grm__metrics *m, FILE *f);

/* AUC of scores against 0/1 labels (ties count half); GAUC averages per-group AUC
 * weighted by group size over groups with both classes (MTGRBoost §6.1). */
double grm__auc(const float *scores, const float *labels, int64_t n);
double grm__gauc(const float *scores, const float *labels, const int64_t *groups, int64_t n);

#endif /* GRM_PIPELINE_H */

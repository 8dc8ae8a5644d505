/* core/pipeline.c - from a pipeline INI to a validated, wired set of stages
 * (DESIGN.md §4). The host's own sections are declared with the same grm_param_decl
 * tables plugins use, so every key gets the same checks and did-you-mean. */
#include "backend.h"
#include "head.h"
#include "pipeline.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- host-declared sections ---- */

typedef struct pipeline_cfg {
    const char *name;
    grm_str_list plugin_dirs;
    int64_t threads;
    const char *device;
} pipeline_cfg;

static const grm_param_decl pipeline_params[] = {
    { "name", GRM_PARAM_STRING, 0, offsetof(pipeline_cfg, name), "grm", GRM_PARAM_ANY, NULL,
      "pipeline name, shown in logs and checkpoint metadata" },
    { "plugin_dirs", GRM_PARAM_STR_LIST, 0, offsetof(pipeline_cfg, plugin_dirs), NULL,
      GRM_PARAM_ANY, NULL, "extra directories searched for plugins, before the defaults" },
    { "threads", GRM_PARAM_INT, 0, offsetof(pipeline_cfg, threads), "0", GRM_PARAM_RANGE(0, 1024),
      NULL, "worker threads for the host pool (0: one per online CPU)" },
    { "device", GRM_PARAM_STRING, 0, offsetof(pipeline_cfg, device), "cpu", GRM_PARAM_ANY,
      NULL, "compute backend: cpu (threaded and BLAS paths), ref (the plain reference "
      "loops, single-threaded), cuda:N (GPU N)" },
    { NULL },
};

typedef struct train_cfg {
    int32_t task;
    grm_str_list label_columns;
    double valid_fraction, test_fraction;
    const char *user_column, *sequence_column, *time_column, *item_table, *metrics_out;
    const char *shard_by;
    int64_t max_seq_len, batch_size, epochs, steps, seed, log_every, eval_every, eval_batch;
    int64_t eval_memory_mb;
    int64_t early_stop, batch_tokens, accumulate, sparse_group, prefetch, sequence_blocks;
    int64_t prefetch_ranks;
    int64_t select_k, shuffle_buffer;
    int32_t batching, rank_split, sparse_async, input, train_on_valid, lr_decay, prefetch_ahead;
    int32_t prefetch_evict;
    double lr_warmup, lr_decay_epochs, lr_min;
    grm_int_list topk;
} train_cfg;

static const grm_param_decl train_params[] = {
    { "task", GRM_PARAM_ENUM, 0, offsetof(train_cfg, task), "retrieval", GRM_PARAM_ANY,
      "retrieval|ranking", "retrieval: next item of each user's sequence, full-ranking "
      "HR/NDCG; ranking: one labelled sample per row, AUC/GAUC/logloss" },
    { "label_columns", GRM_PARAM_STR_LIST, 0, offsetof(train_cfg, label_columns), NULL,
      GRM_PARAM_ANY, NULL, "ranking: 0/1 label columns (i64 or f32), one task each" },
    { "valid_fraction", GRM_PARAM_DOUBLE, 0, offsetof(train_cfg, valid_fraction), "0.1",
      GRM_PARAM_RANGE(0, 0.5), NULL, "ranking: share of rows held out for validation "
      "(a seeded hash of the row picks them)" },
    { "test_fraction", GRM_PARAM_DOUBLE, 0, offsetof(train_cfg, test_fraction), "0.1",
      GRM_PARAM_RANGE(0, 0.5), NULL, "ranking: share of rows held out for test" },
    { "user_column", GRM_PARAM_STRING, 0, offsetof(train_cfg, user_column), "user",
      GRM_PARAM_ANY, NULL, "I64 column holding the user id of each sequence" },
    { "sequence_column", GRM_PARAM_STRING, 0, offsetof(train_cfg, sequence_column), "item",
      GRM_PARAM_ANY, NULL, "LIST_I64 column holding each user's items in time order" },
    { "time_column", GRM_PARAM_STRING, 0, offsetof(train_cfg, time_column), "", GRM_PARAM_ANY,
      NULL, "LIST_I64 column of timestamps beside the sequence (optional; ranking: beside the "
      "pooling = none feature's list, value for value)" },
    { "sequence_blocks", GRM_PARAM_INT, 0, offsetof(train_cfg, sequence_blocks), "0",
      GRM_PARAM_RANGE(0, 1 << 20), NULL, "ranking with a pooling = none feature: the first N "
      "[dense.*] blocks run on its jagged tokens (e.g. HSTU); each row's last token output, "
      "beside the pooled features, is the input of the rest (e.g. MMoE, MTGRBoost §2)" },
    { "item_table", GRM_PARAM_STRING, 0, offsetof(train_cfg, item_table), "", GRM_PARAM_ANY,
      NULL, "table whose rows are the candidate items (default: the sequence feature's)" },
    { "metrics_out", GRM_PARAM_STRING, 0, offsetof(train_cfg, metrics_out), "", GRM_PARAM_ANY,
      NULL, "write every metric as one JSON object per line to this file" },
    { "max_seq_len", GRM_PARAM_INT, 0, offsetof(train_cfg, max_seq_len), "50",
      GRM_PARAM_RANGE(1, 1 << 20), NULL, "most recent items of the history a sample sees" },
    { "batch_size", GRM_PARAM_INT, 0, offsetof(train_cfg, batch_size), "256",
      GRM_PARAM_RANGE(1, 1 << 20), NULL, "samples per training step" },
    { "batching", GRM_PARAM_ENUM, 0, offsetof(train_cfg, batching), "fixed", GRM_PARAM_ANY,
      "fixed|tokens", "fixed: batch_size samples per step; tokens: cut each batch where its "
      "token count comes closest to batch_tokens (MTGRBoost §5.1, Algorithm 1), so token "
      "counts stay level and sample counts vary (retrieval)" },
    { "batch_tokens", GRM_PARAM_INT, 0, offsetof(train_cfg, batch_tokens), "0",
      GRM_PARAM_RANGE(0, 1 << 24), NULL, "batching = tokens: target tokens per step (0: "
      "batch_size times the mean tokens per sample)" },
    { "lr_warmup", GRM_PARAM_DOUBLE, 0, offsetof(train_cfg, lr_warmup), "0",
      GRM_PARAM_RANGE(0, 1e6), NULL, "epochs over which every optimizer's learning rate "
      "rises linearly from lr / W to lr (W: the warm-up's steps; 0: no warm-up; fractions "
      "of an epoch allowed)" },
    { "lr_decay", GRM_PARAM_ENUM, 0, offsetof(train_cfg, lr_decay), "none", GRM_PARAM_ANY,
      "none|cosine|linear", "after the warm-up, the learning rate falls from lr to lr_min * "
      "lr by a half cosine or a straight line, reaching it at lr_decay_epochs, and stays "
      "there" },
    { "lr_decay_epochs", GRM_PARAM_DOUBLE, 0, offsetof(train_cfg, lr_decay_epochs), "0",
      GRM_PARAM_RANGE(0, 1e6), NULL, "lr_decay: epochs from the first step to the end of the "
      "decay (0: the whole run, epochs or steps)" },
    { "lr_min", GRM_PARAM_DOUBLE, 0, offsetof(train_cfg, lr_min), "0", GRM_PARAM_RANGE(0, 1),
      NULL, "lr_decay: the floor, a fraction of each optimizer's configured lr" },
    { "accumulate", GRM_PARAM_INT, 0, offsetof(train_cfg, accumulate), "1",
      GRM_PARAM_RANGE(1, 4096), NULL, "batches whose gradients are summed before one "
      "optimizer step (gradient accumulation): sparse gradients are aggregated by id and each "
      "batch is weighted by its share of the step's samples (tokens for sequence models)" },
    { "sparse_group", GRM_PARAM_INT, 0, offsetof(train_cfg, sparse_group), "0",
      GRM_PARAM_RANGE(0, 1 << 20), NULL, "several ranks: ranks per replica group of the "
      "embedding rows (TurboGR §4.2.1 hierarchical sparse parallelism: rows sharded inside a "
      "group, groups kept identical); 0: one group of all ranks" },
    { "prefetch", GRM_PARAM_INT, 0, offsetof(train_cfg, prefetch), "2",
      GRM_PARAM_RANGE(0, 64), NULL, "batches assembled ahead on a data thread while the "
      "current one computes (MTGRBoost §3 prefetch, TurboGR's pipelined stages): ids, "
      "negatives' slots, segment unique and keys; 0: assemble each batch on the trainer "
      "thread when it is needed" },
    { "prefetch_ranks", GRM_PARAM_INT, 0, offsetof(train_cfg, prefetch_ranks), "8",
      GRM_PARAM_RANGE(0, 65536), NULL, "with a store that has a slower tier (emb-dynamic "
      "tiered) on several ranks that share one order (input = whole): on worlds of at most "
      "this many ranks, each data thread also assembles the other ranks' samples of each "
      "batch and prefetches the rows it owns of them, which they ask it for at the "
      "exchange (its assembly work grows with the world; 0: its own samples only; on "
      "larger worlds, prefetch_ahead)" },
    { "prefetch_evict", GRM_PARAM_BOOL, 0, offsetof(train_cfg, prefetch_evict), "true",
      GRM_PARAM_ANY, NULL, "with a store that has a slower tier (emb-dynamic tiered) and "
      "prefetch > 0: after each batch's prefetch the data thread brings the cache back "
      "under its budget, moving rows out (and writing dirty ones back) while the trainer "
      "computes, and keeping the rows of every batch in flight (grm_emb_ops.trim); false: "
      "the trainer's lookups and updates make room when the cache is over budget" },
    { "prefetch_ahead", GRM_PARAM_BOOL, 0, offsetof(train_cfg, prefetch_ahead), "true",
      GRM_PARAM_ANY, NULL, "with a store that has a slower tier on several ranks whose data "
      "threads do not assemble every rank's samples (more ranks than prefetch_ranks, input = "
      "sharded or stream): each lookup also sends the keys of the rank's next batch to their "
      "owners, whose data threads prefetch them (one more exchange of ids a lookup); false: "
      "the owners' lookups fetch those rows" },
    { "sparse_async", GRM_PARAM_BOOL, 0, offsetof(train_cfg, sparse_async), "false",
      GRM_PARAM_ANY, NULL, "semi-async sparse training (TurboGR §4.2.2): step i's embedding "
      "update (exchange and row optimizer) runs on a thread after step i + 1's lookup, "
      "beside its dense compute, so lookups see rows one step stale; dense stays "
      "synchronous. Pending updates are applied before evaluation and checkpoints" },
    { "input", GRM_PARAM_ENUM, 0, offsetof(train_cfg, input), "whole", GRM_PARAM_ANY,
      "whole|sharded|stream", "whole: every rank reads all of the input before step 1 and "
      "one global batch plan is split over the ranks; sharded: rank r of n reads its own "
      "share (reader shard r of n), routes each row to the rank of its shard_by key before "
      "the transforms, and trains on its own users with a batch plan of its own (MTGRBoost "
      "§3), so input memory and reading time shrink with the ranks; stream (ranking): rank r "
      "reads its shard chunk by chunk on the data thread while training runs, each chunk "
      "transformed and split as it comes, training rows drawn from a shuffle buffer, one "
      "pass per epoch; only the buffer and the held-out rows stay in memory" },
    { "shuffle_buffer", GRM_PARAM_INT, 0, offsetof(train_cfg, shuffle_buffer), "0",
      GRM_PARAM_RANGE(0, 1e12), NULL, "input = stream: training rows held and drawn from at "
      "random (0: 64 batches' worth)" },
    { "shard_by", GRM_PARAM_STRING, 0, offsetof(train_cfg, shard_by), "", GRM_PARAM_ANY,
      NULL, "input = sharded: the reader's column (i64 or string) whose value picks a row's "
      "rank, so all rows of one user meet on one rank (default: user_column)" },
    { "rank_split", GRM_PARAM_ENUM, 0, offsetof(train_cfg, rank_split), "contiguous",
      GRM_PARAM_ANY, "contiguous|tokens", "several ranks: how a global batch is split. "
      "contiguous: equal sample counts; tokens: global token reallocation (TurboGR §4.1.3): "
      "samples sorted by tokens, each given to the rank with the fewest tokens so far" },
    { "epochs", GRM_PARAM_INT, 0, offsetof(train_cfg, epochs), "1", GRM_PARAM_RANGE(1, 100000),
      NULL, "passes over the training examples" },
    { "steps", GRM_PARAM_INT, 0, offsetof(train_cfg, steps), "0", GRM_PARAM_RANGE(0, 1e15),
      NULL, "stop after this many steps (0: epochs decide)" },
    { "seed", GRM_PARAM_INT, 0, offsetof(train_cfg, seed), "42", GRM_PARAM_RANGE(0, 9e18), NULL,
      "seed of every random choice: initialization, shuffling, negatives, dropout" },
    { "log_every", GRM_PARAM_INT, 0, offsetof(train_cfg, log_every), "100",
      GRM_PARAM_RANGE(1, 1e12), NULL, "steps between progress lines and train metrics" },
    { "eval_every", GRM_PARAM_INT, 0, offsetof(train_cfg, eval_every), "0",
      GRM_PARAM_RANGE(0, 1e12), NULL, "steps between validation runs (0: after each epoch)" },
    { "eval_batch", GRM_PARAM_INT, 0, offsetof(train_cfg, eval_batch), "256",
      GRM_PARAM_RANGE(1, 1 << 20), NULL, "users scored at once in evaluation" },
    { "eval_memory_mb", GRM_PARAM_INT, 0, offsetof(train_cfg, eval_memory_mb), "256",
      GRM_PARAM_RANGE(1, 1 << 24), NULL, "MiB of catalog rows and scores evaluation holds; "
      "a larger catalog (a table larger than memory) is ranked a chunk at a time, the same "
      "ranks" },
    { "early_stop", GRM_PARAM_INT, 0, offsetof(train_cfg, early_stop), "0",
      GRM_PARAM_RANGE(0, 1e6), NULL, "stop after this many validation runs without "
      "improvement (NDCG@select_k, or the first task's AUC) and test the best model, kept "
      "as [checkpoint] dir/best.*; 0: off" },
    { "select_k", GRM_PARAM_INT, 0, offsetof(train_cfg, select_k), "10",
      GRM_PARAM_RANGE(1, 1e9), NULL, "retrieval: the K of the validation NDCG@K that early "
      "stopping and the best model follow (one of topk)" },
    { "train_on_valid", GRM_PARAM_BOOL, 0, offsetof(train_cfg, train_on_valid), "false",
      GRM_PARAM_ANY, NULL, "retrieval: each user's second-to-last item is a training target "
      "too, as in the HSTU reference code, which has no validation split; validation then "
      "scores items the model trained on, so early_stop must be 0" },
    { "topk", GRM_PARAM_INT_LIST, 0, offsetof(train_cfg, topk), "5,10,20",
      GRM_PARAM_RANGE(1, 1e9), NULL, "K of HR@K and NDCG@K (full ranking, leave-one-out)" },
    { NULL },
};

typedef struct ckpt_cfg {
    const char *dir;
    int64_t every, keep;
} ckpt_cfg;

static const grm_param_decl ckpt_host_params[] = {
    { "dir", GRM_PARAM_STRING, 0, offsetof(ckpt_cfg, dir), "", GRM_PARAM_ANY, NULL,
      "directory for checkpoints (empty: none; relative paths from the working directory)" },
    { "every", GRM_PARAM_INT, 0, offsetof(ckpt_cfg, every), "0", GRM_PARAM_RANGE(0, 1e12), NULL,
      "steps between checkpoints (0: after each epoch); one is always written at the end" },
    { "keep", GRM_PARAM_INT, 0, offsetof(ckpt_cfg, keep), "3", GRM_PARAM_RANGE(1, 1e6), NULL,
      "newest checkpoints kept; older ones are deleted" },
    { NULL },
};

typedef struct export_cfg {
    const char *dir;
    int64_t every;
    int64_t memory_mb;
} export_cfg;

static const grm_param_decl export_host_params[] = {
    { "every", GRM_PARAM_INT, 0, offsetof(export_cfg, every), "0", GRM_PARAM_RANGE(0, 1e12),
      NULL, "steps between incremental exports of the embedding rows changed since the last "
      "one (0: none); one is also written at the end" },
    { "dir", GRM_PARAM_STRING, 0, offsetof(export_cfg, dir), "", GRM_PARAM_ANY, NULL,
      "directory of the delta-S.safetensors files (empty: [checkpoint] dir/export)" },
    { "memory_mb", GRM_PARAM_INT, 0, offsetof(export_cfg, memory_mb), "64",
      GRM_PARAM_RANGE(0, 1 << 20), NULL, "MiB of a delta's changed rows held while its file "
      "is written; beyond it they are read from the store again (0: always read again)" },
    { NULL },
};

typedef struct feature_cfg {
    const char *source, *table;
    int64_t dim, window, rows;
    int32_t pooling, init, merge;
    double init_scale;
} feature_cfg;

static const grm_param_decl feature_params[] = {
    { "source", GRM_PARAM_STRING, 1, offsetof(feature_cfg, source), NULL, GRM_PARAM_ANY, NULL,
      "column the ids come from: the sequence column or the user column" },
    { "table", GRM_PARAM_STRING, 0, offsetof(feature_cfg, table), "", GRM_PARAM_ANY, NULL,
      "embedding table (default: the feature's name); features may share a table" },
    { "dim", GRM_PARAM_INT, 1, offsetof(feature_cfg, dim), NULL, GRM_PARAM_RANGE(1, 65536), NULL,
      "floats per embedding row" },
    { "pooling", GRM_PARAM_ENUM, 0, offsetof(feature_cfg, pooling), "mean", GRM_PARAM_ANY,
      "mean|sum|none|tile", "how a sequence's rows become one vector; none: every row is a "
      "token of a jagged sequence fed to the dense blocks (sequence models: HSTU, SASRec); "
      "tile: the last `window` rows side by side, zeros where the list is shorter (RecIS "
      "Table 1 sequence tile)" },
    { "window", GRM_PARAM_INT, 0, offsetof(feature_cfg, window), "0",
      GRM_PARAM_RANGE(0, 1 << 20), NULL, "most recent ids pooled (0: train.max_seq_len)" },
    { "merge", GRM_PARAM_BOOL, 0, offsetof(feature_cfg, merge), "true", GRM_PARAM_ANY, NULL,
      "let this feature's table share a physical table with others of the same dim, "
      "optimizer and init when the store takes any id (MTGRBoost §4.2); false keeps it alone" },
    { "rows", GRM_PARAM_INT, 0, offsetof(feature_cfg, rows), "0", GRM_PARAM_RANGE(0, 1e12),
      NULL, "table rows for fixed-size stores (0: largest id in the data + 1)" },
    { "init", GRM_PARAM_ENUM, 0, offsetof(feature_cfg, init), "normal", GRM_PARAM_ANY,
      "zeros|uniform|normal", "row initializer, a pure function of (seed, table, id)" },
    { "init_scale", GRM_PARAM_DOUBLE, 0, offsetof(feature_cfg, init_scale), "0.05",
      GRM_PARAM_RANGE(0, 100), NULL, "uniform: U(-a, a); normal: N(0, a^2)" },
    { NULL },
};

#define HOST_INFO(var, nm, desc, table, cfgtype)                                        \
    static const grm_plugin_info var = { GRM_PLUGIN_INFO_HEADER, .kind = 0, .name = nm, \
                                         .description = desc, .params = table,          \
                                         .config_size = sizeof(cfgtype) }
HOST_INFO(pipeline_info, "[pipeline]", "the pipeline as a whole", pipeline_params,
          pipeline_cfg);
HOST_INFO(train_info, "[train]", "the training loop and its evaluation (leave-one-out, full "
          "ranking)", train_params, train_cfg);
HOST_INFO(ckpt_host_info, "[checkpoint]", "where and how often checkpoints are written; the "
          "format plugin's own keys go in the same section", ckpt_host_params, ckpt_cfg);
HOST_INFO(export_host_info, "[export]", "incremental export: every N steps the embedding "
          "rows changed since the last export, beside the checkpoints (`grmhost export "
          "--since`)", export_host_params, export_cfg);
HOST_INFO(feature_info, "[feature.*]", "one sparse feature: a column looked up in an "
          "embedding table and pooled", feature_params, feature_cfg);

/* The host-owned sections, for `grmhost plugins` style help. */
const grm_plugin_info *const grm__host_sections[] = {
    &pipeline_info, &train_info, &ckpt_host_info, &export_host_info, &feature_info, NULL,
};

/* ---- helpers ---- */

static char *dupstr(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void stage_fini(grm__stage *s)
{
    grm__pconfig_fini(&s->config);
    free(s->label);
    memset(s, 0, sizeof *s);
}

/* Names of the params of info plus extra, NULL-terminated; caller frees the array. */
static const char **skip_list(const grm_plugin_info *info, const char *const *extra)
{
    int n = 0, m = 0;
    while (info && info->params && info->params[n].name) n++;
    while (extra && extra[m]) m++;
    const char **l = calloc((size_t)(n + m + 1), sizeof *l);
    if (!l) return NULL;
    for (int i = 0; i < n; i++) l[i] = info->params[i].name;
    for (int i = 0; i < m; i++) l[n + i] = extra[i];
    return l;
}

/* Resolve [section] plugin = NAME of `kind` (or `def` when the section or key is absent)
 * and fill its config, skipping the host's keys `host_keys`. */
static grm_status stage_setup(grm__pipeline *p, grm__stage *st, const char *section,
                              int32_t kind, const char *def, const char *const *host_keys)
{
    const grm__section *sec = grm__config_section(p->cfg, section);
    const grm__kv *kv = sec ? grm__section_kv(sec, "plugin") : NULL;
    const char *name = kv ? kv->value : def;
    memset(st, 0, sizeof *st);
    st->label = strdup(section);
    st->section = sec;
    if (!st->label) return grm_errorf(GRM_ENOMEM, "out of memory");
    if (!name) {
        if (sec)
            return grm_errorf(GRM_EINVAL, "%s:%d: [%s] needs 'plugin = <%s plugin>'; `grmhost "
                              "plugins` lists them", sec->file, sec->line, section,
                              grm__kind_name(kind));
        return grm_errorf(GRM_EINVAL, "%s: section [%s] is missing; add it with 'plugin = "
                          "<%s plugin>'", p->cfg->path, section, grm__kind_name(kind));
    }
    grm_status s = grm__registry_get(p->reg, name, kind, &st->plugin);
    if (s != GRM_OK) {
        if (kv)
            grm_error_prefix("%s:%d: [%s] plugin: ", kv->file, kv->line, section);
        else
            grm_error_prefix("%s: [%s] default plugin: ", p->cfg->path, section);
        return s;
    }
    if (kv) ((grm__kv *)kv)->used = 1;
    const char *skip[16] = { "plugin" };
    int ns = 1;
    for (int i = 0; host_keys && host_keys[i] && ns < 15; i++) skip[ns++] = host_keys[i];
    skip[ns] = NULL;
    return grm__params_fill(st->plugin->info, sec, p->cfg->path, skip, &st->config);
}

/* [head] names a head plugin (ABI 1.5), or a dense block with the loss ops, as heads were
 * before it: the kind stage_setup asks the registry for. */
static int32_t head_kind(const grm__pipeline *p, int ranking)
{
    const grm__section *sec = grm__config_section(p->cfg, "head");
    const grm__kv *kv = sec ? grm__section_kv(sec, "plugin") : NULL;
    const char *name = kv ? kv->value : ranking ? "head-bce" : "head-sampled-softmax";
    const grm__plugin *pl = grm__registry_find(p->reg, name);   /* a miss: stage_setup says */
    return pl && pl->info->kind == GRM_KIND_DENSE ? GRM_KIND_DENSE : GRM_KIND_HEAD;
}

static int cmp_dense(const void *a, const void *b)
{
    const grm__stage *x = a, *y = b;
    long nx = strtol(x->label + 6, NULL, 10), ny = strtol(y->label + 6, NULL, 10);
    return (nx > ny) - (nx < ny);
}

/* The [train] line that set `key`, or NULL (no such line, or no [train] section). */
static const grm__kv *train_kv(const grm__pipeline *p, const char *key)
{
    const grm__section *sec = grm__config_section(p->cfg, "train");
    return sec ? grm__section_kv(sec, key) : NULL;
}

static int is_uint(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

/* ---- load ---- */

/* The store's capability bits (0 for a store built before ABI 1.3). */
uint32_t grm__emb_flags(const grm__pipeline *p)
{
    const grm_emb_ops *ops = p->emb.plugin->info->ops;
    if (ops->struct_size < offsetof(grm_emb_ops, flags) + sizeof ops->flags) return 0;
    return ops->flags;
}

static const char *const init_names[] = { "zeros", "uniform", "normal" };

/* Id spaces -> physical tables (MTGRBoost §4.2; FusedRec §3's fusion criterion: equal dim,
 * optimizer and initializer). An id space merges unless one of its features says
 * merge = false or the store indexes rows by id (no GRM_EMB_ANY_ID): then it keeps a table of
 * its own under its own name, and its keys are its ids (k = 1, eq. 8 with i = 0). */
static grm_status plan_tables(grm__pipeline *p)
{
    grm_status st;
    int any_id = (grm__emb_flags(p) & GRM_EMB_ANY_ID) != 0;
    grm__sparse_feature_spec *specs = calloc((size_t)p->ntables + 1, sizeof *specs);
    if (!specs) return grm_errorf(GRM_ENOMEM, "out of memory");
    for (int32_t t = 0; t < p->ntables; t++) {
        const grm_emb_table_spec *ts = &p->tables[t];
        int merge = any_id;
        for (int32_t i = 0; i < p->nfeatures; i++)
            if (p->features[i].table_idx == t && !p->features[i].merge) merge = 0;
        specs[t] = (grm__sparse_feature_spec){ .name = ts->name, .dim = ts->dim,
                                               .optimizer = p->opt_sparse.plugin->info->name,
                                               .init = init_names[ts->init],
                                               .init_scale = ts->init_scale,
                                               .table = merge ? NULL : ts->name };
    }
    st = grm__sparse_plan_build(specs, p->ntables, &p->plan);
    free(specs);
    if (st != GRM_OK) return st;
    p->nphys = p->plan->ntables;
    p->phys = calloc((size_t)p->nphys + 1, sizeof *p->phys);
    p->phys_names = calloc((size_t)p->nphys + 1, sizeof *p->phys_names);
    if (!p->phys || !p->phys_names) return grm_errorf(GRM_ENOMEM, "out of memory");
    for (int32_t T = 0; T < p->nphys; T++) {
        const grm__sparse_table *tb = &p->plan->tables[T];
        /* a merged table is named by its id spaces joined with '+': "user+genre" */
        size_t len = 1;
        for (int32_t j = 0; j < tb->nfeatures; j++)
            len += strlen(p->tables[tb->features[j]].name) + 1;
        char *name = malloc(len);
        if (!name) return grm_errorf(GRM_ENOMEM, "out of memory");
        name[0] = 0;
        for (int32_t j = 0; j < tb->nfeatures; j++) {
            if (j) strcat(name, "+");
            strcat(name, p->tables[tb->features[j]].name);
        }
        p->phys_names[T] = name;
        const grm_emb_table_spec *first = &p->tables[tb->features[0]];
        p->phys[T] = *first;
        p->phys[T].name = name;
        p->phys[T].rows = 0;   /* the trainer sums its id spaces' rows */
    }
    return GRM_OK;
}

/* [pipeline] device names a backend, and every compute plugin (store, dense blocks, head,
 * optimizers) declares that it runs on its device (grm_plugin_info.devices; 0: the CPU).
 * Readers, transforms, checkpoints and comm run on the host and are not asked. */
static grm_status check_device(const grm__pipeline *p, const grm__stage *s, grm_device dev,
                               const char *name, const char *file, int line)
{
    const grm_plugin_info *info = s->plugin->info;
    const int32_t devices = info->devices ? info->devices : GRM_DEVICES_CPU;
    if (devices & (int32_t)GRM__DEVICE_BIT(dev.type)) return GRM_OK;
    return grm_errorf(GRM_EINVAL, "%s:%d: [pipeline] device = %s: [%s] plugin = %s does not "
                      "run on %s (it runs on %s%s%s); use device = cpu, or a plugin built for "
                      "%s", file, line, p->set.device, s->label, info->name, name,
                      devices & GRM_DEVICES_CPU ? "cpu" : "",
                      (devices & GRM_DEVICES_CPU) && (devices & GRM_DEVICES_CUDA) ? " and " : "",
                      devices & GRM_DEVICES_CUDA ? "cuda" : "", name);
}

static grm_status check_devices(const grm__pipeline *p)
{
    const grm__section *sec = grm__config_section(p->cfg, "pipeline");
    const grm__kv *kv = sec ? grm__section_kv(sec, "device") : NULL;
    const int line = kv ? kv->line : 0;
    const char *file = grm__kv_file(kv, p->cfg->path);
    grm_device dev;
    char name[16];
    grm_status st = grm__device_parse(p->set.device, &dev, name, sizeof name);
    if (st != GRM_OK) {
        grm_error_prefix("%s:%d: [pipeline] ", file, line);
        return st;
    }
    if ((st = check_device(p, &p->emb, dev, name, file, line)) != GRM_OK) return st;
    for (int32_t i = 0; i < p->ndense; i++)
        if ((st = check_device(p, &p->dense[i], dev, name, file, line)) != GRM_OK) return st;
    if ((st = check_device(p, &p->head, dev, name, file, line)) != GRM_OK
        || (st = check_device(p, &p->opt_sparse, dev, name, file, line)) != GRM_OK)
        return st;
    return check_device(p, &p->opt_dense, dev, name, file, line);
}

/* [pipeline] plugin_dirs (issue 25 item 5): an INI that names plugin directories is code,
 * since dlopen runs a library's constructors. So a relative directory is taken from the
 * INI's own directory (not the working directory), and only the plugin files the INI names
 * in a `plugin =` key are opened there (`check` included); files not named like plugins
 * never are. */
static grm_status load_plugin_dirs(grm__pipeline *p, const pipeline_cfg *pc)
{
    if (pc->plugin_dirs.n == 0) return GRM_OK;
    const grm__kv *kv = grm__section_kv(grm__config_section(p->cfg, "pipeline"),
                                        "plugin_dirs");
    // relative to the INI file the key came from (an include's, when it is there)
    const char *path = grm__kv_file(kv, p->cfg->path);
    const char **names = calloc((size_t)p->cfg->nsec + 1, sizeof *names);
    grm_status st = GRM_OK;
    int n = 0;
    if (!names) return grm_errorf(GRM_ENOMEM, "out of memory");
    for (int i = 0; i < p->cfg->nsec; i++) {
        const grm__kv *pk = grm__section_kv(&p->cfg->sec[i], "plugin");
        if (pk) names[n++] = pk->value;
    }
    const char *slash = strrchr(path, '/');
    for (int64_t i = 0; i < pc->plugin_dirs.n && st == GRM_OK; i++) {
        const char *d = pc->plugin_dirs.v[i];
        char dir[4096];
        if (d[0] != '/' && slash)
            snprintf(dir, sizeof dir, "%.*s/%s", (int)(slash - path), path, d);
        else
            snprintf(dir, sizeof dir, "%s", d);
        if ((st = grm__registry_load_dir_named(p->reg, dir, names, n)) != GRM_OK)
            grm_error_prefix("%s:%d: [pipeline] plugin_dirs: ", path, kv ? kv->line : 0);
    }
    free(names);
    return st;
}

grm_status grm__pipeline_load(const char *path, grm__pipeline **out)
{
    return grm__pipeline_load_with(path, NULL, 0, out);
}

grm_status grm__pipeline_load_with(const char *path, const char *const *sets, int nsets,
                                   grm__pipeline **out)
{
    grm_status st;
    grm__pipeline *p = calloc(1, sizeof *p);
    *out = NULL;
    if (!p) return grm_errorf(GRM_ENOMEM, "out of memory");
    if ((st = grm__config_load(path, &p->cfg)) != GRM_OK) goto fail;
    for (int i = 0; i < nsets; i++)
        if ((st = grm__config_set(p->cfg, sets[i], i + 1)) != GRM_OK) goto fail;
    /* the input data: relative to the INI file that names it, not the working directory */
    grm__config_resolve_path(p->cfg, "reader", "path");
    grm__host_set_config(p->cfg);

    /* known sections */
    static const char *const fixed[] = { "pipeline", "reader", "embedding", "head", "train",
                                         "optimizer.sparse", "optimizer.dense", "checkpoint",
                                         "distributed", "export", NULL };
    for (int i = 0; i < p->cfg->nsec; i++) {
        const grm__section *sec = &p->cfg->sec[i];
        int ok = 0;
        for (int j = 0; fixed[j]; j++) ok |= strcmp(sec->name, fixed[j]) == 0;
        ok |= strncmp(sec->name, "transform.", 10) == 0 && sec->name[10];
        ok |= strncmp(sec->name, "feature.", 8) == 0 && sec->name[8];
        if (strncmp(sec->name, "dense.", 6) == 0) {
            if (!is_uint(sec->name + 6)) {
                st = grm_errorf(GRM_EINVAL, "%s:%d: [%s]: dense sections are numbered "
                                "[dense.0], [dense.1], ... in stack order", sec->file, sec->line,
                                sec->name);
                goto fail;
            }
            ok = 1;
        }
        if (!ok) {
            static const char *const all[] = { "pipeline", "reader", "embedding", "head",
                                               "train", "optimizer.sparse", "optimizer.dense",
                                               "checkpoint", "distributed", "transform.NAME",
                                               "feature.NAME", "dense.N", "export" };
            const char *near = grm__closest(sec->name, all, 13);
            st = grm_errorf(GRM_EINVAL, "%s:%d: unknown section [%s]%s%s%s", sec->file, sec->line,
                            sec->name, near ? "; did you mean [" : "", near ? near : "",
                            near ? "]?" : "");
            goto fail;
        }
    }

    /* [pipeline] first: it may add plugin directories */
    if ((st = grm__params_fill(&pipeline_info, grm__config_section(p->cfg, "pipeline"), path,
                               NULL, &p->set_pipeline)) != GRM_OK)
        goto fail;
    const pipeline_cfg *pc = p->set_pipeline.data;
    p->set.name = pc->name;
    p->set.plugin_dirs = pc->plugin_dirs;
    p->set.threads = pc->threads;
    p->set.device = pc->device;
    if ((st = grm__registry_create(&p->reg)) != GRM_OK) goto fail;
    if ((st = load_plugin_dirs(p, pc)) != GRM_OK) goto fail;
    if ((st = grm__registry_load_default(p->reg)) != GRM_OK) goto fail;

    /* [train] */
    if ((st = grm__params_fill(&train_info, grm__config_section(p->cfg, "train"), path, NULL,
                               &p->set_train)) != GRM_OK)
        goto fail;
    const train_cfg *tc = p->set_train.data;
    p->set.task = tc->task;
    p->set.label_columns = tc->label_columns;
    p->set.valid_fraction = tc->valid_fraction;
    p->set.test_fraction = tc->test_fraction;
    int ranking = tc->task == GRM__TASK_RANKING;
    if (ranking && tc->label_columns.n == 0) {
        const grm__section *ts = grm__config_section(p->cfg, "train");
        st = grm_errorf(GRM_EINVAL, "%s:%d: [train] task = ranking needs label_columns = "
                        "<0/1 columns>, e.g. label_columns = click", ts ? ts->file : path,
                        ts ? ts->line : 0);
        goto fail;
    }
    p->set.user_column = tc->user_column;
    p->set.sequence_column = tc->sequence_column;
    p->set.time_column = tc->time_column;
    p->set.item_table = tc->item_table;
    p->set.metrics_out = tc->metrics_out;
    p->set.max_seq_len = tc->max_seq_len;
    p->set.batch_size = tc->batch_size;
    p->set.batching = tc->batching;
    p->set.batch_tokens = tc->batch_tokens;
    if (ranking && tc->batching == GRM__BATCH_TOKENS) {
        const grm__section *ts = grm__config_section(p->cfg, "train");
        st = grm_errorf(GRM_EINVAL, "%s:%d: [train] batching = tokens balances sequence "
                        "lengths of a retrieval pipeline; a ranking pipeline uses fixed",
                        ts ? ts->file : path, ts ? ts->line : 0);
        goto fail;
    }
    p->set.epochs = tc->epochs;
    p->set.steps = tc->steps;
    p->set.seed = tc->seed;
    p->set.log_every = tc->log_every;
    p->set.eval_every = tc->eval_every;
    p->set.eval_batch = tc->eval_batch;
    p->set.eval_memory_mb = tc->eval_memory_mb;
    p->set.early_stop = tc->early_stop;
    p->set.accumulate = tc->accumulate;
    p->set.sparse_group = tc->sparse_group;
    p->set.prefetch = tc->prefetch;
    p->set.prefetch_ranks = tc->prefetch_ranks;
    p->set.prefetch_ahead = tc->prefetch_ahead;
    p->set.prefetch_evict = tc->prefetch_evict;
    p->set.rank_split = tc->rank_split;
    p->set.input = tc->input;
    p->set.shard_by = tc->shard_by[0] ? tc->shard_by : tc->user_column;
    p->set.shuffle_buffer = tc->shuffle_buffer;
    if (tc->input == GRM__INPUT_STREAM && !ranking) {
        const grm__kv *kv = train_kv(p, "input");
        st = grm_errorf(GRM_EINVAL, "%s:%d: [train] input = stream trains ranking rows as they "
                        "are read; a retrieval pipeline's leave-one-out split needs each "
                        "user's whole history first: use input = whole or sharded", path,
                        kv ? kv->line : 0);
        goto fail;
    }
    p->set.sequence_blocks = tc->sequence_blocks;
    p->set.topk = tc->topk;
    p->set.select_k = tc->select_k;
    p->set.sparse_async = tc->sparse_async;
    p->set.lr_warmup = tc->lr_warmup;
    p->set.lr_decay = tc->lr_decay;
    p->set.lr_decay_epochs = tc->lr_decay_epochs;
    p->set.lr_min = tc->lr_min;
    p->set.train_on_valid = tc->train_on_valid;
    if (tc->train_on_valid && (ranking || tc->early_stop > 0)) {
        const grm__kv *kv = train_kv(p, "train_on_valid");
        st = grm_errorf(GRM_EINVAL, "%s:%d: [train] train_on_valid = true with %s: %s",
                        grm__kv_file(kv, path), kv ? kv->line : 0,
                        ranking ? "task = ranking" : "early_stop > 0",
                        ranking ? "it moves retrieval's validation item into training; a "
                                  "ranking split has no such item (remove it)"
                                : "validation would select on items the model trained on; "
                                  "set early_stop = 0 (train a fixed number of epochs) or "
                                  "train_on_valid = false");
        goto fail;
    }
    if (tc->sparse_async && tc->accumulate > 1) {
        const grm__kv *kv = train_kv(p, "sparse_async");
        st = grm_errorf(GRM_EINVAL, "%s:%d: [train] sparse_async with accumulate = %lld: the "
                        "lagged update takes one batch per step; use accumulate = 1 or "
                        "sparse_async = false", grm__kv_file(kv, path), kv ? kv->line : 0,
                        (long long)tc->accumulate);
        goto fail;
    }
    if (!ranking && tc->topk.n == 0) {
        const grm__kv *kv = train_kv(p, "topk");
        st = grm_errorf(GRM_EINVAL, "%s:%d: [train] topk is empty; list the K of HR@K and "
                        "NDCG@K, e.g. topk = 5,10,20", grm__kv_file(kv, path), kv ? kv->line : 0);
        goto fail;
    }
    if (!ranking) {
        int64_t i = 0;
        while (i < tc->topk.n && tc->topk.v[i] != tc->select_k) i++;
        const grm__kv *kv = train_kv(p, "select_k");
        if (i == tc->topk.n && kv) {
            st = grm_errorf(GRM_EINVAL, "%s:%d: [train] select_k = %lld is not one of topk; "
                            "add it to topk", kv->file, kv->line, (long long)tc->select_k);
            goto fail;
        }
    }

    /* plugins */
    if ((st = stage_setup(p, &p->reader, "reader", GRM_KIND_READER, NULL, NULL)) != GRM_OK)
        goto fail;
    for (int i = 0; i < p->cfg->nsec; i++) {
        const grm__section *sec = &p->cfg->sec[i];
        if (strncmp(sec->name, "transform.", 10) == 0) {
            grm__stage *nt = realloc(p->transforms, (size_t)(p->ntransforms + 1) * sizeof *nt);
            if (!nt) {
                st = grm_errorf(GRM_ENOMEM, "out of memory");
                goto fail;
            }
            p->transforms = nt;
            st = stage_setup(p, &p->transforms[p->ntransforms++], sec->name,
                             GRM_KIND_TRANSFORM, NULL, NULL);
            if (st != GRM_OK) goto fail;
        } else if (strncmp(sec->name, "dense.", 6) == 0) {
            grm__stage *nd = realloc(p->dense, (size_t)(p->ndense + 1) * sizeof *nd);
            if (!nd) {
                st = grm_errorf(GRM_ENOMEM, "out of memory");
                goto fail;
            }
            p->dense = nd;
            st = stage_setup(p, &p->dense[p->ndense++], sec->name, GRM_KIND_DENSE, NULL, NULL);
            if (st != GRM_OK) goto fail;
        } else if (strncmp(sec->name, "feature.", 8) == 0) {
            grm__pconfig fpc;
            if ((st = grm__params_fill(&feature_info, sec, path, NULL, &fpc)) != GRM_OK)
                goto fail;
            const feature_cfg *fc = fpc.data;
            grm__feature *nf = realloc(p->features, (size_t)(p->nfeatures + 1) * sizeof *nf);
            if (!nf) {
                grm__pconfig_fini(&fpc);
                st = grm_errorf(GRM_ENOMEM, "out of memory");
                goto fail;
            }
            p->features = nf;
            grm__feature *f = &p->features[p->nfeatures++];
            memset(f, 0, sizeof *f);
            f->name = dupstr(sec->name + 8);
            f->source = dupstr(fc->source);
            f->table = dupstr(fc->table[0] ? fc->table : sec->name + 8);
            f->dim = (int32_t)fc->dim;
            f->pooling = fc->pooling;
            f->window = fc->window ? fc->window : p->set.max_seq_len;
            f->width = fc->pooling == GRM__POOL_TILE ? f->window * fc->dim : fc->dim;
            f->merge = fc->merge;
            f->rows = fc->rows;
            f->init = fc->init;
            f->init_scale = fc->init_scale;
            f->line = sec->line;
            f->file = sec->file;
            f->is_sequence = !ranking && strcmp(fc->source, p->set.sequence_column) == 0;
            grm__pconfig_fini(&fpc);
            if (!f->name || !f->source || !f->table) {
                st = grm_errorf(GRM_ENOMEM, "out of memory");
                goto fail;
            }
            if (!ranking && !f->is_sequence && strcmp(f->source, p->set.user_column) != 0) {
                st = grm_errorf(GRM_EINVAL, "%s:%d: [%s] source = %s: a retrieval pipeline's "
                                "features read the sequence column '%s' or the user column "
                                "'%s'", sec->file, sec->line, sec->name, f->source,
                                p->set.sequence_column, p->set.user_column);
                goto fail;
            }
        }
    }
    /* sequence models: one feature whose rows stay tokens (pooling = none) */
    p->seq_feature = -1;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const grm__feature *f = &p->features[i];
        if (f->pooling == GRM__POOL_TILE && !ranking && !f->is_sequence) {
            st = grm_errorf(GRM_EINVAL, "%s:%d: [feature.%s] pooling = tile lays out the last "
                            "`window` ids of a list side by side, but '%s' holds one id per "
                            "sample; use mean or sum", f->file, f->line, f->name, f->source);
            goto fail;
        }
        if (f->pooling != GRM__POOL_NONE) continue;
        if (p->seq_feature >= 0) {
            st = grm_errorf(GRM_EINVAL, "%s:%d: [feature.%s] pooling = none: [feature.%s] "
                            "already feeds tokens to the dense blocks; one feature may",
                            f->file, f->line, f->name, p->features[p->seq_feature].name);
            goto fail;
        }
        if (!ranking && !f->is_sequence) {
            st = grm_errorf(GRM_EINVAL, "%s:%d: [feature.%s] pooling = none: only the item "
                            "sequence of a retrieval pipeline can feed tokens to the dense "
                            "blocks; use mean or sum", f->file, f->line, f->name);
            goto fail;
        }
        if (!ranking && p->nfeatures != 1) {
            st = grm_errorf(GRM_EINVAL, "%s:%d: [feature.%s] pooling = none makes this a "
                            "sequence model, which takes its tokens from this one feature; "
                            "remove the other [feature.*] sections", f->file, f->line, f->name);
            goto fail;
        }
        p->seq_feature = i;
    }
    if (p->ndense == 0) {
        st = grm_errorf(GRM_EINVAL, "%s: no [dense.0] section; a model needs at least one "
                        "dense block (e.g. plugin = dense-mlp)", path);
        goto fail;
    }
    qsort(p->dense, (size_t)p->ndense, sizeof *p->dense, cmp_dense);
    {   /* ranking on a token sequence: which blocks see tokens (MTGRBoost §2: HSTU, then
         * MMoE on the candidate's output) */
        const grm__kv *kv = train_kv(p, "sequence_blocks");
        int64_t sb = p->set.sequence_blocks;
        int seqrank = ranking && p->seq_feature >= 0;
        if (seqrank && (sb < 1 || sb > p->ndense)) {
            st = grm_errorf(GRM_EINVAL, "%s:%d: [feature.%s] pooling = none in a ranking "
                            "pipeline: set [train] sequence_blocks = N, 1 <= N <= %d, the "
                            "leading [dense.*] blocks that run on its tokens",
                            p->features[p->seq_feature].file,
                            p->features[p->seq_feature].line,
                            p->features[p->seq_feature].name, p->ndense);
            goto fail;
        }
        if (!seqrank && sb != 0) {
            st = grm_errorf(GRM_EINVAL, "%s:%d: [train] sequence_blocks applies to a ranking "
                            "pipeline with a pooling = none feature; remove it", path,
                            kv ? kv->line : 0);
            goto fail;
        }
    }
    if (p->nfeatures == 0) {
        st = grm_errorf(GRM_EINVAL, "%s: no [feature.NAME] section; declare at least the "
                        "item history (source = %s)", path, p->set.sequence_column);
        goto fail;
    }

    /* tables: one per distinct table name, specs must agree */
    for (int32_t i = 0; i < p->nfeatures; i++) {
        grm__feature *f = &p->features[i];
        int32_t t;
        for (t = 0; t < p->ntables; t++)
            if (strcmp(p->tables[t].name, f->table) == 0) break;
        if (t == p->ntables) {
            grm_emb_table_spec *ns = realloc(p->tables, (size_t)(t + 1) * sizeof *ns);
            if (!ns) {
                st = grm_errorf(GRM_ENOMEM, "out of memory");
                goto fail;
            }
            p->tables = ns;
            p->tables[t] = (grm_emb_table_spec){ .name = f->table, .rows = f->rows,
                                                 .dim = f->dim, .init = f->init,
                                                 .init_scale = f->init_scale,
                                                 .seed = (uint64_t)p->set.seed };
            p->ntables++;
        } else if (p->tables[t].dim != f->dim || p->tables[t].init != f->init
                   || p->tables[t].init_scale != f->init_scale) {
            st = grm_errorf(GRM_EINVAL, "%s:%d: [feature.%s] shares table '%s' but its dim, "
                            "init or init_scale differ from the first feature using it; make "
                            "them equal or name another table", f->file, f->line, f->name,
                            f->table);
            goto fail;
        }
        f->table_idx = t;
    }
    if (!ranking && !p->set.item_table[0]) {
        for (int32_t i = 0; i < p->nfeatures && !p->set.item_table[0]; i++)
            if (p->features[i].is_sequence) p->set.item_table = p->features[i].table;
        if (!ranking && !p->set.item_table[0]) {
            st = grm_errorf(GRM_EINVAL, "%s: no feature reads the sequence column '%s', so "
                            "there is no item table; add one or set [train] item_table",
                            path, p->set.sequence_column);
            goto fail;
        }
    }
    int found = ranking;
    for (int32_t t = 0; t < p->ntables; t++)
        found |= strcmp(p->tables[t].name, p->set.item_table) == 0;
    if (!found) {
        st = grm_errorf(GRM_EINVAL, "%s: [train] item_table = %s is not a table of any "
                        "feature", path, p->set.item_table);
        goto fail;
    }

    if ((st = stage_setup(p, &p->emb, "embedding", GRM_KIND_EMB, "emb-static", NULL)) != GRM_OK
        || (st = stage_setup(p, &p->opt_sparse, "optimizer.sparse", GRM_KIND_OPT, "opt-adam",
                             NULL)) != GRM_OK
        || (st = stage_setup(p, &p->opt_dense, "optimizer.dense", GRM_KIND_OPT, "opt-adam",
                             NULL)) != GRM_OK
        || (st = stage_setup(p, &p->head, "head", head_kind(p, ranking),
                             ranking ? "head-bce" : "head-sampled-softmax", NULL)) != GRM_OK
        || (st = stage_setup(p, &p->ckpt, "checkpoint", GRM_KIND_CKPT, "ckpt-grm",
                                grm__checkpoint_host_keys))
               != GRM_OK
        || (st = stage_setup(p, &p->comm, "distributed", GRM_KIND_COMM, "comm-single", NULL))
               != GRM_OK)
        goto fail;
    if ((st = check_devices(p)) != GRM_OK) goto fail;
    if ((st = plan_tables(p)) != GRM_OK) {
        grm_error_prefix("%s: ", path);
        goto fail;
    }
    /* a stream shows its largest ids only as it goes: a store indexed by id needs sizes */
    for (int32_t i = 0; p->set.input == GRM__INPUT_STREAM && i < p->nfeatures; i++)
        if (p->features[i].rows == 0 && !(grm__emb_flags(p) & GRM_EMB_ANY_ID)) {
            st = grm_errorf(GRM_EINVAL, "%s:%d: [feature.%s] with [train] input = stream: "
                            "[embedding] %s sizes its tables before step 1, when the "
                            "stream's largest id is not yet known; give rows = N (ids in "
                            "[0, N)) or use plugin = emb-dynamic, which takes any id", path,
                            p->features[i].line, p->features[i].name,
                            p->emb.plugin->info->name);
            goto fail;
        }
    {
        const char **skip = skip_list(p->ckpt.plugin->info, (const char *const[]){ "plugin",
                                                                                 NULL });
        if (!skip) {
            st = grm_errorf(GRM_ENOMEM, "out of memory");
            goto fail;
        }
        st = grm__params_fill(&ckpt_host_info, grm__config_section(p->cfg, "checkpoint"),
                              path, skip, &p->set_ckpt);
        free(skip);
        if (st != GRM_OK) goto fail;
        const ckpt_cfg *cc = p->set_ckpt.data;
        p->set.ckpt_dir = cc->dir;
        p->set.ckpt_every = cc->every;
        p->set.ckpt_keep = cc->keep;
        if ((st = grm__params_fill(&export_host_info, grm__config_section(p->cfg, "export"),
                                   path, NULL, &p->set_export)) != GRM_OK)
            goto fail;
        const export_cfg *ec = p->set_export.data;
        p->set.export_every = ec->every;
        p->set.export_dir = ec->dir;
        p->set.export_memory = ec->memory_mb << 20;
        if (ec->every > 0 && !ec->dir[0] && !cc->dir[0]) {
            const grm__section *es = grm__config_section(p->cfg, "export");
            st = grm_errorf(GRM_EINVAL, "%s:%d: [export] every = %lld writes its files beside "
                            "the checkpoints; set [checkpoint] dir or [export] dir", path,
                            es ? es->line : 0, (long long)ec->every);
            goto fail;
        }
        if (p->set.early_stop > 0 && !cc->dir[0]) {
            const grm__kv *kv = train_kv(p, "early_stop");
            st = grm_errorf(GRM_EINVAL, "%s:%d: [train] early_stop keeps the best model as a "
                            "checkpoint; set [checkpoint] dir", grm__kv_file(kv, path),
                            kv ? kv->line : 0);
            goto fail;
        }
    }
    if ((st = grm__head_check(p, &p->head, ranking, -1)) != GRM_OK) goto fail;
    *out = p;
    return GRM_OK;
fail:
    grm__pipeline_destroy(p);
    return st;
}

void grm__pipeline_destroy(grm__pipeline *p)
{
    if (!p) return;
    if (p->comm.inst) {   /* opened by the first run; closed after the CLI printed its end */
        ((const grm_comm_ops *)p->comm.plugin->info->ops)->destroy(p->comm.inst);
        p->comm.inst = NULL;
        grm__host_set_comm(NULL);
    }
    stage_fini(&p->reader);
    for (int32_t i = 0; i < p->ntransforms; i++) stage_fini(&p->transforms[i]);
    free(p->transforms);
    for (int32_t i = 0; i < p->ndense; i++) stage_fini(&p->dense[i]);
    free(p->dense);
    for (int32_t i = 0; i < p->nfeatures; i++) {
        free(p->features[i].name);
        free(p->features[i].source);
        free(p->features[i].table);
    }
    free(p->features);
    free(p->tables);
    grm__sparse_plan_destroy(p->plan);
    for (int32_t t = 0; p->phys_names && t < p->nphys; t++) free(p->phys_names[t]);
    free(p->phys_names);
    free(p->phys);
    stage_fini(&p->emb);
    stage_fini(&p->opt_sparse);
    stage_fini(&p->opt_dense);
    stage_fini(&p->head);
    stage_fini(&p->ckpt);
    stage_fini(&p->comm);
    grm__pconfig_fini(&p->set_pipeline);
    grm__pconfig_fini(&p->set_train);
    grm__pconfig_fini(&p->set_ckpt);
    grm__pconfig_fini(&p->set_export);
    grm__registry_destroy(p->reg);
    grm__host_set_config(NULL);
    grm__config_destroy(p->cfg);
    free(p);
}

static void print_stage(FILE *f, const char *role, const grm__stage *s)
{
    const grm_plugin_info *info = s->plugin->info;
    fprintf(f, "  %-18s %s %s (%s)\n", role, info->name, info->version, s->plugin->path);
    grm__params_print_values(f, info, s->config.data, "                       ");
}

/* The merge plan: physical tables, the id spaces each holds and their key encoding. */
static void print_plan(FILE *f, const grm__pipeline *p)
{
    const char *ind = "                       ";
    const grm__sparse_plan *pl = p->plan;
    fprintf(f, "%smerge plan (MTGRBoost §4.2): %d id space%s in %d table%s", ind, p->ntables,
            p->ntables == 1 ? "" : "s", p->nphys, p->nphys == 1 ? "" : "s");
    if (!(grm__emb_flags(p) & GRM_EMB_ANY_ID))
        fprintf(f, "; not merged: %s indexes rows by id (emb-dynamic takes any id)",
                p->emb.plugin->info->name);
    fputc('\n', f);
    for (int32_t T = 0; T < p->nphys; T++) {
        const grm__sparse_table *tb = &pl->tables[T];
        fprintf(f, "%stable %s: dim %d, %s, %s(%g), %s, k = %d, ids 0 .. 2^%d - 1\n", ind,
                p->phys[T].name, tb->dim, tb->optimizer, tb->init, tb->init_scale,
                tb->nslots > 1 ? "merged" : "alone", tb->k, 63 - tb->k);
        for (int32_t j = 0; j < tb->nfeatures; j++) {
            int32_t s = tb->features[j];
            fprintf(f, "%s  %-10s key = (%d << %d) | id   features:", ind, p->tables[s].name,
                    pl->slots[s].index, 63 - tb->k);
            for (int32_t i = 0; i < p->nfeatures; i++)
                if (p->features[i].table_idx == s) fprintf(f, " %s", p->features[i].name);
            fputc('\n', f);
        }
    }
    if (p->set.task == GRM__TASK_RETRIEVAL)
        fprintf(f, "%sitems ranked from '%s'\n", ind, p->set.item_table);
}

void grm__pipeline_print(FILE *f, const grm__pipeline *p)
{
    fprintf(f, "pipeline '%s' (%s): ok, device %s\n", p->set.name, p->cfg->path,
            p->set.device);
    fprintf(f, "\nread -> transform -> lookup -> dense -> head -> loss -> backward -> "
               "optimizers -> checkpoint\n\n");
    print_stage(f, "[reader]", &p->reader);
    for (int32_t i = 0; i < p->ntransforms; i++) {
        char role[64];
        snprintf(role, sizeof role, "[%s]", p->transforms[i].label);
        print_stage(f, role, &p->transforms[i]);
    }
    fprintf(f, "  %-18s\n", "features");
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const grm__feature *ft = &p->features[i];
        static const char *const how[] = { "mean", "sum", "token sequence", "tile" };
        fprintf(f, "                       %-10s column %-8s table %-8s dim %d, %s of the last "
                   "%lld\n", ft->name, ft->source, ft->table, ft->dim, how[ft->pooling],
                (long long)ft->window);
    }
    print_stage(f, "[embedding]", &p->emb);
    print_plan(f, p);
    for (int32_t i = 0; i < p->ndense; i++) {
        char role[64];
        snprintf(role, sizeof role, "[%s]", p->dense[i].label);
        print_stage(f, role, &p->dense[i]);
    }
    print_stage(f, "[head]", &p->head);
    print_stage(f, "[optimizer.sparse]", &p->opt_sparse);
    print_stage(f, "[optimizer.dense]", &p->opt_dense);
    print_stage(f, "[checkpoint]", &p->ckpt);
    grm__params_print_values(f, &ckpt_host_info, p->set_ckpt.data, "                       ");
    fprintf(f, "  %-18s\n", "[export]");
    grm__params_print_values(f, &export_host_info, p->set_export.data, "                       ");
    print_stage(f, "[distributed]", &p->comm);
    fprintf(f, "  %-18s\n", "[train]");
    grm__params_print_values(f, &train_info, p->set_train.data, "                       ");
}

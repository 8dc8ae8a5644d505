/* plugins/emb-static/plugin.c - glue of emb-static, the fixed-capacity baseline embedding
 * store (DESIGN.md §3): entry, descriptor, parameters, ops table and argument checks.
 * Every table is one host allocation of rows [R, D], optimizer state [R, S*D] and update
 * counts [R], all rows initialized at create from (seed, table, id) with grm_row_init. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grm/backend.h>
#include <grm/emb.h>
#include <grm/plugin.h>
#include <grm/rng.h>

#include "emb_static.h"

static const grm_host_api *es_host;

static const grm_device es_cpu = { GRM_DEVICE_CPU, 0 };

/* Rows per parallel_for range when initializing a table. */
#define ES_INIT_GRAIN 4096

/* Byte offsets inside a table's block are rounded up to this. */
#define ES_ALIGN 64

static const char *const es_tensor_suffix[3] = { ".weight", ".opt_state", ".steps" };

/* ---- create and destroy ---- */

static void es_destroy(void *inst)
{
    es_store *s = inst;
    if (s == NULL) return;
    for (int32_t i = 0; i < s->ntables && s->tables != NULL; i++) {
        es_table *t = &s->tables[i];
        es_host->free(es_cpu, t->block);
        for (int k = 0; k < 3; k++) free(t->tensor_names[k]);
        free(t->all_ids);
        free(t->dense_grad);
    }
    free(s->tables);
    free(s);
}

static size_t es_round_up(size_t x)
{
    return (x + (ES_ALIGN - 1)) & ~(size_t)(ES_ALIGN - 1);
}

static grm_status es_check_spec(const grm_emb_table_spec *tables, int32_t i)
{
    const grm_emb_table_spec *sp = &tables[i];
    if (sp->name == NULL || sp->name[0] == '\0')
        return es_host->errorf(GRM_EINVAL, "emb-static: table #%d has no name", (int)i);
    if (sp->rows <= 0)
        return es_host->errorf(GRM_EINVAL,
                               "emb-static: table '%s': rows = %lld; a static table needs "
                               "rows > 0 (its ids are [0, rows))",
                               sp->name, (long long)sp->rows);
    if (sp->dim <= 0)
        return es_host->errorf(GRM_EINVAL, "emb-static: table '%s': dim = %d; need dim > 0",
                               sp->name, (int)sp->dim);
    if (sp->init != GRM_EMB_INIT_ZEROS && sp->init != GRM_EMB_INIT_UNIFORM
        && sp->init != GRM_EMB_INIT_NORMAL)
        return es_host->errorf(GRM_EINVAL,
                               "emb-static: table '%s': unknown initializer %d; expected "
                               "zeros (0), uniform (1) or normal (2)",
                               sp->name, (int)sp->init);
    if (!isfinite(sp->init_scale) || sp->init_scale < 0)
        return es_host->errorf(GRM_EINVAL,
                               "emb-static: table '%s': init scale %g; need a finite value "
                               ">= 0", sp->name, sp->init_scale);
    for (int32_t k = 0; k < i; k++)
        if (strcmp(tables[k].name, sp->name) == 0)
            return es_host->errorf(GRM_EINVAL,
                                   "emb-static: table '%s' is declared twice (#%d and #%d); "
                                   "table names must be unique", sp->name, (int)k, (int)i);
    return GRM_OK;
}

typedef struct es_init_job {
    es_table *t;
} es_init_job;

static grm_status es_init_range(void *ctx, int64_t begin, int64_t end)
{
    const es_table *t = ((const es_init_job *)ctx)->t;
    for (int64_t id = begin; id < end; id++)
        grm_row_init(t->weight + (size_t)id * (size_t)t->dim, t->dim, t->init, t->init_scale,
                     t->seed, t->name_hash, id);
    return GRM_OK;
}

static grm_status es_table_init(es_table *t, const grm_emb_table_spec *sp, int32_t S)
{
    const size_t R = (size_t)sp->rows, D = (size_t)sp->dim;

    t->name = sp->name;
    t->rows = sp->rows;
    t->dim = sp->dim;
    t->init = sp->init;
    t->init_scale = sp->init_scale;
    t->seed = sp->seed;
    t->name_hash = grm_str_hash64(sp->name);
    atomic_init(&t->lookups, 0);

    // Block layout: weight [R, D] f32 | state [R, S*D] f32 | steps [R] i64, each section
    // starting on a 64-byte boundary. Refuse sizes whose byte count overflows size_t.
    const size_t per_row = D * (1 + (size_t)S);
    if (R > (SIZE_MAX / 2 - 3 * ES_ALIGN) / (per_row * sizeof(float) + sizeof(int64_t)))
        return es_host->errorf(GRM_EINVAL,
                               "emb-static: table '%s': %lld rows of dim %d do not fit in "
                               "memory; lower rows or dim", sp->name, (long long)sp->rows,
                               (int)sp->dim);
    const size_t w_bytes = R * D * sizeof(float);
    const size_t s_bytes = R * (size_t)S * D * sizeof(float);
    const size_t s_off = es_round_up(w_bytes);
    const size_t c_off = es_round_up(s_off + s_bytes);
    t->bytes = c_off + R * sizeof(int64_t);

    for (int k = 0; k < 3; k++) {
        const size_t len = strlen(sp->name) + strlen(es_tensor_suffix[k]) + 1;
        t->tensor_names[k] = malloc(len);
        if (t->tensor_names[k] == NULL)
            return es_host->errorf(GRM_ENOMEM, "emb-static: table '%s': out of memory",
                                   sp->name);
        snprintf(t->tensor_names[k], len, "%s%s", sp->name, es_tensor_suffix[k]);
    }

    t->block = es_host->alloc(es_cpu, t->bytes, ES_ALIGN);
    if (t->block == NULL)
        return es_host->errorf(GRM_ENOMEM,
                               "emb-static: table '%s': cannot allocate %zu bytes for %lld "
                               "rows of dim %d; lower rows or dim", sp->name, t->bytes,
                               (long long)sp->rows, (int)sp->dim);
    t->weight = (float *)t->block;
    t->state = S > 0 ? (float *)((char *)t->block + s_off) : NULL;
    t->steps = (int64_t *)(void *)((char *)t->block + c_off);
    if (S > 0) memset(t->state, 0, s_bytes);
    memset(t->steps, 0, R * sizeof(int64_t));

    // Rows are a pure function of (seed, table, id), so the split over threads cannot
    // change them.
    es_init_job job = { t };
    return es_host->parallel_for(sp->rows, ES_INIT_GRAIN, es_init_range, &job);
}

static grm_status es_create(const void *config, const grm_emb_table_spec *tables,
                            int32_t ntables, const grm_optimizer *opt, void **inst)
{
    static const es_config defaults = { ES_RANGE_ERROR, ES_IMPL_CPU, ES_UPDATE_SPARSE };
    const es_config *cfg = config != NULL ? config : &defaults;
    es_store *s = NULL;
    grm_status st;

    if (inst == NULL)
        return es_host->errorf(GRM_EINVAL, "emb-static: create: inst is NULL");
    *inst = NULL;
    if (ntables < 0 || (ntables > 0 && tables == NULL))
        return es_host->errorf(GRM_EINVAL, "emb-static: create: %d tables at %p",
                               (int)ntables, (const void *)tables);
    if (cfg->on_out_of_range != ES_RANGE_ERROR && cfg->on_out_of_range != ES_RANGE_MODULO)
        return es_host->errorf(GRM_EINVAL, "emb-static: on_out_of_range = %d; expected "
                               "error (0) or modulo (1)", (int)cfg->on_out_of_range);
    if (cfg->impl != ES_IMPL_CPU && cfg->impl != ES_IMPL_REF && cfg->impl != ES_IMPL_AUTO)
        return es_host->errorf(GRM_EINVAL, "emb-static: impl = %d; expected cpu (0), "
                               "ref (1) or auto (2)", (int)cfg->impl);
    if (cfg->update != ES_UPDATE_SPARSE && cfg->update != ES_UPDATE_DENSE)
        return es_host->errorf(GRM_EINVAL, "emb-static: update = %d; expected sparse (0) or "
                               "dense (1)", (int)cfg->update);
    for (int32_t i = 0; i < ntables; i++)
        if ((st = es_check_spec(tables, i)) != GRM_OK) return st;

    int32_t S = 0;
    if (opt != NULL && opt->ops != NULL) {
        S = opt->ops->state_floats(opt->inst);
        if (S < 0)
            return es_host->errorf(GRM_EINVAL, "emb-static: the optimizer reports %d state "
                                   "floats per element; expected >= 0", (int)S);
    }

    s = calloc(1, sizeof(*s));
    if (s == NULL) return es_host->errorf(GRM_ENOMEM, "emb-static: create: out of memory");
    s->host = es_host;
    if (opt != NULL) s->opt = *opt;
    s->state_floats = S;
    s->range_mode = cfg->on_out_of_range;
    s->update_mode = cfg->update;
    const int ref = cfg->impl == ES_IMPL_REF
                    || (cfg->impl == ES_IMPL_AUTO && grm_backend_wants_ref(es_host));
    s->gather = ref ? es_gather_ref : es_gather_cpu;
    s->update = ref ? es_update_ref : es_update_cpu;
    s->tables = calloc(ntables > 0 ? (size_t)ntables : 1, sizeof(*s->tables));
    if (s->tables == NULL) {
        st = es_host->errorf(GRM_ENOMEM, "emb-static: create: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < ntables; i++) {
        s->ntables = i + 1;     // destroy frees whatever table i got before a failure
        if ((st = es_table_init(&s->tables[i], &tables[i], S)) != GRM_OK) goto fail;
    }
    *inst = s;
    return GRM_OK;

fail:
    es_destroy(s);
    return st;
}

/* ---- lookup and update ---- */

static grm_status es_get_table(es_store *s, int32_t table, const char *op, es_table **out)
{
    if (s == NULL) return es_host->errorf(GRM_EINVAL, "emb-static: %s: inst is NULL", op);
    if (table < 0 || table >= s->ntables)
        return es_host->errorf(GRM_EINVAL, "emb-static: %s: table index %d outside [0, %d)",
                               op, (int)table, (int)s->ntables);
    *out = &s->tables[table];
    return GRM_OK;
}

/* In error mode, refuse the first id outside [0, R) before anything is read or changed. */
static grm_status es_check_ids(const es_store *s, const es_table *t, const int64_t *ids,
                               int64_t n)
{
    if (s->range_mode == ES_RANGE_MODULO) return GRM_OK;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->rows)
            return es_host->errorf(GRM_EINVAL,
                                   "emb-static: table '%s': id %lld outside [0, %lld); raise "
                                   "the table's rows or set on_out_of_range = modulo",
                                   t->name, (long long)ids[i], (long long)t->rows);
    return GRM_OK;
}

static grm_status es_lookup(void *inst, float *rows /* [n, D] */, int32_t table,
                            const int64_t *ids /* [n] */, int64_t n, uint32_t flags)
{
    es_store *s = inst;
    es_table *t;
    grm_status st;

    (void)flags;    // every row of a static table exists; INSERT changes nothing
    if ((st = es_get_table(s, table, "lookup", &t)) != GRM_OK) return st;
    if (n < 0 || (n > 0 && (rows == NULL || ids == NULL)))
        return es_host->errorf(GRM_EINVAL, "emb-static: table '%s': lookup of %lld ids with "
                               "rows %p, ids %p", t->name, (long long)n, (void *)rows,
                               (const void *)ids);
    if ((st = es_check_ids(s, t, ids, n)) != GRM_OK) return st;
    atomic_fetch_add_explicit(&t->lookups, (long long)n, memory_order_relaxed);
    return s->gather(s, t, rows, ids, n);
}

/* update = dense: every row of t steps, as a framework's dense optimizer steps a whole
 * embedding matrix (torch.optim.Adam on nn.Embedding, the optimizer of the SASRec and
 * S3-Rec reference code): the ids' rows with their gradients, summed where ids share a
 * row, every other row with a zero gradient, so its moments decay and its momentum keeps
 * moving it. Each row's step count then equals the number of updates, the dense step. */
static grm_status es_update_dense(const es_store *s, es_table *t, const int64_t *ids,
                                  const float *grads, int64_t n)
{
    const int64_t R = t->rows, D = t->dim;
    if (t->all_ids == NULL) {
        t->all_ids = malloc((size_t)R * sizeof *t->all_ids);
        t->dense_grad = malloc((size_t)(R * D) * sizeof *t->dense_grad);
        if (t->all_ids == NULL || t->dense_grad == NULL) {
            free(t->all_ids);
            free(t->dense_grad);
            t->all_ids = NULL;
            t->dense_grad = NULL;
            return es_host->errorf(GRM_ENOMEM, "emb-static: table '%s': update = dense "
                                   "cannot allocate a gradient of %lld rows of dim %lld; use "
                                   "update = sparse", t->name, (long long)R, (long long)D);
        }
        for (int64_t r = 0; r < R; r++) t->all_ids[r] = r;
    }
    memset(t->dense_grad, 0, (size_t)(R * D) * sizeof *t->dense_grad);
    for (int64_t i = 0; i < n; i++) {
        float *g = t->dense_grad + es_row_of(t, s->range_mode, ids[i]) * D;
        for (int64_t c = 0; c < D; c++) g[c] += grads[i * D + c];
    }
    return s->update(s, t, t->all_ids, t->dense_grad, R);
}

static grm_status es_update(void *inst, int32_t table, const int64_t *ids /* [n] */,
                            const float *grads /* [n, D] */, int64_t n, int64_t step)
{
    es_store *s = inst;
    es_table *t;
    grm_status st;

    (void)step;     // rows count their own updates (TF-style sparse steps, grm/opt.h)
    if ((st = es_get_table(s, table, "update", &t)) != GRM_OK) return st;
    if (s->opt.ops == NULL)
        return es_host->errorf(GRM_EINVAL, "emb-static: table '%s': update without an "
                               "optimizer; give the store one at create", t->name);
    if (n < 0 || (n > 0 && (grads == NULL || ids == NULL)))
        return es_host->errorf(GRM_EINVAL, "emb-static: table '%s': update of %lld ids with "
                               "ids %p, grads %p", t->name, (long long)n, (const void *)ids,
                               (const void *)grads);
    if ((st = es_check_ids(s, t, ids, n)) != GRM_OK) return st;
    if (s->update_mode == ES_UPDATE_DENSE) return es_update_dense(s, t, ids, grads, n);
    return s->update(s, t, ids, grads, n);
}

/* ---- checkpoint tensors ---- */

/* Tensor k (0 weight, 1 opt_state, 2 steps) of table t, as tensors() describes it. */
static void es_describe(const es_store *s, es_table *t, int k, grm_named_tensor *out)
{
    memset(out, 0, sizeof(*out));
    out->name = t->tensor_names[k];
    out->tensor.device = es_cpu;
    out->tensor.ndim = k == 2 ? 1 : 2;
    for (int d = 0; d < GRM_TENSOR_MAX_DIMS; d++) out->tensor.shape[d] = 1;
    out->tensor.shape[0] = t->rows;
    if (k == 0) {
        out->tensor.data = t->weight;
        out->tensor.dtype = GRM_DTYPE_F32;
        out->tensor.shape[1] = t->dim;
    } else if (k == 1) {
        out->tensor.data = t->state;
        out->tensor.dtype = GRM_DTYPE_F32;
        out->tensor.shape[1] = (int64_t)s->state_floats * t->dim;
    } else {
        out->tensor.data = t->steps;
        out->tensor.dtype = GRM_DTYPE_I64;
    }
}

static grm_status es_tensors(void *inst, int32_t index, grm_named_tensor *out)
{
    es_store *s = inst;
    if (s == NULL || out == NULL)
        return es_host->errorf(GRM_EINVAL, "emb-static: tensors: inst or out is NULL");
    const int32_t per_table = s->state_floats > 0 ? 3 : 2;
    if (index < 0 || index >= per_table * s->ntables)
        return es_host->errorf(GRM_ENOTFOUND, "emb-static: tensors: index %d outside [0, %d)",
                               (int)index, (int)(per_table * s->ntables));
    int k = (int)(index % per_table);
    if (per_table == 2 && k == 1) k = 2;    // no opt_state tensor when S == 0
    es_describe(s, &s->tables[index / per_table], k, out);
    return GRM_OK;
}

static const char *es_dtype_name(int32_t dtype)
{
    switch (dtype) {
    case GRM_DTYPE_F32: return "f32";
    case GRM_DTYPE_F16: return "f16";
    case GRM_DTYPE_BF16: return "bf16";
    case GRM_DTYPE_I32: return "i32";
    case GRM_DTYPE_I64: return "i64";
    case GRM_DTYPE_U8: return "u8";
    default: return "unknown-dtype";
    }
}

/* "f32 [1683, 16]" into buf [cap]. */
static const char *es_format_tensor(const grm_tensor *t, char *buf, size_t cap)
{
    int ndim = t->ndim < 0 ? 0 : t->ndim > GRM_TENSOR_MAX_DIMS ? GRM_TENSOR_MAX_DIMS : t->ndim;
    size_t len = (size_t)snprintf(buf, cap, "%s [", es_dtype_name(t->dtype));
    for (int d = 0; d < ndim && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? ", " : "",
                                (long long)t->shape[d]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
    return buf;
}

static grm_status es_load(void *inst, const grm_named_tensor *in)
{
    es_store *s = inst;
    if (s == NULL || in == NULL || in->name == NULL)
        return es_host->errorf(GRM_EINVAL, "emb-static: load: inst, tensor or name is NULL");

    for (int32_t i = 0; i < s->ntables; i++) {
        es_table *t = &s->tables[i];
        for (int k = 0; k < 3; k++) {
            if (k == 1 && s->state_floats == 0) continue;
            if (strcmp(in->name, t->tensor_names[k]) != 0) continue;

            grm_named_tensor want;
            es_describe(s, t, k, &want);
            int same = in->tensor.dtype == want.tensor.dtype
                       && in->tensor.ndim == want.tensor.ndim;
            for (int d = 0; same && d < want.tensor.ndim; d++)
                same = in->tensor.shape[d] == want.tensor.shape[d];
            if (!same) {
                char wbuf[128], gbuf[128];
                return es_host->errorf(GRM_EFORMAT,
                                       "emb-static: tensor '%s': expected %s, got %s; the "
                                       "checkpoint was written for another table config",
                                       in->name,
                                       es_format_tensor(&want.tensor, wbuf, sizeof(wbuf)),
                                       es_format_tensor(&in->tensor, gbuf, sizeof(gbuf)));
            }
            if (in->tensor.device.type != GRM_DEVICE_CPU)
                return es_host->errorf(GRM_ENOTSUP, "emb-static: tensor '%s': load needs a "
                                       "CPU tensor", in->name);
            if (in->tensor.data == NULL)
                return es_host->errorf(GRM_EINVAL, "emb-static: tensor '%s': data is NULL",
                                       in->name);
            const size_t elem = k == 2 ? sizeof(int64_t) : sizeof(float);
            size_t bytes = elem;
            for (int d = 0; d < want.tensor.ndim; d++) bytes *= (size_t)want.tensor.shape[d];
            memcpy(want.tensor.data, in->tensor.data, bytes);
            return GRM_OK;
        }
    }
    return es_host->errorf(GRM_ENOTFOUND, "emb-static: load: no tensor named '%s' in this "
                           "store (its tensors are <table>.weight, <table>.opt_state and "
                           "<table>.steps)", in->name);
}

static grm_status es_stats(void *inst, int32_t table, grm_emb_stats *out)
{
    es_store *s = inst;
    es_table *t;
    grm_status st;
    if ((st = es_get_table(s, table, "stats", &t)) != GRM_OK) return st;
    if (out == NULL) return es_host->errorf(GRM_EINVAL, "emb-static: stats: out is NULL");
    out->rows = t->rows;
    out->capacity = t->rows;
    out->bytes = (int64_t)t->bytes;
    out->lookups = (int64_t)atomic_load_explicit(&t->lookups, memory_order_relaxed);
    out->misses = 0;
    out->evictions = 0;
    return GRM_OK;
}

/* ---- descriptor ---- */

static const grm_param_decl es_params[] = {
    GRM_PARAM_DECL_ENUM(es_config, on_out_of_range, "error", "error|modulo",
                        "an id outside [0, rows): fail with an error, or wrap it modulo rows"),
    GRM_PARAM_DECL_ENUM(es_config, impl, "auto", "cpu|ref|auto",
                        "lookup/update code: threaded (cpu) or the plain-loop reference (ref)"
                        " (auto: ref on [pipeline] device = ref, else cpu)"),
    GRM_PARAM_DECL_ENUM(es_config, update, "sparse", "sparse|dense",
                        "sparse: only the updated ids' rows step (TF-style, per-row step "
                        "counts); dense: every row steps each update, untouched ones with a zero "
                        "gradient (torch's dense Adam on an nn.Embedding; O(rows * dim) per step)"),
    GRM_PARAM_DECL_END
};

static const grm_emb_ops es_ops = {
    .struct_size = sizeof(grm_emb_ops),
    .create = es_create,
    .destroy = es_destroy,
    .lookup = es_lookup,
    .update = es_update,
    .tensors = es_tensors,
    .load = es_load,
    .stats = es_stats,
};

static const grm_plugin_info es_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_EMB,
    .name = "emb-static",
    .version = "1.0.0",
    .description = "fixed-capacity embedding tables, ids in [0, rows): the baseline store",
    .ops = &es_ops,
    .params = es_params,
    .config_size = sizeof(es_config),
};

GRM_PLUGIN_DEFINE(es_host, &es_info);

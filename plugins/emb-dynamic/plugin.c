/* plugins/emb-dynamic/plugin.c - glue of emb-dynamic, the dynamic hash embedding store of
 * MTGRBoost §4.1 (RecIS §2.2.2): entry, descriptor, parameters, ops table, argument
 * checks, create and destroy. Rows are created on first touch from (seed, table, id) with
 * grm_row_init, exactly as emb-static initializes them. See README.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grm/backend.h>
#include <grm/emb.h>
#include <grm/plugin.h>
#include <grm/rng.h>

#include "emb_dynamic.h"

static const grm_host_api *ed_host;

static const char *const ed_tensor_suffix[ED_NTENSORS] = {
    ".ids", ".weight", ".opt_state", ".meta", ".counters"
};

/* Initial rows taken from the table spec's hint at most (initial_rows = -1). */
#define ED_HINT_MAX (INT64_C(1) << 20)

/* ---- create and destroy ---- */

static void ed_table_fini(const ed_store *s, ed_table *t)
{
    const int64_t cold = atomic_load(&t->pools[1].next) - t->pools[1].nfree;
    if (atomic_load(&t->evictions) > 0 || (s->cfg.fp16_cold && cold > 0))
        s->host->log(GRM_LOG_INFO, "emb-dynamic", "table '%s': %lld rows (%lld FP16, saving "
                     "%lld bytes), %lld lookups, %lld misses, %lld evictions", t->name,
                     (long long)atomic_load(&t->keys.live), (long long)cold,
                     (long long)(cold * (int64_t)(t->pools[0].rec_bytes
                                                  - t->pools[1].rec_bytes)),
                     (long long)atomic_load(&t->lookups), (long long)atomic_load(&t->misses),
                     (long long)atomic_load(&t->evictions));
    if (s->tiered) {
        if (t->tier.fd >= 0)
            s->host->log(GRM_LOG_INFO, "emb-dynamic", "table '%s': cache %lld of %lld rows "
                         "(budget %lld), %lld fetched from %s (%lld by prefetch), %lld "
                         "moved out by the data thread's trim, %lld "
                         "written back, %lld bytes read, %lld written; %lld reads through "
                         "io_uring; %lld segments cleaned, %lld live records moved (%lld from the "
                         "cache)", t->name,
                         (long long)atomic_load(&t->keys.live),
                         (long long)(atomic_load(&t->keys.live)
                                     + atomic_load(&t->tier.file_only)),
                         (long long)t->max_rows, (long long)atomic_load(&t->tier.fetches),
                         t->tier.path, (long long)atomic_load(&t->tier.prefetched),
                         (long long)atomic_load(&t->tier.trimmed),
                         (long long)atomic_load(&t->tier.writebacks),
                         (long long)atomic_load(&t->tier.bytes_read),
                         (long long)atomic_load(&t->tier.bytes_written),
                         (long long)atomic_load(&t->tier.ring_reads),
                         (long long)t->tier.cleaned, (long long)t->tier.moved,
                         (long long)t->tier.from_cache);
        ed_tier_close(s, t);
    }
    ed_keys_fini(s, &t->keys);
    for (int i = 0; i < 2; i++) ed_pool_fini(s, &t->pools[i]);
    free(t->cand);
    free(t->tcand);
    ed_export_free(&t->exp);
    ed_stage_clear(s, &t->stage);
    for (int k = 0; k < ED_NTENSORS; k++) free(t->tensor_names[k]);
    if (t->lock_ready) pthread_rwlock_destroy(&t->lock);
}

static void ed_destroy(void *inst)
{
    ed_store *s = inst;
    if (s == NULL) return;
    for (int32_t i = 0; i < s->ntables && s->tables != NULL; i++)
        ed_table_fini(s, &s->tables[i]);
    free(s->tables);
    free(s);
}

static int ed_pow2(int64_t x)
{
    return x > 0 && (x & (x - 1)) == 0;
}

static grm_status ed_check_config(const ed_config *c)
{
    if (c->evict < ED_EVICT_NONE || c->evict > ED_EVICT_LFU)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: evict = %d; expected none (0), lru "
                               "(1) or lfu (2)", (int)c->evict);
    if (c->max_rows < 0 || c->ttl_steps < 0)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: max_rows = %lld, ttl_steps = %lld; "
                               "need values >= 0 (0 = off)", (long long)c->max_rows,
                               (long long)c->ttl_steps);
    if (c->max_rows > 0 && c->evict == ED_EVICT_NONE)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: max_rows = %lld needs an eviction "
                               "policy; set evict = lru or evict = lfu",
                               (long long)c->max_rows);
    if (c->max_rows == 0 && c->evict != ED_EVICT_NONE && (c->backing == NULL
                                                          || c->backing[0] == '\0'))
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: evict = %s needs a row budget; set "
                               "max_rows > 0 (or backing and cache_bytes for a tiered "
                               "table)", c->evict == ED_EVICT_LRU ? "lru" : "lfu");
    if (c->hot_threshold < 1)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: hot_threshold = %lld; need >= 1",
                               (long long)c->hot_threshold);
    if (!ed_pow2(c->chunk_rows) || c->chunk_rows < 64 || c->chunk_rows > (INT64_C(1) << 24))
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: chunk_rows = %lld; need a power of "
                               "two in [64, 16777216]", (long long)c->chunk_rows);
    if (!ed_pow2(c->probe_lanes) || c->probe_lanes > 32)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: probe_lanes = %lld; need a power of "
                               "two in [1, 32]", (long long)c->probe_lanes);
    if (c->initial_rows < -1)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: initial_rows = %lld; need >= 0, or "
                               "-1 for the table's rows hint", (long long)c->initial_rows);
    if (c->impl != ED_IMPL_CPU && c->impl != ED_IMPL_REF && c->impl != ED_IMPL_AUTO)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: impl = %d; expected cpu (0), ref "
                               "(1) or auto (2)", (int)c->impl);
    return GRM_OK;
}

/* cache_bytes: "auto" (-1), or bytes with an optional k/K, M, G (x1000) or KiB, MiB, GiB
 * (x1024) suffix; *out = 0 when empty. */
static grm_status ed_parse_bytes(const char *text, int64_t *out)
{
    static const struct { const char *suffix; double mul; } units[] = {
        { "", 1 }, { "k", 1e3 }, { "K", 1e3 }, { "M", 1e6 }, { "G", 1e9 },
        { "KiB", 1024.0 }, { "MiB", 1048576.0 }, { "GiB", 1073741824.0 },
    };
    *out = 0;
    if (text == NULL || text[0] == '\0') return GRM_OK;
    if (strcmp(text, "auto") == 0) {
        *out = -1;
        return GRM_OK;
    }
    char *end;
    const double v = strtod(text, &end);
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (end != text && strcmp(end, units[i].suffix) == 0 && isfinite(v) && v > 0
            && v * units[i].mul < 0x1p62) {
            *out = (int64_t)(v * units[i].mul);
            return GRM_OK;
        }
    return ed_host->errorf(GRM_EINVAL, "emb-dynamic: cache_bytes = '%s'; expected auto or a "
                           "positive size in bytes such as 64M, 1.5G or 512MiB", text);
}

/* The tiered mode's constraints (backing given). */
static grm_status ed_check_tiered(const ed_config *c, int64_t cache_bytes)
{
    if (c->backing == NULL || c->backing[0] == '\0') {
        if (cache_bytes != 0)
            return ed_host->errorf(GRM_EINVAL, "emb-dynamic: cache_bytes = %s needs a backing "
                                   "tier; set backing = <directory>", c->cache_bytes);
        return GRM_OK;
    }
    if (cache_bytes == 0)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: backing = %s needs a cache budget; "
                               "set cache_bytes = <bytes> (64M, 1G) or auto", c->backing);
    if (c->max_rows != 0)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: max_rows = %lld with backing = %s; "
                               "a tiered table is bounded by cache_bytes: drop max_rows",
                               (long long)c->max_rows, c->backing);
    if (c->fp16_cold || c->ttl_steps != 0)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: backing = %s with %s; the tiered "
                               "mode keeps rows exact and forever: drop %s", c->backing,
                               c->fp16_cold ? "fp16_cold = true" : "ttl_steps",
                               c->fp16_cold ? "fp16_cold" : "ttl_steps");
    return GRM_OK;
}

static grm_status ed_check_spec(const ed_config *c, const grm_emb_table_spec *tables,
                                int32_t i)
{
    const grm_emb_table_spec *sp = &tables[i];
    if (sp->name == NULL || sp->name[0] == '\0')
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table #%d has no name", (int)i);
    if (sp->dim <= 0)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': dim = %d; need dim > 0",
                               sp->name, (int)sp->dim);
    if (c->fp16_cold && sp->dim > ED_MAX_DIM)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': dim = %d; fp16_cold "
                               "supports dim <= %d", sp->name, (int)sp->dim, ED_MAX_DIM);
    if (sp->rows < 0)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': rows hint = %lld; need "
                               ">= 0", sp->name, (long long)sp->rows);
    if (sp->init != GRM_EMB_INIT_ZEROS && sp->init != GRM_EMB_INIT_UNIFORM
        && sp->init != GRM_EMB_INIT_NORMAL)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': unknown initializer %d; "
                               "expected zeros (0), uniform (1) or normal (2)", sp->name,
                               (int)sp->init);
    if (!isfinite(sp->init_scale) || sp->init_scale < 0)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': init scale %g; need a "
                               "finite value >= 0", sp->name, sp->init_scale);
    for (int32_t k = 0; k < i; k++)
        if (strcmp(tables[k].name, sp->name) == 0)
            return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s' is declared twice (#%d "
                                   "and #%d); table names must be unique", sp->name, (int)k,
                                   (int)i);
    return GRM_OK;
}

static grm_status ed_table_init(ed_store *s, ed_table *t, const grm_emb_table_spec *sp)
{
    const ed_config *c = &s->cfg;
    grm_status st;

    t->tier.fd = -1;
    t->name = sp->name;
    t->dim = sp->dim;
    t->init = sp->init;
    t->init_scale = sp->init_scale;
    t->seed = sp->seed;
    t->name_hash = grm_str_hash64(sp->name);
    atomic_init(&t->pending, 0);
    atomic_init(&t->clock, 0);
    atomic_init(&t->lookups, 0);
    atomic_init(&t->misses, 0);
    atomic_init(&t->evictions, 0);
    atomic_init(&t->version, 0);
    atomic_init(&t->last_sweep, 0);
    for (int i = 0; i < ED_STRIPES; i++) atomic_init(&t->stripes[i], 0);
    t->exp.version = t->exp.full = t->exp.rver = -1;

    for (int k = 0; k < ED_NTENSORS; k++) {
        const size_t len = strlen(sp->name) + strlen(ed_tensor_suffix[k]) + 1;
        t->tensor_names[k] = malloc(len);
        if (t->tensor_names[k] == NULL)
            return ed_host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory",
                                   sp->name);
        snprintf(t->tensor_names[k], len, "%s%s", sp->name, ed_tensor_suffix[k]);
    }
    // Writers first: the trainer's evictions take the write lock between the data thread's
    // prefetch chunks (ops.c), each under the read lock; glibc's default lets a reader in
    // past a waiting writer, so the trainer waited out the prefetch of whole batches.
    pthread_rwlockattr_t la;
    int rc = pthread_rwlockattr_init(&la);
#ifdef PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP
    if (rc == 0) pthread_rwlockattr_setkind_np(&la, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    if (rc == 0) {
        rc = pthread_rwlock_init(&t->lock, &la);
        pthread_rwlockattr_destroy(&la);
    }
    if (rc != 0)
        return ed_host->errorf(GRM_EINTERNAL, "emb-dynamic: table '%s': cannot create its "
                               "lock", sp->name);
    t->lock_ready = 1;

    // Start with room for the spec's hint (at most 2^20 rows) or initial_rows; chunks no
    // bigger than that start, so a small table does not hold two 64K-row chunks.
    int64_t rows = c->initial_rows >= 0 ? c->initial_rows
                   : sp->rows < ED_HINT_MAX ? sp->rows : ED_HINT_MAX;
    int64_t chunk = 64;
    while (chunk < rows && chunk < c->chunk_rows) chunk *= 2;
    if ((st = ed_keys_init(s, &t->keys, ed_keys_slots_for(rows, (int32_t)c->probe_lanes),
                           (int32_t)c->probe_lanes)) != GRM_OK)
        return st;
    ed_pool_setup(&t->pools[0], 0, sp->dim, s->S, chunk);
    ed_pool_setup(&t->pools[1], 1, sp->dim, s->S, chunk);
    // The current and the next chunk (MTGRBoost §4.1).
    for (int i = 0; i < (c->fp16_cold ? 2 : 1); i++)
        if ((st = ed_pool_ensure(s, t, &t->pools[i], 2 * chunk)) != GRM_OK) return st;
    t->max_rows = c->max_rows;
    if (!s->tiered) return GRM_OK;
    if ((st = ed_tier_open(s, t)) != GRM_OK) return st;
    if (s->cache_bytes > 0) {
        t->max_rows = s->cache_bytes / ed_cache_row_bytes(t);
        if (t->max_rows < 1)
            return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': cache_bytes = %s "
                                   "holds no row (a row costs %lld bytes); raise it",
                                   sp->name, c->cache_bytes,
                                   (long long)ed_cache_row_bytes(t));
    }
    return GRM_OK;
}

static const ed_config ed_defaults = {
    .evict = ED_EVICT_NONE, .fp16_cold = 0, .max_rows = 0, .ttl_steps = 0,
    .hot_threshold = 8, .initial_rows = -1, .chunk_rows = 65536, .probe_lanes = 4,
    .impl = ED_IMPL_CPU, .backing = "", .cache_bytes = "", .target_hit_rate = 0.9,
    .profile_batches = 20, .backing_garbage_min = 65536,
};

static grm_status ed_create(const void *config, const grm_emb_table_spec *tables,
                            int32_t ntables, const grm_optimizer *opt, void **inst)
{
    const ed_config *cfg = config != NULL ? config : &ed_defaults;
    ed_store *s = NULL;
    grm_status st;

    if (inst == NULL) return ed_host->errorf(GRM_EINVAL, "emb-dynamic: create: inst is NULL");
    *inst = NULL;
    if (ntables < 0 || (ntables > 0 && tables == NULL))
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: create: %d tables at %p",
                               (int)ntables, (const void *)tables);
    if ((st = ed_check_config(cfg)) != GRM_OK) return st;
    int64_t cache_bytes;
    if ((st = ed_parse_bytes(cfg->cache_bytes, &cache_bytes)) != GRM_OK) return st;
    if ((st = ed_check_tiered(cfg, cache_bytes)) != GRM_OK) return st;
    for (int32_t i = 0; i < ntables; i++)
        if ((st = ed_check_spec(cfg, tables, i)) != GRM_OK) return st;

    int32_t S = 0;
    if (opt != NULL && opt->ops != NULL) {
        S = opt->ops->state_floats(opt->inst);
        if (S < 0)
            return ed_host->errorf(GRM_EINVAL, "emb-dynamic: the optimizer reports %d state "
                                   "floats per element; expected >= 0", (int)S);
    }

    s = calloc(1, sizeof(*s));
    if (s == NULL) return ed_host->errorf(GRM_ENOMEM, "emb-dynamic: create: out of memory");
    s->host = ed_host;
    s->cfg = *cfg;
    s->tiered = cache_bytes != 0;
    s->cache_bytes = cache_bytes;
    if (s->tiered && s->cfg.evict == ED_EVICT_NONE) s->cfg.evict = ED_EVICT_LRU;
    if (s->cfg.impl == ED_IMPL_AUTO)   /* the run's backend decides, once */
        s->cfg.impl = grm_backend_wants_ref(ed_host) ? ED_IMPL_REF : ED_IMPL_CPU;
    if (opt != NULL) s->opt = *opt;
    s->S = S;
    const int f16c = s->cfg.impl == ED_IMPL_CPU && ed_have_f16c();
    s->to_f16 = f16c ? ed_to_f16_f16c : ed_to_f16_soft;
    s->from_f16 = f16c ? ed_from_f16_f16c : ed_from_f16_soft;
    s->tables = calloc(ntables > 0 ? (size_t)ntables : 1, sizeof(*s->tables));
    if (s->tables == NULL) {
        st = ed_host->errorf(GRM_ENOMEM, "emb-dynamic: create: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < ntables; i++) {
        s->ntables = i + 1;     // destroy frees whatever table i got before a failure
        if ((st = ed_table_init(s, &s->tables[i], &tables[i])) != GRM_OK) goto fail;
    }
    *inst = s;
    return GRM_OK;

fail:
    ed_destroy(s);
    return st;
}

/* ---- lookup and update ---- */

static grm_status ed_get_table(ed_store *s, int32_t table, const char *op, ed_table **out)
{
    if (s == NULL) return ed_host->errorf(GRM_EINVAL, "emb-dynamic: %s: inst is NULL", op);
    if (table < 0 || table >= s->ntables)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: %s: table index %d outside [0, %d)",
                               op, (int)table, (int)s->ntables);
    *out = &s->tables[table];
    return GRM_OK;
}

/* Refuse the two reserved ids before anything is read or changed. */
static grm_status ed_check_ids(const ed_table *t, const int64_t *ids, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] == ED_KEY_EMPTY || ids[i] == ED_KEY_TOMB)
            return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': id %lld is reserved "
                                   "(INT64_MIN and INT64_MIN + 1 mark empty and evicted "
                                   "slots); remap it", t->name, (long long)ids[i]);
    return GRM_OK;
}

static grm_status ed_lookup(void *inst, float *rows /* [n, D] */, int32_t table,
                            const int64_t *ids /* [n] */, int64_t n, uint32_t flags)
{
    ed_store *s = inst;
    ed_table *t = NULL;
    grm_status st;

    if ((st = ed_get_table(s, table, "lookup", &t)) != GRM_OK) return st;
    if (n < 0 || (n > 0 && (rows == NULL || ids == NULL)))
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': lookup of %lld ids with "
                               "rows %p, ids %p", t->name, (long long)n, (void *)rows,
                               (const void *)ids);
    if (n == 0) return GRM_OK;
    if ((st = ed_check_ids(t, ids, n)) != GRM_OK) return st;
    return ed_lookup_batch(s, t, rows, ids, n, (flags & GRM_EMB_INSERT) != 0);
}

static grm_status ed_update(void *inst, int32_t table, const int64_t *ids /* [n] */,
                            const float *grads /* [n, D] */, int64_t n, int64_t step)
{
    ed_store *s = inst;
    ed_table *t = NULL;
    grm_status st;

    if ((st = ed_get_table(s, table, "update", &t)) != GRM_OK) return st;
    if (s->opt.ops == NULL)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': update without an "
                               "optimizer; give the store one at create", t->name);
    if (n < 0 || (n > 0 && (grads == NULL || ids == NULL)))
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': update of %lld ids with "
                               "ids %p, grads %p", t->name, (long long)n, (const void *)ids,
                               (const void *)grads);
    if (step < 0)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': update at step %lld; "
                               "steps are >= 0", t->name, (long long)step);
    if ((st = ed_check_ids(t, ids, n)) != GRM_OK) return st;
    return ed_update_batch(s, t, ids, grads, n, step);
}

static grm_status ed_prefetch(void *inst, int32_t table, const int64_t *ids /* [n] */,
                              int64_t n)
{
    ed_store *s = inst;
    ed_table *t = NULL;
    grm_status st;

    if ((st = ed_get_table(s, table, "prefetch", &t)) != GRM_OK) return st;
    if (n < 0 || (n > 0 && ids == NULL))
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': prefetch of %lld ids at "
                               "%p", t->name, (long long)n, (const void *)ids);
    if (n == 0) return s->tiered ? GRM_OK : GRM_ENOTSUP;    // the host's question (emb.h)
    if (!s->tiered) return GRM_OK;      // all rows are in memory already
    if ((st = ed_check_ids(t, ids, n)) != GRM_OK) return st;
    return ed_prefetch_batch(s, t, ids, n);
}

static grm_status ed_trim_op(void *inst, int32_t table, int64_t keep_from)
{
    ed_store *s = inst;
    ed_table *t = NULL;
    grm_status st;
    if ((st = ed_get_table(s, table, "trim", &t)) != GRM_OK) return st;
    return ed_trim(s, t, keep_from);
}

/* ---- checkpoint tensors ---- */

static void ed_describe(const ed_store *s, ed_table *t, int k, grm_named_tensor *out)
{
    const ed_export *e = &t->exp;
    memset(out, 0, sizeof(*out));
    out->name = t->tensor_names[k];
    out->tensor.device.type = GRM_DEVICE_CPU;
    for (int d = 0; d < GRM_TENSOR_MAX_DIMS; d++) out->tensor.shape[d] = 1;
    out->tensor.ndim = k == 0 || k == 4 ? 1 : 2;
    out->tensor.shape[0] = e->n;
    switch (k) {
    case 0:
        out->tensor.data = e->ids;
        out->tensor.dtype = GRM_DTYPE_I64;
        break;
    case 1:
        out->tensor.data = e->weight;
        out->tensor.dtype = GRM_DTYPE_F32;
        out->tensor.shape[1] = t->dim;
        break;
    case 2:
        out->tensor.data = e->state;
        out->tensor.dtype = GRM_DTYPE_F32;
        out->tensor.shape[1] = (int64_t)s->S * t->dim;
        break;
    case 3:
        out->tensor.data = e->meta;
        out->tensor.dtype = GRM_DTYPE_I64;
        out->tensor.shape[1] = 3;
        break;
    default:
        out->tensor.data = (void *)e->counters;
        out->tensor.dtype = GRM_DTYPE_I64;
        out->tensor.shape[0] = 5;
        break;
    }
}

/* Table and tensor kind (0..4: ids, weight, opt_state, meta, counters) of tensor index. */
static grm_status ed_tensor_at(ed_store *s, int32_t index, const char *op, ed_table **t,
                               int *k)
{
    const int32_t per_table = s->S > 0 ? ED_NTENSORS : ED_NTENSORS - 1;
    if (index < 0 || index >= per_table * s->ntables)
        return ed_host->errorf(GRM_ENOTFOUND, "emb-dynamic: %s: index %d outside [0, %d)", op,
                               (int)index, (int)(per_table * s->ntables));
    *k = (int)(index % per_table);
    if (s->S == 0 && *k >= 2) (*k)++;       // no opt_state tensor when S == 0
    *t = &s->tables[index / per_table];
    return GRM_OK;
}

static grm_status ed_tensors(void *inst, int32_t index, grm_named_tensor *out)
{
    ed_store *s = inst;
    ed_table *t = NULL;
    int k = 0;
    if (s == NULL || out == NULL)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: tensors: inst or out is NULL");
    grm_status st = ed_tensor_at(s, index, "tensors", &t, &k);
    if (st == GRM_OK) st = ed_export_table(s, t);
    if (st != GRM_OK) return st;
    ed_describe(s, t, k, out);
    return GRM_OK;
}

/* The export a range of rows at a time (ABI 1.10): a tiered table's checkpoint never holds
 * its rows whole, only the sorted ids (8 bytes a row) and the range asked for. */
static grm_status ed_tensor_rows(void *inst, int32_t index, grm_named_tensor *out,
                                 int64_t row0, int64_t n, void *rows)
{
    ed_store *s = inst;
    ed_table *t;
    int k;
    if (s == NULL || (rows == NULL && out == NULL))
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: tensor_rows: inst or out is NULL");
    grm_status st = ed_tensor_at(s, index, "tensor_rows", &t, &k);
    if (st != GRM_OK) return st;
    if (rows != NULL) return ed_export_rows(s, t, k, row0, n, rows);
    int64_t total;
    if ((st = ed_export_describe(s, t, &total)) != GRM_OK) return st;
    ed_describe(s, t, k, out);
    out->tensor.data = NULL;
    return GRM_OK;
}

static grm_status ed_load_piece(void *inst, const grm_named_tensor *in, int64_t row0,
                                int64_t rows)
{
    ed_store *s = inst;
    if (s == NULL || in == NULL || in->name == NULL)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: load: inst, tensor or name is NULL");
    for (int32_t i = 0; i < s->ntables; i++) {
        ed_table *t = &s->tables[i];
        for (int k = 0; k < ED_NTENSORS; k++) {
            if (k == 2 && s->S == 0) continue;
            if (strcmp(in->name, t->tensor_names[k]) == 0)
                return ed_load_rows(s, t, k, in, row0, rows);
        }
    }
    return ed_host->errorf(GRM_ENOTFOUND, "emb-dynamic: load: no tensor named '%s' in this "
                           "store (its tensors are <table>.ids, .weight, .opt_state, .meta "
                           "and .counters)", in->name);
}

static grm_status ed_load(void *inst, const grm_named_tensor *in)
{
    if (in == NULL)
        return ed_host->errorf(GRM_EINVAL, "emb-dynamic: load: inst, tensor or name is NULL");
    return ed_load_piece(inst, in, 0, in->tensor.shape[0]);
}

static grm_status ed_stats(void *inst, int32_t table, grm_emb_stats *out)
{
    ed_store *s = inst;
    ed_table *t = NULL;
    grm_status st;
    if ((st = ed_get_table(s, table, "stats", &t)) != GRM_OK) return st;
    if (out == NULL) return ed_host->errorf(GRM_EINVAL, "emb-dynamic: stats: out is NULL");
    pthread_rwlock_rdlock(&t->lock);
    out->rows = atomic_load(&t->keys.live) + atomic_load(&t->tier.file_only);
    // Tiered: the cache's budget in rows (0 while cache_bytes = auto profiles).
    out->capacity = s->tiered ? t->max_rows : t->keys.M / ED_GROW_DEN * ED_GROW_NUM;
    out->bytes = (int64_t)((size_t)t->keys.M * sizeof(ed_slot) + ed_pool_bytes(&t->pools[0])
                           + ed_pool_bytes(&t->pools[1]));
    out->lookups = atomic_load(&t->lookups);
    out->misses = atomic_load(&t->misses);
    out->evictions = atomic_load(&t->evictions);
    pthread_rwlock_unlock(&t->lock);
    return GRM_OK;
}

/* ---- descriptor ---- */

static const grm_param_decl ed_params[] = {
    GRM_PARAM_DECL_ENUM(ed_config, evict, "none", "none|lru|lfu",
                        "which rows go when a table passes max_rows: none, least recently or "
                        "least frequently used"),
    GRM_PARAM_DECL_INT(ed_config, max_rows, "0", GRM_PARAM_RANGE(0, 0x1p62),
                       "live-row budget per table (0 = none); needs evict = lru or lfu"),
    GRM_PARAM_DECL_INT(ed_config, ttl_steps, "0", GRM_PARAM_RANGE(0, 0x1p62),
                       "evict rows not looked up or updated for this many steps (0 = never)"),
    GRM_PARAM_DECL_BOOL(ed_config, fp16_cold, "false",
                        "store rows with fewer than hot_threshold accesses in FP16 (MTGRBoost "
                        "5.2)"),
    GRM_PARAM_DECL_INT(ed_config, hot_threshold, "8", GRM_PARAM_RANGE(1, 0x1p62),
                       "accesses (training lookups) at which an FP16 row becomes an FP32 row"),
    GRM_PARAM_DECL_INT(ed_config, initial_rows, "-1", GRM_PARAM_RANGE(-1, 0x1p40),
                       "rows the key structure holds before its first growth; -1: the table's "
                       "rows hint, at most 1048576"),
    GRM_PARAM_DECL_INT(ed_config, chunk_rows, "65536", GRM_PARAM_RANGE(64, 16777216),
                       "rows per embedding chunk, a power of two (smaller tables use smaller "
                       "chunks)"),
    GRM_PARAM_DECL_INT(ed_config, probe_lanes, "4", GRM_PARAM_RANGE(1, 32),
                       "thread groups of grouped parallel probing (eq. 5), a power of two"),
    GRM_PARAM_DECL_ENUM(ed_config, impl, "auto", "cpu|ref|auto",
                        "threaded batches with F16C (cpu) or one-thread plain loops (ref)"
                        " (auto: ref on [pipeline] device = ref, else cpu)"),
    GRM_PARAM_DECL_STRING(ed_config, backing, "",
                          "tiered mode: directory for the backing files (<table>.tier.*, "
                          "unlinked scratch); the cache holds cache_bytes per table"),
    GRM_PARAM_DECL_STRING(ed_config, cache_bytes, "",
                          "tiered mode: cache budget per table in bytes (64M, 1G, 512MiB) or "
                          "auto (chosen from the first profile_batches batches)"),
    GRM_PARAM_DECL_ENUM(ed_config, backing_io, "auto", "auto|pread|io_uring",
                        "tiered mode: how the prefetch reads its misses from the backing file: "
                        "io_uring (one submission a chunk of 64 ids), pread (a call a row), "
                        "auto (io_uring when built with liburing and the kernel allows it)"),
    GRM_PARAM_DECL_INT(ed_config, backing_garbage_min, "65536",
                       GRM_PARAM_RANGE(0, 1e12),
                       "tiered mode: garbage records (older copies of rows) the backing file "
                       "holds before its emptiest segments are cleaned; cleaning then keeps "
                       "them at most as many as the live records"),
    GRM_PARAM_DECL_DOUBLE(ed_config, target_hit_rate, "0.9", GRM_PARAM_RANGE(0.01, 1),
                          "cache_bytes = auto: the LRU hit rate (of re-references) the cache "
                          "must reach"),
    GRM_PARAM_DECL_INT(ed_config, profile_batches, "20", GRM_PARAM_RANGE(1, 100000),
                       "cache_bytes = auto: training lookups profiled before choosing"),
    GRM_PARAM_DECL_END
};

/* grm_emb_ops.placement: the keys that say where rows are kept and how they are found. A
 * resume may change them and trains the same model (tiered and in-memory runs are bitwise
 * equal, tests/test-train-tiered.sh). evict is one of them only without max_rows: then it
 * decides what a tiered cache keeps (or nothing); with max_rows, which rows training
 * loses. */
static int ed_placement(void *inst, const char *key)
{
    static const char *const keys[] = {
        "backing", "cache_bytes", "backing_io", "backing_garbage_min", "target_hit_rate",
        "profile_batches", "initial_rows", "chunk_rows", "probe_lanes",
    };
    const ed_store *s = inst;
    if (key == NULL) return 0;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strcmp(key, keys[i])) return 1;
    return !strcmp(key, "evict") && s != NULL && s->cfg.max_rows == 0;
}

static const grm_emb_ops ed_ops = {
    .struct_size = sizeof(grm_emb_ops),
    .create = ed_create,
    .destroy = ed_destroy,
    .lookup = ed_lookup,
    .update = ed_update,
    .tensors = ed_tensors,
    .load = ed_load,
    .stats = ed_stats,
    .flags = GRM_EMB_ANY_ID | GRM_EMB_LOAD_INTERLEAVED,
    .prefetch = ed_prefetch,
    .trim = ed_trim_op,
    .tensor_rows = ed_tensor_rows,
    .load_rows = ed_load_piece,
    .placement = ed_placement,
};

static const grm_plugin_info ed_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_EMB,
    .name = "emb-dynamic",
    .version = "1.2.0",
    .description = "dynamic hash embedding tables: any int64 id, grown on demand, "
                   "LRU/LFU/TTL eviction, FP16 cold rows (MTGRBoost 4.1, 5.2), "
                   "a RAM cache over a backing file (tiered mode)",
    .ops = &ed_ops,
    .params = ed_params,
    .config_size = sizeof(ed_config),
};

GRM_PLUGIN_DEFINE(ed_host, &ed_info);

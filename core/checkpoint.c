/* core/checkpoint.c - the trainer's checkpoints: their names (step-S.ext, best.ext,
 * rank-R-of-N directories; core/reshard.c uses the same definitions), what a checkpoint
 * holds (the store's tensors, every dense parameter and its optimizer state, trainer.state),
 * save with pruning, load, resume on the same or another world size (MTGRBoost §5.2's modulo
 * scheme), and early stopping's best model. */
#include "train.h"
#include "checkpoint.h"
#include "reshard.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL   /* as core/grmcol.c and core/route.c: header-only xxHash */
#include <xxhash.h>

/* ---- checkpoints ---- */

/* ---- names (shared with core/reshard.c through core/checkpoint.h) ---- */

int grm__ckpt_is_step_name(const char *name, const char *ext, int64_t *step)
{
    long long s;
    int end = 0;
    if (sscanf(name, "step-%lld.%n", &s, &end) != 1 || end == 0) return 0;
    if (strcmp(name + end, ext) != 0 || s < 0) return 0;
    *step = s;
    return 1;
}

void grm__ckpt_step_stem(char *buf, size_t cap, int64_t step)
{
    snprintf(buf, cap, "step-%010lld", (long long)step);
}

int grm__ckpt_is_rank_dir(const char *name, int *r, int *n)
{
    int end = 0;
    if (sscanf(name, "rank-%d-of-%d%n", r, n, &end) != 2 || name[end] != '\0') return 0;
    return *n >= 1 && *r >= 0 && *r < *n;
}

void grm__ckpt_rank_dir(char *buf, size_t cap, const char *dir, int32_t r, int32_t n)
{
    if (n == 1) snprintf(buf, cap, "%s", dir);
    else snprintf(buf, cap, "%s/rank-%d-of-%d", dir, (int)r, (int)n);
}

grm_status grm__ckpt_make_dirs(const char *dir)
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

/* ---- formats by extension ---- */

void grm__ckpt_fmt_fini(grm__ckpt_fmt *f)
{
    if (f->inst) f->ops->destroy(f->inst);
    memset(f, 0, sizeof *f);
}

grm_status grm__ckpt_fmt_all(const grm__registry *reg, grm__ckpt_fmt *out, int32_t cap,
                             int32_t *n)
{
    *n = 0;
    for (int32_t i = 0; i < grm__registry_count(reg) && *n < cap; i++) {
        const grm__plugin *pl = grm__registry_at(reg, i);
        if (pl->info->kind != GRM_KIND_CKPT) continue;
        grm__ckpt_fmt *f = &out[*n];
        memset(f, 0, sizeof *f);
        f->plugin = pl;
        f->ops = pl->info->ops;
        /* defaults (a NULL config) are enough to read; a format that needs keys is skipped */
        if (f->ops->create(NULL, &f->inst) != GRM_OK) {
            memset(f, 0, sizeof *f);
            continue;
        }
        f->ext = f->ops->extension(f->inst);
        (*n)++;
    }
    return GRM_OK;
}

grm_status grm__ckpt_fmt_for(const grm__registry *reg, const char *path, grm__ckpt_fmt *out)
{
    grm__ckpt_fmt all[16];
    int32_t n;
    char known[256] = "";
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    memset(out, 0, sizeof *out);
    grm__ckpt_fmt_all(reg, all, 16, &n);
    for (int32_t i = 0; i < n; i++) {
        if (!out->inst && dot && (!slash || dot > slash) && strcmp(dot + 1, all[i].ext) == 0) {
            *out = all[i];
            continue;
        }
        size_t k = strlen(known);
        snprintf(known + k, sizeof known - k, "%s.%s (%s)", k ? ", " : "", all[i].ext,
                 all[i].plugin->info->name);
        grm__ckpt_fmt_fini(&all[i]);
    }
    if (out->inst) return GRM_OK;
    return grm_errorf(GRM_ENOTFOUND, "%s: no checkpoint format reads this extension; the "
                      "loaded ones are %s", path, known[0] ? known : "none (no ckpt-* plugin "
                      "found: check [pipeline] plugin_dirs)");
}

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

/* The store's k-th checkpoint tensor: described only (data NULL, its rows read later a
 * range at a time) when the store has tensor_rows (ABI 1.10), else exported whole. */
static grm_status emb_tensor(grm__trainer *t, int32_t k, grm_named_tensor *nt)
{
    const grm_emb_ops *e = t->sp.eops;
    if (GRM_HAS_OP(grm_emb_ops, e, tensor_rows))
        return e->tensor_rows(t->p->emb.inst, k, nt, 0, 0, NULL);
    return e->tensors(t->p->emb.inst, k, nt);
}

/* grm_ckpt_rows_fn of save_rows: the list's first tensors are the store's, in its order. */
static grm_status emb_rows(void *user, int64_t index, int64_t row0, int64_t n, void *out)
{
    grm__trainer *t = user;
    grm_status st = t->sp.eops->tensor_rows(t->p->emb.inst, (int32_t)index, NULL, row0, n, out);
    if (st != GRM_OK)
        grm_error_prefix("[embedding] %s: tensor_rows: ", t->p->emb.plugin->info->name);
    return st;
}

size_t grm__ckpt_row_bytes(const grm_tensor *t)
{
    size_t b = grm_dtype_size(t->dtype);
    for (int32_t d = 1; d < t->ndim; d++) b *= (size_t)t->shape[d];
    return b;
}

grm_status grm__ckpt_piece_fits(const char *path, const grm_named_tensor *nt, int64_t row0,
                                int64_t rows)
{
    const int64_t m = nt->tensor.ndim >= 1 ? nt->tensor.shape[0] : 1;
    if (m >= 0 && row0 >= 0 && m <= rows - row0) return GRM_OK;
    return grm_errorf(GRM_EFORMAT, "%s: tensor '%s': rows [%lld, +%lld) of %lld", path,
                      nt->name, (long long)row0, (long long)m, (long long)rows);
}

static size_t tensor_bytes(const grm_tensor *x)
{
    size_t b = grm_dtype_size(x->dtype);
    for (int32_t d = 0; d < x->ndim; d++) b *= (size_t)x->shape[d];
    return b;
}

static grm_status collect_state(grm__trainer *t, ckpt_list *l, int64_t *steps_buf)
{
    grm__pipeline *p = t->p;
    grm_status st;
    for (int32_t k = 0;; k++) {
        grm_named_tensor nt;
        st = emb_tensor(t, k, &nt);
        if (st == GRM_ENOTFOUND) break;
        if (st != GRM_OK) return st;
        if ((st = ckl_add(l, "emb.", nt.name, nt.tensor)) != GRM_OK) return st;
    }
    for (int32_t i = 0; i < t->dn.nparams; i++) {
        grm__dparam *dp = &t->dn.params[i];
        if ((st = ckl_add(l, "", dp->name, dp->shape)) != GRM_OK) return st;
        if (t->dn.state_floats
            && (st = ckl_add(l, "optim.", dp->name,
                             tensor1(dp->state, GRM_DTYPE_F32, t->dn.state_floats * dp->numel)))
                   != GRM_OK)
            return st;
        steps_buf[i] = dp->steps;
    }
    if ((st = ckl_add(l, "", "trainer.param_steps",
                      tensor1(steps_buf, GRM_DTYPE_I64, t->dn.nparams))) != GRM_OK)
        return st;
    int64_t *s = t->ck.state;   /* the layout of GRM__ST_* (core/train.h) */
    s[GRM__ST_STEP] = t->step;
    s[GRM__ST_SEED] = p->set.seed;
    s[GRM__ST_EXAMPLES] = t->plan.nex_all;
    s[GRM__ST_BATCH] = p->set.batch_size;
    s[GRM__ST_BEST_STEP] = t->ck.best_step;
    memcpy(&s[GRM__ST_BEST_SCORE], &t->ck.best_score, sizeof(double));
    s[GRM__ST_BAD_EVALS] = t->ck.bad_evals;
    s[GRM__ST_STOPPED] = t->ck.stopped;
    s[GRM__ST_METRICS_AT] = grm__metrics_tell(t->rep.metrics);   /* rank 0's file */
    if (t->nranks > 1) {   /* every rank saves it, so the replicated state stays equal */
        const grm_comm_handle *c = &p->comm_handle;
        st = c->ops->allreduce(c->inst, &s[GRM__ST_METRICS_AT], 1, GRM_DTYPE_I64,
                               GRM_REDUCE_MAX);
        if (st != GRM_OK) return st;
    }
    s[GRM__ST_WIN_N] = t->rep.loss_n;
    memcpy(&s[GRM__ST_WIN_SUM], &t->rep.loss_sum, sizeof(double));
    return ckl_add(l, "", "trainer.state", tensor1(s, GRM_DTYPE_I64, GRM__CKPT_STATE_N));
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
        if (!grm__ckpt_is_step_name(e->d_name, ext, &s)) continue;
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

/* Newest step-S checkpoint in dir over every format of the registry (a run whose
 * [checkpoint] plugin changed resumes from the other format's files); on a tie the
 * pipeline's own format wins. */
static grm_status newest_any(const grm__trainer *t, const char *dir, char *path, size_t cap)
{
    const grm_ckpt_ops *kops = t->p->ckpt.plugin->info->ops;
    grm_status st = newest_ckpt(dir, kops->extension(t->p->ckpt.inst), path, cap);
    int64_t best = -1;
    if (st != GRM_OK) return st;
    if (path[0]) {
        const char *b = strrchr(path, '/');
        grm__ckpt_is_step_name(b ? b + 1 : path, kops->extension(t->p->ckpt.inst), &best);
    }
    grm__ckpt_fmt all[16];
    int32_t n;
    grm__ckpt_fmt_all(t->p->reg, all, 16, &n);
    for (int32_t i = 0; i < n; i++) {
        char other[4096];
        int64_t s;
        if (st == GRM_OK && all[i].plugin != t->p->ckpt.plugin
            && (st = newest_ckpt(dir, all[i].ext, other, sizeof other)) == GRM_OK && other[0]
            && grm__ckpt_is_step_name(strrchr(other, '/') + 1, all[i].ext, &s) && s > best) {
            best = s;
            snprintf(path, cap, "%s", other);
        }
        grm__ckpt_fmt_fini(&all[i]);
    }
    return st;
}

/* Remove what a format wrote beside the checkpoint `path` (dir/step-S.ext): shards named
 * step-S-* and an index step-S.ext.index.json (ckpt-safetensors above shard_bytes). */
static void remove_siblings(const char *dir, const char *path)
{
    const char *base = strrchr(path, '/') + 1, *dot = strrchr(base, '.');
    char stem[256], index[4096 + 16];
    snprintf(stem, sizeof stem, "%.*s-", (int)(dot ? dot - base : (long)strlen(base)), base);
    snprintf(index, sizeof index, "%s.index.json", base);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, stem, strlen(stem)) != 0 && strcmp(e->d_name, index) != 0)
            continue;
        char p[4096 + 512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
}

/* Delete the oldest checkpoints until at most keep remain. */
static void prune_ckpts(const char *dir, const char *ext, int64_t keep)
{
    char newest[4096], oldest[4096];
    int64_t n;
    while (scan_ckpts(dir, ext, newest, oldest, sizeof oldest, &n) == GRM_OK && n > keep
           && oldest[0] && unlink(oldest) == 0)
        remove_siblings(dir, oldest);
}

/* XXH64 of the configuration as parsed (section names, keys and values in file order), so
 * comments and spacing do not change it: the "config_hash" of a checkpoint's metadata and
 * of `grmhost export`'s manifest. */
uint64_t grm__ckpt_config_hash(const grm__config *cfg)
{
    XXH64_state_t *h = XXH64_createState();
    if (!h) return 0;
    XXH64_reset(h, 0);
    for (int i = 0; i < cfg->nsec; i++) {
        const grm__section *sec = &cfg->sec[i];
        XXH64_update(h, "[", 1);
        XXH64_update(h, sec->name, strlen(sec->name) + 1);
        for (int k = 0; k < sec->nkv; k++) {
            XXH64_update(h, sec->kv[k].key, strlen(sec->kv[k].key) + 1);
            XXH64_update(h, sec->kv[k].value, strlen(sec->kv[k].value) + 1);
        }
    }
    const uint64_t v = XXH64_digest(h);
    XXH64_freeState(h);
    return v;
}


grm_status grm__ckpt_read_meta(const grm_ckpt_ops *ops, void *inst, const char *path,
                               char **out)
{
    *out = malloc(GRM__CKPT_META_CAP);
    if (!*out) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm_status st = ops->meta(inst, path, *out, GRM__CKPT_META_CAP);
    if (st != GRM_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

/* 1 when [sec] key defines the model a checkpoint holds, so that resuming under another
 * value trains another model than the one saved (issue 25 item 4): every key of the
 * sections that compute the model or feed it — the store, the dense blocks, the head, the
 * optimizers, the features and the transforms — and [train]'s keys that shape the
 * examples. Run control ([train] steps, epochs, eval_every, ...; [checkpoint]; [reader]'s
 * paths, which move with the data) may change between runs; batch_size is compared with
 * the trainer's state (load_ckpt_as). */
static int model_key(const char *sec, const char *key)
{
    static const char *const model_secs[] = { "embedding", "head", "dense.", "optimizer.",
                                              "feature.", "transform." };
    static const char *const train_keys[] = { "task", "label_columns", "valid_fraction",
                                              "test_fraction", "user_column",
                                              "sequence_column", "time_column", "item_table",
                                              "max_seq_len", "batching", "batch_tokens",
                                              "accumulate" };
    for (size_t i = 0; i < sizeof model_secs / sizeof *model_secs; i++) {
        const size_t n = strlen(model_secs[i]);
        if (strncmp(sec, model_secs[i], n) == 0 && (model_secs[i][n - 1] == '.' || !sec[n]))
            return 1;
    }
    if (strcmp(sec, "train") != 0) return 0;
    for (size_t i = 0; i < sizeof train_keys / sizeof *train_keys; i++)
        if (strcmp(key, train_keys[i]) == 0) return 1;
    return 0;
}

/* Append the JSON-escaped s to b at *n (b NULL: count only). */
static size_t put_escaped(char *b, size_t n, const char *s)
{
    const size_t k = grm__json_escape(NULL, 0, s);
    if (b) grm__json_escape(b + n, k + 1, s);
    return n + k;
}

static size_t put_raw(char *b, size_t n, const char *s)
{
    const size_t k = strlen(s);
    if (b) memcpy(b + n, s, k + 1);
    return n + k;
}

char *grm__ckpt_settings_json(const grm__config *cfg)
{
    char *b = NULL;
    for (int pass = 0; pass < 2; pass++) {   /* count, then write */
        size_t n = put_raw(b, 0, "{");
        int first = 1;
        for (int i = 0; i < cfg->nsec; i++) {
            const grm__section *sec = &cfg->sec[i];
            for (int k = 0; k < sec->nkv; k++) {
                if (!model_key(sec->name, sec->kv[k].key)) continue;
                n = put_raw(b, n, first ? "\"[" : ",\"[");
                n = put_escaped(b, n, sec->name);
                n = put_raw(b, n, "] ");
                n = put_escaped(b, n, sec->kv[k].key);
                n = put_raw(b, n, "\":\"");
                n = put_escaped(b, n, sec->kv[k].value);
                n = put_raw(b, n, "\"");
                first = 0;
            }
        }
        n = put_raw(b, n, "}");
        if (!pass && !(b = malloc(n + 1))) return NULL;
    }
    return b;
}

const char *grm__ckpt_meta_settings(const char *meta, size_t *len)
{
    const char *at = strstr(meta, "\"settings\":{");
    if (!at) return NULL;
    const char *q = at + strlen("\"settings\":{");
    int in_str = 0;
    for (; *q; q++) {   /* to the object's closing brace: strings hold no raw braces' meaning */
        if (in_str && *q == '\\' && q[1]) q++;
        else if (*q == '"') in_str = !in_str;
        else if (!in_str && *q == '}') {
            *len = (size_t)(q + 1 - at);
            return at;
        }
    }
    return NULL;
}

/* The next JSON string of an object's members at *p (after spaces, commas and colons): its
 * escaped span [*s, *s + *n). 0 at the object's end or on anything else. */
static int next_json_str(const char **p, const char **s, size_t *n)
{
    const char *q = *p;
    while (*q == ' ' || *q == ',' || *q == ':' || *q == '{') q++;
    if (*q != '"') return 0;
    const char *b = ++q;
    while (*q && *q != '"') q += (*q == '\\' && q[1]) ? 2 : 1;
    if (*q != '"') return 0;
    *s = b;
    *n = (size_t)(q - b);
    *p = q + 1;
    return 1;
}

/* The value of key [k, k + kn) in settings object `obj`, or NULL. */
static const char *settings_get(const char *obj, const char *k, size_t kn, size_t *vn)
{
    const char *p = strchr(obj, '{'), *ks, *vs;
    size_t ksn;
    while (p && next_json_str(&p, &ks, &ksn) && next_json_str(&p, &vs, vn))
        if (ksn == kn && memcmp(ks, k, kn) == 0) return vs;
    return NULL;
}

/* 1 when settings key ks [kn] ("[embedding] backing") only places the store's rows
 * (grm_emb_ops.placement, ABI 1.11): changing it changes no model. */
static int placement_key(const grm__pipeline *p, const char *ks, size_t kn)
{
    static const char sec[] = "[embedding] ";
    const grm_emb_ops *e = p->emb.plugin ? p->emb.plugin->info->ops : NULL;
    char key[256];
    if (!e || !p->emb.inst || !GRM_HAS_OP(grm_emb_ops, e, placement) || kn <= sizeof sec - 1
        || kn - (sizeof sec - 1) >= sizeof key || memcmp(ks, sec, sizeof sec - 1) != 0)
        return 0;
    memcpy(key, ks + sizeof sec - 1, kn - (sizeof sec - 1));
    key[kn - (sizeof sec - 1)] = '\0';
    return e->placement(p->emb.inst, key) == 1;
}

/* Warn, in one line naming each key, about every model setting (model_key) the checkpoint's
 * run had and the INI has not, or has with another value: resuming goes on, but trains
 * another model than the one saved. Returns how many differ. */
static int compare_settings(const char *path, const char *saved, size_t saved_len,
                            const grm__pipeline *pl)
{
    const grm__config *cfg = pl->cfg;
    char *now = grm__ckpt_settings_json(cfg), *was = strndup(saved, saved_len);
    size_t cap = 1024, n = 0;
    char *msg = malloc(cap);
    int ndiff = 0;
    if (!now || !was || !msg) goto out;
    msg[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {   /* saved keys, then keys only the INI has */
        const char *a = pass ? now : was, *b = pass ? was : now;
        const char *p = strchr(a, '{'), *ks, *vs, *ws;
        size_t kn, vn, wn;
        while (p && next_json_str(&p, &ks, &kn) && next_json_str(&p, &vs, &vn)) {
            ws = settings_get(b, ks, kn, &wn);
            if (pass ? ws != NULL : (ws && wn == vn && memcmp(ws, vs, vn) == 0)) continue;
            if (placement_key(pl, ks, kn)) continue;    /* where rows live, not the model */
            if (ndiff++ >= 12) continue;   /* the first dozen by name, then a count */
            int w = pass ? snprintf(msg + n, cap - n, "%s%.*s unset (the INI: %.*s)",
                                    n ? "; " : "", (int)kn, ks, (int)vn, vs)
                  : ws ? snprintf(msg + n, cap - n, "%s%.*s = %.*s (the INI: %.*s)",
                                  n ? "; " : "", (int)kn, ks, (int)vn, vs, (int)wn, ws)
                       : snprintf(msg + n, cap - n, "%s%.*s = %.*s (the INI: unset)",
                                  n ? "; " : "", (int)kn, ks, (int)vn, vs);
            if (w > 0 && n + (size_t)w < cap) n += (size_t)w;
            else msg[n] = '\0';   /* a value too long to name: the key is counted */
        }
    }
    if (ndiff)
        grm__log(GRM_LOG_WARN, "grmhost", "%s: was written with other model settings than "
                 "the INI's, so this run trains another model than the one saved: %s%s (restore "
                 "them, or pass --fresh to start over)", path, msg,
                 ndiff > 12 ? "; and more" : "");
out:
    free(now);
    free(was);
    free(msg);
    return ndiff;
}

/* The sections whose plugin a checkpoint records: the store, the dense blocks, the head,
 * the optimizers. */
static int32_t nstages(const grm__pipeline *p)
{
    return p->ndense + 4;
}

static const grm__stage *stage_at(const grm__pipeline *p, int32_t i)
{
    if (i < p->ndense) return &p->dense[i];
    const grm__stage *rest[4] = { &p->emb, &p->head, &p->opt_sparse, &p->opt_dense };
    return rest[i - p->ndense];
}

/* Write a checkpoint named `file` in the checkpoint directory (NULL: step-N.ext, with
 * pruning of the oldest). */
static grm_status save_ckpt_as(grm__trainer *t, const char *file)
{
    grm__pipeline *p = t->p;
    const grm_ckpt_ops *kops = p->ckpt.plugin->info->ops;
    const char *dir = t->ck.dir;
    char path[4096 + 96];
    ckpt_list l = { 0 };
    grm_status st;
    if (!dir[0]) return GRM_OK;
    /* the model's settings (compared on resume, compare_settings) are as long as the INI */
    char *settings = grm__ckpt_settings_json(p->cfg);
    const size_t cap = 4096 + (settings ? strlen(settings) : 0);
    char *meta = settings ? malloc(cap) : NULL;
    if (!meta) {
        free(settings);
        return grm_errorf(GRM_ENOMEM, "out of memory");
    }
    int64_t *steps_buf = NULL;
    void **whole = NULL;      /* the store's tensors read whole for a format without save_rows */
    int64_t nwhole = 0;
    if ((st = grm__ckpt_make_dirs(dir)) != GRM_OK) goto out;
    steps_buf = calloc((size_t)t->dn.nparams + 1, sizeof *steps_buf);
    if (!steps_buf) {
        st = grm_errorf(GRM_ENOMEM, "out of memory");
        goto out;
    }
    if ((st = collect_state(t, &l, steps_buf)) != GRM_OK) goto out;
    char stem[32];
    grm__ckpt_step_stem(stem, sizeof stem, t->step);
    snprintf(path, sizeof path, "%s/%s.%s", dir, file ? file : stem,
             kops->extension(p->ckpt.inst));
    /* the manifest of the shard: world size, the sharding function (core/dist.h
     * grm__dist_owner_of) and its replica group, the step, the plugin of each section
     * (compared with the INI on resume, ckpt_check_meta) */
    const int64_t grp = p->set.sparse_group > 0 ? p->set.sparse_group : t->nranks;
    char name[512];
    grm__json_escape(name, sizeof name, p->set.name);
    size_t m = (size_t)snprintf(meta, cap, "{\"format\":\"grm-train\","
             "\"grm_version\":\"%s\",\"pipeline\":\"%s\",\"step\":%lld,\"world_size\":%d,"
             "\"rank\":%d,\"seed\":%lld,"
             "\"sharding\":\"fmix64(key) %% group + rank / group * group\","
             "\"sparse_group\":%lld,\"config_hash\":\"%016llx\",\"plugins\":{",
             GRM_VERSION_STRING, name, (long long)t->step, t->nranks, t->rank,
             (long long)p->set.seed, (long long)grp,
             (unsigned long long)grm__ckpt_config_hash(p->cfg));
    for (int32_t i = 0; i < nstages(p) && m < cap; i++) {
        const grm__stage *sg = stage_at(p, i);
        m += (size_t)snprintf(meta + m, cap - m, "%s\"%s\":\"%s\"", i ? "," : "",
                              sg->label, sg->plugin->info->name);
    }
    if (m < cap) m += (size_t)snprintf(meta + m, cap - m, "},\"settings\":%s}", settings);
    if (m >= cap) {
        st = grm_errorf(GRM_EINTERNAL, "%s: checkpoint metadata longer than %zu bytes", path,
                        cap);
        goto out;
    }
    /* The store's tensors described by tensor_rows go to a format with save_rows a range of
     * rows at a time (a tiered table is never held whole); another format gets them whole. */
    int by_rows = 0;
    for (int64_t i = 0; i < l.n; i++) by_rows |= l.v[i].tensor.data == NULL;
    if (by_rows && GRM_HAS_OP(grm_ckpt_ops, kops, save_rows)) {
        st = kops->save_rows(p->ckpt.inst, path, l.v, l.n, meta, emb_rows, t);
    } else {
        for (int64_t i = 0; i < l.n && st == GRM_OK; i++) {
            grm_tensor *x = &l.v[i].tensor;
            const size_t bytes = tensor_bytes(x);
            if (x->data != NULL || bytes == 0) continue;
            void **more = realloc(whole, (size_t)(nwhole + 1) * sizeof *whole);
            if (more) whole = more;
            if (!more || !(whole[nwhole] = malloc(bytes))) {
                st = grm_errorf(GRM_ENOMEM, "%s: out of memory for the %zu bytes of tensor "
                                "'%s'", path, bytes, l.v[i].name);
                break;
            }
            x->data = whole[nwhole++];
            st = emb_rows(t, i, 0, x->shape[0], x->data);
        }
        if (st == GRM_OK) st = kops->save(p->ckpt.inst, path, l.v, l.n, meta);
    }
    if (st != GRM_OK) goto out;
    if (!file) prune_ckpts(dir, kops->extension(p->ckpt.inst), p->set.ckpt_keep);
    if (!t->opts->quiet) grm__log(GRM_LOG_INFO, "grmhost", "checkpoint %s", path);
out:
    for (int64_t i = 0; i < nwhole; i++) free(whole[i]);
    free(whole);
    ckl_free(&l);
    free(steps_buf);
    free(meta);
    free(settings);
    return st;
}

/* A tensor of the checkpoint put together from its pieces (load_rows). */
typedef struct load_acc {
    grm_named_tensor t;       /* t.tensor.data owned (malloc), [rows] rows; t.name = name */
    char *name;               /* owned */
    int64_t rows, got;
} load_acc;

typedef struct load_ctx {
    grm__trainer *t;
    int64_t state[GRM__CKPT_STATE_N];
    int have_state, have_steps;
    int64_t *param_steps;
    const char *path;
    /* every tensor the pipeline needs, to be found exactly once (issue 25 item 4): the
     * store's, then each dense parameter, then its optimizer state */
    char **need;              /* [nneed] names, owned */
    uint8_t *seen;            /* [nneed] */
    int32_t nemb, nneed;
    /* load_rows: a tensor that arrives in pieces and is not the store's (or the store has
     * no load_rows) is put together here, then visited whole; several at once when
     * load_rows_interleaved interleaves their pieces */
    load_acc *acc;            /* [nacc] owned */
    int32_t nacc, cap_acc;
} load_ctx;

static void load_ctx_fini(load_ctx *c)
{
    for (int32_t i = 0; i < c->nacc; i++) {
        free(c->acc[i].t.tensor.data);
        free(c->acc[i].name);
    }
    free(c->acc);
    for (int32_t i = 0; i < c->nneed; i++) free(c->need[i]);
    free(c->need);
    free(c->seen);
    free(c->param_steps);
}

/* The names of every tensor this pipeline's checkpoint holds besides trainer.*. */
static grm_status load_ctx_init(load_ctx *c, grm__trainer *t, const char *path)
{
    ckpt_list l = { 0 };
    grm_status st;
    memset(c, 0, sizeof *c);
    c->t = t;
    c->path = path;
    c->param_steps = calloc((size_t)t->dn.nparams + 1, sizeof *c->param_steps);
    if (!c->param_steps) return grm_errorf(GRM_ENOMEM, "out of memory");
    for (int32_t k = 0;; k++) {
        grm_named_tensor nt;
        st = emb_tensor(t, k, &nt);
        if (st == GRM_ENOTFOUND) break;
        if (st != GRM_OK || (st = ckl_add(&l, "emb.", nt.name, nt.tensor)) != GRM_OK) goto out;
    }
    st = GRM_OK;
    c->nemb = (int32_t)l.n;
    for (int32_t i = 0; i < t->dn.nparams; i++) {
        grm__dparam *dp = &t->dn.params[i];
        if ((st = ckl_add(&l, "", dp->name, dp->shape)) != GRM_OK
            || (t->dn.state_floats && (st = ckl_add(&l, "optim.", dp->name, dp->shape))))
            goto out;
    }
    c->seen = calloc((size_t)l.n + 1, 1);
    if (!c->seen) {
        st = grm_errorf(GRM_ENOMEM, "out of memory");
        goto out;
    }
    c->need = l.names;   /* the names change hands; the list's tensors are dropped */
    c->nneed = (int32_t)l.n;
    l.names = NULL;
    l.n = 0;
out:
    ckl_free(&l);
    return st;
}

/* Mark `name` seen; a second copy of a tensor is refused (a forged or spliced file). */
static grm_status load_mark(load_ctx *c, const char *name, int32_t from, int32_t to)
{
    for (int32_t i = from; i < to; i++) {
        if (strcmp(c->need[i], name) != 0) continue;
        if (c->seen[i])
            return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' appears twice; the file is damaged "
                              "or was not written by grmhost", c->path, name);
        c->seen[i] = 1;
        return GRM_OK;
    }
    return GRM_OK;
}

static grm_status load_visit(void *user, const grm_named_tensor *nt)
{
    load_ctx *c = user;
    grm__trainer *t = c->t;
    const char *name = nt->name;
    int64_t numel = 1;
    grm_status st;
    for (int32_t d = 0; d < nt->tensor.ndim; d++) numel *= nt->tensor.shape[d];
    if (strncmp(name, "emb.", 4) == 0) {
        grm_named_tensor inner = { name + 4, nt->tensor };
        if ((st = load_mark(c, name, 0, c->nemb)) != GRM_OK) return st;
        st = t->sp.eops->load(t->p->emb.inst, &inner);
        if (st != GRM_OK) {
            grm_error_prefix("%s: tensor '%s': ", c->path, name);
            return st;
        }
        return GRM_OK;
    }
    if (strcmp(name, "trainer.state") == 0 && (numel == 4 || numel == 7
                                                || numel == GRM__CKPT_STATE_N)
        && nt->tensor.dtype == GRM_DTYPE_I64) {
        if (c->have_state)
            return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' appears twice; the file is damaged "
                              "or was not written by grmhost", c->path, name);
        memcpy(c->state, nt->tensor.data, (size_t)numel * sizeof(int64_t));
        if (numel < GRM__CKPT_STATE_N) c->state[GRM__ST_METRICS_AT] = -1;
        c->have_state = 1;
        return GRM_OK;
    }
    if (strcmp(name, "trainer.param_steps") == 0 && nt->tensor.dtype == GRM_DTYPE_I64) {
        if (numel != t->dn.nparams)
            return grm_errorf(GRM_EFORMAT, "%s: holds %lld dense parameters, this pipeline has "
                              "%d; it was written by a different model", c->path,
                              (long long)numel, t->dn.nparams);
        if (c->have_steps)
            return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' appears twice; the file is damaged "
                              "or was not written by grmhost", c->path, name);
        memcpy(c->param_steps, nt->tensor.data, (size_t)numel * sizeof(int64_t));
        c->have_steps = 1;
        return GRM_OK;
    }
    int optim = strncmp(name, "optim.", 6) == 0;
    const char *pname = optim ? name + 6 : name;
    for (int32_t i = 0; i < t->dn.nparams; i++) {
        grm__dparam *dp = &t->dn.params[i];
        if (strcmp(dp->name, pname) != 0) continue;
        int64_t want = optim ? t->dn.state_floats * dp->numel : dp->numel;
        if (numel != want || nt->tensor.dtype != GRM_DTYPE_F32)
            return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' has %lld elements, this pipeline "
                              "expects %lld; it was written by a different model", c->path,
                              name, (long long)numel, (long long)want);
        if ((st = load_mark(c, name, c->nemb, c->nneed)) != GRM_OK) return st;
        const float *v = nt->tensor.data;
        for (int64_t k = 0; !optim && k < want; k++)
            if (!isfinite(v[k]))   /* it said "lower the learning rates" at the first step */
                return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' holds %g at element %lld: the "
                                  "model had diverged when this checkpoint was saved", c->path,
                                  name, (double)v[k], (long long)k);
        memcpy(optim ? dp->state : dp->value, nt->tensor.data, (size_t)want * sizeof(float));
        return GRM_OK;
    }
    char shown[512];   /* a name read from the file */
    return grm_errorf(GRM_EFORMAT, "%s: tensor '%s' belongs to no part of this pipeline; it was "
                      "written by a different model (start over with --fresh)", c->path,
                      grm__printable(shown, sizeof shown, name));
}

/* grm_ckpt_piece_fn of load_rows: the store's pieces go to its load_rows (a tiered table
 * writes them to its file, never holding the table); any other tensor is put together
 * and visited whole. */
static grm_status load_piece(void *user, const grm_named_tensor *nt, int64_t row0, int64_t rows)
{
    load_ctx *c = user;
    grm__trainer *t = c->t;
    const grm_emb_ops *e = t->sp.eops;
    grm_status st;
    if (strncmp(nt->name, "emb.", 4) == 0 && GRM_HAS_OP(grm_emb_ops, e, load_rows)) {
        if (row0 == 0 && (st = load_mark(c, nt->name, 0, c->nemb)) != GRM_OK) return st;
        grm_named_tensor inner = { nt->name + 4, nt->tensor };
        st = e->load_rows(t->p->emb.inst, &inner, row0, rows);
        if (st != GRM_OK) grm_error_prefix("%s: tensor '%s': ", c->path, nt->name);
        return st;
    }
    if (row0 == 0 && nt->tensor.shape[0] == rows) return load_visit(user, nt);
    if ((st = grm__ckpt_piece_fits(c->path, nt, row0, rows)) != GRM_OK) return st;
    int32_t i = 0;
    while (i < c->nacc && strcmp(c->acc[i].name, nt->name) != 0) i++;
    const size_t row_bytes = grm__ckpt_row_bytes(&nt->tensor);
    if (row0 == 0 && i == c->nacc) {
        if (c->nacc == c->cap_acc) {
            const int32_t cap = c->cap_acc ? 2 * c->cap_acc : 4;
            load_acc *g = realloc(c->acc, (size_t)cap * sizeof *g);
            if (!g) return grm_errorf(GRM_ENOMEM, "%s: out of memory", c->path);
            c->acc = g;
            c->cap_acc = cap;
        }
        load_acc *a = &c->acc[c->nacc];
        memset(a, 0, sizeof *a);
        a->t = *nt;
        a->t.tensor.shape[0] = rows;
        a->rows = rows;
        a->t.name = a->name = strdup(nt->name);
        a->t.tensor.data = malloc(row_bytes * (size_t)rows + 1);
        c->nacc++;  // freed by load_ctx_fini if either allocation failed
        if (!a->t.tensor.data || !a->name)
            return grm_errorf(GRM_ENOMEM, "%s: out of memory for tensor '%s'", c->path,
                              nt->name);
    } else if (i == c->nacc || row0 != c->acc[i].got || rows != c->acc[i].rows) {
        // each tensor's pieces come in order from row 0 (grm/ckpt.h); a file that hands
        // them otherwise is damaged or forged
        return grm_errorf(GRM_EFORMAT, "%s: tensor '%s': rows from %lld of %lld arrive out of "
                          "order; the file is damaged or was not written by grmhost", c->path,
                          nt->name, (long long)row0, (long long)rows);
    }
    load_acc *a = &c->acc[i];
    memcpy((char *)a->t.tensor.data + (size_t)row0 * row_bytes, nt->tensor.data,
           row_bytes * (size_t)nt->tensor.shape[0]);
    a->got += nt->tensor.shape[0];
    if (a->got < rows) return GRM_OK;
    st = load_visit(user, &a->t);
    free(a->t.tensor.data);
    free(a->name);
    c->acc[i] = c->acc[--c->nacc];
    return st;
}

/* Whether the checkpoint is read a range of each tensor in turn: when both the format and
 * the store can (ABI 1.13), so a tiered table puts each of its rows together once (its
 * records are written once and never read back); else a tensor at a time. */
static int load_interleaved(const grm__trainer *t, const grm_ckpt_ops *kops)
{
    return GRM_HAS_OP(grm_ckpt_ops, kops, load_rows_interleaved)
           && GRM_HAS_OP(grm_emb_ops, t->sp.eops, load_rows)
           && (grm__emb_flags(t->p) & GRM_EMB_LOAD_INTERLEAVED);
}

/* The checkpoint a piece at a time (load_interleaved says in which order). */
static grm_status load_by_rows(grm__trainer *t, const grm_ckpt_ops *kops, void *kinst,
                               const char *path, load_ctx *c)
{
    if (load_interleaved(t, kops)) {
        grm__log(GRM_LOG_DEBUG, "grmhost", "%s: read a range of each tensor in turn "
                 "(load_rows_interleaved)", path);
        return kops->load_rows_interleaved(kinst, path, load_piece, c);
    }
    grm__log(GRM_LOG_DEBUG, "grmhost", "%s: read a tensor at a time (load_rows)", path);
    return kops->load_rows(kinst, path, load_piece, c);
}

/* A restored scalar outside [lo, hi]: the file is damaged or forged (its checksums can be
 * right and its meaning wrong), and the trainer would index memory with it. */
static grm_status out_of_range(const char *path, const char *what, int64_t v, int64_t lo,
                               int64_t hi)
{
    return grm_errorf(GRM_EFORMAT, "%s: trainer.state: %s is %lld, outside [%lld, %lld]; the "
                      "file is damaged or was not written for this pipeline", path, what,
                      (long long)v, (long long)lo, (long long)hi);
}

/* Every restored scalar against the pipeline (issue 25 item 1). */
static grm_status check_state(const grm__trainer *t, const load_ctx *c)
{
    const int64_t *s = c->state, step = s[GRM__ST_STEP];
    const int64_t most = INT64_MAX / 2 / (t->p->set.accumulate > 0 ? t->p->set.accumulate : 1);
    double best, win;
    memcpy(&best, &s[GRM__ST_BEST_SCORE], sizeof best);
    memcpy(&win, &s[GRM__ST_WIN_SUM], sizeof win);
    if (step < 0 || step > most) return out_of_range(c->path, "the step", step, 0, most);
    if (s[GRM__ST_EXAMPLES] < 0)
        return out_of_range(c->path, "the example count", s[GRM__ST_EXAMPLES], 0, INT64_MAX);
    if (s[GRM__ST_BATCH] < 1)
        return out_of_range(c->path, "the batch size", s[GRM__ST_BATCH], 1, INT64_MAX);
    if (s[GRM__ST_BEST_STEP] < 0 || s[GRM__ST_BEST_STEP] > step)
        return out_of_range(c->path, "the best step", s[GRM__ST_BEST_STEP], 0, step);
    if (s[GRM__ST_BAD_EVALS] < 0 || s[GRM__ST_BAD_EVALS] > step)
        return out_of_range(c->path, "the evaluations since the best", s[GRM__ST_BAD_EVALS], 0,
                            step);
    if (s[GRM__ST_STOPPED] < 0 || s[GRM__ST_STOPPED] > 1)
        return out_of_range(c->path, "the early-stop flag", s[GRM__ST_STOPPED], 0, 1);
    if (s[GRM__ST_METRICS_AT] < -1)
        return out_of_range(c->path, "the metrics file size", s[GRM__ST_METRICS_AT], -1,
                            INT64_MAX);
    if (s[GRM__ST_WIN_N] < 0 || s[GRM__ST_WIN_N] > step)
        return out_of_range(c->path, "the steps not yet logged", s[GRM__ST_WIN_N], 0, step);
    if ((s[GRM__ST_BEST_STEP] > 0 && !isfinite(best)) || !isfinite(win))
        return grm_errorf(GRM_EFORMAT, "%s: trainer.state: a non-finite score or loss; the file "
                          "is damaged or was not written for this pipeline", c->path);
    for (int32_t i = 0; i < t->dn.nparams; i++)
        if (c->param_steps[i] < 0 || c->param_steps[i] > step) {
            char what[600];
            snprintf(what, sizeof what, "the optimizer step count of '%s'",
                     t->dn.params[i].name);
            return out_of_range(c->path, what, c->param_steps[i], 0, step);
        }
    return GRM_OK;
}

/* The plugin of each section, as the checkpoint's metadata records it (save_ckpt_as),
 * against the INI's: another plugin is another model, refused by name; another pipeline
 * name or seed is warned about (the run continues, but not as the one that wrote it). */
static grm_status check_meta(const grm__trainer *t, const load_ctx *c,
                             const grm_ckpt_ops *kops, void *kinst)
{
    const grm__pipeline *p = t->p;
    char *meta, key[600], name[512];
    if (grm__ckpt_read_meta(kops, kinst, c->path, &meta) != GRM_OK) return GRM_OK;
    grm_status st = GRM_OK;
    const char *plugins = strstr(meta, "\"plugins\":{");
    for (int32_t i = 0; plugins && i < nstages(p); i++) {
        const grm__stage *sg = stage_at(p, i);
        snprintf(key, sizeof key, "\"%s\":\"", sg->label);
        const char *at = strstr(plugins, key);
        if (!at) continue;
        at += strlen(key);
        const char *end = strchr(at, '"');
        const char *want = sg->plugin->info->name;
        if (end && ((size_t)(end - at) != strlen(want) || strncmp(at, want, strlen(want)))) {
            st = grm_errorf(GRM_EFORMAT, "%s: was written with [%s] plugin = %.*s, the INI "
                            "has %s; it is another model (restore the INI, or pass --fresh "
                            "to start over)", c->path, sg->label, (int)(end - at), at, want);
            goto out;
        }
    }
    size_t slen;
    const char *settings = grm__ckpt_meta_settings(meta, &slen);
    if (settings) compare_settings(c->path, settings, slen, p);
    grm__json_escape(name, sizeof name, p->set.name);
    snprintf(key, sizeof key, "\"pipeline\":\"%s\",", name);
    if (strstr(meta, "\"pipeline\":") && !strstr(meta, key))
        grm__log(GRM_LOG_WARN, "grmhost", "%s: was written by another pipeline than [pipeline] "
                 "name = %s (its metadata: %.200s)", c->path, p->set.name, meta);
    if (c->state[GRM__ST_SEED] != p->set.seed)
        grm__log(GRM_LOG_WARN, "grmhost", "%s: was written with [train] seed = %lld, the INI "
                 "has %lld: the examples, negatives and dropout differ from the original run",
                 c->path, (long long)c->state[GRM__ST_SEED], (long long)p->set.seed);
out:
    free(meta);
    return st;
}

/* Load checkpoint `path`: this rank's own, or (owned_only) one written by rank r mod N of N
 * ranks, of which only the rows this rank owns are kept (the modulo scheme, reshard.h). */
static grm_status load_ckpt_as(grm__trainer *t, const char *path, int owned_only)
{
    const grm_ckpt_ops *kops = t->p->ckpt.plugin->info->ops;
    void *kinst = t->p->ckpt.inst;
    grm__ckpt_fmt fmt = { 0 };
    const char *dot = strrchr(path, '.');
    if (dot && strcmp(dot + 1, kops->extension(kinst)) != 0) {
        /* written in another format than [checkpoint] plugin's: read it with that one */
        grm_status fst = grm__ckpt_fmt_for(t->p->reg, path, &fmt);
        if (fst != GRM_OK) return fst;
        kops = fmt.ops;
        kinst = fmt.inst;
    }
    load_ctx c;
    grm_status st = load_ctx_init(&c, t, path);
    if (st != GRM_OK) {
        load_ctx_fini(&c);
        grm__ckpt_fmt_fini(&fmt);
        return st;
    }
    int64_t kept = 0, dropped = 0;
    const int by_rows = GRM_HAS_OP(grm_ckpt_ops, kops, load_rows);
    st = owned_only && by_rows
        ? grm__reshard_load_owned_rows(t->p, kops, kinst, path, t->rank, t->nranks,
                                       load_interleaved(t, kops), load_piece, &c, &kept,
                                       &dropped)
        : owned_only
        ? grm__reshard_load_owned(t->p, kops, kinst, path, t->rank, t->nranks,
                                  load_visit, &c, &kept, &dropped)
        : by_rows ? load_by_rows(t, kops, kinst, path, &c)
                  : kops->load(kinst, path, load_visit, &c);
    if (st == GRM_OK && owned_only)
        grm__log(GRM_LOG_INFO, "grmhost", "%s: kept the %lld keyed rows this rank owns, "
                 "left %lld to the other ranks", path, (long long)kept, (long long)dropped);
    if (st == GRM_OK && !c.have_state)
        st = grm_errorf(GRM_EFORMAT, "%s: has no trainer.state tensor; not a grmhost training "
                        "checkpoint", path);
    if (st == GRM_OK && !c.have_steps)
        st = grm_errorf(GRM_EFORMAT, "%s: has no trainer.param_steps tensor; the file is "
                        "damaged or was not written by grmhost", path);
    int32_t missing = 0, first = -1;
    for (int32_t i = 0; st == GRM_OK && i < c.nneed; i++)
        if (!c.seen[i] && missing++ == 0) first = i;
    if (missing)
        st = grm_errorf(GRM_EFORMAT, "%s: has no tensor '%s'%s, which this pipeline needs; it "
                        "was written by another pipeline, or is damaged", path, c.need[first],
                        missing > 1 ? " (nor some others)" : "");
    if (st == GRM_OK) st = check_state(t, &c);
    if (st == GRM_OK) st = check_meta(t, &c, kops, kinst);
    if (st == GRM_OK) {
        const int64_t *s = c.state;
        t->step = s[GRM__ST_STEP];
        t->ck.best_step = s[GRM__ST_BEST_STEP];
        memcpy(&t->ck.best_score, &s[GRM__ST_BEST_SCORE], sizeof(double));
        t->ck.bad_evals = s[GRM__ST_BAD_EVALS];
        t->ck.stopped = (int)s[GRM__ST_STOPPED];
        t->ck.metrics_at = s[GRM__ST_METRICS_AT];
        t->rep.loss_n = s[GRM__ST_WIN_N];
        memcpy(&t->rep.loss_sum, &s[GRM__ST_WIN_SUM], sizeof(double));
        for (int32_t i = 0; i < t->dn.nparams; i++) t->dn.params[i].steps = c.param_steps[i];
        if (s[GRM__ST_EXAMPLES] != t->plan.nex_all || s[GRM__ST_BATCH] != t->p->set.batch_size)
            grm__log(GRM_LOG_WARN, "grmhost", "%s: written with %lld examples and batch size "
                     "%lld, now %lld and %lld: the example order differs from the original run",
                     path, (long long)s[GRM__ST_EXAMPLES], (long long)s[GRM__ST_BATCH],
                     (long long)t->plan.nex_all, (long long)t->p->set.batch_size);
    }
    load_ctx_fini(&c);
    grm__ckpt_fmt_fini(&fmt);
    return st;
}

grm_status grm__ckpt_load(grm__trainer *t, const char *path)
{
    return load_ckpt_as(t, path, 0);
}

/* The step of checkpoint file `path` (its name step-S.ext), or -1. */
static int64_t step_of(const char *path, const char *ext)
{
    const char *base = strrchr(path, '/');
    int64_t s;
    return path[0] && grm__ckpt_is_step_name(base ? base + 1 : path, ext, &s) ? s : -1;
}

/* Resume from the newest checkpoint: this job's own, or, when [checkpoint] dir holds a newer
 * step written by N other ranks, that one. N -> M = kN is read directly by MTGRBoost §5.2's
 * modulo scheme (reshard.h: rank r reads rank r mod N's file and keeps its own rows); other
 * world sizes are refused with `grmhost reshard` as the fix. Every rank decides alike: the
 * steps compared are the minimum (the step every rank has) and maximum over the ranks. */
grm_status grm__ckpt_resume(grm__trainer *t)
{
    const grm__pipeline *p = t->p;
    const grm_ckpt_ops *kops = p->ckpt.plugin->info->ops;
    const char *ext = kops->extension(p->ckpt.inst);
    const grm_comm_handle *c = &p->comm_handle;
    const int32_t N = t->ck.other, M = t->nranks;
    char path[4096], src[4096];
    grm_status st = newest_any(t, t->ck.dir, path, sizeof path);
    if (st != GRM_OK) return st;
    const char *pdot = strrchr(path, '.');
    int64_t own = step_of(path, pdot ? pdot + 1 : ext), other = -1, other_max = -1;
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
    if ((st = grm__ckpt_load(t, path)) != GRM_OK) {
        grm_error_suffix("; to resume from the checkpoint before it, move this one away, or "
                         "pass --fresh to start over");
        return st;
    }
    if (t->total_steps > 0 && t->step > t->total_steps)
        return grm_errorf(GRM_EINVAL, "%s: is at step %lld, past the %lld steps of this "
                          "pipeline's [train] steps or epochs; raise them to train on, or pass "
                          "--fresh to start over", path, (long long)t->step,
                          (long long)t->total_steps);
    grm__log(GRM_LOG_INFO, "grmhost", "resuming from %s at step %lld (use --fresh to start "
             "over)", path, (long long)t->step);
    return GRM_OK;
}

/* Restore early stopping's best model: this rank's best.ext, or, when this job resumed from
 * N other ranks before it saved a best of its own, rank r mod N's (modulo scheme). */
grm_status grm__ckpt_load_best(grm__trainer *t, char *path, size_t cap)
{
    const grm__pipeline *p = t->p;
    const grm_ckpt_ops *kops = p->ckpt.plugin->info->ops;
    const char *ext = kops->extension(p->ckpt.inst);
    snprintf(path, cap, "%s/best.%s", t->ck.dir, ext);
    const int32_t N = t->ck.other;
    if (access(path, R_OK) == 0 || !N || !grm__reshard_nests(p->set.sparse_group, N, t->nranks))
        return grm__ckpt_load(t, path);
    char src[4096];
    grm__reshard_source_dir(src, sizeof src, p->set.ckpt_dir, t->rank, N);
    snprintf(path, cap, "%s/best.%s", src, ext);
    return load_ckpt_as(t, path, 1);
}

grm_status grm__ckpt_save(grm__trainer *t)
{
    double t0 = now_s();
    grm_status st = grm__async_flush(t);
    if (st == GRM_OK) st = save_ckpt_as(t, NULL);
    t->rep.t_ckpt += now_s() - t0;
    return st;
}

/* Early stopping: record a validation score; keep the model when it is the best so far.
 * Sets *stop when the patience is exhausted. */
grm_status grm__ckpt_track_best(grm__trainer *t, double score, int *stop)
{
    int64_t patience = t->p->set.early_stop;
    *stop = 0;
    if (patience <= 0) return GRM_OK;
    if (t->ck.best_step == 0 || score > t->ck.best_score) {
        t->ck.best_score = score;
        t->ck.best_step = t->step;
        t->ck.bad_evals = 0;
        return save_ckpt_as(t, "best");
    }
    if (++t->ck.bad_evals >= patience) {
        grm__log(GRM_LOG_INFO, "grmhost", "early stop at step %lld: no better validation "
                 "score in %lld runs (best %.4f at step %lld)", (long long)t->step,
                 (long long)t->ck.bad_evals, t->ck.best_score, (long long)t->ck.best_step);
        *stop = 1;
        t->ck.stopped = 1;   /* saved with the final checkpoint: the run is finished */
    }
    return GRM_OK;
}

/* ---- entry points ---- */

/* This rank's checkpoint directory: [checkpoint] dir itself on one rank, dir/rank-R-of-N
 * with several (each rank writes the rows it owns and its copy of the dense state). A
 * directory written by another world size is refused, with `grmhost reshard` as the fix
 * (core/reshard.c rewrites it for this world size and moves the old files aside). */
/* The pid a temporary "<name>.tmp.<pid>" names, or -1. */
static long tmp_writer(const char *name)
{
    const char *at = strstr(name, ".tmp.");
    char *end;
    if (!at) return -1;
    long pid = strtol(at + 5, &end, 10);
    return end != at + 5 && *end == '\0' && pid > 0 ? pid : -1;
}

/* A save killed midway (kill -9, power loss) leaves its "<name>.tmp.<pid>" behind; resume
 * never reads one, but they would pile up. Only names of this trainer's checkpoints, and
 * only those whose writer is gone: a process of that pid on this host may still be writing
 * (issue 25 item 7: a second trainer deleted the first's in-flight file). */
void grm__ckpt_remove_stale(const char *dir)
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
        long pid = tmp_writer(e->d_name);
        if (pid > 0 && pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) {
            grm__log(GRM_LOG_WARN, "grmhost", "left %s: process %ld, which may be writing it, "
                     "still runs", path, pid);
            continue;
        }
        if (unlink(path) == 0)
            grm__log(GRM_LOG_INFO, "grmhost", "removed %s, left by an interrupted save", path);
    }
    closedir(d);
}

/* ---- the lock of a checkpoint directory (issue 25 item 7) ---- */

#define LOCK_NAME ".grmhost.lock"

/* Take dir's lock for this process: an flock(2) on dir/.grmhost.lock, which the kernel
 * releases when the process ends however it ends, holding "pid PID host HOST" while held
 * (empty once released). A lock held by a live process refuses the run, naming it; a file
 * left non-empty by a process that died (kill -9) is a stale lock, taken over with a note.
 * flock is local to a host: on NFS the pid and host in the file are what is left. */
grm_status grm__ckpt_lock(grm__trainer *t, const char *dir)
{
    char path[4096 + 32], held[256] = "", host[128] = "?";
    grm_status st;
    t->ck.lock_fd = -1;
    if ((st = grm__ckpt_make_dirs(dir)) != GRM_OK) return st;
    snprintf(path, sizeof path, "%s/%s", dir, LOCK_NAME);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return grm_errorf(GRM_EIO, "%s: cannot open the lock of the checkpoint directory: %s",
                          path, strerror(errno));
    ssize_t n = pread(fd, held, sizeof held - 1, 0);
    held[n > 0 ? n : 0] = '\0';
    held[strcspn(held, "\n")] = '\0';
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return grm_errorf(GRM_EINVAL, "%s: in use by another grmhost (%s, lock file %s); "
                              "wait for it to end, or give this run another [checkpoint] dir",
                              dir, held[0] ? held : "pid unknown", path);
        return grm_errorf(GRM_EIO, "%s: cannot lock: %s", path, strerror(e));
    }
    if (held[0])
        grm__log(GRM_LOG_WARN, "grmhost", "%s: taking over a stale lock (%s, which ended "
                 "without releasing it)", path, held);
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    char mine[256];
    int len = snprintf(mine, sizeof mine, "pid %ld host %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, mine, (size_t)len, 0) != len) {
        const int e = errno;
        close(fd);
        return grm_errorf(GRM_EIO, "%s: cannot write the lock: %s", path, strerror(e));
    }
    t->ck.lock_fd = fd;
    return GRM_OK;
}

void grm__ckpt_unlock(grm__trainer *t)
{
    if (t->ck.lock_fd < 0) return;
    if (ftruncate(t->ck.lock_fd, 0) != 0) { /* the flock is released all the same */ }
    close(t->ck.lock_fd);
    t->ck.lock_fd = -1;
}

/* --fresh (issue 25 item 2): an earlier run's checkpoints would prune the new run's (keep
 * counts every step-S, and the old steps are newer) and be resumed by the next `train`.
 * They are moved, never deleted, to dir/replaced-by-fresh-YYYYmmdd-HHMMSS[-K]/. */
grm_status grm__ckpt_fresh(const char *dir)
{
    DIR *d = opendir(dir);
    char aside[4096], from[4096 + 256], to[8192 + 256], stamp[32];
    int64_t moved = 0;
    if (!d) return GRM_OK;
    time_t now = time(NULL);
    struct tm tmv;
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", gmtime_r(&now, &tmv));
    snprintf(aside, sizeof aside, "%s/replaced-by-fresh-%s", dir, stamp);
    for (int k = 2; access(aside, F_OK) == 0; k++)
        snprintf(aside, sizeof aside, "%s/replaced-by-fresh-%s-%d", dir, stamp, k);
    struct dirent *e;
    grm_status st = GRM_OK;
    while ((e = readdir(d)) != NULL) {
        int r, n;
        const char *nm = e->d_name;
        if (strncmp(nm, "step-", 5) != 0 && strncmp(nm, "best.", 5) != 0
            && !grm__ckpt_is_rank_dir(nm, &r, &n) && strncmp(nm, "resharded-from-", 15) != 0)
            continue;
        if (moved == 0 && mkdir(aside, 0777) != 0) {
            st = grm_errorf(GRM_EIO, "%s: cannot create it to move the earlier run's "
                            "checkpoints aside: %s", aside, strerror(errno));
            break;
        }
        snprintf(from, sizeof from, "%s/%s", dir, nm);
        snprintf(to, sizeof to, "%s/%s", aside, nm);
        if (rename(from, to) != 0) {
            st = grm_errorf(GRM_EIO, "%s: cannot move it to %s: %s", from, aside,
                            strerror(errno));
            break;
        }
        moved++;
    }
    closedir(d);
    if (moved)
        grm__log(GRM_LOG_WARN, "grmhost", "--fresh: moved the %lld checkpoint files of the "
                 "earlier run in %s to %s (delete it when it is not needed)", (long long)moved,
                 dir, aside);
    return st;
}

grm_status grm__ckpt_dir_of(grm__trainer *t)
{
    const char *dir = t->p->set.ckpt_dir;
    t->ck.dir[0] = 0;
    t->ck.other = 0;
    if (!dir[0]) return GRM_OK;
    grm__ckpt_rank_dir(t->ck.dir, sizeof t->ck.dir, dir, t->rank, t->nranks);
    if (t->opts->fresh) return GRM_OK;
    DIR *d = opendir(dir);
    if (!d) return GRM_OK;
    struct dirent *e;
    int other = 0, top = 0, several = 0;
    while ((e = readdir(d)) != NULL) {
        int r, n;
        if (grm__ckpt_is_rank_dir(e->d_name, &r, &n) && n != t->nranks) {
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
    t->ck.other = other ? other : top;
    return GRM_OK;
}

/* eval --checkpoint DIR|FILE: a file as it is; a directory's newest step-S checkpoint, with
 * several ranks each rank's own DIR/rank-R-of-N. */
grm_status grm__ckpt_eval_path(grm__trainer *t, const char *given, char *path, size_t cap)
{
    const grm_ckpt_ops *kops = t->p->ckpt.plugin->info->ops;
    const char *ext = kops->extension(t->p->ckpt.inst);
    struct stat sb;
    if (stat(given, &sb) != 0) return grm_errorf(GRM_EIO, "%s: %s", given, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(path, cap, "%s", given);
        return GRM_OK;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", given);
    if (t->nranks > 1) {
        grm__ckpt_rank_dir(dir, sizeof dir, given, t->rank, t->nranks);
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return grm_errorf(GRM_ENOTFOUND, "%s: no %s here: %d ranks evaluate the "
                              "checkpoints %d ranks wrote (or `grmhost reshard` them)", given,
                              dir + strlen(given) + 1, t->nranks, t->nranks);
    }
    grm_status st = newest_any(t, dir, path, cap);
    if (st == GRM_OK && !path[0])
        st = grm_errorf(GRM_ENOTFOUND, "%s: no step-*.%s checkpoint in this directory", dir, ext);
    return st;
}

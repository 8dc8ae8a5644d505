/* plugins/ckpt-safetensors/plugin.c - glue of ckpt-safetensors (DESIGN.md §3, "checkpoint
 * format"): the tensors and metadata ckpt-grm holds, in Hugging Face's SafeTensors layout
 * so Python's `safetensors` package opens grm checkpoints and exports. Entry, descriptor,
 * parameters, ops table; the format lives in st_parse.c, st_file.c and st_save.c, its
 * layout and checks in README.md. */
#include <stdlib.h>
#include <string.h>

#include <grm/ckpt.h>
#include <grm/plugin.h>

#include "st.h"

static const grm_host_api *st_host;

typedef struct st_inst {
    int64_t shard_bytes;       /* 0: one file */
} st_inst;

static int st_host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

static grm_status st_create(const void *config, void **inst)
{
    static const st_config defaults = { 4294967296LL };
    const st_config *cfg = config != NULL ? config : &defaults;

    if (inst == NULL)
        return st_host->errorf(GRM_EINVAL, "ckpt-safetensors: create: inst is NULL");
    *inst = NULL;
    if (cfg->shard_bytes < 0)
        return st_host->errorf(GRM_EINVAL, "ckpt-safetensors: shard_bytes = %lld; expected 0 "
                               "(one file) or more", (long long)cfg->shard_bytes);
    if (!st_host_is_little_endian())
        return st_host->errorf(GRM_ENOTSUP, "ckpt-safetensors: this host is big-endian; "
                               "safetensors stores little-endian tensors");
    st_inst *s = calloc(1, sizeof(*s));
    if (s == NULL) return st_host->errorf(GRM_ENOMEM, "ckpt-safetensors: out of memory");
    s->shard_bytes = cfg->shard_bytes;
    *inst = s;
    return GRM_OK;
}

static void st_destroy(void *inst)
{
    free(inst);
}

static const char *st_extension(void *inst)
{
    (void)inst;
    return "safetensors";
}

static grm_status st_save_op(void *inst, const char *path, const grm_named_tensor *tensors,
                             int64_t n, const char *meta)
{
    const st_inst *s = inst;
    if (s == NULL) return st_host->errorf(GRM_EINVAL, "ckpt-safetensors: save: inst is NULL");
    return st_save(st_host, s->shard_bytes, path, tensors, n, meta);
}

static grm_status st_load_op(void *inst, const char *path, grm_ckpt_visit_fn visit, void *user)
{
    st_file f;
    grm_status st;

    if (inst == NULL || path == NULL || visit == NULL)
        return st_host->errorf(GRM_EINVAL, "ckpt-safetensors: load: inst, path or visit is "
                               "NULL");
    if ((st = st_open(st_host, path, &f, 0)) != GRM_OK) return st;
    for (int64_t i = 0; i < f.n && st == GRM_OK; i++) {
        grm_named_tensor t;
        st_tensor(&f, i, &t, NULL);
        st = visit(user, &t);
    }
    st_close(&f);
    return st;
}

static grm_status st_save_rows_op(void *inst, const char *path, const grm_named_tensor *tensors,
                                  int64_t n, const char *meta, grm_ckpt_rows_fn rows,
                                  void *user)
{
    const st_inst *s = inst;
    if (s == NULL)
        return st_host->errorf(GRM_EINVAL, "ckpt-safetensors: save_rows: inst is NULL");
    return st_save_rows(st_host, s->shard_bytes, path, tensors, n, meta, rows, user);
}

/* Tensor i of f to visit: whole, or above ST_PIECE_BYTES in pieces of rows pointing into
 * the mapping, each piece's pages released once visited, as the verification released
 * them: the resident set stays at about a piece. */
static grm_status st_hand_over(st_file *f, int64_t i, grm_ckpt_piece_fn visit, void *user)
{
    grm_named_tensor t;
    const st_entry *e;
    grm_status st = GRM_OK;
    st_tensor(f, i, &t, &e);
    const size_t bytes = (size_t)(e->end - e->begin);
    if (t.tensor.ndim < 1 || bytes <= ST_PIECE_BYTES || t.tensor.shape[0] < 2) {
        st = visit(user, &t, 0, t.tensor.ndim >= 1 ? t.tensor.shape[0] : 1);
        if (bytes > 0) st_unneed(f, t.tensor.data, bytes);
        return st;
    }
    const int64_t rows = t.tensor.shape[0];
    const size_t rb = bytes / (size_t)rows;
    const int64_t per = ckpt_piece_rows(rb, rows);
    const char *data = t.tensor.data;
    for (int64_t r0 = 0; r0 < rows && st == GRM_OK; r0 += per) {
        grm_named_tensor piece = t;
        piece.tensor.shape[0] = rows - r0 < per ? rows - r0 : per;
        piece.tensor.data = (void *)(data + (size_t)r0 * rb);
        st = visit(user, &piece, r0, rows);
        st_unneed(f, piece.tensor.data, (size_t)piece.tensor.shape[0] * rb);
    }
    return st;
}

/* Rows of tensor t a range may hold: 0 for one handed over whole (no dims, no bytes, one
 * row). */
static int64_t st_rows_of(const grm_named_tensor *t, const st_entry *e)
{
    return t->tensor.ndim >= 1 && t->tensor.shape[0] >= 2 && e->end > e->begin
        ? t->tensor.shape[0] : 0;
}

/* The tensors of as many rows (two or more) of f a range of all of them at a time
 * (ckpt_group_rows, the ranges save_rows wrote them in), each range of each in turn,
 * pointing into the mapping: a store whose rows live in a file (emb-dynamic's tiered
 * tables) puts each of its records together once. Every other tensor as st_hand_over
 * hands it over, in the order of the header; a group where its first tensor is. */
static grm_status st_hand_over_groups(st_file *f, grm_ckpt_piece_fn visit, void *user)
{
    int64_t *rows = malloc((size_t)(f->n > 0 ? f->n : 1) * sizeof(*rows));
    uint8_t *done = calloc((size_t)(f->n > 0 ? f->n : 1), 1);
    grm_status st = GRM_OK;
    if (rows == NULL || done == NULL)
        st = st_host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory", f->path);
    for (int64_t i = 0; i < f->n && st == GRM_OK; i++) {
        grm_named_tensor t;
        const st_entry *e;
        st_tensor(f, i, &t, &e);
        rows[i] = st_rows_of(&t, e);
    }
    for (int64_t i = 0; i < f->n && st == GRM_OK; i++) {
        if (done[i]) continue;
        int64_t members = 0;
        size_t all = 0;
        for (int64_t j = i; j < f->n && rows[i] > 0; j++) {
            if (done[j] || rows[j] != rows[i]) continue;
            grm_named_tensor t;
            const st_entry *e;
            st_tensor(f, j, &t, &e);
            all += (size_t)(e->end - e->begin) / (size_t)rows[i];
            members++;
        }
        if (members < 2) {
            done[i] = 1;
            st = st_hand_over(f, i, visit, user);
            continue;
        }
        const int64_t n = rows[i], per = ckpt_group_rows(all, n);
        for (int64_t r0 = 0; r0 < n && st == GRM_OK; r0 += per) {
            for (int64_t j = i; j < f->n && st == GRM_OK; j++) {
                if (done[j] || rows[j] != n) continue;
                grm_named_tensor t;
                const st_entry *e;
                st_tensor(f, j, &t, &e);
                const size_t rb = (size_t)(e->end - e->begin) / (size_t)n;
                grm_named_tensor piece = t;
                piece.tensor.shape[0] = n - r0 < per ? n - r0 : per;
                piece.tensor.data = (char *)t.tensor.data + (size_t)r0 * rb;
                st = visit(user, &piece, r0, n);
                st_unneed(f, piece.tensor.data, (size_t)piece.tensor.shape[0] * rb);
            }
        }
        for (int64_t j = i; j < f->n; j++) done[j] |= rows[j] == n;
    }
    free(rows);
    free(done);
    return st;
}

/* load_rows (a tensor at a time) and load_rows_interleaved (grouped): every check is done
 * before the first piece (st_open). */
static grm_status st_load_pieces(void *inst, const char *path, grm_ckpt_piece_fn visit,
                                 void *user, int interleaved)
{
    st_file f;
    grm_status st;

    if (inst == NULL || path == NULL || visit == NULL)
        return st_host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: inst, path or visit is NULL",
                               interleaved ? "load_rows_interleaved" : "load_rows");
    if ((st = st_open(st_host, path, &f, 1)) != GRM_OK) return st;
    if (interleaved) {
        st = st_hand_over_groups(&f, visit, user);
    } else {
        for (int64_t i = 0; i < f.n && st == GRM_OK; i++) st = st_hand_over(&f, i, visit, user);
    }
    st_close(&f);
    return st;
}

static grm_status st_load_rows_op(void *inst, const char *path, grm_ckpt_piece_fn visit,
                                  void *user)
{
    return st_load_pieces(inst, path, visit, user, 0);
}

static grm_status st_load_rows_interleaved_op(void *inst, const char *path,
                                              grm_ckpt_piece_fn visit, void *user)
{
    return st_load_pieces(inst, path, visit, user, 1);
}

static grm_status st_meta_op(void *inst, const char *path, char *buf, size_t cap)
{
    st_file f;
    grm_status st;

    if (inst == NULL || path == NULL || (buf == NULL && cap > 0))
        return st_host->errorf(GRM_EINVAL, "ckpt-safetensors: meta: inst, path or buf is NULL");
    if ((st = st_open(st_host, path, &f, 1)) != GRM_OK) return st;
    // A file Python wrote has no grm metadata: it reads as the empty object.
    const char *m = f.meta != NULL ? f.meta : "{}";
    const size_t len = strlen(m);
    if (len >= cap)
        st = st_host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: metadata of %zu bytes does "
                             "not fit in a buffer of %zu; pass a larger one", path, len, cap);
    else
        memcpy(buf, m, len + 1);
    st_close(&f);
    return st;
}

static const grm_param_decl st_params[] = {
    GRM_PARAM_DECL_INT(st_config, shard_bytes, "4294967296", GRM_PARAM_RANGE(0, 9.2e18),
                       "tensor bytes per file; above it the tensors go to shards with an "
                       "index (0: always one file)"),
    GRM_PARAM_DECL_END
};

static const grm_ckpt_ops st_ops = {
    .struct_size = sizeof(grm_ckpt_ops),
    .create = st_create,
    .destroy = st_destroy,
    .extension = st_extension,
    .save = st_save_op,
    .load = st_load_op,
    .meta = st_meta_op,
    .save_rows = st_save_rows_op,
    .load_rows = st_load_rows_op,
    .load_rows_interleaved = st_load_rows_interleaved_op,
};

static const grm_plugin_info st_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_CKPT,
    .name = "ckpt-safetensors",
    .version = "1.2.0",
    .description = "SafeTensors checkpoint (Python's safetensors reads it), XXH64-checked, "
                   "sharded above a size",
    .ops = &st_ops,
    .params = st_params,
    .config_size = sizeof(st_config),
};

GRM_PLUGIN_DEFINE(st_host, &st_info);

/* tests/plugins/emb-legacy-keyed.c - a keyed store as ABI 1.9 wrote them: emb-dynamic's code
 * behind a descriptor of ABI 1.9, whose grm_emb_ops ends before tensor_rows (1.10). The host
 * then reads such a store's tables whole through tensors() and gathers their rows by key
 * (grm__table_src, core/recommend.c: table_open_whole) for export and incremental export.
 * Its tensors() hands each table's rows out in reverse order of id, as a hash store that
 * lists its rows in slot order would: the host's gather must sort them by key.
 * tests/test-export-delta.sh trains through it and through emb-dynamic and expects the same
 * exported tensors. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <grm/grm.h>

/* emb-dynamic's own entry gives way to this file's; its descriptor is kept, unused */
#undef GRM_PLUGIN_DEFINE
#define GRM_PLUGIN_DEFINE(host_var, ...)                                                       \
    static const grm_plugin_info *const lk_replaced[] __attribute__((unused)) = { __VA_ARGS__ }
#include "../../plugins/emb-dynamic/plugin.c"

/* The reversed copies handed out, one per (store, tensor index), each kept until the next
 * tensors() call for that index or the store's destroy (the borrowing rule of grm/emb.h). */
enum { LK_MAX_BUFS = 64 };
static struct lk_buf {
    const void *inst;
    int32_t index;
    void *data;
} lk_bufs[LK_MAX_BUFS];
static pthread_mutex_t lk_lock = PTHREAD_MUTEX_INITIALIZER;

/* The slot of (inst, index), its old copy freed; NULL when all are taken. */
static struct lk_buf *lk_buf_for(const void *inst, int32_t index)
{
    struct lk_buf *free_slot = NULL;
    for (int i = 0; i < LK_MAX_BUFS; i++) {
        struct lk_buf *b = &lk_bufs[i];
        if (b->inst == inst && b->index == index) {
            free(b->data);
            b->data = NULL;
            return b;
        }
        if (b->inst == NULL && free_slot == NULL) free_slot = b;
    }
    if (free_slot != NULL) free_slot->inst = inst, free_slot->index = index;
    return free_slot;
}

static grm_status lk_tensors(void *inst, int32_t index, grm_named_tensor *out)
{
    grm_status st = ed_tensors(inst, index, out);
    if (st != GRM_OK) return st;
    const char *dot = strrchr(out->name, '.');
    grm_tensor *x = &out->tensor;
    if (dot == NULL || strcmp(dot, ".counters") == 0 || x->ndim < 1 || x->shape[0] < 2)
        return GRM_OK;
    size_t row = grm_dtype_size(x->dtype);
    for (int32_t d = 1; d < x->ndim; d++) row *= (size_t)x->shape[d];
    const int64_t R = x->shape[0];
    pthread_mutex_lock(&lk_lock);
    struct lk_buf *b = lk_buf_for(inst, index);
    char *rev = b != NULL ? malloc((size_t)R * row) : NULL;
    if (b != NULL) b->data = rev;
    pthread_mutex_unlock(&lk_lock);
    if (rev == NULL)
        return ed_host->errorf(GRM_ENOMEM, "emb-legacy-keyed: no room to reverse '%s'",
                               out->name);
    for (int64_t r = 0; r < R; r++)
        memcpy(rev + (size_t)(R - 1 - r) * row, (const char *)x->data + (size_t)r * row, row);
    x->data = rev;
    return GRM_OK;
}

static void lk_destroy(void *inst)
{
    pthread_mutex_lock(&lk_lock);
    for (int i = 0; i < LK_MAX_BUFS; i++) {
        if (lk_bufs[i].inst != inst) continue;
        free(lk_bufs[i].data);
        lk_bufs[i] = (struct lk_buf){ 0 };
    }
    pthread_mutex_unlock(&lk_lock);
    ed_destroy(inst);
}

static const grm_emb_ops lk_ops = {
    .struct_size = offsetof(grm_emb_ops, tensor_rows),
    .create = ed_create,
    .destroy = lk_destroy,
    .lookup = ed_lookup,
    .update = ed_update,
    .tensors = lk_tensors,
    .load = ed_load,
    .stats = ed_stats,
    .flags = GRM_EMB_ANY_ID,
    .prefetch = ed_prefetch,
};

static const grm_plugin_info lk_info = {
    .abi_major = GRM_ABI_MAJOR,
    .abi_minor = 9,
    .struct_size = (uint32_t)sizeof(grm_plugin_info),
    .kind = GRM_KIND_EMB,
    .name = "emb-legacy-keyed",
    .version = "1.9.0",
    .description = "emb-dynamic behind an ABI 1.9 descriptor: no tensor_rows or load_rows "
                   "(a test fixture)",
    .ops = &lk_ops,
    .params = ed_params,
    .config_size = sizeof(ed_config),
};

GRM_PLUGIN_EXPORT const grm_plugin_info *const *grm_plugin_entry(const grm_host_api *host)
{
    static const grm_plugin_info *const list[] = { &lk_info, NULL };
    ed_host = host;
    return list;
}

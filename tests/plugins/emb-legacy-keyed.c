/* tests/plugins/emb-legacy-keyed.c - a keyed store as ABI 1.9 wrote them: emb-dynamic's code
 * behind a descriptor of ABI 1.9, whose grm_emb_ops ends before tensor_rows (1.10). The host
 * then reads such a store's tables whole through tensors() and gathers their rows by key
 * (grm__table_src, core/recommend.c: table_open_whole) for export and incremental export. tests/test-export-delta.sh trains through it and through
 * emb-dynamic and expects the same exported tensors. */
#include <stddef.h>

#include <grm/grm.h>

/* emb-dynamic's own entry gives way to this file's; its descriptor is kept, unused */
#undef GRM_PLUGIN_DEFINE
#define GRM_PLUGIN_DEFINE(host_var, ...)                                                       \
    static const grm_plugin_info *const lk_replaced[] __attribute__((unused)) = { __VA_ARGS__ }
#include "../../plugins/emb-dynamic/plugin.c"

static const grm_emb_ops lk_ops = {
    .struct_size = offsetof(grm_emb_ops, tensor_rows),
    .create = ed_create,
    .destroy = ed_destroy,
    .lookup = ed_lookup,
    .update = ed_update,
    .tensors = ed_tensors,
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

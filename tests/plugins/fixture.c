/* tests/plugins/fixture.c - one small reader plugin, compiled into several fixture .so
 * files with -D switches, each breaking one rule the loader checks (STYLE.md §5.4):
 *   FIX_MAJOR / FIX_MINOR     the ABI pair the descriptor claims
 *   FIX_OPS_10                ops table of ABI 1.0 (no 1.1 members): must be accepted
 *   FIX_NO_ENTRY              export no grm_plugin_entry
 *   FIX_NULL_LIST             entry returns NULL
 *   FIX_SHORT_INFO            descriptor struct_size smaller than ABI 1.0's
 *   FIX_KIND                  the kind number
 *   FIX_SHORT_OPS             ops struct_size too small
 *   FIX_NULL_OP               a required op left NULL
 *   FIX_BAD_DEFAULT           a parameter default outside its range
 *   FIX_NAME                  the plugin name */
#include <stddef.h>
#include <string.h>

#include <grm/grm.h>

#ifndef FIX_MAJOR
#define FIX_MAJOR GRM_ABI_MAJOR
#endif
#ifndef FIX_MINOR
#define FIX_MINOR GRM_ABI_MINOR
#endif
#ifndef FIX_KIND
#define FIX_KIND GRM_KIND_READER
#endif
#ifndef FIX_NAME
#define FIX_NAME "reader-fixture"
#endif

typedef struct fix_config {
    int64_t rows;
} fix_config;

typedef struct fix_reader {
    int64_t left;
    grm_column col;
    grm_chunk chunk;
    int64_t value;
} fix_reader;

static const grm_host_api *fix_host;

static const grm_field fix_fields[] = { { "x", GRM_COL_I64, 0 } };
static const grm_schema fix_schema = { sizeof(grm_schema), 1, fix_fields };

static grm_status fix_open(const void *config, int32_t shard, int32_t nshards, void **inst)
{
    const fix_config *c = config;
    fix_reader *r = fix_host->alloc((grm_device){ GRM_DEVICE_CPU, 0 }, sizeof *r, 0);
    if (!r) return GRM_ENOMEM;
    memset(r, 0, sizeof *r);
    r->left = c->rows;
    *inst = r;
    return GRM_OK;
}

static grm_status fix_schema_fn(void *inst, const grm_schema **schema)
{
    *schema = &fix_schema;
    return GRM_OK;
}

__attribute__((unused)) static grm_status fix_next(void *inst, const grm_chunk **chunk)
{
    fix_reader *r = inst;
    if (r->left <= 0) {
        *chunk = NULL;
        return GRM_OK;
    }
    r->value = r->left--;
    r->col = (grm_column){ "x", GRM_COL_I64, 0, 1, &r->value, NULL };
    r->chunk = (grm_chunk){ sizeof(grm_chunk), 1, 1, &r->col };
    *chunk = &r->chunk;
    return GRM_OK;
}

static void fix_close(void *inst)
{
    if (inst) fix_host->free((grm_device){ GRM_DEVICE_CPU, 0 }, inst);
}

static const grm_reader_ops fix_ops = {
#if defined(FIX_SHORT_OPS)
    .struct_size = 4,
#elif defined(FIX_OPS_10)
    .struct_size = offsetof(grm_reader_ops, close) + sizeof(void (*)(void *)),
#else
    .struct_size = sizeof(grm_reader_ops),
#endif
    .open = fix_open,
    .schema = fix_schema_fn,
#ifndef FIX_NULL_OP
    .next = fix_next,
#endif
    .close = fix_close,
};

static const grm_param_decl fix_params[] = {
    { "rows", GRM_PARAM_INT, 0, offsetof(fix_config, rows),
#ifdef FIX_BAD_DEFAULT
      "1000",
#else
      "3",
#endif
      GRM_PARAM_RANGE(0, 100), NULL, "rows to produce" },
    { NULL },
};

static const grm_plugin_info fix_info = {
    .abi_major = FIX_MAJOR,
    .abi_minor = FIX_MINOR,
#ifdef FIX_SHORT_INFO
    .struct_size = 8,
#else
    .struct_size = sizeof(grm_plugin_info),
#endif
    .kind = FIX_KIND,
    .name = FIX_NAME,
    .version = "1.0.0",
    .description = "loader test fixture",
    .ops = &fix_ops,
    .params = fix_params,
    .config_size = sizeof(fix_config),
};

#ifdef FIX_NO_ENTRY
GRM_PLUGIN_EXPORT const grm_plugin_info *const *not_the_entry(const grm_host_api *host);
GRM_PLUGIN_EXPORT const grm_plugin_info *const *not_the_entry(const grm_host_api *host)
#else
GRM_PLUGIN_EXPORT const grm_plugin_info *const *grm_plugin_entry(const grm_host_api *host);
GRM_PLUGIN_EXPORT const grm_plugin_info *const *grm_plugin_entry(const grm_host_api *host)
#endif
{
    fix_host = host;
#ifdef FIX_NULL_LIST
    (void)fix_info;
    return NULL;
#else
    static const grm_plugin_info *const list[] = { &fix_info, NULL };
    return list;
#endif
}

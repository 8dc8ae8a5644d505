/* tests/test-param-macros.c - the SDK's source-level registration macros (grm/param.h
 * GRM_PARAM_DECL_*, grm/plugin.h GRM_PLUGIN_DEFINE) build exactly what a plugin would write
 * out by hand: every parameter type, a required key, both range forms, the terminator, and
 * an entry that keeps the host pointer and returns its descriptors in order, NULL-ended.
 * The compile-time type check on config fields is tested in tests/test-headers.sh. */
#include <string.h>

#include <grm/grm.h>

#include "tap.h"

/* Fields out of table order, so each entry's offset is its own. */
typedef struct mcfg {
    grm_str_list cols;
    int32_t flag;
    int64_t need;
    const char *path;
    double rate;
    grm_int_list dims;
    int32_t mode;
    int64_t count;
} mcfg;

/* Written with the macros. */
static const grm_param_decl by_macro[] = {
    GRM_PARAM_DECL_INT(mcfg, count, "7", GRM_PARAM_RANGE(1, 100), "n"),
    GRM_PARAM_DECL_DOUBLE(mcfg, rate, "0.5", GRM_PARAM_ANY, "r"),
    GRM_PARAM_DECL_BOOL(mcfg, flag, "false", "f"),
    GRM_PARAM_DECL_STRING(mcfg, path, GRM_PARAM_REQUIRED, "where"),
    GRM_PARAM_DECL_ENUM(mcfg, mode, "fast", "slow|fast|auto", "m"),
    GRM_PARAM_DECL_INT_LIST(mcfg, dims, "4,8", GRM_PARAM_RANGE(1, 1 << 10), "d"),
    GRM_PARAM_DECL_STR_LIST(mcfg, cols, NULL, "c"),
    GRM_PARAM_DECL_INT(mcfg, need, GRM_PARAM_REQUIRED, GRM_PARAM_RANGE(-1, 0x1p40), "x"),
    GRM_PARAM_DECL_END
};

/* The same table written out field by field, in declaration order:
 * name, type, required, offset, def, min, max, choices, help. */
static const grm_param_decl by_hand[] = {
    { "count", GRM_PARAM_INT, 0, offsetof(mcfg, count), "7", 1, 100, NULL, "n" },
    { "rate", GRM_PARAM_DOUBLE, 0, offsetof(mcfg, rate), "0.5", 1, 0, NULL, "r" },
    { "flag", GRM_PARAM_BOOL, 0, offsetof(mcfg, flag), "false", 1, 0, NULL, "f" },
    { "path", GRM_PARAM_STRING, 1, offsetof(mcfg, path), NULL, 1, 0, NULL, "where" },
    { "mode", GRM_PARAM_ENUM, 0, offsetof(mcfg, mode), "fast", 1, 0, "slow|fast|auto", "m" },
    { "dims", GRM_PARAM_INT_LIST, 0, offsetof(mcfg, dims), "4,8", 1, 1024, NULL, "d" },
    { "cols", GRM_PARAM_STR_LIST, 0, offsetof(mcfg, cols), NULL, 1, 0, NULL, "c" },
    { "need", GRM_PARAM_INT, 1, offsetof(mcfg, need), NULL, -1, 1099511627776.0, NULL, "x" },
    { NULL, 0, 0, 0, NULL, 0, 0, NULL, NULL },
};

/* Equal strings, both NULL included. */
static int same_str(const char *a, const char *b)
{
    return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

static const grm_host_api *m_host;
static const grm_plugin_info m_a = { GRM_PLUGIN_INFO_HEADER, .kind = GRM_KIND_READER,
                                     .name = "reader-a", .params = by_macro,
                                     .config_size = sizeof(mcfg) };
static const grm_plugin_info m_b = { GRM_PLUGIN_INFO_HEADER, .kind = GRM_KIND_OPT,
                                     .name = "opt-b" };

GRM_PLUGIN_DEFINE(m_host, &m_a, &m_b);

int main(void)
{
    const size_t n = sizeof by_hand / sizeof by_hand[0];
    tap_plan((int)n + 5);
    tap_ok(sizeof by_macro == sizeof by_hand, "the macro table has %zu entries, as written out",
           n);
    for (size_t i = 0; i < n && i < sizeof by_macro / sizeof by_macro[0]; i++) {
        const grm_param_decl *m = &by_macro[i], *h = &by_hand[i];
        int same = same_str(m->name, h->name) && m->type == h->type &&
                   m->required == h->required && m->offset == h->offset &&
                   same_str(m->def, h->def) && same_str(m->choices, h->choices) &&
                   same_str(m->help, h->help);
        // the terminator's name alone matters; its other fields are not read
        if (h->name != NULL)
            same = same && m->min == h->min && m->max == h->max;
        tap_ok(same, "entry %zu (%s): every field equals the written-out entry", i,
               h->name ? h->name : "terminator");
    }

    const grm_host_api *fake = (const grm_host_api *)&m_a;   // never dereferenced
    const grm_plugin_info *const *list = grm_plugin_entry(fake);
    tap_ok(m_host == fake, "GRM_PLUGIN_DEFINE's entry keeps the host pointer in m_host");
    tap_ok(list != NULL && list[0] == &m_a && list[1] == &m_b && list[2] == NULL,
           "the entry returns &m_a, &m_b in order, then NULL");
    tap_ok(grm_plugin_entry(fake) == list, "the list is static: the same array on every call");
    grm_plugin_entry_fn fn = grm_plugin_entry;
    tap_ok(fn != NULL && m_a.abi_major == GRM_ABI_MAJOR && m_a.struct_size == sizeof m_a,
           "the entry has grm_plugin_entry_fn's type; descriptors keep their header");
    return tap_done();
}

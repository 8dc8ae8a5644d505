/* grm/plugin.h - the plugin descriptor and entry point (DESIGN.md §3, STYLE.md §5).
 *
 * Each .so exports exactly one symbol, grm_plugin_entry, returning a NULL-terminated
 * list of descriptors. The entry function is pure: it keeps the host pointer and returns
 * static data; it allocates, starts and prints nothing. */
#ifndef GRM_PLUGIN_H
#define GRM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <grm/host.h>
#include <grm/param.h>
#include <grm/tensor.h>
#include <grm/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Plugin kinds; each has its ops table in grm/<kind>.h. Stored in int32_t. */
typedef enum grm_kind {
    GRM_KIND_READER = 1,     /* grm_reader_ops, grm/reader.h */
    GRM_KIND_TRANSFORM = 2,  /* grm_transform_ops, grm/transform.h */
    GRM_KIND_EMB = 3,        /* grm_emb_ops, grm/emb.h */
    GRM_KIND_DENSE = 4,      /* grm_dense_ops, grm/dense.h */
    GRM_KIND_OPT = 5,        /* grm_opt_ops, grm/opt.h */
    GRM_KIND_CKPT = 6,       /* grm_ckpt_ops, grm/ckpt.h */
    GRM_KIND_COMM = 7,       /* grm_comm_ops, grm/comm.h */
    GRM_KIND_HEAD = 8        /* grm_head_ops, grm/head.h (since 1.5) */
} grm_kind;

/* One plugin's descriptor. Static storage in the plugin. */
typedef struct grm_plugin_info {
    uint16_t abi_major;          /* GRM_ABI_MAJOR the plugin was built against */
    uint16_t abi_minor;          /* GRM_ABI_MINOR the plugin was built against */
    uint32_t struct_size;        /* sizeof(grm_plugin_info) the plugin was built with */
    int32_t kind;                /* grm_kind */
    int32_t devices;             /* since 1.4: bitmask of GRM_DEVICES_* the plugin runs on; 0
                                  * (every plugin before 1.4, where this was a zero reserved
                                  * field) means the CPU only */
    const char *name;            /* "<kind>-<name>", equal to the .so basename */
    const char *version;         /* the plugin's own version, "1.0.0" */
    const char *description;     /* one line, citing the paper section it implements */
    const void *ops;             /* the kind's ops table; begins with uint32_t struct_size */
    const grm_param_decl *params;/* declared INI keys, ending with a NULL name; or NULL */
    size_t config_size;          /* bytes of the config struct the params fill (0: none) */
} grm_plugin_info;

/* Bits of grm_plugin_info.devices: 1 << grm_device_type. The host refuses a pipeline whose
 * [pipeline] device a compute plugin (embedding store, dense block, head, optimizer) does not
 * list. `ref` and `cpu` are both CPU devices. */
#define GRM_DEVICES_CPU (1 << GRM_DEVICE_CPU)
#define GRM_DEVICES_CUDA (1 << GRM_DEVICE_CUDA)

/* Fills the three header fields of a grm_plugin_info; always use it. */
#define GRM_PLUGIN_INFO_HEADER                                                     \
    .abi_major = GRM_ABI_MAJOR, .abi_minor = GRM_ABI_MINOR,                                    \
    .struct_size = (uint32_t)sizeof(grm_plugin_info)

/* Marks the entry function, the only symbol a plugin exports. */
#if defined(__GNUC__)
#define GRM_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define GRM_PLUGIN_EXPORT
#endif

/* The name of the entry symbol. */
#define GRM_PLUGIN_ENTRY_SYMBOL "grm_plugin_entry"

/* The entry function's type. `host` is static for the process's life. Returns a
 * NULL-terminated list of descriptors (static). */
typedef const grm_plugin_info *const *(*grm_plugin_entry_fn)(const grm_host_api *host);

/* The entry every plugin defines (declared here so plugins compile cleanly with
 * -Wmissing-prototypes). The host never links it: it finds it with dlsym. */
GRM_PLUGIN_EXPORT const grm_plugin_info *const *grm_plugin_entry(const grm_host_api *host);

/* Defines grm_plugin_entry (source-level only; the symbol, its type and what it returns
 * are exactly those above). Write it once, at file scope after the descriptors:
 *
 *     static const grm_host_api *sgd_host;      top of the file: the only mutable global
 *     ...                                       functions using sgd_host, ops, params
 *     static const grm_plugin_info sgd_info = { GRM_PLUGIN_INFO_HEADER, ... };
 *     GRM_PLUGIN_DEFINE(sgd_host, &sgd_info);
 *
 *   host_var  the plugin's `static const grm_host_api *` variable; the entry stores the
 *             host's table there (static for the process's life) on every call. It stays
 *             a plain declaration at the top of the file because C needs it declared
 *             before the functions that use it, and the entry after the descriptors.
 *   ...       the descriptors' addresses, `&info` or `&a_info, &b_info` (static const
 *             grm_plugin_info); the entry returns them in this order, NULL-terminated.
 *
 * The entry it defines is pure, as STYLE.md §5.2 asks: it keeps the host pointer and
 * returns a static list; it allocates, starts and prints nothing. A wrong host_var type is
 * a compile error. */
#define GRM_PLUGIN_DEFINE(host_var, ...)                                                       \
    GRM_PLUGIN_EXPORT const grm_plugin_info *const *                                           \
    grm_plugin_entry(const grm_host_api *host)                                                 \
    {                                                                                          \
        static const grm_plugin_info *const grm__list[] = { __VA_ARGS__, NULL };               \
        host_var = host;                                                                       \
        return grm__list;                                                                      \
    }                                                                                          \
    _Static_assert(_Generic(host_var, const grm_host_api *: 1, default: 0),                    \
                   "GRM_PLUGIN_DEFINE: " #host_var " must be a static const grm_host_api *")

#ifdef __cplusplus
}
#endif
#endif /* GRM_PLUGIN_H */

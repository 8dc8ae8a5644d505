/* grm/host.h - the host API table: a plugin's only way into the host (STYLE.md §5.7).
 *
 * grmhost passes a grm_host_api to each plugin's entry function. Plugins keep the
 * pointer (their one mutable global) and never resolve a symbol from grmhost or
 * libgrmcore, the SQLite/Redis-module pattern. The table only grows: a member added
 * after 1.0 is reached with GRM_HAS_OP(grm_host_api, host, member). */
#ifndef GRM_HOST_H
#define GRM_HOST_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when `table` (a pointer to an ops or API table of type `type`) is large enough
 * to hold `member` and that member is non-NULL. */
#define GRM_HAS_OP(type, table, member)                                             \
    ((table) != NULL                                                                \
     && (table)->struct_size >= offsetof(type, member) + sizeof((table)->member)    \
     && (table)->member != NULL)

/* Log levels. Stored in int32_t. */
typedef enum grm_log_level {
    GRM_LOG_ERROR = 0,
    GRM_LOG_WARN = 1,
    GRM_LOG_INFO = 2,
    GRM_LOG_DEBUG = 3
} grm_log_level;

/* Work function for parallel_for: process [begin, end). Returns GRM_OK or a status
 * with a message set through errorf. */
typedef grm_status (*grm_range_fn)(void *ctx, int64_t begin, int64_t end);

struct grm_comm_handle;
struct grm_backend;

/* The host API. Every member is provided by grmhost (required). */
typedef struct grm_host_api {
    uint32_t struct_size;      /* sizeof(grm_host_api) as the host knows it */
    uint16_t abi_major;        /* the host's GRM_ABI_MAJOR */
    uint16_t abi_minor;        /* the host's GRM_ABI_MINOR */

    /* Log one line to stderr at `level`; `who` names the plugin. Thread-safe. */
    void (*log)(int32_t level, const char *who, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

    /* Set this thread's last-error message and return `status`, in one statement:
     * `return host->errorf(GRM_EINVAL, "%s: bad dim %d", name, d);`. Thread-safe. */
    grm_status (*errorf)(grm_status status, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

    /* This thread's last-error message (static storage, valid until the next call). */
    const char *(*last_error)(void);

    /* Allocate `bytes` on `device` aligned to `align` (a power of two, 0 = 64). Returns
     * NULL on failure (with the error set). Owned: release with host->free. */
    void *(*alloc)(grm_device device, size_t bytes, size_t align);

    /* Release memory from host->alloc; NULL is accepted. */
    void (*free)(grm_device device, void *ptr);

    /* Run fn over [0, n) split into ranges of at least `grain` items on the host's
     * thread pool, and wait. Returns the first failure of any range. Calls may not nest
     * (a nested call runs serially on the calling thread). */
    grm_status (*parallel_for)(int64_t n, int64_t grain, grm_range_fn fn, void *ctx);

    /* Number of worker threads parallel_for uses (>= 1). */
    int32_t (*num_threads)(void);

    /* Step-lifetime scratch memory on the CPU, reset by the host after every training
     * step. Returns NULL on failure. Not thread-safe: call from the calling thread only. */
    void *(*scratch)(size_t bytes, size_t align);

    /* The raw value of an INI key anywhere in the pipeline file, or NULL. For plugins that
     * need a setting owned by another section (e.g. a shared data directory). */
    const char *(*config_get)(const char *section, const char *key);

    /* The job's communicator (world of one when no comm plugin is configured). */
    struct grm_comm_handle *comm;

    /* since 1.4: the pipeline's compute backend ([pipeline] device; grm/backend.h). Plugins
     * run their hot ops through it (the dense blocks' GEMMs, the heads' row gathers) and
     * pick their implementation by its name and device in create. Outside a run, grmhost's
     * host gives the `cpu` backend (since 1.7; NULL before); another host may give NULL.
     * Test it with GRM_HAS_OP(grm_host_api, host, backend). */
    const struct grm_backend *(*backend)(void);
} grm_host_api;

#ifdef __cplusplus
}
#endif
#endif /* GRM_HOST_H */

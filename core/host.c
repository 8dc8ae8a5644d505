/* core/host.c - the grm_host_api table handed to every plugin (STYLE.md §5.7). */
#include "grm_core.h"

#include "backend.h"

#include <stdio.h>

static const grm__config *host_config;
static grm_comm_handle *host_comm;
static const grm_backend *host_backend;

/* Outside a run (a plugin created by a command or a test) plugins get the `cpu` backend,
 * so a plugin has one GEMM path, not one with a backend and one without. */
static const grm_backend host_default_backend = {
    .iface = &grm__backend_cpu_iface,
    .context = NULL,
    .device = { GRM_DEVICE_CPU, 0 },
};

static const grm_backend *host_get_backend(void)
{
    return host_backend ? host_backend : &host_default_backend;
}

static void host_log(int32_t level, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void host_log(int32_t level, const char *who, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    if (level > grm__log_level()) return;   // plugins log DEBUG in hot paths: format nothing
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    grm__log(level, who, "%s", line);
}

static const char *host_config_get(const char *section, const char *key)
{
    const grm__section *s = host_config ? grm__config_section(host_config, section) : NULL;
    grm__kv *kv = s ? grm__section_kv(s, key) : NULL;
    return kv ? kv->value : NULL;
}

static grm_host_api host_api = {
    .struct_size = sizeof(grm_host_api),
    .abi_major = GRM_ABI_MAJOR,
    .abi_minor = GRM_ABI_MINOR,
    .log = host_log,
    .errorf = grm_errorf,
    .last_error = grm_last_error,
    .alloc = grm__alloc,
    .free = grm__free,
    .parallel_for = grm__parallel_for,
    .num_threads = grm__num_threads,
    .scratch = grm__scratch,
    .config_get = host_config_get,
    .comm = NULL,
    .backend = host_get_backend,
};

const grm_host_api *grm__host_api(void)
{
    host_api.comm = host_comm;
    return &host_api;
}

void grm__host_set_config(const grm__config *cfg)
{
    host_config = cfg;
}

void grm__host_set_comm(grm_comm_handle *comm)
{
    host_comm = comm;
    host_api.comm = comm;
}

void grm__host_set_backend(const grm_backend *backend)
{
    host_backend = backend;
}

/* core/loader.c - finding, loading and vetting plugins (DESIGN.md §3, STYLE.md §5.4).
 *
 * Checks run in a fixed order and stop at the first failure with one line naming the
 * file, what was found, what was expected and the fix: dlopen -> entry symbol -> list and
 * descriptors non-NULL -> descriptor struct_size -> abi_major -> abi_minor -> kind ->
 * ops struct_size and required ops -> unique name -> parameter table. */
#include "config.h"
#include "grm_core.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct grm__registry {
    grm__plugin *plugins;
    int32_t n, cap;
    void **handles;          /* dlopen handles, closed at destroy */
    int32_t nhandles, caphandles;
};

/* The size of grm_plugin_info in ABI 1.0: everything through config_size. */
#define INFO_MIN_SIZE (offsetof(grm_plugin_info, config_size) + sizeof(size_t))

static const char *const kind_names[] = {
    NULL, "reader", "transform", "emb", "dense", "opt", "ckpt", "comm", "head",
};

const char *grm__kind_name(int32_t kind)
{
    return kind >= GRM_KIND_READER && kind <= GRM_KIND_HEAD ? kind_names[kind] : NULL;
}

#define OPS_END(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))

size_t grm__kind_ops_min_size(int32_t kind)
{
    switch (kind) {
    case GRM_KIND_READER: return OPS_END(grm_reader_ops, close);
    case GRM_KIND_TRANSFORM: return OPS_END(grm_transform_ops, destroy);
    case GRM_KIND_EMB: return OPS_END(grm_emb_ops, load);
    case GRM_KIND_DENSE: return OPS_END(grm_dense_ops, flops);
    case GRM_KIND_OPT: return OPS_END(grm_opt_ops, row_step);
    case GRM_KIND_CKPT: return OPS_END(grm_ckpt_ops, meta);
    case GRM_KIND_COMM: return OPS_END(grm_comm_ops, barrier);
    case GRM_KIND_HEAD: return OPS_END(grm_head_ops, flops);
    }
    return 0;
}

/* Offsets of the required ops of each kind, ending with (size_t)-1. */
#define REQ(type, m) offsetof(type, m)
static const size_t req_reader[] = {
    REQ(grm_reader_ops, open), REQ(grm_reader_ops, schema), REQ(grm_reader_ops, next),
    REQ(grm_reader_ops, close), (size_t)-1 };
static const size_t req_transform[] = {
    REQ(grm_transform_ops, create), REQ(grm_transform_ops, schema),
    REQ(grm_transform_ops, apply), REQ(grm_transform_ops, destroy), (size_t)-1 };
static const size_t req_emb[] = {
    REQ(grm_emb_ops, create), REQ(grm_emb_ops, destroy), REQ(grm_emb_ops, lookup),
    REQ(grm_emb_ops, update), REQ(grm_emb_ops, tensors), REQ(grm_emb_ops, load), (size_t)-1 };
static const size_t req_dense[] = {
    REQ(grm_dense_ops, create), REQ(grm_dense_ops, destroy), REQ(grm_dense_ops, out_dim),
    REQ(grm_dense_ops, forward), REQ(grm_dense_ops, backward), REQ(grm_dense_ops, params),
    REQ(grm_dense_ops, flops), (size_t)-1 };
static const size_t req_opt[] = {
    REQ(grm_opt_ops, create), REQ(grm_opt_ops, destroy), REQ(grm_opt_ops, state_floats),
    REQ(grm_opt_ops, step), REQ(grm_opt_ops, row_step), (size_t)-1 };
static const size_t req_ckpt[] = {
    REQ(grm_ckpt_ops, create), REQ(grm_ckpt_ops, destroy), REQ(grm_ckpt_ops, extension),
    REQ(grm_ckpt_ops, save), REQ(grm_ckpt_ops, load), REQ(grm_ckpt_ops, meta), (size_t)-1 };
static const size_t req_comm[] = {
    REQ(grm_comm_ops, create), REQ(grm_comm_ops, destroy), REQ(grm_comm_ops, rank),
    REQ(grm_comm_ops, size), REQ(grm_comm_ops, allreduce), REQ(grm_comm_ops, allgather),
    REQ(grm_comm_ops, alltoallv), REQ(grm_comm_ops, broadcast), REQ(grm_comm_ops, barrier),
    (size_t)-1 };
static const size_t req_head[] = {
    REQ(grm_head_ops, create), REQ(grm_head_ops, destroy), REQ(grm_head_ops, task),
    REQ(grm_head_ops, loss), (size_t)-1 };
static const size_t *const required_ops[] = {
    NULL, req_reader, req_transform, req_emb, req_dense, req_opt, req_ckpt, req_comm, req_head,
};

grm_status grm__registry_create(grm__registry **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? GRM_OK : grm_errorf(GRM_ENOMEM, "plugin registry: out of memory");
}

void grm__registry_destroy(grm__registry *reg)
{
    if (!reg) return;
    for (int32_t i = 0; i < reg->n; i++) free(reg->plugins[i].path);
    free(reg->plugins);
    /* Sanitizer builds keep plugins mapped so leak reports can still name their code. */
#ifndef GRM_KEEP_PLUGINS_MAPPED
    for (int32_t i = 0; i < reg->nhandles; i++) dlclose(reg->handles[i]);
#endif
    free(reg->handles);
    free(reg);
}

static grm_status check_info(const grm__registry *reg, const grm_plugin_info *info,
                             const char *path)
{
    const grm_host_api *host = grm__host_api();
    if (info->struct_size < INFO_MIN_SIZE)
        return grm_errorf(GRM_EABI, "%s: plugin descriptor is %u bytes, shorter than the %zu "
                          "bytes of ABI %d.0; rebuild it against grm-sdk %d.x", path,
                          info->struct_size, (size_t)INFO_MIN_SIZE, GRM_ABI_MAJOR,
                          GRM_ABI_MAJOR);
    if (info->abi_major != GRM_ABI_MAJOR)
        return grm_errorf(GRM_EABI, "%s: built for grm ABI %u.%u, this grmhost speaks %u.%u; "
                          "rebuild it against grm-sdk %u.x (pkg-config --modversion grm-sdk)",
                          path, info->abi_major, info->abi_minor, host->abi_major,
                          host->abi_minor, host->abi_major);
    if (info->abi_minor > GRM_ABI_MINOR)
        return grm_errorf(GRM_EABI, "%s: built for grm ABI %u.%u, newer than this grmhost's "
                          "%u.%u; upgrade grm, or rebuild the plugin against grm-sdk %u.%u",
                          path, info->abi_major, info->abi_minor, host->abi_major,
                          host->abi_minor, host->abi_major, host->abi_minor);
    const char *kind = grm__kind_name(info->kind);
    if (!kind)
        return grm_errorf(GRM_EABI, "%s: plugin kind %d is unknown to grm ABI %d.%d (known: "
                          "1..7, reader..comm); rebuild it against this grm-sdk", path,
                          info->kind, GRM_ABI_MAJOR, GRM_ABI_MINOR);
    if (!info->name || !info->name[0])
        return grm_errorf(GRM_EABI, "%s: plugin descriptor has no name; set .name to "
                          "\"%s-<name>\"", path, kind);
    if (!info->ops)
        return grm_errorf(GRM_EABI, "%s: plugin '%s' has no ops table; set .ops", path,
                          info->name);
    uint32_t ops_size;
    memcpy(&ops_size, info->ops, sizeof ops_size);
    size_t min = grm__kind_ops_min_size(info->kind);
    if (ops_size < min)
        return grm_errorf(GRM_EABI, "%s: plugin '%s' %s ops table is %u bytes, shorter than "
                          "the %zu bytes of ABI %d.0; set struct_size = sizeof(grm_%s_ops) "
                          "and rebuild", path, info->name, kind, ops_size, min, GRM_ABI_MAJOR,
                          kind);
    for (const size_t *off = required_ops[info->kind]; *off != (size_t)-1; off++) {
        void *fn;
        memcpy(&fn, (const char *)info->ops + *off, sizeof fn);
        if (!fn)
            return grm_errorf(GRM_EABI, "%s: plugin '%s' leaves a required %s op (at byte %zu "
                              "of its ops table) NULL; implement it", path, info->name, kind,
                              *off);
    }
    for (int32_t i = 0; i < reg->n; i++)
        if (strcmp(reg->plugins[i].info->name, info->name) == 0)
            return grm_errorf(GRM_EABI, "%s: plugin name '%s' is already taken by %s; remove "
                              "one of the two from the plugin path or rename one", path,
                              info->name, reg->plugins[i].path);
    return grm__params_check_decls(info, path);
}

/* in_dir: found by a directory scan, where a library without the entry symbol is a
 * stray one, GRM_ENOTFOUND (skipped with a warning), not a broken plugin. */
static grm_status load_file(grm__registry *reg, const char *path, int in_dir)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return grm_errorf(GRM_EIO, "%s: cannot open plugin: %s", path, strerror(errno));
    for (int32_t i = 0; i < reg->n; i++)
        if (strcmp(reg->plugins[i].path, real) == 0) return GRM_OK;  /* already loaded */

    /* RTLD_NODELETE: a plugin stays mapped after dlclose, with the libraries it pulled in.
     * CUDA's cuBLAS/cuBLASLt (comm-nccl) carry a static C++ runtime whose 72,704-byte
     * exception pool, once its library is unmapped at exit, reads as a leak to LeakSanitizer
     * (in an unknown module, so no suppression can name it); mapped, the pool stays reachable. */
    void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h)
        return grm_errorf(GRM_EABI, "%s: cannot load plugin: %s; check that its libraries "
                          "are installed (ldd %s)", real, dlerror(), real);
    grm_plugin_entry_fn entry;
    void *sym = dlsym(h, GRM_PLUGIN_ENTRY_SYMBOL);
    memcpy(&entry, &sym, sizeof entry);
    if (!entry) {
        dlclose(h);
        return grm_errorf(in_dir ? GRM_ENOTFOUND : GRM_EABI, "%s: no %s symbol; not a grm "
                          "plugin, or its entry lacks GRM_PLUGIN_EXPORT", real,
                          GRM_PLUGIN_ENTRY_SYMBOL);
    }
    const grm_plugin_info *const *list = entry(grm__host_api());
    if (!list || !list[0]) {
        dlclose(h);
        return grm_errorf(GRM_EABI, "%s: %s returned %s; it must return a NULL-terminated "
                          "list of at least one descriptor", real, GRM_PLUGIN_ENTRY_SYMBOL,
                          list ? "an empty list" : "NULL");
    }
    int32_t count = 0;
    while (list[count]) count++;
    for (int32_t i = 0; i < count; i++) {
        grm_status st = check_info(reg, list[i], real);
        for (int32_t j = 0; st == GRM_OK && j < i; j++)
            if (strcmp(list[j]->name, list[i]->name) == 0)
                st = grm_errorf(GRM_EABI, "%s: lists plugin name '%s' twice; rename one",
                                real, list[i]->name);
        if (st != GRM_OK) {
            dlclose(h);
            return st;
        }
    }
    if (reg->n + count > reg->cap) {
        int32_t cap = (reg->cap ? reg->cap * 2 : 16) + count;
        grm__plugin *np = realloc(reg->plugins, (size_t)cap * sizeof *np);
        if (!np) {
            dlclose(h);
            return grm_errorf(GRM_ENOMEM, "plugin registry: out of memory");
        }
        reg->plugins = np;
        reg->cap = cap;
    }
    if (reg->nhandles == reg->caphandles) {
        int32_t cap = reg->caphandles ? reg->caphandles * 2 : 16;
        void **nh = realloc(reg->handles, (size_t)cap * sizeof *nh);
        if (!nh) {
            dlclose(h);
            return grm_errorf(GRM_ENOMEM, "plugin registry: out of memory");
        }
        reg->handles = nh;
        reg->caphandles = cap;
    }
    reg->handles[reg->nhandles++] = h;
    for (int32_t i = 0; i < count; i++) {
        reg->plugins[reg->n].info = list[i];
        reg->plugins[reg->n].path = strdup(real);
        if (!reg->plugins[reg->n].path) return grm_errorf(GRM_ENOMEM, "out of memory");
        reg->n++;
    }
    return GRM_OK;
}

grm_status grm__registry_load_file(grm__registry *reg, const char *path)
{
    return load_file(reg, path, 0);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 when `name` is named like a plugin: <kind>-<name>.so (STYLE.md §3), kind one of
 * kind_names. Nothing else in a plugin directory is opened: dlopen runs a library's
 * constructors, and a directory may hold other libraries (issue 25 item 5). */
static int plugin_file_name(const char *name)
{
    const size_t n = strlen(name);
    if (n < 4 || strcmp(name + n - 3, ".so") != 0) return 0;
    for (int32_t k = GRM_KIND_READER; k <= GRM_KIND_HEAD; k++) {
        const size_t kl = strlen(kind_names[k]);
        if (strncmp(name, kind_names[k], kl) == 0 && name[kl] == '-' && kl + 1 < n - 3)
            return 1;
    }
    return 0;
}

/* Collect the plugin files in dir, and in dir/<sub>/.libs (libtool build trees). */
static grm_status collect(const char *dir, char ***files, int *nfiles, int depth)
{
    DIR *d = opendir(dir);
    if (!d) return grm_errorf(GRM_ENOTFOUND, "%s: cannot open plugin directory: %s", dir,
                              strerror(errno));
    struct dirent *e;
    grm_status st = GRM_OK;
    while ((e = readdir(d)) && st == GRM_OK) {
        char path[PATH_MAX];
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".libs") != 0) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
            continue;
        struct stat sb;
        if (stat(path, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            if (depth < 2) {
                grm_status s2 = collect(path, files, nfiles, depth + 1);
                if (s2 != GRM_OK && s2 != GRM_ENOTFOUND) st = s2;
            }
            continue;
        }
        /* below the top directory only libtool's .libs holds real plugins */
        if (depth > 0 && !ends_with(dir, "/.libs")) continue;
        if (!ends_with(e->d_name, ".so")) continue;
        if (!plugin_file_name(e->d_name)) {
            grm__log(GRM_LOG_WARN, "grmhost", "%s: skipped: not named like a plugin "
                     "(<kind>-<name>.so, kind one of reader transform emb dense opt ckpt comm "
                     "head)", path);
            continue;
        }
        char **nf = realloc(*files, (size_t)(*nfiles + 1) * sizeof *nf);
        if (!nf || !(nf[*nfiles] = strdup(path))) {
            if (nf) *files = nf;
            st = grm_errorf(GRM_ENOMEM, "out of memory");
            break;
        }
        *files = nf;
        (*nfiles)++;
    }
    closedir(d);
    return st;
}

/* 1 when file's name without ".so" is one of names [n] (n < 0: any name). */
static int wanted(const char *file, const char *const *names, int n)
{
    if (n < 0) return 1;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    const size_t len = strlen(base) - 3;
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && strncmp(base, names[i], len) == 0) return 1;
    return 0;
}

grm_status grm__registry_load_dir_named(grm__registry *reg, const char *dir,
                                        const char *const *names, int nnames)
{
    char **files = NULL;
    int n = 0;
    grm_status st = collect(dir, &files, &n, 0);
    if (st == GRM_OK) qsort(files, (size_t)n, sizeof *files, cmp_str);
    for (int i = 0; i < n; i++) {
        if (st == GRM_OK && wanted(files[i], names, nnames)) {
            st = load_file(reg, files[i], 1);
            if (st == GRM_ENOTFOUND) {   /* a stray library named like a plugin */
                grm__log(GRM_LOG_WARN, "grmhost", "%s: skipped", grm_last_error());
                st = GRM_OK;
            }
        }
        free(files[i]);
    }
    free(files);
    return st;
}

grm_status grm__registry_load_dir(grm__registry *reg, const char *dir)
{
    return grm__registry_load_dir_named(reg, dir, NULL, -1);
}

/* True when the running executable lives in the configured build tree. */
static int running_from_build_tree(void)
{
    char exe[PATH_MAX], build[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    if (!realpath(GRM_BUILD_DIR, build)) return 0;
    return strcmp(exe, build) == 0 || (strncmp(exe, build, strlen(build)) == 0
                                      && exe[strlen(build)] == '/');
}

/* A build tree copied or moved elsewhere (grmhost, or libtool's .libs/grmhost, beside
 * plugins/), or an installation moved as a whole (bin/grmhost beside lib/grm/plugins):
 * the plugin directory found from the running executable, into buf [cap]; 0 if none. */
static int plugins_near_exe(char *buf, size_t cap)
{
    static const char *const rel[] = { "plugins", "../plugins", "../lib/grm/plugins" };
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        struct stat sb;
        if ((size_t)snprintf(buf, cap, "%s/%s", exe, rel[i]) < cap && stat(buf, &sb) == 0
            && S_ISDIR(sb.st_mode))
            return 1;
    }
    return 0;
}

/* The directory of grmhost's own plugins into buf [cap]: the build tree's plugins/ when
 * grmhost runs from it, else one beside the executable, else the installed GRM_PLUGIN_DIR.
 * Returns 1 for the installed one (which may be missing when GRM_PLUGIN_PATH has the
 * plugins). */
static int own_plugin_dir(char *buf, size_t cap)
{
    if (running_from_build_tree()) {
        snprintf(buf, cap, "%s/plugins", GRM_BUILD_DIR);
        return 0;
    }
    if (plugins_near_exe(buf, cap)) return 0;
    snprintf(buf, cap, "%s", GRM_PLUGIN_DIR);
    return 1;
}

grm_status grm__registry_load_default(grm__registry *reg)
{
    const char *env = getenv("GRM_PLUGIN_PATH");
    if (env && *env) {
        char *copy = strdup(env), *save = NULL;
        if (!copy) return grm_errorf(GRM_ENOMEM, "out of memory");
        for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
            grm_status st = grm__registry_load_dir(reg, p);
            if (st == GRM_ENOTFOUND) {
                grm__log(GRM_LOG_WARN, "grmhost", "GRM_PLUGIN_PATH: %s", grm_last_error());
                continue;
            }
            if (st != GRM_OK) {
                free(copy);
                return st;
            }
        }
        free(copy);
    }
    char dir[PATH_MAX];
    const int installed = own_plugin_dir(dir, sizeof dir);
    grm_status st = grm__registry_load_dir(reg, dir);
    if (installed && st == GRM_ENOTFOUND && reg->n > 0) return GRM_OK;
    if (installed && st == GRM_ENOTFOUND)
        grm_error_suffix("; no plugins beside grmhost either: set GRM_PLUGIN_PATH to the "
                         "directory that holds them (a build tree's plugins/, an "
                         "installation's lib/grm/plugins)");
    return st;
}

int grm__module_path(const char *file, char *buf, size_t cap)
{
    char dir[PATH_MAX];
    own_plugin_dir(dir, sizeof dir);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) *slash = '\0';
    /* an installation's $(libdir)/grm, then a build tree's kernels/.libs (libtool) */
    static const char *const rel[] = { "", "kernels/.libs/" };
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        struct stat sb;
        if ((size_t)snprintf(buf, cap, "%s/%s%s", dir, rel[i], file) < cap
            && stat(buf, &sb) == 0)
            return 1;
    }
    snprintf(buf, cap, "%s", dir);
    return 0;
}

const grm__plugin *grm__registry_find(const grm__registry *reg, const char *name)
{
    for (int32_t i = 0; i < reg->n; i++)
        if (strcmp(reg->plugins[i].info->name, name) == 0) return &reg->plugins[i];
    const char **names = malloc((size_t)(reg->n + 1) * sizeof *names);
    const char *near = NULL;
    if (names) {
        for (int32_t i = 0; i < reg->n; i++) names[i] = reg->plugins[i].info->name;
        near = grm__closest(name, names, reg->n);
    }
    if (near)
        grm_errorf(GRM_ENOTFOUND, "no plugin named '%s'; did you mean '%s'?", name, near);
    else
        grm_errorf(GRM_ENOTFOUND, "no plugin named '%s' among the %d loaded; `grmhost "
                   "plugins` lists them, GRM_PLUGIN_PATH adds directories", name, reg->n);
    free(names);
    return NULL;
}

grm_status grm__registry_get(const grm__registry *reg, const char *name, int32_t kind,
                             const grm__plugin **out)
{
    const grm__plugin *p = grm__registry_find(reg, name);
    *out = NULL;
    if (!p) return GRM_ENOTFOUND;
    if (p->info->kind != kind)
        return grm_errorf(GRM_EINVAL, "plugin '%s' is a %s plugin, but a %s plugin is needed "
                          "here", name, grm__kind_name(p->info->kind), grm__kind_name(kind));
    *out = p;
    return GRM_OK;
}

int32_t grm__registry_count(const grm__registry *reg)
{
    return reg->n;
}

const grm__plugin *grm__registry_at(const grm__registry *reg, int32_t i)
{
    return i >= 0 && i < reg->n ? &reg->plugins[i] : NULL;
}

/* tests/harness.c - see harness.h. */
#include "harness.h"
#include "tap.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static grm__registry *harness_reg;
static grm__pconfig **harness_configs;   /* kept until exit, freed by harness_atexit */
static int harness_nconfigs;

static void harness_atexit(void)
{
    for (int i = 0; i < harness_nconfigs; i++) {
        grm__pconfig_fini(harness_configs[i]);
        free(harness_configs[i]);
    }
    free(harness_configs);
    harness_configs = NULL;
    harness_nconfigs = 0;
    grm__registry_destroy(harness_reg);
    harness_reg = NULL;
    grm__pool_fini();
    grm__scratch_fini();
}

static void bail(const char *what)
{
    printf("Bail out! %s: %s\n", what, grm_last_error());
    fflush(stdout);
    exit(1);
}

const char *harness_builddir(void)
{
    return getenv("GRM_TOP_BUILDDIR");
}

const char *harness_srcdir(void)
{
    return getenv("GRM_TOP_SRCDIR");
}

const char *harness_datadir(void)
{
    return getenv("GRM_DATA_DIR");
}

const grm_host_api *harness_host(void)
{
    static int registered;
    if (!registered) {
        registered = 1;
        atexit(harness_atexit);
    }
    grm__pool_init(2);
    return grm__host_api();
}

const grm_plugin_info *harness_plugin(const char *name)
{
    char dir[4096];
    if (!harness_reg) {
        const char *b = harness_builddir();
        if (!b) {
            printf("Bail out! GRM_TOP_BUILDDIR is not set; run through make check\n");
            exit(1);
        }
        harness_host();
        if (grm__registry_create(&harness_reg) != GRM_OK) bail("registry");
        snprintf(dir, sizeof dir, "%s/plugins", b);
        if (grm__registry_load_dir(harness_reg, dir) != GRM_OK) bail("loading plugins");
    }
    const grm__plugin *p = grm__registry_find(harness_reg, name);
    if (!p) bail(name);
    return p->info;
}

grm_status harness_config_try(const grm_plugin_info *info, const void **config,
                              const char *const *kvs, int n)
{
    grm__pconfig *pc = calloc(1, sizeof *pc);   /* lives until exit, as documented */
    grm__pconfig **nc = realloc(harness_configs, (size_t)(harness_nconfigs + 1) * sizeof *nc);
    if (!pc || !nc) {
        free(pc);
        if (nc) harness_configs = nc;
        return grm_errorf(GRM_ENOMEM, "harness: out of memory");
    }
    harness_configs = nc;
    harness_host();
    grm_status st = grm__params_fill_kv(info, kvs, n, pc);
    if (st != GRM_OK) {
        free(pc);
        return st;
    }
    harness_configs[harness_nconfigs++] = pc;
    *config = pc->data;
    return GRM_OK;
}

const void *harness_config(const grm_plugin_info *info, ...)
{
    const char *kvs[GRM_PARAM_LIST_MAX];
    int n = 0;
    va_list ap;
    va_start(ap, info);
    for (const char *s; (s = va_arg(ap, const char *)) && n < GRM_PARAM_LIST_MAX;) kvs[n++] = s;
    va_end(ap);
    const void *cfg = NULL;
    if (harness_config_try(info, &cfg, kvs, n) != GRM_OK) bail(info->name);
    return cfg;
}

/* The directories harness_tmpdir made, removed with all they hold when the test exits:
 * a suite run left dozens behind in /tmp before. */
static char **harness_dirs;
static int harness_ndirs;
static pid_t harness_dirs_pid;     /* a forked child's exit leaves them to the parent */

static int harness_rm_entry(const char *path, const struct stat *sb, int type, struct FTW *f)
{
    (void)sb, (void)type, (void)f;
    remove(path);
    return 0;
}

static void harness_tmpdirs_atexit(void)
{
    for (int i = 0; i < harness_ndirs; i++) {
        if (getpid() == harness_dirs_pid)
            nftw(harness_dirs[i], harness_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(harness_dirs[i]);
    }
    free(harness_dirs);
    harness_dirs = NULL;
    harness_ndirs = 0;
}

const char *harness_tmpdir(const char *tag)
{
    static char path[4096];
    const char *base = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/grm-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(path)) {
        printf("Bail out! mkdtemp %s failed\n", path);
        exit(1);
    }
    char **dirs = realloc(harness_dirs, (size_t)(harness_ndirs + 1) * sizeof *dirs);
    char *copy = strdup(path);
    if (dirs == NULL || copy == NULL) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    if (harness_dirs == NULL) {
        harness_dirs_pid = getpid();
        atexit(harness_tmpdirs_atexit);
    }
    harness_dirs = dirs;
    harness_dirs[harness_ndirs++] = copy;
    return path;
}

uint64_t harness_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

float harness_randf(uint64_t *state)
{
    return (float)((double)(harness_rand(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

int harness_error_has(const char *needle)
{
    const char *msg = harness_host()->last_error();
    if (strstr(msg, needle) != NULL) return 1;
    tap_diag("message: %s", msg);
    tap_diag("wanted:  %s", needle);
    return 0;
}

int harness_fd_of(const char *needle)
{
    for (int fd = 3; fd < 1024; fd++) {
        char link[64], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        const ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        if (strstr(target, needle) != NULL) return fd;
    }
    return -1;
}

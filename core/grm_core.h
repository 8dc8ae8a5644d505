/* core/grm_core.h - libgrmcore's internal interface, shared by grmhost and the tests.
 * Nothing here is part of the plugin ABI: plugins see only sdk/include/grm/. */
#ifndef GRM_CORE_H
#define GRM_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <grm/grm.h>

/* ---- errors (core/error.c) ---- */

/* Set this thread's last error and return `status` (STYLE.md §6). */
grm_status grm_errorf(grm_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
grm_status grm_verrorf(grm_status status, const char *fmt, va_list ap);
/* Put "prefix" in front of this thread's last error; returns nothing. */
void grm_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Append "suffix" (a fix, say) to this thread's last error; returns nothing. */
void grm_error_suffix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* This thread's last error message ("" when none). */
const char *grm_last_error(void);
/* Static name of a status ("GRM_EINVAL"). */
const char *grm_status_str(grm_status status);

/* Broken invariants only (never data, config or I/O); enabled in release builds. */
#define GRM_ASSERT(cond)                                                              \
    do {                                                                              \
        if (!(cond)) grm__assert_fail(#cond, __FILE__, __LINE__);                     \
    } while (0)
void grm__assert_fail(const char *cond, const char *file, int line)
    __attribute__((noreturn));

/* Hot loops over rows or scores: one clone per ISA, chosen once by the dynamic loader
 * (ifunc), at -O3 because gcc's -O2 vectoriser cost model ("very cheap") refuses loops
 * whose trip count is only known at run time. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define GRM__HOT_LOOP                                                                     \
    __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#else
#define GRM__HOT_LOOP
#endif

/* qsort/bsearch order of int64_t: ascending. */
static inline int grm__cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* ---- logging (core/log.c) ---- */

void grm__log(int32_t level, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void grm__log_set_level(int32_t level);   /* grm_log_level; default GRM_LOG_INFO */
/* s as printable text into buf [cap] (NUL-terminated, cut to fit): control bytes (ESC
 * among them), DEL and '\\' as \xNN, so that a name read from a file cannot drive the
 * terminal; bytes >= 0x80 (UTF-8) pass. Returns buf. */
const char *grm__printable(char *buf, size_t cap, const char *s);
int32_t grm__log_level(void);

/* ---- allocation and the thread pool (core/pool.c) ---- */

void *grm__alloc(grm_device device, size_t bytes, size_t align);
void grm__free(grm_device device, void *ptr);
/* Tests: make the n-th grm__alloc from now fail (0: never). */
void grm__alloc_fail_at(int64_t n);
/* Tests: host allocations made and not yet freed, so a test can check that an instance's
 * destroy frees everything its create and ops allocated. */
int64_t grm__alloc_live(void);
/* Start the pool with `threads` workers (0: number of online CPUs). Idempotent. */
grm_status grm__pool_init(int32_t threads);
void grm__pool_fini(void);
grm_status grm__parallel_for(int64_t n, int64_t grain, grm_range_fn fn, void *ctx);
/* The calling thread's parallel_for calls run inline from now on: for a thread other than
 * the trainer's (the data thread), which must not post work to the one pool meanwhile. */
void grm__pool_inline_thread(void);
int32_t grm__num_threads(void);

/* Step scratch arena: grm__scratch hands out memory until grm__scratch_reset. */
void *grm__scratch(size_t bytes, size_t align);
void grm__scratch_reset(void);
void grm__scratch_fini(void);

/* ---- the host API table (core/host.c) ---- */

/* The table handed to every plugin; static storage. */
const grm_host_api *grm__host_api(void);
/* Give config_get a source (the pipeline's config; NULL to clear). */
struct grm__config;
void grm__host_set_config(const struct grm__config *cfg);
void grm__host_set_comm(grm_comm_handle *comm);
/* The backend host->backend returns (NULL to clear). */
struct grm_backend;
void grm__host_set_backend(const struct grm_backend *backend);

/* ---- plugin loading (core/loader.c) ---- */

/* One loaded plugin. */
typedef struct grm__plugin {
    const grm_plugin_info *info;   /* static in the .so */
    char *path;                    /* owned: the .so it came from */
} grm__plugin;

typedef struct grm__registry grm__registry;

grm_status grm__registry_create(grm__registry **out);
void grm__registry_destroy(grm__registry *reg);
/* Load one .so and run every check of STYLE.md §5.4; on refusal the message is one line
 * naming the file, what it found, what was expected and the fix. */
grm_status grm__registry_load_file(grm__registry *reg, const char *path);
/* Load every plugin file in dir (and in dir/<subdir>/.libs for build trees). Stops at the
 * first refused plugin. A missing dir is GRM_ENOTFOUND. */
grm_status grm__registry_load_dir(grm__registry *reg, const char *dir);
/* The same, but only the plugin files among names [n] (n < 0: all). Only files named like
 * plugins (<kind>-<name>.so) are opened; one without the entry symbol is skipped with a
 * warning. */
grm_status grm__registry_load_dir_named(grm__registry *reg, const char *dir,
                                        const char *const *names, int n);
/* Load the default search path: GRM_PLUGIN_PATH (colon-separated), then the build tree
 * when grmhost runs from it, else the installed plugin directory. */
grm_status grm__registry_load_default(grm__registry *reg);
/* Where grmhost's own module `file` (the cuda backend's, GRM__CUDA_MODULE in
 * core/backend.h) is: in the parent of grmhost's own plugin directory as
 * grm__registry_load_default picks it (the build tree's, one beside the executable, the
 * installed one), i.e. $(libdir)/grm/<file> in an installation and kernels/.libs/<file> in
 * a build tree. GRM_PLUGIN_PATH is not searched: the module must come from grmhost's own
 * build. Returns 1 with the file's path in buf [cap], or 0 with buf the directory searched
 * (<dir>/<file> and <dir>/kernels/.libs/<file>). */
int grm__module_path(const char *file, char *buf, size_t cap);
/* The plugin named `name` or NULL (GRM_ENOTFOUND set, with a did-you-mean). */
const grm__plugin *grm__registry_find(const grm__registry *reg, const char *name);
/* Like find, but also checks the kind. */
grm_status grm__registry_get(const grm__registry *reg, const char *name, int32_t kind,
                             const grm__plugin **out);
int32_t grm__registry_count(const grm__registry *reg);
const grm__plugin *grm__registry_at(const grm__registry *reg, int32_t i);
/* Minimum struct_size of each kind's 1.0 ops table; 0 for an unknown kind. */
size_t grm__kind_ops_min_size(int32_t kind);
const char *grm__kind_name(int32_t kind);   /* "reader", ... or NULL */

/* ---- INI config (core/config.c) ---- */

typedef struct grm__kv {
    char *key;
    char *value;         /* ${NAME} already expanded */
    const char *file;    /* where the value came from: the file (an include's, as reached
                          * from the top file) or "--set"; the config owns it */
    int line;            /* line in `file` (for --set: which --set, 1-based) */
    int used;            /* set when a consumer reads the key */
    int serial;          /* the parse (one per file read, or -N for the N-th --set) */
    const char *over_file;   /* an earlier value this one overrides (NULL: none) */
    int over_line;
} grm__kv;

typedef struct grm__section {
    char *name;          /* "reader", "feature.item", ... */
    const char *file;    /* the file of its (latest) header */
    int line;
    grm__kv *kv;
    int nkv;
    int serial;
} grm__section;

typedef struct grm__config {
    char *path;          /* the top file, as given */
    grm__section *sec;
    int nsec;
    char **files;        /* owned: every name kv->file and section->file point to */
    int nfiles;
    int serials;         /* parses so far */
} grm__config;

/* Parse an INI file and the files it includes (`include = FILE` before the first section,
 * relative to the including file; nested, cycles refused; later keys override earlier
 * ones). Errors name file:line (also for lines too long for inih). */
grm_status grm__config_load(const char *path, grm__config **out);
/* Apply `--set section.key=value` (the index-th --set, 1-based): it overrides the files.
 * The section is everything before the last dot of the left side. */
grm_status grm__config_set(grm__config *cfg, const char *assignment, int index);
/* The keys of [checkpoint] that are the host's (pipeline.c reads them), not its plugin's:
 * a later source that changes the section's plugin keeps them. */
extern const char *const grm__checkpoint_host_keys[];
/* 1 when key of section is one of the host's own keys of a plugin's section. */
int grm__host_key(const char *section, const char *key);
/* Make the relative path of section.key relative to the file that gave it (an include's
 * directory; a --set value stays relative to the working directory). */
void grm__config_resolve_path(grm__config *cfg, const char *section, const char *key);
/* Print the merged INI; with origin, "; file:line" (and what it overrides) on each line. */
void grm__config_print(FILE *f, const grm__config *cfg, int origin);
/* XXH64 of the merged INI as grm__config_print prints it without origins: the same for the
 * same effective pipeline whatever files and --set produced it (0 when out of memory). */
uint64_t grm__config_hash(const grm__config *cfg);
/* kv's file, or `fallback` when kv is NULL (a defaulted key): for "%s:%d" messages. */
const char *grm__kv_file(const grm__kv *kv, const char *fallback);
/* Parse INI text from memory (tests); `name` is used in messages. */
grm_status grm__config_parse(const char *name, const char *text, grm__config **out);
void grm__config_destroy(grm__config *cfg);
grm__section *grm__config_section(const grm__config *cfg, const char *name);
grm__kv *grm__section_kv(const grm__section *sec, const char *key);

/* ---- declared parameters (core/params.c) ---- */

/* A filled plugin config: the struct the plugin's params describe. */
typedef struct grm__pconfig {
    void *data;                /* owned: config_size bytes */
    char **strings;            /* owned copies the struct points into */
    int nstrings;
} grm__pconfig;

/* Fill a config struct for `info` from the keys of `sec` (NULL: defaults only),
 * skipping keys listed in `skip` (NULL-terminated; keys the host itself consumes).
 * Unknown keys, missing required keys, bad types and out-of-range values are
 * GRM_EINVAL naming file:line, the key and the fix. `file` names the INI in messages. */
grm_status grm__params_fill(const grm_plugin_info *info, const grm__section *sec,
                            const char *file, const char *const *skip, grm__pconfig *out);
/* Fill from "key=value" strings (tests, CLI overrides). */
grm_status grm__params_fill_kv(const grm_plugin_info *info, const char *const *kvs, int n,
                               grm__pconfig *out);
void grm__pconfig_fini(grm__pconfig *pc);
/* Check a plugin's declarations: known types, fields inside config_size, enum choices,
 * no duplicate names, defaults that parse and lie in range. GRM_EABI naming path. */
grm_status grm__params_check_decls(const grm_plugin_info *info, const char *path);
/* Print the declared parameters of info (grmhost plugins NAME). */
void grm__params_print(FILE *f, const grm_plugin_info *info);
/* Print the resolved values of a filled config, one "key = value" per line. */
void grm__params_print_values(FILE *f, const grm_plugin_info *info, const void *config,
                              const char *indent);
/* Levenshtein distance, for did-you-mean. */
int grm__edit_distance(const char *a, const char *b);
/* Name in `names` [n] closest to `word` within a small distance, or NULL. */
const char *grm__closest(const char *word, const char *const *names, int n);

#endif /* GRM_CORE_H */

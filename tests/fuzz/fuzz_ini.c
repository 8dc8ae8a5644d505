/* tests/fuzz/fuzz_ini.c - libFuzzer target for the INI loader (core/config.c, inih through
 * its line reader) and the declared-parameter validation (core/params.c): the input is an
 * INI file; every section that parses is filled against a declaration table holding every
 * parameter type, with ranges, choices, a required key and list types, as a plugin's is.
 * Nothing may crash, leak or read out of bounds; errors are values. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grm_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fz_config {
    int64_t n;
    double lr;
    int32_t on;
    const char *path;
    int32_t mode;
    grm_int_list dims;
    grm_str_list cols;
    int64_t seed;
} fz_config;

static const grm_param_decl fz_params[] = {
    { "n", GRM_PARAM_INT, 0, offsetof(fz_config, n), "4", 1, 1e6, NULL, "a count" },
    { "lr", GRM_PARAM_DOUBLE, 0, offsetof(fz_config, lr), "0.01", 0, 1e3, NULL, "a rate" },
    { "on", GRM_PARAM_BOOL, 0, offsetof(fz_config, on), "false", GRM_PARAM_ANY, NULL, "a flag" },
    { "path", GRM_PARAM_STRING, 1, offsetof(fz_config, path), NULL, GRM_PARAM_ANY, NULL,
      "a required string" },
    { "mode", GRM_PARAM_ENUM, 0, offsetof(fz_config, mode), "uniform", GRM_PARAM_ANY,
      "uniform|popularity|in_batch", "an enum" },
    { "dims", GRM_PARAM_INT_LIST, 0, offsetof(fz_config, dims), "32,16", 1, 65536, NULL,
      "an int list" },
    { "cols", GRM_PARAM_STR_LIST, 0, offsetof(fz_config, cols), NULL, GRM_PARAM_ANY, NULL,
      "a word list" },
    { "seed", GRM_PARAM_INT, 0, offsetof(fz_config, seed), "42", GRM_PARAM_ANY, NULL,
      "unbounded" },
    { NULL, 0, 0, 0, NULL, 0, 0, NULL, NULL },
};

static const grm_plugin_info fz_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_TRANSFORM,
    .name = "fuzz-params",
    .version = "1.0.0",
    .description = "parameter declarations for the INI fuzzer",
    .params = fz_params,
    .config_size = sizeof(fz_config),
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    grm__config *cfg = NULL;
    if (grm__config_parse("fuzz.ini", text, &cfg) == GRM_OK) {
        static const char *const skip[] = { "plugin", NULL };
        for (int i = 0; i < cfg->nsec; i++) {
            grm__pconfig pc = { 0 };
            grm__section_kv(&cfg->sec[i], "path");
            if (grm__params_fill(&fz_info, &cfg->sec[i], cfg->path, skip, &pc) == GRM_OK) {
                const fz_config *c = pc.data;   /* every list entry the fill claims */
                volatile int64_t sink = c->n + c->dims.n + c->cols.n;
                for (int64_t k = 0; k < c->dims.n; k++) sink += c->dims.v[k];
                for (int64_t k = 0; k < c->cols.n; k++) sink += (int64_t)strlen(c->cols.v[k]);
                sink += (int64_t)strlen(c->path);
                (void)sink;
            }
            grm__pconfig_fini(&pc);
        }
        grm__config_section(cfg, "train");
        grm__config_destroy(cfg);
    }
    free(text);
    return 0;
}

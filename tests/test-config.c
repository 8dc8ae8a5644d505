/* tests/test-config.c - INI parsing (line numbers, overlong lines, repeated keys,
 * continuation lines) and declared-parameter validation (unknown keys with did-you-mean,
 * types, ranges, enums, lists, required keys), then whole-pipeline errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "pipeline.h"
#include "tap.h"

typedef struct tcfg {
    int64_t count;
    double rate;
    int32_t flag;
    const char *path;
    int32_t mode;
    grm_int_list dims;
    grm_str_list cols;
} tcfg;

static const grm_param_decl tparams[] = {
    { "count", GRM_PARAM_INT, 0, offsetof(tcfg, count), "7", GRM_PARAM_RANGE(1, 100), NULL, "n" },
    { "rate", GRM_PARAM_DOUBLE, 0, offsetof(tcfg, rate), "0.5", GRM_PARAM_RANGE(0, 1), NULL, "r" },
    { "flag", GRM_PARAM_BOOL, 0, offsetof(tcfg, flag), "false", GRM_PARAM_ANY, NULL, "f" },
    { "path", GRM_PARAM_STRING, 1, offsetof(tcfg, path), NULL, GRM_PARAM_ANY, NULL, "where" },
    { "mode", GRM_PARAM_ENUM, 0, offsetof(tcfg, mode), "fast", GRM_PARAM_ANY, "slow|fast|auto",
      "m" },
    { "dims", GRM_PARAM_INT_LIST, 0, offsetof(tcfg, dims), "4,8", GRM_PARAM_RANGE(1, 1024), NULL,
      "d" },
    { "cols", GRM_PARAM_STR_LIST, 0, offsetof(tcfg, cols), NULL, GRM_PARAM_ANY, NULL, "c" },
    { NULL },
};
static const grm_plugin_info tinfo = { GRM_PLUGIN_INFO_HEADER, .kind = GRM_KIND_READER,
                                       .name = "reader-test", .params = tparams,
                                       .config_size = sizeof(tcfg) };

/* Parse text, fill [s] into pc; returns the status. */
static grm_status fill_text(const char *text, grm__pconfig *pc)
{
    grm__config *cfg;
    grm_status st = grm__config_parse("t.ini", text, &cfg);
    if (st != GRM_OK) return st;
    st = grm__params_fill(&tinfo, grm__config_section(cfg, "s"), "t.ini", NULL, pc);
    grm__config_destroy(cfg);
    return st;
}

static void expect_fail(const char *text, grm_status want, const char *sub, const char *what)
{
    grm__pconfig pc;
    grm_status st = fill_text(text, &pc);
    int ok = st == want && strstr(grm_last_error(), sub);
    if (!ok) tap_diag("status %s, message: %s", grm_status_str(st), grm_last_error());
    tap_ok(ok, "%s", what);
    if (st == GRM_OK) grm__pconfig_fini(&pc);
}

static char tmpfile_path[4096];

static const char *write_tmp(const char *text)
{
    snprintf(tmpfile_path, sizeof tmpfile_path, "%s/p.ini", harness_tmpdir("config"));
    FILE *f = fopen(tmpfile_path, "w");
    fputs(text, f);
    fclose(f);
    return tmpfile_path;
}

static void expect_pipeline_fail(const char *text, const char *sub, const char *what)
{
    grm__pipeline *p = NULL;
    const char *path = write_tmp(text);
    grm_status st = grm__pipeline_load(path, &p);
    int ok = st != GRM_OK && strstr(grm_last_error(), sub) && strstr(grm_last_error(), path);
    if (!ok) tap_diag("status %s, message: %s", grm_status_str(st), grm_last_error());
    tap_ok(ok, "%s", what);
    grm__pipeline_destroy(p);
}

static const char *base_pipeline =
    "[reader]\nplugin = reader-text\npath = /dev/null\ncolumns = user:i64,item:i64,ts:i64\n"
    "[transform.seq]\nplugin = transform-basic\nsequence_by = user\nsequence_order = ts\n"
    "sequence_columns = item\n"
    "[feature.hist]\nsource = item\ndim = 16\n"
    "[dense.0]\nplugin = dense-mlp\ndims = 16\n";

int main(void)
{
    if (!harness_builddir()) tap_skip_all("GRM_TOP_BUILDDIR is not set; run through make check");
    setenv("GRM_PLUGIN_PATH", "", 1);
    harness_host();
    tap_plan(31);

    /* values and defaults */
    grm__pconfig pc;
    grm_status st = fill_text("[s]\npath = /x/y \nmode = AUTO\ncols = a, b ,c\nflag = yes\n"
                              "dims = 16,\n   32, 64\n", &pc);
    const tcfg *c = pc.data;
    tap_ok(st == GRM_OK && c->count == 7 && c->rate == 0.5 && c->flag == 1
           && !strcmp(c->path, "/x/y") && c->mode == 2 && c->cols.n == 3
           && !strcmp(c->cols.v[1], "b"), "values parse; defaults fill the rest");
    tap_ok(st == GRM_OK && c->dims.n == 3 && c->dims.v[0] == 16 && c->dims.v[2] == 64,
           "an indented continuation line extends a list");
    if (st == GRM_OK) grm__pconfig_fini(&pc);

    expect_fail("[s]\npath=x\ncuont = 3\n", GRM_EINVAL, "t.ini:3: [s] cuont: unknown key for "
                "reader-test; did you mean 'count'?", "unknown key names file:line and suggests "
                "the declared key");
    expect_fail("[s]\npath=x\nzzzzzzzz = 3\n", GRM_EINVAL, "`grmhost plugins reader-test` "
                "lists its keys", "a far-off unknown key points at grmhost plugins");
    expect_fail("[s]\ncount = 3\n", GRM_EINVAL, "t.ini:1: [s] is missing required key 'path'",
                "a missing required key names the section's line");
    expect_fail("[s]\npath=x\ncount = abc\n", GRM_EINVAL, "t.ini:3: [s] count: 'abc' is not an "
                "integer", "a non-integer is refused with its line");
    expect_fail("[s]\npath=x\ncount = 101\n", GRM_EINVAL, "101 is outside [1, 100]",
                "an out-of-range integer is refused with the range");
    expect_fail("[s]\npath=x\ncount = 1k\n", GRM_EINVAL, "t.ini:3: [s] count: '1k' is ambiguous "
                "(k = 1000 or 1024?)",
                "a bare k suffix is refused as ambiguous, never read as 1000");
    st = fill_text("[s]\npath = x\ndims = 1Ki, 0.5Ki\n", &pc);
    c = pc.data;
    tap_ok(st == GRM_OK && c->dims.n == 2 && c->dims.v[0] == 1024 && c->dims.v[1] == 512,
           "binary suffixes: 1Ki = 1024, 0.5Ki = 512");
    if (st == GRM_OK) grm__pconfig_fini(&pc);
    expect_fail("[s]\npath=x\nrate = 1.5\n", GRM_EINVAL, "1.5 is outside [0, 1]",
                "an out-of-range float is refused");
    expect_fail("[s]\npath=x\nflag = maybe\n", GRM_EINVAL, "'maybe' is not a boolean",
                "a bad boolean is refused");
    expect_fail("[s]\npath=x\nmode = quick\n", GRM_EINVAL, "'quick' is not one of slow|fast|auto",
                "a bad enum value lists the choices");
    expect_fail("[s]\npath=x\ndims = 4,zero\n", GRM_EINVAL, "entry 'zero' is not an integer",
                "a bad list entry is refused");
    expect_fail("[s]\npath=x\ndims = 4,0\n", GRM_EINVAL, "entry 0 is outside [1, 1024]",
                "an out-of-range list entry is refused");

    /* INI structure */
    {
        char longline[400];
        memset(longline, 'a', sizeof longline);
        memcpy(longline, "[s]\npath = ", 11);
        memcpy(longline + sizeof longline - 12, "\ncount = 3\n", 12);
        expect_fail(longline, GRM_EINVAL, "t.ini:2: line is 384 characters long",
                    "an overlong line is an error with its line number, never truncated");
    }
    expect_fail("[s]\npath=x\npath=y\n", GRM_EINVAL, "t.ini:3: key 'path' repeated in [s] "
                "(first at line 2)", "a repeated key is an error naming both lines");
    expect_fail("path=x\n[s]\n", GRM_EINVAL, "t.ini:1: key 'path' is outside any section",
                "a key before any section is an error");
    expect_fail("[s]\npath=x\nthis line has no equals\n", GRM_EINVAL, "t.ini:3: not a 'key = "
                "value' line", "a malformed line is an error with its number");
    expect_fail("[s]\npath=x\n[t]\na=1\n[s]\ncount=2\n", GRM_EINVAL, "t.ini:5: section [s] "
                "appears again (first at line 1)", "a repeated section is an error");
    {
        grm__config *cfg;
        grm_status s2 = grm__config_load("/nonexistent/grm.ini", &cfg);
        tap_ok(s2 == GRM_EIO && strstr(grm_last_error(), "/nonexistent/grm.ini: cannot open"),
               "a missing file is GRM_EIO naming it");
    }

    /* whole pipelines */
    {
        grm__pipeline *p = NULL;
        st = grm__pipeline_load(write_tmp(base_pipeline), &p);
        if (st != GRM_OK) tap_diag("%s", grm_last_error());
        tap_ok(st == GRM_OK && p->ndense == 1 && p->ntables == 1
               && !strcmp(p->set.item_table, "hist")
               && !strcmp(p->emb.plugin->info->name, "emb-static")
               && !strcmp(p->head.plugin->info->name, "head-sampled-softmax"),
               "a minimal pipeline loads with default store, head, optimizers");
        grm__pipeline_destroy(p);
    }
    {
        char text[2048];
        snprintf(text, sizeof text, "%s[traim]\nepochs = 2\n", base_pipeline);
        expect_pipeline_fail(text, "unknown section [traim]; did you mean [train]?",
                             "an unknown section suggests the closest");
        snprintf(text, sizeof text, "%s[train]\nepohcs = 2\n", base_pipeline);
        expect_pipeline_fail(text, "[train] epohcs: unknown key for [train]; did you mean "
                             "'epochs'?", "an unknown [train] key suggests the closest");
        snprintf(text, sizeof text, "%s[embedding]\nplugin = emb-statik\n", base_pipeline);
        expect_pipeline_fail(text, "no plugin named 'emb-statik'; did you mean 'emb-static'?",
                             "an unknown plugin name suggests the closest");
        snprintf(text, sizeof text, "%s[embedding]\nplugin = dense-mlp\n", base_pipeline);
        expect_pipeline_fail(text, "is a dense plugin, but a emb plugin is needed",
                             "a plugin of the wrong kind is refused");
        snprintf(text, sizeof text, "%s[dense.1]\nplugin = dense-mlp\ndims = 8\nactivaton = relu\n",
                 base_pipeline);
        expect_pipeline_fail(text, "[dense.1] activaton: unknown key for dense-mlp; did you mean "
                             "'activation'?", "a plugin's unknown key suggests its declared key");
        snprintf(text, sizeof text, "%s[dense.x]\nplugin = dense-mlp\n", base_pipeline);
        expect_pipeline_fail(text, "dense sections are numbered", "[dense.x] is refused");
        snprintf(text, sizeof text, "%s[feature.user]\nsource = user\ndim = 8\ntable = hist\n",
                 base_pipeline);
        expect_pipeline_fail(text, "shares table 'hist' but its dim",
                             "features sharing a table must agree on dim");
        expect_pipeline_fail("[reader]\nplugin = reader-text\npath=x\ncolumns=a:i64\n",
                             "no [dense.0] section", "a pipeline without dense blocks is refused");
    }
    // a message prefixed with where it came from names its plugin once
    grm_errorf(GRM_EIO, "emb-dynamic: /d/t.tier: writing record 7: No space left on device");
    grm_error_prefix("[embedding] %s: ", "emb-dynamic");
    tap_ok(strcmp(grm_last_error(), "[embedding] emb-dynamic: /d/t.tier: writing record 7: No "
                  "space left on device") == 0, "a prefix that ends with the plugin's name "
           "drops the message's own (%s)", grm_last_error());
    grm_errorf(GRM_EIO, "emb-dynamic: /d/t.tier: writing record 7: No space left on device");
    grm_error_prefix("[embedding] %s: trim: ", "emb-dynamic");
    const int once = strcmp(grm_last_error(), "[embedding] emb-dynamic: trim: /d/t.tier: "
                            "writing record 7: No space left on device") == 0;
    grm_errorf(GRM_EINVAL, "bad value: 3");
    grm_error_prefix("[train] batch: ");
    tap_ok(once && strcmp(grm_last_error(), "[train] batch: bad value: 3") == 0,
           "... and one that names it before the operation too (%s); a message whose first "
           "word the prefix lacks is kept whole", once ? "once" : "twice");
    return tap_done();
}

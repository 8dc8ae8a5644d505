/* core/export.c - a trained model leaving grm, the command-line side: `grmhost inspect` of
 * checkpoints (.grm, .safetensors: any ckpt-* plugin, picked by the file's extension through
 * core/checkpoint.h grm__ckpt_fmt_for), and the options of `grmhost recommend` and
 * `grmhost export`, whose work is core/recommend.c's. inspect's format plugin verifies the file
 * before the first tensor is listed; the XXH64 printed per tensor is computed here over its
 * raw bytes (a range of rows at a time where the format reads by rows), so the same model in
 * two formats prints the same checksums. */
#include "cli.h"
#include "checkpoint.h"
#include "grm_core.h"
#include "pipeline.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* ---- a few fields of the trainer's metadata JSON ---- */

/* The text of "key": value in the flat JSON object meta into buf [cap] (a string without
 * its quotes, a number as written); "" when absent. */
static const char *meta_field(const char *meta, const char *key, char *buf, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(meta, pat);
    buf[0] = '\0';
    if (!p) return buf;
    p += strlen(pat);
    while (*p == ' ') p++;
    size_t n = 0;
    if (*p == '"') {
        for (p++; *p && *p != '"' && n + 1 < cap; p++) buf[n++] = *p;
    } else {
        for (; *p && *p != ',' && *p != '}' && n + 1 < cap; p++) buf[n++] = *p;
    }
    buf[n] = '\0';
    return buf;
}

static const char *dtype_name(int32_t dtype)
{
    static const char *const names[] = { "?", "f32", "f16", "bf16", "i32", "i64", "u8" };
    return dtype >= 1 && dtype <= 6 ? names[dtype] : "?";
}

/* ---- inspect ---- */

/* Tensors are hashed as they arrive: whole (load), or a range of rows at a time (load_rows,
 * where the format has it: a checkpoint of a table larger than memory is listed in memory
 * of about one piece). */
typedef struct inspect_ctx {
    const char *path;
    int64_t n;
    uint64_t bytes;
    XXH64_state_t h;        /* of the tensor being received */
    int64_t got;            /* its rows so far */
} inspect_ctx;

static grm_status inspect_piece(void *user, const grm_named_tensor *t, int64_t row0,
                                int64_t rows)
{
    inspect_ctx *c = user;
    const int64_t m = t->tensor.ndim >= 1 ? t->tensor.shape[0] : 1;
    size_t bytes = grm__ckpt_row_bytes(&t->tensor);   /* of one row */
    if (row0 == 0) {
        XXH64_reset(&c->h, 0);
        c->got = 0;
    }
    grm_status st = grm__ckpt_piece_fits(c->path, t, row0, rows);
    if (st != GRM_OK) return st;
    if (row0 != c->got)
        return grm_errorf(GRM_EINTERNAL, "%s: tensor '%s': rows from %lld arrive out of order",
                          c->path, t->name, (long long)row0);
    if (m > 0 && bytes > 0) XXH64_update(&c->h, t->tensor.data, (size_t)m * bytes);
    c->got += m;
    if (c->got < rows) return GRM_OK;
    char shape[96] = "[";
    for (int32_t d = 0; d < t->tensor.ndim; d++) {
        size_t k = strlen(shape);
        snprintf(shape + k, sizeof shape - k, "%s%lld", d ? "," : "",
                 (long long)(d ? t->tensor.shape[d] : rows));
    }
    strncat(shape, "]", sizeof shape - strlen(shape) - 1);
    if (t->tensor.ndim >= 1) bytes *= (size_t)rows;
    printf("%-40s %-5s %-20s %12zu %016llx\n", t->name, dtype_name(t->tensor.dtype), shape,
           bytes, (unsigned long long)XXH64_digest(&c->h));
    c->n++;
    c->bytes += bytes;
    return GRM_OK;
}

static grm_status inspect_visit(void *user, const grm_named_tensor *t)
{
    return inspect_piece(user, t, 0, t->tensor.ndim >= 1 ? t->tensor.shape[0] : 1);
}

int grm__inspect_ckpt(const char *path)
{
    grm__registry *reg = NULL;
    grm__ckpt_fmt fmt = { 0 };
    char *meta = NULL;
    const size_t cap = 1 << 20;
    grm_status st = grm__registry_create(&reg);
    if (st == GRM_OK) st = grm__registry_load_default(reg);
    if (st == GRM_OK) st = grm__ckpt_fmt_for(reg, path, &fmt);
    if (st == GRM_OK && !(meta = malloc(cap))) st = grm_errorf(GRM_ENOMEM, "out of memory");
    // meta verifies the whole file first: nothing is printed from a file that fails.
    if (st == GRM_OK) st = fmt.ops->meta(fmt.inst, path, meta, cap);
    if (st == GRM_OK) {
        char v[256];
        printf("%s: %s checkpoint, verified by %s (its README lists the checks)\n", path,
               fmt.ext, fmt.plugin->info->name);
        printf("step:        %s\n", meta_field(meta, "step", v, sizeof v)[0] ? v : "-");
        printf("pipeline:    %s\n", meta_field(meta, "pipeline", v, sizeof v)[0] ? v : "-");
        printf("config hash: %s\n", meta_field(meta, "config_hash", v, sizeof v)[0] ? v : "-");
        printf("written by:  grm %s, rank %s of world size %s\n",
               meta_field(meta, "grm_version", v, sizeof v)[0] ? v : "-",
               meta_field(meta, "rank", v + 128, 64)[0] ? v + 128 : "-",
               meta_field(meta, "world_size", v + 192, 64)[0] ? v + 192 : "-");
        printf("metadata:    %s\n", meta);
        printf("%-40s %-5s %-20s %12s %s\n", "tensor", "dtype", "shape", "bytes", "xxh64");
        fflush(stdout);
        inspect_ctx c = { .path = path };
        st = GRM_HAS_OP(grm_ckpt_ops, fmt.ops, load_rows)
            ? fmt.ops->load_rows(fmt.inst, path, inspect_piece, &c)
            : fmt.ops->load(fmt.inst, path, inspect_visit, &c);
        if (st == GRM_OK)
            printf("%lld tensors, %llu bytes\n", (long long)c.n, (unsigned long long)c.bytes);
    }
    free(meta);
    grm__ckpt_fmt_fini(&fmt);
    grm__registry_destroy(reg);
    return st == GRM_OK ? 0 : grm__cli_fail(st);
}

/* ---- recommend ---- */

static const char usage_recommend[] =
    "usage: grmhost recommend [OPTIONS] FILE.ini --checkpoint DIR|FILE --k N\n"
    "\n"
    "Top-N catalog items for each user of the pipeline's data (or of --users), from a\n"
    "retrieval model's checkpoint: the user's state after their whole history (the query\n"
    "evaluation scores, for a sequence model its last token's output) dotted with every\n"
    "item's row (BLAS sgemm over blocks of [train] eval_batch users, one per thread),\n"
    "a partial sort, items the user already has excluded, ties to the lower item id.\n"
    "A catalog whose rows and scores pass [train] eval_memory_mb (a tiered table's) is\n"
    "scored a chunk at a time: every user's query first, each chunk looked up once, each\n"
    "user's N best merged; the output is the same, written once every chunk is scored.\n"
    "A progress bar is drawn on stderr when it is a terminal; the throughput is logged.\n"
    "\n"
    "options:\n"
    "  --checkpoint PATH    checkpoint directory (its newest) or file (required)\n"
    "  --k N                items per user (required; at most the catalog's size)\n"
    "  --users FILE         user ids, one per line ('#' comments); default: every user\n"
    "  --out FILE           write there (default: stdout)\n"
    "  --format tsv|jsonl   tsv (default): one line `user<TAB>rank<TAB>item<TAB>score` per\n"
    "                       item; jsonl: {\"user\":U,\"items\":[...],\"scores\":[...]} per user\n"
    "  --keep-history       keep items the user already has as candidates\n"
    "  -q, --quiet / -v, --verbose / -h, --help\n";

enum { OPT_CKPT = 300, OPT_K, OPT_USERS, OPT_OUT, OPT_FORMAT, OPT_KEEP, OPT_DTYPE, OPT_SINCE };

int grm__recommend_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "checkpoint", required_argument, NULL, OPT_CKPT },
        { "k", required_argument, NULL, OPT_K },
        { "users", required_argument, NULL, OPT_USERS },
        { "out", required_argument, NULL, OPT_OUT },
        { "format", required_argument, NULL, OPT_FORMAT },
        { "keep-history", no_argument, NULL, OPT_KEEP },
        { "quiet", no_argument, NULL, 'q' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    grm__run_opts o = { 0 };
    grm__rec_opts ro = { .out = stdout, .out_name = "stdout" };
    const char *out = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "qvh", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_CKPT: o.checkpoint = optarg; break;
        case OPT_K:
            if (!grm__cli_parse_count(optarg, 1, 1000000, &ro.k))
                return grm__cli_usage_error(usage_recommend, "--k: '%s' is not a count in "
                                            "[1, 1000000]", optarg);
            break;
        case OPT_USERS: ro.users_path = optarg; break;
        case OPT_OUT: out = optarg; break;
        case OPT_FORMAT:
            if (strcmp(optarg, "tsv") && strcmp(optarg, "jsonl"))
                return grm__cli_usage_error(usage_recommend, "--format: '%s'; expected tsv or "
                                            "jsonl", optarg);
            ro.jsonl = !strcmp(optarg, "jsonl");
            break;
        case OPT_KEEP: ro.keep_history = 1; break;
        case 'q': o.quiet = 1; break;
        case 'v': o.verbose = 1; break;
        case 'h': fputs(usage_recommend, stdout); return 0;
        default: return grm__cli_bad_option(usage_recommend);
        }
    }
    if (optind != argc - 1)
        return grm__cli_usage_error(usage_recommend, "expected exactly one FILE.ini");
    if (!o.checkpoint)
        return grm__cli_usage_error(usage_recommend, "recommend needs --checkpoint DIR|FILE");
    if (ro.k == 0) return grm__cli_usage_error(usage_recommend, "recommend needs --k N");
    if (o.quiet) grm__log_set_level(GRM_LOG_WARN);
    if (o.verbose) grm__log_set_level(GRM_LOG_DEBUG);
    ro.progress = !o.quiet && isatty(2);
    grm__pipeline *p;
    grm_status st = grm__pipeline_load(argv[optind], &p);
    if (st != GRM_OK) return grm__cli_fail(st);
    if (out && !(ro.out = fopen(out, "w"))) {
        st = grm_errorf(GRM_EIO, "%s: cannot create: %s", out, strerror(errno));
        return grm__cli_end(p, st);
    }
    if (out) ro.out_name = out;
    grm__rec_stats rs = { 0 };
    st = grm__recommend(p, &o, &ro, &rs);
    if (out && fclose(ro.out) != 0 && st == GRM_OK)
        st = grm_errorf(GRM_EIO, "%s: write error: %s", out, strerror(errno));
    if (st == GRM_OK && !o.quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "recommended to %lld users over %lld items in %.2f s "
                 "(%.0f users/s)", (long long)rs.users, (long long)rs.candidates, rs.seconds,
                 rs.seconds > 0 ? (double)rs.users / rs.seconds : 0.0);
    return grm__cli_end(p, st);
}

/* ---- export ---- */

static const char usage_export[] =
    "usage: grmhost export [OPTIONS] FILE.ini --checkpoint DIR|FILE --out DIR\n"
    "       grmhost export FILE.ini --since SEQ --out DIR\n"
    "\n"
    "Write what a server needs from a retrieval model's checkpoint into DIR, as SafeTensors\n"
    "files Python's `safetensors` package reads (share/doc/export.md, share/export_topk.py):\n"
    "  items.safetensors   item.ids [C] (the catalog), item.weight [C, D]: the rows as\n"
    "                      the head scores them (a cosine head's, l2norm, normalised)\n"
    "  users.safetensors   user.ids [U], user.state [U, D]: each user's state after their\n"
    "                      whole history, the query `grmhost recommend` scores\n"
    "  tables.safetensors  emb.<table>.ids, emb.<table>.weight: every embedding table's\n"
    "                      existing rows (a hash store's keys; a static table's trained rows)\n"
    "  dense.safetensors   every dense parameter, named dense.N.<parameter>\n"
    "  manifest.json       blocks in order with dims and parameters, head, features and\n"
    "                      their tables, id spaces and the merged-key layout, step, config\n"
    "                      hash, dtype, the scoring rule\n"
    "Optimizer state and trainer counters stay in the checkpoint.\n"
    "\n"
    "With --since SEQ, the incremental exports a run with [export] every = N wrote\n"
    "(delta-<seq>.safetensors in [export] dir, default [checkpoint] dir/export) are added\n"
    "up instead: DIR/tables.safetensors gets every row changed after delta SEQ\n"
    "(emb.<table>.ids, .weight, and .removed for keys gone since), DIR/dense.safetensors\n"
    "the newest delta's dense parameters. --since 0 is the whole model at the newest\n"
    "delta's step, equal to a full export of the checkpoint of that step.\n"
    "\n"
    "options:\n"
    "  --checkpoint PATH       checkpoint directory (its newest) or file (required)\n"
    "  --out DIR               output directory, created if missing (required)\n"
    "  --dtype fp32|fp16|bf16  floats as written (default fp32; ids stay int64)\n"
    "  --since SEQ             add up the deltas after SEQ (0: all) instead of a checkpoint\n"
    "  -q, --quiet / -v, --verbose / -h, --help\n";

int grm__export_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "checkpoint", required_argument, NULL, OPT_CKPT },
        { "out", required_argument, NULL, OPT_OUT },
        { "dtype", required_argument, NULL, OPT_DTYPE },
        { "since", required_argument, NULL, OPT_SINCE },
        { "quiet", no_argument, NULL, 'q' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    grm__run_opts o = { 0 };
    const char *out = NULL;
    int32_t dtype = GRM_DTYPE_F32;
    int64_t since = -1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "qvh", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_CKPT: o.checkpoint = optarg; break;
        case OPT_OUT: out = optarg; break;
        case OPT_DTYPE:
            if (!strcmp(optarg, "fp32")) dtype = GRM_DTYPE_F32;
            else if (!strcmp(optarg, "fp16")) dtype = GRM_DTYPE_F16;
            else if (!strcmp(optarg, "bf16")) dtype = GRM_DTYPE_BF16;
            else
                return grm__cli_usage_error(usage_export, "--dtype: '%s'; expected fp32, fp16 "
                                            "or bf16", optarg);
            break;
        case OPT_SINCE:
            if (!grm__cli_parse_count(optarg, 0, INT64_MAX, &since))
                return grm__cli_usage_error(usage_export, "--since: '%s' is not a delta "
                                            "sequence number (0, 1, ...)", optarg);
            break;
        case 'q': o.quiet = 1; break;
        case 'v': o.verbose = 1; break;
        case 'h': fputs(usage_export, stdout); return 0;
        default: return grm__cli_bad_option(usage_export);
        }
    }
    if (optind != argc - 1)
        return grm__cli_usage_error(usage_export, "expected exactly one FILE.ini");
    if (!o.checkpoint && since < 0)
        return grm__cli_usage_error(usage_export, "export needs --checkpoint DIR|FILE or "
                                    "--since SEQ");
    if (o.checkpoint && since >= 0)
        return grm__cli_usage_error(usage_export, "--checkpoint and --since are exclusive");
    if (!out) return grm__cli_usage_error(usage_export, "export needs --out DIR");
    if (o.quiet) grm__log_set_level(GRM_LOG_WARN);
    if (o.verbose) grm__log_set_level(GRM_LOG_DEBUG);
    grm__pipeline *p;
    grm_status st = grm__pipeline_load(argv[optind], &p);
    if (st != GRM_OK) return grm__cli_fail(st);
    int64_t nfiles = 0;
    if (since >= 0) {
        int64_t seq, step, rows;
        st = grm__delta_export(p, since, out, &seq, &step, &rows);
        if (st == GRM_OK && !o.quiet)
            grm__log(GRM_LOG_INFO, "grmhost", "deltas %lld..%lld (step %lld) added up into "
                     "%s: %lld rows", (long long)since + 1, (long long)seq, (long long)step,
                     out, (long long)rows);
    } else {
        st = grm__export(p, &o, out, dtype, &nfiles);
    }
    return grm__cli_end(p, st);
}

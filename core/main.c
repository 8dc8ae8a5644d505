/* core/main.c - grmhost, the command-line front end. The only place a status becomes an
 * exit code (0 ok, 1 failure, 2 usage or configuration error) and the only writer of
 * stdout (STYLE.md §6). */
#include "config.h"
#include "cli.h"
#include "gen.h"
#include "grmcol.h"
#include "pipeline.h"
#include "reshard.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const char usage_main[] =
    "usage: grmhost [--version] [--help] COMMAND [ARGS]\n"
    "\n"
    "Train generative recommendation models from a pipeline INI file; every component\n"
    "(reader, transforms, embedding store, dense blocks, optimizers, checkpoint format,\n"
    "communicator) is a plugin.\n"
    "\n"
    "commands:\n"
    "  train FILE.ini     train the pipeline (resumes from its newest checkpoint)\n"
    "  eval FILE.ini --checkpoint DIR|FILE\n"
    "                     evaluate a checkpoint: HR@K, NDCG@K on validation and test\n"
    "  check FILE.ini     validate the file and print the wired pipeline\n"
    "  profile FILE.ini   choose a tiered table's cache size from the data (the curve)\n"
    "  plugins [NAME]     list plugins, or show one plugin's parameters\n"
    "  generate           write the synthetic sample data of the quick start\n"
    "  launch -n N FILE.ini [train options]\n"
    "                     train with N ranks under mpirun (comm-mpi, comm-nccl)\n"
    "  convert IN OUT.grmcol\n"
    "                     convert delimited text (or .zst) to the grmcol columnar format\n"
    "  inspect FILE       check a grmcol file (schema, row groups, sizes) or a checkpoint\n"
    "                     (.grm, .safetensors: step, config hash, tensors, checksums)\n"
    "  export FILE.ini --checkpoint C --out DIR [--dtype fp32|fp16|bf16]\n"
    "                     write item/user tables, dense weights and a manifest as\n"
    "                     SafeTensors files for serving and Python\n"
    "  recommend FILE.ini --checkpoint C --k N\n"
    "                     top-N items per user of a retrieval model, TSV or JSON lines\n"
    "  reshard FILE.ini -n M\n"
    "                     rewrite the newest checkpoint of [checkpoint] dir for M ranks\n"
    "  plot METRICS.jsonl [--out F.png|F.svg]\n"
    "                     draw the loss and validation metrics against the step (gnuplot)\n"
    "  help [COMMAND]     this text, or COMMAND's (the same as grmhost COMMAND --help)\n"
    "\n"
    "`grmhost COMMAND --help` (or `grmhost help COMMAND`) describes each command; each has\n"
    "a man page, grmhost-COMMAND(1). Plugins are searched in\n"
    "GRM_PLUGIN_PATH (colon-separated), then [pipeline] plugin_dirs, then the build tree\n"
    "(when grmhost runs from it) or " GRM_PLUGIN_DIR ".\n"
    "Exit status: 0 success, 1 failure, 2 usage or configuration error.\n";

static const char usage_train[] =
    "usage: grmhost train [OPTIONS] FILE.ini\n"
    "\n"
    "Read the data, train, evaluate on the validation and test splits (leave-one-out,\n"
    "full ranking) against a most-popular baseline, and print a summary table on stdout.\n"
    "If [checkpoint] dir holds checkpoints, training resumes from the newest one,\n"
    "written by as many ranks as this job or by N ranks when this job has a\n"
    "multiple of N (each rank reads one file); other world sizes: grmhost reshard.\n"
    "SIGINT or SIGTERM finish the current step, write a checkpoint and exit 0; during\n"
    "an evaluation they stop it and exit 1 (train resumes from the newest checkpoint);\n"
    "a second signal ends the process at once. A run early stopping ended is finished:\n"
    "train tests its best model again and trains nothing. One job at a time may train\n"
    "in a [checkpoint] dir (dir/.grmhost.lock names the holder's pid and host).\n"
    "\n"
    "options:\n"
    "  --set SECTION.KEY=VALUE\n"
    "                       override one key of the file (repeatable; later wins),\n"
    "                       e.g. --set train.batch_size=512 --set dense.0.dims=128,64\n"
    "  --fresh              start from step 0; an earlier run's checkpoints are moved\n"
    "                       to DIR/replaced-by-fresh-<UTC time>/, never deleted, and a\n"
    "                       non-empty metrics file moves aside to FILE.N (logged)\n"
    "  --metrics-out FILE   append every metric as a JSON object per line ({\"time\",\n"
    "                       \"run\",\"pipeline\",\"step\",\"split\",\"name\",\"value\"}: UTC\n"
    "                       time, run id, hash of the merged INI); overrides [train]\n"
    "                       metrics_out; with --fresh an old file moves to FILE.N\n"
    "  --max-steps N        stop after N more steps (a checkpoint is written)\n"
    "  --metrics-port N     serve the latest value of every metric in Prometheus' text\n"
    "                       format on http://127.0.0.1:N/metrics while training runs\n"
    "                       (0: any free port; the log names it)\n"
    "  --profile            at the end, print where the time went: read, balance, batch,\n"
    "                       data wait, lookup, dense forward, head (loss), dense backward,\n"
    "                       optimizers, checkpoint, evaluation, and how much of the batch\n"
    "                       assembly the data thread hid behind compute ([train] prefetch),\n"
    "                       and the step's MFU: the flops the blocks and the head count,\n"
    "                       against the SGEMM peak of the same threads measured then\n"
    "  --batches-in-memory  benchmark: assemble every batch of the run before step 1, so\n"
    "                       the loop never waits for data (memory for all of them; use\n"
    "                       with --max-steps); the peer of bench/bench_pipeline.sh\n"
    "  -q, --quiet          print only errors and the final table\n"
    "  -v, --verbose        print debug messages\n"
    "  -h, --help           this text\n";

static const char usage_eval[] =
    "usage: grmhost eval [OPTIONS] FILE.ini --checkpoint DIR|FILE\n"
    "\n"
    "Load the newest checkpoint in DIR (or FILE), evaluate it on the validation and test\n"
    "splits of the pipeline's data, and print HR@K, NDCG@K and MRR beside the\n"
    "most-popular baseline.\n"
    "\n"
    "options:\n"
    "  --checkpoint PATH    checkpoint directory or file (required)\n"
    "  --set SECTION.KEY=VALUE  override one key of the file (repeatable)\n"
    "  --metrics-out FILE   append metrics as JSON lines\n"
    "  -q, --quiet / -v, --verbose / -h, --help\n";

static const char usage_check[] =
    "usage: grmhost check [--origin] [--set SECTION.KEY=VALUE ...] FILE.ini\n"
    "\n"
    "Validate the pipeline file: every section and key against the plugins' declared\n"
    "parameters (unknown keys, wrong types, out-of-range values and missing required keys\n"
    "are errors naming the file and line), then every wiring check `train` makes before\n"
    "step 1: the reader opens its input and the transforms build their schema (a missing\n"
    "data file, a [train] or [feature.*] column the data does not have), the dense blocks\n"
    "are created on their input width (the last block's output against the item dim or\n"
    "the number of tasks), the head against the task. No data is read beyond the schema.\n"
    "Print the wired pipeline: each stage, its plugin, file and resolved parameters, then\n"
    "the merged INI (the file with its includes and --set applied).\n"
    "Exit 0 when valid, 2 for a configuration error, 1 for another failure.\n"
    "\n"
    "A file composes others: `include = base.ini` lines before the first [section] read\n"
    "base.ini (relative to the file; nested; cycles refused) first, and a key given again\n"
    "later overrides it. ${NAME} and ${NAME:-default} in a value expand from the\n"
    "environment. [reader] path is relative to the file that names it.\n"
    "\n"
    "options:\n"
    "  --origin             after each key of the merged INI, where its value came from\n"
    "                       (file:line, or --set:N), and the value it overrides\n"
    "  --set SECTION.KEY=VALUE\n"
    "                       override one key (repeatable; later wins)\n"
    "  -h, --help           this text\n";

static const char usage_plugins[] =
    "usage: grmhost plugins [NAME]\n"
    "\n"
    "Without NAME, list every plugin found (name, kind, version, ABI, file). With NAME,\n"
    "print its description and parameters (type, range, default, help). The names\n"
    "[pipeline], [train], [checkpoint] and [feature.*] describe grmhost's own sections.\n";

static const char usage_generate[] =
    "usage: grmhost generate [OPTIONS]\n"
    "\n"
    "Write synthetic interaction rows `user<TAB>item<TAB>ts` (with a header line):\n"
    "Zipf item popularity within taste clusters, long-tail sequence lengths, timestamps\n"
    "and sequential structure. The same options always write the same bytes.\n"
    "\n"
    "options:\n"
    "  --out FILE        output file (default: stdout)\n"
    "  --users N         users (default 3000)\n"
    "  --items N         items (default 2000)\n"
    "  --clusters N      taste clusters (default 40)\n"
    "  --seed N          seed (default 1)\n";

static const char usage_profile[] =
    "usage: grmhost profile [OPTIONS] FILE.ini\n"
    "\n"
    "Choose the cache of emb-dynamic's tiered mode from the data: run the pipeline's first\n"
    "batches with [embedding] cache_bytes = auto, the backing files in a scratch directory\n"
    "removed afterwards, and nothing else kept (no checkpoint, metrics, export or\n"
    "evaluation), and print for each table the LRU hit rate of the re-references at cache\n"
    "sizes of 1/32 .. 1 of the rows seen (the miss-ratio curve, from every access's stack\n"
    "distance), the size that reaches the target hit rate, and the choice: never below two\n"
    "batches' working set (the batch in training and the one prefetched), and 8/7 of it,\n"
    "since a full cache is cut to 7/8 of its budget. Put the printed\n"
    "cache_bytes in [embedding], or keep cache_bytes = auto, which makes the same choice\n"
    "at the start of every run and then, from a hashed sample of the ids (SHARDS), grows\n"
    "the cache when reuse farther apart than the profiled batches needs it (logged after\n"
    "2, 4, 8, ... times their number). The steps train as `train` would (negatives\n"
    "included).\n"
    "\n"
    "options:\n"
    "  --batches N          profile the first N batches (default [embedding]\n"
    "                       profile_batches: 20); reuse farther apart is not seen\n"
    "                       here (a training run's sample sees it)\n"
    "  --target R           hit rate to reach, 0.01 .. 1 (default [embedding]\n"
    "                       target_hit_rate: 0.9)\n"
    "  --set SECTION.KEY=VALUE\n"
    "                       override one key (repeatable; later wins)\n"
    "  -h, --help           this text\n"
    "Exit 0 when every table was profiled, 2 for a configuration error (a store other than\n"
    "emb-dynamic), 1 for another failure.\n";

static const char usage_reshard[] =
    "usage: grmhost reshard [OPTIONS] FILE.ini -n M\n"
    "\n"
    "Rewrite the checkpoint of the pipeline's [checkpoint] dir written by N ranks (dir/\n"
    "step-S.EXT for one rank, dir/rank-R-of-N/step-S.EXT for several) for M ranks, so that\n"
    "`grmhost train` (or `launch -n M`) resumes it on M ranks. Every embedding row moves to\n"
    "the rank that owns it among M ranks (a hash of its key, [train] sparse_group\n"
    "respected); dense parameters, optimizer and trainer state are copied after checking\n"
    "that all N ranks hold the same values. The INI must be the one that wrote the\n"
    "checkpoints: its checkpoint plugin reads and writes the files, its tables name the rows.\n"
    "Every rank must have written step S. With a format that reads and writes by rows\n"
    "(ckpt-grm, ckpt-safetensors), the rows of hash tables (emb-dynamic) are never held\n"
    "whole: each source file is read twice, the rows go through spill files in\n"
    "dir/.reshard-to-M (the table's size, uncompressed; unlinked from the start) and memory\n"
    "holds about 60 bytes a row (its key and where it goes) beside a few 16 MiB pieces, so\n"
    "a table larger than memory is resharded; otherwise the step's N files are read whole\n"
    "into memory.\n"
    "best.EXT (early stopping) is resharded too when every rank has one. The new files are\n"
    "written under temporary names and renamed into place; then the N-rank checkpoints are\n"
    "moved (never deleted) to dir/resharded-from-N. A summary of the rows per table and of\n"
    "those that changed rank is printed on stdout.\n"
    "Not needed for M a multiple of N: `grmhost train` on M ranks then reads, on rank r,\n"
    "rank r mod N's file alone and keeps the rows rank r owns (MTGRBoost §5.2).\n"
    "\n"
    "options:\n"
    "  -n, --ranks M     ranks of the new checkpoint (required)\n"
    "  --from N          ranks of the source, when dir holds several world sizes\n"
    "  --step S          reshard step S instead of the newest (every rank must have it)\n"
    "  --force           write even when dir already holds checkpoints of M ranks\n"
    "  --in-memory       hold the whole step in memory, no spill files (faster when it fits)\n"
    "  -q, --quiet       print only errors and the summary\n"
    "  -h, --help        this text\n";

enum { OPT_FRESH = 256, OPT_METRICS, OPT_CKPT, OPT_MAXSTEPS, OPT_OUT, OPT_USERS, OPT_ITEMS,
       OPT_CLUSTERS, OPT_SEED, OPT_PROFILE, OPT_FROM, OPT_STEP, OPT_FORCE, OPT_INMEM, OPT_SET,
       OPT_ORIGIN, OPT_PORT, OPT_BATCHES, OPT_TARGET };

enum { MAX_SETS = 64 };   /* --set options of one command */

static int cmd_run(int argc, char **argv, int eval)
{
    static const struct option longopts[] = {
        { "fresh", no_argument, NULL, OPT_FRESH },
        { "set", required_argument, NULL, OPT_SET },
        { "metrics-out", required_argument, NULL, OPT_METRICS },
        { "checkpoint", required_argument, NULL, OPT_CKPT },
        { "max-steps", required_argument, NULL, OPT_MAXSTEPS },
        { "profile", no_argument, NULL, OPT_PROFILE },
        { "batches-in-memory", no_argument, NULL, OPT_INMEM },
        { "metrics-port", required_argument, NULL, OPT_PORT },
        { "quiet", no_argument, NULL, 'q' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *usage = eval ? usage_eval : usage_train;
    grm__run_opts o = { 0 };
    const char *sets[MAX_SETS];
    int nsets = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "qvh", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_SET:
            if (nsets == MAX_SETS)
                return grm__cli_usage_error(usage, "more than %d --set options", MAX_SETS);
            sets[nsets++] = optarg;
            break;
        case OPT_FRESH: o.fresh = 1; break;
        case OPT_PROFILE: o.profile = 1; break;
        case OPT_INMEM: o.batches_in_memory = 1; break;
        case OPT_METRICS: o.metrics_out = optarg; break;
        case OPT_PORT: {
            int64_t port;
            if (eval || !grm__cli_parse_count(optarg, 0, 65535, &port))
                return grm__cli_usage_error(usage, "--metrics-port: '%s' is not a port (0 .. "
                                            "65535; train only)", optarg);
            o.serve_metrics = 1;
            o.metrics_port = (int)port;
            break;
        }
        case OPT_CKPT: o.checkpoint = optarg; break;
        case OPT_MAXSTEPS:
            if (!grm__cli_parse_count(optarg, 0, INT64_MAX, &o.max_steps))
                return grm__cli_usage_error(usage, "--max-steps: '%s' is not a count", optarg);
            break;
        case 'q': o.quiet = 1; break;
        case 'v': o.verbose = 1; break;
        case 'h': fputs(usage, stdout); return 0;
        default: return grm__cli_bad_option(usage);
        }
    }
    if (optind != argc - 1)
        return grm__cli_usage_error(usage, "%s", optind >= argc ? "expected a pipeline FILE.ini"
                                                                : "expected exactly one FILE.ini");
    if (eval && !o.checkpoint)
        return grm__cli_usage_error(usage, "eval needs --checkpoint DIR|FILE");
    if (o.quiet) grm__log_set_level(GRM_LOG_WARN);
    if (o.verbose) grm__log_set_level(GRM_LOG_DEBUG);
    grm__pipeline *p;
    grm_status st = grm__pipeline_load_with(argv[optind], sets, nsets, &p);
    if (st != GRM_OK) return grm__cli_fail(st);
    st = eval ? grm__eval(p, &o) : grm__train(p, &o);
    return grm__cli_end(p, st);
}

static int cmd_profile(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "batches", required_argument, NULL, OPT_BATCHES },
        { "target", required_argument, NULL, OPT_TARGET },
        { "set", required_argument, NULL, OPT_SET },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *sets[MAX_SETS];
    int nsets = 0, c;
    int64_t batches = 0;
    const char *target = NULL;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_BATCHES:
            if (!grm__cli_parse_count(optarg, 1, 100000, &batches))
                return grm__cli_usage_error(usage_profile, "--batches: '%s' is not a count "
                                            "in 1 .. 100000", optarg);
            break;
        case OPT_TARGET: target = optarg; break;
        case OPT_SET:
            if (nsets >= MAX_SETS - 8)
                return grm__cli_usage_error(usage_profile, "more than %d --set options",
                                            MAX_SETS - 8);
            sets[nsets++] = optarg;
            break;
        case 'h': fputs(usage_profile, stdout); return 0;
        default: return grm__cli_bad_option(usage_profile);
        }
    }
    if (optind != argc - 1)
        return grm__cli_usage_error(usage_profile, "expected exactly one FILE.ini");
    char scratch[] = "/tmp/grm-profile-XXXXXX";
    if (!mkdtemp(scratch)) {
        fprintf(stderr, "grmhost: profile: cannot make a scratch directory under /tmp: %s\n",
                strerror(errno));
        return 1;
    }
    const int nuser = nsets;
    char backing[64], nb[64], tg[64];
    snprintf(backing, sizeof backing, "embedding.backing=%s", scratch);
    sets[nsets++] = backing;
    sets[nsets++] = "embedding.cache_bytes=auto";
    if (batches) {
        snprintf(nb, sizeof nb, "embedding.profile_batches=%lld", (long long)batches);
        sets[nsets++] = nb;
    }
    if (target) {
        snprintf(tg, sizeof tg, "embedding.target_hit_rate=%s", target);
        sets[nsets++] = tg;
    }
    sets[nsets++] = "checkpoint.dir=";
    sets[nsets++] = "train.metrics_out=";
    sets[nsets++] = "train.early_stop=0";
    /* the pipeline as given first: its store must be emb-dynamic before the keys of its
     * tiered mode are set */
    grm__pipeline *p = NULL;
    grm_status st = grm__pipeline_load_with(argv[optind], sets, nuser, &p);
    if (st == GRM_OK && strcmp(p->emb.plugin->info->name, "emb-dynamic") != 0)
        st = grm_errorf(GRM_EINVAL, "%s: [embedding] plugin is %s; profile chooses the cache "
                        "of emb-dynamic's tiered mode (plugin = emb-dynamic)", argv[optind],
                        p->emb.plugin->info->name);
    grm__pipeline_destroy(p);
    p = NULL;
    if (st == GRM_OK) st = grm__pipeline_load_with(argv[optind], sets, nsets, &p);
    if (st == GRM_OK) {
        /* the batches profiled, one more in which the choice is made */
        grm__run_opts o = { .fresh = 1, .ids_only = 1 };
        int64_t pb = 20;
        const grm__section *es = grm__config_section(p->cfg, "embedding");
        const grm__kv *kv = es ? grm__section_kv(es, "profile_batches") : NULL;
        if (kv) pb = strtoll(kv->value, NULL, 10);
        o.max_steps = pb + 1;
        grm__log(GRM_LOG_INFO, "grmhost", "profile: the first %lld batches of %s with "
                 "cache_bytes = auto (backing files in %s, removed after)", (long long)pb,
                 argv[optind], scratch);
        st = grm__train(p, &o);
    }
    const int rc = grm__cli_end(p, st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);   /* mkdtemp's name: no quote in it */
    if (system(cmd) != 0)
        fprintf(stderr, "grmhost: warning: profile: could not remove %s\n", scratch);
    return rc;
}

static int cmd_check(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "origin", no_argument, NULL, OPT_ORIGIN },
        { "set", required_argument, NULL, OPT_SET },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *sets[MAX_SETS];
    int nsets = 0, origin = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_ORIGIN: origin = 1; break;
        case OPT_SET:
            if (nsets == MAX_SETS)
                return grm__cli_usage_error(usage_check, "more than %d --set options",
                                            MAX_SETS);
            sets[nsets++] = optarg;
            break;
        case 'h': fputs(usage_check, stdout); return 0;
        default: return grm__cli_bad_option(usage_check);
        }
    }
    if (optind != argc - 1)
        return grm__cli_usage_error(usage_check, "expected exactly one FILE.ini");
    grm__pipeline *p;   /* NULL when the load fails */
    grm_status st = grm__pipeline_load_with(argv[optind], sets, nsets, &p);
    if (st == GRM_OK) st = grm__check(p);
    if (st != GRM_OK) return grm__cli_end(p, st);
    grm__pool_fini();
    grm__pipeline_print(stdout, p);
    printf("\nmerged INI (%s%s):\n\n", argv[optind], nsets ? " with --set" : "");
    grm__config_print(stdout, p->cfg, origin);
    grm__pipeline_destroy(p);
    return 0;
}

static int cmd_plugins(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage_plugins, stdout);
        return 0;
    }
    if (argc > 2) return grm__cli_usage_error(usage_plugins, "expected at most one NAME");
    grm__registry *reg;
    grm_status st = grm__registry_create(&reg);
    if (st == GRM_OK) st = grm__registry_load_default(reg);
    if (st != GRM_OK) {
        grm__registry_destroy(reg);
        return grm__cli_fail(st);
    }
    int rc = 0;
    if (argc == 1) {
        printf("%-24s %-10s %-8s %-5s %s\n", "NAME", "KIND", "VERSION", "ABI", "FILE");
        for (int32_t i = 0; i < grm__registry_count(reg); i++) {
            const grm__plugin *pl = grm__registry_at(reg, i);
            printf("%-24s %-10s %-8s %u.%-3u %s\n", pl->info->name,
                   grm__kind_name(pl->info->kind), pl->info->version, pl->info->abi_major,
                   pl->info->abi_minor, pl->path);
        }
    } else {
        const grm_plugin_info *info = NULL;
        const char *path = "grmhost";
        for (int i = 0; grm__host_sections[i]; i++)
            if (!strcmp(grm__host_sections[i]->name, argv[1])) info = grm__host_sections[i];
        if (!info) {
            const grm__plugin *pl = grm__registry_find(reg, argv[1]);
            if (!pl) {
                rc = grm__cli_fail(GRM_ENOTFOUND);
                goto out;
            }
            info = pl->info;
            path = pl->path;
        }
        printf("%s %s (%s, ABI %u.%u)\n  %s\n  file: %s\n\nparameters:\n", info->name,
               info->version ? info->version : GRM_VERSION_STRING,
               info->kind ? grm__kind_name(info->kind) : "grmhost section", info->abi_major,
               info->abi_minor, info->description ? info->description : "", path);
        grm__params_print(stdout, info);
    }
out:
    grm__registry_destroy(reg);
    return rc;
}

static int cmd_generate(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "out", required_argument, NULL, OPT_OUT },
        { "users", required_argument, NULL, OPT_USERS },
        { "items", required_argument, NULL, OPT_ITEMS },
        { "clusters", required_argument, NULL, OPT_CLUSTERS },
        { "seed", required_argument, NULL, OPT_SEED },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    grm__gen_opts o = { .users = 3000, .items = 2000, .clusters = 40, .min_len = 5,
                        .max_len = 200, .seed = 1 };
    const char *out = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int64_t v = 0;
        if (c != 'h' && c != OPT_OUT && c != '?'
            && !grm__cli_parse_count(optarg, 1, INT64_MAX, &v))
            return grm__cli_usage_error(usage_generate, "'%s' is not a positive integer", optarg);
        switch (c) {
        case OPT_OUT: out = optarg; break;
        case OPT_USERS: o.users = v; break;
        case OPT_ITEMS: o.items = v; break;
        case OPT_CLUSTERS: o.clusters = v; break;
        case OPT_SEED: o.seed = (uint64_t)v; break;
        case 'h': fputs(usage_generate, stdout); return 0;
        default: return grm__cli_bad_option(usage_generate);
        }
    }
    if (optind != argc)
        return grm__cli_usage_error(usage_generate, "unexpected argument '%s'", argv[optind]);
    if (o.clusters > o.items) o.clusters = o.items;
    FILE *f = stdout;
    char tmp[4096];
    if (out) {
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        f = fopen(tmp, "w");
        if (!f) {
            fprintf(stderr, "grmhost: %s: cannot create: %s\n", tmp, strerror(errno));
            return 1;
        }
    }
    grm_status st = grm__generate(&o, f);
    if (out) {
        if (fclose(f) != 0 && st == GRM_OK)
            st = grm_errorf(GRM_EIO, "%s: write failed: %s", tmp, strerror(errno));
        if (st == GRM_OK && rename(tmp, out) != 0)
            st = grm_errorf(GRM_EIO, "%s: rename failed: %s", out, strerror(errno));
        if (st != GRM_OK) remove(tmp);
    }
    return st == GRM_OK ? 0 : grm__cli_fail(st);
}

static int cmd_reshard(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "ranks", required_argument, NULL, 'n' },
        { "from", required_argument, NULL, OPT_FROM },
        { "step", required_argument, NULL, OPT_STEP },
        { "force", no_argument, NULL, OPT_FORCE },
        { "in-memory", no_argument, NULL, OPT_INMEM },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    grm__reshard_opts o = { .to = 0, .from = 0, .step = -1 };
    int64_t v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
        case OPT_FROM:
            if (!grm__cli_parse_count(optarg, 1, 65536, &v))
                return grm__cli_usage_error(usage_reshard,
                                            "'%s' is not a rank count (1 .. 65536)", optarg);
            if (c == 'n') o.to = (int32_t)v;
            else o.from = (int32_t)v;
            break;
        case OPT_STEP:
            if (!grm__cli_parse_count(optarg, 0, INT64_MAX, &o.step))
                return grm__cli_usage_error(usage_reshard, "--step: '%s' is not a step", optarg);
            break;
        case OPT_FORCE: o.force = 1; break;
        case OPT_INMEM: o.in_memory = 1; break;
        case 'q': o.quiet = 1; break;
        case 'h': fputs(usage_reshard, stdout); return 0;
        default: return grm__cli_bad_option(usage_reshard);
        }
    }
    if (optind != argc - 1)
        return grm__cli_usage_error(usage_reshard, "%s",
                                    optind >= argc ? "expected a pipeline FILE.ini"
                                                   : "expected exactly one FILE.ini");
    if (o.to == 0)
        return grm__cli_usage_error(usage_reshard, "-n M (the new rank count) is required");
    if (o.quiet) grm__log_set_level(GRM_LOG_WARN);
    grm_status st = grm__reshard(argv[optind], &o, stdout);
    return st == GRM_OK ? 0 : grm__cli_fail(st);
}

static const char *const commands[] = { "train", "eval", "check", "plugins", "generate",
                                        "convert", "inspect", "launch", "reshard", "plot",
                                        "recommend", "export", "profile" };

/* Run COMMAND (argv[0]) with its arguments; -1 when there is no such command. */
static int run_command(int argc, char **argv)
{
    const char *cmd = argv[0];
    if (!strcmp(cmd, "train")) return cmd_run(argc, argv, 0);
    if (!strcmp(cmd, "eval")) return cmd_run(argc, argv, 1);
    if (!strcmp(cmd, "check")) return cmd_check(argc, argv);
    if (!strcmp(cmd, "profile")) return cmd_profile(argc, argv);
    if (!strcmp(cmd, "plugins")) return cmd_plugins(argc, argv);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc, argv);
    if (!strcmp(cmd, "convert")) return grm__convert_main(argc, argv);
    if (!strcmp(cmd, "inspect")) return grm__inspect_main(argc, argv);
    if (!strcmp(cmd, "launch")) return grm__launch_main(argc, argv);
    if (!strcmp(cmd, "reshard")) return cmd_reshard(argc, argv);
    if (!strcmp(cmd, "plot")) return grm__plot_main(argc, argv);
    if (!strcmp(cmd, "recommend")) return grm__recommend_main(argc, argv);
    if (!strcmp(cmd, "export")) return grm__export_main(argc, argv);
    return -1;
}

static int unknown_command(const char *cmd)
{
    const char *near = grm__closest(cmd, commands, (int)(sizeof commands / sizeof *commands));
    fprintf(stderr, "grmhost: unknown command '%s'%s%s%s\n\n%s", cmd,
            near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", usage_main);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("grmhost %s (plugin ABI %d.%d)\n", GRM_VERSION_STRING, GRM_ABI_MAJOR,
               GRM_ABI_MINOR);
        return 0;
    }
    if (!strcmp(cmd, "help") && argc == 3) {   /* grmhost help train = grmhost train --help */
        char help[] = "--help";
        char *hargv[] = { argv[2], help, NULL };
        int rc = run_command(2, hargv);
        return rc >= 0 ? rc : unknown_command(argv[2]);
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        if (argc > 3) {
            fprintf(stderr, "grmhost: help takes at most one COMMAND\n\n%s", usage_main);
            return 2;
        }
        fputs(usage_main, stdout);
        return 0;
    }
    int rc = run_command(argc - 1, argv + 1);
    return rc >= 0 ? rc : unknown_command(cmd);
}

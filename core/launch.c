/* core/launch.c - `grmhost launch -n N FILE.ini [train options]`: run N ranks of
 * `grmhost train` under Open MPI's mpirun (DESIGN.md §6: MPI launches the ranks; the
 * pipeline's [distributed] plugin = comm-mpi or comm-nccl joins them). A thin wrapper: it
 * builds the mpirun command line and execs it, so mpirun's exit status is the job's. */
#include "cli.h"
#include "grm_core.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_launch[] =
    "usage: grmhost launch -n N [-v] FILE.ini [train options]\n"
    "\n"
    "Run N ranks of `grmhost train FILE.ini [train options]` under Open MPI:\n"
    "  mpirun [--allow-run-as-root] [--oversubscribe] -n N GRMHOST train FILE.ini ...\n"
    "--allow-run-as-root is added when running as root, --oversubscribe when N exceeds\n"
    "the online CPU cores. Select comm-mpi (CPU) or comm-nccl (GPU) in [distributed].\n"
    "The exit status is mpirun's: non-zero when any rank fails or dies.\n"
    "\n"
    "options:\n"
    "  -n, --np N           number of ranks (required, >= 1)\n"
    "  -v, --verbose        print the mpirun command line on stderr; passed on to train\n"
    "  -h, --help           this text\n"
    "environment:\n"
    "  GRM_MPIRUN           the mpirun to use (default: mpirun found in PATH)\n";

// The first executable `name` in PATH into out [PATH_MAX]; 0 if there is none.
static int launch_which(const char *name, char *out)
{
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0') path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        const size_t len = end ? (size_t)(end - path) : strlen(path);
        if (len > 0 && snprintf(out, PATH_MAX, "%.*s/%s", (int)len, path, name) < PATH_MAX
            && access(out, X_OK) == 0)
            return 1;
        path += len + (end != NULL);
    }
    return 0;
}

/* N ranks need a communicator that runs N ranks: comm-single (the default of
 * [distributed]) would start N unrelated one-rank jobs, each rank 0, on one checkpoint
 * directory (issue 25 item 7). 0 (after printing why) when the INI among the forwarded
 * arguments asks for it; an INI that does not load is left to train to report. */
static int launch_comm_ok(char **fwd, int nfwd)
{
    const char *ini = NULL, *set = NULL;
    for (int i = 0; i < nfwd; i++) {
        const char *v = NULL;
        if (!strcmp(fwd[i], "--set") && i + 1 < nfwd) v = fwd[++i];
        else if (!strncmp(fwd[i], "--set=", 6)) v = fwd[i] + 6;
        else if (fwd[i][0] != '-' && !ini) ini = fwd[i];
        if (v && !strncmp(v, "distributed.plugin=", 19)) set = v + 19;   /* the last wins */
    }
    if (set) return strcmp(set, "comm-single") != 0
                    || (fprintf(stderr, "grmhost: --set distributed.plugin=comm-single runs one "
                                "rank; launch -n N needs comm-mpi (CPU ranks) or comm-nccl "
                                "(GPU), or -n 1\n"), 0);
    grm__config *cfg = NULL;
    if (!ini || grm__config_load(ini, &cfg) != GRM_OK) return 1;
    const grm__section *sec = grm__config_section(cfg, "distributed");
    const grm__kv *kv = sec ? grm__section_kv(sec, "plugin") : NULL;
    const char *plugin = kv ? kv->value : "comm-single";
    const int ok = strcmp(plugin, "comm-single") != 0;
    if (!ok) {
        char where[64] = "";
        if (kv) snprintf(where, sizeof where, ":%d", kv->line);
        fprintf(stderr, "grmhost: %s%s: [distributed] plugin is comm-single%s, which runs one "
                "rank; launch -n N needs `plugin = comm-mpi` (CPU ranks) or comm-nccl (GPU) "
                "there (or --set distributed.plugin=comm-mpi), or -n 1\n",
                grm__kv_file(kv, ini), where, kv ? "" : " (the default)");
    }
    grm__config_destroy(cfg);
    return ok;
}

int grm__launch_main(int argc, char **argv)
{
    int64_t np = 0;
    int verbose = 0, nfwd = 0;
    char **fwd = calloc((size_t)argc + 1, sizeof(char *));  // train's arguments
    if (fwd == NULL) {
        fprintf(stderr, "grmhost: launch: out of memory\n");
        return 1;
    }
    // Only -n/--np and -h are launch's own; everything else (FILE.ini, --verbose and the
    // train options with their values) goes to train unchanged and in order.
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            free(fwd);
            fputs(usage_launch, stdout);
            return 0;
        }
        if (!strcmp(a, "-n") || !strcmp(a, "--np")) {
            if (i + 1 >= argc) {
                free(fwd);
                return grm__cli_usage_error(usage_launch, "launch: -n needs a number of ranks");
            }
            val = argv[++i];
        } else if (!strncmp(a, "--np=", 5)) {
            val = a + 5;
        } else if (!strncmp(a, "-n", 2) && a[2] != '\0') {
            val = a + 2;
        }
        if (val != NULL) {
            if (!grm__cli_parse_count(val, 1, 1000000, &np)) {
                free(fwd);
                return grm__cli_usage_error(usage_launch, "launch: -n: expected a number of "
                                            "ranks >= 1, got %s", val);
            }
            continue;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = 1;
        fwd[nfwd++] = argv[i];
    }
    if (np == 0) {
        free(fwd);
        return grm__cli_usage_error(usage_launch, "launch: expected -n N, the number of ranks");
    }
    if (nfwd == 0) {
        free(fwd);
        return grm__cli_usage_error(usage_launch, "launch: expected a pipeline FILE.ini");
    }

    if (np > 1 && !launch_comm_ok(fwd, nfwd)) {
        free(fwd);
        return 2;
    }

    char mpirun[PATH_MAX], self[PATH_MAX];
    const char *env = getenv("GRM_MPIRUN");
    if (env != NULL && *env != '\0') {
        if (access(env, X_OK) != 0) {
            fprintf(stderr, "grmhost: launch: GRM_MPIRUN '%s' is not executable: %s\n", env,
                    strerror(errno));
            free(fwd);
            return 1;
        }
        snprintf(mpirun, sizeof mpirun, "%s", env);
    } else if (!launch_which("mpirun", mpirun)) {
        fprintf(stderr, "grmhost: launch: mpirun not found in PATH; install Debian packages "
                "openmpi-bin libopenmpi-dev (and rebuild grm so comm-mpi is built), or set "
                "GRM_MPIRUN to an mpirun\n");
        free(fwd);
        return 1;
    }
    // This very grmhost, so ranks run the same build as the launcher.
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "grmhost: launch: cannot find this grmhost (/proc/self/exe): %s\n",
                strerror(errno));
        free(fwd);
        return 1;
    }
    self[n] = '\0';

    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char npbuf[32];
    snprintf(npbuf, sizeof npbuf, "%lld", (long long)np);
    char **cmd = calloc((size_t)nfwd + 9, sizeof(char *));
    if (cmd == NULL) {
        fprintf(stderr, "grmhost: launch: out of memory\n");
        free(fwd);
        return 1;
    }
    int k = 0;
    cmd[k++] = mpirun;
    if (geteuid() == 0) cmd[k++] = "--allow-run-as-root";  // Open MPI refuses root otherwise
    if (cores > 0 && np > cores) cmd[k++] = "--oversubscribe";
    cmd[k++] = "-n";
    cmd[k++] = npbuf;
    cmd[k++] = self;
    cmd[k++] = "train";
    for (int i = 0; i < nfwd; i++) cmd[k++] = fwd[i];
    cmd[k] = NULL;
    if (verbose) {
        fprintf(stderr, "grmhost: launch:");
        for (int i = 0; i < k; i++) fprintf(stderr, " %s", cmd[i]);
        fprintf(stderr, "\n");
        fflush(stderr);
    }
    fflush(stdout);
    execv(mpirun, cmd);
    fprintf(stderr, "grmhost: launch: cannot run %s: %s\n", mpirun, strerror(errno));
    free(cmd);
    free(fwd);
    return 1;
}

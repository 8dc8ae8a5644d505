/* core/plot.c - `grmhost plot METRICS.jsonl [--out F.png|F.svg]`: the training loss and
 * every validation metric of a --metrics-out file against the step, drawn by gnuplot
 * (Debian's gnuplot-nox). grmhost writes the points gnuplot reads (F.dat, one block per
 * series) and the script (F.gp) beside the picture, so both can be checked and re-run. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage_plot[] =
    "usage: grmhost plot [--out F.png|F.svg] METRICS.jsonl\n"
    "\n"
    "Draw the training loss (top) and every validation metric (bottom: HR@K, NDCG@K, MRR,\n"
    "AUC, ...) of a `train --metrics-out` file against the step, through gnuplot. When the\n"
    "file holds several runs (appended), the last run's records are drawn. Beside the\n"
    "picture grmhost leaves F.dat (the points: one block per series, `# split name` then\n"
    "`step value` lines) and F.gp (the gnuplot script; `gnuplot F.gp` redraws it).\n"
    "\n"
    "options:\n"
    "  --out FILE           the picture, .png or .svg (default: METRICS with .png)\n"
    "  -h, --help           this text\n"
    "environment:\n"
    "  GRM_GNUPLOT          the gnuplot to run (default: gnuplot in PATH; Debian package\n"
    "                       gnuplot-nox)\n";

enum { PLOT_MAX_SERIES = 64, PLOT_NAME = 48 };

typedef struct series {
    char split[16], name[PLOT_NAME];
    long long *step;
    double *value;
    size_t n, cap;
} series;

/* The string value of "key":"..." in a JSON line into out [cap]; 0 if absent. */
static int json_str(const char *line, const char *key, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(line, pat);
    if (!p) return 0;
    p += strlen(pat);
    const char *e = strchr(p, '"');
    if (!e || (size_t)(e - p) >= cap) return 0;
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = '\0';
    return 1;
}

/* The number after "key": in a JSON line; 0 if absent or null. */
static int json_num(const char *line, const char *key, double *out)
{
    char pat[64], *end;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return 0;
    p += strlen(pat);
    *out = strtod(p, &end);
    return end != p;
}

/* The series drawn: the train loss and valid metrics, not the counts beside them. */
static int wanted(const char *split, const char *name)
{
    if (strcmp(split, "train") == 0) return strcmp(name, "loss") == 0;
    return strcmp(split, "valid") == 0 && strcmp(name, "users") != 0
           && strcmp(name, "rows") != 0;
}

static int add_point(series *ss, int *ns, const char *split, const char *name, long long step,
                     double value)
{
    series *s = NULL;
    for (int i = 0; i < *ns && !s; i++)
        if (!strcmp(ss[i].split, split) && !strcmp(ss[i].name, name)) s = &ss[i];
    if (!s) {
        if (*ns == PLOT_MAX_SERIES) return 1;   /* the rest are not drawn */
        s = &ss[(*ns)++];
        snprintf(s->split, sizeof s->split, "%s", split);
        snprintf(s->name, sizeof s->name, "%s", name);
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        long long *st = realloc(s->step, cap * sizeof *st);
        if (st) s->step = st;
        double *v = realloc(s->value, cap * sizeof *v);
        if (v) s->value = v;
        if (!st || !v) return 0;
        s->cap = cap;
    }
    s->step[s->n] = step;
    s->value[s->n++] = value;
    return 1;
}

/* Read the records of the last run in `path` into ss [*ns]. Returns 0 on success, else an
 * exit code with the message printed. */
static int read_metrics(const char *path, series *ss, int *ns)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "grmhost: %s: cannot open: %s\n", path, strerror(errno));
        return 1;
    }
    char line[1024], last_run[64] = "", run[64];
    /* the last run: the run id of the file's last record that has one */
    while (fgets(line, sizeof line, f))
        if (json_str(line, "run", run, sizeof run)) snprintf(last_run, sizeof last_run, "%s", run);
    rewind(f);
    long long lineno = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        char split[16], name[PLOT_NAME];
        double step, value;
        lineno++;
        if (line[0] != '{') continue;
        if (!json_str(line, "split", split, sizeof split)
            || !json_str(line, "name", name, sizeof name) || !json_num(line, "step", &step)) {
            if (!bad++) fprintf(stderr, "grmhost: %s:%lld: not a metrics record; skipped\n",
                                path, lineno);
            continue;
        }
        if (last_run[0] && (!json_str(line, "run", run, sizeof run) || strcmp(run, last_run)))
            continue;
        if (!wanted(split, name) || !json_num(line, "value", &value)) continue;   /* null */
        if (!add_point(ss, ns, split, name, (long long)step, value)) {
            fclose(f);
            fprintf(stderr, "grmhost: %s: out of memory\n", path);
            return 1;
        }
    }
    fclose(f);
    if (*ns == 0) {
        fprintf(stderr, "grmhost: %s: no train loss or validation metric to plot; write "
                "one with `grmhost train --metrics-out %s FILE.ini`\n", path, path);
        return 1;
    }
    return 0;
}

/* F.dat: one gnuplot data block (index i) per series; F.gp: the script. */
static int write_files(const char *out, const char *dat, const char *gp, const char *title,
                       const series *ss, int ns)
{
    FILE *d = fopen(dat, "w"), *g = fopen(gp, "w");
    if (!d || !g) {
        fprintf(stderr, "grmhost: %s: cannot create: %s\n", !d ? dat : gp, strerror(errno));
        if (d) fclose(d);
        if (g) fclose(g);
        return 1;
    }
    for (int i = 0; i < ns; i++) {
        fprintf(d, "%s# %s %s\n", i ? "\n\n" : "", ss[i].split, ss[i].name);
        for (size_t k = 0; k < ss[i].n; k++)
            fprintf(d, "%lld %.9g\n", ss[i].step[k], ss[i].value[k]);
    }
    size_t ol = strlen(out);
    int svg = ol > 4 && strcmp(out + ol - 4, ".svg") == 0;
    int nvalid = 0;
    for (int i = 0; i < ns; i++) nvalid += strcmp(ss[i].split, "valid") == 0;
    fprintf(g, "# grmhost plot: %s\n", title);
    fprintf(g, "set terminal %s size 1000,%d\nset output '%s'\n", svg ? "svg" : "pngcairo",
            nvalid ? 800 : 450, out);
    long long lo = -1, hi = -1;   /* both panels share the steps of the run */
    for (int i = 0; i < ns; i++)
        for (size_t k = 0; k < ss[i].n; k++) {
            if (lo < 0 || ss[i].step[k] < lo) lo = ss[i].step[k];
            if (ss[i].step[k] > hi) hi = ss[i].step[k];
        }
    fprintf(g, "set grid\nset key outside right\nset xlabel 'step'\nset xrange [%lld:%lld]\n",
            lo > 0 && lo < hi ? 0 : lo - 1, hi + (lo < hi ? 0 : 1));
    if (nvalid) fprintf(g, "set multiplot layout 2,1 title '%s' noenhanced\n", title);
    else fprintf(g, "set title '%s' noenhanced\n", title);
    for (int pass = 0; pass < 2; pass++) {
        const char *want = pass ? "valid" : "train";
        if (pass && !nvalid) break;
        fprintf(g, "set ylabel '%s'\nplot", pass ? "validation" : "training loss");
        int first = 1;
        for (int i = 0; i < ns; i++) {
            if (strcmp(ss[i].split, want) != 0) continue;
            /* the most-popular baseline: dashed, beside the model's solid lines */
            int base = strncmp(ss[i].name, "mostpop_", 8) == 0;
            fprintf(g, "%s '%s' index %d using 1:2 with linespoints%s title '%s %s' "
                    "noenhanced", first ? "" : ",", dat, i, base ? " dashtype 2" : "",
                    ss[i].split, ss[i].name);
            first = 0;
        }
        if (first) fprintf(g, " NaN notitle");
        fprintf(g, "\n");
    }
    if (nvalid) fprintf(g, "unset multiplot\n");
    int err = ferror(d) | ferror(g);
    err |= fclose(d) != 0;
    err |= fclose(g) != 0;
    if (err) {
        fprintf(stderr, "grmhost: %s: write failed\n", dat);
        return 1;
    }
    return 0;
}

int grm__plot_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "out", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *out = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'h': fputs(usage_plot, stdout); return 0;
        default: return grm__cli_bad_option(usage_plot);
        }
    }
    if (optind != argc - 1)
        return grm__cli_usage_error(usage_plot, "expected one METRICS.jsonl");
    const char *in = argv[optind];
    char def[4096], base[4096], dat[4200], gp[4200];
    if (!out) {   /* METRICS.jsonl -> METRICS.png */
        snprintf(def, sizeof def, "%s", in);
        char *dot = strrchr(def, '.'), *slash = strrchr(def, '/');
        if (dot && (!slash || dot > slash)) *dot = '\0';
        strncat(def, ".png", sizeof def - strlen(def) - 1);
        out = def;
    }
    size_t ol = strlen(out);
    if (ol < 5 || (strcmp(out + ol - 4, ".png") != 0 && strcmp(out + ol - 4, ".svg") != 0))
        return grm__cli_usage_error(usage_plot, "--out %s: name a .png or .svg file", out);
    if (strchr(out, '\'') || strchr(out, '\n'))
        return grm__cli_usage_error(usage_plot, "--out %s: no quote or newline in the name",
                                    out);
    snprintf(base, sizeof base, "%.*s", (int)(ol - 4), out);
    snprintf(dat, sizeof dat, "%s.dat", base);
    snprintf(gp, sizeof gp, "%s.gp", base);

    series ss[PLOT_MAX_SERIES];
    int ns = 0;
    memset(ss, 0, sizeof ss);
    int rc = read_metrics(in, ss, &ns);
    if (rc == 0) rc = write_files(out, dat, gp, in, ss, ns);
    for (int i = 0; i < ns; i++) {
        free(ss[i].step);
        free(ss[i].value);
    }
    if (rc != 0) return rc;

    const char *gnuplot = getenv("GRM_GNUPLOT");
    if (!gnuplot || !gnuplot[0]) gnuplot = "gnuplot";
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "grmhost: plot: fork failed: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        execlp(gnuplot, gnuplot, gp, (char *)NULL);
        fprintf(stderr, "grmhost: plot: cannot run %s: %s; install Debian package gnuplot-nox "
                "(or set GRM_GNUPLOT); the points are in %s, the script in %s\n", gnuplot,
                strerror(errno), dat, gp);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 127)
            fprintf(stderr, "grmhost: plot: %s %s failed (status %d)\n", gnuplot, gp,
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 1;
    }
    printf("%s: %d series (%s, %s)\n", out, ns, dat, gp);
    return 0;
}

/* core/metrics.c - ranking and classification metrics, and the metrics sink.
 *
 * HR@K and NDCG@K follow the leave-one-out full-ranking protocol (S3-Rec/ICLRec code,
 * see ../shared/data/README.md): one held-out target per user, ranked against every
 * catalog item; with a single relevant item NDCG@K = 1 / log2(rank + 2) when rank < K. */
#include "pipeline.h"

#include <grm/rng.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void grm__rank_acc_init(grm__rank_acc *a, const grm_int_list *topk)
{
    memset(a, 0, sizeof *a);
    a->nk = (int32_t)topk->n;
    for (int32_t i = 0; i < a->nk; i++) a->k[i] = topk->v[i];
}

void grm__rank_acc_add(grm__rank_acc *a, int64_t rank)
{
    for (int32_t i = 0; i < a->nk; i++)
        if (rank < a->k[i]) {
            a->hr[i] += 1;
            a->ndcg[i] += 1.0 / log2((double)rank + 2.0);
        }
    a->mrr += 1.0 / ((double)rank + 1.0);
    a->n++;
}

void grm__rank_acc_merge(grm__rank_acc *into, const grm__rank_acc *from)
{
    for (int32_t i = 0; i < into->nk; i++) {
        into->hr[i] += from->hr[i];
        into->ndcg[i] += from->ndcg[i];
    }
    into->mrr += from->mrr;
    into->n += from->n;
}

/* ---- AUC ---- */

typedef struct scored {
    float s;
    float y;
} scored;

static int cmp_scored(const void *a, const void *b)
{
    float x = ((const scored *)a)->s, y = ((const scored *)b)->s;
    return (x > y) - (x < y);
}

/* Mann-Whitney U over sorted scores; tied scores share their average rank. */
static double auc_sorted(const scored *v, int64_t n)
{
    double pos = 0, neg = 0, rank_sum = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && v[j].s == v[i].s) j++;
        double avg = (double)(i + j + 1) / 2.0;   /* 1-based ranks i+1..j */
        for (int64_t k = i; k < j; k++)
            if (v[k].y > 0.5) rank_sum += avg;
        i = j;
    }
    for (int64_t i = 0; i < n; i++) {
        if (v[i].y > 0.5) pos++;
        else neg++;
    }
    if (pos == 0 || neg == 0) return NAN;
    return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg);
}

double grm__auc(const float *scores, const float *labels, int64_t n)
{
    scored *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return NAN;
    for (int64_t i = 0; i < n; i++) v[i] = (scored){ scores[i], labels[i] };
    qsort(v, (size_t)n, sizeof *v, cmp_scored);
    double a = auc_sorted(v, n);
    free(v);
    return a;
}

typedef struct gscored {
    int64_t g;
    float s, y;
} gscored;

static int cmp_gscored(const void *a, const void *b)
{
    const gscored *x = a, *y = b;
    if (x->g != y->g) return (x->g > y->g) - (x->g < y->g);
    return (x->s > y->s) - (x->s < y->s);
}

double grm__gauc(const float *scores, const float *labels, const int64_t *groups, int64_t n)
{
    gscored *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    scored *w = malloc((size_t)(n ? n : 1) * sizeof *w);
    double num = 0, den = 0;
    if (!v || !w) {
        free(v);
        free(w);
        return NAN;
    }
    for (int64_t i = 0; i < n; i++) v[i] = (gscored){ groups[i], scores[i], labels[i] };
    qsort(v, (size_t)n, sizeof *v, cmp_gscored);
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && v[j].g == v[i].g) j++;
        for (int64_t k = i; k < j; k++) w[k - i] = (scored){ v[k].s, v[k].y };
        double a = auc_sorted(w, j - i);
        if (!isnan(a)) {
            num += a * (double)(j - i);
            den += (double)(j - i);
        }
        i = j;
    }
    free(v);
    free(w);
    return den > 0 ? num / den : NAN;
}

/* ---- sink ---- */

typedef struct metric_last {
    char split[16], name[32];
    int64_t step;
    double value;
} metric_last;

struct grm__metrics {
    FILE *f;                 /* JSON lines, or NULL */
    char *path;              /* its name */
    int err;                 /* errno of the first failed write (0: none) */
    char run[40];            /* this run's id: UTC start time and a random tag */
    char pipeline[20];       /* the merged INI's hash, 16 hex digits */
    pthread_mutex_t lock;    /* over last/n/cap: --metrics-port's thread reads them */
    int64_t step;            /* the latest step a record named */
    metric_last *last;
    int n, cap;
};

/* "2026-11-24T17:50:01.123Z": the wall clock of a record, UTC, milliseconds. */
static void utc_now(char *out, size_t cap, struct timespec *ts_out)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
    if (ts_out) *ts_out = ts;
}

/* --fresh: the previous run's records move to PATH.N (the first free N), so the file holds
 * one run and nothing is lost. Returns the status; *moved = 1 and `to` named when moved. */
static grm_status rotate(const char *path, char *to, size_t cap, int *moved)
{
    struct stat st;
    *moved = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return GRM_OK;
    for (int i = 1; i < 1000; i++) {
        snprintf(to, cap, "%s.%d", path, i);
        if (access(to, F_OK) == 0) continue;
        if (rename(path, to) != 0)
            return grm_errorf(GRM_EIO, "%s: --fresh: cannot move the previous run's metrics "
                              "to %s: %s", path, to, strerror(errno));
        *moved = 1;
        return GRM_OK;
    }
    return grm_errorf(GRM_EIO, "%s: --fresh: %s.1 .. %s.999 all exist; remove old ones",
                      path, path, path);
}

grm_status grm__metrics_open(const char *path, uint64_t pipeline_hash, int fresh,
                             grm__metrics **out)
{
    grm__metrics *m = calloc(1, sizeof *m);
    *out = NULL;
    if (!m) return grm_errorf(GRM_ENOMEM, "out of memory");
    pthread_mutex_init(&m->lock, NULL);
    struct timespec ts;
    char when[40];
    utc_now(when, sizeof when, &ts);
    /* the run id: its start (to the second, sortable) and 32 bits of the clock's
     * nanoseconds mixed with the pid, so two runs started in the same second differ */
    uint64_t tag = grm_mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32));
    snprintf(m->run, sizeof m->run, "%.4s%.2s%.2sT%.2s%.2s%.2sZ-%08x", when, when + 5,
             when + 8, when + 11, when + 14, when + 17, (unsigned)(tag >> 32));
    snprintf(m->pipeline, sizeof m->pipeline, "%016llx", (unsigned long long)pipeline_hash);
    if (path && path[0]) {
        char to[4200];
        int moved = 0;
        grm_status st = fresh ? rotate(path, to, sizeof to, &moved) : GRM_OK;
        if (st != GRM_OK) {
            pthread_mutex_destroy(&m->lock);
            free(m);
            return st;
        }
        if (moved)
            grm__log(GRM_LOG_INFO, "grmhost", "--fresh: the previous run's metrics %s moved to "
                     "%s; this run starts a new file", path, to);
        m->f = fopen(path, "a");
        m->path = strdup(path);
        if (!m->f || !m->path) {
            const int e = errno;
            if (m->f) fclose(m->f);
            free(m->path);
            pthread_mutex_destroy(&m->lock);
            free(m);
            return grm_errorf(GRM_EIO, "%s: cannot open metrics file: %s", path, strerror(e));
        }
    }
    *out = m;
    return GRM_OK;
}

const char *grm__metrics_run(const grm__metrics *m)
{
    return m->run;
}

void grm__metrics_close(grm__metrics *m)
{
    if (!m) return;
    if (m->f) fclose(m->f);
    free(m->path);
    free(m->last);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

size_t grm__json_escape(char *buf, size_t cap, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char e[7] = { *c, 0 };
        if (*c == '"' || *c == '\\') {
            e[0] = '\\';
            e[1] = (char)*c;
            e[2] = 0;
        } else if (*c < 0x20 || *c == 0x7f) {   /* control bytes, ESC among them: \u00XX */
            memcpy(e, "\\u00", 4);
            e[4] = hex[*c >> 4];
            e[5] = hex[*c & 15];
            e[6] = 0;
        }
        for (const char *q = e; *q; q++, n++)
            if (n + 1 < cap) buf[n] = *q;
    }
    if (cap) buf[n < cap ? n : cap - 1] = '\0';
    return n;
}

void grm__metrics_emit(grm__metrics *m, int64_t step, const char *split, const char *name,
                       double value)
{
    if (m->f) {
        char when[40], num[40] = "null", es[256], en[256];
        utc_now(when, sizeof when, NULL);
        if (isfinite(value)) snprintf(num, sizeof num, "%.9g", value);
        grm__json_escape(es, sizeof es, split);
        grm__json_escape(en, sizeof en, name);
        fprintf(m->f, "{\"time\":\"%s\",\"run\":\"%s\",\"pipeline\":\"%s\",\"step\":%lld,"
                "\"split\":\"%s\",\"name\":\"%s\",\"value\":%s}\n", when, m->run, m->pipeline,
                (long long)step, es, en, num);
        if ((fflush(m->f) != 0 || ferror(m->f)) && !m->err) m->err = errno ? errno : EIO;
    }
    pthread_mutex_lock(&m->lock);
    m->step = step;
    metric_last *l = NULL;
    for (int i = 0; i < m->n && !l; i++)
        if (strcmp(m->last[i].split, split) == 0 && strcmp(m->last[i].name, name) == 0)
            l = &m->last[i];
    if (!l && m->n == m->cap) {
        int cap = m->cap ? m->cap * 2 : 32;
        metric_last *nl = realloc(m->last, (size_t)cap * sizeof *nl);
        if (nl) {
            m->last = nl;
            m->cap = cap;
        }
    }
    if (!l && m->n < m->cap) {
        l = &m->last[m->n++];
        snprintf(l->split, sizeof l->split, "%s", split);
        snprintf(l->name, sizeof l->name, "%s", name);
    }
    if (l) {
        l->step = step;
        l->value = value;
    }
    pthread_mutex_unlock(&m->lock);
}

/* A label value of the exposition format: backslash, double quote and newline escaped. */
static void prom_label(FILE *f, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') fputc('\\', f);
        if (*v == '\n') fputs("\\n", f);
        else fputc(*v, f);
    }
}

void grm__metrics_prometheus(grm__metrics *m, FILE *f)
{
    pthread_mutex_lock(&m->lock);
    fprintf(f, "# HELP grm_step The latest training step a metric was recorded at.\n"
               "# TYPE grm_step gauge\ngrm_step{run=\"%s\",pipeline=\"%s\"} %lld\n",
            m->run, m->pipeline, (long long)m->step);
    fprintf(f, "# HELP grm_metric The latest value of each metric grmhost train records "
               "(--metrics-out's records: split and name).\n# TYPE grm_metric gauge\n");
    for (int i = 0; i < m->n; i++) {
        const metric_last *l = &m->last[i];
        char num[40];
        if (isfinite(l->value)) snprintf(num, sizeof num, "%.9g", l->value);
        else snprintf(num, sizeof num, "%s", isnan(l->value) ? "NaN" : l->value > 0 ? "+Inf"
                                                                                   : "-Inf");
        fputs("grm_metric{split=\"", f);
        prom_label(f, l->split);
        fputs("\",name=\"", f);
        prom_label(f, l->name);
        fprintf(f, "\",run=\"%s\",pipeline=\"%s\"} %s\n", m->run, m->pipeline, num);
    }
    pthread_mutex_unlock(&m->lock);
}

void grm__metrics_summary(grm__metrics *m, FILE *f)
{
    /* the metric and value columns as wide as their widest entry (table.NAME.evictions, a
     * table's bytes), so the columns line up */
    int w = 16, vw = 12;
    for (int i = 0; i < m->n; i++) {
        const int n = snprintf(NULL, 0, "%.6f", m->last[i].value);
        if ((int)strlen(m->last[i].name) > w) w = (int)strlen(m->last[i].name);
        if (n > vw) vw = n;
    }
    fprintf(f, "%-10s %-*s %10s %*s\n", "split", w, "metric", "step", vw, "value");
    for (int i = 0; i < m->n; i++)
        fprintf(f, "%-10s %-*s %10lld %*.6f\n", m->last[i].split, w, m->last[i].name,
                (long long)m->last[i].step, vw, m->last[i].value);
}

int64_t grm__metrics_tell(const grm__metrics *m)
{
    return m && m->f ? (int64_t)ftello(m->f) : -1;
}

/* A resumed run goes on under the run id of the records before its checkpoint: the last
 * "run" of the file's first `bytes` bytes, when there is one. */
static void adopt_run(grm__metrics *m, int64_t bytes)
{
    char tail[4096];
    FILE *f = fopen(m->path, "rb");
    if (!f) return;
    const int64_t from = bytes > (int64_t)sizeof tail - 1 ? bytes - (int64_t)sizeof tail + 1 : 0;
    size_t n = 0;
    if (fseeko(f, (off_t)from, SEEK_SET) == 0) n = fread(tail, 1, (size_t)(bytes - from), f);
    fclose(f);
    tail[n] = '\0';
    const char *key = "\"run\":\"", *at = NULL;
    for (const char *q = strstr(tail, key); q; q = strstr(q + 1, key)) at = q;
    if (!at) return;
    at += strlen(key);
    const char *end = strchr(at, '"');
    if (end && end > at && (size_t)(end - at) < sizeof m->run)
        snprintf(m->run, sizeof m->run, "%.*s", (int)(end - at), at);
}

grm_status grm__metrics_cut(grm__metrics *m, int64_t bytes, int64_t step)
{
    struct stat sb;
    if (!m || !m->f || bytes < 0) return GRM_OK;
    if (fflush(m->f) != 0 || fstat(fileno(m->f), &sb) != 0)
        return grm_errorf(GRM_EIO, "%s: %s", m->path, strerror(errno));
    if (sb.st_size >= bytes) adopt_run(m, bytes);
    if (sb.st_size == bytes) return GRM_OK;
    if (sb.st_size < bytes) {   /* another file, or one cut by hand: leave it as it is */
        grm__log(GRM_LOG_WARN, "grmhost", "%s: holds %lld bytes, fewer than the %lld it held "
                 "at the checkpoint of step %lld; appending to it as it is", m->path,
                 (long long)sb.st_size, (long long)bytes, (long long)step);
        return GRM_OK;
    }
    if (ftruncate(fileno(m->f), (off_t)bytes) != 0)
        return grm_errorf(GRM_EIO, "%s: cannot cut the records after step %lld: %s", m->path,
                          (long long)step, strerror(errno));
    grm__log(GRM_LOG_INFO, "grmhost", "%s: removed the %lld bytes written after the checkpoint "
             "of step %lld; the resumed run writes them again", m->path,
             (long long)(sb.st_size - bytes), (long long)step);
    return GRM_OK;
}

grm_status grm__metrics_check(const grm__metrics *m)
{
    if (!m || !m->err) return GRM_OK;
    return grm_errorf(GRM_EIO, "%s: writing metrics: %s; free space or name another "
                      "--metrics-out", m->path, strerror(m->err));
}

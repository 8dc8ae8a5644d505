/* core/metrics.c - ranking and classification metrics, and the metrics sink.
 *
 * HR@K and NDCG@K follow the leave-one-out full-ranking protocol (S3-Rec/ICLRec code,
 * see ../shared/data/README.md): one held-out target per user, ranked against every
 * catalog item; with a single relevant item NDCG@K = 1 / log2(rank + 2) when rank < K. */
#include "pipeline.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    metric_last *last;
    int n, cap;
};

grm_status grm__metrics_open(const char *path, grm__metrics **out)
{
    grm__metrics *m = calloc(1, sizeof *m);
    *out = NULL;
    if (!m) return grm_errorf(GRM_ENOMEM, "out of memory");
    if (path && path[0]) {
        m->f = fopen(path, "a");
        m->path = strdup(path);
        if (!m->f || !m->path) {
            const int e = errno;
            if (m->f) fclose(m->f);
            free(m->path);
            free(m);
            return grm_errorf(GRM_EIO, "%s: cannot open metrics file: %s", path, strerror(e));
        }
    }
    *out = m;
    return GRM_OK;
}

void grm__metrics_close(grm__metrics *m)
{
    if (!m) return;
    if (m->f) fclose(m->f);
    free(m->path);
    free(m->last);
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
        char es[256], en[256];
        grm__json_escape(es, sizeof es, split);
        grm__json_escape(en, sizeof en, name);
        if (isfinite(value))
            fprintf(m->f, "{\"step\":%lld,\"split\":\"%s\",\"name\":\"%s\",\"value\":%.9g}\n",
                    (long long)step, es, en, value);
        else
            fprintf(m->f, "{\"step\":%lld,\"split\":\"%s\",\"name\":\"%s\",\"value\":null}\n",
                    (long long)step, es, en);
        if ((fflush(m->f) != 0 || ferror(m->f)) && !m->err) m->err = errno ? errno : EIO;
    }
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->last[i].split, split) == 0 && strcmp(m->last[i].name, name) == 0) {
            m->last[i].step = step;
            m->last[i].value = value;
            return;
        }
    if (m->n == m->cap) {
        int cap = m->cap ? m->cap * 2 : 32;
        metric_last *nl = realloc(m->last, (size_t)cap * sizeof *nl);
        if (!nl) return;
        m->last = nl;
        m->cap = cap;
    }
    metric_last *l = &m->last[m->n++];
    snprintf(l->split, sizeof l->split, "%s", split);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->step = step;
    l->value = value;
}

void grm__metrics_summary(grm__metrics *m, FILE *f)
{
    fprintf(f, "%-10s %-16s %10s %12s\n", "split", "metric", "step", "value");
    for (int i = 0; i < m->n; i++)
        fprintf(f, "%-10s %-16s %10lld %12.6f\n", m->last[i].split, m->last[i].name,
                (long long)m->last[i].step, m->last[i].value);
}

int64_t grm__metrics_tell(const grm__metrics *m)
{
    return m && m->f ? (int64_t)ftello(m->f) : -1;
}

grm_status grm__metrics_cut(grm__metrics *m, int64_t bytes, int64_t step)
{
    struct stat sb;
    if (!m || !m->f || bytes < 0) return GRM_OK;
    if (fflush(m->f) != 0 || fstat(fileno(m->f), &sb) != 0)
        return grm_errorf(GRM_EIO, "%s: %s", m->path, strerror(errno));
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

/* tests/test-metrics.c - HR@K/NDCG@K accumulation, AUC and GAUC against hand-computed
 * values, and the JSON-lines metrics sink. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "pipeline.h"
#include "tap.h"

int main(void)
{
    tap_plan(7);
    grm_int_list k = { 2, { 1, 10 } };
    grm__rank_acc a;
    grm__rank_acc_init(&a, &k);
    grm__rank_acc_add(&a, 0);    /* hit at 1 and 10, ndcg 1 */
    grm__rank_acc_add(&a, 3);    /* hit at 10, ndcg 1/log2(5) */
    grm__rank_acc_add(&a, 10);   /* miss */
    tap_ok(a.n == 3 && a.hr[0] == 1 && a.hr[1] == 2, "HR counts ranks below K");
    tap_ok(fabs(a.ndcg[1] - (1.0 + 1.0 / log2(5.0))) < 1e-12 && fabs(a.ndcg[0] - 1.0) < 1e-12,
           "NDCG@K = 1/log2(rank+2) for hits");
    tap_ok(fabs(a.mrr - (1.0 + 0.25 + 1.0 / 11)) < 1e-12, "MRR sums 1/(rank+1)");

    /* AUC: scores 0.1(0) 0.4(1) 0.35(0) 0.8(1): pairs (pos>neg): 0.4>0.1, 0.4>0.35,
     * 0.8>0.1, 0.8>0.35 = 4/4 -> 1; swap one label to get 0.75 by hand */
    float s[] = { 0.1f, 0.4f, 0.35f, 0.8f };
    float y[] = { 0, 1, 0, 1 };
    float y2[] = { 0, 1, 1, 0 };   /* pos 0.4, 0.35 vs neg 0.1, 0.8: 2 of 4 pairs */
    tap_ok(fabs(grm__auc(s, y, 4) - 1.0) < 1e-12 && fabs(grm__auc(s, y2, 4) - 0.5) < 1e-12,
           "AUC matches hand-counted pairs");
    float st[] = { 0.5f, 0.5f, 0.5f };
    float yt[] = { 1, 0, 0 };
    tap_ok(fabs(grm__auc(st, yt, 3) - 0.5) < 1e-12, "tied scores count half");
    int64_t g[] = { 1, 1, 2, 2 };
    /* group 1: (0.1,0) (0.4,1) -> 1; group 2: (0.35,1) (0.8,0) -> 0; weighted by size: 0.5 */
    float yg[] = { 0, 1, 1, 0 };
    tap_ok(fabs(grm__gauc(s, yg, g, 4) - 0.5) < 1e-12, "GAUC averages per-user AUC by size");

    char path[4200];
    snprintf(path, sizeof path, "%s/m.jsonl", harness_tmpdir("metrics"));
    grm__metrics *m;
    grm__metrics_open(path, 0x0123456789abcdefull, 0, &m);
    grm__metrics_emit(m, 5, "valid", "hr@10", 0.25);
    grm__metrics_emit(m, 6, "train", "loss", NAN);
    grm__metrics_close(m);
    FILE *f = fopen(path, "r");
    char l1[256] = "", l2[256] = "";
    if (f) {
        if (!fgets(l1, sizeof l1, f)) l1[0] = '\0';
        if (!fgets(l2, sizeof l2, f)) l2[0] = '\0';
        fclose(f);
    }
    /* {"time":"YYYY-MM-DDTHH:MM:SS.mmmZ","run":"YYYYMMDDTHHMMSSZ-xxxxxxxx",
     *  "pipeline":"<16 hex>",...} */
    const char *tail1 = "\"pipeline\":\"0123456789abcdef\",\"step\":5,\"split\":\"valid\","
                        "\"name\":\"hr@10\",\"value\":0.25}\n";
    const char *tail2 = "\"pipeline\":\"0123456789abcdef\",\"step\":6,\"split\":\"train\","
                        "\"name\":\"loss\",\"value\":null}\n";
    const size_t head = strlen("{\"time\":\"2026-11-24T17:50:01.123Z\",\"run\":\"20261124T175001Z-"
                               "1a2b3c4d\",");
    tap_ok(strlen(l1) == head + strlen(tail1) && !strcmp(l1 + head, tail1)
           && strlen(l2) == head + strlen(tail2) && !strcmp(l2 + head, tail2)
           && !strncmp(l1, "{\"time\":\"", 9) && l1[19] == 'T' && l1[32] == 'Z'
           && !strncmp(l1 + 35, "\"run\":\"", 7) && !strncmp(l1 + 42, l2 + 42, 25),
           "metrics are JSON lines with time, run, pipeline hash, step, split, name, value "
           "(NaN as null), one run id");
    return tap_done();
}

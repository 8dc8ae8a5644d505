/* tests/test-alloc-failure.c - every failure path behind a host allocation: for each
 * scenario (a plugin's create and first ops, and a whole training run), the n-th host
 * allocation is made to fail for n = 1, 2, ... until the scenario succeeds. Each failing
 * run must return an error with a message and leave nothing allocated (the sanitizer
 * build's LeakSanitizer checks that at exit), and never crash (STYLE.md §8). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "pipeline.h"
#include "tap.h"

static const grm_device cpu = { GRM_DEVICE_CPU, 0 };
static char dir[4096], data_path[4200];

static void write_data(void)
{
    snprintf(dir, sizeof dir, "%s", harness_tmpdir("allocfail"));
    snprintf(data_path, sizeof data_path, "%s/ev.tsv", dir);
    FILE *f = fopen(data_path, "w");
    for (int u = 1; u <= 12; u++)
        for (int j = 0; j < 6; j++) fprintf(f, "%d\t%d\t%d\n", u, (u * 7 + j * 3) % 20 + 1, j);
    fclose(f);
}

static grm_status sc_reader(void)
{
    const grm_plugin_info *info = harness_plugin("reader-text");
    const grm_reader_ops *ops = info->ops;
    char kv[4300];
    snprintf(kv, sizeof kv, "path=%s", data_path);
    const void *cfg = harness_config(info, kv, "columns=user:i64,item:i64,ts:i64",
                                     "chunk_rows=5", NULL);
    void *r = NULL;
    grm_status st = ops->open(cfg, 0, 1, &r);
    for (const grm_chunk *c = (const grm_chunk *)1; st == GRM_OK && c;) st = ops->next(r, &c);
    ops->close(r);
    return st;
}

static grm_status sc_transform(void)
{
    const grm_plugin_info *info = harness_plugin("transform-basic");
    const grm_transform_ops *ops = info->ops;
    int64_t u[] = { 2, 1, 2, 1 }, it[] = { 5, 6, 7, 8 }, ts[] = { 3, 2, 1, 0 };
    grm_column cols[] = { { "user", GRM_COL_I64, 0, 4, u, NULL },
                          { "item", GRM_COL_I64, 0, 4, it, NULL },
                          { "ts", GRM_COL_I64, 0, 4, ts, NULL } };
    grm_field fields[] = { { "user", GRM_COL_I64, 0 }, { "item", GRM_COL_I64, 0 },
                           { "ts", GRM_COL_I64, 0 } };
    grm_schema schema = { sizeof schema, 3, fields };
    grm_chunk in = { sizeof in, 3, 4, cols };
    const void *cfg = harness_config(info, "sequence_by=user", "sequence_order=ts",
                                     "sequence_columns=item,ts", "hash=item", NULL);
    void *t = NULL;
    const grm_chunk *out = NULL;
    grm_status st = ops->create(cfg, &schema, &t);
    if (st == GRM_OK) st = ops->apply(t, &in, &out);
    if (st == GRM_OK) st = ops->flush(t, &out);
    ops->destroy(t);
    return st;
}

static grm_status sc_emb(void)
{
    const grm_plugin_info *info = harness_plugin("emb-static");
    const grm_emb_ops *ops = info->ops;
    const grm_plugin_info *oinfo = harness_plugin("opt-adam");
    const grm_opt_ops *oops = oinfo->ops;
    grm_emb_table_spec specs[] = { { "a", 30, 4, GRM_EMB_INIT_NORMAL, 0.1, 1 },
                                   { "b", 10, 8, GRM_EMB_INIT_UNIFORM, 0.1, 1 } };
    void *o = NULL, *e = NULL;
    grm_status st = oops->create(harness_config(oinfo, NULL), &o);
    if (st != GRM_OK) return st;
    grm_optimizer opt = { oops, o };
    st = ops->create(harness_config(info, NULL), specs, 2, &opt, &e);
    int64_t ids[] = { 3, 7, 29 };
    float rows[3 * 4], grads[3 * 4] = { 1, 2, 3, 4 };
    if (st == GRM_OK) st = ops->lookup(e, rows, 0, ids, 3, GRM_EMB_INSERT);
    if (st == GRM_OK) st = ops->update(e, 0, ids, grads, 3, 1);
    ops->destroy(e);
    oops->destroy(o);
    return st;
}

static grm_status sc_dense(void)
{
    const grm_plugin_info *info = harness_plugin("dense-mlp");
    const grm_dense_ops *ops = info->ops;
    void *m = NULL;
    grm_status st = ops->create(harness_config(info, "dims=8,4", "dropout=0.1", NULL), 6, 1, &m);
    float x[3 * 6] = { 1, 2, 3 }, y[3 * 4], dy[3 * 4] = { 1 }, dx[3 * 6];
    grm_tensor tx = { x, GRM_DTYPE_F32, 2, { 3, 6, 1, 1 }, cpu };
    grm_tensor ty = { y, GRM_DTYPE_F32, 2, { 3, 4, 1, 1 }, cpu };
    grm_tensor tdy = { dy, GRM_DTYPE_F32, 2, { 3, 4, 1, 1 }, cpu };
    grm_tensor tdx = { dx, GRM_DTYPE_F32, 2, { 3, 6, 1, 1 }, cpu };
    grm_dense_ctx ctx = { .struct_size = sizeof ctx, .training = 1, .step = 1 };
    if (st == GRM_OK) st = ops->forward(m, &ty, &tx, &ctx);
    if (st == GRM_OK) st = ops->backward(m, &tdx, &tdy, &ctx);
    ops->destroy(m);
    return st;
}

static grm_status sc_ckpt(void)
{
    const grm_plugin_info *info = harness_plugin("ckpt-grm");
    const grm_ckpt_ops *ops = info->ops;
    void *k = NULL;
    char path[4300];
    float v[5] = { 1, 2, 3, 4, 5 };
    grm_named_tensor t = { "v", { v, GRM_DTYPE_F32, 1, { 5, 1, 1, 1 }, cpu } };
    snprintf(path, sizeof path, "%s/c.grm", dir);
    grm_status st = ops->create(harness_config(info, NULL), &k);
    if (st == GRM_OK) st = ops->save(k, path, &t, 1, "{}");
    ops->destroy(k);
    return st;
}

static grm_status sc_train(void)
{
    char ini[4300];
    snprintf(ini, sizeof ini, "%s/p.ini", dir);
    grm__pipeline *p = NULL;
    grm_status st = grm__pipeline_load(ini, &p);
    grm__run_opts o = { .fresh = 1, .quiet = 1 };
    if (st == GRM_OK) st = grm__train(p, &o);
    grm__pipeline_destroy(p);
    return st;
}

/* Fail allocation 1, 2, ... of the scenario until it succeeds. */
static void walk(const char *what, grm_status (*scenario)(void), int limit)
{
    int n, bad = 0;
    for (n = 1; n <= limit; n++) {
        grm__alloc_fail_at(n);
        grm_status st = scenario();
        grm__alloc_fail_at(0);
        if (st == GRM_OK) break;
        if (grm_last_error()[0] == '\0') {
            if (bad++ < 3) tap_diag("%s: allocation %d failed with %s and no message", what, n,
                                    grm_status_str(st));
        }
    }
    tap_diag("%s: %d allocation failure points walked", what, n - 1);
    tap_ok(n <= limit && bad == 0 && scenario() == GRM_OK,
           "%s: each of its %d host allocations can fail cleanly, then it succeeds", what, n - 1);
}

int main(void)
{
    if (!harness_builddir()) tap_skip_all("GRM_TOP_BUILDDIR is not set; run through make check");
    harness_host();
    grm__log_set_level(GRM_LOG_ERROR);
    write_data();
    char ini[4300];
    snprintf(ini, sizeof ini, "%s/p.ini", dir);
    FILE *f = fopen(ini, "w");
    fprintf(f, "[pipeline]\nthreads = 2\n[reader]\nplugin = reader-text\npath = %s\n"
            "columns = user:i64,item:i64,ts:i64\n[transform.s]\nplugin = transform-basic\n"
            "sequence_by = user\nsequence_order = ts\nsequence_columns = item\n"
            "[feature.h]\nsource = item\ndim = 4\n[feature.u]\nsource = user\ndim = 4\n"
            "[dense.0]\nplugin = dense-mlp\ndims = 8,4\n[head]\nplugin = head-sampled-softmax\n"
            "negatives = 4\n[train]\nbatch_size = 8\nsteps = 3\neval_batch = 4\ntopk = 2\n"
            "[checkpoint]\ndir = %s/ck\n", data_path, dir);
    fclose(f);
    tap_plan(7);
    harness_plugin("reader-text");
    const int64_t live0 = grm__alloc_live();
    walk("reader-text open/next/close", sc_reader, 200);
    walk("transform-basic create/apply/flush", sc_transform, 200);
    walk("emb-static + opt-adam create/lookup/update", sc_emb, 200);
    walk("dense-mlp create/forward/backward", sc_dense, 200);
    walk("ckpt-grm create/save", sc_ckpt, 200);
    walk("a whole training run (load, data, train, checkpoint, eval)", sc_train, 2000);
    tap_ok(grm__alloc_live() == live0, "every failure path freed its host allocations "
           "(%lld live, %lld before the walks)", (long long)grm__alloc_live(), (long long)live0);
    return tap_done();
}

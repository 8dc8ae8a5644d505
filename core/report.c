/* core/report.c - what a run tells its user: per logged step the balance of samples and
 * tokens over the ranks (MTGRBoost §5.1, TurboGR Table 3), the store's and the exchange's
 * counters and the replica check; the progress line; --profile's time per stage; the
 * summary table. */
#include "train.h"

#include <grm/rng.h>
#include <cblas.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

/* The step's samples and tokens on this rank, and the largest token difference between
 * ranks (TurboGR Table 3's figure; 0 on one rank). */
/* The store's counters per physical table, when it has the stats op: rows held, bytes,
 * misses and evictions (MTGRBoost §4.1 eviction is reported, not silent). */
static void report_tables(grm__trainer *t)
{
    const grm__pipeline *p = t->p;
    if (!GRM_HAS_OP(grm_emb_ops, t->sp.eops, stats)) return;
    for (int32_t T = 0; T < p->nphys; T++) {
        grm_emb_stats es = { 0 };
        if (t->sp.eops->stats(p->emb.inst, T, &es) != GRM_OK) continue;
        char name[256];
        const struct { const char *what; int64_t v; } c[] = {
            { "rows", es.rows }, { "bytes", es.bytes }, { "misses", es.misses },
            { "evictions", es.evictions },
        };
        for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
            snprintf(name, sizeof name, "table.%s.%s", p->phys[T].name, c[i].what);
            grm__metrics_emit(t->rep.metrics, t->step, "train", name, (double)c[i].v);
        }
    }
}

/* The exchange of model-parallel rows per step since the last logged one (MTGRBoost §4.3,
 * FusedRec Fig. 7): ids before and after stage-1 dedup, ids sent to other ranks, ids the
 * owners looked up after stage 2, bytes of ids and of rows, alltoall rounds, and the next
 * batch's ids sent to and received from the other ranks ([train] prefetch_ahead); this
 * rank's. */
static void report_dist(grm__trainer *t)
{
    if (!t->sp.dist || t->step <= t->rep.dstep) return;
    static const char *const opn[2] = { "lookup", "update" };
    double n = (double)(t->step - t->rep.dstep);
    for (int32_t op = 0; op < 2; op++) {
        grm__dist_stats tot, *l = &t->rep.dlast[op];
        if (grm__dist_counters(t->sp.dist, -1, op, NULL, &tot) != GRM_OK) continue;
        const struct { const char *what; int64_t v; } c[] = {
            { "ids_raw", tot.ids_raw - l->ids_raw },
            { "ids_unique", tot.ids_unique - l->ids_unique },
            { "ids_sent", tot.ids_sent - l->ids_sent },
            { "ids_store", tot.ids_store - l->ids_store },
            { "id_bytes", tot.id_bytes - l->id_bytes },
            { "row_bytes", tot.row_bytes - l->row_bytes },
            { "rounds", tot.rounds - l->rounds },
            { "ids_ahead", tot.ids_ahead - l->ids_ahead },
            { "ids_ahead_recv", tot.ids_ahead_recv - l->ids_ahead_recv },
        };
        for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
            char name[64];
            snprintf(name, sizeof name, "dist.%s.%s", opn[op], c[i].what);
            grm__metrics_emit(t->rep.metrics, t->step, "train", name, (double)c[i].v / n);
        }
        *l = tot;
    }
    t->rep.dstep = t->step;
}

/* The step's balance (MTGRBoost §5.1, TurboGR Table 3): samples and tokens of the step, and
 * with several ranks the least and most any rank had, and token_spread, the largest token
 * difference between two ranks. */
static grm_status report_balance(grm__trainer *t, int64_t samples)
{
    const grm_comm_handle *c = &t->p->comm_handle;
    grm__metrics_emit(t->rep.metrics, t->step, "train", "samples", (double)samples);
    grm__metrics_emit(t->rep.metrics, t->step, "train", "tokens", (double)t->rep.step_tokens);
    int64_t spread = 0;
    if (t->nranks > 1) {
        int64_t mm[4] = { t->rep.my_tokens, -t->rep.my_tokens, t->rep.my_samples,
                          -t->rep.my_samples };
        grm_status st = c->ops->allreduce(c->inst, mm, 4, GRM_DTYPE_I64, GRM_REDUCE_MAX);
        if (st != GRM_OK) return st;
        spread = mm[0] + mm[1];
        grm__metrics_emit(t->rep.metrics, t->step, "train", "rank_tokens_min", (double)-mm[1]);
        grm__metrics_emit(t->rep.metrics, t->step, "train", "rank_tokens_max", (double)mm[0]);
        grm__metrics_emit(t->rep.metrics, t->step, "train", "rank_samples_min", (double)-mm[3]);
        grm__metrics_emit(t->rep.metrics, t->step, "train", "rank_samples_max", (double)mm[2]);
    }
    grm__metrics_emit(t->rep.metrics, t->step, "train", "token_spread", (double)spread);
    return GRM_OK;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One pool thread's share of the SGEMM peak: 256 x 256 x 256 products, single-threaded
 * OpenBLAS as the blocks call it, for about 0.3 s; *flops of item i in ctx [n]. */
enum { PEAK_N = 256 };
static grm_status peak_item(void *ctx, int64_t lo, int64_t hi)
{
    double *flops = ctx;
    for (int64_t i = lo; i < hi; i++) {
        float *a = malloc(3 * PEAK_N * PEAK_N * sizeof *a);
        if (!a) return GRM_ENOMEM;
        for (int64_t k = 0; k < 3 * PEAK_N * PEAK_N; k++) a[k] = (float)(k % 7) * 0.125f;
        const double t0 = mono_s();
        int64_t reps = 0;
        do {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, PEAK_N, PEAK_N, PEAK_N,
                        1.0f, a, PEAK_N, a + PEAK_N * PEAK_N, PEAK_N, 0.0f,
                        a + 2 * PEAK_N * PEAK_N, PEAK_N);
            reps++;
        } while (mono_s() - t0 < 0.3);
        flops[i] = 2.0 * PEAK_N * PEAK_N * PEAK_N * (double)reps;
        free(a);
    }
    return GRM_OK;
}

/* The machine's SGEMM rate with the run's threads, flop/s, measured now: every pool thread
 * multiplying at once (0 when it cannot be measured). */
static double sgemm_peak(void)
{
    const int32_t n = grm__num_threads();
    double *flops = calloc((size_t)(n > 0 ? n : 1), sizeof *flops), sum = 0;
    if (!flops) return 0;
    const double t0 = mono_s();
    grm_status st = grm__parallel_for(n, 1, peak_item, flops);
    const double el = mono_s() - t0;
    for (int32_t i = 0; st == GRM_OK && i < n; i++) sum += flops[i];
    free(flops);
    return st == GRM_OK && el > 0 ? sum / el : 0;
}

/* --profile: where the time of the run went, per stage. The reader and the transforms run
 * once, before the first step (the leave-one-out split needs every user's whole history);
 * the per-batch data work (samples, ids, targets, segment unique, keys) runs on the data
 * thread with [train] prefetch > 0, and only the time the trainer waited for it counts in
 * the loop. */
void grm__report_profile(const grm__trainer *t, double loop_s, int64_t steps)
{
    const int ahead = t->p->set.prefetch > 0;
    /* input = stream: the reading after step 1 is part of the batch work (t_batch) */
    const double sread = t->src.stream ? t->src.read_s - t->rep.t_read0 : 0;
    const struct { const char *name; double s; int in_loop; const char *what; } row[] = {
        { "read+transform", t->src.stream ? sread : t->rep.t_read, t->src.stream && !ahead,
          !t->src.stream ? "reader, transforms, split (before step 1)"
          : ahead ? "reader, transforms, split of the stream (on the data thread)"
                  : "reader, transforms, split of the stream" },
        { "balance", t->rep.t_plan, !ahead,
          "epoch order and batch cuts (Algorithm 1 with tokens)" },
        { "batch", t->rep.t_batch - sread, !ahead,
          ahead ? "samples, ids, targets, segment unique, keys (on the data thread)"
                : "samples, ids, targets, segment unique, keys" },
        { "data wait", t->rep.t_wait, 1, "the trainer waiting for the data thread" },
        { "lookup", t->rep.t_lookup, 1, "negatives merged, store lookup, pooling" },
        { "dense fwd", t->rep.t_fwd - t->rep.t_head, 1, "dense blocks forward" },
        { "head", t->rep.t_head, 1, "the head's loss and gradients (query, item rows)" },
        { "dense bwd", t->rep.t_bwd, 1, "dense backward, row gradient sums" },
        { "optimizer", t->rep.t_opt, 1,
          t->sp.async ? "dense optimizer (sparse rows: on their thread)"
                                             : "dense optimizer, sparse row updates" },
        { "sparse wait", t->rep.t_async, 1, "the trainer waiting for the semi-async sparse "
                                        "update thread (sparse_async)" },
        { "checkpoint", t->rep.t_ckpt, 1, "writing checkpoints" },
        { "evaluation", t->rep.t_eval, 1, "validation runs inside the loop" },
    };
    double n = steps > 0 ? (double)steps : 1.0, acc = 0;
    fprintf(stderr, "profile: %lld steps, %.2f s in the training loop\n", (long long)steps,
            loop_s);
    fprintf(stderr, "  %-15s %9s %9s %7s  %s\n", "stage", "total s", "ms/step", "loop %",
            "what");
    for (size_t i = 0; i < sizeof row / sizeof *row; i++) {
        if (row[i].in_loop) acc += row[i].s;
        const int before = i == 0 && !t->src.stream;   /* not part of the loop at all */
        fprintf(stderr, "  %-15s %9.3f %9.3f %6.1f%%%s %s\n", row[i].name, row[i].s,
                before ? 0.0 : 1e3 * row[i].s / n,
                before || loop_s <= 0 ? 0.0 : 100.0 * row[i].s / loop_s,
                before || row[i].in_loop ? " " : "*", row[i].what);
    }
    fprintf(stderr, "  %-15s %9.3f %9.3f %6.1f%%  %s\n", "other", loop_s - acc,
            1e3 * (loop_s - acc) / n, loop_s > 0 ? 100.0 * (loop_s - acc) / loop_s : 0.0,
            "logging, signals, metrics");
    /* the step's MFU: the flops the blocks and the head count (their flops ops) over the
     * loop's time, against the SGEMM rate of the same threads measured now */
    const double fl = t->rep.flops_dense + t->rep.flops_head;
    if (fl > 0 && loop_s > 0) {
        const double peak = sgemm_peak();
        fprintf(stderr, "  counted work: %.3f GFLOP/step (dense blocks %.3f, head %.3f, "
                "forward + backward); %.2f GFLOP/s over the loop", 1e-9 * fl / n,
                1e-9 * t->rep.flops_dense / n, 1e-9 * t->rep.flops_head / n,
                1e-9 * fl / loop_s);
        if (peak > 0)
            fprintf(stderr, " = %.1f%% of the SGEMM peak (%.1f GFLOP/s on %d threads, "
                    "measured now): the step's MFU\n", 100.0 * fl / loop_s / peak,
                    1e-9 * peak, (int)grm__num_threads());
        else
            fputc('\n', stderr);
    }
    double work = t->rep.t_batch + t->rep.t_plan;
    char when[160];
    if (t->src.stream)
        snprintf(when, sizeof when, "read+transform runs beside training; %.3f s of it "
                 "filled the shuffle buffer before step 1", t->rep.t_read);
    else
        snprintf(when, sizeof when, "read+transform (%.3f s) happens once before step 1",
                 t->rep.t_read);
    if (ahead) {
        double hidden = work > 0 ? 1.0 - t->rep.t_wait / work : 1.0;
        if (hidden < 0) hidden = 0;
        fprintf(stderr, "  (* on the data thread, %lld batches ahead, beside the loop)\n"
                "  data work hidden behind compute: %.1f%% (%.3f s of %s, %.3f s waited); "
                "%s\n", (long long)t->p->set.prefetch, 100.0 * hidden, work,
                t->src.stream ? "reading and batch assembly" : "batch assembly", t->rep.t_wait,
                when);
    } else if (t->src.stream) {
        fprintf(stderr, "  data work hidden behind compute: 0%% ([train] prefetch = 0: the "
                "stream is read and batches assembled on the trainer thread); %s\n", when);
    } else {
        fprintf(stderr, "  data work hidden behind compute: 0%% "
                "([train] prefetch = 0: batches are assembled on the trainer thread); "
                "read+transform (%.3f s) happens once before step 1\n", t->rep.t_read);
    }
}

void grm__report_progress(grm__trainer *t, double loss, double sps, double elapsed, int tty,
                          int final)
{
    char line[256];
    if (!t->steps_per_epoch) {   /* input = stream: the input's end decides, no ETA */
        char of[32] = "";
        if (t->total_steps) snprintf(of, sizeof of, "/%lld", (long long)t->total_steps);
        snprintf(line, sizeof line, "step %lld%s epoch %lld/%lld loss %.4f %.0f samples/s",
                 (long long)t->step, of, (long long)t->src.step_pass + 1,
                 (long long)t->p->set.epochs, loss, sps);
    } else {
        double left = t->total_steps > t->step && t->step > 0
                          ? elapsed / (double)t->step * (double)(t->total_steps - t->step) : 0;
        int64_t epoch = t->step ? (t->step - 1) / t->steps_per_epoch + 1 : 1;
        snprintf(line, sizeof line, "step %lld/%lld epoch %lld/%lld loss %.4f %.0f samples/s "
                 "ETA %dm%02ds", (long long)t->step, (long long)t->total_steps,
                 (long long)epoch,
                 (long long)((t->total_steps + t->steps_per_epoch - 1) / t->steps_per_epoch),
                 loss, sps, (int)(left / 60), (int)left % 60);
    }
    if (tty) {
        fprintf(stderr, "\r%-79s%s", line, final ? "\n" : "");
        fflush(stderr);
    } else {
        grm__log(GRM_LOG_INFO, "grmhost", "%s", line);
    }
}

void grm__report_summary(grm__trainer *t, FILE *f)
{
    fprintf(f, "\n");
    grm__metrics_summary(t->rep.metrics, f);
}

/* What the data came to, once it is read (rank 0 speaks for the job): `evaluated` users and
 * `nsplit` rows of each split summed over the ranks, `read_s` seconds reading. */
void grm__report_data(grm__trainer *t, int training, int64_t evaluated, const int64_t *nsplit,
                      double read_s)
{
    const grm__pipeline *p = t->p;
    const grm__run_opts *opts = t->opts;
    const grm__dataset *ds = t->ds;
    if (!opts->quiet && t->src.stream && training)
        grm__log(GRM_LOG_INFO, "grmhost", "data: input = stream: %lld rows read before step 1 "
                 "(%lld training rows in the shuffle buffer of %lld%s); the rest is read while "
                 "training runs, %lld pass%s", (long long)ds->raw_rows, (long long)t->src.n,
                 (long long)t->src.want, t->nranks > 1 ? " on rank 0" : "",
                 (long long)p->set.epochs, p->set.epochs > 1 ? "es" : "");
    else if (!opts->quiet && t->ranking)
        grm__log(GRM_LOG_INFO, "grmhost", "data: %lld rows -> %lld train, %lld valid, %lld "
                 "test rows, %d tasks (%.1fs)", (long long)ds->raw_rows, (long long)nsplit[0],
                 (long long)nsplit[1], (long long)nsplit[2], ds->ntasks, read_s);
    else if (!opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "data: %lld rows -> %lld users, %lld items, %lld "
                 "training examples, %lld evaluated users (%.1fs)", (long long)ds->raw_rows,
                 (long long)ds->all_users, (long long)ds->ncatalog,
                 (long long)ds->all_examples, (long long)evaluated, read_s);
    if (!opts->quiet && ds->sharded && !t->src.stream)
        grm__log(GRM_LOG_INFO, "grmhost", "data: input = sharded: rank 0 of %d holds %lld of "
                 "the %lld %s and %lld of the %lld training samples", t->nranks,
                 (long long)(t->ranking ? ds->nrows : ds->nusers), (long long)ds->all_users,
                 t->ranking ? "rows" : "users", (long long)ds->nexamples,
                 (long long)ds->all_examples);
    if (ds->bad_rows)
        grm__log(GRM_LOG_WARN, "grmhost", "reader skipped %lld malformed rows",
                 (long long)ds->bad_rows);
}

/* The line that opens a run: its steps, batch, threads, parameters and negatives. */
void grm__report_start(grm__trainer *t)
{
    const grm__settings *s = &t->p->set;
    char nsteps[64] = "steps";   /* input = stream: as many as the input gives */
    if (t->total_steps) snprintf(nsteps, sizeof nsteps, "%lld steps", (long long)t->total_steps);
    if (!t->opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "training '%s' (run %s): %s of %lld %s%s, %d "
                 "threads, %d dense parameter tensors, %lld negatives per step", s->name,
                 grm__metrics_run(t->rep.metrics), nsteps,
                 (long long)(t->plan.target_tokens ? t->plan.target_tokens : s->batch_size),
                 t->plan.target_tokens ? "tokens (batching = tokens)" : "samples",
                 t->total_steps ? "" : " until the input is used up (input = stream)",
                 grm__num_threads(), t->dn.nparams, (long long)t->R);
}

/* The metrics of a logged step: the mean loss since the last one, samples/s, the read time
 * and memory once, the balance over the ranks, the replica check, the store's and the
 * exchange's counters. */
grm_status grm__report_step(grm__trainer *t, int64_t samples, double loss, double sps)
{
    grm_status st;
    grm__metrics_emit(t->rep.metrics, t->step, "train", "loss", loss);
    grm__metrics_emit(t->rep.metrics, t->step, "train", "samples_per_s", sps);
    if (grm__lr_active(&t->p->set))
        grm__metrics_emit(t->rep.metrics, t->step, "train", "lr_scale", t->rep.lr_scale);
    if (!t->rep.read_logged) {   /* wall clock and memory, like samples_per_s */
        grm__metrics_emit(t->rep.metrics, t->step, "train", "read_s", t->rep.read_most[0]);
        grm__metrics_emit(t->rep.metrics, t->step, "train", "read_maxrss_kb",
                          t->rep.read_most[1]);
        t->rep.read_logged = 1;
    }
    if ((st = grm__metrics_check(t->rep.metrics)) != GRM_OK) return st;
    if ((st = report_balance(t, samples)) != GRM_OK) return st;
    if ((st = grm__dense_check_replicas(t)) != GRM_OK) return st;
    report_tables(t);
    report_dist(t);
    return GRM_OK;
}

/* The line that closes the training loop: steps, time, throughput, time per stage. */
void grm__report_trained(grm__trainer *t, double el, int64_t steps, int64_t samples)
{
    if (t->opts->quiet || steps <= 0) return;
    const grm__report *r = &t->rep;
    double n = (double)steps;
    char toks[64] = "";
    if (t->seqmode || t->seqrank)
        snprintf(toks, sizeof toks, ", %.0f tokens/s", (double)r->tokens / (el > 0 ? el : 1e-9));
    grm__log(GRM_LOG_INFO, "grmhost", "trained %lld steps in %.1fs: %.0f samples/s%s; per "
             "step: batch %.2fms, lookup %.2fms, forward+loss %.2fms, backward %.2fms, "
             "optimizers %.2fms", (long long)steps, el, (double)samples / (el > 0 ? el : 1e-9),
             toks, 1e3 * r->t_batch / n, 1e3 * r->t_lookup / n, 1e3 * r->t_fwd / n,
             1e3 * r->t_bwd / n, 1e3 * r->t_opt / n);
}

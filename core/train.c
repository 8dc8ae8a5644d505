/* core/train.c - the training loop of DESIGN.md §5 and its entry points: preparation, one
 * step, grmhost train and grmhost eval. Every concept the step uses lives in its own file
 * (core/train.h lists them); this file reads top to bottom as the step does.
 *
 * One step: sample B (user, position) examples -> for each feature, the ids of the
 * history window -> per physical table, one segment unique over the fused ids of all its id
 * spaces (FusedRec §3; each id looked up once and its gradient summed once, MTGRBoost §4.3's
 * first stage), encoded as merged keys (MTGRBoost §4.2) -> store lookup -> pooling ->
 * dense stack -> head (sampled softmax: positives and negatives are rows of the item
 * table) -> backward -> dense optimizer on every parameter, sparse optimizer on touched
 * rows only -> periodic evaluation and checkpoint.
 *
 * Several ranks (MTGRBoost §3 hybrid parallelism): every rank plans the same global batches
 * and trains its contiguous slice of each; rows of every physical table are sharded over the
 * ranks by a hash of the key and looked up and updated through core/dist.c (two-stage dedup,
 * MTGRBoost §4.3), dense gradients are allreduced, and each batch's gradients are weighted by
 * its share of the global step's samples (MTGRBoost §5.1), so N ranks take the steps of one.
 * With [train] input = sharded or stream each rank plans (or draws) its own batches instead,
 * and a step is every rank's next batch.
 *
 * Everything is a pure function of (seed, step): example order per epoch, negatives and
 * dropout are seeded from them, and parallel loops write disjoint outputs, so a run
 * resumed from a checkpoint continues exactly as the uninterrupted run would have. */
#include "train.h"

#include <grm/rng.h>

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- preparation ---- */

static grm_status create_instances(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    grm_status st;
    /* the communicator lives as long as the pipeline (grm__pipeline_destroy closes it):
     * a failed run's reason is printed before MPI_Finalize's fence, so mpirun, which kills
     * every rank once one exits non-zero, cannot kill a rank before it has said why */
    const grm_comm_ops *cops = p->comm.plugin->info->ops;
    if (!p->comm.inst) {
        if ((st = cops->create(p->comm.config.data, &p->comm.inst)) != GRM_OK) return st;
        p->comm_handle = (grm_comm_handle){ cops, p->comm.inst };
    }
    grm__host_set_comm(&p->comm_handle);

    const grm_opt_ops *sops = p->opt_sparse.plugin->info->ops;
    if ((st = sops->create(p->opt_sparse.config.data, &p->opt_sparse.inst)) != GRM_OK) {
        grm_error_prefix("[optimizer.sparse] %s: ", p->opt_sparse.plugin->info->name);
        return st;
    }
    p->sparse_opt = (grm_optimizer){ sops, p->opt_sparse.inst };
    t->dn.dops = p->opt_dense.plugin->info->ops;
    if ((st = t->dn.dops->create(p->opt_dense.config.data, &p->opt_dense.inst)) != GRM_OK) {
        grm_error_prefix("[optimizer.dense] %s: ", p->opt_dense.plugin->info->name);
        return st;
    }
    t->dn.dopt = p->opt_dense.inst;
    const grm_ckpt_ops *kops = p->ckpt.plugin->info->ops;
    if ((st = kops->create(p->ckpt.config.data, &p->ckpt.inst)) != GRM_OK) return st;
    return GRM_OK;
}

/* Every plugin instance and buffer of the run, in dependency order: the batch plan sizes the
 * buffers; the store and the dense stack exist before the head tells how many negatives a
 * step draws; the working sets hold the ids of a batch plus those negatives. */
static void trainer_mode(grm__trainer *t)
{
    const grm__pipeline *p = t->p;
    t->seqmode = p->seq_feature >= 0 && !t->ranking;
    t->seqrank = p->seq_feature >= 0 && t->ranking;
    t->dn.S = t->seqrank ? (int32_t)p->set.sequence_blocks : 0;
}

static grm_status setup(grm__trainer *t)
{
    const grm__pipeline *p = t->p;
    const grm__dataset *ds = t->ds;
    grm_status st;
    trainer_mode(t);
    t->sharded = ds->sharded;
    t->has_times = ds->times != NULL
                   || (t->src.stream && p->set.time_column[0] && p->seq_feature >= 0);
    if ((st = grm__plan_setup(t)) != GRM_OK || (st = grm__sparse_setup(t)) != GRM_OK
        || (st = grm__dense_setup(t)) != GRM_OK || (st = grm__sparse_buffers(t)) != GRM_OK
        || (st = grm__eval_setup(t)) != GRM_OK || (st = grm__batch_init(t, &t->eb)) != GRM_OK)
        return st;
    if ((st = grm__plan_steps(t)) != GRM_OK) return st;
    return grm__lr_setup(t);
}

static void teardown(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    grm__prefetch_stop(t);   /* the data thread reads t->ds and the stream until it stops */
    grm__delta_stop(t, NULL);
    grm__ckpt_unlock(t);
    grm__stream_free(t);
    grm__dataset_destroy(t->ds);
    t->ds = NULL;
    grm__sparse_teardown(t);
    grm__dense_teardown(t);
    const grm_opt_ops *sops = p->opt_sparse.plugin->info->ops;
    if (p->opt_sparse.inst) sops->destroy(p->opt_sparse.inst);
    if (p->opt_dense.inst) t->dn.dops->destroy(p->opt_dense.inst);
    if (p->ckpt.inst) ((const grm_ckpt_ops *)p->ckpt.plugin->info->ops)->destroy(p->ckpt.inst);
    p->opt_sparse.inst = p->opt_dense.inst = p->ckpt.inst = NULL;
    grm__prefetch_fini(t);
    grm__batch_fini(t, &t->eb);
    grm__eval_teardown(t);
    grm__plan_fini(&t->plan);
    grm__serve_stop(t->rep.serve);   /* it reads the metrics until it stops */
    t->rep.serve = NULL;
    grm__metrics_close(t->rep.metrics);
    grm__host_set_backend(NULL);
    grm__backend_close(&t->be);
    grm__scratch_fini();
}

grm_status grm__check(grm__pipeline *p)
{
    grm__trainer *t = calloc(1, sizeof *t);
    grm_status st;
    if (!t) return grm_errorf(GRM_ENOMEM, "out of memory");
    t->p = p;
    t->ranking = p->set.task == GRM__TASK_RANKING;
    trainer_mode(t);
    if ((st = grm__backend_open(p->set.device, &t->be)) != GRM_OK) {
        grm_error_prefix("%s: [pipeline] ", p->cfg->path);
        free(t);
        return st;
    }
    grm__host_set_backend(&t->be);
    if ((st = grm__pool_init((int32_t)p->set.threads)) == GRM_OK
        && (st = grm__input_check(p)) == GRM_OK) {
        /* what the head needs: one logit per task, or a query in the item table's space */
        int32_t D = (int32_t)p->set.label_columns.n;
        for (int32_t i = 0; !t->ranking && i < p->ntables; i++)
            if (strcmp(p->tables[i].name, p->set.item_table) == 0) D = p->tables[i].dim;
        st = grm__dense_wire(t, D);
    }
    grm__dense_teardown(t);
    grm__host_set_backend(NULL);
    grm__backend_close(&t->be);
    free(t);
    return st;
}

/* ---- one step ---- */

/* The head's loss on the batch (core/head.c): the stack's output against the labels
 * (ranking), or against the targets and negatives among the item table's unique rows of the
 * batch (retrieval; the head gathers them and adds their gradients into the working set).
 * Every gradient is scaled by `weight`, the batch's share of the step's rows. */
static grm_status head_loss(grm__trainer *t, grm__batch *bt, float weight, double *loss)
{
    grm__pipeline *p = t->p;
    const int32_t L = p->ndense, T = t->ds->ntasks;
    const int32_t D = t->ranking ? T : p->tables[t->item_table].dim;
    grm__dense_stack *dn = &t->dn;
    memset(dn->dacts[L], 0, (size_t)(bt->rows * dn->dims[L]) * sizeof(float));
    grm_loss_io io = { .struct_size = sizeof io, .ntasks = T, .rows = t->ranking ? bt->b : bt->rows,
                       .dim = D, .pred = dn->acts[L], .d_pred = dn->dacts[L],
                       .batch = &bt->view, .step = bt->g, .grad_scale = weight };
    if (t->ranking) {
        io.labels = bt->labels;
    } else {
        grm__table_ws *iw = &t->sp.ws[t->item_phys];
        io.pos_ids = bt->pos_ids;
        io.neg_ids = bt->neg_ids;
        io.nneg = bt->nneg;
        io.item_rows = iw->rows;
        io.d_item_rows = iw->grads;
        io.nitems = bt->tab[t->item_phys].nu;
        io.pos_slots = pos_slots(t, bt);
        io.neg_slots = bt->neg_slot;
    }
    grm_status st = grm__head_loss(&dn->head, &io, &t->be, t->sp.work);
    if (st != GRM_OK) return st;
    t->rep.flops_head += grm__head_flops(&dn->head, io.rows, io.nneg);
    if (!isfinite(io.loss))
        return grm_errorf(GRM_EINVAL, "step %lld: loss is %g; lower the learning rates or "
                          "check the data", (long long)t->step + 1, io.loss);
    *loss = io.loss;
    return GRM_OK;
}

uint64_t grm__negatives_seed(const grm__pipeline *p, int64_t g)
{
    return grm_mix64((uint64_t)p->set.seed ^ grm_mix64(0x5eed + (uint64_t)g));
}

/* The head's negatives for batch g, drawn just before it computes (a head keeps the state of
 * its last draw for its loss) and merged into the item table's keys. */
static grm_status draw_negatives(grm__trainer *t, grm__batch *bt)
{
    const grm__pipeline *p = t->p;
    const grm__dataset *ds = t->ds;
    grm_catalog cat = { ds->ncatalog, ds->catalog_ids, ds->catalog_counts };
    uint64_t nseed = grm__negatives_seed(p, bt->g);
    int64_t *neg = grm__scratch((size_t)(t->R ? t->R : 1) * sizeof *neg, 64), nneg = 0;
    grm_status st;
    if (!neg) return GRM_ENOMEM;
    if ((st = grm__head_negatives(&t->dn.head, neg, &nneg, t->R, &cat, nseed)) != GRM_OK)
        return st;
    return grm__batch_merge_negatives(t, bt, neg, nneg);
}

/* Forward and backward of batch bt (this rank's samples of global batch bt->g): negatives
 * drawn and merged, rows looked up, dense gradients added into the parameters' grads, the
 * batch's row gradients summed per unique key into each table's working set. Gradients are
 * weighted by `weight`, the batch's share of the step's rows, so a step of several batches
 * averages over its samples, not over its batches (MTGRBoost §5.1). */
static grm_status run_batch(grm__trainer *t, grm__batch *bt, float weight, double *loss_out)
{
    grm__pipeline *p = t->p;
    grm_status st;
    *loss_out = 0;
    if (!t->ranking && (st = draw_negatives(t, bt)) != GRM_OK) return st;
    if ((st = grm__embed_batch(t, bt, 1)) != GRM_OK) return st;
    if ((st = grm__async_start(t)) != GRM_OK) return st;   /* the last step's rows, meanwhile */
    for (int32_t i = 0; i < p->nphys; i++)
        memset(t->sp.ws[i].grads, 0, (size_t)(bt->tab[i].nu * t->sp.ws[i].dim) * sizeof(float));
    if (bt->rows == 0) return GRM_OK;   /* an empty slice: no gradient, the collectives only */

    double t0 = now_s();
    if ((st = grm__dense_forward(t, bt, 1, bt->g)) != GRM_OK) return st;
    double th = now_s();
    if ((st = head_loss(t, bt, weight, loss_out)) != GRM_OK) return st;
    double t1 = now_s();
    t->rep.t_head += t1 - th;
    if ((st = grm__dense_backward(t, bt)) != GRM_OK || (st = grm__pool_backward(t, bt)) != GRM_OK)
        return st;
    t->rep.t_fwd += t1 - t0;
    t->rep.t_bwd += now_s() - t1;
    return GRM_OK;
}

/* One optimizer step: [train] accumulate batches (fewer at the very end of the run), their
 * gradients summed with weights by rows, then the dense optimizer on every parameter and the
 * sparse optimizer on the touched rows only. */
static grm_status train_step(grm__trainer *t, double *loss_out, int64_t *samples_out)
{
    grm__pipeline *p = t->p;
    grm_status st = GRM_OK;
    int64_t step = t->step + 1, N = p->set.accumulate;
    int64_t g0 = (step - 1) * N, nb = N;
    if (t->plan.total_mb && g0 + nb > t->plan.total_mb) nb = t->plan.total_mb - g0;
    if (nb < 1) return grm_errorf(GRM_EINTERNAL, "step %lld is past the run", (long long)step);

    int weighted = nb > 1 || t->nranks > 1;
    grm__dense_zero_grads(t);
    double loss = 0;
    int64_t samples = 0, tokens = 0, rows0 = t->rep.tokens;
    grm__batch *bt = NULL;
    double step_rows = 0;
    for (int64_t j = 0; j < nb; j++) {
        int64_t g = g0 + j + 1;
        if ((st = grm__prefetch_take(t, g, &bt)) != GRM_OK) {
            if (t->src.stream && j == 0)   /* tell the others */
                grm__stream_step(t, NULL, 1, &step_rows);
            goto out;
        }
        if (j == 0) {   /* the step's rows over the ranks (and, streaming, its end) */
            st = t->src.stream ? grm__stream_step(t, bt, 0, &step_rows)
                               : grm__plan_step_rows_all(t, bt->step_rows, &step_rows);
            if (st != GRM_OK) goto out;
            if (t->src.all_ended) {   /* nothing left on any rank: no step */
                grm__prefetch_release(t, g);
                goto out;
            }
        }
        /* the weight: this slice's share of the rows of the whole step (all ranks) */
        float weight = weighted ? (float)((double)bt->rows / step_rows) : 1.0f;
        double l = 0;
        if ((st = run_batch(t, bt, weight, &l)) != GRM_OK) goto out;
        if (bt->rows > 0) {
            loss += weight * l;
            samples += bt->b;
            tokens += bt->tokens;
        }
        t->rep.tokens += t->seqrank ? bt->foff[p->seq_feature][bt->b] : bt->rows;
        if (N > 1) {
            grm__stash_rows(t, bt);
            grm__prefetch_release(t, g);
        }
        grm__scratch_reset();
    }
    int64_t my_samples = samples, my_tokens = tokens;   /* this rank's, for the balance report */
    if ((st = grm__async_join(t)) != GRM_OK) goto out;
    if (t->nranks > 1 && (st = grm__dense_allreduce(t, &loss, &samples, &tokens)) != GRM_OK)
        goto out;
    double t2 = now_s();
    if ((st = grm__lr_apply(t, step)) != GRM_OK) goto out;
    if ((st = grm__dense_step(t)) != GRM_OK) goto out;
    st = grm__sparse_apply(t, bt, step);
    if (N == 1) grm__prefetch_release(t, g0 + 1);
    if (st != GRM_OK) goto out;
    t->rep.t_opt += now_s() - t2;
    t->step = step;
    t->rep.step_tokens = tokens;
    t->rep.my_tokens = my_tokens;
    t->rep.my_samples = my_samples;
    *loss_out = loss;
    *samples_out = samples;
out:
    if (st != GRM_OK) {
        grm__async_join(t);
        t->rep.tokens = rows0;
        for (int32_t i = 0; i < p->nphys; i++) t->sp.ws[i].an = 0;
    }
    grm__scratch_reset();
    return st;
}

/* ---- entry points ---- */

/* SIGINT or SIGTERM: stop after this step (or stop this evaluation, grm__poll_stop). The
 * watchers are one-shot (SA_RESETHAND): the kernel gives a signal its default action back
 * as it delivers it, so a second one ends the process at once even inside a long step,
 * before this callback has run at the next poll (issue 25 item 11); the other signal's
 * watcher stops here. */
static void on_signal(uv_signal_t *h, int signum)
{
    grm__trainer *t = h->data;
    t->stop = signum;
    uv_signal_stop(&t->sigint);
    uv_signal_stop(&t->sigterm);
    grm__log(GRM_LOG_WARN, "grmhost", "%s: stopping after this step or evaluation; a second "
             "signal stops at once", signum == SIGINT ? "SIGINT" : "SIGTERM");
}

grm_status grm__poll_stop(grm__trainer *t)
{
    if (!t->loop_ok) return GRM_OK;   /* grmhost eval: signals keep their default action */
    uv_run(&t->loop, UV_RUN_NOWAIT);
    if (t->nranks > 1) {   /* every rank stops at the same batch */
        int64_t sv = t->stop;
        const grm_comm_handle *c = &t->p->comm_handle;
        grm_status st = c->ops->allreduce(c->inst, &sv, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX);
        if (st != GRM_OK) return st;
        t->stop = (int)sv;
    }
    if (!t->stop) return GRM_OK;
    return grm_errorf(GRM_ECANCELED, "%s during the evaluation at step %lld: stopped it; "
                      "`train` resumes from the newest checkpoint",
                      t->stop == SIGINT ? "SIGINT" : "SIGTERM", (long long)t->step);
}

/* A training job owns its [checkpoint] dir: rank 0 locks it (so a second job is refused
 * before it touches a file) and, with --fresh, moves an earlier run's checkpoints aside;
 * the other ranks learn whether that worked. */
static grm_status claim_ckpt_dir(grm__trainer *t)
{
    const char *dir = t->p->set.ckpt_dir;
    const grm_comm_handle *c = &t->p->comm_handle;
    grm_status st = GRM_OK;
    if (t->rank == 0) {
        st = grm__ckpt_lock(t, dir);
        if (st == GRM_OK && t->opts->fresh) st = grm__ckpt_fresh(dir);
    }
    if (t->nranks == 1) return st;
    int64_t failed = st != GRM_OK;
    grm_status cst = c->ops->allreduce(c->inst, &failed, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX);
    if (st != GRM_OK) return st;
    if (cst != GRM_OK) return cst;
    return failed ? grm_errorf(GRM_EIO, "%s: rank 0 could not claim the checkpoint directory "
                               "(its error says why)", dir)
                  : GRM_OK;
}

static grm_status prepare(grm__pipeline *p, const grm__run_opts *opts, grm__trainer *t,
                          int training)
{
    grm_status st;
    memset(t, 0, sizeof *t);
    t->ck.lock_fd = -1;
    t->p = p;
    t->lopts = *opts;
    t->opts = opts = &t->lopts;
    t->ranking = p->set.task == GRM__TASK_RANKING;
    openblas_set_num_threads(1);   /* the host pool owns the cores; BLAS calls stay small */
    if ((st = grm__backend_open(p->set.device, &t->be)) != GRM_OK) {
        grm_error_prefix("%s: [pipeline] ", p->cfg->path);
        return st;
    }
    grm__host_set_backend(&t->be);
    if ((st = grm__pool_init((int32_t)p->set.threads)) != GRM_OK) return st;
    if ((st = create_instances(t)) != GRM_OK) return st;
    const grm_comm_handle *c = &p->comm_handle;
    t->rank = c->ops->rank(c->inst);
    t->nranks = c->ops->size(c->inst);
    if (t->rank > 0) {   /* rank 0 speaks for the job */
        t->lopts.quiet = 1;
        t->lopts.profile = 0;
        if (grm__log_level() > GRM_LOG_WARN) grm__log_set_level(GRM_LOG_WARN);
    }
    if ((st = grm__ckpt_dir_of(t)) != GRM_OK) return st;
    if (training && p->set.ckpt_dir[0] && (st = claim_ckpt_dir(t)) != GRM_OK) return st;
    double t0 = now_s();
    if (p->set.input == GRM__INPUT_STREAM) {
        if ((st = grm__stream_start(t, training)) != GRM_OK) return st;
    } else if ((st = grm__dataset_build(p, &t->ds)) != GRM_OK) {
        return st;
    }
    t->rep.t_read = now_s() - t0;
    t->rep.t_read0 = t->src.read_s;
    grm__dataset *ds = t->ds;
    int64_t evaluated = 0;
    for (int64_t u = 0; u < ds->nusers; u++) evaluated += ds->has_eval[u];
    if (ds->sharded && !t->ranking) {
        if ((st = c->ops->allreduce(c->inst, &evaluated, 1, GRM_DTYPE_I64, GRM_REDUCE_SUM))
            != GRM_OK)
            return st;
    }
    int64_t nsplit[3] = { ds->nsplit[0], ds->nsplit[1], ds->nsplit[2] };
    if (ds->sharded && t->ranking) {
        if ((st = c->ops->allreduce(c->inst, nsplit, 3, GRM_DTYPE_I64, GRM_REDUCE_SUM))
            != GRM_OK)
            return st;
    }
    grm__report_data(t, training, evaluated, nsplit, now_s() - t0);
    if ((st = setup(t)) != GRM_OK) return st;
    /* the slowest rank's read + transform time and the largest rank's peak memory so far
     * (the data built, training not begun): what input = sharded shrinks */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int64_t most[2] = { (int64_t)(t->rep.t_read * 1e6), (int64_t)ru.ru_maxrss };
    if (t->nranks > 1
        && (st = c->ops->allreduce(c->inst, most, 2, GRM_DTYPE_I64, GRM_REDUCE_MAX)) != GRM_OK)
        return st;
    t->rep.read_most[0] = (double)most[0] * 1e-6;
    t->rep.read_most[1] = (double)most[1];
    const char *mpath = opts->metrics_out ? opts->metrics_out : p->set.metrics_out;
    if ((st = grm__metrics_open(t->rank == 0 ? mpath : NULL, grm__config_hash(p->cfg),
                                training && opts->fresh, &t->rep.metrics)) != GRM_OK)
        return st;
    if (training && opts->serve_metrics && t->rank == 0) {
        if ((st = grm__serve_start(opts->metrics_port, t->rep.metrics, &t->rep.serve))
            != GRM_OK)
            return st;
        grm__log(GRM_LOG_INFO, "grmhost", "metrics: Prometheus text on "
                 "http://127.0.0.1:%d/metrics", grm__serve_port(t->rep.serve));
    }
    return GRM_OK;
}

grm_status grm__train(grm__pipeline *p, const grm__run_opts *opts)
{
    grm__trainer t;
    grm_status st = prepare(p, opts, &t, 1);
    const grm__settings *s = &p->set;
    opts = t.opts;
    int tty = isatty(2) && !opts->quiet;
    if (st != GRM_OK) goto out;

    if (t.ck.dir[0]) grm__ckpt_remove_stale(t.ck.dir);   /* train only: eval may run beside */
    if (t.ck.dir[0] && !opts->fresh) {
        if ((st = grm__ckpt_resume(&t)) != GRM_OK) goto out;
        if (t.ck.metrics_at >= 0) {   /* the file reads as one run (issue 25 item 16) */
            if ((st = grm__metrics_cut(t.rep.metrics, t.ck.metrics_at, t.step)) != GRM_OK)
                goto out;
            t.rep.read_logged = 1;
        }
    }
    /* a run early stopping ended is finished: a resume (after a kill during its final
     * evaluation, say) tests the best model again and trains nothing */
    int early_stopped = t.ck.stopped;
    if (early_stopped && !opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "the run stopped early at step %lld (best step "
                 "%lld); testing the best model again, training nothing (--fresh starts over)",
                 (long long)t.step, (long long)t.ck.best_step);
    if ((st = grm__delta_start(&t)) != GRM_OK) goto out;
    if (uv_loop_init(&t.loop) == 0) {
        t.loop_ok = 1;
        uv_signal_init(&t.loop, &t.sigint);
        uv_signal_init(&t.loop, &t.sigterm);
        t.sigint.data = t.sigterm.data = &t;
        uv_signal_start_oneshot(&t.sigint, on_signal, SIGINT);
        uv_signal_start_oneshot(&t.sigterm, on_signal, SIGTERM);
    }
    grm__report_start(&t);

    /* input = stream without [train] steps: until the input is used up (src.all_ended) */
    const int64_t open_end = INT64_MAX / 2 / s->accumulate;
    int64_t limit = t.total_steps ? t.total_steps : open_end;
    if (opts->max_steps > 0 && t.step + opts->max_steps < limit) limit = t.step + opts->max_steps;
    int64_t last_g = limit * s->accumulate;
    if (t.plan.total_mb && last_g > t.plan.total_mb) last_g = t.plan.total_mb;
    if ((st = grm__prefetch_start(&t, t.step * s->accumulate + 1, last_g)) != GRM_OK) goto out;
    if (t.step < limit && (st = grm__sparse_announce(&t, t.step * s->accumulate + 1)) != GRM_OK)
        goto out;
    double start = now_s(), last_print = 0;
    int64_t samples = 0, start_step = t.step;
    /* every epoch by default; a stream's epoch ends when its reader starts the next pass */
    int64_t eval_every = s->eval_every ? s->eval_every : t.steps_per_epoch;
    int64_t ckpt_every = s->ckpt_every ? s->ckpt_every : t.steps_per_epoch;
    int64_t pass_seen = -1;
    while (!early_stopped && t.step < limit && !t.stop) {
        double loss = 0;
        int64_t b = 0;
        if ((st = train_step(&t, &loss, &b)) != GRM_OK) goto out;
        if (t.src.all_ended) {   /* no step was taken */
            limit = t.step;
            if (t.rep.loss_n == 0) break;
            /* the last log line below */
        }
        if (t.nranks > 1) {   /* a signal to one rank stops every rank after the same step */
            int64_t sv = t.stop;
            const grm_comm_handle *c = &p->comm_handle;
            if ((st = c->ops->allreduce(c->inst, &sv, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX))
                != GRM_OK)
                goto out;
            t.stop = (int)sv;
        }
        if (!t.src.all_ended) {
            samples += b;
            t.rep.loss_sum += loss;
            t.rep.loss_n++;
        }
        const int new_pass = t.src.stream && pass_seen >= 0 && t.src.step_pass != pass_seen;
        pass_seen = t.src.step_pass;
        double el = now_s() - start;
        double sps = (double)samples / (el > 0 ? el : 1e-9);
        double eta_base = el / (double)(t.step - start_step) * (double)t.step;
        /* the progress line and the logs show one loss: the mean over the steps since the
         * last logged step (one step's loss jumps around too much to read) */
        const double mean_loss = t.rep.loss_n ? t.rep.loss_sum / (double)t.rep.loss_n : loss;
        if (t.step % s->log_every == 0 || t.step == limit) {
            if ((st = grm__report_step(&t, b, mean_loss, sps)) != GRM_OK) goto out;
            if (!tty && !opts->quiet)
                grm__report_progress(&t, mean_loss, (double)samples / el, eta_base, 0, 0);
            t.rep.loss_sum = 0;
            t.rep.loss_n = 0;
        }
        if (tty && (el - last_print > 0.25 || t.step == limit)) {
            grm__report_progress(&t, mean_loss, sps, eta_base, 1, 0);
            last_print = el;
        }
        if (t.loop_ok) uv_run(&t.loop, UV_RUN_NOWAIT);
        if (t.src.all_ended) break;
        if ((eval_every ? t.step % eval_every == 0 : new_pass) && t.step != limit) {
            if (tty) fputc('\n', stderr);
            double score = 0;
            if ((st = grm__run_eval(&t, 0, 0, &score)) != GRM_OK) goto out;
            if ((st = grm__ckpt_track_best(&t, score, &early_stopped)) != GRM_OK) goto out;
            if (early_stopped) break;
        }
        if ((ckpt_every ? t.step % ckpt_every == 0 : new_pass) && t.step != limit && !t.stop)
            if ((st = grm__ckpt_save(&t)) != GRM_OK) goto out;
        if (s->export_every && t.step % s->export_every == 0 && (st = grm__delta_write(&t))
            != GRM_OK)
            goto out;
    }
    grm__prefetch_stop(&t);
    if (tty) fputc('\n', stderr);
    if (t.stop) {
        grm__log(GRM_LOG_WARN, "grmhost", "%s: stopping after step %lld",
                 t.stop == SIGINT ? "SIGINT" : "SIGTERM", (long long)t.step);
        if (!s->ckpt_dir[0])
            grm__log(GRM_LOG_WARN, "grmhost", "no [checkpoint] dir is configured: this run's "
                     "progress is not saved");
        st = grm__ckpt_save(&t);
        if (st == GRM_OK) st = grm__delta_write(&t);
        goto out;
    }
    if (opts->ids_only) goto out;   /* grmhost profile: the store has seen the ids */
    if (t.step > start_step && (st = grm__ckpt_save(&t)) != GRM_OK) goto out;
    if ((st = grm__delta_write(&t)) != GRM_OK) goto out;
    double el = now_s() - start;
    grm__report_trained(&t, el, t.step - start_step, samples);
    if (opts->profile) grm__report_profile(&t, el, t.step - start_step);
    if (s->early_stop > 0) {
        /* the final model competes too; then test the best one */
        double score = 0;
        char best[4096 + 64];
        if (!early_stopped) {
            if ((st = grm__run_eval(&t, 0, 0, &score)) != GRM_OK) goto out;
            if ((st = grm__ckpt_track_best(&t, score, &early_stopped)) != GRM_OK) goto out;
        }
        if (t.ck.best_step != t.step) {
            if ((st = grm__ckpt_load_best(&t, best, sizeof best)) != GRM_OK) goto out;
            grm__log(GRM_LOG_INFO, "grmhost", "restored the best model (step %lld, validation "
                     "%s %.4f) from %s", (long long)t.step, t.ranking ? "auc" : "ndcg",
                     t.ck.best_score, best);
        }
    }
    if ((st = grm__run_eval(&t, 0, 1, NULL)) != GRM_OK) goto out;
    if ((st = grm__run_eval(&t, 1, 1, NULL)) != GRM_OK) goto out;
    if ((st = grm__metrics_check(t.rep.metrics)) != GRM_OK) goto out;
    if (t.rank == 0) grm__report_summary(&t, stdout);
out:
    if (t.loop_ok) {
        uv_close((uv_handle_t *)&t.sigint, NULL);
        uv_close((uv_handle_t *)&t.sigterm, NULL);
        uv_run(&t.loop, UV_RUN_DEFAULT);
        uv_loop_close(&t.loop);
    }
    teardown(&t);
    return st;
}

grm_status grm__trainer_open(grm__pipeline *p, const grm__run_opts *opts, grm__trainer *t,
                             char *path, size_t cap)
{
    grm_status st = prepare(p, opts, t, 0);
    if (st == GRM_OK) st = grm__ckpt_eval_path(t, opts->checkpoint, path, cap);
    if (st == GRM_OK) st = grm__ckpt_load(t, path);
    return st;
}

void grm__trainer_close(grm__trainer *t)
{
    teardown(t);
}

grm_status grm__eval(grm__pipeline *p, const grm__run_opts *opts)
{
    grm__trainer t;
    char path[4096];
    grm_status st = grm__trainer_open(p, opts, &t, path, sizeof path);
    if (st != GRM_OK) goto out;
    if (!opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "evaluating %s (step %lld)", path, (long long)t.step);
    if ((st = grm__run_eval(&t, 0, 1, NULL)) != GRM_OK) goto out;
    if ((st = grm__run_eval(&t, 1, 1, NULL)) != GRM_OK) goto out;
    if ((st = grm__metrics_check(t.rep.metrics)) != GRM_OK) goto out;
    if (t.rank == 0) grm__report_summary(&t, stdout);
out:
    teardown(&t);
    return st;
}

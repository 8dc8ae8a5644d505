/* core/lr.c - the learning-rate schedule of [train] (lr_warmup, lr_decay, lr_decay_epochs,
 * lr_min): a scale of every optimizer's configured lr, a function of the step alone, so a
 * resumed run follows the schedule of the uninterrupted one. Linear warm-up from lr / W to
 * lr over the first W steps (Goyal et al. 2017, "Accurate, Large Minibatch SGD", §2.2,
 * gradual warm-up), then a half-cosine (Loshchilov & Hutter, SGDR, ICLR 2017, eq. 5, one
 * cycle without restarts) or straight-line fall to lr_min * lr at the decay's last step.
 * The lengths are in epochs, so the same [train] section means the same schedule on
 * another dataset. The host sets the scale through grm_opt_ops.set_lr_scale (ABI 1.9)
 * before every optimizer step. */
#include <math.h>

#include "train.h"

int grm__lr_active(const grm__settings *s)
{
    return s->lr_warmup > 0 || s->lr_decay != GRM__LR_NONE;
}

int64_t grm__lr_warmup_steps(const grm__settings *s, int64_t steps_per_epoch)
{
    return (int64_t)ceil(s->lr_warmup * (double)steps_per_epoch);
}

int64_t grm__lr_decay_steps(const grm__settings *s, int64_t steps_per_epoch,
                            int64_t total_steps)
{
    if (s->lr_decay_epochs > 0) return (int64_t)ceil(s->lr_decay_epochs * (double)steps_per_epoch);
    return total_steps;
}

double grm__lr_scale(const grm__settings *s, int64_t steps_per_epoch, int64_t total_steps,
                     int64_t step)
{
    const int64_t W = grm__lr_warmup_steps(s, steps_per_epoch);
    if (step <= W) return (double)step / (double)W;
    if (s->lr_decay == GRM__LR_NONE) return 1.0;
    const int64_t T = grm__lr_decay_steps(s, steps_per_epoch, total_steps);
    double progress = T > W ? (double)(step - W) / (double)(T - W) : 1.0;
    if (progress > 1.0) progress = 1.0;
    const double fall = s->lr_decay == GRM__LR_COSINE ? 0.5 * (1.0 + cos(M_PI * progress))
                                                       : 1.0 - progress;
    return s->lr_min + (1.0 - s->lr_min) * fall;
}

/* Both optimizers must take a scale; say what the schedule is. */
grm_status grm__lr_setup(grm__trainer *t)
{
    const grm__pipeline *p = t->p;
    const grm__settings *s = &p->set;
    if (!grm__lr_active(s)) return GRM_OK;
    const grm__stage *stages[2] = { &p->opt_sparse, &p->opt_dense };
    const char *names[2] = { "[optimizer.sparse]", "[optimizer.dense]" };
    for (int i = 0; i < 2; i++) {
        const grm_opt_ops *ops = stages[i]->plugin->info->ops;
        if (!GRM_HAS_OP(grm_opt_ops, ops, set_lr_scale) || ops->set_lr_scale == NULL)
            return grm_errorf(GRM_EINVAL, "[train] lr_warmup/lr_decay: %s %s cannot scale its "
                              "learning rate (no set_lr_scale: built for ABI < 1.9); rebuild "
                              "it against this SDK or remove the schedule", names[i],
                              stages[i]->plugin->info->name);
    }
    const int64_t E = t->steps_per_epoch, W = grm__lr_warmup_steps(s, E);
    if (s->lr_decay == GRM__LR_NONE)
        grm__log(GRM_LOG_INFO, "grmhost", "learning rate: warm-up over %lld steps (%g "
                 "epochs), no decay", (long long)W, s->lr_warmup);
    else
        grm__log(GRM_LOG_INFO, "grmhost", "learning rate: warm-up over %lld steps (%g "
                 "epochs), %s decay to %g x lr at step %lld", (long long)W, s->lr_warmup,
                 s->lr_decay == GRM__LR_COSINE ? "cosine" : "linear", s->lr_min,
                 (long long)grm__lr_decay_steps(s, E, t->total_steps));
    return GRM_OK;
}

/* The scale of step `step` on both optimizers. */
grm_status grm__lr_apply(grm__trainer *t, int64_t step)
{
    grm__pipeline *p = t->p;
    if (!grm__lr_active(&p->set)) return GRM_OK;
    const double scale = grm__lr_scale(&p->set, t->steps_per_epoch, t->total_steps, step);
    const grm_opt_ops *sops = p->opt_sparse.plugin->info->ops;
    grm_status st = sops->set_lr_scale(p->opt_sparse.inst, scale);
    if (st == GRM_OK) st = t->dn.dops->set_lr_scale(p->opt_dense.inst, scale);
    t->rep.lr_scale = scale;
    return st;
}

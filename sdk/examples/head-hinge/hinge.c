/* sdk/examples/head-hinge/hinge.c - an out-of-tree head plugin (grm/head.h, ABI 1.5), built
 * against the installed SDK with pkg-config alone: a ranking head with the hinge loss of a
 * linear SVM on each task's logit,
 *     loss = sum_b w_b sum_t max(0, margin - s_bt z_bt) / sum_b w_b,   s = 2 y - 1,
 * whose evaluation scores are the logits themselves (AUC ranks them). It shows what a head
 * needs: the descriptor, create/destroy, task, and the loss op that reads io->pred and
 * io->labels and writes io->loss, io->d_pred (scaled by io->grad_scale) and io->scores. */
#include <stddef.h>
#include <stdlib.h>

#include <grm/grm.h>

static const grm_host_api *hinge_host;   /* the only mutable global a plugin may have */

typedef struct hinge_config {
    double margin;
} hinge_config;

typedef struct hinge {
    double margin;
    int64_t tasks;
} hinge;

static const grm_param_decl hinge_params[] = {
    GRM_PARAM_DECL_DOUBLE(hinge_config, margin, "1.0", GRM_PARAM_RANGE(0, 100),
                          "the margin a logit must clear on its label's side"),
    GRM_PARAM_DECL_END
};

static grm_status hinge_create(const void *config, int64_t in_dim, uint64_t seed, void **inst)
{
    (void)seed;
    const hinge_config *c = config;
    hinge *h = calloc(1, sizeof *h);
    if (!h) return hinge_host->errorf(GRM_ENOMEM, "head-hinge: out of memory");
    h->margin = c ? c->margin : 1.0;
    h->tasks = in_dim;
    *inst = h;
    return GRM_OK;
}

static void hinge_destroy(void *inst)
{
    free(inst);
}

static int32_t hinge_task(void *inst)
{
    (void)inst;
    return GRM_LOSS_BCE;   /* trained on 0/1 labels, like the binary cross-entropy head */
}

static grm_status hinge_loss(void *inst, grm_loss_io *io)
{
    const hinge *h = inst;
    if (!io->labels || io->dim != h->tasks)
        return hinge_host->errorf(GRM_EINVAL, "head-hinge: loss needs labels and %lld "
                                  "columns, got %lld", (long long)h->tasks, (long long)io->dim);
    const double gs = grm_loss_io_grad_scale(io);
    double wsum = 0, loss = 0;
    for (int64_t b = 0; b < io->rows; b++) wsum += io->weights ? io->weights[b] : 1.0;
    if (io->rows > 0 && !(wsum > 0))
        return hinge_host->errorf(GRM_EINVAL, "head-hinge: the sample weights sum to 0");
    for (int64_t b = 0; b < io->rows; b++) {
        const double w = (io->weights ? io->weights[b] : 1.0) / wsum;
        for (int64_t t = 0; t < h->tasks; t++) {
            const int64_t i = b * h->tasks + t;
            const double s = io->labels[i] >= 0.5f ? 1.0 : -1.0, z = io->pred[i];
            const double slack = h->margin - s * z;
            loss += slack > 0 ? w * slack : 0;
            if (io->d_pred) io->d_pred[i] = (float)(slack > 0 ? -s * w * gs : 0.0);
            if (io->scores) io->scores[i] = (float)z;
        }
    }
    io->loss = loss;
    return GRM_OK;
}

static const grm_head_ops hinge_ops = {
    .struct_size = sizeof(grm_head_ops),
    .create = hinge_create,
    .destroy = hinge_destroy,
    .task = hinge_task,
    .loss = hinge_loss,
};

static const grm_plugin_info hinge_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_HEAD,
    .name = "head-hinge",
    .version = "1.0.0",
    .description = "example ranking head: hinge loss on each task's logit (out of tree)",
    .ops = &hinge_ops,
    .params = hinge_params,
    .config_size = sizeof(hinge_config),
};

GRM_PLUGIN_DEFINE(hinge_host, &hinge_info);

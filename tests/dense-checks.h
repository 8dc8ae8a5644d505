/* tests/dense-checks.h - what the dense-block tests (tests/test-dense-{mlp,hstu,sasrec,
 * mmoe,heads}.c) share: tensor views, seeded fills, the parameters of a block gathered into
 * one flat array and back, the torch probe, and central finite differences of a loss given
 * as a callback. Implemented in tests/dense-checks.c, linked into each of those tests;
 * dc_expect is inline here because TAP's counter lives in each test's own tap.h. */
#ifndef DENSE_CHECKS_H
#define DENSE_CHECKS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <grm/grm.h>

#include "harness.h"
#include "tap.h"

/* ---- tensors ---- */

/* A [rows, cols] f32 CPU view of data (borrowed). */
grm_tensor dc_mat(float *data, int64_t rows, int64_t cols);
/* Elements of t: the product of its ndim extents. */
int64_t dc_numel(const grm_tensor *t);
/* v [n] = harness_randf(s) * scale, in order. */
void dc_fill(float *v, int64_t n, uint64_t *s, float scale);
/* The block or head info->ops creates from cfg for in_dim inputs; prints "Bail out!
 * <plugin> create: <error>" and exits when create fails. */
void *dc_make(const grm_plugin_info *info, const void *cfg, int64_t in_dim, uint64_t seed);

/* ---- parameters through ops->params, in its order ---- */

/* Number of parameter tensors of inst. */
int64_t dc_param_count(const grm_dense_ops *ops, void *inst);
/* Floats in all parameters of inst. */
int64_t dc_param_floats(const grm_dense_ops *ops, void *inst);
/* Zero every gradient of inst. */
void dc_zero_grads(const grm_dense_ops *ops, void *inst);
/* Concatenate every parameter (grad 0) or gradient (grad 1) of inst into out; returns the
 * floats written. */
int64_t dc_gather(const grm_dense_ops *ops, void *inst, int grad, float *out);
/* The inverse of dc_gather for the parameters (grad 0) or gradients (1): copy in back into
 * inst; returns the floats read. */
int64_t dc_scatter(const grm_dense_ops *ops, void *inst, int grad, const float *in);
/* Check that params(0 .. n-1) of inst are named names [n] with shapes [n] ({rows, cols}, cols 0:
 * a vector), value and gradient alike, in f32; a tap_diag names each mismatch. *one_block
 * is 1 when each value starts where the previous one ended and the first gradient right
 * after the last value (STYLE.md §8). Returns 1 when every name and shape matches. */
int dc_check_params(const grm_dense_ops *ops, void *inst, int n, const char *const *names,
                    const int64_t (*shapes)[2], int *one_block);
/* The data of the parameter called name (grad 0) or of its gradient (grad 1); prints
 * "Bail out! no parameter <name>" and exits when there is none. */
float *dc_param(const grm_dense_ops *ops, void *inst, const char *name, int grad);

/* ---- PyTorch fixtures ---- */

/* $PYTHON3 (default /usr/bin/python3) when it can import torch, NULL when it cannot. */
const char *dc_torch_python(void);
/* Read n floats from f into a new malloc'ed *out (owned by the caller, even on failure);
 * 1 when all n were read. */
int dc_read_f32(FILE *f, float **out, int64_t n);

/* ---- comparisons ---- */

/* Mismatches of got [n] against want [n] at |got - want| <= atol + rtol |want|, quietly;
 * *max_rel rises to the largest relative error where |want| > atol. */
int64_t dc_close_count(const float *got, const float *want, int64_t n, double rtol,
                       double atol, double *max_rel);

/* A running comparison of numeric against analytic gradients: err = |num - ana| / (floor +
 * |num|); worst is the largest err seen, bad counts those above tol. */
typedef struct dc_fd_tally {
    double floor, tol;
    double worst;
    int bad;
} dc_fd_tally;
/* Note one pair into t; 1 when it is bad and among the first 5 (worth a tap_diag). */
int dc_fd_note(dc_fd_tally *t, double num, double ana);

/* ---- central finite differences of loss(ctx) ---- */

typedef double (*dc_loss_fn)(void *ctx);

/* (loss(v + h) - loss(v - h)) / 2h, moving the double *v; *v is restored. */
double dc_central(double *v, double h, dc_loss_fn loss, void *ctx);
/* grad [n]: dc_central at each element of v [n], rounded to float. */
void dc_central_grad(float *grad, double *v, int64_t n, double h, dc_loss_fn loss, void *ctx);
/* The same for a float *v, stepped by (float)h and divided by 2h. */
double dc_central_f32(float *v, double h, dc_loss_fn loss, void *ctx);
/* Richardson extrapolation (4 c(h2) - c(h1)) / 3 of two central differences of a float *v
 * with steps h1 = 2 h2, each divided by the float difference actually taken: cancels the
 * h^2 term. *v is restored. */
double dc_richardson_f32(float *v, float h1, float h2, dc_loss_fn loss, void *ctx);

/* ---- TAP (inline: the counter is the including test's) ---- */

/* One test point: st is want and the host's last error names sub. */
static inline void dc_expect(grm_status st, grm_status want, const char *sub, const char *what)
{
    const char *msg = harness_host()->last_error();
    tap_ok(st == want && strstr(msg, sub) != NULL, "%s: status %d, message names '%s' (%s)",
           what, (int)st, sub, msg);
}

#endif /* DENSE_CHECKS_H */

/* tests/emb-fakes.h - what the embedding-store tests (tests/test-emb-static.c,
 * test-emb-dynamic.c, test-emb-dynamic-stress.c) share: the store under test, a fake
 * optimizer whose row update each test can compute by hand, and two helpers over the
 * store. Implemented in tests/emb-fakes.c, linked into each of those tests. */
#ifndef EMB_FAKES_H
#define EMB_FAKES_H

#include <stdint.h>

#include <grm/grm.h>

/* The store plugin under test and its ops table; each test's main sets both before
 * anything below runs. */
extern const grm_plugin_info *info;
extern const grm_emb_ops *ops;

/* ---- a fake optimizer: row -= 0.5 * grad ----
 * With S >= 2 state floats per element, state[0 .. dim) counts the row's updates and
 * state[dim .. 2 dim) holds the step of its last one; with S < 2 state is not touched.
 * The first FAKE_LOG_MAX row_step calls are logged in call order (the counter is atomic,
 * so concurrent calls take distinct slots). step (dense) does nothing. */

#define FAKE_LOG_MAX 64

typedef struct fake_opt {
    int32_t S;                        /* state floats per element, returned by state_floats */
    int64_t calls;                    /* row_step calls so far */
    float *rows[FAKE_LOG_MAX];        /* row pointer of each logged call */
    float *states[FAKE_LOG_MAX];      /* its state pointer */
    int64_t steps[FAKE_LOG_MAX];      /* its step */
} fake_opt;

/* The fake's ops; the instance is a fake_opt (borrowed; create and destroy are NULL, the
 * test owns it). Use as grm_optimizer { &fake_ops, &o }. */
extern const grm_opt_ops fake_ops;

/* ---- helpers over the store under test ---- */

/* 1 when the host's last error message contains needle; else 0, printing both as TAP
 * comments. */
int has(const char *needle);

/* The tensor of store s named `name`, through ops->tensors; a zeroed tensor (name NULL)
 * when there is none. */
grm_named_tensor find_tensor(void *s, const char *name);

#endif /* EMB_FAKES_H */

/* plugins/emb-static/emb_static.h - internal declarations of emb-static, the fixed-capacity
 * baseline embedding store (DESIGN.md §3): one contiguous block per table holding rows,
 * optimizer state and per-row update counts. plugin.c is the glue; emb_static_ref.c holds
 * the plain-loop reference of lookup and update, emb_static_cpu.c the threaded version. */
#ifndef EMB_STATIC_H
#define EMB_STATIC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <grm/emb.h>
#include <grm/host.h>
#include <grm/opt.h>

/* on_out_of_range values (the ENUM parameter's choice index). */
enum es_range_mode {
    ES_RANGE_ERROR = 0,    /* an id outside [0, rows) is GRM_EINVAL */
    ES_RANGE_MODULO = 1    /* an id is reduced modulo rows (negative ids too) */
};

/* impl values (the ENUM parameter's choice index). */
enum es_impl {
    ES_IMPL_CPU = 0,       /* emb_static_cpu.c: host->parallel_for over ids */
    ES_IMPL_REF = 1,       /* emb_static_ref.c: plain loops, one thread */
    ES_IMPL_AUTO = 2       /* ref on [pipeline] device = ref, else cpu (grm/backend.h) */
};

/* update values (the ENUM parameter's choice index). */
enum es_update_mode {
    ES_UPDATE_SPARSE = 0,  /* only the rows of the update's ids step (TF-style sparse) */
    ES_UPDATE_DENSE = 1    /* every row steps, untouched rows with a zero gradient */
};

/* The config struct the declared parameters fill (plugin.c: es_params). */
typedef struct es_config {
    int32_t on_out_of_range;   /* es_range_mode */
    int32_t impl;              /* es_impl */
    int32_t update;            /* es_update_mode */
} es_config;

/* One table. The block is one host->alloc allocation; the three arrays point into it. */
typedef struct es_table {
    const char *name;          /* borrowed from the spec, for the instance's life */
    int64_t rows;              /* R: ids in [0, R) */
    int32_t dim;               /* D: floats per row */
    int32_t init;              /* grm_emb_init */
    double init_scale;         /* `a` of the initializer */
    uint64_t seed;             /* grm_row_init seed */
    uint64_t name_hash;        /* grm_str_hash64(name) */
    void *block;               /* owned (host->free on CPU) */
    size_t bytes;              /* size of block */
    float *weight;             /* [R, D] f32 */
    float *state;              /* [R, S*D] f32, zeroed at create; NULL when S == 0 */
    int64_t *steps;            /* [R] i64: updates applied to each row */
    char *tensor_names[3];     /* owned (malloc): "<name>.weight", ".opt_state", ".steps" */
    int64_t *all_ids;          /* owned (malloc) [R]: 0..R-1 (update = dense, lazily) */
    float *dense_grad;         /* owned (malloc) [R, D]: scratch (update = dense, lazily) */
    atomic_llong lookups;      /* ids looked up */
} es_table;

typedef struct es_store es_store;

/* Copy rows of ids [n] into out [n, D]; ids are already checked (error mode) or are
 * reduced by es_row_of (modulo mode). */
typedef grm_status (*es_gather_fn)(const es_store *s, const es_table *t, float *out,
                                   const int64_t *ids, int64_t n);

/* Apply the row optimizer to the rows of unique ids [n] with grads [n, D]; for each row
 * steps[row] += 1 and opt->row_step(row, state, grad, D, steps[row]). */
typedef grm_status (*es_update_fn)(const es_store *s, es_table *t, const int64_t *ids,
                                   const float *grads, int64_t n);

/* One instance. */
struct es_store {
    const grm_host_api *host;  /* static */
    grm_optimizer opt;         /* copy of the borrowed handle; ops NULL when none given */
    int32_t state_floats;      /* S: optimizer floats per parameter element */
    int32_t range_mode;        /* es_range_mode */
    int32_t update_mode;       /* es_update_mode */
    int32_t ntables;
    es_table *tables;          /* owned (malloc) [ntables] */
    es_gather_fn gather;       /* chosen in create from `impl` */
    es_update_fn update;
};

/* Row of `id` in t under `mode`: id itself (error mode; the caller has checked the range)
 * or id reduced into [0, R) (modulo mode). */
static inline int64_t es_row_of(const es_table *t, int32_t mode, int64_t id)
{
    if (mode == ES_RANGE_MODULO) {
        const int64_t r = id % t->rows;
        return r < 0 ? r + t->rows : r;
    }
    return id;
}

/* ---- emb_static_ref.c ---- */
grm_status es_gather_ref(const es_store *s, const es_table *t, float *out,
                         const int64_t *ids, int64_t n);
grm_status es_update_ref(const es_store *s, es_table *t, const int64_t *ids,
                         const float *grads, int64_t n);

/* ---- emb_static_cpu.c ---- */
grm_status es_gather_cpu(const es_store *s, const es_table *t, float *out,
                         const int64_t *ids, int64_t n);
grm_status es_update_cpu(const es_store *s, es_table *t, const int64_t *ids,
                         const float *grads, int64_t n);

#endif /* EMB_STATIC_H */

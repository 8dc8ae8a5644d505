/* plugins/dense-mlp/linear.c - the parameters of the shared linear layer (linear.h): the
 * one-block allocation of parameters and gradients (STYLE.md §8), Xavier/Glorot uniform
 * init (Glorot & Bengio 2010) and the named tensor views that params() returns. Compiled
 * into dense-mlp.so and dense-mmoe.so. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grm/rng.h>

#include "linear.h"

size_t linear_nparams(const linear_layer *ly)
{
    return (size_t)(ly->in * ly->out + ly->out);
}

grm_status linear_block_alloc(const grm_host_api *host, const char *who, size_t nparams,
                              float **block)
{
    static const grm_device cpu = { GRM_DEVICE_CPU, 0 };
    *block = host->alloc(cpu, 2 * nparams * sizeof(float), 64);
    if (*block == NULL)
        return host->errorf(GRM_ENOMEM, "%s: create: cannot allocate %zu parameters", who,
                            nparams);
    memset(*block, 0, 2 * nparams * sizeof(float));
    return GRM_OK;
}

void linear_xavier_uniform(float *w, int64_t in, int64_t out, uint64_t *state)
{
    const double a = sqrt(6.0 / (double)(in + out));
    for (int64_t i = 0; i < in * out; i++)
        w[i] = (float)((2.0 * grm_rng_uniform01(state) - 1.0) * a);
}

void linear_bind(linear_layer *ly, float **p, float **g, uint64_t *state)
{
    ly->w = *p;
    ly->dw = *g;
    *p += ly->in * ly->out;
    *g += ly->in * ly->out;
    ly->b = *p;                 // biases start at zero (the block is zeroed)
    ly->db = *g;
    *p += ly->out;
    *g += ly->out;
    linear_xavier_uniform(ly->w, ly->in, ly->out, state);
}

void linear_views(const linear_layer *ly, int32_t is_bias, const char *name,
                  grm_named_tensor *value, grm_tensor *grad)
{
    grm_tensor t = { 0 };
    t.dtype = GRM_DTYPE_F32;
    t.device.type = GRM_DEVICE_CPU;
    for (int d = 0; d < GRM_TENSOR_MAX_DIMS; d++)
        t.shape[d] = 1;
    t.ndim = is_bias ? 1 : 2;
    t.shape[0] = ly->out;
    if (!is_bias)
        t.shape[1] = ly->in;
    if (value != NULL) {
        value->name = name;
        value->tensor = t;
        value->tensor.data = is_bias ? ly->b : ly->w;
    }
    if (grad != NULL) {
        *grad = t;
        grad->data = is_bias ? ly->db : ly->dw;
    }
}

grm_status linear_cache_reserve(const grm_host_api *host, const char *who, float **cache,
                                int64_t *rows_cap, int64_t per_row, int64_t rows,
                                int *grown)
{
    *grown = 0;
    if (rows <= *rows_cap)
        return GRM_OK;
    int64_t cap = *rows_cap + *rows_cap / 2;
    if (cap < rows)
        cap = rows;
    if ((uint64_t)cap > SIZE_MAX / sizeof(float) / (uint64_t)per_row)
        return host->errorf(GRM_ENOMEM, "%s: forward: %lld rows of %lld floats overflow "
                            "size_t", who, (long long)cap, (long long)per_row);
    float *c = malloc((size_t)cap * (size_t)per_row * sizeof *c);
    if (c == NULL)
        return host->errorf(GRM_ENOMEM, "%s: forward: cannot allocate the activation cache "
                            "for %lld rows (%zu bytes)", who, (long long)cap,
                            (size_t)cap * (size_t)per_row * sizeof *c);
    free(*cache);
    *cache = c;
    *rows_cap = cap;
    *grown = 1;
    return GRM_OK;
}

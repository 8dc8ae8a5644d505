/* tests/ckpt-edit.c - forges ckpt-grm checkpoints for the tests of hostile checkpoints
 * (issue 25): reads IN through the ckpt-grm plugin, applies the edits, and writes OUT with
 * every checksum recomputed, so only the content's meaning is wrong. Not a test itself.
 *
 *   ckpt-edit IN                 "meta TEXT", then the tensors: name, dtype, elements
 *   ckpt-edit IN OUT EDIT...
 *     drop=PREFIX          drop every tensor whose name starts with PREFIX
 *     set=NAME:I:VALUE     set element I of the int64 tensor NAME to VALUE
 *     nan=NAME:I           set element I of the f32 tensor NAME to NaN
 *     rename=OLD:NEW       rename tensor OLD
 *     dup=NAME             append a second copy of tensor NAME
 *     meta=TEXT            replace the metadata string
 *
 * Exit 0 on success, 1 with a message on stderr. Needs GRM_TOP_BUILDDIR (make check). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grm/ckpt.h>

#include "harness.h"

typedef struct edit_list {
    grm_named_tensor *v;
    int64_t n, cap;
} edit_list;

static size_t elem_size(int32_t dtype)
{
    switch (dtype) {
    case GRM_DTYPE_F16: case GRM_DTYPE_BF16: return 2;
    case GRM_DTYPE_F32: case GRM_DTYPE_I32: return 4;
    case GRM_DTYPE_I64: return 8;
    default: return 1;
    }
}

static int64_t numel(const grm_tensor *t)
{
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static int add(edit_list *l, const char *name, const grm_tensor *t)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
        if (!l->v) return 1;
    }
    size_t bytes = (size_t)numel(t) * elem_size(t->dtype);
    grm_named_tensor *o = &l->v[l->n++];
    o->name = strdup(name);
    o->tensor = *t;
    o->tensor.data = malloc(bytes ? bytes : 1);
    if (!o->name || !o->tensor.data) return 1;
    memcpy(o->tensor.data, t->data, bytes);
    return 0;
}

/* Every name and payload the list owns (a renamed tensor's old name is freed at rename). */
static void list_free(edit_list *l)
{
    for (int64_t i = 0; i < l->n; i++) {
        free((char *)l->v[i].name);
        free(l->v[i].tensor.data);
    }
    free(l->v);
}

static grm_status visit(void *user, const grm_named_tensor *t)
{
    return add(user, t->name, &t->tensor) ? GRM_ENOMEM : GRM_OK;
}

static grm_named_tensor *find(edit_list *l, const char *name)
{
    for (int64_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, name) == 0) return &l->v[i];
    return NULL;
}

static int fail(const char *what, const char *arg)
{
    fprintf(stderr, "ckpt-edit: %s: %s\n", what, arg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) return fail("usage", "ckpt-edit IN [OUT EDIT...]");
    const grm_plugin_info *info = harness_plugin("ckpt-grm");
    const grm_ckpt_ops *ops = info->ops;
    void *ck = NULL;
    edit_list l = { 0 };
    static char meta[1 << 16];
    if (ops->create(harness_config(info, NULL), &ck) != GRM_OK
        || ops->load(ck, argv[1], visit, &l) != GRM_OK
        || ops->meta(ck, argv[1], meta, sizeof meta) != GRM_OK)
        return fail(argv[1], harness_host()->last_error());
    if (argc == 2) {
        printf("meta %s\n", meta);
        for (int64_t i = 0; i < l.n; i++)
            printf("%s %d %" PRId64 "\n", l.v[i].name, (int)l.v[i].tensor.dtype,
                   numel(&l.v[i].tensor));
        list_free(&l);
        ops->destroy(ck);
        return 0;
    }
    for (int a = 3; a < argc; a++) {
        char arg[4096];
        snprintf(arg, sizeof arg, "%s", argv[a]);
        char *val = strchr(arg, '=');
        if (!val) return fail("not an edit", argv[a]);
        *val++ = '\0';
        if (strcmp(arg, "drop") == 0) {
            int64_t k = 0;
            for (int64_t i = 0; i < l.n; i++) {
                if (strncmp(l.v[i].name, val, strlen(val)) != 0) {
                    l.v[k++] = l.v[i];
                } else {
                    free((char *)l.v[i].name);
                    free(l.v[i].tensor.data);
                }
            }
            if (k == l.n) return fail("no tensor starts with", val);
            l.n = k;
        } else if (strcmp(arg, "set") == 0) {
            char *c1 = strchr(val, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (!c2) return fail("set=NAME:I:VALUE", argv[a]);
            *c1 = *c2 = '\0';
            grm_named_tensor *t = find(&l, val);
            int64_t i = strtoll(c1 + 1, NULL, 10);
            if (!t || t->tensor.dtype != GRM_DTYPE_I64 || i < 0 || i >= numel(&t->tensor))
                return fail("no such int64 element", argv[a]);
            ((int64_t *)t->tensor.data)[i] = strtoll(c2 + 1, NULL, 10);
        } else if (strcmp(arg, "nan") == 0) {
            char *c1 = strchr(val, ':');
            if (!c1) return fail("nan=NAME:I", argv[a]);
            *c1 = '\0';
            grm_named_tensor *t = find(&l, val);
            int64_t i = strtoll(c1 + 1, NULL, 10);
            if (!t || t->tensor.dtype != GRM_DTYPE_F32 || i < 0 || i >= numel(&t->tensor))
                return fail("no such f32 element", argv[a]);
            ((float *)t->tensor.data)[i] = NAN;
        } else if (strcmp(arg, "rename") == 0) {
            char *c = strchr(val, ':');
            grm_named_tensor *t = c ? (*c = '\0', find(&l, val)) : NULL;
            if (!t) return fail("no such tensor", argv[a]);
            free((char *)t->name);
            t->name = strdup(c + 1);
        } else if (strcmp(arg, "dup") == 0) {
            grm_named_tensor *t = find(&l, val);
            grm_tensor copy;   /* add() may move the list */
            if (t) copy = t->tensor;
            if (!t || add(&l, val, &copy)) return fail("no such tensor", val);
        } else if (strcmp(arg, "meta") == 0) {
            snprintf(meta, sizeof meta, "%s", val);
        } else {
            return fail("unknown edit", arg);
        }
    }
    if (ops->save(ck, argv[2], l.v, l.n, meta) != GRM_OK)
        return fail(argv[2], harness_host()->last_error());
    list_free(&l);
    ops->destroy(ck);
    return 0;
}

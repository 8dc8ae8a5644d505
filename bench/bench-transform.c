/* bench/bench-transform.c - C driver of bench/bench_transform.py: the cost per input byte
 * of transform-basic's fused pass (RecIS §2.1 Feature Engine, §2.2.2 operator fusion) for
 * a pipeline of 10 declared transforms against one of 256 (64 each of hash, mod,
 * bucketize and cross over 192 columns), and the 256 run unfused (one instance per
 * transform, chained). Synthetic columns from a fixed seed. Prints one line per case:
 *   case=<c> transforms=T cols=C rows=R bytes=B ms=M ns_per_byte=X threads=N
 * Usage: bench-transform [--rows R] [--threads N] [--reps K] (GRM_TOP_BUILDDIR set). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grm/rng.h>

#include "harness.h"

#define MAXCOLS 256

static const grm_transform_ops *ops;
static const grm_plugin_info *info;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench-transform: %s: %s\n", what, harness_host()->last_error());
    exit(1);
}

/* A pipeline: H hashed i64 columns h*, M mod i64 columns m*, B bucketized f32 columns b*,
 * C crosses of hashed pairs (h{2k} * h{2k+1}, wrapping). */
typedef struct pipe {
    int H, M, B, C;
    int ncols;
    char names[MAXCOLS][8];
    grm_column cols[MAXCOLS];
    grm_field fields[MAXCOLS];
    char kv[4][4096];   /* hash, mod, bucketize, cross */
    size_t bytes;       /* input bytes of the chunk */
} pipe;

static void pipe_init(pipe *p, int H, int M, int B, int C, int64_t rows)
{
    uint64_t seed = 12345;
    memset(p, 0, sizeof(*p));
    p->H = H, p->M = M, p->B = B, p->C = C;
    snprintf(p->kv[0], sizeof(p->kv[0]), "hash=");
    snprintf(p->kv[1], sizeof(p->kv[1]), "mod=");
    snprintf(p->kv[2], sizeof(p->kv[2]), "bucketize=");
    snprintf(p->kv[3], sizeof(p->kv[3]), "cross=");
    for (int j = 0; j < H + M + B; j++) {
        const char kind = j < H ? 'h' : j < H + M ? 'm' : 'b';
        const int k = j < H ? j : j < H + M ? j - H : j - H - M;
        snprintf(p->names[j], sizeof(p->names[j]), "%c%d", kind, k);
        const int f32 = kind == 'b';
        void *v = malloc((size_t)rows * (f32 ? sizeof(float) : sizeof(int64_t)));
        for (int64_t r = 0; r < rows; r++) {
            const uint64_t u = grm_mix64(seed++);
            if (f32) {
                ((float *)v)[r] = (float)((double)(u >> 11) * 0x1.0p-53 * 100.0);
            } else {
                ((int64_t *)v)[r] = (int64_t)(u >> 20);
            }
        }
        p->cols[j] = (grm_column){ .name = p->names[j], .type = f32 ? GRM_COL_F32 : GRM_COL_I64,
                                   .rows = rows, .values = v };
        p->fields[j] = (grm_field){ .name = p->names[j], .type = p->cols[j].type };
        p->bytes += (size_t)rows * (f32 ? sizeof(float) : sizeof(int64_t));
        char *const dst = p->kv[kind == 'h' ? 0 : kind == 'm' ? 1 : 2];
        const size_t at = strlen(dst);
        if (kind == 'h') {
            snprintf(dst + at, 4096 - at, "%s%s", k > 0 ? "," : "", p->names[j]);
        } else if (kind == 'm') {
            snprintf(dst + at, 4096 - at, "%s%s:%d", k > 0 ? "," : "", p->names[j], 1000 + k);
        } else {
            snprintf(dst + at, 4096 - at, "%s%s:10/20/30/40/50/60/70/80", k > 0 ? "," : "",
                     p->names[j]);
        }
    }
    p->ncols = H + M + B;
    for (int c = 0; c < C; c++) {
        const size_t at = strlen(p->kv[3]);
        snprintf(p->kv[3] + at, 4096 - at, "%sh%d*h%d:x%d:1000000", c > 0 ? "," : "",
                 (2 * c) % H, (2 * c + 1) % H, c);
    }
}

static void pipe_fini(pipe *p)
{
    for (int j = 0; j < p->ncols; j++) free(p->cols[j].values);
}

static void *make(const grm_schema *schema, const char *const *kvs, int n)
{
    const void *cfg = NULL;
    void *inst = NULL;
    if (harness_config_try(info, &cfg, kvs, n) != GRM_OK) die("config");
    if (ops->create(cfg, schema, &inst) != GRM_OK) die("create");
    return inst;
}

/* Median over reps of the time of `n` chained instances applied to `in`. */
static double time_chain(void *const *inst, int n, const grm_chunk *in, int reps)
{
    double ts[64];
    if (reps > 64) reps = 64;
    for (int k = -1; k < reps; k++) {   // k = -1 warms up (buffers sized, pages touched)
        const double t0 = now_ms();
        const grm_chunk *cur = in;
        for (int i = 0; i < n; i++) {
            const grm_chunk *out = NULL;
            if (ops->apply(inst[i], cur, &out) != GRM_OK) die("apply");
            cur = out;
        }
        if (k >= 0) ts[k] = now_ms() - t0;
    }
    for (int i = 1; i < reps; i++) {
        for (int j = i; j > 0 && ts[j] < ts[j - 1]; j--) {
            const double x = ts[j];
            ts[j] = ts[j - 1];
            ts[j - 1] = x;
        }
    }
    return ts[reps / 2];
}

static void report(const char *name, int transforms, const pipe *p, int64_t rows, double ms,
                   int threads)
{
    printf("case=%s transforms=%d cols=%d rows=%lld bytes=%zu ms=%.3f ns_per_byte=%.4f "
           "threads=%d\n", name, transforms, p->ncols, (long long)rows, p->bytes, ms,
           ms * 1e6 / (double)p->bytes, threads);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int64_t rows = 16384;
    int threads = 2, reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0) rows = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
    }
    if (grm__pool_init(threads) != GRM_OK) die("pool");
    info = harness_plugin("transform-basic");
    ops = info->ops;

    static pipe small, big;
    // 10 transforms: 3 hash, 2 mod, 3 bucketize, 2 cross over 8 columns.
    pipe_init(&small, 3, 2, 3, 2, rows);
    // 256 transforms: 64 of each over 192 columns (64 entries is GRM_PARAM_LIST_MAX).
    pipe_init(&big, 64, 64, 64, 64, rows);
    const pipe *const pp[2] = { &small, &big };
    for (int k = 0; k < 2; k++) {
        const pipe *const p = pp[k];
        const grm_chunk in = { .struct_size = sizeof(grm_chunk), .ncols = p->ncols,
                               .rows = rows, .cols = p->cols };
        const grm_schema schema = { .struct_size = sizeof(grm_schema), .nfields = p->ncols,
                                    .fields = p->fields };
        const char *kvs[4] = { p->kv[0], p->kv[1], p->kv[2], p->kv[3] };
        void *inst = make(&schema, kvs, 4);
        const double ms = time_chain(&inst, 1, &in, reps);
        report(k == 0 ? "fused10" : "fused256", p->H + p->M + p->B + p->C, p, rows, ms,
               threads);
        ops->destroy(inst);
    }

    // The 256 unfused: one instance per declared transform, each fed the previous output.
    {
        const pipe *const p = &big;
        const grm_chunk in = { .struct_size = sizeof(grm_chunk), .ncols = p->ncols,
                               .rows = rows, .cols = p->cols };
        const int n = p->H + p->M + p->B + p->C;
        void **inst = calloc((size_t)n, sizeof(void *));
        const grm_schema *schema = &(const grm_schema){ .struct_size = sizeof(grm_schema),
                                                        .nfields = p->ncols,
                                                        .fields = p->fields };
        int at = 0;
        for (int kind = 0; kind < 4; kind++) {
            // Split "key=e1,e2,..." into one config per entry.
            const char *const s = p->kv[kind];
            const char *const eq = strchr(s, '=');
            const char *e = eq + 1;
            while (*e) {
                const char *const comma = strchr(e, ',');
                const size_t len = comma != NULL ? (size_t)(comma - e) : strlen(e);
                char kv[256];
                snprintf(kv, sizeof(kv), "%.*s%.*s", (int)(eq - s + 1), s, (int)len, e);
                const char *kvs[1] = { kv };
                inst[at] = make(schema, kvs, 1);
                if (ops->schema(inst[at], &schema) != GRM_OK) die("schema");
                at++;
                e = comma != NULL ? comma + 1 : e + len;
            }
        }
        const double ms = time_chain(inst, at, &in, reps);
        report("unfused256", at, p, rows, ms, threads);
        for (int i = 0; i < at; i++) ops->destroy(inst[i]);
        free(inst);
    }
    pipe_fini(&small);
    pipe_fini(&big);
    return 0;
}

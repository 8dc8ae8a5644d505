/* tests/test-cuda-hash.c - kernels/hash_table.cu against a plain C map written here, with
 * row values from grm_row_init (grm/rng.h) itself: find_or_insert of duplicate-heavy
 * batches with the 64-bit edge ids (INT64_MIN, INT64_MAX, 0, -1), growth of the key
 * structure (small initial capacity) that must keep every key on its row and every row's
 * value, find of present and absent keys, insert_or_assign, erase and re-insert (recycled
 * rows get the initial value again). Rows: exact for ZEROS and UNIFORM init (bit-exact
 * port), rtol 1e-6 for NORMAL (device log/sin/cos in double). Row indices are compared as
 * a mapping (same key, same row; distinct keys, distinct rows), since which free row a key
 * gets is not specified. */
#include <grm/rng.h>

#include "cuda-common.h"

#define N_CFG 3
#define N_PER_CFG 9
#define N_NEG 3
#define MAXK 8192

typedef struct hcfg {
    int32_t dim, init;
    const char *name;
} hcfg;

static const hcfg cfgs[N_CFG] = {
    {64, GRM_EMB_INIT_UNIFORM, "uniform dim 64"},
    {7, GRM_EMB_INIT_NORMAL, "normal dim 7"},
    {128, GRM_EMB_INIT_ZEROS, "zeros dim 128"},
};

/* ---- the reference: key -> (live, value [dim]) ---- */
typedef struct ref_map {
    int64_t keys[MAXK];
    int live[MAXK];
    int64_t row[MAXK];      /* the device row last seen for the key */
    float *val;             /* [MAXK, dim] */
    int64_t n;
} ref_map;

static int64_t ref_find(const ref_map *m, int64_t key)
{
    for (int64_t i = 0; i < m->n; i++)
        if (m->keys[i] == key) return i;
    return -1;
}

static int64_t ref_add(ref_map *m, int64_t key)
{
    int64_t i = ref_find(m, key);
    if (i < 0) {
        i = m->n++;
        m->keys[i] = key;
    }
    return i;
}

static int64_t ref_live(const ref_map *m)
{
    int64_t c = 0;
    for (int64_t i = 0; i < m->n; i++) c += m->live[i];
    return c;
}

static void batch_keys(int64_t *keys, int64_t n, int64_t range, int64_t base, uint64_t *rng)
{
    static const int64_t edges[] = {INT64_MIN, INT64_MAX, 0, -1};
    for (int64_t i = 0; i < n; i++) {
        const uint64_t r = harness_rand(rng);
        keys[i] = r % 16 == 0 ? edges[(r >> 8) % 4]
                              : (int64_t)((uint64_t)(base + (int64_t)((r >> 8) % (uint64_t)range))
                                          * 0x9E3779B97F4A7C15ULL);
    }
}

/* Check device rows of keys [n] against the map: same key same row, distinct keys distinct
 * rows among live keys, and gathered values equal the map's values. */
static int check_rows(grm_cuda_hash *h, ref_map *m, const int64_t *keys, const int64_t *rows,
                      int64_t n, int32_t dim, int exact, const char *what)
{
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        const int64_t k = ref_find(m, keys[i]);
        if (k < 0 || !m->live[k]) {
            if (rows[i] != -1) {
                tap_diag("%s: absent key %lld has row %lld", what, (long long)keys[i],
                         (long long)rows[i]);
                ok = 0;
            }
            continue;
        }
        if (rows[i] < 0 || (m->row[k] >= 0 && m->row[k] != rows[i])) {
            tap_diag("%s: key %lld on row %lld, expected %lld", what, (long long)keys[i],
                     (long long)rows[i], (long long)m->row[k]);
            ok = 0;
        }
        m->row[k] = rows[i];
    }
    for (int64_t a = 0; a < m->n && ok; a++)
        for (int64_t b = a + 1; b < m->n && ok; b++)
            if (m->live[a] && m->live[b] && m->row[a] >= 0 && m->row[a] == m->row[b]) {
                tap_diag("%s: keys %lld and %lld share row %lld", what, (long long)m->keys[a],
                         (long long)m->keys[b], (long long)m->row[a]);
                ok = 0;
            }
    if (!ok) return tap_ok(0, "%s", what);
    int64_t *d_rows = tc_upload(rows, (size_t)n * 8);
    float *d_out = tc_alloc((size_t)n * dim * 4);
    float *got = tc_xmalloc((size_t)n * dim * 4), *want = tc_xmalloc((size_t)n * dim * 4);
    const grm_status st = grm_cuda_hash_gather(h, d_out, d_rows, n, NULL);
    tc_download(got, d_out, (size_t)n * dim * 4);
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = ref_find(m, keys[i]);
        for (int32_t j = 0; j < dim; j++)
            want[i * dim + j] = (k >= 0 && m->live[k]) ? m->val[k * dim + j] : 0.0f;
    }
    char w2[200];
    snprintf(w2, sizeof w2, "%s (gather st=%d)", what, (int)st);
    const int r = tap_close_f32(got, want, n * dim, exact ? 0 : 1e-6, exact ? 0 : 1e-7, w2);
    grm_cuda_free(d_rows);
    grm_cuda_free(d_out);
    free(got);
    free(want);
    return r;
}

static void run_cfg(const hcfg *c, uint64_t *rng)
{
    const int32_t D = c->dim;
    const int exact = c->init != GRM_EMB_INIT_NORMAL;
    const uint64_t seed = 1234, th = grm_str_hash64("items");
    grm_cuda_hash_opts o = {.capacity = 64, .dim = D, .init = c->init, .chunk_rows = 100,
                            .init_scale = 0.05, .seed = seed, .table_hash = th};
    grm_cuda_hash *h = NULL;
    ref_map *m = tc_xmalloc(sizeof *m);
    m->val = tc_xmalloc((size_t)MAXK * D * 4);
    for (int64_t i = 0; i < MAXK; i++) m->row[i] = -1;
    int64_t *keys = tc_xmalloc(4000 * 8), *rows = tc_xmalloc(4000 * 8);
    int64_t *d_keys = tc_alloc(4000 * 8), *d_rows = tc_alloc(4000 * 8);
    float *vals = tc_xmalloc((size_t)500 * D * 4);
    float *d_vals = tc_alloc((size_t)500 * D * 4);
    char what[160];
    grm_status st = grm_cuda_hash_create(&h, &o);
    if (st != GRM_OK) tc_bail("grm_cuda_hash_create");

    /* 1. find_or_insert of 1000 keys over ~300 values + edge ids, into 64 slots */
    batch_keys(keys, 1000, 300, 0, rng);
    for (int64_t i = 0; i < 1000; i++) {
        const int64_t k = ref_add(m, keys[i]);
        if (!m->live[k]) {
            m->live[k] = 1;
            grm_row_init(m->val + k * D, D, c->init, 0.05, seed, th, keys[i]);
        }
    }
    if (grm_cuda_memcpy_h2d(d_keys, keys, 1000 * 8) != GRM_OK) tc_bail("h2d");
    st = grm_cuda_hash_find_or_insert(h, d_rows, d_keys, 1000, NULL);
    tc_download(rows, d_rows, 1000 * 8);
    snprintf(what, sizeof what, "%s: find_or_insert of 1000 duplicate-heavy keys: rows and "
             "grm_row_init values (st=%d)", c->name, (int)st);
    check_rows(h, m, keys, rows, 1000, D, exact, what);
    tap_ok(grm_cuda_hash_size(h) == ref_live(m) &&
               (double)grm_cuda_hash_capacity(h) * 0.75 >= (double)ref_live(m),
           "%s: size %lld == %lld distinct keys; key slots grew from 64 to %lld (load <= 0.75)",
           c->name, (long long)grm_cuda_hash_size(h), (long long)ref_live(m),
           (long long)grm_cuda_hash_capacity(h));

    /* 2. a larger batch forces more growth; old keys keep their rows and values */
    batch_keys(keys, 4000, 3000, 1000, rng);
    for (int64_t i = 0; i < 4000; i++) {
        const int64_t k = ref_add(m, keys[i]);
        if (!m->live[k]) {
            m->live[k] = 1;
            grm_row_init(m->val + k * D, D, c->init, 0.05, seed, th, keys[i]);
        }
    }
    if (grm_cuda_memcpy_h2d(d_keys, keys, 4000 * 8) != GRM_OK) tc_bail("h2d");
    st = grm_cuda_hash_find_or_insert(h, d_rows, d_keys, 4000, NULL);
    tc_download(rows, d_rows, 4000 * 8);
    snprintf(what, sizeof what, "%s: second batch of 4000 keys after growth to %lld slots "
             "(st=%d)", c->name, (long long)grm_cuda_hash_capacity(h), (int)st);
    check_rows(h, m, keys, rows, 4000, D, exact, what);

    /* 3. find of every known key (old rows unmoved) and of absent keys */
    const int64_t nk = m->n < 3000 ? m->n : 3000;
    for (int64_t i = 0; i < nk; i++) keys[i] = m->keys[i];
    for (int64_t i = nk; i < nk + 500; i++) keys[i] = (int64_t)(0x5555000000000000LL + i);
    if (grm_cuda_memcpy_h2d(d_keys, keys, (size_t)(nk + 500) * 8) != GRM_OK) tc_bail("h2d");
    st = grm_cuda_hash_find(h, d_rows, d_keys, nk + 500, NULL);
    tc_download(rows, d_rows, (size_t)(nk + 500) * 8);
    snprintf(what, sizeof what, "%s: find of %lld present keys (rows unmoved by growth) and "
             "500 absent ones (-1) (st=%d)", c->name, (long long)nk, (int)st);
    check_rows(h, m, keys, rows, nk + 500, D, exact, what);

    /* 4. insert_or_assign of 500 distinct keys, half present, half new */
    for (int64_t i = 0; i < 500; i++) {
        keys[i] = i < 250 ? m->keys[i * 3] : (int64_t)(0x7000000000000000LL + i);
        const int64_t k = ref_add(m, keys[i]);
        m->live[k] = 1;
        for (int32_t j = 0; j < D; j++) {
            vals[i * D + j] = harness_randf(rng);
            m->val[k * D + j] = vals[i * D + j];
        }
    }
    if (grm_cuda_memcpy_h2d(d_keys, keys, 500 * 8) != GRM_OK ||
        grm_cuda_memcpy_h2d(d_vals, vals, (size_t)500 * D * 4) != GRM_OK)
        tc_bail("h2d");
    st = grm_cuda_hash_insert_or_assign(h, d_keys, d_vals, 500, NULL);
    if (st == GRM_OK) st = grm_cuda_hash_find(h, d_rows, d_keys, 500, NULL);
    tc_download(rows, d_rows, 500 * 8);
    snprintf(what, sizeof what, "%s: insert_or_assign of 250 present + 250 new keys (st=%d)",
             c->name, (int)st);
    check_rows(h, m, keys, rows, 500, D, 1, what);

    /* 5. erase 300 keys (edge ids included) and 50 absent ones */
    for (int64_t i = 0; i < 300; i++) keys[i] = m->keys[i * 5 % m->n];
    keys[0] = INT64_MIN, keys[1] = INT64_MAX, keys[2] = 0, keys[3] = -1;
    for (int64_t i = 300; i < 350; i++) keys[i] = (int64_t)(0x6666000000000000LL + i);
    for (int64_t i = 0; i < 300; i++) {
        const int64_t k = ref_find(m, keys[i]);
        if (k >= 0) m->live[k] = 0, m->row[k] = -1;
    }
    if (grm_cuda_memcpy_h2d(d_keys, keys, 350 * 8) != GRM_OK) tc_bail("h2d");
    st = grm_cuda_hash_erase(h, d_keys, 350, NULL);
    for (int64_t i = 0; i < m->n && i < 3000; i++) keys[i] = m->keys[i];
    const int64_t nf = m->n < 3000 ? m->n : 3000;
    if (grm_cuda_memcpy_h2d(d_keys, keys, (size_t)nf * 8) != GRM_OK) tc_bail("h2d");
    if (st == GRM_OK) st = grm_cuda_hash_find(h, d_rows, d_keys, nf, NULL);
    tc_download(rows, d_rows, (size_t)nf * 8);
    snprintf(what, sizeof what, "%s: after erasing 300 keys, size %lld (want %lld), erased "
             "keys absent (st=%d)", c->name, (long long)grm_cuda_hash_size(h),
             (long long)ref_live(m), (int)st);
    tap_ok(grm_cuda_hash_size(h) == ref_live(m), "%s: size", what);
    check_rows(h, m, keys, rows, nf, D, exact, what);

    /* 6. re-insert the erased keys and 200 new ones, more than the free list holds:
     * recycled rows start from grm_row_init again, and the size counts both kinds */
    for (int64_t i = 0; i < 300; i++) keys[i] = m->keys[i * 5 % m->n];
    keys[0] = INT64_MIN, keys[1] = INT64_MAX, keys[2] = 0, keys[3] = -1;
    for (int64_t i = 300; i < 500; i++) keys[i] = (int64_t)(0x7777000000000000LL + i);
    for (int64_t i = 0; i < 500; i++) {
        const int64_t k = ref_add(m, keys[i]);
        if (!m->live[k]) {
            m->live[k] = 1;
            grm_row_init(m->val + k * D, D, c->init, 0.05, seed, th, keys[i]);
        }
    }
    if (grm_cuda_memcpy_h2d(d_keys, keys, 500 * 8) != GRM_OK) tc_bail("h2d");
    st = grm_cuda_hash_find_or_insert(h, d_rows, d_keys, 500, NULL);
    tc_download(rows, d_rows, 500 * 8);
    snprintf(what, sizeof what, "%s: re-insert of erased keys on recycled rows, new keys "
             "past them (size %lld, want %lld) (st=%d)", c->name,
             (long long)grm_cuda_hash_size(h), (long long)ref_live(m), (int)st);
    tap_ok(grm_cuda_hash_size(h) == ref_live(m), "%s: size", what);
    check_rows(h, m, keys, rows, 500, D, exact, what);

    grm_cuda_hash_destroy(h);
    grm_cuda_free(d_keys), grm_cuda_free(d_rows), grm_cuda_free(d_vals);
    free(keys), free(rows), free(vals), free(m->val), free(m);
}

static void negative_tests(void)
{
    grm_cuda_hash *h = NULL;
    grm_cuda_hash_opts o = {.capacity = 64, .dim = 0, .chunk_rows = 10};
    tc_expect_error(grm_cuda_hash_create(&h, &o), GRM_EINVAL, "dim 0 outside [1, 4096]",
                    "hash_create refuses dim 0");
    o.dim = 8, o.chunk_rows = 0;
    tc_expect_error(grm_cuda_hash_create(&h, &o), GRM_EINVAL, "chunk_rows 0 < 1",
                    "hash_create refuses chunk_rows 0");
    o.chunk_rows = 10, o.init = 7;
    tc_expect_error(grm_cuda_hash_create(&h, &o), GRM_EINVAL, "init 7 is not a grm_emb_init",
                    "hash_create refuses init 7");
}

int main(void)
{
    uint64_t rng = 0x68617368ULL;
    tap_plan(N_NEG + N_CFG * N_PER_CFG);
    negative_tests();
    if (!tc_have_device()) {
        for (int k = 0; k < N_CFG * N_PER_CFG; k++)
            tap_skip(CUDA_SKIP, "hash table case %d", k + 1);
        return tap_done();
    }
    for (int c = 0; c < N_CFG; c++) run_cfg(&cfgs[c], &rng);
    return tap_done();
}

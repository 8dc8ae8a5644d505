/* tests/test-dist.c - core/dist.c: distributed embedding lookup and update, run under mpirun
 * by tests/test-dist.sh at 1, 2 and 4 ranks through the comm-mpi plugin (GRM_TEST_COMM picks
 * another communicator, e.g. comm-single for a one-process run). With GRM_TAP_DIR set, rank r
 * writes its TAP to GRM_TAP_DIR/rank-r.tap (the script merges them); otherwise to stdout.
 *
 * Every rank regenerates every rank's ids and gradients (a pure function of seed, rank, step
 * and table), so each rank can compute the expected result alone on a full reference store:
 *  - lookups return exactly the rows a single full emb-dynamic store returns (bitwise),
 *  - after updates, every row this rank owns equals the full store after applying, per id, the
 *    sum over ranks of that id's gradients (SGD, dyadic gradients: the sums are exact, so the
 *    order of summation cannot matter), and the local store holds only owned rows,
 *  - the same for stage 1 / stage 2 dedup off, for update with explicit ids, and for the
 *    hierarchical mode (groups of 2 at 4 ranks, of 1 at 2 ranks), where the replicas of every
 *    shard are also compared with each other through an allgather of row checksums,
 *  - counters of a small case equal values computed from the ownership formula by hand,
 *  - argument, option-mismatch, store and communicator errors are reported on every rank. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grm/comm.h>
#include <grm/emb.h>
#include <grm/opt.h>

#include "dist.h"
#include "harness.h"
#include "sparse.h"
#include "tap.h"

#define NT 2
#define STEPS 3
#define MAXID 4096    /* ids per (rank, step, table) at most */

static grm_comm_handle comm;
static int32_t me, R;
static const grm_emb_ops *sops;
static const grm_plugin_info *sinfo;
static grm_optimizer opt;
static const int32_t dims[NT] = { 8, 3 };
static const grm_emb_table_spec specs[NT] = {
    { "items", 1024, 8, GRM_EMB_INIT_NORMAL, 0.25, 7 },
    { "cats", 64, 3, GRM_EMB_INIT_UNIFORM, 0.5, 11 },
};

static int has(const char *s)
{
    return strstr(harness_host()->last_error(), s) != NULL;
}

/* ---- deterministic data ---- */

/* A pool of ids shared by all ranks (overlap, duplicates) with the 64-bit edges (emb-dynamic
 * reserves INT64_MIN and INT64_MIN + 1, so the lowest edge is INT64_MIN + 2). */
#define POOL 48
static int64_t pool[POOL];

static void make_pool(void)
{
    static const int64_t edges[] = { INT64_MAX, INT64_MAX - 1, INT64_MIN + 2, INT64_MIN + 3,
                                     -1, 0, 1, 2 };
    uint64_t s = 12345;
    for (int i = 0; i < POOL; i++)
        pool[i] = i < 8 ? edges[i] : (int64_t)harness_rand(&s);
}

/* Ids of rank r at step s for table t: ~60% from the shared pool, the rest rank-private. */
static int64_t gen_ids(int64_t *ids, int32_t r, int s, int t)
{
    uint64_t st = 0x9e3779b97f4a7c15ULL * (uint64_t)(1 + r + 16 * s + 256 * t);
    const int64_t n = 30 + 11 * r + 7 * s + 5 * t;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t x = harness_rand(&st);
        ids[i] = x % 5 < 3 ? pool[(x >> 8) % POOL] : (int64_t)((x >> 3) * 7 + (uint64_t)r);
    }
    return n;
}

/* Dyadic gradients k/8, k in [-8, 8]: sums of a few are exact in float. */
static void gen_grads(float *g, int64_t n, int32_t D, int32_t r, int s, int t)
{
    uint64_t st = 0xabcdef12345ULL * (uint64_t)(3 + r + 16 * s + 256 * t);
    for (int64_t i = 0; i < n * D; i++) g[i] = (float)((int)(harness_rand(&st) % 17) - 8) / 8;
}

/* ---- stores ---- */

static void *make_store(void)
{
    void *inst = NULL;
    if (sops->create(harness_config(sinfo, (const char *)NULL), specs, NT, &opt, &inst) != GRM_OK) {
        printf("Bail out! store create: %s\n", harness_host()->last_error());
        exit(1);
    }
    return inst;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The reference: apply every rank's gradients of step s, table t to `ref`, summed per id. */
static grm_status ref_update(void *ref, int s, int t)
{
    const int32_t D = dims[t];
    int64_t *all = malloc(sizeof(int64_t) * MAXID * (size_t)R);
    float *g = malloc(sizeof(float) * MAXID * (size_t)D);
    int64_t *u = malloc(sizeof(int64_t) * MAXID * (size_t)R);
    float *sum = calloc((size_t)MAXID * (size_t)R * (size_t)D, sizeof(float));
    int64_t nu = 0;
    for (int32_t r = 0; r < R; r++) {
        const int64_t n = gen_ids(all, r, s, t);
        gen_grads(g, n, D, r, s, t);
        for (int64_t i = 0; i < n; i++) {
            int64_t k = 0;
            while (k < nu && u[k] != all[i]) k++;   /* plain linear search: independent code */
            if (k == nu) u[nu++] = all[i];
            for (int32_t j = 0; j < D; j++) sum[k * D + j] += g[i * D + j];
        }
    }
    const grm_status st = sops->update(ref, t, u, sum, nu, s + 1);
    free(all), free(g), free(u), free(sum);
    return st;
}

/* Every id touched by any rank in table t (sorted, distinct) into ids; returns the count. */
static int64_t all_touched(int64_t *ids, int t)
{
    int64_t m = 0;
    for (int s = 0; s < STEPS; s++) {
        for (int32_t r = 0; r < R; r++) m += gen_ids(ids + m, r, s, t);
    }
    qsort(ids, (size_t)m, sizeof *ids, cmp_i64);
    int64_t k = 0;
    for (int64_t i = 0; i < m; i++) {
        if (k == 0 || ids[k - 1] != ids[i]) ids[k++] = ids[i];
    }
    return k;
}

/* FNV-1a over bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* One full run: STEPS steps of lookup (compared with the reference) and update on both tables,
 * then the owned-row check. Returns 1 when all agree; fills *replica_ok for hierarchical. */
static int run_config(grm__dist_opts o, int explicit_ids, const char *what, int *replica_ok)
{
    void *store = make_store(), *ref = make_store();
    grm__dist *d = NULL;
    int ok = 1;
    int64_t *ids = malloc(sizeof(int64_t) * MAXID * STEPS * (size_t)R);
    int32_t *feat = malloc(sizeof(int32_t) * MAXID);
    float *rows = malloc(sizeof(float) * MAXID * 8 * STEPS * (size_t)R);
    float *want = malloc(sizeof(float) * MAXID * 8 * STEPS * (size_t)R);
    float *g = malloc(sizeof(float) * MAXID * 8);
    grm_status st = grm__dist_create(&comm, sops, store, NT, dims, &o, &d);
    if (st != GRM_OK) {
        tap_diag("%s: create: %s", what, harness_host()->last_error());
        ok = 0;
        goto done;
    }
    for (int s = 0; s < STEPS && ok; s++) {
        for (int t = 0; t < NT && ok; t++) {
            const int64_t n = gen_ids(ids, me, s, t);
            for (int64_t i = 0; i < n; i++) feat[i] = (int32_t)(i % 3);
            st = grm__dist_lookup(d, t, ids, o.nfeatures ? feat : NULL, n, 0, rows,
                                  GRM_EMB_INSERT);
            if (st != GRM_OK) {
                tap_diag("%s: lookup: %s", what, harness_host()->last_error());
                ok = 0;
                break;
            }
            sops->lookup(ref, want, t, ids, n, GRM_EMB_INSERT);
            if (memcmp(rows, want, (size_t)(n * dims[t]) * 4) != 0) {
                tap_diag("%s: step %d table %d: lookup differs from the full store", what, s, t);
                ok = 0;
            }
            gen_grads(g, n, dims[t], me, s, t);
            st = grm__dist_update(d, t, explicit_ids ? ids : NULL, g, n, s + 1);
            if (st != GRM_OK) {
                tap_diag("%s: update: %s", what, harness_host()->last_error());
                ok = 0;
                break;
            }
            if (ref_update(ref, s, t) != GRM_OK) ok = 0;
        }
    }
    /* Owned rows equal the reference; the store holds nothing else (flat mode); replicas
     * agree (checksum of the rows of this shard position, allgathered). */
    uint64_t h = 1469598103934665603ULL;
    for (int t = 0; t < NT && ok; t++) {
        const int64_t m = all_touched(ids, t);
        int64_t k = 0;
        for (int64_t i = 0; i < m; i++) {
            if (grm__dist_owner(d, me, ids[i]) == me) ids[k++] = ids[i];
        }
        if (sops->lookup(store, rows, t, ids, k, 0) != GRM_OK ||
            sops->lookup(ref, want, t, ids, k, 0) != GRM_OK) {
            ok = 0;
            break;
        }
        if (memcmp(rows, want, (size_t)(k * dims[t]) * 4) != 0) {
            tap_diag("%s: table %d: an owned row differs from the full store", what, t);
            ok = 0;
        }
        h = fnv(h, rows, (size_t)(k * dims[t]) * 4);
        grm_emb_stats es;
        if (o.group_size == 0 && sops->stats(store, t, &es) == GRM_OK && es.rows != k) {
            tap_diag("%s: table %d: local store holds %lld rows, owns %lld", what, t,
                     (long long)es.rows, (long long)k);
            ok = 0;
        }
    }
    if (replica_ok) {
        int64_t hs[64], mine = (int64_t)h;
        *replica_ok = comm.ops->allgather(comm.inst, hs, &mine, 1, GRM_DTYPE_I64) == GRM_OK;
        const int32_t I = o.group_size ? o.group_size : R;
        for (int32_t p = 0; p < R; p++) {
            if (p % I == me % I && hs[p] != mine) *replica_ok = 0;
        }
    }
done:
    grm__dist_destroy(d);
    sops->destroy(store);
    sops->destroy(ref);
    free(ids), free(feat), free(rows), free(want), free(g);
    return ok;
}

/* ---- counters of a small case ---- */

/* Rank r looks up { 10, 10, 20, 30 + r } (features 0, 1, 1, 2) of table 0 (D = 8), flat,
 * both dedup stages on. Expected values from owner(id) = fmix64(id) % R alone. */
static void test_counters(void)
{
    void *store = make_store();
    grm__dist *d = NULL;
    grm__dist_opts o = grm__dist_opts_default();
    o.nfeatures = 3;
    const int64_t D = 8;
    if (grm__dist_create(&comm, sops, store, NT, dims, &o, &d) != GRM_OK) {
        tap_ok(0, "counters: create: %s", harness_host()->last_error());
        sops->destroy(store);
        return;
    }
    const int64_t ids[4] = { 10, 10, 20, 30 + me };
    const int32_t feat[4] = { 0, 1, 1, 2 };
    float rows[4 * 8], g[4 * 8];
    for (int i = 0; i < 32; i++) g[i] = 0.125f;
    grm_status st = grm__dist_lookup(d, 0, ids, feat, 4, 0, rows, GRM_EMB_INSERT);
    st = st ? st : grm__dist_update(d, 0, NULL, g, 4, 1);
    grm__dist_stats lk, up, tot;
    grm__dist_counters(d, 0, GRM__DIST_LOOKUP, &lk, &tot);
    grm__dist_counters(d, 0, GRM__DIST_UPDATE, &up, NULL);

    /* by hand: unique ids of rank r are U_r = {10, 20, 30 + r}, features {0, 1, 2} */
    int64_t sent = 0, recv = 0, recv_from_other = 0, served[3] = { 0, 0, 0 };
    int64_t to_me[64];   /* distinct received ids */
    int64_t nd = 0;
    for (int32_t r = 0; r < R; r++) {
        const int64_t u[3] = { 10, 20, 30 + r };
        for (int k = 0; k < 3; k++) {
            const int32_t owner = (int32_t)(grm_mix64((uint64_t)u[k]) % (uint64_t)R);
            if (r == me && owner != me) sent++;
            if (owner != me) continue;
            recv++;
            served[k]++;
            if (r != me) recv_from_other++;
            int64_t j = 0;
            while (j < nd && to_me[j] != u[k]) j++;
            if (j == nd) to_me[nd++] = u[k];
        }
    }
    const int64_t others = R - 1;
    /* rows back: each other rank of the group gets its rows plus one status float */
    const int64_t row_bytes = 4 * (recv_from_other * D + others);
    const int ok_l = st == GRM_OK && lk.calls == 1 && lk.ids_raw == 4 && lk.ids_unique == 3 &&
                     lk.ids_sent == sent && lk.ids_recv == recv && lk.ids_store == nd &&
                     lk.id_bytes == 8 * others + 8 * sent + 4 * sent &&
                     lk.row_bytes == row_bytes && lk.rounds == 4 && lk.sync_ids == 0 &&
                     tot.calls == 1 && tot.row_bytes == row_bytes;
    if (!ok_l)
        tap_diag("lookup: raw %lld unique %lld sent %lld/%lld recv %lld/%lld store %lld/%lld "
                 "id_bytes %lld/%lld row_bytes %lld/%lld rounds %lld", (long long)lk.ids_raw,
                 (long long)lk.ids_unique, (long long)lk.ids_sent, (long long)sent,
                 (long long)lk.ids_recv, (long long)recv, (long long)lk.ids_store,
                 (long long)nd, (long long)lk.id_bytes,
                 (long long)(8 * others + 12 * sent), (long long)lk.row_bytes,
                 (long long)row_bytes, (long long)lk.rounds);
    tap_ok(ok_l, "counters of a small lookup (ids 10,10,20,30+r) match the hand count: "
           "%lld sent, %lld received, %lld after stage 2", (long long)sent, (long long)recv,
           (long long)nd);
    const int ok_u = up.calls == 1 && up.ids_raw == 4 && up.ids_unique == 3 &&
                     up.ids_sent == sent && up.ids_recv == recv && up.ids_store == nd &&
                     up.id_bytes == 0 && up.row_bytes == 4 * D * sent && up.rounds == 1;
    tap_ok(ok_u, "counters of the update reusing the lookup's routing: gradients only "
           "(%lld row bytes, 1 round, no id bytes)", (long long)up.row_bytes);
    int64_t sv[3] = { -1, -1, -1 };
    const grm_status sst = grm__dist_feature_served(d, 0, sv);
    tap_ok(sst == GRM_OK && sv[0] == served[0] &&
           sv[1] == served[1] && sv[2] == served[2],
           "ids served per feature (FusedRec deferred category info): %lld %lld %lld",
           (long long)sv[0], (long long)sv[1], (long long)sv[2]);
    grm__dist_stats all;
    tap_ok(grm__dist_counters(d, -1, GRM__DIST_LOOKUP, NULL, &all) == GRM_OK &&
           all.row_bytes == row_bytes && all.calls == 1,
           "counters over all tables sum the per-table totals");
    grm__dist_destroy(d);
    sops->destroy(store);
}

/* ---- errors ---- */

/* A communicator that fails its k-th alltoallv on every rank at once (so no rank waits). */
static int64_t fail_at, a2a_calls;

static grm_status failing_a2a(void *inst, void *recv, const int64_t *rc, const int64_t *rd,
                              const void *send, const int64_t *sc, const int64_t *sd,
                              int32_t dtype)
{
    if (++a2a_calls == fail_at)
        return harness_host()->errorf(GRM_EIO, "injected failure");
    return comm.ops->alltoallv(inst, recv, rc, rd, send, sc, sd, dtype);
}

static void test_errors(void)
{
    void *store = make_store();
    grm__dist *d = NULL;
    grm__dist_opts o = grm__dist_opts_default();
    int64_t ids[4] = { 1, 2, 3, 4 };
    float rows[4 * 8];

    o.group_size = R + 1;
    tap_ok(grm__dist_create(&comm, sops, store, NT, dims, &o, &d) == GRM_EINVAL && !d &&
           has("does not divide"), "group_size %d on %d ranks is refused on every rank",
           (int)(R + 1), (int)R);
    o.group_size = 0;
    const int32_t bad_dims[NT] = { 8, 0 };
    tap_ok(grm__dist_create(&comm, sops, store, NT, bad_dims, &o, &d) == GRM_EINVAL &&
           has("table 1: dim 0 must be >= 1"), "dim 0 is refused");
    if (R > 1) {
        const int32_t my_dims[NT] = { me == R - 1 ? 9 : 8, 3 };
        char want[128];
        snprintf(want, sizeof want, "rank %d has dim of table 0 = 9 but rank 0 has 8",
                 (int)(R - 1));
        tap_ok(grm__dist_create(&comm, sops, store, NT, my_dims, &o, &d) == GRM_EINVAL &&
               has(want), "a rank with a different dim makes every rank refuse: %s",
               harness_host()->last_error());
    } else {
        tap_skip("one rank", "dims differing across ranks are refused");
    }
    tap_ok(grm__dist_create(NULL, sops, store, NT, dims, &o, &d) == GRM_EINVAL &&
           has("communicator is NULL"), "a NULL communicator is refused");

    if (grm__dist_create(&comm, sops, store, NT, dims, &o, &d) != GRM_OK) {
        tap_ok(0, "create: %s", harness_host()->last_error());
        sops->destroy(store);
        return;
    }
    tap_ok(grm__dist_lookup(d, 5, ids, NULL, 4, 0, rows, 0) == GRM_EINVAL &&
           has("dist lookup: table 5 outside [0, 2)"), "a bad table index is refused");
    tap_ok(grm__dist_lookup(d, 0, ids, NULL, -1, 0, rows, 0) == GRM_EINVAL &&
           has("-1 ids"), "a negative n is refused");
    tap_ok(grm__dist_lookup(d, 0, ids, NULL, 4, 0, NULL, 0) == GRM_EINVAL &&
           has("ids or rows is NULL"), "NULL rows are refused");
    tap_ok(grm__dist_update(d, 1, NULL, rows, 4, 1) == GRM_EINVAL &&
           has("ids is NULL but the table's last lookup did not complete"),
           "update without ids before any lookup is refused");
    tap_ok(grm__dist_lookup(d, 0, ids, NULL, 4, 2, rows, 0) == GRM_EINVAL &&
           has("n_raw 2 < n 4"), "n_raw below n is refused");
    int64_t tot = 0;
    tap_ok(grm__dist_counters(d, 0, 7, NULL, NULL) == GRM_EINVAL && has("op 7") &&
           grm__dist_feature_served(d, 0, &tot) == GRM_EINVAL && has("nfeatures = 0"),
           "bad counter op and feature counters without nfeatures are refused");

    /* A store error on an owner: rank 0 asks for a reserved id; everyone fails. */
    const int64_t bad = INT64_MIN;
    const int32_t owner = grm__dist_owner(d, me, bad);
    const grm_status st = grm__dist_lookup(d, 0, &bad, NULL, me == 0 ? 1 : 0, 0, rows,
                                           GRM_EMB_INSERT);
    if (me == owner)
        tap_ok(st != GRM_OK && has("dist lookup: table 0: store lookup: ") &&
               has("reserved"), "the owner of a reserved id reports the store's error: %s",
               harness_host()->last_error());
    else
        tap_ok(st == GRM_EINTERNAL && has("store lookup failed on owner rank"),
               "a store failure on owner rank %d fails this rank's lookup too", (int)owner);
    tap_ok(grm__dist_lookup(d, 0, ids, NULL, 4, 0, rows, GRM_EMB_INSERT) == GRM_OK,
           "the next lookup works");
    grm__dist_destroy(d);

    /* Communicator failures: the 2nd alltoallv of a lookup is the id exchange. */
    grm_comm_ops fops = *comm.ops;
    fops.alltoallv = failing_a2a;
    const grm_comm_handle fcomm = { &fops, comm.inst };
    static const char *const names[NT] = { "items", "cats" };
    o.table_names = names;
    if (grm__dist_create(&fcomm, sops, store, NT, dims, &o, &d) != GRM_OK) {
        tap_ok(0, "create: %s", harness_host()->last_error());
        sops->destroy(store);
        return;
    }
    static const struct { int64_t at; int update; const char *want; } cases[] = {
        { 1, 0, "dist lookup: table 1 (\"cats\"): alltoallv of id counts: injected failure" },
        { 2, 0, "dist lookup: table 1 (\"cats\"): alltoallv of ids: injected failure" },
        { 3, 0, "dist lookup: table 1 (\"cats\"): alltoallv of rows: injected failure" },
        { 4, 1, "dist update: table 1 (\"cats\"): alltoallv of gradients: injected failure" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        a2a_calls = 0;
        fail_at = cases[k].at;
        grm_status s2 = grm__dist_lookup(d, 1, ids, NULL, 4, 0, rows, GRM_EMB_INSERT);
        if (cases[k].update) s2 = s2 ? s2 : grm__dist_update(d, 1, NULL, rows, 4, 1);
        tap_ok(s2 == GRM_EIO && has(cases[k].want), "a failing exchange names op and table: %s",
               harness_host()->last_error());
    }
    fail_at = 0;
    grm__dist_destroy(d);
    grm__dist_destroy(NULL);
    sops->destroy(store);
}

/* ---- bench mode (bench/bench_dist.sh): GRM_DIST_BENCH=FILE ----
 * FILE: one user per line, the user's item ids in time order. Each step rank r takes B users
 * (round-robin over ranks) and looks up the last L items of each (a training batch's item
 * lookups, duplicates included) in a D = 64 table, then updates them (ids NULL: the lookup's
 * routing). Rank 0 prints one line per dedup setting with per-step counters summed over
 * ranks and the slowest rank's time per step. */
static int64_t *bseq, *boff;
static int64_t bnusers;

static int bench_load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t cap = 1 << 20, n = 0, ucap = 1 << 16;
    bseq = malloc(cap * sizeof *bseq);
    boff = malloc(ucap * sizeof *boff);
    boff[0] = 0;
    char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        char *p = line, *e;
        for (;;) {
            const long long v = strtoll(p, &e, 10);
            if (e == p) break;
            if (n == cap) bseq = realloc(bseq, (cap *= 2) * sizeof *bseq);
            bseq[n++] = v;
            p = e;
        }
        if ((size_t)bnusers + 2 >= ucap) boff = realloc(boff, (ucap *= 2) * sizeof *boff);
        boff[++bnusers] = (int64_t)n;
    }
    fclose(f);
    return bnusers > 0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int bench_main(const char *path, const char *label)
{
    if (!bench_load(path)) {
        fprintf(stderr, "bench: cannot read %s\n", path);
        return 1;
    }
    enum { B = 64, L = 50, D = 64, S = 20 };
    static const struct { int d1, d2, group; const char *name; } cfg[] = {
        { 0, 0, 0, "none" }, { 1, 0, 0, "stage1" }, { 0, 1, 0, "stage2" },
        { 1, 1, 0, "two-stage" }, { 1, 1, 2, "two-stage-hsp2" },
    };
    static const int32_t bdims[1] = { D };
    static const grm_emb_table_spec bspec[1] = {
        { "items", 1 << 16, D, GRM_EMB_INIT_NORMAL, 0.01, 1 } };
    int64_t *ids = malloc(sizeof(int64_t) * B * L);
    float *rows = malloc(sizeof(float) * B * L * D), *g = malloc(sizeof(float) * B * L * D);
    for (int64_t i = 0; i < (int64_t)B * L * D; i++) g[i] = 1.0f / 1024;
    double none_ms = 0;
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        if (cfg[k].group && (R % cfg[k].group != 0 || R == cfg[k].group)) continue;
        void *store = NULL;
        if (sops->create(harness_config(sinfo, (const char *)NULL), bspec, 1, &opt, &store)
            != GRM_OK)
            return 1;
        grm__dist_opts o = grm__dist_opts_default();
        o.dedup1 = cfg[k].d1;
        o.dedup2 = cfg[k].d2;
        o.group_size = cfg[k].group;
        grm__dist *d = NULL;
        if (grm__dist_create(&comm, sops, store, 1, bdims, &o, &d) != GRM_OK) return 1;
        double t_lookup = 0, t_update = 0;
        for (int s = -2; s < S; s++) {   /* 2 warm-up steps */
            int64_t n = 0;
            for (int b = 0; b < B; b++) {
                const int64_t u = (((int64_t)(s + 2) * R + me) * B + b) % bnusers;
                int64_t lo = boff[u], hi = boff[u + 1];
                if (hi - lo > L) lo = hi - L;
                for (int64_t j = lo; j < hi; j++) ids[n++] = bseq[j];
            }
            comm.ops->barrier(comm.inst);
            const double t0 = now_ms();
            if (grm__dist_lookup(d, 0, ids, NULL, n, 0, rows, GRM_EMB_INSERT) != GRM_OK) {
                fprintf(stderr, "bench: %s\n", harness_host()->last_error());
                return 1;
            }
            const double t1 = now_ms();
            if (grm__dist_update(d, 0, NULL, g, n, s + 3) != GRM_OK) {
                fprintf(stderr, "bench: %s\n", harness_host()->last_error());
                return 1;
            }
            const double t2 = now_ms();
            if (s == -1) {   /* reset: count only the timed steps */
                grm__dist_destroy(d);
                d = NULL;
                if (grm__dist_create(&comm, sops, store, 1, bdims, &o, &d) != GRM_OK) return 1;
            }
            if (s >= 0) t_lookup += t1 - t0, t_update += t2 - t1;
        }
        grm__dist_stats lk, up;
        grm__dist_counters(d, 0, GRM__DIST_LOOKUP, NULL, &lk);
        grm__dist_counters(d, 0, GRM__DIST_UPDATE, NULL, &up);
        int64_t v[12] = { lk.ids_raw, lk.ids_unique, lk.ids_sent, lk.ids_recv, lk.ids_store,
                          lk.id_bytes, lk.row_bytes, up.row_bytes, up.sync_bytes, up.ids_store,
                          lk.rounds + up.rounds, 0 };
        float tm[2] = { (float)t_lookup, (float)t_update };
        comm.ops->allreduce(comm.inst, v, 12, GRM_DTYPE_I64, GRM_REDUCE_SUM);
        comm.ops->allreduce(comm.inst, tm, 2, GRM_DTYPE_F32, GRM_REDUCE_MAX);
        const double ms = (tm[0] + tm[1]) / S;
        if (k == 0) none_ms = ms;
        if (me == 0)
            printf("bench=dist case=%s ranks=%d dedup=%s group=%d dim=%d ids_raw=%.0f "
                   "ids_stage1=%.0f ids_sent=%.0f ids_recv=%.0f ids_stage2=%.0f id_bytes=%.0f "
                   "row_bytes=%.0f grad_bytes=%.0f sync_bytes=%.0f store_updates=%.0f "
                   "rounds=%.0f lookup_ms=%.3f update_ms=%.3f step_ms=%.3f peer=none "
                   "ratio=%.2f\n", label, (int)R, cfg[k].name, cfg[k].group ? cfg[k].group : R,
                   D, (double)v[0] / S, (double)v[1] / S, (double)v[2] / S, (double)v[3] / S,
                   (double)v[4] / S, (double)v[5] / S, (double)v[6] / S, (double)v[7] / S,
                   (double)v[8] / S, (double)v[9] / S, (double)v[10] / S / R, tm[0] / S,
                   tm[1] / S, ms, none_ms / ms);
        grm__dist_destroy(d);
        sops->destroy(store);
    }
    free(ids), free(rows), free(g);
    return 0;
}

/* opts.ahead (grm__dist_lookup_ahead): each rank sends gen_ids of its step s + 1 along with
 * the lookup of step s; every rank gets exactly the keys it owns that the other ranks of its
 * group sent, in requester order and each requester's order (computed here from every
 * rank's ids), the rows of the lookup are those without ahead (bitwise), the counters count
 * both sides, and a plain lookup on the same distribution gets nothing. Both flat and, at an
 * even world, in groups of R / 2. */
static void test_ahead(int32_t group)
{
    void *store = make_store(), *store0 = make_store();
    grm__dist *d = NULL, *d0 = NULL;
    grm__dist_opts o = grm__dist_opts_default();
    o.group_size = group;
    grm__dist_opts o0 = o;
    o.ahead = 1;
    const char *what = group ? "in groups" : "flat";
    if (grm__dist_create(&comm, sops, store, NT, dims, &o, &d) != GRM_OK ||
        grm__dist_create(&comm, sops, store0, NT, dims, &o0, &d0) != GRM_OK) {
        tap_ok(0, "ahead, %s: create: %s", what, harness_host()->last_error());
        grm__dist_destroy(d);
        sops->destroy(store);
        sops->destroy(store0);
        return;
    }
    const int32_t I = group ? group : R, base = me / I * I;
    static int64_t ids[MAXID], next[MAXID], want[64 * MAXID];
    static float rows[MAXID * 8], rows0[MAXID * 8];
    int keys_ok = 1, rows_ok = 1, plain_ok = 1, st_ok = 1;
    int64_t sent = 0, recvd = 0;
    for (int s = 0; s < STEPS; s++) {
        for (int t = 0; t < NT; t++) {
            const int64_t n = gen_ids(ids, me, s, t), nn = gen_ids(next, me, s + 1, t);
            int64_t nw = 0;
            for (int32_t r = base; r < base + I; r++) {
                if (r == me) continue;
                int64_t tmp[MAXID];
                const int64_t m = gen_ids(tmp, r, s + 1, t);
                for (int64_t i = 0; i < m; i++)
                    if (grm__dist_owner(d, r, tmp[i]) == me) want[nw++] = tmp[i];
            }
            for (int64_t i = 0; i < nn; i++) sent += grm__dist_owner(d, me, next[i]) != me;
            recvd += nw;
            const int64_t *got = NULL;
            int64_t ng = -1;
            grm_status st = grm__dist_lookup_ahead(d, t, ids, NULL, n, 0, rows, GRM_EMB_INSERT,
                                                   next, nn, &got, &ng);
            grm_status st0 = grm__dist_lookup(d0, t, ids, NULL, n, 0, rows0, GRM_EMB_INSERT);
            st_ok &= st == GRM_OK && st0 == GRM_OK;
            keys_ok &= ng == nw && (nw == 0 || (got && !memcmp(got, want, (size_t)nw * 8)));
            rows_ok &= !memcmp(rows, rows0, (size_t)(n * dims[t]) * sizeof(float));
            st = grm__dist_lookup_ahead(d, t, ids, NULL, n, 0, rows, 0, NULL, 0, &got, &ng);
            plain_ok &= st == GRM_OK && ng == 0 && got == NULL;
        }
    }
    grm__dist_stats tot;
    grm__dist_counters(d, -1, GRM__DIST_LOOKUP, NULL, &tot);
    tap_ok(st_ok && keys_ok, "ahead, %s: every rank gets exactly the next-batch keys it owns "
           "that the others sent, in their order", what);
    tap_ok(st_ok && rows_ok, "ahead, %s: the lookups' rows are those of a distribution "
           "without ahead, bitwise", what);
    tap_ok(plain_ok, "ahead, %s: a lookup that sends no keys ahead gets none", what);
    tap_ok(tot.ids_ahead == sent && tot.ids_ahead_recv == recvd, "ahead, %s: counters: %lld "
           "keys sent ahead (want %lld), %lld received (want %lld)", what,
           (long long)tot.ids_ahead, (long long)sent, (long long)tot.ids_ahead_recv,
           (long long)recvd);
    grm__dist_destroy(d);
    grm__dist_destroy(d0);
    sops->destroy(store);
    sops->destroy(store0);
}

int main(void)
{
    const char *cname = getenv("GRM_TEST_COMM") ? getenv("GRM_TEST_COMM") : "comm-mpi";
    const grm_plugin_info *cinfo = harness_plugin(cname);
    comm.ops = cinfo->ops;
    if (comm.ops->create(NULL, &comm.inst) != GRM_OK) {
        printf("1..1\nnot ok 1 - %s create: %s\n", cname, harness_host()->last_error());
        return 1;
    }
    me = comm.ops->rank(comm.inst);
    R = comm.ops->size(comm.inst);
    const char *dir = getenv("GRM_TAP_DIR");
    if (dir != NULL && getenv("GRM_DIST_BENCH") == NULL) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank-%d.tap", dir, (int)me);
        if (freopen(path, "w", stdout) == NULL) return 1;
    }
    if (R > 64) tap_skip_all("more than 64 ranks");

    const grm_plugin_info *oinfo = harness_plugin("opt-sgd");
    const grm_opt_ops *oops = oinfo->ops;
    opt.ops = oops;
    if (oops->create(harness_config(oinfo, "lr=0.5", NULL), &opt.inst) != GRM_OK) {
        printf("Bail out! opt-sgd: %s\n", harness_host()->last_error());
        return 1;
    }
    sinfo = harness_plugin("emb-dynamic");
    sops = sinfo->ops;
    make_pool();
    if (getenv("GRM_DIST_BENCH") != NULL) {
        const char *lb = getenv("GRM_DIST_BENCH_CASE");
        const int rc = bench_main(getenv("GRM_DIST_BENCH"), lb ? lb : "data");
        oops->destroy(opt.inst);
        comm.ops->destroy(comm.inst);
        return rc;
    }

    tap_diag("rank %d of %d through %s", (int)me, (int)R, cname);
    static const struct { int d1, d2, nf, explicit_ids; const char *what; } cfgs[] = {
        { 1, 1, 3, 0, "both dedup stages, feature indices" },
        { 0, 1, 0, 0, "stage 1 off (duplicates sent)" },
        { 1, 0, 0, 0, "stage 2 off (owner looks up repeats)" },
        { 0, 0, 0, 0, "no dedup" },
        { 1, 1, 0, 1, "update with explicit ids (own id exchange)" },
    };
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        grm__dist_opts o = grm__dist_opts_default();
        o.dedup1 = cfgs[k].d1;
        o.dedup2 = cfgs[k].d2;
        o.nfeatures = cfgs[k].nf;
        int rep = 0;
        tap_ok(run_config(o, cfgs[k].explicit_ids, cfgs[k].what, &rep),
               "flat, %s: %d steps of lookups equal one full store; owned rows equal the full "
               "store after the summed updates; no foreign rows", cfgs[k].what, STEPS);
    }
    /* hierarchical: groups of 2 at 4 ranks, of 1 at 2 ranks (every rank a full replica) */
    if (R >= 2 && R % 2 == 0) {
        grm__dist_opts o = grm__dist_opts_default();
        o.group_size = R / 2;
        int rep = 0;
        tap_ok(run_config(o, 0, "hierarchical", &rep), "hierarchical, %d groups of %d: lookups "
               "and owned rows equal the flat result (the full store)", 2, (int)(R / 2));
        tap_ok(rep, "hierarchical: the 2 replicas of this shard hold identical rows");
        o.dedup1 = 0;
        tap_ok(run_config(o, 1, "hierarchical, stage 1 off, explicit ids", &rep) && rep,
               "hierarchical, stage 1 off, explicit update ids: equal and identical replicas");
    } else {
        for (int i = 0; i < 3; i++) tap_skip("needs an even number of ranks", "hierarchical");
    }
    test_counters();
    test_ahead(0);
    if (R >= 2 && R % 2 == 0) test_ahead(R / 2);
    else
        for (int i = 0; i < 4; i++) tap_skip("needs an even number of ranks", "ahead in groups");
    test_errors();
    oops->destroy(opt.inst);
    comm.ops->destroy(comm.inst);
    tap_plan(tap_n_);   /* plan last: a rank that dies early shows no plan */
    return tap_failed_ ? 1 : 0;
}

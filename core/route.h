/* core/route.h - rows routed by key between ranks, before the transforms: `[train] input =
 * sharded`. Every rank reads its own share of the input (reader shard r of n); each chunk's
 * rows go to rank hash(key) % n, so every row of one user ends on one rank and the
 * transforms that group by user (sequence_by, history_by) see all of that user's events.
 * MTGRBoost §3 (each rank reads its shard of the columnar input), RecIS §2.2.1 (the feature
 * engine runs where the sample is trained). Rows travel as one-row-group grmcol buffers
 * (share/doc/grmcol.md), so the format's checksums guard the exchange as they guard files.
 *
 * The exchange is in rounds: in each, every rank hands in the next chunk its reader gave
 * (or none, at its end) and gets back, in sender-rank order, the rows the ranks routed to
 * it. A reader that shards by strided blocks (reader-grmcol: row group k to shard k % n;
 * reader-text: block k of chunk_rows lines to shard k % n) and hands one block per chunk
 * makes the received rows arrive in the input's own order, so ties in a sort by time break
 * as they do when one rank reads everything. */
#ifndef GRM_ROUTE_H
#define GRM_ROUTE_H

#include <grm/comm.h>
#include <grm/status.h>
#include <grm/tensor.h>

typedef struct grm__router grm__router;

/* Called for each chunk of rows routed to this rank, in sender-rank order; the chunk is
 * borrowed for the call. A failure is remembered and reported to the other ranks in the
 * next round. */
typedef grm_status (*grm__route_fn)(void *ctx, const grm_chunk *c);

/* A router for chunks of `schema` (borrowed; it must outlive the router), keyed by column
 * `key` of it (I64: fmix64 of the value; STR: XXH64 of the bytes). GRM_EINVAL for another
 * key type, GRM_ENOMEM. */
grm_status grm__router_create(const grm_comm_handle *comm, const grm_schema *schema,
                              int32_t key, grm__router **out);
void grm__router_destroy(grm__router *r);

/* One round (collective: every rank calls it the same number of times). `c`: this rank's
 * next chunk, or NULL when its reader is done. `failed`: this rank hit an error before
 * the round (its reader, or fn in an earlier round); it sends nothing and the round tells
 * the others. Calls fn for the rows routed here. *done = 1 when every rank is done, or a
 * failure is known to every rank, or the exchange itself failed; when fn fails, *done is
 * 0 and the caller runs one more round with failed = 1, so the others stop with it.
 * Returns this rank's first failure of the round (fn's, or the exchange's), or GRM_EIO
 * naming another rank that failed. */
grm_status grm__route_round(grm__router *r, const grm_chunk *c, int failed, grm__route_fn fn,
                            void *ctx, int *done);

/* ---- gathering every rank's bytes (collective) ---- */

/* all [size * bytes] = every rank's `bytes` bytes at mine, in rank order. */
/* v [n] summed over the ranks, in rank order, so every rank gets the same bits (no
 * float allreduce: its order is the library's). */
grm_status grm__sum_ranks(const grm_comm_handle *comm, double *v, int32_t n);

grm_status grm__gather_bytes(const grm_comm_handle *comm, void *all, const void *mine,
                             size_t bytes);

/* Every rank's n_mine items of `item` bytes at mine, concatenated in rank order into *all
 * (malloc'ed, never NULL on success; free it); *n_all: the items in all. An allgather of
 * the counts, then one alltoallv that sends mine whole to every rank: no padding. */
grm_status grm__gatherv(const grm_comm_handle *comm, const void *mine, int64_t n_mine,
                        size_t item, void **all, int64_t *n_all);

/* The rank a key value of row `row` of column `col` belongs to among `nranks`. */
int32_t grm__route_owner(const grm_column *col, int64_t row, int32_t nranks);

#endif /* GRM_ROUTE_H */

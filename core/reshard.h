/* core/reshard.h - `grmhost reshard`: rewrite a training checkpoint written by N ranks for M
 * ranks (issue 5).
 *
 * grmhost train on N ranks writes [checkpoint] dir/rank-R-of-N/step-S.<ext> (one rank: dir/
 * step-S.<ext>). Each file holds the rows of every physical table that rank R owns under
 * core/dist.h's sharding, owner(id) = base(r) + fmix64(id) % I (MTGRBoost §3; TurboGR §4.2.1
 * with I = [train] sparse_group), and a copy of the replicated state: dense parameters, their
 * optimizer state and trainer.* tensors. Resharding reads the N files of one step with the
 * pipeline's checkpoint plugin, checks the replicated state is bitwise equal on every rank,
 * and writes M files of the same step in which every row sits with its owner among M ranks.
 *
 * Rows of a table "emb.X.*" come in one of two layouts, told apart by the tensors alone:
 *   keyed    (a hash store such as emb-dynamic): emb.X.ids i64 [n] names the rows; the 2-d
 *            tensors of the table with n rows are per-row (weight, optimizer state, meta) and
 *            follow their id; other tensors of the table are table state (counters), copied
 *            when the ranks agree, else (i64 only) their element-wise maximum. With
 *            sparse_group (replica groups) a key sits on several ranks: its float rows must
 *            be equal, its i64 per-row counters (access counts) become their maximum.
 *   indexed  (emb-static): no .ids; every tensor of the table has the table's rows as its
 *            first dim and row i is id i. Each target file gets the whole table assembled
 *            from the source owners of the rows (rows a rank does not own are never read).
 *
 * Writes are staged: every target file is first saved (by the checkpoint plugin, which itself
 * writes a temporary file, fsyncs and renames) under a name resume ignores, then renamed into
 * place; only then are the source checkpoints moved, never deleted, into dir/resharded-from-N
 * (grmhost train resumes from the newest step in dir, and refuses one written by a world size
 * it cannot read directly). */
#ifndef GRM_RESHARD_H
#define GRM_RESHARD_H

#include <stdint.h>
#include <stdio.h>

#include <grm/grm.h>

#include "pipeline.h"

typedef struct grm__reshard_opts {
    int32_t to;        /* M: ranks of the new checkpoint, >= 1 */
    int32_t from;      /* N: ranks that wrote the source; 0: the only world size dir holds */
    int64_t step;      /* the step to reshard; -1: the newest step every source rank has */
    int force;         /* write even when the target already holds checkpoints */
    int quiet;         /* log warnings only */
    int in_memory;     /* hold every row in memory even when the format reads and writes by
                        * rows (the default then streams keyed tables' rows through spill
                        * files) */
} grm__reshard_opts;

/* Reshard the checkpoints of the pipeline `ini` ([checkpoint] dir, its checkpoint plugin,
 * its tables and [train] sparse_group) as `o` says; the summary (rows per table, how many
 * changed rank) goes to `out`. Returns GRM_EINVAL (bad options, no [checkpoint] dir, several
 * world sizes without o->from, a target that exists without o->force, sparse_group not
 * dividing M), GRM_ENOTFOUND (no checkpoint, a missing rank file), GRM_EFORMAT (ranks that
 * disagree on the step or the replicated state, a tensor of no table), GRM_EIO, GRM_ENOMEM,
 * or the checkpoint plugin's error; the message names the file, what and the fix. On failure
 * nothing visible to a resume has changed. */
grm_status grm__reshard(const char *ini, const grm__reshard_opts *o, FILE *out);

/* MTGRBoost §5.2's modulo scheme, for `grmhost train` on M ranks over the checkpoints of N
 * ranks. With group sizes IN and IM (sparse_group, or the world) and IM a multiple of IN
 * (M = kN without replica groups), fmix64(id) % IM == r % IM implies fmix64(id) % IN ==
 * r % IN: every row rank r owns among M sat on source rank r mod N. Rank r then reads that one
 * file and keeps its own rows; no other shard is read, and no `grmhost reshard` is needed. */

/* Whether the scheme applies from N to M ranks under `sparse_group` (0: none). */
int grm__reshard_nests(int64_t sparse_group, int32_t N, int32_t M);

/* The directory of source rank (rank mod N) in dir into buf [cap] (dir itself for N = 1). */
void grm__reshard_source_dir(char *buf, size_t cap, const char *dir, int32_t rank, int32_t N);

/* The checkpoints of source rank (rank mod N) in dir: *newest step (-1: none) and, when it
 * exists, the file of step `want` into path [cap] ("" otherwise). */
grm_status grm__reshard_source(const char *dir, const char *ext, int32_t rank, int32_t N,
                               int64_t want, int64_t *newest, char *path, size_t cap);

/* Load checkpoint `path` (written by rank `rank` mod N) into `visit` as rank `rank` of M:
 * the per-row tensors of keyed tables (those with emb.X.ids) keep only the rows this rank owns
 * among M, in file order; every other tensor passes unchanged. *kept and *dropped count the
 * keyed rows. Errors: the checkpoint plugin's, `visit`'s, GRM_ENOMEM. */
grm_status grm__reshard_load_owned(const grm__pipeline *p, const grm_ckpt_ops *kops,
                                   void *kinst, const char *path, int32_t rank, int32_t M,
                                   grm_ckpt_visit_fn visit, void *user, int64_t *kept,
                                   int64_t *dropped);
/* The same a piece at a time, so a table larger than memory is never held whole. A keyed
 * table's ids must come before its other row tensors in the format's load_rows, as every
 * store writes them. interleaved 0: through load_rows, the ids filtered into one piece (8
 * bytes a kept row), the other row tensors' pieces filtered as they come. interleaved 1
 * (the format has load_rows_interleaved and visit takes pieces so): the ids read first
 * through load_rows, up to the last keyed table's, for a mask of the kept rows (a byte a row
 * of the file), then every row tensor filtered as load_rows_interleaved hands it over, a
 * range of each in turn, the ids too. */
grm_status grm__reshard_load_owned_rows(const grm__pipeline *p, const grm_ckpt_ops *kops,
                                        void *kinst, const char *path, int32_t rank,
                                        int32_t M, int interleaved, grm_ckpt_piece_fn visit,
                                        void *user, int64_t *kept, int64_t *dropped);

#endif /* GRM_RESHARD_H */

/* core/checkpoint.h - the names of checkpoint files and directories, defined once in
 * core/checkpoint.c for the trainer and core/reshard.c: step-S.ext (S written as %010lld
 * so names sort by step), best.ext, and rank-R-of-N directories of an N-rank job. */
#ifndef GRM_CHECKPOINT_H
#define GRM_CHECKPOINT_H

#include "grm_core.h"

/* 1 and *step when `name` is step-S.<ext> with S >= 0, else 0. */
int grm__ckpt_is_step_name(const char *name, const char *ext, int64_t *step);
/* "step-S" (no extension) into buf [cap]. */
void grm__ckpt_step_stem(char *buf, size_t cap, int64_t step);
/* 1 and *r, *n when `name` is rank-R-of-N with 0 <= R < N, else 0. */
int grm__ckpt_is_rank_dir(const char *name, int *r, int *n);
/* Rank r's directory of an n-rank job under dir: dir itself when n is 1. */
void grm__ckpt_rank_dir(char *buf, size_t cap, const char *dir, int32_t r, int32_t n);
/* mkdir -p dir; GRM_EIO naming the directory that could not be made. */
grm_status grm__ckpt_make_dirs(const char *dir);

#endif /* GRM_CHECKPOINT_H */

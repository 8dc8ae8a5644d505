/* core/cli.h - what grmhost's command files (main.c, convert.c, launch.c) share: the one
 * place a status becomes an exit code (0 ok, 1 failure, 2 usage or configuration error,
 * STYLE.md §6), the usage-error message, count parsing, and the entry points of the
 * commands that live outside main.c. grmhost's own; not part of libgrmcore. */
#ifndef GRM_CLI_H
#define GRM_CLI_H

#include <stdint.h>

#include <grm/status.h>

/* Print "grmhost: <grm_last_error()>" to stderr and return the exit code of st: 2 for a
 * usage or configuration error (GRM_EINVAL, GRM_EABI, GRM_ENOTFOUND), else 1. */
int grm__cli_fail(grm_status st);

/* The end of a command that loaded pipeline p (NULL: none): the failure, if st is one, is
 * printed first (grm__cli_fail), then p is destroyed (closing its communicator: under
 * mpirun, a rank exiting non-zero after MPI_Finalize gets the other ranks killed, so each
 * must have said why before) and the host's pool stopped. Returns the exit code of st. */
struct grm__pipeline;
int grm__cli_end(struct grm__pipeline *p, grm_status st);

/* Print "grmhost: <fmt ...>", a blank line and `usage` to stderr; return 2. */
int grm__cli_usage_error(const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* After getopt_long has printed what was wrong with an option: a blank line and `usage`
 * to stderr; return 2. */
int grm__cli_bad_option(const char *usage);

/* *out = the decimal integer s when it is all digits (an optional sign) and in [lo, hi];
 * returns 1, or 0 (and leaves *out alone) otherwise. */
int grm__cli_parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* `grmhost convert ...`, `grmhost inspect ...` (core/convert.c) and `grmhost launch ...`
 * (core/launch.c): argv[0] is the command name; each returns its exit code. */
int grm__convert_main(int argc, char **argv);
int grm__inspect_main(int argc, char **argv);
int grm__launch_main(int argc, char **argv);
/* `grmhost plot ...` (core/plot.c). */
int grm__plot_main(int argc, char **argv);

/* `grmhost inspect CHECKPOINT` (core/export.c): verify and list a checkpoint of any ckpt-*
 * format; returns the exit code. */
int grm__inspect_ckpt(const char *path);
/* `grmhost recommend ...` and `grmhost export ...` (core/export.c, the work in
 * core/recommend.c): argv[0] is the command name; each returns its exit code. */
int grm__recommend_main(int argc, char **argv);
int grm__export_main(int argc, char **argv);

#endif /* GRM_CLI_H */

/* tests/tap.h - a tiny TAP producer for grm's C tests (STYLE.md §11). Header-only.
 *
 * What a result means, the same here and in tests/tap.sh (the shell helper):
 *   - one line per check, numbered 1, 2, ... by the helper (tap_n_ here), in the form
 *     "ok N - DESCRIPTION" or "not ok N - DESCRIPTION"; DESCRIPTION is one line and carries
 *     no '#' of its own (the driver reads "# ..." as a directive);
 *   - "ok" means the check ran and held: tap_ok's condition is non-zero (C's truth); in
 *     the shell, ok's exit status is 0 (the shell's truth, and a non-number is not ok).
 *     Every tap_ok condition must be able to be false: no tap_ok(1, ...) as a filler;
 *   - a value the check needs but cannot find (a missing file, fixture or record) counts
 *     as not ok (tap_ok(0, ...) for each check that cannot run), never as ok or skipped;
 *   - a check that cannot run because an optional dependency is absent (GPU, MPI, torch, a
 *     data set, a tool) is "ok N - DESCRIPTION # SKIP REASON" (tap_skip here, skip in the
 *     shell), and a program with nothing to run prints "1..0 # SKIP REASON" and exits 0
 *     (tap_skip_all here, skip_all in the shell); a skip never stands in for a failure;
 *   - the plan "1..N" counts every line, skipped ones included. */
#ifndef GRM_TAP_H
#define GRM_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n_;
static int tap_failed_;

/* Declare the number of tests. */
static inline void tap_plan(int n)
{
    printf("1..%d\n", n);
    fflush(stdout);
}

/* Skip the whole test program with a reason; exits 0. */
static inline void tap_skip_all(const char *reason)
{
    printf("1..0 # SKIP %s\n", reason);
    exit(0);
}

/* One test point. Returns cond. */
static inline int tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    printf("%sok %d - ", cond ? "" : "not ", ++tap_n_);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!cond) tap_failed_++;
    return cond;
}

/* A skipped test point. */
static inline void tap_skip(const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void tap_skip(const char *reason, const char *fmt, ...)
{
    va_list ap;
    printf("ok %d - ", ++tap_n_);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf(" # SKIP %s\n", reason);
    fflush(stdout);
}

/* A diagnostic line. */
static inline void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* Compare got [n] with want [n]: |got - want| <= atol + rtol * |want|. Prints the first
 * mismatches and always the max abs/rel error. */
static inline int tap_close_f32(const float *got, const float *want, int64_t n, double rtol,
                                double atol, const char *what)
{
    double max_abs = 0, max_rel = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double r = d / (fabs((double)want[i]) + 1e-30);
        if (d > max_abs) max_abs = d;
        if (r > max_rel && fabs((double)want[i]) > atol) max_rel = r;
        if (!(d <= atol + rtol * fabs((double)want[i]))) {
            if (bad < 5)
                tap_diag("%s: index %lld: expected %.9g, got %.9g", what, (long long)i,
                         (double)want[i], (double)got[i]);
            bad++;
        }
    }
    tap_diag("%s: max abs err %.3g, max rel err %.3g over %lld values", what, max_abs, max_rel,
             (long long)n);
    return tap_ok(bad == 0, "%s matches (rtol %g, atol %g)", what, rtol, atol);
}

/* Exit status for the end of main. */
static inline int tap_done(void)
{
    return tap_failed_ ? 1 : 0;
}

#endif /* GRM_TAP_H */

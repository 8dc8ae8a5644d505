/* core/cli.c - the helpers grmhost's command files share (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "grm_core.h"
#include "pipeline.h"

int grm__cli_fail(grm_status st)
{
    fprintf(stderr, "grmhost: %s\n", grm_last_error());
    return st == GRM_EINVAL || st == GRM_EABI || st == GRM_ENOTFOUND ? 2 : 1;
}

int grm__cli_end(grm__pipeline *p, grm_status st)
{
    const int rc = st == GRM_OK ? 0 : grm__cli_fail(st);
    grm__pipeline_destroy(p);
    grm__pool_fini();
    return rc;
}

int grm__cli_usage_error(const char *usage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("grmhost: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n%s", usage);
    return 2;
}

int grm__cli_bad_option(const char *usage)
{
    fprintf(stderr, "\n%s", usage);
    return 2;
}

int grm__cli_parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

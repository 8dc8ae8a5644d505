/* core/error.c - statuses and the per-thread last-error buffer (STYLE.md §6). */
#include "grm_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRBUF_SIZE 2048

static _Thread_local char errbuf[ERRBUF_SIZE];

grm_status grm_verrorf(grm_status status, const char *fmt, va_list ap)
{
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    return status;
}

grm_status grm_errorf(grm_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    grm_verrorf(status, fmt, ap);
    va_end(ap);
    return status;
}

void grm_error_prefix(const char *fmt, ...)
{
    char prefix[512], old[ERRBUF_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errbuf, sizeof old);
    size_t lp = strlen(prefix), lo = strnlen(old, sizeof old - 1), skip = 0;
    /* "[embedding] emb-dynamic: " before "emb-dynamic: ...": the name once */
    int joined = 0;
    for (size_t k = 1; k < lp; k++)
        if (prefix[k - 1] == ' ' && strncmp(old, prefix + k, lp - k) == 0) {
            lp = k;
            joined = 1;
            break;
        }
    /* "[embedding] emb-dynamic: trim: " before "emb-dynamic: ...": the message's own
     * first word ("name: ", no space in it) goes when the prefix names it already */
    const char *colon = joined ? NULL : strstr(old, ": ");
    if (colon != NULL && colon > old && memchr(old, ' ', (size_t)(colon - old)) == NULL) {
        const size_t lw = (size_t)(colon - old) + 2;
        for (size_t k = 0; k + lw <= lp && !skip; k++)
            if ((k == 0 || prefix[k - 1] == ' ') && strncmp(prefix + k, old, lw) == 0)
                skip = lw;
    }
    lo -= skip;
    if (lp > sizeof errbuf - 1) lp = sizeof errbuf - 1;
    if (lo > sizeof errbuf - 1 - lp) lo = sizeof errbuf - 1 - lp;
    memcpy(errbuf, prefix, lp);
    memcpy(errbuf + lp, old + skip, lo);
    errbuf[lp + lo] = '\0';
}

void grm_error_suffix(const char *fmt, ...)
{
    char suffix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(suffix, sizeof suffix, fmt, ap);
    va_end(ap);
    size_t lo = strnlen(errbuf, sizeof errbuf - 1), ls = strlen(suffix);
    if (ls > sizeof errbuf - 1 - lo) ls = sizeof errbuf - 1 - lo;
    memcpy(errbuf + lo, suffix, ls);
    errbuf[lo + ls] = '\0';
}

const char *grm_last_error(void)
{
    return errbuf;
}

const char *grm_status_str(grm_status status)
{
    switch (status) {
    case GRM_OK: return "GRM_OK";
    case GRM_EINVAL: return "GRM_EINVAL";
    case GRM_ENOMEM: return "GRM_ENOMEM";
    case GRM_EIO: return "GRM_EIO";
    case GRM_EFORMAT: return "GRM_EFORMAT";
    case GRM_EABI: return "GRM_EABI";
    case GRM_ENOTSUP: return "GRM_ENOTSUP";
    case GRM_ENOTFOUND: return "GRM_ENOTFOUND";
    case GRM_EDEVICE: return "GRM_EDEVICE";
    case GRM_ECANCELED: return "GRM_ECANCELED";
    case GRM_EINTERNAL: return "GRM_EINTERNAL";
    }
    return "GRM_E?";
}

void grm__assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "grm: internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
    abort();
}

/* core/log.c - one-line log records to stderr; stdout belongs to grmhost's interface. */
#include "grm_core.h"

#include <pthread.h>
#include <stdio.h>

static int32_t log_level = GRM_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void grm__log_set_level(int32_t level)
{
    log_level = level;
}

int32_t grm__log_level(void)
{
    return log_level;
}

void grm__log(int32_t level, const char *who, const char *fmt, ...)
{
    static const char *const names[] = { "error", "warning", "info", "debug" };
    va_list ap;
    if (level > log_level) return;
    if (level < GRM_LOG_ERROR || level > GRM_LOG_DEBUG) level = GRM_LOG_DEBUG;
    pthread_mutex_lock(&log_lock);
    if (level == GRM_LOG_INFO)
        fprintf(stderr, "%s: ", who ? who : "grm");
    else
        fprintf(stderr, "%s: %s: ", who ? who : "grm", names[level]);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&log_lock);
}

const char *grm__printable(char *buf, size_t cap, const char *s)
{
    size_t w = 0;
    if (cap == 0) return buf;
    for (const unsigned char *c = (const unsigned char *)s; *c && w + 1 < cap; c++) {
        if (*c >= 0x20 && *c != 0x7f && *c != '\\') {
            buf[w++] = (char)*c;
        } else {
            if (w + 5 > cap) break;
            w += (size_t)snprintf(buf + w, cap - w, "\\x%02x", *c);
        }
    }
    buf[w] = '\0';
    return buf;
}

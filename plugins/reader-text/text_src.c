/* plugins/reader-text/text_src.c - bytes from a plain file or a zstd stream
 * (ZSTD_decompressStream), cut into lines of any length. Lines end in "\n" or "\r\n";
 * the last one may lack its newline. */
#include <errno.h>
#include <string.h>

#include <zstd.h>

#include "text.h"

static const grm_device text_cpu = { GRM_DEVICE_CPU, 0 };

/* First size of the line buffer; it doubles whenever a line does not fit. */
#define TEXT_BUF_INIT ((size_t)1 << 16)
/* The longest line read: far beyond any real row (a history of a million ids is 8 MB),
 * and short of what one decompressed line of a hostile .zst file takes (issue 25 item 12). */
#define TEXT_LINE_MAX ((size_t)64 << 20)

static int text_ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

grm_status text_src_open(text_src *src, const grm_host_api *host, const char *path)
{
    memset(src, 0, sizeof(*src));
    src->host = host;
    src->path = path;
    src->file = fopen(path, "rb");
    if (src->file == NULL) {
        return host->errorf(GRM_EIO, "reader-text: cannot open %s: %s; check the path "
                            "parameter", path, strerror(errno));
    }
    src->cap = TEXT_BUF_INIT;
    src->buf = host->alloc(text_cpu, src->cap, 0);
    if (src->buf == NULL) goto fail;
    if (text_ends_with(path, ".zst")) {
        src->zds = ZSTD_createDStream();
        if (src->zds == NULL) {
            host->errorf(GRM_ENOMEM, "reader-text: %s: cannot create a zstd decoder", path);
            goto fail;
        }
        ZSTD_initDStream(src->zds);
        src->zret = 1;  // a frame is expected: an empty .zst file is truncated
        src->zin_cap = ZSTD_DStreamInSize();
        src->zin = host->alloc(text_cpu, src->zin_cap, 0);
        if (src->zin == NULL) goto fail;
    }
    return GRM_OK;

fail:
    text_src_close(src);
    return GRM_ENOMEM;
}

void text_src_close(text_src *src)
{
    if (src->zds != NULL) ZSTD_freeDStream(src->zds);
    if (src->zin != NULL) src->host->free(text_cpu, src->zin);
    if (src->buf != NULL) src->host->free(text_cpu, src->buf);
    if (src->file != NULL) fclose(src->file);
    src->zds = NULL;
    src->zin = NULL;
    src->buf = NULL;
    src->file = NULL;
}

/* Read up to `cap` raw file bytes into dst; *n = 0 at the end of the file. */
static grm_status text_src_fread(text_src *src, void *dst, size_t cap, size_t *n)
{
    *n = fread(dst, 1, cap, src->file);
    if (*n < cap) {
        if (ferror(src->file)) {
            return src->host->errorf(GRM_EIO, "reader-text: %s: read failed: %s", src->path,
                                     strerror(errno));
        }
        src->file_eof = 1;
    }
    src->bytes += (int64_t)*n;
    return GRM_OK;
}

/* Decode up to `cap` bytes into dst; *n = 0 at the end of the input. */
static grm_status text_src_fill(text_src *src, char *dst, size_t cap, size_t *n)
{
    if (src->zds == NULL) {
        if (src->file_eof) {
            *n = 0;
            return GRM_OK;
        }
        return text_src_fread(src, dst, cap, n);
    }
    for (;;) {
        if (src->zin_pos == src->zin_len && !src->file_eof) {
            const grm_status st = text_src_fread(src, src->zin, src->zin_cap, &src->zin_len);
            if (st != GRM_OK) return st;
            src->zin_pos = 0;
        }
        if (src->zin_pos == src->zin_len && src->file_eof && src->zret == 0) {
            *n = 0;  // the last frame ended and was fully flushed, and no input remains
            return GRM_OK;
        }
        ZSTD_inBuffer in = { src->zin, src->zin_len, src->zin_pos };
        ZSTD_outBuffer out = { dst, cap, 0 };
        const size_t ret = ZSTD_decompressStream(src->zds, &out, &in);
        src->zin_pos = in.pos;
        if (ZSTD_isError(ret)) {
            return src->host->errorf(GRM_EFORMAT, "reader-text: %s: corrupt zstd stream: %s; "
                                     "check the file with zstd -t", src->path,
                                     ZSTD_getErrorName(ret));
        }
        src->zret = ret;
        if (out.pos > 0) {
            *n = out.pos;
            return GRM_OK;
        }
        if (in.pos == in.size && src->file_eof && ret != 0) {
            // The decoder wants more input but the file has ended: a frame was cut
            // short (or the file is empty, which is not a zstd frame either).
            return src->host->errorf(GRM_EFORMAT, "reader-text: %s: truncated zstd stream: "
                                     "the file ends inside a frame; check the file with "
                                     "zstd -t", src->path);
        }
    }
}

grm_status text_src_line(text_src *src, char **line, size_t *len)
{
    for (;;) {
        char *const s = src->buf + src->start;
        char *const nl = memchr(s, '\n', src->end - src->start);
        if (nl != NULL || (src->eof && src->start < src->end)) {
            // A line; without a newline only as the last one. The reader keeps one spare
            // byte after `end`, so the terminator can always be written.
            size_t n = (nl != NULL ? (size_t)(nl - s) : src->end - src->start);
            src->start += n + (nl != NULL);
            if (n > 0 && s[n - 1] == '\r') n--;
            s[n] = '\0';
            *line = s;
            *len = n;
            return GRM_OK;
        }
        if (src->eof) {
            *line = NULL;
            *len = 0;
            return GRM_OK;
        }
        // No complete line buffered: move the partial one to the front, make room
        // (doubling for long lines), and decode more.
        if (src->start > 0) {
            memmove(src->buf, src->buf + src->start, src->end - src->start);
            src->end -= src->start;
            src->start = 0;
        }
        if (src->cap - src->end < 2) {
            void *p = src->buf;
            size_t cap = src->cap;
            if (2 * src->cap > TEXT_LINE_MAX)   /* a zstd bomb, or no line breaks */
                return src->host->errorf(GRM_EFORMAT, "%s: a line longer than "
                                         "%zu MiB; not delimited text, or its line breaks "
                                         "are missing", src->path, TEXT_LINE_MAX >> 20);
            const grm_status st = text_grow(src->host, &p, &cap, 2 * src->cap);
            if (st != GRM_OK)
                return src->host->errorf(st, "%s: out of memory for a line of "
                                         "%zu bytes", src->path, src->end);
            src->buf = p;
            src->cap = cap;
        }
        size_t n = 0;
        const grm_status st = text_src_fill(src, src->buf + src->end,
                                            src->cap - src->end - 1, &n);
        if (st != GRM_OK) return st;
        if (n == 0) src->eof = 1;
        src->end += n;
    }
}

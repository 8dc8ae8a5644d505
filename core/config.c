/* core/config.c - pipeline INI files through inih, with a line number in every error.
 *
 * Debian's inih is built with INI_MAX_LINE 200 and truncates longer lines silently, so the
 * file is fed to ini_parse_stream through our own line reader, which measures each line
 * and turns an overlong one into an error instead of a truncated value. */
#include "grm_core.h"

#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>

/* The largest INI read (issue 25 item 12: one from /dev/zero was read until memory ran
 * out). */
#define GRM__INI_MAX (16 << 20)

typedef struct parse_state {
    const char *name;       /* file name for messages */
    const char *text;       /* whole file, NUL-terminated */
    size_t pos;
    int line;               /* line most recently handed to inih (1-based) */
    int cont;               /* that line starts with whitespace: a continuation */
    int header_line;        /* line of the most recent [section] header */
    grm__config *cfg;
    grm_status status;      /* first failure */
    char message[1024];
} parse_state;

static int parse_fail(parse_state *ps, grm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int parse_fail(parse_state *ps, grm_status st, const char *fmt, ...)
{
    if (ps->status == GRM_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ps->message, sizeof ps->message, fmt, ap);
        va_end(ap);
        ps->status = st;
    }
    return 0;
}

/* inih's reader: like fgets, one line per call; `num` is inih's buffer size. */
static char *line_reader(char *str, int num, void *stream)
{
    parse_state *ps = stream;
    const char *p = ps->text + ps->pos;
    if (*p == '\0' || ps->status != GRM_OK) return NULL;
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
    ps->line++;
    ps->cont = (*p == ' ' || *p == '\t');
    for (const char *q = p; *q == ' ' || *q == '\t' || *q == '['; q++)
        if (*q == '[') {
            ps->header_line = ps->line;
            break;
        }
    /* inih needs room for the text, the newline and the NUL */
    if (len + 1 > (size_t)num) {
        size_t chars = len - (nl ? 1 : 0);
        parse_fail(ps, GRM_EINVAL,
                   "%s:%d: line is %zu characters long, longer than the %d the INI parser "
                   "reads; split the value (lists may continue on indented lines) or "
                   "shorten it", ps->name, ps->line, chars, num - 2);
        return NULL;
    }
    memcpy(str, p, len);
    str[len] = '\0';
    ps->pos += len;
    return str;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

grm__section *grm__config_section(const grm__config *cfg, const char *name)
{
    for (int i = 0; i < cfg->nsec; i++)
        if (strcmp(cfg->sec[i].name, name) == 0) return &cfg->sec[i];
    return NULL;
}

grm__kv *grm__section_kv(const grm__section *sec, const char *key)
{
    for (int i = 0; i < sec->nkv; i++)
        if (strcmp(sec->kv[i].key, key) == 0) return &sec->kv[i];
    return NULL;
}

static int ini_handler_fn(void *user, const char *section, const char *name, const char *value)
{
    parse_state *ps = user;
    grm__config *cfg = ps->cfg;
    if (ps->status != GRM_OK) return 0;
    if (section[0] == '\0')
        return parse_fail(ps, GRM_EINVAL, "%s:%d: key '%s' is outside any section; put it "
                          "under a [section] header", ps->name, ps->line, name);
    grm__section *sec = cfg->nsec ? &cfg->sec[cfg->nsec - 1] : NULL;
    if (!sec || strcmp(sec->name, section) != 0) {
        grm__section *old = grm__config_section(cfg, section);
        if (old)
            return parse_fail(ps, GRM_EINVAL, "%s:%d: section [%s] appears again (first at "
                              "line %d); merge the two", ps->name, ps->header_line, section,
                              old->line);
        grm__section *ns = realloc(cfg->sec, (size_t)(cfg->nsec + 1) * sizeof *ns);
        if (!ns) return parse_fail(ps, GRM_ENOMEM, "%s: out of memory", ps->name);
        cfg->sec = ns;
        sec = &cfg->sec[cfg->nsec++];
        memset(sec, 0, sizeof *sec);
        sec->name = xstrdup(section);
        sec->line = ps->header_line ? ps->header_line : ps->line;
        if (!sec->name) return parse_fail(ps, GRM_ENOMEM, "%s: out of memory", ps->name);
    }
    grm__kv *dup = grm__section_kv(sec, name);
    if (dup) {
        /* inih calls again for each indented continuation line of a value: append it,
         * comma-separated (continuations are for long lists). */
        if (ps->cont && sec->kv[sec->nkv - 1].key == dup->key) {
            size_t a = strlen(dup->value), b = strlen(value);
            char *nv = realloc(dup->value, a + b + 2);
            if (!nv) return parse_fail(ps, GRM_ENOMEM, "%s: out of memory", ps->name);
            int comma = a && nv[a - 1] != ',' && value[0] != ',';
            if (comma) nv[a] = ',';
            memcpy(nv + a + comma, value, b + 1);
            dup->value = nv;
            return 1;
        }
        return parse_fail(ps, GRM_EINVAL, "%s:%d: key '%s' repeated in [%s] (first at line "
                          "%d); keep one", ps->name, ps->line, name, section, dup->line);
    }
    grm__kv *nk = realloc(sec->kv, (size_t)(sec->nkv + 1) * sizeof *nk);
    if (!nk) return parse_fail(ps, GRM_ENOMEM, "%s: out of memory", ps->name);
    sec->kv = nk;
    grm__kv *kv = &sec->kv[sec->nkv++];
    kv->key = xstrdup(name);
    kv->value = xstrdup(value);
    kv->line = ps->line;
    kv->used = 0;
    if (!kv->key || !kv->value) return parse_fail(ps, GRM_ENOMEM, "%s: out of memory", ps->name);
    return 1;
}

void grm__config_destroy(grm__config *cfg)
{
    if (!cfg) return;
    for (int i = 0; i < cfg->nsec; i++) {
        for (int j = 0; j < cfg->sec[i].nkv; j++) {
            free(cfg->sec[i].kv[j].key);
            free(cfg->sec[i].kv[j].value);
        }
        free(cfg->sec[i].kv);
        free(cfg->sec[i].name);
    }
    free(cfg->sec);
    free(cfg->path);
    free(cfg);
}

grm_status grm__config_parse(const char *name, const char *text, grm__config **out)
{
    parse_state ps = { .name = name, .text = text };
    *out = NULL;
    ps.cfg = calloc(1, sizeof *ps.cfg);
    if (!ps.cfg || !(ps.cfg->path = xstrdup(name))) {
        free(ps.cfg);
        return grm_errorf(GRM_ENOMEM, "%s: out of memory", name);
    }
    int rc = ini_parse_stream(line_reader, &ps, ini_handler_fn, &ps);
    if (ps.status == GRM_OK && rc > 0)
        parse_fail(&ps, GRM_EINVAL, "%s:%d: not a 'key = value' line nor a [section] "
                   "header", name, rc);
    if (ps.status != GRM_OK) {
        grm__config_destroy(ps.cfg);
        return grm_errorf(ps.status, "%s", ps.message);
    }
    *out = ps.cfg;
    return GRM_OK;
}

grm_status grm__config_load(const char *path, grm__config **out)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0;
    *out = NULL;
    if (!f) return grm_errorf(GRM_EIO, "%s: cannot open: %s", path, strerror(errno));
    for (;;) {
        if (len > GRM__INI_MAX) {   /* /dev/zero, `yes |`: refuse before memory runs out */
            free(text);
            fclose(f);
            return grm_errorf(GRM_EINVAL, "%s: longer than %d MiB; a pipeline INI is a few "
                              "KB: check the path", path, GRM__INI_MAX >> 20);
        }
        if (cap - len < 4096) {
            char *nt = realloc(text, cap ? cap * 2 : 8192);
            if (!nt) {
                free(text);
                fclose(f);
                return grm_errorf(GRM_ENOMEM, "%s: out of memory", path);
            }
            text = nt;
            cap = cap ? cap * 2 : 8192;
        }
        size_t n = fread(text + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(text);
        return grm_errorf(GRM_EIO, "%s: read failed", path);
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        return grm_errorf(GRM_EFORMAT, "%s: contains a NUL byte; not a text INI file", path);
    }
    grm_status st = grm__config_parse(path, text, out);
    free(text);
    return st;
}

/* core/config.c - pipeline INI files through inih, with a line number in every error.
 *
 * Debian's inih is built with INI_MAX_LINE 200 and truncates longer lines silently, so the
 * file is fed to ini_parse_stream through our own line reader, which measures each line
 * and turns an overlong one into an error instead of a truncated value.
 *
 * Composition (a business line's file on a shared base): `include = FILE` lines before the
 * first section read FILE (relative to the including file) first, nested, cycles refused;
 * a key given again by a later file overrides the earlier value (and a section whose
 * `plugin` a later file changes drops the keys earlier files gave it); grm__config_set applies
 * `--set section.key=value`; `${NAME}` and `${NAME:-default}` in a value expand from the
 * environment. Every key keeps the file and line its value came from (grm__kv). */
#include "grm_core.h"

#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL   /* as core/grmcol.c: header-only, no libxxhash link */
#include <xxhash.h>

enum { CONFIG_MAX_DEPTH = 16 };   /* nested includes */

/* The largest INI read (issue 25 item 12: one from /dev/zero was read until memory ran
 * out). */
#define GRM__INI_MAX (16 << 20)

typedef struct parse_state {
    const char *name;       /* file name for messages; cfg->files owns it */
    const char *text;       /* whole file, NUL-terminated */
    size_t pos;
    int line;               /* line most recently handed to inih (1-based) */
    int cont;               /* that line starts with whitespace: a continuation */
    int header_line;        /* line of the most recent [section] header */
    int serial;             /* this file's parse: keys and sections it opened carry it */
    int cur;                /* section the keys go to (-1: none yet) */
    int cur_header;         /* header_line when cur was chosen */
    const char *last_key;   /* the key the previous line set: continuation lines extend it */
    int depth;              /* include nesting (0: the top file) */
    char **chain;           /* [depth + 1] real paths of the files being read: cycles */
    grm__config *cfg;
    grm_status status;      /* first failure */
    char message[1024];
} parse_state;

static grm_status parse_text(grm__config *cfg, const char *name, const char *text, int depth,
                             char **chain, char *message, size_t cap);
static grm_status load_file(grm__config *cfg, const char *path, int depth, char **chain,
                            char *message, size_t cap);

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

const char *grm__kv_file(const grm__kv *kv, const char *fallback)
{
    return kv && kv->file ? kv->file : fallback;
}

/* A name the config owns (kept until grm__config_destroy); NULL when out of memory. */
static const char *own_name(grm__config *cfg, const char *name)
{
    for (int i = 0; i < cfg->nfiles; i++)
        if (strcmp(cfg->files[i], name) == 0) return cfg->files[i];
    char **nf = realloc(cfg->files, (size_t)(cfg->nfiles + 1) * sizeof *nf);
    if (!nf) return NULL;
    cfg->files = nf;
    if (!(nf[cfg->nfiles] = xstrdup(name))) return NULL;
    return nf[cfg->nfiles++];
}

/* `value` with ${NAME} and ${NAME:-default} replaced from the environment, into out [cap].
 * Returns 0 and a reason in why [wcap] when a name is unset (without a default), malformed,
 * or the result does not fit. */
static int expand_env(const char *value, char *out, size_t cap, char *why, size_t wcap)
{
    size_t n = 0;
    for (const char *v = value; *v;) {
        const char *add = v;
        size_t len = 1;
        if (v[0] == '$' && v[1] == '{') {
            const char *end = strchr(v + 2, '}');
            const char *name = v + 2;
            size_t nl = end ? (size_t)(end - name) : 0;
            const char *dash = end ? strstr(name, ":-") : NULL;
            if (dash && dash > end) dash = NULL;
            size_t id = dash ? (size_t)(dash - name) : nl;
            int valid = end && id > 0 && id < 128;
            for (size_t i = 0; valid && i < id; i++)
                valid = (name[i] >= 'A' && name[i] <= 'Z') || (name[i] >= 'a' && name[i] <= 'z')
                        || (name[i] >= '0' && name[i] <= '9') || name[i] == '_';
            if (!valid) {
                snprintf(why, wcap, "'%.40s' is not ${NAME} or ${NAME:-default} (NAME of "
                         "letters, digits and _)", v);
                return 0;
            }
            char var[128];
            memcpy(var, name, id);
            var[id] = '\0';
            const char *env = getenv(var);
            if (env && env[0]) {
                add = env;
                len = strlen(env);
            } else if (dash) {
                add = dash + 2;
                len = (size_t)(end - add);
            } else {
                snprintf(why, wcap, "environment variable %s is not set; export it, or write "
                         "${%s:-default}", var, var);
                return 0;
            }
            v = end + 1;
        } else {
            v++;
        }
        if (n + len + 1 > cap) {
            snprintf(why, wcap, "the value is longer than %zu characters once expanded",
                     cap - 1);
            return 0;
        }
        memcpy(out + n, add, len);
        n += len;
    }
    out[n] = '\0';
    return 1;
}

/* `path` as named from a file `from`: relative paths are relative to from's directory. */
static void relative_to(char *out, size_t cap, const char *from, const char *path)
{
    const char *slash = strrchr(from, '/');
    if (path[0] == '/' || !slash) snprintf(out, cap, "%s", path);
    else snprintf(out, cap, "%.*s/%s", (int)(slash - from), from, path);
}

/* The keys of a plugin's section that are the host's, not the plugin's. */
const char *const grm__checkpoint_host_keys[] = { "dir", "every", "keep", NULL };

int grm__host_key(const char *section, const char *key)
{
    if (strcmp(section, "checkpoint") != 0) return 0;
    for (int i = 0; grm__checkpoint_host_keys[i]; i++)
        if (strcmp(key, grm__checkpoint_host_keys[i]) == 0) return 1;
    return 0;
}

/* Key `name` of [section] set to `value` (expanded) from file:line of parse `serial`. A key
 * an earlier file gave is overridden (the earlier origin kept in over_file:over_line); one
 * the same file gave twice is an error. Returns the status, message in why [wcap]. */
static grm_status put_key(grm__config *cfg, grm__section *sec, const char *name,
                          const char *value, const char *file, int line, int serial,
                          char *why, size_t wcap)
{
    char exp[4096];
    if (!expand_env(value, exp, sizeof exp, why, wcap)) return GRM_EINVAL;
    grm__kv *kv = grm__section_kv(sec, name);
    if (kv && kv->serial == serial) {
        snprintf(why, wcap, "key '%s' repeated in [%s] (first at line %d); keep one", name,
                 sec->name, kv->line);
        return GRM_EINVAL;
    }
    if (!kv) {
        grm__kv *nk = realloc(sec->kv, (size_t)(sec->nkv + 1) * sizeof *nk);
        if (!nk) goto oom;
        sec->kv = nk;
        kv = &sec->kv[sec->nkv++];
        memset(kv, 0, sizeof *kv);
        if (!(kv->key = xstrdup(name))) goto oom;
    } else {
        kv->over_file = kv->file;
        kv->over_line = kv->line;
        if (strcmp(name, "plugin") == 0 && strcmp(kv->value, exp) != 0) {
            /* another component in this section: the keys earlier files gave it were the
             * other plugin's parameters, so they go; keys this source gave stay, the
             * command line's --set being one source (`--set checkpoint.dir=D --set
             * checkpoint.plugin=P` lost D), and so do the host's own keys of the section
             * (a line swapping [checkpoint] plugin lost the base's dir: no checkpoints,
             * and nothing said so) */
            int keep = 0;
            for (int i = 0; i < sec->nkv; i++) {
                grm__kv *o = &sec->kv[i];
                if (o == kv || o->serial == serial || (o->serial < 0 && serial < 0)
                    || grm__host_key(sec->name, o->key)) {
                    sec->kv[keep++] = *o;
                } else {
                    free(o->key);
                    free(o->value);
                }
            }
            sec->nkv = keep;
            kv = grm__section_kv(sec, name);
        }
    }
    char *nv = xstrdup(exp);
    if (!nv) goto oom;
    free(kv->value);
    kv->value = nv;
    kv->file = file;
    kv->line = line;
    kv->serial = serial;
    kv->used = 0;
    return GRM_OK;
oom:
    snprintf(why, wcap, "out of memory");
    return GRM_ENOMEM;
}

/* The section named `name`, created (at file:line, by parse `serial`) when new. */
static grm__section *get_section(grm__config *cfg, const char *name, const char *file,
                                 int line, int serial)
{
    grm__section *sec = grm__config_section(cfg, name);
    if (sec) return sec;
    grm__section *ns = realloc(cfg->sec, (size_t)(cfg->nsec + 1) * sizeof *ns);
    if (!ns) return NULL;
    cfg->sec = ns;
    sec = &cfg->sec[cfg->nsec];
    memset(sec, 0, sizeof *sec);
    if (!(sec->name = xstrdup(name))) return NULL;
    sec->file = file;
    sec->line = line;
    sec->serial = serial;
    cfg->nsec++;
    return sec;
}

static int ini_handler_fn(void *user, const char *section, const char *name, const char *value)
{
    parse_state *ps = user;
    grm__config *cfg = ps->cfg;
    char why[512];
    if (ps->status != GRM_OK) return 0;
    if (section[0] == '\0') {
        if (strcmp(name, "include") != 0)
            return parse_fail(ps, GRM_EINVAL, "%s:%d: key '%s' is outside any section; put it "
                              "under a [section] header (only include = FILE lines come before "
                              "the first section)", ps->name, ps->line, name);
        char exp[4096], path[4096 + 512];
        if (!expand_env(value, exp, sizeof exp, why, sizeof why))
            return parse_fail(ps, GRM_EINVAL, "%s:%d: include: %s", ps->name, ps->line, why);
        if (!exp[0])
            return parse_fail(ps, GRM_EINVAL, "%s:%d: include: no file named; write include = "
                              "base.ini (relative to this file)", ps->name, ps->line);
        relative_to(path, sizeof path, ps->name, exp);
        if (ps->depth + 1 >= CONFIG_MAX_DEPTH)
            return parse_fail(ps, GRM_EINVAL, "%s:%d: include %s: more than %d nested "
                              "includes", ps->name, ps->line, path, CONFIG_MAX_DEPTH);
        char msg[1024];
        grm_status st = load_file(cfg, path, ps->depth + 1, ps->chain, msg, sizeof msg);
        if (st != GRM_OK)
            return parse_fail(ps, st, "%s:%d: include %s: %s", ps->name, ps->line, exp, msg);
        return 1;
    }
    /* a [section] header seen since the keys went to ps->cur: which section now? */
    if (ps->cur < 0 || ps->cur_header != ps->header_line
        || strcmp(cfg->sec[ps->cur].name, section) != 0) {
        int line = ps->header_line ? ps->header_line : ps->line;
        grm__section *old = grm__config_section(cfg, section);
        if (old && old->serial == ps->serial && old->line != line)
            return parse_fail(ps, GRM_EINVAL, "%s:%d: section [%s] appears again (first at "
                              "line %d); merge the two", ps->name, line, section, old->line);
        grm__section *sec = get_section(cfg, section, ps->name, line, ps->serial);
        if (!sec) return parse_fail(ps, GRM_ENOMEM, "%s: out of memory", ps->name);
        if (sec->serial != ps->serial) {   /* an included file's section, reopened here */
            sec->serial = ps->serial;
            sec->line = line;
            sec->file = ps->name;
        }
        ps->cur = (int)(sec - cfg->sec);
        ps->cur_header = ps->header_line;
    }
    grm__section *sec = &cfg->sec[ps->cur];
    if (strcmp(name, "include") == 0)
        return parse_fail(ps, GRM_EINVAL, "%s:%d: include inside [%s]; include = FILE lines "
                          "come before the first [section]", ps->name, ps->line, section);
    grm__kv *dup = grm__section_kv(sec, name);
    if (dup && dup->serial == ps->serial && ps->cont && ps->last_key == dup->key) {
        /* inih calls again for each indented continuation line of a value: append it,
         * comma-separated (continuations are for long lists). */
        char exp[4096];
        if (!expand_env(value, exp, sizeof exp, why, sizeof why))
            return parse_fail(ps, GRM_EINVAL, "%s:%d: [%s] %s: %s", ps->name, ps->line,
                              section, name, why);
        size_t a = strlen(dup->value), b = strlen(exp);
        char *nv = realloc(dup->value, a + b + 2);
        if (!nv) return parse_fail(ps, GRM_ENOMEM, "%s: out of memory", ps->name);
        int comma = a && nv[a - 1] != ',' && exp[0] != ',';
        if (comma) nv[a] = ',';
        memcpy(nv + a + comma, exp, b + 1);
        dup->value = nv;
        return 1;
    }
    const int repeated = dup && dup->serial == ps->serial;   /* put_key may move dup */
    grm_status st = put_key(cfg, sec, name, value, ps->name, ps->line, ps->serial, why,
                            sizeof why);
    if (st == GRM_EINVAL && repeated)
        return parse_fail(ps, st, "%s:%d: %s", ps->name, ps->line, why);
    if (st != GRM_OK)
        return parse_fail(ps, st, "%s:%d: [%s] %s: %s", ps->name, ps->line, section, name, why);
    ps->last_key = grm__section_kv(sec, name)->key;
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
    for (int i = 0; i < cfg->nfiles; i++) free(cfg->files[i]);
    free(cfg->files);
    free(cfg->sec);
    free(cfg->path);
    free(cfg);
}

static grm_status parse_text(grm__config *cfg, const char *name, const char *text, int depth,
                             char **chain, char *message, size_t cap)
{
    parse_state ps = { .text = text, .cur = -1, .depth = depth, .chain = chain, .cfg = cfg };
    if (!(ps.name = own_name(cfg, name))) {
        snprintf(message, cap, "%s: out of memory", name);
        return GRM_ENOMEM;
    }
    ps.serial = ++cfg->serials;
    int rc = ini_parse_stream(line_reader, &ps, ini_handler_fn, &ps);
    if (ps.status == GRM_OK && rc > 0)
        parse_fail(&ps, GRM_EINVAL, "%s:%d: not a 'key = value' line nor a [section] "
                   "header", ps.name, rc);
    if (ps.status != GRM_OK) snprintf(message, cap, "%s", ps.message);
    return ps.status;
}

static grm__config *config_new(const char *name)
{
    grm__config *cfg = calloc(1, sizeof *cfg);
    if (cfg && !(cfg->path = xstrdup(name))) {
        free(cfg);
        cfg = NULL;
    }
    return cfg;
}

grm_status grm__config_parse(const char *name, const char *text, grm__config **out)
{
    char message[1024];
    *out = NULL;
    grm__config *cfg = config_new(name);
    if (!cfg) return grm_errorf(GRM_ENOMEM, "%s: out of memory", name);
    grm_status st = parse_text(cfg, name, text, 0, NULL, message, sizeof message);
    if (st != GRM_OK) {
        grm__config_destroy(cfg);
        return grm_errorf(st, "%s", message);
    }
    *out = cfg;
    return GRM_OK;
}

/* Read the file at `path` whole; *text is malloc'd, NUL-terminated. */
static grm_status read_text(const char *path, char **text_out, char *message, size_t cap)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, tcap = 0;
    *text_out = NULL;
    if (!f) {
        snprintf(message, cap, "%s: cannot open: %s", path, strerror(errno));
        return GRM_EIO;
    }
    for (;;) {
        if (len > GRM__INI_MAX) {   /* /dev/zero, `yes |`: refuse before memory runs out */
            free(text);
            fclose(f);
            snprintf(message, cap, "%s: longer than %d MiB; a pipeline INI is a few KB: check "
                     "the path", path, GRM__INI_MAX >> 20);
            return GRM_EINVAL;
        }
        if (tcap - len < 4096) {
            char *nt = realloc(text, tcap ? tcap * 2 : 8192);
            if (!nt) {
                free(text);
                fclose(f);
                snprintf(message, cap, "%s: out of memory", path);
                return GRM_ENOMEM;
            }
            text = nt;
            tcap = tcap ? tcap * 2 : 8192;
        }
        size_t n = fread(text + len, 1, tcap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(text);
        snprintf(message, cap, "%s: read failed", path);
        return GRM_EIO;
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        snprintf(message, cap, "%s: contains a NUL byte; not a text INI file", path);
        return GRM_EFORMAT;
    }
    *text_out = text;
    return GRM_OK;
}

/* Parse the file at `path` into cfg; chain [depth] holds the real paths of the files that
 * include it (a cycle is one of them again). */
static grm_status load_file(grm__config *cfg, const char *path, int depth, char **chain,
                            char *message, size_t cap)
{
    char *text, *real = realpath(path, NULL);
    char *local[CONFIG_MAX_DEPTH] = { 0 };
    if (!chain) chain = local;
    if (real) {
        for (int i = 0; i < depth; i++) {
            if (chain[i] && strcmp(chain[i], real) == 0) {
                snprintf(message, cap, "%s includes itself (a cycle through %d file%s); "
                         "remove one include", path, depth - i, depth - i > 1 ? "s" : "");
                free(real);
                return GRM_EINVAL;
            }
        }
    }
    grm_status st = read_text(path, &text, message, cap);
    if (st == GRM_OK) {
        chain[depth] = real;
        st = parse_text(cfg, path, text, depth, chain, message, cap);
        chain[depth] = NULL;
        free(text);
    }
    free(real);
    return st;
}

grm_status grm__config_load(const char *path, grm__config **out)
{
    char message[1024];
    *out = NULL;
    grm__config *cfg = config_new(path);
    if (!cfg) return grm_errorf(GRM_ENOMEM, "%s: out of memory", path);
    grm_status st = load_file(cfg, path, 0, NULL, message, sizeof message);
    if (st != GRM_OK) {
        grm__config_destroy(cfg);
        return grm_errorf(st, "%s", message);
    }
    *out = cfg;
    return GRM_OK;
}

grm_status grm__config_set(grm__config *cfg, const char *assignment, int index)
{
    char origin[32], why[512], sec[256];
    snprintf(origin, sizeof origin, "--set");
    const char *eq = strchr(assignment, '=');
    const char *dot = NULL;
    for (const char *c = assignment; eq && c < eq; c++)
        if (*c == '.') dot = c;
    if (!eq || !dot || dot == assignment || dot + 1 == eq
        || (size_t)(dot - assignment) >= sizeof sec)
        return grm_errorf(GRM_EINVAL, "--set '%s': expected section.key=value, e.g. --set "
                          "train.batch_size=512 or --set dense.0.dims=128,64", assignment);
    memcpy(sec, assignment, (size_t)(dot - assignment));
    sec[dot - assignment] = '\0';
    char key[256];
    size_t kl = (size_t)(eq - dot - 1);
    if (kl >= sizeof key) kl = sizeof key - 1;
    memcpy(key, dot + 1, kl);
    key[kl] = '\0';
    const char *file = own_name(cfg, origin);
    if (!file) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm__section *s = get_section(cfg, sec, file, index, 0);
    if (!s) return grm_errorf(GRM_ENOMEM, "out of memory");
    /* serial -index: every --set is its own source, overriding the files and earlier --set */
    grm_status st = put_key(cfg, s, key, eq + 1, file, index, -index, why, sizeof why);
    if (st != GRM_OK) return grm_errorf(st, "--set %s: %s", assignment, why);
    return GRM_OK;
}

void grm__config_resolve_path(grm__config *cfg, const char *section, const char *key)
{
    grm__section *sec = grm__config_section(cfg, section);
    grm__kv *kv = sec ? grm__section_kv(sec, key) : NULL;
    if (!kv || !kv->value[0] || kv->value[0] == '/' || !kv->file || kv->serial < 0) return;
    char path[8192];
    relative_to(path, sizeof path, kv->file, kv->value);
    char *nv = xstrdup(path);
    if (!nv) return;   /* keeps the value as given; opening it names it */
    free(kv->value);
    kv->value = nv;
}

void grm__config_print(FILE *f, const grm__config *cfg, int origin)
{
    for (int i = 0; i < cfg->nsec; i++) {
        const grm__section *sec = &cfg->sec[i];
        fprintf(f, "%s[%s]", i ? "\n" : "", sec->name);
        if (origin) fprintf(f, "%*s; %s:%d", (int)(36 - strlen(sec->name)), "", sec->file,
                            sec->line);
        fputc('\n', f);
        for (int j = 0; j < sec->nkv; j++) {
            const grm__kv *kv = &sec->kv[j];
            int n = fprintf(f, "%s = %s", kv->key, kv->value);
            if (origin) {
                fprintf(f, "%*s; %s:%d", n < 38 ? 38 - n : 1, "", kv->file, kv->line);
                if (kv->over_file)
                    fprintf(f, " (over %s:%d)", kv->over_file, kv->over_line);
            }
            fputc('\n', f);
        }
    }
}

uint64_t grm__config_hash(const grm__config *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return 0;
    grm__config_print(f, cfg, 0);
    fclose(f);
    uint64_t h = text ? XXH64(text, len, 0) : 0;
    free(text);
    return h;
}

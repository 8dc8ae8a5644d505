/* core/convert.c - `grmhost convert` (delimited text -> grmcol) and `grmhost inspect`
 * (print a grmcol file's schema, row groups and sizes). convert parses the text with the
 * reader-text plugin, loaded and configured as a pipeline's [reader] is, so there is one
 * parser; it only sniffs the first lines itself to infer a schema when none is given.
 * Format: share/doc/grmcol.md; RecIS §2.2.1 (columnar, compressed storage). */
#include "cli.h"
#include "grmcol.h"
#include "grm_core.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

static const char usage_convert[] =
    "usage: grmhost convert [OPTIONS] IN OUT.grmcol\n"
    "\n"
    "Convert delimited text (IN: .tsv .csv .txt ..., or the same compressed with zstd as\n"
    "NAME.zst) into a grmcol file (share/doc/grmcol.md): columnar, one zstd frame and one\n"
    "XXH64 checksum per column chunk. The text is parsed by the reader-text plugin.\n"
    "Without --columns the schema is inferred from the first 1000 lines: i64 when every\n"
    "value is an integer, f32 when every value is a number, else string; when lines have\n"
    "different field counts, the first field is a column and the rest a list column.\n"
    "\n"
    "options:\n"
    "  --columns LIST        name:type per field as reader-text takes them, e.g.\n"
    "                        user:i64,item:i64,rating:f32,ts:i64 (types i64 f32 str\n"
    "                        list_i64 list_f32; '_' skips a field)\n"
    "  --format FMT          tsv (default), csv, ssv (runs of spaces) or movielens ('::')\n"
    "  --header              the first line holds column names (skipped; inferred\n"
    "                        schemas take their names from it)\n"
    "  --rows-per-group N    rows per row group (default 65536, 1..16777216)\n"
    "  --level L             zstd level (default 3, 1..19)\n"
    "  -q, --quiet           print nothing on success\n"
    "  -h, --help            this text\n";

static const char usage_inspect[] =
    "usage: grmhost inspect [--groups] FILE.grmcol\n"
    "       grmhost inspect CHECKPOINT.grm | CHECKPOINT.safetensors\n"
    "\n"
    "Check a grmcol file's header, footer and every chunk checksum, and print its schema,\n"
    "row groups, and per column the compressed and uncompressed bytes and their ratio.\n"
    "\n"
    "A checkpoint (any extension a ckpt-* plugin owns: .grm, .safetensors) is verified by\n"
    "its format plugin (headers, bounds, checksums) and printed: step, pipeline name,\n"
    "config hash, the metadata, then one line per tensor with its dtype, shape, bytes and\n"
    "the XXH64 of its raw bytes (the same model in either format prints the same sums).\n"
    "\n"
    "options:\n"
    "  --groups      grmcol: also print one line per row group\n"
    "  -h, --help    this text\n";

enum { OPT_COLUMNS = 256, OPT_FORMAT, OPT_HEADER, OPT_RPG, OPT_LEVEL, OPT_GROUPS };

/* ---- schema inference: sniff the first lines ---- */

/* Lines sniffed, and the most decoded bytes looked at. */
#define SNIFF_LINES 1000
#define SNIFF_BYTES (1u << 20)

static int has_suffix(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The first decoded bytes of `path` (zstd when it ends in .zst): *out malloc'ed. */
static grm_status sniff_read(const char *path, char **out, size_t *len)
{
    grm_status st = GRM_OK;
    FILE *const f = fopen(path, "rb");
    if (f == NULL) return grm_errorf(GRM_EIO, "%s: cannot open: %s", path, strerror(errno));
    char *const buf = malloc(SNIFF_BYTES + 1);
    unsigned char *const zin = malloc(ZSTD_DStreamInSize());
    ZSTD_DStream *const zds = has_suffix(path, ".zst") ? ZSTD_createDStream() : NULL;
    size_t n = 0;
    if (buf == NULL || zin == NULL || (has_suffix(path, ".zst") && zds == NULL)) {
        st = grm_errorf(GRM_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    if (zds == NULL) {
        n = fread(buf, 1, SNIFF_BYTES, f);
    } else {
        ZSTD_initDStream(zds);
        while (n < SNIFF_BYTES) {
            const size_t got = fread(zin, 1, ZSTD_DStreamInSize(), f);
            if (got == 0) break;
            ZSTD_inBuffer in = { zin, got, 0 };
            while (in.pos < in.size && n < SNIFF_BYTES) {
                ZSTD_outBuffer o = { buf + n, SNIFF_BYTES - n, 0 };
                const size_t r = ZSTD_decompressStream(zds, &o, &in);
                if (ZSTD_isError(r)) {
                    st = grm_errorf(GRM_EFORMAT, "%s: corrupt zstd data: %s", path,
                                    ZSTD_getErrorName(r));
                    goto out;
                }
                n += o.pos;
            }
        }
    }
    if (ferror(f)) {
        st = grm_errorf(GRM_EIO, "%s: read failed: %s", path, strerror(errno));
        goto out;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
out:
    if (st != GRM_OK) free(buf);
    free(zin);
    ZSTD_freeDStream(zds);
    fclose(f);
    return st;
}

/* Split line [n] in place by the reader-text format (0 tsv, 1 csv, 2 ssv, 3 movielens),
 * like reader-text does; the fields are NUL-terminated. Returns the field count (up to
 * max stored in f). */
static int sniff_split(char *line, int fmt, char **f, int max)
{
    int k = 0;
    char *p = line;
    if (fmt == 2) {
        for (;;) {
            while (*p == ' ' || *p == '\t') p++;
            if (*p == '\0') break;
            if (k < max) f[k] = p;
            k++;
            while (*p != '\0' && *p != ' ' && *p != '\t') p++;
            if (*p != '\0') *p++ = '\0';
        }
        return k;
    }
    for (;;) {
        if (k < max) f[k] = p;
        k++;
        char *const sep = fmt == 3 ? strstr(p, "::") : strchr(p, fmt == 1 ? ',' : '\t');
        if (sep == NULL) break;
        *sep = '\0';
        p = sep + (fmt == 3 ? 2 : 1);
    }
    return k;
}

/* Kinds of value, widening i64 -> f32 -> str. */
enum { KIND_I64 = 0, KIND_F32 = 1, KIND_STR = 2 };

static int value_kind(const char *s)
{
    char *end;
    if (*s == '\0') return KIND_STR;
    errno = 0;
    (void)strtoll(s, &end, 10);
    const int digit_start = s[0] == '-' || s[0] == '+' || (s[0] >= '0' && s[0] <= '9');
    if (*end == '\0' && errno == 0 && digit_start) return KIND_I64;
    const float v = strtof(s, &end);
    if (*end == '\0' && isfinite(v)) return KIND_F32;
    return KIND_STR;
}

/* A header name usable in a columns entry, or NULL. */
static int good_name(const char *s)
{
    if (s[0] == '\0' || strcmp(s, "_") == 0 || strlen(s) > 64) return 0;
    for (const char *p = s; *p; p++)
        if (*p == ':' || *p == ',' || *p == ' ' || *p == '=') return 0;
    return 1;
}

#define SNIFF_MAX_FIELDS 64

/* Infer a reader-text columns string from the first lines of path. */
static grm_status sniff_columns(const char *path, int fmt, int header, char *out, size_t cap)
{
    static const char *const type_names[] = { "i64", "f32", "str" };
    static const char *const list_names[] = { "list_i64", "list_f32", NULL };
    char *buf = NULL, *save = NULL;
    size_t len = 0;
    grm_status st = sniff_read(path, &buf, &len);
    if (st != GRM_OK) return st;
    // Drop a last line that the sniff limit may have cut.
    if (len == SNIFF_BYTES) {
        char *const nl = strrchr(buf, '\n');
        if (nl != NULL) nl[1] = '\0';
    }
    char *f[SNIFF_MAX_FIELDS];
    char names[SNIFF_MAX_FIELDS][72];
    int kind[SNIFF_MAX_FIELDS], list_kind = KIND_I64;
    int nmin = -1, nmax = 0, lines = 0, have_names = 0;
    for (int i = 0; i < SNIFF_MAX_FIELDS; i++) {
        kind[i] = KIND_I64;
        snprintf(names[i], sizeof names[i], "c%d", i);
    }
    int first = 1;
    for (char *line = strtok_r(buf, "\n", &save); line != NULL && lines < SNIFF_LINES;
         line = strtok_r(NULL, "\n", &save)) {
        const size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\r') line[n - 1] = '\0';
        if (line[strspn(line, " \t")] == '\0') continue;
        const int k = sniff_split(line, fmt, f, SNIFF_MAX_FIELDS);
        if (first && header) {
            for (int i = 0; i < k && i < SNIFF_MAX_FIELDS; i++) {
                if (good_name(f[i])) snprintf(names[i], sizeof names[i], "%s", f[i]);
            }
            have_names = 1;
            first = 0;
            continue;
        }
        first = 0;
        nmin = nmin < 0 || k < nmin ? k : nmin;
        nmax = k > nmax ? k : nmax;
        for (int i = 0; i < k && i < SNIFF_MAX_FIELDS; i++) {
            const int vk = value_kind(f[i]);
            if (vk > kind[i]) kind[i] = vk;
            if (i > 0 && vk > list_kind) list_kind = vk;
        }
        lines++;
    }
    free(buf);
    (void)have_names;
    if (lines == 0) {
        return grm_errorf(GRM_EINVAL, "%s: no data line in the first %u bytes to infer a "
                          "schema from; give --columns", path, SNIFF_BYTES);
    }
    size_t w = 0;
    out[0] = '\0';
    if (nmin == nmax && nmax <= SNIFF_MAX_FIELDS) {
        for (int i = 0; i < nmax; i++) {
            w += (size_t)snprintf(out + w, cap - w, "%s%s:%s", i ? "," : "", names[i],
                                  type_names[kind[i]]);
        }
    } else {
        // Lines of different lengths: an id, then the rest as one list (e.g. "user i1 i2 ...").
        if (list_names[list_kind] == NULL) {
            return grm_errorf(GRM_EINVAL, "%s: lines have %d to %d fields and not all of the "
                              "fields after the first are numbers, so no schema can be "
                              "inferred; give --columns", path, nmin, nmax);
        }
        w += (size_t)snprintf(out, cap, "%s:%s,%s:%s", names[0], type_names[kind[0]],
                              header && strcmp(names[1], "c1") != 0 ? names[1] : "items",
                              list_names[list_kind]);
    }
    if (w >= cap) return grm_errorf(GRM_EINVAL, "%s: inferred schema is too long", path);
    return GRM_OK;
}

/* ---- convert ---- */

typedef struct convert_opts {
    const char *in, *out, *columns, *format;
    int header, quiet;
    int64_t rows_per_group, level;
} convert_opts;

static grm_status convert_run(const convert_opts *o)
{
    static const char *const formats[] = { "tsv", "csv", "ssv", "movielens" };
    char inferred[4096], kv_path[4200], kv_fmt[64], kv_cols[4200], kv_rows[64];
    grm__registry *reg = NULL;
    grm__pconfig pc = { 0 };
    grm__grmcol_writer *w = NULL;
    grm__grmcol_err e = { { 0 } };
    void *inst = NULL;
    const grm__plugin *pl;
    int fmt = -1;
    grm_status st;

    for (int i = 0; i < 4; i++)
        if (strcmp(o->format, formats[i]) == 0) fmt = i;
    if (fmt < 0) {
        return grm_errorf(GRM_EINVAL, "convert: --format '%s' is not one of tsv, csv, ssv, "
                          "movielens", o->format);
    }
    const char *columns = o->columns;
    if (columns == NULL) {
        if ((st = sniff_columns(o->in, fmt, o->header, inferred, sizeof inferred)) != GRM_OK)
            return st;
        columns = inferred;
        if (!o->quiet) fprintf(stderr, "grmhost: %s: inferred columns %s\n", o->in, columns);
    }
    snprintf(kv_path, sizeof kv_path, "path=%s", o->in);
    snprintf(kv_fmt, sizeof kv_fmt, "format=%s", o->format);
    snprintf(kv_cols, sizeof kv_cols, "columns=%s", columns);
    snprintf(kv_rows, sizeof kv_rows, "chunk_rows=%lld", (long long)o->rows_per_group);
    const char *const kvs[] = { kv_path, kv_fmt, kv_cols, kv_rows,
                                o->header ? "header=true" : "header=false" };

    // The reader-text plugin, loaded and configured as a pipeline's [reader] would be.
    if ((st = grm__registry_create(&reg)) != GRM_OK) return st;
    if ((st = grm__registry_load_default(reg)) != GRM_OK) goto out;
    if ((st = grm__registry_get(reg, "reader-text", GRM_KIND_READER, &pl)) != GRM_OK) goto out;
    if ((st = grm__params_fill_kv(pl->info, kvs, 5, &pc)) != GRM_OK) {
        grm_error_prefix("convert: reader-text: ");
        goto out;
    }
    const grm_reader_ops *const ops = pl->info->ops;
    if ((st = ops->open(pc.data, 0, 1, &inst)) != GRM_OK) goto out;
    const grm_schema *schema;
    if ((st = ops->schema(inst, &schema)) != GRM_OK) goto out;
    if ((st = grm__grmcol_writer_open(o->out, schema->fields, schema->nfields,
                                      (int32_t)o->level, &w, &e)) != GRM_OK) {
        st = grm_errorf(st, "%s", e.msg);
        goto out;
    }
    int64_t rows = 0, groups = 0;
    for (;;) {
        const grm_chunk *chunk;
        if ((st = ops->next(inst, &chunk)) != GRM_OK) goto out;
        if (chunk == NULL) break;
        if (chunk->rows == 0) continue;
        if ((st = grm__grmcol_writer_append(w, chunk->cols, chunk->rows, &e)) != GRM_OK) {
            st = grm_errorf(st, "%s", e.msg);
            goto out;
        }
        rows += chunk->rows;
        groups++;
    }
    grm_reader_stats rs = { 0 };
    if (GRM_HAS_OP(grm_reader_ops, ops, stats)) ops->stats(inst, &rs);
    st = grm__grmcol_writer_close(w, &e);
    w = NULL;
    if (st != GRM_OK) {
        st = grm_errorf(st, "%s", e.msg);
        goto out;
    }
    if (!o->quiet) {
        printf("%s: %lld rows, %lld row groups, %d columns (%s) from %s (%lld bytes read, "
               "%lld bad rows)\n", o->out, (long long)rows, (long long)groups,
               schema->nfields, columns, o->in, (long long)rs.bytes, (long long)rs.bad_rows);
    }
out:
    grm__grmcol_writer_abort(w);
    if (inst != NULL) ((const grm_reader_ops *)pl->info->ops)->close(inst);
    grm__pconfig_fini(&pc);
    grm__registry_destroy(reg);
    return st;
}

int grm__convert_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "columns", required_argument, NULL, OPT_COLUMNS },
        { "format", required_argument, NULL, OPT_FORMAT },
        { "header", no_argument, NULL, OPT_HEADER },
        { "rows-per-group", required_argument, NULL, OPT_RPG },
        { "level", required_argument, NULL, OPT_LEVEL },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    convert_opts o = { .format = "tsv", .rows_per_group = 65536, .level = 3 };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_COLUMNS: o.columns = optarg; break;
        case OPT_FORMAT: o.format = optarg; break;
        case OPT_HEADER: o.header = 1; break;
        case OPT_RPG:
            if (!grm__cli_parse_count(optarg, 1, 16777216, &o.rows_per_group))
                return grm__cli_usage_error(usage_convert,
                                            "--rows-per-group: '%s' is not in 1..16777216", optarg);
            break;
        case OPT_LEVEL:
            if (!grm__cli_parse_count(optarg, 1, 19, &o.level))
                return grm__cli_usage_error(usage_convert, "--level: '%s' is not in 1..19", optarg);
            break;
        case 'q': o.quiet = 1; break;
        case 'h': fputs(usage_convert, stdout); return 0;
        default: return grm__cli_bad_option(usage_convert);
        }
    }
    if (argc - optind != 2)
        return grm__cli_usage_error(usage_convert, "expected an input file and an output file");
    o.in = argv[optind];
    o.out = argv[optind + 1];
    struct stat si, so;   /* writing the output would destroy the input it reads */
    if (stat(o.in, &si) == 0 && stat(o.out, &so) == 0 && si.st_dev == so.st_dev
        && si.st_ino == so.st_ino)
        return grm__cli_usage_error(usage_convert, "%s: the output is the input file; name "
                                    "another output, e.g. %s.grmcol", o.out, o.in);
    const grm_status st = convert_run(&o);
    return st == GRM_OK ? 0 : grm__cli_fail(st);
}

/* ---- inspect ---- */

static grm_status inspect_run(const char *path, int groups)
{
    grm__grmcol_meta m;
    grm__grmcol_err e = { { 0 } };
    int fd;
    grm_status st = grm__grmcol_open(path, &fd, &m, &e);
    if (st != GRM_OK) return grm_errorf(st, "%s", e.msg);
    uint64_t *const csum = calloc((size_t)m.ncols * 2 + 1, sizeof *csum);
    uint64_t *const usum = csum + m.ncols;
    void *stored = NULL, *payload = NULL;
    size_t stored_cap = 0, payload_cap = 0;
    if (csum == NULL) {
        st = grm_errorf(GRM_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    // Verify every chunk (checksum, zstd, offsets) while adding up the sizes.
    for (int64_t g = 0; g < m.ngroups; g++) {
        for (int32_t i = 0; i < m.ncols; i++) {
            const grm__grmcol_chunk *const k = &m.chunks[g * m.ncols + i];
            if (k->csize > stored_cap) {
                free(stored);
                stored_cap = (size_t)k->csize;
                stored = malloc(stored_cap);
            }
            if (k->usize + 8 > payload_cap) {
                free(payload);
                payload_cap = (size_t)k->usize + 8;
                payload = malloc(payload_cap);
            }
            if (stored == NULL || payload == NULL) {
                st = grm_errorf(GRM_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            size_t done = 0;
            while (done < k->csize) {
                const ssize_t r = pread(fd, (char *)stored + done, (size_t)k->csize - done,
                                        (off_t)(k->offset + done));
                if (r <= 0) {
                    st = grm_errorf(GRM_EIO, "%s: row group %lld, column '%s': read failed: "
                                    "%s", path, (long long)g, m.fields[i].name,
                                    r < 0 ? strerror(errno) : "unexpected end of file");
                    goto out;
                }
                done += (size_t)r;
            }
            st = grm__grmcol_decode(&m, path, g, i, stored, payload, NULL, &e);
            if (st != GRM_OK) {
                st = grm_errorf(st, "%s", e.msg);
                goto out;
            }
            csum[i] += k->csize;
            usum[i] += k->usize;
        }
    }
    printf("%s: grmcol %u.%u, %lld rows, %lld row groups, %d columns, %llu bytes\n", path,
           m.major, m.minor, (long long)m.nrows, (long long)m.ngroups, m.ncols,
           (unsigned long long)m.file_size);
    printf("%-24s %-10s %14s %14s %7s\n", "column", "type", "compressed", "uncompressed",
           "ratio");
    uint64_t ct = 0, ut = 0;
    for (int32_t i = 0; i < m.ncols; i++) {
        char shown[256];   /* a column name read from the file: ESC must not reach the tty */
        printf("%-24s %-10s %14llu %14llu %7.2f\n",
               grm__printable(shown, sizeof shown, m.fields[i].name),
               grm__grmcol_type_name(m.fields[i].type), (unsigned long long)csum[i],
               (unsigned long long)usum[i], csum[i] ? (double)usum[i] / (double)csum[i] : 0.0);
        ct += csum[i];
        ut += usum[i];
    }
    printf("%-24s %-10s %14llu %14llu %7.2f\n", "total", "", (unsigned long long)ct,
           (unsigned long long)ut, ct ? (double)ut / (double)ct : 0.0);
    if (groups) {
        printf("\n%-10s %12s %14s %14s\n", "row group", "rows", "compressed", "uncompressed");
        for (int64_t g = 0; g < m.ngroups; g++) {
            uint64_t cg = 0, ug = 0;
            for (int32_t i = 0; i < m.ncols; i++) {
                cg += m.chunks[g * m.ncols + i].csize;
                ug += m.chunks[g * m.ncols + i].usize;
            }
            printf("%-10lld %12lld %14llu %14llu\n", (long long)g, (long long)m.group_rows[g],
                   (unsigned long long)cg, (unsigned long long)ug);
        }
    }
out:
    free(stored);
    free(payload);
    free(csum);
    close(fd);
    grm__grmcol_meta_fini(&m);
    return st;
}

int grm__inspect_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "groups", no_argument, NULL, OPT_GROUPS },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int groups = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_GROUPS: groups = 1; break;
        case 'h': fputs(usage_inspect, stdout); return 0;
        default: return grm__cli_bad_option(usage_inspect);
        }
    }
    if (argc - optind != 1)
        return grm__cli_usage_error(usage_inspect, "expected exactly one FILE.grmcol or "
                                    "checkpoint");
    // A name ending in a checkpoint format's extension is a checkpoint; the rest grmcol.
    if (has_suffix(argv[optind], ".grm") || has_suffix(argv[optind], ".safetensors"))
        return grm__inspect_ckpt(argv[optind]);
    const grm_status st = inspect_run(argv[optind], groups);
    return st == GRM_OK ? 0 : grm__cli_fail(st);
}

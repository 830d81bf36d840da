/*
 * tessera-profile.c: the per-GPU profiling tool.
 *
 *   tessera-profile sweep  --corpus DIR --db FILE [--device N] [--budget S] [--variants GLOB]
 *   tessera-profile build  --db FILE [--gpu NAME] [--split NAME]
 *   tessera-profile report --db FILE --out DIR [--gpu NAME] [--split NAME]
 *   tessera-profile export --db FILE [--gpu NAME] [--out FILE]
 *   tessera-profile init   --db FILE [--sql FILE]
 *
 * Exit status: 0 success, 1 a quality or sweep step failed, 2 usage or
 * input error; errors are one line "tessera-profile CMD: ...".
 */
#include <errno.h>
#include <getopt.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "files.h"
#include "profile.h"
#include "sweep.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

static void errorf(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void errorf(const char *cmd, const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "tessera-profile %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static int status_exit(tsr_status s)
{
  return s == TSR_ERR_INVALID || s == TSR_ERR_IO || s == TSR_ERR_FORMAT || s == TSR_ERR_DB
             ? EXIT_USAGE
             : EXIT_FAIL;
}

/* ---- options ----------------------------------------------------------- */

enum { O_DB, O_GPU, O_SPLIT, O_OUT, O_SQL, O_COUNT };

/* Parses the options of build, report, export and init into v[] (NULL when
 * absent).  `allowed` lists the O_* a command takes, as a bit set.  Returns
 * 0, or the exit status to leave with (help printed, or a usage error). */
static int parse_opts(const char *cmd, int argc, char **argv, unsigned allowed, const char **v)
{
  static const struct option lo[] = {{"db", 1, 0, O_DB},     {"gpu", 1, 0, O_GPU},
                                     {"split", 1, 0, O_SPLIT}, {"out", 1, 0, O_OUT},
                                     {"sql", 1, 0, O_SQL},   {"help", 0, 0, 'h'},
                                     {0, 0, 0, 0}};
  int c, i;
  for (i = 0; i < O_COUNT; i++)
    v[i] = NULL;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    if (c == 'h') {
      tsrp_help(stdout, cmd);
      return EXIT_OK;
    }
    if (c < 0 || c >= O_COUNT)
      return EXIT_USAGE; /* getopt has said what was wrong */
    if (!(allowed & (1u << c))) {
      errorf(cmd, "option --%s does not apply to %s", lo[c].name, cmd);
      return EXIT_USAGE;
    }
    v[c] = optarg;
  }
  if (optind != argc) {
    errorf(cmd, "unexpected argument '%s'", argv[optind]);
    return EXIT_USAGE;
  }
  if (!v[O_DB]) {
    errorf(cmd, "missing --db FILE");
    return EXIT_USAGE;
  }
  return -1;
}

/* ---- build ------------------------------------------------------------- */

static int cmd_build(int argc, char **argv)
{
  const char *v[O_COUNT], *dbp;
  tsrp_build_opts o = {NULL, NULL};
  tsrp_build_stats st;
  tsr_error err = {0};
  tsr_db *db;
  int rc = parse_opts("build", argc, argv, 1u << O_DB | 1u << O_GPU | 1u << O_SPLIT, v);
  if (rc >= 0)
    return rc;
  dbp = v[O_DB];
  o.gpu = v[O_GPU];
  o.split = v[O_SPLIT];
  if (tsr_db_open(dbp, 0, &db, &err) != TSR_OK) {
    errorf("build", "%s", err.text);
    return EXIT_USAGE;
  }
  if (tsrp_build_run(db, &o, &st, &err) != TSR_OK) {
    errorf("build", "%s", err.text);
    tsr_db_close(db);
    return status_exit(err.status);
  }
  tsr_db_close(db);
  printf("derived %lld lookup rows for %d GPU(s) from %lld masks, %lld timings\n",
         (long long)st.rows, st.gpus, (long long)st.masks, (long long)st.measurements);
  return EXIT_OK;
}

/* ---- report ------------------------------------------------------------ */

static int cmd_report(int argc, char **argv)
{
  const char *v[O_COUNT], *dbp, *out, *gpu;
  tsr_error err = {0};
  tsr_db *db;
  int rc = parse_opts("report", argc, argv,
                      1u << O_DB | 1u << O_GPU | 1u << O_SPLIT | 1u << O_OUT, v);
  if (rc >= 0)
    return rc;
  dbp = v[O_DB];
  out = v[O_OUT];
  gpu = v[O_GPU];
  if (!out) {
    errorf("report", "missing --out DIR");
    return EXIT_USAGE;
  }
  if (tsr_db_open(dbp, TSR_DB_READONLY, &db, &err) != TSR_OK) {
    errorf("report", "%s", err.text);
    return EXIT_USAGE;
  }
  if (tsrp_report_write(db, gpu, v[O_SPLIT], out, stdout, &err) != TSR_OK) {
    errorf("report", "%s", err.text);
    tsr_db_close(db);
    return status_exit(err.status);
  }
  tsr_db_close(db);
  printf("wrote %s/selection.csv, %s/summary.csv, %s/regime.png, %s/speedup.png\n", out, out,
         out, out);
  return EXIT_OK;
}

/* ---- export ------------------------------------------------------------ */

static int cmd_export(int argc, char **argv)
{
  const char *v[O_COUNT], *dbp, *out, *gpu;
  tsr_error err = {0};
  tsr_db *db;
  tsr_out *t = NULL;
  FILE *f = stdout;
  int64_t c2 = 0;
  int ok, rc = parse_opts("export", argc, argv, 1u << O_DB | 1u << O_GPU | 1u << O_OUT, v);
  if (rc >= 0)
    return rc;
  dbp = v[O_DB];
  out = v[O_OUT];
  gpu = v[O_GPU];
  if (tsr_db_open(dbp, TSR_DB_READONLY, &db, &err) != TSR_OK) {
    errorf("export", "%s", err.text);
    return EXIT_USAGE;
  }
  if (out && (tsri_out_begin(&t, &err) != TSR_OK || tsri_out_file(t, out, 0, &f, &err) != TSR_OK)) {
    errorf("export", "%s", err.text);
    tsri_out_abort(t);
    tsr_db_close(db);
    return EXIT_USAGE;
  }
  ok = tsrp_report_export(db, gpu, f, &c2, &err) == TSR_OK;
  tsr_db_close(db);
  if (ok && out)
    ok = tsri_out_commit(t, &err) == TSR_OK;
  else
    tsri_out_abort(t);
  if (!ok)
    errorf("export", "%s", err.text);
  if (ok)
    fprintf(stderr, "exported %lld lookup rows\n", (long long)c2);
  return ok ? EXIT_OK : EXIT_USAGE;
}

/* ---- init -------------------------------------------------------------- */

static char *read_file(const char *path, tsr_error *err)
{
  FILE *f = tsri_in_open(path, NULL, err);
  char *buf = NULL;
  long n;
  if (!f)
    return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc((size_t)n + 1)) != NULL) {
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    } else
      buf[n] = '\0';
  }
  fclose(f);
  if (!buf)
    tsr_error_set(err, TSR_ERR_IO, "cannot read '%s'", path);
  return buf;
}

static int cmd_init(int argc, char **argv)
{
  const char *v[O_COUNT], *dbp, *sqlp, *tmp;
  char *text = NULL;
  tsr_error err = {0};
  tsr_out *t = NULL;
  tsr_db *db;
  tsr_status s;
  int rc = parse_opts("init", argc, argv, 1u << O_DB | 1u << O_SQL, v);
  if (rc >= 0)
    return rc;
  dbp = v[O_DB];
  sqlp = v[O_SQL];
  /* Never over an existing file; built in a temporary beside the target
   * (through links) and renamed, so a failure leaves no file. */
  if ((s = tsri_out_begin(&t, &err)) == TSR_OK)
    s = tsri_out_path(t, dbp, TSR_OUT_NEW, &tmp, &err);
  if (s == TSR_OK && sqlp && !(text = read_file(sqlp, &err)))
    s = err.status;
  if (s == TSR_OK && (s = tsr_db_open(tmp, TSR_DB_CREATE, &db, &err)) == TSR_OK) {
    s = tsri_db_exec(db, text ? text : tsri_db_default_sql(), &err);
    if (s == TSR_OK)
      s = tsri_db_exec(db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE", &err);
    tsr_db_close(db);
  }
  free(text);
  if (s == TSR_OK) {
    s = tsri_out_commit(t, &err);
    t = NULL;
  }
  tsri_out_abort(t);
  if (s != TSR_OK) {
    errorf("init", "%s", err.text);
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    tsrp_help(stderr, NULL);
    return EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    tsrp_help(stdout, NULL);
    return EXIT_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("tessera-profile %s\n", PACKAGE_VERSION);
    return EXIT_OK;
  }
  if (!strcmp(argv[1], "sweep"))
    return tsrp_sweep_main(argc - 1, argv + 1);
  if (!strcmp(argv[1], "build"))
    return cmd_build(argc - 1, argv + 1);
  if (!strcmp(argv[1], "report"))
    return cmd_report(argc - 1, argv + 1);
  if (!strcmp(argv[1], "export"))
    return cmd_export(argc - 1, argv + 1);
  if (!strcmp(argv[1], "init"))
    return cmd_init(argc - 1, argv + 1);
  fprintf(stderr, "tessera-profile: unknown command '%s'\n", argv[1]);
  tsrp_help(stderr, NULL);
  return EXIT_USAGE;
}

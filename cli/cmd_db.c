/*
 * cmd_db.c: `tessera db`, inspecting lookup databases.
 *
 *   tessera db tables [--db FILE]                    one line per GPU table
 *   tessera db show   [--db FILE] [--gpu NAME] [--level N]   the rows
 *
 * Without --db it reads the embedded default that libtessera carries.
 * Read-only; costs one query.
 */
#include <getopt.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools.h"

static const cli_sub db_subs[] = {
    {"tables", "[--db FILE]", "one line per GPU table: rows, profiled masks, when it was built"},
    {"show", "[--db FILE] [--gpu NAME] [--level N]",
     "the lookup rows: region, plan, masks, regret and speed-up"},
    {NULL, NULL, NULL},
};
enum { SUB_TABLES = 1u << 0, SUB_SHOW = 1u << 1 };
static const cli_sub_opt db_opts[] = {
    {"--db", "FILE", "the database to read (default: the embedded one)", SUB_TABLES | SUB_SHOW},
    {"--gpu", "NAME", "only the rows of this GPU", SUB_SHOW},
    {"--level", "N", "only the rows of this level, 0 to 2", SUB_SHOW},
    {NULL, NULL, NULL, 0},
};

/* sub: "tables", "show", or NULL for both. */
static void usage(FILE *f, const char *sub)
{
  cli_sub_help(f, "db", db_subs, db_opts, sub);
}

/* Column i as text: "-" for NULL, which printf would show as "(null)". */
static const char *txt(sqlite3_stmt *st, int i)
{
  const char *t = (const char *)sqlite3_column_text(st, i);
  return t ? t : "-";
}

/* Integer column i in full (sqlite3_column_int would truncate to 32 bits). */
static long long num(sqlite3_stmt *st, int i) { return (long long)sqlite3_column_int64(st, i); }

static int tables(tsr_db *db)
{
  sqlite3_stmt *st;
  int n = 0, rc;
  if (sqlite3_prepare_v2(tsri_db_sqlite(db),
                         "SELECT l.gpu_name, l.multiprocessors, l.feature_version, count(*), "
                         "(SELECT built FROM lookup_meta m WHERE m.gpu_name = l.gpu_name AND "
                         "m.multiprocessors = l.multiprocessors AND m.feature_version = "
                         "l.feature_version), (SELECT masks FROM lookup_meta m WHERE m.gpu_name = "
                         "l.gpu_name AND m.multiprocessors = l.multiprocessors AND "
                         "m.feature_version = l.feature_version) FROM lookup l GROUP BY "
                         "l.gpu_name, l.multiprocessors, l.feature_version ORDER BY l.gpu_name",
                         -1, &st, NULL) != SQLITE_OK) {
    cli_errorf("db", "cannot read '%s': %s", tsr_db_path(db), tsri_db_errmsg(db));
    return CLI_USAGE;
  }
  printf("%-28s %4s %8s %6s %7s  %s\n", "gpu", "sms", "features", "rows", "masks", "built");
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    printf("%-28s %4lld %8lld %6lld %7lld  %s%s\n", txt(st, 0), num(st, 1), num(st, 2),
           num(st, 3), num(st, 5), txt(st, 4),
           num(st, 2) == TSR_FEATURES_VERSION ? "" : "  (other feature version: not used)");
    n++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    cli_errorf("db", "cannot read '%s': %s", tsr_db_path(db), tsri_db_errmsg(db));
    return CLI_USAGE;
  }
  if (n == 0)
    printf("(no lookup tables in %s: every selection uses the base plan)\n",
           strcmp(tsr_db_path(db), ":memory:") ? tsr_db_path(db) : "the embedded default");
  return CLI_OK;
}

static int show(tsr_db *db, const char *gpu, int level)
{
  sqlite3_stmt *st;
  int n = 0, rc;
  if (sqlite3_prepare_v2(tsri_db_sqlite(db),
                         "SELECT id, gpu_name, level, dtype, head_dim, bq, bk, seq_bin, "
                         "density_bin, spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, "
                         "variant, masks, regret, speedup FROM lookup WHERE (?1 IS NULL OR "
                         "gpu_name = ?1) AND (?2 < 0 OR level = ?2) ORDER BY gpu_name, level, "
                         "dtype, head_dim, bq, bk, seq_bin, density_bin, spread_bin, fill_bin",
                         -1, &st, NULL) != SQLITE_OK) {
    cli_errorf("db", "cannot read '%s': %s", tsr_db_path(db), tsri_db_errmsg(db));
    return CLI_USAGE;
  }
  if (gpu)
    sqlite3_bind_text(st, 1, gpu, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 2, level);
  printf("%5s %-16s %3s %-5s %4s %8s %4s %4s %4s %4s  %-26s %5s %7s %7s  %s\n", "row", "gpu", "lvl",
         "dtype", "dim", "blocks", "seq", "dens", "sprd", "fill", "plan", "masks", "regret",
         "speedup", "variant");
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    char blocks[48], plan[96];
    snprintf(blocks, sizeof blocks, "%lldx%lld", num(st, 5), num(st, 6));
    snprintf(plan, sizeof plan, "%.20s %lldx%lld %.20s", txt(st, 11), num(st, 12), num(st, 13),
             txt(st, 14));
    printf("%5lld %-16.16s %3lld %-5s %4lld %8s %4lld %4lld %4lld %4lld  %-26s %5lld %7.4f "
           "%7.3f  %s\n",
           num(st, 0), txt(st, 1), num(st, 2), txt(st, 3), num(st, 4), blocks, num(st, 7),
           num(st, 8), num(st, 9), num(st, 10), plan, num(st, 16), sqlite3_column_double(st, 17),
           sqlite3_column_double(st, 18), txt(st, 15));
    n++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    cli_errorf("db", "cannot read '%s': %s", tsr_db_path(db), tsri_db_errmsg(db));
    return CLI_USAGE;
  }
  printf("%d row(s)%s\n", n, n ? "" : ": selection falls back to the base plan");
  return CLI_OK;
}

int cmd_db(int argc, char **argv)
{
  static const struct option lo[] = {{"db", 1, 0, 'd'}, {"gpu", 1, 0, 'g'}, {"level", 1, 0, 'l'},
                                     {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  const char *path = NULL, *gpu = NULL, *sub;
  int64_t level = -1;
  tsr_error err = {0};
  tsr_db *db;
  int c, rc;
  if (argc < 2) {
    usage(stderr, NULL);
    return CLI_USAGE;
  }
  sub = argv[1];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
    usage(stdout, NULL);
    return CLI_OK;
  }
  if (strcmp(sub, "tables") && strcmp(sub, "show")) {
    cli_errorf("db", "unknown subcommand '%s' (tables, show)", sub);
    return CLI_USAGE;
  }
  optind = 1;
  while ((c = getopt_long(argc - 1, argv + 1, "", lo, NULL)) != -1) {
    if (c == 'd')
      path = optarg;
    else if (c == 'g')
      gpu = optarg;
    else if (c == 'l') {
      if (cli_parse_i64(optarg, &level, 1) || level >= TSR_SELECT_LEVELS) {
        cli_errorf("db", "invalid level '%s': expected 0..%d", optarg, TSR_SELECT_LEVELS - 1);
        return CLI_USAGE;
      }
    } else if (c == 'h') {
      usage(stdout, sub);
      return CLI_OK;
    } else
      return CLI_USAGE;
  }
  if (optind != argc - 1) {
    cli_errorf("db", "unexpected argument '%s'", argv[optind + 1]);
    return CLI_USAGE;
  }
  if (!strcmp(sub, "tables") && (gpu || level >= 0)) {
    cli_errorf("db", "--gpu and --level apply to 'show'");
    return CLI_USAGE;
  }
  if (tsr_db_open(path, TSR_DB_READONLY, &db, &err) != TSR_OK) {
    cli_errorf("db", "%s", err.text);
    return CLI_USAGE;
  }
  rc = !strcmp(sub, "tables") ? tables(db) : show(db, gpu, (int)level);
  tsr_db_close(db);
  return rc;
}

/*
 * db.c: the profiling and lookup database (db/schema.sql) in SQLite: the
 * handle, the schema check and migration, the embedded default.
 *
 * Used rarely and in bulk: the runtime opens it once per context to load a
 * lookup table (runtime/select.c).  The writers of sweeps and timings are
 * the profiler's (profiler/db_write.c, through runtime/db_impl.h).
 *
 * Crash safety and concurrency come from SQLite: writable handles run in WAL
 * mode with a busy timeout, so two writers (two sweeps) serialise instead of
 * failing or corrupting the file.
 *
 * The schema is applied in "-- @version N" sections of db/schema.sql, which
 * the build embeds (with the shipped tables, db/h200.sql) as C strings in a
 * generated file; PRAGMA user_version records how far a file has come.
 *
 * A file is input like any other: before anything reads it, every table of
 * the schema at its version must be a table (not a view, which could run
 * any query, a recursive one forever) with the schema's columns, types and
 * NOT NULL constraints (compared with the embedded schema applied to an
 * in-memory database), and every statement on a handle, the tools' own
 * included, is stopped past a budget of virtual-machine steps
 * (TSR_DB_MAX_STEPS, tsri_db_set_budget), counted from its first step.
 */
#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db_impl.h"
#include "files.h"
#include "tessera.h"

/* Generated at build time from db/schema.sql and db/h200.sql (db/local.mk). */
extern const char tsri_db_embedded_schema[];
extern const char tsri_db_embedded_tables[];

/* Milliseconds a writer waits for another's lock before giving up. */
#define DB_BUSY_MS 30000

/* Steps between two calls of the progress handler (the budget's grain). */
#define DB_PROGRESS_STEPS 1000

const char *tsri_db_default_sql(void) { return tsri_db_embedded_tables; }

const char *tsri_db_errmsg(tsr_db *db)
{
  if (!db || !db->h)
    return "out of memory";
  if (db->stopped) {
    snprintf(db->msg, sizeof db->msg,
             "a query ran past %lld steps, the most one statement may take (a recursive "
             "view or trigger, or far more rows than a lookup database holds)",
             (long long)db->budget);
    return db->msg;
  }
  return sqlite3_errmsg(db->h);
}

void tsri_db_set_budget(tsr_db *db, int64_t steps)
{
  if (db)
    db->budget = steps > 0 ? steps : TSR_DB_MAX_STEPS;
}

/* The budget: every DB_PROGRESS_STEPS steps of a statement; nonzero stops it. */
static int on_progress(void *ud)
{
  tsr_db *db = ud;
  db->steps += DB_PROGRESS_STEPS;
  if (db->steps > db->budget)
    db->stopped = 1;
  return db->stopped;
}

/* A statement's first step (not a trigger's, whose text is an SQL comment)
 * starts its count. */
static int on_trace(unsigned type, void *ud, void *stmt, void *x)
{
  tsr_db *db = ud;
  const char *sql = x;
  (void)type, (void)stmt;
  if (!sql || strncmp(sql, "--", 2)) {
    db->steps = 0;
    db->stopped = 0;
  }
  return 0;
}

tsr_status tsri_db_fail(tsr_db *db, tsr_error *err, const char *what)
{
  return tsr_error_set(err, TSR_ERR_DB, "cannot %s lookup database '%s': %s", what, db->path,
                       tsri_db_errmsg(db));
}

tsr_status tsri_db_exec(tsr_db *db, const char *sql, tsr_error *err)
{
  char *msg = NULL;
  tsr_status st = TSR_OK;
  if (sqlite3_exec(db->h, sql, NULL, NULL, &msg) != SQLITE_OK) {
    st = tsr_error_set(err, TSR_ERR_DB, "cannot update lookup database '%s': %s", db->path,
                       db->stopped || !msg ? tsri_db_errmsg(db) : msg);
  }
  sqlite3_free(msg);
  return st;
}

tsr_status tsri_db_begin(tsr_db *db, tsr_error *err)
{
  if (sqlite3_exec(db->h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
    return tsri_db_fail(db, err, "lock");
  return TSR_OK;
}

tsr_status tsri_db_commit(tsr_db *db, tsr_error *err)
{
  if (sqlite3_exec(db->h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
    tsr_status st = tsri_db_fail(db, err, "commit to");
    tsri_db_rollback(db);
    return st;
  }
  return TSR_OK;
}

void tsri_db_rollback(tsr_db *db)
{
  if (db && db->h && !sqlite3_get_autocommit(db->h))
    sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
}

int tsr_db_version(const tsr_db *db) { return db ? db->version : 0; }
const char *tsr_db_path(const tsr_db *db) { return db ? db->path : ""; }
struct sqlite3 *tsri_db_sqlite(tsr_db *db) { return db ? db->h : NULL; }

/* Reads a single integer (PRAGMA or SELECT); -1 on error. */
static int64_t query_int(sqlite3 *h, const char *sql)
{
  sqlite3_stmt *st = NULL;
  int64_t v = -1;
  if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* Finds section `version` of the schema text: [*begin, *end).  0 if absent. */
static int schema_section(int version, const char **begin, const char **end)
{
  char tag[32];
  const char *p, *q;
  snprintf(tag, sizeof tag, "-- @version %d\n", version);
  p = strstr(tsri_db_embedded_schema, tag);
  if (!p)
    return 0;
  p += strlen(tag);
  q = strstr(p, "-- @version ");
  *begin = p;
  *end = q ? q : p + strlen(p);
  return 1;
}

/* Section `version` of the schema as a malloc'ed string: NULL when out of
 * memory, or when there is no such section (then *absent = 1). */
static char *section_text(int version, int *absent)
{
  const char *b, *e;
  char *text;
  *absent = !schema_section(version, &b, &e);
  if (*absent || !(text = malloc((size_t)(e - b) + 1)))
    return NULL;
  memcpy(text, b, (size_t)(e - b));
  text[e - b] = '\0';
  return text;
}

/* Applies schema sections 1..version to connection h (a fresh in-memory
 * database for check_schema); 0 on success. */
static int apply_schema(sqlite3 *h, int version)
{
  int n, absent, rc = SQLITE_OK;
  for (n = 1; n <= version && rc == SQLITE_OK; n++) {
    char *text = section_text(n, &absent);
    rc = text ? sqlite3_exec(h, text, NULL, NULL, NULL) : SQLITE_NOMEM;
    free(text);
  }
  return rc == SQLITE_OK ? 0 : -1;
}

/* Checks that every table of the schema at `version` is a table of db's
 * file, with each of the schema's columns, of its declared type and NOT NULL
 * constraint (extra columns are allowed).  Reads only sqlite_master and the
 * tables' declarations, never their rows. */
static tsr_status check_schema(tsr_db *db, int version, tsr_error *err)
{
  sqlite3 *ref = NULL;
  sqlite3_stmt *tabs = NULL, *kind = NULL, *want = NULL, *have = NULL;
  tsr_status st = TSR_OK;
  int rc;
  if (sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
      apply_schema(ref, version) ||
      sqlite3_prepare_v2(ref, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
                         -1, &tabs, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(ref, "SELECT name, upper(type), \"notnull\" FROM pragma_table_info(?)",
                         -1, &want, NULL) != SQLITE_OK) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot check lookup database '%s': out of memory",
                       db->path);
    goto done;
  }
  if (sqlite3_prepare_v2(db->h, "SELECT type FROM sqlite_master WHERE name = ?", -1, &kind,
                         NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db->h,
                         "SELECT upper(type), \"notnull\" FROM pragma_table_info(?1) "
                         "WHERE name = ?2",
                         -1, &have, NULL) != SQLITE_OK) {
    st = tsri_db_fail(db, err, "read");
    goto done;
  }
  while (st == TSR_OK && (rc = sqlite3_step(tabs)) == SQLITE_ROW) {
    const char *table = (const char *)sqlite3_column_text(tabs, 0);
    const char *type;
    sqlite3_reset(kind);
    sqlite3_bind_text(kind, 1, table, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(kind);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      st = tsri_db_fail(db, err, "read");
      break;
    }
    type = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(kind, 0) : NULL;
    if (!type || strcmp(type, "table")) {
      st = tsr_error_set(err, TSR_ERR_DB,
                         "cannot use lookup database '%s': '%s' is %s%s, not a table of the "
                         "tessera schema (version %d)",
                         db->path, table, type ? "a " : "missing", type ? type : "", version);
      break;
    }
    sqlite3_reset(want);
    sqlite3_bind_text(want, 1, table, -1, SQLITE_TRANSIENT);
    while (st == TSR_OK && sqlite3_step(want) == SQLITE_ROW) {
      const char *col = (const char *)sqlite3_column_text(want, 0);
      const char *ctype = (const char *)sqlite3_column_text(want, 1);
      int notnull = sqlite3_column_int(want, 2);
      sqlite3_reset(have);
      sqlite3_bind_text(have, 1, table, -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(have, 2, col, -1, SQLITE_TRANSIENT);
      rc = sqlite3_step(have);
      if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        st = tsri_db_fail(db, err, "read");
      else if (rc == SQLITE_DONE)
        st = tsr_error_set(err, TSR_ERR_DB,
                           "cannot use lookup database '%s': table '%s' has no column '%s' "
                           "(tessera schema version %d)",
                           db->path, table, col, version);
      else if (strcmp((const char *)sqlite3_column_text(have, 0), ctype) ||
               sqlite3_column_int(have, 1) != notnull)
        st = tsr_error_set(err, TSR_ERR_DB,
                           "cannot use lookup database '%s': column '%s.%s' is '%s%s', "
                           "expected '%s%s' (tessera schema version %d)",
                           db->path, table, col, (const char *)sqlite3_column_text(have, 0),
                           sqlite3_column_int(have, 1) ? " NOT NULL" : "", ctype,
                           notnull ? " NOT NULL" : "", version);
    }
  }
done:
  sqlite3_finalize(tabs);
  sqlite3_finalize(want);
  sqlite3_finalize(kind);
  sqlite3_finalize(have);
  sqlite3_close(ref);
  return st;
}

/* Brings the schema from its current version up to `target` in one write
 * transaction, so two processes opening a fresh file never both apply it. */
static tsr_status migrate(tsr_db *db, int target, tsr_error *err)
{
  int64_t v;
  int n;
  tsr_status st;
  if ((st = tsri_db_begin(db, err)) != TSR_OK)
    return st;
  v = query_int(db->h, "PRAGMA user_version");
  if (v < 0) {
    st = tsri_db_fail(db, err, "read");
    goto fail;
  }
  if (v > TSR_DB_SCHEMA_VERSION) {
    st = tsr_error_set(err, TSR_ERR_DB,
                       "cannot use lookup database '%s': schema version %" PRId64
                       " is newer than this library's %d",
                       db->path, v, TSR_DB_SCHEMA_VERSION);
    goto fail;
  }
  if (v == 0 && query_int(db->h, "SELECT count(*) FROM sqlite_master") > 0) {
    st = tsr_error_set(err, TSR_ERR_DB,
                       "cannot use lookup database '%s': it holds tables but no tessera schema "
                       "version",
                       db->path);
    goto fail;
  }
  if (v > 0 && (st = check_schema(db, (int)v, err)) != TSR_OK)
    goto fail;
  for (n = (int)v + 1; n <= target; n++) {
    int absent;
    char *text = section_text(n, &absent);
    if (!text) {
      st = absent ? tsr_error_set(err, TSR_ERR_DB, "embedded schema lacks version %d", n)
                  : tsr_error_set(err, TSR_ERR_NOMEM, "out of memory migrating '%s'", db->path);
      goto fail;
    }
    st = tsri_db_exec(db, text, err);
    free(text);
    if (st != TSR_OK)
      goto fail;
  }
  if (target > v) {
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", target);
    if ((st = tsri_db_exec(db, sql, err)) != TSR_OK)
      goto fail;
  }
  if ((st = tsri_db_commit(db, err)) != TSR_OK)
    return st;
  db->version = target > v ? target : (int)v;
  return TSR_OK;
fail:
  tsri_db_rollback(db);
  return st;
}

static tsr_status db_new(const char *path, tsr_db **out, tsr_error *err)
{
  tsr_db *db = calloc(1, sizeof *db);
  if (!db)
    return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory opening lookup database");
  snprintf(db->path, sizeof db->path, "%s", path ? path : ":memory:");
  db->budget = TSR_DB_MAX_STEPS;
  *out = db;
  return TSR_OK;
}

/* Opens the connection; a file that is not a database shows up here or at
 * the first read, and both name the path. */
static tsr_status db_connect(tsr_db *db, const char *path, int flags, tsr_error *err)
{
  int rc = sqlite3_open_v2(path, &db->h, flags, NULL);
  if (rc != SQLITE_OK)
    return tsri_db_fail(db, err, "open");
  sqlite3_extended_result_codes(db->h, 1);
  sqlite3_busy_timeout(db->h, DB_BUSY_MS);
  sqlite3_progress_handler(db->h, DB_PROGRESS_STEPS, on_progress, db);
  if (sqlite3_trace_v2(db->h, SQLITE_TRACE_STMT, on_trace, db) != SQLITE_OK)
    return tsri_db_fail(db, err, "open");
  return TSR_OK;
}

/* Switches a writable file to WAL; confirms the file is a database. */
static tsr_status db_setup_writable(tsr_db *db, tsr_error *err)
{
  sqlite3_stmt *st = NULL;
  int ok = 0;
  if (sqlite3_prepare_v2(db->h, "PRAGMA journal_mode=WAL", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char *mode = sqlite3_column_text(st, 0);
    ok = mode && !strcmp((const char *)mode, "wal");
  }
  sqlite3_finalize(st);
  if (!ok)
    return tsri_db_fail(db, err, "open");
  if (sqlite3_exec(db->h, "PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL", NULL, NULL,
                   NULL) != SQLITE_OK)
    return tsri_db_fail(db, err, "open");
  return TSR_OK;
}

static tsr_status open_default(tsr_db *db, tsr_error *err)
{
  tsr_status st;
  if ((st = db_connect(db, ":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, err)) != TSR_OK)
    return st;
  if ((st = migrate(db, TSR_DB_SCHEMA_VERSION, err)) != TSR_OK)
    return st;
  return tsri_db_exec(db, tsri_db_embedded_tables, err);
}

static tsr_status open_file(tsr_db *db, const char *path, int flags, tsr_error *err)
{
  struct stat sb;
  tsr_status st;
  int64_t v;
  /* Only a regular file (after links), checked before SQLite opens it: a
   * FIFO would block the open; absent is fine when it is to be created. */
  if (!(stat(path, &sb) != 0 && errno == ENOENT && (flags & TSR_DB_CREATE) &&
        !(flags & TSR_DB_READONLY)) &&
      (st = tsri_in_check(path, "cannot open lookup database", err)) != TSR_OK)
    return st;
  if (flags & TSR_DB_READONLY) {
    db->readonly = 1;
    if ((st = db_connect(db, path, SQLITE_OPEN_READONLY, err)) != TSR_OK)
      return st;
    v = query_int(db->h, "PRAGMA user_version");
    if (v < 0)
      return tsri_db_fail(db, err, "read");
    if (v == 0)
      return tsr_error_set(err, TSR_ERR_DB,
                           "cannot use lookup database '%s': not a tessera database (schema "
                           "version 0)",
                           path);
    if (v > TSR_DB_SCHEMA_VERSION)
      return tsr_error_set(err, TSR_ERR_DB,
                           "cannot use lookup database '%s': schema version %" PRId64
                           " is newer than this library's %d",
                           path, v, TSR_DB_SCHEMA_VERSION);
    if (v < TSR_DB_SCHEMA_VERSION)
      return tsr_error_set(err, TSR_ERR_DB,
                           "cannot use lookup database '%s': schema version %" PRId64
                           " is older than %d; open it once with tessera-profile to migrate",
                           path, v, TSR_DB_SCHEMA_VERSION);
    /* The tables' shape, without reading their rows: a truncated or
     * overwritten file, or one whose lookup is a view, fails here rather
     * than in the middle of a lookup. */
    if ((st = check_schema(db, (int)v, err)) != TSR_OK)
      return st;
    db->version = (int)v;
    return TSR_OK;
  }
  if ((st = db_connect(db, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, err)) != TSR_OK)
    return st;
  if ((st = db_setup_writable(db, err)) != TSR_OK)
    return st;
  return migrate(db, TSR_DB_SCHEMA_VERSION, err);
}

tsr_status tsr_db_open(const char *path, int flags, tsr_db **out, tsr_error *err)
{
  tsr_db *db = NULL;
  tsr_status st;
  if (!out)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_db_open: out is NULL");
  *out = NULL;
  if (path && !*path)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot open lookup database: empty path");
  if ((st = db_new(path, &db, err)) != TSR_OK)
    return st;
  st = path ? open_file(db, path, flags, err) : open_default(db, err);
  if (st != TSR_OK) {
    tsr_db_close(db);
    return st;
  }
  *out = db;
  return TSR_OK;
}

tsr_status tsri_db_create_at(const char *path, int version, tsr_error *err)
{
  tsr_db *db = NULL;
  tsr_status st;
  struct stat sb;
  if (!path || version < 1 || version > TSR_DB_SCHEMA_VERSION)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot create lookup database: version %d outside 1..%d", version,
                         TSR_DB_SCHEMA_VERSION);
  if (stat(path, &sb) == 0)
    return tsr_error_set(err, TSR_ERR_IO, "cannot create lookup database '%s': file exists",
                         path);
  if ((st = db_new(path, &db, err)) != TSR_OK)
    return st;
  st = db_connect(db, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, err);
  if (st == TSR_OK)
    st = db_setup_writable(db, err);
  if (st == TSR_OK)
    st = migrate(db, version, err);
  tsr_db_close(db);
  return st;
}

void tsr_db_close(tsr_db *db)
{
  if (!db)
    return;
  tsri_db_rollback(db);
  sqlite3_close(db->h);
  free(db);
}

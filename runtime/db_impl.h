/*
 * db_impl.h: the lookup database handle (runtime/db.c) as the tools and
 * runtime/select.c see it.  Not installed, and not exported from
 * libtessera.so (its functions are not in tessera.h): the tools link the
 * static library and reach these through profiler/tools.h.
 *
 * tessera.h keeps what the request path needs (tsr_db_open, tsr_db_close,
 * version and path, for tsr_select_load); here are the handle's structure,
 * for the profiler's writers (profiler/db_write.c), and the calls of tools
 * that run their own statements: the SQLite connection, execution under
 * the step budget, transactions, and creating a file at an older schema.
 */
#ifndef TSR_DB_IMPL_H
#define TSR_DB_IMPL_H

#include <stdint.h>

#include "tessera.h"

struct sqlite3;

struct tsr_db {
  struct sqlite3 *h;
  int version;
  int readonly;
  int64_t budget;  /* VM steps a statement may take */
  int64_t steps;   /* taken by the running statement (reset at its first step) */
  int stopped;     /* the running statement was stopped at the budget */
  char path[1024];
  char msg[200];   /* tsri_db_errmsg's text */
};

/* Records "cannot WHAT lookup database 'PATH': <tsri_db_errmsg>" as
 * TSR_ERR_DB; returns TSR_ERR_DB (or the error already held). */
tsr_status tsri_db_fail(tsr_db *db, tsr_error *err, const char *what);

/* Creates a new database file holding the schema only up to `version`
 * (1..TSR_DB_SCHEMA_VERSION): for migration tests and tools. */
tsr_status tsri_db_create_at(const char *path, int version, tsr_error *err);
/* The underlying connection, for tools that run their own queries. */
struct sqlite3 *tsri_db_sqlite(tsr_db *db);
/* The shipped tables (db/h200.sql) as embedded SQL text; the schema itself
 * is applied by tsr_db_open. */
const char *tsri_db_default_sql(void);

tsr_status tsri_db_exec(tsr_db *db, const char *sql, tsr_error *err);
/* Steps of SQLite's virtual machine any one statement on the handle may
 * take before it is stopped (the tools' own statements on tsri_db_sqlite
 * included); steps <= 0 restores TSR_DB_MAX_STEPS. */
void tsri_db_set_budget(tsr_db *db, int64_t steps);
/* The last error on the handle's connection as text, saying so when a
 * statement was stopped at the budget (sqlite3_errmsg says "interrupted"). */
const char *tsri_db_errmsg(tsr_db *db);
/* BEGIN IMMEDIATE (takes the write lock now, waiting up to the busy timeout). */
tsr_status tsri_db_begin(tsr_db *db, tsr_error *err);
tsr_status tsri_db_commit(tsr_db *db, tsr_error *err);
void tsri_db_rollback(tsr_db *db);

#endif /* TSR_DB_IMPL_H */

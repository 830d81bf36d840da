/*
 * check_db.c: the lookup database (runtime/db.c, and the profiler's writers,
 * profiler/db_write.c) on real SQLite files:
 * schema creation and migration, rejection of missing, corrupt, foreign and
 * newer files, idempotent inserts, measurement recording with all samples,
 * resume after a sweep killed inside a transaction, and two processes
 * writing one file at once.
 */
#include <check.h>
#include <math.h>
#include <inttypes.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#include "tessera.h"
#include "tools.h"

static char tmpdir[256];
static unsigned seed;

static void setup(void)
{
  tu_tmpdir(tmpdir, sizeof tmpdir);
}

static void teardown(void)
{
  tu_rmtree(tmpdir);
}

static void path_in(char *buf, size_t n, const char *name)
{
  snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* Counts rows of a query on a fresh read connection. */
static int64_t count(const char *path, const char *sql)
{
  sqlite3 *h;
  sqlite3_stmt *st;
  int64_t v = -1;
  ck_assert_int_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
  if (sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(h);
  return v;
}

static int64_t count_db(tsr_db *db, const char *sql)
{
  sqlite3_stmt *st;
  int64_t v = -1;
  ck_assert_int_eq(sqlite3_prepare_v2(tsri_db_sqlite(db), sql, -1, &st, NULL), SQLITE_OK);
  if (sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

/* Fixed ids a sweep would create: one GPU, one variant, masks, plans. */
typedef struct {
  int64_t gpu, variant, sweep, masks[8], plans[6];
} fixture_ids;

static void make_fixture(tsr_db *db, fixture_ids *ids)
{
  tsr_error err = {0};
  tsr_db_gpu g = {"NVIDIA Test GPU", "sm_90a", "580.1", 132, 150LL << 30, 60LL << 20, 1980000, 2619000};
  tsr_db_variant v = {"attn_sm90_128x128_d128_bf16", "{}", "h1", "gen 0.1", "13.0", "-arch=sm_90a"};
  int i;
  ck_assert_int_eq(tsr_db_put_gpu(db, &g, &ids->gpu, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_put_variant(db, &v, &ids->variant, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_start_sweep(db, ids->gpu, "corpus", "test", &ids->sweep, &err), TSR_OK);
  for (i = 0; i < 8; i++) {
    char name[32];
    tsr_db_mask m = {"corpus", name, "profile", "sta", "wan", "128x128", "bf16",
                     1, 12, 12, 32760, 32760, 128, 0x1234u + (uint64_t)i};
    snprintf(name, sizeof name, "m%02d.npy", i);
    ck_assert_int_eq(tsr_db_put_mask(db, &m, &ids->masks[i], &err), TSR_OK);
  }
  for (i = 0; i < 6; i++) {
    tsr_db_plan p = {i % 2 ? TSR_MAP_COMBINE : TSR_MAP_RETAIN, 64 << (i / 3), 128,
                     (tsr_tasks)(1 + i % 3), "attn_sm90_128x128_d128_bf16"};
    ck_assert_int_eq(tsr_db_put_plan(db, &p, &ids->plans[i], &err), TSR_OK);
  }
}

#define REPS 5

/* Deterministic samples of candidate (mask, plan): what a sweep would time. */
static void samples_for(int mask, int plan, double *s)
{
  int r;
  for (r = 0; r < REPS; r++)
    s[r] = 0.5 + 0.1 * mask + 0.01 * plan + 0.001 * ((r * 7 + mask) % REPS);
}

/* Records every candidate not yet recorded, in forward or reverse order,
 * the way a sweep (or a resumed one) walks them.  Returns rows inserted. */
static int sweep_all(tsr_db *db, const fixture_ids *ids, int reverse, int nmasks)
{
  tsr_error err = {0};
  int k, inserted_total = 0;
  for (k = 0; k < nmasks * 6; k++) {
    int c = reverse ? nmasks * 6 - 1 - k : k, mi = c / 6, pi = c % 6, found, ins;
    double s[REPS];
    tsr_db_measurement m = {ids->gpu, ids->masks[mi], ids->plans[pi], ids->variant, ids->sweep,
                            "ok", NULL, 2, REPS, s};
    ck_assert_int_eq(tsr_db_has_measurement(db, ids->gpu, ids->masks[mi], ids->plans[pi],
                                            ids->variant, &found, &err), TSR_OK);
    if (found)
      continue;
    samples_for(mi, pi, s);
    ck_assert_msg(tsr_db_record(db, &m, &ins, &err) == TSR_OK, "%s", err.text);
    inserted_total += ins;
  }
  return inserted_total;
}

START_TEST(test_create_fresh)
{
  char path[300];
  tsr_db *db = NULL;
  tsr_error err = {0};
  path_in(path, sizeof path, "fresh.db");
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_version(db), TSR_DB_SCHEMA_VERSION);
  ck_assert_int_eq(count_db(db, "PRAGMA user_version"), TSR_DB_SCHEMA_VERSION);
  ck_assert_int_eq(count_db(db, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN "
                                "('gpus','variants','masks','mask_features','plans','sweeps',"
                                "'measurements','samples','lookup','lookup_meta')"),
                   10);
  tsr_db_close(db);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM lookup"), 0);
  {
    sqlite3 *h;
    sqlite3_stmt *st;
    sqlite3_open(path, &h);
    sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &st, NULL);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(h);
  }
  /* Opening again neither re-applies nor fails. */
  ck_assert_int_eq(tsr_db_open(path, 0, &db, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_version(db), TSR_DB_SCHEMA_VERSION);
  tsr_db_close(db);
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &db, &err), TSR_OK);
  tsr_db_close(db);
}
END_TEST

START_TEST(test_migrate_from_v1)
{
  char path[300];
  tsr_db *db = NULL;
  tsr_error err = {0};
  fixture_ids ids;
  double s[3] = {1.5, 1.25, 1.75};
  path_in(path, sizeof path, "v1.db");
  ck_assert_int_eq(tsri_db_create_at(path, 1, &err), TSR_OK);
  ck_assert_int_eq(count(path, "PRAGMA user_version"), 1);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM sqlite_master WHERE name='lookup_meta'"), 0);
  /* A read-only open refuses the old schema and names what to do. */
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &db, &err), TSR_ERR_DB);
  ck_assert_ptr_null(db);
  ck_assert_ptr_nonnull(strstr(err.text, "schema version 1 is older than 2"));
  /* Data written under v1 (raw SQL, as an old tool would) survives. */
  {
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(path, &h), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(h, "INSERT INTO gpus (name, arch, multiprocessors, memory_bytes,"
                                     " driver) VALUES ('old', 'sm_80', 108, 1, 'd')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
  }
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_db_open(path, 0, &db, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_version(db), 2);
  ck_assert_int_eq(count_db(db, "SELECT count(*) FROM gpus WHERE name='old'"), 1);
  ck_assert_int_eq(count_db(db, "SELECT count(*) FROM sqlite_master WHERE name='lookup_meta'"), 1);
  make_fixture(db, &ids);
  {
    tsr_db_measurement m = {ids.gpu, ids.masks[0], ids.plans[0], ids.variant, ids.sweep, "ok",
                            NULL, 1, 3, s};
    int ins;
    ck_assert_int_eq(tsr_db_record(db, &m, &ins, &err), TSR_OK);
    ck_assert_int_eq(ins, 1);
  }
  tsr_db_close(db);
  ck_assert_int_eq(count(path, "PRAGMA user_version"), 2);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM samples"), 3);
  /* tsri_db_create_at refuses an existing file and versions out of range. */
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_db_create_at(path, 1, &err), TSR_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err.text, "file exists"));
  tsr_error_clear(&err);
  path_in(path, sizeof path, "v3.db");
  ck_assert_int_eq(tsri_db_create_at(path, TSR_DB_SCHEMA_VERSION + 1, &err), TSR_ERR_INVALID);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_db_create_at(path, 0, &err), TSR_ERR_INVALID);
}
END_TEST

START_TEST(test_reject_bad_files)
{
  char path[300];
  tsr_db *db = (tsr_db *)&db;
  tsr_error err = {0};
  unsigned char junk[8192];
  size_t i;
  /* Missing. */
  path_in(path, sizeof path, "missing.db");
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &db, &err), TSR_ERR_IO);
  ck_assert_ptr_null(db);
  ck_assert_ptr_nonnull(strstr(err.text, "missing.db"));
  ck_assert_ptr_nonnull(strstr(err.text, "No such file"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_db_open(path, 0, &db, &err), TSR_ERR_IO);
  ck_assert_int_eq(access(path, F_OK), -1); /* nothing created */
  /* Random bytes: not a database, for reading and for writing. */
  srand(seed);
  for (i = 0; i < sizeof junk; i++)
    junk[i] = (unsigned char)(rand() & 0xff);
  path_in(path, sizeof path, "junk.db");
  write_bytes(path, junk, sizeof junk);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &db, &err), TSR_ERR_DB);
  ck_assert_ptr_nonnull(strstr(err.text, "junk.db"));
  ck_assert_ptr_nonnull(strstr(err.text, "not a database"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_ERR_DB);
  ck_assert_ptr_nonnull(strstr(err.text, "not a database"));
  /* A real database whose later pages were overwritten: caught at open. */
  {
    FILE *f;
    long size;
    path_in(path, sizeof path, "torn.db");
    ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
    tsr_db_close(db);
    f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    ck_assert_int_gt(size, 8192);
    fseek(f, 4096, SEEK_SET);
    for (i = 4096; i < (size_t)size; i += sizeof junk) {
      size_t n = (size_t)size - i < sizeof junk ? (size_t)size - i : sizeof junk;
      ck_assert_uint_eq(fwrite(junk, 1, n, f), n);
    }
    fclose(f);
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &db, &err), TSR_ERR_DB);
    ck_assert_ptr_null(db);
    ck_assert_ptr_nonnull(strstr(err.text, "torn.db"));
  }
  /* Another program's SQLite file. */
  {
    sqlite3 *h;
    path_in(path, sizeof path, "foreign.db");
    sqlite3_open(path, &h);
    sqlite3_exec(h, "CREATE TABLE foo (x)", NULL, NULL, NULL);
    sqlite3_close(h);
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &db, &err), TSR_ERR_DB);
    ck_assert_ptr_nonnull(strstr(err.text, "not a tessera database"));
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_open(path, 0, &db, &err), TSR_ERR_DB);
    ck_assert_ptr_nonnull(strstr(err.text, "no tessera schema version"));
    ck_assert_int_eq(count(path, "SELECT count(*) FROM sqlite_master"), 1);
  }
  /* A newer schema than this library knows. */
  {
    sqlite3 *h;
    path_in(path, sizeof path, "newer.db");
    sqlite3_open(path, &h);
    sqlite3_exec(h, "CREATE TABLE lookup (x); PRAGMA user_version = 99", NULL, NULL, NULL);
    sqlite3_close(h);
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_open(path, 0, &db, &err), TSR_ERR_DB);
    ck_assert_ptr_nonnull(strstr(err.text, "schema version 99 is newer than this library's 2"));
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &db, &err), TSR_ERR_DB);
    ck_assert_ptr_nonnull(strstr(err.text, "newer"));
  }
  /* A folder and an empty path. */
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_db_open(tmpdir, 0, &db, &err), TSR_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err.text, "not a regular file"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_db_open("", 0, &db, &err), TSR_ERR_INVALID);
}
END_TEST

START_TEST(test_default_embedded)
{
  tsr_db *db = NULL;
  tsr_error err = {0};
  ck_assert_int_eq(tsr_db_open(NULL, 0, &db, &err), TSR_OK);
  ck_assert_str_eq(tsr_db_path(db), ":memory:");
  ck_assert_int_eq(tsr_db_version(db), TSR_DB_SCHEMA_VERSION);
  ck_assert_int_ge(count_db(db, "SELECT count(*) FROM lookup"), 0);
  ck_assert_ptr_nonnull(strstr(tsri_db_default_sql(), "db/h200.sql"));
  tsr_db_close(db);
  tsr_db_close(NULL);
}
END_TEST

START_TEST(test_put_and_record)
{
  char path[300];
  tsr_db *db = NULL, *ro = NULL;
  tsr_error err = {0};
  fixture_ids ids, again;
  int64_t vid2, i;
  double s[7], med;
  int ins;
  path_in(path, sizeof path, "rec.db");
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
  make_fixture(db, &ids);
  make_fixture(db, &again); /* the same records again: the same ids */
  ck_assert_int_eq(ids.gpu, again.gpu);
  ck_assert_int_eq(ids.variant, again.variant);
  for (i = 0; i < 8; i++)
    ck_assert_int_eq(ids.masks[i], again.masks[i]);
  for (i = 0; i < 6; i++)
    ck_assert_int_eq(ids.plans[i], again.plans[i]);
  ck_assert_int_eq(count_db(db, "SELECT count(*) FROM plans"), 6);
  /* The same variant name with a new template hash is a new variant. */
  {
    tsr_db_variant v = {"attn_sm90_128x128_d128_bf16", "{}", "h2", "gen 0.1", "13.0",
                        "-arch=sm_90a"};
    ck_assert_int_eq(tsr_db_put_variant(db, &v, &vid2, &err), TSR_OK);
    ck_assert_int_ne(vid2, ids.variant);
  }
  /* Random samples; the stored median is the median, all samples kept. */
  srand(seed + 1);
  for (i = 0; i < 7; i++)
    s[i] = 0.1 + (double)rand() / RAND_MAX;
  {
    double c[7];
    int a, b;
    memcpy(c, s, sizeof c);
    for (a = 0; a < 7; a++)
      for (b = a + 1; b < 7; b++)
        if (c[b] < c[a]) {
          double t = c[a];
          c[a] = c[b];
          c[b] = t;
        }
    med = c[3];
  }
  {
    tsr_db_measurement m = {ids.gpu, ids.masks[1], ids.plans[2], ids.variant, ids.sweep, "ok",
                            NULL, 3, 7, s};
    sqlite3_stmt *st;
    ck_assert_int_eq(tsr_db_record(db, &m, &ins, &err), TSR_OK);
    ck_assert_int_eq(ins, 1);
    ck_assert_int_eq(tsr_db_record(db, &m, &ins, &err), TSR_OK); /* again: ignored */
    ck_assert_int_eq(ins, 0);
    ck_assert_int_eq(count_db(db, "SELECT count(*) FROM samples"), 7);
    sqlite3_prepare_v2(tsri_db_sqlite(db), "SELECT median_ms, repeats, warmup FROM measurements",
                       -1, &st, NULL);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_double_eq_tol(sqlite3_column_double(st, 0), med, 1e-12);
    ck_assert_int_eq(sqlite3_column_int(st, 1), 7);
    ck_assert_int_eq(sqlite3_column_int(st, 2), 3);
    sqlite3_finalize(st);
    sqlite3_prepare_v2(tsri_db_sqlite(db), "SELECT rep, ms FROM samples ORDER BY rep", -1, &st,
                       NULL);
    for (i = 0; i < 7; i++) {
      ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
      ck_assert_int_eq(sqlite3_column_int(st, 0), i);
      ck_assert_double_eq_tol(sqlite3_column_double(st, 1), s[i], 1e-15);
    }
    sqlite3_finalize(st);
    /* The new build of the variant is not covered by the old timing. */
    ck_assert_int_eq(tsr_db_has_measurement(db, ids.gpu, ids.masks[1], ids.plans[2], vid2, &ins,
                                            &err), TSR_OK);
    ck_assert_int_eq(ins, 0);
    ck_assert_int_eq(tsr_db_has_measurement(db, ids.gpu, ids.masks[1], ids.plans[2], ids.variant,
                                            &ins, &err), TSR_OK);
    ck_assert_int_eq(ins, 1);
  }
  /* Ineligible candidates are recorded without samples. */
  {
    tsr_db_measurement m = {ids.gpu, ids.masks[1], ids.plans[0], 0, ids.sweep, "ineligible",
                            "retain needs blocks equal to the tile", 0, 0, NULL};
    ck_assert_int_eq(tsr_db_record(db, &m, &ins, &err), TSR_OK);
    ck_assert_int_eq(ins, 1);
    ck_assert_int_eq(count_db(db, "SELECT count(*) FROM measurements WHERE median_ms IS NULL"), 1);
  }
  /* Rejected records leave nothing behind. */
  {
    double bad[2] = {1.0, NAN};
    tsr_db_measurement m = {ids.gpu, ids.masks[2], ids.plans[0], ids.variant, ids.sweep, "ok",
                            NULL, 0, 2, bad};
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_record(db, &m, &ins, &err), TSR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.text, "sample 1"));
    bad[1] = -2;
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_record(db, &m, &ins, &err), TSR_ERR_INVALID);
    m.n_samples = 0;
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_record(db, &m, &ins, &err), TSR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.text, "no samples"));
    m.status = "great";
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_record(db, &m, &ins, &err), TSR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.text, "'great'"));
    ck_assert_int_eq(count_db(db, "SELECT count(*) FROM measurements"), 2);
  }
  /* Rejected puts. */
  {
    tsr_db_plan p = {TSR_MAP_AUTO, 128, 128, TSR_TASKS_ROW, ""};
    tsr_db_variant v = {"x", "{}", "", "", "", ""};
    tsr_db_gpu g = {"gpu", "sm_90a", "", 0, 1, 1, 0, 0};
    int64_t id;
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_put_plan(db, &p, &id, &err), TSR_ERR_INVALID);
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_put_variant(db, &v, &id, &err), TSR_ERR_INVALID);
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_put_gpu(db, &g, &id, &err), TSR_ERR_INVALID);
  }
  tsr_db_close(db);
  /* A read-only handle refuses writes. */
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &ro, &err), TSR_OK);
  {
    tsr_db_measurement m = {ids.gpu, ids.masks[3], ids.plans[0], ids.variant, ids.sweep, "ok",
                            NULL, 0, 7, s};
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_db_record(ro, &m, &ins, &err), TSR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.text, "read-only"));
  }
  tsr_db_close(ro);
}
END_TEST

/* A sweep killed (SIGKILL) while a measurement's transaction is open leaves
 * only whole measurements; the resumed sweep completes the set exactly. */
START_TEST(test_resume_after_kill)
{
  char path[300];
  tsr_db *db = NULL;
  tsr_error err = {0};
  fixture_ids ids;
  pid_t pid;
  int status, k_done = 13;
  path_in(path, sizeof path, "resume.db");
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
  make_fixture(db, &ids);
  tsr_db_close(db);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    tsr_db *c = NULL;
    int k;
    if (tsr_db_open(path, 0, &c, &err) != TSR_OK)
      _exit(3);
    for (k = 0; k < k_done; k++) {
      double s[REPS];
      tsr_db_measurement m = {ids.gpu, ids.masks[k / 6], ids.plans[k % 6], ids.variant,
                              ids.sweep, "ok", NULL, 2, REPS, s};
      samples_for(k / 6, k % 6, s);
      if (tsr_db_record(c, &m, NULL, &err) != TSR_OK)
        _exit(4);
    }
    /* The next candidate: samples written, no commit, then the kill. */
    if (tsri_db_begin(c, &err) != TSR_OK)
      _exit(5);
    {
      double s[REPS];
      tsr_db_measurement m = {ids.gpu, ids.masks[k_done / 6], ids.plans[k_done % 6], ids.variant,
                              ids.sweep, "ok", NULL, 2, REPS, s};
      samples_for(k_done / 6, k_done % 6, s);
      if (tsr_db_record(c, &m, NULL, &err) != TSR_OK)
        _exit(6);
    }
    kill(getpid(), SIGKILL);
    _exit(7);
  }
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM measurements"), k_done);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM samples"), k_done * REPS);
  ck_assert_int_eq(tsr_db_open(path, 0, &db, &err), TSR_OK);
  ck_assert_int_eq(count_db(db, "SELECT count(*) FROM pragma_integrity_check WHERE "
                                "integrity_check != 'ok'"), 0);
  /* Resume: only the missing candidates are timed. */
  ck_assert_int_eq(sweep_all(db, &ids, 0, 8), 8 * 6 - k_done);
  ck_assert_int_eq(sweep_all(db, &ids, 1, 8), 0);
  ck_assert_int_eq(count_db(db, "SELECT count(*) FROM measurements"), 48);
  ck_assert_int_eq(count_db(db, "SELECT count(*) FROM samples"), 48 * REPS);
  ck_assert_int_eq(count_db(db, "SELECT count(*) FROM (SELECT DISTINCT mask_id, plan_id FROM "
                                "measurements)"), 48);
  ck_assert_int_eq(count_db(db, "SELECT count(*) FROM measurements m WHERE (SELECT count(*) "
                                "FROM samples s WHERE s.measurement_id = m.id) != 5"), 0);
  tsr_db_close(db);
}
END_TEST

/* Two processes sweep the same file at once, in opposite orders, with
 * overlapping and private candidates: every candidate once, nothing lost. */
START_TEST(test_concurrent_writers)
{
  char path[300];
  tsr_db *db = NULL;
  tsr_error err = {0};
  fixture_ids ids;
  pid_t pids[2];
  int w, status;
  path_in(path, sizeof path, "conc.db");
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
  make_fixture(db, &ids);
  tsr_db_close(db);
  for (w = 0; w < 2; w++) {
    pids[w] = fork();
    ck_assert_int_ge(pids[w], 0);
    if (pids[w] == 0) {
      tsr_db *c = NULL;
      fixture_ids mine;
      int r;
      if (tsr_db_open(path, 0, &c, &err) != TSR_OK)
        _exit(3);
      make_fixture(c, &mine); /* concurrent insert-or-find of the same rows */
      if (memcmp(&mine.masks, &ids.masks, sizeof ids.masks) ||
          memcmp(&mine.plans, &ids.plans, sizeof ids.plans))
        _exit(4);
      for (r = 0; r < 3; r++)
        sweep_all(c, &mine, w, 8);
      tsr_db_close(c);
      _exit(0);
    }
  }
  for (w = 0; w < 2; w++) {
    ck_assert_int_eq(waitpid(pids[w], &status, 0), pids[w]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer %d status %d", w, status);
  }
  ck_assert_int_eq(count(path, "SELECT count(*) FROM measurements"), 48);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM samples"), 48 * REPS);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM plans"), 6);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM masks"), 8);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM gpus"), 1);
  ck_assert_int_eq(count(path, "SELECT count(*) FROM pragma_integrity_check WHERE "
                               "integrity_check != 'ok'"), 0);
}
END_TEST

/* ---- Schema shape and bounded queries (issue 14, 5) ---------------------- */

/* A fresh tessera database at `name` (schema `version`), then `sql` run on
 * it directly; its path into buf. */
static void crafted(char *buf, size_t n, const char *name, int version, const char *sql)
{
  sqlite3 *h;
  char *msg = NULL;
  tsr_error err = {0};
  path_in(buf, n, name);
  ck_assert_msg(tsri_db_create_at(buf, version, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(sqlite3_open(buf, &h), SQLITE_OK);
  ck_assert_msg(sqlite3_exec(h, sql, NULL, NULL, &msg) == SQLITE_OK, "%s", msg ? msg : "");
  sqlite3_close(h);
}

/* CPU seconds of this process: what a refusal costs, whatever else the
 * machine runs (wall time on a loaded machine says nothing). */
static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every column of lookup, so a view can offer the same shape. */
#define LOOKUP_COLS                                                                       \
  "id, gpu_name, arch, multiprocessors, feature_version, level, dtype, head_dim, bq, bk, " \
  "seq_bin, density_bin, spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, variant, "  \
  "masks, regret, speedup"

/* A lookup VIEW over an endless recursive query, with the table's columns. */
static const char recursive_view[] =
    "DROP TABLE lookup; CREATE VIEW lookup AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL "
    "SELECT x + 1 FROM r) SELECT x AS id, 'NVIDIA H200' AS gpu_name, 'sm_90a' AS arch, "
    "132 AS multiprocessors, 1 AS feature_version, 0 AS level, 'bf16' AS dtype, 64 AS head_dim, "
    "0 AS bq, 0 AS bk, 0 AS seq_bin, 0 AS density_bin, 0 AS spread_bin, 0 AS fill_bin, "
    "'combine' AS mapping, 128 AS tile_m, 128 AS tile_n, 'row' AS tasks, '' AS variant, "
    "1 AS masks, 1.0 AS regret, 1.0 AS speedup FROM r";

/* Opens path read-only and for writing: both refused, naming the path and
 * every needle, within a second. */
static void expect_refused(const char *path, const char *n1, const char *n2)
{
  int flags[2] = {TSR_DB_READONLY, 0}, i;
  for (i = 0; i < 2; i++) {
    tsr_db *db = (tsr_db *)&db;
    tsr_error err = {0};
    double t0 = now_s();
    ck_assert_int_eq(tsr_db_open(path, flags[i], &db, &err), TSR_ERR_DB);
    ck_assert_msg(now_s() - t0 < 1.0, "refused after %.2f s of CPU", now_s() - t0);
    ck_assert_ptr_null(db);
    ck_assert_msg(strstr(err.text, path) && strstr(err.text, n1) && (!n2 || strstr(err.text, n2)),
                  "%s", err.text);
  }
}

START_TEST(test_schema_shape)
{
  char path[300];
  /* The case: `SELECT count(*) FROM lookup` at open ran forever. */
  crafted(path, sizeof path, "recursive.db", TSR_DB_SCHEMA_VERSION, recursive_view);
  expect_refused(path, "'lookup' is a view, not a table of the tessera schema", NULL);
  /* A view of exactly the right columns over the real rows: still no table. */
  crafted(path, sizeof path, "view.db", TSR_DB_SCHEMA_VERSION,
          "INSERT INTO lookup (" LOOKUP_COLS ") VALUES (1, 'NVIDIA H200', 'sm_90a', 132, 1, 2, "
          "'bf16', 64, 0, 0, -1, -1, -1, -1, 'combine', 128, 128, 'row', '', 1, 1.0, 1.0);"
          "CREATE TABLE real_lookup AS SELECT * FROM lookup; DROP TABLE lookup; "
          "CREATE VIEW lookup AS SELECT " LOOKUP_COLS " FROM real_lookup");
  expect_refused(path, "'lookup' is a view", NULL);
  /* A table lacking a column the code reads. */
  crafted(path, sizeof path, "missing-col.db", TSR_DB_SCHEMA_VERSION,
          "DROP TABLE lookup; CREATE TABLE lookup (id INTEGER PRIMARY KEY, gpu_name TEXT NOT "
          "NULL, arch TEXT NOT NULL, multiprocessors INTEGER NOT NULL)");
  expect_refused(path, "table 'lookup' has no column 'feature_version'", NULL);
  /* A column of another type, and one that allows NULL (a NULL gpu_name
   * was printed as "(null)"). */
  crafted(path, sizeof path, "type.db", TSR_DB_SCHEMA_VERSION,
          "ALTER TABLE plans RENAME TO old_plans; CREATE TABLE plans (id INTEGER PRIMARY KEY, "
          "mapping TEXT NOT NULL, tile_m TEXT NOT NULL, tile_n INTEGER NOT NULL, tasks TEXT NOT "
          "NULL, variant TEXT NOT NULL)");
  expect_refused(path, "column 'plans.tile_m' is 'TEXT NOT NULL', expected 'INTEGER NOT NULL'",
                 NULL);
  crafted(path, sizeof path, "nullable.db", TSR_DB_SCHEMA_VERSION,
          "CREATE TABLE l2 AS SELECT * FROM lookup; DROP TABLE lookup; CREATE TABLE lookup ("
          "id INTEGER PRIMARY KEY, gpu_name TEXT, arch TEXT NOT NULL, multiprocessors INTEGER "
          "NOT NULL, feature_version INTEGER NOT NULL, level INTEGER NOT NULL, dtype TEXT NOT "
          "NULL, head_dim INTEGER NOT NULL, bq INTEGER NOT NULL, bk INTEGER NOT NULL, seq_bin "
          "INTEGER NOT NULL, density_bin INTEGER NOT NULL, spread_bin INTEGER NOT NULL, fill_bin "
          "INTEGER NOT NULL, mapping TEXT NOT NULL, tile_m INTEGER NOT NULL, tile_n INTEGER NOT "
          "NULL, tasks TEXT NOT NULL, variant TEXT NOT NULL, masks INTEGER NOT NULL, regret REAL "
          "NOT NULL, speedup REAL NOT NULL); INSERT INTO lookup (" LOOKUP_COLS ") VALUES (1, "
          "NULL, 'sm_90a', 132, 1, 2, 'bf16', 64, 0, 0, -1, -1, -1, -1, 'combine', 128, 128, "
          "'row', '', 1, 1.0, 1.0)");
  expect_refused(path, "column 'lookup.gpu_name' is 'TEXT', expected 'TEXT NOT NULL'", NULL);
  /* A table of the schema missing altogether. */
  crafted(path, sizeof path, "no-meta.db", TSR_DB_SCHEMA_VERSION, "DROP TABLE lookup_meta");
  expect_refused(path, "'lookup_meta' is missing", NULL);
  /* A version-1 file is checked at its own version before it is migrated,
   * and left as it was when refused. */
  crafted(path, sizeof path, "v1-view.db", 1,
          "ALTER TABLE measurements RENAME TO m0; CREATE VIEW measurements AS SELECT * FROM m0");
  {
    tsr_db *db = (tsr_db *)&db;
    tsr_error err = {0};
    ck_assert_int_eq(tsr_db_open(path, 0, &db, &err), TSR_ERR_DB);
    ck_assert_msg(strstr(err.text, "'measurements' is a view") && strstr(err.text, "version 1)"),
                  "%s", err.text);
    ck_assert_int_eq(count(path, "PRAGMA user_version"), 1);
    ck_assert_int_eq(count(path, "SELECT count(*) FROM sqlite_master WHERE name = 'lookup_meta'"),
                     0);
  }
  /* Extra columns and tables are no harm: the file opens. */
  crafted(path, sizeof path, "extra.db", TSR_DB_SCHEMA_VERSION,
          "ALTER TABLE lookup ADD COLUMN note TEXT; CREATE TABLE mine (x)");
  {
    tsr_db *db = NULL;
    tsr_error err = {0};
    ck_assert_msg(tsr_db_open(path, TSR_DB_READONLY, &db, &err) == TSR_OK, "%s", err.text);
    tsr_db_close(db);
    ck_assert_msg(tsr_db_open(path, 0, &db, &err) == TSR_OK, "%s", err.text);
    tsr_db_close(db);
  }
}
END_TEST

START_TEST(test_step_budget)
{
  char path[300];
  tsr_db *db = NULL;
  tsr_error err = {0};
  double t0;
  int64_t n = 20000 + (int64_t)(seed % 1000);
  char sql[256];
  sqlite3_stmt *st;
  /* An endless statement stops at the default budget, with a message that
   * names the budget (so it stopped there and not for another reason).  Its
   * CPU time is printed, not asserted: 2^26 steps take about a second of a
   * core, 4.7 s under the sanitizers on a shared 2-core CI machine, and a
   * speed belongs in a benchmark, not in a unit test. */
  path_in(path, sizeof path, "budget.db");
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
  t0 = now_s();
  ck_assert_int_eq(tsri_db_exec(db, "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
                                   "FROM r) SELECT count(*) FROM r", &err), TSR_ERR_DB);
  fprintf(stderr, "step_budget: the endless statement stopped after %.2f s of CPU\n", now_s() - t0);
  snprintf(sql, sizeof sql, "a query ran past %lld steps", (long long)TSR_DB_MAX_STEPS);
  ck_assert_msg(strstr(err.text, sql) && strstr(err.text, path), "%s", err.text);
  /* The tools' own statements on the connection are bounded too. */
  tsri_db_set_budget(db, 50000);
  snprintf(sql, sizeof sql, "CREATE TABLE big AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL "
                            "SELECT x + 1 FROM r WHERE x < %lld) SELECT x FROM r", (long long)n);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_db_exec(db, sql, &err), TSR_ERR_DB);
  ck_assert_msg(strstr(err.text, "ran past 50000 steps"), "%s", err.text);
  tsri_db_set_budget(db, 0); /* back to the default */
  tsr_error_clear(&err);
  ck_assert_msg(tsri_db_exec(db, sql, &err) == TSR_OK, "%s", err.text);
  tsri_db_set_budget(db, 50000);
  ck_assert_int_eq(sqlite3_prepare_v2(tsri_db_sqlite(db), "SELECT sum(x) FROM big", -1, &st, NULL),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(st), SQLITE_INTERRUPT);
  ck_assert_msg(strstr(tsri_db_errmsg(db), "ran past 50000 steps"), "%s", tsri_db_errmsg(db));
  sqlite3_finalize(st);
  /* The count starts again with each statement: many small ones pass. */
  {
    int i;
    for (i = 0; i < 200; i++) {
      ck_assert_int_eq(sqlite3_prepare_v2(tsri_db_sqlite(db), "SELECT x FROM big WHERE rowid = ?",
                                          -1, &st, NULL), SQLITE_OK);
      sqlite3_bind_int(st, 1, i + 1);
      ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
      ck_assert_int_eq(sqlite3_column_int(st, 0), i + 1);
      sqlite3_finalize(st);
    }
    ck_assert_str_eq(tsri_db_errmsg(db), "not an error");
  }
  tsr_db_close(db);
}
END_TEST

static Suite *db_suite(void)
{
  Suite *s = suite_create("db");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_create_fresh);
  tcase_add_test(tc, test_migrate_from_v1);
  tcase_add_test(tc, test_reject_bad_files);
  tcase_add_test(tc, test_default_embedded);
  tcase_add_test(tc, test_put_and_record);
  tcase_add_test(tc, test_resume_after_kill);
  tcase_add_test(tc, test_concurrent_writers);
  suite_add_tcase(s, tc);
  /* Unbounded, these ran forever: a short timeout is part of the test. */
  tc = tcase_create("bounded");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_schema_shape);
  tcase_add_test(tc, test_step_budget);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  const char *env = getenv("TSR_SEED");
  seed = env ? (unsigned)strtoul(env, NULL, 10) : 20261129u;
  printf("check_db: seed %u (set TSR_SEED to change)\n", seed);
  return tu_run_suite(db_suite());
}

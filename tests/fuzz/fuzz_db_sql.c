/*
 * fuzz_db_sql.c: libFuzzer harness of lookup databases made by arbitrary
 * SQL over the real schema.
 *
 * Input: SQL text.  Each input starts from a fresh database holding
 * db/schema.sql (made once by tsr_db_open with TSR_DB_CREATE, which applies
 * the embedded schema), runs the input's statements on it through the
 * harness's own connection (errors ignored: a statement that fails is just
 * a database the input did not make), then does what the runtime does with
 * a lookup database (tests/fuzz/fuzz_db.h) and what tessera-profile does
 * with a writable one: opens it writable and records one measurement.
 *
 * The input's connection may not attach files (so VACUUM INTO cannot write
 * outside the scratch folder either), change the temporary folder, or grow
 * values past 1 MB, and its work is bounded like the library's connections
 * (fuzz_db.h).  Seeds: db/h200.sql whole and one seed per statement of it
 * (tests/fuzz/local.mk); dictionary tests/fuzz/sql.dict and the schema's
 * table and column names.
 */
#include "fuzz_db.h"

static char tmpl_path[600], db_path[600];
static uint8_t *tmpl;
static size_t tmpl_size;

static int authorize(void *ud, int action, const char *a, const char *b, const char *c,
                     const char *d)
{
  (void)ud, (void)b, (void)c, (void)d;
  if (action == SQLITE_ATTACH || action == SQLITE_DETACH)
    return SQLITE_DENY;
  if (action == SQLITE_PRAGMA && a &&
      (!sqlite3_stricmp(a, "temp_store_directory") || !sqlite3_stricmp(a, "data_store_directory")))
    return SQLITE_DENY;
  return SQLITE_OK;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  tsr_error err = {0};
  tsr_db *db = NULL;
  FILE *f;
  long n;
  (void)argc, (void)argv;
  fz_path(tmpl_path, sizeof tmpl_path, fz_dir(), "schema.db");
  fz_path(db_path, sizeof db_path, fz_dir(), "lookup.db");
  fz_db_init();
  if (tsr_db_open(tmpl_path, TSR_DB_CREATE, &db, &err) != TSR_OK ||
      tsri_db_exec(db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE", &err) !=
          TSR_OK) {
    fprintf(stderr, "fuzz_db_sql: cannot make the schema database: %s\n", err.text);
    abort();
  }
  tsr_db_close(db);
  f = fopen(tmpl_path, "rb");
  if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) ||
      !(tmpl = malloc((size_t)n)) || fread(tmpl, 1, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "fuzz_db_sql: cannot read '%s'\n", tmpl_path);
    abort();
  }
  fclose(f);
  tmpl_size = (size_t)n;
  return 0;
}

/* The input's own statements run on the harness's connection, outside the
 * library's budget: progress callbacks every FZ_SQL_STEP virtual-machine
 * steps, FZ_SQL_BUDGET of them (2 million steps, about 0.2 s under the
 * sanitizers) an input. */
#define FZ_SQL_STEP 1000
#define FZ_SQL_BUDGET 2000

static long fz_sql_calls;

static int fz_sql_progress(void *ud)
{
  (void)ud;
  return ++fz_sql_calls > FZ_SQL_BUDGET;
}

/* The input's statements over a fresh copy of the schema database. */
static void run_input(const uint8_t *data, size_t size)
{
  sqlite3 *h = NULL;
  char *sql = malloc(size + 1);
  memcpy(sql, data, size);
  sql[size] = '\0';
  if (sqlite3_open_v2(db_path, &h, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
    sqlite3_limit(h, SQLITE_LIMIT_ATTACHED, 0);
    sqlite3_limit(h, SQLITE_LIMIT_LENGTH, 1000000);
    sqlite3_set_authorizer(h, authorize, NULL);
    sqlite3_progress_handler(h, FZ_SQL_STEP, fz_sql_progress, NULL);
    fz_sql_calls = 0;
    sqlite3_exec(h, sql, NULL, NULL, NULL);
  }
  sqlite3_close(h);
  free(sql);
}

/* tessera-profile's writes: one GPU, variant, mask, plan, sweep and
 * measurement with features, on the database the input made. */
static void record(void)
{
  static const double samples[3] = {0.25, 0.5, 0.75};
  tsr_error err = {0};
  tsr_db *db = NULL;
  tsr_db_gpu g = {"NVIDIA H200", "sm_90a", "cuda 13.0", 132, (int64_t)1 << 37, 1 << 26, 1980000, 3201000};
  tsr_db_variant v = {"tsr_sm90_bf16_d64_m128n128_s2_g3_flat_nm_tma64", "{}", "0123456789abcdef",
                      "1", "13.0", "--dopt=on"};
  tsr_db_mask m = {"demo", "masks/00000.npy", "profile", "svg", "demo-9x16x16", "128x128", "bf16",
                   1, 4, 4, 2304, 2304, 64, 0x0123456789abcdefull};
  tsr_db_plan p = {TSR_MAP_RETAIN, 128, 128, TSR_TASKS_ROW, v.name};
  tsr_db_measurement me;
  int64_t gid = 0, vid = 0, mid = 0, pid = 0, sid = 0;
  int inserted = 0, found = 0;
  tsr_status st;
  st = tsr_db_open(db_path, 0, &db, &err);
  FZ_CHECK_ERR(st, err, "tsr_db_open (writable)");
  if (st != TSR_OK)
    return;
  if ((st = tsr_db_put_gpu(db, &g, &gid, &err)) == TSR_OK &&
      (st = tsr_db_put_variant(db, &v, &vid, &err)) == TSR_OK &&
      (st = tsr_db_put_mask(db, &m, &mid, &err)) == TSR_OK &&
      (st = tsr_db_put_plan(db, &p, &pid, &err)) == TSR_OK &&
      (st = tsr_db_put_features(db, mid, gid, &fz_cases[0].f, &err)) == TSR_OK &&
      (st = tsr_db_start_sweep(db, gid, "demo", "fuzz", &sid, &err)) == TSR_OK &&
      (st = tsr_db_has_measurement(db, gid, mid, pid, vid, &found, &err)) == TSR_OK) {
    memset(&me, 0, sizeof me);
    me.gpu_id = gid, me.mask_id = mid, me.plan_id = pid, me.variant_id = vid, me.sweep_id = sid;
    me.status = "ok";
    me.warmup = 1;
    me.n_samples = 3;
    me.samples_ms = samples;
    if ((st = tsr_db_record(db, &me, &inserted, &err)) == TSR_OK)
      st = tsr_db_finish_sweep(db, sid, &err);
  }
  FZ_CHECK_ERR(st, err, "recording a measurement");
  tsr_db_close(db);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char aux[700];
  unlink(fz_path(aux, sizeof aux, fz_dir(), "lookup.db-wal"));
  unlink(fz_path(aux, sizeof aux, fz_dir(), "lookup.db-shm"));
  unlink(fz_path(aux, sizeof aux, fz_dir(), "lookup.db-journal"));
  fz_write(db_path, tmpl, tmpl_size);
  run_input(data, size);
  fz_db_select(db_path);
  record();
  return 0;
}

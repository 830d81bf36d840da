/*
 * db_write.c: the profiler's writers of the lookup database (db/schema.sql):
 * GPUs, variants, masks and plans (insert or find), sweep records,
 * measurements with their samples, and mask features.  Only tessera-profile
 * and its tests write timings, so this lives with the profiler, not in the
 * runtime; the handle itself (open, schema check, migration, the step
 * budget) is runtime/db.c's, reached through runtime/db_impl.h.
 *
 * Each record call is one BEGIN IMMEDIATE transaction (or runs inside the
 * caller's) whose unique keys make a second writer (a resumed or parallel
 * sweep) skip rows that are already there instead of duplicating them.  A
 * measurement is a handful of rows: one fsync-free WAL commit, far below the
 * seconds a GPU timing takes.
 */
#include <inttypes.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_impl.h"
#include "tools.h"

/* ---- Parameterised statements ---------------------------------------- */

/* Prepares `sql` and binds the arguments by `types`: 't' text (NULL binds
 * NULL), 'i' int64_t, 'd' double. */
static sqlite3_stmt *prep(tsr_db *db, const char *sql, const char *types, va_list ap)
{
  sqlite3_stmt *st = NULL;
  int i;
  if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK)
    return NULL;
  for (i = 0; types[i]; i++) {
    int rc;
    if (types[i] == 't') {
      const char *s = va_arg(ap, const char *);
      rc = s ? sqlite3_bind_text(st, i + 1, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, i + 1);
    } else if (types[i] == 'i') {
      rc = sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
    } else {
      rc = sqlite3_bind_double(st, i + 1, va_arg(ap, double));
    }
    if (rc != SQLITE_OK) {
      sqlite3_finalize(st);
      return NULL;
    }
  }
  return st;
}

/* Runs one statement.  *row_id (may be NULL) gets the first column of the
 * first row, or -1 when none; *changes (may be NULL) the rows changed. */
static tsr_status run(tsr_db *db, tsr_error *err, int64_t *row_id, int *changes, const char *sql,
                      const char *types, ...)
{
  va_list ap;
  sqlite3_stmt *st;
  int rc;
  va_start(ap, types);
  st = prep(db, sql, types, ap);
  va_end(ap);
  if (!st)
    return tsri_db_fail(db, err, "query");
  if (row_id)
    *row_id = -1;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if (row_id && *row_id < 0)
      *row_id = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return tsri_db_fail(db, err, "update");
  if (changes)
    *changes = sqlite3_changes(db->h);
  return TSR_OK;
}

static tsr_status need_writable(tsr_db *db, tsr_error *err)
{
  if (!db)
    return tsr_error_set(err, TSR_ERR_INVALID, "no lookup database given");
  if (db->readonly)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot write lookup database '%s': opened read-only",
                         db->path);
  return TSR_OK;
}

static const char *str_or(const char *s, const char *dflt) { return s ? s : dflt; }

tsr_status tsr_db_put_gpu(tsr_db *db, const tsr_db_gpu *g, int64_t *id, tsr_error *err)
{
  tsr_status st;
  if ((st = need_writable(db, err)) != TSR_OK)
    return st;
  if (!g->name || !g->arch || g->multiprocessors <= 0)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot record gpu '%s': name, arch and "
                         "multiprocessors are required", str_or(g->name, "(null)"));
  st = run(db, err, NULL, NULL,
           "INSERT OR IGNORE INTO gpus (name, arch, multiprocessors, memory_bytes, l2_bytes, "
           "driver, clock_sm_khz, clock_mem_khz) VALUES (?,?,?,?,?,?,?,?)",
           "ttiiitii", g->name, g->arch, (int64_t)g->multiprocessors, g->memory_bytes, g->l2_bytes,
           str_or(g->driver, ""), (int64_t)g->clock_sm_khz, (int64_t)g->clock_mem_khz);
  if (st == TSR_OK)
    st = run(db, err, id, NULL,
             "SELECT id FROM gpus WHERE name=? AND arch=? AND multiprocessors=? AND "
             "memory_bytes=? AND l2_bytes=? AND driver=? AND clock_sm_khz=? AND clock_mem_khz=?",
             "ttiiitii", g->name, g->arch, (int64_t)g->multiprocessors, g->memory_bytes,
             g->l2_bytes, str_or(g->driver, ""), (int64_t)g->clock_sm_khz,
             (int64_t)g->clock_mem_khz);
  return st;
}

tsr_status tsr_db_put_variant(tsr_db *db, const tsr_db_variant *v, int64_t *id, tsr_error *err)
{
  tsr_status st;
  if ((st = need_writable(db, err)) != TSR_OK)
    return st;
  if (!v->name || !*v->name || !v->template_hash || !*v->template_hash)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot record variant '%s': name and template hash are required",
                         str_or(v->name, "(null)"));
  st = run(db, err, NULL, NULL,
           "INSERT OR IGNORE INTO variants (name, params, template_hash, generator, "
           "nvrtc_version, nvrtc_options) VALUES (?,?,?,?,?,?)",
           "tttttt", v->name, str_or(v->params, "{}"), v->template_hash, str_or(v->generator, ""),
           str_or(v->nvrtc_version, ""), str_or(v->nvrtc_options, ""));
  if (st == TSR_OK)
    st = run(db, err, id, NULL,
             "SELECT id FROM variants WHERE name=? AND template_hash=? AND generator=? AND "
             "nvrtc_version=? AND nvrtc_options=?",
             "ttttt", v->name, v->template_hash, str_or(v->generator, ""),
             str_or(v->nvrtc_version, ""), str_or(v->nvrtc_options, ""));
  return st;
}

tsr_status tsr_db_put_mask(tsr_db *db, const tsr_db_mask *m, int64_t *id, tsr_error *err)
{
  char hash[17];
  tsr_status st;
  if ((st = need_writable(db, err)) != TSR_OK)
    return st;
  if (!m->corpus || !m->path)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot record mask: corpus and path are required");
  snprintf(hash, sizeof hash, "%016" PRIx64, m->content_hash);
  st = run(db, err, NULL, NULL,
           "INSERT OR IGNORE INTO masks (corpus, path, split, family, model, geometry, batch, "
           "heads_q, heads_kv, seq_q, seq_k, head_dim, dtype, content_hash) "
           "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
           "ttttttiiiiiitt", m->corpus, m->path, str_or(m->split, "profile"),
           str_or(m->family, ""), str_or(m->model, ""), str_or(m->geometry, ""), m->batch,
           m->heads_q, m->heads_kv, m->seq_q, m->seq_k, m->head_dim, str_or(m->dtype, "bf16"),
           hash);
  if (st == TSR_OK)
    st = run(db, err, id, NULL,
             "SELECT id FROM masks WHERE corpus=? AND path=? AND content_hash=?", "ttt",
             m->corpus, m->path, hash);
  return st;
}

tsr_status tsr_db_put_plan(tsr_db *db, const tsr_db_plan *p, int64_t *id, tsr_error *err)
{
  tsr_status st;
  if ((st = need_writable(db, err)) != TSR_OK)
    return st;
  if (p->mapping == TSR_MAP_AUTO || p->tasks == TSR_TASKS_AUTO || p->tile_m <= 0 ||
      p->tile_n <= 0)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot record plan %dx%d: mapping, task layout and tile must be "
                         "resolved",
                         p->tile_m, p->tile_n);
  st = run(db, err, NULL, NULL,
           "INSERT OR IGNORE INTO plans (mapping, tile_m, tile_n, tasks, variant) "
           "VALUES (?,?,?,?,?)",
           "tiitt", tsr_plan_mapping_name(p->mapping), (int64_t)p->tile_m, (int64_t)p->tile_n,
           tsr_plan_tasks_name(p->tasks), str_or(p->variant, ""));
  if (st == TSR_OK)
    st = run(db, err, id, NULL,
             "SELECT id FROM plans WHERE mapping=? AND tile_m=? AND tile_n=? AND tasks=? AND "
             "variant=?",
             "tiitt", tsr_plan_mapping_name(p->mapping), (int64_t)p->tile_m,
             (int64_t)p->tile_n, tsr_plan_tasks_name(p->tasks), str_or(p->variant, ""));
  return st;
}

tsr_status tsr_db_start_sweep(tsr_db *db, int64_t gpu_id, const char *corpus, const char *command,
                              int64_t *id, tsr_error *err)
{
  tsr_status st;
  if ((st = need_writable(db, err)) != TSR_OK)
    return st;
  st = run(db, err, NULL, NULL,
           "INSERT INTO sweeps (gpu_id, corpus, started, command) "
           "VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%SZ','now'), ?)",
           "itt", gpu_id, str_or(corpus, ""), str_or(command, ""));
  if (st == TSR_OK)
    *id = sqlite3_last_insert_rowid(db->h);
  return st;
}

tsr_status tsr_db_finish_sweep(tsr_db *db, int64_t sweep_id, tsr_error *err)
{
  tsr_status st;
  if ((st = need_writable(db, err)) != TSR_OK)
    return st;
  return run(db, err, NULL, NULL,
             "UPDATE sweeps SET finished = strftime('%Y-%m-%dT%H:%M:%SZ','now') WHERE id = ?",
             "i", sweep_id);
}

tsr_status tsr_db_has_measurement(tsr_db *db, int64_t gpu_id, int64_t mask_id, int64_t plan_id,
                                  int64_t variant_id, int *found, tsr_error *err)
{
  int64_t id;
  tsr_status st = run(db, err, &id, NULL,
                      "SELECT id FROM measurements WHERE gpu_id=? AND mask_id=? AND plan_id=? "
                      "AND variant_id=?",
                      "iiii", gpu_id, mask_id, plan_id, variant_id);
  *found = st == TSR_OK && id >= 0;
  return st;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of n > 0 values (mean of the middle two for even n). */
static double median(const double *v, int n, tsr_status *st)
{
  double *c = malloc(sizeof *c * (size_t)n), m;
  if (!c) {
    *st = TSR_ERR_NOMEM;
    return 0;
  }
  memcpy(c, v, sizeof *c * (size_t)n);
  qsort(c, (size_t)n, sizeof *c, cmp_double);
  m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
  free(c);
  return m;
}

tsr_status tsr_db_record(tsr_db *db, const tsr_db_measurement *m, int *inserted, tsr_error *err)
{
  tsr_status st;
  int own, changes = 0, i, ok;
  double med = 0;
  int64_t mid;
  if (inserted)
    *inserted = 0;
  if ((st = need_writable(db, err)) != TSR_OK)
    return st;
  ok = m->status && !strcmp(m->status, "ok");
  if (!m->status || (!ok && strcmp(m->status, "ineligible") && strcmp(m->status, "failed")))
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot record measurement: status '%s' is not "
                         "ok, ineligible or failed", str_or(m->status, "(null)"));
  if (ok && (m->n_samples < 1 || !m->samples_ms))
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot record measurement of plan %" PRId64 ": no samples", m->plan_id);
  for (i = 0; i < m->n_samples; i++)
    if (!(m->samples_ms[i] > 0) || m->samples_ms[i] != m->samples_ms[i] ||
        m->samples_ms[i] > 1e9)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "cannot record measurement of plan %" PRId64 ": sample %d is %g ms",
                           m->plan_id, i, m->samples_ms[i]);
  if (m->n_samples > 0) {
    st = TSR_OK;
    med = median(m->samples_ms, m->n_samples, &st);
    if (st != TSR_OK)
      return tsr_error_set(err, st, "out of memory recording a measurement");
  }
  own = sqlite3_get_autocommit(db->h);
  if (own && (st = tsri_db_begin(db, err)) != TSR_OK)
    return st;
  if (ok)
    st = run(db, err, NULL, &changes,
             "INSERT OR IGNORE INTO measurements (gpu_id, mask_id, plan_id, variant_id, sweep_id, "
             "status, detail, median_ms, warmup, repeats) VALUES (?,?,?,?,?,?,?,?,?,?)",
             "iiiiittdii", m->gpu_id, m->mask_id, m->plan_id, m->variant_id, m->sweep_id,
             m->status, str_or(m->detail, ""), med, (int64_t)m->warmup, (int64_t)m->n_samples);
  else
    st = run(db, err, NULL, &changes,
             "INSERT OR IGNORE INTO measurements (gpu_id, mask_id, plan_id, variant_id, sweep_id, "
             "status, detail, median_ms, warmup, repeats) VALUES (?,?,?,?,?,?,?,NULL,0,0)",
             "iiiiitt", m->gpu_id, m->mask_id, m->plan_id, m->variant_id, m->sweep_id, m->status,
             str_or(m->detail, ""));
  if (st != TSR_OK || changes == 0)
    goto done;
  mid = sqlite3_last_insert_rowid(db->h);
  for (i = 0; i < m->n_samples && st == TSR_OK; i++)
    st = run(db, err, NULL, NULL, "INSERT INTO samples (measurement_id, rep, ms) VALUES (?,?,?)",
             "iid", mid, (int64_t)i, m->samples_ms[i]);
  if (st == TSR_OK && inserted)
    *inserted = 1;
done:
  if (own) {
    if (st == TSR_OK)
      st = tsri_db_commit(db, err);
    else
      tsri_db_rollback(db);
  }
  if (st != TSR_OK && inserted)
    *inserted = 0;
  return st;
}

tsr_status tsr_db_put_features(tsr_db *db, int64_t mask_id, int64_t gpu_id,
                               const tsr_features *f, tsr_error *err)
{
  const char *names[TSR_FEATURES_MAX];
  double values[TSR_FEATURES_MAX];
  int n, i, own;
  tsr_status st;
  if ((st = need_writable(db, err)) != TSR_OK)
    return st;
  n = tsr_features_list(f, names, values);
  own = sqlite3_get_autocommit(db->h);
  if (own && (st = tsri_db_begin(db, err)) != TSR_OK)
    return st;
  for (i = 0; i < n && st == TSR_OK; i++)
    st = run(db, err, NULL, NULL,
             "INSERT OR REPLACE INTO mask_features (mask_id, gpu_id, version, name, value) "
             "VALUES (?,?,?,?,?)",
             "iiitd", mask_id, gpu_id, (int64_t)TSR_FEATURES_VERSION, names[i], values[i]);
  if (own) {
    if (st == TSR_OK)
      st = tsri_db_commit(db, err);
    else
      tsri_db_rollback(db);
  }
  return st;
}

/*
 * build.c: derives the lookup table from the timings of a sweep.
 *
 * For each GPU: the masks of the profiling split with their stored features
 * and the medians of every candidate plan timed with the current build of
 * its variant.  Masks are grouped into regions (tsr_select_region) at each
 * level of coarseness; a region's row is the plan that was timed on most of
 * its masks and, among those, has the smallest geometric-mean ratio to each
 * mask's best time.  Cost: masks x plans x levels, milliseconds for
 * thousands of masks; the rows replace the GPU's old rows in one
 * transaction, so a reader never sees half a table.
 */
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"
#include "variant.h"

static tsr_status sql_fail(tsr_db *db, tsr_error *err)
{
  return tsr_error_set(err, TSR_ERR_DB, "cannot derive lookup table in '%s': %s", tsr_db_path(db),
                       tsri_db_errmsg(db));
}

void tsrp_build_free(tsrp_dataset *ds)
{
  int64_t i;
  for (i = 0; i < ds->n_masks; i++) {
    free(ds->masks[i].plan_ids);
    free(ds->masks[i].ms);
  }
  free(ds->masks);
  free(ds->plans);
  memset(ds, 0, sizeof *ds);
}

/* Binary search of records sorted by an int64 id that is their first
 * field (tsrp_mask_times.mask_id, tsrp_plan_row.id); -1 when absent. */
static int64_t find_id(const void *base, int64_t n, size_t stride, int64_t id)
{
  int64_t lo = 0, hi = n - 1;
  while (lo <= hi) {
    int64_t mid = (lo + hi) / 2, v;
    memcpy(&v, (const char *)base + (size_t)mid * stride, sizeof v);
    if (v == id)
      return mid;
    if (v < id)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

static int64_t mask_index(const tsrp_dataset *ds, int64_t id)
{
  return find_id(ds->masks, ds->n_masks, sizeof *ds->masks, id);
}

int64_t tsrp_build_plan_index(const tsrp_dataset *ds, int64_t plan_id)
{
  return find_id(ds->plans, ds->n_plans, sizeof *ds->plans, plan_id);
}

/* Median of plan `plan_id` for mask m; 0 when not measured. */
static double tsrp_build_time(const tsrp_mask_times *m, int64_t plan_id)
{
  int i;
  for (i = 0; i < m->n; i++)
    if (m->plan_ids[i] == plan_id)
      return m->ms[i];
  return 0;
}

double tsrp_build_best(const tsrp_mask_times *m, int64_t *plan_id)
{
  double best = 0;
  int i;
  if (plan_id)
    *plan_id = -1;
  for (i = 0; i < m->n; i++)
    if (best == 0 || m->ms[i] < best) {
      best = m->ms[i];
      if (plan_id)
        *plan_id = m->plan_ids[i];
    }
  return best;
}

/* tsrp_build_time_of; with by_rank, the time of the plan the request path
 * runs without a row for that shape: the timed variant of the highest
 * tsri_variant_rank (the bundle's pick among the variants that served). */
static double time_of(const tsrp_dataset *ds, const tsrp_mask_times *m, const tsr_plan_opts *o,
                      int by_rank)
{
  /* AUTO resolves as the planner does: combine, else subdivide, else retain. */
  static const tsr_mapping order[] = {TSR_MAP_COMBINE, TSR_MAP_SUBDIVIDE, TSR_MAP_RETAIN};
  int k;
  for (k = 0; k < 3; k++) {
    tsr_mapping want = o->mapping == TSR_MAP_AUTO ? order[k] : o->mapping;
    double t = 0;
    int i, rank = 0;
    for (i = 0; i < m->n; i++) {
      int64_t pi = tsrp_build_plan_index(ds, m->plan_ids[i]);
      const tsrp_plan_row *p;
      if (pi < 0)
        continue;
      p = &ds->plans[pi];
      if (p->mapping != want || p->tile_m != o->tile_m || p->tile_n != o->tile_n ||
          p->tasks != o->tasks || (o->variant && strcmp(o->variant, p->variant)))
        continue;
      if (t == 0 || (by_rank && p->rank > rank) ||
          ((!by_rank || p->rank == rank) && m->ms[i] < t)) {
        t = m->ms[i];
        rank = p->rank;
      }
    }
    if (t > 0 || o->mapping != TSR_MAP_AUTO)
      return t;
  }
  return 0;
}

double tsrp_build_time_of(const tsrp_dataset *ds, const tsrp_mask_times *m,
                          const tsr_plan_opts *o)
{
  return time_of(ds, m, o, 0);
}

double tsrp_build_auto_time_of(const tsrp_dataset *ds, const tsrp_mask_times *m,
                               const tsr_plan_opts *o)
{
  return time_of(ds, m, o, 1);
}

/* The plan's variant as the bundle ranks it on arch (tsri_variant_rank for
 * a plan without partial tiles: a nm variant is timed only where it serves,
 * and there the bundle prefers it). */
static void plan_variant(const char *arch, tsrp_plan_row *p)
{
  tsr_variant v;
  tsr_variant_need need = {0};
  tsr_error e = {0};
  p->membership = p->head_dim = p->dtype = 0;
  p->rank = -1;
  if (tsri_variant_parse(p->variant, &v, &e) != TSR_OK)
    return;
  p->membership = v.membership;
  p->head_dim = v.head_dim;
  p->dtype = (int)v.dtype;
  p->rank = tsri_variant_rank(&v, arch, &need);
}

static tsr_status load_plans(tsr_db *db, tsrp_dataset *ds, tsr_error *err)
{
  sqlite3 *h = tsri_db_sqlite(db);
  sqlite3_stmt *st = NULL;
  int64_t cap = 0;
  int rc;
  if (sqlite3_prepare_v2(h, "SELECT id, mapping, tile_m, tile_n, tasks, variant FROM plans "
                            "ORDER BY id", -1, &st, NULL) != SQLITE_OK)
    return sql_fail(db, err);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    tsrp_plan_row *p;
    tsr_mapping mpe = TSR_MAP_AUTO;
    tsr_tasks tke = TSR_TASKS_AUTO;
    int mp = tsr_plan_parse_mapping((const char *)sqlite3_column_text(st, 1), &mpe) ? -1
                                                                                  : (int)mpe;
    int tk = tsr_plan_parse_tasks((const char *)sqlite3_column_text(st, 4), &tke) ? -1
                                                                                 : (int)tke;
    if (mp <= 0 || tk <= 0) {
      int64_t id = sqlite3_column_int64(st, 0);
      sqlite3_finalize(st);
      return tsr_error_set(err, TSR_ERR_DB,
                           "cannot derive lookup table in '%s': plan %" PRId64
                           " has an unknown mapping or task layout", tsr_db_path(db), id);
    }
    if (ds->n_plans == cap) {
      int64_t nc = cap ? 2 * cap : 32;
      tsrp_plan_row *np = realloc(ds->plans, sizeof *np * (size_t)nc);
      if (!np) {
        sqlite3_finalize(st);
        return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory loading plans");
      }
      ds->plans = np;
      cap = nc;
    }
    p = &ds->plans[ds->n_plans++];
    p->id = sqlite3_column_int64(st, 0);
    p->mapping = (tsr_mapping)mp;
    p->tile_m = sqlite3_column_int(st, 2);
    p->tile_n = sqlite3_column_int(st, 3);
    p->tasks = (tsr_tasks)tk;
    snprintf(p->variant, sizeof p->variant, "%s", (const char *)sqlite3_column_text(st, 5));
    plan_variant(ds->arch, p);
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? TSR_OK : sql_fail(db, err);
}

#define GPU_GROUP "SELECT id FROM gpus WHERE name = ?1 AND multiprocessors = ?2"

tsr_status tsrp_build_load(tsr_db *db, const char *gpu, int multiprocessors, const char *split,
                           tsrp_dataset *ds, tsr_error *err)
{
  sqlite3 *h = tsri_db_sqlite(db);
  sqlite3_stmt *st = NULL;
  tsr_status s;
  int64_t cap = 0, last_mask = -1, last_plan = -1;
  int rc;
  memset(ds, 0, sizeof *ds);
  snprintf(ds->gpu, sizeof ds->gpu, "%s", gpu);
  ds->multiprocessors = multiprocessors;
  if (!split)
    split = "profile";
  if (sqlite3_prepare_v2(h, "SELECT arch FROM gpus WHERE name=? ORDER BY id DESC", -1, &st,
                         NULL) != SQLITE_OK)
    goto dbfail;
  sqlite3_bind_text(st, 1, gpu, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) == SQLITE_ROW)
    snprintf(ds->arch, sizeof ds->arch, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  st = NULL;
  if ((s = load_plans(db, ds, err)) != TSR_OK)
    goto fail;
  /* Masks with features, sorted by id. */
  if (sqlite3_prepare_v2(h,
                         "SELECT DISTINCT f.mask_id, k.path, k.family FROM mask_features f "
                         "JOIN masks k ON k.id = f.mask_id WHERE f.gpu_id IN (" GPU_GROUP ") "
                         "AND f.version = ?3 AND k.split = ?4 ORDER BY f.mask_id",
                         -1, &st, NULL) != SQLITE_OK)
    goto dbfail;
  sqlite3_bind_text(st, 1, gpu, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 2, multiprocessors);
  sqlite3_bind_int(st, 3, TSR_FEATURES_VERSION);
  sqlite3_bind_text(st, 4, split, -1, SQLITE_TRANSIENT);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    tsrp_mask_times *m;
    if (ds->n_masks == cap) {
      int64_t nc = cap ? 2 * cap : 64;
      tsrp_mask_times *nm = realloc(ds->masks, sizeof *nm * (size_t)nc);
      if (!nm)
        goto nomem;
      ds->masks = nm;
      cap = nc;
    }
    m = &ds->masks[ds->n_masks++];
    memset(m, 0, sizeof *m);
    m->mask_id = sqlite3_column_int64(st, 0);
    snprintf(m->path, sizeof m->path, "%s", (const char *)sqlite3_column_text(st, 1));
    snprintf(m->family, sizeof m->family, "%s", (const char *)sqlite3_column_text(st, 2));
  }
  if (rc != SQLITE_DONE)
    goto dbfail;
  sqlite3_finalize(st);
  st = NULL;
  /* Features. */
  if (sqlite3_prepare_v2(h,
                         "SELECT mask_id, name, value FROM mask_features WHERE gpu_id IN "
                         "(" GPU_GROUP ") AND version = ?3",
                         -1, &st, NULL) != SQLITE_OK)
    goto dbfail;
  sqlite3_bind_text(st, 1, gpu, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 2, multiprocessors);
  sqlite3_bind_int(st, 3, TSR_FEATURES_VERSION);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t mi = mask_index(ds, sqlite3_column_int64(st, 0));
    if (mi >= 0)
      tsr_features_set(&ds->masks[mi].f, (const char *)sqlite3_column_text(st, 1),
                       sqlite3_column_double(st, 2));
  }
  if (rc != SQLITE_DONE)
    goto dbfail;
  sqlite3_finalize(st);
  st = NULL;
  /* Medians of the current builds: a variant row superseded by a newer row
   * of the same name (new template hash, compiler or options) is skipped. */
  if (sqlite3_prepare_v2(h,
                         "SELECT m.mask_id, m.plan_id, m.median_ms FROM measurements m "
                         "JOIN masks k ON k.id = m.mask_id WHERE m.gpu_id IN (" GPU_GROUP ") "
                         "AND m.status = 'ok' AND k.split = ?3 AND (m.variant_id = 0 OR "
                         "m.variant_id IN (SELECT max(id) FROM variants GROUP BY name)) "
                         "ORDER BY m.mask_id, m.plan_id, m.id DESC",
                         -1, &st, NULL) != SQLITE_OK)
    goto dbfail;
  sqlite3_bind_text(st, 1, gpu, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 2, multiprocessors);
  sqlite3_bind_text(st, 3, split, -1, SQLITE_TRANSIENT);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t mid = sqlite3_column_int64(st, 0), pid = sqlite3_column_int64(st, 1);
    int64_t mi = mask_index(ds, mid);
    tsrp_mask_times *m;
    if (mi < 0 || (mid == last_mask && pid == last_plan))
      continue; /* no features, or an older GPU row's timing of the same pair */
    last_mask = mid;
    last_plan = pid;
    m = &ds->masks[mi];
    if (m->n == 0 || (m->n >= 8 && (m->n & (m->n - 1)) == 0)) { /* 8, 16, 32, ... */
      int nc = m->n ? 2 * m->n : 8;
      int64_t *np = realloc(m->plan_ids, sizeof *np * (size_t)nc);
      double *nt;
      if (!np)
        goto nomem;
      m->plan_ids = np;
      nt = realloc(m->ms, sizeof *nt * (size_t)nc);
      if (!nt)
        goto nomem;
      m->ms = nt;
    }
    m->plan_ids[m->n] = pid;
    m->ms[m->n] = sqlite3_column_double(st, 2);
    m->n++;
    ds->measurements++;
  }
  if (rc != SQLITE_DONE)
    goto dbfail;
  sqlite3_finalize(st);
  return TSR_OK;
nomem:
  s = tsr_error_set(err, TSR_ERR_NOMEM, "out of memory loading timings");
  goto fail;
dbfail:
  s = sql_fail(db, err);
fail:
  sqlite3_finalize(st);
  tsrp_build_free(ds);
  return s;
}

/* ---- Derivation -------------------------------------------------------- */

/* A mask keyed by its region at a level (bins -1 at level 2). */
typedef struct {
  tsr_region key;
  int64_t mask;
} keyed;

static int keyed_cmp(const void *a, const void *b)
{
  const keyed *x = a, *y = b;
  int c = memcmp(&x->key, &y->key, sizeof x->key);
  if (c)
    return c;
  return (x->mask > y->mask) - (x->mask < y->mask);
}

static const char *dtype_text(int dt)
{
  return tsr_dtype_name((tsr_dtype)dt);
}

/* A row leaves the base plan (the direct mapping: what selection falls back
 * to) only for a geometric-mean gain of at least this much on its profiled
 * masks.  Smaller gains are within the run-to-run spread of a few masks and
 * do not carry over: on the H200 sweep of 2026-11-29 13:12 a row that chose
 * split tasks for a 1.01x gain on 12 demo masks ran 1.36x slower than the
 * base plan on the evaluation split's radial masks.  1.025 rather than
 * 1.02: on the recorded sweeps of both cards, derived on one split and
 * evaluated on the other both ways round, it lowers the regret of all four
 * evaluations and the masks more than 2% slower than the automatic plan
 * (with tsr_select's borrowing gain; BENCHMARKS.md, 2026-12-07 21:00 UTC). */
#define TSRP_BUILD_MARGIN 1.025

/* Whether plan pr is the base plan o on the variant the request path runs
 * without a row (an automatic base mapping matches every mapping, as
 * tsrp_build_time_of resolves it): the highest-ranked variant of its shape,
 * dtype and head dim among those with the same membership code (the bundle picks the nm one
 * where it serves, else the mb one).  Any other variant leaves the base
 * plan like another shape and needs the margin (issue 20: when every flat
 * variant counted as base, rows of the 2026-12-02 sweep took dyn variants
 * for gains under the margin, and on its evaluation split ran up to 6%
 * slower than the automatic plan). */
static int is_base(const tsrp_dataset *ds, const tsrp_plan_row *pr, const tsr_plan_opts *o)
{
  int64_t q;
  if (pr->tile_m != o->tile_m || pr->tile_n != o->tile_n || pr->tasks != o->tasks ||
      (o->mapping != TSR_MAP_AUTO && pr->mapping != o->mapping))
    return 0;
  for (q = 0; q < ds->n_plans; q++) {
    const tsrp_plan_row *x = &ds->plans[q];
    if (x->mapping == pr->mapping && x->tile_m == pr->tile_m && x->tile_n == pr->tile_n &&
        x->tasks == pr->tasks && x->membership == pr->membership && x->dtype == pr->dtype &&
        x->head_dim == pr->head_dim && x->rank > pr->rank)
      return 0;
  }
  return 1;
}

/* Plan p on the group's masks: how many timed it (returned), and the sum
 * of log(time / the mask's best time) over those. */
static int64_t plan_score(const tsrp_dataset *ds, const keyed *group, int64_t n, int64_t p,
                          double *score)
{
  int64_t i, cover = 0;
  *score = 0;
  for (i = 0; i < n; i++) {
    const tsrp_mask_times *m = &ds->masks[group[i].mask];
    double t = tsrp_build_time(m, ds->plans[p].id), b = tsrp_build_best(m, NULL);
    if (t > 0 && b > 0) {
      cover++;
      *score += log(t / b);
    }
  }
  return cover;
}

/* Picks the plan for masks idx[0..n) and inserts its row: the one of best
 * geometric-mean regret among those timed on the most masks, unless the
 * best base-plan candidate comes within TSRP_BUILD_MARGIN of it. */
static tsr_status emit_row(tsr_db *db, const tsrp_dataset *ds, const char *arch, int level,
                           const keyed *group, int64_t n, int64_t *rows, tsr_error *err)
{
  int64_t p, i, best = -1, best_cover = 0, base_p = -1;
  double best_score = 0, base_score = 0, sp_sum = 0;
  int sp_n = 0;
  const tsrp_plan_row *pr;
  tsr_plan_opts base0;
  sqlite3_stmt *st = NULL;
  /* The base plan depends only on exact key fields (geometry): one per group. */
  tsr_select_base(&ds->masks[group[0].mask].f, &base0);
  for (p = 0; p < ds->n_plans; p++) {
    double score;
    int64_t cover = plan_score(ds, group, n, p, &score);
    if (cover == 0)
      continue;
    if (cover > best_cover || (cover == best_cover && score / cover < best_score / best_cover)) {
      best = p;
      best_cover = cover;
      best_score = score;
    }
  }
  if (best < 0)
    return TSR_OK; /* nothing timed in this region */
  for (p = 0; p < ds->n_plans; p++) {
    double score;
    int64_t cover;
    if (!is_base(ds, &ds->plans[p], &base0))
      continue;
    cover = plan_score(ds, group, n, p, &score);
    if (cover == best_cover && (base_p < 0 || score < base_score)) {
      base_p = p;
      base_score = score;
    }
  }
  if (base_p >= 0 && base_p != best &&
      exp((base_score - best_score) / (double)best_cover) < TSRP_BUILD_MARGIN) {
    best = base_p;
    best_score = base_score;
  }
  pr = &ds->plans[best];
  for (i = 0; i < n; i++) {
    const tsrp_mask_times *m = &ds->masks[group[i].mask];
    tsr_plan_opts base;
    double t = tsrp_build_time(m, pr->id), tb;
    tsr_select_base(&m->f, &base);
    tb = tsrp_build_time_of(ds, m, &base);
    if (t > 0 && tb > 0) {
      sp_sum += log(tb / t);
      sp_n++;
    }
  }
  if (sqlite3_prepare_v2(tsri_db_sqlite(db),
                         "INSERT INTO lookup (gpu_name, arch, multiprocessors, feature_version, "
                         "level, dtype, head_dim, bq, bk, seq_bin, density_bin, spread_bin, "
                         "fill_bin, mapping, tile_m, tile_n, tasks, variant, masks, regret, "
                         "speedup) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         -1, &st, NULL) != SQLITE_OK)
    return sql_fail(db, err);
  sqlite3_bind_text(st, 1, ds->gpu, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, arch, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 3, ds->multiprocessors);
  sqlite3_bind_int(st, 4, TSR_FEATURES_VERSION);
  sqlite3_bind_int(st, 5, level);
  sqlite3_bind_text(st, 6, dtype_text(group[0].key.dtype), -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 7, group[0].key.head_dim);
  sqlite3_bind_int(st, 8, group[0].key.bq);
  sqlite3_bind_int(st, 9, group[0].key.bk);
  sqlite3_bind_int(st, 10, group[0].key.seq_bin);
  sqlite3_bind_int(st, 11, group[0].key.density_bin);
  sqlite3_bind_int(st, 12, group[0].key.spread_bin);
  sqlite3_bind_int(st, 13, group[0].key.fill_bin);
  sqlite3_bind_text(st, 14, tsr_plan_mapping_name(pr->mapping), -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 15, pr->tile_m);
  sqlite3_bind_int(st, 16, pr->tile_n);
  sqlite3_bind_text(st, 17, tsr_plan_tasks_name(pr->tasks), -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 18, pr->variant, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 19, n);
  sqlite3_bind_double(st, 20, exp(best_score / (double)best_cover));
  sqlite3_bind_double(st, 21, sp_n ? exp(sp_sum / sp_n) : 1.0);
  if (sqlite3_step(st) != SQLITE_DONE) {
    tsr_status s = sql_fail(db, err);
    sqlite3_finalize(st);
    return s;
  }
  sqlite3_finalize(st);
  (*rows)++;
  return TSR_OK;
}

static tsr_status build_gpu(tsr_db *db, const char *gpu, int sms, const char *split,
                            tsrp_build_stats *stats, tsr_error *err)
{
  tsrp_dataset ds;
  keyed *k = NULL;
  const char *arch = ds.arch;
  int64_t i, rows = 0, used = 0;
  int level;
  sqlite3_stmt *st = NULL;
  tsr_status s = tsrp_build_load(db, gpu, sms, split, &ds, err);
  if (s != TSR_OK)
    return s;
  k = malloc(sizeof *k * (size_t)(ds.n_masks ? ds.n_masks : 1));
  if (!k) {
    tsrp_build_free(&ds);
    return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory deriving lookup table");
  }
  for (i = 0; i < ds.n_masks; i++)
    used += ds.masks[i].n > 0;
  if (used == 0) /* nothing timed on this split: the GPU's rows stay */
    goto done;
  if ((s = tsri_db_begin(db, err)) != TSR_OK)
    goto done;
  if (sqlite3_prepare_v2(tsri_db_sqlite(db),
                         "DELETE FROM lookup WHERE gpu_name=? AND multiprocessors=? AND "
                         "feature_version=?",
                         -1, &st, NULL) != SQLITE_OK)
    goto dbfail;
  sqlite3_bind_text(st, 1, gpu, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 2, sms);
  sqlite3_bind_int(st, 3, TSR_FEATURES_VERSION);
  if (sqlite3_step(st) != SQLITE_DONE)
    goto dbfail;
  sqlite3_finalize(st);
  st = NULL;
  /* Level 1 has no rows of its own: it is the nearest level-0 row. */
  for (level = 0; level < TSR_SELECT_LEVELS; level += 2) {
    int64_t n = 0, a, b;
    for (i = 0; i < ds.n_masks; i++)
      if (ds.masks[i].n > 0) {
        tsr_region r;
        tsr_select_region(&ds.masks[i].f, &r);
        memset(&k[n].key, 0, sizeof k[n].key);
        tsr_select_region_at(&r, level, &k[n].key);
        k[n++].mask = i;
      }
    qsort(k, (size_t)n, sizeof *k, keyed_cmp);
    for (a = 0; a < n; a = b) {
      for (b = a + 1; b < n && !memcmp(&k[a].key, &k[b].key, sizeof k[a].key); b++)
        ;
      if ((s = emit_row(db, &ds, arch, level, k + a, b - a, &rows, err)) != TSR_OK)
        goto fail;
    }
  }
  if (sqlite3_prepare_v2(tsri_db_sqlite(db),
                         "INSERT OR REPLACE INTO lookup_meta (gpu_name, multiprocessors, "
                         "feature_version, built, masks, measurements, note) VALUES "
                         "(?, ?, ?, strftime('%Y-%m-%dT%H:%M:%SZ','now'), ?, ?, ?)",
                         -1, &st, NULL) != SQLITE_OK)
    goto dbfail;
  sqlite3_bind_text(st, 1, gpu, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 2, sms);
  sqlite3_bind_int(st, 3, TSR_FEATURES_VERSION);
  sqlite3_bind_int64(st, 4, used);
  sqlite3_bind_int64(st, 5, ds.measurements);
  sqlite3_bind_text(st, 6, split ? split : "profile", -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE)
    goto dbfail;
  sqlite3_finalize(st);
  st = NULL;
  if ((s = tsri_db_commit(db, err)) != TSR_OK)
    goto done;
  stats->gpus++;
  stats->masks += used;
  stats->measurements += ds.measurements;
  stats->rows += rows;
  goto done;
dbfail:
  s = sql_fail(db, err);
fail:
  sqlite3_finalize(st);
  tsri_db_rollback(db);
done:
  free(k);
  tsrp_build_free(&ds);
  return s;
}

tsr_status tsrp_build_run(tsr_db *db, const tsrp_build_opts *o, tsrp_build_stats *stats,
                          tsr_error *err)
{
  sqlite3_stmt *st = NULL;
  char (*names)[128] = NULL;
  int *sms = NULL, n = 0, cap = 0, i, rc;
  tsr_status s = TSR_OK;
  memset(stats, 0, sizeof *stats);
  /* GPUs (name, multiprocessors) that have ok measurements. */
  if (sqlite3_prepare_v2(tsri_db_sqlite(db),
                         "SELECT DISTINCT g.name, g.multiprocessors FROM gpus g JOIN "
                         "measurements m ON m.gpu_id = g.id WHERE m.status = 'ok' AND "
                         "(?1 IS NULL OR g.name = ?1) ORDER BY g.name, g.multiprocessors",
                         -1, &st, NULL) != SQLITE_OK)
    return sql_fail(db, err);
  if (o->gpu)
    sqlite3_bind_text(st, 1, o->gpu, -1, SQLITE_TRANSIENT);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == cap) {
      int nc = cap ? 2 * cap : 4;
      void *nn = realloc(names, sizeof *names * (size_t)nc), *ns;
      if (!nn) {
        s = tsr_error_set(err, TSR_ERR_NOMEM, "out of memory");
        break;
      }
      names = nn;
      ns = realloc(sms, sizeof *sms * (size_t)nc);
      if (!ns) {
        s = tsr_error_set(err, TSR_ERR_NOMEM, "out of memory");
        break;
      }
      sms = ns;
      cap = nc;
    }
    snprintf(names[n], sizeof names[n], "%s", (const char *)sqlite3_column_text(st, 0));
    sms[n++] = sqlite3_column_int(st, 1);
  }
  if (s == TSR_OK && rc != SQLITE_DONE)
    s = sql_fail(db, err);
  sqlite3_finalize(st);
  if (s == TSR_OK && n == 0)
    s = tsr_error_set(err, TSR_ERR_INVALID,
                      "cannot derive lookup table in '%s': no timings%s%s%s", tsr_db_path(db),
                      o->gpu ? " for '" : "", o->gpu ? o->gpu : "", o->gpu ? "'" : "");
  for (i = 0; s == TSR_OK && i < n; i++)
    s = build_gpu(db, names[i], sms[i], o->split, stats, err);
  if (s == TSR_OK && n > 0 && stats->gpus == 0)
    s = tsr_error_set(err, TSR_ERR_INVALID,
                      "cannot derive lookup table in '%s': no timings of split '%s'%s%s%s",
                      tsr_db_path(db), o->split ? o->split : "profile", o->gpu ? " for '" : "",
                      o->gpu ? o->gpu : "", o->gpu ? "'" : "");
  free(names);
  free(sms);
  return s;
}

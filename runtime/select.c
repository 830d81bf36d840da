/*
 * select.c: picks a plan (mapping, tile, task layout, variant) for a mask
 * from its features and the lookup table tessera-profile derived.
 *
 * The table is read from SQLite once (tsr_select_load) into a compact array
 * sorted by (level, region key); a selection bins the features, then runs
 * one binary search per level, finest first: a few dozen integer
 * comparisons, well under a microsecond.  A miss at every level, a row whose
 * mapping does not apply to the mask's geometry, or an empty table falls back
 * to the base plan, which every geometry admits and `plan verify` proves.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_impl.h"
#include "plan_impl.h"
#include "select_impl.h"

#define KEY_LEN 9 /* level + 8 region fields */
#define NEAREST_PREFIX "nearest region: "

typedef struct {
  int32_t key[KEY_LEN];
  int64_t id;
  int16_t tile_m, tile_n;
  uint8_t mapping, tasks;
  int32_t masks;
  float regret, speedup;
  uint8_t fate;   /* tsr_row_fate: TSR_ROW_RUNS until a context settles it */
  char variant[96];
  /* The reason text of a hit, made once at load (and completed once by a
   * context's bundle check): a selection copies it whole, after the
   * nearest region's prefix. */
  char why[sizeof ((tsr_selection *)0)->reason - sizeof NEAREST_PREFIX + 1];
} row;

struct tsr_selector {
  row *rows;
  int64_t n;
  char gpu[128];
  int multiprocessors;
  char note[160]; /* why the table is empty, for explanations */
};

/* ---- Regions ----------------------------------------------------------- */

/* Bin edges.  Chosen where the plan preference is expected to change:
 * density decides between many small tiles and few large ones, row spread
 * decides whether long rows are split, and fill at 128x128 says how much a
 * combined 128x128 tile would waste on finer blocks. */
static const double density_edges[] = {0.03, 0.06, 0.12, 0.2, 0.3, 0.45, 0.65};
static const double spread_edges[] = {0.15, 0.5};
static const double fill_edges[] = {0.5, 0.8};

static int bin(double v, const double *edges, int n)
{
  int i = 0;
  while (i < n && v >= edges[i])
    i++;
  return i;
}

/* The mask's fill at tile_m x tile_n: 1 when that tile is not a feature
 * tile (nothing is known against it), the measured value when there is one.
 * Features published by the GPU planner measure the planner's own tile only
 * (fill < 0 elsewhere); a larger tile's fill is then estimated from a
 * measured tile that divides it, as if its touched fraction t = density /
 * fill of those sub-tiles were scattered independently: a tile of g of
 * them is touched with probability 1 - (1 - t)^g.  That is exact for
 * random masks (random 128x64 blocks at 25%: 0.571 at 128x128, as
 * measured) and low for clustered ones, so an estimate errs toward finer
 * tiles.  *measured (may be NULL) says which; -1 when nothing is known. */
static double fill_est(const tsr_features *f, int tile_m, int tile_n, int *measured)
{
  int i, m, n, feature_tile = 0;
  if (measured)
    *measured = 1;
  for (i = 0; i < TSR_FEATURE_TILES; i++) {
    tsr_features_tile(i, &m, &n);
    if (m == tile_m && n == tile_n) {
      if (f->fill[i] >= 0)
        return f->fill[i];
      feature_tile = 1;
    }
  }
  if (!feature_tile)
    return 1.0;
  if (measured)
    *measured = 0;
  for (i = 0; i < TSR_FEATURE_TILES; i++) {
    double t, g;
    tsr_features_tile(i, &m, &n);
    if (f->fill[i] <= 0 || tile_m % m || tile_n % n || f->density <= 0)
      continue;
    t = f->density / f->fill[i];
    if (t >= 1)
      return f->density;
    g = (double)(tile_m / m) * (tile_n / n);
    return f->density / (1 - pow(1 - t, g));
  }
  return -1;
}

/* The fill of a row's tiles on this mask.  A gather tile packs g = tile_n /
 * bk selected key blocks of one query block, so it computes only selected
 * blocks (whole logical blocks: their own fill is 1) but for the last tile
 * of a row whose count is not a multiple of g: with n selected blocks a
 * row on average, about (g - 1) / 2 blocks a row, fill n / (n + (g-1)/2).
 * Its tile's fill as combine would count the key blocks the gather never
 * computes (0.53 for random 128x64 blocks at 10%, against 0.99). */
static double row_fill(const tsr_features *f, int mapping, int tile_m, int tile_n, int *measured)
{
  double n;
  if (mapping != TSR_MAP_GATHER || f->bk <= 0 || f->seq_k <= 0)
    return fill_est(f, tile_m, tile_n, measured);
  if (measured)
    *measured = 1; /* from the density alone, which is always measured */
  n = f->block_density * (double)((f->seq_k + f->bk - 1) / f->bk);
  return n > 0 ? n / (n + (double)(tile_n / f->bk - 1) / 2) : 1;
}

void tsr_select_region(const tsr_features *f, tsr_region *r)
{
  int64_t s = f->seq_q > 0 ? f->seq_q : 1;
  int sb = 0;
  while (s > 1) {
    s >>= 1;
    sb++;
  }
  r->dtype = (int)f->dtype;
  r->head_dim = (int)f->head_dim;
  r->bq = (int)f->bq;
  r->bk = (int)f->bk;
  r->seq_bin = sb;
  r->density_bin = bin(f->density, density_edges, 7);
  r->spread_bin = bin(f->row_cv, spread_edges, 2);
  r->fill_bin = bin(fill_est(f, 128, 128, NULL), fill_edges, 2);
}

void tsr_select_region_at(const tsr_region *r, int level, tsr_region *out)
{
  *out = *r;
  if (level >= 2) {
    out->seq_bin = -1;
    out->spread_bin = -1;
    out->density_bin = -1;
    out->fill_bin = -1;
  }
}

static void make_key(const tsr_region *r, int level, int32_t *k)
{
  tsr_region x;
  tsr_select_region_at(r, level, &x);
  k[0] = level == 1 ? 0 : level;
  k[1] = x.dtype;
  k[2] = x.head_dim;
  k[3] = x.bq;
  k[4] = x.bk;
  k[5] = x.seq_bin;
  k[6] = x.density_bin;
  k[7] = x.spread_bin;
  k[8] = x.fill_bin;
}

static int key_cmp(const int32_t *a, const int32_t *b)
{
  int i;
  for (i = 0; i < KEY_LEN; i++)
    if (a[i] != b[i])
      return a[i] < b[i] ? -1 : 1;
  return 0;
}

static int row_cmp(const void *a, const void *b)
{
  return key_cmp(((const row *)a)->key, ((const row *)b)->key);
}

/* Compares (level, dtype, head dim, bq, bk) only. */
static int key_cmp5(const int32_t *a, const int32_t *b)
{
  int i;
  for (i = 0; i < 5; i++)
    if (a[i] != b[i])
      return a[i] < b[i] ? -1 : 1;
  return 0;
}

/* Fills the selection from a row hit at `level`. */
static void take(const row *r, const tsr_features *f, tsr_selection *out, int level)
{
  out->opts.mapping = (tsr_mapping)r->mapping;
  out->opts.tile_m = r->tile_m;
  out->opts.tile_n = r->tile_n;
  out->opts.tasks = (tsr_tasks)r->tasks;
  out->opts.num_sms = f->num_sms;
  memcpy(out->variant, r->variant, sizeof out->variant);
  out->opts.variant = out->variant[0] ? out->variant : NULL;
  out->from_table = 1;
  out->level = level;
  out->row_id = r->id;
  if (level == 1) {
    memcpy(out->reason, NEAREST_PREFIX, sizeof NEAREST_PREFIX - 1);
    memcpy(out->reason + sizeof NEAREST_PREFIX - 1, r->why, sizeof r->why);
  } else {
    memcpy(out->reason, r->why, sizeof r->why);
  }
}

/* ---- Loading ----------------------------------------------------------- */

static tsr_status load_fail(tsr_db *db, tsr_error *err)
{
  return tsr_error_set(err, TSR_ERR_DB, "cannot read lookup table from '%s': %s", tsr_db_path(db),
                       tsri_db_errmsg(db));
}

/* Column i as text, "" for NULL (a printf of NULL would say "(null)"). */
static const char *col_text(sqlite3_stmt *st, int i)
{
  const char *t = (const char *)sqlite3_column_text(st, i);
  return t ? t : "";
}

/* Whether the integer columns of a lookup row (level, head_dim, bq, bk,
 * the bins, tile_m, tile_n, masks) fit 32 bits: sqlite3_column_int would
 * truncate a wider value silently (bk 99999999999 read as 1215752191).  The
 * first that does not goes to *bad. */
static int cols_fit_int32(sqlite3_stmt *st, int *bad)
{
  static const int cols[] = {1, 3, 4, 5, 6, 7, 8, 9, 11, 12, 15};
  size_t i;
  for (i = 0; i < sizeof cols / sizeof cols[0]; i++) {
    int64_t v = sqlite3_column_int64(st, cols[i]);
    if (v < INT32_MIN || v > INT32_MAX) {
      *bad = cols[i];
      return 0;
    }
  }
  return 1;
}

/* dtypes as stored in the lookup table: their tsr_dtype_name. */
static int dtype_parse(const char *s)
{
  tsr_dtype d;
  return tsr_dtype_parse(s, &d) ? -1 : (int)d;
}

/* The GPU a selection without a device name reads into s: TSR_DEFAULT_GPU
 * where the table has rows for it (the embedded tables hold several cards,
 * and a host-only context stands for the H200), else the first the table
 * knows (by name, then multiprocessors); none leaves s->gpu empty. */
static int first_gpu(sqlite3 *h, tsr_selector *s)
{
  sqlite3_stmt *st = NULL;
  int rc;
  if (sqlite3_prepare_v2(h,
                         "SELECT gpu_name, multiprocessors FROM lookup WHERE feature_version=? "
                         "ORDER BY gpu_name <> ?2, gpu_name, multiprocessors LIMIT 1",
                         -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int(st, 1, TSR_FEATURES_VERSION);
  sqlite3_bind_text(st, 2, TSR_DEFAULT_GPU, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    snprintf(s->gpu, sizeof s->gpu, "%s", col_text(st, 0));
    s->multiprocessors = sqlite3_column_int(st, 1);
  }
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

/* Appends the lookup row at st (the query of tsr_select_load) to s after
 * checking it; the caller finalizes st after an error, whose message quotes
 * the row's texts. */
static tsr_status read_row(tsr_db *db, sqlite3_stmt *st, tsr_selector *s, int64_t *cap,
                           tsr_error *err)
{
  row *r;
  const char *dt = (const char *)sqlite3_column_text(st, 2);
  const char *mp = (const char *)sqlite3_column_text(st, 10);
  const char *tk = (const char *)sqlite3_column_text(st, 13);
  const char *va = (const char *)sqlite3_column_text(st, 14);
  int dti = dt ? dtype_parse(dt) : -1;
  tsr_mapping mpe = TSR_MAP_AUTO;
  tsr_tasks tke = TSR_TASKS_AUTO;
  int mpi = tsr_plan_parse_mapping(mp, &mpe) ? -1 : (int)mpe;
  int tki = tsr_plan_parse_tasks(tk, &tke) ? -1 : (int)tke, level, i;
  int64_t id = sqlite3_column_int64(st, 0);
  int wide = -1;
  if (s->n == TSR_SELECT_MAX_ROWS)
    return tsr_error_set(err, TSR_ERR_DB,
                         "cannot read lookup table from '%s': more than %lld rows "
                         "for '%s', the most a lookup table may have",
                         tsr_db_path(db), (long long)TSR_SELECT_MAX_ROWS, s->gpu);
  if (!cols_fit_int32(st, &wide))
    return tsr_error_set(err, TSR_ERR_DB,
                         "cannot read lookup table from '%s': row %" PRId64
                         " has %s %lld, out of range",
                         tsr_db_path(db), id, sqlite3_column_name(st, wide),
                         (long long)sqlite3_column_int64(st, wide));
  level = sqlite3_column_int(st, 1);
  if (dti < 0 || mpi <= 0 || tki <= 0 || level < 0 || level >= TSR_SELECT_LEVELS ||
      sqlite3_column_int(st, 11) <= 0 || sqlite3_column_int(st, 12) <= 0 ||
      sqlite3_column_int(st, 11) > 1024 || sqlite3_column_int(st, 12) > 1024)
    return tsr_error_set(err, TSR_ERR_DB,
                         "cannot read lookup table from '%s': row %" PRId64
                         " is malformed (dtype '%s', mapping '%s', tasks '%s', "
                         "level %d)",
                         tsr_db_path(db), id, dt ? dt : "", mp ? mp : "", tk ? tk : "", level);
  if (s->n == *cap) {
    int64_t nc = *cap ? *cap * 2 : 64;
    row *nr = realloc(s->rows, sizeof *nr * (size_t)nc);
    if (!nr)
      return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory loading lookup table");
    s->rows = nr;
    *cap = nc;
  }
  r = &s->rows[s->n++];
  memset(r, 0, sizeof *r);
  r->id = id;
  r->key[0] = level;
  r->key[1] = dti;
  for (i = 2; i < KEY_LEN; i++)
    r->key[i] = sqlite3_column_int(st, i + 1);
  r->mapping = (uint8_t)mpi;
  r->tile_m = (int16_t)sqlite3_column_int(st, 11);
  r->tile_n = (int16_t)sqlite3_column_int(st, 12);
  r->tasks = (uint8_t)tki;
  snprintf(r->variant, sizeof r->variant, "%s", va ? va : "");
  r->masks = sqlite3_column_int(st, 15);
  r->regret = (float)sqlite3_column_double(st, 16);
  r->speedup = (float)sqlite3_column_double(st, 17);
  return TSR_OK;
}

/* Each row's reason, once; and why an empty table is empty. */
static void make_reasons(tsr_db *db, tsr_selector *s)
{
  int64_t i;
  for (i = 0; i < s->n; i++) {
    row *r = &s->rows[i];
    snprintf(r->why, sizeof r->why,
             "table row %" PRId64 " at level %d for %.40s: best of %d profiled masks, "
             "regret %.3f, speed-up %.2fx over the base plan",
             r->id, (int)r->key[0], s->gpu, (int)r->masks, r->regret, r->speedup);
  }
  if (s->n > 0)
    return;
  if (!strcmp(tsr_db_path(db), ":memory:"))
    snprintf(s->note, sizeof s->note,
             "the embedded default lookup table has no rows%s%.40s%s (feature version %d)",
             s->gpu[0] ? " for '" : "", s->gpu, s->gpu[0] ? "'" : "", TSR_FEATURES_VERSION);
  else if (!s->gpu[0])
    snprintf(s->note, sizeof s->note, "the lookup table in '%.60s' has no rows (feature version %d)",
             tsr_db_path(db), TSR_FEATURES_VERSION);
  else
    snprintf(s->note, sizeof s->note, "the lookup table in '%.60s' has no rows for '%.40s' (%d SMs)",
             tsr_db_path(db), s->gpu, s->multiprocessors);
}

tsr_status tsr_select_load(tsr_db *db, const char *gpu, int multiprocessors, tsr_selector **out,
                           tsr_error *err)
{
  sqlite3 *h = tsri_db_sqlite(db);
  sqlite3_stmt *st = NULL;
  tsr_selector *s;
  tsr_status bad = TSR_OK;
  int64_t cap = 0;
  int rc;
  if (!out)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_select_load: out is NULL");
  *out = NULL;
  if (!h)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot load lookup table: no database");
  s = calloc(1, sizeof *s);
  if (!s)
    return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory loading lookup table");
  /* Which GPU: the one asked for, else the default one or the first. */
  if (gpu && *gpu) {
    snprintf(s->gpu, sizeof s->gpu, "%s", gpu);
    s->multiprocessors = multiprocessors;
  } else if (first_gpu(h, s)) {
    goto dbfail;
  }
  if (sqlite3_prepare_v2(h,
                         "SELECT id, level, dtype, head_dim, bq, bk, seq_bin, density_bin, "
                         "spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, variant, masks, "
                         "regret, speedup FROM lookup WHERE gpu_name=? AND "
                         "(?2 = 0 OR multiprocessors=?2) AND feature_version=?",
                         -1, &st, NULL) != SQLITE_OK)
    goto dbfail;
  sqlite3_bind_text(st, 1, s->gpu, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 2, s->multiprocessors);
  sqlite3_bind_int(st, 3, TSR_FEATURES_VERSION);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if ((bad = read_row(db, st, s, &cap, err)) != TSR_OK) {
      sqlite3_finalize(st); /* after the message: it invalidates the texts */
      tsr_select_destroy(s);
      return bad;
    }
  if (rc != SQLITE_DONE)
    goto dbfail;
  sqlite3_finalize(st);
  if (s->n > 0)
    qsort(s->rows, (size_t)s->n, sizeof *s->rows, row_cmp);
  make_reasons(db, s);
  *out = s;
  return TSR_OK;
dbfail:
  {
    tsr_status r = load_fail(db, err);
    sqlite3_finalize(st);
    tsr_select_destroy(s);
    return r;
  }
}

tsr_status tsr_select_open(const char *db_path, const char *gpu, int multiprocessors,
                           tsr_selector **out, tsr_error *err)
{
  tsr_db *db;
  tsr_status st = tsr_db_open(db_path, TSR_DB_READONLY, &db, err);
  if (st != TSR_OK) {
    if (out)
      *out = NULL;
    return st;
  }
  st = tsr_select_load(db, gpu, multiprocessors, out, err);
  tsr_db_close(db);
  return st;
}

void tsr_select_destroy(tsr_selector *s)
{
  if (!s)
    return;
  free(s->rows);
  free(s);
}

int64_t tsr_select_rows(const tsr_selector *s) { return s ? s->n : 0; }
const char *tsr_select_gpu(const tsr_selector *s) { return s ? s->gpu : ""; }

/* ---- Selection --------------------------------------------------------- */

int tsr_select_eligible(const tsr_features *f, tsr_mapping mapping, int tile_m, int tile_n,
                        const char **why)
{
  /* Why each mapping does not apply, as reasons say it. */
  static const char *const needs[] = {[TSR_MAP_RETAIN] = "retain needs blocks equal to the tile",
                                      [TSR_MAP_COMBINE] = "combine needs tiles that span several blocks",
                                      [TSR_MAP_SUBDIVIDE] = "subdivide needs blocks larger than the tile",
                                      [TSR_MAP_GATHER] = "gather needs uniform blocks bq x bk and the tile bq x 2bk"};
  const char *w = NULL;
  int comb = 0, sub = 0;
  if (tile_m <= 0 || tile_n <= 0) {
    w = "the tile is not positive";
  } else if (mapping == TSR_MAP_GATHER) {
    /* The planner's rule (map.c); variable blocks (bq, bk 0) fail it. */
    if (!tsri_map_gather_fits(f->bq, f->bk, tile_m, tile_n))
      w = needs[TSR_MAP_GATHER];
  } else if (!f->bq || !f->bk) {
    /* Variable blocks: only the planner can tell; it reports a mapping that
     * does not fit as unsupported and the caller falls back. */
    if (mapping == TSR_MAP_RETAIN)
      w = "retain needs uniform blocks, the geometry is variable";
  } else {
    /* The planner's own rule (map.c), on the features' geometry. */
    tsri_map_relation_uniform(f->bq, f->bk, f->seq_q, f->seq_k, tile_m, tile_n, &comb, &sub);
    if (!tsri_map_applies(mapping, comb, sub))
      w = needs[mapping];
  }
  if (why)
    *why = w;
  return w == NULL;
}

void tsr_select_base(const tsr_features *f, tsr_plan_opts *o)
{
  int i, tm, tn;
  memset(o, 0, sizeof *o);
  o->tile_m = o->tile_n = 128;
  o->tasks = TSR_TASKS_ROW;
  o->num_sms = f->num_sms;
  for (i = 0; i < TSR_FEATURE_TILES; i++) {
    tsr_features_tile(i, &tm, &tn);
    if (f->bq == tm && f->bk == tn) {
      o->mapping = TSR_MAP_RETAIN;
      o->tile_m = tm;
      o->tile_n = tn;
      return;
    }
  }
  /* 128x128 tiles: combined over small or unaligned blocks, subdivided
   * inside large aligned ones; for variable blocks the planner decides. */
  if (tsr_select_eligible(f, TSR_MAP_COMBINE, 128, 128, NULL) && f->bq)
    o->mapping = TSR_MAP_COMBINE;
  else if (tsr_select_eligible(f, TSR_MAP_SUBDIVIDE, 128, 128, NULL) && f->bq)
    o->mapping = TSR_MAP_SUBDIVIDE;
  else
    o->mapping = TSR_MAP_AUTO;
}

/* Appends to a bounded text without printf: selection stays well under a
 * microsecond even on a miss (and under sanitizers, which slow printf). */
typedef struct {
  char *p;
  size_t n, len;
} text;

static void put_s(text *t, const char *s)
{
  while (*s && t->len + 1 < t->n)
    t->p[t->len++] = *s++;
  t->p[t->len] = '\0';
}

static void put_i(text *t, int64_t v)
{
  char buf[24];
  int i = 0;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    buf[i++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0)
    buf[i++] = '-';
  while (i > 0 && t->len + 1 < t->n)
    t->p[t->len++] = buf[--i];
  t->p[t->len] = '\0';
}

/* v with three decimals (a gain of 1.0555 is not "1.06", under 1.06);
 * "?" outside [0, 1e9) (a hand-written row's value). */
static void put_f3(text *t, double v)
{
  int64_t c;
  if (!(v >= 0 && v < 1e9)) {
    put_s(t, "?");
    return;
  }
  c = (int64_t)(v * 1000 + 0.5);
  put_i(t, c / 1000);
  put_s(t, c % 1000 < 10 ? ".00" : c % 1000 < 100 ? ".0" : ".");
  put_i(t, c % 1000);
}

static void region_text(text *t, const tsr_region *r)
{
  put_s(t, tsr_dtype_name((tsr_dtype)r->dtype));
  put_s(t, " d");
  put_i(t, r->head_dim);
  put_s(t, " ");
  put_i(t, r->bq);
  put_s(t, "x");
  put_i(t, r->bk);
  put_s(t, " seq ");
  put_i(t, r->seq_bin);
  put_s(t, " density ");
  put_i(t, r->density_bin);
  put_s(t, " spread ");
  put_i(t, r->spread_bin);
  put_s(t, " fill ");
  put_i(t, r->fill_bin);
}

/* "row 12 (combine 128x128)" */
static void row_text(text *t, const row *r)
{
  put_s(t, "row ");
  put_i(t, r->id);
  put_s(t, " (");
  put_s(t, tsr_plan_mapping_name((tsr_mapping)r->mapping));
  put_s(t, " ");
  put_i(t, r->tile_m);
  put_s(t, "x");
  put_i(t, r->tile_n);
  put_s(t, ")");
}

/* Distance between two level-0 keys of one geometry: density and fill
 * bins count twice (they move the best tile and mapping most), sequence
 * length and row spread once. */
static int32_t key_distance(const int32_t *a, const int32_t *b)
{
  int32_t d = 0, i;
  static const int32_t w[KEY_LEN] = {0, 0, 0, 0, 0, 1, 2, 1, 2};
  for (i = 5; i < KEY_LEN; i++)
    d += w[i] * (a[i] > b[i] ? a[i] - b[i] : b[i] - a[i]);
  return d;
}

/* A row borrowed from another region (the nearest one, or the geometry-wide
 * row) was timed on masks of another fill, and a larger tile than the base
 * plan's pays for its masked-out pairs only while its higher rate covers
 * them.  On the H200 the sm90 kernels ran 64x64 tiles at about 350 TFLOP/s,
 * 128x64 at 506 and 128x128 at 650 (BENCHMARKS.md), close to the square
 * root of the tile area; combining random 128x64 blocks at 25% density into
 * 128x128 tiles (fill 0.57 against 1.0) measured 1.46x slower than retaining
 * them.  So a borrowed row whose tile is larger than the base plan's is
 * taken only when its fill on this mask is at least sqrt(base area / row
 * area) times the base tile's fill (a gather row's fill: row_fill).
 * Exact-region rows are always taken: they were timed on masks like this
 * one. */
static int fill_ok(const tsr_features *f, const tsr_plan_opts *base, const row *r)
{
  double area_base = (double)base->tile_m * base->tile_n, area_row = (double)r->tile_m * r->tile_n;
  double fill_row, fill_base;
  if (area_base <= 0 || area_row <= area_base)
    return 1;
  fill_row = row_fill(f, r->mapping, r->tile_m, r->tile_n, NULL);
  fill_base = fill_est(f, base->tile_m, base->tile_n, NULL);
  if (fill_row < 0 || fill_base < 0) /* nothing known: the larger tile must not gamble */
    return 0;
  return fill_row >= sqrt(area_base / area_row) * fill_base;
}

/* Whether an exact-region row must also pass fill_ok: when its tile's fill
 * is an estimate, the region's fill bin is one too, so "timed on masks like
 * this one" is no longer known. */
static int fill_estimated(const tsr_features *f, const row *r)
{
  int measured;
  row_fill(f, r->mapping, r->tile_m, r->tile_n, &measured);
  return !measured;
}

/* Whether the fill the region's fill bin comes from (128x128) was measured,
 * not estimated from another tile's. */
static int region_fill_measured(const tsr_features *f)
{
  int measured;
  fill_est(f, 128, 128, &measured);
  return measured;
}

/* Plan preferences move with the sequence length (at a few thousand tokens
 * load balance favours smaller tiles, at tens of thousands it does not):
 * a borrowed row applies only within one octave (seq bin) of a level-0 row
 * of its geometry, that is, of masks that were profiled.  A geometry with
 * no level-0 row at all (a hand-written table: tessera-profile init --sql)
 * says nothing about sequence lengths, and its rows apply to all. */
static int seq_near(const tsr_selector *s, const int32_t *key0)
{
  int64_t i;
  int any = 0;
  for (i = 0; i < s->n; i++) {
    const row *r = &s->rows[i];
    int32_t d = r->key[5] - key0[5];
    if (key_cmp5(r->key, key0) != 0)
      continue;
    if (d >= -1 && d <= 1)
      return 1;
    any = 1;
  }
  return !any;
}

/* A row borrowed from the nearest region was timed on masks of another
 * density, spread or fill, and its gain there carries over only in part.
 * On the recorded sweeps (db/h100-timings.sql.gz, db/h200-timings.sql.gz),
 * each derived on one split and evaluated on the other, both ways round,
 * borrowed rows that gained 1.05x over the base plan on their own masks
 * ran 3-6% slower than the automatic plan on their neighbours' (the demo's
 * SVG masks through subdivide 64x128, on both cards), while rows gaining
 * 1.2-1.3x mostly kept most of it (VSA's cubes borrowing 64x64 and 64x128
 * tiles ran 1.12-1.21x faster than the automatic plan; not Wan2.1-1.3B's,
 * whose other fill turned the gain into 0.94-0.98x).
 * So a borrowed row runs only for a gain of at least this much on its own
 * masks; under it the base plan runs (taking it: 29 -> 14 masks more than
 * 2% slower than the automatic plan over the four evaluations, with the
 * derivation's margin at 1.025; BENCHMARKS.md, 2026-12-07 21:00 UTC). */
#define TSR_SELECT_BORROW_GAIN 1.06

/* A geometry-wide row (level 2) is one plan for every mask of a geometry;
 * one that runs more than this much slower than each of its own masks' best
 * (its regret) fits none of them, and borrowed for a mask outside every
 * profiled region it is a gamble: GPU-planned CogVideoX sparge masks took
 * such a row (subdivide 64x128, regret 1.074) at 0.80x the automatic plan's
 * speed in the H200's cross-validation, the one evaluation it moved
 * (BENCHMARKS.md, 2026-12-07 21:00 UTC).  Such a row is skipped. */
#define TSR_SELECT_GEOMETRY_REGRET 1.05

/* The eligible level-0 row of the same dtype, head dim and geometry whose
 * region is nearest to `key` (ties: more profiled masks), within one seq
 * bin of it (seq_near), and whose tile wastes no more than the base plan's
 * on this mask (fill_ok); NULL if none.
 * Rows of one geometry are contiguous in key order: one binary search for
 * the first, then a scan of that geometry's rows (tens). */
static const row *nearest(const tsr_selector *s, const int32_t *key, const tsr_features *f,
                          const tsr_plan_opts *base)
{
  int64_t lo = 0, hi = s->n, i;
  const row *best = NULL;
  int32_t best_d = 0;
  while (lo < hi) { /* first row whose (level, dtype, dim, bq, bk) >= key's */
    int64_t mid = (lo + hi) / 2;
    if (key_cmp5(s->rows[mid].key, key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (i = lo; i < s->n && key_cmp5(s->rows[i].key, key) == 0; i++) {
    const row *r = &s->rows[i];
    int32_t d = key_distance(r->key, key);
    if (r->key[5] < key[5] - 1 || r->key[5] > key[5] + 1) /* seq_near */
      continue;
    if (!tsr_select_eligible(f, (tsr_mapping)r->mapping, r->tile_m, r->tile_n, NULL) || !fill_ok(f, base, r))
      continue;
    if (!best || d < best_d || (d == best_d && r->masks > best->masks)) {
      best = r;
      best_d = d;
    }
  }
  return best;
}

/* A hit on a row that cannot run on the context's device
 * (TSR_ROW_NO_KERNEL): the row's reason, which says so, then the
 * fallback's. */
static void no_kernel(tsr_selection *out, const tsr_plan_opts *base, const char *tail)
{
  text t;
  t.p = out->reason;
  t.n = sizeof out->reason;
  t.len = strlen(out->reason);
  put_s(&t, tail);
  out->opts = *base;
  out->variant[0] = '\0';
  out->from_table = 0;
  out->level = -1;
  out->row_id = -1;
}

/* tsr_select_plan, with `tail` ending the reason of a fallback (": base
 * plan", or ": automatic plan" on the request path). */
static tsr_status select_core(const tsr_selector *s, const tsr_features *f, tsr_selection *out,
                              const char *tail, tsr_error *err)
{
  int level;
  const row *skipped = NULL, *weak = NULL;
  const char *skipped_why = NULL;
  int32_t key0[KEY_LEN];
  tsr_plan_opts base;
  text t;
  if (!f || !out)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot select a plan: %s is NULL",
                         !f ? "features" : "output");
  if (f->seq_q <= 0 || f->seq_k <= 0 || f->head_dim <= 0)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot select a plan: features describe an empty problem (%" PRId64
                         "x%" PRId64 ", head dim %" PRId64 ")",
                         f->seq_q, f->seq_k, f->head_dim);
  memset(&out->opts, 0, sizeof out->opts);
  out->variant[0] = '\0';
  out->from_table = 0;
  tsr_select_region(f, &out->region);
  tsr_select_base(f, &base); /* the fallback, and what borrowed rows must not waste more than */
  make_key(&out->region, 0, key0);
  for (level = 0; s && level < TSR_SELECT_LEVELS; level++) {
    int32_t key[KEY_LEN];
    int64_t lo = 0, hi = s->n - 1;
    make_key(&out->region, level, key);
    if (level == 1) {
      const row *r = nearest(s, key, f, &base);
      /* In float, as rows hold it: a row of 1.06 reads as 1.0599999.  Only
       * where the region's fill is measured: estimated (a GPU template's
       * features at another tile), the region is itself uncertain, and the
       * nearest row is often the one of the mask's own region; refused, it
       * made GPU templates alternate between its plan and the automatic
       * one step after step (6 masks of the H100's eval split). */
      if (r && r->speedup < (float)TSR_SELECT_BORROW_GAIN && region_fill_measured(f)) {
        /* Nor the geometry-wide row: borrowed too, and falling to it
         * instead left 17 masks more than 2% slower, not 14. */
        weak = r;
        break;
      }
      if (r) {
        take(r, f, out, 1);
        if (r->fate == TSR_ROW_NO_KERNEL)
          no_kernel(out, &base, tail);
        return TSR_OK;
      }
      continue;
    }
    while (lo <= hi) {
      int64_t mid = (lo + hi) / 2;
      int c = key_cmp(s->rows[mid].key, key);
      if (c == 0) {
        const row *r = &s->rows[mid];
        const char *why;
        int ok = tsr_select_eligible(f, (tsr_mapping)r->mapping, r->tile_m, r->tile_n, &why);
        if (ok && (level > 0 || fill_estimated(f, r)) && !fill_ok(f, &base, r)) {
          ok = 0;
          why = "its tile computes more masked-out pairs than the base plan's on this mask";
        }
        if (ok && level > 0 && !seq_near(s, key0)) {
          ok = 0;
          why = "no mask of its geometry was profiled within an octave of this sequence length";
        }
        if (ok && level == 2 && r->regret > (float)TSR_SELECT_GEOMETRY_REGRET) {
          ok = 0;
          why = "a geometry-wide row more than 5% slower than the best on its own masks";
        }
        if (!ok) {
          if (!skipped) {
            skipped = r;
            skipped_why = why;
          }
          break;
        }
        take(r, f, out, level);
        if (r->fate == TSR_ROW_NO_KERNEL)
          no_kernel(out, &base, tail);
        return TSR_OK;
      }
      if (c < 0)
        lo = mid + 1;
      else
        hi = mid - 1;
    }
  }
  out->opts = base;
  out->level = -1;
  out->row_id = -1;
  t.p = out->reason;
  t.n = sizeof out->reason;
  t.len = 0;
  out->reason[0] = '\0';
  if (!s) {
    put_s(&t, "no lookup table");
  } else if (s->n == 0) {
    put_s(&t, s->note);
  } else {
    put_s(&t, "no usable row for ");
    region_text(&t, &out->region);
    if (weak) {
      put_s(&t, "; the nearest region's ");
      row_text(&t, weak);
      put_s(&t, " gains ");
      put_f3(&t, weak->speedup);
      put_s(&t, "x over the base plan on its own masks, under the ");
      put_f3(&t, TSR_SELECT_BORROW_GAIN);
      put_s(&t, "x a borrowed row needs");
    } else {
      put_s(&t, " at any level");
    }
    if (skipped) {
      put_s(&t, "; ");
      row_text(&t, skipped);
      put_s(&t, " skipped: ");
      put_s(&t, skipped_why);
    }
  }
  put_s(&t, tail);
  return TSR_OK;
}

tsr_status tsr_select_plan(const tsr_selector *s, const tsr_features *f, tsr_selection *out,
                           tsr_error *err)
{
  return select_core(s, f, out, ": base plan", err);
}

char *tsr_select_explain_json(const tsr_features *f, const tsr_selection *sel)
{
  json_t *o = json_object(), *fe = json_object(), *rg = json_object(), *pl = json_object();
  const char *names[TSR_FEATURES_MAX];
  double values[TSR_FEATURES_MAX];
  char *text;
  int i, n = tsr_features_list(f, names, values);
  for (i = 0; i < n; i++)
    json_object_set_new(fe, names[i], json_real(values[i]));
  json_object_set_new(rg, "dtype", json_string(tsr_dtype_name((tsr_dtype)sel->region.dtype)));
  json_object_set_new(rg, "head_dim", json_integer(sel->region.head_dim));
  json_object_set_new(rg, "bq", json_integer(sel->region.bq));
  json_object_set_new(rg, "bk", json_integer(sel->region.bk));
  json_object_set_new(rg, "seq_bin", json_integer(sel->region.seq_bin));
  json_object_set_new(rg, "density_bin", json_integer(sel->region.density_bin));
  json_object_set_new(rg, "spread_bin", json_integer(sel->region.spread_bin));
  json_object_set_new(rg, "fill_bin", json_integer(sel->region.fill_bin));
  json_object_set_new(pl, "mapping", json_string(tsr_plan_mapping_name(sel->opts.mapping)));
  json_object_set_new(pl, "tile_m", json_integer(sel->opts.tile_m));
  json_object_set_new(pl, "tile_n", json_integer(sel->opts.tile_n));
  json_object_set_new(pl, "tasks", json_string(tsr_plan_tasks_name(sel->opts.tasks)));
  json_object_set_new(pl, "variant", json_string(sel->variant));
  json_object_set_new(o, "features", fe);
  json_object_set_new(o, "feature_version", json_integer(TSR_FEATURES_VERSION));
  json_object_set_new(o, "region", rg);
  json_object_set_new(o, "from_table", json_boolean(sel->from_table));
  json_object_set_new(o, "level", json_integer(sel->level));
  json_object_set_new(o, "row", json_integer(sel->row_id));
  json_object_set_new(o, "plan", pl);
  json_object_set_new(o, "reason", json_string(sel->reason));
  text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(o);
  return text;
}

/* ---- The request path -------------------------------------------------- */

tsr_status tsr_select_request(const tsr_selector *s, const tsr_features *f,
                              const tsr_plan_opts *base, tsr_selection *out, tsr_error *err)
{
  tsr_plan_opts b;
  tsr_status st;
  if (base)
    b = *base;
  else
    tsr_plan_opts_init(&b);
  if ((st = select_core(s, f, out, ": automatic plan", err)) != TSR_OK)
    return st;
  if (out->from_table) {
    /* The row decides the tile, mapping, task layout and variant; the
     * caller's options keep the rest (arch, split chunk, grid size). */
    b.tile_m = out->opts.tile_m;
    b.tile_n = out->opts.tile_n;
    b.mapping = out->opts.mapping;
    /* Variable blocks: a region pools masks of several block sizes, so the
     * row's combine or subdivide may not apply to this one, and the
     * features cannot tell.  The planner's choice for the row's tile gives
     * the row's plan where it applies (the mapping only names how tiles
     * meet blocks) and a plan where it does not. */
    if (!f->bq || !f->bk)
      b.mapping = TSR_MAP_AUTO;
    b.tasks = out->opts.tasks;
    b.variant = out->opts.variant;
    /* The table's variants are native builds (timed so): an FP8 plan takes
     * the bundle's FP8 variant for the row's tile instead. */
    if (b.precision != TSR_PREC_NATIVE) {
      size_t n = strlen(out->reason);
      if (out->variant[0])
        snprintf(out->reason + n, sizeof out->reason - n, "; precision %s: not its variant %s",
                 tsr_precision_name(b.precision), out->variant);
      b.variant = NULL;
      out->variant[0] = '\0';
    }
    if (!b.num_sms)
      b.num_sms = out->opts.num_sms;
    out->opts = b;
    return TSR_OK;
  }
  /* A miss keeps what the request path did before there was a table: the
   * automatic planner (or the caller's options). */
  out->opts = b;
  return TSR_OK;
}

/* ---- Rows as a context settles them (select_impl.h) -------------------- */

void tsri_select_row_view(const tsr_selector *s, int64_t i, tsr_row_view *out)
{
  const row *r = &s->rows[i];
  out->dtype = (tsr_dtype)r->key[1];
  out->head_dim = r->key[2];
  out->mapping = (tsr_mapping)r->mapping;
  out->tile_m = r->tile_m;
  out->tile_n = r->tile_n;
  out->variant = r->variant;
}

void tsri_select_row_settle(tsr_selector *s, int64_t i, tsr_row_fate fate, const char *note)
{
  row *r = &s->rows[i];
  size_t len = strlen(r->why);
  r->fate = (uint8_t)fate;
  if (fate != TSR_ROW_RUNS)
    r->variant[0] = '\0';
  if (note)
    snprintf(r->why + len, sizeof r->why - len, "%s", note);
}

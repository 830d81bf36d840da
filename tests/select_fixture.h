/*
 * tests/select_fixture.h: the recorded timings database that the selection,
 * build, report and context suites share (header-only, static inline): a
 * GPU, a sweep, four plans and their variants, masks of three kinds timed
 * by a model (sparse masks run best retained at 64x64, dense ones combined
 * at 128x128, uneven dense rows split), and a host-only context over the
 * build's bundle.
 */
#ifndef TSR_SELECT_FIXTURE_H
#define TSR_SELECT_FIXTURE_H

#include <check.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"
#include "tools.h"
#include "util.h"

/* ---- A recorded timings database --------------------------------------- */

/* Plans of the fixture, in this order. */
enum { P_RETAIN_ROW, P_COMB128_ROW, P_COMB128_SPLIT, P_COMB64_PACK, N_PLANS };
static const tsr_db_plan fixture_plans[N_PLANS] = {
    {TSR_MAP_RETAIN, 64, 64, TSR_TASKS_ROW, "tsr_sm90_bf16_d128_m64n64_s2_g3_flat_mb_tma64"},
    {TSR_MAP_COMBINE, 128, 128, TSR_TASKS_ROW, "tsr_sm90_bf16_d128_m128n128_s2_g3_flat_mb_tma64"},
    {TSR_MAP_COMBINE, 128, 128, TSR_TASKS_SPLIT, "tsr_sm90_bf16_d128_m128n128_s2_g3_flat_mb_tma64"},
    {TSR_MAP_COMBINE, 64, 128, TSR_TASKS_PACK, "tsr_sm90_bf16_d128_m64n128_s2_g3_flat_mb_tma64"},
};

typedef struct {
  tsr_db *db;
  int64_t gpu, sweep, plans[N_PLANS], variants[3];
} fixture;

/* A request: a random mask of 64x64 blocks over seq tokens, 2 heads, head
 * dim 128, with row selection probability dens (all rows equally long
 * when even), and its problem. */
typedef struct {
  tsr_geom *g;
  tsr_mask *m;
  tsr_problem p;
} request;

static inline void make_request(tu_rng *rng, int64_t seq, double dens, int even, request *r)
{
  int64_t n = (seq + 63) / 64, i, j;
  uint8_t *bits = malloc((size_t)(2 * n * n));
  tsr_error err = {0};
  for (i = 0; i < 2 * n; i++) {
    double pr = even ? dens : dens * 2 * tu_uniform(rng) * tu_uniform(rng) * 2;
    for (j = 0; j < n; j++)
      bits[i * n + j] = tu_uniform(rng) < pr;
    bits[i * n + (i % n)] = 1; /* no empty rows */
  }
  r->g = NULL;
  r->m = NULL;
  ck_assert_int_eq(tsr_geom_uniform(seq, seq, 64, 64, &r->g, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 2, n, n, bits, &r->m, &err), TSR_OK);
  memset(&r->p, 0, sizeof r->p);
  r->p.batch = 1;
  r->p.heads_q = r->p.heads_kv = 2;
  r->p.seq_q = r->p.seq_k = seq;
  r->p.head_dim = 128;
  r->p.dtype = TSR_DT_BF16;
  r->p.geom = r->g;
  free(bits);
}

static inline void free_request(request *r)
{
  tsr_mask_destroy(r->m);
  tsr_geom_destroy(r->g);
  r->m = NULL;
  r->g = NULL;
}

/* Features of make_request's mask. */
static inline void mask_features(tu_rng *rng, int64_t seq, double dens, int even, tsr_features *f)
{
  request r;
  tsr_error err = {0};
  make_request(rng, seq, dens, even, &r);
  ck_assert_int_eq(tsr_features_compute(&r.p, r.m, 132, f, &err), TSR_OK);
  free_request(&r);
}

static inline void fixture_open(fixture *fx, const char *path)
{
  tsr_error err = {0};
  tsr_db_gpu g = {"NVIDIA Test", "sm_90a", "cuda 13.0", 132, 150LL << 30, 60LL << 20, 1980000,
                  2619000};
  int i;
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &fx->db, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_put_gpu(fx->db, &g, &fx->gpu, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_start_sweep(fx->db, fx->gpu, "c", "test", &fx->sweep, &err), TSR_OK);
  for (i = 0; i < 3; i++) {
    tsr_db_variant v = {fixture_plans[i == 0 ? 0 : i == 1 ? 1 : 3].variant, "{}", "hash1", "1",
                        "13.0", "sm_90a"};
    ck_assert_int_eq(tsr_db_put_variant(fx->db, &v, &fx->variants[i], &err), TSR_OK);
  }
  for (i = 0; i < N_PLANS; i++)
    ck_assert_int_eq(tsr_db_put_plan(fx->db, &fixture_plans[i], &fx->plans[i], &err), TSR_OK);
}

static inline int64_t variant_of(const fixture *fx, int plan)
{
  return fx->variants[plan == P_RETAIN_ROW ? 0 : plan == P_COMB64_PACK ? 2 : 1];
}

/* The timing model of the fixture: sparse masks run best retained at
 * 64x64, dense ones combined at 128x128, uneven dense rows split. */
static inline void model_times(const tsr_features *f, double *ms)
{
  double work = f->density * 10;
  ms[P_RETAIN_ROW] = work * (f->density < 0.2 ? 1.0 : 1.6);
  ms[P_COMB128_ROW] = work * (f->density < 0.2 ? 1.5 : 1.0) * (f->row_cv > 0.5 ? 1.3 : 1.0);
  ms[P_COMB128_SPLIT] = work * (f->density < 0.2 ? 1.5 : 1.0) * (f->row_cv > 0.5 ? 0.9 : 1.08);
  ms[P_COMB64_PACK] = work * 1.25;
}

/* Records one mask with its features and all plan timings (5 samples each,
 * jittered around the model). */
static inline int64_t record_mask(fixture *fx, tu_rng *rng, const char *name, const char *split,
                           const tsr_features *f, const double *ms)
{
  tsr_error err = {0};
  tsr_db_mask dm = {"c", name, split, "synthetic", "test", "64x64", "bf16",
                    1, 2, 2, f->seq_q, f->seq_k, 128, tu_next(rng)};
  int64_t mid;
  int p, r;
  ck_assert_int_eq(tsr_db_put_mask(fx->db, &dm, &mid, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_put_features(fx->db, mid, fx->gpu, f, &err), TSR_OK);
  for (p = 0; p < N_PLANS; p++) {
    double s[5];
    tsr_db_measurement m = {fx->gpu, mid, fx->plans[p], variant_of(fx, p), fx->sweep, "ok", NULL,
                            2, 5, s};
    for (r = 0; r < 5; r++)
      s[r] = ms[p] * (1 + 0.002 * (tu_uniform(rng) - 0.5));
    ck_assert_msg(tsr_db_record(fx->db, &m, NULL, &err) == TSR_OK, "%s", err.text);
  }
  return mid;
}

/* Features of the 3 kinds: sparse even, dense even, mid-density uneven.
 * Each kind is held to one region (density, spread and fill bins), so
 * every mask of a kind hits the same level-0 row.  keep (may be NULL)
 * receives the request itself. */
static inline void kind_request(tu_rng *rng, int kind, tsr_features *f, request *keep)
{
  int tries;
  for (tries = 0; tries < 200; tries++) {
    tsr_region r;
    request q;
    tsr_error err = {0};
    if (kind == 0)
      make_request(rng, 4096, 0.08, 1, &q);
    else if (kind == 1)
      make_request(rng, 4096, 0.6, 1, &q);
    else
      make_request(rng, 4096, 0.3, 0, &q);
    ck_assert_int_eq(tsr_features_compute(&q.p, q.m, 132, f, &err), TSR_OK);
    tsr_select_region(f, &r);
    if ((kind == 0 && r.density_bin == 2 && r.spread_bin == 1 && r.fill_bin == 0) ||
        (kind == 1 && r.density_bin == 6 && r.spread_bin == 0 && r.fill_bin == 1) ||
        (kind == 2 && r.density_bin == 5 && r.spread_bin == 2 && r.fill_bin == 0)) {
      if (keep)
        *keep = q;
      else
        free_request(&q);
      return;
    }
    free_request(&q);
  }
  ck_abort_msg("could not draw a mask of kind %d", kind);
}

static inline void kind_features(tu_rng *rng, int kind, tsr_features *f)
{
  kind_request(rng, kind, f, NULL);
}

static inline void build_fixture(fixture *fx, const char *path, tu_rng *rng, int per_kind)
{
  int kind, i;
  char name[64];
  fixture_open(fx, path);
  for (kind = 0; kind < 3; kind++)
    for (i = 0; i < per_kind; i++) {
      tsr_features f;
      double ms[N_PLANS];
      kind_features(rng, kind, &f);
      model_times(&f, ms);
      snprintf(name, sizeof name, "k%d_%02d.npy", kind, i);
      record_mask(fx, rng, name, "profile", &f, ms);
      kind_features(rng, kind, &f);
      model_times(&f, ms);
      snprintf(name, sizeof name, "e%d_%02d.npy", kind, i);
      record_mask(fx, rng, name, "eval", &f, ms);
    }
}

static inline int64_t count_db(tsr_db *db, const char *sql)
{
  sqlite3_stmt *st;
  int64_t v = -1;
  ck_assert_int_eq(sqlite3_prepare_v2(tsri_db_sqlite(db), sql, -1, &st, NULL), SQLITE_OK);
  if (sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

static const int expected_plan[3] = {P_RETAIN_ROW, P_COMB128_ROW, P_COMB128_SPLIT};

static inline void assert_plan(const tsr_selection *s, int plan)
{
  const tsr_db_plan *p = &fixture_plans[plan];
  ck_assert_msg(s->opts.mapping == p->mapping && s->opts.tile_m == p->tile_m &&
                    s->opts.tile_n == p->tile_n && s->opts.tasks == p->tasks,
                "selected %s %dx%d %s, expected %s %dx%d %s (%s)",
                tsr_plan_mapping_name(s->opts.mapping), s->opts.tile_m, s->opts.tile_n,
                tsr_plan_tasks_name(s->opts.tasks), tsr_plan_mapping_name(p->mapping),
                p->tile_m, p->tile_n, tsr_plan_tasks_name(p->tasks), s->reason);
  ck_assert_str_eq(s->variant, p->variant);
  ck_assert_ptr_eq(s->opts.variant, s->variant);
}

static const char *builddir(void)
{
  const char *b = getenv("TSR_TOP_BUILDDIR");
  return b && *b ? b : ".";
}

/* The fixture's variants renamed to the build bundle's real ones (bf16,
 * d128, the sm90 family: 2 warpgroups at 64 rows, 3 at 128). */
static const char real_variants_sql[] =
    "UPDATE lookup SET variant = 'tsr_sm90_bf16_d128_m' || tile_m || 'n' || tile_n || '_s2_g' || "
    "(CASE WHEN tile_m = 128 THEN 3 ELSE 2 END) || '_flat_mb_tma64'";

/* A host-only context over the build's bundle and the table at db. */
static inline tsr_status host_context(const char *db, tsr_context **ctx, tsr_error *err)
{
  static char bundle[4096];
  tsr_context_opts o;
  snprintf(bundle, sizeof bundle, "%s/bundle", builddir());
  tsr_context_opts_init(&o);
  o.device = TSR_CONTEXT_NO_DEVICE;
  o.bundle_dir = bundle;
  o.db_path = db;
  return tsr_context_create(&o, ctx, err);
}

#endif

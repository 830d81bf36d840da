/*
 * check_build.c: the profiler's derivation of the lookup table (tsrp_build_run) from a
 * recorded timings database: stale variant builds, and the margin a row
 * needs to leave the base plan (or its flat variant for a dyn one).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"
#include "tessera.h"
#include "util.h"
#include "select_fixture.h"

static uint64_t base_seed;
static char tmpdir[256];

static void setup(void)
{
  tu_tmpdir(tmpdir, sizeof tmpdir);
}

static void teardown(void)
{
  tu_rmtree(tmpdir);
}

/* A new build of a variant (template hash changed) makes its old timings
 * invisible to the derivation: the table moves to the next best plan. */
START_TEST(test_stale_variant)
{
  tu_rng rng = {base_seed + 31};
  char path[300];
  fixture fx;
  tsrp_build_opts bo = {NULL, NULL};
  tsrp_build_stats bs;
  tsr_selector *sel = NULL;
  tsr_error err = {0};
  tsr_features f;
  tsr_selection s;
  int64_t vid;
  tsr_db_variant v = {fixture_plans[P_RETAIN_ROW].variant, "{}", "hash2", "1", "13.0", "sm_90a"};
  snprintf(path, sizeof path, "%s/s.db", tmpdir);
  build_fixture(&fx, path, &rng, 3);
  ck_assert_int_eq(tsrp_build_run(fx.db, &bo, &bs, &err), TSR_OK);
  ck_assert_int_eq(tsr_select_load(fx.db, NULL, 0, &sel, &err), TSR_OK);
  kind_features(&rng, 0, &f);
  ck_assert_int_eq(tsr_select_plan(sel, &f, &s, &err), TSR_OK);
  ck_assert_int_eq(s.level, 0);
  assert_plan(&s, P_RETAIN_ROW);
  tsr_select_destroy(sel);
  ck_assert_int_eq(tsr_db_put_variant(fx.db, &v, &vid, &err), TSR_OK);
  ck_assert_int_gt(vid, variant_of(&fx, P_RETAIN_ROW));
  ck_assert_int_eq(tsrp_build_run(fx.db, &bo, &bs, &err), TSR_OK);
  ck_assert_int_eq(bs.measurements, 9 * (N_PLANS - 1));
  ck_assert_int_eq(tsr_select_load(fx.db, NULL, 0, &sel, &err), TSR_OK);
  ck_assert_int_eq(tsr_select_plan(sel, &f, &s, &err), TSR_OK);
  ck_assert_int_eq(s.from_table, 1);
  ck_assert_msg(s.opts.mapping != TSR_MAP_RETAIN, "%s", s.reason);
  tsr_select_destroy(sel);
  tsr_db_close(fx.db);
}
END_TEST

/* A row leaves the base plan (retain 64x64 here) only for a gain of 2% or
 * more on its profiled masks: a plan 1% faster is within the spread of a
 * few masks and the row keeps the base plan; one 5% faster is taken. */
START_TEST(test_build_margin)
{
  tu_rng rng = {base_seed + 37};
  char path[300];
  tsrp_build_opts bo = {NULL, NULL};
  tsrp_build_stats bs;
  tsr_error err = {0};
  static const double gain[2] = {0.99, 0.95};
  int g;
  for (g = 0; g < 2; g++) {
    fixture fx;
    tsr_selector *sel = NULL;
    tsr_features f;
    tsr_selection s;
    char name[32];
    int i;
    snprintf(path, sizeof path, "%s/m%d.db", tmpdir, g);
    fixture_open(&fx, path);
    for (i = 0; i < 4; i++) {
      double ms[N_PLANS];
      kind_features(&rng, 0, &f);
      ms[P_RETAIN_ROW] = 1.0 + 0.1 * tu_uniform(&rng);
      ms[P_COMB64_PACK] = ms[P_RETAIN_ROW] * gain[g];
      ms[P_COMB128_ROW] = ms[P_COMB128_SPLIT] = 2 * ms[P_RETAIN_ROW];
      snprintf(name, sizeof name, "g%d_%d.npy", g, i);
      record_mask(&fx, &rng, name, "profile", &f, ms);
    }
    ck_assert_msg(tsrp_build_run(fx.db, &bo, &bs, &err) == TSR_OK, "%s", err.text);
    ck_assert_int_eq(tsr_select_load(fx.db, NULL, 0, &sel, &err), TSR_OK);
    kind_features(&rng, 0, &f);
    ck_assert_int_eq(tsr_select_plan(sel, &f, &s, &err), TSR_OK);
    ck_assert_int_eq(s.level, 0);
    assert_plan(&s, g == 0 ? P_RETAIN_ROW : P_COMB64_PACK);
    tsr_select_destroy(sel);
    tsr_db_close(fx.db);
  }
}
END_TEST

/* The same margin holds for a dyn-layout variant of the base plan itself:
 * the automatic planner never runs one (it ranks below flat), so a row
 * names it only for a gain of 2% or more over the flat base variant; at 1%
 * the row keeps the flat one (issue 20: dyn rows taken for gains under the
 * margin ran up to 6% slower than flat on evaluation masks). */
START_TEST(test_build_dyn_margin)
{
  static const char dyn_name[] = "tsr_sm90_bf16_d128_m64n64_s2_g3_dyn_mb_tma64";
  static const double gain[2] = {0.99, 0.95};
  tu_rng rng = {base_seed + 41};
  char path[300];
  tsrp_build_opts bo = {NULL, NULL};
  tsrp_build_stats bs;
  tsr_error err = {0};
  int g;
  for (g = 0; g < 2; g++) {
    tsr_db_variant dv = {dyn_name, "{}", "hash1", "1", "13.0", "sm_90a"};
    tsr_db_plan dp = {TSR_MAP_RETAIN, 64, 64, TSR_TASKS_ROW, dyn_name};
    fixture fx;
    tsr_selector *sel = NULL;
    tsr_features f;
    tsr_selection s;
    int64_t dvid, dpid;
    char name[32];
    int i, r;
    snprintf(path, sizeof path, "%s/d%d.db", tmpdir, g);
    fixture_open(&fx, path);
    ck_assert_int_eq(tsr_db_put_variant(fx.db, &dv, &dvid, &err), TSR_OK);
    ck_assert_int_eq(tsr_db_put_plan(fx.db, &dp, &dpid, &err), TSR_OK);
    for (i = 0; i < 4; i++) {
      double ms[N_PLANS], smp[5];
      int64_t mid;
      tsr_db_measurement m = {fx.gpu, 0, dpid, dvid, fx.sweep, "ok", NULL, 2, 5, smp};
      kind_features(&rng, 0, &f);
      ms[P_RETAIN_ROW] = 1.0 + 0.1 * tu_uniform(&rng);
      ms[P_COMB64_PACK] = ms[P_COMB128_ROW] = ms[P_COMB128_SPLIT] = 2 * ms[P_RETAIN_ROW];
      snprintf(name, sizeof name, "d%d_%d.npy", g, i);
      mid = record_mask(&fx, &rng, name, "profile", &f, ms);
      m.mask_id = mid;
      for (r = 0; r < 5; r++)
        smp[r] = ms[P_RETAIN_ROW] * gain[g] * (1 + 0.002 * (tu_uniform(&rng) - 0.5));
      ck_assert_msg(tsr_db_record(fx.db, &m, NULL, &err) == TSR_OK, "%s", err.text);
    }
    ck_assert_msg(tsrp_build_run(fx.db, &bo, &bs, &err) == TSR_OK, "%s", err.text);
    ck_assert_int_eq(tsr_select_load(fx.db, NULL, 0, &sel, &err), TSR_OK);
    kind_features(&rng, 0, &f);
    ck_assert_int_eq(tsr_select_plan(sel, &f, &s, &err), TSR_OK);
    ck_assert_int_eq(s.level, 0);
    if (g == 0) {
      assert_plan(&s, P_RETAIN_ROW);
    } else {
      ck_assert_msg(s.opts.mapping == TSR_MAP_RETAIN && s.opts.tile_m == 64 &&
                        s.opts.tile_n == 64 && s.opts.tasks == TSR_TASKS_ROW,
                    "%s", s.reason);
      ck_assert_str_eq(s.variant, dyn_name);
    }
    tsr_select_destroy(sel);
    tsr_db_close(fx.db);
  }
}
END_TEST

/* The automatic plan's time (tsrp_build_auto_time_of) is that of the
 * variant the bundle's rank runs for the shape, not the fastest one timed:
 * at head dim 128 flat nm before dyn nm and before flat mb (three stages
 * here, beside the fixture's two-stage one), even where they ran faster;
 * at head dim 64 dyn nm first.  tsrp_build_time_of keeps the fastest. */
START_TEST(test_auto_time_rank)
{
  static const char *const names[2][3] = {
      {"tsr_sm90_bf16_d128_m64n64_s2_g3_flat_nm_tma64", "tsr_sm90_bf16_d128_m64n64_s2_g3_dyn_nm_tma64",
       "tsr_sm90_bf16_d128_m64n64_s3_g3_flat_mb_tma64"},
      {"tsr_sm90_bf16_d64_m64n64_s2_g3_flat_nm_tma64", "tsr_sm90_bf16_d64_m64n64_s2_g3_dyn_nm_tma64",
       "tsr_sm90_bf16_d64_m64n64_s3_g3_flat_mb_tma64"}};
  tu_rng rng = {base_seed + 43};
  char path[300];
  tsr_error err = {0};
  int d;
  for (d = 0; d < 2; d++) {
    /* flat nm slowest, then dyn nm, flat mb fastest; the fixture's own
     * variant of the shape (flat mb) slower than all three */
    const double t[3] = {1.0 + 0.5 * tu_uniform(&rng), 0.8 + 0.1 * tu_uniform(&rng),
                         0.5 + 0.1 * tu_uniform(&rng)};
    fixture fx;
    tsr_features f;
    tsrp_dataset ds;
    tsr_plan_opts o;
    double ms[N_PLANS], smp[5];
    int64_t mid;
    int i, r;
    snprintf(path, sizeof path, "%s/r%d.db", tmpdir, d);
    fixture_open(&fx, path);
    kind_features(&rng, 0, &f);
    ms[P_RETAIN_ROW] = 2.0;
    ms[P_COMB64_PACK] = ms[P_COMB128_ROW] = ms[P_COMB128_SPLIT] = 4.0;
    mid = record_mask(&fx, &rng, "m.npy", "profile", &f, ms);
    for (i = 0; i < 3; i++) {
      tsr_db_variant dv = {names[d][i], "{}", "hash1", "1", "13.0", "sm_90a"};
      tsr_db_plan dp = {TSR_MAP_RETAIN, 64, 64, TSR_TASKS_ROW, names[d][i]};
      tsr_db_measurement m = {fx.gpu, mid, 0, 0, fx.sweep, "ok", NULL, 2, 5, smp};
      ck_assert_int_eq(tsr_db_put_variant(fx.db, &dv, &m.variant_id, &err), TSR_OK);
      ck_assert_int_eq(tsr_db_put_plan(fx.db, &dp, &m.plan_id, &err), TSR_OK);
      for (r = 0; r < 5; r++)
        smp[r] = t[i];
      ck_assert_msg(tsr_db_record(fx.db, &m, NULL, &err) == TSR_OK, "%s", err.text);
    }
    ck_assert_msg(tsrp_build_load(fx.db, "NVIDIA Test", 132, "profile", &ds, &err) == TSR_OK, "%s",
                  err.text);
    ck_assert_int_eq(ds.n_masks, 1);
    ck_assert_str_eq(ds.arch, "sm_90a");
    tsr_plan_opts_init(&o);
    o.mapping = TSR_MAP_RETAIN;
    o.tile_m = o.tile_n = 64;
    o.tasks = TSR_TASKS_ROW;
    ck_assert_double_eq_tol(tsrp_build_auto_time_of(&ds, &ds.masks[0], &o), t[d ? 1 : 0], 1e-9);
    ck_assert_double_eq_tol(tsrp_build_time_of(&ds, &ds.masks[0], &o), t[2], 1e-9);
    o.tasks = TSR_TASKS_SPLIT; /* a shape nothing timed */
    ck_assert_double_eq(tsrp_build_auto_time_of(&ds, &ds.masks[0], &o), 0);
    tsrp_build_free(&ds);
    tsr_db_close(fx.db);
  }
}
END_TEST

static Suite *build_suite(void)
{
  Suite *s = suite_create("build");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_stale_variant);
  tcase_add_test(tc, test_build_margin);
  tcase_add_test(tc, test_build_dyn_margin);
  tcase_add_test(tc, test_auto_time_rank);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  base_seed = tu_seed("check_build", 20261129u);
  return tu_run_suite(build_suite());
}

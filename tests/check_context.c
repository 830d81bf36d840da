/*
 * check_context.c: the request path's selection (tsr_context_select) through a
 * host-only context: table rows against the build's bundle, fallbacks to
 * the automatic plan, a variable-geometry row whose mapping the mask does
 * not admit, and the embedded default table.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Plans the selection's options, proves the plan exact and returns its
 * summary. */
static void plan_verify(const request *r, const tsr_selection *s, tsr_plan_summary *sum)
{
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  ck_assert_msg(tsr_plan_create(&r->p, r->m, &s->opts, &pl, &err) == TSR_OK, "%s (%s)", err.text,
                s->reason);
  ck_assert_msg(tsr_plan_verify(pl, r->m, &err) == TSR_OK, "%s", err.text);
  tsr_plan_summarize(pl, sum);
  tsr_plan_destroy(pl);
}

/* Whether the selection's options are the automatic planner's (with the
 * device's grid). */
static void assert_automatic(const tsr_selection *s, int num_sms)
{
  ck_assert_int_eq(s->from_table, 0);
  ck_assert_int_eq(s->level, -1);
  ck_assert_int_eq(s->row_id, -1);
  ck_assert_int_eq(s->opts.tile_m, 0);
  ck_assert_int_eq(s->opts.tile_n, 0);
  ck_assert_int_eq(s->opts.mapping, TSR_MAP_AUTO);
  ck_assert_int_eq(s->opts.tasks, TSR_TASKS_AUTO);
  ck_assert_ptr_null(s->opts.variant);
  ck_assert_int_eq(s->opts.split_tiles, 0);
  ck_assert_int_eq(s->opts.num_sms, num_sms);
  ck_assert_msg(strlen(s->reason) > 16 &&
                    !strcmp(s->reason + strlen(s->reason) - 16, ": automatic plan"),
                "%s", s->reason);
}

START_TEST(test_context_select)
{
  tu_rng rng = {base_seed + 97};
  char path[300];
  fixture fx;
  tsrp_build_opts bo = {NULL, NULL};
  tsrp_build_stats bs;
  tsr_context *ctx = NULL;
  tsr_error err = {0};
  tsr_plan_summary sum;
  int kind, i;
  snprintf(path, sizeof path, "%s/c.db", tmpdir);
  build_fixture(&fx, path, &rng, 4);
  ck_assert_int_eq(tsrp_build_run(fx.db, &bo, &bs, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_exec(fx.db, real_variants_sql, &err), TSR_OK);
  tsr_db_close(fx.db);
  ck_assert_msg(host_context(path, &ctx, &err) == TSR_OK, "%s", err.text);
  ck_assert_str_eq(tsr_select_gpu(tsr_context_selector(ctx)), "NVIDIA Test");
  ck_assert_int_eq(tsr_select_rows(tsr_context_selector(ctx)), bs.rows);
  /* Row hits: the row's plan and its variant, which the bundle serves; the
   * plan made from the options is exact. */
  for (kind = 0; kind < 3; kind++)
    for (i = 0; i < 3; i++) {
      request r;
      tsr_features f;
      tsr_selection s;
      char want[96];
      const tsr_db_plan *dp = &fixture_plans[expected_plan[kind]];
      kind_request(&rng, kind, &f, &r);
      memset(&s, 0xa5, sizeof s);
      ck_assert_msg(tsr_context_select(ctx, &r.p, r.m, NULL, &s, &err) == TSR_OK, "%s", err.text);
      ck_assert_msg(s.from_table && s.level == 0, "%s", s.reason);
      ck_assert_int_ge(s.row_id, 1);
      ck_assert_int_eq(s.opts.mapping, dp->mapping);
      ck_assert_int_eq(s.opts.tile_m, dp->tile_m);
      ck_assert_int_eq(s.opts.tile_n, dp->tile_n);
      ck_assert_int_eq(s.opts.tasks, dp->tasks);
      ck_assert_int_eq(s.opts.num_sms, 132);
      snprintf(want, sizeof want, "tsr_sm90_bf16_d128_m%dn%d_s2_g%d_flat_mb_tma64", dp->tile_m,
               dp->tile_n, dp->tile_m == 128 ? 3 : 2);
      ck_assert_str_eq(s.variant, want);
      ck_assert_ptr_eq(s.opts.variant, s.variant);
      ck_assert_int_eq(tsr_gpu_has_variant(ctx, want), 1);
      ck_assert_ptr_null(strstr(s.reason, "bundle"));
      plan_verify(&r, &s, &sum);
      ck_assert_int_eq(sum.tile_m, dp->tile_m);
      ck_assert_int_eq(sum.tile_n, dp->tile_n);
      ck_assert_int_eq(sum.tasks, dp->tasks);
      ck_assert_str_eq(sum.variant, want);
      /* The caller's other options survive a hit. */
      {
        tsr_plan_opts base;
        tsr_plan_opts_init(&base);
        base.split_tiles = 3;
        base.num_sms = 100;
        base.arch = "sm_90a";
        ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, &base, &s, &err), TSR_OK);
        ck_assert_int_eq(s.opts.split_tiles, 3);
        ck_assert_int_eq(s.opts.num_sms, 100);
        ck_assert_str_eq(s.opts.arch, "sm_90a");
        ck_assert_int_eq(s.opts.tile_m, dp->tile_m);
        plan_verify(&r, &s, &sum);
      }
      free_request(&r);
    }
  /* A miss (a head dim the table never saw): the automatic plan, exactly
   * the plan the request path made before there was a table. */
  {
    request r;
    tsr_features f;
    tsr_selection s;
    tsr_plan_opts o;
    tsr_plan *pl = NULL;
    tsr_plan_summary auto_sum;
    kind_request(&rng, 1, &f, &r);
    r.p.head_dim = 64;
    memset(&s, 0xa5, sizeof s);
    ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, NULL, &s, &err), TSR_OK);
    assert_automatic(&s, 132);
    ck_assert_msg(strstr(s.reason, "no usable row for bfloat16 d64") != NULL, "%s", s.reason);
    plan_verify(&r, &s, &sum);
    tsr_plan_opts_init(&o);
    ck_assert_int_eq(tsr_plan_create(&r.p, r.m, &o, &pl, &err), TSR_OK);
    tsr_plan_summarize(pl, &auto_sum);
    tsr_plan_destroy(pl);
    ck_assert_int_eq(sum.tile_m, auto_sum.tile_m);
    ck_assert_int_eq(sum.tile_n, auto_sum.tile_n);
    ck_assert_int_eq(sum.mapping, auto_sum.mapping);
    ck_assert_int_eq(sum.tasks, auto_sum.tasks);
    ck_assert_int_eq(sum.tiles, auto_sum.tiles);
    ck_assert_int_eq(sum.tasks_count, auto_sum.tasks_count);
    ck_assert_int_eq(sum.split_rows, auto_sum.split_rows);
    /* The caller's options are the fallback when given. */
    o.split_tiles = 2;
    o.tasks = TSR_TASKS_SPLIT;
    ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, &o, &s, &err), TSR_OK);
    ck_assert_int_eq(s.from_table, 0);
    ck_assert_int_eq(s.opts.tasks, TSR_TASKS_SPLIT);
    ck_assert_int_eq(s.opts.split_tiles, 2);
    plan_verify(&r, &s, &sum);
    ck_assert_int_eq(sum.tasks, TSR_TASKS_SPLIT);
    /* Without a selector at all. */
    ck_assert_int_eq(tsr_select_request(NULL, &f, NULL, &s, &err), TSR_OK);
    assert_automatic(&s, 0);
    ck_assert_str_eq(s.reason, "no lookup table: automatic plan");
    /* Rejected arguments. */
    ck_assert_int_eq(tsr_context_select(NULL, &r.p, r.m, NULL, &s, &err), TSR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.text, "context is NULL"));
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_context_select(ctx, &r.p, NULL, NULL, &s, &err), TSR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.text, "mask is NULL"));
    tsr_error_clear(&err);
    r.p.heads_q = r.p.heads_kv = 3; /* the mask's 2 heads no longer fit the problem */
    ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, NULL, &s, &err), TSR_ERR_SHAPE);
    ck_assert_msg(strstr(err.text, "3") != NULL, "%s", err.text);
    tsr_error_clear(&err);
    free_request(&r);
  }
  /* A host-only context refuses device work. */
  {
    request r;
    tsr_features f;
    tsr_selection s;
    tsr_plan *pl = NULL;
    kind_request(&rng, 0, &f, &r);
    ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, NULL, &s, &err), TSR_OK);
    ck_assert_int_eq(tsr_plan_create(&r.p, r.m, &s.opts, &pl, &err), TSR_OK);
    ck_assert_int_eq(tsr_gpu_upload(ctx, pl, &err), TSR_ERR_NO_DEVICE);
    ck_assert_ptr_nonnull(strstr(err.text, "no device"));
    tsr_error_clear(&err);
    tsr_plan_destroy(pl);
    free_request(&r);
  }
  tsr_context_destroy(ctx);

  /* Rows naming builds the bundle no longer has (the catalog renamed
   * _flat_ to _pers_, say): the bundle's own variant for the same tile. */
  ck_assert_int_eq(tsr_db_open(path, 0, &fx.db, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_exec(fx.db, "UPDATE lookup SET variant = replace(variant, '_flat_', "
                                      "'_pers_')",
                               &err),
                   TSR_OK);
  tsr_db_close(fx.db);
  ck_assert_msg(host_context(path, &ctx, &err) == TSR_OK, "%s", err.text);
  for (kind = 0; kind < 3; kind++) {
    request r;
    tsr_features f;
    tsr_selection s;
    const tsr_db_plan *dp = &fixture_plans[expected_plan[kind]];
    char gone[96];
    kind_request(&rng, kind, &f, &r);
    snprintf(gone, sizeof gone, "tsr_sm90_bf16_d128_m%dn%d_s2_g%d_pers_mb_tma64", dp->tile_m,
             dp->tile_n, dp->tile_m == 128 ? 3 : 2);
    ck_assert_int_eq(tsr_gpu_has_variant(ctx, gone), 0);
    ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, NULL, &s, &err), TSR_OK);
    ck_assert_msg(s.from_table && s.level == 0, "%s", s.reason);
    ck_assert_int_eq(s.opts.mapping, dp->mapping);
    ck_assert_int_eq(s.opts.tile_m, dp->tile_m);
    ck_assert_int_eq(s.opts.tasks, dp->tasks);
    ck_assert_str_eq(s.variant, "");
    ck_assert_ptr_null(s.opts.variant);
    ck_assert_msg(strstr(s.reason, gone) && strstr(s.reason, "not in the bundle: its own for the tile"),
                  "%s", s.reason);
    plan_verify(&r, &s, &sum);
    ck_assert_int_eq(sum.tile_m, dp->tile_m);
    free_request(&r);
  }
  tsr_context_destroy(ctx);

  /* A row for a head dim the bundle has no variant for: automatic plan. */
  ck_assert_int_eq(tsr_db_open(path, 0, &fx.db, &err), TSR_OK);
  ck_assert_int_eq(tsr_db_exec(fx.db, "UPDATE lookup SET head_dim = 96", &err), TSR_OK);
  tsr_db_close(fx.db);
  ck_assert_msg(host_context(path, &ctx, &err) == TSR_OK, "%s", err.text);
  {
    request r;
    tsr_features f;
    tsr_selection s;
    kind_request(&rng, 2, &f, &r);
    r.p.head_dim = 96;
    ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, NULL, &s, &err), TSR_OK);
    assert_automatic(&s, 132);
    ck_assert_msg(strstr(s.reason, "table row") &&
                      strstr(s.reason, "no bf16 d96 128x128 variant in the bundle for sm_90a"),
                  "%s", s.reason);
    plan_verify(&r, &s, &sum);
    free_request(&r);
  }
  tsr_context_destroy(ctx);
}
END_TEST

/* A variable-geometry region pools masks of several block sizes, so its
 * row's combine or subdivide may not apply to the mask at hand, and the
 * features cannot tell (found by tests/fuzz/fuzz_mask: the shipped row
 * "subdivide 128x128" for variable d64 blocks, on blocks of at most 64
 * tokens, made tsr_plan_create refuse the request path's options).  The
 * request path then plans the row's tile and tasks with the mapping the
 * geometry admits: every variable mask plans, and where the row's mapping
 * applies the plan is the row's. */
START_TEST(test_variable_row_mapping)
{
  static const char *const maps[2] = {"subdivide", "combine"};
  tu_rng rng = {base_seed + 71};
  char path[512];
  int lo, mp;
  snprintf(path, sizeof path, "%s/variable.db", tmpdir);
  for (mp = 0; mp < 2; mp++)
    for (lo = 0; lo < 2; lo++) {
      /* Blocks of 8..64 tokens (no block above a 128 tile: subdivide
       * cannot apply) or of 128 and 256 tokens (every tile boundary on a
       * block boundary: combine cannot apply at 64x64). */
      int tile = mp ? 64 : 128;
      int64_t qs[96], n = 0, sum = 0, i;
      uint8_t *bits;
      tsr_geom *g = NULL;
      tsr_mask *m = NULL;
      tsr_problem p;
      tsr_features f;
      tsr_region r;
      tsr_selection s;
      tsr_selector *sel = NULL;
      tsr_context *ctx = NULL;
      tsr_db *db = NULL;
      tsr_plan *pl = NULL, *want = NULL;
      tsr_plan_opts o;
      tsr_plan_summary a, b;
      tsr_error err = {0};
      char sql[768];
      while (sum < 2300 && n < 96) {
        qs[n] = lo ? tu_range(&rng, 8, 64) : 128 * tu_range(&rng, 1, 2);
        sum += qs[n++];
      }
      ck_assert_int_eq(tsr_geom_variable(qs, n, qs, n, &g, &err), TSR_OK);
      bits = tu_rand_bits(&rng, (size_t)(2 * n * n), 0.7);
      ck_assert_int_eq(tsr_mask_from_bytes(1, 2, n, n, bits, &m, &err), TSR_OK);
      free(bits);
      memset(&p, 0, sizeof p);
      p.batch = 1;
      p.heads_q = p.heads_kv = 2;
      p.seq_q = p.seq_k = sum;
      p.head_dim = 64;
      p.dtype = TSR_DT_BF16;
      p.geom = g;
      ck_assert_int_eq(tsr_features_compute(&p, m, 132, &f, &err), TSR_OK);
      ck_assert_int_eq(f.bq, 0);
      tsr_select_region(&f, &r);
      unlink(path);
      ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
      snprintf(sql, sizeof sql,
               "INSERT INTO lookup (gpu_name, arch, multiprocessors, feature_version, level, "
               "dtype, head_dim, bq, bk, seq_bin, density_bin, spread_bin, fill_bin, mapping, "
               "tile_m, tile_n, tasks, variant, masks, regret, speedup) VALUES ('NVIDIA Test', "
               "'sm_90a', 132, %d, 0, 'bf16', 64, 0, 0, %d, %d, %d, %d, '%s', %d, %d, 'row', "
               "'', 2, 1, 1.1)",
               TSR_FEATURES_VERSION, r.seq_bin, r.density_bin, r.spread_bin, r.fill_bin, maps[mp],
               tile, tile);
      ck_assert_int_eq(tsr_db_exec(db, sql, &err), TSR_OK);
      ck_assert_int_eq(tsr_select_load(db, "NVIDIA Test", 132, &sel, &err), TSR_OK);
      tsr_db_close(db);
      memset(&s, 0xa5, sizeof s);
      ck_assert_int_eq(tsr_select_request(sel, &f, NULL, &s, &err), TSR_OK);
      ck_assert_msg(s.from_table && s.level == 0, "%s", s.reason);
      ck_assert_int_eq(s.opts.tile_m, tile);
      ck_assert_int_eq(s.opts.tile_n, tile);
      ck_assert_int_eq(s.opts.tasks, TSR_TASKS_ROW);
      ck_assert_msg(tsr_plan_create(&p, m, &s.opts, &pl, &err) == TSR_OK,
                    "%s blocks, row %s %dx%d: %s", lo ? "small" : "large", maps[mp], tile, tile,
                    err.text);
      ck_assert_msg(tsr_plan_verify(pl, m, &err) == TSR_OK, "%s", err.text);
      /* Where the row's mapping applies, the plan is the row's. */
      tsr_plan_opts_init(&o);
      o.tile_m = o.tile_n = tile;
      o.tasks = TSR_TASKS_ROW;
      o.mapping = mp ? TSR_MAP_COMBINE : TSR_MAP_SUBDIVIDE;
      if (tsr_plan_create(&p, m, &o, &want, &err) == TSR_OK) {
        tsr_plan_summarize(pl, &a);
        tsr_plan_summarize(want, &b);
        ck_assert_int_eq(a.tiles, b.tiles);
        ck_assert_int_eq(a.partial_tiles, b.partial_tiles);
        ck_assert_int_eq(a.tasks_count, b.tasks_count);
        ck_assert_int_eq(a.membership_words, b.membership_words);
        ck_assert_int_eq(a.members, b.members);
        tsr_plan_destroy(want);
      } else {
        ck_assert_int_eq(err.status, TSR_ERR_UNSUPPORTED);
      }
      tsr_plan_destroy(pl);
      pl = NULL;
      tsr_select_destroy(sel);
      /* The context's request path (the Python binding's) plans too. */
      ck_assert_msg(host_context(path, &ctx, &err) == TSR_OK, "%s", err.text);
      tsr_error_clear(&err);
      ck_assert_int_eq(tsr_context_select(ctx, &p, m, NULL, &s, &err), TSR_OK);
      ck_assert_msg(tsr_plan_create(&p, m, &s.opts, &pl, &err) == TSR_OK, "context: %s (%s)",
                    err.text, s.reason);
      tsr_plan_destroy(pl);
      tsr_context_destroy(ctx);
      tsr_mask_destroy(m);
      tsr_geom_destroy(g);
      (void)i;
    }
}
END_TEST

/* The embedded default table through a host-only context: the shipped
 * H200 rows, their variants checked against the build's bundle. */
START_TEST(test_context_default)
{
  tu_rng rng = {base_seed + 101};
  tsr_context *ctx = NULL;
  tsr_error err = {0};
  int c, hits = 0;
  ck_assert_msg(host_context(NULL, &ctx, &err) == TSR_OK, "%s", err.text);
  ck_assert_str_eq(tsr_select_gpu(tsr_context_selector(ctx)), "NVIDIA H200");
  ck_assert_int_gt(tsr_select_rows(tsr_context_selector(ctx)), 0);
  for (c = 0; c < 12; c++) {
    /* The demo corpus's shape: 2304 tokens, 4 heads, d64, 128x128 or
     * 128x64 blocks, at densities across the table's bins. */
    int64_t bk = c % 2 ? 64 : 128, nq = 18, nk = 2304 / bk, i;
    double dens = 0.1 + 0.8 * tu_uniform(&rng);
    uint8_t *bits = tu_rand_bits(&rng, (size_t)(4 * nq * nk), dens);
    request r;
    tsr_features f;
    tsr_selection raw, s;
    tsr_plan_summary sum;
    for (i = 0; i < 4 * nq; i++)
      bits[i * nk + (i % nk)] = 1;
    ck_assert_int_eq(tsr_geom_uniform(2304, 2304, 128, bk, &r.g, &err), TSR_OK);
    ck_assert_int_eq(tsr_mask_from_bytes(1, 4, nq, nk, bits, &r.m, &err), TSR_OK);
    free(bits);
    memset(&r.p, 0, sizeof r.p);
    r.p.batch = 1;
    r.p.heads_q = r.p.heads_kv = 4;
    r.p.seq_q = r.p.seq_k = 2304;
    r.p.head_dim = 64;
    r.p.dtype = TSR_DT_BF16;
    r.p.geom = r.g;
    ck_assert_int_eq(tsr_features_compute(&r.p, r.m, 132, &f, &err), TSR_OK);
    ck_assert_int_eq(tsr_select_request(tsr_context_selector(ctx), &f, NULL, &raw, &err), TSR_OK);
    ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, NULL, &s, &err), TSR_OK);
    ck_assert_int_eq(s.from_table, raw.from_table);
    if (s.from_table) {
      hits++;
      ck_assert_int_eq(s.row_id, raw.row_id);
      ck_assert_int_eq(s.opts.tile_m, raw.opts.tile_m);
      ck_assert_int_eq(s.opts.mapping, raw.opts.mapping);
      if (!raw.variant[0] || tsr_gpu_has_variant(ctx, raw.variant)) {
        ck_assert_str_eq(s.variant, raw.variant);
      } else {
        ck_assert_str_eq(s.variant, "");
        ck_assert_msg(strstr(s.reason, "not in the bundle"), "%s", s.reason);
      }
    } else {
      assert_automatic(&s, 132);
    }
    plan_verify(&r, &s, &sum);
    free_request(&r);
  }
  /* Every (dtype, head dim, geometry) here has a level-2 row. */
  ck_assert_int_gt(hits, 0);
  tsr_context_destroy(ctx);
}
END_TEST


static Suite *context_suite(void)
{
  Suite *s = suite_create("context");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_context_select);
  tcase_add_test(tc, test_variable_row_mapping);
  tcase_add_test(tc, test_context_default);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr;
  int failed;
  base_seed = tu_seed("check_context", 20261129u);
  sr = srunner_create(context_suite());
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

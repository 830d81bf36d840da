/*
 * check_context.c: the request path's selection (tsr_context_select) through a
 * host-only context: table rows against the build's bundle, fallbacks to
 * the automatic plan, a variable-geometry row whose mapping the mask does
 * not admit, and the embedded default table.  And each rule context.c
 * shares, checked from both sides:
 *  - the rows settled against the bundle once at create give, for random
 *    tables whose rows name random variant builds (served, renamed, of
 *    another tile or dtype, none) and random requests at every level, the
 *    selection the per-request bundle check gave before (transcribed here
 *    from the code it replaced: the raw table's choice, then the variant
 *    check against the bundle, reason and all);
 *  - serves(variant, plan) is one rule: the context's (tsri_context_serves),
 *    the sweep's candidates (tsrp_sweep_candidate), the bundle's pick and
 *    an independent reading of the bundle entry agree on every variant of
 *    the build's bundle over random plans;
 *  - the GPU templates' re-selection (tsri_context_regime, behind
 *    tsr_gpuplan_reselect) chooses what the Python binding chose before it
 *    moved into C (transcribed here), over the tables and shapes
 *    tests/python-binding.sh uses and random stats, ties of the split
 *    estimate's rounding included;
 *  - where the bundle is found (tsri_bundle_dir);
 *  - the gather upgrade (tsri_context_gather): which selections become
 *    gather plans on 128x128 tiles, over bundles with and without a kg
 *    variant, and that a host-only context never upgrades.
 * Host-only contexts over the build's bundle: no GPU needed.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context_impl.h"
#include "plan_impl.h"
#include "profile.h"
#include "sweep.h"
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
  ck_assert_int_eq(tsri_db_exec(fx.db, real_variants_sql, &err), TSR_OK);
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
    ck_assert_msg(strstr(s.reason, "no usable row for bf16 d64") != NULL, "%s", s.reason);
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
  ck_assert_int_eq(tsri_db_exec(fx.db, "UPDATE lookup SET variant = replace(variant, '_flat_', "
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
  ck_assert_int_eq(tsri_db_exec(fx.db, "UPDATE lookup SET head_dim = 96", &err), TSR_OK);
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
      ck_assert_int_eq(tsri_db_exec(db, sql, &err), TSR_OK);
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
  tsr_selector *table = NULL; /* the same table, its rows not checked against a bundle */
  tsr_error err = {0};
  int c, hits = 0;
  ck_assert_msg(host_context(NULL, &ctx, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(tsr_select_open(NULL, NULL, 0, &table, &err), TSR_OK);
  ck_assert_int_eq(tsr_select_rows(table), tsr_select_rows(tsr_context_selector(ctx)));
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
    ck_assert_int_eq(tsr_select_request(table, &f, NULL, &raw, &err), TSR_OK);
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
  tsr_select_destroy(table);
  tsr_context_destroy(ctx);
}
END_TEST


static const char *bundle_path(void)
{
  static char path[4096];
  const char *b = getenv("TSR_TOP_BUILDDIR");
  snprintf(path, sizeof path, "%s/bundle", b && *b ? b : ".");
  return path;
}

static tsr_context *rules_context(const char *db)
{
  tsr_context_opts o;
  tsr_context *ctx = NULL;
  tsr_error err = {0};
  tsr_context_opts_init(&o);
  o.device = TSR_CONTEXT_NO_DEVICE;
  o.bundle_dir = bundle_path();
  o.db_path = db;
  ck_assert_msg(tsr_context_create(&o, &ctx, &err) == TSR_OK, "%s", err.text);
  return ctx;
}

static const char lookup_cols[] =
    "gpu_name, arch, multiprocessors, feature_version, level, dtype, head_dim, bq, bk, seq_bin, "
    "density_bin, spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, variant, masks, regret, "
    "speedup";

/* Appends one lookup row (level 2: bins -1) for the only GPU of a table. */
static void put_row(tsr_db *db, const tsr_region *r, int level, const char *mapping, int tm, int tn,
                    const char *tasks, const char *variant, int masks)
{
  char sql[1200];
  tsr_error err = {0};
  tsr_region k;
  tsr_select_region_at(r, level, &k);
  snprintf(sql, sizeof sql,
           "INSERT OR IGNORE INTO lookup (%s) VALUES ('NVIDIA H200', 'sm_90a', 132, %d, %d, '%s', "
           "%d, %d, %d, %d, %d, %d, %d, '%s', %d, %d, '%s', '%s', %d, 1.0, 1.5)",
           lookup_cols, TSR_FEATURES_VERSION, level, tsr_dtype_name((tsr_dtype)k.dtype), k.head_dim,
           k.bq, k.bk, k.seq_bin, k.density_bin, k.spread_bin, k.fill_bin, mapping, tm, tn, tasks,
           variant, masks);
  ck_assert_msg(tsri_db_exec(db, sql, &err) == TSR_OK, "%s", err.text);
}

/* A request: a random mask over uniform bq x bk blocks of seq tokens. */
typedef struct {
  tsr_geom *g;
  tsr_mask *m;
  tsr_problem p;
  tsr_features f;
} rules_req;

static void rules_request(tu_rng *rng, int64_t seq, int64_t bq, int64_t bk, int64_t head_dim,
                         tsr_dtype dt, rules_req *r)
{
  int64_t nq = (seq + bq - 1) / bq, nk = (seq + bk - 1) / bk;
  uint8_t *bits = tu_rand_bits(rng, (size_t)(2 * nq * nk), 0.05 + 0.9 * tu_uniform(rng));
  tsr_error err = {0};
  ck_assert_int_eq(tsr_geom_uniform(seq, seq, bq, bk, &r->g, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 2, nq, nk, bits, &r->m, &err), TSR_OK);
  free(bits);
  memset(&r->p, 0, sizeof r->p);
  r->p.batch = 1;
  r->p.heads_q = r->p.heads_kv = 2;
  r->p.seq_q = r->p.seq_k = seq;
  r->p.head_dim = head_dim;
  r->p.dtype = dt;
  r->p.geom = r->g;
  ck_assert_int_eq(tsr_features_compute(&r->p, r->m, 0, &r->f, &err), TSR_OK);
}

static void rules_free(rules_req *r)
{
  tsr_mask_destroy(r->m);
  tsr_geom_destroy(r->g);
}

/* ---- The rows settled at create against the per-request check ------------ */

/* The per-request check the context made before its rows were settled at
 * create (gpu.c's resolve_variant, without its memo): the row's variant
 * when the bundle holds it for the target, within shared memory, serving
 * the tile; else no name when some variant serves the tile; else the
 * automatic plan.  Read from the bundle entries directly. */
static void old_resolve(const tsr_bundle *bu, const tsr_features *f, const tsr_plan_opts *base,
                        tsr_selection *out)
{
  const char *arch = "sm_90a";
  int64_t smem = tsri_arch_smem_limit(arch);
  tsr_variant_need need = {0}; /* native precision unless set */
  char note[TSR_VARIANT_NAME_MAX + 96] = "";
  int outcome;
  long i;
  size_t len, n;
  need.dtype = f->dtype;
  need.head_dim = (int)f->head_dim;
  need.bm = out->opts.tile_m;
  need.bn = out->opts.tile_n;
  need.membership = out->opts.mapping != TSR_MAP_RETAIN;
  i = out->variant[0] ? tsri_bundle_find(bu, out->variant) : -1;
  if (i >= 0 && (bu->items[i].targets & (1u << tsri_arch_index(arch))) && bu->items[i].smem <= smem &&
      tsri_variant_serves(&bu->items[i].v, arch, &need)) {
    outcome = 0;
  } else if (tsri_bundle_pick(bu, arch, &need, smem) >= 0) {
    outcome = 1;
    if (out->variant[0])
      snprintf(note, sizeof note,
               i >= 0 ? "; variant %s cannot serve this plan here (membership, arch or shared "
                        "memory): the bundle's own for the tile"
                      : "; variant %s not in the bundle: its own for the tile",
               out->variant);
  } else {
    outcome = 2;
    snprintf(note, sizeof note, "; no %s d%d %dx%d variant in the bundle for %s: automatic plan",
             tsr_dtype_name(f->dtype), need.head_dim, need.bm, need.bn, arch);
  }
  len = strlen(out->reason);
  n = strlen(note);
  if (len + n >= sizeof out->reason)
    n = sizeof out->reason - 1 - len;
  memcpy(out->reason + len, note, n);
  out->reason[len + n] = '\0';
  if (outcome == 0)
    return;
  out->variant[0] = '\0';
  out->opts.variant = NULL;
  if (outcome == 2) {
    out->opts = *base;
    out->from_table = 0;
    out->level = -1;
    out->row_id = -1;
  }
}

static void expect_same(const tsr_selection *got, const tsr_selection *want, const char *what)
{
  ck_assert_msg(!strcmp(got->reason, want->reason), "%s: reason\n  got  '%s'\n  want '%s'", what,
                got->reason, want->reason);
  ck_assert_msg(got->from_table == want->from_table && got->level == want->level &&
                    got->row_id == want->row_id,
                "%s: from_table %d/%d level %d/%d row %lld/%lld", what, got->from_table,
                want->from_table, got->level, want->level, (long long)got->row_id,
                (long long)want->row_id);
  ck_assert_str_eq(got->variant, want->variant);
  ck_assert_int_eq(got->opts.tile_m, want->opts.tile_m);
  ck_assert_int_eq(got->opts.tile_n, want->opts.tile_n);
  ck_assert_int_eq(got->opts.mapping, want->opts.mapping);
  ck_assert_int_eq(got->opts.tasks, want->opts.tasks);
  ck_assert_int_eq(got->opts.num_sms, want->opts.num_sms);
  ck_assert_int_eq(got->opts.split_tiles, want->opts.split_tiles);
  ck_assert(got->opts.variant == (got->variant[0] ? got->variant : NULL));
}

/* A variant name for a row: one the bundle serves the row with, one of
 * another tile or dtype, a renamed build, or none. */
static const char *row_variant(tu_rng *rng, const tsr_bundle *bu, tsr_dtype dt, int hd, int tm, int tn,
                               int membership, char *buf)
{
  tsr_variant_need need = {dt, hd, tm, tn, membership, 0, 0};
  int64_t kind = tu_range(rng, 0, 3);
  long k = tsri_bundle_pick(bu, "sm_90a", &need, tsri_arch_smem_limit("sm_90a"));
  if (kind == 0 && k >= 0)
    return bu->items[k].name;
  if (kind <= 1) /* any build: of another tile or dtype, mostly */
    return bu->items[tu_range(rng, 0, (int64_t)bu->n - 1)].name;
  if (kind == 2) {
    k = (long)tu_range(rng, 0, (int64_t)bu->n - 1);
    snprintf(buf, TSR_VARIANT_NAME_MAX, "%.60s_renamed", bu->items[k].name);
    return buf;
  }
  return "";
}

START_TEST(test_settled_rows_choose_as_before)
{
  static const int64_t blocks[][2] = {{64, 64}, {128, 128}, {128, 64}, {64, 128}, {96, 96}, {48, 48}, {256, 256}};
  static const char *const maps[] = {"retain", "combine", "subdivide"};
  static const char *const layouts[] = {"row", "split", "pack"};
  tu_rng rng = {tu_seed("settled_rows", 11) + 101u * (uint64_t)_i};
  rules_req reqs[24];
  tsr_bundle bu;
  tsr_db *db = NULL;
  tsr_selector *raw = NULL;
  tsr_context *ctx;
  tsr_error err = {0};
  char path[300];
  int i, hits = 0, levels[3] = {0, 0, 0}, settled = 0, fates[3] = {0, 0, 0};
  ck_assert_msg(tsri_bundle_load(bundle_path(), &bu, &err) == TSR_OK, "%s", err.text);
  snprintf(path, sizeof path, "%s/t.db", tmpdir);
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
  /* Requests over a few geometries, and rows for their regions: exact
   * ones, ones of a neighbouring region (the nearest level), and
   * geometry-wide ones. */
  for (i = 0; i < 24; i++) {
    int b = (int)tu_range(&rng, 0, 6), lvl, k;
    tsr_dtype dt = tu_uniform(&rng) < 0.7 ? TSR_DT_BF16 : TSR_DT_F16;
    int64_t hd = tu_uniform(&rng) < 0.8 ? 64 * tu_range(&rng, 1, 2) : 96;
    rules_request(&rng, tu_range(&rng, 600, 4000), blocks[b][0], blocks[b][1], hd, dt, &reqs[i]);
    for (k = 0; k < 2; k++) {
      tsr_region reg;
      int tm, tn, mp = (int)tu_range(&rng, 0, 2);
      char buf[TSR_VARIANT_NAME_MAX];
      tsr_features_tile((int)tu_range(&rng, 0, TSR_FEATURE_TILES - 1), &tm, &tn);
      tsr_select_region(&reqs[i].f, &reg);
      lvl = (int)tu_range(&rng, 0, 2);
      if (lvl == 1) { /* a neighbouring region's level-0 row */
        reg.density_bin += reg.density_bin > 0 ? -1 : 1;
        lvl = 0;
      }
      put_row(db, &reg, lvl, maps[mp], tm, tn, layouts[tu_range(&rng, 0, 2)],
              row_variant(&rng, &bu, dt, (int)hd, tm, tn, mp != 0, buf), (int)tu_range(&rng, 1, 9));
    }
  }
  tsr_db_close(db);
  ctx = rules_context(path);
  ck_assert_int_eq(tsr_select_open(path, NULL, 0, &raw, &err), TSR_OK);
  ck_assert_int_eq(tsr_select_rows(raw), tsr_select_rows(tsr_context_selector(ctx)));
  for (i = 0; i < 24; i++) {
    tsr_selection got, want, again;
    tsr_plan_opts base;
    char what[64];
    int k;
    for (k = 0; k < 2; k++) {
      /* The automatic planner as the fallback, then the caller's own. */
      tsr_plan_opts_init(&base);
      if (k) {
        base.tasks = TSR_TASKS_SPLIT;
        base.split_tiles = (int)tu_range(&rng, 1, 5);
        base.num_sms = (int)tu_range(&rng, 1, 200);
      }
      memset(&got, 0xa5, sizeof got);
      memset(&want, 0x5a, sizeof want);
      ck_assert_int_eq(tsr_context_select(ctx, &reqs[i].p, reqs[i].m, &base, &got, &err), TSR_OK);
      if (!base.num_sms)
        base.num_sms = tsri_context_num_sms(ctx);
      ck_assert_int_eq(tsr_select_request(raw, &reqs[i].f, &base, &want, &err), TSR_OK);
      if (want.from_table) { /* a miss at every level is the same either way */
        old_resolve(&bu, &reqs[i].f, &base, &want);
        settled += strstr(want.reason, "; ") != NULL;
        fates[!want.from_table ? 2 : want.variant[0] ? 0 : 1]++;
      }
      snprintf(what, sizeof what, "request %d, base %d", i, k);
      expect_same(&got, &want, what);
      hits += got.from_table;
      if (got.from_table)
        levels[got.level]++;
      /* The context's own table gives the same through tsr_select_request. */
      ck_assert_int_eq(tsr_select_request(tsr_context_selector(ctx), &reqs[i].f, &base, &again, &err),
                       TSR_OK);
      expect_same(&again, &got, what);
    }
  }
  /* The random tables reach hits and settlements. */
  printf("settled rows: %d hits (levels %d/%d/%d), %d with a note; fates: %d runs, %d any "
         "variant, %d no kernel\n",
         hits, levels[0], levels[1], levels[2], settled, fates[0], fates[1], fates[2]);
  ck_assert_int_gt(hits, 0);
  ck_assert_int_gt(settled, 0);
  for (i = 0; i < 24; i++)
    rules_free(&reqs[i]);
  tsr_select_destroy(raw);
  tsr_context_destroy(ctx);
  tsri_bundle_free(&bu);
}
END_TEST

/* ---- One serves rule ----------------------------------------------------- */

START_TEST(test_serves_one_rule)
{
  tu_rng rng = {tu_seed("serves_one_rule", 17)};
  tsr_context *ctx = rules_context(NULL);
  const tsr_bundle *bu = &ctx->bundle;
  int64_t smem = tsri_arch_smem_limit("sm_90a");
  int a = tsri_arch_index("sm_90a"), c, yes = 0, no = 0;
  size_t i;
  ck_assert_str_eq(tsri_context_arch(ctx), TSR_DEFAULT_ARCH);
  ck_assert_int_eq(tsri_context_num_sms(ctx), TSR_DEFAULT_NUM_SMS);
  ck_assert_int_gt((int)bu->n, 0);
  for (c = 0; c < 200; c++) {
    static const int tiles[] = {32, 64, 96, 128, 256};
    tsr_problem p;
    tsr_variant_need need = {0}; /* native precision unless set */
    int tm = tiles[tu_range(&rng, 0, 4)], tn = tiles[tu_range(&rng, 0, 4)], memb;
    long pick;
    memset(&p, 0, sizeof p);
    p.dtype = tu_uniform(&rng) < 0.5 ? TSR_DT_BF16 : TSR_DT_F16;
    p.head_dim = 64 * tu_range(&rng, 1, 3);
    need.fp8 = tu_uniform(&rng) < 0.25; /* precision fp8 (issue 18): FP8 variants only */
    if (c % 4 == 0) { /* plans of the bundle's own variants, most of them served */
      const tsr_variant *v = &bu->items[tu_range(&rng, 0, (int64_t)bu->n - 1)].v;
      p.dtype = v->dtype;
      p.head_dim = v->head_dim;
      tm = v->bm;
      tn = v->bn;
      need.fp8 = v->fp8;
    }
    for (memb = 0; memb < 2; memb++) {
      need.dtype = p.dtype;
      need.head_dim = (int)p.head_dim;
      need.bm = tm;
      need.bn = tn;
      need.membership = memb;
      /* a gather plan (no membership words) is served by kg variants only */
      need.gather = !memb && !need.fp8 && tm == 128 && tn == 128 && tu_uniform(&rng) < 0.5;
      for (i = 0; i < bu->n; i++) {
        const tsr_bundle_entry *e = &bu->items[i];
        int mine = tsri_context_serves(ctx, e, &need);
        int direct = (e->targets & (1u << a)) && e->smem <= smem && e->v.dtype == need.dtype &&
                     e->v.head_dim == need.head_dim && e->v.bm == tm && e->v.bn == tn &&
                     (!memb || e->v.membership) && !e->v.fp8 == !need.fp8 && !e->v.gather == !need.gather &&
                     tsri_variant_fits(&e->v, "sm_90a", NULL);
        ck_assert_msg(mine == direct, "%s for %s d%d %dx%d%s: context %d, entry %d", e->name,
                      tsr_dtype_name(p.dtype), (int)p.head_dim, tm, tn, memb ? " mb" : "", mine, direct);
        ck_assert_int_eq(mine, tsri_bundle_serves(e, "sm_90a", smem, &need));
        if (!memb && !need.fp8) /* the sweep times what the request path may run (native) */
          ck_assert_int_eq(tsrp_sweep_candidate(ctx, e, &p, tm, tn, need.gather, NULL), mine);
        ck_assert_int_eq(tsrp_sweep_candidate(ctx, e, &p, tm, tn, need.gather, "no-such-variant*"), 0);
        ck_assert_int_eq(tsr_gpu_has_variant(ctx, e->name), !!(e->targets & (1u << a)));
        yes += mine;
        no += !mine;
      }
      pick = tsri_bundle_pick(bu, "sm_90a", &need, smem);
      if (pick >= 0)
        ck_assert(tsri_context_serves(ctx, &bu->items[pick], &need));
      else
        for (i = 0; i < bu->n; i++)
          ck_assert(!tsri_context_serves(ctx, &bu->items[i], &need));
    }
  }
  ck_assert_int_gt(yes, 0);
  ck_assert_int_gt(no, 0);
  tsr_context_destroy(ctx);
}
END_TEST

/* ---- The GPU templates' re-selection ------------------------------------- */

/* Python's round(): half to even, read off the fraction (exact below 2^52). */
static double py_round(double x)
{
  double r = floor(x), d = x - r;
  if (d > 0.5 || (d == 0.5 && fmod(r, 2) != 0))
    r += 1;
  return r;
}

typedef struct {
  int keep, fallback;
  int tile_m, tile_n, mapping, tasks, split;
  char variant[96], reason[384];
} py_regime;

/* _GpuTemplates.pick of python/tessera.py before the policy moved into C,
 * for one step's stats on a template of tile cur_tm x cur_tn. */
static void python_pick(tsr_context *ctx, const tsr_features *f, const tsr_gpuplan_stats *st,
                        const tsr_problem *shape, int cur_tm, int cur_tn, py_regime *out)
{
  tsr_selection sel;
  tsr_plan_opts base;
  tsr_error err = {0};
  memset(out, 0, sizeof *out);
  if (st->step == 0 || st->overflow) {
    out->keep = 1;
    return;
  }
  tsr_plan_opts_init(&base);
  ck_assert_int_eq(tsr_context_select_features(ctx, f, &base, &sel, &err), TSR_OK);
  snprintf(out->reason, sizeof out->reason, "%s", sel.reason);
  if (!sel.from_table) {
    out->fallback = 1;
    return;
  }
  out->tile_m = sel.opts.tile_m;
  out->tile_n = sel.opts.tile_n;
  out->mapping = sel.opts.mapping;
  out->tasks = sel.opts.tasks;
  if (out->tasks == TSR_TASKS_SPLIT) {
    /* Python's -(-seq // tm): the ceiling (C's division truncates) */
    int64_t rows = shape->batch * shape->heads_q * (int64_t)ceil((double)shape->seq_q / cur_tm);
    double x = (double)st->tiles / (double)(rows > 1 ? rows : 1) * cur_tn / sel.opts.tile_n;
    out->split = (int)fmax(1, py_round(x));
  } else if (out->tasks != TSR_TASKS_ROW) {
    out->tasks = TSR_TASKS_ROW;
  }
  snprintf(out->variant, sizeof out->variant, "%s", sel.variant);
}

/* The recorded table of tests/python-binding.sh: a geometry row for bf16
 * d128 96x96 blocks (split tasks) and one naming a build the bundle does
 * not have (64x64 blocks). */
static void python_binding_table(const char *path)
{
  tsr_db *db = NULL;
  tsr_error err = {0};
  tsr_region r = {TSR_DT_BF16, 128, 96, 96, -1, -1, -1, -1};
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
  put_row(db, &r, 2, "combine", 128, 128, "split", "tsr_sm90_bf16_d128_m128n128_s2_g3_flat_mb_tma64", 4);
  r.bq = r.bk = 64;
  put_row(db, &r, 2, "retain", 64, 64, "row", "tsr_sm90_bf16_d128_m64n64_s2_g2_pers_mb_tma64", 4);
  tsr_db_close(db);
}

START_TEST(test_regime_as_python_chose)
{
  static const int64_t blocks[][2] = {{96, 96}, {64, 64}, {128, 128}, {128, 64}, {48, 48}};
  tu_rng rng = {tu_seed("regime_python", 23)};
  char path[300];
  int t, c, splits = 0, ties = 0, fallbacks = 0, keeps = 0, table = 0;
  snprintf(path, sizeof path, "%s/py.db", tmpdir);
  python_binding_table(path);
  for (t = 0; t < 2; t++) {
    tsr_context *ctx = rules_context(t ? NULL : path); /* recorded, then embedded */
    for (c = 0; c < 300; c++) {
      int b = (int)tu_range(&rng, 0, 4), cur = (int)tu_range(&rng, 0, TSR_FEATURE_TILES - 1), tm, tn;
      int64_t seq = tu_range(&rng, 100, 40000), bq = blocks[b][0], bk = blocks[b][1], rows;
      tsr_gpuplan_stats st;
      tsr_gpuplan_regime got;
      tsr_features f;
      tsr_problem p;
      tsr_geom *g = NULL;
      tsr_error err = {0};
      py_regime want;
      tsr_features_tile(cur, &tm, &tn);
      memset(&p, 0, sizeof p);
      p.batch = tu_range(&rng, 1, 2);
      p.heads_q = p.heads_kv = tu_range(&rng, 1, 8);
      p.head_dim = tu_uniform(&rng) < 0.6 ? 128 : 64;
      p.dtype = TSR_DT_BF16;
      if (c % 10 == 0) { /* the recorded split row over two rows of one 128x128 tile:
                            the estimate lands on halves */
        b = 0;
        bq = bk = 96;
        cur = TSR_FEATURE_TILES - 1;
        tsr_features_tile(cur, &tm, &tn);
        p.batch = 1;
        p.heads_q = p.heads_kv = 2;
        p.head_dim = 128;
        seq = tu_range(&rng, 97, 128);
      }
      p.seq_q = p.seq_k = seq;
      ck_assert_int_eq(tsr_geom_uniform(seq, seq, bq, bk, &g, &err), TSR_OK);
      p.geom = g;
      memset(&st, 0, sizeof st);
      st.step = tu_uniform(&rng) < 0.05 ? 0 : tu_range(&rng, 1, 1000);
      st.overflow = tu_uniform(&rng) < 0.05;
      st.density = tu_uniform(&rng);
      st.row_cv = 1.5 * tu_uniform(&rng);
      st.empty_rows = tu_uniform(&rng) < 0.5 ? 0 : tu_uniform(&rng);
      rows = p.batch * p.heads_q * ((seq + tm - 1) / tm);
      st.tiles = tu_range(&rng, 1, rows * ((seq + tn - 1) / tn));
      if (c % 10 == 0)
        st.tiles = 2 * tu_range(&rng, 0, 40) + 1; /* odd over 2 rows */
      tsri_gpuplan_features_of(&p, tm, tn, 0, TSR_DEFAULT_NUM_SMS, &st, &f);
      python_pick(ctx, &f, &st, &p, tm, tn, &want);
      memset(&got, 0xa5, sizeof got);
      ck_assert_int_eq(tsri_context_regime(ctx, &f, &st, &p, tm, tn, TSR_PREC_NATIVE, &got, &err), TSR_OK);
      ck_assert_int_eq(!got.changed, want.keep);
      if (want.keep) {
        keeps++;
      } else {
        ck_assert_str_eq(got.sel.reason, want.reason);
        ck_assert_int_eq(!got.sel.from_table, want.fallback);
        if (want.fallback) {
          fallbacks++;
          ck_assert_int_eq(got.opts.tile_m, 0);
          ck_assert_int_eq(got.opts.mapping, TSR_MAP_AUTO);
          ck_assert_int_eq(got.opts.tasks, TSR_TASKS_ROW);
          ck_assert_int_eq(got.opts.split_tiles, 0);
          ck_assert_ptr_null(got.opts.variant);
        } else {
          table++;
          ck_assert_int_eq(got.opts.tile_m, want.tile_m);
          ck_assert_int_eq(got.opts.tile_n, want.tile_n);
          ck_assert_int_eq(got.opts.mapping, want.mapping);
          ck_assert_int_eq(got.opts.tasks, want.tasks);
          ck_assert_msg(got.opts.split_tiles == want.split, "split %d, Python %d (tiles %lld)",
                        got.opts.split_tiles, want.split, (long long)st.tiles);
          ck_assert_str_eq(got.sel.variant, want.variant);
          ck_assert(got.opts.variant == (want.variant[0] ? got.sel.variant : NULL));
          if (want.tasks == TSR_TASKS_SPLIT) {
            int64_t r2 = p.batch * p.heads_q * ((seq + tm - 1) / tm);
            double x = (double)st.tiles / (double)r2 * tn / want.tile_n;
            splits++;
            ties += x - floor(x) == 0.5;
          }
        }
      }
      tsr_geom_destroy(g);
    }
    tsr_context_destroy(ctx);
  }
  printf("regimes: %d kept, %d fallbacks, %d from the table (%d split, %d on a half)\n", keeps,
         fallbacks, table, splits, ties);
  ck_assert_int_gt(keeps, 0);
  ck_assert_int_gt(fallbacks, 0);
  ck_assert_int_gt(table, 0);
  ck_assert_int_gt(splits, 0);
  ck_assert_int_gt(ties, 0);
}
END_TEST

/* A NULL argument is refused by name; a GPU plan cannot be made on a
 * host-only context, so tsr_gpuplan_reselect is reached with NULL. */
START_TEST(test_reselect_rejects)
{
  tsr_context *ctx = rules_context(NULL);
  tsr_gpuplan_stats st;
  tsr_gpuplan_regime r;
  tsr_error err = {0};
  memset(&st, 0, sizeof st);
  ck_assert_int_eq(tsr_gpuplan_reselect(ctx, NULL, &st, &r, &err), TSR_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.text, "GPU plan is NULL"));
  tsr_context_destroy(ctx);
}
END_TEST

/* ---- Holding a template back (tsr_gpuplan_hold_step) ---------------------- */

static int hold_next(tsr_gpuplan_hold *h, int cur, int chosen, double ms, int64_t *held)
{
  int next = -7;
  tsr_error err = {0};
  ck_assert_msg(tsr_gpuplan_hold_step(h, cur, chosen, ms, &next, held, &err) == TSR_OK, "%s", err.text);
  return next;
}

/* The scripted story: template 0 (1 ms a step) selects 1, whose first
 * timed step (2 ms) sends the masks back: 1 is held while 0 runs 4 steps,
 * then tried again; each further hold doubles it, up to 256. */
START_TEST(test_hold_bounce)
{
  tsr_gpuplan_hold h;
  int64_t held;
  int b, k, cur = 0;
  tsr_gpuplan_hold_init(&h);
  for (b = 1; b <= 9; b++) {
    int64_t want = b <= 7 ? 4LL << (b - 1) : 256;
    ck_assert_int_eq(hold_next(&h, cur, 1, 1.0, &held), 1); /* selected, not held */
    ck_assert_int_eq(held, 0);
    cur = hold_next(&h, 1, 0, 2.0, &held); /* its first step: back */
    ck_assert_int_eq(cur, 0);
    ck_assert_int_eq(held, 0);
    for (k = 1; k < want; k++) {
      ck_assert_int_eq(hold_next(&h, 0, 1, 1.0, &held), 0);
      ck_assert_int_eq(held, want - k);
    }
  }
  /* A switch is judged at the new template's first timed step: until then
   * it waits (selected again, no time) or returns (sent back, no time:
   * neither is held, and the two may alternate). */
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 0, 2, 1.0, &held), 2);
  ck_assert_int_eq(hold_next(&h, 2, 2, 0, &held), 2);   /* waits */
  ck_assert_int_eq(hold_next(&h, 2, 0, 0, &held), 0);   /* back, untimed */
  ck_assert_int_eq(h.holds[0] + h.holds[2], 0);
  ck_assert_int_eq(hold_next(&h, 0, 2, 0, &held), 2);   /* again */
  ck_assert_int_eq(hold_next(&h, 2, 2, 0, &held), 2);
  ck_assert_int_eq(hold_next(&h, 2, 2, 1.01, &held), 2); /* timed, within 2%: it stays */
  ck_assert_int_eq(h.came_to, -1);
  ck_assert_int_eq(hold_next(&h, 2, 0, 5.0, &held), 0); /* settled: it leaves as selected */
  ck_assert_int_eq(h.holds[2], 0);
  /* Slower by more than 2% at its first timed step: back, and held, though
   * the selection kept it. */
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 0, 1, 10.0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 1, 10.3, &held), 0);
  ck_assert_int_eq(h.holds[1], 1);
  ck_assert_int_eq(hold_next(&h, 0, 1, 10.0, &held), 0);
  ck_assert_int_eq(held, 3);
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 0, 1, 10.0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 1, 10.2, &held), 1); /* within 2%: stays */
  ck_assert_int_eq(h.holds[1], 0);
  /* ... or sent on to a third template: back too (the one it came from is
   * known faster, the third not at all). */
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 0, 1, 10.0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 3, 11.0, &held), 0);
  ck_assert_int_eq(h.holds[1], 1);
  /* Not slower, sent on to a third: no hold, the selection followed. */
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 2, 3, 1.0, &held), 3);
  ck_assert_int_eq(hold_next(&h, 3, 4, 1.0, &held), 4);
  ck_assert_int_eq(held, 0);
  ck_assert_int_eq(h.holds[3] + h.holds[4], 0);
  /* A return is not a switch to judge: 3 sent back to 1 (3 held), and 1's
   * next step choosing 3 again is refused, not judged. */
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 1, 3, 1.0, &held), 3);
  ck_assert_int_eq(hold_next(&h, 3, 1, 1.0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 3, 0, &held), 1);
  ck_assert_int_eq(held, 3);
  ck_assert_int_eq(h.holds[1], 0);
  /* Sent back but at least 2% faster: it stays, and the one it came from
   * is held; 1.9% is a near tie, and the table's choice (back) wins it. */
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 0, 1, 10.0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 0, 9.8, &held), 1);
  ck_assert_int_eq(held, 4); /* this step and 3 more */
  ck_assert_int_eq(h.holds[0], 1);
  ck_assert_int_eq(hold_next(&h, 1, 0, 9.8, &held), 1); /* 0 held: refused */
  ck_assert_int_eq(held, 3);
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 0, 1, 10.0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 0, 9.81, &held), 0);
  ck_assert_int_eq(h.holds[1], 1);
  ck_assert_int_eq(h.holds[0], 0);
  /* The one it came from never timed: no judgement, as without times. */
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 0, 1, 0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 1, 50.0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 0, 50.0, &held), 0); /* settled before: no bounce */
  ck_assert_int_eq(h.holds[0] + h.holds[1], 0);
  /* Kept over the one it came from, which was held; on expiry that one is
   * tried again, and at its first timed step (faster now: the masks
   * changed) it stays and holds the other. */
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 0, 1, 10.0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 0, 5.0, &held), 1);
  for (k = 0; k < 3; k++)
    ck_assert_int_eq(hold_next(&h, 1, 0, 5.0, &held), 1);
  ck_assert_int_eq(hold_next(&h, 1, 0, 5.0, &held), 0); /* the hold ended: tried */
  ck_assert_int_eq(hold_next(&h, 0, 1, 4.0, &held), 0);
  ck_assert_int_eq(held, 4);
  ck_assert_int_eq(h.holds[1], 1);
  ck_assert_int_eq(h.holds[0], 1);
  /* A number past the hold's capacity is never held, nor judged. */
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(hold_next(&h, 0, TSR_GPUPLAN_HOLD_MAX, 1.0, &held), TSR_GPUPLAN_HOLD_MAX);
  ck_assert_int_eq(hold_next(&h, TSR_GPUPLAN_HOLD_MAX, 0, 9.0, &held), 0);
  ck_assert_int_eq(hold_next(&h, 0, TSR_GPUPLAN_HOLD_MAX, 1.0, &held), TSR_GPUPLAN_HOLD_MAX);
  ck_assert_int_eq(held, 0);
}
END_TEST

/* Random selections and step times over a few templates against the rule
 * restated step by step: a switch from f to t waits for t's first step
 * with a time, f's known too.  Then t goes back to f and is held where its
 * time exceeds f's latest by more than 2% (1/0.98), or where the step
 * selected f and t is not 2% faster; f is held and t stays where the step
 * selected f and t is 2% faster; else the selection is followed.  Before
 * that, a step selecting f goes back (nobody held), one selecting t waits,
 * one selecting a third template ends the wait.  A selection of a held
 * template is refused while fewer steps than 4 << (holds - 1) (at most 256)
 * have passed since its latest hold. */
/* Steps template x stays held, from step i + 1 on (test_hold_random's). */
#define HOLD_LEFT(x) (last_hold[x] + (4LL << ((holds[x] < 7 ? holds[x] : 7) - 1)) - (i + 1))

START_TEST(test_hold_random)
{
  enum { STEPS = 3000, T = 5 };
  tu_rng rng = {tu_seed("hold_random", 41)};
  int trial, judged = 0, held_steps = 0, kept = 0, back = 0, untimed = 0;
  for (trial = 0; trial < 40; trial++) {
    tsr_gpuplan_hold h;
    int holds[T] = {0}, pref[T], i, cur, to = -1, fr = -1;
    int64_t last_hold[T] = {0};
    double speed[T], latest[T] = {0};
    /* A quarter of the trials rarely know a time (a caller timing few steps). */
    double p_stay = tu_uniform(&rng), p_unknown = trial % 4 ? tu_uniform(&rng) * 0.3 : 0.995;
    tsr_gpuplan_hold_init(&h);
    cur = (int)tu_range(&rng, 0, T - 1);
    for (i = 0; i < T; i++) {
      pref[i] = (int)tu_range(&rng, 0, T - 1);
      speed[i] = 1 + 0.2 * tu_uniform(&rng);
    }
    for (i = 0; i < STEPS; i++) {
      int chosen, got, want = -1, t;
      int64_t held, want_held = 0;
      double ms = tu_uniform(&rng) < p_unknown ? 0 : speed[cur] * (0.97 + 0.06 * tu_uniform(&rng));
      if (tu_uniform(&rng) < 0.02) /* the masks change: new preferences */
        pref[tu_range(&rng, 0, T - 1)] = (int)tu_range(&rng, 0, T - 1);
      chosen = tu_uniform(&rng) < p_stay ? cur : pref[cur];
      if (ms > 0)
        latest[cur] = ms;
      if (to == cur) {
        int f = fr;
        if (ms > 0 && latest[f] > 0) {
          to = fr = -1;
          judged++;
          t = -1;
          if (ms * 0.98 > latest[f] || (chosen == f && ms > 0.98 * latest[f]))
            t = cur, want = f, back++;
          else if (chosen == f)
            t = f, want = cur, kept++;
          if (t >= 0) {
            holds[t]++;
            last_hold[t] = i + 1;
          }
          if (t == f)
            want_held = HOLD_LEFT(f);
        } else if (chosen == f) {
          to = fr = -1;
          want = f;
          untimed++;
        } else if (chosen == cur) {
          want = cur;
        } else {
          to = fr = -1;
        }
      } else {
        to = fr = -1;
      }
      if (want < 0) { /* the selection, unless chosen is held */
        int64_t left = chosen != cur && holds[chosen] > 0 ? HOLD_LEFT(chosen) : 0;
        if (chosen == cur || left > 0) {
          want = cur;
          want_held = left > 0 ? left : 0;
        } else {
          want = chosen;
          to = chosen;
          fr = cur;
        }
      }
      got = hold_next(&h, cur, chosen, ms, &held);
      ck_assert_msg(got == want && held == want_held,
                    "trial %d step %d: %d -> %d (%.3f ms): got %d held %lld, want %d held %lld", trial,
                    i, cur, chosen, ms, got, (long long)held, want, (long long)want_held);
      held_steps += want_held > 0;
      cur = got;
    }
  }
  /* The draws reached every rule, many times. */
  ck_assert_int_gt(judged, 300);
  ck_assert_int_gt(kept, 20);
  ck_assert_int_gt(back, 100);
  ck_assert_int_gt(untimed, 30);
  ck_assert_int_gt(held_steps, 1000);
#undef HOLD_LEFT
  printf("hold: %d switches judged (%d back, %d kept over the one they came from), %d untimed returns, %d "
         "held selections in 40 x %d random steps\n", judged, back, kept, untimed, held_steps, STEPS);
}
END_TEST

/* Bad input is refused by name, with the value. */
START_TEST(test_hold_rejects)
{
  tsr_gpuplan_hold h;
  int next;
  tsr_error err = {0};
  tsr_gpuplan_hold_init(&h);
  ck_assert_int_eq(tsr_gpuplan_hold_step(NULL, 0, 1, 0, &next, NULL, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "the hold is NULL") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_gpuplan_hold_step(&h, 0, 1, 0, NULL, NULL, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "next is NULL") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_gpuplan_hold_step(&h, -3, 1, 0, &next, NULL, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "-3") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_gpuplan_hold_step(&h, 0, -9, 0, &next, NULL, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "-9") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_gpuplan_hold_step(&h, 0, 1, -2.5, &next, NULL, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "-2.5 ms") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_gpuplan_hold_step(&h, 0, 1, NAN, &next, NULL, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "nan ms") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_gpuplan_hold_step(&h, 0, 1, INFINITY, &next, NULL, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "inf ms") != NULL, "%s", err.text);
  ck_assert_int_eq(h.steps, 0); /* refused steps change nothing */
  tsr_gpuplan_hold_init(NULL);  /* harmless */
}
END_TEST

/* ---- Where the bundle is --------------------------------------------------- */

START_TEST(test_bundle_dir)
{
  const char *old = getenv("TESSERA_BUNDLE");
  char keep[4096] = "";
  char installed[4200];
  if (old)
    snprintf(keep, sizeof keep, "%s", old);
  unsetenv("TESSERA_BUNDLE");
  snprintf(installed, sizeof installed, "%s", tsri_bundle_dir(NULL, NULL));
  ck_assert_ptr_nonnull(strstr(installed, "/bundle"));
  ck_assert_str_eq(tsri_bundle_dir("", ""), installed);
  ck_assert_str_eq(tsri_bundle_dir(NULL, "/local/b"), "/local/b");
  ck_assert_str_eq(tsri_bundle_dir("/asked", "/local/b"), "/asked");
  setenv("TESSERA_BUNDLE", "/from/env", 1);
  ck_assert_str_eq(tsri_bundle_dir(NULL, "/local/b"), "/from/env");
  ck_assert_str_eq(tsri_bundle_dir("/asked", NULL), "/asked");
  setenv("TESSERA_BUNDLE", "", 1);
  ck_assert_str_eq(tsri_bundle_dir(NULL, NULL), installed);
  /* The context follows the same rule: $TESSERA_BUNDLE when no folder is
   * given, named in the error when it is not a bundle. */
  {
    tsr_context_opts o;
    tsr_context *ctx = NULL;
    tsr_error err = {0};
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none", tmpdir);
    setenv("TESSERA_BUNDLE", missing, 1);
    tsr_context_opts_init(&o);
    o.device = TSR_CONTEXT_NO_DEVICE;
    ck_assert_int_eq(tsr_context_create(&o, &ctx, &err), TSR_ERR_IO);
    ck_assert_msg(strstr(err.text, missing) != NULL, "%s", err.text);
    setenv("TESSERA_BUNDLE", bundle_path(), 1);
    tsr_error_clear(&err);
    ck_assert_msg(tsr_context_create(&o, &ctx, &err) == TSR_OK, "%s", err.text);
    tsr_context_destroy(ctx);
  }
  if (old)
    setenv("TESSERA_BUNDLE", keep, 1);
  else
    unsetenv("TESSERA_BUNDLE");
}
END_TEST

/* ---- The sm80 family's tile and variant, per target (issue 17) ------------ */

/* What a user's selection runs on each target: the plan's tile and the
 * variant the bundle picks for it (tsr_gpu_upload's choice), for 128x128
 * and 64x64 blocks.  Host-only, the target set on the context as
 * open_device sets it; an empty table, so every request is the fallback,
 * as on a GPU the shipped table does not know.  The claim (notes/sm80.md,
 * 2026-12-02 evening): 128 x 128 blocks at head dim 128 run 128 x 64 tiles
 * on the 32-row w4 variant wherever the sm80 family serves them, one stage
 * on sm_80 (two CTAs in 164 KiB) and two elsewhere; at head dim 64 too, on
 * the two-stage one (2026-12-07: its fused softmax schedule); 64 x 64
 * blocks run the 32-row w2 variant where the target holds 8 warps of it;
 * sm_90a keeps the sm90 family.  The old rule (128 x 128 tiles, the
 * first-listed 16-row w8 variants) fails every sm80 target here. */
static void route_expect(tsr_context *ctx, const char *arch, rules_req *r, const tsr_plan_opts *base,
                         int want_tm, int want_tn, const char *want_variant)
{
  tsr_selection s;
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  tsr_plan_summary sum;
  tsr_variant_need need = {0};
  long k;
  ck_assert_int_eq(tsr_context_select(ctx, &r->p, r->m, base, &s, &err), TSR_OK);
  ck_assert_msg(tsr_plan_create(&r->p, r->m, &s.opts, &pl, &err) == TSR_OK, "%s", err.text);
  ck_assert_msg(tsr_plan_verify(pl, r->m, &err) == TSR_OK, "%s", err.text);
  tsr_plan_summarize(pl, &sum);
  ck_assert_msg(sum.tile_m == want_tm && sum.tile_n == want_tn, "%s d%lld %s: tile %dx%d, want %dx%d (%s)",
                arch, (long long)r->p.head_dim, tsr_dtype_name(r->p.dtype), sum.tile_m, sum.tile_n, want_tm,
                want_tn, s.reason);
  need.dtype = r->p.dtype;
  need.head_dim = (int)r->p.head_dim;
  need.bm = sum.tile_m;
  need.bn = sum.tile_n;
  need.membership = sum.membership_words > 0;
  k = tsri_bundle_pick(&ctx->bundle, arch, &need, ctx->smem_optin);
  ck_assert_msg(k >= 0 && strstr(ctx->bundle.items[k].name, want_variant),
                "%s d%lld %s tile %dx%d: variant %s, want *%s*", arch, (long long)r->p.head_dim,
                tsr_dtype_name(r->p.dtype), sum.tile_m, sum.tile_n, k >= 0 ? ctx->bundle.items[k].name : "(none)",
                want_variant);
  ck_assert_int_eq(!!strstr(s.reason, "128x64 tiles (sm80 family"), want_tm == 128 && want_tn == 64);
  tsr_plan_destroy(pl);
}

START_TEST(test_sm80_route)
{
  static const char *const archs[] = {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"};
  tu_rng rng = {tu_seed("sm80_route", 23)};
  char path[300];
  tsr_db *db = NULL;
  tsr_context *ctx;
  tsr_error err = {0};
  size_t a, i, n_all;
  int pass, d, t;
  /* The residency behind the one-stage choice (notes/sm80.md): d128 128x64
   * w4 holds 2 CTAs of 4 warps in 164 KiB at one stage (64 KiB) but 1 at
   * two (96 KiB); 1 either way in 100 KiB; 2 either way (registers) in 228. */
  {
    static const char *const rw[] = {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"};
    static const int s1[] = {8, 4, 8, 8, 4}, s2[] = {4, 4, 8, 8, 4};
    tsr_variant v1, v2;
    ck_assert_int_eq(tsri_variant_parse("tsr_sm80_bf16_d128_m128n64_s1_w4_flat_mb", &v1, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_parse("tsr_sm80_bf16_d128_m128n64_s2_w4_flat_mb", &v2, &err), TSR_OK);
    for (a = 0; a < 5; a++) {
      ck_assert_int_eq(tsri_variant_resident_warps(&v1, rw[a]), s1[a]);
      ck_assert_int_eq(tsri_variant_resident_warps(&v2, rw[a]), s2[a]);
    }
    ck_assert_int_eq(tsri_variant_resident_warps(&v1, "sm_70"), 0);
  }
  snprintf(path, sizeof path, "%s/empty.db", tmpdir);
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
  tsr_db_close(db);
  ctx = rules_context(path);
  ck_assert_int_eq(tsr_select_rows(tsr_context_selector(ctx)), 0);
  n_all = ctx->bundle.n;
  /* pass 0: the build's bundle; pass 1: its sm80 family only, as a bundle
   * that forces the family on an H200 (tests/device/sm80_user.py) */
  for (pass = 0; pass < 2; pass++) {
    if (pass) {
      size_t kept = 0;
      for (i = 0; i < n_all; i++)
        if (ctx->bundle.items[i].v.family == TSR_FAMILY_SM80)
          ctx->bundle.items[kept++] = ctx->bundle.items[i];
      ctx->bundle.n = kept;
    }
    for (a = 0; a < sizeof archs / sizeof *archs; a++) {
      int sm90 = !pass && !strcmp(archs[a], "sm_90a");
      snprintf(ctx->arch, sizeof ctx->arch, "%s", archs[a]);
      ctx->smem_optin = tsri_arch_smem_limit(archs[a]);
      for (d = 0; d < 2; d++)
        for (t = 0; t < 2; t++) {
          tsr_dtype dt = t ? TSR_DT_F16 : TSR_DT_BF16;
          int64_t hd = d ? 64 : 128;
          rules_req r;
          tsr_plan_opts base;
          char want[64];
          tsr_plan_opts_init(&base);
          rules_request(&rng, tu_range(&rng, 1000, 5000), 128, 128, hd, dt, &r);
          if (sm90)
            snprintf(want, sizeof want, "tsr_sm90_%s_d%d_m128n128_", tsr_dtype_name(dt), (int)hd);
          else
            snprintf(want, sizeof want, "tsr_sm80_%s_d%d_m128n64_s%d_w4_", tsr_dtype_name(dt), (int)hd,
                     hd == 128 && !strcmp(archs[a], "sm_80") ? 1 : 2);
          route_expect(ctx, archs[a], &r, &base, 128, sm90 ? 128 : 64, want);
          /* A tile the caller fixed, and an FP8 request, are planned as asked. */
          base.tile_m = base.tile_n = 128;
          if (!sm90) {
            tsr_selection s;
            ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, &base, &s, &err), TSR_OK);
            ck_assert_int_eq(s.opts.tile_n, 128);
            tsr_plan_opts_init(&base);
            base.precision = TSR_PREC_FP8;
            ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, &base, &s, &err), TSR_OK);
            ck_assert_int_eq(s.opts.tile_n, 0);
          }
          rules_free(&r);
          /* 64 x 64 blocks: the 32-row w2 variant where the target holds
           * 8 warps of it (d64 40 KiB: not in 100 KiB; d128 one stage 48
           * KiB: only in 228 KiB, 6 warps in an A100's 164), else the
           * 16-row w4 one. */
          rules_request(&rng, tu_range(&rng, 1000, 5000), 64, 64, hd, dt, &r);
          tsr_plan_opts_init(&base);
          if (sm90)
            snprintf(want, sizeof want, "tsr_sm90_%s_d%d_m64n64_", tsr_dtype_name(dt), (int)hd);
          else if (!strcmp(archs[a], "sm_89") || !strcmp(archs[a], "sm_120") ||
                   (hd == 128 && !strcmp(archs[a], "sm_80")))
            snprintf(want, sizeof want, "tsr_sm80_%s_d%d_m64n64_s2_w4_", tsr_dtype_name(dt), (int)hd);
          else
            snprintf(want, sizeof want, "tsr_sm80_%s_d%d_m64n64_s%d_w2_", tsr_dtype_name(dt), (int)hd,
                     hd == 128 ? 1 : 2);
          route_expect(ctx, archs[a], &r, &base, 64, 64, want);
          rules_free(&r);
        }
    }
  }
  tsr_context_destroy(ctx); /* frees the (reordered) items array whole */
}
END_TEST

/* ---- The gather upgrade ---------------------------------------------------- */

/* Expects tsri_context_gather to leave `in` as it is (0) or upgrade it (1):
 * then mapping gather, tile bq x 128 for the request's blocks bq x 64, no
 * variant, everything else kept, and the reason naming the kg variant; the
 * upgraded options plan and verify. */
static void gather_expect(const tsr_bundle *b, const char *arch, int device, const rules_req *r,
                          const tsr_selection *in, int want, const char *label)
{
  tsr_selection s = *in;
  tsr_plan *pl = NULL;
  tsr_plan_summary sum;
  tsr_error err = {0};
  char want_reason[64];
  int got;
  if (in->opts.variant == in->variant)
    s.opts.variant = s.variant; /* the copy's own */
  got = tsri_context_gather(b, arch, tsri_arch_smem_limit(arch), device, &r->f, &s);
  ck_assert_msg(got == want, "%s: upgraded %d, want %d (%s)", label, got, want, s.reason);
  ck_assert_int_eq(s.opts.tasks, in->opts.tasks);
  ck_assert_int_eq(s.opts.split_tiles, in->opts.split_tiles);
  ck_assert_int_eq(s.opts.num_sms, in->opts.num_sms);
  ck_assert_int_eq(s.opts.precision, in->opts.precision);
  ck_assert_int_eq(s.from_table, in->from_table);
  if (!want) {
    ck_assert_int_eq(s.opts.mapping, in->opts.mapping);
    ck_assert_int_eq(s.opts.tile_m, in->opts.tile_m);
    ck_assert_int_eq(s.opts.tile_n, in->opts.tile_n);
    ck_assert(s.opts.variant == (in->opts.variant == in->variant ? s.variant : in->opts.variant));
    ck_assert_str_eq(s.variant, in->variant);
    ck_assert_str_eq(s.reason, in->reason);
    return;
  }
  ck_assert_int_eq(s.opts.mapping, TSR_MAP_GATHER);
  ck_assert_int_eq(s.opts.tile_m, r->f.bq);
  ck_assert_int_eq(s.opts.tile_n, 128);
  ck_assert_ptr_null(s.opts.variant);
  ck_assert_str_eq(s.variant, "");
  snprintf(want_reason, sizeof want_reason, "; gather: %dx64 blocks on %dx128 tiles (tsr_sm90_", (int)r->f.bq,
           (int)r->f.bq);
  ck_assert_msg(strstr(s.reason, want_reason) &&
                    strstr(s.reason, "_kgtest)") && !strncmp(s.reason, in->reason, strlen(in->reason)),
                "%s: reason '%s'", label, s.reason);
  /* the upgraded options plan a gather plan that verifies */
  ck_assert_msg(tsr_plan_create(&r->p, r->m, &s.opts, &pl, &err) == TSR_OK, "%s: %s", label, err.text);
  tsr_plan_summarize(pl, &sum);
  ck_assert_int_eq(sum.mapping, TSR_MAP_GATHER);
  ck_assert_msg(tsr_plan_verify(pl, r->m, &err) == TSR_OK, "%s: %s", label, err.text);
  tsr_plan_destroy(pl);
}

START_TEST(test_gather_upgrade)
{
  tu_rng rng = {tu_seed("gather_upgrade", 53)};
  char path[300];
  tsr_db *db = NULL;
  tsr_context *ctx;
  tsr_error err = {0};
  tsr_bundle kg, kg2, plain;
  tsr_bundle_entry kge, kg2e[2], *plain_items;
  tsr_selection auto_sel, row_sel, s;
  rules_req r, r16, r128, r64, r64d128;
  size_t i;
  long src = -1, src64 = -1;
  snprintf(path, sizeof path, "%s/empty.db", tmpdir);
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db, &err), TSR_OK);
  tsr_db_close(db);
  ctx = rules_context(path);
  /* A kg variant made from the bundle's sm90 bf16 d128 128x128 flat one, the
   * only entry of one bundle; the other: the build's bundle without kg. */
  plain_items = malloc((ctx->bundle.n + 1) * sizeof *plain_items);
  memset(&plain, 0, sizeof plain);
  plain.items = plain_items;
  for (i = 0; i < ctx->bundle.n; i++) {
    const tsr_bundle_entry *e = &ctx->bundle.items[i];
    if (!e->v.gather)
      plain_items[plain.n++] = *e;
    if (src < 0 && e->v.family == TSR_FAMILY_SM90 && e->v.dtype == TSR_DT_BF16 && e->v.head_dim == 128 &&
        e->v.bm == 128 && e->v.bn == 128 && !e->v.fp8 && !e->v.gather && e->v.layout == TSR_TL_FLAT &&
        (e->targets & (1u << tsri_arch_index("sm_90a"))))
      src = (long)i;
    if (src64 < 0 && e->v.family == TSR_FAMILY_SM90 && e->v.dtype == TSR_DT_BF16 && e->v.head_dim == 64 &&
        e->v.bm == 64 && e->v.bn == 128 && !e->v.fp8 && !e->v.gather && e->v.layout == TSR_TL_FLAT &&
        (e->targets & (1u << tsri_arch_index("sm_90a"))))
      src64 = (long)i;
  }
  ck_assert_int_ge(src, 0);
  ck_assert_int_ge(src64, 0);
  kge = ctx->bundle.items[src];
  kge.v.gather = 1;
  kge.v.membership = 0;
  snprintf(kge.name, sizeof kge.name, "%.60s_kgtest", ctx->bundle.items[src].name);
  memset(&kg, 0, sizeof kg);
  kg.items = &kge;
  kg.n = 1;
  /* and one with a 64-row kg variant at head dim 64 beside it */
  kg2e[0] = kge;
  kg2e[1] = ctx->bundle.items[src64];
  kg2e[1].v.gather = 1;
  kg2e[1].v.membership = 0;
  snprintf(kg2e[1].name, sizeof kg2e[1].name, "%.60s_kgtest", ctx->bundle.items[src64].name);
  memset(&kg2, 0, sizeof kg2);
  kg2.items = kg2e;
  kg2.n = 2;

  rules_request(&rng, tu_range(&rng, 1000, 3000), 128, 64, 128, TSR_DT_BF16, &r);
  rules_request(&rng, tu_range(&rng, 1000, 3000), 128, 64, 128, TSR_DT_F16, &r16);
  rules_request(&rng, tu_range(&rng, 1000, 3000), 128, 128, 128, TSR_DT_BF16, &r128);
  rules_request(&rng, tu_range(&rng, 1000, 3000), 64, 64, 64, TSR_DT_BF16, &r64);
  rules_request(&rng, tu_range(&rng, 1000, 3000), 64, 64, 128, TSR_DT_BF16, &r64d128);
  /* the fallback to the automatic planner, and a table row retaining 128x64
   * with split tasks and its (128x64) variant */
  memset(&auto_sel, 0, sizeof auto_sel);
  tsr_plan_opts_init(&auto_sel.opts);
  auto_sel.opts.num_sms = 132;
  auto_sel.level = -1;
  auto_sel.row_id = -1;
  snprintf(auto_sel.reason, sizeof auto_sel.reason, "no lookup table: automatic plan");
  row_sel = auto_sel;
  row_sel.from_table = 1;
  row_sel.level = 0;
  row_sel.row_id = 7;
  row_sel.opts.mapping = TSR_MAP_RETAIN;
  row_sel.opts.tile_m = 128;
  row_sel.opts.tile_n = 64;
  row_sel.opts.tasks = TSR_TASKS_SPLIT;
  row_sel.opts.split_tiles = 3;
  snprintf(row_sel.variant, sizeof row_sel.variant, "tsr_sm90_bf16_d128_m128n64_s2_g2_flat_nm");
  row_sel.opts.variant = row_sel.variant;
  snprintf(row_sel.reason, sizeof row_sel.reason, "table row 7");

  /* upgraded: on a device, with a kg variant for the request */
  gather_expect(&kg, "sm_90a", 1, &r, &auto_sel, 1, "automatic plan");
  gather_expect(&kg, "sm_90a", 1, &r, &row_sel, 1, "table row retain 128x64");
  /* not upgraded */
  gather_expect(&kg, "sm_90a", 0, &r, &auto_sel, 0, "host only");
  gather_expect(&plain, "sm_90a", 1, &r, &row_sel, 0, "no kg variant");
  gather_expect(&kg, "sm_80", 1, &r, &row_sel, 0, "kg not built for sm_80");
  gather_expect(&kg, "sm_90a", 1, &r16, &row_sel, 0, "no fp16 kg variant");
  gather_expect(&kg, "sm_90a", 1, &r128, &auto_sel, 0, "128x128 blocks");
  s = row_sel;
  s.opts.precision = TSR_PREC_FP8;
  gather_expect(&kg, "sm_90a", 1, &r, &s, 0, "fp8");
  s = row_sel;
  s.opts.mapping = TSR_MAP_COMBINE;
  s.opts.tile_n = 128;
  gather_expect(&kg, "sm_90a", 1, &r, &s, 0, "table row combine 128x128");
  s = row_sel;
  s.opts.tile_m = 64;
  gather_expect(&kg, "sm_90a", 1, &r, &s, 0, "table row 64x64");
  s = auto_sel;
  s.opts.mapping = TSR_MAP_RETAIN;
  gather_expect(&kg, "sm_90a", 1, &r, &s, 0, "the caller's retain");
  s = auto_sel;
  s.opts.tile_m = 128;
  s.opts.tile_n = 64;
  gather_expect(&kg, "sm_90a", 1, &r, &s, 0, "the caller's tile");
  s = auto_sel;
  s.opts.variant = "tsr_sm90_bf16_d128_m128n64_s2_g2_flat_nm";
  gather_expect(&kg, "sm_90a", 1, &r, &s, 0, "the caller's variant");
  /* TESSERA_GATHER=0 turns it off, any other value leaves it on */
  setenv("TESSERA_GATHER", "0", 1);
  gather_expect(&kg, "sm_90a", 1, &r, &row_sel, 0, "TESSERA_GATHER=0");
  setenv("TESSERA_GATHER", "1", 1);
  gather_expect(&kg, "sm_90a", 1, &r, &row_sel, 1, "TESSERA_GATHER=1");
  unsetenv("TESSERA_GATHER");
  /* 64x64 blocks: gathered onto 64x128 tiles where a 64-row kg variant
   * serves the head dim (the catalog's are d64 only) */
  gather_expect(&kg2, "sm_90a", 1, &r64, &auto_sel, 1, "64x64 blocks, automatic plan");
  gather_expect(&kg2, "sm_90a", 1, &r, &row_sel, 1, "128x64 beside a 64-row kg variant");
  s = row_sel;
  s.opts.tile_m = s.opts.tile_n = 64;
  gather_expect(&kg2, "sm_90a", 1, &r64, &s, 1, "64x64 blocks, table row retain 64x64");
  gather_expect(&kg2, "sm_90a", 1, &r64d128, &s, 0, "64x64 blocks at d128: no 64-row kg variant");
  gather_expect(&kg, "sm_90a", 1, &r64, &auto_sel, 0, "64x64 blocks: 128-row kg variants only");
  gather_expect(&kg2, "sm_90a", 1, &r64, &row_sel, 0, "64x64 blocks, table row retain 128x64");
  s.opts.mapping = TSR_MAP_COMBINE;
  s.opts.tile_m = 128;
  gather_expect(&kg2, "sm_90a", 1, &r64, &s, 0, "64x64 blocks, table row combine 128x64");
  /* A host-only context never upgrades: the CPU path keeps its plans. */
  ck_assert_int_eq(tsr_context_select(ctx, &r.p, r.m, NULL, &s, &err), TSR_OK);
  ck_assert_int_ne(s.opts.mapping, TSR_MAP_GATHER);
  ck_assert_ptr_null(strstr(s.reason, "gather"));
  rules_free(&r);
  rules_free(&r16);
  rules_free(&r128);
  rules_free(&r64);
  rules_free(&r64d128);
  free(plain_items);
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
  tc = tcase_create("rules");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_settled_rows_choose_as_before, 0, 4);
  tcase_add_test(tc, test_serves_one_rule);
  tcase_add_test(tc, test_regime_as_python_chose);
  tcase_add_test(tc, test_reselect_rejects);
  tcase_add_test(tc, test_hold_bounce);
  tcase_add_test(tc, test_hold_random);
  tcase_add_test(tc, test_hold_rejects);
  tcase_add_test(tc, test_bundle_dir);
  tcase_add_test(tc, test_sm80_route);
  tcase_add_test(tc, test_gather_upgrade);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  base_seed = tu_seed("check_context", 20261129u);
  return tu_run_suite(context_suite());
}

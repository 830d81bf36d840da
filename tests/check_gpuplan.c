/*
 * check_gpuplan.c: the GPU planner's host side, on any machine: what
 * tsr_gpuplan_create accepts and rejects before it touches a device (on a
 * host-only context, TSR_CONTEXT_NO_DEVICE), with variable geometries now
 * accepted, and gather templates on their geometry only; and the row-by-row
 * plan comparison (tests/plan_rows.h) that
 * tests/gpu_plan holds device plans to, proven on host plans: the same
 * mask planned with different task layouts walks the same rows, and a
 * changed tile or membership word is found.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "plan_rows.h"
#include "tessera.h"
#include "util.h"

/* Random ragged sizes (1..maxs) summing to exactly `seq`. */
static int64_t ragged_sizes(tu_rng *r, int64_t seq, int64_t maxs, int64_t **out)
{
  int64_t *s = malloc((size_t)seq * sizeof *s), n = 0, left = seq;
  while (left > 0) {
    int64_t x = tu_range(r, 1, maxs);
    if (x > left) x = left;
    s[n++] = x;
    left -= x;
  }
  *out = s;
  return n;
}

static tsr_context *host_context(void)
{
  tsr_context_opts o;
  tsr_context *ctx = NULL;
  tsr_error err = {0};
  char bundle[4096];
  const char *dir = getenv("TSR_TOP_BUILDDIR");
  tsr_context_opts_init(&o);
  o.device = TSR_CONTEXT_NO_DEVICE;
  if (!getenv("TESSERA_BUNDLE")) {
    snprintf(bundle, sizeof bundle, "%s/bundle", dir ? dir : ".");
    o.bundle_dir = bundle;
  }
  ck_assert_msg(tsr_context_create(&o, &ctx, &err) == TSR_OK, "%s", err.text);
  return ctx;
}

static void problem_init(tsr_problem *p, const tsr_geom *g, int64_t heads)
{
  memset(p, 0, sizeof *p);
  p->batch = 1;
  p->heads_q = p->heads_kv = heads;
  p->seq_q = tsr_geom_seq_q(g);
  p->seq_k = tsr_geom_seq_k(g);
  p->head_dim = 128;
  p->dtype = TSR_DT_BF16;
  p->layout = TSR_LAYOUT_BHSD;
  p->geom = g;
}

START_TEST(test_create_variable_inputs)
{
  int64_t qs[4] = {300, 200, 1, 523}, ks[3] = {500, 500, 24}, zero[3] = {500, 0, 524};
  tsr_context *ctx = host_context();
  tsr_geom *g = NULL, *bad = (tsr_geom *)&bad;
  tsr_problem p;
  tsr_plan_opts o;
  tsr_gpuplan *gp = (tsr_gpuplan *)&gp;
  tsr_error err = {0};

  ck_assert_int_eq(tsr_geom_variable(qs, 4, ks, 3, &g, &err), TSR_OK);
  problem_init(&p, g, 2);
  tsr_plan_opts_init(&o);
  /* A variable geometry is planned on the GPU now: the host-only context
   * fails only where the device is needed. */
  ck_assert_int_eq(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err), TSR_ERR_NO_DEVICE);
  ck_assert_ptr_null(gp);
  ck_assert_ptr_null(strstr(err.text, "uniform"));
  /* Sizes that do not sum to the sequence. */
  tsr_error_clear(&err);
  p.seq_q = 1000;
  ck_assert_int_eq(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(err.text, "geometry covers 1024 x 1024 tokens, sequences are 1000 x 1024"), "%s", err.text);
  tsr_error_clear(&err);
  p.seq_q = 1024;
  p.seq_k = 1030;
  ck_assert_int_eq(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(err.text, "1024 x 1030"), "%s", err.text);
  p.seq_k = 1024;
  /* Zero sizes never make a geometry. */
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_variable(qs, 4, zero, 3, &bad, &err), TSR_ERR_INVALID);
  ck_assert_ptr_null(bad);
  ck_assert_msg(strstr(err.text, "key block 1: size 0"), "%s", err.text);
  /* Pack stays host-only; retain needs uniform blocks. */
  tsr_error_clear(&err);
  o.tasks = TSR_TASKS_PACK;
  ck_assert_int_eq(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(err.text, "'pack' is host-only"), "%s", err.text);
  tsr_error_clear(&err);
  o.tasks = TSR_TASKS_ROW;
  o.mapping = TSR_MAP_RETAIN;
  ck_assert_int_eq(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(err.text, "got blocks variable"), "%s", err.text);
  tsr_geom_destroy(g);
  tsr_context_destroy(ctx);
}
END_TEST

/* Gather templates: uniform blocks bq x bk on tiles bq x 2bk only (the
 * planning kernels' gather path assumes it); accepted ones get as far as
 * the device.  Random block edges and sequences: the outcome follows from
 * them alone. */
START_TEST(test_create_gather_inputs)
{
  uint64_t seed = tu_seed("create_gather_inputs", 67) + (uint64_t)_i;
  tu_rng r = {seed};
  int64_t S = tu_range(&r, 200, 3000), Sk = tu_range(&r, 200, 3000), qs[3] = {100, 300, 0};
  static const int edges[4] = {32, 64, 128, 256};
  const int bq = edges[tu_range(&r, 1, 2)], bk = edges[tu_range(&r, 0, 2)];
  tsr_context *ctx = host_context();
  tsr_geom *g = NULL, *vg = NULL;
  tsr_problem p;
  tsr_plan_opts o;
  tsr_gpuplan *gp = (tsr_gpuplan *)&gp;
  tsr_error err = {0};

  ck_assert_int_eq(tsr_geom_uniform(S, Sk, bq, bk, &g, &err), TSR_OK);
  problem_init(&p, g, 2);
  tsr_plan_opts_init(&o);
  o.mapping = TSR_MAP_GATHER;
  /* The tile the blocks give (edges 0), or the same tile asked for. */
  ck_assert_msg(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err) == TSR_ERR_NO_DEVICE, "seed %llu: %s",
                (unsigned long long)seed, err.text);
  ck_assert_ptr_null(gp);
  tsr_error_clear(&err);
  o.tile_m = bq;
  o.tile_n = 2 * bk;
  ck_assert_msg(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err) == TSR_ERR_NO_DEVICE, "seed %llu: %s",
                (unsigned long long)seed, err.text);
  /* Any other tile: not a gather geometry. */
  tsr_error_clear(&err);
  o.tile_n = bk == 32 ? 128 : bk;
  ck_assert_int_eq(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_ptr_null(gp);
  ck_assert_msg(strstr(err.text, "'gather'") && strstr(err.text, "bq x 2bk"), "%s", err.text);
  tsr_error_clear(&err);
  o.tile_m = bq == 64 ? 128 : 64;
  o.tile_n = 2 * bk;
  ck_assert_int_eq(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(err.text, "'gather'") && strstr(err.text, "bq x 2bk"), "%s", err.text);
  /* Variable blocks never. */
  qs[2] = S - 400 > 0 ? S - 400 : 1;
  ck_assert_int_eq(tsr_geom_variable(qs, 3, qs, 3, &vg, &err), TSR_OK);
  problem_init(&p, vg, 1);
  o.tile_m = o.tile_n = 0;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(err.text, "'gather'") && strstr(err.text, "uniform"), "%s", err.text);
  /* Past the last mapping: invalid, named. */
  tsr_error_clear(&err);
  o.mapping = (tsr_mapping)(TSR_MAP_GATHER + 1);
  ck_assert_int_eq(tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "mapping 5"), "%s", err.text);
  tsr_geom_destroy(g);
  tsr_geom_destroy(vg);
  tsr_context_destroy(ctx);
}
END_TEST

/* Host plans of one mask under every task layout walk the same rows. */
START_TEST(test_rows_equal_across_layouts)
{
  uint64_t seed = tu_seed("rows_equal_across_layouts", 61) + (uint64_t)_i;
  tu_rng r = {seed};
  int64_t *qs, *ks, nq, nk, S = tu_range(&r, 300, 1500), Sk = tu_range(&r, 300, 1500), H = tu_range(&r, 1, 3);
  static const int tiles[4][2] = {{64, 64}, {64, 128}, {128, 64}, {128, 128}};
  const int *tl = tiles[_i % 4];
  tsr_geom *g;
  tsr_mask *m;
  tsr_problem p;
  tsr_plan_opts o;
  tsr_plan *pl[4] = {NULL, NULL, NULL, NULL};
  tsr_error err = {0};
  uint8_t *bits;
  char why[256];
  int k;

  nq = ragged_sizes(&r, S, 1 + _i * 37 % 400, &qs);
  nk = ragged_sizes(&r, Sk, 1 + _i * 53 % 400, &ks);
  ck_assert_int_eq(tsr_geom_variable(qs, nq, ks, nk, &g, &err), TSR_OK);
  bits = tu_rand_bits(&r, (size_t)(H * nq * nk), tu_uniform(&r) * 0.6 + 0.05);
  ck_assert_int_eq(tsr_mask_from_bytes(1, H, nq, nk, bits, &m, &err), TSR_OK);
  problem_init(&p, g, H);
  for (k = 0; k < 4; k++) {
    tsr_plan_opts_init(&o);
    o.tile_m = tl[0];
    o.tile_n = tl[1];
    o.mapping = TSR_MAP_COMBINE;
    o.tasks = k == 0 ? TSR_TASKS_ROW : k == 1 ? TSR_TASKS_SPLIT : k == 2 ? TSR_TASKS_PACK : TSR_TASKS_AUTO;
    o.split_tiles = k == 1 ? 2 : 0;
    ck_assert_msg(tsr_plan_create(&p, m, &o, &pl[k], &err) == TSR_OK, "seed %llu: %s", (unsigned long long)seed,
                  err.text);
    ck_assert_msg(tsr_plan_verify(pl[k], m, &err) == TSR_OK, "%s", err.text);
  }
  for (k = 1; k < 4; k++)
    ck_assert_msg(!plan_rows_diff(pl[0], pl[k], 0, why, sizeof why), "seed %llu layout %d: %s",
                  (unsigned long long)seed, k, why);
  ck_assert_msg(!plan_rows_diff(pl[0], pl[0], 1, why, sizeof why), "%s", why);
  /* Split rows have other chunks than whole rows, when a row has 3+ tiles. */
  if (pl[1]->n_merges > 0) ck_assert(plan_rows_diff(pl[0], pl[1], 1, why, sizeof why));
  /* Teeth: a changed membership word or k tile is found. */
  if (pl[1]->n_membership > 0) {
    pl[1]->membership[pl[1]->n_membership / 2] ^= 1u << 5;
    ck_assert(plan_rows_diff(pl[0], pl[1], 0, why, sizeof why));
    ck_assert_msg(strstr(why, "membership words differ"), "%s", why);
    pl[1]->membership[pl[1]->n_membership / 2] ^= 1u << 5;
  }
  if (pl[2]->n_tiles > 0) {
    pl[2]->tiles[pl[2]->n_tiles - 1].k_tile ^= 1;
    ck_assert(plan_rows_diff(pl[0], pl[2], 0, why, sizeof why));
  }
  for (k = 0; k < 4; k++) tsr_plan_destroy(pl[k]);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  free(bits);
  free(qs);
  free(ks);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("gpuplan");
  TCase *tc = tcase_create("gpuplan");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_create_variable_inputs);
  tcase_add_loop_test(tc, test_create_gather_inputs, 0, 8);
  tcase_add_loop_test(tc, test_rows_equal_across_layouts, 0, 16);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

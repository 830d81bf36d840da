/*
 * check_produce.c: the mask producers' entries (tsr_produce_pool,
 * tsr_produce_select, tsr_produce_sampled and its work_bytes,
 * tsr_producer_create) refuse bad arguments with the
 * status and a message naming the value, before they touch a device, so
 * this runs without one.  The kernels themselves are checked on the GPU
 * (tests/device/producer_stages.py, producer_ab.py, methods_bench.py).
 */
#include <check.h>
#include <string.h>

#include "tessera.h"
#include "util.h"

static tsr_pool_args good_pool(void)
{
  tsr_pool_args a;
  memset(&a, 0, sizeof a);
  a.x = 0x1000;
  a.out = 0x2000;
  a.dtype = TSR_DT_BF16;
  a.batch = 1, a.heads = 2, a.tokens = 2 * 3 * 5, a.dim = 8;
  a.stride_b = 2 * 30 * 8, a.stride_h = 30 * 8, a.stride_s = 8;
  a.grid[0] = 2, a.grid[1] = 3, a.grid[2] = 5;
  a.tile[0] = 1, a.tile[1] = 2, a.tile[2] = 4;
  return a;
}

static tsr_select_args good_select(void)
{
  tsr_select_args a;
  memset(&a, 0, sizeof a);
  a.pq = 0x1000, a.pk = 0x2000, a.out = 0x3000;
  a.dtype = TSR_DT_F32;
  a.batch = 1, a.heads = 4, a.kv_heads = 2, a.nq = 6, a.nk = 9, a.dim = 16;
  a.scale = 0.25;
  a.rule = TSR_SELECT_TOPK;
  a.k = 3;
  return a;
}

static tsr_sampled_args good_sampled(void)
{
  tsr_sampled_args a;
  int i;
  memset(&a, 0, sizeof a);
  a.q = 0x1000, a.k = 0x2000, a.v = 0x3000, a.rows = 0x4000, a.planes = 0x5000, a.out = 0x6000;
  a.work = 0x7000, a.work_bytes = 1 << 20;
  a.dtype = TSR_DT_BF16;
  a.batch = 2, a.heads = 3, a.tokens = 100, a.dim = 64;
  for (i = 0; i < 3; i++) { /* k and v in bshd, q in bhsd */
    int64_t *st = i == 0 ? a.q_stride : i == 1 ? a.k_stride : a.v_stride;
    st[0] = 3 * 100 * 64, st[1] = i ? 64 : 100 * 64, st[2] = i ? 3 * 64 : 64;
  }
  a.samples = 5;
  a.scale = 0.125;
  return a;
}

/* status and a message containing `want`; err is cleared for the next
 * call (an error record keeps its first error) */
static void expect(tsr_status st, tsr_error *err, tsr_status want_st, const char *want)
{
  ck_assert_msg(st == want_st, "status %d, wanted %d (%s)", (int)st, (int)want_st, err->text);
  ck_assert_msg(strstr(err->text, want) != NULL, "message '%s' lacks '%s'", err->text, want);
  memset(err, 0, sizeof *err);
}

START_TEST(test_pool_args)
{
  tsr_error err;
  tsr_pool_args a;
  memset(&err, 0, sizeof err);
  expect(tsr_produce_pool(NULL, NULL, NULL, &err), &err, TSR_ERR_INVALID, "arguments are NULL");
  a = good_pool(), a.dtype = TSR_DT_I32;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_DTYPE, "got int32");
  a = good_pool(), a.x = 0;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "null pointer");
  a = good_pool(), a.dim = 0;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "got 1, 2, 30, 0");
  a = good_pool(), a.heads = 70000;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "heads 70000 over 65535");
  a = good_pool(), a.tile[2] = 0;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "tile[2] = 0");
  a = good_pool(), a.grid[1] = -3;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "grid[1] = -3");
  a = good_pool(), a.tokens = 31;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "grid 2x3x5 has 30 tokens, x has 31");
  a = good_pool(), a.stride_s = 4;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "token 4) must be");
  a = good_pool(), a.stride_h = -1;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "head -1");
  /* a second tensor and runs of tiles in tile order */
  a = good_pool(), a.kernel = 2;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "kernel must be 0 (automatic) or 1");
  a = good_pool(), a.runs = 9;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "runs must be 0 (grid tiles) to 8, got 9");
  a = good_pool(), a.runs = 2, a.run_tiles[0] = 3, a.run_size[0] = 8, a.run_tiles[1] = 2, a.run_size[1] = 4;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "the runs hold 32 tokens, x has 30");
  a = good_pool(), a.runs = 1, a.run_tiles[0] = 0, a.run_size[0] = 30;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "got 0 tiles of 30 tokens");
  a = good_pool(), a.runs = 1, a.run_tiles[0] = 1, a.run_size[0] = 30, a.order = 0x7000;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "order (0x7000) needs runs = 0 (got 1)");
  a = good_pool(), a.order = 0x7002;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "order (0x7002) needs runs = 0 (got 0) "
         "and a 4-byte aligned address");
  a = good_pool(), a.x2 = 0x4000;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "out2 is a null pointer");
  a = good_pool(), a.x2 = 0x4000, a.out2 = 0x5000, a.sq = 0x6000;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "out2 or sq2 is a null pointer");
  a = good_pool(), a.x2 = 0x4000, a.out2 = 0x5000, a.heads2 = 0;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "heads2 must be 1 to 65535, got 0");
  a = good_pool(), a.x2 = 0x4000, a.out2 = 0x5000, a.heads2 = 1, a.stride2_s = 3;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "x2's strides (batch 0, head 0, token 3)");
  /* arguments pass: only the missing producer is left (grid tiles; runs with
   * the grid unset; a second tensor) */
  a = good_pool();
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "producer is NULL");
  a = good_pool(), a.grid[0] = a.grid[1] = a.grid[2] = 0, a.runs = 2;
  a.run_tiles[0] = 3, a.run_size[0] = 8, a.run_tiles[1] = 1, a.run_size[1] = 6;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "producer is NULL");
  a = good_pool(), a.x2 = 0x4000, a.out2 = 0x5000, a.heads2 = 1, a.stride2_s = 8, a.kernel = 1;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "producer is NULL");
  a = good_pool(), a.order = 0x7000;
  expect(tsr_produce_pool(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "producer is NULL");
}
END_TEST

START_TEST(test_select_args)
{
  tsr_error err;
  tsr_select_args a;
  memset(&err, 0, sizeof err);
  expect(tsr_produce_select(NULL, NULL, NULL, &err), &err, TSR_ERR_INVALID, "arguments are NULL");
  a = good_select(), a.dtype = TSR_DT_BF16;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_DTYPE, "got bf16");
  a = good_select(), a.out = 0;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "null pointer");
  a = good_select(), a.nk = -9;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE, "got 1, 4, 2, 6, -9, 16");
  a = good_select(), a.kv_heads = 3;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_SHAPE,
         "query heads 4 are not a multiple of key heads 3");
  a = good_select(), a.rule = (tsr_select_rule)7;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "unknown rule 7");
  a = good_select(), a.rule = TSR_SELECT_CDF, a.tau = 1.5;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "tau must be in [0, 1], got 1.5");
  a = good_select(), a.k = -2;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "k -2 and min_keep 0");
  a = good_select(), a.scale = 0.0 / 0.0;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "scale must be positive");
  a = good_select(), a.scale = -1.0;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "got -1");
  a = good_select(), a.rows = 33;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "0 (automatic) to 32, got 33");
  a = good_select(), a.rows = -1;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "got -1");
  a = good_select(), a.kernel = 3;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "kernel must be 0 (automatic), 1");
  a = good_select(), a.kernel = 2, a.dtype = TSR_DT_F64;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_UNSUPPORTED, "kernel 2 (k transposed) takes");
  a = good_select(), a.kernel = 2, a.dim = 24;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_UNSUPPORTED, "multiple of 16 (got 24)");
  a = good_select(), a.kernel = 2, a.nk = 1025;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_UNSUPPORTED, "nk up to 1024 (got 1025)");
  a = good_select();
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "producer is NULL");
  a = good_select(), a.kernel = 1;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "producer is NULL");
  a = good_select(), a.rows = 5, a.rule = TSR_SELECT_CDF, a.tau = 1.0, a.min_keep = 1;
  expect(tsr_produce_select(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "producer is NULL");
}
END_TEST

/* every refusal through both entries: the work size checks all but the
 * working space, the launch that too */
static void expect_sampled(const tsr_sampled_args *a, tsr_status want_st, const char *want)
{
  tsr_error err;
  memset(&err, 0, sizeof err);
  ck_assert_int_eq(tsr_produce_sampled_work_bytes(NULL, a, &err), 0);
  expect(err.status, &err, want_st, want);
  expect(tsr_produce_sampled(NULL, a, NULL, &err), &err, want_st, want);
}

START_TEST(test_sampled_args)
{
  tsr_sampled_args a;
  tsr_error err;
  memset(&err, 0, sizeof err);
  expect_sampled(NULL, TSR_ERR_INVALID, "arguments are NULL");
  a = good_sampled(), a.dtype = TSR_DT_F32;
  expect_sampled(&a, TSR_ERR_DTYPE, "fp16 or bf16, got float32");
  a = good_sampled(), a.dtype = (tsr_dtype)77;
  expect_sampled(&a, TSR_ERR_DTYPE, "got unknown");
  a = good_sampled(), a.planes = 0;
  expect_sampled(&a, TSR_ERR_INVALID, "null pointer");
  a = good_sampled(), a.tokens = 0;
  expect_sampled(&a, TSR_ERR_SHAPE, "got 2, 3, 0");
  a = good_sampled(), a.heads = -4;
  expect_sampled(&a, TSR_ERR_SHAPE, "got 2, -4, 100");
  a = good_sampled(), a.batch = 300, a.heads = 300;
  expect_sampled(&a, TSR_ERR_SHAPE, "batch x heads 90000 over 65535");
  a = good_sampled(), a.dim = 96;
  expect_sampled(&a, TSR_ERR_UNSUPPORTED, "dim must be 64 or 128, got 96");
  a = good_sampled(), a.samples = 0;
  expect_sampled(&a, TSR_ERR_SHAPE, "samples must be 1 to 65535, got 0");
  a = good_sampled(), a.samples = 65536;
  expect_sampled(&a, TSR_ERR_SHAPE, "got 65536");
  a = good_sampled(), a.k_stride[2] = 60;
  expect_sampled(&a, TSR_ERR_SHAPE, "k's strides (batch 19200, head 64, token 60)");
  a = good_sampled(), a.v_stride[1] = 68;
  expect_sampled(&a, TSR_ERR_SHAPE, "v's strides (batch 19200, head 68, token 192)");
  a = good_sampled(), a.q_stride[0] = -8;
  expect_sampled(&a, TSR_ERR_SHAPE, "q's strides (batch -8");
  a = good_sampled(), a.q = 0x1008;
  expect_sampled(&a, TSR_ERR_SHAPE, "16-byte aligned address (0x1008)");
  a = good_sampled(), a.rows = 0x4002;
  expect_sampled(&a, TSR_ERR_INVALID, "rows (0x4002)");
  a = good_sampled(), a.scale = 0.0;
  expect_sampled(&a, TSR_ERR_INVALID, "scale must be positive and finite, got 0");
  a = good_sampled(), a.scale = 1.0 / 0.0;
  expect_sampled(&a, TSR_ERR_INVALID, "got inf");
  a = good_sampled(), a.scale = 0.0 / 0.0;
  expect_sampled(&a, TSR_ERR_INVALID, "scale must be positive");
  a = good_sampled(), a.stages = 1;
  expect_sampled(&a, TSR_ERR_INVALID, "stages must be 0 (automatic), 2 or 3, got 1");
  a = good_sampled(), a.stages = 4;
  expect_sampled(&a, TSR_ERR_INVALID, "got 4");
  /* the working space: only the launch needs it */
  a = good_sampled(), a.work = 0;
  ck_assert_int_eq(tsr_produce_sampled_work_bytes(NULL, &a, &err), 0);
  expect(err.status, &err, TSR_ERR_INVALID, "producer is NULL");
  expect(tsr_produce_sampled(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "null pointer");
  a = good_sampled(), a.work = 0x7008;
  expect(tsr_produce_sampled(NULL, &a, NULL, &err), &err, TSR_ERR_INVALID, "work (0x7008) 16-byte");
  a = good_sampled();
  expect_sampled(&a, TSR_ERR_INVALID, "producer is NULL");
}
END_TEST

START_TEST(test_create_args)
{
  tsr_error err;
  tsr_producer *p = (tsr_producer *)0x1;
  memset(&err, 0, sizeof err);
  expect(tsr_producer_create(NULL, NULL, &err), &err, TSR_ERR_INVALID, "out is NULL");
  expect(tsr_producer_create(NULL, &p, &err), &err, TSR_ERR_INVALID, "context is NULL");
  ck_assert_ptr_null(p);
  tsr_producer_destroy(NULL); /* a no-op */
}
END_TEST

int main(void)
{
  Suite *s = suite_create("produce");
  TCase *tc = tcase_create("produce");
  tcase_add_test(tc, test_pool_args);
  tcase_add_test(tc, test_select_args);
  tcase_add_test(tc, test_sampled_args);
  tcase_add_test(tc, test_create_args);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

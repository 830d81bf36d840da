/*
 * check_problem.c: problem validation (sizes, GQA ratio, scale, dtype,
 * geometry agreement) and problem sizes read from CPU arrays.
 */
#include <check.h>

#include "tessera.h"
#include "util.h"

static tsr_geom *G;

static tsr_problem good(void)
{
  tsr_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 2, p.heads_q = 8, p.heads_kv = 2, p.seq_q = 300, p.seq_k = 200, p.head_dim = 64;
  p.dtype = TSR_DT_BF16, p.layout = TSR_LAYOUT_BSHD, p.geom = G;
  return p;
}

static void setup(void)
{
  tsr_error err = {0};
  ck_assert_int_eq(tsr_geom_uniform(300, 200, 64, 32, &G, &err), TSR_OK);
}

static void teardown(void)
{
  tsr_geom_destroy(G);
}

static void expect(tsr_problem p, tsr_status st, const char *needle)
{
  tsr_error err = {0};
  ck_assert_int_eq(tsr_problem_check(&p, &err), st);
  ck_assert_msg(strstr(err.text, needle), "lacks '%s': %s", needle, err.text);
}

START_TEST(test_check)
{
  tsr_problem p = good();
  tsr_error err = {0};
  ck_assert_int_eq(tsr_problem_check(&p, &err), TSR_OK);
  ck_assert(fabs(p.scale - 0.125) < 1e-15); /* default 1/sqrt(64) filled in */
  p.scale = -0.3;
  ck_assert_int_eq(tsr_problem_check(&p, &err), TSR_OK);
  ck_assert(p.scale == -0.3);

  p = good(), p.batch = 0;
  expect(p, TSR_ERR_INVALID, "batch is 0");
  p = good(), p.heads_kv = -1;
  expect(p, TSR_ERR_INVALID, "key/value heads is -1");
  p = good(), p.head_dim = 0;
  expect(p, TSR_ERR_INVALID, "head dim is 0");
  p = good(), p.heads_kv = 3;
  expect(p, TSR_ERR_SHAPE, "8 query heads is not a multiple of 3");
  p = good(), p.scale = NAN;
  expect(p, TSR_ERR_INVALID, "scale nan is not finite");
  p = good(), p.scale = -INFINITY;
  expect(p, TSR_ERR_INVALID, "scale -inf is not finite");
  p = good(), p.dtype = TSR_DT_F32;
  expect(p, TSR_ERR_DTYPE, "device dtype float32");
  p = good(), p.layout = (tsr_layout)7;
  expect(p, TSR_ERR_INVALID, "unknown layout 7");
  p = good(), p.geom = NULL;
  expect(p, TSR_ERR_INVALID, "no block geometry");
  p = good(), p.seq_k = 201;
  expect(p, TSR_ERR_SHAPE, "geometry covers 300 x 200 tokens, sequences are 300 x 201");
}
END_TEST

START_TEST(test_from_arrays)
{
  float x[1] = {1};
  tsr_array q = {TSR_DT_F16, 4, {3, 6, 50, 32}, x}, k = {TSR_DT_F32, 4, {3, 2, 70, 32}, x},
            v = {TSR_DT_F32, 4, {3, 2, 70, 32}, x};
  const char *names[3] = {"q.npy", "k.npy", "v.npy"};
  tsr_problem p;
  tsr_error err = {0};
  memset(&p, 0, sizeof p);
  ck_assert_int_eq(tsr_problem_from_arrays(&p, &q, &k, &v, names, &err), TSR_OK);
  ck_assert_int_eq(p.batch, 3);
  ck_assert_int_eq(p.heads_q, 6);
  ck_assert_int_eq(p.heads_kv, 2);
  ck_assert_int_eq(p.seq_q, 50);
  ck_assert_int_eq(p.seq_k, 70);
  ck_assert_int_eq(p.head_dim, 32);
  k.shape[1] = v.shape[1] = 4;
  ck_assert_int_eq(tsr_problem_from_arrays(&p, &q, &k, &v, names, &err), TSR_ERR_SHAPE);
  ck_assert_str_eq(err.text, "invalid heads: q 'q.npy' has 6, not a multiple of the 4 of k 'k.npy'");
  /* 3-D arrays mean batch 1, and must agree with 4-D ones */
  k.shape[1] = v.shape[1] = 2;
  q.ndim = 3;
  q.shape[0] = 6, q.shape[1] = 50, q.shape[2] = 32;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_problem_from_arrays(&p, &q, &k, &v, names, &err), TSR_ERR_SHAPE);
  ck_assert_str_eq(err.text, "invalid k 'k.npy': batch 3, but q 'q.npy' has 1");
  q.shape[2] = 0;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_problem_from_arrays(&p, &q, &k, &v, NULL, &err), TSR_ERR_SHAPE);
  ck_assert_str_eq(err.text, "invalid q: head dim is 0, must be 1..2147483647");
}
END_TEST

/* The limits of tessera.h, at and just past each (issue 14, 7). */
START_TEST(test_limits)
{
  tsr_geom *g = NULL;
  tsr_problem p;
  tsr_error err = {0};
  char want[128];
  /* a sequence of TSR_MAX_SEQ tokens (one block) is valid, one more is not */
  ck_assert_int_eq(tsr_geom_uniform(TSR_MAX_SEQ, 64, TSR_MAX_SEQ, 64, &g, &err), TSR_OK);
  p = good();
  p.seq_q = TSR_MAX_SEQ, p.seq_k = 64, p.geom = g;
  ck_assert_msg(tsr_problem_check(&p, &err) == TSR_OK, "%s", err.text);
  p.seq_q = TSR_MAX_SEQ + 1;
  ck_assert_int_eq(tsr_problem_check(&p, &err), TSR_ERR_INVALID);
  snprintf(want, sizeof want, "query length is %lld, must be 1..%lld", (long long)TSR_MAX_SEQ + 1,
           (long long)TSR_MAX_SEQ);
  ck_assert_msg(strstr(err.text, want), "%s", err.text);
  ck_assert_int_eq(TSR_MAX_SEQ, 2147483136); /* as the man pages say */
  tsr_geom_destroy(g);
  /* a longer sequence makes no geometry either */
  g = (tsr_geom *)&p;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_uniform(TSR_MAX_SEQ + 1, 64, 64, 64, &g, &err), TSR_ERR_INVALID);
  ck_assert_ptr_null(g);
  /* batch x query heads past the rows a plan can address */
  p = good();
  p.batch = 65536, p.heads_q = 32768 + 1, p.heads_kv = 1;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_problem_check(&p, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "batch 65536 x 32769 query heads exceeds the 2147483647 rows"),
                "%s", err.text);
  p.heads_q = 32767; /* 65536 x 32767 < 2^31 */
  tsr_error_clear(&err);
  ck_assert_msg(tsr_problem_check(&p, &err) == TSR_OK, "%s", err.text);
  /* arrays: the length dimension has the sequence limit */
  {
    tsr_array q, k;
    tsr_problem a;
    const char *names[3] = {"q.npy", "k.npy", "k.npy"};
    memset(&q, 0, sizeof q);
    q.dtype = TSR_DT_F32, q.ndim = 3, q.shape[0] = 1, q.shape[1] = TSR_MAX_SEQ + 1, q.shape[2] = 8;
    k = q;
    k.shape[1] = 16;
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_problem_from_arrays(&a, &q, &k, &k, names, &err), TSR_ERR_SHAPE);
    snprintf(want, sizeof want, "invalid q 'q.npy': length is %lld, must be 1..%lld",
             (long long)TSR_MAX_SEQ + 1, (long long)TSR_MAX_SEQ);
    ck_assert_msg(strstr(err.text, want), "%s", err.text);
    q.shape[1] = TSR_MAX_SEQ;
    tsr_error_clear(&err);
    ck_assert_msg(tsr_problem_from_arrays(&a, &q, &k, &k, names, &err) == TSR_OK, "%s", err.text);
    ck_assert_int_eq(a.seq_q, TSR_MAX_SEQ);
  }
  /* shape products that overflow int64 are -1, not a wrapped count */
  {
    tsr_array x;
    memset(&x, 0, sizeof x);
    x.ndim = 3, x.shape[0] = (int64_t)1 << 40, x.shape[1] = (int64_t)1 << 30, x.shape[2] = 16;
    ck_assert_int_eq(tsr_array_numel(&x), -1);
    x.shape[1] = 1 << 18;
    ck_assert_int_eq(tsr_array_numel(&x), (int64_t)1 << 62);
    x.shape[1] = 1 << 19; /* 2^63 */
    ck_assert_int_eq(tsr_array_numel(&x), -1);
    x.shape[2] = -1;
    ck_assert_int_eq(tsr_array_numel(&x), -1);
  }
}
END_TEST

int main(void)
{
  Suite *s = suite_create("problem");
  TCase *tc = tcase_create("problem");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_check);
  tcase_add_test(tc, test_from_arrays);
  tcase_add_test(tc, test_limits);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

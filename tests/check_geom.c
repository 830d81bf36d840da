/*
 * check_geom.c: logical block geometry (uniform, ragged, rectangular,
 * variable) against boundaries the test computes itself.
 */
#include <check.h>

#include "tessera.h"
#include "util.h"

START_TEST(test_uniform_random)
{
  tu_rng r = {tu_seed("uniform_random", 11) + (uint64_t)_i};
  int64_t Sq = tu_range(&r, 1, 5000), Sk = tu_range(&r, 1, 5000);
  int64_t bq = tu_range(&r, 1, 400), bk = tu_range(&r, 1, 400), gbq = 0, gbk = 0, i;
  int64_t *qb, *kb, nq, nk;
  tsr_geom *g = NULL;
  tsr_error err = {0};
  ck_assert_int_eq(tsr_geom_uniform(Sq, Sk, bq, bk, &g, &err), TSR_OK);
  nq = tu_uniform_bounds(Sq, bq, &qb);
  nk = tu_uniform_bounds(Sk, bk, &kb);
  ck_assert_int_eq(tsr_geom_seq_q(g), Sq);
  ck_assert_int_eq(tsr_geom_seq_k(g), Sk);
  ck_assert_int_eq(tsr_geom_nq(g), nq);
  ck_assert_int_eq(tsr_geom_nk(g), nk);
  for (i = 0; i <= nq; i++)
    ck_assert_int_eq(tsr_geom_q_start(g, i), qb[i]);
  for (i = 0; i <= nk; i++)
    ck_assert_int_eq(tsr_geom_k_start(g, i), kb[i]);
  /* the last block holds the remainder, every other one a full block */
  ck_assert_int_eq(Sq - tsr_geom_q_start(g, nq - 1), Sq % bq ? Sq % bq : bq);
  ck_assert_int_eq(tsr_geom_q_start(g, -1), -1);
  ck_assert_int_eq(tsr_geom_q_start(g, nq + 1), -1);
  ck_assert_int_eq(tsr_geom_k_start(g, nk + 1), -1);
  ck_assert(tsr_geom_is_uniform(g, &gbq, &gbk));
  ck_assert_int_eq(gbq, bq);
  ck_assert_int_eq(gbk, bk);
  tsr_geom_destroy(g);
  free(qb);
  free(kb);
}
END_TEST

START_TEST(test_uniform_edges)
{
  tsr_geom *g;
  tsr_error err = {0};
  /* block larger than the sequence: one ragged block */
  ck_assert_int_eq(tsr_geom_uniform(100, 300, 128, 64, &g, &err), TSR_OK);
  ck_assert_int_eq(tsr_geom_nq(g), 1);
  ck_assert_int_eq(tsr_geom_q_start(g, 1), 100);
  ck_assert_int_eq(tsr_geom_nk(g), 5);
  ck_assert_int_eq(tsr_geom_k_start(g, 4), 256);
  ck_assert_int_eq(tsr_geom_k_start(g, 5), 300);
  tsr_geom_destroy(g);
  /* exact multiple: no ragged block */
  ck_assert_int_eq(tsr_geom_uniform(384, 384, 384, 128, &g, &err), TSR_OK);
  ck_assert_int_eq(tsr_geom_nq(g), 1);
  ck_assert_int_eq(tsr_geom_nk(g), 3);
  tsr_geom_destroy(g);
  tsr_geom_destroy(NULL);
}
END_TEST

START_TEST(test_uniform_rejects)
{
  static const int64_t bad[][4] = {
      {0, 10, 1, 1}, {10, 0, 1, 1}, {10, 10, 0, 1}, {10, 10, 1, 0}, {-5, 10, 1, 1},
      {10, 10, -64, 64}, {(int64_t)1 << 40, 10, 64, 64}, {10, 10, 64, (int64_t)1 << 40},
  };
  static const char *needle[] = {"query length 0", "key length 0", "query block size 0",
                                 "key block size 0", "query length -5", "query block size -64",
                                 "query length 1099511627776", "key block size 1099511627776"};
  size_t i;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tsr_geom *g = (tsr_geom *)&g;
    tsr_error err = {0};
    ck_assert_int_eq(tsr_geom_uniform(bad[i][0], bad[i][1], bad[i][2], bad[i][3], &g, &err),
                     TSR_ERR_INVALID);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err.text, needle[i]), "%s", err.text);
  }
}
END_TEST

START_TEST(test_variable_random)
{
  tu_rng r = {tu_seed("variable_random", 12) + (uint64_t)_i};
  int64_t nq = tu_range(&r, 1, 50), nk = tu_range(&r, 1, 50), i, sq = 0, sk = 0;
  int64_t *qs = malloc((size_t)nq * 8), *ks = malloc((size_t)nk * 8);
  tsr_geom *g;
  tsr_error err = {0};
  for (i = 0; i < nq; i++)
    qs[i] = tu_range(&r, 1, 200);
  for (i = 0; i < nk; i++)
    ks[i] = tu_range(&r, 1, 200);
  ck_assert_int_eq(tsr_geom_variable(qs, nq, ks, nk, &g, &err), TSR_OK);
  ck_assert_int_eq(tsr_geom_nq(g), nq);
  ck_assert_int_eq(tsr_geom_nk(g), nk);
  for (i = 0; i < nq; i++) {
    ck_assert_int_eq(tsr_geom_q_start(g, i), sq);
    sq += qs[i];
  }
  for (i = 0; i < nk; i++) {
    ck_assert_int_eq(tsr_geom_k_start(g, i), sk);
    sk += ks[i];
  }
  ck_assert_int_eq(tsr_geom_q_start(g, nq), sq);
  ck_assert_int_eq(tsr_geom_k_start(g, nk), sk);
  ck_assert_int_eq(tsr_geom_seq_q(g), sq);
  ck_assert_int_eq(tsr_geom_seq_k(g), sk);
  ck_assert(!tsr_geom_is_uniform(g, NULL, NULL));
  tsr_geom_destroy(g);
  free(qs);
  free(ks);
}
END_TEST

START_TEST(test_variable_rejects)
{
  int64_t good[3] = {5, 6, 7}, zero[3] = {5, 0, 7}, neg[2] = {3, -1};
  int64_t huge[2] = {(int64_t)1 << 30, (int64_t)1 << 30};
  tsr_geom *g = (tsr_geom *)&g;
  tsr_error err = {0};
  ck_assert_int_eq(tsr_geom_variable(zero, 3, good, 3, &g, &err), TSR_ERR_INVALID);
  ck_assert_ptr_null(g);
  ck_assert_ptr_nonnull(strstr(err.text, "query block 1: size 0"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_variable(good, 3, neg, 2, &g, &err), TSR_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.text, "key block 1: size -1"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_variable(good, 0, good, 3, &g, &err), TSR_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.text, "query block count 0"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_variable(good, 3, NULL, 3, &g, &err), TSR_ERR_INVALID);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_variable(huge, 2, good, 3, &g, &err), TSR_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.text, "exceeds"));
  ck_assert_ptr_null(g);
}
END_TEST

/* Sizes at and past TSR_MAX_SEQ, and block sizes whose sum overflows
 * int64 (issue 14, 7 and 8): refused naming the block, never wrapped. */
START_TEST(test_limits)
{
  tu_rng r = {tu_seed("geom_limits", 13)};
  tsr_geom *g = NULL;
  tsr_error err = {0};
  int64_t sizes[8], i, n = tu_range(&r, 2, 8);
  char want[160];
  ck_assert_int_eq(tsr_geom_uniform(TSR_MAX_SEQ, TSR_MAX_SEQ, 128, TSR_MAX_SEQ, &g, &err), TSR_OK);
  ck_assert_int_eq(tsr_geom_nq(g), (TSR_MAX_SEQ + 127) / 128);
  ck_assert_int_eq(tsr_geom_q_start(g, tsr_geom_nq(g)), TSR_MAX_SEQ);
  ck_assert_int_eq(tsr_geom_nk(g), 1);
  tsr_geom_destroy(g);
  ck_assert_int_eq(tsr_geom_uniform(64, TSR_MAX_SEQ + 1, 64, 64, &g, &err), TSR_ERR_INVALID);
  snprintf(want, sizeof want, "invalid key length %lld: must be 1..%lld",
           (long long)TSR_MAX_SEQ + 1, (long long)TSR_MAX_SEQ);
  ck_assert_msg(strstr(err.text, want), "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_uniform(64, 64, TSR_MAX_SEQ + 1, 64, &g, &err), TSR_ERR_INVALID);
  /* [2^62] x n: the sum passes the limit at block 0; INT64_MAX twice */
  for (i = 0; i < n; i++)
    sizes[i] = (int64_t)1 << 62;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_variable(sizes, n, sizes, 1, &g, &err), TSR_ERR_INVALID);
  ck_assert_ptr_null(g);
  ck_assert_msg(strstr(err.text, "with block 0 of size 4611686018427387904 the total length "
                                 "exceeds 2147483136 tokens"), "%s", err.text);
  sizes[0] = 1 + tu_range(&r, 0, 1000);
  sizes[1] = INT64_MAX;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_variable(sizes, 2, sizes, 1, &g, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "query blocks: with block 1 of size 9223372036854775807"), "%s",
                err.text);
  /* sizes summing to exactly the limit are fine */
  sizes[0] = TSR_MAX_SEQ - 100, sizes[1] = 100;
  tsr_error_clear(&err);
  ck_assert_msg(tsr_geom_variable(sizes, 2, sizes, 2, &g, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(tsr_geom_seq_k(g), TSR_MAX_SEQ);
  tsr_geom_destroy(g);
  sizes[1] = 101;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_geom_variable(sizes, 2, sizes, 1, &g, &err), TSR_ERR_INVALID);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("geom");
  TCase *tc = tcase_create("geom");
  tcase_add_loop_test(tc, test_uniform_random, 0, 50);
  tcase_add_test(tc, test_uniform_edges);
  tcase_add_test(tc, test_uniform_rejects);
  tcase_add_loop_test(tc, test_variable_random, 0, 30);
  tcase_add_test(tc, test_variable_rejects);
  tcase_add_test(tc, test_limits);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

/*
 * check_abi.c: tsr_abi_sizeof reports every struct a binding mirrors, as
 * this build lays it out, and 0 for anything else (python/tessera.py
 * compares its ctypes copies with these at import).
 */
#include <check.h>

#include "tessera.h"
#include "util.h"

#define SIZES(X)                                                             \
  X(tsr_error) X(tsr_problem) X(tsr_plan_opts) X(tsr_plan_summary)           \
  X(tsr_context_opts) X(tsr_gpu_tensors) X(tsr_features) X(tsr_region)       \
  X(tsr_selection) X(tsr_gpuplan_caps) X(tsr_gpuplan_stats) X(tsr_array)  \
  X(tsr_pool_args) X(tsr_select_args) X(tsr_sampled_args)

START_TEST(test_known)
{
#define CHECK_SIZE(t) ck_assert_uint_eq(tsr_abi_sizeof(#t), sizeof(t));
  SIZES(CHECK_SIZE)
#undef CHECK_SIZE
}
END_TEST

START_TEST(test_unknown)
{
  static const char *const bad[] = {"", "tsr_", "tsr_problemx", "tsr_proble", "TSR_PROBLEM",
                                    "tsr_plan", "tsr_mask", "tsr_problem "};
  size_t i;
  ck_assert_uint_eq(tsr_abi_sizeof(NULL), 0);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(tsr_abi_sizeof(bad[i]) == 0, "'%s' gave %zu", bad[i], tsr_abi_sizeof(bad[i]));
}
END_TEST

int main(void)
{
  Suite *s = suite_create("abi");
  TCase *tc = tcase_create("abi");
  tcase_add_test(tc, test_known);
  tcase_add_test(tc, test_unknown);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

/*
 * abi.c: the sizes of the public structures, for bindings that mirror them
 * by hand (python/tessera.py, through ctypes) and check their copies at
 * load, so a field added on one side fails loudly instead of shifting
 * every field after it.  Cost: one string comparison per listed type.
 */
#include <string.h>

#include "tessera.h"

/* Every plain struct of tessera.h that a binding passes by pointer. */
#define TSR_ABI_TYPES(X)                                                     \
  X(tsr_error)                                                               \
  X(tsr_array)                                                               \
  X(tsr_problem)                                                             \
  X(tsr_plan_opts)                                                           \
  X(tsr_plan_summary)                                                        \
  X(tsr_context_opts)                                                        \
  X(tsr_gpu_tensors)                                                         \
  X(tsr_features)                                                            \
  X(tsr_region)                                                              \
  X(tsr_selection)                                                           \
  X(tsr_gpuplan_caps)                                                        \
  X(tsr_gpuplan_stats)                                                       \
  X(tsr_gpuplan_regime)                                                      \
  X(tsr_gpuplan_hold)                                                        \
  X(tsr_pool_args)                                                           \
  X(tsr_select_args)                                                         \
  X(tsr_sampled_args)

static const struct {
  const char *name;
  size_t size;
} abi_types[] = {
#define TSR_X_SIZE(t) {#t, sizeof(t)},
    TSR_ABI_TYPES(TSR_X_SIZE)
#undef TSR_X_SIZE
};

size_t tsr_abi_sizeof(const char *type_name)
{
  size_t i;
  if (!type_name)
    return 0;
  for (i = 0; i < sizeof abi_types / sizeof abi_types[0]; i++)
    if (!strcmp(type_name, abi_types[i].name))
      return abi_types[i].size;
  return 0;
}

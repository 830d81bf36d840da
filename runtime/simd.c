/*
 * simd.c: which instruction sets the hot loops may use (simd.h).  One
 * getenv and a few cached cpuid tests a call.
 */
#include "simd.h"

#include <stdlib.h>
#include <string.h>

int tsri_simd_level(void)
{
  static const char *const names[] = {"none", "sse2", "avx2", "avx512"};
  const char *cap = getenv("TESSERA_PLAN_SIMD");
  int lvl = TSR_SIMD_NONE, i;
#ifdef TSR_X86
  lvl = TSR_SIMD_SSE2;
  if (__builtin_cpu_supports("avx2"))
    lvl = TSR_SIMD_AVX2;
  if (lvl == TSR_SIMD_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
    lvl = TSR_SIMD_AVX512;
#endif
  for (i = 0; cap && i < 4; i++)
    if (!strcmp(cap, names[i]) && i < lvl)
      lvl = i;
  return lvl;
}

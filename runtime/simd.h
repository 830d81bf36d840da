/*
 * simd.h: the instruction sets the host's hot loops may use (mask row
 * packing in mask.c, tile emission in map.c): the best this CPU has, capped
 * by the environment variable TESSERA_PLAN_SIMD (none, sse2, avx2, avx512)
 * so that the tests can compare every path with the portable one.  Every
 * level gives the same bytes.  Not installed.
 */
#ifndef TSR_SIMD_H
#define TSR_SIMD_H

#if defined(__GNUC__) && defined(__x86_64__)
#define TSR_X86 1
#endif

enum { TSR_SIMD_NONE, TSR_SIMD_SSE2, TSR_SIMD_AVX2, TSR_SIMD_AVX512 };

/* The level to use now (reads the environment on every call). */
int tsri_simd_level(void);

#endif

/*
 * templates/attn_sm90_fp8_rule.cuh: the FP8 per-head fallback rule's float
 * logic as the device computes it (issue 18, docs/fp8.md "Fallback"),
 * written in plain C so that tests/check_fp8.c compiles this same text for
 * the host and checks it against runtime/fp8.c (tsri_fp8_falls_back and
 * the k_chan statistic of tsri_fp8_quantize) bit for bit.  Included by
 * attn_sm90_fp8.cuh, where _kvstats' last CTA of a (batch, kv head) runs
 * it on its D channels.
 *
 * The rule: k_chan = max over channels c of amax_c divided by the median
 * of amax_c (the mean of the two middle values: D is even), amax_c =
 * max_t |k[t, c] - mean_c| (the smoothed K's channel amax); the head falls
 * back to the native dtype when k_chan > TSR_F8_K_CHAN_MAX.  1 when the
 * median is 0; NaN never enters (the amaxes are fmaxf reductions from 0).
 *
 * Why max and min instead of |k - mean|: the stats pass reads k once,
 * before the mean exists.  Rounding is monotonic, so
 * max_t fl(k_t - mean) = fl(max_t k_t - mean), and fl(mean - k) is
 * -fl(k - mean) exactly: max(fl(hi - mean), fl(mean - lo)) is
 * max_t |fl(k_t - mean)|, what the host computes, also for infinities
 * (inf - inf is NaN on both sides, which fmaxf skips) and NaN means.
 */
#ifndef TSR_ATTN_SM90_FP8_RULE_CUH
#define TSR_ATTN_SM90_FP8_RULE_CUH

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define TSR_F8R_FN static __device__ __forceinline__
#else
#include <math.h>
#define TSR_F8R_FN static inline
#endif

/* runtime/fp8.h's TSR_FP8_K_CHAN_MAX; tests/check_fp8.c checks they agree */
#define TSR_F8_K_CHAN_MAX 8.0f

/* amax_c of channel c from its max hi and min lo over the tokens
 * (fmaxf / fminf reductions: NaN skipped) and its mean. */
TSR_F8R_FN float tsr_f8_chan_amax(float hi, float lo, float mean) {
  return fmaxf(0.0f, fmaxf(hi - mean, mean - lo));
}

/* Stable rank of a[c] among a[0 .. n): the values below it, plus the equal
 * ones before it.  The ranks are a permutation of 0 .. n-1, so each thread
 * of the device writes its own slot of the sorted copy (no two threads
 * write one address). */
TSR_F8R_FN int tsr_f8_rank(const float *a, int n, int c) {
  int r = 0, j;
  const float x = a[c];
  for (j = 0; j < n; ++j) r += a[j] < x || (a[j] == x && j < c);
  return r;
}

/* k_chan of n >= 1 channel amaxes sorted ascending: max / median (the mean
 * of the two middle ones for even n), 1 when the median is 0 (fp8.c's
 * spread(), operation for operation). */
TSR_F8R_FN float tsr_f8_kchan(const float *sorted, int n) {
  const float med = n % 2 ? sorted[n / 2] : 0.5f * (sorted[n / 2 - 1] + sorted[n / 2]);
  return med > 0.0f ? sorted[n - 1] / med : 1.0f;
}

/* The rule on k_chan (fp8.c's tsri_fp8_falls_back). */
TSR_F8R_FN int tsr_f8_falls_back(float k_chan) { return k_chan > TSR_F8_K_CHAN_MAX; }

#endif

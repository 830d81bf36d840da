/*
 * fp8.h: the host side of the FP8 scheme (docs/fp8.md): the int8 and
 * e4m3 conversions, the quantization of q, k and v with their scales, and the
 * per-head fallback rule.  The CPU plan executor (exec_cpu.c) runs the
 * attention products on what tsri_fp8_quantize makes, so that
 * `tessera run --backend cpu --precision fp8` predicts the GPU's output
 * (templates/attn_sm90_fp8.cuh makes the same bytes on the device).
 * Internal to libtessera; not installed.
 */
#ifndef TSR_FP8_H
#define TSR_FP8_H

#include "tessera.h"

#define TSR_FP8_MAX 448.0f     /* largest finite e4m3 */
#define TSR_FP8_P_SCALE 256.0f /* p in [0, 1] is quantized as e4m3(p * 256) */
#define TSR_FP8_CHUNK 64       /* tokens of one Q or K scale */
#define TSR_FP8_I8_MAX 127.0f  /* int8 Q and K: symmetric, +-127 */
/* 2^23 + 2^22: the kernel reads its s32 sum acc as the float BIAS + acc
 * (exact while |acc| < 2^22) and folds the bias into the exp2's FFMA */
#define TSR_FP8_BIAS 12582912.0f

/* OCP FP8 E4M3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits, no
 * infinity): x rounded to the nearest e4m3 value, ties to even, values
 * beyond +-448 (infinities included) saturated to +-448, NaN kept NaN,
 * the sign of zero kept.  Returns the e4m3 value as a float (exact), which
 * is what cvt.rn.satfinite.e4m3x2.f32 stores. */
float tsri_fp8_e4m3(float x);

/* Symmetric int8 (the Q K^T operands): x rounded to the nearest integer,
 * ties to even, clamped to +-127 (infinities too), NaN to 0.  Returns the
 * integer as a float (exact): what cvt.rni.s32.f32 and the clamp store. */
float tsri_fp8_int8(float x);

/* Per-head facts the fallback rule reads, all from the scales:
 *  q_spread  max / median of the Q chunk amaxes of the (batch, q head);
 *  k_spread  max / median of the K chunk amaxes (after smoothing);
 *  v_spread  max / median of the V channel amaxes of its kv head;
 *  k_chan    max / median over channels c of max_t |k_s[t, c]| (the
 *            smoothed K's channel amax: what an outlier channel raises). */
typedef struct {
  float q_spread, k_spread, v_spread, k_chan;
} tsr_fp8_head_stats;

/* The quantized problem: int8 (q8, k8) and e4m3 (v8) values held as
 * floats, [B][H][S][D] as the inputs, and their scales. */
typedef struct {
  int64_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim, q_chunks, k_chunks;
  float *q8, *k8, *v8;        /* int8(q * inv), int8(k_s * inv), e4m3(v * inv_c) */
  float *sq;                  /* [B][Hq][q_chunks] */
  float *sk;                  /* [B][Hkv][k_chunks] */
  float *sv;                  /* [B][Hkv][D] */
  float *kmean;               /* [B][Hkv][D] */
  tsr_fp8_head_stats *stats;  /* [B][Hq] */
  unsigned char *native;      /* [B][Hq]: 1 = the head falls back to the native dtype */
} tsr_fp8_tensors;

/* Quantizes float32 q [B][Hq][Sq][D], k and v [B][Hkv][Sk][D] (the values
 * the device holds: already rounded to the problem's dtype) for problem p,
 * and marks the heads the fallback rule sends to the native dtype.  *out is
 * zeroed first; free it with tsri_fp8_free. */
tsr_status tsri_fp8_quantize(const tsr_problem *p, const float *q, const float *k, const float *v,
                            tsr_fp8_tensors *out, tsr_error *err);
void tsri_fp8_free(tsr_fp8_tensors *t);

/* The fallback rule (docs/fp8.md, "Fallback"): nonzero when the head's
 * scales show an outlier the scheme cannot absorb: k_chan above
 * TSR_FP8_K_CHAN_MAX (chosen by measurement, fp8.c). */
#define TSR_FP8_K_CHAN_MAX 8.0f
int tsri_fp8_falls_back(const tsr_fp8_head_stats *s);

/* tsr_cpu_execute of an fp8 plan with the heads' precision given instead
 * of the rule's: native[b * Hq + h] 1 runs head (b, h) in the native dtype
 * (exec_cpu.c; for measuring the scheme without its fallback). */
tsr_status tsri_cpu_execute_heads(const tsr_plan *pl, const tsr_array *q, const tsr_array *k,
                                 const tsr_array *v, const unsigned char *native, tsr_array *out,
                                 tsr_array *lse, tsr_error *err);

/* The CPU emulation's model of the tensor cores' P V accumulation (the
 * products p8 * v8 are exact either way): TSRI_PV_FP32 adds each product
 * to the fp32 accumulator in key order; TSRI_PV_RZ_SUM adds `group` keys
 * (one wgmma) exactly and truncates the sum to `frac` bits after its
 * leading one; TSRI_PV_RZ_ALIGN first truncates each term (the accumulator
 * too) to 2^-frac of the largest term's leading bit.  The default is
 * RZ_ALIGN, 32, 13: what the H200's e4m3 wgmma matched (exec_cpu.c).
 * Process-wide; tests set it to compare the models. */
enum { TSRI_PV_FP32 = 0, TSRI_PV_RZ_SUM = 1, TSRI_PV_RZ_ALIGN = 2 };
void tsri_fp8_pv_model(int kind, int group, int frac);

/* tsri_cpu_execute_heads (native NULL: the rule's heads) that also bounds,
 * per q row, what the device's exp2 can change: ex2.approx lies within
 * ex2_ulps float ulps of 2^x, so a p' within that of an e4m3 rounding
 * boundary may round to the neighbouring value there.  flip ([B][Hq][Sq]
 * doubles, or NULL) gets per row the sum over such p' of how far its flip
 * moves o: (e4m3 step / 256) * 2^m * max_d |v8 sv_d| / e^lse, m the row's
 * running max when p' was made (docs/fp8.md, "Emulation"). */
tsr_status tsri_cpu_execute_fp8(const tsr_plan *pl, const tsr_array *q, const tsr_array *k,
                                const tsr_array *v, const unsigned char *native, float ex2_ulps,
                                double *flip, tsr_array *out, tsr_array *lse, tsr_error *err);

#endif /* TSR_FP8_H */

/*
 * templates/attn_sm90_fp8.cuh: the FP8 parts of the sm90 family (issue 18),
 * included by attn_sm90.cuh when TSR_FP8 is 1: the int8 (Q K^T) and e4m3
 * (P V) wgmma wrappers, the score / probability / output scaling of the
 * attention kernel, and the two quantization kernels of the variant's
 * module (<name>_kvstats, <name>_quant) that make the int8 / e4m3 copies
 * and their scales from the bf16/fp16 tensors.
 *
 * ---- The scheme (the CPU emulation, runtime/exec_cpu.c, implements the same)
 *   Q K^T in int8 (SageAttention2's choice: e4m3's 3 mantissa bits put a
 *   few percent of noise on every score, docs/fp8.md), s32 accumulation;
 *   P V in e4m3, fp32 accumulation.
 *   int8: symmetric, x8 = cvt.rni.s32.f32 (round to nearest even; NaN to 0)
 *   clamped to +-127.  e4m3: OCP E4M3 (max 448), cvt.rn.satfinite (round to
 *   nearest even, saturating to +-448).
 *   K smoothing: per (batch, kv head, channel c) mean_c = fp32 mean of k[:, c]
 *     over all seq_k tokens; k_s = k - mean_c (softmax-invariant).
 *   Q scale per (batch, q head, 64-token chunk): amax = max |q| over the
 *     chunk x head dim, NaN-propagating (max.NaN); inv = 127 / amax,
 *     q8 = int8(q * inv), sq = amax / 127 (amax 0: inv = sq = 1; amax NaN or
 *     infinite: inv = 0 and sq = NaN, so every score of the chunk is NaN --
 *     int8 has no NaN to carry it).  K: the same per (batch, kv head, chunk)
 *     on k_s.
 *   V scale per (batch, kv head, channel c): amax_c over all tokens (fmaxf,
 *     skipping NaN), v8 = e4m3(v * (448 / amax_c)), sv_c = amax_c / 448
 *     (0: both 1).
 *   The scales fold into one factor a (row, key chunk): c = (sq * sk) *
 *     scale_log2 (raised to 2^-126 if it underflows below, NaN kept), and the s32 sum acc into t = 2^23 + 2^22 + acc (exact in
 *     float while |acc| < 2^22: one integer add on the accumulator's bits,
 *     TSR_F8_BIAS).  The base-2 score is s = acc * c; the online softmax's
 *     row max m is taken over s as the bf16 kernel's (max over t of a half
 *     tile, then (t - BIAS) * c: the same float, c > 0).
 *   p' = exp2(t * c + nK), nK = fma(-BIAS, c, 8 - m): one FFMA a score
 *     computes 256 * exp2(s - m) (up to nK's one rounding, at most half a
 *     unit of acc * c), the e4m3 operand p8 = e4m3(p') directly; l sums the
 *     fp32 p' and is divided by 256 at the end; O = O_acc * (sv_c / 256) / l.
 *
 * ---- Buffers (runtime/gpu.c owns them, one set a plan, reused)
 *   q8  [B][Hq][Sq][D] int8, k8 [B][Hkv][Sk][D]: row-major, TMA maps
 *       {D, S, H, B} with the box {D, BM | BN} (D bytes: 128B or 64B swizzle;
 *       s8 wgmma reads the same K-major 1-byte layout as e4m3)
 *   vt8 [B][Hkv][D][Skp] e4m3, Skp = Sk rounded up to 16 (zeros past Sk):
 *       V transposed, because e4m3 wgmma takes both operands K-major and the
 *       K dimension of P V is the keys; map {Skp, D, Hkv, B}, box {BN, D}.
 *       Within every 16 keys the positions are permuted (tsr_f8_slot): the
 *       fp32 accumulator of S holds, per thread, keys 2t, 2t+1 of each 8,
 *       where the e4m3 A fragment wants keys 4t..4t+3 of each 16; instead of
 *       moving P between threads, V's keys are stored in the order the
 *       fragment reads them (a key permutation applied to both operands of
 *       a sum over keys leaves the sum unchanged).
 *   sq  [B][Hq][ceil(Sq/64)], sk [B][Hkv][ceil(Sk/64)], sv [B][Hkv][D] fp32;
 *       the attention kernel reads them through p.q, p.k and p.v (its q/k/v
 *       tensors come through the TMA maps only).
 *   kmean, vinv [B][Hkv][D] fp32, part [B][Hkv][parts][4][D] fp32 and
 *       counter [B][Hkv] (zero at allocation; the kernel re-arms it):
 *       _kvstats' intermediates.
 *   kchan [B][Hkv] fp32 and native [B][Hq] bytes: the fallback rule's
 *       statistic and its per-head flag (1: the head runs in the native
 *       dtype), written by _kvstats.
 *   tasks_f8, tasks_nat: the plan's tasks split by the flags (_quant's
 *       first CTA, tsr_f8_split), with their counts in two dyn-style int
 *       blocks (the count, then the dyn counters and sentinel record of
 *       attn_sm90.cuh), which the FP8 and the native attention kernels
 *       read as p.n_tasks_dev.
 *
 * ---- Per-head fallback (docs/fp8.md, "Fallback")
 *   _kvstats also keeps each channel's max and min of k; its last CTA of a
 *   (batch, kv head) turns them into the smoothed K's channel amaxes and
 *   k_chan (attn_sm90_fp8_rule.cuh, the float logic of runtime/fp8.c's
 *   rule) and flags the group's q heads.  _quant's first CTA splits the
 *   tasks: a task with key tiles whose (batch, head) is flagged goes to
 *   the native list, every other one (empty tasks too: zeros either way)
 *   to the FP8 list, each in plan order.  The host then launches the FP8
 *   kernel over the first list and the plan's native variant over the
 *   second (runtime/gpu.c), then the merge: no host synchronisation.
 *   GQA heads of one kv head share k_chan, and members of one task share
 *   their kv head (plan_layout.h), so a task never mixes flags.
 */
#ifndef TSR_ATTN_SM90_FP8_CUH
#define TSR_ATTN_SM90_FP8_CUH

#include "attn_sm90_fp8_rule.cuh" /* the fallback rule's float logic, shared with the host test */

#define TSR_F8_MAX 448.0f
#define TSR_I8_MAX 127.0f /* int8 Q and K: symmetric */
#define TSR_F8_P_SCALE 256.0f /* p in [0, 1] -> [0, 256], inside e4m3's range */
#define TSR_F8_CHUNK 64       /* tokens a Q / K scale */
#define TSR_CAT2(a, b) a##b
#define TSR_CAT(a, b) TSR_CAT2(a, b)

/* ---- int8 and e4m3 wgmma (TSR_WGMMA, attn_sm90.cuh), K = 32 ------------
 * Q K^T in int8: A (q8) and B (k8) K-major in shared memory, s32
 * accumulators; integer wgmma takes no scale or transpose immediates.
 * P V in e4m3: A (p8) in registers, B (vt8) K-major, fp32 accumulators;
 * 8-bit types take no transpose flags, hence V stored transposed. */
TSR_WGMMA(tsr_wgmma_s8_ss_n64, ss, n64, 32, tsr_u32, "+r", "s32.s8.s8", "")
TSR_WGMMA(tsr_wgmma_s8_ss_n128, ss, n128, 32, tsr_u32, "+r", "s32.s8.s8", "")
TSR_WGMMA(tsr_wgmma_f8_rs_n64, rs, n64, 32, float, "+f", "f32.e4m3.e4m3", ", 1, 1")
TSR_WGMMA(tsr_wgmma_f8_rs_n128, rs, n128, 32, float, "+f", "f32.e4m3.e4m3", ", 1, 1")

/* Shared-memory matrix descriptor with the swizzle of rows `row` bytes
 * wide (128: 128B swizzle, 64: 64B); K-major, 8-row groups `8 * row`
 * bytes apart. */
static __device__ __forceinline__ tsr_u64 tsr_f8_desc(tsr_u32 saddr, int row) {
  return (tsr_u64)((saddr & 0x3FFFF) >> 4) | ((tsr_u64)1 << 16) | ((tsr_u64)((8 * row) >> 4) << 32) |
         ((tsr_u64)(row == 128 ? 1 : 2) << 62);
}

/* Four floats to e4m3 bytes 0-3 (a in byte 0); cvt puts its first source
 * in the upper byte. */
static __device__ __forceinline__ tsr_u32 tsr_e4m3x4(float a, float b, float c, float d) {
  unsigned short lo, hi;
  tsr_u32 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
  asm("mov.b32 %0, {%1, %2};" : "=r"(r) : "h"(lo), "h"(hi));
  return r;
}

/* Position of key k (0..15) within its 16 in vt8: the A-fragment slot
 * 4t + i of a thread holds key 8 * (i / 2) + 2t + i % 2 (see the header). */
static __device__ __forceinline__ int tsr_f8_slot(int k) {
  return 4 * ((k & 7) >> 1) + ((k >> 3) << 1) + (k & 1);
}

/* ---- attention-kernel pieces -------------------------------------------- */

/* S = Q K^T of one stage (int8, s32 accumulators si): rows of
 * TSR_HEAD_DIM bytes, 32 a step. */
static __device__ __forceinline__ void tsr_f8_issue_s(tsr_u32 *si, tsr_u64 dq, tsr_u64 dk) {
#pragma unroll
  for (int kk = 0; kk < TSR_HEAD_DIM / 32; ++kk) {
#if TSR_BN == 128
    tsr_wgmma_s8_ss_n128(si, dq + ((kk * 32) >> 4), dk + ((kk * 32) >> 4), kk > 0);
#else
    tsr_wgmma_s8_ss_n64(si, dq + ((kk * 32) >> 4), dk + ((kk * 32) >> 4), kk > 0);
#endif
  }
}

/* O += P V of one stage: V^T rows (channels) of TSR_BN bytes, 32 keys a step. */
static __device__ __forceinline__ void tsr_f8_issue_pv(float *o, const tsr_u32 *pf, tsr_u64 dv) {
#pragma unroll
  for (int kk = 0; kk < TSR_BN / 32; ++kk) {
#if TSR_HEAD_DIM == 128
    tsr_wgmma_f8_rs_n128(o, pf + 4 * kk, dv + ((kk * 32) >> 4), 1);
#else
    tsr_wgmma_f8_rs_n64(o, pf + 4 * kk, dv + ((kk * 32) >> 4), 1);
#endif
  }
}

/* The folded score factors c = (sq * sk) * scale_log2 of key tile
 * `k_tile` for rows whose Q scale is sqv: c0 for its first 64 keys, c1 for
 * the next 64 (BN 128); chunks past the last one (keys past seq_k, masked
 * anyway) reuse the last scale.  A product that underflows is raised to
 * the smallest normal float (NaN stays NaN): a masked score is t = -inf,
 * and -inf * 0 in the exp2's FFMA would be NaN where it must give 0; the
 * scores of such chunks are below 2^22 * 2^-126 either way. */
static __device__ __forceinline__ float tsr_f8_factor(float c) { return c < 1.17549435e-38f ? 1.17549435e-38f : c; }
static __device__ __forceinline__ void tsr_f8_key_factors(const tsr_kernel_params &p, int bh_kv, int k_tile,
                                                          float sqv, float &f0, float &f1) {
  const int nkc = (p.seq_k + TSR_F8_CHUNK - 1) / TSR_F8_CHUNK;
  const float *sk = (const float *)p.k + (tsr_i64)bh_kv * nkc;
  const int c0 = k_tile * (TSR_BN / TSR_F8_CHUNK);
  f0 = tsr_f8_factor(sqv * __ldg(sk + (c0 < nkc ? c0 : nkc - 1)) * p.scale_log2);
  f1 = TSR_BN == 128 ? tsr_f8_factor(sqv * __ldg(sk + (c0 + 1 < nkc ? c0 + 1 : nkc - 1)) * p.scale_log2) : f0;
}

/* The Q scale of this warpgroup's 64 rows (local rows from row0 on). */
static __device__ __forceinline__ float tsr_f8_row_scale(const tsr_kernel_params &p, tsr_member_rec mb, int row0) {
  const int nqc = (p.seq_q + TSR_F8_CHUNK - 1) / TSR_F8_CHUNK;
  const int ch = (mb.q_tile * TSR_BM + row0) / TSR_F8_CHUNK;
  return __ldg((const float *)p.q + ((tsr_i64)mb.batch * p.heads_q + mb.head) * nqc + (ch < nqc ? ch : nqc - 1));
}

/* t = TSR_F8_BIAS + acc as a float, without a conversion instruction
 * (I2FP, one per score beside the softmax's MUFU.EX2): acc + 0x4B400000
 * read as a float is 2^23 + 2^22 + acc, exactly, while |acc| < 2^22 (here
 * at most 127 * 127 * D = 2064512): one integer add a score.  The scale
 * factors and the bias go into the softmax's one FFMA (tsr_f8_softmax). */
#define TSR_F8_BIAS 12582912.0f
static __device__ __forceinline__ void tsr_f8_bias_scores(float *s, const tsr_u32 *si) {
  static_assert(127 * 127 * TSR_HEAD_DIM < (1 << 22), "int8 Q K^T sums must stay below 2^22");
#pragma unroll
  for (int i = 0; i < TSR_BN / 2; ++i) s[i] = __int_as_float((int)(si[i] + 0x4B400000u));
}

/* Max of the 16 scores s[4j + 2e + {0, 1}], j in [j0, j0 + 8) (one 64-key
 * half of row e), as a tree of depth 4, not a chain of 16 dependent FMNMX;
 * written out, because an array here ended in local memory. */
static __device__ __forceinline__ float tsr_f8_rowmax(const float *s, int j0, int e) {
#define TSR_F8_M2(j) fmaxf(s[4 * (j0 + (j)) + 2 * e], s[4 * (j0 + (j)) + 2 * e + 1])
  return fmaxf(fmaxf(fmaxf(TSR_F8_M2(0), TSR_F8_M2(1)), fmaxf(TSR_F8_M2(2), TSR_F8_M2(3))),
               fmaxf(fmaxf(TSR_F8_M2(4), TSR_F8_M2(5)), fmaxf(TSR_F8_M2(6), TSR_F8_M2(7))));
#undef TSR_F8_M2
}

/* The online softmax step of the FP8 kernel on this thread's two rows
 * (tsr_softmax's contract; s holds t = BIAS + acc, masked to -inf): c0, c1
 * are the folded factors of the tile's two 64-key halves (equal at BN 64).
 * Leaves p' = 256 p in s, so the e4m3 pack needs no multiply, and adds p'
 * into l (finish divides by 256). */
static __device__ __forceinline__ void tsr_f8_softmax(float *s, float c0, float c1, float &m0, float &m1,
                                                      float &l0, float &l1, float &a0, float &a1) {
  const float NEG_INF = -__int_as_float(0x7f800000);
  float x0 = (tsr_f8_rowmax(s, 0, 0) - TSR_F8_BIAS) * c0;
  float x1 = (tsr_f8_rowmax(s, 0, 1) - TSR_F8_BIAS) * c0;
#if TSR_BN == 128
  x0 = fmaxf(x0, (tsr_f8_rowmax(s, 8, 0) - TSR_F8_BIAS) * c1);
  x1 = fmaxf(x1, (tsr_f8_rowmax(s, 8, 1) - TSR_F8_BIAS) * c1);
#endif
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
  const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
  /* as tsr_softmax: a row with nothing selected so far keeps m = -inf and
   * exponentiates against 0 */
  const float u0 = n0 == NEG_INF ? 0.f : n0, u1 = n1 == NEG_INF ? 0.f : n1;
  a0 = tsr_ex2(m0 - u0);
  a1 = tsr_ex2(m1 - u1);
  m0 = n0;
  m1 = n1;
  const float P8 = 8.0f; /* log2 TSR_F8_P_SCALE */
  const float k00 = fmaf(-TSR_F8_BIAS, c0, P8 - u0), k10 = fmaf(-TSR_F8_BIAS, c0, P8 - u1);
  const float k01 = fmaf(-TSR_F8_BIAS, c1, P8 - u0), k11 = fmaf(-TSR_F8_BIAS, c1, P8 - u1);
  float r0 = 0.f, r1 = 0.f;
#pragma unroll
  for (int j = 0; j < TSR_BN / 8; ++j) {
    const bool h = 8 * j >= TSR_F8_CHUNK;
    const float c = h ? c1 : c0, k0 = h ? k01 : k00, k1 = h ? k11 : k10;
    s[4 * j] = tsr_ex2(fmaf(s[4 * j], c, k0));
    s[4 * j + 1] = tsr_ex2(fmaf(s[4 * j + 1], c, k0));
    s[4 * j + 2] = tsr_ex2(fmaf(s[4 * j + 2], c, k1));
    s[4 * j + 3] = tsr_ex2(fmaf(s[4 * j + 3], c, k1));
    r0 += s[4 * j] + s[4 * j + 1];
    r1 += s[4 * j + 2] + s[4 * j + 3];
  }
  l0 = l0 * a0 + r0;
  l1 = l1 * a1 + r1;
}

/* p' = 256 p (fp32 accumulator layout, tsr_f8_softmax) to the e4m3 A
 * fragments of the P V product: fragment 4kk + {0, 1, 2, 3} = rows g / g+8
 * of keys 32kk + {0..15, 16..31}, each thread's own keys in tsr_f8_slot
 * order (no data moves between lanes). */
static __device__ __forceinline__ void tsr_f8_pack_p(tsr_u32 *pf, const float *s) {
#pragma unroll
  for (int kk = 0; kk < TSR_BN / 32; ++kk) {
    const float *x = s + 16 * kk; /* blocks j = 4kk .. 4kk + 3, 4 floats each */
    pf[4 * kk + 0] = tsr_e4m3x4(x[0], x[1], x[4], x[5]);
    pf[4 * kk + 1] = tsr_e4m3x4(x[2], x[3], x[6], x[7]);
    pf[4 * kk + 2] = tsr_e4m3x4(x[8], x[9], x[12], x[13]);
    pf[4 * kk + 3] = tsr_e4m3x4(x[10], x[11], x[14], x[15]);
  }
}

/* O_acc * (sv_c / 256) before the epilogue divides by l: the partial slots
 * then hold what the bf16 kernel's would, and the merge is unchanged. */
static __device__ __forceinline__ void tsr_f8_scale_o(float *o, const tsr_kernel_params &p, tsr_member_rec mb,
                                                      int hq_per_kv, int t) {
  const float *sv = (const float *)p.v + ((tsr_i64)mb.batch * p.heads_kv + mb.head / hq_per_kv) * TSR_HEAD_DIM;
#pragma unroll
  for (int j = 0; j < TSR_HEAD_DIM / 8; ++j) {
    const float2 w = __ldg((const float2 *)(sv + 8 * j + 2 * t));
    const float f0 = w.x * (1.0f / TSR_F8_P_SCALE), f1 = w.y * (1.0f / TSR_F8_P_SCALE);
    o[4 * j] *= f0;
    o[4 * j + 1] *= f1;
    o[4 * j + 2] *= f0;
    o[4 * j + 3] *= f1;
  }
}

/* ---- quantization kernels ------------------------------------------------ */

/* Eight elements (16 bytes, as loaded) to floats. */
static __device__ __forceinline__ void tsr_f8_cvt8(const uint4 w, float *f) {
  const tsr_u32 u[4] = { w.x, w.y, w.z, w.w };
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#if TSR_DTYPE_BF16
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
#else
    asm("{\n.reg .f16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.f32.f16 %0, lo;\ncvt.f32.f16 %1, hi;\n}\n"
        : "=f"(f[2 * i]), "=f"(f[2 * i + 1])
        : "r"(u[i]));
#endif
  }
}
static __device__ __forceinline__ void tsr_f8_load8(const tsr_u16 *src, float *f) {
  tsr_f8_cvt8(__ldg((const uint4 *)src), f);
}

/* amax -> (inv, scale) of the scheme: 448 / amax and amax / 448, 1 for 0. */
static __device__ __forceinline__ float tsr_f8_inv(float amax) { return amax > 0.f ? __fdiv_rn(TSR_F8_MAX, amax) : 1.f; }
static __device__ __forceinline__ float tsr_f8_scale(float amax) { return amax > 0.f ? __fdiv_rn(amax, TSR_F8_MAX) : 1.f; }

/* int8 chunks (Q, K): the amax may be NaN or infinite; then every value
 * goes to 0 and the scale is NaN (docs/fp8.md, non-finite inputs). */
static __device__ __forceinline__ float tsr_i8_inv(float amax) {
  const bool finite = amax < __int_as_float(0x7f800000); /* amax >= 0 or NaN */
  return finite ? (amax > 0.f ? __fdiv_rn(TSR_I8_MAX, amax) : 1.f) : 0.f;
}
static __device__ __forceinline__ float tsr_i8_scale(float amax) {
  const bool finite = amax < __int_as_float(0x7f800000);
  return finite ? (amax > 0.f ? __fdiv_rn(amax, TSR_I8_MAX) : 1.f) : __int_as_float(0x7fffffff);
}
/* max that propagates NaN (fmaxf skips it). */
static __device__ __forceinline__ float tsr_nanmax(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
/* Four floats to int8 bytes 0-3 (a in byte 0): nearest even, NaN to 0
 * (cvt.rni.s32.f32), clamped to +-127. */
static __device__ __forceinline__ tsr_u32 tsr_s8x4(float a, float b, float c, float d) {
  const int x[4] = { __float2int_rn(a), __float2int_rn(b), __float2int_rn(c), __float2int_rn(d) };
  tsr_u32 r = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) r |= ((tsr_u32)min(127, max(-127, x[i])) & 0xffu) << (8 * i);
  return r;
}

#define TSR_F8_TPR (TSR_HEAD_DIM / 8) /* threads a token row, 8 channels each */
#define TSR_F8_RPP (256 / TSR_F8_TPR) /* token rows a pass of 256 threads */

/* Pass 1: per (batch, kv head) the sum, max and min of k and the amax of
 * |v| of each channel.  Grid (parts, B * Hkv), 256 threads; CTA x reduces
 * tokens [x * part_tokens, +part_tokens) into part[bh][x]; the last CTA of
 * a (b, h) to finish (a counter) adds the parts in order (deterministic),
 * writes kmean, sv and vinv, then the fallback rule's k_chan and the flags
 * of the group's q heads (fallback 0: flags 0), and re-arms the counter.
 * The max and min cost two FMNMX an element in a pass bound by memory. */
extern "C" __global__ void __launch_bounds__(256)
    TSR_CAT(TSR_KERNEL_NAME, _kvstats)(const tsr_u16 *k, const tsr_u16 *v, tsr_i64 ksb, tsr_i64 ksh, tsr_i64 kss,
                                       tsr_i64 vsb, tsr_i64 vsh, tsr_i64 vss, int heads_kv, int seq_k,
                                       int part_tokens, float *part, tsr_u32 *counter, float *kmean, float *sv,
                                       float *vinv, int heads_q, int fallback, float *kchan,
                                       unsigned char *native) {
  constexpr int D = TSR_HEAD_DIM;
  const float INF = __int_as_float(0x7f800000);
  __shared__ float red[4][TSR_F8_RPP][D];
  __shared__ int last;
  const int bh = blockIdx.y, b = bh / heads_kv, h = bh % heads_kv, np = gridDim.x;
  const int tid = threadIdx.x, r = tid / TSR_F8_TPR, c0 = (tid % TSR_F8_TPR) * 8;
  const int t0 = blockIdx.x * part_tokens, t1 = min(seq_k, t0 + part_tokens);
  const tsr_u16 *kb = k + b * ksb + h * ksh + c0, *vb = v + b * vsb + h * vsh + c0;
  float s[8], a[8], hi[8], lo[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    s[i] = a[i] = 0.f;
    hi[i] = -INF;
    lo[i] = INF;
  }
#pragma unroll 4 /* several rows' loads in flight: the pass is bound by memory */
  for (int t = t0 + r; t < t1; t += TSR_F8_RPP) {
    float kf[8], vf[8];
    tsr_f8_load8(kb + t * kss, kf);
    tsr_f8_load8(vb + t * vss, vf);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      s[i] += kf[i];
      hi[i] = fmaxf(hi[i], kf[i]);
      lo[i] = fminf(lo[i], kf[i]);
      a[i] = fmaxf(a[i], fabsf(vf[i]));
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    red[0][r][c0 + i] = s[i];
    red[1][r][c0 + i] = a[i];
    red[2][r][c0 + i] = hi[i];
    red[3][r][c0 + i] = lo[i];
  }
  __syncthreads();
  if (tid < D) {
    float x = 0.f, m = 0.f, mx = -INF, mn = INF;
    for (int i = 0; i < TSR_F8_RPP; ++i) {
      x += red[0][i][tid];
      m = fmaxf(m, red[1][i][tid]);
      mx = fmaxf(mx, red[2][i][tid]);
      mn = fminf(mn, red[3][i][tid]);
    }
    float *pp = part + ((tsr_i64)bh * np + blockIdx.x) * 4 * D;
    pp[tid] = x;
    pp[D + tid] = m;
    pp[2 * D + tid] = mx;
    pp[3 * D + tid] = mn;
  }
  __threadfence(); /* the parts are visible before the count says so */
  __syncthreads();
  if (tid == 0) last = atomicAdd(counter + bh, 1u) == (tsr_u32)(np - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  /* red[0][0] and red[1][0] now hold the channel amaxes of k_s and their
   * sorted copy (every thread is past its reads of red above) */
  float *amax = red[0][0], *sorted = red[1][0];
  if (tid < D) {
    float x = 0.f, m = 0.f, mx = -INF, mn = INF;
    for (int i = 0; i < np; ++i) {
      const float *pp = part + ((tsr_i64)bh * np + i) * 4 * D;
      x += __ldcg(pp + tid);
      m = fmaxf(m, __ldcg(pp + D + tid));
      mx = fmaxf(mx, __ldcg(pp + 2 * D + tid));
      mn = fminf(mn, __ldcg(pp + 3 * D + tid));
    }
    const float mean = __fdiv_rn(x, (float)seq_k);
    kmean[(tsr_i64)bh * D + tid] = mean;
    sv[(tsr_i64)bh * D + tid] = tsr_f8_scale(m);
    vinv[(tsr_i64)bh * D + tid] = tsr_f8_inv(m);
    amax[tid] = tsr_f8_chan_amax(mx, mn, mean);
  }
  __syncthreads();
  if (tid < D) sorted[tsr_f8_rank(amax, D, tid)] = amax[tid];
  __syncthreads();
  if (tid == 0) {
    const float kc = tsr_f8_kchan(sorted, D);
    const int g = heads_q / heads_kv;
    const unsigned char f = fallback && tsr_f8_falls_back(kc);
    kchan[bh] = kc;
    for (int j = 0; j < g; ++j) native[(tsr_i64)b * heads_q + h * g + j] = f;
    counter[bh] = 0u;
  }
}

/* Positions of a V chunk per thread in the transposed write of pass 2:
 * 256 threads take D / 2 channel pairs x (64 / TSR_F8_NP) runs of TSR_F8_NP
 * positions (16 at head dim 128, 8 at 64). */
#define TSR_F8_NP (TSR_F8_CHUNK * TSR_HEAD_DIM / 2 / 256)

/* The key (0..15) at position s of its 16 in vt8: tsr_f8_slot's inverse
 * (position 4t + i holds key 8 * (i / 2) + 2t + i % 2). */
static __device__ __forceinline__ int tsr_f8_key_at(int s) { return 8 * ((s & 3) >> 1) + 2 * (s >> 2) + (s & 1); }

/* Two elements (4 bytes) to floats. */
static __device__ __forceinline__ float2 tsr_f8_load2(tsr_u32 u) {
  float2 f;
#if TSR_DTYPE_BF16
  f.x = __uint_as_float(u << 16);
  f.y = __uint_as_float(u & 0xffff0000u);
#else
  asm("{\n.reg .f16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.f32.f16 %0, lo;\ncvt.f32.f16 %1, hi;\n}\n"
      : "=f"(f.x), "=f"(f.y)
      : "r"(u));
#endif
  return f;
}

/* V of chunk ch of head bh to vt8, transposed: this thread's channels 2cp,
 * 2cp + 1 at positions p0 .. p0 + TSR_F8_NP - 1 of the chunk (keys in
 * tsr_f8_slot order within each 16; zeros past seq).  vr: the raw
 * channel pairs of the keys at those positions, loaded by the caller. */
static __device__ __forceinline__ void tsr_f8_store_vt(const tsr_u32 *vr, const float *vinv, unsigned char *vt8,
                                                       int bh, int ch, int skp, int cp, int p0) {
  constexpr int D = TSR_HEAD_DIM, NP = TSR_F8_NP;
  const float i0 = __ldg(vinv + (tsr_i64)bh * D + 2 * cp), i1 = __ldg(vinv + (tsr_i64)bh * D + 2 * cp + 1);
  tsr_u32 w0[NP / 4], w1[NP / 4];
#pragma unroll
  for (int j = 0; j < NP; j += 4) {
    const float2 a = tsr_f8_load2(vr[j]), b = tsr_f8_load2(vr[j + 1]), c = tsr_f8_load2(vr[j + 2]),
                 d = tsr_f8_load2(vr[j + 3]);
    w0[j / 4] = tsr_e4m3x4(a.x * i0, b.x * i0, c.x * i0, d.x * i0);
    w1[j / 4] = tsr_e4m3x4(a.y * i1, b.y * i1, c.y * i1, d.y * i1);
  }
  if (ch * TSR_F8_CHUNK + p0 >= skp) return; /* skp is a multiple of 16, p0 of NP */
  unsigned char *d0 = vt8 + ((tsr_i64)bh * D + 2 * cp) * skp + ch * TSR_F8_CHUNK + p0;
#if TSR_HEAD_DIM == 128
  *(uint4 *)d0 = make_uint4(w0[0], w0[1], w0[2], w0[3]);
  *(uint4 *)(d0 + skp) = make_uint4(w1[0], w1[1], w1[2], w1[3]);
#else
  *(uint2 *)d0 = make_uint2(w0[0], w0[1]);
  *(uint2 *)(d0 + skp) = make_uint2(w1[0], w1[1]);
#endif
}

/* The fallback's task split (_quant's CTA 0, 256 threads; _kvstats has
 * written the flags): tasks[0, n) in chunks of 1024, four consecutive
 * tasks a thread, a block-wide scan of the native ones; each list keeps
 * the plan's order (longest first), and the counts go to cnt_f8[0] and
 * cnt_nat[0].  Cost: a 32-byte record read and written a task, about a
 * microsecond a chunk, beside the quantization's CTAs. */
#define TSR_F8_SPLIT_TPT 4
static __device__ __forceinline__ void tsr_f8_split(const tsr_task_rec *tasks, int n,
                                                    const unsigned char *native, int heads_q,
                                                    tsr_task_rec *tf, tsr_task_rec *tn, int *cnt_f8,
                                                    int *cnt_nat) {
  __shared__ int wsum[8];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int base = 0; /* native tasks before this chunk */
  for (int c0 = 0; c0 < n; c0 += 256 * TSR_F8_SPLIT_TPT) {
    const int i0 = c0 + TSR_F8_SPLIT_TPT * tid;
    tsr_task_rec r[TSR_F8_SPLIT_TPT];
    int nat[TSR_F8_SPLIT_TPT], cnt = 0;
#pragma unroll
    for (int k = 0; k < TSR_F8_SPLIT_TPT; ++k) {
      nat[k] = 0;
      if (i0 + k < n) {
        r[k] = tasks[i0 + k];
        /* an empty task (zeros, lse -inf) may pack rows of any head: FP8's */
        nat[k] = r[k].tile_end > r[k].tile_begin && native[(tsr_i64)r[k].batch * heads_q + r[k].head] != 0;
      }
      cnt += nat[k];
    }
    int inc = cnt; /* inclusive scan over the warp, then over the warps */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, inc, o);
      if (lane >= o) inc += y;
    }
    if (lane == 31) wsum[warp] = inc;
    __syncthreads();
    int before = base + inc - cnt, total = 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      before += w < warp ? wsum[w] : 0;
      total += wsum[w];
    }
    __syncthreads(); /* wsum is rewritten by the next chunk */
#pragma unroll
    for (int k = 0; k < TSR_F8_SPLIT_TPT; ++k) {
      if (i0 + k >= n) break;
      if (nat[k]) tn[before++] = r[k];
      else tf[i0 + k - before] = r[k];
    }
    base += total;
  }
  if (tid == 0) {
    *cnt_nat = base;
    *cnt_f8 = n - base;
  }
}

/* Pass 2: one CTA a (batch, head, 64-token chunk), 256 threads, after CTA
 * 0 (the fallback's task split, tsr_f8_split; it returns at once when
 * tasks is NULL): CTAs 1 .. q_ctas quantize Q chunks to int8
 * (B * Hq * ceil(Sq/64)), the rest K chunks to int8 and V chunks to e4m3
 * (B * Hkv * ceil(Sk/64)).  Each keeps
 * its chunk in registers: the amax, then the bytes.  V is written
 * transposed straight from registers (tsr_f8_store_vt): each thread reads
 * the channel pair it writes, so no byte goes through shared memory (the
 * byte-wise transpose there had 16-way bank conflicts and held the pass at
 * 1.8x its bandwidth floor, notes/fp8-quant-2026-12-02.md), and its loads
 * are issued with K's, before the K chunk's reduction. */
extern "C" __global__ void __launch_bounds__(256)
    TSR_CAT(TSR_KERNEL_NAME, _quant)(const tsr_u16 *q, const tsr_u16 *k, const tsr_u16 *v, tsr_i64 qsb, tsr_i64 qsh,
                                     tsr_i64 qss, tsr_i64 ksb, tsr_i64 ksh, tsr_i64 kss, tsr_i64 vsb, tsr_i64 vsh,
                                     tsr_i64 vss, int heads_q, int heads_kv, int seq_q, int seq_k, int skp,
                                     int q_ctas, const float *kmean, const float *vinv, unsigned char *q8,
                                     unsigned char *k8, unsigned char *vt8, float *sq, float *sk,
                                     const tsr_task_rec *tasks, int n_tasks, const int *n_tasks_dev, int cap_tasks,
                                     const unsigned char *native, tsr_task_rec *tasks_f8, tsr_task_rec *tasks_nat,
                                     int *cnt_f8, int *cnt_nat) {
  constexpr int D = TSR_HEAD_DIM, PASSES = TSR_F8_CHUNK / TSR_F8_RPP, NP = TSR_F8_NP;
  __shared__ float wmax[8];
  if (blockIdx.x == 0) {
    if (tasks) {
      /* device-planned: the planner's count, at most the buffers' capacity */
      const int n = min(n_tasks_dev ? *n_tasks_dev : n_tasks, cap_tasks);
      tsr_f8_split(tasks, n, native, heads_q, tasks_f8, tasks_nat, cnt_f8, cnt_nat);
    }
    return;
  }
  const int bx = (int)blockIdx.x - 1;
  const int tid = threadIdx.x, r = tid / TSR_F8_TPR, c0 = (tid % TSR_F8_TPR) * 8;
  const bool is_q = bx < q_ctas;
  const int blk = is_q ? bx : bx - q_ctas;
  const int heads = is_q ? heads_q : heads_kv, seq = is_q ? seq_q : seq_k;
  const int nch = (seq + TSR_F8_CHUNK - 1) / TSR_F8_CHUNK;
  const int ch = blk % nch, bh = blk / nch, b = bh / heads, h = bh % heads;
  const tsr_u16 *src = is_q ? q + b * qsb + h * qsh : k + b * ksb + h * ksh;
  const tsr_i64 ss = is_q ? qss : kss;
  const int cp = tid % (D / 2), p0 = (tid / (D / 2)) * NP; /* V: channel pair, first position */
  uint4 raw[PASSES]; /* the chunk as loaded: converted twice (amax, bytes) to hold half the registers */
  float mean[8];
  tsr_u32 vr[NP];
  float am = 0.f;
  if (!is_q) {
    const tsr_u16 *vsrc = v + b * vsb + h * vsh + 2 * cp;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const int p = p0 + j, t = ch * TSR_F8_CHUNK + (p & ~15) + tsr_f8_key_at(p & 15);
      vr[j] = t < seq ? __ldg((const unsigned int *)(vsrc + t * vss)) : 0u;
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) mean[i] = is_q ? 0.f : __ldg(kmean + (tsr_i64)bh * D + c0 + i);
#pragma unroll
  for (int ps = 0; ps < PASSES; ++ps) {
    const int t = ch * TSR_F8_CHUNK + ps * TSR_F8_RPP + r;
    raw[ps] = t < seq ? __ldg((const uint4 *)(src + t * ss + c0)) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int ps = 0; ps < PASSES; ++ps) {
    const int t = ch * TSR_F8_CHUNK + ps * TSR_F8_RPP + r;
    float x[8];
    tsr_f8_cvt8(raw[ps], x);
#pragma unroll
    for (int i = 0; i < 8; ++i) /* k_s = k - mean_c; tokens past seq do not count */
      if (t < seq) am = tsr_nanmax(am, fabsf(is_q ? x[i] : x[i] - mean[i]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) am = tsr_nanmax(am, __shfl_xor_sync(0xffffffffu, am, o));
  if (tid % 32 == 0) wmax[tid / 32] = am;
  __syncthreads();
  am = wmax[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) am = tsr_nanmax(am, wmax[w]);
  {
    const float inv = tsr_i8_inv(am);
    unsigned char *dst = (is_q ? q8 : k8) + (tsr_i64)bh * seq * D;
    if (tid == 0) (is_q ? sq : sk)[(tsr_i64)bh * nch + ch] = tsr_i8_scale(am);
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      const int t = ch * TSR_F8_CHUNK + ps * TSR_F8_RPP + r;
      float f[8];
      tsr_f8_cvt8(raw[ps], f);
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = is_q ? f[i] : f[i] - mean[i];
      if (t < seq)
        *(uint2 *)(dst + (tsr_i64)t * D + c0) =
            make_uint2(tsr_s8x4(f[0] * inv, f[1] * inv, f[2] * inv, f[3] * inv),
                       tsr_s8x4(f[4] * inv, f[5] * inv, f[6] * inv, f[7] * inv));
    }
  }
  if (!is_q) tsr_f8_store_vt(vr, vinv, vt8, bh, ch, skp, cp, p0);
}

#endif

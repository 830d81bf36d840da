/*
 * attn_sm80.cuh: block-sparse attention forward for sm_80-class parts
 * (also built for sm_89, sm_90a, sm_100a and sm_120): mma.sync m16n8k16
 * tensor-core products, ldmatrix fragment loads from XOR-swizzled shared
 * memory, and a TSR_STAGES-deep cp.async pipeline over the task's key tiles
 * (FA2's structure).  Instantiated by tessera-gen with constants only.
 *
 * Work: a CTA of TSR_WARPS warps walks tasks blockIdx.x, +gridDim.x, ...;
 * for each member of a task it loads the BM x D query tile once, then
 * streams K and V tiles listed in tiles[tile_begin, tile_end).  Each warp
 * owns BM / TSR_WARPS consecutive query rows (16 or 32) and keeps their Q
 * fragments in registers for the whole member where they fit (QREG); the S
 * accumulators of a key tile become the A operand of P V in registers.
 * Scores are masked (keys past seq_k, and the membership bits of partial
 * tiles; full in-bounds tiles skip the masking pass) before the base-2
 * online softmax (scale_log2 must be positive, and is folded into one FFMA
 * per probability); a row whose tile has no selected column leaves its
 * running max and sum untouched.  Output is written directly (o, lse) or as an
 * unnormalised partial (part_o, part_m, part_l) for the merge kernel.
 *
 * Non-finite q, k, v: NaN scores pass fmaxf (which drops them) and reach
 * the row sum through ex2, +inf scores make exp2(inf - inf) there, so the
 * main loop needs no test of its own; the epilogue keeps such a NaN sum
 * (only l == 0 means "nothing selected": zeros, lse -inf) and makes a row
 * that selected keys whose scores were all -inf NaN, as the reference
 * does (runtime/ref.c).  A split row's NaN goes to the merge as part_m NaN.
 *
 * Pipeline: one cp.async group per key tile (K and V together), the Q tile
 * joining the first; tile j + ST - 1 is issued right after the barrier that
 * makes tile j visible, into the stage tile j - 1 used, so one barrier a
 * tile suffices.  The next tile records are read an iteration ahead, so no
 * warp waits on a global load before issuing its copies.
 *
 * Functions (issue 15): the kernel walks tasks and members and runs the
 * pipeline; the Q fragment load, a softmax step's parts (step_scores,
 * step_mask, step_softmax_pv) and the epilogue (member_end) are
 * inlined functions that take the kernel's locals by reference, which
 * keeps the SASS of the uncut kernel (a struct of the member's state did
 * not: notes/sm80.md, 2026-12-02).
 *
 * Registers: the loops inside a softmax step are unrolled (the steps of
 * a tile are not); values that the compiler would otherwise hoist out of
 * the tile loop and keep live (one 64-bit global offset per copied row, one
 * shared address per fragment) are either stepped through an opaque
 * register (copies) or formed from one base per operand with an XOR
 * (fragments): those kept the old kernel at 255 registers with local-memory
 * spills.  tests/gen-sass.sh asserts that no cubin has LDL/STL.
 *
 * Shared memory: Q [BM][D] + K, V [STAGES][BN][D] 16-bit elements; rows are
 * 16-byte chunks XOR-swizzled by (row & 7), so ldmatrix and cp.async touch
 * eight distinct bank groups.  Exactly tsri_variant_smem_bytes() bytes.
 */
#include "tsr_common.cuh"

#if !defined(TSR_KERNEL_NAME) || !defined(TSR_HEAD_DIM) || !defined(TSR_BM) || !defined(TSR_BN) || \
    !defined(TSR_WARPS) || !defined(TSR_STAGES) || !defined(TSR_THREADS) ||                       \
    !defined(TSR_SMEM_BYTES) || !defined(TSR_MEMBERSHIP)
#error "attn_sm80.cuh: a constant of the variant is not defined (tessera-gen defines them all)"
#endif

namespace tsr80 {
constexpr int D = TSR_HEAD_DIM;
constexpr int BM = TSR_BM;
constexpr int BN = TSR_BN;
constexpr int W = TSR_WARPS;
constexpr int ST = TSR_STAGES;
constexpr int NT = TSR_THREADS;
constexpr int MT = BM / (16 * W);  /* m16 slices a warp */
constexpr int DC = D / 8;          /* 16-byte chunks a row */
constexpr int RB = D * 2;          /* bytes a shared-memory row */
constexpr int ND = D / 8;          /* n8 output tiles */
constexpr int KD = D / 16;         /* k16 steps of Q K^T */
constexpr int MW = BN / 32;        /* membership words a segment */
/* Register footprint of the data a thread holds, 32-bit registers: O is
 * MT x D / 2, the scores of a softmax step of sb keys MT x sb / 2, Q's
 * fragments (when kept in registers) MT x D / 4. */
__host__ __device__ constexpr int data_regs(int sb, bool q) { return MT * (D / 2 + sb / 2 + (q ? D / 4 : 0)); }
/* What fits next to the fragments, addresses and softmax state without
 * spilling, tests/gen-sass.sh being the judge.  The probabilities are packed
 * into the 16-bit P as they are made (step_probs), so the fp32 scores
 * die before P V, and the widest steps load their membership words after
 * the product (LAZY_WORDS); with both, on all five targets:
 *  - Q in registers: 160 (MT 1 D 128 with 128-key steps, MT 2 D 64 with
 *    64-key steps) fits; before the packing 160 spilled on sm_100a;
 *  - Q re-read from shared memory: 192 fits with 64-key steps (MT 2 D 128:
 *    FA2's d128 step) and spills 6-7 LDL/STL with 128-key ones (MT 2 D 64),
 *    hence the 64-key cap. */
constexpr int DATA_REGS_Q = 160;
constexpr int DATA_REGS_SMEMQ = 192;
/* Data above this leaves no registers for the membership words across the
 * product: they are loaded after it (LAZY_WORDS). */
constexpr int DATA_REGS_EAGER = 144;
/* Keys a softmax step (SB) and whether Q stays in registers (QREG): a tile
 * is taken SB columns at a time (scores, mask, online softmax, P V).  The
 * widest step that fits with Q in registers, else the widest of at most 64
 * keys without (Q fragments then re-read from shared memory each k16 step),
 * else 32 keys without.  One more step a tile costs one more row max, sum
 * and (if a max moved) O rescale, and, without Q in registers, one more
 * read of Q. */
__host__ __device__ constexpr int pick_sb(bool q)
{
  return q ? (data_regs(BN, true) <= DATA_REGS_Q ? BN
              : BN > 64 && data_regs(64, true) <= DATA_REGS_Q ? 64
              : data_regs(32, true) <= DATA_REGS_Q ? 32 : 0)
           : (BN >= 64 && data_regs(64, false) <= DATA_REGS_SMEMQ ? 64
              : data_regs(32, false) <= DATA_REGS_SMEMQ ? 32 : 0);
}
constexpr bool QREG = pick_sb(true) > 0;
constexpr int SB = QREG ? pick_sb(true) : (pick_sb(false) > 0 ? pick_sb(false) : 32);
/* k16 steps of Q K^T unrolled when Q comes from shared memory: what fits
 * (tests/gen-sass.sh).  Two stages: full unrolling spilled on sm_89 at
 * 32-key steps, and 8 on sm_90a at 64-key ones (4 fits, and measured on
 * the H200 within 1.5% of 2 either way: notes/sm80.md); one stage: 2
 * spilled on sm_90a (the barrier after the product changes the schedule),
 * 4 fits on all five targets. */
constexpr int QUNROLL = ST == 1 ? 4 : 2;
constexpr int NS = SB / 8;         /* n8 score tiles a step */
constexpr int MWS = SB / 32;       /* membership words a step */
static_assert(SB >= 32 && BN % SB == 0, "bad softmax step");
/* The schedule of a softmax step's exponentials and P V.  Fused
 * (step_softmax_pv): O's rescale first, then each k16 step's probabilities
 * right before its products, in one basic block, so ptxas issues the EX2s
 * between the HMMAs.  Unfused (step_softmax, step_pv_all): every
 * probability, then the rescale (a branch), then P V, whose HMMAs issue back
 * to back, each waiting its fixed latency (ncu against FA2 at d64,
 * notes/sm80.md 2026-12-07).  Measured on the H100 (sm_90a cubins,
 * --bench-all, 10-50%), fused against unfused: +10% on d64 128x64 w4, +2-5%
 * on d64 64x64 w2, +6-16% on the 16-row warps at d128 (the w8 ones, 64x64
 * s2 w4); but -8 to -10% on d64 64x64 s2 w4, -2 to -3% on d64 128x128 w8,
 * -4 to -7% on the one-stage 32-row warps at d128 (64x64 s1 w2, 128x64 s1
 * w4: 192 data registers leave no room to interleave), 0 on d128 128x64 s2
 * w4.  d64 128x128 w4 gained 5% but spilled on sm_80 and sm_89 (6 LDL/STL;
 * with Q re-read from shared memory instead, 3% slower than unfused), and
 * the sm80 route takes 128x64 tiles at d64 now (tsri_context_route).
 * Neither helped (notes/sm80.md, 2026-12-07 second session): the next
 * step's probabilities issued before this step's products (within 2%), nor
 * the d128 32-row warps fused with their member's K/V pointers and
 * segments moved to shared memory so that nothing spilled (still -1 to
 * -7%, with 51 of 70 EX2s beside an HMMA). */
#ifndef TSR_SM80_FUSED /* knob for device A/B (tests/device/README): 1 fused everywhere, 0 nowhere */
constexpr bool FUSED_PV = D == 64 ? MT == 2 && BN == 64 : MT == 1;
#else
constexpr bool FUSED_PV = TSR_SM80_FUSED;
#endif
/* Wide steps (data over DATA_REGS_EAGER) load the membership words after the
 * product rather than before it: MT x 2 x MWS registers fewer across it. */
constexpr bool LAZY_WORDS = data_regs(SB, QREG) > DATA_REGS_EAGER;
static_assert(MT >= 1 && MT * 16 * W == BM, "BM must be 16 or 32 rows a warp");
static_assert(D % 64 == 0 && BN % 32 == 0 && ST >= 1, "bad variant constants");
/* One stage: K and V single-buffered in separate cp.async groups (the
 * kernel's split pipeline), which needs the tile taken in one step. */
static_assert(ST > 1 || SB == BN, "one stage needs one softmax step a tile");
static_assert(NT % DC == 0 && (BM * DC) % NT == 0 && (BN * DC) % NT == 0,
              "tile copies must divide evenly among the threads");
static_assert((BM * D + 2 * ST * BN * D) * 2 <= TSR_SMEM_BYTES, "shared memory layout exceeds TSR_SMEM_BYTES");

/* Byte offset of chunk c (8 elements) of row r in a swizzled tile. */
static __device__ __forceinline__ unsigned sw(int r, int c)
{
  return (unsigned)(r * RB + ((c ^ (r & 7)) << 4));
}

/* A value the compiler must treat as unknown: it cannot fold what follows
 * into loop-invariant products and hoist them (64-bit row offsets, one a
 * copied row, were what spilled). */
static __device__ __forceinline__ long long opaque(long long x)
{
  asm volatile("" : "+l"(x));
  return x;
}

/* threadIdx.x, read where it is used: a volatile read is neither hoisted
 * nor reused, so values derived from it are recomputed rather than held
 * (and spilled) across the tile loop. */
static __device__ __forceinline__ int tid_again()
{
#ifdef SM80_EMU_H /* the CPU emulator (tests/device/sm80_emu.h): no PTX there */
  return threadIdx.x;
#else
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
#endif
}

/* Copies `rows` rows of D elements (row stride `stride` elements) into a
 * swizzled tile of CAP rows at shared address dst; rows past `rows` are
 * zero-filled.  A thread takes chunk c8 = tid % 8 of each 128-byte piece of
 * rows r0 = tid / 8 + k RS (RS = NT / 8 rows a pass: 8, 16 or 32): at d128
 * both pieces of a row, 128 bytes apart in global memory and, the swizzle
 * being an XOR of the low three chunk bits, in shared memory too.  So one
 * source pointer step (the LDGSTS's immediate offset does the second piece)
 * and one bound test serve two copies, and, RS being a multiple of 8, the
 * swizzle phase r & 7 is the same for every row a thread copies: each
 * destination is an immediate away from one register; the copy is unrolled
 * whole, no loop.  A warp's copy instruction still covers whole 128-byte
 * lines (four rows' pieces at d128, as two whole rows were).  At d64 (one
 * piece a row) this is the chunk-a-thread mapping unrolled.
 * A row past `rows` keeps its (possibly out-of-bounds) source address: a
 * cp.async with source size 0 reads nothing (PTX ISA), so only the size is
 * selected, and ptxas turns that into LDGSTS's own predicate.
 * The source pointer is stepped through opaque(): ptxas would otherwise
 * precompute the row addresses into registers and spill (notes/sm80.md,
 * 2026-12-06b; the two-warp loop this replaced cost 5.4 instructions a
 * copy).  At d128 the four- and eight-warp copies took chunk tid % 16 of
 * rows tid / 16 + k NT/16 before, a pointer step and bound test a copy:
 * 11-25 instructions more a d128 w4 tile step (notes/sm80.md, 2026-12-07,
 * third session). */
template <int CAP>
static __device__ __forceinline__ void load_rows(unsigned dst, const tsr_u16 *src, long long stride, int rows)
{
  constexpr int H = DC / 8;  /* 128-byte pieces a row */
  constexpr int RS = NT / 8; /* rows a pass */
  static_assert(DC % 8 == 0 && CAP % RS == 0 && RS % 8 == 0, "copy steps");
  if constexpr (W == 2 || H > 1) {
    const int r0 = threadIdx.x / 8, c8 = threadIdx.x % 8;
    const long long step = opaque(stride * RS);
    const tsr_u16 *g = src + r0 * stride + c8 * 8;
    const unsigned d = dst + sw(r0, c8);
    const int n = rows - r0;
#pragma unroll
    for (int k = 0; k < CAP / RS; ++k) {
#pragma unroll
      for (int j = 0; j < H; ++j)
        tsr_cp_async16(d + k * RS * RB + j * 128, g + j * 64, k * RS < n ? 16 : 0);
      g = (const tsr_u16 *)opaque((long long)(g + step));
    }
  } else {
    /* d64, four and eight warps: the same copies, written as before.  The
     * form above made 128x128 w4 spill 2 registers on sm_80 (while saving
     * 48-56 instructions on sm_90a at 64x64 w4 and 128x64 w8). */
    const int r0 = threadIdx.x / DC, c = threadIdx.x % DC;
    const long long step = opaque(stride * RS);
    const tsr_u16 *g = src + r0 * stride + c * 8;
    const int left = rows - r0;
#pragma unroll
    for (int k = 0; k < CAP / RS; ++k) {
      tsr_cp_async16(dst + sw(r0 + k * RS, c), g, k * RS < left ? 16 : 0);
      g += step;
    }
  }
}

/* Copies the K rows (KK) and the V rows (VV) of key tile k_tile into the
 * stage at byte offset st; rows past seq_k are zero-filled. */
template <bool KK, bool VV>
static __device__ __forceinline__ void load_kv(const tsr_kernel_params &p, unsigned sK, unsigned sV, unsigned st,
                                               const tsr_u16 *gk, const tsr_u16 *gv, int k_tile)
{
  const int k0 = k_tile * BN;
  const int kr = min(BN, p.seq_k - k0);
  if (KK) load_rows<BN>(sK + st, gk + k0 * p.k_stride[2], p.k_stride[2], kr);
  if (VV) load_rows<BN>(sV + st, gv + k0 * p.v_stride[2], p.v_stride[2], kr);
}

/* Shared address of an ldmatrix x4 fragment: 16-row block `blk`, chunk pair
 * `k` (chunks 2k, 2k + 1).  `lane_off` is the lane's byte offset in block 0
 * at chunk pair 0, sw(rl, cb) for its row rl (rl & 7 == lane & 7) and chunk
 * bit cb; chunk 2k + cb then sits at lane_off ^ ((k & 3) << 5) plus
 * (k >> 2) * 128, so every fragment is one XOR and immediates away from one
 * base register. */
static __device__ __forceinline__ unsigned frag(unsigned tile, unsigned lane_off, int blk, int k)
{
  return tile + (unsigned)(blk * 16 * RB + ((k >> 2) << 7)) + (lane_off ^ (unsigned)((k & 3) << 5));
}

/* ---- The kernel's parts, cut at its seams (issue 15): the Q fragments, a
 * softmax step's scores, mask, online softmax and P V, and the member's
 * epilogue.  They are inlined into the one kernel, which keeps its locals
 * (O, the softmax state, Q fragments, scores) and lends them by reference,
 * values by value. */

/* With QREG, the warp's Q fragments, which stay in registers for all of a
 * member's tiles; else nothing. */
static __device__ __forceinline__ void load_qfrags(unsigned sQ, unsigned qv_off, int row_base,
                                                   unsigned (&qf)[QREG ? MT : 1][QREG ? KD : 1][4])
{
  if constexpr (QREG) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int kk = 0; kk < KD; ++kk)
        tsr_ldmatrix_x4(frag(sQ, qv_off, row_base / 16 + i, kk), qf[i][kk][0], qf[i][kk][1], qf[i][kk][2],
                        qf[i][kk][3]);
  }
}

/* S = Q K^T over D in k16 steps, for the SB keys of the step from column c0
 * of the key tile at cK.  Q from registers (QREG) or from shared memory:
 * then unrolled by QUNROLL only, or the compiler hoists the next steps' Q
 * fragments and spills. */
static __device__ __forceinline__ void step_scores(const unsigned (&qf)[QREG ? MT : 1][QREG ? KD : 1][4],
                                                   unsigned sQ, unsigned qv_off, int row_base, unsigned cK,
                                                   unsigned k_off, int c0, float (&s)[MT][NS][4])
{
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int n = 0; n < NS; ++n) s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.f;
#pragma unroll QREG ? KD : QUNROLL
  for (int kk = 0; kk < KD; ++kk) {
    unsigned qa[MT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      if constexpr (QREG) {
        qa[i][0] = qf[i][kk][0]; qa[i][1] = qf[i][kk][1];
        qa[i][2] = qf[i][kk][2]; qa[i][3] = qf[i][kk][3];
      } else {
        tsr_ldmatrix_x4(frag(sQ, qv_off, row_base / 16 + i, kk), qa[i][0], qa[i][1], qa[i][2], qa[i][3]);
      }
    }
#pragma unroll
    for (int nn = 0; nn < NS / 2; ++nn) {
      unsigned b0, b1, b2, b3;
      tsr_ldmatrix_x4(frag(cK, k_off, c0 / 16 + nn, kk), b0, b1, b2, b3);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        tsr_mma16816(s[i][2 * nn], qa[i], b0, b1);
        tsr_mma16816(s[i][2 * nn + 1], qa[i], b2, b3);
      }
    }
  }
}

/* The membership words of the step's columns for each row of the warp
 * (all ones on a full tile), and the rows' `selected` bits they set.
 * Issued before the product so that its latency hides behind it, except
 * where the step's data leaves no registers for them (LAZY_WORDS): then
 * after it, a stall on partial tiles only. */
static __device__ __forceinline__ void step_words(const tsr_kernel_params &p, int mem, const int (&seg)[MT][2],
                                                  int c0, bool partial, unsigned &sel,
                                                  unsigned (&words)[MT][2][MWS])
{
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int w = 0; w < MWS; ++w) {
        words[i][hh][w] = partial ? p.membership[mem + seg[i][hh] * MW + c0 / 32 + w] : 0xffffffffu;
        sel |= (words[i][hh][w] != 0u ? 1u : 0u) << (2 * i + hh); /* per step, not per element */
      }
}

/* Sets to -inf the scores of the step's columns at or past kr (keys past
 * seq_k) and, with membership, of those the rows' words leave out. */
static __device__ __forceinline__ void step_mask(int lane, int kr, const unsigned (&words)[MT][2][MWS],
                                                 float (&s)[MT][NS][4])
{
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
#if TSR_MEMBERSHIP
      unsigned wl[MWS]; /* this lane's columns at bits 8 (n & 3) + e */
#pragma unroll
      for (int w = 0; w < MWS; ++w) wl[w] = words[i][hh][w] >> ((lane & 3) * 2);
#endif
#pragma unroll
      for (int n = 0; n < NS; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = n * 8 + (lane & 3) * 2 + e;
          bool ok = col < kr;
#if TSR_MEMBERSHIP
          ok = ok && ((wl[n >> 2] >> ((n & 3) * 8 + e)) & 1u); /* n8 tile n lies in word n / 4 */
#endif
          if (!ok) s[i][n][2 * hh + e] = TSR_NEG_INF;
        }
      }
    }
  }
}

/* The raw max of row hh of m16 slice i over the step's scores: the
 * thread's, then across the quad that holds the row. */
static __device__ __forceinline__ float row_max(const float (&s)[MT][NS][4], int i, int hh)
{
  float mx = TSR_NEG_INF;
#pragma unroll
  for (int n = 0; n < NS; ++n) {
#pragma unroll
    for (int e = 0; e < 2; ++e) mx = fmaxf(mx, s[i][n][2 * hh + e]);
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
}

/* The online softmax's bookkeeping for a step: each row's new max (raw
 * scores, scaled once: scale_log2 > 0, so each probability is one FFMA and
 * one EX2), the exponent offset msafe its probabilities take, alpha, and l
 * rescaled (the step's sum is added as its probabilities are made). */
static __device__ __forceinline__ void step_max(float scale_log2, float (&m)[MT][2], float (&l)[MT][2],
                                                const float (&s)[MT][NS][4], float (&alphas)[MT][2],
                                                float (&msafes)[MT][2])
{
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float mx = row_max(s, i, hh);
      const float mnew = fmaxf(m[i][hh], mx * scale_log2);
      /* A row with nothing selected so far keeps m = -inf; subtract 0 then
       * so that exp2(-inf - -inf) never makes a NaN. */
      msafes[i][hh] = mnew == TSR_NEG_INF ? 0.f : mnew;
      alphas[i][hh] = tsr_ex2(m[i][hh] - msafes[i][hh]);
      m[i][hh] = mnew;
      l[i][hh] *= alphas[i][hh];
    }
  }
}

/* O rescaled by alpha unless no row of the warp moved its max (alpha is then
 * exactly 1, ex2(0): after the first tiles the usual case, and MT x D / 2
 * multiplications a step saved). */
static __device__ __forceinline__ void step_rescale(const float (&alphas)[MT][2], float (&acc)[MT][ND][4])
{
  bool moved = false;
#pragma unroll
  for (int i = 0; i < MT; ++i) moved = moved || alphas[i][0] != 1.f || alphas[i][1] != 1.f;
  if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int n = 0; n < ND; ++n) {
        acc[i][n][0] *= alphas[i][0];
        acc[i][n][1] *= alphas[i][0];
        acc[i][n][2] *= alphas[i][1];
        acc[i][n][3] *= alphas[i][1];
      }
  }
}

/* The probabilities of n8 tiles 2 kk and 2 kk + 1, packed into P's 16-bit A
 * fragment of k16 step kk (row hh's pair of tile 2 kk + t is register
 * hh + 2 t), and added to the rows' sums.  FA2: the fp32 scores die as P is
 * made. */
static __device__ __forceinline__ void step_probs(int kk, float scale_log2, const float (&msafes)[MT][2],
                                                  const float (&s)[MT][NS][4], float (&l)[MT][2],
                                                  unsigned (&pa)[MT][4])
{
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int n = 2 * kk + t;
        const float p0 = tsr_ex2(fmaf(s[i][n][2 * hh], scale_log2, -msafes[i][hh]));
        const float p1 = tsr_ex2(fmaf(s[i][n][2 * hh + 1], scale_log2, -msafes[i][hh]));
        l[i][hh] += p0;
        l[i][hh] += p1;
        pa[i][hh + 2 * t] = tsr_pack2(p0, p1);
      }
}

/* O += P V for k16 step kk of the softmax step: V^T fragments by
 * ldmatrix.trans. */
static __device__ __forceinline__ void step_pv(unsigned cV, unsigned qv_off, int c0, int kk,
                                               const unsigned (&pa)[MT][4], float (&acc)[MT][ND][4])
{
#pragma unroll
  for (int dd = 0; dd < ND / 2; ++dd) {
    unsigned b0, b1, b2, b3;
    tsr_ldmatrix_x4_trans(frag(cV, qv_off, c0 / 16 + kk, dd), b0, b1, b2, b3);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      tsr_mma16816(acc[i][2 * dd], pa[i], b0, b1);
      tsr_mma16816(acc[i][2 * dd + 1], pa[i], b2, b3);
    }
  }
}

/* Scales the step's scores into the base-2 domain and updates the online
 * softmax; the probabilities go straight into P, the 16-bit A operand of
 * P V (FA2: the fp32 scores are dead before the product, MT x SB / 4
 * registers instead of MT x SB / 2 across it).  O is rescaled unless no row
 * of the warp changed its max (alpha is then exactly 1, ex2(0)): after the
 * first tiles the usual case: step_rescale).  The unfused schedule's form
 * (FUSED_PV). */
static __device__ __forceinline__ void step_softmax(float scale_log2, float (&m)[MT][2], float (&l)[MT][2],
                                                    float (&acc)[MT][ND][4], const float (&s)[MT][NS][4],
                                                    unsigned (&pa)[MT][NS / 2][4])
{
  float alphas[MT][2];
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float mx = row_max(s, i, hh);
      /* Maxima are taken on raw scores and scaled once (scale_log2 > 0), so
       * each probability is one FFMA and one EX2. */
      const float mnew = fmaxf(m[i][hh], mx * scale_log2);
      /* A row with nothing selected so far keeps m = -inf; subtract 0 then
       * so that exp2(-inf - -inf) never makes a NaN. */
      const float msafe = mnew == TSR_NEG_INF ? 0.f : mnew;
      const float alpha = tsr_ex2(m[i][hh] - msafe);
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < NS; ++n) {
        const float p0 = tsr_ex2(fmaf(s[i][n][2 * hh], scale_log2, -msafe));
        const float p1 = tsr_ex2(fmaf(s[i][n][2 * hh + 1], scale_log2, -msafe));
        sum += p0;
        sum += p1;
        /* A fragment of m16n8k16: row hh's pair of n8 tile n is register
         * hh (+2 for the odd tile) of k16 step n / 2. */
        pa[i][n >> 1][hh + 2 * (n & 1)] = tsr_pack2(p0, p1);
      }
      l[i][hh] = l[i][hh] * alpha + sum;
      m[i][hh] = mnew;
      alphas[i][hh] = alpha;
    }
  }
  step_rescale(alphas, acc);
}

/* O += P V, unfused: P from registers (step_softmax), V^T fragments by
 * ldmatrix.trans.  step_pv's body over every k16 step; written out rather
 * than calling step_pv with each step's fragments copied out, which changed
 * the SASS of the 32-row warps' cubins on all five targets (checked
 * 2026-12-07), and this form's SASS is the one measured. */
static __device__ __forceinline__ void step_pv_all(unsigned cV, unsigned qv_off, int c0,
                                                   const unsigned (&pa)[MT][NS / 2][4], float (&acc)[MT][ND][4])
{
#pragma unroll
  for (int kk = 0; kk < NS / 2; ++kk) {
#pragma unroll
    for (int dd = 0; dd < ND / 2; ++dd) {
      unsigned b0, b1, b2, b3;
      tsr_ldmatrix_x4_trans(frag(cV, qv_off, c0 / 16 + kk, dd), b0, b1, b2, b3);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        tsr_mma16816(acc[i][2 * dd], pa[i][kk], b0, b1);
        tsr_mma16816(acc[i][2 * dd + 1], pa[i][kk], b2, b3);
      }
    }
  }
}

/* The fused schedule (FUSED_PV) of the softmax step after its scores: O's
 * rescale first, then each k16 step's probabilities just before its
 * products, all in one basic block. */
static __device__ __forceinline__ void step_softmax_pv(unsigned cV, unsigned qv_off, int c0, float scale_log2,
                                                       float (&m)[MT][2], float (&l)[MT][2],
                                                       const float (&s)[MT][NS][4], float (&acc)[MT][ND][4])
{
  float alphas[MT][2], msafes[MT][2];
  step_max(scale_log2, m, l, s, alphas, msafes);
  step_rescale(alphas, acc);
#pragma unroll
  for (int kk = 0; kk < NS / 2; ++kk) {
    unsigned pa[MT][4];
    step_probs(kk, scale_log2, msafes, s, l, pa);
    step_pv(cV, qv_off, c0, kk, pa, acc);
  }
}

/* Epilogue: finishes the row sums across the quad, then writes the rows
 * (o, lse), or the unnormalised partial of slot task_partial + mi when the
 * task is a split row's chunk.  `selected` bit 2 i + hh: that row selected
 * some key (membership variants; else every row of a task with tiles). */
static __device__ __forceinline__ void member_end(const tsr_kernel_params &p, float (&acc)[MT][ND][4],
                                                  float (&m)[MT][2], float (&l)[MT][2], unsigned selected_bits,
                                                  int task_partial, int mi, int row_base, int lane, int q0,
                                                  int b, int h)
{
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float lv = l[i][hh];
      lv += __shfl_xor_sync(0xffffffffu, lv, 1);
      lv += __shfl_xor_sync(0xffffffffu, lv, 2);
      const int r = row_base + i * 16 + (lane >> 2) + 8 * hh;
      const int row = q0 + r;
      const bool selected = (selected_bits >> (2 * i + hh)) & 1u;
      /* Keys selected, every score -inf: the reference's exp(-inf - -inf)
       * is NaN, not the empty row's zeros. */
      if (selected && m[i][hh] == TSR_NEG_INF) lv = __int_as_float(0x7fc00000);
      if (task_partial >= 0) {
        const long long slot = task_partial + mi;
        float *po = p.part_o + (slot * BM + r) * D;
#pragma unroll
        for (int n = 0; n < ND; ++n) {
          const int d = n * 8 + (lane & 3) * 2;
          *(float2 *)(po + d) = make_float2(acc[i][n][2 * hh], acc[i][n][2 * hh + 1]);
        }
        if ((lane & 3) == 0) {
          p.part_m[slot * BM + r] = lv != lv ? lv : m[i][hh]; /* NaN marks a NaN row */
          p.part_l[slot * BM + r] = lv;
        }
      } else if (row < p.seq_q) {
        /* lv == 0: nothing selected, zeros even where a masked column's
         * 0 * NaN reached acc; a NaN lv makes the row and lse NaN. */
        const bool none = lv == 0.f;
        const float inv = none ? 0.f : __frcp_rn(lv); /* inline, no division subroutine */
        tsr_u16 *go = (tsr_u16 *)p.o + b * p.o_stride[0] + h * p.o_stride[1] + row * p.o_stride[2];
#pragma unroll
        for (int n = 0; n < ND; ++n) {
          const int d = n * 8 + (lane & 3) * 2;
          *(unsigned *)(go + d) =
              none ? 0u : tsr_pack2(acc[i][n][2 * hh] * inv, acc[i][n][2 * hh + 1] * inv);
        }
        if ((lane & 3) == 0 && p.lse)
          p.lse[((long long)b * p.heads_q + h) * p.seq_q + row] =
              none ? TSR_NEG_INF : (m[i][hh] + log2f(lv)) * TSR_LN2;
      }
    }
  }
}
}  // namespace tsr80

extern "C" __global__ void __launch_bounds__(TSR_THREADS)
    TSR_KERNEL_NAME(const __grid_constant__ tsr_kernel_params p)
{
  using namespace tsr80;
  extern __shared__ __align__(128) unsigned char tsr_smem[];
  const unsigned sQ = tsr_smem_u32(tsr_smem);
  const unsigned sK = sQ + BM * RB;
  const unsigned sV = sK + ST * BN * RB;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = p.heads_q / p.heads_kv;
  const int row_base = warp * MT * 16;
  /* Lane offsets of the three fragment kinds (see frag): Q (A operand) and
   * V (B operand through ldmatrix.trans) take rows lane & 15 and chunk bit
   * lane >> 4; K (B operand) takes rows (lane & 7) + 8 (lane >> 4) and chunk
   * bit (lane >> 3) & 1. */
  const unsigned qv_off = sw((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
  const unsigned k_off = sw((lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);

  /* Device-planned launches read the task count the planner wrote. */
  const int n_tasks = p.n_tasks_dev ? *p.n_tasks_dev : p.n_tasks;
  for (int t = blockIdx.x; t < n_tasks; t += gridDim.x) {
    const tsr_task_rec task = p.tasks[t];
    const int ntiles = task.tile_end - task.tile_begin;
    const tsr_tile_rec *trec = p.tiles + task.tile_begin;
    for (int mi = 0; mi < task.n_members; ++mi) {
      const tsr_member_rec mem = p.members[task.member_begin + mi];
      const int b = mem.batch, h = mem.head, q0 = mem.q_tile * BM;
      const int hk = h / group;
      const int qrows = min(BM, p.seq_q - q0);
      const tsr_u16 *gq = (const tsr_u16 *)p.q + b * p.q_stride[0] + h * p.q_stride[1] + q0 * p.q_stride[2];
      const tsr_u16 *gk = (const tsr_u16 *)p.k + b * p.k_stride[0] + hk * p.k_stride[1];
      const tsr_u16 *gv = (const tsr_u16 *)p.v + b * p.v_stride[0] + hk * p.v_stride[1];

      __syncthreads(); /* the previous member is done with shared memory */
      /* Prologue: Q joins tile 0's group; tiles 1 .. ST-2 get a group each.
       * A task without tiles loads nothing (its members may be any row). */
      if (ntiles > 0) load_rows<BM>(sQ, gq, p.q_stride[2], qrows);
#pragma unroll
      for (int s = 0; s < ST - 1; ++s) {
        if (s < ntiles) load_kv<true, true>(p, sK, sV, (unsigned)(s * BN * RB), gk, gv, trec[s].k_tile);
        tsr_cp_async_commit();
      }
      if constexpr (ST == 1) { /* split pipeline: Q and K of tile 0; V at iteration 0 */
        if (ntiles > 0) load_kv<true, false>(p, sK, sV, 0u, gk, gv, trec[0].k_tile);
        tsr_cp_async_commit();
      }
      /* Records read an iteration ahead: the current tile's, and the key
       * tile of the next copy (tile j + ST - 1 at iteration j). */
      tsr_tile_rec tr_next = ntiles > 0 ? trec[0] : tsr_tile_rec{0, -1};
      int kt_ahead = ST - 1 < ntiles ? trec[ST - 1].k_tile : 0;

      float acc[MT][ND][4];
      float m[MT][2], l[MT][2];
      unsigned qf[QREG ? MT : 1][QREG ? KD : 1][4]; /* Q fragments (QREG) */
#if TSR_MEMBERSHIP
      int seg[MT][2];
      unsigned sel = 0u; /* bit 2 i + hh: that row selected some key of the task's tiles
                            (one register: an array of flags spilled on sm_120) */
#endif
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int n = 0; n < ND; ++n) acc[i][n][0] = acc[i][n][1] = acc[i][n][2] = acc[i][n][3] = 0.f;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          m[i][hh] = TSR_NEG_INF;
          l[i][hh] = 0.f;
#if TSR_MEMBERSHIP
          const int r = q0 + row_base + i * 16 + (lane >> 2) + 8 * hh;
          seg[i][hh] = r < p.seq_q ? p.qblk[r] - p.qblk[q0] : 0;
#endif
        }
      }

      for (int j = 0; j < ntiles; ++j) {
        const tsr_tile_rec tr = tr_next;
        if (j + 1 < ntiles) tr_next = trec[j + 1];
        tsr_cp_async_wait<ST == 1 ? 0 : ST - 2>(); /* this thread's copies of tile j (ST 1: its K) and Q */
        __syncthreads(); /* everyone's; and tile j - 1's stage (ST 1: V's buffer) is free */
        if constexpr (ST == 1) { /* V of tile j lands during the product */
          load_kv<false, true>(p, sK, sV, 0u, gk, gv, tr.k_tile);
        } else {
          const int jn = j + ST - 1;
          if (jn < ntiles) {
            load_kv<true, true>(p, sK, sV, (unsigned)(jn % ST) * (BN * RB), gk, gv, kt_ahead);
            if (jn + 1 < ntiles) kt_ahead = trec[jn + 1].k_tile;
          }
        }
        tsr_cp_async_commit();
        if (j == 0) load_qfrags(sQ, qv_off, row_base, qf); /* QREG: Q stays in registers for the member */

        const int k0 = tr.k_tile * BN;
        const unsigned cK = sK + (unsigned)(j % ST) * (BN * RB);
        const unsigned cV = sV + (unsigned)(j % ST) * (BN * RB);
#if TSR_MEMBERSHIP
        const bool partial = tr.mem >= 0;
#else
        const bool partial = false;
#endif
        /* The tile's keys in steps of SB (see SB): scores, mask, softmax,
         * P V for each; not unrolled, so that the compiler cannot overlap
         * one step's scores with the previous step's P V registers. */
#pragma unroll 1
        for (int sb = 0; sb < BN / SB; ++sb) {
          const int c0 = sb * SB; /* first column of the step in the tile */
          unsigned words[MT][2][MWS]; /* membership words of the rows (TSR_MEMBERSHIP) */
#if TSR_MEMBERSHIP
          if constexpr (!LAZY_WORDS) step_words(p, tr.mem, seg, c0, partial, sel, words);
#endif
          float s[MT][NS][4];
          step_scores(qf, sQ, qv_off, row_base, cK, k_off, c0, s);
          if constexpr (ST == 1) { /* V landed, K is free: tile j + 1's K lands during softmax and P V */
            tsr_cp_async_wait<0>();
            __syncthreads();
            if (j + 1 < ntiles) load_kv<true, false>(p, sK, sV, 0u, gk, gv, tr_next.k_tile);
            tsr_cp_async_commit();
          }
#if TSR_MEMBERSHIP
          if constexpr (LAZY_WORDS) step_words(p, tr.mem, seg, c0, partial, sel, words);
#endif
          /* Mask keys past seq_k and unselected columns of partial tiles; a
           * full in-bounds step (the common case) skips this pass. */
          if (partial || k0 + c0 + SB > p.seq_k) step_mask(lane, p.seq_k - k0 - c0, words, s);
          if constexpr (FUSED_PV) {
            step_softmax_pv(cV, qv_off, c0, p.scale_log2, m, l, s, acc);
          } else {
            unsigned pa[MT][NS / 2][4]; /* P, 16-bit pairs */
            step_softmax(p.scale_log2, m, l, acc, s, pa);
            step_pv_all(cV, qv_off, c0, pa, acc);
          }
        }
      }
      tsr_cp_async_wait<0>();
      /* The fused schedule reads the thread's lane and warp again
       * (tid_again) rather than hold them across the tile loop: ptxas kept
       * row_base + lane / 4 and spilled it (the unfused one has no spill,
       * and its SASS stays as it was). */
      const int t_end = FUSED_PV ? tid_again() : (int)threadIdx.x;
      const int rb_end = FUSED_PV ? (t_end >> 5) * MT * 16 : row_base, lane_end = FUSED_PV ? t_end & 31 : lane;
#if TSR_MEMBERSHIP
      member_end(p, acc, m, l, sel, task.partial, mi, rb_end, lane_end, q0, b, h);
#else
      member_end(p, acc, m, l, ntiles > 0 ? ~0u : 0u, task.partial, mi, rb_end, lane_end, q0, b, h); /* every tile is full */
#endif
    }
  }
}

/*
 * templates/attn_sm90.cuh: the sm_90a block-sparse flash-attention forward
 * kernel (wgmma + TMA + mbarrier, warp-specialized), one template for every
 * variant of the sm90 family.  tessera-gen renders a variant by defining the
 * constants below and then including this file; nothing else changes.
 *
 * Cost: per key tile and consumer warpgroup, 2 * 64 * BN * D multiply-adds on
 * the tensor cores (S = Q K^T and O += P V), 64 * BN exp2 in the softmax; K
 * and V tiles come through TMA once per (member, key tile); Q once per member.
 *
 * ---- Constants the generator defines before including this file ----------
 *   TSR_KERNEL_NAME  the entry symbol (the variant's canonical name)
 *   TSR_BM           query rows per CTA: 64 or 128 (64 per consumer warpgroup)
 *   TSR_BN           key columns per tile: 64 or 128
 *   TSR_HEAD_DIM     head dimension: 64 or 128
 *   TSR_STAGES       K/V ring depth: 2 or 3
 *   TSR_DTYPE_BF16   1 for bf16 q/k/v/o, 0 for fp16
 *   TSR_MEMBERSHIP   1 to compile the membership-word masking of partial
 *                    tiles, 0 when every tile of every plan run with the
 *                    variant is full (tile.mem == -1)
 *   TSR_WARPGROUPS   warpgroups per CTA (see threads below)
 *   TSR_FP8          1: FP8 precision (issue 18): q/k/v are the int8 / e4m3 copies
 *                    and scales of attn_sm90_fp8.cuh, whose quantization
 *                    kernels join the module; o stays TSR_DTYPE_BF16's; 0:
 *                    q/k/v in that dtype
 *   TSR_LAYOUT_DYN   1 for the task layout "dyn": a persistent grid whose
 *                    producers take tasks from a per-launch counter (the
 *                    launch contract below); 0 for "flat" and "pers"
 *   TSR_THREADS, TSR_SMEM_BYTES, TSR_TMA_BOX   what the host launches with
 *                    (checked against this template's layout)
 * Each must be defined: a missing one is an error, never a default.
 * plan_layout.h must be includable (it is self-contained under NVRTC).
 *
 * ---- Launch contract (what the host provides) ------------------------------
 *   threads per CTA   TSR_THREADS = 128 * TSR_WARPGROUPS: 1 + TSR_BM / 64
 *                     (warpgroup 0 = TMA producer, 1.. = consumers), or
 *                     3 with TSR_BM 64: two tasks a CTA (TPC = 2), or 4
 *                     with TSR_BM 64: three tasks a CTA (TPC = 3)
 *   dynamic smem      TSR_SM90_SMEM_BYTES = 1024 + TPC * (QBUF*TSR_BM*TSR_HEAD_DIM*2
 *                       + 2*TSR_STAGES*TSR_BN*TSR_HEAD_DIM*2 + 256), QBUF = 2 with
 *                     two tasks a CTA and 2 stages (TSR_SM90_QPF), else 1
 *                     (bm128 bn128 d128: 165120 with 2 stages, 230656 with 3;
 *                     set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
 *   grid              any number of CTAs: CTA b runs tasks TPC*b + i,
 *                     + TPC*gridDim.x, ... for i < TPC (persistent: #SMs;
 *                     flat: ceil(n_tasks / TPC)), one CTA per SM
 *   tensor maps       p.tma_q, p.tma_k, p.tma_v, by cuTensorMapEncodeTiled:
 *                     rank 4, dtype BFLOAT16 / FLOAT16 as the variant,
 *                     globalDim     {D, seq, heads, batch}   (innermost first;
 *                                   seq_q/heads_q for q, seq_k/heads_kv for k, v)
 *                     globalStrides {s_stride, h_stride, b_stride} * 2 bytes
 *                                   (element strides of the tensor; this one
 *                                   map serves BHSD, BSHD and any other
 *                                   strides; d_stride must be 1 and the byte
 *                                   strides multiples of 16)
 *                     boxDim        {64, TSR_BM, 1, 1} for q,
 *                                   {64, TSR_BN, 1, 1} for k and v
 *                     elementStrides {1, 1, 1, 1}, INTERLEAVE_NONE,
 *                     SWIZZLE_128B, L2_PROMOTION_128B, FLOAT_OOB_FILL_NONE
 *                     (rows past seq are zero-filled; the kernel masks key
 *                     columns >= seq_k to -inf and never writes rows >= seq_q)
 *   task count        p.n_tasks, or *p.n_tasks_dev when that is non-NULL
 *                     (device-planned launches; the grid is then persistent)
 *   dyn layout        p.n_tasks_dev is never NULL: it points at the task
 *                     count, and p.n_tasks_dev[TSR_SM90_DYN_CTR] and [+ 1]
 *                     are two ints, zero before the launch, that the CTAs
 *                     use as the next-task counter and the count of
 *                     producers done; the last producer out sets both back
 *                     to zero, so launches on one stream need no reset (two
 *                     launches of one plan must not run at the same time);
 *                     p.n_tasks_dev[TSR_SM90_DYN_SENTINEL ..] is a task
 *                     record (16-byte aligned) with n_members -1, never
 *                     written: the "none left" record the producers copy
 *   pointers          p.o, p.lse (may be NULL), p.tasks, tiles, members,
 *                     membership, qblk, part_o/m/l as plan_layout.h says;
 *                     p.o_stride in elements with o_stride[3] == 1.
 *   scale             p.scale_log2 must be > 0 (row maxima are taken on raw
 *                     scores and scaled afterwards).
 */
#include "plan_layout.h"

#if !defined(TSR_KERNEL_NAME) || !defined(TSR_BM) || !defined(TSR_BN) || !defined(TSR_HEAD_DIM) || \
    !defined(TSR_STAGES) || !defined(TSR_DTYPE_BF16) || !defined(TSR_MEMBERSHIP) ||                \
    !defined(TSR_WARPGROUPS) || !defined(TSR_THREADS) || !defined(TSR_SMEM_BYTES) ||              \
    !defined(TSR_TMA_BOX) || !defined(TSR_FP8) || !defined(TSR_LAYOUT_DYN) || !defined(TSR_KGATHER)
#error "attn_sm90.cuh: a constant of the variant is not defined (tessera-gen defines them all)"
#endif

/* Ping-pong of the two consumer warpgroups at the tensor cores (tuning knob,
 * not part of the variant name): 0 off, 1 every GEMM issue block alternates,
 * 2 only the main loop's blocks alternate. */
/* Skipping: with two consumer warpgroups and membership code, a warpgroup
 * whose 64 rows select nothing in a tile skips that tile's GEMMs and
 * softmax (it still waits on the stage's loads and hands the stage back).
 * This lets a 128-row tile carry two 64-row logical blocks whose key lists
 * differ: K/V tiles both select are loaded once, and neither computes the
 * other's tiles (notes/sm90.md, v5). */
#define TSR_SM90_SKIP (TSR_MEMBERSHIP && TSR_BM == 128)
/* d128 128x128 tiles, the shape of FA4's sm90 kernel: they take FA3's tile
 * step (the late rescale and the pinned P V wait, below), and at bf16/fp16
 * its ping-pong too (FP8: below).  FP8 takes the step without membership
 * only: its mb variants spilled a register with it (gen-sass.sh). */
#define TSR_SM90_FA3_STEP \
  (TSR_BM == 128 && TSR_BN == 128 && TSR_HEAD_DIM == 128 && !(TSR_FP8 && TSR_MEMBERSHIP))
#define TSR_SM90_FA3_TILE (TSR_SM90_FA3_STEP && !TSR_FP8)
#ifndef TSR_SM90_PINGPONG
/* measured on the H200 (notes/sm90.md): loop-only alternation gains 2-3%
 * at d64, where the softmax outweighs the GEMMs; at d128 it lost, until
 * the P V wait was pinned after the softmax: with the pin, every block
 * alternating gains +0.9 / +0.6 / +0.2% (random 10%, dense, top-k 16%) at
 * the cap on the H100 (notes/sm90-2026-12-06b.md), so 1 there (not on the
 * dyn layout, whose registers cannot hold the pin: without it ping-pong
 * measured -0.8 to +0.3%).  FP8's 128x128
 * tiles with FA3's step: -0.9 / -0.9 / -1.0% (top-k 16%, dense, 75,600 x
 * 40 random 25%), +0.5% random 10% (notes/sm90-2026-12-06c.md), so off.
 * The alternation needs both warpgroups to run the same tiles, so it is
 * off where they skip independently. */
#define TSR_SM90_PINGPONG \
  (TSR_SM90_SKIP ? 0 : TSR_HEAD_DIM == 64 ? 2 : TSR_SM90_FA3_TILE && !TSR_LAYOUT_DYN ? 1 : 0)
#endif
#if TSR_SM90_SKIP && TSR_SM90_PINGPONG
#error "attn_sm90.cuh: the consumer ping-pong needs both warpgroups on every tile (no skipping)"
#endif
/* Two S tiles in flight (FP8 without skipping, issue 18): S_{u+1} = Q
 * K_{u+1}^T is issued before S_u's softmax, so the softmax runs beside
 * both the next tile's Q K^T and the pending P V (FA3's intra-warpgroup
 * overlap), where the default order waits for S_u right after issuing it.
 * The int8 accumulators of the two tiles alternate between two buffers,
 * each read in place as the float scores (t = BIAS + acc), so the second
 * S costs no registers over the default's s and si.  Off: a knob for the
 * A/B (notes/fp8-2026-12-02e.md). */
#ifndef TSR_SM90_S2F
#define TSR_SM90_S2F 0
#endif
#if TSR_SM90_S2F && (!TSR_FP8 || TSR_SM90_SKIP || TSR_SM90_PINGPONG)
#error "attn_sm90.cuh: two S tiles in flight are written for FP8 without skipping or ping-pong"
#endif
/* The warpgroup index as a warp-uniform value (the kernel entry says why):
 * without it each Q K^T wgmma of the d128 128x128 nm variant sat behind an
 * R2UR and its carry arithmetic (53 R2UR in the cubin, 22 with it; 2944 ->
 * 2904 instructions).  At the power cap on the H100, 1.5 s blocks
 * (tests/device/steady_ab.py, notes/sm90-2026-12-06b.md): +0.9% random 10%,
 * +0.4% dense, +0.8% top-k 16%; FP8 +0.5 / -1.2% (single launches, noise). */
#ifndef TSR_SM90_WG_UNIFORM
#define TSR_SM90_WG_UNIFORM 1
#endif
/* FA3's order of a tile step: S_u is issued as soon as K_u is in (the
 * pending V is waited for after), and O is rescaled by the softmax's alpha
 * once the pending P V is in, at the end of the step, rather than between
 * the issues of S and P V.  The same operations on O in the same order, so
 * the same bits.  Measured in steady state at the power cap on the H100
 * (tests/device/steady_ab.py, notes/power-2026-12-06.md), bf16 d128
 * 128x128 nm: +0.5 / +1.0 / +1.0% (random 10%, dense, top-k 16%) in one
 * call, +0.3 / +0.9 / +0.1% in another; never slower.  So on for 128x128
 * tiles at d128.  With the pin (below) on 128x64 and d64 128x128 tiles it
 * lost 1.7 and 1.2% (notes/sm90-2026-12-06b.md section 5): those keep the
 * old order.  FP8 d128 128x128 nm, step and pin against neither, GPU-planned
 * at the cap on the H100 (notes/sm90-2026-12-06c.md): +3.2 / +5.4 / +6.8%
 * (random 10%, top-k 16%, dense at 32,768 x 12), +5.6% at 75,600 x 40
 * random 25%; the pin alone -5.6 / -3.2 / +2.5 / +0.8%. */
#ifndef TSR_SM90_LATE_RESCALE
#define TSR_SM90_LATE_RESCALE (TSR_SM90_FA3_STEP && !TSR_SM90_S2F)
#endif
#if TSR_SM90_LATE_RESCALE && TSR_SM90_S2F
#error "attn_sm90.cuh: the late rescale is written for the one-S steps (not S2F)"
#endif
/* Pin the pending P V's wait after the softmax (FA3's intra-warpgroup
 * overlap; without the pin ptxas hoists the wait above the exponentials).
 * With the old step order it measured slower on every bf16 variant with
 * two stages (notes/sm90-64x64-2026-12-02.md) and on the FP8 ones with two;
 * with three, FP8 128x128 gained 1-3% and 128x64 lost up to 5%
 * (notes/fp8-kernel-2026-12-02.md).  Beside the late rescale and the
 * uniform descriptors it gains at the cap on the H100 (d128 128x128 nm,
 * notes/sm90-2026-12-06b.md): +0.8% random 10%, +2.2% dense, +1.4% top-k
 * 16%, 3% fewer cycles (ncu, dense), the warpgroups' waits for their own
 * P V gone from the stall samples.  So on where the late rescale is, but
 * for the dyn layout: at its 232 consumer registers the pin spilled (174
 * and 287 LDL/STL in the nm and mb cubins). */
#ifndef TSR_SM90_PVPIN
#define TSR_SM90_PVPIN (TSR_SM90_LATE_RESCALE && !TSR_SM90_DYN)
#endif

#if TSR_DTYPE_BF16
#define TSR_WG_T "bf16"
#else
#define TSR_WG_T "f16"
#endif
#include "tsr_common.cuh" /* tsr_ex2, tsr_pack2 (by TSR_DTYPE_BF16) */

/* Consumer warpgroups of one task (one per 64 query rows), and tasks a CTA
 * runs side by side: with TSR_WARPGROUPS = 1 + 2 * NC the CTA holds two
 * independent task streams (their own Q, K/V ring, barriers and producer
 * warp), so that two 64-row tasks keep the tensor cores busy together
 * (notes/sm90.md, v6). */
#define TSR_SM90_NC (TSR_BM / 64)
/* Registers of the producer and of each consumer with three tasks a CTA
 * (tuning knobs, not part of the variant name; at the kernel's entry). */
#ifndef TSR_SM90_TPC3_PREG
#define TSR_SM90_TPC3_PREG 32
#endif
#ifndef TSR_SM90_TPC3_CREG
#define TSR_SM90_TPC3_CREG 160
#endif
#define TSR_SM90_STR_(x) #x
#define TSR_SM90_STR(x) TSR_SM90_STR_(x)
/* Three tasks a CTA (g4 at BM 64): VSA's ThunderKittens kernel keeps four
 * 64-row tiles a multiprocessor in flight (four one-warpgroup CTAs, one K/V
 * stage each) where two streams keep two; with three, each warpgroup's
 * softmax hides behind two others' GEMMs.  Each stream has its own producer
 * warp (warp w of warpgroup 0 serves stream w) and, at d128, one K/V stage
 * (shared memory).  Four (g5) would leave a consumer 112 registers: the
 * tile step spilled 400 bytes at d128 and 48 at d64. */
#define TSR_SM90_TPC ((TSR_WARPGROUPS - 1) / TSR_SM90_NC)
/* Dynamic scheduling (layout "dyn", issue 20): each stream's producer takes
 * its next task with an atomicAdd on a per-launch counter, one task ahead
 * of the one it loads, and hands the task's record (and its first member's)
 * to the stream's consumers through a two-slot ring in shared memory.  On a
 * persistent grid the next task's Q and first K/V loads then run while the
 * consumers finish the current task (last P V, epilogue), as on any
 * persistent grid, but a CTA that finishes early takes more tasks: with the
 * planner's longest-first order that balances the tasks greedily, where the
 * static stride of "pers" lost 4-13% to the flat grid (notes/sm90.md).
 * Written for the one-Q-buffer code: QPF's record prefetch walks the static
 * stride, so dyn variants run without it. */
#define TSR_SM90_DYN TSR_LAYOUT_DYN
/* ints after the task count at p.n_tasks_dev: the next-task counter and the
 * producers done, then the "none left" task record (the device planner's
 * counts[10], [11] and [16..23], which it neither writes nor reads:
 * plan_layout.h's TSR_GP_COUNTS <= 10, TSR_GP_DSTATS >= 24) */
#define TSR_SM90_DYN_CTR 10
#define TSR_SM90_DYN_SENTINEL 16
/* Two tasks a CTA with 2 stages: each stream double-buffers Q and keeps the
 * next task's records in flight, so that on a persistent grid the next
 * task's Q load and record loads run while the current task computes
 * (notes/sm90.md, v7).  3 stages leave no shared memory for a second Q. */
#ifndef TSR_SM90_QPF
#define TSR_SM90_QPF (TSR_SM90_TPC == 2 && TSR_STAGES == 2 && !TSR_SM90_DYN)
#endif
#if TSR_SM90_DYN && TSR_SM90_QPF
#error "attn_sm90.cuh: the dyn layout is written for the one-Q-buffer code (no QPF)"
#endif
#define TSR_SM90_QBUF (1 + TSR_SM90_QPF)
/* bytes an element of q/k/v in shared memory; P fragment registers */
#if TSR_FP8
#define TSR_SM90_EB 1
#define TSR_SM90_NPF (TSR_BN / 8)
#else
#define TSR_SM90_EB 2
#define TSR_SM90_NPF (TSR_BN / 4)
#endif
#define TSR_SM90_SMEM_BYTES                                                                \
  (1024 + TSR_SM90_TPC * (TSR_SM90_QBUF * TSR_BM * TSR_HEAD_DIM * TSR_SM90_EB +            \
                          2 * TSR_STAGES * TSR_BN * TSR_HEAD_DIM * TSR_SM90_EB + 256))
static_assert(TSR_WARPGROUPS - 1 == TSR_SM90_TPC * TSR_SM90_NC &&
                  (TSR_WARPGROUPS <= 3 || (TSR_BM == 64 && TSR_WARPGROUPS == 4)),
              "attn_sm90.cuh: warpgroups must be 1 + BM / 64, or 3 or 4 with BM 64");

/* tessera-gen also passes what it computed from the variant name: they must
 * agree with this template's own layout. */
static_assert(TSR_THREADS == 128 * TSR_WARPGROUPS, "TSR_THREADS disagrees with attn_sm90.cuh");
static_assert(TSR_SMEM_BYTES >= TSR_SM90_SMEM_BYTES, "TSR_SMEM_BYTES too small for attn_sm90.cuh");
#if TSR_FP8 ? TSR_TMA_BOX != TSR_HEAD_DIM : TSR_TMA_BOX != 64
#error "attn_sm90.cuh loads TMA boxes 64 elements wide (FP8: whole rows of TSR_HEAD_DIM bytes)"
#endif

/* Key gather (plan_layout.h, "Gather plans"): each key tile is two half
 * tiles of TSR_BN / 2 keys, each its own TMA box (k and v maps with boxes
 * TSR_BN / 2 rows tall), so a 128x64-block mask runs on 128x128 tiles, and a
 * 64x64-block one on 64x128 tiles, without waste: per selected pair, tiles
 * 64 keys wide pay twice the per-tile fixed costs (barriers, row max and
 * sum, O rescale).  Full tiles only (no membership words), native
 * precision.  Nothing else depends on BM: each consumer warpgroup masks
 * its own 64 rows' scores by column, whatever the tasks a CTA. */
#if TSR_KGATHER && (TSR_MEMBERSHIP || TSR_FP8 || TSR_BN != 128 || TSR_LAYOUT_DYN)
#error "attn_sm90.cuh: key gather is written for full tiles 128 keys wide in native precision, flat or pers"
#endif

#if (TSR_BM != 64 && TSR_BM != 128) || (TSR_BN != 64 && TSR_BN != 128) || \
    (TSR_HEAD_DIM != 64 && TSR_HEAD_DIM != 128)
#error "attn_sm90.cuh: unsupported tile shape"
#endif

typedef unsigned long long tsr_u64;

/* ---- wgmma wrappers ------------------------------------------------------
 * One macro writes every wrapper, bf16/fp16 here and int8/e4m3 in
 * attn_sm90_fp8.cuh: TSR_WGMMA(name, kind, N, K, D type, D constraint,
 * types, immediates) defines
 *   void name(D type *d, A, tsr_u64 db, int acc)
 * doing D[64 x N] (+)= A[64 x K] * B[K x N] with
 *   wgmma.mma_async.sync.aligned.m64<N>k<K>.<types> {d}, A, db, p<immediates>
 * where p = (acc != 0) (acc 0 overwrites D).
 * kind ss: A is a shared-memory descriptor (tsr_u64 da); kind rs: A is four
 * registers of the A fragment (const tsr_u32 *a).  N is n64 or n128 (the
 * thread holds N / 2 accumulators).  The immediates follow the instruction's
 * operand list after the scale-d predicate: the A and B scales (1: not
 * negated) where the types take them, then the transpose flags (ss: A and B;
 * rs: B), which only 16-bit types take.
 * The scale-d operand is a predicate, never an immediate: NVRTC 13.0
 * crashed on the immediate form. */
#define TSR_WG_REGS_n64                                                                    \
  "%0, %1, %2, %3, %4, %5, %6, %7,"                                                        \
  "%8, %9, %10, %11, %12, %13, %14, %15,"                                                  \
  "%16, %17, %18, %19, %20, %21, %22, %23,"                                                \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define TSR_WG_REGS_n128                                                                   \
  TSR_WG_REGS_n64 ","                                                                      \
  "%32, %33, %34, %35, %36, %37, %38, %39,"                                                \
  "%40, %41, %42, %43, %44, %45, %46, %47,"                                                \
  "%48, %49, %50, %51, %52, %53, %54, %55,"                                                \
  "%56, %57, %58, %59, %60, %61, %62, %63"
#define TSR_WG_ACC_n64(c)                                                                  \
  c(d[0]), c(d[1]), c(d[2]), c(d[3]), c(d[4]), c(d[5]), c(d[6]), c(d[7]),                  \
  c(d[8]), c(d[9]), c(d[10]), c(d[11]), c(d[12]), c(d[13]), c(d[14]), c(d[15]),            \
  c(d[16]), c(d[17]), c(d[18]), c(d[19]), c(d[20]), c(d[21]), c(d[22]), c(d[23]),          \
  c(d[24]), c(d[25]), c(d[26]), c(d[27]), c(d[28]), c(d[29]), c(d[30]), c(d[31])
#define TSR_WG_ACC_n128(c)                                                                 \
  TSR_WG_ACC_n64(c),                                                                       \
  c(d[32]), c(d[33]), c(d[34]), c(d[35]), c(d[36]), c(d[37]), c(d[38]), c(d[39]),          \
  c(d[40]), c(d[41]), c(d[42]), c(d[43]), c(d[44]), c(d[45]), c(d[46]), c(d[47]),          \
  c(d[48]), c(d[49]), c(d[50]), c(d[51]), c(d[52]), c(d[53]), c(d[54]), c(d[55]),          \
  c(d[56]), c(d[57]), c(d[58]), c(d[59]), c(d[60]), c(d[61]), c(d[62]), c(d[63])
/* A's parameter and inputs, and the operand numbers after the accumulators:
 * A, B's descriptor, then the scale-d predicate's source (acc). */
#define TSR_WG_APARAM_ss tsr_u64 da
#define TSR_WG_APARAM_rs const tsr_u32 *a
#define TSR_WG_AIN_ss "l"(da)
#define TSR_WG_AIN_rs "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])
#define TSR_WG_AB_ss_n64 "%32, %33"
#define TSR_WG_P_ss_n64 "%34"
#define TSR_WG_AB_rs_n64 "{%32, %33, %34, %35}, %36"
#define TSR_WG_P_rs_n64 "%37"
#define TSR_WG_AB_ss_n128 "%64, %65"
#define TSR_WG_P_ss_n128 "%66"
#define TSR_WG_AB_rs_n128 "{%64, %65, %66, %67}, %68"
#define TSR_WG_P_rs_n128 "%69"
#define TSR_WGMMA(NAME, KIND, N, K, DT, DC, TYPES, IMM)                                    \
  static __device__ __forceinline__ void NAME(DT *d, TSR_WG_APARAM_##KIND, tsr_u64 db,     \
                                              int acc) {                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " TSR_WG_P_##KIND##_##N ", 0;\n"        \
                 "wgmma.mma_async.sync.aligned.m64" #N "k" #K "." TYPES " {"               \
                 TSR_WG_REGS_##N "}, " TSR_WG_AB_##KIND##_##N ", p" IMM ";\n}\n"           \
                 : TSR_WG_ACC_##N(DC)                                                      \
                 : TSR_WG_AIN_##KIND, "l"(db), "r"(acc));                                  \
  }

/* bf16/fp16 (TSR_WG_T), K = 16, fp32 accumulators.  Q K^T: A (Q) and B (K)
 * both K-major in shared memory.  P V: A (P) in registers, B (V) MN-major,
 * so transposed. */
TSR_WGMMA(tsr_wgmma_ss_n64, ss, n64, 16, float, "+f", "f32." TSR_WG_T "." TSR_WG_T, ", 1, 1, 0, 0")
TSR_WGMMA(tsr_wgmma_ss_n128, ss, n128, 16, float, "+f", "f32." TSR_WG_T "." TSR_WG_T, ", 1, 1, 0, 0")
TSR_WGMMA(tsr_wgmma_rs_n64, rs, n64, 16, float, "+f", "f32." TSR_WG_T "." TSR_WG_T, ", 1, 1, 1")
TSR_WGMMA(tsr_wgmma_rs_n128, rs, n128, 16, float, "+f", "f32." TSR_WG_T "." TSR_WG_T, ", 1, 1, 1")

static __device__ __forceinline__ void tsr_wg_fence(void) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void tsr_wg_commit(void) {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void tsr_wg_wait(void) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Pins a register array after a wgmma wait so the compiler neither reads it
 * early nor reuses its registers while the tensor cores may still use it. */
template <int N>
static __device__ __forceinline__ void tsr_fence_regs(float *r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
static __device__ __forceinline__ void tsr_fence_regs_u(tsr_u32 *r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

/* Shared-memory matrix descriptor, 128-byte swizzle: start address, leading
 * byte offset, stride byte offset (all in bytes, encoded >> 4). */
static __device__ __forceinline__ tsr_u64 tsr_desc(tsr_u32 saddr, tsr_u32 lbo, tsr_u32 sbo) {
  return (tsr_u64)((saddr & 0x3FFFF) >> 4) | ((tsr_u64)(lbo >> 4) << 16) |
         ((tsr_u64)(sbo >> 4) << 32) | (1ull << 62);
}

#if TSR_FP8
#include "attn_sm90_fp8.cuh"
#endif

/* ---- mbarrier and TMA ---------------------------------------------------- */
#include "sm90_sync.cuh" /* tsr_mbar_*, tsr_bulk_load */
static __device__ __forceinline__ void tsr_tma_load(tsr_u32 dst, const tsr_tmap *map, tsr_u32 bar,
                                                    int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"((tsr_u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

/* Named barriers 1 and 2 order the two consumer warpgroups' turns at the
 * tensor cores (FA3's ping-pong): a warpgroup issues its GEMMs only after the
 * other one has issued its own, so one's softmax overlaps the other's
 * products instead of both contending at once. */
static __device__ __forceinline__ void tsr_bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
static __device__ __forceinline__ void tsr_bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* ---- consumer pieces ------------------------------------------------------ */

/* Masks S (this thread's two rows, columns 8j + 2t + e) to -inf where the
 * tile's membership bits are clear or the column is past seq_k.  With
 * membership code, sel0/sel1 also note whether the row selects any column
 * of the tile (per tile, from the words it loads anyway): the epilogue
 * tells a row whose selected scores were all -inf from an empty one. */
static __device__ __forceinline__ void tsr_mask_tile(float *s, const tsr_kernel_params &p,
                                                     tsr_tile_rec tr, int seg0, int seg1, int t,
                                                     bool &sel0, bool &sel1) {
#if TSR_MEMBERSHIP
  if (tr.mem >= 0) {
    const tsr_u32 *w0 = p.membership + tr.mem + seg0 * (TSR_BN / 32);
    const tsr_u32 *w1 = p.membership + tr.mem + seg1 * (TSR_BN / 32);
    tsr_u32 any0 = 0u, any1 = 0u;
#pragma unroll
    for (int w = 0; w < TSR_BN / 32; ++w) {
      const tsr_u32 x0 = __ldg(w0 + w), x1 = __ldg(w1 + w);
      const tsr_u32 b0 = x0 >> (2 * t), b1 = x1 >> (2 * t);
      any0 |= x0;
      any1 |= x1;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int j = 4 * w + jj;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (!((b0 >> (8 * jj + e)) & 1u)) s[4 * j + e] = -__int_as_float(0x7f800000);
          if (!((b1 >> (8 * jj + e)) & 1u)) s[4 * j + 2 + e] = -__int_as_float(0x7f800000);
        }
      }
    }
    sel0 |= any0 != 0u;
    sel1 |= any1 != 0u;
  } else {
    sel0 = sel1 = true;
  }
#else
  (void)sel0, (void)sel1; /* every tile full: the epilogue knows from nt */
#endif
#if TSR_KGATHER
  /* each half against its own block's end; no second half: all masked */
  constexpr int HB = TSR_BN / 2;
  const int lim0 = p.seq_k - tr.k_tile * HB, lim1 = tr.mem >= 0 ? p.seq_k - tr.mem * HB : 0;
  if (lim0 < HB || lim1 < HB) {
#pragma unroll
    for (int j = 0; j < TSR_BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * (j % (HB / 8)) + 2 * t + e >= (j < HB / 8 ? lim0 : lim1)) {
          s[4 * j + e] = -__int_as_float(0x7f800000);
          s[4 * j + 2 + e] = -__int_as_float(0x7f800000);
        }
  }
#else
  const int lim = p.seq_k - tr.k_tile * TSR_BN; /* columns >= lim are past seq_k */
  if (lim < TSR_BN) {
#pragma unroll
    for (int j = 0; j < TSR_BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * j + 2 * t + e >= lim) {
          s[4 * j + e] = -__int_as_float(0x7f800000);
          s[4 * j + 2 + e] = -__int_as_float(0x7f800000);
        }
  }
#endif
}

/* Bit i: whether this consumer warpgroup's rows, which cover the query
 * segments sa..sb of the tile row, select any key in tile tb + c0 + i of
 * the task (c0 + i < nt).  One tile per lane, so 32 tiles cost one
 * dependent pair of loads; every lane gets the same word. */
static __device__ __forceinline__ tsr_u32 tsr_active_chunk(const tsr_kernel_params &p, int tb, int c0,
                                                           int nt, int sa, int sb, bool rows_valid,
                                                           int lane) {
  bool act = false;
  if (rows_valid && c0 + lane < nt) {
    const tsr_tile_rec tr = p.tiles[tb + c0 + lane];
    if (tr.mem < 0) {
      act = true;
    } else {
      const tsr_u32 *w = p.membership + tr.mem + sa * (TSR_BN / 32);
      const int nw = (sb - sa + 1) * (TSR_BN / 32);
      tsr_u32 any = 0;
      for (int k = 0; k < nw; ++k) any |= __ldg(w + k);
      act = any != 0u;
    }
  }
  return __ballot_sync(0xffffffffu, act);
}

/* Online softmax step on this thread's two rows: updates the base-2 row
 * maxima m0/m1, turns s into p = exp2(s*scale - m) in place, returns the
 * rescale factors of the previous state and adds the row sums into l.
 * Non-finite scores need no test here: fmaxf drops a NaN from the max but
 * ex2 carries it into p and l; a +inf score makes ex2(inf - inf) = NaN;
 * the epilogue keeps the NaN (runtime/ref.c has the rules). */
static __device__ __forceinline__ void tsr_softmax(float *s, float scale, float &m0, float &m1,
                                                   float &l0, float &l1, float &a0, float &a1) {
  const float NEG_INF = -__int_as_float(0x7f800000);
  float x0 = NEG_INF, x1 = NEG_INF;
#pragma unroll
  for (int j = 0; j < TSR_BN / 8; ++j) {
    x0 = fmaxf(x0, fmaxf(s[4 * j], s[4 * j + 1]));
    x1 = fmaxf(x1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
  }
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
  const float n0 = fmaxf(m0, x0 * scale), n1 = fmaxf(m1, x1 * scale);
  /* A row with nothing selected so far keeps m = -inf; exponentiate against
   * 0 so that exp2(-inf - -inf) never happens. */
  const float u0 = n0 == NEG_INF ? 0.f : n0, u1 = n1 == NEG_INF ? 0.f : n1;
  a0 = tsr_ex2(m0 - u0);
  a1 = tsr_ex2(m1 - u1);
  m0 = n0;
  m1 = n1;
  float r0 = 0.f, r1 = 0.f;
#pragma unroll
  for (int j = 0; j < TSR_BN / 8; ++j) {
    s[4 * j] = tsr_ex2(fmaf(s[4 * j], scale, -u0));
    s[4 * j + 1] = tsr_ex2(fmaf(s[4 * j + 1], scale, -u0));
    s[4 * j + 2] = tsr_ex2(fmaf(s[4 * j + 2], scale, -u1));
    s[4 * j + 3] = tsr_ex2(fmaf(s[4 * j + 3], scale, -u1));
    r0 += s[4 * j] + s[4 * j + 1];
    r1 += s[4 * j + 2] + s[4 * j + 3];
  }
  l0 = l0 * a0 + r0;
  l1 = l1 * a1 + r1;
}

/* O *= alpha per row; once the row maxima settle alpha is 1 for whole
 * warps and the multiplies are skipped.  Multiplying always, as FA4 does
 * (x * 1 is x: the same bits), measured 7-10% slower on d128 128x128 at
 * the cap on the H100 (notes/sm90-2026-12-06c.md). */
static __device__ __forceinline__ void tsr_rescale(float *o, float a0, float a1) {
  if (__any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) {
#pragma unroll
    for (int j = 0; j < TSR_HEAD_DIM / 8; ++j) {
      o[4 * j] *= a0;
      o[4 * j + 1] *= a0;
      o[4 * j + 2] *= a1;
      o[4 * j + 3] *= a1;
    }
  }
}

/* Writes one member's result rows of this thread: o (normalised) and lse, or
 * the unnormalised partial slot.  l0/l1 are full row sums: 0 for a row that
 * selected nothing (zeros and lse -inf, even where a masked column's 0 * NaN
 * reached o), NaN for a NaN row (o and lse NaN; part_m NaN marks it for the
 * merge). */
static __device__ __forceinline__ void tsr_epilogue(const tsr_kernel_params &p, tsr_member_rec mb,
                                                    int partial_slot, const float *o, float m0,
                                                    float m1, float l0, float l1, int rl0, int t) {
  const float NEG_INF = -__int_as_float(0x7f800000);
  const int rl1 = rl0 + 8;
  if (partial_slot >= 0) {
    float *po = p.part_o + (tsr_i64)partial_slot * TSR_BM * TSR_HEAD_DIM;
#pragma unroll
    for (int j = 0; j < TSR_HEAD_DIM / 8; ++j) {
      const int c = 8 * j + 2 * t;
      *(float2 *)(po + (tsr_i64)rl0 * TSR_HEAD_DIM + c) = make_float2(o[4 * j], o[4 * j + 1]);
      *(float2 *)(po + (tsr_i64)rl1 * TSR_HEAD_DIM + c) = make_float2(o[4 * j + 2], o[4 * j + 3]);
    }
    if (t == 0) {
      p.part_m[(tsr_i64)partial_slot * TSR_BM + rl0] = l0 != l0 ? l0 : m0;
      p.part_m[(tsr_i64)partial_slot * TSR_BM + rl1] = l1 != l1 ? l1 : m1;
      p.part_l[(tsr_i64)partial_slot * TSR_BM + rl0] = l0;
      p.part_l[(tsr_i64)partial_slot * TSR_BM + rl1] = l1;
    }
    return;
  }
  const int r0 = mb.q_tile * TSR_BM + rl0, r1 = mb.q_tile * TSR_BM + rl1;
  const bool z0 = l0 == 0.f, z1 = l1 == 0.f;
  const float i0 = z0 ? 0.f : 1.f / l0, i1 = z1 ? 0.f : 1.f / l1;
  const tsr_i64 ob = mb.batch * p.o_stride[0] + mb.head * p.o_stride[1];
  tsr_u32 *o0 = (tsr_u32 *)((unsigned short *)p.o + ob + r0 * p.o_stride[2]);
  tsr_u32 *o1 = (tsr_u32 *)((unsigned short *)p.o + ob + r1 * p.o_stride[2]);
  if (r0 < p.seq_q) {
#pragma unroll
    for (int j = 0; j < TSR_HEAD_DIM / 8; ++j)
      o0[4 * j + t] = z0 ? 0u : tsr_pack2(o[4 * j] * i0, o[4 * j + 1] * i0);
  }
  if (r1 < p.seq_q) {
#pragma unroll
    for (int j = 0; j < TSR_HEAD_DIM / 8; ++j)
      o1[4 * j + t] = z1 ? 0u : tsr_pack2(o[4 * j + 2] * i1, o[4 * j + 3] * i1);
  }
  if (p.lse && t == 0) {
    const float LN2 = 0.693147180559945309f;
    float *lr = p.lse + ((tsr_i64)mb.batch * p.heads_q + mb.head) * p.seq_q;
    if (r0 < p.seq_q) lr[r0] = z0 ? NEG_INF : (m0 + __log2f(l0)) * LN2;
    if (r1 < p.seq_q) lr[r1] = z1 ? NEG_INF : (m1 + __log2f(l1)) * LN2;
  }
}

/* ---- the kernel's layout --------------------------------------------------- */

namespace tsr90 {
/* Enumerators, not constexpr variables: NVRTC emits a namespace-scope
 * constant as a global object even where no code reads it. */
#if TSR_FP8
/* one panel of D-byte rows; a V^T tile [D][BN] has the K tile's size */
enum : int { NC = TSR_SM90_NC, HALVES = 1, TPC = TSR_SM90_TPC };
enum : tsr_u32 {
  Q_PANEL = TSR_BM * TSR_HEAD_DIM,
  KV_PANEL = TSR_BN * TSR_HEAD_DIM,
#else
enum : int {
  NC = TSR_SM90_NC,
  HALVES = TSR_HEAD_DIM / 64, /* 64-column swizzle panels */
  TPC = TSR_SM90_TPC
};
enum : tsr_u32 {
  Q_PANEL = TSR_BM * 128,  /* bytes of one [BM x 64] panel */
  KV_PANEL = TSR_BN * 128, /* bytes of one [BN x 64] panel */
#endif
  KV_TILE = KV_PANEL * HALVES,
  Q_BYTES = Q_PANEL * HALVES,
  /* one task stream's tiles: QBUF Q buffers, the K ring, the V ring */
  STREAM = TSR_SM90_QBUF * Q_BYTES + 2 * TSR_STAGES * KV_TILE
};

/* A stream's 256 bytes of barriers at `bars`: q_full = bars, q_empty =
 * bars + 8, then k_full[s] = bars + 16 + 8 s, k_empty, v_full, v_empty */
#define TSR_K_FULL(s) (bars + 16 + 8 * (s))
#define TSR_K_EMPTY(s) (bars + 16 + 8 * (TSR_STAGES + (s)))
#define TSR_V_FULL(s) (bars + 16 + 8 * (2 * TSR_STAGES + (s)))
#define TSR_V_EMPTY(s) (bars + 16 + 8 * (3 * TSR_STAGES + (s)))
  /* Q buffer b's full / empty barriers (b = 1 only with TSR_SM90_QPF) */
#define TSR_Q_FULL(b) ((b) ? bars + 16 + 32 * TSR_STAGES : bars)
#define TSR_Q_EMPTY(b) (TSR_Q_FULL(b) + 8)
/* Dyn layout: the task ring's two slots in the stream's last 128 bytes
 * (the barriers above end at 16 + 32 * TSR_STAGES <= 112 without QPF):
 * slot k's full and empty barriers, then its 48 bytes of records (the
 * task's, then its first member's), filled by bulk copies (async proxy),
 * as the K/V ring is. */
#define TSR_T_FULL(k) (bars + 128 + 8 * (k))
#define TSR_T_EMPTY(k) (bars + 144 + 8 * (k))
#define TSR_T_REC(k) (bars + 160 + 48 * (k))
#if TSR_SM90_DYN
static_assert(16 + 32 * TSR_STAGES <= 128, "attn_sm90.cuh: no room for the dyn task ring");
#endif

/* Thread 0 initialises every stream's barriers (bars0: stream 0's): a full
 * barrier waits for the producer thread's one arrival (and the TMA bytes),
 * an empty one for the four warps of each of the stream's NC consumer
 * warpgroups. */
static __device__ __forceinline__ void init_barriers(tsr_u32 bars0) {
  for (int i = 0; i < TPC; ++i) {
    const tsr_u32 bars = bars0 + 256 * i; /* stream i's, for the macros */
    tsr_mbar_init(bars, 1);
    tsr_mbar_init(bars + 8, 4 * NC);
    for (int s = 0; s < TSR_STAGES; ++s) {
      tsr_mbar_init(TSR_K_FULL(s), 1);
      tsr_mbar_init(TSR_K_EMPTY(s), 4 * NC);
      tsr_mbar_init(TSR_V_FULL(s), 1);
      tsr_mbar_init(TSR_V_EMPTY(s), 4 * NC);
    }
#if TSR_SM90_QPF
    tsr_mbar_init(bars + 16 + 32 * TSR_STAGES, 1);
    tsr_mbar_init(bars + 16 + 32 * TSR_STAGES + 8, 4 * NC);
#endif
#if TSR_SM90_DYN
    for (int k = 0; k < 2; ++k) {
      tsr_mbar_init(TSR_T_FULL(k), 1);
      tsr_mbar_init(TSR_T_EMPTY(k), 4 * NC);
    }
#endif
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* ---- dyn layout: the task counter and the stream's task ring ---------------- */

#if TSR_SM90_DYN
static __device__ __forceinline__ tsr_i32 *dyn_counter(const tsr_kernel_params &p) {
  return (tsr_i32 *)p.n_tasks_dev + TSR_SM90_DYN_CTR;
}
/* Producer: publishes task `task` (>= n_tasks: none left) in slot j % 2 of
 * the ring once the consumers have read what the slot held two tasks ago;
 * returns the task's record (n_members -1 for none left).  The slot is
 * filled by bulk copies from the plan's records (or the sentinel record)
 * completing on its full barrier, the same protocol as the K/V ring's TMA
 * loads: no ordinary shared-memory store passes data between warps. */
static __device__ __forceinline__ tsr_task_rec dyn_put(const tsr_kernel_params &p, tsr_u32 bars, int j,
                                                       int task, int n_tasks) {
  tsr_task_rec tk = {0, 0, 0, 0, 0, 0, -1, -1};
  const tsr_task_rec *src = (const tsr_task_rec *)(p.n_tasks_dev + TSR_SM90_DYN_SENTINEL);
  const void *msrc = src; /* none left: any 16 bytes; the consumers stop at the task's record */
  if (task < n_tasks) {
    src = p.tasks + task;
    tk = *src;
    msrc = p.members + tk.member_begin; /* n_members >= 1 */
  }
  const int k = j & 1;
  tsr_mbar_wait(TSR_T_EMPTY(k), ((j >> 1) & 1) ^ 1);
  /* the consumers' reads of the slot (generic proxy) before the copies
   * (async proxy) that overwrite it */
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  tsr_mbar_expect_tx(TSR_T_FULL(k), 48);
  tsr_bulk_load(TSR_T_REC(k), src, 32, TSR_T_FULL(k));
  tsr_bulk_load(TSR_T_REC(k) + 32, msrc, 16, TSR_T_FULL(k));
  return tk;
}
/* Consumer: the task of slot j % 2 and its first member; the warp hands
 * the slot back once every lane has read it. */
static __device__ __forceinline__ tsr_task_rec dyn_get(tsr_u32 bars, int j, bool arriver,
                                                       tsr_member_rec &mb) {
  tsr_task_rec tk;
  const int k = j & 1;
  tsr_mbar_wait(TSR_T_FULL(k), (j >> 1) & 1);
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%12];\n"
               "ld.shared.v4.b32 {%4, %5, %6, %7}, [%12+16];\n"
               "ld.shared.v4.b32 {%8, %9, %10, %11}, [%12+32];\n"
               : "=r"(tk.batch), "=r"(tk.head), "=r"(tk.q_tile), "=r"(tk.tile_begin), "=r"(tk.tile_end),
                 "=r"(tk.member_begin), "=r"(tk.n_members), "=r"(tk.partial), "=r"(mb.batch),
                 "=r"(mb.head), "=r"(mb.q_tile), "=r"(mb.pad)
               : "r"(TSR_T_REC(k))
               : "memory");
  __syncwarp();
  if (arriver) tsr_mbar_arrive(TSR_T_EMPTY(k));
  return tk;
}
/* Producer, none left: the last of the grid's producers out (every one has
 * made its last claim before it counts itself done) zeroes the counters
 * for the next launch on the stream. */
static __device__ __forceinline__ void dyn_done(tsr_i32 *ctr) {
  __threadfence();
  if (atomicAdd(ctr + 1, 1) == (int)gridDim.x * TPC - 1) {
    atomicExch(ctr, 0);
    atomicExch(ctr + 1, 0);
    __threadfence();
  }
}
#endif

/* ---- producer ---------------------------------------------------------------- */

/* The one thread of stream `stream` that issues its TMA copies: for each
 * member of each of the stream's tasks, Q once its buffer is free, then the
 * task's K and V tiles into the ring, each stage once the consumers handed
 * it back.  sq, sk, sv: the stream's Q buffers and K, V rings; bars: its
 * barriers. */
static __device__ __forceinline__ void producer(const tsr_kernel_params &p, int n_tasks, int stream,
                                                int hq_per_kv, tsr_u32 sq, tsr_u32 sk, tsr_u32 sv,
                                                tsr_u32 bars) {
#if TSR_SM90_QPF
  /* The next task's record loads while this task's tiles are issued,
   * and its first member's once the first tile is out; Q alternates
   * between two buffers, so Q of the next task goes out right after
   * this task's last K/V, while the consumer still works on them. */
  const int stride = gridDim.x * TPC;
  tsr_task_rec tkn;
  if (blockIdx.x * TPC + stream < n_tasks) tkn = p.tasks[blockIdx.x * TPC + stream];
  tsr_member_rec mbn;
  bool mbn_ok = false;
  int it = 0, q_uses = 0; /* declared here, not first: that keeps the SASS */
  for (int task = blockIdx.x * TPC + stream; task < n_tasks; task += stride) {
    const tsr_task_rec tk = tkn;
    const bool has_next = task + stride < n_tasks;
    if (has_next) tkn = p.tasks[task + stride];
    const bool pf_ok = mbn_ok;
    mbn_ok = false;
    if (tk.tile_end <= tk.tile_begin) continue;
    for (int i = 0; i < tk.n_members; ++i) {
      const tsr_member_rec mb = i == 0 && pf_ok ? mbn : p.members[tk.member_begin + i];
      const int hk = mb.head / hq_per_kv;
      const int qb = q_uses & 1;
      tsr_mbar_wait(TSR_Q_EMPTY(qb), ((q_uses >> 1) & 1) ^ 1);
      tsr_mbar_expect_tx(TSR_Q_FULL(qb), Q_BYTES);
#pragma unroll
      for (int h = 0; h < HALVES; ++h)
        tsr_tma_load(sq + qb * Q_BYTES + h * Q_PANEL, &p.tma_q, TSR_Q_FULL(qb), 64 * h,
                     mb.q_tile * TSR_BM, mb.head, mb.batch);
      ++q_uses;
#else
  const tsr_u32 q_full = TSR_Q_FULL(0), q_empty = TSR_Q_EMPTY(0);
  int it = 0, q_uses = 0;
#if TSR_SM90_DYN
  /* the next task is claimed while this one's loads go out (dyn_put) */
  tsr_i32 *const ctr = dyn_counter(p);
  int nxt = 0;
  for (int j = 0, task = atomicAdd(ctr, 1);; ++j, task = nxt) {
    const tsr_task_rec tk = dyn_put(p, bars, j, task, n_tasks);
    if (task >= n_tasks) break;
    nxt = atomicAdd(ctr, 1);
#else
  for (int task = blockIdx.x * TPC + stream; task < n_tasks; task += gridDim.x * TPC) {
    const tsr_task_rec tk = p.tasks[task];
#endif
    if (tk.tile_end <= tk.tile_begin) continue;
    for (int i = 0; i < tk.n_members; ++i) {
      const tsr_member_rec mb = p.members[tk.member_begin + i];
      const int hk = mb.head / hq_per_kv;
      tsr_mbar_wait(q_empty, (q_uses & 1) ^ 1);
      tsr_mbar_expect_tx(q_full, Q_BYTES);
#pragma unroll
      for (int h = 0; h < HALVES; ++h)
        tsr_tma_load(sq + h * Q_PANEL, &p.tma_q, q_full, 64 * h, mb.q_tile * TSR_BM, mb.head,
                     mb.batch);
      ++q_uses;
#endif
      for (int ti = tk.tile_begin; ti < tk.tile_end; ++ti, ++it) {
        const int s = it % TSR_STAGES;
        const tsr_u32 ph = (it / TSR_STAGES) & 1;
#if TSR_KGATHER
        /* two half tiles; a missing second half is a box past seq_k, which
         * TMA fills with zeros: masked scores over zero keys, and P's zeros
         * times zero values.  (Loading the first half's keys again, as this
         * once did, multiplied P's zeros by an inf of those values: NaN
         * where the reference has inf.) */
        const tsr_tile_rec tr = p.tiles[ti];
        const int row = tr.k_tile * (TSR_BN / 2), row1 = tr.mem >= 0 ? tr.mem * (TSR_BN / 2) : p.seq_k;
#else
        const int row = p.tiles[ti].k_tile * TSR_BN;
#endif
        tsr_mbar_wait(TSR_K_EMPTY(s), ph ^ 1);
        tsr_mbar_expect_tx(TSR_K_FULL(s), KV_TILE);
#pragma unroll
        for (int h = 0; h < HALVES; ++h) {
          tsr_tma_load(sk + s * KV_TILE + h * KV_PANEL, &p.tma_k, TSR_K_FULL(s), 64 * h, row,
                       hk, mb.batch);
#if TSR_KGATHER
          tsr_tma_load(sk + s * KV_TILE + h * KV_PANEL + KV_PANEL / 2, &p.tma_k, TSR_K_FULL(s), 64 * h,
                       row1, hk, mb.batch);
#endif
        }
        tsr_mbar_wait(TSR_V_EMPTY(s), ph ^ 1);
        tsr_mbar_expect_tx(TSR_V_FULL(s), KV_TILE);
#if TSR_FP8
        /* vt8: keys innermost, channels 0..D-1 */
        tsr_tma_load(sv + s * KV_TILE, &p.tma_v, TSR_V_FULL(s), row, 0, hk, mb.batch);
#else
#pragma unroll
        for (int h = 0; h < HALVES; ++h) {
          tsr_tma_load(sv + s * KV_TILE + h * KV_PANEL, &p.tma_v, TSR_V_FULL(s), 64 * h, row,
                       hk, mb.batch);
#if TSR_KGATHER
          tsr_tma_load(sv + s * KV_TILE + h * KV_PANEL + KV_PANEL / 2, &p.tma_v, TSR_V_FULL(s), 64 * h,
                       row1, hk, mb.batch);
#endif
        }
#endif
#if TSR_SM90_QPF
        if (i == 0 && ti == tk.tile_begin && has_next && tkn.n_members > 0 &&
            tkn.tile_end > tkn.tile_begin) {
          mbn = p.members[tkn.member_begin];
          mbn_ok = true;
        }
#endif
      }
    }
  }
#if TSR_SM90_DYN
  (void)stream;
  dyn_done(ctr);
#endif
}

/* ---- consumer ---------------------------------------------------------------- */

/* Named barriers of the ping-pong (my_turn, other_turn: the warpgroup's and
 * the other's); the tile steps take them as parameters (TSR_TURNS). */
#if TSR_SM90_NC == 2 && TSR_SM90_PINGPONG
#define TSR_TURN_BEGIN() tsr_bar_sync(my_turn, 256)
#define TSR_TURN_END() tsr_bar_arrive(other_turn, 256)
#else
#define TSR_TURN_BEGIN() ((void)0)
#define TSR_TURN_END() ((void)0)
#endif
#if TSR_SM90_NC == 2 && TSR_SM90_PINGPONG
#define TSR_TURNS my_turn, other_turn
#else
#define TSR_TURNS 0, 0
#endif
/* PINGPONG 1 orders every issue block; 2 only the main loop's.  (A mode
 * passing the turn once S is in, rather than once the products are issued,
 * measured the same as 1 with the pinned P V wait and no better without
 * it; removed: notes/sm90-2026-12-06b.md section 2.) */
#if TSR_SM90_NC == 2 && TSR_SM90_PINGPONG == 1
#define TSR_EDGE_BEGIN() TSR_TURN_BEGIN()
#define TSR_EDGE_END() TSR_TURN_END()
#else
#define TSR_EDGE_BEGIN() ((void)0)
#define TSR_EDGE_END() ((void)0)
#endif

/* The query segments (membership word rows) of rows r and r + k of query
 * tile q_tile, counted from the tile's first row; rows past seq_q count
 * as the last. */
static __device__ __forceinline__ void row_segs(const tsr_kernel_params &p, int q_tile, int r, int k,
                                                int &seg_r, int &seg_rk) {
  const int base = q_tile * TSR_BM, last = p.seq_q - 1;
  const int b0 = __ldg(p.qblk + (base < last ? base : last));
  const int r0 = base + r, r1 = base + r + k;
  seg_r = __ldg(p.qblk + (r0 < last ? r0 : last)) - b0;
  seg_rk = __ldg(p.qblk + (r1 < last ? r1 : last)) - b0;
}

/* S's accumulators: FP8 variants compute Q K^T in int8 into s32
 * registers (TSR_SACC, si), which the scaling turns into the float s; the
 * others accumulate into s itself (the same tokens as before si existed,
 * so their code is unchanged). */
#if TSR_FP8
typedef tsr_u32 tsr_sacc;
#define TSR_SACC si
#define TSR_SACC_DECL tsr_u32 si[TSR_BN / 2]; /* Q K^T's s32 accumulators */
#define TSR_SACC_PARAM tsr_u32 *si,
#define TSR_SACC_ARG si,
#define TSR_FENCE_SACC() tsr_fence_regs_u<TSR_BN / 2>(si)
#else
typedef float tsr_sacc;
#define TSR_SACC s
#define TSR_SACC_DECL
#define TSR_SACC_PARAM
#define TSR_SACC_ARG
#define TSR_FENCE_SACC() tsr_fence_regs<TSR_BN / 2>(s)
#endif

/* The tensor-core issue blocks of the key tile in ring stage st: S = Q K^T
 * (64 x BN over D, k16 steps; Q and K panels K-major) and O += P V (P from
 * registers, V through its MN-major descriptor); O zeroed for a member;
 * and P packed from the softmax's S to the A operand of P V (16-bit, or
 * e4m3 with TSR_FP8, whose Q K^T is int8). */
static __device__ __forceinline__ void issue_qk(tsr_sacc *s, tsr_u64 dq, tsr_u64 dk, int st) {
#if TSR_FP8
  tsr_f8_issue_s(s, dq, dk + ((st * KV_TILE) >> 4));
#else
#pragma unroll
  for (int kk = 0; kk < TSR_HEAD_DIM / 16; ++kk) {
    const tsr_u32 off = (kk % 4) * 32;
#if TSR_BN == 128
    tsr_wgmma_ss_n128(s, dq + (((kk / 4) * Q_PANEL + off) >> 4),
                      dk + ((st * KV_TILE + (kk / 4) * KV_PANEL + off) >> 4), kk > 0);
#else
    tsr_wgmma_ss_n64(s, dq + (((kk / 4) * Q_PANEL + off) >> 4),
                     dk + ((st * KV_TILE + (kk / 4) * KV_PANEL + off) >> 4), kk > 0);
#endif
  }
#endif
}
static __device__ __forceinline__ void issue_pv(float *o, const tsr_u32 *pf, tsr_u64 dv, int st) {
#if TSR_FP8
  tsr_f8_issue_pv(o, pf, dv + ((st * KV_TILE) >> 4));
#else
#pragma unroll
  for (int kk = 0; kk < TSR_BN / 16; ++kk) {
#if TSR_HEAD_DIM == 128
    tsr_wgmma_rs_n128(o, pf + 4 * kk, dv + ((st * KV_TILE + kk * 16 * 128) >> 4), 1);
#else
    tsr_wgmma_rs_n64(o, pf + 4 * kk, dv + ((st * KV_TILE + kk * 16 * 128) >> 4), 1);
#endif
  }
#endif
}
static __device__ __forceinline__ void zero_o(float *o) {
#pragma unroll
  for (int j = 0; j < TSR_HEAD_DIM / 2; ++j) o[j] = 0.f;
}
static __device__ __forceinline__ void pack_p(tsr_u32 *pf, const float *s) {
#if TSR_FP8
  tsr_f8_pack_p(pf, s);
#else
#pragma unroll
  for (int j = 0; j < TSR_BN / 4; ++j) pf[j] = tsr_pack2(s[2 * j], s[2 * j + 1]);
#endif
}

/* A tile the warpgroup skips (ring position it + u): wait for its loads
 * (never arrive ahead of the full barrier, or the ring's phases would
 * slip) and hand the stage back. */
static __device__ __forceinline__ void skip_tile(tsr_u32 bars, int it, int u, bool arriver) {
  const int su = (it + u) % TSR_STAGES;
  const tsr_u32 pu = ((it + u) / TSR_STAGES) & 1;
  tsr_mbar_wait(TSR_K_FULL(su), pu);
  if (arriver) tsr_mbar_arrive(TSR_K_EMPTY(su));
  tsr_mbar_wait(TSR_V_FULL(su), pu);
  if (arriver) tsr_mbar_arrive(TSR_V_EMPTY(su));
}

/* Whether the warpgroup computes tile u of the task's nt (called for
 * increasing u only): with skipping, bit u of the word tsr_active_chunk
 * gives for u's chunk of 32 tiles (act_chunk: the chunk act_bits is of). */
#if TSR_SM90_SKIP
#define TSR_ACTIVE(u) \
  active(u, p, tk, nt, sa, sb, rows_valid, lane, act_bits, act_chunk)
static __device__ __forceinline__ bool active(int u, const tsr_kernel_params &p, const tsr_task_rec &tk,
                                              const int &nt, const int &sa, const int &sb,
                                              const bool &rows_valid, const int &lane,
                                              tsr_u32 &act_bits, int &act_chunk) {
  if ((u >> 5) != act_chunk) {
    act_chunk = u >> 5;
    act_bits = tsr_active_chunk(p, tk.tile_begin, u & ~31, nt, sa, sb, rows_valid, lane);
  }
  return (act_bits >> (u & 31)) & 1u;
}
#else
#define TSR_ACTIVE(u) true
#endif

/* Whether tile u (active, its chunk loaded) is the last one the
 * warpgroup computes of the task's nt: then Q may be released after its S.
 * act_bits: tsr_active_chunk's word of u's chunk (skipping code only). */
#if TSR_SM90_SKIP
#define TSR_LAST_ACTIVE_ARGS nt, act_bits
#define TSR_ACT_BITS_PARAM const tsr_u32 &act_bits,
#define TSR_ACT_BITS_ARG act_bits,
static __device__ __forceinline__ bool last_active(int u, const int &nt, const tsr_u32 &act_bits) {
  return u == nt - 1 || ((u >> 5) == ((nt - 1) >> 5) && ((act_bits >> (u & 31)) >> 1) == 0);
}
#else
#define TSR_LAST_ACTIVE_ARGS nt
#define TSR_ACT_BITS_PARAM
#define TSR_ACT_BITS_ARG
static __device__ __forceinline__ bool last_active(int u, const int &nt) { return u == nt - 1; }
#endif

/* FP8: the query rows' scale and the K/V head's row of key scales, which
 * the tile steps turn into each tile's score factors. */
#if TSR_FP8
#define TSR_F8_PARAM const float &sqv, const int &bh_kv,
#define TSR_F8_ARG sqv, bh_kv,
#define TSR_F8_FACTORS_PARAM , const float &f0, const float &f1
#define TSR_F8_FACTORS_ARG , f0, f1
#else
#define TSR_F8_FACTORS_PARAM
#define TSR_F8_FACTORS_ARG
#define TSR_F8_PARAM
#define TSR_F8_ARG
#endif

/* The steps of a run of active tiles (consumer() says how they chain).
 * Tile u of the task sits at ring position it + u; st, ph are the stage and
 * phase of the pending tile, whose P (pf) waits for its P V.  Q's empty
 * barrier q_e is arrived on after the S of the warpgroup's last active tile
 * (q_held then false).  m, l, a, sel: the softmax state of rows rl0 and
 * rl0 + 8 (tsr_softmax, tsr_mask_tile).  Captured state comes by reference,
 * as it did into the lambdas these were: the generated code stays the same. */

/* Once S_u is in (both tile steps): K_u's stage sk goes back, and Q's once
 * u is the warpgroup's last active tile; then S_u is biased (FP8: t = BIAS + acc), masked
 * and the softmax updates m, l and a. */
static __device__ __forceinline__ void scores_in(
    const tsr_kernel_params &p, int u, const int &sk, const tsr_tile_rec &tr, const tsr_u32 &bars,
    float *s, TSR_SACC_PARAM const bool &arriver, const int &nt, TSR_ACT_BITS_PARAM const tsr_u32 &q_e,
    bool &q_held, const int &seg0, const int &seg1, const int &t, bool &sel0, bool &sel1, float &m0,
    float &m1, float &l0, float &l1, float &a0, float &a1 TSR_F8_FACTORS_PARAM) {
  if (arriver) tsr_mbar_arrive(TSR_K_EMPTY(sk));
  if (last_active(u, TSR_LAST_ACTIVE_ARGS)) {
    if (arriver) tsr_mbar_arrive(q_e);
    q_held = false;
  }
#if TSR_FP8
  tsr_f8_bias_scores(s, si);
  tsr_mask_tile(s, p, tr, seg0, seg1, t, sel0, sel1);
  tsr_f8_softmax(s, f0, f1, m0, m1, l0, l1, a0, a1);
#else
  tsr_mask_tile(s, p, tr, seg0, seg1, t, sel0, sel1);
  tsr_softmax(s, p.scale_log2, m0, m1, l0, l1, a0, a1);
#endif
}

/* S = Q K_u^T, mask and softmax with nothing pending; u becomes the
 * pending tile. */
static __device__ __forceinline__ void first_tile(
    const tsr_kernel_params &p, const tsr_task_rec &tk, const tsr_u32 &bars, const int &it, int u,
    int &st, tsr_u32 &ph, const tsr_u64 &dq, const tsr_u64 &dk, float *o, float *s, TSR_SACC_PARAM tsr_u32 *pf,
    const bool &arriver, const int &nt, TSR_ACT_BITS_PARAM const tsr_u32 &q_e, bool &q_held,
    const int &seg0, const int &seg1, const int &t, bool &sel0, bool &sel1, float &m0, float &m1,
    float &l0, float &l1, float &a0, float &a1, TSR_F8_PARAM int my_turn, int other_turn) {
  (void)my_turn, (void)other_turn, (void)o;
  st = (it + u) % TSR_STAGES;
  ph = ((it + u) / TSR_STAGES) & 1;
  const tsr_tile_rec tr = p.tiles[tk.tile_begin + u];
#if TSR_FP8
  float f0, f1; /* loaded while the loads and S are waited for */
  tsr_f8_key_factors(p, bh_kv, tr.k_tile, sqv, f0, f1);
#endif
  tsr_mbar_wait(TSR_K_FULL(st), ph);
  TSR_EDGE_BEGIN();
  tsr_wg_fence();
  issue_qk(TSR_SACC, dq, dk, st);
  tsr_wg_commit();
  TSR_EDGE_END();
  tsr_wg_wait<0>();
  TSR_FENCE_SACC();
  scores_in(p, u, st, tr, bars, s, TSR_SACC_ARG arriver, nt, TSR_ACT_BITS_ARG q_e, q_held, seg0, seg1, t,
            sel0, sel1, m0, m1, l0, l1, a0, a1 TSR_F8_FACTORS_ARG);
  pack_p(pf, s);
#if TSR_SM90_LATE_RESCALE
  tsr_rescale(o, a0, a1); /* no P V pending: O holds every tile before u */
#endif
}

/* Tile u = pending + 1, first half: once K_u and the pending V are in,
 * S_u = Q K_u^T and the pending tile's O += P V are issued (the rescale of
 * O between them, while S is computed). */
static __device__ __forceinline__ void next_tile_issue(
    const tsr_u32 &bars, const int &sn, const tsr_u32 &phn, const int &st, const tsr_u32 &ph,
    const tsr_u64 &dq, const tsr_u64 &dk, const tsr_u64 &dv, float *s, TSR_SACC_PARAM float *o, tsr_u32 *pf,
    const float &a0, const float &a1, int my_turn, int other_turn) {
  (void)my_turn, (void)other_turn;
  tsr_mbar_wait(TSR_K_FULL(sn), phn);
#if !TSR_SM90_LATE_RESCALE
  tsr_mbar_wait(TSR_V_FULL(st), ph);
#endif
  TSR_TURN_BEGIN();
  tsr_wg_fence();
  issue_qk(TSR_SACC, dq, dk, sn);
  tsr_wg_commit();
#if TSR_SM90_LATE_RESCALE
  (void)a0, (void)a1; /* O was rescaled at the end of the pending tile's step */
  tsr_mbar_wait(TSR_V_FULL(st), ph);
#else
  /* the pending tile's rescale runs while S = Q K^T is computed */
  tsr_rescale(o, a0, a1);
#endif
  tsr_wg_fence();
  issue_pv(o, pf, dv, st);
  tsr_wg_commit();
  TSR_TURN_END();
}

/* Tile u = pending + 1, second half: once S_u is in, K_u's stage goes
 * back, S_u is masked and its softmax runs beside the pending P V; when
 * that is in, the pending V stage goes back and u becomes the pending tile
 * (sn, phn: its stage and phase; tr: its record). */
static __device__ __forceinline__ void next_tile_end(
    const tsr_kernel_params &p, int u, int &st, tsr_u32 &ph, const int &sn, const tsr_u32 &phn,
    const tsr_tile_rec &tr, const tsr_u32 &bars, float *o, float *s, TSR_SACC_PARAM tsr_u32 *pf, const bool &arriver,
    const int &nt, TSR_ACT_BITS_PARAM const tsr_u32 &q_e, bool &q_held, const int &seg0,
    const int &seg1, const int &t, bool &sel0, bool &sel1, float &m0, float &m1, float &l0,
    float &l1, float &a0, float &a1 TSR_F8_FACTORS_PARAM) {
  tsr_wg_wait<1>();
  TSR_FENCE_SACC();
  scores_in(p, u, sn, tr, bars, s, TSR_SACC_ARG arriver, nt, TSR_ACT_BITS_ARG q_e, q_held, seg0, seg1, t,
            sel0, sel1, m0, m1, l0, l1, a0, a1 TSR_F8_FACTORS_ARG);
#if TSR_SM90_PVPIN
  /* Without a pin ptxas moves the wait below (and the arrival after it)
   * ahead of the softmax, so the softmax overlaps no product of its own
   * warpgroup (notes/sm90-64x64-2026-12-02.md).  dz is 0 at run time
   * (seq_q > 0) but opaque to the compiler: a branch on it, never taken,
   * and the barrier address taking it keep the wait and the arrival after
   * the softmax. */
  const tsr_u32 dz = ((tsr_u32)p.seq_q >> 31) & (__float_as_uint(l0) ^ __float_as_uint(l1));
  if (dz) asm volatile("trap;");
#else
  const tsr_u32 dz = 0;
#endif
  tsr_wg_wait<0>();
  tsr_fence_regs<TSR_HEAD_DIM / 2>(o);
  tsr_fence_regs_u<TSR_SM90_NPF>(pf);
  if (arriver) tsr_mbar_arrive(TSR_V_EMPTY(st) + dz);
  pack_p(pf, s);
#if TSR_SM90_LATE_RESCALE
  tsr_rescale(o, a0, a1); /* the pending P V is in: O holds every tile before u */
#endif
  st = sn;
  ph = phn;
}

/* The pending tile's O += P V with nothing to overlap (stage st, phase
 * ph; a0, a1: its rows' rescale factors). */
static __device__ __forceinline__ void drain(const tsr_u32 &bars, const int &st, const tsr_u32 &ph,
                                             const tsr_u64 &dv, float *o, tsr_u32 *pf, const float &a0,
                                             const float &a1, const bool &arriver, int my_turn,
                                             int other_turn) {
  (void)my_turn, (void)other_turn;
  tsr_mbar_wait(TSR_V_FULL(st), ph);
  TSR_EDGE_BEGIN();
#if TSR_SM90_LATE_RESCALE
  (void)a0, (void)a1; /* O was rescaled at the end of the pending tile's step */
#else
  tsr_rescale(o, a0, a1);
#endif
  tsr_wg_fence();
  issue_pv(o, pf, dv, st);
  tsr_wg_commit();
  TSR_EDGE_END();
  tsr_wg_wait<0>();
  tsr_fence_regs<TSR_HEAD_DIM / 2>(o);
  tsr_fence_regs_u<TSR_SM90_NPF>(pf);
  if (arriver) tsr_mbar_arrive(TSR_V_EMPTY(st));
}

#if TSR_SM90_S2F
/* One S buffer of TSR_SM90_S2F: the s32 sums, then in place the biased
 * scores and p' (tsr_f8_bias_scores reads each word before writing it). */
union tsr_f8_sbuf {
  tsr_u32 u[TSR_BN / 2];
  float f[TSR_BN / 2];
};

/* Issue S_v = Q K_v^T into x (tile v at ring stage sv, phase pv) once K_v
 * is in; its score factors load meanwhile. */
static __device__ __forceinline__ void s2f_issue_s(const tsr_kernel_params &p, const tsr_task_rec &tk,
                                                   const tsr_u32 &bars, int it, int v, const tsr_u64 &dq,
                                                   const tsr_u64 &dk, tsr_f8_sbuf &x, const float &sqv,
                                                   const int &bh_kv, float &f0, float &f1) {
  const int sv = (it + v) % TSR_STAGES;
  const tsr_u32 pv = ((it + v) / TSR_STAGES) & 1;
  tsr_f8_key_factors(p, bh_kv, p.tiles[tk.tile_begin + v].k_tile, sqv, f0, f1);
  tsr_mbar_wait(TSR_K_FULL(sv), pv);
  tsr_wg_fence();
  issue_qk(x.u, dq, dk, sv);
  tsr_wg_commit();
}

/* Tile u of a member with P_{u-1} packed in pf (its stage st, phase ph)
 * and S_u in x: O += P_{u-1} V_{u-1} and (MORE: u + 1 < nt) S_{u+1} into
 * y are issued, S_u's softmax runs beside both, P_u is packed once the
 * P V is in, and the step ends when S_{u+1} is in.  fx0/fx1: S_u's
 * factors; fy0/fy1 get S_{u+1}'s.  Why this shape (ptxas, sm_90a): no
 * wgmma may be in flight across the loop's back edge, or reading S_u's
 * accumulators beside a later wgmma serializes every wgmma (C7514); and a
 * wgmma issued under a run-time branch between another's issue and wait
 * did too (C7513), hence MORE as a template parameter. */
template <bool MORE>
static __device__ __forceinline__ void s2f_step(
    const tsr_kernel_params &p, const tsr_task_rec &tk, const tsr_u32 &bars, int it, int u, int &st,
    tsr_u32 &ph, const tsr_u64 &dq, const tsr_u64 &dk, const tsr_u64 &dv, tsr_f8_sbuf &x, tsr_f8_sbuf &y,
    float *o, tsr_u32 *pf, const bool &arriver, const int &nt, const tsr_u32 &q_e, bool &q_held,
    const int &seg0, const int &seg1, const int &t, bool &sel0, bool &sel1, float &m0, float &m1,
    float &l0, float &l1, float &a0, float &a1, const float &sqv, const int &bh_kv, const float &fx0,
    const float &fx1, float &fy0, float &fy1) {
  const int sn = (it + u) % TSR_STAGES;
  const tsr_u32 phn = ((it + u) / TSR_STAGES) & 1;
  tsr_mbar_wait(TSR_V_FULL(st), ph);
  tsr_rescale(o, a0, a1);
  tsr_wg_fence();
  issue_pv(o, pf, dv, st);
  tsr_wg_commit();
  if (MORE) s2f_issue_s(p, tk, bars, it, u + 1, dq, dk, y, sqv, bh_kv, fy0, fy1);
  scores_in(p, u, sn, p.tiles[tk.tile_begin + u], bars, x.f, x.u, arriver, nt, q_e, q_held, seg0, seg1, t,
            sel0, sel1, m0, m1, l0, l1, a0, a1, fx0, fx1);
  tsr_wg_wait<MORE ? 1 : 0>();
  tsr_fence_regs<TSR_HEAD_DIM / 2>(o);
  tsr_fence_regs_u<TSR_SM90_NPF>(pf);
  if (arriver) tsr_mbar_arrive(TSR_V_EMPTY(st));
  pack_p(pf, x.f);
  if (MORE) {
    tsr_wg_wait<0>();
    tsr_fence_regs_u<TSR_BN / 2>(y.u);
  }
  st = sn;
  ph = phn;
}

/* consumer()'s tiles of a member with TSR_SM90_S2F (every tile active: no
 * skipping): S_0 and its softmax, S_1 issued, then the steps two tiles at
 * a time with the S buffers alternating, then the last P V.  A macro, not
 * a function: it expands where the default loop stands, as the variant
 * measured on the H200 was compiled (as a function ptxas made other code),
 * and consumer() stays within the function-length rule. */
#define TSR_S2F_STEP(MORE, U, X, Y, FX0, FX1, FY0, FY1)                                                     \
  s2f_step<MORE>(p, tk, bars, it, U, st, ph, dq, dk, dv, X, Y, o, pf, arriver, nt, q_e, q_held, seg0, seg1, t, sel0, \
                 sel1, m0, m1, l0, l1, a0, a1, sqv, bh_kv, FX0, FX1, FY0, FY1)
#define TSR_S2F_MEMBER()                                                                                  \
  {                                                                                                       \
    tsr_f8_sbuf sa, sb;                                                                                   \
    float fa0, fa1, fb0, fb1;                                                                             \
    s2f_issue_s(p, tk, bars, it, 0, dq, dk, sa, sqv, bh_kv, fa0, fa1);                                    \
    st = it % TSR_STAGES;                                                                                 \
    ph = (it / TSR_STAGES) & 1;                                                                           \
    tsr_wg_wait<0>();                                                                                     \
    tsr_fence_regs_u<TSR_BN / 2>(sa.u);                                                                   \
    scores_in(p, 0, st, p.tiles[tk.tile_begin], bars, sa.f, sa.u, arriver, nt, q_e, q_held, seg0, seg1, t, \
              sel0, sel1, m0, m1, l0, l1, a0, a1, fa0, fa1);                                              \
    pack_p(pf, sa.f);                                                                                     \
    if (nt > 1) {                                                                                         \
      s2f_issue_s(p, tk, bars, it, 1, dq, dk, sb, sqv, bh_kv, fb0, fb1);                                  \
      tsr_wg_wait<0>();                                                                                   \
      tsr_fence_regs_u<TSR_BN / 2>(sb.u);                                                                 \
    }                                                                                                     \
    for (int u = 1; u < nt; u += 2) { /* S_u in sb, then S_{u+1} in sa; nothing in flight here */         \
      if (u + 1 >= nt) {                                                                                  \
        TSR_S2F_STEP(false, u, sb, sa, fb0, fb1, fa0, fa1);                                               \
        break;                                                                                            \
      }                                                                                                   \
      TSR_S2F_STEP(true, u, sb, sa, fb0, fb1, fa0, fa1);                                                  \
      if (u + 2 >= nt) {                                                                                  \
        TSR_S2F_STEP(false, u + 1, sa, sb, fa0, fa1, fb0, fb1);                                           \
        break;                                                                                            \
      }                                                                                                   \
      TSR_S2F_STEP(true, u + 1, sa, sb, fa0, fa1, fb0, fb1);                                              \
    }                                                                                                     \
    drain(bars, st, ph, dv, o, pf, a0, a1, arriver, TSR_TURNS);                                           \
  }                                                                                                       \
  (void)s;                                                                                                \
  (void)si
#endif

/* A member's rows once its last tile is in: the row sums completed
 * across the quad, NaN for a row that selected keys whose scores were all
 * -inf, then the epilogue. */
static __device__ __forceinline__ void finish(const tsr_kernel_params &p, tsr_member_rec mb, int slot,
                                              float *o, float m0, float m1, float l0, float l1,
                                              bool sel0, bool sel1, int rl0, int t, int hq_per_kv) {
  (void)hq_per_kv;
  const float NEG_INF = -__int_as_float(0x7f800000);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#if !TSR_MEMBERSHIP
  sel0 = sel1 = true; /* nt > 0 full tiles */
#endif
#if TSR_FP8
  /* l summed p' = 256 p (tsr_f8_softmax); a power of two, exact */
  l0 *= 1.0f / TSR_F8_P_SCALE;
  l1 *= 1.0f / TSR_F8_P_SCALE;
#endif
  /* Keys selected, every score -inf: the reference's exp(-inf - -inf)
   * is NaN, not the empty row's zeros. */
  if (sel0 && m0 == NEG_INF) l0 = __int_as_float(0x7fc00000);
  if (sel1 && m1 == NEG_INF) l1 = __int_as_float(0x7fc00000);
#if TSR_FP8
  tsr_f8_scale_o(o, p, mb, hq_per_kv, t);
#endif
  tsr_epilogue(p, mb, slot, o, m0, m1, l0, l1, rl0, t);
}

/* Descriptor bases: Q panels (K-major, A operand; warpgroup c's 64 rows
 * of a Q buffer at sq), K panels (K-major, B), V panels (MN-major, B
 * transposed: LBO steps to the next 64 columns of D, SBO to the next 8 key
 * rows).  FP8 (int8 Q, K; e4m3 V): Q and K rows of D bytes, V^T rows of BN bytes, all
 * K-major. */
static __device__ __forceinline__ tsr_u64 q_desc(tsr_u32 sq, int c) {
#if TSR_FP8
  return tsr_f8_desc(sq + 64 * c * TSR_HEAD_DIM, TSR_HEAD_DIM);
#else
  return tsr_desc(sq + 64 * c * 128, 16, 1024);
#endif
}
static __device__ __forceinline__ tsr_u64 k_desc(tsr_u32 sk) {
#if TSR_FP8
  return tsr_f8_desc(sk, TSR_HEAD_DIM);
#else
  return tsr_desc(sk, 16, 1024);
#endif
}
static __device__ __forceinline__ tsr_u64 v_desc(tsr_u32 sv) {
#if TSR_FP8
  return tsr_f8_desc(sv, TSR_BN);
#else
  return tsr_desc(sv, KV_PANEL, 1024);
#endif
}

/* Three tasks a CTA (g4): the task loop's values that the tile loop does
 * not use (the task count, the task's member count and first member) are
 * read again from memory where needed rather than held across the tile
 * loop: at 160 consumer registers the d64 64x128 gather tiles otherwise
 * spilled them (16 LDL/STL, once a task; tests/gen-sass.sh rejects any).
 * The read is an asm volatile, so that the compiler neither hoists nor
 * reuses it; the planner wrote these records in an earlier launch, so the
 * non-coherent path may cache them.
 * Other variants hold them as before. */
#ifndef TSR_SM90_REREAD
#define TSR_SM90_REREAD (TSR_SM90_TPC == 3)
#endif
static __device__ __forceinline__ int reread(const int *a) {
  int v;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(a));
  return v;
}
static __device__ __forceinline__ tsr_member_rec member_again(const tsr_member_rec *r) {
  tsr_member_rec m;
  m.batch = reread(&r->batch), m.head = reread(&r->head), m.q_tile = reread(&r->q_tile), m.pad = 0;
  return m;
}
static __device__ __forceinline__ int task_count(const tsr_kernel_params &p, int n_tasks) {
#if TSR_SM90_REREAD
  return p.n_tasks_dev ? reread(p.n_tasks_dev) : p.n_tasks;
#else
  return n_tasks;
#endif
}

/* The consumer's walk over its stream's tasks (without QPF), opening the
 * loop body with the task's record tk: the static stride, or with the dyn
 * layout the producer's tasks in its order through the stream's task ring
 * (dyn_get; the record of the first member comes with the task's, mb0). */
#if TSR_SM90_DYN
#define TSR_CONSUMER_TASKS_BEGIN                                                           \
  (void)n_tasks;                                                                           \
  tsr_member_rec mb0;                                                                      \
  for (int j = 0;; ++j) {                                                                  \
    const tsr_task_rec tk = dyn_get(bars, j, arriver, mb0);                                \
    if (tk.n_members < 0) break; /* none left */
#define TSR_CONSUMER_MEMBER(i) ((i) == 0 ? mb0 : p.members[tk.member_begin + (i)])
#define TSR_CONSUMER_N_MEMBERS tk.n_members
#define TSR_CONSUMER_MEMBER_AGAIN(i, mb) (mb)
#else
#define TSR_CONSUMER_TASKS_BEGIN                                                           \
  for (int task = blockIdx.x * TPC + stream; task < task_count(p, n_tasks);                 \
       task += gridDim.x * TPC) {                                                          \
    const tsr_task_rec tk = p.tasks[task];
#if TSR_SM90_REREAD
#define TSR_CONSUMER_N_MEMBERS reread(&p.tasks[task].n_members)
#define TSR_CONSUMER_MEMBER(i) p.members[reread(&p.tasks[task].member_begin) + (i)]
/* the member's record again for its epilogue, after the tile loop */
#define TSR_CONSUMER_MEMBER_AGAIN(i, mb) member_again(p.members + reread(&p.tasks[task].member_begin) + (i))
#else
#define TSR_CONSUMER_N_MEMBERS tk.n_members
#define TSR_CONSUMER_MEMBER(i) p.members[tk.member_begin + i]
#define TSR_CONSUMER_MEMBER_AGAIN(i, mb) (mb)
#endif
#endif

/* A consumer thread: warpgroup c of stream `stream` owns query rows [64c,
 * 64c + 64) of the stream's task (c counted within the stream), this thread
 * rows rl0 and rl0 + 8.  For each member of each of the stream's tasks:
 * wait for Q, compute the member's key tiles software-pipelined (the tile
 * steps above), write its rows (finish).  q_full, q_empty: the stream's
 * one Q buffer's barriers without TSR_SM90_QPF. */
static __device__ __forceinline__ void consumer(const tsr_kernel_params &p, int n_tasks, int stream,
                                                int wg, int tid, tsr_u32 sq, tsr_u32 sk, tsr_u32 sv,
                                                tsr_u32 bars, tsr_u32 q_full, tsr_u32 q_empty,
                                                int hq_per_kv) {
  (void)q_full, (void)q_empty, (void)hq_per_kv;
  const float NEG_INF = -__int_as_float(0x7f800000);
  const int c = (wg - 1) % NC, wt = tid % 128, warp = wt / 32, lane = tid % 32, g = lane / 4,
            t = lane % 4;
  const int rl0 = 64 * c + 16 * warp + g; /* local rows rl0, rl0 + 8 */
  const bool arriver = lane == 0;
#if TSR_SM90_QPF
  const tsr_u64 dq0 = q_desc(sq, c); /* Q buffer 0 */
#else
  const tsr_u64 dq = q_desc(sq, c);
#endif
  const tsr_u64 dk = k_desc(sk), dv = v_desc(sv);
#if TSR_SM90_NC == 2 && TSR_SM90_PINGPONG
  const int my_turn = 1 + c, other_turn = 2 - c;
  if (c == 1) TSR_TURN_END(); /* warpgroup 0 goes first */
#endif
  int it = 0, q_uses = 0;
  float s[TSR_BN / 2], o[TSR_HEAD_DIM / 2]; TSR_SACC_DECL
  tsr_u32 pf[TSR_SM90_NPF];
#if TSR_SM90_QPF
  /* The next task's record, first member and (membership) its rows' segments load while this
   * task runs, so that no dependent global load sits between two tasks. */
  const int stride = gridDim.x * TPC;
  tsr_task_rec tkn;
  if (blockIdx.x * TPC + stream < n_tasks) tkn = p.tasks[blockIdx.x * TPC + stream];
  tsr_member_rec mbn;
  int sgn0 = 0, sgn1 = 0;
  bool mbn_ok = false;
  for (int task = blockIdx.x * TPC + stream; task < n_tasks; task += stride) {
    const tsr_task_rec tk = tkn;
    const bool has_next = task + stride < n_tasks;
    if (has_next) tkn = p.tasks[task + stride];
    const bool pf_ok = mbn_ok;
    mbn_ok = false;
    const int nt = tk.tile_end - tk.tile_begin;
    for (int i = 0; i < tk.n_members; ++i) {
      const tsr_member_rec mb = i == 0 && pf_ok ? mbn : p.members[tk.member_begin + i];
      const int qb = q_uses & 1;
      const tsr_u32 q_f = TSR_Q_FULL(qb), q_e = TSR_Q_EMPTY(qb), q_par = (q_uses >> 1) & 1;
      const tsr_u64 dq = dq0 + ((qb * Q_BYTES) >> 4);
#else
  TSR_CONSUMER_TASKS_BEGIN
    const int nt = tk.tile_end - tk.tile_begin;
    for (int i = 0; i < TSR_CONSUMER_N_MEMBERS; ++i) {
      const tsr_member_rec mb = TSR_CONSUMER_MEMBER(i);
      const tsr_u32 q_f = q_full, q_e = q_empty, q_par = q_uses & 1;
#endif
      const int slot = tk.partial >= 0 ? tk.partial + i : -1;
      if (nt <= 0) {
        zero_o(o);
        tsr_epilogue(p, mb, slot, o, NEG_INF, NEG_INF, 0.f, 0.f, rl0, t);
        continue;
      }
      int seg0 = 0, seg1 = 0;
#if TSR_MEMBERSHIP
#if TSR_SM90_QPF
      if (i == 0 && pf_ok) {
        seg0 = sgn0;
        seg1 = sgn1;
      } else
#endif
      row_segs(p, mb.q_tile, rl0, 8, seg0, seg1);
#endif
#if TSR_SM90_SKIP
      /* The warpgroup's rows [64c, 64c + 64) cover segments sa..sb; a tile none selects is skipped. */
      int sa, sb;
      const bool rows_valid = mb.q_tile * TSR_BM + 64 * c < p.seq_q;
      row_segs(p, mb.q_tile, 64 * c, 63, sa, sb);
      tsr_u32 act_bits = 0;
      int act_chunk = -1;
#endif
      float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f, a0 = 1.f, a1 = 1.f;
#if TSR_FP8
      const float sqv = tsr_f8_row_scale(p, mb, 64 * c);
      const int bh_kv = mb.batch * p.heads_kv + mb.head / hq_per_kv;
#endif
      bool sel0 = false, sel1 = false; /* rows rl0, rl0 + 8 selected a key (membership code) */
      zero_o(o);
      tsr_mbar_wait(q_f, q_par);
      ++q_uses;
      bool q_held = true;
      /* ring position of tile u is it + u; st/ph: the pending tile's */
      int st = 0;
      tsr_u32 ph = 0;
#if TSR_SM90_S2F
      TSR_S2F_MEMBER();
#else
      /* Tile u = pending + 1: S_u = Q K_u^T beside the pending tile's O += P V,
       * S_u's softmax beside the P V (the step as one function changed the SASS). */
      auto next_tile = [&](int u) {
        const int sn = (it + u) % TSR_STAGES;
        const tsr_u32 phn = ((it + u) / TSR_STAGES) & 1;
        const tsr_tile_rec tr = p.tiles[tk.tile_begin + u];
#if TSR_FP8
        float f0, f1;
        tsr_f8_key_factors(p, bh_kv, tr.k_tile, sqv, f0, f1);
#endif
        next_tile_issue(bars, sn, phn, st, ph, dq, dk, dv, s, TSR_SACC_ARG o, pf, a0, a1, TSR_TURNS);
        next_tile_end(p, u, st, ph, sn, phn, tr, bars, o, s, TSR_SACC_ARG pf, arriver, nt, TSR_ACT_BITS_ARG q_e, q_held, seg0,
                      seg1, t, sel0, sel1, m0, m1, l0, l1, a0, a1 TSR_F8_FACTORS_ARG);
      };
      /* Runs of active tiles are software-pipelined; a skipped tile ends the run first (drain), so
       * this warpgroup never holds a V stage while waiting on loads further ahead than the next
       * tile: holding it across a gap could starve the producer of that stage. */
      int u = 0;
      while (u < nt && !TSR_ACTIVE(u)) skip_tile(bars, it, u++, arriver);
      if (u < nt) {
        first_tile(p, tk, bars, it, u, st, ph, dq, dk, o, s, TSR_SACC_ARG pf, arriver, nt, TSR_ACT_BITS_ARG q_e,
                   q_held, seg0, seg1, t, sel0, sel1, m0, m1, l0, l1, a0, a1, TSR_F8_ARG TSR_TURNS);
#if TSR_SM90_QPF
        if (i == 0 && has_next && tkn.n_members > 0) {
          mbn = p.members[tkn.member_begin];
          mbn_ok = true;
        }
#endif
        for (;;) {
          int nx = u + 1;
          if (nx < nt && TSR_ACTIVE(nx)) {
            next_tile(nx);
            u = nx;
            continue;
          }
          drain(bars, st, ph, dv, o, pf, a0, a1, arriver, TSR_TURNS);
          while (nx < nt && !TSR_ACTIVE(nx)) skip_tile(bars, it, nx++, arriver);
          if (nx >= nt) break;
          first_tile(p, tk, bars, it, nx, st, ph, dq, dk, o, s, TSR_SACC_ARG pf, arriver, nt, TSR_ACT_BITS_ARG q_e,
                     q_held, seg0, seg1, t, sel0, sel1, m0, m1, l0, l1, a0, a1, TSR_F8_ARG TSR_TURNS);
          u = nx;
        }
      }
#endif
      if (q_held && arriver) tsr_mbar_arrive(q_e);
      it += nt;
#if TSR_SM90_QPF && TSR_MEMBERSHIP
      if (i == 0 && mbn_ok) /* the next task's first member's segments */
        row_segs(p, mbn.q_tile, rl0, 8, sgn0, sgn1);
#endif
      finish(p, TSR_CONSUMER_MEMBER_AGAIN(i, mb), slot, o, m0, m1, l0, l1, sel0, sel1, rl0, t, hq_per_kv);
    }
  }
  /* warpgroup 1's first arrival is still pending on warpgroup 0's turn
   * barrier: consume it so no barrier is left half-arrived at exit */
#if TSR_SM90_NC == 2 && TSR_SM90_PINGPONG
  if (c == 0) TSR_TURN_BEGIN();
#endif
}
#undef TSR_TURN_BEGIN
#undef TSR_TURN_END
#undef TSR_CONSUMER_TASKS_BEGIN
#undef TSR_CONSUMER_MEMBER
#undef TSR_CONSUMER_N_MEMBERS
#undef TSR_CONSUMER_MEMBER_AGAIN
#undef TSR_TURNS
#undef TSR_EDGE_BEGIN
#undef TSR_EDGE_END
#undef TSR_ACTIVE
#undef TSR_LAST_ACTIVE_ARGS
#undef TSR_ACT_BITS_PARAM
#undef TSR_ACT_BITS_ARG
#undef TSR_F8_PARAM
#undef TSR_F8_ARG
#undef TSR_F8_FACTORS_PARAM
#undef TSR_F8_FACTORS_ARG
#undef TSR_SACC
#undef TSR_SACC_DECL
#undef TSR_SACC_PARAM
#undef TSR_SACC_ARG
#undef TSR_FENCE_SACC
#undef TSR_S2F_STEP
#undef TSR_S2F_MEMBER

}  // namespace tsr90

/* ---- the kernel ------------------------------------------------------------ */

extern "C" __global__ void __launch_bounds__(TSR_THREADS, 1)
    TSR_KERNEL_NAME(const __grid_constant__ tsr_kernel_params p) {
  extern __shared__ __align__(1024) unsigned char tsr_smem_raw[];
  using namespace tsr90;
  /* 128-byte swizzle wants 1024-byte aligned panels.  Stream i: Q, K ring,
   * V ring at base + i * STREAM; its 256 bytes of barriers after all
   * streams' tiles. */
  const tsr_u32 raw = (tsr_u32)__cvta_generic_to_shared(tsr_smem_raw);
  const tsr_u32 base = (raw + 1023u) & ~1023u;
  const tsr_u32 bars0 = base + TPC * STREAM;
  const int tid = threadIdx.x;
  /* Read through a shuffle so that the compiler knows it is warp-uniform:
   * then the Q descriptors (which depend on the warpgroup) live in uniform
   * registers and each wgmma issues without an R2UR beside it. */
#if TSR_SM90_WG_UNIFORM
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
#else
  const int wg = tid / 128;
#endif
  /* the stream this thread serves: producer warp w serves stream w (warps
   * w >= TPC idle), consumer warpgroup c serves stream c / NC */
  const int stream = TPC == 1 ? 0 : wg == 0 ? (tid / 32) % TPC : (wg - 1) / NC;
  const tsr_u32 sq = base + stream * STREAM;
  const tsr_u32 sk = sq + TSR_SM90_QBUF * Q_BYTES;
  const tsr_u32 sv = sk + TSR_STAGES * KV_TILE;
  const tsr_u32 bars = bars0 + 256 * stream;
  /* the one Q buffer's barriers without TSR_SM90_QPF, for the consumer
   * (computed here, where the kernel computed them before the cut: the
   * generated code depends on it, notes/kernel-split.md) */
  const tsr_u32 q_full = bars, q_empty = bars + 8;

  if (tid == 0) init_barriers(bars0);
  __syncthreads();

  const int hq_per_kv = p.heads_q / p.heads_kv;
  /* Device-planned launches read the task count the planner wrote. */
  const int n_tasks = p.n_tasks_dev ? *p.n_tasks_dev : p.n_tasks;
  if (wg == 0) {
    /* ---- producer: one thread a stream issues its TMA copies ---- */
    /* Register budget: 24 + 2 x 240 a thread with one task (1 KiB of the
     * file to spare at 168 on entry); two tasks need more producer
     * registers (two streams' addresses) and fewer consumer ones (64-row
     * tiles).  An increase the file cannot grant blocks forever, so the
     * sums keep slack: 32 + 2 x 240 hung on the H200. */
#if TSR_SM90_TPC == 1 && TSR_SM90_DYN
    /* the task ring and the counter spill at 24: 40 + 2 x 232, the same sum */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
#elif TSR_SM90_TPC == 1
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
#elif TSR_SM90_TPC == 3
    /* 512 threads enter at 128 (the file / threads, in steps of 8) and
     * hold the whole file: 32 + 3 x 160 takes all of it back; 160 is the
     * least consumer count without spills at d128 (152 left 11 LDL/STL,
     * 144 51, before TSR_SM90_REREAD; the d64 64x128 gather tiles fit 160
     * only with it), and at 24 the producer's values live across the
     * decrease spill.  Ran on the H100 without hanging, 0 hazards under
     * racecheck (notes/sm90-g4-2026-12-07.md). */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 " TSR_SM90_STR(TSR_SM90_TPC3_PREG) ";\n");
#elif TSR_SM90_QPF
    /* the prefetched records need more: 56 + 2 x 224, the same sum */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
#else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
#endif
    if (tid % 32 == 0 && tid / 32 < TPC) producer(p, n_tasks, stream, hq_per_kv, sq, sk, sv, bars);
  } else {
    /* ---- consumers: the rest of the register file (above) ---- */
#if TSR_SM90_TPC == 1 && TSR_SM90_DYN
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
#elif TSR_SM90_TPC == 1
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
#elif TSR_SM90_TPC == 3
    asm volatile("setmaxnreg.inc.sync.aligned.u32 " TSR_SM90_STR(TSR_SM90_TPC3_CREG) ";\n");
#elif TSR_SM90_QPF
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
#else
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
#endif
    consumer(p, n_tasks, stream, wg, tid, sq, sk, sv, bars, q_full, q_empty, hq_per_kv);
  }
}
#undef TSR_K_FULL
#undef TSR_K_EMPTY
#undef TSR_V_FULL
#undef TSR_V_EMPTY
#undef TSR_Q_FULL
#undef TSR_Q_EMPTY

/*
 * sm80_emu.h: enough of CUDA to run templates/attn_sm80.cuh and merge.cuh
 * on the CPU (tests/device/sm80_emu.sh).  A development check for machines
 * without a GPU, not a simulator: each CUDA thread is a fiber of one OS
 * thread; __syncthreads is a CTA barrier; the warp instructions the kernel
 * uses (shfl.xor, ldmatrix x4 [.trans], mma.sync m16n8k16, cp.async
 * groups) are warp collectives with the PTX ISA's fragment layouts.
 * Replaces tsr_common.cuh (defines its include guard first).
 *
 * cp.async lands either at issue or only at the issuing thread's
 * cp.async.wait_group (late mode), so a read of a stage before its wait
 * and barrier sees the NaN poison left in shared memory; the fiber order
 * is round robin or seeded random.  Shared-memory addresses are
 * bounds-checked against TSR_SMEM_BYTES.
 */
#ifndef SM80_EMU_H
#define SM80_EMU_H
#define TSR_COMMON_CUH 1

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#ifndef __shared__
#define __shared__ static /* merge.cuh's block-scope arrays: one per CTA */
#endif
#define __align__(n) __attribute__((aligned(n)))

typedef unsigned short tsr_u16;
struct emu_dim3 { unsigned x, y, z; };
struct float2 { float x, y; };
static inline float2 make_float2(float x, float y) { return float2{ x, y }; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __frcp_rn(float x) { return 1.0f / x; }

/* ---- runtime (sm80_emu_kernel.cc) ---- */
extern emu_dim3 emu_block_idx, emu_grid_dim, emu_block_dim;
const emu_dim3 &emu_tid();
#define threadIdx (emu_tid())
#define blockIdx emu_block_idx
#define gridDim emu_grid_dim
#define blockDim emu_block_dim
void __syncthreads();
/* A warp collective: every lane deposits n <= 8 words and waits for its
 * warp; the last lane to arrive runs fn(in, out) once for all 32 (fn may be
 * NULL: out is then in).  Returns the 32 output slots, valid until the
 * lane's next collective.  `tag` names the instruction: lanes of one warp
 * at different instructions abort the run (divergent collectives). */
typedef uint32_t emu_slot[8];
typedef void (*emu_warp_fn)(const emu_slot *in, emu_slot *out);
const emu_slot *emu_warp_collective(const uint32_t *in, int n, int tag, emu_warp_fn fn);
int emu_lane();
/* Host address of `bytes` shared-memory bytes at addr (aborts out of bounds). */
unsigned char *emu_shared(unsigned addr, unsigned bytes, const char *what);
extern unsigned char tsr_smem[]; /* dynamic shared memory of the running CTA */
void emu_cp_async(unsigned dst, const void *src, int src_bytes);
void emu_cp_commit();
void emu_cp_wait(int n);

static inline float __shfl_xor_sync(unsigned, float v, int m)
{
  uint32_t u;
  memcpy(&u, &v, 4);
  const emu_slot *all = emu_warp_collective(&u, 1, 1, NULL);
  u = all[emu_lane() ^ m][0];
  memcpy(&v, &u, 4);
  return v;
}

static inline int __any_sync(unsigned, int pred)
{
  uint32_t u = pred != 0;
  const emu_slot *all = emu_warp_collective(&u, 1, 5, NULL);
  for (int l = 0; l < 32; l++)
    if (all[l][0]) return 1;
  return 0;
}

/* ---- tsr_common.cuh ---- */
#define TSR_NEG_INF __int_as_float(0xff800000)
#define TSR_LN2 0.69314718055994530942f

static inline float tsr_ex2(float x) { return exp2f(x); }

static inline uint16_t emu_from_float(float f)
{
#if TSR_DTYPE_BF16
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
#else
  _Float16 h = (_Float16)f;
  uint16_t r;
  memcpy(&r, &h, 2);
  return r;
#endif
}

static inline float emu_to_float(uint16_t x)
{
#if TSR_DTYPE_BF16
  uint32_t u = (uint32_t)x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
#else
  _Float16 h;
  memcpy(&h, &x, 2);
  return (float)h;
#endif
}

static inline unsigned tsr_pack2(float lo, float hi)
{
  return (unsigned)emu_from_float(lo) | ((unsigned)emu_from_float(hi) << 16);
}

static inline unsigned tsr_smem_u32(const void *p)
{
  return (unsigned)((const unsigned char *)p - tsr_smem);
}

static inline void tsr_cp_async16(unsigned dst, const void *src, int src_bytes)
{
  emu_cp_async(dst, src, src_bytes);
}
static inline void tsr_cp_async_commit() { emu_cp_commit(); }
template <int N>
static inline void tsr_cp_async_wait() { emu_cp_wait(N); }

/* ldmatrix .x4: lanes 8q .. 8q+7 give the row addresses of matrix q; lane
 * l receives of matrix q the pair (row l / 4, columns 2 (l % 4) + {0, 1}),
 * or with .trans the pair (rows 2 (l % 4) + {0, 1}, column l / 4). */
template <int TRANS>
static void emu_ldmatrix_fn(const emu_slot *in, emu_slot *out)
{
  int q, l;
  for (l = 0; l < 32; l++)
    for (q = 0; q < 4; q++) {
      uint16_t lo, hi;
      if (!TRANS) {
        const uint16_t *row = (const uint16_t *)emu_shared(in[8 * q + l / 4][0], 16, "ldmatrix");
        lo = row[2 * (l % 4)];
        hi = row[2 * (l % 4) + 1];
      } else {
        const uint16_t *r0 = (const uint16_t *)emu_shared(in[8 * q + 2 * (l % 4)][0], 16, "ldmatrix");
        const uint16_t *r1 = (const uint16_t *)emu_shared(in[8 * q + 2 * (l % 4) + 1][0], 16, "ldmatrix");
        lo = r0[l / 4];
        hi = r1[l / 4];
      }
      out[l][q] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}

static inline void emu_ldmatrix(unsigned addr, unsigned *r, int trans)
{
  uint32_t a = addr;
  const emu_slot *out;
  int q;
  if (addr % 16) {
    fprintf(stderr, "emu: ldmatrix row address %u not 16-byte aligned\n", addr);
    abort();
  }
  emu_shared(addr, 16, "ldmatrix");
  out = emu_warp_collective(&a, 1, trans ? 3 : 2, trans ? emu_ldmatrix_fn<1> : emu_ldmatrix_fn<0>);
  for (q = 0; q < 4; q++) r[q] = out[emu_lane()][q];
}

static inline void tsr_ldmatrix_x4(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3)
{
  unsigned r[4];
  emu_ldmatrix(addr, r, 0);
  r0 = r[0]; r1 = r[1]; r2 = r[2]; r3 = r[3];
}

static inline void tsr_ldmatrix_x4_trans(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3)
{
  unsigned r[4];
  emu_ldmatrix(addr, r, 1);
  r0 = r[0]; r1 = r[1]; r2 = r[2]; r3 = r[3];
}

/* mma.sync m16n8k16 row.col, fp32 accumulators (PTX ISA fragment layouts):
 * g = lane / 4, t = lane % 4;
 *   A regs 0..3: (row g, k 2t..2t+1), (row g+8, k 2t..), (row g, k 2t+8..), (row g+8, k 2t+8..)
 *   B regs 0..1: (k 2t..2t+1, col g), (k 2t+8..2t+9, col g)
 *   C 0..3:      (row g, cols 2t, 2t+1), (row g+8, cols 2t, 2t+1) */
static void emu_mma_fn(const emu_slot *in, emu_slot *out)
{
  float A[16][16], B[16][8];
  int l, e;
  for (l = 0; l < 32; l++) {
    int lg = l / 4, lt = l % 4;
    for (e = 0; e < 2; e++) {
      A[lg][2 * lt + e] = emu_to_float((uint16_t)(in[l][0] >> (16 * e)));
      A[lg + 8][2 * lt + e] = emu_to_float((uint16_t)(in[l][1] >> (16 * e)));
      A[lg][2 * lt + 8 + e] = emu_to_float((uint16_t)(in[l][2] >> (16 * e)));
      A[lg + 8][2 * lt + 8 + e] = emu_to_float((uint16_t)(in[l][3] >> (16 * e)));
      B[2 * lt + e][lg] = emu_to_float((uint16_t)(in[l][4] >> (16 * e)));
      B[2 * lt + 8 + e][lg] = emu_to_float((uint16_t)(in[l][5] >> (16 * e)));
    }
  }
  for (l = 0; l < 32; l++)
    for (e = 0; e < 4; e++) {
      int row = l / 4 + 8 * (e >> 1), col = 2 * (l % 4) + (e & 1), k;
      float c;
      double s = 0;
      for (k = 0; k < 16; k++) s += (double)A[row][k] * B[k][col];
      c = (float)s;
      memcpy(&out[l][e], &c, 4);
    }
}

/* The product A B goes through the collective; each lane adds its own C. */
static inline void tsr_mma16816(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
  uint32_t in[6] = { a[0], a[1], a[2], a[3], b0, b1 };
  const emu_slot *out = emu_warp_collective(in, 6, 4, emu_mma_fn);
  int e;
  for (e = 0; e < 4; e++) {
    float ab;
    memcpy(&ab, &out[emu_lane()][e], 4);
    c[e] += ab;
  }
}
#endif

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
 * owns BM / TSR_WARPS consecutive query rows (16 or 32).  Scores are masked
 * (keys past seq_k, and the membership bits of partial tiles) before the
 * base-2 online softmax (scale_log2 must be positive); a row whose tile has
 * no selected column leaves its running max and sum untouched.  Output is
 * written directly (o, lse) or as an unnormalised partial (part_o, part_m,
 * part_l) for the merge kernel.
 *
 * Non-finite q, k, v: NaN scores pass fmaxf (which drops them) and reach
 * the row sum through ex2, +inf scores make exp2(inf - inf) there, so the
 * main loop needs no test of its own; the epilogue keeps such a NaN sum
 * (only l == 0 means "nothing selected": zeros, lse -inf) and makes a row
 * that selected keys whose scores were all -inf NaN, as the reference
 * does (runtime/ref.c).  A split row's NaN goes to the merge as part_m NaN.
 *
 * Shared memory: Q [BM][D] + K, V [STAGES][BN][D] 16-bit elements; rows are
 * 16-byte chunks XOR-swizzled by (row & 7), so ldmatrix and cp.async touch
 * eight distinct bank groups.  Exactly tsr_variant_smem_bytes() bytes.
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
constexpr int NN = BN / 8;         /* n8 score tiles */
constexpr int ND = D / 8;          /* n8 output tiles */
constexpr int KD = D / 16;         /* k16 steps of Q K^T */
constexpr int KN = BN / 16;        /* k16 steps of P V */
constexpr int MW = BN / 32;        /* membership words a segment */
static_assert(MT >= 1 && MT * 16 * W == BM, "BM must be 16 or 32 rows a warp");
static_assert(D % 64 == 0 && BN % 32 == 0 && ST >= 2, "bad variant constants");
static_assert((BM * D + 2 * ST * BN * D) * 2 <= TSR_SMEM_BYTES, "shared memory layout exceeds TSR_SMEM_BYTES");

/* Element offset of chunk c (8 elements) of row r in a swizzled tile. */
static __device__ __forceinline__ int sw(int r, int c)
{
  return r * D + ((c ^ (r & 7)) << 3);
}

/* Copies `rows` rows of D elements (row stride `stride`) into a swizzled
 * tile of `cap` rows; rows past `rows` are zero-filled. */
template <int CAP>
static __device__ __forceinline__ void load_rows(tsr_u16 *dst, const tsr_u16 *src, long long stride,
                                                 int rows)
{
  const unsigned base = tsr_smem_u32(dst);
#pragma unroll
  for (int i = threadIdx.x; i < CAP * DC; i += NT) {
    const int r = i / DC, c = i % DC;
    const bool ok = r < rows;
    const tsr_u16 *g = ok ? src + (long long)r * stride + c * 8 : src;
    tsr_cp_async16(base + 2u * (unsigned)sw(r, c), g, ok ? 16 : 0);
  }
}
}  // namespace tsr80

extern "C" __global__ void __launch_bounds__(TSR_THREADS)
    TSR_KERNEL_NAME(const __grid_constant__ tsr_kernel_params p)
{
  using namespace tsr80;
  extern __shared__ __align__(128) unsigned char tsr_smem[];
  tsr_u16 *sQ = (tsr_u16 *)tsr_smem;
  tsr_u16 *sK = sQ + BM * D;
  tsr_u16 *sV = sK + ST * BN * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = p.heads_q / p.heads_kv;
  const int row_base = warp * MT * 16;

  /* Device-planned launches read the task count the planner wrote. */
  const int n_tasks = p.n_tasks_dev ? *p.n_tasks_dev : p.n_tasks;
  for (int t = blockIdx.x; t < n_tasks; t += gridDim.x) {
    const tsr_task_rec task = p.tasks[t];
    const int ntiles = task.tile_end - task.tile_begin;
    for (int mi = 0; mi < task.n_members; ++mi) {
      const tsr_member_rec mem = p.members[task.member_begin + mi];
      const int b = mem.batch, h = mem.head, q0 = mem.q_tile * BM;
      const int hk = h / group;
      const int qrows = min(BM, p.seq_q - q0);
      const tsr_u16 *gq = (const tsr_u16 *)p.q + b * p.q_stride[0] + h * p.q_stride[1] + q0 * p.q_stride[2];
      const tsr_u16 *gk = (const tsr_u16 *)p.k + b * p.k_stride[0] + hk * p.k_stride[1];
      const tsr_u16 *gv = (const tsr_u16 *)p.v + b * p.v_stride[0] + hk * p.v_stride[1];

      __syncthreads(); /* the previous member is done with shared memory */
      load_rows<BM>(sQ, gq, p.q_stride[2], qrows);
      tsr_cp_async_commit();
#pragma unroll
      for (int s = 0; s < ST - 1; ++s) {
        if (s < ntiles) {
          const int k0 = p.tiles[task.tile_begin + s].k_tile * BN;
          const int kr = min(BN, p.seq_k - k0);
          load_rows<BN>(sK + s * BN * D, gk + k0 * p.k_stride[2], p.k_stride[2], kr);
          load_rows<BN>(sV + s * BN * D, gv + k0 * p.v_stride[2], p.v_stride[2], kr);
        }
        tsr_cp_async_commit();
      }

      float acc[MT][ND][4];
      float m[MT][2], l[MT][2];
#if TSR_MEMBERSHIP
      int seg[MT][2];
      bool sel[MT][2]; /* the row selected some key of the task's tiles */
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
          sel[i][hh] = false;
          const int r = q0 + row_base + i * 16 + (lane >> 2) + 8 * hh;
          seg[i][hh] = r < p.seq_q ? p.qblk[r] - p.qblk[q0] : 0;
#endif
        }
      }

      for (int j = 0; j < ntiles; ++j) {
        {
          const int jn = j + ST - 1;
          if (jn < ntiles) {
            const int k0 = p.tiles[task.tile_begin + jn].k_tile * BN;
            const int kr = min(BN, p.seq_k - k0);
            const int st = jn % ST;
            load_rows<BN>(sK + st * BN * D, gk + k0 * p.k_stride[2], p.k_stride[2], kr);
            load_rows<BN>(sV + st * BN * D, gv + k0 * p.v_stride[2], p.v_stride[2], kr);
          }
          tsr_cp_async_commit();
        }
        tsr_cp_async_wait<ST - 1>();
        __syncthreads();

        const tsr_tile_rec tr = p.tiles[task.tile_begin + j];
        const int k0 = tr.k_tile * BN;
        const tsr_u16 *cK = sK + (j % ST) * BN * D;
        const tsr_u16 *cV = sV + (j % ST) * BN * D;

        /* S = Q K^T over D in k16 steps. */
        float s[MT][NN][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int n = 0; n < NN; ++n) s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
          unsigned a[MT][4];
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            const int r = row_base + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int c = kk * 2 + (lane >> 4);
            tsr_ldmatrix_x4(tsr_smem_u32(sQ + sw(r, c)), a[i][0], a[i][1], a[i][2], a[i][3]);
          }
#pragma unroll
          for (int nn = 0; nn < NN / 2; ++nn) {
            unsigned b0, b1, b2, b3;
            const int r = nn * 16 + (lane & 7) + (lane >> 4) * 8;
            const int c = kk * 2 + ((lane >> 3) & 1);
            tsr_ldmatrix_x4(tsr_smem_u32(cK + sw(r, c)), b0, b1, b2, b3);
#pragma unroll
            for (int i = 0; i < MT; ++i) {
              tsr_mma16816(s[i][2 * nn], a[i], b0, b1);
              tsr_mma16816(s[i][2 * nn + 1], a[i], b2, b3);
            }
          }
        }

        /* Mask, scale into the base-2 domain, and update the online softmax. */
#if TSR_MEMBERSHIP
        const bool partial = tr.mem >= 0;
#endif
#pragma unroll
        for (int i = 0; i < MT; ++i) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
#if TSR_MEMBERSHIP
            unsigned words[MW], any = 0u;
#pragma unroll
            for (int w = 0; w < MW; ++w) {
              words[w] = partial ? p.membership[tr.mem + seg[i][hh] * MW + w] : 0xffffffffu;
              any |= words[w];
            }
            sel[i][hh] |= any != 0u; /* per tile, not per element */
#endif
            float mx = TSR_NEG_INF;
#pragma unroll
            for (int n = 0; n < NN; ++n) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int col = n * 8 + (lane & 3) * 2 + e;
                bool ok = k0 + col < p.seq_k;
#if TSR_MEMBERSHIP
                ok = ok && ((words[n >> 2] >> (col & 31)) & 1u); /* n8 tile n lies in word n / 4 */
#endif
                const float v = ok ? s[i][n][2 * hh + e] : TSR_NEG_INF;
                s[i][n][2 * hh + e] = v;
                mx = fmaxf(mx, v);
              }
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            /* Maxima are taken on raw scores and scaled once (scale_log2 >
             * 0), so each probability is one FFMA and one EX2. */
            const float mnew = fmaxf(m[i][hh], mx * p.scale_log2);
            /* A row with nothing selected so far keeps m = -inf; subtract 0
             * then so that exp2(-inf - -inf) never makes a NaN. */
            const float msafe = mnew == TSR_NEG_INF ? 0.f : mnew;
            const float alpha = tsr_ex2(m[i][hh] - msafe);
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < NN; ++n) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float pv = tsr_ex2(fmaf(s[i][n][2 * hh + e], p.scale_log2, -msafe));
                s[i][n][2 * hh + e] = pv;
                sum += pv;
              }
            }
            l[i][hh] = l[i][hh] * alpha + sum;
            m[i][hh] = mnew;
#pragma unroll
            for (int n = 0; n < ND; ++n) {
              acc[i][n][2 * hh] *= alpha;
              acc[i][n][2 * hh + 1] *= alpha;
            }
          }
        }

        /* O += P V: P from the score registers, V^T fragments by ldmatrix.trans. */
#pragma unroll
        for (int kk = 0; kk < KN; ++kk) {
          unsigned a[MT][4];
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            a[i][0] = tsr_pack2(s[i][2 * kk][0], s[i][2 * kk][1]);
            a[i][1] = tsr_pack2(s[i][2 * kk][2], s[i][2 * kk][3]);
            a[i][2] = tsr_pack2(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
            a[i][3] = tsr_pack2(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
          }
#pragma unroll
          for (int dd = 0; dd < ND / 2; ++dd) {
            unsigned b0, b1, b2, b3;
            const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int c = dd * 2 + (lane >> 4);
            tsr_ldmatrix_x4_trans(tsr_smem_u32(cV + sw(r, c)), b0, b1, b2, b3);
#pragma unroll
            for (int i = 0; i < MT; ++i) {
              tsr_mma16816(acc[i][2 * dd], a[i], b0, b1);
              tsr_mma16816(acc[i][2 * dd + 1], a[i], b2, b3);
            }
          }
        }
        __syncthreads(); /* this stage is refilled ST-1 iterations later */
      }
      tsr_cp_async_wait<0>();

      /* Epilogue: finish the row sums across the quad, then write. */
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float lv = l[i][hh];
          lv += __shfl_xor_sync(0xffffffffu, lv, 1);
          lv += __shfl_xor_sync(0xffffffffu, lv, 2);
          const int r = row_base + i * 16 + (lane >> 2) + 8 * hh;
          const int row = q0 + r;
#if TSR_MEMBERSHIP
          const bool selected = sel[i][hh];
#else
          const bool selected = ntiles > 0; /* every tile is full */
#endif
          /* Keys selected, every score -inf: the reference's exp(-inf - -inf)
           * is NaN, not the empty row's zeros. */
          if (selected && m[i][hh] == TSR_NEG_INF) lv = __int_as_float(0x7fc00000);
          if (task.partial >= 0) {
            const long long slot = task.partial + mi;
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
            const float inv = none ? 0.f : 1.f / lv;
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
  }
}

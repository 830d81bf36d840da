/*
 * merge.cuh: combines the partial slots of split rows (tasks with
 * partial >= 0) into o and lse, for every kernel family.  Instantiated into
 * each variant's module as TSR_MERGE_NAME and launched after the attention
 * kernel on the same stream when the plan has merges.
 *
 * For merge record (b, h, q_tile, slots): per row, M = max_s m_s,
 * L = sum_s l_s 2^(m_s - M), o = sum_s o_s 2^(m_s - M) / L, and
 * lse = (M + log2 L) ln 2; a row no slot selected anything for (every
 * m_s = -inf) gets zeros and lse = -inf.  A slot whose row is NaN has
 * m_s = NaN (the kernels' epilogues): fmaxf leaves it out of M, and its
 * weight 2^(NaN - M) makes L, o and lse NaN, as the reference's row is.
 * Cost: reads n_slots x BM x D floats a record, a memory-bound pass much
 * smaller than the attention itself.
 */
#ifndef TSR_MERGE_CUH
#define TSR_MERGE_CUH

#include "tsr_common.cuh"

#define TSR_MERGE_THREADS 256

extern "C" __global__ void __launch_bounds__(TSR_MERGE_THREADS)
    TSR_MERGE_NAME(const __grid_constant__ tsr_kernel_params p)
{
  constexpr int BM = TSR_BM, D = TSR_HEAD_DIM;
  __shared__ float sM[BM], sInv[BM];
  const int n_merges = p.n_merges_dev ? *p.n_merges_dev : p.n_merges; /* device planner */
  for (int mi = blockIdx.x; mi < n_merges; mi += gridDim.x) {
    const tsr_merge_rec mr = p.merges[mi];
    const int q0 = mr.q_tile * BM;
    const int rows = min(BM, p.seq_q - q0);
    __syncthreads(); /* the previous record's readers of sM are done */
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      float M = TSR_NEG_INF, L = 0.f;
      /* Slot loops stay rolled (a record has a few slots): unrolled, their
       * remainder bookkeeping spilled on sm_100a. */
#pragma unroll 1
      for (int s = 0; s < mr.n_slots; ++s) M = fmaxf(M, p.part_m[(long long)(mr.slot_begin + s) * BM + r]);
      /* Only empty and NaN slots: exponentiate against 0, never -inf - -inf. */
      const float Ms = M == TSR_NEG_INF ? 0.f : M;
#pragma unroll 1
      for (int s = 0; s < mr.n_slots; ++s) {
        const long long k = (long long)(mr.slot_begin + s) * BM + r;
        if (p.part_m[k] != TSR_NEG_INF) L += p.part_l[k] * tsr_ex2(p.part_m[k] - Ms);
      }
      sM[r] = Ms;
      /* __frcp_rn: the correctly rounded 1 / L inline; the division's slow-path
       * subroutine spilled its return address on sm_100a. */
      sInv[r] = L == 0.f ? 0.f : __frcp_rn(L); /* NaN for a NaN row */
      if (p.lse)
        p.lse[((long long)mr.batch * p.heads_q + mr.head) * p.seq_q + q0 + r] =
            L == 0.f ? TSR_NEG_INF : (M + log2f(L)) * TSR_LN2;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < rows * (D / 2); idx += blockDim.x) {
      const int r = idx / (D / 2), d = (idx % (D / 2)) * 2;
      const float M = sM[r], inv = sInv[r];
      float o0 = 0.f, o1 = 0.f;
      /* inv == 0: every slot empty and skipped here, so the row is zeros */
#pragma unroll 1
      for (int s = 0; s < mr.n_slots; ++s) {
        const long long k = (long long)(mr.slot_begin + s) * BM + r;
        const float ms = p.part_m[k];
        if (ms == TSR_NEG_INF) continue;
        const float w = tsr_ex2(ms - M);
        const float2 v = *(const float2 *)(p.part_o + k * D + d);
        o0 += w * v.x;
        o1 += w * v.y;
      }
      unsigned short *go = (unsigned short *)p.o + mr.batch * p.o_stride[0] + mr.head * p.o_stride[1] +
                    (long long)(q0 + r) * p.o_stride[2];
      *(unsigned *)(go + d) = tsr_pack2(o0 * inv, o1 * inv);
    }
  }
}

#endif

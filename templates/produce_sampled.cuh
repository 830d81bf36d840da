/*
 * produce_sampled.cuh: Sparse VideoGen's online profile as three kernels
 * (issue 16), part of the planner module with produce_gpu.cuh (which
 * includes it), launched by runtime/produce.c tsr_produce_sampled.
 *
 * The profile: `samples` query rows of each (batch, head) attend to every
 * key three ways, densely and under two token patterns (bit planes, SVG's
 * spatial and temporal bands), and the mean squared difference of each
 * pattern's output from the dense one is the head's error for it.  The
 * torch path made five passes over samples x S weights a head; here the
 * weights never leave registers:
 *
 *   tsr_pr_sampled_<dt>_d<D>  flash-decoding over key chunks: a CTA takes
 *          64 sampled rows (four m16 tiles) against one chunk of keys, K and
 *          V tiles of 64 keys through a cp.async pipeline of 3 stages (2
 *          where shared memory is short: sm_89, sm_120 at D 128), scores
 *          and the three P V products on the tensor cores (mma.sync
 *          m16n8k16, fp32 accumulation), one online softmax (base 2) whose
 *          probabilities serve all three outputs, each pattern's masked by
 *          its bits.  Writes the chunk's unnormalised outputs, its running
 *          max and the three sums.  D = 128: eight warps, a row tile's two
 *          warps each holding half of the outputs' columns (both compute
 *          the tile's scores: three accumulators of 16 x 128 a warp would
 *          not fit in registers); D = 64: four.
 *   tsr_pr_sampled_merge   one CTA a (sampled row, batch x head), a thread a
 *          column: joins the chunks (FA2's merge) and writes the row's two
 *          squared errors summed over the columns.
 *   tsr_pr_sampled_sum     one warp a (batch x head): the rows' errors
 *          summed in a fixed order over samples x D (deterministic: the
 *          head's type is a comparison of the two).
 *
 * Numerics: the scores are fp32 sums of 16-bit products; P is rounded to
 * q's 16-bit type for the products with V while the normalisers sum it in
 * fp32 (FA2's choice); the torch path rounded the scores, the softmax and
 * the weights to q's type.  A sampled row index outside [0, tokens) makes
 * every head's errors NaN (the table is on the device; the host cannot check
 * it); NaN in q, k or v reaches the errors as NaN, as in the torch path.
 */
#ifndef TSR_PRODUCE_SAMPLED_CUH
#define TSR_PRODUCE_SAMPLED_CUH

#define TSR_SA_ROWS 64 /* sampled rows a CTA: four m16 tiles */
#define TSR_SA_BN 64   /* keys a tile */
#define TSR_NEG_INF_SA __int_as_float(0xff800000)

/* runtime/produce.c fills it (pr_sampled_p mirrors the layout); strides in
 * elements, channels contiguous. */
struct tsr_pr_sampled_p {
  const void *q, *k, *v;
  const int *rows;         /* [samples] query tokens */
  const unsigned *planes;  /* [2][samples][words]: bit j % 32 of word j / 32: key j is in the pattern */
  float *part_o;           /* [bh][groups][chunks][3][64][D] unnormalised outputs */
  float *part_ml;          /* [bh][groups][chunks][64][4]: max (log2 units), the three sums */
  float *row_err;          /* [bh][samples][2] */
  float *out;              /* [bh][2] */
  long long qsb, qsh, qss, ksb, ksh, kss, vsb, vsh, vss;
  int heads, tokens, samples, words, chunks, chunk_tiles, groups, d;
  int stages;              /* 2 or 3: the pipeline's K, V and plane stages (3 where shared memory allows) */
  float scale_log2;
};

__device__ __forceinline__ unsigned tsr_sa_smem(const void *p)
{
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

/* A value the compiler must treat as unknown, so that what is formed from it
 * is not hoisted out of the tile loop and kept live. */
__device__ __forceinline__ long long tsr_sa_opaque(long long x)
{
  asm volatile("" : "+l"(x));
  return x;
}

/* 16 bytes global to shared; n = 0 fills zeros (keys past the end, rows
 * outside the sample) */
__device__ __forceinline__ void tsr_sa_cp16(unsigned dst, const void *src, int n)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}

__device__ __forceinline__ void tsr_sa_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N> __device__ __forceinline__ void tsr_sa_wait()
{
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <bool T> __device__ __forceinline__ void tsr_sa_ldm(unsigned a, unsigned *r)
{
  if (T)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* c += a b, m16n8k16, fp32 accumulators; DT 1 fp16, 2 bf16 (produce_gpu.cuh's codes) */
template <int DT> __device__ __forceinline__ void tsr_sa_mma(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
  if (DT == 2)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int DT> __device__ __forceinline__ unsigned tsr_sa_pack(float lo, float hi)
{
  unsigned r;
  if (DT == 2) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ float tsr_sa_ex2(float x)
{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* A shared-memory row of D 16-bit elements is D / 8 chunks of 16 bytes,
 * chunk c of row r stored at c ^ (r & 7): the eight rows an ldmatrix reads
 * (and the rows a warp's copies write) fall on distinct bank groups. */
template <int D> __device__ __forceinline__ unsigned tsr_sa_at(unsigned base, int r, int c)
{
  return base + (unsigned)(r * D + ((c ^ (r & 7)) << 3)) * 2u;
}

/* The shared address of an ldmatrix x4 fragment: 16-row block blk, chunk
 * pair k (chunks 2k, 2k + 1) of a tile at `tile`.  lane_off is the lane's
 * byte offset at block 0, chunk pair 0: tsr_sa_at's for its row rl (rl & 7 =
 * lane & 7) and chunk bit cb; chunk 2k + cb then lies at lane_off ^ ((k & 3)
 * << 5) plus (k >> 2) * 128, so every fragment is an XOR and immediates from
 * one register (one address a fragment, hoisted out of the tile loop, took
 * registers that the accumulators need). */
template <int D>
__device__ __forceinline__ unsigned tsr_sa_frag(unsigned tile, unsigned lane_off, int blk, int k)
{
  return tile + (unsigned)(blk * 16 * D * 2 + ((k >> 2) << 7)) + (lane_off ^ (unsigned)((k & 3) << 5));
}

template <int D> __device__ __forceinline__ unsigned tsr_sa_lane(int rl, int cb)
{
  return (unsigned)(rl * D + ((cb ^ (rl & 7)) << 3)) * 2u;
}

/* 4 bytes global to shared (a plane's word); n = 0 fills zeros */
__device__ __forceinline__ void tsr_sa_cp4(unsigned dst, const void *src, int n)
{
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}

/* A row's two words of a pattern for the tile's 64 keys (staged in shared
 * memory at a), from the lane's first column c = 2 (lane & 3): the lane's
 * columns c + 8 n + u (n < 8, u < 2) packed as bits 2 n + u of 16 (a
 * register for both of its rows where four 64-bit words took eight). */
__device__ __forceinline__ unsigned tsr_sa_lane_bits(unsigned a, int lane)
{
  unsigned lo, hi;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(lo), "=r"(hi) : "r"(a));
  unsigned long long x = ((unsigned long long)hi << 32 | lo) >> 2 * (lane & 3) & 0x0303030303030303ull;
  x = (x | x >> 6) & 0x000f000f000f000full;
  x = (x | x >> 12) & 0x000000ff000000ffull;
  return (unsigned)(x | x >> 24) & 0xffffu;
}

template <int DT, int D> __device__ void tsr_pr_sampled(const tsr_pr_sampled_p &p)
{
  constexpr int W = 4 * (D / 64), NT = 32 * W, DC = D / 8, KS = D / 16;
  extern __shared__ __align__(16) unsigned char tsr_sa_sm[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mt = warp & 3, dh = warp >> 2; /* row tile; half of the output columns (D 128) */
  const int chunk = blockIdx.x, grp = blockIdx.y, bh = blockIdx.z;
  const int b = bh / p.heads, h = bh % p.heads;
  const int ntiles = (p.tokens + TSR_SA_BN - 1) / TSR_SA_BN;
  const int t0 = chunk * p.chunk_tiles, t1 = min(t0 + p.chunk_tiles, ntiles);
  const char *qg = (const char *)p.q + (b * p.qsb + h * p.qsh) * 2;
  const unsigned sq = tsr_sa_smem(tsr_sa_sm);
  const unsigned sk = sq + TSR_SA_ROWS * D * 2, sv = sk + p.stages * TSR_SA_BN * D * 2;
  const unsigned sb = sv + p.stages * TSR_SA_BN * D * 2; /* [stage][pattern][row][2 words] */

  for (int c = tid; c < TSR_SA_ROWS * DC; c += NT) {
    const int r = c / DC, ch = c % DC, s = grp * TSR_SA_ROWS + r;
    const int tok = s < p.samples ? __ldg(p.rows + s) : -1;
    const bool ok = tok >= 0 && tok < p.tokens;
    tsr_sa_cp16(tsr_sa_at<D>(sq, r, ch), qg + (ok ? tok * p.qss * 2 : 0) + ch * 16, ok ? 16 : 0);
  }
  /* Tile t's K and V rows into a stage, thread tid copying chunk tid % DC
   * of rows tid / DC + i RS, and the tile's words of both patterns' planes
   * for the CTA's 64 rows.  Every address is formed afresh from opaque
   * copies of the thread's and the CTA's indices: formed once, they were
   * kept live across the tile loop (64-bit each) and spilled (23-34
   * LDL/STL). */
  constexpr int RS = NT / DC;
  auto load = [&](int t, int stage) {
    const int me = (int)tsr_sa_opaque(threadIdx.x), z = (int)tsr_sa_opaque(blockIdx.z);
    const int r0 = me / DC, c0 = me % DC, key0 = t * TSR_SA_BN + r0, zb = z / p.heads, zh = z % p.heads;
    const char *kp = (const char *)p.k + (zb * p.ksb + zh * p.ksh + (long long)key0 * p.kss) * 2 + c0 * 16;
    const char *vp = (const char *)p.v + (zb * p.vsb + zh * p.vsh + (long long)key0 * p.vss) * 2 + c0 * 16;
    const unsigned dk = tsr_sa_at<D>(sk + stage * TSR_SA_BN * D * 2, r0, c0);
    const unsigned dv = tsr_sa_at<D>(sv + stage * TSR_SA_BN * D * 2, r0, c0);
#pragma unroll
    for (int i = 0; i < TSR_SA_BN / RS; i++) {
      const bool ok = key0 + i * RS < p.tokens;
      tsr_sa_cp16(dk + i * RS * D * 2, ok ? kp : p.k, ok ? 16 : 0);
      tsr_sa_cp16(dv + i * RS * D * 2, ok ? vp : p.v, ok ? 16 : 0);
      kp += p.kss * 2 * RS;
      vp += p.vss * 2 * RS;
    }
#pragma unroll
    for (int k = 0; k < 2 * TSR_SA_ROWS * 2 / NT; k++) {
      const int c = me + k * NT, pl = c / (2 * TSR_SA_ROWS), r = (c / 2) % TSR_SA_ROWS, s = grp * TSR_SA_ROWS + r;
      const int word = 2 * t + (c & 1);
      const bool ok = s < p.samples && word < p.words;
      tsr_sa_cp4(sb + (unsigned)(stage * 2 * TSR_SA_ROWS * 2 + c) * 4u,
                 ok ? p.planes + ((long long)pl * p.samples + s) * p.words + word : p.planes, ok ? 4 : 0);
    }
  };
  /* stages - 1 tiles ahead; each iteration loads tile t + stages - 1 into
   * the stage tile t - 1 used, once every warp is past it */
  for (int i = 0; i < p.stages - 1; i++) {
    if (t0 + i < t1) load(t0 + i, i);
    tsr_sa_commit();
  }

  /* this thread's rows g and g + 8 of its tile; its columns 2 (lane & 3) + {0, 1} of each n8 tile */
  const int g = lane >> 2;
  float o[3][4][2][4]; /* [dense, pattern 0, 1][pair of n8 tiles][tile][fragment] */
  float m[2] = {TSR_NEG_INF_SA, TSR_NEG_INF_SA}, l[3][2] = {{0.f, 0.f}, {0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int a = 0; a < 3; a++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 8; e++) o[a][j][e >> 2][e & 3] = 0.f;

  /* Q's fragments (A of m16 x k16: matrices (rows 0-7 | 8-15) x (cols 0-7 |
   * 8-15)) are read from shared memory at each tile, not kept: their 16 or
   * 32 registers are what the accumulators need (kept, they spilled). */
  const unsigned q_off = tsr_sa_lane<D>(((lane >> 3) & 1) * 8 + (lane & 7), lane >> 4);
  const unsigned k_off = tsr_sa_lane<D>((lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1);
  const unsigned v_off = tsr_sa_lane<D>(lane & 15, lane >> 4);

  int stage = 0;
#pragma unroll 1 /* one tile's registers live at a time */
  for (int t = t0; t < t1; t++) {
    const unsigned st = (unsigned)stage * TSR_SA_BN * D * 2;
    /* tile t's group (q's with the first) done: all but the newest
     * stages - 2 (tiles t + 1 .. t + stages - 2, maybe empty) */
    if (p.stages == 3) tsr_sa_wait<1>();
    else tsr_sa_wait<0>();
    __syncthreads(); /* tile t visible to all; every warp done with tile t - 1's stage */
    {
      const int ahead = stage + p.stages - 1;
      if (t + p.stages - 1 < t1) load(t + p.stages - 1, ahead >= p.stages ? ahead - p.stages : ahead);
      tsr_sa_commit();
    }
    unsigned bits[2]; /* [pattern]: bit 16 i + 2 n + u: row g + 8 i, column 8 n + 2 (lane & 3) + u */
#pragma unroll
    for (int pl = 0; pl < 2; pl++) {
      const unsigned w = sb + (unsigned)(((stage * 2 + pl) * TSR_SA_ROWS + 16 * mt + g) * 8);
      bits[pl] = tsr_sa_lane_bits(w, lane) | tsr_sa_lane_bits(w + 64, lane) << 16;
    }

    /* S = Q K^T, 16 x 64 a warp: K rows are the B operand's columns as stored */
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
      unsigned qa[4];
      tsr_sa_ldm<false>(tsr_sa_frag<D>(sq, q_off, mt, ks), qa);
#pragma unroll
      for (int np = 0; np < 4; np++) {
        unsigned r[4];
        tsr_sa_ldm<false>(tsr_sa_frag<D>(sk + st, k_off, np, ks), r);
        tsr_sa_mma<DT>(s[2 * np], qa, r[0], r[1]);
        tsr_sa_mma<DT>(s[2 * np + 1], qa, r[2], r[3]);
      }
    }
    if ((t + 1) * TSR_SA_BN > p.tokens) {
#pragma unroll
      for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          if (t * TSR_SA_BN + n * 8 + 2 * (lane & 3) + (e & 1) >= p.tokens) s[n][e] = TSR_NEG_INF_SA;
    }

    /* one online softmax for the three outputs (base 2, the scale folded in) */
    float alpha[2], mb[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float x = m[i];
#pragma unroll
      for (int n = 0; n < 8; n++) x = fmaxf(x, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
      x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
      x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
      alpha[i] = tsr_sa_ex2((m[i] - x) * p.scale_log2);
      m[i] = x;
      mb[i] = x * p.scale_log2;
#pragma unroll
      for (int a = 0; a < 3; a++) l[a][i] *= alpha[i];
    }
#pragma unroll
    for (int a = 0; a < 3; a++)
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 8; e++) o[a][j][e >> 2][e & 3] *= alpha[(e & 3) >> 1];
    /* P in q's 16-bit type, two keys a register ([n8 tile][row g, g + 8]):
     * half the registers of the fp32 scores through the products with V */
    unsigned pk[8][2];
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
      for (int i = 0; i < 2; i++) {
        float pr[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
          const int bit = 16 * i + 2 * n + u;
          pr[u] = tsr_sa_ex2(fmaf(s[n][2 * i + u], p.scale_log2, -mb[i]));
          l[0][i] += pr[u];
          l[1][i] += (bits[0] >> bit) & 1 ? pr[u] : 0.f;
          l[2][i] += (bits[1] >> bit) & 1 ? pr[u] : 0.f;
        }
        pk[n][i] = tsr_sa_pack<DT>(pr[0], pr[1]);
      }

    /* O_a += P_a V, k16 steps of 16 keys; V rows are the B operand's k.  A
     * pattern's P is the dense one with the keys outside it zeroed (a zero
     * rounds to itself: the same as rounding the masked fp32 values). */
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
      unsigned pa[3][4];
#pragma unroll
      for (int f = 0; f < 4; f++) {
        /* A fragment f: rows g (f even) or g + 8, keys 16 kk + 8 (f >> 1) + 2 (lane & 3) + {0, 1} */
        const int n = 2 * kk + (f >> 1), i = f & 1;
        pa[0][f] = pk[n][i];
#pragma unroll
        for (int a = 1; a < 3; a++) {
          const unsigned w = bits[a - 1] >> (16 * i + 2 * n);
          pa[a][f] = pk[n][i] & ((w & 1) * 0xffffu | (w & 2) * 0x7fff8000u);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; j++) {
        unsigned r[4];
        tsr_sa_ldm<true>(tsr_sa_frag<D>(sv + st, v_off, kk, dh * 4 + j), r);
#pragma unroll
        for (int a = 0; a < 3; a++) {
          tsr_sa_mma<DT>(o[a][j][0], pa[a], r[0], r[1]);
          tsr_sa_mma<DT>(o[a][j][1], pa[a], r[2], r[3]);
        }
      }
    }
    stage = stage + 1 == p.stages ? 0 : stage + 1;
  }
  tsr_sa_wait<0>();

  const long long part = ((long long)bh * p.groups + grp) * p.chunks + chunk;
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = 16 * mt + g + 8 * i;
#pragma unroll
    for (int a = 0; a < 3; a++) {
      l[a][i] += __shfl_xor_sync(0xffffffffu, l[a][i], 1);
      l[a][i] += __shfl_xor_sync(0xffffffffu, l[a][i], 2);
      float *po = p.part_o + ((part * 3 + a) * TSR_SA_ROWS + r) * D + dh * 64 + 2 * (lane & 3);
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int u = 0; u < 2; u++)
          *(float2 *)(po + 16 * j + 8 * u) = make_float2(o[a][j][u][2 * i], o[a][j][u][2 * i + 1]);
    }
    if (dh == 0 && (lane & 3) == 0)
      *(float4 *)(p.part_ml + (part * TSR_SA_ROWS + r) * 4) = make_float4(m[i] * p.scale_log2, l[0][i], l[1][i], l[2][i]);
  }
}

/* One CTA a (sampled row blockIdx.x, batch x head blockIdx.y), thread c a
 * column (blockDim.x = D): the chunks joined, each output normalised, and
 * the row's squared differences from the dense output summed. */
__device__ void tsr_pr_sampled_merge_row(const tsr_pr_sampled_p &p)
{
  __shared__ float red[2][8];
  const int s = blockIdx.x, bh = blockIdx.y, c = threadIdx.x, grp = s / TSR_SA_ROWS, r = s % TSR_SA_ROWS;
  const long long part0 = ((long long)bh * p.groups + grp) * p.chunks;
  float mx = TSR_NEG_INF_SA;
  for (int k = 0; k < p.chunks; k++) mx = fmaxf(mx, __ldg(p.part_ml + ((part0 + k) * TSR_SA_ROWS + r) * 4));
  float lsum[3] = {0.f, 0.f, 0.f}, osum[3] = {0.f, 0.f, 0.f};
  for (int k = 0; k < p.chunks; k++) {
    const float4 ml = __ldg((const float4 *)(p.part_ml + ((part0 + k) * TSR_SA_ROWS + r) * 4));
    const float w = tsr_sa_ex2(ml.x - mx);
    lsum[0] += w * ml.y, lsum[1] += w * ml.z, lsum[2] += w * ml.w;
#pragma unroll
    for (int a = 0; a < 3; a++) osum[a] += w * __ldg(p.part_o + (((part0 + k) * 3 + a) * TSR_SA_ROWS + r) * p.d + c);
  }
  const float od = osum[0] / lsum[0], e0 = osum[1] / lsum[1] - od, e1 = osum[2] / lsum[2] - od;
  float x = e0 * e0, y = e1 * e1;
  for (int o = 16; o; o >>= 1) {
    x += __shfl_xor_sync(0xffffffffu, x, o);
    y += __shfl_xor_sync(0xffffffffu, y, o);
  }
  if ((c & 31) == 0) red[0][c >> 5] = x, red[1][c >> 5] = y;
  __syncthreads();
  if (c == 0) {
    const int tok = __ldg(p.rows + s);
    const bool bad = tok < 0 || tok >= p.tokens;
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) x += red[0][w], y += red[1][w];
    p.row_err[((long long)bh * p.samples + s) * 2] = bad ? __int_as_float(0x7fc00000) : x;
    p.row_err[((long long)bh * p.samples + s) * 2 + 1] = bad ? __int_as_float(0x7fc00000) : y;
  }
}

/* One warp a batch x head (blockIdx.x): the mean over samples x D, lane i
 * summing rows i, i + 32, ... and the lanes joined in a fixed tree. */
__device__ void tsr_pr_sampled_sum_rows(const tsr_pr_sampled_p &p)
{
  const int bh = blockIdx.x, lane = threadIdx.x;
  float x = 0.f, y = 0.f;
  for (int s = lane; s < p.samples; s += 32) {
    x += p.row_err[((long long)bh * p.samples + s) * 2];
    y += p.row_err[((long long)bh * p.samples + s) * 2 + 1];
  }
  for (int o = 16; o; o >>= 1) {
    x += __shfl_xor_sync(0xffffffffu, x, o);
    y += __shfl_xor_sync(0xffffffffu, y, o);
  }
  if (lane == 0) {
    const float n = (float)p.samples * (float)p.d;
    p.out[2 * bh] = x / n;
    p.out[2 * bh + 1] = y / n;
  }
}

/* Eight warps at D 128 hold ~220-245 registers a thread (three accumulators
 * of 16 x 64, a tile's scores and their 16-bit copies): one CTA an SM, their
 * registers' limit before shared memory's (115 KiB at 3 stages).  Four warps
 * at D 64: two. */
#define TSR_PR_SAMPLED(name, DT, D, B)                                                  \
  extern "C" __global__ void __launch_bounds__(32 * 4 * (D / 64), B) name(tsr_pr_sampled_p p) \
  {                                                                                     \
    tsr_pr_sampled<DT, D>(p);                                                           \
  }
TSR_PR_SAMPLED(tsr_pr_sampled_f16_d64, 1, 64, 2)
TSR_PR_SAMPLED(tsr_pr_sampled_bf16_d64, 2, 64, 2)
TSR_PR_SAMPLED(tsr_pr_sampled_f16_d128, 1, 128, 1)
TSR_PR_SAMPLED(tsr_pr_sampled_bf16_d128, 2, 128, 1)
extern "C" __global__ void __launch_bounds__(128) tsr_pr_sampled_merge(tsr_pr_sampled_p p)
{
  tsr_pr_sampled_merge_row(p);
}
extern "C" __global__ void __launch_bounds__(32) tsr_pr_sampled_sum(tsr_pr_sampled_p p)
{
  tsr_pr_sampled_sum_rows(p);
}

#endif

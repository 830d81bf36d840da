/*
 * produce_gpu.cuh: the fused stages of tessera.methods' mask producers
 * (issue 16), compiled into the planner module (<arch>/tsr_plan.cubin) by
 * tessera-gen, launched by runtime/produce.c on the caller's stream.  No
 * host synchronisation, nothing allocated: a CUDA graph captures them.
 *
 *   tsr_pr_pool_<dt>_v<n>  mean of x over each tile of a 3-D token grid
 *          (boundary tiles ragged), one CTA a (tile, head, batch); with
 *          sq != 0 also the tile's mean squared norm (SpargeAttn's
 *          self-similarity).  One read of x, the float32 (float64 for f64)
 *          means written: what the torch path did in ~10 reductions and
 *          joins.  v<n>: n elements a 16-byte load, v1 the scalar path.
 *          Optionally a second tensor (k beside q) in the same launch, and
 *          tokens already in tile order (runs of equal tile sizes).
 *   tsr_pr_pool_<dt>_v<n>_w<sq>  the same, one warp a tile (the automatic
 *          kernel since branch s5-i16; the CTA one is kept to compare).
 *   tsr_pr_select_<acc>_v<n>  pooled scores softmax(pq pk^T * scale) per row
 *          and the corpus's rule on them, written as a byte mask: the top k
 *          of each row (ties to the lower index, tsr_corpus_topk), or the CDF
 *          rule (the fewest in decreasing order reaching tau of the row's
 *          sum, at least min_keep; tsr_corpus_cdf).  `rows` query rows a CTA,
 *          up to 16 (32 in the _h2 kernels; their pooled q in shared memory,
 *          their scores after them): in float32 with d % 16 == 0 the scores
 *          are m16 tiles on the tensor cores (three TF32 products a term:
 *          float32 accuracy, not a float32 sum's bits), else one FMA chain a
 *          score (float64, other d); each key row is read once a CTA.  The
 *          top k is exact, not a sort: the k-th largest key by an 8-bit radix
 *          select (_h and _h2 kernels, the automatic ones) or a bitwise
 *          search, then the ties at it kept in index order.  Keys: float64, the
 *          probabilities' bits (non-negative floats order as their bits);
 *          float32, the scores' order-preserving bits (softmax is monotone:
 *          the same top k but where float32's exp would round distinct scores
 *          to one probability).  The CDF rule is the top K for the K it
 *          implies (its kept set is a prefix of the same order): a bitwise
 *          search for the probability where the sum of those at or above it
 *          first reaches tau * sum.
 *   tsr_pr_sampled_*  SVG's online profile (produce_sampled.cuh, included
 *          at the end of this file: the same module, its own helpers).
 *
 * Why fused: per Wan 480p layer the torch path of VSA took 0.58 ms (two
 * reductions, a 624-wide sort of 7,488 rows, ~20 small kernels), against a
 * budget of ~0.16 ms (5% of its attention).
 */
#ifndef TSR_PRODUCE_GPU_CUH
#define TSR_PRODUCE_GPU_CUH

#define TSR_PR_THREADS 256

/* The pooling's parameters (runtime/produce.c fills them; strides in
 * elements, the channel stride 1). */
struct tsr_pr_pool_p {
  const void *x;
  void *out, *sq;
  long long sb, sh, ss;
  int heads, d;
  int gt, gh, gw, ct, ch, cw, nh, nw;
  /* the second tensor (x2 != 0: CTAs z >= batch) and the runs of tiles
   * already in tile order (nrun > 0), as tsr_pool_args */
  const void *x2;
  void *out2, *sq2;
  long long sb2, sh2, ss2;
  int heads2, batch, nrun, run_tiles[8], run_size[8];
  int ntiles; /* the warp kernels: tiles (gridDim.x covers them 8 a CTA) */
  const int *order; /* 0, or out's tile i is the grid's raster tile order[i] (nrun == 0) */
};

struct tsr_pr_select_p {
  const void *pq, *pk;
  unsigned char *out;
  int heads, kv_heads, nq, nk, d, rows, rule, min_keep;
  int ls; /* a row's stride in the scores' shared memory (runtime/produce.c) */
  long long k;
  double scale, tau;
};

/* ---- element loads ------------------------------------------------------ */

__device__ __forceinline__ float tsr_pr_bf16(unsigned int h) { return __uint_as_float(h << 16); }
__device__ __forceinline__ float tsr_pr_f16(unsigned int h)
{
  float f;
  unsigned short s = (unsigned short)h;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(s));
  return f;
}

/* DT: 0 float32, 1 fp16, 2 bf16, 3 float64.  Loads V elements at p (16-byte
 * aligned when V > 1) into a[] as the accumulation type. */
template <int DT> struct tsr_pr_t {
  typedef float acc;
  enum { SIZE = 2 };
};
template <> struct tsr_pr_t<0> {
  typedef float acc;
  enum { SIZE = 4 };
};
template <> struct tsr_pr_t<3> {
  typedef double acc;
  enum { SIZE = 8 };
};

/* The elements of one 16-byte piece u (V of them) as the accumulation type. */
template <int DT, int V>
__device__ __forceinline__ void tsr_pr_unpack(uint4 u, typename tsr_pr_t<DT>::acc *a)
{
  unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (DT == 0) a[i] = __uint_as_float(w[i]);
    else if (DT == 1) {
      a[2 * i] = tsr_pr_f16(w[i] & 0xffffu);
      a[2 * i + 1] = tsr_pr_f16(w[i] >> 16);
    } else if (DT == 2) {
      a[2 * i] = tsr_pr_bf16(w[i] & 0xffffu);
      a[2 * i + 1] = tsr_pr_bf16(w[i] >> 16);
    } else if (i < 2) {
      a[i] = __hiloint2double((int)w[2 * i + 1], (int)w[2 * i]);
    }
  }
}

template <int DT, int V>
__device__ __forceinline__ void tsr_pr_load(const char *p, typename tsr_pr_t<DT>::acc *a)
{
  if (V == 1) {
    if (DT == 0) a[0] = *(const float *)p;
    else if (DT == 1) a[0] = tsr_pr_f16(*(const unsigned short *)p);
    else if (DT == 2) a[0] = tsr_pr_bf16(*(const unsigned short *)p);
    else a[0] = *(const double *)p;
    return;
  }
  tsr_pr_unpack<DT, V>(__ldg((const uint4 *)p), a);
}

__device__ __forceinline__ float tsr_pr_exp(float x) { return expf(x); }
__device__ __forceinline__ double tsr_pr_exp(double x) { return exp(x); }
__device__ __forceinline__ float tsr_pr_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double tsr_pr_max(double a, double b) { return fmax(a, b); }

template <typename A> __device__ __forceinline__ A tsr_pr_warp_sum(A v)
{
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* ---- pooling --------------------------------------------------------------- */

/* Where tile `tile` lies: with runs (p.nrun > 0: the cube order, tiles of one
 * size contiguous), its first token `start` and its tokens in lw (lt = lh =
 * 1); else its corner (t0, h0, w0) in the grid and its extents, ragged at the
 * grid's far faces. */
__device__ __forceinline__ void tsr_pr_tile_at(const tsr_pr_pool_p &p, int tile, int &t0, int &h0, int &w0,
                                               int &lt, int &lh, int &lw, long long &start)
{
  t0 = h0 = w0 = 0;
  lt = lh = lw = 1;
  start = 0;
  if (p.nrun > 0) {
    int t = tile, r = 0;
    for (; r < p.nrun - 1 && t >= p.run_tiles[r]; r++) {
      start += (long long)p.run_tiles[r] * p.run_size[r];
      t -= p.run_tiles[r];
    }
    start += (long long)t * p.run_size[r];
    lw = p.run_size[r];
  } else {
    const int nt_hw = p.nh * p.nw;
    if (p.order) {
      tile = p.order[tile];
      /* outside the grid: no tokens, NaN means (the host cannot check it) */
      if (tile < 0 || tile >= p.ntiles) {
        lt = lh = lw = 0;
        return;
      }
    }
    t0 = tile / nt_hw * p.ct, h0 = tile / p.nw % p.nh * p.ch, w0 = tile % p.nw * p.cw;
    lt = min(p.ct, p.gt - t0), lh = min(p.ch, p.gh - h0), lw = min(p.cw, p.gw - w0);
  }
}

/* One CTA: the tile blockIdx.x of head blockIdx.y, batch blockIdx.z.  When a
 * row has fewer than TSR_PR_THREADS vectors, P = threads / vectors rows are
 * read at once and their partial sums joined in shared memory. */
template <int DT, int V> __device__ void tsr_pr_pool(const tsr_pr_pool_p &p)
{
  typedef typename tsr_pr_t<DT>::acc A;
  __shared__ A part[TSR_PR_THREADS * V];
  __shared__ A sqw[TSR_PR_THREADS / 32];
  __shared__ int tok[TSR_PR_THREADS];
  const int tid = threadIdx.x, tile = blockIdx.x, head = blockIdx.y;
  /* CTAs z >= batch pool the second tensor (its heads may be fewer: GQA) */
  const int two = p.x2 && (int)blockIdx.z >= p.batch, b = two ? blockIdx.z - p.batch : blockIdx.z;
  const int heads = two ? p.heads2 : p.heads;
  if (head >= heads) return; /* the whole CTA, before any barrier */
  int t0, h0, w0, lt, lh, lw;
  long long start;
  tsr_pr_tile_at(p, tile, t0, h0, w0, lt, lh, lw, start);
  const int n = lt * lh * lw, nvec = p.d / V;
  const long long ss = two ? p.ss2 : p.ss;
  const char *base = (const char *)(two ? p.x2 : p.x) +
                     (b * (two ? p.sb2 : p.sb) + head * (two ? p.sh2 : p.sh)) * (long long)tsr_pr_t<DT>::SIZE;
  const long long ntiles = (long long)gridDim.x;
  A *out = (A *)(two ? p.out2 : p.out) + (((long long)b * heads + head) * ntiles + tile) * p.d;
  A *sqo = (A *)(two ? p.sq2 : p.sq);
  const int P = nvec >= TSR_PR_THREADS ? 1 : TSR_PR_THREADS / nvec;
  A sq = 0;
  for (int c0 = 0; c0 < nvec; c0 += TSR_PR_THREADS) {
    const int cv = P == 1 ? c0 + tid : tid % nvec, rp = P == 1 ? 0 : tid / nvec;
    A acc[V];
#pragma unroll
    for (int e = 0; e < V; e++) acc[e] = 0;
    /* the tile's tokens in chunks of TSR_PR_THREADS: each chunk's token
     * indices computed once (one thread a token) into shared memory, so the
     * loads' loop does no division */
    for (int r0 = 0; r0 < n; r0 += TSR_PR_THREADS) {
      const int m = min(TSR_PR_THREADS, n - r0);
      if (p.nrun <= 0) { /* (uniform across the CTA) runs: the tokens are consecutive */
        __syncthreads();
        if (tid < m) {
          const int r = r0 + tid, rr = r / lw;
          tok[tid] = ((t0 + rr / lh) * p.gh + h0 + rr % lh) * p.gw + w0 + r % lw;
        }
        __syncthreads();
      }
      if (cv < nvec && rp < P) {
#pragma unroll 4
        for (int r = rp; r < m; r += P) {
          A a[V];
          const long long ti = p.nrun > 0 ? start + r0 + r : (long long)tok[r];
          tsr_pr_load<DT, V>(base + (ti * ss + (long long)cv * V) * tsr_pr_t<DT>::SIZE, a);
#pragma unroll
          for (int e = 0; e < V; e++) {
            acc[e] += a[e];
            sq += a[e] * a[e];
          }
        }
      }
    }
    if (P == 1) {
      if (cv < nvec)
#pragma unroll
        for (int e = 0; e < V; e++) out[cv * V + e] = acc[e] / (A)n;
    } else {
      if (rp < P)
#pragma unroll
        for (int e = 0; e < V; e++) part[rp * p.d + cv * V + e] = acc[e];
      __syncthreads();
      for (int c = tid; c < p.d; c += TSR_PR_THREADS) {
        A s = 0;
        for (int i = 0; i < P; i++) s += part[i * p.d + c];
        out[c] = s / (A)n;
      }
    }
  }
  if (!sqo) return;
  sq = tsr_pr_warp_sum(sq);
  if ((tid & 31) == 0) sqw[tid >> 5] = sq;
  __syncthreads();
  if (tid == 0) {
    A s = 0;
    for (int i = 0; i < TSR_PR_THREADS / 32; i++) s += sqw[i];
    sqo[((long long)b * heads + head) * ntiles + tile] = s / (A)n;
  }
}

/* Four CTAs an SM (64 registers) on sm_8x and sm_90a; on sm_100a and sm_120
 * ptxas spilled the float32 and float64 kernels at 64 (gen-sass), so two
 * there (up to 128). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define TSR_PR_POOL_BOUNDS __launch_bounds__(TSR_PR_THREADS, 2)
#else
#define TSR_PR_POOL_BOUNDS __launch_bounds__(TSR_PR_THREADS, 4)
#endif
#define TSR_PR_POOL(name, DT, V)                                                        \
  extern "C" __global__ void TSR_PR_POOL_BOUNDS name(tsr_pr_pool_p p)                   \
  {                                                                                     \
    tsr_pr_pool<DT, V>(p);                                                              \
  }
TSR_PR_POOL(tsr_pr_pool_f32_v1, 0, 1)
TSR_PR_POOL(tsr_pr_pool_f32_v4, 0, 4)
TSR_PR_POOL(tsr_pr_pool_f16_v1, 1, 1)
TSR_PR_POOL(tsr_pr_pool_f16_v8, 1, 8)
TSR_PR_POOL(tsr_pr_pool_bf16_v1, 2, 1)
TSR_PR_POOL(tsr_pr_pool_bf16_v8, 2, 8)
TSR_PR_POOL(tsr_pr_pool_f64_v1, 3, 1)
TSR_PR_POOL(tsr_pr_pool_f64_v2, 3, 2)

/* Rows of 16-byte loads a lane has in flight in tsr_pr_pool_w. */
#define TSR_PR_POOL_BATCH 4

/* One row's V elements into the sums (and, SQ, their squares). */
template <typename A, int V, int SQ> __device__ __forceinline__ void tsr_pr_add(A *acc, A &sq, const A *a)
{
#pragma unroll
  for (int e = 0; e < V; e++) {
    acc[e] += a[e];
    if (SQ) sq += a[e] * a[e];
  }
}

/* One warp a tile (8 a CTA), no shared memory, no barrier.  The CTA kernel
 * above, on the H200 at Wan 480p (VSA's 64-token cubes, q and k in one
 * launch): 41% of DRAM bandwidth and 54% of the SM's issue slots, for a CTA
 * of 256 threads doing 4 loads each, then a shared-memory join; and the
 * squares summed whether asked for or not.  Here each lane owns one 16-byte
 * piece of a row (G = 32 / pieces row groups a warp when that divides 32,
 * else one group looping over the pieces), each chunk of 32 rows' token
 * offsets is computed once (a lane a row, one division chain) and
 * broadcast by shuffle, the groups' sums joined by shuffles, and SQ picks
 * whether the squares are summed.  Sums in another order than the CTA
 * kernel's: the same means within float32 rounding, not bit for bit. */
template <int DT, int V, int SQ> __device__ void tsr_pr_pool_w(const tsr_pr_pool_p &p)
{
  typedef typename tsr_pr_t<DT>::acc A;
  const int lane = threadIdx.x & 31, tile = blockIdx.x * (TSR_PR_THREADS / 32) + (threadIdx.x >> 5);
  const int head = blockIdx.y;
  const int two = p.x2 && (int)blockIdx.z >= p.batch, b = two ? blockIdx.z - p.batch : blockIdx.z;
  const int heads = two ? p.heads2 : p.heads;
  if (head >= heads || tile >= p.ntiles) return; /* the whole warp */
  int t0, h0, w0, lt, lh, lw;
  long long start;
  tsr_pr_tile_at(p, tile, t0, h0, w0, lt, lh, lw, start);
  const int n = lt * lh * lw, nvec = p.d / V;
  const int G = nvec < 32 && 32 % nvec == 0 ? 32 / nvec : 1, rg = G > 1 ? lane / nvec : 0;
  const long long ss = two ? p.ss2 : p.ss;
  const char *base = (const char *)(two ? p.x2 : p.x) +
                     (b * (two ? p.sb2 : p.sb) + head * (two ? p.sh2 : p.sh)) * (long long)tsr_pr_t<DT>::SIZE;
  A *out = (A *)(two ? p.out2 : p.out) + (((long long)b * heads + head) * p.ntiles + tile) * p.d;
  A *sqo = (A *)(two ? p.sq2 : p.sq);
  A sq = 0;
  for (int c0 = 0; c0 < nvec; c0 += G > 1 ? nvec : 32) {
    const int cv = G > 1 ? lane % nvec : c0 + lane, ok = cv < nvec;
    A acc[V];
#pragma unroll
    for (int e = 0; e < V; e++) acc[e] = 0;
    for (int r0 = 0; r0 < n; r0 += 32) {
      const int m = min(32, n - r0);
      long long tok = 0; /* token of row r0 + lane */
      if (lane < m) {
        const int r = r0 + lane, rr = r / lw;
        tok = p.nrun > 0 ? start + r : (long long)((t0 + rr / lh) * p.gh + h0 + rr % lh) * p.gw + w0 + r % lw;
      }
      const char *pc = base + (long long)cv * V * tsr_pr_t<DT>::SIZE;
      int r = 0;
      /* Whole batches: every load of the batch issued before the first
       * add.  The loop below alone (a load under `if`, its adds right
       * after) kept one load a warp in flight: 0.078 ms for Wan 480p's q
       * and k in the cube order on the H200 (2.6 TB/s, about 32 warps an
       * SM x 512 bytes at DRAM latency); 0.061 ms batched.  Lanes past the
       * row (ok == 0) load its first piece and add nothing.  Same adds in
       * the same order.  4 rows: 8 spilled at sm_8x/sm_90a's 64 registers. */
      if (V > 1) {
        const char *pb = ok ? pc : base;
        for (; r + TSR_PR_POOL_BATCH * G <= m; r += TSR_PR_POOL_BATCH * G) {
          uint4 raw[TSR_PR_POOL_BATCH];
#pragma unroll
          for (int u = 0; u < TSR_PR_POOL_BATCH; u++) {
            const long long t = __shfl_sync(0xffffffffu, tok, (r + u * G + rg) & 31);
            raw[u] = __ldg((const uint4 *)(pb + t * ss * tsr_pr_t<DT>::SIZE));
          }
#pragma unroll
          for (int u = 0; u < TSR_PR_POOL_BATCH; u++) {
            A a[V];
            tsr_pr_unpack<DT, V>(raw[u], a);
            if (ok) tsr_pr_add<A, V, SQ>(acc, sq, a);
          }
        }
      }
#pragma unroll 8
      for (; r < m; r += G) { /* a uniform trip count: the shuffles need every lane */
        const int src = r + rg;
        const long long t = __shfl_sync(0xffffffffu, tok, src & 31);
        if (ok && src < m) {
          A a[V];
          tsr_pr_load<DT, V>(pc + t * ss * tsr_pr_t<DT>::SIZE, a);
          tsr_pr_add<A, V, SQ>(acc, sq, a);
        }
      }
    }
    /* join the row groups: lanes cv, cv + nvec, ... (G a power of two) */
    for (int o = nvec; G > 1 && o < 32; o <<= 1)
#pragma unroll
      for (int e = 0; e < V; e++) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
    if (ok && rg == 0)
#pragma unroll
      for (int e = 0; e < V; e++) out[cv * V + e] = acc[e] / (A)n;
  }
  if (SQ) {
    sq = tsr_pr_warp_sum(sq);
    if (lane == 0) sqo[((long long)b * heads + head) * p.ntiles + tile] = sq / (A)n;
  }
}

#define TSR_PR_POOL_W(name, DT, V, SQ)                                                  \
  extern "C" __global__ void TSR_PR_POOL_BOUNDS name(tsr_pr_pool_p p)                   \
  {                                                                                     \
    tsr_pr_pool_w<DT, V, SQ>(p);                                                        \
  }
/* _w<SQ>: the warp kernels, without (0) and with (1) the squared norms */
TSR_PR_POOL_W(tsr_pr_pool_f32_v1_w0, 0, 1, 0)
TSR_PR_POOL_W(tsr_pr_pool_f32_v4_w0, 0, 4, 0)
TSR_PR_POOL_W(tsr_pr_pool_f16_v1_w0, 1, 1, 0)
TSR_PR_POOL_W(tsr_pr_pool_f16_v8_w0, 1, 8, 0)
TSR_PR_POOL_W(tsr_pr_pool_bf16_v1_w0, 2, 1, 0)
TSR_PR_POOL_W(tsr_pr_pool_bf16_v8_w0, 2, 8, 0)
TSR_PR_POOL_W(tsr_pr_pool_f64_v1_w0, 3, 1, 0)
TSR_PR_POOL_W(tsr_pr_pool_f64_v2_w0, 3, 2, 0)
TSR_PR_POOL_W(tsr_pr_pool_f32_v1_w1, 0, 1, 1)
TSR_PR_POOL_W(tsr_pr_pool_f32_v4_w1, 0, 4, 1)
TSR_PR_POOL_W(tsr_pr_pool_f16_v1_w1, 1, 1, 1)
TSR_PR_POOL_W(tsr_pr_pool_f16_v8_w1, 1, 8, 1)
TSR_PR_POOL_W(tsr_pr_pool_bf16_v1_w1, 2, 1, 1)
TSR_PR_POOL_W(tsr_pr_pool_bf16_v8_w1, 2, 8, 1)
TSR_PR_POOL_W(tsr_pr_pool_f64_v1_w1, 3, 1, 1)
TSR_PR_POOL_W(tsr_pr_pool_f64_v2_w1, 3, 2, 1)

/* ---- scores and the rule ------------------------------------------------- */

/* Order-preserving bits of a non-negative probability. */
__device__ __forceinline__ unsigned long long tsr_pr_key(float x) { return __float_as_uint(x); }
__device__ __forceinline__ unsigned long long tsr_pr_key(double x)
{
  return (unsigned long long)__double_as_longlong(x);
}

template <typename A> __device__ __forceinline__ A tsr_pr_val(unsigned long long t);
template <> __device__ __forceinline__ float tsr_pr_val<float>(unsigned long long t)
{
  return __uint_as_float((unsigned int)t);
}
template <> __device__ __forceinline__ double tsr_pr_val<double>(unsigned long long t)
{
  return __longlong_as_double((long long)t);
}

/* Count of the row's keys at or above t (every lane gets it). */
template <typename A>
__device__ __forceinline__ int tsr_pr_count_ge(const A *row, int nk, unsigned long long t)
{
  int c = 0;
  for (int j = threadIdx.x & 31; j < nk; j += 32) c += tsr_pr_key(row[j]) >= t;
  return tsr_pr_warp_sum(c);
}

/* The largest key t with at least k of the row at or above it: the k-th
 * largest (1 <= k <= nk). */
template <typename A> __device__ unsigned long long tsr_pr_kth(const A *row, int nk, long long k)
{
  const int bits = sizeof(A) * 8;
  unsigned long long t = 0;
  for (int b = bits - 1; b >= 0; b--) {
    unsigned long long c = t | (1ull << b);
    if (tsr_pr_count_ge(row, nk, c) >= k) t = c;
  }
  return t;
}

/* The K of the CDF rule: ranks are kept while the sum before them is below
 * tau * sum, so K = #(keys above T) + the ties at T that still fit, T the
 * largest key whose at-or-above sum reaches tau * sum. */
template <typename A> __device__ long long tsr_pr_cdf_k(const A *row, int nk, double tau)
{
  const int lane = threadIdx.x & 31, bits = sizeof(A) * 8;
  A tot = 0;
  for (int j = lane; j < nk; j += 32) tot += row[j];
  const A c = (A)tau * tsr_pr_warp_sum(tot);
  unsigned long long t = 0;
  for (int b = bits - 1; b >= 0; b--) {
    unsigned long long cand = t | (1ull << b);
    A s = 0;
    for (int j = lane; j < nk; j += 32) s += tsr_pr_key(row[j]) >= cand ? row[j] : (A)0;
    if (tsr_pr_warp_sum(s) >= c) t = cand;
  }
  A above = 0;
  int n_above = 0, n_eq = 0;
  for (int j = lane; j < nk; j += 32) {
    const unsigned long long kj = tsr_pr_key(row[j]);
    if (kj > t) {
      above += row[j];
      n_above++;
    }
    n_eq += kj == t;
  }
  above = tsr_pr_warp_sum(above);
  n_above = tsr_pr_warp_sum(n_above);
  n_eq = tsr_pr_warp_sum(n_eq);
  /* the ties at T (value T's bits), in index order: each fits while the
   * running sum before it is below c (c <= 0: T is no key, n_eq = 0) */
  const A v = tsr_pr_val<A>(t);
  A s = above;
  long long q = 0;
  while (q < n_eq && s < c) {
    s += v;
    q++;
  }
  return n_above + q;
}

/* Writes the top k of the row (ties to the lower index) as bytes. */
template <typename A>
__device__ void tsr_pr_write_topk(const A *row, int nk, long long k, unsigned char *out)
{
  const int lane = threadIdx.x & 31;
  if (k <= 0 || k >= nk) {
    for (int j = lane; j < nk; j += 32) out[j] = k > 0;
    return;
  }
  const unsigned long long t = tsr_pr_kth(row, nk, k);
  int gt = 0;
  for (int j = lane; j < nk; j += 32) gt += tsr_pr_key(row[j]) > t;
  long long ties = k - tsr_pr_warp_sum(gt); /* ties at t to keep, lowest index first */
  for (int j0 = 0; j0 < nk; j0 += 32) {
    const int j = j0 + lane;
    const unsigned long long kj = j < nk ? tsr_pr_key(row[j]) : 0;
    const int eq = j < nk && kj == t;
    const unsigned int m = __ballot_sync(0xffffffffu, eq);
    const int before = __popc(m & ((1u << lane) - 1u));
    if (j < nk) out[j] = kj > t || (eq && before < ties);
    ties -= __popc(m);
  }
}

/* V elements of shared memory (16-byte aligned when V > 1: the host
 * picks V > 1 only when dim is a multiple of it). */
template <typename A, int V> __device__ __forceinline__ void tsr_pr_lds(const A *p, A *v)
{
  if (V == 4 && sizeof(A) == 4) {
    const float4 f = *(const float4 *)p;
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  } else if (V == 2 && sizeof(A) == 8) {
    const double2 f = *(const double2 *)p;
    v[0] = f.x, v[1] = f.y;
  } else {
#pragma unroll
    for (int e = 0; e < V; e++) v[e] = p[e];
  }
}

/* ---- the rule on a row held in registers (nk <= 32 N) ---------------------
 * Each lane holds the row's elements lane, lane + 32, ...: every pass of
 * the bitwise searches is N compares and adds and one warp reduction, no
 * shared memory.  Probabilities are at most exp(0) = 1, so the searches
 * on them start below the exponent's top bits (float: bit 29; double: bit
 * 61); float32 scores' keys (tsr_pr_skey) use all 32 (TOP 31). */
template <typename A> struct tsr_pr_kt;
template <> struct tsr_pr_kt<float> {
  typedef unsigned int K;
  enum { TOP = 29 };
};
template <> struct tsr_pr_kt<double> {
  typedef unsigned long long K;
  enum { TOP = 61 };
};

/* Writes keep = key > t, or key == t among the first `ties` such in index order. */
template <typename A, int N>
__device__ __forceinline__ void tsr_pr_write_reg(const typename tsr_pr_kt<A>::K *key, int nk,
                                                 typename tsr_pr_kt<A>::K t, long long ties,
                                                 unsigned char *out)
{
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < N; i++) {
    const int j = i * 32 + lane, ok = j < nk;
    const int eq = ok && key[i] == t;
    const unsigned int m = __ballot_sync(0xffffffffu, eq);
    const int before = __popc(m & ((1u << lane) - 1u));
    if (ok) out[j] = key[i] > t || (eq && before < ties);
    ties -= __popc(m);
  }
}

/* The k-th largest key (1 <= k <= nk; invalid elements have key 0). */
template <typename A, int N, int TOP = tsr_pr_kt<A>::TOP>
__device__ __forceinline__ typename tsr_pr_kt<A>::K tsr_pr_kth_reg(const typename tsr_pr_kt<A>::K *key,
                                                                   long long k)
{
  typedef typename tsr_pr_kt<A>::K K;
  K t = 0;
  for (int b = TOP; b >= 0; b--) {
    const K c = t | ((K)1 << b);
    int n = 0;
#pragma unroll
    for (int i = 0; i < N; i++) n += key[i] >= c;
    if (__reduce_add_sync(0xffffffffu, (unsigned)n) >= k) t = c;
  }
  return t;
}

/* Where the radix histogram keeps bin b: in lane b / 8's eight words,
 * rotated by b / 32, so that the lanes' reads of their i-th bins fall on 32
 * banks (at word b they were 4-way conflicts) and eight neighbouring bins,
 * where a pass's keys crowd, still on eight. */
__device__ __forceinline__ unsigned tsr_pr_bin(unsigned b) { return (b & ~7u) | ((b + (b >> 5)) & 7u); }

/* The k-th largest key (1 <= k <= nk) by an 8-bit radix select: a pass a
 * digit from bit TOP down (float probabilities: bits 29-22, 21-14, 13-6,
 * 5-0; float32 scores: 31-24 ... 7-0; double: 8 passes), each counting the keys that match the digits found so far into
 * the warp's 256-bin histogram in shared memory, then one suffix scan of
 * the bins picks the digit where the count from the top reaches the rank
 * still wanted.  Exact, integer counts: the same key as tsr_pr_kth_reg,
 * which makes a pass a bit (TOP + 1 of them, each a warp reduction after N
 * compares).  Only valid elements (j < nk) count. */
template <typename A, int N, int TOP = tsr_pr_kt<A>::TOP>
__device__ __forceinline__ typename tsr_pr_kt<A>::K tsr_pr_kth_hist(const typename tsr_pr_kt<A>::K *key, int nk,
                                                                    long long k, unsigned *hist, int &all)
{
  typedef typename tsr_pr_kt<A>::K K;
  const int lane = threadIdx.x & 31;
  K prefix = 0;
  unsigned need = (unsigned)k;
  int whole = 0;
  for (int hi = TOP; hi >= 0; hi -= 8) {
    const int lo = hi >= 7 ? hi - 7 : 0;
    /* the bits above hi: fixed by earlier passes (zero above TOP) */
    const K above = hi + 1 >= (int)(8 * sizeof(K)) ? (K)0 : ~(K)0 << (hi + 1);
#pragma unroll
    for (int i = 0; i < 8; i++) hist[i * 32 + lane] = 0; /* all 256 words, one bank a lane */
    __syncwarp();
#pragma unroll
    for (int i = 0; i < N; i++)
      if (i * 32 + lane < nk && (key[i] & above) == prefix)
        atomicAdd(&hist[tsr_pr_bin((unsigned)(key[i] >> lo) & 255u)], 1u);
    __syncwarp();
    /* lane l holds bins 8l..8l+7; counts from the top: the lanes above l,
     * then its bins downwards */
    unsigned c[8], own = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) own += c[i] = hist[tsr_pr_bin(lane * 8 + i)];
    unsigned suf = own; /* inclusive suffix sum over lanes >= l */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned v = __shfl_down_sync(0xffffffffu, suf, o);
      if (lane + o < 32) suf += v;
    }
    const unsigned higher = suf - own; /* keys in lanes above */
    const int here = higher < need && suf >= need;
    const unsigned who = __ballot_sync(0xffffffffu, here);
    int digit = 0;
    unsigned left = 0;
    whole = 0;
    if (here) {
      /* unrolled, so that c stays in registers (a dynamic c[i] put it on
       * the stack) */
      unsigned acc = higher, bin = 0;
      int i = 0, found = 0;
#pragma unroll
      for (int b = 7; b >= 0; b--) {
        if (!found && (b == 0 || acc + c[b] >= need)) found = 1, i = b, bin = c[b];
        else if (!found) acc += c[b];
      }
      digit = lane * 8 + i;
      left = need - acc;
      whole = bin == left;
    }
    const int src = __ffs(who) - 1;
    digit = __shfl_sync(0xffffffffu, digit, src);
    need = __shfl_sync(0xffffffffu, left, src);
    whole = __shfl_sync(0xffffffffu, whole, src);
    prefix |= (K)digit << lo;
    __syncwarp(); /* the histogram is cleared for the next pass */
    /* Every key of the digit's bin is kept: the bin's lower bound (lower
     * bits zero) is a threshold that keeps the same k keys (all above it,
     * and any equal to it are in the bin, all kept), so the later passes
     * are skipped. */
    if (whole) break;
  }
  /* whole: the keys at or above prefix are exactly the k kept (the last
   * pass's bin is one key value, whole when all its keys are kept) */
  all = whole;
  return prefix;
}

/* Order-preserving bits of a float32 score (-0 as +0, NaN above all). */
__device__ __forceinline__ unsigned tsr_pr_skey(float x)
{
  const unsigned u = __float_as_uint(x + 0.0f);
  return x != x ? 0xffffffffu : u >> 31 ? ~u : u | 0x80000000u;
}

/* The row's top k of its keys in registers (invalid ones 0; TOP: the
 * highest bit a key may have). */
template <typename A, int N, int TOP>
__device__ __forceinline__ void tsr_pr_topk_reg(const typename tsr_pr_kt<A>::K *key, int nk, long long k,
                                                unsigned char *out, unsigned *hist)
{
  typedef typename tsr_pr_kt<A>::K K;
  const int lane = threadIdx.x & 31;
  if (k <= 0 || k >= nk) {
#pragma unroll
    for (int i = 0; i < N; i++)
      if (i * 32 + lane < nk) out[i * 32 + lane] = k > 0;
    return;
  }
  int all = 0;
  const K t = hist ? tsr_pr_kth_hist<A, N, TOP>(key, nk, k, hist, all) : tsr_pr_kth_reg<A, N, TOP>(key, k);
  if (all) { /* no ties to cut: no count, no ballots */
#pragma unroll
    for (int i = 0; i < N; i++)
      if (i * 32 + lane < nk) out[i * 32 + lane] = key[i] >= t;
    return;
  }
  int gt = 0;
#pragma unroll
  for (int i = 0; i < N; i++) gt += key[i] > t;
  tsr_pr_write_reg<A, N>(key, nk, t, k - (long long)__reduce_add_sync(0xffffffffu, (unsigned)gt), out);
}

/* The float32 top k on the scores themselves: softmax is monotone, so the k
 * largest probabilities are the k largest scores, but where float32's exp
 * rounds distinct scores to one probability the scores' order (the float64
 * rule's) decides, not the index.  No max, no exps: they were 500 of a
 * row's instructions (ncu, VSA at Wan 480p).  Keys over all 32 bits: up to
 * 4 radix passes (32 bitwise ones). */
template <int N>
__device__ __forceinline__ void tsr_pr_topk_scores(const float *row, int nk, long long k, unsigned char *out,
                                                   unsigned *hist)
{
  const int lane = threadIdx.x & 31;
  unsigned key[N];
#pragma unroll
  for (int i = 0; i < N; i++) key[i] = i * 32 + lane < nk ? tsr_pr_skey(row[i * 32 + lane]) : 0u;
  tsr_pr_topk_reg<float, N, 31>(key, nk, k, out, hist);
}

/* The row's rule: top k, or CDF (K from the largest key T whose at-or-above
 * sum reaches tau * sum; the ties at T fit while the running sum before
 * them is below it; at least min_keep). */
template <typename A, int N, int H>
__device__ void tsr_pr_rule_reg(const A *row, int nk, const tsr_pr_select_p &p, unsigned char *out,
                                unsigned *hist)
{
  typedef typename tsr_pr_kt<A>::K K;
  /* H: a radix-select kernel, top k only (runtime/produce.c), so the float32
   * ones compile nothing else (ptxas spilled the n24 one on sm_90a at 64
   * registers with the probabilities' path beside it) */
  if (sizeof(A) == 4 && (H || p.rule == 0)) {
    tsr_pr_topk_scores<N>((const float *)row, nk, p.k, out, hist);
    return;
  }
  const int lane = threadIdx.x & 31;
  A v[N], mx = -tsr_pr_val<A>(sizeof(A) == 8 ? 0x7ff0000000000000ull : 0x7f800000ull);
  K key[N];
#pragma unroll
  for (int i = 0; i < N; i++) {
    v[i] = i * 32 + lane < nk ? row[i * 32 + lane] : mx;
    mx = tsr_pr_max(mx, v[i]);
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) mx = tsr_pr_max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
#pragma unroll
  for (int i = 0; i < N; i++) {
    v[i] = i * 32 + lane < nk ? tsr_pr_exp(v[i] - mx) : (A)0;
    key[i] = (K)tsr_pr_key(v[i]);
  }
  long long k = p.k;
  if (p.rule == 1) {
    A tot = 0;
#pragma unroll
    for (int i = 0; i < N; i++) tot += v[i];
    const A c = (A)p.tau * tsr_pr_warp_sum(tot);
    K t = 0;
    for (int b = tsr_pr_kt<A>::TOP; b >= 0; b--) {
      const K cand = t | ((K)1 << b);
      A s = 0;
#pragma unroll
      for (int i = 0; i < N; i++) s += key[i] >= cand ? v[i] : (A)0;
      if (tsr_pr_warp_sum(s) >= c) t = cand;
    }
    A above = 0;
    int n_above = 0, n_eq = 0;
#pragma unroll
    for (int i = 0; i < N; i++) {
      const int ok = i * 32 + lane < nk;
      above += key[i] > t ? v[i] : (A)0;
      n_above += key[i] > t;
      n_eq += ok && key[i] == t;
    }
    above = tsr_pr_warp_sum(above);
    n_above = (int)__reduce_add_sync(0xffffffffu, (unsigned)n_above);
    n_eq = (int)__reduce_add_sync(0xffffffffu, (unsigned)n_eq);
    const A val = tsr_pr_val<A>(t);
    long long q = 0;
    for (A s = above; q < n_eq && s < c; q++) s += val;
    if (n_above + q >= p.min_keep) {
      tsr_pr_write_reg<A, N>(key, nk, t, q, out);
      return;
    }
    k = p.min_keep;
  }
  tsr_pr_topk_reg<A, N, tsr_pr_kt<A>::TOP>(key, nk, k, out, hist);
}

/* The generic rule (any nk): the row in shared memory, a loop a pass. */
template <typename A> __device__ void tsr_pr_rule_smem(A *row, int nk, const tsr_pr_select_p &p, unsigned char *out)
{
  const int lane = threadIdx.x & 31;
  if (sizeof(A) == 4 && p.rule == 0) { /* the scores' order, as tsr_pr_topk_scores */
    for (int j = lane; j < nk; j += 32) row[j] = tsr_pr_val<A>(tsr_pr_skey((float)row[j]));
    __syncwarp();
    tsr_pr_write_topk(row, nk, p.k, out);
    return;
  }
  A mx = -tsr_pr_val<A>(sizeof(A) == 8 ? 0x7ff0000000000000ull : 0x7f800000ull);
  for (int j = lane; j < nk; j += 32) mx = tsr_pr_max(mx, row[j]);
#pragma unroll
  for (int o = 16; o; o >>= 1) mx = tsr_pr_max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  for (int j = lane; j < nk; j += 32) row[j] = tsr_pr_exp(row[j] - mx);
  __syncwarp();
  long long kk = p.k;
  if (p.rule == 1) {
    kk = tsr_pr_cdf_k(row, nk, p.tau);
    if (kk < p.min_keep) kk = p.min_keep;
  }
  tsr_pr_write_topk(row, nk, kk, out);
}

/* Rows of the tensor cores' m16 tile: a select CTA scores one (MT = 1), or
 * two (the _h2 kernels) (runtime/produce.c PR_MAX_ROWS, PR_MAX_ROWS2). */
#define TSR_PR_RM 16

/* float32 operands split for three TF32 products: hi keeps the bits a TF32
 * operand is read by (sign, exponent, 10 mantissa bits), lo = x - hi
 * exactly, of which the tensor core reads the top 11 bits in turn. */
__device__ __forceinline__ void tsr_pr_split(float x, unsigned &hi, unsigned &lo)
{
  hi = __float_as_uint(x) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
}

__device__ __forceinline__ void tsr_pr_mma(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* tsr_pr_scores_tc's A-fragment order of q: for each 8-channel k8 step,
 * lane (g = r % 8, t) holds its four A registers {(g, t), (g + 8, t),
 * (g, t + 4), (g + 8, t + 4)} in 16 bytes, k index t the channel 4 t + 2 s,
 * t + 4 the next (s: the step's half of its 16-channel pair): one
 * conflict-free 16-byte load a lane a step.  Word f of that order, from its
 * bits (low first: r / 8, e, t (2), r % 8 (3), s, then the 16-channel
 * group), holds row r, channel 16 group + 4 t + 2 s + e: the split walks f,
 * so that its stores are consecutive (walking q's order they were 8-way
 * bank conflicts). */
__device__ __forceinline__ void tsr_pr_qfrag(int f, int &r, int &ch)
{
  r = ((f >> 4) & 7) + 8 * (f & 1);
  ch = (f >> 8) * 16 + ((f >> 2) & 3) * 4 + ((f >> 7) & 1) * 2 + ((f >> 1) & 1);
}

/* The pooled scores of the CTA's rows (up to 16 MT: MT m16 tiles) on the tensor
 * cores, float32 by three TF32 products a term (lo.hi + hi.lo + hi.hi, the
 * dropped lo.lo and the rounding of lo about 2^-20 of a product: the error of
 * a float32 sum of the same 128 terms, not its bits).  The FMA loop this
 * replaces (3 keys a thread, 16 rows) was 65% of the select's instructions at
 * VSA's Wan 480p rows, and 19% of its FMAs fell on clamped key slots (768 for
 * 624 keys): 0.06 of 0.097 ms on the H200 (notes/producers-2026-12-03b.md).
 * A warp takes 8-key tiles w, w + 8, ... two at a time; a 16-channel step
 * is two k8 steps whose 8 k indices map to the channels 4 t + {0, 1} and
 * 4 t + {2, 3} of lane t of a quad, so that a lane's q and k come in one
 * 16-byte load each, k's a step ahead (the loop stalled on them).  TK: k
 * transposed ([dim, nk] a head).  d % 16 == 0; qs holds MT m16 tiles of q's
 * TF32 hi, then MT of its lo (split once by tsr_pr_select: the split was 16
 * of the loop's 100 instructions a step, redone for each tile pair), rows
 * past nr zero (nothing of them is stored).  With MT = 2 each k fragment
 * serves both tiles: half the reads of pooled k from L2 for 32 rows. */
template <int TK> __device__ __forceinline__ float4 tsr_pr_kload(const float *kp, int c, int nk)
{
  if (!TK) return __ldg((const float4 *)(kp + c));
  const long long s = (long long)c * nk;
  return make_float4(__ldg(kp + s), __ldg(kp + s + nk), __ldg(kp + s + 2 * nk), __ldg(kp + s + 3 * nk));
}

template <int TK, int MT>
__device__ __forceinline__ void tsr_pr_scores_tc(const tsr_pr_select_p &p, const float *qs, float *sc,
                                                 const float *k, int nr)
{
  enum { G = 2, NW = TSR_PR_THREADS / 32 };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int ntile = (p.nk + 7) >> 3;
  /* qs: pooled q split once, each m16 tile in A-fragment order (tsr_pr_qfrag) */
  const uint4 *qf = (const uint4 *)qs + lane;
  const int tw = TSR_PR_RM * p.d / 4, lo = MT * tw; /* an m16 tile's 16-byte words; the lo half */
  for (int n0 = warp; n0 < ntile; n0 += NW * G) {
    float acc[G][MT][4];
    const float *kp[G];
    float4 kv[G];
#pragma unroll
    for (int u = 0; u < G; u++) {
      /* a tile past the last, or a key past nk, reads key nk - 1 (not stored) */
      const int j = min((n0 + u * NW) * 8 + g, p.nk - 1);
      kp[u] = TK ? k + j + (long long)(4 * t) * p.nk : k + (long long)j * p.d + 4 * t;
      kv[u] = tsr_pr_kload<TK>(kp[u], 0, p.nk);
#pragma unroll
      for (int m = 0; m < MT; m++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[u][m][e] = 0.f;
    }
#pragma unroll 1
    for (int c = 0; c < p.d; c += 16) {
      /* a[s]: k8 step s's A fragment, one 16-byte load each */
      uint4 fh[MT][2], fl[MT][2];
#pragma unroll
      for (int m = 0; m < MT; m++)
#pragma unroll
        for (int s = 0; s < 2; s++)
          fh[m][s] = qf[m * tw + (c / 8 + s) * 32], fl[m][s] = qf[lo + m * tw + (c / 8 + s) * 32];
      const int cn = c + 16 < p.d ? c + 16 : c; /* the next step's k (the last reloads its own) */
#pragma unroll
      for (int u = 0; u < G; u++) {
        unsigned bh[4], bl[4];
        tsr_pr_split(kv[u].x, bh[0], bl[0]), tsr_pr_split(kv[u].y, bh[1], bl[1]);
        tsr_pr_split(kv[u].z, bh[2], bl[2]), tsr_pr_split(kv[u].w, bh[3], bl[3]);
        kv[u] = tsr_pr_kload<TK>(kp[u], cn, p.nk);
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
          for (int s = 0; s < 2; s++) {
            tsr_pr_mma(acc[u][m], &fl[m][s].x, bh[2 * s], bh[2 * s + 1]);
            tsr_pr_mma(acc[u][m], &fh[m][s].x, bl[2 * s], bl[2 * s + 1]);
            tsr_pr_mma(acc[u][m], &fh[m][s].x, bh[2 * s], bh[2 * s + 1]);
          }
      }
    }
    /* C fragment: rows g, g + 8; keys 2 t, 2 t + 1 of the tile, stored as
     * one 8-byte pair: with the row stride p.ls = 8 (mod 16) the warp's
     * eight rows fall on distinct banks (two wavefronts a store; the 4-byte
     * stores at stride nk = 624 were four-way conflicts, 83% of the select's
     * shared-store wavefronts with the q split's, ncu 2026-12-03) */
#pragma unroll
    for (int u = 0; u < G; u++) {
      const int j = (n0 + u * NW) * 8 + 2 * t;
      const float sc0 = (float)p.scale;
#pragma unroll
      for (int m = 0; m < MT; m++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int row = m * 16 + g + h * 8;
          if (row >= nr || j >= p.nk) continue;
          float *o = sc + row * p.ls + j;
          if (j + 1 < p.nk) *(float2 *)o = make_float2(acc[u][m][2 * h] * sc0, acc[u][m][2 * h + 1] * sc0);
          else o[0] = acc[u][m][2 * h] * sc0;
        }
    }
  }
}

/* The scores of any nk: one key a lane, up to 16 rows in registers. */
template <typename A, int V>
__device__ __forceinline__ void tsr_pr_scores_1(const tsr_pr_select_p &p, const A *qs, A *sc, const A *k, int nr)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = TSR_PR_THREADS / 32;
  for (int j0 = warp * 32; j0 < p.nk; j0 += nw * 32) {
    const int j = j0 + lane;
    A acc[16];
#pragma unroll
    for (int i = 0; i < 16; i++) acc[i] = 0;
    if (j < p.nk) {
      const A *kr = k + (long long)j * p.d;
      for (int c = 0; c < p.d; c += V) {
        A kv[V];
        if (V == 1) kv[0] = kr[c];
        else tsr_pr_load<sizeof(A) == 8 ? 3 : 0, V>((const char *)(kr + c), kv);
#pragma unroll
        for (int i = 0; i < 16; i++)
          if (i < nr) {
            A qv[V];
            tsr_pr_lds<A, V>(qs + i * p.d + c, qv); /* one 16-byte broadcast when V > 1 */
#pragma unroll
            for (int e = 0; e < V; e++) acc[i] += qv[e] * kv[e];
          }
      }
#pragma unroll
      for (int i = 0; i < 16; i++)
        if (i < nr) sc[i * p.ls + j] = acc[i] * (A)p.scale;
    }
  }
}

/* The scores: float32 with 16-byte loads and d % 16 == 0 on the tensor
 * cores (tsr_pr_tc; runtime/produce.c sizes qs to match: q split), else
 * (any d, float64: a test path) one FMA chain a score. */
template <typename A, int V> __device__ __forceinline__ int tsr_pr_tc(const tsr_pr_select_p &p)
{
  return sizeof(A) == 4 && V == 4 && p.d % 16 == 0;
}
template <int V, int TK, int MT>
__device__ __forceinline__ void tsr_pr_scores(const tsr_pr_select_p &p, const float *qs, float *sc, const float *k,
                                              int nr)
{
  if (tsr_pr_tc<float, V>(p)) tsr_pr_scores_tc<TK, MT>(p, qs, sc, k, nr);
  else tsr_pr_scores_1<float, V>(p, qs, sc, k, nr);
}
template <int V, int TK, int MT>
__device__ __forceinline__ void tsr_pr_scores(const tsr_pr_select_p &p, const double *qs, double *sc,
                                              const double *k, int nr)
{
  tsr_pr_scores_1<double, V>(p, qs, sc, k, nr);
}

/* Pooled scores of `rows` (at most 16 MT) query rows against every key, then
 * one warp a row for the rule: in registers when N > 0 (nk <= 32 N), else in
 * shared memory. */
template <typename A, int V, int N, int H, int TK = 0, int MT = 1>
__device__ void tsr_pr_select(const tsr_pr_select_p &p)
{
  extern __shared__ __align__(16) unsigned char tsr_pr_smem[];
  /* H: the top k by radix select, a 256-bin histogram a warp (8 KiB): for
   * float64 static (the host leaves it out of the rows' dynamic budget);
   * for float32 dynamic, over pooled q once the scores are done (HD) with
   * the tensor-core scores, else after the scores (runtime/produce.c sizes
   * both) */
  enum { HD = H && sizeof(A) == 4, HW = TSR_PR_THREADS / 32 * 256 };
  __shared__ unsigned tsr_pr_hist[H && !HD ? HW : 1];
  /* the tensor-core scores read MT whole m16 tiles of q, split into TF32 hi
   * and lo once here: qs holds MT TSR_PR_RM rows of each, those past nr zero */
  const int tc = tsr_pr_tc<A, V>(p);
  const int qwords = tc ? max(2 * MT * TSR_PR_RM * p.d * (int)(sizeof(float) / sizeof(A)), HD ? HW : 0)
                        : p.rows * p.d * (int)(sizeof(A) / sizeof(float));
  A *qs = (A *)tsr_pr_smem, *sc = (A *)((float *)tsr_pr_smem + qwords);
  unsigned *hist = !H ? 0 : !HD ? tsr_pr_hist : tc ? (unsigned *)tsr_pr_smem : (unsigned *)(sc + p.rows * p.ls);
  const int tid = threadIdx.x, warp = tid >> 5, nw = TSR_PR_THREADS / 32;
  const int r0 = blockIdx.x * p.rows, head = blockIdx.y, b = blockIdx.z;
  const int nr = min(p.rows, p.nq - r0), kvh = head / (p.heads / p.kv_heads);
  const A *q = (const A *)p.pq + (((long long)b * p.heads + head) * p.nq + r0) * p.d;
  const A *k = (const A *)p.pk + ((long long)b * p.kv_heads + kvh) * p.nk * (long long)p.d;
  if (tc) {
    const int tw = TSR_PR_RM * p.d; /* an m16 tile's words */
    unsigned *qh = (unsigned *)tsr_pr_smem, *ql = qh + MT * tw;
    for (int f = tid; f < MT * tw; f += TSR_PR_THREADS) {
      int r, ch;
      tsr_pr_qfrag(f % tw, r, ch);
      r += f / tw * TSR_PR_RM;
      tsr_pr_split(r < nr ? (float)q[r * p.d + ch] : 0.f, qh[f], ql[f]);
    }
  } else {
    for (int i = tid; i < nr * p.d; i += TSR_PR_THREADS) qs[i] = q[i];
  }
  __syncthreads();
  tsr_pr_scores<V, TK, MT>(p, qs, sc, k, nr);
  __syncthreads(); /* q is dead: the histograms may take its place */
  for (int i = warp; i < nr; i += nw) {
    unsigned char *out = p.out + (((long long)b * p.heads + head) * p.nq + r0 + i) * p.nk;
    if (N > 0) tsr_pr_rule_reg<A, (N > 0 ? N : 1), H>(sc + i * p.ls, p.nk, p, out, H ? hist + warp * 256 : 0);
    else tsr_pr_rule_smem(sc + i * p.ls, p.nk, p, out);
  }
}

/* On sm_100a and sm_120, with the thread bound alone, ptxas gave the float64
 * any-nk kernel 64 registers and spilled (5 and 10 LDL/STL); asking for two
 * CTAs an SM (up to 128 registers) it takes 125 and spills nothing.  The
 * sm_8x and sm_90a cubins stay as they were measured. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define TSR_PR_SELECT_BOUNDS __launch_bounds__(TSR_PR_THREADS, 2)
#else
#define TSR_PR_SELECT_BOUNDS __launch_bounds__(TSR_PR_THREADS)
#endif
/* The radix-select kernels with the most registers (float64 ones; float32
 * n32 on sm_100a and sm_120) spilled 2-13 words at the bounds above
 * (gen-sass): one CTA an SM lets ptxas take up to 255 (float32 n32 on every
 * target: nvcc's sm_90a build of it spilled too). */
#define TSR_PR_BOUNDS_1 __launch_bounds__(TSR_PR_THREADS, 1)
#define TSR_PR_BOUNDS_N32 TSR_PR_BOUNDS_1
/* The float32 register-rule kernels of up to 768 keys (scores on the tensor
 * cores).  ptxas left to itself chose 64 or 80 registers and spilled 2-4
 * words on sm_80, sm_89 and sm_90a (gen-sass).  On sm_90a four CTAs an SM
 * fit in 64 registers without a spill, and VSA's 468 CTAs at Wan 480p are
 * then one wave of 528 (at three, 1.2 waves of 396 left SMs idle: select
 * 0.0590 ms at 80 registers, 0.0620 at 96 and two CTAs, 0.0556 at 64 and
 * four; H200, 2026-12-03).  Elsewhere one CTA an SM lets ptxas take what it
 * needs (not measured there). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define TSR_PR_BOUNDS_TC __launch_bounds__(TSR_PR_THREADS, 4)
/* the bitwise-search and CDF ones (the probabilities' path too): two, up to
 * 128 registers, no spill (at four they spilled 2-4 words) */
#define TSR_PR_BOUNDS_TCB __launch_bounds__(TSR_PR_THREADS, 2)
#else
#define TSR_PR_BOUNDS_TC TSR_PR_BOUNDS_1
#define TSR_PR_BOUNDS_TCB TSR_PR_BOUNDS_1
#endif
#define TSR_PR_SELECT_HB(name, A, V, N, H, B)                                           \
  extern "C" __global__ void B name(tsr_pr_select_p p)                                  \
  {                                                                                     \
    tsr_pr_select<A, V, N, H>(p);                                                       \
  }
#define TSR_PR_SELECT_H(name, A, V, N, H)                                               \
  extern "C" __global__ void TSR_PR_SELECT_BOUNDS name(tsr_pr_select_p p)               \
  {                                                                                     \
    tsr_pr_select<A, V, N, H>(p);                                                       \
  }
#define TSR_PR_SELECT(name, A, V, N) TSR_PR_SELECT_H(name, A, V, N, 0)
/* the float32 radix-select kernels with k transposed (TK) or two m16 tiles (MT) */
#define TSR_PR_SELECT_F(name, N, TK, MT, B)                                             \
  extern "C" __global__ void B name(tsr_pr_select_p p)                                  \
  {                                                                                     \
    tsr_pr_select<float, 4, N, 1, TK, MT>(p);                                           \
  }
/* _n<N>: the row in registers, nk <= 32 N; _n0: any nk */
TSR_PR_SELECT(tsr_pr_select_f32_v1_n0, float, 1, 0)
TSR_PR_SELECT(tsr_pr_select_f32_v4_n0, float, 4, 0)
TSR_PR_SELECT_HB(tsr_pr_select_f32_v4_n8, float, 4, 8, 0, TSR_PR_BOUNDS_TCB)
TSR_PR_SELECT_HB(tsr_pr_select_f32_v4_n16, float, 4, 16, 0, TSR_PR_BOUNDS_TCB)
TSR_PR_SELECT_HB(tsr_pr_select_f32_v4_n24, float, 4, 24, 0, TSR_PR_BOUNDS_TCB)
TSR_PR_SELECT(tsr_pr_select_f32_v4_n32, float, 4, 32)
/* (float64 any-nk: on sm_90a ptxas spilled v1 at 64 registers once q's
 * rows were sized per kernel kind; one CTA an SM, as the radix ones) */
TSR_PR_SELECT_HB(tsr_pr_select_f64_v1_n0, double, 1, 0, 0, TSR_PR_BOUNDS_1)
TSR_PR_SELECT_HB(tsr_pr_select_f64_v2_n0, double, 2, 0, 0, TSR_PR_BOUNDS_1)
TSR_PR_SELECT(tsr_pr_select_f64_v2_n8, double, 2, 8)
TSR_PR_SELECT(tsr_pr_select_f64_v2_n16, double, 2, 16)
TSR_PR_SELECT(tsr_pr_select_f64_v2_n24, double, 2, 24)
TSR_PR_SELECT(tsr_pr_select_f64_v2_n32, double, 2, 32)
/* _h: the top k by radix select (tsr_pr_kth_hist); the CDF rule's search
 * sums floats, in a fixed order, so it stays in the kernels above */
TSR_PR_SELECT_HB(tsr_pr_select_f32_v4_n8_h, float, 4, 8, 1, TSR_PR_BOUNDS_TC)
TSR_PR_SELECT_HB(tsr_pr_select_f32_v4_n16_h, float, 4, 16, 1, TSR_PR_BOUNDS_TC)
TSR_PR_SELECT_HB(tsr_pr_select_f32_v4_n24_h, float, 4, 24, 1, TSR_PR_BOUNDS_TC)
TSR_PR_SELECT_HB(tsr_pr_select_f32_v4_n32_h, float, 4, 32, 1, TSR_PR_BOUNDS_N32)
TSR_PR_SELECT_HB(tsr_pr_select_f64_v2_n8_h, double, 2, 8, 1, TSR_PR_BOUNDS_1)
TSR_PR_SELECT_HB(tsr_pr_select_f64_v2_n16_h, double, 2, 16, 1, TSR_PR_BOUNDS_1)
TSR_PR_SELECT_HB(tsr_pr_select_f64_v2_n24_h, double, 2, 24, 1, TSR_PR_BOUNDS_1)
TSR_PR_SELECT_HB(tsr_pr_select_f64_v2_n32_h, double, 2, 32, 1, TSR_PR_BOUNDS_1)
/* _ht: as _h, pooled k transposed ([dim, nk] a head; tsr_select_args.kernel 2) */
TSR_PR_SELECT_F(tsr_pr_select_f32_v4_n8_ht, 8, 1, 1, TSR_PR_BOUNDS_TC)
TSR_PR_SELECT_F(tsr_pr_select_f32_v4_n16_ht, 16, 1, 1, TSR_PR_BOUNDS_TC)
TSR_PR_SELECT_F(tsr_pr_select_f32_v4_n24_ht, 24, 1, 1, TSR_PR_BOUNDS_TC)
TSR_PR_SELECT_F(tsr_pr_select_f32_v4_n32_ht, 32, 1, 1, TSR_PR_BOUNDS_N32)
/* _h2: as _h, two m16 tiles (up to 32 rows a CTA: pooled k read from L2 half
 * as often, each B fragment used twice); on sm_90a two CTAs an SM */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define TSR_PR_BOUNDS_TC2 __launch_bounds__(TSR_PR_THREADS, 2)
#else
#define TSR_PR_BOUNDS_TC2 TSR_PR_BOUNDS_1
#endif
TSR_PR_SELECT_F(tsr_pr_select_f32_v4_n8_h2, 8, 0, 2, TSR_PR_BOUNDS_TC2)
TSR_PR_SELECT_F(tsr_pr_select_f32_v4_n16_h2, 16, 0, 2, TSR_PR_BOUNDS_TC2)
TSR_PR_SELECT_F(tsr_pr_select_f32_v4_n24_h2, 24, 0, 2, TSR_PR_BOUNDS_TC2)
TSR_PR_SELECT_F(tsr_pr_select_f32_v4_n32_h2, 32, 0, 2, TSR_PR_BOUNDS_N32)

/* SVG's sampled-attention profile: its own file, in this module */
#include "produce_sampled.cuh"

#endif

/*
 * plan_gpu.cuh: planning on the GPU.  Turns a device-resident block mask
 * (bytes or bits) into the tile, membership, task, member and merge records
 * of plan_layout.h, on the caller's stream, for the attention kernel of the
 * same stream to consume; no host synchronisation, nothing allocated.
 * tessera-gen compiles it alone, once a target, into <arch>/tsr_plan.cubin
 * of the bundle (registry "planner"); it needs only plan_layout.h.
 *
 * Scope (runtime/gpuplan.c checks it): uniform blocks bq x bk, any tile
 * BM x BN, ragged last blocks; row tasks, optionally split into near-equal
 * chunks of at most `chunk` key tiles (the host planner's rule), merged
 * through partial slots while the slot capacity lasts (later rows then stay
 * whole); an empty row is one task without tiles (it writes zeros and
 * lse = -inf).  Tasks are ordered by length class, longest first (11
 * classes by log2 of the length, empty rows last), rows in order inside a
 * class: deterministic, and close to the host's longest-first order.
 *
 * Two launches:
 *   tsr_plan_count  one warp per problem row: its tiles and partial tiles
 *                   (the OR / AND of the mask bits under each tile), and the
 *                   features' sums; the last CTA to finish (atomic ticket)
 *                   scans the rows (three passes of per-thread runs plus two
 *                   block scans), grants split slots in row order, writes
 *                   each row's offsets, the counts and the features.
 *   tsr_plan_emit   one warp per row: the row's tiles and membership words
 *                   (ballot + popc give positions), its tasks, members and
 *                   merge record.
 * Cost: reads the mask twice (plus once per segment for the features),
 * writes the plan; a few microseconds for video-sized masks, dominated by
 * the scan CTA and the launch gap.
 */
#ifndef TSR_PLAN_GPU_CUH
#define TSR_PLAN_GPU_CUH

#define TSR_GP_COUNT_THREADS 1024
#define TSR_GP_EMIT_THREADS 256

namespace tsrgp {

struct rowgeo {
  int b, h, t, r0, r1, i0, nseg;
  long long plane; /* first row of the mask plane, in rows */
};

static __device__ __forceinline__ rowgeo row_geo(const tsr_gpuplan_params &p, int r)
{
  rowgeo g;
  const int bh = r / p.nqt;
  g.t = r - bh * p.nqt;
  g.h = bh % p.heads_q;
  g.b = bh / p.heads_q;
  g.r0 = g.t * p.bm;
  g.r1 = min(g.r0 + p.bm, p.seq_q);
  g.i0 = g.r0 / p.bq;
  g.nseg = (g.r1 - 1) / p.bq - g.i0 + 1;
  g.plane = (long long)g.b * p.plane_b + (long long)g.h * p.plane_h;
  return g;
}

/* Whether logical block pair (segment s of the row, key block j) is selected. */
static __device__ __forceinline__ bool mask_bit(const tsr_gpuplan_params &p, const rowgeo &g, int s,
                                                int j)
{
  const long long row = g.plane + g.i0 + s;
  if (p.format == 0) return ((const unsigned char *)p.mask)[row * p.pitch + j] != 0;
  return (((const unsigned *)p.mask)[row * p.pitch + (j >> 5)] >> (j & 31)) & 1u;
}

/* Tile u of the row: any selected pair (emitted), every pair selected (full). */
static __device__ __forceinline__ void tile_state(const tsr_gpuplan_params &p, const rowgeo &g, int u,
                                                  bool &any, bool &full)
{
  const int c0 = u * p.bn, c1 = min(c0 + p.bn, p.seq_k);
  const int kb0 = c0 / p.bk, kb1 = (c1 - 1) / p.bk;
  any = false;
  full = true;
  for (int s = 0; s < g.nseg; ++s)
    for (int j = kb0; j <= kb1; ++j) {
      const bool x = mask_bit(p, g, s, j);
      any |= x;
      full &= x;
    }
}

/* Tiles u0 + 32 k + lane (k < 4): the loads first, so that each lane has
 * four mask reads in flight.  simple: one segment and every key tile inside
 * one key block, so a tile is one mask bit. */
static __device__ __forceinline__ void tile_states4(const tsr_gpuplan_params &p, const rowgeo &g,
                                                    bool simple, int u0, int lane, bool (&any)[4],
                                                    bool (&full)[4])
{
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int u = u0 + 32 * k + lane;
    any[k] = false;
    full[k] = true;
    if (u < p.nkt) {
      if (simple) any[k] = full[k] = mask_bit(p, g, 0, u * p.bn / p.bk);
      else tile_state(p, g, u, any[k], full[k]);
    }
  }
}

/* Length class of a task of len >= 1 tiles: 0 for >= 1024, 10 for 1. */
static __device__ __forceinline__ int len_class(int len)
{
  const int lg = 31 - __clz(len);
  return 10 - min(lg, 10);
}

/* Chunks a row of len tiles wants (0: not split). */
static __device__ __forceinline__ int want_chunks(const tsr_gpuplan_params &p, int len)
{
  return p.chunk > 0 && len > p.chunk ? (len + p.chunk - 1) / p.chunk : 0;
}

template <typename T>
static __device__ __forceinline__ T warp_sum(T x)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/* Exclusive block scan of N values a thread; tot[] gets the block totals.
 * sm holds 33 rows of N. */
template <typename T, int N>
static __device__ void block_exscan(T (&v)[N], T (&tot)[N], T (*sm)[N])
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  T inc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    inc[k] = v[k];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const T y = __shfl_up_sync(0xffffffffu, inc[k], o);
      if (lane >= o) inc[k] += y;
    }
  }
  if (lane == 31)
#pragma unroll
    for (int k = 0; k < N; ++k) sm[warp][k] = inc[k];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const T w = lane < nw ? sm[lane][k] : (T)0;
      T x = w;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const T y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
      }
      if (lane < nw) sm[lane][k] = x - w;
      if (lane == 31) sm[32][k] = x;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < N; ++k) {
    v[k] = inc[k] - v[k] + sm[warp][k];
    tot[k] = sm[32][k];
  }
  __syncthreads();
}

/* Calls body(r, len, part) for the thread's rows lo..hi-1 in order, from
 * registers when the run fits the cache (the common case: a few rows a
 * thread), else reading them again (L2). */
#define TSR_GP_ROW_CACHE 8
template <typename F>
static __device__ __forceinline__ void for_rows(const tsr_gpuplan_params &p, int lo, int hi, bool cached,
                                                const int (&clen)[TSR_GP_ROW_CACHE],
                                                const int (&cpart)[TSR_GP_ROW_CACHE], F body)
{
  if (cached) {
#pragma unroll
    for (int k = 0; k < TSR_GP_ROW_CACHE; ++k)
      if (lo + k < hi) body(lo + k, clen[k], cpart[k]);
  } else {
    for (int r = lo; r < hi; ++r) body(r, __ldcg(p.row_len + r), __ldcg(p.row_part + r));
  }
}

/* The scan over all rows by one CTA: each thread owns a run of consecutive
 * rows (read with __ldcg: other CTAs wrote them, and L1 is not coherent).
 * Pass 1: tiles, membership words and wanted slots.  Pass 2: split
 * decisions (a row splits while its wanted slots fit: the wanted prefix only
 * grows, so the granted rows are the first ones and their slots are
 * contiguous), merges and tasks per length class.  Pass 3: row offsets. */
static __device__ void scan_rows(const tsr_gpuplan_params &p)
{
  __shared__ long long sm1[33][3];
  __shared__ int sm2[33][2 + TSR_GP_CLASSES];
  const int per = (p.n_rows + blockDim.x - 1) / blockDim.x;
  const int lo = min(p.n_rows, (int)threadIdx.x * per), hi = min(p.n_rows, lo + per);
  const int wn = p.bn / 32;
  const bool cached = per <= TSR_GP_ROW_CACHE;
  long long v1[3] = {0, 0, 0}, t1[3];
  int v2[2 + TSR_GP_CLASSES], t2[2 + TSR_GP_CLASSES];
  int clen[TSR_GP_ROW_CACHE], cpart[TSR_GP_ROW_CACHE];

  if (cached) {
#pragma unroll
    for (int k = 0; k < TSR_GP_ROW_CACHE; ++k) {
      clen[k] = lo + k < hi ? __ldcg(p.row_len + lo + k) : 0;
      cpart[k] = lo + k < hi ? __ldcg(p.row_part + lo + k) : 0;
    }
  }
  for_rows(p, lo, hi, cached, clen, cpart, [&](int r, int len, int part) {
    v1[0] += len;
    v1[1] += (long long)part * row_geo(p, r).nseg * wn;
    v1[2] += want_chunks(p, len);
  });
  block_exscan<long long, 3>(v1, t1, sm1);

#pragma unroll
  for (int k = 0; k < 2 + TSR_GP_CLASSES; ++k) v2[k] = 0;
  {
    long long slot = v1[2];
    for_rows(p, lo, hi, cached, clen, cpart, [&](int r, int len, int part) {
      const int want = want_chunks(p, len);
      const bool split = want > 0 && slot + want <= p.cap_slots;
      slot += want;
      if (len == 0) {
        v2[2 + TSR_GP_CLASSES - 1] += 1;
        return;
      }
      const int nch = split ? want : 1, q = len / nch, big = len - nch * q;
      v2[0] += split;
      v2[1] += split ? want : 0;
      v2[2 + len_class(q)] += nch - big;
      v2[2 + len_class(q + 1)] += big;
    });
  }
  block_exscan<int, 2 + TSR_GP_CLASSES>(v2, t2, sm2);

  {
    long long tile = v1[0], word = v1[1], slot = v1[2];
    int merge = v2[0], cls[TSR_GP_CLASSES];
#pragma unroll
    for (int c = 0; c < TSR_GP_CLASSES; ++c) cls[c] = v2[2 + c];
    for_rows(p, lo, hi, cached, clen, cpart, [&](int r, int len, int part) {
      const int want = want_chunks(p, len);
      const bool split = want > 0 && slot + want <= p.cap_slots;
      tsr_i32 *o = p.row_off + (long long)r * TSR_GP_ROW_INTS;
      o[0] = (tsr_i32)tile;
      o[1] = (tsr_i32)word;
      o[2] = split ? (tsr_i32)slot : -1;
      o[3] = split ? merge : -1;
      tile += len;
      word += (long long)part * row_geo(p, r).nseg * wn;
      slot += want;
      if (len == 0) {
        o[4] = o[5] = cls[TSR_GP_CLASSES - 1]++;
        return;
      }
      const int nch = split ? want : 1, q = len / nch, big = len - nch * q;
      const int ca = len_class(q), cb = len_class(q + 1);
      merge += split;
      /* Short chunks first in their class, then long ones; when both
       * lengths share a class the row's chunks are consecutive there. */
      o[4] = cls[ca];
      cls[ca] += nch - big;
      o[5] = ca == cb ? o[4] : cls[cb];
      cls[cb] += big;
    });
  }

  if (threadIdx.x == 0) {
    long long tasks = 0;
    const long long tiles = t1[0], words = t1[1];
    int base = 0;
    for (int c = 0; c < TSR_GP_CLASSES; ++c) {
      p.counts[TSR_GP_CLASS_BASE + c] = base;
      base += t2[2 + c];
    }
    tasks = base;
    const int overflow = tiles > p.cap_tiles || words > p.cap_words || tasks > p.cap_tasks;
    p.counts[TSR_GP_OVERFLOW] = overflow;
    p.counts[TSR_GP_TASKS] = overflow ? 0 : (tsr_i32)tasks;
    p.counts[TSR_GP_MERGES] = overflow ? 0 : t2[0];
    p.counts[TSR_GP_TILES] = (tsr_i32)min(tiles, (long long)0x7fffffff);
    p.counts[TSR_GP_WORDS] = (tsr_i32)min(words, (long long)0x7fffffff);
    p.counts[TSR_GP_SLOTS] = t2[1];
    p.counts[TSR_GP_EMPTY] = t2[2 + TSR_GP_CLASSES - 1];
    const int step = p.counts[TSR_GP_STEP] + 1;
    p.counts[TSR_GP_STEP] = step;
    {
      /* Features from the count kernel's sums: selected key tokens x per
       * query token, token-weighted; mean E[x], spread sqrt(E[x^2] - E[x]^2).
       * Device memory only: tsr_plan_emit publishes them to the host. */
      const double tokens = (double)p.batch * p.heads_q * p.seq_q;
      const double s1 = (double)__ldcg(p.acc + TSR_GP_ACC_SEL), s2 = (double)__ldcg(p.acc + TSR_GP_ACC_SEL2);
      const double mean = s1 / tokens, var = fmax(s2 / tokens - mean * mean, 0.0);
      tsr_gp_stats *st = (tsr_gp_stats *)(p.counts + TSR_GP_DSTATS);
      st->density = s1 / (tokens * p.seq_k);
      st->row_cv = mean > 0 ? sqrt(var) / mean : 0.0;
      st->empty_rows = (double)t2[2 + TSR_GP_CLASSES - 1] / p.n_rows;
      st->tiles = tiles;
      st->partial_tiles = __ldcg(p.counts + TSR_GP_PARTIAL);
      st->tasks = tasks;
      st->merges = t2[0];
      st->slots = t2[1];
      st->membership_words = words;
      st->overflow = overflow;
      st->step = step;
    }
    /* Ready for the next step (graph replays included). */
    p.acc[TSR_GP_ACC_SEL] = 0;
    p.acc[TSR_GP_ACC_SEL2] = 0;
    p.counts[TSR_GP_PARTIAL] = 0;
    p.counts[TSR_GP_DONE] = 0;
  }
}

}  // namespace tsrgp

extern "C" __global__ void __launch_bounds__(TSR_GP_COUNT_THREADS)
    tsr_plan_count(const __grid_constant__ tsr_gpuplan_params p)
{
  using namespace tsrgp;
  /* Per-warp sums, added up by thread 0 (no shared atomics). */
  __shared__ unsigned long long s_sel[TSR_GP_COUNT_THREADS / 32], s_sel2[TSR_GP_COUNT_THREADS / 32];
  __shared__ int s_part[TSR_GP_COUNT_THREADS / 32], s_last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = blockIdx.x * (TSR_GP_COUNT_THREADS / 32) + warp;
  if (lane == 0) {
    s_sel[warp] = s_sel2[warp] = 0;
    s_part[warp] = 0;
  }
  if (r < p.n_rows) {
    const rowgeo g = row_geo(p, r);
    const bool simple = g.nseg == 1 && p.bk % p.bn == 0;
    int len = 0, part = 0;
    long long xs = 0; /* simple rows: selected key tokens, from the tiles */
    for (int u0 = 0; u0 < p.nkt; u0 += 128) {
      bool any[4], full[4];
      tile_states4(p, g, simple, u0, lane, any, full);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        len += __popc(__ballot_sync(0xffffffffu, any[k]));
        part += __popc(__ballot_sync(0xffffffffu, any[k] && !full[k]));
        if (simple && any[k]) {
          const int c0 = (u0 + 32 * k + lane) * p.bn;
          xs += min(c0 + p.bn, p.seq_k) - c0;
        }
      }
    }
    /* Features: selected key tokens x of each segment (a logical row's),
     * weighted by the segment's query tokens w in this tile. */
    unsigned long long sel = 0, sel2 = 0;
    if (simple) {
      const long long x = warp_sum(xs), w = g.r1 - g.r0;
      sel = (unsigned long long)(w * x);
      sel2 = (unsigned long long)(w * x) * (unsigned long long)x;
    } else {
      for (int s = 0; s < g.nseg; ++s) {
        long long x = 0;
#pragma unroll 4
        for (int j = lane; j < p.nk; j += 32)
          if (mask_bit(p, g, s, j)) x += min((j + 1) * p.bk, p.seq_k) - j * p.bk;
        x = warp_sum(x);
        const long long w = min(g.r1, (g.i0 + s + 1) * p.bq) - max(g.r0, (g.i0 + s) * p.bq);
        sel += (unsigned long long)(w * x);
        sel2 += (unsigned long long)(w * x) * (unsigned long long)x;
      }
    }
    if (lane == 0) {
      p.row_len[r] = len;
      p.row_part[r] = part;
      s_sel[warp] = sel;
      s_sel2[warp] = sel2;
      s_part[warp] = part;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long a = 0, a2 = 0;
    int pt = 0;
    for (int w = 0; w < TSR_GP_COUNT_THREADS / 32; ++w) {
      a += s_sel[w];
      a2 += s_sel2[w];
      pt += s_part[w];
    }
    atomicAdd(&p.acc[TSR_GP_ACC_SEL], a);
    atomicAdd(&p.acc[TSR_GP_ACC_SEL2], a2);
    atomicAdd(&p.counts[TSR_GP_PARTIAL], pt);
    __threadfence();
    const unsigned ticket = atomicAdd((unsigned *)&p.counts[TSR_GP_DONE], 1u);
    s_last = ticket == gridDim.x - 1;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence(); /* every other CTA's rows and sums are visible */
  scan_rows(p);
}

/* Copies the device features to the host-visible record: step = -1, the
 * fields, then the step, each group behind a system-scope fence (a seqlock
 * for tsr_gpuplan_stats_read).  Done by the emit kernel's first thread,
 * whose CTA is scheduled first, so the fences' latency hides behind the
 * other CTAs' work instead of delaying the plan. */
static __device__ void publish_stats(const tsr_gpuplan_params &p)
{
  const tsr_gp_stats *d = (const tsr_gp_stats *)(p.counts + TSR_GP_DSTATS);
  volatile tsr_gp_stats *h = p.stats;
  h->step = -1;
  __threadfence_system();
  h->density = d->density;
  h->row_cv = d->row_cv;
  h->empty_rows = d->empty_rows;
  h->tiles = d->tiles;
  h->partial_tiles = d->partial_tiles;
  h->tasks = d->tasks;
  h->merges = d->merges;
  h->slots = d->slots;
  h->membership_words = d->membership_words;
  h->overflow = d->overflow;
  __threadfence_system();
  h->step = d->step;
}

/* At most 64 registers: at least four CTAs of 256 threads resident a
 * multiprocessor, so that many rows' mask reads are in flight. */
extern "C" __global__ void __launch_bounds__(TSR_GP_EMIT_THREADS, 4)
    tsr_plan_emit(const __grid_constant__ tsr_gpuplan_params p)
{
  using namespace tsrgp;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = blockIdx.x * (TSR_GP_EMIT_THREADS / 32) + warp;
  if (p.stats && blockIdx.x == 0 && threadIdx.x == 0) publish_stats(p);
  if (r >= p.n_rows || p.counts[TSR_GP_OVERFLOW]) return;
  const rowgeo g = row_geo(p, r);
  const tsr_i32 *ro = p.row_off + (long long)r * TSR_GP_ROW_INTS;
  const int len = p.row_len[r], tile0 = ro[0], word0 = ro[1], slot = ro[2];
  const int wn = p.bn / 32, seg_words = g.nseg * wn;
  const unsigned below = (1u << lane) - 1u;
  const bool simple = g.nseg == 1 && p.bk % p.bn == 0;
  int n = 0, np = 0;

  for (int u0 = 0; u0 < p.nkt; u0 += 128) {
    bool anyk[4], fullk[4];
    tile_states4(p, g, simple, u0, lane, anyk, fullk);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int u = u0 + 32 * k + lane;
      const bool any = anyk[k], full = fullk[k];
      const unsigned ba = __ballot_sync(0xffffffffu, any);
      const unsigned bp = __ballot_sync(0xffffffffu, any && !full);
      if (any) {
        tsr_tile_rec tr;
        tr.k_tile = u;
        tr.mem = -1;
        if (!full) {
          tr.mem = word0 + (np + __popc(bp & below)) * seg_words;
          const int base = u * p.bn;
          for (int s = 0; s < g.nseg; ++s)
            for (int w = 0; w < wn; ++w) {
              const int c0 = base + w * 32, c1 = min(c0 + 32, p.seq_k);
              unsigned word = 0;
              /* Columns past seq_k (a ragged last tile) stay clear. */
              for (int j = c0 / p.bk; c0 < c1 && j * p.bk < c1; ++j)
                if (mask_bit(p, g, s, j)) {
                  const int a = max(j * p.bk, c0) - c0, e = min((j + 1) * p.bk, c1) - c0;
                  word |= (e - a == 32 ? 0xffffffffu : ((1u << (e - a)) - 1u)) << a;
                }
              p.membership[tr.mem + s * wn + w] = word;
            }
        }
        p.tiles[tile0 + n + __popc(ba & below)] = tr;
      }
      n += __popc(ba);
      np += __popc(bp);
    }
  }

  tsr_member_rec mr;
  mr.batch = g.b;
  mr.head = g.h;
  mr.q_tile = g.t;
  mr.pad = 0;
  if (len == 0) {
    if (lane == 0) {
      const int pos = p.counts[TSR_GP_CLASS_BASE + TSR_GP_CLASSES - 1] + ro[4];
      tsr_task_rec tk;
      tk.batch = g.b;
      tk.head = g.h;
      tk.q_tile = g.t;
      tk.tile_begin = tk.tile_end = tile0;
      tk.member_begin = pos;
      tk.n_members = 1;
      tk.partial = -1;
      p.tasks[pos] = tk;
      p.members[pos] = mr;
    }
    return;
  }
  const int nch = slot >= 0 ? want_chunks(p, len) : 1, q = len / nch;
  const int ca = len_class(q), cb = len_class(q + 1);
  for (int k = lane; k < nch; k += 32) {
    const int tb = (int)((long long)k * len / nch), te = (int)((long long)(k + 1) * len / nch);
    const int size = te - tb, big_before = tb - k * q;
    const bool is_big = size == q + 1;
    const int idx = ca == cb ? k : is_big ? big_before : k - big_before;
    const int pos = p.counts[TSR_GP_CLASS_BASE + (is_big ? cb : ca)] + (is_big ? ro[5] : ro[4]) + idx;
    tsr_task_rec tk;
    tk.batch = g.b;
    tk.head = g.h;
    tk.q_tile = g.t;
    tk.tile_begin = tile0 + tb;
    tk.tile_end = tile0 + te;
    tk.member_begin = pos;
    tk.n_members = 1;
    tk.partial = slot >= 0 ? slot + k : -1;
    p.tasks[pos] = tk;
    p.members[pos] = mr;
  }
  if (slot >= 0 && lane == 0) {
    tsr_merge_rec mg;
    mg.batch = g.b;
    mg.head = g.h;
    mg.q_tile = g.t;
    mg.slot_begin = slot;
    mg.n_slots = nch;
    mg.pad[0] = mg.pad[1] = mg.pad[2] = 0;
    p.merges[ro[3]] = mg;
  }
}

#endif

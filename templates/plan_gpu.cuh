/*
 * plan_gpu.cuh: planning on the GPU.  Turns a device-resident block mask
 * (bytes or bits) into the tile, membership, task, member and merge records
 * of plan_layout.h, on the caller's stream, for the attention kernel of the
 * same stream to consume; no host synchronisation, nothing allocated.
 * tessera-gen compiles it alone, once a target, into <arch>/tsr_plan.cubin
 * of the bundle (registry "planner"); it needs only plan_layout.h.
 *
 * Scope (runtime/gpuplan.c checks it): uniform blocks bq x bk (ragged last
 * blocks) or variable blocks (p.koff != NULL: block starts and each token's
 * block, uploaded once a template), any tile BM x BN, or gather plans
 * (p.gather: uniform blocks, bq == BM, 2 bk == BN, each tile two selected
 * key blocks, plan_layout.h "Gather plans"); row tasks, optionally
 * split into near-equal chunks of at most `chunk` key tiles (the host planner's rule), merged
 * through partial slots while the slot capacity lasts (later rows then stay
 * whole); an empty row is one task without tiles (it writes zeros and
 * lse = -inf).  Tasks are in the host planner's order (runtime/tasks.c):
 * by (batch, KV head) group, longest first inside a group, ties in
 * creation order (rows in order, a row's chunks in order), then every
 * other round of num_sms tasks reversed (the snake); for row and split
 * tasks the device plan is then byte-identical to tsr_plan_create's
 * (tests/gpu_plan checks it).
 *
 * Two launches:
 *   tsr_plan_count  one warp per problem row, TSR_GP_COUNT_ROWS rows a CTA:
 *                   the row's tiles and partial tiles (the OR / AND of the
 *                   mask bits under each tile) and the features' sums; a
 *                   CTA scan of the rows' values, then a decoupled look-back
 *                   over the earlier CTAs' published aggregates / inclusive
 *                   prefixes gives every row its offsets (split rows: a
 *                   second look-back, as the split decisions need the
 *                   wanted-slot prefix).  The last CTA writes the counts
 *                   and the features.
 *   tsr_plan_emit   one warp per row: the row's tiles and membership words
 *                   (ballot / scan + popc give positions), the positions of
 *                   its tasks in the host's order (a pass over its group's
 *                   task lengths), its tasks, members and merge record, at
 *                   the snaked positions.  On sm_90 and later emit is a
 *                   programmatic dependent launch: it starts while the
 *                   count kernel runs, reads the mask, then waits for it.
 * Direct rows (one query segment, tile = key block: retain mappings; and
 * gather rows, whose tiles pair the row's selected blocks) take a fast path
 * in both kernels: a 32-bit mask word a lane (4 byte blocks or 32 bits), no
 * per-tile division.  Other rows use the general per-tile OR/AND.
 * Cost: reads the mask twice (plus once per segment for the features of
 * general rows), writes the plan; latency-bound: a few dependent memory
 * round trips a kernel (mask, look-back flags and values, fences), about
 * 1 us each under load, plus the launches (notes/gpuplan.md); the
 * ranking adds group rows / 32 loads a lane to each emit warp.
 */
#ifndef TSR_PLAN_GPU_CUH
#define TSR_PLAN_GPU_CUH

#define TSR_GP_COUNT_THREADS (32 * TSR_GP_COUNT_ROWS)

/* Development timeline (tests/device/plan_probe.cu builds the template with
 * TSR_GP_TIMELINE): thread 0 of each CTA stores %globaltimer at marks k
 * after the look-back state; count CTA c at scan[n_cta * STRIDE + 8 c + k],
 * emit CTA e at 8 n_cta words further, + 4 e + k.  Empty otherwise. */
#ifdef TSR_GP_TIMELINE
#define TSR_GP_NCTA ((p.n_rows + TSR_GP_COUNT_ROWS - 1) / TSR_GP_COUNT_ROWS)
#define TSR_GP_STAMP(off)                                                        \
  do {                                                                           \
    if (threadIdx.x == 0) {                                                      \
      unsigned long long t_;                                                     \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                     \
      p.scan[(long long)TSR_GP_NCTA * TSR_GP_SCAN_STRIDE + (off)] = t_;           \
    }                                                                            \
  } while (0)
#define TSR_GP_MARK(k) TSR_GP_STAMP(8LL * blockIdx.x + (k))
#define TSR_GP_EMARK(k) TSR_GP_STAMP(8LL * TSR_GP_NCTA + 4LL * blockIdx.x + (k))
/* Per row (lane 0 of its warp): 3 r + k after the emit CTAs' marks (count:
 * k = 0 row counted; emit: 1 tiles written, 2 row done). */
#define TSR_GP_RMARK(r, k)                                                       \
  do {                                                                           \
    if ((threadIdx.x & 31) == 0) {                                               \
      unsigned long long t_;                                                     \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                     \
      p.scan[(long long)TSR_GP_NCTA * TSR_GP_SCAN_STRIDE + 8LL * TSR_GP_NCTA +   \
             4LL * ((p.n_rows + 7) / 8) + 3LL * (r) + (k)] = t_;                   \
    }                                                                            \
  } while (0)
#else
#define TSR_GP_MARK(k) ((void)0)
#define TSR_GP_EMARK(k) ((void)0)
#define TSR_GP_RMARK(r, k) ((void)0)
#endif
#define TSR_GP_EMIT_THREADS 256

namespace tsrgp {

/* Block geometry: uniform (bq, bk) or variable (the token-to-block maps and
 * block starts of p.qblk / p.kblk / p.qoff / p.koff).  Starts are not
 * clipped for uniform blocks: callers clip to the tile or seq_k. */
static __device__ __forceinline__ int kblock(const tsr_gpuplan_params &p, int c)
{
  return p.kblk ? __ldg(p.kblk + c) : c / p.bk;
}

static __device__ __forceinline__ int kstart(const tsr_gpuplan_params &p, int j)
{
  return p.koff ? __ldg(p.koff + j) : j * p.bk;
}

static __device__ __forceinline__ int qstart(const tsr_gpuplan_params &p, int i)
{
  return p.qoff ? __ldg(p.qoff + i) : i * p.bq;
}

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
  if (p.qblk) {
    g.i0 = __ldg(p.qblk + g.r0);
    g.nseg = __ldg(p.qblk + g.r1 - 1) - g.i0 + 1;
  } else {
    g.i0 = g.r0 / p.bq;
    g.nseg = (g.r1 - 1) / p.bq - g.i0 + 1;
  }
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
  const int kb0 = kblock(p, c0), kb1 = kblock(p, c1 - 1);
  any = false;
  full = true;
  for (int s = 0; s < g.nseg; ++s)
    for (int j = kb0; j <= kb1; ++j) {
      const bool x = mask_bit(p, g, s, j);
      any |= x;
      full &= x;
    }
}

/* Staged rows (variable geometries whose segments' mask rows fit
 * TSR_GP_VSEG * TSR_GP_VWORDS words: segments x ceil(nk / 32)): the warp
 * first copies its segments' mask rows as bits into shared memory
 * (sw[s * ceil(nk / 32) + q]; VSA's boundary cubes of Wan2.1 give rows of
 * up to 14 segments over 624 cubes at 128-row tiles, 20 words a segment:
 * 280 words, hence 320, the most the count kernel's 32 rows fit in 48 KB
 * of static shared memory beside its scan), and a tile's
 * state is then a bit-range test over the key blocks the tile covers
 * (p.tkb, per key tile, computed once a template) instead of a global load
 * per (segment, block): with few heads the planner runs on few SMs and is
 * bound by those instructions and loads. */
#define TSR_GP_VSEG 5
#define TSR_GP_VWORDS 64

static __device__ __forceinline__ bool is_staged(const tsr_gpuplan_params &p, const rowgeo &g)
{
  return p.tkb && g.nseg * ((p.nk + 31) >> 5) <= TSR_GP_VSEG * TSR_GP_VWORDS;
}

/* The emit kernel keeps the segments for the membership words, and the
 * union / intersection rows (stage_ui) beside them: rows of several
 * segments need room for two more. */
static __device__ __forceinline__ bool is_staged_emit(const tsr_gpuplan_params &p, const rowgeo &g)
{
  return p.tkb && (g.nseg + (g.nseg > 1 ? 2 : 0)) * ((p.nk + 31) >> 5) <= TSR_GP_VSEG * TSR_GP_VWORDS;
}

/* Copies the row's segments as bits (bits past nk clear).  Warp-wide.
 * Word i = s * nw + q of the staged row is lane i % 32's: every segment's
 * words in one pass, so a row of several segments takes one load round
 * trip a 32 words, not one a segment (VSA's boundary tiles: 4-7 segments of
 * 20 words, each pass leaving 12 lanes idle). */
static __device__ void stage_row(const tsr_gpuplan_params &p, const rowgeo &g, int lane, unsigned *sw)
{
  const int nw = (p.nk + 31) >> 5, n = g.nseg * nw;
  const bool aligned = p.format == 0 && (p.pitch & 3) == 0 && ((unsigned long long)p.mask & 3) == 0;
  /* (s, q) of word i, advanced by 32 words a pass without a division */
  const int ds = 32 / nw, dq = 32 - ds * nw;
  int s = lane / nw, q = lane - s * nw;
  for (int i = lane; i < n; i += 32) {
    const long long row = g.plane + g.i0 + s;
    unsigned w = 0;
    if (p.format != 0) {
      w = __ldg((const unsigned *)p.mask + row * p.pitch + q);
    } else if (aligned) {
      /* pitch = nk is a multiple of 4 here: whole words stay in the row */
      const unsigned *src = (const unsigned *)((const unsigned char *)p.mask + row * p.pitch) + 8 * q;
      unsigned x[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = 32 * q + 4 * k < p.nk ? __ldg(src + k) : 0u;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const unsigned y = __vcmpne4(x[k], 0u);
        w |= ((y & 1u) | (y >> 7 & 2u) | (y >> 14 & 4u) | (y >> 21 & 8u)) << (4 * k);
      }
    } else {
      const unsigned char *src = (const unsigned char *)p.mask + row * p.pitch + 32 * q;
      for (int k = 0; k < 32 && 32 * q + k < p.nk; ++k) w |= (unsigned)(__ldg(src + k) != 0) << k;
    }
    const int rem = p.nk - 32 * q;
    sw[i] = rem >= 32 ? w : w & ((1u << rem) - 1u);
    s += ds;
    q += dq;
    if (q >= nw) {
      q -= nw;
      ++s;
    }
  }
  __syncwarp();
}

static __device__ __forceinline__ bool staged_bit(const unsigned *sw, int nw, int s, int j)
{
  return (sw[s * nw + (j >> 5)] >> (j & 31)) & 1u;
}

/* Union and intersection of a staged row's segments: ui[q] = OR,
 * ui[nw + q] = AND over the segments of word q, so that a tile's state is
 * two range tests instead of one a segment.  ui may be sw itself (after the
 * last use of the segments): a lane reads and writes only its own columns
 * q, and its writes (words q and nw + q) are none of the words its later
 * columns read.  Warp-wide. */
static __device__ __forceinline__ void stage_ui(const rowgeo &g, int nw, int lane, const unsigned *sw, unsigned *ui)
{
  for (int q = lane; q < nw; q += 32) {
    unsigned u = 0u, a = ~0u;
    for (int s = 0; s < g.nseg; ++s) {
      const unsigned x = sw[s * nw + q];
      u |= x;
      a &= x;
    }
    ui[q] = u;
    ui[nw + q] = a;
  }
  __syncwarp();
}

/* Key blocks [a, b] from the union row un and the intersection row in:
 * any, all selected.  Most tiles' blocks lie in one word (VSA's cubes:
 * every tile): one mask, two shared loads; else a loop over the words.
 * a > b (a tile past nkt): none selected, all "full". */
static __device__ __forceinline__ void ui_state(const unsigned *un, const unsigned *in, int a, int b, bool &any,
                                                bool &full)
{
  const int qa = a >> 5, qb = b >> 5;
  if (qa == qb && a <= b) {
    const unsigned m = ((2u << (b - a)) - 1u) << (a & 31); /* b - a = 31: 2u << 31 = 0, all ones */
    any = (un[qa] & m) != 0u;
    full = (in[qa] & m) == m;
    return;
  }
  any = false;
  full = true;
  for (int q = qa; q <= qb; ++q) {
    const int lo = q == qa ? (a & 31) : 0, hi = q == qb ? (b & 31) : 31;
    const unsigned m = ((2u << (hi - lo)) - 1u) << lo;
    any |= (un[q] & m) != 0u;
    full &= (in[q] & m) == m;
  }
}

/* Membership words over key columns 32 q .. 32 q + 31 (clear past seq_k)
 * of every staged segment, at d[s * stride]: the column's blocks come from
 * the word table (p.kcw: the first, and the columns where the others
 * start) once, then each segment's mask bits of those blocks as one
 * funnel-shifted word, each selected block's columns set.  Shared memory
 * and ALU work only: no walk over the block starts in global memory.  One
 * table load serves all segments of a column, so a row of many segments
 * (VSA's boundary tiles: 4-7) is not one dependent load chain a word. */
static __device__ __forceinline__ void staged_words(const tsr_gpuplan_params &p, const unsigned *sw, int nw,
                                                    int nseg, int q, tsr_u32 *d, int stride)
{
  if (32 * q >= p.seq_k) { /* a ragged last tile's words past the keys */
    for (int s = 0; s < nseg; ++s) d[s * stride] = 0u;
    return;
  }
  const int2 e = __ldg((const int2 *)p.kcw + q);
  const int qw = e.x >> 5, rem = p.seq_k - 32 * q;
  const unsigned keep = rem >= 32 ? 0xffffffffu : (1u << rem) - 1u, starts0 = (unsigned)e.y & ~1u;
  for (int s = 0; s < nseg; ++s) {
    const unsigned *row = sw + s * nw;
    const unsigned lo = row[qw], hi = qw + 1 < nw ? row[qw + 1] : 0u;
    unsigned x = __funnelshift_r(lo, hi, e.x & 31); /* bit k: block e.x + k selected */
    unsigned starts = starts0, word = 0;
    if (!starts) {
      word = 0u - (x & 1u); /* one block covers the word (the usual case) */
    } else {
      int a = 0;
      while (x) {
        const int b = starts ? __ffs(starts) - 1 : 32;
        if (x & 1u) word |= (b - a == 32 ? 0xffffffffu : ((1u << (b - a)) - 1u)) << a;
        x >>= 1;
        if (!starts) break;
        starts &= starts - 1u;
        a = b;
      }
    }
    d[s * stride] = word & keep;
  }
}

/* Tiles u0 + 32 k + lane (k < 4): the loads first, so that each lane has
 * four mask reads in flight.  simple: one segment and every key tile inside
 * one key block, so a tile is one mask bit.  sw: the staged row, or NULL. */
static __device__ __forceinline__ void tile_states4(const tsr_gpuplan_params &p, const rowgeo &g,
                                                    bool simple, const unsigned *sw, const unsigned *ui, int u0,
                                                    int lane, bool (&any)[4], bool (&full)[4])
{
  if (sw) {
    const int nw = (p.nk + 31) >> 5;
    int2 kb[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int u = u0 + 32 * k + lane;
      kb[k] = u < p.nkt ? __ldg((const int2 *)p.tkb + u) : make_int2(0, -1);
    }
    /* one segment: the row is its own union and intersection; rows of
     * several always come with ui (count: in place; emit: beside them) */
    const unsigned *un = ui ? ui : sw, *in = ui ? ui + nw : sw;
#pragma unroll
    for (int k = 0; k < 4; ++k) ui_state(un, in, kb[k].x, kb[k].y, any[k], full[k]);
    return;
  }
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

/* Direct rows: one query segment and tile = key block (retain on the key
 * side, uniform blocks), so tile u is mask bit (row, u); or a gather row
 * (one segment, as bq == BM), whose i-th selected block is half i % 2 of
 * its tile i / 2.  The row is read in units of a 32-bit word a lane where
 * the layout allows: mode 0 bit-packed (a unit is 32 blocks), mode 1 bytes
 * with word-aligned rows (4 blocks), mode 2 bytes otherwise (1 block).
 * unit_bits gives bit t of the unit = block unit * blocks_per_unit + t
 * selected; blocks past nk read as clear. */
static __device__ __forceinline__ bool is_direct(const tsr_gpuplan_params &p, const rowgeo &g)
{
  return !p.koff && g.nseg == 1 && (p.bn == p.bk || p.gather);
}

static __device__ __forceinline__ int unit_mode(const tsr_gpuplan_params &p)
{
  if (p.format != 0) return 0;
  return (p.pitch & 3) == 0 && ((unsigned long long)p.mask & 3) == 0 ? 1 : 2;
}

static __device__ __forceinline__ int unit_shift(int mode) { return mode == 0 ? 5 : mode == 1 ? 2 : 0; }

static __device__ __forceinline__ unsigned unit_bits(const tsr_gpuplan_params &p, long long row, int mode,
                                                     int u)
{
  if (mode == 0) {
    const unsigned w = __ldg((const unsigned *)p.mask + row * p.pitch + u);
    const int rem = p.nk - 32 * u;
    return rem >= 32 ? w : w & ((1u << rem) - 1u);
  }
  if (mode == 1) {
    const unsigned w = __ldg((const unsigned *)((const unsigned char *)p.mask + row * p.pitch) + u);
    const unsigned x = __vcmpne4(w, 0u); /* 0xff in each nonzero byte */
    const unsigned b = (x & 1u) | (x >> 7 & 2u) | (x >> 14 & 4u) | (x >> 21 & 8u);
    const int rem = p.nk - 4 * u;
    return rem >= 4 ? b : b & ((1u << rem) - 1u);
  }
  return __ldg((const unsigned char *)p.mask + row * p.pitch + u) != 0;
}

/* A direct row's selected blocks (its tiles, but for gather rows), and
 * whether its last block is selected (it may be ragged: the features count
 * tokens). */
static __device__ __forceinline__ int direct_count(const tsr_gpuplan_params &p, const rowgeo &g, int lane,
                                                   bool &last_sel)
{
  const int mode = unit_mode(p), sh = unit_shift(mode), nu = ((p.nk - 1) >> sh) + 1;
  const long long row = g.plane + g.i0;
  const int ul = (p.nk - 1) >> sh, bl = (p.nk - 1) - (ul << sh);
  int cnt = 0;
  bool last = false;
  for (int u0 = 0; u0 < nu; u0 += 128) {
    unsigned b[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int u = u0 + 32 * k + lane;
      b[k] = u < nu ? unit_bits(p, row, mode, u) : 0u;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      cnt += __popc(b[k]);
      if (u0 + 32 * k + lane == ul) last = (b[k] >> bl) & 1u;
    }
  }
  last_sel = __any_sync(0xffffffffu, last);
  return (int)__reduce_add_sync(0xffffffffu, (unsigned)cnt);
}

/* General rows: tiles, partial tiles and the features' sums (selected key
 * tokens x of each segment, weighted by its query tokens w in this tile). */
static __device__ void general_count(const tsr_gpuplan_params &p, const rowgeo &g, unsigned *sw, int lane,
                                     int &len_out, int &part_out, unsigned long long &sel,
                                     unsigned long long &sel2)
{
  const bool simple = !p.koff && g.nseg == 1 && p.bk % p.bn == 0;
  int len = 0, part = 0;
  long long xs = 0; /* simple rows: selected key tokens, from the tiles */
  /* The features of non-simple rows first: they need the segments, which
   * the union / intersection rows then replace. */
  sel = sel2 = 0;
  if (!simple) {
    for (int s = 0; s < g.nseg; ++s) {
      long long x = 0;
      if (sw) {
        /* a word of blocks a lane, its set bits' sizes */
        for (int q = lane; q < (p.nk + 31) >> 5; q += 32)
          for (unsigned bits = sw[s * ((p.nk + 31) >> 5) + q]; bits; bits &= bits - 1u) {
            const int j = 32 * q + __ffs(bits) - 1;
            x += __ldg(p.koff + j + 1) - __ldg(p.koff + j);
          }
      } else {
#pragma unroll 4
        for (int j = lane; j < p.nk; j += 32)
          if (mask_bit(p, g, s, j)) x += min(kstart(p, j + 1), p.seq_k) - kstart(p, j);
      }
      x = warp_sum(x);
      const long long w = min(g.r1, qstart(p, g.i0 + s + 1)) - max(g.r0, qstart(p, g.i0 + s));
      sel += (unsigned long long)(w * x);
      sel2 += (unsigned long long)(w * x) * (unsigned long long)x;
    }
  }
  const unsigned *ui = nullptr;
  if (sw && g.nseg > 1) {
    stage_ui(g, (p.nk + 31) >> 5, lane, sw, sw);
    ui = sw;
  }
  for (int u0 = 0; u0 < p.nkt; u0 += 128) {
    bool any[4], full[4];
    tile_states4(p, g, simple, sw, ui, u0, lane, any, full);
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
  if (simple) {
    const long long x = warp_sum(xs), w = g.r1 - g.r0;
    sel = (unsigned long long)(w * x);
    sel2 = (unsigned long long)(w * x) * (unsigned long long)x;
  }
  len_out = len;
  part_out = part;
}

/* Phase-2 values of a row (merges, granted slots, tasks, empty rows) into v. */
static __device__ __forceinline__ void phase2_values(const tsr_gpuplan_params &p, int len, bool split,
                                                     long long *v)
{
  const int want = want_chunks(p, len);
  v[6] = split;
  v[7] = split ? want : 0;
  v[8] = split ? want : 1;
  v[9] = len == 0;
}

#define TSR_GP_WINDOW 128 /* predecessors a look-back step inspects */

static __device__ __forceinline__ unsigned long long ld_flag(const unsigned long long *f)
{
  return *(const volatile unsigned long long *)f;
}

/* Values [lo, lo + n) of this CTA: s_v[row][k] holds each row's value and
 * becomes its exclusive prefix inside the CTA; s_tot[k] gets the CTA's
 * aggregate; then the look-back: publish the aggregate (CTA 0: its
 * inclusive prefix), sum the aggregates of the earlier CTAs back to the
 * first one that published its inclusive prefix, publish ours.  s_pre[k]
 * gets the CTA's exclusive prefix.  Called by every thread of the CTA; warp
 * k sums value lo + k, warp 0 reads the flags.  Earlier CTAs (lower
 * blockIdx) are running or done (see tsr_plan_count): the waits end. */
static __device__ void cta_scan_lookback(const tsr_gpuplan_params &p, int cta, unsigned long long epoch,
                                         int phase, int lo, int n, long long (*s_v)[TSR_GP_SCAN_VALS],
                                         long long *s_tot, long long *s_pre, int *s_ctl)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned long long *rec = p.scan + (long long)cta * TSR_GP_SCAN_STRIDE;
  if (warp < n) {
    const int k = lo + warp;
    const long long x0 = s_v[lane][k];
    long long x = x0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const long long y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    s_v[lane][k] = x - x0;
    if (lane == 31) {
      s_tot[k] = x;
      s_pre[k] = 0;
      /* CTA 0 has no predecessor: its aggregate is its inclusive prefix. */
      __stcg((long long *)rec + 2 + (cta == 0 ? TSR_GP_SCAN_VALS : 0) + k, x);
      __threadfence();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) *(volatile unsigned long long *)(rec + phase) = epoch << 2 | (cta == 0 ? 2u : 1u);
  if (phase == 0) TSR_GP_MARK(2);
  if (cta == 0) return; /* s_pre stays 0; the flags say the rest */
  /* Windows of 128 predecessors, lane l of warp 0 watching distances
   * l, l + 32, l + 64, l + 96 from `top`: one window covers a launch of
   * up to 129 CTAs (Wan2.1-1.3B has 96), so the usual look-back is one
   * round trip for the flags and one for the values. */
  for (int top = cta - 1;; top -= TSR_GP_WINDOW) {
    if (warp == 0) {
      int stop = TSR_GP_WINDOW;
#pragma unroll
      for (int j = TSR_GP_WINDOW / 32 - 1; j >= 0; --j) {
        const int i = top - lane - 32 * j;
        unsigned long long f = 0;
        if (i >= 0)
          do f = ld_flag(p.scan + (long long)i * TSR_GP_SCAN_STRIDE + phase);
          while ((f >> 2) != epoch);
        const unsigned incl = __ballot_sync(0xffffffffu, i >= 0 && (f & 3u) == 2u);
        if (incl) stop = 32 * j + __ffs(incl) - 1;
      }
      __threadfence(); /* the values behind the flags are visible */
      if (lane == 0) s_ctl[0] = stop;
    }
    __syncthreads();
    const int stop = s_ctl[0];
    if (warp < n) {
      const int k = lo + warp;
      long long x = 0;
#pragma unroll
      for (int j = 0; j < TSR_GP_WINDOW / 32; ++j) {
        const int d = lane + 32 * j, i = top - d;
        if (d <= stop && d < TSR_GP_WINDOW && i >= 0) {
          const long long *ri = (const long long *)p.scan + (long long)i * TSR_GP_SCAN_STRIDE + 2;
          x += __ldcg(ri + (d == stop ? TSR_GP_SCAN_VALS : 0) + k);
        }
      }
      x = warp_sum(x);
      if (lane == 0) s_pre[k] += x;
    }
    __syncthreads();
    if (stop < TSR_GP_WINDOW) break;
  }
  if (phase == 0) TSR_GP_MARK(3);
  if (warp < n && lane == 0) {
    const int k = lo + warp;
    __stcg((long long *)rec + 2 + TSR_GP_SCAN_VALS + k, s_pre[k] + s_tot[k]);
    __threadfence();
  }
  __syncthreads();
  if (threadIdx.x == 0) *(volatile unsigned long long *)(rec + phase) = epoch << 2 | 2u;
}

/* Counts, features and the features' host copy: the last CTA, from the
 * totals T of every value. */
static __device__ void write_counts(const tsr_gpuplan_params &p, const long long *pre, const long long *tot,
                                    int step)
{
  long long T[TSR_GP_SCAN_VALS];
#pragma unroll
  for (int k = 0; k < TSR_GP_SCAN_VALS; ++k) T[k] = pre[k] + tot[k];
  const long long tiles = T[0], words = T[1], tasks = T[8];
  const int overflow = tiles > p.cap_tiles || words > p.cap_words || tasks > p.cap_tasks;
  p.counts[TSR_GP_OVERFLOW] = overflow;
  p.counts[TSR_GP_TASKS] = overflow ? 0 : (tsr_i32)tasks;
  p.counts[TSR_GP_MERGES] = overflow ? 0 : (tsr_i32)T[6];
  p.counts[TSR_GP_TILES] = (tsr_i32)min(tiles, (long long)0x7fffffff);
  p.counts[TSR_GP_WORDS] = (tsr_i32)min(words, (long long)0x7fffffff);
  p.counts[TSR_GP_SLOTS] = (tsr_i32)T[7];
  p.counts[TSR_GP_EMPTY] = (tsr_i32)T[9];
  p.counts[TSR_GP_PARTIAL] = (tsr_i32)min(T[3], (long long)0x7fffffff);
  p.counts[TSR_GP_STEP] = step;
  /* Features from the sums: selected key tokens x per query token,
   * token-weighted; mean E[x], spread sqrt(E[x^2] - E[x]^2).  Device memory
   * only: tsr_plan_emit publishes them to the host. */
  const double tokens = (double)p.batch * p.heads_q * p.seq_q;
  const double s1 = (double)(unsigned long long)T[4], s2 = (double)(unsigned long long)T[5];
  const double mean = s1 / tokens, var = fmax(s2 / tokens - mean * mean, 0.0);
  tsr_gp_stats *st = (tsr_gp_stats *)(p.counts + TSR_GP_DSTATS);
  st->density = s1 / (tokens * p.seq_k);
  st->row_cv = mean > 0 ? sqrt(var) / mean : 0.0;
  st->empty_rows = (double)T[9] / p.n_rows;
  st->tiles = tiles;
  st->partial_tiles = T[3];
  st->tasks = tasks;
  st->merges = T[6];
  st->slots = T[7];
  st->membership_words = words;
  st->overflow = overflow;
  st->step = step;
}

/* A direct row's mask units u0 + 32 k + lane (k < 4), loads first. */
static __device__ __forceinline__ void direct_load4(const tsr_gpuplan_params &p, long long row, int mode, int nu,
                                                    int u0, int lane, unsigned (&b)[4])
{
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int u = u0 + 32 * k + lane;
    b[k] = u < nu ? unit_bits(p, row, mode, u) : 0u;
  }
}

/* A direct row's tile records, in key order from tile0: each lane's
 * selected blocks at the warp's exclusive scan of their counts.  b holds
 * the first 128 units, loaded before the wait for the count kernel.
 * Gather rows: read as ints, the row's tile records are its selected
 * blocks in order (k_tile, mem, k_tile, ...: the ascending pairs), so
 * block i of the row is one 4-byte store at int i from tile0 on, and an
 * odd count ends with mem = -1; no extra pass.  A uniform branch, not a
 * template: two inlined copies spilled on sm_120 (3 CTAs, 80 registers). */
static __device__ __forceinline__ void direct_tiles(const tsr_gpuplan_params &p, const rowgeo &g, int lane,
                                                    int tile0, unsigned (&b)[4])
{
  const bool G = p.gather;
  const int mode = unit_mode(p), sh = unit_shift(mode), nu = ((p.nk - 1) >> sh) + 1;
  const long long row = g.plane + g.i0;
  tsr_tile_rec *const tr = p.tiles + tile0;
  tsr_i32 *const half = (tsr_i32 *)tr; /* gather: the row's halves */
  int n = 0;
  for (int u0 = 0; u0 < nu; u0 += 128) {
    if (u0 > 0) direct_load4(p, row, mode, nu, u0, lane, b);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int c = __popc(b[k]);
      int x = c;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
      }
      int pos = n + x - c;
      const int t0 = (u0 + 32 * k + lane) << sh;
      for (unsigned bits = b[k]; bits; bits &= bits - 1u) {
        if (G) half[pos++] = t0 + __ffs(bits) - 1;
        else *(int2 *)&tr[pos++] = make_int2(t0 + __ffs(bits) - 1, -1);
      }
      n += __shfl_sync(0xffffffffu, x, 31);
    }
  }
  if (G && (n & 1) && lane == 0) half[n] = -1; /* the last tile has no second half */
}

}  // namespace tsrgp

extern "C" __global__ void __launch_bounds__(TSR_GP_COUNT_THREADS)
    tsr_plan_count(const __grid_constant__ tsr_gpuplan_params p)
{
  using namespace tsrgp;
  __shared__ long long s_v[TSR_GP_COUNT_ROWS][TSR_GP_SCAN_VALS];
  __shared__ long long s_tot[TSR_GP_SCAN_VALS], s_pre[TSR_GP_SCAN_VALS];
  __shared__ int s_step, s_ctl[1];
  __shared__ unsigned s_sw[TSR_GP_COUNT_ROWS][TSR_GP_VSEG * TSR_GP_VWORDS]; /* staged rows (40 KB) */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  /* The emit kernel (launched with programmatic stream serialisation
   * where the device has it) may start once every CTA here has: it reads
   * the mask meanwhile, and waits for this grid before reading its output. */
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  TSR_GP_MARK(0);
  /* The previous step, the look-back's epoch: loaded now, used once the
   * rows are counted, so that its round trip overlaps the mask loads
   * instead of holding them behind a barrier. */
  const int step0 = threadIdx.x == 0 ? *(volatile int *)&p.counts[TSR_GP_STEP] : 0;
  /* CTAs look back in blockIdx order: like CUB's single-pass scan, this
   * relies on CTAs being dispatched in index order, so that a CTA's
   * predecessors are running or done when it waits for them. */
  const int cta = blockIdx.x;
  const int r = cta * TSR_GP_COUNT_ROWS + warp;
  const int wn = p.bn / 32;
  const bool two = p.chunk > 0; /* split decisions need the wanted-slot prefix first */
  int len = 0, want = 0;
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < TSR_GP_SCAN_VALS; ++k) s_v[warp][k] = 0;
  if (r < p.n_rows) {
    const rowgeo g = row_geo(p, r);
    int part = 0;
    unsigned long long sel, sel2;
    if (is_direct(p, g)) {
      bool last;
      const int nsel = direct_count(p, g, lane, last);
      len = p.gather ? (nsel + 1) >> 1 : nsel; /* gather: two blocks a tile */
      const long long x = (long long)nsel * p.bk - (last ? (long long)p.nk * p.bk - p.seq_k : 0);
      const long long w = g.r1 - g.r0;
      sel = (unsigned long long)(w * x);
      sel2 = (unsigned long long)(w * x) * (unsigned long long)x;
    } else {
      const bool st = is_staged(p, g);
      if (st) stage_row(p, g, lane, s_sw[warp]);
      general_count(p, g, st ? s_sw[warp] : nullptr, lane, len, part, sel, sel2);
    }
    want = want_chunks(p, len);
    if (lane == 0) {
      long long *v = s_v[warp];
      v[0] = len;
      v[1] = (long long)part * g.nseg * wn;
      v[2] = want;
      v[3] = part;
      v[4] = (long long)sel;
      v[5] = (long long)sel2;
      if (!two) phase2_values(p, len, false, v);
      p.row_len[r] = len;
      p.row_part[r] = part;
    }
    TSR_GP_RMARK(r, 0);
  }
  if (threadIdx.x == 0) s_step = step0;
  __syncthreads();
  TSR_GP_MARK(1);
  const int step = s_step + 1;
  const unsigned long long epoch = (unsigned)step & 0x3fffffffu;
  cta_scan_lookback(p, cta, epoch, 0, 0, two ? 6 : TSR_GP_SCAN_VALS, s_v, s_tot, s_pre, s_ctl);
  __syncthreads();
  TSR_GP_MARK(4);
  /* A row splits while its wanted slots fit: the wanted prefix only grows,
   * so the granted rows are the first ones and their slots contiguous. */
  const long long slot = s_pre[2] + s_v[warp][2];
  const bool split = r < p.n_rows && want > 0 && slot + want <= p.cap_slots;
  if (two) {
    if (lane == 0 && r < p.n_rows) phase2_values(p, len, split, s_v[warp]);
    __syncthreads();
    cta_scan_lookback(p, cta, epoch, 1, 6, TSR_GP_SCAN_VALS - 6, s_v, s_tot, s_pre, s_ctl);
    __syncthreads();
  }
  if (r < p.n_rows && lane == 0) {
    const long long *pv = s_v[warp];
    tsr_i32 *o = p.row_off + (long long)r * TSR_GP_ROW_INTS;
    o[0] = (tsr_i32)(s_pre[0] + pv[0]);
    o[1] = (tsr_i32)(s_pre[1] + pv[1]);
    o[2] = split ? (tsr_i32)slot : -1;
    o[3] = split ? (tsr_i32)(s_pre[6] + pv[6]) : -1;
    o[4] = (tsr_i32)(s_pre[8] + pv[8]); /* tasks of the rows before (at a group's first row: its base) */
    p.row_task[r] = len | (split ? 1 << 30 : 0);
  }
  if (cta == (int)gridDim.x - 1 && threadIdx.x == 0) write_counts(p, s_pre, s_tot, step);
  TSR_GP_MARK(5);
}

/* Waits until the previous planning kernel's grid has completed and its
 * writes are visible (programmatic dependent launch, sm_90 on); a no-op when launched
 * without it, and before sm_90, where stream order already waited. */
static __device__ __forceinline__ void grid_dep_wait()
{
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
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

namespace tsrgp {

/* A general row's tile records and membership words: ballots of the
 * OR / AND per tile give the positions. */
static __device__ void general_tiles(const tsr_gpuplan_params &p, const rowgeo &g, const unsigned *sw,
                                     const unsigned *ui, int lane, int tile0, int word0, int *s_pl)
{
  const int wn = p.bn / 32, seg_words = g.nseg * wn;
  const unsigned below = (1u << lane) - 1u;
  const bool simple = !p.koff && g.nseg == 1 && p.bk % p.bn == 0;
  /* Staged rows with the word table: a group's partial tiles go to s_pl,
   * then the warp writes their words, a (tile, word column) pair a lane,
   * each pair's words of every segment (tile * seg_words + s * wn + w; the
   * division by multiply-high with m = ceil(2^32 / wn), exact while
   * i * wn < 2^32: here i < 128 wn and wn <= 8). */
  const bool wide = sw && p.kcw && s_pl;
  const unsigned m_wn = 0xffffffffu / (unsigned)wn + 1u; /* 0: wn = 1 */
  const int nw = (p.nk + 31) >> 5;
  int n = 0, np = 0;
  for (int u0 = 0; u0 < p.nkt; u0 += 128) {
    bool anyk[4], fullk[4];
    tile_states4(p, g, simple, sw, ui, u0, lane, anyk, fullk);
    const int np0 = np;
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
          if (wide) {
            s_pl[np - np0 + __popc(bp & below)] = u;
          } else if (sw) {
            /* Staged: the tile's blocks kb.x..kb.y in order, a cursor
             * over them per segment (their starts hit L1). */
            const int2 kb = __ldg((const int2 *)p.tkb + u);
            for (int s = 0; s < g.nseg; ++s) {
              int j = kb.x, lo = __ldg(p.koff + j);
              for (int w = 0; w < wn; ++w) {
                const int c0 = base + w * 32, c1 = min(c0 + 32, p.seq_k);
                unsigned word = 0;
                while (j <= kb.y) {
                  const int hi = __ldg(p.koff + j + 1);
                  if (hi > c0) break;
                  ++j;
                  lo = hi;
                }
                for (int jj = j, a0 = lo; jj <= kb.y && a0 < c1; ++jj) {
                  const int a1 = __ldg(p.koff + jj + 1);
                  if (staged_bit(sw, (p.nk + 31) >> 5, s, jj)) {
                    const int a = max(a0, c0) - c0, e = min(a1, c1) - c0;
                    word |= (e - a == 32 ? 0xffffffffu : ((1u << (e - a)) - 1u)) << a;
                  }
                  a0 = a1;
                }
                p.membership[tr.mem + s * wn + w] = word;
              }
            }
          } else
          for (int s = 0; s < g.nseg; ++s)
            for (int w = 0; w < wn; ++w) {
              const int c0 = base + w * 32, c1 = min(c0 + 32, p.seq_k);
              unsigned word = 0;
              /* Columns past seq_k (a ragged last tile) stay clear. */
              for (int j = c0 < c1 ? kblock(p, c0) : 0; c0 < c1 && kstart(p, j) < c1; ++j)
                if (mask_bit(p, g, s, j)) {
                  const int a = max(kstart(p, j), c0) - c0, e = min(kstart(p, j + 1), c1) - c0;
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
    if (wide && np > np0) {
      __syncwarp();
      const int pairs = (np - np0) * wn;
      tsr_u32 *dst = p.membership + word0 + (long long)np0 * seg_words;
      for (int i = lane; i < pairs; i += 32) {
        const int t = m_wn ? (int)__umulhi((unsigned)i, m_wn) : i, w = i - t * wn;
        staged_words(p, sw, nw, g.nseg, ((s_pl[t] * p.bn) >> 5) + w, dst + t * seg_words + w, wn);
      }
      __syncwarp();
    }
  }
}

/* Position of the task at `pos` of the sorted order once every other
 * round of num_sms tasks is reversed (runtime/tasks.c tasks_write: CTA b of
 * a persistent grid takes tasks b, b + G, ..., and the snake keeps it from
 * taking the longest task of every round). */
static __device__ __forceinline__ int snake(const tsr_gpuplan_params &p, int pos, int n)
{
  const int g = p.num_sms, k0 = pos - pos % g;
  return (pos / g) & 1 ? k0 + min(g, n - k0) - 1 - (pos - k0) : pos;
}

/* A row's tasks as two (length, count) items, from row_task (tiles |
 * split << 30): its short chunks (length q, c0 of them) and its long ones
 * (q + 1, c1; runtime/tasks.c: near-equal chunks); an empty row is one
 * task of length 0.  Divides only in split templates. */
struct rowitems {
  int q, c0, c1;
};

static __device__ __forceinline__ rowitems row_items(const tsr_gpuplan_params &p, int v)
{
  const int len = v & ((1 << 30) - 1);
  if (!(v >> 30)) return rowitems{len, 1, 0};
  const int nch = want_chunks(p, len), q = len / nch, big = len - nch * q;
  return rowitems{q, nch - big, big};
}

/* The host planner's order (runtime/tasks.c protos_order) of row r's
 * tasks, before the snake: within its (batch, KV head) group, longest
 * first, ties in creation order (rows in order; a row's short chunks
 * before its long ones), after the tasks of the groups before.  Counting
 * sort ranks without the sort: the first position of the row's short
 * chunks (pos0) is the group's base plus the tasks of the group that are
 * longer, or as long and in an earlier row; likewise its long chunks
 * (pos1).  The warp reads the group's row_task words in one pass, gsz / 32
 * coalesced loads a lane: a group's rows are ranked in parallel instead
 * of one warp walking them in order (the third kernel that did,
 * tsr_plan_order, cost 8 us of the 28 us of planning at 32,768 tokens x
 * 12 heads: notes/gpuplan.md).  The reads grow as rows x group rows:
 * 14 x 10^6 words at 75,600 tokens x 40 heads (128-token tiles). */
static __device__ __forceinline__ void task_positions(const tsr_gpuplan_params &p, long long r, int lane, int &pos0,
                                                      int &pos1)
{
  const int i = (int)(r % p.gsz);
  const long long r0 = r - i;
  const int k0 = row_items(p, p.row_task[r]).q, k1 = k0 + 1;
  int s0 = 0, s1 = 0;
#pragma unroll 4
  for (int j = lane; j < p.gsz; j += 32) {
    const rowitems it = row_items(p, p.row_task[r0 + j]);
    const bool before = j < i;
    const int q = it.q;
    s0 += (q > k0 || (q == k0 && before) ? it.c0 : 0) + (q + 1 > k0 || (q + 1 == k0 && before) ? it.c1 : 0);
    s1 += (q > k1 || (q == k1 && before) ? it.c0 : 0) + (q + 1 > k1 || (q + 1 == k1 && before) ? it.c1 : 0);
  }
  const int base = p.row_off[r0 * TSR_GP_ROW_INTS + 4];
  pos0 = base + warp_sum(s0);
  pos1 = base + warp_sum(s1);
}

/* The row's tasks (one, or its near-equal chunks), members and merge
 * record, at the positions of its short and long chunks (pos0, pos1;
 * task_positions), snaked. */
static __device__ void emit_tasks(const tsr_gpuplan_params &p, const rowgeo &g, int lane, int len, int tile0,
                                  int slot, int pos0, int pos1, const tsr_i32 *ro)
{
  tsr_member_rec mr;
  mr.batch = g.b;
  mr.head = g.h;
  mr.q_tile = g.t;
  mr.pad = 0;
  const int n_tasks = p.counts[TSR_GP_TASKS];
  if (len == 0) {
    if (lane == 0) {
      const int pos = snake(p, pos0, n_tasks);
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
  for (int k = lane; k < nch; k += 32) {
    const int tb = (int)((long long)k * len / nch), te = (int)((long long)(k + 1) * len / nch);
    const int size = te - tb, big_before = tb - k * q;
    const bool is_big = size == q + 1;
    const int pos = snake(p, is_big ? pos1 + big_before : pos0 + k - big_before, n_tasks);
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

}  // namespace tsrgp

/* At most 64 registers: at least four CTAs of 256 threads resident a
 * multiprocessor, so that many rows' mask reads are in flight.  sm_120's
 * compiler spilled to local memory at 64 (tests/gen-sass.sh): three there. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define TSR_GP_EMIT_MIN_CTAS 3
#else
#define TSR_GP_EMIT_MIN_CTAS 4
#endif
extern "C" __global__ void __launch_bounds__(TSR_GP_EMIT_THREADS, TSR_GP_EMIT_MIN_CTAS)
    tsr_plan_emit(const __grid_constant__ tsr_gpuplan_params p)
{
  using namespace tsrgp;
  __shared__ unsigned s_sw[TSR_GP_EMIT_THREADS / 32][TSR_GP_VSEG * TSR_GP_VWORDS]; /* staged rows */
  __shared__ int s_pl[TSR_GP_EMIT_THREADS / 32][128]; /* a group's partial tiles (staged rows) */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = blockIdx.x * (TSR_GP_EMIT_THREADS / 32) + warp;
  TSR_GP_EMARK(0);
  /* Block 0's first thread (row 0 is always there) publishes the features. */
  if (r >= p.n_rows) return;
  /* Nothing up to grid_dep_wait depends on the count kernel: the geometry
   * and the first mask loads overlap its tail. */
  const rowgeo g = row_geo(p, r);
  const bool direct = is_direct(p, g), st = !direct && is_staged_emit(p, g);
  unsigned b[4] = {0u, 0u, 0u, 0u};
  if (direct) {
    const int mode = unit_mode(p);
    direct_load4(p, g.plane + g.i0, mode, ((p.nk - 1) >> unit_shift(mode)) + 1, 0, lane, b);
  }
  const unsigned *ui = nullptr;
  if (st) {
    stage_row(p, g, lane, s_sw[warp]);
    /* the union / intersection rows after the segments */
    const int nw = (p.nk + 31) >> 5;
    if (g.nseg > 1) {
      stage_ui(g, nw, lane, s_sw[warp], s_sw[warp] + g.nseg * nw);
      ui = s_sw[warp] + g.nseg * nw;
    }
  }
  grid_dep_wait();
  TSR_GP_EMARK(1);
  if (p.stats && blockIdx.x == 0 && threadIdx.x == 0) publish_stats(p);
  /* The count kernel's output, loads together (one round trip): row_off
   * and row_len are written whatever the overflow flag says. */
  const tsr_i32 *ro = p.row_off + (long long)r * TSR_GP_ROW_INTS;
  const int overflow = p.counts[TSR_GP_OVERFLOW];
  const int len = p.row_len[r], tile0 = ro[0], word0 = ro[1], slot = ro[2];
  if (overflow) return;
  if (direct) direct_tiles(p, g, lane, tile0, b);
  else general_tiles(p, g, st ? s_sw[warp] : nullptr, ui, lane, tile0, word0, s_pl[warp]);
  TSR_GP_RMARK(r, 1);
  /* after the tiles: with the mask words and the staged state live, the
   * ranking's registers spilled at the 64 of four CTAs (tests/gen-sass.sh) */
  int pos0, pos1;
  task_positions(p, r, lane, pos0, pos1);
  emit_tasks(p, g, lane, len, tile0, slot, pos0, pos1, ro);
  TSR_GP_RMARK(r, 2);
  TSR_GP_EMARK(2);
}

#endif

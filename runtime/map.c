/*
 * map.c: physical mapping, the logical block mask onto BM x BN tiles.
 *
 * One algorithm covers retain, combine and subdivide: a tile is the
 * intersection of the physical grid with the selected logical blocks.  For
 * query tile t, the rows fall into logical query blocks i0..i1 (segments);
 * for key tile u, the columns into key blocks kb0[u]..kb1[u].  The tile is
 * emitted when any segment selects any of those key blocks, is full when
 * every segment selects all of them, and is partial otherwise, with BN/32
 * column words per segment (plan_layout.h).
 *
 * Cost: the mask's planes come as row bitsets over key blocks, packed once
 * when the mask was made (mask.c: 64 mask bytes an AVX-512BW instruction);
 * while a plane is in the cache, every (plane, query tile) is one OR/AND
 * over its segments' bitsets and one walk over the set bits (with AVX-512,
 * 16 bits a compress and two 64-byte stores of tile records), so planning
 * is O(mask words + emitted tiles + membership words + rows), with no
 * per-token loop (qblk, the one per-token array of the contract, is kept
 * across replans of one geometry).  On one core of a Sapphire Rapids Xeon
 * about 0.08 ns a mask byte (the packing, measured when the planner still
 * packed), 0.5 ns a tile and 20 ns a row with tasks.c (BENCHMARKS.md).
 * Rows that are identical (a batch- or head-broadcast mask, GQA heads with
 * identical rows) share one tile range instead of being emitted again.  All
 * arrays live in the plan's reusable buffers (tsri_plan_buf): replanning
 * into the same plan allocates nothing once the buffers are large enough.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"
#include "simd.h"
#ifdef TSR_X86
#include <immintrin.h>
#endif

/* Block sizes as text for messages: "96x96" or "variable". */
static void block_text(const tsr_geom *g, char *buf, size_t n)
{
  int64_t bq, bk;
  if (tsr_geom_is_uniform(g, &bq, &bk))
    snprintf(buf, n, "%lldx%lld", (long long)bq, (long long)bk);
  else
    snprintf(buf, n, "variable");
}

/* Along one axis: whether some tile holds tokens of several blocks
 * (combined), and whether some tile lies inside a larger block, so that the
 * block spans several tiles (subdivided).  Neither means the tiles are the
 * blocks (retain).  A 96-token block straddling a 128-token tile boundary is
 * combined, not subdivided: no tile lies inside it.  O(blocks + tiles): the
 * walk for variable blocks (uniform ones: axis_uniform). */
static void axis_relation(const tsr_geom *g, int is_q, int64_t tile, int *combined,
                          int *subdivided)
{
  int64_t seq = is_q ? tsr_geom_seq_q(g) : tsr_geom_seq_k(g), a, i = 0;
  for (a = 0; a < seq; a += tile) {
    int64_t b = a + tile < seq ? a + tile : seq, i0, e0, s0;
    while ((is_q ? tsr_geom_q_start(g, i + 1) : tsr_geom_k_start(g, i + 1)) <= a)
      i++;
    i0 = i;
    s0 = is_q ? tsr_geom_q_start(g, i0) : tsr_geom_k_start(g, i0);
    e0 = is_q ? tsr_geom_q_start(g, i0 + 1) : tsr_geom_k_start(g, i0 + 1);
    if (e0 < b) {
      *combined = 1;
    } else {
      if (b - a == tile && e0 - s0 > tile) /* a ragged last tile does not count */
        *subdivided = 1;
      /* The next tiles inside this block say the same: on to the last of
       * them, so the walk is O(blocks), not O(tokens / tile). */
      if (e0 - a >= 2 * tile)
        a += ((e0 - a) / tile - 1) * tile;
    }
  }
}

/* axis_relation for uniform blocks of b tokens over s (the last ragged) and
 * tiles of t: a tile holds a block boundary k*b < s unless every such
 * boundary is a multiple of t; a whole tile lies inside a block when the
 * largest block, the first (min(b, s) tokens), is larger than the tile. */
static void axis_uniform(int64_t b, int64_t t, int64_t s, int *combined, int *subdivided)
{
  if (b % t != 0 && b < s)
    *combined = 1;
  if ((b < s ? b : s) > t)
    *subdivided = 1;
}

void tsri_map_relation_uniform(int64_t bq, int64_t bk, int64_t sq, int64_t sk, int tile_m,
                              int tile_n, int *combined, int *subdivided)
{
  *combined = *subdivided = 0;
  axis_uniform(bq, tile_m, sq, combined, subdivided);
  axis_uniform(bk, tile_n, sk, combined, subdivided);
}

int tsri_map_applies(tsr_mapping mapping, int combined, int subdivided)
{
  switch (mapping) {
  case TSR_MAP_RETAIN:
    return !combined && !subdivided;
  case TSR_MAP_COMBINE:
    return combined;
  case TSR_MAP_SUBDIVIDE:
    return subdivided;
  default:
    return 1;
  }
}

tsr_status tsri_map_resolve(tsr_plan *pl, const tsr_plan_opts *o, tsr_error *err)
{
  const tsr_geom *g = pl->problem.geom;
  int64_t bq = 0, bk = 0;
  int uniform = tsr_geom_is_uniform(g, &bq, &bk);
  int tm = o->tile_m, tn = o->tile_n;
  int combined = 0, subdivided = 0;
  char blocks[64];

  block_text(g, blocks, sizeof blocks);
  if (tm < 0 || tn < 0)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid tile %dx%d: sizes must not be negative",
                         tm, tn);
  if (tm == 0 && tn == 0) {
    switch (o->mapping) {
    case TSR_MAP_RETAIN:
      if (!uniform || !tsri_tile_m_ok(bq) || !tsri_tile_n_ok(bk))
        return tsr_error_set(err, TSR_ERR_UNSUPPORTED,
                             "mapping 'retain' needs uniform blocks usable as a tile "
                             "(rows a multiple of 16, columns of 32, at most 512), got blocks %s",
                             blocks);
      tm = (int)bq;
      tn = (int)bk;
      break;
    case TSR_MAP_AUTO:
      /* Retain when the blocks are a tile shape kernels are built for. */
      if (uniform && (bq == 64 || bq == 128) && (bk == 64 || bk == 128)) {
        tm = (int)bq;
        tn = (int)bk;
      } else {
        tm = tn = 128;
      }
      break;
    case TSR_MAP_COMBINE:
      tm = tn = 128;
      break;
    case TSR_MAP_SUBDIVIDE:
      /* The largest common tile edge below the block edge. */
      tm = uniform && bq > 128 ? 128 : 64;
      tn = uniform && bk > 128 ? 128 : 64;
      break;
    case TSR_MAP_GATHER: /* the blocks' tile bq x 2bk (a stand-in for wip-host's resolve_gather) */
      tm = uniform ? (int)bq : 0;
      tn = uniform ? (int)(2 * bk) : 0;
      break;
    }
  }
  if (tm == 0)
    tm = 128;
  if (tn == 0)
    tn = 128;
  if (!tsri_tile_m_ok(tm) || !tsri_tile_n_ok(tn))
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED,
                         "tile %dx%d is not supported: rows must be a multiple of 16 and "
                         "columns a multiple of 32, each at most 512",
                         tm, tn);

  if (uniform) {
    tsri_map_relation_uniform(bq, bk, pl->problem.seq_q, pl->problem.seq_k, tm, tn, &combined,
                             &subdivided);
  } else {
    axis_relation(g, 1, tm, &combined, &subdivided);
    axis_relation(g, 0, tn, &combined, &subdivided);
  }
  if (!tsri_map_applies(o->mapping, combined, subdivided)) {
    static const char *const needs[] = {
        [TSR_MAP_RETAIN] = "needs the tile to equal the logical block",
        [TSR_MAP_COMBINE] = "needs tiles that span several logical blocks",
        [TSR_MAP_SUBDIVIDE] = "needs logical blocks larger than the tile"};
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "mapping '%s' %s, got tile %dx%d and blocks %s",
                         tsr_plan_mapping_name(o->mapping), needs[o->mapping], tm, tn, blocks);
  }
  if (o->mapping != TSR_MAP_AUTO)
    pl->mapping = o->mapping;
  else
    pl->mapping = combined ? TSR_MAP_COMBINE : subdivided ? TSR_MAP_SUBDIVIDE : TSR_MAP_RETAIN;
  pl->tile_m = tm;
  pl->tile_n = tn;
  pl->n_q_tiles = (pl->problem.seq_q + tm - 1) / tm;
  pl->n_k_tiles = (pl->problem.seq_k + tn - 1) / tn;
  pl->summary.combined = combined;
  pl->summary.subdivided = subdivided;
  return TSR_OK;
}

/* Full tiles of retained keys, one per set bit j of the W words at x
 * (k_tile j, mem -1), written from *t on; returns how many.  The portable
 * version walks the bits. */
static int64_t emit_full(const uint64_t *x, int64_t W, tsr_tile_rec *t)
{
  int64_t n = 0, w;
  for (w = 0; w < W; w++) {
    uint64_t b = x[w];
    for (; b; b &= b - 1, n++) {
      t[n].k_tile = (tsr_i32)(w * 64 + __builtin_ctzll(b));
      t[n].mem = -1;
    }
  }
  return n;
}

#ifdef TSR_X86
/* SSE2: the bit walk (its loop branch predicts well, where a walk over
 * runs of bits mispredicts on every short run of a random mask), with
 * all-set words, the inside of a band, stored two records at a time. */
static int64_t emit_full_sse2(const uint64_t *x, int64_t W, tsr_tile_rec *t)
{
  const __m128i step = _mm_set_epi32(0, 2, 0, 2);
  int64_t n = 0, w;
  for (w = 0; w < W; w++) {
    uint64_t b = x[w];
    if (b == ~0ULL) {
      tsr_i32 j = (tsr_i32)(w * 64);
      __m128i v = _mm_set_epi32(-1, j + 1, -1, j);
      int k;
      for (k = 0; k < 64; k += 2) {
        _mm_storeu_si128((__m128i *)(void *)(t + n + k), v);
        v = _mm_add_epi32(v, step);
      }
      n += 64;
      continue;
    }
    for (; b; b &= b - 1, n++) {
      t[n].k_tile = (tsr_i32)(w * 64 + __builtin_ctzll(b));
      t[n].mem = -1;
    }
  }
  return n;
}

/* AVX-512: each nonzero 16 bits compress the indices of their set bits
 * into the low lanes of a vector of 16 ints, widened into two vectors of
 * eight (k_tile, -1) records and stored whole: up to 15 records past the
 * end are scribbled (the caller leaves EMIT_SLACK records of room). */
__attribute__((target("avx512f,popcnt"))) static int64_t emit_full_avx512(const uint64_t *x, int64_t W,
                                                                          tsr_tile_rec *t)
{
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i hi = _mm512_set1_epi64(-4294967296LL); /* mem = -1 in the upper half */
  int64_t n = 0, w;
  for (w = 0; w < W; w++) {
    uint64_t b = x[w];
    int c, k;
    for (c = 0; b; c += 16, b >>= 16) {
      unsigned m = (unsigned)(b & 0xffff);
      __m512i v;
      if (!m)
        continue;
      k = __builtin_popcount(m);
      v = _mm512_maskz_compress_epi32((__mmask16)m,
                                      _mm512_add_epi32(iota, _mm512_set1_epi32((int)(w * 64 + c))));
      _mm512_storeu_si512((void *)(t + n),
                          _mm512_or_si512(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(v)), hi));
      /* The upper eight only when used: a sparse mask's chunks rarely fill
       * them, and the stores, not the instructions, bound this loop. */
      if (k > 8)
        _mm512_storeu_si512((void *)(t + n + 8),
                            _mm512_or_si512(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(v, 1)), hi));
      n += k;
    }
  }
  return n;
}
#endif
#define EMIT_SLACK 16

/* Population count without a libgcc call (no -mpopcnt in portable builds). */
static int64_t pop64(uint64_t x)
{
  x = x - ((x >> 1) & 0x5555555555555555ULL);
  x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
  return (int64_t)((x * 0x0101010101010101ULL) >> 56);
}

static int bit_at(const uint64_t *b, int64_t j) { return (int)(b[j >> 6] >> (j & 63) & 1); }

/* Whether bits a..b (inclusive) are all set. */
static int all_set(const uint64_t *bits, int64_t a, int64_t b)
{
  while (a <= b) {
    int64_t w = a >> 6, lo = a & 63, hi = (b >> 6) == w ? (b & 63) : 63;
    uint64_t want = (hi - lo == 63) ? ~0ULL : (((1ULL << (hi - lo + 1)) - 1) << lo);
    if ((bits[w] & want) != want)
      return 0;
    a = (w << 6) + hi + 1;
  }
  return 1;
}

/* Sets bits [a, b) of 32-bit words. */
static void set_range32(tsr_u32 *w, int64_t a, int64_t b)
{
  while (a < b) {
    int64_t i = a >> 5, lo = a & 31, hi = (b - 1) >> 5 == i ? ((b - 1) & 31) : 31;
    tsr_u32 m = (hi - lo == 31) ? 0xffffffffu : (tsr_u32)(((1u << (hi - lo + 1)) - 1) << lo);
    w[i] |= m;
    a = (i << 5) + hi + 1;
  }
}

/* Scratch and tables for one tsri_map_build call. */
typedef struct {
  tsr_plan *pl;
  int64_t nq, nk, nqt, nkt, W;  /* W: 64-bit words per packed mask row */
  int64_t *qs, *ks;             /* block starts, [n + 1] */
  tsr_i32 *i0, *i1;             /* per q tile: first / last q block */
  tsr_i32 *kb0, *kb1;           /* per k tile: first / last k block */
  tsr_i32 *kt0, *kt1;           /* per k block: first / last k tile */
  int64_t *kcols;               /* per k tile: columns in bounds */
  tsr_u32 *colmask;             /* per k tile u and key block
                                   kb0[u] + i, the tile's column words of that
                                   block (BN/32 words at cm_off[u] + i * BN/32) */
  int64_t *cm_off;
  uint64_t *kmask;              /* per k tile, its key blocks as
                                   bits of word kb0[u] / 64, or 0 when they span
                                   two words (then all_set) */
  int k_retain;                 /* key tiles are the key blocks */
  int k_uniform;                /* key blocks uniform (last one may be short) */
  uint64_t *orb, *andb;         /* per-row scratch, W words each */
  int64_t cap_tiles, cap_mem;
  int simd;                     /* TSR_SIMD_* level */
} map_ctx;

static int grow_tiles(map_ctx *c, int64_t need)
{
  tsr_plan *pl = c->pl;
  if (pl->n_tiles + need > INT32_MAX)
    return -1; /* tile_begin / tile_end are 32-bit */
  need += EMIT_SLACK; /* room for emit_full_avx512's whole stores */
  if (pl->n_tiles + need > c->cap_tiles) {
    tsr_tile_rec *t = tsri_plan_buf(pl, TSR_BUF_TILES, (size_t)(pl->n_tiles + need) * sizeof *t);
    if (!t)
      return -1;
    pl->tiles = t;
    c->cap_tiles = (int64_t)(pl->bufs[TSR_BUF_TILES].cap / sizeof *t);
  }
  return 0;
}

static tsr_u32 *alloc_words(map_ctx *c, int64_t n, tsr_i32 *offset)
{
  tsr_plan *pl = c->pl;
  tsr_u32 *w;
  if (pl->n_membership + n > INT32_MAX)
    return NULL;
  if (pl->n_membership + n > c->cap_mem) {
    tsr_u32 *m = tsri_plan_buf(pl, TSR_BUF_MEMBERSHIP, (size_t)(pl->n_membership + n) * sizeof *m);
    if (!m)
      return NULL;
    pl->membership = m;
    c->cap_mem = (int64_t)(pl->bufs[TSR_BUF_MEMBERSHIP].cap / sizeof *m);
  }
  *offset = (tsr_i32)pl->n_membership;
  w = pl->membership + pl->n_membership;
  memset(w, 0, (size_t)n * sizeof *w);
  pl->n_membership += n;
  return w;
}

/* Per (plane, q tile) results. */
typedef struct {
  tsr_i32 tb, te;
  tsr_i32 twin_head; /* mask head whose identical row this reuses, or -1 */
  uint8_t full;
  int64_t partial, cols;
} prow;

/* Writes the membership words of partial tile u (segments i0..i0+nseg-1)
 * and returns its offset, or -1 when out of memory. */
static tsr_i32 partial_words(map_ctx *c, const uint64_t *plane, int64_t i0, int64_t nseg,
                             int64_t u)
{
  int64_t wn = c->pl->tile_n / 32, s, jj, q;
  tsr_i32 off;
  tsr_u32 *words = alloc_words(c, nseg * wn, &off);
  if (!words)
    return -2;
  for (s = 0; s < nseg; s++) {
    const uint64_t *r = plane + (i0 + s) * c->W;
    const tsr_u32 *cm = c->colmask + c->cm_off[u];
    tsr_u32 *dst = words + s * wn;
    for (jj = c->kb0[u]; jj <= c->kb1[u]; jj++, cm += wn)
      if (bit_at(r, jj))
        for (q = 0; q < wn; q++)
          dst[q] |= cm[q];
  }
  return off;
}

/* Emits the tiles of query tile t for the packed plane `plane`.  The tile
 * array is grown once per row (a row emits at most n_k_tiles tiles), so the
 * inner loops only store. */
static int emit_row(map_ctx *c, const uint64_t *plane, int64_t t, prow *out)
{
  tsr_plan *pl = c->pl;
  int64_t i0 = c->i0[t], i1 = c->i1[t], nseg = i1 - i0 + 1, W = c->W, w, s;
  int64_t last = -1, cols = 0, partial = 0, n;
  const uint64_t *orb, *andb;
  tsr_tile_rec *tiles;

  if (nseg == 1) {
    orb = andb = plane + i0 * W;
  } else {
    const uint64_t *r = plane + i0 * W;
    memcpy(c->orb, r, (size_t)W * 8);
    memcpy(c->andb, r, (size_t)W * 8);
    for (s = 1; s < nseg; s++) {
      r = plane + (i0 + s) * W;
      for (w = 0; w < W; w++) {
        c->orb[w] |= r[w];
        c->andb[w] &= r[w];
      }
    }
    orb = c->orb;
    andb = c->andb;
  }
  /* An empty row needs no test of its own: its walks find no bit. */
  out->tb = (tsr_i32)pl->n_tiles;
  if (grow_tiles(c, c->nkt))
    return -1;
  tiles = pl->tiles + pl->n_tiles;
  n = 0;
  if (c->k_retain && orb == andb) {
    /* Retained keys and one query segment: every tile is full, one per set
     * bit; the columns follow from the count (only the last tile is short). */
#ifdef TSR_X86
    if (c->simd == TSR_SIMD_AVX512)
      n = emit_full_avx512(orb, W, tiles);
    else if (c->simd >= TSR_SIMD_SSE2)
      n = emit_full_sse2(orb, W, tiles);
    else
#endif
      n = emit_full(orb, W, tiles);
    cols = n * pl->tile_n;
    if (bit_at(orb, c->nkt - 1))
      cols -= pl->tile_n - c->kcols[c->nkt - 1];
  } else if (c->k_retain) {
    /* Key tiles are the key blocks: one tile per set bit. */
    for (w = 0; w < W; w++) {
      uint64_t x = orb[w], full = andb[w];
      while (x) {
        int64_t j = w * 64 + __builtin_ctzll(x);
        tiles[n].k_tile = (tsr_i32)j;
        cols += c->kcols[j];
        if (full >> (j & 63) & 1) {
          tiles[n].mem = -1;
        } else {
          tsr_i32 off = partial_words(c, plane, i0, nseg, j);
          if (off < -1)
            return -1;
          tiles[n].mem = off;
          partial++;
        }
        n++;
        x &= x - 1;
      }
    }
  } else {
    for (w = 0; w < W; w++) {
      uint64_t x = orb[w];
      while (x) {
        int64_t j = w * 64 + __builtin_ctzll(x), u, u1 = c->kt1[j];
        x &= x - 1;
        for (u = c->kt0[j] > last ? c->kt0[j] : last + 1; u <= u1; u++) {
          tiles[n].k_tile = (tsr_i32)u;
          cols += c->kcols[u];
          if (c->kmask[u] ? (andb[c->kb0[u] >> 6] & c->kmask[u]) == c->kmask[u]
                          : all_set(andb, c->kb0[u], c->kb1[u])) {
            tiles[n].mem = -1;
          } else {
            tsr_i32 off = partial_words(c, plane, i0, nseg, u);
            if (off < -1)
              return -1;
            tiles[n].mem = off;
            partial++;
          }
          n++;
        }
        if (u1 > last)
          last = u1;
      }
    }
  }
  pl->n_tiles += n;
  out->te = (tsr_i32)pl->n_tiles;
  out->full = partial == 0;
  out->partial = partial;
  out->cols = cols;
  return 0;
}

/* Selected token pairs of one packed plane, and (added to *bits) its
 * selected block pairs: per row, the selected key tokens (a popcount when
 * key blocks are uniform) times the block's rows.  Written once as a macro
 * so that x86-64 gets a copy using the popcnt instruction (chosen at run
 * time) beside the portable one. */
#define PLANE_SELECTED_BODY(POP)                                                  \
  double total = 0;                                                               \
  int64_t i, w, bk = c->ks[1] - c->ks[0], last = c->nk - 1, nbits = 0;            \
  int64_t short_by = bk - (c->ks[c->nk] - c->ks[last]); /* ragged last block */   \
  for (i = 0; i < c->nq; i++) {                                                   \
    const uint64_t *r = plane + i * c->W;                                         \
    int64_t cols = 0, cnt = 0;                                                    \
    if (c->k_uniform) {                                                           \
      for (w = 0; w < c->W; w++)                                                  \
        cnt += POP(r[w]);                                                         \
      cols = cnt * bk - (bit_at(r, last) ? short_by : 0);                         \
    } else {                                                                      \
      for (w = 0; w < c->W; w++) {                                                \
        uint64_t x = r[w];                                                        \
        for (; x; x &= x - 1, cnt++) {                                            \
          int64_t j = w * 64 + __builtin_ctzll(x);                                \
          cols += c->ks[j + 1] - c->ks[j];                                        \
        }                                                                         \
      }                                                                           \
    }                                                                             \
    nbits += cnt;                                                                 \
    total += (double)cols * (double)(c->qs[i + 1] - c->qs[i]);                    \
  }                                                                               \
  *bits += nbits;                                                                 \
  return total

static double plane_selected(const map_ctx *c, const uint64_t *plane, int64_t *bits)
{
  PLANE_SELECTED_BODY(pop64);
}

#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_POPCNT_COPY 1
__attribute__((target("popcnt"))) static double plane_selected_popcnt(const map_ctx *c,
                                                                      const uint64_t *plane,
                                                                      int64_t *bits)
{
  PLANE_SELECTED_BODY(__builtin_popcountll);
}
#endif

static tsr_status build_tables(map_ctx *c, tsr_error *err)
{
  tsr_plan *pl = c->pl;
  const tsr_geom *g = pl->problem.geom;
  int64_t i, j, t, u, BM = pl->tile_m, BN = pl->tile_n;
  int64_t sq = pl->problem.seq_q, sk = pl->problem.seq_k;
  int same;

  c->nq = tsr_geom_nq(g);
  c->nk = tsr_geom_nk(g);
  c->nqt = pl->n_q_tiles;
  c->nkt = pl->n_k_tiles;
  c->W = (c->nk + 63) / 64;
  if (c->nqt > INT32_MAX || c->nkt > INT32_MAX || sq > INT32_MAX)
    return tsr_error_set(err, TSR_ERR_CAPACITY,
                         "cannot plan %lld query tokens: plans index tokens and tiles with "
                         "32-bit integers",
                         (long long)sq);
  c->qs = tsri_plan_buf(pl, TSR_BUF_QS, (size_t)(c->nq + 1) * sizeof *c->qs);
  c->ks = tsri_plan_buf(pl, TSR_BUF_KS, (size_t)(c->nk + 1) * sizeof *c->ks);
  c->i0 = tsri_plan_buf(pl, TSR_BUF_I0, (size_t)c->nqt * sizeof *c->i0);
  c->i1 = tsri_plan_buf(pl, TSR_BUF_I1, (size_t)c->nqt * sizeof *c->i1);
  c->kb0 = tsri_plan_buf(pl, TSR_BUF_KB0, (size_t)c->nkt * sizeof *c->kb0);
  c->kb1 = tsri_plan_buf(pl, TSR_BUF_KB1, (size_t)c->nkt * sizeof *c->kb1);
  c->kt0 = tsri_plan_buf(pl, TSR_BUF_KT0, (size_t)c->nk * sizeof *c->kt0);
  c->kt1 = tsri_plan_buf(pl, TSR_BUF_KT1, (size_t)c->nk * sizeof *c->kt1);
  c->kcols = tsri_plan_buf(pl, TSR_BUF_KCOLS, (size_t)c->nkt * sizeof *c->kcols);
  c->orb = tsri_plan_buf(pl, TSR_BUF_ORAND, (size_t)c->W * 16);
  pl->qblk = tsri_plan_buf(pl, TSR_BUF_QBLK, (size_t)sq * sizeof *pl->qblk);
  if (!c->qs || !c->ks || !c->i0 || !c->i1 || !c->kb0 || !c->kb1 || !c->kt0 || !c->kt1 ||
      !c->kcols || !c->orb || !pl->qblk)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot plan: out of memory for tile tables");
  c->andb = c->orb + c->W;
  pl->n_qblk = sq;
  /* qblk (seq_q ints) is kept from the last build when the query blocks
   * are the same, as they are on every replan of one problem. */
  same = pl->qblk_nq == c->nq;
  for (i = 0; i <= c->nq; i++) {
    int64_t x = tsr_geom_q_start(g, i);
    same &= c->qs[i] == x;
    c->qs[i] = x;
  }
  for (j = 0; j <= c->nk; j++)
    c->ks[j] = tsr_geom_k_start(g, j);
  if (!same) {
    pl->qblk_nq = 0;
    for (i = 0; i < c->nq; i++) {
      int64_t x;
      for (x = c->qs[i]; x < c->qs[i + 1]; x++)
        pl->qblk[x] = (tsr_i32)i;
    }
    pl->qblk_nq = c->nq;
  }
  for (t = 0; t < c->nqt; t++) {
    int64_t last = (t + 1) * BM < sq ? (t + 1) * BM : sq;
    c->i0[t] = pl->qblk[t * BM];
    c->i1[t] = pl->qblk[last - 1];
  }
  /* Key tiles <-> key blocks, one merge walk over both boundary lists. */
  {
    int64_t bq, bk;
    c->k_uniform = tsr_geom_is_uniform(g, &bq, &bk);
  }
  c->k_retain = c->nk == c->nkt;
  for (u = 0, j = 0; u < c->nkt; u++) {
    int64_t a = u * BN, b = (u + 1) * BN < sk ? (u + 1) * BN : sk;
    while (c->ks[j + 1] <= a)
      j++;
    c->kb0[u] = (tsr_i32)j;
    while (c->ks[j + 1] < b)
      j++;
    c->kb1[u] = (tsr_i32)j;
    c->kcols[u] = b - a;
    if (c->kb0[u] != u || c->kb1[u] != u || c->ks[u] != a || c->ks[u + 1] != b)
      c->k_retain = 0;
  }
  /* Column words of each (key tile, key block) pair: a partial tile's
   * words are then ORs of these, not bit ranges set one by one. */
  {
    int64_t wn = BN / 32, total = 0;
    c->cm_off = tsri_plan_buf(pl, TSR_BUF_CMOFF, (size_t)c->nkt * sizeof *c->cm_off);
    if (!c->cm_off)
      return tsr_error_set(err, TSR_ERR_NOMEM, "cannot plan: out of memory for tile tables");
    for (u = 0; u < c->nkt; u++) {
      c->cm_off[u] = total;
      total += (c->kb1[u] - c->kb0[u] + 1) * wn;
    }
    c->colmask = tsri_plan_buf(pl, TSR_BUF_COLMASK, (size_t)(total ? total : 1) * sizeof *c->colmask);
    c->kmask = tsri_plan_buf(pl, TSR_BUF_KMASK, (size_t)c->nkt * sizeof *c->kmask);
    if (!c->colmask || !c->kmask)
      return tsr_error_set(err, TSR_ERR_NOMEM, "cannot plan: out of memory for tile tables");
    for (u = 0; u < c->nkt; u++) {
      int64_t lo = c->kb0[u] & 63, n = c->kb1[u] - c->kb0[u] + 1;
      c->kmask[u] = (c->kb0[u] >> 6) != (c->kb1[u] >> 6) ? 0
                    : n == 64                             ? ~0ULL
                                                          : ((1ULL << n) - 1) << lo;
    }
    memset(c->colmask, 0, (size_t)total * sizeof *c->colmask);
    for (u = 0; u < c->nkt; u++) {
      int64_t base = u * BN, end = base + c->kcols[u];
      for (j = c->kb0[u]; j <= c->kb1[u]; j++)
        set_range32(c->colmask + c->cm_off[u] + (j - c->kb0[u]) * wn,
                    (c->ks[j] > base ? c->ks[j] : base) - base,
                    (c->ks[j + 1] < end ? c->ks[j + 1] : end) - base);
    }
  }
  /* Key block -> first and last key tile, without a division a block. */
  for (j = 0, t = 0, u = 0; j < c->nk; j++) {
    while ((t + 1) * BN <= c->ks[j])
      t++;
    while ((u + 1) * BN <= c->ks[j + 1] - 1)
      u++;
    c->kt0[j] = (tsr_i32)t;
    c->kt1[j] = (tsr_i32)u;
  }
  return TSR_OK;
}

/* ---- Capacity ------------------------------------------------------------
 *
 * Plans address rows, tile records and membership words with 32-bit
 * integers (tessera.h, "Size limits"), so a problem that would outgrow them
 * is refused before anything is allocated for it: the problem rows exactly,
 * then the records by a bound (every tile of every row of every mask plane,
 * every segment's words for each), which any real problem stays far below;
 * only past the bound are the records counted exactly.  The count needs no
 * per-token or per-tile table: query tiles lying inside one query block
 * have the same rows (one count serves the run of them), and a row's key
 * tiles follow from its selected key blocks, all but the two edge tiles of
 * a block lying inside it.  It counts what emit_row emits, a broadcast
 * plane once, before GQA heads with identical rows share (which only
 * saves), and stops at the first limit passed: O(planes x query blocks x
 * words a row + selected blocks x log key blocks). */

typedef struct {
  const int64_t *ks; /* key block starts, nk + 1 */
  int64_t BN, sk, nk, W;
} count_ctx;

/* The key block holding token x. */
static int64_t k_block_of(const count_ctx *c, int64_t x)
{
  int64_t lo = 0, hi = c->nk - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (c->ks[mid] <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Whether key tile u, which holds tokens of key block j, is full for a row
 * whose segments all select the key blocks set in andb: bit j when the
 * tile lies inside block j, else every block it touches. */
static int tile_full(const count_ctx *c, const uint64_t *andb, int64_t u, int64_t j)
{
  int64_t a = u * c->BN, b = a + c->BN < c->sk ? a + c->BN : c->sk;
  if (c->ks[j] <= a && b <= c->ks[j + 1])
    return bit_at(andb, j);
  return all_set(andb, k_block_of(c, a), k_block_of(c, b - 1));
}

/* Tiles and partial tiles emit_row emits for a row with these OR and AND
 * words over its segments. */
static void count_row(const count_ctx *c, const uint64_t *orb, const uint64_t *andb,
                      int64_t *tiles, int64_t *partial)
{
  int64_t w, last = -1, nt = 0, np = 0;
  for (w = 0; w < c->W; w++) {
    uint64_t x;
    for (x = orb[w]; x; x &= x - 1) {
      int64_t j = w * 64 + __builtin_ctzll(x), edges = 1;
      int64_t t0 = c->ks[j] / c->BN, t1 = (c->ks[j + 1] - 1) / c->BN;
      int64_t u0 = t0 > last ? t0 : last + 1;
      if (u0 > t1)
        continue;
      nt += t1 - u0 + 1;
      np += !tile_full(c, andb, t1, j);
      if (u0 == t0 && t0 != t1) {
        np += !tile_full(c, andb, t0, j);
        edges = 2;
      }
      if (!bit_at(andb, j)) /* the tiles inside block j */
        np += t1 - u0 + 1 - edges;
      last = t1;
    }
  }
  *tiles = nt;
  *partial = np;
}

/* a * b + c, saturating at INT64_MAX (all non-negative). */
static int64_t mul_add_sat(int64_t a, int64_t b, int64_t c)
{
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r))
    return INT64_MAX;
  return r;
}

int tsri_map_count(const tsr_plan *pl, const tsr_mask *m, int64_t *tiles, int64_t *words)
{
  const tsr_geom *g = pl->problem.geom;
  int64_t BM = pl->tile_m, sq = pl->problem.seq_q, nqt = pl->n_q_tiles;
  int64_t np = tsr_mask_batch(m) * tsr_mask_heads(m), pi;
  int64_t wn = pl->tile_n / 32;
  count_ctx c;
  uint64_t *buf;
  int64_t *ks, j;
  int over = 0;
  c.BN = pl->tile_n;
  c.sk = pl->problem.seq_k;
  c.nk = tsr_geom_nk(g);
  c.W = (c.nk + 63) / 64;
  *tiles = *words = 0;
  buf = malloc((size_t)c.W * 2 * sizeof *buf);
  ks = malloc((size_t)(c.nk + 1) * sizeof *ks);
  if (!buf || !ks) {
    free(buf);
    free(ks);
    return -1;
  }
  for (j = 0; j <= c.nk; j++)
    ks[j] = tsr_geom_k_start(g, j);
  c.ks = ks;
  for (pi = 0; pi < np && !over; pi++) {
    int64_t b = pi / tsr_mask_heads(m), h = pi % tsr_mask_heads(m), t = 0, i = 0;
    const uint64_t *packed = tsr_mask_packed_plane(m, b, h, NULL);
    while (t < nqt && !over) {
      int64_t a = t * BM, e = a + BM < sq ? a + BM : sq, i1, r, run = 1, nt, npart;
      uint64_t *orb = buf, *andb = buf + c.W;
      while (tsr_geom_q_start(g, i + 1) <= a)
        i++;
      for (i1 = i; tsr_geom_q_start(g, i1 + 1) < e; i1++)
        ;
      if (i1 == i) { /* the tiles up to the block's end have the same rows */
        int64_t end = tsr_geom_q_start(g, i + 1);
        run = (end == sq ? nqt : end / BM) - t;
      }
      for (r = i; r <= i1; r++) {
        const uint64_t *row = packed + r * c.W;
        int64_t w;
        for (w = 0; w < c.W; w++) {
          orb[w] = r == i ? row[w] : orb[w] | row[w];
          andb[w] = r == i ? row[w] : andb[w] & row[w];
        }
      }
      count_row(&c, orb, andb, &nt, &npart);
      *tiles = mul_add_sat(run, nt, *tiles);
      *words = mul_add_sat(run, mul_add_sat(npart, (i1 - i + 1) * wn, 0), *words);
      /* past a limit: no need to count on */
      over = *tiles > TSR_MAX_TILE_RECORDS || *words > TSR_MAX_MEMBERSHIP_WORDS;
      t += run;
    }
  }
  free(buf);
  free(ks);
  return 0;
}

/* Refuses a problem whose plan would outgrow the 32-bit record offsets. */
static tsr_status check_capacity(const tsr_plan *pl, const tsr_mask *m, tsr_error *err)
{
  const tsr_problem *p = &pl->problem;
  const tsr_geom *g = p->geom;
  int64_t np = tsr_mask_batch(m) * tsr_mask_heads(m), nq = tsr_geom_nq(g);
  int64_t rows = mul_add_sat(p->batch * p->heads_q, pl->n_q_tiles, 0);
  int64_t tiles = mul_add_sat(mul_add_sat(np, pl->n_q_tiles, 0), pl->n_k_tiles, 0);
  int64_t words = mul_add_sat(mul_add_sat(np, pl->n_q_tiles + nq, 0),
                              mul_add_sat(pl->n_k_tiles, pl->tile_n / 32, 0), 0);
  char what[160];
  if (rows <= TSR_MAX_ROWS && tiles <= TSR_MAX_TILE_RECORDS && words <= TSR_MAX_MEMBERSHIP_WORDS)
    return TSR_OK; /* every real problem: no count, no message */
  snprintf(what, sizeof what, "tile %dx%d over %lld x %lld tokens", pl->tile_m, pl->tile_n,
           (long long)p->seq_q, (long long)p->seq_k);
  if (rows > TSR_MAX_ROWS)
    return tsr_error_set(err, TSR_ERR_CAPACITY,
                         "plan too large: batch %lld x %lld query heads x %lld query tiles (%s) is "
                         "more than the %lld rows a plan can address",
                         (long long)p->batch, (long long)p->heads_q, (long long)pl->n_q_tiles,
                         what, (long long)TSR_MAX_ROWS);
  if (tiles <= TSR_MAX_TILE_RECORDS && words <= TSR_MAX_MEMBERSHIP_WORDS)
    return TSR_OK;
  if (tsri_map_count(pl, m, &tiles, &words))
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot plan: out of memory counting tiles");
  if (tiles > TSR_MAX_TILE_RECORDS)
    return tsr_error_set(err, TSR_ERR_CAPACITY,
                         "plan too large: the mask selects more than the %lld tile records a plan "
                         "can address (%s)",
                         (long long)TSR_MAX_TILE_RECORDS, what);
  if (words > TSR_MAX_MEMBERSHIP_WORDS)
    return tsr_error_set(err, TSR_ERR_CAPACITY,
                         "plan too large: the mask's partial tiles need more than the %lld "
                         "membership words a plan can address (%s)",
                         (long long)TSR_MAX_MEMBERSHIP_WORDS, what);
  return TSR_OK;
}

tsr_status tsri_map_build(tsr_plan *pl, const tsr_mask *m, tsr_map_ranges *rows, tsr_error *err)
{
  map_ctx c;
  tsr_status st = TSR_OK;
  const tsr_problem *p = &pl->problem;
  int64_t mb = tsr_mask_batch(m), mh = tsr_mask_heads(m), np, pi, t, b, h;
  int64_t group = p->heads_q / p->heads_kv, pop = 0;
#ifdef HAVE_POPCNT_COPY
  int hw_popcnt = __builtin_cpu_supports("popcnt");
#endif
  prow *pr = NULL;
  double *psel = NULL;
  const uint64_t **planes = NULL;

  memset(&c, 0, sizeof c);
  memset(rows, 0, sizeof *rows);
  c.pl = pl;
  c.simd = tsri_simd_level();
  st = check_capacity(pl, m, err);
  if (!st)
    st = build_tables(&c, err);
  if (st)
    goto done;
  np = mb * mh;
  {
    const char *cap = getenv("TESSERA_PLAN_SIMD");
    rows->plain = cap && !strcmp(cap, "none");
  }
  planes = tsri_plan_buf(pl, TSR_BUF_PLANES, (size_t)np * sizeof *planes);
  pr = tsri_plan_buf(pl, TSR_BUF_PROW, (size_t)(np * c.nqt) * sizeof *pr);
  psel = tsri_plan_buf(pl, TSR_BUF_PSEL, (size_t)np * sizeof *psel);
  rows->n_rows = p->batch * p->heads_q * c.nqt;
  rows->tile_begin = tsri_plan_buf(pl, TSR_BUF_ROW_TB, (size_t)rows->n_rows * sizeof(tsr_i32));
  rows->tile_end = tsri_plan_buf(pl, TSR_BUF_ROW_TE, (size_t)rows->n_rows * sizeof(tsr_i32));
  rows->all_full = tsri_plan_buf(pl, TSR_BUF_ROW_FULL, (size_t)rows->n_rows);
  rows->twin = tsri_plan_buf(pl, TSR_BUF_ROW_TWIN, (size_t)rows->n_rows * sizeof(tsr_i32));
  pl->tiles = tsri_plan_buf(pl, TSR_BUF_TILES, 1024 * sizeof *pl->tiles);
  pl->membership = tsri_plan_buf(pl, TSR_BUF_MEMBERSHIP, 1024 * sizeof *pl->membership);
  c.cap_tiles = (int64_t)(pl->bufs[TSR_BUF_TILES].cap / sizeof *pl->tiles);
  c.cap_mem = (int64_t)(pl->bufs[TSR_BUF_MEMBERSHIP].cap / sizeof *pl->membership);
  if (!planes || !pr || !psel || !rows->tile_begin || !rows->tile_end ||
      !rows->all_full || !rows->twin || !pl->tiles || !pl->membership) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot plan: out of memory for %lld mask planes",
                       (long long)np);
    goto done;
  }

  /* Plane by plane, on the mask's packed rows (mask.c): count, then emit
   * while the plane's bits are still in the cache. */
  for (pi = 0; pi < np; pi++) {
    int64_t head = pi % mh;
    const uint64_t *plane = tsr_mask_packed_plane(m, pi / mh, head, NULL);
    planes[pi] = plane;
#ifdef HAVE_POPCNT_COPY
    if (hw_popcnt && c.simd > TSR_SIMD_NONE)
      psel[pi] = plane_selected_popcnt(&c, plane, &pop);
    else
#endif
      psel[pi] = plane_selected(&c, plane, &pop);
    for (t = 0; t < c.nqt; t++) {
      prow *o = &pr[pi * c.nqt + t];
      o->twin_head = -1;
      /* A GQA head whose rows equal an earlier head's (of the same group)
       * reuses that head's tiles, which also lets tasks.c pack them. */
      if (mh > 1 && group > 1 && head % group) {
        int64_t h0, span = (int64_t)(c.i1[t] - c.i0[t] + 1) * c.W;
        for (h0 = head - head % group; h0 < head; h0++) {
          const prow *e = &pr[(pi - head + h0) * c.nqt + t];
          const uint64_t *other = planes[pi - head + h0];
          if (e->twin_head < 0 &&
              !memcmp(plane + c.i0[t] * c.W, other + c.i0[t] * c.W, (size_t)span * 8)) {
            *o = *e;
            o->twin_head = (tsr_i32)h0;
            break;
          }
        }
        if (o->twin_head >= 0)
          continue;
      }
      if (emit_row(&c, plane, t, o)) {
        st = tsr_error_set(err, TSR_ERR_NOMEM,
                           "cannot plan: out of memory after %lld tiles and %lld membership words",
                           (long long)pl->n_tiles, (long long)pl->n_membership);
        goto done;
      }
    }
  }

  /* Problem rows from plane rows, honouring broadcast.  Sums in locals:
   * through `rows` they would be reloaded after every byte store. */
  {
    tsr_i32 *tb = rows->tile_begin, *te = rows->tile_end, *twin = rows->twin;
    uint8_t *full = rows->all_full;
    int64_t ntiles = 0, npartial = 0;
    double selected = 0, computed = 0;
    for (b = 0; b < p->batch; b++) {
      for (h = 0; h < p->heads_q; h++) {
        int64_t pidx = (mb == 1 ? 0 : b) * mh + (mh == 1 ? 0 : h);
        int64_t rbase = (b * p->heads_q + h) * c.nqt;
        tsr_i32 root = mh == 1 && group > 1 && h % group
                           ? (tsr_i32)((b * p->heads_q + h - h % group) * c.nqt)
                           : -1;
        selected += psel[pidx];
        for (t = 0; t < c.nqt; t++) {
          const prow *o = &pr[pidx * c.nqt + t];
          int64_t r = rbase + t, rows_t = ((t + 1) * pl->tile_m < p->seq_q ? pl->tile_m
                                                                            : p->seq_q - t * pl->tile_m);
          tb[r] = o->tb;
          te[r] = o->te;
          full[r] = o->full;
          if (o->twin_head >= 0)
            twin[r] = (tsr_i32)((b * p->heads_q + o->twin_head) * c.nqt + t);
          else
            twin[r] = root < 0 ? -1 : root + (tsr_i32)t;
          ntiles += o->te - o->tb;
          npartial += o->partial;
          computed += (double)o->cols * (double)rows_t;
        }
      }
    }
    rows->tiles = ntiles;
    rows->partial_tiles = npartial;
    rows->selected_pairs = selected;
    rows->computed_pairs = computed;
  }

done:
  return st;
}

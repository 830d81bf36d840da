/*
 * features.c: cheap features of a logical mask for plan selection.
 *
 * Runs on every request before the lookup, so it must cost far less than
 * planning: on the mask's packed rows (mask.c, built once), one pass per
 * plane to sum the selected key tokens of each logical row, then per
 * candidate tile shape and distinct run of query tiles one OR of the rows
 * it overlaps and one walk over the selected key blocks
 * (count-trailing-zeros), merging their key-tile ranges.  About nq*nk/64
 * words plus 4 x selected blocks per plane; no plan is built.  The tile
 * counts are exactly those a plan at that tile would emit (a tile is
 * touched when any selected logical block overlaps it), so fill[] is the
 * fraction of computed pairs that are selected.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

static const int tile_m_of[TSR_FEATURE_TILES] = {64, 64, 128, 128};
static const int tile_n_of[TSR_FEATURE_TILES] = {64, 128, 64, 128};

void tsr_features_tile(int i, int *tile_m, int *tile_n)
{
  if (i < 0 || i >= TSR_FEATURE_TILES)
    i = TSR_FEATURE_TILES - 1;
  *tile_m = tile_m_of[i];
  *tile_n = tile_n_of[i];
}

/* Any bit set in words[] at positions lo..hi inclusive. */
static int any_bits(const uint64_t *w, int64_t lo, int64_t hi)
{
  int64_t a = lo >> 6, b = hi >> 6, i;
  uint64_t lo_mask = ~0ULL << (lo & 63), hi_mask = ~0ULL >> (63 - (hi & 63));
  if (a == b)
    return (w[a] & lo_mask & hi_mask) != 0;
  if (w[a] & lo_mask)
    return 1;
  for (i = a + 1; i < b; i++)
    if (w[i])
      return 1;
  return (w[b] & hi_mask) != 0;
}

/* How key tiles of one shape relate to the key blocks, for counting the
 * touched tiles of a row of selected blocks without visiting each block:
 * GROUP, uniform blocks with `g` (a power of two) of them to a tile;
 * SPLIT, uniform blocks each spanning `g` tiles; WALK, anything else. */
enum { K_GROUP, K_SPLIT, K_WALK };

static int key_mode(int64_t bk, int64_t tn, int64_t *g)
{
  if (bk > 0 && tn % bk == 0 && ((tn / bk) & (tn / bk - 1)) == 0 && tn / bk <= 64) {
    *g = tn / bk;
    return K_GROUP;
  }
  if (bk > 0 && bk % tn == 0) {
    *g = bk / tn;
    return K_SPLIT;
  }
  *g = 0;
  return K_WALK;
}

/* Bits at the positions that are multiples of g (g a power of two <= 64). */
static uint64_t group_mask(int64_t g)
{
  uint64_t m = 0;
  int64_t i;
  for (i = 0; i < 64; i += g)
    m |= 1ULL << i;
  return m;
}

typedef struct {
  int64_t nq, nk, words, sq, sk;
  int64_t bk;                           /* uniform key blocks; 0 when variable */
  int64_t *qs, *ks;                     /* block starts, nq+1 / nk+1 */
  double *kw;                           /* key block widths, nk */
  int64_t *b_klo[TSR_FEATURE_TILES], *b_khi[TSR_FEATURE_TILES]; /* key tiles of a key block */
  int64_t n_qt[TSR_FEATURE_TILES], n_kt[TSR_FEATURE_TILES];
  int mode[TSR_FEATURE_TILES];          /* K_GROUP, K_SPLIT or K_WALK */
  int64_t gk[TSR_FEATURE_TILES];        /* its g */
  uint64_t gm[TSR_FEATURE_TILES];       /* K_GROUP: group_mask(g) */
  uint64_t *acc;                        /* words */
} scratch;

/* Sums over the planes. */
typedef struct {
  int64_t sel_blocks, empty;
  double sel_pairs, row_sum, row_sq;
  int64_t touched[TSR_FEATURE_TILES];
  double area[TSR_FEATURE_TILES];
} sums;

static void scratch_free(scratch *s)
{
  int t;
  free(s->qs);
  free(s->ks);
  free(s->kw);
  for (t = 0; t < TSR_FEATURE_TILES; t++) {
    free(s->b_klo[t]);
    free(s->b_khi[t]);
  }
  free(s->acc);
}

static int scratch_init(scratch *s, const tsr_geom *g)
{
  int64_t i, bq;
  int t;
  memset(s, 0, sizeof *s);
  s->nq = tsr_geom_nq(g);
  s->nk = tsr_geom_nk(g);
  s->sq = tsr_geom_seq_q(g);
  s->sk = tsr_geom_seq_k(g);
  s->words = (s->nk + 63) / 64;
  if (!tsr_geom_is_uniform(g, &bq, &s->bk))
    s->bk = 0;
  s->qs = malloc(sizeof(int64_t) * (size_t)(s->nq + 1));
  s->ks = malloc(sizeof(int64_t) * (size_t)(s->nk + 1));
  s->kw = malloc(sizeof(double) * (size_t)s->nk);
  s->acc = malloc(sizeof(uint64_t) * (size_t)s->words);
  if (!s->qs || !s->ks || !s->kw || !s->acc)
    return -1;
  for (i = 0; i <= s->nq; i++)
    s->qs[i] = tsr_geom_q_start(g, i);
  for (i = 0; i <= s->nk; i++)
    s->ks[i] = tsr_geom_k_start(g, i);
  for (i = 0; i < s->nk; i++)
    s->kw[i] = (double)(s->ks[i + 1] - s->ks[i]);
  for (t = 0; t < TSR_FEATURE_TILES; t++) {
    int64_t tm = tile_m_of[t], tn = tile_n_of[t];
    s->n_qt[t] = (s->sq + tm - 1) / tm;
    s->n_kt[t] = (s->sk + tn - 1) / tn;
    s->mode[t] = key_mode(s->bk, tn, &s->gk[t]);
    s->gm[t] = s->mode[t] == K_GROUP ? group_mask(s->gk[t]) : 0;
    s->b_klo[t] = malloc(sizeof(int64_t) * (size_t)s->nk);
    s->b_khi[t] = malloc(sizeof(int64_t) * (size_t)s->nk);
    if (!s->b_klo[t] || !s->b_khi[t])
      return -1;
    for (i = 0; i < s->nk; i++) {
      s->b_klo[t][i] = s->ks[i] / tn;
      s->b_khi[t][i] = (s->ks[i + 1] - 1) / tn;
    }
  }
  return 0;
}

/* The selected key tokens of each logical row of one plane's packed rows:
 * selected pairs, row-length moments, empty rows. */
static void add_rows(const scratch *s, const uint64_t *rows, sums *a)
{
  int64_t i, k;
  for (i = 0; i < s->nq; i++) {
    const uint64_t *w = rows + i * s->words;
    double tok = 0;
    int64_t nsel = 0;
    for (k = 0; k < s->words; k++)
      nsel += __builtin_popcountll(w[k]);
    if (s->bk) { /* uniform: every selected block is bk wide but the last */
      tok = (double)nsel * (double)s->bk;
      if ((w[(s->nk - 1) >> 6] >> ((s->nk - 1) & 63)) & 1)
        tok -= (double)(s->bk - (s->sk - (s->nk - 1) * s->bk));
    } else {
      for (k = 0; k < s->words; k++) {
        uint64_t bits = w[k];
        while (bits) {
          tok += s->kw[k * 64 + __builtin_ctzll(bits)];
          bits &= bits - 1;
        }
      }
    }
    a->sel_blocks += nsel;
    a->sel_pairs += tok * (double)(s->qs[i + 1] - s->qs[i]);
    a->row_sum += tok;
    a->row_sq += tok * tok;
    a->empty += tok == 0;
  }
}

/* The key tiles of shape t that the selected key blocks in s->acc touch
 * (*cnt), and the key tokens those tiles span (*width). */
static void key_cover(const scratch *s, int t, int64_t *cnt, int64_t *width)
{
  int64_t tn = tile_n_of[t], g = s->gk[t], sk = s->sk, w;
  *cnt = *width = 0;
  if (s->mode[t] == K_GROUP) {
    /* Fold each group of g block bits onto its first bit. */
    int64_t last = s->n_kt[t] - 1, sh;
    for (w = 0; w < s->words; w++) {
      uint64_t y = s->acc[w];
      for (sh = 1; sh < g; sh <<= 1)
        y |= y >> sh;
      *cnt += __builtin_popcountll(y & s->gm[t]);
    }
    *width = *cnt * tn;
    if (any_bits(s->acc, last * g, s->nk - 1))
      *width -= tn - (sk - last * tn);
  } else if (s->mode[t] == K_SPLIT) {
    /* Each selected block is g tiles; the ragged last one fewer. */
    int64_t nsel = 0, lastw = sk - (s->nk - 1) * s->bk;
    for (w = 0; w < s->words; w++)
      nsel += __builtin_popcountll(s->acc[w]);
    *cnt = nsel * g;
    *width = nsel * s->bk;
    if ((s->acc[(s->nk - 1) >> 6] >> ((s->nk - 1) & 63)) & 1) {
      *cnt -= g - (lastw + tn - 1) / tn;
      *width -= s->bk - lastw;
    }
  } else {
    /* Selected key blocks in order; their key-tile ranges are
     * non-decreasing, so the union is counted in one pass. */
    int64_t cur_end = -1;
    for (w = 0; w < s->words; w++) {
      uint64_t bits = s->acc[w];
      while (bits) {
        int64_t jb = w * 64 + __builtin_ctzll(bits), lo = s->b_klo[t][jb], hi = s->b_khi[t][jb];
        int64_t start = lo > cur_end + 1 ? lo : cur_end + 1;
        int64_t end = (hi + 1) * tn < sk ? (hi + 1) * tn : sk;
        int64_t add = hi - start + 1;
        bits &= bits - 1;
        /* add <= 0 when the block's tiles are already counted. */
        *cnt += add > 0 ? add : 0;
        *width += add > 0 ? end - start * tn : 0;
        cur_end = hi > cur_end ? hi : cur_end;
      }
    }
  }
}

/* The tiles of shape t that one plane's packed rows touch, and the pairs
 * they compute: per distinct run of query tiles, one OR of the logical rows
 * it overlaps and one key_cover. */
static void add_tiles(scratch *s, const uint64_t *rows, int t, sums *a)
{
  int64_t tm = tile_m_of[t], sq = s->sq, r = 0, w, i, qlo = 0;
  while (r < s->n_qt[t]) {
    int64_t lo = r * tm, e = lo + tm < sq ? lo + tm : sq, qhi, run = 1, rows_in, cnt, width;
    while (s->qs[qlo + 1] <= lo)
      qlo++;
    for (qhi = qlo; s->qs[qhi + 1] < e; qhi++)
      ;
    /* Tile rows inside one logical row, up to its end, touch the same key
     * tiles (64-row tiles in 128-row blocks, say): one count for the run,
     * so the walk is O(blocks), not O(tokens / tile). */
    if (qhi == qlo)
      run = (s->qs[qlo + 1] == sq ? s->n_qt[t] : s->qs[qlo + 1] / tm) - r;
    rows_in = ((r + run) * tm < sq ? (r + run) * tm : sq) - lo;
    memcpy(s->acc, rows + qlo * s->words, sizeof(uint64_t) * (size_t)s->words);
    for (i = qlo + 1; i <= qhi; i++)
      for (w = 0; w < s->words; w++)
        s->acc[w] |= rows[i * s->words + w];
    key_cover(s, t, &cnt, &width);
    a->touched[t] += run * cnt;
    a->area[t] += (double)rows_in * (double)width;
    r += run;
  }
}

/* The features from the sums over `planes` planes. */
static void finish(const tsr_problem *p, const scratch *s, const sums *a, int64_t planes,
                   int num_sms, tsr_features *f)
{
  double nrows = (double)(planes * s->nq), mean = a->row_sum / nrows;
  double var = a->row_sq / nrows - mean * mean;
  int sms = num_sms ? num_sms : TSR_DEFAULT_NUM_SMS, t;
  f->density = a->sel_pairs / ((double)planes * (double)s->sq * (double)s->sk);
  f->block_density = (double)a->sel_blocks / ((double)planes * (double)s->nq * (double)s->nk);
  f->row_cv = mean > 0 ? sqrt(var > 0 ? var : 0) / mean : 0;
  f->empty_rows = (double)a->empty / nrows;
  for (t = 0; t < TSR_FEATURE_TILES; t++) {
    f->fill[t] = a->area[t] > 0 ? a->sel_pairs / a->area[t] : 1.0;
    f->touched[t] = a->touched[t];
  }
  f->rows_per_sm = (double)p->batch * (double)p->heads_q * (double)((s->sq + 127) / 128) / sms;
  if (!tsr_geom_is_uniform(p->geom, &f->bq, &f->bk))
    f->bq = f->bk = 0;
  f->seq_q = s->sq;
  f->seq_k = s->sk;
  f->head_dim = p->head_dim;
  f->dtype = p->dtype;
  f->num_sms = sms;
}

tsr_status tsr_features_compute(const tsr_problem *p, const tsr_mask *m, int num_sms,
                                tsr_features *f, tsr_error *err)
{
  scratch s;
  sums a;
  tsr_status st;
  int64_t b, h;
  int t;
  if (!p || !m || !f || !p->geom)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot compute mask features: %s is NULL",
                         !p ? "problem" : !m ? "mask" : !f ? "output" : "problem geometry");
  if (num_sms < 0)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot compute mask features: %d multiprocessors", num_sms);
  if ((st = tsr_mask_check(m, p->geom, p->batch, p->heads_q, NULL, err)) != TSR_OK)
    return st;
  if (p->head_dim <= 0)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot compute mask features: head dim %lld",
                         (long long)p->head_dim);
  memset(f, 0, sizeof *f);
  memset(&a, 0, sizeof a);
  if (scratch_init(&s, p->geom) != 0) {
    scratch_free(&s);
    return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory computing mask features");
  }
  /* The mask's own packed rows (mask.c), plane by plane. */
  for (b = 0; b < tsr_mask_batch(m); b++)
    for (h = 0; h < tsr_mask_heads(m); h++) {
      const uint64_t *rows = tsr_mask_packed_plane(m, b, h, NULL);
      add_rows(&s, rows, &a);
      for (t = 0; t < TSR_FEATURE_TILES; t++)
        add_tiles(&s, rows, t, &a);
    }
  finish(p, &s, &a, tsr_mask_batch(m) * tsr_mask_heads(m), num_sms, f);
  scratch_free(&s);
  return TSR_OK;
}

/* One table for both directions, so stored names and fields never drift. */
#define FEATURE_FIELDS(X)                                                  \
  X("density", density, double) X("block_density", block_density, double)  \
  X("row_cv", row_cv, double) X("empty_rows", empty_rows, double)          \
  X("fill_64x64", fill[0], double) X("fill_64x128", fill[1], double)       \
  X("fill_128x64", fill[2], double) X("fill_128x128", fill[3], double)     \
  X("touched_64x64", touched[0], int64_t)                                  \
  X("touched_64x128", touched[1], int64_t)                                 \
  X("touched_128x64", touched[2], int64_t)                                 \
  X("touched_128x128", touched[3], int64_t)                                \
  X("rows_per_sm", rows_per_sm, double) X("bq", bq, int64_t)               \
  X("bk", bk, int64_t) X("seq_q", seq_q, int64_t) X("seq_k", seq_k, int64_t) \
  X("head_dim", head_dim, int64_t) X("dtype", dtype, tsr_dtype)            \
  X("num_sms", num_sms, int)

int tsr_features_list(const tsr_features *f, const char **names, double *values)
{
  int n = 0;
#define X_LIST(nm, field, type) names[n] = nm, values[n] = (double)f->field, n++;
  FEATURE_FIELDS(X_LIST)
#undef X_LIST
  return n;
}

int tsr_features_set(tsr_features *f, const char *name, double value)
{
#define X_SET(nm, field, type)     \
  if (!strcmp(name, nm)) {         \
    f->field = (type)value;        \
    return 1;                      \
  }
  FEATURE_FIELDS(X_SET)
#undef X_SET
  return 0;
}

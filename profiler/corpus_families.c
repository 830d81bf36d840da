/*
 * corpus_families.c: the rule of every sparse-attention family of the mask
 * corpus, each turning (shape, parameters, and for the data-dependent ones
 * block probabilities) into one head's [nq][nk] 0/1 block plane.  The rules
 * and their parameters are those of docs/mask-families.md (quoted as
 * "mask-families.md: ..." below), which gathers them from each method's
 * paper and public code and names them.
 *
 * Cost: the rule families are O(nq x nk); Radial reduces a token-level rule
 * in O(tokens x blocks) by counting rows per column segment instead of
 * visiting every token pair; the score families sort each row once
 * (O(nq x nk log nk)).  Everything is deterministic: ties go to the lower
 * block index.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "corpus_impl.h"

/* ---- Sparse VideoGen ----------------------------------------------------- */

/* mask-families.md: "Spatial head: in frame-major order keep block (i, j) when
 * |i - j| * B is inside a band of w frames; w from target density d:
 * w_frames = N (1 - sqrt(1 - d)) / f ... Wan adds a first-frame sink (all key
 * columns < f).  Temporal head: the same band after permuting tokens from
 * (frame, spatial) to (spatial, frame) order."  The band half-width in tokens
 * is w_frames * f = N (1 - sqrt(1 - d)): a band of that half-width covers a
 * fraction 1 - (1 - w/N)^2 = d of the N x N square. */
void tsr_corpus_svg_band(int64_t nb, int64_t block, int64_t n, double density,
                         int64_t sink_tokens, uint8_t *plane)
{
  double wtok = (double)n * (1.0 - sqrt(1.0 - density));
  int64_t i, j;
  for (i = 0; i < nb; i++)
    for (j = 0; j < nb; j++) {
      int64_t d = i > j ? i - j : j - i;
      plane[i * nb + j] = (double)(d * block) <= wtok || j * block < sink_tokens;
    }
}

/* ---- Sliding Tile Attention ---------------------------------------------- */

/* mask-families.md: "Query tile q keeps key tile k when |centre - k| <= K/2 on all
 * three axes, with centre = clamp(q, K/2, n_tiles - 1 - K/2) per axis, so
 * every row keeps exactly Kt*Kh*Kw tiles."  Written as the window start
 * clamp(q - K/2, 0, n - K), identical for the published (odd) windows and
 * still exactly K wide for a window clamped to an even tile count. */
static int sta_start(int q, int k, int n) { int s = q - k / 2; return s < 0 ? 0 : s > n - k ? n - k : s; }

void tsr_corpus_sta(const int grid[3], const int k[3], uint8_t *plane)
{
  int64_t n = (int64_t)grid[0] * grid[1] * grid[2], qi, ki;
  for (qi = 0; qi < n; qi++) {
    int q[3] = {(int)(qi / ((int64_t)grid[1] * grid[2])), (int)((qi / grid[2]) % grid[1]),
                (int)(qi % grid[2])};
    int s[3], a;
    for (a = 0; a < 3; a++)
      s[a] = sta_start(q[a], k[a], grid[a]);
    for (ki = 0; ki < n; ki++) {
      int x = (int)(ki / ((int64_t)grid[1] * grid[2])), y = (int)((ki / grid[2]) % grid[1]),
          z = (int)(ki % grid[2]);
      plane[qi * n + ki] = x >= s[0] && x < s[0] + k[0] && y >= s[1] && y < s[1] + k[1] &&
                           z >= s[2] && z < s[2] + k[2];
    }
  }
}

/* ---- Radial attention ------------------------------------------------------ */

static int bitlen(int64_t x)
{
  int b = 0;
  while (x > 0) {
    b++;
    x >>= 1;
  }
  return b;
}

/* Rows of frame fi with spatial index in [s0, s1) selected at key token
 * (fj, sj).  mask-families.md: "Frame pair (i, j), d = |i - j|: d <= 1 full; otherwise
 * in-frame band half-width w = max(2^bitlen(f) / 2^bitlen(d) * decay, B);
 * when 2^bitlen(f)/2^bitlen(d) < B keep only pairs with d mod floor(B / that)
 * == 0.  Wan keeps frame 0 as a sink." */
static int64_t radial_rows(int64_t fi, int64_t s0, int64_t s1, int64_t fj, int64_t sj,
                           int64_t f, int64_t block, double decay, int sink)
{
  int64_t d = fi > fj ? fi - fj : fj - fi, w, lo, hi;
  double r;
  if (d <= 1 || (sink && fj == 0))
    return s1 - s0;
  r = ldexp(1.0, bitlen(f) - bitlen(d));
  if (r < (double)block && d % (int64_t)floor((double)block / r) != 0)
    return 0;
  w = (int64_t)floor(fmax(r * decay, (double)block));
  lo = sj - w > s0 ? sj - w : s0;
  hi = sj + w + 1 < s1 ? sj + w + 1 : s1;
  return hi > lo ? hi - lo : 0;
}

/* mask-families.md: "Reduced to B = 128 (or 64) blocks: keep a block when > 60% of its
 * non-empty columns have density > 1/3." */
void tsr_corpus_radial(int frames, int64_t frame_tokens, int64_t block, double decay,
                       int sink, uint8_t *plane)
{
  int64_t f = frame_tokens, n = frames * f, nb = (n + block - 1) / block, bi, bj, j;
  for (bi = 0; bi < nb; bi++) {
    int64_t a = bi * block, b = a + block < n ? a + block : n;
    for (bj = 0; bj < nb; bj++) {
      int64_t c = bj * block, e = c + block < n ? c + block : n, nonempty = 0, dense = 0;
      for (j = c; j < e; j++) {
        int64_t fj = j / f, sj = j % f, cnt = 0, fi;
        for (fi = a / f; fi <= (b - 1) / f; fi++) {
          int64_t r0 = a > fi * f ? a : fi * f, r1 = b < (fi + 1) * f ? b : (fi + 1) * f;
          cnt += radial_rows(fi, r0 - fi * f, r1 - fi * f, fj, sj, f, block, decay, sink);
        }
        if (cnt > 0)
          nonempty++;
        if (3 * cnt > (b - a))
          dense++;
      }
      plane[bi * nb + bj] = nonempty > 0 && 10 * dense > 6 * nonempty;
    }
  }
}

/* ---- Score families ---------------------------------------------------------- */

typedef struct {
  double p;
  int64_t i;
} ranked;

static int ranked_cmp(const void *x, const void *y)
{
  const ranked *a = x, *b = y;
  if (a->p != b->p)
    return a->p > b->p ? -1 : 1;
  return a->i < b->i ? -1 : a->i > b->i;
}

static void rank_row(const double *row, int64_t nk, ranked *r)
{
  int64_t j;
  for (j = 0; j < nk; j++) {
    r[j].p = row[j];
    r[j].i = j;
  }
  qsort(r, (size_t)nk, sizeof *r, ranked_cmp);
}

/* mask-families.md (VSA): "per-row top-k with k = ceil((1 - s) * n_cubes)". */
tsr_status tsr_corpus_topk(const double *prob, int64_t nq, int64_t nk, int64_t k,
                          uint8_t *plane, tsr_error *err)
{
  ranked *r = malloc((size_t)nk * sizeof *r);
  int64_t a, j;
  if (!r)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate a %lld-block row", (long long)nk);
  memset(plane, 0, (size_t)(nq * nk));
  if (k > nk)
    k = nk;
  for (a = 0; a < nq; a++) {
    rank_row(prob + a * nk, nk, r);
    for (j = 0; j < k; j++)
      plane[a * nk + r[j].i] = 1;
  }
  free(r);
  return TSR_OK;
}

/* mask-families.md (SpargeAttn: "keep blocks until the row CDF reaches 0.9-0.98";
 * XAttention: "per row keep the smallest set of blocks whose normalized
 * cumulative score reaches 0.9-0.95"; Jenga: "keep blocks until cumulative
 * probability 0.8-0.9 with a floor of (1 - drop) * n blocks").  Taking blocks
 * in decreasing probability gives the fewest blocks reaching tau. */
tsr_status tsr_corpus_cdf(const double *prob, int64_t nq, int64_t nk, double tau,
                         int64_t min_keep, uint8_t *plane, tsr_error *err)
{
  ranked *r = malloc((size_t)nk * sizeof *r);
  int64_t a, j;
  if (!r)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate a %lld-block row", (long long)nk);
  for (a = 0; a < nq; a++) {
    double tot = 0, cum = 0;
    rank_row(prob + a * nk, nk, r);
    for (j = 0; j < nk; j++)
      tot += r[j].p;
    for (j = 0; j < nk; j++) {
      if (cum >= tau * tot && j >= min_keep)
        break;
      cum += r[j].p;
      plane[a * nk + r[j].i] = 1;
    }
  }
  free(r);
  return TSR_OK;
}

/* mask-families.md (XAttention): "block score = sum of softmax values
 * sampled along antidiagonals at stride 8-16; per row keep the smallest set
 * of blocks whose normalized cumulative score reaches 0.9-0.95".  Given the
 * block scores (the corpus simulates the antidiagonal sums, tessera.methods
 * computes them from q and k), the rule is the CDF rule at tau with at least
 * one block a row; one name, so the corpus and tests/methods_rule apply the
 * same XAttention rule. */
tsr_status tsr_corpus_xattn(const double *score, int64_t nq, int64_t nk, double tau,
                            uint8_t *plane, tsr_error *err)
{
  return tsr_corpus_cdf(score, nq, nk, tau, 1, plane, err);
}

/* mask-families.md (SpargeAttn): "keep blocks until the row CDF reaches
 * 0.9-0.98, or top-k fraction; blocks with low self-similarity are forced on
 * for their whole row/column; optional sink column 0".  tau > 0 takes the
 * CDF rule, else the top ceil(topf * nk) blocks of each row; then every row
 * i with selfq[i] < theta, every column j with selfk[j] < theta and (sink)
 * column 0 are set.  Adds to the plane (OR), as tsr_corpus_cdf does. */
tsr_status tsr_corpus_sparge(const double *prob, const double *selfq, const double *selfk,
                             int64_t nq, int64_t nk, double tau, double topf, double theta,
                             int sink, uint8_t *plane, tsr_error *err)
{
  int64_t i, j;
  tsr_status st = tau > 0 ? tsr_corpus_cdf(prob, nq, nk, tau, 1, plane, err)
                          : tsr_corpus_topk(prob, nq, nk, (int64_t)ceil(topf * (double)nk), plane,
                                            err);
  if (st)
    return st;
  for (i = 0; i < nq; i++)
    for (j = 0; j < nk; j++)
      if (selfq[i] < theta || selfk[j] < theta || (sink && j == 0))
        plane[i * nk + j] = 1;
  return TSR_OK;
}

/* ---- Sparse-vDiT ------------------------------------------------------------ */

/* Spatial index intervals [lo, hi) covered by tokens [a, b) of a frame-major
 * sequence with f tokens per frame: at most two, or all of [0, f). */
static int spatial_spans(int64_t a, int64_t b, int64_t f, int64_t lo[2], int64_t hi[2])
{
  if (b - a >= f) {
    lo[0] = 0;
    hi[0] = f;
    return 1;
  }
  if (a / f == (b - 1) / f) {
    lo[0] = a % f;
    hi[0] = (b - 1) % f + 1;
    return 1;
  }
  lo[0] = a % f;
  hi[0] = f;
  lo[1] = 0;
  hi[1] = (b - 1) % f + 1;
  return 2;
}

/* mask-families.md: "Fixed per-head patterns chosen offline: diagonal (within a
 * frame), multi-diagonal (same spatial position across frames), vertical
 * stripe (global columns)".  A block is kept when the pattern selects any of
 * its token pairs, as a block kernel must. */
tsr_status tsr_corpus_svdit(int pattern, int frames, int64_t frame_tokens, int64_t block,
                            int64_t width, uint64_t seed, uint8_t *plane, tsr_error *err)
{
  int64_t f = frame_tokens, n = frames * f, nb = (n + block - 1) / block, bi, bj;
  uint8_t *col = NULL;
  if (pattern == TSR_SVDIT_STRIPE) {
    tsr_corpus_rng r;
    col = calloc((size_t)nb, 1);
    if (!col)
      return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate %lld stripe columns",
                           (long long)nb);
    tsr_corpus_rng_seed(&r, seed);
    /* Global columns: the first frame (the usual sink) and one key block in
     * `width`, placed by the head's seed. */
    for (bj = 0; bj < nb; bj++)
      col[bj] = bj * block < f || tsr_corpus_rng_uniform(&r) * (double)width < 1.0;
  }
  for (bi = 0; bi < nb; bi++) {
    int64_t a = bi * block, b = a + block < n ? a + block : n, qlo[2], qhi[2];
    int nqs = spatial_spans(a, b, f, qlo, qhi);
    for (bj = 0; bj < nb; bj++) {
      int64_t c = bj * block, e = c + block < n ? c + block : n, klo[2], khi[2];
      int keep = 0, x, y;
      if (pattern == TSR_SVDIT_DIAG) {
        keep = a / f <= (e - 1) / f && c / f <= (b - 1) / f;
      } else if (pattern == TSR_SVDIT_MULTIDIAG) {
        int nks = spatial_spans(c, e, f, klo, khi);
        for (x = 0; x < nqs && !keep; x++)
          for (y = 0; y < nks && !keep; y++)
            /* Interval distance between [qlo, qhi) and [klo, khi). */
            keep = qlo[x] - (khi[y] - 1) <= width && klo[y] - (qhi[x] - 1) <= width;
      } else {
        keep = col[bj];
      }
      plane[bi * nb + bj] = (uint8_t)keep;
    }
  }
  free(col);
  return TSR_OK;
}

/* ---- Jenga neighbours --------------------------------------------------------- */

/* mask-families.md (Jenga): "plus each block's 3D neighbours". */
tsr_status tsr_corpus_neighbours(const tsr_corpus_layout *l, uint8_t **adj, tsr_error *err)
{
  int64_t *blk = malloc((size_t)l->n * sizeof *blk), b, s, hw = (int64_t)l->h * l->w;
  uint8_t *m = calloc((size_t)(l->nb * l->nb), 1);
  *adj = NULL;
  if (!blk || !m) {
    free(blk);
    free(m);
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate %lld-block neighbours",
                         (long long)l->nb);
  }
  for (b = 0; b < l->nb; b++)
    for (s = l->start[b]; s < l->start[b + 1]; s++)
      blk[l->perm[s]] = b; /* natural token -> its block */
  for (s = 0; s < l->n; s++) {
    int64_t t = s / hw, h = (s / l->w) % l->h, w = s % l->w, me = blk[s];
    m[me * l->nb + me] = 1;
    if (t + 1 < l->t) {
      m[me * l->nb + blk[s + hw]] = 1;
      m[blk[s + hw] * l->nb + me] = 1;
    }
    if (h + 1 < l->h) {
      m[me * l->nb + blk[s + l->w]] = 1;
      m[blk[s + l->w] * l->nb + me] = 1;
    }
    if (w + 1 < l->w) {
      m[me * l->nb + blk[s + 1]] = 1;
      m[blk[s + 1] * l->nb + me] = 1;
    }
  }
  free(blk);
  *adj = m;
  return TSR_OK;
}

/*
 * corpus_synth.c: synthetic queries and keys "made the way the models make
 * them", token orders, and pooled block scores for the data-dependent mask
 * families of the corpus generator.
 *
 * The generator.  A video DiT head sees, at latent position p = (t, h, w),
 *     q(p) = R(p) (alpha u_q + gamma sum_k w_k(p) z_qk + beta eps_p)
 * and k(p) likewise with u_k, z_kk and its own noise, where R(p) is the 3D
 * rotary embedding (head-dim channel pairs split over the t, h and w axes,
 * pair j of an axis of d channels rotating by pos * 10000^(-2j/d), as in Wan
 * and HunyuanVideo), u is a per-head shared direction (u_k correlated with
 * u_q) whose energy split over the t / h / w channels makes the head decay
 * fast across frames ("spatial" head) or across space ("temporal" head),
 * w_k(p) are K moving Gaussian blobs over the latent grid (scene content the
 * q and k of one object share), and eps_p is i.i.d. N(0, 1) token noise.
 * Since R is orthogonal and fixed by position, q(p) . k(p') carries
 * u_q^T R(p' - p) u_k: attention decays with 3D distance as in the real
 * models, and objects add content-dependent long-range links.
 *
 * Pooling without token-level tensors (exact, and what makes the corpus cheap):
 * the block mean of q is
 *     alpha mean_b[exp(i theta)] * u + gamma sum_k mean_b[w_k exp(i theta)] * z_k
 *     + beta mean_b[R(p) eps_p],
 * the first two from per-(layout, model) block averages shared by every head
 * and step (tsr_corpus_pool), and the last is exactly N(0, beta^2 / n_b) per
 * channel because rotated i.i.d. normals are i.i.d. normals; we draw it so.
 * Mean-pooling then softmax(q_b k_c^T / sqrt(d)) follows VSA / SpargeAttn.
 *
 * Cost: pool build O(tokens x K x head_dim) once per layout; per head
 * O(blocks x K x head_dim) to pool and O(nq x nk x head_dim) for the logits.
 * Determinism: a seeded splitmix64 / xoshiro256** stream per purpose, all
 * sums in a fixed order (logits over the channels in increasing order,
 * whatever the vectorisation), no threads inside; results are
 * byte-reproducible with a given libm.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "corpus_impl.h"

/* Scale of the shared, object and noise parts.  Chosen so that token logits
 * peak near 8-10 on the diagonal (as measured DiT heads do) and the pooled
 * families land in the published density ranges of mask-families.md. */
#ifndef SYNTH_ALPHA
#define SYNTH_ALPHA 2.3
#endif
#ifndef SYNTH_GAMMA
#define SYNTH_GAMMA 0.9
#endif
#ifndef SYNTH_BETA
#define SYNTH_BETA 1.0
#endif
#define SYNTH_ROPE_BASE 10000.0

/* ---- PRNG ---------------------------------------------------------------- */

/* splitmix64 finaliser: a bijective 64-bit mix used to derive seeds. */
static uint64_t tsr_corpus_mix(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t tsr_corpus_key(uint64_t seed, const char *tag, int64_t a, int64_t b, int64_t c,
                        int64_t d)
{
  uint64_t h = tsr_corpus_mix(seed);
  const char *s;
  for (s = tag ? tag : ""; *s; s++)
    h = tsr_corpus_mix(h ^ (uint8_t)*s);
  h = tsr_corpus_mix(h ^ (uint64_t)a);
  h = tsr_corpus_mix(h ^ (uint64_t)b);
  h = tsr_corpus_mix(h ^ (uint64_t)c);
  return tsr_corpus_mix(h ^ (uint64_t)d);
}

void tsr_corpus_rng_seed(tsr_corpus_rng *r, uint64_t seed)
{
  int i;
  for (i = 0; i < 4; i++) {
    seed += 0x9e3779b97f4a7c15ull;
    r->s[i] = tsr_corpus_mix(seed);
  }
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tsr_corpus_rng_next(tsr_corpus_rng *r)
{
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double tsr_corpus_rng_uniform(tsr_corpus_rng *r)
{
  return (double)(tsr_corpus_rng_next(r) >> 11) * 0x1.0p-53;
}

double tsr_corpus_rng_normal(tsr_corpus_rng *r)
{
  double u1 = 1.0 - tsr_corpus_rng_uniform(r); /* (0, 1]: log stays finite */
  double u2 = tsr_corpus_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- Token orders ----------------------------------------------------------- */

const char *tsr_corpus_order_name(int order)
{
  switch (order) {
  case TSR_ORDER_FRAME: return "frame-major";
  case TSR_ORDER_SPATIAL: return "spatial-major";
  case TSR_ORDER_TILE: return "tile-6x8x8";
  case TSR_ORDER_CUBE: return "cube-4x4x4";
  case TSR_ORDER_HILBERT: return "hilbert-3d";
  default: return "?";
  }
}

/* Skilling's transpose form of the 3D Hilbert index ("Programming the
 * Hilbert curve", 2004), bits per axis `bits`, interleaved MSB first. */
static uint64_t hilbert3(uint32_t x0, uint32_t x1, uint32_t x2, int bits)
{
  uint32_t x[3] = {x0, x1, x2}, m = 1u << (bits - 1), p, q, t;
  uint64_t idx = 0;
  int i, b;
  for (q = m; q > 1; q >>= 1) {
    p = q - 1;
    for (i = 0; i < 3; i++) {
      if (x[i] & q) {
        x[0] ^= p;
      } else {
        t = (x[0] ^ x[i]) & p;
        x[0] ^= t;
        x[i] ^= t;
      }
    }
  }
  for (i = 1; i < 3; i++)
    x[i] ^= x[i - 1];
  t = 0;
  for (q = m; q > 1; q >>= 1)
    if (x[2] & q)
      t ^= q - 1;
  for (i = 0; i < 3; i++)
    x[i] ^= t;
  for (b = bits - 1; b >= 0; b--)
    for (i = 0; i < 3; i++)
      idx = (idx << 1) | ((x[i] >> b) & 1u);
  return idx;
}

typedef struct {
  uint64_t key;
  int32_t tok;
} keyed_tok;

static int keyed_cmp(const void *a, const void *b)
{
  const keyed_tok *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->tok < y->tok ? -1 : x->tok > y->tok;
}

static tsr_status layout_alloc(tsr_corpus_layout *l, int order, int t, int h, int w,
                               int64_t nb, tsr_error *err)
{
  memset(l, 0, sizeof *l);
  l->order = order;
  l->t = t;
  l->h = h;
  l->w = w;
  l->n = (int64_t)t * h * w;
  l->nb = nb;
  l->perm = malloc((size_t)l->n * sizeof *l->perm);
  l->start = malloc((size_t)(nb + 1) * sizeof *l->start);
  if (!l->perm || !l->start) {
    tsr_corpus_layout_free(l);
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate a %lld-token layout",
                         (long long)((int64_t)t * h * w));
  }
  return TSR_OK;
}

tsr_status tsr_corpus_layout_uniform(int order, int t, int h, int w, int64_t block,
                                     tsr_corpus_layout *out, tsr_error *err)
{
  int64_t n = (int64_t)t * h * w, nb, s, i;
  tsr_status st;
  if (t <= 0 || h <= 0 || w <= 0 || block <= 0 || n > INT32_MAX)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "invalid corpus layout: grid %dx%dx%d, block %lld", t, h, w,
                         (long long)block);
  if (order != TSR_ORDER_FRAME && order != TSR_ORDER_SPATIAL && order != TSR_ORDER_HILBERT)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid corpus layout: order %d is tiled",
                         order);
  nb = (n + block - 1) / block;
  st = layout_alloc(out, order, t, h, w, nb, err);
  if (st)
    return st;
  out->block = block;
  for (i = 0; i <= nb; i++)
    out->start[i] = i * block < n ? i * block : n;
  if (order == TSR_ORDER_FRAME) {
    for (s = 0; s < n; s++)
      out->perm[s] = (int32_t)s;
  } else if (order == TSR_ORDER_SPATIAL) {
    /* (spatial, frame) order: position sp * T + f holds frame f, spatial sp. */
    int64_t f = (int64_t)h * w;
    for (s = 0; s < n; s++)
      out->perm[s] = (int32_t)((s % t) * f + s / t);
  } else {
    keyed_tok *kt = malloc((size_t)n * sizeof *kt);
    int bits = 1;
    int mx = t > h ? t : h;
    mx = mx > w ? mx : w;
    while ((1 << bits) < mx)
      bits++;
    if (!kt) {
      tsr_corpus_layout_free(out);
      return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate a %lld-token hilbert order",
                           (long long)n);
    }
    for (s = 0; s < n; s++) {
      int64_t tt = s / ((int64_t)h * w), hh = (s / w) % h, ww = s % w;
      kt[s].key = hilbert3((uint32_t)tt, (uint32_t)hh, (uint32_t)ww, bits);
      kt[s].tok = (int32_t)s;
    }
    qsort(kt, (size_t)n, sizeof *kt, keyed_cmp);
    for (s = 0; s < n; s++)
      out->perm[s] = kt[s].tok;
    free(kt);
  }
  return TSR_OK;
}

tsr_status tsr_corpus_layout_tiles(int order, int t, int h, int w, int tt, int th, int tw,
                                   tsr_corpus_layout *out, tsr_error *err)
{
  int gt, gh, gw, a, b, c, x, y, z, sz;
  int64_t s = 0, blk = 0;
  tsr_status st;
  if (t <= 0 || h <= 0 || w <= 0 || tt <= 0 || th <= 0 || tw <= 0 ||
      (int64_t)t * h * w > INT32_MAX || (order != TSR_ORDER_TILE && order != TSR_ORDER_CUBE))
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "invalid corpus tiling: grid %dx%dx%d, tile %dx%dx%d", t, h, w, tt,
                         th, tw);
  gt = (t + tt - 1) / tt;
  gh = (h + th - 1) / th;
  gw = (w + tw - 1) / tw;
  st = layout_alloc(out, order, t, h, w, (int64_t)gt * gh * gw, err);
  if (st)
    return st;
  out->grid[0] = gt;
  out->grid[1] = gh;
  out->grid[2] = gw;
  out->tile[0] = tt;
  out->tile[1] = th;
  out->tile[2] = tw;
  /* Tokens of a tile contiguous, raster inside; boundary tiles keep only the
   * tokens that exist (ragged blocks).  Tiles by decreasing size, raster
   * within a size, so the whole tiles come first, each on a multiple of the
   * tile size.  In raster order each row of ragged boundary tiles (Wan 480p:
   * 13 cubes of 32 tokens) shifts every later tile half a physical tile
   * off, and physical tiles then span two blocks: on a Wan 480p VSA mask,
   * tessera plan's 64x64 tiles went from 653,259 to 479,275 and membership
   * words from 1.75M to 0.62M with this order; on STA's (3, 3, 5) windows,
   * 128x128 tiles from 394,176 to 367,572. */
  for (sz = tt * th * tw; sz > 0; sz--)
    for (a = 0; a < gt; a++)
      for (b = 0; b < gh; b++)
        for (c = 0; c < gw; c++) {
          int ex = (t < (a + 1) * tt ? t : (a + 1) * tt) - a * tt;
          int ey = (h < (b + 1) * th ? h : (b + 1) * th) - b * th;
          int ez = (w < (c + 1) * tw ? w : (c + 1) * tw) - c * tw;
          if (ex * ey * ez != sz)
            continue;
          out->start[blk++] = s;
          for (x = a * tt; x < a * tt + ex; x++)
            for (y = b * th; y < b * th + ey; y++)
              for (z = c * tw; z < c * tw + ez; z++)
                out->perm[s++] = (int32_t)(((int64_t)x * h + y) * w + z);
        }
  out->start[blk] = s;
  if (t % tt == 0 && h % th == 0 && w % tw == 0)
    out->block = (int64_t)tt * th * tw;
  return TSR_OK;
}

int64_t tsr_corpus_layout_tile(const tsr_corpus_layout *l, int64_t b)
{
  int32_t tok = l->perm[l->start[b]];
  int64_t x = tok / ((int64_t)l->h * l->w) / l->tile[0], y = (tok / l->w) % l->h / l->tile[1],
          z = tok % l->w / l->tile[2];
  return (x * l->grid[1] + y) * l->grid[2] + z;
}

void tsr_corpus_layout_free(tsr_corpus_layout *l)
{
  if (!l)
    return;
  free(l->perm);
  free(l->start);
  l->perm = NULL;
  l->start = NULL;
}

/* ---- Pooled RoPE phases and object content ------------------------------ */

typedef struct {
  double ch, cw, vh, vw, sigma;
} blob;

static void scene_make(const tsr_corpus_model *m, uint64_t seed, blob *o)
{
  tsr_corpus_rng r;
  int k;
  double side = m->h < m->w ? m->h : m->w;
  tsr_corpus_rng_seed(&r, seed);
  for (k = 0; k < TSR_SYNTH_OBJECTS - 1; k++) {
    o[k].ch = tsr_corpus_rng_uniform(&r) * m->h;
    o[k].cw = tsr_corpus_rng_uniform(&r) * m->w;
    o[k].vh = (tsr_corpus_rng_uniform(&r) - 0.5) * 0.8;
    o[k].vw = (tsr_corpus_rng_uniform(&r) - 0.5) * 0.8;
    o[k].sigma = (0.1 + 0.2 * tsr_corpus_rng_uniform(&r)) * side;
  }
}

/* Content weights at (t, h, w): K-1 Gaussian blobs moving linearly, and a
 * constant background. */
static void scene_weights(const blob *o, int t, int h, int w, double *wk)
{
  int k;
  for (k = 0; k < TSR_SYNTH_OBJECTS - 1; k++) {
    double dh = h - (o[k].ch + o[k].vh * t), dw = w - (o[k].cw + o[k].vw * t);
    wk[k] = exp(-(dh * dh + dw * dw) / (2.0 * o[k].sigma * o[k].sigma));
  }
  wk[TSR_SYNTH_OBJECTS - 1] = 0.5;
}

/* Channel pair i rotates with axis ax[i] at frequency om[i]. */
static void rope_pairs(const tsr_corpus_model *m, int *ax, double *om)
{
  int a, j, i = 0;
  for (a = 0; a < 3; a++)
    for (j = 0; j < m->rope[a] / 2; j++, i++) {
      ax[i] = a;
      om[i] = pow(SYNTH_ROPE_BASE, -2.0 * j / m->rope[a]);
    }
}

void tsr_corpus_pool_free(tsr_corpus_pool *p)
{
  if (!p)
    return;
  free(p->count);
  free(p->phase);
  free(p->obj);
  free(p->objw);
  free(p->objw2);
  memset(p, 0, sizeof *p);
}

tsr_status tsr_corpus_pool_build(const tsr_corpus_model *m, const tsr_corpus_layout *l,
                                 uint64_t scene_seed, tsr_corpus_pool *out, tsr_error *err)
{
  enum { K = TSR_SYNTH_OBJECTS };
  int np = m->head_dim / 2, ax[64], i, k, q, a;
  double om[64], wk[K];
  double *cs[3] = {NULL, NULL, NULL}; /* per axis: [pos][np][2] cos, sin */
  int dims[3] = {m->t, m->h, m->w};
  blob o[K];
  int64_t b, s;
  tsr_status st = TSR_OK;

  memset(out, 0, sizeof *out);
  if (np < 1 || np > 64 || m->rope[0] + m->rope[1] + m->rope[2] != m->head_dim ||
      l->t != m->t || l->h != m->h || l->w != m->w)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "invalid synthesis for model '%s': head dim %d, layout %dx%dx%d",
                         m->name, m->head_dim, l->t, l->h, l->w);
  out->nb = l->nb;
  out->np = np;
  out->count = calloc((size_t)l->nb, sizeof(double));
  out->phase = calloc((size_t)l->nb * np * 2, sizeof(double));
  out->obj = calloc((size_t)l->nb * K * np * 2, sizeof(double));
  out->objw = calloc((size_t)l->nb * K, sizeof(double));
  out->objw2 = calloc((size_t)l->nb * K * K, sizeof(double));
  for (a = 0; a < 3; a++)
    cs[a] = malloc((size_t)dims[a] * np * 2 * sizeof(double));
  if (!out->count || !out->phase || !out->obj || !out->objw || !out->objw2 || !cs[0] ||
      !cs[1] || !cs[2]) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate pooled scores for %lld blocks",
                       (long long)l->nb);
    goto done;
  }
  rope_pairs(m, ax, om);
  for (a = 0; a < 3; a++)
    for (q = 0; q < dims[a]; q++)
      for (i = 0; i < np; i++) {
        /* Only the pairs of axis a rotate with it; the others get angle 0. */
        double th = ax[i] == a ? q * om[i] : 0.0;
        cs[a][((size_t)q * np + i) * 2] = cos(th);
        cs[a][((size_t)q * np + i) * 2 + 1] = sin(th);
      }
  scene_make(m, scene_seed, o);
  for (b = 0; b < l->nb; b++) {
    double *ph = out->phase + (size_t)b * np * 2, *ob = out->obj + (size_t)b * K * np * 2;
    double *ow = out->objw + (size_t)b * K, *ow2 = out->objw2 + (size_t)b * K * K, inv;
    for (s = l->start[b]; s < l->start[b + 1]; s++) {
      int32_t tok = l->perm[s];
      int tt = (int)(tok / ((int64_t)m->h * m->w)), hh = (int)((tok / m->w) % m->h),
          ww = (int)(tok % m->w);
      const double *ct = cs[0] + (size_t)tt * np * 2, *chh = cs[1] + (size_t)hh * np * 2,
                   *cw = cs[2] + (size_t)ww * np * 2;
      scene_weights(o, tt, hh, ww, wk);
      for (i = 0; i < np; i++) {
        /* Exactly one of the three factors rotates channel pair i. */
        const double *r = ax[i] == 0 ? ct : ax[i] == 1 ? chh : cw;
        double re = r[2 * i], im = r[2 * i + 1];
        ph[2 * i] += re;
        ph[2 * i + 1] += im;
        for (k = 0; k < K; k++) {
          ob[((size_t)k * np + i) * 2] += wk[k] * re;
          ob[((size_t)k * np + i) * 2 + 1] += wk[k] * im;
        }
      }
      for (k = 0; k < K; k++) {
        ow[k] += wk[k];
        for (q = 0; q < K; q++)
          ow2[k * K + q] += wk[k] * wk[q];
      }
    }
    out->count[b] = (double)(l->start[b + 1] - l->start[b]);
    inv = 1.0 / out->count[b];
    for (i = 0; i < np * 2; i++)
      ph[i] *= inv;
    for (i = 0; i < K * np * 2; i++)
      ob[i] *= inv;
    for (k = 0; k < K; k++)
      ow[k] *= inv;
    for (k = 0; k < K * K; k++)
      ow2[k] *= inv;
  }
done:
  for (a = 0; a < 3; a++)
    free(cs[a]);
  if (st)
    tsr_corpus_pool_free(out);
  return st;
}

/* ---- Heads ------------------------------------------------------------------ */

void tsr_corpus_head_make(const tsr_corpus_model *m, uint64_t seed, double axis_bias,
                          tsr_corpus_head *hd)
{
  tsr_corpus_rng r;
  int np = m->head_dim / 2, ax[64], i, k;
  double om[64], wax[3], tot = 0, rho = 0.85, rz = 0.8;
  memset(hd, 0, sizeof *hd);
  hd->np = np;
  rope_pairs(m, ax, om);
  tsr_corpus_rng_seed(&r, seed);
  wax[0] = exp(1.5 * axis_bias);
  wax[1] = wax[2] = exp(-0.75 * axis_bias);
  for (i = 0; i < 3; i++)
    hd->axis[i] = wax[i] / (wax[0] + wax[1] + wax[2]);
  for (i = 0; i < np; i++) {
    double amp2 = hd->axis[ax[i]] / (m->rope[ax[i]] / 2) * (0.5 + tsr_corpus_rng_uniform(&r));
    double ph = 6.283185307179586 * tsr_corpus_rng_uniform(&r);
    hd->u_q[2 * i] = sqrt(amp2) * cos(ph);
    hd->u_q[2 * i + 1] = sqrt(amp2) * sin(ph);
    tot += amp2;
  }
  /* |u_q|^2 = np: token logits at zero distance ~ alpha^2 np / sqrt(d). */
  for (i = 0; i < 2 * np; i++)
    hd->u_q[i] *= sqrt(np / tot);
  for (i = 0; i < np; i++) {
    double a = sqrt(hd->u_q[2 * i] * hd->u_q[2 * i] + hd->u_q[2 * i + 1] * hd->u_q[2 * i + 1]);
    hd->u_k[2 * i] = rho * hd->u_q[2 * i] + sqrt(1 - rho * rho) * a * tsr_corpus_rng_normal(&r);
    hd->u_k[2 * i + 1] =
        rho * hd->u_q[2 * i + 1] + sqrt(1 - rho * rho) * a * tsr_corpus_rng_normal(&r);
  }
  for (k = 0; k < TSR_SYNTH_OBJECTS; k++)
    for (i = 0; i < 2 * np; i++) {
      double zq = tsr_corpus_rng_normal(&r) * 0.7071067811865476;
      hd->z_q[k][i] = zq;
      hd->z_k[k][i] = rz * zq + sqrt(1 - rz * rz) * 0.7071067811865476 * tsr_corpus_rng_normal(&r);
    }
}

tsr_status tsr_corpus_pooled(const tsr_corpus_pool *p, const tsr_corpus_head *hd, int is_key,
                             uint64_t noise_seed, double **out, tsr_error *err)
{
  enum { K = TSR_SYNTH_OBJECTS };
  int np = p->np, i, k;
  int64_t b;
  tsr_corpus_rng r;
  const double *u = is_key ? hd->u_k : hd->u_q;
  double *v = malloc((size_t)p->nb * np * 2 * sizeof *v);
  *out = NULL;
  if (!v)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate pooled vectors for %lld blocks",
                         (long long)p->nb);
  tsr_corpus_rng_seed(&r, noise_seed);
  for (b = 0; b < p->nb; b++) {
    const double *ph = p->phase + (size_t)b * np * 2, *ob = p->obj + (size_t)b * K * np * 2;
    double sd = SYNTH_BETA / sqrt(p->count[b]);
    double *o = v + (size_t)b * np * 2;
    for (i = 0; i < np; i++) {
      double re = SYNTH_ALPHA * (ph[2 * i] * u[2 * i] - ph[2 * i + 1] * u[2 * i + 1]);
      double im = SYNTH_ALPHA * (ph[2 * i] * u[2 * i + 1] + ph[2 * i + 1] * u[2 * i]);
      for (k = 0; k < K; k++) {
        const double *z = is_key ? hd->z_k[k] : hd->z_q[k];
        const double *c = ob + ((size_t)k * np + i) * 2;
        re += SYNTH_GAMMA * (c[0] * z[2 * i] - c[1] * z[2 * i + 1]);
        im += SYNTH_GAMMA * (c[0] * z[2 * i + 1] + c[1] * z[2 * i]);
      }
      o[2 * i] = re + sd * tsr_corpus_rng_normal(&r);
      o[2 * i + 1] = im + sd * tsr_corpus_rng_normal(&r);
    }
  }
  *out = v;
  return TSR_OK;
}

static double dot(const double *a, const double *b, int n)
{
  /* Four partial sums in a fixed order: reproducible, and not latency-bound. */
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i;
  for (i = 0; i + 3 < n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; i++)
    s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

void tsr_corpus_selfsim(const tsr_corpus_pool *p, const tsr_corpus_head *hd, int is_key,
                        const double *pooled, double *out)
{
  enum { K = TSR_SYNTH_OBJECTS };
  int np = p->np, k, l;
  int64_t b;
  const double *u = is_key ? hd->u_k : hd->u_q;
  double uu = dot(u, u, 2 * np), uz[K], zz[K][K];
  for (k = 0; k < K; k++) {
    const double *zk = is_key ? hd->z_k[k] : hd->z_q[k];
    uz[k] = dot(u, zk, 2 * np);
    for (l = 0; l < K; l++)
      zz[k][l] = dot(zk, is_key ? hd->z_k[l] : hd->z_q[l], 2 * np);
  }
  for (b = 0; b < p->nb; b++) {
    /* Mean token energy |alpha u + gamma sum w_k z_k|^2 + beta^2 d, exact in
     * expectation over the noise; rotation leaves norms unchanged. */
    const double *ow = p->objw + (size_t)b * K, *ow2 = p->objw2 + (size_t)b * K * K;
    double e = SYNTH_ALPHA * SYNTH_ALPHA * uu + SYNTH_BETA * SYNTH_BETA * 2 * np, m2;
    for (k = 0; k < K; k++) {
      e += 2 * SYNTH_ALPHA * SYNTH_GAMMA * ow[k] * uz[k];
      for (l = 0; l < K; l++)
        e += SYNTH_GAMMA * SYNTH_GAMMA * ow2[k * K + l] * zz[k][l];
    }
    m2 = dot(pooled + (size_t)b * np * 2, pooled + (size_t)b * np * 2, 2 * np);
    out[b] = e > 0 ? m2 / e : 1.0;
    if (out[b] > 1.0)
      out[b] = 1.0;
  }
}

/* Logits of rows a (and a + 1 when two) against the w <= CHUNK keys of the
 * transposed chunk kt: 8 outputs at a time held in registers, each summed
 * over the channels in increasing order (so the result does not depend on
 * vectorisation), kt rows reused by both query rows. */
enum { CHUNK = 128 };

static void logits_rows(const double *qa, const double *qb, const double *kt, int n2, int64_t w,
                        double sc, double *ra, double *rb)
{
  int64_t b = 0;
  int i, j;
  for (; b + 8 <= w; b += 8) {
    double x[8] = {0, 0, 0, 0, 0, 0, 0, 0}, y[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (i = 0; i < n2; i++) {
      const double *kr = kt + i * CHUNK + b, p = qa[i], q = qb ? qb[i] : 0.0;
      for (j = 0; j < 8; j++) {
        x[j] += p * kr[j];
        y[j] += q * kr[j];
      }
    }
    for (j = 0; j < 8; j++) {
      ra[b + j] = x[j] * sc;
      if (rb)
        rb[b + j] = y[j] * sc;
    }
  }
  for (; b < w; b++) {
    double x = 0, y = 0;
    for (i = 0; i < n2; i++) {
      x += qa[i] * kt[i * CHUNK + b];
      y += (qb ? qb[i] : 0.0) * kt[i * CHUNK + b];
    }
    ra[b] = x * sc;
    if (rb)
      rb[b] = y * sc;
  }
}

void tsr_corpus_logits(const double *pq, int64_t nq, const double *pk, int64_t nk, int np,
                       int head_dim, double *out)
{
  double sc = 1.0 / sqrt((double)head_dim), kt[128 * CHUNK];
  int n2 = 2 * np, i;
  int64_t a, b, b0;
  for (b0 = 0; b0 < nk; b0 += CHUNK) {
    int64_t w = nk - b0 < CHUNK ? nk - b0 : CHUNK;
    for (b = 0; b < w; b++)
      for (i = 0; i < n2; i++)
        kt[i * CHUNK + b] = pk[(size_t)(b0 + b) * n2 + i];
    for (a = 0; a < nq; a += 2)
      logits_rows(pq + (size_t)a * n2, a + 1 < nq ? pq + (size_t)(a + 1) * n2 : NULL, kt, n2, w,
                  sc, out + a * nk + b0, a + 1 < nq ? out + (a + 1) * nk + b0 : NULL);
  }
}

void tsr_corpus_softmax_rows(double *s, int64_t nq, int64_t nk, const double *bias)
{
  int64_t a, b;
  for (a = 0; a < nq; a++) {
    double *r = s + a * nk, mx = -HUGE_VAL, sum = 0;
    for (b = 0; b < nk; b++) {
      if (bias)
        r[b] += bias[b];
      if (r[b] > mx)
        mx = r[b];
    }
    for (b = 0; b < nk; b++) {
      r[b] = exp(r[b] - mx);
      sum += r[b];
    }
    for (b = 0; b < nk; b++)
      r[b] /= sum;
  }
}

/*
 * check_corpus.c: the mask corpus generator -- each family's defining
 * property against an independent re-derivation, the exactness of the
 * pooled RoPE construction, published density ranges, byte determinism in the
 * seed, the manifest round trip through the reader, and the errors.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <jansson.h>

#include "corpus_impl.h"
#include "tessera.h"
#include "tools.h"
#include "util.h"

/* ---- helpers ------------------------------------------------------------------- */

static void rm_tree(const char *path)
{
  DIR *d = opendir(path);
  struct dirent *e;
  char p[1024];
  if (!d) {
    unlink(path);
    return;
  }
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      rm_tree(p);
    }
  closedir(d);
  rmdir(path);
}

static char tmp[256];

static void setup(void) { tu_tmpdir(tmp, sizeof tmp); }
static void teardown(void) { rm_tree(tmp); }

static void generate(const char *preset, const char *sub, uint64_t seed, int jobs, int64_t limit,
                     char *dir, size_t cap)
{
  tsr_corpus_gen_opts o;
  tsr_error err;
  int64_t n = -1;
  snprintf(dir, cap, "%s/%s", tmp, sub);
  tsr_corpus_gen_opts_init(&o);
  o.preset = preset;
  o.out_dir = dir;
  o.seed = seed;
  o.jobs = jobs;
  o.limit = limit;
  tsr_error_clear(&err);
  ck_assert_msg(tsr_corpus_generate(&o, &n, &err) == TSR_OK, "generate %s: %s", preset, err.text);
  ck_assert_int_gt(n, 0);
}

static unsigned char *slurp(const char *path, size_t *n)
{
  FILE *f = fopen(path, "rb");
  unsigned char *b;
  long len;
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  fseek(f, 0, SEEK_SET);
  b = malloc((size_t)len + 1);
  ck_assert_int_eq(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

static int same_file(const char *a, const char *b)
{
  size_t na, nb;
  unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
  int same = na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

static double head_param(const char *dir, int64_t entry, int64_t h, const char *key)
{
  char p[600];
  json_t *root, *v;
  json_error_t je;
  double out;
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  root = json_load_file(p, 0, &je);
  ck_assert_msg(root != NULL, "manifest: %s", je.text);
  v = json_object_get(json_array_get(json_object_get(json_array_get(json_object_get(root, "entries"),
                                                                   (size_t)entry),
                                                     "heads"),
                                     (size_t)h),
                      key);
  ck_assert_msg(json_is_number(v), "entry %lld head %lld has no '%s'", (long long)entry,
                (long long)h, key);
  out = json_number_value(v);
  json_decref(root);
  return out;
}

/* ---- PRNG --------------------------------------------------------------------------- */

START_TEST(test_rng)
{
  uint64_t seed = tu_seed("corpus_rng", 11);
  tsr_corpus_rng a, b, c;
  int i, diff = 0;
  double s = 0, s2 = 0;
  tsr_corpus_rng_seed(&a, seed);
  tsr_corpus_rng_seed(&b, seed);
  tsr_corpus_rng_seed(&c, seed + 1);
  for (i = 0; i < 20000; i++) {
    uint64_t x = tsr_corpus_rng_next(&a);
    ck_assert_uint_eq(x, tsr_corpus_rng_next(&b));
    diff += x != tsr_corpus_rng_next(&c);
  }
  ck_assert_int_gt(diff, 19990);
  for (i = 0; i < 200000; i++) {
    double z = tsr_corpus_rng_normal(&a);
    ck_assert(isfinite(z));
    s += z;
    s2 += z * z;
  }
  /* Mean 0 and variance 1 within 5 standard errors. */
  ck_assert_double_lt(fabs(s / 200000), 5.0 / sqrt(200000.0));
  ck_assert_double_lt(fabs(s2 / 200000 - 1.0), 5.0 * sqrt(2.0 / 200000.0));
  ck_assert_uint_ne(tsr_corpus_key(seed, "a", 1, 2, 3, 4), tsr_corpus_key(seed, "a", 1, 2, 4, 3));
  ck_assert_uint_ne(tsr_corpus_key(seed, "a", 1, 2, 3, 4), tsr_corpus_key(seed, "b", 1, 2, 3, 4));
}
END_TEST

/* ---- Layouts -------------------------------------------------------------------- */

START_TEST(test_layouts)
{
  tu_rng r = {tu_seed("corpus_layouts", 12) + (uint64_t)_i};
  int t = (int)tu_range(&r, 1, 13), h = (int)tu_range(&r, 1, 19), w = (int)tu_range(&r, 1, 23);
  int order = _i % 3 == 0 ? TSR_ORDER_HILBERT : _i % 3 == 1 ? TSR_ORDER_SPATIAL : TSR_ORDER_FRAME;
  int64_t n = (int64_t)t * h * w, s, b;
  int k;
  tsr_corpus_layout l, lt;
  tsr_error err;
  uint8_t *seen = calloc((size_t)n, 1);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_layout_uniform(order, t, h, w, tu_range(&r, 1, 40), &l, &err), TSR_OK);
  for (s = 0; s < n; s++) {
    ck_assert(l.perm[s] >= 0 && l.perm[s] < n && !seen[l.perm[s]]);
    seen[l.perm[s]] = 1;
  }
  if (order == TSR_ORDER_HILBERT) {
    /* On a power-of-two cube the curve is continuous: consecutive tokens are
     * grid neighbours. */
    tsr_corpus_layout c;
    int side = 2 << (_i % 3);
    int64_t hw = (int64_t)side * side;
    ck_assert_int_eq(tsr_corpus_layout_uniform(TSR_ORDER_HILBERT, side, side, side, 64, &c, &err),
                     TSR_OK);
    for (s = 1; s < hw * side; s++) {
      int64_t a = c.perm[s - 1], e = c.perm[s];
      ck_assert_int_eq(llabs(a / hw - e / hw) + llabs((a / side) % side - (e / side) % side) +
                           llabs(a % side - e % side),
                       1);
    }
    tsr_corpus_layout_free(&c);
  }
  if (order == TSR_ORDER_SPATIAL) /* (spatial, frame): position sp*T + f holds (f, sp) */
    for (s = 0; s < n; s++)
      ck_assert_int_eq(l.perm[s], (s % t) * h * w + s / t);
  ck_assert_int_eq(l.start[0], 0);
  ck_assert_int_eq(l.start[l.nb], n);
  tsr_corpus_layout_free(&l);
  /* Tiles (STA's 6x8x8) and cubes (VSA's 4x4x4): every token once, each
   * block one tile filling its clipped extent, every tile once, sizes not
   * increasing (whole tiles first, so each of them starts on a multiple of
   * the tile size). */
  for (k = 0; k < 2; k++) {
    int tt = k ? 4 : 6, th = k ? 4 : 8, tw = k ? 4 : 8;
    uint8_t *tiles;
    ck_assert_int_eq(tsr_corpus_layout_tiles(k ? TSR_ORDER_CUBE : TSR_ORDER_TILE, t, h, w, tt,
                                             th, tw, &lt, &err),
                     TSR_OK);
    tiles = calloc((size_t)lt.nb, 1);
    memset(seen, 0, (size_t)n);
    for (b = 0; b < lt.nb; b++) {
      int64_t ti = tsr_corpus_layout_tile(&lt, b);
      int gt = (int)(ti / (lt.grid[1] * lt.grid[2])), gh = (int)((ti / lt.grid[2]) % lt.grid[1]),
          gw = (int)(ti % lt.grid[2]);
      int64_t want = (int64_t)((t < tt * gt + tt ? t : tt * gt + tt) - tt * gt) *
                     ((h < th * gh + th ? h : th * gh + th) - th * gh) *
                     ((w < tw * gw + tw ? w : tw * gw + tw) - tw * gw);
      ck_assert(ti >= 0 && ti < lt.nb && !tiles[ti]);
      tiles[ti] = 1;
      ck_assert_int_eq(lt.start[b + 1] - lt.start[b], want);
      if (b)
        ck_assert_int_le(want, lt.start[b] - lt.start[b - 1]);
      if (want == (int64_t)tt * th * tw)
        ck_assert_int_eq(lt.start[b] % want, 0);
      for (s = lt.start[b]; s < lt.start[b + 1]; s++) {
        int32_t tok = lt.perm[s];
        ck_assert(!seen[tok]);
        seen[tok] = 1;
        ck_assert_int_eq(tok / (h * w) / tt, gt);
        ck_assert_int_eq((tok / w) % h / th, gh);
        ck_assert_int_eq(tok % w / tw, gw);
      }
    }
    ck_assert_int_eq(lt.start[lt.nb], n);
    ck_assert_int_eq(lt.block != 0, t % tt == 0 && h % th == 0 && w % tw == 0);
    free(tiles);
    tsr_corpus_layout_free(&lt);
  }
  free(seen);
}
END_TEST

/* ---- Rule families ---------------------------------------------------------------- */

START_TEST(test_sta_rows)
{
  tu_rng r = {tu_seed("corpus_sta", 13) + (uint64_t)_i};
  int grid[3], k[3], a;
  int64_t n, i, j;
  uint8_t *p;
  for (a = 0; a < 3; a++) {
    grid[a] = (int)tu_range(&r, 1, 10);
    k[a] = 2 * (int)tu_range(&r, 0, (grid[a] - 1) / 2) + 1; /* published windows are odd */
  }
  n = (int64_t)grid[0] * grid[1] * grid[2];
  p = malloc((size_t)(n * n));
  memset(p, 0xAA, (size_t)(n * n));
  tsr_corpus_sta(grid, k, p);
  for (i = 0; i < n; i++) {
    int64_t row = 0;
    int q[3] = {(int)(i / (grid[1] * grid[2])), (int)((i / grid[2]) % grid[1]),
                (int)(i % grid[2])};
    for (j = 0; j < n; j++) {
      int x[3] = {(int)(j / (grid[1] * grid[2])), (int)((j / grid[2]) % grid[1]),
                  (int)(j % grid[2])}, keep = 1;
      /* MASKS.md's form: centre = clamp(q, K/2, n - 1 - K/2), |centre - k| <= K/2. */
      for (a = 0; a < 3; a++) {
        int c = q[a] < k[a] / 2 ? k[a] / 2 : q[a] > grid[a] - 1 - k[a] / 2 ? grid[a] - 1 - k[a] / 2 : q[a];
        keep &= abs(c - x[a]) <= k[a] / 2;
      }
      ck_assert_int_eq(p[i * n + j], keep);
      row += p[i * n + j];
    }
    ck_assert_int_eq(row, (int64_t)k[0] * k[1] * k[2]);
  }
  free(p);
}
END_TEST

START_TEST(test_svg_band)
{
  tu_rng r = {tu_seed("corpus_svg", 14) + (uint64_t)_i};
  int64_t frames = tu_range(&r, 3, 30), f = tu_range(&r, 4, 60), blk = f, n, nb, i, j, sink;
  double d = 0.2 + 0.2 * tu_uniform(&r), w, sel = 0;
  uint8_t *p;
  if (_i % 2)
    blk = f / 2 > 0 && f % 2 == 0 ? f / 2 : f; /* a divisor of f, as SVG uses */
  n = frames * f;
  nb = n / blk;
  sink = _i % 3 == 0 ? f : 0;
  p = malloc((size_t)(nb * nb));
  memset(p, 0xAA, (size_t)(nb * nb));
  tsr_corpus_svg_band(nb, blk, n, d, sink, p);
  w = (double)n * (1 - sqrt(1 - d));
  for (i = 0; i < nb; i++)
    for (j = 0; j < nb; j++) {
      ck_assert_int_eq(p[i * nb + j], (double)(llabs(i - j) * blk) <= w || j * blk < sink);
      sel += p[i * nb + j];
    }
  if (!sink && nb >= 20) /* a band of half-width w covers ~d of the square */
    ck_assert_double_lt(fabs(sel / (double)(nb * nb) - d), 2.5 * (double)blk / (double)n + 0.02);
  free(p);
}
END_TEST

/* Token-level Radial rule straight from MASKS.md, reduced by brute force. */
static int radial_token(int64_t i, int64_t j, int64_t f, int64_t B, double decay, int sink)
{
  int64_t fi = i / f, fj = j / f, d = llabs(fi - fj), bl = 0, bf = 0, x;
  double r, w;
  if (d <= 1 || (sink && fj == 0))
    return 1;
  for (x = d; x; x >>= 1)
    bl++;
  for (x = f; x; x >>= 1)
    bf++;
  r = pow(2.0, (double)bf) / pow(2.0, (double)bl);
  if (r < (double)B && d % (int64_t)floor((double)B / r) != 0)
    return 0;
  w = fmax(r * decay, (double)B);
  return fabs((double)(i % f - j % f)) <= floor(w);
}

START_TEST(test_radial_bruteforce)
{
  tu_rng r = {tu_seed("corpus_radial", 15) + (uint64_t)_i};
  int frames = (int)tu_range(&r, 2, 40);
  int64_t B = 8 << tu_range(&r, 0, 2), f = tu_range(&r, B / 2, 5 * B), n = frames * f;
  int64_t nb = (n + B - 1) / B, bi, bj, i, j;
  double decay = _i % 2 ? 0.2 : 0.95;
  int sink = _i % 3 == 0;
  uint8_t *p = malloc((size_t)(nb * nb));
  memset(p, 0xAA, (size_t)(nb * nb));
  tsr_corpus_radial(frames, f, B, decay, sink, p);
  for (bi = 0; bi < nb; bi++)
    for (bj = 0; bj < nb; bj++) {
      int64_t nonempty = 0, dense = 0, rows = (bi + 1) * B < n ? B : n - bi * B;
      for (j = bj * B; j < n && j < (bj + 1) * B; j++) {
        int64_t cnt = 0;
        for (i = bi * B; i < n && i < (bi + 1) * B; i++)
          cnt += radial_token(i, j, f, B, decay, sink);
        nonempty += cnt > 0;
        dense += (double)cnt / (double)rows > 1.0 / 3.0;
      }
      ck_assert_msg(p[bi * nb + bj] == (nonempty > 0 && (double)dense > 0.6 * (double)nonempty),
                    "block (%lld, %lld) of frames %d f %lld B %lld", (long long)bi, (long long)bj,
                    frames, (long long)f, (long long)B);
    }
  free(p);
}
END_TEST

START_TEST(test_svdit_bruteforce)
{
  tu_rng r = {tu_seed("corpus_svdit", 16) + (uint64_t)_i};
  int frames = (int)tu_range(&r, 1, 12), pat = _i % 2 ? TSR_SVDIT_DIAG : TSR_SVDIT_MULTIDIAG;
  int64_t B = tu_range(&r, 3, 40), f = tu_range(&r, 2, 70), n = frames * f, width = tu_range(&r, 0, 9);
  int64_t nb = (n + B - 1) / B, bi, bj, i, j;
  uint8_t *p = malloc((size_t)(nb * nb));
  tsr_error err;
  tsr_error_clear(&err);
  memset(p, 0xAA, (size_t)(nb * nb));
  ck_assert_int_eq(tsr_corpus_svdit(pat, frames, f, B, width, 1, p, &err), TSR_OK);
  for (bi = 0; bi < nb; bi++)
    for (bj = 0; bj < nb; bj++) {
      int any = 0;
      for (i = bi * B; i < n && i < (bi + 1) * B && !any; i++)
        for (j = bj * B; j < n && j < (bj + 1) * B && !any; j++)
          any = pat == TSR_SVDIT_DIAG ? i / f == j / f : llabs(i % f - j % f) <= width;
      ck_assert_int_eq(p[bi * nb + bj], any);
    }
  free(p);
}
END_TEST

/* ---- Score families --------------------------------------------------------------- */

START_TEST(test_cdf_fewest)
{
  tu_rng r = {tu_seed("corpus_cdf", 17) + (uint64_t)_i};
  int64_t nq = tu_range(&r, 1, 12), nk = tu_range(&r, 1, 300), a, j, minkeep = tu_range(&r, 0, 5);
  double tau = 0.8 + 0.18 * tu_uniform(&r), *prob = malloc((size_t)(nq * nk) * sizeof *prob);
  uint8_t *p = calloc((size_t)(nq * nk), 1);
  tsr_error err;
  tsr_error_clear(&err);
  for (a = 0; a < nq * nk; a++)
    prob[a] = exp(3.0 * tu_normal(&r)); /* unnormalised on purpose */
  ck_assert_int_eq(tsr_corpus_cdf(prob, nq, nk, tau, minkeep, p, &err), TSR_OK);
  for (a = 0; a < nq; a++) {
    double tot = 0, kept = 0, min_kept = HUGE_VAL, max_drop = 0;
    int64_t cnt = 0;
    for (j = 0; j < nk; j++) {
      double v = prob[a * nk + j];
      tot += v;
      if (p[a * nk + j]) {
        kept += v;
        cnt++;
        min_kept = fmin(min_kept, v);
      } else {
        max_drop = fmax(max_drop, v);
      }
    }
    /* Reaches tau (or the floor), with the largest blocks ... */
    ck_assert(kept >= tau * tot * (1 - 1e-12) || cnt == nk);
    ck_assert(cnt >= (minkeep < nk ? minkeep : nk));
    ck_assert(min_kept >= max_drop);
    /* ... and the fewest: without the smallest kept block it falls short. */
    if (cnt > minkeep && cnt > 1)
      ck_assert(kept - min_kept < tau * tot);
  }
  free(prob);
  free(p);
}
END_TEST

START_TEST(test_topk)
{
  tu_rng r = {tu_seed("corpus_topk", 18) + (uint64_t)_i};
  int64_t nq = tu_range(&r, 1, 10), nk = tu_range(&r, 1, 200), k = tu_range(&r, 0, nk), a, j;
  double *prob = malloc((size_t)(nq * nk) * sizeof *prob);
  uint8_t *p = malloc((size_t)(nq * nk));
  tsr_error err;
  tsr_error_clear(&err);
  memset(p, 0xAA, (size_t)(nq * nk));
  for (a = 0; a < nq * nk; a++)
    prob[a] = (_i % 2) ? (double)tu_range(&r, 0, 3) : tu_uniform(&r); /* ties too */
  ck_assert_int_eq(tsr_corpus_topk(prob, nq, nk, k, p, &err), TSR_OK);
  for (a = 0; a < nq; a++) {
    int64_t cnt = 0;
    double min_kept = HUGE_VAL, max_drop = -1;
    for (j = 0; j < nk; j++) {
      ck_assert(p[a * nk + j] <= 1);
      cnt += p[a * nk + j];
      if (p[a * nk + j])
        min_kept = fmin(min_kept, prob[a * nk + j]);
      else
        max_drop = fmax(max_drop, prob[a * nk + j]);
    }
    ck_assert_int_eq(cnt, k);
    ck_assert(k == 0 || min_kept >= max_drop);
  }
  free(prob);
  free(p);
}
END_TEST

/* The pooled construction's deterministic part equals the token-level mean of
 * the RoPE phases and object weights, computed here from scratch. */
START_TEST(test_pool_exact)
{
  const tsr_corpus_model *m = tsr_corpus_model_find("demo-9x16x16");
  tsr_corpus_layout l;
  tsr_corpus_pool p;
  tsr_error err;
  int64_t b, s;
  int i, np = m->head_dim / 2;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_layout_tiles(TSR_ORDER_CUBE, m->t, m->h, m->w, 4, 4, 4, &l, &err), TSR_OK);
  ck_assert_int_eq(tsr_corpus_pool_build(m, &l, tu_seed("corpus_pool", 19), &p, &err), TSR_OK);
  for (b = 0; b < l.nb; b += 7) {
    for (i = 0; i < np; i++) {
      double re = 0, im = 0;
      int ax = i < m->rope[0] / 2 ? 0 : i < (m->rope[0] + m->rope[1]) / 2 ? 1 : 2;
      int j = ax == 0 ? i : ax == 1 ? i - m->rope[0] / 2 : i - (m->rope[0] + m->rope[1]) / 2;
      for (s = l.start[b]; s < l.start[b + 1]; s++) {
        int64_t tok = l.perm[s];
        int64_t pos = ax == 0 ? tok / (m->h * m->w) : ax == 1 ? (tok / m->w) % m->h : tok % m->w;
        double th = (double)pos * pow(10000.0, -2.0 * j / m->rope[ax]);
        re += cos(th);
        im += sin(th);
      }
      re /= (double)(l.start[b + 1] - l.start[b]);
      im /= (double)(l.start[b + 1] - l.start[b]);
      ck_assert_double_eq_tol(p.phase[(b * np + i) * 2], re, 1e-12);
      ck_assert_double_eq_tol(p.phase[(b * np + i) * 2 + 1], im, 1e-12);
    }
    ck_assert_double_eq(p.count[b], (double)(l.start[b + 1] - l.start[b]));
    /* The background object has weight 0.5 everywhere. */
    ck_assert_double_eq_tol(p.objw[b * TSR_SYNTH_OBJECTS + TSR_SYNTH_OBJECTS - 1], 0.5, 1e-15);
  }
  tsr_corpus_pool_free(&p);
  tsr_corpus_layout_free(&l);
}
END_TEST

/* Pooled logits decay with 3D distance, as RoPE gives the real models. */
START_TEST(test_distance_decay)
{
  const tsr_corpus_model *m = tsr_corpus_model_find("wan2.1-1.3b-480p");
  uint64_t seed = tu_seed("corpus_decay", 20);
  tsr_corpus_layout l;
  tsr_corpus_pool p;
  tsr_corpus_head hd;
  tsr_error err;
  double *vq, *vk, *S, near = 0, far = 0;
  int64_t nb, a, b, cn = 0, cf = 0;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_layout_tiles(TSR_ORDER_CUBE, m->t, m->h, m->w, 4, 4, 4, &l, &err), TSR_OK);
  ck_assert_int_eq(tsr_corpus_pool_build(m, &l, seed, &p, &err), TSR_OK);
  tsr_corpus_head_make(m, seed + 1, 0.0, &hd);
  ck_assert_int_eq(tsr_corpus_pooled(&p, &hd, 0, seed + 2, &vq, &err), TSR_OK);
  ck_assert_int_eq(tsr_corpus_pooled(&p, &hd, 1, seed + 3, &vk, &err), TSR_OK);
  nb = l.nb;
  S = malloc((size_t)(nb * nb) * sizeof *S);
  tsr_corpus_logits(vq, nb, vk, nb, p.np, m->head_dim, S);
  for (a = 0; a < nb; a++)
    for (b = 0; b < nb; b++) {
      int64_t dt = llabs(a / 104 - b / 104), dh = llabs((a / 13) % 8 - (b / 13) % 8),
              dw = llabs(a % 13 - b % 13), d = dt + dh + dw;
      if (d <= 1) {
        near += S[a * nb + b];
        cn++;
      } else if (d >= 8) {
        far += S[a * nb + b];
        cf++;
      }
    }
  ck_assert_msg(near / cn > far / cf + 1.0, "near %g far %g", near / cn, far / cf);
  free(S);
  free(vq);
  free(vk);
  tsr_corpus_pool_free(&p);
  tsr_corpus_layout_free(&l);
}
END_TEST

/* ---- Generated corpora ----------------------------------------------------------- */

/* Every generated head of every family keeps its defining property. */
START_TEST(test_demo_properties)
{
  char dir[512];
  tsr_corpus *c;
  tsr_error err;
  int64_t i, h, a, j, seen[TSR_FAM_COUNT] = {0}, temporal = 0, spatial = 0;
  generate("demo", "demo", tu_seed("corpus_demo_properties", 21), 2, 0, dir, sizeof dir);
  tsr_error_clear(&err);
  ck_assert_msg(tsr_corpus_open(dir, &c, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_ge(tsr_corpus_count(c), 40);
  for (i = 0; i < tsr_corpus_count(c); i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(c, i);
    int fam = tsr_corpus_family_find(e->family);
    tsr_mask *m;
    ck_assert_int_ge(fam, 0);
    seen[fam]++;
    ck_assert_msg(tsr_corpus_load_mask(c, i, &m, &err) == TSR_OK, "%s", err.text);
    for (h = 0; h < e->heads_q; h++) {
      const uint8_t *p = tsr_mask_plane(m, 0, h);
      const char *kind = tsr_corpus_head_kind(c, i, h);
      ck_assert_ptr_nonnull(kind);
      if (!strcmp(kind, "dense"))
        for (a = 0; a < e->nq * e->nk; a++)
          ck_assert_int_eq(p[a], 1);
      if (fam == TSR_FAM_SVG) {
        /* Temporal heads: a band in (spatial, frame) order, no sink; spatial
         * heads: the band in frame order plus the first-frame sink (Wan). */
        double d = head_param(dir, i, h, "density_target"), w = (double)e->seq_q * (1 - sqrt(1 - d));
        int64_t sink = (int64_t)head_param(dir, i, h, "sink_tokens");
        int is_t = !strcmp(kind, "temporal");
        temporal += is_t;
        spatial += !is_t;
        ck_assert_str_eq(tsr_corpus_head_order(c, i, h), is_t ? "spatial-major" : "frame-major");
        ck_assert_int_eq(sink, is_t ? 0 : 256);
        for (a = 0; a < e->nq; a++)
          for (j = 0; j < e->nk; j++)
            ck_assert_int_eq(p[a * e->nk + j],
                             (double)(llabs(a - j) * e->bq) <= w || j * e->bk < sink);
      }
      if (fam == TSR_FAM_VSA) {
        double s = head_param(dir, i, h, "sparsity");
        int64_t k = (int64_t)ceil((1 - s) * (double)e->nk - 1e-9);
        ck_assert(s >= 0.8 && s <= 0.9);
        for (a = 0; a < e->nq; a++) {
          int64_t row = 0;
          for (j = 0; j < e->nk; j++)
            row += p[a * e->nk + j];
          ck_assert_int_eq(row, k);
        }
      }
      if (fam == TSR_FAM_STA) {
        int64_t k = (int64_t)head_param(dir, i, h, "window_t") *
                    (int64_t)head_param(dir, i, h, "window_h") *
                    (int64_t)head_param(dir, i, h, "window_w");
        for (a = 0; a < e->nq; a++) {
          int64_t row = 0;
          for (j = 0; j < e->nk; j++)
            row += p[a * e->nk + j];
          ck_assert_int_eq(row, k);
        }
      }
    }
    tsr_mask_destroy(m);
  }
  for (a = 0; a < TSR_FAM_COUNT; a++)
    ck_assert_msg(seen[a] > 0, "family %s missing from demo", tsr_corpus_family_name((int)a));
  ck_assert_int_gt(temporal, 0);
  ck_assert_int_gt(spatial, 0);
  tsr_corpus_close(c);
}
END_TEST

/* Mean density of each family's sparse heads falls in the published range
 * (MASKS.md) on the published shapes. */
START_TEST(test_published_densities)
{
  static const char *const presets[] = {"wan2.1-1.3b-480p", "hunyuanvideo-768p", "cogvideox-5b"};
  uint64_t seed = tu_seed("corpus_densities", 22);
  double sum[TSR_FAM_COUNT] = {0};
  int64_t cnt[TSR_FAM_COUNT] = {0}, i, h;
  int k, f;
  for (k = 0; k < 3; k++) {
    char dir[512], sub[32];
    tsr_corpus *c;
    tsr_error err;
    snprintf(sub, sizeof sub, "p%d", k);
    generate(presets[k], sub, seed, 2, 0, dir, sizeof dir);
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_corpus_open(dir, &c, &err), TSR_OK);
    for (i = 0; i < tsr_corpus_count(c); i++) {
      const tsr_corpus_entry *e = tsr_corpus_get(c, i);
      int fam = tsr_corpus_family_find(e->family);
      tsr_mask *m;
      /* STA's windows are published for the 5x6x10 tile canvas only. */
      if (fam == TSR_FAM_STA && strcmp(e->model, "hunyuanvideo-768p"))
        continue;
      ck_assert_int_eq(tsr_corpus_load_mask(c, i, &m, &err), TSR_OK);
      for (h = 0; h < e->heads_q; h++) {
        const char *kind = tsr_corpus_head_kind(c, i, h);
        tsr_corpus_features ft;
        /* Sparse-vDiT's range is over all heads (dense ones included). */
        if (fam != TSR_FAM_SVDIT && (!strcmp(kind, "dense") || !strcmp(kind, "full-window")))
          continue;
        tsr_corpus_plane_features(tsr_mask_plane(m, 0, h), e->nq, e->nk, &ft);
        sum[fam] += ft.density;
        cnt[fam]++;
      }
      tsr_mask_destroy(m);
    }
    tsr_corpus_close(c);
  }
  for (f = 0; f < TSR_FAM_DENSE; f++) {
    double lo, hi, mean;
    ck_assert_msg(cnt[f] > 0, "no sparse heads of %s", tsr_corpus_family_name(f));
    tsr_corpus_family_range(f, &lo, &hi);
    mean = sum[f] / (double)cnt[f];
    fprintf(stderr, "  %-7s %5lld heads, mean density %.3f (published %.2f-%.2f)\n",
            tsr_corpus_family_name(f), (long long)cnt[f], mean, lo, hi);
    ck_assert_msg(mean >= lo && mean <= hi, "%s mean density %.3f outside %.2f-%.2f",
                  tsr_corpus_family_name(f), mean, lo, hi);
  }
}
END_TEST

static int same_tree(const char *a, const char *b, int *files)
{
  DIR *d = opendir(a);
  struct dirent *e;
  int same = d != NULL;
  char pa[1024], pb[1024];
  struct stat st;
  while (same && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
    snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
    if (stat(pa, &st) == 0 && S_ISDIR(st.st_mode)) {
      same = same_tree(pa, pb, files);
    } else {
      same = access(pb, R_OK) == 0 && same_file(pa, pb);
      ++*files;
    }
  }
  if (d)
    closedir(d);
  return same;
}

START_TEST(test_determinism)
{
  uint64_t seed = tu_seed("corpus_determinism", 23);
  char a[512], b[512], c[512], pa[600], pc[600];
  int files = 0, differ = 0;
  tsr_corpus *ca, *cc;
  tsr_error err;
  int64_t i;
  generate("demo", "a", seed, 1, 0, a, sizeof a);
  generate("demo", "b", seed, 2, 0, b, sizeof b); /* threads never change bytes */
  generate("demo", "c", seed + 1, 2, 0, c, sizeof c);
  ck_assert(same_tree(a, b, &files));
  ck_assert_int_gt(files, 40);
  snprintf(pa, sizeof pa, "%s/manifest.json", a);
  snprintf(pc, sizeof pc, "%s/manifest.json", c);
  ck_assert(!same_file(pa, pc));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_open(a, &ca, &err), TSR_OK);
  ck_assert_int_eq(tsr_corpus_open(c, &cc, &err), TSR_OK);
  ck_assert_uint_eq(tsr_corpus_seed(ca), seed);
  ck_assert_uint_eq(tsr_corpus_seed(cc), seed + 1);
  for (i = 0; i < tsr_corpus_count(ca); i++)
    if (!strcmp(tsr_corpus_get(ca, i)->family, "xattn") ||
        !strcmp(tsr_corpus_get(ca, i)->family, "jenga"))
      differ += !same_file(tsr_corpus_get(ca, i)->file, tsr_corpus_get(cc, i)->file);
  ck_assert_int_gt(differ, 0); /* data-dependent masks follow the seed */
  tsr_corpus_close(ca);
  tsr_corpus_close(cc);
}
END_TEST

START_TEST(test_manifest_roundtrip)
{
  char dir[512], p[700];
  tsr_corpus *c;
  tsr_error err;
  int64_t i, h, nprof = 0, neval = 0, limit = 30;
  json_t *root;
  json_error_t je;
  generate("wan2.1-1.3b-480p", "rt", tu_seed("corpus_roundtrip", 24), 2, limit, dir, sizeof dir);
  tsr_error_clear(&err);
  ck_assert_msg(tsr_corpus_open(dir, &c, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(tsr_corpus_count(c), limit);
  ck_assert_str_eq(tsr_corpus_preset(c), "wan2.1-1.3b-480p");
  ck_assert_ptr_null(tsr_corpus_get(c, limit));
  ck_assert_ptr_null(tsr_corpus_get(c, -1));
  for (i = 0; i < limit; i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(c, i);
    tsr_mask *m;
    tsr_geom *g;
    int64_t sel = 0, b;
    ck_assert_str_eq(e->model, "wan2.1-1.3b-480p");
    ck_assert_int_eq(e->seq_q, 32760);
    ck_assert_int_eq(e->seq_k, 32760);
    ck_assert_int_eq(e->head_dim, 128);
    ck_assert_int_eq(e->model_heads, 12);
    ck_assert_int_eq(e->heads_kv, e->heads_q);
    ck_assert(e->head_first >= 0 && e->head_first + e->heads_q <= 12);
    nprof += !strcmp(e->split, "profile");
    neval += !strcmp(e->split, "eval");
    ck_assert_int_eq(tsr_corpus_load_mask(c, i, &m, &err), TSR_OK);
    ck_assert_int_eq(tsr_mask_heads(m), e->heads_q);
    for (b = 0; b < e->heads_q * e->nq * e->nk; b++)
      sel += tsr_mask_bits(m)[b];
    ck_assert_double_eq_tol(e->density, (double)sel / (double)(e->heads_q * e->nq * e->nk), 1e-5);
    ck_assert_msg(tsr_corpus_load_geom(c, i, &g, &err) == TSR_OK, "%s", err.text);
    ck_assert_int_eq(tsr_geom_nq(g), e->nq);
    ck_assert_int_eq(tsr_geom_nk(g), e->nk);
    ck_assert_int_eq(tsr_geom_seq_q(g), e->seq_q);
    ck_assert_int_eq(tsr_geom_is_uniform(g, NULL, NULL) != 0, e->q_sizes == NULL);
    ck_assert_int_eq(tsr_mask_check(m, g, 1, e->heads_q, e->file, &err), TSR_OK);
    for (h = 0; h < e->heads_q; h++)
      ck_assert_ptr_nonnull(tsr_corpus_head_kind(c, i, h));
    ck_assert_ptr_null(tsr_corpus_head_kind(c, i, e->heads_q));
    tsr_geom_destroy(g);
    tsr_mask_destroy(m);
  }
  ck_assert_int_gt(nprof, 0);
  ck_assert_int_gt(neval, 0);
  ck_assert_int_eq(nprof + neval, limit);
  tsr_corpus_close(c);
  /* The manifest's own split counts agree. */
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  root = json_load_file(p, 0, &je);
  ck_assert_ptr_nonnull(root);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(root, "split"), "eval")), neval);
  json_decref(root);
}
END_TEST


/* The demo preset is CPU-sized: the reference attention runs over its masks
 * in their own geometry (uniform and variable) in well under a second each,
 * and every query row with no selected block gives log-sum-exp -inf. */
START_TEST(test_demo_reference)
{
  char dir[512];
  tsr_corpus *c;
  tsr_error err;
  uint64_t seed = tu_seed("corpus_demo_reference", 26);
  tu_rng r = {seed};
  int64_t i, done = 0;
  generate("demo", "ref", seed, 2, 0, dir, sizeof dir);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_open(dir, &c, &err), TSR_OK);
  for (i = 0; i < tsr_corpus_count(c); i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(c, i);
    tsr_mask *m;
    tsr_geom *g;
    tsr_array q, k, v, out, lse;
    int64_t n = e->heads_q * e->seq_q * e->head_dim, h, b, t;
    if (strcmp(e->family, "vsa") && strcmp(e->family, "svdit"))
      continue; /* one variable and one uniform family */
    ck_assert_int_eq(tsr_corpus_load_mask(c, i, &m, &err), TSR_OK);
    ck_assert_msg(tsr_corpus_load_geom(c, i, &g, &err) == TSR_OK, "%s", err.text);
    memset(&q, 0, sizeof q);
    q.dtype = TSR_DT_F32;
    q.ndim = 3;
    q.shape[0] = e->heads_q;
    q.shape[1] = e->seq_q;
    q.shape[2] = e->head_dim;
    k = v = q;
    q.data = tu_rand_f32(&r, (size_t)n, 1.0);
    k.data = tu_rand_f32(&r, (size_t)n, 1.0);
    v.data = tu_rand_f32(&r, (size_t)n, 1.0);
    ck_assert_msg(tsr_ref_attention(g, m, &q, &k, &v, 0, &out, &lse, &err) == TSR_OK, "%s",
                  err.text);
    for (h = 0; h < e->heads_q; h++)
      for (b = 0; b < e->nq; b++) {
        const uint8_t *row = tsr_mask_plane(m, 0, h) + b * e->nk;
        int64_t j, any = 0;
        for (j = 0; j < e->nk; j++)
          any |= row[j];
        for (t = tsr_geom_q_start(g, b); t < tsr_geom_q_start(g, b + 1); t++) {
          float l = ((const float *)lse.data)[h * e->seq_q + t];
          ck_assert(any ? isfinite(l) : isinf(l) && l < 0);
        }
      }
    done++;
    tsr_npy_free(&q);
    tsr_npy_free(&k);
    tsr_npy_free(&v);
    tsr_npy_free(&out);
    tsr_npy_free(&lse);
    tsr_geom_destroy(g);
    tsr_mask_destroy(m);
    if (done == 3)
      break;
  }
  ck_assert_int_eq(done, 3);
  tsr_corpus_close(c);
}
END_TEST

/* ---- Errors ------------------------------------------------------------------------ */

START_TEST(test_errors)
{
  tsr_corpus_gen_opts o;
  tsr_corpus *c = (tsr_corpus *)1;
  tsr_error err;
  char dir[512], file[600], p[700];
  FILE *f;
  tsr_mask *m;
  tsr_geom *g;

  tsr_corpus_gen_opts_init(&o);
  snprintf(dir, sizeof dir, "%s/x", tmp);
  o.out_dir = dir;
  o.preset = "no-such-preset";
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_generate(&o, NULL, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "unknown corpus preset 'no-such-preset'"), "%s", err.text);
  ck_assert_int_ne(access(dir, F_OK), 0); /* nothing written */

  /* A folder under a regular file cannot be created (whoever runs the test). */
  snprintf(file, sizeof file, "%s/plain", tmp);
  f = fopen(file, "w");
  fputs("x", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/sub", file);
  o.preset = "demo";
  o.out_dir = p;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_generate(&o, NULL, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "cannot create corpus folder") && strstr(err.text, "plain"), "%s",
                err.text);

  o.out_dir = dir;
  o.limit = -1;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_generate(&o, NULL, &err), TSR_ERR_INVALID);

  /* Reader: missing folder, malformed JSON, wrong format, missing field. */
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_open(dir, &c, &err), TSR_ERR_IO);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(err.text, "manifest.json"), "%s", err.text);
  mkdir(dir, 0777);
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  f = fopen(p, "w");
  fputs("{\"format\": \"tessera-corpus\", \"version\": 1, \"entries\": [", f);
  fclose(f);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_open(dir, &c, &err), TSR_ERR_FORMAT);
  f = fopen(p, "w");
  fputs("{\"format\": \"something-else\", \"version\": 1, \"entries\": []}", f);
  fclose(f);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_open(dir, &c, &err), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(err.text, "not a tessera-corpus"), "%s", err.text);

  /* A real manifest with one field removed, then a mask of the wrong shape
   * (generation refuses a folder holding something else: emptied first). */
  o.limit = 3;
  o.preset = "demo";
  tu_rmtree(dir);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_generate(&o, NULL, &err), TSR_OK);
  {
    json_t *root = json_load_file(p, 0, NULL), *e0;
    char *text;
    ck_assert_ptr_nonnull(root);
    e0 = json_array_get(json_object_get(root, "entries"), 1);
    json_object_del(e0, "seq_q");
    text = json_dumps(root, 0);
    f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    json_decref(root);
  }
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_open(dir, &c, &err), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(err.text, "entry 1") && strstr(err.text, "'seq_q'"), "%s", err.text);

  /* Uniform blocks whose count disagrees with the lengths (found by
   * tests/fuzz/fuzz_corpus: the geometry then had 36 query blocks, the
   * entry and its mask 18). */
  {
    static const char *const keys[2] = {"seq_q", "seq_k"};
    int side;
    for (side = 0; side < 2; side++) {
      json_t *root, *e0;
      char *text;
      tu_rmtree(dir); /* generate refuses a folder whose manifest was edited */
      tsr_error_clear(&err);
      ck_assert_int_eq(tsr_corpus_generate(&o, NULL, &err), TSR_OK);
      root = json_load_file(p, 0, NULL);
      ck_assert_ptr_nonnull(root);
      e0 = json_array_get(json_object_get(root, "entries"), 2);
      ck_assert_str_eq(json_string_value(json_object_get(json_object_get(e0, "geometry"), "kind")),
                       "uniform");
      json_object_set_new(e0, keys[side],
                          json_integer(2 * json_integer_value(json_object_get(e0, keys[side]))));
      text = json_dumps(root, 0);
      f = fopen(p, "w");
      fputs(text, f);
      fclose(f);
      free(text);
      json_decref(root);
      tsr_error_clear(&err);
      c = NULL;
      ck_assert_int_eq(tsr_corpus_open(dir, &c, &err), TSR_ERR_FORMAT);
      ck_assert_ptr_null(c);
      ck_assert_msg(strstr(err.text, "entry 2") && strstr(err.text, "does not cover"), "%s", err.text);
    }
  }

  tu_rmtree(dir);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_generate(&o, NULL, &err), TSR_OK);
  ck_assert_int_eq(tsr_corpus_open(dir, &c, &err), TSR_OK);
  {
    uint8_t bits[6] = {1, 0, 1, 1, 0, 1};
    ck_assert_int_eq(tsr_mask_from_bytes(1, 1, 2, 3, bits, &m, &err), TSR_OK);
    ck_assert_int_eq(tsr_mask_save(tsr_corpus_get(c, 0)->file, m, &err), TSR_OK);
    tsr_mask_destroy(m);
  }
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_load_mask(c, 0, &m, &err), TSR_ERR_SHAPE);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err.text, "manifest says"), "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_load_mask(c, 99, &m, &err), TSR_ERR_INVALID);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_load_geom(c, -1, &g, &err), TSR_ERR_INVALID);
  tsr_corpus_close(c);
  tsr_corpus_close(NULL);
}
END_TEST

/* Entries of folder d whose name contains `part`. */
static int count_named(const char *d, const char *part)
{
  DIR *dd = opendir(d);
  struct dirent *e;
  int n = 0;
  while (dd && (e = readdir(dd)))
    n += strstr(e->d_name, part) != NULL;
  if (dd)
    closedir(dd);
  return n;
}

static void put_text(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static int holds_text(const char *path, const char *text)
{
  size_t n;
  unsigned char *b = slurp(path, &n);
  int same = n == strlen(text) && !memcmp(b, text, n);
  free(b);
  return same;
}

/* Where generation may write: a new or empty folder (built aside, renamed
 * into place), or the complete corpus asked for (kept); a folder holding
 * anything else -- a corrupt manifest, someone's files, another corpus, an
 * incomplete one -- is refused and left byte for byte as it was; a failure
 * half-way leaves no folder and no temporary. */
START_TEST(test_generate_folders)
{
  tu_rng r = {tu_seed("corpus_folders", 37)};
  tsr_corpus_gen_opts o;
  tsr_corpus *c;
  tsr_error err;
  char d[512], p[700], q[700], text[200], mine[64];
  struct stat s1, s2;
  struct rlimit old, lim;
  int64_t n = -1;

  tsr_corpus_gen_opts_init(&o);
  o.preset = "demo";
  o.limit = 3;
  o.out_dir = d;
  /* a corrupt manifest beside someone's file */
  snprintf(text, sizeof text, "{\"format\": \"tessera-corpus\", \"version\": 1, \"entries\": [%llu,",
           (unsigned long long)tu_next(&r));
  snprintf(mine, sizeof mine, "%016llx\n", (unsigned long long)tu_next(&r));
  snprintf(d, sizeof d, "%s/corrupt", tmp);
  ck_assert_int_eq(mkdir(d, 0777), 0);
  snprintf(p, sizeof p, "%s/manifest.json", d);
  snprintf(q, sizeof q, "%s/mine.txt", d);
  put_text(p, text);
  put_text(q, mine);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_generate(&o, &n, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, d) && strstr(err.text, "not a complete corpus"), "%s", err.text);
  ck_assert(holds_text(p, text));
  ck_assert(holds_text(q, mine));
  ck_assert_int_eq(count_named(d, ""), 4); /* ., .., the two files */
  ck_assert_int_eq(count_named(tmp, ".tmp."), 0);
  /* no manifest, someone's file */
  ck_assert_int_eq(unlink(p), 0);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_generate(&o, &n, &err), TSR_ERR_INVALID);
  ck_assert(holds_text(q, mine));
  ck_assert_int_eq(count_named(d, ""), 3);
  /* a file where the folder goes */
  tsr_error_clear(&err);
  o.out_dir = q;
  ck_assert_int_eq(tsr_corpus_generate(&o, &n, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "a regular file, not a folder"), "%s", err.text);
  ck_assert(holds_text(q, mine));

  /* a link to an empty folder: the corpus lands in the folder, the link stays */
  o.out_dir = d;
  snprintf(d, sizeof d, "%s/real", tmp);
  ck_assert_int_eq(mkdir(d, 0777), 0);
  snprintf(d, sizeof d, "%s/link", tmp);
  ck_assert_int_eq(symlink("real", d), 0);
  tsr_error_clear(&err);
  ck_assert_msg(tsr_corpus_generate(&o, &n, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(lstat(d, &s1), 0);
  ck_assert(S_ISLNK(s1.st_mode));
  snprintf(p, sizeof p, "%s/real/manifest.json", tmp);
  ck_assert_int_eq(stat(p, &s1), 0);
  ck_assert_int_eq(tsr_corpus_open(d, &c, &err), TSR_OK);
  ck_assert_int_eq(tsr_corpus_count(c), 3);
  /* the same corpus again: kept, nothing rewritten */
  ck_assert_int_eq(tsr_corpus_generate(&o, &n, &err), TSR_OK);
  ck_assert_int_eq(n, 0);
  ck_assert_int_eq(stat(p, &s2), 0);
  ck_assert_int_eq(s1.st_ino, s2.st_ino);
  ck_assert_int_eq(s1.st_mtime, s2.st_mtime);
  /* another seed or size: refused, kept */
  o.seed = 2;
  ck_assert_int_eq(tsr_corpus_generate(&o, &n, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "holds preset 'demo' seed 1 (3 masks), not preset 'demo' seed 2"),
                "%s", err.text);
  o.seed = 1;
  o.limit = 4;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_generate(&o, &n, &err), TSR_ERR_INVALID);
  o.limit = 3;
  /* incomplete: a mask gone */
  ck_assert_int_eq(unlink(tsr_corpus_get(c, 1)->file), 0);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_generate(&o, &n, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "incomplete") && strstr(err.text, tsr_corpus_get(c, 1)->file),
                "%s", err.text);
  ck_assert_int_eq(stat(p, &s2), 0);
  ck_assert_int_eq(s1.st_ino, s2.st_ino);
  tsr_corpus_close(c);

  /* A failure half-way, as on a full disk: files are limited to 20 kB, so
   * every mask (under 10 kB) is written and the manifest (60 kB) is not. */
  snprintf(d, sizeof d, "%s/full", tmp);
  o.limit = 0;
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 20000;
  signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG */
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  tsr_error_clear(&err);
  n = tsr_corpus_generate(&o, NULL, &err);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  ck_assert_int_eq(n, TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "manifest.json") && strstr(err.text, strerror(EFBIG)), "%s",
                err.text);
  ck_assert_int_ne(access(d, F_OK), 0);
  ck_assert_int_eq(count_named(tmp, ".tmp."), 0);
}
END_TEST

/* ---- limits and paths of manifest entries (issue 14: 7, 8, 9) ------------------ */

/* One field of a manifest entry set to an integer, or a string when text. */
typedef struct {
  const char *key;   /* "seq_q", or "geometry.bq" inside the entry's geometry */
  json_int_t value;
  const char *text;
} field_edit;

/* Rewrites DIR/manifest.json as DIR/manifest.orig (saved on the first call)
 * with the n edits applied to entry i. */
static void edit_entry(const char *dir, int64_t i, const field_edit *fe, int n)
{
  char p[600], o[600], *text;
  json_t *root, *e;
  FILE *f;
  int k;
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  snprintf(o, sizeof o, "%s/manifest.orig", dir);
  if (access(o, F_OK))
    ck_assert_int_eq(rename(p, o), 0);
  root = json_load_file(o, 0, NULL);
  ck_assert_ptr_nonnull(root);
  e = json_array_get(json_object_get(root, "entries"), (size_t)i);
  for (k = 0; k < n; k++) {
    const char *dot = strchr(fe[k].key, '.');
    json_t *obj = dot ? json_object_get(e, "geometry") : e;
    json_object_set_new(obj, dot ? dot + 1 : fe[k].key,
                        fe[k].text ? json_string(fe[k].text) : json_integer(fe[k].value));
  }
  text = json_dumps(root, 0);
  f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  free(text);
  json_decref(root);
}

/* Opens dir with the edits applied: TSR_ERR_FORMAT naming entry i and every
 * needle (NULL-ended), or TSR_OK when the first needle is NULL. */
static void open_expect(const char *dir, int64_t i, const field_edit *fe, int n,
                        const char *const *needles)
{
  tsr_corpus *c = NULL;
  tsr_error err = {0};
  char entry[64];
  tsr_status st;
  edit_entry(dir, i, fe, n);
  st = tsr_corpus_open(dir, &c, &err);
  if (!needles[0]) {
    ck_assert_msg(st == TSR_OK, "%s: %s", fe[0].key, err.text);
    tsr_corpus_close(c);
    return;
  }
  ck_assert_msg(st == TSR_ERR_FORMAT, "%s: status %d (%s)", fe[0].key, st, err.text);
  ck_assert_ptr_null(c);
  snprintf(entry, sizeof entry, "entry %lld:", (long long)i);
  ck_assert_msg(strstr(err.text, entry), "%s", err.text);
  for (; *needles; needles++)
    ck_assert_msg(strstr(err.text, *needles), "'%s' not in: %s", *needles, err.text);
}

/* A random entry of the corpus in dir with a variable geometry. */
static int64_t variable_entry(const char *dir, tu_rng *r)
{
  tsr_corpus *c = NULL;
  tsr_error err = {0};
  int64_t i, pick = -1, seen = 0;
  char p[600], o[600];
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  snprintf(o, sizeof o, "%s/manifest.orig", dir);
  if (!access(o, F_OK)) /* the original, not an edit */
    ck_assert_int_eq(rename(o, p), 0);
  ck_assert_msg(tsr_corpus_open(dir, &c, &err) == TSR_OK, "%s", err.text);
  for (i = 0; i < tsr_corpus_count(c); i++)
    if (tsr_corpus_get(c, i)->q_sizes && tu_range(r, 0, seen++) == 0)
      pick = i;
  tsr_corpus_close(c);
  ck_assert_int_ge(pick, 0);
  return pick;
}

START_TEST(test_manifest_limits)
{
  char dir[512], over[64];
  tu_rng r = {tu_seed("manifest_limits", 61)};
  int64_t e = tu_range(&r, 0, 5); /* an svg entry of the demo preset: 2304 tokens, 128x128 */
  const char *ok[] = {NULL};
  generate("demo", "lim", 1, 1, 12, dir, sizeof dir);
  snprintf(over, sizeof over, "is %lld, more than %lld", (long long)TSR_MAX_SEQ + 1,
           (long long)TSR_MAX_SEQ);
  {
    /* the case: seq_q = 2^40 was accepted and failed at allocation */
    field_edit fe[] = {{"seq_q", (json_int_t)1 << 40, NULL}};
    const char *n[] = {"'seq_q' is 1099511627776, more than 2147483136", NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    field_edit fe[] = {{"seq_k", TSR_MAX_SEQ + 1, NULL}};
    const char *n[] = {"'seq_k'", over, NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    field_edit fe[] = {{"geometry.bk", TSR_MAX_SEQ + 1, NULL}};
    const char *n[] = {"'bk'", over, NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    field_edit fe[] = {{"head_dim", TSR_MAX_DIM + 1, NULL}};
    const char *n[] = {"'head_dim' is 2147483648, more than 2147483647", NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    /* a geometry that does not cover the tokens */
    field_edit fe[] = {{"geometry.nq", tu_range(&r, 19, 2304), NULL}};
    const char *n[] = {"does not cover 2304 x 2304 tokens in blocks of 128x128", NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    field_edit fe[] = {{"geometry.nk", 2305, NULL}};
    const char *n[] = {"'nk' is 2305, more than 2304", NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    /* at the limits and consistent: accepted (the mask file is read later) */
    field_edit fe[] = {{"seq_q", TSR_MAX_SEQ, NULL}, {"seq_k", TSR_MAX_SEQ, NULL},
                       {"geometry.bq", TSR_MAX_SEQ, NULL}, {"geometry.bk", 1 << 24, NULL},
                       {"geometry.nq", 1, NULL}, {"geometry.nk", 128, NULL}};
    open_expect(dir, e, fe, 6, ok);
  }
  {
    /* 4 heads x 2^20 x 2^13 blocks = 2^35 pairs, each count within its sequence */
    field_edit fe[] = {{"seq_q", 1 << 20, NULL},     {"seq_k", 1 << 13, NULL},
                       {"geometry.bq", 1, NULL},     {"geometry.bk", 1, NULL},
                       {"geometry.nq", 1 << 20, NULL}, {"geometry.nk", 1 << 13, NULL}};
    const char *n[] = {"4 x 1048576 x 8192 blocks is more than 17179869184 block pairs", NULL};
    open_expect(dir, e, fe, 6, n);
  }
  /* Paths: absolute, a '..' component, a link resolving outside the folder. */
  {
    field_edit fe[] = {{"file", 0, "../../x.npy"}};
    const char *n[] = {"'file' names '../../x.npy' outside the corpus folder: a '..' component",
                       NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    field_edit fe[] = {{"file", 0, "masks/../../x.npy"}};
    const char *n[] = {"outside the corpus folder: a '..' component", NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    field_edit fe[] = {{"file", 0, "/etc/passwd"}};
    const char *n[] = {"'/etc/passwd' outside the corpus folder: an absolute path", NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    field_edit fe[] = {{"file", 0, ""}};
    const char *n[] = {"an empty path", NULL};
    open_expect(dir, e, fe, 1, n);
  }
  {
    char link[600], target[600];
    FILE *f;
    field_edit out[] = {{"file", 0, "masks/out.npy"}}, in[] = {{"file", 0, "./masks/in.npy"}};
    const char *n[] = {"'masks/out.npy' outside the corpus folder: a path that resolves to",
                       "outside.npy", NULL};
    snprintf(target, sizeof target, "%s/outside.npy", tmp);
    f = fopen(target, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    snprintf(link, sizeof link, "%s/masks/out.npy", dir);
    ck_assert_int_eq(symlink(target, link), 0);
    open_expect(dir, e, out, 1, n);
    /* a link inside the folder to a file inside it is fine, and so is "./" */
    snprintf(link, sizeof link, "%s/masks/in.npy", dir);
    snprintf(target, sizeof target, "%s/masks/inside.npy", dir);
    f = fopen(target, "w");
    fclose(f);
    ck_assert_int_eq(symlink("inside.npy", link), 0);
    open_expect(dir, e, in, 1, ok);
  }
  {
    /* a variable entry's size files too */
    field_edit fe[] = {{"geometry.k_sizes", 0, "geom/../../k.npy"}};
    const char *n[] = {"'k_sizes' names 'geom/../../k.npy' outside the corpus folder", NULL};
    open_expect(dir, variable_entry(dir, &r), fe, 1, n);
  }
}
END_TEST

/* Block sizes that overflow int64 when summed ([2^62] x 8: the sanitizer
 * build aborted, the normal one said "they sum to 0"), negative or zero
 * ones, and ones past the sequence: refused, naming the block and size. */
START_TEST(test_block_sizes_overflow)
{
  char dir[512], path[700];
  tu_rng r = {tu_seed("block_sizes_overflow", 62)};
  int64_t e, nq, seq, sizes[4096], k, bad;
  tsr_corpus *c = NULL;
  tsr_geom *g = NULL;
  tsr_error err = {0};
  tsr_array a;
  const tsr_corpus_entry *ce;
  generate("demo", "sizes", 1, 1, 12, dir, sizeof dir);
  e = variable_entry(dir, &r);
  ck_assert_int_eq(tsr_corpus_open(dir, &c, &err), TSR_OK);
  ce = tsr_corpus_get(c, e);
  ck_assert_ptr_nonnull(ce->q_sizes);
  nq = ce->nq;
  seq = ce->seq_q;
  ck_assert_int_le(nq, 4096);
  memset(&a, 0, sizeof a);
  a.dtype = TSR_DT_I64;
  a.ndim = 1;
  a.shape[0] = nq;
  a.data = sizes;
  snprintf(path, sizeof path, "%s", ce->q_sizes);
  /* all 2^62: the running sum overflows at the second block */
  for (k = 0; k < nq; k++)
    sizes[k] = (int64_t)1 << 62;
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  ck_assert_int_eq(tsr_corpus_load_geom(c, e, &g, &err), TSR_ERR_SHAPE);
  ck_assert_ptr_null(g);
  ck_assert_msg(strstr(err.text, "with block 0 of size 4611686018427387904 they sum to more than")
                && strstr(err.text, path), "%s", err.text);
  /* sizes summing to exactly 2^64 + seq wrap around to seq when added unchecked */
  for (k = 0; k < nq; k++)
    sizes[k] = 1;
  sizes[0] = INT64_MAX;
  sizes[1] = INT64_MAX;
  sizes[2] = 2 + seq - nq; /* INT64_MAX * 2 + 2 = 2^64 */
  ck_assert_int_ge(sizes[2], 1);
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_load_geom(c, e, &g, &err), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(err.text, "with block 0 of size 9223372036854775807"), "%s", err.text);
  /* a non-positive block */
  bad = tu_range(&r, 0, nq - 1);
  for (k = 0; k < nq; k++)
    sizes[k] = 1;
  sizes[bad] = -tu_range(&r, 0, 5);
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_corpus_load_geom(c, e, &g, &err), TSR_ERR_SHAPE);
  {
    char want[96];
    snprintf(want, sizeof want, "block %lld has size %lld, must be positive", (long long)bad,
             (long long)sizes[bad]);
    ck_assert_msg(strstr(err.text, want), "%s", err.text);
  }
  /* positive sizes that sum to the tokens load */
  for (k = 0; k < nq; k++)
    sizes[k] = seq / nq + (k < seq % nq);
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  tsr_error_clear(&err);
  ck_assert_msg(tsr_corpus_load_geom(c, e, &g, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(tsr_geom_seq_q(g), seq);
  tsr_geom_destroy(g);
  tsr_corpus_close(c);
}
END_TEST

START_TEST(test_features)
{
  tu_rng r = {tu_seed("corpus_features", 25) + (uint64_t)_i};
  int64_t nq = tu_range(&r, 1, 40), nk = tu_range(&r, 1, 40), i, j, empty = 0;
  uint8_t *p = tu_rand_bits(&r, (size_t)(nq * nk), tu_uniform(&r));
  double s = 0, s2 = 0, adj = 0, mean, sd;
  tsr_corpus_features f;
  for (i = 0; i < nq; i++) {
    double row = 0;
    for (j = 0; j < nk; j++) {
      row += p[i * nk + j];
      adj += j && p[i * nk + j] && p[i * nk + j - 1];
    }
    s += row;
    s2 += row * row;
    empty += row == 0;
  }
  mean = s / (double)nq;
  sd = sqrt(fmax(0, s2 / (double)nq - mean * mean));
  tsr_corpus_plane_features(p, nq, nk, &f);
  ck_assert_double_eq_tol(f.density, s / (double)(nq * nk), 1e-12);
  ck_assert_double_eq_tol(f.row_cv, mean > 0 ? sd / mean : 0, 1e-12);
  ck_assert_double_eq_tol(f.contiguity, s > 0 ? adj / s : 0, 1e-12);
  ck_assert_int_eq(f.empty_rows, empty);
  free(p);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("corpus");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_rng);
  tcase_add_loop_test(tc, test_layouts, 0, 12);
  tcase_add_loop_test(tc, test_sta_rows, 0, 16);
  tcase_add_loop_test(tc, test_svg_band, 0, 12);
  tcase_add_loop_test(tc, test_radial_bruteforce, 0, 12);
  tcase_add_loop_test(tc, test_svdit_bruteforce, 0, 12);
  tcase_add_loop_test(tc, test_cdf_fewest, 0, 16);
  tcase_add_loop_test(tc, test_topk, 0, 12);
  tcase_add_test(tc, test_pool_exact);
  tcase_add_test(tc, test_distance_decay);
  tcase_add_test(tc, test_demo_properties);
  tcase_add_test(tc, test_published_densities);
  tcase_add_test(tc, test_determinism);
  tcase_add_test(tc, test_manifest_roundtrip);
  tcase_add_test(tc, test_demo_reference);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_generate_folders);
  tcase_add_test(tc, test_manifest_limits);
  tcase_add_test(tc, test_block_sizes_overflow);
  tcase_add_loop_test(tc, test_features, 0, 12);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

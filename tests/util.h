/*
 * tests/util.h: helpers shared by the test programs (header-only, static).
 *
 *  - tu_seed: the seed of a test run, from $TSR_SEED or a fixed default,
 *    printed so any failure reproduces (TSR_SEED=... make check).
 *  - tu_rng: splitmix64, a tiny seeded generator (no libc rand state).
 *  - tu_write_npy_raw: writes .npy bytes exactly as given, so tests can make
 *    malformed files the library's writer would never produce.
 *  - tu_fifo_reader: a child process copying a FIFO to a file, as
 *    `cat fifo > copy &` does.
 *  - tu_naive_attention: an INDEPENDENT float64 attention.  It shares no code
 *    with runtime/: it materialises the token-level mask from block
 *    boundaries the test computes itself and does a plain two-pass softmax
 *    over every key, skipping the unselected ones.
 *  - tu_rel_err: max |got - want| / max |want|, with NaN and infinities
 *    required in the same places.
 *  - tu_inject_nonfinite: NaN or inf at random selected places of q, k, v.
 *  - tu_run_suite: runs a Check suite and gives main's exit status (Check
 *    programs only: defined where <check.h> was included before this).
 */
#ifndef TSR_TEST_UTIL_H
#define TSR_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ftw.h>

/* ---- seeds and random numbers ------------------------------------------ */

typedef struct {
  uint64_t s;
} tu_rng;

static inline uint64_t tu_next(tu_rng *r)
{
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double tu_uniform(tu_rng *r)
{
  return (double)(tu_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [lo, hi]. */
static inline int64_t tu_range(tu_rng *r, int64_t lo, int64_t hi)
{
  return lo + (int64_t)(tu_next(r) % (uint64_t)(hi - lo + 1));
}

/* Standard normal (Box-Muller). */
static inline double tu_normal(tu_rng *r)
{
  double u = tu_uniform(r), w = tu_uniform(r);
  if (u < 1e-300)
    u = 1e-300;
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

/* The run's base seed: $TSR_SEED when set, else `dflt`; printed once per
 * call with the test's name. */
static inline uint64_t tu_seed(const char *test, uint64_t dflt)
{
  const char *e = getenv("TSR_SEED");
  uint64_t s = e && *e ? strtoull(e, NULL, 0) : dflt;
  fprintf(stderr, "%s: seed %llu\n", test, (unsigned long long)s);
  return s;
}

/* n floats, normal with standard deviation `sd`; never all zero. */
static inline float *tu_rand_f32(tu_rng *r, size_t n, double sd)
{
  float *a = malloc(n * sizeof *a);
  size_t i;
  for (i = 0; i < n; i++)
    a[i] = (float)(tu_normal(r) * sd);
  return a;
}

/* n bytes, each 1 with probability p. */
static inline uint8_t *tu_rand_bits(tu_rng *r, size_t n, double p)
{
  uint8_t *a = malloc(n ? n : 1);
  size_t i;
  for (i = 0; i < n; i++)
    a[i] = tu_uniform(r) < p;
  return a;
}

/* ---- files --------------------------------------------------------------- */

/* A fresh scratch directory (under $TMPDIR or /tmp); the path is static
 * storage in `buf`. */
static inline const char *tu_tmpdir(char *buf, size_t cap)
{
  const char *t = getenv("TMPDIR");
  snprintf(buf, cap, "%s/tsr-test-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(buf)) {
    perror("mkdtemp");
    abort();
  }
  return buf;
}

static inline int tu_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* Removes a scratch directory and everything in it. */
static inline void tu_rmtree(const char *dir)
{
  if (nftw(dir, tu_rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}

/* Starts a child that copies the FIFO `fifo` into the file `copy` until
 * the writer closes it; waitpid() it.  (Exit 0 when the copy is whole.) */
static inline pid_t tu_fifo_reader(const char *fifo, const char *copy)
{
  pid_t pid = fork();
  if (pid == 0) {
    FILE *in = fopen(fifo, "rb"), *out = fopen(copy, "wb");
    char buf[4096];
    size_t k;
    if (!in || !out)
      _exit(3);
    while ((k = fread(buf, 1, sizeof buf, in)) > 0)
      if (fwrite(buf, 1, k, out) != k)
        _exit(4);
    _exit(fclose(out) != 0);
  }
  return pid;
}

/* Writes magic, version, a header text (padded by the caller or not) and
 * `nbytes` of payload.  version 1 uses a 2-byte header length, 2 and 3 a
 * 4-byte one.  `magic` NULL = the real one. */
static inline void tu_write_npy_raw(const char *path, const char *magic, int version,
                                    const char *header, const void *data, size_t nbytes)
{
  FILE *f = fopen(path, "wb");
  size_t hl = strlen(header);
  unsigned char pre[12];
  if (!f) {
    perror(path);
    abort();
  }
  memcpy(pre, magic ? magic : "\x93NUMPY", 6);
  pre[6] = (unsigned char)version;
  pre[7] = 0;
  pre[8] = hl & 0xff;
  pre[9] = (hl >> 8) & 0xff;
  pre[10] = (hl >> 16) & 0xff;
  pre[11] = (hl >> 24) & 0xff;
  fwrite(pre, 1, version == 1 ? 10 : 12, f);
  fwrite(header, 1, hl, f);
  if (nbytes)
    fwrite(data, 1, nbytes, f);
  fclose(f);
}

/* A well-formed .npy header dict for `descr` and a shape, padded to 64 as
 * NumPy pads it. */
static inline void tu_npy_header(char *buf, size_t cap, const char *descr, int ndim,
                                 const int64_t *shape)
{
  size_t n = (size_t)snprintf(buf, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  int i;
  for (i = 0; i < ndim; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%lld%s", (long long)shape[i],
                          ndim == 1 ? "," : i + 1 < ndim ? ", " : "");
  n += (size_t)snprintf(buf + n, cap - n, "), }");
  while ((10 + n + 1) % 64 && n + 2 < cap)
    buf[n++] = ' ';
  buf[n++] = '\n';
  buf[n] = '\0';
}

/* A well-formed version-1 .npy file. */
static inline void tu_write_npy(const char *path, const char *descr, int ndim,
                                const int64_t *shape, const void *data, size_t nbytes)
{
  char h[512];
  tu_npy_header(h, sizeof h, descr, ndim, shape);
  tu_write_npy_raw(path, NULL, 1, h, data, nbytes);
}

/* ---- independent attention ------------------------------------------------ */

/* Token-level mask [Sq][Sk] of one (batch, head) from a block plane
 * [nq][nk] and block boundaries qb[0..nq], kb[0..nk] in tokens. */
static inline uint8_t *tu_materialise(const uint8_t *plane, int64_t nq, int64_t nk,
                                      const int64_t *qb, const int64_t *kb)
{
  int64_t Sq = qb[nq], Sk = kb[nk], i, j, t, u;
  uint8_t *tok = calloc((size_t)(Sq * Sk) + 1, 1);
  for (i = 0; i < nq; i++)
    for (j = 0; j < nk; j++)
      if (plane[i * nk + j])
        for (t = qb[i]; t < qb[i + 1]; t++)
          for (u = kb[j]; u < kb[j + 1]; u++)
            tok[t * Sk + u] = 1;
  return tok;
}

/* Boundaries of uniform blocks of size bs over S tokens; returns nb. */
static inline int64_t tu_uniform_bounds(int64_t S, int64_t bs, int64_t **out)
{
  int64_t nb = (S + bs - 1) / bs, i;
  *out = malloc((size_t)(nb + 1) * sizeof **out);
  for (i = 0; i <= nb; i++)
    (*out)[i] = i * bs < S ? i * bs : S;
  return nb;
}

/* q [B][Hq][Sq][D], k, v [B][Hkv][Sk][D] float; block mask [mb][mh][nq][nk]
 * (mb, mh 1 = broadcast).  out [B][Hq][Sq][D], lse [B][Hq][Sq] double. */
static inline void tu_naive_attention(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk,
                                      int64_t D, const float *q, const float *k, const float *v,
                                      const uint8_t *mask, int64_t mb, int64_t mh, int64_t nq,
                                      int64_t nk, const int64_t *qb, const int64_t *kb,
                                      double scale, double *out, double *lse)
{
  int64_t b, h, t, u, d;
  double *s = malloc((size_t)Sk * sizeof *s);
  for (b = 0; b < B; b++)
    for (h = 0; h < Hq; h++) {
      const uint8_t *plane = mask + ((mb == 1 ? 0 : b) * mh + (mh == 1 ? 0 : h)) * nq * nk;
      uint8_t *tok = tu_materialise(plane, nq, nk, qb, kb);
      int64_t hk = h / (Hq / Hkv);
      const float *K = k + (b * Hkv + hk) * Sk * D, *V = v + (b * Hkv + hk) * Sk * D;
      for (t = 0; t < Sq; t++) {
        const float *Q = q + ((b * Hq + h) * Sq + t) * D;
        double *O = out + ((b * Hq + h) * Sq + t) * D;
        double mx = -INFINITY, sum = 0;
        for (u = 0; u < Sk; u++) {
          double dot = 0;
          for (d = 0; d < D; d++)
            dot += (double)Q[d] * (double)K[u * D + d];
          s[u] = dot * scale;
          if (tok[t * Sk + u] && s[u] > mx)
            mx = s[u];
        }
        for (d = 0; d < D; d++)
          O[d] = 0;
        for (u = 0; u < Sk; u++)
          if (tok[t * Sk + u]) {
            double p = exp(s[u] - mx);
            sum += p;
            for (d = 0; d < D; d++)
              O[d] += p * (double)V[u * D + d];
          }
        if (sum == 0) {
          lse[(b * Hq + h) * Sq + t] = -INFINITY;
          continue;
        }
        for (d = 0; d < D; d++)
          O[d] /= sum;
        lse[(b * Hq + h) * Sq + t] = mx + log(sum);
      }
      free(tok);
    }
  free(s);
}

/* max |got - want| / max |want| over entries finite in both; NaN matches
 * NaN and an infinity the same infinity, any other mismatch of the
 * non-finite positions gives INFINITY. */
static inline double tu_rel_err(const float *got, const double *want, size_t n)
{
  double md = 0, mw = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    if (isnan(got[i]) || isnan(want[i])) {
      if (!isnan(got[i]) || !isnan(want[i]))
        return INFINITY;
      continue;
    }
    if (isinf(got[i]) || isinf(want[i])) {
      if ((double)got[i] != want[i])
        return INFINITY;
      continue;
    }
    if (fabs(got[i] - want[i]) > md)
      md = fabs(got[i] - want[i]);
    if (fabs(want[i]) > mw)
      mw = fabs(want[i]);
  }
  return mw > 0 ? md / mw : md;
}

/* ---- non-finite inputs ------------------------------------------------------ */

/* What tu_inject_nonfinite puts where: NaN or +inf at one element of q
 * (a query row), of k or of v (a key); TU_NF_NEG_ROWS puts +inf at q[t][d]
 * and makes k[.][d] negative for every key of the row's KV head, so that
 * every selected score of row t is -inf (NaN in the reference, not the
 * empty row's zeros); TU_NF_INF_K_NAN_V puts +inf at k[s][d] and NaN at
 * v[s][d2] of the same key: rows whose q is negative at d score it -inf,
 * p = 0, and still get NaN in column d2 (0 * NaN). */
enum { TU_NF_NAN_Q, TU_NF_NAN_K, TU_NF_NAN_V, TU_NF_INF_Q, TU_NF_INF_K, TU_NF_INF_V,
       TU_NF_NEG_ROWS, TU_NF_INF_K_NAN_V, TU_NF_KINDS };
static inline const char *tu_nf_name(int kind)
{
  static const char *const names[TU_NF_KINDS] = {
      "nan-q", "nan-k", "nan-v", "inf-q", "inf-k", "inf-v", "neg-inf-rows", "inf-k-nan-v"};
  return kind >= 0 && kind < TU_NF_KINDS ? names[kind] : "?";
}

/* A place tu_inject_nonfinite poisoned: tensor 'q', 'k' or 'v', batch b,
 * head h (a query head for q, a KV head for k and v), token s, column d;
 * d2: the v column of TU_NF_INF_K_NAN_V. */
typedef struct {
  char t;
  int64_t b, h, s, d, d2;
} tu_nf_place;

/* The block holding token x of boundaries bnd[0..n]. */
static inline int64_t tu_block_of(const int64_t *bnd, int64_t n, int64_t x)
{
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (bnd[mid] <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Poisons `count` places with `kind` (float arrays [B][H][S][D], mask
 * [mb][mh][nq][nk] as tu_naive_attention takes), each drawn among the
 * places some query selects: query rows with a selected key, keys that a
 * query of their KV head selects.  Places go to `pl` (count entries);
 * returns how many were poisoned (0 when the mask selects nothing; a place
 * may be drawn twice). */
static inline int tu_inject_nonfinite(tu_rng *r, int kind, int count, int64_t B, int64_t Hq,
                                      int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, float *q,
                                      float *k, float *v, const uint8_t *mask, int64_t mb,
                                      int64_t mh, int64_t nq, int64_t nk, const int64_t *qb,
                                      const int64_t *kb, tu_nf_place *pl)
{
  const int on_q = kind == TU_NF_NAN_Q || kind == TU_NF_INF_Q || kind == TU_NF_NEG_ROWS;
  const float val = kind == TU_NF_NAN_Q || kind == TU_NF_NAN_K || kind == TU_NF_NAN_V ? NAN
                                                                                       : INFINITY;
  /* (TU_NF_INF_K_NAN_V sets its two values itself) */
  int64_t grp = Hq / Hkv, H = on_q ? Hq : Hkv, S = on_q ? Sq : Sk, b, h, x, j, u, n = 0;
  int64_t *cand = malloc((size_t)(B * H * S + 1) * sizeof *cand);
  int placed = 0;
  /* the candidates: every selected row (b, h, t) or used key (b, hk, s) */
  for (b = 0; b < B; b++)
    for (h = 0; h < H; h++)
      for (x = 0; x < S; x++) {
        int used = 0;
        for (j = 0; j < (on_q ? nk : nq) && !used; j++) {
          int64_t g;
          if (on_q)
            used = mask[(((mb == 1 ? 0 : b) * mh + (mh == 1 ? 0 : h)) * nq +
                         tu_block_of(qb, nq, x)) * nk + j] && kb[j + 1] > kb[j];
          else
            for (g = h * grp; g < (h + 1) * grp && !used; g++)
              used = mask[(((mb == 1 ? 0 : b) * mh + (mh == 1 ? 0 : g)) * nq + j) * nk +
                          tu_block_of(kb, nk, x)] && qb[j + 1] > qb[j];
        }
        if (used)
          cand[n++] = (b * H + h) * S + x;
      }
  for (; n > 0 && placed < count; placed++) {
    int64_t c = cand[tu_range(r, 0, n - 1)], d = tu_range(r, 0, D - 1), d2 = -1;
    int64_t s = c % S, hh = c / S % H, bb = c / S / H;
    if (on_q) {
      q[c * D + d] = val;
      if (kind == TU_NF_NEG_ROWS)
        for (u = 0; u < Sk; u++) {
          float *e = &k[((bb * Hkv + hh / grp) * Sk + u) * D + d];
          if (*e > 0) /* a NaN (an unselected key's poison) stays */
            *e = -*e;
          else if (*e == 0)
            *e = -1.0f;
        }
    } else if (kind == TU_NF_NAN_K || kind == TU_NF_INF_K) {
      k[c * D + d] = val;
    } else if (kind == TU_NF_INF_K_NAN_V) {
      k[c * D + d] = INFINITY;
      d2 = tu_range(r, 0, D - 1);
      v[c * D + d2] = NAN;
    } else {
      v[c * D + d] = val;
    }
    pl[placed] = (tu_nf_place){on_q ? 'q' : kind == TU_NF_NAN_V || kind == TU_NF_INF_V ? 'v' : 'k',
                               bb, hh, s, d, d2};
  }
  free(cand);
  return placed;
}

/* Non-finite entries of n doubles (an expected result). */
static inline size_t tu_count_nonfinite(const double *x, size_t n)
{
  size_t i, c = 0;
  for (i = 0; i < n; i++)
    c += !isfinite(x[i]);
  return c;
}

/* ---- Check runner ------------------------------------------------------ */

#ifdef CHECK_H
/* Runs every test of `s` (Check's normal output, forking as CK_FORK says)
 * and frees it: EXIT_SUCCESS when all passed, else EXIT_FAILURE, what the
 * test harness reads from main. */
static inline int tu_run_suite(Suite *s)
{
  SRunner *sr = srunner_create(s);
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
#endif

#endif

/*
 * cli_attn.c: helper of tests/cli-run.sh (not a test by itself).
 *
 *   cli_attn gen DIR SEED MODE    writes q.npy k.npy v.npy mask.npy (and for
 *                                 MODE variable: qs.npy ks.npy) and prints
 *                                 the --block argument ("-" if variable)
 *   cli_attn check DIR SEED MODE SCALE [TOL]
 *                                 regenerates the same case, computes the
 *                                 naive float64 attention of tests/util.h
 *                                 and compares DIR/out.npy and DIR/lse.npy;
 *                                 exit 0 when within TOL (default 1e-5)
 *                                 relative, else 1
 *   cli_attn bad DIR              writes malformed inputs for the rejection
 *                                 tests
 *   cli_attn edit MANIFEST I KEY=VALUE...
 *                                 sets fields of entry I of a corpus
 *                                 manifest (tests/limits.sh): an integer
 *                                 or a string; "geometry.KEY" inside the
 *                                 geometry; heads_q=N resizes the heads array
 *                                 (copies of the first) as well
 *
 * MODE: uniform (ragged, rectangular, GQA, 3-D), batch (4-D, cross
 * lengths, per-batch masks, empty rows), variable (variable blocks),
 * f16 (float16 inputs), gather (uniform with blocks of 16 to 64 tokens,
 * multiples of 16: what mapping gather takes), nan (uniform with NaN at one element of a query row
 * that selects something: check also requires that whole row of out.npy
 * and its lse to be NaN, as the reference's are).  Inputs are written with
 * the test's own .npy writer.
 */
#include <jansson.h>

#include "tessera.h"
#include "util.h"

typedef struct {
  int64_t B, Hq, Hkv, Sq, Sk, D, bq, bk, mb, nq, nk;
  int four, f16;
  int64_t *qb, *kb;
  float *q, *k, *v;
  uint8_t *mask;
  tu_nf_place nf[1]; /* mode nan: the poisoned q element */
  int n_nf;
} tcase;

static int64_t random_bounds(tu_rng *r, int64_t S, int64_t **b)
{
  int64_t n = 0;
  *b = malloc((size_t)(S + 1) * sizeof **b);
  (*b)[0] = 0;
  while ((*b)[n] < S) {
    int64_t s = tu_range(r, 1, 50);
    (*b)[n + 1] = (*b)[n] + s < S ? (*b)[n] + s : S;
    n++;
  }
  return n;
}

static void make(tcase *c, uint64_t seed, const char *mode)
{
  tu_rng r = {seed};
  int64_t i, n;
  memset(c, 0, sizeof *c);
  c->B = 1, c->mb = 1;
  c->Hkv = tu_range(&r, 1, 2);
  c->Hq = c->Hkv * tu_range(&r, 1, 3);
  c->Sq = tu_range(&r, 100, 300);
  c->Sk = c->Sq;
  c->D = tu_range(&r, 8, 48);
  c->bq = tu_range(&r, 16, 70);
  c->bk = tu_range(&r, 16, 70);
  if (!strcmp(mode, "gather")) { /* blocks a gather tile pairs: 16 to 64, multiples of 16 */
    c->bq = 16 * (c->bq % 4 + 1);
    c->bk = 16 * (c->bk % 4 + 1);
  }
  if (!strcmp(mode, "batch")) {
    c->four = 1;
    c->B = c->mb = 2;
    c->Sk = tu_range(&r, 50, 400);
  } else if (!strcmp(mode, "f16")) {
    c->f16 = 1;
  }
  if (!strcmp(mode, "variable")) {
    c->nq = random_bounds(&r, c->Sq, &c->qb);
    c->nk = random_bounds(&r, c->Sk, &c->kb);
    c->bq = c->bk = 0;
  } else {
    c->nq = tu_uniform_bounds(c->Sq, c->bq, &c->qb);
    c->nk = tu_uniform_bounds(c->Sk, c->bk, &c->kb);
  }
  n = c->mb * c->Hq * c->nq * c->nk;
  c->mask = tu_rand_bits(&r, (size_t)n, 0.35);
  for (i = 0; i < c->mb * c->Hq * c->nq; i++) /* some empty rows */
    if (tu_uniform(&r) < 0.15)
      memset(c->mask + i * c->nk, 0, (size_t)c->nk);
  c->q = tu_rand_f32(&r, (size_t)(c->B * c->Hq * c->Sq * c->D), 1.0);
  c->k = tu_rand_f32(&r, (size_t)(c->B * c->Hkv * c->Sk * c->D), 1.0);
  c->v = tu_rand_f32(&r, (size_t)(c->B * c->Hkv * c->Sk * c->D), 1.0);
  if (!strcmp(mode, "nan"))
    c->n_nf = tu_inject_nonfinite(&r, TU_NF_NAN_Q, 1, c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D,
                                  c->q, c->k, c->v, c->mask, c->mb, c->Hq, c->nq, c->nk, c->qb,
                                  c->kb, c->nf);
  if (c->f16) { /* what the file holds is what the naive computation sees */
    for (i = 0; i < c->B * c->Hq * c->Sq * c->D; i++)
      c->q[i] = tsr_half_to_float(tsr_float_to_half(c->q[i]));
    for (i = 0; i < c->B * c->Hkv * c->Sk * c->D; i++) {
      c->k[i] = tsr_half_to_float(tsr_float_to_half(c->k[i]));
      c->v[i] = tsr_half_to_float(tsr_float_to_half(c->v[i]));
    }
  }
}

static void release(tcase *c)
{
  free(c->qb), free(c->kb), free(c->q), free(c->k), free(c->v), free(c->mask);
}

static void write_tensor(const char *dir, const char *name, const tcase *c, int64_t H, int64_t S,
                         const float *x)
{
  char p[600];
  int64_t shape[4] = {c->B, H, S, c->D}, n = c->B * H * S * c->D, i;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  if (c->f16) {
    uint16_t *h = malloc((size_t)n * 2);
    for (i = 0; i < n; i++)
      h[i] = tsr_float_to_half(x[i]);
    tu_write_npy(p, "<f2", c->four ? 4 : 3, shape + !c->four, h, (size_t)n * 2);
    free(h);
  } else {
    tu_write_npy(p, "<f4", c->four ? 4 : 3, shape + !c->four, x, (size_t)n * 4);
  }
}

static int gen(const char *dir, uint64_t seed, const char *mode)
{
  tcase c;
  char p[600];
  int64_t mshape[4], i;
  make(&c, seed, mode);
  write_tensor(dir, "q.npy", &c, c.Hq, c.Sq, c.q);
  write_tensor(dir, "k.npy", &c, c.Hkv, c.Sk, c.k);
  write_tensor(dir, "v.npy", &c, c.Hkv, c.Sk, c.v);
  mshape[0] = c.mb, mshape[1] = c.Hq, mshape[2] = c.nq, mshape[3] = c.nk;
  snprintf(p, sizeof p, "%s/mask.npy", dir);
  tu_write_npy(p, c.four ? "|u1" : "|b1", c.four ? 4 : 3, mshape + !c.four, c.mask,
               (size_t)(c.mb * c.Hq * c.nq * c.nk));
  if (!c.bq) {
    int64_t *qs = malloc((size_t)c.nq * 8), *ks = malloc((size_t)c.nk * 8);
    int32_t *ks32 = malloc((size_t)c.nk * 4);
    for (i = 0; i < c.nq; i++)
      qs[i] = c.qb[i + 1] - c.qb[i];
    for (i = 0; i < c.nk; i++)
      ks32[i] = (int32_t)(ks[i] = c.kb[i + 1] - c.kb[i]);
    snprintf(p, sizeof p, "%s/qs.npy", dir);
    tu_write_npy(p, "<i8", 1, &c.nq, qs, (size_t)c.nq * 8);
    snprintf(p, sizeof p, "%s/ks.npy", dir);
    tu_write_npy(p, "<i4", 1, &c.nk, ks32, (size_t)c.nk * 4);
    free(qs), free(ks), free(ks32);
    printf("-\n");
  } else {
    printf("%lldx%lld\n", (long long)c.bq, (long long)c.bk);
  }
  release(&c);
  return 0;
}

static int check(const char *dir, uint64_t seed, const char *mode, double scale, double tol)
{
  tcase c;
  char p[600];
  tsr_array out, lse;
  tsr_error err = {0};
  int64_t nout, nlse;
  double *want, *want_lse, e1, e2;
  make(&c, seed, mode);
  nout = c.B * c.Hq * c.Sq * c.D;
  nlse = c.B * c.Hq * c.Sq;
  snprintf(p, sizeof p, "%s/out.npy", dir);
  memset(&lse, 0, sizeof lse);
  if (tsr_npy_load(p, &out, &err) ||
      (snprintf(p, sizeof p, "%s/lse.npy", dir), tsr_npy_load(p, &lse, &err))) {
    fprintf(stderr, "%s\n", err.text);
    tsr_npy_free(&out);
    release(&c);
    return 1;
  }
  if (out.dtype != TSR_DT_F32 || lse.dtype != TSR_DT_F32 || tsr_array_numel(&out) != nout ||
      tsr_array_numel(&lse) != nlse || out.ndim != 3 + c.four || lse.ndim != 2 + c.four) {
    fprintf(stderr, "cli_attn: output has the wrong dtype or shape\n");
    tsr_npy_free(&out), tsr_npy_free(&lse);
    release(&c);
    return 1;
  }
  want = malloc((size_t)nout * sizeof *want);
  want_lse = malloc((size_t)nlse * sizeof *want_lse);
  tu_naive_attention(c.B, c.Hq, c.Hkv, c.Sq, c.Sk, c.D, c.q, c.k, c.v, c.mask, c.mb, c.Hq, c.nq,
                     c.nk, c.qb, c.kb, scale ? scale : 1.0 / sqrt((double)c.D), want, want_lse);
  e1 = tu_rel_err(out.data, want, (size_t)nout);
  e2 = tu_rel_err(lse.data, want_lse, (size_t)nlse);
  printf("cli_attn %s seed %llu: out rel err %.3g, lse rel err %.3g\n", mode,
         (unsigned long long)seed, e1, e2);
  if (!strcmp(mode, "nan")) { /* the poisoned row itself, whatever the comparison says */
    int64_t row = (c.nf[0].b * c.Hq + c.nf[0].h) * c.Sq + c.nf[0].s, d, nan = 0;
    for (d = 0; d < c.D; d++)
      nan += isnan(((const float *)out.data)[row * c.D + d]);
    printf("cli_attn nan: row %lld (head %lld, token %lld): %lld of %lld outputs NaN, lse %g\n",
           (long long)row, (long long)c.nf[0].h, (long long)c.nf[0].s, (long long)nan,
           (long long)c.D, ((const float *)lse.data)[row]);
    if (c.n_nf != 1 || nan != c.D || !isnan(((const float *)lse.data)[row]))
      e1 = INFINITY;
  }
  tsr_npy_free(&out), tsr_npy_free(&lse);
  free(want), free(want_lse);
  release(&c);
  return e1 <= tol && e2 <= tol ? 0 : 1;
}

/* Malformed and mismatching inputs; each name says what is wrong. */
static int bad(const char *dir)
{
  char p[600];
  float x[4 * 64 * 16];
  const size_t n2 = 2 * 64 * 16 * sizeof(float); /* bytes of a [2, 64, 16] array */
  int64_t s3[3] = {2, 64, 16}, s2[2] = {64, 16}, s3k[3] = {3, 64, 16}, m3[3] = {2, 3, 4};
  uint8_t bits[64] = {1};
  char h[512];
  size_t i;
  for (i = 0; i < sizeof x / sizeof x[0]; i++)
    x[i] = (float)((int)(i % 7) - 3) * 0.25f;
#define P(name) (snprintf(p, sizeof p, "%s/%s", dir, name), p)
  tu_npy_header(h, sizeof h, "<f4", 3, s3);
  tu_write_npy_raw(P("badmagic.npy"), "\x93NUMPZ", 1, h, x, n2);
  tu_write_npy_raw(P("truncated.npy"), NULL, 1, h, x, n2 - 10);
  tu_write_npy(P("int32.npy"), "<i4", 3, s3, x, n2);
  tu_write_npy(P("complex.npy"), "<c8", 3, s3, x, n2 * 2);
  tu_write_npy_raw(P("fortran.npy"), NULL, 1,
                   "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 64, 16), }\n", x, n2);
  tu_write_npy(P("twodim.npy"), "<f4", 2, s2, x, n2 / 2);
  tu_write_npy(P("k3.npy"), "<f4", 3, s3k, x, n2 / 2 * 3); /* 2 query heads, 3 kv heads */
  tu_write_npy(P("mask_wrong.npy"), "|b1", 3, m3, bits, 24); /* 3x4 blocks, 4x4 expected */
  tu_write_npy(P("mask_f32.npy"), "<f4", 3, m3, x, 24 * 4);
  {
    int64_t ms[3] = {2, 4, 4};
    memset(bits, 1, sizeof bits);
    tu_write_npy(P("mask_good.npy"), "|b1", 3, ms, bits, 32);
  }
  tu_write_npy(P("good.npy"), "<f4", 3, s3, x, n2);
  /* Sizes (tests/limits.sh): a 1x1 mask of one selected block, the same as
   * packed bits, an empty and an overflowing list of block sizes. */
  {
    int64_t one[3] = {1, 1, 1}, zero[1] = {0}, eight[1] = {8}, huge[8];
    uint8_t sel = 1;
    for (i = 0; i < 8; i++)
      huge[i] = (int64_t)1 << 62;
    tu_write_npy(P("mask_one.npy"), "|b1", 3, one, &sel, 1);
    tu_write_npy(P("maskbits_one.npy"), "|u1", 3, one, &sel, 1);
    tu_write_npy(P("sizes_empty.npy"), "<i8", 1, zero, huge, 0);
    tu_write_npy(P("sizes_huge.npy"), "<i8", 1, eight, huge, sizeof huge);
  }
  {
    int64_t b3[4] = {3, 2, 4, 4}; /* batch 3 over good.npy's batch 1 */
    uint8_t ones[96];
    memset(ones, 1, sizeof ones);
    tu_write_npy(P("mask_batch3.npy"), "|b1", 4, b3, ones, sizeof ones);
  }
#undef P
  return 0;
}

/* Sets fields of one manifest entry in place; 0 on success. */
static int edit(const char *path, long idx, int n, char **kv)
{
  json_t *root = json_load_file(path, 0, NULL), *e, *obj;
  int i, rc = 1;
  e = json_array_get(json_object_get(root, "entries"), (size_t)idx);
  if (!e) {
    fprintf(stderr, "cli_attn edit: no entry %ld in '%s'\n", idx, path);
    json_decref(root);
    return 1;
  }
  for (i = 0; i < n; i++) {
    char key[128], *eq = strchr(kv[i], '='), *dot, *end;
    long long v;
    if (!eq || (size_t)(eq - kv[i]) >= sizeof key)
      goto out;
    memcpy(key, kv[i], (size_t)(eq - kv[i]));
    key[eq - kv[i]] = '\0';
    dot = strchr(key, '.');
    obj = dot ? json_object_get(e, "geometry") : e;
    v = strtoll(eq + 1, &end, 10);
    json_object_set_new(obj, dot ? dot + 1 : key, *end || end == eq + 1 ? json_string(eq + 1)
                                                                        : json_integer(v));
    if (!strcmp(key, "heads_q")) {
      json_t *h = json_object_get(e, "heads"), *first = json_array_get(h, 0);
      long long k;
      json_incref(first);
      json_array_clear(h);
      for (k = 0; k < v; k++)
        json_array_append(h, first);
      json_decref(first);
    }
  }
  rc = json_dump_file(root, path, 0) ? 1 : 0;
out:
  json_decref(root);
  return rc;
}

int main(int argc, char **argv)
{
  if (argc == 5 && !strcmp(argv[1], "gen"))
    return gen(argv[2], strtoull(argv[3], NULL, 0), argv[4]);
  if ((argc == 6 || argc == 7) && !strcmp(argv[1], "check"))
    return check(argv[2], strtoull(argv[3], NULL, 0), argv[4], atof(argv[5]),
                 argc == 7 ? atof(argv[6]) : 1e-5);
  if (argc == 3 && !strcmp(argv[1], "bad"))
    return bad(argv[2]);
  if (argc >= 5 && !strcmp(argv[1], "edit"))
    return edit(argv[2], strtol(argv[3], NULL, 10), argc - 4, argv + 4);
  fprintf(stderr, "usage: cli_attn gen DIR SEED MODE | check DIR SEED MODE SCALE [TOL] | bad DIR | "
                  "edit MANIFEST I KEY=VALUE...\n");
  return 2;
}

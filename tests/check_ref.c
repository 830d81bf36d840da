/*
 * check_ref.c: the CPU reference attention against the independent naive
 * float64 attention of tests/util.h, on small random cases covering ragged
 * lengths, rectangular and variable blocks, empty rows and heads, cross
 * lengths, GQA, batches, broadcast masks and float16 inputs.
 *
 * Every key token that no query of its KV head selects is set to NaN in K
 * and V, so an unselected interaction leaking into the result shows up as a
 * NaN, not as a small error.
 *
 * Non-finite inputs (test_nonfinite): NaN or inf at random selected places
 * of q, k or v; the reference must put NaN and inf exactly where the naive
 * float64 computation does, and the rules of runtime/ref.c are checked on
 * the places themselves (a poisoned q row is NaN, a NaN key makes the rows
 * selecting it NaN, a poisoned v element the column of those rows).
 */
#include <check.h>

#include "tessera.h"
#include "util.h"

typedef struct {
  const char *name;
  int64_t B, Hq, Hkv, Sq, Sk, D;
  int64_t bq, bk;   /* 0 = variable blocks of random sizes */
  int64_t mb, mh;   /* mask batch / heads (1 = broadcast) */
  double density;
  int empty_rows;   /* also clear a few whole mask rows */
  int empty_head;   /* clear plane (0, 0) entirely */
  int f16;          /* float16 inputs */
  double scale;     /* 0 = default */
  int four;         /* 4-D tensors */
  int nonfinite;    /* 1 + a TU_NF_* kind: poison selected places; 0 none */
} rcase;

/* Random block sizes (1..maxb) summing to S; returns the count. */
static int64_t variable_bounds(tu_rng *r, int64_t S, int64_t maxb, int64_t **bounds,
                               int64_t **sizes)
{
  int64_t n = 0, at = 0;
  *bounds = malloc((size_t)(S + 1) * sizeof **bounds);
  *sizes = malloc((size_t)S * sizeof **sizes);
  (*bounds)[0] = 0;
  while (at < S) {
    int64_t s = tu_range(r, 1, maxb);
    if (s > S - at)
      s = S - at;
    (*sizes)[n++] = s;
    at += s;
    (*bounds)[n] = at;
  }
  return n;
}

/* The rules of runtime/ref.c on the poisoned places themselves: a q place
 * makes its row and lse NaN; a NaN k makes every row selecting the key NaN,
 * an inf k those rows whose q has the positive sign there (+inf score); a
 * NaN (inf) v element makes that column NaN (+inf) in every row selecting
 * the key, a NaN v under an inf k too (0 * NaN where the score is -inf). */
static void check_places(const rcase *c, const tu_nf_place *pl, int n, const uint8_t *bits,
                         const int64_t *qb, const int64_t *kb, int64_t nq, int64_t nk,
                         const float *q, const float *o, const float *l)
{
  int64_t D = c->D, grp = c->Hq / c->Hkv, h, t, d;
  int i;
  for (i = 0; i < n; i++) {
    const tu_nf_place *p = &pl[i];
    int kind = c->nonfinite - 1;
    if (p->t == 'q') {
      int64_t row = (p->b * c->Hq + p->h) * c->Sq + p->s;
      for (d = 0; d < D; d++)
        ck_assert_msg(isnan(o[row * D + d]), "case %s: %s row %lld column %lld is %g, not NaN",
                      c->name, tu_nf_name(kind), (long long)row, (long long)d, o[row * D + d]);
      ck_assert_msg(isnan(l[row]), "case %s: lse of poisoned row %lld is %g", c->name,
                    (long long)row, l[row]);
      continue;
    }
    for (h = p->h * grp; h < (p->h + 1) * grp; h++) {
      const uint8_t *plane =
          bits + ((c->mb == 1 ? 0 : p->b) * c->mh + (c->mh == 1 ? 0 : h)) * nq * nk;
      uint8_t *tok = tu_materialise(plane, nq, nk, qb, kb);
      for (t = 0; t < c->Sq; t++) {
        int64_t row = (p->b * c->Hq + h) * c->Sq + t;
        if (!tok[t * c->Sk + p->s])
          continue;
        if (kind == TU_NF_NAN_K || (kind == TU_NF_INF_K && q[row * D + p->d] > 0)) {
          for (d = 0; d < D; d++)
            ck_assert_msg(isnan(o[row * D + d]), "case %s: %s: row %lld is not NaN", c->name,
                          tu_nf_name(kind), (long long)row);
          ck_assert(isnan(l[row]));
        } else if (kind == TU_NF_INF_K_NAN_V) {
          ck_assert_msg(isnan(o[row * D + p->d2]), "case %s: %s: row %lld column %lld is %g",
                        c->name, tu_nf_name(kind), (long long)row, (long long)p->d2,
                        o[row * D + p->d2]);
        } else if (kind == TU_NF_NAN_V) {
          ck_assert_msg(isnan(o[row * D + p->d]), "case %s: nan-v: row %lld column %lld is %g",
                        c->name, (long long)row, (long long)p->d, o[row * D + p->d]);
          ck_assert(isfinite(l[row]));
        } else if (kind == TU_NF_INF_V) {
          ck_assert_msg(isinf(o[row * D + p->d]) && o[row * D + p->d] > 0,
                        "case %s: inf-v: row %lld column %lld is %g", c->name, (long long)row,
                        (long long)p->d, o[row * D + p->d]);
          ck_assert(isfinite(l[row]));
        }
      }
      free(tok);
    }
  }
}

static void run_case(const rcase *c, uint64_t seed)
{
  tu_rng r = {seed};
  int64_t *qb, *kb, *qs = NULL, *ks = NULL, nq, nk, i, j, b, h, u, d;
  int64_t nqk = c->B * c->Hq * c->Sq * c->D, nkv = c->B * c->Hkv * c->Sk * c->D;
  int64_t nmask, nlse = c->B * c->Hq * c->Sq;
  float *q, *k, *v;
  double *want, *want_lse;
  uint8_t *bits;
  tsr_geom *g;
  tsr_mask *m;
  tsr_array aq, ak, av, out, lse;
  tsr_error err = {0};
  double scale = c->scale ? c->scale : 1.0 / sqrt((double)c->D), e_out, e_lse;
  int off = c->four ? 0 : 1, nplaced = 0;
  tu_nf_place places[3];

  fprintf(stderr, "case %s: seed %llu\n", c->name, (unsigned long long)seed);
  if (c->bq) {
    nq = tu_uniform_bounds(c->Sq, c->bq, &qb);
    nk = tu_uniform_bounds(c->Sk, c->bk, &kb);
    ck_assert_int_eq(tsr_geom_uniform(c->Sq, c->Sk, c->bq, c->bk, &g, &err), TSR_OK);
  } else {
    nq = variable_bounds(&r, c->Sq, 40, &qb, &qs);
    nk = variable_bounds(&r, c->Sk, 40, &kb, &ks);
    ck_assert_int_eq(tsr_geom_variable(qs, nq, ks, nk, &g, &err), TSR_OK);
  }
  nmask = c->mb * c->mh * nq * nk;
  bits = tu_rand_bits(&r, (size_t)nmask, c->density);
  if (c->empty_rows)
    for (i = 0; i < nmask / nk; i++)
      if (tu_uniform(&r) < 0.3)
        memset(bits + i * nk, 0, (size_t)nk);
  if (c->empty_head)
    memset(bits, 0, (size_t)(nq * nk));
  if (c->nonfinite) /* something to poison */
    bits[tu_range(&r, 0, nmask - 1)] = 1;
  ck_assert_int_eq(tsr_mask_from_bytes(c->mb, c->mh, nq, nk, bits, &m, &err), TSR_OK);

  q = tu_rand_f32(&r, (size_t)nqk, 1.0);
  k = tu_rand_f32(&r, (size_t)nkv, 1.0);
  v = tu_rand_f32(&r, (size_t)nkv, 1.0);
  /* Poison keys that no query of their KV head selects. */
  for (b = 0; b < c->B; b++)
    for (h = 0; h < c->Hkv; h++)
      for (j = 0; j < nk; j++) {
        int used = 0;
        int64_t hq;
        for (hq = h * (c->Hq / c->Hkv); hq < (h + 1) * (c->Hq / c->Hkv); hq++)
          for (i = 0; i < nq; i++)
            used |= bits[(((c->mb == 1 ? 0 : b) * c->mh + (c->mh == 1 ? 0 : hq)) * nq + i) * nk + j];
        if (!used)
          for (u = kb[j]; u < kb[j + 1]; u++)
            for (d = 0; d < c->D; d++) {
              k[((b * c->Hkv + h) * c->Sk + u) * c->D + d] = NAN;
              v[((b * c->Hkv + h) * c->Sk + u) * c->D + d] = NAN;
            }
      }
  if (c->nonfinite) {
    nplaced = tu_inject_nonfinite(&r, c->nonfinite - 1, (int)tu_range(&r, 1, 3), c->B, c->Hq,
                                  c->Hkv, c->Sq, c->Sk, c->D, q, k, v, bits, c->mb, c->mh, nq, nk,
                                  qb, kb, places);
    fprintf(stderr, "case %s: %d place(s) of %s\n", c->name, nplaced,
            tu_nf_name(c->nonfinite - 1));
  }
  memset(&aq, 0, sizeof aq);
  aq.ndim = ak.ndim = av.ndim = c->four ? 4 : 3;
  {
    int64_t sq[4] = {c->B, c->Hq, c->Sq, c->D}, skv[4] = {c->B, c->Hkv, c->Sk, c->D};
    ck_assert(c->four || c->B == 1);
    for (i = 0; i < aq.ndim; i++) {
      aq.shape[i] = sq[i + off];
      ak.shape[i] = av.shape[i] = skv[i + off];
    }
  }
  if (c->f16) {
    /* Half inputs: the naive computation sees the same rounded values. */
    uint16_t *hq = malloc((size_t)nqk * 2), *hk = malloc((size_t)nkv * 2),
             *hv = malloc((size_t)nkv * 2);
    for (i = 0; i < nqk; i++) {
      hq[i] = tsr_float_to_half(q[i]);
      q[i] = tsr_half_to_float(hq[i]);
    }
    for (i = 0; i < nkv; i++) {
      hk[i] = tsr_float_to_half(k[i]);
      k[i] = tsr_half_to_float(hk[i]);
      hv[i] = tsr_float_to_half(v[i]);
      v[i] = tsr_half_to_float(hv[i]);
    }
    aq.dtype = ak.dtype = av.dtype = TSR_DT_F16;
    aq.data = hq, ak.data = hk, av.data = hv;
  } else {
    aq.dtype = ak.dtype = av.dtype = TSR_DT_F32;
    aq.data = q, ak.data = k, av.data = v;
  }
  ck_assert_int_eq(tsr_ref_attention(g, m, &aq, &ak, &av, c->scale, &out, &lse, &err), TSR_OK);
  ck_assert_int_eq(out.dtype, TSR_DT_F32);
  ck_assert_int_eq(out.ndim, 4 - off);
  ck_assert_int_eq(lse.ndim, 3 - off);
  ck_assert_int_eq(tsr_array_numel(&out), nqk);
  ck_assert_int_eq(tsr_array_numel(&lse), nlse);

  want = malloc((size_t)nqk * sizeof *want);
  want_lse = malloc((size_t)nlse * sizeof *want_lse);
  tu_naive_attention(c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D, q, k, v, bits, c->mb, c->mh, nq, nk,
                     qb, kb, scale, want, want_lse);
  e_out = tu_rel_err(out.data, want, (size_t)nqk);
  e_lse = tu_rel_err(lse.data, want_lse, (size_t)nlse);
  ck_assert_msg(e_out <= 1e-6, "case %s: out rel err %g", c->name, e_out);
  ck_assert_msg(e_lse <= 1e-6, "case %s: lse rel err %g", c->name, e_lse);
  /* empty rows: exactly zero output and -inf lse */
  for (i = 0; i < nlse; i++)
    if (isinf(want_lse[i]))
      for (d = 0; d < c->D; d++)
        ck_assert(((float *)out.data)[i * c->D + d] == 0.0f);
  if (c->empty_head)
    ck_assert(isinf(((float *)lse.data)[0]) && ((float *)lse.data)[0] < 0);
  if (c->nonfinite) {
    ck_assert_msg(nplaced > 0, "case %s: nothing selected to poison", c->name);
    ck_assert_msg(tu_count_nonfinite(want, (size_t)nqk) > 0, "case %s: no non-finite output",
                  c->name);
    check_places(c, places, nplaced, bits, qb, kb, nq, nk, q, out.data, lse.data);
  }

  if (c->f16) {
    free(aq.data);
    free(ak.data);
    free(av.data);
  }
  tsr_npy_free(&out);
  tsr_npy_free(&lse);
  free(q), free(k), free(v), free(want), free(want_lse), free(bits), free(qb), free(kb);
  free(qs), free(ks);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}

static const rcase cases[] = {
    /* name           B  Hq Hkv  Sq   Sk   D   bq  bk mb mh dens er eh f16 scale four nf */
    {"square",        1, 2, 2, 256, 256, 32, 64, 64, 1, 2, 0.4, 0, 0, 0, 0, 0, 0},
    {"ragged",        1, 2, 2, 300, 300, 16, 64, 64, 1, 2, 0.5, 0, 0, 0, 0, 0, 0},
    {"rectangular",   1, 2, 2, 250, 250, 24, 48, 80, 1, 2, 0.5, 0, 0, 0, 0, 0, 0},
    {"variable",      1, 3, 3, 213, 187, 16, 0, 0, 1, 3, 0.4, 0, 0, 0, 0, 0, 0},
    {"empty_rows",    1, 2, 2, 200, 200, 16, 32, 32, 1, 2, 0.5, 1, 0, 0, 0, 0, 0},
    {"empty_head",    1, 3, 3, 128, 128, 16, 32, 32, 1, 3, 0.5, 0, 1, 0, 0, 0, 0},
    {"cross_lengths", 1, 2, 2, 100, 333, 16, 32, 48, 1, 2, 0.5, 0, 0, 0, 0, 0, 0},
    {"gqa_6_2",       1, 6, 2, 160, 200, 16, 32, 32, 1, 6, 0.4, 1, 0, 0, 0, 0, 0},
    {"gqa_4_1",       1, 4, 1, 96, 96, 8, 16, 16, 1, 4, 0.5, 0, 0, 0, 0, 0, 0},
    {"batch_4d",      2, 2, 1, 130, 90, 16, 32, 16, 2, 2, 0.5, 1, 0, 0, 0, 1, 0},
    {"batch_bcast",   3, 3, 3, 64, 64, 8, 16, 16, 1, 1, 0.5, 0, 0, 0, 0, 1, 0},
    {"f16",           1, 2, 2, 200, 150, 64, 64, 32, 1, 2, 0.5, 0, 0, 1, 0, 0, 0},
    {"scale",         1, 2, 2, 100, 100, 16, 25, 25, 1, 2, 0.5, 0, 0, 0, 0.37, 0, 0},
    {"negative_scale",1, 1, 1, 50, 70, 4, 7, 9, 1, 1, 0.6, 0, 0, 0, -2.0, 0, 0},
    {"tiny_blocks",   1, 2, 1, 37, 41, 1, 1, 1, 1, 2, 0.3, 1, 0, 0, 0, 0, 0},
    {"dense",         1, 1, 1, 65, 65, 32, 128, 128, 1, 1, 1.0, 0, 0, 0, 0, 0, 0},
    {"variable_gqa_4d", 2, 4, 2, 150, 170, 8, 0, 0, 2, 4, 0.3, 1, 0, 1, 0, 1, 0},
};

START_TEST(test_cases)
{
  run_case(&cases[_i], tu_seed(cases[_i].name, 1000) + (uint64_t)_i);
}
END_TEST

/* A random small case (lengths 1-150, any blocks, GQA, batches, f16). */
static void random_case(tu_rng *r, rcase *c)
{
  int64_t grp = tu_range(r, 1, 3);
  memset(c, 0, sizeof *c);
  c->name = "random";
  c->four = (int)tu_range(r, 0, 1);
  c->B = c->four ? tu_range(r, 1, 2) : 1;
  c->Hkv = tu_range(r, 1, 2);
  c->Hq = c->Hkv * grp;
  c->Sq = tu_range(r, 1, 150);
  c->Sk = tu_range(r, 1, 150);
  c->D = tu_range(r, 1, 40);
  if (tu_range(r, 0, 3)) {
    c->bq = tu_range(r, 1, 64);
    c->bk = tu_range(r, 1, 64);
  }
  c->mb = tu_range(r, 0, 1) ? c->B : 1;
  c->mh = tu_range(r, 0, 1) ? c->Hq : 1;
  c->density = tu_uniform(r);
  c->empty_rows = (int)tu_range(r, 0, 1);
  c->f16 = (int)tu_range(r, 0, 1);
  c->scale = tu_range(r, 0, 1) ? 0 : tu_uniform(r);
}

START_TEST(test_random_cases)
{
  tu_rng r = {tu_seed("random_cases", 2000) + (uint64_t)_i};
  rcase c;
  random_case(&r, &c);
  run_case(&c, tu_next(&r));
}
END_TEST

/* NaN and inf in q, k or v, each kind over random cases (density at least
 * 0.2, so that something is selected to poison). */
START_TEST(test_nonfinite)
{
  tu_rng r = {tu_seed("nonfinite", 3000) + (uint64_t)_i};
  rcase c;
  random_case(&r, &c);
  c.name = tu_nf_name(_i % TU_NF_KINDS);
  c.nonfinite = 1 + _i % TU_NF_KINDS;
  if (c.density < 0.2)
    c.density += 0.2;
  run_case(&c, tu_next(&r));
}
END_TEST

/* A fixture for the rejection tests: a valid 1 x 2 x 64 x 16 problem. */
static tsr_geom *G;
static tsr_mask *M;
static tsr_array Q, K, V;
static float *buf;

static void rej_setup(void)
{
  tu_rng r = {77};
  uint8_t bits[2 * 4 * 4];
  tsr_error err = {0};
  memset(bits, 1, sizeof bits);
  ck_assert_int_eq(tsr_geom_uniform(64, 64, 16, 16, &G, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 2, 4, 4, bits, &M, &err), TSR_OK);
  buf = tu_rand_f32(&r, 3 * 2 * 64 * 16, 1.0);
  Q = (tsr_array){TSR_DT_F32, 3, {2, 64, 16}, buf};
  K = (tsr_array){TSR_DT_F32, 3, {2, 64, 16}, buf + 2048};
  V = (tsr_array){TSR_DT_F32, 3, {2, 64, 16}, buf + 4096};
}

static void rej_teardown(void)
{
  tsr_geom_destroy(G);
  tsr_mask_destroy(M);
  free(buf);
}

static void expect_fail(double scale, tsr_status st, const char *needle)
{
  tsr_array out, lse;
  tsr_error err = {0};
  memset(&out, 0x33, sizeof out);
  memset(&lse, 0x33, sizeof lse);
  ck_assert_int_eq(tsr_ref_attention(G, M, &Q, &K, &V, scale, &out, &lse, &err), st);
  ck_assert_msg(strstr(err.text, needle), "lacks '%s': %s", needle, err.text);
  ck_assert_ptr_null(out.data);
  ck_assert_ptr_null(lse.data);
}

START_TEST(test_rejects)
{
  tsr_array out;
  tsr_error err = {0};
  /* the fixture itself is valid, with lse optional */
  ck_assert_int_eq(tsr_ref_attention(G, M, &Q, &K, &V, 0, &out, NULL, &err), TSR_OK);
  tsr_npy_free(&out);
  expect_fail(NAN, TSR_ERR_INVALID, "scale nan is not finite");
  expect_fail(INFINITY, TSR_ERR_INVALID, "not finite");
  Q.dtype = TSR_DT_I32;
  expect_fail(0, TSR_ERR_DTYPE, "q: expected float32 or fp16, got int32");
  Q.dtype = TSR_DT_F32;
  V.dtype = TSR_DT_F64;
  expect_fail(0, TSR_ERR_DTYPE, "v: expected float32 or fp16, got float64");
  V.dtype = TSR_DT_F32;
  K.ndim = 2;
  expect_fail(0, TSR_ERR_SHAPE, "k: expected 3 or 4 dimensions");
  K.ndim = 3;
  K.shape[2] = 8, K.shape[1] = 128;
  expect_fail(0, TSR_ERR_SHAPE, "k: head dim 8, but q has 16");
  K.shape[2] = 16, K.shape[1] = 64;
  V.shape[1] = 32, V.shape[0] = 4;
  expect_fail(0, TSR_ERR_SHAPE, "v: heads 4, but k has 2");
  V.shape[0] = 2, V.shape[1] = 128;
  expect_fail(0, TSR_ERR_SHAPE, "v: length 128, but k has 64");
  V.shape[0] = 2, V.shape[1] = 64;
  /* 2 query heads over 3 kv heads */
  K.shape[0] = V.shape[0] = 3;
  K.shape[1] = V.shape[1] = 32;
  K.shape[2] = V.shape[2] = 16;
  expect_fail(0, TSR_ERR_SHAPE, "not a multiple");
  K.shape[0] = V.shape[0] = 2;
  K.shape[1] = V.shape[1] = 64;
  /* lengths that do not match the geometry */
  Q.shape[1] = 32;
  Q.shape[0] = 4;
  expect_fail(0, TSR_ERR_SHAPE, "q and k have 32 and 64 tokens");
  Q.shape[1] = 64;
  Q.shape[0] = 2;
  /* a mask with too few heads for the query heads */
  {
    tsr_mask *m3;
    uint8_t bits[3 * 16] = {0};
    ck_assert_int_eq(tsr_mask_from_bytes(1, 3, 4, 4, bits, &m3, &err), TSR_OK);
    tsr_mask_destroy(M);
    M = m3;
    expect_fail(0, TSR_ERR_SHAPE, "3 heads, expected 1 or 2");
  }
}
END_TEST

START_TEST(test_max_rel_error)
{
  float a[4] = {1, 2, -INFINITY, 4}, b[4] = {1, 2.5f, -INFINITY, 4};
  double c[4] = {1, 2, -INFINITY, 4};
  tsr_array A = {TSR_DT_F32, 1, {4}, a}, B = {TSR_DT_F32, 1, {4}, b}, C = {TSR_DT_F64, 1, {4}, c};
  ck_assert(tsr_ref_max_rel_error(&A, &C) == 0);
  ck_assert(fabs(tsr_ref_max_rel_error(&B, &C) - 0.5 / 4) < 1e-12);
  a[2] = 0;
  ck_assert(isinf(tsr_ref_max_rel_error(&A, &C)));
  a[2] = NAN;
  ck_assert(isinf(tsr_ref_max_rel_error(&A, &C)));
  /* NaN with NaN and an infinity with the same one agree (non-finite inputs) */
  c[2] = NAN;
  ck_assert(tsr_ref_max_rel_error(&A, &C) == 0);
  c[1] = INFINITY;
  ck_assert(isinf(tsr_ref_max_rel_error(&A, &C)));
  a[1] = INFINITY;
  ck_assert(tsr_ref_max_rel_error(&A, &C) == 0);
  a[1] = -INFINITY;
  ck_assert(isinf(tsr_ref_max_rel_error(&A, &C)));
  a[1] = 2, c[1] = 2, c[2] = -INFINITY;
  a[2] = -INFINITY;
  A.shape[0] = 3;
  ck_assert(isinf(tsr_ref_max_rel_error(&A, &C)));
}
END_TEST

int main(void)
{
  Suite *s = suite_create("ref");
  TCase *tc = tcase_create("ref"), *rj = tcase_create("rejects");
  tcase_add_loop_test(tc, test_cases, 0, (int)(sizeof cases / sizeof cases[0]));
  tcase_add_loop_test(tc, test_random_cases, 0, 40);
  tcase_add_loop_test(tc, test_nonfinite, 0, 6 * TU_NF_KINDS);
  tcase_add_test(tc, test_max_rel_error);
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(rj, rej_setup, rej_teardown);
  tcase_add_test(rj, test_rejects);
  suite_add_tcase(s, tc);
  suite_add_tcase(s, rj);
  return tu_run_suite(s);
}

/*
 * check_features.c: mask features (tsr_features_compute) against a brute-force float64
 * reference, over uniform and variable geometries, and the inputs it refuses.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"
#include "util.h"

static uint64_t base_seed;
static char tmpdir[256];

static void setup(void)
{
  tu_tmpdir(tmpdir, sizeof tmpdir);
}

static void teardown(void)
{
  tu_rmtree(tmpdir);
}

/* ---- Features against a brute-force reference -------------------------- */

typedef struct {
  double density, block_density, row_cv, empty_rows, fill[4];
  int64_t touched[4];
} ref_features;

/* Block starts from sizes. */
static void starts(const int64_t *sz, int64_t n, int64_t *s)
{
  int64_t i;
  s[0] = 0;
  for (i = 0; i < n; i++)
    s[i + 1] = s[i] + sz[i];
}

/* Tile (r, u) of tm x tn is touched when a selected block overlaps it:
 * checked block pair by block pair, in float64, sharing nothing with
 * features.c. */
static void reference(const uint8_t *bits, int64_t planes, const int64_t *qsz, int64_t nq,
                      const int64_t *ksz, int64_t nk, ref_features *r)
{
  int64_t *qs = malloc(sizeof *qs * (size_t)(nq + 1)), *ks = malloc(sizeof *ks * (size_t)(nk + 1));
  int64_t p, i, j, sq, sk, sel_blocks = 0, empty = 0;
  double sel = 0, rs = 0, rq = 0;
  int t;
  starts(qsz, nq, qs);
  starts(ksz, nk, ks);
  sq = qs[nq];
  sk = ks[nk];
  memset(r, 0, sizeof *r);
  for (p = 0; p < planes; p++)
    for (i = 0; i < nq; i++) {
      double tok = 0;
      for (j = 0; j < nk; j++)
        if (bits[(p * nq + i) * nk + j]) {
          tok += (double)ksz[j];
          sel_blocks++;
        }
      sel += tok * (double)qsz[i];
      rs += tok;
      rq += tok * tok;
      empty += tok == 0;
    }
  for (t = 0; t < 4; t++) {
    int tm = t < 2 ? 64 : 128, tn = t % 2 ? 128 : 64;
    int64_t nqt = (sq + tm - 1) / tm, nkt = (sk + tn - 1) / tn, a, b;
    double area = 0;
    for (p = 0; p < planes; p++)
      for (a = 0; a < nqt; a++)
        for (b = 0; b < nkt; b++) {
          int hit = 0;
          for (i = 0; i < nq && !hit; i++) {
            if (qs[i + 1] <= a * tm || qs[i] >= (a + 1) * tm)
              continue;
            for (j = 0; j < nk && !hit; j++)
              if (bits[(p * nq + i) * nk + j] && ks[j + 1] > b * tn && ks[j] < (b + 1) * tn)
                hit = 1;
          }
          if (hit) {
            r->touched[t]++;
            area += (double)(((a + 1) * tm < sq ? (a + 1) * tm : sq) - a * tm) *
                    (double)(((b + 1) * tn < sk ? (b + 1) * tn : sk) - b * tn);
          }
        }
    r->fill[t] = area > 0 ? sel / area : 1;
  }
  {
    double n = (double)(planes * nq), mean = rs / n;
    r->density = sel / ((double)planes * (double)sq * (double)sk);
    r->block_density = (double)sel_blocks / ((double)planes * (double)nq * (double)nk);
    r->row_cv = mean > 0 ? sqrt(fmax(rq / n - mean * mean, 0)) / mean : 0;
    r->empty_rows = (double)empty / n;
  }
  free(qs);
  free(ks);
}

static void check_one(tu_rng *rng, const int64_t *qsz, int64_t nq, const int64_t *ksz, int64_t nk,
                      int uniform_b, int64_t mask_heads, int64_t heads_q, double p_sel)
{
  int64_t sq = 0, sk = 0, i, n = mask_heads * nq * nk;
  uint8_t *bits = malloc((size_t)n);
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_problem p;
  tsr_features f;
  ref_features r;
  tsr_error err = {0};
  int t;
  for (i = 0; i < nq; i++)
    sq += qsz[i];
  for (i = 0; i < nk; i++)
    sk += ksz[i];
  /* Rows of varying length: each row draws its own selection probability. */
  for (i = 0; i < mask_heads * nq; i++) {
    double pr = p_sel * 2 * tu_uniform(rng);
    int64_t j;
    for (j = 0; j < nk; j++)
      bits[i * nk + j] = tu_uniform(rng) < pr;
  }
  if (uniform_b)
    ck_assert_int_eq(tsr_geom_uniform(sq, sk, qsz[0], ksz[0], &g, &err), TSR_OK);
  else
    ck_assert_int_eq(tsr_geom_variable(qsz, nq, ksz, nk, &g, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_from_bytes(1, mask_heads, nq, nk, bits, &m, &err), TSR_OK);
  memset(&p, 0, sizeof p);
  p.batch = 1;
  p.heads_q = heads_q;
  p.heads_kv = heads_q;
  p.seq_q = sq;
  p.seq_k = sk;
  p.head_dim = 128;
  p.dtype = TSR_DT_BF16;
  p.geom = g;
  memset(&f, 0xa5, sizeof f); /* poison */
  ck_assert_msg(tsr_features_compute(&p, m, 132, &f, &err) == TSR_OK, "%s", err.text);
  reference(bits, mask_heads, qsz, nq, ksz, nk, &r);
  ck_assert_double_eq_tol(f.density, r.density, 1e-12);
  ck_assert_double_eq_tol(f.block_density, r.block_density, 1e-12);
  ck_assert_double_eq_tol(f.row_cv, r.row_cv, 1e-9);
  ck_assert_double_eq_tol(f.empty_rows, r.empty_rows, 1e-12);
  for (t = 0; t < 4; t++) {
    ck_assert_int_eq(f.touched[t], r.touched[t]);
    ck_assert_double_eq_tol(f.fill[t], r.fill[t], 1e-12);
  }
  ck_assert_int_eq(f.seq_q, sq);
  ck_assert_int_eq(f.seq_k, sk);
  ck_assert_int_eq(f.bq, uniform_b ? qsz[0] : 0);
  ck_assert_int_eq(f.bk, uniform_b ? ksz[0] : 0);
  ck_assert_double_eq_tol(f.rows_per_sm, (double)heads_q * (double)((sq + 127) / 128) / 132.0,
                          1e-12);
  ck_assert_int_eq(f.num_sms, 132);
  /* The same mask as packed bits: the same features, bit for bit. */
  {
    int64_t nb = (nk + 7) / 8, j;
    uint8_t *packed = calloc((size_t)(mask_heads * nq * nb), 1);
    tsr_mask *pm = NULL;
    tsr_features fp;
    for (i = 0; i < mask_heads * nq; i++)
      for (j = 0; j < nk; j++)
        packed[i * nb + j / 8] |= (uint8_t)(bits[i * nk + j] << (j % 8));
    ck_assert_int_eq(tsr_mask_from_packed(1, mask_heads, nq, nk, packed, nb, &pm, &err), TSR_OK);
    memset(&fp, 0x5a, sizeof fp); /* poison, unlike f's */
    ck_assert_msg(tsr_features_compute(&p, pm, 132, &fp, &err) == TSR_OK, "%s", err.text);
    ck_assert(!memcmp(&f, &fp, sizeof f));
    tsr_mask_destroy(pm);
    free(packed);
  }
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  free(bits);
}

/* Uniform sizes with a ragged last block. */
static int64_t uniform_sizes(int64_t seq, int64_t b, int64_t *sz)
{
  int64_t n = 0;
  while (seq > 0) {
    sz[n++] = seq < b ? seq : b;
    seq -= b;
  }
  return n;
}

START_TEST(test_features_reference)
{
  tu_rng rng = {base_seed + 11};
  static const int64_t blocks[][2] = {{64, 64}, {128, 128}, {128, 64}, {64, 128}, {96, 96},
                                      {32, 48}, {384, 384}, {256, 128}};
  int64_t qsz[512], ksz[512];
  size_t c;
  for (c = 0; c < sizeof blocks / sizeof blocks[0]; c++) {
    int64_t sq = tu_range(&rng, 600, 2100), sk = tu_range(&rng, 600, 2100);
    int64_t nq = uniform_sizes(sq, blocks[c][0], qsz), nk = uniform_sizes(sk, blocks[c][1], ksz);
    check_one(&rng, qsz, nq, ksz, nk, 1, 3, 3, 0.05 + 0.3 * tu_uniform(&rng));
  }
  /* Variable geometry (clusters), broadcast over heads, and a dense mask. */
  for (c = 0; c < 4; c++) {
    int64_t nq = tu_range(&rng, 5, 30), nk = tu_range(&rng, 5, 30), i;
    for (i = 0; i < nq; i++)
      qsz[i] = tu_range(&rng, 1, 200);
    for (i = 0; i < nk; i++)
      ksz[i] = tu_range(&rng, 1, 200);
    check_one(&rng, qsz, nq, ksz, nk, 0, c % 2 ? 1 : 2, 2 + 2 * (c % 2), c == 3 ? 1.0 : 0.2);
  }
}
END_TEST

START_TEST(test_features_reject)
{
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_problem p;
  tsr_features f;
  tsr_error err = {0};
  uint8_t bits[4 * 5] = {1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1};
  ck_assert_int_eq(tsr_geom_uniform(256, 320, 64, 64, &g, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, 5, 4, bits, &m, &err), TSR_OK); /* 5x4, not 4x5 */
  memset(&p, 0, sizeof p);
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.seq_q = 256;
  p.seq_k = 320;
  p.head_dim = 64;
  p.dtype = TSR_DT_BF16;
  p.geom = g;
  ck_assert_int_ne(tsr_features_compute(&p, m, 132, &f, &err), TSR_OK);
  ck_assert_ptr_nonnull(strstr(err.text, "5"));
  tsr_mask_destroy(m);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, 4, 5, bits, &m, &err), TSR_OK);
  ck_assert_int_eq(tsr_features_compute(&p, m, -1, &f, &err), TSR_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.text, "-1 multiprocessors"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_features_compute(NULL, m, 0, &f, &err), TSR_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.text, "problem is NULL"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_features_compute(&p, m, 0, &f, &err), TSR_OK);
  ck_assert_int_eq(f.num_sms, 132);
  ck_assert_double_eq_tol(f.density, 12.0 / 20.0, 1e-12);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}
END_TEST


static Suite *features_suite(void)
{
  Suite *s = suite_create("features");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_features_reference);
  tcase_add_test(tc, test_features_reject);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  base_seed = tu_seed("check_features", 20261129u);
  return tu_run_suite(features_suite());
}

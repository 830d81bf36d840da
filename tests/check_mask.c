/*
 * check_mask.c: logical masks from .npy and memory, broadcast, density, and
 * validation against a geometry and the problem's batch and heads; packed-
 * bit masks (from memory with padded rows and stray bits, from .npy of
 * packbits rows) against the byte form they stand for.
 */
#include <check.h>
#include <dirent.h>

#include "tessera.h"
#include "util.h"

static char dir[256], path[512];

static void setup(void)
{
  tu_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/m.npy", dir);
}

static void teardown(void)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[600];
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  if (d)
    closedir(d);
  rmdir(dir);
}

START_TEST(test_load_random)
{
  tu_rng r = {tu_seed("mask_load_random", 21) + (uint64_t)_i};
  int four = _i % 2, u8 = (_i / 2) % 2;
  int64_t B = four ? tu_range(&r, 1, 3) : 1, H = tu_range(&r, 1, 4), nq = tu_range(&r, 1, 20),
          nk = tu_range(&r, 1, 20), n = B * H * nq * nk, i, ones = 0, b, h;
  int64_t shape[4] = {B, H, nq, nk};
  uint8_t *bits = tu_rand_bits(&r, (size_t)n, 0.3);
  uint8_t *raw = malloc((size_t)n);
  tsr_mask *m;
  tsr_error err = {0};
  for (i = 0; i < n; i++) {
    /* uint8 masks: any nonzero byte selects */
    raw[i] = u8 && bits[i] ? (uint8_t)tu_range(&r, 1, 255) : bits[i];
    ones += bits[i];
  }
  tu_write_npy(path, u8 ? "|u1" : "|b1", four ? 4 : 3, four ? shape : shape + 1, raw, (size_t)n);
  ck_assert_int_eq(tsr_mask_load(path, &m, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_batch(m), B);
  ck_assert_int_eq(tsr_mask_heads(m), H);
  ck_assert_int_eq(tsr_mask_nq(m), nq);
  ck_assert_int_eq(tsr_mask_nk(m), nk);
  ck_assert(memcmp(tsr_mask_bits(m), bits, (size_t)n) == 0);
  ck_assert(fabs(tsr_mask_density(m) - (double)ones / (double)n) < 1e-12);
  for (b = 0; b < B; b++)
    for (h = 0; h < H; h++)
      ck_assert_ptr_eq(tsr_mask_plane(m, b, h), tsr_mask_bits(m) + (b * H + h) * nq * nk);
  /* past the end: NULL, unless that extent is 1 and broadcasts */
  if (B > 1)
    ck_assert_ptr_null(tsr_mask_plane(m, B, 0));
  else
    ck_assert_ptr_eq(tsr_mask_plane(m, 3, 0), tsr_mask_bits(m));
  if (H > 1)
    ck_assert_ptr_null(tsr_mask_plane(m, 0, H));
  ck_assert_ptr_null(tsr_mask_plane(m, -1, 0));
  /* save and reload */
  ck_assert_int_eq(tsr_mask_save(path, m, &err), TSR_OK);
  tsr_mask_destroy(m);
  ck_assert_int_eq(tsr_mask_load(path, &m, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_batch(m), B);
  ck_assert_int_eq(tsr_mask_heads(m), H);
  ck_assert(memcmp(tsr_mask_bits(m), bits, (size_t)n) == 0);
  tsr_mask_destroy(m);
  free(bits);
  free(raw);
}
END_TEST

START_TEST(test_from_bytes_broadcast)
{
  tu_rng r = {tu_seed("mask_from_bytes", 22)};
  uint8_t raw[2 * 3 * 4];
  tsr_mask *m;
  tsr_error err = {0};
  int i;
  for (i = 0; i < 24; i++)
    raw[i] = (uint8_t)(tu_next(&r) & 0xff) & (uint8_t)(i % 3 ? 0xff : 0);
  /* batch 1, heads 2: any batch index broadcasts */
  ck_assert_int_eq(tsr_mask_from_bytes(1, 2, 3, 4, raw, &m, &err), TSR_OK);
  for (i = 0; i < 24; i++)
    ck_assert_int_eq(tsr_mask_bits(m)[i], raw[i] != 0);
  ck_assert_ptr_eq(tsr_mask_plane(m, 5, 1), tsr_mask_bits(m) + 12);
  ck_assert_ptr_null(tsr_mask_plane(m, 5, 2));
  tsr_mask_destroy(m);
  /* heads 1: any head broadcasts */
  ck_assert_int_eq(tsr_mask_from_bytes(2, 1, 3, 4, raw, &m, &err), TSR_OK);
  ck_assert_ptr_eq(tsr_mask_plane(m, 1, 7), tsr_mask_bits(m) + 12);
  tsr_mask_destroy(m);
  tsr_mask_destroy(NULL);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 0, 3, 4, raw, &m, &err), TSR_ERR_SHAPE);
  ck_assert_ptr_null(m);
  ck_assert_ptr_nonnull(strstr(err.text, "heads is 0"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, 3, 4, NULL, &m, &err), TSR_ERR_INVALID);
}
END_TEST

/* Writes a mask-like file and expects tsr_mask_load to refuse it. */
static void expect_reject(const char *descr, int ndim, const int64_t *shape, size_t nbytes,
                          tsr_status st, const char *needle)
{
  uint8_t data[4096];
  tsr_mask *m = (tsr_mask *)data;
  tsr_error err = {0};
  memset(data, 1, sizeof data);
  tu_write_npy(path, descr, ndim, shape, data, nbytes);
  ck_assert_int_eq(tsr_mask_load(path, &m, &err), st);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err.text, path), "no file name: %s", err.text);
  ck_assert_msg(strstr(err.text, needle), "lacks '%s': %s", needle, err.text);
}

START_TEST(test_load_rejects)
{
  int64_t s3[3] = {2, 4, 4}, s2[2] = {4, 4}, s5[5] = {1, 1, 2, 4, 4}, z[3] = {2, 0, 4};
  expect_reject("<f4", 3, s3, 128, TSR_ERR_DTYPE, "expected bool or uint8, got float32");
  expect_reject("<i4", 3, s3, 128, TSR_ERR_DTYPE, "got int32");
  expect_reject("|b1", 2, s2, 16, TSR_ERR_SHAPE, "expected 3 or 4 dimensions");
  expect_reject("|b1", 2, s2, 16, TSR_ERR_SHAPE, "got 2");
  expect_reject("|u1", 5, s5, 32, TSR_ERR_SHAPE, "got 5");
  expect_reject("|b1", 3, z, 0, TSR_ERR_SHAPE, "query blocks is 0");
  expect_reject("|b1", 3, s3, 31, TSR_ERR_FORMAT, "truncated");
}
END_TEST

/* Packed masks: bits past nk and padding bytes are random and ignored; the
 * bytes the mask expands to, its packed planes, density, broadcast and a
 * save/load round trip agree with the byte mask; a packbits .npy loads to
 * the same mask. */
START_TEST(test_packed_random)
{
  tu_rng r = {tu_seed("mask_packed_random", 5) + (uint64_t)_i};
  int64_t B = tu_range(&r, 1, 3), H = tu_range(&r, 1, 4), nq = tu_range(&r, 1, 30),
          nk = tu_range(&r, 1, 200), n = B * H * nq * nk, rows = B * H * nq;
  int64_t nb = (nk + 7) / 8, rb = nb + tu_range(&r, 0, 9), i, j, b, h, words = 0, ones = 0;
  uint8_t *bits = tu_rand_bits(&r, (size_t)n, tu_uniform(&r));
  uint8_t *packed = malloc((size_t)(rows * rb)), *tight = calloc((size_t)(rows * nb), 1);
  int64_t shape[4] = {B, H, nq, nb};
  tsr_mask *m = NULL, *l = NULL;
  tsr_error err = {0};
  for (i = 0; i < rows * rb; i++)
    packed[i] = (uint8_t)tu_range(&r, 0, 255);
  for (i = 0; i < rows; i++)
    for (j = 0; j < nk; j++) {
      uint8_t bit = (uint8_t)(1u << (j % 8));
      packed[i * rb + j / 8] = (uint8_t)(bits[i * nk + j] ? packed[i * rb + j / 8] | bit
                                                          : packed[i * rb + j / 8] & ~bit);
      if (bits[i * nk + j])
        tight[i * nb + j / 8] |= bit;
    }
  for (i = 0; i < n; i++)
    ones += bits[i];
  ck_assert_int_eq(tsr_mask_from_packed(B, H, nq, nk, packed, rb, &m, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_batch(m), B);
  ck_assert_int_eq(tsr_mask_nk(m), nk);
  /* density from the bits, before any expansion */
  ck_assert(fabs(tsr_mask_density(m) - (double)ones / (double)n) < 1e-12);
  for (b = 0; b < B; b++)
    for (h = 0; h < H; h++) {
      const uint64_t *pp = tsr_mask_packed_plane(m, b, h, &words);
      ck_assert_ptr_nonnull(pp);
      ck_assert_int_eq(words, (nk + 63) / 64);
      for (i = 0; i < nq; i++)
        for (j = 0; j < words * 64; j++)
          ck_assert_int_eq((int)(pp[i * words + j / 64] >> (j % 64) & 1),
                           j < nk ? bits[((b * H + h) * nq + i) * nk + j] : 0);
    }
  ck_assert_ptr_null(tsr_mask_packed_plane(m, B == 1 ? -1 : B, 0, &words));
  ck_assert(memcmp(tsr_mask_bits(m), bits, (size_t)n) == 0);
  ck_assert_ptr_eq(tsr_mask_plane(m, B - 1, H - 1), tsr_mask_bits(m) + (B * H - 1) * nq * nk);
  ck_assert_int_eq(tsr_mask_save(path, m, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_load(path, &l, &err), TSR_OK);
  ck_assert(memcmp(tsr_mask_bits(l), bits, (size_t)n) == 0);
  tsr_mask_destroy(l);
  /* A byte mask's rows, packed once when it is made, at every instruction
   * set this CPU has (the planner and the features read only those), equal
   * the packed mask's: from 0/1 bytes loaded from a file, and from any
   * nonzero bytes. */
  {
    static const char *const levels[] = {"none", "sse2", "avx2", "avx512", NULL};
    uint8_t *loud = malloc((size_t)n);
    int li;
    for (i = 0; i < n; i++)
      loud[i] = bits[i] ? (uint8_t)tu_range(&r, 1, 255) : 0;
    for (li = 0; li < 5; li++) {
      int from_file;
      if (levels[li])
        setenv("TESSERA_PLAN_SIMD", levels[li], 1);
      else
        unsetenv("TESSERA_PLAN_SIMD");
      for (from_file = 0; from_file < 2; from_file++) {
        if (from_file)
          ck_assert_int_eq(tsr_mask_load(path, &l, &err), TSR_OK);
        else
          ck_assert_int_eq(tsr_mask_from_bytes(B, H, nq, nk, loud, &l, &err), TSR_OK);
        for (b = 0; b < B; b++)
          for (h = 0; h < H; h++) {
            const uint64_t *want = tsr_mask_packed_plane(m, b, h, NULL);
            const uint64_t *got = tsr_mask_packed_plane(l, b, h, &words);
            ck_assert_ptr_nonnull(got);
            ck_assert_int_eq(words, (nk + 63) / 64);
            ck_assert_msg(memcmp(got, want, (size_t)(nq * words) * 8) == 0,
                          "packed rows of a byte mask (simd %s, %s) differ", levels[li] ? levels[li] : "best",
                          from_file ? "loaded" : "from bytes");
          }
        ck_assert(fabs(tsr_mask_density(l) - (double)ones / (double)n) < 1e-12);
        tsr_mask_destroy(l);
      }
    }
    unsetenv("TESSERA_PLAN_SIMD");
    free(loud);
  }
  tsr_mask_destroy(m);
  tu_write_npy(path, "|u1", 4, shape, tight, (size_t)(rows * nb));
  ck_assert_msg(tsr_mask_load_packed(path, nk, &m, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(tsr_mask_heads(m), H);
  ck_assert(memcmp(tsr_mask_bits(m), bits, (size_t)n) == 0);
  tsr_mask_destroy(m);
  tu_write_npy(path, "|u1", 3, shape + 1, tight, (size_t)(H * nq * nb));
  ck_assert_msg(tsr_mask_load_packed(path, nk, &m, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(tsr_mask_batch(m), 1);
  ck_assert(memcmp(tsr_mask_bits(m), bits, (size_t)(H * nq * nk)) == 0);
  tsr_mask_destroy(m);
  free(bits);
  free(packed);
  free(tight);
}
END_TEST

static void expect_packed_error(const char *p, int64_t nk, tsr_status want, const char *what)
{
  tsr_mask *m = (tsr_mask *)&m;
  tsr_error err = {0};
  ck_assert_int_eq(tsr_mask_load_packed(p, nk, &m, &err), want);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err.text, what) != NULL, "'%s' lacks '%s'", err.text, what);
}

START_TEST(test_packed_rejects)
{
  uint8_t raw[64] = {0xff, 0x0f};
  int64_t s3[3] = {1, 2, 2}, s2[2] = {2, 2};
  tsr_mask *m = (tsr_mask *)&m;
  tsr_error err = {0};
  ck_assert_int_eq(tsr_mask_from_packed(1, 1, 2, 12, raw, 2, NULL, &err), TSR_ERR_INVALID);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_from_packed(1, 1, 2, 12, NULL, 2, &m, &err), TSR_ERR_INVALID);
  ck_assert_ptr_null(m);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_from_packed(1, 1, 2, 17, raw, 2, &m, &err), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(err.text, "rows of 2 bytes cannot hold 17 key blocks"), "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_from_packed(1, 0, 2, 12, raw, 2, &m, &err), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(err.text, "heads is 0"), "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_load_packed(NULL, 4, &m, &err), TSR_ERR_INVALID);
  tu_write_npy(path, "|u1", 3, s3, raw, 4);
  expect_packed_error(path, 0, TSR_ERR_INVALID, "key blocks 0, must be positive");
  expect_packed_error(path, 17, TSR_ERR_SHAPE, "rows of 2 bytes, but 17 key blocks pack into 3");
  expect_packed_error(path, 8, TSR_ERR_SHAPE, "rows of 2 bytes, but 8 key blocks pack into 1");
  {
    uint8_t flags[4] = {1, 0, 1, 1}; /* a byte mask given as packed */
    tu_write_npy(path, "|b1", 3, s3, flags, 4);
    expect_packed_error(path, 12, TSR_ERR_DTYPE, "expected uint8, got bool");
  }
  tu_write_npy(path, "|u1", 2, s2, raw, 4);
  expect_packed_error(path, 12, TSR_ERR_SHAPE, "expected 3 or 4 dimensions");
  expect_packed_error("/nonexistent/m.npy", 12, TSR_ERR_IO, "nonexistent");
  /* a valid one, for contrast */
  tu_write_npy(path, "|u1", 3, s3, raw, 4);
  ck_assert_int_eq(tsr_mask_load_packed(path, 12, &m, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_bits(m)[0], 1);
  ck_assert_int_eq(tsr_mask_bits(m)[11], 1);
  ck_assert_int_eq(tsr_mask_bits(m)[12], 0); /* row 1 starts with byte raw[2] = 0 */
  tsr_mask_destroy(m);
}
END_TEST

START_TEST(test_check)
{
  tu_rng r = {tu_seed("mask_check", 23)};
  int64_t Sq = tu_range(&r, 65, 1000), Sk = tu_range(&r, 65, 1000);
  int64_t bq = tu_range(&r, 16, 64), bk = tu_range(&r, 16, 64);
  int64_t nq = (Sq + bq - 1) / bq, nk = (Sk + bk - 1) / bk;
  uint8_t *bits = tu_rand_bits(&r, (size_t)(2 * 6 * (nq + 1) * (nk + 1)), 0.5);
  tsr_geom *g, *gv;
  tsr_mask *m;
  tsr_error err = {0};
  int64_t sizes[3] = {10, 20, 30};
  ck_assert_int_eq(tsr_geom_uniform(Sq, Sk, bq, bk, &g, &err), TSR_OK);
  ck_assert_int_eq(tsr_geom_variable(sizes, 3, sizes, 2, &gv, &err), TSR_OK);

  ck_assert_int_eq(tsr_mask_from_bytes(2, 6, nq, nk, bits, &m, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_check(m, g, 2, 6, "m.npy", &err), TSR_OK);
  /* batch and heads must match the problem exactly unless 1 */
  ck_assert_int_eq(tsr_mask_check(m, g, 3, 6, "m.npy", &err), TSR_ERR_SHAPE);
  ck_assert_ptr_nonnull(strstr(err.text, "mask 'm.npy'"));
  ck_assert_ptr_nonnull(strstr(err.text, "batch 2, expected 1 or 3"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_check(m, g, 2, 12, "m.npy", &err), TSR_ERR_SHAPE);
  ck_assert_ptr_nonnull(strstr(err.text, "6 heads, expected 1 or 12"));
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_check(m, gv, 2, 6, NULL, &err), TSR_ERR_SHAPE);
  ck_assert_ptr_nonnull(strstr(err.text, "variable blocks"));
  tsr_mask_destroy(m);

  /* broadcast masks fit any batch / heads */
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, nq, nk, bits, &m, &err), TSR_OK);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_check(m, g, 7, 40, NULL, &err), TSR_OK);
  tsr_mask_destroy(m);

  /* one block too many or too few, either side: names both counts */
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, nq + 1, nk, bits, &m, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_check(m, g, 1, 1, "m.npy", &err), TSR_ERR_SHAPE);
  {
    char want[200];
    snprintf(want, sizeof want, "%lld query blocks, but query length %lld in blocks of %lld gives %lld",
             (long long)(nq + 1), (long long)Sq, (long long)bq, (long long)nq);
    ck_assert_msg(strstr(err.text, want), "%s", err.text);
  }
  tsr_mask_destroy(m);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, nq, nk - 1, bits, &m, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_check(m, g, 1, 1, "m.npy", &err), TSR_ERR_SHAPE);
  {
    char want[200];
    snprintf(want, sizeof want, "%lld key blocks, but key length %lld in blocks of %lld gives %lld",
             (long long)(nk - 1), (long long)Sk, (long long)bk, (long long)nk);
    ck_assert_msg(strstr(err.text, want), "%s", err.text);
  }
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  tsr_geom_destroy(gv);
  free(bits);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("mask");
  TCase *tc = tcase_create("mask");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, test_load_random, 0, 24);
  tcase_add_test(tc, test_from_bytes_broadcast);
  tcase_add_test(tc, test_load_rejects);
  tcase_add_test(tc, test_check);
  tcase_add_loop_test(tc, test_packed_random, 0, 24);
  tcase_add_test(tc, test_packed_rejects);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

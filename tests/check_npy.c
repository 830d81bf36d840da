/*
 * check_npy.c: .npy loading and saving, and half / bfloat16 conversions.
 *
 * Files are written by the test's own writer (tests/util.h), so the loader
 * is checked against bytes it did not produce; every malformed form the
 * loader must refuse is written here and refused with the file's name.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "tessera.h"
#include "util.h"

static char dir[256];
static char path[512];

static void setup(void)
{
  tu_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/a.npy", dir);
}

static void teardown(void)
{
  tu_rmtree(dir);
}

static int count_files(void)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d)))
    n += e->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

/* Loads `path` expecting failure with `st` and `needle` in the message; the
 * message must name the file and the output must stay zeroed. */
static void expect_reject(tsr_status st, const char *needle)
{
  tsr_array a;
  tsr_error err = {0};
  memset(&a, 0x5a, sizeof a);
  ck_assert_int_eq(tsr_npy_load(path, &a, &err), st);
  ck_assert_int_eq(err.status, st);
  ck_assert_msg(strstr(err.text, path), "message does not name the file: %s", err.text);
  ck_assert_msg(strstr(err.text, needle), "message lacks '%s': %s", needle, err.text);
  ck_assert_ptr_null(a.data);
  ck_assert_int_eq(a.ndim, 0);
}

static const struct {
  tsr_dtype dt;
  const char *descr;
  size_t size;
} kinds[] = {
    {TSR_DT_BOOL, "|b1", 1}, {TSR_DT_U8, "|u1", 1},  {TSR_DT_I32, "<i4", 4}, {TSR_DT_I64, "<i8", 8},
    {TSR_DT_F16, "<f2", 2},  {TSR_DT_F32, "<f4", 4}, {TSR_DT_F64, "<f8", 8},
};

START_TEST(test_load_independent_writer)
{
  tu_rng r = {tu_seed("load_independent_writer", 101) + (uint64_t)_i};
  int ndim = (int)tu_range(&r, 0, 4), i, ver = (int)tu_range(&r, 1, 3);
  int64_t shape[4], n = 1;
  size_t k = (size_t)tu_range(&r, 0, 6), nbytes;
  unsigned char *data;
  char h[512];
  tsr_array a;
  tsr_error err = {0};
  for (i = 0; i < ndim; i++) {
    shape[i] = tu_range(&r, 1, 7);
    n *= shape[i];
  }
  nbytes = (size_t)n * kinds[k].size;
  data = malloc(nbytes);
  for (i = 0; i < (int)nbytes; i++)
    data[i] = kinds[k].dt == TSR_DT_BOOL ? (unsigned char)(tu_next(&r) & 1)
                                         : (unsigned char)tu_next(&r);
  tu_npy_header(h, sizeof h, kinds[k].descr, ndim, shape);
  tu_write_npy_raw(path, NULL, ver, h, data, nbytes);
  ck_assert_int_eq(tsr_npy_load(path, &a, &err), TSR_OK);
  ck_assert_int_eq(a.dtype, kinds[k].dt);
  ck_assert_int_eq(a.ndim, ndim);
  for (i = 0; i < ndim; i++)
    ck_assert_int_eq(a.shape[i], shape[i]);
  ck_assert_int_eq(tsr_array_numel(&a), n);
  ck_assert_uint_eq(tsr_dtype_size(a.dtype), kinds[k].size);
  ck_assert(memcmp(a.data, data, nbytes) == 0);
  tsr_npy_free(&a);
  ck_assert_ptr_null(a.data);
  free(data);
}
END_TEST

START_TEST(test_save_roundtrip)
{
  tu_rng r = {tu_seed("save_roundtrip", 202) + (uint64_t)_i};
  size_t k = (size_t)_i % 7, nbytes, i;
  tsr_array a, b;
  tsr_error err = {0};
  int d;
  memset(&a, 0, sizeof a);
  a.dtype = kinds[k].dt;
  a.ndim = (int)tu_range(&r, 1, 5);
  for (d = 0; d < a.ndim; d++)
    a.shape[d] = tu_range(&r, 1, 6);
  nbytes = (size_t)tsr_array_numel(&a) * kinds[k].size;
  a.data = malloc(nbytes);
  for (i = 0; i < nbytes; i++)
    ((unsigned char *)a.data)[i] =
        a.dtype == TSR_DT_BOOL ? (unsigned char)(tu_next(&r) & 1) : (unsigned char)tu_next(&r);
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  ck_assert_int_eq(count_files(), 1); /* no temporary left beside it */
  {
    /* NumPy's layout: data starts on a 64-byte boundary. */
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(((size_t)st.st_size - nbytes) % 64, 0);
  }
  ck_assert_int_eq(tsr_npy_load(path, &b, &err), TSR_OK);
  ck_assert_int_eq(b.dtype, a.dtype);
  ck_assert_int_eq(b.ndim, a.ndim);
  for (d = 0; d < a.ndim; d++)
    ck_assert_int_eq(b.shape[d], a.shape[d]);
  ck_assert(memcmp(a.data, b.data, nbytes) == 0);
  tsr_npy_free(&a);
  tsr_npy_free(&b);
}
END_TEST

START_TEST(test_save_exact_header)
{
  float x[6] = {1, 2, 3, 4, 5, 6};
  tsr_array a = {TSR_DT_F32, 2, {2, 3}, x};
  tsr_error err = {0};
  char buf[200] = {0};
  FILE *f;
  const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  f = fopen(path, "rb");
  ck_assert_uint_eq(fread(buf, 1, 128, f), 128);
  fclose(f);
  ck_assert(memcmp(buf, "\x93NUMPY\x01\x00", 8) == 0);
  ck_assert_int_eq((unsigned char)buf[8] | (unsigned char)buf[9] << 8, 118);
  ck_assert(memcmp(buf + 10, want, strlen(want)) == 0);
  ck_assert_int_eq(buf[127], '\n');
  /* 1-D and 0-D shapes as Python writes them */
  a.ndim = 1;
  a.shape[0] = 6;
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  f = fopen(path, "rb");
  ck_assert_uint_eq(fread(buf, 1, 128, f), 128);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf + 10, "'shape': (6,), }"));
  a.ndim = 0;
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  f = fopen(path, "rb");
  ck_assert_uint_eq(fread(buf, 1, 128, f), 128);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf + 10, "'shape': (), }"));
}
END_TEST

START_TEST(test_reject_bad_magic)
{
  float x[4] = {1, 2, 3, 4};
  int64_t sh[1] = {4};
  char h[256];
  tu_npy_header(h, sizeof h, "<f4", 1, sh);
  tu_write_npy_raw(path, "\x93NUMPX", 1, h, x, sizeof x);
  expect_reject(TSR_ERR_FORMAT, "bad magic");
  {
    FILE *f = fopen(path, "wb");
    fputs("hello", f); /* shorter than the magic */
    fclose(f);
  }
  expect_reject(TSR_ERR_FORMAT, "bad magic");
}
END_TEST

START_TEST(test_reject_truncated)
{
  tu_rng r = {tu_seed("reject_truncated", 303)};
  float *x = tu_rand_f32(&r, 24, 1.0);
  int64_t sh[3] = {2, 3, 4};
  char h[256];
  tu_npy_header(h, sizeof h, "<f4", 3, sh);
  tu_write_npy_raw(path, NULL, 1, h, x, 24 * 4 - 1);
  expect_reject(TSR_ERR_FORMAT, "truncated");
  tu_write_npy_raw(path, NULL, 1, h, x, 0);
  expect_reject(TSR_ERR_FORMAT, "truncated");
  tu_write_npy_raw(path, NULL, 1, h, x, 24 * 4 - 4 * 5);
  expect_reject(TSR_ERR_FORMAT, "expected 96 data bytes");
  /* trailing garbage is refused too */
  {
    FILE *f;
    tu_write_npy_raw(path, NULL, 1, h, x, 24 * 4);
    f = fopen(path, "ab");
    fputc(7, f);
    fclose(f);
  }
  expect_reject(TSR_ERR_FORMAT, "trailing bytes");
  /* header cut short */
  {
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x01\x00\x76\x00{'descr'", 1, 18, f);
    fclose(f);
  }
  expect_reject(TSR_ERR_FORMAT, "truncated header");
  free(x);
}
END_TEST

START_TEST(test_reject_dtypes)
{
  static const char *bad[] = {"<c8", "<u2", "<i2", "|i1", "<f16", "<U4", "|O", "<M8[ns]"};
  int64_t sh[1] = {2};
  char h[256], data[64] = {1};
  size_t i;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tu_npy_header(h, sizeof h, bad[i], 1, sh);
    tu_write_npy_raw(path, NULL, 1, h, data, 16);
    expect_reject(TSR_ERR_DTYPE, "unsupported dtype");
  }
  tu_npy_header(h, sizeof h, ">f4", 1, sh);
  tu_write_npy_raw(path, NULL, 1, h, data, 8);
  expect_reject(TSR_ERR_DTYPE, "big-endian");
  /* a bool array whose bytes are not 0/1 is not a NumPy bool array */
  tu_npy_header(h, sizeof h, "|b1", 1, sh);
  data[0] = 1;
  data[1] = 7;
  tu_write_npy_raw(path, NULL, 1, h, data, 2);
  expect_reject(TSR_ERR_FORMAT, "byte value 7");
}
END_TEST

START_TEST(test_reject_fortran)
{
  float x[6] = {1, 2, 3, 4, 5, 6};
  const char *h = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }          \n";
  tu_write_npy_raw(path, NULL, 1, h, x, sizeof x);
  expect_reject(TSR_ERR_FORMAT, "fortran order");
}
END_TEST

START_TEST(test_reject_malformed_headers)
{
  static const struct {
    const char *header, *needle;
  } bad[] = {
      {"{'descr': '<f4', 'fortran_order': False}\n", "lacks 'shape'"},
      {"{'fortran_order': False, 'shape': (2,)}\n", "lacks 'descr'"},
      {"{'descr': '<f4', 'shape': (2,)}\n", "lacks 'fortran_order'"},
      {"['descr', '<f4']\n", "expected a dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }\n", "malformed shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }\n", "malformed shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': 2, }\n", "malformed shape"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }\n", "fortran_order"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n", "unexpected key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk\n", "trailing text"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }\n", "malformed header"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }\n",
       "more than 8 dimensions"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n",
       "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n",
       "too large"},
  };
  float x[2] = {1, 2};
  size_t i;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tu_write_npy_raw(path, NULL, 1, bad[i].header, x, sizeof x);
    expect_reject(TSR_ERR_FORMAT, bad[i].needle);
  }
}
END_TEST

START_TEST(test_reject_version_and_missing)
{
  float x[2] = {1, 2};
  int64_t sh[1] = {2};
  char h[256];
  tsr_array a;
  tsr_error err = {0};
  tu_npy_header(h, sizeof h, "<f4", 1, sh);
  tu_write_npy_raw(path, NULL, 4, h, x, sizeof x);
  expect_reject(TSR_ERR_FORMAT, "unsupported .npy version 4");
  unlink(path);
  expect_reject(TSR_ERR_IO, "cannot open");
  ck_assert_int_eq(tsr_npy_load(dir, &a, &err), TSR_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err.text, "not a regular file"));
}
END_TEST

START_TEST(test_save_failures_leave_nothing)
{
  uint16_t x[4] = {1, 2, 3, 4};
  tsr_array a = {TSR_DT_BF16, 1, {4}, x};
  tsr_error err = {0};
  char bad[600];
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_ERR_DTYPE);
  ck_assert_ptr_nonnull(strstr(err.text, "bf16"));
  ck_assert_int_eq(count_files(), 0);
  snprintf(bad, sizeof bad, "%s/no/such/dir/o.npy", dir);
  a.dtype = TSR_DT_F16;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_npy_save(bad, &a, &err), TSR_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err.text, bad));
  /* replacing an existing file is atomic: old content until the rename */
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  x[0] = 99;
  ck_assert_int_eq(tsr_npy_save(path, &a, &err), TSR_OK);
  ck_assert_int_eq(count_files(), 1);
  {
    tsr_array b;
    ck_assert_int_eq(tsr_npy_load(path, &b, &err), TSR_OK);
    ck_assert_int_eq(((uint16_t *)b.data)[0], 99);
    tsr_npy_free(&b);
  }
}
END_TEST

START_TEST(test_first_error_wins)
{
  tsr_error err = {0};
  tsr_array a;
  ck_assert_int_eq(tsr_npy_load("/nonexistent/first.npy", &a, &err), TSR_ERR_IO);
  ck_assert_int_eq(tsr_npy_load("/nonexistent/second.npy", &a, &err), TSR_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err.text, "first.npy"));
  ck_assert_ptr_null(strstr(err.text, "second.npy"));
  ck_assert_str_eq(tsr_strerror(TSR_ERR_DTYPE), "unsupported data type");
  ck_assert_str_eq(tsr_dtype_name(TSR_DT_F16), "fp16");
  /* One spelling a dtype: every name parses back, the old ones do not. */
  {
    static const tsr_dtype all[] = {TSR_DT_BOOL, TSR_DT_U8,   TSR_DT_I32, TSR_DT_I64,
                                    TSR_DT_F16,  TSR_DT_BF16, TSR_DT_F32, TSR_DT_F64};
    static const char *const gone[] = {"f16", "float16", "bfloat16", "f32", "", NULL};
    tsr_dtype d;
    size_t i;
    for (i = 0; i < sizeof all / sizeof *all; i++) {
      d = (tsr_dtype)-1;
      ck_assert_int_eq(tsr_dtype_parse(tsr_dtype_name(all[i]), &d), 0);
      ck_assert_int_eq(d, all[i]);
    }
    for (i = 0; i < sizeof gone / sizeof *gone; i++)
      ck_assert_int_eq(tsr_dtype_parse(gone[i], &d), -1);
  }
}
END_TEST

/* Value of a half by its definition, independent of the code under test. */
static double half_value(uint16_t h)
{
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

START_TEST(test_half_exhaustive)
{
  uint32_t h;
  for (h = 0; h < 65536; h++) {
    float f = tsr_half_to_float((uint16_t)h);
    int e = (h >> 10) & 31;
    if (e == 31 && (h & 1023)) {
      ck_assert(isnan(f));
      ck_assert(isnan(tsr_half_to_float(tsr_float_to_half(f))));
      continue;
    }
    if (e == 31) {
      ck_assert(isinf(f) && (f < 0) == ((h & 0x8000) != 0));
    } else {
      ck_assert_msg((double)f == half_value((uint16_t)h), "half %04x", h);
    }
    ck_assert_msg(tsr_float_to_half(f) == h, "roundtrip of %04x", h);
  }
}
END_TEST

START_TEST(test_half_rounding)
{
  tu_rng r = {tu_seed("half_rounding", 404)};
  int i;
  ck_assert_uint_eq(tsr_float_to_half(65504.0f), 0x7bff);
  ck_assert_uint_eq(tsr_float_to_half(65519.99f), 0x7bff);
  ck_assert_uint_eq(tsr_float_to_half(65520.0f), 0x7c00);
  ck_assert_uint_eq(tsr_float_to_half(1e10f), 0x7c00);
  ck_assert_uint_eq(tsr_float_to_half(-INFINITY), 0xfc00);
  ck_assert_uint_eq(tsr_float_to_half(-0.0f), 0x8000);
  ck_assert_uint_eq(tsr_float_to_half(ldexpf(1, -24)), 0x0001);
  ck_assert_uint_eq(tsr_float_to_half(ldexpf(1, -25)), 0x0000);          /* tie -> even 0 */
  ck_assert_uint_eq(tsr_float_to_half(ldexpf(3, -25)), 0x0002);          /* 1.5 ulp: tie -> 2 */
  ck_assert_uint_eq(tsr_float_to_half(ldexpf(5, -25)), 0x0002);          /* 2.5 ulp: tie -> 2 */
  ck_assert_uint_eq(tsr_float_to_half(ldexpf(3, -26)), 0x0001);          /* 0.75 ulp -> 1 */
  ck_assert_uint_eq(tsr_float_to_half(ldexpf(1, -25) * 1.0001f), 0x0001);
  ck_assert_uint_eq(tsr_float_to_half(1.0f + ldexpf(1, -11)), 0x3c00);   /* tie -> even */
  ck_assert_uint_eq(tsr_float_to_half(1.0f + ldexpf(3, -11)), 0x3c02);   /* tie -> even */
  ck_assert_uint_eq(tsr_float_to_half(1.0f / 3.0f), 0x3555);
  ck_assert_uint_eq(tsr_float_to_half(ldexpf(1023, -24) + ldexpf(1, -25)), 0x0400); /* sub->normal */
  ck_assert_uint_eq(tsr_float_to_half(NAN) & 0x7c00, 0x7c00);
  ck_assert_uint_ne(tsr_float_to_half(NAN) & 0x3ff, 0);
  /* Random floats: the result is a nearest half, ties to even. */
  for (i = 0; i < 200000; i++) {
    float f = (float)(tu_normal(&r) * ldexp(1, (int)tu_range(&r, -26, 16)));
    uint16_t h = tsr_float_to_half(f);
    double v = half_value(h), err = fabs((double)f - v);
    uint16_t lo = (uint16_t)(h - 1), hi = (uint16_t)(h + 1);
    if (((h >> 10) & 31) == 31) { /* overflow: f must be beyond the rounding midpoint */
      ck_assert(fabs(f) >= 65520.0);
      continue;
    }
    if ((h & 0x7fff) != 0)
      ck_assert_msg(err <= fabs((double)f - half_value(lo)), "f=%a h=%04x", (double)f, h);
    if (((hi >> 10) & 31) != 31)
      ck_assert_msg(err <= fabs((double)f - half_value(hi)), "f=%a h=%04x", (double)f, h);
    if ((h & 0x7fff) != 0 && err == fabs((double)f - half_value(lo)) && err > 0)
      ck_assert_msg((h & 1) == 0, "tie not to even: f=%a h=%04x", (double)f, h);
  }
}
END_TEST

START_TEST(test_bf16)
{
  tu_rng r = {tu_seed("bf16", 505)};
  uint32_t h;
  int i;
  for (h = 0; h < 65536; h++) {
    float f = tsr_bf16_to_float((uint16_t)h);
    uint32_t bits = h << 16;
    float want;
    memcpy(&want, &bits, 4);
    if (isnan(want)) {
      ck_assert(isnan(f));
      ck_assert(isnan(tsr_bf16_to_float(tsr_float_to_bf16(f))));
      continue;
    }
    ck_assert(memcmp(&f, &want, 4) == 0);
    ck_assert_uint_eq(tsr_float_to_bf16(f), h);
  }
  ck_assert_uint_eq(tsr_float_to_bf16(3.4028235e38f), 0x7f80); /* FLT_MAX rounds up to inf */
  ck_assert_uint_eq(tsr_float_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80); /* tie -> even */
  ck_assert_uint_eq(tsr_float_to_bf16(1.0f + ldexpf(3, -8)), 0x3f82);
  ck_assert_uint_eq(tsr_float_to_bf16(-INFINITY), 0xff80);
  ck_assert(isnan(tsr_bf16_to_float(tsr_float_to_bf16(NAN))));
  {
    /* a NaN whose payload sits only in the low bits must stay a NaN */
    uint32_t nb = 0x7f800001;
    float n;
    memcpy(&n, &nb, 4);
    ck_assert(isnan(tsr_bf16_to_float(tsr_float_to_bf16(n))));
  }
  for (i = 0; i < 200000; i++) {
    float f = (float)(tu_normal(&r) * ldexp(1, (int)tu_range(&r, -100, 100)));
    uint16_t b = tsr_float_to_bf16(f);
    double v = tsr_bf16_to_float(b), e = fabs((double)f - v);
    double lo = tsr_bf16_to_float((uint16_t)(b - 1)), hi = tsr_bf16_to_float((uint16_t)(b + 1));
    if ((b & 0x7fff) != 0)
      ck_assert(e <= fabs((double)f - lo));
    ck_assert(e <= fabs((double)f - hi));
  }
}
END_TEST

/* A random float32 [2..4, 1..9, 1..9] array. */
static void rand_array(tu_rng *r, tsr_array *a)
{
  memset(a, 0, sizeof *a);
  a->dtype = TSR_DT_F32;
  a->ndim = 3;
  a->shape[0] = tu_range(r, 2, 4);
  a->shape[1] = tu_range(r, 1, 9);
  a->shape[2] = tu_range(r, 1, 9);
  a->data = tu_rand_f32(r, (size_t)tsr_array_numel(a), 1.0);
}

static void expect_loads(const char *p, const tsr_array *a)
{
  tsr_array b;
  tsr_error err = {0};
  ck_assert_msg(tsr_npy_load(p, &b, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(b.ndim, 3);
  ck_assert_int_eq(tsr_array_numel(&b), tsr_array_numel(a));
  ck_assert(memcmp(b.data, a->data, (size_t)tsr_array_numel(a) * 4) == 0);
  tsr_npy_free(&b);
}

static mode_t lmode(const char *p)
{
  struct stat st;
  ck_assert_int_eq(lstat(p, &st), 0);
  return st.st_mode;
}

/* The writer writes through a link (the link stays a link, its target gets
 * the array), into a FIFO directly (it stays a FIFO; the reader gets the
 * array), and refuses a folder (left as it was). */
START_TEST(test_save_targets)
{
  tu_rng r = {tu_seed("save_targets", 303) + (uint64_t)_i};
  char real[600], link[600], fifo[600], copy[600], d[600], inner[700];
  tsr_array a;
  tsr_error err = {0};
  int status;
  pid_t pid;
  rand_array(&r, &a);
  snprintf(real, sizeof real, "%s/real.npy", dir);
  snprintf(link, sizeof link, "%s/link.npy", dir);
  snprintf(fifo, sizeof fifo, "%s/fifo.npy", dir);
  snprintf(copy, sizeof copy, "%s/copy.npy", dir);
  snprintf(d, sizeof d, "%s/d.npy", dir);
  snprintf(inner, sizeof inner, "%s/keep", d);
  tu_write_npy(real, "<f4", 1, (int64_t[]){1}, "abcd", 4);
  ck_assert_int_eq(symlink("real.npy", link), 0);
  ck_assert_int_eq(tsr_npy_save(link, &a, &err), TSR_OK);
  ck_assert(S_ISLNK(lmode(link)));
  expect_loads(real, &a);

  ck_assert_int_eq(mkfifo(fifo, 0666), 0);
  pid = tu_fifo_reader(fifo, copy);
  ck_assert_int_gt(pid, 0);
  ck_assert_int_eq(tsr_npy_save(fifo, &a, &err), TSR_OK);
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ck_assert(S_ISFIFO(lmode(fifo)));
  expect_loads(copy, &a);

  ck_assert_int_eq(mkdir(d, 0777), 0);
  tu_write_npy(inner, "<f4", 1, (int64_t[]){1}, "wxyz", 4);
  ck_assert_int_eq(tsr_npy_save(d, &a, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, d) && strstr(err.text, "a directory, not a regular file"), "%s",
                err.text);
  ck_assert(S_ISDIR(lmode(d)));
  ck_assert_int_eq(count_files(), 5); /* real, link, fifo, copy, d: no temporary */
  free(a.data);
}
END_TEST

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A FIFO (nothing ever writes it) or a folder given as an input is refused
 * at once, by the loader and the mask loader, never waited on. */
START_TEST(test_load_refuses_fifo)
{
  char fifo[600], link[600], d[600];
  tsr_mask *m = (tsr_mask *)1;
  tsr_array a;
  tsr_error err = {0};
  double t0 = now_s();
  snprintf(fifo, sizeof fifo, "%s/m.npy", dir);
  snprintf(link, sizeof link, "%s/l.npy", dir);
  snprintf(d, sizeof d, "%s/d.npy", dir);
  ck_assert_int_eq(mkfifo(fifo, 0666), 0);
  ck_assert_int_eq(symlink("m.npy", link), 0);
  ck_assert_int_eq(mkdir(d, 0777), 0);
  memset(&a, 0x5a, sizeof a);
  ck_assert_int_eq(tsr_npy_load(fifo, &a, &err), TSR_ERR_IO);
  ck_assert_ptr_null(a.data);
  ck_assert_msg(strstr(err.text, fifo) && strstr(err.text, "a FIFO, not a regular file"), "%s",
                err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_mask_load(link, &m, &err), TSR_ERR_IO);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err.text, link) && strstr(err.text, "a FIFO"), "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_npy_load(d, &a, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "a directory, not a regular file"), "%s", err.text);
  ck_assert_msg(now_s() - t0 < 1.0, "refusing took %.3f s", now_s() - t0);
}
END_TEST

static Suite *npy_suite(void)
{
  Suite *s = suite_create("npy");
  TCase *tc = tcase_create("npy");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, test_load_independent_writer, 0, 40);
  tcase_add_loop_test(tc, test_save_roundtrip, 0, 21);
  tcase_add_test(tc, test_save_exact_header);
  tcase_add_test(tc, test_reject_bad_magic);
  tcase_add_test(tc, test_reject_truncated);
  tcase_add_test(tc, test_reject_dtypes);
  tcase_add_test(tc, test_reject_fortran);
  tcase_add_test(tc, test_reject_malformed_headers);
  tcase_add_test(tc, test_reject_version_and_missing);
  tcase_add_test(tc, test_save_failures_leave_nothing);
  tcase_add_test(tc, test_first_error_wins);
  tcase_add_test(tc, test_half_exhaustive);
  tcase_add_test(tc, test_half_rounding);
  tcase_add_test(tc, test_bf16);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  /* a loader that waited on a FIFO would hang: fail in seconds instead */
  tc = tcase_create("targets");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, test_save_targets, 0, 3);
  tcase_add_test(tc, test_load_refuses_fifo);
  tcase_set_timeout(tc, 5);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  return tu_run_suite(npy_suite());
}

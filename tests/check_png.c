/*
 * check_png.c: the PNG writer of the report (profiler/png.c): every pixel decoded
 * back by an independent reader, plot sizes, refused canvases and paths.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

#include "profile.h"
#include "tessera.h"
#include "util.h"
#include "png_read.h"

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

/* Reads the file back and compares every pixel with the canvas. */
static long png_check(const tsrp_png_image *im, const char *path)
{
  int w, h;
  long size;
  unsigned char *px = png_read(path, &w, &h, &size);
  ck_assert_int_eq(w, im->w);
  ck_assert_int_eq(h, im->h);
  ck_assert_int_eq(memcmp(px, im->px, (size_t)w * (size_t)h * 3), 0);
  free(px);
  return size;
}

/* Entries of tmpdir whose name starts with prefix. */
static int count_entries(const char *prefix)
{
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  int n = 0;
  ck_assert_ptr_nonnull(d);
  while ((e = readdir(d)))
    n += !strncmp(e->d_name, prefix, strlen(prefix));
  closedir(d);
  return n;
}

START_TEST(test_png)
{
  tu_rng rng = {base_seed + 71};
  tsrp_png_image im;
  tsr_error err = {0};
  char path[300], want[400];
  struct stat sb;
  int w = (int)tu_range(&rng, 30, 300), h = (int)tu_range(&rng, 30, 300), x, y, k;
  long size;
  ck_assert_uint_eq(bit_crc32((const unsigned char *)"123456789", 9), 0xcbf43926u);
  /* Noise (incompressible) with text on it: every pixel must come back. */
  ck_assert_int_eq(tsrp_png_new(&im, w, h, &err), TSR_OK);
  for (y = 0; y < h; y++)
    for (x = 0; x < w; x++)
      tsrp_png_rect(&im, x, y, 1, 1, (unsigned)(tu_next(&rng) & 0xffffff));
  tsrp_png_text(&im, 2, 2, 1, 0, "TESSERA 0.1");
  snprintf(path, sizeof path, "%s/t.png", tmpdir);
  ck_assert_int_eq(tsrp_png_write(&im, path, &err), TSR_OK);
  png_check(&im, path);
  tsrp_png_free(&im);
  /* A plot as the report draws one (960x640: panel, grid, markers, text):
   * decodes exactly and is small (stored blocks made it 1.8 MB). */
  ck_assert_int_eq(tsrp_png_new(&im, 960, 640, &err), TSR_OK);
  tsrp_png_rect(&im, 80, 60, 560, 500, 0xf4f4f4);
  for (k = 0; k <= 6; k++) {
    tsrp_png_rect(&im, 80 + k * 560 / 6, 60, 1, 500, 0xcccccc);
    tsrp_png_rect(&im, 80, 60 + k * 500 / 6, 560, 1, 0xcccccc);
  }
  for (k = 0; k < 200; k++)
    tsrp_png_rect(&im, (int)tu_range(&rng, 80, 633), (int)tu_range(&rng, 60, 553), 7, 7,
                  (unsigned)(tu_next(&rng) & 0xffffff));
  for (k = 0; k < 24; k++)
    tsrp_png_text(&im, 660, 60 + 18 * k, 1, 0, "SUBDIVIDE 64X128 ROW 0.95");
  tsrp_png_text(&im, 80, 20, 2, 0, "BEST PLAN PER MASK - NVIDIA H200");
  snprintf(path, sizeof path, "%s/plot.png", tmpdir);
  ck_assert_int_eq(tsrp_png_write(&im, path, &err), TSR_OK);
  size = png_check(&im, path);
  printf("png: a 960x640 plot is %ld bytes\n", size);
  ck_assert_int_lt(size, 100 * 1000);
  /* Writing over an existing image replaces it. */
  tsrp_png_rect(&im, 0, 0, 960, 10, 0x123456);
  ck_assert_int_eq(tsrp_png_write(&im, path, &err), TSR_OK);
  png_check(&im, path);
  tsrp_png_free(&im);
  ck_assert_int_eq(tsrp_png_new(&im, 0, 10, &err), TSR_ERR_INVALID);
  ck_assert_ptr_null(im.px);
  ck_assert_int_eq(tsrp_png_new(&im, 10, 8193, &err), TSR_ERR_INVALID);
  ck_assert_ptr_null(im.px);
  ck_assert_int_eq(tsrp_png_write(&im, path, &err), TSR_ERR_INVALID);
  /* An unwritable path: a clear error naming it, nothing left behind. */
  ck_assert_int_eq(tsrp_png_new(&im, 4, 4, &err), TSR_OK);
  snprintf(path, sizeof path, "%s/no/such/dir.png", tmpdir);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsrp_png_write(&im, path, &err), TSR_ERR_IO);
  snprintf(want, sizeof want, "cannot write '%s': No such file or directory", path);
  ck_assert_str_eq(err.text, want);
  ck_assert_int_eq(count_entries("no"), 0);
  /* The path is a folder: refused before anything is written (files.h),
   * the folder untouched and no temporary file left. */
  snprintf(path, sizeof path, "%s/adir.png", tmpdir);
  ck_assert_int_eq(mkdir(path, 0777), 0);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsrp_png_write(&im, path, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "cannot write '") &&
                    strstr(err.text, "adir.png': a directory, not a regular file"),
                "%s", err.text);
  ck_assert_int_eq(count_entries("adir.png"), 1);
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert(S_ISDIR(sb.st_mode));
  tsrp_png_free(&im);
}
END_TEST


static Suite *png_suite(void)
{
  Suite *s = suite_create("png");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_png);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  base_seed = tu_seed("check_png", 20261129u);
  return tu_run_suite(png_suite());
}

/*
 * png.c: a tiny PNG writer for the profiler's plots, on zlib alone.
 *
 * Images are 8-bit RGB, rows unfiltered, the IDAT stream compressed by
 * zlib's compress2 at its best level: the plots are flat colours, so a
 * 960x640 plot (1.8 MB of pixels) is written as 8 to 15 kilobytes in
 * about ten milliseconds.  No libpng: the format needs only deflate and
 * CRC-32, both from zlib.  Text is a 5x7 bitmap font covering digits,
 * upper-case letters and a few symbols (lower case is drawn as upper case).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "files.h"
#include "profile.h"

tsr_status tsrp_png_new(tsrp_png_image *im, int w, int h, tsr_error *err)
{
  im->px = NULL;
  if (w <= 0 || h <= 0 || w > 8192 || h > 8192)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot make a %dx%d image", w, h);
  im->px = malloc((size_t)w * (size_t)h * 3);
  if (!im->px)
    return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory for a %dx%d image", w, h);
  memset(im->px, 255, (size_t)w * (size_t)h * 3);
  im->w = w;
  im->h = h;
  return TSR_OK;
}

void tsrp_png_free(tsrp_png_image *im)
{
  free(im->px);
  im->px = NULL;
}

void tsrp_png_rect(tsrp_png_image *im, int x, int y, int w, int h, unsigned rgb)
{
  int i, j;
  for (j = y < 0 ? 0 : y; j < y + h && j < im->h; j++)
    for (i = x < 0 ? 0 : x; i < x + w && i < im->w; i++) {
      unsigned char *p = im->px + ((size_t)j * (size_t)im->w + (size_t)i) * 3;
      p[0] = (unsigned char)(rgb >> 16);
      p[1] = (unsigned char)(rgb >> 8);
      p[2] = (unsigned char)rgb;
    }
}

/* 5x7 glyphs, one byte per row, bit 4 = leftmost column. */
static const struct {
  char c;
  unsigned char rows[7];
} font[] = {
    {'0', {14, 17, 19, 21, 25, 17, 14}}, {'1', {4, 12, 4, 4, 4, 4, 14}},
    {'2', {14, 17, 1, 2, 4, 8, 31}},     {'3', {30, 1, 1, 14, 1, 1, 30}},
    {'4', {2, 6, 10, 18, 31, 2, 2}},     {'5', {31, 16, 30, 1, 1, 17, 14}},
    {'6', {6, 8, 16, 30, 17, 17, 14}},   {'7', {31, 1, 2, 4, 8, 8, 8}},
    {'8', {14, 17, 17, 14, 17, 17, 14}}, {'9', {14, 17, 17, 15, 1, 2, 12}},
    {'A', {14, 17, 17, 31, 17, 17, 17}}, {'B', {30, 17, 17, 30, 17, 17, 30}},
    {'C', {14, 17, 16, 16, 16, 17, 14}}, {'D', {30, 17, 17, 17, 17, 17, 30}},
    {'E', {31, 16, 16, 30, 16, 16, 31}}, {'F', {31, 16, 16, 30, 16, 16, 16}},
    {'G', {14, 17, 16, 23, 17, 17, 15}}, {'H', {17, 17, 17, 31, 17, 17, 17}},
    {'I', {14, 4, 4, 4, 4, 4, 14}},      {'J', {7, 2, 2, 2, 2, 18, 12}},
    {'K', {17, 18, 20, 24, 20, 18, 17}}, {'L', {16, 16, 16, 16, 16, 16, 31}},
    {'M', {17, 27, 21, 21, 17, 17, 17}}, {'N', {17, 17, 25, 21, 19, 17, 17}},
    {'O', {14, 17, 17, 17, 17, 17, 14}}, {'P', {30, 17, 17, 30, 16, 16, 16}},
    {'Q', {14, 17, 17, 17, 21, 18, 13}}, {'R', {30, 17, 17, 30, 20, 18, 17}},
    {'S', {15, 16, 16, 14, 1, 1, 30}},   {'T', {31, 4, 4, 4, 4, 4, 4}},
    {'U', {17, 17, 17, 17, 17, 17, 14}}, {'V', {17, 17, 17, 17, 17, 10, 4}},
    {'W', {17, 17, 17, 21, 21, 21, 10}}, {'X', {17, 17, 10, 4, 10, 17, 17}},
    {'Y', {17, 17, 10, 4, 4, 4, 4}},     {'Z', {31, 1, 2, 4, 8, 16, 31}},
    {'.', {0, 0, 0, 0, 0, 12, 12}},      {'-', {0, 0, 0, 31, 0, 0, 0}},
    {'+', {0, 4, 4, 31, 4, 4, 0}},       {':', {0, 12, 12, 0, 12, 12, 0}},
    {'/', {1, 1, 2, 4, 8, 16, 16}},      {'%', {24, 25, 2, 4, 8, 19, 3}},
    {'(', {2, 4, 8, 8, 8, 4, 2}},        {')', {8, 4, 2, 2, 2, 4, 8}},
    {'_', {0, 0, 0, 0, 0, 0, 31}},       {'=', {0, 0, 31, 0, 31, 0, 0}},
    {'<', {2, 4, 8, 16, 8, 4, 2}},       {'>', {8, 4, 2, 1, 2, 4, 8}},
    {',', {0, 0, 0, 0, 12, 4, 8}},
};

void tsrp_png_text(tsrp_png_image *im, int x, int y, int scale, unsigned rgb, const char *s)
{
  for (; *s; s++, x += 6 * scale) {
    char c = (*s >= 'a' && *s <= 'z') ? (char)(*s - 'a' + 'A') : *s;
    size_t g;
    int r, b;
    for (g = 0; g < sizeof font / sizeof font[0] && font[g].c != c; g++)
      ;
    if (g == sizeof font / sizeof font[0])
      continue; /* space and unknown characters advance only */
    for (r = 0; r < 7; r++)
      for (b = 0; b < 5; b++)
        if (font[g].rows[r] & (16 >> b))
          tsrp_png_rect(im, x + b * scale, y + r * scale, scale, scale, rgb);
  }
}

static void put32(unsigned char *p, uint32_t v)
{
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* Writes one chunk: length, type, data, CRC over type and data. */
static int chunk(FILE *f, const char *type, const unsigned char *data, size_t n)
{
  unsigned char hdr[8], crc[4];
  uLong c = crc32(0L, Z_NULL, 0);
  put32(hdr, (uint32_t)n);
  memcpy(hdr + 4, type, 4);
  c = crc32(c, hdr + 4, 4);
  if (n)
    c = crc32(c, data, (uInt)n);
  put32(crc, (uint32_t)c);
  if (fwrite(hdr, 1, 8, f) != 8 || (n && fwrite(data, 1, n, f) != n) || fwrite(crc, 1, 4, f) != 4)
    return -1;
  return 0;
}

tsr_status tsrp_png_write(const tsrp_png_image *im, const char *path, tsr_error *err)
{
  static const unsigned char sig[8] = {137, 'P', 'N', 'G', '\r', '\n', 26, '\n'};
  size_t row, raw_n;
  uLongf z_n;
  unsigned char ihdr[13], *raw = NULL, *z = NULL;
  tsr_out *t = NULL;
  FILE *f = NULL;
  tsr_status s;
  int y, zrc;
  if (!im || !im->px || im->w <= 0 || im->h <= 0)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot write image '%s': no pixels", path);
  row = (size_t)im->w * 3 + 1;
  raw_n = row * (size_t)im->h; /* at most 8192 x 24577 bytes: fits uLong */
  /* Filter byte 0 (none) before each row. */
  raw = malloc(raw_n);
  z_n = compressBound((uLong)raw_n);
  z = malloc(z_n);
  if (!raw || !z) {
    free(raw);
    free(z);
    return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory writing image '%s'", path);
  }
  for (y = 0; y < im->h; y++) {
    raw[(size_t)y * row] = 0;
    memcpy(raw + (size_t)y * row + 1, im->px + (size_t)y * (size_t)im->w * 3, row - 1);
  }
  zrc = compress2(z, &z_n, raw, (uLong)raw_n, Z_BEST_COMPRESSION);
  free(raw);
  if (zrc != Z_OK) {
    free(z);
    return tsr_error_set(err, zrc == Z_MEM_ERROR ? TSR_ERR_NOMEM : TSR_ERR_IO,
                         "cannot write image '%s': zlib compress2 failed (%d)", path, zrc);
  }
  put32(ihdr, (uint32_t)im->w);
  put32(ihdr + 4, (uint32_t)im->h);
  ihdr[8] = 8;  /* bit depth */
  ihdr[9] = 2;  /* RGB */
  ihdr[10] = 0; /* deflate */
  ihdr[11] = 0; /* adaptive filtering */
  ihdr[12] = 0; /* no interlace */
  /* An output transaction of one file (files.h): a failure at any point
   * leaves no partial image at `path`. */
  if ((s = tsri_out_begin(&t, err)) == TSR_OK && (s = tsri_out_file(t, path, 0, &f, err)) == TSR_OK &&
      (fwrite(sig, 1, 8, f) != 8 || chunk(f, "IHDR", ihdr, 13) || chunk(f, "IDAT", z, z_n) ||
       chunk(f, "IEND", NULL, 0)))
    s = tsr_error_set(err, TSR_ERR_IO, "cannot write image '%s': %s", path, strerror(errno));
  free(z);
  if (s != TSR_OK) {
    tsri_out_abort(t);
    return s;
  }
  return tsri_out_commit(t, err);
}

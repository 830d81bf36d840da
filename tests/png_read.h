/*
 * tests/png_read.h: a PNG decoder for the suites that check the report's
 * and the PNG writer's images (header-only, static inline; zlib).
 */
#ifndef TSR_PNG_READ_H
#define TSR_PNG_READ_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

static inline uint32_t get32(const unsigned char *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* CRC-32 bit by bit, sharing nothing with zlib's table-driven one. */
static inline uint32_t bit_crc32(const unsigned char *p, size_t n)
{
  uint32_t c = 0xffffffffu;
  size_t i;
  int k;
  for (i = 0; i < n; i++) {
    c ^= p[i];
    for (k = 0; k < 8; k++)
      c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

/* A minimal PNG reader for what the writer must produce (8-bit RGB, no
 * interlace): checks the signature, every chunk's CRC, IHDR first and
 * IEND last, inflates the IDAT stream with zlib's uncompress, undoes the
 * row filters the reader knows (none) and returns the pixels (malloc'ed,
 * w * h * 3) and the file size. */
static inline unsigned char *png_read(const char *path, int *w, int *h, long *size)
{
  unsigned char *buf, *z = NULL, *raw, *px;
  size_t off = 8, zlen = 0, row;
  uLongf raw_n;
  int chunks = 0, iend = 0, y;
  long n;
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open '%s'", path);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  ck_assert_int_gt(n, 8 + 25 + 12 + 12);
  buf = malloc((size_t)n);
  ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  ck_assert_int_eq(memcmp(buf, "\x89PNG\r\n\x1a\n", 8), 0);
  *w = *h = 0;
  while (off < (size_t)n) {
    uint32_t len;
    ck_assert_msg(!iend, "data after IEND");
    ck_assert_uint_le(off + 12, (size_t)n);
    len = get32(buf + off);
    ck_assert_uint_le(off + 12 + len, (size_t)n);
    ck_assert_uint_eq(get32(buf + off + 8 + len), bit_crc32(buf + off + 4, len + 4));
    ck_assert_int_eq(chunks == 0, !memcmp(buf + off + 4, "IHDR", 4));
    if (!memcmp(buf + off + 4, "IHDR", 4)) {
      ck_assert_uint_eq(len, 13);
      *w = (int)get32(buf + off + 8);
      *h = (int)get32(buf + off + 12);
      ck_assert_int_eq(buf[off + 16], 8); /* bit depth */
      ck_assert_int_eq(buf[off + 17], 2); /* RGB */
      ck_assert_int_eq(buf[off + 18] | buf[off + 19] | buf[off + 20], 0);
    } else if (!memcmp(buf + off + 4, "IDAT", 4)) {
      z = realloc(z, zlen + len);
      memcpy(z + zlen, buf + off + 8, len);
      zlen += len;
    } else if (!memcmp(buf + off + 4, "IEND", 4)) {
      ck_assert_uint_eq(len, 0);
      iend = 1;
    }
    off += 12 + len;
    chunks++;
  }
  ck_assert_msg(iend, "no IEND chunk");
  ck_assert_int_gt(*w, 0);
  ck_assert_int_gt(*h, 0);
  ck_assert_uint_gt(zlen, 0);
  row = (size_t)*w * 3 + 1;
  raw_n = (uLongf)(row * (size_t)*h) + 1; /* one spare byte: a longer stream is an error */
  raw = malloc(raw_n);
  ck_assert_int_eq(uncompress(raw, &raw_n, z, (uLong)zlen), Z_OK);
  ck_assert_uint_eq(raw_n, row * (size_t)*h);
  px = malloc((size_t)*w * (size_t)*h * 3);
  for (y = 0; y < *h; y++) {
    ck_assert_int_eq(raw[(size_t)y * row], 0); /* filter type none */
    memcpy(px + (size_t)y * (row - 1), raw + (size_t)y * row + 1, row - 1);
  }
  free(raw);
  free(z);
  free(buf);
  *size = n;
  return px;
}

#endif

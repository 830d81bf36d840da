/*
 * mask.c: logical block masks, one byte (0 or 1) per (batch, head, query
 * block, key block), or one bit.
 *
 * A byte per pair is the plain form: masks are small next to the tensors
 * (a 1024 x 1024 block mask is 1 MiB per head) and the reference, the
 * verifier and the features index them directly.  A mask made from packed
 * bits (tsr_mask_from_packed, as a producer on the GPU or numpy.packbits
 * writes them) keeps the bits instead.  Either way the mask owns its rows
 * packed into 64-bit words (tsr_mask_packed_plane), built once: from the
 * bytes when the mask is made, 64 bytes an AVX-512BW instruction (32 with
 * AVX2, 16 with SSE2, chosen at run time: simd.h), or as given.  The
 * planner (map.c) and the features (features.c) read those rows and never
 * pack, so a request that computes features and then plans reads the
 * NQ*NK bytes once, and a packed mask not at all (14 MB for Wan2.1-14B
 * 720p, against 1.9 MB of bits).  A packed mask's bytes are expanded on
 * first use of tsr_mask_bits or tsr_mask_plane.  Batch or head extent 1
 * broadcasts.  Cost: B*H*NQ*ceil(NK/64) words, plus B*H*NQ*NK bytes for a
 * byte mask; tsr_mask_check is O(1), density O(size).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simd.h"
#include "tessera.h"
#ifdef TSR_X86
#include <immintrin.h>
#endif

struct tsr_mask {
  int64_t batch, heads, nq, nk;
  uint8_t *bits;      /* bytes; NULL until expanded for a packed mask */
  uint64_t *packed;   /* packed rows of `words` words (LSB first) */
  int64_t words;      /* ceil(nk / 64) */
};


static tsr_status mask_new(int64_t batch, int64_t heads, int64_t nq, int64_t nk,
                           const char *name, int packed, tsr_mask **out, tsr_error *err)
{
  const int64_t dims[4] = {batch, heads, nq, nk};
  const char *names[4] = {"batch", "heads", "query blocks", "key blocks"};
  int64_t n = 1;
  tsr_mask *m;
  int i;
  for (i = 0; i < 4; i++) {
    if (dims[i] < 1)
      return name ? tsr_error_set(err, TSR_ERR_SHAPE, "cannot read mask '%s': %s is %lld, must be positive",
                                  name, names[i], (long long)dims[i])
                  : tsr_error_set(err, TSR_ERR_SHAPE, "invalid mask: %s is %lld, must be positive",
                                  names[i], (long long)dims[i]);
    if (dims[i] > TSR_MAX_MASK_PAIRS / n)
      return tsr_error_set(err, TSR_ERR_SHAPE, "invalid mask%s%s%s: more than %lld block pairs",
                           name ? " '" : "", name ? name : "", name ? "'" : "",
                           (long long)TSR_MAX_MASK_PAIRS);
    n *= dims[i];
  }
  m = calloc(1, sizeof *m);
  if (m && !packed)
    m->bits = malloc((size_t)n);
  if (m)
    m->packed = malloc((size_t)(n / nk * ((nk + 63) / 64)) * 8);
  if (!m || !m->packed || (!packed && !m->bits)) {
    if (m) {
      free(m->bits);
      free(m->packed);
    }
    free(m);
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot make mask: out of memory for %lld pairs",
                         (long long)n);
  }
  m->batch = batch;
  m->heads = heads;
  m->nq = nq;
  m->nk = nk;
  m->words = (nk + 63) / 64;
  *out = m;
  return TSR_OK;
}

static int64_t mask_size(const tsr_mask *m)
{
  return m->batch * m->heads * m->nq * m->nk;
}

/* ---- Packing the rows of a byte mask, once ------------------------------ */

/* Packs rows of n 0/1 bytes into rows of bits (LSB first) of ceil(n/64)
 * words: the portable version, 8 bytes per multiply. */
static void pack_bits(const uint8_t *src, int64_t rows, int64_t n, uint64_t *dst)
{
  int64_t w, nw = (n + 63) / 64, r;
  for (r = 0; r < rows; r++, src += n, dst += nw) {
    for (w = 0; w < nw; w++) {
      const uint8_t *p = src + w * 64;
      int64_t len = n - w * 64 < 64 ? n - w * 64 : 64;
      uint64_t x = 0;
      int64_t c = 0;
      for (; c + 8 <= len; c += 8) {
        uint64_t v;
        memcpy(&v, p + c, 8);
        x |= (((v & 0x0101010101010101ULL) * 0x0102040810204080ULL) >> 56) << c;
      }
      for (; c < len; c++)
        x |= (uint64_t)(p[c] & 1) << c;
      dst[w] = x;
    }
  }
}

#ifdef TSR_X86
/* Mask bytes are 0 or 1: shifting bit 0 to bit 7 lets movemask gather 16
 * (SSE2) or 32 (AVX2) of them at once; AVX-512BW tests 64 bytes, the
 * ragged end through a masked load, so a word is one instruction pair.
 * Bytes c..len-1 of the word at p into x, 16 a movemask, then one by one
 * (inlined into the AVX2 version too, for its ragged end). */
static inline uint64_t pack_word_sse2(const uint8_t *p, int64_t c, int64_t len, uint64_t x)
{
  for (; c + 16 <= len; c += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + c));
    x |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_slli_epi16(v, 7)) << c;
  }
  for (; c < len; c++)
    x |= (uint64_t)(p[c] & 1) << c;
  return x;
}

static void pack_bits_sse2(const uint8_t *src, int64_t rows, int64_t n, uint64_t *dst)
{
  int64_t w, nw = (n + 63) / 64, r;
  for (r = 0; r < rows; r++, src += n, dst += nw)
    for (w = 0; w < nw; w++)
      dst[w] = pack_word_sse2(src + w * 64, 0, n - w * 64 < 64 ? n - w * 64 : 64, 0);
}

__attribute__((target("avx2"))) static void pack_bits_avx2(const uint8_t *src, int64_t rows, int64_t n,
                                                           uint64_t *dst)
{
  int64_t w, nw = (n + 63) / 64, r;
  for (r = 0; r < rows; r++, src += n, dst += nw) {
    for (w = 0; w < nw; w++) {
      const uint8_t *p = src + w * 64;
      int64_t len = n - w * 64 < 64 ? n - w * 64 : 64, c = 0;
      uint64_t x = 0;
      for (; c + 32 <= len; c += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(p + c));
        x |= (uint64_t)(unsigned)_mm256_movemask_epi8(_mm256_slli_epi16(v, 7)) << c;
      }
      dst[w] = pack_word_sse2(p, c, len, x);
    }
  }
}

__attribute__((target("avx512f,avx512bw"))) static void pack_bits_avx512(const uint8_t *src,
                                                                        int64_t rows, int64_t n, uint64_t *dst)
{
  int64_t w, nw = (n + 63) / 64, r;
  for (r = 0; r < rows; r++, src += n, dst += nw) {
    for (w = 0; w < nw; w++) {
      int64_t len = n - w * 64 < 64 ? n - w * 64 : 64;
      __mmask64 k = len == 64 ? ~0ULL : (1ULL << len) - 1;
      __m512i v = _mm512_maskz_loadu_epi8(k, src + w * 64);
      dst[w] = (uint64_t)_mm512_test_epi8_mask(v, v);
    }
  }
}
#endif

/* Packs `rows` rows of n bytes (contiguous) into rows of ceil(n/64) words. */
static void pack_rows(int simd, const uint8_t *src, int64_t rows, int64_t n, uint64_t *dst)
{
#ifdef TSR_X86
  if (simd == TSR_SIMD_AVX512)
    pack_bits_avx512(src, rows, n, dst);
  else if (simd == TSR_SIMD_AVX2)
    pack_bits_avx2(src, rows, n, dst);
  else if (simd == TSR_SIMD_SSE2)
    pack_bits_sse2(src, rows, n, dst);
  else
#endif
    pack_bits(src, rows, n, dst);
  (void)simd;
}


/* The packed rows of a byte mask, from its bytes (0 or 1). */
static void pack_mask(tsr_mask *m)
{
  pack_rows(tsri_simd_level(), m->bits, m->batch * m->heads * m->nq, m->nk, m->packed);
}

tsr_status tsr_mask_from_bytes(int64_t batch, int64_t heads, int64_t nq, int64_t nk,
                               const uint8_t *bits, tsr_mask **out, tsr_error *err)
{
  tsr_mask *m;
  tsr_status s;
  int64_t i, n;
  if (!out)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_mask_from_bytes: null argument");
  *out = NULL;
  if (!bits)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_mask_from_bytes: null bits");
  s = mask_new(batch, heads, nq, nk, NULL, 0, &m, err);
  if (s != TSR_OK)
    return s;
  n = mask_size(m);
  for (i = 0; i < n; i++)
    m->bits[i] = bits[i] != 0;
  pack_mask(m);
  *out = m;
  return TSR_OK;
}

tsr_status tsr_mask_load(const char *path, tsr_mask **out, tsr_error *err)
{
  tsr_array a;
  tsr_mask *m = NULL;
  tsr_status s;
  int64_t i, n, b = 1;
  int off;
  if (!out || !path)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_mask_load: null argument");
  *out = NULL;
  s = tsr_npy_load(path, &a, err);
  if (s != TSR_OK)
    return s;
  if (a.dtype != TSR_DT_BOOL && a.dtype != TSR_DT_U8) {
    s = tsr_error_set(err, TSR_ERR_DTYPE, "cannot read mask '%s': expected bool or uint8, got %s",
                      path, tsr_dtype_name(a.dtype));
    goto done;
  }
  if (a.ndim != 3 && a.ndim != 4) {
    s = tsr_error_set(err, TSR_ERR_SHAPE,
                      "cannot read mask '%s': expected 3 or 4 dimensions ([H, NQ, NK] or "
                      "[B, H, NQ, NK]), got %d",
                      path, a.ndim);
    goto done;
  }
  off = a.ndim - 3;
  if (off)
    b = a.shape[0];
  s = mask_new(b, a.shape[off], a.shape[off + 1], a.shape[off + 2], path, 0, &m, err);
  if (s != TSR_OK)
    goto done;
  n = mask_size(m);
  for (i = 0; i < n; i++)
    m->bits[i] = ((const uint8_t *)a.data)[i] != 0;
  pack_mask(m);
  *out = m;
done:
  tsr_npy_free(&a);
  return s;
}

/* Packed rows (bit j % 8 of byte j / 8, rows `row_bytes` apart) into the
 * mask's 64-bit rows, bits past nk cleared.  One pass over the packed
 * bytes: little-endian hosts copy rows whole. */
static void fill_packed(tsr_mask *m, const uint8_t *src, int64_t row_bytes)
{
  int64_t rows = m->batch * m->heads * m->nq, nb = (m->nk + 7) / 8, r, w;
  uint64_t tail = m->nk % 64 ? (1ULL << (m->nk % 64)) - 1 : ~0ULL;
  for (r = 0; r < rows; r++) {
    uint64_t *dst = m->packed + r * m->words;
    const uint8_t *p = src + r * row_bytes;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    dst[m->words - 1] = 0;
    memcpy(dst, p, (size_t)nb);
#else
    for (w = 0; w < m->words; w++)
      dst[w] = 0;
    for (w = 0; w < nb; w++)
      dst[w / 8] |= (uint64_t)p[w] << (w % 8 * 8);
#endif
    dst[m->words - 1] &= tail;
  }
  (void)w;
}

tsr_status tsr_mask_from_packed(int64_t batch, int64_t heads, int64_t nq, int64_t nk,
                                const uint8_t *packed, int64_t row_bytes, tsr_mask **out,
                                tsr_error *err)
{
  tsr_mask *m;
  tsr_status s;
  if (!out)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_mask_from_packed: null argument");
  *out = NULL;
  if (!packed)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_mask_from_packed: null bits");
  if (nk >= 1 && row_bytes < (nk + 7) / 8)
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "invalid packed mask: rows of %lld bytes cannot hold %lld key blocks",
                         (long long)row_bytes, (long long)nk);
  s = mask_new(batch, heads, nq, nk, NULL, 1, &m, err);
  if (s != TSR_OK)
    return s;
  fill_packed(m, packed, row_bytes);
  *out = m;
  return TSR_OK;
}

tsr_status tsr_mask_load_packed(const char *path, int64_t nk, tsr_mask **out, tsr_error *err)
{
  tsr_array a;
  tsr_mask *m = NULL;
  tsr_status s;
  int64_t b = 1;
  int off;
  if (!out || !path)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_mask_load_packed: null argument");
  *out = NULL;
  if (nk < 1)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot read packed mask '%s': key blocks %lld, must be positive", path,
                         (long long)nk);
  s = tsr_npy_load(path, &a, err);
  if (s != TSR_OK)
    return s;
  if (a.dtype != TSR_DT_U8) {
    s = tsr_error_set(err, TSR_ERR_DTYPE, "cannot read packed mask '%s': expected uint8, got %s",
                      path, tsr_dtype_name(a.dtype));
    goto done;
  }
  if (a.ndim != 3 && a.ndim != 4) {
    s = tsr_error_set(err, TSR_ERR_SHAPE,
                      "cannot read packed mask '%s': expected 3 or 4 dimensions ([H, NQ, NK/8] "
                      "or [B, H, NQ, NK/8]), got %d",
                      path, a.ndim);
    goto done;
  }
  off = a.ndim - 3;
  if (off)
    b = a.shape[0];
  if (a.shape[off + 2] != (nk + 7) / 8) {
    s = tsr_error_set(err, TSR_ERR_SHAPE,
                      "cannot read packed mask '%s': rows of %lld bytes, but %lld key blocks "
                      "pack into %lld",
                      path, (long long)a.shape[off + 2], (long long)nk, (long long)((nk + 7) / 8));
    goto done;
  }
  s = mask_new(b, a.shape[off], a.shape[off + 1], nk, path, 1, &m, err);
  if (s != TSR_OK)
    goto done;
  fill_packed(m, a.data, a.shape[off + 2]);
  *out = m;
done:
  tsr_npy_free(&a);
  return s;
}

/* The byte form of a packed mask, made on first use.  The mask is
 * logically const: the bytes are a cache of the bits. */
static uint8_t *mask_bytes(const tsr_mask *cm)
{
  tsr_mask *m = (tsr_mask *)(uintptr_t)cm;
  int64_t r, j, rows;
  if (m->bits)
    return m->bits;
  rows = m->batch * m->heads * m->nq;
  m->bits = malloc((size_t)(rows * m->nk));
  if (!m->bits)
    return NULL;
  for (r = 0; r < rows; r++) {
    const uint64_t *p = m->packed + r * m->words;
    uint8_t *d = m->bits + r * m->nk;
    for (j = 0; j < m->nk; j++)
      d[j] = (uint8_t)(p[j >> 6] >> (j & 63) & 1);
  }
  return m->bits;
}

tsr_status tsr_mask_save(const char *path, const tsr_mask *m, tsr_error *err)
{
  tsr_array a;
  if (!path || !m)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_mask_save: null argument");
  memset(&a, 0, sizeof a);
  a.dtype = TSR_DT_BOOL;
  a.ndim = 4;
  a.shape[0] = m->batch;
  a.shape[1] = m->heads;
  a.shape[2] = m->nq;
  a.shape[3] = m->nk;
  a.data = mask_bytes(m);
  if (!a.data)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot save mask '%s': out of memory", path);
  return tsr_npy_save(path, &a, err);
}

void tsr_mask_destroy(tsr_mask *m)
{
  if (m) {
    free(m->bits);
    free(m->packed);
    free(m);
  }
}

int64_t tsr_mask_batch(const tsr_mask *m) { return m->batch; }
int64_t tsr_mask_heads(const tsr_mask *m) { return m->heads; }
int64_t tsr_mask_nq(const tsr_mask *m) { return m->nq; }
int64_t tsr_mask_nk(const tsr_mask *m) { return m->nk; }
const uint8_t *tsr_mask_bits(const tsr_mask *m) { return mask_bytes(m); }

const uint8_t *tsr_mask_plane(const tsr_mask *m, int64_t b, int64_t h)
{
  int64_t bb = m->batch == 1 ? 0 : b, hh = m->heads == 1 ? 0 : h;
  const uint8_t *bytes;
  if (b < 0 || h < 0 || bb >= m->batch || hh >= m->heads)
    return NULL;
  bytes = mask_bytes(m);
  return bytes ? bytes + (bb * m->heads + hh) * m->nq * m->nk : NULL;
}

const uint64_t *tsr_mask_packed_plane(const tsr_mask *m, int64_t b, int64_t h, int64_t *words)
{
  int64_t bb = m->batch == 1 ? 0 : b, hh = m->heads == 1 ? 0 : h;
  if (words)
    *words = m->words;
  if (b < 0 || h < 0 || bb >= m->batch || hh >= m->heads)
    return NULL;
  return m->packed + (bb * m->heads + hh) * m->nq * m->words;
}

double tsr_mask_density(const tsr_mask *m)
{
  int64_t i, n = mask_size(m), nw = n / m->nk * m->words, ones = 0;
  for (i = 0; i < nw; i++) /* bits past nk are clear */
    ones += __builtin_popcountll(m->packed[i]);
  return (double)ones / (double)n;
}

/* Describes how a geometry's block count arises, for error messages. */
static void describe(char *buf, size_t cap, const tsr_geom *g, int query)
{
  int64_t bq, bk;
  int64_t seq = query ? tsr_geom_seq_q(g) : tsr_geom_seq_k(g);
  if (tsr_geom_is_uniform(g, &bq, &bk))
    snprintf(buf, cap, "%s length %lld in blocks of %lld", query ? "query" : "key",
             (long long)seq, (long long)(query ? bq : bk));
  else
    snprintf(buf, cap, "%s length %lld in variable blocks", query ? "query" : "key",
             (long long)seq);
}

/* What a mask extent may be: 1 (broadcast) or the problem's `v` ("1 or 1"
 * would say nothing). */
static void extent_text(char *buf, size_t cap, int64_t v)
{
  if (v == 1)
    snprintf(buf, cap, "1");
  else
    snprintf(buf, cap, "1 or %lld", (long long)v);
}

tsr_status tsr_mask_check(const tsr_mask *m, const tsr_geom *g, int64_t batch, int64_t heads_q,
                          const char *name, tsr_error *err)
{
  char subj[300], how[120];
  if (!m || !g)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_mask_check: null argument");
  if (name)
    snprintf(subj, sizeof subj, "mask '%s'", name);
  else
    snprintf(subj, sizeof subj, "mask");
  if (m->nq != tsr_geom_nq(g)) {
    describe(how, sizeof how, g, 1);
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "%s does not match the geometry: %lld query blocks, but %s gives %lld",
                         subj, (long long)m->nq, how, (long long)tsr_geom_nq(g));
  }
  if (m->nk != tsr_geom_nk(g)) {
    describe(how, sizeof how, g, 0);
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "%s does not match the geometry: %lld key blocks, but %s gives %lld",
                         subj, (long long)m->nk, how, (long long)tsr_geom_nk(g));
  }
  if (m->batch != 1 && m->batch != batch) {
    char want[48];
    extent_text(want, sizeof want, batch);
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "%s does not match the problem: batch %lld, expected %s", subj,
                         (long long)m->batch, want);
  }
  if (m->heads != 1 && m->heads != heads_q) {
    char want[48];
    extent_text(want, sizeof want, heads_q);
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "%s does not match the problem: %lld heads, expected %s (query heads)",
                         subj, (long long)m->heads, want);
  }
  return TSR_OK;
}

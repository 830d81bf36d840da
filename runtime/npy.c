/*
 * npy.c: NumPy .npy files in and out, and half / bfloat16 conversions.
 *
 * Masks and tensors reach Tessera as .npy so that a PyTorch user can
 * np.save what their sparse-attention method produced.  The loader is the
 * first thing every user input passes through, so it trusts nothing: the
 * header is parsed as the small Python dict literal it is (not searched for
 * substrings), every size is overflow-checked, and the payload length must
 * match the shape exactly.  Cost: one read of the file into one malloc'ed
 * buffer; the header parse is linear in its (bounded) length.
 *
 * Saving goes through the output transactions of files.c: a temporary file
 * beside the target, renamed onto it, so a failure never leaves a partial
 * file under the final name; tsri_npy_write lets a command make several
 * arrays the outputs of one transaction.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"

/* Headers this long are not something NumPy writes for <= 8 dimensions;
 * refusing them bounds the allocation a hostile file can cause. */
#define NPY_MAX_HEADER (1 << 16)

/* The one table of dtypes: the .npy code, the size, and the one name the
 * library, its tools, kernel variant names, catalogs and lookup tables
 * spell each dtype with (tsr_dtype_name, tsr_dtype_parse). */
static const struct {
  tsr_dtype dt;
  const char *code; /* descr without the byte-order character */
  size_t size;
  const char *name;
} dtype_table[] = {
    {TSR_DT_BOOL, "b1", 1, "bool"},     {TSR_DT_U8, "u1", 1, "uint8"},
    {TSR_DT_I32, "i4", 4, "int32"},     {TSR_DT_I64, "i8", 8, "int64"},
    {TSR_DT_F16, "f2", 2, "fp16"},      {TSR_DT_BF16, NULL, 2, "bf16"},
    {TSR_DT_F32, "f4", 4, "float32"},   {TSR_DT_F64, "f8", 8, "float64"},
};
#define N_DTYPES (sizeof dtype_table / sizeof dtype_table[0])

size_t tsr_dtype_size(tsr_dtype dt)
{
  size_t i;
  for (i = 0; i < N_DTYPES; i++)
    if (dtype_table[i].dt == dt)
      return dtype_table[i].size;
  return 0;
}

const char *tsr_dtype_name(tsr_dtype dt)
{
  size_t i;
  for (i = 0; i < N_DTYPES; i++)
    if (dtype_table[i].dt == dt)
      return dtype_table[i].name;
  return "unknown";
}

int tsr_dtype_parse(const char *name, tsr_dtype *out)
{
  size_t i;
  for (i = 0; name && i < N_DTYPES; i++)
    if (!strcmp(dtype_table[i].name, name)) {
      *out = dtype_table[i].dt;
      return 0;
    }
  return -1;
}

int64_t tsr_array_numel(const tsr_array *a)
{
  int64_t n = 1;
  int i;
  if (!a || a->ndim < 0 || a->ndim > TSR_MAX_DIMS)
    return 0;
  for (i = 0; i < a->ndim; i++)
    if (a->shape[i] < 0 || __builtin_mul_overflow(n, a->shape[i], &n))
      return -1;
  return n;
}

void tsr_npy_free(tsr_array *a)
{
  if (a) {
    free(a->data);
    memset(a, 0, sizeof *a);
  }
}

/* ---- header parsing --------------------------------------------------- */

typedef struct {
  const char *s, *end;
} cursor;

static void skip_ws(cursor *c)
{
  while (c->s < c->end && (*c->s == ' ' || *c->s == '\t' || *c->s == '\n' || *c->s == '\r'))
    c->s++;
}

static int accept(cursor *c, char ch)
{
  skip_ws(c);
  if (c->s < c->end && *c->s == ch) {
    c->s++;
    return 1;
  }
  return 0;
}

/* A quoted Python string without escapes (NumPy never writes any). */
static int parse_str(cursor *c, char *buf, size_t cap)
{
  char q;
  size_t n = 0;
  skip_ws(c);
  if (c->s >= c->end || (*c->s != '\'' && *c->s != '"'))
    return -1;
  q = *c->s++;
  while (c->s < c->end && *c->s != q) {
    if (*c->s == '\\' || n + 1 >= cap)
      return -1;
    buf[n++] = *c->s++;
  }
  if (c->s >= c->end)
    return -1;
  c->s++;
  buf[n] = '\0';
  return 0;
}

static int parse_word(cursor *c, const char *w)
{
  size_t n = strlen(w);
  skip_ws(c);
  if ((size_t)(c->end - c->s) >= n && !memcmp(c->s, w, n)) {
    c->s += n;
    return 0;
  }
  return -1;
}

/* "(3, 4)", "(5,)", "()".  Python ints may carry an 'L' suffix (NumPy 1.x
 * files written by Python 2); accept it. */
static int parse_shape(cursor *c, tsr_array *a, char *why, size_t whycap)
{
  if (!accept(c, '('))
    return snprintf(why, whycap, "malformed shape in header"), -1;
  a->ndim = 0;
  for (;;) {
    int64_t v = 0;
    int digits = 0;
    if (accept(c, ')'))
      return 0;
    skip_ws(c);
    while (c->s < c->end && *c->s >= '0' && *c->s <= '9') {
      if (v > (INT64_MAX - 9) / 10)
        return snprintf(why, whycap, "shape dimension too large"), -1;
      v = v * 10 + (*c->s++ - '0');
      digits++;
    }
    if (!digits)
      return snprintf(why, whycap, "malformed shape in header"), -1;
    if (c->s < c->end && *c->s == 'L')
      c->s++;
    if (a->ndim == TSR_MAX_DIMS)
      return snprintf(why, whycap, "more than %d dimensions", TSR_MAX_DIMS), -1;
    a->shape[a->ndim++] = v;
    if (accept(c, ')'))
      return 0;
    if (!accept(c, ','))
      return snprintf(why, whycap, "malformed shape in header"), -1;
  }
}

static int host_is_little_endian(void)
{
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

/* Parses the header dict into a (dtype, ndim, shape).  Returns the status
 * and writes a reason into `why`. */
static tsr_status parse_header(const char *text, size_t len, tsr_array *a, char *why,
                               size_t whycap)
{
  cursor c = {text, text + len};
  int have_descr = 0, have_order = 0, have_shape = 0;
  char key[32], descr[32];
  if (!accept(&c, '{'))
    return snprintf(why, whycap, "malformed header (expected a dict)"), TSR_ERR_FORMAT;
  for (;;) {
    if (accept(&c, '}'))
      break;
    if (parse_str(&c, key, sizeof key) || !accept(&c, ':'))
      return snprintf(why, whycap, "malformed header dict"), TSR_ERR_FORMAT;
    if (!strcmp(key, "descr")) {
      if (parse_str(&c, descr, sizeof descr))
        return snprintf(why, whycap, "malformed descr in header"), TSR_ERR_FORMAT;
      have_descr = 1;
    } else if (!strcmp(key, "fortran_order")) {
      if (!parse_word(&c, "True"))
        return snprintf(why, whycap, "fortran order is not supported (save a C-order array)"),
               TSR_ERR_FORMAT;
      if (parse_word(&c, "False"))
        return snprintf(why, whycap, "malformed fortran_order in header"), TSR_ERR_FORMAT;
      have_order = 1;
    } else if (!strcmp(key, "shape")) {
      if (parse_shape(&c, a, why, whycap))
        return TSR_ERR_FORMAT;
      have_shape = 1;
    } else {
      return snprintf(why, whycap, "unexpected key '%s' in header", key), TSR_ERR_FORMAT;
    }
    if (accept(&c, '}'))
      break;
    if (!accept(&c, ','))
      return snprintf(why, whycap, "malformed header dict"), TSR_ERR_FORMAT;
  }
  skip_ws(&c);
  if (c.s != c.end)
    return snprintf(why, whycap, "trailing text after header dict"), TSR_ERR_FORMAT;
  if (!have_descr || !have_order || !have_shape)
    return snprintf(why, whycap, "header lacks '%s'",
                    !have_descr ? "descr" : !have_order ? "fortran_order" : "shape"),
           TSR_ERR_FORMAT;
  {
    char order = descr[0];
    const char *code = descr + 1;
    size_t i;
    if (order != '<' && order != '>' && order != '|' && order != '=')
      code = descr, order = '|';
    for (i = 0; i < N_DTYPES; i++) {
      if (!dtype_table[i].code || strcmp(dtype_table[i].code, code))
        continue;
      if (dtype_table[i].size > 1 &&
          (order == '>' || order == '|' || (order == '=' && !host_is_little_endian())))
        return snprintf(why, whycap, "big-endian or unordered dtype '%s' is not supported",
                        descr),
               TSR_ERR_DTYPE;
      a->dtype = dtype_table[i].dt;
      return TSR_OK;
    }
    return snprintf(why, whycap, "unsupported dtype '%s'", descr), TSR_ERR_DTYPE;
  }
}

static uint32_t le32(const unsigned char *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

tsr_status tsr_npy_load(const char *path, tsr_array *out, tsr_error *err)
{
  FILE *f = NULL;
  unsigned char pre[12];
  char *header = NULL, why[160];
  size_t hlen, prelen, nbytes;
  int64_t numel = 1;
  long long fsize, data_at;
  struct stat st;
  tsr_array a;
  tsr_status s = TSR_OK;
  int i;

  if (out)
    memset(out, 0, sizeof *out);
  if (!path || !out)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_npy_load: null argument");
  memset(&a, 0, sizeof a);
  /* stat before open: a FIFO or a device is refused, not waited on */
  f = tsri_in_open(path, "cannot open", err);
  if (!f)
    return TSR_ERR_IO;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    s = tsr_error_set(err, TSR_ERR_IO, "cannot read '%s': not a regular file", path);
    goto done;
  }
  fsize = (long long)st.st_size;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
    s = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read '%s': bad magic (not a .npy file)",
                      path);
    goto done;
  }
  if (pre[6] == 1) {
    hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    prelen = 10;
  } else if (pre[6] == 2 || pre[6] == 3) {
    if (fread(pre + 10, 1, 2, f) != 2) {
      s = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read '%s': truncated header", path);
      goto done;
    }
    hlen = le32(pre + 8);
    prelen = 12;
  } else {
    s = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read '%s': unsupported .npy version %d.%d",
                      path, pre[6], pre[7]);
    goto done;
  }
  if (hlen > NPY_MAX_HEADER) {
    s = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read '%s': header length %zu exceeds %d",
                      path, hlen, NPY_MAX_HEADER);
    goto done;
  }
  header = malloc(hlen + 1);
  if (!header) {
    s = tsr_error_set(err, TSR_ERR_NOMEM, "cannot read '%s': out of memory", path);
    goto done;
  }
  if (fread(header, 1, hlen, f) != hlen) {
    s = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read '%s': truncated header", path);
    goto done;
  }
  header[hlen] = '\0';
  if (memchr(header, '\0', hlen)) {
    s = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read '%s': malformed header (nul byte)",
                      path);
    goto done;
  }
  s = parse_header(header, hlen, &a, why, sizeof why);
  if (s != TSR_OK) {
    s = tsr_error_set(err, s, "cannot read '%s': %s", path, why);
    goto done;
  }
  for (i = 0; i < a.ndim; i++) {
    if (a.shape[i] && numel > INT64_MAX / 8 / a.shape[i]) {
      s = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read '%s': shape too large", path);
      goto done;
    }
    numel *= a.shape[i];
  }
  if ((uint64_t)numel * tsr_dtype_size(a.dtype) > (uint64_t)SIZE_MAX) {
    s = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read '%s': shape too large", path);
    goto done;
  }
  nbytes = (size_t)numel * tsr_dtype_size(a.dtype);
  data_at = (long long)(prelen + hlen);
  if (fsize - data_at != (long long)nbytes) {
    s = tsr_error_set(err, TSR_ERR_FORMAT,
                      "cannot read '%s': %s: expected %zu data bytes for shape and dtype %s, "
                      "found %lld",
                      path, fsize - data_at < (long long)nbytes ? "truncated" : "trailing bytes",
                      nbytes, tsr_dtype_name(a.dtype), fsize - data_at);
    goto done;
  }
  /* malloc(0) may return NULL; an empty array still gets a buffer. */
  a.data = malloc(nbytes ? nbytes : 1);
  if (!a.data) {
    s = tsr_error_set(err, TSR_ERR_NOMEM, "cannot read '%s': out of memory for %zu bytes",
                      path, nbytes);
    goto done;
  }
  if (fread(a.data, 1, nbytes, f) != nbytes) {
    s = tsr_error_set(err, TSR_ERR_IO, "cannot read '%s': %s", path,
                      ferror(f) ? strerror(errno) : "truncated data");
    goto done;
  }
  if (a.dtype == TSR_DT_BOOL) {
    const uint8_t *b = a.data;
    int64_t j;
    for (j = 0; j < numel; j++)
      if (b[j] > 1) {
        s = tsr_error_set(err, TSR_ERR_FORMAT,
                          "cannot read '%s': bool element %lld has byte value %u", path,
                          (long long)j, b[j]);
        goto done;
      }
  }
  *out = a;
  a.data = NULL;
done:
  free(a.data);
  free(header);
  if (f)
    fclose(f);
  return s;
}

/* ---- saving ------------------------------------------------------------ */

tsr_status tsri_npy_write(FILE *f, const char *path, const tsr_array *a, tsr_error *err)
{
  char dict[512];
  unsigned char pre[12];
  size_t dlen, prelen, total, pad, nbytes, i;
  const char *code = NULL;
  int k;
  int64_t numel;

  if (!f || !path || !a)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsri_npy_write: null argument");
  for (i = 0; i < N_DTYPES; i++)
    if (dtype_table[i].dt == a->dtype)
      code = dtype_table[i].code;
  if (!code)
    return tsr_error_set(err, TSR_ERR_DTYPE, "cannot write '%s': dtype %s has no .npy form",
                         path, tsr_dtype_name(a->dtype));
  if (a->ndim < 0 || a->ndim > TSR_MAX_DIMS)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot write '%s': %d dimensions", path,
                         a->ndim);
  for (k = 0; k < a->ndim; k++)
    if (a->shape[k] < 0)
      return tsr_error_set(err, TSR_ERR_INVALID, "cannot write '%s': negative dimension %lld",
                           path, (long long)a->shape[k]);
  numel = tsr_array_numel(a);
  if (numel < 0 || (uint64_t)numel > SIZE_MAX / tsr_dtype_size(a->dtype))
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot write '%s': shape too large", path);
  nbytes = (size_t)numel * tsr_dtype_size(a->dtype);
  if (nbytes && !a->data)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot write '%s': no data", path);

  dlen = (size_t)snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                          tsr_dtype_size(a->dtype) == 1 ? '|' : '<', code);
  for (k = 0; k < a->ndim; k++)
    dlen += (size_t)snprintf(dict + dlen, sizeof dict - dlen, "%lld%s", (long long)a->shape[k],
                             a->ndim == 1 ? "," : k + 1 < a->ndim ? ", " : "");
  dlen += (size_t)snprintf(dict + dlen, sizeof dict - dlen, "), }");
  /* Version 1 when the header fits its 16-bit length, padded (spaces, then
   * '\n') so the data starts on a 64-byte boundary as NumPy does. */
  prelen = 10;
  total = prelen + dlen + 1;
  pad = (64 - total % 64) % 64;
  if (dlen + 1 + pad > 65535) {
    prelen = 12;
    total = prelen + dlen + 1;
    pad = (64 - total % 64) % 64;
  }
  memcpy(pre, "\x93NUMPY", 6);
  pre[6] = prelen == 10 ? 1 : 2;
  pre[7] = 0;
  {
    size_t hl = dlen + pad + 1;
    pre[8] = hl & 0xff;
    pre[9] = (hl >> 8) & 0xff;
    if (prelen == 12) {
      pre[10] = (hl >> 16) & 0xff;
      pre[11] = (hl >> 24) & 0xff;
    }
  }
  memset(dict + dlen, ' ', pad);
  dict[dlen + pad] = '\n';
  if (fwrite(pre, 1, prelen, f) != prelen || fwrite(dict, 1, dlen + pad + 1, f) != dlen + pad + 1 ||
      (nbytes && fwrite(a->data, 1, nbytes, f) != nbytes))
    return tsr_error_set(err, TSR_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
  return TSR_OK;
}

tsr_status tsr_npy_save(const char *path, const tsr_array *a, tsr_error *err)
{
  tsr_out *t;
  FILE *f;
  tsr_status s;
  if (!path || !a)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_npy_save: null argument");
  if ((s = tsri_out_begin(&t, err)) != TSR_OK)
    return s;
  if ((s = tsri_out_file(t, path, 0, &f, err)) == TSR_OK &&
      (s = tsri_npy_write(f, path, a, err)) == TSR_OK)
    return tsri_out_commit(t, err);
  tsri_out_abort(t);
  return s;
}

/* ---- half and bfloat16 ---------------------------------------------------
 * Bit manipulation rather than _Float16 so the results do not depend on the
 * compiler's or the FPU's support; every path rounds to nearest even. */

static uint32_t f32_bits(float f)
{
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}

static float bits_f32(uint32_t x)
{
  float f;
  memcpy(&f, &x, 4);
  return f;
}

float tsr_half_to_float(uint16_t h)
{
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) {
    /* zero or subnormal: m * 2^-24 is exact in float */
    float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 31)
    return bits_f32(sign | 0x7f800000u | (m << 13)); /* inf, or NaN keeping its payload */
  return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t tsr_float_to_half(float f)
{
  uint32_t x = f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    if (ax > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
      return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    return (uint16_t)(sign | 0x7c00);
  }
  if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
    return (uint16_t)(sign | 0x7c00);
  if (ax >= 0x38800000u) { /* normal half */
    uint32_t h = ((ax >> 23) - 112) << 10 | ((ax >> 13) & 0x3ff);
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
      h++; /* a carry into the exponent is the correct rounding */
    return (uint16_t)(sign | h);
  }
  if (ax <= 0x33000000u) /* <= 2^-25: ties to even give zero */
    return sign;
  {
    uint32_t mant = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - (ax >> 23); /* 14..24 */
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
      h++;
    return (uint16_t)(sign | h);
  }
}

float tsr_bf16_to_float(uint16_t h)
{
  return bits_f32((uint32_t)h << 16);
}

uint16_t tsr_float_to_bf16(float f)
{
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x0040); /* quiet NaN, sign kept */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

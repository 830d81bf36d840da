/*
 * tests/fuzz/fuzz.h: helpers shared by the libFuzzer harnesses of
 * tests/fuzz (header-only, static) and by mkseeds, which writes their seeds.
 *
 *  - fz_dir: one scratch folder per harness process (under $TMPDIR or /tmp),
 *    removed at exit; harnesses write each input's files there, since the
 *    loaders under test read paths, not memory.
 *  - fz_write: a file of exactly the given bytes.
 *  - FZ_FINDING: a broken promise of the library (a plan that does not
 *    verify, a failure without a message): prints it and aborts, which
 *    libFuzzer records as a crash with the input that caused it.
 *  - FZ_CHECK_ERR: every failure names its problem (tessera.h: a tsr_error
 *    holds the status returned and a one-line message).
 *  - The folder format of fuzz_corpus (fz_unpack / fz_pack_*): a manifest
 *    followed by files, each introduced by FZ_FILE_MARK and a relative name.
 *  - fz_ctl: control bytes taken from the front of an input.
 */
#ifndef TSR_FUZZ_H
#define TSR_FUZZ_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools.h" /* tessera.h, the corpus and the database writers */
#include "util.h"

#define FZ_FINDING(...)                                                              \
  do {                                                                               \
    fprintf(stderr, "FINDING %s:%d: ", __FILE__, __LINE__);                          \
    fprintf(stderr, __VA_ARGS__);                                                    \
    fputc('\n', stderr);                                                             \
    abort();                                                                         \
  } while (0)

/* A failed call must return the status its error records, with a message. */
#define FZ_CHECK_ERR(st, err, what)                                                  \
  do {                                                                               \
    if ((st) != TSR_OK && ((err).status != (st) || !(err).text[0]))                  \
      FZ_FINDING("%s failed with status %d but the error holds status %d, text '%s'", \
                 (what), (int)(st), (int)(err).status, (err).text);                  \
  } while (0)

/* ---- scratch folder ------------------------------------------------------ */

static char fz_dir_buf[512];

static void fz_dir_remove(void)
{
  if (fz_dir_buf[0])
    tu_rmtree(fz_dir_buf);
}

/* The process's scratch folder, made on first use. */
static inline const char *fz_dir(void)
{
  if (!fz_dir_buf[0]) {
    tu_tmpdir(fz_dir_buf, sizeof fz_dir_buf);
    atexit(fz_dir_remove);
  }
  return fz_dir_buf;
}

/* dir/name into buf (static storage of the caller). */
static inline const char *fz_path(char *buf, size_t cap, const char *dir, const char *name)
{
  snprintf(buf, cap, "%s/%s", dir, name);
  return buf;
}

/* Writes exactly n bytes to path, replacing it; aborts when the scratch
 * folder cannot be written (a broken harness, not a finding). */
static inline void fz_write(const char *path, const void *data, size_t n)
{
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) {
    fprintf(stderr, "fuzz harness: cannot write '%s': %s\n", path, strerror(errno));
    abort();
  }
}

/* ---- control bytes -------------------------------------------------------- */

/* The whole of a small file; NULL on error (the caller frees). */
static inline uint8_t *fz_slurp(const char *path, size_t *n)
{
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  long len;
  if (f && !fseek(f, 0, SEEK_END) && (len = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) &&
      (buf = malloc((size_t)len + 1)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
    fclose(f);
    *n = (size_t)len;
    return buf;
  }
  free(buf);
  if (f)
    fclose(f);
  return NULL;
}

/* Takes `n` control bytes from the front of the input (zeros when short). */
static inline void fz_ctl(const uint8_t **data, size_t *size, uint8_t *ctl, size_t n)
{
  size_t k = *size < n ? *size : n;
  memset(ctl, 0, n);
  memcpy(ctl, *data, k);
  *data += k;
  *size -= k;
}

/* ---- fuzz_mask's control bytes (fuzz_mask.c reads them, mkseeds writes) ---- */

/* Byte 0: block size codes (q low nibble, k high nibble); 1: ragged last
 * blocks; 2: flags (FZ_M_*) and the KV head divisor (bits 6-7); 3: tile rows
 * (low 5 bits, 0 = planner's choice), mapping (bits 5-6), head dim bit 2;
 * 4: tile columns (low 4 bits), tasks (bits 4-5), head dim bits 0-1;
 * 5: split chunk; 6: multiprocessors (0 = 132); 7: seed. */
#define FZ_MASK_CTL 8
enum {
  FZ_M_VARIABLE = 1, /* variable blocks from the seed */
  FZ_M_PACKED = 2,   /* read the file as packed bits */
  FZ_M_BATCH = 4,    /* a batch-1 mask broadcast over batch 2 */
  FZ_M_HEADS = 8,    /* a 1-head mask broadcast over 3 heads */
  FZ_M_EXEC = 16,    /* compare the CPU executor with the reference */
  FZ_M_F16 = 32      /* fp16 problem (else bf16) */
};

static inline int64_t fz_block_size(int code)
{
  static const int64_t t[16] = {1, 3, 16, 32, 48, 64, 64, 96, 100, 128, 128, 160, 192, 256, 384, 512};
  return t[code & 15];
}

static inline int64_t fz_head_dim(int code)
{
  static const int64_t t[8] = {64, 128, 8, 16, 32, 80, 96, 256};
  return t[code & 7];
}

/* ---- folders packed into one input (fuzz_corpus) --------------------------- */

/* Input = manifest.json bytes, then for each further file: FZ_FILE_MARK,
 * its name relative to the folder, '\n', its bytes. */
#define FZ_FILE_MARK "\n#@file "
#define FZ_NAME_MAX 200

static inline const uint8_t *fz_find(const uint8_t *p, const uint8_t *end, const char *s)
{
  size_t n = strlen(s);
  for (; (size_t)(end - p) >= n; p++)
    if (!memcmp(p, s, n))
      return p;
  return NULL;
}

/* A name the harness may create: letters, digits, '.', '_', '-' and '/'
 * between non-empty components, none of them "." or "..", so every file
 * lands inside the folder. */
static inline int fz_name_ok(const char *s)
{
  const char *c = s;
  if (!*s || *s == '/')
    return 0;
  for (; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '.' || *c == '_' || *c == '-' || *c == '/'))
      return 0;
  for (c = s; *c;) {
    size_t n = strcspn(c, "/");
    if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
      return 0;
    c += n;
    if (*c == '/')
      c++;
  }
  return c[-1] != '/';
}

/* Creates the parent folders of dir/name; -1 when one of them is a file
 * already (the input named "masks" and then "masks/x.npy"). */
static inline int fz_mkparents(const char *dir, const char *name)
{
  char p[1024];
  size_t i, d = strlen(dir);
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  for (i = d + 1; p[i]; i++)
    if (p[i] == '/') {
      p[i] = '\0';
      if (mkdir(p, 0700) && (errno != EEXIST || stat(p, &sb) || !S_ISDIR(sb.st_mode)))
        return -1;
      p[i] = '/';
    }
  return 0;
}

/* Writes the folder an input describes into dir (which exists, empty).
 * Files with unusable names are skipped; a later file of the same name
 * replaces an earlier one.  Returns the number of files written. */
static inline int fz_unpack(const uint8_t *data, size_t size, const char *dir)
{
  const uint8_t *end = data + size, *p = data, *next;
  char path[1024], name[FZ_NAME_MAX + 1];
  int files = 0;
  size_t mark = strlen(FZ_FILE_MARK);
  next = fz_find(p, end, FZ_FILE_MARK);
  fz_write(fz_path(path, sizeof path, dir, "manifest.json"), p, (size_t)((next ? next : end) - p));
  files++;
  while (next) {
    const uint8_t *nl, *body;
    size_t n;
    p = next + mark;
    nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
      break;
    body = nl + 1;
    next = fz_find(body, end, FZ_FILE_MARK);
    n = (size_t)(nl - p);
    if (n == 0 || n > FZ_NAME_MAX || memchr(p, '\0', n))
      continue;
    memcpy(name, p, n);
    name[n] = '\0';
    if (!fz_name_ok(name) || !strcmp(name, "manifest.json"))
      continue;
    if (fz_mkparents(dir, name))
      continue;
    /* A name that is a folder already (masks when masks/x.npy came first)
     * cannot be a file too: skip it. */
    {
      struct stat sb;
      if (!stat(fz_path(path, sizeof path, dir, name), &sb) && S_ISDIR(sb.st_mode))
        continue;
    }
    fz_write(path, body, (size_t)((next ? next : end) - body));
    files++;
  }
  return files;
}

#endif

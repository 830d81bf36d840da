/*
 * plan_masks.c: writes block masks and block-size arrays as .npy for the
 * `tessera plan` tests and the planning benchmark (BENCHMARKS.md).
 *
 *   plan_masks mask OUT.npy BATCH HEADS NQ NK FAMILY DENSITY SEED
 *       FAMILY: random (each pair with probability DENSITY), band (a
 *       diagonal band with a first-column sink, sized to DENSITY, as Sparse
 *       VideoGen's spatial heads), strided (|i - j| a multiple of a stride,
 *       as its temporal heads, stride 1/DENSITY), dense, empty.
 *   plan_masks sizes OUT.npy S1 S2 ...   (int64 1-D)
 *   plan_masks pack IN.npy OUT.npy   (a mask as uint8 packed rows, LSB
 *       first, [B, H, NQ, ceil(NK/8)], for `tessera plan --mask-bits`)
 *   plan_masks floor BYTES   (the memory floor beside the planning figures:
 *       best time over 40 rounds to read, and to write, BYTES bytes of a
 *       buffer reused as the planner reuses its own, on one thread)
 *
 * Masks go through tsr_mask_from_bytes and tsr_mask_save, the library's own
 * writer.  Cost: one pass over NQ x NK x HEADS x BATCH bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera.h"
#include "util.h"

static int usage(void)
{
  fprintf(stderr, "usage: plan_masks mask OUT.npy BATCH HEADS NQ NK FAMILY DENSITY SEED\n"
                  "       plan_masks sizes OUT.npy S1 S2 ...\n"
                  "       plan_masks pack IN.npy OUT.npy\n"
                  "       plan_masks floor BYTES\n");
  return 2;
}

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Best-of-40 read (an OR over 64-bit words) and write (memset) of n
 * bytes. */
static int floor_probe(int64_t n)
{
  uint64_t *a = malloc((size_t)n + 64), *b = malloc((size_t)n + 64), acc = 0;
  double rd = 1e30, wr = 1e30;
  int64_t i, words = n / 8;
  int r;
  if (!a || !b || n < 64)
    return usage();
  memset(a, 1, (size_t)n);
  memset(b, 0, (size_t)n);
  for (r = 0; r < 40; r++) {
    double t = now_us();
    uint64_t x[8] = {0};
    for (i = 0; i + 8 <= words; i += 8) { /* eight chains: bound by memory, not latency */
      x[0] |= a[i], x[1] |= a[i + 1], x[2] |= a[i + 2], x[3] |= a[i + 3];
      x[4] |= a[i + 4], x[5] |= a[i + 5], x[6] |= a[i + 6], x[7] |= a[i + 7];
    }
    acc |= (x[0] | x[1] | x[2] | x[3] | x[4] | x[5] | x[6] | x[7]) ^ (uint64_t)r;
    t = now_us() - t;
    if (t < rd)
      rd = t;
    t = now_us();
    memset(b, r, (size_t)n);
    t = now_us() - t;
    if (t < wr)
      wr = t;
  }
  printf("floor: %lld bytes, read %.1f us (%.1f GB/s), write %.1f us (%.1f GB/s) [%llx]\n",
         (long long)n, rd, (double)n / rd / 1e3, wr, (double)n / wr / 1e3,
         (unsigned long long)(acc & 1));
  free(a);
  free(b);
  return 0;
}

int main(int argc, char **argv)
{
  if (argc == 3 && !strcmp(argv[1], "floor"))
    return floor_probe(strtoll(argv[2], NULL, 10));
  if (argc >= 4 && !strcmp(argv[1], "sizes")) {
    int64_t n = argc - 3, i, shape[1] = {n};
    int64_t *s = malloc((size_t)n * sizeof *s);
    for (i = 0; i < n; i++)
      s[i] = strtoll(argv[3 + i], NULL, 10);
    tu_write_npy(argv[2], "<i8", 1, shape, s, (size_t)n * sizeof *s);
    free(s);
    return 0;
  }
  if (argc == 4 && !strcmp(argv[1], "pack")) {
    tsr_mask *m = NULL;
    tsr_error err = {0};
    int64_t shape[4], nb, rows, i, j;
    uint8_t *out;
    const uint8_t *bytes;
    if (tsr_mask_load(argv[2], &m, &err)) {
      fprintf(stderr, "plan_masks: %s\n", err.text);
      return 1;
    }
    nb = (tsr_mask_nk(m) + 7) / 8;
    rows = tsr_mask_batch(m) * tsr_mask_heads(m) * tsr_mask_nq(m);
    shape[0] = tsr_mask_batch(m), shape[1] = tsr_mask_heads(m), shape[2] = tsr_mask_nq(m);
    shape[3] = nb;
    out = calloc((size_t)(rows * nb), 1);
    bytes = tsr_mask_bits(m);
    for (i = 0; i < rows; i++)
      for (j = 0; j < tsr_mask_nk(m); j++)
        out[i * nb + j / 8] |= (uint8_t)(bytes[i * tsr_mask_nk(m) + j] << (j % 8));
    tu_write_npy(argv[3], "|u1", 4, shape, out, (size_t)(rows * nb));
    free(out);
    tsr_mask_destroy(m);
    return 0;
  }
  if (argc == 10 && !strcmp(argv[1], "mask")) {
    int64_t B = atoll(argv[3]), H = atoll(argv[4]), nq = atoll(argv[5]), nk = atoll(argv[6]);
    const char *fam = argv[7];
    double d = atof(argv[8]);
    tu_rng r = {strtoull(argv[9], NULL, 10)};
    int64_t p, i, j, n = B * H * nq * nk;
    uint8_t *bits;
    tsr_mask *m = NULL;
    tsr_error err = {0};
    if (B < 1 || H < 1 || nq < 1 || nk < 1)
      return usage();
    bits = malloc((size_t)n);
    for (p = 0; p < B * H; p++) {
      uint8_t *pl = bits + p * nq * nk;
      /* band half-width w from density d: (2w + 1) / nk ~ d */
      int64_t w = (int64_t)(d * (double)nk / 2.0), stride = d > 0 ? (int64_t)(1.0 / d + 0.5) : 1;
      if (stride < 1)
        stride = 1;
      for (i = 0; i < nq; i++)
        for (j = 0; j < nk; j++) {
          int64_t c = i * nk / nq, v;
          if (!strcmp(fam, "random"))
            v = tu_uniform(&r) < d;
          else if (!strcmp(fam, "band"))
            v = j == 0 || (c - j <= w && j - c <= w);
          else if (!strcmp(fam, "strided"))
            v = (c - j) % stride == 0;
          else if (!strcmp(fam, "dense"))
            v = 1;
          else if (!strcmp(fam, "empty"))
            v = 0;
          else
            return usage();
          pl[i * nk + j] = (uint8_t)v;
        }
    }
    if (tsr_mask_from_bytes(B, H, nq, nk, bits, &m, &err) || tsr_mask_save(argv[2], m, &err)) {
      fprintf(stderr, "plan_masks: %s\n", err.text);
      return 1;
    }
    printf("density %.4f\n", tsr_mask_density(m));
    tsr_mask_destroy(m);
    free(bits);
    return 0;
  }
  return usage();
}

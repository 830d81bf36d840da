/*
 * gpu_attn.c: GPU correctness of the generated kernels against a float64
 * CPU reference.  Plain C (the GPU machine has no Check); exits 77 where no
 * driver or GPU is present.
 *
 * Each case builds a problem (batch, GQA heads, ragged or rectangular
 * sequences, uniform or variable logical blocks, BHSD or BSHD strides, bf16
 * or fp16, head dim 64 or 128), a block mask (random, band + sink, empty
 * rows and heads, full), and plans for it two ways: with the test's own
 * builder of plan_layout.h records (row tasks, split rows with merges, GQA
 * packs: exercises the kernel contract independently of the planner) and,
 * where the planner is present, with tsr_plan_create over every mapping and
 * task layout.  Each plan runs with every bundle variant that serves it on
 * this device's target (so the sm80 family is tested on sm_90a next to the
 * sm90 family).  Outputs are poisoned first with a huge finite value (so a
 * row left unwritten fails even where NaN is expected); a NaN or infinity
 * where the reference has none (or the reverse), a relative error of 1e-2
 * or more in o, or an lse off by 1e-2 fails.  One case is also captured
 * into a CUDA graph and replayed.
 *
 * Non-finite inputs (nf_cases): NaN or inf in q, in k, in v, rows whose
 * selected scores are all -inf, and an inf k with a NaN v under it (the
 * kinds of tests/util.h), over split rows with merges, GQA packs, empty
 * rows, variable blocks and full tiles, with every serving variant of both
 * families and the planner's plans: NaN and inf must sit exactly where the
 * float64 reference has them (the rules of runtime/ref.c).  v is poisoned
 * only at keys of a key block every non-empty query block selects: a
 * non-finite v at a key that some rows of a computed tile do not select
 * reaches those rows through the tensor-core product (0 * NaN), the one
 * known exception runtime/ref.c documents; empty rows must stay zeros.
 *
 *   gpu_attn [--quick | --bench | --bench-all | --fp8 | --fp8-diag | --fp8-bench | --fp8-parts |
 *             --fp8-ab DIR[,DIR...]] [--seed N] [--only PREFIX] [--case SUBSTR]
 *   --quick: a subset, for the sanitizers; --bench: time every variant on a
 *   Wan2.1-sized problem (no correctness check); --bench-all: the same for
 *   head dims 128 and 64, bf16 and fp16, blocks 128 and 64 (and 128 x 128
 *   blocks on 128 x 64 tiles); --fp8: the FP8
 *   cases, and only they (the default run leaves them out; issue 18, see
 *   fp8_cases); --fp8-bench: FP8 against bf16 on
 *   the same plans, request time including the quantization; --fp8-parts:
 *   the same, and each kernel of each launch timed alone (time_parts);
 *   --fp8-ab: FP8 request time of several kernel bundles side by side in
 *   one process (fp8_ab; TSR_AB_TOKENS=32760 or 75600 runs one size, also
 *   for --fp8-bench and --fp8-parts); --fp8-diag: the device against the
 *   emulation under each model of the tensor cores' P V sums (fp8_diag);
 *   --case SUBSTR: only the FP8 cases whose label holds SUBSTR (to run them
 *   side by side).
 */
#include "bundle.h"
#include "cuda_impl.h"
#include "fp8.h"
#include "plan_impl.h"
#include "variant.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h" /* tu_inject_nonfinite */

#define SKIP 77

enum { MK_RANDOM, MK_BAND, MK_EMPTY, MK_FULL };
enum { TL_ROW, TL_SPLIT, TL_PACK };

typedef struct {
  const char *label;
  int B, Hq, Hkv, Sq, Sk, D;
  tsr_dtype dt;
  int bshd;
  int bq, bk;        /* uniform logical blocks; 0 = variable sizes */
  int tm, tn;        /* physical tile */
  int mask;
  double density;
  int layout;        /* own builder's task layout */
  int head_bcast;    /* one mask plane for all heads */
  int quick;         /* part of the --quick subset */
  int gather;        /* own builder: a gather plan (plan_layout.h; bq == tm, 2 bk == tn) */
} tcase;

static const tcase cases[] = {
  { "gqa-random-row", 2, 4, 2, 1000, 1000, 128, TSR_DT_BF16, 0, 64, 64, 128, 64, MK_RANDOM, 0.3, TL_ROW, 0, 1, 0 },
  { "gqa-random-split-bshd", 2, 4, 2, 1000, 1000, 128, TSR_DT_BF16, 1, 64, 64, 128, 64, MK_RANDOM, 0.5, TL_SPLIT, 0, 1, 0 },
  { "gqa-pack-bcast", 1, 8, 2, 700, 700, 128, TSR_DT_F16, 0, 64, 64, 128, 64, MK_RANDOM, 0.4, TL_PACK, 1, 0, 0 },
  { "fp16-d64-blocks32-rect", 1, 3, 3, 777, 900, 64, TSR_DT_F16, 0, 32, 32, 64, 64, MK_RANDOM, 0.3, TL_ROW, 0, 1, 0 },
  { "bf16-d64-blocks96-split", 1, 2, 1, 1100, 1100, 64, TSR_DT_BF16, 1, 96, 96, 128, 128, MK_RANDOM, 0.4, TL_SPLIT, 0, 0, 0 },
  { "fp16-d128-blocks384-band-pack", 1, 4, 4, 2000, 2000, 128, TSR_DT_F16, 0, 384, 384, 128, 128, MK_BAND, 0, TL_PACK, 1, 0, 0 },
  { "bf16-d128-rect-blocks-empty", 2, 3, 3, 640, 512, 128, TSR_DT_BF16, 1, 128, 64, 64, 64, MK_EMPTY, 0.5, TL_ROW, 0, 1, 0 },
  { "bf16-d128-variable-split", 1, 2, 2, 1500, 1300, 128, TSR_DT_BF16, 0, 0, 0, 128, 64, MK_RANDOM, 0.35, TL_SPLIT, 0, 0, 0 },
  { "fp16-d64-variable-bshd", 2, 2, 1, 900, 1000, 64, TSR_DT_F16, 1, 0, 0, 128, 64, MK_RANDOM, 0.5, TL_ROW, 0, 0, 0 },
  { "bf16-d128-full-aligned", 1, 2, 2, 1024, 1024, 128, TSR_DT_BF16, 0, 128, 64, 128, 64, MK_FULL, 1, TL_ROW, 0, 0, 0 },
  { "bf16-d64-128x128-band-split", 1, 2, 2, 1500, 1500, 64, TSR_DT_BF16, 0, 128, 128, 128, 128, MK_BAND, 0, TL_SPLIT, 0, 0, 0 },
  { "bf16-d128-128x128-random", 1, 4, 2, 1300, 1300, 128, TSR_DT_BF16, 1, 128, 128, 128, 128, MK_RANDOM, 0.3, TL_ROW, 0, 0, 0 },
  /* Tiles no case above has, so that every sm80 variant runs (64x128; d64
   * 128x64 bf16; d64 128x128 fp16): issue 17. */
  { "bf16-d128-64x128-gqa-split", 1, 4, 2, 700, 900, 128, TSR_DT_BF16, 0, 64, 64, 64, 128, MK_RANDOM, 0.4, TL_SPLIT, 0, 0, 0 },
  { "fp16-d128-64x128-blocks32-bshd", 1, 2, 2, 600, 650, 128, TSR_DT_F16, 1, 32, 32, 64, 128, MK_RANDOM, 0.4, TL_ROW, 0, 0, 0 },
  { "bf16-d64-64x128-band-pack", 1, 4, 1, 800, 700, 64, TSR_DT_BF16, 0, 64, 64, 64, 128, MK_BAND, 0, TL_PACK, 1, 0, 0 },
  { "fp16-d64-64x128-empty-bshd", 2, 2, 2, 500, 520, 64, TSR_DT_F16, 1, 64, 64, 64, 128, MK_EMPTY, 0.5, TL_ROW, 0, 0, 0 },
  { "bf16-d64-128x64-split", 1, 3, 3, 900, 1000, 64, TSR_DT_BF16, 0, 64, 64, 128, 64, MK_RANDOM, 0.35, TL_SPLIT, 0, 0, 0 },
  { "fp16-d64-128x128-gqa-bshd", 1, 4, 2, 1000, 900, 64, TSR_DT_F16, 1, 128, 128, 128, 128, MK_RANDOM, 0.4, TL_ROW, 0, 0, 0 },
  /* The plans the sm80 family's users get (issue 17, runtime/context.c):
   * 128x128 blocks subdivided onto 128x64 tiles at d128; and bf16 d64 and
   * fp16 d128 on 64x64 tiles, which no case above had (the 64x64 w2
   * variants). */
  { "bf16-d128-128x128-on-128x64-split-bshd", 1, 4, 2, 1300, 1200, 128, TSR_DT_BF16, 1, 128, 128, 128, 64, MK_RANDOM, 0.35, TL_SPLIT, 0, 0, 0 },
  { "fp16-d128-128x128-on-128x64-empty", 2, 2, 2, 700, 900, 128, TSR_DT_F16, 0, 128, 128, 128, 64, MK_EMPTY, 0.5, TL_ROW, 0, 0, 0 },
  { "bf16-d64-64x64-gqa-pack", 1, 4, 2, 900, 950, 64, TSR_DT_BF16, 0, 64, 64, 64, 64, MK_RANDOM, 0.4, TL_PACK, 1, 1, 0 },
  { "fp16-d128-64x64-split-bshd", 1, 3, 3, 800, 850, 128, TSR_DT_F16, 1, 64, 64, 64, 64, MK_RANDOM, 0.4, TL_SPLIT, 0, 0, 0 },
  /* Gather plans (the kg variants): 128x64 blocks on 128x128 tiles whose
   * halves are any two selected key blocks of the row; ragged key ends
   * (1000 = 15 x 64 + 40: the last block is partial in either half), odd
   * and even counts a row, empty rows and heads, GQA packs, split rows. */
  { "bf16-d128-gather-gqa-split-ragged", 1, 4, 2, 1000, 1000, 128, TSR_DT_BF16, 0, 128, 64, 128, 128, MK_RANDOM, 0.35, TL_SPLIT, 0, 1, 1 },
  { "fp16-d128-gather-empty-bshd", 2, 2, 2, 700, 900, 128, TSR_DT_F16, 1, 128, 64, 128, 128, MK_EMPTY, 0.5, TL_ROW, 0, 0, 1 },
  { "bf16-d64-gather-band-pack", 1, 4, 1, 1100, 1060, 64, TSR_DT_BF16, 0, 128, 64, 128, 128, MK_BAND, 0, TL_PACK, 1, 0, 1 },
  { "fp16-d64-gather-random-bshd", 1, 3, 3, 1300, 1250, 64, TSR_DT_F16, 1, 128, 64, 128, 128, MK_RANDOM, 0.3, TL_ROW, 0, 1, 1 },
  { "bf16-d128-gather-full-split", 1, 2, 2, 1024, 1024, 128, TSR_DT_BF16, 0, 128, 64, 128, 128, MK_FULL, 1, TL_SPLIT, 0, 0, 1 },
  /* 64x64 blocks on 64x128 tiles (two tasks a CTA, d64 only): ragged query
   * and key ends, GQA, empty rows, split rows, packs */
  { "bf16-d64-gather64-gqa-split-ragged", 1, 4, 2, 1000, 1010, 64, TSR_DT_BF16, 0, 64, 64, 64, 128, MK_RANDOM, 0.35, TL_SPLIT, 0, 1, 1 },
  { "fp16-d64-gather64-empty-bshd", 2, 2, 2, 700, 900, 64, TSR_DT_F16, 1, 64, 64, 64, 128, MK_EMPTY, 0.5, TL_ROW, 0, 0, 1 },
  { "bf16-d64-gather64-band-pack-bshd", 1, 4, 1, 1100, 1060, 64, TSR_DT_BF16, 1, 64, 64, 64, 128, MK_BAND, 0, TL_PACK, 1, 0, 1 },
  { "fp16-d64-gather64-random-row", 1, 3, 3, 1300, 1250, 64, TSR_DT_F16, 0, 64, 64, 64, 128, MK_RANDOM, 0.3, TL_ROW, 0, 1, 1 },
};

/* ---- small helpers ------------------------------------------------------ */

static uint64_t rng_state;
static uint32_t rnd(void)
{
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}
static double urand(void) { return rnd() / 2147483648.0; }

static uint16_t f2bf(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h)
{
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static float h2f(uint16_t h)
{
  uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
  float f;
  if (e == 31) u = s | 0x7f800000u | (m << 13);
  else if (e == 0) {
    f = ldexpf((float)m, -24);
    return s ? -f : f;
  } else u = s | ((e + 112) << 23) | (m << 13);
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2h(float f)
{
  /* Inputs here are in [-1, 1] (normal or zero halves), NaN or inf. */
  uint32_t u, s, e, m;
  memcpy(&u, &f, 4);
  s = (u >> 16) & 0x8000;
  if ((u & 0x7fffffff) > 0x7f800000u) return (uint16_t)(s | 0x7e00);
  if ((u & 0x7fffffff) == 0x7f800000u) return (uint16_t)(s | 0x7c00);
  if ((u & 0x7fffffff) < 0x38800000u) return (uint16_t)s;
  e = ((u >> 23) & 255) - 112;
  m = u & 0x7fffff;
  {
    uint32_t h = s | (e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)h;
  }
}
static float to_f(tsr_dtype dt, uint16_t h) { return dt == TSR_DT_BF16 ? bf2f(h) : h2f(h); }
static uint16_t from_f(tsr_dtype dt, float f) { return dt == TSR_DT_BF16 ? f2bf(f) : f2h(f); }

#define CK(call)                                                                  \
  do {                                                                            \
    tsr_error e_;                                                                 \
    tsr_error_clear(&e_);                                                         \
    if (tsri_cu_check(cu, (call), #call, &e_) != TSR_OK) {                         \
      fprintf(stderr, "gpu_attn: %s\n", e_.text);                                 \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* ---- problem ------------------------------------------------------------ */

typedef struct {
  const tcase *c;
  int nq, nk;
  int *qs, *ks;            /* block starts, nq+1 / nk+1 */
  int *qblk, *kblk;        /* token -> block */
  uint8_t *mask;           /* [B][Hq][nq][nk] */
  float *q, *k, *v;        /* rounded to dtype, BHSD */
  double *ref_o;           /* [B][Hq][Sq][D] */
  double *ref_lse;         /* [B][Hq][Sq] */
  double scale;
} prob;

static void make_blocks(int S, int b, int **starts, int *n, int **blk)
{
  int cap = S + 2, i, t = 0;
  *starts = malloc((size_t)cap * sizeof(int));
  *n = 0;
  while (t < S) {
    int sz = b > 0 ? b : 16 + (int)(rnd() % 145);
    (*starts)[(*n)++] = t;
    t += sz;
  }
  (*starts)[*n] = S;
  *blk = malloc((size_t)S * sizeof(int));
  for (i = 0; i < *n; i++)
    for (t = (*starts)[i]; t < (*starts)[i + 1]; t++) (*blk)[t] = i;
}

static uint8_t *mask_at(const prob *P, int b, int h) { return P->mask + ((size_t)b * P->c->Hq + h) * P->nq * P->nk; }

/* The float64 reference over exactly the selected key tokens, in plain
 * IEEE arithmetic (the definition of runtime/ref.c): a row with no
 * selected key gives zeros and lse -inf; otherwise mx is the max score
 * (NaN if one is NaN), p = exp(s - mx) for every selected key, even one
 * whose score is -inf (0 * NaN counts). */
static void compute_ref(prob *P)
{
  const tcase *c = P->c;
  int b, h, i, j, d;
  double *s = malloc((size_t)c->Sk * sizeof(double));
  uint8_t *on = malloc((size_t)c->Sk);
  for (b = 0; b < c->B; b++)
    for (h = 0; h < c->Hq; h++) {
      int hk = h / (c->Hq / c->Hkv);
      const uint8_t *m = mask_at(P, b, h);
      for (i = 0; i < c->Sq; i++) {
        const float *qr = P->q + (((size_t)b * c->Hq + h) * c->Sq + i) * c->D;
        double mx = -INFINITY, sum = 0;
        double *orow = P->ref_o + (((size_t)b * c->Hq + h) * c->Sq + i) * c->D;
        double *lse = P->ref_lse + ((size_t)b * c->Hq + h) * c->Sq + i;
        int any = 0;
        for (d = 0; d < c->D; d++) orow[d] = 0;
        for (j = 0; j < c->Sk; j++) {
          const float *kr = P->k + (((size_t)b * c->Hkv + hk) * c->Sk + j) * c->D;
          double acc = 0;
          on[j] = m[(size_t)P->qblk[i] * P->nk + P->kblk[j]];
          if (!on[j]) continue;
          any = 1;
          for (d = 0; d < c->D; d++) acc += (double)qr[d] * kr[d];
          s[j] = acc * P->scale;
          mx = isnan(s[j]) || isnan(mx) ? NAN : s[j] > mx ? s[j] : mx;
        }
        if (!any) {
          *lse = -INFINITY;
          continue;
        }
        for (j = 0; j < c->Sk; j++) {
          const float *vr = P->v + (((size_t)b * c->Hkv + hk) * c->Sk + j) * c->D;
          double p;
          if (!on[j]) continue;
          p = exp(s[j] - mx);
          sum += p;
          for (d = 0; d < c->D; d++) orow[d] += p * vr[d];
        }
        for (d = 0; d < c->D; d++) orow[d] /= sum;
        *lse = mx + log(sum);
      }
    }
  free(s);
  free(on);
}

static void make_problem(prob *P, const tcase *c)
{
  int b, h, i, j;
  size_t nqel = (size_t)c->B * c->Hq * c->Sq * c->D, nkel = (size_t)c->B * c->Hkv * c->Sk * c->D;
  memset(P, 0, sizeof *P);
  P->c = c;
  make_blocks(c->Sq, c->bq, &P->qs, &P->nq, &P->qblk);
  make_blocks(c->Sk, c->bk, &P->ks, &P->nk, &P->kblk);
  P->mask = calloc((size_t)c->B * c->Hq * P->nq * P->nk, 1);
  for (b = 0; b < c->B; b++)
    for (h = 0; h < c->Hq; h++) {
      uint8_t *m = mask_at(P, b, h);
      if (c->head_bcast && (b > 0 || h > 0)) {
        memcpy(m, mask_at(P, 0, 0), (size_t)P->nq * P->nk);
        continue;
      }
      for (i = 0; i < P->nq; i++)
        for (j = 0; j < P->nk; j++) {
          int sel;
          if (c->mask == MK_BAND) {
            int diag = (int)((double)i * P->nk / P->nq);
            sel = abs(j - diag) <= 1 || j == 0;
          } else if (c->mask == MK_FULL) {
            sel = 1;
          } else {
            sel = urand() < c->density;
          }
          if (c->mask == MK_EMPTY && (h == 1 || i % 3 == 2)) sel = 0;
          m[(size_t)i * P->nk + j] = (uint8_t)sel;
        }
    }
  P->q = malloc(nqel * sizeof(float));
  P->k = malloc(nkel * sizeof(float));
  P->v = malloc(nkel * sizeof(float));
  for (i = 0; i < (int)nqel; i++) P->q[i] = to_f(c->dt, from_f(c->dt, (float)(2 * urand() - 1)));
  for (i = 0; i < (int)nkel; i++) P->k[i] = to_f(c->dt, from_f(c->dt, (float)(2 * urand() - 1)));
  for (i = 0; i < (int)nkel; i++) P->v[i] = to_f(c->dt, from_f(c->dt, (float)(2 * urand() - 1)));
  P->scale = 1.0 / sqrt((double)c->D);
  P->ref_o = calloc(nqel, sizeof(double));
  P->ref_lse = calloc((size_t)c->B * c->Hq * c->Sq, sizeof(double));
  compute_ref(P);
}

static void free_problem(prob *P)
{
  free(P->qs); free(P->ks); free(P->qblk); free(P->kblk); free(P->mask);
  free(P->q); free(P->k); free(P->v); free(P->ref_o); free(P->ref_lse);
}


/* The library's geometry and mask for a problem. */
static int make_geom_mask(const prob *P, tsr_geom **g, tsr_mask **m, tsr_error *err)
{
  const tcase *c = P->c;
  tsr_status st;
  *g = NULL;
  *m = NULL;
  if (c->bq) {
    st = tsr_geom_uniform(c->Sq, c->Sk, c->bq, c->bk, g, err);
  } else {
    int64_t *qs = malloc((size_t)P->nq * sizeof *qs), *ks = malloc((size_t)P->nk * sizeof *ks);
    int i;
    for (i = 0; i < P->nq; i++) qs[i] = P->qs[i + 1] - P->qs[i];
    for (i = 0; i < P->nk; i++) ks[i] = P->ks[i + 1] - P->ks[i];
    st = tsr_geom_variable(qs, P->nq, ks, P->nk, g, err);
    free(qs);
    free(ks);
  }
  if (st == TSR_OK) st = tsr_mask_from_bytes(c->B, c->Hq, P->nq, P->nk, P->mask, m, err);
  if (st != TSR_OK) {
    tsr_geom_destroy(*g);
    *g = NULL;
    return 1;
  }
  return 0;
}

/* ---- the test's own plan builder ---------------------------------------- */

typedef struct {
  int b, h, qt;
  int tbeg, tend;   /* into the row-tile scratch */
} row_t;

static void *grow(void *p, int64_t n, int64_t *cap, size_t el)
{
  if (n < *cap) return p;
  *cap = *cap ? 2 * *cap : 64;
  while (*cap <= n) *cap *= 2;
  p = realloc(p, (size_t)*cap * el);
  if (!p) {
    fprintf(stderr, "gpu_attn: out of memory\n");
    exit(1);
  }
  return p;
}

/* Same key tiles and the same membership words. */
static int rows_equal(const tsr_plan *pl, const tsr_tile_rec *rt, const row_t *a, const row_t *b2, int nseg)
{
  int i, w, mw = pl->tile_n / 32;
  if (a->tend - a->tbeg != b2->tend - b2->tbeg) return 0;
  for (i = 0; i < a->tend - a->tbeg; i++) {
    const tsr_tile_rec *x = &rt[a->tbeg + i], *y = &rt[b2->tbeg + i];
    if (x->k_tile != y->k_tile || (x->mem < 0) != (y->mem < 0)) return 0;
    if (pl->mapping == TSR_MAP_GATHER) { /* mem: the second half's block */
      if (x->mem != y->mem) return 0;
      continue;
    }
    if (x->mem >= 0)
      for (w = 0; w < nseg * mw; w++)
        if (pl->membership[x->mem + w] != pl->membership[y->mem + w]) return 0;
  }
  return 1;
}

static tsr_plan *build_plan(const prob *P)
{
  const tcase *c = P->c;
  tsr_plan *pl = calloc(1, sizeof *pl);
  int BM = c->tm, BN = c->tn, MW = BN / 32, b, h, qt, kt, i;
  int64_t cap_t = 0, cap_m = 0, cap_mem = 0, cap_tk = 0, cap_mg = 0, cap_rt = 0;
  tsr_tile_rec *rt = NULL;   /* row tiles, rows point into it */
  int64_t nrt = 0;
  row_t *rows;
  int nrows = 0;
  const int split_len = 3;

  pl->problem.batch = c->B;
  pl->problem.heads_q = c->Hq;
  pl->problem.heads_kv = c->Hkv;
  pl->problem.seq_q = c->Sq;
  pl->problem.seq_k = c->Sk;
  pl->problem.head_dim = c->D;
  pl->problem.scale = P->scale;
  pl->problem.dtype = c->dt;
  pl->problem.layout = c->bshd ? TSR_LAYOUT_BSHD : TSR_LAYOUT_BHSD;
  pl->tile_m = BM;
  pl->tile_n = BN;
  pl->mapping = c->gather ? TSR_MAP_GATHER : TSR_MAP_AUTO; /* AUTO: the builder's own */
  pl->n_q_tiles = (c->Sq + BM - 1) / BM;
  pl->n_k_tiles = (c->Sk + BN - 1) / BN;
  pl->qblk = malloc((size_t)c->Sq * sizeof(tsr_i32));
  for (i = 0; i < c->Sq; i++) pl->qblk[i] = P->qblk[i];
  pl->n_qblk = c->Sq;
  rows = calloc((size_t)(c->B * c->Hq * pl->n_q_tiles), sizeof *rows);

  for (b = 0; b < c->B; b++)
    for (h = 0; h < c->Hq; h++)
      for (qt = 0; qt < pl->n_q_tiles; qt++) {
        const uint8_t *m = mask_at(P, b, h);
        int q0 = qt * BM, q1 = q0 + BM < c->Sq ? q0 + BM : c->Sq;
        int s0 = P->qblk[q0], nseg = P->qblk[q1 - 1] - s0 + 1;
        row_t *r = &rows[nrows++];
        r->b = b; r->h = h; r->qt = qt; r->tbeg = (int)nrt;
        if (c->gather) {
          /* the row's selected key blocks, paired in ascending order */
          int half = 0;
          for (kt = 0; kt < P->nk; kt++) {
            if (!m[(size_t)s0 * P->nk + kt]) continue;
            if (!half) {
              rt = grow(rt, nrt, &cap_rt, sizeof *rt);
              rt[nrt].k_tile = kt;
              rt[nrt++].mem = -1;
            } else {
              rt[nrt - 1].mem = kt;
            }
            half ^= 1;
          }
          r->tend = (int)nrt;
          continue;
        }
        for (kt = 0; kt < pl->n_k_tiles; kt++) {
          uint32_t words[64 * 8];
          int any = 0, all = 1, s, cc;
          memset(words, 0, sizeof(uint32_t) * (size_t)nseg * MW);
          for (s = 0; s < nseg; s++)
            for (cc = 0; cc < BN; cc++) {
              int col = kt * BN + cc, sel;
              if (col >= c->Sk) break;
              sel = m[(size_t)(s0 + s) * P->nk + P->kblk[col]];
              if (sel) words[s * MW + cc / 32] |= 1u << (cc % 32);
              any |= sel;
              all &= sel;
            }
          if (!any) continue;
          rt = grow(rt, nrt, &cap_rt, sizeof *rt);
          rt[nrt].k_tile = kt;
          if (all) {
            rt[nrt].mem = -1;
          } else {
            pl->membership = grow(pl->membership, pl->n_membership + nseg * MW, &cap_mem, sizeof(tsr_u32));
            rt[nrt].mem = (tsr_i32)pl->n_membership;
            memcpy(pl->membership + pl->n_membership, words, sizeof(uint32_t) * (size_t)nseg * MW);
            pl->n_membership += nseg * MW;
          }
          nrt++;
        }
        r->tend = (int)nrt;
      }

  /* Tasks: tiles are copied per task so tile ranges stay contiguous. */
  for (i = 0; i < nrows; i++) {
    row_t *r = &rows[i];
    int nt = r->tend - r->tbeg, j, nmem = 1;
    if (r->tend < 0) continue; /* packed into an earlier task */
    if (c->layout == TL_PACK) {
      int group = c->Hq / c->Hkv, q1 = (r->qt + 1) * BM < c->Sq ? (r->qt + 1) * BM : c->Sq;
      int nseg = P->qblk[q1 - 1] - P->qblk[r->qt * BM] + 1;
      for (j = i + 1; j < nrows; j++) {
        row_t *o = &rows[j];
        if (o->b != r->b || o->qt != r->qt || o->h / group != r->h / group || o->tend < 0) continue;
        if (!rows_equal(pl, rt, r, o, nseg)) continue;
        pl->members = grow(pl->members, pl->n_members + nmem + 1, &cap_m, sizeof *pl->members);
        pl->members[pl->n_members + nmem].batch = o->b;
        pl->members[pl->n_members + nmem].head = o->h;
        pl->members[pl->n_members + nmem].q_tile = o->qt;
        pl->members[pl->n_members + nmem].pad = 0;
        nmem++;
        o->tend = -1;
      }
    }
    pl->members = grow(pl->members, pl->n_members + nmem, &cap_m, sizeof *pl->members);
    pl->members[pl->n_members].batch = r->b;
    pl->members[pl->n_members].head = r->h;
    pl->members[pl->n_members].q_tile = r->qt;
    pl->members[pl->n_members].pad = 0;
    if (c->layout == TL_SPLIT && nt > split_len) {
      int nchunks = (nt + split_len - 1) / split_len, ch;
      pl->merges = grow(pl->merges, pl->n_merges, &cap_mg, sizeof *pl->merges);
      memset(&pl->merges[pl->n_merges], 0, sizeof *pl->merges);
      pl->merges[pl->n_merges].batch = r->b;
      pl->merges[pl->n_merges].head = r->h;
      pl->merges[pl->n_merges].q_tile = r->qt;
      pl->merges[pl->n_merges].slot_begin = (tsr_i32)pl->n_slots;
      pl->merges[pl->n_merges].n_slots = nchunks;
      pl->n_merges++;
      for (ch = 0; ch < nchunks; ch++) {
        int a0 = ch * split_len, a1 = a0 + split_len < nt ? a0 + split_len : nt;
        tsr_task_rec *t;
        pl->tasks = grow(pl->tasks, pl->n_tasks, &cap_t, sizeof *pl->tasks);
        t = &pl->tasks[pl->n_tasks++];
        t->batch = r->b; t->head = r->h; t->q_tile = r->qt;
        t->tile_begin = (tsr_i32)pl->n_tiles;
        pl->tiles = grow(pl->tiles, pl->n_tiles + (a1 - a0), &cap_tk, sizeof *pl->tiles);
        for (j = a0; j < a1; j++) pl->tiles[pl->n_tiles++] = rt[r->tbeg + j];
        t->tile_end = (tsr_i32)pl->n_tiles;
        t->member_begin = (tsr_i32)pl->n_members;
        t->n_members = 1;
        t->partial = (tsr_i32)pl->n_slots++;
      }
      pl->n_members += 1;
    } else {
      tsr_task_rec *t;
      pl->tasks = grow(pl->tasks, pl->n_tasks, &cap_t, sizeof *pl->tasks);
      t = &pl->tasks[pl->n_tasks++];
      t->batch = r->b; t->head = r->h; t->q_tile = r->qt;
      t->tile_begin = (tsr_i32)pl->n_tiles;
      pl->tiles = grow(pl->tiles, pl->n_tiles + nt, &cap_tk, sizeof *pl->tiles);
      for (j = 0; j < nt; j++) pl->tiles[pl->n_tiles++] = rt[r->tbeg + j];
      t->tile_end = (tsr_i32)pl->n_tiles;
      t->member_begin = (tsr_i32)pl->n_members;
      t->n_members = nmem;
      t->partial = -1;
      pl->n_members += nmem;
    }
  }
  free(rows);
  free(rt);
  return pl;
}

static void free_own_plan(tsr_plan *pl)
{
  if (!pl) return;
  if (pl->gpu && pl->gpu_free) pl->gpu_free(pl->gpu);
  free(pl->tasks); free(pl->tiles); free(pl->members); free(pl->membership);
  free(pl->qblk); free(pl->merges);
  free(pl);
}

/* ---- device side ---------------------------------------------------------- */

typedef struct {
  CUdeviceptr q, k, v, o, lse;
  size_t o_bytes, lse_bytes;
  tsr_gpu_tensors t;
  uint16_t *host_o;
  float *host_lse;
  uint16_t *poison_o;      /* the poison patterns, uploaded before each launch */
  float *poison_lse;
} devbufs;

static void strides_for(const tcase *c, int H, int S, int64_t *st)
{
  if (c->bshd) {
    st[0] = (int64_t)S * H * c->D; st[1] = c->D; st[2] = (int64_t)H * c->D; st[3] = 1;
  } else {
    st[0] = (int64_t)H * S * c->D; st[1] = (int64_t)S * c->D; st[2] = c->D; st[3] = 1;
  }
}

static CUdeviceptr upload_tensor(const tsr_cu *cu, const tcase *c, const float *src, int H, int S, int64_t *st)
{
  size_t n = (size_t)c->B * H * S * c->D, b, h, s, d;
  uint16_t *host = malloc(n * 2);
  CUdeviceptr p;
  strides_for(c, H, S, st);
  for (b = 0; b < (size_t)c->B; b++)
    for (h = 0; h < (size_t)H; h++)
      for (s = 0; s < (size_t)S; s++)
        for (d = 0; d < (size_t)c->D; d++)
          host[b * st[0] + h * st[1] + s * st[2] + d] =
              from_f(c->dt, src[((b * H + h) * S + s) * c->D + d]);
  CK(cu->cuMemAlloc(&p, n * 2));
  CK(cu->cuMemcpyHtoD(p, host, n * 2));
  free(host);
  return p;
}

static void make_devbufs(const tsr_cu *cu, const prob *P, devbufs *db)
{
  const tcase *c = P->c;
  memset(db, 0, sizeof *db);
  db->q = upload_tensor(cu, c, P->q, c->Hq, c->Sq, db->t.q_stride);
  db->k = upload_tensor(cu, c, P->k, c->Hkv, c->Sk, db->t.k_stride);
  db->v = upload_tensor(cu, c, P->v, c->Hkv, c->Sk, db->t.v_stride);
  strides_for(c, c->Hq, c->Sq, db->t.o_stride);
  db->o_bytes = (size_t)c->B * c->Hq * c->Sq * c->D * 2;
  db->lse_bytes = (size_t)c->B * c->Hq * c->Sq * 4;
  CK(cu->cuMemAlloc(&db->o, db->o_bytes));
  CK(cu->cuMemAlloc(&db->lse, db->lse_bytes));
  db->t.q = db->q; db->t.k = db->k; db->t.v = db->v; db->t.o = db->o; db->t.lse = db->lse;
  db->host_o = malloc(db->o_bytes);
  db->host_lse = malloc(db->lse_bytes);
  /* Huge finite values: 3.39e38 in bf16, 65504 in fp16, FLT_MAX in lse. */
  db->poison_o = malloc(db->o_bytes);
  db->poison_lse = malloc(db->lse_bytes);
  {
    size_t i;
    const uint16_t po = c->dt == TSR_DT_BF16 ? 0x7f7f : 0x7bff;
    for (i = 0; i < db->o_bytes / 2; i++) db->poison_o[i] = po;
    for (i = 0; i < db->lse_bytes / 4; i++) db->poison_lse[i] = 3.40282347e38f;
  }
}

static void free_devbufs(const tsr_cu *cu, devbufs *db)
{
  cu->cuMemFree(db->q); cu->cuMemFree(db->k); cu->cuMemFree(db->v);
  cu->cuMemFree(db->o); cu->cuMemFree(db->lse);
  free(db->host_o); free(db->host_lse);
  free(db->poison_o); free(db->poison_lse);
}

/* A huge finite value everywhere: an element the kernel leaves unwritten
 * fails the comparison whether the reference has a number or NaN there. */
static void poison(const tsr_cu *cu, const devbufs *db)
{
  CK(cu->cuMemcpyHtoD(db->o, db->poison_o, db->o_bytes));
  CK(cu->cuMemcpyHtoD(db->lse, db->poison_lse, db->lse_bytes));
  /* The copies run on the legacy stream: finish them before the launch. */
  CK(cu->cuCtxSynchronize());
}

/* Whether got and want agree on being non-finite: NaN with NaN, an
 * infinity with the same infinity (both finite: 1, compared elsewhere). */
static int same_nonfinite(double got, double want)
{
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want);
  if (isinf(got) || isinf(want)) return got == want;
  return 1;
}

/* Judges a result o [B][Hq][Sq][D], lse [B][Hq][Sq] against the reference:
 * non-finite values in the same places, o within tol relative (max-norm),
 * lse within tol (relative above 1).  Returns 0 when it passes. */
static int judge(const prob *P, const float *o, const float *lse, double tol, const char *what)
{
  const tcase *c = P->c;
  size_t row, d, nrows = (size_t)c->B * c->Hq * c->Sq, bad_o = 0, bad_lse = 0;
  double maxref = 0, maxerr = 0, lse_err = 0;
  for (row = 0; row < nrows; row++) {
    double rl = P->ref_lse[row], gl = lse[row];
    for (d = 0; d < (size_t)c->D; d++) {
      double g = o[row * c->D + d], r = P->ref_o[row * c->D + d];
      if (!isfinite(g) || !isfinite(r)) {
        bad_o += !same_nonfinite(g, r);
        continue;
      }
      if (fabs(r) > maxref) maxref = fabs(r);
      if (fabs(g - r) > maxerr) maxerr = fabs(g - r);
    }
    if (!isfinite(gl) || !isfinite(rl)) bad_lse += !same_nonfinite(gl, rl);
    else {
      double e = fabs(gl - rl) / (fabs(rl) > 1 ? fabs(rl) : 1);
      if (e > lse_err) lse_err = e;
    }
  }
  {
    double rel = maxref > 0 ? maxerr / maxref : maxerr;
    int ok = bad_o == 0 && bad_lse == 0 && rel < tol && lse_err < tol;
    printf("  %-44s rel err o %.2e  lse %.2e  non-finite mismatch o %zu lse %zu  %s\n", what, rel, lse_err,
           bad_o, bad_lse, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
  }
}

/* Compares the device result with the reference; returns 0 when it passes. */
static int compare(const tsr_cu *cu, const prob *P, devbufs *db, const char *what)
{
  const tcase *c = P->c;
  size_t b, h, s, d, i = 0;
  float *o = malloc((size_t)c->B * c->Hq * c->Sq * c->D * sizeof *o);
  int fails;
  CK(cu->cuMemcpyDtoH(db->host_o, db->o, db->o_bytes));
  CK(cu->cuMemcpyDtoH(db->host_lse, db->lse, db->lse_bytes));
  for (b = 0; b < (size_t)c->B; b++)
    for (h = 0; h < (size_t)c->Hq; h++)
      for (s = 0; s < (size_t)c->Sq; s++)
        for (d = 0; d < (size_t)c->D; d++)
          o[i++] = to_f(c->dt, db->host_o[b * db->t.o_stride[0] + h * db->t.o_stride[1] + s * db->t.o_stride[2] + d]);
  fails = judge(P, o, db->host_lse, 1e-2, what);
  free(o);
  return fails;
}

/* Runs plan `pl` with variant `name` (upload, launch, sync, compare). */
static int run_variant(tsr_context *ctx, const tsr_cu *cu, const prob *P, tsr_plan *pl, devbufs *db,
                       CUstream stream, const char *name, int graph)
{
  tsr_error err;
  char what[160];
  int fails;
  tsr_error_clear(&err);
  if (pl->gpu) {
    pl->gpu_free(pl->gpu);
    pl->gpu = NULL;
    pl->gpu_free = NULL;
  }
  if (name) snprintf(pl->variant, sizeof pl->variant, "%s", name);
  if (tsr_gpu_upload(ctx, pl, &err) != TSR_OK) {
    printf("  %-44s upload failed: %s  FAIL\n", name ? name : "(chosen)", err.text);
    return 1;
  }
  name = pl->variant;
  poison(cu, db);
  if (tsr_gpu_launch(ctx, pl, &db->t, stream, &err) != TSR_OK) {
    printf("  %-44s launch failed: %s  FAIL\n", name, err.text);
    return 1;
  }
  CK(cu->cuStreamSynchronize(stream));
  fails = compare(cu, P, db, name);
  if (graph) {
    CUgraph g;
    CUgraphExec ge;
    poison(cu, db);
    CK(cu->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    if (tsr_gpu_launch(ctx, pl, &db->t, stream, &err) != TSR_OK) {
      printf("  graph capture of the launch failed: %s  FAIL\n", err.text);
      return fails + 1;
    }
    CK(cu->cuStreamEndCapture(stream, &g));
    CK(cu->cuGraphInstantiate(&ge, g, 0));
    CK(cu->cuGraphLaunch(ge, stream));
    CK(cu->cuGraphLaunch(ge, stream));
    CK(cu->cuStreamSynchronize(stream));
    snprintf(what, sizeof what, "(CUDA graph replay x2)");
    fails += compare(cu, P, db, what);
    cu->cuGraphExecDestroy(ge);
    cu->cuGraphDestroy(g);
  }
  return fails;
}

/* Variants whose names start with this prefix only (--only), so the
 * sanitizers' --quick subset can be pointed at one family.  A plan that some
 * variant serves but none with the prefix is skipped, not failed; main fails
 * the run when the prefix ran nothing at all. */
static const char *only_prefix = "";

static int run_all_variants(tsr_context *ctx, const tsr_cu *cu, const tsr_bundle *bundle, const prob *P,
                            tsr_plan *pl, devbufs *db, CUstream stream, int quick, int graph, int *ran)
{
  /* Every bundle variant that serves the plan on this device. */
  const char *arch = tsri_context_arch(ctx);
  tsr_variant_need need = {0}; /* native precision unless set */
  size_t i;
  int fails = 0, a = tsri_arch_index(arch), n = 0, filtered = 0;
  need.dtype = P->c->dt;
  need.head_dim = P->c->D;
  need.bm = pl->tile_m;
  need.bn = pl->tile_n;
  need.membership = pl->n_membership > 0;
  need.gather = pl->mapping == TSR_MAP_GATHER;
  for (i = 0; i < bundle->n; i++) {
    const tsr_bundle_entry *e = &bundle->items[i];
    if (!(e->targets & (1u << a)) || !tsri_variant_serves(&e->v, arch, &need)) continue;
    if (strncmp(e->name, only_prefix, strlen(only_prefix)) != 0) {
      filtered++;
      continue;
    }
    if (quick && n > 0) break;
    fails += run_variant(ctx, cu, P, pl, db, stream, e->name, graph && n == 0);
    n++;
  }
  if (n == 0 && filtered > 0) {
    printf("  %d variant(s) serve %s d%d tile %dx%d%s, none named '%s*': skipped (--only)\n", filtered,
           tsri_variant_dtype_name(need.dtype), need.head_dim, need.bm, need.bn, need.membership ? " mb" : "",
           only_prefix);
  } else if (n == 0 && need.gather && strcmp(arch, "sm_90a") != 0) {
    printf("  gather plans run on the sm90 family's kg variants, not on %s: skipped\n", arch);
  } else if (n == 0) {
    printf("  no variant serves %s d%d tile %dx%d%s on %s  FAIL\n", tsri_variant_dtype_name(need.dtype),
           need.head_dim, need.bm, need.bn, need.membership ? " mb" : "", arch);
    fails++;
  }
  *ran += n;
  return fails;
}


/* ---- plans from the planner (tsr_plan_create) ----------------------------- */

/* The test's reference against the library's (tsr_ref_attention). */
static int cross_check_ref(const prob *P)
{
  const tcase *c = P->c;
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_array q, k, v, o, l;
  tsr_error err;
  size_t i, n = (size_t)c->B * c->Hq * c->Sq * c->D, nr = (size_t)c->B * c->Hq * c->Sq;
  double eo = 0, el = 0, mo = 0;
  int bad = 0;
  tsr_error_clear(&err);
  if (make_geom_mask(P, &g, &m, &err)) {
    printf("  reference cross-check: %s  FAIL\n", err.text);
    return 1;
  }
  memset(&q, 0, sizeof q);
  q.dtype = TSR_DT_F32; q.ndim = 4; q.shape[0] = c->B; q.shape[1] = c->Hq; q.shape[2] = c->Sq; q.shape[3] = c->D;
  q.data = P->q;
  k = q; k.shape[1] = c->Hkv; k.shape[2] = c->Sk; k.data = P->k;
  v = k; v.data = P->v;
  if (tsr_ref_attention(g, m, &q, &k, &v, P->scale, &o, &l, &err) != TSR_OK) {
    printf("  reference cross-check: tsr_ref_attention: %s  FAIL\n", err.text);
    tsr_geom_destroy(g);
    tsr_mask_destroy(m);
    return 1;
  }
  for (i = 0; i < n; i++) {
    double r = P->ref_o[i], x = ((float *)o.data)[i];
    if (!isfinite(r) || !isfinite(x)) {
      bad += !same_nonfinite(x, r);
      continue;
    }
    if (fabs(r) > mo) mo = fabs(r);
    if (fabs(x - r) > eo) eo = fabs(x - r);
  }
  for (i = 0; i < nr; i++) {
    double r = P->ref_lse[i], x = ((float *)l.data)[i];
    if (!isfinite(r) || !isfinite(x)) bad += !same_nonfinite(x, r);
    else if (fabs(x - r) > el) el = fabs(x - r);
  }
  eo = mo > 0 ? eo / mo : eo;
  printf("  %-44s rel diff o %.2e  lse %.2e  non-finite mismatch %d  %s\n", "(test reference vs tsr_ref_attention)", eo, el,
         bad, eo < 1e-5 && el < 1e-5 && !bad ? "ok" : "FAIL");
  tsr_npy_free(&o);
  tsr_npy_free(&l);
  tsr_geom_destroy(g);
  tsr_mask_destroy(m);
  return eo < 1e-5 && el < 1e-5 && !bad ? 0 : 1;
}

static int planner_runs(tsr_context *ctx, const tsr_cu *cu, const prob *P, devbufs *db, CUstream stream,
                        int quick, int *ran)
{
  static const struct {
    tsr_mapping map;
    int use_tile;
  } maps[] = { { TSR_MAP_AUTO, 0 }, { TSR_MAP_AUTO, 1 }, { TSR_MAP_RETAIN, 0 }, { TSR_MAP_COMBINE, 1 },
               { TSR_MAP_SUBDIVIDE, 0 }, { TSR_MAP_GATHER, 1 } };
  static const char *const map_names[] = { "auto", "retain", "combine", "subdivide", "gather" };
  static const char *const task_names[] = { "auto", "row", "split", "pack" };
  const tcase *c = P->c;
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_problem pr;
  tsr_error err;
  size_t mi;
  int t, fails = 0;
  tsr_error_clear(&err);
  if (make_geom_mask(P, &g, &m, &err)) {
    printf("  planner: %s  FAIL\n", err.text);
    return 1;
  }
  memset(&pr, 0, sizeof pr);
  pr.batch = c->B; pr.heads_q = c->Hq; pr.heads_kv = c->Hkv; pr.seq_q = c->Sq; pr.seq_k = c->Sk;
  pr.head_dim = c->D; pr.scale = P->scale; pr.dtype = c->dt;
  pr.layout = c->bshd ? TSR_LAYOUT_BSHD : TSR_LAYOUT_BHSD;
  pr.geom = g;
  if (tsr_problem_check(&pr, &err) != TSR_OK) {
    printf("  planner: problem: %s  FAIL\n", err.text);
    tsr_geom_destroy(g);
    tsr_mask_destroy(m);
    return 1;
  }
  for (mi = 0; mi < sizeof maps / sizeof *maps; mi++)
    for (t = TSR_TASKS_ROW; t <= TSR_TASKS_PACK; t++) {
      tsr_plan_opts o;
      tsr_plan *pl = NULL;
      char label[160];
      tsr_status st;
      if (quick && t != TSR_TASKS_SPLIT) continue;
      tsr_plan_opts_init(&o);
      o.mapping = maps[mi].map;
      o.tasks = (tsr_tasks)t;
      o.arch = tsri_context_arch(ctx);
      o.num_sms = tsri_context_num_sms(ctx);
      if (maps[mi].use_tile) {
        o.tile_m = c->tm;
        o.tile_n = c->tn;
      }
      tsr_error_clear(&err);
      st = tsr_plan_create(&pr, m, &o, &pl, &err);
      if (st == TSR_ERR_UNSUPPORTED) {
        printf("  planner %s%s/%s: n/a (%s)\n", map_names[o.mapping], maps[mi].use_tile ? "+tile" : "",
               task_names[t], err.text);
        continue;
      }
      if (st != TSR_OK) {
        printf("  planner %s/%s: %s  FAIL\n", map_names[o.mapping], task_names[t], err.text);
        fails++;
        continue;
      }
      if (tsr_plan_verify(pl, m, &err) != TSR_OK) {
        printf("  planner %s/%s: verify: %s  FAIL\n", map_names[o.mapping], task_names[t], err.text);
        fails++;
        tsr_plan_destroy(pl);
        continue;
      }
      snprintf(label, sizeof label, "planner %s%s/%s tile %dx%d: %lld tasks %lld merges", map_names[pl->mapping],
               maps[mi].use_tile ? "+tile" : "", task_names[pl->task_layout], pl->tile_m, pl->tile_n,
               (long long)pl->n_tasks, (long long)pl->n_merges);
      printf("  %s\n", label);
      {
        tsr_error e2;
        tsr_error_clear(&e2);
        if (tsr_gpu_upload(ctx, pl, &e2) == TSR_ERR_NO_VARIANT) {
          printf("    no variant in the bundle: %s\n", e2.text);
          tsr_plan_destroy(pl);
          continue;
        }
      }
      fails += run_variant(ctx, cu, P, pl, db, stream, NULL, 0);
      (*ran)++;
      tsr_plan_destroy(pl);
    }
  tsr_geom_destroy(g);
  tsr_mask_destroy(m);
  return fails;
}


/* ---- non-finite inputs ------------------------------------------------------ */

#define NF_SEED 0x6e6f6e66696e6974ULL /* the non-finite runs' stream: seed ^ this */
#define FP8_SEED 0x6670382d72756e73ULL /* the FP8 runs' stream */

static const tcase nf_cases[] = {
  { "nf-bf16-d128-random-split", 1, 4, 2, 600, 520, 128, TSR_DT_BF16, 0, 64, 64, 128, 64, MK_RANDOM, 0.4, TL_SPLIT, 0, 1, 0 },
  { "nf-fp16-d64-empty-rows-bshd", 2, 2, 1, 400, 450, 64, TSR_DT_F16, 1, 32, 32, 64, 64, MK_EMPTY, 0.5, TL_ROW, 0, 0, 0 },
  { "nf-fp16-d128-pack-bcast", 1, 4, 2, 500, 500, 128, TSR_DT_F16, 0, 64, 64, 128, 64, MK_RANDOM, 0.4, TL_PACK, 1, 0, 0 },
  { "nf-bf16-d64-variable-128x128-split", 1, 2, 2, 700, 650, 64, TSR_DT_BF16, 0, 0, 0, 128, 128, MK_RANDOM, 0.35, TL_SPLIT, 0, 0, 0 },
  { "nf-bf16-d128-full-aligned", 1, 2, 2, 512, 512, 128, TSR_DT_BF16, 0, 128, 64, 128, 64, MK_FULL, 1, TL_ROW, 0, 0, 0 },
  /* gather: a non-finite value in a row's odd last block, beside the
   * missing second half (poison_inputs puts it there) */
  { "nf-bf16-d128-gather-split-ragged", 1, 4, 2, 600, 520, 128, TSR_DT_BF16, 0, 128, 64, 128, 128, MK_RANDOM, 0.4, TL_SPLIT, 0, 0, 1 },
  { "nf-fp16-d64-gather64-split-ragged", 1, 4, 2, 600, 520, 64, TSR_DT_F16, 0, 64, 64, 64, 128, MK_RANDOM, 0.4, TL_SPLIT, 0, 0, 1 },
};

/* Poisons P's inputs with `kind` (tests/util.h: up to 2 places, each where
 * some query selects it) and recomputes the reference; returns the number
 * of places.  The kinds that put a non-finite value in v first make one
 * random key block J selected by every non-empty query block of every plane
 * and poison keys of J only: then every row of a computed tile either
 * selects the key or selects nothing (and must stay zeros). */
static int poison_inputs(prob *P, int kind)
{
  const tcase *c = P->c;
  const int on_v = kind == TU_NF_NAN_V || kind == TU_NF_INF_V || kind == TU_NF_INF_K_NAN_V;
  const size_t rows = (size_t)c->B * c->Hq * P->nq;
  int64_t *qb = malloc((size_t)(P->nq + 1) * sizeof *qb), *kb = malloc((size_t)(P->nk + 1) * sizeof *kb);
  uint8_t *where = P->mask;
  tu_rng r;
  tu_nf_place pl[2];
  size_t i;
  int n, j;
  r.s = (uint64_t)rnd() << 32 | rnd();
  for (j = 0; j <= P->nq; j++) qb[j] = P->qs[j];
  for (j = 0; j <= P->nk; j++) kb[j] = P->ks[j];
  if (on_v) {
    /* gather plans: J the last block, so that it is the unpaired last half
     * of every row selecting an odd count (a missing half must not meet
     * J's values: 0 x inf) */
    const int J = c->gather ? P->nk - 1 : (int)(rnd() % (uint32_t)P->nk);
    where = calloc(rows * P->nk, 1);
    for (i = 0; i < rows; i++) {
      uint8_t *row = P->mask + i * P->nk;
      int any = 0;
      for (j = 0; j < P->nk; j++) any |= row[j];
      if (any) row[J] = where[i * P->nk + J] = 1;
    }
  }
  n = tu_inject_nonfinite(&r, kind, 2, c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D, P->q, P->k, P->v, where, c->B,
                          c->Hq, P->nq, P->nk, qb, kb, pl);
  if (where != P->mask) free(where);
  free(qb);
  free(kb);
  compute_ref(P);
  return n;
}

/* The test's own plan run by tsr_cpu_execute (float32, the kernels'
 * arithmetic on the CPU) against the reference, so that the builder's
 * records and the poisoning are checked on any machine. */
static int host_run(const prob *P)
{
  const tcase *c = P->c;
  tsr_plan *pl = build_plan(P);
  tsr_array q, k, v, o, l;
  tsr_error err;
  int fails;
  tsr_error_clear(&err);
  memset(&q, 0, sizeof q);
  q.dtype = TSR_DT_F32; q.ndim = 4; q.shape[0] = c->B; q.shape[1] = c->Hq; q.shape[2] = c->Sq; q.shape[3] = c->D;
  q.data = P->q;
  k = q; k.shape[1] = c->Hkv; k.shape[2] = c->Sk; k.data = P->k;
  v = k; v.data = P->v;
  if (tsr_cpu_execute(pl, &q, &k, &v, &o, &l, &err) != TSR_OK) {
    printf("  own plan on tsr_cpu_execute: %s  FAIL\n", err.text);
    free_own_plan(pl);
    return 1;
  }
  fails = judge(P, o.data, l.data, 1e-4, "(own plan on tsr_cpu_execute)");
  tsr_npy_free(&o);
  tsr_npy_free(&l);
  free_own_plan(pl);
  return fails;
}

/* Every non-finite kind over nf_cases: the host-side checks (the test's
 * reference against tsr_ref_attention, its own plan on the CPU executor),
 * then with a context (ctx non-NULL) the own plan with every serving
 * variant and the planner's plans on the GPU. */
static int nonfinite_runs(tsr_context *ctx, const tsr_cu *cu, const tsr_bundle *bundle, CUstream stream, int quick,
                          int *ran)
{
  size_t ci;
  int kind, fails = 0;
  for (ci = 0; ci < sizeof nf_cases / sizeof *nf_cases; ci++)
    for (kind = 0; kind < TU_NF_KINDS; kind++) {
      const tcase *c = &nf_cases[ci];
      const size_t nqel = (size_t)c->B * c->Hq * c->Sq * c->D, nrows = (size_t)c->B * c->Hq * c->Sq;
      prob P;
      devbufs db;
      tsr_plan *pl;
      size_t bad_o, nan_l = 0, i;
      int n;
      if (quick && (!c->quick || (kind != TU_NF_NAN_Q && kind != TU_NF_NAN_V))) continue;
      make_problem(&P, c);
      n = poison_inputs(&P, kind);
      bad_o = tu_count_nonfinite(P.ref_o, nqel);
      for (i = 0; i < nrows; i++) nan_l += isnan(P.ref_lse[i]);
      printf("nonfinite case %s, %s: %d place(s); reference: %zu non-finite outputs, %zu NaN lse\n", c->label,
             tu_nf_name(kind), n, bad_o, nan_l);
      if (n == 0 || bad_o == 0) {
        printf("  the poison reached no output  FAIL\n");
        fails++;
        free_problem(&P);
        continue;
      }
      fails += cross_check_ref(&P);
      fails += host_run(&P);
      if (!ctx) {
        free_problem(&P);
        continue;
      }
      make_devbufs(cu, &P, &db);
      pl = build_plan(&P);
      fails += run_all_variants(ctx, cu, bundle, &P, pl, &db, stream, quick, 0, ran);
      free_own_plan(pl);
      fails += planner_runs(ctx, cu, &P, &db, stream, quick, ran);
      free_devbufs(cu, &db);
      free_problem(&P);
    }
  return fails;
}

/* ---- --bench: time every serving variant on a video-DiT-sized problem ---- */

static int cmp_float(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* The benches' tensors: q, k, v and out of [1, S, H, D] (BSHD), contiguous. */
static void bench_tensors(tsr_gpu_tensors *t, CUdeviceptr dq, CUdeviceptr dk, CUdeviceptr dv,
                          CUdeviceptr dout, int S, int H, int D)
{
  memset(t, 0, sizeof *t);
  t->q = dq; t->k = dk; t->v = dv; t->o = dout;
  t->q_stride[0] = (int64_t)S * H * D; t->q_stride[1] = D; t->q_stride[2] = (int64_t)H * D; t->q_stride[3] = 1;
  memcpy(t->k_stride, t->q_stride, sizeof t->q_stride);
  memcpy(t->v_stride, t->q_stride, sizeof t->q_stride);
  memcpy(t->o_stride, t->q_stride, sizeof t->q_stride);
}

/* The benches' mask: each (head, query block, key block) of H heads over S
 * tokens in bq x bk blocks drawn with probability dens (all at dens >= 1)
 * into bits, with its geometry, mask and BSHD problem of dtype dt.  Returns
 * the selected token pairs (what effective TFLOP/s count), or -1 with err
 * set. */
static double bench_mask(int S, int H, int D, tsr_dtype dt, int bq, int bk, double dens, uint8_t *bits,
                         tsr_problem *pr, tsr_geom **g, tsr_mask **m, tsr_error *err)
{
  const int nq = (S + bq - 1) / bq, nk = (S + bk - 1) / bk;
  double pairs = 0;
  size_t i;
  int h, a, b;
  for (i = 0; i < (size_t)H * nq * nk; i++) bits[i] = dens >= 1 || urand() < dens;
  for (h = 0; h < H; h++)
    for (a = 0; a < nq; a++)
      for (b = 0; b < nk; b++)
        if (bits[((size_t)h * nq + a) * nk + b]) {
          int qa = a * bq, qb = qa + bq < S ? qa + bq : S, ka = b * bk, kb = ka + bk < S ? ka + bk : S;
          pairs += (double)(qb - qa) * (kb - ka);
        }
  memset(pr, 0, sizeof *pr);
  pr->batch = 1; pr->heads_q = H; pr->heads_kv = H; pr->seq_q = S; pr->seq_k = S; pr->head_dim = D;
  pr->dtype = dt; pr->layout = TSR_LAYOUT_BSHD;
  if (tsr_geom_uniform(S, S, bq, bk, g, err) || tsr_mask_from_bytes(1, H, nq, nk, bits, m, err) ||
      (pr->geom = *g, tsr_problem_check(pr, err)))
    return -1;
  return pairs;
}

/* Wan2.1-1.3B 480p: S = 32760, 12 heads, BSHD, random bq x bk block
 * masks per head, planned on bq x tn tiles with `map` (--bench: D = 128,
 * bf16, 128 x 128, and 128 x 64 blocks on their own tiles and gathered onto
 * 128 x 128 ones, then d64 64 x 64 blocks on their own tiles and gathered
 * onto 64 x 128 ones; --bench-all: D 128 and 64, bf16 and fp16, blocks 128 and
 * 64 on tiles of the block, blocks 128 on 128 x 64 tiles, the shape of
 * FA2's d128 kernel, whose 32-row warps no 128 x 128 tile can hold, and
 * 128 x 64 and 64 x 64 blocks gathered); every serving variant (named --only PREFIX*,
 * e.g. tsr_sm80 to force that family on sm_90a) is timed.  Median of 10 event-timed launches after 3 warm-ups;
 * eff. TFLOP/s = 4 * selected pairs * D / time. */
static int bench(tsr_context *ctx, const tsr_cu *cu, const tsr_bundle *bundle, CUstream stream, int D,
                 tsr_dtype dt, int blk, int bk, int tn, tsr_mapping map)
{
  const int S = 32760, H = 12;
  const double dens[] = { 0.10, 0.25, 0.50 };
  const int nb = (S + blk - 1) / blk, nbk = (S + bk - 1) / bk, gather = map == TSR_MAP_GATHER;
  size_t n = (size_t)S * H * D, i, di;
  uint16_t *host = malloc(n * 2);
  CUdeviceptr dq, dk, dv, dout;
  tsr_gpu_tensors t;
  CUevent e0, e1;
  tsr_error err;
  int fails = 0, any = 0;
  tsr_error_clear(&err);
  /* Nothing named --only PREFIX serves this shape: skip its tensors, masks
   * and plans (--bench-all --only one variant family then times just it). */
  for (i = 0; i < bundle->n && !any; i++) {
    const tsr_bundle_entry *e = &bundle->items[i];
    tsr_variant_need nd[2] = { { dt, D, blk, tn, 1, 0, gather }, { dt, D, blk, tn, 0, 0, gather } };
    any = strncmp(e->name, only_prefix, strlen(only_prefix)) == 0 &&
          (e->targets & (1u << tsri_arch_index(tsri_context_arch(ctx)))) &&
          (tsri_variant_serves(&e->v, tsri_context_arch(ctx), &nd[0]) ||
           tsri_variant_serves(&e->v, tsri_context_arch(ctx), &nd[1]));
  }
  if (!any) {
    free(host);
    return 0;
  }
  for (i = 0; i < n; i++) host[i] = from_f(dt, (float)(2 * urand() - 1));
  CK(cu->cuMemAlloc(&dq, n * 2));
  CK(cu->cuMemAlloc(&dk, n * 2));
  CK(cu->cuMemAlloc(&dv, n * 2));
  CK(cu->cuMemAlloc(&dout, n * 2));
  CK(cu->cuMemcpyHtoD(dq, host, n * 2));
  CK(cu->cuMemcpyHtoD(dk, host, n * 2));
  CK(cu->cuMemcpyHtoD(dv, host, n * 2));
  free(host);
  bench_tensors(&t, dq, dk, dv, dout, S, H, D);
  CK(cu->cuEventCreate(&e0, 0));
  CK(cu->cuEventCreate(&e1, 0));
  printf("bench: S=%d H=%d D=%d %s BSHD, random %dx%d block masks, tile %dx%d%s\n", S, H, D,
         tsri_variant_dtype_name(dt), blk, bk, blk, tn, gather ? " (gather)" : "");
  for (di = 0; di < sizeof dens / sizeof *dens; di++) {
    uint8_t *bits = malloc((size_t)H * nb * nbk);
    tsr_geom *g = NULL;
    tsr_mask *m = NULL;
    tsr_problem pr;
    tsr_plan_opts o;
    tsr_plan *pl = NULL;
    double pairs = 0;
    int a_arch = tsri_arch_index(tsri_context_arch(ctx));
    size_t vi;
    if ((pairs = bench_mask(S, H, D, dt, blk, bk, dens[di], bits, &pr, &g, &m, &err)) < 0) {
      printf("bench: %s  FAIL\n", err.text);
      return 1;
    }
    tsr_plan_opts_init(&o);
    o.tile_m = blk;
    o.tile_n = tn;
    o.mapping = map;
    o.arch = tsri_context_arch(ctx);
    o.num_sms = tsri_context_num_sms(ctx);
    if (tsr_plan_create(&pr, m, &o, &pl, &err) != TSR_OK) {
      printf("bench: plan: %s  FAIL\n", err.text);
      return 1;
    }
    for (vi = 0; vi < bundle->n; vi++) {
      const tsr_bundle_entry *e = &bundle->items[vi];
      tsr_variant_need need = { dt, D, blk, tn, pl->n_membership > 0, 0, gather };
      float ms[10];
      int r;
      if (!(e->targets & (1u << a_arch)) || !tsri_variant_serves(&e->v, tsri_context_arch(ctx), &need)) continue;
      if (strncmp(e->name, only_prefix, strlen(only_prefix)) != 0) continue;
      if (pl->gpu) {
        pl->gpu_free(pl->gpu);
        pl->gpu = NULL;
        pl->gpu_free = NULL;
      }
      snprintf(pl->variant, sizeof pl->variant, "%s", e->name);
      if (tsr_gpu_upload(ctx, pl, &err) != TSR_OK) {
        printf("bench: upload %s: %s  FAIL\n", e->name, err.text);
        fails++;
        continue;
      }
      for (r = 0; r < 3; r++)
        if (tsr_gpu_launch(ctx, pl, &t, stream, &err) != TSR_OK) break;
      for (r = 0; r < 10 && !err.status; r++) {
        CK(cu->cuEventRecord(e0, stream));
        tsr_gpu_launch(ctx, pl, &t, stream, &err);
        CK(cu->cuEventRecord(e1, stream));
        CK(cu->cuEventSynchronize(e1));
        CK(cu->cuEventElapsedTime(&ms[r], e0, e1));
      }
      if (err.status) {
        printf("bench: launch %s: %s  FAIL\n", e->name, err.text);
        fails++;
        continue;
      }
      qsort(ms, 10, sizeof *ms, cmp_float);
      printf("bench: density %.2f  %-48s %8.3f ms  %6.1f TFLOP/s  (%lld tasks, %lld merges)\n", dens[di], e->name,
             (ms[4] + ms[5]) / 2, 4.0 * pairs * D / ((ms[4] + ms[5]) / 2 * 1e-3) / 1e12, (long long)pl->n_tasks,
             (long long)pl->n_merges);
    }
    tsr_plan_destroy(pl);
    tsr_mask_destroy(m);
    tsr_geom_destroy(g);
    free(bits);
  }
  cu->cuEventDestroy(e0);
  cu->cuEventDestroy(e1);
  cu->cuMemFree(dq); cu->cuMemFree(dk); cu->cuMemFree(dv); cu->cuMemFree(dout);
  return fails;
}

/* ---- FP8 (issue 18): the FP8 variants (int8 Q K^T, e4m3 P V) against the CPU emulation */

/* Each case runs the test's own plan and the planner's (precision fp8) with
 * every FP8 variant serving it, and the device planner's plans of its
 * mask (uniform blocks), and compares
 *  - with the CPU emulation of the same plan (tsr_cpu_execute: the heads
 *    the fallback rule marks in the native dtype, the others in FP8),
 *    which quantizes the same inputs to the same bytes and scales; the
 *    device's per-head flags must be the emulation's (fp8_check_quant).
 *    Where a head falls back, the launch is repeated with the device's
 *    fallback off (tsri_gpu_fp8_fallback) against the emulation with every
 *    head in FP8.  The emulation does the device's arithmetic (the scores
 *    are exact s32 sums on both sides, the P V sums follow the tensor
 *    cores' 13-bit truncation, exec_cpu.c) except for exp2: ex2.approx
 *    lies within 2 ulps of 2^x (tests/device/ex2_probe.cu), exp2f within
 *    0.502, so a p' that close to an e4m3 rounding boundary may round the
 *    other way on the device, moving its row by a step of 1/16 to 1/8 of
 *    that p'.  Bound, per row: the row's largest o error within fp8_tol
 *    of max |o| (8e-3 for bf16 output, 4e-3 for fp16) plus the row's flip
 *    bound (tsri_cpu_execute_fp8: the sum of every such flip's effect),
 *    and lse within 2e-3.  What fp8_tol covers: the output's rounding
 *    (2^-9 relative in bf16, 2^-12 in fp16), the native heads' bf16/fp16 P
 *    (the native CPU executor keeps P in float), sums in other orders.
 *    Until 2026-12-02 the bound was that number alone, and a single flip
 *    on a K-outlier head in FP8 (peaky rows: l of a few p) broke it at
 *    4.1-4.3e-3 (notes/fp8-2026-12-02e.md).  A tightening of the fp16
 *    part to 2e-3 was tried and failed on the H200 (16:18 UTC): one row of
 *    fp8-fp16-d128-128x64-ragged-bshd differs from the emulation by
 *    3.88e-3 on every plan, no flip near it; unexplained, so the fp16
 *    part stays at the 4e-3 it was.  fp8_mutants shows the bound still
 *    catching a dropped tile and a V scale 1/32 off.
 *  - with the float64 reference, per (batch, head) with selected rows:
 *    cosine >= 0.999, the minimum and median over heads printed, and the
 *    largest relative L2 error (printed, not judged: on these uniform
 *    random inputs o is an average of ~1000 random v and its relative error
 *    is the quantization's own, a few percent; issue 18's 3% bar is for the
 *    corpus's structured inputs).  The K-outlier case is judged with the
 *    fallback (without it, its outlier heads' cosine was 0.9988 in the
 *    emulation: what the fallback exists for); the fallback-off run is
 *    printed only.
 * Non-finite values (empty rows: zeros, lse -inf) must sit where the
 * reference has them. */
/* The fixed part of the per-row bound (above), over max |o|. */
static double fp8_tol(tsr_dtype dt) { return dt == TSR_DT_BF16 ? 8e-3 : 4e-3; }

typedef struct {
  tcase c;
  int k_outliers; /* 1: K channels 5 and 77 x20, channel 40 + 3 (smoothing's case),
                   * in kv head 0 of each batch: the rule must flag exactly its q heads;
                   * 2: q and k x 2^-70, so that sq * sk * scale underflows
                   * below the smallest normal float (tsr_f8_key_factors),
                   * judged against the emulation only */
} fp8_case;

static const fp8_case fp8_cases[] = {
  { { "fp8-bf16-d128-128x128-gqa-ragged", 2, 4, 2, 1000, 1100, 128, TSR_DT_BF16, 0, 128, 128, 128, 128, MK_RANDOM, 0.4, TL_ROW, 0, 1, 0 }, 0 },
  { { "fp8-bf16-d128-128x128-bshd-split-empty", 1, 3, 3, 900, 777, 128, TSR_DT_BF16, 1, 128, 128, 128, 128, MK_EMPTY, 0.5, TL_SPLIT, 0, 1, 0 }, 0 },
  { { "fp8-fp16-d64-128x128-pack", 1, 8, 2, 700, 700, 64, TSR_DT_F16, 0, 128, 128, 128, 128, MK_RANDOM, 0.4, TL_PACK, 1, 0, 0 }, 0 },
  /* d64 128x128 without partial tiles (the nm variant, its ping-pong), GQA, BSHD */
  { { "fp8-bf16-d64-128x128-gqa-row", 1, 4, 2, 1000, 900, 64, TSR_DT_BF16, 1, 128, 128, 128, 128, MK_RANDOM, 0.4, TL_ROW, 0, 0, 0 }, 0 },
  { { "fp8-bf16-d64-128x64-variable-bshd", 2, 2, 1, 950, 1000, 64, TSR_DT_BF16, 1, 0, 0, 128, 64, MK_RANDOM, 0.4, TL_ROW, 0, 0, 0 }, 0 },
  { { "fp8-bf16-d128-128x64-band-split", 1, 4, 2, 1500, 1500, 128, TSR_DT_BF16, 0, 128, 64, 128, 64, MK_BAND, 0, TL_SPLIT, 0, 0, 0 }, 0 },
  { { "fp8-fp16-d128-128x64-ragged-bshd", 1, 3, 1, 830, 1010, 128, TSR_DT_F16, 1, 128, 64, 128, 64, MK_RANDOM, 0.4, TL_ROW, 0, 0, 0 }, 0 },
  /* fp16 on the d128 128x128 tiles (FA3's tile step on their nm variant), split rows */
  { { "fp8-fp16-d128-128x128-gqa-split", 1, 4, 2, 1100, 1000, 128, TSR_DT_F16, 0, 128, 128, 128, 128, MK_RANDOM, 0.4, TL_SPLIT, 0, 0, 0 }, 0 },
  { { "fp8-bf16-d128-64x64-gqa-empty", 2, 4, 1, 640, 700, 128, TSR_DT_BF16, 1, 64, 64, 64, 64, MK_EMPTY, 0.4, TL_ROW, 0, 1, 0 }, 0 },
  { { "fp8-fp16-d64-64x64-full", 1, 2, 2, 1024, 1024, 64, TSR_DT_F16, 0, 64, 64, 64, 64, MK_FULL, 1, TL_ROW, 0, 0, 0 }, 0 },
  { { "fp8-bf16-d128-128x128-k-outliers", 1, 4, 2, 1200, 1200, 128, TSR_DT_BF16, 1, 128, 128, 128, 128, MK_RANDOM, 0.3, TL_ROW, 0, 0, 0 }, 1 },
  /* the fallback with split rows (both kernels' partial slots in one merge), BHSD, fp16, d64 */
  { { "fp8-fp16-d64-128x64-k-outliers-split", 2, 4, 2, 900, 1000, 64, TSR_DT_F16, 0, 128, 64, 128, 64, MK_RANDOM, 0.4, TL_SPLIT, 0, 1, 0 }, 1 },
  /* masked scores (64-token blocks on 128-token tiles, a ragged last key
   * tile) beside a folded factor that underflows: -inf, never NaN */
  { { "fp8-bf16-d128-128x128-tiny-qk", 1, 2, 2, 600, 650, 128, TSR_DT_BF16, 1, 64, 64, 128, 128, MK_RANDOM, 0.5, TL_ROW, 0, 1, 0 }, 2 },
};

static int fp8_only; /* --fp8: the FP8 cases only */
static const char *fp8_case_filter = ""; /* --case SUBSTR: the FP8 cases whose label holds it */

/* Outlier channels of K in kv head 0 of each batch (then the reference
 * again). */
static void fp8_outliers(prob *P)
{
  const tcase *c = P->c;
  size_t i, n = (size_t)c->B * c->Hkv * c->Sk;
  for (i = 0; i < n; i++) {
    float *kr = P->k + i * c->D;
    if ((i / (size_t)c->Sk) % (size_t)c->Hkv != 0) continue;
    kr[5] = to_f(c->dt, from_f(c->dt, kr[5] * 20.0f));
    kr[c->D - 51] = to_f(c->dt, from_f(c->dt, kr[c->D - 51] * 20.0f));
    kr[40] = to_f(c->dt, from_f(c->dt, kr[40] + 3.0f));
  }
  compute_ref(P);
}

/* q and k times 2^-70 (exact in bf16; then the reference again). */
static void fp8_tiny(prob *P)
{
  const tcase *c = P->c;
  size_t i, nq = (size_t)c->B * c->Hq * c->Sq * c->D, nk = (size_t)c->B * c->Hkv * c->Sk * c->D;
  for (i = 0; i < nq; i++) P->q[i] = ldexpf(P->q[i], -70);
  for (i = 0; i < nk; i++) P->k[i] = ldexpf(P->k[i], -70);
  compute_ref(P);
}

/* Per (batch, head) with a selected row: cosine and relative L2 error of o
 * against the float64 reference; minimum cosine, median cosine and largest
 * error into the outputs.  Returns the number of heads counted. */
static int fp8_head_stats(const prob *P, const float *o, double *cos_min, double *cos_med, double *l2_max)
{
  const tcase *c = P->c;
  int nh = 0, bh, i, j;
  double *cs = malloc((size_t)c->B * c->Hq * sizeof *cs);
  *cos_min = 1;
  *l2_max = 0;
  for (bh = 0; bh < c->B * c->Hq; bh++) {
    double gg = 0, rr = 0, gr = 0, dd = 0;
    for (i = 0; i < c->Sq; i++) {
      size_t row = (size_t)bh * c->Sq + i;
      if (!isfinite(P->ref_lse[row])) continue; /* empty row */
      for (j = 0; j < c->D; j++) {
        double g = o[row * c->D + j], r = P->ref_o[row * c->D + j];
        gg += g * g;
        rr += r * r;
        gr += g * r;
        dd += (g - r) * (g - r);
      }
    }
    if (rr == 0) continue;
    cs[nh] = gg > 0 ? gr / sqrt(gg * rr) : 0;
    if (cs[nh] < *cos_min) *cos_min = cs[nh];
    if (sqrt(dd / rr) > *l2_max) *l2_max = sqrt(dd / rr);
    nh++;
  }
  for (i = 1; i < nh; i++) /* insertion sort: a few heads */
    for (j = i; j > 0 && cs[j - 1] > cs[j]; j--) {
      double x = cs[j];
      cs[j] = cs[j - 1];
      cs[j - 1] = x;
    }
  *cos_med = nh ? cs[nh / 2] : 1;
  free(cs);
  return nh;
}

/* The reference bar (cosine >= 0.999 in every head); `judged` 0: printed only. */
static int fp8_ref_ok(const prob *P, const float *o, int judged, char *line, size_t n)
{
  double cmin, cmed, l2;
  int nh = fp8_head_stats(P, o, &cmin, &cmed, &l2);
  int ok = !judged || (nh > 0 && cmin >= 0.999);
  snprintf(line, n, "vs f64: %d heads, cosine min %.5f median %.5f%s, rel L2 max %.2e", nh, cmin, cmed,
           judged ? "" : " (not judged)", l2);
  return ok;
}

/* The radius of the near-tie p' (tsri_cpu_execute_fp8), in float ulps at
 * the bottom of a binade: relative 2 * 2^-23 = 2.4e-7, which covers
 * ex2.approx.ftz.f32's largest relative error from 2^x over every float x
 * in [-32, 8.5], 1.46e-7 (-2 to +1 ulps from the correctly rounded value;
 * tests/device/ex2_probe.cu on the H200), plus glibc exp2f's, 0.502 ulp. */
#define FP8_EX2_ULPS 2.0f

/* An emulation: o, lse and per row the flip bound (tsri_cpu_execute_fp8). */
typedef struct {
  tsr_array o, l;
  double *flip;
} emu;

static void emu_free(emu *e)
{
  tsr_npy_free(&e->o);
  tsr_npy_free(&e->l);
  free(e->flip);
  memset(e, 0, sizeof *e);
}

/* The CPU emulation of plan pl: the fallback rule's heads native (all_fp8
 * 0) or every head in FP8 (1), with the rows' flip bounds; 0 on success. */
static int fp8_emulate(const prob *P, const tsr_plan *pl, int all_fp8, emu *e)
{
  const tcase *c = P->c;
  tsr_array q, k, v;
  tsr_error err;
  unsigned char *native = all_fp8 ? calloc((size_t)c->B * c->Hq, 1) : NULL;
  tsr_status st;
  memset(e, 0, sizeof *e);
  e->flip = malloc((size_t)c->B * c->Hq * c->Sq * sizeof *e->flip);
  tsr_error_clear(&err);
  memset(&q, 0, sizeof q);
  q.dtype = TSR_DT_F32; q.ndim = 4; q.shape[0] = c->B; q.shape[1] = c->Hq; q.shape[2] = c->Sq; q.shape[3] = c->D;
  q.data = P->q;
  k = q; k.shape[1] = c->Hkv; k.shape[2] = c->Sk; k.data = P->k;
  v = k; v.data = P->v;
  st = tsri_cpu_execute_fp8(pl, &q, &k, &v, native, FP8_EX2_ULPS, e->flip, &e->o, &e->l, &err);
  free(native);
  if (st != TSR_OK) {
    printf("  CPU emulation: %s  FAIL\n", err.text);
    emu_free(e);
  }
  return st != TSR_OK;
}

/* o against the emulation e, row by row: a row passes when its largest
 * error is within tol * max |o| plus its flip bound (what the p' near an
 * e4m3 boundary can move it by, docs/fp8.md).  raw: the largest error over
 * max |o|; net: the largest of (row error - flip bound) over max |o|;
 * flipped: the rows whose error exceeds tol * max |o| and is within their
 * allowance; allow: the largest flip bound over max |o|.  Returns the rows
 * beyond their bound. */
static size_t fp8_judge(const prob *P, const float *o, const emu *e, double tol, double *raw, double *net,
                        size_t *flipped, double *allow)
{
  const tcase *c = P->c;
  size_t nrows = (size_t)c->B * c->Hq * c->Sq, row, d, over = 0;
  const float *eo = e->o.data;
  double maxref = 0;
  *raw = *net = *allow = 0;
  *flipped = 0;
  for (row = 0; row < nrows * c->D; row++)
    if (isfinite(eo[row]) && fabs(eo[row]) > maxref) maxref = fabs(eo[row]);
  if (maxref == 0) maxref = 1;
  for (row = 0; row < nrows; row++) {
    double rmax = 0, fb = e->flip[row] / maxref;
    for (d = 0; d < (size_t)c->D; d++) {
      double g = o[row * c->D + d], r = eo[row * c->D + d];
      if (isfinite(g) && isfinite(r) && fabs(g - r) > rmax) rmax = fabs(g - r);
    }
    rmax /= maxref;
    if (rmax > *raw) *raw = rmax;
    if (rmax - fb > *net) *net = rmax - fb;
    if (fb > *allow) *allow = fb;
    if (rmax > tol + fb) over++;
    else if (rmax > tol) (*flipped)++;
  }
  return over;
}

/* ---- --fp8-diag: where the device and the emulation part (issue 18) ----
 * The emulation of the compared plan (dg_pl, dg_all: every head FP8) under
 * each model of the tensor cores' P V accumulation (tsri_fp8_pv_model),
 * each against the device's output: the model that matches the device
 * names the arithmetic to emulate.  Per model: o's largest and mean error
 * over max |o|, where, and that row's flip bound (tsri_cpu_execute_fp8:
 * what its p' near an e4m3 boundary can move it by). */
static int fp8_diag;
static const tsr_plan *dg_pl;
static int dg_all;
typedef struct { int kind, group, frac; const char *name; } pv_model;
static const pv_model pv_models[] = {
  { TSRI_PV_FP32, 32, 0, "fp32-seq" },
  { TSRI_PV_RZ_SUM, 32, 13, "sum-g32-f13" },
  { TSRI_PV_RZ_SUM, 16, 13, "sum-g16-f13" },
  { TSRI_PV_RZ_ALIGN, 32, 13, "align-g32-f13" },
  { TSRI_PV_RZ_ALIGN, 16, 13, "align-g16-f13" },
};
#define N_PV_MODELS (sizeof pv_models / sizeof *pv_models)
static struct dg_entry {
  const tsr_plan *pl;
  long long n_tasks;
  float *o[N_PV_MODELS];
  double *flip; /* [rows]: the first model's flip bounds */
} dg_caches[2], dg_cache; /* [all]; dg_cache: the one last asked for */

static void fp8_diag_reset(void)
{
  size_t m, a;
  for (a = 0; a < 2; a++) {
    for (m = 0; m < N_PV_MODELS; m++) free(dg_caches[a].o[m]);
    free(dg_caches[a].flip);
  }
  memset(dg_caches, 0, sizeof dg_caches);
  memset(&dg_cache, 0, sizeof dg_cache);
}

/* The models' emulations of (pl, all), cached. */
static int fp8_diag_models(const prob *P, const tsr_plan *pl, int all)
{
  size_t m;
  struct dg_entry *ce = &dg_caches[all != 0];
  if (ce->pl == pl && ce->n_tasks == (long long)pl->n_tasks && ce->o[0]) {
    dg_cache = *ce;
    return 0;
  }
  for (m = 0; m < N_PV_MODELS; m++) free(ce->o[m]);
  free(ce->flip);
  memset(ce, 0, sizeof *ce);
  memset(&dg_cache, 0, sizeof dg_cache);
  for (m = 0; m < N_PV_MODELS; m++) {
    emu e;
    tsri_fp8_pv_model(pv_models[m].kind, pv_models[m].group, pv_models[m].frac);
    if (fp8_emulate(P, pl, all, &e)) {
      tsri_fp8_pv_model(TSRI_PV_RZ_ALIGN, 32, 13);
      return 1;
    }
    dg_cache.o[m] = e.o.data;
    e.o.data = NULL;
    if (m == 0) dg_cache.flip = e.flip, e.flip = NULL;
    emu_free(&e);
  }
  tsri_fp8_pv_model(TSRI_PV_RZ_ALIGN, 32, 13); /* the default, what fp8_emulate runs otherwise */
  dg_cache.pl = pl;
  dg_cache.n_tasks = (long long)pl->n_tasks;
  *ce = dg_cache;
  return 0;
}

/* o (the device's, or a model's) against every model: the largest error
 * over max |o| of each, where, and the row's near-tie facts: flip = what
 * the row's near-tie p' could move o by (over max |o|).  "rows beyond
 * flip": rows whose largest error exceeds flip + 1e-3 (what the
 * accumulation models move o by, at most 7e-4 on the host). */
static void fp8_diag_print(const prob *P, const float *o, const char *what, double tol)
{
  const tcase *c = P->c;
  size_t m, rows = (size_t)c->B * c->Hq * c->Sq, r, d;
  for (m = 0; m < N_PV_MODELS; m++) {
    const float *e = dg_cache.o[m];
    double maxref = 0, maxerr = 0, sum = 0, flipmax = 0, rowerr_at = 0;
    size_t at = 0, n = 0, over = 0, over_tied = 0, tied_rows = 0, beyond = 0;
    for (r = 0; r < rows; r++)
      for (d = 0; d < (size_t)c->D; d++)
        if (isfinite(e[r * c->D + d]) && fabs(e[r * c->D + d]) > maxref) maxref = fabs(e[r * c->D + d]);
    if (maxref == 0) maxref = 1;
    for (r = 0; r < rows; r++) {
      double rmax = 0, flip = dg_cache.flip[r] / maxref;
      tied_rows += flip > 0;
      if (flip > flipmax) flipmax = flip;
      for (d = 0; d < (size_t)c->D; d++) {
        double g = o[r * c->D + d], x = e[r * c->D + d];
        if (!isfinite(g) || !isfinite(x)) continue;
        if (fabs(g - x) > maxerr) maxerr = fabs(g - x), at = r * c->D + d;
        if (fabs(g - x) > rmax) rmax = fabs(g - x);
        sum += fabs(g - x);
        n++;
      }
      rmax /= maxref;
      if (rmax > tol / 2) {
        over++;
        over_tied += flip > 0;
      }
      beyond += rmax > flip + 1e-3;
    }
    r = at / (size_t)c->D;
    d = at % (size_t)c->D;
    rowerr_at = dg_cache.flip[r] / maxref;
    printf("  diag %-40s %-13s o %.3e mean %.2e at b%zu h%zu row %zu d%zu: %.6g vs %.6g, row flip %.2e; "
           "rows > bound/2 %zu (%zu tied), tied rows %zu, flip max %.2e, rows beyond flip+1e-3 %zu\n",
           what, pv_models[m].name, maxerr / maxref, n ? sum / n / maxref : 0,
           r / ((size_t)c->Hq * c->Sq), r / (size_t)c->Sq % (size_t)c->Hq, r % (size_t)c->Sq, d, o[at],
           dg_cache.o[m][at], rowerr_at, over, over_tied, tied_rows, flipmax, beyond);
  }
}

/* The device result of the last launch against the emulation (eo, el) and
 * the reference; returns 0 when it passes. */
/* The last launch's o as float [B][Hq][Sq][D] (malloc'd); its lse lands in
 * db->host_lse. */
static float *fp8_device_o(const tsr_cu *cu, const prob *P, devbufs *db)
{
  const tcase *c = P->c;
  size_t i = 0, b, h, s, d;
  float *o = malloc((size_t)c->B * c->Hq * c->Sq * c->D * sizeof *o);
  CK(cu->cuMemcpyDtoH(db->host_o, db->o, db->o_bytes));
  CK(cu->cuMemcpyDtoH(db->host_lse, db->lse, db->lse_bytes));
  for (b = 0; b < (size_t)c->B; b++)
    for (h = 0; h < (size_t)c->Hq; h++)
      for (s = 0; s < (size_t)c->Sq; s++)
        for (d = 0; d < (size_t)c->D; d++)
          o[i++] = to_f(c->dt, db->host_o[b * db->t.o_stride[0] + h * db->t.o_stride[1] + s * db->t.o_stride[2] + d]);
  return o;
}

static int fp8_compare(const tsr_cu *cu, const prob *P, devbufs *db, const emu *e, int judged, const char *what)
{
  const tcase *c = P->c;
  const float *eo = e->o.data, *el = e->l.data;
  size_t nrows = (size_t)c->B * c->Hq * c->Sq, row, d, bad = 0, over, flipped;
  float *o = fp8_device_o(cu, P, db);
  double maxerr = 0, net, allow, lse_err = 0, tol = fp8_tol(c->dt);
  char line[200];
  int ok;
  for (row = 0; row < nrows; row++) {
    double gl = db->host_lse[row], rl = el[row];
    for (d = 0; d < (size_t)c->D; d++) {
      double g = o[row * c->D + d], r = eo[row * c->D + d];
      if (!isfinite(g) || !isfinite(r)) bad += !same_nonfinite(g, r);
    }
    if (!isfinite(gl) || !isfinite(rl) || !isfinite(P->ref_lse[row]))
      bad += !same_nonfinite(gl, rl) + !same_nonfinite(gl, P->ref_lse[row]);
    else if (fabs(gl - rl) / (fabs(rl) > 1 ? fabs(rl) : 1) > lse_err)
      lse_err = fabs(gl - rl) / (fabs(rl) > 1 ? fabs(rl) : 1);
  }
  over = fp8_judge(P, o, e, tol, &maxerr, &net, &flipped, &allow);
  ok = fp8_ref_ok(P, o, judged, line, sizeof line);
  ok = ok && bad == 0 && over == 0 && lse_err <= 2e-3;
  printf("  %-52s vs emulation: o %.2e, net of flips %.2e (bound %.0e + the row's flip bound, at most %.1e; "
         "%zu rows over it, %zu within it only by their flips) lse %.2e (2e-03) non-finite mismatch %zu; %s  %s\n",
         what, maxerr, net, tol, allow, over, flipped, lse_err, bad, line, ok ? "ok" : "FAIL");
  if (fp8_diag && dg_pl && !fp8_diag_models(P, dg_pl, dg_all)) fp8_diag_print(P, o, what, tol);
  free(o);
  return ok ? 0 : 1;
}

/* An int8 byte's value (q8, k8). */
static float i8_value(uint8_t b) { return (float)(int8_t)b; }

/* An e4m3 byte's value (OCP E4M3: bias 7, 0x7f / 0xff NaN). */
static float e4m3_value(uint8_t b)
{
  int e = (b >> 3) & 15, m = b & 7;
  float x;
  if (e == 15 && m == 7) return NAN;
  x = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf((float)m, -9);
  return b & 0x80 ? -x : x;
}

static void *fp8_fetch(const tsr_cu *cu, CUdeviceptr p, size_t bytes)
{
  void *h = malloc(bytes ? bytes : 1);
  if (bytes) CK(cu->cuMemcpyDtoH(h, p, bytes));
  return h;
}

/* The device's int8 (q8, k8) and e4m3 (vt8) copies and scales after a launch against
 * tsri_fp8_quantize of the same inputs (so that a wrong output says whether
 * the quantization or the attention kernel is at fault), and its per-head
 * fallback flags against the host rule's (all 0 with the fallback off);
 * k_chan is printed (the device's K mean differs in the last bits).  The Q and V
 * scales and every q8 and v8 byte must agree exactly (the same amax, the
 * same IEEE division and multiply, the same rounding); vt8's padding keys
 * must be zero and its keys sit at tsr_f8_slot's positions.  K's mean is
 * summed in fp32 on the device and in double on the CPU, so sk may differ
 * by 1e-5 relative and at most 0.1% of the k8 bytes by one (an int8 tie). */
static int fp8_check_quant(const tsr_cu *cu, const prob *P, const tsr_plan *pl, int fallback)
{
  const tcase *c = P->c;
  const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, Sq = c->Sq, Sk = c->Sk, D = c->D;
  const int64_t qc = (Sq + 63) / 64, kc = (Sk + 63) / 64;
  tsr_gpu_fp8_view v;
  tsr_fp8_tensors t;
  tsr_error err;
  uint8_t *q8, *k8, *vt8, *nat;
  float *sq, *sk, *sv, *kch;
  size_t bq = 0, bk = 0, bk2 = 0, bv = 0, pad = 0, flags_off = 0, flagged = 0;
  double eq = 0, ek = 0, ev = 0, ekc = 0;
  int64_t i, bh, d, tok;
  int ok;
  tsr_error_clear(&err);
  if (!tsri_gpu_fp8_buffers(pl, &v)) {
    printf("  quantization: the plan has no FP8 device copies  FAIL\n");
    return 1;
  }
  if (tsri_fp8_quantize(&pl->problem, P->q, P->k, P->v, &t, &err) != TSR_OK) {
    printf("  quantization: tsri_fp8_quantize: %s  FAIL\n", err.text);
    return 1;
  }
  q8 = fp8_fetch(cu, v.q8, (size_t)(B * Hq * Sq * D));
  k8 = fp8_fetch(cu, v.k8, (size_t)(B * Hkv * Sk * D));
  vt8 = fp8_fetch(cu, v.vt8, (size_t)(B * Hkv * D * v.skp));
  sq = fp8_fetch(cu, v.sq, (size_t)(B * Hq * qc) * 4);
  sk = fp8_fetch(cu, v.sk, (size_t)(B * Hkv * kc) * 4);
  sv = fp8_fetch(cu, v.sv, (size_t)(B * Hkv * D) * 4);
  nat = fp8_fetch(cu, v.native, (size_t)(B * Hq));
  kch = fp8_fetch(cu, v.kchan, (size_t)(B * Hkv) * 4);
  for (i = 0; i < B * Hq; i++) {
    flags_off += nat[i] != (fallback ? t.native[i] : 0);
    flagged += nat[i] != 0;
    /* stats are per q head, the same for a kv head's group */
    ekc = fmax(ekc, fabs(kch[i / (Hq / Hkv)] - t.stats[i].k_chan) / t.stats[i].k_chan);
  }
  for (i = 0; i < B * Hq * Sq * D; i++) bq += i8_value(q8[i]) != t.q8[i];
  for (i = 0; i < B * Hkv * Sk * D; i++) {
    bk += i8_value(k8[i]) != t.k8[i];
    bk2 += fabsf(i8_value(k8[i]) - t.k8[i]) > 1.0f; /* more than a tie's step */
  }
  for (bh = 0; bh < B * Hkv; bh++)
    for (d = 0; d < D; d++)
      for (tok = 0; tok < v.skp; tok++) {
        int64_t k16 = tok & 15, pos = (tok & ~15) | (4 * ((k16 & 7) >> 1) + ((k16 >> 3) << 1) + (k16 & 1));
        float g = e4m3_value(vt8[(bh * D + d) * v.skp + pos]);
        if (tok >= Sk) pad += g != 0;
        else bv += g != t.v8[(bh * Sk + tok) * D + d];
      }
  for (i = 0; i < B * Hq * qc; i++) eq = fmax(eq, fabs(sq[i] - t.sq[i]) / t.sq[i]);
  for (i = 0; i < B * Hkv * kc; i++) ek = fmax(ek, fabs(sk[i] - t.sk[i]) / t.sk[i]);
  for (i = 0; i < B * Hkv * D; i++) ev = fmax(ev, fabs(sv[i] - t.sv[i]) / t.sv[i]);
  ok = bq == 0 && bv == 0 && pad == 0 && eq == 0 && ev == 0 && ek <= 1e-5 && bk2 == 0 &&
       bk <= (size_t)(B * Hkv * Sk * D) / 1000 && flags_off == 0;
  printf("  %-52s bytes off: q8 %zu, k8 %zu of %lld, v8 %zu, padding %zu; scales off: sq %.1e sk %.1e sv %.1e; "
         "fallback %s: %zu of %lld heads native, %zu flags off the host rule's, k_chan off %.1e  %s\n",
         "(quantization vs tsri_fp8_quantize)", bq, bk, (long long)(B * Hkv * Sk * D), bv, pad, eq, ek, ev,
         fallback ? "on" : "off", flagged, (long long)(B * Hq), flags_off, ekc, ok ? "ok" : "FAIL");
  free(q8); free(k8); free(vt8); free(sq); free(sk); free(sv); free(nat); free(kch);
  tsri_fp8_free(&t);
  return ok ? 0 : 1;
}

/* The heads the host's fallback rule sends to the native dtype (into
 * out[B * Hq] unless NULL); returns their number, -1 on failure. */
static int fp8_rule_heads(const prob *P, const tsr_problem *pr, unsigned char *out)
{
  const tcase *c = P->c;
  tsr_fp8_tensors t;
  tsr_error err;
  int n = 0, i;
  tsr_error_clear(&err);
  if (tsri_fp8_quantize(pr, P->q, P->k, P->v, &t, &err) != TSR_OK) {
    printf("  tsri_fp8_quantize: %s  FAIL\n", err.text);
    return -1;
  }
  for (i = 0; i < c->B * c->Hq; i++) {
    n += t.native[i] != 0;
    if (out) out[i] = t.native[i];
  }
  tsri_fp8_free(&t);
  return n;
}

/* Fallback off: the launch of pl (uploaded or bound) again with every head
 * in FP8 against the emulation ao, al of that (printed against f64, not
 * judged); the fallback is back on after it.  `run` launches. */
static int fp8_off_run(tsr_context *ctx, const tsr_cu *cu, const prob *P, tsr_plan *pl, devbufs *db,
                       CUstream stream, tsr_status (*run)(void *, CUstream, tsr_error *), void *arg,
                       const emu *a)
{
  tsr_error err;
  char what[160];
  int fails;
  (void)ctx;
  tsr_error_clear(&err);
  if (!tsri_gpu_fp8_fallback(pl, 0)) {
    printf("  fallback off: the plan has no FP8 device copies  FAIL\n");
    return 1;
  }
  poison(cu, db);
  if (run(arg, stream, &err) != TSR_OK) {
    printf("  fallback off: launch failed: %s  FAIL\n", err.text);
    tsri_gpu_fp8_fallback(pl, 1);
    return 1;
  }
  CK(cu->cuStreamSynchronize(stream));
  snprintf(what, sizeof what, "%s, fallback off", pl->variant);
  dg_all = 1;
  fails = fp8_compare(cu, P, db, a, 0, what) + fp8_check_quant(cu, P, pl, 0);
  dg_all = 0;
  tsri_gpu_fp8_fallback(pl, 1);
  return fails;
}

typedef struct {
  tsr_context *ctx;
  const tsr_plan *pl;
  const tsr_gpu_tensors *t;
} host_launch;

static tsr_status host_launch_run(void *arg, CUstream stream, tsr_error *err)
{
  const host_launch *h = arg;
  return tsr_gpu_launch(h->ctx, h->pl, h->t, stream, err);
}

/* Plan pl (precision fp8) with variant `name` (NULL: the one chosen); ao,
 * al: the every-head-FP8 emulation when some head falls back (then the
 * fallback-off run too), else NULL. */
static int fp8_run_variant(tsr_context *ctx, const tsr_cu *cu, const prob *P, tsr_plan *pl, devbufs *db,
                           CUstream stream, const char *name, const emu *e, int judged, const emu *a)
{
  tsr_error err;
  tsr_error_clear(&err);
  if (pl->gpu) {
    pl->gpu_free(pl->gpu);
    pl->gpu = NULL;
    pl->gpu_free = NULL;
  }
  if (name) snprintf(pl->variant, sizeof pl->variant, "%s", name);
  else pl->variant[0] = '\0';
  if (tsr_gpu_upload(ctx, pl, &err) != TSR_OK) {
    printf("  %-52s upload failed: %s  FAIL\n", name ? name : "(chosen)", err.text);
    return 1;
  }
  if (!strstr(pl->variant, "_fp8_")) {
    printf("  %-52s an FP8 plan got a native variant  FAIL\n", pl->variant);
    return 1;
  }
  poison(cu, db);
  if (tsr_gpu_launch(ctx, pl, &db->t, stream, &err) != TSR_OK) {
    printf("  %-52s launch failed: %s  FAIL\n", pl->variant, err.text);
    return 1;
  }
  CK(cu->cuStreamSynchronize(stream));
  {
    int fails = fp8_compare(cu, P, db, e, judged, pl->variant);
    fails += fp8_check_quant(cu, P, pl, 1);
    if (a) {
      host_launch h = { ctx, pl, &db->t };
      fails += fp8_off_run(ctx, cu, P, pl, db, stream, host_launch_run, &h, a);
    }
    return fails;
  }
}

typedef struct {
  tsr_gpuplan *gp;
  const tsr_gpu_tensors *t;
} dev_launch;

static tsr_status dev_launch_run(void *arg, CUstream stream, tsr_error *err)
{
  const dev_launch *d = arg;
  return tsr_gpuplan_run(d->gp, d->t, stream, err);
}

/* The device planner's plans of P's mask (uniform blocks; bytes format),
 * precision fp8, row and split tasks (split only with `quick`): planned
 * and run on the device, the plan downloaded for the emulation. */
static int fp8_gpuplan_runs(tsr_context *ctx, const tsr_cu *cu, const prob *P, devbufs *db, CUstream stream,
                            int judged, int quick, int *ran)
{
  const tcase *c = P->c;
  int fails = 0, t;
  size_t mbytes = (size_t)c->B * c->Hq * P->nq * P->nk;
  CUdeviceptr dmask;
  if (c->bq <= 0) return 0; /* variable blocks: the device planner takes them with a geometry, not here */
  CK(cu->cuMemAlloc(&dmask, mbytes));
  CK(cu->cuMemcpyHtoD(dmask, P->mask, mbytes));
  for (t = TSR_TASKS_ROW; t <= TSR_TASKS_SPLIT; t++) {
    tsr_geom *g = NULL;
    tsr_mask *m = NULL;
    tsr_problem pr;
    tsr_plan_opts o;
    tsr_gpuplan_caps caps;
    tsr_gpuplan *gp = NULL;
    tsr_plan *hp = NULL;
    tsr_error err;
    emu eo, ao;
    char what[200];
    if (quick && t != TSR_TASKS_SPLIT) continue;
    tsr_error_clear(&err);
    if (make_geom_mask(P, &g, &m, &err)) {
      printf("  device planner: %s  FAIL\n", err.text);
      fails++;
      break;
    }
    memset(&pr, 0, sizeof pr);
    pr.batch = c->B; pr.heads_q = c->Hq; pr.heads_kv = c->Hkv; pr.seq_q = c->Sq; pr.seq_k = c->Sk;
    pr.head_dim = c->D; pr.scale = P->scale; pr.dtype = c->dt;
    pr.layout = c->bshd ? TSR_LAYOUT_BSHD : TSR_LAYOUT_BHSD;
    pr.geom = g;
    tsr_plan_opts_init(&o);
    o.tasks = (tsr_tasks)t;
    o.split_tiles = t == TSR_TASKS_SPLIT ? 3 : 0; /* the device planner's split needs a fixed chunk */
    o.tile_m = c->tm;
    o.tile_n = c->tn;
    o.precision = TSR_PREC_FP8;
    tsr_gpuplan_caps_init(&caps);
    if (tsr_problem_check(&pr, &err) || tsr_gpuplan_create(ctx, &pr, &o, &caps, &gp, &err)) {
      printf("  device planner fp8 tasks %d: %s  %s\n", t, err.text, err.status == TSR_ERR_UNSUPPORTED ? "n/a" : "FAIL");
      fails += err.status != TSR_ERR_UNSUPPORTED;
    } else {
      dev_launch d = { gp, &db->t };
      poison(cu, db);
      if (tsr_gpuplan_launch(gp, dmask, TSR_MASK_BYTES, &db->t, stream, &err) ||
          tsr_gpuplan_download(gp, &hp, &err)) {
        printf("  device planner fp8 tasks %d: %s  FAIL\n", t, err.text);
        fails++;
      } else if (fp8_emulate(P, hp, 0, &eo) || fp8_emulate(P, hp, 1, &ao)) {
        fails++;
      } else {
        tsr_plan *dp = tsri_gpuplan_device_plan(gp);
        snprintf(what, sizeof what, "device planner tasks %d: %lld tasks %lld merges, %s", t,
                 (long long)hp->n_tasks, (long long)hp->n_merges, dp->variant);
        fails += fp8_compare(cu, P, db, &eo, judged, what);
        fails += fp8_check_quant(cu, P, dp, 1);
        if (fp8_rule_heads(P, &pr, NULL) > 0) fails += fp8_off_run(ctx, cu, P, dp, db, stream, dev_launch_run, &d, &ao);
        (*ran)++;
        emu_free(&eo);
        emu_free(&ao);
      }
      tsr_plan_destroy(hp);
      tsr_gpuplan_destroy(gp);
    }
    tsr_mask_destroy(m);
    tsr_geom_destroy(g);
  }
  cu->cuMemFree(dmask);
  return fails;
}

/* Defects the bound must catch (issue 18: a principled bound that still
 * fails on a real defect).  With every head in FP8 (the fallback-off runs,
 * where the flip bounds are the largest):
 *  - "dropped tile": the plan's first task of two or more key tiles loses
 *    its last one;
 *  - "V scale": v of (batch 0, kv head 0) 1/32 larger, so its sv is 1/32
 *    off (the bytes stay).
 * Each mutated emulation against o (the emulation itself on the host, the
 * device's fallback-off output on the GPU) must leave rows beyond their
 * bound.  Returns the mutations that went undetected. */
static int fp8_mutants(const prob *P, tsr_plan *pl, const float *o, const char *what)
{
  const tcase *c = P->c;
  int fails = 0, m;
  double tol = fp8_tol(c->dt);
  for (m = 0; m < 2; m++) {
    emu e;
    int64_t ti = -1, i;
    size_t nv = (size_t)c->Sk * c->D, over, flipped;
    float *v0 = NULL;
    double raw, net, allow;
    if (m == 0) {
      for (i = 0; i < pl->n_tasks && ti < 0; i++)
        if (pl->tasks[i].tile_end - pl->tasks[i].tile_begin >= 2 && pl->tasks[i].n_members > 0) ti = i;
      if (ti < 0) continue;
      pl->tasks[ti].tile_end--;
    } else { /* [B][Hkv][Sk][D]: (0, 0) first */
      v0 = malloc(nv * sizeof *v0);
      memcpy(v0, P->v, nv * sizeof *v0);
      for (i = 0; i < (int64_t)nv; i++) P->v[i] *= 1.0f + 1.0f / 32;
    }
    if (fp8_emulate(P, pl, 1, &e)) {
      fails++;
    } else {
      over = fp8_judge(P, o, &e, tol, &raw, &net, &flipped, &allow);
      printf("  %-52s mutant %-12s o %.2e, net of flips %.2e: %zu rows beyond their bound  %s\n", what,
             m == 0 ? "dropped tile" : "V scale", raw, net, over, over > 0 ? "caught" : "FAIL (not caught)");
      fails += over == 0;
      emu_free(&e);
    }
    if (m == 0) pl->tasks[ti].tile_end++;
    else memcpy(P->v, v0, nv * sizeof *v0), free(v0);
  }
  return fails;
}

/* The device's side of fp8_mutants' dropped tile: pl with one task's last
 * key tile dropped, launched with variant `name` and the fallback off,
 * against the every-head-FP8 emulation a of the whole plan: must fail. */
static int fp8_device_mutant(tsr_context *ctx, const tsr_cu *cu, const prob *P, tsr_plan *pl, devbufs *db,
                             CUstream stream, const char *name, const emu *a)
{
  const tcase *c = P->c;
  int64_t ti = -1, i;
  tsr_error err;
  size_t over, flipped;
  double raw, net, allow, tol = fp8_tol(c->dt);
  float *o;
  for (i = 0; i < pl->n_tasks && ti < 0; i++)
    if (pl->tasks[i].tile_end - pl->tasks[i].tile_begin >= 2 && pl->tasks[i].n_members > 0) ti = i;
  if (ti < 0) return 0;
  tsr_error_clear(&err);
  if (pl->gpu) {
    pl->gpu_free(pl->gpu);
    pl->gpu = NULL;
    pl->gpu_free = NULL;
  }
  pl->tasks[ti].tile_end--;
  snprintf(pl->variant, sizeof pl->variant, "%s", name);
  if (tsr_gpu_upload(ctx, pl, &err) != TSR_OK || !tsri_gpu_fp8_fallback(pl, 0)) {
    printf("  device mutant: upload failed: %s  FAIL\n", err.text);
    pl->tasks[ti].tile_end++;
    return 1;
  }
  poison(cu, db);
  if (tsr_gpu_launch(ctx, pl, &db->t, stream, &err) != TSR_OK) {
    printf("  device mutant: launch failed: %s  FAIL\n", err.text);
    pl->tasks[ti].tile_end++;
    return 1;
  }
  CK(cu->cuStreamSynchronize(stream));
  o = fp8_device_o(cu, P, db);
  over = fp8_judge(P, o, a, tol, &raw, &net, &flipped, &allow);
  printf("  %-52s device mutant dropped tile (task %lld) vs every-head-FP8 emulation: o %.2e, net of flips %.2e: "
         "%zu rows beyond their bound  %s\n", name, (long long)ti, raw, net, over, over > 0 ? "caught" : "FAIL (not caught)");
  free(o);
  pl->tasks[ti].tile_end++;
  pl->gpu_free(pl->gpu);
  pl->gpu = NULL;
  pl->gpu_free = NULL;
  return over == 0;
}

/* One FP8 case: the emulation against the reference (host side, also
 * without a GPU), then with a context the device runs. */
static int fp8_case_run(tsr_context *ctx, const tsr_cu *cu, const tsr_bundle *bundle, CUstream stream,
                        const fp8_case *fc, int quick, int *ran)
{
  const tcase *c = &fc->c;
  prob P;
  devbufs db;
  tsr_plan *pl;
  emu eo, ao;
  char line[200];
  int fails = 0, n = 0, t, n_native, judged = fc->k_outliers != 2;
  size_t i;
  make_problem(&P, c);
  if (fc->k_outliers == 1) fp8_outliers(&P);
  if (fc->k_outliers == 2) fp8_tiny(&P);
  pl = build_plan(&P);
  pl->opts.precision = TSR_PREC_FP8;
  printf("fp8 case %s: B=%d Hq=%d Hkv=%d Sq=%d Sk=%d D=%d %s %s tile %dx%d: %lld tasks, %lld merges\n", c->label,
         c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D, tsri_variant_dtype_name(c->dt), c->bshd ? "BSHD" : "BHSD", c->tm,
         c->tn, (long long)pl->n_tasks, (long long)pl->n_merges);
  {
    /* the host rule: exactly the q heads of the outlier kv heads (kv head 0
     * of each batch) fall back, and no head elsewhere */
    unsigned char *nat = malloc((size_t)c->B * c->Hq);
    int bad = 0, g = c->Hq / c->Hkv;
    n_native = fp8_rule_heads(&P, &pl->problem, nat);
    for (i = 0; n_native >= 0 && i < (size_t)(c->B * c->Hq); i++)
      bad += nat[i] != (fc->k_outliers == 1 && (i % (size_t)c->Hq) / (size_t)g == 0);
    printf("  %-52s %d of %d heads fall back, %d off the outlier heads  %s\n", "(host fallback rule)", n_native,
           c->B * c->Hq, bad, n_native >= 0 && bad == 0 ? "ok" : "FAIL");
    fails += n_native < 0 || bad != 0;
    free(nat);
  }
  memset(&ao, 0, sizeof ao);
  if (fp8_emulate(&P, pl, 0, &eo) || (n_native > 0 && fp8_emulate(&P, pl, 1, &ao))) {
    free_own_plan(pl);
    free_problem(&P);
    return 1;
  }
  {
    int ok = fp8_ref_ok(&P, eo.o.data, judged, line, sizeof line);
    printf("  %-52s %s  %s\n", "(CPU emulation)", line, ok ? "ok" : "FAIL");
    fails += !ok;
  }
  if (n_native > 0) { /* printed: the scheme alone on the outlier heads */
    fp8_ref_ok(&P, ao.o.data, 0, line, sizeof line);
    printf("  %-52s %s\n", "(CPU emulation, every head FP8)", line);
    if (!fp8_diag) fails += fp8_mutants(&P, pl, ao.o.data, "(CPU emulation, every head FP8)");
  }
  fp8_diag_reset();
  dg_pl = fp8_diag ? pl : NULL; /* the test's own plan only */
  dg_all = 0;
  if (!ctx) {
    if (fp8_diag) { /* the models against the fp32 one: how far the accumulation alone moves o */
      int all;
      for (all = 0; all <= (n_native > 0); all++)
        if (!fp8_diag_models(&P, pl, all)) {
          float *o0 = malloc((size_t)c->B * c->Hq * c->Sq * c->D * sizeof *o0);
          memcpy(o0, dg_cache.o[0], (size_t)c->B * c->Hq * c->Sq * c->D * sizeof *o0);
          fp8_diag_print(&P, o0, all ? "(host) fp32-seq model, every head FP8" : "(host) fp32-seq model",
                         fp8_tol(c->dt));
          free(o0);
        }
      fp8_diag_reset();
      dg_pl = NULL;
    }
    emu_free(&eo);
    emu_free(&ao);
    free_own_plan(pl);
    free_problem(&P);
    return fails;
  }
  make_devbufs(cu, &P, &db);
  {
    const char *arch = tsri_context_arch(ctx);
    tsr_variant_need need = {0};
    int a = tsri_arch_index(arch);
    need.dtype = c->dt;
    need.head_dim = c->D;
    need.bm = pl->tile_m;
    need.bn = pl->tile_n;
    need.membership = pl->n_membership > 0;
    need.fp8 = 1;
    for (i = 0; i < bundle->n; i++) {
      const tsr_bundle_entry *e = &bundle->items[i];
      if (!(e->targets & (1u << a)) || !tsri_variant_serves(&e->v, arch, &need)) continue;
      if (strncmp(e->name, only_prefix, strlen(only_prefix)) != 0) continue;
      fails += fp8_run_variant(ctx, cu, &P, pl, &db, stream, e->name, &eo, judged, n_native > 0 ? &ao : NULL);
      if (n_native > 0 && n == 0 && !fp8_diag) { /* the device's dropped tile, and the V-scale mutant against its output */
        float *o;
        tsr_error merr;
        tsr_error_clear(&merr);
        fails += fp8_device_mutant(ctx, cu, &P, pl, &db, stream, e->name, &ao);
        if (fp8_run_variant(ctx, cu, &P, pl, &db, stream, e->name, &eo, judged, NULL) == 0 &&
            tsri_gpu_fp8_fallback(pl, 0)) {
          poison(cu, &db);
          if (tsr_gpu_launch(ctx, pl, &db.t, stream, &merr) == TSR_OK) {
            CK(cu->cuStreamSynchronize(stream));
            o = fp8_device_o(cu, &P, &db);
            fails += fp8_mutants(&P, pl, o, "(device, fallback off)");
            free(o);
          }
          tsri_gpu_fp8_fallback(pl, 1);
        }
      }
      n++;
    }
    if (n == 0 && !only_prefix[0]) {
      printf("  no FP8 variant serves %s d%d tile %dx%d on %s  FAIL\n", tsri_variant_dtype_name(c->dt), c->D,
             pl->tile_m, pl->tile_n, arch);
      fails++;
    }
  }
  emu_free(&eo);
  emu_free(&ao);
  fp8_diag_reset();
  dg_pl = NULL;
  free_own_plan(pl);
  /* the planner's plans of the case's tile, every task layout (not under
   * --fp8-diag, which looks at the test's own plan) */
  for (t = TSR_TASKS_ROW; t <= TSR_TASKS_PACK && n > 0 && !fp8_diag; t++) {
    tsr_geom *g = NULL;
    tsr_mask *m = NULL;
    tsr_problem pr;
    tsr_plan_opts o;
    tsr_plan *pp = NULL;
    tsr_error err;
    char what[160];
    if (quick && t != TSR_TASKS_SPLIT) continue;
    tsr_error_clear(&err);
    if (make_geom_mask(&P, &g, &m, &err)) {
      printf("  planner: %s  FAIL\n", err.text);
      fails++;
      break;
    }
    memset(&pr, 0, sizeof pr);
    pr.batch = c->B; pr.heads_q = c->Hq; pr.heads_kv = c->Hkv; pr.seq_q = c->Sq; pr.seq_k = c->Sk;
    pr.head_dim = c->D; pr.scale = P.scale; pr.dtype = c->dt;
    pr.layout = c->bshd ? TSR_LAYOUT_BSHD : TSR_LAYOUT_BHSD;
    pr.geom = g;
    tsr_plan_opts_init(&o);
    o.tasks = (tsr_tasks)t;
    o.tile_m = c->tm;
    o.tile_n = c->tn;
    o.precision = TSR_PREC_FP8;
    o.arch = tsri_context_arch(ctx);
    o.num_sms = tsri_context_num_sms(ctx);
    if (tsr_problem_check(&pr, &err) || tsr_plan_create(&pr, m, &o, &pp, &err)) {
      printf("  planner fp8 tasks %d: %s  %s\n", t, err.text, err.status == TSR_ERR_UNSUPPORTED ? "n/a" : "FAIL");
      fails += err.status != TSR_ERR_UNSUPPORTED;
    } else if ((memset(&ao, 0, sizeof ao), !fp8_emulate(&P, pp, 0, &eo)) &&
               (n_native == 0 || !fp8_emulate(&P, pp, 1, &ao))) {
      snprintf(what, sizeof what, "planner tasks %d: %lld tasks %lld merges", t, (long long)pp->n_tasks,
               (long long)pp->n_merges);
      printf("  %s\n", what);
      fails += fp8_run_variant(ctx, cu, &P, pp, &db, stream, NULL, &eo, judged, n_native > 0 ? &ao : NULL);
      n++;
      emu_free(&eo);
      emu_free(&ao);
    } else {
      fails++;
    }
    tsr_plan_destroy(pp);
    tsr_mask_destroy(m);
    tsr_geom_destroy(g);
  }
  if (n > 0 && !fp8_diag) fails += fp8_gpuplan_runs(ctx, cu, &P, &db, stream, judged, quick, &n);
  *ran += n;
  free_devbufs(cu, &db);
  free_problem(&P);
  return fails;
}

/* An FP8 plan whose tile no FP8 variant serves (64x128) is refused with
 * TSR_ERR_NO_VARIANT naming the precision: never a silent native run. */
static int fp8_refusal(tsr_context *ctx)
{
  static const tcase c = { "fp8-no-variant", 1, 2, 2, 300, 300, 128, TSR_DT_BF16, 0, 64, 64, 64, 128, MK_RANDOM, 0.5, TL_ROW, 0, 0, 0 };
  prob P;
  tsr_plan *pl;
  tsr_error err;
  tsr_status st;
  int ok;
  make_problem(&P, &c);
  pl = build_plan(&P);
  pl->opts.precision = TSR_PREC_FP8;
  tsr_error_clear(&err);
  st = tsr_gpu_upload(ctx, pl, &err);
  ok = st == TSR_ERR_NO_VARIANT && strstr(err.text, "fp8") != NULL;
  printf("fp8 refusal (tile 64x128, no FP8 variant): status %d, '%s'  %s\n", (int)st, err.text, ok ? "ok" : "FAIL");
  free_own_plan(pl);
  free_problem(&P);
  return ok ? 0 : 1;
}

static int fp8_runs(tsr_context *ctx, const tsr_cu *cu, const tsr_bundle *bundle, CUstream stream, int quick,
                    int *ran)
{
  size_t i;
  int fails = 0;
  const uint64_t base = rng_state; /* seed ^ FP8_SEED */
  for (i = 0; i < sizeof fp8_cases / sizeof *fp8_cases; i++)
    if ((!quick || fp8_cases[i].c.quick) && strstr(fp8_cases[i].c.label, fp8_case_filter)) {
      /* each case its own stream, so that --case runs it on the inputs of
       * the whole run (FNV-1a of the label) */
      const char *l = fp8_cases[i].c.label;
      uint64_t h = 1469598103934665603ULL;
      while (*l) h = (h ^ (unsigned char)*l++) * 1099511628211ULL;
      rng_state = base ^ h;
      fails += fp8_case_run(ctx, cu, bundle, stream, &fp8_cases[i], quick, ran);
    }
  if (ctx) fails += fp8_refusal(ctx);
  return fails;
}

/* ---- --fp8-parts: each kernel of a launch alone ------------------------- */

/* Driver calls the library's table leaves out (graph inspection), resolved
 * here for --fp8-parts only. */
typedef struct {
  CUresult (*get_nodes)(CUgraph, CUgraphNode *, size_t *);
  CUresult (*node_type)(CUgraphNode, CUgraphNodeType *);
  CUresult (*kernel_params)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*func_name)(const char **, CUfunction);
} parts_api;

static int parts_api_open(parts_api *a)
{
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return 0;
  a->get_nodes = (CUresult(*)(CUgraph, CUgraphNode *, size_t *))dlsym(h, "cuGraphGetNodes");
  a->node_type = (CUresult(*)(CUgraphNode, CUgraphNodeType *))dlsym(h, "cuGraphNodeGetType");
  a->kernel_params = (CUresult(*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *))dlsym(h, "cuGraphKernelNodeGetParams_v2");
  a->func_name = (CUresult(*)(const char **, CUfunction))dlsym(h, "cuFuncGetName");
  return a->get_nodes && a->node_type && a->kernel_params && a->func_name;
}

/* The least bytes a quantization kernel must move over n = S * H * D
 * elements (2-byte inputs, 1-byte outputs), by its name's suffix; 0 for
 * the attention and merge kernels. */
static double parts_floor_bytes(const char *name, double n)
{
  const char *u = strrchr(name, '_');
  if (!u) return 0;
  if (strcmp(u, "_kvstats") == 0) return 4 * n;          /* reads k, v */
  if (strcmp(u, "_quant") == 0) return 9 * n;            /* reads q, k, v; writes q8, k8, vt8 */
  return 0;
}

/* Captures one tsr_gpu_launch of pl into a graph and times each of its
 * kernels alone, relaunched with the captured arguments: median over 7
 * rounds of `per` back-to-back launches (per: about 2 ms a round), against
 * the bandwidth floor (bytes / 4.0 TB/s) where parts_floor_bytes has one;
 * pairs: selected token pairs (TFLOP/s of the attention kernel). */
static void time_parts(tsr_context *ctx, const tsr_cu *cu, CUstream stream, const tsr_plan *pl,
                       const tsr_gpu_tensors *t, const char *label, double n, double pairs, int D)
{
  parts_api a;
  CUgraph graph;
  CUgraphNode nodes[16];
  size_t nn = 16, i;
  CUevent e0, e1;
  tsr_error err;
  double sum = 0;
  if (!parts_api_open(&a)) {
    printf("fp8-parts: %s: graph inspection calls missing  FAIL\n", label);
    return;
  }
  tsr_error_clear(&err);
  CK(cu->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  tsr_gpu_launch(ctx, pl, t, stream, &err);
  CK(cu->cuStreamEndCapture(stream, &graph));
  if (err.status) {
    printf("fp8-parts: %s: launch under capture: %s  FAIL\n", label, err.text);
    cu->cuGraphDestroy(graph);
    return;
  }
  CK(a.get_nodes(graph, nodes, &nn));
  CK(cu->cuEventCreate(&e0, 0));
  CK(cu->cuEventCreate(&e1, 0));
  for (i = 0; i < nn && i < 16; i++) {
    CUgraphNodeType ty;
    CUDA_KERNEL_NODE_PARAMS kp;
    const char *name = "?";
    float ms[7], one;
    double us, fl;
    int r, k, per;
    CK(a.node_type(nodes[i], &ty));
    if (ty != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CK(a.kernel_params(nodes[i], &kp));
    if (a.func_name(&name, kp.func) != CUDA_SUCCESS) name = "?";
#define PARTS_LAUNCH()                                                                                     \
  CK(cu->cuLaunchKernel(kp.func, kp.gridDimX, kp.gridDimY, kp.gridDimZ, kp.blockDimX, kp.blockDimY,        \
                        kp.blockDimZ, kp.sharedMemBytes, stream, kp.kernelParams, kp.extra))
    PARTS_LAUNCH(); /* warm-up, then one timed launch to size the rounds */
    CK(cu->cuEventRecord(e0, stream));
    PARTS_LAUNCH();
    CK(cu->cuEventRecord(e1, stream));
    CK(cu->cuEventSynchronize(e1));
    CK(cu->cuEventElapsedTime(&one, e0, e1));
    per = one > 0 ? (int)(2.0 / one) : 50;
    per = per < 1 ? 1 : per > 50 ? 50 : per;
    for (r = 0; r < 7; r++) {
      CK(cu->cuEventRecord(e0, stream));
      for (k = 0; k < per; k++) PARTS_LAUNCH();
      CK(cu->cuEventRecord(e1, stream));
      CK(cu->cuEventSynchronize(e1));
      CK(cu->cuEventElapsedTime(&ms[r], e0, e1));
      ms[r] /= (float)per;
    }
#undef PARTS_LAUNCH
    qsort(ms, 7, sizeof *ms, cmp_float);
    us = ms[3] * 1e3;
    sum += us;
    fl = parts_floor_bytes(name, n) / 4.0e12 * 1e6;
    if (fl > 0)
      printf("fp8-parts: %s  %-44s grid %6u  %9.1f us  floor %7.1f us  %.2fx floor\n", label, name,
             kp.gridDimX * kp.gridDimY, us, fl, us / fl);
    else
      printf("fp8-parts: %s  %-44s grid %6u  %9.1f us  %6.1f TFLOP/s\n", label, name, kp.gridDimX * kp.gridDimY,
             us, 4.0 * pairs * D / (us * 1e-6) / 1e12);
  }
  printf("fp8-parts: %s  sum of kernels %9.1f us\n", label, sum);
  cu->cuEventDestroy(e0);
  cu->cuEventDestroy(e1);
  cu->cuGraphDestroy(graph);
}

/* ---- --fp8-bench: FP8 against bf16, same plan, request time -------------- */

/* Random block masks of density `dens` (1: dense) on S tokens, H heads,
 * D = 128, BSHD bf16; blocks bq x bk planned on bq x bk tiles; for each
 * precision the variant the library picks, median of `reps` event-timed
 * launches after 2 warm-ups, the FP8 launch including its quantization
 * kernels.  Prints both, the speedup and the cosine of the two outputs. */
static int fp8_bench_one(tsr_context *ctx, const tsr_cu *cu, CUstream stream, int S, int H, int bq, int bk,
                         double dens, int reps, int parts)
{
  const int D = 128, nq = (S + bq - 1) / bq, nk = (S + bk - 1) / bk;
  size_t n = (size_t)S * H * D, i;
  uint16_t *host = malloc(n * 2), *o_nat = malloc(n * 2), *o_f8 = malloc(n * 2);
  uint8_t *bits = malloc((size_t)H * nq * nk);
  CUdeviceptr dq, dk, dv, dout;
  tsr_gpu_tensors t;
  CUevent e0, e1;
  tsr_error err;
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_problem pr;
  double pairs = 0, ms_of[2] = { 0, 0 }, ms_f8_off = 0, gg = 0, rr = 0, gr = 0;
  char vname[2][96] = { "", "" };
  int prec, fails = 0;
  tsr_error_clear(&err);
  for (i = 0; i < n; i++) host[i] = f2bf((float)(2 * urand() - 1));
  CK(cu->cuMemAlloc(&dq, n * 2));
  CK(cu->cuMemAlloc(&dk, n * 2));
  CK(cu->cuMemAlloc(&dv, n * 2));
  CK(cu->cuMemAlloc(&dout, n * 2));
  CK(cu->cuMemcpyHtoD(dq, host, n * 2));
  for (i = 0; i < n; i++) host[i] = f2bf((float)(2 * urand() - 1));
  CK(cu->cuMemcpyHtoD(dk, host, n * 2));
  for (i = 0; i < n; i++) host[i] = f2bf((float)(2 * urand() - 1));
  CK(cu->cuMemcpyHtoD(dv, host, n * 2));
  bench_tensors(&t, dq, dk, dv, dout, S, H, D);
  if ((pairs = bench_mask(S, H, D, TSR_DT_BF16, bq, bk, dens, bits, &pr, &g, &m, &err)) < 0) {
    printf("fp8-bench: %s  FAIL\n", err.text);
    return 1;
  }
  CK(cu->cuEventCreate(&e0, 0));
  CK(cu->cuEventCreate(&e1, 0));
  for (prec = 0; prec < 2; prec++) {
    tsr_plan_opts o;
    tsr_plan *pl = NULL;
    float ms[32], ms_off[32];
    int r;
    tsr_plan_opts_init(&o);
    o.tile_m = bq;
    o.tile_n = bk;
    o.precision = prec ? TSR_PREC_FP8 : TSR_PREC_NATIVE;
    o.arch = tsri_context_arch(ctx);
    o.num_sms = tsri_context_num_sms(ctx);
    if (tsr_plan_create(&pr, m, &o, &pl, &err) != TSR_OK || tsr_gpu_upload(ctx, pl, &err) != TSR_OK) {
      printf("fp8-bench: S=%d %dx%d density %.2f %s: %s  FAIL\n", S, bq, bk, dens, prec ? "fp8" : "bf16", err.text);
      fails++;
      tsr_plan_destroy(pl);
      continue;
    }
    snprintf(vname[prec], sizeof vname[prec], "%s", pl->variant);
    for (r = 0; r < 2; r++) tsr_gpu_launch(ctx, pl, &t, stream, &err);
    for (r = 0; r < reps && !err.status; r++) {
      /* FP8: the fallback off in between (interleaved), what the device
       * fallback costs where no head falls back (the split CTA, the native
       * launch finding no task) */
      if (prec && tsri_gpu_fp8_fallback(pl, 0)) {
        CK(cu->cuEventRecord(e0, stream));
        tsr_gpu_launch(ctx, pl, &t, stream, &err);
        CK(cu->cuEventRecord(e1, stream));
        CK(cu->cuEventSynchronize(e1));
        CK(cu->cuEventElapsedTime(&ms_off[r], e0, e1));
        tsri_gpu_fp8_fallback(pl, 1);
      }
      CK(cu->cuEventRecord(e0, stream));
      tsr_gpu_launch(ctx, pl, &t, stream, &err);
      CK(cu->cuEventRecord(e1, stream));
      CK(cu->cuEventSynchronize(e1));
      CK(cu->cuEventElapsedTime(&ms[r], e0, e1));
    }
    if (err.status) {
      printf("fp8-bench: launch %s: %s  FAIL\n", vname[prec], err.text);
      fails++;
    } else {
      qsort(ms, (size_t)reps, sizeof *ms, cmp_float);
      ms_of[prec] = ms[reps / 2];
      if (prec) {
        qsort(ms_off, (size_t)reps, sizeof *ms_off, cmp_float);
        ms_f8_off = ms_off[reps / 2];
      }
      CK(cu->cuMemcpyDtoH(prec ? o_f8 : o_nat, dout, n * 2));
      if (parts) {
        char label[64];
        snprintf(label, sizeof label, "S=%-6d %3dx%-3d %.2f %-4s", S, bq, bk, dens, prec ? "fp8" : "bf16");
        time_parts(ctx, cu, stream, pl, &t, label, (double)n, pairs, D);
      }
    }
    tsr_plan_destroy(pl);
  }
  for (i = 0; i < n; i++) {
    double x = bf2f(o_f8[i]), y = bf2f(o_nat[i]);
    gg += x * x; rr += y * y; gr += x * y;
  }
  if (ms_of[0] > 0 && ms_of[1] > 0)
    printf("fp8-bench: S=%-6d H=%-2d blocks %3dx%-3d density %.2f  bf16 %8.3f ms %6.1f TFLOP/s (%s)  fp8 %8.3f ms "
           "%6.1f TFLOP/s (%s)  speedup %.2fx  cosine(fp8, bf16) %.5f\n",
           S, H, bq, bk, dens, ms_of[0], 4.0 * pairs * D / (ms_of[0] * 1e-3) / 1e12, vname[0], ms_of[1],
           4.0 * pairs * D / (ms_of[1] * 1e-3) / 1e12, vname[1], ms_of[0] / ms_of[1],
           gg > 0 && rr > 0 ? gr / sqrt(gg * rr) : 0.0);
  if (ms_of[1] > 0 && ms_f8_off > 0)
    printf("fp8-bench: S=%-6d H=%-2d blocks %3dx%-3d density %.2f  fp8 fallback on %8.3f ms, off %8.3f ms: "
           "on costs %+.1f us (%+.2f%%), no head flagged\n",
           S, H, bq, bk, dens, ms_of[1], ms_f8_off, (ms_of[1] - ms_f8_off) * 1e3,
           100.0 * (ms_of[1] - ms_f8_off) / ms_f8_off);
  cu->cuEventDestroy(e0);
  cu->cuEventDestroy(e1);
  cu->cuMemFree(dq); cu->cuMemFree(dk); cu->cuMemFree(dv); cu->cuMemFree(dout);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  free(host); free(o_nat); free(o_f8); free(bits);
  return fails;
}

/* Wan2.1-1.3B 480p (32760 tokens, 12 heads) and Wan2.1-14B 720p (75600,
 * 40 heads), D 128: blocks 128x128, 128x64, 64x64 at 10% and 25%, and
 * dense (128x128 blocks; at 32K all three). */
static int fp8_bench(tsr_context *ctx, const tsr_cu *cu, CUstream stream, int parts)
{
  static const int blk[3][2] = { { 128, 128 }, { 128, 64 }, { 64, 64 } };
  static const double dens[3] = { 0.10, 0.25, 1.0 };
  const char *only = getenv("TSR_AB_TOKENS"); /* e.g. 32760: that size only, as --fp8-ab */
  int fails = 0, bi, di, si;
  for (si = 0; si < 2; si++)
    for (bi = 0; bi < 3; bi++)
      for (di = 0; di < 3; di++) {
        if (si == 1 && di == 2 && bi > 0) continue; /* dense 75K: 128x128 only (planning time) */
        if (only && *only && atoi(only) != (si ? 75600 : 32760)) continue;
        fails += fp8_bench_one(ctx, cu, stream, si ? 75600 : 32760, si ? 40 : 12, blk[bi][0], blk[bi][1], dens[di],
                               si ? 5 : 10, parts);
      }
  return fails;
}

/* ---- --fp8-ab DIR[,DIR...]: FP8 request time of several bundles, alternated ----
 *
 * The kernel A/B of issue 18: one process, the same tensors and masks, the
 * same library; bf16 on the main context's bundle, FP8 once per bundle
 * named (each in its own context; the first is the baseline).  Problems as
 * --fp8-bench's (random q, k, v in [-1, 1), BSHD bf16, D 128, random block
 * masks planned on tiles of the block): 32760 x 12 and 75600 x 40, blocks
 * 128x128 and 128x64 (and 64x64 where every bundle serves it) at 10% and
 * 25%.  Request time (quantization included): per configuration the median
 * of 3 rounds x reps event-timed launches, the rounds interleaved across
 * configurations so that drift hits them alike.  Also the cosine of each
 * FP8 output with the bf16 one (its first 2^22 elements: the first tokens
 * of every head): a broken kernel shows there, correctness is --fp8's job. */
#define AB_MAX 8
static int fp8_ab_shape(tsr_context **cx, int nb, const char **lab, const tsr_cu *cu, CUstream stream,
                        const tsr_gpu_tensors *t, CUdeviceptr dout, int S, int H, int bq, int bk, double dens,
                        int reps)
{
  const int D = 128, nq = (S + bq - 1) / bq, nk = (S + bk - 1) / bk, nc = nb + 1, R = 3;
  const size_t n = (size_t)S * H * D, ns = n < ((size_t)1 << 22) ? n : (size_t)1 << 22;
  uint8_t *bits = malloc((size_t)H * nq * nk);
  uint16_t *o_ref = malloc(ns * 2), *o_x = malloc(ns * 2);
  tsr_plan *pl[AB_MAX + 1] = { NULL };
  float *ms = malloc(sizeof(float) * (size_t)nc * R * reps);
  double pairs, med[AB_MAX + 1], cosv[AB_MAX + 1];
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_problem pr;
  tsr_error err;
  CUevent e0, e1;
  int c, r, k, fails = 0;
  size_t i;
  tsr_error_clear(&err);
  if ((pairs = bench_mask(S, H, D, TSR_DT_BF16, bq, bk, dens, bits, &pr, &g, &m, &err)) < 0) {
    printf("fp8-ab: %s  FAIL\n", err.text);
    return 1;
  }
  for (c = 0; c < nc; c++) {
    tsr_plan_opts o;
    tsr_plan_opts_init(&o);
    o.tile_m = bq;
    o.tile_n = bk;
    o.precision = c ? TSR_PREC_FP8 : TSR_PREC_NATIVE;
    o.arch = tsri_context_arch(cx[c]);
    o.num_sms = tsri_context_num_sms(cx[c]);
    if (tsr_plan_create(&pr, m, &o, &pl[c], &err) != TSR_OK || tsr_gpu_upload(cx[c], pl[c], &err) != TSR_OK) {
      /* a bundle without a variant for this shape sits it out */
      printf("fp8-ab: S=%d %dx%d %.2f %s: %s  (not timed)\n", S, bq, bk, dens, lab[c], err.text);
      tsr_plan_destroy(pl[c]);
      pl[c] = NULL;
      tsr_error_clear(&err);
      if (c <= 1) { /* no bf16 or no baseline: nothing to compare */
        for (k = 0; k < c; k++) tsr_plan_destroy(pl[k]);
        tsr_mask_destroy(m);
        tsr_geom_destroy(g);
        free(bits); free(o_ref); free(o_x); free(ms);
        return 0;
      }
    }
  }
  CK(cu->cuEventCreate(&e0, 0));
  CK(cu->cuEventCreate(&e1, 0));
  for (r = 0; r < R; r++)
    for (c = 0; c < nc; c++) {
      if (!pl[c]) continue;
      tsr_gpu_launch(cx[c], pl[c], t, stream, &err); /* warm-up */
      for (k = 0; k < reps && !err.status; k++) {
        float *x = &ms[((size_t)c * R + r) * reps + k];
        CK(cu->cuEventRecord(e0, stream));
        tsr_gpu_launch(cx[c], pl[c], t, stream, &err);
        CK(cu->cuEventRecord(e1, stream));
        CK(cu->cuEventSynchronize(e1));
        CK(cu->cuEventElapsedTime(x, e0, e1));
      }
      if (err.status) {
        printf("fp8-ab: launch %s (%s): %s  FAIL\n", pl[c]->variant, lab[c], err.text);
        return fails + 1;
      }
      if (r == R - 1) { /* the last round's output: cosine with bf16's */
        uint16_t *dst = c ? o_x : o_ref;
        double gg = 0, rr = 0, gr = 0;
        CK(cu->cuMemcpyDtoH(dst, dout, ns * 2));
        for (i = 0; i < ns && c; i++) {
          double a = bf2f(o_x[i]), b = bf2f(o_ref[i]);
          gg += a * a; rr += b * b; gr += a * b;
        }
        cosv[c] = gg > 0 && rr > 0 ? gr / sqrt(gg * rr) : 0.0;
      }
    }
  for (c = 0; c < nc; c++) {
    if (!pl[c]) continue;
    qsort(&ms[(size_t)c * R * reps], (size_t)R * reps, sizeof *ms, cmp_float);
    med[c] = ms[(size_t)c * R * reps + (size_t)R * reps / 2];
  }
  printf("fp8-ab: S=%-6d H=%-2d %3dx%-3d %.2f  bf16 %8.3f ms %6.1f TF (%s)\n", S, H, bq, bk, dens, med[0],
         4.0 * pairs * D / (med[0] * 1e-3) / 1e12, pl[0]->variant);
  for (c = 1; c < nc; c++) {
    if (!pl[c]) continue;
    printf("fp8-ab: S=%-6d H=%-2d %3dx%-3d %.2f  %-10s %8.3f ms %6.1f TF  vs bf16 %.3fx  vs %s %.3fx  cos %.5f (%s)\n",
           S, H, bq, bk, dens, lab[c], med[c], 4.0 * pairs * D / (med[c] * 1e-3) / 1e12, med[0] / med[c], lab[1],
           med[1] / med[c], cosv[c], pl[c]->variant);
    if (!(cosv[c] > 0.99)) {
      printf("fp8-ab: %s: cosine %.5f with bf16  FAIL\n", lab[c], cosv[c]);
      fails++;
    }
  }
  fflush(stdout); /* the lines so far survive a timeout */
  cu->cuEventDestroy(e0);
  cu->cuEventDestroy(e1);
  for (c = 0; c < nc; c++) tsr_plan_destroy(pl[c]);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  free(bits); free(o_ref); free(o_x); free(ms);
  return fails;
}

static int fp8_ab(tsr_context *ctx, const tsr_cu *cu, CUstream stream, char *list)
{
  static const int blk[3][2] = { { 128, 128 }, { 128, 64 }, { 64, 64 } };
  static const double dens[2] = { 0.10, 0.25 };
  tsr_context *cx[AB_MAX + 1] = { ctx };
  const char *lab[AB_MAX + 1] = { "bf16" };
  char *tok, *save = NULL;
  int nb = 0, si, bi, di, fails = 0;
  for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    tsr_context_opts o;
    tsr_error err;
    const char *sl = strrchr(tok, '/');
    if (nb == AB_MAX) {
      fprintf(stderr, "gpu_attn: --fp8-ab takes at most %d bundles\n", AB_MAX);
      return 1;
    }
    tsr_context_opts_init(&o);
    o.bundle_dir = tok;
    tsr_error_clear(&err);
    if (tsr_context_create(&o, &cx[nb + 1], &err) != TSR_OK) {
      fprintf(stderr, "gpu_attn: --fp8-ab bundle '%s': %s\n", tok, err.text);
      return 1;
    }
    lab[++nb] = sl && sl[1] ? sl + 1 : tok;
  }
  for (si = 0; si < 2; si++) {
    const int S = si ? 75600 : 32760, H = si ? 40 : 12, D = 128;
    const char *only = getenv("TSR_AB_TOKENS"); /* e.g. 32760: that size only */
    const size_t n = (size_t)S * H * D, off = 7919 * (size_t)D;
    uint16_t *host = malloc((n + 2 * off) * 2);
    CUdeviceptr dq, dk, dv, dout;
    tsr_gpu_tensors t;
    size_t i;
    if (only && *only && atoi(only) != S) continue;
    /* one random buffer, q, k and v at different offsets of it */
    for (i = 0; i < n + 2 * off; i++) host[i] = f2bf((float)(2 * urand() - 1));
    CK(cu->cuMemAlloc(&dq, n * 2));
    CK(cu->cuMemAlloc(&dk, n * 2));
    CK(cu->cuMemAlloc(&dv, n * 2));
    CK(cu->cuMemAlloc(&dout, n * 2));
    CK(cu->cuMemcpyHtoD(dq, host, n * 2));
    CK(cu->cuMemcpyHtoD(dk, host + off, n * 2));
    CK(cu->cuMemcpyHtoD(dv, host + 2 * off, n * 2));
    free(host);
    bench_tensors(&t, dq, dk, dv, dout, S, H, D);
    for (bi = 0; bi < 3; bi++)
      for (di = 0; di < 2; di++)
        fails += fp8_ab_shape(cx, nb, lab, cu, stream, &t, dout, S, H, blk[bi][0], blk[bi][1], dens[di], si ? 3 : 5);
    cu->cuMemFree(dq); cu->cuMemFree(dk); cu->cuMemFree(dv); cu->cuMemFree(dout);
  }
  for (si = 1; si <= nb; si++) tsr_context_destroy(cx[si]);
  return fails;
}

int main(int argc, char **argv)
{
  tsr_context_opts o;
  tsr_context *ctx = NULL;
  tsr_error err;
  tsr_bundle bundle;
  const tsr_cu *cu;
  CUstream stream;
  const char *dir = getenv("TESSERA_BUNDLE");
  char dirbuf[4096];
  unsigned long seed = 20261129;
  int quick = 0, do_bench = 0, i, fails = 0, ran = 0;
  char *ab_list = NULL;
  size_t ci;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) quick = 1;
    else if (strcmp(argv[i], "--bench") == 0) do_bench = 1;
    else if (strcmp(argv[i], "--bench-all") == 0) do_bench = 2;
    else if (strcmp(argv[i], "--fp8-bench") == 0) do_bench = 3;
    else if (strcmp(argv[i], "--fp8-parts") == 0) do_bench = 4;
    else if (strcmp(argv[i], "--fp8") == 0) fp8_only = 1;
    else if (strcmp(argv[i], "--fp8-diag") == 0) fp8_only = fp8_diag = 1;
    else if (strcmp(argv[i], "--fp8-ab") == 0 && i + 1 < argc) do_bench = 5, ab_list = argv[++i];
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only_prefix = argv[++i];
    else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) fp8_case_filter = argv[++i];
    else {
      fprintf(stderr, "usage: gpu_attn [--quick | --bench | --bench-all | --fp8 | --fp8-diag | --fp8-bench | --fp8-parts | --fp8-ab DIR[,DIR...]] [--seed N] [--only PREFIX] [--case SUBSTR]\n");
      return 2;
    }
  }
  if (!dir || !*dir) {
    const char *top = getenv("TSR_TOP_BUILDDIR");
    snprintf(dirbuf, sizeof dirbuf, "%s/bundle", top && *top ? top : ".");
    dir = dirbuf;
  }
  tsr_context_opts_init(&o);
  o.bundle_dir = dir;
  tsr_error_clear(&err);
  if (tsr_context_create(&o, &ctx, &err) != TSR_OK) {
    if (err.status == TSR_ERR_NO_DEVICE && !do_bench) {
      /* The host-side parts still run: a failure there fails the test. */
      printf("gpu_attn: no GPU (%s): host-side checks only\n", err.text);
      rng_state = seed ^ NF_SEED;
      if (!fp8_only) fails = nonfinite_runs(NULL, NULL, NULL, NULL, quick, &ran);
      rng_state = seed ^ FP8_SEED;
      fails += fp8_runs(NULL, NULL, NULL, NULL, quick, &ran);
      printf("gpu_attn: host-side checks: %d failures; GPU runs skipped\n", fails);
      return fails ? 1 : SKIP;
    }
    if (err.status == TSR_ERR_NO_DEVICE) {
      printf("gpu_attn: skipped: %s\n", err.text);
      return SKIP;
    }
    fprintf(stderr, "gpu_attn: %s\n", err.text);
    return 1;
  }
  if (tsri_bundle_load(dir, &bundle, &err) != TSR_OK) {
    fprintf(stderr, "gpu_attn: %s\n", err.text);
    return 1;
  }
  cu = tsri_context_cu(ctx);
  CK(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)); /* graph capture needs a non-legacy stream */
  printf("gpu_attn: seed %lu, target %s, %d SMs, bundle '%s' (%zu variants)%s\n", seed, tsri_context_arch(ctx),
         tsri_context_num_sms(ctx), dir, bundle.n, quick ? ", quick" : "");
  rng_state = seed;
  if (do_bench) {
    static const int dims[] = { 128, 64 }, blks[] = { 128, 64 };
    static const tsr_dtype dts[] = { TSR_DT_BF16, TSR_DT_F16 };
    int di, ti, bi;
    if (do_bench == 1) {
      fails = bench(ctx, cu, &bundle, stream, 128, TSR_DT_BF16, 128, 128, 128, TSR_MAP_AUTO);
      fails += bench(ctx, cu, &bundle, stream, 128, TSR_DT_BF16, 128, 64, 64, TSR_MAP_AUTO);
      fails += bench(ctx, cu, &bundle, stream, 128, TSR_DT_BF16, 128, 64, 128, TSR_MAP_GATHER);
      /* d64 64x64 blocks (VSA's cubes at head dim 64) on their own tiles and
       * gathered onto 64x128 ones */
      fails += bench(ctx, cu, &bundle, stream, 64, TSR_DT_BF16, 64, 64, 64, TSR_MAP_AUTO);
      fails += bench(ctx, cu, &bundle, stream, 64, TSR_DT_BF16, 64, 64, 128, TSR_MAP_GATHER);
    }
    else if (do_bench == 5) fails = fp8_ab(ctx, cu, stream, ab_list);
    else if (do_bench >= 3) fails = fp8_bench(ctx, cu, stream, do_bench == 4);
    else
      for (di = 0; di < 2; di++)
        for (ti = 0; ti < 2; ti++) {
          for (bi = 0; bi < 2; bi++)
            fails += bench(ctx, cu, &bundle, stream, dims[di], dts[ti], blks[bi], blks[bi], blks[bi], TSR_MAP_AUTO);
          fails += bench(ctx, cu, &bundle, stream, dims[di], dts[ti], 128, 128, 64, TSR_MAP_AUTO);
          fails += bench(ctx, cu, &bundle, stream, dims[di], dts[ti], 128, 64, 64, TSR_MAP_AUTO);
          fails += bench(ctx, cu, &bundle, stream, dims[di], dts[ti], 128, 64, 128, TSR_MAP_GATHER);
          fails += bench(ctx, cu, &bundle, stream, dims[di], dts[ti], 64, 64, 128, TSR_MAP_GATHER);
        }
    cu->cuStreamDestroy(stream);
    tsri_bundle_free(&bundle);
    tsr_context_destroy(ctx);
    return fails ? 1 : 0;
  }

  for (ci = 0; ci < sizeof cases / sizeof *cases && !fp8_only; ci++) {
    const tcase *c = &cases[ci];
    prob P;
    devbufs db;
    tsr_plan *pl;
    if (quick && !c->quick) continue;
    make_problem(&P, c);
    make_devbufs(cu, &P, &db);
    pl = build_plan(&P);
    printf("case %s: B=%d Hq=%d Hkv=%d Sq=%d Sk=%d D=%d %s %s blocks %s tile %dx%d: %lld tasks, %lld tiles, "
           "%lld membership words, %lld merges\n",
           c->label, c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D, tsri_variant_dtype_name(c->dt),
           c->bshd ? "BSHD" : "BHSD", c->bq ? "uniform" : "variable", c->tm, c->tn, (long long)pl->n_tasks,
           (long long)pl->n_tiles, (long long)pl->n_membership, (long long)pl->n_merges);
    fails += run_all_variants(ctx, cu, &bundle, &P, pl, &db, stream, quick, ci == 0, &ran);
    free_own_plan(pl);
    fails += cross_check_ref(&P);
    fails += planner_runs(ctx, cu, &P, &db, stream, quick, &ran);
    free_devbufs(cu, &db);
    free_problem(&P);
  }
  rng_state = seed ^ NF_SEED; /* the same problems as the host-only run */
  if (!fp8_only) fails += nonfinite_runs(ctx, cu, &bundle, stream, quick, &ran);
  /* The FP8 cases run under --fp8 only (tests/device/run fp8): the default
   * run is the native variants' correctness gate, and --fp8 emulates every
   * plan on the CPU (about a minute on the device machine). */
  rng_state = seed ^ FP8_SEED;
  if (fp8_only)
    fails += fp8_runs(ctx, cu, &bundle, stream, quick, &ran);

  cu->cuStreamDestroy(stream);
  tsri_bundle_free(&bundle);
  tsr_context_destroy(ctx);
  if (ran == 0 && only_prefix[0]) {
    printf("gpu_attn: no bundle variant named '%s*' ran  FAIL\n", only_prefix);
    fails++;
  }
  printf("gpu_attn: %d variant runs, %d failures\n", ran, fails);
  return fails ? 1 : 0;
}

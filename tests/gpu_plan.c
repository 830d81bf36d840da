/*
 * gpu_plan.c: the device planner (tsr_gpuplan_*) against the host planner
 * and the CPU reference.  Plain C (the GPU machine has no Check); exits 77
 * where no driver or GPU is present.
 *
 * For random masks (empty rows and an empty head, ragged and rectangular
 * sequences, GQA, batch and head broadcast, byte and bit-packed masks, every
 * tile shape of the bundle, retain / combine / subdivide, row and split
 * tasks), for gather plans (128x64 blocks on 128x128 tiles, 64x64 on 64x128: rows of odd
 * and even block counts, one block, the ragged last block, all or none;
 * ragged seq_k, GQA, broadcast, split rows, byte and bit masks of several
 * mask words a row), for variable geometries (STA-like ragged tiles, VSA-like cubes,
 * random ragged sizes, uniform sizes given as a variable geometry) and for
 * the masks of a generated demo corpus, each case:
 *   - plans the device mask on the GPU and downloads the plan;
 *   - proves it exact with tsr_plan_verify against the mask;
 *   - compares its counts with tsr_plan_create's for the same options
 *     (tiles, partial tiles, tasks, split rows, empty rows), and every
 *     row's tiles, membership words and chunks byte for byte
 *     (tests/plan_rows.h); for row and split tasks split as the host
 *     splits, task by task: the host planner's order (groups, longest
 *     first, creation-order ties, the snake over a random num_sms of
 *     1-12), members and merge records;
 *   - for uniform sizes given as a variable geometry: the whole device
 *     plan (every array) byte-identical to the uniform geometry's;
 *   - runs attention with the device plan and with the host plan on the GPU
 *     (outputs poisoned with NaN first) and compares both with the float64
 *     CPU reference (bf16/fp16 tolerance 1e-2, lse 1e-2, -inf exact);
 *   - checks the features the planner wrote (density) against the mask;
 *   - gather plans: every row's tiles against the mask itself (its selected
 *     blocks paired in ascending order, an odd last one alone), no words.
 * Gather cases need kg kernels (the sm90 family): where the bundle has none
 * for a device other than sm_90, they are skipped with a note.
 * Then: plan-and-run captured once in a CUDA graph and replayed while the
 * mask buffer's contents change every step; capacity overflow (flagged,
 * nothing launched) and a small slot capacity (rows stay whole, still
 * exact); rejected inputs.  Last, timings with CUDA events for Wan2.1-1.3B
 * 480p and Wan2.1-14B 720p, and Wan2.1-1.3B with 128x64 blocks planned on
 * 128x64 tiles and as a gather plan on 128x128 tiles.
 *
 *   gpu_plan [--seed N] [--no-timing] [--quick] [--only PREFIX]
 *   --quick: four cases, the graph and the rejections (for compute-sanitizer).
 *   --only PREFIX: the random, gather and variable cases whose label starts
 *   with PREFIX, nothing else (the sm80 emulator, tests/device/sm80_emu.sh).
 */
#include "cuda_impl.h"
#include "plan_impl.h"
#include "plan_rows.h"
#include "tools.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SKIP 77

static uint64_t rng_state;
static uint32_t rnd(void)
{
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}
static double urand(void) { return rnd() / 2147483648.0; }

static const tsr_cu *cu;
static tsr_context *ctx;
static int failures;

#define CK(call)                                                    \
  do {                                                              \
    tsr_error e_;                                                   \
    tsr_error_clear(&e_);                                           \
    if (tsri_cu_check(cu, (call), #call, &e_) != TSR_OK) {           \
      fprintf(stderr, "gpu_plan: %s\n", e_.text);                   \
      exit(1);                                                      \
    }                                                               \
  } while (0)

#define TRY(call)                                                        \
  do {                                                                   \
    tsr_error e_;                                                        \
    tsr_error_clear(&e_);                                                \
    if ((call) != TSR_OK) {                                              \
      fprintf(stderr, "gpu_plan: %s:%d: %s\n", __FILE__, __LINE__, e_.text); \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

static void fail(const char *label, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
#include <stdarg.h>
static void fail(const char *label, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s: ", label);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  failures++;
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- cases -------------------------------------------------------------- */

enum { MK_RANDOM, MK_BAND, MK_FULL, MK_NONE };

typedef struct {
  const char *label;
  int B, Hq, Hkv, Sq, Sk, D;
  tsr_dtype dt;
  int bq, bk, tm, tn;
  tsr_mapping mapping;
  tsr_tasks tasks;
  int split;         /* split_tiles */
  int mask;
  double density;
  int mask_b, mask_h; /* 1 = broadcast, 0 = full */
  tsr_mask_format fmt;
  int run;           /* run attention (CPU reference cost) */
} tcase;

static const tcase cases[] = {
  {"retain-128x128-row-bytes-gqa", 1, 4, 2, 1000, 1000, 128, TSR_DT_BF16, 128, 128, 128, 128,
   TSR_MAP_AUTO, TSR_TASKS_ROW, 0, MK_RANDOM, 0.3, 0, 0, TSR_MASK_BYTES, 1},
  {"retain-64x64-row-bits-rect", 2, 3, 3, 777, 900, 64, TSR_DT_F16, 64, 64, 64, 64, TSR_MAP_AUTO,
   TSR_TASKS_ROW, 0, MK_RANDOM, 0.35, 0, 0, TSR_MASK_BITS, 1},
  {"combine-32-128x64-split", 1, 2, 2, 1100, 1100, 128, TSR_DT_BF16, 32, 32, 128, 64,
   TSR_MAP_COMBINE, TSR_TASKS_SPLIT, 3, MK_RANDOM, 0.4, 0, 0, TSR_MASK_BYTES, 1},
  {"combine-96-128x128-split-bits", 1, 2, 1, 1100, 1000, 64, TSR_DT_BF16, 96, 96, 128, 128,
   TSR_MAP_COMBINE, TSR_TASKS_SPLIT, 2, MK_RANDOM, 0.4, 0, 0, TSR_MASK_BITS, 1},
  {"subdivide-256-64x64-row", 1, 2, 2, 1500, 1500, 128, TSR_DT_F16, 256, 256, 64, 64,
   TSR_MAP_SUBDIVIDE, TSR_TASKS_ROW, 0, MK_BAND, 0, 0, 0, TSR_MASK_BYTES, 1},
  {"rect-blocks-128x64-on-64x64-split-headbcast", 1, 4, 2, 1000, 1000, 128, TSR_DT_BF16, 128,
   64, 64, 64, TSR_MAP_AUTO, TSR_TASKS_SPLIT, 4, MK_RANDOM, 0.5, 0, 1, TSR_MASK_BYTES, 1},
  {"batchbcast-64-on-128x64-bits", 2, 2, 2, 640, 512, 128, TSR_DT_BF16, 64, 64, 128, 64,
   TSR_MAP_AUTO, TSR_TASKS_ROW, 0, MK_RANDOM, 0.3, 1, 0, TSR_MASK_BITS, 1},
  {"full-128x64-split", 1, 2, 2, 1024, 1024, 128, TSR_DT_BF16, 128, 64, 128, 64, TSR_MAP_AUTO,
   TSR_TASKS_SPLIT, 5, MK_FULL, 1, 0, 0, TSR_MASK_BYTES, 1},
  {"empty-everything", 1, 2, 2, 500, 500, 64, TSR_DT_BF16, 64, 64, 64, 64, TSR_MAP_AUTO,
   TSR_TASKS_ROW, 0, MK_NONE, 0, 0, 0, TSR_MASK_BYTES, 1},
  {"retain-64x128-split-bits", 1, 2, 2, 1000, 1100, 64, TSR_DT_F16, 64, 128, 64, 128, TSR_MAP_AUTO,
   TSR_TASKS_SPLIT, 3, MK_RANDOM, 0.4, 0, 0, TSR_MASK_BITS, 1},
  /* One geometry (32-token blocks, ragged) on every tile shape of the bundle. */
  {"tiles-32-on-64x64", 1, 2, 1, 700, 650, 64, TSR_DT_BF16, 32, 32, 64, 64, TSR_MAP_COMBINE,
   TSR_TASKS_ROW, 0, MK_RANDOM, 0.3, 0, 0, TSR_MASK_BYTES, 1},
  {"tiles-32-on-64x128", 1, 2, 1, 700, 650, 64, TSR_DT_BF16, 32, 32, 64, 128, TSR_MAP_COMBINE,
   TSR_TASKS_SPLIT, 2, MK_RANDOM, 0.3, 0, 0, TSR_MASK_BITS, 1},
  {"tiles-32-on-128x64", 1, 2, 1, 700, 650, 64, TSR_DT_BF16, 32, 32, 128, 64, TSR_MAP_COMBINE,
   TSR_TASKS_ROW, 0, MK_RANDOM, 0.3, 0, 0, TSR_MASK_BYTES, 1},
  {"tiles-32-on-128x128", 1, 2, 1, 700, 650, 64, TSR_DT_BF16, 32, 32, 128, 128, TSR_MAP_COMBINE,
   TSR_TASKS_SPLIT, 2, MK_RANDOM, 0.3, 0, 0, TSR_MASK_BITS, 1},
  /* bench-peers' long shapes (Wan2.1-14B's 75,600 tokens, 40 heads; 118,800 x
   * 24), where the GPU-planned request trailed the host plan by 1-5%: the
   * device's order is the host's there too, not only on small plans. */
  {"long-plan-only-75600x40", 1, 40, 40, 75600, 75600, 128, TSR_DT_BF16, 128, 128, 128, 128,
   TSR_MAP_AUTO, TSR_TASKS_ROW, 0, MK_RANDOM, 0.25, 0, 0, TSR_MASK_BITS, 0},
  {"long-plan-only-118800x24", 1, 24, 24, 118800, 118800, 128, TSR_DT_BF16, 128, 128, 128, 128,
   TSR_MAP_AUTO, TSR_TASKS_ROW, 0, MK_RANDOM, 0.10, 0, 0, TSR_MASK_BITS, 0},
  {"big-plan-only-48-on-128x128", 2, 8, 8, 6000, 6000, 128, TSR_DT_BF16, 48, 48, 128, 128,
   TSR_MAP_AUTO, TSR_TASKS_SPLIT, 7, MK_RANDOM, 0.2, 0, 0, TSR_MASK_BITS, 0},
};

/* ---- masks and tensors -------------------------------------------------- */

/* Random, band or full masks with empty rows, and (heads > 1) one empty head. */
static uint8_t *make_mask(int mb, int mh, int nq, int nk, int kind, double dens)
{
  uint8_t *m = malloc((size_t)mb * mh * nq * nk);
  int b, h, i, j;
  for (b = 0; b < mb; b++)
    for (h = 0; h < mh; h++) {
      int empty_head = kind == MK_RANDOM && mh > 1 && h == mh - 1 && b == 0;
      for (i = 0; i < nq; i++) {
        int empty_row = kind != MK_FULL && (rnd() % 7 == 0);
        for (j = 0; j < nk; j++) {
          uint8_t x;
          if (kind == MK_NONE || empty_head || empty_row) x = 0;
          else if (kind == MK_FULL) x = 1;
          else if (kind == MK_BAND) x = abs(i * nk / nq - j) <= 1 || j == 0;
          else x = urand() < dens;
          m[(((size_t)b * mh + h) * nq + i) * nk + j] = x ? (uint8_t)(1 + rnd() % 200) : 0;
        }
      }
    }
  return m;
}

/* Bit-packed copy: rows of ceil(nk/32) words, LSB first. */
static uint32_t *pack_bits(const uint8_t *m, int64_t rows, int nk)
{
  int pitch = (nk + 31) / 32;
  uint32_t *w = calloc((size_t)rows * pitch, 4);
  int64_t r;
  int j;
  for (r = 0; r < rows; r++)
    for (j = 0; j < nk; j++)
      if (m[r * nk + j]) w[r * pitch + j / 32] |= 1u << (j % 32);
  return w;
}

static CUdeviceptr upload_mask(const uint8_t *m, int64_t rows, int nk, tsr_mask_format fmt,
                               CUdeviceptr reuse)
{
  CUdeviceptr d = reuse;
  size_t bytes = fmt == TSR_MASK_BITS ? (size_t)rows * ((nk + 31) / 32) * 4 : (size_t)rows * nk;
  if (!d) CK(cu->cuMemAlloc(&d, bytes));
  if (fmt == TSR_MASK_BITS) {
    uint32_t *w = pack_bits(m, rows, nk);
    CK(cu->cuMemcpyHtoD(d, w, bytes));
    free(w);
  } else {
    CK(cu->cuMemcpyHtoD(d, m, bytes));
  }
  return d;
}

typedef struct {
  int B, Hq, Hkv, Sq, Sk, D;
  tsr_dtype dt;
  tsr_array q, k, v;          /* float32 BHSD, values rounded to dt */
  CUdeviceptr dq, dk, dv, dout, dlse;
  tsr_gpu_tensors t;
} tensors;

static uint16_t to16(tsr_dtype dt, float f) { return dt == TSR_DT_BF16 ? tsr_float_to_bf16(f) : tsr_float_to_half(f); }
static float from16(tsr_dtype dt, uint16_t h) { return dt == TSR_DT_BF16 ? tsr_bf16_to_float(h) : tsr_half_to_float(h); }

/* Fills a device tensor with random values.  host: also keep the float32
 * host copy; without one (timing tensors, up to ~0.4 G elements) a random
 * pattern of 4 M elements is repeated, which keeps the values non-zero and
 * varied without minutes of host work. */
static void fill_array(tsr_array *a, int B, int H, int S, int D, tsr_dtype dt, CUdeviceptr *d, int host)
{
  int64_t n = (int64_t)B * H * S * D, i, chunk = 4 << 20;
  uint16_t *h;
  float *f;
  if (!host && n > chunk) {
    memset(a, 0, sizeof *a);
    h = malloc((size_t)chunk * 2);
    for (i = 0; i < chunk; i++) h[i] = to16(dt, (float)(urand() * 2 - 1));
    CK(cu->cuMemAlloc(d, (size_t)n * 2));
    for (i = 0; i < n; i += chunk)
      CK(cu->cuMemcpyHtoD(*d + (size_t)i * 2, h, (size_t)(n - i < chunk ? n - i : chunk) * 2));
    free(h);
    return;
  }
  h = malloc((size_t)n * 2);
  memset(a, 0, sizeof *a);
  a->dtype = TSR_DT_F32;
  a->ndim = 4;
  a->shape[0] = B;
  a->shape[1] = H;
  a->shape[2] = S;
  a->shape[3] = D;
  a->data = f = malloc((size_t)n * 4);
  for (i = 0; i < n; i++) {
    h[i] = to16(dt, (float)(urand() * 2 - 1));
    f[i] = from16(dt, h[i]);
  }
  CK(cu->cuMemAlloc(d, (size_t)n * 2));
  CK(cu->cuMemcpyHtoD(*d, h, (size_t)n * 2));
  free(h);
}

static void make_tensors(tensors *x, int B, int Hq, int Hkv, int Sq, int Sk, int D, tsr_dtype dt,
                         int host_copies)
{
  int i;
  memset(x, 0, sizeof *x);
  x->B = B, x->Hq = Hq, x->Hkv = Hkv, x->Sq = Sq, x->Sk = Sk, x->D = D, x->dt = dt;
  fill_array(&x->q, B, Hq, Sq, D, dt, &x->dq, host_copies);
  fill_array(&x->k, B, Hkv, Sk, D, dt, &x->dk, host_copies);
  fill_array(&x->v, B, Hkv, Sk, D, dt, &x->dv, host_copies);
  if (!host_copies) {
    tsr_npy_free(&x->q);
    tsr_npy_free(&x->k);
    tsr_npy_free(&x->v);
  }
  CK(cu->cuMemAlloc(&x->dout, (size_t)B * Hq * Sq * D * 2));
  CK(cu->cuMemAlloc(&x->dlse, (size_t)B * Hq * Sq * 4));
  x->t.q = x->dq;
  x->t.k = x->dk;
  x->t.v = x->dv;
  x->t.o = x->dout;
  x->t.lse = x->dlse;
  for (i = 0; i < 2; i++) {
    int64_t H = i ? Hkv : Hq, S = i ? Sk : Sq;
    int64_t st[4] = {H * S * D, S * D, D, 1};
    if (i) {
      memcpy(x->t.k_stride, st, sizeof st);
      memcpy(x->t.v_stride, st, sizeof st);
    } else {
      memcpy(x->t.q_stride, st, sizeof st);
      memcpy(x->t.o_stride, st, sizeof st);
    }
  }
}

static void free_tensors(tensors *x)
{
  cu->cuMemFree(x->dq);
  cu->cuMemFree(x->dk);
  cu->cuMemFree(x->dv);
  cu->cuMemFree(x->dout);
  cu->cuMemFree(x->dlse);
  tsr_npy_free(&x->q);
  tsr_npy_free(&x->k);
  tsr_npy_free(&x->v);
}

/* NaN everywhere in o and lse, so that unwritten outputs show. */
static void poison(const tensors *x, CUstream s)
{
  CK(cu->cuMemsetD32Async(x->dout, 0x7fc07fc0u, (size_t)x->B * x->Hq * x->Sq * x->D / 2, s));
  CK(cu->cuMemsetD32Async(x->dlse, 0x7fc00000u, (size_t)x->B * x->Hq * x->Sq, s));
}

/* Downloads o (as float32 [B,Hq,Sq,D]) and lse. */
static void fetch(const tensors *x, tsr_array *o, tsr_array *lse)
{
  int64_t n = (int64_t)x->B * x->Hq * x->Sq * x->D, i;
  uint16_t *h = malloc((size_t)n * 2);
  float *f;
  CK(cu->cuCtxSynchronize());
  CK(cu->cuMemcpyDtoH(h, x->dout, (size_t)n * 2));
  memset(o, 0, sizeof *o);
  o->dtype = TSR_DT_F32;
  o->ndim = 4;
  o->shape[0] = x->B, o->shape[1] = x->Hq, o->shape[2] = x->Sq, o->shape[3] = x->D;
  o->data = f = malloc((size_t)n * 4);
  for (i = 0; i < n; i++) f[i] = from16(x->dt, h[i]);
  free(h);
  memset(lse, 0, sizeof *lse);
  lse->dtype = TSR_DT_F32;
  lse->ndim = 3;
  lse->shape[0] = x->B, lse->shape[1] = x->Hq, lse->shape[2] = x->Sq;
  lse->data = malloc((size_t)x->B * x->Hq * x->Sq * 4);
  CK(cu->cuMemcpyDtoH(lse->data, x->dlse, (size_t)x->B * x->Hq * x->Sq * 4));
}

static int has_nan(const tsr_array *a)
{
  int64_t n = tsr_array_numel(a), i;
  const float *f = a->data;
  for (i = 0; i < n; i++)
    if (f[i] != f[i]) return 1;
  return 0;
}

/* Largest |got - want| over finite lse entries (infinities must agree). */
static double lse_err(const tsr_array *got, const tsr_array *want)
{
  int64_t n = tsr_array_numel(got), i;
  const float *g = got->data, *w = want->data;
  double e = 0;
  for (i = 0; i < n; i++) {
    if (isinf(w[i]) || isinf(g[i])) {
      if (g[i] != w[i]) return INFINITY;
      continue;
    }
    if (fabs((double)g[i] - w[i]) > e) e = fabs((double)g[i] - w[i]);
  }
  return e;
}

/* Selected token pairs / all, over the problem (broadcast honoured). */
static double mask_density(const tsr_mask *m, const tsr_geom *g, int B, int Hq)
{
  int64_t nq = tsr_geom_nq(g), nk = tsr_geom_nk(g), i, j;
  double sel = 0;
  int b, h;
  for (b = 0; b < B; b++)
    for (h = 0; h < Hq; h++) {
      const uint8_t *pl = tsr_mask_plane(m, b, h);
      for (i = 0; i < nq; i++)
        for (j = 0; j < nk; j++)
          if (pl[i * nk + j])
            sel += (double)(tsr_geom_q_start(g, i + 1) - tsr_geom_q_start(g, i)) *
                   (double)(tsr_geom_k_start(g, j + 1) - tsr_geom_k_start(g, j));
    }
  return sel / ((double)B * Hq * tsr_geom_seq_q(g) * tsr_geom_seq_k(g));
}

/* Every array of the two plans byte for byte. */
static void same_bytes(const char *label, const char *what, const tsr_plan *a, const tsr_plan *b)
{
#define SAME(f, n) (a->n == b->n && (a->n == 0 || !memcmp(a->f, b->f, (size_t)a->n * sizeof *a->f)))
  if (!SAME(tasks, n_tasks) || !SAME(tiles, n_tiles) || !SAME(members, n_members) ||
      !SAME(membership, n_membership) || !SAME(merges, n_merges) || !SAME(qblk, n_qblk) ||
      a->n_slots != b->n_slots)
    fail(label,
         "%s: plans differ (tasks %lld/%lld %d, tiles %lld/%lld %d, members %d, "
         "words %lld/%lld %d, merges %d, qblk %d)",
         what, (long long)a->n_tasks, (long long)b->n_tasks, SAME(tasks, n_tasks), (long long)a->n_tiles,
         (long long)b->n_tiles, SAME(tiles, n_tiles), SAME(members, n_members), (long long)a->n_membership,
         (long long)b->n_membership, SAME(membership, n_membership), SAME(merges, n_merges), SAME(qblk, n_qblk));
#undef SAME
}

/* The device plan's tasks in the host planner's order (groups, longest
 * first, ties in creation order, snaked by num_sms): task i of both plans
 * serves the same row and chunk (member, tile count, partial slot), and the
 * merge records are the same.  Absolute tile offsets may differ (the host
 * shares the tiles of broadcast mask planes, and puts an empty row's empty
 * range elsewhere); each row's tiles are compared by plan_rows_diff. */
static void same_order(const char *label, const tsr_plan *dev, const tsr_plan *host)
{
  int64_t i;
  if (dev->n_tasks != host->n_tasks || dev->n_members != host->n_members) {
    fail(label, "device vs host order: %lld/%lld tasks, %lld/%lld members", (long long)dev->n_tasks,
         (long long)host->n_tasks, (long long)dev->n_members, (long long)host->n_members);
    return;
  }
  for (i = 0; i < dev->n_tasks; i++) {
    const tsr_task_rec *a = &dev->tasks[i], *b = &host->tasks[i];
    const tsr_member_rec *ma = &dev->members[a->member_begin], *mb = &host->members[b->member_begin];
    if (a->batch != b->batch || a->head != b->head || a->q_tile != b->q_tile ||
        a->tile_end - a->tile_begin != b->tile_end - b->tile_begin || a->partial != b->partial ||
        a->n_members != 1 || b->n_members != 1 || memcmp(ma, mb, sizeof *ma)) {
      fail(label,
           "task %lld of %lld out of the host planner's order (num_sms %d): device (b %d h %d t %d, %d tiles, "
           "slot %d, %d members), host (b %d h %d t %d, %d tiles, slot %d, %d members)",
           (long long)i, (long long)host->n_tasks, host->num_sms, a->batch, a->head, a->q_tile,
           a->tile_end - a->tile_begin, a->partial, a->n_members, b->batch, b->head, b->q_tile,
           b->tile_end - b->tile_begin, b->partial, b->n_members);
      return;
    }
  }
  if (dev->n_merges != host->n_merges || dev->n_slots != host->n_slots ||
      (dev->n_merges && memcmp(dev->merges, host->merges, (size_t)dev->n_merges * sizeof *dev->merges)))
    fail(label, "device vs host merges: %lld/%lld records, %lld/%lld slots, same %d", (long long)dev->n_merges,
         (long long)host->n_merges, (long long)dev->n_slots, (long long)host->n_slots,
         dev->n_merges == host->n_merges &&
             !memcmp(dev->merges, host->merges, (size_t)dev->n_merges * sizeof *dev->merges));
}

/* A gather plan against the mask itself, independently of the host
 * planner: row (b, h, t) walks the selected key blocks of mask row t
 * (bq == tile_m) paired in ascending order, (j0, j1), (j2, j3), ..., an odd
 * last one with mem -1, across its chunks in order; no membership words. */
static void gather_rows_check(const char *label, const tsr_plan *pl, const tsr_mask *m)
{
  plan_rows_index ix;
  char why[256];
  int64_t nk = tsr_mask_nk(m), r, c, i, j;
  int32_t *sel = malloc((size_t)nk * sizeof *sel);
  int64_t bq = 0, bk = 0;

  memset(&ix, 0, sizeof ix);
  if (!tsr_geom_is_uniform(pl->problem.geom, &bq, &bk) || pl->n_membership != 0 || pl->tile_n != 2 * bk ||
      pl->tile_m != bq)
    fail(label, "gather plan: tile %dx%d, %lld membership words", pl->tile_m, pl->tile_n,
         (long long)pl->n_membership);
  if (plan_rows_build(pl, &ix, why, sizeof why)) {
    fail(label, "gather plan rows: %s", why);
    goto done;
  }
  for (r = 0; r < ix.rows; r++) {
    int64_t t = r % pl->n_q_tiles, bh = r / pl->n_q_tiles, k = 0, ns = 0;
    const uint8_t *row = tsr_mask_plane(m, bh / pl->problem.heads_q, bh % pl->problem.heads_q) + t * nk;
    for (j = 0; j < nk; j++)
      if (row[j]) sel[ns++] = (int32_t)j;
    for (c = ix.off[r]; c < ix.off[r + 1]; c++)
      for (i = ix.c[c].tb; i < ix.c[c].te; i++, k++) {
        const tsr_tile_rec *x = &pl->tiles[i];
        if (2 * k >= ns || x->k_tile != sel[2 * k] || x->mem != (2 * k + 1 < ns ? sel[2 * k + 1] : -1)) {
          fail(label, "gather row %lld (b %lld h %lld t %lld, %lld blocks selected): tile %lld is (%d, %d), want (%d, %d)",
               (long long)r, (long long)(bh / pl->problem.heads_q), (long long)(bh % pl->problem.heads_q),
               (long long)t, (long long)ns, (long long)k, x->k_tile, x->mem, 2 * k < ns ? sel[2 * k] : -1,
               2 * k + 1 < ns ? sel[2 * k + 1] : -1);
          goto done;
        }
      }
    if (k != (ns + 1) / 2) {
      fail(label, "gather row %lld: %lld tiles for %lld selected blocks", (long long)r, (long long)k, (long long)ns);
      goto done;
    }
  }
done:
  plan_rows_free(&ix);
  free(sel);
}

/* ---- one case ----------------------------------------------------------- */

typedef struct {
  const char *label;
  tsr_problem p;
  const tsr_geom *g;
  const tsr_mask *m;      /* host copy of the mask */
  CUdeviceptr dmask;
  tsr_mask_format fmt;
  tsr_plan_opts o;
  tsr_gpuplan_caps caps;
  int run;
  int capped;             /* caps.max_slots may leave rows unsplit */
} job;

/* A job for problem (B, Hq, Hkv, Sq, Sk, D, dt) over geometry g and host
 * mask m, the mask uploaded in `fmt` from its bytes; default options. */
static void job_init(job *jb, const char *label, int B, int Hq, int Hkv, int Sq, int Sk, int D,
                     tsr_dtype dt, const tsr_geom *g, const tsr_mask *m, const uint8_t *bytes,
                     tsr_mask_format fmt)
{
  memset(jb, 0, sizeof *jb);
  jb->label = label;
  jb->p.batch = B;
  jb->p.heads_q = Hq;
  jb->p.heads_kv = Hkv;
  jb->p.seq_q = Sq;
  jb->p.seq_k = Sk;
  jb->p.head_dim = D;
  jb->p.dtype = dt;
  jb->p.layout = TSR_LAYOUT_BHSD;
  jb->p.geom = g;
  TRY(tsr_problem_check(&jb->p, &e_));
  jb->g = g;
  jb->m = m;
  jb->fmt = fmt;
  jb->dmask = upload_mask(bytes, tsr_mask_batch(m) * tsr_mask_heads(m) * tsr_mask_nq(m), (int)tsr_mask_nk(m),
                          fmt, 0);
  tsr_plan_opts_init(&jb->o);
  /* Small grids: the snake's rounds turn within the tests' task counts. */
  jb->o.num_sms = 1 + (int)(rnd() % 12);
  tsr_gpuplan_caps_init(&jb->caps);
  jb->caps.mask_batch = tsr_mask_batch(m);
  jb->caps.mask_heads = tsr_mask_heads(m);
}

/* Device plan vs mask (verify), vs host plan (counts, outputs), vs CPU. */
static void check_job(const job *jb, tensors *x, CUstream s)
{
  tsr_gpuplan *gp = NULL;
  tsr_plan *dev = NULL, *host = NULL;
  tsr_plan_summary ds, hs;
  tsr_gpuplan_stats st;
  tsr_error err;
  double want_d;

  tsr_error_clear(&err);
  if (tsr_gpuplan_create(ctx, &jb->p, &jb->o, &jb->caps, &gp, &err)) {
    fail(jb->label, "create: %s", err.text);
    return;
  }
  if (tsr_gpuplan_plan(gp, jb->dmask, jb->fmt, s, &err) || tsr_gpuplan_download(gp, &dev, &err)) {
    fail(jb->label, "plan/download: %s", err.text);
    tsr_gpuplan_destroy(gp);
    return;
  }
  if (tsr_plan_verify(dev, jb->m, &err)) fail(jb->label, "device plan does not verify: %s", err.text);
  if (dev->mapping == TSR_MAP_GATHER) gather_rows_check(jb->label, dev, jb->m);
  tsr_error_clear(&err);
  {
    /* the host planner with the template's tile and mapping: an open
     * choice of 128x64 blocks is gathered onto 128x128 tiles on a device
     * with kg variants (runtime/gpuplan.c, tsri_context_gather) */
    tsr_plan_opts ho = jb->o;
    const tsr_plan *tp = tsri_gpuplan_device_plan(gp);
    ho.mapping = tp->opts.mapping;
    ho.tile_m = tp->opts.tile_m;
    ho.tile_n = tp->opts.tile_n;
    if (tsr_plan_create(&jb->p, jb->m, &ho, &host, &err)) {
      fail(jb->label, "host plan: %s", err.text);
      goto done;
    }
  }
  tsr_plan_summarize(dev, &ds);
  tsr_plan_summarize(host, &hs);
  if (ds.tile_m != hs.tile_m || ds.tile_n != hs.tile_n || ds.mapping != hs.mapping || ds.tiles != hs.tiles ||
      ds.partial_tiles != hs.partial_tiles || ds.empty_rows != hs.empty_rows ||
      (!jb->capped && (ds.split_rows != hs.split_rows || ds.tasks_count != hs.tasks_count)) ||
      (jb->capped && (ds.slots > jb->caps.max_slots || ds.split_rows > hs.split_rows)))
    fail(jb->label,
         "device vs host plan: tile %dx%d/%dx%d mapping %s/%s tiles %lld/%lld partial %lld/%lld tasks %lld/%lld "
         "empty %lld/%lld split %lld/%lld",
         ds.tile_m, ds.tile_n, hs.tile_m, hs.tile_n, tsr_plan_mapping_name(ds.mapping),
         tsr_plan_mapping_name(hs.mapping), (long long)ds.tiles, (long long)hs.tiles,
         (long long)ds.partial_tiles, (long long)hs.partial_tiles, (long long)ds.tasks_count,
         (long long)hs.tasks_count, (long long)ds.empty_rows, (long long)hs.empty_rows,
         (long long)ds.split_rows, (long long)hs.split_rows);
  {
    char why[256];
    if (plan_rows_diff(dev, host, !jb->capped, why, sizeof why))
      fail(jb->label, "device vs host plan rows: %s", why);
  }
  /* Row and split tasks with every row split as the host splits it: the
   * same plan, task order included (a capped one splits fewer rows). */
  if (!jb->capped && (jb->o.tasks == TSR_TASKS_ROW || jb->o.tasks == TSR_TASKS_SPLIT))
    same_order(jb->label, dev, host);
  if (tsr_gpuplan_stats_read(gp, &st) != 1 || st.overflow || st.tiles != ds.tiles)
    fail(jb->label, "features: step %lld overflow %d tiles %lld", (long long)st.step, st.overflow,
         (long long)st.tiles);
  want_d = mask_density(jb->m, jb->g, (int)jb->p.batch, (int)jb->p.heads_q);
  if (fabs(st.density - want_d) > 1e-9 * (1 + want_d))
    fail(jb->label, "density %.12g, mask has %.12g", st.density, want_d);

  if (jb->run) {
    tsr_array od, ld, oh, lh, oref, lref;
    double e1, e2, e3, l1, l2;
    poison(x, s);
    if (tsr_gpuplan_run(gp, &x->t, s, &err)) {
      fail(jb->label, "run: %s", err.text);
      goto done;
    }
    fetch(x, &od, &ld);
    poison(x, s);
    if (tsr_gpu_upload(ctx, host, &err) || tsr_gpu_launch(ctx, host, &x->t, s, &err)) {
      fail(jb->label, "host-planned run: %s", err.text);
      tsr_npy_free(&od);
      tsr_npy_free(&ld);
      goto done;
    }
    fetch(x, &oh, &lh);
    TRY(tsr_ref_attention(jb->g, jb->m, &x->q, &x->k, &x->v, jb->p.scale, &oref, &lref, &e_));
    e1 = tsr_ref_max_rel_error(&od, &oref);
    e2 = tsr_ref_max_rel_error(&oh, &oref);
    e3 = tsr_ref_max_rel_error(&od, &oh);
    l1 = lse_err(&ld, &lref);
    l2 = lse_err(&lh, &lref);
    if (has_nan(&od) || has_nan(&ld) || !(e1 < 1e-2) || !(e3 < 1e-2) || !(l1 < 1e-2))
      fail(jb->label, "device-planned output: nan %d, err vs ref %.3g, vs host plan %.3g, lse %.3g",
           has_nan(&od) || has_nan(&ld), e1, e3, l1);
    printf("  %-44s tiles %7lld tasks %6lld split %5lld  err %.2e (host plan %.2e) lse %.1e  %s\n",
           jb->label, (long long)ds.tiles, (long long)ds.tasks_count, (long long)ds.split_rows, e1, e2,
           l1 > l2 ? l1 : l2, ds.variant);
    tsr_npy_free(&od);
    tsr_npy_free(&ld);
    tsr_npy_free(&oh);
    tsr_npy_free(&lh);
    tsr_npy_free(&oref);
    tsr_npy_free(&lref);
  } else {
    printf("  %-44s tiles %7lld tasks %6lld split %5lld  verified (plan only)\n", jb->label,
           (long long)ds.tiles, (long long)ds.tasks_count, (long long)ds.split_rows);
  }
done:
  tsr_plan_destroy(dev);
  tsr_plan_destroy(host);
  tsr_gpuplan_destroy(gp);
}

/* The job's options, every row splittable, tensors, then check_job. */
static void job_check_first(job *jb, int tm, int tn, tsr_mapping mapping, tsr_tasks tasks, int split, int run,
                            tensors *x, CUstream s)
{
  const tsr_problem *p = &jb->p;
  jb->o.tile_m = tm;
  jb->o.tile_n = tn;
  jb->o.mapping = mapping;
  jb->o.tasks = tasks;
  jb->o.split_tiles = split;
  /* Every row may split: the device must then split exactly as the host. */
  if (split)
    jb->caps.max_slots = p->batch * p->heads_q * ((p->seq_q + tm - 1) / tm) *
                         (((p->seq_k + tn - 1) / tn + split - 1) / split);
  jb->run = run;
  make_tensors(x, (int)p->batch, (int)p->heads_q, (int)p->heads_kv, (int)p->seq_q, (int)p->seq_k, (int)p->head_dim,
               p->dtype, run);
  check_job(jb, x, s);
}

/* Split jobs again with a small slot capacity; frees the tensors and mask. */
static void job_check_last(job *jb, int split, tensors *x, CUstream s)
{
  if (split) {
    /* A small slot capacity: later rows stay whole, the plan stays exact. */
    char label[128];
    snprintf(label, sizeof label, "%s/slots=5", jb->label);
    jb->label = label;
    jb->caps.max_slots = 5;
    jb->capped = 1;
    check_job(jb, x, s);
  }
  free_tensors(x);
  cu->cuMemFree(jb->dmask);
}

static void run_case(const tcase *c, CUstream s)
{
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tensors x;
  job jb;
  int nq, nk, mb = c->mask_b ? 1 : c->B, mh = c->mask_h ? 1 : c->Hq;
  uint8_t *bytes;

  TRY(tsr_geom_uniform(c->Sq, c->Sk, c->bq, c->bk, &g, &e_));
  nq = (int)tsr_geom_nq(g);
  nk = (int)tsr_geom_nk(g);
  bytes = make_mask(mb, mh, nq, nk, c->mask, c->density);
  TRY(tsr_mask_from_bytes(mb, mh, nq, nk, bytes, &m, &e_));
  job_init(&jb, c->label, c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D, c->dt, g, m, bytes, c->fmt);
  job_check_first(&jb, c->tm, c->tn, c->mapping, c->tasks, c->split, c->run, &x, s);
  job_check_last(&jb, c->split, &x, s);
  free(bytes);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}

/* ---- gather plans ------------------------------------------------------- */

/* Gather masks (bq x 64 blocks on bq x 128 tiles): rows of every shape a
 * pairing meets, each row one of: empty, one block, only the last (ragged)
 * block, every block, the first and the last, random at `dens` (odd and
 * even counts alike); and (heads > 1) one empty head.  Selected bytes are
 * random nonzero values. */
static uint8_t *gather_mask(int mb, int mh, int nq, int nk, double dens)
{
  uint8_t *m = malloc((size_t)mb * mh * nq * nk);
  int b, h, i, j;
  for (b = 0; b < mb; b++)
    for (h = 0; h < mh; h++)
      for (i = 0; i < nq; i++) {
        const int kind = mh > 1 && h == mh - 1 && b == 0 ? 0 : (int)(rnd() % 9), one = (int)(rnd() % nk);
        uint8_t *row = m + (((size_t)b * mh + h) * nq + i) * nk;
        for (j = 0; j < nk; j++) {
          int x;
          switch (kind) {
          case 0: x = 0; break;
          case 1: x = j == one; break;
          case 2: x = j == nk - 1; break;
          case 3: x = 1; break;
          case 4: x = j == 0 || j == nk - 1; break;
          default: x = urand() < dens; break;
          }
          row[j] = x ? (uint8_t)(1 + rnd() % 200) : 0;
        }
      }
  return m;
}

typedef struct {
  const char *label;
  int B, Hq, Hkv, Sq, Sk, D;
  tsr_dtype dt;
  tsr_tasks tasks;
  int split;
  double density;
  int mask_b, mask_h; /* 1 = broadcast, 0 = full */
  tsr_mask_format fmt;
  int run;
  int bq; /* query blocks and tiles: 128 (SpargeAttn's 128x64), 64 (64x64 cubes; d64 kernels) */
} gcase;

/* Sequences: 1000 (16 blocks, the last of 40 keys), 1900 (30, 44), 960
 * (15, odd), 4100 (65: bit rows of three words, a last block of 4 keys),
 * 9000 (141 blocks: byte rows of odd pitch, past 128 units a warp step),
 * 38390 (600: word-aligned byte rows past 128 words a warp step). */
static const gcase gcases[] = {
  {"gather-row-bytes-gqa", 1, 4, 2, 1000, 1000, 128, TSR_DT_BF16, TSR_TASKS_ROW, 0, 0.4, 0, 0, TSR_MASK_BYTES, 1, 128},
  {"gather-split-bits-rect", 2, 3, 3, 777, 1900, 128, TSR_DT_F16, TSR_TASKS_SPLIT, 3, 0.5, 0, 0, TSR_MASK_BITS, 1, 128},
  {"gather-split-bytes-headbcast-gqa", 1, 4, 1, 1024, 960, 128, TSR_DT_BF16, TSR_TASKS_SPLIT, 2, 0.6, 0, 1,
   TSR_MASK_BYTES, 1, 128},
  {"gather-row-bits-batchbcast-d64", 2, 2, 2, 640, 4100, 64, TSR_DT_BF16, TSR_TASKS_ROW, 0, 0.3, 1, 0,
   TSR_MASK_BITS, 1, 128},
  {"gather-big-plan-only-split", 2, 8, 8, 6000, 9000, 128, TSR_DT_BF16, TSR_TASKS_SPLIT, 7, 0.2, 0, 0,
   TSR_MASK_BYTES, 0, 128},
  {"gather-long-rows-plan-only-bits", 1, 4, 2, 700, 38390, 128, TSR_DT_BF16, TSR_TASKS_ROW, 0, 0.1, 0, 0,
   TSR_MASK_BITS, 0, 128},
  {"gather-long-rows-plan-only-bytes", 1, 2, 2, 700, 38390, 128, TSR_DT_F16, TSR_TASKS_SPLIT, 5, 0.1, 0, 0,
   TSR_MASK_BYTES, 0, 128},
  /* 64x64 blocks on 64x128 tiles (two tasks a CTA; the kg variants are d64) */
  {"gather64-row-bytes-gqa-d64", 1, 4, 2, 1000, 1000, 64, TSR_DT_BF16, TSR_TASKS_ROW, 0, 0.4, 0, 0,
   TSR_MASK_BYTES, 1, 64},
  {"gather64-split-bits-rect-d64", 2, 3, 3, 777, 1900, 64, TSR_DT_F16, TSR_TASKS_SPLIT, 3, 0.5, 0, 1,
   TSR_MASK_BITS, 1, 64},
  {"gather64-long-rows-plan-only-bytes-d64", 1, 4, 2, 700, 38390, 64, TSR_DT_BF16, TSR_TASKS_SPLIT, 5, 0.1, 0, 0,
   TSR_MASK_BYTES, 0, 64},
};

/* Whether this device's bundle serves gather plans (kg kernels, the sm90
 * family): on sm_90 their absence fails; elsewhere the gather cases skip. */
static int gather_served(void)
{
  tsr_geom *g;
  tsr_problem p;
  tsr_plan_opts o;
  tsr_gpuplan *gp = NULL;
  tsr_error err;
  tsr_status st;
  const char *arch = tsri_context_arch(ctx);
  TRY(tsr_geom_uniform(256, 256, 128, 64, &g, &e_));
  memset(&p, 0, sizeof p);
  p.batch = 1, p.heads_q = 1, p.heads_kv = 1, p.seq_q = 256, p.seq_k = 256, p.head_dim = 128;
  p.dtype = TSR_DT_BF16;
  p.geom = g;
  TRY(tsr_problem_check(&p, &e_));
  tsr_plan_opts_init(&o);
  o.mapping = TSR_MAP_GATHER;
  tsr_error_clear(&err);
  st = tsr_gpuplan_create(ctx, &p, &o, NULL, &gp, &err);
  tsr_gpuplan_destroy(gp);
  tsr_geom_destroy(g);
  if (st == TSR_OK) return 1;
  if (st == TSR_ERR_NO_VARIANT && strncmp(arch, "sm_90", 5) != 0) {
    printf("  gather cases skipped: %s has no gather kernels (%s)\n", arch, err.text);
    return 0;
  }
  fail("gather", "cannot create a gather template on %s: %s", arch, err.text);
  return 0;
}

static void gather_case(const gcase *c, CUstream s)
{
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tensors x;
  job jb;
  int nq, nk, mb = c->mask_b ? 1 : c->B, mh = c->mask_h ? 1 : c->Hq, bq = c->bq;
  uint8_t *bytes;

  TRY(tsr_geom_uniform(c->Sq, c->Sk, bq, 64, &g, &e_));
  nq = (int)tsr_geom_nq(g);
  nk = (int)tsr_geom_nk(g);
  bytes = gather_mask(mb, mh, nq, nk, c->density);
  TRY(tsr_mask_from_bytes(mb, mh, nq, nk, bytes, &m, &e_));
  job_init(&jb, c->label, c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D, c->dt, g, m, bytes, c->fmt);
  job_check_first(&jb, bq, 128, TSR_MAP_GATHER, c->tasks, c->split, c->run, &x, s);
  job_check_last(&jb, c->split, &x, s);
  free(bytes);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}

/* ---- corpus masks ------------------------------------------------------- */

static void corpus_cases(CUstream s, uint64_t seed)
{
  char dir[] = "/tmp/gpu_plan_corpusXXXXXX";
  tsr_corpus_gen_opts go;
  tsr_corpus *c = NULL;
  int64_t i, n, runs = 0, done = 0;
  tsr_error err;

  if (!mkdtemp(dir)) {
    fail("corpus", "cannot make a temporary folder");
    return;
  }
  tsr_corpus_gen_opts_init(&go);
  go.preset = "demo";
  go.out_dir = dir;
  go.seed = seed;
  go.jobs = 4;
  tsr_error_clear(&err);
  if (tsr_corpus_generate(&go, NULL, &err) || tsr_corpus_open(dir, &c, &err)) {
    fail("corpus", "%s", err.text);
    return;
  }
  n = tsr_corpus_count(c);
  for (i = 0; i < n; i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(c, i);
    tsr_mask *m = NULL;
    tsr_geom *g = NULL;
    tensors x;
    job jb;
    char label[160];

    TRY(tsr_corpus_load_mask(c, i, &m, &e_));
    TRY(tsr_corpus_load_geom(c, i, &g, &e_));
    snprintf(label, sizeof label, "corpus %s %s #%lld", e->family, e->model, (long long)i);
    job_init(&jb, label, 1, (int)e->heads_q, (int)e->heads_kv, (int)e->seq_q, (int)e->seq_k, (int)e->head_dim,
             TSR_DT_BF16, g, m, tsr_mask_bits(m), i % 2 ? TSR_MASK_BITS : TSR_MASK_BYTES);
    jb.o.tasks = TSR_TASKS_ROW;
    if (i % 3 == 1) {
      jb.o.tasks = TSR_TASKS_SPLIT;
      jb.o.split_tiles = 4;
    }
    jb.run = runs < 3;
    make_tensors(&x, 1, (int)e->heads_q, (int)e->heads_kv, (int)e->seq_q, (int)e->seq_k, (int)e->head_dim,
                 TSR_DT_BF16, jb.run);
    check_job(&jb, &x, s);
    runs += jb.run;
    done++;
    free_tensors(&x);
    cu->cuMemFree(jb.dmask);
    tsr_mask_destroy(m);
    tsr_geom_destroy(g);
  }
  printf("  corpus: %lld of %lld masks planned on the GPU and verified (%lld run)\n", (long long)done,
         (long long)n, (long long)runs);
  if (done == 0) fail("corpus", "no mask in the demo corpus");
  tsr_corpus_close(c);
  {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "gpu_plan: cannot remove %s\n", dir);
  }
}

/* ---- variable geometries ------------------------------------------------ */

/* Block sizes of a T x Hh x W latent canvas cut into t x h x w tiles, in
 * tile order (STA and VSA reorder tokens so that each tile is contiguous):
 * boundary tiles are smaller.  Returns the count. */
static int64_t canvas_sizes(int T, int Hh, int W, int t, int h, int w, int64_t *out)
{
  int64_t n = 0;
  int a, b, c;
  for (a = 0; a < T; a += t)
    for (b = 0; b < Hh; b += h)
      for (c = 0; c < W; c += w)
        out[n++] = (int64_t)(t < T - a ? t : T - a) * (h < Hh - b ? h : Hh - b) * (w < W - c ? w : W - c);
  return n;
}

/* Random sizes lo..hi summing to exactly seq. */
static int64_t ragged_sizes(int64_t seq, int lo, int hi, int64_t *out)
{
  int64_t n = 0, left = seq;
  while (left > 0) {
    int64_t x = lo + (int64_t)(rnd() % (uint32_t)(hi - lo + 1));
    out[n++] = x < left ? x : left;
    left -= out[n - 1];
  }
  return n;
}

enum { VG_STA, VG_VSA, VG_RAGGED, VG_UNIFORM, VG_BIG };

typedef struct {
  const char *label;
  int B, Hq, Hkv, D;
  tsr_dtype dt;
  int geo;           /* VG_*; VG_UNIFORM: sizes `ub` given as a variable geometry */
  int ub;
  int tm, tn;
  tsr_mapping mapping;
  tsr_tasks tasks;
  int split;
  int mask;
  double density;
  int mask_b, mask_h;
  tsr_mask_format fmt;
  int run;
} vcase;

static const vcase vcases[] = {
  {"var-sta-like-128x128-combine-row", 1, 2, 2, 128, TSR_DT_BF16, VG_STA, 0, 128, 128, TSR_MAP_COMBINE,
   TSR_TASKS_ROW, 0, MK_BAND, 0, 0, 0, TSR_MASK_BYTES, 1},
  {"var-sta-like-64x64-split-bits", 1, 2, 2, 64, TSR_DT_F16, VG_STA, 0, 64, 64, TSR_MAP_AUTO, TSR_TASKS_SPLIT,
   3, MK_RANDOM, 0.4, 0, 0, TSR_MASK_BITS, 1},
  {"var-vsa-like-128x128-row", 1, 3, 3, 128, TSR_DT_BF16, VG_VSA, 0, 128, 128, TSR_MAP_AUTO, TSR_TASKS_ROW, 0,
   MK_RANDOM, 0.25, 0, 0, TSR_MASK_BYTES, 1},
  {"var-vsa-like-64x128-split-gqa-bits", 1, 4, 2, 128, TSR_DT_BF16, VG_VSA, 0, 64, 128, TSR_MAP_COMBINE,
   TSR_TASKS_SPLIT, 2, MK_RANDOM, 0.3, 0, 0, TSR_MASK_BITS, 1},
  {"var-ragged-rect-128x64-row-headbcast", 1, 3, 3, 64, TSR_DT_BF16, VG_RAGGED, 0, 128, 64, TSR_MAP_COMBINE,
   TSR_TASKS_ROW, 0, MK_RANDOM, 0.35, 0, 1, TSR_MASK_BYTES, 1},
  {"var-ragged-rect-64x64-split-batchbcast", 2, 2, 1, 128, TSR_DT_F16, VG_RAGGED, 0, 64, 64, TSR_MAP_COMBINE,
   TSR_TASKS_SPLIT, 4, MK_RANDOM, 0.3, 1, 0, TSR_MASK_BITS, 1},
  {"var-big-blocks-subdivide-64x64-row", 1, 2, 2, 128, TSR_DT_BF16, VG_BIG, 0, 64, 64, TSR_MAP_SUBDIVIDE,
   TSR_TASKS_ROW, 0, MK_BAND, 0, 0, 0, TSR_MASK_BYTES, 1},
  {"var-big-blocks-128x128-split", 1, 2, 2, 128, TSR_DT_BF16, VG_BIG, 0, 128, 128, TSR_MAP_AUTO,
   TSR_TASKS_SPLIT, 2, MK_RANDOM, 0.5, 0, 0, TSR_MASK_BITS, 0},
  {"var-uniform-64-retain-row", 1, 2, 2, 128, TSR_DT_BF16, VG_UNIFORM, 64, 64, 64, TSR_MAP_AUTO,
   TSR_TASKS_ROW, 0, MK_RANDOM, 0.3, 0, 0, TSR_MASK_BYTES, 1},
  {"var-uniform-96-combine-split-bits", 1, 2, 2, 128, TSR_DT_BF16, VG_UNIFORM, 96, 128, 128,
   TSR_MAP_COMBINE, TSR_TASKS_SPLIT, 2, MK_RANDOM, 0.4, 0, 0, TSR_MASK_BITS, 1},
  {"var-uniform-128-on-64x64-subdivide", 1, 2, 2, 128, TSR_DT_BF16, VG_UNIFORM, 128, 64, 64,
   TSR_MAP_SUBDIVIDE, TSR_TASKS_ROW, 0, MK_RANDOM, 0.3, 0, 0, TSR_MASK_BYTES, 0},
};

/* Plans the device mask with a fresh template and downloads the plan. */
static tsr_plan *gpu_download(const char *label, const tsr_problem *p, const tsr_plan_opts *o,
                              const tsr_gpuplan_caps *caps, CUdeviceptr dmask, tsr_mask_format fmt, CUstream s)
{
  tsr_gpuplan *gp = NULL;
  tsr_plan *pl = NULL;
  tsr_error err;
  tsr_error_clear(&err);
  if (tsr_gpuplan_create(ctx, p, o, caps, &gp, &err) || tsr_gpuplan_plan(gp, dmask, fmt, s, &err) ||
      tsr_gpuplan_download(gp, &pl, &err))
    fail(label, "uniform template: %s", err.text);
  tsr_gpuplan_destroy(gp);
  return pl;
}

static void var_case(const vcase *c, CUstream s)
{
  int64_t qs[4096], ks[4096], nq, nk, Sq = 0, Sk = 0, i;
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tensors x;
  job jb;
  int mb = c->mask_b ? 1 : c->B, mh = c->mask_h ? 1 : c->Hq;
  uint8_t *bytes;

  switch (c->geo) {
  case VG_STA: /* 5x12x20 canvas, 2x4x8 tiles: 27 tiles of 64 tokens and ragged ones */
    nq = nk = canvas_sizes(5, 12, 20, 2, 4, 8, qs);
    memcpy(ks, qs, sizeof(int64_t) * (size_t)nk);
    break;
  case VG_VSA: /* 6x10x13 canvas, 4x4x4 cubes: 24 cubes, boundary ones smaller */
    nq = nk = canvas_sizes(6, 10, 13, 4, 4, 4, qs);
    memcpy(ks, qs, sizeof(int64_t) * (size_t)nk);
    break;
  case VG_RAGGED:
    nq = ragged_sizes(1100, 1, 100, qs);
    nk = ragged_sizes(950, 1, 300, ks);
    break;
  case VG_BIG:
    nq = ragged_sizes(1500, 100, 500, qs);
    nk = ragged_sizes(1400, 100, 500, ks);
    break;
  default: /* VG_UNIFORM: 1000 tokens in blocks of ub, the last ragged */
    for (nq = 0; Sq + c->ub < 1000; Sq += c->ub) qs[nq++] = c->ub;
    qs[nq++] = 1000 - Sq;
    nk = nq;
    memcpy(ks, qs, sizeof(int64_t) * (size_t)nk);
    Sq = 0;
    break;
  }
  for (i = 0; i < nq; i++) Sq += qs[i];
  for (i = 0; i < nk; i++) Sk += ks[i];
  TRY(tsr_geom_variable(qs, nq, ks, nk, &g, &e_));
  bytes = make_mask(mb, mh, (int)nq, (int)nk, c->mask, c->density);
  TRY(tsr_mask_from_bytes(mb, mh, nq, nk, bytes, &m, &e_));
  job_init(&jb, c->label, c->B, c->Hq, c->Hkv, (int)Sq, (int)Sk, c->D, c->dt, g, m, bytes, c->fmt);
  job_check_first(&jb, c->tm, c->tn, c->mapping, c->tasks, c->split, c->run, &x, s);
  if (c->geo == VG_UNIFORM) {
    /* The same sizes as a uniform geometry: the very same plan. */
    tsr_geom *gu = NULL;
    tsr_problem pu = jb.p;
    tsr_plan *a, *b;
    TRY(tsr_geom_uniform(Sq, Sk, c->ub, c->ub, &gu, &e_));
    pu.geom = gu;
    a = gpu_download(c->label, &jb.p, &jb.o, &jb.caps, jb.dmask, jb.fmt, s);
    b = gpu_download(c->label, &pu, &jb.o, &jb.caps, jb.dmask, jb.fmt, s);
    if (a && b) {
      same_bytes(c->label, "variable vs uniform geometry", a, b);
      printf("  %-44s byte-identical to the uniform geometry's plan (%lld tasks, %lld tiles)\n", c->label,
             (long long)a->n_tasks, (long long)a->n_tiles);
    }
    tsr_plan_destroy(a);
    tsr_plan_destroy(b);
    tsr_geom_destroy(gu);
  }
  job_check_last(&jb, c->split, &x, s);
  free(bytes);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}

/* ---- graph capture and replay ------------------------------------------- */

/* tsr_gpuplan_reselect after a completed step (what the Python binding's
 * attention() runs between steps): a regime to switch to, one that
 * tsr_gpuplan_create takes and whose plan of the same mask verifies; and
 * the features it selected from are the template's. */
static void check_reselect(const char *label, tsr_gpuplan *gp, const tsr_problem *p, const tsr_mask *m,
                           CUdeviceptr dmask, const tsr_gpuplan_stats *st, CUstream s)
{
  tsr_gpuplan_regime rg;
  tsr_gpuplan *next = NULL;
  tsr_gpuplan_caps caps;
  tsr_plan *dev = NULL;
  tsr_features f;
  tsr_selection sel;
  tsr_plan_opts base;
  tsr_error err = {0};
  if (tsr_gpuplan_reselect(ctx, gp, st, &rg, &err) != TSR_OK || !rg.changed) {
    fail(label, "reselect after step %lld: changed %d: %s", (long long)st->step, rg.changed, err.text);
    return;
  }
  tsr_gpuplan_features(gp, st, &f);
  tsr_plan_opts_init(&base);
  TRY(tsr_context_select_features(ctx, &f, &base, &sel, &e_));
  if (rg.sel.from_table != sel.from_table || rg.sel.row_id != sel.row_id || strcmp(rg.sel.reason, sel.reason) ||
      (rg.opts.tasks != TSR_TASKS_ROW && rg.opts.tasks != TSR_TASKS_SPLIT) ||
      (rg.opts.tasks == TSR_TASKS_SPLIT) != (sel.from_table && sel.opts.tasks == TSR_TASKS_SPLIT) ||
      (rg.opts.tasks == TSR_TASKS_SPLIT && rg.opts.split_tiles < 1))
    fail(label, "regime %dx%d %s split %d does not follow the selection (%s)", rg.opts.tile_m,
         rg.opts.tile_n, tsr_plan_tasks_name(rg.opts.tasks), rg.opts.split_tiles, sel.reason);
  tsr_gpuplan_caps_init(&caps);
  if (tsr_gpuplan_create(ctx, p, &rg.opts, &caps, &next, &err) ||
      tsr_gpuplan_plan(next, dmask, TSR_MASK_BYTES, s, &err) || tsr_gpuplan_download(next, &dev, &err) ||
      tsr_plan_verify(dev, m, &err))
    fail(label, "the re-selected regime %dx%d %s split %d (%s): %s", rg.opts.tile_m, rg.opts.tile_n,
         tsr_plan_tasks_name(rg.opts.tasks), rg.opts.split_tiles, rg.sel.reason, err.text);
  tsr_plan_destroy(dev);
  tsr_gpuplan_destroy(next);
}

static void graph_case(CUstream s)
{
  const int B = 1, H = 3, S = 900, D = 128, bs = 64;
  tsr_geom *g;
  tsr_gpuplan *gp;
  tsr_plan_opts o;
  tsr_gpuplan_caps caps;
  tsr_problem p;
  tensors x;
  CUdeviceptr dmask = 0;
  CUgraph graph;
  CUgraphExec exec;
  int nq, step;
  tsr_error err;

  TRY(tsr_geom_uniform(S, S, bs, bs, &g, &e_));
  nq = (int)tsr_geom_nq(g);
  memset(&p, 0, sizeof p);
  p.batch = B, p.heads_q = H, p.heads_kv = H, p.seq_q = S, p.seq_k = S, p.head_dim = D;
  p.dtype = TSR_DT_BF16;
  p.geom = g;
  TRY(tsr_problem_check(&p, &e_));
  tsr_plan_opts_init(&o);
  o.tile_m = 128; /* combine: partial tiles with membership words */
  o.tile_n = 64;
  o.tasks = TSR_TASKS_SPLIT;
  o.split_tiles = 3;
  tsr_gpuplan_caps_init(&caps);
  TRY(tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &e_));
  make_tensors(&x, B, H, H, S, S, D, TSR_DT_BF16, 1);
  CK(cu->cuMemAlloc(&dmask, (size_t)H * nq * nq));
  {
    /* No completed step yet: nothing to re-select from. */
    tsr_gpuplan_stats st0;
    tsr_gpuplan_regime rg;
    tsr_error_clear(&err);
    tsr_gpuplan_stats_read(gp, &st0);
    if (tsr_gpuplan_reselect(ctx, gp, &st0, &rg, &err) != TSR_OK || rg.changed)
      fail("graph", "reselect before any step: changed %d %s", rg.changed, err.text);
  }

  /* Capture once: plan + attention on the stream, reading whatever the mask
   * buffer holds when the graph runs. */
  tsr_error_clear(&err);
  CK(cu->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  if (tsr_gpuplan_launch(gp, dmask, TSR_MASK_BYTES, &x.t, s, &err)) {
    fail("graph", "launch during capture: %s", err.text);
    cu->cuStreamEndCapture(s, &graph);
    return;
  }
  CK(cu->cuStreamEndCapture(s, &graph));
  CK(cu->cuGraphInstantiate(&exec, graph, 0));

  for (step = 0; step < 4; step++) {
    uint8_t *bytes = make_mask(1, H, nq, nq, MK_RANDOM, 0.15 + 0.2 * step);
    tsr_mask *m;
    tsr_plan *dev = NULL;
    tsr_array od, ld, oref, lref;
    tsr_gpuplan_stats st;
    double e, le, want_d;
    TRY(tsr_mask_from_bytes(1, H, nq, nq, bytes, &m, &e_));
    CK(cu->cuMemcpyHtoD(dmask, bytes, (size_t)H * nq * nq)); /* new contents, same buffer */
    poison(&x, s);
    CK(cu->cuGraphLaunch(exec, s));
    fetch(&x, &od, &ld);
    TRY(tsr_ref_attention(g, m, &x.q, &x.k, &x.v, 0, &oref, &lref, &e_));
    e = tsr_ref_max_rel_error(&od, &oref);
    le = lse_err(&ld, &lref);
    if (tsr_gpuplan_download(gp, &dev, &err) || tsr_plan_verify(dev, m, &err))
      fail("graph", "step %d: replayed plan does not verify: %s", step, err.text);
    want_d = mask_density(m, g, B, H);
    if (tsr_gpuplan_stats_read(gp, &st) != step + 1 || fabs(st.density - want_d) > 1e-9)
      fail("graph", "step %d: features step %lld density %.6f, want step %d density %.6f", step,
           (long long)st.step, st.density, step + 1, want_d);
    if (has_nan(&od) || has_nan(&ld) || !(e < 1e-2) || !(le < 1e-2))
      fail("graph", "step %d: replay output err %.3g lse %.3g nan %d", step, e, le,
           has_nan(&od) || has_nan(&ld));
    {
      /* Regime re-selection between steps from the published features, no
       * synchronisation needed to read them. */
      tsr_features f;
      tsr_selection sel;
      tsr_error_clear(&err);
      tsr_gpuplan_features(gp, &st, &f);
      if (fabs(f.density - want_d) > 1e-9 || f.bq != bs || f.seq_q != S ||
          tsr_select_plan(NULL, &f, &sel, &err) != TSR_OK)
        fail("graph", "step %d: features for selection: density %.6f bq %lld: %s", step, f.density,
             (long long)f.bq, err.text);
      {
        /* Fill is measured at the planner's tile only: the host's touched
         * tiles exactly, over nominal tile areas; the other tiles say "not
         * measured", so the selector estimates them instead of taking this
         * tile's fill for theirs. */
        tsr_features hf;
        int t, tm, tn;
        double want_fill;
        TRY(tsr_features_compute(&p, m, 0, &hf, &e_));
        for (t = 0; t < TSR_FEATURE_TILES; t++) {
          tsr_features_tile(t, &tm, &tn);
          want_fill = fmin(1, want_d * B * H * (double)S * S / ((double)hf.touched[t] * tm * tn));
          if (tm == o.tile_m && tn == o.tile_n
                  ? f.touched[t] != hf.touched[t] || !(fabs(f.fill[t] - want_fill) < 1e-9)
                  : f.fill[t] != -1 || f.touched[t] != -1)
            fail("graph", "step %d: features at %dx%d: fill %.6f touched %lld, want %.6f %lld", step,
                 tm, tn, f.fill[t], (long long)f.touched[t], want_fill, (long long)hf.touched[t]);
        }
      }
      printf("  graph replay step %d: density %.3f spread %.2f tasks %lld merges %lld err %.2e lse %.1e; "
             "next regime: tile %dx%d %s\n",
             step, st.density, st.row_cv, (long long)st.tasks, (long long)st.merges, e, le, sel.opts.tile_m,
             sel.opts.tile_n, tsr_plan_tasks_name(sel.opts.tasks));
    }
    check_reselect("graph reselect", gp, &p, m, dmask, &st, s);
    tsr_plan_destroy(dev);
    tsr_npy_free(&od);
    tsr_npy_free(&ld);
    tsr_npy_free(&oref);
    tsr_npy_free(&lref);
    tsr_mask_destroy(m);
    free(bytes);
  }
  cu->cuGraphExecDestroy(exec);
  cu->cuGraphDestroy(graph);
  cu->cuMemFree(dmask);
  free_tensors(&x);
  tsr_gpuplan_destroy(gp);
  tsr_geom_destroy(g);
}

/* ---- capacity and rejections -------------------------------------------- */

static void expect(const char *what, tsr_status got, tsr_status want, const tsr_error *err)
{
  if (got != want)
    fail("reject", "%s: status %d (%s), want %d", what, (int)got, err->text, (int)want);
  else if (want != TSR_OK && !err->text[0])
    fail("reject", "%s: no error text", what);
}

static void reject_cases(CUstream s)
{
  tsr_geom *g, *vg;
  tsr_problem p;
  tsr_plan_opts o;
  tsr_gpuplan_caps caps;
  tsr_gpuplan *gp = NULL;
  tsr_plan *dev = NULL;
  tsr_error err;
  tsr_gpuplan_stats st;
  tensors x;
  CUdeviceptr dmask;
  uint8_t *bytes;
  int64_t qs[3] = {100, 200, 212}, i;
  int nq;
  float *lse;

  TRY(tsr_geom_uniform(512, 512, 64, 64, &g, &e_));
  TRY(tsr_geom_variable(qs, 3, qs, 3, &vg, &e_));
  nq = 8;
  memset(&p, 0, sizeof p);
  p.batch = 1, p.heads_q = 2, p.heads_kv = 2, p.seq_q = 512, p.seq_k = 512, p.head_dim = 64;
  p.dtype = TSR_DT_BF16;
  p.geom = g;
  tsr_plan_opts_init(&o);
  tsr_gpuplan_caps_init(&caps);

#define REJ(what, call, want)                 \
  do {                                        \
    tsr_error_clear(&err);                    \
    expect(what, (call), want, &err);         \
    if (gp) tsr_gpuplan_destroy(gp);          \
    gp = NULL;                                \
  } while (0)
  p.geom = vg;
  p.seq_q = p.seq_k = 512;
  o.tasks = TSR_TASKS_PACK;
  REJ("pack tasks, variable geometry", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_UNSUPPORTED);
  o.tasks = TSR_TASKS_ROW;
  p.seq_k = 500;
  REJ("variable geometry vs problem", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_SHAPE);
  p.seq_k = 512;
  o.mapping = TSR_MAP_RETAIN;
  REJ("retain, variable geometry", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_UNSUPPORTED);
  o.mapping = TSR_MAP_AUTO;
  o.tasks = TSR_TASKS_AUTO;
  p.geom = g;
  o.tasks = TSR_TASKS_PACK;
  REJ("pack tasks", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_UNSUPPORTED);
  o.tasks = TSR_TASKS_SPLIT;
  REJ("split without chunk", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_INVALID);
  o.tasks = TSR_TASKS_ROW;
  caps.mask_heads = 3;
  REJ("mask heads", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_SHAPE);
  caps.mask_heads = 0;
  caps.max_tiles = -1;
  REJ("negative capacity", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_INVALID);
  caps.max_tiles = 0;
  p.dtype = TSR_DT_F32;
  REJ("float32 data", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_DTYPE);
  p.dtype = TSR_DT_BF16;
  p.seq_q = 500;
  REJ("geometry vs problem", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_SHAPE);
  p.seq_q = 512;
  o.tile_m = 40;
  REJ("bad tile", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_UNSUPPORTED);
  o.tile_m = 48;
  REJ("tile without a variant", tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err), TSR_ERR_NO_VARIANT);
  o.tile_m = 0;

  TRY(tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &e_));
  tsr_error_clear(&err);
  expect("null mask", tsr_gpuplan_plan(gp, 0, TSR_MASK_BYTES, s, &err), TSR_ERR_INVALID, &err);
  tsr_error_clear(&err);
  expect("bad format", tsr_gpuplan_plan(gp, 4096, (tsr_mask_format)7, s, &err), TSR_ERR_INVALID, &err);
  tsr_error_clear(&err);
  expect("download before planning", tsr_gpuplan_download(gp, &dev, &err), TSR_ERR_INVALID, &err);
  tsr_gpuplan_destroy(gp);
  gp = NULL;

  /* Overflow: 10 tiles cannot hold a full mask (128 tiles); flagged,
   * nothing runs.  A random mask would leave this to the seed: a 30% one
   * with empty rows fit in 10 tiles for about one seed in 20. */
  caps.max_tiles = 10;
  TRY(tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &e_));
  bytes = make_mask(1, 2, nq, nq, MK_FULL, 1);
  dmask = upload_mask(bytes, 2 * nq, nq, TSR_MASK_BYTES, 0);
  make_tensors(&x, 1, 2, 2, 512, 512, 64, TSR_DT_BF16, 0);
  poison(&x, s);
  TRY(tsr_gpuplan_launch(gp, dmask, TSR_MASK_BYTES, &x.t, s, &e_));
  tsr_error_clear(&err);
  expect("overflow download", tsr_gpuplan_download(gp, &dev, &err), TSR_ERR_CAPACITY, &err);
  if (tsr_gpuplan_stats_read(gp, &st) != 1 || !st.overflow || st.tiles <= 10)
    fail("overflow", "features: step %lld overflow %d tiles %lld", (long long)st.step, st.overflow,
         (long long)st.tiles);
  lse = malloc(2 * 512 * 4);
  CK(cu->cuMemcpyDtoH(lse, x.dlse, 2 * 512 * 4));
  for (i = 0; i < 2 * 512; i++)
    if (lse[i] == lse[i]) {
      fail("overflow", "an overflowed plan still wrote lse[%lld]", (long long)i);
      break;
    }
  printf("  overflow: %s\n", err.text);
  free(lse);
  free(bytes);
  cu->cuMemFree(dmask);
  free_tensors(&x);
  tsr_gpuplan_destroy(gp);
  tsr_geom_destroy(g);
  tsr_geom_destroy(vg);
}

/* ---- timing ------------------------------------------------------------- */

static int cmp_f(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Blocks 128 x bk; mapping: the planner's (AUTO: retain) or gather. */
static void timing(const char *label, int H, int S, double dens, int split, CUstream s, int with_run,
                   tsr_mask_format fmt, int no_host_stats, int bk, tsr_mapping mapping)
{
  tsr_gpuplan_caps caps;
  const int bs = 128, D = 128, iters = 200;
  tsr_geom *g;
  tsr_mask *m;
  tsr_problem p;
  tsr_plan_opts o;
  tsr_gpuplan *gp;
  tsr_plan *dev = NULL, *host = NULL;
  tsr_error err;
  CUdeviceptr dmask;
  CUevent e0, e1;
  CUgraph graph;
  CUgraphExec exec;
  uint8_t *bytes;
  float ts[200], ms, graph_ms, run_ms = 0, both_ms = 0;
  int nq, nk, i;
  double t0, host_ms;
  tsr_gpuplan_stats st;

  TRY(tsr_geom_uniform(S, S, bs, bk, &g, &e_));
  nq = (int)tsr_geom_nq(g);
  nk = (int)tsr_geom_nk(g);
  bytes = make_mask(1, H, nq, nk, MK_RANDOM, dens);
  TRY(tsr_mask_from_bytes(1, H, nq, nk, bytes, &m, &e_));
  dmask = upload_mask(bytes, (int64_t)H * nq, nk, fmt, 0);
  memset(&p, 0, sizeof p);
  p.batch = 1, p.heads_q = H, p.heads_kv = H, p.seq_q = S, p.seq_k = S, p.head_dim = D;
  p.dtype = TSR_DT_BF16;
  p.geom = g;
  TRY(tsr_problem_check(&p, &e_));
  tsr_plan_opts_init(&o);
  o.tasks = split ? TSR_TASKS_SPLIT : TSR_TASKS_ROW;
  o.split_tiles = split;
  o.mapping = mapping;
  tsr_gpuplan_caps_init(&caps);
  caps.no_host_stats = no_host_stats;
  TRY(tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &e_));
  CK(cu->cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(cu->cuEventCreate(&e1, CU_EVENT_DEFAULT));

  for (i = 0; i < 20; i++) TRY(tsr_gpuplan_plan(gp, dmask, fmt, s, &e_));
  CK(cu->cuStreamSynchronize(s));
  /* One planning between two events, as a step sees it. */
  for (i = 0; i < iters; i++) {
    CK(cu->cuEventRecord(e0, s));
    TRY(tsr_gpuplan_plan(gp, dmask, fmt, s, &e_));
    CK(cu->cuEventRecord(e1, s));
    CK(cu->cuEventSynchronize(e1));
    CK(cu->cuEventElapsedTime(&ts[i], e0, e1));
  }
  qsort(ts, iters, sizeof *ts, cmp_f);
  ms = ts[iters / 2];
  /* Graph replays of one planning: launch gaps mostly gone. */
  CK(cu->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  TRY(tsr_gpuplan_plan(gp, dmask, fmt, s, &e_));
  CK(cu->cuStreamEndCapture(s, &graph));
  CK(cu->cuGraphInstantiate(&exec, graph, 0));
  CK(cu->cuGraphLaunch(exec, s));
  CK(cu->cuEventRecord(e0, s));
  for (i = 0; i < iters; i++) CK(cu->cuGraphLaunch(exec, s));
  CK(cu->cuEventRecord(e1, s));
  CK(cu->cuEventSynchronize(e1));
  CK(cu->cuEventElapsedTime(&graph_ms, e0, e1));
  graph_ms /= iters;
  cu->cuGraphExecDestroy(exec);
  cu->cuGraphDestroy(graph);

  /* The plan is exact, and the host planner's time for comparison. */
  tsr_error_clear(&err);
  if (tsr_gpuplan_download(gp, &dev, &err) || tsr_plan_verify(dev, m, &err))
    fail(label, "timed plan does not verify: %s", err.text);
  t0 = now_s();
  TRY(tsr_plan_create(&p, m, &o, &host, &e_));
  host_ms = (now_s() - t0) * 1e3;
  if (no_host_stats) {
    /* The features still exist on the device: the downloaded plan has them. */
    tsr_plan_summary sm;
    tsr_plan_summarize(dev, &sm);
    memset(&st, 0, sizeof st);
    st.density = sm.selected_pairs / ((double)H * S * (double)S);
  } else {
    tsr_gpuplan_stats_read(gp, &st);
  }

  if (with_run) {
    tensors x;
    float rs[5], bs2[5];
    make_tensors(&x, 1, H, H, S, S, D, TSR_DT_BF16, 0);
    TRY(tsr_gpuplan_launch(gp, dmask, fmt, &x.t, s, &e_));
    for (i = 0; i < 5; i++) {
      CK(cu->cuEventRecord(e0, s));
      TRY(tsr_gpuplan_run(gp, &x.t, s, &e_));
      CK(cu->cuEventRecord(e1, s));
      CK(cu->cuEventSynchronize(e1));
      CK(cu->cuEventElapsedTime(&rs[i], e0, e1));
      CK(cu->cuEventRecord(e0, s));
      TRY(tsr_gpuplan_launch(gp, dmask, fmt, &x.t, s, &e_));
      CK(cu->cuEventRecord(e1, s));
      CK(cu->cuEventSynchronize(e1));
      CK(cu->cuEventElapsedTime(&bs2[i], e0, e1));
    }
    qsort(rs, 5, sizeof *rs, cmp_f);
    qsort(bs2, 5, sizeof *bs2, cmp_f);
    run_ms = rs[2];
    both_ms = bs2[2];
    free_tensors(&x);
  }
  printf("TIMING %-22s H=%d S=%d nq=%d nk=%d density=%.3f tasks=%s tile=%dx%d %s: plan %.2f us (median of %d, "
         "events), %.2f us (graph replay), host planner %.0f us",
         label, H, S, nq, nk, st.density, split ? "split" : "row", dev ? dev->tile_m : 0, dev ? dev->tile_n : 0,
         tsr_plan_mapping_name(dev ? dev->mapping : mapping), ms * 1e3, iters, graph_ms * 1e3, host_ms * 1e3);
  if (with_run)
    printf("; attention %.3f ms, plan+attention %.3f ms, planning %.2f%% of execution", run_ms, both_ms,
           100.0 * ms / run_ms);
  printf("\n");
  cu->cuEventDestroy(e0);
  cu->cuEventDestroy(e1);
  tsr_plan_destroy(dev);
  tsr_plan_destroy(host);
  tsr_gpuplan_destroy(gp);
  cu->cuMemFree(dmask);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  free(bytes);
}

/* Whether a case runs under --only PREFIX (NULL: every case). */
static int picked(const char *only, const char *label)
{
  return !only || !strncmp(label, only, strlen(only));
}

int main(int argc, char **argv)
{
  tsr_context_opts co;
  tsr_error err;
  tsr_status st;
  CUstream s;
  uint64_t seed = (uint64_t)time(NULL);
  int i, do_timing = 1, quick = 0, gathers;
  const char *only = NULL;
  const char *dir = getenv("TSR_TOP_BUILDDIR");
  char bundle[4096];

  for (i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--no-timing")) do_timing = 0;
    else if (!strcmp(argv[i], "--quick")) quick = 1, do_timing = 0;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i], do_timing = 0;
    else {
      fprintf(stderr, "usage: gpu_plan [--seed N] [--no-timing] [--quick] [--only PREFIX]\n");
      return 2;
    }
  }
  rng_state = seed;
  printf("gpu_plan: seed %llu\n", (unsigned long long)seed);
  tsr_context_opts_init(&co);
  if (!getenv("TESSERA_BUNDLE")) {
    snprintf(bundle, sizeof bundle, "%s/bundle", dir ? dir : ".");
    co.bundle_dir = bundle;
  }
  tsr_error_clear(&err);
  st = tsr_context_create(&co, &ctx, &err);
  if (st == TSR_ERR_NO_DEVICE) {
    printf("gpu_plan: skipped: %s\n", err.text);
    return SKIP;
  }
  if (st) {
    fprintf(stderr, "gpu_plan: %s\n", err.text);
    return 1;
  }
  cu = tsri_context_cu(ctx);
  CK(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  printf("random masks:\n");
  for (i = 0; i < (int)(sizeof cases / sizeof cases[0]) && (!quick || i < 4); i++)
    if (picked(only, cases[i].label)) run_case(&cases[i], s);
  printf("gather plans:\n");
  if ((gathers = gather_served()))
    for (i = 0; i < (int)(sizeof gcases / sizeof gcases[0]) && (!quick || i < 2); i++)
      if (picked(only, gcases[i].label)) gather_case(&gcases[i], s);
  printf("variable geometries:\n");
  for (i = 0; i < (int)(sizeof vcases / sizeof vcases[0]) && (!quick || i < 3); i++)
    if (picked(only, vcases[i].label)) var_case(&vcases[i], s);
  if (only) goto end;
  if (!quick) {
    printf("corpus masks:\n");
    corpus_cases(s, seed);
  }
  printf("graph capture:\n");
  graph_case(s);
  printf("capacity and rejections:\n");
  reject_cases(s);
  if (do_timing) {
    timing("wan2.1-1.3b-480p", 12, 32760, 0.10, 0, s, 1, TSR_MASK_BYTES, 0, 128, TSR_MAP_AUTO);
    timing("wan2.1-1.3b-480p/bits", 12, 32760, 0.10, 0, s, 0, TSR_MASK_BITS, 0, 128, TSR_MAP_AUTO);
    timing("wan2.1-1.3b-480p/nostats", 12, 32760, 0.10, 0, s, 0, TSR_MASK_BYTES, 1, 128, TSR_MAP_AUTO);
    timing("wan2.1-1.3b-480p", 12, 32760, 0.10, 8, s, 0, TSR_MASK_BYTES, 0, 128, TSR_MAP_AUTO);
    timing("wan2.1-14b-720p", 40, 75600, 0.10, 0, s, 1, TSR_MASK_BYTES, 0, 128, TSR_MAP_AUTO);
    /* 128x64 blocks: on 128x64 tiles (retain), then as a gather plan */
    timing("wan2.1-1.3b-480p/b64", 12, 32760, 0.10, 0, s, 1, TSR_MASK_BYTES, 0, 64, TSR_MAP_AUTO);
    if (gathers) {
      timing("wan2.1-1.3b-480p/b64", 12, 32760, 0.10, 0, s, 1, TSR_MASK_BYTES, 0, 64, TSR_MAP_GATHER);
      timing("wan2.1-1.3b-480p/b64/bits", 12, 32760, 0.10, 0, s, 0, TSR_MASK_BITS, 0, 64, TSR_MAP_GATHER);
      timing("wan2.1-1.3b-480p/b64", 12, 32760, 0.10, 8, s, 0, TSR_MASK_BYTES, 0, 64, TSR_MAP_GATHER);
    }
  }
end:
  cu->cuStreamDestroy(s);
  tsr_context_destroy(ctx);
  if (failures) {
    printf("gpu_plan: %d failure(s) (seed %llu)\n", failures, (unsigned long long)seed);
    return 1;
  }
  printf("gpu_plan: all passed\n");
  return 0;
}

/*
 * produce.c: the fused stages of tessera.methods' mask producers on the
 * GPU (tessera.h "Mask producers"; kernels: templates/produce_gpu.cuh,
 * compiled into the bundle's planner module).  A producer holds the loaded
 * module and its functions; each call checks its arguments (before it
 * touches the device, so the checks are testable without one) and makes
 * one cuLaunchKernel on the caller's stream: no allocation, no
 * synchronisation, so a CUDA graph captures it.
 */
#include "context_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PR_THREADS 256 /* TSR_PR_THREADS of the template */
#define PR_MAX_ROWS 16 /* rows a select CTA scores at most: one m16 tile (produce_gpu.cuh) */
#define PR_MAX_ROWS2 32 /* two m16 tiles: the _h2 kernels (float32 radix select, tensor-core scores) */
#define PR_SELECT_KINDS 10
#define PR_HIST_SMEM (PR_THREADS / 32 * 256 * 4) /* the radix select's histograms (float64: static) */

/* The kernels' parameter records: the layout of templates/produce_gpu.cuh's
 * tsr_pr_pool_p and tsr_pr_select_p. */
typedef struct {
  uint64_t x, out, sq;
  long long sb, sh, ss;
  int heads, d;
  int gt, gh, gw, ct, ch, cw, nh, nw;
  uint64_t x2, out2, sq2;
  long long sb2, sh2, ss2;
  int heads2, batch, nrun, run_tiles[8], run_size[8];
  int ntiles;
  uint64_t order;
} pr_pool_p;

typedef struct {
  uint64_t pq, pk, out;
  int heads, kv_heads, nq, nk, d, rows, rule, min_keep;
  int ls;
  long long k;
  double scale, tau;
} pr_select_p;

/* tsr_pr_sampled_p: SVG's profile (templates/produce_sampled.cuh) */
typedef struct {
  uint64_t q, k, v, rows, planes, part_o, part_ml, row_err, out;
  long long qsb, qsh, qss, ksb, ksh, kss, vsb, vsh, vss;
  int heads, tokens, samples, words, chunks, chunk_tiles, groups, d, stages;
  float scale_log2;
} pr_sampled_p;
#define PR_SA_ROWS 64 /* sampled rows a CTA (TSR_SA_ROWS) */
#define PR_SA_BN 64   /* keys a tile (TSR_SA_BN) */
/* shared memory: q's 64 rows, `st` stages of K and V tiles and of the two
 * patterns' words for the 64 rows (3 stages: 59 or 115 KiB; 2: 42 or 82) */
#define PR_SA_SMEM(d, st) (PR_SA_ROWS * (d) * 2 + (st) * (2 * PR_SA_BN * (d) * 2 + 2 * PR_SA_ROWS * 2 * 4))

enum { PR_F32, PR_F16, PR_BF16, PR_F64, PR_NDT };
static const char *const pr_dt_names[PR_NDT] = {"f32", "f16", "bf16", "f64"};
static const int pr_dt_size[PR_NDT] = {4, 2, 2, 8};

struct tsr_producer {
  tsr_context *ctx;
  CUmodule mod;
  CUfunction pool[PR_NDT][2];  /* [dtype][vector loads]: a CTA a tile */
  CUfunction pool_w[PR_NDT][2][2]; /* [dtype][vector loads][squares]: a warp a tile */
  CUfunction select_t[4]; /* float32 radix select with k transposed, nk <= 256 .. 1024 */
  CUfunction select2[4];  /* float32 radix select, two m16 tiles of rows, nk <= 256 .. 1024 */
  CUfunction select[2][PR_SELECT_KINDS]; /* [float64][scalar, vector, vector with the row in
                                            registers for nk <= 256, 512, 768, 1024, the same
                                            with the top k by radix select] */
  CUfunction sampled[2][2]; /* [bf16][dim 128]: a chunk of keys a CTA */
  CUfunction sampled_merge, sampled_sum;
};

static int pr_dt(tsr_dtype d)
{
  switch (d) {
  case TSR_DT_F32: return PR_F32;
  case TSR_DT_F16: return PR_F16;
  case TSR_DT_BF16: return PR_BF16;
  case TSR_DT_F64: return PR_F64;
  default: return -1;
  }
}

/* The SVG profile's pipeline stages: 3 where the device's shared memory
 * holds them (all but D 128 on a 99 KiB SM), else 2. */
static int sampled_fits(const tsr_producer *p, int64_t dim, int stages)
{
  return p->ctx->smem_optin <= 0 || (size_t)p->ctx->smem_optin >= (size_t)PR_SA_SMEM(dim, stages);
}

static int sampled_stages(const tsr_producer *p, const tsr_sampled_args *a)
{
  return a->stages ? (int)a->stages : sampled_fits(p, a->dim, 3) ? 3 : 2;
}

static tsr_status load_functions(tsr_producer *p, tsr_error *err)
{
  const tsr_cu *cu = tsri_context_cu(p->ctx);
  static const int vec[PR_NDT] = {4, 8, 8, 2};
  char name[64];
  int i, v, sq;
  tsr_status st = TSR_OK;
  for (i = 0; i < PR_NDT && !st; i++)
    for (v = 0; v < 2 && !st; v++) {
      snprintf(name, sizeof name, "tsr_pr_pool_%s_v%d", pr_dt_names[i], v ? vec[i] : 1);
      st = tsri_cu_check(cu, cu->cuModuleGetFunction(&p->pool[i][v], p->mod, name), name, err);
      for (sq = 0; sq < 2 && !st; sq++) {
        snprintf(name, sizeof name, "tsr_pr_pool_%s_v%d_w%d", pr_dt_names[i], v ? vec[i] : 1, sq);
        st = tsri_cu_check(cu, cu->cuModuleGetFunction(&p->pool_w[i][v][sq], p->mod, name), name, err);
      }
    }
  for (i = 0; i < 2 && !st; i++)
    for (v = 0; v < PR_SELECT_KINDS && !st; v++) {
      snprintf(name, sizeof name, "tsr_pr_select_%s_v%d_n%d%s", i ? "f64" : "f32", v ? (i ? 2 : 4) : 1,
               v < 2 ? 0 : 8 * ((v - 2) % 4 + 1), v >= 6 ? "_h" : "");
      st = tsri_cu_check(cu, cu->cuModuleGetFunction(&p->select[i][v], p->mod, name), name, err);
      /* the scores of a CTA's rows may need more than the default 48 KiB */
      if (!st && p->ctx->smem_optin > 0)
        st = tsri_cu_check(cu, cu->cuFuncSetAttribute(p->select[i][v],
                                                      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                      (int)p->ctx->smem_optin - (i && v >= 6 ? PR_HIST_SMEM : 0)),
                           "cuFuncSetAttribute(producer select)", err);
    }
  for (v = 0; v < 8 && !st; v++) {
    CUfunction *fn = v < 4 ? &p->select_t[v] : &p->select2[v - 4];
    snprintf(name, sizeof name, "tsr_pr_select_f32_v4_n%d_%s", 8 * (v % 4 + 1), v < 4 ? "ht" : "h2");
    st = tsri_cu_check(cu, cu->cuModuleGetFunction(fn, p->mod, name), name, err);
    if (!st && p->ctx->smem_optin > 0)
      st = tsri_cu_check(cu, cu->cuFuncSetAttribute(*fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                    (int)p->ctx->smem_optin),
                         "cuFuncSetAttribute(producer select)", err);
  }
  for (i = 0; i < 4 && !st; i++) {
    snprintf(name, sizeof name, "tsr_pr_sampled_%s_d%d", i & 1 ? "bf16" : "f16", i & 2 ? 128 : 64);
    st = tsri_cu_check(cu, cu->cuModuleGetFunction(&p->sampled[i & 1][i >> 1], p->mod, name), name, err);
    if (!st)
      st = tsri_cu_check(cu, cu->cuFuncSetAttribute(p->sampled[i & 1][i >> 1],
                                                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                    (int)PR_SA_SMEM(i & 2 ? 128 : 64,
                                                                    sampled_fits(p, i & 2 ? 128 : 64, 3) ? 3 : 2)),
                         "cuFuncSetAttribute(producer sampled)", err);
  }
  if (!st)
    st = tsri_cu_check(cu, cu->cuModuleGetFunction(&p->sampled_merge, p->mod, "tsr_pr_sampled_merge"),
                       "tsr_pr_sampled_merge", err);
  if (!st)
    st = tsri_cu_check(cu, cu->cuModuleGetFunction(&p->sampled_sum, p->mod, "tsr_pr_sampled_sum"),
                       "tsr_pr_sampled_sum", err);
  return st;
}

tsr_status tsr_producer_create(tsr_context *ctx, tsr_producer **out, tsr_error *err)
{
  tsr_producer *p;
  tsr_status st;
  if (!out) return tsr_error_set(err, TSR_ERR_INVALID, "producer: out is NULL");
  *out = NULL;
  if (!ctx) return tsr_error_set(err, TSR_ERR_INVALID, "producer: context is NULL");
  if (!ctx->pctx)
    return tsr_error_set(err, TSR_ERR_NO_DEVICE, "producer: the context has no device (host-only)");
  if (!(p = calloc(1, sizeof *p))) return tsr_error_set(err, TSR_ERR_NOMEM, "producer: out of memory");
  /* held from here, so destroy() releases it on the failure paths too (a
   * module loaded before load_functions failed used to release a context
   * never retained) */
  p->ctx = ctx;
  tsri_context_retain(ctx);
  if ((st = tsri_gpu_load_planner(ctx, &p->mod, err)) || (st = load_functions(p, err))) {
    tsr_producer_destroy(p);
    return st;
  }
  *out = p;
  return TSR_OK;
}

void tsr_producer_destroy(tsr_producer *p)
{
  if (!p) return;
  if (p->mod && tsri_context_make_current(p->ctx, NULL) == TSR_OK)
    tsri_context_cu(p->ctx)->cuModuleUnload(p->mod);
  tsri_context_release(p->ctx);
  free(p);
}

static int fits_int(int64_t v) { return v > 0 && v <= 0x7fffffff; }

/* A tensor's strides, in elements: none negative, channels contiguous. */
static tsr_status check_strides(const char *what, int64_t b, int64_t h, int64_t t, int64_t dim, tsr_error *err)
{
  if (b < 0 || h < 0 || t < dim)
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "producer pool: %s (batch %lld, head %lld, token %lld) must be non-negative "
                         "and the token stride at least dim %lld (channels contiguous)",
                         what, (long long)b, (long long)h, (long long)t, (long long)dim);
  return TSR_OK;
}

/* The pooling's arguments, checked as the message names them. */
static tsr_status check_pool(const tsr_pool_args *a, tsr_error *err)
{
  tsr_status st;
  int i;
  int64_t tiles = 1;
  if (!a) return tsr_error_set(err, TSR_ERR_INVALID, "producer pool: arguments are NULL");
  if (pr_dt(a->dtype) < 0)
    return tsr_error_set(err, TSR_ERR_DTYPE, "producer pool: x must be float32, fp16, bf16 or float64, got %s",
                         tsr_dtype_name(a->dtype));
  if (!a->x || !a->out) return tsr_error_set(err, TSR_ERR_INVALID, "producer pool: x or out is a null pointer");
  if (!fits_int(a->batch) || !fits_int(a->heads) || !fits_int(a->tokens) || !fits_int(a->dim))
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "producer pool: batch, heads, tokens and dim must be positive 32-bit sizes, got "
                         "%lld, %lld, %lld, %lld", (long long)a->batch, (long long)a->heads,
                         (long long)a->tokens, (long long)a->dim);
  if (a->batch > 65535 || a->heads > 65535)
    return tsr_error_set(err, TSR_ERR_SHAPE, "producer pool: batch %lld or heads %lld over 65535",
                         (long long)a->batch, (long long)a->heads);
  if (a->kernel < 0 || a->kernel > 1)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer pool: kernel must be 0 (automatic) or 1 (a CTA a tile), "
                         "got %lld", (long long)a->kernel);
  if (a->runs < 0 || a->runs > 8)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer pool: runs must be 0 (grid tiles) to 8, got %lld",
                         (long long)a->runs);
  if (a->order && (a->runs || a->order % 4))
    return tsr_error_set(err, TSR_ERR_INVALID, "producer pool: order (0x%llx) needs runs = 0 (got %lld) and a "
                         "4-byte aligned address", (unsigned long long)a->order, (long long)a->runs);
  if (a->x2) {
    if (!a->out2 || (a->sq && !a->sq2))
      return tsr_error_set(err, TSR_ERR_INVALID, "producer pool: x2 is set but out2%s is a null pointer",
                           a->sq ? " or sq2" : "");
    if (!fits_int(a->heads2) || a->heads2 > 65535)
      return tsr_error_set(err, TSR_ERR_SHAPE, "producer pool: heads2 must be 1 to 65535, got %lld",
                           (long long)a->heads2);
    if ((st = check_strides("x2's strides", a->stride2_b, a->stride2_h, a->stride2_s, a->dim, err)))
      return st;
    if (a->batch * 2 > 65535)
      return tsr_error_set(err, TSR_ERR_SHAPE, "producer pool: batch %lld over 32767 with a second tensor",
                           (long long)a->batch);
  }
  if (a->runs > 0) {
    int64_t tok = 0;
    tiles = 0;
    for (i = 0; i < a->runs; i++) {
      if (!fits_int(a->run_tiles[i]) || !fits_int(a->run_size[i]))
        return tsr_error_set(err, TSR_ERR_SHAPE, "producer pool: run %d must have positive tiles and size, got "
                             "%lld tiles of %lld tokens", i, (long long)a->run_tiles[i], (long long)a->run_size[i]);
      tiles += a->run_tiles[i];
      tok += a->run_tiles[i] * a->run_size[i];
    }
    if (tok != a->tokens)
      return tsr_error_set(err, TSR_ERR_SHAPE, "producer pool: the runs hold %lld tokens, x has %lld",
                           (long long)tok, (long long)a->tokens);
    if (tiles > 0x7fffffff)
      return tsr_error_set(err, TSR_ERR_SHAPE, "producer pool: %lld tiles, over 2^31 - 1", (long long)tiles);
  }
  for (i = 0; i < 3 && !a->runs; i++) {
    if (!fits_int(a->grid[i]) || !fits_int(a->tile[i]))
      return tsr_error_set(err, TSR_ERR_SHAPE, "producer pool: grid and tile sizes must be positive, got "
                           "grid[%d] = %lld, tile[%d] = %lld", i, (long long)a->grid[i], i,
                           (long long)a->tile[i]);
    tiles *= (a->grid[i] + a->tile[i] - 1) / a->tile[i];
  }
  if (!a->runs && a->grid[0] * a->grid[1] * a->grid[2] != a->tokens)
    return tsr_error_set(err, TSR_ERR_SHAPE, "producer pool: grid %lldx%lldx%lld has %lld tokens, x has %lld",
                         (long long)a->grid[0], (long long)a->grid[1], (long long)a->grid[2],
                         (long long)(a->grid[0] * a->grid[1] * a->grid[2]), (long long)a->tokens);
  if (!a->runs && tiles > 0x7fffffff)
    return tsr_error_set(err, TSR_ERR_SHAPE, "producer pool: %lld tiles, over 2^31 - 1", (long long)tiles);
  return check_strides("strides", a->stride_b, a->stride_h, a->stride_s, a->dim, err);
}

tsr_status tsr_produce_pool(tsr_producer *p, const tsr_pool_args *a, void *stream, tsr_error *err)
{
  pr_pool_p k;
  tsr_status st;
  int dt, vec, n, i;
  unsigned nt[3], ntiles, nheads;
  void *args[1] = {&k};
  if ((st = check_pool(a, err))) return st;
  if (!p) return tsr_error_set(err, TSR_ERR_INVALID, "producer pool: producer is NULL");
  dt = pr_dt(a->dtype);
  n = 16 / pr_dt_size[dt];
  for (i = 0; i < 3; i++) nt[i] = a->runs ? 1 : (unsigned)((a->grid[i] + a->tile[i] - 1) / a->tile[i]);
  ntiles = nt[0] * nt[1] * nt[2];
  if (a->runs)
    for (ntiles = 0, i = 0; i < a->runs; i++) ntiles += (unsigned)a->run_tiles[i];
  /* 16-byte loads where every row (of both tensors) starts 16-byte aligned */
  vec = a->dim % n == 0 && a->x % 16 == 0 && a->stride_b % n == 0 && a->stride_h % n == 0 &&
        a->stride_s % n == 0;
  if (a->x2)
    vec = vec && a->x2 % 16 == 0 && a->stride2_b % n == 0 && a->stride2_h % n == 0 && a->stride2_s % n == 0;
  nheads = (unsigned)(a->x2 && a->heads2 > a->heads ? a->heads2 : a->heads);
  memset(&k, 0, sizeof k);
  k.x = a->x;
  k.out = a->out;
  k.sq = a->sq;
  k.sb = a->stride_b;
  k.sh = a->stride_h;
  k.ss = a->stride_s;
  k.heads = (int)a->heads;
  k.d = (int)a->dim;
  k.gt = (int)a->grid[0], k.gh = (int)a->grid[1], k.gw = (int)a->grid[2];
  k.ct = (int)a->tile[0], k.ch = (int)a->tile[1], k.cw = (int)a->tile[2];
  k.nh = (int)nt[1], k.nw = (int)nt[2];
  k.x2 = a->x2;
  k.out2 = a->out2;
  k.sq2 = a->sq ? a->sq2 : 0; /* sq2 follows sq */
  k.sb2 = a->stride2_b, k.sh2 = a->stride2_h, k.ss2 = a->stride2_s;
  k.heads2 = (int)a->heads2;
  k.batch = (int)a->batch;
  k.nrun = (int)a->runs;
  for (i = 0; i < a->runs; i++) k.run_tiles[i] = (int)a->run_tiles[i], k.run_size[i] = (int)a->run_size[i];
  k.ntiles = (int)ntiles;
  k.order = a->order;
  if ((st = tsri_context_make_current(p->ctx, err))) return st;
  return tsri_cu_check(tsri_context_cu(p->ctx),
                       tsri_context_cu(p->ctx)->cuLaunchKernel(a->kernel ? p->pool[dt][vec] : p->pool_w[dt][vec][a->sq != 0],
                                                               a->kernel ? ntiles : (ntiles + PR_THREADS / 32 - 1) / (PR_THREADS / 32),
                                                               nheads,
                                                               (unsigned)(a->batch * (a->x2 ? 2 : 1)),
                                                               PR_THREADS, 1, 1, 0, (CUstream)stream, args,
                                                               NULL),
                       "cuLaunchKernel(producer pool)", err);
}

static tsr_status check_select(const tsr_select_args *a, tsr_error *err)
{
  if (!a) return tsr_error_set(err, TSR_ERR_INVALID, "producer select: arguments are NULL");
  if (a->dtype != TSR_DT_F32 && a->dtype != TSR_DT_F64)
    return tsr_error_set(err, TSR_ERR_DTYPE, "producer select: pooled q and k must be float32 or float64, got %s",
                         tsr_dtype_name(a->dtype));
  if (!a->pq || !a->pk || !a->out)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer select: pq, pk or out is a null pointer");
  if (!fits_int(a->batch) || !fits_int(a->heads) || !fits_int(a->kv_heads) || !fits_int(a->nq) ||
      !fits_int(a->nk) || !fits_int(a->dim))
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "producer select: batch, heads, kv_heads, nq, nk and dim must be positive 32-bit sizes, "
                         "got %lld, %lld, %lld, %lld, %lld, %lld", (long long)a->batch, (long long)a->heads,
                         (long long)a->kv_heads, (long long)a->nq, (long long)a->nk, (long long)a->dim);
  if (a->batch > 65535 || a->heads > 65535)
    return tsr_error_set(err, TSR_ERR_SHAPE, "producer select: batch %lld or heads %lld over 65535",
                         (long long)a->batch, (long long)a->heads);
  if (a->heads % a->kv_heads)
    return tsr_error_set(err, TSR_ERR_SHAPE, "producer select: query heads %lld are not a multiple of key heads %lld",
                         (long long)a->heads, (long long)a->kv_heads);
  if (a->rule != TSR_SELECT_TOPK && a->rule != TSR_SELECT_CDF)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer select: unknown rule %d", (int)a->rule);
  if (a->rule == TSR_SELECT_CDF && !(a->tau >= 0.0 && a->tau <= 1.0))
    return tsr_error_set(err, TSR_ERR_INVALID, "producer select: CDF threshold tau must be in [0, 1], got %g",
                         a->tau);
  if (a->k < 0 || a->min_keep < 0 || a->min_keep > 0x7fffffff)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer select: k %lld and min_keep %lld must be non-negative",
                         (long long)a->k, (long long)a->min_keep);
  if (a->rows < 0 || a->rows > PR_MAX_ROWS2)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer select: rows a CTA must be 0 (automatic) to %d, got %lld",
                         PR_MAX_ROWS2, (long long)a->rows);
  if (a->kernel < 0 || a->kernel > 2)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer select: kernel must be 0 (automatic), 1 (bitwise "
                         "search) or 2 (radix select, k transposed), got %lld", (long long)a->kernel);
  if (a->kernel == 2 && (a->dtype != TSR_DT_F32 || a->rule != TSR_SELECT_TOPK || a->dim % 16 || a->nk > 1024))
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "producer select: kernel 2 (k transposed) takes float32 top-k "
                         "with dim a multiple of 16 (got %lld) and nk up to 1024 (got %lld)", (long long)a->dim,
                         (long long)a->nk);
  if (!(a->scale == a->scale) || a->scale <= 0.0)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer select: scale must be positive, got %g", a->scale);
  return TSR_OK;
}

tsr_status tsr_produce_select(tsr_producer *p, const tsr_select_args *a, void *stream, tsr_error *err)
{
  pr_select_p k;
  tsr_status st;
  int f64, vec, esz, hist, tc, mt;
  int64_t rows, want, smem, avail, qfix, row, ls;
  void *args[1] = {&k};
  if ((st = check_select(a, err))) return st;
  if (!p) return tsr_error_set(err, TSR_ERR_INVALID, "producer select: producer is NULL");
  f64 = a->dtype == TSR_DT_F64;
  esz = f64 ? 8 : 4;
  /* rows of a CTA: as many as its shared memory holds, up to a->rows or,
   * automatic, 32 for the float32 radix top k (two m16 tiles), else 16 for
   * top-k and 8 for the CDF rule: on the H200 at Wan 480p, VSA's 624-block
   * rows took 0.0501 ms at 32 (two CTAs an SM) against 0.0533 at 16 (four),
   * 0.066 at 24 (two waves) and 0.064 at 12 (notes/producers-2026-12-03c.md;
   * other shapes not timed at 32); SpargeAttn's 256 x 512 0.051 at 8
   * against 0.055 at 12 and 0.063 at 16 with the FMA scores before them
   * (notes/pipeline-2026-12-02c.md) */
  smem = p->ctx->smem_optin > 0 ? p->ctx->smem_optin : 48 * 1024;
  vec = a->dim % (16 / esz) == 0 && a->pk % 16 == 0;
  /* the top k by radix select (kernel 0) where the row is held in registers */
  if (a->kernel == 2) vec = 1; /* k transposed: 4-byte loads of k, the rows' q in 16-byte pieces */
  hist = vec && a->nk <= 1024 && a->rule == TSR_SELECT_TOPK && a->kernel != 1;
  /* float32 scores on the tensor cores (produce_gpu.cuh tsr_pr_tc) read
   * whole m16 tiles of pooled q (mt of them), PR_MAX_ROWS rows each split
   * into TF32 hi and lo, whatever the rows */
  tc = !f64 && vec && a->dim % 16 == 0;
  /* the scores' row stride: the tensor cores store 8-byte pairs of 8 rows at
   * once, on distinct banks when the stride is 8 (mod 16) words */
  ls = tc ? a->nk + (24 - a->nk % 16) % 16 : a->nk;
  row = (tc ? ls : a->dim + a->nk) * esz;
  /* one row beside the histograms, else the bitwise search without them:
   * float64's are static; float32's are dynamic, over pooled q once the
   * scores are done (tc) or after the rows */
  /* two m16 tiles (the _h2 kernels) where the float32 radix select serves
   * the rows: more than 16 asked for, or automatic where all 32 fit (the
   * H200's 227 KiB: two CTAs an SM, as timed; not a 99 KiB Ada SM) */
  mt = tc && hist && a->kernel == 0 && (a->rows == 0 || a->rows > PR_MAX_ROWS) ? 2 : 1;
  for (;;) {
    avail = smem - (hist && f64 ? PR_HIST_SMEM : 0);
    qfix = tc ? 2 * mt * PR_MAX_ROWS * a->dim * esz : 0;
    if (hist && !f64) qfix = tc ? (qfix > PR_HIST_SMEM ? qfix : PR_HIST_SMEM) : PR_HIST_SMEM;
    if (mt == 2 && !a->rows && avail < qfix + PR_MAX_ROWS2 * row) mt = 1;
    else if (!hist || avail >= qfix + row) break;
    else hist = 0, mt = 1;
  }
  if (a->kernel == 2 && !hist)
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "producer select: kernel 2 needs %lld bytes of shared memory "
                         "for pooled q and one row, the device has %lld",
                         (long long)(2 * PR_MAX_ROWS * a->dim * esz + row), (long long)smem);
  rows = (avail - qfix) / row;
  /* asked for, or automatic; at most the kernel's m16 tiles' rows */
  want = a->rows ? a->rows : a->rule == TSR_SELECT_TOPK ? mt * PR_MAX_ROWS : 8;
  if (want > mt * PR_MAX_ROWS) want = mt * PR_MAX_ROWS;
  if (rows > want) rows = want;
  if (rows > a->nq) rows = a->nq;
  if (rows < 1)
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED,
                         "producer select: %lld key blocks of dim %lld need %lld bytes of shared memory a row, "
                         "the device has %lld", (long long)a->nk, (long long)a->dim,
                         (long long)(qfix + row), (long long)avail);
  /* with vector loads, rows of up to 1024 blocks are held in registers
   * (8, 16, 24 or 32 a lane) for the rule's passes */
  if (vec && a->nk <= 1024) vec = 2 + (int)((a->nk - 1) / 256) + (hist ? 4 : 0);
  memset(&k, 0, sizeof k);
  k.pq = a->pq;
  k.pk = a->pk;
  k.out = a->out;
  k.heads = (int)a->heads;
  k.kv_heads = (int)a->kv_heads;
  k.nq = (int)a->nq;
  k.nk = (int)a->nk;
  k.d = (int)a->dim;
  k.rows = (int)rows;
  k.ls = (int)ls;
  k.rule = a->rule == TSR_SELECT_CDF;
  k.min_keep = (int)a->min_keep;
  k.k = a->k;
  k.scale = a->scale;
  k.tau = a->tau;
  if ((st = tsri_context_make_current(p->ctx, err))) return st;
  return tsri_cu_check(tsri_context_cu(p->ctx),
                       tsri_context_cu(p->ctx)->cuLaunchKernel(
                           a->kernel == 2 ? p->select_t[vec - 6] : mt == 2 ? p->select2[vec - 6] : p->select[f64][vec],
                           (unsigned)((a->nq + rows - 1) / rows), (unsigned)a->heads,
                           (unsigned)a->batch, PR_THREADS, 1, 1,
                           (unsigned)(qfix + rows * row),
                           (CUstream)stream, args, NULL),
                       "cuLaunchKernel(producer select)", err);
}

/* ---- SVG's sampled attention (templates/produce_sampled.cuh) ------------- */

static tsr_status check_sampled(const tsr_sampled_args *a, tsr_error *err)
{
  static const char *const tn[3] = {"q", "k", "v"};
  const int64_t *sd[3];
  const uint64_t *pt[3];
  int i;
  if (!a) return tsr_error_set(err, TSR_ERR_INVALID, "producer sampled: arguments are NULL");
  sd[0] = a->q_stride, sd[1] = a->k_stride, sd[2] = a->v_stride;
  pt[0] = &a->q, pt[1] = &a->k, pt[2] = &a->v;
  if (a->dtype != TSR_DT_F16 && a->dtype != TSR_DT_BF16)
    return tsr_error_set(err, TSR_ERR_DTYPE, "producer sampled: q, k and v must be fp16 or bf16, got %s",
                         tsr_dtype_name(a->dtype));
  if (!a->q || !a->k || !a->v || !a->rows || !a->planes || !a->out || !a->work)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer sampled: q, k, v, rows, planes, work or out is a null "
                         "pointer");
  if (!fits_int(a->batch) || !fits_int(a->heads) || !fits_int(a->tokens))
    return tsr_error_set(err, TSR_ERR_SHAPE, "producer sampled: batch, heads and tokens must be positive 32-bit "
                         "sizes, got %lld, %lld, %lld", (long long)a->batch, (long long)a->heads,
                         (long long)a->tokens);
  if (a->batch * a->heads > 65535)
    return tsr_error_set(err, TSR_ERR_SHAPE, "producer sampled: batch x heads %lld over 65535",
                         (long long)(a->batch * a->heads));
  if (a->dim != 64 && a->dim != 128)
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "producer sampled: dim must be 64 or 128, got %lld",
                         (long long)a->dim);
  if (a->samples < 1 || a->samples > 65535)
    return tsr_error_set(err, TSR_ERR_SHAPE, "producer sampled: samples must be 1 to 65535, got %lld",
                         (long long)a->samples);
  for (i = 0; i < 3; i++) {
    if (sd[i][0] < 0 || sd[i][1] < 0 || sd[i][2] < a->dim || sd[i][0] % 8 || sd[i][1] % 8 || sd[i][2] % 8 ||
        *pt[i] % 16)
      return tsr_error_set(err, TSR_ERR_SHAPE, "producer sampled: %s's strides (batch %lld, head %lld, token "
                           "%lld) must be non-negative multiples of 8, the token stride at least dim %lld, at a "
                           "16-byte aligned address (0x%llx)", tn[i], (long long)sd[i][0], (long long)sd[i][1],
                           (long long)sd[i][2], (long long)a->dim, (unsigned long long)*pt[i]);
  }
  if (a->rows % 4 || a->planes % 4 || a->out % 4 || a->work % 16)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer sampled: rows (0x%llx), planes (0x%llx) and out (0x%llx) "
                         "must be 4-byte aligned, work (0x%llx) 16-byte", (unsigned long long)a->rows,
                         (unsigned long long)a->planes, (unsigned long long)a->out, (unsigned long long)a->work);
  if (!(a->scale > 0.0) || a->scale > 1e30)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer sampled: scale must be positive and finite, got %g",
                         a->scale);
  if (a->stages != 0 && a->stages != 2 && a->stages != 3)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer sampled: stages must be 0 (automatic), 2 or 3, got %lld",
                         (long long)a->stages);
  return TSR_OK;
}

/* The key chunks: one wave of CTAs over the multiprocessors (the D 128
 * kernel holds one an SM, the D 64 one two: their registers), each chunk
 * whole 64-key tiles.  More chunks would add waves and, with them, the
 * partial outputs written and merged (26 MB at Wan 480p in two waves). */
static void sampled_chunks(const tsr_producer *p, const tsr_sampled_args *a, int64_t *chunks, int64_t *tiles)
{
  int64_t ntiles = (a->tokens + PR_SA_BN - 1) / PR_SA_BN;
  int64_t groups = (a->samples + PR_SA_ROWS - 1) / PR_SA_ROWS;
  int64_t ctas = a->batch * a->heads * groups, sms = p && p->ctx->num_sms > 0 ? p->ctx->num_sms : 132;
  int64_t want = ((a->dim == 128 ? 1 : 2) * sms + ctas - 1) / ctas;
  if (want > ntiles) want = ntiles;
  if (want < 1) want = 1;
  *tiles = (ntiles + want - 1) / want;
  *chunks = (ntiles + *tiles - 1) / *tiles;
}

static int64_t sampled_work(const tsr_producer *p, const tsr_sampled_args *a, int64_t *chunks, int64_t *tiles)
{
  int64_t groups = (a->samples + PR_SA_ROWS - 1) / PR_SA_ROWS, bh = a->batch * a->heads;
  sampled_chunks(p, a, chunks, tiles);
  /* part_o, part_ml, row_err: each a multiple of 16 bytes */
  return bh * groups * *chunks * PR_SA_ROWS * (3 * a->dim + 4) * 4 + (bh * a->samples * 2 * 4 + 15) / 16 * 16;
}

int64_t tsr_produce_sampled_work_bytes(tsr_producer *p, const tsr_sampled_args *a, tsr_error *err)
{
  tsr_sampled_args b;
  int64_t chunks, tiles;
  if (!a) return tsr_error_set(err, TSR_ERR_INVALID, "producer sampled: arguments are NULL"), 0;
  /* the working space is not there yet: check the rest with it standing in */
  b = *a;
  b.work = 16;
  if (check_sampled(&b, err)) return 0;
  if (!p) return tsr_error_set(err, TSR_ERR_INVALID, "producer sampled: producer is NULL"), 0;
  return sampled_work(p, a, &chunks, &tiles);
}

tsr_status tsr_produce_sampled(tsr_producer *p, const tsr_sampled_args *a, void *stream, tsr_error *err)
{
  pr_sampled_p k;
  tsr_status st;
  int64_t chunks, tiles, need, groups, bh;
  const tsr_cu *cu;
  void *args[1] = {&k};
  int bf = a && a->dtype == TSR_DT_BF16, big = a && a->dim == 128;
  if ((st = check_sampled(a, err))) return st;
  if (!p) return tsr_error_set(err, TSR_ERR_INVALID, "producer sampled: producer is NULL");
  if (a->stages == 3 && !sampled_fits(p, a->dim, 3))
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "producer sampled: 3 stages at dim %lld need %d bytes of shared "
                         "memory, the device has %lld", (long long)a->dim, (int)PR_SA_SMEM(a->dim, 3),
                         (long long)p->ctx->smem_optin);
  need = sampled_work(p, a, &chunks, &tiles);
  if (a->work_bytes < need)
    return tsr_error_set(err, TSR_ERR_INVALID, "producer sampled: work holds %lld bytes, %lld needed "
                         "(tsr_produce_sampled_work_bytes)", (long long)a->work_bytes, (long long)need);
  groups = (a->samples + PR_SA_ROWS - 1) / PR_SA_ROWS;
  bh = a->batch * a->heads;
  memset(&k, 0, sizeof k);
  k.q = a->q, k.k = a->k, k.v = a->v, k.rows = a->rows, k.planes = a->planes, k.out = a->out;
  k.part_o = a->work;
  k.part_ml = k.part_o + (uint64_t)(bh * groups * chunks * PR_SA_ROWS * 3 * a->dim * 4);
  k.row_err = k.part_ml + (uint64_t)(bh * groups * chunks * PR_SA_ROWS * 4 * 4);
  k.qsb = a->q_stride[0], k.qsh = a->q_stride[1], k.qss = a->q_stride[2];
  k.ksb = a->k_stride[0], k.ksh = a->k_stride[1], k.kss = a->k_stride[2];
  k.vsb = a->v_stride[0], k.vsh = a->v_stride[1], k.vss = a->v_stride[2];
  k.heads = (int)a->heads;
  k.tokens = (int)a->tokens;
  k.samples = (int)a->samples;
  k.words = (int)((a->tokens + 31) / 32);
  k.chunks = (int)chunks;
  k.chunk_tiles = (int)tiles;
  k.groups = (int)groups;
  k.d = (int)a->dim;
  k.stages = sampled_stages(p, a);
  k.scale_log2 = (float)(a->scale * 1.4426950408889634);
  if ((st = tsri_context_make_current(p->ctx, err))) return st;
  cu = tsri_context_cu(p->ctx);
  if ((st = tsri_cu_check(cu, cu->cuLaunchKernel(p->sampled[bf][big], (unsigned)chunks, (unsigned)groups,
                                                 (unsigned)bh, (unsigned)(128 * (big + 1)), 1, 1,
                                                 (unsigned)PR_SA_SMEM(a->dim, k.stages), (CUstream)stream,
                                                 args, NULL),
                          "cuLaunchKernel(producer sampled)", err)))
    return st;
  if ((st = tsri_cu_check(cu, cu->cuLaunchKernel(p->sampled_merge, (unsigned)a->samples, (unsigned)bh, 1,
                                                 (unsigned)a->dim, 1, 1, 0, (CUstream)stream, args, NULL),
                          "cuLaunchKernel(producer sampled merge)", err)))
    return st;
  return tsri_cu_check(cu, cu->cuLaunchKernel(p->sampled_sum, (unsigned)bh, 1, 1, 32, 1, 1, 0, (CUstream)stream,
                                              args, NULL),
                       "cuLaunchKernel(producer sampled sum)", err);
}

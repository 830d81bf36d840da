/*
 * gpu.c: GPU execution of a plan on a context (context.c: driver, bundle,
 * selection).  A variant's module is loaded on its first use.
 * tsr_gpu_upload chooses the plan's variant and copies the plan arrays to
 * the device once; tsr_gpu_launch fills the kernel parameter block and
 * enqueues the attention kernel and, when the plan splits rows, the merge
 * kernel on the caller's stream, with no host synchronisation, so launches
 * can be captured in a CUDA graph.
 *
 * Cost: upload is a handful of cuMemAlloc + synchronous copies of the plan
 * arrays (kilobytes to a few megabytes); a launch is host work of a few
 * microseconds (two TMA encodes per tensor for TMA variants) plus one or two
 * cuLaunchKernel calls.
 *
 * Lifetime: a plan's device copies hold a reference on the context
 * (tsri_context_retain), released when the plan drops them.
 *
 * Precision FP8 (issue 18): the plan's variant is an FP8 one (never a
 * native one in its place), its device copies own the quantized tensors
 * and scales (one allocation at upload, reused by every launch), and a
 * launch enqueues the module's two quantization kernels before the
 * attention kernel (templates/attn_sm90_fp8.cuh), so a request's time
 * includes the quantization.  The per-head fallback (docs/fp8.md) runs on
 * the device too: the stats kernel flags the heads the rule sends to the
 * native dtype, the quantization kernel's first CTA splits the tasks by
 * those flags, and the launch runs the FP8 kernel over one list and the
 * plan's native variant (same tile, dtype and head dim, loaded at upload)
 * over the other, on the resident grid, both reading their counts on the
 * device; then the merge.  With no head flagged the native launch is a
 * resident grid of CTAs that find no task.
 */
#include "context_impl.h"
#include "plan_impl.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(tsr_tmap) == sizeof(CUtensorMap), "tsr_tmap must match CUtensorMap");

typedef struct {
  tsr_context *ctx;
  long variant;   /* bundle index */
  CUdeviceptr tasks, tiles, members, membership, qblk, merges, part_o, part_m, part_l;
  CUdeviceptr counts; /* device planner: [0] tasks, [1] merges; 0 = host counts */
  /* dyn variants of host plans: [0] the task count, then the ints of
   * plan_impl.h's TSR_DYN_*; a bound plan uses the planner's counts.
   * Always owned by the plan. */
  CUdeviceptr dyn;
  int borrowed;       /* buffers belong to the caller (tsri_gpu_bind) */
  unsigned grid, merge_grid;
  /* FP8: one allocation (f8) holding q8, k8, vt8 and the scales at these
   * byte offsets; f8 = 0 for a native plan.  Always owned by the plan. */
  CUdeviceptr f8;
  size_t f8_q8, f8_k8, f8_vt8, f8_sq, f8_sk, f8_sv, f8_kmean, f8_vinv, f8_part, f8_count;
  int f8_parts, f8_part_tokens, f8_skp;
  /* FP8's per-head fallback: the flags and k_chan of _kvstats, the two task
   * lists of the split and their count blocks (TSR_DYN_INTS ints each: the
   * count, the dyn counters, the sentinel record), of f8_cap tasks each;
   * the native variant that runs the flagged heads' tasks and its grid.
   * f8_fallback 0 (tsri_gpu_fp8_fallback): every head in FP8, the plan's
   * own task list, no native launch. */
  size_t f8_kchan, f8_native, f8_tasks_f8, f8_tasks_nat, f8_cnt_f8, f8_cnt_nat;
  int64_t f8_cap;
  long nat_variant;
  unsigned nat_grid;
  int f8_fallback;
} gpu_plan;

/* Loads variant idx's module and functions on first use. */
static tsr_status load_variant(tsr_context *ctx, long idx, tsr_error *err)
{
  tsr_loaded_variant *m = &ctx->mods[idx];
  const tsr_bundle_entry *e = &ctx->bundle.items[idx];
  char mname[TSR_VARIANT_NAME_MAX + 8];
  void *data;
  size_t size;
  tsr_status st;
  if (m->mod) return TSR_OK;
  if (e->v.fp8 && (size_t)snprintf(mname, sizeof mname, "%s_kvstats", e->name) >= sizeof mname)
    return tsr_error_set(err, TSR_ERR_INVALID, "variant name '%s' is too long", e->name);
  if ((st = tsri_bundle_read_cubin(&ctx->bundle, (size_t)idx, ctx->arch, &data, &size, err))) return st;
  st = tsri_cu_check(&ctx->cu, ctx->cu.cuModuleLoadData(&m->mod, data), "cuModuleLoadData", err);
  free(data);
  if (st) {
    m->mod = NULL;
    return st;
  }
  snprintf(mname, sizeof mname, "%s_merge", e->name);
  if ((st = tsri_cu_check(&ctx->cu, ctx->cu.cuModuleGetFunction(&m->attn, m->mod, e->name),
                         "cuModuleGetFunction", err)) ||
      (st = tsri_cu_check(&ctx->cu, ctx->cu.cuModuleGetFunction(&m->merge, m->mod, mname),
                         "cuModuleGetFunction", err)) ||
      (st = tsri_cu_check(&ctx->cu,
                         ctx->cu.cuFuncSetAttribute(m->attn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                    (int)e->smem),
                         "cuFuncSetAttribute", err)) ||
      (st = tsri_cu_check(&ctx->cu,
                         ctx->cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&m->occupancy, m->attn,
                                                                             e->threads, (size_t)e->smem),
                         "cuOccupancyMaxActiveBlocksPerMultiprocessor", err))) {
    ctx->cu.cuModuleUnload(m->mod);
    memset(m, 0, sizeof *m);
    return st;
  }
  if (m->occupancy < 1) m->occupancy = 1;
  if (e->v.fp8) { /* the quantization kernels of the module */
    snprintf(mname, sizeof mname, "%s_kvstats", e->name);
    st = tsri_cu_check(&ctx->cu, ctx->cu.cuModuleGetFunction(&m->kvstats, m->mod, mname), "cuModuleGetFunction",
                      err);
    snprintf(mname, sizeof mname, "%s_quant", e->name);
    if (!st)
      st = tsri_cu_check(&ctx->cu, ctx->cu.cuModuleGetFunction(&m->quant, m->mod, mname), "cuModuleGetFunction",
                        err);
    if (st) {
      ctx->cu.cuModuleUnload(m->mod);
      memset(m, 0, sizeof *m);
      return st;
    }
  }
  return TSR_OK;
}

static void gpu_plan_free(void *p)
{
  gpu_plan *g = p;
  tsr_context *ctx;
  if (!g) return;
  ctx = g->ctx;
  if (g->f8 && ctx->cu.cuCtxSetCurrent(ctx->pctx) == CUDA_SUCCESS) ctx->cu.cuMemFree(g->f8);
  if (g->dyn && ctx->cu.cuCtxSetCurrent(ctx->pctx) == CUDA_SUCCESS) ctx->cu.cuMemFree(g->dyn);
  if (!g->borrowed && ctx->cu.cuCtxSetCurrent(ctx->pctx) == CUDA_SUCCESS) {
    CUdeviceptr *ptrs[] = { &g->tasks, &g->tiles, &g->members, &g->membership, &g->qblk,
                            &g->merges, &g->part_o, &g->part_m, &g->part_l };
    size_t i;
    for (i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
      if (*ptrs[i]) ctx->cu.cuMemFree(*ptrs[i]);
  }
  free(g);
  tsri_context_release(ctx);
}

static tsr_status upload_array(tsr_context *ctx, CUdeviceptr *dst, const void *src, size_t bytes,
                               const char *what, tsr_error *err)
{
  tsr_status st;
  *dst = 0;
  if (bytes == 0) return TSR_OK;
  st = tsri_cu_check(&ctx->cu, ctx->cu.cuMemAlloc(dst, bytes), "cuMemAlloc", err);
  if (st) {
    *dst = 0;
    return tsr_error_set(err, st, "cannot upload plan %s (%zu bytes)", what, bytes);
  }
  if (src) return tsri_cu_check(&ctx->cu, ctx->cu.cuMemcpyHtoD(*dst, src, bytes), "cuMemcpyHtoD", err);
  return TSR_OK;
}

/* Fills pl->variant (or checks the one named there); membership: the plan
 * may carry partial tiles. */
static tsr_status choose_variant(tsr_context *ctx, tsr_plan *pl, int membership, long *idx,
                                 tsr_error *err)
{
  tsr_variant_need need = {0}; /* native precision unless set */
  const char *dt = tsri_variant_dtype_name(pl->problem.dtype);
  need.dtype = pl->problem.dtype;
  need.head_dim = (int)pl->problem.head_dim;
  need.bm = pl->tile_m;
  need.bn = pl->tile_n;
  need.membership = membership;
  /* Never a silent native run for an FP8 request (issue 18): only FP8
   * variants serve an FP8 plan (tsri_variant_serves). */
  need.fp8 = pl->opts.precision == TSR_PREC_FP8;
  /* Gather tiles (plan_layout.h) only for kg variants, and kg only for them. */
  need.gather = pl->mapping == TSR_MAP_GATHER;
  if (!dt)
    return tsr_error_set(err, TSR_ERR_DTYPE, "GPU plans need bf16 or fp16 data, got %s",
                         tsr_dtype_name(pl->problem.dtype));
  if (pl->variant[0]) {
    long i = tsri_bundle_find(&ctx->bundle, pl->variant);
    int a = tsri_arch_index(ctx->arch);
    if (i < 0 || !(ctx->bundle.items[i].targets & (1u << a)))
      return tsr_error_set(err, TSR_ERR_NO_VARIANT, "kernel variant '%s' is not in the %s bundle '%s'",
                           pl->variant, ctx->arch, ctx->bundle.dir);
    if (!tsri_context_serves(ctx, &ctx->bundle.items[i], &need))
      return tsr_error_set(err, TSR_ERR_NO_VARIANT,
                           "kernel variant '%s' does not fit the plan (%s%s, head dim %d, tile %dx%d%s%s)",
                           pl->variant, dt, need.fp8 ? ", precision fp8" : "", need.head_dim, need.bm,
                           need.bn, need.membership ? ", membership masks" : "",
                           need.gather ? ", gather tiles" : "");
    *idx = i;
    return TSR_OK;
  }
  *idx = tsri_bundle_pick(&ctx->bundle, ctx->arch, &need, ctx->smem_optin);
  if (*idx < 0)
    return tsr_error_set(err, TSR_ERR_NO_VARIANT,
                         "no kernel variant for %shead dim %d, %s, tile %dx%d%s%s on %s%s",
                         need.fp8 ? "precision fp8, " : "", need.head_dim, dt, need.bm, need.bn,
                         need.membership ? " with membership masks" : "",
                         need.gather ? " with gather tiles (kg)" : "", ctx->arch,
                         need.fp8 ? " (FP8 variants: the sm90 family on sm_90a, catalog tiles only)" : "");
  snprintf(pl->variant, sizeof pl->variant, "%s", ctx->bundle.items[*idx].name);
  snprintf(pl->summary.variant, sizeof pl->summary.variant, "%s", pl->variant);
  return TSR_OK;
}

/* FP8 plans: the quantized copies and scales of attn_sm90_fp8.cuh, laid out
 * in one allocation (256-byte aligned pieces), and the split of _kvstats'
 * token reduction into parts (about four CTAs a multiprocessor in all).
 * The parts' counters start at zero here; the kernel re-arms them.  cap:
 * the most tasks a launch runs (the fallback's task lists). */
static tsr_status fp8_alloc(tsr_context *ctx, const tsr_plan *pl, gpu_plan *g, int64_t cap, tsr_error *err)
{
  const tsr_problem *p = &pl->problem;
  const int64_t B = p->batch, Hq = p->heads_q, Hkv = p->heads_kv, Sq = p->seq_q, Sk = p->seq_k,
                D = p->head_dim, nqc = (Sq + 63) / 64, nkc = (Sk + 63) / 64, skp = (Sk + 15) / 16 * 16;
  int64_t parts = (4LL * ctx->num_sms + B * Hkv - 1) / (B * Hkv), ptok, off = 0;
  tsr_status st;
  if (parts > (Sk + 255) / 256) parts = (Sk + 255) / 256; /* at least 256 tokens a part */
  if (parts < 1) parts = 1;
  ptok = (Sk + parts - 1) / parts;
  parts = (Sk + ptok - 1) / ptok; /* no empty part */
  if (B * Hq * nqc + B * Hkv * nkc >= INT_MAX || skp > INT_MAX || ptok > INT_MAX || cap > INT_MAX)
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "FP8 run: the problem is too large to quantize (%lld chunks)",
                         (long long)(B * Hq * nqc + B * Hkv * nkc));
#define TSR_F8_PIECE(field, bytes) (g->field = (size_t)off, off += ((int64_t)(bytes) + 255) / 256 * 256)
  TSR_F8_PIECE(f8_q8, B * Hq * Sq * D);
  TSR_F8_PIECE(f8_k8, B * Hkv * Sk * D);
  TSR_F8_PIECE(f8_vt8, B * Hkv * D * skp);
  TSR_F8_PIECE(f8_sq, B * Hq * nqc * 4);
  TSR_F8_PIECE(f8_sk, B * Hkv * nkc * 4);
  TSR_F8_PIECE(f8_sv, B * Hkv * D * 4);
  TSR_F8_PIECE(f8_kmean, B * Hkv * D * 4);
  TSR_F8_PIECE(f8_vinv, B * Hkv * D * 4);
  TSR_F8_PIECE(f8_part, B * Hkv * parts * 4 * D * 4);
  TSR_F8_PIECE(f8_count, B * Hkv * 4);
  TSR_F8_PIECE(f8_kchan, B * Hkv * 4);
  TSR_F8_PIECE(f8_native, B * Hq);
  TSR_F8_PIECE(f8_tasks_f8, cap * (int64_t)sizeof(tsr_task_rec));
  TSR_F8_PIECE(f8_tasks_nat, cap * (int64_t)sizeof(tsr_task_rec));
  TSR_F8_PIECE(f8_cnt_f8, TSR_DYN_INTS * 4);
  TSR_F8_PIECE(f8_cnt_nat, TSR_DYN_INTS * 4);
#undef TSR_F8_PIECE
  g->f8_parts = (int)parts;
  g->f8_part_tokens = (int)ptok;
  g->f8_skp = (int)skp;
  g->f8_cap = cap;
  g->f8_fallback = 1;
  if ((st = upload_array(ctx, &g->f8, NULL, (size_t)off, "FP8 tensors and scales", err))) return st;
  {
    /* the count blocks as a dyn launch wants them: counters zero, the
     * sentinel record's n_members -1 (attn_sm90.cuh) */
    int32_t cnt[TSR_DYN_INTS] = { 0 };
    cnt[TSR_DYN_SENTINEL + offsetof(tsr_task_rec, n_members) / 4] = -1;
    if ((st = tsri_cu_check(&ctx->cu, ctx->cu.cuMemcpyHtoD(g->f8 + g->f8_cnt_f8, cnt, sizeof cnt),
                           "cuMemcpyHtoD(FP8 task counts)", err)) ||
        (st = tsri_cu_check(&ctx->cu, ctx->cu.cuMemcpyHtoD(g->f8 + g->f8_cnt_nat, cnt, sizeof cnt),
                           "cuMemcpyHtoD(FP8 task counts)", err)))
      return st;
  }
  return tsri_cu_check(&ctx->cu, ctx->cu.cuMemsetD8(g->f8 + g->f8_count, 0, (size_t)(B * Hkv * 4)),
                      "cuMemsetD8(FP8 counters)", err);
}

/* FP8 plans: the native variant that runs the fallen-back heads' tasks
 * (the plan's tile, dtype and head dim; masking as the FP8 one), loaded
 * now, and its resident grid. */
static tsr_status fp8_native_variant(tsr_context *ctx, const tsr_plan *pl, int membership, gpu_plan *g,
                                     tsr_error *err)
{
  tsr_variant_need need = {0}; /* native precision */
  tsr_status st;
  need.dtype = pl->problem.dtype;
  need.head_dim = (int)pl->problem.head_dim;
  need.bm = pl->tile_m;
  need.bn = pl->tile_n;
  need.membership = membership;
  g->nat_variant = tsri_bundle_pick(&ctx->bundle, ctx->arch, &need, ctx->smem_optin);
  if (g->nat_variant < 0)
    return tsr_error_set(err, TSR_ERR_NO_VARIANT,
                         "no native kernel variant for the FP8 fallback heads: head dim %d, %s, tile %dx%d%s on %s",
                         need.head_dim, tsri_variant_dtype_name(need.dtype), need.bm, need.bn,
                         membership ? " with membership masks" : "", ctx->arch);
  if ((st = load_variant(ctx, g->nat_variant, err))) return st;
  g->nat_grid = (unsigned)(ctx->num_sms * ctx->mods[g->nat_variant].occupancy);
  return TSR_OK;
}

tsr_status tsr_gpu_upload(tsr_context *ctx, tsr_plan *pl, tsr_error *err)
{
  gpu_plan *g;
  long idx = -1;
  tsr_status st;
  const tsr_bundle_entry *e;
  tsr_loaded_variant *m;
  size_t slots;

  if (!ctx || !pl) return tsr_error_set(err, TSR_ERR_INVALID, "tsr_gpu_upload: null context or plan");
  if (pl->gpu) {
    if (pl->gpu_free == gpu_plan_free && ((gpu_plan *)pl->gpu)->ctx == ctx) return TSR_OK;
    if (pl->gpu_free) pl->gpu_free(pl->gpu);
    pl->gpu = NULL;
    pl->gpu_free = NULL;
  }
  if ((st = tsri_context_make_current(ctx, err))) return st;
  if ((st = choose_variant(ctx, pl, pl->n_membership > 0, &idx, err))) return st;
  if ((st = load_variant(ctx, idx, err))) return st;
  e = &ctx->bundle.items[idx];
  m = &ctx->mods[idx];

  g = calloc(1, sizeof *g);
  if (!g) return tsr_error_set(err, TSR_ERR_NOMEM, "cannot upload plan: out of memory");
  g->ctx = ctx;
  tsri_context_retain(ctx);
  g->variant = idx;
  slots = (size_t)pl->n_slots;
  if ((st = upload_array(ctx, &g->tasks, pl->tasks, (size_t)pl->n_tasks * sizeof *pl->tasks, "tasks", err)) ||
      (st = upload_array(ctx, &g->tiles, pl->tiles, (size_t)pl->n_tiles * sizeof *pl->tiles, "tiles", err)) ||
      (st = upload_array(ctx, &g->members, pl->members, (size_t)pl->n_members * sizeof *pl->members,
                         "members", err)) ||
      (st = upload_array(ctx, &g->membership, pl->membership,
                         (size_t)pl->n_membership * sizeof *pl->membership, "membership", err)) ||
      (st = upload_array(ctx, &g->qblk, pl->qblk, (size_t)pl->n_qblk * sizeof *pl->qblk, "qblk", err)) ||
      (st = upload_array(ctx, &g->merges, pl->merges, (size_t)pl->n_merges * sizeof *pl->merges,
                         "merges", err)) ||
      (st = upload_array(ctx, &g->part_o, NULL, slots * (size_t)e->v.bm * (size_t)e->v.head_dim * 4,
                         "partial outputs", err)) ||
      (st = upload_array(ctx, &g->part_m, NULL, slots * (size_t)e->v.bm * 4, "partial maxima", err)) ||
      (st = upload_array(ctx, &g->part_l, NULL, slots * (size_t)e->v.bm * 4, "partial sums", err)) ||
      (e->v.fp8 && ((st = fp8_alloc(ctx, pl, g, pl->n_tasks, err)) ||
                    (st = fp8_native_variant(ctx, pl, pl->n_membership > 0, g, err))))) {
    gpu_plan_free(g);
    return st;
  }
  if (e->v.layout == TSR_TL_DYN) {
    int32_t dyn[TSR_DYN_INTS] = { 0 };
    dyn[0] = (int32_t)pl->n_tasks;
    dyn[TSR_DYN_SENTINEL + offsetof(tsr_task_rec, n_members) / 4] = -1; /* "none left" */
    if ((st = upload_array(ctx, &g->dyn, dyn, sizeof dyn, "task counter", err))) {
      gpu_plan_free(g);
      return st;
    }
  }
  {
    /* a CTA of a g3 BM-64 variant runs two tasks; pers and dyn: resident CTAs */
    int64_t tpc = tsri_variant_tasks_per_cta(&e->v), ctas = (pl->n_tasks + tpc - 1) / tpc;
    int64_t resident = (int64_t)ctx->num_sms * m->occupancy;
    g->grid = (unsigned)(e->v.layout != TSR_TL_FLAT && ctas > resident ? resident : ctas);
  }
  g->merge_grid = (unsigned)(pl->n_merges < 8LL * ctx->num_sms ? pl->n_merges : 8LL * ctx->num_sms);
  pl->gpu = g;
  pl->gpu_free = gpu_plan_free;
  return TSR_OK;
}

/* A 4-D tiled tensor map over [b][h][s][d] with the box {box_d, rows, 1, 1};
 * see plan_layout.h for the coordinate convention. */
static tsr_status encode_tmap(tsr_context *ctx, tsr_tmap *map, uint64_t ptr, const int64_t *stride,
                              int64_t b, int64_t h, int64_t s, int64_t d, int box_d, int rows,
                              CUtensorMapDataType dt, const char *what, tsr_error *err)
{
  /* elements of 2 bytes, or 1 for the FP8 copies (UINT8: TMA moves bytes) */
  const int es = dt == CU_TENSOR_MAP_DATA_TYPE_UINT8 ? 1 : 2;
  cuuint64_t dims[4] = { (cuuint64_t)d, (cuuint64_t)s, (cuuint64_t)h, (cuuint64_t)b };
  cuuint64_t strides[3] = { (cuuint64_t)stride[2] * es, (cuuint64_t)stride[1] * es, (cuuint64_t)stride[0] * es };
  cuuint32_t box[4] = { (cuuint32_t)box_d, (cuuint32_t)rows, 1, 1 };
  cuuint32_t estr[4] = { 1, 1, 1, 1 };
  CUtensorMapSwizzle sw = box_d * es == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                          : box_d * es == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                             : CU_TENSOR_MAP_SWIZZLE_32B;
  char what2[64];
  /* A broadcast head or batch (stride 0) is legal for plain loads but TMA
   * strides must be positive multiples of 16 bytes. */
  if (b == 1) strides[2] = strides[1] * (cuuint64_t)h;
  if (h == 1 && strides[1] == 0) strides[1] = strides[0] * (cuuint64_t)s;
  snprintf(what2, sizeof what2, "cuTensorMapEncodeTiled(%s)", what);
  return tsri_cu_check(&ctx->cu,
                      ctx->cu.cuTensorMapEncodeTiled((CUtensorMap *)map, dt, 4, (void *)(uintptr_t)ptr,
                                                     dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                     sw, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                      what2, err);
}

/* The native-precision variant v's maps of q, k and v: boxes BM rows tall
 * for q and BN for k and v, or BN / 2 for a key-gather variant, whose key
 * tiles are two half tiles loaded apart (plan_layout.h). */
static tsr_status encode_qkv_maps(tsr_context *ctx, const tsr_variant *v, const tsr_problem *pr,
                                  const tsr_gpu_tensors *t, tsr_kernel_params *p, tsr_error *err)
{
  const CUtensorMapDataType dt =
      v->dtype == TSR_DT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const int krows = v->gather ? v->bn / 2 : v->bn;
  tsr_status st;
  if ((st = encode_tmap(ctx, &p->tma_q, t->q, t->q_stride, pr->batch, pr->heads_q, pr->seq_q, pr->head_dim,
                        v->tma_box, v->bm, dt, "q", err)) ||
      (st = encode_tmap(ctx, &p->tma_k, t->k, t->k_stride, pr->batch, pr->heads_kv, pr->seq_k, pr->head_dim,
                        v->tma_box, krows, dt, "k", err)))
    return st;
  return encode_tmap(ctx, &p->tma_v, t->v, t->v_stride, pr->batch, pr->heads_kv, pr->seq_k, pr->head_dim,
                     v->tma_box, krows, dt, "v", err);
}

static tsr_status check_tensor(const char *name, uint64_t ptr, const int64_t *stride, tsr_error *err)
{
  int i;
  if (!ptr) return tsr_error_set(err, TSR_ERR_INVALID, "GPU tensor %s: null device pointer", name);
  if (ptr % 16)
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "GPU tensor %s: address must be 16-byte aligned", name);
  if (stride[3] != 1)
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED,
                         "GPU tensor %s: head-dim stride must be 1, got %lld", name, (long long)stride[3]);
  for (i = 0; i < 3; i++)
    if (stride[i] < 0 || stride[i] % 8)
      return tsr_error_set(err, TSR_ERR_UNSUPPORTED,
                           "GPU tensor %s: stride %d must be a non-negative multiple of 8 elements, got %lld",
                           name, i, (long long)stride[i]);
  return TSR_OK;
}

/* FP8: the two quantization kernels on the stream, then the attention
 * kernel's tensor maps over the int8 / e4m3 copies and its scale pointers in
 * p->q, p->k, p->v (attn_sm90_fp8.cuh, "Buffers").  With the fallback on,
 * the quantization kernel also splits the tasks, and p's tasks and count
 * become the FP8 list's (p keeps the plan's on entry, bound plans' device
 * count included). */
static tsr_status fp8_launch(tsr_context *ctx, const tsr_plan *pl, const gpu_plan *g, const tsr_loaded_variant *m,
                             const tsr_gpu_tensors *t, tsr_kernel_params *p, CUstream s, tsr_error *err)
{
  const tsr_problem *pr = &pl->problem;
  const tsr_bundle_entry *e = &ctx->bundle.items[g->variant];
  CUdeviceptr q8 = g->f8 + g->f8_q8, k8 = g->f8 + g->f8_k8, vt8 = g->f8 + g->f8_vt8, sq = g->f8 + g->f8_sq,
              sk = g->f8 + g->f8_sk, sv = g->f8 + g->f8_sv, kmean = g->f8 + g->f8_kmean,
              vinv = g->f8 + g->f8_vinv, part = g->f8 + g->f8_part, count = g->f8 + g->f8_count;
  int hq = (int)pr->heads_q, hkv = (int)pr->heads_kv, sql = (int)pr->seq_q, skl = (int)pr->seq_k;
  int skp = g->f8_skp, ptok = g->f8_part_tokens;
  int64_t nqc = (pr->seq_q + 63) / 64, nkc = (pr->seq_k + 63) / 64, D = pr->head_dim;
  int q_ctas = (int)(pr->batch * hq * nqc);
  /* _quant's CTA 0 splits the tasks for the fallback */
  unsigned kv_grid = (unsigned)(pr->batch * hkv), quant_grid = (unsigned)(1 + q_ctas + pr->batch * hkv * nkc);
  int64_t qs[3] = { t->q_stride[0], t->q_stride[1], t->q_stride[2] };
  int64_t ks[3] = { t->k_stride[0], t->k_stride[1], t->k_stride[2] };
  int64_t vs[3] = { t->v_stride[0], t->v_stride[1], t->v_stride[2] };
  /* the one-byte copies' element strides (b, h, s, d): q8/k8 row-major, vt8 [D][skp] a head */
  int64_t q8s[4] = { hq * pr->seq_q * D, pr->seq_q * D, D, 1 }, k8s[4] = { hkv * pr->seq_k * D, pr->seq_k * D, D, 1 };
  int64_t v8s[4] = { hkv * D * skp, D * skp, skp, 1 };
  CUdeviceptr kchan = g->f8 + g->f8_kchan, native = g->f8 + g->f8_native, tf8 = g->f8 + g->f8_tasks_f8,
              tnat = g->f8 + g->f8_tasks_nat, cf8 = g->f8 + g->f8_cnt_f8, cnat = g->f8 + g->f8_cnt_nat;
  /* fallback off: no split (a NULL task list), the plan's tasks */
  CUdeviceptr tasks = g->f8_fallback ? (CUdeviceptr)(uintptr_t)p->tasks : 0;
  CUdeviceptr ntd = (CUdeviceptr)(uintptr_t)p->n_tasks_dev;
  int fallback = g->f8_fallback, n_tasks = p->n_tasks, cap = (int)g->f8_cap;
  void *a1[] = { (void *)&t->k, (void *)&t->v, &ks[0], &ks[1], &ks[2], &vs[0], &vs[1], &vs[2], &hkv, &skl, &ptok,
                 &part, &count, &kmean, &sv, &vinv, &hq, &fallback, &kchan, &native };
  void *a2[] = { (void *)&t->q, (void *)&t->k, (void *)&t->v, &qs[0], &qs[1], &qs[2], &ks[0], &ks[1], &ks[2],
                 &vs[0], &vs[1], &vs[2], &hq, &hkv, &sql, &skl, &skp, &q_ctas, &kmean, &vinv, &q8, &k8, &vt8,
                 &sq, &sk, &tasks, &n_tasks, &ntd, &cap, &native, &tf8, &tnat, &cf8, &cnat };
  tsr_status st;
  if ((st = tsri_cu_check(&ctx->cu,
                         ctx->cu.cuLaunchKernel(m->kvstats, (unsigned)g->f8_parts, kv_grid, 1, 256, 1, 1, 0, s, a1,
                                                NULL),
                         "cuLaunchKernel(FP8 kvstats)", err)) ||
      (st = tsri_cu_check(&ctx->cu, ctx->cu.cuLaunchKernel(m->quant, quant_grid, 1, 1, 256, 1, 1, 0, s, a2, NULL),
                         "cuLaunchKernel(FP8 quant)", err)) ||
      (st = encode_tmap(ctx, &p->tma_q, q8, q8s, pr->batch, hq, pr->seq_q, D, (int)D, e->v.bm,
                        CU_TENSOR_MAP_DATA_TYPE_UINT8, "q8", err)) ||
      (st = encode_tmap(ctx, &p->tma_k, k8, k8s, pr->batch, hkv, pr->seq_k, D, (int)D, e->v.bn,
                        CU_TENSOR_MAP_DATA_TYPE_UINT8, "k8", err)) ||
      (st = encode_tmap(ctx, &p->tma_v, vt8, v8s, pr->batch, hkv, D, skp, e->v.bn, (int)D,
                        CU_TENSOR_MAP_DATA_TYPE_UINT8, "vt8", err)))
    return st;
  p->q = (const void *)(uintptr_t)sq;
  p->k = (const void *)(uintptr_t)sk;
  p->v = (const void *)(uintptr_t)sv;
  if (g->f8_fallback) {
    p->tasks = (const tsr_task_rec *)(uintptr_t)tf8;
    p->n_tasks_dev = (const tsr_i32 *)(uintptr_t)cf8;
  }
  return TSR_OK;
}

/* The native variant's parameters over the fallen-back heads' tasks: p as
 * the plan fills it (native tensors), its tensor maps, the native list and
 * its count. */
static tsr_status fp8_native_params(tsr_context *ctx, const tsr_plan *pl, const gpu_plan *g, const tsr_gpu_tensors *t,
                                    tsr_kernel_params *p, tsr_error *err)
{
  const tsr_bundle_entry *e = &ctx->bundle.items[g->nat_variant];
  const tsr_problem *pr = &pl->problem;
  tsr_status st;
  p->tasks = (const tsr_task_rec *)(uintptr_t)(g->f8 + g->f8_tasks_nat);
  p->n_tasks_dev = (const tsr_i32 *)(uintptr_t)(g->f8 + g->f8_cnt_nat);
  if (e->v.tma_box > 0 && (st = encode_qkv_maps(ctx, &e->v, pr, t, p, err))) return st;
  return TSR_OK;
}

tsr_status tsr_gpu_launch(tsr_context *ctx, const tsr_plan *pl, const tsr_gpu_tensors *t, void *stream,
                          tsr_error *err)
{
  const gpu_plan *g;
  const tsr_bundle_entry *e;
  const tsr_loaded_variant *m;
  tsr_kernel_params p, pn;
  tsr_status st;
  double scale;
  void *args[1], *nargs[1];
  CUstream s = (CUstream)stream;
  int fallback;

  if (!ctx || !pl || !t) return tsr_error_set(err, TSR_ERR_INVALID, "tsr_gpu_launch: null argument");
  g = pl->gpu;
  if (!g || pl->gpu_free != gpu_plan_free || g->ctx != ctx)
    return tsr_error_set(err, TSR_ERR_INVALID, "plan was not uploaded to this context (call tsr_gpu_upload)");
  e = &ctx->bundle.items[g->variant];
  m = &ctx->mods[g->variant];
  if ((st = check_tensor("q", t->q, t->q_stride, err)) || (st = check_tensor("k", t->k, t->k_stride, err)) ||
      (st = check_tensor("v", t->v, t->v_stride, err)) || (st = check_tensor("o", t->o, t->o_stride, err)))
    return st;
  if ((st = tsri_context_make_current(ctx, err))) return st;

  memset(&p, 0, sizeof p);
  p.q = (const void *)(uintptr_t)t->q;
  p.k = (const void *)(uintptr_t)t->k;
  p.v = (const void *)(uintptr_t)t->v;
  p.o = (void *)(uintptr_t)t->o;
  p.lse = (float *)(uintptr_t)t->lse;
  memcpy(p.q_stride, t->q_stride, sizeof p.q_stride);
  memcpy(p.k_stride, t->k_stride, sizeof p.k_stride);
  memcpy(p.v_stride, t->v_stride, sizeof p.v_stride);
  memcpy(p.o_stride, t->o_stride, sizeof p.o_stride);
  p.batch = (tsr_i32)pl->problem.batch;
  p.heads_q = (tsr_i32)pl->problem.heads_q;
  p.heads_kv = (tsr_i32)pl->problem.heads_kv;
  p.seq_q = (tsr_i32)pl->problem.seq_q;
  p.seq_k = (tsr_i32)pl->problem.seq_k;
  p.head_dim = (tsr_i32)pl->problem.head_dim;
  scale = pl->problem.scale != 0 ? pl->problem.scale : 1.0 / sqrt((double)pl->problem.head_dim);
  /* The kernels take row maxima on raw scores and scale them afterwards. */
  if (!(scale > 0))
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "GPU kernels need a positive scale, got %g", scale);
  p.scale_log2 = (float)(scale * 1.4426950408889634);
  p.n_tasks = (tsr_i32)pl->n_tasks;
  p.n_merges = (tsr_i32)pl->n_merges;
  p.n_q_tiles = (tsr_i32)pl->n_q_tiles;
  p.tasks = (const tsr_task_rec *)(uintptr_t)g->tasks;
  p.tiles = (const tsr_tile_rec *)(uintptr_t)g->tiles;
  p.members = (const tsr_member_rec *)(uintptr_t)g->members;
  p.membership = (const tsr_u32 *)(uintptr_t)g->membership;
  p.qblk = (const tsr_i32 *)(uintptr_t)g->qblk;
  p.merges = (const tsr_merge_rec *)(uintptr_t)g->merges;
  p.part_o = (float *)(uintptr_t)g->part_o;
  p.part_m = (float *)(uintptr_t)g->part_m;
  p.part_l = (float *)(uintptr_t)g->part_l;
  if (g->counts) {
    p.n_tasks_dev = (const tsr_i32 *)(uintptr_t)g->counts;
    p.n_merges_dev = (const tsr_i32 *)(uintptr_t)g->counts + 1;
  } else if (g->dyn) {
    p.n_tasks_dev = (const tsr_i32 *)(uintptr_t)g->dyn; /* the count, then the dyn counters */
  }

  fallback = e->v.fp8 && g->f8_fallback;
  if (fallback) {
    pn = p;
    if ((st = fp8_native_params(ctx, pl, g, t, &pn, err))) return st;
  }
  if (e->v.fp8) {
    if ((st = fp8_launch(ctx, pl, g, m, t, &p, s, err))) return st;
  } else if (e->v.tma_box > 0) {
    if ((st = encode_qkv_maps(ctx, &e->v, &pl->problem, t, &p, err))) return st;
  }

  args[0] = &p;
  if (g->grid > 0 &&
      (st = tsri_cu_check(&ctx->cu,
                         ctx->cu.cuLaunchKernel(m->attn, g->grid, 1, 1, (unsigned)e->threads, 1, 1,
                                                (unsigned)e->smem, s, args, NULL),
                         "cuLaunchKernel(attention)", err)))
    return st;
  if (fallback) { /* the flagged heads' tasks in the native dtype, before the merge */
    const tsr_bundle_entry *en = &ctx->bundle.items[g->nat_variant];
    nargs[0] = &pn;
    if ((st = tsri_cu_check(&ctx->cu,
                           ctx->cu.cuLaunchKernel(ctx->mods[g->nat_variant].attn, g->nat_grid, 1, 1,
                                                  (unsigned)en->threads, 1, 1, (unsigned)en->smem, s, nargs, NULL),
                           "cuLaunchKernel(FP8 fallback, native attention)", err)))
      return st;
  }
  if (g->merge_grid > 0 &&
      (st = tsri_cu_check(&ctx->cu,
                         ctx->cu.cuLaunchKernel(m->merge, g->merge_grid, 1, 1, 256, 1, 1, 0, s, args, NULL),
                         "cuLaunchKernel(merge)", err)))
    return st;
  return TSR_OK;
}

int tsri_gpu_fp8_buffers(const tsr_plan *pl, tsr_gpu_fp8_view *out)
{
  const gpu_plan *g = pl ? pl->gpu : NULL;
  memset(out, 0, sizeof *out);
  if (!g || pl->gpu_free != gpu_plan_free || !g->f8) return 0;
  out->q8 = g->f8 + g->f8_q8;
  out->k8 = g->f8 + g->f8_k8;
  out->vt8 = g->f8 + g->f8_vt8;
  out->sq = g->f8 + g->f8_sq;
  out->sk = g->f8 + g->f8_sk;
  out->sv = g->f8 + g->f8_sv;
  out->kchan = g->f8 + g->f8_kchan;
  out->native = g->f8 + g->f8_native;
  out->skp = g->f8_skp;
  return 1;
}

int tsri_gpu_fp8_fallback(tsr_plan *pl, int on)
{
  gpu_plan *g = pl ? pl->gpu : NULL;
  if (!g || pl->gpu_free != gpu_plan_free || !g->f8) return 0;
  g->f8_fallback = on != 0;
  return 1;
}

tsr_status tsri_gpu_bind(tsr_context *ctx, tsr_plan *pl, const tsr_gpu_binding *b, tsr_error *err)
{
  gpu_plan *g;
  long idx = -1;
  tsr_status st;
  const tsr_loaded_variant *m;

  if (!ctx || !pl || !b || !b->counts)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsri_gpu_bind: null context, plan, binding or counts");
  if (pl->gpu) return tsr_error_set(err, TSR_ERR_INVALID, "tsri_gpu_bind: plan already has device copies");
  if ((st = tsri_context_make_current(ctx, err))) return st;
  if ((st = choose_variant(ctx, pl, b->masking, &idx, err))) return st;
  if ((st = load_variant(ctx, idx, err))) return st;
  m = &ctx->mods[idx];
  g = calloc(1, sizeof *g);
  if (!g) return tsr_error_set(err, TSR_ERR_NOMEM, "cannot bind device plan: out of memory");
  g->ctx = ctx;
  tsri_context_retain(ctx);
  g->variant = idx;
  g->borrowed = 1;
  g->tasks = b->tasks;
  g->tiles = b->tiles;
  g->members = b->members;
  g->membership = b->membership;
  g->qblk = b->qblk;
  g->merges = b->merges;
  g->part_o = b->part_o;
  g->part_m = b->part_m;
  g->part_l = b->part_l;
  g->counts = b->counts;
  /* The count is known on the device only: a persistent grid of resident
   * CTAs (flat variants run the same strided loop) and merge CTAs; but a
   * flat variant whose task count has a known bound (row tasks; the
   * capacity of split tasks) gets one CTA a task, as the host-planned
   * launch of the same plan: the hardware then balances the tasks, where a
   * resident grid's static stride does not (STA on Wan2.1-1.3B: 4.33 ms
   * device-planned vs 3.84 ms host-planned, notes/varplan.md; split plans
   * of 64x64 random masks 8-11% on the H100, notes/gpuplan.md).  Extra
   * CTAs exit at once. */
  g->grid = (unsigned)((int64_t)ctx->num_sms * m->occupancy);
  if (b->max_tasks > 0 && b->max_tasks <= INT32_MAX && ctx->bundle.items[idx].v.layout == TSR_TL_FLAT) {
    int64_t tpc = tsri_variant_tasks_per_cta(&ctx->bundle.items[idx].v);
    g->grid = (unsigned)((b->max_tasks + tpc - 1) / tpc);
  }
  g->merge_grid = b->may_merge ? (unsigned)(8 * ctx->num_sms) : 0;
  if (ctx->bundle.items[idx].v.fp8 &&
      ((st = fp8_alloc(ctx, pl, g, b->cap_tasks, err)) || (st = fp8_native_variant(ctx, pl, b->masking, g, err)))) {
    gpu_plan_free(g);
    return st;
  }
  pl->gpu = g;
  pl->gpu_free = gpu_plan_free;
  return TSR_OK;
}

tsr_status tsri_gpu_load_planner(tsr_context *ctx, CUmodule *out, tsr_error *err)
{
  void *data;
  size_t size;
  tsr_status st;
  *out = NULL;
  if ((st = tsri_context_make_current(ctx, err)) ||
      (st = tsri_bundle_read_planner(&ctx->bundle, ctx->arch, &data, &size, err)))
    return st;
  st = tsri_cu_check(&ctx->cu, ctx->cu.cuModuleLoadData(out, data), "cuModuleLoadData(planner)", err);
  free(data);
  if (st) *out = NULL;
  return st;
}

/* ---- synchronous convenience for tools and tests ------------------------- */

static void layout_strides(tsr_layout layout, int64_t H, int64_t S, int64_t D, int64_t *st)
{
  if (layout == TSR_LAYOUT_BSHD) {
    st[0] = S * H * D; st[1] = D; st[2] = H * D; st[3] = 1;
  } else {
    st[0] = H * S * D; st[1] = S * D; st[2] = D; st[3] = 1;
  }
}

/* Checks a host tensor against (B, H, S, D); 3-D means B = 1. */
static tsr_status check_host(const char *name, const tsr_array *a, int64_t B, int64_t H, int64_t S,
                             int64_t D, tsr_error *err)
{
  int off;
  if (!a || !a->data) return tsr_error_set(err, TSR_ERR_INVALID, "GPU run: tensor %s is missing", name);
  if (a->dtype != TSR_DT_F32 && a->dtype != TSR_DT_F16)
    return tsr_error_set(err, TSR_ERR_DTYPE, "GPU run: tensor %s must be float32 or fp16, got %s", name,
                         tsr_dtype_name(a->dtype));
  if (a->ndim != 3 && a->ndim != 4)
    return tsr_error_set(err, TSR_ERR_SHAPE, "GPU run: tensor %s must have 3 or 4 dimensions, got %d", name,
                         a->ndim);
  off = a->ndim - 3;
  if ((off && a->shape[0] != B) || (!off && B != 1) || a->shape[off] != H || a->shape[off + 1] != S ||
      a->shape[off + 2] != D)
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "GPU run: tensor %s does not match the plan's problem [%lld, %lld, %lld, %lld]", name,
                         (long long)B, (long long)H, (long long)S, (long long)D);
  return TSR_OK;
}

/* Host [B][H][S][D] (float32 or float16) to 16-bit elements at strides st. */
static uint16_t *to_device_layout(const tsr_array *a, tsr_dtype dt, int64_t B, int64_t H, int64_t S, int64_t D,
                                  const int64_t *st)
{
  uint16_t *h = malloc((size_t)(B * H * S * D) * 2);
  int64_t b, hh, s, d, i = 0;
  if (!h) return NULL;
  for (b = 0; b < B; b++)
    for (hh = 0; hh < H; hh++)
      for (s = 0; s < S; s++)
        for (d = 0; d < D; d++, i++) {
          float f = a->dtype == TSR_DT_F16 ? tsr_half_to_float(((const uint16_t *)a->data)[i])
                                           : ((const float *)a->data)[i];
          h[b * st[0] + hh * st[1] + s * st[2] + d] = dt == TSR_DT_BF16 ? tsr_float_to_bf16(f) : tsr_float_to_half(f);
        }
  return h;
}

tsr_status tsr_gpu_run_arrays(tsr_context *ctx, tsr_plan *pl, const tsr_array *q, const tsr_array *k,
                              const tsr_array *v, tsr_array *out, tsr_array *lse, tsr_error *err)
{
  const tsr_problem *pr;
  const tsr_cu *cu;
  tsr_gpu_tensors t;
  CUdeviceptr dq = 0, dk = 0, dv = 0, dout = 0, dlse = 0;
  CUstream stream = NULL;
  uint16_t *hq = NULL, *hk = NULL, *hv = NULL, *ho = NULL;
  size_t nq, nkv, nrows;
  tsr_status st;
  int64_t B, Hq, Hkv, Sq, Sk, D, i, b, h, s, d;

  if (out) memset(out, 0, sizeof *out);
  if (lse) memset(lse, 0, sizeof *lse);
  if (!ctx || !pl || !out) return tsr_error_set(err, TSR_ERR_INVALID, "GPU run: null context, plan or output");
  pr = &pl->problem;
  cu = &ctx->cu;
  B = pr->batch; Hq = pr->heads_q; Hkv = pr->heads_kv; Sq = pr->seq_q; Sk = pr->seq_k; D = pr->head_dim;
  if ((st = check_host("q", q, B, Hq, Sq, D, err)) || (st = check_host("k", k, B, Hkv, Sk, D, err)) ||
      (st = check_host("v", v, B, Hkv, Sk, D, err)))
    return st;
  if (!tsri_variant_dtype_name(pr->dtype))
    return tsr_error_set(err, TSR_ERR_DTYPE, "GPU run: the problem's device dtype must be bf16 or fp16, got %s",
                         tsr_dtype_name(pr->dtype));
  if ((st = tsr_gpu_upload(ctx, pl, err))) return st;
  if ((st = tsri_context_make_current(ctx, err))) return st;

  memset(&t, 0, sizeof t);
  layout_strides(pr->layout, Hq, Sq, D, t.q_stride);
  layout_strides(pr->layout, Hkv, Sk, D, t.k_stride);
  layout_strides(pr->layout, Hkv, Sk, D, t.v_stride);
  layout_strides(pr->layout, Hq, Sq, D, t.o_stride);
  nq = (size_t)(B * Hq * Sq * D);
  nkv = (size_t)(B * Hkv * Sk * D);
  nrows = (size_t)(B * Hq * Sq);
  hq = to_device_layout(q, pr->dtype, B, Hq, Sq, D, t.q_stride);
  hk = to_device_layout(k, pr->dtype, B, Hkv, Sk, D, t.k_stride);
  hv = to_device_layout(v, pr->dtype, B, Hkv, Sk, D, t.v_stride);
  ho = malloc(nq * 2);
  out->data = malloc(nq * sizeof(float));
  if (lse) lse->data = malloc(nrows * sizeof(float));
  if (!hq || !hk || !hv || !ho || !out->data || (lse && !lse->data)) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "GPU run: out of host memory");
    goto done;
  }
  if ((st = tsri_cu_check(cu, cu->cuMemAlloc(&dq, nq * 2), "cuMemAlloc(q)", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemAlloc(&dk, nkv * 2), "cuMemAlloc(k)", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemAlloc(&dv, nkv * 2), "cuMemAlloc(v)", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemAlloc(&dout, nq * 2), "cuMemAlloc(out)", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemAlloc(&dlse, nrows * 4), "cuMemAlloc(lse)", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemcpyHtoD(dq, hq, nq * 2), "cuMemcpyHtoD(q)", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemcpyHtoD(dk, hk, nkv * 2), "cuMemcpyHtoD(k)", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemcpyHtoD(dv, hv, nkv * 2), "cuMemcpyHtoD(v)", err)) ||
      (st = tsri_cu_check(cu, cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate", err)))
    goto done;
  t.q = dq; t.k = dk; t.v = dv; t.o = dout; t.lse = dlse;
  if ((st = tsr_gpu_launch(ctx, pl, &t, stream, err)) ||
      (st = tsri_cu_check(cu, cu->cuStreamSynchronize(stream), "cuStreamSynchronize", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemcpyDtoH(ho, dout, nq * 2), "cuMemcpyDtoH(out)", err)) ||
      (lse && (st = tsri_cu_check(cu, cu->cuMemcpyDtoH(lse->data, dlse, nrows * 4), "cuMemcpyDtoH(lse)", err))))
    goto done;
  for (b = 0, i = 0; b < B; b++)
    for (h = 0; h < Hq; h++)
      for (s = 0; s < Sq; s++)
        for (d = 0; d < D; d++, i++) {
          uint16_t e = ho[b * t.o_stride[0] + h * t.o_stride[1] + s * t.o_stride[2] + d];
          ((float *)out->data)[i] = pr->dtype == TSR_DT_BF16 ? tsr_bf16_to_float(e) : tsr_half_to_float(e);
        }
  out->dtype = TSR_DT_F32;
  out->ndim = q->ndim;
  memcpy(out->shape, q->shape, sizeof out->shape);
  if (lse) {
    lse->dtype = TSR_DT_F32;
    lse->ndim = q->ndim - 1;
    memcpy(lse->shape, q->shape, sizeof lse->shape);
    lse->shape[lse->ndim] = 0;
  }
done:
  if (stream) cu->cuStreamDestroy(stream);
  if (dq) cu->cuMemFree(dq);
  if (dk) cu->cuMemFree(dk);
  if (dv) cu->cuMemFree(dv);
  if (dout) cu->cuMemFree(dout);
  if (dlse) cu->cuMemFree(dlse);
  free(hq); free(hk); free(hv); free(ho);
  if (st) {
    free(out->data);
    memset(out, 0, sizeof *out);
    if (lse) {
      free(lse->data);
      memset(lse, 0, sizeof *lse);
    }
  }
  return st;
}

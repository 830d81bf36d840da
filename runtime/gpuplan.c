/*
 * gpuplan.c: planning on the GPU (tessera.h "GPU planning").  A gpuplan is
 * a plan template (tile, mapping, task layout and variant resolved once, as
 * the host planner would for the same options) bound to device buffers
 * sized for the worst case or the caller's capacities.  Each launch runs
 * the planning kernels of templates/plan_gpu.cuh (tsr_plan_count,
 * tsr_plan_emit) on the caller's stream and then the attention kernel,
 * which reads its task count from the device (tsri_gpu_bind in gpu.c).
 *
 * Uniform and variable block geometries alike: a variable one uploads its
 * block maps (each token's block, the block starts) once, at create, and
 * the kernels look blocks up there instead of dividing by bq / bk.  Gather
 * templates (mapping "gather", uniform blocks only) take the kernels'
 * direct path: tiles pair a row's selected blocks, no membership words.
 *
 * Cost: create allocates and uploads once (qblk, zeroed counters) and loads
 * the variant's module and the planner's (tsr_plan.cubin of the bundle); a launch is host work of a few microseconds (three
 * or four cuLaunchKernel calls, no allocation, no synchronisation).
 * Download synchronises and copies the plan back (tests, verification).
 * The features record lives in pinned host memory that the emit kernel's first thread writes
 * through unified addressing; reading it is a seqlock-guarded copy.
 */
#include "context_impl.h"
#include "plan_impl.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Default ceiling for partial slots' workspace. */
#define DEFAULT_SLOT_BYTES (256LL << 20)

struct tsr_gpuplan {
  tsr_context *ctx;
  tsr_plan *pl;              /* the template: problem, tile, mapping, variant, qblk */
  tsr_gpuplan_params gp;     /* kernel parameters (mask filled per launch) */
  int64_t mask_b, mask_h;
  CUmodule mod;              /* the bundle's planner module (tsr_plan.cubin) */
  CUfunction count_fn, emit_fn;
  int pdl;                   /* emit launched as a programmatic dependent (sm_90 on) */
  CUdeviceptr d_tasks, d_tiles, d_members, d_membership, d_merges, d_qblk;
  CUdeviceptr d_kblk, d_qoff, d_koff, d_tkb, d_kcw; /* variable geometry only */
  CUdeviceptr d_part_o, d_part_m, d_part_l, d_row_len, d_row_part, d_row_off, d_row_task, d_counts, d_scan;
  tsr_gp_stats *stats;       /* pinned, written by the device */
};

void tsr_gpuplan_caps_init(tsr_gpuplan_caps *c)
{
  if (c) memset(c, 0, sizeof *c);
}

static void free_buffers(tsr_gpuplan *g)
{
  const tsr_cu *cu = tsri_context_cu(g->ctx);
  CUdeviceptr *ptrs[] = {&g->d_tasks,   &g->d_tiles,   &g->d_members,  &g->d_membership,
                         &g->d_merges,  &g->d_qblk,    &g->d_part_o,   &g->d_part_m,
                         &g->d_part_l,  &g->d_row_len, &g->d_row_part, &g->d_row_off, &g->d_row_task,
                         &g->d_counts,  &g->d_scan,     &g->d_kblk,     &g->d_qoff,
                         &g->d_koff,    &g->d_tkb,      &g->d_kcw};
  size_t i;
  if (tsri_context_make_current(g->ctx, NULL) != TSR_OK) return;
  for (i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    if (*ptrs[i]) {
      cu->cuMemFree(*ptrs[i]);
      *ptrs[i] = 0;
    }
  if (g->stats) cu->cuMemFreeHost(g->stats);
  g->stats = NULL;
  if (g->mod) cu->cuModuleUnload(g->mod);
  g->mod = NULL;
}

tsr_plan *tsri_gpuplan_device_plan(tsr_gpuplan *g)
{
  return g ? g->pl : NULL;
}

void tsr_gpuplan_destroy(tsr_gpuplan *g)
{
  if (!g) return;
  /* Free the buffers while the plan's device record (which only borrows
   * them) still holds its context reference, then drop the record. */
  if (g->ctx) free_buffers(g);
  tsr_plan_destroy(g->pl);
  free(g);
}

static tsr_status dalloc(tsr_gpuplan *g, CUdeviceptr *dst, int64_t bytes, const char *what,
                         tsr_error *err)
{
  const tsr_cu *cu = tsri_context_cu(g->ctx);
  if (bytes < 16) bytes = 16; /* never a null buffer: kernels index it unconditionally */
  if (cu->cuMemAlloc(dst, (size_t)bytes) != CUDA_SUCCESS) {
    *dst = 0;
    return tsr_error_set(err, TSR_ERR_NOMEM,
                         "cannot create GPU plan: out of device memory for %s (%lld bytes)", what,
                         (long long)bytes);
  }
  return TSR_OK;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* What create derives from the problem and options before it touches the
 * device: the template's dimensions, the block maps a variable geometry
 * uploads, and the capacities the buffers are sized for. */
typedef struct {
  int uniform, multi; /* multi: some tile meets several blocks (membership words) */
  int gather;         /* mapping "gather": tiles of two selected key blocks */
  int64_t bq, bk, nq, nk, nqt, nkt, rows, chunk, nseg_max;
  int64_t cap_tiles, cap_words, cap_slots, cap_tasks, scan_bytes;
  tsr_i32 *kblk, *qoff, *koff, *tkb, *kcw; /* variable geometry only; freed by create */
} gp_layout;

/* The arguments, checked before anything is allocated. */
static tsr_status check_args(const tsr_plan_opts *o, const tsr_gpuplan_caps *caps, tsr_error *err)
{
  if (o->tasks == TSR_TASKS_PACK)
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED,
                         "cannot plan on the GPU: task layout 'pack' is host-only (use row or split)");
  if ((unsigned)o->tasks > TSR_TASKS_PACK || (unsigned)o->mapping > TSR_MAP_GATHER)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot create GPU plan: invalid mapping %d or task layout %d",
                         (int)o->mapping, (int)o->tasks);
  if (o->split_tiles < 0)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid split chunk %d: must not be negative", o->split_tiles);
  if (o->tasks == TSR_TASKS_SPLIT && o->split_tiles == 0)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot plan on the GPU: task layout 'split' needs a fixed chunk (split_tiles > 0)");
  if (o->num_sms < 0 || o->num_sms > 65536)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid multiprocessor count %d: expected 1 to 65536 (0 = the device's)",
                         o->num_sms);
  if (o->variant && strlen(o->variant) >= sizeof ((tsr_plan *)0)->variant)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid variant name '%.40s...': longer than 95", o->variant);
  if (caps->mask_batch < 0 || caps->mask_heads < 0 || caps->max_tiles < 0 || caps->max_words < 0 ||
      caps->max_slots < 0)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot create GPU plan: capacities must not be negative");
  return TSR_OK;
}

/* The template: the problem checked against the GPU path and the mask
 * planes, the tile and mapping resolved as the host planner would, the task
 * layout (split with a fixed chunk, else row), and its dimensions. */
static tsr_status template_init(tsr_gpuplan *g, tsr_context *ctx, const tsr_problem *p,
                                const tsr_plan_opts *o, const tsr_gpuplan_caps *caps,
                                gp_layout *lay, tsr_error *err)
{
  tsr_plan *pl = g->pl;
  tsr_status st;
  tsr_selection route;
  pl->problem = *p;
  if ((st = tsr_problem_check(&pl->problem, err))) return st;
  if (pl->problem.dtype != TSR_DT_BF16 && pl->problem.dtype != TSR_DT_F16)
    return tsr_error_set(err, TSR_ERR_DTYPE, "GPU plans need bf16 or fp16 data, got %s",
                         tsr_dtype_name(pl->problem.dtype));
  if (tsr_geom_seq_q(p->geom) != pl->problem.seq_q || tsr_geom_seq_k(p->geom) != pl->problem.seq_k)
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "cannot create GPU plan: geometry covers %lldx%lld tokens, problem has %lldx%lld",
                         (long long)tsr_geom_seq_q(p->geom), (long long)tsr_geom_seq_k(p->geom),
                         (long long)pl->problem.seq_q, (long long)pl->problem.seq_k);
  g->mask_b = caps->mask_batch ? caps->mask_batch : pl->problem.batch;
  g->mask_h = caps->mask_heads ? caps->mask_heads : pl->problem.heads_q;
  if ((g->mask_b != 1 && g->mask_b != pl->problem.batch) ||
      (g->mask_h != 1 && g->mask_h != pl->problem.heads_q))
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "cannot create GPU plan: mask planes %lldx%lld do not broadcast to batch %lld "
                         "and %lld query heads",
                         (long long)g->mask_b, (long long)g->mask_h, (long long)pl->problem.batch,
                         (long long)pl->problem.heads_q);
  {
    /* The automatic tile as the request path would route it for the sm80
     * family (tsri_context_route): the template a fallback runs; */
    tsr_features f;
    memset(&f, 0, sizeof f);
    memset(&route, 0, sizeof route);
    f.head_dim = pl->problem.head_dim;
    f.dtype = pl->problem.dtype;
    if (!tsr_geom_is_uniform(p->geom, &f.bq, &f.bk)) f.bq = f.bk = 0;
    route.opts = *o;
    tsri_context_route(&ctx->bundle, ctx->arch, ctx->smem_optin, &f, &route);
    /* and blocks 64 keys wide gathered onto tiles 128 wide from the first step,
     * as the request path's selection does (an open choice only) */
    tsri_context_gather(&ctx->bundle, ctx->arch, ctx->smem_optin, 1, &f, &route);
    o = &route.opts;
  }
  pl->opts = *o;
  pl->opts.arch = NULL;
  pl->opts.variant = NULL;
  pl->num_sms = o->num_sms ? o->num_sms : tsri_context_num_sms(ctx);
  strcpy(pl->arch, tsri_context_arch(ctx));
  if (o->variant) strcpy(pl->variant, o->variant);
  if ((st = tsri_map_resolve(pl, o, err))) return st;
  lay->gather = pl->mapping == TSR_MAP_GATHER;
  /* The planning kernels' gather path assumes the contract's geometry
   * (plan_layout.h): one query block a query tile, two key blocks a tile. */
  if (lay->gather && (!lay->uniform || lay->bq != pl->tile_m || 2 * lay->bk != pl->tile_n))
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED,
                         "cannot plan on the GPU: mapping 'gather' needs uniform blocks bq x bk on tiles "
                         "bq x 2bk, got blocks %lldx%lld (%s) on tile %dx%d",
                         (long long)lay->bq, (long long)lay->bk, lay->uniform ? "uniform" : "variable",
                         pl->tile_m, pl->tile_n);
  if (o->split_tiles > 0 && o->tasks != TSR_TASKS_ROW) lay->chunk = o->split_tiles;
  pl->task_layout = lay->chunk ? TSR_TASKS_SPLIT : TSR_TASKS_ROW;

  lay->nq = tsr_geom_nq(p->geom);
  lay->nk = tsr_geom_nk(p->geom);
  lay->nqt = pl->n_q_tiles;
  lay->nkt = pl->n_k_tiles;
  lay->rows = pl->problem.batch * pl->problem.heads_q * lay->nqt;
  if (lay->rows > INT32_MAX / TSR_GP_ROW_INTS || lay->nq * g->mask_b * g->mask_h > INT32_MAX)
    return tsr_error_set(err, TSR_ERR_CAPACITY,
                         "cannot plan %lld rows on the GPU: plans index rows with 32-bit integers",
                         (long long)lay->rows);
  return TSR_OK;
}

/* qblk is fixed by the geometry: computed here and uploaded once; a
 * variable geometry also uploads each key token's block and the block
 * starts of both sides (O(seq + blocks), once a template).  Then whether
 * any tile meets several blocks (partial tiles occur only there). */
static tsr_status block_maps(tsr_gpuplan *g, gp_layout *lay, tsr_error *err)
{
  tsr_plan *pl = g->pl;
  const tsr_geom *geom = pl->problem.geom;
  int64_t nq = lay->nq, nk = lay->nk, nkt = lay->nkt, t, u;
  int64_t ncw = (pl->problem.seq_k + 31) / 32;
  tsr_i32 *kblk, *qoff, *koff, *tkb, *kcw;
  pl->qblk = tsri_plan_buf(pl, TSR_BUF_QBLK, (size_t)pl->problem.seq_q * sizeof *pl->qblk);
  if (!lay->uniform) {
    lay->kblk = malloc((size_t)pl->problem.seq_k * sizeof *lay->kblk);
    lay->qoff = malloc((size_t)(nq + 1) * sizeof *lay->qoff);
    lay->koff = malloc((size_t)(nk + 1) * sizeof *lay->koff);
    lay->tkb = malloc((size_t)nkt * 2 * sizeof *lay->tkb);
    lay->kcw = malloc((size_t)ncw * 2 * sizeof *lay->kcw);
  }
  kblk = lay->kblk;
  qoff = lay->qoff;
  koff = lay->koff;
  tkb = lay->tkb;
  kcw = lay->kcw;
  if (!pl->qblk || (!lay->uniform && (!kblk || !qoff || !koff || !tkb || !kcw)))
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot create GPU plan: out of memory for the block maps");
  pl->n_qblk = pl->problem.seq_q;
  pl->qblk_nq = 0; /* written here, not by map.c: its cache no longer holds */
  if (lay->uniform) {
    for (t = 0; t < pl->problem.seq_q; t++) pl->qblk[t] = (tsr_i32)(t / lay->bq);
  } else {
    int64_t i, j;
    for (i = 0; i <= nq; i++) qoff[i] = (tsr_i32)tsr_geom_q_start(geom, i);
    for (j = 0; j <= nk; j++) koff[j] = (tsr_i32)tsr_geom_k_start(geom, j);
    for (i = 0; i < nq; i++)
      for (t = qoff[i]; t < qoff[i + 1]; t++) pl->qblk[t] = (tsr_i32)i;
    for (j = 0; j < nk; j++)
      for (t = koff[j]; t < koff[j + 1]; t++) kblk[t] = (tsr_i32)j;
    for (u = 0; u < nkt; u++) {
      tkb[2 * u] = kblk[u * pl->tile_n];
      tkb[2 * u + 1] = kblk[min64((u + 1) * pl->tile_n, pl->problem.seq_k) - 1];
    }
    /* Each membership word's blocks: the first, and where the others start. */
    for (u = 0; u < ncw; u++) {
      uint32_t starts = 0;
      for (t = 32 * u + 1; t < min64(32 * u + 32, pl->problem.seq_k); t++)
        if (kblk[t] != kblk[t - 1]) starts |= 1u << (t - 32 * u);
      kcw[2 * u] = kblk[32 * u];
      kcw[2 * u + 1] = (tsr_i32)starts;
    }
  }
  /* Partial tiles occur only where a tile meets several blocks. */
  lay->nseg_max = 1;
  for (t = 0; t < lay->nqt; t++) {
    int64_t r0 = t * pl->tile_m, r1 = min64(r0 + pl->tile_m, pl->problem.seq_q);
    int64_t ns = pl->qblk[r1 - 1] - pl->qblk[r0] + 1;
    if (ns > lay->nseg_max) lay->nseg_max = ns;
  }
  for (u = 0; u < nkt && !lay->multi; u++) {
    int64_t c0 = u * pl->tile_n, c1 = min64(c0 + pl->tile_n, pl->problem.seq_k);
    lay->multi = lay->uniform ? c0 / lay->bk != (c1 - 1) / lay->bk : kblk[c0] != kblk[c1 - 1];
  }
  lay->multi |= lay->nseg_max > 1;
  /* Gather tiles hold two whole blocks: no partial tiles, no words. */
  if (lay->gather) lay->multi = 0;
  return TSR_OK;
}

/* Capacities: the worst case of the template, or the caller's, each within
 * 32-bit indices; partial slots at most DEFAULT_SLOT_BYTES of workspace
 * unless the caller says otherwise.  A row has at most a tile a key tile,
 * a gather row one a pair of key blocks (ceil(nk / 2)). */
static void capacities(const tsr_plan *pl, const tsr_gpuplan_caps *caps, gp_layout *lay)
{
  int64_t rows = lay->rows, wn = pl->tile_n / 32, chunk = lay->chunk;
  int64_t row_tiles = lay->gather ? (lay->nk + 1) / 2 : lay->nkt;
  int64_t worst_tiles = rows * row_tiles;
  int64_t worst_words = lay->multi ? worst_tiles * lay->nseg_max * wn : 0;
  int64_t worst_slots = chunk ? rows * ((row_tiles + chunk - 1) / chunk) : 0;
  int64_t per_slot = (int64_t)pl->tile_m * (pl->problem.head_dim + 2) * 4;
  lay->cap_tiles = min64(caps->max_tiles ? caps->max_tiles : worst_tiles, INT32_MAX);
  lay->cap_words = min64(caps->max_words ? caps->max_words : worst_words, INT32_MAX);
  lay->cap_slots = caps->max_slots ? caps->max_slots : min64(worst_slots, DEFAULT_SLOT_BYTES / per_slot);
  lay->cap_slots = min64(min64(lay->cap_slots, worst_slots), INT32_MAX - rows);
  lay->cap_tasks = rows + lay->cap_slots;
  lay->scan_bytes = (rows + TSR_GP_COUNT_ROWS - 1) / TSR_GP_COUNT_ROWS * TSR_GP_SCAN_STRIDE * 8;
}

/* The device buffers at their capacities, and the pinned features record
 * (unless caps->no_host_stats). */
static tsr_status device_alloc(tsr_gpuplan *g, const tsr_gpuplan_caps *caps, const gp_layout *lay,
                               tsr_error *err)
{
  const tsr_cu *cu = tsri_context_cu(g->ctx);
  const tsr_plan *pl = g->pl;
  int64_t ts = (int64_t)sizeof(tsr_task_rec), ms = (int64_t)sizeof(tsr_member_rec);
  int64_t slot_rows = lay->cap_slots * pl->tile_m, rows = lay->rows, cap_tasks = lay->cap_tasks;
  int64_t nq = lay->nq, nk = lay->nk;
  tsr_status st;
  if ((st = dalloc(g, &g->d_tasks, cap_tasks * ts, "tasks", err)) ||
      (st = dalloc(g, &g->d_members, cap_tasks * ms, "members", err)) ||
      (st = dalloc(g, &g->d_tiles, lay->cap_tiles * (int64_t)sizeof(tsr_tile_rec), "tiles", err)) ||
      (st = dalloc(g, &g->d_membership, lay->cap_words * 4, "membership words", err)) ||
      (st = dalloc(g, &g->d_merges, lay->chunk ? rows * (int64_t)sizeof(tsr_merge_rec) : 0, "merges", err)) ||
      (st = dalloc(g, &g->d_qblk, pl->problem.seq_q * 4, "qblk", err)) ||
      (st = dalloc(g, &g->d_part_o, slot_rows * pl->problem.head_dim * 4, "partial outputs", err)) ||
      (st = dalloc(g, &g->d_part_m, slot_rows * 4, "partial maxima", err)) ||
      (st = dalloc(g, &g->d_part_l, slot_rows * 4, "partial sums", err)) ||
      (st = dalloc(g, &g->d_row_len, rows * 4, "row lengths", err)) ||
      (st = dalloc(g, &g->d_row_part, rows * 4, "row partial tiles", err)) ||
      (st = dalloc(g, &g->d_row_task, rows * 4, "row tasks", err)) ||
      (st = dalloc(g, &g->d_row_off, rows * TSR_GP_ROW_INTS * 4, "row offsets", err)) ||
      (st = dalloc(g, &g->d_counts, TSR_GP_DSTATS * 4 + (int64_t)sizeof(tsr_gp_stats), "counts", err)) ||
      (st = dalloc(g, &g->d_scan, lay->scan_bytes, "look-back state", err)) ||
      (!lay->uniform && ((st = dalloc(g, &g->d_kblk, pl->problem.seq_k * 4, "key block map", err)) ||
                         (st = dalloc(g, &g->d_qoff, (nq + 1) * 4, "query block starts", err)) ||
                         (st = dalloc(g, &g->d_koff, (nk + 1) * 4, "key block starts", err)) ||
                         (st = dalloc(g, &g->d_tkb, lay->nkt * 8, "key tile blocks", err)) ||
                         (st = dalloc(g, &g->d_kcw, (pl->problem.seq_k + 31) / 32 * 8, "key word blocks", err)))))
    return st;
  if (!caps->no_host_stats) {
    if (cu->cuMemAllocHost((void **)&g->stats, sizeof *g->stats) != CUDA_SUCCESS) {
      g->stats = NULL;
      return tsr_error_set(err, TSR_ERR_NOMEM, "cannot create GPU plan: out of pinned memory for features");
    }
    memset(g->stats, 0, sizeof *g->stats);
  }
  return TSR_OK;
}

/* What the device reads but never writes: qblk and the block maps; the
 * counters and the look-back state start at zero. */
static tsr_status device_upload(tsr_gpuplan *g, const gp_layout *lay, tsr_error *err)
{
  /* zeros, but for the dyn layout's "none left" task record (plan_impl.h) */
  unsigned zeros[TSR_GP_DSTATS + sizeof(tsr_gp_stats) / 4] = { 0 };
  const tsr_cu *cu = tsri_context_cu(g->ctx);
  const tsr_plan *pl = g->pl;
  int64_t nq = lay->nq, nk = lay->nk;
  tsr_status st;
  zeros[TSR_DYN_SENTINEL + offsetof(tsr_task_rec, n_members) / 4] = ~0u; /* -1 */
  if ((st = tsri_cu_check(cu, cu->cuMemcpyHtoD(g->d_qblk, pl->qblk, (size_t)pl->problem.seq_q * 4),
                         "cuMemcpyHtoD(qblk)", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemcpyHtoD(g->d_counts, zeros, sizeof zeros), "cuMemcpyHtoD(counts)",
                         err)) ||
      (st = tsri_cu_check(cu, cu->cuMemsetD8(g->d_scan, 0, (size_t)lay->scan_bytes), "cuMemsetD8(look-back)", err)))
    return st;
  if (!lay->uniform &&
      ((st = tsri_cu_check(cu, cu->cuMemcpyHtoD(g->d_kblk, lay->kblk, (size_t)pl->problem.seq_k * 4),
                          "cuMemcpyHtoD(kblk)", err)) ||
       (st = tsri_cu_check(cu, cu->cuMemcpyHtoD(g->d_qoff, lay->qoff, (size_t)(nq + 1) * 4), "cuMemcpyHtoD(qoff)",
                          err)) ||
       (st = tsri_cu_check(cu, cu->cuMemcpyHtoD(g->d_koff, lay->koff, (size_t)(nk + 1) * 4), "cuMemcpyHtoD(koff)",
                          err)) ||
       (st = tsri_cu_check(cu, cu->cuMemcpyHtoD(g->d_tkb, lay->tkb, (size_t)lay->nkt * 8), "cuMemcpyHtoD(tkb)", err)) ||
       (st = tsri_cu_check(cu, cu->cuMemcpyHtoD(g->d_kcw, lay->kcw, (size_t)(pl->problem.seq_k + 31) / 32 * 8),
                          "cuMemcpyHtoD(kcw)", err))))
    return st;
  return TSR_OK;
}

/* The attention kernel bound to the buffers (tsri_gpu_bind), and the
 * planner's two kernels from the bundle's planner module. */
static tsr_status bind_kernels(tsr_gpuplan *g, const gp_layout *lay, tsr_error *err)
{
  const tsr_cu *cu = tsri_context_cu(g->ctx);
  tsr_gpu_binding b;
  tsr_status st;
  memset(&b, 0, sizeof b);
  b.tasks = g->d_tasks;
  b.tiles = g->d_tiles;
  b.members = g->d_members;
  b.membership = g->d_membership;
  b.qblk = g->d_qblk;
  b.merges = g->d_merges;
  b.part_o = g->d_part_o;
  b.part_m = g->d_part_m;
  b.part_l = g->d_part_l;
  b.counts = g->d_counts + 4 * TSR_GP_TASKS; /* [TSR_GP_TASKS], then [TSR_GP_MERGES] */
  b.masking = lay->multi;
  b.may_merge = lay->chunk > 0 && lay->cap_slots > 0;
  /* Flat variants get one CTA a task, as the host-planned launch of the same
   * plan: row tasks are one a row, empty rows included; split tasks are
   * bounded by the capacity (rows + slots), the CTAs past the device's count
   * exiting at once.  A resident grid striding split tasks statically
   * measured 0-5% slower on the H200 (2026-12-02) and, on the H100
   * (2026-12-07, split_ab.py), 8-11% slower on 64x64 random masks at 10-50%
   * (where one CTA a task matches the host-planned split plan) and within
   * 1% on the others (notes/gpuplan.md; issue 20). */
  b.max_tasks = lay->chunk ? lay->cap_tasks : lay->rows;
  b.cap_tasks = lay->cap_tasks;
  if ((st = tsri_gpu_bind(g->ctx, g->pl, &b, err)) || (st = tsri_gpu_load_planner(g->ctx, &g->mod, err)) ||
      (st = tsri_cu_check(cu, cu->cuModuleGetFunction(&g->count_fn, g->mod, "tsr_plan_count"),
                         "cuModuleGetFunction(tsr_plan_count)", err)) ||
      (st = tsri_cu_check(cu, cu->cuModuleGetFunction(&g->emit_fn, g->mod, "tsr_plan_emit"),
                         "cuModuleGetFunction(tsr_plan_emit)", err)))
    return st;
  return TSR_OK;
}

/* The planning kernels' parameters (the mask's address is set per launch). */
static void kernel_params(tsr_gpuplan *g, const gp_layout *lay)
{
  const tsr_plan *pl = g->pl;
  /* sm_90 and later overlap the emit kernel's launch and its first mask
   * reads with the count kernel (griddepcontrol in
   * templates/plan_gpu.cuh). */
  g->pdl = strncmp(pl->arch, "sm_", 3) == 0 && atoi(pl->arch + 3) >= 90;
  memset(&g->gp, 0, sizeof g->gp);
  g->gp.plane_h = g->mask_h == 1 ? 0 : lay->nq;
  g->gp.plane_b = g->mask_b == 1 ? 0 : g->mask_h * lay->nq;
  g->gp.batch = (tsr_i32)pl->problem.batch;
  g->gp.heads_q = (tsr_i32)pl->problem.heads_q;
  g->gp.nq = (tsr_i32)lay->nq;
  g->gp.nk = (tsr_i32)lay->nk;
  g->gp.bq = (tsr_i32)lay->bq;
  g->gp.bk = (tsr_i32)lay->bk;
  g->gp.seq_q = (tsr_i32)pl->problem.seq_q;
  g->gp.seq_k = (tsr_i32)pl->problem.seq_k;
  g->gp.bm = pl->tile_m;
  g->gp.bn = pl->tile_n;
  g->gp.nqt = (tsr_i32)lay->nqt;
  g->gp.nkt = (tsr_i32)lay->nkt;
  g->gp.n_rows = (tsr_i32)lay->rows;
  g->gp.chunk = (tsr_i32)lay->chunk;
  /* the host planner's task groups (runtime/tasks.c): GQA heads of one KV head */
  g->gp.gsz = (tsr_i32)(pl->problem.heads_q / pl->problem.heads_kv * lay->nqt);
  g->gp.num_sms = (tsr_i32)pl->num_sms;
  g->gp.gather = lay->gather;
  g->gp.cap_tiles = (tsr_i32)lay->cap_tiles;
  g->gp.cap_words = (tsr_i32)lay->cap_words;
  g->gp.cap_slots = (tsr_i32)lay->cap_slots;
  g->gp.cap_tasks = (tsr_i32)lay->cap_tasks;
  g->gp.tasks = (tsr_task_rec *)(uintptr_t)g->d_tasks;
  g->gp.tiles = (tsr_tile_rec *)(uintptr_t)g->d_tiles;
  g->gp.members = (tsr_member_rec *)(uintptr_t)g->d_members;
  g->gp.membership = (tsr_u32 *)(uintptr_t)g->d_membership;
  g->gp.merges = (tsr_merge_rec *)(uintptr_t)g->d_merges;
  g->gp.row_len = (tsr_i32 *)(uintptr_t)g->d_row_len;
  g->gp.row_part = (tsr_i32 *)(uintptr_t)g->d_row_part;
  g->gp.row_task = (tsr_i32 *)(uintptr_t)g->d_row_task;
  g->gp.row_off = (tsr_i32 *)(uintptr_t)g->d_row_off;
  g->gp.counts = (tsr_i32 *)(uintptr_t)g->d_counts;
  g->gp.scan = (unsigned long long *)(uintptr_t)g->d_scan;
  g->gp.stats = g->stats;
  if (!lay->uniform) {
    g->gp.qblk = (const tsr_i32 *)(uintptr_t)g->d_qblk;
    g->gp.kblk = (const tsr_i32 *)(uintptr_t)g->d_kblk;
    g->gp.qoff = (const tsr_i32 *)(uintptr_t)g->d_qoff;
    g->gp.koff = (const tsr_i32 *)(uintptr_t)g->d_koff;
    g->gp.tkb = (const tsr_i32 *)(uintptr_t)g->d_tkb;
    g->gp.kcw = (const tsr_i32 *)(uintptr_t)g->d_kcw;
  }
}

tsr_status tsr_gpuplan_create(tsr_context *ctx, const tsr_problem *p, const tsr_plan_opts *o,
                              const tsr_gpuplan_caps *caps, tsr_gpuplan **out, tsr_error *err)
{
  tsr_plan_opts defaults;
  tsr_gpuplan_caps defcaps;
  tsr_gpuplan *g = NULL;
  tsr_plan *pl;
  tsr_status st;
  gp_layout lay;

  if (out) *out = NULL;
  if (!ctx || !p || !out)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot create GPU plan: context, problem and output are required");
  if (!p->geom)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot create GPU plan: the problem has no block geometry");
  if (!o) {
    tsr_plan_opts_init(&defaults);
    o = &defaults;
  }
  if (!caps) {
    tsr_gpuplan_caps_init(&defcaps);
    caps = &defcaps;
  }
  memset(&lay, 0, sizeof lay);
  lay.uniform = tsr_geom_is_uniform(p->geom, &lay.bq, &lay.bk);
  if ((st = check_args(o, caps, err))) return st;

  g = calloc(1, sizeof *g);
  pl = calloc(1, sizeof *pl);
  if (!g || !pl) {
    free(g);
    free(pl);
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot create GPU plan: out of memory");
  }
  g->pl = pl;
  if ((st = template_init(g, ctx, p, o, caps, &lay, err)) || (st = block_maps(g, &lay, err)))
    goto fail;
  capacities(pl, caps, &lay);

  g->ctx = ctx; /* from here on, destroy frees device buffers through it */
  if ((st = tsri_context_make_current(ctx, err)) || (st = device_alloc(g, caps, &lay, err)) ||
      (st = device_upload(g, &lay, err)) || (st = bind_kernels(g, &lay, err)))
    goto fail;
  kernel_params(g, &lay);
  free(lay.kblk);
  free(lay.qoff);
  free(lay.koff);
  free(lay.tkb);
  free(lay.kcw);

  pl->summary.tile_m = pl->tile_m;
  pl->summary.tile_n = pl->tile_n;
  pl->summary.mapping = pl->mapping;
  pl->summary.tasks = pl->task_layout;
  memcpy(pl->summary.variant, pl->variant, sizeof pl->summary.variant);
  *out = g;
  return TSR_OK;
fail:
  free(lay.kblk);
  free(lay.qoff);
  free(lay.koff);
  free(lay.tkb);
  free(lay.kcw);
  tsr_gpuplan_destroy(g);
  return st;
}

/* A planning kernel after the first: a programmatic dependent launch where
 * the device has it (the kernel waits for its predecessor itself), else a
 * plain one in stream order. */
static tsr_status launch_dep(const tsr_gpuplan *g, CUfunction f, unsigned grid, unsigned threads, void *stream,
                             void **args, const char *name, tsr_error *err)
{
  const tsr_cu *cu = tsri_context_cu(g->ctx);
  char what[64];
  snprintf(what, sizeof what, "%s(%s)", g->pdl ? "cuLaunchKernelEx" : "cuLaunchKernel", name);
  if (g->pdl) {
    CUlaunchConfig lc;
    CUlaunchAttribute at;
    memset(&lc, 0, sizeof lc);
    memset(&at, 0, sizeof at);
    at.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    at.value.programmaticStreamSerializationAllowed = 1;
    lc.gridDimX = grid;
    lc.gridDimY = lc.gridDimZ = 1;
    lc.blockDimX = threads;
    lc.blockDimY = lc.blockDimZ = 1;
    lc.hStream = (CUstream)stream;
    lc.attrs = &at;
    lc.numAttrs = 1;
    return tsri_cu_check(cu, cu->cuLaunchKernelEx(&lc, f, args, NULL), what, err);
  }
  return tsri_cu_check(cu, cu->cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, 0, (CUstream)stream, args, NULL), what,
                      err);
}

tsr_status tsr_gpuplan_plan(tsr_gpuplan *g, uint64_t mask, tsr_mask_format format, void *stream,
                            tsr_error *err)
{
  const tsr_cu *cu;
  tsr_gpuplan_params prm;
  void *args[1];
  unsigned nrows;
  tsr_status st;

  if (!g) return tsr_error_set(err, TSR_ERR_INVALID, "tsr_gpuplan_plan: null GPU plan");
  if (!mask) return tsr_error_set(err, TSR_ERR_INVALID, "cannot plan on the GPU: null device mask");
  if (format != TSR_MASK_BYTES && format != TSR_MASK_BITS)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot plan on the GPU: unknown mask format %d", (int)format);
  if (format == TSR_MASK_BITS && mask % 4)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot plan on the GPU: a bit-packed mask must be 4-byte aligned");
  cu = tsri_context_cu(g->ctx);
  if ((st = tsri_context_make_current(g->ctx, err))) return st;
  prm = g->gp;
  prm.mask = (const void *)(uintptr_t)mask;
  prm.format = format == TSR_MASK_BITS;
  prm.pitch = format == TSR_MASK_BITS ? (prm.nk + 31) / 32 : prm.nk;
  args[0] = &prm;
  nrows = (unsigned)prm.n_rows;
  if ((st = tsri_cu_check(cu,
                         cu->cuLaunchKernel(g->count_fn, (nrows + TSR_GP_COUNT_ROWS - 1) / TSR_GP_COUNT_ROWS, 1, 1,
                                            32 * TSR_GP_COUNT_ROWS, 1, 1, 0,
                                            (CUstream)stream, args, NULL),
                         "cuLaunchKernel(tsr_plan_count)", err)))
    return st;
  return launch_dep(g, g->emit_fn, (nrows + 7) / 8, 256, stream, args, "tsr_plan_emit", err);
}

tsr_status tsr_gpuplan_run(tsr_gpuplan *g, const tsr_gpu_tensors *t, void *stream, tsr_error *err)
{
  if (!g) return tsr_error_set(err, TSR_ERR_INVALID, "tsr_gpuplan_run: null GPU plan");
  return tsr_gpu_launch(g->ctx, g->pl, t, stream, err);
}

tsr_status tsr_gpuplan_launch(tsr_gpuplan *g, uint64_t mask, tsr_mask_format format,
                              const tsr_gpu_tensors *t, void *stream, tsr_error *err)
{
  tsr_status st;
  if (!t) return tsr_error_set(err, TSR_ERR_INVALID, "tsr_gpuplan_launch: null tensors");
  st = tsr_gpuplan_plan(g, mask, format, stream, err);
  return st ? st : tsr_gpuplan_run(g, t, stream, err);
}

/* Copies n records of `size` bytes into the host plan's buffer `slot`. */
static tsr_status dcopy(const tsr_cu *cu, tsr_plan *h, int slot, void **dst, CUdeviceptr src, int64_t n,
                        size_t size, const char *what, tsr_error *err)
{
  *dst = tsri_plan_buf(h, slot, (size_t)(n > 0 ? n : 1) * size);
  if (!*dst) return tsr_error_set(err, TSR_ERR_NOMEM, "cannot download GPU plan: out of memory for %s", what);
  if (n <= 0) return TSR_OK;
  return tsri_cu_check(cu, cu->cuMemcpyDtoH(*dst, src, (size_t)n * size), "cuMemcpyDtoH", err);
}

tsr_status tsr_gpuplan_download(tsr_gpuplan *g, tsr_plan **host_copy, tsr_error *err)
{
  const tsr_cu *cu;
  tsr_i32 counts[TSR_GP_DSTATS + sizeof(tsr_gp_stats) / 4];
  tsr_gp_stats dstats;
  tsr_plan *h;
  tsr_status st;

  if (host_copy) *host_copy = NULL;
  if (!g || !host_copy) return tsr_error_set(err, TSR_ERR_INVALID, "tsr_gpuplan_download: null argument");
  cu = tsri_context_cu(g->ctx);
  if ((st = tsri_context_make_current(g->ctx, err)) ||
      (st = tsri_cu_check(cu, cu->cuCtxSynchronize(), "cuCtxSynchronize", err)) ||
      (st = tsri_cu_check(cu, cu->cuMemcpyDtoH(counts, g->d_counts, sizeof counts), "cuMemcpyDtoH(counts)", err)))
    return st;
  memcpy(&dstats, counts + TSR_GP_DSTATS, sizeof dstats);
  if (counts[TSR_GP_STEP] == 0)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot download GPU plan: nothing was planned yet");
  if (counts[TSR_GP_OVERFLOW])
    return tsr_error_set(err, TSR_ERR_CAPACITY,
                         "GPU plan overflowed its capacity: %d tiles (capacity %d), %d membership words "
                         "(capacity %d)",
                         counts[TSR_GP_TILES], g->gp.cap_tiles, counts[TSR_GP_WORDS], g->gp.cap_words);
  h = calloc(1, sizeof *h);
  if (!h) return tsr_error_set(err, TSR_ERR_NOMEM, "cannot download GPU plan: out of memory");
  h->problem = g->pl->problem;
  h->opts = g->pl->opts;
  h->tile_m = g->pl->tile_m;
  h->tile_n = g->pl->tile_n;
  h->mapping = g->pl->mapping;
  h->task_layout = g->pl->task_layout;
  h->num_sms = g->pl->num_sms;
  memcpy(h->arch, g->pl->arch, sizeof h->arch);
  memcpy(h->variant, g->pl->variant, sizeof h->variant);
  h->n_q_tiles = g->pl->n_q_tiles;
  h->n_k_tiles = g->pl->n_k_tiles;
  h->n_tasks = counts[TSR_GP_TASKS];
  h->n_members = counts[TSR_GP_TASKS];
  h->n_tiles = counts[TSR_GP_TILES];
  h->n_membership = counts[TSR_GP_WORDS];
  h->n_merges = counts[TSR_GP_MERGES];
  h->n_slots = counts[TSR_GP_SLOTS];
  h->n_qblk = g->pl->n_qblk;
  if ((st = dcopy(cu, h, TSR_BUF_TASKS, (void **)&h->tasks, g->d_tasks, h->n_tasks, sizeof *h->tasks,
                  "tasks", err)) ||
      (st = dcopy(cu, h, TSR_BUF_MEMBERS, (void **)&h->members, g->d_members, h->n_members,
                  sizeof *h->members, "members", err)) ||
      (st = dcopy(cu, h, TSR_BUF_TILES, (void **)&h->tiles, g->d_tiles, h->n_tiles, sizeof *h->tiles,
                  "tiles", err)) ||
      (st = dcopy(cu, h, TSR_BUF_MEMBERSHIP, (void **)&h->membership, g->d_membership, h->n_membership,
                  sizeof *h->membership, "membership", err)) ||
      (st = dcopy(cu, h, TSR_BUF_MERGES, (void **)&h->merges, g->d_merges, h->n_merges, sizeof *h->merges,
                  "merges", err)) ||
      (st = dcopy(cu, h, TSR_BUF_QBLK, (void **)&h->qblk, g->d_qblk, h->n_qblk, sizeof *h->qblk, "qblk",
                  err))) {
    tsr_plan_destroy(h);
    return st;
  }
  {
    tsr_plan_summary *s = &h->summary;
    *s = g->pl->summary;
    s->tiles = h->n_tiles;
    s->tasks_count = h->n_tasks;
    s->split_rows = h->n_merges;
    s->empty_rows = counts[TSR_GP_EMPTY];
    s->members = h->n_members;
    s->merges = h->n_merges;
    s->slots = h->n_slots;
    s->membership_words = h->n_membership;
    s->partial_tiles = dstats.partial_tiles;
    s->selected_pairs = dstats.density * (double)h->problem.batch * (double)h->problem.heads_q *
                        (double)h->problem.seq_q * (double)h->problem.seq_k;
  }
  *host_copy = h;
  return TSR_OK;
}

void tsr_gpuplan_summarize(const tsr_gpuplan *g, tsr_plan_summary *s)
{
  if (!s) return;
  if (!g) {
    memset(s, 0, sizeof *s);
    return;
  }
  *s = g->pl->summary;
  memcpy(s->variant, g->pl->variant, sizeof s->variant);
}

int64_t tsr_gpuplan_stats_read(const tsr_gpuplan *g, tsr_gpuplan_stats *out)
{
  const volatile tsr_gp_stats *v;
  int tries;
  if (out) memset(out, 0, sizeof *out);
  if (!g || !out || !g->stats) return 0;
  v = g->stats;
  /* Seqlock: the device writes step = -1, the fields, then the step. */
  for (tries = 0; tries < 1000; tries++) {
    tsr_i64 s1 = v->step, s2;
    if (s1 < 0) continue;
    out->density = v->density;
    out->row_cv = v->row_cv;
    out->empty_rows = v->empty_rows;
    out->tiles = v->tiles;
    out->partial_tiles = v->partial_tiles;
    out->tasks = v->tasks;
    out->merges = v->merges;
    out->slots = v->slots;
    out->membership_words = v->membership_words;
    out->overflow = v->overflow;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    s2 = v->step;
    if (s1 == s2) {
      out->step = s1;
      return s1;
    }
  }
  memset(out, 0, sizeof *out);
  return 0;
}

void tsri_gpuplan_features_of(const tsr_problem *p, int tile_m, int tile_n, int gather, int num_sms,
                              const tsr_gpuplan_stats *s, tsr_features *f)
{
  int64_t bq = 0, bk = 0;
  double fill = 0;
  int i;
  memset(f, 0, sizeof *f);
  tsr_geom_is_uniform(p->geom, &bq, &bk);
  f->density = s->density;
  f->block_density = s->density;
  f->row_cv = s->row_cv;
  f->empty_rows = s->empty_rows;
  if (s->tiles > 0)
    fill = s->density * (double)p->batch * (double)p->heads_q * (double)p->seq_q * (double)p->seq_k /
           ((double)s->tiles * tile_m * tile_n);
  /* Only the planner's own tile was counted: the others are marked not
   * measured (the selector estimates them, see select.c fill_est).  A
   * gather template's tiles each hold two selected key blocks, so their
   * count is not the fill of its tile (which counts every block a tile
   * spans, as combine computes them: 0.53 against gather's 0.99 for random
   * 128x64 blocks at 10%).  What it does know is the blocks' own tile:
   * whole logical blocks, fill 1 (their count, touched, is not kept). */
  for (i = 0; i < TSR_FEATURE_TILES; i++) {
    int tm, tn;
    tsr_features_tile(i, &tm, &tn);
    if (gather ? tm == bq && tn == bk : tm == tile_m && tn == tile_n) {
      f->fill[i] = gather || fill > 1 ? 1 : fill;
      f->touched[i] = gather ? -1 : s->tiles;
    } else {
      f->fill[i] = -1;
      f->touched[i] = -1;
    }
  }
  f->rows_per_sm = (double)p->batch * (double)p->heads_q * ceil((double)p->seq_q / 128.0) / num_sms;
  f->bq = bq;
  f->bk = bk;
  f->seq_q = p->seq_q;
  f->seq_k = p->seq_k;
  f->head_dim = p->head_dim;
  f->dtype = p->dtype;
  f->num_sms = num_sms;
}

void tsr_gpuplan_features(const tsr_gpuplan *g, const tsr_gpuplan_stats *s, tsr_features *f)
{
  if (!f) return;
  if (!g || !s) {
    memset(f, 0, sizeof *f);
    return;
  }
  tsri_gpuplan_features_of(&g->pl->problem, g->pl->tile_m, g->pl->tile_n, g->pl->mapping == TSR_MAP_GATHER,
                           g->pl->num_sms, s, f);
}

tsr_status tsr_gpuplan_reselect(tsr_context *ctx, const tsr_gpuplan *g, const tsr_gpuplan_stats *s,
                                tsr_gpuplan_regime *out, tsr_error *err)
{
  tsr_features f;
  if (!ctx || !g || !s || !out)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot re-select a GPU plan: %s is NULL",
                         !ctx ? "context" : !g ? "GPU plan" : !s ? "stats" : "output");
  tsr_gpuplan_features(g, s, &f);
  return tsri_context_regime(ctx, &f, s, &g->pl->problem, g->pl->tile_m, g->pl->tile_n,
                            g->pl->opts.precision, out, err);
}

void tsr_gpuplan_hold_init(tsr_gpuplan_hold *h)
{
  if (!h)
    return;
  memset(h, 0, sizeof *h);
  h->came_to = h->came_from = -1;
}

/* The hold grows 4, 8, 16, ... steps each time a template is held, at
 * most 256: a template the masks keep sending back, or that keeps running
 * them slower, costs a step in ever more, while one that a change in the
 * masks made right is tried again within 256 steps.  Times within 2% are a
 * tie (they are of different steps' masks): the table's choice wins it. */
#define HOLD_FIRST 4
#define HOLD_LAST 256
#define HOLD_FASTER 0.98

static void hold_back(tsr_gpuplan_hold *h, int t)
{
  if (t < TSR_GPUPLAN_HOLD_MAX) {
    int b = h->holds[t] < 7 ? ++h->holds[t] : h->holds[t];
    int64_t n = (int64_t)HOLD_FIRST << (b - 1);
    h->until[t] = h->steps + (n < HOLD_LAST ? n : HOLD_LAST);
  }
}

static int64_t held_left(const tsr_gpuplan_hold *h, int t)
{
  return t < TSR_GPUPLAN_HOLD_MAX ? h->until[t] - h->steps : 0;
}

/* The switch to cur from `from`, judged by a fresh step time of cur
 * against from's latest: 1 to go back (cur held: more than 2% slower, or
 * sent back without being 2% faster), 2 to stay while from is held (sent
 * back, but 2% faster), 0 to follow the selection. */
static int judge(tsr_gpuplan_hold *h, int cur, int from, int chosen, double cur_ms)
{
  double t_from = from < TSR_GPUPLAN_HOLD_MAX ? h->ms[from] : 0;
  if (cur_ms * HOLD_FASTER > t_from || (chosen == from && cur_ms > HOLD_FASTER * t_from)) {
    hold_back(h, cur);
    return 1;
  }
  if (chosen == from) {
    hold_back(h, from);
    return 2;
  }
  return 0;
}

tsr_status tsr_gpuplan_hold_step(tsr_gpuplan_hold *h, int cur, int chosen, double cur_ms, int *next,
                                 int64_t *held_for, tsr_error *err)
{
  int from;
  int64_t left;
  if (!h || !next)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot hold GPU templates: %s is NULL",
                         !h ? "the hold" : "next");
  if (cur < 0 || chosen < 0)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid template number %d: expected 0 or more",
                         cur < 0 ? cur : chosen);
  if (!(cur_ms >= 0) || isinf(cur_ms))
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "invalid step time %g ms: expected 0 (not known) or a positive number", cur_ms);
  if (held_for)
    *held_for = 0;
  *next = cur;
  h->steps++;
  if (cur_ms > 0 && cur < TSR_GPUPLAN_HOLD_MAX)
    h->ms[cur] = cur_ms;
  /* A switch to cur is judged at cur's first step with a time (both times
   * known); until then a selection of the template it came from returns
   * there (the two may alternate), and one of cur keeps waiting. */
  from = h->came_to == cur ? h->came_from : -1;
  h->came_to = h->came_from = -1;
  if (from >= 0 && cur_ms > 0 && from < TSR_GPUPLAN_HOLD_MAX && h->ms[from] > 0) {
    int verdict = judge(h, cur, from, chosen, cur_ms);
    if (verdict == 1) {
      *next = from; /* a return is never refused: from ran these masks */
      return TSR_OK;
    }
    if (verdict == 2) {
      if (held_for)
        *held_for = held_left(h, from);
      return TSR_OK;
    }
  } else if (from >= 0 && chosen == from) {
    *next = from;
    return TSR_OK;
  } else if (from >= 0 && chosen == cur) {
    h->came_to = cur; /* still waiting for a time */
    h->came_from = from;
    return TSR_OK;
  }
  if (chosen == cur)
    return TSR_OK;
  if ((left = held_left(h, chosen)) > 0) {
    if (held_for)
      *held_for = left;
    return TSR_OK;
  }
  *next = chosen;
  h->came_to = chosen;
  h->came_from = cur;
  return TSR_OK;
}

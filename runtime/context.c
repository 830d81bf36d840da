/*
 * context.c: the context (driver, device, kernel bundle, lookup table) and
 * the request path's selection on it; gpu.c runs plans on a context.
 *
 * tsr_context_create loads the driver and reads the device's properties,
 * loads the bundle for the device's target (sm_90a on the H200), reads the
 * lookup table for the device's name and multiprocessor count (a few
 * milliseconds for the embedded default, once), and checks every table row
 * against the bundle once: whether the row's variant serves its plan here,
 * else whether some variant of the bundle serves the row's tile, else that
 * the row cannot run here.  tsr_context_select then turns a request's
 * (problem, mask) into plan options with features and one binary search
 * per table level, about a microsecond on top of the features, and only
 * reads the context.  A host-only context (TSR_CONTEXT_NO_DEVICE) has the
 * bundle and the table but no driver, so selection runs and is tested on
 * machines without a GPU.
 *
 * Lifetime: a plan's device copies hold a reference on the context, so the
 * context outlives them whichever of tsr_plan_destroy and
 * tsr_context_destroy comes first.
 */
#include "context_impl.h"
#include "select_impl.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tsr_context_opts_init(tsr_context_opts *o)
{
  o->device = 0;
  o->bundle_dir = NULL;
  o->db_path = NULL;
}

const tsr_cu *tsri_context_cu(const tsr_context *ctx) { return &ctx->cu; }
CUdevice tsri_context_device(const tsr_context *ctx) { return ctx->dev; }
const char *tsri_context_arch(const tsr_context *ctx) { return ctx->arch; }
int tsri_context_num_sms(const tsr_context *ctx) { return ctx->num_sms; }

tsr_status tsri_context_make_current(tsr_context *ctx, tsr_error *err)
{
  if (!ctx->pctx)
    return tsr_error_set(err, TSR_ERR_NO_DEVICE,
                         "the context has no device (created with TSR_CONTEXT_NO_DEVICE)");
  return tsri_cu_check(&ctx->cu, ctx->cu.cuCtxSetCurrent(ctx->pctx), "cuCtxSetCurrent", err);
}

void tsri_context_retain(tsr_context *ctx) { ctx->refs++; }

void tsri_context_release(tsr_context *ctx)
{
  size_t i;
  if (!ctx || --ctx->refs > 0) return;
  if (ctx->pctx) {
    ctx->cu.cuCtxSetCurrent(ctx->pctx);
    for (i = 0; ctx->mods && i < ctx->bundle.n; i++)
      if (ctx->mods[i].mod) ctx->cu.cuModuleUnload(ctx->mods[i].mod);
    ctx->cu.cuDevicePrimaryCtxRelease(ctx->dev);
  }
  free(ctx->mods);
  tsr_select_destroy(ctx->selector);
  tsri_bundle_free(&ctx->bundle);
  tsri_cu_close(&ctx->cu);
  free(ctx);
}

void tsr_context_destroy(tsr_context *ctx)
{
  tsri_context_release(ctx);
}

int tsri_context_serves(const tsr_context *ctx, const tsr_bundle_entry *e,
                       const tsr_variant_need *need)
{
  return tsri_bundle_serves(e, ctx->arch, ctx->smem_optin, need);
}

int tsr_gpu_has_variant(const tsr_context *ctx, const char *name)
{
  long i;
  if (!ctx || !name)
    return 0;
  i = tsri_bundle_find(&ctx->bundle, name);
  return i >= 0 && (ctx->bundle.items[i].targets & (1u << tsri_arch_index(ctx->arch)));
}

/* The driver and the device: properties, target, primary context.  *name
 * receives the device's name ("" when the driver gives none). */
static tsr_status open_device(tsr_context *ctx, int device, char *name, size_t name_size,
                              tsr_error *err)
{
  tsr_status st;
  int count = 0, smem = 0;
  const char *arch;
  if ((st = tsri_cu_open(&ctx->cu, err)) ||
      (st = tsri_cu_check(&ctx->cu, ctx->cu.cuInit(0), "cuInit", err)) ||
      (st = tsri_cu_check(&ctx->cu, ctx->cu.cuDeviceGetCount(&count), "cuDeviceGetCount", err)))
    return st;
  if (device < 0 || device >= count)
    return tsr_error_set(err, TSR_ERR_NO_DEVICE, "no CUDA device %d: %d device(s) present", device,
                         count);
  if ((st = tsri_cu_check(&ctx->cu, ctx->cu.cuDeviceGet(&ctx->dev, device), "cuDeviceGet", err)))
    return st;
  ctx->cu.cuDeviceGetAttribute(&ctx->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx->dev);
  ctx->cu.cuDeviceGetAttribute(&ctx->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx->dev);
  ctx->cu.cuDeviceGetAttribute(&ctx->num_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->dev);
  ctx->cu.cuDeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, ctx->dev);
  ctx->smem_optin = smem;
  if (ctx->cu.cuDeviceGetName(name, (int)name_size, ctx->dev) != CUDA_SUCCESS) name[0] = '\0';
  arch = tsri_arch_for_cc(ctx->cc_major, ctx->cc_minor);
  if (!arch)
    return tsr_error_set(err, TSR_ERR_NO_VARIANT,
                         "no kernel target for device '%s' of compute capability %d.%d",
                         name[0] ? name : "?", ctx->cc_major, ctx->cc_minor);
  snprintf(ctx->arch, sizeof ctx->arch, "%s", arch);
  if ((st = tsri_cu_check(&ctx->cu, ctx->cu.cuDevicePrimaryCtxRetain(&ctx->pctx, ctx->dev),
                         "cuDevicePrimaryCtxRetain", err)))
    return st;
  return tsri_context_make_current(ctx, err);
}

/* Settles each table row against the bundle (select_impl.h): a row names
 * the variant build it was timed with, which a later catalog may have
 * renamed, and plans other than retain may carry partial tiles, so their
 * variant must mask.  The row keeps its variant when that serves its plan
 * here; else it drops the name, so that tsr_gpu_upload picks the bundle's
 * own for the same tile; else, when nothing in the bundle serves the tile,
 * the row gives the fallback.  The note says which in every reason. */
static void settle_rows(tsr_context *ctx)
{
  int64_t i, n = tsr_select_rows(ctx->selector);
  for (i = 0; i < n; i++) {
    char note[TSR_VARIANT_NAME_MAX + 128];
    tsr_row_view r;
    tsr_variant_need need = {0}; /* native precision unless set */
    long k;
    tsri_select_row_view(ctx->selector, i, &r);
    need.dtype = r.dtype;
    need.head_dim = r.head_dim;
    need.bm = r.tile_m;
    need.bn = r.tile_n;
    need.membership = r.mapping != TSR_MAP_RETAIN && r.mapping != TSR_MAP_GATHER;
    need.gather = r.mapping == TSR_MAP_GATHER;
    k = r.variant[0] ? tsri_bundle_find(&ctx->bundle, r.variant) : -1;
    if (k >= 0 && tsri_context_serves(ctx, &ctx->bundle.items[k], &need))
      continue; /* TSR_ROW_RUNS */
    if (tsri_bundle_pick(&ctx->bundle, ctx->arch, &need, ctx->smem_optin) >= 0) {
      note[0] = '\0';
      if (r.variant[0])
        snprintf(note, sizeof note,
                 k >= 0 ? "; variant %s cannot serve this plan here (membership, arch or shared "
                          "memory): the bundle's own for the tile"
                        : "; variant %s not in the bundle: its own for the tile",
                 r.variant);
      tsri_select_row_settle(ctx->selector, i, TSR_ROW_ANY_VARIANT, note);
    } else {
      snprintf(note, sizeof note, "; no %s d%d %dx%d variant in the bundle for %s",
               tsr_dtype_name(r.dtype), need.head_dim, need.bm, need.bn, ctx->arch);
      tsri_select_row_settle(ctx->selector, i, TSR_ROW_NO_KERNEL, note);
    }
  }
}

tsr_status tsr_context_create(const tsr_context_opts *o, tsr_context **out, tsr_error *err)
{
  tsr_context_opts def;
  tsr_context *ctx;
  tsr_status st;
  char name[128] = "";

  *out = NULL;
  if (!o) {
    tsr_context_opts_init(&def);
    o = &def;
  }
  ctx = calloc(1, sizeof *ctx);
  if (!ctx) return tsr_error_set(err, TSR_ERR_NOMEM, "cannot create GPU context: out of memory");
  ctx->refs = 1;
  if (o->device == TSR_CONTEXT_NO_DEVICE) {
    /* Host only: the target and grid the shipped table was made for. */
    snprintf(ctx->arch, sizeof ctx->arch, "%s", TSR_DEFAULT_ARCH);
    ctx->num_sms = TSR_DEFAULT_NUM_SMS;
    ctx->smem_optin = tsri_arch_smem_limit(ctx->arch);
  } else if ((st = open_device(ctx, o->device, name, sizeof name, err))) {
    goto fail;
  }
  if ((st = tsri_bundle_load(tsri_bundle_dir(o->bundle_dir, NULL), &ctx->bundle, err))) goto fail;
  ctx->mods = calloc(ctx->bundle.n + 1, sizeof *ctx->mods);
  if (!ctx->mods) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot create GPU context: out of memory");
    goto fail;
  }
  /* The device's rows of the table (the table's only GPU when the name is
   * unknown); a GPU the table lacks loads an empty selector. */
  if ((st = tsr_select_open(o->db_path, name[0] ? name : NULL, name[0] ? ctx->num_sms : 0,
                            &ctx->selector, err)))
    goto fail;
  settle_rows(ctx);
  *out = ctx;
  return TSR_OK;
fail:
  tsri_context_release(ctx);
  return st;
}

/* ---- Selection ------------------------------------------------------------ */

/* The variant the bundle runs for a plan of dtype, head dim and tile on
 * arch (membership code allowed), or NULL. */
static const tsr_variant *route_pick(const tsr_bundle *b, const char *arch, int64_t smem, tsr_dtype dt,
                                     int head_dim, int tm, int tn)
{
  tsr_variant_need need = {0};
  long i;
  need.dtype = dt;
  need.head_dim = head_dim;
  need.bm = tm;
  need.bn = tn;
  need.membership = 1;
  i = tsri_bundle_pick(b, arch, &need, smem);
  return i < 0 ? NULL : &b->items[i].v;
}

void tsri_context_route(const tsr_bundle *b, const char *arch, int64_t smem, const tsr_features *f,
                        tsr_selection *out)
{
  tsr_plan_opts *o = &out->opts;
  const tsr_variant *v128, *v64;
  int tm = o->tile_m, tn = o->tile_n;
  size_t n;
  /* A variant named by the table (timed so) or the caller, an FP8 plan
   * (sm90 only), or a fallback to a tile or mapping the caller fixed keeps
   * its plan. */
  if (o->variant || o->precision != TSR_PREC_NATIVE || (f->head_dim != 128 && f->head_dim != 64))
    return;
  if (!out->from_table && (o->mapping != TSR_MAP_AUTO || tm || tn))
    return;
  if (!tm && !tn) {
    /* the automatic planner's tile (tsri_map_resolve): the blocks when
     * they are a built tile shape, else 128 x 128 */
    int kept = (f->bq == 64 || f->bq == 128) && (f->bk == 64 || f->bk == 128);
    tm = kept ? (int)f->bq : 128;
    tn = kept ? (int)f->bk : 128;
  }
  if (tm != 128 || tn != 128)
    return;
  /* The sm80 family holds 128 x 128 at head dim 128 only with 16-row warps
   * (O, scores and Q of 32 rows do not fit 255 registers): 0.79-0.83x FA2
   * dense on the H200, where 128 x 64 tiles on 32-row warps ran
   * 0.99-1.06x on the same masks (notes/sm80.md).  At head dim 64 the
   * 32-row 128 x 64 variant takes the fused softmax schedule that the
   * 128 x 128 one cannot hold (templates/attn_sm80.cuh, FUSED_PV): 1.09-1.12x
   * it on the same 128 x 128 block masks (H100, notes/sm80.md 2026-12-07).
   * So where the sm80 family serves both (every target but sm_90a; sm_90a
   * too when its bundle holds only the sm80 family), the plan takes
   * 128 x 64 tiles and the planner's mapping for them (128 x 128 blocks:
   * subdivided). */
  v128 = route_pick(b, arch, smem, (tsr_dtype)f->dtype, (int)f->head_dim, 128, 128);
  v64 = route_pick(b, arch, smem, (tsr_dtype)f->dtype, (int)f->head_dim, 128, 64);
  if ((v128 && v128->family != TSR_FAMILY_SM80) || !v64 || v64->family != TSR_FAMILY_SM80 ||
      v64->bm != 32 * v64->warps)
    return;
  o->tile_m = 128;
  o->tile_n = 64;
  o->mapping = TSR_MAP_AUTO;
  n = strlen(out->reason);
  snprintf(out->reason + n, sizeof out->reason - n, "; %s: 128x64 tiles (sm80 family, 32-row warps)", arch);
}

/* Why gather: retained blocks 64 keys wide (SpargeAttn's 128 x 64, VSA's
 * 64 x 64 cubes) run on tiles 64 keys wide, whose fixed costs per tile
 * make them about 17% slower per selected pair than 128 x 128 tiles on the
 * H200 (FA4 loses only 6%; BENCHMARKS.md has the device figures).  A
 * gather plan runs the same blocks on bq x 128 tiles of two selected
 * blocks each (plan_layout.h), wasting only half of a row's last tile when
 * its count is odd.  The upgrade applies after the table's pick, to what
 * the pick (or the fallback) chose: the same pairs on wider tiles, same
 * task layout, so the selection still never runs a plan slower than the
 * automatic one. */
int tsri_context_gather_applies(const tsr_features *f, const tsr_selection *sel)
{
  const tsr_plan_opts *o = &sel->opts;
  const int bq = (int)f->bq;
  int auto_tile = o->mapping == TSR_MAP_AUTO && ((!o->tile_m && !o->tile_n) ||
                                                 (o->tile_m == bq && o->tile_n == 64));
  if (o->precision != TSR_PREC_NATIVE || (f->bq != 128 && f->bq != 64) || f->bk != 64)
    return 0;
  /* A fallback to the caller's own variant, tile or mapping keeps them. */
  if (!sel->from_table && (o->variant || o->mapping != TSR_MAP_AUTO || o->tile_m || o->tile_n))
    return 0;
  /* Retain at bq x 64: the row's, or the automatic planner's for these blocks. */
  return auto_tile || (o->mapping == TSR_MAP_RETAIN && o->tile_m == bq && o->tile_n == 64);
}

/* The upgrade itself, only where the bundle has the kg variant: 64-row ones
 * exist at head dim 64 only (two tasks a CTA at d128 need 329 KB). */
int tsri_context_gather(const tsr_bundle *b, const char *arch, int64_t smem, int device,
                        const tsr_features *f, tsr_selection *out)
{
  tsr_plan_opts *o = &out->opts;
  tsr_variant_need need = {0};
  const char *knob = getenv("TESSERA_GATHER");
  const int bq = (int)f->bq;
  long i;
  size_t n;
  if (!device || (knob && !strcmp(knob, "0")) || !tsri_context_gather_applies(f, out))
    return 0;
  need.dtype = (tsr_dtype)f->dtype;
  need.head_dim = (int)f->head_dim;
  need.bm = bq;
  need.bn = 128;
  need.gather = 1;
  i = tsri_bundle_pick(b, arch, &need, smem);
  if (i < 0 || !b->items[i].v.gather) /* kg variants only, whatever the pick's rule */
    return 0;
  o->mapping = TSR_MAP_GATHER;
  o->tile_m = bq;
  o->tile_n = 128;
  o->variant = NULL; /* the table's was a bq x 64 build: the upload picks the kg one */
  out->variant[0] = '\0';
  n = strlen(out->reason);
  snprintf(out->reason + n, sizeof out->reason - n, "; gather: %dx64 blocks on %dx128 tiles (%s)", bq, bq,
           b->items[i].name);
  return 1;
}

const tsr_selector *tsr_context_selector(const tsr_context *ctx) { return ctx ? ctx->selector : NULL; }

tsr_status tsr_context_select_features(tsr_context *ctx, const tsr_features *f,
                                       const tsr_plan_opts *base, tsr_selection *out, tsr_error *err)
{
  tsr_plan_opts b;
  tsr_status st;
  if (!ctx || !f || !out)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot select a plan: %s is NULL",
                         !ctx ? "context" : !f ? "features" : "output");
  if (base)
    b = *base;
  else
    tsr_plan_opts_init(&b);
  if (!b.num_sms)
    b.num_sms = ctx->num_sms;
  /* The rows were settled against the bundle at create. */
  if ((st = tsr_select_request(ctx->selector, f, &b, out, err)))
    return st;
  tsri_context_route(&ctx->bundle, ctx->arch, ctx->smem_optin, f, out);
  /* On the device only: a host-only context's selection is the CPU path's,
   * which keeps its plans (gather when asked for). */
  tsri_context_gather(&ctx->bundle, ctx->arch, ctx->smem_optin, ctx->pctx != NULL, f, out);
  return TSR_OK;
}

tsr_status tsr_context_select(tsr_context *ctx, const tsr_problem *p, const tsr_mask *m,
                              const tsr_plan_opts *base, tsr_selection *out, tsr_error *err)
{
  tsr_features f;
  tsr_status st;
  if (!ctx || !p || !m || !out)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot select a plan: %s is NULL",
                         !ctx ? "context" : !p ? "problem" : !m ? "mask" : "output");
  st = tsr_features_compute(p, m, base && base->num_sms ? base->num_sms : ctx->num_sms, &f, err);
  return st ? st : tsr_context_select_features(ctx, &f, base, out, err);
}

/* ---- The regime of a GPU plan template ------------------------------------ */

tsr_status tsri_context_regime(tsr_context *ctx, const tsr_features *f, const tsr_gpuplan_stats *s,
                              const tsr_problem *p, int cur_tm, int cur_tn, tsr_precision prec,
                              tsr_gpuplan_regime *out, tsr_error *err)
{
  tsr_plan_opts base;
  tsr_status st;
  memset(out, 0, sizeof *out);
  out->sel.level = -1;
  out->sel.row_id = -1;
  if (s->step == 0 || s->overflow) {
    snprintf(out->sel.reason, sizeof out->sel.reason, "%s: keep the current template",
             s->step == 0 ? "no completed step yet" : "the latest step overflowed a capacity");
    return TSR_OK;
  }
  tsr_plan_opts_init(&base);
  base.precision = prec;
  if ((st = tsr_context_select_features(ctx, f, &base, &out->sel, err)))
    return st;
  out->changed = 1;
  out->opts = out->sel.opts;
  out->opts.variant = out->sel.variant[0] ? out->sel.variant : NULL;
  out->opts.tasks = TSR_TASKS_ROW; /* the GPU planner's default; pack is host-only */
  if (out->sel.from_table && out->sel.opts.tasks == TSR_TASKS_SPLIT) {
    /* The host planner splits into chunks of the mean row: estimated from
     * this step's tiles, counted in the selected tile's key tiles, rounded
     * half to even. */
    int64_t rows = p->batch * p->heads_q * ((p->seq_q + cur_tm - 1) / cur_tm);
    double chunk = nearbyint((double)s->tiles / (double)(rows > 1 ? rows : 1) * (double)cur_tn /
                             (double)out->opts.tile_n);
    out->opts.tasks = TSR_TASKS_SPLIT;
    out->opts.split_tiles = chunk < 1 ? 1 : chunk > INT_MAX ? INT_MAX : (int)chunk;
  }
  return TSR_OK;
}

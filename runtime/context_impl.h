/*
 * context_impl.h: the context's internals, shared by the module that owns
 * it and its selection (context.c) and the one that runs plans on it
 * (gpu.c).  Not installed.
 *
 * A context is created once per device: the driver, the kernel bundle for
 * the device's target, the modules loaded so far, and the lookup table
 * whose rows were checked against that bundle at create.
 */
#ifndef TSR_CONTEXT_IMPL_H
#define TSR_CONTEXT_IMPL_H

#include "bundle.h"
#include "cuda_impl.h"

/* A bundle variant's module, loaded on its first launch (gpu.c). */
typedef struct {
  CUmodule mod;
  CUfunction attn, merge;
  CUfunction kvstats, quant; /* FP8 variants: the quantization kernels (gpu.c) */
  int occupancy; /* resident CTAs a multiprocessor */
} tsr_loaded_variant;

struct tsr_context {
  tsr_cu cu;
  CUdevice dev;
  CUcontext pctx;         /* NULL for a host-only context */
  int refs;               /* the caller's handle + plans holding device copies */
  char arch[16];
  int cc_major, cc_minor, num_sms;
  int64_t smem_optin;     /* dynamic shared memory a block may opt into */
  tsr_bundle bundle;
  tsr_loaded_variant *mods; /* per bundle entry */
  tsr_selector *selector; /* the device's lookup table, rows resolved against the bundle */
};

/* A plan's device copies hold a reference (gpu.c); the last release frees
 * the context. */
void tsri_context_retain(tsr_context *ctx);
void tsri_context_release(tsr_context *ctx);

/* The one rule for whether bundle entry e can run a plan needing `need` on
 * this context's device (tsri_bundle_serves with the device's target and
 * shared memory): used by the selection, the upload and the sweep. */
int tsri_context_serves(const tsr_context *ctx, const tsr_bundle_entry *e,
                       const tsr_variant_need *need);

/* The sm80 family's tile (issue 17): a selection that would run 128 x 128
 * tiles at head dim 128 through the sm80 family on `arch` (what bundle b
 * picks there within smem bytes a block) takes 128 x 64 tiles on 32-row
 * warps instead, unless a variant, an FP8 precision or the caller's
 * mapping fixes the plan; the reason says so.  Everything else, and every
 * plan the sm90 family serves, is left as it is. */
void tsri_context_route(const tsr_bundle *b, const char *arch, int64_t smem, const tsr_features *f,
                        tsr_selection *out);

/* The gather upgrade (the why is in context.c): on a device (device != 0),
 * unless TESSERA_GATHER=0, a native-precision selection for uniform
 * 128 x 64 blocks that would retain them on 128 x 64 tiles (a table row's
 * retain 128x64, or a fallback to the automatic planner with the tile
 * open) becomes TSR_MAP_GATHER on 128 x 128 tiles, same task layout, when
 * bundle b has a kg variant serving it on `arch` (within smem bytes); the
 * table's variant name is dropped (the upload picks the kg one) and the
 * reason says so.  A caller's fixed variant, tile or mapping on a
 * fallback is kept.  Returns 1 when it upgraded.  The one place of the
 * rule: tsr_context_select_features applies it after tsri_context_route. */
int tsri_context_gather(const tsr_bundle *b, const char *arch, int64_t smem, int device,
                        const tsr_features *f, tsr_selection *out);
/* The rule's part that needs no bundle or device: whether selection sel
 * for features f is one the upgrade applies to (native precision, bq x 64
 * blocks with bq 64 or 128, retain at bq x 64 or the automatic planner's
 * open tile, and not a fallback to the caller's own plan options).  The
 * profiler's report replays it. */
int tsri_context_gather_applies(const tsr_features *f, const tsr_selection *sel);

/* The regime policy from its inputs (tsr_gpuplan_reselect's core, testable
 * without a device): f are the features of the template's latest completed
 * step s, planned for problem p at tile cur_tm x cur_tn in precision prec
 * (which the regime keeps). */
tsr_status tsri_context_regime(tsr_context *ctx, const tsr_features *f, const tsr_gpuplan_stats *s,
                              const tsr_problem *p, int cur_tm, int cur_tn, tsr_precision prec,
                              tsr_gpuplan_regime *out, tsr_error *err);

#endif

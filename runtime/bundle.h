/*
 * bundle.h: the kernel bundle that tessera-gen writes and libtessera loads:
 *     <dir>/registry.json              variants, parameters, per-target hashes
 *     <dir>/<arch>/<variant>.cubin     the plain ELF that NVRTC returned
 * Not installed.
 *
 * registry.json: {"format": 1, "generator": "1", "nvrtc": "13.0",
 *   "layout_version": 2, "variants": [{"name", "family", "dtype",
 *   "head_dim", "bm", "bn", "stages", "warps", "warpgroups", "layout",
 *   "membership", "tma_box", "threads", "smem",
 *   "targets": {"sm_90a": {"cubin": "sm_90a/<name>.cubin",
 *                          "hash": "<16 hex>", "options": "..."}, ...}}],
 *   "planner": {"sm_90a": {"cubin": "sm_90a/tsr_plan.cubin", ...}, ...}}
 * "planner" lists the GPU planner's module (templates/plan_gpu.cuh) per target.
 * The loader checks that each name parses and agrees with its fields.
 */
#ifndef TSR_BUNDLE_H
#define TSR_BUNDLE_H

#include "plan_layout.h"
#include "variant.h"

#include <stddef.h>

#define TSR_BUNDLE_FORMAT 1

typedef struct {
  tsr_variant v;
  char name[TSR_VARIANT_NAME_MAX];
  int threads;
  int64_t smem;
  unsigned targets;                   /* bit i: tsri_variant_archs[i] built */
  char hash[TSR_N_ARCHS][17];
} tsr_bundle_entry;

typedef struct {
  char *dir;
  char nvrtc[16];
  char generator[16];
  tsr_bundle_entry *items;
  size_t n;
  unsigned planner;                   /* bit i: <arch i>/tsr_plan.cubin built */
} tsr_bundle;

/* Where the bundle is: `asked` (a caller's folder) when given, else
 * $TESSERA_BUNDLE when set, else `local` (a tool's own fallback, such as
 * the build's bundle beside the binary; may be NULL), else the installed
 * one (TSR_PKGLIBDIR/bundle).  The one rule for every loader: the context,
 * the sweep and the demo.  Returns one of those strings (or the
 * environment's), not a copy. */
const char *tsri_bundle_dir(const char *asked, const char *local);
/* Reads <dir>/registry.json. */
tsr_status tsri_bundle_load(const char *dir, tsr_bundle *out, tsr_error *err);
void tsri_bundle_free(tsr_bundle *b);
/* Index of the variant called `name`, or -1. */
long tsri_bundle_find(const tsr_bundle *b, const char *name);
/* Whether entry e can run a plan needing `need` on a device of target
 * `arch` that lets a block use `smem_limit` bytes of shared memory: built
 * for arch, within the limit, and serving the plan's dtype, head dim, tile
 * and membership (tsri_variant_serves).  The one rule behind every choice
 * of a variant (tsri_context_serves gives it the device's arch and limit). */
int tsri_bundle_serves(const tsr_bundle_entry *e, const char *arch, int64_t smem_limit,
                      const tsr_variant_need *need);
/* Best variant serving `need` on `arch` within `smem_limit` bytes, or -1. */
long tsri_bundle_pick(const tsr_bundle *b, const char *arch, const tsr_variant_need *need,
                     int64_t smem_limit);
/* A cubin's bytes (malloc'ed). */
tsr_status tsri_bundle_read_cubin(const tsr_bundle *b, size_t idx, const char *arch,
                                 void **data, size_t *size, tsr_error *err);
/* The GPU planner's cubin for `arch` (malloc'ed); TSR_ERR_NO_VARIANT when
 * the bundle has none. */
tsr_status tsri_bundle_read_planner(const tsr_bundle *b, const char *arch, void **data, size_t *size,
                                   tsr_error *err);

#endif

/*
 * catalog.h: the kernel catalog (gen/catalog.json) read with Jansson into
 * a list of variants.  Used by tessera-gen and its tests; not installed.
 *
 * Format: {"version": 1, "variants": [entry, ...]} where an entry names
 * one variant or a small cross product of them:
 *   {"family": "sm80", "dtype": ["bf16", "fp16"], "head_dim": [64, 128],
 *    "tile": [[64, 64], [128, 64]], "stages": 2, "warps": 4,
 *    "layout": "pers", "membership": true}
 * dtype, head_dim and tile take one value or a list.  sm90 entries give
 * "warpgroups" instead of "warps" and may give "tma_box"; "precision" is
 * "native" (the default: products in the dtype) or "fp8" (sm90 only: int8
 * Q K^T and e4m3 P V products of quantized copies, issue 18).  Unknown keys,
 * wrong types, invalid parameters and duplicate variants are errors.
 */
#ifndef TSR_CATALOG_H
#define TSR_CATALOG_H

#include "variant.h"

#include <stddef.h>

typedef struct {
  tsr_variant v;
  char name[TSR_VARIANT_NAME_MAX];
} tsr_catalog_entry;

typedef struct {
  tsr_catalog_entry *items;
  size_t n;
} tsr_catalog;

/* Parses catalog text; `label` names it in errors (a file name). */
tsr_status tsr_catalog_parse(const char *text, const char *label, tsr_catalog *out,
                             tsr_error *err);
tsr_status tsr_catalog_load(const char *path, tsr_catalog *out, tsr_error *err);
void tsr_catalog_free(tsr_catalog *c);

#endif

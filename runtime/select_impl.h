/*
 * select_impl.h: what the context (context.c) needs of a selector beyond
 * tessera.h: each lookup row's plan, and a way to record, once at
 * tsr_context_create, what becomes of the row on the context's device.
 * Not installed.
 */
#ifndef TSR_SELECT_IMPL_H
#define TSR_SELECT_IMPL_H

#include "tessera.h"

/* What the request path does with a row on one device. */
typedef enum {
  TSR_ROW_RUNS,        /* as it is, its variant (if it names one) included */
  TSR_ROW_ANY_VARIANT, /* its plan without its variant name: tsr_gpu_upload picks the
                          bundle's own for the tile (the named build is not there, or
                          cannot serve the plan on this device) */
  TSR_ROW_NO_KERNEL    /* no variant of the bundle serves its tile: the fallback */
} tsr_row_fate;

/* A row's plan, as the bundle check needs it (strings belong to s). */
typedef struct {
  tsr_dtype dtype;
  int head_dim;
  tsr_mapping mapping;
  int tile_m, tile_n;
  const char *variant; /* "" when the row names none */
} tsr_row_view;

/* Row i (0 <= i < tsr_select_rows) of s. */
void tsri_select_row_view(const tsr_selector *s, int64_t i, tsr_row_view *out);
/* Records row i's fate; `note` (may be NULL) is appended to the row's
 * reason text, which every selection of the row then gives as it is. */
void tsri_select_row_settle(tsr_selector *s, int64_t i, tsr_row_fate fate, const char *note);

#endif

/*
 * profile.h: internals of tessera-profile, shared by its command (main),
 * the sweep, the table derivation, the report and the tests.  Not installed.
 *
 * Prefixes: tsrp_sweep_* (sweep.c), tsrp_build_* (build.c), tsrp_eval_* and
 * tsrp_report_* (report.c), tsrp_png_* (png.c), tsrp_help (help.c).
 */
#ifndef TSRP_PROFILE_H
#define TSRP_PROFILE_H

#include <stdio.h>

#include "tools.h"

/* ---- Derivation of the lookup table (build.c) -------------------------- */

typedef struct {
  const char *gpu;   /* GPU name; NULL = every GPU with measurements */
  const char *split; /* masks the table is derived from; NULL = "profile" */
} tsrp_build_opts;

typedef struct {
  int gpus;          /* tables written */
  int64_t masks;     /* masks with features and timings used */
  int64_t measurements;
  int64_t rows;      /* lookup rows written */
} tsrp_build_stats;

/* Derives the lookup table for each GPU from its current measurements
 * (timings of superseded variant builds are ignored) and replaces that GPU's
 * rows in one transaction. */
tsr_status tsrp_build_run(tsr_db *db, const tsrp_build_opts *o, tsrp_build_stats *stats,
                          tsr_error *err);

/* One mask's timings as the derivation and the evaluation see them. */
typedef struct {
  int64_t mask_id;
  char path[256], family[64];
  tsr_features f;
  int64_t *plan_ids; /* measured ok, current variant builds */
  double *ms;        /* median per plan */
  int n;
} tsrp_mask_times;

typedef struct {
  int64_t id;
  tsr_mapping mapping;
  int tile_m, tile_n;
  tsr_tasks tasks;
  char variant[96];
  int dtype, head_dim; /* the variant's (0 for an unparsed name) */
  int membership;      /* the variant has membership code (mb) */
  int rank;            /* tsri_variant_rank on the GPU's arch (-1: unparsed name) */
} tsrp_plan_row;

typedef struct {
  char gpu[128];
  char arch[32]; /* the GPU's, as the gpus table names it */
  int multiprocessors;
  tsrp_mask_times *masks;
  int64_t n_masks;
  tsrp_plan_row *plans;
  int64_t n_plans;
  int64_t measurements;
} tsrp_dataset;

/* Loads the current timings of one GPU (name, multiprocessors) for masks of
 * `split` that have features.  Free with tsrp_build_free. */
tsr_status tsrp_build_load(tsr_db *db, const char *gpu, int multiprocessors, const char *split,
                           tsrp_dataset *ds, tsr_error *err);
void tsrp_build_free(tsrp_dataset *ds);
/* Index into ds->plans of a plan id; -1 if unknown. */
int64_t tsrp_build_plan_index(const tsrp_dataset *ds, int64_t plan_id);
/* Time of the best measured plan of m; 0 when none. */
double tsrp_build_best(const tsrp_mask_times *m, int64_t *plan_id);
/* Time of the plan matching opts (mapping, tile, tasks; variant when set). */
double tsrp_build_time_of(const tsrp_dataset *ds, const tsrp_mask_times *m,
                          const tsr_plan_opts *o);
/* Time of the plan matching opts on the variant the request path runs
 * without a row: the timed one of the highest tsri_variant_rank. */
double tsrp_build_auto_time_of(const tsrp_dataset *ds, const tsrp_mask_times *m,
                               const tsr_plan_opts *o);

/* ---- Evaluation and report (report.c) ---------------------------------- */

/* Masks of at least this density (the features' fraction of token pairs
 * kept) count as dense: warm-up steps and full attention, where every
 * candidate computes the same tiles and the speed-up over the direct plan
 * is 1 by construction.  The sparse_* figures leave them out. */
#define TSRP_SPARSE_DENSITY 0.95

/* Selected against automatic (the plan the request path runs without a
 * table, on the variant the bundle ranks first): masks with both timed, geometric
 * mean of t(automatic) / t(selected), masks more than 2% slower than
 * automatic, and the lowest ratio. */
typedef struct {
  int64_t masks;
  double geo_speedup;
  int64_t slower;
  double worst;
} tsrp_auto_figures;

typedef struct {
  int64_t masks;           /* eval masks with timings */
  int64_t unmeasured;      /* eval masks whose selected plan was not timed */
  int64_t from_table;      /* selections that hit a table row */
  double within5;          /* fraction of masks with t(selected) <= 1.05 t(best) */
  double geo_regret;       /* geometric mean of t(selected) / t(best) - 1 */
  double geo_speedup;      /* geometric mean of t(direct) / t(selected) */
  double geo_best_speedup; /* the same for the best plan (the ceiling) */
  /* The same four over the masks of density < TSRP_SPARSE_DENSITY only
   * (0 when there are none). */
  int64_t sparse_masks;
  double sparse_within5, sparse_geo_regret, sparse_geo_speedup, sparse_geo_best_speedup;
  tsrp_auto_figures vs_auto, sparse_vs_auto;
  /* The same figures for the plans GPU-planned requests run
   * (tsr_gpuplan_reselect): selected from the features a GPU template
   * publishes (fill known at its own tile only), pack run as row, with
   * tsr_gpuplan_hold_step judging switches by the sweep's times, from the
   * automatic template on: the mean time of steps 8 to 64.  gpu_other:
   * masks whose time differs from the selection above; gpu_cycles: masks
   * whose templates alternate (more switches than a held template's
   * retries); gpu_held: masks on which the hold refused a selection. */
  int64_t gpu_masks, gpu_other, gpu_cycles, gpu_held;
  double gpu_within5, gpu_geo_regret, gpu_geo_speedup, gpu_geo_best_speedup;
  tsrp_auto_figures gpu_vs_auto;
} tsrp_eval_stats;

/* Selects a plan for each mask of `split` through the lookup table in db
 * and compares it with the best measured plan and the direct (base) plan.
 * csv (may be NULL) receives one line per mask. */
tsr_status tsrp_eval_run(tsr_db *db, const char *gpu, int multiprocessors, const char *split,
                         FILE *csv, tsrp_eval_stats *st, tsr_error *err);

/* Writes regime.png, speedup.png, selection.csv and summary.csv (the
 * figures of all masks and of the sparse ones) into dir; log (may be NULL)
 * receives the figures as text.  split: the masks to replay selection on;
 * NULL = eval, or profile when eval has no timings.  A split named but
 * without timings is TSR_ERR_INVALID. */
tsr_status tsrp_report_write(tsr_db *db, const char *gpu, const char *split, const char *dir,
                             FILE *log, tsr_error *err);

/* Writes the GPU's lookup rows (and GPU and meta rows) as SQL INSERTs that
 * load over db/schema.sql: the format of db/h200.sql.  gpu NULL = all. */
tsr_status tsrp_report_export(tsr_db *db, const char *gpu, FILE *f, int64_t *rows,
                              tsr_error *err);

/* ---- PNG writer (png.c) ------------------------------------------------ */

/* An RGB canvas. */
typedef struct {
  int w, h;
  unsigned char *px; /* w * h * 3 */
} tsrp_png_image;

tsr_status tsrp_png_new(tsrp_png_image *im, int w, int h, tsr_error *err);
void tsrp_png_free(tsrp_png_image *im);
void tsrp_png_rect(tsrp_png_image *im, int x, int y, int w, int h, unsigned rgb);
/* 5x7 bitmap text (digits, letters, a few symbols), scale >= 1. */
void tsrp_png_text(tsrp_png_image *im, int x, int y, int scale, unsigned rgb, const char *s);
/* Writes an 8-bit RGB PNG (zlib-compressed) atomically: through a
 * temporary file renamed into place, removed on any failure. */
tsr_status tsrp_png_write(const tsrp_png_image *im, const char *path, tsr_error *err);

/* ---- Usage (help.c) ---------------------------------------------------- */

/* Prints the usage of command `cmd` ("sweep", "build", ...) with its
 * options, or with cmd NULL the overview of every command.  Returns 0, or
 * -1 (nothing printed) for an unknown command. */
int tsrp_help(FILE *f, const char *cmd);

#endif

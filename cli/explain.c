/*
 * explain.c: the text `tessera plan --select --explain` and `tessera run
 * --explain` print for a selection: the mask's features, its region of
 * the lookup table, the plan selected and why.  One printer, so the two
 * commands cannot drift apart.  Cost: a few printf calls.
 */
#include "cli.h"

void cli_print_selection(const tsr_features *f, const tsr_selection *c)
{
  int i, tm, tn;
  printf("features: density %.4f (blocks %.4f), row spread %.3f, empty rows %.3f, rows per "
         "SM %.2f\n",
         f->density, f->block_density, f->row_cv, f->empty_rows, f->rows_per_sm);
  printf("features: fill");
  for (i = 0; i < TSR_FEATURE_TILES; i++) {
    tsr_features_tile(i, &tm, &tn);
    printf(" %dx%d %.3f (%lld tiles)", tm, tn, f->fill[i], (long long)f->touched[i]);
  }
  printf("\nregion: %s d%d blocks %dx%d, seq bin %d, density bin %d, spread bin %d, fill bin "
         "%d\n",
         tsr_dtype_name((tsr_dtype)c->region.dtype), c->region.head_dim, c->region.bq,
         c->region.bk, c->region.seq_bin, c->region.density_bin, c->region.spread_bin,
         c->region.fill_bin);
  if (c->opts.tile_m || c->opts.mapping != TSR_MAP_AUTO || c->opts.tasks != TSR_TASKS_AUTO)
    printf("selected: %s %dx%d %s%s%s\n", tsr_plan_mapping_name(c->opts.mapping),
           c->opts.tile_m, c->opts.tile_n, tsr_plan_tasks_name(c->opts.tasks),
           c->variant[0] ? ", variant " : "", c->variant);
  else
    printf("selected: the automatic planner's plan\n");
  printf("reason: %s\n", c->reason);
}

/*
 * cli_hooks.c: the test hooks of the `tessera` command (cli/cli.h), linked
 * only into tests/tessera-test, the command built with TSR_CLI_TEST_HOOKS.
 * TSR_TEST_DAMAGE names the damage:
 *   drop    the first non-empty task loses its last tile (plan, demo)
 *   dup     the first task of two tiles or more walks its first key tile
 *           twice (plan)
 *   bit     the first membership word has its lowest bit flipped (plan)
 *   output  one output element moves by 1% of the largest (demo)
 * so that verification fails, naming the violation, and the demo's
 * comparison fails, each reaching the table and the exit status.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plan_impl.h"

static int damage(const char *what)
{
  const char *how = getenv("TSR_TEST_DAMAGE");
  return how && !strcmp(how, what);
}

void cli_test_damage_plan(tsr_plan *pl)
{
  int64_t i;
  for (i = 0; i < pl->n_tasks; i++) {
    tsr_task_rec *t = &pl->tasks[i];
    if (damage("drop") && t->tile_end > t->tile_begin) {
      t->tile_end--;
      return;
    }
    if (damage("dup") && t->tile_end - t->tile_begin >= 2) {
      pl->tiles[t->tile_begin + 1].k_tile = pl->tiles[t->tile_begin].k_tile;
      return;
    }
  }
  for (i = 0; damage("bit") && i < pl->n_tiles; i++)
    if (pl->tiles[i].mem >= 0) {
      pl->membership[pl->tiles[i].mem] ^= 1u;
      return;
    }
}

void cli_test_damage_output(tsr_array *out)
{
  float *x = out->data, big = 0;
  int64_t i, n = 1;
  if (!damage("output") || out->dtype != TSR_DT_F32 || !x)
    return;
  for (i = 0; i < out->ndim; i++)
    n *= out->shape[i];
  for (i = 0; i < n; i++)
    big = fabsf(x[i]) > big ? fabsf(x[i]) : big;
  x[n / 2] += 0.01f * (big > 0 ? big : 1);
}

/*
 * plan_rows.h: two plans compared as what each problem row (batch, query
 * head, query tile) walks, byte for byte: its key tiles in order, full or
 * partial, the membership words of every partial tile, and (when asked)
 * its chunks' lengths; plus qblk (gather plans: both halves' key blocks,
 * no words).  Plans of different planners order tasks
 * differently (the host: groups, longest first, snake; the GPU: length
 * classes) and may share tile ranges between identical rows (the host), so
 * the raw arrays differ while every row's content must not.  Used by
 * tests/gpu_plan.c (device vs host planner) and tests/check_gpuplan.c.
 * Cost: O(rows + tasks + tiles + words) memory and time.
 */
#ifndef TSR_TEST_PLAN_ROWS_H
#define TSR_TEST_PLAN_ROWS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

typedef struct {
  int64_t key; /* partial slot (chunk order), 0 for a whole row */
  int32_t tb, te;
} plan_rows_chunk;

typedef struct {
  int64_t rows;
  int64_t *off;          /* rows + 1: chunks of row r at [off[r], off[r + 1]) */
  plan_rows_chunk *c;
} plan_rows_index;

static int plan_rows_chunk_cmp(const void *a, const void *b)
{
  const plan_rows_chunk *x = a, *y = b;
  return x->key < y->key ? -1 : x->key > y->key;
}

static void plan_rows_free(plan_rows_index *ix)
{
  free(ix->off);
  free(ix->c);
}

/* Row index of member m; -1 when out of range. */
static int64_t plan_rows_row(const tsr_plan *pl, const tsr_member_rec *m)
{
  if (m->batch < 0 || m->batch >= pl->problem.batch || m->head < 0 || m->head >= pl->problem.heads_q ||
      m->q_tile < 0 || m->q_tile >= pl->n_q_tiles)
    return -1;
  return ((int64_t)m->batch * pl->problem.heads_q + m->head) * pl->n_q_tiles + m->q_tile;
}

static int plan_rows_build(const tsr_plan *pl, plan_rows_index *ix, char *why, size_t n)
{
  int64_t i, k, total = 0;
  ix->rows = pl->problem.batch * pl->problem.heads_q * pl->n_q_tiles;
  ix->off = calloc((size_t)ix->rows + 1, sizeof *ix->off);
  ix->c = NULL;
  if (!ix->off) return snprintf(why, n, "out of memory"), 1;
  for (i = 0; i < pl->n_tasks; i++) {
    const tsr_task_rec *t = &pl->tasks[i];
    if (t->n_members < 1 || t->member_begin < 0 || t->member_begin + t->n_members > pl->n_members ||
        t->tile_begin < 0 || t->tile_end < t->tile_begin || t->tile_end > pl->n_tiles)
      return snprintf(why, n, "task %lld has bad ranges", (long long)i), 1;
    for (k = 0; k < t->n_members; k++) {
      int64_t r = plan_rows_row(pl, &pl->members[t->member_begin + k]);
      if (r < 0) return snprintf(why, n, "task %lld: member %lld out of range", (long long)i, (long long)k), 1;
      ix->off[r + 1]++;
      total++;
    }
  }
  for (i = 0; i < ix->rows; i++) ix->off[i + 1] += ix->off[i];
  ix->c = malloc((size_t)(total ? total : 1) * sizeof *ix->c);
  if (!ix->c) return snprintf(why, n, "out of memory"), 1;
  {
    int64_t *fill = calloc((size_t)ix->rows + 1, sizeof *fill);
    if (!fill) return snprintf(why, n, "out of memory"), 1;
    for (i = 0; i < pl->n_tasks; i++) {
      const tsr_task_rec *t = &pl->tasks[i];
      for (k = 0; k < t->n_members; k++) {
        int64_t r = plan_rows_row(pl, &pl->members[t->member_begin + k]);
        plan_rows_chunk *c = &ix->c[ix->off[r] + fill[r]++];
        c->key = t->partial < 0 ? 0 : (int64_t)t->partial + k;
        c->tb = t->tile_begin;
        c->te = t->tile_end;
      }
    }
    free(fill);
  }
  for (i = 0; i < ix->rows; i++)
    qsort(ix->c + ix->off[i], (size_t)(ix->off[i + 1] - ix->off[i]), sizeof *ix->c, plan_rows_chunk_cmp);
  return 0;
}

/* Membership words of a partial tile of query tile t. */
static int64_t plan_rows_words(const tsr_plan *pl, int64_t t)
{
  int64_t r0 = t * pl->tile_m, r1 = r0 + pl->tile_m < pl->problem.seq_q ? r0 + pl->tile_m : pl->problem.seq_q;
  return (int64_t)(pl->qblk[r1 - 1] - pl->qblk[r0] + 1) * (pl->tile_n / 32);
}

/* 0 when every row of a and b walks the same tiles and membership words
 * (and, with `chunks`, in chunks of the same lengths) and qblk is equal;
 * else 1 with the first difference in why. */
static int plan_rows_diff(const tsr_plan *a, const tsr_plan *b, int chunks, char *why, size_t n)
{
  plan_rows_index ia, ib;
  int64_t r, rows;
  int bad = 0, gather = a->mapping == TSR_MAP_GATHER;
  why[0] = '\0';
  if (a->problem.batch != b->problem.batch || a->problem.heads_q != b->problem.heads_q ||
      a->tile_m != b->tile_m || a->tile_n != b->tile_n || a->n_q_tiles != b->n_q_tiles)
    return snprintf(why, n, "different problems or tiles"), 1;
  if (gather != (b->mapping == TSR_MAP_GATHER))
    return snprintf(why, n, "one plan is gather, the other %s",
                    tsr_plan_mapping_name(gather ? b->mapping : a->mapping)), 1;
  if (a->n_qblk != b->n_qblk || memcmp(a->qblk, b->qblk, (size_t)a->n_qblk * sizeof *a->qblk))
    return snprintf(why, n, "qblk differs"), 1;
  memset(&ia, 0, sizeof ia);
  memset(&ib, 0, sizeof ib);
  if (plan_rows_build(a, &ia, why, n) || plan_rows_build(b, &ib, why, n)) {
    plan_rows_free(&ia);
    plan_rows_free(&ib);
    return 1;
  }
  rows = ia.rows;
  for (r = 0; r < rows && !bad; r++) {
    int64_t ca = ia.off[r], cb = ib.off[r], ea = ia.off[r + 1], eb = ib.off[r + 1];
    int64_t ta = ca < ea ? ia.c[ca].tb : 0, tb = cb < eb ? ib.c[cb].tb : 0, pos = 0;
    int64_t words = plan_rows_words(a, r % a->n_q_tiles);
    if (ca == ea || cb == eb) {
      bad = snprintf(why, n, "row %lld has no task in %s", (long long)r, ca == ea ? "the first" : "the second");
      break;
    }
    if (chunks && ea - ca != eb - cb) {
      bad = snprintf(why, n, "row %lld: %lld chunks vs %lld", (long long)r, (long long)(ea - ca),
                     (long long)(eb - cb));
      break;
    }
    for (;;) {
      const tsr_tile_rec *x, *y;
      while (ca < ea && ta == ia.c[ca].te)
        if (++ca < ea) ta = ia.c[ca].tb;
      while (cb < eb && tb == ib.c[cb].te)
        if (++cb < eb) tb = ib.c[cb].tb;
      if (ca == ea || cb == eb) {
        if (ca != ea || cb != eb)
          bad = snprintf(why, n, "row %lld: %s has more tiles after %lld", (long long)r,
                         ca != ea ? "the first" : "the second", (long long)pos);
        break;
      }
      if (chunks && (ta == ia.c[ca].tb) != (tb == ib.c[cb].tb)) {
        bad = snprintf(why, n, "row %lld: chunk boundaries differ at tile %lld", (long long)r, (long long)pos);
        break;
      }
      x = &a->tiles[ta++];
      y = &b->tiles[tb++];
      /* gather tiles: mem is the second half's key block (plan_layout.h) */
      if (x->k_tile != y->k_tile || (x->mem < 0) != (y->mem < 0) || (gather && x->mem != y->mem)) {
        bad = snprintf(why, n, "row %lld tile %lld: k tile %d/%d mem %d/%d", (long long)r, (long long)pos, x->k_tile,
                       y->k_tile, x->mem, y->mem);
        break;
      }
      if (x->mem >= 0 && !gather &&
          (x->mem + words > a->n_membership || y->mem + words > b->n_membership ||
           memcmp(a->membership + x->mem, b->membership + y->mem, (size_t)words * sizeof *a->membership))) {
        bad = snprintf(why, n, "row %lld tile %lld (k tile %d): membership words differ", (long long)r,
                       (long long)pos, x->k_tile);
        break;
      }
      pos++;
    }
  }
  plan_rows_free(&ia);
  plan_rows_free(&ib);
  return bad != 0;
}

#endif

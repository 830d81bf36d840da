/*
 * check_map.c: physical mapping and task organisation (map.c, tasks.c)
 * against facts the test derives itself from token-level masks:
 *  - a tile is emitted exactly when it holds a selected pair, it is full
 *    (no membership words) exactly when every in-bounds pair is selected;
 *  - the summary's tiles, partial tiles, selected and computed pairs and
 *    wasted fraction equal brute-force counts;
 *  - retain / combine / subdivide are chosen and reported as the geometry
 *    dictates, and refused with both sizes named when they cannot apply;
 *  - tasks: longest-first order, chunk limits, one merge per split row,
 *    GQA and empty-row packing, balance estimate;
 *  - gather: every row walks exactly its selected key blocks paired in
 *    ascending order (chunks in slot order), with the summary's counts
 *    derived from the mask alone.
 */
#include <check.h>
#include <time.h>

#include "plan_cases.h"
#include "plan_impl.h"
#include "plan_rows.h"

static tsr_plan *make_plan(const pc_case *c, int tm, int tn, tsr_mapping mp, tsr_tasks tk,
                           int split, int sms, tsr_status want)
{
  tsr_plan_opts o;
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  tsr_status st;
  tsr_plan_opts_init(&o);
  o.tile_m = tm;
  o.tile_n = tn;
  o.mapping = mp;
  o.tasks = tk;
  o.split_tiles = split;
  o.num_sms = sms;
  st = tsr_plan_create(&c->p, c->m, &o, &pl, &err);
  ck_assert_msg(st == want, "%s tile %dx%d %s/%s: status %s, want %s: %s", c->what, tm, tn,
                tsr_plan_mapping_name(mp), tsr_plan_tasks_name(tk), tsr_strerror(st),
                tsr_strerror(want), err.text);
  return pl;
}

/* Brute force: per problem row and key tile, whether the tile holds any
 * selected pair and whether all its pairs are selected; compares with the
 * tasks' tiles (through the members) and the summary. */
static void check_tiles_exact(const pc_case *c, const tsr_plan *pl)
{
  int64_t BM = pl->tile_m, BN = pl->tile_n, nqt = pl->n_q_tiles, nkt = pl->n_k_tiles;
  int64_t b, h, t, u, x, y, i, nrows = c->B * c->Hq * nqt;
  int64_t *rowtile = malloc((size_t)(nrows * nkt) * sizeof *rowtile); /* tile record or -1 */
  double sel = 0, comp = 0;
  int64_t tiles = 0, partial = 0;
  for (i = 0; i < nrows * nkt; i++)
    rowtile[i] = -1;
  for (i = 0; i < pl->n_tasks; i++) {
    const tsr_task_rec *tk = &pl->tasks[i];
    int64_t mi, ti;
    for (mi = 0; mi < tk->n_members; mi++) {
      const tsr_member_rec *mr = &pl->members[tk->member_begin + mi];
      int64_t r = ((int64_t)mr->batch * c->Hq + mr->head) * nqt + mr->q_tile;
      for (ti = tk->tile_begin; ti < tk->tile_end; ti++) {
        ck_assert_int_eq(rowtile[r * nkt + pl->tiles[ti].k_tile], -1);
        rowtile[r * nkt + pl->tiles[ti].k_tile] = ti;
      }
    }
  }
  for (b = 0; b < c->B; b++)
    for (h = 0; h < c->Hq; h++) {
      const uint8_t *plane =
          c->bits + ((c->mb == 1 ? 0 : b) * c->mh + (c->mh == 1 ? 0 : h)) * c->nq * c->nk;
      uint8_t *tok = tu_materialise(plane, c->nq, c->nk, c->qb, c->kb);
      for (x = 0; x < c->Sq * c->Sk; x++)
        sel += tok[x];
      for (t = 0; t < nqt; t++)
        for (u = 0; u < nkt; u++) {
          int64_t any = 0, all = 1, area = 0, ti = rowtile[((b * c->Hq + h) * nqt + t) * nkt + u];
          for (x = t * BM; x < (t + 1) * BM && x < c->Sq; x++)
            for (y = u * BN; y < (u + 1) * BN && y < c->Sk; y++) {
              any |= tok[x * c->Sk + y];
              all &= tok[x * c->Sk + y];
              area++;
            }
          ck_assert_msg(any == (ti >= 0), "%s: b %lld h %lld tile (%lld, %lld): selected %lld, emitted %d",
                        c->what, (long long)b, (long long)h, (long long)t, (long long)u,
                        (long long)any, ti >= 0);
          if (ti < 0)
            continue;
          ck_assert_msg((pl->tiles[ti].mem == -1) == (all == 1), "%s: tile (%lld, %lld) full %lld, mem %d",
                        c->what, (long long)t, (long long)u, (long long)all, pl->tiles[ti].mem);
          tiles++;
          partial += !all;
          comp += (double)area;
        }
      free(tok);
    }
  ck_assert_int_eq(pl->summary.tiles, tiles);
  ck_assert_int_eq(pl->summary.partial_tiles, partial);
  ck_assert(pl->summary.selected_pairs == sel);
  ck_assert(pl->summary.computed_pairs == comp);
  ck_assert(fabs(pl->summary.wasted_fraction - (sel > 0 ? (comp - sel) / sel : 0)) < 1e-12);
  free(rowtile);
}

/* Task invariants: order, chunk limit, members, merges. */
static void check_tasks(const pc_case *c, const tsr_plan *pl, tsr_tasks asked, int split)
{
  int64_t i, prev = INT64_MAX, prev_group = -1, split_rows = 0;
  int64_t per_kv = pl->problem.heads_q / pl->problem.heads_kv;
  for (i = 0; i < pl->n_tasks; i++) {
    const tsr_task_rec *t = &pl->tasks[i];
    /* Un-snake: odd rounds of num_sms tasks are reversed. */
    int64_t G = pl->num_sms, rnd = i / G, end = (rnd + 1) * G < pl->n_tasks ? (rnd + 1) * G : pl->n_tasks;
    int64_t j = rnd % 2 ? rnd * G + (end - 1 - i) : i;
    const tsr_task_rec *u = &pl->tasks[j];
    int64_t key = (int64_t)u->n_members * (u->tile_end - u->tile_begin);
    int64_t group = (int64_t)u->batch * pl->problem.heads_kv + u->head / per_kv;
    /* Groups (batch, KV head) in ascending order, longest first inside one. */
    ck_assert_msg(group >= prev_group, "%s: task %lld of group %lld after group %lld",
                  c->what, (long long)j, (long long)group, (long long)prev_group);
    if (group != prev_group)
      prev = INT64_MAX;
    ck_assert_msg(key <= prev, "%s: task %lld walks %lld tiles after %lld (not longest first)",
                  c->what, (long long)j, (long long)key, (long long)prev);
    prev = key;
    prev_group = group;
    ck_assert_int_le(t->n_members, TSR_PLAN_MAX_MEMBERS);
    if (split && (pl->task_layout == TSR_TASKS_SPLIT) && t->partial >= 0)
      ck_assert_int_le(t->tile_end - t->tile_begin, split);
    if (asked == TSR_TASKS_ROW)
      ck_assert_int_eq(t->n_members, 1);
    if (t->partial >= 0)
      ck_assert_int_eq(t->n_members, 1);
  }
  for (i = 0; i < pl->n_merges; i++) {
    ck_assert_int_ge(pl->merges[i].n_slots, 2);
    split_rows++;
  }
  ck_assert_int_eq(pl->summary.split_rows, split_rows);
  ck_assert_int_eq(pl->summary.tasks_count, pl->n_tasks);
  {
    tsr_plan_summary sm;
    tsr_plan_summarize(pl, &sm);
    ck_assert(sm.balance >= 1.0 - 1e-12);
  }
}

/* Gather plans (plan_layout.h) against the mask alone: every problem row
 * (its chunks in slot order) walks its query block's selected key blocks
 * j0 < j1 < ... as (j0, j1), (j2, j3), ..., (j_last, -1) when odd; the
 * summary counts ceil(n / 2) tiles a row, the selected pairs, and BN
 * computed columns a tile clipped at seq_k, a missing half computing the
 * first half's keys again (bq == BM: a query tile is a query block). */
static void check_gather_exact(const pc_case *c, const tsr_plan *pl)
{
  plan_rows_index ix;
  char why[160];
  int64_t b, h, t, bq = 0, bk = 0, tiles = 0;
  double sel = 0, comp = 0;
  ck_assert(tsr_geom_is_uniform(c->g, &bq, &bk));
  ck_assert_int_eq(pl->mapping, TSR_MAP_GATHER);
  ck_assert_int_eq(pl->tile_m, bq);
  ck_assert_int_eq(pl->tile_n, 2 * bk);
  ck_assert_int_eq(pl->n_q_tiles, c->nq);
  ck_assert_int_eq(pl->n_k_tiles, (c->nk + 1) / 2);
  ck_assert_int_eq(pl->n_membership, 0);
  ck_assert_int_eq(pl->summary.partial_tiles, 0);
  ck_assert_int_eq(pl->summary.combined + pl->summary.subdivided, 0);
  ck_assert_msg(!plan_rows_build(pl, &ix, why, sizeof why), "%s", why);
  for (b = 0; b < c->B; b++)
    for (h = 0; h < c->Hq; h++)
      for (t = 0; t < c->nq; t++) {
        const uint8_t *row = c->bits + (((c->mb == 1 ? 0 : b) * c->mh + (c->mh == 1 ? 0 : h)) * c->nq + t) * c->nk;
        int64_t r = (b * c->Hq + h) * c->nq + t, rows_t = c->qb[t + 1] - c->qb[t], j = 0, k, half = 0;
        int64_t want[2] = {-1, -1};
        for (k = ix.off[r]; k < ix.off[r + 1]; k++) {
          int64_t u;
          for (u = ix.c[k].tb; u < ix.c[k].te; u++) {
            const tsr_tile_rec *tr = &pl->tiles[u];
            for (half = 0; half < 2; half++) { /* the next two selected blocks, or -1 */
              while (j < c->nk && !row[j])
                j++;
              want[half] = j < c->nk ? j++ : -1;
            }
            ck_assert_msg(tr->k_tile == want[0] && tr->mem == want[1],
                          "%s: b %lld h %lld q block %lld: tile (%d, %d), want (%lld, %lld)", c->what,
                          (long long)b, (long long)h, (long long)t, tr->k_tile, tr->mem,
                          (long long)want[0], (long long)want[1]);
            comp += (double)rows_t * (double)(c->kb[want[0] + 1] - c->kb[want[0]] +
                                              (want[1] >= 0 ? c->kb[want[1] + 1] - c->kb[want[1]]
                                                            : c->kb[want[0] + 1] - c->kb[want[0]]));
            tiles++;
          }
        }
        while (j < c->nk && !row[j])
          j++;
        ck_assert_msg(j == c->nk, "%s: b %lld h %lld q block %lld: key block %lld selected, not walked",
                      c->what, (long long)b, (long long)h, (long long)t, (long long)j);
        for (j = 0; j < c->nk; j++)
          sel += row[j] ? (double)rows_t * (double)(c->kb[j + 1] - c->kb[j]) : 0.0;
      }
  ck_assert_int_eq(pl->summary.tiles, tiles);
  ck_assert(pl->summary.selected_pairs == sel);
  ck_assert(pl->summary.computed_pairs == comp);
  plan_rows_free(&ix);
}

START_TEST(test_map_gather)
{
  tu_rng r = {tu_seed("map_gather", 2718) + 7919u * (uint64_t)_i};
  pc_case c;
  tsr_plan *row;
  char why[200];
  int tk;
  ck_assert_int_eq(pc_make_gather(&r, &c), 0);
  row = make_plan(&c, 0, 0, TSR_MAP_GATHER, TSR_TASKS_ROW, 0, 0, TSR_OK);
  for (tk = 0; tk < 4; tk++) {
    int64_t bq = 0, bk = 0, nt = -1, nw = -1;
    int split = tk == TSR_TASKS_SPLIT || (tk == TSR_TASKS_AUTO && tu_uniform(&r) < 0.5) ? (int)tu_range(&r, 1, 3) : 0;
    int explicit_tile = tu_uniform(&r) < 0.5;
    tsr_plan *pl;
    tsr_error err = {0};
    ck_assert(tsr_geom_is_uniform(c.g, &bq, &bk));
    pl = make_plan(&c, explicit_tile ? (int)bq : 0, explicit_tile ? (int)(2 * bk) : 0, TSR_MAP_GATHER,
                   (tsr_tasks)tk, split, (int)tu_range(&r, 0, 16), TSR_OK);
    check_gather_exact(&c, pl);
    check_tasks(&c, pl, (tsr_tasks)tk, split);
    /* the capacity count: what the plan emits, or more where GQA heads share */
    ck_assert_int_eq(tsri_map_count(pl, c.m, &nt, &nw), 0);
    ck_assert_int_eq(nw, 0);
    if (c.mh > 1 && c.Hq > c.Hkv)
      ck_assert_int_ge(nt, pl->n_tiles);
    else
      ck_assert_msg(nt == pl->n_tiles, "%s: counted %lld tiles, emitted %lld", c.what, (long long)nt,
                    (long long)pl->n_tiles);
    ck_assert_msg(tsr_plan_verify(pl, c.m, &err) == TSR_OK, "%s %s split %d: %s", c.what,
                  tsr_plan_tasks_name((tsr_tasks)tk), split, err.text);
    /* every layout walks the row layout's tiles, row by row */
    ck_assert_msg(!plan_rows_diff(row, pl, 0, why, sizeof why), "%s %s: %s", c.what,
                  tsr_plan_tasks_name((tsr_tasks)tk), why);
    tsr_plan_destroy(pl);
  }
  tsr_plan_destroy(row);
  pc_free(&c);
}
END_TEST

START_TEST(test_map_random)
{
  tu_rng r = {tu_seed("map_random", 1234) + 104729u * (uint64_t)_i};
  pc_case c;
  int ti, mp, tk, ran = 0;
  ck_assert_int_eq(pc_make(&r, &c, 420), 0);
  for (ti = 0; ti < PC_NTILES; ti++)
    for (mp = 0; mp < 4; mp++)
      for (tk = 0; tk < 4; tk++) {
        int split = tk == TSR_TASKS_SPLIT ? (int)tu_range(&r, 0, 3) : 0;
        tsr_plan_opts o;
        tsr_plan *pl = NULL;
        tsr_error err = {0};
        tsr_status st;
        tsr_plan_opts_init(&o);
        o.tile_m = pc_tiles[ti][0];
        o.tile_n = pc_tiles[ti][1];
        o.mapping = (tsr_mapping)mp;
        o.tasks = (tsr_tasks)tk;
        o.split_tiles = split;
        o.num_sms = (int)tu_range(&r, 0, 16);
        st = tsr_plan_create(&c.p, c.m, &o, &pl, &err);
        if (st == TSR_ERR_UNSUPPORTED && mp != TSR_MAP_AUTO)
          continue;
        ck_assert_msg(st == TSR_OK, "%s: %s", c.what, err.text);
        ran++;
        {
          /* The capacity check's count: what the plan emits, or more where
           * GQA heads with identical rows share their tiles. */
          int64_t nt = -1, nw = -1;
          ck_assert_int_eq(tsri_map_count(pl, c.m, &nt, &nw), 0);
          if (c.mh > 1 && c.Hq > c.Hkv) {
            ck_assert_int_ge(nt, pl->n_tiles);
            ck_assert_int_ge(nw, pl->n_membership);
          } else {
            ck_assert_msg(nt == pl->n_tiles && nw == pl->n_membership,
                          "%s tile %dx%d: counted %lld tiles, %lld words; plan has %lld, %lld",
                          c.what, pl->tile_m, pl->tile_n, (long long)nt, (long long)nw,
                          (long long)pl->n_tiles, (long long)pl->n_membership);
          }
        }
        if (tk == TSR_TASKS_AUTO || ti == 2)
          check_tiles_exact(&c, pl);
        check_tasks(&c, pl, (tsr_tasks)tk, split);
        ck_assert_msg(tsr_plan_verify(pl, c.m, &err) == TSR_OK, "%s tile %dx%d %s/%s: %s", c.what,
                      pl->tile_m, pl->tile_n, tsr_plan_mapping_name((tsr_mapping)mp),
                      tsr_plan_tasks_name((tsr_tasks)tk), err.text);
        tsr_plan_destroy(pl);
      }
  ck_assert_int_ge(ran, PC_NTILES * 4);
  pc_free(&c);
}
END_TEST

/* A uniform case with given blocks and a random mask of density p. */
static void uniform_case(tu_rng *r, pc_case *c, int64_t S, int64_t bq, int64_t bk, int64_t H,
                         int64_t Hkv, int64_t mh, double p)
{
  tsr_error err = {0};
  memset(c, 0, sizeof *c);
  c->B = 1, c->Hq = H, c->Hkv = Hkv, c->Sq = c->Sk = S, c->D = 16, c->mb = 1, c->mh = mh;
  ck_assert_int_eq(tsr_geom_uniform(S, S, bq, bk, &c->g, &err), TSR_OK);
  c->nq = tu_uniform_bounds(S, bq, &c->qb);
  c->nk = tu_uniform_bounds(S, bk, &c->kb);
  c->bits = tu_rand_bits(r, (size_t)(mh * c->nq * c->nk), p);
  ck_assert_int_eq(tsr_mask_from_bytes(1, mh, c->nq, c->nk, c->bits, &c->m, &err), TSR_OK);
  c->p.batch = 1, c->p.heads_q = H, c->p.heads_kv = Hkv, c->p.seq_q = c->p.seq_k = S;
  c->p.head_dim = 16, c->p.dtype = TSR_DT_BF16, c->p.geom = c->g;
  snprintf(c->what, sizeof c->what, "uniform %lldx%lld seq %lld", (long long)bq, (long long)bk,
           (long long)S);
}

START_TEST(test_map_retain)
{
  tu_rng r = {tu_seed("map_retain", 3)};
  pc_case c;
  tsr_plan *pl;
  int64_t pop = 0, i;
  uniform_case(&r, &c, 1000, 128, 64, 2, 2, 2, 0.3);
  for (i = 0; i < 2 * c.nq * c.nk; i++)
    pop += c.bits[i];
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_ROW, 0, 0, TSR_OK);
  ck_assert_int_eq(pl->tile_m, 128);
  ck_assert_int_eq(pl->tile_n, 64);
  ck_assert_int_eq(pl->mapping, TSR_MAP_RETAIN);
  ck_assert_int_eq(pl->summary.combined, 0);
  ck_assert_int_eq(pl->summary.subdivided, 0);
  ck_assert_int_eq(pl->summary.tiles, pop);
  ck_assert_int_eq(pl->summary.partial_tiles, 0);
  ck_assert_int_eq(pl->n_membership, 0);
  ck_assert(pl->summary.wasted_fraction == 0.0);
  check_tiles_exact(&c, pl);
  tsr_plan_destroy(pl);
  /* retain with the blocks' own tile, explicitly */
  pl = make_plan(&c, 128, 64, TSR_MAP_RETAIN, TSR_TASKS_AUTO, 0, 0, TSR_OK);
  ck_assert_int_eq(pl->mapping, TSR_MAP_RETAIN);
  tsr_plan_destroy(pl);
  pc_free(&c);
}
END_TEST

START_TEST(test_map_combine_subdivide)
{
  tu_rng r = {tu_seed("map_combine_subdivide", 9)};
  pc_case c;
  tsr_plan *pl;
  /* 96-token blocks on 128 tiles: combined, partial tiles, waste > 0. */
  uniform_case(&r, &c, 900, 96, 96, 1, 1, 1, 0.4);
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_AUTO, 0, 0, TSR_OK);
  ck_assert_int_eq(pl->tile_m, 128);
  ck_assert_int_eq(pl->mapping, TSR_MAP_COMBINE);
  ck_assert_int_eq(pl->summary.combined, 1);
  ck_assert_int_gt(pl->summary.partial_tiles, 0);
  ck_assert_int_gt(pl->n_membership, 0);
  ck_assert(pl->summary.wasted_fraction > 0);
  check_tiles_exact(&c, pl);
  tsr_plan_destroy(pl);
  pc_free(&c);
  /* 384-token blocks: subdivided into 3x3 full 128 tiles. */
  uniform_case(&r, &c, 1500, 384, 384, 1, 1, 1, 0.5);
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_AUTO, 0, 0, TSR_OK);
  ck_assert_int_eq(pl->mapping, TSR_MAP_SUBDIVIDE);
  ck_assert_int_eq(pl->summary.subdivided, 1);
  ck_assert_int_eq(pl->summary.combined, 0);
  ck_assert_int_eq(pl->summary.partial_tiles, 0);
  check_tiles_exact(&c, pl);
  tsr_plan_destroy(pl);
  /* subdivide with the planner's tile picks 128 for 384 blocks */
  pl = make_plan(&c, 0, 0, TSR_MAP_SUBDIVIDE, TSR_TASKS_ROW, 0, 0, TSR_OK);
  ck_assert_int_eq(pl->tile_m, 128);
  ck_assert_int_eq(pl->tile_n, 128);
  tsr_plan_destroy(pl);
  pc_free(&c);
  /* 384 blocks on 256 tiles: both at once. */
  uniform_case(&r, &c, 1500, 384, 384, 1, 1, 1, 0.5);
  pl = make_plan(&c, 256, 256, TSR_MAP_AUTO, TSR_TASKS_AUTO, 0, 0, TSR_OK);
  ck_assert_int_eq(pl->summary.subdivided, 1);
  ck_assert_int_eq(pl->summary.combined, 1);
  check_tiles_exact(&c, pl);
  tsr_plan_destroy(pl);
  pc_free(&c);
}
END_TEST

/* The mapping rule is one function (map.c), also the selection's: its
 * O(1) form for uniform blocks (which the planner and tsr_select_eligible
 * use) says what the walk over the same blocks given as a variable
 * geometry says, over random block sizes, lengths (ragged and exact) and
 * tiles; and a plan of either geometry reports that relation. */
START_TEST(test_relation_uniform_is_walk)
{
  tu_rng r = {tu_seed("relation_uniform", 43) + (uint64_t)_i};
  int c, checked = 0;
  for (c = 0; c < 60; c++) {
    int64_t bq = tu_range(&r, 1, 700), bk = tu_range(&r, 1, 700);
    int64_t sq = tu_range(&r, 1, 3000), sk = tu_range(&r, 1, 3000), nq, nk, i;
    int tm = 16 * (int)tu_range(&r, 1, 32), tn = 32 * (int)tu_range(&r, 1, 16);
    int comb, sub, k;
    int64_t *qs, *ks;
    tsr_geom *gu = NULL, *gv = NULL;
    tsr_error err = {0};
    if (c % 3 == 0) { /* sizes and lengths made of tiles, where edges vanish */
      bq = tm * tu_range(&r, 1, 3) / (int64_t)tu_range(&r, 1, 2);
      sq = bq * tu_range(&r, 1, 8);
      bk = tn * tu_range(&r, 1, 3);
      sk = bk * tu_range(&r, 1, 8);
    }
    nq = (sq + bq - 1) / bq;
    nk = (sk + bk - 1) / bk;
    qs = malloc(sizeof *qs * (size_t)nq);
    ks = malloc(sizeof *ks * (size_t)nk);
    for (i = 0; i < nq; i++)
      qs[i] = i < nq - 1 ? bq : sq - bq * (nq - 1);
    for (i = 0; i < nk; i++)
      ks[i] = i < nk - 1 ? bk : sk - bk * (nk - 1);
    ck_assert_int_eq(tsr_geom_uniform(sq, sk, bq, bk, &gu, &err), TSR_OK);
    ck_assert_int_eq(tsr_geom_variable(qs, nq, ks, nk, &gv, &err), TSR_OK);
    tsri_map_relation_uniform(bq, bk, sq, sk, tm, tn, &comb, &sub);
    for (k = 0; k < 2; k++) {
      tsr_problem p;
      tsr_plan_opts o;
      tsr_plan *pl = NULL;
      tsr_mask *m = NULL;
      uint8_t *bits = tu_rand_bits(&r, (size_t)(nq * nk), 0.5);
      ck_assert_int_eq(tsr_mask_from_bytes(1, 1, nq, nk, bits, &m, &err), TSR_OK);
      memset(&p, 0, sizeof p);
      p.batch = p.heads_q = p.heads_kv = 1;
      p.seq_q = sq;
      p.seq_k = sk;
      p.head_dim = 16;
      p.dtype = TSR_DT_BF16;
      p.geom = k ? gv : gu;
      tsr_plan_opts_init(&o);
      o.tile_m = tm;
      o.tile_n = tn;
      o.tasks = TSR_TASKS_ROW;
      ck_assert_msg(tsr_plan_create(&p, m, &o, &pl, &err) == TSR_OK, "%s", err.text);
      ck_assert_msg(pl->summary.combined == comb && pl->summary.subdivided == sub,
                    "blocks %lldx%lld over %lldx%lld, tile %dx%d (%s geometry): planner says "
                    "combined %d subdivided %d, the O(1) rule %d %d",
                    (long long)bq, (long long)bk, (long long)sq, (long long)sk, tm, tn,
                    k ? "variable" : "uniform", pl->summary.combined, pl->summary.subdivided,
                    comb, sub);
      ck_assert_int_eq(pl->mapping, comb ? TSR_MAP_COMBINE : sub ? TSR_MAP_SUBDIVIDE : TSR_MAP_RETAIN);
      checked++;
      tsr_plan_destroy(pl);
      tsr_mask_destroy(m);
      free(bits);
    }
    tsr_geom_destroy(gu);
    tsr_geom_destroy(gv);
    free(qs);
    free(ks);
  }
  ck_assert_int_eq(checked, 120);
}
END_TEST

START_TEST(test_map_rejects)
{
  tu_rng r = {tu_seed("map_rejects", 21)};
  pc_case c;
  tsr_plan_opts o;
  tsr_plan *pl = (tsr_plan *)&o;
  tsr_error err = {0};
  uniform_case(&r, &c, 700, 96, 96, 1, 1, 1, 0.4);
  tsr_plan_opts_init(&o);
  o.mapping = TSR_MAP_RETAIN;
  o.tile_m = o.tile_n = 128;
  ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_ptr_null(pl);
  ck_assert_msg(strstr(err.text, "tile 128x128") && strstr(err.text, "blocks 96x96"), "%s", err.text);
  tsr_error_clear(&err);
  o.mapping = TSR_MAP_SUBDIVIDE;
  ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(err.text, "'subdivide'") && strstr(err.text, "blocks 96x96"), "%s", err.text);
  tsr_error_clear(&err);
  o.mapping = TSR_MAP_AUTO;
  o.tile_m = 100;
  ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(err.text, "tile 100x128 is not supported") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  o.tile_m = 128;
  o.num_sms = -1;
  ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "multiprocessor count -1") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  o.num_sms = 0;
  o.split_tiles = -2;
  ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_ERR_INVALID);
  tsr_error_clear(&err);
  o.split_tiles = 0;
  o.mapping = TSR_MAP_COMBINE;
  o.tile_m = o.tile_n = 0;
  tsr_mask_destroy(c.m);
  /* the mask has 3 heads, the problem 1: the mask check names it */
  free(c.bits);
  c.bits = tu_rand_bits(&r, (size_t)(3 * c.nq * c.nk), 0.5);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 3, c.nq, c.nk, c.bits, &c.m, &err), TSR_OK);
  ck_assert_int_ne(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_OK);
  ck_assert(strlen(err.text) > 0);
  ck_assert_int_ne(tsr_plan_create(&c.p, NULL, &o, &pl, NULL), TSR_OK);
  pc_free(&c);
  /* retain needs usable uniform blocks when the planner picks the tile */
  uniform_case(&r, &c, 700, 100, 100, 1, 1, 1, 0.4);
  tsr_error_clear(&err);
  o.mapping = TSR_MAP_RETAIN;
  ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(err.text, "blocks 100x100") != NULL, "%s", err.text);
  pc_free(&c);
}
END_TEST

START_TEST(test_tasks_gqa_empty)
{
  tu_rng r = {tu_seed("tasks_gqa_empty", 31)};
  pc_case c;
  tsr_plan *pl;
  int64_t i, packed = 0, empty, row_tasks;
  /* 8 query heads on 2 KV heads, one broadcast plane: every group packs. */
  uniform_case(&r, &c, 640, 64, 64, 8, 2, 1, 0.5);
  memset(c.bits, 0, (size_t)c.nk); /* query block 0 empty */
  tsr_mask_destroy(c.m);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, c.nq, c.nk, c.bits, &c.m, NULL), TSR_OK);
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_ROW, 0, 0, TSR_OK);
  row_tasks = pl->n_tasks;
  ck_assert_int_eq(row_tasks, 8 * pl->n_q_tiles);
  ck_assert_int_eq(pl->summary.empty_rows, 8);
  tsr_plan_destroy(pl);
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_PACK, 0, 0, TSR_OK);
  for (i = 0; i < pl->n_tasks; i++)
    if (pl->tasks[i].tile_end > pl->tasks[i].tile_begin) {
      ck_assert_int_eq(pl->tasks[i].n_members % 4, 0); /* GQA groups of 4, maybe 2 q tiles */
      packed++;
    }
  ck_assert_int_gt(packed, 0);
  ck_assert_int_lt(pl->n_tasks, row_tasks / 3);
  ck_assert_int_eq(pl->task_layout, TSR_TASKS_PACK);
  ck_assert_int_eq(pl->summary.members, 8 * pl->n_q_tiles);
  /* the 8 empty rows: one zero-output task of 8 members (last of its group) */
  for (i = 0, empty = 0; i < pl->n_tasks; i++)
    if (pl->tasks[i].tile_end == pl->tasks[i].tile_begin) {
      ck_assert_int_eq(pl->tasks[i].n_members, 8);
      empty++;
    }
  ck_assert_int_eq(empty, 1);
  ck_assert_int_eq(tsr_plan_verify(pl, c.m, NULL), TSR_OK);
  tsr_plan_destroy(pl);
  pc_free(&c);
}
END_TEST

static int cmp_desc(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x > y ? -1 : x < y;
}

static double balance_of(const tsr_plan *pl)
{
  tsr_plan_summary sm;
  tsr_plan_summarize(pl, &sm);
  return sm.balance;
}

START_TEST(test_tasks_split_balance)
{
  tu_rng r = {tu_seed("tasks_split_balance", 41)};
  pc_case c;
  tsr_plan *pl;
  int64_t i;
  /* One head, dense: 8 rows of 8 tiles on 132 SMs, auto splits to balance. */
  uniform_case(&r, &c, 1024, 128, 128, 1, 1, 1, 1.1);
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_ROW, 0, 0, TSR_OK);
  ck_assert_int_eq(pl->n_tasks, 8);
  ck_assert_int_eq(pl->n_merges, 0);
  tsr_plan_destroy(pl);
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_AUTO, 0, 0, TSR_OK);
  ck_assert_int_eq(pl->task_layout, TSR_TASKS_SPLIT);
  ck_assert_int_eq(pl->summary.split_rows, 8);
  ck_assert_int_eq(pl->n_merges, 8);
  ck_assert_int_eq(pl->n_slots, 16); /* chunks of at least 4 tiles */
  tsr_plan_destroy(pl);
  /* explicit chunk of 3: 8 tiles -> chunks 2, 3, 3 */
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_SPLIT, 3, 0, TSR_OK);
  ck_assert_int_eq(pl->n_slots, 24);
  for (i = 0; i < pl->n_tasks; i++)
    ck_assert_int_le(pl->tasks[i].tile_end - pl->tasks[i].tile_begin, 3);
  for (i = 0; i < pl->n_merges; i++)
    ck_assert_int_eq(pl->merges[i].n_slots, 3);
  ck_assert_int_eq(tsr_plan_verify(pl, c.m, NULL), TSR_OK);
  tsr_plan_destroy(pl);
  /* one SM: perfectly balanced by definition; 8 equal rows on 3 SMs: 3/(8/3) */
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_ROW, 0, 1, TSR_OK);
  ck_assert(fabs(balance_of(pl) - 1.0) < 1e-12);
  tsr_plan_destroy(pl);
  pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_ROW, 0, 3, TSR_OK);
  ck_assert(fabs(balance_of(pl) - 3.0 / (8.0 / 3.0)) < 1e-12);
  tsr_plan_destroy(pl);
  pc_free(&c);
  /* Uneven rows on 4 SMs: the balance estimate is the round-robin walk of
   * the launch order, computed here again, and the snaked order is no worse
   * than plain longest-first under that walk. */
  uniform_case(&r, &c, 4096, 64, 64, 3, 3, 3, 0.3);
  {
    int64_t k, n, load[4] = {0}, plain[4] = {0}, total = 0, mx = 0, mxp = 0, *w;
    pl = make_plan(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_ROW, 0, 4, TSR_OK);
    n = pl->n_tasks;
    w = malloc((size_t)n * sizeof *w);
    for (k = 0; k < n; k++) {
      const tsr_task_rec *t = &pl->tasks[k];
      w[k] = (int64_t)t->n_members * (4 * (t->tile_end - t->tile_begin) + 1);
      total += w[k];
      load[k % 4] += w[k];
    }
    for (k = 0; k < 4; k++)
      mx = load[k] > mx ? load[k] : mx;
    ck_assert(fabs(balance_of(pl) - (double)mx / ((double)total / 4)) < 1e-9);
    qsort(w, (size_t)n, sizeof *w, cmp_desc);
    for (k = 0; k < n; k++)
      plain[k % 4] += w[k];
    for (k = 0; k < 4; k++)
      mxp = plain[k] > mxp ? plain[k] : mxp;
    ck_assert_int_le(mx, mxp);
    free(w);
    tsr_plan_destroy(pl);
  }
  pc_free(&c);
}
END_TEST

/* ---- Capacity (issue 14, 7): refused before allocating, in milliseconds -- */

/* CPU seconds of this process: what a refusal costs, whatever else the
 * machine runs (wall time on a loaded machine says nothing). */
static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A problem of one batch, `heads` heads over seq_q x seq_k tokens in
 * uniform blocks (its geometry into *g). */
static tsr_problem big_problem(int64_t heads, int64_t sq, int64_t sk, int64_t bq, int64_t bk,
                               tsr_geom **g)
{
  tsr_problem p;
  tsr_error err = {0};
  memset(&p, 0, sizeof p);
  ck_assert_msg(tsr_geom_uniform(sq, sk, bq, bk, g, &err) == TSR_OK, "%s", err.text);
  p.batch = 1, p.heads_q = p.heads_kv = heads, p.seq_q = sq, p.seq_k = sk, p.head_dim = 64;
  p.dtype = TSR_DT_BF16, p.geom = *g;
  return p;
}

/* Plans and expects TSR_ERR_CAPACITY naming `what`, within a second. */
static void expect_capacity(const tsr_problem *p, const tsr_mask *m, int tm, int tn,
                            const char *what)
{
  tsr_plan_opts o;
  tsr_plan *pl = (tsr_plan *)&o;
  tsr_error err = {0};
  double t0 = now_s(), dt;
  tsr_status st;
  tsr_plan_opts_init(&o);
  o.tile_m = tm, o.tile_n = tn;
  st = tsr_plan_create(p, m, &o, &pl, &err);
  dt = now_s() - t0;
  ck_assert_msg(st == TSR_ERR_CAPACITY, "tile %dx%d: status %s: %s", tm, tn, tsr_strerror(st),
                err.text);
  ck_assert_ptr_null(pl);
  ck_assert_msg(strstr(err.text, what) && strstr(err.text, "plan too large"), "%s", err.text);
  ck_assert_msg(dt < 1.0, "tile %dx%d: refused after %.2f s of CPU", tm, tn, dt);
}

START_TEST(test_capacity_one_block)
{
  /* The case: a 1x1 mask of one block as long as the longest
   * sequence.  The plan would need (2^31 / 128)^2 tile records (16 GiB at
   * 8 bytes), 2^49 at tile 16x32: it ran a minute at 19 GB, or was killed. */
  tsr_geom *g;
  tsr_mask *m;
  tsr_error err = {0};
  uint8_t one = 1;
  tsr_problem p = big_problem(1, TSR_MAX_SEQ, TSR_MAX_SEQ, TSR_MAX_SEQ, TSR_MAX_SEQ, &g);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, 1, 1, &one, &m, &err), TSR_OK);
  expect_capacity(&p, m, 0, 0, "tile records");
  expect_capacity(&p, m, 16, 32, "tile records");
  expect_capacity(&p, m, 512, 512, "tile records");
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  /* rows: 65536 heads x 2^27 query tiles of 16 rows */
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, 1, 1, &one, &m, &err), TSR_OK);
  p = big_problem(65536, TSR_MAX_SEQ, 4096, TSR_MAX_SEQ, 4096, &g);
  expect_capacity(&p, m, 16, 32, "rows a plan can address");
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}
END_TEST

/* Packed rows of nq x nk blocks, bit (i, j) set with probability dens;
 * returns the set bits. */
static int64_t packed_mask(tu_rng *r, int64_t nq, int64_t nk, double dens, tsr_mask **m)
{
  int64_t rb = (nk + 7) / 8, i, j, n = 0;
  uint8_t *bits = calloc((size_t)(nq * rb), 1);
  tsr_error err = {0};
  for (i = 0; i < nq; i++)
    for (j = 0; j < nk; j++)
      if (tu_uniform(r) < dens) {
        bits[i * rb + j / 8] |= (uint8_t)(1u << (j % 8));
        n++;
      }
  ck_assert_int_eq(tsr_mask_from_packed(1, 1, nq, nk, bits, rb, m, &err), TSR_OK);
  free(bits);
  return n;
}

START_TEST(test_capacity_counted)
{
  /* 2^23 tokens in 2048 x 2048 blocks of 4096: every bound says more than
   * 2^31 tiles at 128x128 (65536^2); the exact count decides.  A selected
   * block is 32 x 32 full tiles. */
  tu_rng r = {tu_seed("capacity_counted", 77)};
  int64_t S = (int64_t)1 << 23, nsel, nt = -1, nw = -1;
  tsr_geom *g;
  tsr_mask *m;
  tsr_plan *pl = NULL;
  tsr_plan_opts o;
  tsr_error err = {0};
  tsr_problem p = big_problem(1, S, S, 4096, 4096, &g);
  double t0;
  tsr_plan_opts_init(&o);
  o.tile_m = o.tile_n = 128;
  /* sparse: planned, its tiles exactly the count */
  nsel = packed_mask(&r, 2048, 2048, tu_range(&r, 20, 60) / 2048.0 / 2048.0 * 100, &m);
  ck_assert_int_gt(nsel, 0);
  ck_assert_msg(tsr_plan_create(&p, m, &o, &pl, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(pl->n_tiles, 1024 * nsel);
  ck_assert_int_eq(pl->n_membership, 0);
  ck_assert_int_eq(tsri_map_count(pl, m, &nt, &nw), 0);
  ck_assert_int_eq(nt, 1024 * nsel);
  ck_assert_int_eq(nw, 0);
  tsr_plan_destroy(pl);
  tsr_mask_destroy(m);
  /* 60%: 2.5M blocks, 2.6e9 tiles: refused */
  nsel = packed_mask(&r, 2048, 2048, 0.6, &m);
  ck_assert_int_gt(1024 * nsel, TSR_MAX_TILE_RECORDS);
  t0 = now_s();
  expect_capacity(&p, m, 128, 128, "tile records");
  ck_assert_double_lt(now_s() - t0, 1.0);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}
END_TEST

START_TEST(test_capacity_words)
{
  /* Query blocks of 16 tokens alternately selecting every key block and
   * none: each 128x512 tile has 8 segments and is partial, with 16 words a
   * segment: 4096 x 4096 tiles (fine) but 2^31 membership words. */
  int64_t sq = (int64_t)1 << 19, sk = (int64_t)1 << 21, nq = sq / 16, nk = sk / 512, i;
  int64_t rb = nk / 8;
  uint8_t *bits = calloc((size_t)(nq * rb), 1);
  tsr_geom *g;
  tsr_mask *m;
  tsr_error err = {0};
  tsr_problem p = big_problem(1, sq, sk, 16, 512, &g);
  for (i = 0; i < nq; i += 2)
    memset(bits + i * rb, 0xff, (size_t)rb);
  ck_assert_int_eq(tsr_mask_from_packed(1, 1, nq, nk, bits, rb, &m, &err), TSR_OK);
  free(bits);
  expect_capacity(&p, m, 128, 512, "membership words");
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("map");
  TCase *tc = tcase_create("map");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_map_random, 0, 40);
  tcase_add_loop_test(tc, test_map_gather, 0, 40);
  tcase_add_test(tc, test_map_retain);
  tcase_add_test(tc, test_map_combine_subdivide);
  tcase_add_test(tc, test_map_rejects);
  tcase_add_loop_test(tc, test_relation_uniform_is_walk, 0, 4);
  tcase_add_test(tc, test_tasks_gqa_empty);
  tcase_add_test(tc, test_tasks_split_balance);
  suite_add_tcase(s, tc);
  /* Each refusal takes milliseconds; unchecked, these plans ran for
   * minutes at tens of GB. */
  tc = tcase_create("capacity");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_capacity_one_block);
  tcase_add_test(tc, test_capacity_counted);
  tcase_add_test(tc, test_capacity_words);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

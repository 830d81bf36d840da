/*
 * check_plan.c: plan verification (verify.c) and the plan API (plan.c).
 *  - every plan the planner makes, over random geometries, masks, tiles,
 *    mappings and task layouts, verifies;
 *  - deliberately corrupted plans are caught, each with its own message: a
 *    dropped tile, a duplicated tile, a wrong membership bit, a partial
 *    tile marked full, a lost merge, a slot read twice, a wrong qblk entry,
 *    a member on another KV head, an index out of range;
 *  - verify against a different mask fails;
 *  - gather plans: corrupted gather tiles (a duplicated block, blocks out
 *    of ascending order or mispaired, a missing block or second half, an
 *    unselected or out-of-range block, swapped halves, a wrong tile) are
 *    caught; bad gather geometries are refused naming the sizes; the
 *    mapping's name round-trips; replanning into used plans;
 *  - the JSON explanation parses and agrees with the summary and arrays;
 *  - the fast paths (SSE2, AVX2, AVX-512 packing and emission, packed-bit
 *    masks, replanning into a used plan) give the plain path's plan byte
 *    for byte.
 */
#include <check.h>
#include <jansson.h>

#include "plan_cases.h"
#include "plan_impl.h"

static tsr_plan *plan_with(const pc_case *c, int tm, int tn, tsr_mapping mp, tsr_tasks tk, int split)
{
  tsr_plan_opts o;
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  tsr_plan_opts_init(&o);
  o.tile_m = tm, o.tile_n = tn, o.mapping = mp, o.tasks = tk, o.split_tiles = split;
  ck_assert_msg(tsr_plan_create(&c->p, c->m, &o, &pl, &err) == TSR_OK, "%s: %s", c->what, err.text);
  ck_assert_msg(tsr_plan_verify(pl, c->m, &err) == TSR_OK, "%s: %s", c->what, err.text);
  return pl;
}

START_TEST(test_verify_sweep)
{
  tu_rng r = {tu_seed("verify_sweep", 99) + 31337u * (uint64_t)_i};
  pc_case c;
  int ti, mp, tk, sp;
  ck_assert_int_eq(pc_make(&r, &c, 1500), 0);
  for (ti = 0; ti < PC_NTILES; ti++)
    for (mp = 0; mp < 4; mp++)
      for (tk = 0; tk < 4; tk++)
        for (sp = 0; sp < 2; sp++) {
          tsr_plan_opts o;
          tsr_plan *pl = NULL;
          tsr_error err = {0};
          tsr_status st;
          tsr_plan_opts_init(&o);
          o.tile_m = pc_tiles[ti][0];
          o.tile_n = pc_tiles[ti][1];
          o.mapping = (tsr_mapping)mp;
          o.tasks = (tsr_tasks)tk;
          o.split_tiles = sp ? (int)tu_range(&r, 1, 5) : 0;
          o.num_sms = (int)tu_range(&r, 0, 200);
          st = tsr_plan_create(&c.p, c.m, &o, &pl, &err);
          if (st == TSR_ERR_UNSUPPORTED && mp != TSR_MAP_AUTO)
            continue;
          ck_assert_msg(st == TSR_OK, "%s: %s", c.what, err.text);
          ck_assert_msg(tsr_plan_verify(pl, c.m, &err) == TSR_OK, "%s tile %dx%d %s/%s split %d: %s",
                        c.what, pl->tile_m, pl->tile_n, tsr_plan_mapping_name((tsr_mapping)mp),
                        tsr_plan_tasks_name((tsr_tasks)tk), o.split_tiles, err.text);
          tsr_plan_destroy(pl);
        }
  pc_free(&c);
}
END_TEST

/* Expects verify to fail with TSR_ERR_VERIFY and a message holding `what`. */
static void expect_violation(const tsr_plan *pl, const tsr_mask *m, const char *what, const char *label)
{
  tsr_error err = {0};
  tsr_status st = tsr_plan_verify(pl, m, &err);
  ck_assert_msg(st == TSR_ERR_VERIFY, "%s: corrupted plan verified (%s)", label, tsr_strerror(st));
  ck_assert_msg(strstr(err.text, what) != NULL, "%s: message '%s' lacks '%s'", label, err.text, what);
}

/* A problem with partial tiles, empty rows and split rows. */
static void corrupt_case(tu_rng *r, pc_case *c)
{
  tsr_error err = {0};
  int64_t i;
  memset(c, 0, sizeof *c);
  c->B = 1, c->Hq = 2, c->Hkv = 1, c->Sq = 700, c->Sk = 650, c->D = 16, c->mb = 1, c->mh = 2;
  ck_assert_int_eq(tsr_geom_uniform(c->Sq, c->Sk, 96, 96, &c->g, &err), TSR_OK);
  c->nq = tu_uniform_bounds(c->Sq, 96, &c->qb);
  c->nk = tu_uniform_bounds(c->Sk, 96, &c->kb);
  c->bits = tu_rand_bits(r, (size_t)(2 * c->nq * c->nk), 0.5);
  for (i = 0; i < c->nk; i++)
    c->bits[i] = 0; /* query block 0 of head 0 empty */
  ck_assert_int_eq(tsr_mask_from_bytes(1, 2, c->nq, c->nk, c->bits, &c->m, &err), TSR_OK);
  c->p.batch = 1, c->p.heads_q = 2, c->p.heads_kv = 1, c->p.seq_q = c->Sq, c->p.seq_k = c->Sk;
  c->p.head_dim = 16, c->p.dtype = TSR_DT_BF16, c->p.geom = c->g;
  snprintf(c->what, sizeof c->what, "corruption case");
}

static int64_t find_task(const tsr_plan *pl, int min_tiles, int partial)
{
  int64_t i;
  for (i = 0; i < pl->n_tasks; i++)
    if (pl->tasks[i].tile_end - pl->tasks[i].tile_begin >= min_tiles &&
        (partial == 0 || (partial > 0) == (pl->tasks[i].partial >= 0)))
      return i;
  ck_abort_msg("no task with %d tiles", min_tiles);
  return -1;
}

START_TEST(test_verify_corruptions)
{
  tu_rng r = {tu_seed("verify_corruptions", 17)};
  pc_case c;
  tsr_plan *pl;
  int64_t t, i, save;
  corrupt_case(&r, &c);
  pl = plan_with(&c, 128, 128, TSR_MAP_COMBINE, TSR_TASKS_SPLIT, 2);
  ck_assert_int_gt(pl->summary.partial_tiles, 0);
  ck_assert_int_gt(pl->n_merges, 0);

  /* a dropped tile */
  t = find_task(pl, 1, 0);
  pl->tasks[t].tile_end--;
  expect_violation(pl, c.m, "are selected but not covered", "dropped tile");
  pl->tasks[t].tile_end++;
  ck_assert_int_eq(tsr_plan_verify(pl, c.m, NULL), TSR_OK);

  /* a duplicated tile */
  t = find_task(pl, 2, 0);
  save = pl->tiles[pl->tasks[t].tile_begin + 1].k_tile;
  pl->tiles[pl->tasks[t].tile_begin + 1].k_tile = pl->tiles[pl->tasks[t].tile_begin].k_tile;
  expect_violation(pl, c.m, "covered twice", "duplicated tile");
  pl->tiles[pl->tasks[t].tile_begin + 1].k_tile = (tsr_i32)save;

  /* a wrong membership bit, in every partial tile in turn (first 20) */
  for (i = 0, save = 0; i < pl->n_tiles && save < 20; i++) {
    tsr_tile_rec *tr = &pl->tiles[i];
    int64_t c0 = (int64_t)tr->k_tile * 128, col;
    if (tr->mem < 0)
      continue;
    col = tu_range(&r, 0, (c0 + 128 < c.Sk ? 128 : c.Sk - c0) - 1);
    pl->membership[tr->mem + col / 32] ^= 1u << (col % 32);
    {
      tsr_error err = {0};
      ck_assert_int_eq(tsr_plan_verify(pl, c.m, &err), TSR_ERR_VERIFY);
      ck_assert_msg(strstr(err.text, "selected but not covered") ||
                        strstr(err.text, "not selected but reach the output"),
                    "%s", err.text);
    }
    pl->membership[tr->mem + col / 32] ^= 1u << (col % 32);
    save++;
  }
  ck_assert_int_gt(save, 0);

  /* a bit past the key length */
  for (i = 0; i < pl->n_tiles; i++)
    if (pl->tiles[i].mem >= 0 && pl->tiles[i].k_tile == pl->n_k_tiles - 1)
      break;
  if (i < pl->n_tiles) {
    pl->membership[pl->tiles[i].mem + 3] |= 1u << 31; /* column 127 of 650 % 128 = 10 */
    expect_violation(pl, c.m, "past the key length", "column past seq_k");
    pl->membership[pl->tiles[i].mem + 3] &= ~(1u << 31);
  }

  /* a partial tile marked full */
  for (i = 0; i < pl->n_tiles && pl->tiles[i].mem < 0; i++)
    ;
  save = pl->tiles[i].mem;
  pl->tiles[i].mem = -1;
  expect_violation(pl, c.m, "are not selected but reach the output", "partial marked full");
  pl->tiles[i].mem = (tsr_i32)save;

  /* a lost merge: its row is never written */
  pl->n_merges--;
  expect_violation(pl, c.m, "is never written", "lost merge");
  pl->n_merges++;

  /* a merge reading a slot twice / another row's slot */
  save = pl->merges[0].slot_begin;
  pl->merges[0].slot_begin = pl->merges[pl->n_merges - 1].slot_begin;
  if (pl->n_merges > 1) {
    tsr_error err = {0};
    ck_assert_int_eq(tsr_plan_verify(pl, c.m, &err), TSR_ERR_VERIFY);
  }
  pl->merges[0].slot_begin = (tsr_i32)save;

  /* a wrong qblk entry */
  pl->qblk[200] ^= 1;
  expect_violation(pl, c.m, "qblk[200]", "qblk");
  pl->qblk[200] ^= 1;

  /* a tile index out of range */
  t = find_task(pl, 1, 0);
  pl->tasks[t].tile_end = (tsr_i32)pl->n_tiles + 5;
  expect_violation(pl, c.m, "outside the", "tile range");
  ck_assert_int_eq(tsr_plan_verify(pl, c.m, NULL), TSR_ERR_VERIFY);
  tsr_plan_destroy(pl);

  /* row tasks: a row written twice, and a direct task dropped */
  pl = plan_with(&c, 128, 128, TSR_MAP_AUTO, TSR_TASKS_ROW, 0);
  pl->members[1] = pl->members[0];
  pl->tasks[1].batch = pl->members[0].batch;
  pl->tasks[1].head = pl->members[0].head;
  pl->tasks[1].q_tile = pl->members[0].q_tile;
  expect_violation(pl, c.m, "written 2 times", "row written twice");
  tsr_plan_destroy(pl);
  pl = plan_with(&c, 128, 128, TSR_MAP_AUTO, TSR_TASKS_ROW, 0);
  pl->n_tasks--;
  expect_violation(pl, c.m, "is never written", "task dropped");
  tsr_plan_destroy(pl);
  pc_free(&c);
}
END_TEST

/* A gather case: blocks 32x16 over 200 x 300 tokens (both ragged), two
 * query heads on one KV head with the second head's rows mostly the
 * first's (shared tile ranges), query block 0 of head 0 empty, rows of
 * odd and even counts, at least one with 4 or more selected blocks. */
static void gather_case(tu_rng *r, pc_case *c)
{
  tsr_error err = {0};
  int64_t i, best = 0;
  memset(c, 0, sizeof *c);
  c->B = 1, c->Hq = 2, c->Hkv = 1, c->Sq = 200, c->Sk = 300, c->D = 16, c->mb = 1, c->mh = 2;
  ck_assert_int_eq(tsr_geom_uniform(c->Sq, c->Sk, 32, 16, &c->g, &err), TSR_OK);
  c->nq = tu_uniform_bounds(c->Sq, 32, &c->qb);
  c->nk = tu_uniform_bounds(c->Sk, 16, &c->kb);
  c->bits = tu_rand_bits(r, (size_t)(2 * c->nq * c->nk), 0.5);
  memset(c->bits, 0, (size_t)c->nk);
  for (i = 0; i < 4; i++) /* query block 1 of head 0: at least 4 blocks */
    c->bits[c->nk + 5 * i] = 1;
  memcpy(c->bits + (c->nq + 2) * c->nk, c->bits + 2 * c->nk, (size_t)((c->nq - 2) * c->nk));
  for (i = c->nk; i < 2 * c->nk; i++)
    best += c->bits[i];
  ck_assert_int_ge(best, 4);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 2, c->nq, c->nk, c->bits, &c->m, &err), TSR_OK);
  c->p.batch = 1, c->p.heads_q = 2, c->p.heads_kv = 1, c->p.seq_q = c->Sq, c->p.seq_k = c->Sk;
  c->p.head_dim = 16, c->p.dtype = TSR_DT_BF16, c->p.geom = c->g;
  snprintf(c->what, sizeof c->what, "gather case");
}

/* The first tile record of the row task (n_members 1, row tasks) of head 0
 * query tile 1, which has at least two tiles. */
static int64_t gather_row_tiles(const tsr_plan *pl, int64_t *end)
{
  int64_t i;
  for (i = 0; i < pl->n_tasks; i++) {
    const tsr_task_rec *t = &pl->tasks[i];
    if (t->head == 0 && t->q_tile == 1 && t->partial < 0) {
      ck_assert_int_ge(t->tile_end - t->tile_begin, 2);
      *end = t->tile_end;
      return t->tile_begin;
    }
  }
  ck_abort_msg("no row task for head 0, q tile 1");
  return -1;
}

/* Applies `edit` to tile record u (k_tile, mem), expects the violation,
 * restores the record and expects the plan to verify again. */
static void gather_mutant(tsr_plan *pl, const tsr_mask *m, int64_t u, tsr_i32 k_tile, tsr_i32 mem,
                          const char *what, const char *label)
{
  tsr_tile_rec save = pl->tiles[u];
  pl->tiles[u].k_tile = k_tile;
  pl->tiles[u].mem = mem;
  expect_violation(pl, m, what, label);
  pl->tiles[u] = save;
  ck_assert_int_eq(tsr_plan_verify(pl, m, NULL), TSR_OK);
}

START_TEST(test_verify_gather_corruptions)
{
  tu_rng r = {tu_seed("verify_gather", 41) + 131u * (uint64_t)_i};
  pc_case c;
  tsr_plan *pl;
  tsr_tile_rec a, b;
  int64_t u, end, i, last;
  gather_case(&r, &c);

  /* Row tasks: a row's tiles in one task. */
  pl = plan_with(&c, 0, 0, TSR_MAP_GATHER, TSR_TASKS_ROW, 0);
  ck_assert_int_eq(pl->mapping, TSR_MAP_GATHER);
  ck_assert_int_eq(pl->tile_m, 32);
  ck_assert_int_eq(pl->tile_n, 32);
  u = gather_row_tiles(pl, &end);
  a = pl->tiles[u];
  b = pl->tiles[u + 1];
  ck_assert(a.mem > a.k_tile && b.k_tile > a.mem);
  gather_mutant(pl, c.m, u, a.mem, a.k_tile, "are not ascending", "swapped halves");
  gather_mutant(pl, c.m, u, a.k_tile, a.k_tile, "are not ascending", "k_tile == mem");
  gather_mutant(pl, c.m, u + 1, a.mem, b.mem >= 0 ? b.mem : -1, "not ascending", "block repeated in the task");
  gather_mutant(pl, c.m, u, a.k_tile, -1, "no second half before the task's last tile", "half dropped");
  gather_mutant(pl, c.m, u, a.k_tile, (tsr_i32)c.nk, "out of range", "second half past the blocks");
  gather_mutant(pl, c.m, u, -1, a.mem, "out of range", "negative first half");
  /* records of a task out of order (a lone last block then comes first) */
  pl->tiles[u] = b;
  pl->tiles[u + 1] = a;
  expect_violation(pl, c.m, b.mem >= 0 ? "in its task: not ascending" : "no second half before", "records swapped");
  pl->tiles[u] = a;
  pl->tiles[u + 1] = b;
  /* the row's last tile's second half dropped */
  last = end - 1;
  if (pl->tiles[last].mem >= 0)
    gather_mutant(pl, c.m, last, pl->tiles[last].k_tile, -1, "are selected but not covered", "last half dropped");
  /* against a mask one block pair off: a block covered but not selected,
   * or selected but not covered */
  {
    uint8_t *bits2 = malloc((size_t)(2 * c.nq * c.nk));
    tsr_mask *m2 = NULL;
    memcpy(bits2, c.bits, (size_t)(2 * c.nq * c.nk));
    i = c.nk + tu_range(&r, 0, c.nk - 1); /* head 0, query block 1 */
    bits2[i] ^= 1;
    ck_assert_int_eq(tsr_mask_from_bytes(1, 2, c.nq, c.nk, bits2, &m2, NULL), TSR_OK);
    expect_violation(pl, m2, bits2[i] ? "are selected but not covered" : "are not selected but reach the output",
                     "other mask");
    tsr_mask_destroy(m2);
    free(bits2);
  }
  /* a dropped tile: its blocks uncovered */
  for (i = 0; i < pl->n_tasks && !(pl->tasks[i].head == 0 && pl->tasks[i].q_tile == 1); i++)
    ;
  pl->tasks[i].tile_end--;
  expect_violation(pl, c.m, "are selected but not covered", "dropped tile");
  pl->tasks[i].tile_end++;
  /* the tile is not bq x 2bk, or the key tile count not ceil(nk / 2) */
  pl->tile_n = 64;
  expect_violation(pl, c.m, "does not pair the blocks", "wrong tile");
  pl->tile_n = 32;
  pl->n_k_tiles++;
  expect_violation(pl, c.m, "plan has", "wrong key tile count");
  pl->n_k_tiles--;
  ck_assert_int_eq(tsr_plan_verify(pl, c.m, NULL), TSR_OK);
  tsr_plan_destroy(pl);

  /* Split chunks of one tile: a row's tiles in several tasks, so only the
   * row's sorted records show a block twice or the blocks mispaired. */
  pl = plan_with(&c, 32, 32, TSR_MAP_GATHER, TSR_TASKS_SPLIT, 1);
  ck_assert_int_gt(pl->n_merges, 0);
  for (i = 0; i < pl->n_tasks; i++) {
    const tsr_task_rec *t = &pl->tasks[i];
    ck_assert_int_le(t->tile_end - t->tile_begin, 1);
  }
  {
    /* the chunk tiles of head 0 query tile 1, in slot order: the row's pairs */
    int64_t ut[64], n = 0, k;
    for (k = 0; k < pl->n_slots && n < 64; k++)
      for (i = 0; i < pl->n_tasks; i++)
        if (pl->tasks[i].partial == k && pl->tasks[i].head == 0 && pl->tasks[i].q_tile == 1)
          ut[n++] = pl->tasks[i].tile_begin;
    ck_assert_int_ge(n, 2);
    a = pl->tiles[ut[0]];
    b = pl->tiles[ut[1]];
    ck_assert(a.mem > a.k_tile && b.k_tile > a.mem);
    gather_mutant(pl, c.m, ut[1], a.mem, b.mem >= 0 ? b.mem : -1, "covered twice", "duplicated block");
    if (b.mem >= 0) {
      /* (j0, j1), (j2, j3) as (j0, j2), (j1, j3): each tile ascending, the pairs covering exactly */
      pl->tiles[ut[0]].mem = b.k_tile;
      pl->tiles[ut[1]].k_tile = a.mem;
      expect_violation(pl, c.m, "paired out of ascending order", "mispaired blocks");
      pl->tiles[ut[0]] = a;
      pl->tiles[ut[1]] = b;
    }
    gather_mutant(pl, c.m, ut[0], a.k_tile, -1, "no second half but is not the row's last", "half dropped mid-row");
  }
  ck_assert_int_eq(tsr_plan_verify(pl, c.m, NULL), TSR_OK);
  tsr_plan_destroy(pl);
  pc_free(&c);
}
END_TEST

/* Bad gather geometries are refused with the sizes named; tile 0 takes
 * the blocks' bq x 2bk; the name round-trips. */
START_TEST(test_gather_rejects)
{
  tu_rng r = {tu_seed("gather_rejects", 43)};
  static const struct {
    int64_t bq, bk;
    int tm, tn;
    const char *want;
  } bad[] = {
      {128, 64, 64, 128, "tile 64x128 and blocks 128x64"},   /* bq != tile_m */
      {128, 64, 128, 64, "tile 128x64 and blocks 128x64"},   /* 2 bk != tile_n */
      {128, 64, 128, 256, "tile 128x256 and blocks 128x64"},
      {128, 300, 0, 0, "tile 128x600 and blocks 128x300"},   /* 2 bk past the largest tile */
      {40, 64, 0, 0, "tile 40x128 and blocks 40x64"},        /* rows not a multiple of 16 */
  };
  pc_case c;
  tsr_plan_opts o;
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  tsr_mapping mp;
  size_t i;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(pc_make_blocks(&r, &c, 700, bad[i].bq, bad[i].bk), 0);
    tsr_plan_opts_init(&o);
    o.mapping = TSR_MAP_GATHER;
    o.tile_m = bad[i].tm;
    o.tile_n = bad[i].tn;
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_ERR_UNSUPPORTED);
    ck_assert_ptr_null(pl);
    ck_assert_msg(strstr(err.text, "mapping 'gather'") && strstr(err.text, bad[i].want), "%s", err.text);
    pc_free(&c);
  }
  /* variable blocks */
  {
    int64_t qs[] = {64, 64, 40}, ks[] = {32, 32, 32, 20};
    uint8_t bits[12];
    memset(bits, 1, sizeof bits);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(tsr_geom_variable(qs, 3, ks, 4, &c.g, &err), TSR_OK);
    ck_assert_int_eq(tsr_mask_from_bytes(1, 1, 3, 4, bits, &c.m, &err), TSR_OK);
    c.p.batch = c.p.heads_q = c.p.heads_kv = 1, c.p.seq_q = 168, c.p.seq_k = 116;
    c.p.head_dim = 16, c.p.dtype = TSR_DT_BF16, c.p.geom = c.g;
    tsr_plan_opts_init(&o);
    o.mapping = TSR_MAP_GATHER;
    o.tile_m = 64, o.tile_n = 64;
    tsr_error_clear(&err);
    ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.text, "needs uniform blocks, got blocks variable"), "%s", err.text);
    tsr_geom_destroy(c.g);
    tsr_mask_destroy(c.m);
  }
  /* FP8: no gather kernels */
  gather_case(&r, &c);
  tsr_plan_opts_init(&o);
  o.mapping = TSR_MAP_GATHER;
  o.precision = TSR_PREC_FP8;
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &pl, &err), TSR_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(err.text, "native precision only, got precision fp8"), "%s", err.text);
  /* the planner's tile, one edge given */
  o.precision = TSR_PREC_NATIVE;
  o.tile_n = 32;
  ck_assert_msg(tsr_plan_create(&c.p, c.m, &o, &pl, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(pl->tile_m, 32);
  ck_assert_int_eq(pl->tile_n, 32);
  ck_assert_str_eq(tsr_plan_mapping_name(pl->summary.mapping), "gather");
  tsr_plan_destroy(pl);
  pc_free(&c);
  /* names and option checks */
  ck_assert_str_eq(tsr_plan_mapping_name(TSR_MAP_GATHER), "gather");
  ck_assert_str_eq(tsr_plan_mapping_name((tsr_mapping)(TSR_MAP_GATHER + 1)), "unknown");
  ck_assert_int_eq(tsr_plan_parse_mapping("gather", &mp), 0);
  ck_assert_int_eq(mp, TSR_MAP_GATHER);
  ck_assert_int_eq(tsr_plan_parse_mapping("gathers", &mp), -1);
  tsr_plan_opts_init(&o);
  o.mapping = TSR_MAP_GATHER;
  ck_assert_int_eq(tsr_plan_opts_check(&o, NULL), TSR_OK);
  o.mapping = (tsr_mapping)(TSR_MAP_GATHER + 1);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_plan_opts_check(&o, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "invalid plan mapping 5") != NULL, "%s", err.text);
}
END_TEST

START_TEST(test_verify_other_mask_and_kv)
{
  tu_rng r = {tu_seed("verify_other_mask", 23)};
  pc_case c;
  tsr_plan *pl;
  tsr_mask *m2 = NULL;
  uint8_t *bits2;
  int64_t i, n;
  corrupt_case(&r, &c);
  pl = plan_with(&c, 0, 0, TSR_MAP_AUTO, TSR_TASKS_AUTO, 0);
  n = 2 * c.nq * c.nk;
  bits2 = malloc((size_t)n);
  memcpy(bits2, c.bits, (size_t)n);
  i = tu_range(&r, 0, n - 1);
  bits2[i] ^= 1; /* one block pair differs */
  ck_assert_int_eq(tsr_mask_from_bytes(1, 2, c.nq, c.nk, bits2, &m2, NULL), TSR_OK);
  expect_violation(pl, m2, bits2[i] ? "selected but not covered" : "not selected but reach", "other mask");
  tsr_mask_destroy(m2);
  free(bits2);
  tsr_plan_destroy(pl);
  /* members of a packed task on different KV heads */
  pc_free(&c);
  {
    tsr_error err = {0};
    memset(&c, 0, sizeof c);
    c.B = 1, c.Hq = 2, c.Hkv = 2, c.Sq = c.Sk = 256, c.mb = 1, c.mh = 1;
    ck_assert_int_eq(tsr_geom_uniform(256, 256, 64, 64, &c.g, &err), TSR_OK);
    c.bits = tu_rand_bits(&r, 16, 2.0);
    ck_assert_int_eq(tsr_mask_from_bytes(1, 1, 4, 4, c.bits, &c.m, &err), TSR_OK);
    c.p.batch = 1, c.p.heads_q = 2, c.p.heads_kv = 2, c.p.seq_q = c.p.seq_k = 256;
    c.p.head_dim = 16, c.p.dtype = TSR_DT_BF16, c.p.geom = c.g;
    /* dense: pack mode pairs q tiles of one head; make a member another head's */
    pl = plan_with(&c, 64, 64, TSR_MAP_AUTO, TSR_TASKS_PACK, 0);
    ck_assert_int_eq(pl->tasks[0].n_members, 2);
    pl->members[pl->tasks[0].member_begin + 1].head ^= 1;
    expect_violation(pl, c.m, "does not share K/V", "kv head");
    tsr_plan_destroy(pl);
    tsr_geom_destroy(c.g);
    tsr_mask_destroy(c.m);
    free(c.bits);
  }
}
END_TEST

START_TEST(test_explain_json)
{
  tu_rng r = {tu_seed("explain_json", 29)};
  pc_case c;
  tsr_plan *pl;
  tsr_plan_summary s;
  json_t *root, *sum;
  json_error_t jerr;
  char *text;
  corrupt_case(&r, &c);
  pl = plan_with(&c, 128, 128, TSR_MAP_COMBINE, TSR_TASKS_SPLIT, 2);
  tsr_plan_summarize(pl, &s);
  ck_assert_int_eq(s.tasks_count, pl->n_tasks);
  ck_assert_str_eq(s.variant, "");
  text = tsr_plan_explain_json(pl, 1);
  ck_assert_ptr_nonnull(text);
  root = json_loads(text, 0, &jerr);
  ck_assert_msg(root != NULL, "%s", jerr.text);
  sum = json_object_get(root, "summary");
  ck_assert_str_eq(json_string_value(json_object_get(sum, "mapping")), "combine");
  ck_assert_str_eq(json_string_value(json_object_get(sum, "tasks")), "split");
  ck_assert_int_eq(json_integer_value(json_object_get(sum, "tiles")), s.tiles);
  ck_assert_int_eq(json_integer_value(json_object_get(sum, "split_rows")), s.split_rows);
  ck_assert(fabs(json_real_value(json_object_get(sum, "wasted_fraction")) - s.wasted_fraction) < 1e-12);
  ck_assert_int_eq((int64_t)json_array_size(json_object_get(root, "tasks")), pl->n_tasks);
  ck_assert_int_eq((int64_t)json_array_size(json_object_get(root, "tiles")), pl->n_tiles);
  ck_assert_int_eq((int64_t)json_array_size(json_object_get(root, "merges")), pl->n_merges);
  ck_assert_int_eq((int64_t)json_array_size(json_object_get(root, "membership")), pl->n_membership);
  ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(json_object_get(root, "tasks"), 0), 3)),
                   pl->tasks[0].tile_begin);
  json_decref(root);
  free(text);
  text = tsr_plan_explain_json(pl, 0);
  root = json_loads(text, 0, &jerr);
  ck_assert_ptr_nonnull(root);
  ck_assert_ptr_null(json_object_get(root, "tasks"));
  json_decref(root);
  free(text);
  ck_assert_ptr_null(tsr_plan_explain_json(NULL, 1));
  tsr_plan_destroy(pl);
  tsr_plan_destroy(NULL);
  pc_free(&c);
  /* names round trip */
  {
    tsr_mapping mp;
    tsr_tasks tk;
    ck_assert_int_eq(tsr_plan_parse_mapping("subdivide", &mp), 0);
    ck_assert_int_eq(mp, TSR_MAP_SUBDIVIDE);
    ck_assert_int_eq(tsr_plan_parse_tasks("pack", &tk), 0);
    ck_assert_int_eq(tk, TSR_TASKS_PACK);
    ck_assert_int_eq(tsr_plan_parse_tasks("packs", &tk), -1);
    ck_assert_int_eq(tsr_plan_parse_mapping(NULL, &mp), -1);
  }
}
END_TEST

/* Replanning into one plan gives exactly the records a fresh plan has, for
 * a sequence of different problems, masks and options (buffers grow and
 * shrink in use), and a failed update leaves an empty, reusable plan. */
START_TEST(test_update_reuse)
{
  tu_rng r = {tu_seed("update_reuse", 61)};
  tsr_plan *reused = NULL;
  tsr_error err = {0};
  int n;
  for (n = 0; n < 24; n++) {
    pc_case c;
    tsr_plan_opts o;
    tsr_plan *fresh = NULL;
    tsr_status st;
    ck_assert_int_eq(pc_make(&r, &c, n % 3 ? 400 : 1500), 0);
    tsr_plan_opts_init(&o);
    o.tasks = (tsr_tasks)tu_range(&r, 0, 3);
    o.tile_m = (int)tu_range(&r, 1, 4) * 32;
    o.tile_n = (int)tu_range(&r, 1, 4) * 32;
    if (!reused)
      ck_assert_int_eq(tsr_plan_create(&c.p, c.m, &o, &reused, &err), TSR_OK);
    else
      ck_assert_msg(tsr_plan_update(reused, &c.p, c.m, &o, &err) == TSR_OK, "%s", err.text);
    st = tsr_plan_create(&c.p, c.m, &o, &fresh, &err);
    ck_assert_int_eq(st, TSR_OK);
    ck_assert_msg(tsr_plan_verify(reused, c.m, &err) == TSR_OK, "%s: %s", c.what, err.text);
    ck_assert_int_eq(reused->n_tasks, fresh->n_tasks);
    ck_assert_int_eq(reused->n_tiles, fresh->n_tiles);
    ck_assert_int_eq(reused->n_members, fresh->n_members);
    ck_assert_int_eq(reused->n_membership, fresh->n_membership);
    ck_assert_int_eq(reused->n_merges, fresh->n_merges);
    ck_assert_int_eq(reused->n_slots, fresh->n_slots);
    ck_assert(!memcmp(reused->tasks, fresh->tasks, (size_t)fresh->n_tasks * sizeof *fresh->tasks));
    ck_assert(!memcmp(reused->tiles, fresh->tiles, (size_t)fresh->n_tiles * sizeof *fresh->tiles));
    ck_assert(!memcmp(reused->members, fresh->members,
                      (size_t)fresh->n_members * sizeof *fresh->members));
    ck_assert(!fresh->n_membership ||
              !memcmp(reused->membership, fresh->membership,
                      (size_t)fresh->n_membership * sizeof *fresh->membership));
    ck_assert(!fresh->n_merges ||
              !memcmp(reused->merges, fresh->merges, (size_t)fresh->n_merges * sizeof *fresh->merges));
    ck_assert(!memcmp(reused->qblk, fresh->qblk, (size_t)fresh->n_qblk * sizeof *fresh->qblk));
    ck_assert(!memcmp(&reused->summary, &fresh->summary, sizeof fresh->summary));
    tsr_plan_destroy(fresh);
    if (n == 10) {
      /* a refused update empties the plan; the next one works again */
      o.tile_m = 100;
      tsr_error_clear(&err);
      ck_assert_int_eq(tsr_plan_update(reused, &c.p, c.m, &o, &err), TSR_ERR_UNSUPPORTED);
      ck_assert_int_eq(reused->n_tasks, 0);
      ck_assert_int_eq(reused->n_tiles, 0);
      tsr_error_clear(&err);
    }
    pc_free(&c);
  }
  ck_assert_int_eq(tsr_plan_update(NULL, NULL, NULL, NULL, &err), TSR_ERR_INVALID);
  tsr_plan_destroy(reused);
}
END_TEST

/* Asserts two plans hold the same records, byte for byte. */
static void expect_same_plan(const tsr_plan *a, const tsr_plan *b, const char *label)
{
  ck_assert_msg(a->n_tasks == b->n_tasks && a->n_tiles == b->n_tiles &&
                    a->n_members == b->n_members && a->n_membership == b->n_membership &&
                    a->n_merges == b->n_merges && a->n_slots == b->n_slots && a->n_qblk == b->n_qblk,
                "%s: counts differ (tasks %lld/%lld, tiles %lld/%lld, words %lld/%lld)", label,
                (long long)a->n_tasks, (long long)b->n_tasks, (long long)a->n_tiles,
                (long long)b->n_tiles, (long long)a->n_membership, (long long)b->n_membership);
  ck_assert_msg(a->tile_m == b->tile_m && a->tile_n == b->tile_n && a->mapping == b->mapping &&
                    a->task_layout == b->task_layout,
                "%s: tile, mapping or layout differ", label);
  ck_assert_msg(!memcmp(a->tasks, b->tasks, (size_t)a->n_tasks * sizeof *a->tasks), "%s: tasks", label);
  ck_assert_msg(!memcmp(a->tiles, b->tiles, (size_t)a->n_tiles * sizeof *a->tiles), "%s: tiles", label);
  ck_assert_msg(!memcmp(a->members, b->members, (size_t)a->n_members * sizeof *a->members),
                "%s: members", label);
  ck_assert_msg(!a->n_membership || !memcmp(a->membership, b->membership,
                                            (size_t)a->n_membership * sizeof *a->membership),
                "%s: membership words", label);
  ck_assert_msg(!a->n_merges || !memcmp(a->merges, b->merges, (size_t)a->n_merges * sizeof *a->merges),
                "%s: merges", label);
  ck_assert_msg(!memcmp(a->qblk, b->qblk, (size_t)a->n_qblk * sizeof *a->qblk), "%s: qblk", label);
  ck_assert_msg(!memcmp(&a->summary, &b->summary, sizeof a->summary), "%s: summary", label);
}

/* The mask as packed rows of row_bytes (>= ceil(nk / 8)), LSB first, with
 * random bits past nk and in the padding, which the library must ignore. */
static tsr_mask *packed_copy(tu_rng *r, const pc_case *c, int64_t row_bytes)
{
  int64_t rows = c->mb * c->mh * c->nq, i, j;
  uint8_t *buf = malloc((size_t)(rows * row_bytes));
  tsr_mask *m = NULL;
  tsr_error err = {0};
  for (i = 0; i < rows * row_bytes; i++)
    buf[i] = (uint8_t)tu_range(r, 0, 255);
  for (i = 0; i < rows; i++)
    for (j = 0; j < c->nk; j++) {
      uint8_t *b = buf + i * row_bytes + j / 8;
      *b = (uint8_t)((*b & ~(1u << (j % 8))) | (unsigned)(c->bits[i * c->nk + j] != 0) << (j % 8));
    }
  ck_assert_msg(tsr_mask_from_packed(c->mb, c->mh, c->nq, c->nk, buf, row_bytes, &m, &err) == TSR_OK,
                "%s", err.text);
  free(buf);
  return m;
}

/* The portable path (TESSERA_PLAN_SIMD=none, a byte mask, a fresh plan)
 * is the reference; every instruction-set level this CPU has, a packed
 * mask, and replanning into one plan reused across all of them (cached
 * qblk, grown buffers, scribbled slack) must give the same bytes, over
 * random geometries (ragged, variable, cross lengths), mask families with
 * empty rows and heads, GQA, broadcast, every tile, mapping and layout. */
START_TEST(test_fast_paths_identical)
{
  static const char *const levels[] = {"sse2", "avx2", "avx512", NULL};
  tu_rng r = {tu_seed("fast_paths", 7) + 7919u * (uint64_t)_i};
  pc_case c;
  tsr_mask *packed;
  tsr_plan *reused = NULL;
  tsr_error err = {0};
  int ti, mp, tk, li, compared = 0;
  ck_assert_int_eq(pc_make(&r, &c, _i % 4 ? 900 : 3000), 0);
  packed = packed_copy(&r, &c, (c.nk + 7) / 8 + tu_range(&r, 0, 9));
  for (ti = 0; ti < PC_NTILES; ti++)
    for (mp = 0; mp < 4; mp++)
      for (tk = 0; tk < 4; tk++) {
        tsr_plan_opts o;
        tsr_plan *ref = NULL;
        tsr_status st;
        char label[400];
        tsr_plan_opts_init(&o);
        o.tile_m = pc_tiles[ti][0];
        o.tile_n = pc_tiles[ti][1];
        o.mapping = (tsr_mapping)mp;
        o.tasks = (tsr_tasks)tk;
        o.split_tiles = tu_uniform(&r) < 0.5 ? (int)tu_range(&r, 1, 6) : 0;
        o.num_sms = (int)tu_range(&r, 0, 160);
        setenv("TESSERA_PLAN_SIMD", "none", 1);
        st = tsr_plan_create(&c.p, c.m, &o, &ref, &err);
        if (st == TSR_ERR_UNSUPPORTED && mp != TSR_MAP_AUTO) {
          tsr_error_clear(&err);
          continue;
        }
        ck_assert_msg(st == TSR_OK, "%s: %s", c.what, err.text);
        for (li = -1; li < 4; li++) {
          int pk;
          for (pk = 0; pk < 2; pk++) {
            tsr_plan *fast = NULL;
            const tsr_mask *m = pk ? packed : c.m;
            if (li < 0 && !pk)
              continue; /* that is the reference */
            if (li < 0)
              setenv("TESSERA_PLAN_SIMD", "none", 1);
            else if (levels[li])
              setenv("TESSERA_PLAN_SIMD", levels[li], 1);
            else
              unsetenv("TESSERA_PLAN_SIMD"); /* the best this CPU has */
            snprintf(label, sizeof label, "%s, tile %dx%d %s/%s split %d, simd %s, %s mask", c.what,
                     o.tile_m, o.tile_n, tsr_plan_mapping_name(o.mapping),
                     tsr_plan_tasks_name(o.tasks), o.split_tiles,
                     li < 0 ? "none" : levels[li] ? levels[li] : "best", pk ? "packed" : "byte");
            ck_assert_msg(tsr_plan_create(&c.p, m, &o, &fast, &err) == TSR_OK, "%s: %s", label,
                          err.text);
            expect_same_plan(ref, fast, label);
            tsr_plan_destroy(fast);
            if (!reused)
              ck_assert_int_eq(tsr_plan_create(&c.p, m, &o, &reused, &err), TSR_OK);
            else
              ck_assert_msg(tsr_plan_update(reused, &c.p, m, &o, &err) == TSR_OK, "%s: %s", label,
                            err.text);
            expect_same_plan(ref, reused, label);
            compared += 2;
          }
        }
        tsr_plan_destroy(ref);
      }
  unsetenv("TESSERA_PLAN_SIMD");
  ck_assert_int_gt(compared, 0);
  tsr_plan_destroy(reused);
  tsr_mask_destroy(packed);
  pc_free(&c);
}
END_TEST

/* Real mask families: the corpus generator's demo preset (Sparse VideoGen,
 * Sliding Tile, Radial, VSA, SpargeAttn, XAttention, Jenga, Sparse-vDiT,
 * dense), every mask planned over tiles and task layouts and verified. */
START_TEST(test_corpus_masks)
{
  char dir[256];
  tsr_corpus *cp;
  tsr_error err = {0};
  int64_t i, plans = 0;
  static const int tiles[][2] = {{0, 0}, {64, 64}, {128, 128}, {64, 128}};
  static const tsr_tasks layouts[] = {TSR_TASKS_AUTO, TSR_TASKS_SPLIT, TSR_TASKS_PACK};
  tu_seed("corpus_masks", 1);
  cp = pc_demo_corpus(dir, sizeof dir);
  ck_assert_ptr_nonnull(cp);
  ck_assert_int_gt(tsr_corpus_count(cp), 0);
  for (i = 0; i < tsr_corpus_count(cp); i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(cp, i);
    tsr_geom *g = NULL;
    tsr_mask *m = NULL;
    tsr_problem p = {0};
    size_t ti, li;
    ck_assert_msg(tsr_corpus_load_geom(cp, i, &g, &err) == TSR_OK, "%s", err.text);
    ck_assert_msg(tsr_corpus_load_mask(cp, i, &m, &err) == TSR_OK, "%s", err.text);
    tsr_corpus_problem(e, g, &p);
    for (ti = 0; ti < sizeof tiles / sizeof tiles[0]; ti++)
      for (li = 0; li < sizeof layouts / sizeof layouts[0]; li++) {
        tsr_plan_opts o;
        tsr_plan *pl = NULL;
        tsr_plan_opts_init(&o);
        o.tile_m = tiles[ti][0], o.tile_n = tiles[ti][1], o.tasks = layouts[li];
        o.split_tiles = layouts[li] == TSR_TASKS_SPLIT ? 3 : 0;
        ck_assert_msg(tsr_plan_create(&p, m, &o, &pl, &err) == TSR_OK, "%s: %s", e->file, err.text);
        ck_assert_msg(tsr_plan_verify(pl, m, &err) == TSR_OK, "%s tile %dx%d %s: %s", e->file,
                      pl->tile_m, pl->tile_n, tsr_plan_tasks_name(layouts[li]), err.text);
        tsr_plan_destroy(pl);
        plans++;
      }
    tsr_mask_destroy(m);
    tsr_geom_destroy(g);
  }
  fprintf(stderr, "corpus_masks: %lld masks, %lld plans verified\n", (long long)tsr_corpus_count(cp),
          (long long)plans);
  tsr_corpus_close(cp);
  tu_rmtree(dir);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("plan");
  TCase *tc = tcase_create("plan");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_verify_sweep, 0, 40);
  tcase_add_test(tc, test_verify_corruptions);
  tcase_add_loop_test(tc, test_verify_gather_corruptions, 0, 8);
  tcase_add_test(tc, test_gather_rejects);
  tcase_add_test(tc, test_verify_other_mask_and_kv);
  tcase_add_test(tc, test_explain_json);
  tcase_add_test(tc, test_update_reuse);
  tcase_add_test(tc, test_corpus_masks);
  tcase_add_loop_test(tc, test_fast_paths_identical, 0, 24);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

/*
 * tasks.c: task organisation, from the rows' tile ranges of map.c to the task,
 * member and merge records of plan_layout.h.
 *
 * A unit is a set of rows (batch, query head, query tile) that one task can
 * serve because they share their key tiles and membership words exactly:
 * GQA heads of one KV head with identical rows (map.c's twins), query tiles
 * of one head group whose tiles are all full with identical key lists (pack
 * mode), or empty rows (pack and auto modes: a zero-output task writes up to
 * TSR_PLAN_MAX_MEMBERS of them).  Units longer than the chunk limit are
 * unpacked and their rows split into near-equal chunks whose partial
 * results go to consecutive slots, merged by one merge record per row.
 * Tasks are then ordered by (batch, KV head) group, longest-first within
 * a group (two stable counting sorts), and every other round of num_sms
 * tasks is reversed (a snake) since persistent CTAs take tasks round-robin;
 * the balance estimate models exactly that walk.
 *
 * Cost: O(rows + tasks) plus, in pack mode only, a sort of the all-full
 * units by a hash of their key lists; when every unit is one row (no GQA
 * twins, nothing split) the protos come straight from the rows, and the
 * row tables (batch, head, q tile, group) are kept across replans of one
 * shape, leaving about four passes of a few bytes a row.  The balance estimate, O(tasks), is
 * a diagnostic and runs only when asked for (tsr_plan_summarize, explain),
 * not on the planning path.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

/* Fewest tiles an automatic split leaves in a chunk: below this the merge
 * (an extra read and write of BM x D floats per chunk) costs more than the
 * balance it buys. */
#define MIN_AUTO_CHUNK 4
/* Query tiles packed into one task in pack mode (K/V loaded once for two
 * query tiles, as a 2*BM-row tile would, without the register cost of more). */
#define QTILE_PACK 2
/* Balance cost model, in quarter tiles: a key tile costs 4, and each member
 * 1 more for loading Q and storing its output. */
#define COST_TILE 4
#define COST_MEMBER 1

typedef struct {
  tsr_i32 tb, te;
  tsr_i32 first, last; /* member rows, chained through next[] */
  tsr_i32 n;
  uint8_t full, dead, qpacked;
} unit;

typedef struct {
  tsr_i32 tb, te, first, n, partial;
  tsr_i32 grp; /* (batch, KV head) group of the first row */
  int64_t key; /* tiles walked: n * (te - tb) */
} proto;

typedef struct {
  int64_t key;
  uint64_t hash;
  tsr_i32 b, kvh, u;
} cand;

static int u64_cmp(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int cand_cmp(const void *a, const void *b)
{
  const cand *x = a, *y = b;
  if (x->b != y->b)
    return x->b < y->b ? -1 : 1;
  if (x->kvh != y->kvh)
    return x->kvh < y->kvh ? -1 : 1;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  if (x->hash != y->hash)
    return x->hash < y->hash ? -1 : 1;
  return x->u < y->u ? -1 : x->u > y->u;
}

/* Most tiles a task walks before its row is split (INT64_MAX: never):
 * `total` tiles over `nonempty` rows. */
static int64_t chunk_limit(const tsr_plan *pl, const tsr_plan_opts *o, int64_t total,
                           int64_t nonempty)
{
  int64_t chunk = INT64_MAX;
  if (o->tasks == TSR_TASKS_AUTO)
    chunk = o->split_tiles > 0 ? o->split_tiles
                               : (total + 2 * pl->num_sms - 1) / (2 * pl->num_sms);
  else if (o->tasks == TSR_TASKS_SPLIT)
    chunk = o->split_tiles > 0 ? o->split_tiles : nonempty ? (total + nonempty - 1) / nonempty : 1;
  if (o->tasks == TSR_TASKS_AUTO && o->split_tiles <= 0 && chunk < MIN_AUTO_CHUNK)
    chunk = MIN_AUTO_CHUNK;
  return chunk < 1 ? 1 : chunk;
}

/* The kernels walk tasks statically: CTA b of a persistent grid of G CTAs
 * runs tasks b, b + G, b + 2G, ...  With G = num_sms (one CTA per
 * multiprocessor), returns the largest CTA load over the mean load per
 * multiprocessor, or -1 without memory. */
double tsri_tasks_balance(const tsr_plan *pl)
{
  int64_t n = pl->num_sms > 0 ? pl->num_sms : 1, i, total = 0, maxload = 0;
  int64_t *load = calloc((size_t)n, sizeof *load);
  if (!load)
    return -1.0;
  for (i = 0; i < pl->n_tasks; i++) {
    const tsr_task_rec *t = &pl->tasks[i];
    int64_t w = (int64_t)t->n_members * ((t->tile_end - t->tile_begin) * COST_TILE + COST_MEMBER);
    total += w;
    if ((load[i % n] += w) > maxload)
      maxload = load[i % n];
  }
  free(load);
  if (total == 0)
    return 1.0;
  return (double)maxload / ((double)total / (double)n);
}

/* One build's state, shared by its steps.  Two paths reach step 5: the
 * direct one (protos_direct) when every unit would be one row and no row is
 * split, and the general steps 1-4 otherwise; both put rows into protos by
 * the same rules (empty_row_joins, proto_add). */
typedef struct {
  tsr_plan *pl;
  const tsr_map_ranges *ranges; /* each row's tiles (map.c) */
  const tsr_plan_opts *o;
  tsr_tasks mode;
  int pack_empty, pack_qtile;
  int twins; /* GQA heads with identical rows may share a unit */
  int64_t nr, group;
  tsr_i32 *next, *unit_of;
  tsr_member_rec *rec; /* each row's (batch, head, q tile), no divisions later */
  tsr_i32 *grp;        /* each row's (batch, KV head) group: tasks of one group
                          share K and V */
  unit *units;
  int64_t n_units;
  proto *protos;
  int64_t n_proto, cap_proto;
  proto *sorted; /* protos by group and length, before the snake */
  int64_t chunk, total, nonempty, n_mem, split_rows, empty_rows, any_pack;
} build;

/* The row tables depend on the shape only: kept from the last build when
 * it is the same, as on every replan of one problem. */
static void row_tables(build *b)
{
  tsr_plan *pl = b->pl;
  const tsr_problem *p = &pl->problem;
  int64_t nr = b->nr, nqt = pl->n_q_tiles, group = b->group, r;
  tsr_member_rec x = {0, 0, 0, 0};
  tsr_i32 g = 0, in_group = 0; /* group = batch * heads_kv + head / group */
  if (pl->rows_shape[0] == nr && pl->rows_shape[1] == nqt && pl->rows_shape[2] == p->heads_q &&
      pl->rows_shape[3] == group)
    return;
  pl->rows_shape[0] = 0;
  for (r = 0; r < nr; r++) {
    b->rec[r] = x;
    b->grp[r] = g;
    if (++x.q_tile == nqt) {
      x.q_tile = 0;
      if (++in_group == group) {
        in_group = 0;
        g++;
      }
      if (++x.head == p->heads_q) {
        x.head = 0;
        x.batch++;
      }
    }
  }
  pl->rows_shape[0] = nr;
  pl->rows_shape[1] = nqt;
  pl->rows_shape[2] = p->heads_q;
  pl->rows_shape[3] = group;
}

/* Whether an empty row joins the open empty unit (index `open`, -1 none,
 * holding `n` rows): in pack and auto modes, while it has room.  Step 1 and
 * the direct path both gather empty rows by this rule. */
static int empty_row_joins(const build *b, int64_t open, tsr_i32 n)
{
  return b->pack_empty && open >= 0 && n < TSR_PLAN_MAX_MEMBERS;
}

/* Appends the proto of `n` rows chained from `first` walking tiles
 * [tb, te), writing partial slots from `partial` (-1: none); its key is the
 * tiles it walks.  -1 when out of memory. */
static int proto_add(build *b, tsr_i32 tb, tsr_i32 te, tsr_i32 first, tsr_i32 n,
                     tsr_i32 partial)
{
  if (b->n_proto == b->cap_proto) {
    proto *q = tsri_plan_buf(b->pl, TSR_BUF_PROTOS, (size_t)(b->cap_proto + 1) * sizeof *q);
    if (!q)
      return -1;
    b->protos = q;
    b->cap_proto = (int64_t)(b->pl->bufs[TSR_BUF_PROTOS].cap / sizeof *q);
  }
  b->protos[b->n_proto++] =
      (proto){tb, te, first, n, partial, b->grp[first], (int64_t)n * (te - tb)};
  return 0;
}

/* Steps 1-4 at once when every unit is one row (no twins: no GQA or row
 * tasks; no query-tile packing) and no row is split: protos straight from
 * the rows, empty rows gathered as step 1 gathers them, no unit table.
 * 1 when every row is in a proto, 0 at the first row that needs splitting
 * (nothing kept: the general steps start over), -1 when out of memory. */
static int protos_direct(build *b)
{
  const tsr_map_ranges *rg = b->ranges;
  tsr_i32 open = -1, last = -1; /* the empty unit still taking rows, its last row */
  int64_t r, i;
  b->chunk = chunk_limit(b->pl, b->o, rg->tiles, 0);
  b->protos = tsri_plan_buf(b->pl, TSR_BUF_PROTOS, (size_t)b->nr * sizeof *b->protos);
  if (!b->protos)
    return -1;
  b->cap_proto = b->nr;
  for (r = 0; r < b->nr; r++) {
    tsr_i32 tb = rg->tile_begin[r], te = rg->tile_end[r];
    if (te > tb) {
      if (te - tb > b->chunk)
        break; /* a split row: the general steps */
      if (proto_add(b, tb, te, (tsr_i32)r, 1, -1))
        return -1;
    } else if (empty_row_joins(b, open, open >= 0 ? b->protos[open].n : 0)) {
      b->next[last] = (tsr_i32)r;
      last = (tsr_i32)r;
      b->protos[open].n++;
    } else {
      open = (tsr_i32)b->n_proto;
      last = (tsr_i32)r;
      if (proto_add(b, tb, te, (tsr_i32)r, 1, -1))
        return -1;
    }
  }
  if (r < b->nr) {
    b->n_proto = 0;
    return 0;
  }
  b->n_mem = b->nr;
  for (i = 0; i < b->n_proto; i++)
    if (b->protos[i].key == 0)
      b->empty_rows += b->protos[i].n;
  return 1;
}

/* 1. Units: rows, GQA twins, empty rows.  Without twins (no GQA, or row
 * tasks) no row looks up another's unit, and unit_of is left alone. */
static void units_gather(build *b)
{
  const tsr_map_ranges *rg = b->ranges;
  unit *units = b->units;
  tsr_i32 *next = b->next, *unit_of = b->unit_of, empty_unit = -1;
  int twins = b->twins;
  int64_t r;
  for (r = 0; r < b->nr; r++) {
    tsr_i32 tb = rg->tile_begin[r], te = rg->tile_end[r], u = -1;
    next[r] = -1;
    if (twins)
      unit_of[r] = -1;
    if (te == tb) {
      b->empty_rows++;
      if (empty_row_joins(b, empty_unit, empty_unit >= 0 ? units[empty_unit].n : 0))
        u = empty_unit;
    } else {
      b->nonempty++;
      b->total += te - tb;
      if (twins && rg->twin[r] >= 0) {
        tsr_i32 cu = unit_of[rg->twin[r]];
        if (cu >= 0 && units[cu].n < TSR_PLAN_MAX_MEMBERS)
          u = cu;
      }
    }
    if (u >= 0) {
      next[units[u].last] = (tsr_i32)r;
      units[u].last = (tsr_i32)r;
      units[u].n++;
    } else {
      unit *x = &units[b->n_units];
      x->tb = tb;
      x->te = te;
      x->first = x->last = (tsr_i32)r;
      x->n = 1;
      x->full = rg->all_full[r];
      x->dead = x->qpacked = 0;
      u = (tsr_i32)b->n_units++;
      if (te == tb)
        empty_unit = u;
    }
    /* Later twins join the newest unit of their root. */
    if (twins && te != tb) {
      tsr_i32 root = rg->twin[r] >= 0 ? rg->twin[r] : (tsr_i32)r;
      unit_of[root] = u;
    }
  }
}

/* 2. Pack mode: all-full units of one batch and KV head with identical
 * key lists share a task, two query tiles' worth at most. */
static tsr_status units_pack(build *b, tsr_error *err)
{
  tsr_plan *pl = b->pl;
  unit *units = b->units;
  cand *cs = tsri_plan_buf(pl, TSR_BUF_CANDS, (size_t)(b->n_units ? b->n_units : 1) * sizeof *cs);
  int64_t nc = 0, a, i;
  if (!cs)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot pack %lld units: out of memory",
                         (long long)b->n_units);
  for (i = 0; i < b->n_units; i++) {
    unit *x = &units[i];
    uint64_t hsh = 1469598103934665603ULL;
    tsr_i32 k;
    if (x->te == x->tb || !x->full)
      continue;
    for (k = x->tb; k < x->te; k++)
      hsh = (hsh ^ (uint64_t)(uint32_t)pl->tiles[k].k_tile) * 1099511628211ULL;
    cs[nc].key = x->te - x->tb;
    cs[nc].hash = hsh;
    cs[nc].b = b->rec[x->first].batch;
    cs[nc].kvh = (tsr_i32)(b->rec[x->first].head / b->group);
    cs[nc].u = (tsr_i32)i;
    nc++;
  }
  qsort(cs, (size_t)nc, sizeof *cs, cand_cmp);
  for (a = 0; a + 1 < nc; a++) {
    unit *x = &units[cs[a].u], *y = &units[cs[a + 1].u];
    if (cs[a].b != cs[a + 1].b || cs[a].kvh != cs[a + 1].kvh || cs[a].key != cs[a + 1].key ||
        cs[a].hash != cs[a + 1].hash || x->n + y->n > TSR_PLAN_MAX_MEMBERS ||
        memcmp(&pl->tiles[x->tb], &pl->tiles[y->tb], (size_t)(x->te - x->tb) * sizeof(tsr_tile_rec)))
      continue;
    b->next[x->last] = y->first;
    x->last = y->last;
    x->n += y->n;
    x->qpacked = 1;
    y->dead = 1;
    a++; /* QTILE_PACK == 2: each unit joins at most one other */
  }
  return TSR_OK;
}

/* A merge record for row `row`, split into `nch` chunks whose partial
 * slots start at pl->n_slots.  -1 when out of memory. */
static int merge_add(build *b, tsr_i32 row, int64_t nch)
{
  tsr_plan *pl = b->pl;
  tsr_merge_rec *mg;
  if ((size_t)(pl->n_merges + 1) * sizeof *pl->merges > pl->bufs[TSR_BUF_MERGES].cap) {
    tsr_merge_rec *q = tsri_plan_buf(pl, TSR_BUF_MERGES, (size_t)(pl->n_merges + 1) * sizeof *q);
    if (!q)
      return -1;
    pl->merges = q;
  }
  mg = &pl->merges[pl->n_merges++];
  memset(mg, 0, sizeof *mg);
  mg->batch = b->rec[row].batch;
  mg->head = b->rec[row].head;
  mg->q_tile = b->rec[row].q_tile;
  mg->slot_begin = (tsr_i32)pl->n_slots;
  mg->n_slots = (tsr_i32)nch;
  b->split_rows++;
  return 0;
}

/* 3. Chunk limit.  4. Proto tasks: units, unpacked and split where too
 * long.  -1 when out of memory. */
static int protos_from_units(build *b)
{
  tsr_plan *pl = b->pl;
  int64_t i;
  b->chunk = chunk_limit(pl, b->o, b->total, b->nonempty);
  b->cap_proto = b->n_units;
  b->protos = tsri_plan_buf(pl, TSR_BUF_PROTOS,
                           (size_t)(b->cap_proto ? b->cap_proto : 1) * sizeof *b->protos);
  if (!b->protos)
    return -1;
  for (i = 0; i < b->n_units; i++) {
    const unit *x = &b->units[i];
    int64_t len = x->te - x->tb;
    tsr_i32 row;
    if (x->dead)
      continue;
    if ((int64_t)x->n * len <= b->chunk) {
      if (proto_add(b, x->tb, x->te, x->first, x->n, -1))
        return -1;
      b->n_mem += x->n;
      if (x->n > 1 && len > 0)
        b->any_pack = 1;
      continue;
    }
    /* Unpack, then split each row longer than the limit. */
    for (row = x->first; row >= 0; row = b->next[row]) {
      int64_t nch = (len + b->chunk - 1) / b->chunk, k;
      if (nch > 1 && merge_add(b, row, nch))
        return -1;
      for (k = 0; k < nch; k++) {
        if (proto_add(b, (tsr_i32)(x->tb + k * len / nch), (tsr_i32)(x->tb + (k + 1) * len / nch),
                      row, 1, nch > 1 ? (tsr_i32)(pl->n_slots + k) : -1))
          return -1;
        b->n_mem++; /* a split row has a member record per chunk */
      }
      if (nch > 1)
        pl->n_slots += nch;
    }
  }
  return 0;
}

/* 5. Order: by (batch, KV head) group, longest-first within a group (ties
 * in creation order), then snaked.  K and V of all heads exceed the L2
 * (Wan2.1-1.3B: 12 x 16.7 MB against 60 MB), so the running tasks must
 * share a head or two; longest-first across all heads measured 498
 * against 630 effective TFLOP/s at 50% density on the H200
 * (notes/sm90.md).  Protos are made in row order and a unit's rows share
 * its first row's group (twins and packed query tiles by construction; the
 * mixed empty unit is never unpacked), so groups never decrease: each group
 * is a contiguous segment, sorted on its own by a counting sort (or, when
 * its lengths spread far wider than it is long, a sort of packed (length,
 * index) keys).  -1 when out of memory. */
static int protos_order(build *b)
{
  tsr_plan *pl = b->pl;
  const proto *protos = b->protos;
  proto *sorted;
  int64_t n_proto = b->n_proto, i;
  sorted = b->sorted =
      tsri_plan_buf(pl, TSR_BUF_SORTED, (size_t)(n_proto ? n_proto : 1) * sizeof *sorted);
  if (!sorted)
    return -1;
  for (i = 0; i < n_proto;) {
    int64_t e = i + 1, kmin = protos[i].key, kmax = protos[i].key, k, range;
    for (; e < n_proto && protos[e].grp == protos[i].grp; e++) {
      if (protos[e].key < kmin)
        kmin = protos[e].key;
      if (protos[e].key > kmax)
        kmax = protos[e].key;
    }
    range = kmax - kmin + 1;
    if (range <= 2 * (e - i) + 64) {
      /* The segment's protos (a group: a few hundred) stay in the cache
       * while they are counted and scattered. */
      int64_t *count = tsri_plan_buf(pl, TSR_BUF_COUNT_KEYS, ((size_t)range + 1) * sizeof *count);
      if (!count)
        return -1;
      memset(count, 0, ((size_t)range + 1) * sizeof *count);
      for (k = i; k < e; k++)
        count[kmax - protos[k].key + 1]++;
      count[0] = i;
      for (k = 1; k <= range; k++)
        count[k] += count[k - 1];
      for (k = i; k < e; k++)
        sorted[count[kmax - protos[k].key]++] = protos[k];
    } else {
      uint64_t *keys = tsri_plan_buf(pl, TSR_BUF_COUNT_KEYS, (size_t)(e - i) * sizeof *keys);
      if (!keys)
        return -1;
      for (k = i; k < e; k++)
        keys[k - i] = (uint64_t)(kmax - protos[k].key) << 32 | (uint64_t)k;
      qsort(keys, (size_t)(e - i), sizeof *keys, u64_cmp);
      for (k = i; k < e; k++)
        sorted[k] = protos[(uint32_t)keys[k - i]];
    }
    i = e;
  }
  return 0;
}

/* 6. Records, with the rounds of num_sms tasks snaked: with CTA b taking
 * tasks b, b + G, ..., plain longest-first would give CTA 0 the longest
 * task of every round; reading every other round backwards evens that
 * out.  A round spans far fewer tasks than a group holds, so groups stay
 * (almost) contiguous.  pl->tasks and members hold n_proto and n_mem. */
static void tasks_write(build *b)
{
  tsr_plan *pl = b->pl;
  const tsr_member_rec *rec = b->rec;
  int64_t g = pl->num_sms, k0, r, n_proto = b->n_proto;
  int odd = 0;
  pl->n_tasks = n_proto;
  pl->n_members = 0;
  for (k0 = 0; k0 < n_proto; k0 += g, odd ^= 1) {
    int64_t len = n_proto - k0 < g ? n_proto - k0 : g;
    for (r = 0; r < len; r++) {
      const proto *q = &b->sorted[odd ? k0 + len - 1 - r : k0 + r];
      tsr_task_rec *t = &pl->tasks[k0 + r];
      tsr_i32 row = q->first, k;
      t->batch = rec[row].batch;
      t->head = rec[row].head;
      t->q_tile = rec[row].q_tile;
      t->tile_begin = q->tb;
      t->tile_end = q->te;
      t->member_begin = (tsr_i32)pl->n_members;
      t->n_members = q->n;
      t->partial = q->partial;
      for (k = 0;;) { /* next[] is read only along a chain */
        pl->members[pl->n_members++] = rec[row];
        if (++k == q->n)
          break;
        row = b->next[row];
      }
    }
  }
}

tsr_status tsri_tasks_build(tsr_plan *pl, const tsr_map_ranges *ranges, const tsr_plan_opts *o,
                           tsr_error *err)
{
  const tsr_problem *p = &pl->problem;
  build b;
  int direct = 0;
  tsr_status st;

  memset(&b, 0, sizeof b);
  b.pl = pl;
  b.ranges = ranges;
  b.o = o;
  b.mode = o->tasks;
  b.pack_empty = b.mode == TSR_TASKS_PACK || b.mode == TSR_TASKS_AUTO; /* and GQA twins */
  b.pack_qtile = b.mode == TSR_TASKS_PACK;
  b.nr = ranges->n_rows;
  b.group = p->heads_q / p->heads_kv;
  b.twins = b.pack_empty && b.group > 1;
  pl->merges = pl->bufs[TSR_BUF_MERGES].p; /* grown as split rows appear */
  b.next = tsri_plan_buf(pl, TSR_BUF_NEXT, (size_t)b.nr * sizeof *b.next);
  b.unit_of = tsri_plan_buf(pl, TSR_BUF_UNIT_OF, (size_t)b.nr * sizeof *b.unit_of);
  b.units = tsri_plan_buf(pl, TSR_BUF_UNITS, (size_t)b.nr * sizeof *b.units);
  b.rec = tsri_plan_buf(pl, TSR_BUF_REC, (size_t)b.nr * sizeof *b.rec);
  b.grp = tsri_plan_buf(pl, TSR_BUF_GROUP, (size_t)(b.nr ? b.nr : 1) * sizeof *b.grp);
  if (!b.next || !b.unit_of || !b.units || !b.rec || !b.grp)
    goto nomem;
  row_tables(&b);

  /* The direct path, unless the tests hold the general steps to it
   * (TESSERA_PLAN_SIMD=none runs them always). */
  if (!b.twins && (b.mode == TSR_TASKS_AUTO || b.mode == TSR_TASKS_ROW) && !ranges->plain &&
      (direct = protos_direct(&b)) < 0)
    goto nomem;
  if (!direct) {
    units_gather(&b);
    if (b.pack_qtile && (st = units_pack(&b, err)) != TSR_OK)
      return st;
    if (protos_from_units(&b))
      goto nomem;
  }

  pl->tasks = tsri_plan_buf(pl, TSR_BUF_TASKS, (size_t)(b.n_proto ? b.n_proto : 1) * sizeof *pl->tasks);
  pl->members = tsri_plan_buf(pl, TSR_BUF_MEMBERS, (size_t)(b.n_mem ? b.n_mem : 1) * sizeof *pl->members);
  if (!pl->tasks || !pl->members || protos_order(&b))
    goto nomem;
  tasks_write(&b);

  if (b.mode != TSR_TASKS_AUTO)
    pl->task_layout = b.mode;
  else
    pl->task_layout = b.split_rows ? TSR_TASKS_SPLIT : b.any_pack ? TSR_TASKS_PACK : TSR_TASKS_ROW;
  pl->summary.tasks_count = pl->n_tasks;
  pl->summary.split_rows = b.split_rows;
  pl->summary.empty_rows = b.empty_rows;
  pl->summary.members = pl->n_members;
  pl->summary.merges = pl->n_merges;
  pl->summary.slots = pl->n_slots;
  return TSR_OK;

nomem:
  return tsr_error_set(err, TSR_ERR_NOMEM, "cannot organise %lld rows into tasks: out of memory",
                       (long long)b.nr);
}

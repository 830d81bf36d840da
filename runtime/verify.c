/*
 * verify.c: tsr_plan_verify, the proof that a plan computes exactly the
 * logical mask: every selected query-key token pair is covered exactly
 * once, no unselected pair reaches the output, every (batch, head, query
 * tile) row is written by exactly one writer (a direct task, or partial
 * slots and one merge record), and every index stays inside its array.
 *
 * Independent of map.c by design: it reads only the plan's arrays (tasks,
 * members, tiles, membership, qblk, merges), the geometry and the mask, and
 * re-derives coverage from them, so a bug in the planner cannot hide
 * itself.  Token-pair exact but not per token: for each row's query-block
 * segment it walks the key axis as intervals cut at tile and key-block
 * boundaries, testing a whole interval's membership bits with word
 * operations.  Cost O(rows x segments x (key blocks + key tiles) + emitted
 * tiles x members + membership words); tens of milliseconds for the
 * largest video masks.  Bad plans (corrupted indices) are reported, never
 * followed out of bounds.
 *
 * Gather plans (plan_layout.h) are checked against their own contract:
 * uniform blocks bq x bk on tiles bq x 2bk, each record two key blocks
 * k_tile < mem (or mem -1: the row's last tile, second half masked), a
 * task's records in ascending order, and each row's records, sorted,
 * pairing exactly its selected blocks in ascending order.  A block is
 * covered whole, so coverage is block-exact (keys past seq_k lie in no
 * block: the kernels mask them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

typedef struct {
  tsr_i32 k_tile, mem, task;
} entry;

static int entry_cmp(const void *a, const void *b)
{
  const entry *x = a, *y = b;
  return x->k_tile < y->k_tile ? -1 : x->k_tile > y->k_tile;
}

/* First column in [a, b) whose bit differs from `want`, or -1. */
static int64_t first_mismatch(const tsr_u32 *w, int64_t a, int64_t b, int want)
{
  int64_t c;
  for (c = a; c < b;) {
    int64_t i = c >> 5, lo = c & 31, hi = (b - 1) >> 5 == i ? ((b - 1) & 31) : 31;
    tsr_u32 m = (hi - lo == 31) ? 0xffffffffu : (tsr_u32)(((1u << (hi - lo + 1)) - 1) << lo);
    tsr_u32 diff = (want ? ~w[i] : w[i]) & m;
    if (diff)
      return (i << 5) + __builtin_ctz(diff);
    c = (i << 5) + hi + 1;
  }
  return -1;
}

/* One verification's state, shared by its steps: the plan's shape, the
 * block starts, and the per-row tallies the steps build up. */
typedef struct {
  const tsr_plan *pl;
  const tsr_mask *m;
  const tsr_problem *p;
  int64_t BM, BN, WN, sq, sk, nq, nk, nqt, nkt, nrows, group, total;
  int gather;           /* TSR_MAP_GATHER: records are block pairs */
  int64_t *qs, *ks;     /* block starts (nq + 1, nk + 1) */
  int64_t *off;         /* each row's first entry in ents (nrows + 1) */
  tsr_i32 *direct;      /* direct writers of each row; then the fill cursor */
  tsr_i32 *merged;      /* merge records of each row */
  tsr_i32 *nslot_row;   /* partial slots each row's tasks write */
  tsr_i32 *slot_row;    /* the row writing each slot, -1 none */
  uint8_t *slot_used;   /* slots a merge reads */
  entry *ents;          /* every (row, tile) a task covers, by row */
} verifier;

/* Each check fails with the first violation it finds. */
#define FAIL(...) return tsr_error_set(err, TSR_ERR_VERIFY, __VA_ARGS__)

/* The plan's tile and tile counts against the problem; the shape. */
static tsr_status check_shape(verifier *v, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  const tsr_problem *p = v->p;
  v->BM = pl->tile_m;
  v->BN = pl->tile_n;
  v->sq = p->seq_q;
  v->sk = p->seq_k;
  v->nq = tsr_geom_nq(p->geom);
  v->nk = tsr_geom_nk(p->geom);
  v->group = p->heads_kv > 0 ? p->heads_q / p->heads_kv : 0;
  if (v->BM <= 0 || v->BN <= 0 || v->BN % 32 || v->group <= 0)
    FAIL("plan tile %dx%d or head ratio is invalid", pl->tile_m, pl->tile_n);
  v->WN = v->BN / 32;
  v->nqt = (v->sq + v->BM - 1) / v->BM;
  v->nkt = (v->sk + v->BN - 1) / v->BN;
  v->gather = pl->mapping == TSR_MAP_GATHER;
  if (v->gather) {
    int64_t bq = 0, bk = 0;
    if (!tsr_geom_is_uniform(p->geom, &bq, &bk) || bq != v->BM || 2 * bk != v->BN)
      FAIL("gather plan tile %dx%d does not pair the blocks (%s %lldx%lld): the tile must be "
           "bq x 2bk",
           pl->tile_m, pl->tile_n, bq ? "uniform" : "variable", (long long)bq, (long long)bk);
    v->nkt = (v->nk + 1) / 2; /* its n_k_tiles: the most tiles a row */
  }
  if (pl->n_q_tiles != v->nqt || pl->n_k_tiles != v->nkt)
    FAIL("plan has %lldx%lld tiles, %lldx%lld tokens need %lldx%lld", (long long)pl->n_q_tiles,
         (long long)pl->n_k_tiles, (long long)v->sq, (long long)v->sk, (long long)v->nqt,
         (long long)v->nkt);
  v->nrows = p->batch * p->heads_q * v->nqt;
  return TSR_OK;
}

static tsr_status alloc_tables(verifier *v, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  int64_t i, j, k;
  v->qs = malloc((size_t)(v->nq + 1) * sizeof *v->qs);
  v->ks = malloc((size_t)(v->nk + 1) * sizeof *v->ks);
  v->off = calloc((size_t)v->nrows + 1, sizeof *v->off);
  v->direct = calloc((size_t)v->nrows, sizeof *v->direct);
  v->merged = calloc((size_t)v->nrows, sizeof *v->merged);
  v->nslot_row = calloc((size_t)v->nrows, sizeof *v->nslot_row);
  v->slot_row = malloc((size_t)(pl->n_slots + 1) * sizeof *v->slot_row);
  v->slot_used = calloc((size_t)pl->n_slots + 1, 1);
  if (!v->qs || !v->ks || !v->off || !v->direct || !v->merged || !v->nslot_row || !v->slot_row ||
      !v->slot_used)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot verify: out of memory for %lld rows",
                         (long long)v->nrows);
  for (i = 0; i <= v->nq; i++)
    v->qs[i] = tsr_geom_q_start(v->p->geom, i);
  for (j = 0; j <= v->nk; j++)
    v->ks[j] = tsr_geom_k_start(v->p->geom, j);
  for (k = 0; k < pl->n_slots; k++)
    v->slot_row[k] = -1;
  return TSR_OK;
}

/* 1. qblk against the geometry. */
static tsr_status check_qblk(const verifier *v, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  int64_t i, r;
  if (pl->n_qblk != v->sq || !pl->qblk)
    FAIL("plan qblk has %lld entries, expected %lld", (long long)pl->n_qblk, (long long)v->sq);
  for (i = 0; i < v->nq; i++)
    for (r = v->qs[i]; r < v->qs[i + 1]; r++)
      if (pl->qblk[r] != i)
        FAIL("plan qblk[%lld] is %d, but query token %lld is in logical block %lld", (long long)r,
             pl->qblk[r], (long long)r, (long long)i);
  return TSR_OK;
}

/* A gather task's tile records: both halves' key blocks in range and
 * ascending, the records ascending, a missing second half only last. */
static tsr_status check_gather_tiles(const verifier *v, const tsr_task_rec *t, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  int64_t u, last = -1;
  for (u = t->tile_begin; u < t->tile_end; u++) {
    const tsr_tile_rec *tr = &pl->tiles[u];
    if (tr->k_tile < 0 || tr->k_tile >= v->nk)
      FAIL("tile record %lld: first half's key block %d out of range [0, %lld)", (long long)u,
           tr->k_tile, (long long)v->nk);
    if (tr->mem < -1 || tr->mem >= v->nk)
      FAIL("tile record %lld: second half's key block %d out of range [0, %lld) (or -1)",
           (long long)u, tr->mem, (long long)v->nk);
    if (tr->mem >= 0 && tr->mem <= tr->k_tile)
      FAIL("tile record %lld: halves' key blocks %d and %d are not ascending", (long long)u,
           tr->k_tile, tr->mem);
    if (tr->k_tile <= last)
      FAIL("tile record %lld: key block %d follows block %lld in its task: not ascending",
           (long long)u, tr->k_tile, (long long)last);
    if (tr->mem < 0 && u + 1 < t->tile_end)
      FAIL("tile record %lld: no second half before the task's last tile", (long long)u);
    last = tr->mem >= 0 ? tr->mem : tr->k_tile;
  }
  return TSR_OK;
}

/* Task t's tile records, for its member mr: key tiles in range, and
 * membership words for every segment of the member's query tile. */
static tsr_status check_task_tiles(const verifier *v, const tsr_task_rec *t,
                                   const tsr_member_rec *mr, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  int64_t r0 = (int64_t)mr->q_tile * v->BM, r1 = r0 + v->BM < v->sq ? r0 + v->BM : v->sq;
  int64_t nseg = pl->qblk[r1 - 1] - pl->qblk[r0] + 1, u;
  if (v->gather)
    return check_gather_tiles(v, t, err);
  for (u = t->tile_begin; u < t->tile_end; u++) {
    const tsr_tile_rec *tr = &pl->tiles[u];
    if (tr->k_tile < 0 || tr->k_tile >= v->nkt)
      FAIL("tile record %lld: key tile %d out of range [0, %lld)", (long long)u, tr->k_tile,
           (long long)v->nkt);
    if (tr->mem < -1 || (tr->mem >= 0 && tr->mem + nseg * v->WN > pl->n_membership))
      FAIL("tile record %lld: membership words [%d, +%lld) outside the %lld words", (long long)u,
           tr->mem, (long long)(nseg * v->WN), (long long)pl->n_membership);
  }
  return TSR_OK;
}

/* 2. Tasks and members: bounds, writers; count each row's tiles. */
static tsr_status check_tasks(verifier *v, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  const tsr_problem *p = v->p;
  int64_t k, r;
  tsr_status st;
  for (k = 0; k < pl->n_tasks; k++) {
    const tsr_task_rec *t = &pl->tasks[k];
    int64_t mi;
    if (t->tile_begin < 0 || t->tile_end < t->tile_begin || t->tile_end > pl->n_tiles)
      FAIL("task %lld: tile range [%d, %d) outside the %lld tile records", (long long)k,
           t->tile_begin, t->tile_end, (long long)pl->n_tiles);
    if (t->n_members < 1 || t->member_begin < 0 ||
        (int64_t)t->member_begin + t->n_members > pl->n_members)
      FAIL("task %lld: members [%d, +%d) outside the %lld member records", (long long)k,
           t->member_begin, t->n_members, (long long)pl->n_members);
    if (t->partial < -1 || (t->partial >= 0 && (int64_t)t->partial + t->n_members > pl->n_slots))
      FAIL("task %lld: partial slots [%d, +%d) outside the %lld slots", (long long)k, t->partial,
           t->n_members, (long long)pl->n_slots);
    for (mi = 0; mi < t->n_members; mi++) {
      const tsr_member_rec *mr = &pl->members[t->member_begin + mi];
      if (mr->batch < 0 || mr->batch >= p->batch || mr->head < 0 || mr->head >= p->heads_q ||
          mr->q_tile < 0 || mr->q_tile >= v->nqt)
        FAIL("task %lld member %lld: (batch %d, head %d, q tile %d) out of range", (long long)k,
             (long long)mi, mr->batch, mr->head, mr->q_tile);
      if (mi == 0 && (mr->batch != t->batch || mr->head != t->head || mr->q_tile != t->q_tile))
        FAIL("task %lld: first member (batch %d, head %d, q tile %d) differs from the task's "
             "(%d, %d, %d)",
             (long long)k, mr->batch, mr->head, mr->q_tile, t->batch, t->head, t->q_tile);
      if (t->tile_end > t->tile_begin &&
          (mr->batch != t->batch || mr->head / v->group != t->head / v->group))
        FAIL("task %lld member %lld: batch %d head %d does not share K/V with batch %d head %d",
             (long long)k, (long long)mi, mr->batch, mr->head, t->batch, t->head);
      r = ((int64_t)mr->batch * p->heads_q + mr->head) * v->nqt + mr->q_tile;
      if ((st = check_task_tiles(v, t, mr, err)))
        return st;
      v->off[r + 1] += t->tile_end - t->tile_begin;
      v->total += t->tile_end - t->tile_begin;
      if (t->partial < 0) {
        v->direct[r]++;
      } else {
        int64_t s = t->partial + mi;
        if (v->slot_row[s] >= 0)
          FAIL("partial slot %lld is written by two tasks (task %lld among them)", (long long)s,
               (long long)k);
        v->slot_row[s] = (tsr_i32)r;
        v->nslot_row[r]++;
      }
    }
  }
  return TSR_OK;
}

/* 3. Merges: each split row merged once, from exactly its own slots; then
 * every row written exactly once. */
static tsr_status check_merges(verifier *v, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  const tsr_problem *p = v->p;
  int64_t k, r, nqt = v->nqt;
  for (k = 0; k < pl->n_merges; k++) {
    const tsr_merge_rec *mg = &pl->merges[k];
    int64_t s;
    if (mg->batch < 0 || mg->batch >= p->batch || mg->head < 0 || mg->head >= p->heads_q ||
        mg->q_tile < 0 || mg->q_tile >= nqt)
      FAIL("merge %lld: (batch %d, head %d, q tile %d) out of range", (long long)k, mg->batch,
           mg->head, mg->q_tile);
    if (mg->slot_begin < 0 || mg->n_slots < 1 ||
        (int64_t)mg->slot_begin + mg->n_slots > pl->n_slots)
      FAIL("merge %lld: slots [%d, +%d) outside the %lld slots", (long long)k, mg->slot_begin,
           mg->n_slots, (long long)pl->n_slots);
    r = ((int64_t)mg->batch * p->heads_q + mg->head) * nqt + mg->q_tile;
    for (s = mg->slot_begin; s < mg->slot_begin + mg->n_slots; s++) {
      if (v->slot_row[s] != r)
        FAIL("merge %lld (batch %d, head %d, q tile %d) reads slot %lld, %s", (long long)k,
             mg->batch, mg->head, mg->q_tile, (long long)s,
             v->slot_row[s] < 0 ? "which no task writes" : "which another row's task writes");
      if (v->slot_used[s])
        FAIL("partial slot %lld is merged twice", (long long)s);
      v->slot_used[s] = 1;
    }
    if (v->merged[r]++)
      FAIL("batch %d head %d q tile %d is merged twice", mg->batch, mg->head, mg->q_tile);
    if (mg->n_slots != v->nslot_row[r])
      FAIL("merge %lld reads %d slots but batch %d head %d q tile %d wrote %d", (long long)k,
           mg->n_slots, mg->batch, mg->head, mg->q_tile, v->nslot_row[r]);
  }
  for (r = 0; r < v->nrows; r++) {
    int64_t b = r / (p->heads_q * nqt), h = r / nqt % p->heads_q, t = r % nqt;
    int writers = v->direct[r] + v->merged[r];
    if (writers == 0)
      FAIL("batch %lld head %lld q tile %lld is never written%s", (long long)b, (long long)h,
           (long long)t, v->nslot_row[r] ? " (partial slots without a merge)" : "");
    if (writers > 1)
      FAIL("batch %lld head %lld q tile %lld is written %d times", (long long)b, (long long)h,
           (long long)t, writers);
  }
  return TSR_OK;
}

/* 4. Entries per row (sorted by key tile in step 5). */
static tsr_status gather_entries(verifier *v, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  const tsr_problem *p = v->p;
  int64_t r, k;
  for (r = 0; r < v->nrows; r++)
    v->off[r + 1] += v->off[r];
  v->ents = malloc((size_t)(v->total ? v->total : 1) * sizeof *v->ents);
  if (!v->ents)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot verify: out of memory for %lld tiles",
                         (long long)v->total);
  for (r = 0; r < v->nrows; r++)
    v->direct[r] = 0; /* reused as the fill cursor */
  for (k = 0; k < pl->n_tasks; k++) {
    const tsr_task_rec *t = &pl->tasks[k];
    int64_t mi, u;
    for (mi = 0; mi < t->n_members; mi++) {
      const tsr_member_rec *mr = &pl->members[t->member_begin + mi];
      r = ((int64_t)mr->batch * p->heads_q + mr->head) * v->nqt + mr->q_tile;
      for (u = t->tile_begin; u < t->tile_end; u++) {
        entry *e = &v->ents[v->off[r] + v->direct[r]++];
        e->k_tile = pl->tiles[u].k_tile;
        e->mem = pl->tiles[u].mem;
        e->task = (tsr_i32)k;
      }
    }
  }
  return TSR_OK;
}

/* Step 5 for one query-block segment iblk of row r (batch b, head h, query
 * tokens [r0, r1)): walks the key axis as intervals cut at tile and
 * key-block boundaries against the row's n sorted entries E. */
static tsr_status check_segment(const verifier *v, int64_t b, int64_t h, int64_t r0, int64_t r1,
                                int64_t iblk, const entry *E, int64_t n, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  int64_t BN = v->BN, sk = v->sk, WN = v->WN;
  int64_t s = iblk - pl->qblk[r0], pos = 0, jb = 0, e = 0;
  int64_t a0 = v->qs[iblk] > r0 ? v->qs[iblk] : r0, a1 = v->qs[iblk + 1] < r1 ? v->qs[iblk + 1] : r1;
  const uint8_t *mrow = tsr_mask_plane(v->m, b, h) + iblk * v->nk;
  while (pos < sk) {
    int64_t u = pos / BN, base = u * BN, tend = base + BN < sk ? base + BN : sk;
    int64_t bend = v->ks[jb + 1], pend = tend < bend ? tend : bend, bad = -1;
    int covered = e < n && E[e].k_tile == u, want = mrow[jb] != 0, got;
    const tsr_u32 *w = covered && E[e].mem >= 0 ? pl->membership + E[e].mem + s * WN : NULL;
    if (!covered)
      got = 0;
    else if (!w)
      got = 1;
    else {
      bad = first_mismatch(w, pos - base, pend - base, want);
      got = bad >= 0 ? !want : want;
    }
    if (got != want) {
      int64_t c = bad >= 0 ? base + bad : pos;
      FAIL("batch %lld head %lld: query tokens [%lld, %lld) (block %lld) x key token %lld "
           "(block %lld, key tile %lld) %s",
           (long long)b, (long long)h, (long long)a0, (long long)a1, (long long)iblk,
           (long long)c, (long long)jb, (long long)u,
           want ? "are selected but not covered" : "are not selected but reach the output");
    }
    pos = pend;
    if (pos == bend)
      jb++;
    if (pos == tend) {
      if (w && tend - base < BN) {
        int64_t c = first_mismatch(w, tend - base, BN, 0);
        if (c >= 0)
          FAIL("batch %lld head %lld: key tile %lld selects column %lld past the key "
               "length %lld",
               (long long)b, (long long)h, (long long)u, (long long)(base + c), (long long)sk);
      }
      if (covered)
        e++;
    }
  }
  return TSR_OK;
}

/* The block of half `half` of a gather row's sorted record e (-1: none). */
static int64_t gather_block(const entry *E, int64_t e, int half) { return half ? E[e].mem : E[e].k_tile; }

/* Step 5 for a gather row (batch b, head h, query tokens [r0, r1), one
 * query block): its n records, sorted by first half, must list blocks in
 * ascending order, two a record, a missing second half only in the last
 * (so they pair the blocks they list as the contract does), and those
 * blocks must be the row's selected ones. */
static tsr_status check_gather_row(const verifier *v, int64_t b, int64_t h, int64_t r0, int64_t r1,
                                   const entry *E, int64_t n, tsr_error *err)
{
  int64_t iblk = v->pl->qblk[r0], prev = -1, e, j, blk;
  int half;
  const uint8_t *mrow = tsr_mask_plane(v->m, b, h) + iblk * v->nk;
#define GATHER_FAIL(blk, what, ...)                                                            \
  FAIL("batch %lld head %lld: query tokens [%lld, %lld) (block %lld) x key tokens [%lld, %lld) " \
       "(block %lld) " what,                                                                   \
       (long long)b, (long long)h, (long long)r0, (long long)r1, (long long)iblk,              \
       (long long)v->ks[blk], (long long)v->ks[(blk) + 1], (long long)(blk), __VA_ARGS__)
  for (e = 0; e < n; e++)
    for (half = 0; half < 2; half++) {
      blk = gather_block(E, e, half);
      if (blk < 0) {
        if (e + 1 < n)
          FAIL("batch %lld head %lld q tile %lld: tile record of task %d has no second half but "
               "is not the row's last",
               (long long)b, (long long)h, (long long)(r0 / v->BM), E[e].task);
        continue;
      }
      if (blk == prev)
        GATHER_FAIL(blk, "are covered twice (task %d)", E[e].task);
      if (blk < prev)
        GATHER_FAIL(blk, "are paired out of ascending order, after block %lld (task %d)",
                    (long long)prev, E[e].task);
      prev = blk;
    }
  /* The blocks ascending, one walk over the key blocks compares them with
   * the mask. */
  for (e = 0, half = 0, j = 0; j < v->nk; j++) {
    while (e < n && gather_block(E, e, half) < j) { /* -1, or a block already passed */
      half ^= 1;
      e += !half;
    }
    blk = e < n ? gather_block(E, e, half) : -1;
    if (blk == j && !mrow[j])
      GATHER_FAIL(j, "are not selected but reach the output (task %d)", E[e].task);
    if (blk != j && mrow[j])
      GATHER_FAIL(j, "are selected but not covered%s", "");
  }
#undef GATHER_FAIL
  return TSR_OK;
}

/* 5. Token-pair coverage, row by row, segment by segment. */
static tsr_status check_coverage(verifier *v, tsr_error *err)
{
  const tsr_plan *pl = v->pl;
  const tsr_problem *p = v->p;
  int64_t BM = v->BM, BN = v->BN, sq = v->sq, sk = v->sk, nqt = v->nqt, r;
  tsr_status st;
  for (r = 0; r < v->nrows; r++) {
    int64_t b = r / (p->heads_q * nqt), h = r / nqt % p->heads_q, t = r % nqt;
    int64_t r0 = t * BM, r1 = r0 + BM < sq ? r0 + BM : sq, n = v->off[r + 1] - v->off[r], e;
    entry *E = v->ents + v->off[r];
    int64_t iblk;
    for (e = 1; e < n && E[e - 1].k_tile <= E[e].k_tile; e++)
      ;
    if (e < n)
      qsort(E, (size_t)n, sizeof *E, entry_cmp);
    if (v->gather) {
      if ((st = check_gather_row(v, b, h, r0, r1, E, n, err)))
        return st;
      continue;
    }
    for (e = 1; e < n; e++)
      if (E[e - 1].k_tile == E[e].k_tile)
        FAIL("batch %lld head %lld: query tokens [%lld, %lld) x key tile %d (tokens [%lld, "
             "%lld)) are covered twice (tasks %d and %d)",
             (long long)b, (long long)h, (long long)r0, (long long)r1, E[e].k_tile,
             (long long)E[e].k_tile * BN,
             (long long)((E[e].k_tile + 1) * BN < sk ? (E[e].k_tile + 1) * BN : sk), E[e - 1].task,
             E[e].task);
    for (iblk = pl->qblk[r0]; iblk <= pl->qblk[r1 - 1]; iblk++)
      if ((st = check_segment(v, b, h, r0, r1, iblk, E, n, err)))
        return st;
  }
  return TSR_OK;
}

tsr_status tsr_plan_verify(const tsr_plan *pl, const tsr_mask *m, tsr_error *err)
{
  verifier v;
  tsr_status st;

  if (!pl || !m)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot verify: plan and mask are required");
  memset(&v, 0, sizeof v);
  v.pl = pl;
  v.m = m;
  v.p = &pl->problem;
  st = tsr_mask_check(m, v.p->geom, v.p->batch, v.p->heads_q, NULL, err);
  if (st)
    return st;
  if ((st = check_shape(&v, err)))
    return st;
  if (!(st = alloc_tables(&v, err)) && !(st = check_qblk(&v, err)) && !(st = check_tasks(&v, err)) &&
      !(st = check_merges(&v, err)) && !(st = gather_entries(&v, err)))
    st = check_coverage(&v, err);
  free(v.qs);
  free(v.ks);
  free(v.off);
  free(v.direct);
  free(v.merged);
  free(v.nslot_row);
  free(v.slot_row);
  free(v.slot_used);
  free(v.ents);
  return st;
}

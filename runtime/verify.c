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

#define FAIL(...)                                                   \
  do {                                                              \
    st = tsr_error_set(err, TSR_ERR_VERIFY, __VA_ARGS__);           \
    goto done;                                                      \
  } while (0)

tsr_status tsr_plan_verify(const tsr_plan *pl, const tsr_mask *m, tsr_error *err)
{
  const tsr_problem *p;
  const tsr_geom *g;
  int64_t BM, BN, WN, sq, sk, nq, nk, nqt, nkt, nrows, i, j, r, k, total = 0;
  int64_t *qs = NULL, *ks = NULL, *off = NULL;
  tsr_i32 *direct = NULL, *slot_row = NULL, *merged = NULL, *nslot_row = NULL;
  uint8_t *slot_used = NULL;
  entry *ents = NULL;
  tsr_status st = TSR_OK;
  int64_t group;

  if (!pl || !m)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot verify: plan and mask are required");
  p = &pl->problem;
  g = p->geom;
  st = tsr_mask_check(m, g, p->batch, p->heads_q, NULL, err);
  if (st)
    return st;
  BM = pl->tile_m;
  BN = pl->tile_n;
  sq = p->seq_q;
  sk = p->seq_k;
  nq = tsr_geom_nq(g);
  nk = tsr_geom_nk(g);
  group = p->heads_kv > 0 ? p->heads_q / p->heads_kv : 0;
  if (BM <= 0 || BN <= 0 || BN % 32 || group <= 0)
    return tsr_error_set(err, TSR_ERR_VERIFY, "plan tile %dx%d or head ratio is invalid",
                         pl->tile_m, pl->tile_n);
  WN = BN / 32;
  nqt = (sq + BM - 1) / BM;
  nkt = (sk + BN - 1) / BN;
  if (pl->n_q_tiles != nqt || pl->n_k_tiles != nkt)
    return tsr_error_set(err, TSR_ERR_VERIFY,
                         "plan has %lldx%lld tiles, %lldx%lld tokens need %lldx%lld",
                         (long long)pl->n_q_tiles, (long long)pl->n_k_tiles, (long long)sq,
                         (long long)sk, (long long)nqt, (long long)nkt);
  nrows = p->batch * p->heads_q * nqt;

  qs = malloc((size_t)(nq + 1) * sizeof *qs);
  ks = malloc((size_t)(nk + 1) * sizeof *ks);
  off = calloc((size_t)nrows + 1, sizeof *off);
  direct = calloc((size_t)nrows, sizeof *direct);
  merged = calloc((size_t)nrows, sizeof *merged);
  nslot_row = calloc((size_t)nrows, sizeof *nslot_row);
  slot_row = malloc((size_t)(pl->n_slots + 1) * sizeof *slot_row);
  slot_used = calloc((size_t)pl->n_slots + 1, 1);
  if (!qs || !ks || !off || !direct || !merged || !nslot_row || !slot_row || !slot_used) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot verify: out of memory for %lld rows",
                       (long long)nrows);
    goto done;
  }
  for (i = 0; i <= nq; i++)
    qs[i] = tsr_geom_q_start(g, i);
  for (j = 0; j <= nk; j++)
    ks[j] = tsr_geom_k_start(g, j);
  for (k = 0; k < pl->n_slots; k++)
    slot_row[k] = -1;

  /* 1. qblk against the geometry. */
  if (pl->n_qblk != sq || !pl->qblk)
    FAIL("plan qblk has %lld entries, expected %lld", (long long)pl->n_qblk, (long long)sq);
  for (i = 0; i < nq; i++)
    for (r = qs[i]; r < qs[i + 1]; r++)
      if (pl->qblk[r] != i)
        FAIL("plan qblk[%lld] is %d, but query token %lld is in logical block %lld", (long long)r,
             pl->qblk[r], (long long)r, (long long)i);

  /* 2. Tasks and members: bounds, writers; count each row's tiles. */
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
      int64_t u;
      if (mr->batch < 0 || mr->batch >= p->batch || mr->head < 0 || mr->head >= p->heads_q ||
          mr->q_tile < 0 || mr->q_tile >= nqt)
        FAIL("task %lld member %lld: (batch %d, head %d, q tile %d) out of range", (long long)k,
             (long long)mi, mr->batch, mr->head, mr->q_tile);
      if (mi == 0 && (mr->batch != t->batch || mr->head != t->head || mr->q_tile != t->q_tile))
        FAIL("task %lld: first member (batch %d, head %d, q tile %d) differs from the task's "
             "(%d, %d, %d)",
             (long long)k, mr->batch, mr->head, mr->q_tile, t->batch, t->head, t->q_tile);
      if (t->tile_end > t->tile_begin &&
          (mr->batch != t->batch || mr->head / group != t->head / group))
        FAIL("task %lld member %lld: batch %d head %d does not share K/V with batch %d head %d",
             (long long)k, (long long)mi, mr->batch, mr->head, t->batch, t->head);
      r = ((int64_t)mr->batch * p->heads_q + mr->head) * nqt + mr->q_tile;
      /* Membership words must exist for every segment of this member's tile. */
      {
        int64_t r0 = (int64_t)mr->q_tile * BM, r1 = r0 + BM < sq ? r0 + BM : sq;
        int64_t nseg = pl->qblk[r1 - 1] - pl->qblk[r0] + 1;
        for (u = t->tile_begin; u < t->tile_end; u++) {
          const tsr_tile_rec *tr = &pl->tiles[u];
          if (tr->k_tile < 0 || tr->k_tile >= nkt)
            FAIL("tile record %lld: key tile %d out of range [0, %lld)", (long long)u, tr->k_tile,
                 (long long)nkt);
          if (tr->mem < -1 || (tr->mem >= 0 && tr->mem + nseg * WN > pl->n_membership))
            FAIL("tile record %lld: membership words [%d, +%lld) outside the %lld words",
                 (long long)u, tr->mem, (long long)(nseg * WN), (long long)pl->n_membership);
        }
      }
      off[r + 1] += t->tile_end - t->tile_begin;
      total += t->tile_end - t->tile_begin;
      if (t->partial < 0) {
        direct[r]++;
      } else {
        int64_t s = t->partial + mi;
        if (slot_row[s] >= 0)
          FAIL("partial slot %lld is written by two tasks (task %lld among them)", (long long)s,
               (long long)k);
        slot_row[s] = (tsr_i32)r;
        nslot_row[r]++;
      }
    }
  }

  /* 3. Merges: each split row merged once, from exactly its own slots. */
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
      if (slot_row[s] != r)
        FAIL("merge %lld (batch %d, head %d, q tile %d) reads slot %lld, %s", (long long)k,
             mg->batch, mg->head, mg->q_tile, (long long)s,
             slot_row[s] < 0 ? "which no task writes" : "which another row's task writes");
      if (slot_used[s])
        FAIL("partial slot %lld is merged twice", (long long)s);
      slot_used[s] = 1;
    }
    if (merged[r]++)
      FAIL("batch %d head %d q tile %d is merged twice", mg->batch, mg->head, mg->q_tile);
    if (mg->n_slots != nslot_row[r])
      FAIL("merge %lld reads %d slots but batch %d head %d q tile %d wrote %d", (long long)k,
           mg->n_slots, mg->batch, mg->head, mg->q_tile, nslot_row[r]);
  }
  for (r = 0; r < nrows; r++) {
    int64_t b = r / (p->heads_q * nqt), h = r / nqt % p->heads_q, t = r % nqt;
    int writers = direct[r] + merged[r];
    if (writers == 0)
      FAIL("batch %lld head %lld q tile %lld is never written%s", (long long)b, (long long)h,
           (long long)t, nslot_row[r] ? " (partial slots without a merge)" : "");
    if (writers > 1)
      FAIL("batch %lld head %lld q tile %lld is written %d times", (long long)b, (long long)h,
           (long long)t, writers);
  }

  /* 4. Entries per row, sorted by key tile. */
  for (r = 0; r < nrows; r++)
    off[r + 1] += off[r];
  ents = malloc((size_t)(total ? total : 1) * sizeof *ents);
  if (!ents) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot verify: out of memory for %lld tiles",
                       (long long)total);
    goto done;
  }
  for (r = 0; r < nrows; r++)
    direct[r] = 0; /* reused as the fill cursor */
  for (k = 0; k < pl->n_tasks; k++) {
    const tsr_task_rec *t = &pl->tasks[k];
    int64_t mi, u;
    for (mi = 0; mi < t->n_members; mi++) {
      const tsr_member_rec *mr = &pl->members[t->member_begin + mi];
      r = ((int64_t)mr->batch * p->heads_q + mr->head) * nqt + mr->q_tile;
      for (u = t->tile_begin; u < t->tile_end; u++) {
        entry *e = &ents[off[r] + direct[r]++];
        e->k_tile = pl->tiles[u].k_tile;
        e->mem = pl->tiles[u].mem;
        e->task = (tsr_i32)k;
      }
    }
  }

  /* 5. Token-pair coverage, row by row, segment by segment. */
  for (r = 0; r < nrows; r++) {
    int64_t b = r / (p->heads_q * nqt), h = r / nqt % p->heads_q, t = r % nqt;
    int64_t r0 = t * BM, r1 = r0 + BM < sq ? r0 + BM : sq, n = off[r + 1] - off[r], e;
    entry *E = ents + off[r];
    const uint8_t *plane = tsr_mask_plane(m, b, h);
    int64_t iblk;
    for (e = 1; e < n && E[e - 1].k_tile <= E[e].k_tile; e++)
      ;
    if (e < n)
      qsort(E, (size_t)n, sizeof *E, entry_cmp);
    for (e = 1; e < n; e++)
      if (E[e - 1].k_tile == E[e].k_tile)
        FAIL("batch %lld head %lld: query tokens [%lld, %lld) x key tile %d (tokens [%lld, "
             "%lld)) are covered twice (tasks %d and %d)",
             (long long)b, (long long)h, (long long)r0, (long long)r1, E[e].k_tile,
             (long long)E[e].k_tile * BN,
             (long long)((E[e].k_tile + 1) * BN < sk ? (E[e].k_tile + 1) * BN : sk), E[e - 1].task,
             E[e].task);
    for (iblk = pl->qblk[r0]; iblk <= pl->qblk[r1 - 1]; iblk++) {
      int64_t s = iblk - pl->qblk[r0], pos = 0, jb = 0;
      int64_t a0 = qs[iblk] > r0 ? qs[iblk] : r0, a1 = qs[iblk + 1] < r1 ? qs[iblk + 1] : r1;
      const uint8_t *mrow = plane + iblk * nk;
      e = 0;
      while (pos < sk) {
        int64_t u = pos / BN, base = u * BN, tend = base + BN < sk ? base + BN : sk;
        int64_t bend = ks[jb + 1], pend = tend < bend ? tend : bend, bad = -1;
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
    }
  }

done:
  free(qs);
  free(ks);
  free(off);
  free(direct);
  free(merged);
  free(nslot_row);
  free(slot_row);
  free(slot_used);
  free(ents);
  return st;
}

/*
 * plan_impl.h: the plan's internal representation, shared by the modules
 * that build it (map.c, tasks.c, plan.c), check it (verify.c), run it
 * (exec_cpu.c, gpu.c) and measure it (features.c).  Not installed.
 *
 * A plan is plain data: the arrays of plan_layout.h plus the facts needed to
 * interpret them.  Everything is owned by the plan and freed by
 * tsr_plan_destroy; the record arrays point into the plan's reusable
 * buffers (bufs[] below), so nothing else may free or realloc them.  `gpu`
 * holds the device copies made by tsr_gpu_upload (freed through the context
 * that made them, and dropped by tsr_plan_update).
 */
#ifndef TSR_PLAN_IMPL_H
#define TSR_PLAN_IMPL_H

#include "plan_layout.h"
#include "tessera.h"

/* Reusable buffers.  Every array of the plan and every temporary of map.c
 * and tasks.c lives in one slot, grown (never shrunk) by tsri_plan_buf and
 * freed only by tsr_plan_destroy, so replanning into the same plan
 * (tsr_plan_update, once per layer and step) touches no fresh memory: no
 * allocator calls and no page faults on the steady path. */
enum {
  TSR_BUF_TASKS, TSR_BUF_TILES, TSR_BUF_MEMBERS, TSR_BUF_MEMBERSHIP, TSR_BUF_QBLK,
  TSR_BUF_MERGES,
  /* map.c */
  TSR_BUF_QS, TSR_BUF_KS, TSR_BUF_I0, TSR_BUF_I1, TSR_BUF_KB0, TSR_BUF_KB1, TSR_BUF_KT0,
  TSR_BUF_KT1, TSR_BUF_KCOLS, TSR_BUF_ORAND, TSR_BUF_PROW, TSR_BUF_PSEL,
  TSR_BUF_ROW_TB, TSR_BUF_ROW_TE, TSR_BUF_ROW_FULL, TSR_BUF_ROW_TWIN, TSR_BUF_PLANES,
  TSR_BUF_COLMASK, TSR_BUF_CMOFF, TSR_BUF_KMASK,
  /* tasks.c */
  TSR_BUF_NEXT, TSR_BUF_UNIT_OF, TSR_BUF_UNITS, TSR_BUF_REC, TSR_BUF_PROTOS, TSR_BUF_SORTED,
  TSR_BUF_COUNT_KEYS, TSR_BUF_COUNT_GROUPS, TSR_BUF_CANDS, TSR_BUF_GROUP,
  TSR_BUF_COUNT
};

struct tsr_plan {
  tsr_problem problem;       /* copy; problem.geom is borrowed */
  tsr_plan_opts opts;        /* as requested (strings not kept) */
  int tile_m, tile_n;        /* physical tile BM x BN */
  tsr_mapping mapping;       /* as resolved (never AUTO) */
  tsr_tasks task_layout;     /* as resolved (never AUTO) */
  int num_sms;
  char arch[16];
  char variant[96];          /* kernel variant name; "" until chosen */

  int64_t n_q_tiles, n_k_tiles;

  tsr_task_rec *tasks;       int64_t n_tasks;    /* in launch order */
  tsr_tile_rec *tiles;       int64_t n_tiles;
  tsr_member_rec *members;   int64_t n_members;
  tsr_u32 *membership;       int64_t n_membership; /* words */
  tsr_i32 *qblk;             int64_t n_qblk;       /* == seq_q */
  tsr_merge_rec *merges;     int64_t n_merges;
  int64_t n_slots;           /* partial slots (split rows) */

  tsr_plan_summary summary;  /* filled when the plan is built, except balance
                                (computed by tsr_plan_summarize: it is a
                                diagnostic, kept off the planning path) */

  int64_t qblk_nq;           /* map.c: qblk holds the fill for the nq query
                                blocks whose starts the QS buffer holds (so a
                                replan of the same geometry skips it); 0 none */
  int64_t rows_shape[4];     /* tasks.c: its row tables (batch, head, q tile
                                and group of each row) hold rows for (rows, q
                                tiles, query heads, heads per KV head); 0 none */

  void *gpu;                 /* device copies (gpu.c), or NULL */
  void (*gpu_free)(void *);  /* releases `gpu`; set by gpu.c */

  struct {
    void *p;
    size_t cap;              /* bytes */
  } bufs[TSR_BUF_COUNT];     /* the arrays above point into these */
};

/* Slot `slot` with at least `bytes` bytes (contents kept, as realloc; grows
 * by half again at least, so growing loops stay linear).  NULL when out of
 * memory, the old buffer then still owned by the slot. */
void *tsri_plan_buf(tsr_plan *pl, int slot, size_t bytes);

/* ---- Planner internals (map.c, tasks.c; plan.c drives them) ----------
 *
 * A plan row (tessera.h, "Plans") is (batch b, query head h, query tile t),
 * numbered r = (b * heads_q + h) * n_q_tiles + t.  map.c emits each row's
 * key tiles into pl->tiles (plus membership words) and hands tasks.c each
 * row's range of them (tsr_map_ranges); tasks.c groups rows into tasks.
 * Rows whose tiles are identical share one tile range (broadcast masks, GQA
 * heads with identical rows), so the emitted tile array can be far shorter
 * than the sum of row lengths.
 */
typedef struct {
  int64_t n_rows;
  tsr_i32 *tile_begin, *tile_end; /* the row's tiles in pl->tiles */
  uint8_t *all_full;              /* every tile of the row is full (mem == -1) */
  tsr_i32 *twin;                  /* earliest row of the same batch, KV head and
                                     q tile with identical tiles (and identical
                                     membership words), or -1 */
  int64_t tiles, partial_tiles;   /* summed over problem rows */
  double selected_pairs, computed_pairs;
  int plain;                      /* TESSERA_PLAN_SIMD=none: the reference paths
                                     throughout (tasks.c too), for the tests */
} tsr_map_ranges;

/* The mapping rule, the one source for the planner and the selection
 * (select.c): along each axis, whether some tile holds tokens of several
 * logical blocks (combined) and whether some whole tile lies inside a
 * larger block (subdivided); retain needs neither, combine the first,
 * subdivide the second.  For uniform blocks (bq x bk over sq x sk tokens,
 * the last ragged) in O(1). */
void tsri_map_relation_uniform(int64_t bq, int64_t bk, int64_t sq, int64_t sk, int tile_m,
                              int tile_n, int *combined, int *subdivided);
/* Whether `mapping` applies to tiles with that relation (AUTO always;
 * GATHER never: it is no relation, see tsri_map_gather_fits). */
int tsri_map_applies(tsr_mapping mapping, int combined, int subdivided);
/* The gather rule (plan_layout.h, "Gather plans"), for the planner and the
 * selection: uniform blocks bq x bk on the tile bq x 2bk. */
int tsri_map_gather_fits(int64_t bq, int64_t bk, int tile_m, int tile_n);

/* Chooses the tile (opts or default) and resolves the mapping against the
 * geometry: fills pl->tile_m, tile_n, mapping, n_q_tiles, n_k_tiles and
 * summary.combined / subdivided.  TSR_ERR_UNSUPPORTED names both sizes
 * when the requested mapping does not fit. */
tsr_status tsri_map_resolve(tsr_plan *pl, const tsr_plan_opts *o, tsr_error *err);
/* Builds qblk, tiles, membership and the rows' tile ranges (whose arrays live in
 * the plan's buffers, valid until the next build). */
tsr_status tsri_map_build(tsr_plan *pl, const tsr_mask *m, tsr_map_ranges *rows,
                         tsr_error *err);

/* The tile records and membership words tsri_map_build would emit for the
 * mask over the resolved plan pl (tile and tile counts set by
 * tsri_map_resolve): a broadcast plane once, before GQA heads with
 * identical rows share theirs, so never fewer than it emits.  Stops once
 * either passes its limit (tessera.h).  No per-token or per-tile table:
 * O(planes x query blocks x words a row + selected blocks).  The planner's
 * capacity check runs it when a cheap bound exceeds a limit; the tests
 * compare it with plans.  0, or -1 when out of memory. */
int tsri_map_count(const tsr_plan *pl, const tsr_mask *m, int64_t *tiles, int64_t *words);

/* Groups rows into tasks per opts->tasks (row / split / pack / auto), orders
 * them longest-first, allocates partial slots and merge records, fills
 * pl->tasks, members, merges, n_slots, task_layout and the task counts of
 * the summary. */
tsr_status tsri_tasks_build(tsr_plan *pl, const tsr_map_ranges *ranges,
                           const tsr_plan_opts *o, tsr_error *err);
/* Expected balance of the plan's tasks over its persistent grid of num_sms
 * CTAs walking tasks round-robin (CTA b: tasks b, b + num_sms, ...), as the
 * kernels do: max CTA load / mean load per multiprocessor (a key tile costs
 * 4, a member's Q load and store 1); -1 when out of memory. */
double tsri_tasks_balance(const tsr_plan *pl);
/* Physical tiles the planner supports: rows a multiple of 16, columns of
 * 32 (the kernels' MMA shapes and 32-bit membership words), each at most
 * TSR_MAX_TILE.  map.c resolves tiles with them, tsr_plan_opts_check
 * checks requested ones. */
static inline int tsri_tile_m_ok(int64_t v) { return v >= 16 && v <= TSR_MAX_TILE && v % 16 == 0; }
static inline int tsri_tile_n_ok(int64_t v) { return v >= 32 && v <= TSR_MAX_TILE && v % 32 == 0; }

/* tsr_gpuplan_features' core, testable without a device: the features of
 * a GPU template's step s, planned for problem p on tile_m x tile_n tiles
 * (gather: mapping "gather") with num_sms multiprocessors. */
void tsri_gpuplan_features_of(const tsr_problem *p, int tile_m, int tile_n, int gather, int num_sms,
                              const tsr_gpuplan_stats *s, tsr_features *f);

/* Largest members per task the planner emits (GQA groups, empty rows). */
#define TSR_PLAN_MAX_MEMBERS 8

/* The sm90 dyn layout's ints after a launch's task count (p.n_tasks_dev;
 * templates/attn_sm90.cuh, TSR_SM90_DYN_CTR and TSR_SM90_DYN_SENTINEL):
 * the task counter and the producers done, then a task record with
 * n_members -1 that the producers copy for "none left".  Host plans get a
 * buffer of TSR_DYN_INTS (runtime/gpu.c); bound plans use the device
 * planner's counts, whose ints 10..23 it never writes (runtime/gpuplan.c
 * puts the -1 there). */
#define TSR_DYN_CTR 10
#define TSR_DYN_SENTINEL 16
#define TSR_DYN_INTS (TSR_DYN_SENTINEL + 8)
_Static_assert(TSR_GP_TASKS == 0 && TSR_GP_COUNTS <= TSR_DYN_CTR && TSR_DYN_INTS <= TSR_GP_DSTATS &&
                   sizeof(tsr_task_rec) == 32 && TSR_DYN_SENTINEL % 4 == 0,
               "the dyn counters and sentinel must sit in the device planner's unused counts");

#endif

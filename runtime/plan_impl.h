/*
 * plan_impl.h: the plan's internal representation, shared by the modules
 * that build it (map.c, tasks.c, plan.c), check it (verify.c), run it
 * (exec_cpu.c, gpu.c) and measure it (features.c).  Not installed.
 *
 * A plan is plain data: the arrays of plan_layout.h plus the facts needed to
 * interpret them.  Everything is owned by the plan and freed by
 * tsr_plan_destroy; `gpu` holds the device copies made by tsr_gpu_upload
 * (freed through the context that made them).
 */
#ifndef TSR_PLAN_IMPL_H
#define TSR_PLAN_IMPL_H

#include "plan_layout.h"
#include "tessera.h"

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

  tsr_plan_summary summary;  /* filled when the plan is built */

  void *gpu;                 /* device copies (gpu.c), or NULL */
  void (*gpu_free)(void *);  /* releases `gpu`; set by gpu.c */
};

/* ---- Planner internals (map.c, tasks.c; plan.c drives them) ----------
 *
 * A problem row is (batch b, query head h, query tile t), numbered
 * r = (b * heads_q + h) * n_q_tiles + t.  map.c emits each row's key tiles
 * into pl->tiles (plus membership words) and describes the rows here;
 * tasks.c groups rows into tasks.  Rows whose tiles are identical share one
 * tile range (broadcast masks, GQA heads with identical rows), so the
 * emitted tile array can be far shorter than the sum of row lengths.
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
} tsr_map_rows;

/* Chooses the tile (opts or default) and resolves the mapping against the
 * geometry: fills pl->tile_m, tile_n, mapping, n_q_tiles, n_k_tiles and
 * summary.combined / subdivided.  TSR_ERR_UNSUPPORTED names both sizes
 * when the requested mapping does not fit. */
tsr_status tsr_map_resolve(tsr_plan *pl, const tsr_plan_opts *o, tsr_error *err);
/* Builds qblk, tiles, membership and the row table.  rows is zeroed first
 * and freed with tsr_map_rows_free. */
tsr_status tsr_map_build(tsr_plan *pl, const tsr_mask *m, tsr_map_rows *rows,
                         tsr_error *err);
void tsr_map_rows_free(tsr_map_rows *rows);

/* Groups rows into tasks per opts->tasks (row / split / pack / auto), orders
 * them longest-first, allocates partial slots and merge records, fills
 * pl->tasks, members, merges, n_slots, task_layout and summary.balance. */
tsr_status tsr_tasks_build(tsr_plan *pl, const tsr_map_rows *rows,
                           const tsr_plan_opts *o, tsr_error *err);
/* Largest members per task the planner emits (GQA groups, empty rows). */
#define TSR_PLAN_MAX_MEMBERS 8

#endif

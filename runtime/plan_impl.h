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

#endif

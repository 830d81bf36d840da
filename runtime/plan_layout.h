/*
 * plan_layout.h: the plan's device-facing records and the kernel parameter
 * block, shared verbatim by the host planner (C11) and the kernel templates
 * (CUDA C compiled by NVRTC).  This header is the contract between
 * runtime/ (which fills the arrays) and templates/ (which read them); change
 * both sides together and bump TSR_PLAN_LAYOUT_VERSION.
 *
 * Geometry of the physical grid: query tile t covers query tokens
 * [t*BM, min((t+1)*BM, seq_q)); key tile u covers [u*BN, min((u+1)*BN, seq_k)).
 * BM and BN are compile-time constants of the kernel variant.
 *
 * Membership of a partial tile (tile.mem >= 0): the rows of query tile t fall
 * into nseg = qblk[last row] - qblk[first row] + 1 logical query-block
 * segments; row r belongs to segment qblk[t*BM + r] - qblk[t*BM].  For each
 * segment s the pool holds BN/32 words of column bits at
 *     membership[tile.mem + s * (BN/32) + c/32] >> (c % 32) & 1
 * saying whether key column u*BN + c is selected for rows of that segment.
 * Columns past seq_k are never selected.  A full tile (mem == -1) has every
 * in-bounds pair selected; kernels still mask columns >= seq_k.
 *
 * Gather plans (mapping "gather", TSR_MAP_GATHER; kernel variants named
 * _kg, TSR_KGATHER): uniform blocks bq x bk with bq == BM and 2 * bk == BN.
 * A key tile is two halves of bk columns taken from anywhere in the row:
 * tile.k_tile is the first half's logical key block j (columns c < bk are
 * keys j*bk + c), tile.mem the second half's block (> k_tile; columns
 * c >= bk are keys mem*bk + c - bk), or -1: no second half, its columns
 * are masked (kernels load zeros there, never other keys: a masked
 * column's zero probability times an infinite value would be NaN).  A row's
 * selected blocks are paired in ascending order, (j0, j1), (j2, j3), ...,
 * each exactly once; keys >= seq_k are masked in either half.  Gather
 * plans have no membership words: every half is a whole selected block.
 *
 * Tasks: a task walks tiles[tile_begin, tile_end) for each of its members
 * (n_members >= 1; members[member_begin + i]); members of one task share the
 * key tiles and their membership words exactly (GQA heads of one KV head with
 * identical mask rows, or query tiles whose tiles are all full), so the
 * kernel may load each K/V tile once for all members.  A task with
 * tile_begin == tile_end writes zeros and lse = -inf for its members; as it
 * loads no K/V, its members may belong to any batch and head (the planner
 * packs up to 8 empty rows into one such task).  Tasks may share tile
 * ranges (rows with identical tiles point at the same records).
 * partial < 0: the task writes o and lse directly.  partial >= 0: member i
 * writes its unnormalised output, row max and row sum (base-2 exponent
 * domain, see below) to slot partial + i; a merge record later combines the
 * slots of one (batch, head, q tile) row with the log-sum-exp rule.
 *
 * Softmax domain: kernels keep m and l in base 2: p = exp2(s * scale_log2 - m),
 * so lse (natural log) = (m + log2(l)) * ln 2.  Partial slots store that m
 * and l; m = -inf and l = 0 for a row with nothing selected in its chunk.
 *
 * Device-planned launches (runtime/gpuplan.c): the task and merge counts
 * are only known on the device, so n_tasks_dev / n_merges_dev point at the
 * ints the planning kernels write; when non-NULL, kernels read their loop
 * bound there instead of n_tasks / n_merges (grids are then persistent and
 * stride over the tasks as usual).  Version 2 added them; version 3 the
 * gather tiles above.
 */
#ifndef TSR_PLAN_LAYOUT_H
#define TSR_PLAN_LAYOUT_H

#define TSR_PLAN_LAYOUT_VERSION 3

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
typedef int tsr_i32;
typedef unsigned int tsr_u32;
typedef long long tsr_i64;
#define TSR_ALIGN64 alignas(64)
#else
#include <stdint.h>
typedef int32_t tsr_i32;
typedef uint32_t tsr_u32;
typedef int64_t tsr_i64;
#define TSR_ALIGN64 _Alignas(64)
#endif

typedef struct {
  tsr_i32 batch;
  tsr_i32 head;        /* query head of the first member */
  tsr_i32 q_tile;      /* query tile of the first member */
  tsr_i32 tile_begin;  /* [tile_begin, tile_end) into tiles[] */
  tsr_i32 tile_end;
  tsr_i32 member_begin;/* into members[] */
  tsr_i32 n_members;   /* >= 1 */
  tsr_i32 partial;     /* -1 direct; else first partial slot */
} tsr_task_rec;

typedef struct {
  tsr_i32 k_tile;      /* key tile index */
  tsr_i32 mem;         /* -1 full tile; else word offset into membership[] */
} tsr_tile_rec;

typedef struct {
  tsr_i32 batch, head, q_tile, pad;
} tsr_member_rec;

typedef struct {
  tsr_i32 batch, head, q_tile;
  tsr_i32 slot_begin;  /* slots [slot_begin, slot_begin + n_slots) */
  tsr_i32 n_slots;
  tsr_i32 pad[3];
} tsr_merge_rec;

/* Opaque 128-byte TMA descriptor (CUtensorMap), filled on the host with
 * cuTensorMapEncodeTiled (runtime/gpu.c) for variants with a TMA box
 * (name suffix _tma<box>); unused by the sm_80 family.  Each map is rank 4
 * over one tensor, innermost first:
 *   globalDim     {head_dim, seq, heads, batch}  (seq_q/heads_q for tma_q,
 *                 seq_k/heads_kv for tma_k and tma_v)
 *   globalStrides {s_stride, h_stride, b_stride} * 2 bytes (d_stride == 1),
 *                 so one map serves BHSD, BSHD and any other strides
 *   boxDim        {box, BM, 1, 1} for q, {box, BN, 1, 1} for k and v
 *   swizzle       box * 2 bytes (128B for box 64); no interleave;
 *                 L2 promotion 128B; out-of-bounds elements read as zero
 * so a tile's coordinates are (d0, token0, head, batch).
 *
 * Launch: every kernel loops task = blockIdx.x, += gridDim.x while
 * task < n_tasks (the merge kernel likewise over merges); the host chooses
 * gridDim.x (persistent or one CTA per task, see runtime/variant.h). */
typedef struct {
  TSR_ALIGN64 unsigned long long opaque[16];
} tsr_tmap;

/* Passed by value (__grid_constant__) to every attention and merge kernel;
 * 64-byte aligned through its first member. */
typedef struct {
  tsr_tmap tma_q, tma_k, tma_v;
  const void *q, *k, *v;  /* bf16 / fp16 elements */
  void *o;                /* same dtype as q */
  float *lse;             /* [B, Hq, Sq] natural-log lse, may be NULL */
  tsr_i64 q_stride[4], k_stride[4], v_stride[4], o_stride[4]; /* b, h, s, d */
  tsr_i32 batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
  float scale_log2;       /* scale * log2(e) */
  tsr_i32 n_tasks, n_merges, n_q_tiles;
  const tsr_task_rec *tasks;
  const tsr_tile_rec *tiles;
  const tsr_member_rec *members;
  const tsr_u32 *membership;
  const tsr_i32 *qblk;    /* [seq_q] logical query block of each token */
  const tsr_merge_rec *merges;
  float *part_o;          /* [slots][BM][D] unnormalised */
  float *part_m;          /* [slots][BM] base-2 row max; NaN: the row is NaN */
  float *part_l;          /* [slots][BM] row sum */
  const tsr_i32 *n_tasks_dev;  /* device planner's task count, or NULL */
  const tsr_i32 *n_merges_dev; /* device planner's merge count, or NULL */
} tsr_kernel_params;

/* ---- GPU planning (templates/plan_gpu.cuh, runtime/gpuplan.c) ----------
 *
 * Parameter block of the planning kernels: a plan template (uniform blocks
 * bq x bk, or variable blocks given by their starts, mapped onto tiles
 * BM x BN, row tasks optionally split into chunks of at most `chunk` key
 * tiles) bound to device buffers of bounded capacity.  Problem row r = (b * heads_q + h) * nqt + t.
 *
 * Mask: planes [mask_b][mask_h][nq][nk] (mask_b, mask_h: 1 = broadcast),
 * format 0 = one byte a block (nonzero = selected), 1 = bits, LSB first,
 * rows padded to 32-bit words.  `pitch` is a row's bytes (format 0) or words.
 *
 * counts[] (device ints, TSR_GP_*): written by the planner every step; the
 * attention kernels read counts[TSR_GP_TASKS] and counts[TSR_GP_MERGES].
 * row_off[r * TSR_GP_ROW_INTS + k]: per row, tile offset, word offset, slot
 * offset (-1 unsplit), merge index, the tasks of the rows before it.
 * row_task[r]: the row's tiles | split << 30, read by every emit warp of
 * its (batch, KV head) group to rank the tasks into the host planner's
 * order (4 bytes a row, contiguous: the reads are coalesced).  stats
 * (host-visible, may be NULL) carries the features.
 *
 * scan[]: the count kernel's decoupled look-back state, TSR_GP_SCAN_STRIDE
 * 64-bit words per count CTA (TSR_GP_COUNT_ROWS rows each), zeroed once at
 * creation: two flags (phase 1, phase 2: (epoch << 2) | 1 aggregate
 * published, | 2 inclusive prefix published, epoch = the step being
 * planned), then TSR_GP_SCAN_VALS aggregates, then as many inclusive
 * prefixes.  Values 0-5: tiles, membership words, wanted slots, partial
 * tiles, feature sums (selected tokens, squared); 6-9: merges, granted
 * slots, tasks, empty rows.  Planner-private: the attention kernels never
 * see it (so the layout version is unchanged). */
enum {
  TSR_GP_TASKS = 0, TSR_GP_MERGES, TSR_GP_TILES, TSR_GP_WORDS, TSR_GP_SLOTS,
  TSR_GP_OVERFLOW, TSR_GP_DONE, TSR_GP_STEP, TSR_GP_PARTIAL, TSR_GP_EMPTY,
  TSR_GP_COUNTS,
  /* counts[TSR_GP_DSTATS..]: the device copy of the features (tsr_gp_stats,
   * 8-byte aligned), which the emit kernel's first thread publishes to the
   * host-visible record off the critical path */
  TSR_GP_DSTATS = 24
};
#define TSR_GP_ROW_INTS 5
#define TSR_GP_COUNT_ROWS 32     /* problem rows a count CTA (one a warp) */
#define TSR_GP_SCAN_VALS 10      /* look-back values a count CTA */
#define TSR_GP_SCAN_STRIDE 48    /* 64-bit words of look-back state a count CTA */

/* Host-visible features of the latest planning, written last-to-first with
 * `step` last, so a reader that sees the same step before and after copying
 * has a consistent record. */
typedef struct {
  double density;        /* selected / all query-key token pairs */
  double row_cv;         /* std / mean of selected key tokens per query token */
  double empty_rows;     /* fraction of problem rows (b, h, q tile) with no tile */
  tsr_i64 tiles, partial_tiles, tasks, merges, slots, membership_words;
  tsr_i32 overflow;      /* 1: a capacity was exceeded; nothing was launched */
  tsr_i32 pad;
  tsr_i64 step;          /* planning launches completed */
} tsr_gp_stats;

typedef struct {
  const void *mask;
  tsr_i64 plane_b, plane_h;  /* plane strides in rows (0 = broadcast) */
  tsr_i32 format, pitch;
  tsr_i32 batch, heads_q, nq, nk, bq, bk, seq_q, seq_k;
  tsr_i32 bm, bn, nqt, nkt, n_rows;
  tsr_i32 chunk;             /* most tiles a task; 0 = whole rows */
  tsr_i32 gsz;               /* rows of a (batch, KV head) group: GQA heads x nqt */
  tsr_i32 num_sms;           /* the snake's round (the plan's num_sms) */
  tsr_i32 gather;            /* 1: a gather plan (above): uniform blocks, bq == bm,
                                bn == 2 bk; a tile is two selected key blocks */
  tsr_i32 cap_tiles, cap_words, cap_slots, cap_tasks;
  tsr_task_rec *tasks;
  tsr_tile_rec *tiles;
  tsr_member_rec *members;
  tsr_u32 *membership;
  tsr_merge_rec *merges;
  tsr_i32 *row_len, *row_part; /* per row: tiles, partial tiles */
  tsr_i32 *row_off;            /* per row: TSR_GP_ROW_INTS ints */
  tsr_i32 *row_task;           /* per row: tiles | split << 30 */
  tsr_i32 *counts;             /* TSR_GP_COUNTS ints, then the device features */
  unsigned long long *scan;    /* look-back state (above) */
  tsr_gp_stats *stats;         /* host-mapped, or NULL */
  /* Variable geometry (added with it; planner-private like the rest):
   * NULL for uniform blocks, where bq and bk apply; else bq = bk = 0 and
   * qoff[nq + 1], koff[nk + 1] are the block starts (qoff[nq] = seq_q,
   * koff[nk] = seq_k), qblk[seq_q], kblk[seq_k] each token's block,
   * tkb[2 u], tkb[2 u + 1] the first and last key block of key tile u;
   * kcw[2 q], kcw[2 q + 1] per 32 key columns 32 q.. (q < ceil(seq_k / 32)):
   * the block of column 32 q, and bit i (i >= 1) set where a block starts
   * at column 32 q + i < seq_k (a membership word's blocks, for emit). */
  const tsr_i32 *qoff, *koff, *qblk, *kblk, *tkb, *kcw;
} tsr_gpuplan_params;

#endif /* TSR_PLAN_LAYOUT_H */

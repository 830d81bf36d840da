/*
 * tools.h: the tools' side of Tessera, for the `tessera` command, tessera-profile
 * and the tests (tessera-tools(3)).  Not installed, and nothing here is
 * exported from libtessera.so: tools link libtessera statically, with
 * profiler/libtsrcorpus.a (the corpus) and profiler/libtsrprofile.a (the
 * database writers).  runtime/ never includes this header (tests/layout.sh).
 *
 *  - The mask corpus (profiler/corpus*.c): synthesising corpora by the
 *    published rules of sparse-attention methods, and reading them.
 *  - The profiling database: the handle's calls for tools that run their own
 *    statements (runtime/db_impl.h, defined in runtime/db.c) and the writers
 *    of sweeps and timings (profiler/db_write.c).
 */
#ifndef TSR_TOOLS_H
#define TSR_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include "db_impl.h"
#include "tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Mask corpus (profiler/corpus.c, corpus_families.c, corpus_synth.c) - */

/* A corpus is a folder of block masks synthesised by the published rule of
 * each sparse-attention family (Sparse VideoGen, Sliding Tile, Radial, VSA,
 * SpargeAttn, XAttention, Jenga, Sparse-vDiT, dense warm-up) over the real
 * shapes of video diffusion models, plus manifest.json.  One mask file is
 * one (model, method, step, layer) with a group of that layer's heads:
 * bool [H, NQ, NK] in the method's token order and block geometry.  See
 * tessera-corpus(1). */
typedef struct tsr_corpus tsr_corpus;

/* One manifest entry: everything needed to build the problem of a mask.
 * Strings belong to the corpus handle. */
typedef struct {
  const char *file;        /* mask .npy path (corpus folder joined) */
  const char *model;       /* preset model name, e.g. "wan2.1-1.3b-480p" */
  const char *family;      /* "svg", "sta", "radial", "vsa", "sparge", "xattn",
                              "jenga", "svdit" or "dense" */
  const char *split;       /* "profile" or "eval" */
  const char *token_order; /* "frame-major", "tile-6x8x8", "cube-4x4x4", "hilbert-3d"
                              (per-head overrides: tsr_corpus_head_order) */
  int64_t step, layer;
  int64_t head_first;      /* model head of the file's head 0 */
  int64_t heads_q, heads_kv, model_heads, head_dim;
  int64_t seq_q, seq_k;    /* video tokens (text tokens of joint models excluded) */
  int64_t nq, nk;          /* logical blocks */
  int64_t bq, bk;          /* uniform blocks (last ragged); 0 when variable */
  const char *q_sizes;     /* variable geometry: int64 .npy of block sizes, else NULL */
  const char *k_sizes;
  double density;          /* selected block pairs / all, over the file's heads */
  uint64_t seed;           /* the entry's own seed (derived from the corpus seed) */
} tsr_corpus_entry;

/* Reads DIR/manifest.json; checks its format and every entry's fields. */
tsr_status tsr_corpus_open(const char *dir, tsr_corpus **out, tsr_error *err);
void tsr_corpus_close(tsr_corpus *c);
int64_t tsr_corpus_count(const tsr_corpus *c);
/* Entry i (0 <= i < count), or NULL when out of range. */
const tsr_corpus_entry *tsr_corpus_get(const tsr_corpus *c, int64_t i);
/* The corpus seed and preset recorded in the manifest. */
uint64_t tsr_corpus_seed(const tsr_corpus *c);
const char *tsr_corpus_preset(const tsr_corpus *c);
/* Per-head kind ("spatial", "temporal", "window", "topk", "cdf", "dense", ...)
 * and token order of head h of entry i; NULL when out of range. */
const char *tsr_corpus_head_kind(const tsr_corpus *c, int64_t i, int64_t h);
const char *tsr_corpus_head_order(const tsr_corpus *c, int64_t i, int64_t h);
/* Loads entry i's mask and checks it against the entry (heads, nq, nk). */
tsr_status tsr_corpus_load_mask(const tsr_corpus *c, int64_t i, tsr_mask **out,
                                tsr_error *err);
/* Builds entry i's block geometry (uniform, or from its size files). */
tsr_status tsr_corpus_load_geom(const tsr_corpus *c, int64_t i, tsr_geom **out,
                                tsr_error *err);
/* The problem entry e describes over geometry g (borrowed): batch 1, its
 * heads, sequence lengths and head dim, bf16, BHSD, default scale.  Not
 * checked (tsr_problem_check). */
void tsr_corpus_problem(const tsr_corpus_entry *e, const tsr_geom *g, tsr_problem *p);

/* Generation.  Deterministic in (preset, seed): the same call writes the same
 * bytes, whatever `jobs`. */
typedef struct {
  const char *preset;  /* "paper", "demo" or a model name (tsr_corpus_preset_name) */
  const char *out_dir; /* created when missing (parents too); see tsr_corpus_generate */
  uint64_t seed;       /* default 1 */
  int64_t limit;       /* at most this many entries (0 = all) */
  int jobs;            /* worker threads (default 1) */
  /* Called after each entry (from the calling thread's lock; may be NULL). */
  void (*progress)(void *ud, int64_t done, int64_t total);
  void *progress_ud;
} tsr_corpus_gen_opts;

void tsr_corpus_gen_opts_init(tsr_corpus_gen_opts *o);
/* Writes OUT_DIR/masks/NAME.npy, OUT_DIR/geom/NAME.npy and OUT_DIR/manifest.json,
 * built in a temporary folder beside OUT_DIR and renamed onto it when
 * complete, so a failure leaves no partial corpus.  OUT_DIR must be absent,
 * an empty folder, or hold the complete corpus of this preset, seed and
 * entry count, which is kept as it is (*written = 0); anything else is
 * refused (TSR_ERR_INVALID) and left alone.  *written (may be NULL)
 * receives the entry count written. */
tsr_status tsr_corpus_generate(const tsr_corpus_gen_opts *o, int64_t *written,
                               tsr_error *err);
/* Presets: "paper", "demo" and one per model; help is one line. */
int tsr_corpus_preset_count(void);
const char *tsr_corpus_preset_name(int i);
const char *tsr_corpus_preset_help(int i);

/* Features of one [nq][nk] plane, for corpus statistics. */
typedef struct {
  double density;      /* selected / (nq * nk) */
  double row_cv;       /* row spread as tsr_features.row_cv, over the plane's rows,
                          counted in key blocks rather than tokens */
  double contiguity;   /* selected blocks whose left neighbour is selected / selected */
  int64_t empty_rows;
} tsr_corpus_features;

void tsr_corpus_plane_features(const uint8_t *plane, int64_t nq, int64_t nk,
                               tsr_corpus_features *f);

/* ---- Profiling database writers (profiler/db_write.c) ------------------ */

/* Insert-or-find records; *id receives the row id. */
typedef struct {
  const char *name, *arch, *driver;
  int multiprocessors;
  int64_t memory_bytes, l2_bytes;
  int clock_sm_khz, clock_mem_khz;
} tsr_db_gpu;
typedef struct {
  const char *name, *params, *template_hash, *generator, *nvrtc_version, *nvrtc_options;
} tsr_db_variant;
typedef struct {
  const char *corpus, *path, *split, *family, *model, *geometry, *dtype;
  int64_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
  uint64_t content_hash;
} tsr_db_mask;
typedef struct {
  tsr_mapping mapping; /* never AUTO */
  int tile_m, tile_n;
  tsr_tasks tasks;     /* never AUTO */
  const char *variant;
} tsr_db_plan;

tsr_status tsr_db_put_gpu(tsr_db *db, const tsr_db_gpu *g, int64_t *id, tsr_error *err);
tsr_status tsr_db_put_variant(tsr_db *db, const tsr_db_variant *v, int64_t *id, tsr_error *err);
tsr_status tsr_db_put_mask(tsr_db *db, const tsr_db_mask *m, int64_t *id, tsr_error *err);
tsr_status tsr_db_put_plan(tsr_db *db, const tsr_db_plan *p, int64_t *id, tsr_error *err);
/* Starts a sweep record; tsr_db_finish_sweep stamps its end. */
tsr_status tsr_db_start_sweep(tsr_db *db, int64_t gpu_id, const char *corpus,
                              const char *command, int64_t *id, tsr_error *err);
tsr_status tsr_db_finish_sweep(tsr_db *db, int64_t sweep_id, tsr_error *err);

/* One timed (or skipped) candidate.  status "ok" needs n_samples >= 1. */
typedef struct {
  int64_t gpu_id, mask_id, plan_id, variant_id, sweep_id;
  const char *status; /* "ok", "ineligible", "failed" */
  const char *detail; /* why not timed; may be NULL */
  int warmup;
  int n_samples;
  const double *samples_ms;
} tsr_db_measurement;

/* *found = 1 when (gpu, mask, plan, variant) already has a measurement. */
tsr_status tsr_db_has_measurement(tsr_db *db, int64_t gpu_id, int64_t mask_id,
                                  int64_t plan_id, int64_t variant_id, int *found,
                                  tsr_error *err);
/* Writes the measurement and all its samples in one transaction (or inside
 * the caller's); *inserted = 0 when another writer recorded it first. */
tsr_status tsr_db_record(tsr_db *db, const tsr_db_measurement *m, int *inserted,
                         tsr_error *err);

/* Stores a mask's features as computed for a GPU, one row per name,
 * replacing earlier values. */
tsr_status tsr_db_put_features(tsr_db *db, int64_t mask_id, int64_t gpu_id,
                               const tsr_features *f, tsr_error *err);

#ifdef __cplusplus
}
#endif
#endif /* TSR_TOOLS_H */

/*
 * corpus_impl.h: internals of the mask corpus generator shared by
 * profiler/corpus.c (presets, schedules, manifest, reader),
 * profiler/corpus_synth.c (seeded PRNG, token orders, RoPE q/k synthesis,
 * pooled block scores) and profiler/corpus_families.c (the published rule of
 * every sparse-attention family), and by tests/check_corpus.c.
 *
 * Not installed.  Every function here is pure host code with no globals;
 * buffers are malloc'ed and owned by the struct they live in.
 */
#ifndef TSR_CORPUS_IMPL_H
#define TSR_CORPUS_IMPL_H

#include <stdint.h>

#include "tools.h"

/* ---- PRNG: splitmix64 seeding a xoshiro256** stream ------------------- */

typedef struct {
  uint64_t s[4];
} tsr_corpus_rng;

/* Seed for a named stream: mixes seed, a tag string and up to four ints, so
 * every (model, family, step, layer, head) has an independent stream and
 * adding entries never shifts the others. */
uint64_t tsr_corpus_key(uint64_t seed, const char *tag, int64_t a, int64_t b, int64_t c,
                        int64_t d);
void tsr_corpus_rng_seed(tsr_corpus_rng *r, uint64_t seed);
uint64_t tsr_corpus_rng_next(tsr_corpus_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double tsr_corpus_rng_uniform(tsr_corpus_rng *r);
/* Standard normal (Box-Muller, one value per call; deterministic). */
double tsr_corpus_rng_normal(tsr_corpus_rng *r);

/* ---- Families ----------------------------------------------------------- */

typedef enum {
  TSR_FAM_SVG,    /* Sparse VideoGen spatial / temporal heads */
  TSR_FAM_STA,    /* Sliding Tile Attention */
  TSR_FAM_RADIAL, /* Radial attention */
  TSR_FAM_VSA,    /* Video Sparse Attention */
  TSR_FAM_SPARGE, /* SpargeAttn */
  TSR_FAM_XATTN,  /* XAttention */
  TSR_FAM_JENGA,  /* Jenga */
  TSR_FAM_SVDIT,  /* Sparse-vDiT */
  TSR_FAM_DENSE,  /* dense warm-up */
  TSR_FAM_COUNT
} tsr_corpus_family;

const char *tsr_corpus_family_name(int fam);
/* -1 when unknown. */
int tsr_corpus_family_find(const char *name);
/* Published mean-density range of the family's sparse heads (mask-families.md). */
void tsr_corpus_family_range(int fam, double *lo, double *hi);

/* ---- Model shapes (mask-families.md table) -------------------------------------- */

typedef struct {
  const char *name;
  const char *setting;  /* human description of resolution and frames */
  int t, h, w;          /* latent grid after VAE and patchify */
  int heads, head_dim, layers, steps;
  int rope[3];          /* head-dim channels rotated by t, h, w (even, sum = head_dim) */
  int text_tokens;      /* joint-attention text tokens, excluded from the masks */
  int first_frame_sink; /* Wan: first latent frame is an attention sink */
  double radial_decay;  /* Radial attention's decay for this model */
  double svg_density;   /* Sparse VideoGen target density */
  unsigned families;    /* bit set of families published for this model */
} tsr_corpus_model;

const tsr_corpus_model *tsr_corpus_model_find(const char *name);

/* ---- Token orders and block layouts -------------------------------------- */

typedef enum {
  TSR_ORDER_FRAME,   /* natural (t, h, w) raster: frame-major */
  TSR_ORDER_SPATIAL, /* (h, w, t): SVG's permutation for temporal heads */
  TSR_ORDER_TILE,    /* STA: 6x8x8 tiles contiguous, whole tiles first */
  TSR_ORDER_CUBE,    /* VSA: 4x4x4 cubes contiguous, whole cubes first */
  TSR_ORDER_HILBERT  /* Jenga: 3D Hilbert curve over the latent grid */
} tsr_corpus_order;

const char *tsr_corpus_order_name(int order);

/* A token order over a T x H x W grid and a partition of it into blocks. */
typedef struct {
  int order;
  int t, h, w;
  int64_t n;          /* tokens */
  int32_t *perm;      /* perm[s]: natural index (t*H + h)*W + w of sequence position s */
  int64_t nb;         /* blocks */
  int64_t *start;     /* nb + 1 block starts in the sequence */
  int64_t block;      /* uniform block size (last block ragged), 0 when variable */
  int grid[3];        /* tile / cube counts per axis (TILE, CUBE orders) */
  int tile[3];        /* tile / cube extent per axis (TILE, CUBE orders) */
} tsr_corpus_layout;

/* Uniform blocks of `block` tokens in the given order (FRAME, SPATIAL, HILBERT). */
tsr_status tsr_corpus_layout_uniform(int order, int t, int h, int w, int64_t block,
                                     tsr_corpus_layout *out, tsr_error *err);
/* One block per tile of tt x th x tw tokens, boundary tiles ragged (TILE, CUBE):
 * tiles by decreasing size, raster order within a size (whole tiles first). */
tsr_status tsr_corpus_layout_tiles(int order, int t, int h, int w, int tt, int th, int tw,
                                   tsr_corpus_layout *out, tsr_error *err);
/* The raster index (over grid) of the tile that block b of a TILE or CUBE layout holds. */
int64_t tsr_corpus_layout_tile(const tsr_corpus_layout *l, int64_t b);
void tsr_corpus_layout_free(tsr_corpus_layout *l);

/* ---- Synthetic q / k and pooled block scores (corpus_synth.c) ------------ */

#define TSR_SYNTH_OBJECTS 6 /* moving blobs of shared content, the last is background */

/* Per layout, per model: exact block means of the RoPE phases and of the
 * content weights, shared by every head and step. */
typedef struct {
  int64_t nb;
  int np;         /* complex channel pairs = head_dim / 2 */
  double *count;  /* [nb] tokens per block */
  double *phase;  /* [nb][np][2] mean of exp(i theta) over the block */
  double *obj;    /* [nb][K][np][2] mean of w_k(p) exp(i theta) */
  double *objw;   /* [nb][K] mean of w_k(p) */
  double *objw2;  /* [nb][K*K] mean of w_k(p) w_l(p) (token energy) */
} tsr_corpus_pool;

tsr_status tsr_corpus_pool_build(const tsr_corpus_model *m, const tsr_corpus_layout *l,
                                 uint64_t scene_seed, tsr_corpus_pool *out, tsr_error *err);
void tsr_corpus_pool_free(tsr_corpus_pool *p);

/* Per head: content vectors (complex, np pairs each). */
typedef struct {
  int np;
  double axis[3];  /* energy share of the t, h, w channels */
  double u_q[128], u_k[128];          /* shared direction, 2*np doubles */
  double z_q[TSR_SYNTH_OBJECTS][128]; /* object content */
  double z_k[TSR_SYNTH_OBJECTS][128];
} tsr_corpus_head;

/* Draws a head's vectors from `seed`; `axis_bias` in [-1, 1] moves energy to
 * the t channels (+1: attention decays fast across frames, a "spatial" head)
 * or to the h, w channels (-1: a "temporal" head). */
void tsr_corpus_head_make(const tsr_corpus_model *m, uint64_t seed, double axis_bias,
                          tsr_corpus_head *hd);

/* Pooled q (or k) per block, [nb][2*np]: exact block mean of the RoPE-rotated
 * shared and object content plus the block mean of i.i.d. token noise, drawn
 * directly with its exact law N(0, sigma^2 / count). */
tsr_status tsr_corpus_pooled(const tsr_corpus_pool *p, const tsr_corpus_head *hd, int is_key,
                             uint64_t noise_seed, double **out, tsr_error *err);
/* Self-similarity proxy per block: |mean|^2 / mean |token|^2, in (0, 1]. */
void tsr_corpus_selfsim(const tsr_corpus_pool *p, const tsr_corpus_head *hd, int is_key,
                        const double *pooled, double *out);
/* Logits S[a][b] = pooled_q[a] . pooled_k[b] / sqrt(head_dim), row-major [nq][nk]. */
void tsr_corpus_logits(const double *pq, int64_t nq, const double *pk, int64_t nk, int np,
                       int head_dim, double *out);
/* In-place row softmax of [nq][nk] logits, each plus bias[b] when bias != NULL. */
void tsr_corpus_softmax_rows(double *s, int64_t nq, int64_t nk, const double *bias);

/* ---- Family rules (corpus_families.c): each fills a [nq][nk] 0/1 plane ---- */

/* SVG band: keep (i, j) when |i - j| * block <= n * (1 - sqrt(1 - d)); with
 * sink_tokens > 0 also every key block starting before sink_tokens. */
void tsr_corpus_svg_band(int64_t nb, int64_t block, int64_t n, double density,
                         int64_t sink_tokens, uint8_t *plane);
/* STA: every query tile keeps the k[0] x k[1] x k[2] window of key tiles
 * around its clamped centre on a grid[0] x grid[1] x grid[2] tile grid. */
void tsr_corpus_sta(const int grid[3], const int k[3], uint8_t *plane);
/* Radial attention reduced to frame-major blocks of `block` tokens. */
void tsr_corpus_radial(int frames, int64_t frame_tokens, int64_t block, double decay,
                       int sink, uint8_t *plane);
/* Per-row top-k of probabilities (ties to the lower index). */
tsr_status tsr_corpus_topk(const double *prob, int64_t nq, int64_t nk, int64_t k,
                          uint8_t *plane, tsr_error *err);
/* Per row: the fewest blocks whose probability reaches tau, and at least
 * min_keep blocks (ties to the lower index).  Adds to the plane (OR). */
tsr_status tsr_corpus_cdf(const double *prob, int64_t nq, int64_t nk, double tau,
                         int64_t min_keep, uint8_t *plane, tsr_error *err);
/* XAttention: on antidiagonal block scores, the CDF rule at tau with at
 * least one block a row.  Adds to the plane (OR). */
tsr_status tsr_corpus_xattn(const double *score, int64_t nq, int64_t nk, double tau,
                            uint8_t *plane, tsr_error *err);
/* SpargeAttn: the CDF (tau > 0) or top-fraction (topf) rule, then rows and
 * columns of self-similarity below theta forced on, and key column 0 when
 * sink.  Adds to the plane (OR). */
tsr_status tsr_corpus_sparge(const double *prob, const double *selfq, const double *selfk,
                             int64_t nq, int64_t nk, double tau, double topf, double theta,
                             int sink, uint8_t *plane, tsr_error *err);
/* Sparse-vDiT patterns over frame-major blocks of `block` tokens. */
enum { TSR_SVDIT_DIAG, TSR_SVDIT_MULTIDIAG, TSR_SVDIT_STRIPE };
tsr_status tsr_corpus_svdit(int pattern, int frames, int64_t frame_tokens, int64_t block,
                            int64_t width, uint64_t seed, uint8_t *plane, tsr_error *err);
/* Jenga's 3D neighbours: adj[a][b] = 1 when a token of block a and a token of
 * block b are adjacent on the latent grid (or a == b). */
tsr_status tsr_corpus_neighbours(const tsr_corpus_layout *l, uint8_t **adj, tsr_error *err);

#endif

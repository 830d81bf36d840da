/*
 * corpus.c: the mask corpus -- model shapes and presets, schedules over
 * (step, layer, head), generation of .npy masks with manifest.json, and the
 * reader the profiler and the demo use.
 *
 * Unit of a mask file: one (model, method, step, layer) with a group of that
 * layer's heads, bool [H, NQ, NK] in the method's token order and geometry.
 * All heads of a layer at once is what the runtime plans, but a layer of
 * HunyuanVideo at 128-token blocks is 24 x 929^2 = 20 MB; so a file holds as
 * many heads as fit in 512 KiB of blocks (at least one, at most all), and the
 * head group rotates with the layer.  This keeps the `paper` preset near 1 GB.
 *
 * Schedules follow mask-families.md "Common to all": dense warm-up over the first
 * 10-30% of steps and 0-3% of layers (such entries have family "dense" and
 * name the method they warm up), denser first and last layers, and per-head
 * choices drawn from a (layer, head) seed that does not depend on the step,
 * so they stay stable across steps (STA changes a head's window between
 * consecutive steps 1.7% of the time, as published).
 *
 * Split: within each (model, method) the sampled layers are ranked and every
 * fourth one (from an offset drawn from the seed) goes to "eval", the rest to
 * "profile": evaluation masks come from layers the profiler never saw.
 *
 * Cost: see corpus_synth.c; the `paper` preset (2,376 files, 1.2 GB) takes
 * about two CPU-minutes.  Layouts and entries are independent, so `jobs`
 * threads share them; a file's bytes depend only on (preset, seed, entry),
 * never on the schedule.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h"
#include "corpus_impl.h"
#include "files.h"

#define FILE_BUDGET (512 * 1024) /* blocks per mask file, see above */
#define F(x) (1u << TSR_FAM_##x)

/* ---- Families ---------------------------------------------------------------- */

static const struct {
  const char *name;
  double lo, hi;     /* published mean density of sparse heads (mask-families.md) */
  double warm_steps; /* fraction of steps run dense */
  double warm_layers;/* fraction of layers run dense (rounded up) */
} fam_tab[TSR_FAM_COUNT] = {
    /* SVG: "First 10-35% of steps and first ~3% of layers dense"; d = 0.25-0.3 plus sink. */
    {"svg", 0.20, 0.40, 0.20, 0.03},
    /* STA: windows 0.10-0.20, "first 12-15 of 50 steps full". */
    {"sta", 0.10, 0.20, 0.24, 0.0},
    /* Radial: "Density est. 25-27%", "Dense: 12 of 50 steps, 0-1 layers". */
    {"radial", 0.10, 0.35, 0.24, 0.02},
    /* VSA: k = ceil((1 - s) n), s = 0.8-0.9. */
    {"vsa", 0.10, 0.20, 0.10, 0.0},
    /* SpargeAttn: CDF 0.9-0.98 or top-k; early and late layers mostly dense. */
    {"sparge", 0.10, 0.60, 0.10, 0.0},
    /* XAttention: cumulative 0.9-0.95, "40-60% ... at high tau". */
    {"xattn", 0.10, 0.60, 0.10, 0.0},
    /* Jenga: CDF 0.8-0.9, floor (1 - drop) n, drop 0.7-0.85, plus neighbours. */
    {"jenga", 0.10, 0.35, 0.10, 0.0},
    /* Sparse-vDiT: "Implied density ~42-60%". */
    {"svdit", 0.42, 0.60, 0.10, 0.0},
    {"dense", 1.0, 1.0, 0.0, 0.0},
};

const char *tsr_corpus_family_name(int fam)
{
  return fam >= 0 && fam < TSR_FAM_COUNT ? fam_tab[fam].name : "?";
}

int tsr_corpus_family_find(const char *name)
{
  int i;
  for (i = 0; name && i < TSR_FAM_COUNT; i++)
    if (!strcmp(name, fam_tab[i].name))
      return i;
  return -1;
}

void tsr_corpus_family_range(int fam, double *lo, double *hi)
{
  *lo = fam >= 0 && fam < TSR_FAM_COUNT ? fam_tab[fam].lo : 0;
  *hi = fam >= 0 && fam < TSR_FAM_COUNT ? fam_tab[fam].hi : 1;
}

/* ---- Models (mask-families.md "Model shapes") ------------------------------------------ */

/* RoPE splits: Wan gives the t axis d - 4 (d / 6) channels and h, w 2 (d / 6)
 * each; HunyuanVideo [16, 56, 56]; CogVideoX d/4 for t and 3d/8 for h, w.
 * Mochi's learned mixed RoPE is approximated with Wan's split. */
static const tsr_corpus_model model_tab[] = {
    {"wan2.1-1.3b-480p", "832x480, 81 frames", 21, 30, 52, 12, 128, 30, 50, {44, 42, 42}, 0, 1,
     0.2, 0.30, F(SVG) | F(STA) | F(RADIAL) | F(VSA) | F(SPARGE) | F(XATTN) | F(JENGA) | F(SVDIT)},
    {"wan2.1-14b-720p", "1280x720, 81 frames", 21, 45, 80, 40, 128, 40, 50, {44, 42, 42}, 0, 1,
     0.2, 0.30, F(SVG) | F(STA) | F(RADIAL) | F(SPARGE) | F(XATTN) | F(JENGA)},
    {"wan2.2-ti2v-5b", "1280x704, 121 frames", 31, 22, 40, 24, 128, 30, 50, {44, 42, 42}, 0, 1,
     0.2, 0.30, F(SVG) | F(VSA) | F(SPARGE) | F(RADIAL)},
    {"hunyuanvideo-720p", "1280x720, 129 frames", 33, 45, 80, 24, 128, 60, 50, {16, 56, 56},
     256, 0, 0.95, 0.25, F(SVG) | F(SPARGE) | F(XATTN) | F(JENGA) | F(SVDIT)},
    {"hunyuanvideo-768p", "1280x768, 117 frames (STA/Radial setting)", 30, 48, 80, 24, 128, 60,
     50, {16, 56, 56}, 256, 0, 0.95, 0.25, F(STA) | F(RADIAL)},
    {"cogvideox-5b", "720x480, 49 frames", 13, 30, 45, 48, 64, 42, 50, {16, 24, 24}, 226, 0,
     0.95, 0.25, F(SVG) | F(SPARGE) | F(XATTN) | F(SVDIT) | F(VSA)},
    {"cogvideox-2b", "720x480, 49 frames", 13, 30, 45, 30, 64, 30, 50, {16, 24, 24}, 226, 0,
     0.95, 0.25, F(SVG) | F(SPARGE) | F(XATTN) | F(SVDIT)},
    {"mochi-1", "848x480, 163 frames", 28, 30, 53, 24, 128, 48, 64, {44, 42, 42}, 256, 0, 0.95,
     0.25, F(SVG) | F(SPARGE) | F(RADIAL)},
    {"ltx-video-2b", "704x512, 161 frames", 21, 16, 22, 32, 64, 28, 50, {24, 20, 20}, 0, 0, 0.95,
     0.25, F(SPARGE) | F(XATTN) | F(SVG)},
    /* A short clip for the README's demo: 33 frames of 256x256 through Wan's
     * VAE (4x time, 8x space) and 2x2 patches: 9 x 16 x 16 = 2,304 tokens. */
    {"demo-9x16x16", "256x256, 33 frames (short demo clip, Wan-like)", 9, 16, 16, 4, 64, 8, 10,
     {24, 20, 20}, 0, 1, 0.2, 0.30,
     F(SVG) | F(STA) | F(RADIAL) | F(VSA) | F(SPARGE) | F(XATTN) | F(JENGA) | F(SVDIT)},
};
#define N_MODELS ((int)(sizeof model_tab / sizeof model_tab[0]))

const tsr_corpus_model *tsr_corpus_model_find(const char *name)
{
  int i;
  for (i = 0; name && i < N_MODELS; i++)
    if (!strcmp(name, model_tab[i].name))
      return &model_tab[i];
  return NULL;
}

/* ---- Presets ------------------------------------------------------------------------ */

static const char *const paper_models[] = {"wan2.1-1.3b-480p", "wan2.1-14b-720p",
                                           "wan2.2-ti2v-5b",   "hunyuanvideo-720p",
                                           "hunyuanvideo-768p", "cogvideox-5b", "mochi-1"};

int tsr_corpus_preset_count(void) { return 2 + N_MODELS; }

const char *tsr_corpus_preset_name(int i)
{
  if (i == 0)
    return "paper";
  if (i == 1)
    return "demo";
  return i >= 2 && i < 2 + N_MODELS ? model_tab[i - 2].name : NULL;
}

const char *tsr_corpus_preset_help(int i)
{
  if (i == 0)
    return "2,376 masks: 7 model settings x their published methods x 8 layers x 9 steps";
  if (i == 1)
    return "48 masks of a 2,304-token clip, every method, 4 heads (CPU-sized)";
  return i >= 2 && i < 2 + N_MODELS ? "this model's methods x 3 layers x 3 steps" : NULL;
}

/* ---- The plan: one record per mask file ------------------------------------------- */

#define MAX_HP 5
typedef struct {
  const char *kind, *order;
  int np;
  const char *pn[MAX_HP];
  double pv[MAX_HP];
  double density;
} head_info;

typedef struct {
  int model, fam, method; /* fam == TSR_FAM_DENSE: method is what it warms up */
  const char *reason;     /* dense: why */
  int step, layer, head_first, heads;
  int eval;
  uint64_t seed;          /* the entry's stream (depends on the step) */
  uint64_t lseed;         /* step-free stream of the (model, method, layer) */
  int ctx;                /* index into the context table */
  char file[160];
  int64_t nq, nk;
  double density;
  head_info *hi;
} plan_entry;

typedef struct {
  int model, fam;
  tsr_corpus_layout lq, lk;
  int split_k;            /* lk differs from lq */
  tsr_corpus_pool pq, pk;
  int pooled;
  uint8_t *radial, *adj;
  char q_sizes[128], k_sizes[128];
} gen_ctx;

typedef struct {
  const tsr_corpus_gen_opts *o;
  const char *dir;        /* the temporary folder the corpus is built in */
  plan_entry *e;
  int64_t n;
  gen_ctx *ctx;
  int nctx;
  pthread_mutex_t lock;
  int phase;              /* 0: contexts, 1: entries */
  int64_t next, done;
  int failed;
  tsr_error err;
} gen_state;

static int64_t svg_block(int64_t f)
{
  /* mask-families.md: "largest divisor of f below 256 (SVG with FlashInfer)". */
  int64_t b;
  for (b = 255; b > 1; b--)
    if (f % b == 0)
      return b;
  return 1;
}

static int n_dense_layers(int fam, const tsr_corpus_model *m)
{
  if (fam == TSR_FAM_RADIAL)
    return m->first_frame_sink ? 1 : 0; /* "0-1 layers": Wan 1, HunyuanVideo 0 */
  return (int)ceil(fam_tab[fam].warm_layers * m->layers - 1e-9);
}

static int n_warm_steps(int fam, const tsr_corpus_model *m)
{
  return (int)floor(fam_tab[fam].warm_steps * m->steps + 0.5);
}

static void plan_pair(uint64_t seed, int mi, int fam, int nl, int ns, plan_entry *out,
                      int64_t *n)
{
  const tsr_corpus_model *m = &model_tab[mi];
  int warm = n_warm_steps(fam, m), dl = n_dense_layers(fam, m), a, b;
  uint64_t h = tsr_corpus_key(seed, "pair", mi, fam, 0, 0);
  int eval_off = (int)(h % 4);
  if (nl > m->layers)
    nl = m->layers;
  for (a = 0; a < nl; a++) {
    int layer = nl == 1 ? m->layers / 2 : (int)((a * (int64_t)(m->layers - 1) + (nl - 1) / 2) / (nl - 1));
    for (b = 0; b < ns; b++) {
      plan_entry *e = &out[(*n)++];
      int step;
      if (b == 0 && warm > 0 && ns > 1)
        step = (int)(tsr_corpus_key(seed, "warm", mi, fam, layer, 0) % (uint64_t)warm);
      else {
        int k = warm > 0 && ns > 1 ? b - 1 : b, cnt = warm > 0 && ns > 1 ? ns - 1 : ns;
        step = warm + (int)(((2 * k + 1) * (int64_t)(m->steps - warm)) / (2 * cnt));
      }
      memset(e, 0, sizeof *e);
      e->model = mi;
      e->method = fam;
      e->fam = fam;
      e->step = step;
      e->layer = layer;
      e->eval = a % 4 == eval_off % (nl < 4 ? nl : 4);
      if (step < warm) {
        e->fam = TSR_FAM_DENSE;
        e->reason = "warm-up step";
      } else if (layer < dl) {
        e->fam = TSR_FAM_DENSE;
        e->reason = "dense layer";
      }
      e->seed = tsr_corpus_key(seed, "entry", mi, fam, step, layer);
      e->lseed = tsr_corpus_key(seed, "layer", mi, fam, layer, 0);
    }
  }
}

static tsr_status plan_preset(const char *preset, uint64_t seed, plan_entry **out, int64_t *n,
                              tsr_error *err)
{
  int mi, fam, i, cap;
  *out = NULL;
  *n = 0;
  if (!preset)
    return tsr_error_set(err, TSR_ERR_INVALID, "no corpus preset given");
  cap = 8 * TSR_FAM_COUNT * N_MODELS * 9 + 64;
  *out = malloc((size_t)cap * sizeof **out);
  if (!*out)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate the corpus plan");
  if (!strcmp(preset, "paper")) {
    for (i = 0; i < (int)(sizeof paper_models / sizeof paper_models[0]); i++) {
      mi = (int)(tsr_corpus_model_find(paper_models[i]) - model_tab);
      for (fam = 0; fam < TSR_FAM_DENSE; fam++)
        if (model_tab[mi].families & (1u << fam))
          plan_pair(seed, mi, fam, 8, 9, *out, n);
    }
  } else if (!strcmp(preset, "demo")) {
    mi = (int)(tsr_corpus_model_find("demo-9x16x16") - model_tab);
    for (fam = 0; fam < TSR_FAM_DENSE; fam++)
      plan_pair(seed, mi, fam, 2, 3, *out, n);
  } else {
    const tsr_corpus_model *m = tsr_corpus_model_find(preset);
    if (!m) {
      free(*out);
      *out = NULL;
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "unknown corpus preset '%s' (try 'paper', 'demo' or a model name)",
                           preset);
    }
    mi = (int)(m - model_tab);
    for (fam = 0; fam < TSR_FAM_DENSE; fam++)
      if (m->families & (1u << fam))
        plan_pair(seed, mi, fam, 3, 3, *out, n);
  }
  return TSR_OK;
}

/* ---- Contexts: layouts and pooled statistics shared by entries -------------------- */

static void ctx_free(gen_ctx *c)
{
  tsr_corpus_layout_free(&c->lq);
  tsr_corpus_layout_free(&c->lk);
  tsr_corpus_pool_free(&c->pq);
  tsr_corpus_pool_free(&c->pk);
  free(c->radial);
  free(c->adj);
}

static const tsr_corpus_layout *ctx_lk(const gen_ctx *c) { return c->split_k ? &c->lk : &c->lq; }

static tsr_status write_sizes(const char *dir, const tsr_corpus_layout *l, const char *model,
                              char *rel, size_t relsz, tsr_error *err)
{
  char path[4200];
  int64_t *sz, b;
  tsr_array a;
  tsr_status st;
  snprintf(rel, relsz, "geom/%s-%s.npy", model, tsr_corpus_order_name(l->order));
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  sz = malloc((size_t)l->nb * sizeof *sz);
  if (!sz)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate %lld block sizes",
                         (long long)l->nb);
  for (b = 0; b < l->nb; b++)
    sz[b] = l->start[b + 1] - l->start[b];
  memset(&a, 0, sizeof a);
  a.dtype = TSR_DT_I64;
  a.ndim = 1;
  a.shape[0] = l->nb;
  a.data = sz;
  st = tsr_npy_save(path, &a, err);
  free(sz);
  return st;
}

static tsr_status ctx_build(gen_ctx *c, uint64_t seed, const char *dir, tsr_error *err)
{
  const tsr_corpus_model *m = &model_tab[c->model];
  int64_t f = (int64_t)m->h * m->w;
  uint64_t scene = tsr_corpus_key(seed, "scene", c->model, 0, 0, 0);
  tsr_status st = TSR_OK;
  switch (c->fam) {
  case TSR_FAM_SVG:
    st = tsr_corpus_layout_uniform(TSR_ORDER_FRAME, m->t, m->h, m->w, svg_block(f), &c->lq, err);
    break;
  case TSR_FAM_STA:
    st = tsr_corpus_layout_tiles(TSR_ORDER_TILE, m->t, m->h, m->w, 6, 8, 8, &c->lq, err);
    break;
  case TSR_FAM_VSA:
    st = tsr_corpus_layout_tiles(TSR_ORDER_CUBE, m->t, m->h, m->w, 4, 4, 4, &c->lq, err);
    c->pooled = 1;
    break;
  case TSR_FAM_JENGA:
    st = tsr_corpus_layout_uniform(TSR_ORDER_HILBERT, m->t, m->h, m->w, 128, &c->lq, err);
    if (!st)
      st = tsr_corpus_neighbours(&c->lq, &c->adj, err);
    c->pooled = 1;
    break;
  case TSR_FAM_SPARGE:
    /* mask-families.md: "Blocks 128 (q) x 64 (k)". */
    st = tsr_corpus_layout_uniform(TSR_ORDER_FRAME, m->t, m->h, m->w, 128, &c->lq, err);
    if (!st)
      st = tsr_corpus_layout_uniform(TSR_ORDER_FRAME, m->t, m->h, m->w, 64, &c->lk, err);
    c->split_k = 1;
    c->pooled = 1;
    break;
  case TSR_FAM_XATTN:
    c->pooled = 1;
    /* fall through */
  default:
    st = tsr_corpus_layout_uniform(TSR_ORDER_FRAME, m->t, m->h, m->w, 128, &c->lq, err);
    break;
  }
  if (!st && c->fam == TSR_FAM_RADIAL) {
    c->radial = malloc((size_t)(c->lq.nb * c->lq.nb));
    if (!c->radial)
      st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate the radial mask of '%s'", m->name);
    else
      tsr_corpus_radial(m->t, f, 128, m->radial_decay, m->first_frame_sink, c->radial);
  }
  if (!st && c->pooled) {
    st = tsr_corpus_pool_build(m, &c->lq, scene, &c->pq, err);
    if (!st && c->split_k)
      st = tsr_corpus_pool_build(m, &c->lk, scene, &c->pk, err);
  }
  if (!st && c->lq.block == 0) {
    /* Variable geometry (ragged tiles / cubes): sizes as extra .npy files. */
    st = write_sizes(dir, &c->lq, m->name, c->q_sizes, sizeof c->q_sizes, err);
    strcpy(c->k_sizes, c->q_sizes);
  }
  return st;
}

/* ---- One head ------------------------------------------------------------------------ */

static void hp(head_info *hi, const char *name, double v)
{
  if (hi->np < MAX_HP) {
    hi->pn[hi->np] = name;
    hi->pv[hi->np++] = v;
  }
}

/* The head's identity (its synthetic content) depends on (corpus seed, model,
 * method, layer, head) and not on the step: the same head at another step
 * has the same content and new noise, so its pattern is mostly stable. */
static uint64_t head_seed(const plan_entry *e, int h)
{
  return tsr_corpus_key(e->lseed, "head", h, 0, 0, 0);
}

/* Rank of head h in a seeded permutation of the layer's heads. */
static int head_rank(const plan_entry *e, const char *tag, int h, int heads)
{
  int perm[256], i, j, t;
  tsr_corpus_rng r;
  tsr_corpus_rng_seed(&r, tsr_corpus_key(e->lseed, tag, 0, 0, 0, 0));
  for (i = 0; i < heads && i < 256; i++)
    perm[i] = i;
  for (i = heads - 1; i > 0; i--) { /* Fisher-Yates */
    j = (int)(tsr_corpus_rng_uniform(&r) * (i + 1));
    t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (i = 0; i < heads; i++)
    if (perm[i] == h)
      return i;
  return 0;
}

/* Where the head's RoPE energy sits: +1 on the t channels, -1 on h and w.
 * A layer's heads spread evenly over [-1, 1] in a seeded order (plus a
 * little jitter), so every layer mixes frame-local and space-local heads as
 * the models do. */
static double head_bias(const plan_entry *e, int h)
{
  const tsr_corpus_model *m = &model_tab[e->model];
  tsr_corpus_rng r;
  double b;
  tsr_corpus_rng_seed(&r, head_seed(e, h) ^ 0x5bd1e995ull);
  b = 2.0 * (head_rank(e, "bias-rank", h, m->heads) + 0.5) / m->heads - 1.0 +
      0.2 * (tsr_corpus_rng_uniform(&r) - 0.5);
  return b < -1 ? -1 : b > 1 ? 1 : b;
}

/* Block probabilities of one head: softmax over key blocks of pooled
 * q . k / sqrt(d), plus log(count) when `by_mass` (the share of a whole block's
 * attention, which XAttention's antidiagonal sums estimate). */
static tsr_status head_probs(const gen_ctx *c, const tsr_corpus_model *m, const plan_entry *e,
                             int h, int by_mass, double *prob, double *selfq, double *selfk,
                             tsr_error *err)
{
  tsr_corpus_head hd;
  const tsr_corpus_pool *pk = c->split_k ? &c->pk : &c->pq;
  double *vq = NULL, *vk = NULL, *bias = NULL, bias_axis;
  uint64_t hseed = head_seed(e, h);
  int64_t b;
  tsr_status st;
  bias_axis = head_bias(e, h);
  tsr_corpus_head_make(m, hseed, bias_axis, &hd);
  st = tsr_corpus_pooled(&c->pq, &hd, 0, tsr_corpus_key(e->seed, "noise-q", h, 0, 0, 0), &vq,
                         err);
  if (!st)
    st = tsr_corpus_pooled(pk, &hd, 1, tsr_corpus_key(e->seed, "noise-k", h, 0, 0, 0), &vk, err);
  if (st)
    goto done;
  tsr_corpus_logits(vq, c->pq.nb, vk, pk->nb, c->pq.np, m->head_dim, prob);
  if (by_mass) {
    bias = malloc((size_t)pk->nb * sizeof *bias);
    if (!bias) {
      st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate %lld block weights",
                         (long long)pk->nb);
      goto done;
    }
    for (b = 0; b < pk->nb; b++)
      bias[b] = log(pk->count[b]);
  }
  tsr_corpus_softmax_rows(prob, c->pq.nb, pk->nb, bias);
  if (selfq)
    tsr_corpus_selfsim(&c->pq, &hd, 0, vq, selfq);
  if (selfk)
    tsr_corpus_selfsim(pk, &hd, 1, vk, selfk);
done:
  free(vq);
  free(vk);
  free(bias);
  return st;
}

static const int sta_windows[6][3] = {{5, 3, 3}, {1, 6, 10}, {3, 3, 5}, {5, 1, 10}, {5, 6, 1}, {5, 6, 10}};
/* Weights of the published windows: mean density 0.177 on the 5x6x10 grid,
 * near the published strategy's 16.6% for steps 15-49. */
static const double sta_weights[6] = {0.25, 0.15, 0.25, 0.15, 0.17, 0.03};

static int pick(const double *w, int n, double u)
{
  int i;
  for (i = 0; i < n - 1; i++) {
    if (u < w[i])
      return i;
    u -= w[i];
  }
  return n - 1;
}

/* A per-head draw: step -1 for choices that hold at every step. */
static double head_uniform(const plan_entry *e, const char *tag, int h, int step)
{
  tsr_corpus_rng r;
  tsr_corpus_rng_seed(&r, tsr_corpus_key(e->lseed, tag, h, step, 0, 0));
  return tsr_corpus_rng_uniform(&r);
}

/* One head plane to draw: the entry and head, the plane (zeroed) and its
 * description, the scratch the score families share, and what every rule
 * reads: the block counts, tokens a latent frame, whether the layer is
 * among the first or last two, and the head's "kind" draw. */
typedef struct {
  const gen_ctx *c;
  const tsr_corpus_model *m;
  const plan_entry *e;
  int h;
  uint8_t *plane;
  head_info *hi;
  double *prob, *selfq, *selfk;
  tsr_error *err;
  const tsr_corpus_layout *lq;
  int64_t nq, nk, f;
  int edge;
  double u;
} plane_job;

static tsr_status plane_dense(const plane_job *j)
{
  j->hi->kind = "dense";
  memset(j->plane, 1, (size_t)(j->nq * j->nk));
  return TSR_OK;
}

static tsr_status plane_svg(const plane_job *j)
{
  const tsr_corpus_model *m = j->m;
  const tsr_corpus_layout *lq = j->lq;
  head_info *hi = j->hi;
  /* Head type from online profiling: our heads with energy on the t
   * channels decay across frames, so the spatial pattern fits them; near
   * ties the per-step profile decides. */
  double bias = head_bias(j->e, j->h);
  int spatial;
  spatial = fabs(bias) < 0.1 ? head_uniform(j->e, "svg-flip", j->h, j->e->step) < 0.5 : bias > 0;
  hi->kind = spatial ? "spatial" : "temporal";
  if (!spatial)
    hi->order = tsr_corpus_order_name(TSR_ORDER_SPATIAL);
  hp(hi, "density_target", m->svg_density);
  hp(hi, "band_tokens", floor((double)lq->n * (1.0 - sqrt(1.0 - m->svg_density))));
  hp(hi, "sink_tokens", spatial && m->first_frame_sink ? (double)j->f : 0.0);
  tsr_corpus_svg_band(j->nq, lq->block, lq->n, m->svg_density,
                      spatial && m->first_frame_sink ? j->f : 0, j->plane);
  return TSR_OK;
}

/* STA's rule on the tile grid (raster tile indices), taken in the layout's
 * tile order (whole tiles first). */
static tsr_status sta_plane(const tsr_corpus_layout *lq, const int k[3], uint8_t *plane,
                            tsr_error *err)
{
  int64_t n = lq->nb, a, b, *tile = malloc((size_t)n * sizeof *tile);
  uint8_t *raster = malloc((size_t)(n * n));
  if (!tile || !raster) {
    free(tile);
    free(raster);
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate an STA plane of %lld tiles",
                         (long long)n);
  }
  tsr_corpus_sta(lq->grid, k, raster);
  for (a = 0; a < n; a++)
    tile[a] = tsr_corpus_layout_tile(lq, a);
  for (a = 0; a < n; a++)
    for (b = 0; b < n; b++)
      plane[a * n + b] = raster[tile[a] * n + tile[b]];
  free(tile);
  free(raster);
  return TSR_OK;
}

static tsr_status plane_sta(const plane_job *j)
{
  const tsr_corpus_layout *lq = j->lq;
  int w = pick(sta_weights, 6, j->u), k[3], a;
  if (head_uniform(j->e, "sta-change", j->h, j->e->step) < 0.017)
    w = (w + 1 + (int)(head_uniform(j->e, "sta-to", j->h, j->e->step) * 5)) % 6;
  for (a = 0; a < 3; a++)
    k[a] = sta_windows[w][a] < lq->grid[a] ? sta_windows[w][a] : lq->grid[a];
  j->hi->kind = w == 5 ? "full-window" : "window";
  hp(j->hi, "window_t", k[0]);
  hp(j->hi, "window_h", k[1]);
  hp(j->hi, "window_w", k[2]);
  return sta_plane(lq, k, j->plane, j->err);
}

static tsr_status plane_radial(const plane_job *j)
{
  j->hi->kind = "radial";
  hp(j->hi, "decay", j->m->radial_decay);
  hp(j->hi, "block", 128);
  hp(j->hi, "sink", j->m->first_frame_sink);
  memcpy(j->plane, j->c->radial, (size_t)(j->nq * j->nk));
  return TSR_OK;
}

static tsr_status plane_vsa(const plane_job *j)
{
  /* mask-families.md: "s = 0.8-0.9"; denser first and last layers. */
  double s = j->edge ? 0.8 : j->u < 0.5 ? 0.85 : 0.9;
  int64_t k = (int64_t)ceil((1.0 - s) * (double)j->nk - 1e-9);
  tsr_status st;
  j->hi->kind = "topk";
  hp(j->hi, "sparsity", s);
  hp(j->hi, "k", (double)k);
  st = head_probs(j->c, j->m, j->e, j->h, 0, j->prob, NULL, NULL, j->err);
  if (!st)
    st = tsr_corpus_topk(j->prob, j->nq, j->nk, k, j->plane, j->err);
  return st;
}

static tsr_status plane_sparge(const plane_job *j)
{
  head_info *hi = j->hi;
  int64_t nq = j->nq, nk = j->nk;
  /* mask-families.md: "Per-head thresholds: early and late layers mostly dense". */
  double tau, topf = 0, theta = 0.05, u;
  tsr_status st;
  if (j->u < (j->edge ? 0.75 : 0.08))
    return plane_dense(j);
  u = head_uniform(j->e, "sparge-mode", j->h, -1);
  tau = u < 0.25 ? 0.9 : u < 0.5 ? 0.95 : u < 0.7 ? 0.98 : 0;
  if (tau == 0)
    topf = u < 0.85 ? 0.2 : 0.3;
  st = head_probs(j->c, j->m, j->e, j->h, 0, j->prob, j->selfq, j->selfk, j->err);
  if (st)
    return st;
  if (tau > 0) {
    hi->kind = "cdf";
    hp(hi, "tau", tau);
  } else {
    hi->kind = "topk";
    hp(hi, "topk_fraction", topf);
  }
  hp(hi, "selfsim_min", theta);
  hp(hi, "sink", 1);
  return tsr_corpus_sparge(j->prob, j->selfq, j->selfk, nq, nk, tau, topf, theta, 1, j->plane,
                           j->err);
}

static tsr_status plane_xattn(const plane_job *j)
{
  /* Denser first and last layers: their heads take the higher threshold. */
  double tau = j->edge || j->u >= 0.5 ? 0.95 : 0.9;
  int stride = head_uniform(j->e, "xattn-stride", j->h, -1) < 0.5 ? 8 : 16;
  int64_t i;
  tsr_status st;
  j->hi->kind = "cdf";
  hp(j->hi, "tau", tau);
  hp(j->hi, "stride", stride);
  st = head_probs(j->c, j->m, j->e, j->h, 1, j->prob, NULL, NULL, j->err);
  if (!st) {
    /* The antidiagonal sums sample 1/stride of each block's entries: a
     * relative error ~ 1/sqrt(samples), drawn per block. */
    tsr_corpus_rng r;
    double sd = sqrt((double)stride / (128.0 * 128.0)) * 4.0;
    tsr_corpus_rng_seed(&r, tsr_corpus_key(j->e->seed, "xattn-sample", j->h, 0, 0, 0));
    for (i = 0; i < j->nq * j->nk; i++)
      j->prob[i] *= exp(sd * tsr_corpus_rng_normal(&r));
    st = tsr_corpus_xattn(j->prob, j->nq, j->nk, tau, j->plane, j->err);
  }
  return st;
}

static tsr_status plane_jenga(const plane_job *j)
{
  const tsr_corpus_model *m = j->m;
  const plan_entry *e = j->e;
  double p = j->edge ? 0.9 : 0.8 + 0.1 * j->u,
         drop = 0.7 + 0.15 * head_uniform(e, "jenga-drop", j->h, -1);
  double ramp = 0.1 * m->steps, eff = drop * (e->step >= ramp ? 1.0 : (e->step + 1) / ramp);
  int64_t floor_k = (int64_t)ceil((1.0 - eff) * (double)j->nk - 1e-9), i;
  tsr_status st;
  j->hi->kind = "cdf";
  hp(j->hi, "p", p);
  hp(j->hi, "drop", eff);
  hp(j->hi, "floor_blocks", (double)floor_k);
  st = head_probs(j->c, m, e, j->h, 0, j->prob, NULL, NULL, j->err);
  if (!st)
    st = tsr_corpus_cdf(j->prob, j->nq, j->nk, p, floor_k, j->plane, j->err);
  for (i = 0; !st && i < j->nq * j->nk; i++)
    j->plane[i] |= j->c->adj[i];
  return st;
}

static tsr_status plane_svdit(const plane_job *j)
{
  const tsr_corpus_model *m = j->m;
  /* Offline per-head choice: fixed for the (layer, head), so stable across
   * steps.  mask-families.md: "3-6% of heads skipped entirely", "implied density
   * ~42-60%": each layer's heads take the patterns in fixed shares (42%
   * dense, 5% skipped, the rest split over the three sparse patterns) in a
   * seeded order, so every layer sits near the published density. */
  static const double w[5] = {0.42, 0.18, 0.18, 0.17, 0.05};
  static const char *const kinds[5] = {"dense", "diagonal", "multi-diagonal",
                                       "vertical-stripe", "skip"};
  int pat = pick(w, 5, (head_rank(j->e, "svdit-rank", j->h, m->heads) + 0.5) / m->heads);
  int64_t width;
  j->hi->kind = kinds[pat];
  if (pat == 0) {
    memset(j->plane, 1, (size_t)(j->nq * j->nk));
    return TSR_OK;
  }
  if (pat == 4)
    return TSR_OK; /* skipped: the head's output is reused, no block computed */
  width = pat == 3 ? 12 : 128;
  hp(j->hi, pat == 3 ? "stripe_every" : "width", (double)width);
  return tsr_corpus_svdit(pat == 1 ? TSR_SVDIT_DIAG : pat == 2 ? TSR_SVDIT_MULTIDIAG
                                                               : TSR_SVDIT_STRIPE,
                          m->t, j->f, 128, width,
                          tsr_corpus_key(j->e->lseed, "svdit", j->h, 0, 0, 0), j->plane, j->err);
}

/* Each family's rule (corpus_families.c holds the mask rules they call). */
static tsr_status (*const plane_rules[TSR_FAM_COUNT])(const plane_job *) = {
    [TSR_FAM_SVG] = plane_svg,       [TSR_FAM_STA] = plane_sta,
    [TSR_FAM_RADIAL] = plane_radial, [TSR_FAM_VSA] = plane_vsa,
    [TSR_FAM_SPARGE] = plane_sparge, [TSR_FAM_XATTN] = plane_xattn,
    [TSR_FAM_JENGA] = plane_jenga,   [TSR_FAM_SVDIT] = plane_svdit,
    [TSR_FAM_DENSE] = plane_dense,
};

/* Head h's [nq][nk] plane of entry e by its family's rule, described in hi
 * (kind, token order, parameters, density). */
static tsr_status head_plane(const gen_ctx *c, const plan_entry *e, int h, uint8_t *plane,
                             head_info *hi, double *prob, double *selfq, double *selfk,
                             tsr_error *err)
{
  const tsr_corpus_model *m = &model_tab[e->model];
  plane_job j;
  tsr_status st;
  int64_t i;

  j.c = c;
  j.m = m;
  j.e = e;
  j.h = h;
  j.plane = plane;
  j.hi = hi;
  j.prob = prob;
  j.selfq = selfq;
  j.selfk = selfk;
  j.err = err;
  j.lq = &c->lq;
  j.nq = c->lq.nb;
  j.nk = ctx_lk(c)->nb;
  j.f = (int64_t)m->h * m->w;
  j.edge = e->layer < 2 || e->layer >= m->layers - 2;
  j.u = head_uniform(e, "kind", h, -1);
  memset(hi, 0, sizeof *hi);
  hi->order = tsr_corpus_order_name(c->lq.order);
  memset(plane, 0, (size_t)(j.nq * j.nk));
  if (e->fam < 0 || e->fam >= TSR_FAM_COUNT || !plane_rules[e->fam])
    return tsr_error_set(err, TSR_ERR_INVALID, "unknown corpus family %d", e->fam);
  st = plane_rules[e->fam](&j);
  if (!st) {
    int64_t sel = 0;
    for (i = 0; i < j.nq * j.nk; i++)
      sel += plane[i];
    hi->density = (double)sel / (double)(j.nq * j.nk);
  }
  return st;
}

/* ---- One entry -------------------------------------------------------------------- */

static tsr_status gen_entry(gen_state *g, plan_entry *e, tsr_error *err)
{
  const gen_ctx *c = &g->ctx[e->ctx];
  int64_t nq = c->lq.nb, nk = ctx_lk(c)->nb, plane = nq * nk, sel = 0, i;
  uint8_t *bits = malloc((size_t)(plane * e->heads));
  double *prob = malloc((size_t)plane * sizeof *prob);
  double *selfq = malloc((size_t)nq * sizeof *selfq), *selfk = malloc((size_t)nk * sizeof *selfk);
  char path[4400];
  tsr_array a;
  tsr_status st = TSR_OK;
  int h;

  e->nq = nq;
  e->nk = nk;
  e->hi = calloc((size_t)e->heads, sizeof *e->hi);
  if (!bits || !prob || !selfq || !selfk || !e->hi) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate corpus mask '%s' (%lld bytes)",
                       e->file, (long long)(plane * e->heads));
    goto done;
  }
  for (h = 0; h < e->heads && !st; h++)
    st = head_plane(c, e, e->head_first + h, bits + (size_t)h * plane, &e->hi[h], prob, selfq,
                    selfk, err);
  if (st)
    goto done;
  for (i = 0; i < plane * e->heads; i++)
    sel += bits[i];
  e->density = (double)sel / (double)(plane * e->heads);
  memset(&a, 0, sizeof a);
  a.dtype = TSR_DT_BOOL;
  a.ndim = 3;
  a.shape[0] = e->heads;
  a.shape[1] = nq;
  a.shape[2] = nk;
  a.data = bits;
  snprintf(path, sizeof path, "%s/%s", g->dir, e->file);
  st = tsr_npy_save(path, &a, err);
done:
  free(bits);
  free(prob);
  free(selfq);
  free(selfk);
  return st;
}

/* Phase 0 builds the contexts, phase 1 the entries; items are taken in turn
 * by every thread, and each item's bytes depend on nothing but itself. */
static void *gen_worker(void *arg)
{
  gen_state *g = arg;
  int64_t total = g->phase == 0 ? g->nctx : g->n;
  for (;;) {
    tsr_error err;
    tsr_status st;
    int64_t i;
    pthread_mutex_lock(&g->lock);
    if (g->failed || g->next >= total) {
      pthread_mutex_unlock(&g->lock);
      return NULL;
    }
    i = g->next++;
    pthread_mutex_unlock(&g->lock);
    tsr_error_clear(&err);
    st = g->phase == 0 ? ctx_build(&g->ctx[i], g->o->seed, g->dir, &err)
                       : gen_entry(g, &g->e[i], &err);
    pthread_mutex_lock(&g->lock);
    if (st && !g->failed) {
      g->failed = 1;
      g->err = err;
    }
    if (g->phase == 1) {
      g->done++;
      if (g->o->progress && !g->failed)
        g->o->progress(g->o->progress_ud, g->done, g->n);
    }
    pthread_mutex_unlock(&g->lock);
  }
}

static void run_pool(gen_state *g, int phase, int jobs)
{
  pthread_t th[64];
  int k, nth = 0;
  g->phase = phase;
  g->next = 0;
  for (k = 1; k < jobs; k++)
    if (pthread_create(&th[nth], NULL, gen_worker, g) == 0)
      nth++;
  gen_worker(g);
  for (k = 0; k < nth; k++)
    pthread_join(th[k], NULL);
}

/* ---- Manifest ------------------------------------------------------------------------ */

static json_t *num(double v)
{
  if (v == floor(v) && fabs(v) < 1e15)
    return json_integer((json_int_t)v);
  return json_real(v);
}

static json_t *entry_json(const gen_state *g, int64_t id, const plan_entry *e)
{
  const tsr_corpus_model *m = &model_tab[e->model];
  const gen_ctx *c = &g->ctx[e->ctx];
  json_t *o = json_object(), *geo = json_object(), *par = json_object(), *heads = json_array();
  char hex[32];
  int h, k;
  json_object_set_new(o, "id", json_integer(id));
  json_object_set_new(o, "file", json_string(e->file));
  json_object_set_new(o, "model", json_string(m->name));
  json_object_set_new(o, "family", json_string(fam_tab[e->fam].name));
  json_object_set_new(o, "method", json_string(fam_tab[e->method].name));
  json_object_set_new(o, "split", json_string(e->eval ? "eval" : "profile"));
  json_object_set_new(o, "step", json_integer(e->step));
  json_object_set_new(o, "steps", json_integer(m->steps));
  json_object_set_new(o, "layer", json_integer(e->layer));
  json_object_set_new(o, "layers", json_integer(m->layers));
  json_object_set_new(o, "head_first", json_integer(e->head_first));
  json_object_set_new(o, "heads_q", json_integer(e->heads));
  json_object_set_new(o, "heads_kv", json_integer(e->heads));
  json_object_set_new(o, "model_heads", json_integer(m->heads));
  json_object_set_new(o, "head_dim", json_integer(m->head_dim));
  json_object_set_new(o, "seq_q", json_integer(c->lq.n));
  json_object_set_new(o, "seq_k", json_integer(c->lq.n));
  json_object_set_new(o, "latent", json_pack("[iii]", m->t, m->h, m->w));
  json_object_set_new(o, "text_tokens", json_integer(m->text_tokens));
  json_object_set_new(o, "token_order", json_string(tsr_corpus_order_name(c->lq.order)));
  if (c->lq.block) {
    json_object_set_new(geo, "kind", json_string("uniform"));
    json_object_set_new(geo, "bq", json_integer(c->lq.block));
    json_object_set_new(geo, "bk", json_integer(ctx_lk(c)->block));
  } else {
    json_object_set_new(geo, "kind", json_string("variable"));
    json_object_set_new(geo, "q_sizes", json_string(c->q_sizes));
    json_object_set_new(geo, "k_sizes", json_string(c->k_sizes));
  }
  json_object_set_new(geo, "nq", json_integer(e->nq));
  json_object_set_new(geo, "nk", json_integer(e->nk));
  json_object_set_new(o, "geometry", geo);
  json_object_set_new(o, "density", json_real(e->density));
  snprintf(hex, sizeof hex, "0x%016llx", (unsigned long long)e->seed);
  json_object_set_new(o, "seed", json_string(hex));
  if (e->fam == TSR_FAM_DENSE)
    json_object_set_new(par, "reason", json_string(e->reason));
  if (e->method == TSR_FAM_SVG)
    json_object_set_new(par, "block", json_integer(c->lq.block));
  if (e->method == TSR_FAM_STA)
    json_object_set_new(par, "tile_grid", json_pack("[iii]", c->lq.grid[0], c->lq.grid[1], c->lq.grid[2]));
  if (e->method == TSR_FAM_VSA)
    json_object_set_new(par, "cube_grid", json_pack("[iii]", c->lq.grid[0], c->lq.grid[1], c->lq.grid[2]));
  json_object_set_new(par, "dense_warmup_steps", json_integer(n_warm_steps(e->method, m)));
  json_object_set_new(par, "dense_layers", json_integer(n_dense_layers(e->method, m)));
  json_object_set_new(o, "params", par);
  for (h = 0; h < e->heads; h++) {
    const head_info *hi = &e->hi[h];
    json_t *ho = json_object();
    json_object_set_new(ho, "head", json_integer(e->head_first + h));
    json_object_set_new(ho, "kind", json_string(hi->kind));
    json_object_set_new(ho, "token_order", json_string(hi->order));
    json_object_set_new(ho, "density", json_real(hi->density));
    for (k = 0; k < hi->np; k++)
      json_object_set_new(ho, hi->pn[k], num(hi->pv[k]));
    json_array_append_new(heads, ho);
  }
  json_object_set_new(o, "heads", heads);
  return o;
}

static tsr_status write_manifest(const gen_state *g, tsr_error *err)
{
  json_t *root = json_object(), *entries = json_array(), *fams = json_object();
  char path[4200], *text;
  int64_t i, n_eval = 0;
  int fam;
  tsr_status st = TSR_OK;
  for (fam = 0; fam < TSR_FAM_COUNT; fam++) {
    int64_t cnt = 0;
    for (i = 0; i < g->n; i++)
      cnt += g->e[i].fam == fam;
    if (cnt)
      json_object_set_new(fams, fam_tab[fam].name, json_integer(cnt));
  }
  for (i = 0; i < g->n; i++) {
    n_eval += g->e[i].eval;
    json_array_append_new(entries, entry_json(g, i, &g->e[i]));
  }
  json_object_set_new(root, "format", json_string("tessera-corpus"));
  json_object_set_new(root, "version", json_integer(1));
  json_object_set_new(root, "generator", json_string(PACKAGE_STRING));
  json_object_set_new(root, "preset", json_string(g->o->preset));
  json_object_set_new(root, "seed", json_integer((json_int_t)g->o->seed));
  json_object_set_new(root, "count", json_integer(g->n));
  json_object_set_new(root, "split",
                      json_pack("{s:s,s:I,s:I}", "rule",
                                "per (model, method): every fourth sampled layer, from a "
                                "seeded offset, is eval; the rest profile",
                                "profile", (json_int_t)(g->n - n_eval), "eval",
                                (json_int_t)n_eval));
  json_object_set_new(root, "families", fams);
  json_object_set_new(root, "entries", entries);
  snprintf(path, sizeof path, "%s/manifest.json", g->dir);
  text = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
  if (!text)
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot write corpus manifest '%s': out of memory",
                       path);
  else
    st = tsri_out_write(path, text, strlen(text), err);
  free(text);
  json_decref(root);
  return st;
}

/* ---- Generation ---------------------------------------------------------------------- */

void tsr_corpus_gen_opts_init(tsr_corpus_gen_opts *o)
{
  memset(o, 0, sizeof *o);
  o->seed = 1;
  o->jobs = 1;
}

/* mkdir -p; errors name the folder. */
static tsr_status make_dirs(const char *dir, tsr_error *err)
{
  char buf[4096];
  size_t i, n = strlen(dir);
  struct stat sb;
  if (n == 0 || n >= sizeof buf)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid corpus folder '%s'", dir);
  memcpy(buf, dir, n + 1);
  for (i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0')
      continue;
    buf[i] = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return tsr_error_set(err, TSR_ERR_IO, "cannot create corpus folder '%s': %s", buf,
                           strerror(errno));
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
      return tsr_error_set(err, TSR_ERR_IO, "cannot create corpus folder '%s': not a folder",
                           buf);
    buf[i] = dir[i];
  }
  if (access(dir, W_OK | X_OK) != 0)
    return tsr_error_set(err, TSR_ERR_IO, "cannot write corpus folder '%s': %s", dir,
                         strerror(errno));
  return TSR_OK;
}

/* What to do with the folder o->out_dir for a corpus of `count` entries:
 * generate it (absent, or an empty folder), reuse it (*reuse = 1: it holds
 * that complete corpus, every file of its manifest there), or refuse it:
 * anything else is someone's data, named in the error and left alone. */
static tsr_status check_target(const tsr_corpus_gen_opts *o, int64_t count, int *reuse,
                               tsr_error *err)
{
  const char *dir = o->out_dir;
  struct stat sb;
  tsr_corpus *c = NULL;
  tsr_error probe = {0};
  tsr_status st = TSR_OK;
  char what[4300];
  int64_t i;
  *reuse = 0;
  if (stat(dir, &sb) != 0)
    return TSR_OK; /* absent, or unreachable: creating it names the problem */
  if (!S_ISDIR(sb.st_mode))
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot use corpus folder '%s': %s, not a folder",
                         dir, tsri_file_kind(sb.st_mode));
  if (tsri_file_dir_empty(dir) == 1)
    return TSR_OK;
  if (tsr_corpus_open(dir, &c, &probe) != TSR_OK)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "cannot use corpus folder '%s': not empty and not a complete corpus "
                         "(%s)",
                         dir, probe.text);
  if (strcmp(tsr_corpus_preset(c), o->preset) || tsr_corpus_seed(c) != o->seed ||
      tsr_corpus_count(c) != count)
    st = tsr_error_set(err, TSR_ERR_INVALID,
                       "corpus '%s' holds preset '%s' seed %llu (%lld masks), not preset '%s' "
                       "seed %llu (%lld masks): give another folder",
                       dir, tsr_corpus_preset(c), (unsigned long long)tsr_corpus_seed(c),
                       (long long)tsr_corpus_count(c), o->preset, (unsigned long long)o->seed,
                       (long long)count);
  snprintf(what, sizeof what, "cannot use corpus folder '%s': incomplete, cannot read", dir);
  for (i = 0; i < count && st == TSR_OK; i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(c, i);
    if (tsri_in_check(e->file, what, &probe) ||
        (e->q_sizes && tsri_in_check(e->q_sizes, what, &probe)) ||
        (e->k_sizes && tsri_in_check(e->k_sizes, what, &probe)))
      st = tsr_error_set(err, TSR_ERR_INVALID, "%s", probe.text);
  }
  tsr_corpus_close(c);
  *reuse = st == TSR_OK;
  return st;
}

/* mkdir -p of the folder that will hold `dir`. */
static tsr_status make_parent(const char *dir, tsr_error *err)
{
  char buf[4096];
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--;
  while (n > 0 && dir[n - 1] != '/')
    n--;
  while (n > 1 && dir[n - 1] == '/')
    n--;
  if (n == 0 || (n == 1 && dir[0] == '/'))
    return TSR_OK;
  if (n >= sizeof buf)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid corpus folder '%s'", dir);
  memcpy(buf, dir, n);
  buf[n] = '\0';
  return make_dirs(buf, err);
}

tsr_status tsr_corpus_generate(const tsr_corpus_gen_opts *o, int64_t *written, tsr_error *err)
{
  gen_state g;
  char sub[4200];
  tsr_out *t = NULL;
  int64_t i;
  int k, jobs, reuse = 0;
  tsr_status st;

  if (written)
    *written = 0;
  if (!o || !o->out_dir || !o->preset)
    return tsr_error_set(err, TSR_ERR_INVALID, "corpus generation needs a preset and a folder");
  if (o->limit < 0 || o->seed > (uint64_t)INT64_MAX)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid corpus limit %lld or seed %llu",
                         (long long)o->limit, (unsigned long long)o->seed);
  memset(&g, 0, sizeof g);
  g.o = o;
  st = plan_preset(o->preset, o->seed, &g.e, &g.n, err);
  if (st)
    return st;
  if (o->limit > 0 && o->limit < g.n)
    g.n = o->limit;
  if ((st = check_target(o, g.n, &reuse, err)) != TSR_OK || reuse) {
    free(g.e);
    return st;
  }
  g.ctx = calloc((size_t)g.n + 1, sizeof *g.ctx);
  if (!g.ctx) {
    free(g.e);
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot allocate the corpus contexts");
  }
  /* Built in a temporary folder beside out_dir, renamed into place when
   * complete: a failure leaves no partial corpus. */
  st = make_parent(o->out_dir, err);
  if (!st)
    st = tsri_out_begin(&t, err);
  if (!st)
    st = tsri_out_dir(t, o->out_dir, NULL, NULL, &g.dir, err);
  if (!st) {
    snprintf(sub, sizeof sub, "%s/masks", g.dir);
    st = make_dirs(sub, err);
  }
  if (!st) {
    snprintf(sub, sizeof sub, "%s/geom", g.dir);
    st = make_dirs(sub, err);
  }
  /* Contexts per (model, method geometry): dense entries use frame-major 128. */
  for (i = 0; i < g.n && !st; i++) {
    plan_entry *e = &g.e[i];
    for (k = 0; k < g.nctx; k++)
      if (g.ctx[k].model == e->model && g.ctx[k].fam == e->fam)
        break;
    if (k == g.nctx) {
      g.ctx[k].model = e->model;
      g.ctx[k].fam = e->fam;
      g.nctx++;
    }
    e->ctx = k;
  }
  jobs = o->jobs < 1 ? 1 : o->jobs > 64 ? 64 : o->jobs;
  pthread_mutex_init(&g.lock, NULL);
  if (!st) {
    run_pool(&g, 0, jobs);
    if (g.failed)
      st = tsr_error_set(err, g.err.status, "%s", g.err.text);
  }
  for (i = 0; i < g.n && !st; i++) {
    plan_entry *e = &g.e[i];
    const tsr_corpus_model *m = &model_tab[e->model];
    const gen_ctx *c = &g.ctx[e->ctx];
    int64_t per_head = c->lq.nb * ctx_lk(c)->nb, grp = FILE_BUDGET / per_head, ng;
    grp = grp < 1 ? 1 : grp > m->heads ? m->heads : grp;
    ng = (m->heads + grp - 1) / grp;
    e->head_first = (int)(((e->layer + e->method) % ng) * grp);
    e->heads = (int)(m->heads - e->head_first < grp ? m->heads - e->head_first : grp);
    snprintf(e->file, sizeof e->file, "masks/%05lld-%s-%s-s%02d-l%02d-h%02d.npy", (long long)i,
             m->name, fam_tab[e->fam == TSR_FAM_DENSE ? e->method : e->fam].name, e->step,
             e->layer, e->head_first);
  }
  if (!st) {
    run_pool(&g, 1, jobs);
    if (g.failed)
      st = tsr_error_set(err, g.err.status, "%s", g.err.text);
  }
  pthread_mutex_destroy(&g.lock);
  if (!st)
    st = write_manifest(&g, err);
  if (!st) {
    st = tsri_out_commit(t, err);
    t = NULL;
  }
  tsri_out_abort(t);
  if (!st && written)
    *written = g.n;
  for (k = 0; k < g.nctx; k++)
    ctx_free(&g.ctx[k]);
  for (i = 0; i < g.n; i++)
    free(g.e[i].hi);
  free(g.ctx);
  free(g.e);
  return st;
}

/* ---- Reader ----------------------------------------------------------------------------- */

struct tsr_corpus {
  json_t *root;
  char *dir;
  char *preset;
  uint64_t seed;
  int64_t n;
  tsr_corpus_entry *e;
  json_t **heads;  /* per entry: its "heads" array (borrowed from root) */
  char **paths;    /* per entry: 3 joined paths (file, q_sizes, k_sizes) */
};

static char *join(const char *dir, const char *rel)
{
  size_t n = strlen(dir) + strlen(rel) + 2;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", dir, rel);
  return p;
}

void tsr_corpus_close(tsr_corpus *c)
{
  int64_t i;
  if (!c)
    return;
  for (i = 0; c->paths && i < 3 * c->n; i++)
    free(c->paths[i]);
  free(c->paths);
  free(c->heads);
  free(c->e);
  free(c->dir);
  free(c->preset);
  json_decref(c->root);
  free(c);
}

/* Why entry e's sizes are out of the limits of tessera.h (into why), or
 * NULL: checked when the manifest is read, so that nothing is allocated
 * for a size no plan or kernel could address. */
static const char *entry_limits(const tsr_corpus_entry *e, char *why, size_t n)
{
  const struct {
    const char *name;
    int64_t v, max;
  } lim[] = {
      {"heads_q", e->heads_q, TSR_MAX_DIM},   {"heads_kv", e->heads_kv, TSR_MAX_DIM},
      {"model_heads", e->model_heads, TSR_MAX_DIM}, {"head_dim", e->head_dim, TSR_MAX_DIM},
      {"seq_q", e->seq_q, TSR_MAX_SEQ},       {"seq_k", e->seq_k, TSR_MAX_SEQ},
      {"nq", e->nq, e->seq_q},                {"nk", e->nk, e->seq_k},
      {"bq", e->bq, TSR_MAX_SEQ},             {"bk", e->bk, TSR_MAX_SEQ},
  };
  size_t i;
  int64_t pairs;
  for (i = 0; i < sizeof lim / sizeof lim[0]; i++)
    if (lim[i].v > lim[i].max) {
      snprintf(why, n, "'%s' is %lld, more than %lld", lim[i].name, (long long)lim[i].v,
               (long long)lim[i].max);
      return why;
    }
  if (e->bq && (e->nq != (e->seq_q + e->bq - 1) / e->bq ||
                e->nk != (e->seq_k + e->bk - 1) / e->bk)) {
    snprintf(why, n,
             "geometry of %lld x %lld blocks does not cover %lld x %lld tokens in blocks of "
             "%lldx%lld",
             (long long)e->nq, (long long)e->nk, (long long)e->seq_q, (long long)e->seq_k,
             (long long)e->bq, (long long)e->bk);
    return why;
  }
  if (__builtin_mul_overflow(e->heads_q, e->nq, &pairs) ||
      __builtin_mul_overflow(pairs, e->nk, &pairs) || pairs > TSR_MAX_MASK_PAIRS) {
    snprintf(why, n, "mask of %lld x %lld x %lld blocks is more than %lld block pairs",
             (long long)e->heads_q, (long long)e->nq, (long long)e->nk,
             (long long)TSR_MAX_MASK_PAIRS);
    return why;
  }
  return NULL;
}

/* Why the manifest's relative path `rel` (joined to `dir` as `path`) names
 * a file outside the corpus folder, or NULL: an empty or absolute path, a
 * '..' component, or a path that resolves (through links) outside `dir`.
 * A file that does not exist yet is left to the loader to report. */
static const char *path_escapes(const char *dir, const char *rel, const char *path, char *why,
                                size_t n)
{
  const char *c = rel;
  char *rdir, *rpath;
  int inside = 1;
  if (!*rel || *rel == '/') {
    snprintf(why, n, "%s", *rel ? "an absolute path" : "an empty path");
    return why;
  }
  for (; *c; c += *c == '/') {
    size_t len = strcspn(c, "/");
    if (len == 2 && c[0] == '.' && c[1] == '.') {
      snprintf(why, n, "a '..' component");
      return why;
    }
    c += len;
  }
  rpath = realpath(path, NULL);
  rdir = rpath ? realpath(dir, NULL) : NULL;
  if (rdir) {
    size_t len = strlen(rdir);
    inside = !strncmp(rpath, rdir, len) && (rpath[len] == '/' || !strcmp(rdir, "/"));
    if (!inside)
      snprintf(why, n, "a path that resolves to '%.200s'", rpath);
  }
  free(rdir);
  free(rpath);
  return inside ? NULL : why;
}

static int get_int(json_t *o, const char *k, int64_t *v)
{
  json_t *x = json_object_get(o, k);
  if (!json_is_integer(x))
    return -1;
  *v = json_integer_value(x);
  return 0;
}

static const char *get_str(json_t *o, const char *k)
{
  return json_string_value(json_object_get(o, k));
}

/* The manifest's JSON into c->root, checked for its format and version.
 * A FIFO or a folder named manifest.json is refused, not waited on. */
static tsr_status manifest_load(tsr_corpus *c, const char *mpath, tsr_error *err)
{
  json_error_t je;
  FILE *mf;
  int64_t v;
  if (!(mf = tsri_in_open(mpath, "cannot read corpus manifest", err)))
    return TSR_ERR_IO;
  c->root = json_loadf(mf, 0, &je);
  fclose(mf);
  if (!c->root)
    return tsr_error_set(err, TSR_ERR_FORMAT, "cannot read corpus manifest '%s': line %d: %s",
                         mpath, je.line, je.text);
  if (!get_str(c->root, "format") || strcmp(get_str(c->root, "format"), "tessera-corpus") ||
      get_int(c->root, "version", &v) || v != 1)
    return tsr_error_set(err, TSR_ERR_FORMAT,
                         "cannot read corpus manifest '%s': not a tessera-corpus "
                         "version 1 manifest", mpath);
  return TSR_OK;
}

/* Entry i's fields from its manifest object o: NULL, or the key that is
 * missing or invalid. */
static const char *entry_fields(tsr_corpus *c, int64_t i, json_t *o)
{
  json_t *geo = json_object_get(o, "geometry");
  tsr_corpus_entry *e = &c->e[i];
  const char *seed = get_str(o, "seed"), *kind = get_str(geo, "kind"), *bad = NULL;
#define REQ_STR(field, key) \
  if (!bad && !(e->field = get_str(o, key))) bad = key
#define REQ_INT(field, key) \
  if (!bad && get_int(o, key, &e->field)) bad = key
  REQ_STR(file, "file");
  REQ_STR(model, "model");
  REQ_STR(family, "family");
  REQ_STR(split, "split");
  REQ_STR(token_order, "token_order");
  REQ_INT(step, "step");
  REQ_INT(layer, "layer");
  REQ_INT(head_first, "head_first");
  REQ_INT(heads_q, "heads_q");
  REQ_INT(heads_kv, "heads_kv");
  REQ_INT(model_heads, "model_heads");
  REQ_INT(head_dim, "head_dim");
  REQ_INT(seq_q, "seq_q");
  REQ_INT(seq_k, "seq_k");
#undef REQ_STR
#undef REQ_INT
  if (!bad && !json_is_number(json_object_get(o, "density")))
    bad = "density";
  if (!bad && !seed)
    bad = "seed";
  if (!bad && (!kind || get_int(geo, "nq", &e->nq) || get_int(geo, "nk", &e->nk)))
    bad = "geometry";
  if (!bad && !strcmp(kind, "uniform")) {
    if (get_int(geo, "bq", &e->bq) || get_int(geo, "bk", &e->bk) || e->bq <= 0 || e->bk <= 0)
      bad = "geometry";
  } else if (!bad && !strcmp(kind, "variable")) {
    if (!get_str(geo, "q_sizes") || !get_str(geo, "k_sizes"))
      bad = "geometry";
  } else if (!bad) {
    bad = "geometry";
  }
  if (!bad && (e->heads_q <= 0 || e->heads_kv <= 0 || e->seq_q <= 0 || e->seq_k <= 0 ||
               e->nq <= 0 || e->nk <= 0 || e->head_dim <= 0))
    bad = "sizes";
  c->heads[i] = json_object_get(o, "heads");
  if (!bad && (!json_is_array(c->heads[i]) || (int64_t)json_array_size(c->heads[i]) != e->heads_q))
    bad = "heads";
  return bad;
}

/* Entry i's files (the mask, and a variable geometry's block sizes) as
 * paths under dir: NULL, "memory", or NULL with *why set (in why_buf) for
 * a path outside the folder. */
static const char *entry_paths(tsr_corpus *c, int64_t i, json_t *o, const char *dir,
                               const char **why, char *why_buf, size_t n)
{
  json_t *geo = json_object_get(o, "geometry");
  tsr_corpus_entry *e = &c->e[i];
  const char *rel[3] = {e->file, NULL, NULL};
  const char *key[3] = {"file", "q_sizes", "k_sizes"}, *bad = NULL;
  int k;
  if (!strcmp(get_str(geo, "kind"), "variable")) {
    rel[1] = get_str(geo, "q_sizes");
    rel[2] = get_str(geo, "k_sizes");
  }
  for (k = 0; k < 3 && !bad && !*why; k++) {
    char esc[260];
    if (!rel[k])
      continue;
    if (!(c->paths[3 * i + k] = join(dir, rel[k])))
      bad = "memory";
    else if (path_escapes(dir, rel[k], c->paths[3 * i + k], esc, sizeof esc)) {
      snprintf(why_buf, n, "'%s' names '%.100s' outside the corpus folder: %.180s", key[k], rel[k],
               esc);
      *why = why_buf;
    }
  }
  e->file = c->paths[3 * i];
  e->q_sizes = c->paths[3 * i + 1];
  e->k_sizes = c->paths[3 * i + 2];
  return bad;
}

tsr_status tsr_corpus_open(const char *dir, tsr_corpus **out, tsr_error *err)
{
  tsr_corpus *c;
  json_t *ents;
  tsr_status st;
  char *mpath;
  int64_t i, v;
  const char *bad = NULL, *why = NULL;
  char why_buf[320];

  *out = NULL;
  if (!dir)
    return tsr_error_set(err, TSR_ERR_INVALID, "no corpus folder given");
  c = calloc(1, sizeof *c);
  mpath = join(dir, "manifest.json");
  if (!c || !mpath || !(c->dir = strdup(dir))) {
    free(mpath);
    tsr_corpus_close(c);
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot open corpus '%s': out of memory", dir);
  }
  if ((st = manifest_load(c, mpath, err)) != TSR_OK)
    goto fail;
  c->preset = strdup(get_str(c->root, "preset") ? get_str(c->root, "preset") : "");
  if (!get_int(c->root, "seed", &v))
    c->seed = (uint64_t)v;
  ents = json_object_get(c->root, "entries");
  if (!json_is_array(ents)) {
    st = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read corpus manifest '%s': no 'entries' array",
                       mpath);
    goto fail;
  }
  c->n = (int64_t)json_array_size(ents);
  c->e = calloc((size_t)c->n + 1, sizeof *c->e);
  c->heads = calloc((size_t)c->n + 1, sizeof *c->heads);
  c->paths = calloc((size_t)c->n * 3 + 1, sizeof *c->paths);
  if (!c->e || !c->heads || !c->paths || !c->preset) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot open corpus '%s': out of memory", dir);
    goto fail;
  }
  for (i = 0; i < c->n && !bad; i++) {
    json_t *o = json_array_get(ents, (size_t)i);
    tsr_corpus_entry *e = &c->e[i];
    if ((bad = entry_fields(c, i, o)) || (why = entry_limits(e, why_buf, sizeof why_buf)) != NULL)
      break;
    e->density = json_number_value(json_object_get(o, "density"));
    e->seed = strtoull(get_str(o, "seed"), NULL, 0);
    bad = entry_paths(c, i, o, dir, &why, why_buf, sizeof why_buf);
    if (why)
      break;
  }
  if (why) {
    st = tsr_error_set(err, TSR_ERR_FORMAT, "cannot read corpus manifest '%s': entry %lld: %s",
                       mpath, (long long)i, why);
    goto fail;
  }
  if (bad) {
    st = tsr_error_set(err, TSR_ERR_FORMAT,
                       "cannot read corpus manifest '%s': entry %lld has a missing "
                       "or invalid '%s'", mpath, (long long)i, bad);
    goto fail;
  }
  free(mpath);
  *out = c;
  return TSR_OK;
fail:
  free(mpath);
  tsr_corpus_close(c);
  return st;
}

int64_t tsr_corpus_count(const tsr_corpus *c) { return c ? c->n : 0; }

const tsr_corpus_entry *tsr_corpus_get(const tsr_corpus *c, int64_t i)
{
  return c && i >= 0 && i < c->n ? &c->e[i] : NULL;
}

uint64_t tsr_corpus_seed(const tsr_corpus *c) { return c ? c->seed : 0; }

const char *tsr_corpus_preset(const tsr_corpus *c) { return c ? c->preset : NULL; }

static const char *head_field(const tsr_corpus *c, int64_t i, int64_t h, const char *k)
{
  if (!c || i < 0 || i >= c->n || h < 0 || h >= c->e[i].heads_q)
    return NULL;
  return get_str(json_array_get(c->heads[i], (size_t)h), k);
}

const char *tsr_corpus_head_kind(const tsr_corpus *c, int64_t i, int64_t h)
{
  return head_field(c, i, h, "kind");
}

const char *tsr_corpus_head_order(const tsr_corpus *c, int64_t i, int64_t h)
{
  return head_field(c, i, h, "token_order");
}

tsr_status tsr_corpus_load_mask(const tsr_corpus *c, int64_t i, tsr_mask **out, tsr_error *err)
{
  const tsr_corpus_entry *e = tsr_corpus_get(c, i);
  tsr_status st;
  *out = NULL;
  if (!e)
    return tsr_error_set(err, TSR_ERR_INVALID, "corpus entry %lld out of range (0..%lld)",
                         (long long)i, (long long)tsr_corpus_count(c) - 1);
  st = tsr_mask_load(e->file, out, err);
  if (st)
    return st;
  if (tsr_mask_batch(*out) != 1 || tsr_mask_heads(*out) != e->heads_q ||
      tsr_mask_nq(*out) != e->nq || tsr_mask_nk(*out) != e->nk) {
    st = tsr_error_set(err, TSR_ERR_SHAPE,
                       "corpus mask '%s' is [%lld, %lld, %lld], manifest says [%lld, %lld, %lld]",
                       e->file, (long long)tsr_mask_heads(*out), (long long)tsr_mask_nq(*out),
                       (long long)tsr_mask_nk(*out), (long long)e->heads_q, (long long)e->nq,
                       (long long)e->nk);
    tsr_mask_destroy(*out);
    *out = NULL;
  }
  return st;
}

static tsr_status load_sizes(const char *path, int64_t want, int64_t sum, tsr_array *a,
                             tsr_error *err)
{
  int64_t i, s = 0;
  tsr_status st = tsr_npy_load(path, a, err);
  if (st)
    return st;
  if (a->dtype != TSR_DT_I64 || a->ndim != 1 || a->shape[0] != want) {
    tsr_npy_free(a);
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "cannot read block sizes '%s': expected int64 [%lld]", path,
                         (long long)want);
  }
  /* sum <= TSR_MAX_SEQ (tsr_corpus_open), so s never overflows. */
  for (i = 0; i < want; i++) {
    int64_t v = ((const int64_t *)a->data)[i];
    if (v < 1 || v > sum - s) {
      tsr_npy_free(a);
      return v < 1 ? tsr_error_set(err, TSR_ERR_SHAPE,
                                   "cannot read block sizes '%s': block %lld has size %lld, "
                                   "must be positive",
                                   path, (long long)i, (long long)v)
                   : tsr_error_set(err, TSR_ERR_SHAPE,
                                   "cannot read block sizes '%s': with block %lld of size %lld "
                                   "they sum to more than %lld tokens",
                                   path, (long long)i, (long long)v, (long long)sum);
    }
    s += v;
  }
  if (s != sum) {
    tsr_npy_free(a);
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "cannot read block sizes '%s': they sum to %lld, not %lld tokens", path,
                         (long long)s, (long long)sum);
  }
  return TSR_OK;
}

void tsr_corpus_problem(const tsr_corpus_entry *e, const tsr_geom *g, tsr_problem *p)
{
  memset(p, 0, sizeof *p);
  p->batch = 1;
  p->heads_q = e->heads_q;
  p->heads_kv = e->heads_kv;
  p->seq_q = e->seq_q;
  p->seq_k = e->seq_k;
  p->head_dim = e->head_dim;
  p->dtype = TSR_DT_BF16;
  p->layout = TSR_LAYOUT_BHSD;
  p->geom = g;
}

tsr_status tsr_corpus_load_geom(const tsr_corpus *c, int64_t i, tsr_geom **out, tsr_error *err)
{
  const tsr_corpus_entry *e = tsr_corpus_get(c, i);
  tsr_array qa, ka;
  tsr_status st;
  *out = NULL;
  if (!e)
    return tsr_error_set(err, TSR_ERR_INVALID, "corpus entry %lld out of range (0..%lld)",
                         (long long)i, (long long)tsr_corpus_count(c) - 1);
  if (!e->q_sizes)
    return tsr_geom_uniform(e->seq_q, e->seq_k, e->bq, e->bk, out, err);
  memset(&qa, 0, sizeof qa);
  memset(&ka, 0, sizeof ka);
  st = load_sizes(e->q_sizes, e->nq, e->seq_q, &qa, err);
  if (!st)
    st = load_sizes(e->k_sizes, e->nk, e->seq_k, &ka, err);
  if (!st)
    st = tsr_geom_variable(qa.data, e->nq, ka.data, e->nk, out, err);
  tsr_npy_free(&qa);
  tsr_npy_free(&ka);
  return st;
}

/* ---- Features ------------------------------------------------------------------------------ */

void tsr_corpus_plane_features(const uint8_t *plane, int64_t nq, int64_t nk,
                               tsr_corpus_features *f)
{
  double sum = 0, sum2 = 0, sel = 0, adj = 0, mean;
  int64_t i, j;
  memset(f, 0, sizeof *f);
  if (nq <= 0 || nk <= 0)
    return;
  for (i = 0; i < nq; i++) {
    int64_t row = 0;
    for (j = 0; j < nk; j++)
      if (plane[i * nk + j]) {
        row++;
        adj += j > 0 && plane[i * nk + j - 1];
      }
    sum += (double)row;
    sum2 += (double)row * (double)row;
    f->empty_rows += row == 0;
  }
  sel = sum;
  mean = sum / (double)nq;
  f->density = sel / ((double)nq * (double)nk);
  f->row_cv = mean > 0 ? sqrt(fmax(0.0, sum2 / (double)nq - mean * mean)) / mean : 0.0;
  f->contiguity = sel > 0 ? adj / sel : 0.0;
}

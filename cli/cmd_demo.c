/*
 * cmd_demo.c: `tessera demo`, the README's main job on bundled defaults.
 *
 * Builds a few deterministic masks in memory (band + sink on 128-token
 * blocks, random 25% on 128x64 blocks, per-row top-k by mean-pooled scores
 * on 64-token blocks as VSA picks them), and on each
 * runs the CPU reference, selects a plan through the lookup table embedded
 * in libtessera, plans the mask, runs the plan on the CPU and prints what
 * was chosen and how far
 * it is from the reference.  Each mask is also set against dense attention
 * (all blocks selected): how much of the work it keeps and how much the
 * output moves.  Cost at the defaults (2048 tokens, 4 heads, D 64): a few
 * seconds of float64 reference arithmetic, most of it the dense run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

enum { O_SEED, O_SEQ, O_COUNT };

static const cli_opt demo_opts[] = {
    [O_SEED] = {"--seed", "N", "seed of the demo's masks and tensors (default 1)"},
    [O_SEQ] = {"--seq", "S", "tokens per sequence, 256..16384 (default 2048)"},
    {NULL, NULL, NULL},
};

#define HQ 4
#define HKV 2
#define HEAD_DIM 64

/* splitmix64: deterministic across platforms, no hidden state. */
static uint64_t next(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
  return (double)(next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef enum { BAND_SINK, RANDOM25, TOPK64 } family;

static const struct {
  const char *name;
  int64_t bq, bk;
} families[] = {
    [BAND_SINK] = {"band+sink", 128, 128},
    [RANDOM25] = {"random 25%", 128, 64},
    [TOPK64] = {"top-k 25% by pooled scores", 64, 64},
};

/* One [HQ][nq][nk] plane per query head; heads differ (per-head masks). */
static void make_mask(family f, int64_t nq, int64_t nk, uint64_t *rng, const double *pooled,
                      uint8_t *bits)
{
  int64_t h, i, j;
  memset(bits, 0, (size_t)(HQ * nq * nk));
  for (h = 0; h < HQ; h++) {
    uint8_t *p = bits + h * nq * nk;
    for (i = 0; i < nq; i++) {
      if (f == BAND_SINK) {
        int64_t w = 1 + h % 2; /* half-width in blocks */
        for (j = 0; j < nk; j++)
          p[i * nk + j] = j == 0 || (j - i <= w && i - j <= w);
      } else if (f == RANDOM25) {
        for (j = 0; j < nk; j++)
          p[i * nk + j] = uniform(rng) < 0.25;
      } else {
        /* VSA style: keep the quarter of blocks with the highest mean-pooled
         * score q_i . k_j (ties to the lower index). */
        int64_t keep = (nk + 3) / 4, got, best;
        const double *sc = pooled + (h * nq + i) * nk;
        for (got = 0; got < keep; got++) {
          best = -1;
          for (j = 0; j < nk; j++)
            if (!p[i * nk + j] && (best < 0 || sc[j] > sc[best]))
              best = j;
          p[i * nk + best] = 1;
        }
      }
    }
  }
}

/* Random content plus a positional part (sin/cos pairs at periods from 64
 * to 4096 tokens), so that q_t . k_u peaks at u = t and decays with
 * distance, roughly as 1-D rotary embeddings make it: local masks then
 * approximate dense attention and random ones do not, which is the point
 * the demo shows.  `pos` 0 for values (pure content). */
static tsr_status make_tensor(int64_t h, int64_t s, double pos, uint64_t *rng, tsr_array *a,
                              tsr_error *err)
{
  int64_t i, t, d, n = h * s * HEAD_DIM;
  float *x = malloc((size_t)n * sizeof *x);
  memset(a, 0, sizeof *a);
  if (!x)
    return tsr_error_set(err, TSR_ERR_NOMEM, "demo: out of memory");
  for (i = 0; i < n; i++) { /* sum of uniforms: roughly normal, unit variance */
    t = (i / HEAD_DIM) % s;
    d = i % HEAD_DIM;
    x[i] = (float)((uniform(rng) + uniform(rng) + uniform(rng) - 1.5) * 2.0);
    if (pos != 0) {
      double w = 6.283185307179586 / (64.0 * pow(64.0, (double)(d / 2) / (HEAD_DIM / 2 - 1)));
      x[i] += (float)(pos * (d % 2 ? sin(w * (double)t) : cos(w * (double)t)));
    }
  }
  a->dtype = TSR_DT_F32;
  a->ndim = 3;
  a->shape[0] = h, a->shape[1] = s, a->shape[2] = HEAD_DIM;
  a->data = x;
  return TSR_OK;
}

/* Mean-pooled block scores [HQ][nq][nk] of q and k over a uniform
 * geometry (NULL when out of memory). */
static double *pooled_scores(const tsr_geom *g, const tsr_array *q, const tsr_array *k)
{
  int64_t nq = tsr_geom_nq(g), nk = tsr_geom_nk(g), S = tsr_geom_seq_q(g), h, i, j, t, d;
  double *pq = calloc((size_t)(HQ * nq * HEAD_DIM), sizeof *pq);
  double *pk = calloc((size_t)(HKV * nk * HEAD_DIM), sizeof *pk);
  double *sc = malloc((size_t)(HQ * nq * nk) * sizeof *sc);
  const float *qd = q->data, *kd = k->data;
  if (!pq || !pk || !sc) {
    free(pq), free(pk), free(sc);
    return NULL;
  }
  for (h = 0; h < HQ; h++)
    for (i = 0; i < nq; i++)
      for (t = tsr_geom_q_start(g, i); t < tsr_geom_q_start(g, i + 1); t++)
        for (d = 0; d < HEAD_DIM; d++)
          pq[(h * nq + i) * HEAD_DIM + d] += qd[(h * S + t) * HEAD_DIM + d];
  for (h = 0; h < HKV; h++)
    for (j = 0; j < nk; j++)
      for (t = tsr_geom_k_start(g, j); t < tsr_geom_k_start(g, j + 1); t++)
        for (d = 0; d < HEAD_DIM; d++)
          pk[(h * nk + j) * HEAD_DIM + d] += kd[(h * S + t) * HEAD_DIM + d];
  for (h = 0; h < HQ; h++)
    for (i = 0; i < nq; i++)
      for (j = 0; j < nk; j++) {
        double dot = 0;
        for (d = 0; d < HEAD_DIM; d++)
          dot += pq[(h * nq + i) * HEAD_DIM + d] * pk[((h / (HQ / HKV)) * nk + j) * HEAD_DIM + d];
        sc[(h * nq + i) * nk + j] = dot / (double)((tsr_geom_q_start(g, i + 1) - tsr_geom_q_start(g, i)) *
                                                   (tsr_geom_k_start(g, j + 1) - tsr_geom_k_start(g, j)));
      }
  free(pq);
  free(pk);
  return sc;
}

static const char *mapping_name(tsr_mapping m)
{
  static const char *const n[] = {"auto", "retain", "combine", "subdivide"};
  return (unsigned)m < 4 ? n[m] : "?";
}

static const char *tasks_name(tsr_tasks t)
{
  static const char *const n[] = {"auto", "row", "split", "pack"};
  return (unsigned)t < 4 ? n[t] : "?";
}

/* Plans the mask and runs the plan on the CPU; prints the choice and the
 * error against the reference output. */
static void plan_and_run(const tsr_geom *g, const tsr_mask *m, const tsr_array *q,
                         const tsr_array *k, const tsr_array *v, const tsr_array *ref)
{
  tsr_problem p;
  tsr_plan_opts o;
  tsr_plan *pl = NULL;
  tsr_plan_summary sum;
  tsr_array out;
  tsr_error err = {0};
  double t0;
  memset(&p, 0, sizeof p);
  memset(&out, 0, sizeof out);
  p.batch = 1, p.heads_q = HQ, p.heads_kv = HKV;
  p.seq_q = tsr_geom_seq_q(g), p.seq_k = tsr_geom_seq_k(g), p.head_dim = HEAD_DIM;
  p.dtype = TSR_DT_BF16, p.layout = TSR_LAYOUT_BHSD, p.geom = g;
  tsr_plan_opts_init(&o);
  t0 = now_ms();
  if (tsr_problem_check(&p, &err) == TSR_OK) {
    /* The plan comes from the lookup table embedded in libtessera (the
     * shipped H200 sweep); a miss falls back to the base plan. */
    tsr_selector *sel = NULL;
    tsr_features f;
    tsr_selection c;
    if (tsr_select_open(NULL, NULL, 0, &sel, &err) == TSR_OK && (t0 = now_ms()) > 0 &&
        tsr_features_compute(&p, m, 0, &f, &err) == TSR_OK &&
        tsr_select_plan(sel, &f, &c, &err) == TSR_OK) {
      o.tile_m = c.opts.tile_m, o.tile_n = c.opts.tile_n;
      o.mapping = c.opts.mapping, o.tasks = c.opts.tasks;
      printf("  selected in %.3f ms (features and lookup): %s\n", now_ms() - t0, c.reason);
    } else {
      printf("  selection: not available (%s)\n", err.text);
      tsr_error_clear(&err);
    }
    tsr_select_destroy(sel);
  }
  t0 = now_ms();
  if (tsr_problem_check(&p, &err) || tsr_plan_create(&p, m, &o, &pl, &err)) {
    printf("  plan: not available (%s)\n", err.text);
    return;
  }
  memset(&sum, 0, sizeof sum);
  tsr_plan_summarize(pl, &sum);
  printf("  plan (%.3f ms): tile %dx%d, mapping %s, tasks %s, %lld tiles in %lld tasks, "
         "wasted %.1f%%%s%s\n",
         now_ms() - t0, sum.tile_m, sum.tile_n, mapping_name(sum.mapping), tasks_name(sum.tasks),
         (long long)sum.tiles, (long long)sum.tasks_count, 100.0 * sum.wasted_fraction,
         sum.variant[0] ? ", variant " : "", sum.variant);
  t0 = now_ms();
  if (tsr_cpu_execute(pl, q, k, v, &out, NULL, &err))
    printf("  CPU plan executor: not available (%s)\n", err.text);
  else
    printf("  CPU plan executor: %.0f ms, max relative error vs reference %.2g\n", now_ms() - t0,
           tsr_ref_max_rel_error(&out, ref));
  tsr_npy_free(&out);
  tsr_plan_destroy(pl);
}

int cmd_demo(int argc, char **argv)
{
  const char *val[O_COUNT];
  int64_t seed = 1, S = 2048;
  uint64_t rng;
  tsr_array q, k, v, dense_out;
  tsr_geom *dense_g = NULL;
  tsr_mask *dense_m = NULL;
  tsr_error err = {0};
  tsr_context_opts co;
  tsr_context *ctx = NULL;
  uint8_t one[HQ] = {1, 1, 1, 1};
  double t0, dense_ms;
  int rc = CLI_USAGE, i;

  i = cli_parse("demo", "[--seed N] [--seq S]", demo_opts, val, argc, argv);
  if (i)
    return i > 0 ? CLI_OK : CLI_USAGE;
  if (val[O_SEED] && cli_parse_i64(val[O_SEED], &seed, 1)) {
    cli_errorf("demo", "invalid --seed '%s': expected a non-negative integer", val[O_SEED]);
    return CLI_USAGE;
  }
  if (val[O_SEQ] && (cli_parse_i64(val[O_SEQ], &S, 0) || S < 256 || S > 16384)) {
    cli_errorf("demo", "invalid --seq '%s': expected 256..16384", val[O_SEQ]);
    return CLI_USAGE;
  }
  memset(&q, 0, sizeof q), memset(&k, 0, sizeof k), memset(&v, 0, sizeof v);
  memset(&dense_out, 0, sizeof dense_out);

  printf("tessera demo: %d query heads over %d key/value heads, %lld tokens, head dim %d, seed %lld\n",
         HQ, HKV, (long long)S, HEAD_DIM, (long long)seed);
  tsr_context_opts_init(&co);
  if (tsr_context_create(&co, &ctx, &err) != TSR_OK) {
    printf("no GPU found: running the CPU path (%s)\n", err.text);
  } else {
    printf("GPU found; this demo still runs the CPU path only\n");
    tsr_context_destroy(ctx);
  }
  tsr_error_clear(&err);

  rng = (uint64_t)seed;
  if (make_tensor(HQ, S, 2.0, &rng, &q, &err) || make_tensor(HKV, S, 2.0, &rng, &k, &err) ||
      make_tensor(HKV, S, 0, &rng, &v, &err))
    goto fail;
  /* Dense attention: one block covering everything, selected. */
  if (tsr_geom_uniform(S, S, S, S, &dense_g, &err) ||
      tsr_mask_from_bytes(1, HQ, 1, 1, one, &dense_m, &err))
    goto fail;
  t0 = now_ms();
  if (tsr_ref_attention(dense_g, dense_m, &q, &k, &v, 0, &dense_out, NULL, &err))
    goto fail;
  dense_ms = now_ms() - t0;
  printf("dense reference (CPU, float64): %.0f ms\n", dense_ms);

  for (i = 0; i < (int)(sizeof families / sizeof families[0]); i++) {
    tsr_geom *g = NULL;
    tsr_mask *m = NULL;
    tsr_array ref;
    uint8_t *bits;
    double *pooled;
    int64_t nq, nk;
    double ms;
    memset(&ref, 0, sizeof ref);
    if (tsr_geom_uniform(S, S, families[i].bq, families[i].bk, &g, &err))
      goto fail;
    nq = tsr_geom_nq(g), nk = tsr_geom_nk(g);
    bits = malloc((size_t)(HQ * nq * nk));
    pooled = (family)i == TOPK64 ? pooled_scores(g, &q, &k) : NULL;
    if (!bits || ((family)i == TOPK64 && !pooled)) {
      free(bits);
      tsr_geom_destroy(g);
      tsr_error_set(&err, TSR_ERR_NOMEM, "demo: out of memory");
      goto fail;
    }
    make_mask((family)i, nq, nk, &rng, pooled, bits);
    free(pooled);
    if (tsr_mask_from_bytes(1, HQ, nq, nk, bits, &m, &err) == TSR_OK) {
      printf("\n%s: blocks %lldx%lld (%lld x %lld per head), density %.3f\n", families[i].name,
             (long long)families[i].bq, (long long)families[i].bk, (long long)nq, (long long)nk,
             tsr_mask_density(m));
      t0 = now_ms();
      if (tsr_ref_attention(g, m, &q, &k, &v, 0, &ref, NULL, &err) == TSR_OK) {
        ms = now_ms() - t0;
        printf("  reference: %.0f ms (%.2fx the dense reference's time); output differs from "
               "dense attention by %.3f (relative)\n",
               ms, ms / dense_ms, tsr_ref_max_rel_error(&ref, &dense_out));
        plan_and_run(g, m, &q, &k, &v, &ref);
      }
    }
    free(bits);
    tsr_npy_free(&ref);
    tsr_mask_destroy(m);
    tsr_geom_destroy(g);
    if (err.status != TSR_OK)
      goto fail;
  }
  rc = CLI_OK;
  goto done;
fail:
  cli_errorf("demo", "%s", err.text);
  rc = cli_status_exit(err.status);
done:
  tsr_npy_free(&q), tsr_npy_free(&k), tsr_npy_free(&v), tsr_npy_free(&dense_out);
  tsr_mask_destroy(dense_m);
  tsr_geom_destroy(dense_g);
  return rc;
}

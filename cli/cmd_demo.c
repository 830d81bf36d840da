/*
 * cmd_demo.c: `tessera demo`, the README's main job on bundled defaults.
 *
 * Generates the corpus preset "demo" (48 masks of a 2,304-token clip)
 * through the library, or reuses one in --corpus DIR, and takes one mask of
 * each sparse-attention family (several block geometries).  For each mask:
 * selects the plan through the context's lookup table (the one embedded in
 * libtessera), by the request path's tsr_context_select_features as
 * `tessera run` does (a host-only context when there is no GPU), builds
 * and verifies it, runs it on the GPU when a device context opens (else on
 * the CPU plan executor, said once), and
 * compares the output with the float64 CPU reference of the same mask and
 * with DENSE attention (how much the sparse output moves, how many FLOPs
 * it skips).  Ends with a table; exit 1 when a plan fails to verify or an
 * error exceeds the tolerance (1e-4 on the CPU, 1e-2 for bf16 on the GPU).
 * Cost on the CPU path: corpus generation (about a second), one dense
 * float64 reference per problem shape (about a second at 4 heads x 2,304
 * tokens x D 64), and per mask a sparse reference and a plan execution --
 * under 20 s on two cores.
 */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "bundle.h"
#include "tools.h"

enum { O_CORPUS, O_SEED, O_MASKS, O_GPU, O_CPU, O_DEVICE, O_BUNDLE, O_COUNT };

static const cli_opt demo_opts[] = {
    [O_CORPUS] = {"--corpus", "DIR", "reuse (or generate into) the demo corpus in DIR (default: a temporary folder)"},
    [O_SEED] = {"--seed", "N", "seed of the corpus and of the tensors (default 1)"},
    [O_MASKS] = {"--masks", "N", "masks to run, one per family, 1..8 (default 4)"},
    [O_GPU] = {"--gpu", NULL, "run on the GPU; fail (exit 2) when none can be used"},
    [O_CPU] = {"--cpu", NULL, "run the CPU plan executor even when a GPU is present"},
    [O_DEVICE] = {"--device", "N", "CUDA device ordinal (default 0)"},
    [O_BUNDLE] = {"--bundle", "DIR", "kernel bundle (default: $TESSERA_BUNDLE, else the build's bundle/ beside this tessera, else the installed one)"},
    {NULL, NULL, NULL},
};

#define TOL_CPU 1e-4 /* float32 executor vs float64 reference */
#define TOL_GPU 1e-2 /* bf16 inputs on the GPU vs float64 reference */
#define GPU_RUNS 3

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

/* Random content plus a positional part (sin/cos pairs at periods from 64
 * to 4096 tokens), so that q_t . k_u peaks at u = t and decays with
 * distance, roughly as rotary embeddings make it: masks that keep the
 * near blocks then approximate dense attention better than others.
 * `pos` 0 for values (pure content).  [h, s, d] float32. */
static tsr_status make_tensor(int64_t h, int64_t s, int64_t dim, double pos, uint64_t *rng,
                              tsr_array *a, tsr_error *err)
{
  int64_t i, t, d, n;
  float *x = NULL;
  memset(a, 0, sizeof *a);
  /* The sizes come from a manifest: a product past size_t is out of memory too. */
  if (!__builtin_mul_overflow(h, s, &n) && !__builtin_mul_overflow(n, dim, &n) &&
      (uint64_t)n <= SIZE_MAX / sizeof *x)
    x = malloc((size_t)n * sizeof *x);
  if (!x)
    return tsr_error_set(err, TSR_ERR_NOMEM,
                         "demo: cannot allocate a %lldx%lldx%lld float32 tensor: out of memory",
                         (long long)h, (long long)s, (long long)dim);
  for (i = 0; i < n; i++) { /* sum of uniforms: roughly normal, unit variance */
    t = (i / dim) % s;
    d = i % dim;
    x[i] = (float)((uniform(rng) + uniform(rng) + uniform(rng) - 1.5) * 2.0);
    if (pos != 0) {
      double w = 6.283185307179586 / (64.0 * pow(64.0, (double)(d / 2) / (double)(dim / 2 > 1 ? dim / 2 - 1 : 1)));
      x[i] += (float)(pos * (d % 2 ? sin(w * (double)t) : cos(w * (double)t)));
    }
  }
  a->dtype = TSR_DT_F32;
  a->ndim = 3;
  a->shape[0] = h, a->shape[1] = s, a->shape[2] = dim;
  a->data = x;
  return TSR_OK;
}

/* Tensors and the dense output of one problem shape, kept while the next
 * mask has the same shape (the demo corpus has one). */
typedef struct {
  int64_t hq, hkv, sq, sk, d;
  tsr_array q, k, v, dense;
  double dense_ms;
} shape_cache;

static void cache_free(shape_cache *c)
{
  tsr_npy_free(&c->q), tsr_npy_free(&c->k), tsr_npy_free(&c->v), tsr_npy_free(&c->dense);
  memset(c, 0, sizeof *c);
}

static tsr_status cache_get(shape_cache *c, const tsr_corpus_entry *e, uint64_t seed,
                            tsr_error *err)
{
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  uint8_t *one;
  uint64_t rng = seed;
  tsr_status s;
  double t0;
  if (c->q.data && c->hq == e->heads_q && c->hkv == e->heads_kv && c->sq == e->seq_q &&
      c->sk == e->seq_k && c->d == e->head_dim)
    return TSR_OK;
  cache_free(c);
  if ((s = make_tensor(e->heads_q, e->seq_q, e->head_dim, 2.0, &rng, &c->q, err)) ||
      (s = make_tensor(e->heads_kv, e->seq_k, e->head_dim, 2.0, &rng, &c->k, err)) ||
      (s = make_tensor(e->heads_kv, e->seq_k, e->head_dim, 0, &rng, &c->v, err)))
    goto out;
  /* Dense attention: one block covering everything, selected in every head. */
  if (!(one = malloc((size_t)e->heads_q))) {
    s = tsr_error_set(err, TSR_ERR_NOMEM, "demo: out of memory");
    goto out;
  }
  memset(one, 1, (size_t)e->heads_q);
  s = tsr_geom_uniform(e->seq_q, e->seq_k, e->seq_q, e->seq_k, &g, err);
  if (!s)
    s = tsr_mask_from_bytes(1, e->heads_q, 1, 1, one, &m, err);
  free(one);
  t0 = now_ms();
  if (!s)
    s = tsr_ref_attention(g, m, &c->q, &c->k, &c->v, 0, &c->dense, NULL, err);
  c->dense_ms = now_ms() - t0;
  c->hq = e->heads_q, c->hkv = e->heads_kv, c->sq = e->seq_q, c->sk = e->seq_k;
  c->d = e->head_dim;
  if (!s)
    printf("dense attention (float64 CPU reference, %lld heads, %lld x %lld tokens, D %lld): "
           "%.0f ms\n",
           (long long)c->hq, (long long)c->sq, (long long)c->sk, (long long)c->d, c->dense_ms);
out:
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  if (s)
    cache_free(c);
  return s;
}

/* One line of the final table (one mask). */
typedef struct {
  char name[48], family[16], geom[24], tile[16], source[24];
  double density, wasted, skipped, ms, err, vs_dense;
  const char *mapping, *tasks;
  int verified, ok;
} demo_line;

/* Selects, plans, verifies and runs one corpus mask; fills r.  Returns a
 * status only for errors that stop the demo (input or environment); a
 * failed verification or a large error is recorded in r. */
static tsr_status run_mask(const tsr_corpus *cp, int64_t idx, tsr_context *ctx, int gpu,
                           shape_cache *cache, uint64_t seed, demo_line *r, tsr_error *err)
{
  const tsr_corpus_entry *e = tsr_corpus_get(cp, idx);
  const char *base = strrchr(e->file, '/') ? strrchr(e->file, '/') + 1 : e->file;
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_plan *pl = NULL;
  tsr_problem p;
  tsr_features f;
  tsr_selection c;
  tsr_plan_summary sum;
  tsr_array ref, out;
  tsr_error verr = {0};
  tsr_status s;
  double t0, best_fill = 0, tol = gpu ? TOL_GPU : TOL_CPU, total;
  int i, best = 0;

  memset(&ref, 0, sizeof ref), memset(&out, 0, sizeof out), memset(&p, 0, sizeof p);
  snprintf(r->name, sizeof r->name, "#%lld s%lld l%lld h%lld", (long long)idx, (long long)e->step,
           (long long)e->layer, (long long)e->head_first);
  snprintf(r->family, sizeof r->family, "%s", e->family);
  if (e->bq)
    snprintf(r->geom, sizeof r->geom, "%lldx%lld", (long long)e->bq, (long long)e->bk);
  else
    snprintf(r->geom, sizeof r->geom, "~%.0fx%.0f", (double)e->seq_q / (double)e->nq,
             (double)e->seq_k / (double)e->nk); /* variable: the mean block */
  r->mapping = r->tasks = "-";
  r->err = r->vs_dense = INFINITY;

  if ((s = cache_get(cache, e, seed, err)) || (s = tsr_corpus_load_geom(cp, idx, &g, err)) ||
      (s = tsr_corpus_load_mask(cp, idx, &m, err)))
    goto out;
  tsr_corpus_problem(e, g, &p);
  p.batch = tsr_mask_batch(m);
  if ((s = tsr_problem_check(&p, err)))
    goto out;
  r->density = tsr_mask_density(m);
  printf("\nmask %s (%s): %s, %s blocks (%lld x %lld), %lld heads, %lld tokens, block density %.3f\n",
         r->name, base, e->family, e->bq ? "uniform" : "variable", (long long)e->nq,
         (long long)e->nk, (long long)e->heads_q, (long long)e->seq_q, r->density);

  /* Selection: features, then the context's lookup table, its row checked
   * against the bundle (or the automatic planner on a miss). */
  t0 = now_ms();
  if ((s = tsr_features_compute(&p, m, 0, &f, err)) ||
      (s = tsr_context_select_features(ctx, &f, NULL, &c, err)))
    goto out;
  for (i = 0; i < TSR_FEATURE_TILES; i++)
    if (f.fill[i] > best_fill)
      best_fill = f.fill[i], best = i;
  {
    int tm, tn;
    tsr_features_tile(best, &tm, &tn);
    printf("  features: density %.3f, row spread %.2f, empty rows %.3f, best tile fill %.2f "
           "(%dx%d), %.2f rows per SM\n",
           f.density, f.row_cv, f.empty_rows, best_fill, tm, tn, f.rows_per_sm);
  }
  if (c.from_table) {
    printf("  selected (%.2f ms): table row %lld, level %d: %s\n", now_ms() - t0,
           (long long)c.row_id, c.level, c.reason);
    snprintf(r->source, sizeof r->source, "table #%lld L%d", (long long)c.row_id, c.level);
  } else {
    printf("  selected (%.2f ms): fallback: the automatic planner (%s)\n", now_ms() - t0,
           c.reason);
    snprintf(r->source, sizeof r->source, "automatic");
  }

  /* Plan and verification. */
  t0 = now_ms();
  if ((s = tsr_plan_create(&p, m, &c.opts, &pl, err)))
    goto out;
  tsr_plan_summarize(pl, &sum);
  total = (double)p.batch * (double)p.heads_q * (double)p.seq_q * (double)p.seq_k;
  r->wasted = sum.wasted_fraction;
  r->skipped = total > 0 ? 1.0 - sum.computed_pairs / total : 0;
  r->mapping = tsr_plan_mapping_name(sum.mapping), r->tasks = tsr_plan_tasks_name(sum.tasks);
  snprintf(r->tile, sizeof r->tile, "%dx%d", sum.tile_m, sum.tile_n);
  cli_test_damage_plan(pl);
  r->verified = tsr_plan_verify(pl, m, &verr) == TSR_OK;
  printf("  plan (%.2f ms): tile %s, mapping %s, tasks %s: %lld tiles in %lld tasks, wasted "
         "%.1f%%; verify: %s\n",
         now_ms() - t0, r->tile, r->mapping, r->tasks, (long long)sum.tiles,
         (long long)sum.tasks_count, 100.0 * sum.wasted_fraction,
         r->verified ? "ok" : verr.text);

  /* The float64 reference of this mask. */
  t0 = now_ms();
  if ((s = tsr_ref_attention(g, m, &cache->q, &cache->k, &cache->v, 0, &ref, NULL, err)))
    goto out;
  t0 = now_ms() - t0;
  r->vs_dense = tsr_ref_max_rel_error(&ref, &cache->dense);
  printf("  reference (CPU, float64): %.0f ms, %.2fx the dense reference's time\n", t0,
         t0 / (cache->dense_ms > 0 ? cache->dense_ms : 1));

  if (!r->verified) {
    r->ok = 0;
    goto out; /* an unverified plan's indices are not trusted: do not run it */
  }
  if (gpu) {
    double times[GPU_RUNS], tmp;
    int j, n;
    /* The first run loads the kernel and uploads the plan; time the others. */
    for (n = 0; n <= GPU_RUNS; n++) {
      tsr_npy_free(&out);
      t0 = now_ms();
      if ((s = tsr_gpu_run_arrays(ctx, pl, &cache->q, &cache->k, &cache->v, &out, NULL, err)))
        goto out;
      if (n)
        times[n - 1] = now_ms() - t0;
    }
    for (i = 1; i < GPU_RUNS; i++) /* insertion sort for the median */
      for (j = i; j > 0 && times[j] < times[j - 1]; j--)
        tmp = times[j], times[j] = times[j - 1], times[j - 1] = tmp;
    r->ms = times[GPU_RUNS / 2];
    tsr_plan_summarize(pl, &sum);
    printf("  GPU (%s): %.3f ms median of %d runs (host to host: bf16 conversion, copies, "
           "launch, wait)\n",
           sum.variant[0] ? sum.variant : "kernel", r->ms, GPU_RUNS);
  } else {
    t0 = now_ms();
    if ((s = tsr_cpu_execute(pl, &cache->q, &cache->k, &cache->v, &out, NULL, err)))
      goto out;
    r->ms = now_ms() - t0;
    printf("  CPU plan executor: %.0f ms\n", r->ms);
  }
  cli_test_damage_output(&out);
  r->err = tsr_ref_max_rel_error(&out, &ref);
  r->ok = r->err <= tol;
  printf("  vs reference: max relative error %.2g (tolerance %.0e)%s\n", r->err, tol,
         r->ok ? "" : "  <-- FAIL");
  printf("  vs dense attention: output differs by %.3f (relative), %.1f%% of dense FLOPs "
         "skipped\n",
         r->vs_dense, 100.0 * r->skipped);
out:
  tsr_npy_free(&ref), tsr_npy_free(&out);
  tsr_plan_destroy(pl);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  return s;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* Opens the demo corpus in dir: generated there when dir is new or empty,
 * reused when it holds that complete corpus; anything else is refused by
 * tsr_corpus_generate (named, left as it is). */
static tsr_status open_corpus(const char *dir, uint64_t seed, tsr_corpus **out, tsr_error *err)
{
  tsr_corpus_gen_opts go;
  int64_t n = 0;
  double t0;
  tsr_status s;
  tsr_corpus_gen_opts_init(&go);
  go.preset = "demo", go.out_dir = dir, go.seed = seed, go.jobs = 2;
  t0 = now_ms();
  if ((s = tsr_corpus_generate(&go, &n, err)) || (s = tsr_corpus_open(dir, out, err)))
    return s;
  if (n == 0)
    printf("corpus: reusing '%s' (preset demo, seed %llu, %lld masks)\n", dir,
           (unsigned long long)seed, (long long)tsr_corpus_count(*out));
  else
    printf("corpus: generated preset demo (seed %llu) in '%s': %lld masks in %.0f ms\n",
           (unsigned long long)seed, dir, (long long)n, now_ms() - t0);
  return TSR_OK;
}

/* The families in the order the demo takes them: the first four cover
 * uniform 128x128 and 128x64 blocks and two variable geometries (48 and 8
 * blocks a side) at a cost the CPU path bears. */
static const char *const family_order[] = {"svg", "vsa", "sparge", "sta",
                                           "jenga", "xattn", "radial", "svdit"};
#define MAX_MASKS ((int)(sizeof family_order / sizeof family_order[0]))

/* For each family in family_order, its sparsest entry (the cheapest to run
 * on the CPU); up to `want`.  Returns the count. */
static int pick_masks(const tsr_corpus *cp, int want, int64_t *idx)
{
  int n = 0, k;
  int64_t i, count = tsr_corpus_count(cp);
  for (k = 0; k < MAX_MASKS && n < want; k++) {
    int64_t best = -1;
    for (i = 0; i < count; i++) {
      const tsr_corpus_entry *e = tsr_corpus_get(cp, i);
      if (!strcmp(e->family, family_order[k]) &&
          (best < 0 || e->density < tsr_corpus_get(cp, best)->density))
        best = i;
    }
    if (best >= 0)
      idx[n++] = best;
  }
  return n;
}

/* The bundle of the build folder this tessera runs from (<dir>/bundle
 * beside the executable), so that a build folder carried to a GPU machine
 * runs as is; NULL when there is none. */
static const char *build_bundle(char *buf, size_t size)
{
  static const char reg[] = "bundle/registry.json";
  ssize_t n = readlink("/proc/self/exe", buf, size);
  char *slash;
  struct stat st;
  if (n <= 0 || (size_t)n + sizeof reg > size) /* room for the file name after the folder */
    return NULL;
  buf[n] = '\0';
  if (!(slash = strrchr(buf, '/')))
    return NULL;
  memcpy(slash + 1, reg, sizeof reg);
  if (stat(buf, &st) != 0)
    return NULL;
  slash[1 + strlen("bundle")] = '\0';
  return buf;
}

int cmd_demo(int argc, char **argv)
{
  const char *val[O_COUNT];
  int64_t seed = 1, nmasks = 4, device = 0, idx[8];
  char tmpl[4096], exe[4096], *dir = NULL;
  tsr_corpus *cp = NULL;
  const tsr_selector *sel;
  tsr_context *ctx = NULL;
  tsr_context_opts co;
  tsr_error err = {0};
  shape_cache cache;
  demo_line lines[MAX_MASKS];
  int rc = CLI_USAGE, i, n = 0, all_verified = 1, all_within = 1, gpu = 0;
  double t_start = now_ms();

  i = cli_parse("demo", "[--corpus DIR] [--seed N] [--masks N] [--gpu | --cpu] [--device N] [--bundle DIR]",
                demo_opts, val, argc, argv);
  if (i)
    return i > 0 ? CLI_OK : CLI_USAGE;
  if (val[O_SEED] && cli_parse_i64(val[O_SEED], &seed, 1)) {
    cli_errorf("demo", "invalid --seed '%s': expected a non-negative integer", val[O_SEED]);
    return CLI_USAGE;
  }
  if (val[O_MASKS] && (cli_parse_i64(val[O_MASKS], &nmasks, 0) || nmasks > MAX_MASKS)) {
    cli_errorf("demo", "invalid --masks '%s': expected 1..%d", val[O_MASKS], MAX_MASKS);
    return CLI_USAGE;
  }
  if (val[O_DEVICE] && (cli_parse_i64(val[O_DEVICE], &device, 1) || device > 1024)) {
    cli_errorf("demo", "invalid --device '%s': expected a device ordinal 0..1024", val[O_DEVICE]);
    return CLI_USAGE;
  }
  if (val[O_GPU] && val[O_CPU]) {
    cli_errorf("demo", "--gpu and --cpu exclude each other");
    return CLI_USAGE;
  }
  if ((val[O_DEVICE] || val[O_BUNDLE]) && val[O_CPU]) {
    cli_errorf("demo", "--device and --bundle need the GPU path (drop --cpu)");
    return CLI_USAGE;
  }
  memset(&cache, 0, sizeof cache);
  memset(lines, 0, sizeof lines);

  /* The path: the GPU when a context opens (unless --cpu).  Either way a
   * context selects the plans: without a device, a host-only one (the
   * bundle and the lookup table, no driver). */
  tsr_context_opts_init(&co);
  co.device = (int)device;
  co.bundle_dir = tsri_bundle_dir(val[O_BUNDLE], build_bundle(exe, sizeof exe));
  if (!val[O_CPU]) {
    if (tsr_context_create(&co, &ctx, &err) != TSR_OK) {
      ctx = NULL;
      if (val[O_GPU]) {
        cli_errorf("demo", "--gpu: no usable GPU: %s", err.text);
        return CLI_USAGE;
      }
      printf("no GPU found (%s): running the CPU plan executor\n", err.text);
      tsr_error_clear(&err);
    } else {
      gpu = 1;
      printf("GPU found (device %lld, bundle %s): running the plans on the GPU (bf16)\n",
             (long long)device, co.bundle_dir);
    }
  } else {
    printf("--cpu: running the CPU plan executor\n");
  }
  if (!ctx) {
    co.device = TSR_CONTEXT_NO_DEVICE;
    if (tsr_context_create(&co, &ctx, &err) != TSR_OK)
      goto fail;
  }

  if (val[O_CORPUS]) {
    dir = (char *)val[O_CORPUS];
  } else {
    const char *t = getenv("TMPDIR");
    snprintf(tmpl, sizeof tmpl, "%s/tessera-demo-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpl)) {
      tsr_error_set(&err, TSR_ERR_IO, "cannot create a temporary folder '%s': %s", tmpl,
                    strerror(errno));
      goto fail;
    }
    dir = tmpl;
  }
  if (open_corpus(dir, (uint64_t)seed, &cp, &err))
    goto fail;
  sel = tsr_context_selector(ctx);
  printf("lookup table: embedded default database, GPU '%s', %lld rows\n",
         tsr_select_gpu(sel)[0] ? tsr_select_gpu(sel) : "(none)", (long long)tsr_select_rows(sel));
  n = pick_masks(cp, (int)nmasks, idx);
  printf("masks: %d of %lld (the sparsest of each family)\n", n, (long long)tsr_corpus_count(cp));

  for (i = 0; i < n; i++) {
    if (run_mask(cp, idx[i], ctx, gpu, &cache, (uint64_t)seed, &lines[i], &err))
      goto fail;
    all_verified = all_verified && lines[i].verified;
    all_within = all_within && lines[i].ok;
  }

  printf("\n%-18s %-7s %-11s %7s %-8s %-9s %-5s %-14s %7s %8s %9s %9s %8s\n", "mask", "family",
         "blocks", "density", "tile", "mapping", "tasks", "source", "wasted", "skipped",
         gpu ? "gpu ms" : "cpu ms", "err/ref", "vs dense");
  for (i = 0; i < n; i++) {
    demo_line *r = &lines[i];
    printf("%-18s %-7s %-11s %7.3f %-8s %-9s %-5s %-14s %6.1f%% %7.1f%% %9.*f %9.2g %8.3f%s\n",
           r->name, r->family, r->geom, r->density, r->tile, r->mapping, r->tasks, r->source,
           100.0 * r->wasted, 100.0 * r->skipped, gpu ? 3 : 1, r->ms, r->err, r->vs_dense,
           !r->verified ? "  NOT VERIFIED" : r->ok ? "" : "  TOO FAR");
  }
  printf("\n%s: %d masks on the %s path, every plan verified: %s, every error within %.0e: %s "
         "(%.1f s)\n",
         all_verified && all_within ? "ok" : "FAILED", n, gpu ? "GPU" : "CPU",
         all_verified ? "yes" : "no", gpu ? TOL_GPU : TOL_CPU, all_within ? "yes" : "no",
         (now_ms() - t_start) / 1e3);
  rc = all_verified && all_within ? CLI_OK : CLI_FAIL;
  goto done;
fail:
  cli_errorf("demo", "%s", err.text);
  rc = cli_status_exit(err.status) == CLI_FAIL ? CLI_FAIL : CLI_USAGE;
done:
  cache_free(&cache);
  tsr_corpus_close(cp);
  tsr_context_destroy(ctx);
  if (dir && !val[O_CORPUS])
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}

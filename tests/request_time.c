/*
 * request_time.c: where a host-planned request's time goes, phase by
 * phase, for corpus masks (notes/varplan.md).  Not a test: a timing driver
 * built with the checks (check_PROGRAMS) and run by hand or by the device
 * script.  Without a GPU it uses a host-only context (TSR_CONTEXT_NO_DEVICE)
 * and times the host phases only; with one it also times the plan upload,
 * the device mask's download and a GPU-planned step (tsr_gpuplan_plan, the
 * planning kernels alone) for the same geometry.
 *
 *   request_time CORPUS_DIR ENTRY_INDEX... [--reps N]   (index in the manifest)
 *
 * Phases (median of N repetitions, microseconds):
 *   geom      tsr_geom_variable from the block sizes (the Python path makes
 *             one a request)
 *   mask      tsr_mask_from_bytes (a copy of the mask bytes)
 *   features  tsr_features_compute
 *   select    tsr_context_select (features + table lookup)
 *   plan1     tsr_plan_create with the selected options (first plan)
 *   replan    tsr_plan_update into the same plan (buffers warm)
 *   destroy   tsr_plan_destroy
 *   upload    tsr_gpu_upload of a fresh plan (device only; allocates)
 *   reupload  tsr_gpu_upload after tsr_plan_update (device only)
 *   gpuplan   tsr_gpuplan_plan + synchronise (device only, variable
 *             geometries need the GPU planner to accept them)
 * Cost: a few seconds of CPU a mask.
 */
#include "cuda_impl.h"
#include "plan_impl.h"
#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return v[n / 2];
}

#define DIE(...)                         \
  do {                                   \
    fprintf(stderr, "request_time: ");   \
    fprintf(stderr, __VA_ARGS__);        \
    fprintf(stderr, "\n");               \
    exit(2);                             \
  } while (0)

int main(int argc, char **argv)
{
  tsr_context_opts co;
  tsr_context *ctx = NULL;
  tsr_corpus *c = NULL;
  tsr_error err;
  int reps = 20, a, has_dev;
  const char *dir = NULL;

  tsr_error_clear(&err);
  for (a = 1; a < argc; a++)
    if (!strcmp(argv[a], "--reps") && a + 1 < argc) reps = atoi(argv[++a]);
  if (reps < 1 || reps > 10000) DIE("--reps must be 1 to 10000");
  if (argc < 3) DIE("usage: request_time CORPUS_DIR ENTRY_ID... [--reps N]");
  dir = argv[1];
  tsr_context_opts_init(&co);
  co.device = 0;
  has_dev = tsr_context_create(&co, &ctx, &err) == TSR_OK;
  if (!has_dev) {
    tsr_error_clear(&err);
    co.device = TSR_CONTEXT_NO_DEVICE;
    if (tsr_context_create(&co, &ctx, &err)) DIE("%s", err.text);
  }
  if (tsr_corpus_open(dir, &c, &err)) DIE("%s", err.text);
  printf("request_time: %s context, %d repetitions, medians in us\n", has_dev ? "device" : "host-only", reps);
  printf("%-34s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "entry", "geom", "mask", "features", "select",
         "plan1", "replan", "destroy", "upload", "reupload", "gpuplan", "tiles");
  for (a = 2; a < argc; a++) {
    const tsr_corpus_entry *e;
    tsr_geom *g = NULL, *g2 = NULL;
    tsr_mask *m = NULL, *m2 = NULL;
    tsr_problem p;
    tsr_selection sel;
    tsr_plan *pl = NULL;
    tsr_plan_summary s;
    tsr_features f;
    int64_t *qs, *ks, nq, nk, i, id;
    const char *name;
    double *t[10], med[10];
    int k, r;
    if (!strcmp(argv[a], "--reps")) {
      a++;
      continue;
    }
    id = atoll(argv[a]);
    i = id;
    if (!(e = tsr_corpus_get(c, i))) DIE("no entry %lld in %s", (long long)id, dir);
    name = strrchr(e->file, '/') ? strrchr(e->file, '/') + 1 : e->file;
    if (tsr_corpus_load_geom(c, i, &g, &err) || tsr_corpus_load_mask(c, i, &m, &err)) DIE("%s", err.text);
    nq = tsr_geom_nq(g);
    nk = tsr_geom_nk(g);
    qs = malloc((size_t)nq * sizeof *qs);
    ks = malloc((size_t)nk * sizeof *ks);
    for (k = 0; k < 10; k++) t[k] = calloc((size_t)reps, sizeof(double));
    if (!qs || !ks || !t[9]) DIE("out of memory");
    for (i = 0; i < nq; i++) qs[i] = tsr_geom_q_start(g, i + 1) - tsr_geom_q_start(g, i);
    for (i = 0; i < nk; i++) ks[i] = tsr_geom_k_start(g, i + 1) - tsr_geom_k_start(g, i);
    tsr_corpus_problem(e, g, &p);
    for (r = 0; r < reps; r++) {
      double t0, t1;
      t0 = now_us();
      if (tsr_geom_variable(qs, nq, ks, nk, &g2, &err)) DIE("%s", err.text);
      t1 = now_us();
      t[0][r] = t1 - t0;
      tsr_geom_destroy(g2);
      t0 = now_us();
      if (tsr_mask_from_bytes(tsr_mask_batch(m), tsr_mask_heads(m), nq, nk, tsr_mask_plane(m, 0, 0), &m2, &err))
        DIE("%s", err.text);
      t[1][r] = now_us() - t0;
      tsr_mask_destroy(m2);
      t0 = now_us();
      if (tsr_features_compute(&p, m, tsri_context_num_sms(ctx), &f, &err)) DIE("%s", err.text);
      t[2][r] = now_us() - t0;
      t0 = now_us();
      if (tsr_context_select(ctx, &p, m, NULL, &sel, &err)) DIE("%s", err.text);
      t[3][r] = now_us() - t0;
      t0 = now_us();
      if (tsr_plan_create(&p, m, &sel.opts, &pl, &err)) DIE("%s", err.text);
      t[4][r] = now_us() - t0;
      t0 = now_us();
      if (tsr_plan_update(pl, &p, m, &sel.opts, &err)) DIE("%s", err.text);
      t[5][r] = now_us() - t0;
      t[7][r] = t[8][r] = t[9][r] = 0;
      if (has_dev) {
        tsr_plan *p2 = NULL;
        if (tsr_plan_create(&p, m, &sel.opts, &p2, &err)) DIE("%s", err.text);
        t0 = now_us();
        if (tsr_gpu_upload(ctx, p2, &err)) DIE("%s", err.text);
        t[7][r] = now_us() - t0;
        if (tsr_plan_update(p2, &p, m, &sel.opts, &err)) DIE("%s", err.text);
        t0 = now_us();
        if (tsr_gpu_upload(ctx, p2, &err)) DIE("%s", err.text);
        t[8][r] = now_us() - t0;
        tsr_plan_destroy(p2);
      }
      tsr_plan_summarize(pl, &s);
      t0 = now_us();
      tsr_plan_destroy(pl);
      t[6][r] = now_us() - t0;
    }
    if (has_dev) {
      /* The GPU planner for the selection's tile and mapping, row tasks. */
      tsr_plan_opts o = sel.opts;
      tsr_gpuplan_caps caps;
      tsr_gpuplan *gp = NULL;
      CUdeviceptr dm = 0;
      const tsr_cu *cu = tsri_context_cu(ctx);
      size_t bytes = (size_t)(tsr_mask_batch(m) * tsr_mask_heads(m) * nq * nk);
      o.tasks = TSR_TASKS_ROW;
      o.split_tiles = 0;
      tsr_gpuplan_caps_init(&caps);
      caps.mask_batch = tsr_mask_batch(m);
      caps.mask_heads = tsr_mask_heads(m);
      if (tsr_gpuplan_create(ctx, &p, &o, &caps, &gp, &err)) {
        printf("  gpuplan: %s\n", err.text);
        tsr_error_clear(&err);
      } else if (cu->cuMemAlloc(&dm, bytes) == CUDA_SUCCESS &&
                 cu->cuMemcpyHtoD(dm, tsr_mask_plane(m, 0, 0), bytes) == CUDA_SUCCESS) {
        for (r = 0; r < reps; r++) {
          double t0 = now_us();
          if (tsr_gpuplan_plan(gp, dm, TSR_MASK_BYTES, NULL, &err)) DIE("%s", err.text);
          cu->cuCtxSynchronize();
          t[9][r] = now_us() - t0;
        }
      }
      if (dm) cu->cuMemFree(dm);
      tsr_gpuplan_destroy(gp);
    }
    for (k = 0; k < 10; k++) med[k] = median(t[k], reps);
    printf("%-34s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8lld\n", name, med[0], med[1],
           med[2], med[3], med[4], med[5], med[6], med[7], med[8], med[9], (long long)s.tiles);
    printf("  %lldx%lld blocks, %lld heads, selected %dx%d %s/%s: %s\n", (long long)nq, (long long)nk,
           (long long)e->heads_q, sel.opts.tile_m, sel.opts.tile_n, tsr_plan_mapping_name(sel.opts.mapping),
           tsr_plan_tasks_name(sel.opts.tasks), sel.reason);
    for (k = 0; k < 10; k++) free(t[k]);
    free(qs);
    free(ks);
    tsr_mask_destroy(m);
    tsr_geom_destroy(g);
  }
  tsr_corpus_close(c);
  tsr_context_destroy(ctx);
  return 0;
}

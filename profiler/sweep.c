/*
 * sweep.c: `tessera-profile sweep`, timing every eligible candidate plan of
 * every mask of a corpus split on the GPU it runs on.
 *
 * Candidates per mask: tile shapes {64,128}x{64,128} that have a variant in
 * the bundle for the problem's dtype and head dim (filtered by --variants;
 * with and without membership code),
 * the mappings that apply to the geometry (retain, combine, subdivide), and
 * task layouts row / split / pack.  Each candidate is planned on the host,
 * uploaded, launched `warmup` times, then timed `repeats` times with CUDA
 * events around single launches; q/k/v rotate through enough copies that
 * each timed launch reads inputs not left in L2 by the previous one.  The
 * samples and their median go to the database in one transaction per
 * candidate, so an interrupted sweep resumes where it stopped and two sweeps
 * on one file never duplicate a row; a candidate whose variant build (hash)
 * changed is timed again because its variant row is new.
 *
 * Cost: dominated by the GPU: (warmup + repeats) launches per candidate,
 * about 12 candidates a mask, plus planning (milliseconds).
 */
#include <dlfcn.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "context_impl.h"
#include "plan_impl.h"
#include "profile.h"
#include "sweep.h"
#include "variant.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

typedef struct {
  const char *corpus, *db, *variants, *split, *bundle;
  int device, repeats, warmup;
  double budget;
  int64_t limit;
} sweep_opts;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t fnv1a(const uint8_t *p, size_t n, uint64_t h)
{
  size_t i;
  for (i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* A bar redrawn in place on a terminal; in a log, a line every 10%. */
static void progress(int64_t done, int64_t total, int64_t timed, double elapsed, int tty)
{
  char bar[33];
  int i, fill = total ? (int)(32 * done / total) : 32;
  if (!tty && total && done != total && (10 * done / total) == (10 * (done - 1) / total))
    return;
  double left = timed ? elapsed / (double)timed * (double)(total - done) : 0;
  for (i = 0; i < 32; i++)
    bar[i] = i < fill ? '#' : '.';
  bar[32] = '\0';
  fprintf(stderr, "%s[%s] %lld/%lld candidates, %.0f s elapsed, about %.0f s left%s",
          tty ? "\r" : "", bar, (long long)done, (long long)total, elapsed, left,
          tty ? "   " : "\n");
  fflush(stderr);
}

/* Device buffers for q, k, v (several rotating copies) and o. */
typedef struct {
  CUdeviceptr *q, *k, *v, o;
  int copies;
} buffers;

static void buffers_free(const tsr_cu *cu, buffers *b)
{
  int i;
  for (i = 0; i < b->copies; i++) {
    if (b->q && b->q[i])
      cu->cuMemFree(b->q[i]);
    if (b->k && b->k[i])
      cu->cuMemFree(b->k[i]);
    if (b->v && b->v[i])
      cu->cuMemFree(b->v[i]);
  }
  if (b->o)
    cu->cuMemFree(b->o);
  free(b->q);
  free(b->k);
  free(b->v);
  memset(b, 0, sizeof *b);
}

/* Random bf16 in [-1, 1): never zeros, so a kernel that skips work shows. */
static void fill_random(uint16_t *h, size_t n, uint64_t *state)
{
  size_t i;
  for (i = 0; i < n; i++) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = tsr_float_to_bf16((float)((double)(*state >> 11) / 9007199254740992.0 * 2 - 1));
  }
}

static tsr_status buffers_make(const tsr_cu *cu, const tsr_problem *p, int64_t l2, buffers *b,
                               uint64_t seed, tsr_error *err)
{
  size_t nq = (size_t)(p->batch * p->heads_q * p->seq_q * p->head_dim);
  size_t nk = (size_t)(p->batch * p->heads_kv * p->seq_k * p->head_dim);
  size_t per = 2 * (nq + 2 * nk);
  uint16_t *h = malloc(2 * (nq > nk ? nq : nk));
  tsr_status st = TSR_OK;
  int i;
  memset(b, 0, sizeof *b);
  /* Enough copies that the inputs of one launch are out of L2 at the next. */
  b->copies = (int)((2 * (size_t)l2 + per - 1) / per) + 1;
  if (b->copies < 2)
    b->copies = 2;
  if (b->copies > 16)
    b->copies = 16;
  b->q = calloc((size_t)b->copies, sizeof *b->q);
  b->k = calloc((size_t)b->copies, sizeof *b->k);
  b->v = calloc((size_t)b->copies, sizeof *b->v);
  if (!h || !b->q || !b->k || !b->v) {
    free(h);
    return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory for sweep inputs");
  }
  for (i = 0; i < b->copies && st == TSR_OK; i++) {
    st = tsr_cu_check(cu, cu->cuMemAlloc(&b->q[i], 2 * nq), "cuMemAlloc", err);
    if (st == TSR_OK)
      st = tsr_cu_check(cu, cu->cuMemAlloc(&b->k[i], 2 * nk), "cuMemAlloc", err);
    if (st == TSR_OK)
      st = tsr_cu_check(cu, cu->cuMemAlloc(&b->v[i], 2 * nk), "cuMemAlloc", err);
    if (st == TSR_OK) {
      fill_random(h, nq, &seed);
      st = tsr_cu_check(cu, cu->cuMemcpyHtoD(b->q[i], h, 2 * nq), "cuMemcpyHtoD", err);
    }
    if (st == TSR_OK) {
      fill_random(h, nk, &seed);
      st = tsr_cu_check(cu, cu->cuMemcpyHtoD(b->k[i], h, 2 * nk), "cuMemcpyHtoD", err);
    }
    if (st == TSR_OK) {
      fill_random(h, nk, &seed);
      st = tsr_cu_check(cu, cu->cuMemcpyHtoD(b->v[i], h, 2 * nk), "cuMemcpyHtoD", err);
    }
  }
  if (st == TSR_OK)
    st = tsr_cu_check(cu, cu->cuMemAlloc(&b->o, 2 * nq), "cuMemAlloc", err);
  free(h);
  if (st != TSR_OK)
    buffers_free(cu, b);
  return st;
}

/* BHSD strides in elements. */
static void strides(int64_t h, int64_t s, int64_t d, int64_t *st)
{
  st[3] = 1;
  st[2] = d;
  st[1] = s * d;
  st[0] = h * s * d;
}

/* Times one uploaded plan: warm-up, then `repeats` event-timed launches. */
static tsr_status time_plan(tsr_context *ctx, const tsr_cu *cu, tsr_plan *pl,
                            const tsr_problem *p, const buffers *b, CUstream stream,
                            CUevent e0, CUevent e1, int warmup, int repeats, double *ms,
                            tsr_error *err)
{
  tsr_gpu_tensors t;
  tsr_status st = TSR_OK;
  int r, n = warmup + repeats;
  memset(&t, 0, sizeof t);
  strides(p->heads_q, p->seq_q, p->head_dim, t.q_stride);
  strides(p->heads_kv, p->seq_k, p->head_dim, t.k_stride);
  strides(p->heads_kv, p->seq_k, p->head_dim, t.v_stride);
  strides(p->heads_q, p->seq_q, p->head_dim, t.o_stride);
  t.o = b->o;
  for (r = 0; r < n && st == TSR_OK; r++) {
    int c = r % b->copies;
    float f = 0;
    t.q = b->q[c];
    t.k = b->k[c];
    t.v = b->v[c];
    if (r >= warmup)
      st = tsr_cu_check(cu, cu->cuEventRecord(e0, stream), "cuEventRecord", err);
    if (st == TSR_OK)
      st = tsr_gpu_launch(ctx, pl, &t, stream, err);
    if (st == TSR_OK && r >= warmup) {
      st = tsr_cu_check(cu, cu->cuEventRecord(e1, stream), "cuEventRecord", err);
      if (st == TSR_OK)
        st = tsr_cu_check(cu, cu->cuEventSynchronize(e1), "cuEventSynchronize", err);
      if (st == TSR_OK)
        st = tsr_cu_check(cu, cu->cuEventElapsedTime(&f, e0, e1), "cuEventElapsedTime", err);
      ms[r - warmup] = f;
    }
  }
  if (st == TSR_OK)
    st = tsr_cu_check(cu, cu->cuStreamSynchronize(stream), "cuStreamSynchronize", err);
  return st;
}

/* The GPU's row as the driver reports it. */
static tsr_status record_gpu(tsr_db *db, tsr_context *ctx, int64_t *id, int64_t *l2,
                             char *name, size_t name_n, tsr_error *err)
{
  const tsr_cu *cu = tsr_context_cu(ctx);
  CUdevice dev = tsr_context_device(ctx);
  CUresult (*total_mem)(size_t *, CUdevice);
  tsr_db_gpu g;
  char driver[32];
  int v = 0, clk = 0, mclk = 0, l2b = 0;
  size_t mem = 0;
  memset(&g, 0, sizeof g);
  if (cu->cuDeviceGetName(name, (int)name_n, dev) != CUDA_SUCCESS)
    snprintf(name, name_n, "unknown");
  cu->cuDriverGetVersion(&v);
  snprintf(driver, sizeof driver, "cuda %d.%d", v / 1000, v % 1000 / 10);
  cu->cuDeviceGetAttribute(&clk, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
  cu->cuDeviceGetAttribute(&mclk, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev);
  cu->cuDeviceGetAttribute(&l2b, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
  /* cuDeviceTotalMem is not in the runtime's driver table; look it up in
   * the same library handle. */
  *(void **)&total_mem = dlsym(cu->lib, "cuDeviceTotalMem_v2");
  if (total_mem)
    total_mem(&mem, dev);
  g.name = name;
  g.arch = tsr_context_arch(ctx);
  g.driver = driver;
  g.multiprocessors = tsr_context_num_sms(ctx);
  g.memory_bytes = (int64_t)mem;
  g.l2_bytes = l2b;
  g.clock_sm_khz = clk;
  g.clock_mem_khz = mclk;
  *l2 = l2b;
  return tsr_db_put_gpu(db, &g, id, err);
}

static int parse_int(const char *s, int lo, int *out)
{
  char *e;
  long v = strtol(s, &e, 10);
  if (!*s || *e || v < lo || v > 1000000)
    return -1;
  *out = (int)v;
  return 0;
}

/* Whether a bundle entry is a candidate variant for the problem and tile
 * on the context's device (the request path's rule, tsr_context_serves). */
int tsrp_sweep_candidate(const tsr_context *ctx, const tsr_bundle_entry *e, const tsr_problem *p,
                         int tm, int tn, const char *glob)
{
  tsr_variant_need need;
  if (glob && fnmatch(glob, e->name, 0) != 0)
    return 0;
  need.dtype = p->dtype;
  need.head_dim = (int)p->head_dim;
  need.bm = tm;
  need.bn = tn;
  /* Variants without membership code are candidates too: they serve plans
   * with no partial tiles (retain always, combine on a mask whose tiles are
   * all full) 6-11% faster on the H200; for a plan with partial tiles the
   * upload refuses them and the candidate is recorded as ineligible. */
  need.membership = 0;
  return tsr_context_serves(ctx, e, &need);
}

/* NVRTC options of each variant's build for `arch`, from the bundle's
 * registry.json (the bundle loader keeps only the hashes).  Returns a JSON
 * object name -> options (caller decrefs), or NULL when unreadable. */
static json_t *variant_options(const char *dir, const char *arch)
{
  char path[1200];
  json_t *reg, *out = json_object(), *vars, *v;
  size_t i;
  snprintf(path, sizeof path, "%s/registry.json", dir);
  reg = json_load_file(path, 0, NULL);
  vars = reg ? json_object_get(reg, "variants") : NULL;
  json_array_foreach(vars, i, v)
  {
    const char *name = json_string_value(json_object_get(v, "name"));
    json_t *t = json_object_get(json_object_get(v, "targets"), arch);
    const char *opts = json_string_value(json_object_get(t, "options"));
    if (name && opts)
      json_object_set_new(out, name, json_string(opts));
  }
  json_decref(reg);
  return out;
}

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig)
{
  (void)sig;
  stop_requested = 1;
}

static int run_sweep(const sweep_opts *o)
{
  tsr_error err = {0};
  tsr_corpus *corpus = NULL;
  tsr_db *db = NULL;
  tsr_context *ctx = NULL;
  tsr_context_opts copts;
  tsr_bundle bundle;
  const tsr_cu *cu;
  CUstream stream = NULL;
  CUevent e0 = NULL, e1 = NULL;
  char gpu_name[128], cmdline[512];
  const char *bdir;
  int64_t gpu_id, sweep_id, l2 = 0, i, n_entries, total = 0, done = 0, timed = 0;
  int rc = EXIT_OK, tty = isatty(2);
  double t0 = now_s(), timed_s = 0;
  double *samples = NULL;
  json_t *vopts = NULL;
  static const tsr_mapping maps[] = {TSR_MAP_RETAIN, TSR_MAP_COMBINE, TSR_MAP_SUBDIVIDE};
  static const tsr_tasks layouts[] = {TSR_TASKS_ROW, TSR_TASKS_SPLIT, TSR_TASKS_PACK};
  memset(&bundle, 0, sizeof bundle);
  if (tsr_corpus_open(o->corpus, &corpus, &err) != TSR_OK) {
    fprintf(stderr, "tessera-profile sweep: %s\n", err.text);
    return EXIT_USAGE;
  }
  if (tsr_db_open(o->db, TSR_DB_CREATE, &db, &err) != TSR_OK) {
    fprintf(stderr, "tessera-profile sweep: %s\n", err.text);
    tsr_corpus_close(corpus);
    return EXIT_USAGE;
  }
  tsr_context_opts_init(&copts);
  copts.device = o->device;
  copts.bundle_dir = o->bundle;
  if (tsr_context_create(&copts, &ctx, &err) != TSR_OK) {
    fprintf(stderr, "tessera-profile sweep: %s\n", err.text);
    rc = err.status == TSR_ERR_NO_DEVICE ? 77 : EXIT_FAIL;
    goto done;
  }
  /* The same bundle the context loaded, for names and template hashes. */
  bdir = tsr_bundle_dir(o->bundle, NULL);
  if (tsr_bundle_load(bdir, &bundle, &err) != TSR_OK)
    goto fail;
  vopts = variant_options(bdir, tsr_context_arch(ctx));
  cu = tsr_context_cu(ctx);
  if (tsr_cu_check(cu, cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate",
                   &err) != TSR_OK ||
      tsr_cu_check(cu, cu->cuEventCreate(&e0, CU_EVENT_DEFAULT), "cuEventCreate", &err) !=
          TSR_OK ||
      tsr_cu_check(cu, cu->cuEventCreate(&e1, CU_EVENT_DEFAULT), "cuEventCreate", &err) != TSR_OK)
    goto fail;
  if (record_gpu(db, ctx, &gpu_id, &l2, gpu_name, sizeof gpu_name, &err) != TSR_OK)
    goto fail;
  snprintf(cmdline, sizeof cmdline, "sweep --corpus %s --split %s --repeats %d --warmup %d%s%s",
           o->corpus, o->split, o->repeats, o->warmup, o->variants ? " --variants " : "",
           o->variants ? o->variants : "");
  if (tsr_db_start_sweep(db, gpu_id, o->corpus, cmdline, &sweep_id, &err) != TSR_OK)
    goto fail;
  samples = malloc(sizeof *samples * (size_t)o->repeats);
  if (!samples) {
    tsr_error_set(&err, TSR_ERR_NOMEM, "out of memory");
    goto fail;
  }
  n_entries = tsr_corpus_count(corpus);
  if (o->limit > 0) {
    int64_t seen = 0;
    for (i = 0; i < n_entries && seen < o->limit; i++)
      seen += !strcmp(tsr_corpus_get(corpus, i)->split, o->split);
    n_entries = i;
  }
  /* Candidate count for the progress bar: tiles x mappings x layouts. */
  for (i = 0; i < n_entries; i++)
    if (!strcmp(tsr_corpus_get(corpus, i)->split, o->split))
      total += TSR_FEATURE_TILES * 3 * 3;
  fprintf(stderr, "sweeping %s (%s split) on %s (%d SMs, L2 %lld MB) into %s\n", o->corpus,
          o->split, gpu_name, tsr_context_num_sms(ctx), (long long)(l2 >> 20), o->db);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  for (i = 0; i < n_entries && !stop_requested; i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(corpus, i);
    tsr_mask *mask = NULL;
    tsr_geom *geom = NULL;
    tsr_problem p;
    tsr_features f;
    buffers bufs;
    int64_t mask_id;
    int t;
    memset(&bufs, 0, sizeof bufs);
    if (strcmp(e->split, o->split))
      continue;
    if (o->budget > 0 && now_s() - t0 > o->budget) {
      fprintf(stderr, "%sbudget of %.0f s reached; run the same command again to resume\n",
              tty ? "\n" : "", o->budget);
      break;
    }
    if (tsr_corpus_load_mask(corpus, i, &mask, &err) != TSR_OK ||
        tsr_corpus_load_geom(corpus, i, &geom, &err) != TSR_OK) {
      tsr_mask_destroy(mask);
      goto fail;
    }
    tsr_corpus_problem(e, geom, &p);
    if (tsr_problem_check(&p, &err) != TSR_OK ||
        tsr_features_compute(&p, mask, tsr_context_num_sms(ctx), &f, &err) != TSR_OK)
      goto mask_fail;
    {
      const char *rel = strrchr(e->file, '/');
      char geomtxt[48];
      tsr_db_mask dm;
      memset(&dm, 0, sizeof dm);
      if (f.bq)
        snprintf(geomtxt, sizeof geomtxt, "%lldx%lld", (long long)f.bq, (long long)f.bk);
      else
        snprintf(geomtxt, sizeof geomtxt, "variable");
      dm.corpus = o->corpus;
      dm.path = rel ? rel + 1 : e->file;
      dm.split = e->split;
      dm.family = e->family;
      dm.model = e->model;
      dm.geometry = geomtxt;
      dm.dtype = tsr_dtype_name(p.dtype);
      dm.batch = 1;
      dm.heads_q = p.heads_q;
      dm.heads_kv = p.heads_kv;
      dm.seq_q = p.seq_q;
      dm.seq_k = p.seq_k;
      dm.head_dim = p.head_dim;
      dm.content_hash = fnv1a(tsr_mask_bits(mask),
                              (size_t)(tsr_mask_batch(mask) * tsr_mask_heads(mask) *
                                       tsr_mask_nq(mask) * tsr_mask_nk(mask)),
                              0xcbf29ce484222325ull);
      if (tsr_db_begin(db, &err) != TSR_OK || tsr_db_put_mask(db, &dm, &mask_id, &err) != TSR_OK)
        goto mask_fail;
      if (tsr_db_put_features(db, mask_id, gpu_id, &f, &err) != TSR_OK)
        goto mask_fail;
      if (tsr_db_commit(db, &err) != TSR_OK)
        goto mask_fail;
    }
    for (t = 0; t < TSR_FEATURE_TILES && !stop_requested; t++) {
      int tm, tn, mi, li;
      size_t vi;
      tsr_features_tile(t, &tm, &tn);
      for (mi = 0; mi < 3; mi++)
        for (li = 0; li < 3; li++) {
          done++;
          for (vi = 0; vi < bundle.n && !stop_requested; vi++) {
            const tsr_bundle_entry *be = &bundle.items[vi];
            tsr_db_variant dv;
            tsr_db_plan dp;
            tsr_db_measurement m;
            tsr_plan_opts po;
            tsr_plan *pl = NULL;
            int64_t vid, pid;
            int found, k;
            int ai = tsr_arch_index(tsr_context_arch(ctx));
            char params[256];
            tsr_status s;
            if (!tsrp_sweep_candidate(ctx, be, &p, tm, tn, o->variants))
              continue;
            snprintf(params, sizeof params,
                     "{\"family\":\"%s\",\"bm\":%d,\"bn\":%d,\"head_dim\":%d,\"stages\":%d,"
                     "\"warps\":%d,\"layout\":\"%s\",\"membership\":%d,\"tma_box\":%d}",
                     tsr_variant_family_name(be->v.family), be->v.bm, be->v.bn, be->v.head_dim,
                     be->v.stages, be->v.warps, tsr_variant_layout_name(be->v.layout),
                     be->v.membership, be->v.tma_box);
            dv.name = be->name;
            dv.params = params;
            dv.template_hash = be->hash[ai];
            dv.generator = bundle.generator;
            dv.nvrtc_version = bundle.nvrtc;
            dv.nvrtc_options = json_string_value(json_object_get(vopts, be->name));
            if (!dv.nvrtc_options)
              dv.nvrtc_options = tsr_context_arch(ctx);
            dp.mapping = maps[mi];
            dp.tile_m = tm;
            dp.tile_n = tn;
            dp.tasks = layouts[li];
            dp.variant = be->name;
            if (tsr_db_put_variant(db, &dv, &vid, &err) != TSR_OK ||
                tsr_db_put_plan(db, &dp, &pid, &err) != TSR_OK ||
                tsr_db_has_measurement(db, gpu_id, mask_id, pid, vid, &found, &err) != TSR_OK)
              goto mask_fail;
            if (found)
              continue;
            memset(&m, 0, sizeof m);
            m.gpu_id = gpu_id;
            m.mask_id = mask_id;
            m.plan_id = pid;
            m.variant_id = vid;
            m.sweep_id = sweep_id;
            tsr_plan_opts_init(&po);
            po.tile_m = tm;
            po.tile_n = tn;
            po.mapping = maps[mi];
            po.tasks = layouts[li];
            po.num_sms = tsr_context_num_sms(ctx);
            po.arch = tsr_context_arch(ctx);
            po.variant = be->name;
            {
              tsr_error perr = {0};
              double c0 = now_s();
              /* The planner is the judge of which mappings apply. */
              s = tsr_plan_create(&p, mask, &po, &pl, &perr);
              if (s == TSR_OK && !bufs.copies &&
                  buffers_make(cu, &p, l2, &bufs, 0x9e3779b97f4a7c15ull ^ (uint64_t)i, &err) !=
                      TSR_OK) {
                tsr_plan_destroy(pl);
                goto mask_fail;
              }
              if (s == TSR_OK)
                s = tsr_gpu_upload(ctx, pl, &perr);
              if (s == TSR_OK)
                s = time_plan(ctx, cu, pl, &p, &bufs, stream, e0, e1, o->warmup, o->repeats,
                              samples, &perr);
              tsr_plan_destroy(pl);
              if (s == TSR_ERR_CUDA) {
                /* A kernel fault poisons the context: record the candidate
                 * as failed (a resumed sweep skips it until its variant is
                 * rebuilt), stop, and say which candidate did it. */
                m.status = "failed";
                m.detail = perr.text;
                tsr_db_record(db, &m, NULL, &err);
                tsr_error_set(&err, s, "%s on mask '%s', plan %s %dx%d %s, variant %s",
                              perr.text, e->file, tsr_plan_mapping_name(maps[mi]), tm, tn,
                              tsr_plan_tasks_name(layouts[li]), be->name);
                goto mask_fail;
              }
              if (s == TSR_OK) {
                m.status = "ok";
                m.warmup = o->warmup;
                m.n_samples = o->repeats;
                m.samples_ms = samples;
                timed++;
                timed_s += now_s() - c0;
              } else {
                m.status = s == TSR_ERR_UNSUPPORTED || s == TSR_ERR_NO_VARIANT ? "ineligible"
                                                                                : "failed";
                m.detail = perr.text;
              }
              for (k = 0; k < o->repeats && s == TSR_OK; k++)
                if (!(samples[k] > 0))
                  samples[k] = 1e-6; /* a zero-length event interval */
              if (tsr_db_record(db, &m, NULL, &err) != TSR_OK)
                goto mask_fail;
            }
          }
          progress(done, total, timed ? done : 0, now_s() - t0, tty);
        }
    }
    buffers_free(cu, &bufs);
    tsr_mask_destroy(mask);
    tsr_geom_destroy(geom);
    continue;
  mask_fail:
    tsr_db_rollback(db);
    buffers_free(cu, &bufs);
    tsr_mask_destroy(mask);
    tsr_geom_destroy(geom);
    goto fail;
  }
  if (tty)
    fputc('\n', stderr);
  if (stop_requested)
    fprintf(stderr, "interrupted; run the same command again to resume\n");
  tsr_db_finish_sweep(db, sweep_id, &err);
  fprintf(stderr, "timed %lld candidates in %.1f s (%.1f s on the GPU path)\n", (long long)timed,
          now_s() - t0, timed_s);
  goto done;
fail:
  fprintf(stderr, "%stessera-profile sweep: %s\n", tty ? "\n" : "", err.text);
  rc = err.status == TSR_ERR_INVALID || err.status == TSR_ERR_IO || err.status == TSR_ERR_FORMAT
           ? EXIT_USAGE
           : EXIT_FAIL;
done:
  free(samples);
  if (ctx) {
    cu = tsr_context_cu(ctx);
    if (e0)
      cu->cuEventDestroy(e0);
    if (e1)
      cu->cuEventDestroy(e1);
    if (stream)
      cu->cuStreamDestroy(stream);
  }
  json_decref(vopts);
  tsr_bundle_free(&bundle);
  tsr_context_destroy(ctx);
  tsr_db_close(db);
  tsr_corpus_close(corpus);
  return rc;
}

int tsrp_sweep_main(int argc, char **argv)
{
  static const struct option lo[] = {
      {"corpus", 1, 0, 'c'},  {"db", 1, 0, 'd'},     {"device", 1, 0, 'D'},
      {"budget", 1, 0, 'b'},  {"variants", 1, 0, 'v'}, {"split", 1, 0, 's'},
      {"repeats", 1, 0, 'r'}, {"warmup", 1, 0, 'w'}, {"limit", 1, 0, 'l'},
      {"bundle", 1, 0, 'B'},  {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
  sweep_opts o;
  int c, v;
  char *end;
  memset(&o, 0, sizeof o);
  o.split = "profile";
  o.repeats = 10;
  o.warmup = 3;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (c) {
    case 'c': o.corpus = optarg; break;
    case 'd': o.db = optarg; break;
    case 'v': o.variants = optarg; break;
    case 's': o.split = optarg; break;
    case 'B': o.bundle = optarg; break;
    case 'D':
      if (parse_int(optarg, 0, &o.device)) goto bad;
      break;
    case 'r':
      if (parse_int(optarg, 1, &o.repeats)) goto bad;
      break;
    case 'w':
      if (parse_int(optarg, 0, &o.warmup)) goto bad;
      break;
    case 'l':
      if (parse_int(optarg, 1, &v)) goto bad;
      o.limit = v;
      break;
    case 'b':
      o.budget = strtod(optarg, &end);
      if (!*optarg || *end || !(o.budget > 0) || !isfinite(o.budget)) goto bad;
      break;
    case 'h':
      tsrp_help(stdout, "sweep");
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!o.corpus || !o.db || optind != argc) {
    fprintf(stderr, "tessera-profile sweep: expected --corpus DIR --db FILE\n");
    return EXIT_USAGE;
  }
  return run_sweep(&o);
bad:
  fprintf(stderr, "tessera-profile sweep: invalid value '%s' for %s\n", optarg,
          argv[optind - 1][0] == '-' ? argv[optind - 1] : argv[optind - 2]);
  return EXIT_USAGE;
}

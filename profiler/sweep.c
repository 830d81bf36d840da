/*
 * sweep.c: `tessera-profile sweep`, timing every eligible candidate plan of
 * every mask of a corpus split on the GPU it runs on.
 *
 * Candidates per mask: tile shapes {64,128}x{64,128} that have a variant in
 * the bundle for the problem's dtype and head dim (filtered by --variants;
 * with and without membership code),
 * the mappings that apply to the geometry (retain, combine, subdivide), and
 * task layouts row / split / pack.  Each candidate is planned on the host,
 * uploaded, launched `warmup` times (then, with --settle-ms, until that
 * long has passed: at its power cap a GPU's clock follows the running
 * kernel's power draw within about 100 ms, so after a few warm-up launches
 * the clock is still the one the previous candidate set;
 * notes/power-2026-12-06.md), then timed `repeats` times with CUDA events
 * around single launches; q/k/v rotate through enough copies that
 * each timed launch reads inputs not left in L2 by the previous one.  The
 * samples and their median go to the database in one transaction per
 * candidate, so an interrupted sweep resumes where it stopped and two sweeps
 * on one file never duplicate a row; a candidate whose variant build (hash)
 * changed is timed again because its variant row is new.
 *
 * Cost: dominated by the GPU: (warmup + repeats) launches per candidate and
 * the settle time, about 12 candidates a mask, plus planning (milliseconds).
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
  double budget, settle_ms;
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
    st = tsri_cu_check(cu, cu->cuMemAlloc(&b->q[i], 2 * nq), "cuMemAlloc", err);
    if (st == TSR_OK)
      st = tsri_cu_check(cu, cu->cuMemAlloc(&b->k[i], 2 * nk), "cuMemAlloc", err);
    if (st == TSR_OK)
      st = tsri_cu_check(cu, cu->cuMemAlloc(&b->v[i], 2 * nk), "cuMemAlloc", err);
    if (st == TSR_OK) {
      fill_random(h, nq, &seed);
      st = tsri_cu_check(cu, cu->cuMemcpyHtoD(b->q[i], h, 2 * nq), "cuMemcpyHtoD", err);
    }
    if (st == TSR_OK) {
      fill_random(h, nk, &seed);
      st = tsri_cu_check(cu, cu->cuMemcpyHtoD(b->k[i], h, 2 * nk), "cuMemcpyHtoD", err);
    }
    if (st == TSR_OK) {
      fill_random(h, nk, &seed);
      st = tsri_cu_check(cu, cu->cuMemcpyHtoD(b->v[i], h, 2 * nk), "cuMemcpyHtoD", err);
    }
  }
  if (st == TSR_OK)
    st = tsri_cu_check(cu, cu->cuMemAlloc(&b->o, 2 * nq), "cuMemAlloc", err);
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

/* Times one uploaded plan: warm-up (`warmup` launches, then launches until
 * settle_ms of wall time has passed, each synchronised), then `repeats`
 * event-timed launches. */
static tsr_status time_plan(tsr_context *ctx, const tsr_cu *cu, tsr_plan *pl,
                            const tsr_problem *p, const buffers *b, CUstream stream,
                            CUevent e0, CUevent e1, int warmup, double settle_ms, int repeats,
                            double *ms, tsr_error *err)
{
  tsr_gpu_tensors t;
  tsr_status st = TSR_OK;
  int r, n = warmup + repeats;
  const double t0 = now_s();
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
    /* the settle, before the first timed launch: launches, each
     * synchronised, until settle_ms has passed since the warm-up began */
    if (r == warmup && settle_ms > 0)
      while (st == TSR_OK && (now_s() - t0) * 1e3 < settle_ms) {
        st = tsr_gpu_launch(ctx, pl, &t, stream, err);
        if (st == TSR_OK)
          st = tsri_cu_check(cu, cu->cuStreamSynchronize(stream), "cuStreamSynchronize", err);
      }
    if (st != TSR_OK)
      break;
    if (r >= warmup)
      st = tsri_cu_check(cu, cu->cuEventRecord(e0, stream), "cuEventRecord", err);
    if (st == TSR_OK)
      st = tsr_gpu_launch(ctx, pl, &t, stream, err);
    if (st == TSR_OK && r >= warmup) {
      st = tsri_cu_check(cu, cu->cuEventRecord(e1, stream), "cuEventRecord", err);
      if (st == TSR_OK)
        st = tsri_cu_check(cu, cu->cuEventSynchronize(e1), "cuEventSynchronize", err);
      if (st == TSR_OK)
        st = tsri_cu_check(cu, cu->cuEventElapsedTime(&f, e0, e1), "cuEventElapsedTime", err);
      ms[r - warmup] = f;
    }
  }
  if (st == TSR_OK)
    st = tsri_cu_check(cu, cu->cuStreamSynchronize(stream), "cuStreamSynchronize", err);
  return st;
}

/* The GPU's row as the driver reports it. */
static tsr_status record_gpu(tsr_db *db, tsr_context *ctx, int64_t *id, int64_t *l2,
                             char *name, size_t name_n, tsr_error *err)
{
  const tsr_cu *cu = tsri_context_cu(ctx);
  CUdevice dev = tsri_context_device(ctx);
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
  g.arch = tsri_context_arch(ctx);
  g.driver = driver;
  g.multiprocessors = tsri_context_num_sms(ctx);
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
 * on the context's device (the request path's rule, tsri_context_serves). */
int tsrp_sweep_candidate(const tsr_context *ctx, const tsr_bundle_entry *e, const tsr_problem *p,
                         int tm, int tn, int gather, const char *glob)
{
  tsr_variant_need need = {0}; /* native precision unless set */
  if (glob && fnmatch(glob, e->name, 0) != 0)
    return 0;
  need.dtype = p->dtype;
  need.head_dim = (int)p->head_dim;
  need.bm = tm;
  need.bn = tn;
  need.gather = gather; /* gather tiles run on kg variants only, and only they */
  /* Variants without membership code are candidates too: they serve plans
   * with no partial tiles (retain always, combine on a mask whose tiles are
   * all full) 6-11% faster on the H200; for a plan with partial tiles the
   * upload refuses them and the candidate is recorded as ineligible. */
  need.membership = 0;
  return tsri_context_serves(ctx, e, &need);
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

/* One sweep's state: what it opened, the GPU's row and the sweep's, and
 * the counts its progress line shows. */
typedef struct {
  const sweep_opts *o;
  tsr_error err;
  tsr_corpus *corpus;
  tsr_db *db;
  tsr_context *ctx;
  tsr_bundle bundle;
  const tsr_cu *cu;
  CUstream stream;
  CUevent e0, e1;
  char gpu_name[128];
  int64_t gpu_id, sweep_id, l2, n_entries, total, done, timed;
  int tty;
  double t0, timed_s;
  double *samples;
  json_t *vopts;
} sweep;

/* The mask being swept: its problem, features and inputs on the device. */
typedef struct {
  int64_t i;
  const tsr_corpus_entry *e;
  tsr_mask *mask;
  tsr_geom *geom;
  tsr_problem p;
  tsr_features f;
  buffers bufs;
  int64_t mask_id;
} sweep_mask;

/* The status of a step that failed with err set, never TSR_OK: the steps
 * stop on it, and run_sweep maps err->status to the exit status. */
static tsr_status failed(const tsr_error *err)
{
  return err->status != TSR_OK ? err->status : TSR_ERR_INVALID;
}

/* Gather is a candidate like the others, so that the table, not only the
 * request path's upgrade of retained bq x 64 blocks (tsri_context_gather),
 * sees it beside combine: the 2026-12-02 sweep, without it, picked combine
 * 128x128 for 128x64-block masks at 75K-119K tokens, where the upgrade
 * does not apply. */
static const tsr_mapping sweep_maps[] = {TSR_MAP_RETAIN, TSR_MAP_COMBINE, TSR_MAP_SUBDIVIDE,
                                         TSR_MAP_GATHER};
#define SWEEP_MAPS ((int)(sizeof sweep_maps / sizeof sweep_maps[0]))
static const tsr_tasks sweep_layouts[] = {TSR_TASKS_ROW, TSR_TASKS_SPLIT, TSR_TASKS_PACK};

/* Corpus, database and context; on failure the message is printed and the
 * exit status returned (77: no GPU). */
static int sweep_open(sweep *s)
{
  const sweep_opts *o = s->o;
  tsr_context_opts copts;
  if (tsr_corpus_open(o->corpus, &s->corpus, &s->err) != TSR_OK) {
    fprintf(stderr, "tessera-profile sweep: %s\n", s->err.text);
    return EXIT_USAGE;
  }
  if (tsr_db_open(o->db, TSR_DB_CREATE, &s->db, &s->err) != TSR_OK) {
    fprintf(stderr, "tessera-profile sweep: %s\n", s->err.text);
    return EXIT_USAGE;
  }
  tsr_context_opts_init(&copts);
  copts.device = o->device;
  copts.bundle_dir = o->bundle;
  if (tsr_context_create(&copts, &s->ctx, &s->err) != TSR_OK) {
    fprintf(stderr, "tessera-profile sweep: %s\n", s->err.text);
    return s->err.status == TSR_ERR_NO_DEVICE ? 77 : EXIT_FAIL;
  }
  return EXIT_OK;
}

/* The bundle (names and template hashes), the stream and events, the GPU's
 * and the sweep's rows, the split's masks and candidate count. */
static tsr_status sweep_prepare(sweep *s)
{
  const sweep_opts *o = s->o;
  tsr_error *err = &s->err;
  char cmdline[512], settle[48];
  const char *bdir;
  int64_t i;
  /* The same bundle the context loaded, for names and template hashes. */
  bdir = tsri_bundle_dir(o->bundle, NULL);
  if (tsri_bundle_load(bdir, &s->bundle, err) != TSR_OK)
    return failed(err);
  s->vopts = variant_options(bdir, tsri_context_arch(s->ctx));
  s->cu = tsri_context_cu(s->ctx);
  if (tsri_cu_check(s->cu, s->cu->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING),
                   "cuStreamCreate", err) != TSR_OK ||
      tsri_cu_check(s->cu, s->cu->cuEventCreate(&s->e0, CU_EVENT_DEFAULT), "cuEventCreate", err) !=
          TSR_OK ||
      tsri_cu_check(s->cu, s->cu->cuEventCreate(&s->e1, CU_EVENT_DEFAULT), "cuEventCreate", err) !=
          TSR_OK)
    return failed(err);
  if (record_gpu(s->db, s->ctx, &s->gpu_id, &s->l2, s->gpu_name, sizeof s->gpu_name, err) != TSR_OK)
    return failed(err);
  settle[0] = '\0';
  if (o->settle_ms > 0)
    snprintf(settle, sizeof settle, " --settle-ms %g", o->settle_ms);
  snprintf(cmdline, sizeof cmdline, "sweep --corpus %s --split %s --repeats %d --warmup %d%s%s%s",
           o->corpus, o->split, o->repeats, o->warmup, settle, o->variants ? " --variants " : "",
           o->variants ? o->variants : "");
  if (tsr_db_start_sweep(s->db, s->gpu_id, o->corpus, cmdline, &s->sweep_id, err) != TSR_OK)
    return failed(err);
  s->samples = malloc(sizeof *s->samples * (size_t)o->repeats);
  if (!s->samples)
    return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory");
  s->n_entries = tsr_corpus_count(s->corpus);
  if (o->limit > 0) {
    int64_t seen = 0;
    for (i = 0; i < s->n_entries && seen < o->limit; i++)
      seen += !strcmp(tsr_corpus_get(s->corpus, i)->split, o->split);
    s->n_entries = i;
  }
  /* Candidate count for the progress bar: tiles x mappings x layouts. */
  for (i = 0; i < s->n_entries; i++)
    if (!strcmp(tsr_corpus_get(s->corpus, i)->split, o->split))
      s->total += TSR_FEATURE_TILES * SWEEP_MAPS * 3;
  return TSR_OK;
}

/* The mask's row and its features, in one transaction. */
static tsr_status record_mask(sweep *s, sweep_mask *sm)
{
  const tsr_corpus_entry *e = sm->e;
  const tsr_problem *p = &sm->p;
  const tsr_mask *mask = sm->mask;
  const char *rel = strrchr(e->file, '/');
  char geomtxt[48];
  tsr_db_mask dm;
  tsr_error *err = &s->err;
  memset(&dm, 0, sizeof dm);
  if (sm->f.bq)
    snprintf(geomtxt, sizeof geomtxt, "%lldx%lld", (long long)sm->f.bq, (long long)sm->f.bk);
  else
    snprintf(geomtxt, sizeof geomtxt, "variable");
  dm.corpus = s->o->corpus;
  dm.path = rel ? rel + 1 : e->file;
  dm.split = e->split;
  dm.family = e->family;
  dm.model = e->model;
  dm.geometry = geomtxt;
  dm.dtype = tsr_dtype_name(p->dtype);
  dm.batch = 1;
  dm.heads_q = p->heads_q;
  dm.heads_kv = p->heads_kv;
  dm.seq_q = p->seq_q;
  dm.seq_k = p->seq_k;
  dm.head_dim = p->head_dim;
  dm.content_hash = fnv1a(tsr_mask_bits(mask),
                          (size_t)(tsr_mask_batch(mask) * tsr_mask_heads(mask) * tsr_mask_nq(mask) *
                                   tsr_mask_nk(mask)),
                          0xcbf29ce484222325ull);
  if (tsri_db_begin(s->db, err) != TSR_OK || tsr_db_put_mask(s->db, &dm, &sm->mask_id, err) != TSR_OK)
    return failed(err);
  if (tsr_db_put_features(s->db, sm->mask_id, s->gpu_id, &sm->f, err) != TSR_OK)
    return failed(err);
  if (tsri_db_commit(s->db, err) != TSR_OK)
    return failed(err);
  return TSR_OK;
}

/* The variant's row: its parameters, template hash and build options. */
static void variant_row(const sweep *s, const tsr_bundle_entry *be, char *params, size_t n,
                        tsr_db_variant *dv)
{
  int ai = tsri_arch_index(tsri_context_arch(s->ctx));
  snprintf(params, n,
           "{\"family\":\"%s\",\"bm\":%d,\"bn\":%d,\"head_dim\":%d,\"stages\":%d,"
           "\"warps\":%d,\"layout\":\"%s\",\"membership\":%d,\"tma_box\":%d}",
           tsri_variant_family_name(be->v.family), be->v.bm, be->v.bn, be->v.head_dim,
           be->v.stages, be->v.warps, tsri_variant_layout_name(be->v.layout), be->v.membership,
           be->v.tma_box);
  dv->name = be->name;
  dv->params = params;
  dv->template_hash = be->hash[ai];
  dv->generator = s->bundle.generator;
  dv->nvrtc_version = s->bundle.nvrtc;
  dv->nvrtc_options = json_string_value(json_object_get(s->vopts, be->name));
  if (!dv->nvrtc_options)
    dv->nvrtc_options = tsri_context_arch(s->ctx);
}

/* Plans, uploads and times one candidate (mapping mi, tile tm x tn, layout
 * li, variant be), unless the database holds its measurement, and records
 * it: "ok" with its samples, "ineligible" when the planner or the upload
 * refuses it, "failed" otherwise.  A CUDA error is recorded and returned:
 * a kernel fault poisons the context. */
static tsr_status sweep_candidate(sweep *s, sweep_mask *sm, const tsr_bundle_entry *be, int tm,
                                  int tn, int mi, int li)
{
  const sweep_opts *o = s->o;
  tsr_error *err = &s->err, perr = {0};
  tsr_db_variant dv;
  tsr_db_plan dp;
  tsr_db_measurement m;
  tsr_plan_opts po;
  tsr_plan *pl = NULL;
  int64_t vid, pid;
  int found, k;
  char params[256];
  tsr_status st;
  double c0;
  variant_row(s, be, params, sizeof params, &dv);
  dp.mapping = sweep_maps[mi];
  dp.tile_m = tm;
  dp.tile_n = tn;
  dp.tasks = sweep_layouts[li];
  dp.variant = be->name;
  if (tsr_db_put_variant(s->db, &dv, &vid, err) != TSR_OK ||
      tsr_db_put_plan(s->db, &dp, &pid, err) != TSR_OK ||
      tsr_db_has_measurement(s->db, s->gpu_id, sm->mask_id, pid, vid, &found, err) != TSR_OK)
    return failed(err);
  if (found)
    return TSR_OK;
  memset(&m, 0, sizeof m);
  m.gpu_id = s->gpu_id;
  m.mask_id = sm->mask_id;
  m.plan_id = pid;
  m.variant_id = vid;
  m.sweep_id = s->sweep_id;
  tsr_plan_opts_init(&po);
  po.tile_m = tm;
  po.tile_n = tn;
  po.mapping = sweep_maps[mi];
  po.tasks = sweep_layouts[li];
  po.num_sms = tsri_context_num_sms(s->ctx);
  po.arch = tsri_context_arch(s->ctx);
  po.variant = be->name;
  c0 = now_s();
  /* The planner is the judge of which mappings apply. */
  st = tsr_plan_create(&sm->p, sm->mask, &po, &pl, &perr);
  if (st == TSR_OK && !sm->bufs.copies &&
      buffers_make(s->cu, &sm->p, s->l2, &sm->bufs, 0x9e3779b97f4a7c15ull ^ (uint64_t)sm->i, err) !=
          TSR_OK) {
    tsr_plan_destroy(pl);
    return failed(err);
  }
  if (st == TSR_OK)
    st = tsr_gpu_upload(s->ctx, pl, &perr);
  if (st == TSR_OK)
    st = time_plan(s->ctx, s->cu, pl, &sm->p, &sm->bufs, s->stream, s->e0, s->e1, o->warmup,
                   o->settle_ms, o->repeats, s->samples, &perr);
  tsr_plan_destroy(pl);
  if (st == TSR_ERR_CUDA) {
    /* A kernel fault poisons the context: record the candidate as failed
     * (a resumed sweep skips it until its variant is rebuilt), stop, and
     * say which candidate did it. */
    m.status = "failed";
    m.detail = perr.text;
    tsr_db_record(s->db, &m, NULL, err);
    return tsr_error_set(err, st, "%s on mask '%s', plan %s %dx%d %s, variant %s", perr.text,
                         sm->e->file, tsr_plan_mapping_name(sweep_maps[mi]), tm, tn,
                         tsr_plan_tasks_name(sweep_layouts[li]), be->name);
  }
  if (st == TSR_OK) {
    m.status = "ok";
    m.warmup = o->warmup;
    m.n_samples = o->repeats;
    m.samples_ms = s->samples;
    s->timed++;
    s->timed_s += now_s() - c0;
  } else {
    m.status = st == TSR_ERR_UNSUPPORTED || st == TSR_ERR_NO_VARIANT ? "ineligible" : "failed";
    m.detail = perr.text;
  }
  for (k = 0; k < o->repeats && st == TSR_OK; k++)
    if (!(s->samples[k] > 0))
      s->samples[k] = 1e-6; /* a zero-length event interval */
  if (tsr_db_record(s->db, &m, NULL, err) != TSR_OK)
    return failed(err);
  return TSR_OK;
}

/* Every candidate of the mask: tiles x mappings x layouts x the variants
 * that fit; the progress line after each (mapping, layout). */
static tsr_status sweep_candidates(sweep *s, sweep_mask *sm)
{
  tsr_status st;
  int t;
  for (t = 0; t < TSR_FEATURE_TILES && !stop_requested; t++) {
    int tm, tn, mi, li;
    size_t vi;
    tsr_features_tile(t, &tm, &tn);
    for (mi = 0; mi < SWEEP_MAPS; mi++)
      for (li = 0; li < 3; li++) {
        s->done++;
        for (vi = 0; vi < s->bundle.n && !stop_requested; vi++) {
          const tsr_bundle_entry *be = &s->bundle.items[vi];
          if (!tsrp_sweep_candidate(s->ctx, be, &sm->p, tm, tn, sweep_maps[mi] == TSR_MAP_GATHER,
                                    s->o->variants))
            continue;
          if ((st = sweep_candidate(s, sm, be, tm, tn, mi, li)) != TSR_OK)
            return st;
        }
        progress(s->done, s->total, s->timed ? s->done : 0, now_s() - s->t0, s->tty);
      }
  }
  return TSR_OK;
}

/* One mask of the split: loaded, its row and features recorded, its
 * candidates timed.  On failure the mask's open transaction is rolled
 * back. */
static tsr_status sweep_one(sweep *s, int64_t i)
{
  sweep_mask sm;
  tsr_error *err = &s->err;
  tsr_status st = TSR_OK;
  memset(&sm, 0, sizeof sm);
  sm.i = i;
  sm.e = tsr_corpus_get(s->corpus, i);
  if (tsr_corpus_load_mask(s->corpus, i, &sm.mask, err) != TSR_OK ||
      tsr_corpus_load_geom(s->corpus, i, &sm.geom, err) != TSR_OK) {
    tsr_mask_destroy(sm.mask);
    return failed(err);
  }
  tsr_corpus_problem(sm.e, sm.geom, &sm.p);
  if (tsr_problem_check(&sm.p, err) != TSR_OK ||
      tsr_features_compute(&sm.p, sm.mask, tsri_context_num_sms(s->ctx), &sm.f, err) != TSR_OK ||
      record_mask(s, &sm) != TSR_OK || sweep_candidates(s, &sm) != TSR_OK) {
    tsri_db_rollback(s->db);
    st = failed(err);
  }
  buffers_free(s->cu, &sm.bufs);
  tsr_mask_destroy(sm.mask);
  tsr_geom_destroy(sm.geom);
  return st;
}

/* Every mask of the split, until done, interrupted or past the budget. */
static tsr_status sweep_masks(sweep *s)
{
  const sweep_opts *o = s->o;
  int64_t i;
  fprintf(stderr, "sweeping %s (%s split) on %s (%d SMs, L2 %lld MB) into %s\n", o->corpus,
          o->split, s->gpu_name, tsri_context_num_sms(s->ctx), (long long)(s->l2 >> 20), o->db);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  for (i = 0; i < s->n_entries && !stop_requested; i++) {
    if (strcmp(tsr_corpus_get(s->corpus, i)->split, o->split))
      continue;
    if (o->budget > 0 && now_s() - s->t0 > o->budget) {
      fprintf(stderr, "%sbudget of %.0f s reached; run the same command again to resume\n",
              s->tty ? "\n" : "", o->budget);
      break;
    }
    if (sweep_one(s, i) != TSR_OK)
      return failed(&s->err);
  }
  if (s->tty)
    fputc('\n', stderr);
  if (stop_requested)
    fprintf(stderr, "interrupted; run the same command again to resume\n");
  tsr_db_finish_sweep(s->db, s->sweep_id, &s->err);
  fprintf(stderr, "timed %lld candidates in %.1f s (%.1f s on the GPU path)\n",
          (long long)s->timed, now_s() - s->t0, s->timed_s);
  return TSR_OK;
}

static void sweep_close(sweep *s)
{
  free(s->samples);
  if (s->ctx) {
    const tsr_cu *cu = tsri_context_cu(s->ctx);
    if (s->e0)
      cu->cuEventDestroy(s->e0);
    if (s->e1)
      cu->cuEventDestroy(s->e1);
    if (s->stream)
      cu->cuStreamDestroy(s->stream);
  }
  json_decref(s->vopts);
  tsri_bundle_free(&s->bundle);
  tsr_context_destroy(s->ctx);
  tsr_db_close(s->db);
  tsr_corpus_close(s->corpus);
}

static int run_sweep(const sweep_opts *o)
{
  sweep s;
  int rc;
  memset(&s, 0, sizeof s);
  s.o = o;
  s.tty = isatty(2);
  s.t0 = now_s();
  rc = sweep_open(&s);
  if (rc == EXIT_OK && (sweep_prepare(&s) != TSR_OK || sweep_masks(&s) != TSR_OK)) {
    fprintf(stderr, "%stessera-profile sweep: %s\n", s.tty ? "\n" : "", s.err.text);
    rc = s.err.status == TSR_ERR_INVALID || s.err.status == TSR_ERR_IO ||
                 s.err.status == TSR_ERR_FORMAT
             ? EXIT_USAGE
             : EXIT_FAIL;
  }
  sweep_close(&s);
  return rc;
}

int tsrp_sweep_main(int argc, char **argv)
{
  static const struct option lo[] = {
      {"corpus", 1, 0, 'c'},  {"db", 1, 0, 'd'},     {"device", 1, 0, 'D'},
      {"budget", 1, 0, 'b'},  {"variants", 1, 0, 'v'}, {"split", 1, 0, 's'},
      {"repeats", 1, 0, 'r'}, {"warmup", 1, 0, 'w'}, {"limit", 1, 0, 'l'},
      {"bundle", 1, 0, 'B'},  {"settle-ms", 1, 0, 'S'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
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
    case 'S':
      o.settle_ms = strtod(optarg, &end);
      if (!*optarg || *end || !(o.settle_ms >= 0) || !isfinite(o.settle_ms)) goto bad;
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
  /* "--opt VALUE" leaves optarg at argv[optind - 1], the option before it;
   * "--opt=VALUE" in one word: print the option part.  (Testing for a leading
   * '-' named a negative value as its own option.) */
  if (optarg == argv[optind - 1])
    fprintf(stderr, "tessera-profile sweep: invalid value '%s' for %s\n", optarg, argv[optind - 2]);
  else
    fprintf(stderr, "tessera-profile sweep: invalid value '%s' for %.*s\n", optarg,
            (int)(optarg - 1 - argv[optind - 1]), argv[optind - 1]);
  return EXIT_USAGE;
}

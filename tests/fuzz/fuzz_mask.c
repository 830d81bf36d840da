/*
 * fuzz_mask.c: libFuzzer harness of the mask loader and what runs on a
 * loaded mask: features, planning, verification, selection, and the CPU
 * plan executor against the reference.
 *
 * Input: 8 control bytes, then the bytes of a .npy mask.  The control bytes
 * derive a small problem from the mask (fuzz_problem below): block sizes,
 * ragged or variable geometry, GQA heads, tile, mapping, task layout, split
 * chunk, multiprocessors, and whether the mask is read as packed bits.
 * Sizes are bounded here so that one input runs in milliseconds (planner
 * memory is not the subject: issue 14 defect 7).
 *
 * Promises checked (a broken one aborts: a finding):
 *  - failures return a status with a message;
 *  - a loaded mask saves and reloads to the same bits; a packed mask plans
 *    exactly like its byte form;
 *  - features compute for any mask that fits its problem;
 *  - every plan tsr_plan_create makes passes tsr_plan_verify, and replanning
 *    into it (tsr_plan_update) gives the same plan;
 *  - the base plan and the embedded table's selection (tsr_select_request,
 *    the request path's) plan and verify for every geometry; the table's
 *    row as tsr_select_plan returns it does for uniform blocks;
 *  - on small problems the CPU plan executor agrees with the reference to
 *    1e-5 (tests/check_exec.c's tolerance);
 *  - uniform blocks that pair into a tile plan with the gather mapping, and
 *    that plan verifies (and executes, as above).
 */
#include <jansson.h>

#include "fuzz.h"

/* Harness bounds: mask block pairs, and tile pairs at the smallest tile
 * (16 x 32) over all heads, which bounds every plan's size (2^16: 4 heads
 * of 2900 tokens, the demo's 2304-token masks as they are). */
#define MAX_MASK_PAIRS ((int64_t)1 << 16)
#define MAX_TILE_PAIRS ((int64_t)1 << 16)
/* The executor comparison runs on problems up to this many score pairs. */
#define MAX_EXEC_PAIRS ((int64_t)1 << 16)

static char mask_path[600], save_path[600];
static tsr_selector *embedded; /* the embedded default table */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  const char *d = fz_dir();
  tsr_error err = {0};
  (void)argc, (void)argv;
  fz_path(mask_path, sizeof mask_path, d, "mask.npy");
  fz_path(save_path, sizeof save_path, d, "saved.npy");
  if (tsr_select_open(NULL, NULL, 0, &embedded, &err) != TSR_OK) {
    fprintf(stderr, "fuzz_mask: cannot load the embedded lookup table: %s\n", err.text);
    abort();
  }
  return 0;
}

typedef struct {
  tsr_geom *g;
  tsr_problem p;
  tsr_plan_opts o;
  int exec;       /* compare the CPU executor with the reference */
} fuzz_problem;

/* Tile pairs at the smallest tile (16 x 32) of a geometry over `planes`. */
static int64_t tile_pairs(int64_t planes, int64_t sq, int64_t sk)
{
  return planes * ((sq + 15) / 16) * ((sk + 31) / 32);
}

/* Block sizes from the control bytes, or variable ones from the seed, all
 * halved (down to 1 token) until the geometry fits MAX_TILE_PAIRS. */
static void make_geom(const uint8_t *c, int64_t nq, int64_t nk, int64_t planes, tsr_geom **g)
{
  tsr_error err = {0};
  tsr_status st;
  int64_t bq = fz_block_size(c[0] & 15), bk = fz_block_size(c[0] >> 4), sq, sk, i;
  int shift;
  if (c[2] & FZ_M_VARIABLE) {
    int64_t *q0 = malloc((size_t)nq * sizeof *q0), *k0 = malloc((size_t)nk * sizeof *k0);
    int64_t *qs = malloc((size_t)nq * sizeof *qs), *ks = malloc((size_t)nk * sizeof *ks);
    tu_rng r = {c[7] * 0x9e3779b97f4a7c15ull + (uint64_t)nq * 131 + (uint64_t)nk};
    for (i = 0; i < nq; i++)
      q0[i] = tu_range(&r, 1, 2 * bq);
    for (i = 0; i < nk; i++)
      k0[i] = tu_range(&r, 1, 2 * bk);
    for (shift = 0;; shift++) {
      sq = sk = 0;
      for (i = 0; i < nq; i++)
        sq += qs[i] = q0[i] >> shift > 1 ? q0[i] >> shift : 1;
      for (i = 0; i < nk; i++)
        sk += ks[i] = k0[i] >> shift > 1 ? k0[i] >> shift : 1;
      if (tile_pairs(planes, sq, sk) <= MAX_TILE_PAIRS || (sq == nq && sk == nk))
        break;
    }
    st = tsr_geom_variable(qs, nq, ks, nk, g, &err);
    free(q0), free(k0), free(qs), free(ks);
  } else {
    for (;;) {
      sq = nq * bq - (c[1] & 15) * bq / 16;
      sk = nk * bk - (c[1] >> 4) * bk / 16;
      if (tile_pairs(planes, sq, sk) <= MAX_TILE_PAIRS || (bq == 1 && bk == 1))
        break;
      bq = bq > 1 ? bq / 2 : 1;
      bk = bk > 1 ? bk / 2 : 1;
    }
    st = tsr_geom_uniform(sq, sk, bq, bk, g, &err);
  }
  FZ_CHECK_ERR(st, err, "geometry");
  if (st != TSR_OK)
    FZ_FINDING("a bounded geometry (%lld x %lld blocks) is refused: %s", (long long)nq,
               (long long)nk, err.text);
}

/* The problem, options and geometry the control bytes derive for mask m. */
static int make_problem(const uint8_t *c, const tsr_mask *m, fuzz_problem *fp)
{
  int64_t mb = tsr_mask_batch(m), mh = tsr_mask_heads(m), kvdiv[4];
  int64_t batch = mb == 1 && (c[2] & FZ_M_BATCH) ? 2 : mb;
  int64_t hq = mh == 1 && (c[2] & FZ_M_HEADS) ? 3 : mh;
  int tm = c[3] & 31, tn = c[4] & 15;
  memset(fp, 0, sizeof *fp);
  if (batch * hq > 64)
    return 0;
  make_geom(c, tsr_mask_nq(m), tsr_mask_nk(m), batch * hq, &fp->g);
  fp->p.batch = batch;
  fp->p.heads_q = hq;
  kvdiv[0] = 1, kvdiv[1] = hq, kvdiv[2] = 2, kvdiv[3] = 3;
  fp->p.heads_kv = hq % kvdiv[c[2] >> 6] ? hq : hq / kvdiv[c[2] >> 6];
  fp->p.seq_q = tsr_geom_seq_q(fp->g);
  fp->p.seq_k = tsr_geom_seq_k(fp->g);
  fp->p.head_dim = fz_head_dim((c[4] >> 6) | (c[3] >> 7) << 2);
  fp->p.dtype = c[2] & FZ_M_F16 ? TSR_DT_F16 : TSR_DT_BF16;
  fp->p.layout = TSR_LAYOUT_BHSD;
  fp->p.geom = fp->g;
  tsr_plan_opts_init(&fp->o);
  if (tm) {
    fp->o.tile_m = tm == 31 ? 512 : 16 * tm;
    fp->o.tile_n = tn == 15 ? 512 : 32 * tn;
  }
  fp->o.mapping = (tsr_mapping)((c[3] >> 5) & 3);
  fp->o.tasks = (tsr_tasks)((c[4] >> 4) & 3);
  fp->o.split_tiles = c[5];
  fp->o.num_sms = c[6];
  fp->exec = (c[2] & FZ_M_EXEC) && fp->p.head_dim <= 32 && fp->p.seq_k <= 4096 &&
             batch * hq * fp->p.seq_q * fp->p.seq_k <= MAX_EXEC_PAIRS;
  return 1;
}

/* Saving and reloading a mask keeps its extents and bits. */
static void check_save(const tsr_mask *m)
{
  tsr_error err = {0};
  tsr_mask *r = NULL;
  int64_t n = tsr_mask_batch(m) * tsr_mask_heads(m) * tsr_mask_nq(m) * tsr_mask_nk(m);
  if (tsr_mask_save(save_path, m, &err) != TSR_OK)
    FZ_FINDING("a loaded mask does not save: %s", err.text);
  if (tsr_mask_load(save_path, &r, &err) != TSR_OK)
    FZ_FINDING("a saved mask does not reload: %s", err.text);
  if (tsr_mask_batch(r) != tsr_mask_batch(m) || tsr_mask_heads(r) != tsr_mask_heads(m) ||
      tsr_mask_nq(r) != tsr_mask_nq(m) || tsr_mask_nk(r) != tsr_mask_nk(m) ||
      memcmp(tsr_mask_bits(r), tsr_mask_bits(m), (size_t)n))
    FZ_FINDING("a saved mask reloads with other extents or bits");
  tsr_mask_destroy(r);
}

/* The fields of two summaries of one problem and options that must agree. */
static void check_same_plan(const tsr_plan *a, const tsr_plan *b, const char *what)
{
  tsr_plan_summary x, y;
  tsr_plan_summarize(a, &x);
  tsr_plan_summarize(b, &y);
  if (x.tile_m != y.tile_m || x.tile_n != y.tile_n || x.mapping != y.mapping ||
      x.tasks != y.tasks || x.tiles != y.tiles || x.partial_tiles != y.partial_tiles ||
      x.tasks_count != y.tasks_count || x.split_rows != y.split_rows ||
      x.empty_rows != y.empty_rows || x.members != y.members || x.merges != y.merges ||
      x.slots != y.slots || x.membership_words != y.membership_words ||
      x.selected_pairs != y.selected_pairs || x.computed_pairs != y.computed_pairs)
    FZ_FINDING("%s: plans differ (tiles %lld/%lld, tasks %lld/%lld, words %lld/%lld)", what,
               (long long)x.tiles, (long long)y.tiles, (long long)x.tasks_count,
               (long long)y.tasks_count, (long long)x.membership_words,
               (long long)y.membership_words);
}

/* Plans with options o; a plan that is made must verify.  `must` = the
 * library promises a plan for these options.  Returns the plan or NULL. */
static tsr_plan *plan_verified(const fuzz_problem *fp, const tsr_mask *m, const tsr_plan_opts *o,
                               int must, const char *what)
{
  tsr_error err = {0};
  tsr_plan *pl = NULL;
  tsr_status st = tsr_plan_create(&fp->p, m, o, &pl, &err);
  FZ_CHECK_ERR(st, err, what);
  if (st != TSR_OK) {
    if (must)
      FZ_FINDING("%s: no plan for tile %dx%d, mapping %s, tasks %s: %s", what, o->tile_m,
                 o->tile_n, tsr_plan_mapping_name(o->mapping), tsr_plan_tasks_name(o->tasks),
                 err.text);
    return NULL;
  }
  tsr_error_clear(&err);
  if ((st = tsr_plan_verify(pl, m, &err)) != TSR_OK)
    FZ_FINDING("%s: the plan (tile %dx%d, mapping %s, tasks %s, split %d) fails verification: %s",
               what, o->tile_m, o->tile_n, tsr_plan_mapping_name(o->mapping),
               tsr_plan_tasks_name(o->tasks), o->split_tiles, err.text);
  return pl;
}

/* Replanning into a used plan gives what a fresh plan gives. */
static void check_update(tsr_plan *pl, const fuzz_problem *fp, const tsr_mask *m)
{
  tsr_error err = {0};
  tsr_plan_opts other = fp->o;
  tsr_plan *fresh;
  other.tasks = fp->o.tasks == TSR_TASKS_SPLIT ? TSR_TASKS_PACK : TSR_TASKS_SPLIT;
  other.split_tiles = 1;
  if (tsr_plan_update(pl, &fp->p, m, &other, &err) == TSR_OK &&
      tsr_plan_verify(pl, m, &err) != TSR_OK)
    FZ_FINDING("replanned with tasks %s: verification fails: %s",
               tsr_plan_tasks_name(other.tasks), err.text);
  tsr_error_clear(&err);
  if (tsr_plan_update(pl, &fp->p, m, &fp->o, &err) != TSR_OK)
    FZ_FINDING("replanning with the options of a plan that was made fails: %s", err.text);
  if (tsr_plan_verify(pl, m, &err) != TSR_OK)
    FZ_FINDING("replanned plan fails verification: %s", err.text);
  fresh = plan_verified(fp, m, &fp->o, 1, "fresh plan");
  check_same_plan(pl, fresh, "tsr_plan_update against tsr_plan_create");
  tsr_plan_destroy(fresh);
}

/* The detailed explanation is JSON. */
static void check_explain(const tsr_plan *pl)
{
  tsr_plan_summary s;
  char *text;
  json_t *j;
  json_error_t je;
  tsr_plan_summarize(pl, &s);
  if (s.tiles > 4096)
    return;
  text = tsr_plan_explain_json(pl, 1);
  if (!text)
    FZ_FINDING("tsr_plan_explain_json gave nothing");
  j = json_loads(text, 0, &je);
  if (!j)
    FZ_FINDING("tsr_plan_explain_json is not JSON: line %d: %s", je.line, je.text);
  json_decref(j);
  free(text);
}

/* The CPU executor against the reference on random q, k, v. */
static void check_exec(const tsr_plan *pl, const fuzz_problem *fp, const tsr_mask *m,
                       uint64_t seed)
{
  tsr_error err = {0};
  tsr_array q = {0}, k = {0}, v = {0}, ro = {0}, rl = {0}, co = {0}, cl = {0};
  tu_rng r = {seed};
  int64_t D = fp->p.head_dim;
  double eo, el;
  q.dtype = k.dtype = v.dtype = TSR_DT_F32;
  q.ndim = k.ndim = v.ndim = 4;
  q.shape[0] = k.shape[0] = v.shape[0] = fp->p.batch;
  q.shape[1] = fp->p.heads_q;
  k.shape[1] = v.shape[1] = fp->p.heads_kv;
  q.shape[2] = fp->p.seq_q;
  k.shape[2] = v.shape[2] = fp->p.seq_k;
  q.shape[3] = k.shape[3] = v.shape[3] = D;
  q.data = tu_rand_f32(&r, (size_t)tsr_array_numel(&q), 1.0);
  k.data = tu_rand_f32(&r, (size_t)tsr_array_numel(&k), 1.0);
  v.data = tu_rand_f32(&r, (size_t)tsr_array_numel(&v), 1.0);
  if (tsr_ref_attention(fp->g, m, &q, &k, &v, 0, &ro, &rl, &err) != TSR_OK)
    FZ_FINDING("the reference refuses a valid problem: %s", err.text);
  if (tsr_cpu_execute(pl, &q, &k, &v, &co, &cl, &err) != TSR_OK)
    FZ_FINDING("the CPU executor refuses a verified plan: %s", err.text);
  eo = tsr_ref_max_rel_error(&co, &ro);
  el = tsr_ref_max_rel_error(&cl, &rl);
  if (!(eo <= 1e-5 && el <= 1e-5))
    FZ_FINDING("CPU executor against the reference: output rel err %g, lse rel err %g", eo, el);
  tsr_npy_free(&q), tsr_npy_free(&k), tsr_npy_free(&v);
  tsr_npy_free(&ro), tsr_npy_free(&rl), tsr_npy_free(&co), tsr_npy_free(&cl);
}

/* Selection: the base plan and the embedded table's choice always plan. */
static void check_select(const fuzz_problem *fp, const tsr_mask *m, const tsr_features *f)
{
  tsr_error err = {0};
  tsr_plan_opts base;
  tsr_selection sel;
  tsr_status st;
  char *json;
  tsr_select_base(f, &base);
  tsr_plan_destroy(plan_verified(fp, m, &base, 1, "base plan"));
  st = tsr_select_plan(embedded, f, &sel, &err);
  FZ_CHECK_ERR(st, err, "tsr_select_plan");
  if (st != TSR_OK)
    FZ_FINDING("tsr_select_plan fails on a valid problem: %s", err.text);
  /* The table's row as it is: for variable blocks its mapping may not
   * apply (tessera.h), so only uniform geometries must plan. */
  tsr_plan_destroy(plan_verified(fp, m, &sel.opts, f->bq && f->bk, "embedded table's selection"));
  json = tsr_select_explain_json(f, &sel);
  if (!json)
    FZ_FINDING("tsr_select_explain_json gave nothing");
  free(json);
  /* The request path's options always plan. */
  tsr_error_clear(&err);
  st = tsr_select_request(embedded, f, NULL, &sel, &err);
  FZ_CHECK_ERR(st, err, "tsr_select_request");
  if (st != TSR_OK)
    FZ_FINDING("tsr_select_request fails on a valid problem: %s", err.text);
  tsr_plan_destroy(plan_verified(fp, m, &sel.opts, 1, "request path's selection"));
}

/* Gather (uniform blocks bq x bk on bq x 2bk tiles): planned wherever the
 * blocks make such a tile, the plan verifies and, on small problems, the
 * CPU executor agrees with the reference.  The control bytes' mappings do
 * not reach it (two bits: auto to subdivide), so every uniform input tries
 * it. */
static void check_gather(const fuzz_problem *fp, const tsr_mask *m, uint64_t seed)
{
  int64_t bq, bk;
  tsr_plan_opts o = fp->o;
  tsr_plan *pl;
  if (!tsr_geom_is_uniform(fp->g, &bq, &bk))
    return;
  o.mapping = TSR_MAP_GATHER;
  o.tile_m = o.tile_n = 0; /* the blocks' pair tile */
  pl = plan_verified(fp, m, &o, bq % 16 == 0 && bq <= 512 && bk % 16 == 0 && bk <= 256, "gather plan");
  if (pl && fp->exec)
    check_exec(pl, fp, m, seed);
  tsr_plan_destroy(pl);
}

/* A packed mask plans exactly like its byte form. */
static void check_packed_bytes(const fuzz_problem *fp, const tsr_mask *m, const tsr_plan *pl)
{
  tsr_error err = {0};
  tsr_mask *bm = NULL;
  tsr_plan *bp;
  if (tsr_mask_from_bytes(tsr_mask_batch(m), tsr_mask_heads(m), tsr_mask_nq(m), tsr_mask_nk(m),
                          tsr_mask_bits(m), &bm, &err) != TSR_OK)
    FZ_FINDING("the byte form of a packed mask is refused: %s", err.text);
  bp = plan_verified(fp, bm, &fp->o, 1, "byte form of a packed mask");
  check_same_plan(pl, bp, "packed mask against its byte form");
  tsr_plan_destroy(bp);
  tsr_mask_destroy(bm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  uint8_t c[FZ_MASK_CTL];
  tsr_error err = {0};
  tsr_mask *m = NULL;
  tsr_status st;
  tsr_features f;
  tsr_plan *pl;
  fuzz_problem fp;
  int packed;
  uint64_t seed = 1469598103934665603ull;
  size_t i;

  for (i = 0; i < size; i++)
    seed = (seed ^ data[i]) * 1099511628211ull;
  fz_ctl(&data, &size, c, sizeof c);
  fz_write(mask_path, data, size);
  packed = c[2] & FZ_M_PACKED;
  if (packed) {
    /* nk from the file's row bytes: 8 per byte, less up to 7 bits. */
    tsr_array a;
    int64_t nk;
    if (tsr_npy_load(mask_path, &a, &err) != TSR_OK || a.ndim < 1) {
      tsr_npy_free(&a);
      return 0;
    }
    nk = a.shape[a.ndim - 1] * 8 - (c[7] & 7);
    tsr_npy_free(&a);
    if (nk < 1 || nk > MAX_MASK_PAIRS)
      return 0;
    tsr_error_clear(&err);
    st = tsr_mask_load_packed(mask_path, nk, &m, &err);
  } else {
    st = tsr_mask_load(mask_path, &m, &err);
  }
  FZ_CHECK_ERR(st, err, packed ? "tsr_mask_load_packed" : "tsr_mask_load");
  if (st != TSR_OK)
    return 0;
  if (tsr_mask_batch(m) * tsr_mask_heads(m) * tsr_mask_nq(m) * tsr_mask_nk(m) > MAX_MASK_PAIRS ||
      !make_problem(c, m, &fp)) {
    tsr_mask_destroy(m);
    return 0;
  }
  check_save(m);

  tsr_error_clear(&err);
  if ((st = tsr_problem_check(&fp.p, &err)) != TSR_OK)
    FZ_FINDING("a bounded problem is refused: %s", err.text);
  if ((st = tsr_mask_check(m, fp.g, fp.p.batch, fp.p.heads_q, "mask", &err)) != TSR_OK)
    FZ_FINDING("a mask does not fit the problem made from it: %s", err.text);
  if ((st = tsr_features_compute(&fp.p, m, fp.o.num_sms, &f, &err)) != TSR_OK)
    FZ_FINDING("features fail on a mask that fits its problem: %s", err.text);

  pl = plan_verified(&fp, m, &fp.o, 0, "plan");
  if (pl) {
    check_explain(pl);
    if (packed)
      check_packed_bytes(&fp, m, pl);
    if (fp.exec)
      check_exec(pl, &fp, m, seed);
    check_update(pl, &fp, m);
    tsr_plan_destroy(pl);
  }
  check_select(&fp, m, &f);
  check_gather(&fp, m, seed);

  tsr_mask_destroy(m);
  tsr_geom_destroy(fp.g);
  return 0;
}

/*
 * tests/fuzz/fuzz_db.h: what the two database harnesses (fuzz_db_file,
 * fuzz_db_sql) do with a database file once they have written it:
 * open it as the runtime does and select plans from it for a fixed set of
 * masks, then plan and verify what was selected.  Header-only, static.
 *
 * Promises checked:
 *  - failures return a status with a message;
 *  - tsr_select_plan and tsr_select_request never fail for a valid
 *    problem, whatever table loaded (tessera.h);
 *  - a selection that plans gives a plan that verifies; through a context
 *    (its bundle check) a selection always plans.
 *
 * Work on the library's connections is bounded by the library itself
 * (runtime/db.c: views refused at open, a step budget on every statement),
 * which is one of the promises checked: a lookup table that is a recursive
 * VIEW must not hang the open.
 */
#ifndef TSR_FUZZ_DB_H
#define TSR_FUZZ_DB_H

#include <sqlite3.h>

#include "fuzz.h"
#include "plan_layout.h"

/* ---- the masks selected for ---------------------------------------------- */

typedef struct {
  tsr_geom *g;
  tsr_mask *m;
  tsr_problem p;
  tsr_features f;
} fz_case;

#define FZ_CASES 6
static fz_case fz_cases[FZ_CASES];
static int fz_verbose; /* $TSR_FUZZ_VERBOSE: print each selection (replaying an input) */
static char fz_bundle[700];

/* Geometries of the shipped table's regions and a few it lacks: uniform
 * (seq, bq, bk) or variable (bq = 0: sizes 1..2*bk around bk). */
static const struct {
  int64_t seq, bq, bk, heads, head_dim;
  tsr_dtype dtype;
  double density;
} fz_case_defs[FZ_CASES] = {
    {2304, 128, 128, 4, 64, TSR_DT_BF16, 0.4},  {3000, 128, 64, 2, 64, TSR_DT_BF16, 0.7},
    {2304, 0, 128, 2, 64, TSR_DT_BF16, 0.3},    {16384, 128, 128, 2, 128, TSR_DT_BF16, 0.5},
    {1000, 64, 64, 3, 64, TSR_DT_F16, 0.1},     {20000, 0, 256, 1, 128, TSR_DT_BF16, 0.6},
};

static void fz_case_make(int i, fz_case *c)
{
  tu_rng r = {0x7e55e7a + (uint64_t)i};
  tsr_error err = {0};
  int64_t nq, nk, j, sum = 0, *sizes = NULL;
  uint8_t *bits;
  tsr_status st;
  if (fz_case_defs[i].bq) {
    st = tsr_geom_uniform(fz_case_defs[i].seq, fz_case_defs[i].seq, fz_case_defs[i].bq,
                          fz_case_defs[i].bk, &c->g, &err);
  } else {
    sizes = malloc((size_t)fz_case_defs[i].seq * sizeof *sizes);
    for (nq = 0; sum < fz_case_defs[i].seq; nq++) {
      sizes[nq] = tu_range(&r, 1, 2 * fz_case_defs[i].bk);
      if (sum + sizes[nq] > fz_case_defs[i].seq)
        sizes[nq] = fz_case_defs[i].seq - sum;
      sum += sizes[nq];
    }
    st = tsr_geom_variable(sizes, nq, sizes, nq, &c->g, &err);
    free(sizes);
  }
  if (st != TSR_OK) {
    fprintf(stderr, "fuzz harness: cannot make geometry %d: %s\n", i, err.text);
    abort();
  }
  nq = tsr_geom_nq(c->g);
  nk = tsr_geom_nk(c->g);
  bits = tu_rand_bits(&r, (size_t)(fz_case_defs[i].heads * nq * nk), fz_case_defs[i].density);
  for (j = 0; j < fz_case_defs[i].heads * nq; j++)
    bits[j * nk + j % nk] = 1; /* no empty rows but by chance */
  st = tsr_mask_from_bytes(1, fz_case_defs[i].heads, nq, nk, bits, &c->m, &err);
  free(bits);
  memset(&c->p, 0, sizeof c->p);
  c->p.batch = 1;
  c->p.heads_q = c->p.heads_kv = fz_case_defs[i].heads;
  c->p.seq_q = c->p.seq_k = fz_case_defs[i].seq;
  c->p.head_dim = fz_case_defs[i].head_dim;
  c->p.dtype = fz_case_defs[i].dtype;
  c->p.layout = TSR_LAYOUT_BHSD;
  c->p.geom = c->g;
  if (st == TSR_OK)
    st = tsr_problem_check(&c->p, &err);
  if (st == TSR_OK)
    st = tsr_features_compute(&c->p, c->m, 132, &c->f, &err);
  if (st != TSR_OK) {
    fprintf(stderr, "fuzz harness: cannot make case %d: %s\n", i, err.text);
    abort();
  }
}

/* Masks, features and the bundle (registry only: a host-only context
 * reads no cubin): $TESSERA_BUNDLE when set (make fuzz sets the one
 * mkseeds writes from gen/catalog.json), else an empty registry, with
 * which every table row falls back to the automatic plan. */
static void fz_db_init(void)
{
  const char *b = getenv("TESSERA_BUNDLE");
  int i;
  fz_verbose = getenv("TSR_FUZZ_VERBOSE") != NULL;
  sqlite3_hard_heap_limit64((sqlite3_int64)256 << 20);
  for (i = 0; i < FZ_CASES; i++)
    fz_case_make(i, &fz_cases[i]);
  if (b && *b) {
    snprintf(fz_bundle, sizeof fz_bundle, "%s", b);
  } else {
    char reg[800], text[128];
    snprintf(fz_bundle, sizeof fz_bundle, "%s/bundle", fz_dir());
    mkdir(fz_bundle, 0700);
    snprintf(text, sizeof text, "{\"format\": 1, \"layout_version\": %d, \"variants\": []}\n",
             TSR_PLAN_LAYOUT_VERSION);
    fz_write(fz_path(reg, sizeof reg, fz_bundle, "registry.json"), text, strlen(text));
  }
}

/* Plans are deterministic in (problem, mask, options): each case remembers
 * the options it has planned (and verified) and how that went, so that the
 * few selections most tables give are planned once, not once an input. */
#define FZ_MEMO 256
typedef struct {
  int tile_m, tile_n, mapping, tasks, split, sms, planned;
} fz_memo;
static fz_memo fz_memos[FZ_CASES][FZ_MEMO];
static int fz_nmemo[FZ_CASES];

/* Plans case i with the selection; a plan that is made must verify. */
static void fz_plan_selection(int i, const tsr_selection *sel, int must, const char *what)
{
  const fz_case *c = &fz_cases[i];
  fz_memo key = {sel->opts.tile_m, sel->opts.tile_n, (int)sel->opts.mapping, (int)sel->opts.tasks,
                 sel->opts.split_tiles, sel->opts.num_sms, 0};
  tsr_error err = {0};
  tsr_plan *pl = NULL;
  tsr_status st;
  int k;
  for (k = 0; k < fz_nmemo[i]; k++) {
    fz_memo *m = &fz_memos[i][k];
    if (m->tile_m == key.tile_m && m->tile_n == key.tile_n && m->mapping == key.mapping &&
        m->tasks == key.tasks && m->split == key.split && m->sms == key.sms) {
      if (must && !m->planned)
        FZ_FINDING("%s: the selection (row %lld, tile %dx%d, %s, %s) does not plan", what,
                   (long long)sel->row_id, key.tile_m, key.tile_n,
                   tsr_plan_mapping_name(sel->opts.mapping), tsr_plan_tasks_name(sel->opts.tasks));
      return;
    }
  }
  st = tsr_plan_create(&c->p, c->m, &sel->opts, &pl, &err);
  FZ_CHECK_ERR(st, err, what);
  if (st != TSR_OK && must)
    FZ_FINDING("%s: the selection (row %lld, tile %dx%d, %s, %s) does not plan: %s", what,
               (long long)sel->row_id, sel->opts.tile_m, sel->opts.tile_n,
               tsr_plan_mapping_name(sel->opts.mapping), tsr_plan_tasks_name(sel->opts.tasks),
               err.text);
  if (st == TSR_OK && tsr_plan_verify(pl, c->m, &err) != TSR_OK)
    FZ_FINDING("%s: the plan of row %lld fails verification: %s", what, (long long)sel->row_id,
               err.text);
  tsr_plan_destroy(pl);
  key.planned = st == TSR_OK;
  if (fz_nmemo[i] < FZ_MEMO)
    fz_memos[i][fz_nmemo[i]++] = key;
}

static void fz_select_with(const tsr_selector *s)
{
  tsr_error err = {0};
  tsr_selection sel;
  tsr_status st;
  char *json;
  int i;
  (void)tsr_select_rows(s);
  (void)tsr_select_gpu(s);
  for (i = 0; i < FZ_CASES; i++) {
    const fz_case *c = &fz_cases[i];
    tsr_error_clear(&err);
    st = tsr_select_plan(s, &c->f, &sel, &err);
    FZ_CHECK_ERR(st, err, "tsr_select_plan");
    if (st != TSR_OK)
      FZ_FINDING("tsr_select_plan fails on a valid problem: %s", err.text);
    if (fz_verbose)
      fprintf(stderr, "case %d: %s (tile %dx%d %s %s)\n", i, sel.reason, sel.opts.tile_m,
              sel.opts.tile_n, tsr_plan_mapping_name(sel.opts.mapping),
              tsr_plan_tasks_name(sel.opts.tasks));
    fz_plan_selection(i, &sel, 0, "tsr_select_plan");
    json = tsr_select_explain_json(&c->f, &sel);
    if (!json)
      FZ_FINDING("tsr_select_explain_json gave nothing");
    free(json);
    tsr_error_clear(&err);
    st = tsr_select_request(s, &c->f, NULL, &sel, &err);
    FZ_CHECK_ERR(st, err, "tsr_select_request");
    if (st != TSR_OK)
      FZ_FINDING("tsr_select_request fails on a valid problem: %s", err.text);
    fz_plan_selection(i, &sel, 0, "tsr_select_request");
  }
}

/* Everything the runtime does with a lookup database at `path`. */
static void fz_db_select(const char *path)
{
  tsr_error err = {0};
  tsr_selector *s = NULL;
  tsr_context_opts co;
  tsr_context *ctx = NULL;
  tsr_selection sel;
  tsr_status st;
  int i;

  st = tsr_select_open(path, NULL, 0, &s, &err);
  FZ_CHECK_ERR(st, err, "tsr_select_open");
  if (fz_verbose && st != TSR_OK)
    fprintf(stderr, "tsr_select_open: %s\n", err.text);
  if (st == TSR_OK) {
    fz_select_with(s);
    tsr_select_destroy(s);
  }

  tsr_error_clear(&err);
  st = tsr_select_open(path, "NVIDIA H200", 132, &s, &err);
  FZ_CHECK_ERR(st, err, "tsr_select_open (NVIDIA H200)");
  if (st == TSR_OK) {
    fz_select_with(s);
    tsr_select_destroy(s);
  }

  tsr_error_clear(&err);
  tsr_context_opts_init(&co);
  co.device = TSR_CONTEXT_NO_DEVICE;
  co.bundle_dir = fz_bundle;
  co.db_path = path;
  st = tsr_context_create(&co, &ctx, &err);
  FZ_CHECK_ERR(st, err, "tsr_context_create");
  if (st != TSR_OK)
    return;
  (void)tsr_context_selector(ctx);
  for (i = 0; i < FZ_CASES; i++) {
    const fz_case *c = &fz_cases[i];
    tsr_error_clear(&err);
    /* From the mask for the short sequences, from the features computed
     * at start for the long ones (their features dominate the time). */
    st = c->p.seq_q <= 4096 ? tsr_context_select(ctx, &c->p, c->m, NULL, &sel, &err)
                            : tsr_context_select_features(ctx, &c->f, NULL, &sel, &err);
    FZ_CHECK_ERR(st, err, "tsr_context_select");
    if (fz_verbose && st == TSR_OK)
      fprintf(stderr, "context case %d: %s\n", i, sel.reason);
    if (st == TSR_OK)
      fz_plan_selection(i, &sel, 1, "tsr_context_select");
  }
  tsr_context_destroy(ctx);
}

#endif

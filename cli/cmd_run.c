/*
 * cmd_run.c: `tessera run`, attention over a logical mask from .npy files,
 * on the CPU reference, the CPU plan executor or the GPU.
 *
 * Everything the user hands in is checked here, before any work, with the
 * offending file named: tensors and mask are loaded, their sizes read into a
 * problem, the geometry built from the block sizes and the tensors' lengths,
 * and the mask checked against both.  --out and --lse are the outputs of
 * one transaction (runtime/files.h), opened before any work and renamed
 * into place together at the end: a failed run leaves no result behind and
 * every file that was there before as it was.  The plan of the cpu and gpu
 * backends is selected from the lookup table (the embedded default or
 * --db), as the library's request path does, unless the options fix it.
 * Cost: reading the inputs, the features of the mask and a table lookup
 * (microseconds), the chosen computation, and with --check one reference
 * computation more.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "files.h"

enum {
  O_BACKEND, O_MASK, O_BLOCK, O_QBLOCKS, O_KBLOCKS, O_Q, O_K, O_V, O_OUT, O_LSE, O_SCALE,
  O_TILE, O_MAPPING, O_TASKS, O_CHECK, O_DTYPE, O_NOSELECT, O_DB, O_EXPLAIN, O_PRECISION,
  O_COUNT
};

static const cli_opt run_opts[] = {
    [O_BACKEND] = {"--backend", "ref|cpu|gpu", "where to compute (default ref, the CPU reference)"},
    [O_MASK] = {"--mask", "M.npy", "logical block mask, bool/uint8 [H,NQ,NK] or [B,H,NQ,NK]"},
    [O_BLOCK] = {"--block", "BQ[xBK]", "uniform logical blocks of BQ x BK tokens (last one ragged)"},
    [O_QBLOCKS] = {"--q-blocks", "QS.npy", "variable query block sizes, 1-D int32/int64 (with --k-blocks)"},
    [O_KBLOCKS] = {"--k-blocks", "KS.npy", "variable key block sizes, 1-D int32/int64 (with --q-blocks)"},
    [O_Q] = {"--q", "Q.npy", "queries, float32/float16 [Hq,Sq,D] or [B,Hq,Sq,D]"},
    [O_K] = {"--k", "K.npy", "keys, [Hkv,Sk,D] or [B,Hkv,Sk,D]; Hq a multiple of Hkv"},
    [O_V] = {"--v", "V.npy", "values, same shape as the keys"},
    [O_OUT] = {"--out", "O.npy", "output, float32, shaped like the queries"},
    [O_LSE] = {"--lse", "L.npy", "also write the log-sum-exp, float32 [Hq,Sq] or [B,Hq,Sq]"},
    [O_SCALE] = {"--scale", "S", "score scale, a finite number (default and 0: 1/sqrt(D))"},
    [O_TILE] = {"--tile", "BMxBN", "cpu/gpu: physical tile (default: the planner chooses)"},
    [O_MAPPING] = {"--mapping", "auto|retain|combine|subdivide|gather", "cpu/gpu: physical mapping"},
    [O_TASKS] = {"--tasks", "auto|row|split|pack", "cpu/gpu: task organisation"},
    [O_CHECK] = {"--check", "TOL", "compare with the CPU reference; exit 1 above TOL"},
    [O_DTYPE] = {"--dtype", "bf16|fp16", "gpu: device element type (default fp16 for fp16 inputs, else bf16)"},
    [O_NOSELECT] = {"--no-select", NULL, "cpu/gpu: plan with the automatic planner, not the lookup table"},
    [O_DB] = {"--db", "FILE", "cpu/gpu: lookup database to select from (default: the embedded one)"},
    [O_EXPLAIN] = {"--explain", NULL, "cpu/gpu: print the mask's features, the table row hit and why"},
    [O_PRECISION] = {"--precision", "native|fp8",
                     "cpu/gpu: products in the dtype (default) or FP8: int8 Q K^T, e4m3 P V (cpu: its emulation)"},
    {NULL, NULL, NULL},
};

static const char synopsis[] =
    "[--backend ref|cpu|gpu] --mask M.npy (--block BQ[xBK] | --q-blocks QS.npy --k-blocks KS.npy)\n"
    "       --q Q.npy --k K.npy --v V.npy --out O.npy [--lse L.npy] [--scale S] [--check TOL]\n"
    "       [--tile BMxBN] [--mapping auto|retain|combine|subdivide|gather] [--tasks auto|row|split|pack]\n"
    "       [--dtype bf16|fp16] [--precision native|fp8] [--no-select | [--db FILE] [--explain]]";

static int pick(const char *val, const char *const *names, int n)
{
  int i;
  for (i = 0; i < n; i++)
    if (!strcmp(val, names[i]))
      return i;
  return -1;
}

/* Parses a finite floating-point number; 0 on success. */
static int parse_finite(const char *s, double *out)
{
  char *end;
  double v;
  errno = 0;
  v = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(v))
    return -1;
  *out = v;
  return 0;
}

/* Builds the geometry from --block or --q-blocks/--k-blocks and checks it
 * covers the tensors' lengths. */
static int make_geom(const char **val, const tsr_problem *p, tsr_geom **g)
{
  char qn[4200], kn[4200];
  snprintf(qn, sizeof qn, "q '%s'", val[O_Q]);
  snprintf(kn, sizeof kn, "k '%s'", val[O_K]);
  return cli_make_geom("run", val[O_BLOCK], val[O_QBLOCKS], val[O_KBLOCKS], p->seq_q, p->seq_k,
                       qn, kn, g);
}

/* Plan options from --tile, --mapping and --tasks. */
static tsr_status plan_opts(const char **val, tsr_plan_opts *po, tsr_error *err)
{
  static const char *const tasks[] = {"auto", "row", "split", "pack"};
  tsr_plan_opts o;
  tsr_plan_opts_init(&o);
  if (val[O_TILE]) {
    int64_t bm, bn;
    if (cli_parse_pair(val[O_TILE], &bm, &bn) || bm > 4096 || bn > 4096)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "invalid --tile '%s': expected BMxBN, positive integers up to 4096",
                           val[O_TILE]);
    o.tile_m = (int)bm;
    o.tile_n = (int)bn;
  }
  if (val[O_MAPPING]) {
    if (tsr_plan_parse_mapping(val[O_MAPPING], &o.mapping))
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "invalid --mapping '%s': expected auto, retain, combine, subdivide or gather",
                           val[O_MAPPING]);
  }
  if (val[O_TASKS]) {
    int i = pick(val[O_TASKS], tasks, 4);
    if (i < 0)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "invalid --tasks '%s': expected auto, row, split or pack", val[O_TASKS]);
    o.tasks = (tsr_tasks)i;
  }
  if (val[O_PRECISION] && tsr_precision_parse(val[O_PRECISION], &o.precision))
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid --precision '%s': expected native or fp8",
                         val[O_PRECISION]);
  *po = o;
  return TSR_OK;
}

/* The plan options: as asked (--tile, --mapping, --tasks), the automatic
 * planner's (--no-select), or selected from the lookup table: the
 * context's on the GPU (its device's rows, variants checked against its
 * bundle), else the table's only GPU, without a variant.  variant holds
 * the selected name (o->variant points there); `by` says where the plan
 * came from. */
static tsr_status choose_opts(const char **val, const tsr_problem *p, const tsr_mask *m,
                              tsr_context *ctx, tsr_plan_opts *o, char *variant, char *by,
                              size_t by_size, tsr_error *err)
{
  tsr_selector *sel = NULL;
  tsr_features f;
  tsr_selection c;
  tsr_status s;
  if (val[O_TILE] || val[O_MAPPING] || val[O_TASKS]) {
    snprintf(by, by_size, "as asked (--tile, --mapping, --tasks)");
    return TSR_OK;
  }
  if (val[O_NOSELECT]) {
    snprintf(by, by_size, "the automatic planner (--no-select)");
    return TSR_OK;
  }
  if ((s = tsr_features_compute(p, m, 0, &f, err)))
    return s;
  if (ctx) {
    s = tsr_context_select_features(ctx, &f, o, &c, err);
  } else if ((s = tsr_select_open(val[O_DB], NULL, 0, &sel, err)) == TSR_OK) {
    s = tsr_select_request(sel, &f, o, &c, err);
    c.variant[0] = '\0'; /* the CPU executor runs no kernel variant */
    c.opts.variant = NULL;
  }
  tsr_select_destroy(sel);
  if (s)
    return s;
  if (val[O_EXPLAIN])
    cli_print_selection(&f, &c);
  *o = c.opts;
  memcpy(variant, c.variant, sizeof c.variant);
  o->variant = variant[0] ? variant : NULL;
  if (c.from_table)
    snprintf(by, by_size, "%stable row %lld (level %d)", c.level == 1 ? "nearest region, " : "",
             (long long)c.row_id, c.level);
  else
    snprintf(by, by_size, "no usable table row: the automatic planner");
  return TSR_OK;
}

/* When an output is this process's standard output (--out /dev/stdout, or
 * a FIFO that stdout also writes), the messages go to stderr instead, so
 * the stream holds the .npy alone. */
static void messages_off_stdout(const char *const *outputs, int n)
{
  struct stat so, sp;
  int i;
  if (fstat(STDOUT_FILENO, &so) != 0)
    return;
  for (i = 0; i < n; i++)
    if (outputs[i] && stat(outputs[i], &sp) == 0 && sp.st_dev == so.st_dev &&
        sp.st_ino == so.st_ino) {
      fflush(stdout);
      dup2(STDERR_FILENO, STDOUT_FILENO);
      return;
    }
}

static void print_plan(const char *backend, const tsr_plan *pl, const char *by)
{
  tsr_plan_summary sum;
  tsr_plan_summarize(pl, &sum);
  printf("%s: plan %s %dx%d, %s tasks (%lld), %lld tiles; selected by %s\n", backend,
         tsr_plan_mapping_name(sum.mapping), sum.tile_m, sum.tile_n,
         tsr_plan_tasks_name(sum.tasks), (long long)sum.tasks_count, (long long)sum.tiles, by);
}

/* The CPU plan path: problem check, plan, execute. */
static tsr_status run_cpu(const char **val, tsr_problem *p, const tsr_mask *m,
                          const tsr_array *q, const tsr_array *k, const tsr_array *v,
                          tsr_array *out, tsr_array *lse, tsr_error *err)
{
  tsr_plan_opts o;
  tsr_plan *pl = NULL;
  char variant[96], by[128];
  tsr_status s = plan_opts(val, &o, err);
  if (s == TSR_OK)
    s = tsr_problem_check(p, err);
  if (s == TSR_OK)
    s = choose_opts(val, p, m, NULL, &o, variant, by, sizeof by, err);
  if (s == TSR_OK)
    s = tsr_plan_create(p, m, &o, &pl, err);
  if (s == TSR_OK)
    s = tsr_cpu_execute(pl, q, k, v, out, lse, err);
  if (s == TSR_OK)
    print_plan("cpu", pl, by);
  tsr_plan_destroy(pl);
  return s;
}

/* The GPU path: context (driver, bundle, lookup table), selection, plan for
 * the device's target, upload, launch, download (tsr_gpu_run_arrays). */
static tsr_status run_gpu(const char **val, tsr_problem *p, const tsr_mask *m,
                          const tsr_array *q, const tsr_array *k, const tsr_array *v,
                          tsr_array *out, tsr_array *lse, tsr_error *err)
{
  tsr_context_opts co;
  tsr_context *ctx = NULL;
  tsr_plan_opts o;
  tsr_plan *pl = NULL;
  char variant[96], by[128];
  tsr_status s = plan_opts(val, &o, err);
  if (s == TSR_OK)
    s = tsr_problem_check(p, err);
  if (s != TSR_OK)
    return s;
  tsr_context_opts_init(&co);
  co.db_path = val[O_DB];
  s = tsr_context_create(&co, &ctx, err);
  if (s == TSR_OK)
    s = choose_opts(val, p, m, ctx, &o, variant, by, sizeof by, err);
  if (s == TSR_OK)
    s = tsr_plan_create(p, m, &o, &pl, err);
  if (s == TSR_OK)
    s = tsr_gpu_run_arrays(ctx, pl, q, k, v, out, lse, err);
  if (s == TSR_OK) {
    tsr_plan_summary sum;
    tsr_plan_summarize(pl, &sum);
    print_plan("gpu", pl, by);
    printf("gpu: kernel %s, tile %dx%d, %lld tasks\n", sum.variant, sum.tile_m, sum.tile_n,
           (long long)sum.tasks_count);
  }
  tsr_plan_destroy(pl);
  tsr_context_destroy(ctx);
  return s;
}

static const char *const run_backends[] = {"ref", "cpu", "gpu"};

/* Checks every option of `tessera run` before any file is read: the required
 * ones are present, the values parse, and no option is given with one it
 * excludes.  Sets *backend (0 ref, 1 cpu, 2 gpu), *scale, *tol and
 * *dev_dtype from the options given (the caller's defaults otherwise).
 * Returns 0, or CLI_USAGE after printing the one-line error. */
static int check_run_opts(const char **val, int *backend, double *scale, double *tol,
                          tsr_dtype *dev_dtype)
{
  tsr_error err = {0};
  int i;

  for (i = O_MASK; i <= O_OUT; i++)
    if (!val[i] && i != O_BLOCK && i != O_QBLOCKS && i != O_KBLOCKS) {
      cli_errorf("run", "missing %s %s (try --help)", run_opts[i].name, run_opts[i].arg);
      return CLI_USAGE;
    }
  if (val[O_BACKEND] && (*backend = pick(val[O_BACKEND], run_backends, 3)) < 0) {
    cli_errorf("run", "invalid --backend '%s': expected ref, cpu or gpu", val[O_BACKEND]);
    return CLI_USAGE;
  }
  if (val[O_SCALE] && parse_finite(val[O_SCALE], scale)) {
    cli_errorf("run", "invalid --scale '%s': expected a finite number", val[O_SCALE]);
    return CLI_USAGE;
  }
  if (val[O_CHECK] && (parse_finite(val[O_CHECK], tol) || *tol < 0)) {
    cli_errorf("run", "invalid --check '%s': expected a non-negative tolerance", val[O_CHECK]);
    return CLI_USAGE;
  }
  if (*backend == 0 && (val[O_TILE] || val[O_MAPPING] || val[O_TASKS])) {
    cli_errorf("run", "--tile, --mapping and --tasks need --backend cpu or gpu");
    return CLI_USAGE;
  }
  if (*backend == 0 && (val[O_NOSELECT] || val[O_DB] || val[O_EXPLAIN])) {
    cli_errorf("run", "--no-select, --db and --explain need --backend cpu or gpu");
    return CLI_USAGE;
  }
  if (val[O_NOSELECT] && (val[O_DB] || val[O_EXPLAIN])) {
    cli_errorf("run", "--no-select excludes --db and --explain (they select from the table)");
    return CLI_USAGE;
  }
  if ((val[O_DB] || val[O_EXPLAIN]) && (val[O_TILE] || val[O_MAPPING] || val[O_TASKS])) {
    cli_errorf("run", "--db and --explain select the plan: drop --tile, --mapping and --tasks");
    return CLI_USAGE;
  }
  if (val[O_DTYPE] && (tsr_dtype_parse(val[O_DTYPE], dev_dtype) ||
                       (*dev_dtype != TSR_DT_BF16 && *dev_dtype != TSR_DT_F16))) {
    cli_errorf("run", "invalid --dtype '%s': expected bf16 or fp16", val[O_DTYPE]);
    return CLI_USAGE;
  }
  if (val[O_DTYPE] && *backend != 2 && !(*backend == 1 && val[O_PRECISION])) {
    cli_errorf("run", "--dtype needs --backend gpu (or cpu with --precision)");
    return CLI_USAGE;
  }
  if (val[O_LSE] && !strcmp(val[O_LSE], val[O_OUT])) {
    cli_errorf("run", "--out and --lse name the same file '%s'", val[O_OUT]);
    return CLI_USAGE;
  }
  {
    tsr_plan_opts po;
    if (plan_opts(val, &po, &err) != TSR_OK || tsr_plan_opts_check(&po, &err) != TSR_OK) {
      cli_errorf("run", "%s", err.text);
      return CLI_USAGE;
    }
    /* No silent float64 run for an fp8 request: only the plan backends
     * have FP8 (the cpu one emulates the device's). */
    if (po.precision != TSR_PREC_NATIVE && *backend == 0) {
      cli_errorf("run", "--precision '%s' needs --backend cpu (its emulation) or gpu: the "
                 "reference computes in float64", val[O_PRECISION]);
      return CLI_USAGE;
    }
  }
  if (val[O_BLOCK] && cli_check_block("run", val[O_BLOCK]))
    return CLI_USAGE;
  return 0;
}

int cmd_run(int argc, char **argv)
{
  const char *val[O_COUNT];
  const char *names[3];
  tsr_array q, k, v, out, lse;
  tsr_out *outs = NULL;
  FILE *fo = NULL, *fl = NULL;
  tsr_mask *m = NULL;
  tsr_geom *g = NULL;
  tsr_problem p;
  tsr_dtype dev_dtype = TSR_DT_BF16; /* --dtype */
  tsr_error err = {0};
  tsr_status s;
  double scale = 0, tol = 0;
  int backend = 0, rc = CLI_USAGE, i;

  memset(&q, 0, sizeof q), memset(&k, 0, sizeof k), memset(&v, 0, sizeof v);
  memset(&out, 0, sizeof out), memset(&lse, 0, sizeof lse);
  i = cli_parse("run", synopsis, run_opts, val, argc, argv);
  if (i)
    return i > 0 ? CLI_OK : CLI_USAGE;
  /* Every option is checked before any file is read. */
  if (check_run_opts(val, &backend, &scale, &tol, &dev_dtype))
    return CLI_USAGE;

  if (tsri_out_begin(&outs, &err) || tsri_out_file(outs, val[O_OUT], 0, &fo, &err) ||
      (val[O_LSE] && tsri_out_file(outs, val[O_LSE], 0, &fl, &err))) {
    cli_errorf("run", "%s", err.text);
    goto done;
  }
  messages_off_stdout((const char *const[]){val[O_OUT], val[O_LSE]}, 2);
  names[0] = val[O_Q], names[1] = val[O_K], names[2] = val[O_V];
  memset(&p, 0, sizeof p);
  if (tsr_npy_load(val[O_Q], &q, &err) || tsr_npy_load(val[O_K], &k, &err) ||
      tsr_npy_load(val[O_V], &v, &err) || tsr_problem_from_arrays(&p, &q, &k, &v, names, &err) ||
      tsr_mask_load(val[O_MASK], &m, &err)) {
    cli_errorf("run", "%s", err.text);
    goto done;
  }
  if (make_geom(val, &p, &g))
    goto done;
  if (tsr_mask_check(m, g, p.batch, p.heads_q, val[O_MASK], &err)) {
    cli_errorf("run", "%s", err.text);
    goto done;
  }
  p.scale = scale;
  p.dtype = val[O_DTYPE] ? dev_dtype : q.dtype == TSR_DT_F16 ? TSR_DT_F16 : TSR_DT_BF16;
  p.layout = TSR_LAYOUT_BHSD;
  p.geom = g;

  if (backend == 0) {
    s = tsr_ref_attention(g, m, &q, &k, &v, scale, &out, val[O_LSE] ? &lse : NULL, &err);
  } else if (backend == 1) {
    s = run_cpu(val, &p, m, &q, &k, &v, &out, val[O_LSE] ? &lse : NULL, &err);
  } else {
    s = run_gpu(val, &p, m, &q, &k, &v, &out, val[O_LSE] ? &lse : NULL, &err);
  }
  if (s != TSR_OK) {
    cli_errorf("run", "%s backend failed: %s", run_backends[backend], err.text);
    rc = cli_status_exit(s);
    goto done;
  }
  if (val[O_CHECK]) {
    tsr_array ro, rl;
    double e_out, e_lse = 0;
    s = tsr_ref_attention(g, m, &q, &k, &v, scale, &ro, val[O_LSE] ? &rl : NULL, &err);
    if (s != TSR_OK) {
      cli_errorf("run", "reference failed: %s", err.text);
      goto done;
    }
    e_out = tsr_ref_max_rel_error(&out, &ro);
    if (val[O_LSE])
      e_lse = tsr_ref_max_rel_error(&lse, &rl);
    tsr_npy_free(&ro);
    if (val[O_LSE])
      tsr_npy_free(&rl);
    printf("max relative error vs reference: out %.3g%s", e_out, val[O_LSE] ? "" : "\n");
    if (val[O_LSE])
      printf(", lse %.3g\n", e_lse);
    if (!(e_out <= tol && e_lse <= tol)) {
      cli_errorf("run", "check failed: relative error %.3g exceeds %g",
                 e_out > e_lse ? e_out : e_lse, tol);
      rc = CLI_FAIL;
      goto done;
    }
  }
  s = tsri_npy_write(fo, val[O_OUT], &out, &err);
  if (s == TSR_OK && val[O_LSE])
    s = tsri_npy_write(fl, val[O_LSE], &lse, &err);
  if (s == TSR_OK) {
    s = tsri_out_commit(outs, &err);
    outs = NULL;
  }
  if (s != TSR_OK) {
    cli_errorf("run", "%s", err.text);
    goto done;
  }
  printf("%s: batch %lld, heads %lld/%lld, %lld x %lld tokens, head dim %lld, %lld x %lld blocks, "
         "density %.4f; wrote '%s'%s%s%s\n",
         run_backends[backend], (long long)p.batch, (long long)p.heads_q, (long long)p.heads_kv,
         (long long)p.seq_q, (long long)p.seq_k, (long long)p.head_dim, (long long)tsr_geom_nq(g),
         (long long)tsr_geom_nk(g), tsr_mask_density(m), val[O_OUT],
         val[O_LSE] ? " and '" : "", val[O_LSE] ? val[O_LSE] : "", val[O_LSE] ? "'" : "");
  rc = CLI_OK;
done:
  tsri_out_abort(outs);
  tsr_npy_free(&q), tsr_npy_free(&k), tsr_npy_free(&v);
  tsr_npy_free(&out), tsr_npy_free(&lse);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  return rc;
}

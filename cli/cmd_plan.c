/*
 * cmd_plan.c: `tessera plan`, a logical mask mapped onto physical tiles and
 * organised into tasks, then summarised (tiles, wasted fraction, tasks,
 * split rows, balance over the multiprocessors), explained as JSON,
 * verified on the CPU (exit 1 naming the first violation) or timed.
 *
 * The problem comes from the mask (batch, heads) and the options (lengths,
 * head dim, KV heads, block geometry).  --mask-bits reads a mask of packed
 * bits (numpy.packbits(m, axis=-1, bitorder='little')), which the planner
 * uses as it is, without the pass over a byte per block pair.  Cost: loading the mask, one plan
 * (O(mask bytes / 16 + tiles)), with --verify one verification and with
 * --bench about half a second of repeated planning.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "plan_impl.h"

enum {
  O_MASK, O_MASKBITS, O_BLOCK, O_QBLOCKS, O_KBLOCKS, O_SEQ, O_SEQK, O_HEADDIM, O_HEADS, O_HEADSKV, O_ARCH,
  O_TILE, O_MAPPING, O_TASKS, O_SPLIT, O_SMS, O_VERIFY, O_JSON, O_DETAIL, O_BENCH, O_SELECT,
  O_EXPLAIN, O_DB, O_GPU, O_COUNT
};

#define SMS_TEXT_(n) #n
#define SMS_TEXT(n) SMS_TEXT_(n) /* the macro's value as a string */

static const cli_opt plan_opts[] = {
    [O_MASK] = {"--mask", "M.npy", "logical block mask, bool/uint8 [H,NQ,NK] or [B,H,NQ,NK]"},
    [O_MASKBITS] = {"--mask-bits", NULL, "the mask holds packed bits: uint8 [H,NQ,NK/8] or [B,H,NQ,NK/8], LSB first"},
    [O_BLOCK] = {"--block", "BQ[xBK]", "uniform logical blocks of BQ x BK tokens (last one ragged)"},
    [O_QBLOCKS] = {"--q-blocks", "QS.npy", "variable query block sizes, 1-D int32/int64 (with --k-blocks)"},
    [O_KBLOCKS] = {"--k-blocks", "KS.npy", "variable key block sizes, 1-D int32/int64 (with --q-blocks)"},
    [O_SEQ] = {"--seq", "S", "query tokens (and key tokens unless --seq-k); implied by --q-blocks"},
    [O_SEQK] = {"--seq-k", "SK", "key tokens (default: --seq)"},
    [O_HEADDIM] = {"--head-dim", "D", "head dimension"},
    [O_HEADS] = {"--heads", "N", "query heads (default: the mask's heads)"},
    [O_HEADSKV] = {"--heads-kv", "N", "key/value heads, dividing the query heads (default: equal)"},
    [O_ARCH] = {"--arch", "ARCH", "target GPU architecture (default sm_90a)"},
    [O_TILE] = {"--tile", "BMxBN", "physical tile (default: retain 64/128 blocks, else 128x128)"},
    [O_MAPPING] = {"--mapping", "auto|retain|combine|subdivide|gather", "physical mapping (default auto)"},
    [O_TASKS] = {"--tasks", "auto|row|split|pack", "task organisation (default auto)"},
    [O_SPLIT] = {"--split", "N", "most key tiles per split chunk (default: the planner's choice)"},
    [O_SMS] = {"--sms", "N", "multiprocessors of the persistent grid (default " SMS_TEXT(TSR_DEFAULT_NUM_SMS) ", an H200)"},
    [O_VERIFY] = {"--verify", NULL, "prove exact coverage on the CPU; exit 1 naming the first violation"},
    [O_JSON] = {"--json", NULL, "print the plan as JSON instead of the summary"},
    [O_DETAIL] = {"--detail", NULL, "with --json: include the task, tile, member, merge arrays"},
    [O_BENCH] = {"--bench", NULL, "time planning (median of repeated runs) per mask"},
    [O_SELECT] = {"--select", NULL, "tile, mapping and tasks from the lookup table (unless given)"},
    [O_EXPLAIN] = {"--explain", NULL, "select as --select does and print the features, the row hit, why"},
    [O_DB] = {"--db", "FILE", "lookup database for --select (default: the embedded one)"},
    [O_GPU] = {"--gpu", "NAME", "GPU whose table --select reads (default: the table's only GPU)"},
    {NULL, NULL, NULL},
};

static const char synopsis[] =
    "--mask M.npy [--mask-bits] (--block BQ[xBK] --seq S [--seq-k SK] |\n"
    "       --q-blocks QS.npy --k-blocks KS.npy)\n"
    "       --head-dim D [--heads N] [--heads-kv N] [--arch sm_90a] [--tile BMxBN]\n"
    "       [--mapping auto|retain|combine|subdivide|gather] [--tasks auto|row|split|pack] [--split N]\n"
    "       [--sms N] [--verify] [--json [--detail]] [--bench]\n"
    "       [--select|--explain [--db FILE] [--gpu NAME]]";

/* A positive integer option that fits an int (limit `max`); 0 on success. */
static int int_opt(const char *val, const char *name, int64_t max, int64_t *out)
{
  if (cli_parse_i64(val, out, 0) || *out > max) {
    cli_errorf("plan", "invalid %s '%s': expected a positive integer up to %lld", name, val,
               (long long)max);
    return -1;
  }
  return 0;
}

/* The sizes the options give (0 where absent), checked before any file is
 * read: --seq, --seq-k, --heads, --heads-kv and the syntax of --block. */
typedef struct {
  int64_t sq, sk, heads, heads_kv;
} plan_sizes;

static int parse_sizes(const char **val, plan_sizes *z)
{
  memset(z, 0, sizeof *z);
  if (val[O_SEQ] && int_opt(val[O_SEQ], "--seq", TSR_MAX_SEQ, &z->sq))
    return -1;
  if (val[O_SEQK] && int_opt(val[O_SEQK], "--seq-k", TSR_MAX_SEQ, &z->sk))
    return -1;
  if (!z->sk)
    z->sk = z->sq;
  if (val[O_HEADS] && int_opt(val[O_HEADS], "--heads", 65536, &z->heads))
    return -1;
  if (val[O_HEADSKV] && int_opt(val[O_HEADSKV], "--heads-kv", 65536, &z->heads_kv))
    return -1;
  if (val[O_BLOCK] && !z->sq && !val[O_QBLOCKS] && !val[O_KBLOCKS]) {
    cli_errorf("plan", "missing --seq S: --block needs the sequence length");
    return -1;
  }
  return val[O_BLOCK] ? cli_check_block("plan", val[O_BLOCK]) : 0;
}

/* The geometry from --block + --seq[/--seq-k] or --q-blocks + --k-blocks. */
static int make_geom(const char **val, const plan_sizes *z, tsr_geom **g)
{
  return cli_make_geom("plan", val[O_BLOCK], val[O_QBLOCKS], val[O_KBLOCKS], z->sq, z->sk, "--seq",
                       val[O_SEQK] ? "--seq-k" : "--seq", g);
}

/* Options into tsr_plan_opts; 0 on success. */
static int make_opts(const char **val, tsr_plan_opts *o)
{
  int64_t x, y;
  tsr_plan_opts_init(o);
  if (val[O_TILE]) {
    if (cli_parse_pair(val[O_TILE], &x, &y) || x > 4096 || y > 4096) {
      cli_errorf("plan", "invalid --tile '%s': expected BMxBN, positive integers up to 4096",
                 val[O_TILE]);
      return -1;
    }
    o->tile_m = (int)x;
    o->tile_n = (int)y;
  }
  if (val[O_MAPPING] && tsr_plan_parse_mapping(val[O_MAPPING], &o->mapping)) {
    cli_errorf("plan", "invalid --mapping '%s': expected auto, retain, combine, subdivide or gather",
               val[O_MAPPING]);
    return -1;
  }
  if (val[O_TASKS] && tsr_plan_parse_tasks(val[O_TASKS], &o->tasks)) {
    cli_errorf("plan", "invalid --tasks '%s': expected auto, row, split or pack", val[O_TASKS]);
    return -1;
  }
  if (val[O_SPLIT]) {
    if (int_opt(val[O_SPLIT], "--split", INT32_MAX, &x))
      return -1;
    o->split_tiles = (int)x;
  }
  if (val[O_SMS]) {
    if (int_opt(val[O_SMS], "--sms", 65536, &x))
      return -1;
    o->num_sms = (int)x;
  }
  if (val[O_ARCH]) {
    const char *a = val[O_ARCH];
    size_t n = strlen(a), i = 3;
    int ok = n >= 5 && n < 16 && !strncmp(a, "sm_", 3);
    while (ok && i < n && a[i] >= '0' && a[i] <= '9')
      i++;
    ok = ok && i > 4 && (i == n || (i + 1 == n && a[i] == 'a'));
    if (!ok) {
      cli_errorf("plan", "invalid --arch '%s': expected sm_NN or sm_NNa, e.g. sm_90a", a);
      return -1;
    }
    o->arch = a;
  }
  {
    tsr_error err = {0};
    if (tsr_plan_opts_check(o, &err) != TSR_OK) {
      cli_errorf("plan", "%s", err.text);
      return -1;
    }
  }
  return 0;
}

static double now_us(clockid_t clk)
{
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Times the request path: one first plan (fresh memory), then replanning
 * the same mask into that plan (tsr_plan_update, as a runtime does every
 * layer and step) for about half a second, at least 5 and at most 2000
 * times; prints median and best wall time, and the median CPU time of the
 * thread, which on a busy machine excludes the time others hold the core. */
static int bench(const tsr_problem *p, const tsr_mask *m, const tsr_plan_opts *o,
                 const tsr_plan_summary *s)
{
  enum { MAX_RUNS = 2000 };
  static double wall[MAX_RUNS], cpu[MAX_RUNS];
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  double start = now_us(CLOCK_MONOTONIC), first;
  int n = 0;
  if (tsr_plan_create(p, m, o, &pl, &err) != TSR_OK) {
    cli_errorf("plan", "%s", err.text);
    return cli_status_exit(err.status);
  }
  first = now_us(CLOCK_MONOTONIC) - start;
  start = now_us(CLOCK_MONOTONIC);
  while (n < MAX_RUNS && (n < 5 || now_us(CLOCK_MONOTONIC) - start < 5e5)) {
    double t0 = now_us(CLOCK_MONOTONIC), c0 = now_us(CLOCK_THREAD_CPUTIME_ID);
    if (tsr_plan_update(pl, p, m, o, &err) != TSR_OK) {
      cli_errorf("plan", "%s", err.text);
      tsr_plan_destroy(pl);
      return cli_status_exit(err.status);
    }
    cpu[n] = now_us(CLOCK_THREAD_CPUTIME_ID) - c0;
    wall[n++] = now_us(CLOCK_MONOTONIC) - t0;
  }
  tsr_plan_destroy(pl);
  qsort(wall, (size_t)n, sizeof wall[0], cmp_double);
  qsort(cpu, (size_t)n, sizeof cpu[0], cmp_double);
  printf("bench: replanning %.1f us median (best %.1f, cpu %.1f) over %d runs, first plan %.1f us; "
         "%lld mask blocks, %lld tiles, %lld tasks\n",
         wall[n / 2], wall[0], cpu[n / 2], n, first,
         (long long)(tsr_mask_batch(m) * tsr_mask_heads(m) * tsr_mask_nq(m) * tsr_mask_nk(m)),
         (long long)s->tiles, (long long)s->tasks_count);
  return CLI_OK;
}

/* Fills the tile, mapping and task layout the user left open from the
 * lookup table; prints the features, the row hit and the reason when
 * explaining.  0 on success. */
static int select_plan(const char **val, const tsr_problem *p, const tsr_mask *m,
                       tsr_plan_opts *o, char **explain_json)
{
  tsr_selector *sel = NULL;
  tsr_features f;
  tsr_selection c;
  tsr_error err = {0};
  if (tsr_features_compute(p, m, o->num_sms, &f, &err) != TSR_OK ||
      tsr_select_open(val[O_DB], val[O_GPU], 0, &sel, &err) != TSR_OK ||
      tsr_select_plan(sel, &f, &c, &err) != TSR_OK) {
    cli_errorf("plan", "cannot select a plan for '%s': %s", val[O_MASK], err.text);
    tsr_select_destroy(sel);
    return -1;
  }
  tsr_select_destroy(sel);
  if (!val[O_TILE]) {
    o->tile_m = c.opts.tile_m;
    o->tile_n = c.opts.tile_n;
  }
  if (!val[O_MAPPING])
    o->mapping = c.opts.mapping;
  if (!val[O_TASKS])
    o->tasks = c.opts.tasks;
  if (val[O_EXPLAIN] && val[O_JSON]) {
    *explain_json = tsr_select_explain_json(&f, &c);
  } else if (val[O_EXPLAIN]) {
    cli_print_selection(&f, &c);
  }
  return 0;
}

static void print_summary(const tsr_problem *p, const tsr_plan *pl, const tsr_plan_summary *s,
                          const char *mask)
{
  int64_t bq, bk;
  const tsr_geom *g = p->geom;
  const char *how = s->combined && s->subdivided ? "combine+subdivide"
                    : s->mapping == TSR_MAP_RETAIN ? "retain (tiles are the blocks)"
                    : s->mapping == TSR_MAP_GATHER ? "gather (a tile pairs two selected key blocks)"
                    : s->combined ? "combine (tiles span several blocks or parts of them)"
                                  : "subdivide (blocks span several tiles)";
  printf("problem: mask '%s', batch %lld, heads %lld/%lld, %lld x %lld tokens, head dim %lld, "
         "arch %s\n",
         mask, (long long)p->batch, (long long)p->heads_q, (long long)p->heads_kv,
         (long long)p->seq_q, (long long)p->seq_k, (long long)p->head_dim,
         pl->arch);
  if (tsr_geom_is_uniform(g, &bq, &bk))
    printf("blocks: uniform %lldx%lld, %lld x %lld blocks\n", (long long)bq, (long long)bk,
           (long long)tsr_geom_nq(g), (long long)tsr_geom_nk(g));
  else
    printf("blocks: variable, %lld x %lld blocks\n", (long long)tsr_geom_nq(g),
           (long long)tsr_geom_nk(g));
  printf("tile: %dx%d, mapping %s\n", s->tile_m, s->tile_n, how);
  printf("tiles: %lld (%lld partial, %lld membership words), wasted fraction %.4f\n",
         (long long)s->tiles, (long long)s->partial_tiles, (long long)s->membership_words,
         s->wasted_fraction);
  printf("tasks: %lld (%s), %lld members, %lld split rows (%lld merges, %lld slots), %lld empty "
         "rows\n",
         (long long)s->tasks_count, tsr_plan_tasks_name(s->tasks), (long long)s->members,
         (long long)s->split_rows, (long long)s->merges, (long long)s->slots,
         (long long)s->empty_rows);
  printf("balance: %.3f (max / mean load over %d multiprocessors)\n", s->balance,
         pl->num_sms);
  printf("variant: %s\n", s->variant[0] ? s->variant : "(chosen at launch)");
}

int cmd_plan(int argc, char **argv)
{
  const char *val[O_COUNT];
  tsr_mask *m = NULL;
  tsr_geom *g = NULL;
  tsr_plan *pl = NULL;
  tsr_plan_opts o;
  tsr_plan_summary s;
  tsr_problem p;
  tsr_error err = {0};
  plan_sizes z;
  int rc = CLI_USAGE, i;
  char *explain = NULL;

  i = cli_parse("plan", synopsis, plan_opts, val, argc, argv);
  if (i)
    return i > 0 ? CLI_OK : CLI_USAGE;
  if (!val[O_MASK]) {
    cli_errorf("plan", "missing --mask M.npy (try --help)");
    return CLI_USAGE;
  }
  if (!val[O_HEADDIM]) {
    cli_errorf("plan", "missing --head-dim D (try --help)");
    return CLI_USAGE;
  }
  if (val[O_DETAIL] && !val[O_JSON]) {
    cli_errorf("plan", "--detail needs --json");
    return CLI_USAGE;
  }
  memset(&p, 0, sizeof p);
  if (int_opt(val[O_HEADDIM], "--head-dim", 1024, &p.head_dim) || make_opts(val, &o) ||
      parse_sizes(val, &z))
    return CLI_USAGE;
  if (val[O_MASKBITS]) {
    /* Packed rows do not say how many key blocks they hold: the geometry does. */
    if (make_geom(val, &z, &g))
      goto done;
    if (tsr_mask_load_packed(val[O_MASK], tsr_geom_nk(g), &m, &err)) {
      cli_errorf("plan", "%s", err.text);
      goto done;
    }
  } else {
    if (tsr_mask_load(val[O_MASK], &m, &err)) {
      cli_errorf("plan", "%s", err.text);
      goto done;
    }
    if (make_geom(val, &z, &g))
      goto done;
  }
  p.batch = tsr_mask_batch(m);
  p.heads_q = z.heads ? z.heads : tsr_mask_heads(m);
  p.heads_kv = p.heads_q;
  if (z.heads_kv) {
    if (p.heads_q % z.heads_kv) {
      cli_errorf("plan", "invalid --heads-kv %lld: %lld query heads are not a multiple of it",
                 (long long)z.heads_kv, (long long)p.heads_q);
      goto done;
    }
    p.heads_kv = z.heads_kv;
  }
  p.seq_q = tsr_geom_seq_q(g);
  p.seq_k = tsr_geom_seq_k(g);
  p.dtype = TSR_DT_BF16;
  p.layout = TSR_LAYOUT_BHSD;
  p.geom = g;
  if (tsr_mask_check(m, g, p.batch, p.heads_q, val[O_MASK], &err)) {
    cli_errorf("plan", "%s", err.text);
    goto done;
  }
  /* Explaining is explaining a selection: --explain selects. */
  if (val[O_EXPLAIN])
    val[O_SELECT] = val[O_EXPLAIN];
  if ((val[O_DB] || val[O_GPU]) && !val[O_SELECT]) {
    cli_errorf("plan", "--db and --gpu need --select or --explain");
    goto done;
  }
  if (val[O_SELECT] && select_plan(val, &p, m, &o, &explain))
    goto done;
  if (tsr_plan_create(&p, m, &o, &pl, &err)) {
    cli_errorf("plan", "cannot plan '%s': %s", val[O_MASK], err.text);
    rc = cli_status_exit(err.status);
    goto done;
  }
  tsr_plan_summarize(pl, &s);
  if (val[O_JSON]) {
    char *text = tsr_plan_explain_json(pl, val[O_DETAIL] != NULL);
    if (!text) {
      cli_errorf("plan", "cannot explain the plan as JSON: out of memory");
      goto done;
    }
    if (explain)
      printf("{\"selection\": %s,\n\"plan\": %s}\n", explain, text);
    else
      printf("%s\n", text);
    free(text);
  } else {
    print_summary(&p, pl, &s, val[O_MASK]);
  }
  if (val[O_VERIFY]) {
    cli_test_damage_plan(pl);
    if (tsr_plan_verify(pl, m, &err)) {
      cli_errorf("plan", "verification failed: %s", err.text);
      rc = cli_status_exit(err.status);
      goto done;
    }
    if (!val[O_JSON])
      printf("verify: ok, %.0f selected token pairs covered exactly once, nothing unselected "
             "reaches the output\n",
             s.selected_pairs);
  }
  rc = val[O_BENCH] ? bench(&p, m, &o, &s) : CLI_OK;
done:
  free(explain);
  tsr_plan_destroy(pl);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  return rc;
}

/*
 * check_exec.c: the CPU plan executor (tsr_cpu_execute) against the CPU
 * reference (tsr_ref_attention, float64 accumulation) over random problems:
 * every geometry kind, tile shape, mapping (gather on its own uniform
 * cases) and task layout, GQA, broadcast masks, empty rows and heads,
 * cross lengths.  Outputs must agree within
 * 1e-5 relative (max |diff| / max |ref|) and lse likewise, with -inf in
 * exactly the same places; a row the plan forgets stays NaN (the executor
 * poisons its outputs) and fails.
 *
 * Non-finite inputs (test_exec_nonfinite): NaN or inf at random selected
 * places of q, k or v; over plans that subdivide, combine, split rows and
 * merge, the executor must give NaN and inf exactly where the reference
 * does (the rules of runtime/ref.c), and the same values elsewhere.
 */
#include <check.h>

#include "plan_cases.h"
#include "plan_impl.h"

static void rand_array(tu_rng *r, tsr_array *a, int64_t b, int64_t h, int64_t s, int64_t d)
{
  memset(a, 0, sizeof *a);
  a->dtype = TSR_DT_F32;
  a->ndim = 4;
  a->shape[0] = b;
  a->shape[1] = h;
  a->shape[2] = s;
  a->shape[3] = d;
  a->data = tu_rand_f32(r, (size_t)(b * h * s * d), 1.0);
}

static double rel_err_f32(const tsr_array *got, const tsr_array *want)
{
  int64_t n = tsr_array_numel(want), i;
  double *w = malloc((size_t)n * sizeof *w), e;
  for (i = 0; i < n; i++)
    w[i] = ((const float *)want->data)[i];
  e = tu_rel_err(got->data, w, (size_t)n);
  free(w);
  return e;
}

/* A test's case, inputs and reference outputs. */
static void free_case(pc_case *c, tsr_array *q, tsr_array *k, tsr_array *v, tsr_array *ro, tsr_array *rl)
{
  tsr_npy_free(q);
  tsr_npy_free(k);
  tsr_npy_free(v);
  tsr_npy_free(ro);
  tsr_npy_free(rl);
  pc_free(c);
}

/* Plans with (tile, mapping, tasks, split), executes, compares with ref.
 * Returns 1 when the combination ran, 0 when the mapping did not fit. */
static int run_combo(const pc_case *c, const tsr_array *q, const tsr_array *k, const tsr_array *v,
                     const tsr_array *ro, const tsr_array *rl, int tm, int tn, tsr_mapping mp,
                     tsr_tasks tk, int split, int sms)
{
  tsr_plan_opts o;
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  tsr_array out, lse;
  tsr_status st;
  double eo, el;
  tsr_plan_opts_init(&o);
  o.tile_m = tm;
  o.tile_n = tn;
  o.mapping = mp;
  o.tasks = tk;
  o.split_tiles = split;
  o.num_sms = sms;
  st = tsr_plan_create(&c->p, c->m, &o, &pl, &err);
  if (st == TSR_ERR_UNSUPPORTED && mp != TSR_MAP_AUTO)
    return 0;
  ck_assert_msg(st == TSR_OK, "%s tile %dx%d %s/%s: plan failed: %s", c->what, o.tile_m, o.tile_n,
                tsr_plan_mapping_name(mp), tsr_plan_tasks_name(tk), err.text);
  st = tsr_plan_verify(pl, c->m, &err);
  ck_assert_msg(st == TSR_OK, "%s tile %dx%d %s/%s: verify: %s", c->what, o.tile_m, o.tile_n,
                tsr_plan_mapping_name(mp), tsr_plan_tasks_name(tk), err.text);
  st = tsr_cpu_execute(pl, q, k, v, &out, &lse, &err);
  ck_assert_msg(st == TSR_OK, "execute: %s", err.text);
  ck_assert_int_eq(tsr_array_numel(&out), tsr_array_numel(ro));
  ck_assert_int_eq(tsr_array_numel(&lse), tsr_array_numel(rl));
  eo = rel_err_f32(&out, ro);
  el = rel_err_f32(&lse, rl);
  ck_assert_msg(eo <= 1e-5 && el <= 1e-5,
                "%s tile %dx%d %s/%s split %d: output rel err %g, lse rel err %g (tiles %lld, "
                "tasks %lld, split rows %lld)",
                c->what, pl->tile_m, pl->tile_n, tsr_plan_mapping_name(mp),
                tsr_plan_tasks_name(tk), split, eo, el, (long long)pl->summary.tiles,
                (long long)pl->n_tasks, (long long)pl->summary.split_rows);
  tsr_npy_free(&out);
  tsr_npy_free(&lse);
  tsr_plan_destroy(pl);
  return 1;
}

START_TEST(test_exec_random)
{
  tu_rng r = {tu_seed("exec_random", 4242) + 7919u * (uint64_t)_i};
  pc_case c;
  tsr_array q, k, v, ro, rl;
  tsr_error err = {0};
  int n, ran = 0;
  ck_assert_int_eq(pc_make(&r, &c, 260), 0);
  rand_array(&r, &q, c.B, c.Hq, c.Sq, c.D);
  rand_array(&r, &k, c.B, c.Hkv, c.Sk, c.D);
  rand_array(&r, &v, c.B, c.Hkv, c.Sk, c.D);
  ck_assert_msg(tsr_ref_attention(c.g, c.m, &q, &k, &v, 0, &ro, &rl, &err) == TSR_OK, "ref: %s",
                err.text);
  /* The planner's defaults, then random combinations. */
  ran += run_combo(&c, &q, &k, &v, &ro, &rl, 0, 0, TSR_MAP_AUTO, TSR_TASKS_AUTO, 0, 0);
  for (n = 0; n < 6; n++) {
    int ti = (int)tu_range(&r, 0, PC_NTILES - 1);
    tsr_mapping mp = (tsr_mapping)tu_range(&r, 0, 3);
    tsr_tasks tk = (tsr_tasks)tu_range(&r, 0, 3);
    int split = tu_uniform(&r) < 0.5 ? 0 : (int)tu_range(&r, 1, 3);
    int sms = tu_uniform(&r) < 0.5 ? 0 : (int)tu_range(&r, 1, 8);
    ran += run_combo(&c, &q, &k, &v, &ro, &rl, pc_tiles[ti][0], pc_tiles[ti][1], mp, tk, split, sms);
  }
  ck_assert_int_ge(ran, 1);
  free_case(&c, &q, &k, &v, &ro, &rl);
}
END_TEST

/* Gather plans (TSR_MAP_GATHER) on random uniform cases (ragged lengths,
 * empty rows, GQA heads sharing rows, broadcast planes, odd and even
 * counts a row): every task layout, split chunks of 1 to 3 tiles, the
 * planner's tile and the explicit one, against the reference. */
START_TEST(test_exec_gather)
{
  tu_rng r = {tu_seed("exec_gather", 6007) + 7919u * (uint64_t)_i};
  pc_case c;
  tsr_array q, k, v, ro, rl;
  tsr_error err = {0};
  int64_t bq = 0, bk = 0;
  int tk;
  ck_assert_int_eq(pc_make_gather(&r, &c), 0);
  ck_assert(tsr_geom_is_uniform(c.g, &bq, &bk));
  rand_array(&r, &q, c.B, c.Hq, c.Sq, c.D);
  rand_array(&r, &k, c.B, c.Hkv, c.Sk, c.D);
  rand_array(&r, &v, c.B, c.Hkv, c.Sk, c.D);
  ck_assert_msg(tsr_ref_attention(c.g, c.m, &q, &k, &v, 0, &ro, &rl, &err) == TSR_OK, "ref: %s",
                err.text);
  for (tk = 0; tk < 4; tk++) {
    int split = tk == TSR_TASKS_SPLIT || tu_uniform(&r) < 0.3 ? (int)tu_range(&r, 1, 3) : 0;
    ck_assert_int_eq(run_combo(&c, &q, &k, &v, &ro, &rl, tk % 2 ? (int)bq : 0, tk % 2 ? (int)(2 * bk) : 0,
                               TSR_MAP_GATHER, (tsr_tasks)tk, split, (int)tu_range(&r, 0, 8)),
                     1);
  }
  free_case(&c, &q, &k, &v, &ro, &rl);
}
END_TEST

/* Non-finite inputs: each kind over random problems, the default plan and
 * random plans (every mapping and task layout, split rows with merges)
 * against the reference, position for position. */
START_TEST(test_exec_nonfinite)
{
  int kind = _i % TU_NF_KINDS;
  tu_rng r = {tu_seed("exec_nonfinite", 5151) + 7919u * (uint64_t)_i};
  pc_case c;
  tsr_array q, k, v, ro, rl;
  tsr_error err = {0};
  tu_nf_place places[4];
  int n, ran = 0, placed;
  ck_assert_int_eq(pc_make(&r, &c, 260), 0);
  rand_array(&r, &q, c.B, c.Hq, c.Sq, c.D);
  rand_array(&r, &k, c.B, c.Hkv, c.Sk, c.D);
  rand_array(&r, &v, c.B, c.Hkv, c.Sk, c.D);
  placed = tu_inject_nonfinite(&r, kind, (int)tu_range(&r, 1, 4), c.B, c.Hq, c.Hkv, c.Sq, c.Sk,
                               c.D, q.data, k.data, v.data, c.bits, c.mb, c.mh, c.nq, c.nk, c.qb,
                               c.kb, places);
  snprintf(c.what + strlen(c.what), sizeof c.what - strlen(c.what), ", %d x %s", placed,
           tu_nf_name(kind));
  ck_assert_msg(tsr_ref_attention(c.g, c.m, &q, &k, &v, 0, &ro, &rl, &err) == TSR_OK, "ref: %s",
                err.text);
  if (placed > 0) { /* the poison reached the reference's output */
    int64_t i, bad = 0;
    for (i = 0; i < tsr_array_numel(&ro); i++)
      bad += !isfinite(((float *)ro.data)[i]);
    ck_assert_msg(bad > 0, "%s: no non-finite reference output", c.what);
  }
  ran += run_combo(&c, &q, &k, &v, &ro, &rl, 0, 0, TSR_MAP_AUTO, TSR_TASKS_AUTO, 0, 0);
  ran += run_combo(&c, &q, &k, &v, &ro, &rl, pc_tiles[1][0], pc_tiles[1][1], TSR_MAP_AUTO, TSR_TASKS_SPLIT, 2, 0);
  for (n = 0; n < 6; n++) {
    int ti = (int)tu_range(&r, 0, PC_NTILES - 1);
    tsr_mapping mp = (tsr_mapping)tu_range(&r, 0, 3);
    tsr_tasks tk = (tsr_tasks)tu_range(&r, 0, 3);
    int split = tu_uniform(&r) < 0.3 ? 0 : (int)tu_range(&r, 1, 3);
    ran += run_combo(&c, &q, &k, &v, &ro, &rl, pc_tiles[ti][0], pc_tiles[ti][1], mp, tk, split, 0);
  }
  ck_assert_int_ge(ran, 2);
  free_case(&c, &q, &k, &v, &ro, &rl);
}
END_TEST

/* float16 inputs and 3-D arrays take the same path as float32 4-D ones. */
START_TEST(test_exec_f16_3d)
{
  tu_rng r = {tu_seed("exec_f16_3d", 77)};
  int64_t S = 200, D = 16, H = 2, i, n = H * S * D;
  uint8_t bits[2 * 4 * 4];
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_problem p = {0};
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  tsr_array q = {0}, k = {0}, v = {0}, o, l, ro, rl;
  tsr_array *arrs[3] = {&q, &k, &v};
  for (i = 0; i < (int64_t)sizeof bits; i++)
    bits[i] = tu_uniform(&r) < 0.5;
  ck_assert_int_eq(tsr_geom_uniform(S, S, 64, 64, &g, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_from_bytes(1, H, 4, 4, bits, &m, &err), TSR_OK);
  for (i = 0; i < 3; i++) {
    uint16_t *h = malloc((size_t)n * 2);
    int64_t j;
    for (j = 0; j < n; j++)
      h[j] = tsr_float_to_half((float)tu_normal(&r));
    arrs[i]->dtype = TSR_DT_F16;
    arrs[i]->ndim = 3;
    arrs[i]->shape[0] = H;
    arrs[i]->shape[1] = S;
    arrs[i]->shape[2] = D;
    arrs[i]->data = h;
  }
  p.batch = 1, p.heads_q = H, p.heads_kv = H, p.seq_q = S, p.seq_k = S, p.head_dim = D;
  p.dtype = TSR_DT_F16;
  p.geom = g;
  ck_assert_int_eq(tsr_plan_create(&p, m, NULL, &pl, &err), TSR_OK);
  ck_assert_int_eq(tsr_cpu_execute(pl, &q, &k, &v, &o, &l, &err), TSR_OK);
  ck_assert_int_eq(tsr_ref_attention(g, m, &q, &k, &v, 0, &ro, &rl, &err), TSR_OK);
  ck_assert_int_eq(o.ndim, 3);
  ck_assert_int_eq(l.ndim, 2);
  ck_assert(rel_err_f32(&o, &ro) <= 1e-5);
  ck_assert(rel_err_f32(&l, &rl) <= 1e-5);
  tsr_npy_free(&o);
  tsr_npy_free(&l);
  tsr_npy_free(&ro);
  tsr_npy_free(&rl);
  for (i = 0; i < 3; i++)
    tsr_npy_free(arrs[i]);
  tsr_plan_destroy(pl);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}
END_TEST

/* Wrong inputs are refused with a message, and the outputs stay empty. */
START_TEST(test_exec_rejects)
{
  tu_rng r = {tu_seed("exec_rejects", 5)};
  uint8_t bits[4] = {1, 0, 1, 1};
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_problem p = {0};
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  tsr_array q, k, v, o, l;
  ck_assert_int_eq(tsr_geom_uniform(100, 100, 64, 64, &g, &err), TSR_OK);
  ck_assert_int_eq(tsr_mask_from_bytes(1, 1, 2, 2, bits, &m, &err), TSR_OK);
  p.batch = 1, p.heads_q = 2, p.heads_kv = 1, p.seq_q = 100, p.seq_k = 100, p.head_dim = 16;
  p.dtype = TSR_DT_BF16;
  p.geom = g;
  ck_assert_int_eq(tsr_plan_create(&p, m, NULL, &pl, &err), TSR_OK);
  rand_array(&r, &q, 1, 2, 100, 16);
  rand_array(&r, &k, 1, 2, 100, 16); /* 2 KV heads, the problem has 1 */
  rand_array(&r, &v, 1, 1, 100, 16);
  ck_assert_int_eq(tsr_cpu_execute(pl, &q, &k, &v, &o, &l, &err), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(err.text, "k dimension 1 is 2, expected 1") != NULL, "%s", err.text);
  ck_assert_ptr_null(o.data);
  tsr_error_clear(&err);
  k.shape[1] = 1;
  q.dtype = TSR_DT_I32;
  ck_assert_int_eq(tsr_cpu_execute(pl, &q, &k, &v, &o, &l, &err), TSR_ERR_DTYPE);
  ck_assert_msg(strstr(err.text, "q has dtype") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  q.dtype = TSR_DT_F32;
  ck_assert_int_eq(tsr_cpu_execute(pl, &q, &k, NULL, &o, &l, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "v is missing") != NULL, "%s", err.text);
  tsr_npy_free(&q);
  tsr_npy_free(&k);
  tsr_npy_free(&v);
  tsr_plan_destroy(pl);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
}
END_TEST

/* One mask of each non-dense family of the corpus demo preset, executed
 * with the default plan and with 64x64 split tiles, against the reference. */
START_TEST(test_exec_corpus)
{
  tu_rng r = {tu_seed("exec_corpus", 8)};
  char dir[256], seen[512] = "";
  tsr_corpus *cp = pc_demo_corpus(dir, sizeof dir);
  int64_t i, ran = 0;
  ck_assert_ptr_nonnull(cp);
  for (i = 0; i < tsr_corpus_count(cp); i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(cp, i);
    pc_case c;
    tsr_array q, k, v, ro, rl;
    tsr_error err = {0};
    if (!strcmp(e->family, "dense") || strstr(seen, e->family))
      continue;
    strcat(seen, e->family);
    strcat(seen, " ");
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(tsr_corpus_load_geom(cp, i, &c.g, &err), TSR_OK);
    ck_assert_int_eq(tsr_corpus_load_mask(cp, i, &c.m, &err), TSR_OK);
    c.B = 1, c.Hq = e->heads_q, c.Hkv = e->heads_kv, c.Sq = e->seq_q, c.Sk = e->seq_k, c.D = 8;
    c.p.batch = 1, c.p.heads_q = c.Hq, c.p.heads_kv = c.Hkv, c.p.seq_q = c.Sq, c.p.seq_k = c.Sk;
    c.p.head_dim = c.D, c.p.dtype = TSR_DT_BF16, c.p.geom = c.g;
    snprintf(c.what, sizeof c.what, "%s (%s)", e->file, e->family);
    rand_array(&r, &q, 1, c.Hq, c.Sq, c.D);
    rand_array(&r, &k, 1, c.Hkv, c.Sk, c.D);
    rand_array(&r, &v, 1, c.Hkv, c.Sk, c.D);
    ck_assert_msg(tsr_ref_attention(c.g, c.m, &q, &k, &v, 0, &ro, &rl, &err) == TSR_OK, "%s", err.text);
    ck_assert_int_eq(run_combo(&c, &q, &k, &v, &ro, &rl, 0, 0, TSR_MAP_AUTO, TSR_TASKS_AUTO, 0, 0), 1);
    ck_assert_int_eq(run_combo(&c, &q, &k, &v, &ro, &rl, pc_tiles[1][0], pc_tiles[1][1], TSR_MAP_AUTO, TSR_TASKS_SPLIT, 2, 0), 1);
    tsr_npy_free(&q), tsr_npy_free(&k), tsr_npy_free(&v), tsr_npy_free(&ro), tsr_npy_free(&rl);
    tsr_geom_destroy(c.g);
    tsr_mask_destroy(c.m);
    ran++;
  }
  ck_assert_int_ge(ran, 6);
  tsr_corpus_close(cp);
  tu_rmtree(dir);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("exec");
  TCase *tc = tcase_create("exec");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_exec_random, 0, 60);
  tcase_add_loop_test(tc, test_exec_gather, 0, 40);
  tcase_add_loop_test(tc, test_exec_nonfinite, 0, 4 * TU_NF_KINDS);
  tcase_add_test(tc, test_exec_f16_3d);
  tcase_add_test(tc, test_exec_rejects);
  tcase_add_test(tc, test_exec_corpus);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

/*
 * check_fp8.c: the FP8 scheme's CPU emulation (runtime/fp8.c, exec_cpu.c;
 * docs/fp8.md).
 *
 *  - e4m3: tsri_fp8_e4m3 against an independent conversion (nearest of the
 *    127 finite non-negative e4m3 values decoded from their bits, ties to
 *    the even code, beyond 448 saturated, NaN kept) on all 2^16 bf16 bit
 *    patterns, every e4m3 midpoint and 2^20 random float32 bit patterns.
 *  - int8 (the Q K^T operands): tsri_fp8_int8 against an independent
 *    rounding (floor and the distance to it in double, ties to the even
 *    integer, clamped to +-127, NaN to 0) on the same kinds of inputs and
 *    every half-integer.
 *  - the emulation against an independent restatement of the scheme in
 *    this file (its own quantization and a two-pass softmax), on plans with
 *    one key tile per row, where the online softmax's running max is the
 *    row max: the same float32 operations, so within 1e-6.
 *  - a head marked native runs exactly the native executor on the inputs
 *    rounded to the dtype.
 *  - accuracy (figures printed): per head, the emulation against the
 *    float64 reference on the corpus's RoPE-structured synthetic q and k
 *    (profiler/corpus_synth.c at one token a block) with random v, and on
 *    outlier cases; cosine >= 0.999 and relative L2 <= 3% per head, the
 *    fallback rule triggers on the outlier heads and only there, and the
 *    fallen-back heads then meet the bound.
 *  - non-finite inputs: NaN wherever the reference has NaN.
 *  - the device's fallback rule (templates/attn_sm90_fp8_rule.cuh, the
 *    same text compiled here) against runtime/fp8.c's: k_chan bit for bit
 *    and the same flags, from the channels' max and min as the device's
 *    stats pass keeps them, on random, outlier, tied, zero, non-finite and
 *    exactly-at-the-threshold inputs.
 */
#include <check.h>
#include <float.h>
#include <limits.h>

#include "corpus_impl.h"
#include "fp8.h"
#include "plan_impl.h"
#include "util.h"

#include "../templates/attn_sm90_fp8_rule.cuh"

/* ---- an independent e4m3 ------------------------------------------------ */

/* The value of e4m3 code c (0..126, sign bit clear): bias 7, subnormals at
 * exponent field 0, 0x7f is NaN. */
static double e4m3_decode(int c)
{
  int e = c >> 3, m = c & 7;
  return e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
}

static float ref_e4m3(float x)
{
  double a = fabs((double)x), best = 0;
  int c, bc = 0;
  if (isnan(x))
    return x;
  if (a > 448.0)
    return x < 0 ? -448.0f : 448.0f;
  for (c = 0; c <= 126; c++) {
    double v = e4m3_decode(c), d = fabs(v - a), db = fabs(best - a);
    if (c == 0 || d < db || (d == db && (c & 1) == 0)) {
      best = v;
      bc = c;
    }
  }
  (void)bc;
  return (float)(signbit(x) ? -best : best);
}

static int same_float(float a, float b)
{
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

START_TEST(test_e4m3_exhaustive)
{
  uint32_t i;
  tu_rng r = {tu_seed("fp8_e4m3", 18)};
  int c, bad = 0;
  /* every bf16 pattern: all exponents, subnormals, infinities, NaN */
  for (i = 0; i < 65536; i++) {
    float x = tsr_bf16_to_float((uint16_t)i), got = tsri_fp8_e4m3(x), want = ref_e4m3(x);
    if (!same_float(got, want) && bad++ < 5)
      fprintf(stderr, "e4m3(bf16 0x%04x = %g): got %g, want %g\n", i, x, got, want);
  }
  /* every midpoint between neighbours, and just either side of it */
  for (c = 0; c < 126; c++) {
    double mid = 0.5 * (e4m3_decode(c) + e4m3_decode(c + 1));
    float xs[3] = {(float)mid, nextafterf((float)mid, 0.0f), nextafterf((float)mid, 1e9f)};
    int j;
    for (j = 0; j < 3; j++) {
      float got = tsri_fp8_e4m3(-xs[j]), want = ref_e4m3(-xs[j]);
      if (!same_float(got, want) && bad++ < 10)
        fprintf(stderr, "e4m3(%.9g): got %g, want %g\n", -xs[j], got, want);
      got = tsri_fp8_e4m3(xs[j]), want = ref_e4m3(xs[j]);
      if (!same_float(got, want) && bad++ < 10)
        fprintf(stderr, "e4m3(%.9g): got %g, want %g\n", xs[j], got, want);
    }
  }
  /* random float32 bit patterns, concentrated on e4m3's range half the time */
  for (i = 0; i < (1u << 20); i++) {
    uint32_t b = (uint32_t)tu_next(&r);
    float x;
    if (i & 1)
      b = (b & 0x807fffffu) | ((uint32_t)tu_range(&r, 127 - 12, 127 + 9) << 23);
    memcpy(&x, &b, sizeof x);
    if (!same_float(tsri_fp8_e4m3(x), ref_e4m3(x)) && bad++ < 15)
      fprintf(stderr, "e4m3(0x%08x = %g): got %g, want %g\n", b, x, tsri_fp8_e4m3(x), ref_e4m3(x));
  }
  ck_assert_msg(bad == 0, "%d e4m3 conversions differ from the independent one", bad);
  ck_assert(tsri_fp8_e4m3(INFINITY) == 448.0f && tsri_fp8_e4m3(-INFINITY) == -448.0f);
  ck_assert(tsri_fp8_e4m3(1e30f) == 448.0f && tsri_fp8_e4m3(464.0f) == 448.0f);
  ck_assert(isnan(tsri_fp8_e4m3(NAN)));
  ck_assert(tsri_fp8_e4m3(0x1p-10f) == 0.0f && tsri_fp8_e4m3(0x1.01p-10f) == 0x1p-9f);
}
END_TEST

/* ---- an independent int8 ------------------------------------------------- */

/* x to the nearest integer, ties to the even one, clamped to +-127, NaN to
 * 0: from floor and the distance to it, in double (exact for floats). */
static float ref_int8(float x)
{
  double a = (double)x, f, d;
  if (isnan(x))
    return 0.0f;
  if (a >= 127.0)
    return 127.0f;
  if (a <= -127.0)
    return -127.0f;
  f = floor(a);
  d = a - f;
  if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0.0))
    f += 1.0;
  return (float)f;
}

START_TEST(test_int8_exhaustive)
{
  uint32_t i;
  tu_rng r = {tu_seed("fp8_int8", 8)};
  int c, bad = 0;
  for (i = 0; i < 65536; i++) {
    float x = tsr_bf16_to_float((uint16_t)i), got = tsri_fp8_int8(x), want = ref_int8(x);
    if (got != want && bad++ < 5)
      fprintf(stderr, "int8(bf16 0x%04x = %g): got %g, want %g\n", i, x, got, want);
  }
  /* every half-integer up to the clamp, and just either side of it */
  for (c = -130; c < 130; c++) {
    float xs[3] = {c + 0.5f, nextafterf(c + 0.5f, -1e9f), nextafterf(c + 0.5f, 1e9f)};
    int j;
    for (j = 0; j < 3; j++)
      if (tsri_fp8_int8(xs[j]) != ref_int8(xs[j]) && bad++ < 10)
        fprintf(stderr, "int8(%.9g): got %g, want %g\n", xs[j], tsri_fp8_int8(xs[j]), ref_int8(xs[j]));
  }
  /* random float32 bit patterns, on int8's range half the time */
  for (i = 0; i < (1u << 20); i++) {
    uint32_t b = (uint32_t)tu_next(&r);
    float x;
    if (i & 1)
      b = (b & 0x807fffffu) | ((uint32_t)tu_range(&r, 127 - 3, 127 + 7) << 23);
    memcpy(&x, &b, sizeof x);
    if (tsri_fp8_int8(x) != ref_int8(x) && bad++ < 15)
      fprintf(stderr, "int8(0x%08x = %g): got %g, want %g\n", b, x, tsri_fp8_int8(x), ref_int8(x));
  }
  ck_assert_msg(bad == 0, "%d int8 conversions differ from the independent one", bad);
  ck_assert(tsri_fp8_int8(INFINITY) == 127.0f && tsri_fp8_int8(-INFINITY) == -127.0f);
  ck_assert(tsri_fp8_int8(NAN) == 0.0f && tsri_fp8_int8(-128.0f) == -127.0f);
  ck_assert(tsri_fp8_int8(2.5f) == 2.0f && tsri_fp8_int8(-3.5f) == -4.0f && tsri_fp8_int8(126.5f) == 126.0f);
}
END_TEST

/* ---- problems ------------------------------------------------------------ */

typedef struct {
  int64_t B, Hq, Hkv, S, D;
  float *q, *k, *v; /* [B][H][S][D] */
  tsr_array aq, ak, av;
} prob;

static void prob_arrays(prob *p)
{
  tsr_array *a[3] = {&p->aq, &p->ak, &p->av};
  float *d[3] = {p->q, p->k, p->v};
  int64_t h[3] = {p->Hq, p->Hkv, p->Hkv}, i;
  for (i = 0; i < 3; i++) {
    memset(a[i], 0, sizeof *a[i]);
    a[i]->dtype = TSR_DT_F32;
    a[i]->ndim = 4;
    a[i]->shape[0] = p->B;
    a[i]->shape[1] = h[i];
    a[i]->shape[2] = p->S;
    a[i]->shape[3] = p->D;
    a[i]->data = d[i];
  }
}

static void prob_free(prob *p)
{
  free(p->q);
  free(p->k);
  free(p->v);
}

static inline void prob_random(prob *p, tu_rng *r, int64_t B, int64_t Hq, int64_t Hkv, int64_t S,
                        int64_t D)
{
  p->B = B, p->Hq = Hq, p->Hkv = Hkv, p->S = S, p->D = D;
  p->q = tu_rand_f32(r, (size_t)(B * Hq * S * D), 1.0);
  p->k = tu_rand_f32(r, (size_t)(B * Hkv * S * D), 1.0);
  p->v = tu_rand_f32(r, (size_t)(B * Hkv * S * D), 1.0);
  prob_arrays(p);
}

/* The corpus's synthetic q and k of `model` on a t x h x w grid, one token
 * a block (the pooled vectors are then the tokens themselves), Hq = Hkv
 * heads of alternating spatial / temporal bias; v i.i.d. normal. */
static void prob_corpus(prob *p, tu_rng *r, const char *model, int t, int hh, int w, int heads,
                        int v_corpus)
{
  tsr_corpus_model m = *tsr_corpus_model_find(model);
  tsr_corpus_layout l;
  tsr_corpus_pool pool;
  tsr_error err = {0};
  int64_t S = (int64_t)t * hh * w, D = m.head_dim, h, i;
  m.t = t, m.h = hh, m.w = w;
  ck_assert_int_eq(tsr_corpus_layout_uniform(TSR_ORDER_FRAME, t, hh, w, 1, &l, &err), TSR_OK);
  ck_assert_int_eq(tsr_corpus_pool_build(&m, &l, tu_next(r), &pool, &err), TSR_OK);
  p->B = 1, p->Hq = p->Hkv = heads, p->S = S, p->D = D;
  p->q = malloc((size_t)(heads * S * D) * sizeof(float));
  p->k = malloc((size_t)(heads * S * D) * sizeof(float));
  p->v = tu_rand_f32(r, (size_t)(heads * S * D), 1.0);
  for (h = 0; h < heads; h++) {
    tsr_corpus_head hd;
    double *pq, *pk, *pv = NULL;
    tsr_corpus_head_make(&m, tu_next(r), h % 2 ? -0.8 : 0.8, &hd);
    ck_assert_int_eq(tsr_corpus_pooled(&pool, &hd, 0, tu_next(r), &pq, &err), TSR_OK);
    ck_assert_int_eq(tsr_corpus_pooled(&pool, &hd, 1, tu_next(r), &pk, &err), TSR_OK);
    if (v_corpus) { /* v made like k, from a head of its own */
      tsr_corpus_head hv;
      tsr_corpus_head_make(&m, tu_next(r), h % 2 ? -0.8 : 0.8, &hv);
      ck_assert_int_eq(tsr_corpus_pooled(&pool, &hv, 1, tu_next(r), &pv, &err), TSR_OK);
    }
    for (i = 0; i < S * D; i++) {
      p->q[h * S * D + i] = (float)pq[i];
      p->k[h * S * D + i] = (float)pk[i];
      if (pv)
        p->v[h * S * D + i] = (float)pv[i];
    }
    free(pq);
    free(pk);
    free(pv);
  }
  tsr_corpus_pool_free(&pool);
  tsr_corpus_layout_free(&l);
  prob_arrays(p);
}

/* A block mask [1][H][nb][nb] of 64-token blocks: the diagonal and a
 * random half of the rest. */
static tsr_mask *half_mask(tu_rng *r, int64_t H, int64_t S, int64_t blk)
{
  int64_t nb = (S + blk - 1) / blk, i;
  uint8_t *bits = malloc((size_t)(H * nb * nb));
  tsr_mask *m = NULL;
  tsr_error err = {0};
  for (i = 0; i < H * nb * nb; i++)
    bits[i] = (uint8_t)((i / nb) % nb == i % nb || tu_uniform(r) < 0.5);
  ck_assert_int_eq(tsr_mask_from_bytes(1, H, nb, nb, bits, &m, &err), TSR_OK);
  free(bits);
  return m;
}

static tsr_plan *make_plan(const prob *pb, tsr_problem *p, tsr_geom **g, const tsr_mask *m,
                           int64_t blk, int tm, int tn, tsr_tasks tasks)
{
  tsr_plan_opts o;
  tsr_plan *pl = NULL;
  tsr_error err = {0};
  ck_assert_int_eq(tsr_geom_uniform(pb->S, pb->S, blk, blk, g, &err), TSR_OK);
  memset(p, 0, sizeof *p);
  p->batch = pb->B, p->heads_q = pb->Hq, p->heads_kv = pb->Hkv;
  p->seq_q = p->seq_k = pb->S, p->head_dim = pb->D;
  p->dtype = TSR_DT_BF16;
  p->geom = *g;
  ck_assert_int_eq(tsr_problem_check(p, &err), TSR_OK);
  tsr_plan_opts_init(&o);
  o.tile_m = tm, o.tile_n = tn, o.tasks = tasks;
  o.precision = TSR_PREC_FP8;
  ck_assert_msg(tsr_plan_create(p, m, &o, &pl, &err) == TSR_OK, "plan: %s", err.text);
  return pl;
}

/* Per (b, q head): cosine and relative L2 of got against the float64
 * reference over the head's [S][D] outputs (finite ones). */
static void head_metrics(const float *got, const float *want, int64_t S, int64_t D, double *cosv,
                         double *rel)
{
  double gw = 0, gg = 0, ww = 0, dd = 0;
  int64_t i;
  for (i = 0; i < S * D; i++) {
    double g = got[i], w = want[i];
    gw += g * w, gg += g * g, ww += w * w, dd += (g - w) * (g - w);
  }
  *cosv = gg > 0 && ww > 0 ? gw / sqrt(gg * ww) : (gg == ww ? 1.0 : 0.0);
  *rel = ww > 0 ? sqrt(dd / ww) : sqrt(dd);
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Prints min / median / max of n values. */
static void print_dist(const char *what, const char *name, double *x, int64_t n)
{
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  fprintf(stderr, "  %-30s %-8s min %.5f  median %.5f  max %.5f  (%lld heads)\n", what, name, x[0],
          x[n / 2], x[n - 1], (long long)n);
}

/* ---- accuracy ------------------------------------------------------------ */

typedef struct {
  double cos, rel;          /* the scheme on every head (no fallback) */
  double cos_r, rel_r;      /* with the fallback rule */
  double cos_n, rel_n;      /* every head native (the inputs rounded to bf16) */
  int native;               /* the rule's choice */
  tsr_fp8_head_stats st;
} head_res;

/* Multiplies channels `chans` of the k heads with odd index by `factor`
 * (add 0) or adds factor x the channel's rms (add 1). */
static void k_outliers(prob *p, const int *chans, int nc, double factor, int add)
{
  int64_t h, t, j;
  for (h = 1; h < p->B * p->Hkv; h += 2)
    for (j = 0; j < nc; j++) {
      float *k = p->k + h * p->S * p->D + chans[j];
      double ss = 0;
      for (t = 0; t < p->S; t++)
        ss += (double)k[t * p->D] * k[t * p->D];
      for (t = 0; t < p->S; t++)
        k[t * p->D] = add ? (float)(k[t * p->D] + factor * sqrt(ss / p->S))
                          : (float)(k[t * p->D] * factor);
    }
}

/* Runs the emulation without fallback and with the rule against the float64
 * reference; fills res[B * Hq]. */
static void accuracy_run(const char *name, prob *pb, const tsr_mask *m, head_res *res)
{
  tsr_problem p;
  tsr_geom *g = NULL;
  tsr_plan *pl = make_plan(pb, &p, &g, m, 64, 0, 0, TSR_TASKS_AUTO);
  tsr_array ro, eo, fo, no;
  tsr_fp8_tensors f8;
  tsr_error err = {0};
  int64_t nh = pb->B * pb->Hq, h, SD = pb->S * pb->D, i, n_native = 0;
  unsigned char *none = calloc((size_t)nh, 1), *all = malloc((size_t)nh);
  memset(all, 1, (size_t)nh);
  double *a = malloc((size_t)nh * sizeof *a);
  float *qr = malloc((size_t)(nh * SD) * sizeof *qr), *kr, *vr;
  int64_t nkv = pb->B * pb->Hkv * SD;
  kr = malloc((size_t)nkv * sizeof *kr);
  vr = malloc((size_t)nkv * sizeof *vr);
  /* the rule's view: the scales of the inputs rounded to bf16 */
  for (i = 0; i < nh * SD; i++)
    qr[i] = tsr_bf16_to_float(tsr_float_to_bf16(pb->q[i]));
  for (i = 0; i < nkv; i++) {
    kr[i] = tsr_bf16_to_float(tsr_float_to_bf16(pb->k[i]));
    vr[i] = tsr_bf16_to_float(tsr_float_to_bf16(pb->v[i]));
  }
  ck_assert_int_eq(tsri_fp8_quantize(&p, qr, kr, vr, &f8, &err), TSR_OK);
  ck_assert_int_eq(tsr_ref_attention(g, m, &pb->aq, &pb->ak, &pb->av, 0, &ro, NULL, &err), TSR_OK);
  ck_assert_msg(tsri_cpu_execute_heads(pl, &pb->aq, &pb->ak, &pb->av, none, &eo, NULL, &err) == TSR_OK,
                "%s", err.text);
  ck_assert_msg(tsr_cpu_execute(pl, &pb->aq, &pb->ak, &pb->av, &fo, NULL, &err) == TSR_OK, "%s",
                err.text);
  ck_assert_msg(tsri_cpu_execute_heads(pl, &pb->aq, &pb->ak, &pb->av, all, &no, NULL, &err) == TSR_OK,
                "%s", err.text);
  for (h = 0; h < nh; h++) {
    head_metrics((const float *)eo.data + h * SD, (const float *)ro.data + h * SD, pb->S, pb->D,
                 &res[h].cos, &res[h].rel);
    head_metrics((const float *)fo.data + h * SD, (const float *)ro.data + h * SD, pb->S, pb->D,
                 &res[h].cos_r, &res[h].rel_r);
    head_metrics((const float *)no.data + h * SD, (const float *)ro.data + h * SD, pb->S, pb->D,
                 &res[h].cos_n, &res[h].rel_n);
    res[h].native = f8.native[h];
    res[h].st = f8.stats[h];
    n_native += f8.native[h];
  }
  fprintf(stderr, "fp8 accuracy, %s: %lld of %lld heads fall back\n", name, (long long)n_native,
          (long long)nh);
#define TSR_DIST(field, label, kind)                                                               \
  do {                                                                                             \
    for (h = 0; h < nh; h++)                                                                       \
      a[h] = res[h].field;                                                                         \
    print_dist(label, kind, a, nh);                                                                \
  } while (0)
  TSR_DIST(cos, "cosine, every head fp8", name);
  TSR_DIST(rel, "relative L2, every head fp8", name);
  TSR_DIST(cos_r, "cosine, with the fallback", name);
  TSR_DIST(rel_r, "relative L2, with the fallback", name);
  TSR_DIST(rel_n, "relative L2, bf16 (native)", name);
  TSR_DIST(st.q_spread, "stat q_spread", name);
  TSR_DIST(st.k_spread, "stat k_spread", name);
  TSR_DIST(st.k_chan, "stat k_chan", name);
  TSR_DIST(st.v_spread, "stat v_spread", name);
#undef TSR_DIST
  tsri_fp8_free(&f8);
  tsr_npy_free(&ro);
  tsr_npy_free(&eo);
  tsr_npy_free(&fo);
  tsr_npy_free(&no);
  free(all);
  tsr_plan_destroy(pl);
  tsr_geom_destroy(g);
  free(none);
  free(a);
  free(qr);
  free(kr);
  free(vr);
}

/* Heads over the bound, and whether every head meets cosine >= 0.999. */
static int64_t over_bound(const head_res *res, int64_t n, int with_rule, int *cos_ok)
{
  int64_t h, over = 0;
  *cos_ok = 1;
  for (h = 0; h < n; h++) {
    double c = with_rule ? res[h].cos_r : res[h].cos, e = with_rule ? res[h].rel_r : res[h].rel;
    over += !(c >= 0.999 && e <= 0.03);
    *cos_ok &= c >= 0.999;
  }
  return over;
}

static const char *const acc_models[] = {"cogvideox-5b", "wan2.1-1.3b-480p"};
#define ACC_HEADS 8

/* The corpus's q, k and v (v made like k, from heads of its own): no head
 * falls back, every head meets cosine >= 0.999 and relative L2 <= 3% (the
 * issue's bound; INT8 Q K^T measured 1.1% to 1.7% here, docs/fp8.md). */
START_TEST(test_accuracy_corpus)
{
  tu_rng r = {tu_seed("fp8_accuracy_corpus", 1818)};
  prob pb;
  tsr_mask *m;
  head_res res[ACC_HEADS];
  int cos_ok, h;
  int64_t over;
  prob_corpus(&pb, &r, acc_models[_i], 4, 12, 16, ACC_HEADS, 1);
  m = half_mask(&r, pb.Hq, pb.S, 64);
  accuracy_run(acc_models[_i], &pb, m, res);
  over = over_bound(res, ACC_HEADS, 1, &cos_ok);
  fprintf(stderr, "  %s: %lld of %d heads over cosine 0.999 / relative L2 3%%\n", acc_models[_i],
          (long long)over, ACC_HEADS);
  for (h = 0; h < ACC_HEADS; h++)
    ck_assert_msg(!res[h].native, "head %d falls back (k_chan %.2f) without outliers", h,
                  res[h].st.k_chan);
  ck_assert_msg(cos_ok, "a head's cosine is below 0.999");
  ck_assert_msg(over == 0, "%lld heads over cosine 0.999 / relative L2 3%%", (long long)over);
  tsr_mask_destroy(m);
  prob_free(&pb);
}
END_TEST

/* Outliers in K, on the odd heads: a constant offset of 20 rms in three
 * channels is smoothed away (no fallback, cosine >= 0.999, relative L2
 * <= 3%); three channels
 * 20x larger are not, and the rule sends exactly those heads to the native
 * dtype, where they meet cosine >= 0.999 and relative L2 <= 3%. */
START_TEST(test_accuracy_k_outliers)
{
  static const int chans[3] = {5, 22, 41};
  tu_rng r = {tu_seed("fp8_accuracy_outliers", 2020)};
  prob pb;
  tsr_mask *m;
  head_res res[ACC_HEADS];
  char name[80];
  int cos_ok, h;
  prob_corpus(&pb, &r, acc_models[_i], 4, 12, 16, ACC_HEADS, 1);
  m = half_mask(&r, pb.Hq, pb.S, 64);
  k_outliers(&pb, chans, 3, 20.0, 1);
  snprintf(name, sizeof name, "%s, k + 20 rms", acc_models[_i]);
  accuracy_run(name, &pb, m, res);
  ck_assert_msg(over_bound(res, ACC_HEADS, 1, &cos_ok) == 0, "a head over the bound with smoothed offsets");
  for (h = 0; h < ACC_HEADS; h++)
    ck_assert_msg(!res[h].native, "head %d falls back on a smoothable offset", h);
  ck_assert_msg(cos_ok, "a head's cosine is below 0.999 with smoothed offsets");
  prob_free(&pb);

  prob_corpus(&pb, &r, acc_models[_i], 4, 12, 16, ACC_HEADS, 1);
  k_outliers(&pb, chans, 3, 20.0, 0);
  snprintf(name, sizeof name, "%s, k x 20", acc_models[_i]);
  accuracy_run(name, &pb, m, res);
  for (h = 0; h < ACC_HEADS; h++) {
    ck_assert_msg(res[h].native == (h % 2), "head %d: fallback %d, k_chan %.2f", h, res[h].native,
                  res[h].st.k_chan);
    if (res[h].native) {
      /* what the rule saves: the scheme alone misses the bound here */
      ck_assert_msg(res[h].rel > 0.03, "head %d: fp8 alone within the bound (%.4f)", h, res[h].rel);
      ck_assert_msg(res[h].cos_r >= 0.999 && res[h].rel_r <= 0.03,
                    "fallen-back head %d: cosine %.5f, relative L2 %.4f", h, res[h].cos_r,
                    res[h].rel_r);
    } else {
      ck_assert_msg(res[h].cos_r >= 0.999, "head %d: cosine %.5f", h, res[h].cos_r);
    }
  }
  tsr_mask_destroy(m);
  prob_free(&pb);
}
END_TEST

/* Where the scheme fails: the corpus's q and k with i.i.d. normal v.  The
 * output is then an average of unrelated values, small against the noise
 * the quantized scores and P bring (docs/fp8.md, "Where it fails": 3.4-4.5%
 * relative L2 with INT8 Q K^T, 6-10% with e4m3, bf16 about 0.8%); no scale
 * shows it, so no head falls back.  Asserted, so that a better scheme shows
 * up here and the documentation follows. */
START_TEST(test_accuracy_iid_v_fails)
{
  tu_rng r = {tu_seed("fp8_accuracy_iid_v", 2121)};
  prob pb;
  tsr_mask *m;
  head_res res[ACC_HEADS];
  char name[80];
  int cos_ok, h;
  int64_t over;
  prob_corpus(&pb, &r, acc_models[_i], 4, 12, 16, ACC_HEADS, 0);
  m = half_mask(&r, pb.Hq, pb.S, 64);
  snprintf(name, sizeof name, "%s, i.i.d. v", acc_models[_i]);
  accuracy_run(name, &pb, m, res);
  over = over_bound(res, ACC_HEADS, 1, &cos_ok);
  fprintf(stderr, "  %s: %lld of %d heads over the bound (the scheme's known failure)\n", name,
          (long long)over, ACC_HEADS);
  for (h = 0; h < ACC_HEADS; h++) {
    ck_assert_msg(res[h].rel > 0.03, "head %d now within 3%% (%.4f): update docs/fp8.md", h,
                  res[h].rel);
    ck_assert_msg(res[h].rel_n <= 0.03, "head %d: bf16 itself over 3%% (%.4f)", h, res[h].rel_n);
  }
  tsr_mask_destroy(m);
  prob_free(&pb);
}
END_TEST

/* ---- the emulation against an independent statement of the scheme ------- */

/* Quantizes [S][D] in groups: chunk rows to int8 (per_channel 0, Q and
 * K) or whole columns to e4m3 (per_channel 1, V) of x - sub; writes x8
 * and scales. */
static void ref_quantize(const float *x, const float *sub, int64_t S, int64_t D, int per_channel,
                         float *x8, float *scales)
{
  int64_t g, t, d, ng = per_channel ? D : (S + 63) / 64;
  for (g = 0; g < ng; g++) {
    int64_t t0 = per_channel ? 0 : g * 64, t1 = per_channel ? S : (g * 64 + 64 < S ? g * 64 + 64 : S);
    int64_t d0 = per_channel ? g : 0, d1 = per_channel ? g + 1 : D;
    float am = 0, inv;
    for (t = t0; t < t1; t++)
      for (d = d0; d < d1; d++) {
        float y = x[t * D + d] - (sub ? sub[d] : 0.0f);
        if (fabsf(y) > am)
          am = fabsf(y);
      }
    {
      const float top = per_channel ? 448.0f : 127.0f;
      inv = am > 0 ? top / am : 1.0f;
      scales[g] = am > 0 ? am / top : 1.0f;
    }
    for (t = t0; t < t1; t++)
      for (d = d0; d < d1; d++) {
        float y = (x[t * D + d] - (sub ? sub[d] : 0.0f)) * inv;
        x8[t * D + d] = per_channel ? ref_e4m3(y) : ref_int8(y);
      }
  }
}

static float bf16r(float x) { return tsr_bf16_to_float(tsr_float_to_bf16(x)); }

/* The tensor cores' O += P V step as measured on the H200 (docs/fp8.md):
 * the accumulator and the products of one k = 32 wgmma, each cut toward
 * zero to a multiple of 2^(E - 13), E the exponent of the largest of them
 * (|x| in [2^E, 2^(E+1))), summed as integers, the sum cut toward zero to
 * 13 bits below its own leading bit.  Written apart from exec_cpu.c's
 * pv_add (ilogb and integers there frexp and doubles). */
static float ref_tc_add(float acc, const double *prod, int n)
{
  int i, E = INT_MIN, top, sign;
  long long sum, a;
  double unit;
  if (acc != 0.0f)
    E = ilogb(acc);
  for (i = 0; i < n; i++)
    if (prod[i] != 0.0 && ilogb(prod[i]) > E)
      E = ilogb(prod[i]);
  if (E == INT_MIN)
    return 0.0f;
  unit = ldexp(1.0, E - 13);
  sum = (long long)((double)acc / unit); /* the conversion truncates toward zero */
  for (i = 0; i < n; i++)
    sum += (long long)(prod[i] / unit);
  if (sum == 0)
    return 0.0f;
  sign = sum < 0 ? -1 : 1;
  a = sum < 0 ? -sum : sum;
  for (top = 62; !(a >> top & 1); top--)
    ;
  if (top > 13)
    a = a >> (top - 13) << (top - 13);
  return (float)(sign * (double)a * unit);
}

/* Plans with one key tile a row (seq_k <= tile_n), so the running max is
 * the row max and the scheme reads as a two-pass softmax; GQA, batch 2,
 * ragged chunks, random masks with empty rows. */
START_TEST(test_emulation_independent)
{
  tu_rng r = {tu_seed("fp8_independent", 77 + (uint64_t)_i)};
  const int64_t B = 2, Hq = 4, Hkv = 2, Sq = 200, Sk = 128, D = _i % 2 ? 128 : 64;
  const int64_t nq = (Sq + 63) / 64, nk = Sk / 64;
  prob pb;
  tsr_problem p;
  tsr_geom *g = NULL;
  tsr_mask *m = NULL;
  tsr_plan *pl = NULL;
  tsr_plan_opts o;
  tsr_array eo;
  tsr_error err = {0};
  uint8_t *bits = malloc((size_t)(B * Hq * nq * nk));
  float *q8 = malloc((size_t)(Sq * D) * sizeof(float)), *k8 = malloc((size_t)(Sk * D) * sizeof(float));
  float *v8 = malloc((size_t)(Sk * D) * sizeof(float)), *qh = malloc((size_t)(Sq * D) * sizeof(float));
  float *kh = malloc((size_t)(Sk * D) * sizeof(float)), *vh = malloc((size_t)(Sk * D) * sizeof(float));
  float sq[4], sk[2], sv[128], mean[128];
  double worst = 0;
  int64_t b, h, i, t, d, j;

  prob_random(&pb, &r, B, Hq, Hkv, Sq, D);
  /* Sk differs from Sq: remake k and v */
  free(pb.k), free(pb.v);
  pb.k = tu_rand_f32(&r, (size_t)(B * Hkv * Sk * D), 1.5);
  pb.v = tu_rand_f32(&r, (size_t)(B * Hkv * Sk * D), 1.0);
  for (i = 0; i < B * Hkv * Sk * D; i++)
    pb.k[i] += (float)(i % D == 3 ? 4.0 : 0.0); /* a channel offset to smooth */
  prob_arrays(&pb);
  pb.ak.shape[2] = pb.av.shape[2] = Sk;
  for (i = 0; i < B * Hq * nq * nk; i++)
    bits[i] = (uint8_t)(tu_uniform(&r) < 0.6);
  ck_assert_int_eq(tsr_mask_from_bytes(B, Hq, nq, nk, bits, &m, &err), TSR_OK);
  ck_assert_int_eq(tsr_geom_uniform(Sq, Sk, 64, 64, &g, &err), TSR_OK);
  memset(&p, 0, sizeof p);
  p.batch = B, p.heads_q = Hq, p.heads_kv = Hkv, p.seq_q = Sq, p.seq_k = Sk, p.head_dim = D;
  p.dtype = TSR_DT_BF16;
  p.geom = g;
  ck_assert_int_eq(tsr_problem_check(&p, &err), TSR_OK);
  tsr_plan_opts_init(&o);
  o.tile_m = 128, o.tile_n = 128, o.tasks = TSR_TASKS_ROW, o.precision = TSR_PREC_FP8;
  ck_assert_msg(tsr_plan_create(&p, m, &o, &pl, &err) == TSR_OK, "%s", err.text);
  ck_assert_msg(tsr_cpu_execute(pl, &pb.aq, &pb.ak, &pb.av, &eo, NULL, &err) == TSR_OK, "%s", err.text);

  for (b = 0; b < B; b++)
    for (h = 0; h < Hq; h++) {
      const int64_t kvh = h / (Hq / Hkv), qo = ((b * Hq + h) * Sq) * D, ko = ((b * Hkv + kvh) * Sk) * D;
      const float sl2 = (float)(1.0 / sqrt((double)D) * 1.4426950408889634074);
      for (i = 0; i < Sq * D; i++)
        qh[i] = bf16r(pb.q[qo + i]);
      for (i = 0; i < Sk * D; i++)
        kh[i] = bf16r(pb.k[ko + i]), vh[i] = bf16r(pb.v[ko + i]);
      for (d = 0; d < D; d++) {
        double s = 0;
        for (t = 0; t < Sk; t++)
          s += kh[t * D + d];
        mean[d] = (float)(s / (double)Sk);
      }
      ref_quantize(qh, NULL, Sq, D, 0, q8, sq);
      ref_quantize(kh, mean, Sk, D, 0, k8, sk);
      ref_quantize(vh, NULL, Sk, D, 1, v8, sv);
      for (t = 0; t < Sq; t++) {
        const uint8_t *row = bits + ((b * Hq + h) * nq + t / 64) * nk;
        const float *got = (const float *)eo.data + qo + t * D;
        float s[128], tb[128], cf[128], mx = -INFINITY, l = 0, acc[128], p8s[128];
        int any = 0;
        for (j = 0; j < Sk; j++) {
          float dot = 0;
          if (!row[j / 64])
            continue;
          for (d = 0; d < D; d++)
            dot += q8[t * D + d] * k8[j * D + d];
          /* one folded factor c = (sq * sk) * scale_log2, the s32 sum biased
           * by 2^23 + 2^22 (docs/fp8.md) */
          cf[j] = sq[t / 64] * sk[j / 64] * sl2;
          cf[j] = cf[j] < FLT_MIN ? FLT_MIN : cf[j];
          tb[j] = 12582912.0f + dot;
          s[j] = dot * cf[j];
          mx = s[j] > mx ? s[j] : mx;
          any = 1;
        }
        for (d = 0; d < D; d++)
          acc[d] = 0;
        for (j = 0; j < Sk; j++) {
          float pj;
          p8s[j] = 0;
          if (!any || !row[j / 64])
            continue;
          /* p' = 256 p in one FMA: exp2(t c - (2^23 + 2^22) c + 8 - m) */
          pj = exp2f(fmaf(tb[j], cf[j], fmaf(-12582912.0f, cf[j], 8.0f - mx)));
          l += pj / 256.0f;
          p8s[j] = ref_e4m3(pj);
        }
        for (j = 0; any && j < Sk; j += 32) /* one k = 32 wgmma a group of keys */
          for (d = 0; d < D; d++) {
            double prod[32];
            int k;
            for (k = 0; k < 32; k++)
              prod[k] = (double)p8s[j + k] * v8[(j + k) * D + d];
            acc[d] = ref_tc_add(acc[d], prod, 32);
          }
        for (d = 0; d < D; d++) {
          float want = any ? acc[d] * (sv[d] * (1.0f / 256.0f)) * (1.0f / l) : 0.0f;
          double e = fabs((double)got[d] - want) / (fabs((double)want) + 1e-3);
          worst = e > worst ? e : worst;
        }
      }
    }
  ck_assert_msg(worst <= 1e-6, "emulation and the scheme as stated differ by %.3g", worst);
  tsr_npy_free(&eo);
  tsr_plan_destroy(pl);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  prob_free(&pb);
  free(bits), free(q8), free(k8), free(v8), free(qh), free(kh), free(vh);
}
END_TEST

/* A head marked native runs the native executor on the rounded inputs,
 * bit for bit (split rows and merges included). */
START_TEST(test_native_heads)
{
  tu_rng r = {tu_seed("fp8_native_heads", 5)};
  prob pb, rounded;
  tsr_problem p;
  tsr_geom *g = NULL;
  tsr_mask *m;
  tsr_plan *pl, *pn = NULL;
  tsr_plan_opts o;
  tsr_array eo, no, fo;
  tsr_error err = {0};
  unsigned char native[4] = {1, 1, 1, 1};
  int64_t i, n;
  prob_random(&pb, &r, 1, 4, 2, 300, 64);
  rounded = pb;
  n = 4 * 300 * 64;
  rounded.q = malloc((size_t)n * sizeof(float));
  rounded.k = malloc((size_t)(n / 2) * sizeof(float));
  rounded.v = malloc((size_t)(n / 2) * sizeof(float));
  for (i = 0; i < n; i++)
    rounded.q[i] = bf16r(pb.q[i]);
  for (i = 0; i < n / 2; i++)
    rounded.k[i] = bf16r(pb.k[i]), rounded.v[i] = bf16r(pb.v[i]);
  prob_arrays(&rounded);
  m = half_mask(&r, 4, 300, 64);
  pl = make_plan(&pb, &p, &g, m, 64, 64, 64, TSR_TASKS_SPLIT);
  o = pl->opts;
  o.precision = TSR_PREC_NATIVE;
  ck_assert_int_eq(tsr_plan_create(&p, m, &o, &pn, &err), TSR_OK);
  ck_assert_int_gt(pl->n_merges, 0);
  ck_assert_int_eq(tsri_cpu_execute_heads(pl, &pb.aq, &pb.ak, &pb.av, native, &eo, NULL, &err), TSR_OK);
  ck_assert_int_eq(tsr_cpu_execute(pn, &rounded.aq, &rounded.ak, &rounded.av, &no, NULL, &err), TSR_OK);
  ck_assert_int_eq(memcmp(eo.data, no.data, (size_t)n * sizeof(float)), 0);
  /* and the fp8 heads are not the native ones */
  ck_assert_int_eq(tsr_cpu_execute(pl, &pb.aq, &pb.ak, &pb.av, &fo, NULL, &err), TSR_OK);
  ck_assert_int_ne(memcmp(fo.data, no.data, (size_t)n * sizeof(float)), 0);
  ck_assert_double_lt(tsr_ref_max_rel_error(&fo, &no), 0.2);
  tsr_npy_free(&eo), tsr_npy_free(&no), tsr_npy_free(&fo);
  tsr_plan_destroy(pl), tsr_plan_destroy(pn);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  prob_free(&pb), prob_free(&rounded);
}
END_TEST

/* NaN in an input: NaN wherever the reference has NaN; for v exactly there
 * (its e4m3 amaxes skip NaN), for q and k at least there (int8 has no NaN:
 * a non-finite Q chunk makes its 64 rows NaN, and the K mean spreads a NaN
 * to the kv head).  An infinity: at least the reference's NaN. */
START_TEST(test_nonfinite)
{
  static const char tens[6] = {'q', 'k', 'v', 'q', 'k', 'v'};
  tu_rng r = {tu_seed("fp8_nonfinite", 9 + (uint64_t)_i)};
  char t = tens[_i % 6];
  float bad = _i % 6 < 3 ? NAN : INFINITY;
  prob pb;
  tsr_problem p;
  tsr_geom *g = NULL;
  tsr_mask *m;
  tsr_plan *pl;
  tsr_array eo, ro;
  tsr_error err = {0};
  int64_t i, n, missing = 0, extra = 0;
  prob_random(&pb, &r, 1, 4, 2, 256, 64);
  n = (t == 'q' ? 4 : 2) * 256 * 64;
  (t == 'q' ? pb.q : t == 'k' ? pb.k : pb.v)[tu_range(&r, 0, n - 1)] = bad;
  m = half_mask(&r, 4, 256, 64);
  pl = make_plan(&pb, &p, &g, m, 64, 0, 0, _i % 2 ? TSR_TASKS_SPLIT : TSR_TASKS_ROW);
  ck_assert_int_eq(tsr_cpu_execute(pl, &pb.aq, &pb.ak, &pb.av, &eo, NULL, &err), TSR_OK);
  ck_assert_int_eq(tsr_ref_attention(g, m, &pb.aq, &pb.ak, &pb.av, 0, &ro, NULL, &err), TSR_OK);
  for (i = 0; i < 4 * 256 * 64; i++) {
    int en = isnan(((float *)eo.data)[i]), rn = isnan(((float *)ro.data)[i]);
    missing += rn && !en;
    extra += en && !rn && !isinf(((float *)ro.data)[i]);
  }
  ck_assert_msg(missing == 0, "%c %g: %lld reference NaN not NaN", t, bad, (long long)missing);
  if (isnan(bad) && t == 'v')
    ck_assert_msg(extra == 0, "%c NaN: %lld NaN the reference does not have", t, (long long)extra);
  if (t == 'q') /* the NaN reaches the rows of its chunk, and no other */
    ck_assert_msg(extra <= 63 * 64, "q %g: %lld NaN past its chunk's rows", bad, (long long)extra);
  tsr_npy_free(&eo), tsr_npy_free(&ro);
  tsr_plan_destroy(pl);
  tsr_mask_destroy(m);
  tsr_geom_destroy(g);
  prob_free(&pb);
}
END_TEST

/* ---- the device's fallback rule ------------------------------------------ */

/* k of one (batch, kv head) for case `kind` of test_device_rule:
 * 0 normal; 1 three channels x20; 2 values from {-1, 0, 1} (ties among
 * the amaxes); 3 half the channels zero (median 0 or near it); 4 a NaN;
 * 5 an infinity; 6, 7 k_chan exactly 8 and just above (each channel c
 * alternates +a_c, -a_c: the mean is 0 exactly and amax_c = a_c, the
 * median of the a_c 1 and their max 8 or the float after 8). */
static void rule_head(float *k, tu_rng *r, int64_t S, int64_t D, int kind) /* S even */
{
  int64_t t, c;
  for (t = 0; t < S; t++)
    for (c = 0; c < D; c++) {
      float *x = &k[t * D + c], a;
      *x = (float)tu_normal(r);
      if (kind == 1 && (c == 3 || c == D / 2 || c == D - 7))
        *x *= 20.0f;
      if (kind == 2)
        *x = (float)tu_range(r, -1, 1);
      if (kind == 3 && c % 2)
        *x = c % 4 == 1 ? 0.0f : *x * 0.01f;
      if (kind >= 6) {
        /* half the channels below 1, half above, the last at the max */
        a = c < D / 2 ? 0.5f + (float)c / (float)D : 1.0f + (float)(c - D / 2) / (float)D;
        if (c == D / 2 - 1 || c == D / 2)
          a = 1.0f;
        if (c == D - 1)
          a = kind == 6 ? 8.0f : nextafterf(8.0f, 9.0f);
        *x = t % 2 ? -a : a;
      }
    }
  if (kind == 4)
    k[tu_range(r, 0, S * D - 1)] = NAN;
  if (kind == 5)
    k[tu_range(r, 0, S * D - 1)] = tu_range(r, 0, 1) ? INFINITY : -INFINITY;
}

/* What _kvstats' last CTA computes for one (batch, kv head), given the
 * mean: the channels' max and min over the tokens (fmaxf / fminf from
 * -inf / inf, as the device's partial reductions), the amaxes, the
 * sorted copy by rank (checked to be a permutation), k_chan. */
static float device_kchan(const float *k, const float *mean, int64_t S, int64_t D)
{
  float amax[128], sorted[128], kc;
  int seen[128] = {0};
  int64_t t, c;
  for (c = 0; c < D; c++) {
    float hi = -INFINITY, lo = INFINITY;
    for (t = 0; t < S; t++) {
      hi = fmaxf(hi, k[t * D + c]);
      lo = fminf(lo, k[t * D + c]);
    }
    amax[c] = tsr_f8_chan_amax(hi, lo, mean[c]);
  }
  for (c = 0; c < D; c++) {
    int rk = tsr_f8_rank(amax, (int)D, (int)c);
    ck_assert(rk >= 0 && rk < D && !seen[rk]);
    seen[rk] = 1;
    sorted[rk] = amax[c];
  }
  for (c = 1; c < D; c++)
    ck_assert(sorted[c - 1] <= sorted[c]);
  kc = tsr_f8_kchan(sorted, (int)D);
  return kc;
}

START_TEST(test_device_rule)
{
  tu_rng r = {tu_seed("fp8_device_rule", 21 + (uint64_t)_i)};
  int kind = _i % 8;
  int64_t D = _i < 8 ? 128 : 64, S = tu_range(&r, 20, 350) * 2, B = 2, Hkv = 2, Hq = 4, b, h, j;
  int64_t g = Hq / Hkv, n_kv = S * D;
  prob pb;
  tsr_problem p;
  tsr_fp8_tensors t;
  tsr_error err = {0};
  int flagged = 0;
  ck_assert(TSR_F8_K_CHAN_MAX == TSR_FP8_K_CHAN_MAX);
  prob_random(&pb, &r, B, Hq, Hkv, S, D);
  /* the case's kind on kv head 0 of each batch; kv head 1 stays normal */
  for (b = 0; b < B; b++)
    rule_head(pb.k + (b * Hkv) * n_kv, &r, S, D, kind);
  memset(&p, 0, sizeof p);
  p.batch = B, p.heads_q = Hq, p.heads_kv = Hkv, p.seq_q = p.seq_k = S, p.head_dim = D;
  p.dtype = TSR_DT_BF16;
  ck_assert_int_eq(tsri_fp8_quantize(&p, pb.q, pb.k, pb.v, &t, &err), TSR_OK);
  for (b = 0; b < B; b++)
    for (h = 0; h < Hkv; h++) {
      int64_t bh = b * Hkv + h;
      float kc = device_kchan(pb.k + bh * n_kv, t.kmean + bh * D, S, D);
      for (j = 0; j < g; j++) {
        int64_t qh = b * Hq + h * g + j;
        float want = t.stats[qh].k_chan;
        ck_assert_msg(memcmp(&kc, &want, sizeof kc) == 0 || (isnan(kc) && isnan(want)),
                      "kind %d D %lld (b %lld, kv %lld): device k_chan %.9g, host %.9g", kind, (long long)D,
                      (long long)b, (long long)h, kc, want);
        ck_assert_int_eq(tsr_f8_falls_back(kc), t.native[qh]);
        flagged += t.native[qh];
      }
    }
  /* the cases that must (not) fall back, so that the parity is not on
   * never-flagged heads alone */
  if (kind == 1 || kind == 7)
    ck_assert_int_eq(flagged, B * g); /* kv head 0 of each batch */
  if (kind == 0 || kind == 2 || kind == 6)
    ck_assert_int_eq(flagged, 0);
  tsri_fp8_free(&t);
  prob_free(&pb);
}
END_TEST

START_TEST(test_names_and_rejects)
{
  tsr_precision pr;
  tsr_plan_opts o;
  tsr_error err = {0};
  ck_assert_int_eq(tsr_precision_parse("fp8", &pr), 0);
  ck_assert_int_eq(pr, TSR_PREC_FP8);
  ck_assert_int_eq(tsr_precision_parse("native", &pr), 0);
  ck_assert_int_eq(pr, TSR_PREC_NATIVE);
  ck_assert_int_eq(tsr_precision_parse("FP8", &pr), -1);
  ck_assert_int_eq(tsr_precision_parse(NULL, &pr), -1);
  ck_assert_str_eq(tsr_precision_name(TSR_PREC_FP8), "fp8");
  ck_assert_str_eq(tsr_precision_name((tsr_precision)7), "unknown");
  tsr_plan_opts_init(&o);
  ck_assert_int_eq(o.precision, TSR_PREC_NATIVE);
  o.precision = (tsr_precision)2;
  ck_assert_int_eq(tsr_plan_opts_check(&o, &err), TSR_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.text, "precision 2"));
  {
    /* the rule reads k_chan alone; the other spreads do not trigger it */
    tsr_fp8_head_stats st = {100.0f, 100.0f, 100.0f, TSR_FP8_K_CHAN_MAX};
    ck_assert_int_eq(tsri_fp8_falls_back(&st), 0);
    st.k_chan = nextafterf(TSR_FP8_K_CHAN_MAX, 1e9f);
    ck_assert_int_ne(tsri_fp8_falls_back(&st), 0);
  }
}
END_TEST

int main(void)
{
  Suite *s = suite_create("fp8");
  TCase *tc = tcase_create("fp8");
  tcase_set_timeout(tc, 900);
  tcase_add_test(tc, test_e4m3_exhaustive);
  tcase_add_test(tc, test_int8_exhaustive);
  tcase_add_test(tc, test_names_and_rejects);
  tcase_add_loop_test(tc, test_emulation_independent, 0, 2);
  tcase_add_test(tc, test_native_heads);
  tcase_add_loop_test(tc, test_device_rule, 0, 16);
  tcase_add_loop_test(tc, test_nonfinite, 0, 6);
  tcase_add_loop_test(tc, test_accuracy_corpus, 0, 2);
  tcase_add_loop_test(tc, test_accuracy_k_outliers, 0, 2);
  tcase_add_loop_test(tc, test_accuracy_iid_v_fails, 0, 2);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}

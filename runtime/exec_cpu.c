/*
 * exec_cpu.c: tsr_cpu_execute, the plan run tile by tile on the CPU with the
 * kernels' arithmetic: float32 scores p = exp2(s * scale_log2 - m) in the
 * base-2 domain of plan_layout.h, the online softmax update per key tile
 * (a row with nothing selected in a tile leaves m and l untouched),
 * membership bits per query-block segment, partial slots for split rows and
 * the log-sum-exp merge.  Any plan bug (a tile dropped, duplicated or
 * mis-masked, a slot mixed up) changes the output, so plans are tested on
 * any machine against tsr_ref_attention.  A tile's columns are keys
 * through tile_keys: k_tile * BN + c, or for a gather plan the two halves'
 * blocks (plan_layout.h), a missing half masked as the kernels mask it.
 *
 * Non-finite inputs give what tsr_ref_attention gives (its header has the
 * rules): NaN flows through exp2 and the sums as in the kernels, only
 * selected columns enter the sums (a selected one even under p = 0, so
 * 0 * NaN counts), and a row that selected something but whose every score
 * was -inf is NaN, not the empty row's zeros.  A split row's NaN travels to
 * the merge as part_m = NaN (plan_layout.h).
 *
 * Precision FP8 (opts.precision, docs/fp8.md) emulates the device's FP8
 * kernels: the inputs rounded to the problem's dtype (what the device
 * holds), quantized by fp8.c, the base-2 scores acc * c on the int8 dot
 * products acc = q8 . k8 (exact in float32, as the device's s32
 * accumulators) with the folded factor c = (sq * sk) * scale_log2 (at
 * least FLT_MIN, NaN kept), the
 * kernel's one FFMA p' = exp2((BIAS + acc) * c + fma(-BIAS, c, 8 - m)) =
 * 256 p (templates/attn_sm90_fp8.cuh, tsr_f8_softmax), the P V product on
 * p8 = e4m3(p') and v8 added as the tensor cores add them (pv_add: 13
 * bits below each k = 32 step's largest term, truncated), l summing p' and
 * divided by 256 at the end, O_acc
 * scaled by sv_c / 256 before the division by l (so partial slots and
 * merges are the native ones).  A
 * head the fallback rule marks runs the native arithmetic on the rounded
 * inputs, as the device runs it in its own dtype.
 *
 * Cost: O(computed pairs x D) flops, single threaded; meant for tests and
 * `tessera run --backend cpu`, not for speed.  Memory: float32 copies of
 * q, k, v and the partial slots (n_slots x BM x (D + 2) floats).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp8.h"
#include "plan_impl.h"

/* Checks a [B, H, S, D] (or [H, S, D] with B = 1) float32/float16 array. */
static tsr_status check_tensor(const tsr_array *a, const char *name, int64_t batch, int64_t heads,
                               int64_t seq, int64_t dim, tsr_error *err)
{
  int64_t want[4] = {batch, heads, seq, dim}, i, off;
  if (!a || !a->data)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot execute plan: %s is missing", name);
  if (a->dtype != TSR_DT_F32 && a->dtype != TSR_DT_F16)
    return tsr_error_set(err, TSR_ERR_DTYPE, "cannot execute plan: %s has dtype %s, expected "
                         "float32 or fp16", name, tsr_dtype_name(a->dtype));
  if (a->ndim != 4 && !(a->ndim == 3 && batch == 1))
    return tsr_error_set(err, TSR_ERR_SHAPE, "cannot execute plan: %s has %d dimensions, "
                         "expected 4 (or 3 with batch 1)", name, a->ndim);
  off = 4 - a->ndim;
  for (i = 0; i < a->ndim; i++)
    if (a->shape[i] != want[i + off])
      return tsr_error_set(err, TSR_ERR_SHAPE,
                           "cannot execute plan: %s dimension %lld is %lld, expected %lld", name,
                           (long long)i, (long long)a->shape[i], (long long)want[i + off]);
  return TSR_OK;
}

/* float32 copy of a float32 / float16 array (NULL when out of memory). */
static float *to_float(const tsr_array *a)
{
  int64_t n = tsr_array_numel(a), i;
  float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
  if (!f)
    return NULL;
  if (a->dtype == TSR_DT_F32) {
    memcpy(f, a->data, (size_t)n * sizeof *f);
  } else {
    const uint16_t *h = a->data;
    for (i = 0; i < n; i++)
      f[i] = tsr_half_to_float(h[i]);
  }
  return f;
}

typedef struct {
  const tsr_plan *pl;
  const float *q, *k, *v;
  float *o, *lse;
  float *part_o, *part_m, *part_l;
  float *acc, *m, *l, *s;
  int64_t *key;   /* the key token of each column of the current tile, -1 masked */
  float *t, *cf; /* fp8: BIAS + acc and the folded factor of each column */
  float *prod;    /* fp8: one wgmma's products (pv_add; exact in float) */
  int *em;        /* fp8: D ints, pv_group_align's exponents */
  int32_t *isum;  /* fp8: D ints, its sums */
  double *flip;   /* fp8, optional: per q row, o's change if its near-tie p' flipped */
  float flip_du;  /* their relative radius: ex2.approx's error */
  unsigned char *on, *sel; /* column selected in this tile; row selected any */
  float scale_log2;
  int64_t D;
  const tsr_fp8_tensors *f8;  /* precision fp8: the quantized tensors, else NULL */
  const unsigned char *native; /* fp8: [B][Hq] heads run in the native dtype */
} exec_ctx;

/* P V's accumulation (tsri_fp8_pv_model, fp8.h): how the tensor cores add
 * the exact e4m3 products of one wgmma into the fp32 accumulator.  The
 * default, measured on the H200 (gpu_attn --fp8-diag, 2026-12-02,
 * notes/fp8-2026-12-02e.md): per k = 32 wgmma (32 keys of the tile), the
 * accumulator and every product truncated to 13 bits below the largest
 * one's leading bit, summed exactly (RZ_ALIGN).  Against fp16 output on
 * the full-mask case (32 wgmmas a row) it left 3.8-4.1e-4 of max |o| where
 * float sums in key order left 1.4-1.6e-3; the exact group sum truncated
 * once (RZ_SUM) did worse than either. */
static int pv_kind = TSRI_PV_RZ_ALIGN, pv_group = 32, pv_frac = 13;

void tsri_fp8_pv_model(int kind, int group, int frac)
{
  pv_kind = kind;
  pv_group = group > 0 ? group : 32;
  pv_frac = frac;
}

/* x (finite) truncated toward zero to `frac` bits after its leading one. */
static double rz_bits(double x, int frac)
{
  int e;
  double unit;
  if (x == 0.0 || !isfinite(x))
    return x;
  (void)frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  unit = ldexp(1.0, e - 1 - frac);
  return trunc(x / unit) * unit;
}

/* The biased exponent field of a float (0 for zero and subnormals). */
static int f32_bexp(float x)
{
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return (int)(b >> 23 & 0xffu);
}

/* 2^e as a float for a biased exponent e in [1, 254]. */
static float f32_pow2(int e)
{
  uint32_t b = (uint32_t)e << 23;
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

/* Index of the leading one of a > 0. */
static int lead_bit(uint32_t a)
{
#if defined(__GNUC__)
  return 31 - __builtin_clz(a);
#else
  int t = 31;
  while (!(a >> t & 1u))
    t--;
  return t;
#endif
}

/* RZ_ALIGN with 13 bits for all D channels of one wgmma at once (the
 * default: it runs for every product of the emulation, so it is written to
 * vectorize): ar[d] += sum_j p8[j] v8[j][d] as the tensor cores add.  The
 * terms are exact floats (e4m3 x e4m3 has 8 significant bits; the
 * accumulator is a float), so scaling by 2^(13 - E) is exact and the
 * conversion to int truncates toward zero; |each| < 2^14, the sum of 33
 * below 2^20.  A NaN product (NaN v or a NaN scale's p) makes the channel
 * NaN, as the float sums would; em, sum: D ints of scratch. */
static void pv_group_align(float *ar, const float *p8, const float *v8, int64_t n, int64_t D, int *em,
                           int32_t *sum)
{
  int64_t j, d;
  for (j = 0; j < n; j++)
    if (isnan(p8[j])) {
      for (d = 0; d < D; d++)
        ar[d] = NAN;
      return;
    }
  for (d = 0; d < D; d++)
    em[d] = f32_bexp(ar[d]);
  for (j = 0; j < n; j++)
    if (p8[j] != 0.0f)
      for (d = 0; d < D; d++) {
        int e = f32_bexp(p8[j] * v8[j * D + d]);
        em[d] = e > em[d] ? e : em[d];
      }
  /* em 255: a NaN or infinite term (the channel's result is NaN); 0:
   * nothing but zeros.  Neither is converted to an integer: a NaN or an
   * infinity has no int32 value (undefined behaviour in C). */
  for (d = 0; d < D; d++)
    sum[d] = em[d] == 255 || em[d] == 0 ? 0 : (int32_t)(ar[d] * f32_pow2(267 - em[d]));
  for (j = 0; j < n; j++)
    if (p8[j] != 0.0f)
      for (d = 0; d < D; d++)
        if (em[d] != 255 && em[d] != 0)
          sum[d] += (int32_t)((p8[j] * v8[j * D + d]) * f32_pow2(267 - em[d]));
  for (d = 0; d < D; d++) {
    /* |sum| in unsigned arithmetic: -INT32_MIN overflows an int */
    uint32_t a = sum[d] < 0 ? 0u - (uint32_t)sum[d] : (uint32_t)sum[d];
    int top;
    if (em[d] == 255) {
      ar[d] = NAN;
      continue;
    }
    if (a == 0) {
      ar[d] = 0.0f;
      continue;
    }
    top = lead_bit(a);
    if (top > 13)
      a = a >> (top - 13) << (top - 13);
    ar[d] = (sum[d] < 0 ? -(float)a : (float)a) * f32_pow2(em[d] - 13);
  }
}

/* One wgmma's accumulation: acc + sum of n exact products, by the model.
 * TSRI_PV_FP32: float additions in order (the CPU's own, the emulation
 * before 2026-12-02e); TSRI_PV_RZ_SUM: the exact sum, truncated to pv_frac
 * bits after its leading one; TSRI_PV_RZ_ALIGN: every term (acc too)
 * truncated to the unit 2^(E - pv_frac) of the largest one's exponent E,
 * the exact sum of those, then truncated as RZ_SUM (pv_group_align does
 * that for all channels at once when pv_frac is 13). */
static float pv_add(float acc, const float *prod, int64_t n)
{
  int64_t i;
  double sum = acc;
  if (pv_kind == TSRI_PV_FP32) {
    float a = acc;
    for (i = 0; i < n; i++)
      a += prod[i];
    return a;
  }
  for (i = 0; i < n; i++)
    sum += prod[i];
  if (!isfinite(sum))
    return (float)sum; /* NaN: as the fp32 sums */
  if (pv_kind == TSRI_PV_RZ_ALIGN) {
    int e, emax = INT32_MIN;
    double unit;
    if (acc != 0.0f) {
      (void)frexp(acc, &e);
      emax = e;
    }
    for (i = 0; i < n; i++)
      if (prod[i] != 0.0f) {
        (void)frexp(prod[i], &e);
        emax = e > emax ? e : emax;
      }
    if (emax == INT32_MIN)
      return 0.0f;
    unit = ldexp(1.0, emax - 1 - pv_frac);
    sum = trunc((double)acc / unit) * unit;
    for (i = 0; i < n; i++)
      sum += trunc(prod[i] / unit) * unit;
  }
  return (float)rz_bits(sum, pv_frac);
}

/* The FP8 operands of one member's head, or NULL when it runs natively. */
typedef struct {
  const float *q8, *k8, *v8, *sq, *sk, *sv;
} fp8_head;

static int fp8_head_of(const exec_ctx *x, const tsr_member_rec *mr, int64_t r0, fp8_head *f)
{
  const tsr_fp8_tensors *t = x->f8;
  int64_t bq, bkv;
  memset(f, 0, sizeof *f);
  if (!t)
    return 0;
  bq = (int64_t)mr->batch * t->heads_q + mr->head;
  if (x->native[bq])
    return 0;
  bkv = (int64_t)mr->batch * t->heads_kv + mr->head / (t->heads_q / t->heads_kv);
  f->q8 = t->q8 + (bq * t->seq_q + r0) * t->head_dim;
  f->k8 = t->k8 + bkv * t->seq_k * t->head_dim;
  f->v8 = t->v8 + bkv * t->seq_k * t->head_dim;
  f->sq = t->sq + bq * t->q_chunks;
  f->sk = t->sk + bkv * t->k_chunks;
  f->sv = t->sv + bkv * t->head_dim;
  return 1;
}

/* The key token of each of the BN columns of tile tr into key[] (-1: the
 * column is masked: past seq_k, or a gather tile's missing half); returns
 * how many columns to walk (the columns after them are all masked). */
static int64_t tile_keys(const tsr_plan *pl, const tsr_tile_rec *tr, int64_t *key)
{
  int64_t BN = pl->tile_n, sk = pl->problem.seq_k, c;
  if (pl->mapping == TSR_MAP_GATHER) {
    int64_t bk = BN / 2, a = (int64_t)tr->k_tile * bk, b = (int64_t)tr->mem * bk;
    for (c = 0; c < bk; c++) {
      key[c] = a + c < sk ? a + c : -1;
      key[bk + c] = tr->mem >= 0 && b + c < sk ? b + c : -1;
    }
    return BN;
  }
  for (c = 0; c < BN && (int64_t)tr->k_tile * BN + c < sk; c++)
    key[c] = (int64_t)tr->k_tile * BN + c;
  return c;
}

/* One member of one task: the kernel's loop over key tiles. */
static void run_member(exec_ctx *x, const tsr_task_rec *t, const tsr_member_rec *mr, int64_t slot)
{
  const tsr_plan *pl = x->pl;
  const tsr_problem *p = &pl->problem;
  int64_t BM = pl->tile_m, BN = pl->tile_n, WN = BN / 32, D = x->D;
  int64_t r0 = (int64_t)mr->q_tile * BM, nr = r0 + BM < p->seq_q ? BM : p->seq_q - r0;
  int64_t kvh = mr->head / (p->heads_q / p->heads_kv), rr, c, d, ti;
  const float *qb = x->q + (((int64_t)mr->batch * p->heads_q + mr->head) * p->seq_q + r0) * D;
  const float *kb = x->k + ((int64_t)mr->batch * p->heads_kv + kvh) * p->seq_k * D;
  const float *vb = x->v + ((int64_t)mr->batch * p->heads_kv + kvh) * p->seq_k * D;
  fp8_head f;
  int f8 = fp8_head_of(x, mr, r0, &f), gather = pl->mapping == TSR_MAP_GATHER;

  for (rr = 0; rr < nr; rr++) {
    x->m[rr] = -INFINITY;
    x->l[rr] = 0.0f;
    x->sel[rr] = 0;
  }
  memset(x->acc, 0, (size_t)(nr * D) * sizeof *x->acc);
  for (ti = t->tile_begin; ti < t->tile_end; ti++) {
    const tsr_tile_rec *tr = &pl->tiles[ti];
    int64_t nc = tile_keys(pl, tr, x->key), c0 = (int64_t)tr->k_tile * BN;
    for (rr = 0; rr < nr; rr++) {
      int64_t seg = pl->qblk[r0 + rr] - pl->qblk[r0];
      const tsr_u32 *w = tr->mem >= 0 && !gather ? pl->membership + tr->mem + seg * WN : NULL;
      const float *qr = f8 ? f.q8 + rr * D : qb + rr * D;
      float *ar = x->acc + rr * D, mx = -INFINITY, mnew, msafe, alpha;
      int any = 0;
      for (c = 0; c < nc; c++) {
        x->on[c] = x->key[c] >= 0 && (!w || (w[c >> 5] >> (c & 31) & 1u));
        if (x->on[c]) {
          const float *kr = f8 ? f.k8 + x->key[c] * D : kb + x->key[c] * D;
          float dot = 0.0f;
          for (d = 0; d < D; d++)
            dot += qr[d] * kr[d];
          if (f8) { /* the row's Q chunk scale, the key's K chunk scale, folded */
            float cf = f.sq[(r0 + rr) / TSR_FP8_CHUNK] * f.sk[x->key[c] / TSR_FP8_CHUNK] * x->scale_log2;
            cf = cf < FLT_MIN ? FLT_MIN : cf; /* as the kernel: an underflow to 0 would make -inf * 0 */
            x->t[c] = TSR_FP8_BIAS + dot; /* exact: |dot| < 2^22 */
            x->cf[c] = cf;
            x->s[c] = dot * cf;
          } else {
            x->s[c] = dot * x->scale_log2;
          }
          any = 1;
          if (x->s[c] > mx) /* skips NaN, as fmaxf; the NaN reaches l below */
            mx = x->s[c];
        }
      }
      if (!any)
        continue; /* nothing selected here: m and l stay as they are */
      x->sel[rr] = 1;
      mnew = x->m[rr] > mx ? x->m[rr] : mx;
      /* Every score so far -inf: exponentiate against 0, so that a real -inf
       * score gives p = 0 and not exp2(-inf - -inf); the epilogue makes such
       * a row NaN. */
      msafe = mnew == -INFINITY ? 0.0f : mnew;
      alpha = exp2f(x->m[rr] - msafe);
      x->l[rr] *= alpha;
      for (d = 0; d < D; d++)
        ar[d] *= alpha;
      for (c = 0; c < nc; c++) {
        if (x->on[c]) {
          /* fp8: p' = 256 p in the kernel's one FFMA (the header) */
          float pr = f8 ? exp2f(fmaf(x->t[c], x->cf[c], fmaf(-TSR_FP8_BIAS, x->cf[c], 8.0f - msafe)))
                        : exp2f(x->s[c] - msafe);
          const float *vr = f8 ? f.v8 + x->key[c] * D : vb + x->key[c] * D;
          x->l[rr] += pr; /* l sums the unquantized p (fp8: p') */
          if (f8) {
            float q8 = tsri_fp8_e4m3(pr);
            if (x->flip) { /* p' within ex2.approx's error of an e4m3 boundary: it may round the other way */
              float hi = tsri_fp8_e4m3(pr * (1 + x->flip_du)), lo = tsri_fp8_e4m3(pr * (1 - x->flip_du));
              if (hi != lo) {
                double vmax = 0;
                for (d = 0; d < D; d++)
                  vmax = fmax(vmax, fabs((double)vr[d] * f.sv[d]));
                /* the flip's change of sum_c 2^s_c v_c (base-2 scores s): p8 moves by hi - lo,
                 * which is (hi - lo) / 256 * 2^m of 2^s; over 2^(lse / ln 2) it is o's */
                x->flip[((int64_t)mr->batch * p->heads_q + mr->head) * p->seq_q + r0 + rr] +=
                    (double)(hi - lo) / TSR_FP8_P_SCALE * exp2((double)msafe) * vmax;
              }
            }
            x->s[c] = q8; /* the score is spent: s holds p8 for the grouped sums below */
            if (pv_kind != TSRI_PV_FP32)
              continue;
            pr = q8;
          }
          for (d = 0; d < D; d++)
            ar[d] += pr * vr[d];
        } else if (f8) {
          x->s[c] = 0.0f;
        }
      }
      /* the wgmmas of this tile: pv_group keys each, contiguous from c0 (an
       * FP8 plan is never gather: map.c refuses it) */
      if (f8 && pv_kind != TSRI_PV_FP32)
        for (c = 0; c < nc; c += pv_group) {
          int64_t n = nc - c < pv_group ? nc - c : pv_group, j;
          if (pv_kind == TSRI_PV_RZ_ALIGN && pv_frac == 13) {
            pv_group_align(ar, x->s + c, f.v8 + (c0 + c) * D, n, D, x->em, x->isum);
            continue;
          }
          for (d = 0; d < D; d++) {
            for (j = 0; j < n; j++)
              x->prod[j] = x->s[c + j] * f.v8[(c0 + c + j) * D + d];
            ar[d] = pv_add(ar[d], x->prod, n);
          }
        }
      x->m[rr] = mnew;
    }
  }

  if (f8) /* O_acc * (sv_c / 256) and l / 256: what the native accumulators hold */
    for (rr = 0; rr < nr; rr++) {
      x->l[rr] *= 1.0f / TSR_FP8_P_SCALE;
      for (d = 0; d < D; d++)
        x->acc[rr * D + d] *= f.sv[d] * (1.0f / TSR_FP8_P_SCALE);
    }
  for (rr = 0; rr < nr; rr++) {
    const float *ar = x->acc + rr * D;
    float lv = x->l[rr], mv = x->m[rr];
    if (x->sel[rr] && mv == -INFINITY)
      lv = NAN; /* selected keys, every score -inf: the reference's exp(-inf - -inf) */
    if (slot >= 0) {
      float *po = x->part_o + (slot * BM + rr) * D;
      memcpy(po, ar, (size_t)D * sizeof *po);
      x->part_m[slot * BM + rr] = isnan(lv) ? NAN : mv;
      x->part_l[slot * BM + rr] = lv;
    } else {
      int64_t row = ((int64_t)mr->batch * p->heads_q + mr->head) * p->seq_q + r0 + rr;
      float *orow = x->o + row * D;
      if (lv == 0.0f) { /* nothing selected */
        memset(orow, 0, (size_t)D * sizeof *orow);
        x->lse[row] = -INFINITY;
      } else { /* a NaN lv makes the row and its lse NaN */
        float inv = 1.0f / lv;
        for (d = 0; d < D; d++)
          orow[d] = ar[d] * inv;
        x->lse[row] = (mv + log2f(lv)) * 0.69314718055994530942f;
      }
    }
  }
}

/* The merge kernel: log-sum-exp combine of a split row's slots. */
static void run_merge(exec_ctx *x, const tsr_merge_rec *mg)
{
  const tsr_plan *pl = x->pl;
  const tsr_problem *p = &pl->problem;
  int64_t BM = pl->tile_m, D = x->D, r0 = (int64_t)mg->q_tile * BM;
  int64_t nr = r0 + BM < p->seq_q ? BM : p->seq_q - r0, rr, s, d;
  for (rr = 0; rr < nr; rr++) {
    int64_t row = ((int64_t)mg->batch * p->heads_q + mg->head) * p->seq_q + r0 + rr;
    float *orow = x->o + row * D, M = -INFINITY, Ms, L = 0.0f;
    for (s = mg->slot_begin; s < mg->slot_begin + mg->n_slots; s++)
      if (x->part_m[s * BM + rr] > M) /* skips a NaN slot, as fmaxf */
        M = x->part_m[s * BM + rr];
    Ms = M == -INFINITY ? 0.0f : M; /* only empty or NaN slots: no -inf - -inf */
    memset(orow, 0, (size_t)D * sizeof *orow);
    for (s = mg->slot_begin; s < mg->slot_begin + mg->n_slots; s++) {
      float ms = x->part_m[s * BM + rr], w;
      const float *po = x->part_o + (s * BM + rr) * D;
      if (ms == -INFINITY)
        continue; /* selected nothing */
      w = exp2f(ms - Ms); /* NaN for a NaN slot: L and the row become NaN */
      L += x->part_l[s * BM + rr] * w;
      for (d = 0; d < D; d++)
        orow[d] += po[d] * w;
    }
    if (L == 0.0f) { /* no slot selected anything */
      x->lse[row] = -INFINITY;
      continue;
    }
    for (d = 0; d < D; d++)
      orow[d] /= L;
    x->lse[row] = (M + log2f(L)) * 0.69314718055994530942f;
  }
}

/* Rounds float32 values to the device dtype (bf16 or fp16) and back: the
 * values the device's FP8 quantization reads. */
static void round_to_dtype(float *f, int64_t n, tsr_dtype dt)
{
  int64_t i;
  for (i = 0; i < n; i++)
    f[i] = dt == TSR_DT_F16 ? tsr_half_to_float(tsr_float_to_half(f[i]))
                            : tsr_bf16_to_float(tsr_float_to_bf16(f[i]));
}

/* Precision fp8: the rounded inputs (the native heads' operands) and the
 * quantized ones; native NULL = the fallback rule's heads. */
static tsr_status fp8_setup(exec_ctx *x, tsr_fp8_tensors *f8, const unsigned char *native,
                            tsr_error *err)
{
  const tsr_problem *p = &x->pl->problem;
  int64_t nq = p->batch * p->heads_q * p->seq_q * p->head_dim;
  int64_t nk = p->batch * p->heads_kv * p->seq_k * p->head_dim;
  tsr_status st;
  round_to_dtype((float *)x->q, nq, p->dtype);
  round_to_dtype((float *)x->k, nk, p->dtype);
  round_to_dtype((float *)x->v, nk, p->dtype);
  if ((st = tsri_fp8_quantize(p, x->q, x->k, x->v, f8, err)))
    return st;
  x->f8 = f8;
  x->native = native ? native : f8->native;
  return TSR_OK;
}

static tsr_status execute(const tsr_plan *pl, const tsr_array *q, const tsr_array *k,
                          const tsr_array *v, const unsigned char *native, float ex2_ulps,
                          double *flip, tsr_array *out, tsr_array *lse, tsr_error *err)
{
  exec_ctx x;
  tsr_fp8_tensors f8;
  const tsr_problem *p;
  tsr_status st = TSR_OK;
  int64_t B, Hq, Sq, D, n_o, n_l, i, ti;
  float *fo = NULL, *fl = NULL;

  if (out)
    memset(out, 0, sizeof *out);
  if (lse)
    memset(lse, 0, sizeof *lse);
  if (!pl || !out)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot execute plan: plan and output are required");
  p = &pl->problem;
  B = p->batch;
  Hq = p->heads_q;
  Sq = p->seq_q;
  D = p->head_dim;
  st = check_tensor(q, "q", B, Hq, Sq, D, err);
  if (!st)
    st = check_tensor(k, "k", B, p->heads_kv, p->seq_k, D, err);
  if (!st)
    st = check_tensor(v, "v", B, p->heads_kv, p->seq_k, D, err);
  if (st)
    return st;

  memset(&x, 0, sizeof x);
  memset(&f8, 0, sizeof f8);
  x.pl = pl;
  x.D = D;
  x.scale_log2 = (float)(p->scale * 1.4426950408889634074);
  n_o = B * Hq * Sq * D;
  n_l = B * Hq * Sq;
  x.q = to_float(q);
  x.k = to_float(k);
  x.v = to_float(v);
  fo = malloc((size_t)(n_o ? n_o : 1) * sizeof *fo);
  fl = malloc((size_t)(n_l ? n_l : 1) * sizeof *fl);
  x.part_o = malloc((size_t)(pl->n_slots * pl->tile_m * D + 1) * sizeof(float));
  x.part_m = malloc((size_t)(pl->n_slots * pl->tile_m + 1) * sizeof(float));
  x.part_l = malloc((size_t)(pl->n_slots * pl->tile_m + 1) * sizeof(float));
  x.acc = malloc((size_t)(pl->tile_m * D) * sizeof(float));
  x.m = malloc((size_t)pl->tile_m * sizeof(float));
  x.l = malloc((size_t)pl->tile_m * sizeof(float));
  x.s = malloc((size_t)pl->tile_n * 3 * sizeof(float));
  x.t = x.s ? x.s + pl->tile_n : NULL;
  x.cf = x.s ? x.s + 2 * pl->tile_n : NULL;
  x.prod = malloc((size_t)pl->tile_n * sizeof(float));
  x.em = malloc((size_t)D * sizeof(int) + 1);
  x.isum = malloc((size_t)D * sizeof(int32_t) + 1);
  x.on = malloc((size_t)pl->tile_n);
  x.key = malloc((size_t)pl->tile_n * sizeof *x.key);
  x.sel = malloc((size_t)pl->tile_m);
  if (!x.q || !x.k || !x.v || !fo || !fl || !x.part_o || !x.part_m || !x.part_l || !x.acc ||
      !x.m || !x.l || !x.s || !x.prod || !x.em || !x.isum || !x.on || !x.key || !x.sel) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot execute plan: out of memory for %lld outputs",
                       (long long)n_o);
    goto done;
  }
  /* Poison: a row the plan forgets stays NaN and fails any comparison. */
  for (i = 0; i < n_o; i++)
    fo[i] = NAN;
  for (i = 0; i < n_l; i++)
    fl[i] = NAN;
  for (i = 0; i < pl->n_slots * pl->tile_m; i++) {
    x.part_m[i] = NAN;
    x.part_l[i] = NAN;
  }
  x.o = fo;
  x.lse = fl;
  if (pl->opts.precision == TSR_PREC_FP8 && (st = fp8_setup(&x, &f8, native, err)))
    goto done;
  if (x.f8 && flip) {
    x.flip = flip;
    x.flip_du = ex2_ulps * 0x1p-23f;
  }

  for (ti = 0; ti < pl->n_tasks; ti++) {
    const tsr_task_rec *t = &pl->tasks[ti];
    for (i = 0; i < t->n_members; i++)
      run_member(&x, t, &pl->members[t->member_begin + i], t->partial >= 0 ? t->partial + i : -1);
  }
  for (i = 0; i < pl->n_merges; i++)
    run_merge(&x, &pl->merges[i]);
  if (x.flip) /* sum_c 2^s_c over the row is e^lse */
    for (i = 0; i < n_l; i++)
      x.flip[i] = x.flip[i] > 0 && isfinite(fl[i]) ? x.flip[i] / exp((double)fl[i]) : 0.0;

  {
    /* out and lse mirror q's dimensions, as tsr_ref_attention's do. */
    int64_t shape[4] = {B, Hq, Sq, D}, off = q->ndim == 4 ? 0 : 1;
    out->dtype = TSR_DT_F32;
    out->ndim = (int)(4 - off);
    memcpy(out->shape, shape + off, (size_t)out->ndim * sizeof *shape);
    if (lse) {
      lse->dtype = TSR_DT_F32;
      lse->ndim = (int)(3 - off);
      memcpy(lse->shape, shape + off, (size_t)lse->ndim * sizeof *shape);
    }
  }
  out->data = fo;
  fo = NULL;
  if (lse) {
    lse->data = fl;
    fl = NULL;
  }

done:
  tsri_fp8_free(&f8);
  free((void *)x.q);
  free((void *)x.k);
  free((void *)x.v);
  free(fo);
  free(fl);
  free(x.part_o);
  free(x.part_m);
  free(x.part_l);
  free(x.acc);
  free(x.m);
  free(x.l);
  free(x.s);
  free(x.prod);
  free(x.em);
  free(x.isum);
  free(x.on);
  free(x.key);
  free(x.sel);
  return st;
}

tsr_status tsr_cpu_execute(const tsr_plan *pl, const tsr_array *q, const tsr_array *k,
                           const tsr_array *v, tsr_array *out, tsr_array *lse, tsr_error *err)
{
  return execute(pl, q, k, v, NULL, 0.0f, NULL, out, lse, err);
}

tsr_status tsri_cpu_execute_heads(const tsr_plan *pl, const tsr_array *q, const tsr_array *k,
                                 const tsr_array *v, const unsigned char *native, tsr_array *out,
                                 tsr_array *lse, tsr_error *err)
{
  if (!pl || pl->opts.precision != TSR_PREC_FP8 || !native)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "tsri_cpu_execute_heads: needs an fp8 plan and the heads' choices");
  return execute(pl, q, k, v, native, 0.0f, NULL, out, lse, err);
}

tsr_status tsri_cpu_execute_fp8(const tsr_plan *pl, const tsr_array *q, const tsr_array *k,
                                const tsr_array *v, const unsigned char *native, float ex2_ulps,
                                double *flip, tsr_array *out, tsr_array *lse, tsr_error *err)
{
  if (!pl || pl->opts.precision != TSR_PREC_FP8)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsri_cpu_execute_fp8: needs an fp8 plan");
  if (flip)
    memset(flip, 0, (size_t)(pl->problem.batch * pl->problem.heads_q * pl->problem.seq_q) * sizeof *flip);
  return execute(pl, q, k, v, native, ex2_ulps, flip, out, lse, err);
}

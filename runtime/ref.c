/*
 * ref.c: the CPU reference attention, the oracle every other path (CPU plan
 * executor, GPU kernels) is compared with.
 *
 * It is written to be obviously right, not fast: for each query token it
 * walks the selected key blocks of its query block's mask row, computes the
 * scores in double, and applies a two-pass softmax (max, then sum and
 * weighted V).  Nothing outside the selected blocks is ever touched, so an
 * unselected interaction cannot leak in.  Cost: O(selected pairs * D)
 * double operations plus one Sk x D double copy of K and V per KV head.
 *
 * Non-finite values (the definition every other path reproduces).  What
 * plain IEEE float64 arithmetic gives in the computation below is the
 * result; for a query token with a non-empty set K of selected key tokens:
 *
 *   s_j = scale * sum_d q_d k_jd      (inf * 0 and inf - inf are NaN)
 *   mx  = max_{j in K} s_j,   p_j = exp(s_j - mx),   L = sum_j p_j
 *   o_d = (sum_j p_j v_jd) / L,       lse = mx + log L
 *
 * which works out, per row, as:
 *  - any selected score NaN, any +inf (exp(inf - inf)), or every selected
 *    score -inf (exp(-inf - -inf)): L is NaN, so the whole row of o and its
 *    lse are NaN.  (The max below skips NaN; with a NaN score L is NaN
 *    whatever mx is, so that choice changes nothing.)
 *  - otherwise mx is finite, lse is finite, and a selected score of -inf
 *    only gives p_j = 0;
 * and per element of o (lse does not involve v):
 *  - o_d is NaN when a selected v_jd is NaN, even under p_j = 0 (0 * NaN),
 *    when v_jd = +-inf under p_j = 0 (0 * inf), or when +inf and -inf both
 *    reach the sum; otherwise +-inf when a selected v_jd is +-inf.
 * A row with no selected key is the contract's zeros and lse -inf, and no
 * unselected key is ever read, so NaN there changes nothing.
 *
 * The float32 paths (tsr_cpu_execute, the GPU kernels) give the same
 * positions, NaN where this gives NaN and inf where it gives inf, as long
 * as the inputs stay clear of float32 range effects: no finite product or
 * sum overflowing float32 (fp16 outputs: 65504), no probability or online
 * rescale factor underflowing to 0 in float32 where it does not here (then
 * 0 * inf makes NaN).  One known exception on the GPU: a non-finite v_jd at
 * a key that a row does not select, in a key tile that row's physical tile
 * computes because other rows of it select that key, reaches the row
 * through the tensor-core product (0 * NaN), as it does in FlashAttention
 * and FlexAttention; a row with no selected key at all still gets zeros.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

static double elem(const tsr_array *a, int64_t i)
{
  if (a->dtype == TSR_DT_F16)
    return tsr_half_to_float(((const uint16_t *)a->data)[i]);
  if (a->dtype == TSR_DT_BF16)
    return tsr_bf16_to_float(((const uint16_t *)a->data)[i]);
  if (a->dtype == TSR_DT_F64)
    return ((const double *)a->data)[i];
  return ((const float *)a->data)[i];
}

static tsr_status alloc_f32(tsr_array *a, int ndim, const int64_t *shape, tsr_error *err)
{
  int64_t n = 1;
  int i;
  memset(a, 0, sizeof *a);
  a->dtype = TSR_DT_F32;
  a->ndim = ndim;
  for (i = 0; i < ndim; i++) {
    a->shape[i] = shape[i];
    n *= shape[i];
  }
  a->data = malloc((size_t)n * sizeof(float));
  if (!a->data)
    return tsr_error_set(err, TSR_ERR_NOMEM, "reference attention: out of memory for %lld floats",
                         (long long)n);
  return TSR_OK;
}

tsr_status tsr_ref_attention(const tsr_geom *g, const tsr_mask *m, const tsr_array *q,
                             const tsr_array *k, const tsr_array *v, double scale,
                             tsr_array *out, tsr_array *lse, tsr_error *err)
{
  tsr_problem p;
  tsr_status s;
  int64_t B, Hq, Hkv, Sq, Sk, D, grp, b, hk, gi, i, j, t, key, d;
  int64_t shape[4];
  double *kbuf = NULL, *vbuf = NULL, *sbuf = NULL, *qrow = NULL, *acc = NULL;
  int64_t *sel = NULL;
  float *o, *l = NULL;
  int qoff;

  if (out)
    memset(out, 0, sizeof *out);
  if (lse)
    memset(lse, 0, sizeof *lse);
  if (!g || !m || !q || !k || !v || !out)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_ref_attention: null argument");
  memset(&p, 0, sizeof p);
  s = tsr_problem_from_arrays(&p, q, k, v, NULL, err);
  if (s != TSR_OK)
    return s;
  if (!isfinite(scale))
    return tsr_error_set(err, TSR_ERR_INVALID, "reference attention: scale %g is not finite",
                         scale);
  if (p.seq_q != tsr_geom_seq_q(g) || p.seq_k != tsr_geom_seq_k(g))
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "reference attention: q and k have %lld and %lld tokens, the geometry "
                         "covers %lld and %lld",
                         (long long)p.seq_q, (long long)p.seq_k, (long long)tsr_geom_seq_q(g),
                         (long long)tsr_geom_seq_k(g));
  s = tsr_mask_check(m, g, p.batch, p.heads_q, NULL, err);
  if (s != TSR_OK)
    return s;
  B = p.batch, Hq = p.heads_q, Hkv = p.heads_kv, Sq = p.seq_q, Sk = p.seq_k, D = p.head_dim;
  grp = Hq / Hkv;
  if (scale == 0)
    scale = 1.0 / sqrt((double)D);

  qoff = q->ndim == 4 ? 0 : 1; /* out and lse mirror q's dimensions */
  shape[0] = B, shape[1] = Hq, shape[2] = Sq, shape[3] = D;
  s = alloc_f32(out, 4 - qoff, shape + qoff, err);
  if (s == TSR_OK && lse)
    s = alloc_f32(lse, 3 - qoff, shape + qoff, err);
  kbuf = malloc((size_t)(Sk * D) * sizeof(double));
  vbuf = malloc((size_t)(Sk * D) * sizeof(double));
  sbuf = malloc((size_t)Sk * sizeof(double));
  qrow = malloc((size_t)D * sizeof(double));
  acc = malloc((size_t)D * sizeof(double));
  sel = malloc((size_t)tsr_geom_nk(g) * sizeof(int64_t));
  if (s == TSR_OK && (!kbuf || !vbuf || !sbuf || !qrow || !acc || !sel))
    s = tsr_error_set(err, TSR_ERR_NOMEM, "reference attention: out of memory");
  if (s != TSR_OK)
    goto done;
  o = out->data;
  if (lse)
    l = lse->data;

  for (b = 0; b < B; b++)
    for (hk = 0; hk < Hkv; hk++) {
      int64_t kvbase = (b * Hkv + hk) * Sk * D;
      for (i = 0; i < Sk * D; i++) {
        kbuf[i] = elem(k, kvbase + i);
        vbuf[i] = elem(v, kvbase + i);
      }
      for (gi = 0; gi < grp; gi++) {
        int64_t h = hk * grp + gi;
        const uint8_t *plane = tsr_mask_plane(m, b, h);
        for (i = 0; i < tsr_geom_nq(g); i++) {
          int64_t nsel = 0;
          for (j = 0; j < tsr_geom_nk(g); j++)
            if (plane[i * tsr_geom_nk(g) + j])
              sel[nsel++] = j;
          for (t = tsr_geom_q_start(g, i); t < tsr_geom_q_start(g, i + 1); t++) {
            int64_t row = (b * Hq + h) * Sq + t;
            double mx = -INFINITY, sum = 0;
            for (d = 0; d < D; d++)
              qrow[d] = elem(q, row * D + d);
            for (j = 0; j < nsel; j++)
              for (key = tsr_geom_k_start(g, sel[j]); key < tsr_geom_k_start(g, sel[j] + 1);
                   key++) {
                double dot = 0;
                for (d = 0; d < D; d++)
                  dot += qrow[d] * kbuf[key * D + d];
                sbuf[key] = dot * scale;
                if (sbuf[key] > mx)
                  mx = sbuf[key];
              }
            for (d = 0; d < D; d++)
              acc[d] = 0;
            if (nsel == 0) { /* nothing selected: zeros and lse -inf, by contract */
              for (d = 0; d < D; d++)
                o[row * D + d] = 0.0f;
              if (l)
                l[row] = -INFINITY;
              continue;
            }
            for (j = 0; j < nsel; j++)
              for (key = tsr_geom_k_start(g, sel[j]); key < tsr_geom_k_start(g, sel[j] + 1);
                   key++) {
                double pr = exp(sbuf[key] - mx);
                sum += pr;
                for (d = 0; d < D; d++)
                  acc[d] += pr * vbuf[key * D + d];
              }
            for (d = 0; d < D; d++)
              o[row * D + d] = (float)(acc[d] / sum);
            if (l)
              l[row] = (float)(mx + log(sum));
          }
        }
      }
    }
done:
  free(kbuf);
  free(vbuf);
  free(sbuf);
  free(qrow);
  free(acc);
  free(sel);
  if (s != TSR_OK) {
    tsr_npy_free(out);
    if (lse)
      tsr_npy_free(lse);
  }
  return s;
}

double tsr_ref_max_rel_error(const tsr_array *got, const tsr_array *want)
{
  int64_t n = tsr_array_numel(got), i;
  double maxdiff = 0, maxref = 0;
  if (!got || !want || n != tsr_array_numel(want) || !tsr_dtype_size(got->dtype) ||
      got->dtype == TSR_DT_BOOL || got->dtype == TSR_DT_U8 || got->dtype == TSR_DT_I32 ||
      got->dtype == TSR_DT_I64 || want->dtype == TSR_DT_BOOL || want->dtype == TSR_DT_U8 ||
      want->dtype == TSR_DT_I32 || want->dtype == TSR_DT_I64)
    return INFINITY;
  for (i = 0; i < n; i++) {
    double a = elem(got, i), w = elem(want, i);
    if (isnan(a) || isnan(w)) {
      if (isnan(a) != isnan(w)) /* NaN where the reference has none, or the reverse */
        return INFINITY;
      continue;
    }
    if (isinf(a) || isinf(w)) {
      if (a != w)
        return INFINITY;
      continue;
    }
    if (fabs(a - w) > maxdiff)
      maxdiff = fabs(a - w);
    if (fabs(w) > maxref)
      maxref = fabs(w);
  }
  return maxref > 0 ? maxdiff / maxref : maxdiff;
}

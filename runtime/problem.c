/*
 * problem.c: validation of an attention problem's sizes before anything is
 * planned or run.
 *
 * Checking once here lets the planner, the executors and the GPU path assume
 * sane sizes (positive, GQA ratio integral, finite scale, geometry matching
 * the sequence lengths).  Cost: O(1).
 */
#include <math.h>
#include <stdio.h>

#include "tessera.h"

tsr_status tsr_problem_check(tsr_problem *p, tsr_error *err)
{
  static const struct {
    const char *name;
    size_t off;
    int64_t max;
  } sizes[] = {
      {"batch", offsetof(tsr_problem, batch), TSR_MAX_DIM},
      {"query heads", offsetof(tsr_problem, heads_q), TSR_MAX_DIM},
      {"key/value heads", offsetof(tsr_problem, heads_kv), TSR_MAX_DIM},
      {"query length", offsetof(tsr_problem, seq_q), TSR_MAX_SEQ},
      {"key length", offsetof(tsr_problem, seq_k), TSR_MAX_SEQ},
      {"head dim", offsetof(tsr_problem, head_dim), TSR_MAX_DIM},
  };
  size_t i;
  if (!p)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_problem_check: null problem");
  for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    int64_t v = *(const int64_t *)((const char *)p + sizes[i].off);
    if (v < 1 || v > sizes[i].max)
      return tsr_error_set(err, TSR_ERR_INVALID, "invalid problem: %s is %lld, must be 1..%lld",
                           sizes[i].name, (long long)v, (long long)sizes[i].max);
  }
  /* Every (batch, query head) has at least one row of query tiles. */
  if (p->batch > TSR_MAX_ROWS / p->heads_q)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "invalid problem: batch %lld x %lld query heads exceeds the %lld rows "
                         "a plan can address",
                         (long long)p->batch, (long long)p->heads_q, (long long)TSR_MAX_ROWS);
  if (p->heads_q % p->heads_kv)
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "invalid problem: %lld query heads is not a multiple of %lld key/value "
                         "heads",
                         (long long)p->heads_q, (long long)p->heads_kv);
  if (!isfinite(p->scale))
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid problem: scale %g is not finite",
                         p->scale);
  if (p->dtype != TSR_DT_BF16 && p->dtype != TSR_DT_F16)
    return tsr_error_set(err, TSR_ERR_DTYPE,
                         "invalid problem: device dtype %s, expected bf16 or fp16",
                         tsr_dtype_name(p->dtype));
  if (p->layout != TSR_LAYOUT_BHSD && p->layout != TSR_LAYOUT_BSHD)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid problem: unknown layout %d",
                         (int)p->layout);
  if (!p->geom)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid problem: no block geometry");
  if (tsr_geom_seq_q(p->geom) != p->seq_q || tsr_geom_seq_k(p->geom) != p->seq_k)
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "invalid problem: geometry covers %lld x %lld tokens, sequences are "
                         "%lld x %lld",
                         (long long)tsr_geom_seq_q(p->geom), (long long)tsr_geom_seq_k(p->geom),
                         (long long)p->seq_q, (long long)p->seq_k);
  if (p->scale == 0)
    p->scale = 1.0 / sqrt((double)p->head_dim);
  return TSR_OK;
}

/* "q 'q.npy'" when the arrays have names, else "q". */
static const char *subject(char buf[][288], const char *const names[3], int i)
{
  static const char *const role[3] = {"q", "k", "v"};
  if (names && names[i])
    snprintf(buf[i], sizeof buf[i], "%s '%s'", role[i], names[i]);
  else
    snprintf(buf[i], sizeof buf[i], "%s", role[i]);
  return buf[i];
}

tsr_status tsr_problem_from_arrays(tsr_problem *p, const tsr_array *q, const tsr_array *k,
                                   const tsr_array *v, const char *const names[3],
                                   tsr_error *err)
{
  static const char *const dim_name[4] = {"batch", "heads", "length", "head dim"};
  const tsr_array *t[3] = {q, k, v};
  char sb[3][288];
  int64_t dim[3][4]; /* b, h, s, d */
  int i, j;
  if (!p || !q || !k || !v)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_problem_from_arrays: null argument");
  for (i = 0; i < 3; i++)
    subject(sb, names, i);
  for (i = 0; i < 3; i++) {
    if (t[i]->dtype != TSR_DT_F32 && t[i]->dtype != TSR_DT_F16)
      return tsr_error_set(err, TSR_ERR_DTYPE, "invalid %s: expected float32 or fp16, got %s",
                           sb[i], tsr_dtype_name(t[i]->dtype));
    if (t[i]->ndim != 3 && t[i]->ndim != 4)
      return tsr_error_set(err, TSR_ERR_SHAPE,
                           "invalid %s: expected 3 or 4 dimensions ([H, S, D] or [B, H, S, D]), "
                           "got %d",
                           sb[i], t[i]->ndim);
    dim[i][0] = t[i]->ndim == 4 ? t[i]->shape[0] : 1;
    for (j = 0; j < 3; j++)
      dim[i][j + 1] = t[i]->shape[t[i]->ndim - 3 + j];
    for (j = 0; j < 4; j++) {
      int64_t max = j == 2 ? TSR_MAX_SEQ : TSR_MAX_DIM;
      if (dim[i][j] < 1 || dim[i][j] > max)
        return tsr_error_set(err, TSR_ERR_SHAPE, "invalid %s: %s is %lld, must be 1..%lld",
                             sb[i], dim_name[j], (long long)dim[i][j], (long long)max);
    }
  }
  for (i = 1; i < 3; i++)
    for (j = 0; j < 4; j += 3) /* batch and head dim agree across q, k, v */
      if (dim[i][j] != dim[0][j])
        return tsr_error_set(err, TSR_ERR_SHAPE, "invalid %s: %s %lld, but %s has %lld", sb[i],
                             dim_name[j], (long long)dim[i][j], sb[0], (long long)dim[0][j]);
  for (j = 1; j < 3; j++)
    if (dim[2][j] != dim[1][j])
      return tsr_error_set(err, TSR_ERR_SHAPE, "invalid %s: %s %lld, but %s has %lld", sb[2],
                           dim_name[j], (long long)dim[2][j], sb[1], (long long)dim[1][j]);
  if (dim[0][1] % dim[1][1])
    return tsr_error_set(err, TSR_ERR_SHAPE,
                         "invalid heads: %s has %lld, not a multiple of the %lld of %s", sb[0],
                         (long long)dim[0][1], (long long)dim[1][1], sb[1]);
  p->batch = dim[0][0];
  p->heads_q = dim[0][1];
  p->heads_kv = dim[1][1];
  p->seq_q = dim[0][2];
  p->seq_k = dim[1][2];
  p->head_dim = dim[0][3];
  return TSR_OK;
}

/*
 * geom.c: logical block geometry, the token boundaries of query and key
 * blocks.
 *
 * Both kinds (uniform bq x bk with a ragged last block, and variable sizes)
 * are stored the same way, as prefix sums of block sizes, so every consumer
 * asks q_start(i) / k_start(j) and never special-cases uniform blocks.  Cost:
 * (nq + nk + 2) int64 per geometry; accessors are O(1).
 *
 * Token counts are limited to TSR_MAX_SEQ (tessera.h, "Size limits"):
 * kernels index tokens with 32-bit integers.  Block sizes are limited
 * alike; a block longer than its sequence is one ragged block.
 */
#include <stdlib.h>

#include "tessera.h"

struct tsr_geom {
  int64_t seq_q, seq_k, nq, nk;
  int uniform;
  int64_t bq, bk;   /* uniform only */
  int64_t *q_start; /* nq + 1 */
  int64_t *k_start; /* nk + 1 */
};

static tsr_status geom_alloc(int64_t nq, int64_t nk, tsr_geom **out, tsr_error *err)
{
  tsr_geom *g = calloc(1, sizeof *g);
  if (g) {
    g->q_start = malloc((size_t)(nq + 1) * sizeof(int64_t));
    g->k_start = malloc((size_t)(nk + 1) * sizeof(int64_t));
  }
  if (!g || !g->q_start || !g->k_start) {
    tsr_geom_destroy(g);
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot make geometry: out of memory");
  }
  g->nq = nq;
  g->nk = nk;
  *out = g;
  return TSR_OK;
}

tsr_status tsr_geom_uniform(int64_t seq_q, int64_t seq_k, int64_t bq, int64_t bk,
                            tsr_geom **out, tsr_error *err)
{
  tsr_geom *g;
  tsr_status s;
  int64_t i;
  if (!out)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_geom_uniform: null argument");
  *out = NULL;
  if (seq_q < 1 || seq_q > TSR_MAX_SEQ)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid query length %lld: must be 1..%lld",
                         (long long)seq_q, (long long)TSR_MAX_SEQ);
  if (seq_k < 1 || seq_k > TSR_MAX_SEQ)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid key length %lld: must be 1..%lld",
                         (long long)seq_k, (long long)TSR_MAX_SEQ);
  if (bq < 1 || bq > TSR_MAX_SEQ)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid query block size %lld: must be 1..%lld",
                         (long long)bq, (long long)TSR_MAX_SEQ);
  if (bk < 1 || bk > TSR_MAX_SEQ)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid key block size %lld: must be 1..%lld",
                         (long long)bk, (long long)TSR_MAX_SEQ);
  s = geom_alloc((seq_q + bq - 1) / bq, (seq_k + bk - 1) / bk, &g, err);
  if (s != TSR_OK)
    return s;
  g->seq_q = seq_q;
  g->seq_k = seq_k;
  g->uniform = 1;
  g->bq = bq;
  g->bk = bk;
  for (i = 0; i <= g->nq; i++)
    g->q_start[i] = i * bq < seq_q ? i * bq : seq_q;
  for (i = 0; i <= g->nk; i++)
    g->k_start[i] = i * bk < seq_k ? i * bk : seq_k;
  *out = g;
  return TSR_OK;
}

/* Prefix sums of `sizes` into `start`; fails on a non-positive size or a
 * total over the limit.  `what` is "query" or "key". */
static tsr_status prefix(const int64_t *sizes, int64_t n, int64_t *start, const char *what,
                         tsr_error *err)
{
  int64_t i;
  start[0] = 0;
  for (i = 0; i < n; i++) {
    if (sizes[i] < 1)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "invalid %s block %lld: size %lld, must be positive", what,
                           (long long)i, (long long)sizes[i]);
    if (sizes[i] > TSR_MAX_SEQ - start[i])
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "invalid %s blocks: with block %lld of size %lld the total length "
                           "exceeds %lld tokens",
                           what, (long long)i, (long long)sizes[i], (long long)TSR_MAX_SEQ);
    start[i + 1] = start[i] + sizes[i];
  }
  return TSR_OK;
}

tsr_status tsr_geom_variable(const int64_t *q_sizes, int64_t nq, const int64_t *k_sizes,
                             int64_t nk, tsr_geom **out, tsr_error *err)
{
  tsr_geom *g;
  tsr_status s;
  if (!out)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_geom_variable: null argument");
  *out = NULL;
  if (nq < 1 || nq > TSR_MAX_SEQ || !q_sizes)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid query block count %lld: must be 1..%lld",
                         (long long)nq, (long long)TSR_MAX_SEQ);
  if (nk < 1 || nk > TSR_MAX_SEQ || !k_sizes)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid key block count %lld: must be 1..%lld",
                         (long long)nk, (long long)TSR_MAX_SEQ);
  s = geom_alloc(nq, nk, &g, err);
  if (s != TSR_OK)
    return s;
  if ((s = prefix(q_sizes, nq, g->q_start, "query", err)) != TSR_OK ||
      (s = prefix(k_sizes, nk, g->k_start, "key", err)) != TSR_OK) {
    tsr_geom_destroy(g);
    return s;
  }
  g->seq_q = g->q_start[nq];
  g->seq_k = g->k_start[nk];
  *out = g;
  return TSR_OK;
}

void tsr_geom_destroy(tsr_geom *g)
{
  if (g) {
    free(g->q_start);
    free(g->k_start);
    free(g);
  }
}

int64_t tsr_geom_seq_q(const tsr_geom *g) { return g->seq_q; }
int64_t tsr_geom_seq_k(const tsr_geom *g) { return g->seq_k; }
int64_t tsr_geom_nq(const tsr_geom *g) { return g->nq; }
int64_t tsr_geom_nk(const tsr_geom *g) { return g->nk; }

int64_t tsr_geom_q_start(const tsr_geom *g, int64_t i)
{
  return i < 0 || i > g->nq ? -1 : g->q_start[i];
}

int64_t tsr_geom_k_start(const tsr_geom *g, int64_t j)
{
  return j < 0 || j > g->nk ? -1 : g->k_start[j];
}

int tsr_geom_is_uniform(const tsr_geom *g, int64_t *bq, int64_t *bk)
{
  if (!g->uniform)
    return 0;
  if (bq)
    *bq = g->bq;
  if (bk)
    *bk = g->bk;
  return 1;
}

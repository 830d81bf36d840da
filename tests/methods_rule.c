/*
 * methods_rule.c: the corpus generator's family rules (profiler/
 * corpus_families.c, corpus_synth.c) as a command, so tests/python-methods.sh
 * can feed tessera.methods and the corpus the same pooled inputs and compare
 * their masks block for block.  Inputs and outputs are .npy files: float64
 * [n][d] pooled vectors or [nq][nk] probabilities in, a uint8 [nq][nk] plane
 * (or int64 token orders) out.
 *
 *   methods_rule topk PROB K OUT                  per-row top-k
 *   methods_rule cdf PROB TAU MIN_KEEP OUT        per-row CDF threshold
 *   methods_rule xattn SCORE TAU OUT              XAttention on block scores
 *   methods_rule vsa PQ PK HEAD_DIM K OUT         logits, softmax, top-k (VSA)
 *   methods_rule sparge PQ PK SELFQ SELFK HEAD_DIM TAU TOPF THETA SINK OUT
 *   methods_rule sparge-prob PROB SELFQ SELFK TAU TOPF THETA SINK OUT
 *   methods_rule svg NB BLOCK N DENSITY SINK_TOKENS OUT
 *   methods_rule sta G0 G1 G2 K0 K1 K2 OUT
 *   methods_rule radial FRAMES FRAME_TOKENS BLOCK DECAY SINK OUT
 *   methods_rule tiles T H W TT TH TW PERM SIZES  tile / cube order (ragged, whole first)
 *   methods_rule spatial T H W PERM               SVG's (spatial, frame) order
 *
 * A test tool, not installed: errors print one line and exit 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corpus_impl.h"

static void die(const char *what, const tsr_error *err)
{
  fprintf(stderr, "methods_rule: %s%s%s\n", what, err ? ": " : "", err ? err->text : "");
  exit(2);
}

/* A float64 matrix [rows][cols] (matrix) or vector [rows]; the caller frees it. */
static double *load_f64(const char *path, int64_t *rows, int64_t *cols, int matrix)
{
  tsr_array a;
  tsr_error err = {0};
  if (tsr_npy_load(path, &a, &err) != TSR_OK)
    die(path, &err);
  if (a.dtype != TSR_DT_F64 || a.ndim != (matrix ? 2 : 1))
    die("expected a float64 array of the right rank", NULL);
  *rows = a.shape[0];
  *cols = matrix ? a.shape[1] : 1;
  return a.data;
}

static void save(const char *path, tsr_dtype dt, int ndim, int64_t d0, int64_t d1, void *data)
{
  tsr_array a;
  tsr_error err = {0};
  memset(&a, 0, sizeof a);
  a.dtype = dt;
  a.ndim = ndim;
  a.shape[0] = d0;
  a.shape[1] = d1;
  a.data = data;
  if (tsr_npy_save(path, &a, &err) != TSR_OK)
    die(path, &err);
}

static uint8_t *plane_new(int64_t nq, int64_t nk)
{
  uint8_t *p = calloc((size_t)(nq * nk), 1);
  if (!p)
    die("out of memory", NULL);
  return p;
}

/* Softmax of pooled q . k / sqrt(head_dim), as the corpus's head_probs does. */
static double *probs(const char *fq, const char *fk, int head_dim, int64_t *nq, int64_t *nk)
{
  int64_t dq, dk;
  double *pq = load_f64(fq, nq, &dq, 1), *pk = load_f64(fk, nk, &dk, 1), *s;
  if (dq != head_dim || dk != head_dim || head_dim % 2)
    die("pooled vectors must be [n][HEAD_DIM], HEAD_DIM even", NULL);
  s = malloc((size_t)(*nq * *nk) * sizeof *s);
  if (!s)
    die("out of memory", NULL);
  tsr_corpus_logits(pq, *nq, pk, *nk, head_dim / 2, head_dim, s);
  tsr_corpus_softmax_rows(s, *nq, *nk, NULL);
  free(pq);
  free(pk);
  return s;
}

static void layout_out(const tsr_corpus_layout *l, const char *fperm, const char *fsizes)
{
  int64_t *v = malloc((size_t)(l->n > l->nb ? l->n : l->nb) * sizeof *v), i;
  if (!v)
    die("out of memory", NULL);
  for (i = 0; i < l->n; i++)
    v[i] = l->perm[i];
  save(fperm, TSR_DT_I64, 1, l->n, 0, v);
  if (fsizes) {
    for (i = 0; i < l->nb; i++)
      v[i] = l->start[i + 1] - l->start[i];
    save(fsizes, TSR_DT_I64, 1, l->nb, 0, v);
  }
  free(v);
}

int main(int argc, char **argv)
{
  tsr_error err = {0};
  const char *cmd = argc > 1 ? argv[1] : "";
  int64_t nq, nk, one;
  uint8_t *plane = NULL;
  const char *out = argv[argc - 1];
  if (!strcmp(cmd, "topk") && argc == 5) {
    double *p = load_f64(argv[2], &nq, &nk, 1);
    plane = plane_new(nq, nk);
    if (tsr_corpus_topk(p, nq, nk, atoll(argv[3]), plane, &err))
      die("topk", &err);
    free(p);
  } else if (!strcmp(cmd, "cdf") && argc == 6) {
    double *p = load_f64(argv[2], &nq, &nk, 1);
    plane = plane_new(nq, nk);
    if (tsr_corpus_cdf(p, nq, nk, atof(argv[3]), atoll(argv[4]), plane, &err))
      die("cdf", &err);
    free(p);
  } else if (!strcmp(cmd, "xattn") && argc == 5) {
    double *p = load_f64(argv[2], &nq, &nk, 1);
    plane = plane_new(nq, nk);
    if (tsr_corpus_xattn(p, nq, nk, atof(argv[3]), plane, &err))
      die("xattn", &err);
    free(p);
  } else if (!strcmp(cmd, "vsa") && argc == 7) {
    double *p = probs(argv[2], argv[3], atoi(argv[4]), &nq, &nk);
    plane = plane_new(nq, nk);
    if (tsr_corpus_topk(p, nq, nk, atoll(argv[5]), plane, &err))
      die("topk", &err);
    free(p);
  } else if ((!strcmp(cmd, "sparge") && argc == 12) || (!strcmp(cmd, "sparge-prob") && argc == 10)) {
    /* sparge-prob: the probabilities given, not made from pooled vectors. */
    int given = !strcmp(cmd, "sparge-prob"), a = given ? 3 : 4;
    double *p = given ? load_f64(argv[2], &nq, &nk, 1) : probs(argv[2], argv[3], atoi(argv[6]), &nq, &nk);
    double *sq, *sk;
    int64_t n1, n2;
    sq = load_f64(argv[a], &n1, &one, 0);
    sk = load_f64(argv[a + 1], &n2, &one, 0);
    if (n1 != nq || n2 != nk)
      die("self-similarity vectors do not match the pooled blocks", NULL);
    a += given ? 2 : 3;
    plane = plane_new(nq, nk);
    if (tsr_corpus_sparge(p, sq, sk, nq, nk, atof(argv[a]), atof(argv[a + 1]), atof(argv[a + 2]),
                          atoi(argv[a + 3]), plane, &err))
      die("sparge", &err);
    free(p);
    free(sq);
    free(sk);
  } else if (!strcmp(cmd, "svg") && argc == 8) {
    nq = nk = atoll(argv[2]);
    plane = plane_new(nq, nk);
    tsr_corpus_svg_band(nq, atoll(argv[3]), atoll(argv[4]), atof(argv[5]), atoll(argv[6]), plane);
  } else if (!strcmp(cmd, "sta") && argc == 9) {
    int g[3] = {atoi(argv[2]), atoi(argv[3]), atoi(argv[4])};
    int k[3] = {atoi(argv[5]), atoi(argv[6]), atoi(argv[7])};
    nq = nk = (int64_t)g[0] * g[1] * g[2];
    plane = plane_new(nq, nk);
    tsr_corpus_sta(g, k, plane);
  } else if (!strcmp(cmd, "radial") && argc == 8) {
    int64_t f = atoll(argv[3]), b = atoll(argv[4]);
    nq = nk = (atoi(argv[2]) * f + b - 1) / b;
    plane = plane_new(nq, nk);
    tsr_corpus_radial(atoi(argv[2]), f, b, atof(argv[5]), atoi(argv[6]), plane);
  } else if (!strcmp(cmd, "tiles") && argc == 10) {
    tsr_corpus_layout l;
    if (tsr_corpus_layout_tiles(TSR_ORDER_TILE, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]),
                                atoi(argv[5]), atoi(argv[6]), atoi(argv[7]), &l, &err))
      die("tiles", &err);
    layout_out(&l, argv[8], argv[9]);
    tsr_corpus_layout_free(&l);
    return 0;
  } else if (!strcmp(cmd, "spatial") && argc == 6) {
    tsr_corpus_layout l;
    if (tsr_corpus_layout_uniform(TSR_ORDER_SPATIAL, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]),
                                  1, &l, &err))
      die("spatial", &err);
    layout_out(&l, argv[5], NULL);
    tsr_corpus_layout_free(&l);
    return 0;
  } else {
    fprintf(stderr, "methods_rule: unknown command or argument count: '%s' (%d arguments)\n",
            cmd, argc - 1);
    return 2;
  }
  save(out, TSR_DT_U8, 2, nq, nk, plane);
  free(plane);
  return 0;
}

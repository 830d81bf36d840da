/*
 * tests/plan_cases.h: random planning problems for the map, plan and exec
 * suites (header-only, static): a geometry (uniform with any block sizes,
 * ragged or not, or variable), a mask family (random, band + sink, strided,
 * dense, single block, with empty rows and empty heads mixed in), GQA head
 * ratios, batch and head broadcast, cross lengths.  Everything comes from
 * one tu_rng, so a seed reproduces a case.
 */
#ifndef TSR_PLAN_CASES_H
#define TSR_PLAN_CASES_H


#include "tessera.h"
#include "tools.h"
#include "util.h"

typedef struct {
  int64_t B, Hq, Hkv, Sq, Sk, D;
  int64_t nq, nk, mb, mh;
  int64_t *qb, *kb; /* block boundaries [nq + 1], [nk + 1] */
  uint8_t *bits;    /* [mb][mh][nq][nk] */
  tsr_geom *g;
  tsr_mask *m;
  tsr_problem p;
  char what[160];   /* the case in words, for failure messages */
} pc_case;

static const int64_t pc_block_sizes[] = {32, 64, 96, 128, 256, 384, 48, 80};

/* Boundaries of nb variable blocks of sizes in [lo, hi] (nb chosen so they
 * sum to about S); returns nb and sets *S to the exact total. */
static inline int64_t pc_variable_bounds(tu_rng *r, int64_t *S, int64_t lo, int64_t hi,
                                         int64_t **out)
{
  int64_t cap = *S / lo + 2, nb = 0, pos = 0;
  *out = malloc((size_t)(cap + 1) * sizeof **out);
  (*out)[0] = 0;
  while (pos < *S && nb < cap) {
    pos += tu_range(r, lo, hi);
    (*out)[++nb] = pos;
  }
  *S = pos;
  return nb;
}

/* Fills the mask planes with a family: 0 random, 1 band + sink, 2 strided,
 * 3 dense, 4 random sparse with empty rows and an empty head. */
static inline void pc_fill(tu_rng *r, pc_case *c, int family)
{
  int64_t p, i, j, np = c->mb * c->mh;
  for (p = 0; p < np; p++) {
    uint8_t *pl = c->bits + p * c->nq * c->nk;
    double dens = 0.1 + 0.6 * tu_uniform(r);
    int64_t w = tu_range(r, 0, 3), s = tu_range(r, 2, 4);
    for (i = 0; i < c->nq; i++)
      for (j = 0; j < c->nk; j++) {
        uint8_t v;
        switch (family) {
        case 1:
          v = (j == 0) || (i * c->nk / c->nq - j <= w && j - i * c->nk / c->nq <= w);
          break;
        case 2:
          v = (i - j) % s == 0;
          break;
        case 3:
          v = 1;
          break;
        default:
          v = tu_uniform(r) < dens;
          break;
        }
        pl[i * c->nk + j] = v;
      }
    if (family == 4 || family == 0) {
      /* Empty rows, and (family 4) sometimes a whole empty head. */
      for (i = 0; i < c->nq; i++)
        if (tu_uniform(r) < 0.2)
          memset(pl + i * c->nk, 0, (size_t)c->nk);
      if (family == 4 && np > 1 && p == np - 1)
        memset(pl, 0, (size_t)(c->nq * c->nk));
    }
  }
  /* GQA: make some heads of a group copy the group's first head, so packs
   * are possible. */
  if (c->mh > 1 && c->Hq / c->Hkv > 1)
    for (p = 0; p < np; p++)
      if ((p % c->mh) % (c->Hq / c->Hkv) && tu_uniform(r) < 0.6)
        memcpy(c->bits + p * c->nq * c->nk,
               c->bits + (p - (p % c->mh) % (c->Hq / c->Hkv)) * c->nq * c->nk,
               (size_t)(c->nq * c->nk));
}

/* A random case; `max_seq` bounds both lengths; bq, bk > 0 force uniform
 * blocks of that size (0: a random geometry).  Returns 0, or -1 when the
 * library refused the geometry or mask (a test failure for the caller). */
static inline int pc_make_blocks(tu_rng *r, pc_case *c, int64_t max_seq, int64_t fbq, int64_t fbk)
{
  tsr_error err = {0};
  int geo = (int)tu_range(r, 0, 5), family = (int)tu_range(r, 0, 4);
  static const int64_t ratios[][2] = {{1, 1}, {2, 1}, {2, 2}, {4, 2}, {3, 1}, {4, 1}};
  int ri = (int)tu_range(r, 0, 5);
  memset(c, 0, sizeof *c);
  c->B = tu_range(r, 1, 2);
  c->Hq = ratios[ri][0];
  c->Hkv = ratios[ri][1];
  c->D = 8 * tu_range(r, 1, 4);
  c->Sq = tu_range(r, 1, max_seq);
  c->Sk = tu_uniform(r) < 0.5 ? c->Sq : tu_range(r, 1, max_seq);
  if (geo <= 3 || fbq) {
    int64_t bq = pc_block_sizes[tu_range(r, 0, 7)];
    int64_t bk = geo == 0 ? bq : pc_block_sizes[tu_range(r, 0, 7)];
    if (geo == 3) { /* a single block, or nearly */
      bq = c->Sq;
      bk = c->Sk;
    }
    if (fbq) {
      bq = fbq;
      bk = fbk;
    }
    if (tsr_geom_uniform(c->Sq, c->Sk, bq, bk, &c->g, &err))
      goto fail;
    c->nq = tu_uniform_bounds(c->Sq, bq, &c->qb);
    c->nk = tu_uniform_bounds(c->Sk, bk, &c->kb);
    snprintf(c->what, sizeof c->what, "uniform %lldx%lld", (long long)bq, (long long)bk);
  } else {
    int64_t lo = tu_range(r, 1, 64), hi = lo + tu_range(r, 0, 300);
    c->nq = pc_variable_bounds(r, &c->Sq, lo, hi, &c->qb);
    c->nk = pc_variable_bounds(r, &c->Sk, lo, hi, &c->kb);
    {
      int64_t *qs = malloc((size_t)c->nq * sizeof *qs), *ks = malloc((size_t)c->nk * sizeof *ks), i;
      for (i = 0; i < c->nq; i++)
        qs[i] = c->qb[i + 1] - c->qb[i];
      for (i = 0; i < c->nk; i++)
        ks[i] = c->kb[i + 1] - c->kb[i];
      if (tsr_geom_variable(qs, c->nq, ks, c->nk, &c->g, &err)) {
        free(qs);
        free(ks);
        goto fail;
      }
      free(qs);
      free(ks);
    }
    snprintf(c->what, sizeof c->what, "variable %lld..%lld", (long long)lo, (long long)hi);
  }
  c->mb = tu_uniform(r) < 0.3 ? 1 : c->B;
  c->mh = tu_uniform(r) < 0.3 ? 1 : c->Hq;
  c->bits = malloc((size_t)(c->mb * c->mh * c->nq * c->nk) + 1);
  pc_fill(r, c, family);
  if (tsr_mask_from_bytes(c->mb, c->mh, c->nq, c->nk, c->bits, &c->m, &err))
    goto fail;
  c->p.batch = c->B;
  c->p.heads_q = c->Hq;
  c->p.heads_kv = c->Hkv;
  c->p.seq_q = c->Sq;
  c->p.seq_k = c->Sk;
  c->p.head_dim = c->D;
  c->p.dtype = TSR_DT_BF16;
  c->p.geom = c->g;
  {
    size_t n = strlen(c->what);
    snprintf(c->what + n, sizeof c->what - n,
             " blocks, seq %lldx%lld, B %lld (mask %lld), Hq %lld (mask %lld), Hkv %lld, D %lld, "
             "family %d",
             (long long)c->Sq, (long long)c->Sk, (long long)c->B, (long long)c->mb,
             (long long)c->Hq, (long long)c->mh, (long long)c->Hkv, (long long)c->D, family);
  }
  return 0;
fail:
  fprintf(stderr, "pc_make: %s\n", err.text);
  return -1;
}

static inline int pc_make(tu_rng *r, pc_case *c, int64_t max_seq)
{
  return pc_make_blocks(r, c, max_seq, 0, 0);
}

/* Gather cases (TSR_MAP_GATHER): uniform blocks bq x bk, each a tile edge
 * the planner takes (bq a multiple of 16, 2 bk of 32), ragged lengths of
 * a few to some 40 key blocks, every mask family (empty rows, GQA heads
 * sharing rows, broadcast planes); the gather tile is bq x 2bk. */
static inline int pc_make_gather(tu_rng *r, pc_case *c)
{
  static const int64_t sizes[] = {16, 32, 48, 64, 128};
  int64_t bq = sizes[tu_range(r, 0, 4)], bk = sizes[tu_range(r, 0, 4)];
  return pc_make_blocks(r, c, 40 * bk < 1500 ? 40 * bk : 1500, bq, bk);
}

static inline void pc_free(pc_case *c)
{
  tsr_geom_destroy(c->g);
  tsr_mask_destroy(c->m);
  free(c->qb);
  free(c->kb);
  free(c->bits);
  memset(c, 0, sizeof *c);
}

/* Generates the corpus generator's demo preset (every mask family on a
 * small video shape) into a fresh scratch folder `dir` and opens it. */
static inline tsr_corpus *pc_demo_corpus(char *dir, size_t cap)
{
  tsr_corpus_gen_opts go;
  tsr_corpus *cp = NULL;
  tsr_error err = {0};
  tu_tmpdir(dir, cap);
  tsr_corpus_gen_opts_init(&go);
  go.preset = "demo";
  go.out_dir = dir;
  go.seed = 1;
  if (tsr_corpus_generate(&go, NULL, &err) || tsr_corpus_open(dir, &cp, &err)) {
    fprintf(stderr, "pc_demo_corpus: %s\n", err.text);
    return NULL;
  }
  return cp;
}

/* Tile shapes the suites sweep (0x0 = the planner's choice). */
static const int pc_tiles[][2] = {{0, 0}, {64, 64}, {128, 128}, {64, 128}, {128, 64}, {16, 32}, {48, 96}};
#define PC_NTILES ((int)(sizeof pc_tiles / sizeof pc_tiles[0]))

#endif

/*
 * fuzz_corpus.c: libFuzzer harness of the corpus manifest and geometry
 * loader (runtime/corpus.c: tsr_corpus_open, _load_mask, _load_geom).
 *
 * Input: a corpus folder packed into one input (tests/fuzz/fuzz.h): the
 * bytes of manifest.json, then files (masks/NAME.npy, geom/NAME.npy) each
 * after "\n#@file NAME\n".  Each input is unpacked into a fresh folder,
 * opened, and every entry (at most MAX_ENTRIES) is loaded: its heads'
 * kinds and orders, its mask, its geometry, and its problem, which must
 * then be consistent: mask and geometry agree with the entry, and a problem
 * that checks has features.
 *
 * Known defects this harness steps around (issue 14; other branches fix
 * them), so that the fuzzer keeps going instead of stopping at them:
 *  - defect 8: load_sizes sums block sizes without an overflow check; size
 *    files whose entries are not in 1..TSR_GEOM_MAX_SEQ are not loaded;
 *  - defect 9: an entry's file may name a path outside the folder
 *    ("../x.npy"); such entries are not loaded (reading outside the
 *    scratch folder would make runs depend on the machine);
 *  - defect 7: a manifest with huge seq_q (or seq_q / bq) is accepted at
 *    open and its geometry is allocated unchecked; the harness builds
 *    uniform geometries of at most 2^20 blocks an axis, and features for
 *    problems within its bounds.
 * Seeds: one packed folder per entry of `tessera corpus generate --preset
 * demo` (mkseeds); dictionary: the manifest's keys (tests/fuzz/local.mk).
 */
#include <limits.h>

#include "fuzz.h"

#define MAX_ENTRIES 16
#define MAX_HEADS 64
#define MAX_FEATURE_PAIRS ((int64_t)1 << 22) /* block pairs of all heads */
#define MAX_GEOM_BLOCKS ((int64_t)1 << 20)   /* uniform blocks an axis */

static char base_dir[600];
static unsigned long serial;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  snprintf(base_dir, sizeof base_dir, "%s", fz_dir());
  return 0;
}

/* Whether path resolves inside dir (defect 9 aside: see above). */
static int inside(const char *dir, const char *path)
{
  char rd[PATH_MAX], rp[PATH_MAX];
  size_t n;
  if (!realpath(dir, rd) || !realpath(path, rp))
    return 1; /* missing: the loader reports it, nothing outside is read */
  n = strlen(rd);
  return !strncmp(rd, rp, n) && (rp[n] == '/' || rp[n] == '\0');
}

/* A size file the loader can sum without overflow (defect 8). */
static int sizes_bounded(const char *path)
{
  tsr_array a;
  tsr_error err = {0};
  int64_t i, n;
  int ok = 1;
  if (tsr_npy_load(path, &a, &err) != TSR_OK)
    return 1; /* the loader refuses it the same way */
  if (a.dtype == TSR_DT_I64) {
    n = tsr_array_numel(&a);
    for (i = 0; i < n && ok; i++)
      ok = ((const int64_t *)a.data)[i] >= 1 && ((const int64_t *)a.data)[i] <= TSR_GEOM_MAX_SEQ;
  }
  tsr_npy_free(&a);
  return ok;
}

static void load_entry(const tsr_corpus *c, const char *dir, int64_t i)
{
  const tsr_corpus_entry *e = tsr_corpus_get(c, i);
  tsr_error err = {0};
  tsr_mask *m = NULL;
  tsr_geom *g = NULL;
  tsr_problem p;
  tsr_features f;
  tsr_status st;
  int64_t h;
  if (!e)
    FZ_FINDING("entry %lld of %lld is missing", (long long)i, (long long)tsr_corpus_count(c));
  for (h = 0; h < e->heads_q && h < MAX_HEADS; h++) {
    (void)tsr_corpus_head_kind(c, i, h);
    (void)tsr_corpus_head_order(c, i, h);
  }
  if (tsr_corpus_head_kind(c, i, e->heads_q) || tsr_corpus_head_kind(c, i, -1))
    FZ_FINDING("a head out of range has a kind");
  if (!inside(dir, e->file) || (e->q_sizes && !inside(dir, e->q_sizes)) ||
      (e->k_sizes && !inside(dir, e->k_sizes)))
    return; /* known: issue 14 defect 9 */

  st = tsr_corpus_load_mask(c, i, &m, &err);
  FZ_CHECK_ERR(st, err, "tsr_corpus_load_mask");
  if (st == TSR_OK && (tsr_mask_batch(m) != 1 || tsr_mask_heads(m) != e->heads_q ||
                       tsr_mask_nq(m) != e->nq || tsr_mask_nk(m) != e->nk))
    FZ_FINDING("entry %lld: the loaded mask does not have the entry's extents", (long long)i);

  if (e->q_sizes && (!sizes_bounded(e->q_sizes) || !sizes_bounded(e->k_sizes)))
    goto done; /* known: issue 14 defect 8 */
  if (!e->q_sizes && (e->seq_q / e->bq > MAX_GEOM_BLOCKS || e->seq_k / e->bk > MAX_GEOM_BLOCKS))
    goto done; /* known: issue 14 defect 7 (blocks allocated before any limit) */
  tsr_error_clear(&err);
  st = tsr_corpus_load_geom(c, i, &g, &err);
  FZ_CHECK_ERR(st, err, "tsr_corpus_load_geom");
  if (st != TSR_OK)
    goto done;
  if (tsr_geom_nq(g) != e->nq || tsr_geom_nk(g) != e->nk)
    FZ_FINDING("entry %lld: geometry of %lld x %lld blocks, the entry says %lld x %lld",
               (long long)i, (long long)tsr_geom_nq(g), (long long)tsr_geom_nk(g),
               (long long)e->nq, (long long)e->nk);
  if (tsr_geom_seq_q(g) != e->seq_q || tsr_geom_seq_k(g) != e->seq_k)
    FZ_FINDING("entry %lld: geometry of %lld x %lld tokens, the entry says %lld x %lld",
               (long long)i, (long long)tsr_geom_seq_q(g), (long long)tsr_geom_seq_k(g),
               (long long)e->seq_q, (long long)e->seq_k);
  if (!m)
    goto done;
  tsr_error_clear(&err);
  st = tsr_mask_check(m, g, 1, e->heads_q, e->file, &err);
  FZ_CHECK_ERR(st, err, "tsr_mask_check");
  if (st != TSR_OK)
    FZ_FINDING("entry %lld: mask and geometry both match the entry but not each other: %s",
               (long long)i, err.text);
  tsr_corpus_problem(e, g, &p);
  tsr_error_clear(&err);
  st = tsr_problem_check(&p, &err);
  FZ_CHECK_ERR(st, err, "tsr_problem_check");
  if (st == TSR_OK && e->heads_q * e->nq * e->nk <= MAX_FEATURE_PAIRS) {
    tsr_error_clear(&err);
    if (tsr_features_compute(&p, m, 0, &f, &err) != TSR_OK)
      FZ_FINDING("entry %lld: features fail on a checked problem: %s", (long long)i, err.text);
  }
done:
  tsr_geom_destroy(g);
  tsr_mask_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char dir[700];
  tsr_corpus *c = NULL;
  tsr_error err = {0};
  tsr_status st;
  int64_t i, n;

  snprintf(dir, sizeof dir, "%s/c%lu", base_dir, serial++);
  if (mkdir(dir, 0700)) {
    fprintf(stderr, "fuzz_corpus: cannot make '%s': %s\n", dir, strerror(errno));
    abort();
  }
  fz_unpack(data, size, dir);
  st = tsr_corpus_open(dir, &c, &err);
  FZ_CHECK_ERR(st, err, "tsr_corpus_open");
  if (st == TSR_OK) {
    n = tsr_corpus_count(c);
    if (tsr_corpus_get(c, n) || tsr_corpus_get(c, -1))
      FZ_FINDING("an entry out of range exists");
    (void)tsr_corpus_preset(c);
    (void)tsr_corpus_seed(c);
    for (i = 0; i < n && i < MAX_ENTRIES; i++)
      load_entry(c, dir, i);
    tsr_corpus_close(c);
  }
  tu_rmtree(dir);
  return 0;
}

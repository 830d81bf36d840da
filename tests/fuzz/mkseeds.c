/*
 * mkseeds.c: writes the seed inputs of the fuzz harnesses into the build
 * tree (tests/fuzz/local.mk runs it; nothing it writes is committed).
 * Every seed is a file the project itself makes, through the library:
 *
 *   mkseeds npy OUT           arrays of every .npy dtype and 0..8 dimensions
 *                             (tsr_npy_save), masks (tsr_mask_save)
 *   mkseeds mask CORPUS OUT   fuzz_mask inputs: control bytes matching each
 *                             corpus entry's geometry + its mask file, and
 *                             small random masks (byte and packed) with the
 *                             executor comparison on
 *   mkseeds corpus CORPUS OUT fuzz_corpus inputs: one packed folder per
 *                             entry (its manifest entry, mask and size files)
 *                             and one of the first four entries
 *   mkseeds db OUT            databases holding the schema at each version
 *                             (tsri_db_create_at)
 *   mkseeds registry CATALOG OUT
 *                             OUT/registry.json: the bundle registry of
 *                             gen/catalog.json's sm_90a variants, without
 *                             cubins (a host-only context reads none), so
 *                             the database harnesses select against the real
 *                             variant list without building the bundle
 *   mkseeds catalog CATALOG OUT
 *                             fuzz_catalog inputs: the catalog whole, one
 *                             catalog per entry of it, and every variant
 *                             name it expands to (the harness reads each
 *                             input both as a catalog and as a name)
 *
 * CORPUS is a folder made by `tessera corpus generate`.  Exit 0 on success,
 * 1 with a message naming the problem otherwise.
 */
#include <jansson.h>

#include "catalog.h"
#include "fuzz.h"
#include "plan_layout.h"
#include "variant.h"

static int fail(const char *what, const char *detail)
{
  fprintf(stderr, "mkseeds: %s: %s\n", what, detail);
  return 1;
}

/* ---- npy ------------------------------------------------------------------- */

static int seed_npy(const char *out)
{
  static const tsr_dtype dts[] = {TSR_DT_BOOL, TSR_DT_U8,  TSR_DT_I32, TSR_DT_I64,
                                  TSR_DT_F16,  TSR_DT_F32, TSR_DT_F64};
  static const int64_t shapes[][TSR_MAX_DIMS + 1] = {
      /* ndim, extents */
      {0}, {1, 0}, {1, 5}, {2, 3, 4}, {3, 2, 3, 4}, {4, 1, 2, 3, 4}, {3, 0, 7, 2},
      {8, 1, 2, 1, 2, 1, 2, 1, 2},
  };
  tu_rng r = {20261201};
  tsr_error err = {0};
  char path[1024], name[64];
  size_t d, s;
  for (d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      tsr_array a;
      int64_t n, i;
      uint8_t *p;
      memset(&a, 0, sizeof a);
      a.dtype = dts[d];
      a.ndim = (int)shapes[s][0];
      for (i = 0; i < a.ndim; i++)
        a.shape[i] = shapes[s][i + 1];
      n = tsr_array_numel(&a);
      a.data = p = malloc((size_t)n * tsr_dtype_size(a.dtype) + 1);
      for (i = 0; i < n * (int64_t)tsr_dtype_size(a.dtype); i++)
        p[i] = (uint8_t)tu_next(&r);
      if (a.dtype == TSR_DT_BOOL)
        for (i = 0; i < n; i++)
          p[i] &= 1;
      if (a.dtype == TSR_DT_F32)
        for (i = 0; i < n; i++)
          ((float *)p)[i] = (float)tu_normal(&r);
      if (a.dtype == TSR_DT_F16)
        for (i = 0; i < n; i++)
          ((uint16_t *)p)[i] = tsr_float_to_half((float)tu_normal(&r));
      if (a.dtype == TSR_DT_F64)
        for (i = 0; i < n; i++)
          ((double *)p)[i] = tu_normal(&r);
      snprintf(name, sizeof name, "%s-%zu.npy", tsr_dtype_name(a.dtype), s);
      if (tsr_npy_save(fz_path(path, sizeof path, out, name), &a, &err) != TSR_OK)
        return fail("cannot write a seed", err.text);
      free(a.data);
    }
  return 0;
}

/* ---- mask -------------------------------------------------------------------- */

/* The code of block size b (fz_block_size), or -1. */
static int block_code(int64_t b)
{
  int c;
  for (c = 0; c < 16; c++)
    if (fz_block_size(c) == b)
      return c;
  return -1;
}

static void write_mask_seed(const char *out, const char *name, const uint8_t *ctl,
                            const uint8_t *file, size_t n)
{
  char path[1024];
  uint8_t *buf = malloc(FZ_MASK_CTL + n);
  memcpy(buf, ctl, FZ_MASK_CTL);
  memcpy(buf + FZ_MASK_CTL, file, n);
  fz_write(fz_path(path, sizeof path, out, name), buf, FZ_MASK_CTL + n);
  free(buf);
}

/* Small random masks: [H, NQ, NK] bytes and their packed form, with
 * 16-token blocks and 8-dimension heads, so the executor comparison runs. */
static int seed_small_masks(const char *out)
{
  static const int64_t dims[][4] = {{1, 2, 5, 7}, {2, 1, 3, 9}, {1, 1, 17, 33}, {1, 4, 8, 8}};
  tu_rng r = {77};
  tsr_error err = {0};
  char path[1024], name[64];
  size_t i;
  for (i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    int64_t b = dims[i][0], h = dims[i][1], nq = dims[i][2], nk = dims[i][3];
    int64_t rows = b * h * nq, nb = (nk + 7) / 8, j, k;
    uint8_t *bits = tu_rand_bits(&r, (size_t)(rows * nk), 0.4), *packed = calloc((size_t)(rows * nb), 1);
    uint8_t ctl[FZ_MASK_CTL] = {0};
    tsr_mask *m = NULL;
    tsr_array a;
    uint8_t *file;
    size_t n;
    for (j = 0; j < rows; j++)
      for (k = 0; k < nk; k++)
        packed[j * nb + k / 8] |= (uint8_t)(bits[j * nk + k] << (k % 8));
    if (tsr_mask_from_bytes(b, h, nq, nk, bits, &m, &err) != TSR_OK)
      return fail("cannot make a mask", err.text);
    snprintf(name, sizeof name, "small-%zu.npy", i);
    if (tsr_mask_save(fz_path(path, sizeof path, out, name), m, &err) != TSR_OK)
      return fail("cannot write a mask", err.text);
    tsr_mask_destroy(m);
    file = fz_slurp(path, &n);
    remove(path);
    ctl[0] = (uint8_t)(2 | 2 << 4); /* 16 x 16 blocks */
    ctl[1] = (uint8_t)(i * 5);      /* ragged last blocks */
    ctl[2] = FZ_M_EXEC | (i & 1 ? FZ_M_BATCH | FZ_M_HEADS : 0) | (uint8_t)(i % 4) << 6;
    ctl[3] = (uint8_t)(i == 2 ? 1 : 0); /* 16 x 32 tiles for one */
    ctl[4] = (uint8_t)(1 | (i % 4) << 4 | 2 << 6); /* tasks auto/row/split/pack; d8 */
    ctl[5] = (uint8_t)(i + 1);
    ctl[6] = (uint8_t)(i * 3);
    ctl[7] = (uint8_t)i;
    snprintf(name, sizeof name, "small-%zu", i);
    write_mask_seed(out, name, ctl, file, n);
    ctl[2] |= FZ_M_VARIABLE;
    snprintf(name, sizeof name, "small-%zu-variable", i);
    write_mask_seed(out, name, ctl, file, n);
    free(file);
    /* The packed file: uint8 [B, H, NQ, ceil(NK / 8)], nk = 8 * nb - ctl[7] % 8. */
    memset(&a, 0, sizeof a);
    a.dtype = TSR_DT_U8;
    a.ndim = 4;
    a.shape[0] = b, a.shape[1] = h, a.shape[2] = nq, a.shape[3] = nb;
    a.data = packed;
    snprintf(name, sizeof name, "small-%zu-packed.npy", i);
    if (tsr_npy_save(fz_path(path, sizeof path, out, name), &a, &err) != TSR_OK)
      return fail("cannot write a packed mask", err.text);
    file = fz_slurp(path, &n);
    remove(path);
    ctl[2] = (uint8_t)((ctl[2] & ~FZ_M_VARIABLE) | FZ_M_PACKED);
    ctl[7] = (uint8_t)(8 * nb - nk);
    snprintf(name, sizeof name, "small-%zu-packed", i);
    write_mask_seed(out, name, ctl, file, n);
    free(file);
    free(bits);
    free(packed);
  }
  return 0;
}

static int seed_mask(const char *corpus, const char *out)
{
  tsr_corpus *c = NULL;
  tsr_error err = {0};
  char name[64];
  int64_t i;
  if (tsr_corpus_open(corpus, &c, &err) != TSR_OK)
    return fail("cannot open the corpus", err.text);
  for (i = 0; i < tsr_corpus_count(c); i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(c, i);
    uint8_t ctl[FZ_MASK_CTL] = {0};
    int cq = block_code(e->bq), ck = block_code(e->bk);
    uint8_t *file;
    size_t n;
    if (!(file = fz_slurp(e->file, &n)))
      return fail("cannot read", e->file);
    if (cq < 0 || ck < 0)
      ctl[2] |= FZ_M_VARIABLE, cq = ck = 10; /* variable blocks around 128 */
    ctl[0] = (uint8_t)(cq | ck << 4);
    ctl[4] = (uint8_t)((e->head_dim == 128 ? 1 : 0) << 6);
    ctl[3] = (uint8_t)(i % 4) << 5; /* every mapping */
    ctl[7] = (uint8_t)i;
    snprintf(name, sizeof name, "corpus-%03lld", (long long)i);
    write_mask_seed(out, name, ctl, file, n);
    free(file);
  }
  tsr_corpus_close(c);
  return seed_small_masks(out);
}

/* ---- corpus ------------------------------------------------------------------ */

/* Writes FZ_FILE_MARK, name and the bytes of corpus/name to f. */
static int pack_file(FILE *f, const char *corpus, const char *name)
{
  char path[1024];
  size_t n;
  uint8_t *data;
  if (!name)
    return 0;
  if (!(data = fz_slurp(fz_path(path, sizeof path, corpus, name), &n)))
    return fail("cannot read", path);
  fprintf(f, "%s%s\n", FZ_FILE_MARK, name);
  fwrite(data, 1, n, f);
  free(data);
  return 0;
}

/* A seed of the manifest `root` with entries [first, first + count). */
static int write_corpus_seed(const char *corpus, const char *out, json_t *root, size_t first,
                             size_t count, const char *name)
{
  json_t *copy = json_deep_copy(root), *ents = json_array();
  json_t *all = json_object_get(root, "entries");
  char *text, path[1024];
  size_t i;
  int rc = 0;
  FILE *f;
  for (i = first; i < first + count && i < json_array_size(all); i++)
    json_array_append(ents, json_array_get(all, i));
  json_object_set_new(copy, "count", json_integer((json_int_t)json_array_size(ents)));
  json_object_set_new(copy, "entries", ents);
  text = json_dumps(copy, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  f = fopen(fz_path(path, sizeof path, out, name), "wb");
  if (!f || !text) {
    if (f)
      fclose(f);
    free(text);
    json_decref(copy);
    return fail("cannot write", path);
  }
  fputs(text, f);
  for (i = 0; i < json_array_size(ents) && !rc; i++) {
    json_t *e = json_array_get(ents, i), *g = json_object_get(e, "geometry");
    rc = pack_file(f, corpus, json_string_value(json_object_get(e, "file"))) ||
         pack_file(f, corpus, json_string_value(json_object_get(g, "q_sizes"))) ||
         pack_file(f, corpus, json_string_value(json_object_get(g, "k_sizes")));
  }
  if (fclose(f) && !rc)
    rc = fail("cannot write", path);
  free(text);
  json_decref(copy);
  return rc;
}

static int seed_corpus(const char *corpus, const char *out)
{
  char path[1024], name[64];
  json_error_t je;
  json_t *root = json_load_file(fz_path(path, sizeof path, corpus, "manifest.json"), 0, &je);
  size_t i;
  if (!root)
    return fail("cannot read the manifest", je.text);
  for (i = 0; i < json_array_size(json_object_get(root, "entries")); i++) {
    snprintf(name, sizeof name, "entry-%03zu", i);
    if (write_corpus_seed(corpus, out, root, i, 1, name))
      return 1;
  }
  if (write_corpus_seed(corpus, out, root, 0, 4, "entries-0-3"))
    return 1;
  json_decref(root);
  return 0;
}

/* ---- db and registry ----------------------------------------------------------- */

static int seed_db(const char *out)
{
  tsr_error err = {0};
  char path[1024], name[64];
  int v;
  for (v = 1; v <= TSR_DB_SCHEMA_VERSION; v++) {
    snprintf(name, sizeof name, "schema-v%d.db", v);
    remove(fz_path(path, sizeof path, out, name));
    if (tsri_db_create_at(path, v, &err) != TSR_OK)
      return fail("cannot make a database", err.text);
  }
  return 0;
}

static int seed_registry(const char *catalog, const char *out)
{
  tsr_catalog cat;
  tsr_error err = {0};
  json_t *root = json_object(), *vars = json_array();
  char path[1024], why[256], *text;
  size_t i;
  if (tsr_catalog_load(catalog, &cat, &err) != TSR_OK)
    return fail("cannot read the catalog", err.text);
  json_object_set_new(root, "format", json_integer(1));
  json_object_set_new(root, "generator", json_string("mkseeds"));
  json_object_set_new(root, "layout_version", json_integer(TSR_PLAN_LAYOUT_VERSION));
  for (i = 0; i < cat.n; i++) {
    const tsr_catalog_entry *e = &cat.items[i];
    json_t *o = json_object(), *t = json_object(), *x = json_object();
    if (!tsri_variant_fits(&e->v, "sm_90a", why)) {
      json_decref(o), json_decref(t), json_decref(x);
      continue;
    }
    json_object_set_new(x, "cubin", json_sprintf("sm_90a/%s.cubin", e->name));
    json_object_set_new(x, "hash", json_string("0000000000000000"));
    json_object_set_new(t, "sm_90a", x);
    json_object_set_new(o, "name", json_string(e->name));
    json_object_set_new(o, "head_dim", json_integer(e->v.head_dim));
    json_object_set_new(o, "bm", json_integer(e->v.bm));
    json_object_set_new(o, "bn", json_integer(e->v.bn));
    json_object_set_new(o, "stages", json_integer(e->v.stages));
    json_object_set_new(o, "warps", json_integer(e->v.warps));
    json_object_set_new(o, "warpgroups", json_integer(e->v.warpgroups));
    json_object_set_new(o, "membership", json_boolean(e->v.membership));
    json_object_set_new(o, "tma_box", json_integer(e->v.tma_box));
    json_object_set_new(o, "threads", json_integer(tsri_variant_threads(&e->v)));
    json_object_set_new(o, "smem", json_integer(tsri_variant_smem_bytes(&e->v)));
    json_object_set_new(o, "targets", t);
    json_array_append_new(vars, o);
  }
  json_object_set_new(root, "variants", vars);
  text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  if (!text)
    return fail("cannot write the registry", "out of memory");
  fz_write(fz_path(path, sizeof path, out, "registry.json"), text, strlen(text));
  free(text);
  json_decref(root);
  tsr_catalog_free(&cat);
  return 0;
}

/* ---- catalog ------------------------------------------------------------------ */

static int seed_catalog(const char *catalog, const char *out)
{
  tsr_catalog cat;
  tsr_error err = {0};
  json_error_t je;
  json_t *root, *vars;
  char path[1024], name[64], *text;
  size_t i, n = 0;
  if (tsr_catalog_load(catalog, &cat, &err) != TSR_OK)
    return fail("cannot read the catalog", err.text);
  for (i = 0; i < cat.n; i++)
    fz_write(fz_path(path, sizeof path, out, cat.items[i].name), cat.items[i].name,
             strlen(cat.items[i].name));
  tsr_catalog_free(&cat);
  if (!(root = json_load_file(catalog, 0, &je)) || !json_is_array(vars = json_object_get(root, "variants")))
    return fail("cannot read the catalog", root ? "no variants" : je.text);
  text = json_dumps(root, JSON_PRESERVE_ORDER);
  if (!text)
    return fail("cannot write a catalog seed", "out of memory");
  fz_write(fz_path(path, sizeof path, out, "catalog.json"), text, strlen(text));
  free(text);
  for (i = 0; i < json_array_size(vars); i++) {
    json_t *one = json_pack("{s:i, s:[O]}", "version", 1, "variants", json_array_get(vars, i));
    text = one ? json_dumps(one, JSON_PRESERVE_ORDER) : NULL;
    json_decref(one);
    if (!text)
      return fail("cannot write a catalog seed", "out of memory");
    snprintf(name, sizeof name, "entry-%zu.json", n++);
    fz_write(fz_path(path, sizeof path, out, name), text, strlen(text));
    free(text);
  }
  json_decref(root);
  return 0;
}

int main(int argc, char **argv)
{
  const char *usage = "usage: mkseeds npy OUT | mask CORPUS OUT | corpus CORPUS OUT | db OUT | "
                      "registry CATALOG OUT | catalog CATALOG OUT";
  if (argc == 3 && !strcmp(argv[1], "npy"))
    return seed_npy(argv[2]);
  if (argc == 4 && !strcmp(argv[1], "mask"))
    return seed_mask(argv[2], argv[3]);
  if (argc == 4 && !strcmp(argv[1], "corpus"))
    return seed_corpus(argv[2], argv[3]);
  if (argc == 3 && !strcmp(argv[1], "db"))
    return seed_db(argv[2]);
  if (argc == 4 && !strcmp(argv[1], "registry"))
    return seed_registry(argv[2], argv[3]);
  if (argc == 4 && !strcmp(argv[1], "catalog"))
    return seed_catalog(argv[2], argv[3]);
  fprintf(stderr, "%s\n", usage);
  return 1;
}

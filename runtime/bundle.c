/*
 * bundle.c: reads the kernel bundle's registry (see bundle.h) and its
 * cubins.  Loading parses one small JSON file (tens of variants); cubins
 * are read on demand, one file each, when a variant is first launched.
 */
#include "bundle.h"
#include "files.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TSR_PKGLIBDIR
#define TSR_PKGLIBDIR "/usr/local/lib/tessera"
#endif

const char *tsri_bundle_dir(const char *asked, const char *local)
{
  const char *env = getenv("TESSERA_BUNDLE");
  if (asked && *asked)
    return asked;
  if (env && *env)
    return env;
  if (local && *local)
    return local;
  return TSR_PKGLIBDIR "/bundle";
}

static int get_int(json_t *o, const char *k, int *out)
{
  json_t *j = json_object_get(o, k);
  if (!json_is_integer(j)) return 0;
  *out = (int)json_integer_value(j);
  return 1;
}

static tsr_status read_entry(const char *path, size_t i, json_t *o, tsr_bundle_entry *e,
                             tsr_error *err)
{
  json_t *name = json_object_get(o, "name"), *targets = json_object_get(o, "targets"), *t;
  tsr_variant f;
  int memb = 0, smem = 0;
  const char *key;
  tsr_status st;

  memset(e, 0, sizeof *e);
  if (!json_is_string(name) || strlen(json_string_value(name)) >= TSR_VARIANT_NAME_MAX)
    return tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': variant %zu has no name", path, i);
  st = tsri_variant_parse(json_string_value(name), &e->v, err);
  if (st) return st;
  {
    /* A name may spell parameters no kernel has (d99999); the sizes below
     * are only defined, and only computed, for variants that pass the check. */
    tsr_error ce = {0};
    if (tsri_variant_check(&e->v, &ce) != TSR_OK)
      return tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': %s", path, ce.text);
  }
  strcpy(e->name, json_string_value(name));
  /* The fields must say what the name says: a registry edited by hand (or
   * written by another generator) is refused rather than half trusted. */
  memset(&f, 0, sizeof f);
  f = e->v;
  if (!get_int(o, "head_dim", &f.head_dim) || !get_int(o, "bm", &f.bm) || !get_int(o, "bn", &f.bn) ||
      !get_int(o, "stages", &f.stages) || !get_int(o, "warps", &f.warps) ||
      !get_int(o, "warpgroups", &f.warpgroups) || !get_int(o, "tma_box", &f.tma_box) ||
      !get_int(o, "threads", &e->threads) || !get_int(o, "smem", &smem) ||
      !json_is_boolean(json_object_get(o, "membership")))
    return tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': variant '%s' lacks a field",
                         path, e->name);
  {
    /* registries before issue 18 have no "precision": native */
    json_t *pr = json_object_get(o, "precision");
    if (pr && (!json_is_string(pr) ||
               strcmp(json_string_value(pr), e->v.fp8 ? "fp8" : "native") != 0))
      return tsr_error_set(err, TSR_ERR_FORMAT,
                           "bad kernel registry '%s': the precision of variant '%s' disagrees with its name",
                           path, e->name);
  }
    memb = json_is_true(json_object_get(o, "membership"));
  f.membership = memb;
  e->smem = smem;
  if (memcmp(&f, &e->v, sizeof f) != 0 || e->threads != tsri_variant_threads(&e->v) ||
      e->smem != tsri_variant_smem_bytes(&e->v))
    return tsr_error_set(err, TSR_ERR_FORMAT,
                         "bad kernel registry '%s': fields of variant '%s' disagree with its name",
                         path, e->name);
  if (!json_is_object(targets))
    return tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': variant '%s' has no targets",
                         path, e->name);
  json_object_foreach(targets, key, t) {
    int a = tsri_arch_index(key);
    json_t *h = json_object_get(t, "hash");
    if (a < 0)
      return tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': variant '%s': unknown target '%s'",
                           path, e->name, key);
    if (!json_is_string(h) || strlen(json_string_value(h)) != 16)
      return tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': variant '%s' target %s has no hash",
                           path, e->name, key);
    strcpy(e->hash[a], json_string_value(h));
    e->targets |= 1u << a;
  }
  return TSR_OK;
}

tsr_status tsri_bundle_load(const char *dir, tsr_bundle *out, tsr_error *err)
{
  char *path;
  json_error_t je;
  json_t *root, *vars, *j;
  tsr_status st = TSR_OK;
  size_t i, n;

  memset(out, 0, sizeof *out);
  if (!dir) return tsr_error_set(err, TSR_ERR_INVALID, "kernel bundle folder is null");
  n = strlen(dir) + 32;
  path = malloc(n);
  out->dir = strdup(dir);
  if (!path || !out->dir) {
    free(path);
    free(out->dir);
    out->dir = NULL;
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot load kernel bundle '%s': out of memory", dir);
  }
  snprintf(path, n, "%s/registry.json", dir);
  {
    FILE *f = tsri_in_open(path, "cannot read kernel registry", err);
    if (!f) {
      root = NULL;
      st = TSR_ERR_IO;
      goto done;
    }
    root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
  }
  if (!root) {
    st = tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': line %d: %s", path, je.line, je.text);
    goto done;
  }
  j = json_object_get(root, "format");
  vars = json_object_get(root, "variants");
  if (!json_is_integer(j) || json_integer_value(j) != TSR_BUNDLE_FORMAT || !json_is_array(vars)) {
    st = tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': expected format %d with a variant list",
                       path, TSR_BUNDLE_FORMAT);
    goto done;
  }
  j = json_object_get(root, "layout_version");
  if (!json_is_integer(j) || json_integer_value(j) != TSR_PLAN_LAYOUT_VERSION) {
    st = tsr_error_set(err, TSR_ERR_FORMAT,
                       "kernel bundle '%s' was built for plan layout %lld, this library uses %d: rebuild it",
                       dir, json_is_integer(j) ? (long long)json_integer_value(j) : -1LL,
                       TSR_PLAN_LAYOUT_VERSION);
    goto done;
  }
  snprintf(out->nvrtc, sizeof out->nvrtc, "%s",
           json_is_string(json_object_get(root, "nvrtc")) ? json_string_value(json_object_get(root, "nvrtc")) : "");
  snprintf(out->generator, sizeof out->generator, "%s",
           json_is_string(json_object_get(root, "generator")) ? json_string_value(json_object_get(root, "generator")) : "");
  out->items = calloc(json_array_size(vars) + 1, sizeof *out->items);
  if (!out->items) {
    st = tsr_error_set(err, TSR_ERR_NOMEM, "cannot load kernel registry '%s': out of memory", path);
    goto done;
  }
  for (i = 0; i < json_array_size(vars); i++) {
    st = read_entry(path, i, json_array_get(vars, i), &out->items[i], err);
    if (st) goto done;
    if (tsri_bundle_find(out, out->items[i].name) >= 0) {
      st = tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': variant '%s' listed twice", path,
                         out->items[i].name);
      goto done;
    }
    out->n++;
  }
  /* The GPU planner's module per target (optional: older bundles lack it). */
  {
    json_t *pl = json_object_get(root, "planner"), *t;
    const char *key;
    json_object_foreach(pl, key, t) {
      int a = tsri_arch_index(key);
      if (a < 0 || !json_is_object(t)) {
        st = tsr_error_set(err, TSR_ERR_FORMAT, "bad kernel registry '%s': planner target '%s' is unknown",
                           path, key);
        goto done;
      }
      out->planner |= 1u << a;
    }
  }
done:
  json_decref(root);
  free(path);
  if (st) tsri_bundle_free(out);
  return st;
}

void tsri_bundle_free(tsr_bundle *b)
{
  if (!b) return;
  free(b->dir);
  free(b->items);
  memset(b, 0, sizeof *b);
}

long tsri_bundle_find(const tsr_bundle *b, const char *name)
{
  size_t i;
  for (i = 0; name && i < b->n; i++)
    if (strcmp(b->items[i].name, name) == 0) return (long)i;
  return -1;
}

int tsri_bundle_serves(const tsr_bundle_entry *e, const char *arch, int64_t smem_limit,
                      const tsr_variant_need *need)
{
  int a = tsri_arch_index(arch);
  return a >= 0 && (e->targets & (1u << a)) && e->smem <= smem_limit &&
         tsri_variant_serves(&e->v, arch, need);
}

long tsri_bundle_pick(const tsr_bundle *b, const char *arch, const tsr_variant_need *need,
                     int64_t smem_limit)
{
  long best = -1;
  int best_rank = -1;
  size_t i;
  for (i = 0; i < b->n; i++) {
    const tsr_bundle_entry *e = &b->items[i];
    int r;
    if (!tsri_bundle_serves(e, arch, smem_limit, need)) continue;
    r = tsri_variant_rank(&e->v, arch, need);
    if (r > best_rank) {
      best_rank = r;
      best = (long)i;
    }
  }
  return best;
}

/* Path of a cubin (malloc'ed). */
static char *tsri_bundle_cubin_path(const tsr_bundle *b, size_t idx, const char *arch)
{
  size_t n = strlen(b->dir) + strlen(arch) + TSR_VARIANT_NAME_MAX + 16;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s/%s.cubin", b->dir, arch, b->items[idx].name);
  return p;
}

/* Reads the cubin at `path` (malloc'ed; freed here). */
static tsr_status read_cubin_file(char *path, void **data, size_t *size, tsr_error *err)
{
  FILE *f;
  long n;
  unsigned char *buf;

  *data = NULL;
  *size = 0;
  if (!path) return tsr_error_set(err, TSR_ERR_NOMEM, "cannot read cubin: out of memory");
  f = tsri_in_open(path, "cannot read cubin", err);
  if (!f) {
    free(path);
    return TSR_ERR_IO;
  }
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 16 || fseek(f, 0, SEEK_SET) != 0 ||
      !(buf = malloc((size_t)n))) {
    fclose(f);
    tsr_status st = tsr_error_set(err, TSR_ERR_IO, "cannot read cubin '%s': empty or unreadable", path);
    free(path);
    return st;
  }
  if (fread(buf, 1, (size_t)n, f) != (size_t)n || memcmp(buf, "\177ELF", 4) != 0) {
    tsr_status st = tsr_error_set(err, TSR_ERR_FORMAT, "bad cubin '%s': not an ELF file", path);
    fclose(f);
    free(buf);
    free(path);
    return st;
  }
  fclose(f);
  free(path);
  *data = buf;
  *size = (size_t)n;
  return TSR_OK;
}

tsr_status tsri_bundle_read_cubin(const tsr_bundle *b, size_t idx, const char *arch, void **data,
                                 size_t *size, tsr_error *err)
{
  return read_cubin_file(tsri_bundle_cubin_path(b, idx, arch), data, size, err);
}

tsr_status tsri_bundle_read_planner(const tsr_bundle *b, const char *arch, void **data, size_t *size,
                                   tsr_error *err)
{
  int a = tsri_arch_index(arch);
  size_t n = strlen(b->dir) + strlen(arch) + 32;
  char *path;
  *data = NULL;
  *size = 0;
  if (a < 0 || !(b->planner & (1u << a)))
    return tsr_error_set(err, TSR_ERR_NO_VARIANT,
                         "kernel bundle '%s' has no GPU planner for %s (rebuild it with this tessera-gen)",
                         b->dir, arch);
  path = malloc(n);
  if (!path) return tsr_error_set(err, TSR_ERR_NOMEM, "cannot read cubin: out of memory");
  snprintf(path, n, "%s/%s/tsr_plan.cubin", b->dir, arch);
  return read_cubin_file(path, data, size, err);
}

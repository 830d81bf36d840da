/*
 * catalog.c: reads gen/catalog.json into variants (see catalog.h).  A
 * catalog holds tens of variants, so everything here is linear scans over
 * small arrays; the cost is the JSON parse.
 */
#include "catalog.h"
#include "files.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values an entry's list-valued keys may take, at most this many each. */
#define MAX_LIST 8

typedef struct {
  const char *label;
  size_t index;
  tsr_error *err;
} ctx_t;

static tsr_status bad(ctx_t *c, const char *fmt, const char *a, long long b)
{
  char what[200];
  snprintf(what, sizeof what, fmt, a, b);
  return tsr_error_set(c->err, TSR_ERR_FORMAT, "bad catalog '%s': variant entry %zu: %s",
                       c->label, c->index, what);
}

/* Integers a variant name can spell (runtime/variant.c reads at most 5
 * digits); anything larger is refused here rather than wrapped into an int
 * (head_dim 4294967360 is not 64) or overflowing (4 * warpgroups). */
#define MAX_INT_VALUE 99999

/* Stores integer node j of key `k` in *out if in [0, MAX_INT_VALUE]. */
static tsr_status int_value(ctx_t *c, json_t *j, const char *k, int *out)
{
  json_int_t x = json_integer_value(j);
  char what[96];
  if (x < 0 || x > MAX_INT_VALUE) {
    snprintf(what, sizeof what, "key '%s' holds %lld, out of range [0, %d]", k, (long long)x,
             MAX_INT_VALUE);
    return bad(c, "%s%.0lld", what, 0);
  }
  *out = (int)x;
  return TSR_OK;
}

/* Reads key `k` as one integer or a list of integers into out[]. */
static tsr_status int_list(ctx_t *c, json_t *e, const char *k, int *out, size_t *n)
{
  json_t *j = json_object_get(e, k);
  size_t i;
  if (!j) return bad(c, "missing key '%s'%.0lld", k, 0);
  if (json_is_integer(j)) {
    *n = 1;
    return int_value(c, j, k, &out[0]);
  }
  if (!json_is_array(j) || json_array_size(j) == 0 || json_array_size(j) > MAX_LIST)
    return bad(c, "key '%s' must be an integer or a list of 1 to 8 integers%.0lld", k, 0);
  for (i = 0; i < json_array_size(j); i++) {
    json_t *x = json_array_get(j, i);
    tsr_status st;
    if (!json_is_integer(x)) return bad(c, "key '%s' holds a non-integer at position %lld", k, (long long)i);
    if ((st = int_value(c, x, k, &out[i]))) return st;
  }
  *n = json_array_size(j);
  return TSR_OK;
}

static tsr_status one_int(ctx_t *c, json_t *e, const char *k, int *out, int dflt, int required)
{
  json_t *j = json_object_get(e, k);
  if (!j) {
    if (required) return bad(c, "missing key '%s'%.0lld", k, 0);
    *out = dflt;
    return TSR_OK;
  }
  if (!json_is_integer(j)) return bad(c, "key '%s' must be an integer%.0lld", k, 0);
  return int_value(c, j, k, out);
}

static tsr_status add(tsr_catalog *cat, size_t *cap, const tsr_variant *v, ctx_t *c)
{
  tsr_catalog_entry *e;
  size_t i;
  tsr_status st = tsri_variant_check(v, c->err);
  if (st) return st;
  if (cat->n == *cap) {
    size_t ncap = *cap ? 2 * *cap : 16;
    tsr_catalog_entry *ni = realloc(cat->items, ncap * sizeof *ni);
    if (!ni) return tsr_error_set(c->err, TSR_ERR_NOMEM, "cannot grow catalog '%s'", c->label);
    cat->items = ni;
    *cap = ncap;
  }
  e = &cat->items[cat->n];
  e->v = *v;
  tsri_variant_format(v, e->name);
  for (i = 0; i < cat->n; i++)
    if (strcmp(cat->items[i].name, e->name) == 0)
      return bad(c, "duplicate variant '%s'%.0lld", e->name, 0);
  cat->n++;
  return TSR_OK;
}

static tsr_status parse_entry(tsr_catalog *cat, size_t *cap, json_t *e, ctx_t *c)
{
  static const char *const keys[] = { "family", "dtype", "head_dim", "tile", "stages", "warps",
                                      "warpgroups", "layout", "membership", "tma_box", "precision", NULL };
  const char *key;
  json_t *val, *j;
  tsr_variant base;
  tsr_dtype dts[MAX_LIST];
  int dims[MAX_LIST], tiles[MAX_LIST][2];
  size_t ndt = 0, nd = 0, nt = 0, i, a, b, t;
  tsr_status st;

  if (!json_is_object(e)) return bad(c, "must be an object%s%.0lld", "", 0);
  json_object_foreach(e, key, val) {
    int known = 0;
    for (i = 0; keys[i]; i++)
      if (strcmp(keys[i], key) == 0) known = 1;
    if (!known) return bad(c, "unknown key '%s'%.0lld", key, 0);
  }
  memset(&base, 0, sizeof base);

  j = json_object_get(e, "family");
  if (!json_is_string(j)) return bad(c, "key 'family' must be \"sm80\" or \"sm90\"%s%.0lld", "", 0);
  if (strcmp(json_string_value(j), "sm80") == 0) base.family = TSR_FAMILY_SM80;
  else if (strcmp(json_string_value(j), "sm90") == 0) base.family = TSR_FAMILY_SM90;
  else return bad(c, "unknown family '%s'%.0lld", json_string_value(j), 0);

  j = json_object_get(e, "dtype");
  if (json_is_string(j)) j = json_pack("[O]", j);
  else if (j) json_incref(j);
  if (!json_is_array(j) || json_array_size(j) == 0 || json_array_size(j) > MAX_LIST) {
    json_decref(j);
    return bad(c, "key 'dtype' must be \"bf16\", \"fp16\" or a list of them%s%.0lld", "", 0);
  }
  for (i = 0; i < json_array_size(j); i++) {
    const char *s = json_string_value(json_array_get(j, i));
    tsr_dtype dt;
    if (!tsr_dtype_parse(s, &dt) && tsri_variant_dtype_name(dt)) dts[ndt++] = dt;
    else {
      json_decref(j);
      return bad(c, "unknown dtype at position %s%lld (want \"bf16\" or \"fp16\")", "", (long long)i);
    }
  }
  json_decref(j);

  if ((st = int_list(c, e, "head_dim", dims, &nd))) return st;

  j = json_object_get(e, "tile");
  if (json_is_array(j) && json_array_size(j) == 2 && json_is_integer(json_array_get(j, 0))) {
    if (!json_is_integer(json_array_get(j, 1))) return bad(c, "key 'tile' must be [BM, BN]%s%.0lld", "", 0);
    if ((st = int_value(c, json_array_get(j, 0), "tile", &tiles[0][0])) ||
        (st = int_value(c, json_array_get(j, 1), "tile", &tiles[0][1])))
      return st;
    nt = 1;
  } else if (json_is_array(j) && json_array_size(j) > 0 && json_array_size(j) <= MAX_LIST) {
    for (i = 0; i < json_array_size(j); i++) {
      json_t *p = json_array_get(j, i);
      if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_integer(json_array_get(p, 0)) ||
          !json_is_integer(json_array_get(p, 1)))
        return bad(c, "key 'tile' position %s%lld must be [BM, BN]", "", (long long)i);
      if ((st = int_value(c, json_array_get(p, 0), "tile", &tiles[nt][0])) ||
          (st = int_value(c, json_array_get(p, 1), "tile", &tiles[nt][1])))
        return st;
      nt++;
    }
  } else {
    return bad(c, "key 'tile' must be [BM, BN] or a list of them%s%.0lld", "", 0);
  }

  if ((st = one_int(c, e, "stages", &base.stages, 0, 1))) return st;
  if (base.family == TSR_FAMILY_SM80) {
    if (json_object_get(e, "warpgroups")) return bad(c, "the sm80 family takes 'warps', not 'warpgroups'%s%.0lld", "", 0);
    if (json_object_get(e, "tma_box")) return bad(c, "the sm80 family does not use TMA ('tma_box')%s%.0lld", "", 0);
    if ((st = one_int(c, e, "warps", &base.warps, 0, 1))) return st;
  } else {
    if (json_object_get(e, "warps")) return bad(c, "the sm90 family takes 'warpgroups', not 'warps'%s%.0lld", "", 0);
    if ((st = one_int(c, e, "warpgroups", &base.warpgroups, 0, 1))) return st;
    base.warps = 4 * base.warpgroups;
    if ((st = one_int(c, e, "tma_box", &base.tma_box, 0, 0))) return st;
  }

  j = json_object_get(e, "layout");
  if (!j) base.layout = TSR_TL_PERS;
  else if (json_is_string(j) && strcmp(json_string_value(j), "pers") == 0) base.layout = TSR_TL_PERS;
  else if (json_is_string(j) && strcmp(json_string_value(j), "flat") == 0) base.layout = TSR_TL_FLAT;
  else if (json_is_string(j) && strcmp(json_string_value(j), "dyn") == 0) base.layout = TSR_TL_DYN;
  else return bad(c, "key 'layout' must be \"pers\", \"flat\" or \"dyn\"%s%.0lld", "", 0);

  j = json_object_get(e, "precision");
  if (!j || (json_is_string(j) && strcmp(json_string_value(j), "native") == 0)) base.fp8 = 0;
  else if (json_is_string(j) && strcmp(json_string_value(j), "fp8") == 0) base.fp8 = 1;
  else return bad(c, "key 'precision' must be \"native\" or \"fp8\"%s%.0lld", "", 0);

  j = json_object_get(e, "membership");
  /* "gather": the kg variants of gather plans (variant.h), whose key tiles
   * are two half tiles and need no membership code; the name spells it in
   * the membership's place */
  if (!j) base.membership = 1;
  else if (json_is_boolean(j)) base.membership = json_is_true(j);
  else if (json_is_string(j) && strcmp(json_string_value(j), "gather") == 0) base.gather = 1;
  else return bad(c, "key 'membership' must be true, false or \"gather\"%s%.0lld", "", 0);

  for (a = 0; a < ndt; a++)
    for (b = 0; b < nd; b++)
      for (t = 0; t < nt; t++) {
        tsr_variant v = base;
        v.dtype = dts[a];
        v.head_dim = dims[b];
        v.bm = tiles[t][0];
        v.bn = tiles[t][1];
        if ((st = add(cat, cap, &v, c))) return st;
      }
  return TSR_OK;
}

tsr_status tsr_catalog_parse(const char *text, const char *label, tsr_catalog *out, tsr_error *err)
{
  json_error_t je;
  json_t *root, *vars, *ver;
  size_t cap = 0, i;
  tsr_status st = TSR_OK;
  ctx_t c;

  memset(out, 0, sizeof *out);
  c.label = label ? label : "(text)";
  c.index = 0;
  c.err = err;
  root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return tsr_error_set(err, TSR_ERR_FORMAT, "bad catalog '%s': line %d: %s", c.label, je.line, je.text);
  ver = json_object_get(root, "version");
  vars = json_object_get(root, "variants");
  if (!json_is_object(root) || !json_is_integer(ver) || json_integer_value(ver) != 1) {
    st = tsr_error_set(err, TSR_ERR_FORMAT, "bad catalog '%s': expected {\"version\": 1, ...}", c.label);
  } else if (!json_is_array(vars) || json_array_size(vars) == 0) {
    st = tsr_error_set(err, TSR_ERR_FORMAT, "bad catalog '%s': 'variants' must be a non-empty list",
                       c.label);
  } else {
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
      if (strcmp(key, "version") != 0 && strcmp(key, "variants") != 0 && strcmp(key, "comment") != 0) {
        st = tsr_error_set(err, TSR_ERR_FORMAT, "bad catalog '%s': unknown top-level key '%s'",
                           c.label, key);
        break;
      }
    }
    for (i = 0; !st && i < json_array_size(vars); i++) {
      c.index = i;
      st = parse_entry(out, &cap, json_array_get(vars, i), &c);
    }
  }
  json_decref(root);
  if (st) tsr_catalog_free(out);
  return st;
}

tsr_status tsr_catalog_load(const char *path, tsr_catalog *out, tsr_error *err)
{
  FILE *f;
  char *buf = NULL;
  long n;
  tsr_status st;

  memset(out, 0, sizeof *out);
  if (!(f = tsri_in_open(path, "cannot read catalog", err))) return TSR_ERR_IO;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return tsr_error_set(err, TSR_ERR_IO, "cannot read catalog '%s': cannot seek", path);
  }
  buf = malloc((size_t)n + 1);
  if (!buf) {
    fclose(f);
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot read catalog '%s': out of memory", path);
  }
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(buf);
    return tsr_error_set(err, TSR_ERR_IO, "cannot read catalog '%s': short read", path);
  }
  fclose(f);
  buf[n] = 0;
  st = tsr_catalog_parse(buf, path, out, err);
  free(buf);
  return st;
}

void tsr_catalog_free(tsr_catalog *c)
{
  if (!c) return;
  free(c->items);
  c->items = NULL;
  c->n = 0;
}

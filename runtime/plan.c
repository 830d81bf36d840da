/*
 * plan.c: the tsr_plan_* public API: creating a plan (map.c maps the mask
 * onto tiles, tasks.c organises tasks), its summary, and its JSON
 * explanation (Jansson).
 *
 * A plan is plain data (plan_impl.h): arrays of tasks, tiles, members,
 * membership words, qblk and merge records that can be uploaded once and
 * replayed.  Creating one costs what map.c and tasks.c cost (linear in the
 * mask bytes and the emitted tiles); explaining with detail costs a JSON
 * node per record, so it is for inspection, not for the request path.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "plan_impl.h"

static const char *const mapping_names[] = {"auto", "retain", "combine", "subdivide", "gather"};
#define N_MAPPINGS ((int)(sizeof mapping_names / sizeof *mapping_names))
static const char *const tasks_names[] = {"auto", "row", "split", "pack"};

const char *tsr_plan_mapping_name(tsr_mapping m)
{
  return (unsigned)m < (unsigned)N_MAPPINGS ? mapping_names[m] : "unknown";
}

const char *tsr_plan_tasks_name(tsr_tasks t)
{
  return (unsigned)t < 4 ? tasks_names[t] : "unknown";
}

int tsr_plan_parse_mapping(const char *s, tsr_mapping *out)
{
  int i;
  for (i = 0; s && i < N_MAPPINGS; i++)
    if (!strcmp(s, mapping_names[i])) {
      *out = (tsr_mapping)i;
      return 0;
    }
  return -1;
}

static const char *const precision_names[] = {"native", "fp8"};

const char *tsr_precision_name(tsr_precision p)
{
  return (unsigned)p < 2 ? precision_names[p] : "unknown";
}

int tsr_precision_parse(const char *s, tsr_precision *out)
{
  int i;
  for (i = 0; s && i < 2; i++)
    if (!strcmp(s, precision_names[i])) {
      *out = (tsr_precision)i;
      return 0;
    }
  return -1;
}

int tsr_plan_parse_tasks(const char *s, tsr_tasks *out)
{
  int i;
  for (i = 0; s && i < 4; i++)
    if (!strcmp(s, tasks_names[i])) {
      *out = (tsr_tasks)i;
      return 0;
    }
  return -1;
}

void tsr_plan_opts_init(tsr_plan_opts *o)
{
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->mapping = TSR_MAP_AUTO;
  o->tasks = TSR_TASKS_AUTO;
  o->precision = TSR_PREC_NATIVE;
}

void *tsri_plan_buf(tsr_plan *pl, int slot, size_t bytes)
{
  size_t cap = pl->bufs[slot].cap;
  void *p;
  if (bytes <= cap && pl->bufs[slot].p)
    return pl->bufs[slot].p;
  cap = cap + cap / 2 > bytes ? cap + cap / 2 : bytes;
  p = realloc(pl->bufs[slot].p, cap ? cap : 1);
  if (!p)
    return NULL;
  pl->bufs[slot].p = p;
  pl->bufs[slot].cap = cap;
  return p;
}

/* Drops the device copies and empties the records (buffers stay). */
static void plan_reset(tsr_plan *pl)
{
  if (pl->gpu && pl->gpu_free)
    pl->gpu_free(pl->gpu);
  pl->gpu = NULL;
  pl->tasks = NULL, pl->n_tasks = 0;
  pl->tiles = NULL, pl->n_tiles = 0;
  pl->members = NULL, pl->n_members = 0;
  pl->membership = NULL, pl->n_membership = 0;
  pl->qblk = NULL, pl->n_qblk = 0;
  pl->merges = NULL, pl->n_merges = 0;
  pl->n_slots = 0;
  pl->n_q_tiles = pl->n_k_tiles = 0;
  memset(&pl->summary, 0, sizeof pl->summary);
  pl->variant[0] = '\0';
}

void tsr_plan_destroy(tsr_plan *pl)
{
  int i;
  if (!pl)
    return;
  if (pl->gpu && pl->gpu_free)
    pl->gpu_free(pl->gpu);
  for (i = 0; i < TSR_BUF_COUNT; i++)
    free(pl->bufs[i].p);
  free(pl);
}

tsr_status tsr_plan_opts_check(const tsr_plan_opts *o, tsr_error *err)
{
  if (!o)
    return tsr_error_set(err, TSR_ERR_INVALID, "tsr_plan_opts_check: null options");
  if (o->tile_m < 0 || o->tile_n < 0 || (o->tile_m && !tsri_tile_m_ok(o->tile_m)) ||
      (o->tile_n && !tsri_tile_n_ok(o->tile_n)))
    return tsr_error_set(err, TSR_ERR_UNSUPPORTED,
                         "tile %dx%d is not supported: rows must be a multiple of 16 and "
                         "columns a multiple of 32, each at most %d",
                         o->tile_m, o->tile_n, TSR_MAX_TILE);
  if ((unsigned)o->mapping > TSR_MAP_GATHER)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid plan mapping %d", (int)o->mapping);
  if ((unsigned)o->tasks > TSR_TASKS_PACK)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid plan task layout %d", (int)o->tasks);
  if (o->num_sms < 0 || o->num_sms > 65536)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "invalid multiprocessor count %d: expected 1 to 65536 (0 = %d)",
                         o->num_sms, TSR_DEFAULT_NUM_SMS);
  if ((unsigned)o->precision > TSR_PREC_FP8)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid precision %d: expected native or fp8",
                         (int)o->precision);
  if (o->split_tiles < 0)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid split chunk %d: must not be negative",
                         o->split_tiles);
  if (o->arch && (strlen(o->arch) == 0 || strlen(o->arch) >= 16))
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid arch '%s': expected a name like sm_90a",
                         o->arch);
  if (o->variant && strlen(o->variant) >= 96)
    return tsr_error_set(err, TSR_ERR_INVALID, "invalid variant name '%.40s...': longer than 95",
                         o->variant);
  return TSR_OK;
}

tsr_status tsr_plan_update(tsr_plan *pl, const tsr_problem *p, const tsr_mask *m,
                           const tsr_plan_opts *o, tsr_error *err)
{
  tsr_plan_opts defaults;
  tsr_map_ranges ranges;
  tsr_status st;
  tsr_plan_summary *s;

  if (!pl)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot plan: no plan to update");
  plan_reset(pl);
  if (!p || !m)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot plan: problem and mask are required");
  if (!p->geom)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot plan: the problem has no block geometry");
  if (!o) {
    tsr_plan_opts_init(&defaults);
    o = &defaults;
  }
  st = tsr_plan_opts_check(o, err);
  if (st)
    return st;
  pl->problem = *p;
  st = tsr_problem_check(&pl->problem, err);
  if (!st)
    st = tsr_mask_check(m, p->geom, pl->problem.batch, pl->problem.heads_q, NULL, err);
  if (st)
    return st;
  pl->opts = *o;
  pl->opts.arch = NULL;
  pl->opts.variant = NULL;
  pl->num_sms = o->num_sms ? o->num_sms : TSR_DEFAULT_NUM_SMS;
  strcpy(pl->arch, o->arch ? o->arch : TSR_DEFAULT_ARCH);
  if (o->variant)
    strcpy(pl->variant, o->variant);

  memset(&ranges, 0, sizeof ranges);
  st = tsri_map_resolve(pl, o, err);
  if (!st)
    st = tsri_map_build(pl, m, &ranges, err);
  if (!st)
    st = tsri_tasks_build(pl, &ranges, o, err);
  if (st) {
    plan_reset(pl);
    return st;
  }

  s = &pl->summary;
  s->tile_m = pl->tile_m;
  s->tile_n = pl->tile_n;
  s->mapping = pl->mapping;
  s->tasks = pl->task_layout;
  s->tiles = ranges.tiles;
  s->partial_tiles = ranges.partial_tiles;
  s->selected_pairs = ranges.selected_pairs;
  s->computed_pairs = ranges.computed_pairs;
  s->wasted_fraction = ranges.selected_pairs > 0
                           ? (ranges.computed_pairs - ranges.selected_pairs) / ranges.selected_pairs
                           : 0.0;
  s->membership_words = pl->n_membership;
  memcpy(s->variant, pl->variant, sizeof s->variant);
  return TSR_OK;
}

tsr_status tsr_plan_create(const tsr_problem *p, const tsr_mask *m, const tsr_plan_opts *o,
                           tsr_plan **out, tsr_error *err)
{
  tsr_plan *pl;
  tsr_status st;
  if (!out)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot plan: no output handle");
  *out = NULL;
  pl = calloc(1, sizeof *pl);
  if (!pl)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot plan: out of memory");
  st = tsr_plan_update(pl, p, m, o, err);
  if (st) {
    tsr_plan_destroy(pl);
    return st;
  }
  *out = pl;
  return TSR_OK;
}

void tsr_plan_summarize(const tsr_plan *pl, tsr_plan_summary *s)
{
  if (!s)
    return;
  if (!pl) {
    memset(s, 0, sizeof *s);
    return;
  }
  *s = pl->summary;
  /* The variant may be chosen after planning (gpu.c fills pl->variant). */
  memcpy(s->variant, pl->variant, sizeof s->variant);
  s->balance = tsri_tasks_balance(pl);
}

/* Adds a [n][k] integer array of records to `obj` under `key`. */
static int add_records(json_t *obj, const char *key, const tsr_i32 *base, int64_t n, int stride,
                       int k)
{
  json_t *arr = json_array();
  int64_t i;
  int c;
  if (!arr)
    return -1;
  for (i = 0; i < n; i++) {
    json_t *rec = json_array();
    if (!rec || json_array_append_new(arr, rec)) {
      json_decref(arr);
      return -1;
    }
    for (c = 0; c < k; c++)
      if (json_array_append_new(rec, json_integer(base[i * stride + c]))) {
        json_decref(arr);
        return -1;
      }
  }
  return json_object_set_new(obj, key, arr);
}

static int add_words(json_t *obj, const char *key, const tsr_u32 *w, int64_t n)
{
  json_t *arr = json_array();
  int64_t i;
  if (!arr)
    return -1;
  for (i = 0; i < n; i++)
    if (json_array_append_new(arr, json_integer((json_int_t)w[i]))) {
      json_decref(arr);
      return -1;
    }
  return json_object_set_new(obj, key, arr);
}

char *tsr_plan_explain_json(const tsr_plan *pl, int detail)
{
  tsr_plan_summary sb, *s = &sb;
  json_t *root, *sum, *prob;
  char *text = NULL;
  const char *mapping_text;
  int ok = 1;

  if (!pl)
    return NULL;
  tsr_plan_summarize(pl, &sb);
  root = json_object();
  sum = json_object();
  prob = json_object();
  if (!root || !sum || !prob) {
    json_decref(root);
    json_decref(sum);
    json_decref(prob);
    return NULL;
  }
  mapping_text = s->combined && s->subdivided ? "combine+subdivide"
                                              : tsr_plan_mapping_name(s->mapping);
  ok &= !json_object_set_new(root, "layout_version", json_integer(TSR_PLAN_LAYOUT_VERSION));
  ok &= !json_object_set_new(root, "arch", json_string(pl->arch));
  ok &= !json_object_set_new(root, "variant", json_string(pl->variant));
  ok &= !json_object_set_new(prob, "batch", json_integer(pl->problem.batch));
  ok &= !json_object_set_new(prob, "heads_q", json_integer(pl->problem.heads_q));
  ok &= !json_object_set_new(prob, "heads_kv", json_integer(pl->problem.heads_kv));
  ok &= !json_object_set_new(prob, "seq_q", json_integer(pl->problem.seq_q));
  ok &= !json_object_set_new(prob, "seq_k", json_integer(pl->problem.seq_k));
  ok &= !json_object_set_new(prob, "head_dim", json_integer(pl->problem.head_dim));
  ok &= !json_object_set_new(prob, "scale", json_real(pl->problem.scale));
  ok &= !json_object_set_new(prob, "q_blocks", json_integer(tsr_geom_nq(pl->problem.geom)));
  ok &= !json_object_set_new(prob, "k_blocks", json_integer(tsr_geom_nk(pl->problem.geom)));
  ok &= !json_object_set_new(root, "problem", prob);
  ok &= !json_object_set_new(sum, "tile_m", json_integer(s->tile_m));
  ok &= !json_object_set_new(sum, "tile_n", json_integer(s->tile_n));
  ok &= !json_object_set_new(sum, "mapping", json_string(mapping_text));
  ok &= !json_object_set_new(sum, "combined", json_boolean(s->combined));
  ok &= !json_object_set_new(sum, "subdivided", json_boolean(s->subdivided));
  ok &= !json_object_set_new(sum, "tasks", json_string(tsr_plan_tasks_name(s->tasks)));
  ok &= !json_object_set_new(sum, "q_tiles", json_integer(pl->n_q_tiles));
  ok &= !json_object_set_new(sum, "k_tiles", json_integer(pl->n_k_tiles));
  ok &= !json_object_set_new(sum, "tiles", json_integer(s->tiles));
  ok &= !json_object_set_new(sum, "tile_records", json_integer(pl->n_tiles));
  ok &= !json_object_set_new(sum, "partial_tiles", json_integer(s->partial_tiles));
  ok &= !json_object_set_new(sum, "membership_words", json_integer(s->membership_words));
  ok &= !json_object_set_new(sum, "task_count", json_integer(s->tasks_count));
  ok &= !json_object_set_new(sum, "members", json_integer(s->members));
  ok &= !json_object_set_new(sum, "split_rows", json_integer(s->split_rows));
  ok &= !json_object_set_new(sum, "merges", json_integer(s->merges));
  ok &= !json_object_set_new(sum, "slots", json_integer(s->slots));
  ok &= !json_object_set_new(sum, "empty_rows", json_integer(s->empty_rows));
  ok &= !json_object_set_new(sum, "selected_pairs", json_real(s->selected_pairs));
  ok &= !json_object_set_new(sum, "computed_pairs", json_real(s->computed_pairs));
  ok &= !json_object_set_new(sum, "wasted_fraction", json_real(s->wasted_fraction));
  ok &= !json_object_set_new(sum, "num_sms", json_integer(pl->num_sms));
  ok &= !json_object_set_new(sum, "balance", json_real(s->balance));
  ok &= !json_object_set_new(root, "summary", sum);
  if (ok && detail) {
    /* Records as arrays of integers, in the field order of plan_layout.h. */
    ok &= !add_records(root, "tasks", &pl->tasks[0].batch, pl->n_tasks, 8, 8);
    ok &= !add_records(root, "tiles", &pl->tiles[0].k_tile, pl->n_tiles, 2, 2);
    ok &= !add_records(root, "members", &pl->members[0].batch, pl->n_members, 4, 3);
    if (pl->n_merges)
      ok &= !add_records(root, "merges", &pl->merges[0].batch, pl->n_merges, 8, 5);
    else
      ok &= !json_object_set_new(root, "merges", json_array());
    ok &= !add_words(root, "membership", pl->membership, pl->n_membership);
  }
  if (ok)
    text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  return text;
}

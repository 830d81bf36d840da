/*
 * report.c: how good the lookup table is, and pictures of it.
 *
 * The evaluation replays run-time selection (tsr_select_plan on the stored
 * features, and as GPU-planned requests select, on the features their
 * templates publish) for every mask of a split and compares the selected plan's
 * measured median with the best measured candidate of that mask (exhaustive
 * sweep, same GPU) and with the direct plan (the base plan: retain where the
 * geometry allows).  The report writes selection.csv (one line a mask),
 * regime.png (which plan wins where, by density and 128x128 fill) and
 * speedup.png (geometric-mean speed-ups per mask family), into a temporary
 * folder beside --out that is renamed onto it when complete (files.h): a
 * failure leaves no report folder, or the previous report as it was.
 * Cost: one pass over the timings; the PNGs are 8 to 15 KB each (zlib).
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context_impl.h"
#include "files.h"
#include "profile.h"

static void plan_text(const tsrp_dataset *ds, int64_t plan_id, char *buf, size_t n)
{
  int64_t i = tsrp_build_plan_index(ds, plan_id);
  if (i < 0) {
    snprintf(buf, n, "-");
    return;
  }
  snprintf(buf, n, "%s %dx%d %s", tsr_plan_mapping_name(ds->plans[i].mapping),
           ds->plans[i].tile_m, ds->plans[i].tile_n, tsr_plan_tasks_name(ds->plans[i].tasks));
}

/* Selection sel as the request path runs it on a device context: upgraded
 * to gather on bq x 128 tiles, same task layout, where the runtime's rule
 * applies (tsri_context_gather_applies) and a kg variant serves it (here:
 * where the sweep timed that gather plan).  Returns the plan's options. */
static tsr_plan_opts as_requested(const tsrp_dataset *ds, const tsrp_mask_times *m,
                                  const tsr_selection *sel)
{
  tsr_plan_opts g = sel->opts;
  if (!tsri_context_gather_applies(&m->f, sel))
    return sel->opts;
  g.mapping = TSR_MAP_GATHER;
  g.tile_m = (int)m->f.bq;
  g.tile_n = 128;
  g.variant = NULL;
  return tsrp_build_time_of(ds, m, &g) > 0 ? g : sel->opts;
}

/* The automatic plan's options: without a row the request path keeps the
 * caller's open options (tsr_select_request), which the upgrade may turn
 * into gather; else the base plan. */
static tsr_plan_opts auto_opts(const tsrp_dataset *ds, const tsrp_mask_times *m)
{
  tsr_selection a;
  tsr_plan_opts base, g;
  tsr_select_base(&m->f, &base);
  memset(&a, 0, sizeof a);
  tsr_plan_opts_init(&a.opts);
  a.opts.tasks = base.tasks; /* the automatic planner's, as tsr_select_base takes them */
  g = as_requested(ds, m, &a);
  return g.mapping == TSR_MAP_GATHER ? g : base;
}

/* Times of one mask: the selected plan (as the request path runs it), the
 * direct plan (the base plan's shape on its best variant, dyn included) and
 * the automatic plan (what the request path runs without a table: the
 * automatic planner with the tile open, so the base plan's shape, upgraded
 * to gather where that applies, on the variant of the bundle's rank). */
static void mask_times(const tsrp_dataset *ds, const tsrp_mask_times *m, tsr_selection *c,
                       double *ts, double *td, double *ta)
{
  tsr_plan_opts base, a = auto_opts(ds, m);
  tsr_select_base(&m->f, &base);
  *td = tsrp_build_time_of(ds, m, &base);
  *ta = tsrp_build_auto_time_of(ds, m, &a);
  c->opts = c->from_table ? as_requested(ds, m, c) : a;
  *ts = tsrp_build_time_of(ds, m, &c->opts);
}

/* ---- The GPU-planned request's selection ------------------------------- */

/* Features h as a GPU template with options t publishes them
 * (tsri_gpuplan_features_of): fill and touched tiles at t's tile only (a
 * gather template: fill 1 at the blocks' tile), the others unknown. */
static void template_features(const tsr_features *h, const tsr_plan_opts *t, tsr_features *g)
{
  int i, tm, tn, gather = t->mapping == TSR_MAP_GATHER;
  *g = *h;
  for (i = 0; i < TSR_FEATURE_TILES; i++) {
    tsr_features_tile(i, &tm, &tn);
    if (gather ? tm == h->bq && tn == h->bk : tm == t->tile_m && tn == t->tile_n) {
      g->fill[i] = gather ? 1 : h->fill[i];
      g->touched[i] = gather ? -1 : h->touched[i];
    } else {
      g->fill[i] = -1;
      g->touched[i] = -1;
    }
  }
}

static int same_template(const tsr_plan_opts *a, const tsr_plan_opts *b)
{
  return a->mapping == b->mapping && a->tile_m == b->tile_m && a->tile_n == b->tile_n &&
         a->tasks == b->tasks &&
         (a->variant && b->variant ? !strcmp(a->variant, b->variant) : a->variant == b->variant);
}

/* Steps replayed, the first of them not timed (the templates settle), and
 * the templates a replay may meet. */
#define GPU_STEPS 64
#define GPU_SETTLE 8
#define GPU_TEMPLATES 16

/* The templates a replay has met: t[k] the options of template k (0 the
 * automatic one; the variant points into sel[k], the selection that made
 * it), time[k] its time and choice[k] the template its features select,
 * both found on first use (0 and -1 until then). */
typedef struct {
  tsr_plan_opts t[GPU_TEMPLATES];
  tsr_selection sel[GPU_TEMPLATES];
  double time[GPU_TEMPLATES];
  int choice[GPU_TEMPLATES];
  int n;
} replay;

/* The template that template k's features select for mask m (one
 * selection a template: the same mask every step); -1 on an error or more
 * templates than a replay follows. */
static int replay_choice(replay *r, const tsrp_dataset *ds, const tsr_selector *sel,
                         const tsrp_mask_times *m, int k)
{
  tsr_selection step;
  tsr_features g;
  tsr_plan_opts want;
  tsr_error err = {0};
  int j;
  if (r->choice[k] >= 0)
    return r->choice[k];
  template_features(&m->f, &r->t[k], &g);
  if (tsr_select_plan(sel, &g, &step, &err) != TSR_OK)
    return -1;
  want = step.from_table ? as_requested(ds, m, &step) : r->t[0];
  if (want.tasks == TSR_TASKS_PACK)
    want.tasks = TSR_TASKS_ROW;
  for (j = 0; j < r->n && !same_template(&r->t[j], &want); j++)
    ;
  if (j == r->n) {
    if (r->n == GPU_TEMPLATES)
      return -1;
    r->sel[j] = step; /* want's variant points into step, which ends here */
    r->t[j] = want;
    if (step.from_table)
      r->t[j].variant = want.variant ? r->sel[j].variant : NULL;
    r->time[r->n] = 0;
    r->choice[r->n++] = -1;
  }
  return r->choice[k] = j;
}

static int holds_total(const tsr_gpuplan_hold *h, int n)
{
  int i, sum = 0;
  for (i = 0; i < n; i++)
    sum += h->holds[i];
  return sum;
}

/* The time per step of the plans a GPU-planned request runs on mask m, step
 * after step (0 when one of them was not timed): from the automatic
 * template, each step's template is selected from the previous step's
 * features (tsri_context_regime: a row's plan, pack as row; no row, the
 * automatic template), with tsr_gpuplan_hold_step judging each switch by
 * step times, as the Python binding does (each step's time is the sweep's
 * time of its plan: exact, and the same mask every step).  The mean over
 * steps GPU_SETTLE to GPU_STEPS: the held template costs its retries
 * there.  *held is set when the hold refused a selection in those steps,
 * *alternate when templates still switched more than the retries explain
 * (the hold did not settle them).  Plans are timed as the sweep timed them,
 * the host planner's: a split template's chunks, the GPU planner's task
 * order and the Python binding's wait to time a template before leaving it
 * (its first steps, before GPU_SETTLE) are not modelled. */
static double gpu_path_time(const tsrp_dataset *ds, const tsr_selector *sel,
                            const tsrp_mask_times *m, int *alternate, int *held)
{
  replay r;
  tsr_gpuplan_hold h;
  tsr_error err = {0};
  double sum = 0;
  int cur = 0, k, switches = 0, holds = 0;
  *alternate = *held = 0;
  r.t[0] = auto_opts(ds, m);
  r.time[0] = 0;
  r.choice[0] = -1;
  r.n = 1;
  tsr_gpuplan_hold_init(&h);
  for (k = 0; k < GPU_STEPS; k++) {
    int j, next, before;
    int64_t held_for;
    if (r.time[cur] == 0)
      r.time[cur] = tsrp_build_time_of(ds, m, &r.t[cur]);
    if (r.time[cur] <= 0 || (j = replay_choice(&r, ds, sel, m, cur)) < 0)
      return 0; /* a plan not timed, or more templates than followed: not judged */
    if (k >= GPU_SETTLE)
      sum += r.time[cur];
    before = holds_total(&h, r.n);
    if (tsr_gpuplan_hold_step(&h, cur, j, r.time[cur], &next, &held_for, &err) != TSR_OK)
      return 0;
    if (k >= GPU_SETTLE) {
      *held |= held_for > 0;
      holds += holds_total(&h, r.n) != before;
      switches += next != cur;
    }
    cur = next;
  }
  /* Each retry of a held template is at most two switches: to it, and
   * back. */
  *alternate = switches > 2 * holds;
  return sum / (GPU_STEPS - GPU_SETTLE);
}

/* Finds the GPU (name, multiprocessors) to report on: the one named, else
 * the first with timings. */
static tsr_status pick_gpu(tsr_db *db, const char *gpu, char *name, size_t n, int *sms,
                           tsr_error *err)
{
  sqlite3_stmt *st = NULL;
  int rc;
  if (sqlite3_prepare_v2(tsri_db_sqlite(db),
                         "SELECT g.name, g.multiprocessors FROM gpus g WHERE (?1 IS NULL OR "
                         "g.name = ?1) AND EXISTS (SELECT 1 FROM measurements m WHERE m.gpu_id = "
                         "g.id AND m.status = 'ok') ORDER BY g.name LIMIT 1",
                         -1, &st, NULL) != SQLITE_OK)
    return tsr_error_set(err, TSR_ERR_DB, "cannot read '%s': %s", tsr_db_path(db),
                         tsri_db_errmsg(db));
  if (gpu)
    sqlite3_bind_text(st, 1, gpu, -1, SQLITE_TRANSIENT);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    snprintf(name, n, "%s", (const char *)sqlite3_column_text(st, 0));
    *sms = sqlite3_column_int(st, 1);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW)
    return tsr_error_set(err, TSR_ERR_INVALID, "no timings in '%s'%s%s%s", tsr_db_path(db),
                         gpu ? " for '" : "", gpu ? gpu : "", gpu ? "'" : "");
  return TSR_OK;
}

/* Sums over one set of masks: count, within 5%, log ratios; against the
 * automatic plan, the count, log ratios, masks more than 2% slower and the
 * worst ratio. */
typedef struct {
  int64_t n, within, sp_n, au_n, au_slower;
  double lr, ls, lb, la, au_worst;
} eval_sums;

static void sums_add(eval_sums *a, double ts, double tb, double td, double ta)
{
  a->n++;
  a->within += ts <= 1.05 * tb;
  a->lr += log(ts / tb);
  if (td > 0) {
    a->ls += log(td / ts);
    a->lb += log(td / tb);
    a->sp_n++;
  }
  if (ta > 0) {
    a->la += log(ta / ts);
    a->au_slower += ts > 1.02 * ta;
    if (a->au_n == 0 || ta / ts < a->au_worst)
      a->au_worst = ta / ts;
    a->au_n++;
  }
}

static void sums_figures(const eval_sums *a, double *within5, double *regret, double *speedup,
                         double *best)
{
  *within5 = a->n ? (double)a->within / (double)a->n : 0;
  *regret = a->n ? exp(a->lr / (double)a->n) - 1 : 0;
  *speedup = a->sp_n ? exp(a->ls / (double)a->sp_n) : 0;
  *best = a->sp_n ? exp(a->lb / (double)a->sp_n) : 0;
}

static void sums_auto(const eval_sums *a, tsrp_auto_figures *f)
{
  f->masks = a->au_n;
  f->geo_speedup = a->au_n ? exp(a->la / (double)a->au_n) : 0;
  f->slower = a->au_slower;
  f->worst = a->au_n ? a->au_worst : 0;
}

tsr_status tsrp_eval_run(tsr_db *db, const char *gpu, int multiprocessors, const char *split,
                         FILE *csv, tsrp_eval_stats *out, tsr_error *err)
{
  tsrp_dataset ds;
  tsr_selector *sel = NULL;
  tsr_status s;
  int64_t i;
  eval_sums all = {0}, sparse = {0}, gpu_sums = {0};
  memset(out, 0, sizeof *out);
  if ((s = tsrp_build_load(db, gpu, multiprocessors, split, &ds, err)) != TSR_OK)
    return s;
  if ((s = tsr_select_load(db, gpu, multiprocessors, &sel, err)) != TSR_OK) {
    tsrp_build_free(&ds);
    return s;
  }
  if (csv)
    fprintf(csv, "mask,family,density,row_cv,fill_128x128,bq,bk,selected,level,t_selected_ms,"
                 "best,t_best_ms,t_direct_ms,regret,speedup_vs_direct,t_auto_ms,speedup_vs_auto,"
                 "t_gpu_planned_ms,gpu_alternates,gpu_held\n");
  for (i = 0; i < ds.n_masks; i++) {
    const tsrp_mask_times *m = &ds.masks[i];
    tsr_selection c;
    int64_t best_id;
    double tb = tsrp_build_best(m, &best_id), ts, td, ta, tg;
    int alternate, held;
    char bt[64];
    if (tb <= 0)
      continue;
    if ((s = tsr_select_plan(sel, &m->f, &c, err)) != TSR_OK)
      break;
    mask_times(&ds, m, &c, &ts, &td, &ta);
    if (ts <= 0) {
      out->unmeasured++;
      continue;
    }
    out->from_table += c.from_table;
    sums_add(&all, ts, tb, td, ta);
    if (m->f.density < TSRP_SPARSE_DENSITY)
      sums_add(&sparse, ts, tb, td, ta);
    tg = gpu_path_time(&ds, sel, m, &alternate, &held);
    if (tg > 0) {
      sums_add(&gpu_sums, tg, tb, td, ta);
      out->gpu_other += fabs(tg - ts) > 1e-9 * ts; /* tg is a mean over steps */
      out->gpu_cycles += alternate;
      out->gpu_held += held;
    }
    plan_text(&ds, best_id, bt, sizeof bt);
    if (csv)
      fprintf(csv,
              "%s,%s,%.6f,%.4f,%.4f,%lld,%lld,%s %dx%d %s,%d,%.6f,%s,%.6f,%.6f,%.5f,%.4f,%.6f,%.4f,"
              "%.6f,%d,%d\n",
              m->path, m->family, m->f.density, m->f.row_cv, m->f.fill[TSR_FEATURE_TILES - 1],
              (long long)m->f.bq, (long long)m->f.bk, tsr_plan_mapping_name(c.opts.mapping),
              c.opts.tile_m, c.opts.tile_n, tsr_plan_tasks_name(c.opts.tasks), c.level, ts, bt,
              tb, td, ts / tb - 1, td > 0 ? td / ts : 0, ta, ta > 0 ? ta / ts : 0, tg, alternate, held);
  }
  if (s == TSR_OK) {
    out->masks = all.n;
    sums_figures(&all, &out->within5, &out->geo_regret, &out->geo_speedup,
                 &out->geo_best_speedup);
    out->sparse_masks = sparse.n;
    sums_figures(&sparse, &out->sparse_within5, &out->sparse_geo_regret,
                 &out->sparse_geo_speedup, &out->sparse_geo_best_speedup);
    sums_auto(&all, &out->vs_auto);
    sums_auto(&sparse, &out->sparse_vs_auto);
    out->gpu_masks = gpu_sums.n;
    sums_figures(&gpu_sums, &out->gpu_within5, &out->gpu_geo_regret, &out->gpu_geo_speedup,
                 &out->gpu_geo_best_speedup);
    sums_auto(&gpu_sums, &out->gpu_vs_auto);
  }
  tsr_select_destroy(sel);
  tsrp_build_free(&ds);
  return s;
}

/* ---- Plots ------------------------------------------------------------- */

static const unsigned palette[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b,
                                   0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf, 0x393b79, 0xad494a};
#define NPAL (sizeof palette / sizeof palette[0])

/* Scatter of the profiling masks: x = log10 density, y = fill at 128x128,
 * colour = the plan that was fastest on that mask. */
static tsr_status draw_regime(const tsrp_dataset *ds, const char *path, tsr_error *err)
{
  tsrp_png_image im;
  const int W = 960, H = 640, X0 = 80, Y0 = 60, PW = 560, PH = 500;
  int64_t i, j, *used = calloc((size_t)(ds->n_plans + 1), sizeof *used);
  int64_t *colour = calloc((size_t)(ds->n_plans + 1), sizeof *colour);
  int k, nleg = 0;
  tsr_status s;
  char buf[96], other[96];
  if (!used || !colour) {
    free(used);
    free(colour);
    return tsr_error_set(err, TSR_ERR_NOMEM, "out of memory drawing '%s'", path);
  }
  /* One colour per (mapping, tile, tasks): the variants of one plan shape
   * (head dims, kernel families) share it. */
  for (i = 0; i < ds->n_plans; i++) {
    plan_text(ds, ds->plans[i].id, buf, sizeof buf);
    colour[i] = i;
    for (j = 0; j < i; j++) {
      plan_text(ds, ds->plans[j].id, other, sizeof other);
      if (!strcmp(buf, other)) {
        colour[i] = colour[j];
        break;
      }
    }
  }
  if ((s = tsrp_png_new(&im, W, H, err)) != TSR_OK) {
    free(used);
    free(colour);
    return s;
  }
  snprintf(buf, sizeof buf, "BEST PLAN PER MASK - %.60s", ds->gpu);
  tsrp_png_text(&im, X0, 20, 2, 0x000000, buf);
  tsrp_png_rect(&im, X0, Y0, PW, PH, 0xf4f4f4);
  for (k = 0; k <= 3; k++) { /* density 0.001 .. 1 on a log axis */
    int x = X0 + k * PW / 3;
    tsrp_png_rect(&im, x, Y0, 1, PH, 0xcccccc);
    snprintf(buf, sizeof buf, "%g", pow(10, k - 3));
    tsrp_png_text(&im, x - 10, Y0 + PH + 8, 1, 0x000000, buf);
  }
  for (k = 0; k <= 4; k++) {
    int y = Y0 + PH - k * PH / 4;
    tsrp_png_rect(&im, X0, y, PW, 1, 0xcccccc);
    snprintf(buf, sizeof buf, "%.2f", k / 4.0);
    tsrp_png_text(&im, X0 - 40, y - 3, 1, 0x000000, buf);
  }
  tsrp_png_text(&im, X0 + PW / 2 - 60, Y0 + PH + 24, 1, 0x000000, "DENSITY (LOG)");
  tsrp_png_text(&im, 8, Y0 - 14, 1, 0x000000, "FILL AT 128X128");
  /* Palette slots in legend order, so the plans drawn get distinct colours. */
  for (i = 0; i < ds->n_masks; i++) {
    int64_t best;
    if (tsrp_build_best(&ds->masks[i], &best) > 0)
      used[colour[tsrp_build_plan_index(ds, best)]] = 1;
  }
  for (i = 0, k = 0; i < ds->n_plans; i++)
    if (used[i])
      used[i] = 1 + k++;
  for (i = 0; i < ds->n_plans; i++)
    colour[i] = used[colour[i]] ? used[colour[i]] - 1 : 0;
  for (i = 0; i < ds->n_masks; i++) {
    const tsrp_mask_times *m = &ds->masks[i];
    int64_t best, pi;
    double d, x, y;
    if (tsrp_build_best(m, &best) <= 0)
      continue;
    pi = tsrp_build_plan_index(ds, best);
    d = m->f.density > 1e-3 ? m->f.density : 1e-3;
    x = X0 + (log10(d) + 3) / 3 * PW;
    y = Y0 + PH - m->f.fill[TSR_FEATURE_TILES - 1] * PH;
    tsrp_png_rect(&im, (int)x - 3, (int)y - 3, 7, 7, palette[colour[pi] % NPAL]);
  }
  for (i = 0; i < ds->n_plans && nleg < 24; i++)
    if (used[i] && colour[i] == used[i] - 1) {
      int y = Y0 + nleg * 18;
      plan_text(ds, ds->plans[i].id, buf, sizeof buf);
      tsrp_png_rect(&im, X0 + PW + 20, y, 10, 10, palette[colour[i] % NPAL]);
      tsrp_png_text(&im, X0 + PW + 36, y + 2, 1, 0x000000, buf);
      nleg++;
    }
  free(used);
  free(colour);
  s = tsrp_png_write(&im, path, err);
  tsrp_png_free(&im);
  return s;
}

/* Bars per family: geometric-mean speed-up over the direct plan of the
 * selected plan (dark) and of the best plan (light). */
static tsr_status draw_speedup(tsr_db *db, const tsrp_dataset *ds, const char *path,
                               tsr_error *err)
{
  enum { MAXF = 16 };
  char fam[MAXF][64];
  double sel_log[MAXF] = {0}, best_log[MAXF] = {0}, top = 1;
  int cnt[MAXF] = {0}, nf = 0, k;
  int64_t i;
  tsr_selector *sel = NULL;
  tsrp_png_image im;
  tsr_status s;
  const int W = 960, H = 560, X0 = 80, Y0 = 60, PH = 400;
  char buf[96];
  if ((s = tsr_select_load(db, ds->gpu, ds->multiprocessors, &sel, err)) != TSR_OK)
    return s;
  for (i = 0; i < ds->n_masks; i++) {
    const tsrp_mask_times *m = &ds->masks[i];
    tsr_selection c;
    double tb = tsrp_build_best(m, NULL), ts, td, ta;
    tsr_select_plan(sel, &m->f, &c, NULL);
    mask_times(ds, m, &c, &ts, &td, &ta);
    if (tb <= 0 || ts <= 0 || td <= 0)
      continue;
    for (k = 0; k < nf && strcmp(fam[k], m->family); k++)
      ;
    if (k == nf) {
      if (nf == MAXF)
        continue;
      snprintf(fam[nf++], sizeof fam[0], "%s", m->family);
    }
    sel_log[k] += log(td / ts);
    best_log[k] += log(td / tb);
    cnt[k]++;
  }
  tsr_select_destroy(sel);
  for (k = 0; k < nf; k++) {
    sel_log[k] = exp(sel_log[k] / cnt[k]);
    best_log[k] = exp(best_log[k] / cnt[k]);
    if (best_log[k] > top)
      top = best_log[k];
    if (sel_log[k] > top)
      top = sel_log[k];
  }
  top = ceil(top * 2) / 2;
  if ((s = tsrp_png_new(&im, W, H, err)) != TSR_OK)
    return s;
  snprintf(buf, sizeof buf, "SPEED-UP OVER DIRECT PLAN - %.60s", ds->gpu);
  tsrp_png_text(&im, X0, 20, 2, 0x000000, buf);
  for (k = 0; k <= (int)(top * 2); k++) {
    int y = Y0 + PH - (int)(k * 0.5 / top * PH);
    tsrp_png_rect(&im, X0, y, W - X0 - 20, 1, k == 2 ? 0x000000 : 0xdddddd);
    snprintf(buf, sizeof buf, "%.1fX", k * 0.5);
    tsrp_png_text(&im, X0 - 44, y - 3, 1, 0x000000, buf);
  }
  for (k = 0; k < nf; k++) {
    int slot = (W - X0 - 40) / (nf ? nf : 1), x = X0 + 10 + k * slot, bw = slot / 3;
    int hs = (int)(sel_log[k] / top * PH), hb = (int)(best_log[k] / top * PH);
    tsrp_png_rect(&im, x, Y0 + PH - hs, bw, hs, 0x1f77b4);
    tsrp_png_rect(&im, x + bw + 2, Y0 + PH - hb, bw, hb, 0xaec7e8);
    tsrp_png_text(&im, x, Y0 + PH + 8, 1, 0x000000, fam[k]);
    snprintf(buf, sizeof buf, "%.2f", sel_log[k]);
    tsrp_png_text(&im, x, Y0 + PH - hs - 10, 1, 0x000000, buf);
  }
  tsrp_png_rect(&im, X0, H - 30, 10, 10, 0x1f77b4);
  tsrp_png_text(&im, X0 + 16, H - 28, 1, 0x000000, "SELECTED");
  tsrp_png_rect(&im, X0 + 120, H - 30, 10, 10, 0xaec7e8);
  tsrp_png_text(&im, X0 + 136, H - 28, 1, 0x000000, "BEST (EXHAUSTIVE)");
  s = tsrp_png_write(&im, path, err);
  tsrp_png_free(&im);
  return s;
}

/* summary.csv: the figures of all masks, of the sparse ones, and of the
 * GPU-planned requests' selection. */
static void write_summary(FILE *f, const char *gpu, const char *split, const tsrp_eval_stats *st)
{
  fprintf(f, "gpu,split,masks_set,density,masks,within5,geo_regret,geo_speedup_vs_direct,"
             "geo_best_speedup_vs_direct,geo_speedup_vs_auto,slower_than_auto,worst_vs_auto\n");
  fprintf(f, "%s,%s,all,any,%lld,%.4f,%.5f,%.4f,%.4f,%.4f,%lld,%.4f\n", gpu, split,
          (long long)st->masks, st->within5, st->geo_regret, st->geo_speedup, st->geo_best_speedup,
          st->vs_auto.geo_speedup, (long long)st->vs_auto.slower, st->vs_auto.worst);
  fprintf(f, "%s,%s,sparse,<%.2f,%lld,%.4f,%.5f,%.4f,%.4f,%.4f,%lld,%.4f\n", gpu, split,
          TSRP_SPARSE_DENSITY, (long long)st->sparse_masks, st->sparse_within5,
          st->sparse_geo_regret, st->sparse_geo_speedup, st->sparse_geo_best_speedup,
          st->sparse_vs_auto.geo_speedup, (long long)st->sparse_vs_auto.slower,
          st->sparse_vs_auto.worst);
  fprintf(f, "%s,%s,gpu-planned,any,%lld,%.4f,%.5f,%.4f,%.4f,%.4f,%lld,%.4f\n", gpu, split,
          (long long)st->gpu_masks, st->gpu_within5, st->gpu_geo_regret, st->gpu_geo_speedup,
          st->gpu_geo_best_speedup, st->gpu_vs_auto.geo_speedup,
          (long long)st->gpu_vs_auto.slower, st->gpu_vs_auto.worst);
}

static const char *const report_files[] = {"selection.csv", "summary.csv", "regime.png",
                                           "speedup.png"};

/* A folder holding nothing but report files (a previous report) is
 * replaced as a whole; any other non-empty folder is refused. */
static int is_report(const char *dir, void *ud)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int ok = d != NULL;
  size_t k;
  (void)ud;
  while (ok && (e = readdir(d))) {
    int known = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    for (k = 0; k < sizeof report_files / sizeof *report_files; k++)
      known |= !strcmp(e->d_name, report_files[k]);
    ok = known;
  }
  if (d)
    closedir(d);
  return ok;
}

/* selection.csv and summary.csv in the report's folder `work`. */
static tsr_status write_csvs(const char *work, tsr_db *db, const char *gpu, int sms,
                             const char *split, tsrp_eval_stats *st, tsr_error *err)
{
  char sel[1200], sum[1200];
  tsr_out *t;
  FILE *fs, *fm;
  tsr_status s;
  snprintf(sel, sizeof sel, "%s/selection.csv", work);
  snprintf(sum, sizeof sum, "%s/summary.csv", work);
  if ((s = tsri_out_begin(&t, err)) != TSR_OK)
    return s;
  if ((s = tsri_out_file(t, sel, 0, &fs, err)) == TSR_OK &&
      (s = tsri_out_file(t, sum, 0, &fm, err)) == TSR_OK &&
      (s = tsrp_eval_run(db, gpu, sms, split, fs, st, err)) == TSR_OK) {
    write_summary(fm, gpu, split, st);
    return tsri_out_commit(t, err);
  }
  tsri_out_abort(t);
  return s;
}

tsr_status tsrp_report_write(tsr_db *db, const char *gpu, const char *split, const char *dir,
                             FILE *log, tsr_error *err)
{
  char name[128], path[1200];
  int sms = 0;
  tsrp_dataset prof, ev;
  tsrp_eval_stats st;
  const char *work = NULL;
  tsr_out *t = NULL;
  tsr_status s;
  if ((s = pick_gpu(db, gpu, name, sizeof name, &sms, err)) != TSR_OK)
    return s;
  if ((s = tsrp_build_load(db, name, sms, "profile", &prof, err)) != TSR_OK)
    return s;
  if ((s = tsrp_build_load(db, name, sms, split ? split : "eval", &ev, err)) != TSR_OK) {
    tsrp_build_free(&prof);
    return s;
  }
  if (split && ev.measurements == 0) {
    s = tsr_error_set(err, TSR_ERR_INVALID,
                      "cannot report on split '%s' in '%s': no timings of that split for %s",
                      split, tsr_db_path(db), name);
    goto done;
  }
  if (!split)
    split = ev.measurements ? "eval" : "profile"; /* no evaluation sweep: the profiling masks */
  if ((s = tsri_out_begin(&t, err)) != TSR_OK ||
      (s = tsri_out_dir(t, dir, is_report, NULL, &work, err)) != TSR_OK)
    goto done;
  if ((s = write_csvs(work, db, name, sms, split, &st, err)) != TSR_OK)
    goto done;
  snprintf(path, sizeof path, "%s/regime.png", work);
  if ((s = draw_regime(&prof, path, err)) != TSR_OK)
    goto done;
  snprintf(path, sizeof path, "%s/speedup.png", work);
  if ((s = draw_speedup(db, ev.measurements ? &ev : &prof, path, err)) != TSR_OK)
    goto done;
  s = tsri_out_commit(t, err);
  t = NULL;
  if (s == TSR_OK && log)
    fprintf(log,
            "%s (%d SMs), %s split: %lld masks (%lld not timed for the selected plan), "
            "%lld from the table\n"
            "  selected within 5%% of best: %.1f%%\n"
            "  geometric-mean regret: %.2f%%\n"
            "  geometric-mean speed-up over the direct plan: %.3fx (best possible %.3fx)\n"
            "  sparse masks (density < %.2f): %lld of %lld: within 5%% %.1f%%, regret %.2f%%, "
            "speed-up over direct %.3fx (best possible %.3fx)\n"
            "  against the automatic plan: %.3fx, %lld of %lld masks more than 2%% slower "
            "(worst %.3fx)\n"
            "  GPU-planned requests (features of the template's tile, pack as row): %lld masks, "
            "%lld run another plan, %lld alternate templates, %lld hold one back; within 5%% %.1f%%, "
            "regret %.2f%%, "
            "against the automatic plan %.3fx, %lld more than 2%% slower (worst %.3fx)\n",
            name, sms, split, (long long)st.masks, (long long)st.unmeasured,
            (long long)st.from_table, 100 * st.within5, 100 * st.geo_regret, st.geo_speedup,
            st.geo_best_speedup, TSRP_SPARSE_DENSITY, (long long)st.sparse_masks,
            (long long)st.masks, 100 * st.sparse_within5, 100 * st.sparse_geo_regret,
            st.sparse_geo_speedup, st.sparse_geo_best_speedup, st.vs_auto.geo_speedup,
            (long long)st.vs_auto.slower, (long long)st.vs_auto.masks, st.vs_auto.worst,
            (long long)st.gpu_masks, (long long)st.gpu_other, (long long)st.gpu_cycles,
            (long long)st.gpu_held,
            100 * st.gpu_within5, 100 * st.gpu_geo_regret, st.gpu_vs_auto.geo_speedup,
            (long long)st.gpu_vs_auto.slower, st.gpu_vs_auto.worst);
done:
  tsri_out_abort(t);
  tsrp_build_free(&prof);
  tsrp_build_free(&ev);
  return s;
}

/* ---- Export ------------------------------------------------------------ */

/* Prints a value as an SQL literal. */
static void sql_value(FILE *f, sqlite3_stmt *st, int i)
{
  switch (sqlite3_column_type(st, i)) {
  case SQLITE_INTEGER:
    fprintf(f, "%lld", (long long)sqlite3_column_int64(st, i));
    break;
  case SQLITE_FLOAT:
    fprintf(f, "%.17g", sqlite3_column_double(st, i));
    break;
  case SQLITE_NULL:
    fputs("NULL", f);
    break;
  default: {
    const unsigned char *s = sqlite3_column_text(st, i);
    fputc('\'', f);
    for (; s && *s; s++) {
      if (*s == '\'')
        fputc('\'', f);
      fputc(*s, f);
    }
    fputc('\'', f);
  }
  }
}

/* Dumps the rows of `sql` as INSERTs into `table`; returns rows or -1. */
static long dump(FILE *f, sqlite3 *h, const char *table, const char *sql, const char *gpu)
{
  sqlite3_stmt *st;
  long n = 0;
  int rc, i, cols;
  if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK)
    return -1;
  if (gpu)
    sqlite3_bind_text(st, 1, gpu, -1, SQLITE_TRANSIENT);
  cols = sqlite3_column_count(st);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    fprintf(f, "INSERT OR IGNORE INTO %s (", table);
    for (i = 0; i < cols; i++)
      fprintf(f, "%s%s", i ? ", " : "", sqlite3_column_name(st, i));
    fputs(") VALUES (", f);
    for (i = 0; i < cols; i++) {
      if (i)
        fputs(", ", f);
      sql_value(f, st, i);
    }
    fputs(");\n", f);
    n++;
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? n : -1;
}

tsr_status tsrp_report_export(tsr_db *db, const char *gpu, FILE *f, int64_t *rows,
                              tsr_error *err)
{
  long a, b, c;
  fprintf(f, "-- Lookup table exported by tessera-profile from a sweep's database.\n"
             "-- Load over db/schema.sql (tessera-profile init --sql FILE).\n");
  /* GPU rows for the record (name, clocks, driver as found), then the table. */
  a = dump(f, tsri_db_sqlite(db), "gpus",
           "SELECT name, arch, multiprocessors, memory_bytes, l2_bytes, driver, clock_sm_khz, "
           "clock_mem_khz FROM gpus WHERE (?1 IS NULL OR name = ?1) AND name IN (SELECT "
           "gpu_name FROM lookup) ORDER BY id",
           gpu);
  b = dump(f, tsri_db_sqlite(db), "lookup_meta",
           "SELECT gpu_name, multiprocessors, feature_version, built, masks, measurements, note "
           "FROM lookup_meta WHERE (?1 IS NULL OR gpu_name = ?1) ORDER BY gpu_name",
           gpu);
  c = dump(f, tsri_db_sqlite(db), "lookup",
           "SELECT gpu_name, arch, multiprocessors, feature_version, level, dtype, head_dim, bq, "
           "bk, seq_bin, density_bin, spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, "
           "variant, masks, regret, speedup FROM lookup WHERE (?1 IS NULL OR gpu_name = ?1) "
           "ORDER BY gpu_name, level, dtype, head_dim, bq, bk, seq_bin, density_bin, "
           "spread_bin, fill_bin",
           gpu);
  if (a < 0 || b < 0 || c < 0 || ferror(f))
    return tsr_error_set(err, TSR_ERR_DB, "cannot export lookup table from '%s': %s",
                         tsr_db_path(db), tsri_db_errmsg(db));
  if (rows)
    *rows = c;
  return TSR_OK;
}

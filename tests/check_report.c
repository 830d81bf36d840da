/*
 * check_report.c: the evaluation figures (tsrp_eval_run) and the report (text, CSV,
 * plots, a folder replaced whole or refused), and the table exported as SQL
 * text selecting as the original.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "profile.h"
#include "tessera.h"
#include "util.h"
#include "select_fixture.h"
#include "png_read.h"

static uint64_t base_seed;
static char tmpdir[256];

static void setup(void)
{
  tu_tmpdir(tmpdir, sizeof tmpdir);
}

static void teardown(void)
{
  tu_rmtree(tmpdir);
}

START_TEST(test_eval_and_report)
{
  tu_rng rng = {base_seed + 47};
  char path[400], out[300], line[400];
  fixture fx;
  tsrp_build_opts bo = {NULL, NULL};
  tsrp_build_stats bs;
  tsrp_eval_stats es;
  tsr_error err = {0};
  double want, all, want_gpu;
  FILE *f, *text;
  int i, n;
  snprintf(path, sizeof path, "%s/e.db", tmpdir);
  build_fixture(&fx, path, &rng, 5);
  /* Five fully dense eval masks (warm-up steps) on which every plan takes
   * the same time: speed-up 1 by construction, which the sparse figures
   * must leave out and the all-mask figures must count. */
  for (i = 0; i < 5; i++) {
    tsr_features f;
    double ms[N_PLANS];
    int p;
    mask_features(&rng, 4096, 1.0, 1, &f);
    ck_assert_double_ge(f.density, TSRP_SPARSE_DENSITY);
    for (p = 0; p < N_PLANS; p++)
      ms[p] = 10.0;
    snprintf(line, sizeof line, "d_%02d.npy", i);
    record_mask(&fx, &rng, line, "eval", &f, ms);
  }
  ck_assert_int_eq(tsrp_build_run(fx.db, &bo, &bs, &err), TSR_OK);
  ck_assert_int_eq(tsrp_eval_run(fx.db, "NVIDIA Test", 132, "eval", NULL, &es, &err), TSR_OK);
  ck_assert_int_eq(es.masks, 20);
  ck_assert_int_eq(es.sparse_masks, 15);
  ck_assert_int_eq(es.unmeasured, 0);
  /* The model's best plan per kind is what the table holds, so selection is
   * within the 0.1% jitter of the best on every eval mask; on the dense
   * ones every plan ties. */
  ck_assert_double_eq_tol(es.within5, 1.0, 1e-12);
  ck_assert_double_eq_tol(es.sparse_within5, 1.0, 1e-12);
  ck_assert_double_le(es.geo_regret, 0.003);
  ck_assert_double_le(es.sparse_geo_regret, 0.003);
  /* Against the direct plan (retain 64x64): 1 on the 0.08 kind, 1.6 on the
   * 0.6 kind, 1.6 / 0.9 on the uneven kind, 1 on the dense masks; the exact
   * geometric means follow from the model. */
  want = exp((5 * log(1.0) + 5 * log(1.6) + 5 * log(1.6 / 0.9)) / 15);
  all = exp((5 * log(1.0) + 5 * log(1.6) + 5 * log(1.6 / 0.9) + 5 * log(1.0)) / 20);
  ck_assert_double_eq_tol(es.sparse_geo_speedup, want, want * 0.003);
  ck_assert_double_eq_tol(es.sparse_geo_best_speedup, want, want * 0.003);
  ck_assert_double_eq_tol(es.geo_speedup, all, all * 0.003);
  ck_assert_double_eq_tol(es.geo_best_speedup, all, all * 0.003);
  /* The automatic plan is the direct plan's shape on the variant the bundle
   * ranks first, here the fixture's one variant of it: the same figures,
   * and no mask slower than it beyond the jitter. */
  ck_assert_int_eq(es.vs_auto.masks, 20);
  ck_assert_int_eq(es.sparse_vs_auto.masks, 15);
  ck_assert_double_eq_tol(es.vs_auto.geo_speedup, all, all * 0.003);
  ck_assert_double_eq_tol(es.sparse_vs_auto.geo_speedup, want, want * 0.003);
  ck_assert_int_eq(es.vs_auto.slower, 0);
  ck_assert_double_ge(es.vs_auto.worst, 0.995);
  ck_assert_double_le(es.vs_auto.worst, 1.005);
  /* As GPU-planned requests select: from the automatic template (retain
   * 64x64), whose features know the fill at 64x64 only.  The uneven kind's
   * 128x128 fill (0.3) is estimated, and no 128x128 tile gambles on an
   * estimate (select.c fill_ok): it keeps retain 64x64, 1.6 / 0.9 times
   * slower than the host's selection.  The 0.6 kind borrows combine
   * 128x128, then reads its fill there and stays.  The dense masks (every
   * plan 10 ms) bounce: at 64x64 the estimate puts them in a region whose
   * nearest row is combine 128x128; there, with the fill measured, in one
   * whose nearest row is retain 64x64.  The hold keeps them at 64x64 but
   * for its retries, so they alternate no more. */
  ck_assert_int_eq(es.gpu_masks, 20);
  ck_assert_int_eq(es.gpu_other, 10);
  ck_assert_int_eq(es.gpu_cycles, 0);
  ck_assert_int_eq(es.gpu_held, 5);
  ck_assert_double_eq_tol(es.gpu_within5, 0.75, 1e-12);
  want_gpu = exp((5 * log(1.0) + 5 * log(1.6) + 5 * log(1.0) + 5 * log(1.0)) / 20);
  ck_assert_double_eq_tol(es.gpu_geo_speedup, want_gpu, want_gpu * 0.003);
  ck_assert_double_eq_tol(es.gpu_vs_auto.geo_speedup, want_gpu, want_gpu * 0.003);
  ck_assert_double_eq_tol(es.gpu_geo_regret + 1, exp(5 * log(1.6 / 0.9) / 20),
                          0.003 * (es.gpu_geo_regret + 1));
  ck_assert_int_eq(es.gpu_vs_auto.slower, 0);
  tsr_db_close(fx.db);
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &fx.db, &err), TSR_OK);
  snprintf(out, sizeof out, "%s/report", tmpdir);
  text = tmpfile();
  ck_assert_ptr_nonnull(text);
  ck_assert_msg(tsrp_report_write(fx.db, NULL, NULL, out, text, &err) == TSR_OK, "%s", err.text);
  tsr_db_close(fx.db);
  /* The text names the threshold and gives both sets. */
  rewind(text);
  n = 0;
  while (fgets(line, sizeof line, text)) {
    double a, b, c, d;
    long long slow, masks, other, cycles, held;
    if (sscanf(line, "  geometric-mean speed-up over the direct plan: %lfx (best possible %lfx)",
               &a, &b) == 2) {
      ck_assert_double_eq_tol(a, es.geo_speedup, 0.0005);
      ck_assert_double_eq_tol(b, es.geo_best_speedup, 0.0005);
      n++;
    }
    if (sscanf(line,
               "  sparse masks (density < 0.95): 15 of 20: within 5%% %lf%%, regret %lf%%, "
               "speed-up over direct %lfx (best possible %lfx)",
               &a, &b, &c, &d) == 4) {
      ck_assert_double_eq_tol(a, 100.0, 0.05);
      ck_assert_double_eq_tol(b, 100 * es.sparse_geo_regret, 0.005);
      ck_assert_double_eq_tol(c, want, want * 0.003);
      ck_assert_double_eq_tol(d, want, want * 0.003);
      n++;
    }
    if (sscanf(line, "  GPU-planned requests (features of the template's tile, pack as row): "
               "%lld masks, %lld run another plan, %lld alternate templates, %lld hold one back; "
               "within 5%% %lf%%, regret %lf%%, against the automatic plan %lfx, %lld more than 2%% "
               "slower (worst %lfx)", &masks, &other, &cycles, &held, &a, &b, &c, &slow, &d) == 9) {
      ck_assert_int_eq(masks, 20);
      ck_assert_int_eq(other, 10);
      ck_assert_int_eq(cycles, 0);
      ck_assert_int_eq(held, 5);
      ck_assert_double_eq_tol(a, 75.0, 0.05);
      ck_assert_double_eq_tol(b, 100 * es.gpu_geo_regret, 0.005);
      ck_assert_double_eq_tol(c, want_gpu, 0.0005 + want_gpu * 0.003);
      ck_assert_int_eq(slow, 0);
      ck_assert_double_eq_tol(d, es.gpu_vs_auto.worst, 0.0005);
      n++;
    }
    if (sscanf(line, "  against the automatic plan: %lfx, %lld of %lld masks more than 2%% slower "
               "(worst %lfx)", &a, &slow, &masks, &d) == 4) {
      ck_assert_double_eq_tol(a, all, all * 0.003);
      ck_assert_int_eq(slow, 0);
      ck_assert_int_eq(masks, 20);
      ck_assert_double_eq_tol(d, es.vs_auto.worst, 0.0005);
      n++;
    }
  }
  fclose(text);
  ck_assert_int_eq(n, 4);
  /* summary.csv: a header and the three sets. */
  snprintf(path, sizeof path, "%s/summary.csv", out);
  f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  ck_assert_str_eq(line, "gpu,split,masks_set,density,masks,within5,geo_regret,"
                         "geo_speedup_vs_direct,geo_best_speedup_vs_direct,geo_speedup_vs_auto,"
                         "slower_than_auto,worst_vs_auto\n");
  {
    /* all, sparse, gpu-planned */
    static const char *const sets[] = {"all", "sparse", "gpu-planned"};
    static const char *const denss[] = {"any", "<0.95", "any"};
    const long long nmasks[] = {20, 15, 20};
    const double w5s[] = {1.0, 1.0, 0.75};
    const double rgs[] = {es.geo_regret, es.sparse_geo_regret, es.gpu_geo_regret};
    const double sps[] = {all, want, want_gpu}, bsps[] = {all, want, all};
    const double worsts[] = {es.vs_auto.worst, es.sparse_vs_auto.worst, es.gpu_vs_auto.worst};
    for (i = 0; i < 3; i++) {
      char set[16], dens[16];
      long long masks, slower;
      double w5, rg, sp, bsp, sa, worst;
      ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
      ck_assert_int_eq(sscanf(line, "NVIDIA Test,eval,%15[^,],%15[^,],%lld,%lf,%lf,%lf,%lf,%lf,%lld,%lf",
                              set, dens, &masks, &w5, &rg, &sp, &bsp, &sa, &slower, &worst),
                       10);
      ck_assert_str_eq(set, sets[i]);
      ck_assert_str_eq(dens, denss[i]);
      ck_assert_int_eq(masks, nmasks[i]);
      ck_assert_double_eq_tol(w5, w5s[i], 1e-9);
      ck_assert_double_eq_tol(rg, rgs[i], 0.00001);
      ck_assert_double_eq_tol(sp, sps[i], 0.003 * sp);
      ck_assert_double_eq_tol(bsp, bsps[i], 0.003 * bsp);
      /* the automatic plan is the direct plan here */
      ck_assert_double_eq_tol(sa, sps[i], 0.003 * sa);
      ck_assert_int_eq(slower, 0);
      ck_assert_double_eq_tol(worst, worsts[i], 0.0001);
    }
  }
  ck_assert_ptr_null(fgets(line, sizeof line, f));
  fclose(f);
  /* Both plots decode (CRCs, inflate, size) and are small. */
  {
    static const char *const plots[] = {"regime.png", "speedup.png"};
    int k, w, h;
    long size;
    for (k = 0; k < 2; k++) {
      unsigned char *px;
      snprintf(path, sizeof path, "%s/%s", out, plots[k]);
      px = png_read(path, &w, &h, &size);
      ck_assert_int_ge(w, 900);
      ck_assert_int_ge(h, 500);
      ck_assert_int_lt(size, 100 * 1000);
      free(px);
    }
  }
  /* selection.csv: per mask, the GPU-planned requests' time, whether their
   * templates alternate and whether the hold refused one: the uneven kind
   * (e2_*) slower than the host's selection (1.6 / 0.9 of it), the dense
   * masks (d_*) held, none alternating. */
  snprintf(path, sizeof path, "%s/selection.csv", out);
  f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  ck_assert_msg(strstr(line, ",speedup_vs_auto,t_gpu_planned_ms,gpu_alternates,gpu_held\n"), "%s", line);
  n = 0;
  while (fgets(line, sizeof line, f)) {
    char name[64], *c = strrchr(line, ',');
    double t_sel = 0, t_gpu = 0;
    int alt = -1, held = -1, k;
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(sscanf(c + 1, "%d", &held), 1);
    *c = '\0';
    c = strrchr(line, ',');
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(sscanf(c + 1, "%d", &alt), 1);
    *c = '\0';
    c = strrchr(line, ',');
    ck_assert_ptr_nonnull(c);
    t_gpu = atof(c + 1);
    ck_assert_int_eq(sscanf(line, "%63[^,]", name), 1);
    for (c = line, k = 0; k < 9 && c; k++) /* t_selected_ms is the tenth column */
      c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL;
    ck_assert_ptr_nonnull(c);
    t_sel = atof(c);
    ck_assert_double_gt(t_gpu, 0);
    ck_assert_int_eq(alt, 0);
    ck_assert_int_eq(held, !strncmp(name, "d_", 2));
    if (!strncmp(name, "e2_", 3))
      ck_assert_double_eq_tol(t_gpu / t_sel, 1.6 / 0.9, 0.02);
    else if (strncmp(name, "d_", 2))
      ck_assert_double_eq_tol(t_gpu, t_sel, 1e-9);
    n++;
  }
  fclose(f);
  ck_assert_int_eq(n, 20);
  snprintf(path, sizeof path, "%s/e.db", tmpdir);
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_READONLY, &fx.db, &err), TSR_OK);
  /* A second report replaces the first as a whole; a folder holding
   * anything but a report is refused and kept as it is. */
  {
    struct stat s1, s2;
    char notes[700], sel[700];
    snprintf(sel, sizeof sel, "%s/selection.csv", out);
    ck_assert_int_eq(stat(sel, &s1), 0);
    tsr_error_clear(&err);
    ck_assert_msg(tsrp_report_write(fx.db, NULL, NULL, out, NULL, &err) == TSR_OK, "%s", err.text);
    ck_assert_int_eq(stat(sel, &s2), 0);
    ck_assert_int_ne(s1.st_ino, s2.st_ino);
    snprintf(notes, sizeof notes, "%s/notes.txt", out);
    f = fopen(notes, "w");
    ck_assert_ptr_nonnull(f);
    fputs("mine\n", f);
    fclose(f);
    tsr_error_clear(&err);
    ck_assert_int_eq(tsrp_report_write(fx.db, NULL, NULL, out, NULL, &err), TSR_ERR_IO);
    ck_assert_msg(strstr(err.text, out) && strstr(err.text, "not empty"), "%s", err.text);
    ck_assert_int_eq(access(notes, R_OK), 0);
    ck_assert_int_eq(stat(sel, &s1), 0);
    ck_assert_int_eq(s1.st_ino, s2.st_ino);
  }
  /* A report folder that cannot be made is an error naming it. */
  snprintf(out, sizeof out, "%s/no/such/report", tmpdir);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsrp_report_write(fx.db, NULL, NULL, out, NULL, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "cannot write folder '") && strstr(err.text, "/no/such/report'"),
                "%s", err.text);
  tsr_db_close(fx.db);
}
END_TEST

/* The shipped format: a table exported as SQL text and loaded into a fresh
 * database selects exactly as the original. */
START_TEST(test_export_roundtrip)
{
  tu_rng rng = {base_seed + 83};
  char path[300];
  fixture fx;
  tsrp_build_opts bo = {NULL, NULL};
  tsrp_build_stats bs;
  tsr_selector *a = NULL, *b = NULL;
  tsr_db *db2 = NULL;
  tsr_error err = {0};
  char *text = NULL;
  size_t len = 0;
  int64_t rows = -1;
  FILE *f;
  int i;
  snprintf(path, sizeof path, "%s/x.db", tmpdir);
  build_fixture(&fx, path, &rng, 3);
  ck_assert_int_eq(tsrp_build_run(fx.db, &bo, &bs, &err), TSR_OK);
  f = open_memstream(&text, &len);
  ck_assert_int_eq(tsrp_report_export(fx.db, "NVIDIA Test", f, &rows, &err), TSR_OK);
  fclose(f);
  ck_assert_int_eq(rows, bs.rows);
  ck_assert_ptr_nonnull(strstr(text, "INSERT OR IGNORE INTO lookup ("));
  ck_assert_ptr_null(strstr(text, "INSERT OR IGNORE INTO samples"));
  snprintf(path, sizeof path, "%s/y.db", tmpdir);
  ck_assert_int_eq(tsr_db_open(path, TSR_DB_CREATE, &db2, &err), TSR_OK);
  ck_assert_msg(tsri_db_exec(db2, text, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(tsri_db_exec(db2, text, &err), TSR_OK); /* loading twice adds nothing */
  ck_assert_int_eq(count_db(db2, "SELECT count(*) FROM lookup"), bs.rows);
  ck_assert_int_eq(count_db(db2, "SELECT count(*) FROM gpus"), 1);
  ck_assert_int_eq(tsr_select_load(fx.db, NULL, 0, &a, &err), TSR_OK);
  ck_assert_int_eq(tsr_select_load(db2, NULL, 0, &b, &err), TSR_OK);
  for (i = 0; i < 30; i++) {
    tsr_features fe;
    tsr_selection sa, sb;
    kind_features(&rng, i % 3, &fe);
    if (i % 5 == 4)
      fe.head_dim = 64;
    ck_assert_int_eq(tsr_select_plan(a, &fe, &sa, &err), TSR_OK);
    ck_assert_int_eq(tsr_select_plan(b, &fe, &sb, &err), TSR_OK);
    ck_assert_int_eq(sa.opts.mapping, sb.opts.mapping);
    ck_assert_int_eq(sa.opts.tile_m, sb.opts.tile_m);
    ck_assert_int_eq(sa.opts.tile_n, sb.opts.tile_n);
    ck_assert_int_eq(sa.opts.tasks, sb.opts.tasks);
    ck_assert_str_eq(sa.variant, sb.variant);
    ck_assert_int_eq(sa.level, sb.level);
    ck_assert_int_eq(sa.from_table, i % 5 != 4);
  }
  tsr_select_destroy(a);
  tsr_select_destroy(b);
  tsr_db_close(db2);
  tsr_db_close(fx.db);
  free(text);
}
END_TEST


static Suite *report_suite(void)
{
  Suite *s = suite_create("report");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_eval_and_report);
  tcase_add_test(tc, test_export_roundtrip);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  base_seed = tu_seed("check_report", 20261129u);
  return tu_run_suite(report_suite());
}

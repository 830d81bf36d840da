/*
 * cmd_corpus.c: `tessera corpus` -- generate mask corpora from the presets
 * (tsr_corpus_generate), list the presets, and describe a corpus folder
 * (per-family counts and feature distributions, optionally as CSV).
 *
 * `stats` loads every mask file once (about a second per 100 MB of masks) and
 * keeps only per-head features in memory.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tools.h"
#include "files.h"

static const cli_sub corpus_subs[] = {
    {"generate", "--preset NAME --out DIR [--seed N] [--limit N] [--jobs N]",
     "synthesise masks of a preset into DIR (masks/, geom/, manifest.json)"},
    {"stats", "DIR [--csv FILE]", "per-family counts, density, row-length spread and contiguity"},
    {"list", "", "the presets"},
    {NULL, NULL, NULL},
};
enum { SUB_GENERATE = 1u << 0, SUB_STATS = 1u << 1 };
static const cli_sub_opt corpus_opts[] = {
    {"--preset", "NAME", "'paper', 'demo' or a model name (see 'tessera corpus list')", SUB_GENERATE},
    {"--out", "DIR", "output folder, created when missing", SUB_GENERATE},
    {"--seed", "N", "corpus seed (default 1); same seed, same bytes", SUB_GENERATE},
    {"--limit", "N", "write only the first N masks of the preset", SUB_GENERATE},
    {"--jobs", "N", "worker threads, 1 to 64 (default 2)", SUB_GENERATE},
    {"--csv", "FILE", "also write one row per (mask, head) to FILE", SUB_STATS},
    {NULL, NULL, NULL, 0},
};

/* sub: "generate", "stats", "list", or NULL for all of them. */
static void usage(FILE *f, const char *sub)
{
  cli_sub_help(f, "corpus", corpus_subs, corpus_opts, sub);
}

typedef struct {
  int tty;
  int last_pct;
  time_t t0;
} progress_state;

/* On a terminal: one line rewritten in place; otherwise a line every 10%. */
static void progress(void *ud, int64_t done, int64_t total)
{
  progress_state *p = ud;
  int pct = total ? (int)(100 * done / total) : 100;
  if (p->tty) {
    fprintf(stderr, "\rtessera corpus: %" PRId64 "/%" PRId64 " masks (%d%%)", done, total, pct);
    if (done == total)
      fputc('\n', stderr);
  } else if (pct / 10 != p->last_pct / 10 || done == total) {
    fprintf(stderr, "tessera corpus: %" PRId64 "/%" PRId64 " masks (%d%%), %lds\n", done, total,
            pct, (long)(time(NULL) - p->t0));
  }
  p->last_pct = pct;
}

static int cmd_generate(int argc, char **argv)
{
  tsr_corpus_gen_opts o;
  progress_state ps;
  tsr_error err;
  int64_t v, n = 0;
  int i;
  tsr_corpus_gen_opts_init(&o);
  o.jobs = 2;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout, "generate");
      return CLI_OK;
    }
    if (!val) {
      cli_errorf("corpus", "option '%s' needs a value", a);
      return CLI_USAGE;
    }
    if (!strcmp(a, "--preset"))
      o.preset = val;
    else if (!strcmp(a, "--out"))
      o.out_dir = val;
    else if (!strcmp(a, "--seed")) {
      if (cli_parse_i64(val, &v, 1)) {
        cli_errorf("corpus", "invalid --seed '%s': expected a non-negative integer", val);
        return CLI_USAGE;
      }
      o.seed = (uint64_t)v;
    } else if (!strcmp(a, "--limit")) {
      if (cli_parse_i64(val, &v, 0)) {
        cli_errorf("corpus", "invalid --limit '%s': expected a positive integer", val);
        return CLI_USAGE;
      }
      o.limit = v;
    } else if (!strcmp(a, "--jobs")) {
      if (cli_parse_i64(val, &v, 0) || v > 64) {
        cli_errorf("corpus", "invalid --jobs '%s': expected 1 to 64", val);
        return CLI_USAGE;
      }
      o.jobs = (int)v;
    } else {
      cli_errorf("corpus", "unknown option '%s'", a);
      return CLI_USAGE;
    }
    i++;
  }
  if (!o.preset || !o.out_dir) {
    cli_errorf("corpus", "generate needs --preset NAME and --out DIR");
    return CLI_USAGE;
  }
  ps.tty = isatty(2);
  ps.last_pct = -10;
  ps.t0 = time(NULL);
  o.progress = progress;
  o.progress_ud = &ps;
  tsr_error_clear(&err);
  if (tsr_corpus_generate(&o, &n, &err)) {
    if (ps.tty)
      fputc('\n', stderr);
    cli_errorf("corpus", "%s", err.text);
    return CLI_USAGE;
  }
  if (n == 0)
    printf("kept %s: it holds preset '%s' (seed %" PRIu64 ") already\n", o.out_dir, o.preset,
           o.seed);
  else
    printf("wrote %" PRId64 " masks of preset '%s' (seed %" PRIu64 ") to %s\n", n, o.preset,
           o.seed, o.out_dir);
  return CLI_OK;
}

typedef struct {
  double density, row_cv, contiguity;
} head_feat;

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int csv_field_ok(const char *s)
{
  return !strpbrk(s, ",\"\n");
}

/* What stats gathers over the corpus: each head plane's features and
 * family, the families in order of appearance, the eval masks. */
typedef struct {
  head_feat *hf;
  int64_t *fam_of, nh, cap, n_eval;
  const char *fams[16];
  int nfam;
} stats_acc;

/* stats' arguments: -1 to go on, else the exit status. */
static int stats_args(int argc, char **argv, const char **dir, const char **csv)
{
  int i;
  for (i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout, "stats");
      return CLI_OK;
    }
    if (!strcmp(argv[i], "--csv")) {
      if (i + 1 >= argc) {
        cli_errorf("corpus", "option '--csv' needs a value");
        return CLI_USAGE;
      }
      *csv = argv[++i];
    } else if (argv[i][0] == '-') {
      cli_errorf("corpus", "unknown option '%s'", argv[i]);
      return CLI_USAGE;
    } else if (!*dir) {
      *dir = argv[i];
    } else {
      cli_errorf("corpus", "stats takes one folder, got '%s' too", argv[i]);
      return CLI_USAGE;
    }
  }
  if (!*dir) {
    cli_errorf("corpus", "stats needs a corpus folder");
    return CLI_USAGE;
  }
  return -1;
}

/* Every head plane's features into acc, and a CSV row each to cf (may be
 * NULL). */
static int stats_collect(tsr_corpus *c, const char *dir, FILE *cf, stats_acc *acc)
{
  tsr_error err;
  int64_t i, h;
  int f;
  tsr_error_clear(&err);
  for (i = 0; i < tsr_corpus_count(c); i++) {
    const tsr_corpus_entry *e = tsr_corpus_get(c, i);
    tsr_mask *m = NULL;
    acc->n_eval += !strcmp(e->split, "eval");
    for (f = 0; f < acc->nfam; f++)
      if (!strcmp(acc->fams[f], e->family))
        break;
    if (f == acc->nfam) {
      if (acc->nfam == 16) {
        cli_errorf("corpus", "too many families in '%s'", dir);
        return CLI_USAGE;
      }
      acc->fams[acc->nfam++] = e->family;
    }
    if (tsr_corpus_load_mask(c, i, &m, &err)) {
      cli_errorf("corpus", "%s", err.text);
      return CLI_USAGE;
    }
    if (acc->nh + e->heads_q > acc->cap) {
      void *p1, *p2;
      acc->cap = 2 * (acc->nh + e->heads_q) + 64;
      p1 = realloc(acc->hf, (size_t)acc->cap * sizeof *acc->hf);
      if (p1)
        acc->hf = p1;
      p2 = realloc(acc->fam_of, (size_t)acc->cap * sizeof *acc->fam_of);
      if (p2)
        acc->fam_of = p2;
      if (!p1 || !p2) {
        cli_errorf("corpus", "out of memory");
        tsr_mask_destroy(m);
        return CLI_USAGE;
      }
    }
    for (h = 0; h < e->heads_q; h++) {
      tsr_corpus_features ft;
      const char *kind = tsr_corpus_head_kind(c, i, h);
      head_feat *hf = &acc->hf[acc->nh];
      tsr_corpus_plane_features(tsr_mask_plane(m, 0, h), e->nq, e->nk, &ft);
      hf->density = ft.density;
      hf->row_cv = ft.row_cv;
      hf->contiguity = ft.contiguity;
      acc->fam_of[acc->nh++] = f;
      if (cf && csv_field_ok(e->model) && kind && csv_field_ok(kind))
        fprintf(cf, "%" PRId64 ",%s,%s,%s,%" PRId64 ",%" PRId64 ",%" PRId64 ",%s,%" PRId64
                    ",%" PRId64 ",%.6f,%.6f,%.6f,%" PRId64 "\n",
                i, e->model, e->family, e->split, e->step, e->layer, e->head_first + h, kind,
                e->nq, e->nk, ft.density, ft.row_cv, ft.contiguity, ft.empty_rows);
    }
    tsr_mask_destroy(m);
  }
  return CLI_OK;
}

/* The summary: the corpus line, then a line per family. */
static int stats_print(const tsr_corpus *c, const char *dir, const stats_acc *acc)
{
  int64_t i, k;
  int f;
  printf("corpus %s: preset '%s', seed %" PRIu64 ", %" PRId64 " masks (%" PRId64
         " profile, %" PRId64 " eval), %" PRId64 " head planes\n",
         dir, tsr_corpus_preset(c), tsr_corpus_seed(c), tsr_corpus_count(c),
         tsr_corpus_count(c) - acc->n_eval, acc->n_eval, acc->nh);
  printf("%-8s %6s %6s  %-29s  %-17s  %-17s\n", "family", "masks", "heads",
         "density min/p10/p50/p90/max", "row-cv mean/p90", "contiguity mean");
  for (f = 0; f < acc->nfam; f++) {
    int64_t nm = 0, cnt = 0;
    double *d, *cv, sc = 0, scv = 0;
    for (i = 0; i < tsr_corpus_count(c); i++)
      nm += !strcmp(tsr_corpus_get(c, i)->family, acc->fams[f]);
    for (k = 0; k < acc->nh; k++)
      cnt += acc->fam_of[k] == f;
    d = malloc((size_t)(cnt + 1) * sizeof *d);
    cv = malloc((size_t)(cnt + 1) * sizeof *cv);
    if (!d || !cv) {
      free(d);
      free(cv);
      cli_errorf("corpus", "out of memory");
      return CLI_USAGE;
    }
    cnt = 0;
    for (k = 0; k < acc->nh; k++)
      if (acc->fam_of[k] == f) {
        d[cnt] = acc->hf[k].density;
        cv[cnt++] = acc->hf[k].row_cv;
        sc += acc->hf[k].contiguity;
        scv += acc->hf[k].row_cv;
      }
    qsort(d, (size_t)cnt, sizeof *d, cmp_double);
    qsort(cv, (size_t)cnt, sizeof *cv, cmp_double);
    printf("%-8s %6" PRId64 " %6" PRId64 "  %.3f/%.3f/%.3f/%.3f/%.3f  %.3f/%.3f        %.3f\n",
           acc->fams[f], nm, cnt, d[0], d[cnt / 10], d[cnt / 2], d[cnt * 9 / 10], d[cnt - 1],
           scv / (double)cnt, cv[cnt * 9 / 10], sc / (double)cnt);
    free(d);
    free(cv);
  }
  return CLI_OK;
}

static int cmd_stats(int argc, char **argv)
{
  const char *dir = NULL, *csv = NULL;
  tsr_corpus *c = NULL;
  tsr_error err;
  tsr_out *csv_out = NULL;
  FILE *cf = NULL;
  stats_acc acc;
  int rc;

  if ((rc = stats_args(argc, argv, &dir, &csv)) >= 0)
    return rc;
  tsr_error_clear(&err);
  if (tsr_corpus_open(dir, &c, &err)) {
    cli_errorf("corpus", "%s", err.text);
    return CLI_USAGE;
  }
  if (csv) {
    if (tsri_out_begin(&csv_out, &err) || tsri_out_file(csv_out, csv, 0, &cf, &err)) {
      cli_errorf("corpus", "%s", err.text);
      tsri_out_abort(csv_out);
      tsr_corpus_close(c);
      return CLI_USAGE;
    }
    fprintf(cf, "entry,model,family,split,step,layer,head,kind,nq,nk,density,row_cv,"
                "contiguity,empty_rows\n");
  }
  memset(&acc, 0, sizeof acc);
  rc = stats_collect(c, dir, cf, &acc);
  if (rc == CLI_OK)
    rc = stats_print(c, dir, &acc);
  if (csv_out && rc == CLI_OK && tsri_out_commit(csv_out, &err) != TSR_OK) {
    cli_errorf("corpus", "%s", err.text);
    rc = CLI_USAGE;
  } else if (rc != CLI_OK) {
    tsri_out_abort(csv_out); /* no CSV of half a corpus */
  }
  free(acc.hf);
  free(acc.fam_of);
  tsr_corpus_close(c);
  return rc;
}

static int cmd_list(int argc, char **argv)
{
  int i;
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    usage(stdout, "list");
    return CLI_OK;
  }
  if (argc > 1) {
    cli_errorf("corpus", "list takes no arguments, got '%s'", argv[1]);
    return CLI_USAGE;
  }
  printf("presets:\n");
  for (i = 0; i < tsr_corpus_preset_count(); i++)
    printf("  %-20s %s\n", tsr_corpus_preset_name(i), tsr_corpus_preset_help(i));
  return CLI_OK;
}

int cmd_corpus(int argc, char **argv)
{
  if (argc < 2) {
    usage(stderr, NULL);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout, NULL);
    return CLI_OK;
  }
  if (!strcmp(argv[1], "generate"))
    return cmd_generate(argc - 1, argv + 1);
  if (!strcmp(argv[1], "stats"))
    return cmd_stats(argc - 1, argv + 1);
  if (!strcmp(argv[1], "list"))
    return cmd_list(argc - 1, argv + 1);
  cli_errorf("corpus", "unknown subcommand '%s' (generate, stats, list)", argv[1]);
  return CLI_USAGE;
}

/*
 * tessera-gen: renders the kernel templates for every variant of the
 * catalog, compiles each with NVRTC for each target it fits, and writes
 * the bundle that libtessera loads (see runtime/bundle.h).
 *
 *   tessera-gen --catalog gen/catalog.json --templates templates \
 *               --layout runtime/plan_layout.h --out bundle [-j 2]
 *
 * Cost: one NVRTC compile (seconds) per (variant, target) whose hash
 * changed; everything else is reused.  The hash covers the generated source
 * and the headers it reads (their code: comments and white space do not count),
 * the generator version, the NVRTC version, the
 * target and the options.  With $TESSERA_GEN_CACHE set, cubins are also
 * looked up in and stored into that folder by hash, so several build trees
 * share one set of compiles.  Each compile runs in a child process: NVRTC
 * has been seen to crash on some inputs, and a crash then names the variant
 * instead of killing the build.
 *
 * Besides the variants, one planner module a target: templates/plan_gpu.cuh
 * (the GPU planning kernels, runtime/gpuplan.c) compiled alone into
 * <out>/<arch>/tsr_plan.cubin and listed under "planner" in the registry,
 * so a planner change recompiles one cubin a target, not every variant.
 */
#include "bundle.h"
#include "catalog.h"
#include "files.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <nvrtc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADERS 32
#define MAX_DEFINES 16

/* A --define: a knob of the templates set for every catalog variant. */
typedef struct {
  char name[64];
  char value[128];
} define_t;

typedef struct {
  char *name;   /* include name, e.g. "attn_sm80.cuh" */
  char *text;
} header_t;

typedef struct {
  size_t var;           /* catalog index; cat.n: the planner module */
  int arch;             /* index into tsri_variant_archs */
  char hash[17];
  char opts[256];
  pid_t pid;
  enum { J_PENDING, J_RUNNING, J_BUILT, J_REUSED, J_FAILED } state;
} job_t;

typedef struct {
  const char *out;
  header_t hdr[MAX_HEADERS];
  int nhdr;
  char nvrtc[16];
  char **src;           /* generated source per catalog entry */
  tsr_catalog cat;
  int verbose;
  define_t defs[MAX_DEFINES];
  int ndefs;
  char *def_text; /* the defines as the generated sources' "#define" lines */
} gen_t;

static const char usage_line[] =
    "usage: tessera-gen --catalog FILE --templates DIR --layout FILE --out DIR\n"
    "       [-j|--jobs JOBS] [--targets LIST] [-D|--define NAME[=VALUE]]... [--list]\n"
    "       [-v|--verbose]\n";

/* --help: the usage and every option (man tessera-gen(1) says more). */
static void help(FILE *f)
{
  fputs(usage_line, f);
  fputs("\noptions:\n"
        "  --catalog FILE       kernel catalog (gen/catalog.json)\n"
        "  --templates DIR      folder of the kernel templates (*.cuh)\n"
        "  --layout FILE        runtime/plan_layout.h, the plan records and kernel parameters\n"
        "  --out DIR            bundle folder to write\n"
        "  -j, --jobs JOBS      compiles at a time, 1 to 64 (default 2)\n"
        "  --targets LIST       comma-separated subset of sm_80,sm_89,sm_90a,sm_100a,sm_120\n"
        "  -D, --define NAME[=VALUE]  set a knob of the templates (one they test with\n"
        "                       #ifndef NAME) in every variant; VALUE defaults to 1;\n"
        "                       repeatable, up to 16; for A/B bundles of one catalog\n"
        "  --list               print each catalog variant with the targets it fits, and exit\n"
        "  -v, --verbose        print each compile and its NVRTC log\n"
        "  --help               print this help and exit\n"
        "\nSee man tessera-gen(1).\n",
        f);
}

static void die_usage(const char *msg)
{
  fprintf(stderr, "tessera-gen: %s\n", msg);
  fputs(usage_line, stderr);
  exit(2);
}

/* The whole of a regular file (a FIFO or a folder is refused, not read),
 * or NULL with the reason in err (may be NULL), "<what> 'path': why". */
static char *read_text(const char *path, const char *what, tsr_error *err)
{
  FILE *f = tsri_in_open(path, what, err);
  char *buf;
  long n;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
      !(buf = malloc((size_t)n + 1))) {
    tsr_error_set(err, TSR_ERR_IO, "%s '%s': %s", what ? what : "cannot read", path, strerror(errno));
    fclose(f);
    return NULL;
  }
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    tsr_error_set(err, TSR_ERR_IO, "%s '%s': short read", what ? what : "cannot read", path);
    fclose(f);
    free(buf);
    return NULL;
  }
  fclose(f);
  buf[n] = 0;
  return buf;
}

/* Writes `len` bytes to path as one output transaction (files.h: a
 * temporary beside the target, renamed onto it; links written through);
 * says why on stderr when it cannot. */
static int write_atomic(const char *path, const void *data, size_t len)
{
  tsr_error err = {0};
  if (tsri_out_write(path, data, len, &err) == TSR_OK) return 0;
  fprintf(stderr, "tessera-gen: %s\n", err.text);
  return -1;
}

/* Writes only when the content differs, so make sees no change otherwise. */
static int write_if_changed(const char *path, const char *text)
{
  char *old = read_text(path, NULL, NULL);
  int same = old && strcmp(old, text) == 0;
  free(old);
  return same ? 0 : write_atomic(path, text, strlen(text));
}

static int copy_file(const char *from, const char *to)
{
  FILE *f = fopen(from, "rb");
  char *buf;
  long n;
  int rc;
  if (!f) return -1;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) != 0 ||
      !(buf = malloc((size_t)n))) {
    fclose(f);
    return -1;
  }
  rc = fread(buf, 1, (size_t)n, f) == (size_t)n ? write_atomic(to, buf, (size_t)n) : -1;
  fclose(f);
  free(buf);
  return rc;
}

static int mkdirs(const char *path)
{
  char buf[4096];
  size_t i, n = strlen(path);
  if (n >= sizeof buf) return -1;
  memcpy(buf, path, n + 1);
  for (i = 1; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
      buf[i] = c;
    }
  }
  return 0;
}

/* FNV-1a, 64 bits: a content key for the cache, not a security measure. */
static uint64_t fnv(uint64_t h, const char *s)
{
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  /* A separator byte, so that ("ab", "c") and ("a", "bc") differ. */
  h ^= 0xff;
  h *= 1099511628211ULL;
  return h;
}

/* Hashes C/CUDA text without its comments and with every run of white
 * space (comments included) counted as one space, so that editing a
 * comment in a template or in plan_layout.h does not recompile the
 * catalog.  String and character literals are hashed as written. */
static uint64_t fnv_code(uint64_t h, const char *s)
{
  char quote = 0;
  int space = 0, any = 0;
  for (; *s; s++) {
    if (!quote) {
      if (s[0] == '/' && s[1] == '*') {
        const char *e = strstr(s + 2, "*/");
        if (!e) break;
        s = e + 1;
        space = 1;
        continue;
      }
      if (s[0] == '/' && s[1] == '/') {
        while (s[1] && s[1] != '\n') s++;
        space = 1;
        continue;
      }
      if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v') {
        space = 1;
        continue;
      }
      if (space && any) h = (h ^ (unsigned char)' ') * 1099511628211ULL;
      space = 0;
      any = 1;
      if (*s == '"' || *s == '\'') quote = *s;
    } else if (*s == '\\' && s[1]) {
      h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
    } else if (*s == quote) {
      quote = 0;
    }
    h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  }
  h ^= 0xff;
  h *= 1099511628211ULL;
  return h;
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_headers(gen_t *g, const char *tdir, const char *layout)
{
  DIR *d = opendir(tdir);
  struct dirent *de;
  char *names[MAX_HEADERS];
  tsr_error err = {0};
  int n = 0, i, k, untaken = 0;
  if (!d) {
    fprintf(stderr, "tessera-gen: cannot open templates folder '%s': %s\n", tdir, strerror(errno));
    return -1;
  }
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (l > 4 && strcmp(de->d_name + l - 4, ".cuh") == 0 && n < MAX_HEADERS - 1)
      names[n++] = strdup(de->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  g->hdr[0].name = strdup("plan_layout.h");
  g->hdr[0].text = read_text(layout, "cannot read plan layout", &err);
  if (!g->hdr[0].text)
    goto fail;
  g->nhdr = 1;
  for (i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tdir, names[i]);
    g->hdr[g->nhdr].name = names[i];
    untaken = i + 1;
    g->hdr[g->nhdr].text = read_text(path, "cannot read template", &err);
    if (!g->hdr[g->nhdr].text)
      goto fail;
    g->nhdr++;
  }
  return 0;
fail:
  fprintf(stderr, "tessera-gen: %s\n", err.text);
  for (k = 0; k <= g->nhdr; k++) {
    free(g->hdr[k].name);
    free(g->hdr[k].text);
  }
  for (k = untaken; k < n; k++)
    free(names[k]);
  g->nhdr = 0;
  return -1;
}

static int find_header(const gen_t *g, const char *name)
{
  int i;
  for (i = 0; i < g->nhdr; i++)
    if (strcmp(g->hdr[i].name, name) == 0) return i;
  return -1;
}

/* The generated source: constants, then the hand-written bodies.  One name
 * a constant, and only those the family's template reads (the warp count
 * of the sm80 family; the warpgroups and TMA box of the sm90 family); the
 * templates refuse to compile without any of them. */
static char *render(const gen_t *g, const tsr_catalog_entry *e, const char *tmpl)
{
  const tsr_variant *v = &e->v;
  size_t n = 4096 + (g->def_text ? strlen(g->def_text) : 0);
  char *s = malloc(n), family[192];
  if (!s) return NULL;
  if (v->family == TSR_FAMILY_SM90)
    snprintf(family, sizeof family,
             "#define TSR_WARPGROUPS %d\n#define TSR_TMA_BOX %d\n#define TSR_FP8 %d\n#define TSR_LAYOUT_DYN %d\n"
             "#define TSR_KGATHER %d\n",
             v->warpgroups, v->tma_box, v->fp8, v->layout == TSR_TL_DYN, v->gather);
  else
    snprintf(family, sizeof family, "#define TSR_WARPS %d\n", v->warps);
  snprintf(s, n,
           "/* Generated by tessera-gen %s from templates/%s: do not edit. */\n"
           "%s"
           "#define TSR_KERNEL_NAME %s\n"
           "#define TSR_MERGE_NAME %s_merge\n"
           "#define TSR_DTYPE_BF16 %d\n"
           "#define TSR_HEAD_DIM %d\n"
           "#define TSR_BM %d\n"
           "#define TSR_BN %d\n"
           "#define TSR_STAGES %d\n"
           "%s"
           "#define TSR_THREADS %d\n"
           "#define TSR_MEMBERSHIP %d\n"
           "#define TSR_SMEM_BYTES %lld\n"
           "#include \"plan_layout.h\"\n"
           "#include \"%s\"\n"
           "#include \"merge.cuh\"\n",
           TSR_GEN_VERSION, tmpl, g->def_text ? g->def_text : "", e->name, e->name, v->dtype == TSR_DT_BF16,
           v->head_dim, v->bm, v->bn, v->stages, family, tsri_variant_threads(v), v->membership,
           (long long)tsri_variant_smem_bytes(v), tmpl);
  return s;
}

/* The planner module's job index (after the catalog's) and source. */
#define PLANNER_NAME "tsr_plan"
#define PLANNER_TEMPLATE "plan_gpu.cuh"
/* The mask producers' kernels share the planner's module (one more module
 * a target would need its own registry entry and loader for two kernels). */
#define PRODUCER_TEMPLATE "produce_gpu.cuh"
#define PRODUCER_PREFIX "produce_"
static int is_planner(const gen_t *g, const job_t *j) { return j->var == g->cat.n; }
static const char *job_name(const gen_t *g, const job_t *j)
{
  return is_planner(g, j) ? PLANNER_NAME : g->cat.items[j->var].name;
}
static char *render_planner(void)
{
  char *s = malloc(512);
  if (!s) return NULL;
  snprintf(s, 512,
           "/* Generated by tessera-gen %s from templates/%s: do not edit. */\n"
           "#include \"plan_layout.h\"\n"
           "#include \"%s\"\n"
           "#include \"%s\"\n",
           TSR_GEN_VERSION, PLANNER_TEMPLATE, PLANNER_TEMPLATE, PRODUCER_TEMPLATE);
  return s;
}

static void template_name(const tsr_variant *v, char *buf, size_t n)
{
  snprintf(buf, n, "attn_%s.cuh", tsri_variant_family_name(v->family));
}

static void job_hash(const gen_t *g, job_t *j)
{
  char tmpl[64];
  uint64_t h = 1469598103934665603ULL;
  int i, planner = is_planner(g, j);
  if (planner) snprintf(tmpl, sizeof tmpl, "%s", PLANNER_TEMPLATE);
  else template_name(&g->cat.items[j->var].v, tmpl, sizeof tmpl);
  h = fnv_code(h, g->src[j->var]);
  /* Headers this variant reads: the layout, its own family's template
   * (attn_<family>.cuh and its parts attn_<family>_*.cuh) and the shared
   * ones; another family's template does not invalidate it.  The planner
   * reads the layout, its template and the producers' (produce_*.cuh). */
  for (i = 0; i < g->nhdr; i++) {
    const char *nm = g->hdr[i].name;
    size_t tl = strlen(tmpl) - 4; /* "attn_sm90" of "attn_sm90.cuh" */
    int own = strcmp(nm, tmpl) == 0 || (!planner && strncmp(nm, tmpl, tl) == 0 && nm[tl] == '_');
    /* the planner module's second part and the files it includes (produce_*.cuh) */
    int prod = strncmp(nm, PRODUCER_PREFIX, strlen(PRODUCER_PREFIX)) == 0;
    if (planner && !own && !prod && strcmp(nm, "plan_layout.h") != 0) continue;
    if (!planner && (prod || (!own && (strncmp(nm, "attn_", 5) == 0 || strcmp(nm, PLANNER_TEMPLATE) == 0))))
      continue;
    h = fnv(h, nm);
    h = fnv_code(h, g->hdr[i].text);
  }
  h = fnv(h, "tessera-gen " TSR_GEN_VERSION);
  h = fnv(h, g->nvrtc);
  h = fnv(h, tsri_variant_archs[j->arch]);
  h = fnv(h, j->opts);
  snprintf(j->hash, sizeof j->hash, "%016llx", (unsigned long long)h);
}

static void job_opts(job_t *j)
{
  snprintf(j->opts, sizeof j->opts, "--gpu-architecture=%s --std=c++17 --dopt=on",
           tsri_variant_archs[j->arch]);
}

/* Splits the options string into argv form (space separated, no quoting). */
static int split_opts(char *s, const char **argv, int max)
{
  int n = 0;
  char *tok = strtok(s, " ");
  while (tok && n < max) {
    argv[n++] = tok;
    tok = strtok(NULL, " ");
  }
  return n;
}

static void path_of(const gen_t *g, const job_t *j, const char *ext, char *buf, size_t n)
{
  snprintf(buf, n, "%s/%s/%s%s", g->out, tsri_variant_archs[j->arch], job_name(g, j), ext);
}

/* Runs in the child: compile, write the log and the cubin, _exit.  _exit
 * skips atexit handlers (leak checkers among them) that belong to the
 * parent. */
static void child_compile(const gen_t *g, const job_t *j)
{
  const char *hnames[MAX_HEADERS], *htexts[MAX_HEADERS], *argv[16];
  char opts[256], srcname[TSR_VARIANT_NAME_MAX + 8], path[4096];
  nvrtcProgram prog;
  nvrtcResult r;
  size_t logsz = 0, cubsz = 0;
  char *log, *cubin;
  int i, argc;
  FILE *f;

  for (i = 0; i < g->nhdr; i++) {
    hnames[i] = g->hdr[i].name;
    htexts[i] = g->hdr[i].text;
  }
  snprintf(opts, sizeof opts, "%s", j->opts);
  argc = split_opts(opts, argv, 16);
  snprintf(srcname, sizeof srcname, "%s.cu", job_name(g, j));
  if (nvrtcCreateProgram(&prog, g->src[j->var], srcname, g->nhdr, htexts, hnames) != NVRTC_SUCCESS)
    _exit(3);
  r = nvrtcCompileProgram(prog, argc, argv);
  nvrtcGetProgramLogSize(prog, &logsz);
  log = malloc(logsz + 1);
  if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) {
    log[logsz] = 0;
    path_of(g, j, ".log", path, sizeof path);
    write_atomic(path, log, strlen(log));
  }
  if (r != NVRTC_SUCCESS) _exit(1);
  if (nvrtcGetCUBINSize(prog, &cubsz) != NVRTC_SUCCESS || cubsz == 0) _exit(4);
  cubin = malloc(cubsz);
  if (!cubin || nvrtcGetCUBIN(prog, cubin) != NVRTC_SUCCESS) _exit(4);
  path_of(g, j, ".cubin.part", path, sizeof path);
  f = fopen(path, "wb");
  if (!f || fwrite(cubin, 1, cubsz, f) != cubsz || fclose(f) != 0) _exit(5);
  _exit(0);
}

static int start_job(const gen_t *g, job_t *j)
{
  pid_t pid;
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) child_compile(g, j);
  j->pid = pid;
  j->state = J_RUNNING;
  return 0;
}

/* Parent side of a finished compile. */
static void finish_job(const gen_t *g, job_t *j, int status)
{
  const char *name = job_name(g, j), *arch = tsri_variant_archs[j->arch];
  char part[4096], cub[4096], hpath[4096], lpath[4096];
  path_of(g, j, ".cubin.part", part, sizeof part);
  path_of(g, j, ".cubin", cub, sizeof cub);
  path_of(g, j, ".hash", hpath, sizeof hpath);
  path_of(g, j, ".log", lpath, sizeof lpath);
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "tessera-gen: nvrtc crashed (signal %d, %s) compiling variant '%s' for %s\n",
            WTERMSIG(status), strsignal(WTERMSIG(status)), name, arch);
    j->state = J_FAILED;
  } else if (WEXITSTATUS(status) != 0) {
    char *log = read_text(lpath, NULL, NULL);
    fprintf(stderr, "tessera-gen: cannot compile variant '%s' for %s (exit %d); NVRTC log:\n%s\n",
            name, arch, WEXITSTATUS(status), log && *log ? log : "(empty)");
    free(log);
    j->state = J_FAILED;
  } else if (rename(part, cub) != 0) {
    fprintf(stderr, "tessera-gen: cannot write '%s': %s\n", cub, strerror(errno));
    j->state = J_FAILED;
  } else if (write_atomic(hpath, j->hash, 16) != 0) {
    j->state = J_FAILED;
  } else {
    const char *cache = getenv("TESSERA_GEN_CACHE");
    j->state = J_BUILT;
    if (cache && *cache) {
      char cpath[4096];
      snprintf(cpath, sizeof cpath, "%s/%s.cubin", cache, j->hash);
      if (mkdirs(cache) != 0 || copy_file(cub, cpath) != 0)
        fprintf(stderr, "tessera-gen: warning: cannot store '%s' in the cache '%s'\n", name, cache);
    }
    if (g->verbose) {
      char *log = read_text(lpath, NULL, NULL);
      printf("tessera-gen: compiled %s for %s%s%s", name, arch, log && *log ? ":\n" : "\n",
             log ? log : "");
      free(log);
    }
  }
  unlink(part);
}

/* Reuses a cubin whose stored hash matches, from the tree or the cache. */
static int try_reuse(const gen_t *g, job_t *j)
{
  char cub[4096], hpath[4096];
  const char *cache = getenv("TESSERA_GEN_CACHE");
  char *old;
  struct stat st;
  int ok;
  path_of(g, j, ".cubin", cub, sizeof cub);
  path_of(g, j, ".hash", hpath, sizeof hpath);
  old = read_text(hpath, NULL, NULL);
  ok = old && strcmp(old, j->hash) == 0 && stat(cub, &st) == 0 && st.st_size > 0;
  free(old);
  if (ok) return 1;
  if (cache && *cache) {
    char cpath[4096];
    snprintf(cpath, sizeof cpath, "%s/%s.cubin", cache, j->hash);
    if (stat(cpath, &st) == 0 && st.st_size > 0 && copy_file(cpath, cub) == 0 &&
        write_atomic(hpath, j->hash, 16) == 0)
      return 1;
  }
  return 0;
}

/* Sets up job j (catalog entry or planner `var`, target a) and reuses its
 * cubin when the hash matches. */
static void queue_job(const gen_t *g, job_t *j, size_t var, int a, int *reused, size_t *done)
{
  j->var = var;
  j->arch = a;
  job_opts(j);
  job_hash(g, j);
  if (try_reuse(g, j)) {
    j->state = J_REUSED;
    (*reused)++;
    (*done)++;
  }
}

static int write_registry(const gen_t *g, const job_t *jobs, size_t njobs)
{
  json_t *root = json_object(), *vars = json_array();
  char path[4096], *text;
  size_t i, k;
  int rc;
  json_object_set_new(root, "format", json_integer(TSR_BUNDLE_FORMAT));
  json_object_set_new(root, "generator", json_string(TSR_GEN_VERSION));
  json_object_set_new(root, "nvrtc", json_string(g->nvrtc));
  json_object_set_new(root, "layout_version", json_integer(TSR_PLAN_LAYOUT_VERSION));
  if (g->ndefs) { /* knobs set for every variant: this bundle is not the catalog's defaults */
    json_t *d = json_array();
    int n;
    for (n = 0; n < g->ndefs; n++)
      json_array_append_new(d, json_pack("s++", g->defs[n].name, "=", g->defs[n].value));
    json_object_set_new(root, "defines", d);
  }
  for (i = 0; i < g->cat.n; i++) {
    const tsr_catalog_entry *e = &g->cat.items[i];
    json_t *o = json_object(), *t = json_object();
    for (k = 0; k < njobs; k++) {
      const job_t *j = &jobs[k];
      char rel[256];
      json_t *x;
      if (j->var != i || (j->state != J_BUILT && j->state != J_REUSED)) continue;
      snprintf(rel, sizeof rel, "%s/%s.cubin", tsri_variant_archs[j->arch], e->name);
      x = json_object();
      json_object_set_new(x, "cubin", json_string(rel));
      json_object_set_new(x, "hash", json_string(j->hash));
      json_object_set_new(x, "options", json_string(j->opts));
      json_object_set_new(t, tsri_variant_archs[j->arch], x);
    }
    if (json_object_size(t) == 0) {
      json_decref(o);
      json_decref(t);
      continue;
    }
    json_object_set_new(o, "name", json_string(e->name));
    json_object_set_new(o, "family", json_string(tsri_variant_family_name(e->v.family)));
    json_object_set_new(o, "dtype", json_string(tsri_variant_dtype_name(e->v.dtype)));
    json_object_set_new(o, "head_dim", json_integer(e->v.head_dim));
    json_object_set_new(o, "bm", json_integer(e->v.bm));
    json_object_set_new(o, "bn", json_integer(e->v.bn));
    json_object_set_new(o, "stages", json_integer(e->v.stages));
    json_object_set_new(o, "warps", json_integer(e->v.warps));
    json_object_set_new(o, "warpgroups", json_integer(e->v.warpgroups));
    json_object_set_new(o, "layout", json_string(tsri_variant_layout_name(e->v.layout)));
    json_object_set_new(o, "membership", json_boolean(e->v.membership));
    json_object_set_new(o, "tma_box", json_integer(e->v.tma_box));
    json_object_set_new(o, "precision", json_string(e->v.fp8 ? "fp8" : "native"));
    json_object_set_new(o, "threads", json_integer(tsri_variant_threads(&e->v)));
    json_object_set_new(o, "smem", json_integer(tsri_variant_smem_bytes(&e->v)));
    json_object_set_new(o, "targets", t);
    json_array_append_new(vars, o);
  }
  json_object_set_new(root, "variants", vars);
  {
    json_t *pt = json_object();
    for (k = 0; k < njobs; k++) {
      const job_t *j = &jobs[k];
      char rel[256];
      json_t *x;
      if (!is_planner(g, j) || (j->state != J_BUILT && j->state != J_REUSED)) continue;
      snprintf(rel, sizeof rel, "%s/%s.cubin", tsri_variant_archs[j->arch], PLANNER_NAME);
      x = json_object();
      json_object_set_new(x, "cubin", json_string(rel));
      json_object_set_new(x, "hash", json_string(j->hash));
      json_object_set_new(x, "options", json_string(j->opts));
      json_object_set_new(pt, tsri_variant_archs[j->arch], x);
    }
    json_object_set_new(root, "planner", pt);
  }
  text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!text) return -1;
  snprintf(path, sizeof path, "%s/registry.json", g->out);
  rc = write_atomic(path, text, strlen(text));
  free(text);
  return rc;
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The command line, past the options gen_t holds. */
typedef struct {
  const char *catalog, *tdir, *layout;
  unsigned targets; /* bit a: tsri_variant_archs[a] */
  int maxjobs, list;
} gen_args;

/* The compile jobs: every (variant, target) that fits, then the planner
 * once a target; counts for the summary line. */
typedef struct {
  job_t *jobs;
  size_t njobs, done;
  int running, failed, built, reused;
} job_queue;

/* --define NAME[=VALUE]: NAME is TSR_ then capitals, digits and
 * underscores (the templates' knobs); VALUE ("1" without one) goes into the
 * generated sources as written, so it is one line of printable characters
 * that cannot continue the line or open a comment.  -1 to go on, else 2. */
static int add_define(gen_t *g, const char *arg)
{
  const char *eq = strchr(arg, '='), *val = eq ? eq + 1 : "1";
  size_t nl = eq ? (size_t)(eq - arg) : strlen(arg), i;
  define_t *d = &g->defs[g->ndefs];
  int ok = nl > 4 && nl < sizeof d->name && strncmp(arg, "TSR_", 4) == 0;
  for (i = 4; ok && i < nl; i++)
    ok = isupper((unsigned char)arg[i]) || isdigit((unsigned char)arg[i]) || arg[i] == '_';
  if (!ok) {
    fprintf(stderr, "tessera-gen: --define '%s': the name must be TSR_ then capitals, digits or underscores "
                    "(at most 63 characters)\n", arg);
    return 2;
  }
  for (i = 0; val[i]; i++)
    if (val[i] < 0x20 || val[i] > 0x7e || val[i] == '\\') break;
  if (!*val || val[i] || strlen(val) >= sizeof d->value || strstr(val, "/*") || strstr(val, "//")) {
    fprintf(stderr, "tessera-gen: --define '%s': the value must be 1 to 127 printable characters, "
                    "without a backslash or a comment\n", arg);
    return 2;
  }
  for (i = 0; i < (size_t)g->ndefs; i++)
    if (strlen(g->defs[i].name) == nl && strncmp(g->defs[i].name, arg, nl) == 0) {
      fprintf(stderr, "tessera-gen: --define '%s': %s is defined twice\n", arg, g->defs[i].name);
      return 2;
    }
  if (g->ndefs == MAX_DEFINES) {
    fprintf(stderr, "tessera-gen: --define '%s': more than %d defines\n", arg, MAX_DEFINES);
    return 2;
  }
  memcpy(d->name, arg, nl);
  d->name[nl] = 0;
  snprintf(d->value, sizeof d->value, "%s", val);
  g->ndefs++;
  return -1;
}

static void free_headers(gen_t *g)
{
  int i;
  for (i = 0; i < g->nhdr; i++) {
    free(g->hdr[i].name);
    free(g->hdr[i].text);
  }
  g->nhdr = 0;
}

/* Each define must name a knob: a template holds "#ifndef NAME" (a typo
 * would build the defaults again under new hashes).  Then the generated
 * sources' lines.  0, or 2 with the reason said. */
static int check_defines(gen_t *g, const char *tdir)
{
  size_t n = 1;
  int i, k;
  for (i = 0; i < g->ndefs; i++) {
    const char *nm = g->defs[i].name;
    size_t nl = strlen(nm);
    int found = 0;
    for (k = 0; k < g->nhdr && !found; k++) {
      const char *p = g->hdr[k].text;
      while (!found && (p = strstr(p, "#ifndef ")) != NULL) {
        p += 8;
        found = strncmp(p, nm, nl) == 0 && !(isalnum((unsigned char)p[nl]) || p[nl] == '_');
      }
    }
    if (!found) {
      fprintf(stderr, "tessera-gen: --define %s: no template in '%s' has that knob (no '#ifndef %s')\n", nm,
              tdir, nm);
      return 2;
    }
    n += strlen(nm) + strlen(g->defs[i].value) + 32;
  }
  if (!g->ndefs) return 0;
  if (!(g->def_text = malloc(n))) {
    fprintf(stderr, "tessera-gen: out of memory\n");
    return 2;
  }
  g->def_text[0] = 0;
  for (i = 0; i < g->ndefs; i++)
    sprintf(g->def_text + strlen(g->def_text), "#define %s %s /* --define */\n", g->defs[i].name,
            g->defs[i].value);
  return 0;
}

/* Parses the options into g and a; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, gen_t *g, gen_args *a)
{
  static const struct option lopts[] = {
    { "catalog", required_argument, 0, 'c' }, { "templates", required_argument, 0, 't' },
    { "layout", required_argument, 0, 'l' },  { "out", required_argument, 0, 'o' },
    { "jobs", required_argument, 0, 'j' },    { "list", no_argument, 0, 'L' },
    { "verbose", no_argument, 0, 'v' },       { "help", no_argument, 0, 'h' },
    { "targets", required_argument, 0, 'T' }, { "define", required_argument, 0, 'D' },
    { 0, 0, 0, 0 }
  };
  int opt;
  a->targets = (1u << TSR_N_ARCHS) - 1;
  a->maxjobs = 2;
  while ((opt = getopt_long(argc, argv, "c:t:l:o:j:LvhT:D:", lopts, NULL)) != -1) {
    switch (opt) {
    case 'c': a->catalog = optarg; break;
    case 't': a->tdir = optarg; break;
    case 'l': a->layout = optarg; break;
    case 'o': g->out = optarg; break;
    case 'j':
      a->maxjobs = atoi(optarg);
      if (a->maxjobs < 1 || a->maxjobs > 64) die_usage("--jobs must be 1 to 64");
      break;
    case 'L': a->list = 1; break;
    case 'T': {
      /* A comma-separated subset of the targets (tests use it to stay quick). */
      char buf[256], *tok;
      snprintf(buf, sizeof buf, "%s", optarg);
      a->targets = 0;
      for (tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int ai = tsri_arch_index(tok);
        if (ai < 0) {
          fprintf(stderr, "tessera-gen: unknown target '%s' (known: sm_80, sm_89, sm_90a, sm_100a, sm_120)\n", tok);
          return 2;
        }
        a->targets |= 1u << ai;
      }
      break;
    }
    case 'D': {
      int rc = add_define(g, optarg);
      if (rc >= 0) return rc;
      break;
    }
    case 'v': g->verbose = 1; break;
    case 'h':
      help(stdout);
      return 0;
    default: die_usage("unknown option");
    }
  }
  if (optind != argc) die_usage("unexpected argument");
  if (!a->catalog) die_usage("missing --catalog");
  return -1;
}

/* --list: each catalog variant and the targets it fits. */
static void list_variants(const gen_t *g)
{
  size_t i;
  int a;
  for (i = 0; i < g->cat.n; i++) {
    printf("%s", g->cat.items[i].name);
    for (a = 0; a < TSR_N_ARCHS; a++) {
      char why[160];
      if (tsri_variant_fits(&g->cat.items[i].v, tsri_variant_archs[a], why))
        printf(" %s", tsri_variant_archs[a]);
    }
    printf("\n");
  }
}

/* The bundle's folders: one a target, and src/. */
static int make_out_dirs(const gen_t *g)
{
  char d[4096];
  int a;
  if (mkdirs(g->out) != 0) {
    fprintf(stderr, "tessera-gen: cannot create '%s': %s\n", g->out, strerror(errno));
    return -1;
  }
  for (a = 0; a < TSR_N_ARCHS; a++) {
    snprintf(d, sizeof d, "%s/%s", g->out, tsri_variant_archs[a]);
    if (mkdirs(d) != 0) {
      fprintf(stderr, "tessera-gen: cannot create '%s': %s\n", d, strerror(errno));
      return -1;
    }
  }
  snprintf(d, sizeof d, "%s/src", g->out);
  mkdirs(d);
  return 0;
}

/* Prune what cannot fit, then render the rest and queue its compiles:
 * nothing is written for a variant that fits no target. */
static int render_variants(gen_t *g, const gen_args *ga, job_queue *q)
{
  size_t i;
  int a;
  for (i = 0; i < g->cat.n; i++) {
    const tsr_catalog_entry *e = &g->cat.items[i];
    char tmpl[64], spath[4096];
    unsigned fit = 0;
    for (a = 0; a < TSR_N_ARCHS; a++) {
      char why[160];
      if (!(ga->targets & (1u << a))) continue;
      if (tsri_variant_fits(&e->v, tsri_variant_archs[a], why)) fit |= 1u << a;
      else if (e->v.family == TSR_FAMILY_SM80 || a == tsri_arch_index("sm_90a"))
        printf("tessera-gen: pruned %s for %s: %s\n", e->name, tsri_variant_archs[a], why);
    }
    if (!fit) {
      printf("tessera-gen: pruned %s: fits no target\n", e->name);
      continue;
    }
    template_name(&e->v, tmpl, sizeof tmpl);
    if (find_header(g, tmpl) < 0) {
      fprintf(stderr, "tessera-gen: variant '%s': template '%s/%s' not found\n", e->name, ga->tdir, tmpl);
      return -1;
    }
    g->src[i] = render(g, e, tmpl);
    if (!g->src[i]) {
      fprintf(stderr, "tessera-gen: out of memory\n");
      return -1;
    }
    snprintf(spath, sizeof spath, "%s/src/%s.cu", g->out, e->name);
    if (write_if_changed(spath, g->src[i]) != 0)
      return -1;
    for (a = 0; a < TSR_N_ARCHS; a++)
      if (fit & (1u << a)) queue_job(g, &q->jobs[q->njobs++], i, a, &q->reused, &q->done);
  }
  return 0;
}

/* The planner module, once a target, whatever the variants. */
static int render_planner_jobs(gen_t *g, const gen_args *ga, job_queue *q)
{
  char spath[4096];
  int a;
  if (find_header(g, PLANNER_TEMPLATE) < 0) {
    fprintf(stderr, "tessera-gen: planner template '%s/%s' not found\n", ga->tdir, PLANNER_TEMPLATE);
    return -1;
  }
  g->src[g->cat.n] = render_planner();
  if (!g->src[g->cat.n]) {
    fprintf(stderr, "tessera-gen: out of memory\n");
    return -1;
  }
  snprintf(spath, sizeof spath, "%s/src/%s.cu", g->out, PLANNER_NAME);
  if (write_if_changed(spath, g->src[g->cat.n]) != 0)
    return -1;
  for (a = 0; a < TSR_N_ARCHS; a++)
    if (ga->targets & (1u << a)) queue_job(g, &q->jobs[q->njobs++], g->cat.n, a, &q->reused, &q->done);
  return 0;
}

/* Compile the rest, `maxjobs` children at a time. */
static int run_jobs(const gen_t *g, job_queue *q, int maxjobs)
{
  job_t *jobs = q->jobs;
  size_t i;
  while (q->done < q->njobs) {
    int status;
    pid_t pid;
    for (i = 0; i < q->njobs && q->running < maxjobs; i++) {
      if (jobs[i].state != J_PENDING) continue;
      if (start_job(g, &jobs[i]) != 0) {
        fprintf(stderr, "tessera-gen: cannot fork: %s\n", strerror(errno));
        jobs[i].state = J_FAILED;
        q->done++;
        q->failed++;
        continue;
      }
      q->running++;
    }
    pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "tessera-gen: waitpid: %s\n", strerror(errno));
      return -1;
    }
    for (i = 0; i < q->njobs; i++) {
      if (jobs[i].state == J_RUNNING && jobs[i].pid == pid) {
        finish_job(g, &jobs[i], status);
        if (jobs[i].state == J_FAILED) q->failed++;
        else q->built++;
        q->running--;
        q->done++;
      }
    }
  }
  return 0;
}

int main(int argc, char **argv)
{
  gen_t g;
  gen_args ga;
  job_queue q;
  tsr_error err;
  size_t i;
  int a, nmaj, nmin, rc;
  double t0 = now_s();

  memset(&g, 0, sizeof g);
  memset(&ga, 0, sizeof ga);
  memset(&q, 0, sizeof q);
  if ((rc = parse_args(argc, argv, &g, &ga)) >= 0) return rc;
  tsr_error_clear(&err);
  if (tsr_catalog_load(ga.catalog, &g.cat, &err) != TSR_OK) {
    fprintf(stderr, "tessera-gen: %s\n", err.text);
    return 2;
  }
  if (ga.list) {
    list_variants(&g);
    tsr_catalog_free(&g.cat);
    return 0;
  }
  if (!ga.tdir || !ga.layout || !g.out) die_usage("missing --templates, --layout or --out");
  if (load_headers(&g, ga.tdir, ga.layout) != 0) {
    tsr_catalog_free(&g.cat);
    return 2;
  }
  if (check_defines(&g, ga.tdir) != 0) {
    free_headers(&g);
    tsr_catalog_free(&g.cat);
    return 2;
  }
  if (nvrtcVersion(&nmaj, &nmin) != NVRTC_SUCCESS) {
    fprintf(stderr, "tessera-gen: cannot query the NVRTC version\n");
    return 2;
  }
  snprintf(g.nvrtc, sizeof g.nvrtc, "%d.%d", nmaj, nmin);

  g.src = calloc(g.cat.n + 1, sizeof *g.src); /* [cat.n]: the planner */
  q.jobs = calloc((g.cat.n + 1) * TSR_N_ARCHS + 1, sizeof *q.jobs);
  if (!g.src || !q.jobs) {
    fprintf(stderr, "tessera-gen: out of memory\n");
    return 2;
  }
  if (make_out_dirs(&g) != 0 || render_variants(&g, &ga, &q) != 0 ||
      render_planner_jobs(&g, &ga, &q) != 0 || run_jobs(&g, &q, ga.maxjobs) != 0)
    return 2;
  if (q.failed) {
    fprintf(stderr, "tessera-gen: %d of %zu compiles failed; bundle not written\n", q.failed, q.njobs);
    return 1;
  }
  if (write_registry(&g, q.jobs, q.njobs) != 0) {
    fprintf(stderr, "tessera-gen: bundle registry not written\n");
    return 1;
  }
  printf("tessera-gen: %zu variants, %zu cubins (%d compiled, %d reused) with NVRTC %s in %.1f s\n",
         g.cat.n, q.njobs, q.built, q.reused, g.nvrtc, now_s() - t0);
  for (a = 0; a < g.ndefs; a++)
    printf("tessera-gen: every variant built with %s=%s (--define)\n", g.defs[a].name, g.defs[a].value);
  free(g.def_text);
  for (i = 0; i <= g.cat.n; i++) free(g.src[i]);
  free(g.src);
  free_headers(&g);
  free(q.jobs);
  tsr_catalog_free(&g.cat);
  return 0;
}

/*
 * options.c: one option table per command, used both to parse argv and to
 * print --help, so the two cannot drift apart (tests/man-options.sh then
 * checks the man page against --help).  Cost: O(argc * options).
 */
#include <string.h>

#include "cli.h"

static const cli_opt *find(const cli_opt *opts, const char *name, size_t len)
{
  for (; opts->name; opts++)
    if (strlen(opts->name) == len && !strncmp(opts->name, name, len))
      return opts;
  return NULL;
}

/* One line of an options list: "  --name ARG   help" (prefix: "sub: "). */
static void put_opt(FILE *f, const char *name, const char *arg, const char *prefix,
                    const char *help)
{
  char left[64];
  snprintf(left, sizeof left, "%s%s%s", name, arg ? " " : "", arg ? arg : "");
  fprintf(f, "  %-24s %s%s\n", left, prefix, help);
}

/* A command's --help: its synopsis and every option. */
static void cli_help(FILE *f, const char *cmd, const char *synopsis, const cli_opt *opts)
{
  fprintf(f, "usage: tessera %s %s\n\noptions:\n", cmd, synopsis);
  for (; opts->name; opts++)
    put_opt(f, opts->name, opts->arg, "", opts->help);
  put_opt(f, "--help", NULL, "", "print this help and exit");
  fprintf(f, "\nSee man tessera-%s(1).\n", cmd);
}

void cli_sub_help(FILE *f, const char *cmd, const cli_sub *subs, const cli_sub_opt *opts,
                  const char *sub)
{
  unsigned all = 0, want;
  int i, n = 0, at = -1;
  for (i = 0; subs[i].name; i++) {
    all |= 1u << i;
    if (sub && !strcmp(sub, subs[i].name))
      at = i;
  }
  want = at >= 0 ? 1u << at : all;
  for (i = 0; subs[i].name; i++)
    if (want & (1u << i))
      fprintf(f, "%s tessera %s %s%s%s\n", n++ ? "      " : "usage:", cmd, subs[i].name,
              subs[i].synopsis[0] ? " " : "", subs[i].synopsis);
  if (at >= 0) {
    fprintf(f, "\n%s\n", subs[at].help);
  } else {
    fprintf(f, "\ncommands:\n");
    for (i = 0; subs[i].name; i++)
      fprintf(f, "  %-10s %s\n", subs[i].name, subs[i].help);
  }
  fprintf(f, "\noptions:\n");
  for (; opts->name; opts++) {
    /* In the overview an option of some subcommands only names them. */
    char prefix[64] = "";
    if (!(opts->subs & want))
      continue;
    if (at < 0 && (opts->subs & all) != all) {
      size_t len = 0;
      for (i = 0; subs[i].name; i++)
        if (opts->subs & (1u << i)) {
          snprintf(prefix + len, sizeof prefix - len, "%s%s", len ? "/" : "", subs[i].name);
          len = strlen(prefix);
        }
      snprintf(prefix + len, sizeof prefix - len, ": ");
    }
    put_opt(f, opts->name, opts->arg, prefix, opts->help);
  }
  put_opt(f, "--help", NULL, "", "print this help and exit");
  fprintf(f, "\nSee man tessera-%s(1).\n", cmd);
}

int cli_parse(const char *cmd, const char *synopsis, const cli_opt *opts, const char **values,
              int argc, char **argv)
{
  int i, n = 0;
  const cli_opt *o;
  for (o = opts; o->name; o++)
    values[n++] = NULL;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *eq, *val;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      cli_help(stdout, cmd, synopsis, opts);
      return 1;
    }
    if (strncmp(a, "--", 2)) {
      cli_errorf(cmd, "unexpected argument '%s' (try --help)", a);
      return -1;
    }
    eq = strchr(a, '=');
    o = find(opts, a, eq ? (size_t)(eq - a) : strlen(a));
    if (!o) {
      cli_errorf(cmd, "unknown option '%.*s' (try --help)", eq ? (int)(eq - a) : (int)strlen(a), a);
      return -1;
    }
    if (!o->arg) {
      if (eq) {
        cli_errorf(cmd, "option %s takes no value", o->name);
        return -1;
      }
      val = "1";
    } else if (eq) {
      val = eq + 1;
    } else if (i + 1 < argc) {
      val = argv[++i];
    } else {
      cli_errorf(cmd, "option %s needs a value %s", o->name, o->arg);
      return -1;
    }
    if (values[o - opts]) {
      cli_errorf(cmd, "option %s given twice", o->name);
      return -1;
    }
    values[o - opts] = val;
  }
  return 0;
}

int cli_status_exit(tsr_status s)
{
  if (s == TSR_OK)
    return CLI_OK;
  return s == TSR_ERR_VERIFY ? CLI_FAIL : CLI_USAGE;
}

/*
 * tessera.c: entry point of the `tessera` command; dispatches to the
 * subcommands in cli/cmd_*.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"demo", cmd_demo, "plan and run the bundled demo masks (the README's main job)"},
    {"corpus", cmd_corpus, "generate or describe mask corpora"},
    {"plan", cmd_plan, "map a mask onto tiles, organise tasks, explain, verify"},
    {"run", cmd_run, "run attention on the CPU reference, the CPU plan executor or the GPU"},
    {"db", cmd_db, "inspect lookup databases"},
};

void cli_errorf(const char *cmd, const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "tessera %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int cli_parse_i64(const char *s, int64_t *v, int allow_zero)
{
  char *end;
  long long x;
  if (!s || !*s)
    return -1;
  errno = 0;
  x = strtoll(s, &end, 10);
  if (errno || *end || x < (allow_zero ? 0 : 1))
    return -1;
  *v = x;
  return 0;
}

int cli_parse_pair(const char *s, int64_t *a, int64_t *b)
{
  char buf[64];
  char *x;
  if (!s || strlen(s) >= sizeof buf)
    return -1;
  strcpy(buf, s);
  x = strchr(buf, 'x');
  if (x)
    *x = '\0';
  if (cli_parse_i64(buf, a, 0))
    return -1;
  if (!x) {
    *b = *a;
    return 0;
  }
  return cli_parse_i64(x + 1, b, 0);
}

static void usage(FILE *f)
{
  size_t i;
  fprintf(f, "usage: tessera COMMAND [OPTIONS]\n       tessera --help | --version\n\ncommands:\n");
  for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\noptions:\n  %-10s print this help and exit\n  %-10s print the version and exit\n",
          "--help", "--version");
  fprintf(f, "\n'tessera COMMAND --help' describes a command; man tessera(1).\n");
}

int main(int argc, char **argv)
{
  size_t i;
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return CLI_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("tessera %s\n", PACKAGE_VERSION);
    return CLI_OK;
  }
  for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name))
      return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "tessera: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}

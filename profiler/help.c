/*
 * help.c: the usage of tessera-profile and of each of its commands, from one
 * table, so the overview and a command's own --help cannot disagree
 * (tests/man-options.sh checks both against man/tessera-profile.1).
 */
#include <string.h>

#include "profile.h"

typedef struct {
  const char *name;
  const char *synopsis; /* '\n' breaks the line; the printer indents */
  const char *what;
  const char *options;  /* "  --opt ARG   what it does\n" lines */
} help_cmd;

static const help_cmd commands[] = {
    {"sweep",
     "--corpus DIR --db FILE [--device N] [--budget SECONDS] [--variants GLOB]\n"
     "[--split NAME] [--repeats N] [--warmup N] [--settle-ms MS] [--limit N] [--bundle DIR]",
     "time every eligible candidate plan of every mask on this GPU",
     "  --corpus DIR        mask corpus folder (with its manifest.json)\n"
     "  --db FILE           timings database, created when missing; a sweep resumes\n"
     "  --device N          CUDA device ordinal (default 0)\n"
     "  --budget SECONDS    start no new mask after this much wall time\n"
     "  --variants GLOB     only kernel variants whose name matches the pattern\n"
     "  --split NAME        corpus split to sweep: profile (default) or eval\n"
     "  --repeats N         timed launches per candidate (default 10)\n"
     "  --warmup N          untimed launches before timing (default 3)\n"
     "  --settle-ms MS      then untimed launches until MS ms have passed, so that a GPU at\n"
     "                      its power cap times each candidate at its own clock (default 0)\n"
     "  --limit N           only the first N masks of the split\n"
     "  --bundle DIR        kernel bundle (default: $TESSERA_BUNDLE, else the installed one)\n"},
    {"build", "--db FILE [--gpu NAME] [--split NAME]",
     "derive the lookup table from the timings",
     "  --db FILE           timings database; the GPU's lookup rows are replaced\n"
     "  --gpu NAME          only this GPU's table (default: every GPU with timings)\n"
     "  --split NAME        corpus split to derive from (default profile)\n"},
    {"report", "--db FILE --out DIR [--gpu NAME] [--split NAME]",
     "selection quality, regime map and speed-ups (PNG, CSV)",
     "  --db FILE           timings database, read only\n"
     "  --out DIR           report folder (selection.csv, summary.csv, regime.png, speedup.png)\n"
     "  --gpu NAME          the GPU to report on (default: the first, by name, with timings)\n"
     "  --split NAME        masks to replay selection on (default eval, else profile)\n"},
    {"export", "--db FILE [--gpu NAME] [--out FILE]",
     "the lookup table as SQL text (what db/h200.sql holds)",
     "  --db FILE           database to export from, read only\n"
     "  --gpu NAME          only this GPU's table (default: every GPU)\n"
     "  --out FILE          write FILE atomically (default: standard output)\n"},
    {"init", "--db FILE [--sql FILE]",
     "create a database holding the shipped tables (or FILE's SQL)",
     "  --db FILE           the new database; an existing file is refused\n"
     "  --sql FILE          SQL text to load instead of the shipped tables\n"},
};

enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

/* The synopsis with each line break followed by `indent` spaces. */
static void put_synopsis(FILE *f, const char *s, int indent)
{
  for (; *s; s++) {
    fputc(*s, f);
    if (*s == '\n')
      fprintf(f, "%*s", indent, "");
  }
}

int tsrp_help(FILE *f, const char *cmd)
{
  int i;
  if (!cmd) {
    fputs("usage: tessera-profile COMMAND [OPTIONS]\n"
          "       tessera-profile --help | --version\n\ncommands:\n",
          f);
    for (i = 0; i < N_COMMANDS; i++) {
      fprintf(f, "  %-7s ", commands[i].name);
      put_synopsis(f, commands[i].synopsis, 10);
      fprintf(f, "\n          %s\n", commands[i].what);
    }
    fputs("\noptions:\n"
          "  --help              print this help and exit\n"
          "  --version           print the version and exit\n"
          "\n'tessera-profile COMMAND --help' describes a command; man tessera-profile(1).\n",
          f);
    return 0;
  }
  for (i = 0; i < N_COMMANDS; i++)
    if (!strcmp(cmd, commands[i].name))
      break;
  if (i == N_COMMANDS)
    return -1;
  fprintf(f, "usage: tessera-profile %s ", commands[i].name);
  put_synopsis(f, commands[i].synopsis, 24 + (int)strlen(commands[i].name));
  fprintf(f, "\n\n%s\n\noptions:\n%s", commands[i].what, commands[i].options);
  fputs("  --help              print this help and exit\n\nSee man tessera-profile(1).\n", f);
  return 0;
}

/*
 * cli.h: the `tessera` command's subcommands.  Each lives in its own file
 * (cli/cmd_NAME.c) and returns the process exit status:
 *   0 success, 1 a check or verification failed, 2 usage or input error.
 * Errors go to stderr as one line, "tessera NAME: <what failed>".
 */
#ifndef TSR_CLI_H
#define TSR_CLI_H

#include <stdio.h>

#include "tessera.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Test hooks: compiled only into tests/tessera-test (these sources built
 * with TSR_CLI_TEST_HOOKS, plus tests/cli_hooks.c), empty in the shipped
 * command.  The tests damage a plan before its verification and an output
 * before its comparison with the reference, to see the failures reach the
 * messages and the exit status. */
#ifdef TSR_CLI_TEST_HOOKS
void cli_test_damage_plan(tsr_plan *pl);
void cli_test_damage_output(tsr_array *out);
#else
#define cli_test_damage_plan(pl) ((void)(pl))
#define cli_test_damage_output(out) ((void)(out))
#endif

int cmd_run(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_corpus(int argc, char **argv);
int cmd_db(int argc, char **argv);
int cmd_demo(int argc, char **argv);

/* Prints "tessera <cmd>: <msg>" to stderr. */
void cli_errorf(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Parses "BQ" or "BQxBK" (positive integers). Returns 0 on success. */
int cli_parse_pair(const char *s, int64_t *a, int64_t *b);
/* Parses a positive (or, when allow_zero, non-negative) integer. */
int cli_parse_i64(const char *s, int64_t *v, int allow_zero);

/* Option tables: {name ("--mask"), argument placeholder ("M.npy", NULL for
 * a flag), one-line help}, ended by {NULL}.  cli_parse fills values[i] with
 * option i's argument ("1" for a flag, NULL when absent); accepts
 * "--opt VALUE" and "--opt=VALUE"; prints help on --help or -h.  Returns 0
 * to go on, 1 after printing help (exit 0), -1 after printing an error
 * (exit CLI_USAGE). */
typedef struct {
  const char *name;
  const char *arg;
  const char *help;
} cli_opt;

int cli_parse(const char *cmd, const char *synopsis, const cli_opt *opts, const char **values,
              int argc, char **argv);
/* The help of a command with subcommands (corpus, db), whose parsers are
 * their own: each subcommand's synopsis ("DIR [--csv FILE]") and one-line
 * description, ended by {NULL}; the options, ended by {NULL}, each with the
 * subcommands that take it (bit i: subs[i]).  Prints the usage of `sub`
 * with its options, or with sub NULL (or unknown) of every subcommand. */
typedef struct {
  const char *name;
  const char *synopsis;
  const char *help;
} cli_sub;
typedef struct {
  const char *name;
  const char *arg;
  const char *help;
  unsigned subs;
} cli_sub_opt;
void cli_sub_help(FILE *f, const char *cmd, const cli_sub *subs, const cli_sub_opt *opts,
                  const char *sub);
/* The block geometry (cli/blocks.c): uniform from `block` ("BQ[xBK]") over
 * sq x sk tokens, or variable from the .npy files `qblocks` and `kblocks`
 * (1-D int32/int64 block sizes), whose sums must then equal sq and sk unless
 * those are 0; q_len and k_len name where the lengths come from in messages
 * ("q 'Q.npy'", "--seq").  Errors go to stderr as "tessera CMD: ...".
 * Returns 0, or -1 with *g NULL. */
int cli_make_geom(const char *cmd, const char *block, const char *qblocks, const char *kblocks,
                  int64_t sq, int64_t sk, const char *q_len, const char *k_len, tsr_geom **g);
/* Checks the syntax and range of a --block value ("BQ[xBK]") before any
 * file is read; 0, or -1 after printing the error. */
int cli_check_block(const char *cmd, const char *block);
/* Prints a selection's features, region, plan and reason (cli/explain.c),
 * as `tessera plan --select --explain` and `tessera run --explain` show it. */
void cli_print_selection(const tsr_features *f, const tsr_selection *c);
/* Exit status for a library status: TSR_ERR_VERIFY is a failed check (1);
 * anything else is a usage, input or environment error (2). */
int cli_status_exit(tsr_status s);

#endif

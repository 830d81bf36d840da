/* cmd_corpus.c: STUB for `tessera corpus`; to be written. */
#include "cli.h"

int cmd_corpus(int argc, char **argv)
{
  (void)argc;
  (void)argv;
  cli_errorf("corpus", "not implemented yet");
  return CLI_USAGE;
}

/* cmd_bench.c: STUB for `tessera bench`; to be written. */
#include "cli.h"

int cmd_bench(int argc, char **argv)
{
  (void)argc;
  (void)argv;
  cli_errorf("bench", "not implemented yet");
  return CLI_USAGE;
}

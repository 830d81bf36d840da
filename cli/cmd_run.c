/* cmd_run.c: STUB for `tessera run`; to be written. */
#include "cli.h"

int cmd_run(int argc, char **argv)
{
  (void)argc;
  (void)argv;
  cli_errorf("run", "not implemented yet");
  return CLI_USAGE;
}

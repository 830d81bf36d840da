/* cmd_plan.c: STUB for `tessera plan`; to be written. */
#include "cli.h"

int cmd_plan(int argc, char **argv)
{
  (void)argc;
  (void)argv;
  cli_errorf("plan", "not implemented yet");
  return CLI_USAGE;
}

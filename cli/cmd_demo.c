/* cmd_demo.c: STUB for `tessera demo`; to be written. */
#include "cli.h"

int cmd_demo(int argc, char **argv)
{
  (void)argc;
  (void)argv;
  cli_errorf("demo", "not implemented yet");
  return CLI_USAGE;
}

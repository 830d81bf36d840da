/* cmd_db.c: STUB for `tessera db`; to be written. */
#include "cli.h"

int cmd_db(int argc, char **argv)
{
  (void)argc;
  (void)argv;
  cli_errorf("db", "not implemented yet");
  return CLI_USAGE;
}

/*
 * fuzz_db_file.c: libFuzzer harness of opening a lookup database from raw
 * file bytes and selecting plans from it (runtime/db.c, select.c, and the
 * host-only context of gpu.c).
 *
 * Input: the bytes of a database file, written to a scratch file; then
 * tests/fuzz/fuzz_db.h: tsr_select_open (the table's only GPU, then the
 * H200 by name), tsr_select_plan / tsr_select_request for six masks, plans
 * of the selections verified, and a host-only context on the file selecting
 * for the same masks.  Seeds: the shipped tessera.db (db/h200.sql over
 * db/schema.sql, by tessera-profile init), and databases holding the schema
 * only, at every version (mkseeds); dictionary tests/fuzz/sql.dict.
 */
#include "fuzz_db.h"

static char db_path[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  fz_path(db_path, sizeof db_path, fz_dir(), "lookup.db");
  fz_db_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char aux[700];
  fz_write(db_path, data, size);
  /* Journals of an earlier input would be replayed into this one. */
  unlink(fz_path(aux, sizeof aux, fz_dir(), "lookup.db-wal"));
  unlink(fz_path(aux, sizeof aux, fz_dir(), "lookup.db-shm"));
  unlink(fz_path(aux, sizeof aux, fz_dir(), "lookup.db-journal"));
  fz_db_select(db_path);
  return 0;
}

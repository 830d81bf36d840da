/*
 * blocks.c: the logical block geometry from command-line options, shared by
 * `tessera run` and `tessera plan`: uniform blocks from --block BQ[xBK], or
 * variable blocks from --q-blocks / --k-blocks (1-D int32/int64 .npy of
 * block sizes), checked against the lengths the command knows.  Cost:
 * reading two small files.
 */
#include <stdlib.h>

#include "cli.h"

/* Block sizes from a 1-D int32/int64 .npy into a malloc'ed int64 array. */
static int load_sizes(const char *cmd, const char *path, const char *opt, int64_t **sizes,
                      int64_t *n)
{
  tsr_array a;
  tsr_error err = {0};
  int64_t i;
  if (tsr_npy_load(path, &a, &err) != TSR_OK) {
    cli_errorf(cmd, "%s", err.text);
    return -1;
  }
  if ((a.dtype != TSR_DT_I32 && a.dtype != TSR_DT_I64) || a.ndim != 1) {
    cli_errorf(cmd, "cannot use %s '%s': expected a non-empty 1-D int32 or int64 array, got %s with %d dimensions",
               opt, path, tsr_dtype_name(a.dtype), a.ndim);
    tsr_npy_free(&a);
    return -1;
  }
  if (a.shape[0] < 1) {
    cli_errorf(cmd, "cannot use %s '%s': the array is empty, expected at least one block size",
               opt, path);
    tsr_npy_free(&a);
    return -1;
  }
  *n = a.shape[0];
  *sizes = malloc((size_t)*n * sizeof **sizes);
  for (i = 0; *sizes && i < *n; i++)
    (*sizes)[i] = a.dtype == TSR_DT_I32 ? ((int32_t *)a.data)[i] : ((int64_t *)a.data)[i];
  tsr_npy_free(&a);
  if (!*sizes) {
    cli_errorf(cmd, "out of memory");
    return -1;
  }
  return 0;
}

int cli_check_block(const char *cmd, const char *block)
{
  int64_t bq, bk;
  if (cli_parse_pair(block, &bq, &bk) || bq > TSR_MAX_SEQ || bk > TSR_MAX_SEQ) {
    cli_errorf(cmd, "invalid --block '%s': expected BQ or BQxBK, positive integers up to %lld",
               block, (long long)TSR_MAX_SEQ);
    return -1;
  }
  return 0;
}

int cli_make_geom(const char *cmd, const char *block, const char *qblocks, const char *kblocks,
                  int64_t sq, int64_t sk, const char *q_len, const char *k_len, tsr_geom **g)
{
  tsr_error err = {0};
  *g = NULL;
  if (block) {
    int64_t bq, bk;
    if (qblocks || kblocks) {
      cli_errorf(cmd, "--block and --q-blocks/--k-blocks exclude each other");
      return -1;
    }
    if (cli_check_block(cmd, block))
      return -1;
    cli_parse_pair(block, &bq, &bk);
    if (tsr_geom_uniform(sq, sk, bq, bk, g, &err) != TSR_OK) {
      cli_errorf(cmd, "invalid --block '%s': %s", block, err.text);
      return -1;
    }
    return 0;
  }
  if (!qblocks || !kblocks) {
    cli_errorf(cmd, "missing --block BQ[xBK] (or both --q-blocks and --k-blocks)");
    return -1;
  }
  {
    int64_t *qs = NULL, *ks = NULL, nq = 0, nk = 0;
    int rc = -1;
    if (!load_sizes(cmd, qblocks, "--q-blocks", &qs, &nq) &&
        !load_sizes(cmd, kblocks, "--k-blocks", &ks, &nk)) {
      if (tsr_geom_variable(qs, nq, ks, nk, g, &err) != TSR_OK)
        cli_errorf(cmd, "cannot use block sizes '%s', '%s': %s", qblocks, kblocks, err.text);
      else if (sq && tsr_geom_seq_q(*g) != sq)
        cli_errorf(cmd, "--q-blocks '%s' cover %lld tokens, but %s has %lld", qblocks,
                   (long long)tsr_geom_seq_q(*g), q_len, (long long)sq);
      else if (sk && tsr_geom_seq_k(*g) != sk)
        cli_errorf(cmd, "--k-blocks '%s' cover %lld tokens, but %s has %lld", kblocks,
                   (long long)tsr_geom_seq_k(*g), k_len, (long long)sk);
      else
        rc = 0;
    }
    free(qs);
    free(ks);
    if (rc) {
      tsr_geom_destroy(*g);
      *g = NULL;
    }
    return rc;
  }
}

/*
 * fuzz_npy.c: libFuzzer harness of the .npy loader (runtime/npy.c).
 *
 * Input: the bytes of a .npy file.  Promises checked:
 *  - a failed load returns a status with a message and leaves the array
 *    zeroed;
 *  - what loads is well-formed (a known dtype, 0..8 dimensions, no negative
 *    extent, a buffer) and saves; the saved file reloads to the same dtype,
 *    shape and bytes, and saving that again writes the same file, byte for
 *    byte (the writer is deterministic);
 *  - float16 elements survive float16 -> float32 -> float16 exactly (NaN
 *    stays NaN).
 * Seeds: masks, block sizes and tensors of every dtype the project writes
 * (tests/fuzz/mkseeds.c); dictionary tests/fuzz/npy.dict.
 */
#include "fuzz.h"

static char in_path[600], out_path[600], out2_path[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  const char *d = fz_dir();
  (void)argc, (void)argv;
  fz_path(in_path, sizeof in_path, d, "in.npy");
  fz_path(out_path, sizeof out_path, d, "out.npy");
  fz_path(out2_path, sizeof out2_path, d, "out2.npy");
  return 0;
}

static void check_well_formed(const tsr_array *a, const char *what)
{
  int i;
  if (a->dtype == TSR_DT_BF16 || tsr_dtype_size(a->dtype) == 0)
    FZ_FINDING("%s: loaded dtype %d has no .npy form", what, (int)a->dtype);
  if (a->ndim < 0 || a->ndim > TSR_MAX_DIMS)
    FZ_FINDING("%s: loaded %d dimensions", what, a->ndim);
  for (i = 0; i < a->ndim; i++)
    if (a->shape[i] < 0)
      FZ_FINDING("%s: dimension %d is %lld", what, i, (long long)a->shape[i]);
  if (!a->data)
    FZ_FINDING("%s: loaded without a buffer", what);
}

static void check_halves(const tsr_array *a)
{
  const uint16_t *h = a->data;
  int64_t i, n = tsr_array_numel(a);
  if (a->dtype != TSR_DT_F16)
    return;
  for (i = 0; i < n && i < 4096; i++) {
    float f = tsr_half_to_float(h[i]);
    uint16_t back = tsr_float_to_half(f);
    int nan = (h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff);
    if (nan ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h[i])
      FZ_FINDING("float16 0x%04x -> %g -> 0x%04x", h[i], (double)f, back);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  tsr_array a, b;
  tsr_error err;
  tsr_status st;
  size_t n1 = 0, n2 = 0;
  uint8_t *f1, *f2;
  int i;

  fz_write(in_path, data, size);
  tsr_error_clear(&err);
  st = tsr_npy_load(in_path, &a, &err);
  FZ_CHECK_ERR(st, err, "tsr_npy_load");
  if (st != TSR_OK) {
    if (a.data || a.ndim)
      FZ_FINDING("failed load (%s) left data %p, %d dimensions", err.text, a.data, a.ndim);
    return 0;
  }
  check_well_formed(&a, "input");
  check_halves(&a);

  /* Round trip: save, reload, compare. */
  tsr_error_clear(&err);
  if ((st = tsr_npy_save(out_path, &a, &err)) != TSR_OK)
    FZ_FINDING("an array that loaded does not save: %s", err.text);
  tsr_error_clear(&err);
  if ((st = tsr_npy_load(out_path, &b, &err)) != TSR_OK)
    FZ_FINDING("a saved array does not reload: %s", err.text);
  check_well_formed(&b, "reloaded");
  if (b.dtype != a.dtype || b.ndim != a.ndim)
    FZ_FINDING("reloaded dtype %s, %d dimensions; saved %s, %d", tsr_dtype_name(b.dtype),
               b.ndim, tsr_dtype_name(a.dtype), a.ndim);
  for (i = 0; i < a.ndim; i++)
    if (a.shape[i] != b.shape[i])
      FZ_FINDING("reloaded dimension %d is %lld, saved %lld", i, (long long)b.shape[i],
                 (long long)a.shape[i]);
  if (memcmp(a.data, b.data, (size_t)tsr_array_numel(&a) * tsr_dtype_size(a.dtype)))
    FZ_FINDING("reloaded data differ from the saved data");

  /* The writer is deterministic: the reloaded array saves to the same bytes. */
  tsr_error_clear(&err);
  if ((st = tsr_npy_save(out2_path, &b, &err)) != TSR_OK)
    FZ_FINDING("a reloaded array does not save: %s", err.text);
  f1 = fz_slurp(out_path, &n1);
  f2 = fz_slurp(out2_path, &n2);
  if (!f1 || !f2 || n1 != n2 || memcmp(f1, f2, n1))
    FZ_FINDING("saving the same array twice wrote different files (%zu and %zu bytes)", n1, n2);
  free(f1);
  free(f2);

  tsr_npy_free(&b);
  tsr_npy_free(&a);
  return 0;
}

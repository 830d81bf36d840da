/* runtime/npy.c: STUB, to be written by the foundation work. Returns TSR_ERR_UNSUPPORTED. */
#include "tessera.h"

size_t tsr_dtype_size(tsr_dtype dt) { (void)dt; return 0; }

const char *tsr_dtype_name(tsr_dtype dt) { (void)dt; return "?"; }

int64_t tsr_array_numel(const tsr_array *a) { (void)a; return 0; }

tsr_status tsr_npy_load(const char *path, tsr_array *out, tsr_error *err) { (void)path; (void)out; (void)err; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

tsr_status tsr_npy_save(const char *path, const tsr_array *a, tsr_error *err) { (void)path; (void)a; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

void tsr_npy_free(tsr_array *a) { (void)a; }

float tsr_half_to_float(uint16_t h) { (void)h; return 0; }

uint16_t tsr_float_to_half(float f) { (void)f; return 0; }

float tsr_bf16_to_float(uint16_t h) { (void)h; return 0; }

uint16_t tsr_float_to_bf16(float f) { (void)f; return 0; }


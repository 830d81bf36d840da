/* runtime/gpu.c: STUB, to be written by the gpu work. Returns TSR_ERR_UNSUPPORTED. */
#include "tessera.h"

void tsr_context_opts_init(tsr_context_opts *o) { o->device = 0; o->bundle_dir = 0; o->db_path = 0; }

tsr_status tsr_context_create(const tsr_context_opts *o, tsr_context **out, tsr_error *err) { (void)o; *out = 0; return tsr_error_set(err, TSR_ERR_NO_DEVICE, "GPU support not implemented yet"); }

void tsr_context_destroy(tsr_context *ctx) { (void)ctx; }

tsr_status tsr_gpu_upload(tsr_context *ctx, tsr_plan *pl, tsr_error *err) { (void)ctx; (void)pl; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

tsr_status tsr_gpu_launch(tsr_context *ctx, const tsr_plan *pl, const tsr_gpu_tensors *t, void *stream, tsr_error *err) { (void)ctx; (void)pl; (void)t; (void)stream; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }


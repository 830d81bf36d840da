/* runtime/ref.c: STUB, to be written by the foundation work. Returns TSR_ERR_UNSUPPORTED. */
#include "tessera.h"

tsr_status tsr_ref_attention(const tsr_geom *g, const tsr_mask *m, const tsr_array *q, const tsr_array *k, const tsr_array *v, double scale, tsr_array *out, tsr_array *lse, tsr_error *err) { (void)g; (void)m; (void)q; (void)k; (void)v; (void)scale; (void)out; (void)lse; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }


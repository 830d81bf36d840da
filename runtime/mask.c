/* runtime/mask.c: STUB, to be written by the foundation work. Returns TSR_ERR_UNSUPPORTED. */
#include "tessera.h"

tsr_status tsr_mask_load(const char *path, tsr_mask **out, tsr_error *err) { (void)path; *out = 0; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

tsr_status tsr_mask_from_bytes(int64_t batch, int64_t heads, int64_t nq, int64_t nk, const uint8_t *bits, tsr_mask **out, tsr_error *err) { (void)batch; (void)heads; (void)nq; (void)nk; (void)bits; *out = 0; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

tsr_status tsr_mask_save(const char *path, const tsr_mask *m, tsr_error *err) { (void)path; (void)m; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

void tsr_mask_destroy(tsr_mask *m) { (void)m; }

int64_t tsr_mask_batch(const tsr_mask *m) { (void)m; return 0; }

int64_t tsr_mask_heads(const tsr_mask *m) { (void)m; return 0; }

int64_t tsr_mask_nq(const tsr_mask *m) { (void)m; return 0; }

int64_t tsr_mask_nk(const tsr_mask *m) { (void)m; return 0; }

const uint8_t *tsr_mask_bits(const tsr_mask *m) { (void)m; return 0; }

const uint8_t *tsr_mask_plane(const tsr_mask *m, int64_t b, int64_t h) { (void)m; (void)b; (void)h; return 0; }

double tsr_mask_density(const tsr_mask *m) { (void)m; return 0; }

tsr_status tsr_mask_check(const tsr_mask *m, const tsr_geom *g, int64_t batch, int64_t heads_q, const char *name, tsr_error *err) { (void)m; (void)g; (void)batch; (void)heads_q; (void)name; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }


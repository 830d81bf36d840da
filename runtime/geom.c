/* runtime/geom.c: STUB, to be written by the foundation work. Returns TSR_ERR_UNSUPPORTED. */
#include "tessera.h"

tsr_status tsr_geom_uniform(int64_t seq_q, int64_t seq_k, int64_t bq, int64_t bk, tsr_geom **out, tsr_error *err) { (void)seq_q; (void)seq_k; (void)bq; (void)bk; *out = 0; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

tsr_status tsr_geom_variable(const int64_t *q_sizes, int64_t nq, const int64_t *k_sizes, int64_t nk, tsr_geom **out, tsr_error *err) { (void)q_sizes; (void)nq; (void)k_sizes; (void)nk; *out = 0; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

void tsr_geom_destroy(tsr_geom *g) { (void)g; }

int64_t tsr_geom_seq_q(const tsr_geom *g) { (void)g; return 0; }

int64_t tsr_geom_seq_k(const tsr_geom *g) { (void)g; return 0; }

int64_t tsr_geom_nq(const tsr_geom *g) { (void)g; return 0; }

int64_t tsr_geom_nk(const tsr_geom *g) { (void)g; return 0; }

int64_t tsr_geom_q_start(const tsr_geom *g, int64_t i) { (void)g; (void)i; return 0; }

int64_t tsr_geom_k_start(const tsr_geom *g, int64_t j) { (void)g; (void)j; return 0; }

int tsr_geom_is_uniform(const tsr_geom *g, int64_t *bq, int64_t *bk) { (void)g; (void)bq; (void)bk; return 0; }


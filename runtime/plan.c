/* runtime/plan.c: STUB, to be written by the planning work. Returns TSR_ERR_UNSUPPORTED. */
#include "tessera.h"

void tsr_plan_opts_init(tsr_plan_opts *o) { (void)o; }

tsr_status tsr_plan_create(const tsr_problem *p, const tsr_mask *m, const tsr_plan_opts *o, tsr_plan **out, tsr_error *err) { (void)p; (void)m; (void)o; *out = 0; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

void tsr_plan_destroy(tsr_plan *pl) { (void)pl; }

void tsr_plan_summarize(const tsr_plan *pl, tsr_plan_summary *s) { (void)pl; (void)s; }

char *tsr_plan_explain_json(const tsr_plan *pl, int detail) { (void)pl; (void)detail; return 0; }

tsr_status tsr_plan_verify(const tsr_plan *pl, const tsr_mask *m, tsr_error *err) { (void)pl; (void)m; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }

tsr_status tsr_cpu_execute(const tsr_plan *pl, const tsr_array *q, const tsr_array *k, const tsr_array *v, tsr_array *out, tsr_array *lse, tsr_error *err) { (void)pl; (void)q; (void)k; (void)v; (void)out; (void)lse; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }


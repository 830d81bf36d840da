/* runtime/problem.c: STUB, to be written by the foundation work. Returns TSR_ERR_UNSUPPORTED. */
#include "tessera.h"

tsr_status tsr_problem_check(tsr_problem *p, tsr_error *err) { (void)p; return tsr_error_set(err, TSR_ERR_UNSUPPORTED, "not implemented yet"); }


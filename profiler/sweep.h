/*
 * sweep.h: `tessera-profile sweep`, the GPU timing loop (sweep.c).
 * Not installed.
 */
#ifndef TSRP_SWEEP_H
#define TSRP_SWEEP_H

#include "bundle.h"

/* Runs the sweep command; returns the exit status. */
int tsrp_sweep_main(int argc, char **argv);
/* Whether bundle entry e is a candidate the sweep times for problem p at
 * tile tm x tn on the context's device, with gather tiles (mapping gather)
 * when gather is 1: it matches glob (NULL: any name)
 * and tsri_context_serves it for a plan without partial tiles (variants
 * without membership code are candidates too: for a plan with partial
 * tiles the upload refuses them and the candidate is recorded as
 * ineligible). */
int tsrp_sweep_candidate(const tsr_context *ctx, const tsr_bundle_entry *e, const tsr_problem *p,
                         int tm, int tn, int gather, const char *glob);

#endif

/*
 * sweep.h: `tessera-profile sweep`, the GPU timing loop (sweep.c).
 * Not installed.
 */
#ifndef TSRP_SWEEP_H
#define TSRP_SWEEP_H

/* Runs the sweep command; returns the exit status. */
int tsrp_sweep_main(int argc, char **argv);

#endif

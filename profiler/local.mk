# profiler/local.mk

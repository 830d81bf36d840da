# libtessera: the runtime library (prefix tsr_).
lib_LTLIBRARIES += libtessera.la
include_HEADERS += runtime/tessera.h
libtessera_la_CPPFLAGS = $(AM_CPPFLAGS) $(SQLITE_CFLAGS) $(JANSSON_CFLAGS)
libtessera_la_LIBADD = $(SQLITE_LIBS) $(JANSSON_LIBS)
libtessera_la_LDFLAGS = -version-info 0:0:0 -no-undefined
libtessera_la_SOURCES = \
	runtime/tessera.h runtime/plan_layout.h runtime/plan_impl.h \
	runtime/status.c runtime/abi.c runtime/files.h runtime/files.c

# foundation: .npy I/O, geometry, masks, problems, CPU reference
libtessera_la_SOURCES += \
	runtime/npy.c runtime/geom.c runtime/simd.h runtime/simd.c runtime/mask.c runtime/problem.c \
	runtime/ref.c

# planning: physical mapping, task organisation, verification, CPU executor
libtessera_la_SOURCES += \
	runtime/plan.c runtime/map.c runtime/tasks.c runtime/verify.c runtime/exec_cpu.c

# mask corpus
libtessera_la_SOURCES += \
	runtime/corpus_impl.h runtime/corpus.c runtime/corpus_families.c runtime/corpus_synth.c

# GPU: driver loading, bundles, launches
libtessera_la_SOURCES += \
	runtime/variant.h runtime/variant.c runtime/bundle.h runtime/bundle.c \
	runtime/cuda_impl.h runtime/cuda.c runtime/context_impl.h runtime/context.c runtime/gpu.c

# GPU planning: device planner host side (kernels: templates/plan_gpu.cuh)
libtessera_la_SOURCES += runtime/gpuplan.c

# lookup database and plan selection
libtessera_la_SOURCES += \
	runtime/db.c runtime/features.c runtime/select_impl.h runtime/select.c
nodist_libtessera_la_SOURCES = db/embedded.c


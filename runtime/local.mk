# libtessera: the runtime library (prefix tsr_; its internals tsri_).
lib_LTLIBRARIES += libtessera.la
include_HEADERS += runtime/tessera.h
libtessera_la_CPPFLAGS = $(AM_CPPFLAGS) $(SQLITE_CFLAGS) $(JANSSON_CFLAGS)
libtessera_la_LIBADD = $(SQLITE_LIBS) $(JANSSON_LIBS)
libtessera_la_LDFLAGS = -version-info 0:0:0 -no-undefined -export-symbols libtessera.sym
libtessera_la_SOURCES = \
	runtime/tessera.h runtime/plan_layout.h runtime/plan_impl.h \
	runtime/status.c runtime/abi.c runtime/files.h runtime/files.c

# foundation: .npy I/O, geometry, masks, problems, CPU reference
libtessera_la_SOURCES += \
	runtime/npy.c runtime/geom.c runtime/simd.h runtime/simd.c runtime/mask.c runtime/problem.c \
	runtime/ref.c

# planning: physical mapping, task organisation, verification, CPU executor
libtessera_la_SOURCES += \
	runtime/plan.c runtime/map.c runtime/tasks.c runtime/verify.c runtime/exec_cpu.c \
	runtime/fp8.h runtime/fp8.c

# GPU: driver loading, bundles, launches
libtessera_la_SOURCES += \
	runtime/variant.h runtime/variant.c runtime/bundle.h runtime/bundle.c \
	runtime/cuda_impl.h runtime/cuda.c runtime/context_impl.h runtime/context.c runtime/gpu.c

# GPU planning: device planner host side (kernels: templates/plan_gpu.cuh)
libtessera_la_SOURCES += runtime/gpuplan.c

# mask producers' fused stages (kernels: templates/produce_gpu.cuh, in the planner module)
libtessera_la_SOURCES += runtime/produce.c

# lookup database and plan selection
libtessera_la_SOURCES += \
	runtime/db_impl.h runtime/db.c runtime/features.c runtime/select_impl.h runtime/select.c
nodist_libtessera_la_SOURCES = db/embedded.c

# libtessera.so exports exactly the functions tessera.h declares (internals
# are named tsri_ and stay local to the library; the tools and tests link
# the static archive, which has them all).  The list is read from the
# preprocessed header, where only declarations remain, and libtool turns it
# into a version script; tests/exports.sh compares the result with nm -D.
EXTRA_libtessera_la_DEPENDENCIES = libtessera.sym
CLEANFILES += libtessera.sym libtessera.sym.tmp
libtessera.sym: $(srcdir)/runtime/tessera.h $(srcdir)/runtime/local.mk
	$(AM_V_GEN)$(CPP) -P $(srcdir)/runtime/tessera.h | grep -o 'tsr_[A-Za-z0-9_]* *(' | \
	  sed 's/ *($$//' | LC_ALL=C sort -u > $@.tmp && test -s $@.tmp && mv $@.tmp $@


# Tests: one Check suite per module (check_<module>), shell tests for the
# commands, and GPU tests that exit 77 (skip) where no GPU is present.
TESTS_ENVIRONMENT = \
	TSR_TOP_SRCDIR='$(abs_top_srcdir)' TSR_TOP_BUILDDIR='$(abs_top_builddir)'; \
	export TSR_TOP_SRCDIR TSR_TOP_BUILDDIR;
TSR_CHECK_INCS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
TSR_CHECK_DEPS = $(TSR_LIBS) $(CHECK_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
EXTRA_DIST += tests/util.h

# foundation

# planning

# corpus

# gpu and generator
# check_gen: variant names, catalog parsing and pruning, the built bundle's
# registry (every catalog variant compiled for every target it fits).
check_PROGRAMS += tests/check_gen
TESTS += tests/check_gen
tests_check_gen_SOURCES = tests/check_gen.c gen/catalog.c gen/catalog.h
tests_check_gen_CPPFLAGS = $(TSR_CHECK_INCS) -I$(top_srcdir)/gen
tests_check_gen_LDADD = $(TSR_CHECK_DEPS)
tests_check_gen_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
# gen-sass.sh: the cubins use the intended instructions (cuobjdump).
TESTS += tests/gen-sass.sh
EXTRA_DIST += tests/gen-sass.sh
# gpu_attn: plain C (no Check: the GPU machine lacks it); exits 77 without
# a GPU.  Run on the device by scripts/device-check.
check_PROGRAMS += tests/gpu_attn
TESTS += tests/gpu_attn
tests_gpu_attn_SOURCES = tests/gpu_attn.c
tests_gpu_attn_LDADD = $(TSR_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
tests_gpu_attn_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

# database and selection


# Tests: one Check suite per module (check_<module>), shell tests for the
# commands, and GPU tests that exit 77 (skip) where no GPU is present.
TESTS_ENVIRONMENT = \
	TSR_TOP_SRCDIR='$(abs_top_srcdir)' TSR_TOP_BUILDDIR='$(abs_top_builddir)'; \
	TSR_CC='$(CC)'; export TSR_TOP_SRCDIR TSR_TOP_BUILDDIR TSR_CC;
TSR_CHECK_INCS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests -I$(top_srcdir)/profiler $(CHECK_CFLAGS) \
	$(JANSSON_CFLAGS)
TSR_CHECK_DEPS = $(TSR_LIBS) $(CHECK_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
# The tools' code (profiler/tools.h): the corpus, and the profiler with its
# database writers; tests of either link these before TSR_CHECK_DEPS.
TSR_CORPUS_LIB = profiler/libtsrcorpus.a
TSR_PROFILE_LIBS = profiler/libtsrprofile.a profiler/libtsrcorpus.a
EXTRA_DIST += tests/util.h
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = $(SHELL)

# The tree: libtessera.so exports exactly tessera.h's functions, and every
# other global of libtessera.a is a tsri_ internal (exports.sh, nm -D and nm
# against the compiler's reading of the header); runtime/
# includes no tools header, and tessera.h names no SQLite (layout.sh).
TESTS += tests/exports.sh tests/layout.sh
EXTRA_DIST += tests/exports.sh tests/layout.sh

# files: output transactions and input checks (runtime/files.h)
check_PROGRAMS += tests/check_files
TESTS += tests/check_files
tests_check_files_SOURCES = tests/check_files.c tests/util.h
tests_check_files_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_files_LDADD = $(TSR_CHECK_DEPS)
tests_check_files_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

# foundation
check_PROGRAMS += tests/check_npy tests/check_geom tests/check_mask tests/check_problem \
	tests/check_ref
TESTS += tests/check_npy tests/check_geom tests/check_mask tests/check_problem tests/check_ref
tests_check_npy_SOURCES = tests/check_npy.c tests/util.h
tests_check_npy_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_npy_LDADD = $(TSR_CHECK_DEPS)
tests_check_npy_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_geom_SOURCES = tests/check_geom.c tests/util.h
tests_check_geom_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_geom_LDADD = $(TSR_CHECK_DEPS)
tests_check_geom_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_mask_SOURCES = tests/check_mask.c tests/util.h
tests_check_mask_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_mask_LDADD = $(TSR_CHECK_DEPS)
tests_check_mask_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_problem_SOURCES = tests/check_problem.c tests/util.h
tests_check_problem_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_problem_LDADD = $(TSR_CHECK_DEPS)
tests_check_problem_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_ref_SOURCES = tests/check_ref.c tests/util.h
tests_check_ref_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_ref_LDADD = $(TSR_CHECK_DEPS)
tests_check_ref_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
# tsr_abi_sizeof, what the Python binding checks its struct copies against
check_PROGRAMS += tests/check_abi
TESTS += tests/check_abi
tests_check_abi_SOURCES = tests/check_abi.c
tests_check_abi_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_abi_LDADD = $(TSR_CHECK_DEPS)
tests_check_abi_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
# the mask producers' argument checks (no device needed)
check_PROGRAMS += tests/check_produce
TESTS += tests/check_produce
tests_check_produce_SOURCES = tests/check_produce.c tests/util.h
tests_check_produce_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_produce_LDADD = $(TSR_CHECK_DEPS)
tests_check_produce_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
check_PROGRAMS += tests/cli_attn
tests_cli_attn_SOURCES = tests/cli_attn.c tests/util.h
tests_cli_attn_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests $(JANSSON_CFLAGS)
tests_cli_attn_LDADD = $(TSR_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
tests_cli_attn_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
TESTS += tests/cli-run.sh tests/cli-demo.sh tests/man-options.sh
EXTRA_DIST += tests/cli-run.sh tests/cli-demo.sh tests/man-options.sh
# tessera-test: the command with its test hooks (cli/cli.h, tests/cli_hooks.c:
# TSR_TEST_DAMAGE damages a plan or an output), which the shipped command
# never has; plan.sh and cli-demo.sh see the failures through it.
# no-test-hooks.sh: the shipped binaries hold no test hook.
check_PROGRAMS += tests/tessera-test
tests_tessera_test_SOURCES = $(tessera_SOURCES) tests/cli_hooks.c
tests_tessera_test_CPPFLAGS = $(tessera_CPPFLAGS) -DTSR_CLI_TEST_HOOKS
tests_tessera_test_LDADD = $(tessera_LDADD)
tests_tessera_test_LDFLAGS = $(tessera_LDFLAGS)
TESTS += tests/no-test-hooks.sh
EXTRA_DIST += tests/no-test-hooks.sh
# cli-nan.sh: a NaN in q gives NaN in that row of --out (ref and cpu backends).
TESTS += tests/cli-nan.sh
EXTRA_DIST += tests/cli-nan.sh
TESTS += tests/cli-run.sh tests/cli-demo.sh tests/man-options.sh tests/limits.sh
EXTRA_DIST += tests/cli-run.sh tests/cli-demo.sh tests/man-options.sh tests/limits.sh

# planning
EXTRA_DIST += tests/plan_cases.h tests/plan.sh
check_PROGRAMS += tests/check_map tests/check_plan tests/check_exec tests/plan_masks
tests_plan_masks_SOURCES = tests/plan_masks.c tests/util.h
tests_plan_masks_CPPFLAGS = $(TSR_CHECK_INCS)
tests_plan_masks_LDADD = $(TSR_LIBS)
tests_plan_masks_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
TESTS += tests/check_map tests/check_plan tests/check_exec tests/plan.sh
tests_check_map_SOURCES = tests/check_map.c tests/plan_cases.h tests/util.h
tests_check_map_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_map_LDADD = $(TSR_CHECK_DEPS)
tests_check_map_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_plan_SOURCES = tests/check_plan.c tests/plan_cases.h tests/util.h
tests_check_plan_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_plan_LDADD = $(TSR_CORPUS_LIB) $(TSR_CHECK_DEPS)
tests_check_plan_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_exec_SOURCES = tests/check_exec.c tests/plan_cases.h tests/util.h
tests_check_exec_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_exec_LDADD = $(TSR_CORPUS_LIB) $(TSR_CHECK_DEPS)
tests_check_exec_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

# FP8 emulation (issue 18): e4m3, the scheme, accuracy on the corpus's q/k
check_PROGRAMS += tests/check_fp8
TESTS += tests/check_fp8
tests_check_fp8_SOURCES = tests/check_fp8.c tests/util.h
tests_check_fp8_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_fp8_LDADD = $(TSR_CORPUS_LIB) $(TSR_CHECK_DEPS)
tests_check_fp8_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

# corpus
check_PROGRAMS += tests/check_corpus
TESTS += tests/check_corpus
tests_check_corpus_SOURCES = tests/check_corpus.c tests/util.h
tests_check_corpus_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_corpus_LDADD = $(TSR_CORPUS_LIB) $(TSR_CHECK_DEPS)
tests_check_corpus_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
TESTS += tests/corpus-cli.sh
EXTRA_DIST += tests/corpus-cli.sh

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
TESTS += tests/gen-sass.sh tests/gen-errors.sh
EXTRA_DIST += tests/gen-sass.sh tests/gen-errors.sh
# gen-constants.sh: every template constant comes from tessera-gen, one name
# each, none defaulted.
TESTS += tests/gen-constants.sh
EXTRA_DIST += tests/gen-constants.sh
# gpu_attn: plain C (no Check: the GPU machine lacks it); exits 77 without
# a GPU.  Run on the device by scripts/device-check.
check_PROGRAMS += tests/gpu_attn
TESTS += tests/gpu_attn
tests_gpu_attn_SOURCES = tests/gpu_attn.c
tests_gpu_attn_LDADD = $(TSR_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
tests_gpu_attn_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

# database and selection
check_PROGRAMS += tests/check_db
TESTS += tests/check_db
tests_check_db_SOURCES = tests/check_db.c
tests_check_db_CPPFLAGS = $(TSR_CHECK_INCS) $(SQLITE_CFLAGS)
tests_check_db_LDADD = $(TSR_PROFILE_LIBS) $(TSR_CHECK_DEPS)
tests_check_db_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
# One suite per module: features (runtime/features.c), selection
# (select.c), the context's selection, the profiler's build, its report and
# its PNG writer; the timings-database fixture they share is
# tests/select_fixture.h, the PNG decoder tests/png_read.h.
TSR_SELECT_SUITES = tests/check_features tests/check_select tests/check_context \
	tests/check_build tests/check_report tests/check_png
check_PROGRAMS += $(TSR_SELECT_SUITES)
TESTS += $(TSR_SELECT_SUITES)
EXTRA_DIST += tests/select_fixture.h tests/png_read.h
TSR_SELECT_INCS = $(TSR_CHECK_INCS) $(SQLITE_CFLAGS) $(ZLIB_CFLAGS)
TSR_SELECT_DEPS = $(TSR_PROFILE_LIBS) $(TSR_CHECK_DEPS) $(ZLIB_LIBS)
tests_check_features_SOURCES = tests/check_features.c tests/util.h
tests_check_features_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_features_LDADD = $(TSR_CHECK_DEPS)
tests_check_features_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_select_SOURCES = tests/check_select.c tests/select_fixture.h
tests_check_select_CPPFLAGS = $(TSR_SELECT_INCS)
tests_check_select_LDADD = $(TSR_SELECT_DEPS)
tests_check_select_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
# the context's selection (context.c) and the rules it shares
tests_check_context_SOURCES = tests/check_context.c tests/select_fixture.h tests/util.h
tests_check_context_CPPFLAGS = $(TSR_SELECT_INCS)
tests_check_context_LDADD = $(TSR_SELECT_DEPS)
tests_check_context_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_build_SOURCES = tests/check_build.c tests/select_fixture.h
tests_check_build_CPPFLAGS = $(TSR_SELECT_INCS)
tests_check_build_LDADD = $(TSR_SELECT_DEPS)
tests_check_build_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_report_SOURCES = tests/check_report.c tests/select_fixture.h tests/png_read.h
tests_check_report_CPPFLAGS = $(TSR_SELECT_INCS)
tests_check_report_LDADD = $(TSR_SELECT_DEPS)
tests_check_report_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
tests_check_png_SOURCES = tests/check_png.c tests/png_read.h
tests_check_png_CPPFLAGS = $(TSR_SELECT_INCS)
tests_check_png_LDADD = $(TSR_SELECT_DEPS)
tests_check_png_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
TESTS += tests/profile_cli.sh
EXTRA_DIST += tests/profile_cli.sh
# lookup-tables.sh: db/h200.sql, db/h100.sql and the published selection figures reproduce
# from the recorded timings (db/h200-timings.sql.gz, db/h100-timings.sql.gz).
TESTS += tests/lookup-tables.sh
EXTRA_DIST += tests/lookup-tables.sh

# GPU planning: gpu_plan is plain C (no Check on the GPU machine) and exits
# 77 without a GPU; gpuplan-bundle.sh checks on any machine that every cubin
# of the bundle carries the planning kernels (compiled for every target).
check_PROGRAMS += tests/gpu_plan
TESTS += tests/gpu_plan tests/gpuplan-bundle.sh
EXTRA_DIST += tests/gpuplan-bundle.sh
tests_gpu_plan_SOURCES = tests/gpu_plan.c
tests_gpu_plan_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/profiler
tests_gpu_plan_LDADD = $(TSR_CORPUS_LIB) $(TSR_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
tests_gpu_plan_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
# check_gpuplan: the GPU planner's host-side checks on a host-only context
# and the row-by-row plan comparison gpu_plan uses (tests/plan_rows.h).
check_PROGRAMS += tests/check_gpuplan
TESTS += tests/check_gpuplan
EXTRA_DIST += tests/plan_rows.h
tests_check_gpuplan_SOURCES = tests/check_gpuplan.c tests/plan_rows.h tests/util.h
tests_check_gpuplan_CPPFLAGS = $(TSR_CHECK_INCS)
tests_check_gpuplan_LDADD = $(TSR_CHECK_DEPS)
tests_check_gpuplan_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
# request_time: a timing driver for the request path's phases (not a test;
# notes/varplan.md), host-only without a GPU.
check_PROGRAMS += tests/request_time
tests_request_time_SOURCES = tests/request_time.c
tests_request_time_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/profiler
tests_request_time_LDADD = $(TSR_CORPUS_LIB) $(TSR_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
tests_request_time_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
TESTS += tests/gpu_profile.sh
EXTRA_DIST += tests/gpu_profile.sh

# tests/device/: runs for the GPU machine behind one runner (its README);
# not part of make check.
EXTRA_DIST += tests/device/README tests/device/run tests/device/plan_probe.cu \
	tests/device/varplan_bench.py tests/device/sdpa_dense.py tests/device/pipeline_bench.py \
	tests/device/sm80_emu.sh tests/device/sm80_emu.h tests/device/sm80_emu_rt.cc \
	tests/device/sm80_emu_variant.cc tests/device/sm80_emu_planner.cc \
	tests/device/torch_op.py tests/device/dist_one.py tests/device/dist_bench.py \
	tests/device/methods_bench.py tests/device/split_ab.py tests/device/producer_stages.py \
	tests/device/producer_ab.py tests/device/svg_profile.py \
	tests/device/dyn_ab.py tests/device/ring_handoff.cu tests/device/run-i20.sh \
	tests/device/steady_ab.py tests/device/ncu_one.py tests/device/ncu_stalls.py \
	tests/device/table_ab.py
# bench-timing.sh: the timing helper of scripts/bench-peers and split_ab.py
# under a fake clock (no GPU; the device runs above use it).
TESTS += tests/bench-timing.sh
EXTRA_DIST += tests/bench-timing.sh tests/bench_timing.py

# python binding
TESTS += tests/python-binding.sh tests/gpu-python-leak.sh tests/python-cpu.sh tests/python-op.sh \
	tests/python-dist.sh
EXTRA_DIST += tests/python-binding.sh tests/gpu-python-leak.sh tests/gpu_python_leak.py \
	tests/python-env.sh tests/python-cpu.sh tests/python_cpu.py tests/python_ref.py \
	tests/python-op.sh tests/python_op.py tests/python-dist.sh tests/python_dist.py
# python-diffusers.sh: tessera.diffusers on small Wan, HunyuanVideo and
# CogVideoX transformers against their own attention under the same mask.
TESTS += tests/python-diffusers.sh
EXTRA_DIST += tests/python-diffusers.sh tests/python_diffusers.py
# tessera.methods against the corpus generator's rules (methods_rule: the
# C rules as a command, fed the same pooled inputs).
check_PROGRAMS += tests/methods_rule
tests_methods_rule_SOURCES = tests/methods_rule.c
tests_methods_rule_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/profiler
tests_methods_rule_LDADD = $(TSR_CORPUS_LIB) $(TSR_LIBS) $(JANSSON_LIBS)
tests_methods_rule_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)
TESTS += tests/python-methods.sh
EXTRA_DIST += tests/python-methods.sh tests/python_methods.py

# pip-install.sh: a wheel of the package (pyproject.toml, setup.py) over
# this build folder, installed into a temporary folder and run from there.
TESTS += tests/pip-install.sh
EXTRA_DIST += tests/pip-install.sh pyproject.toml setup.py

# internal-symbols.sh: no non-static function without a caller in another
# file (nm over the libraries, the commands and the tests).
TESTS += tests/internal-symbols.sh
EXTRA_DIST += tests/internal-symbols.sh

# func-length.sh: no function of runtime/, gen/, profiler/, cli/ or the cut templates longer than
# 150 lines (they are cut at the seams their comments mark; this keeps them cut).
TESTS += tests/func-length.sh
EXTRA_DIST += tests/func-length.sh

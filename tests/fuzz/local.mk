# tests/fuzz/local.mk: libFuzzer harnesses (configure --enable-fuzzing;
# tests/fuzz/README.md).  make fuzz-smoke runs each for FUZZ_SMOKE_SECONDS
# (the CI step), make fuzz for FUZZ_SECONDS; both need only the harnesses,
# the tools that make their seeds and tessera.db, never the kernel bundle.
TSR_FUZZ_NAMES = npy mask corpus db_file db_sql catalog
EXTRA_DIST += tests/fuzz/README.md tests/fuzz/run.sh tests/fuzz/npy.dict tests/fuzz/sql.dict \
	tests/fuzz/catalog.dict notes/fuzz.md

if FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz_npy tests/fuzz/fuzz_mask tests/fuzz/fuzz_corpus \
	tests/fuzz/fuzz_db_file tests/fuzz/fuzz_db_sql tests/fuzz/fuzz_catalog tests/fuzz/mkseeds
endif
TSR_FUZZ_INCS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests -I$(top_srcdir)/tests/fuzz -I$(top_srcdir)/profiler \
	$(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
TSR_FUZZ_DEPS = $(TSR_PROFILE_LIBS) $(TSR_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
TSR_FUZZ_LINK = $(AM_LDFLAGS) $(FUZZ_LDFLAGS) $(TSR_STATIC_LINK)
tests_fuzz_fuzz_npy_SOURCES = tests/fuzz/fuzz_npy.c tests/fuzz/fuzz.h tests/util.h
tests_fuzz_fuzz_npy_CPPFLAGS = $(TSR_FUZZ_INCS)
tests_fuzz_fuzz_npy_LDADD = $(TSR_FUZZ_DEPS)
tests_fuzz_fuzz_npy_LDFLAGS = $(TSR_FUZZ_LINK)
tests_fuzz_fuzz_mask_SOURCES = tests/fuzz/fuzz_mask.c tests/fuzz/fuzz.h tests/util.h
tests_fuzz_fuzz_mask_CPPFLAGS = $(TSR_FUZZ_INCS)
tests_fuzz_fuzz_mask_LDADD = $(TSR_FUZZ_DEPS)
tests_fuzz_fuzz_mask_LDFLAGS = $(TSR_FUZZ_LINK)
tests_fuzz_fuzz_corpus_SOURCES = tests/fuzz/fuzz_corpus.c tests/fuzz/fuzz.h tests/util.h
tests_fuzz_fuzz_corpus_CPPFLAGS = $(TSR_FUZZ_INCS)
tests_fuzz_fuzz_corpus_LDADD = $(TSR_FUZZ_DEPS)
tests_fuzz_fuzz_corpus_LDFLAGS = $(TSR_FUZZ_LINK)
tests_fuzz_fuzz_db_file_SOURCES = tests/fuzz/fuzz_db_file.c tests/fuzz/fuzz_db.h tests/fuzz/fuzz.h \
	tests/util.h
tests_fuzz_fuzz_db_file_CPPFLAGS = $(TSR_FUZZ_INCS)
tests_fuzz_fuzz_db_file_LDADD = $(TSR_FUZZ_DEPS)
tests_fuzz_fuzz_db_file_LDFLAGS = $(TSR_FUZZ_LINK)
tests_fuzz_fuzz_db_sql_SOURCES = tests/fuzz/fuzz_db_sql.c tests/fuzz/fuzz_db.h tests/fuzz/fuzz.h \
	tests/util.h
tests_fuzz_fuzz_db_sql_CPPFLAGS = $(TSR_FUZZ_INCS)
tests_fuzz_fuzz_db_sql_LDADD = $(TSR_FUZZ_DEPS)
tests_fuzz_fuzz_db_sql_LDFLAGS = $(TSR_FUZZ_LINK)
# fuzz_catalog builds the catalog parser in, as tessera-gen does.
tests_fuzz_fuzz_catalog_SOURCES = tests/fuzz/fuzz_catalog.c tests/fuzz/fuzz.h tests/util.h \
	gen/catalog.c gen/catalog.h
tests_fuzz_fuzz_catalog_CPPFLAGS = $(TSR_FUZZ_INCS) -I$(top_srcdir)/gen
tests_fuzz_fuzz_catalog_LDADD = $(TSR_FUZZ_DEPS)
tests_fuzz_fuzz_catalog_LDFLAGS = $(TSR_FUZZ_LINK)
# mkseeds: an ordinary program (no libFuzzer) that writes the seeds.
tests_fuzz_mkseeds_SOURCES = tests/fuzz/mkseeds.c tests/fuzz/fuzz.h tests/util.h \
	gen/catalog.c gen/catalog.h
tests_fuzz_mkseeds_CPPFLAGS = $(TSR_FUZZ_INCS) -I$(top_srcdir)/gen
tests_fuzz_mkseeds_LDADD = $(TSR_FUZZ_DEPS)
tests_fuzz_mkseeds_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

# Seeds and dictionaries, in fuzz/ of the build tree: the demo corpus of
# `tessera corpus generate`, what mkseeds writes, the shipped tessera.db,
# db/h200.sql whole and a statement a file; dictionaries are the committed
# token lists plus names read from the files the harnesses parse.
TSR_FUZZ_TOOLS = tests/fuzz/mkseeds$(EXEEXT) tessera$(EXEEXT) tessera.db
fuzz/seeds.stamp: $(TSR_FUZZ_TOOLS) $(srcdir)/db/schema.sql $(srcdir)/db/h200.sql \
		$(srcdir)/gen/catalog.json $(srcdir)/tests/fuzz/npy.dict $(srcdir)/tests/fuzz/sql.dict \
		$(srcdir)/tests/fuzz/catalog.dict $(srcdir)/tests/fuzz/local.mk
	$(AM_V_GEN)rm -rf fuzz/seeds fuzz/dict fuzz/bundle fuzz/demo-corpus fuzz/demo-corpus.log && \
	for n in $(TSR_FUZZ_NAMES); do $(MKDIR_P) fuzz/seeds/$$n || exit 1; done && \
	$(MKDIR_P) fuzz/dict fuzz/bundle && \
	{ ./tessera$(EXEEXT) corpus generate --preset demo --out fuzz/demo-corpus --jobs 1 \
	    >fuzz/demo-corpus.log 2>&1 || { cat fuzz/demo-corpus.log; exit 1; }; } && \
	tests/fuzz/mkseeds npy fuzz/seeds/npy && \
	cp fuzz/demo-corpus/masks/*.npy fuzz/demo-corpus/geom/*.npy fuzz/seeds/npy/ && \
	tests/fuzz/mkseeds mask fuzz/demo-corpus fuzz/seeds/mask && \
	tests/fuzz/mkseeds corpus fuzz/demo-corpus fuzz/seeds/corpus && \
	tests/fuzz/mkseeds db fuzz/seeds/db_file && \
	cp tessera.db fuzz/seeds/db_file/h200.db && \
	cp $(srcdir)/db/h200.sql fuzz/seeds/db_sql/h200.sql && \
	$(AWK) '/^INSERT/ { n++; print > ("fuzz/seeds/db_sql/stmt-" n ".sql") }' $(srcdir)/db/h200.sql && \
	tests/fuzz/mkseeds registry $(srcdir)/gen/catalog.json fuzz/bundle && \
	tests/fuzz/mkseeds catalog $(srcdir)/gen/catalog.json fuzz/seeds/catalog && \
	{ sed -n -e 's/^CREATE TABLE \([a-z_]*\).*/"\1"/p' -e 's/^  \([a-z_]*\) [A-Z].*/"\1"/p' \
	    $(srcdir)/db/schema.sql | sort -u; } > fuzz/dict/schema.names && \
	cp $(srcdir)/tests/fuzz/npy.dict fuzz/dict/npy.dict && \
	cp $(srcdir)/tests/fuzz/npy.dict fuzz/dict/mask.dict && \
	{ cat $(srcdir)/tests/fuzz/npy.dict; \
	  echo '"\x0a#@file masks/"'; echo '"\x0a#@file geom/"'; \
	  sed -n 's/^ *"\([a-z_]*\)": .*/"\\"\1\\": "/p' fuzz/demo-corpus/manifest.json | sort -u; \
	  sed -n 's/^ *"[a-z_]*": \("[a-z][a-z0-9.x-]*"\),*$$/\1/p' fuzz/demo-corpus/manifest.json | \
	    sort -u | sed 's/"/\\"/g; s/.*/"&"/'; } > fuzz/dict/corpus.dict && \
	cat $(srcdir)/tests/fuzz/sql.dict fuzz/dict/schema.names > fuzz/dict/db_sql.dict && \
	cat $(srcdir)/tests/fuzz/sql.dict fuzz/dict/schema.names > fuzz/dict/db_file.dict && \
	cp $(srcdir)/tests/fuzz/catalog.dict fuzz/dict/catalog.dict && \
	touch $@
fuzz-seeds: fuzz/seeds.stamp

# make fuzz-smoke: every harness for FUZZ_SMOKE_SECONDS, one after another
# (about 2 minutes in all, inside the CI budget); make fuzz: FUZZ_SECONDS
# each (make -j2 fuzz runs two at a time; make fuzz-NAME runs one).
FUZZ_SMOKE_SECONDS = 20
FUZZ_SECONDS = 600
TSR_FUZZ_RUN = $(SHELL) $(srcdir)/tests/fuzz/run.sh
if FUZZING
TSR_FUZZ_PROGS = tests/fuzz/fuzz_npy$(EXEEXT) tests/fuzz/fuzz_mask$(EXEEXT) \
	tests/fuzz/fuzz_corpus$(EXEEXT) tests/fuzz/fuzz_db_file$(EXEEXT) tests/fuzz/fuzz_db_sql$(EXEEXT) \
	tests/fuzz/fuzz_catalog$(EXEEXT)
fuzz-smoke: $(TSR_FUZZ_PROGS) fuzz/seeds.stamp
	@for n in $(TSR_FUZZ_NAMES); do $(TSR_FUZZ_RUN) $$n $(FUZZ_SMOKE_SECONDS) || exit 1; done
fuzz: fuzz-npy fuzz-mask fuzz-corpus fuzz-db_file fuzz-db_sql fuzz-catalog
fuzz-npy: tests/fuzz/fuzz_npy$(EXEEXT) fuzz/seeds.stamp
	@$(TSR_FUZZ_RUN) npy $(FUZZ_SECONDS)
fuzz-mask: tests/fuzz/fuzz_mask$(EXEEXT) fuzz/seeds.stamp
	@$(TSR_FUZZ_RUN) mask $(FUZZ_SECONDS)
fuzz-corpus: tests/fuzz/fuzz_corpus$(EXEEXT) fuzz/seeds.stamp
	@$(TSR_FUZZ_RUN) corpus $(FUZZ_SECONDS)
fuzz-db_file: tests/fuzz/fuzz_db_file$(EXEEXT) fuzz/seeds.stamp
	@$(TSR_FUZZ_RUN) db_file $(FUZZ_SECONDS)
fuzz-db_sql: tests/fuzz/fuzz_db_sql$(EXEEXT) fuzz/seeds.stamp
	@$(TSR_FUZZ_RUN) db_sql $(FUZZ_SECONDS)
fuzz-catalog: tests/fuzz/fuzz_catalog$(EXEEXT) fuzz/seeds.stamp
	@$(TSR_FUZZ_RUN) catalog $(FUZZ_SECONDS)
else
fuzz-smoke fuzz fuzz-npy fuzz-mask fuzz-corpus fuzz-db_file fuzz-db_sql fuzz-catalog:
	@echo "the fuzz harnesses need a build configured with --enable-fuzzing (clang)" >&2; exit 1
endif
fuzz-clean:
	rm -rf fuzz
clean-local: fuzz-clean
.PHONY: fuzz fuzz-smoke fuzz-seeds fuzz-clean fuzz-npy fuzz-mask fuzz-corpus fuzz-db_file fuzz-db_sql \
	fuzz-catalog

# profiler/local.mk: tessera-profile, the per-GPU sweep and table builder,
# and the tools' code that no product links (profiler/tools.h).  Its modules
# form small static libraries so the CLI and the tests link the same code.
noinst_LIBRARIES = profiler/libtsrprofile.a profiler/libtsrcorpus.a
profiler_libtsrprofile_a_SOURCES = profiler/profile.h profiler/sweep.h \
	profiler/build.c profiler/report.c profiler/png.c profiler/sweep.c \
	profiler/help.c profiler/tools.h profiler/db_write.c
profiler_libtsrprofile_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/profiler $(SQLITE_CFLAGS) \
	$(JANSSON_CFLAGS) $(ZLIB_CFLAGS)

# The mask corpus: synthesis by each method's published rule, and the
# reader.  Corpora are the profiler's input (a sweep times their masks) and
# the demo's; the runtime never reads one, so the corpus lives here, linked
# by tessera-profile, the `tessera` command and the tests.
profiler_libtsrcorpus_a_SOURCES = profiler/tools.h profiler/corpus_impl.h profiler/corpus.c \
	profiler/corpus_families.c profiler/corpus_synth.c
profiler_libtsrcorpus_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/profiler $(JANSSON_CFLAGS)

bin_PROGRAMS += tessera-profile
tessera_profile_SOURCES = profiler/tessera-profile.c
tessera_profile_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/profiler $(SQLITE_CFLAGS)
tessera_profile_LDADD = profiler/libtsrprofile.a profiler/libtsrcorpus.a $(TSR_LIBS) $(SQLITE_LIBS) $(JANSSON_LIBS) \
	$(ZLIB_LIBS)
tessera_profile_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

# The installed default database, built from the same SQL text that is
# compiled into the library.
nodist_pkgdata_DATA += tessera.db
CLEANFILES += tessera.db
tessera.db: tessera-profile$(EXEEXT) $(srcdir)/db/schema.sql $(srcdir)/db/h200.sql $(srcdir)/db/h100.sql
	$(AM_V_GEN)rm -f $@ && ./tessera-profile$(EXEEXT) init --db $@

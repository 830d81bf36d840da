# profiler/local.mk: tessera-profile, the per-GPU sweep and table builder.
# Its modules form a small static library so the tests link the same code.
noinst_LIBRARIES = profiler/libtsrprofile.a
profiler_libtsrprofile_a_SOURCES = profiler/profile.h profiler/sweep.h \
	profiler/build.c profiler/report.c profiler/png.c profiler/sweep.c \
	profiler/help.c
profiler_libtsrprofile_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/profiler $(SQLITE_CFLAGS) \
	$(JANSSON_CFLAGS) $(ZLIB_CFLAGS)

bin_PROGRAMS += tessera-profile
tessera_profile_SOURCES = profiler/tessera-profile.c
tessera_profile_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/profiler $(SQLITE_CFLAGS)
tessera_profile_LDADD = profiler/libtsrprofile.a $(TSR_LIBS) $(SQLITE_LIBS) $(JANSSON_LIBS) \
	$(ZLIB_LIBS)
tessera_profile_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

# The installed default database, built from the same SQL text that is
# compiled into the library.
nodist_pkgdata_DATA += tessera.db
CLEANFILES += tessera.db
tessera.db: tessera-profile$(EXEEXT) $(srcdir)/db/schema.sql $(srcdir)/db/h200.sql
	$(AM_V_GEN)rm -f $@ && ./tessera-profile$(EXEEXT) init --db $@

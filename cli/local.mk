# The `tessera` command: one file per subcommand.
bin_PROGRAMS += tessera
tessera_SOURCES = cli/tessera.c cli/cli.h cli/options.c cli/blocks.c cli/explain.c \
	cli/cmd_run.c cli/cmd_plan.c cli/cmd_corpus.c cli/cmd_db.c cli/cmd_demo.c
tessera_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/cli -I$(top_srcdir)/profiler $(JANSSON_CFLAGS) \
	$(SQLITE_CFLAGS)
tessera_LDADD = profiler/libtsrcorpus.a $(TSR_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
tessera_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

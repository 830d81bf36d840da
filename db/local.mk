# db/local.mk: the schema and shipped lookup tables.  Both are SQL text,
# compiled into libtessera as C strings (db/embedded.c, generated in the
# build tree) and built into an installed tessera.db by tessera-profile.
EXTRA_DIST += db/schema.sql db/h200.sql db/h100.sql
# Every timing behind db/h200.sql and db/h100.sql (gzipped SQL;
# tests/lookup-tables.sh).
EXTRA_DIST += db/h200-timings.sql.gz db/h100-timings.sql.gz
dist_pkgdata_DATA += db/schema.sql db/h200.sql db/h100.sql
BUILT_SOURCES += db/embedded.c
CLEANFILES += db/embedded.c db/embedded.c.tmp

# Each line becomes a C string literal: backslashes and quotes escaped, a
# newline kept, so the embedded text is byte for byte the file's.  The
# tables in GPU-name order, as tessera-profile export writes them, so that
# an export of the embedded default loads back with the same row ids.
TSR_SQL_TO_C = sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/'
db/embedded.c: $(srcdir)/db/schema.sql $(srcdir)/db/h200.sql $(srcdir)/db/h100.sql $(srcdir)/db/local.mk
	$(AM_V_GEN)$(MKDIR_P) db && { \
	  echo '/* Generated from db/schema.sql, db/h200.sql and db/h100.sql by db/local.mk: do not edit. */'; \
	  echo 'extern const char tsri_db_embedded_schema[];'; \
	  echo 'extern const char tsri_db_embedded_tables[];'; \
	  echo 'const char tsri_db_embedded_schema[] = ""'; \
	  $(TSR_SQL_TO_C) $(srcdir)/db/schema.sql; \
	  echo ';'; \
	  echo 'const char tsri_db_embedded_tables[] = ""'; \
	  $(TSR_SQL_TO_C) $(srcdir)/db/h100.sql; \
	  $(TSR_SQL_TO_C) $(srcdir)/db/h200.sql; \
	  echo ';'; \
	} > $@.tmp && mv $@.tmp $@

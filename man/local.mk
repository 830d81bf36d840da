# man/local.mk: roff pages shipped in the tarball.
dist_man_MANS += man/tessera.1 man/tessera-run.1 man/tessera-demo.1 man/tessera.3
dist_man_MANS += man/tessera-plan.1
dist_man_MANS += man/tessera-corpus.1
dist_man_MANS += man/tessera-profile.1 man/tessera-db.1
dist_man_MANS += man/tessera-gen.1
# The tools' API (profiler/tools.h) is not installed, so neither is its page:
# read it with man -l man/tessera-tools.3.
EXTRA_DIST += man/tessera-tools.3

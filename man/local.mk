# man/local.mk: roff pages shipped in the tarball.
dist_man_MANS += man/tessera-profile.1

# man/local.mk: roff pages shipped in the tarball.

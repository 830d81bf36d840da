# gen/: tessera-gen, the kernel generator (links NVRTC; libtessera never
# does), its catalog, and the bundle it writes into the build tree.
bin_PROGRAMS += tessera-gen
tessera_gen_SOURCES = gen/tessera-gen.c gen/catalog.c gen/catalog.h
tessera_gen_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/gen $(JANSSON_CFLAGS)
tessera_gen_LDADD = $(TSR_LIBS) $(NVRTC_LIBS) $(JANSSON_LIBS) $(SQLITE_LIBS)
tessera_gen_LDFLAGS = $(AM_LDFLAGS) $(TSR_STATIC_LINK)

# Kernel templates: hand-written bodies instantiated with constants only.
TSR_TEMPLATES = \
	$(srcdir)/templates/tsr_common.cuh \
	$(srcdir)/templates/merge.cuh \
	$(srcdir)/templates/attn_sm80.cuh \
	$(srcdir)/templates/attn_sm90.cuh \
	$(srcdir)/templates/attn_sm90_fp8.cuh \
	$(srcdir)/templates/attn_sm90_fp8_rule.cuh \
	$(srcdir)/templates/plan_gpu.cuh \
	$(srcdir)/templates/produce_gpu.cuh \
	$(srcdir)/templates/produce_sampled.cuh \
	$(srcdir)/templates/sm90_sync.cuh
EXTRA_DIST += gen/catalog.json \
	templates/tsr_common.cuh templates/merge.cuh templates/attn_sm80.cuh \
	templates/attn_sm90.cuh templates/attn_sm90_fp8.cuh templates/attn_sm90_fp8_rule.cuh \
	templates/plan_gpu.cuh \
	templates/produce_gpu.cuh templates/produce_sampled.cuh templates/sm90_sync.cuh

# The bundle: build/bundle/registry.json + build/bundle/<arch>/<variant>.cubin.
# tessera-gen recompiles only what changed (hash per cubin), so this rule
# is cheap to rerun; $TESSERA_GEN_CACHE shares compiles between build trees.
TSR_BUNDLE_ARCHS = sm_80 sm_89 sm_90a sm_100a sm_120
bundle/registry.json: tessera-gen$(EXEEXT) $(srcdir)/gen/catalog.json $(TSR_TEMPLATES) \
		$(srcdir)/runtime/plan_layout.h
	$(AM_V_GEN)./tessera-gen$(EXEEXT) --catalog $(srcdir)/gen/catalog.json \
	  --templates $(srcdir)/templates --layout $(srcdir)/runtime/plan_layout.h \
	  --out bundle -j 2

all-local: gen-bundle
gen-bundle: bundle/registry.json
install-data-local: gen-install-bundle
gen-install-bundle: bundle/registry.json
	@$(NORMAL_INSTALL)
	$(MKDIR_P) '$(DESTDIR)$(pkglibdir)/bundle'
	$(INSTALL_DATA) bundle/registry.json '$(DESTDIR)$(pkglibdir)/bundle/registry.json'
	@for a in $(TSR_BUNDLE_ARCHS); do \
	  $(MKDIR_P) "$(DESTDIR)$(pkglibdir)/bundle/$$a" || exit 1; \
	  for f in bundle/$$a/*.cubin; do \
	    test -f "$$f" || continue; \
	    $(INSTALL_DATA) "$$f" "$(DESTDIR)$(pkglibdir)/bundle/$$a/" || exit 1; \
	  done; \
	done
uninstall-local: gen-uninstall-bundle
gen-uninstall-bundle:
	rm -rf '$(DESTDIR)$(pkglibdir)/bundle'
clean-local: gen-clean-bundle
gen-clean-bundle:
	rm -rf bundle
.PHONY: gen-bundle gen-install-bundle gen-uninstall-bundle gen-clean-bundle

# head-bce: see %reldir%/README.md. A head plugin (ABI 1.5); its numerics are
# head-sampled-softmax's (HEADS_SOURCES, plugins/head-sampled-softmax/local.mk).
plugin_LTLIBRARIES += %reldir%/head-bce.la
%canon_reldir%_head_bce_la_SOURCES = %reldir%/plugin.c $(HEADS_SOURCES)
%canon_reldir%_head_bce_la_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS) $(HEADS_CPPFLAGS)
%canon_reldir%_head_bce_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_head_bce_la_LIBADD = $(BLAS_LIBS) -lm
EXTRA_DIST += %reldir%/README.md

# libgrmcore (convenience library shared by grmhost and the tests) and grmhost. The
# library is the engine; the command-line front end (argument parsing, usage texts, the
# generate/convert/inspect/launch commands) is grmhost's own and no test links it: the
# tests reach those commands by running grmhost.
noinst_LTLIBRARIES += libgrmcore.la
libgrmcore_la_SOURCES = \
	%reldir%/grm_core.h %reldir%/error.c %reldir%/log.c %reldir%/pool.c %reldir%/host.c \
	%reldir%/loader.c %reldir%/config.c %reldir%/params.c \
	%reldir%/pipeline.h %reldir%/pipeline.c %reldir%/data.c %reldir%/metrics.c \
	%reldir%/train.h %reldir%/train.c %reldir%/batch.c %reldir%/plan.c \
	%reldir%/stream.c %reldir%/prefetch.c %reldir%/sparse_step.c %reldir%/dense_stack.c \
	%reldir%/lr.c \
	%reldir%/eval.c %reldir%/checkpoint.h %reldir%/checkpoint.c %reldir%/report.c %reldir%/backend.h \
	%reldir%/backend.c %reldir%/backend_ref.c %reldir%/head.h %reldir%/head.c \
	%reldir%/grmcol.h %reldir%/grmcol.c %reldir%/recommend.c \
	%reldir%/delta.c
libgrmcore_la_SOURCES += %reldir%/sparse.h %reldir%/sparse.c
libgrmcore_la_CPPFLAGS = $(AM_CPPFLAGS) $(INIH_CFLAGS) $(UV_CFLAGS) $(ZSTD_CFLAGS) $(BLAS_CFLAGS) \
	-DGRM_BUILD_DIR='"$(abs_top_builddir)"'
libgrmcore_la_LIBADD = $(INIH_LIBS) $(UV_LIBS) $(ZSTD_LIBS) $(BLAS_LIBS) $(PTHREAD_LIBS) -lm

bin_PROGRAMS += grmhost
grmhost_SOURCES = %reldir%/main.c %reldir%/cli.h %reldir%/cli.c %reldir%/gen.h %reldir%/gen.c \
	%reldir%/convert.c %reldir%/launch.c %reldir%/plot.c %reldir%/export.c
grmhost_CPPFLAGS = $(AM_CPPFLAGS) $(ZSTD_CFLAGS) $(XXHASH_CFLAGS)
grmhost_LDADD = libgrmcore.la $(ZSTD_LIBS) -lm
libgrmcore_la_SOURCES += %reldir%/dist.h %reldir%/dist.c
libgrmcore_la_SOURCES += %reldir%/reshard.h %reldir%/reshard.c
libgrmcore_la_SOURCES += %reldir%/route.h %reldir%/route.c
libgrmcore_la_SOURCES += %reldir%/serve.c

# comm-nccl: see %reldir%/README.md. Built when configure finds NCCL (with CUDA) and MPI,
# which bootstraps the NCCL unique id. Shares comm-mpi's argument checks (comm_args.c).
EXTRA_DIST += %reldir%/README.md
if HAVE_NCCL
if HAVE_MPI
plugin_LTLIBRARIES += %reldir%/comm-nccl.la
%canon_reldir%_comm_nccl_la_SOURCES = %reldir%/plugin.c %reldir%/cn.h %reldir%/cn_nccl.c \
	plugins/comm-mpi/comm_args.h plugins/comm-mpi/comm_args.c
%canon_reldir%_comm_nccl_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/plugins/comm-mpi \
	$(CUDA_CFLAGS) $(MPI_CFLAGS)
%canon_reldir%_comm_nccl_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_comm_nccl_la_LIBADD = $(CUDA_LIBS) -lnccl $(MPI_LIBS)

# Self-checking; prints "1..0 # SKIP no CUDA device" without a GPU. On a GPU machine run
# it also under mpirun with one rank per GPU (see README.md).
check_PROGRAMS += tests/test-comm-nccl
TESTS += tests/test-comm-nccl
tests_test_comm_nccl_SOURCES = tests/test-comm-nccl.c tests/comm-checks.h
tests_test_comm_nccl_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_test_comm_nccl_LDADD = $(GRM_TEST_LIBS) $(CUDA_LIBS)
endif
endif

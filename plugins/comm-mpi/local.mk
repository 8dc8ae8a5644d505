# comm-mpi: see %reldir%/README.md. Built when configure finds Open MPI (HAVE_MPI).
EXTRA_DIST += %reldir%/README.md
if HAVE_MPI
plugin_LTLIBRARIES += %reldir%/comm-mpi.la
%canon_reldir%_comm_mpi_la_SOURCES = %reldir%/plugin.c %reldir%/cm.h %reldir%/cm_mpi.c \
	%reldir%/cm_half.c %reldir%/comm_args.h %reldir%/comm_args.c
%canon_reldir%_comm_mpi_la_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
%canon_reldir%_comm_mpi_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_comm_mpi_la_LIBADD = $(MPI_LIBS) -lm

# tests/test-comm-mpi is an MPI program; tests/test-comm-mpi.sh runs it under $(MPIRUN).
check_PROGRAMS += tests/test-comm-mpi
tests_test_comm_mpi_SOURCES = tests/test-comm-mpi.c tests/comm-checks.h
tests_test_comm_mpi_LDADD = $(GRM_TEST_LIBS)

# bench/bench_comm.py runs this driver under mpirun (make bench).
EXTRA_PROGRAMS += bench/bench-comm
GRM_BENCH_BINS += bench/bench-comm
bench_bench_comm_SOURCES = bench/bench-comm.c
bench_bench_comm_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests $(MPI_CFLAGS)
bench_bench_comm_LDADD = $(GRM_TEST_LIBS) $(MPI_LIBS)
endif
TESTS += tests/test-comm-mpi.sh
EXTRA_DIST += bench/bench_comm.py
EXTRA_DIST += tests/test-comm-mpi.sh

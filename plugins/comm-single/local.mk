# comm-single: see %reldir%/README.md. Its argument checks are comm-mpi's comm_args.c (built
# here whether or not MPI is), so every communicator refuses a bad call with the same words.
plugin_LTLIBRARIES += %reldir%/comm-single.la
%canon_reldir%_comm_single_la_SOURCES = %reldir%/plugin.c plugins/comm-mpi/comm_args.h \
	plugins/comm-mpi/comm_args.c
%canon_reldir%_comm_single_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/plugins/comm-mpi
%canon_reldir%_comm_single_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_comm_single_la_LIBADD =
EXTRA_DIST += %reldir%/README.md

check_PROGRAMS += tests/test-comm-single
TESTS += tests/test-comm-single
tests_test_comm_single_SOURCES = tests/test-comm-single.c
tests_test_comm_single_LDADD = $(GRM_TEST_LIBS)

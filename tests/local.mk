# Test support: TAP header, the plugin harness, the tally script.
check_LTLIBRARIES += tests/libharness.la
tests_libharness_la_SOURCES = tests/harness.c tests/harness.h tests/tap.h
tests_libharness_la_LDFLAGS = -rpath /nowhere
GRM_TEST_LIBS = tests/libharness.la libgrmcore.la
EXTRA_DIST += tests/tally.sh

# Loader fixtures: tests/plugins/fixture.c built with one broken rule each.
FIXTURE_LDFLAGS = -module -avoid-version -shared -rpath /nowhere -Wl,--no-undefined
check_LTLIBRARIES += tests/plugins/fix-good.la
tests_plugins_fix_good_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_good_la_CPPFLAGS = $(AM_CPPFLAGS)
tests_plugins_fix_good_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-old-minor.la
tests_plugins_fix_old_minor_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_old_minor_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_MINOR=0 -DFIX_OPS_10 -DFIX_NAME='"reader-old"'
tests_plugins_fix_old_minor_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-major.la
tests_plugins_fix_major_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_major_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_MAJOR=2 -DFIX_MINOR=0
tests_plugins_fix_major_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-new-minor.la
tests_plugins_fix_new_minor_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_new_minor_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_MINOR=99
tests_plugins_fix_new_minor_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-no-entry.la
tests_plugins_fix_no_entry_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_no_entry_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_NO_ENTRY
tests_plugins_fix_no_entry_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-null-list.la
tests_plugins_fix_null_list_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_null_list_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_NULL_LIST
tests_plugins_fix_null_list_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-short-info.la
tests_plugins_fix_short_info_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_short_info_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_SHORT_INFO
tests_plugins_fix_short_info_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-bad-kind.la
tests_plugins_fix_bad_kind_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_bad_kind_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_KIND=42
tests_plugins_fix_bad_kind_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-short-ops.la
tests_plugins_fix_short_ops_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_short_ops_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_SHORT_OPS
tests_plugins_fix_short_ops_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-null-op.la
tests_plugins_fix_null_op_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_null_op_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_NULL_OP
tests_plugins_fix_null_op_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-bad-default.la
tests_plugins_fix_bad_default_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_bad_default_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIX_BAD_DEFAULT
tests_plugins_fix_bad_default_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_LTLIBRARIES += tests/plugins/fix-dup.la
tests_plugins_fix_dup_la_SOURCES = tests/plugins/fixture.c
tests_plugins_fix_dup_la_CPPFLAGS = $(AM_CPPFLAGS)
tests_plugins_fix_dup_la_LDFLAGS = $(FIXTURE_LDFLAGS)

check_PROGRAMS += tests/test-loader tests/test-config tests/test-metrics
TESTS += tests/test-loader tests/test-config tests/test-metrics
tests_test_loader_SOURCES = tests/test-loader.c
tests_test_loader_LDADD = $(GRM_TEST_LIBS)
tests_test_config_SOURCES = tests/test-config.c
tests_test_config_LDADD = $(GRM_TEST_LIBS)
tests_test_metrics_SOURCES = tests/test-metrics.c
tests_test_metrics_LDADD = $(GRM_TEST_LIBS)

# A retrieval head of ABI 1.4 (a dense block with the loss ops) over head-sampled-softmax's
# numerics: the host's compatibility path (tests/test-train-heads.sh).
check_LTLIBRARIES += tests/plugins/dense-legacy-ssm.la
tests_plugins_dense_legacy_ssm_la_SOURCES = tests/plugins/legacy-ssm.c $(HEADS_SOURCES)
tests_plugins_dense_legacy_ssm_la_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS) $(HEADS_CPPFLAGS)
tests_plugins_dense_legacy_ssm_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_plugins_dense_legacy_ssm_la_LIBADD = $(BLAS_LIBS) -lm

# A dense block that writes NaN in evaluation (tests/test-train-errors.sh).
check_LTLIBRARIES += tests/plugins/dense-nan-eval.la
tests_plugins_dense_nan_eval_la_SOURCES = tests/plugins/nan-eval.c
tests_plugins_dense_nan_eval_la_CPPFLAGS = $(AM_CPPFLAGS)
tests_plugins_dense_nan_eval_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_plugins_dense_nan_eval_la_LIBADD = -lm

# ckpt-safetensors: see %reldir%/README.md
plugin_LTLIBRARIES += %reldir%/ckpt-safetensors.la
%canon_reldir%_ckpt_safetensors_la_SOURCES = %reldir%/plugin.c %reldir%/st.h \
	%reldir%/st_parse.c %reldir%/st_file.c %reldir%/st_save.c $(CKPT_FILE_SOURCES)
%canon_reldir%_ckpt_safetensors_la_CPPFLAGS = $(AM_CPPFLAGS) $(CKPT_FILE_CPPFLAGS) \
	$(XXHASH_CFLAGS)
%canon_reldir%_ckpt_safetensors_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_ckpt_safetensors_la_LIBADD = $(XXHASH_LIBS)
EXTRA_DIST += %reldir%/README.md

check_PROGRAMS += tests/test-ckpt-safetensors
TESTS += tests/test-ckpt-safetensors
tests_test_ckpt_safetensors_SOURCES = tests/test-ckpt-safetensors.c tests/ckpt_rows.h
tests_test_ckpt_safetensors_CPPFLAGS = $(AM_CPPFLAGS) $(XXHASH_CFLAGS)
tests_test_ckpt_safetensors_LDADD = $(GRM_TEST_LIBS) $(XXHASH_LIBS)

# Swapping [checkpoint] plugin between ckpt-grm and ckpt-safetensors resumes the same run.
TESTS += tests/test-ckpt-swap.sh
EXTRA_DIST += tests/test-ckpt-swap.sh

# grmhost export / recommend, read back by Python's safetensors (share/export_topk.py).
TESTS += tests/test-export.sh
EXTRA_DIST += tests/test-export.sh share/export_topk.py

# Incremental export ([export] every = N, core/delta.c) and `grmhost export --since`.
TESTS += tests/test-export-delta.sh
EXTRA_DIST += tests/test-export-delta.sh

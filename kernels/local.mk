# kernels/: the CUDA backend of the hot path (STYLE.md §2, §9); see %reldir%/README.md.
# Built only when configure found nvcc and cuBLAS (HAVE_CUDA). The .cu files are compiled by
# nvcc through libtool (a user suffix rule: automake lets .cu files stand in _SOURCES once a
# .cu.lo rule exists) into one convenience library, kernels/libgrmcuda.la, which plugins
# with a CUDA path and the tests link together with $(CUDA_LIBS).
EXTRA_DIST += %reldir%/README.md %reldir%/grm_cuda.h %reldir%/cuda_common.cuh \
	%reldir%/cuda_util.cu %reldir%/embedding_ops.cu %reldir%/segment_unique.cu \
	%reldir%/row_opt.cu %reldir%/hash_table.cu %reldir%/hstu_attn.cu \
	%reldir%/emb_cache.cu bench/bench_cuda.py bench/cuda_attn_peer.py

if HAVE_CUDA
# sm_80 (A100) and sm_90 (H100/H200) SASS, plus compute_90 PTX for later GPUs to JIT.
GRM_NVCC_GENCODE = -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
# libtool reads -Xcompiler itself (and moves its argument), so nvcc's host-compiler flags
# go in the --compiler-options= form.
GRM_NVCCFLAGS = -std=c++17 -O3 $(GRM_NVCC_GENCODE) --Werror=all-warnings \
	--compiler-options=-fPIC,-fvisibility=hidden,-Wall,-Wextra,-Wno-unused-parameter \
	-I$(top_srcdir)/sdk/include -I$(top_srcdir)/kernels -I$(top_builddir) $(CUDA_CFLAGS) \
	$(NVCCFLAGS)

# libtool's compile mode would add -fPIC -DPIC for the CC tag, which nvcc refuses;
# -prefer-non-pic keeps it out and GRM_NVCCFLAGS passes -fPIC to the host compiler.
.cu.lo:
	$(AM_V_CC)$(LIBTOOL) $(AM_V_lt) --tag=CC --mode=compile $(NVCC) $(GRM_NVCCFLAGS) \
		-prefer-non-pic -c -o $@ $<

noinst_LTLIBRARIES += %reldir%/libgrmcuda.la
%canon_reldir%_libgrmcuda_la_SOURCES = %reldir%/grm_cuda.h %reldir%/cuda_common.cuh \
	%reldir%/cuda_util.cu %reldir%/embedding_ops.cu %reldir%/segment_unique.cu \
	%reldir%/row_opt.cu %reldir%/hash_table.cu %reldir%/hstu_attn.cu \
	%reldir%/emb_cache.cu
%canon_reldir%_libgrmcuda_la_LIBADD = $(CUDA_LIBS) -lstdc++

# The cuda backend (backend_cuda.c + libgrmcuda.la) as a module that core/backend.c dlopens
# on the first device = cuda:N, so grmhost loads the CUDA runtime and cuBLAS only then. It
# links like a plugin (no libgrmcore; --no-undefined) and exports grm_cuda_backend_entry
# alone (the regex also hides the std:: template code the .cu files instantiate, which
# libstdc++'s headers give default visibility). Installed in $(pkglibdir) = $(libdir)/grm,
# the parent of the plugin directory, where core/loader.c's grm__module_path looks
# (kernels/.libs in the build tree).
pkglib_LTLIBRARIES += %reldir%/grm-cuda.la
%canon_reldir%_grm_cuda_la_SOURCES = %reldir%/backend_cuda.c
%canon_reldir%_grm_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS) -I$(top_srcdir)/kernels
%canon_reldir%_grm_cuda_la_LDFLAGS = $(PLUGIN_LDFLAGS) -export-symbols-regex '^grm_cuda_backend_entry$$'
%canon_reldir%_grm_cuda_la_LIBADD = %reldir%/libgrmcuda.la $(CUDA_LIBS) -lstdc++
# nvcc writes no dependency files here: rebuild every kernel when a shared header moves.
$(%canon_reldir%_libgrmcuda_la_OBJECTS): %reldir%/grm_cuda.h %reldir%/cuda_common.cuh

# Tests: plain C against kernels/grm_cuda.h; each SKIPs its device cases without a GPU.
GRM_CUDA_TEST_LIBS = %reldir%/libgrmcuda.la $(CUDA_LIBS) $(GRM_TEST_LIBS) -lm
GRM_CUDA_TEST_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kernels -I$(top_srcdir)/tests
check_PROGRAMS += tests/test-cuda-embedding
TESTS += tests/test-cuda-embedding
tests_test_cuda_embedding_SOURCES = tests/test-cuda-embedding.c tests/cuda-common.h
tests_test_cuda_embedding_CPPFLAGS = $(GRM_CUDA_TEST_CPPFLAGS)
tests_test_cuda_embedding_LDADD = $(GRM_CUDA_TEST_LIBS)
check_PROGRAMS += tests/test-cuda-unique
TESTS += tests/test-cuda-unique
tests_test_cuda_unique_SOURCES = tests/test-cuda-unique.c tests/cuda-common.h
tests_test_cuda_unique_CPPFLAGS = $(GRM_CUDA_TEST_CPPFLAGS)
tests_test_cuda_unique_LDADD = $(GRM_CUDA_TEST_LIBS)
check_PROGRAMS += tests/test-cuda-opt
TESTS += tests/test-cuda-opt
tests_test_cuda_opt_SOURCES = tests/test-cuda-opt.c tests/cuda-common.h
tests_test_cuda_opt_CPPFLAGS = $(GRM_CUDA_TEST_CPPFLAGS)
tests_test_cuda_opt_LDADD = $(GRM_CUDA_TEST_LIBS)
check_PROGRAMS += tests/test-cuda-hash
TESTS += tests/test-cuda-hash
tests_test_cuda_hash_SOURCES = tests/test-cuda-hash.c tests/cuda-common.h
tests_test_cuda_hash_CPPFLAGS = $(GRM_CUDA_TEST_CPPFLAGS)
tests_test_cuda_hash_LDADD = $(GRM_CUDA_TEST_LIBS)
check_PROGRAMS += tests/test-cuda-cache
TESTS += tests/test-cuda-cache
tests_test_cuda_cache_SOURCES = tests/test-cuda-cache.c tests/cuda-common.h
tests_test_cuda_cache_CPPFLAGS = $(GRM_CUDA_TEST_CPPFLAGS)
tests_test_cuda_cache_LDADD = $(GRM_CUDA_TEST_LIBS)
check_PROGRAMS += tests/test-cuda-backend
TESTS += tests/test-cuda-backend
tests_test_cuda_backend_SOURCES = tests/test-cuda-backend.c tests/cuda-common.h tests/hstu-ref.h
tests_test_cuda_backend_CPPFLAGS = $(GRM_CUDA_TEST_CPPFLAGS)
tests_test_cuda_backend_LDADD = $(GRM_CUDA_TEST_LIBS)
check_PROGRAMS += tests/test-cuda-hstu
TESTS += tests/test-cuda-hstu
tests_test_cuda_hstu_SOURCES = tests/test-cuda-hstu.c tests/cuda-common.h tests/hstu-ref.h
tests_test_cuda_hstu_CPPFLAGS = $(GRM_CUDA_TEST_CPPFLAGS)
tests_test_cuda_hstu_LDADD = $(GRM_CUDA_TEST_LIBS)

# The driver of bench/bench_cuda.py (built by `make bench` only).
EXTRA_PROGRAMS += bench/bench-cuda
GRM_BENCH_BINS += bench/bench-cuda
bench_bench_cuda_SOURCES = bench/bench-cuda.c
bench_bench_cuda_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kernels $(CUDA_CFLAGS)
bench_bench_cuda_LDADD = %reldir%/libgrmcuda.la libgrmcore.la $(CUDA_LIBS) -lm
endif

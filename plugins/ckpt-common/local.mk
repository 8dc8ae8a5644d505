# ckpt-common: no .so of its own. What every checkpoint format shares (ckpt_file.h: map a
# file read-only, write one atomically through a temporary) is compiled into ckpt-grm.so and
# ckpt-safetensors.so; each of their local.mk adds these two variables.
CKPT_FILE_SOURCES = %reldir%/ckpt_file.h %reldir%/ckpt_file.c
CKPT_FILE_CPPFLAGS = -I$(srcdir)/%reldir%

# opt-common: no .so of its own. The glue every optimizer shares (opt_glue.h: ops table,
# create/destroy, argument checks, step and row_step) is compiled into opt-adam.so,
# opt-adagrad.so and opt-sgd.so; each of their local.mk adds these two variables.
OPT_GLUE_SOURCES = %reldir%/opt_glue.h %reldir%/opt_glue.c
OPT_GLUE_CPPFLAGS = -I$(srcdir)/%reldir%

# share/: pipelines, the generated quick-start data, documentation.
pipelinesdir = $(datadir)/grm/pipelines
dist_pipelines_DATA = share/pipelines/quickstart.ini share/pipelines/ml100k-retrieval.ini \
	share/pipelines/ml100k-ranking.ini share/pipelines/ml100k-hstu-mmoe.ini \
	share/pipelines/beauty-retrieval.ini share/pipelines/beauty-sasrec.ini \
	share/pipelines/beauty-sasrec-bce.ini share/pipelines/beauty-hstu.ini \
	share/pipelines/ml100k-hstu.ini share/pipelines/ml100k-sasrec.ini \
	share/pipelines/ml1m-hstu.ini share/pipelines/retrieval-base.ini \
	share/pipelines/line-feed.ini share/pipelines/line-shop.ini \
	share/pipelines/beauty-sasrec-ce.ini share/pipelines/ml100k-hstu-ref.ini \
	share/pipelines/synthetic-tiered.ini share/pipelines/synthetic-tiered-large.ini

# The quick start trains on synthetic data written by grmhost's seeded generator: the
# same bytes on every machine, built with the program, never committed.
sampledir = $(datadir)/grm/data
sample_DATA = share/data/quickstart.tsv
# Makes the public-data inputs the other pipelines read from the user's downloads.
dist_sample_SCRIPTS = share/data/prepare.sh
share/data/quickstart.tsv: grmhost$(EXEEXT)
	$(AM_V_GEN)$(MKDIR_P) share/data && ./grmhost$(EXEEXT) generate --seed 1 --out $@
CLEANFILES += share/data/quickstart.tsv

# The grmcol columnar format, normative (core/grmcol.c, plugins/reader-grmcol).
dist_doc_DATA = share/doc/grmcol.md share/doc/export.md

# Man pages: grmhost(1) and grmhost-COMMAND(1) for each command, made from its --help by
# help2man, so the page and `grmhost COMMAND --help` never disagree; built when configure
# finds help2man, installed by `make install`.
GRM_MAN_COMMANDS = train eval check plugins generate convert inspect launch reshard plot \
	recommend export profile
if HAVE_HELP2MAN
man1_MANS = share/man/grmhost.1 $(GRM_MAN_COMMANDS:%=share/man/grmhost-%.1)
CLEANFILES += $(man1_MANS)
share/man/grmhost.1: grmhost$(EXEEXT)
	$(AM_V_GEN)$(MKDIR_P) share/man && $(HELP2MAN) --no-info --section=1 \
	    --name="train generative recommendation models from a pipeline INI file" \
	    --output=$@ ./grmhost$(EXEEXT)
# help2man names every page after the binary: the sed makes it grmhost-COMMAND.
share/man/grmhost-%.1: grmhost$(EXEEXT)
	$(AM_V_GEN)$(MKDIR_P) share/man && $(HELP2MAN) --no-info --section=1 \
	    --name="$(GRM_MAN_NAME_$*)" --help-option="$* --help" \
	    --version-option=--version ./grmhost$(EXEEXT) | \
	    sed -e 's/^\.TH GRMHOST /.TH GRMHOST-$(shell echo $* | tr a-z A-Z) /' \
	        -e 's/^grmhost \\- /grmhost-$* \\- /' >$@.tmp && mv $@.tmp $@
endif
GRM_MAN_NAME_train = train a pipeline, evaluate it and print the summary
GRM_MAN_NAME_eval = evaluate a checkpoint of a pipeline
GRM_MAN_NAME_check = validate a pipeline INI file and print its wiring and merged INI
GRM_MAN_NAME_plugins = list plugins or show one plugin's parameters
GRM_MAN_NAME_generate = write the synthetic sample data of the quick start
GRM_MAN_NAME_convert = convert delimited text to the grmcol columnar format
GRM_MAN_NAME_inspect = check a grmcol file and print its schema and sizes
GRM_MAN_NAME_launch = train a pipeline on N ranks under mpirun
GRM_MAN_NAME_reshard = rewrite a pipeline's checkpoint for another number of ranks
GRM_MAN_NAME_recommend = write the top-K items of every user from a checkpoint
GRM_MAN_NAME_export = write a checkpoint's tables, dense weights and manifest for serving
GRM_MAN_NAME_profile = choose a tiered embedding table's cache size from the data
GRM_MAN_NAME_plot = draw a run's loss and validation metrics with gnuplot

# Documentation under $(docdir) (share/doc/grm): the repository's design notes and
# README, the results page, the SDK examples (buildable from there with pkg-config) and
# every plugin's README, under the same relative paths as in the source tree.
dist_doc_DATA += README.md DESIGN.md docs/RESULTS.md docs/design-card.md docs/STYLE.md
nobase_dist_doc_DATA = sdk/examples/transform-filter/README.md \
	sdk/examples/transform-filter/Makefile sdk/examples/transform-filter/filter.c \
	sdk/examples/head-hinge/README.md sdk/examples/head-hinge/Makefile \
	sdk/examples/head-hinge/hinge.c \
	plugins/ckpt-grm/README.md plugins/ckpt-safetensors/README.md plugins/comm-mpi/README.md \
	plugins/comm-nccl/README.md \
	plugins/comm-single/README.md plugins/dense-hstu/README.md plugins/dense-mlp/README.md \
	plugins/dense-mmoe/README.md plugins/dense-sasrec/README.md plugins/emb-dynamic/README.md \
	plugins/emb-static/README.md plugins/opt-adagrad/README.md \
	plugins/opt-adam/README.md plugins/opt-sgd/README.md plugins/reader-grmcol/README.md \
	plugins/reader-text/README.md plugins/transform-basic/README.md \
	plugins/head-bce/README.md plugins/head-sampled-softmax/README.md
# tests/test-install-docs.sh checks that every plugins/*/README.md is installed.

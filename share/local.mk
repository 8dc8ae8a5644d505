# share/: pipelines, the generated quick-start data, documentation.
pipelinesdir = $(datadir)/grm/pipelines
dist_pipelines_DATA = share/pipelines/quickstart.ini share/pipelines/ml100k-retrieval.ini \
	share/pipelines/ml100k-ranking.ini share/pipelines/ml100k-hstu-mmoe.ini \
	share/pipelines/beauty-retrieval.ini share/pipelines/beauty-sasrec.ini \
	share/pipelines/beauty-sasrec-bce.ini share/pipelines/beauty-hstu.ini \
	share/pipelines/ml100k-hstu.ini share/pipelines/ml100k-sasrec.ini \
	share/pipelines/ml1m-hstu.ini

# The quick start trains on synthetic data written by grmhost's seeded generator: the
# same bytes on every machine, built with the program, never committed.
sampledir = $(datadir)/grm/data
sample_DATA = share/data/quickstart.tsv
share/data/quickstart.tsv: grmhost$(EXEEXT)
	$(AM_V_GEN)$(MKDIR_P) share/data && ./grmhost$(EXEEXT) generate --seed 1 --out $@
CLEANFILES += share/data/quickstart.tsv

# The grmcol columnar format, normative (core/grmcol.c, plugins/reader-grmcol).
dist_doc_DATA = share/doc/grmcol.md share/doc/export.md

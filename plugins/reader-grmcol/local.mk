# reader-grmcol: see %reldir%/README.md (being written)

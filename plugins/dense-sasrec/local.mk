# dense-sasrec: see %reldir%/README.md (being written)

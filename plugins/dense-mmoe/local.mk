# dense-mmoe: see %reldir%/README.md (being written)

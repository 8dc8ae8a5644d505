# dense-hstu: see %reldir%/README.md (being written)

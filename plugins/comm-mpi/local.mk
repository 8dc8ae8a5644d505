# comm-mpi: see %reldir%/README.md (being written)

# comm-nccl: see %reldir%/README.md (being written)

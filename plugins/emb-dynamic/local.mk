# emb-dynamic: see %reldir%/README.md (being written)

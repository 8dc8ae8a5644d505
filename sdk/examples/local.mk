# sdk/examples: out-of-tree example plugin (built by its own Makefile)

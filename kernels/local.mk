# kernels/: CUDA backend (being written)

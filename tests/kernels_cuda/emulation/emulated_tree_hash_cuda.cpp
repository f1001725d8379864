// kernels/tree_hash_cuda.cu built for the CPU emulation (cuda_emulation.h, force-included).
#include "kernels/tree_hash_cuda.cu"

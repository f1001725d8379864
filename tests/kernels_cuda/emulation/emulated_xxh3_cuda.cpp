// kernels/xxh3_cuda.cu built for the CPU emulation (cuda_emulation.h, force-included).
#include "kernels/xxh3_cuda.cu"

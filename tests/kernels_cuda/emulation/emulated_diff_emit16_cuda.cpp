// kernels/diff_emit16_cuda.cu built for the CPU emulation (cuda_emulation.h, force-included).
#include "kernels/diff_emit16_cuda.cu"

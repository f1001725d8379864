// kernels/patch_apply_cuda.cu built for the CPU emulation (cuda_emulation.h, force-included).
#include "kernels/patch_apply_cuda.cu"

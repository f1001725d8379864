// kernels/loco_gate_cuda.cu built for the CPU emulation (cuda_emulation.h, force-included).
#include "kernels/loco_gate_cuda.cu"

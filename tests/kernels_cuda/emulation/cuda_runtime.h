// CUDA runtime header of the CPU emulation (cuda_emulation.h): tests/kernels_cuda/emulation comes first on
// test_kernels_cuda_emulated's include path.
#pragma once
#include "cuda_emulation.h"

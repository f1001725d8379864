// The CUDA runtime as pulse's torch-free GPU code (sync/gpu_*.h, kernels/*.cu) sees it: the CUDA version
// its kernels were compiled with, the driver's, and the devices. For `pulse --version` (app/version.h) and
// bench reports; LibTorch's own view of CUDA is reported beside it there.
#pragma once
#include <string>

namespace pulse::sync {

/// One line: "built with CUDA 13.0; driver CUDA 13.0; 1 device: 0 NVIDIA H200 (sm_90, 139.8 GiB)", or
/// "not built (PULSE_CUDA=OFF or no nvcc at configure time)", or the error that stopped the query (e.g.
/// "no driver"). Initializes the CUDA runtime when built with it (~0.1-0.5 s on a GPU machine). Never
/// throws. Thread-safe (the CUDA runtime's calls are).
std::string cuda_runtime_summary();

}  // namespace pulse::sync

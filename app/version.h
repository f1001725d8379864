// `pulse --version`: pulse's version and what it runs with, so that a report from another machine names its
// LibTorch and CUDA (issue 30: a pip LibTorch that crashed pulse was only found from a backtrace).
#pragma once
#include <string>

namespace pulse::app {

/// pulse's own version ("0.1").
extern const char* const kPulseVersion;

/// The `pulse --version` text, one fact a line:
///   pulse 0.1
///   LibTorch 2.6.0 (headers), library /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.2.6
///   LibTorch CUDA: built with CUDA 12.4; available, 1 device   (or: this LibTorch was built without CUDA)
///   CUDA kernels: built with CUDA 13.0; driver CUDA 13.0; 1 device: 0 NVIDIA H200 (sm_90, 139.8 GiB)
/// Cheap: no tensor is made; CUDA is initialized only where LibTorch or the kernels have it. Never throws.
std::string version_text();

}  // namespace pulse::app

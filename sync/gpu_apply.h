// apply_patch for weights that live on a GPU: the header, chunk checksums, decompression and index
// validation run on the host as in apply_patch (sync/patch_apply.cpp, FORMAT.md "Apply"); the tensor
// hashes (before and after), the scatter with its undo and the rollback run on the device
// (kernels/xxh3_cuda.h, kernels/patch_apply_cuda.h, which validates the indices once more before any
// write). Bitmap and dense tensors are turned into varint-gap form on the host first. The same patch
// leaves the same bytes as apply_patch on the same weights, and any failure leaves them unchanged.
// 2-byte dtypes (BF16, F16) only. Needs a PULSE_CUDA build and a CUDA device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sync/patch.h"

struct CUstream_st;  // = cudaStream_t's pointee (cuda_runtime_api.h)

namespace pulse::sync {

/// One writable 2-byte tensor on the current CUDA device.
struct DeviceMutableTensor {
  std::string name;
  DType dtype = DType::BF16;  ///< BF16 or F16
  std::vector<int64_t> shape;
  uint16_t* data = nullptr;  ///< device, numel elements
};

/// apply_patch (sync/patch.h) on device weights: validates everything, applies, verifies every target
/// hash on the device; returns true when the weights changed, false when they were already at the target.
/// Queues the device work on `stream` (nullptr = default) and returns when it is done. Throws PatchError
/// (weights unchanged) for anything apply_patch refuses, for another dtype, or when CUDA is not available;
/// std::runtime_error for a CUDA failure. Not thread safe for the same weights.
bool apply_patch_cuda(std::vector<DeviceMutableTensor>& weights, const uint8_t* data, size_t size,
                      const ApplyOptions& options, CUstream_st* stream = nullptr);

}  // namespace pulse::sync

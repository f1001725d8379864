// The encoder for weights that live on a GPU: the scan (BF16 cast of the FP32 masters, diff against the
// previous BF16 weights, compaction into the varint-gap streams) and the tensor hashes run on the device
// (kernels/diff_emit16_cuda.h, kernels/tree_hash_cuda.h); only the streams (a few bytes per change) and the
// hashes come to the host, which picks each tensor's index coding, compresses and lays out the container
// exactly as encode_patch does (sync/patch_encode.cpp, sync/FORMAT.md): for the same weights the two
// produce the same bytes. 2-byte dtypes (BF16, F16) only; anchors stay on the CPU (encode_anchor).
//
// Needs a PULSE_CUDA build and a CUDA device; otherwise the functions say so (cuda_encode_available /
// PatchError). This header has no CUDA include: the stream is CUDA's own opaque type.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sync/patch.h"

struct CUstream_st;  // = cudaStream_t's pointee (cuda_runtime_api.h)

namespace pulse::sync {

/// One 2-byte tensor on the current CUDA device.
struct DeviceTensor {
  std::string name;
  DType dtype = DType::BF16;  ///< BF16 or F16 (F16 only without masters)
  std::vector<int64_t> shape;
  /// The FP32 master weights (device, numel elements) or nullptr. Given: `weights` is overwritten with
  /// their BF16 round-to-nearest-even cast (the new version) while it is compared with the old one.
  const float* master = nullptr;
  /// Device, numel elements: the base version on entry; with `master`, the target version on return.
  uint16_t* weights = nullptr;
  /// Device, numel elements: the target version when `master` is nullptr (read only); else unused.
  const uint16_t* target = nullptr;
};

/// Whether this build has the CUDA kernels and a CUDA device is usable; `why` (optional) gets the reason
/// when not. Thread safe.
bool cuda_encode_available(std::string* why = nullptr);

/// encode_patch (sync/patch.h) of the base held in tensors[i].weights against the target (the cast of
/// tensors[i].master, or tensors[i].target), the same bytes for the same options: the base is hashed on
/// the device unless options.known_base_root / known_base_tensor_hashes (in the order of `tensors`) say
/// it (before the scans, all tensors in one batch of kernels/tree_hash_cuda.h tree_hash_cuda_many; the
/// targets likewise after them). Queues everything on `stream` (nullptr = the default stream) and returns
/// when the patch is built. Throws PatchError for another dtype, a missing pointer, repeated names, or when
/// CUDA is not available (naming why); std::runtime_error for a CUDA failure. Not thread safe for the same
/// tensors.
std::vector<uint8_t> encode_patch_cuda(const std::vector<DeviceTensor>& tensors, const PatchOptions& options,
                                       CUstream_st* stream = nullptr);

}  // namespace pulse::sync

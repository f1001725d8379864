// PULSESync encode on the GPU for run.device = cuda (issue 13): the trainer's patches are built where its
// FP32 masters live. Each publish runs sync::encode_patch_cuda (sync/gpu_encode.h): the BF16 RNE cast of
// the masters, the diff against the previous version's BF16 weights (a device copy kept here) and the
// compaction into the patch streams, all on the device; only the streams and hashes come to the host.
// The publisher's store then applies the patch to its host copy, verifying every changed tensor's hash
// (sync::VersionStore::publish_encoded), so a wrong device encode is refused, never published.
// Used only in a PULSE_CUDA build on a CUDA device (create() says why not otherwise); every other run
// encodes on the CPU from MasterAdam::bf16_views, as before.
#pragma once
#include <c10/core/Device.h>

#include <ATen/core/Tensor.h>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sync/patch.h"

namespace pulse::rl {
class MasterAdam;
}

namespace pulse::app {

/// Not thread-safe: the trainer's publishing thread only.
class GpuPatchEncoder {
 public:
  /// An encoder over `adam`'s masters (which must outlive it), or nullptr when `device` is not a CUDA
  /// device or sync::cuda_encode_available() is false; `why` (optional) then gets the reason. The base is
  /// the masters' BF16 cast as they are now (the version just published).
  static std::unique_ptr<GpuPatchEncoder> create(const c10::Device& device, rl::MasterAdam& adam,
                                                 std::string* why = nullptr);

  /// The base becomes the masters' BF16 cast as they are now: after a version published on the host
  /// (an outer round's global weights).
  void reset_base();

  /// The patch (sync::encode_patch's bytes for these options) from the base to the masters' BF16 cast,
  /// which then becomes the base. Throws sync::PatchError / std::runtime_error from encode_patch_cuda
  /// (the base is reset from the masters first, so a later publish stays consistent).
  std::vector<uint8_t> encode(const sync::PatchOptions& options);

 private:
  explicit GpuPatchEncoder(rl::MasterAdam& adam);
  rl::MasterAdam& adam_;
  std::vector<std::string> names_;  ///< adam_.names(), the order of master_tensors()
  std::vector<at::Tensor> base_;    ///< device BF16, one per master: the last published version
};

}  // namespace pulse::app

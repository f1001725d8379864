// PULSESync encode on the GPU (gpu_patch_encoder.h).
#include "app/trainer/gpu_patch_encoder.h"

#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#include <optional>
#include <stdexcept>

#include "rl/optimizer.h"
#include "sync/gpu_encode.h"

namespace pulse::app {

std::unique_ptr<GpuPatchEncoder> GpuPatchEncoder::create(const c10::Device& device, rl::MasterAdam& adam,
                                                         std::string* why) {
  if (!device.is_cuda()) {
    if (why) *why = "the masters are on " + device.str();
    return nullptr;
  }
  if (!sync::cuda_encode_available(why)) return nullptr;
  for (const auto& m : adam.master_tensors())
    if (!m.is_cuda() || m.scalar_type() != torch::kFloat32 || !m.is_contiguous()) {
      if (why) *why = "a master is not a contiguous FP32 CUDA tensor";
      return nullptr;
    }
  return std::unique_ptr<GpuPatchEncoder>(new GpuPatchEncoder(adam));
}

GpuPatchEncoder::GpuPatchEncoder(rl::MasterAdam& adam) : adam_(adam), names_(adam.names()) {
  reset_base();
}

void GpuPatchEncoder::reset_base() {
  torch::NoGradGuard no_grad;
  base_.clear();
  for (const auto& t : adam_.bf16_tensors()) base_.push_back(t.clone().contiguous());
}

std::vector<uint8_t> GpuPatchEncoder::encode(const sync::PatchOptions& options) {
  const std::vector<at::Tensor> masters = adam_.master_tensors();
  if (masters.size() != base_.size() || names_.size() != base_.size())
    throw std::logic_error("GpuPatchEncoder: the optimizer's tensors changed");
  // encode_patch_cuda works on the current CUDA device (its own CUDA runtime follows the context torch's
  // guard makes current): the masters' device, cuda:LOCAL_RANK, not device 0 for a second trainer rank.
  std::optional<c10::DeviceGuard> guard;
  if (!masters.empty()) guard.emplace(masters.front().device());
  std::vector<sync::DeviceTensor> tensors(masters.size());
  for (size_t i = 0; i < masters.size(); ++i) {
    sync::DeviceTensor& t = tensors[i];
    t.name = names_[i];
    t.dtype = sync::DType::BF16;
    t.shape = masters[i].sizes().vec();
    t.master = masters[i].data_ptr<float>();
    t.weights = static_cast<uint16_t*>(base_[i].data_ptr());  // base in, the new cast out
  }
  try {
    return sync::encode_patch_cuda(tensors, options);
  } catch (...) {
    reset_base();  // partly overwritten: the next encode starts from the masters' cast
    throw;
  }
}

}  // namespace pulse::app

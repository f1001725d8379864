// A worker's model parameters at its replica's weights: patches on the device, else a full copy
// (device_weights.h).
#include "app/worker/device_weights.h"

#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#include <stdexcept>

#include "app/setup.h"
#include "sync/gpu_encode.h"
#include "sync/hash.h"
#include "sync/patch.h"

namespace pulse::app {

const char* weight_load_name(WeightLoad load) {
  switch (load) {
    case WeightLoad::None:
      return "none";
    case WeightLoad::DevicePatch:
      return "device_patch";
    case WeightLoad::FullCopy:
      return "full_copy";
  }
  return "none";
}

LoadChoice choose_weight_load(const std::string& unusable, const DeviceWeightState& state,
                              const sync::WorkerReplica::SyncStats& st, uint64_t replica_version,
                              uint64_t replica_root) {
  if (state.known && state.version == replica_version && state.root == replica_root) return {};
  auto copy = [](std::string why) { return LoadChoice{WeightLoad::FullCopy, std::move(why)}; };
  if (!unusable.empty()) return copy(unusable);
  if (!state.known) return copy("the device weights are not known to be at a version yet");
  if (st.used_anchor) return copy("the sync applied an anchor");
  if (state.version != st.from)
    return copy("the device weights are at version " + std::to_string(state.version) +
                ", the sync started at " + std::to_string(st.from));
  if (st.applied_patches.empty()) return copy("the sync handed over no patches");
  return LoadChoice{WeightLoad::DevicePatch, ""};
}

namespace {

/// Why the parameters are not contiguous BF16 tensors on one device ("" = they are).
std::string layout_problem(model::TransformerImpl& model) {
  const auto params = model.named_parameters(true);
  if (params.is_empty()) return "the model has no parameters";
  const c10::Device device = params[0].value().device();
  for (const auto& item : params) {
    const at::Tensor& p = item.value();
    if (p.device() != device)
      return "parameter '" + item.key() + "' is on " + p.device().str() + ", others on " + device.str();
    if (p.scalar_type() != torch::kBFloat16)
      return "parameter '" + item.key() + "' is " + std::string(c10::toString(p.scalar_type())) +
             ", not BFloat16";
    if (!p.is_contiguous()) return "parameter '" + item.key() + "' is not contiguous";
  }
  return "";
}

}  // namespace

std::string device_patch_unusable_reason(model::TransformerImpl& model) {
  const auto params = model.named_parameters(true);
  if (!params.is_empty() && !params[0].value().device().is_cuda())
    return "the model's parameters are on " + params[0].value().device().str();
  const std::string layout = layout_problem(model);
  if (!layout.empty()) return layout;
  std::string why;
  if (!sync::cuda_encode_available(&why)) return why;
  return "";
}

void apply_patch_on_device(std::vector<sync::DeviceMutableTensor>& params, const std::vector<uint8_t>& blob,
                           const sync::ApplyOptions& options) {
  sync::apply_patch_cuda(params, blob.data(), blob.size(), options);
}

ModelWeightLoader::ModelWeightLoader(model::TransformerImpl& model)
    : ModelWeightLoader(model, apply_patch_on_device) {
  unusable_ = device_patch_unusable_reason(model);  // CUDA parameters and kernels, beyond the layout
}

ModelWeightLoader::ModelWeightLoader(model::TransformerImpl& model, ParamPatcher patcher)
    : model_(model), patcher_(std::move(patcher)), unusable_(layout_problem(model)) {
  for (const auto& item : model.named_parameters(true)) {
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
}

void ModelWeightLoader::full_copy(const sync::WorkerReplica& replica) {
  state_ = DeviceWeightState{};  // unknown until the copy is complete
  set_model_weights(model_, replica.views());
  state_ = DeviceWeightState{true, replica.version(), replica.root_hash()};
}

ModelWeightLoader::Result ModelWeightLoader::load(const sync::WorkerReplica& replica,
                                                  const sync::WorkerReplica::SyncStats& st) {
  Result r;
  const LoadChoice choice = choose_weight_load(unusable_, state_, st, replica.version(), replica.root_hash());
  r.load = choice.load;
  r.reason = choice.reason;
  if (choice.load == WeightLoad::None) return r;
  if (choice.load == WeightLoad::DevicePatch) {
    try {
      // The data pointers are read each time (set_model_weights copies in place, but nothing here relies
      // on the storage never being replaced); the dtype/shape/contiguity checks were made once.
      std::vector<sync::DeviceMutableTensor> weights(params_.size());
      for (size_t i = 0; i < params_.size(); ++i) {
        weights[i].name = names_[i];
        weights[i].dtype = sync::DType::BF16;
        weights[i].shape = params_[i].sizes().vec();
        weights[i].data = static_cast<uint16_t*>(params_[i].data_ptr());
      }
      // apply_patch_cuda works on the current CUDA device: make it the parameters' (cuda:LOCAL_RANK).
      c10::DeviceGuard guard(params_.front().device());
      for (const auto& blob : st.applied_patches) {
        const sync::PatchInfo info = sync::inspect_patch(blob.data(), blob.size());
        sync::ApplyOptions options;
        // Known: set from the verified replica or changed only by apply_patch_cuda, which verified every
        // target hash; the patch's base root is checked against it before any write.
        options.trusted_root = state_.root;
        state_.known = false;  // a throw below leaves the weights at this patch's base: copied again
        patcher_(weights, blob, options);
        state_ = DeviceWeightState{true, info.target_version, info.target_root_hash};
        r.patch_bytes += blob.size();
      }
      if (state_.version != replica.version() || state_.root != replica.root_hash())
        throw std::logic_error("the patches end at version " + std::to_string(state_.version) + " root " +
                               sync::hash_hex(state_.root) + ", the replica is at version " +
                               std::to_string(replica.version()) + " root " +
                               sync::hash_hex(replica.root_hash()));
      return r;
    } catch (const std::exception& e) {
      r.failure = std::string("device patch apply failed: ") + e.what();
      r.load = WeightLoad::FullCopy;
      r.reason = r.failure;
    }
  }
  full_copy(replica);
  return r;
}

}  // namespace pulse::app

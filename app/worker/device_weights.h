// An inference worker's model parameters kept in step with its host replica (sync::WorkerReplica, the
// source of truth: root hash confirmation, anchors, fallback). Issue 13: when the parameters are BF16
// CUDA tensors, the patches the replica applied in a sync (SyncStats::applied_patches) are applied to them
// directly with sync::apply_patch_cuda (sync/gpu_apply.h: validated on the host, scattered and every
// target hash verified on the device, rolled back on failure), so only patch-sized bytes go host->device.
// Everything else copies the whole replica in with set_model_weights (app/setup.h): a CPU or non-BF16
// model, a build without the CUDA kernels, an anchor in the sync, device weights not known to be at the
// sync's base, or a device apply that failed. After either path the device weights are known to be at
// the replica's version and root.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "sync/gpu_apply.h"
#include "sync/worker_replica.h"

namespace pulse::app {

/// How one sync reached the model's parameters (SyncReport::load on the wire).
enum class WeightLoad {
  None,         ///< nothing to do: the parameters already hold the replica's version
  DevicePatch,  ///< the sync's patches applied on the device (sync::apply_patch_cuda)
  FullCopy      ///< every tensor copied from the replica (set_model_weights)
};

/// "none" | "device_patch" | "full_copy".
const char* weight_load_name(WeightLoad load);

/// What is known about the parameters' bytes: `known` = they are exactly the BF16 weights of `version`,
/// whose root hash (sync/hash.h) is `root`.
struct DeviceWeightState {
  bool known = false;
  uint64_t version = 0;
  uint64_t root = 0;
};

/// The path a sync takes and, for a full copy, why (for the log and SyncReport::load_reason).
struct LoadChoice {
  WeightLoad load = WeightLoad::None;
  std::string reason;  ///< "" for None and DevicePatch
};

/// The decision alone (pure, thread-safe): None when `state` already holds (replica_version,
/// replica_root); else DevicePatch when `unusable` is "" (the parameters can take device patches), the
/// state is known and at `st.from`, the sync applied no anchor and handed over its patches; else FullCopy
/// naming the first reason that failed.
LoadChoice choose_weight_load(const std::string& unusable, const DeviceWeightState& state,
                              const sync::WorkerReplica::SyncStats& st, uint64_t replica_version,
                              uint64_t replica_root);

/// Why `model`'s parameters cannot take patches on the device, or "" when they can: every parameter a
/// contiguous BF16 tensor on one CUDA device, and sync::cuda_encode_available() (a PULSE_CUDA build with
/// a usable device). E.g. "the model's parameters are on cpu", "parameter 'model.norm.weight' is Float,
/// not BFloat16". Thread-safe for a model no one is modifying.
std::string device_patch_unusable_reason(model::TransformerImpl& model);

/// Applies one patch blob in place to the parameters (their data pointers, names and shapes), with
/// sync::apply_patch_cuda's contract: validates, applies, verifies every target hash; on any failure
/// throws with the weights unchanged.
using ParamPatcher = std::function<void(std::vector<sync::DeviceMutableTensor>& params,
                                        const std::vector<uint8_t>& blob, const sync::ApplyOptions& options)>;

/// sync::apply_patch_cuda on the parameters' CUDA device (the ParamPatcher ModelWeightLoader uses).
void apply_patch_on_device(std::vector<sync::DeviceMutableTensor>& params, const std::vector<uint8_t>& blob,
                           const sync::ApplyOptions& options);

/// Keeps one model's parameters at its replica's weights. Not thread-safe: the worker's thread only; the
/// model must outlive it and nothing but this loader may write its parameters (that is what makes the
/// state known between syncs).
class ModelWeightLoader {
 public:
  /// Checks the parameters once (dtype, contiguity, device; device_patch_unusable_reason); patches go
  /// through apply_patch_on_device. The state starts unknown, so the first load is a full copy.
  explicit ModelWeightLoader(model::TransformerImpl& model);

  /// The same decisions with `patcher` applying the patches wherever the parameters are, e.g.
  /// sync::apply_patch on a CPU model's host memory (how the tests run this path without a GPU). The
  /// parameters need only be contiguous BF16 tensors on one device.
  ModelWeightLoader(model::TransformerImpl& model, ParamPatcher patcher);

  /// What one load did.
  struct Result {
    WeightLoad load = WeightLoad::None;
    std::string reason;        ///< why a full copy (choose_weight_load's, or the device apply's failure)
    std::string failure;       ///< non-empty: a device apply failed (with its error); then fully copied
    uint64_t patch_bytes = 0;  ///< bytes of the patches applied on the device
  };

  /// Brings the parameters to `replica`'s weights after `replica.sync_to` returned `st` (whose
  /// applied_patches it reads). Device path: each patch in order (the patcher, under the parameters'
  /// device guard) with ApplyOptions::trusted_root = the
  /// known root (the patch's base is checked against it; a no-op patch stays a no-op); any exception
  /// there is caught, reported in `failure`, and the full copy follows. Throws std::runtime_error from
  /// set_model_weights (the state is then unknown, so the next load copies again).
  Result load(const sync::WorkerReplica& replica, const sync::WorkerReplica::SyncStats& st);

  /// device_patch_unusable_reason at construction ("" = device patches are used when the state allows).
  const std::string& unusable_reason() const { return unusable_; }
  const DeviceWeightState& state() const { return state_; }

 private:
  void full_copy(const sync::WorkerReplica& replica);

  model::TransformerImpl& model_;
  ParamPatcher patcher_;
  std::string unusable_;
  std::vector<std::string> names_;  ///< HF parameter names (named_parameters), as set_model_weights maps
  std::vector<at::Tensor> params_;  ///< the same parameters
  DeviceWeightState state_;
};

}  // namespace pulse::app

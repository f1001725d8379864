// Adam/AdamW over FP32 master weights with a BF16 working copy (mixed precision as in Micikevicius et al.
// 2018, arXiv:1710.03740). Adam: Kingma & Ba 2015 (arXiv:1412.6980); AdamW's decoupled weight decay:
// Loshchilov & Hutter 2019 (arXiv:1711.05101).
//
// The model's parameters always hold exactly the BF16 round-to-nearest-even cast of the FP32 masters. That
// cast happens in ONE place (MasterAdam::cast_to_model) and its BF16 bit patterns (bf16_views) are the
// weights PULSESync ships; the number of BF16 elements that changed in a step is the compute-visible
// sparsity PULSE exploits.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "rl/optimizer_config.h"
#include "sync/io/tensor_view.h"

namespace torch::nn {
class Module;
}
namespace pulse::model {
class TransformerImpl;
}

namespace pulse::rl {

/// Why an optimizer step was refused.
enum class StepSkip {
  None,               ///< the step was taken
  NonFiniteGradient,  ///< the global gradient norm was NaN/Inf
  NonFiniteUpdate,    ///< finite gradient, but the update would make a master or a moment NaN/Inf
};
/// "none" | "nonfinite_gradient" | "nonfinite_update" (metrics.jsonl "refused_reason").
const char* step_skip_name(StepSkip skip);

/// What one optimizer step did.
struct OptimizerStepStats {
  double grad_norm = 0;       ///< global L2 norm of the accumulated FP32 gradient, before clipping
  double lr = 0;              ///< learning rate used
  int64_t step = 0;           ///< steps completed after this one
  uint64_t bf16_changed = 0;  ///< BF16 elements whose bit pattern changed in this step
  uint64_t elements = 0;      ///< all parameter elements
  /// The step was refused (skip_reason): masters, moments, step count and BF16 weights are bit for bit
  /// what they were, and the gradient accumulators are cleared.
  bool skipped = false;
  StepSkip skip_reason = StepSkip::None;
  /// e.g. "update makes master or Adam moment of 'b.weight' non-finite (grad norm ..., lr ...)"; "" when
  /// taken
  std::string skip_detail;
};

/// Adam/AdamW on FP32 masters of a module's parameters.
///
/// Gradients: after each micro-batch backward, call accumulate_grads() (or let step() do it for the last
/// one); it adds the model's .grad() (BF16 or FP32) into FP32 buffers and clears the model's grads, so
/// micro-batch gradients are summed in FP32 whatever the compute dtype.
/// Tied parameters (one tensor under two names) are optimized once, under the first name.
/// Not thread-safe; the module must outlive the optimizer and keep its parameter tensors.
class MasterAdam {
 public:
  /// Masters = FP32 copies of `model`'s parameters, keyed by their HF names. The model is immediately set to
  /// the BF16 cast of the masters. Throws std::invalid_argument on a bad config.
  MasterAdam(model::TransformerImpl& model, const OptimizerConfig& config);
  /// The same over any module (parameters of dtype BF16 or FP32); used by tests with small modules.
  MasterAdam(torch::nn::Module& module, const OptimizerConfig& config);
  ~MasterAdam();
  MasterAdam(const MasterAdam&) = delete;
  MasterAdam& operator=(const MasterAdam&) = delete;

  /// Called by step() with the FP32 gradient sums (sorted by name, as names()) after the last
  /// accumulate_grads() and before the norm and clip, e.g. to all-reduce them across data-parallel
  /// trainers (multi.mode = ddp). It may modify them in place.
  using GradientReducer = std::function<void(std::vector<at::Tensor>& grads)>;
  void set_gradient_reducer(GradientReducer reducer);
  /// The FP32 master tensors (sorted by name, as names()); writes change the masters, after which the
  /// caller runs cast_to_model() (DiLoCo's outer step moves the masters to the new global weights).
  std::vector<at::Tensor> master_tensors();

  /// Clears the model's grads and the FP32 accumulators.
  void zero_grad();
  /// Adds the model's current .grad() into the FP32 accumulators and clears the model's grads.
  void accumulate_grads();
  /// accumulate_grads(); global-norm clip; one Adam(W) update of the masters at lr_at_step(step_count());
  /// cast_to_model(); clears the accumulators. Nothing non-finite is ever committed: a non-finite gradient
  /// norm (NaN/Inf, or a finite gradient whose norm overflows), or an update that would put NaN/Inf into any
  /// master or moment (a huge lr, an overflowing L2/weight-decay term, a master near FLT_MAX), or an lr /
  /// weight decay / eps whose update factor is not an FP32 number, refuses the step (skip_reason):
  /// masters, moments, step count and the BF16 weights stay as they were. The update is first computed
  /// into per-tensor scratch and checked (one isfinite-all reduction per tensor, one host sync per step),
  /// then committed; the check costs one extra pass of the elementwise Adam arithmetic, no extra state.
  OptimizerStepStats step();
  /// Casts every master to BF16 (round-to-nearest-even, torch's .to(kBFloat16), which matches
  /// kernels::fp32_to_bf16_rne on all finite values), stores the bit patterns and writes them into the model.
  /// Returns how many BF16 elements changed since the previous cast.
  uint64_t cast_to_model();

  /// BF16 bit patterns of the current weights (HF names, sorted by name, dtype BF16, host memory). Views stay
  /// valid until the next step()/cast_to_model()/load_state() rewrites them (same addresses, new contents).
  /// On a GPU run the first call after a cast copies the device BF16 to the host (once per cast, not per
  /// call; a step that only encodes on the device copies nothing). Not thread safe with step().
  std::vector<sync::TensorView> bf16_views() const;
  /// The same BF16 cast on the masters' device (names() order; on a CPU run the tensors behind
  /// bf16_views). Rewritten in place by step()/cast_to_model()/load_state(): clone to keep a version.
  std::vector<at::Tensor> bf16_tensors() const;
  /// Parameter names, sorted (tied aliases excluded).
  std::vector<std::string> names() const;
  int64_t step_count() const;
  /// Total parameter elements optimized.
  uint64_t elements() const;
  const OptimizerConfig& config() const;
  /// Replaces the config (e.g. a resumed run with a new lr); validates it.
  void set_config(const OptimizerConfig& config);

  /// Writes masters, Adam moments and step to one .safetensors file (F32 tensors "master/<name>",
  /// "exp_avg/<name>", "exp_avg_sq/<name>"; metadata format/step), atomically (temp file, fsync, rename).
  void save_state(const std::string& path) const;
  /// Reads what save_state wrote and casts the masters into the model. Throws std::runtime_error naming the
  /// file and tensor on a missing tensor, a shape mismatch, a wrong format or a NaN/Inf element
  /// ("FILE: tensor 'master/NAME' element 1234 is NaN"); every tensor is checked before any is copied, so a
  /// refused file leaves the optimizer as it was.
  void load_state(const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pulse::rl

// Multi-trainer outer rounds: DiLoCo (Douillard et al. 2023, arXiv:2311.08105, Algorithm 1) and PULSELoCo
// (the PULSE paper's sparse pseudo-gradient exchange).
//
// Each of W trainers starts a round from the shared FP32 global weights g, takes H local Adam steps to its
// local weights l, then:
//   delta = g - l                                (the pseudo-gradient, FP32)
//   diloco:    avg = allreduce_sum(delta) / W    (dense FP32, Gloo ring order)
//   pulseloco: s = residual + delta; an entry FIRES where BF16_RNE(g) != BF16_RNE(g - s); fired entries
//              send their s (kernels/loco_gate.h), the residual keeps s where nothing fired and is +0
//              where it fired (error feedback); every rank's contribution (sync/loco_exchange.h: exact
//              sizes, index codecs, checksum) is validated, then summed in rank order 0..W-1 and / W.
//              multi.values = ulp: a fired entry is sent as the nearest count c of its weight's BF16 step
//              (kernels/loco_ulp.h; every rank derives the step from the shared g), the residual keeps
//              s - c * step (all of s when c = 0: deferred); counts are summed exactly in int64, then
//              avg = (float(sum c) * step + escapes) / W.
//   outer Nesterov SGD (PyTorch's SGD with nesterov=True, as DiLoCo):
//              m = mu * m + avg;  g = g - lr * (avg + mu * m)
// and every trainer moves its local weights (the Adam masters) to the new g. The outer optimizer's
// gradient is avg of this round only (nothing carries over but m and, for pulseloco, the residual).
//
// FP32 order of operations, per element: delta = g - l; s = r + delta; avg = (((+0 + c_0) + c_1) + ...) / W
// for pulseloco (c_r = rank r's sent s or nothing); m = mu * m + avg; u = avg + mu * m; g = g - lr * u.
// Error-feedback conservation: per rank, sent + residual_after == s exactly (each element goes one way).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rl/outer_config.h"

namespace pulse::rl {

class TrainerGroup;

/// What one outer round did on this rank.
struct OuterRoundStats {
  uint64_t round = 0;
  uint64_t elements = 0;        ///< parameter elements
  uint64_t fired = 0;           ///< pulseloco: entries this rank sent (diloco: all)
  uint64_t payload_bytes = 0;   ///< bytes this rank handed to the collectives this round
  uint64_t wire_bytes = 0;      ///< estimated bytes this rank put on the wire this round
  uint64_t dense_bytes = 0;     ///< 4 * elements: what one dense FP32 pseudo-gradient is
  double seconds = 0;           ///< wall time of the outer step (gate, exchange, update)
  double pseudo_grad_norm = 0;  ///< L2 norm of the averaged pseudo-gradient
};

/// The outer state of one trainer: FP32 global weights, error-feedback residual (pulseloco) and outer
/// momentum, one tensor per parameter (same order and shapes as MasterAdam::master_tensors()), FP32 on
/// the masters' device. On a GPU the PULSELoCo gate runs there (sync/gpu_loco.h) and only the fired
/// entries, the exchanged contributions and the averaged pseudo-gradient cross to and from the host;
/// DiLoCo's dense pseudo-gradient goes through NCCL when the group runs it, else through host memory.
/// Not thread-safe.
class OuterOptimizer {
 public:
  /// Global weights = a copy of `masters` (which every rank must hold identically at the start).
  OuterOptimizer(const OuterConfig& config, const std::vector<at::Tensor>& masters,
                 std::vector<std::string> names);

  /// One outer round (see the file comment): reads the local weights from `masters`, exchanges over
  /// `group`, updates g and m (and the residual), then writes g into `masters`. Throws GroupError when a
  /// peer fails, sync::LocoError when a peer's contribution is invalid, std::runtime_error (naming the
  /// tensor) when a pseudo-gradient is non-finite; on a throw the global weights are unchanged.
  OuterRoundStats round(std::vector<at::Tensor>& masters, TrainerGroup& group);

  uint64_t rounds_done() const { return rounds_; }
  const std::vector<at::Tensor>& global() const { return global_; }
  const std::vector<at::Tensor>& residual() const { return residual_; }
  const std::vector<at::Tensor>& momentum() const { return momentum_; }

  /// Writes global/residual/momentum ("global/<name>", ...) and the round count to one safetensors file,
  /// atomically. Throws std::runtime_error naming the path.
  void save(const std::string& path) const;
  /// Reads what save() wrote. Throws std::runtime_error naming the file and tensor on a mismatch.
  void load(const std::string& path);

 private:
  void pseudo_gradient_dense(const std::vector<at::Tensor>& masters, TrainerGroup& group,
                             std::vector<at::Tensor>& avg, OuterRoundStats& st);
  void pseudo_gradient_sparse(const std::vector<at::Tensor>& masters, TrainerGroup& group,
                              std::vector<at::Tensor>& avg, OuterRoundStats& st);

  OuterConfig config_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> global_, residual_, momentum_;
  uint64_t rounds_ = 0;
};

/// DDP (multi.mode = ddp): returns a MasterAdam gradient reducer that all-reduces the FP32 gradient sums
/// over `group` and divides by the world size, every step (the dense baseline of the byte comparison).
std::function<void(std::vector<at::Tensor>&)> ddp_gradient_reducer(TrainerGroup& group);

}  // namespace pulse::rl

// DiLoCo / PULSELoCo outer rounds (rl/diloco.h).
#include "rl/diloco.h"

#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>

#include "kernels/loco_gate.h"
#include "kernels/loco_ulp.h"
#include "rl/process_group.h"
#include "sync/gpu_loco.h"
#include "sync/io/safetensors.h"
#include "sync/loco_exchange.h"

namespace pulse::rl {
namespace {

constexpr const char* kOuterFormat = "pulse-outer-state-v1";

CommCounters total_of(const TrainerGroup& g) {
  return g.stats().total();
}

/// Sums `t` over the group and divides by the world size, in place: on the device through NCCL when the
/// group runs it, otherwise through a host copy over Gloo (t itself on a CPU run).
void allreduce_mean_(at::Tensor& t, TrainerGroup& group, const std::string& what) {
  const double w = group.world_size();
  if (t.is_cuda() && group.nccl_active() && t.is_contiguous()) {
    group.allreduce_sum(t, what);
    t.div_(w);
    return;
  }
  at::Tensor h = t.to(torch::kCPU).contiguous();
  group.allreduce_sum(h, what);
  h.div_(w);
  if (!h.is_same(t)) t.copy_(h);
}

/// Sum of squares of the tensors' FP32 norms, accumulated in double in tensor order: one host sync.
double squared_norm_sum(const std::vector<at::Tensor>& ts) {
  if (ts.empty()) return 0;
  std::vector<at::Tensor> norms;
  for (const auto& t : ts) norms.push_back(t.norm());
  const at::Tensor host = torch::stack(norms).to(torch::kCPU, torch::kFloat32).contiguous();
  const float* n = host.data_ptr<float>();
  double sq = 0;
  for (int64_t i = 0; i < host.numel(); ++i) sq += static_cast<double>(n[i]) * static_cast<double>(n[i]);
  return sq;
}

}  // namespace

OuterOptimizer::OuterOptimizer(const OuterConfig& config, const std::vector<at::Tensor>& masters,
                               std::vector<std::string> names)
    : config_(config), names_(std::move(names)) {
  config_.validate();
  if (names_.size() != masters.size())
    throw std::invalid_argument("OuterOptimizer: " + std::to_string(names_.size()) + " names for " +
                                std::to_string(masters.size()) + " tensors");
  torch::NoGradGuard no_grad;
  for (const auto& m : masters) {
    if (m.scalar_type() != torch::kFloat32)
      throw std::invalid_argument("OuterOptimizer: masters must be FP32");
    // The outer state lives beside the masters (on their GPU in a CUDA run): a round then moves only
    // what the exchange needs between device and host.
    global_.push_back(m.detach().contiguous().clone());
    residual_.push_back(torch::zeros_like(global_.back()));
    momentum_.push_back(torch::zeros_like(global_.back()));
  }
}

void OuterOptimizer::pseudo_gradient_dense(const std::vector<at::Tensor>& masters, TrainerGroup& group,
                                           std::vector<at::Tensor>& avg, OuterRoundStats& st) {
  for (size_t t = 0; t < global_.size(); ++t) {
    at::Tensor d = (global_[t] - masters[t]).contiguous();  // delta = g - l
    allreduce_mean_(d, group, "pseudo-gradient " + names_[t]);
    st.fired += static_cast<uint64_t>(d.numel());
    avg.push_back(d);
  }
}

void OuterOptimizer::pseudo_gradient_sparse(const std::vector<at::Tensor>& masters, TrainerGroup& group,
                                            std::vector<at::Tensor>& avg, OuterRoundStats& st) {
  // Gate + error feedback per tensor into (index, s) lists; residual updated only after the exchange
  // succeeded, so a failed round leaves the outer state as it was.
  std::vector<sync::LocoTensorSpec> table;
  std::vector<std::vector<uint32_t>> idx(global_.size());
  std::vector<std::vector<float>> val(global_.size());
  std::vector<std::vector<int32_t>> cnt(global_.size());  // ulp: the step counts sent
  const bool ulp = config_.values == sync::LocoValues::Ulp;
  std::vector<at::Tensor> new_residual;
  std::vector<sync::LocoFiredView> fired;
  std::unique_ptr<sync::LocoGateScratch> device_scratch;  // one for the round's tensors (GPU only)
  for (size_t t = 0; t < global_.size(); ++t) {
    const size_t n = static_cast<size_t>(global_[t].numel());
    at::Tensor local = masters[t].contiguous();
    at::Tensor r = residual_[t].clone();
    kernels::LocoGateResult g;
    if (r.is_cuda()) {  // gate on the device; only the fired entries come to the host
      // The gate's CUDA runtime works on the current device: make it the outer state's (cuda:LOCAL_RANK).
      const c10::DeviceGuard guard(r.device());
      if (!device_scratch) device_scratch = std::make_unique<sync::LocoGateScratch>();
      g = ulp ? sync::loco_gate_ulp_cuda_to_host(global_[t].data_ptr<float>(), local.data_ptr<float>(),
                                                 r.data_ptr<float>(), n, config_.gate_open, idx[t], val[t],
                                                 cnt[t], device_scratch.get())
              : sync::loco_gate_cuda_to_host(global_[t].data_ptr<float>(), local.data_ptr<float>(),
                                             r.data_ptr<float>(), n, config_.gate_open, idx[t], val[t],
                                             device_scratch.get());
    } else {
      idx[t].resize(n);
      val[t].resize(n);
      g = kernels::loco_gate(global_[t].data_ptr<float>(), local.data_ptr<float>(), r.data_ptr<float>(), n,
                             config_.gate_open, idx[t].data(), val[t].data());
    }
    if (g.nonfinite)
      throw std::runtime_error("rank " + std::to_string(group.rank()) + ": non-finite pseudo-gradient in '" +
                               names_[t] + "' (round " + std::to_string(rounds_) + " refused)");
    if (ulp && !r.is_cuda()) {  // counts of the BF16 steps; deferred (count 0) entries stay in r
      cnt[t].resize(g.fired);
      kernels::loco_ulp_quantize(global_[t].data_ptr<float>(), r.data_ptr<float>(), idx[t].data(),
                                 val[t].data(), cnt[t].data(), g.fired);
      g.fired = kernels::loco_ulp_compact(idx[t].data(), val[t].data(), cnt[t].data(), g.fired);
      cnt[t].resize(g.fired);
    }
    idx[t].resize(g.fired);
    val[t].resize(g.fired);
    st.fired += g.fired;
    table.push_back({names_[t], static_cast<uint64_t>(n)});
    new_residual.push_back(r);
  }
  for (size_t t = 0; t < global_.size(); ++t)
    fired.push_back({idx[t].data(), val[t].data(), idx[t].size(), ulp ? cnt[t].data() : nullptr});
  sync::LocoEncodeOptions eo;
  eo.zstd_level = config_.zstd_level;
  eo.values = config_.values;
  const int w = group.world_size();
  std::vector<uint8_t> mine = sync::encode_loco_contribution(
      static_cast<uint32_t>(group.rank()), static_cast<uint32_t>(w), rounds_, table, fired, eo);
  std::vector<std::vector<uint8_t>> all = group.exchange_bytes(mine, "PULSELoCo contribution");
  std::vector<sync::LocoBufferView> views;
  for (const auto& b : all) views.push_back({b.data(), b.size()});
  std::vector<sync::LocoSumView> sums;
  std::vector<at::Tensor> host_global;  // ulp: the steps come from the global weights, read on the host
  for (const auto& g : global_) {       // summed on the host (the contributions arrived there)
    avg.push_back(torch::zeros(g.sizes(), g.options().device(torch::kCPU)));
    if (ulp) host_global.push_back(g.to(torch::kCPU).contiguous());
    sums.push_back({avg.back().data_ptr<float>(), static_cast<uint64_t>(g.numel()),
                    ulp ? host_global.back().data_ptr<float>() : nullptr});
  }
  sync::loco_decode_and_sum(views, rounds_, table, sums, 1, config_.values);
  for (size_t t = 0; t < avg.size(); ++t) {
    avg[t].div_(static_cast<double>(w));
    if (global_[t].device() != avg[t].device()) avg[t] = avg[t].to(global_[t].device());
  }
  residual_ = std::move(new_residual);
}

OuterRoundStats OuterOptimizer::round(std::vector<at::Tensor>& masters, TrainerGroup& group) {
  const auto t0 = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  if (masters.size() != global_.size())
    throw std::invalid_argument("OuterOptimizer::round: " + std::to_string(masters.size()) +
                                " tensors, expected " + std::to_string(global_.size()));
  OuterRoundStats st;
  st.round = rounds_;
  const CommCounters before = total_of(group);
  std::vector<at::Tensor> avg;
  if (config_.mode == MultiMode::PulseLoco) {
    pseudo_gradient_sparse(masters, group, avg, st);
  } else {
    pseudo_gradient_dense(masters, group, avg, st);
  }
  // Outer Nesterov SGD on the global weights (PyTorch SGD, nesterov=True), then local := global.
  const double lr = config_.outer_lr, mu = config_.outer_momentum;
  const double sq = squared_norm_sum(avg);
  for (size_t t = 0; t < global_.size(); ++t) {
    momentum_[t].mul_(mu).add_(avg[t]);
    at::Tensor update = avg[t] + momentum_[t] * mu;
    global_[t].sub_(update * lr);
    masters[t].copy_(global_[t]);
    st.elements += static_cast<uint64_t>(global_[t].numel());
  }
  const CommCounters after = total_of(group);
  st.payload_bytes = after.payload_bytes - before.payload_bytes;
  st.wire_bytes = after.wire_bytes - before.wire_bytes;
  st.dense_bytes = 4 * st.elements;
  st.pseudo_grad_norm = std::sqrt(sq);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++rounds_;
  return st;
}

void OuterOptimizer::save(const std::string& path) const {
  std::vector<sync::TensorView> views;
  std::vector<at::Tensor> host;  // host copies of device state (the tensors themselves on a CPU run)
  host.reserve(3 * names_.size());
  auto add = [&](const std::string& prefix, const std::vector<at::Tensor>& ts) {
    for (size_t t = 0; t < ts.size(); ++t) {
      host.push_back(ts[t].to(torch::kCPU).contiguous());
      const at::Tensor& h = host.back();
      views.push_back(sync::TensorView{prefix + names_[t], sync::DType::F32, h.sizes().vec(),
                                       static_cast<const uint8_t*>(h.data_ptr()),
                                       static_cast<size_t>(h.numel()) * sizeof(float)});
    }
  };
  add("global/", global_);
  add("residual/", residual_);
  add("momentum/", momentum_);
  sync::write_safetensors(
      path, views,
      {{"format", kOuterFormat}, {"rounds", std::to_string(rounds_)}, {"mode", name_of(config_.mode)},
       {"values", sync::loco_values_name(config_.values)}});
}

void OuterOptimizer::load(const std::string& path) {
  sync::SafetensorsFile file = sync::SafetensorsFile::open(path);
  const auto& meta = file.metadata();
  auto fmt = meta.find("format");
  if (fmt == meta.end() || fmt->second != kOuterFormat)
    throw std::runtime_error(path + ": not a pulse outer state (metadata \"format\" must be \"" +
                             std::string(kOuterFormat) + "\")");
  auto rounds = meta.find("rounds");
  if (rounds == meta.end()) throw std::runtime_error(path + ": metadata \"rounds\" missing");
  std::map<std::string, const sync::TensorView*> by_name;
  for (const auto& v : file.tensors()) by_name[v.name] = &v;
  torch::NoGradGuard no_grad;
  auto load_into = [&](const std::string& prefix, std::vector<at::Tensor>& ts) {
    for (size_t t = 0; t < ts.size(); ++t) {
      auto it = by_name.find(prefix + names_[t]);
      if (it == by_name.end()) throw std::runtime_error(path + ": missing tensor " + prefix + names_[t]);
      const sync::TensorView& v = *it->second;
      if (v.dtype != sync::DType::F32 || v.shape != ts[t].sizes().vec())
        throw std::runtime_error(path + ": tensor " + prefix + names_[t] + " has the wrong dtype or shape");
      ts[t].copy_(torch::from_blob(const_cast<uint8_t*>(v.data), v.shape, torch::kFloat32));
    }
  };
  load_into("global/", global_);
  load_into("residual/", residual_);
  load_into("momentum/", momentum_);
  rounds_ = std::stoull(rounds->second);
}

std::function<void(std::vector<at::Tensor>&)> ddp_gradient_reducer(TrainerGroup& group) {
  return [&group](std::vector<at::Tensor>& grads) {
    for (auto& g : grads) allreduce_mean_(g, group, "gradient");
  };
}

}  // namespace pulse::rl

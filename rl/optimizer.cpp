// MasterAdam: Adam/AdamW over FP32 masters, BF16 working copy (rl/optimizer.h).
#include "rl/optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_set>

#include "model/transformer.h"
#include "sync/safetensors.h"

namespace pulse::rl {

namespace {
constexpr const char* kStateFormat = "pulse-master-adam-v1";

sync::TensorView f32_view(const std::string& name, const torch::Tensor& t) {
  return sync::TensorView{name, sync::DType::F32, t.sizes().vec(), static_cast<const uint8_t*>(t.data_ptr()),
                          static_cast<size_t>(t.numel()) * sizeof(float)};
}
}  // namespace

/// One optimized parameter. All FP32 state lives on the parameter's device; bf16_host mirrors bf16 in host
/// memory for bf16_views() (the same tensor on a CPU run).
struct ParamState {
  std::string name;
  torch::Tensor param;       ///< the model's parameter (BF16 or FP32), written only by cast_to_model()
  torch::Tensor master;      ///< FP32
  torch::Tensor exp_avg;     ///< FP32, Adam m
  torch::Tensor exp_avg_sq;  ///< FP32, Adam v
  torch::Tensor grad_acc;    ///< FP32 sum of micro-batch gradients
  torch::Tensor bf16;        ///< BF16 RNE cast of master
  torch::Tensor bf16_host;   ///< host copy of bf16
};

struct MasterAdam::Impl {
  OptimizerConfig cfg;
  std::vector<ParamState> params;  // sorted by name
  int64_t step = 0;
  uint64_t elements = 0;
  GradientReducer reducer;
};

MasterAdam::MasterAdam(model::TransformerImpl& model, const OptimizerConfig& config)
    : MasterAdam(static_cast<torch::nn::Module&>(model), config) {}

MasterAdam::MasterAdam(torch::nn::Module& module, const OptimizerConfig& config)
    : impl_(std::make_unique<Impl>()) {
  config.validate();
  impl_->cfg = config;
  torch::NoGradGuard no_grad;
  std::unordered_set<const void*> seen;  // tied weights: one TensorImpl under two names
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    if (p.scalar_type() != torch::kBFloat16 && p.scalar_type() != torch::kFloat32) {
      throw std::invalid_argument("MasterAdam: parameter " + item.key() + " has dtype " +
                                  std::string(c10::toString(p.scalar_type())) + "; BF16 or FP32 required");
    }
    ParamState s;
    s.name = item.key();
    s.param = p;
    s.master = p.detach().to(torch::kFloat32).contiguous().clone();
    s.exp_avg = torch::zeros_like(s.master);
    s.exp_avg_sq = torch::zeros_like(s.master);
    s.grad_acc = torch::zeros_like(s.master);
    s.bf16 = s.master.to(torch::kBFloat16).contiguous();
    s.bf16_host =
        s.bf16.is_cpu() ? s.bf16 : torch::empty(s.bf16.sizes(), s.bf16.options().device(torch::kCPU));
    impl_->elements += static_cast<uint64_t>(p.numel());
    impl_->params.push_back(std::move(s));
  }
  std::sort(impl_->params.begin(), impl_->params.end(),
            [](const ParamState& a, const ParamState& b) { return a.name < b.name; });
  cast_to_model();  // the model now holds exactly the BF16 cast of the masters
}

MasterAdam::~MasterAdam() = default;

void MasterAdam::set_gradient_reducer(GradientReducer reducer) {
  impl_->reducer = std::move(reducer);
}

std::vector<torch::Tensor> MasterAdam::master_tensors() {
  std::vector<torch::Tensor> out;
  for (auto& s : impl_->params) out.push_back(s.master);
  return out;
}

void MasterAdam::zero_grad() {
  for (auto& s : impl_->params) {
    s.param.mutable_grad() = torch::Tensor();
    s.grad_acc.zero_();
  }
}

void MasterAdam::accumulate_grads() {
  torch::NoGradGuard no_grad;
  for (auto& s : impl_->params) {
    const torch::Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    s.grad_acc.add_(g);  // BF16 -> FP32 promotion: micro-batch sums are FP32
    s.param.mutable_grad() = torch::Tensor();
  }
}

uint64_t MasterAdam::cast_to_model() {
  torch::NoGradGuard no_grad;
  int64_t changed = 0;
  for (auto& s : impl_->params) {
    // THE cast: torch's FP32 -> BF16 conversion is round-to-nearest-even (c10::BFloat16).
    torch::Tensor next = s.master.to(torch::kBFloat16);
    changed += next.view(torch::kInt16).ne(s.bf16.view(torch::kInt16)).sum().item<int64_t>();
    s.bf16.copy_(next);
    if (!s.bf16_host.is_same(s.bf16)) s.bf16_host.copy_(s.bf16);
    s.param.copy_(s.bf16);  // exact: BF16 values are representable in the FP32 or BF16 parameter
  }
  return static_cast<uint64_t>(changed);
}

OptimizerStepStats MasterAdam::step() {
  accumulate_grads();
  torch::NoGradGuard no_grad;
  Impl& m = *impl_;
  if (m.reducer) {
    std::vector<torch::Tensor> grads;
    for (auto& s : m.params) grads.push_back(s.grad_acc);
    m.reducer(grads);
  }
  const OptimizerConfig& c = m.cfg;
  OptimizerStepStats stats;
  stats.elements = m.elements;

  double sq = 0;
  for (auto& s : m.params) {
    const double n = s.grad_acc.norm().item<double>();
    sq += n * n;
  }
  stats.grad_norm = std::sqrt(sq);
  stats.lr = lr_at_step(c, m.step);
  if (!std::isfinite(stats.grad_norm)) {  // skip, as loss scalers do: never write NaN into the masters
    for (auto& s : m.params) s.grad_acc.zero_();
    stats.skipped = true;
    stats.step = m.step;
    return stats;
  }
  double clip = 1.0;
  if (c.grad_clip > 0 && stats.grad_norm > c.grad_clip) clip = c.grad_clip / (stats.grad_norm + 1e-6);

  const int64_t t = m.step + 1;
  const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(t));
  const double lr = stats.lr;
  const bool decoupled = c.name == "adamw";
  for (auto& s : m.params) {
    torch::Tensor& g = s.grad_acc;
    if (clip != 1.0) g.mul_(clip);
    if (!decoupled && c.weight_decay != 0) g.add_(s.master, c.weight_decay);  // Adam: L2 in the gradient
    s.exp_avg.mul_(c.beta1).add_(g, 1.0 - c.beta1);
    s.exp_avg_sq.mul_(c.beta2).addcmul_(g, g, 1.0 - c.beta2);
    torch::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(c.eps);
    if (decoupled && c.weight_decay != 0) s.master.mul_(1.0 - lr * c.weight_decay);
    s.master.addcdiv_(s.exp_avg, denom, -lr / bc1);
    g.zero_();
  }
  m.step = t;
  stats.step = t;
  stats.bf16_changed = cast_to_model();
  return stats;
}

std::vector<sync::TensorView> MasterAdam::bf16_views() const {
  std::vector<sync::TensorView> out;
  out.reserve(impl_->params.size());
  for (const auto& s : impl_->params) {
    out.push_back(sync::TensorView{s.name, sync::DType::BF16, s.bf16_host.sizes().vec(),
                                   static_cast<const uint8_t*>(s.bf16_host.data_ptr()),
                                   static_cast<size_t>(s.bf16_host.numel()) * 2});
  }
  return out;
}

std::vector<std::string> MasterAdam::names() const {
  std::vector<std::string> out;
  for (const auto& s : impl_->params) out.push_back(s.name);
  return out;
}

int64_t MasterAdam::step_count() const {
  return impl_->step;
}
uint64_t MasterAdam::elements() const {
  return impl_->elements;
}
const OptimizerConfig& MasterAdam::config() const {
  return impl_->cfg;
}
void MasterAdam::set_config(const OptimizerConfig& config) {
  config.validate();
  impl_->cfg = config;
}

void MasterAdam::save_state(const std::string& path) const {
  std::vector<torch::Tensor> keep;  // host copies of device tensors, alive until written
  std::vector<sync::TensorView> views;
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    torch::Tensor h = t.to(torch::kCPU).contiguous();
    keep.push_back(h);
    views.push_back(f32_view(name, h));
  };
  for (const auto& s : impl_->params) {
    add("master/" + s.name, s.master);
    add("exp_avg/" + s.name, s.exp_avg);
    add("exp_avg_sq/" + s.name, s.exp_avg_sq);
  }
  sync::write_safetensors(
      path, views,
      {{"format", kStateFormat}, {"step", std::to_string(impl_->step)}, {"optimizer", impl_->cfg.name}});
}

void MasterAdam::load_state(const std::string& path) {
  sync::SafetensorsFile file = sync::SafetensorsFile::open(path);
  const auto& meta = file.metadata();
  auto fmt = meta.find("format");
  if (fmt == meta.end() || fmt->second != kStateFormat) {
    throw std::runtime_error(path + ": not a MasterAdam state (metadata \"format\" must be \"" +
                             std::string(kStateFormat) + "\")");
  }
  auto st = meta.find("step");
  int64_t step = -1;
  try {
    if (st != meta.end()) step = std::stoll(st->second);
  } catch (const std::exception&) {
    step = -1;
  }
  if (step < 0) throw std::runtime_error(path + ": metadata \"step\" missing or not a non-negative integer");

  std::map<std::string, const sync::TensorView*> by_name;
  for (const auto& v : file.tensors()) by_name[v.name] = &v;
  const size_t expected = impl_->params.size() * 3;
  if (by_name.size() != expected) {
    throw std::runtime_error(path + ": holds " + std::to_string(by_name.size()) +
                             " tensors, the model needs " + std::to_string(expected) + " (3 per parameter)");
  }
  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& name, torch::Tensor& dst) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw std::runtime_error(path + ": missing tensor " + name);
    const sync::TensorView& v = *it->second;
    if (v.dtype != sync::DType::F32 || v.shape != dst.sizes().vec()) {
      throw std::runtime_error(path + ": tensor " + name + " has the wrong dtype or shape for this model");
    }
    torch::Tensor src = torch::from_blob(const_cast<uint8_t*>(v.data), v.shape, torch::kFloat32);
    dst.copy_(src);
  };
  for (auto& s : impl_->params) {
    load("master/" + s.name, s.master);
    load("exp_avg/" + s.name, s.exp_avg);
    load("exp_avg_sq/" + s.name, s.exp_avg_sq);
    s.grad_acc.zero_();
    s.param.mutable_grad() = torch::Tensor();
  }
  impl_->step = step;
  cast_to_model();
}

}  // namespace pulse::rl

// MasterAdam: Adam/AdamW over FP32 masters, BF16 working copy (rl/optimizer.h).
#include "rl/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include "model/checkpoint.h"
#include "model/transformer.h"
#include "sync/io/safetensors.h"

namespace pulse::rl {

namespace {
constexpr const char* kStateFormat = "pulse-master-adam-v1";

sync::TensorView f32_view(const std::string& name, const torch::Tensor& t) {
  return sync::TensorView{name, sync::DType::F32, t.sizes().vec(), static_cast<const uint8_t*>(t.data_ptr()),
                          static_cast<size_t>(t.numel()) * sizeof(float)};
}
}  // namespace

/// One optimized parameter. All FP32 state lives on the parameter's device; bf16_host mirrors bf16 in host
/// memory for bf16_views() (the same tensor on a CPU run), copied when bf16_views() is read.
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
  bool host_stale = false;  ///< some bf16_host is behind its device bf16 (refreshed by bf16_views)
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
  torch::Tensor changed;  // on the masters' device: one host sync per cast, not one per tensor
  for (auto& s : impl_->params) {
    // THE cast: torch's FP32 -> BF16 conversion is round-to-nearest-even (c10::BFloat16).
    torch::Tensor next = s.master.to(torch::kBFloat16);
    torch::Tensor ne = next.view(torch::kInt16).ne(s.bf16.view(torch::kInt16)).sum();
    changed = changed.defined() ? changed.add_(ne.to(changed.device())) : ne;
    s.bf16.copy_(next);
    s.param.copy_(s.bf16);  // exact: BF16 values are representable in the FP32 or BF16 parameter
    // A device cast's host copy is refreshed when bf16_views() is read: with patches encoded on the
    // device (app/trainer/gpu_patch_encoder.h) nothing reads it per step, and a model-sized copy is saved.
    if (!s.bf16_host.is_same(s.bf16)) impl_->host_stale = true;
  }
  return changed.defined() ? static_cast<uint64_t>(changed.item<int64_t>()) : 0;
}

namespace {

/// The hyper-parameters of one Adam(W) update, fixed for the step.
struct AdamUpdate {
  double beta1, beta2, eps, lr, weight_decay, bias_c1, bias_c2;
  bool decoupled;
};

/// One Adam(W) update of a parameter's (master, exp_avg, exp_avg_sq) by its final gradient `g` (clipped,
/// with Adam's L2 term already added). commit = false: into fresh scratch tensors, the state untouched;
/// commit = true: in place. Both run the same operations on the same inputs, so the committed values are
/// bit for bit the ones checked. Returns {master, exp_avg, exp_avg_sq} after the update.
std::array<torch::Tensor, 3> adam_update(const AdamUpdate& h, ParamState& s, const torch::Tensor& g,
                                         bool commit) {
  torch::Tensor m = commit ? s.exp_avg : s.exp_avg.clone();
  torch::Tensor v = commit ? s.exp_avg_sq : s.exp_avg_sq.clone();
  torch::Tensor w = commit ? s.master : s.master.clone();
  m.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  v.mul_(h.beta2).addcmul_(g, g, 1.0 - h.beta2);
  torch::Tensor denom = (v.sqrt() / std::sqrt(h.bias_c2)).add_(h.eps);
  if (h.decoupled && h.weight_decay != 0) w.mul_(1.0 - h.lr * h.weight_decay);
  w.addcdiv_(m, denom, -h.lr / h.bias_c1);
  return {w, m, v};
}

/// Check before committing: each parameter's update into scratch, one finite-all flag per master and
/// second moment (a non-finite first moment always reaches the master: inf/finite, inf/inf and 0*inf are
/// non-finite), gathered on the device and read with one host sync. Returns the index of the first
/// parameter whose update is not finite, or -1.
int64_t first_nonfinite_update(const AdamUpdate& h, std::vector<ParamState>& params) {
  if (params.empty()) return -1;
  std::vector<torch::Tensor> finite;
  finite.reserve(params.size());
  for (auto& s : params) {
    auto next = adam_update(h, s, s.grad_acc, /*commit=*/false);
    finite.push_back(torch::isfinite(next[0]).all().logical_and(torch::isfinite(next[2]).all()));
  }
  const torch::Tensor ok = torch::stack(finite).to(torch::kCPU);
  const bool* flags = ok.data_ptr<bool>();
  for (size_t i = 0; i < params.size(); ++i)
    if (!flags[i]) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace

const char* step_skip_name(StepSkip skip) {
  switch (skip) {
    case StepSkip::None:
      return "none";
    case StepSkip::NonFiniteGradient:
      return "nonfinite_gradient";
    case StepSkip::NonFiniteUpdate:
      return "nonfinite_update";
  }
  return "unknown";
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
  stats.step = m.step;
  auto refuse = [&](StepSkip why, std::string detail) {
    for (auto& s : m.params) s.grad_acc.zero_();
    stats.skipped = true;
    stats.skip_reason = why;
    stats.skip_detail = std::move(detail);
    return stats;
  };

  // Per-tensor FP32 norms, summed in double on the host in tensor order. One host sync for all of them
  // (one per tensor would stall a GPU step hundreds of times).
  std::vector<torch::Tensor> norms;
  norms.reserve(m.params.size());
  for (auto& s : m.params) norms.push_back(s.grad_acc.norm());
  double sq = 0;
  if (!norms.empty()) {
    const torch::Tensor host = torch::stack(norms).to(torch::kCPU, torch::kFloat32).contiguous();
    const float* n = host.data_ptr<float>();
    for (int64_t i = 0; i < host.numel(); ++i) sq += static_cast<double>(n[i]) * static_cast<double>(n[i]);
  }
  stats.grad_norm = std::sqrt(sq);
  stats.lr = lr_at_step(c, m.step);
  if (!std::isfinite(stats.grad_norm))  // skip, as loss scalers do: never write NaN into the masters
    return refuse(StepSkip::NonFiniteGradient, "gradient norm is " + std::to_string(stats.grad_norm));
  double clip = 1.0;
  if (c.grad_clip > 0 && stats.grad_norm > c.grad_clip) clip = c.grad_clip / (stats.grad_norm + 1e-6);

  const int64_t t = m.step + 1;
  AdamUpdate h{c.beta1, c.beta2, c.eps, stats.lr, c.weight_decay, 0, 0, c.name == "adamw"};
  h.bias_c1 = 1.0 - std::pow(c.beta1, static_cast<double>(t));
  h.bias_c2 = 1.0 - std::pow(c.beta2, static_cast<double>(t));
  // The scalars the FP32 kernels take must be FP32 numbers (torch refuses to narrow an overflowing one).
  for (const double x : {h.lr / h.bias_c1, h.lr * h.weight_decay, h.weight_decay, h.eps}) {
    if (!(std::abs(x) <= static_cast<double>(std::numeric_limits<float>::max())))
      return refuse(StepSkip::NonFiniteUpdate,
                    "lr " + std::to_string(h.lr) + ", weight decay " + std::to_string(h.weight_decay) +
                        ", eps " + std::to_string(h.eps) + ": an update factor overflows FP32");
  }
  // The final gradients (the accumulators are scratch: cleared whether the step is taken or not).
  for (auto& s : m.params) {
    if (clip != 1.0) s.grad_acc.mul_(clip);
    if (!h.decoupled && c.weight_decay != 0) s.grad_acc.add_(s.master, c.weight_decay);  // Adam: L2
  }
  const int64_t bad = first_nonfinite_update(h, m.params);
  if (bad >= 0)
    return refuse(StepSkip::NonFiniteUpdate,
                  "update makes master or Adam moment of '" + m.params[static_cast<size_t>(bad)].name +
                      "' non-finite (grad norm " + std::to_string(stats.grad_norm) + ", lr " +
                      std::to_string(stats.lr) + ")");
  for (auto& s : m.params) {
    adam_update(h, s, s.grad_acc, /*commit=*/true);
    s.grad_acc.zero_();
  }
  m.step = t;
  stats.step = t;
  stats.bf16_changed = cast_to_model();
  return stats;
}

std::vector<sync::TensorView> MasterAdam::bf16_views() const {
  if (impl_->host_stale) {
    for (auto& s : impl_->params)
      if (!s.bf16_host.is_same(s.bf16)) s.bf16_host.copy_(s.bf16);
    impl_->host_stale = false;
  }
  std::vector<sync::TensorView> out;
  out.reserve(impl_->params.size());
  for (const auto& s : impl_->params) {
    out.push_back(sync::TensorView{s.name, sync::DType::BF16, s.bf16_host.sizes().vec(),
                                   static_cast<const uint8_t*>(s.bf16_host.data_ptr()),
                                   static_cast<size_t>(s.bf16_host.numel()) * 2});
  }
  return out;
}

std::vector<at::Tensor> MasterAdam::bf16_tensors() const {
  std::vector<torch::Tensor> out;
  for (const auto& s : impl_->params) out.push_back(s.bf16);
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
  // Every tensor is found, shape-checked and finite-checked before any is copied: a refused file leaves
  // the optimizer as it was.
  auto find = [&](const std::string& name, const torch::Tensor& dst) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw std::runtime_error(path + ": missing tensor " + name);
    const sync::TensorView& v = *it->second;
    if (v.dtype != sync::DType::F32 || v.shape != dst.sizes().vec()) {
      throw std::runtime_error(path + ": tensor " + name + " has the wrong dtype or shape for this model");
    }
    torch::Tensor src = torch::from_blob(const_cast<uint8_t*>(v.data), v.shape, torch::kFloat32);
    model::require_finite(src, path, name);
    return src;
  };
  std::vector<std::array<torch::Tensor, 3>> sources;
  sources.reserve(impl_->params.size());
  for (auto& s : impl_->params) {
    sources.push_back({find("master/" + s.name, s.master), find("exp_avg/" + s.name, s.exp_avg),
                       find("exp_avg_sq/" + s.name, s.exp_avg_sq)});
  }
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    ParamState& s = impl_->params[i];
    s.master.copy_(sources[i][0]);
    s.exp_avg.copy_(sources[i][1]);
    s.exp_avg_sq.copy_(sources[i][2]);
    s.grad_acc.zero_();
    s.param.mutable_grad() = torch::Tensor();
  }
  impl_->step = step;
  cast_to_model();
}

}  // namespace pulse::rl

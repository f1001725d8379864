// HF checkpoint loading/saving; see checkpoint.h.
#include "model/checkpoint.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>

#include "sync/io/atomic_file.h"
#include "sync/io/safetensors.h"
#include "sync/io/tensor_view.h"

namespace pulse::model {
namespace {

torch::Dtype torch_dtype_of(sync::DType d, const std::string& path, const std::string& name) {
  switch (d) {
    case sync::DType::BF16:
      return torch::kBFloat16;
    case sync::DType::F16:
      return torch::kFloat16;
    case sync::DType::F32:
      return torch::kFloat32;
    case sync::DType::F64:
      return torch::kFloat64;
    default:
      throw std::runtime_error(path + ": tensor \"" + name + "\" has dtype " +
                               std::string(sync::dtype_name(d)) + ", expected a floating type");
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int64_t first_nonfinite(const at::Tensor& t) {
  if (!t.is_floating_point() || t.numel() == 0) return -1;
  if (torch::isfinite(t).all().item<bool>()) return -1;
  // Failure path only: the first flat index of a non-finite element.
  torch::Tensor bad = torch::isfinite(t.reshape({-1})).logical_not().nonzero();
  return bad.numel() > 0 ? bad[0][0].item<int64_t>() : -1;
}

void require_finite(const at::Tensor& t, const std::string& file, const std::string& name,
                    const std::string& context) {
  const int64_t i = first_nonfinite(t);
  if (i < 0) return;
  const double v = t.reshape({-1})[i].item<double>();
  const char* what = std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
  throw std::runtime_error(file + ": tensor '" + name + "' element " + std::to_string(i) + " is " + what +
                           (context.empty() ? "" : " " + context));
}

void load_hf_weights(TransformerImpl& model, const std::string& path) {
  auto ckpt = sync::Checkpoint::open(path);
  auto params = model.named_parameters();
  std::vector<std::string> missing, bad_shape, unexpected;
  std::set<std::string> expected;
  for (const auto& p : params) expected.insert(p.key());
  for (const auto& tv : ckpt.tensors()) {
    if (expected.count(tv.name)) continue;
    if (ends_with(tv.name, "rotary_emb.inv_freq")) continue;  // old HF checkpoints saved this buffer
    if (tv.name == "lm_head.weight" && model.config().tie_word_embeddings) continue;
    unexpected.push_back(tv.name);
  }
  torch::NoGradGuard no_grad;
  for (auto& p : params) {
    const auto* tv = ckpt.find(p.key());
    if (tv == nullptr) {
      missing.push_back(p.key());
      continue;
    }
    auto want = p.value().sizes().vec();
    if (tv->shape != want) {
      bad_shape.push_back(p.key() + " " + sync::shape_string(tv->shape) + " (expected " +
                          sync::shape_string(want) + ")");
      continue;
    }
    // Copy out of the mmap first: safetensors data may sit at an unaligned offset.
    auto src =
        torch::empty(tv->shape, torch::TensorOptions().dtype(torch_dtype_of(tv->dtype, path, tv->name)));
    if (static_cast<size_t>(src.nbytes()) != tv->nbytes)
      throw std::runtime_error(path + ": tensor \"" + tv->name + "\" holds " + std::to_string(tv->nbytes) +
                               " bytes, expected " + std::to_string(src.nbytes()));
    std::memcpy(src.data_ptr(), tv->data, tv->nbytes);
    require_finite(src, path, tv->name);
    if (src.scalar_type() != p.value().scalar_type()) {  // a finite F32/F64 value may overflow BF16/F16
      src = src.to(p.value().scalar_type());
      require_finite(src, path, tv->name,
                     std::string("after the cast to ") + c10::toString(p.value().scalar_type()));
    }
    p.value().copy_(src);
  }
  if (!missing.empty() || !bad_shape.empty() || !unexpected.empty()) {
    std::ostringstream os;
    os << path << ": checkpoint does not match the " << model.config().architecture << " config";
    auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      os << "; " << what << " (" << names.size() << "):";
      for (size_t i = 0; i < names.size() && i < 10; ++i) os << " " << names[i];
      if (names.size() > 10) os << " ...";
    };
    list("missing", missing);
    list("wrong shape", bad_shape);
    list("unexpected", unexpected);
    throw std::runtime_error(os.str());
  }
}

void save_hf_checkpoint(const TransformerImpl& model, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create folder: " + ec.message());
  std::vector<torch::Tensor> keep;  // owns the BF16 copies while the views are written
  std::vector<sync::TensorView> views;
  for (const auto& p : model.named_parameters()) {
    auto t = p.value().detach().to(torch::kCPU).to(torch::kBFloat16).contiguous();
    keep.push_back(t);
    views.push_back(sync::TensorView{p.key(), sync::DType::BF16, t.sizes().vec(),
                                     static_cast<const uint8_t*>(t.data_ptr()),
                                     static_cast<size_t>(t.nbytes())});
  }
  ModelConfig cfg = model.config();
  cfg.torch_dtype = "bfloat16";
  sync::write_file_atomic((std::filesystem::path(dir) / "config.json").string(), cfg.to_hf_json());
  sync::write_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), views,
                          {{"format", "pt"}});
}

Transformer load_hf_model(const std::string& dir, torch::Dtype compute_dtype) {
  auto cfg = ModelConfig::from_hf_json(dir);
  Transformer model(cfg, compute_dtype);
  load_hf_weights(*model, dir);
  return model;
}

}  // namespace pulse::model

// Memory estimate and refusal before allocation; see memory_check.h.
#include "app/memory_check.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/default_config.h"
#include "model/model_size.h"

namespace fs = std::filesystem;

namespace pulse::app {
namespace {

std::string gb(double bytes) {
  char buf[64];
  if (bytes < 1e12)
    std::snprintf(buf, sizeof buf, "%.3g GB", bytes / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.0f GB", bytes / 1e9);
  return buf;
}

/// "3.4 M", "726 B", "1.16e+13": a parameter count for messages.
std::string fmt_params(double n) {
  char buf[64];
  if (n < 1e9)
    std::snprintf(buf, sizeof buf, "%.3g M", n / 1e6);
  else if (n < 1e12)
    std::snprintf(buf, sizeof buf, "%.3g B", n / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.3g", n);
  return buf;
}

/// A setting's value as written ("0.5", "64").
std::string fmt_setting(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

/// First number of a one-line file (cgroup files), nullopt when absent or "max".
std::optional<double> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  try {
    return std::stod(word);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<MemoryBudget> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return MemoryBudget{kb * 1024, "MemAvailable in /proc/meminfo"};
  }
  return std::nullopt;
}

std::optional<MemoryBudget> cgroup_available() {
  // v2: the process's own cgroup is mounted at /sys/fs/cgroup in a container; v1: the memory controller.
  const struct {
    const char *limit, *usage, *what;
  } files[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "cgroup memory.max - memory.current"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
       "cgroup memory.limit_in_bytes - memory.usage_in_bytes"}};
  for (const auto& f : files) {
    const auto limit = read_number(f.limit);
    if (!limit || *limit >= 1e18) continue;  // v1 writes "no limit" as ~2^63
    return MemoryBudget{std::max(0.0, *limit - read_number(f.usage).value_or(0.0)), f.what};
  }
  return std::nullopt;
}

}  // namespace

std::string MemoryEstimate::breakdown() const {
  std::string out;
  auto part = [&](double bytes, const char* what) {
    if (bytes <= 0) return;
    out += (out.empty() ? "" : " + ") + std::string(what) + " " + gb(bytes);
  };
  part(weights, "weights");
  part(gradients, "gradients");
  part(optimizer, "FP32 masters and Adam moments");
  part(reference, "KL reference");
  part(activations, "activations");
  part(workers, "in-process workers (replicas, KV caches)");
  return out;
}

MemoryEstimate estimate_memory(const Config& config, const model::ModelConfig& mc, const MemoryRole& role) {
  MemoryEstimate e;
  const double P = model::parameter_count(mc);
  const double dt = config.model.dtype == "bfloat16" ? 2.0 : 4.0;
  const double V = static_cast<double>(mc.vocab_size), C = static_cast<double>(mc.hidden_size),
               I = static_cast<double>(mc.intermediate_size), L = static_cast<double>(mc.num_hidden_layers),
               H = static_cast<double>(mc.num_attention_heads),
               kv = static_cast<double>(mc.num_key_value_heads * mc.head_dim);
  e.parameters = P;
  e.weights = P * dt;
  const double R = static_cast<double>(config.rl.grpo.sampling.max_new_tokens);
  if (role.trains) {
    e.gradients = P * dt;
    e.optimizer = 12 * P;
    if (config.rl.grpo.kl_coef > 0) e.reference = P * dt;
    // One GRPO micro-batch of responses alone: per token and layer the inputs of the norms, projections
    // and MLP kept for backward (about 4 C + 3 I values), the attention weights [H, T] in FP32, and the
    // FP32 logits and log-probs over the vocabulary.
    const double rows = static_cast<double>(config.rl.grpo.micro_batch);
    const double per_token_layer = dt * (4 * C + 3 * I) + 4 * H * R;
    e.activations = rows * R * (L * per_token_layer + 2 * 4 * V);
  } else {
    // Evaluation: the KV cache and the FP32 logits of one generation batch.
    const double rows = static_cast<double>(config.eval.pass_at_1.batch_size);
    const double T = static_cast<double>(config.eval.pass_at_1.sampling.max_new_tokens);
    e.activations = rows * (2 * L * kv * dt * T + 4 * V);
  }
  if (role.in_process_workers > 0) {
    const double n = static_cast<double>(role.in_process_workers);
    const double prompts = std::ceil(static_cast<double>(config.rl.prompts_per_step) / n);
    const double batch = prompts * static_cast<double>(config.rl.group_size);
    const double kv_cache = 2 * L * kv * dt * batch * R;  // K and V for every response slot
    e.workers = n * (P * dt + P * 2 + kv_cache + batch * V * 4 * 2);
  }
  e.on_device =
      e.total() - (role.in_process_workers > 0 ? static_cast<double>(role.in_process_workers) * P * 2 : 0);
  return e;
}

std::optional<MemoryBudget> host_memory_available() {
  auto a = mem_available(), b = cgroup_available();
  if (a && b) return a->bytes <= b->bytes ? a : b;
  return a ? a : b;
}

std::optional<MemoryBudget> cuda_memory_total(int ordinal) {
  // Driver API, resolved at run time: a CPU build and a machine without the driver simply get nullopt.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  using InitFn = int (*)(unsigned);
  using GetFn = int (*)(int*, int);
  using TotalFn = int (*)(size_t*, int);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto get = reinterpret_cast<GetFn>(::dlsym(lib, "cuDeviceGet"));
  auto total = reinterpret_cast<TotalFn>(::dlsym(lib, "cuDeviceTotalMem_v2"));
  std::optional<MemoryBudget> out;
  int dev = 0;
  size_t bytes = 0;
  if (init && get && total && init(0) == 0 && get(&dev, ordinal) == 0 && total(&bytes, dev) == 0)
    out = MemoryBudget{static_cast<double>(bytes), "total memory of CUDA device " + std::to_string(ordinal)};
  // libcuda stays loaded: LibTorch uses the same library, and unloading a driver library is not safe.
  return out;
}

void check_memory(const Config& config, const model::ModelConfig& mc, const MemoryRole& role,
                  const std::string& source, const std::string& model_source) {
  const MemoryEstimate e = estimate_memory(config, mc, role);
  auto refuse = [&](double need, const std::string& against) {
    std::ostringstream os;
    os << source << ": " << model_source << " (num_hidden_layers = " << mc.num_hidden_layers
       << ", hidden_size = " << mc.hidden_size << ", intermediate_size = " << mc.intermediate_size
       << ", vocab_size = " << mc.vocab_size << ": " << fmt_params(e.parameters)
       << " parameters) needs at least " << gb(need) << " (" << e.breakdown() << ") but " << against
       << "; use a smaller model or smaller rl.micro_batch / rl.max_new_tokens / run.workers";
    throw ConfigError(os.str());
  };
  const double cap = config.run.max_memory_gb * 1e9;
  if (cap > 0 && e.total() > cap)
    refuse(e.total(), "run.max_memory_gb = " + fmt_setting(config.run.max_memory_gb));
  // run.device = cuda: the model's part is checked against the GPU (device 0: the nodes pulse runs on
  // have one kind of GPU), the sync copies against the host. auto: against the GPU when one is found.
  const auto gpu = config.run.device == "cpu" ? std::nullopt : cuda_memory_total(0);
  const bool on_gpu = gpu.has_value();
  if (auto host = host_memory_available()) {
    const double on_host = on_gpu ? e.total() - e.on_device : e.total();
    if (on_host > host->bytes)
      refuse(on_host, "this machine has " + gb(host->bytes) + " available (" + host->source + ")");
  }
  if (on_gpu && e.on_device > gpu->bytes)
    refuse(e.on_device,
           "run.device = \"" + config.run.device + "\" has " + gb(gpu->bytes) + " (" + gpu->source + ")");
}

std::string model_source_name(const Config& config) {
  if (!config.model.path.empty())
    return "model.path '" + (fs::path(config.model.path) / "config.json").string() + "'";
  if (config.model.config.empty()) return "the embedded tiny Llama (model.config = \"\")";
  return "model.config '" + config.model.config + "'";
}

model::ModelConfig read_model_config(const Config& config, const std::string& source,
                                     std::string* model_source) {
  // "SOURCE: model.path 'DIR': what", the key's own words as model_config_for (app/setup.h) has them.
  auto fail = [&](const std::string& key, const std::string& path, const std::string& what) {
    throw ConfigError(source + ": " + key + " '" + path + "': " + what);
  };
  auto read = [&](const std::string& key, const std::string& path) -> model::ModelConfig {
    try {
      return model::ModelConfig::from_hf_json(path);
    } catch (const std::exception& e) {
      throw ConfigError(source + ": " + key + " '" + path + "': " + e.what());
    }
  };
  model::ModelConfig mc;
  if (!config.model.path.empty()) {
    const std::string& dir = config.model.path;
    if (fs::is_regular_file(dir))  // e.g. the model.safetensors inside the folder
      fail("model.path", dir, "a file, not a folder (give the HF model folder: config.json + safetensors)");
    mc = read("model.path", dir);  // a missing folder or config.json: "cannot open 'DIR/config.json'"
    if (model_source) *model_source = model_source_name(config);
    return mc;
  }
  if (config.model.config.empty()) {
    mc = model::tiny_llama_config();
  } else {
    if (!fs::is_regular_file(config.model.config))
      fail("model.config", config.model.config,
           "not found (relative paths are taken from the current directory)");
    mc = read("model.config", config.model.config);
  }
  if (model_source) *model_source = model_source_name(config);
  if (config.tokenizer.path.empty()) mc.vocab_size = config.tokenizer.vocab_size;
  return mc;
}

void check_model_inputs(const Config& config, const std::string& source, const MemoryRole& role) {
  std::string model_source;
  const model::ModelConfig mc = read_model_config(config, source, &model_source);
  check_memory(config, mc, role, source, model_source);
}

}  // namespace pulse::app

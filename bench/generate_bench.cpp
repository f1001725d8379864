// `pulse bench generate`; see generate_bench.h.
#include "bench/generate_bench.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>

#include "model/cuda_graph_step.h"
#include "model/static_decode.h"
#include "model/transformer.h"

namespace pulse::bench {
namespace {

std::string range_error(const std::string& option, int64_t value, int64_t max) {
  return option + " " + std::to_string(value) + ": must be in 1.." + std::to_string(max);
}

/// The prompts of the largest batch (smaller batches take its first rows): random ids in [0, vocab) from
/// `seed`, and one sampling seed per row.
std::vector<model::GenerationRequest> make_requests(const GenerateBenchOptions& o, int64_t rows) {
  std::mt19937_64 rng(o.seed ^ 0x5eed5eed5eed5eedULL);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(o.config.vocab_size - 1));
  std::vector<model::GenerationRequest> reqs(static_cast<size_t>(rows));
  for (int64_t b = 0; b < rows; ++b) {
    auto& r = reqs[static_cast<size_t>(b)];
    r.prompt_ids.resize(static_cast<size_t>(o.prompt_tokens));
    for (auto& t : r.prompt_ids) t = id(rng);
    r.seed = (o.seed << 32) + static_cast<uint64_t>(b);
  }
  return reqs;
}

/// 1, 0.7, -1, nan: a double as people write it (up to 6 significant digits).
std::string number_text(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

void sync_device(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

}  // namespace

void GenerateBenchOptions::check() const {
  if (batches.empty()) throw std::invalid_argument("--batch: give at least one batch size");
  for (int64_t b : batches)
    if (b < 1 || b > kGenerateBenchMaxBatch)
      throw std::invalid_argument(range_error("--batch", b, kGenerateBenchMaxBatch));
  if (prompt_tokens < 1 || prompt_tokens > kGenerateBenchMaxTokens)
    throw std::invalid_argument(range_error("--prompt-tokens", prompt_tokens, kGenerateBenchMaxTokens));
  if (new_tokens < 1 || new_tokens > kGenerateBenchMaxTokens)
    throw std::invalid_argument(range_error("--new-tokens", new_tokens, kGenerateBenchMaxTokens));
  if (repeats < 1 || repeats > kGenerateBenchMaxRepeats)
    throw std::invalid_argument(range_error("--repeats", repeats, kGenerateBenchMaxRepeats));
  const int64_t length = prompt_tokens + new_tokens;
  const std::string where = config_name.empty() ? "the model config" : "'" + config_name + "'";
  if (length > config.max_position_embeddings)
    throw std::invalid_argument("--prompt-tokens + --new-tokens = " + std::to_string(length) +
                                " exceeds max_position_embeddings = " +
                                std::to_string(config.max_position_embeddings) + " of " + where);
  if (config.sliding_window > 0 && length > config.sliding_window)
    throw std::invalid_argument("--prompt-tokens + --new-tokens = " + std::to_string(length) +
                                " exceeds sliding_window = " + std::to_string(config.sliding_window) +
                                " of " + where);
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw std::invalid_argument("--temperature " + number_text(temperature) +
                                ": must be a finite number >= 0 (0 = greedy)");
  if (dtype != c10::ScalarType::BFloat16 && dtype != c10::ScalarType::Float)
    throw std::invalid_argument(std::string("--dtype: must be bfloat16 or float32 (got ") +
                                c10::toString(dtype) + ")");
  for (auto m : modes) {
    try {
      model::resolve_decode_mode(m, device);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--decode ") + model::name_of(m) + " on " + device.str() +
                                  ": " + e.what());
    }
  }
}

std::vector<model::DecodeMode> default_decode_modes(const c10::Device& device) {
  using model::DecodeMode;
  if (device.is_cuda() && model::cuda_graphs_available())
    return {DecodeMode::Eager, DecodeMode::Static, DecodeMode::CudaGraph};
  return {DecodeMode::Eager, DecodeMode::Static};
}

std::vector<model::DecodeMode> parse_decode_modes(const std::vector<std::string>& names) {
  std::vector<model::DecodeMode> out;
  for (const auto& n : names) {
    const auto named = model::decode_mode_named(n);
    if (!named)
      throw std::invalid_argument("--decode: '" + n + "' is not one of auto, eager, static, cuda_graph");
    const auto m = *named;
    if (std::find(out.begin(), out.end(), m) != out.end())
      throw std::invalid_argument("--decode: '" + n + "' is given twice");
    out.push_back(m);
  }
  return out;
}

bool GenerateBenchResult::all_ok() const {
  return std::all_of(runs.begin(), runs.end(), [](const GenerateBenchRun& r) { return r.error.empty(); });
}

GenerateBenchResult run_generate_bench(const GenerateBenchOptions& options) {
  options.check();
  GenerateBenchResult out;
  out.options = options;
  auto& o = out.options;
  if (o.modes.empty()) {
    o.modes = default_decode_modes(o.device);
    if (o.device.is_cuda() && !model::cuda_graphs_available())
      out.notes.push_back("cuda_graph left out: this LibTorch has no CUDA graphs");
  }
  // Eager first: the other paths' tokens are compared with its.
  std::stable_partition(o.modes.begin(), o.modes.end(),
                        [](model::DecodeMode m) { return m == model::DecodeMode::Eager; });
  out.threads = torch::get_num_threads();

  torch::NoGradGuard no_grad;
  torch::manual_seed(o.seed);
  model::Transformer net(o.config, o.dtype);
  net->eval();
  if (!o.device.is_cpu()) net->to(o.device);
  out.parameters = net->num_parameters();
  const auto all_requests = make_requests(o, *std::max_element(o.batches.begin(), o.batches.end()));

  model::SamplingParams sp;
  sp.max_new_tokens = o.new_tokens;
  sp.temperature = o.temperature;
  sp.top_p = 1.0;
  sp.top_k = 0;

  for (int64_t batch : o.batches) {
    const std::vector<model::GenerationRequest> requests(all_requests.begin(), all_requests.begin() + batch);
    std::optional<std::vector<model::GenerationResult>> eager_tokens;
    for (auto mode : o.modes) {
      GenerateBenchRun run;
      run.batch = batch;
      run.decode = mode;
      sp.decode = mode;
      try {
        std::vector<model::GenerationResult> results;
        model::GenerateStats stats;
        model::generate(*net, requests, sp, nullptr, &stats);  // warm-up: allocator, kernels, graphs
        std::vector<std::pair<double, model::GenerateStats>> timed;
        for (int64_t rep = 0; rep < o.repeats; ++rep) {
          sync_device(o.device);
          const auto t0 = std::chrono::steady_clock::now();
          results = model::generate(*net, requests, sp, nullptr, &stats);
          sync_device(o.device);
          timed.emplace_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                             stats);
        }
        for (const auto& t : timed) run.wall_s.push_back(t.first);
        std::sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        const auto& median = timed[timed.size() / 2];
        run.median_wall_s = median.first;
        run.stats = median.second;
        run.tokens_per_s = static_cast<double>(batch * o.new_tokens) / run.median_wall_s;
        if (mode == model::DecodeMode::Eager && !eager_tokens) eager_tokens = results;
        if (eager_tokens) {
          int64_t equal = 0;
          for (size_t b = 0; b < results.size(); ++b)
            equal += results[b].token_ids == (*eager_tokens)[b].token_ids ? 1 : 0;
          run.tokens_equal_to_eager = static_cast<double>(equal) / static_cast<double>(batch);
        }
      } catch (const std::exception& e) {
        run = GenerateBenchRun{};
        run.batch = batch;
        run.decode = mode;
        run.error = e.what();
        const auto nl = run.error.find('\n');  // c10::Error appends a C++ backtrace
        if (nl != std::string::npos) run.error.resize(nl);
        if (run.error.empty()) run.error = "unknown error";
      }
      out.runs.push_back(std::move(run));
    }
  }
  return out;
}

std::string generate_bench_json(const GenerateBenchResult& r) {
  const auto& o = r.options;
  nlohmann::ordered_json j;
  j["bench"] = "generate";
  j["model_config"] = o.config_name;
  j["model_type"] = o.config.model_type;
  j["parameters"] = r.parameters;
  j["device"] = o.device.str();
  j["dtype"] = o.dtype == c10::ScalarType::BFloat16 ? "bfloat16" : "float32";
  j["prompt_tokens"] = o.prompt_tokens;
  j["new_tokens"] = o.new_tokens;
  j["temperature"] = o.temperature;
  j["seed"] = o.seed;
  j["repeats"] = o.repeats;
  j["threads"] = r.threads;
  j["notes"] = r.notes;
  auto runs = nlohmann::ordered_json::array();
  for (const auto& run : r.runs) {
    nlohmann::ordered_json x;
    x["batch"] = run.batch;
    x["decode"] = model::name_of(run.decode);
    x["mode"] = run.error.empty() ? nlohmann::ordered_json(model::name_of(run.stats.mode)) : nullptr;
    x["tokens_per_s"] = run.tokens_per_s;
    x["wall_s"] = run.median_wall_s;
    x["wall_s_each"] = run.wall_s;
    x["prefill_ms"] = run.stats.prefill_ms;
    x["decode_ms"] = run.stats.decode_ms;
    x["capture_ms"] = run.stats.capture_ms;
    x["graphs"] = run.stats.graphs;
    x["compactions"] = run.stats.compactions;
    x["steps"] = run.stats.steps;
    x["new_tokens"] = run.stats.new_tokens;
    x["tokens_equal_to_eager"] =
        run.tokens_equal_to_eager ? nlohmann::ordered_json(*run.tokens_equal_to_eager) : nullptr;
    x["error"] = run.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(run.error);
    runs.push_back(std::move(x));
  }
  j["runs"] = std::move(runs);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string generate_bench_table(const GenerateBenchResult& r) {
  const auto& o = r.options;
  std::ostringstream os;
  os << "pulse bench generate: " << (o.config_name.empty() ? o.config.model_type : o.config_name) << " ("
     << o.config.model_type << ", " << std::fixed << std::setprecision(1) << r.parameters / 1e6
     << " M parameters, random weights) on " << o.device.str() << " in "
     << (o.dtype == c10::ScalarType::BFloat16 ? "bfloat16" : "float32") << ", " << r.threads
     << " threads\n  prompt " << o.prompt_tokens << " + " << o.new_tokens << " new tokens per row, "
     << (o.temperature == 0 ? std::string("greedy") : "temperature " + number_text(o.temperature))
     << ", seed " << o.seed << ", median of " << o.repeats << " timed call(s) after a warm-up\n";
  for (const auto& n : r.notes) os << "  note: " << n << "\n";
  os << "  batch  decode       taken         tokens/s    wall s  prefill ms   decode ms  capture ms  graphs"
        "  steps  =eager\n";
  for (const auto& run : r.runs) {
    os << "  " << std::setw(5) << run.batch << "  " << std::left << std::setw(11)
       << model::name_of(run.decode) << "  ";
    if (!run.error.empty()) {
      os << "error: " << run.error << std::right << "\n";
      continue;
    }
    os << std::setw(11) << model::name_of(run.stats.mode) << std::right << std::setprecision(1)
       << std::setw(11) << run.tokens_per_s << std::setprecision(3) << std::setw(10) << run.median_wall_s
       << std::setprecision(1) << std::setw(12) << run.stats.prefill_ms << std::setw(12)
       << run.stats.decode_ms << std::setw(12) << run.stats.capture_ms << std::setw(8) << run.stats.graphs
       << std::setw(7) << run.stats.steps;
    if (run.tokens_equal_to_eager)
      os << std::setprecision(3) << std::setw(8) << *run.tokens_equal_to_eager;
    else
      os << std::setw(8) << "-";
    os << "\n";
  }
  os << "  tokens/s = batch x new tokens / wall seconds of the whole generate() call (prefill included);\n"
        "  =eager: fraction of rows whose tokens equal the eager run's (same seeds)\n";
  return os.str();
}

}  // namespace pulse::bench

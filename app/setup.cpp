#include "app/setup.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <regex>
#include <stdexcept>

#include "app/run/checkpoints.h"
#include "datasets/catalog.h"
#include "datasets/loaders.h"
#include "datasets/mbpp_fewshot.h"
#include "datasets/mbpp_split.h"
#include "datasets/split.h"
#include "datasets/synthetic.h"
#include "model/checkpoint.h"
#include "model/default_config.h"
#include "rl/rollout.h"
#include "rl/sft.h"

namespace fs = std::filesystem;

namespace pulse::app {

ProblemSets load_problems(const Config& config) {
  const auto& d = config.data;
  // `key`: the config key that named `path` (data.path or data.eval_path), for the error.
  auto load_file = [&](const std::string& path, const char* key) -> std::vector<rl::Problem> {
    if (!fs::exists(path))
      throw std::runtime_error("data: file '" + path + "' not found (key " + key + ")" +
                               datasets::fetch_hint(path));
    if (d.task == DataTask::Mbpp) return datasets::load_mbpp_jsonl(path, d.limits);
    datasets::LoadReport report;  // data errors: skipped with a warning (datasets/loaders.h LoadReport)
    auto problems = d.task == DataTask::Math ? datasets::load_math_jsonl(path, &report, d.limits)
                                             : datasets::load_gsm8k_jsonl(path, &report, d.limits);
    if (report.data_errors > 0) spdlog::warn("data: {}", report.summary());
    return problems;
  };
  std::vector<rl::Problem> all;
  if (d.task == DataTask::SyntheticMath) {
    all =
        datasets::synthetic_math(d.n_problems, static_cast<uint64_t>(d.seed), static_cast<int>(d.max_level));
  } else if (d.task == DataTask::SyntheticCode) {
    all = datasets::synthetic_code(d.n_problems, static_cast<uint64_t>(d.seed), d.demo_error_rate);
  } else if (!d.path.empty()) {
    all = load_file(d.path, "data.path");
  }
  ProblemSets sets;
  std::vector<rl::Problem> exemplars =
      d.eval_path.empty() && d.mbpp_shots > 0 ? all : std::vector<rl::Problem>{};
  std::string exemplar_file = d.path;
  if (!d.eval_path.empty()) {
    sets.train = std::move(all);
    sets.held_out = load_file(d.eval_path, "data.eval_path");
    if (d.task == DataTask::Mbpp) {
      // The few-shot exemplars come from the whole file (its prompt split), before it is cut to eval_split.
      if (d.mbpp_shots > 0) {
        exemplars = sets.held_out;
        exemplar_file = d.eval_path;
      }
      sets.held_out = datasets::mbpp_split(std::move(sets.held_out), d.eval_split);
    }
  } else {
    auto split = datasets::split_problems(std::move(all), d.held_out_fraction, static_cast<uint64_t>(d.seed));
    sets.train = std::move(split.train);
    sets.held_out = std::move(split.held_out);
  }
  if (d.task == DataTask::Mbpp && d.mbpp_shots > 0) {
    for (auto* set : {&sets.train, &sets.held_out}) {
      const size_t removed =
          datasets::apply_mbpp_fewshot(*set, exemplars, static_cast<int>(d.mbpp_shots), exemplar_file);
      if (removed > 0)
        spdlog::info(
            "data: {} few-shot exemplar task(s) left out of the {} problems (their answer is in the prompt)",
            removed, set == &sets.train ? "train" : "held-out");
    }
  }
  if (config.eval.max_problems > 0 && static_cast<int64_t>(sets.held_out.size()) > config.eval.max_problems)
    sets.held_out.resize(static_cast<size_t>(config.eval.max_problems));
  return sets;
}

std::unique_ptr<model::Tokenizer> prepare_tokenizer(const Config& config, const ProblemSets& problems,
                                                    const std::string& trained_path, std::string* path_used) {
  std::string path = config.tokenizer.path;
  if (path.empty()) {
    path = trained_path;
    if (!fs::exists(path)) {
      if (problems.train.empty()) throw std::runtime_error("tokenizer: no train problems to train it on");
      std::vector<std::string> lines;
      lines.reserve(problems.train.size() * 2);
      for (const auto& p : problems.train) {
        lines.push_back(p.question);
        lines.push_back(rl::sft_target(p));
      }
      // SentencePiece needs required_chars + specials <= vocab_size <= the pieces the text allows; a
      // small synthetic corpus allows few merges, so a size outside that window is moved inside it (with a
      // warning) rather than failing the run: the model's vocab_size follows the tokenizer anyway.
      int vocab = static_cast<int>(config.tokenizer.vocab_size);
      for (int attempt = 0;; ++attempt) {
        try {
          model::train_sentencepiece_bpe(lines, vocab, path,
                                         derive_seed(static_cast<uint64_t>(config.run.seed), 99));
          break;
        } catch (const std::runtime_error& e) {
          std::string msg = e.what();
          std::smatch m;
          int next = 0;
          if (std::regex_search(msg, m, std::regex("value <= ([0-9]+)")))
            next = std::stoi(m[1]);
          else if (std::regex_search(msg, m, std::regex("required_chars\\. [0-9]+ vs ([0-9]+)")))
            next = std::stoi(m[1]) + 8;
          if (next <= 0 || attempt >= 3) throw;
          spdlog::warn("tokenizer.vocab_size {} does not fit this corpus; training with {} pieces", vocab,
                       next);
          vocab = next;
        }
      }
    }
  } else if (!fs::exists(path)) {
    throw std::runtime_error("tokenizer.path: '" + path + "' not found");
  }
  if (path_used) *path_used = path;
  return model::load_tokenizer(path);
}

void check_prompt_tokens(const Config& config, const ProblemSets& sets, const model::Tokenizer& tok,
                         const model::PromptTemplate& tmpl) {
  const auto& d = config.data;
  const int64_t limit = d.max_prompt_tokens;
  auto check = [&](const std::vector<rl::Problem>& problems, bool held_out) {
    for (const auto& p : problems) {
      // Every token covers at least one byte of the rendered prompt, plus a dummy-prefix space and BOS:
      // only a prompt that could be too long is encoded.
      if (static_cast<int64_t>(tmpl.render(p.question).size()) + 2 <= limit) continue;
      const int64_t n = static_cast<int64_t>(rl::encode_prompt(tok, tmpl, p.question).size());
      if (n <= limit) continue;
      const bool from_eval_path = held_out && !d.eval_path.empty();
      const std::string file = from_eval_path ? d.eval_path : d.path;
      throw std::runtime_error(
          (file.empty() ? std::string("data.task ") + name_of(d.task)
                        : std::string(from_eval_path ? "data.eval_path '" : "data.path '") + file + "'") +
          ": problem '" + p.id + "': its prompt (the question in chat template '" +
          config.tokenizer.chat_template + "') is " + std::to_string(n) +
          " tokens, more than data.max_prompt_tokens = " + std::to_string(limit));
    }
  };
  check(sets.train, false);
  check(sets.held_out, true);
}

namespace {
/// fn() with a failure to read the checkpoint in model.path prefixed by the key and the path.
template <typename F>
auto reading_model_path(const Config& config, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("model.path '" + config.model.path + "': " + e.what());
  }
}
}  // namespace

model::ModelConfig model_config_for(const Config& config, const model::Tokenizer& tok) {
  if (!config.model.path.empty()) {
    reading_model_path(config, [&] {
      if (fs::is_regular_file(config.model.path))  // e.g. the model.safetensors inside the folder
        throw std::runtime_error(
            "a file, not a folder (give the HF model folder: config.json + safetensors)");
      verify_checkpointed_model(config.model.path);
    });
    model::ModelConfig mc =
        reading_model_path(config, [&] { return model::ModelConfig::from_hf_json(config.model.path); });
    // Every id the tokenizer can produce needs an embedding row. A tokenizer of another model fails here,
    // naming both, instead of at the first prompt that holds an id past the embedding.
    if (tok.vocab_size() > mc.vocab_size)
      throw std::runtime_error(
          (config.tokenizer.path.empty()
               ? std::string("the tokenizer trained for this run (tokenizer.path = \"\")")
               : "tokenizer.path '" + config.tokenizer.path + "'") +
          " has " + std::to_string(tok.vocab_size()) + " pieces, but model.path '" + config.model.path +
          "' has vocab_size " + std::to_string(mc.vocab_size) +
          " (its config.json): set tokenizer.path to the model's own tokenizer");
    return mc;
  }
  model::ModelConfig mc;
  if (config.model.config.empty()) {
    mc = model::tiny_llama_config();
    mc.vocab_size = tok.vocab_size();  // the embedded model is sized to the tokenizer trained for the run
  } else {
    if (!fs::exists(config.model.config))
      throw std::runtime_error("model.config: '" + config.model.config +
                               "' not found (relative paths are taken from the current directory)");
    mc = model::ModelConfig::from_hf_json(config.model.config);
    // A given config keeps its vocab_size when the tokenizer's ids fit: a real model's shape, whose
    // embedding is padded past its tokenizer (Qwen2.5: 151,936 rows for 151,646 ids); grown otherwise.
    mc.vocab_size = std::max<int64_t>(mc.vocab_size, tok.vocab_size());
  }
  if (tok.bos_id() >= 0) mc.bos_token_id = tok.bos_id();
  if (tok.eos_id() >= 0) mc.eos_token_id = tok.eos_id();
  // model.config's own ids may lie past a smaller tokenizer: none rather than an id without a row.
  if (mc.bos_token_id >= mc.vocab_size) mc.bos_token_id = -1;
  if (mc.eos_token_id >= mc.vocab_size) mc.eos_token_id = -1;
  return mc;
}

torch::Dtype compute_dtype(const Config& config) {
  return config.model.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
}

model::Transformer build_model(const Config& config, const model::ModelConfig& mc) {
  if (!config.model.path.empty())
    return reading_model_path(config,
                              [&] { return model::load_hf_model(config.model.path, compute_dtype(config)); });
  torch::manual_seed(derive_seed(static_cast<uint64_t>(config.run.seed), kSeedInit));
  return model::Transformer(mc, compute_dtype(config));
}

std::vector<int64_t> step_prompt_indices(int64_t n_train, int64_t prompts_per_step, uint64_t seed,
                                         int64_t step) {
  if (n_train <= 0) throw std::invalid_argument("no train problems");
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(prompts_per_step));
  int64_t cached_epoch = -1;
  std::vector<int64_t> perm(static_cast<size_t>(n_train));
  for (int64_t j = step * prompts_per_step; j < (step + 1) * prompts_per_step; ++j) {
    int64_t epoch = j / n_train;
    if (epoch != cached_epoch) {
      std::iota(perm.begin(), perm.end(), 0);
      std::mt19937_64 rng(derive_seed(seed, kSeedPrompts, static_cast<uint64_t>(epoch)));
      // Fisher-Yates with our own draws: std::shuffle's use of the engine is implementation-defined.
      for (int64_t i = n_train - 1; i > 0; --i)
        std::swap(perm[i], perm[rng() % static_cast<uint64_t>(i + 1)]);
      cached_epoch = epoch;
    }
    out.push_back(perm[static_cast<size_t>(j % n_train)]);
  }
  return out;
}

void set_model_weights(model::TransformerImpl& model, const std::vector<sync::TensorView>& weights) {
  torch::NoGradGuard no_grad;
  std::map<std::string, const sync::TensorView*> by_name;
  for (const auto& w : weights) by_name[w.name] = &w;
  size_t used = 0;
  for (auto& item : model.named_parameters(true)) {
    auto it = by_name.find(item.key());
    if (it == by_name.end())
      throw std::runtime_error("weights: no tensor for parameter '" + item.key() + "'");
    const sync::TensorView& w = *it->second;
    torch::Tensor param = item.value();
    if (w.dtype != sync::DType::BF16 ||
        std::vector<int64_t>(param.sizes().begin(), param.sizes().end()) != w.shape)
      throw std::runtime_error("weights: tensor '" + w.name + "' has the wrong dtype or shape");
    auto src = torch::from_blob(const_cast<uint8_t*>(w.data), w.shape, torch::kBFloat16);
    param.copy_(src);
    ++used;
  }
  if (used != by_name.size())
    throw std::runtime_error("weights: " + std::to_string(by_name.size() - used) +
                             " tensors match no parameter");
}

}  // namespace pulse::app

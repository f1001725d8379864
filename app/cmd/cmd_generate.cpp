// `pulse generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens N] [--greedy] [--json]`:
// continue one prompt with any HF checkpoint folder (config.json + model.safetensors or a sharded index,
// plus a tokenizer when the folder holds one), so that a user can sanity-check a checkpoint by eye or
// against another implementation's token ids.
#include <torch/types.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/cli_checks.h"
#include "app/cmd/commands.h"
#include "app/memory_check.h"
#include "app/run/checkpoints.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/generate.h"
#include "model/sampling.h"
#include "model/tokenizer.h"

namespace pulse::app {
namespace {

namespace fs = std::filesystem;

/// Command-line settings of `pulse generate`.
struct GenerateOptions {
  std::string model_dir;       ///< HF folder
  std::string tokenizer_path;  ///< empty: the model folder's tokenizer, when it has one
  std::string prompt;          ///< text, encoded with the tokenizer (BOS added when it has one)
  std::string prompt_ids;      ///< "1,2,3": used as given, no BOS added
  bool use_text = false;       ///< --prompt was given (else --prompt-ids)
  int64_t max_new_tokens = 64;
  bool greedy = false;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::string dtype = "fp32";
  bool ignore_eos = false;
  bool json = false;
};

/// "1, 2,3" -> {1, 2, 3}; throws std::invalid_argument naming the bad entry.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    std::string item = text.substr(pos, comma - pos);
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0 || v > INT32_MAX)
      throw std::invalid_argument("--prompt-ids: '" + item + "' is not a token id (expected e.g. 1,2,3)");
    ids.push_back(static_cast<int32_t>(v));
    pos = comma + 1;
  }
  return ids;
}

/// Checks that `dir` looks like an HF model folder before loading it, so the error names what is missing.
void check_model_dir(const std::string& dir) {
  if (!fs::exists(dir)) throw std::runtime_error(dir + ": model folder not found");
  if (!fs::is_directory(dir))
    throw std::runtime_error(dir +
                             ": not a folder (give an HF model folder with config.json and safetensors)");
  if (!fs::is_regular_file(fs::path(dir) / "config.json"))
    throw std::runtime_error((fs::path(dir) / "config.json").string() +
                             ": not found (an HF model folder needs config.json)");
}

/// The tokenizer to use, or null: --tokenizer PATH when given, else one in the model folder if present.
std::unique_ptr<model::Tokenizer> find_tokenizer(const GenerateOptions& o) {
  if (!o.tokenizer_path.empty()) return model::load_tokenizer(o.tokenizer_path);
  const fs::path dir(o.model_dir);
  for (const char* f : {"tokenizer.json", "vocab.json", "tokenizer.model"})
    if (fs::is_regular_file(dir / f)) return model::load_tokenizer(o.model_dir);
  return nullptr;
}

/// The prompt as ids: --prompt-ids verbatim, or --prompt through the tokenizer. Every id must be < vocab.
std::vector<int32_t> prompt_ids(const GenerateOptions& o, const model::Tokenizer* tok,
                                const model::ModelConfig& cfg) {
  std::vector<int32_t> ids;
  if (!o.use_text) {
    ids = parse_ids(o.prompt_ids);
  } else {
    if (tok == nullptr)
      throw std::runtime_error(o.model_dir +
                               ": --prompt needs a tokenizer (no tokenizer.json, vocab.json or "
                               "tokenizer.model in this folder); give --tokenizer PATH or --prompt-ids");
    ids = tok->encode(o.prompt, /*add_bos=*/true);
    if (ids.empty()) throw std::runtime_error("--prompt: the text encodes to no tokens");
  }
  for (int32_t id : ids)
    if (id >= cfg.vocab_size)
      throw std::invalid_argument("prompt token id " + std::to_string(id) + " is outside the vocabulary of " +
                                  std::to_string(cfg.vocab_size) + " (" + o.model_dir + "/config.json)");
  return ids;
}

/// Loads the model, generates and prints the result (one JSON object with --json).
void run_generate(const GenerateOptions& o) {
  model::SamplingParams sp;
  sp.max_new_tokens = o.max_new_tokens;
  sp.temperature = o.greedy ? 0.0 : o.temperature;
  sp.top_p = o.top_p;
  sp.top_k = o.top_k;
  model::check_sampling_params(sp, "generate");  // before the (possibly slow) load
  check_model_dir(o.model_dir);
  verify_checkpointed_model(o.model_dir);  // a step's model: against its checkpoint's manifest
  const auto cfg = model::ModelConfig::from_hf_json(o.model_dir);
  {
    // What one generation holds: the weights and one row's KV cache, checked before they are allocated.
    Config sizing;
    sizing.model.dtype = o.dtype == "bf16" ? "bfloat16" : "float32";
    sizing.eval.pass_at_1.batch_size = 1;
    sizing.eval.pass_at_1.sampling.max_new_tokens = o.max_new_tokens;
    check_memory(sizing, cfg, MemoryRole{/*trains=*/false, /*in_process_workers=*/0}, "pulse generate",
                 "--model '" + (fs::path(o.model_dir) / "config.json").string() + "'");
  }
  const auto tok = find_tokenizer(o);
  const auto ids = prompt_ids(o, tok.get(), cfg);
  if (tok != nullptr) sp.vocab_limit = tok->vocab_size();  // a padded vocabulary's extra rows: never sampled
  if (!o.ignore_eos && cfg.eos_token_id >= 0)
    sp.stop_token_ids.push_back(static_cast<int32_t>(cfg.eos_token_id));
  if (!o.ignore_eos && tok != nullptr && tok->eos_id() >= 0 && tok->eos_id() != cfg.eos_token_id)
    sp.stop_token_ids.push_back(tok->eos_id());
  auto net = model::load_hf_model(o.model_dir, o.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32);
  const auto out = model::generate(*net, {{ids, o.seed}}, sp).at(0);

  const bool has_text = tok != nullptr;
  // Special tokens (the EOS that stopped it, BOS) are ids, not text: skipped as the rollouts skip them.
  const std::string text = has_text ? tok->decode(out.token_ids, /*skip_special=*/true) : std::string();
  if (o.json) {
    nlohmann::ordered_json j;
    j["ids"] = out.token_ids;
    j["text"] = has_text ? nlohmann::ordered_json(text) : nlohmann::ordered_json(nullptr);
    j["prompt_ids"] = ids;
    j["finish"] = out.finish == model::FinishReason::Stop ? "stop" : "length";
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else if (has_text) {
    std::cout << text << std::endl;
  } else {
    for (size_t i = 0; i < out.token_ids.size(); ++i) std::cout << (i ? "," : "") << out.token_ids[i];
    std::cout << std::endl;
  }
}

}  // namespace

void register_generate_command(CLI::App& root) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = root.add_subcommand(
      "generate",
      "continue one prompt with an HF checkpoint folder (sanity-check a model); --json prints "
      "{\"ids\", \"text\", \"prompt_ids\", \"finish\"}");
  cmd->add_option("--model", o->model_dir, "HF folder: config.json + model.safetensors (+ a tokenizer)")
      ->required();
  auto* text =
      cmd->add_option("--prompt", o->prompt, "prompt text (needs a tokenizer; BOS added if it has one)");
  auto* ids = cmd->add_option("--prompt-ids", o->prompt_ids, "prompt token ids, used as given: 1,2,3");
  text->excludes(ids);
  cmd->add_option("--tokenizer", o->tokenizer_path, "tokenizer file or folder (default: the model folder's)");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate")
      ->check(non_negative_integer())
      ->capture_default_str();
  cmd->add_flag("--greedy", o->greedy, "argmax decoding (overrides --temperature/--top-p/--top-k)");
  cmd->add_option("--temperature", o->temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "nucleus sampling mass, in (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->check(non_negative_integer())->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "compute dtype")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "do not stop at the end-of-sequence token");
  cmd->add_flag("--json", o->json,
                "print {\"ids\", \"text\", \"prompt_ids\", \"finish\"} (text null without a tokenizer)");
  cmd->callback([o, text, ids] {
    if (text->count() + ids->count() != 1)
      throw CLI::ValidationError("generate", "give exactly one of --prompt TEXT or --prompt-ids 1,2,3");
    o->use_text = text->count() == 1;
    run_generate(*o);
  });
}

}  // namespace pulse::app

// HF config.json <-> ModelConfig for the Llama, Qwen2 and Mistral families.
// Field names and defaults follow transformers' LlamaConfig / Qwen2Config / MistralConfig.
#include "model/config.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "sync/io/atomic_file.h"

namespace pulse::model {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw std::runtime_error(file + ": " + what);
}

int64_t require_int(const json& j, const std::string& key, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) fail(file, "missing required field \"" + key + "\"");
  if (!it->is_number_integer()) fail(file, "field \"" + key + "\" must be an integer");
  const int64_t v = it->get<int64_t>();
  if (v <= 0) fail(file, "field \"" + key + "\" must be > 0, got " + std::to_string(v));
  return v;
}

int64_t optional_int(const json& j, const std::string& key, int64_t fallback, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) fail(file, "field \"" + key + "\" must be an integer");
  return it->get<int64_t>();
}

double optional_double(const json& j, const std::string& key, double fallback, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) fail(file, "field \"" + key + "\" must be a number");
  return it->get<double>();
}

/// bos/eos may be an int, a list of ints (Llama 3 instruct: first one is used) or null.
int64_t token_id(const json& j, const std::string& key, int64_t fallback, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) return (*it)[0].get<int64_t>();
  fail(file, "field \"" + key + "\" must be an integer or a list of integers");
}

void read_rope_scaling(const json& rs, ModelConfig& cfg, const std::string& file) {
  if (rs.is_null()) return;
  if (!rs.is_object()) fail(file, "field \"rope_scaling\" must be an object or null");
  std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
  if (type == "default") return;
  if (type != "llama3")
    fail(file, "rope_scaling.rope_type \"" + type + "\" is not supported (only \"llama3\" and \"default\")");
  cfg.rope_scaling.factor = optional_double(rs, "factor", 0.0, file);
  if (cfg.rope_scaling.factor <= 0) fail(file, "rope_scaling.factor must be > 0");
  cfg.rope_scaling.low_freq_factor = optional_double(rs, "low_freq_factor", 1.0, file);
  cfg.rope_scaling.high_freq_factor = optional_double(rs, "high_freq_factor", 4.0, file);
  cfg.rope_scaling.original_max_position_embeddings =
      optional_int(rs, "original_max_position_embeddings", 8192, file);
}

}  // namespace

ModelConfig ModelConfig::from_hf_json(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "config.json").string();
  return from_hf_json_text(sync::read_file(file), file);
}

ModelConfig ModelConfig::from_hf_json_text(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(file, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(file, "config.json must hold a JSON object");

  ModelConfig cfg;
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) fail(file, "missing required field \"model_type\"");
  cfg.model_type = mt->get<std::string>();
  if (cfg.model_type == "llama") {
    cfg.architecture = "LlamaForCausalLM";
  } else if (cfg.model_type == "qwen2") {
    cfg.architecture = "Qwen2ForCausalLM";
  } else if (cfg.model_type == "mistral") {
    cfg.architecture = "MistralForCausalLM";
  } else {
    fail(file, "model_type \"" + cfg.model_type + "\" is not supported (llama, qwen2, mistral)");
  }
  if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty()) {
    const std::string arch = (*a)[0].get<std::string>();
    if (arch != cfg.architecture)
      fail(file, "architectures[0] \"" + arch + "\" does not match model_type \"" + cfg.model_type +
                     "\" (expected " + cfg.architecture + ")");
  }

  cfg.vocab_size = require_int(j, "vocab_size", file);
  cfg.hidden_size = require_int(j, "hidden_size", file);
  cfg.intermediate_size = require_int(j, "intermediate_size", file);
  cfg.num_hidden_layers = require_int(j, "num_hidden_layers", file);
  cfg.num_attention_heads = require_int(j, "num_attention_heads", file);
  cfg.num_key_value_heads = optional_int(j, "num_key_value_heads", cfg.num_attention_heads, file);
  if (cfg.num_key_value_heads <= 0 || cfg.num_attention_heads % cfg.num_key_value_heads != 0)
    fail(file, "num_attention_heads (" + std::to_string(cfg.num_attention_heads) +
                   ") must be a multiple of num_key_value_heads (" + std::to_string(cfg.num_key_value_heads) +
                   ")");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    cfg.head_dim = require_int(j, "head_dim", file);
  } else {
    if (cfg.hidden_size % cfg.num_attention_heads != 0)
      fail(file, "hidden_size must be a multiple of num_attention_heads when head_dim is not given");
    cfg.head_dim = cfg.hidden_size / cfg.num_attention_heads;
  }
  if (cfg.head_dim % 2 != 0) fail(file, "head_dim must be even for rotary embeddings");
  cfg.max_position_embeddings = optional_int(j, "max_position_embeddings", 2048, file);
  cfg.rms_norm_eps = optional_double(j, "rms_norm_eps", 1e-6, file);
  cfg.rope_theta = optional_double(j, "rope_theta", 10000.0, file);
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    // transformers >= 4.56 folds rope_theta and the scaling rule into rope_parameters.
    cfg.rope_theta = optional_double(*rp, "rope_theta", cfg.rope_theta, file);
    read_rope_scaling(*rp, cfg, file);
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end()) read_rope_scaling(*rs, cfg, file);
  cfg.tie_word_embeddings = j.value("tie_word_embeddings", false);
  // Qwen2 always has q/k/v bias (no config field); Llama reads attention_bias; Mistral has none.
  cfg.attention_bias = cfg.model_type == "qwen2" ? true : j.value("attention_bias", false);
  if (j.value("mlp_bias", false)) fail(file, "mlp_bias = true is not supported");
  const std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu") fail(file, "hidden_act \"" + act + "\" is not supported (only silu)");
  // Sliding-window attention: Qwen2 gates it with use_sliding_window; Mistral uses it whenever set.
  bool sliding = false;
  if (cfg.model_type == "qwen2") sliding = j.value("use_sliding_window", false);
  if (cfg.model_type == "mistral") sliding = j.contains("sliding_window") && !j["sliding_window"].is_null();
  if (sliding) {
    cfg.sliding_window = optional_int(j, "sliding_window", 0, file);
    if (cfg.sliding_window <= 0) fail(file, "sliding_window must be > 0 when sliding-window attention is on");
  }
  cfg.bos_token_id = token_id(j, "bos_token_id", -1, file);
  cfg.eos_token_id = token_id(j, "eos_token_id", -1, file);
  cfg.torch_dtype = j.value("torch_dtype", j.value("dtype", std::string("bfloat16")));
  return cfg;
}

std::string ModelConfig::to_hf_json() const {
  json j;
  j["architectures"] = json::array({architecture});
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling.factor > 0) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope_scaling.factor},
                         {"low_freq_factor", rope_scaling.low_freq_factor},
                         {"high_freq_factor", rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (model_type != "qwen2") j["attention_bias"] = attention_bias;
  if (model_type == "llama") j["mlp_bias"] = false;
  if (model_type == "qwen2") {
    j["use_sliding_window"] = sliding_window > 0;
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  } else if (model_type == "mistral") {
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  }
  j["hidden_act"] = "silu";
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
  j["eos_token_id"] = eos_token_id >= 0 ? json(eos_token_id) : json(nullptr);
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace pulse::model

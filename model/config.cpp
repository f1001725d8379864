// HF config.json <-> ModelConfig for the Llama, Qwen2 and Mistral families.
// Field names and defaults follow transformers' LlamaConfig / Qwen2Config / MistralConfig.
#include "model/config.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "sync/io/atomic_file.h"

namespace pulse::model {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw std::runtime_error(file + ": " + what);
}

/// JSON type of a value in words, for type errors ("a string", "an array").
std::string json_kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a floating-point number";
    default:
      return "a number";
  }
}

[[noreturn]] void wrong_type(const std::string& file, const std::string& key, const char* want,
                             const json& v) {
  fail(file, "field \"" + key + "\" must be " + want + ", got " + json_kind(v) + " (" +
                 v.dump().substr(0, 40) + ")");
}

/// An integer value of field `key` (any JSON integer that fits int64; 1e9 written as a float is refused,
/// as transformers would pass a float to torch).
int64_t as_int(const json& v, const std::string& key, const std::string& file) {
  if (!v.is_number_integer()) wrong_type(file, key, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail(file, "field \"" + key + "\" = " + v.dump() + " is too large");
  return v.get<int64_t>();
}

/// Sizes above this are refused as values before any arithmetic on them (products of two stay in int64);
/// what fits the machine is decided later from the whole shape (app/memory_check.h).
constexpr int64_t kMaxDim = int64_t{1} << 31;

int64_t in_range(int64_t v, const std::string& key, const std::string& file, int64_t lo, int64_t hi) {
  if (v < lo)
    fail(file, "field \"" + key + "\" must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
  if (v > hi)
    fail(file, "field \"" + key + "\" must be <= " + std::to_string(hi) + ", got " + std::to_string(v));
  return v;
}

/// A size: a required integer in 1..2^31.
int64_t require_size(const json& j, const std::string& key, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) fail(file, "missing required field \"" + key + "\"");
  return in_range(as_int(*it, key, file), key, file, 1, kMaxDim);
}

int64_t optional_int(const json& j, const std::string& key, int64_t fallback, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return as_int(*it, key, file);
}

/// An optional size (1..2^31) with `fallback` when absent or null.
int64_t optional_size(const json& j, const std::string& key, int64_t fallback, const std::string& file) {
  return in_range(optional_int(j, key, fallback, file), key, file, 1, kMaxDim);
}

double optional_double(const json& j, const std::string& key, double fallback, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) wrong_type(file, key, "a number", *it);
  return it->get<double>();
}

/// An optional number that must be finite and > 0 (eps, theta, factors: 0 or less gives NaN or Inf).
double optional_positive(const json& j, const std::string& key, double fallback, const std::string& file) {
  const double v = optional_double(j, key, fallback, file);
  if (!(v > 0) || !std::isfinite(v)) {
    std::ostringstream os;
    os << v;
    fail(file, "field \"" + key + "\" must be a finite number > 0, got " + os.str());
  }
  return v;
}

bool optional_bool(const json& j, const std::string& key, bool fallback, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) wrong_type(file, key, "true or false", *it);
  return it->get<bool>();
}

std::string optional_string(const json& j, const std::string& key, const std::string& fallback,
                            const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) wrong_type(file, key, "a string", *it);
  return it->get<std::string>();
}

/// bos/eos may be an int, a list of ints (Llama 3 instruct: first one is used) or null (-1: none); an id
/// must be a row of the embedding.
int64_t token_id(const json& j, const std::string& key, int64_t vocab_size, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1;
  if (!it->is_number_integer() && !it->is_array())
    wrong_type(file, key, "an integer or a list of integers", *it);
  int64_t first = -1;
  if (it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string name = key + "[" + std::to_string(i) + "]";
      const int64_t id = in_range(as_int((*it)[i], name, file), name, file, 0, vocab_size - 1);
      if (i == 0) first = id;
    }
    return first;
  }
  return in_range(as_int(*it, key, file), key, file, 0, vocab_size - 1);
}

void read_rope_scaling(const json& rs, ModelConfig& cfg, const std::string& file, const std::string& where) {
  if (rs.is_null()) return;
  if (!rs.is_object()) wrong_type(file, where, "an object or null", rs);
  const std::string type =
      optional_string(rs, "rope_type", optional_string(rs, "type", "default", file), file);
  if (type == "default") return;
  if (type != "llama3")
    fail(file, where + ".rope_type \"" + type + "\" is not supported (only \"llama3\" and \"default\")");
  auto& s = cfg.rope_scaling;
  if (!rs.contains("factor")) fail(file, "missing required field \"" + where + ".factor\"");
  s.factor = optional_positive(rs, "factor", 0.0, file + ": " + where);
  s.low_freq_factor = optional_positive(rs, "low_freq_factor", 1.0, file + ": " + where);
  s.high_freq_factor = optional_positive(rs, "high_freq_factor", 4.0, file + ": " + where);
  // The llama3 rule interpolates over (high - low): equal factors divide by zero.
  if (!(s.high_freq_factor > s.low_freq_factor))
    fail(file, where + ".high_freq_factor must be > low_freq_factor");
  s.original_max_position_embeddings =
      optional_size(rs, "original_max_position_embeddings", 8192, file + ": " + where);
}

}  // namespace

ModelConfig ModelConfig::from_hf_json(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "config.json").string();
  // Real config.json files are a few KB: a huge one is refused by its size, not read into memory.
  constexpr uintmax_t kMaxBytes = 16u << 20;
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(file, ec);
  if (!ec && size > kMaxBytes)
    fail(file, "is " + std::to_string(size) + " bytes; a model config.json is at most " +
                   std::to_string(kMaxBytes) + " bytes");
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
  if (mt == j.end() || mt->is_null()) fail(file, "missing required field \"model_type\"");
  cfg.model_type = optional_string(j, "model_type", "", file);
  if (cfg.model_type == "llama") {
    cfg.architecture = "LlamaForCausalLM";
  } else if (cfg.model_type == "qwen2") {
    cfg.architecture = "Qwen2ForCausalLM";
  } else if (cfg.model_type == "mistral") {
    cfg.architecture = "MistralForCausalLM";
  } else {
    fail(file, "model_type \"" + cfg.model_type + "\" is not supported (llama, qwen2, mistral)");
  }
  if (auto a = j.find("architectures"); a != j.end() && !a->is_null()) {
    if (!a->is_array()) wrong_type(file, "architectures", "a list of strings", *a);
    for (size_t i = 0; i < a->size(); ++i)
      if (!(*a)[i].is_string())
        wrong_type(file, "architectures[" + std::to_string(i) + "]", "a string", (*a)[i]);
    if (!a->empty() && (*a)[0].get<std::string>() != cfg.architecture)
      fail(file, "architectures[0] \"" + (*a)[0].get<std::string>() + "\" does not match model_type \"" +
                     cfg.model_type + "\" (expected " + cfg.architecture + ")");
  }

  cfg.vocab_size = require_size(j, "vocab_size", file);
  cfg.hidden_size = require_size(j, "hidden_size", file);
  cfg.intermediate_size = require_size(j, "intermediate_size", file);
  cfg.num_hidden_layers = require_size(j, "num_hidden_layers", file);
  cfg.num_attention_heads = require_size(j, "num_attention_heads", file);
  cfg.num_key_value_heads = optional_size(j, "num_key_value_heads", cfg.num_attention_heads, file);
  if (cfg.num_attention_heads % cfg.num_key_value_heads != 0)
    fail(file, "num_attention_heads (" + std::to_string(cfg.num_attention_heads) +
                   ") must be a multiple of num_key_value_heads (" + std::to_string(cfg.num_key_value_heads) +
                   ")");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    cfg.head_dim = require_size(j, "head_dim", file);
  } else {
    if (cfg.hidden_size % cfg.num_attention_heads != 0)
      fail(file, "hidden_size (" + std::to_string(cfg.hidden_size) +
                     ") must be a multiple of num_attention_heads (" +
                     std::to_string(cfg.num_attention_heads) + ") when head_dim is not given");
    cfg.head_dim = cfg.hidden_size / cfg.num_attention_heads;
  }
  if (cfg.head_dim % 2 != 0) fail(file, "head_dim must be even for rotary embeddings");
  cfg.max_position_embeddings = optional_size(j, "max_position_embeddings", 2048, file);
  cfg.rms_norm_eps = optional_positive(j, "rms_norm_eps", 1e-6, file);
  cfg.rope_theta = optional_positive(j, "rope_theta", 10000.0, file);
  if (auto rp = j.find("rope_parameters"); rp != j.end() && !rp->is_null()) {
    // transformers >= 4.56 folds rope_theta and the scaling rule into rope_parameters.
    if (!rp->is_object()) wrong_type(file, "rope_parameters", "an object or null", *rp);
    cfg.rope_theta = optional_positive(*rp, "rope_theta", cfg.rope_theta, file + ": rope_parameters");
    read_rope_scaling(*rp, cfg, file, "rope_parameters");
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end()) read_rope_scaling(*rs, cfg, file, "rope_scaling");
  cfg.tie_word_embeddings = optional_bool(j, "tie_word_embeddings", false, file);
  // Qwen2 always has q/k/v bias (no config field); Llama reads attention_bias; Mistral has none.
  const bool attention_bias = optional_bool(j, "attention_bias", false, file);
  cfg.attention_bias = cfg.model_type == "qwen2" ? true : attention_bias;
  if (optional_bool(j, "mlp_bias", false, file)) fail(file, "mlp_bias = true is not supported");
  const std::string act = optional_string(j, "hidden_act", "silu", file);
  if (act != "silu") fail(file, "hidden_act \"" + act + "\" is not supported (only silu)");
  // Sliding-window attention: Qwen2 gates it with use_sliding_window; Mistral uses it whenever set.
  bool sliding = false;
  const bool use_sliding = optional_bool(j, "use_sliding_window", false, file);
  if (cfg.model_type == "qwen2") sliding = use_sliding;
  if (cfg.model_type == "mistral") sliding = j.contains("sliding_window") && !j["sliding_window"].is_null();
  if (sliding) {
    cfg.sliding_window = optional_int(j, "sliding_window", 0, file);
    if (cfg.sliding_window <= 0) fail(file, "sliding_window must be > 0 when sliding-window attention is on");
  } else if (auto sw = j.find("sliding_window"); sw != j.end() && !sw->is_null()) {
    as_int(*sw, "sliding_window", file);  // unused, but a wrong type is still named
  }
  cfg.bos_token_id = token_id(j, "bos_token_id", cfg.vocab_size, file);
  cfg.eos_token_id = token_id(j, "eos_token_id", cfg.vocab_size, file);
  cfg.torch_dtype = optional_string(j, "torch_dtype", optional_string(j, "dtype", "bfloat16", file), file);
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

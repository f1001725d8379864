// Architecture hyper-parameters of a Llama/Qwen2/Mistral-family causal LM, read from HF config.json.
#pragma once
#include <cstdint>
#include <string>

namespace pulse::model {

/// llama3-style RoPE frequency scaling (rope_scaling.rope_type == "llama3"); factor 0 = none.
struct RopeScaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

/// Field names and meanings follow HF transformers' LlamaConfig / Qwen2Config.
struct ModelConfig {
  std::string architecture = "LlamaForCausalLM";  ///< or Qwen2ForCausalLM, MistralForCausalLM
  std::string model_type = "llama";               ///< "llama" | "qwen2" | "mistral"
  int64_t vocab_size = 32000;
  int64_t hidden_size = 256;        ///< C
  int64_t intermediate_size = 688;  ///< SwiGLU inner width
  int64_t num_hidden_layers = 4;    ///< L
  int64_t num_attention_heads = 4;  ///< n_head
  int64_t num_key_value_heads = 4;  ///< n_head_kv (GQA when < n_head)
  int64_t head_dim = 64;            ///< hidden_size / n_head unless given
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  ///< q/k/v bias (true for Qwen2)
  int64_t bos_token_id = 1, eos_token_id = 2;
  std::string torch_dtype = "bfloat16";
  /// Sliding-window attention width (Mistral, Qwen2 with use_sliding_window); 0 = none. Sequences
  /// longer than this are rejected at forward time rather than computed with the wrong mask.
  int64_t sliding_window = 0;

  /// Reads config.json (a file or a folder holding one). Unknown architectures and unsupported
  /// fields (e.g. sliding-window attention in use, non-llama3 rope_scaling) throw std::runtime_error
  /// naming the file and field, as do values out of range (sizes < 1 or > 2^31, eps or theta <= 0,
  /// heads not dividing, token ids outside the vocabulary) and values of the wrong JSON type. A file over
  /// 16 MiB is refused by its size.
  static ModelConfig from_hf_json(const std::string& path);
  /// The same from config.json text; `source` names it in errors.
  static ModelConfig from_hf_json_text(const std::string& text, const std::string& source);
  /// HF-compatible config.json text.
  std::string to_hf_json() const;
};

}  // namespace pulse::model

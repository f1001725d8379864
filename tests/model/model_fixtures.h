// Tiny configs for the model tests (fast on two cores).
#pragma once
#include "model/config.h"

namespace pulse::test {

/// A 2-layer GQA Llama (or Qwen2 with q/k/v bias) small enough for exhaustive checks.
inline model::ModelConfig tiny_config(const std::string& family = "llama", bool tied = true) {
  model::ModelConfig c;
  c.model_type = family;
  c.architecture = family == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.attention_bias = family == "qwen2";
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = tied;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

}  // namespace pulse::test

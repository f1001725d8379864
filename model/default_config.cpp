// Embedded copy of configs/tiny-llama.json; tests/model/test_config.cpp checks the two stay identical.
#include "model/default_config.h"

namespace pulse::model {

const std::string& tiny_llama_config_json() {
  static const std::string text = R"JSON({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "vocab_size": 2048,
  "hidden_size": 256,
  "intermediate_size": 688,
  "num_hidden_layers": 4,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 64,
  "max_position_embeddings": 2048,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "rope_scaling": null,
  "tie_word_embeddings": true,
  "attention_bias": false,
  "mlp_bias": false,
  "hidden_act": "silu",
  "initializer_range": 0.02,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "pad_token_id": 3,
  "torch_dtype": "bfloat16"
}
)JSON";
  return text;
}

ModelConfig tiny_llama_config() {
  return ModelConfig::from_hf_json_text(tiny_llama_config_json(), "configs/tiny-llama.json (embedded)");
}

}  // namespace pulse::model

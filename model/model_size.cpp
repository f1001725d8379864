// Parameter count from a config; see model_size.h.
#include "model/model_size.h"

namespace pulse::model {

double parameter_count(const ModelConfig& cfg) {
  const double V = static_cast<double>(cfg.vocab_size), C = static_cast<double>(cfg.hidden_size),
               I = static_cast<double>(cfg.intermediate_size), L = static_cast<double>(cfg.num_hidden_layers),
               q = static_cast<double>(cfg.num_attention_heads * cfg.head_dim),
               kv = static_cast<double>(cfg.num_key_value_heads * cfg.head_dim);
  const double attention = C * q + 2 * C * kv + q * C + (cfg.attention_bias ? q + 2 * kv : 0.0);
  const double layer = attention + 3 * C * I + 2 * C;
  return V * C + L * layer + C + (cfg.tie_word_embeddings ? 0.0 : V * C);
}

}  // namespace pulse::model

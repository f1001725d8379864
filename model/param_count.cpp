#include "model/param_count.h"

namespace pulse::model {

int64_t parameter_count(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim;
  const int64_t attention = h * q + 2 * h * kv + q * h + (c.attention_bias ? q + 2 * kv : 0);
  const int64_t layer = attention + 3 * h * c.intermediate_size + 2 * h;
  return c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * layer + h;
}

}  // namespace pulse::model

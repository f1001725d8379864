// What a model of a given shape weighs, from its config alone (no LibTorch): parameter counts for the
// memory check before anything is allocated (app/memory_check.h).
#pragma once
#include "model/config.h"

namespace pulse::model {

/// Parameters of the Transformer that `cfg` builds (model/transformer.h): token embedding
/// [vocab_size, hidden_size]; per layer q/k/v/o projections (q/k/v biases when attention_bias), the
/// SwiGLU MLP (3 x hidden_size x intermediate_size) and two RMSNorm weights; the final norm; lm_head
/// unless tie_word_embeddings. A double: absurd shapes (10^6 layers of 10^9 wide) overflow int64, and the
/// count is only compared with memory. Thread-safe.
double parameter_count(const ModelConfig& cfg);

}  // namespace pulse::model

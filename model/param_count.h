// How many parameters a ModelConfig builds, without building it (LibTorch-free): for the configs of real
// model sizes (configs/qwen2.5-*.json), whose models are too large to instantiate in a test.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace pulse::model {

/// Parameters of the model `c` builds (model/transformer.h): the embedding; per layer q/k/v/o (q/k/v bias
/// when attention_bias), the SwiGLU MLP and two RMSNorms; the final norm; lm_head unless tied. 494,032,768
/// for Qwen2.5-0.5B's config.json. Pure function.
int64_t parameter_count(const ModelConfig& c);

}  // namespace pulse::model

// The embedded default model: configs/tiny-llama.json compiled into the binary.
#pragma once
#include <string>

#include "model/config.h"

namespace pulse::model {

/// Text of configs/tiny-llama.json (an HF config.json): a 4-layer, 256-wide Llama with GQA (4 query /
/// 2 KV heads), tied embeddings and a 2048-piece vocabulary matching train_sentencepiece_bpe(.., 2048, ..)
/// (ids 0 <unk>, 1 <s>, 2 </s>, 3 <pad>). About 3.4 M parameters.
const std::string& tiny_llama_config_json();

/// tiny_llama_config_json() parsed.
ModelConfig tiny_llama_config();

}  // namespace pulse::model

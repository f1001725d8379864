// HF safetensors checkpoints <-> Transformer parameters, by HF tensor name (the module tree mirrors HF,
// so named_parameters() keys are the checkpoint keys). File I/O goes through sync/safetensors.h.
#pragma once
#include <string>

#include "model/transformer.h"

namespace pulse::model {

/// Copies every parameter of `model` from the checkpoint at `path` (a .safetensors file, or a folder with
/// model.safetensors or a sharded model.safetensors.index.json), converting BF16/F16/F32/F64 to the
/// model's dtype and device. Every expected name must be present with the exact shape (the embedding's
/// vocab_size rows may exceed what the tokenizer uses). Ignored: rotary "inv_freq" buffers and
/// "lm_head.weight" when embeddings are tied. Throws std::runtime_error naming the path and listing
/// missing, unexpected and mis-shaped tensors.
void load_hf_weights(TransformerImpl& model, const std::string& path);

/// Writes `dir`/config.json and `dir`/model.safetensors (all parameters in BF16, HF names, metadata
/// {"format": "pt"}), each atomically; creates `dir` if needed. The result opens with HF
/// AutoModelForCausalLM.from_pretrained(dir). Throws std::runtime_error naming the path.
void save_hf_checkpoint(const TransformerImpl& model, const std::string& dir);

/// config.json + weights from an HF folder into a new model with the given compute dtype (on the CPU).
Transformer load_hf_model(const std::string& dir, torch::Dtype compute_dtype = torch::kBFloat16);

}  // namespace pulse::model

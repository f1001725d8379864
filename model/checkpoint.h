// HF safetensors checkpoints <-> Transformer parameters, by HF tensor name (the module tree mirrors HF,
// so named_parameters() keys are the checkpoint keys). File I/O goes through sync/io/safetensors.h.
#pragma once
#include <string>

#include "model/transformer.h"

namespace pulse::model {

/// Copies every parameter of `model` from the checkpoint at `path` (a .safetensors file, or a folder with
/// model.safetensors or a sharded model.safetensors.index.json), converting BF16/F16/F32/F64 to the
/// model's dtype and device. Every expected name must be present with the exact shape (the embedding's
/// vocab_size rows may exceed what the tokenizer uses). Ignored: rotary "inv_freq" buffers and
/// "lm_head.weight" when embeddings are tied. Throws std::runtime_error naming the path and listing
/// missing, unexpected and mis-shaped tensors. A tensor holding NaN/Inf (in the file, or after the cast to
/// the model's dtype, e.g. an F32 value beyond BF16's range) is refused before it is copied, with
/// require_finite's message ("PATH: tensor 'NAME' element 1234 is NaN").
void load_hf_weights(TransformerImpl& model, const std::string& path);

/// Index (flat, row-major) of the first NaN/Inf element of `t` (any floating dtype, any device), or -1 when
/// every element is finite. One isfinite-all reduction when all are finite; the index search runs only on
/// failure.
int64_t first_nonfinite(const at::Tensor& t);
/// Throws std::runtime_error "FILE: tensor 'NAME' element 1234 is NaN" (or "is +Inf" / "is -Inf") for the
/// first non-finite element of `t`, with `context` appended when not empty (" after the cast to BFloat16").
void require_finite(const at::Tensor& t, const std::string& file, const std::string& name,
                    const std::string& context = "");

/// Writes `dir`/config.json and `dir`/model.safetensors (all parameters in BF16, HF names, metadata
/// {"format": "pt"}), each atomically; creates `dir` if needed. The result opens with HF
/// AutoModelForCausalLM.from_pretrained(dir). Throws std::runtime_error naming the path.
void save_hf_checkpoint(const TransformerImpl& model, const std::string& dir);

/// config.json + weights from an HF folder into a new model with the given compute dtype (on the CPU).
Transformer load_hf_model(const std::string& dir, torch::Dtype compute_dtype = torch::kBFloat16);

}  // namespace pulse::model

// The fixed-shape decode paths of model::generate(): a static KV cache, sampling on the device, and
// optionally each step replayed as a CUDA graph (model/decode_mode.h: Static, CudaGraph).
#pragma once
#include <c10/core/Device.h>

#include <vector>

#include "model/generate.h"

namespace pulse::model {

/// generate() on fixed shapes. The prompts are prefilled as on the eager path (one forward_cached over the
/// left-padded batch into a cache of capacity Tp + max_new_tokens rounded up to kStaticSlotBucket); then
/// every step runs TransformerImpl::decode_step_fixed on all rows of the batch and samples on the device
/// (sample_tokens_with_uniforms, the eager path's ops). Rows that stopped are computed and ignored, as
/// transformers' static cache does, until half or more of a batch of >= kStaticCompactMinRows rows have
/// stopped: the batch is then compacted to its live rows (KVCache::select_rows) and steps of the new size
/// run (and are captured) from there. Per step the host copies in the rows' uniforms and positions and
/// reads back their tokens (stop ids and stop strings are checked on the host); the loop ends when every
/// row has stopped. With cuda_graphs, the step of each (batch size, attention span) is captured on first
/// use (model/cuda_graph_step.h) and replayed after. Requests are checked by the caller (generate());
/// fills stats' prefill_ms, decode_ms, capture_ms, graphs, compactions, steps. Errors:
/// std::invalid_argument for bad prompts, std::out_of_range past a sliding window, CudaGraphCaptureError
/// when a capture fails, c10::Error from LibTorch.
std::vector<GenerationResult> generate_fixed_shape(TransformerImpl& model,
                                                   const std::vector<GenerationRequest>& requests,
                                                   const SamplingParams& params, const Tokenizer* tokenizer,
                                                   bool cuda_graphs, GenerateStats& stats);

/// The path generate() takes for `mode` on `device`: Auto is Eager on the CPU and CudaGraph on a CUDA
/// device when cuda_graphs_available() (model/cuda_graph_step.h), else Static (also after a capture
/// failed under Auto in this process: generate() then logs why and decodes static); the others as given.
/// Throws std::invalid_argument for CudaGraph on a non-CUDA device or in a build without CUDA graphs.
DecodeMode resolve_decode_mode(DecodeMode mode, const c10::Device& device);

}  // namespace pulse::model

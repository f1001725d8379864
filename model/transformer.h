// Llama/Qwen2/Mistral-family decoder-only transformer in LibTorch, module tree mirroring HF transformers
// (modeling_llama.py / modeling_qwen2.py) so that named_parameters() keys are the HF tensor names.
//
// Shape legend: B batch rows, T new tokens, S cached + new key slots, C hidden_size, V vocab_size,
// H num_attention_heads, Hkv num_key_value_heads, D head_dim.
//
// Llama vs Qwen2: the only architectural difference is Qwen2's q/k/v bias (ModelConfig::attention_bias).
// Mistral is Llama with optional sliding-window attention (rejected past the window, see config.h).
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "model/config.h"

namespace pulse::model {

/// RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467) computed in FP32 and cast back, as HF LlamaRMSNorm.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);  ///< [..., C] -> same shape and dtype
  torch::Tensor weight;                           ///< [C], HF name "<prefix>.weight"

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

/// Per-layer key/value cache for incremental decoding. Slots are shared by all rows: a left-padded
/// batch writes slot `length` for every row at each step; key_mask marks slots that hold real tokens.
struct KVCache {
  std::vector<torch::Tensor> k, v;  ///< per layer [B, Hkv, S_max, D], compute dtype
  torch::Tensor key_mask;           ///< [B, S_max] bool
  int64_t length = 0;               ///< slots filled so far
  /// Fixed-shape decode (TransformerImpl::decode_step_fixed) while defined: [1] int64 on the cache's
  /// device, the slot every row writes this step; attention then reads the first `span` slots.
  torch::Tensor write_slot;
  int64_t span = 0;
  int64_t capacity() const;  ///< S_max
  int64_t batch() const;     ///< B
  /// Keeps only `rows` ([B'] int64, on the cache's device): drops finished requests from the batch.
  void select_rows(const torch::Tensor& rows);
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& cfg);
  /// x [B,T,C]; cos/sin [B,T,D] in x's dtype; mask [B,1,T,S] bool (true = may attend).
  /// With cache: appends this step's k/v at slots [cache_length, cache_length+T) of layer `layer`.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, KVCache* cache, int64_t layer);
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  int64_t n_head_, n_head_kv_, head_dim_;
};
TORCH_MODULE(Attention);

/// SwiGLU MLP (Shazeer 2020, arXiv:2002.05202): down(silu(gate(x)) * up(x)).
class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, KVCache* cache, int64_t layer);
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

/// HF "model." prefix: embeddings, layers, final norm.
class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const ModelConfig& cfg);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
};
TORCH_MODULE(Decoder);

/// Causal LM: Decoder + lm_head (tied to embed_tokens when cfg.tie_word_embeddings, then no
/// "lm_head.weight" parameter exists). Parameters are created in compute_dtype on the CPU, initialised
/// as HF does (normal(0, 0.02) for Linear/Embedding weights, zero biases, unit norms) from torch's global
/// RNG; move with ->to(device). Not thread-safe: one forward at a time per module.
class TransformerImpl : public torch::nn::Module {
 public:
  /// compute_dtype: kBFloat16 (default), kFloat32 or kFloat16. Throws std::invalid_argument otherwise.
  explicit TransformerImpl(const ModelConfig& cfg, torch::Dtype compute_dtype = torch::kBFloat16);

  /// Full forward, no cache. input_ids [B,T] int64; attention_mask [B,T] int64 (1 = token, 0 = left
  /// padding). Positions come from the mask (cumsum - 1), so left-padded rows see positions 0.. on their
  /// real tokens. Returns logits [B,T,V] float32 (padding positions hold finite garbage).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  /// An empty cache for `batch` rows and `max_slots` key slots, on the parameters' device and dtype.
  KVCache new_cache(int64_t batch, int64_t max_slots) const;

  /// Incremental forward: appends T new tokens per row to `cache`. input_ids/attention_mask/position_ids
  /// [B,T] int64 for the new tokens only (mask 0 = padding slot). Returns logits [B,T,V] float32, or
  /// [B,1,V] for the last position only when last_only (saves the lm_head on prompt tokens).
  /// Throws std::out_of_range when the cache has fewer than T free slots.
  torch::Tensor forward_cached(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                               const torch::Tensor& position_ids, KVCache& cache, bool last_only = false);

  /// One decode step on fixed shapes, for the static and CUDA-graph paths (model/static_decode.h): every
  /// row feeds token_ids[b] at position_ids[b] (both [B] int64 on the model's device), writes its k/v at
  /// slot `slot` ([1] int64 on the device, the same for every row, as the left-padded batch shares slots)
  /// and attends over the first `span` slots, those marked in cache.key_mask (the slot is marked here).
  /// Returns logits [B,V] float32. No host synchronisation and no allocation that depends on the values,
  /// so a CUDA graph can capture it; shapes depend on B and span only. The caller keeps slot < span <=
  /// capacity (not checked: a check would read the device). Same math as forward_cached() with T = 1.
  torch::Tensor decode_step_fixed(const torch::Tensor& token_ids, const torch::Tensor& position_ids,
                                  const torch::Tensor& slot, KVCache& cache, int64_t span);

  /// Final hidden states [B,T,C] in compute dtype (after model.norm), for callers that apply the head
  /// themselves (e.g. chunked log-probs over a large vocabulary).
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  /// hidden [.., C] -> logits [.., V] float32 through lm_head (or the tied embedding).
  torch::Tensor logits_from_hidden(const torch::Tensor& hidden);

  const ModelConfig& config() const { return cfg_; }
  torch::Dtype compute_dtype() const { return dtype_; }
  torch::Device device() const;
  /// Number of parameter elements (tied weights counted once).
  int64_t num_parameters() const;

  Decoder model{nullptr};
  torch::nn::Linear lm_head{nullptr};  ///< null when tied

 private:
  torch::Tensor run(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                    const torch::Tensor& mask, KVCache* cache);
  std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& position_ids) const;

  ModelConfig cfg_;
  torch::Dtype dtype_;
  torch::Tensor inv_freq_;  ///< [D/2] float32 buffer (not a parameter, not saved)
  /// inv_freq_ on the device last used (rope() copies it once, not every step: a CUDA graph cannot
  /// capture a host-to-device copy).
  mutable torch::Tensor inv_freq_device_;
};
TORCH_MODULE(Transformer);

/// RoPE inverse frequencies [D/2] float32: theta^(-2i/D), with the llama3 scaling rule applied when
/// cfg.rope_scaling.factor > 0 (transformers' _compute_llama3_parameters).
torch::Tensor rope_inv_freq(const ModelConfig& cfg);

}  // namespace pulse::model

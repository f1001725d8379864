// Decoder-only transformer; see transformer.h. Reference: transformers' modeling_llama.py (LlamaModel,
// LlamaAttention eager path, LlamaRotaryEmbedding) and modeling_qwen2.py (same graph plus q/k/v bias).
#include "model/transformer.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace pulse::model {
namespace {

/// HF rotate_half: [x1, x2] -> [-x2, x1] over the last dim split in halves (the "half-split" RoPE
/// convention, not the interleaved one of the original Meta code).
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

}  // namespace

// ---- KVCache ------------------------------------------------------------------------------------------

int64_t KVCache::capacity() const {
  return key_mask.defined() ? key_mask.size(1) : 0;
}
int64_t KVCache::batch() const {
  return key_mask.defined() ? key_mask.size(0) : 0;
}

void KVCache::select_rows(const torch::Tensor& rows) {
  for (auto& t : k) t = t.index_select(0, rows);
  for (auto& t : v) t = t.index_select(0, rows);
  key_mask = key_mask.index_select(0, rows);
}

// ---- modules ------------------------------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // As HF: normalise in FP32, cast back to the input dtype, then scale by the weight.
  auto h = x.to(torch::kFloat32);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * h.to(x.scalar_type());
}

AttentionImpl::AttentionImpl(const ModelConfig& cfg)
    : n_head_(cfg.num_attention_heads), n_head_kv_(cfg.num_key_value_heads), head_dim_(cfg.head_dim) {
  q_proj = register_module("q_proj", make_linear(cfg.hidden_size, n_head_ * head_dim_, cfg.attention_bias));
  k_proj =
      register_module("k_proj", make_linear(cfg.hidden_size, n_head_kv_ * head_dim_, cfg.attention_bias));
  v_proj =
      register_module("v_proj", make_linear(cfg.hidden_size, n_head_kv_ * head_dim_, cfg.attention_bias));
  o_proj = register_module("o_proj", make_linear(n_head_ * head_dim_, cfg.hidden_size, false));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, const torch::Tensor& mask, KVCache* cache,
                                     int64_t layer) {
  const int64_t B = x.size(0), T = x.size(1), H = n_head_, Hkv = n_head_kv_, D = head_dim_;
  const int64_t rep = H / Hkv;
  auto q = q_proj(x).view({B, T, H, D}).transpose(1, 2);    // [B,H,T,D]
  auto k = k_proj(x).view({B, T, Hkv, D}).transpose(1, 2);  // [B,Hkv,T,D]
  auto v = v_proj(x).view({B, T, Hkv, D}).transpose(1, 2);
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // [B,1,T,D]
  q = q * c + rotate_half(q) * s;
  k = k * c + rotate_half(k) * s;
  if (cache != nullptr && cache->write_slot.defined()) {
    // Fixed-shape step (decode_step_fixed): T = 1, the slot index lives on the device.
    cache->k[layer].index_copy_(2, cache->write_slot, k);
    cache->v[layer].index_copy_(2, cache->write_slot, v);
    k = cache->k[layer].narrow(2, 0, cache->span);
    v = cache->v[layer].narrow(2, 0, cache->span);
  } else if (cache != nullptr) {
    const int64_t start = cache->length;
    cache->k[layer].narrow(2, start, T).copy_(k);
    cache->v[layer].narrow(2, start, T).copy_(v);
    k = cache->k[layer].narrow(2, 0, start + T);  // [B,Hkv,S,D], a view: no copy
    v = cache->v[layer].narrow(2, 0, start + T);
  }
  const int64_t S = k.size(2);
  // GQA without materialising repeated k/v: query head h uses kv head h / rep (HF repeat_kv order), so
  // group the rep query heads of one kv head along the row dim: [B,Hkv,rep*T,D] x [B,Hkv,D,S].
  auto qg = q.reshape({B, Hkv, rep * T, D});
  auto scores = torch::matmul(qg, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));
  // Softmax in FP32 (HF eager attention); masked keys get the lowest float so that a row with no
  // visible key (a padding query) stays finite instead of NaN.
  scores = scores.to(torch::kFloat32).view({B, Hkv, rep, T, S});
  scores = scores.masked_fill(mask.logical_not().unsqueeze(1), std::numeric_limits<float>::lowest());
  auto probs = torch::softmax(scores, -1).to(q.scalar_type()).view({B, Hkv, rep * T, S});
  auto out = torch::matmul(probs, v);  // [B,Hkv,rep*T,D]
  out = out.view({B, H, T, D}).transpose(1, 2).reshape({B, T, H * D});
  return o_proj(out);
}

MLPImpl::MLPImpl(const ModelConfig& cfg) {
  gate_proj = register_module("gate_proj", make_linear(cfg.hidden_size, cfg.intermediate_size, false));
  up_proj = register_module("up_proj", make_linear(cfg.hidden_size, cfg.intermediate_size, false));
  down_proj = register_module("down_proj", make_linear(cfg.intermediate_size, cfg.hidden_size, false));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& cfg) {
  self_attn = register_module("self_attn", Attention(cfg));
  mlp = register_module("mlp", MLP(cfg));
  input_layernorm = register_module("input_layernorm", RMSNorm(cfg.hidden_size, cfg.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(cfg.hidden_size, cfg.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin, const torch::Tensor& mask, KVCache* cache,
                                        int64_t layer) {
  auto h = x + self_attn(input_layernorm(x), cos, sin, mask, cache, layer);
  return h + mlp(post_attention_layernorm(h));
}

DecoderImpl::DecoderImpl(const ModelConfig& cfg) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(cfg.vocab_size, cfg.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) layers->push_back(DecoderLayer(cfg));
  norm = register_module("norm", RMSNorm(cfg.hidden_size, cfg.rms_norm_eps));
}

// ---- RoPE ---------------------------------------------------------------------------------------------

torch::Tensor rope_inv_freq(const ModelConfig& cfg) {
  const int64_t D = cfg.head_dim;
  // Same op order as HF: base ** (arange(0, D, 2).float() / D), in FP32.
  auto exps = torch::arange(0, D, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(D);
  auto inv_freq = 1.0 / torch::pow(cfg.rope_theta, exps);
  const auto& rs = cfg.rope_scaling;
  if (rs.factor > 0) {
    // Llama 3.1 rule: keep high frequencies, divide low ones by factor, interpolate in between.
    const double old_len = static_cast<double>(rs.original_max_position_embeddings);
    const double low_wavelen = old_len / rs.low_freq_factor, high_wavelen = old_len / rs.high_freq_factor;
    auto wavelen = 2.0 * M_PI / inv_freq;
    auto scaled = torch::where(wavelen > low_wavelen, inv_freq / rs.factor, inv_freq);
    auto smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
    auto smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled;
    auto medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    inv_freq = torch::where(medium, smoothed, scaled);
  }
  return inv_freq.to(torch::kFloat32);
}

// ---- Transformer --------------------------------------------------------------------------------------

TransformerImpl::TransformerImpl(const ModelConfig& cfg, torch::Dtype compute_dtype)
    : cfg_(cfg), dtype_(compute_dtype) {
  if (compute_dtype != torch::kBFloat16 && compute_dtype != torch::kFloat32 &&
      compute_dtype != torch::kFloat16)
    throw std::invalid_argument("TransformerImpl: compute_dtype must be bfloat16, float32 or float16");
  if (cfg.num_attention_heads % cfg.num_key_value_heads != 0)
    throw std::invalid_argument(
        "TransformerImpl: num_attention_heads must be a multiple of num_key_value_heads");
  model = register_module("model", Decoder(cfg));
  if (!cfg.tie_word_embeddings)
    lm_head = register_module("lm_head", make_linear(cfg.hidden_size, cfg.vocab_size, false));
  inv_freq_ = rope_inv_freq(cfg);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      const auto& name = p.key();
      auto& t = p.value();
      if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
        t.zero_();
      } else if (name.find("norm.weight") != std::string::npos) {
        t.fill_(1.0);
      } else {
        t.normal_(0.0, 0.02);
      }
    }
  }
  to(compute_dtype);
}

torch::Device TransformerImpl::device() const {
  return parameters().front().device();
}

int64_t TransformerImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

KVCache TransformerImpl::new_cache(int64_t batch, int64_t max_slots) const {
  KVCache cache;
  auto opts = torch::TensorOptions().dtype(dtype_).device(device());
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    cache.k.push_back(torch::zeros({batch, cfg_.num_key_value_heads, max_slots, cfg_.head_dim}, opts));
    cache.v.push_back(torch::zeros({batch, cfg_.num_key_value_heads, max_slots, cfg_.head_dim}, opts));
  }
  cache.key_mask = torch::zeros({batch, max_slots}, opts.dtype(torch::kBool));
  return cache;
}

std::pair<torch::Tensor, torch::Tensor> TransformerImpl::rope(const torch::Tensor& position_ids) const {
  if (!inv_freq_device_.defined() || inv_freq_device_.device() != position_ids.device())
    inv_freq_device_ = inv_freq_.to(position_ids.device());
  const auto& inv = inv_freq_device_;
  auto freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv;  // [B,T,D/2]
  auto emb = torch::cat({freqs, freqs}, -1);                          // [B,T,D]
  return {emb.cos().to(dtype_), emb.sin().to(dtype_)};
}

torch::Tensor TransformerImpl::run(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                   const torch::Tensor& mask, KVCache* cache) {
  auto [cos, sin] = rope(position_ids);
  auto h = model->embed_tokens(input_ids);
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i)
    h = model->layers[i]->as<DecoderLayerImpl>()->forward(h, cos, sin, mask, cache, i);
  return model->norm(h);
}

torch::Tensor TransformerImpl::logits_from_hidden(const torch::Tensor& hidden) {
  auto logits =
      lm_head ? lm_head(hidden) : torch::nn::functional::linear(hidden, model->embed_tokens->weight);
  return logits.to(torch::kFloat32);
}

torch::Tensor TransformerImpl::hidden_states(const torch::Tensor& input_ids,
                                             const torch::Tensor& attention_mask) {
  TORCH_CHECK(input_ids.dim() == 2 && attention_mask.sizes() == input_ids.sizes(),
              "Transformer: input_ids and attention_mask must both be [B,T]");
  const auto dev = device();
  auto ids = input_ids.to(dev, torch::kInt64);
  auto am = attention_mask.to(dev, torch::kInt64);
  const int64_t T = ids.size(1);
  if (cfg_.sliding_window > 0 && T > cfg_.sliding_window)
    throw std::out_of_range("Transformer: sequence of " + std::to_string(T) +
                            " tokens exceeds sliding_window " + std::to_string(cfg_.sliding_window));
  auto positions = (am.cumsum(-1) - 1).clamp_min(0);
  auto causal = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(dev)).tril();
  auto mask = causal.unsqueeze(0).unsqueeze(0).logical_and(am.to(torch::kBool).unsqueeze(1).unsqueeze(1));
  return run(ids, positions, mask, nullptr);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  return logits_from_hidden(hidden_states(input_ids, attention_mask));
}

torch::Tensor TransformerImpl::decode_step_fixed(const torch::Tensor& token_ids,
                                                 const torch::Tensor& position_ids, const torch::Tensor& slot,
                                                 KVCache& cache, int64_t span) {
  TORCH_CHECK(
      token_ids.dim() == 1 && position_ids.sizes() == token_ids.sizes() && token_ids.size(0) == cache.batch(),
      "Transformer::decode_step_fixed: token_ids and position_ids must be [B] for the cache's B");
  TORCH_CHECK(span > 0 && span <= cache.capacity(), "Transformer::decode_step_fixed: span ", span,
              " outside the cache's 1..", cache.capacity());
  const int64_t B = token_ids.size(0);
  cache.key_mask.index_fill_(1, slot, true);
  // The query sits at `slot` and every slot before it is either a real token (marked) or left padding
  // (unmarked); slots after it are unmarked: the key mask alone is the causal mask.
  auto mask = cache.key_mask.narrow(1, 0, span).view({B, 1, 1, span});
  cache.write_slot = slot;
  cache.span = span;
  torch::Tensor h;
  try {
    h = run(token_ids.view({B, 1}), position_ids.view({B, 1}), mask, &cache);
  } catch (...) {
    cache.write_slot = torch::Tensor();
    throw;
  }
  cache.write_slot = torch::Tensor();
  return logits_from_hidden(h).squeeze(1);
}

torch::Tensor TransformerImpl::forward_cached(const torch::Tensor& input_ids,
                                              const torch::Tensor& attention_mask,
                                              const torch::Tensor& position_ids, KVCache& cache,
                                              bool last_only) {
  TORCH_CHECK(input_ids.dim() == 2 && attention_mask.sizes() == input_ids.sizes() &&
                  position_ids.sizes() == input_ids.sizes(),
              "Transformer::forward_cached: input_ids, attention_mask, position_ids must all be [B,T]");
  TORCH_CHECK(input_ids.size(0) == cache.batch(), "Transformer::forward_cached: batch ", input_ids.size(0),
              " does not match the cache's ", cache.batch());
  const auto dev = device();
  const int64_t T = input_ids.size(1), start = cache.length, S = start + T;
  if (S > cache.capacity())
    throw std::out_of_range("Transformer::forward_cached: " + std::to_string(S) +
                            " slots needed, cache holds " + std::to_string(cache.capacity()));
  if (cfg_.sliding_window > 0 && S > cfg_.sliding_window)
    throw std::out_of_range("Transformer: sequence of " + std::to_string(S) +
                            " slots exceeds sliding_window " + std::to_string(cfg_.sliding_window));
  cache.key_mask.narrow(1, start, T).copy_(attention_mask.to(dev).to(torch::kBool));
  auto keys = cache.key_mask.narrow(1, 0, S);  // [B,S]
  // Query i sits in slot start+i and may see slots j <= start+i.
  auto q_slot = torch::arange(start, S, torch::TensorOptions().dtype(torch::kInt64).device(dev)).unsqueeze(1);
  auto k_slot = torch::arange(0, S, torch::TensorOptions().dtype(torch::kInt64).device(dev)).unsqueeze(0);
  auto mask = k_slot.le(q_slot).unsqueeze(0).unsqueeze(0).logical_and(keys.unsqueeze(1).unsqueeze(1));
  auto h = run(input_ids.to(dev, torch::kInt64), position_ids.to(dev, torch::kInt64), mask, &cache);
  cache.length = S;
  if (last_only) h = h.narrow(1, T - 1, 1);
  return logits_from_hidden(h);
}

}  // namespace pulse::model

#include "bench/kernels/model_shapes.h"

#include <stdexcept>

namespace pulse::bench {

std::vector<ShapedTensor> qwen25_7b_shapes(int scale) {
  if (scale < 1) throw std::invalid_argument("model scale must be >= 1, got " + std::to_string(scale));
  const auto div = [&](uint64_t v) {
    return (v + static_cast<uint64_t>(scale) - 1) / static_cast<uint64_t>(scale);
  };
  const uint64_t head = div(128), hidden = 28 * head, kv = 4 * head, inter = div(18944), vocab = div(152064);
  std::vector<ShapedTensor> t;
  t.push_back({"model.embed_tokens.weight", vocab, hidden});
  for (int l = 0; l < 28; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", hidden, 1});
    t.push_back({p + "self_attn.q_proj.weight", hidden, hidden});
    t.push_back({p + "self_attn.q_proj.bias", hidden, 1});
    t.push_back({p + "self_attn.k_proj.weight", kv, hidden});
    t.push_back({p + "self_attn.k_proj.bias", kv, 1});
    t.push_back({p + "self_attn.v_proj.weight", kv, hidden});
    t.push_back({p + "self_attn.v_proj.bias", kv, 1});
    t.push_back({p + "self_attn.o_proj.weight", hidden, hidden});
    t.push_back({p + "post_attention_layernorm.weight", hidden, 1});
    t.push_back({p + "mlp.gate_proj.weight", inter, hidden});
    t.push_back({p + "mlp.up_proj.weight", inter, hidden});
    t.push_back({p + "mlp.down_proj.weight", hidden, inter});
  }
  t.push_back({"model.norm.weight", hidden, 1});
  t.push_back({"lm_head.weight", vocab, hidden});
  return t;
}

}  // namespace pulse::bench

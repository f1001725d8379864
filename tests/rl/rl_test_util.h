// Shared fixtures for the rl training tests: a character-level tokenizer and a tiny Llama sized to it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/tokenizer.h"

namespace pulse::test {

/// Character-level tokenizer over printable ASCII: 0 <unk>, 1 <s>, 2 </s>, 3 <pad>, then ' '..'~' as 4..98.
/// Lets the training tests run without a trained SentencePiece model.
class CharTokenizer : public model::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false, bool = true) const override {
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(1);
    for (char c : text) ids.push_back(c >= ' ' && c <= '~' ? 4 + (c - ' ') : 0);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id >= 4 && id < 99) {
        out += static_cast<char>(' ' + (id - 4));
      } else if (!skip_special) {
        out += id == 1 ? "<s>" : id == 2 ? "</s>" : id == 3 ? "<pad>" : "<unk>";
      }
    }
    return out;
  }
  int64_t vocab_size() const override { return 99; }
  int32_t bos_id() const override { return 1; }
  int32_t eos_id() const override { return 2; }
  int32_t pad_id() const override { return 3; }
  int32_t token_to_id(std::string_view piece) const override {
    auto ids = encode(piece);
    return ids.size() == 1 ? ids[0] : -1;
  }
};

/// A 2-layer, 64-wide Llama (GQA 4/2 heads) for `vocab` tokens: ~0.1 M parameters.
inline model::ModelConfig tiny_llama(int64_t vocab) {
  model::ModelConfig c;
  c.vocab_size = vocab;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = true;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

}  // namespace pulse::test

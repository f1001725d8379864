// SentencePiece .model tokenizer (Llama-2, TinyLlama, Mistral, Gemma, pulse's own) through libsentencepiece.
#pragma once
#include <memory>
#include <string>

#include "model/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace pulse::model {

/// Wraps sentencepiece::SentencePieceProcessor. Control pieces (<s>, </s>, ...) written in the text are
/// split out and encoded as their ids when parse_special; decode renders them as their piece text unless
/// skip_special. Thread-safe for concurrent const calls (the processor is read-only after load).
class SentencePieceTokenizer : public Tokenizer {
 public:
  /// Throws std::runtime_error naming `path` when it is missing or not a SentencePiece model.
  explicit SentencePieceTokenizer(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text, bool add_bos = false,
                              bool parse_special = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const override;
  int64_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  int32_t pad_id() const override;
  int32_t token_to_id(std::string_view piece) const override;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<std::pair<std::string, int32_t>> control_;  ///< control pieces, longest first
};

}  // namespace pulse::model

// Byte-pair-encoding tokenizers read from HF files: byte-level BPE (GPT-2, Qwen2/2.5, Llama 3) and the
// SentencePiece-style BPE of HF's Llama-2 tokenizer.json (Prepend/Replace normaliser, byte fallback).
//
// Reference: HF tokenizers (models/bpe, pre_tokenizers/byte_level.rs, normalizers), GPT-2 encoder.py
// (Radford et al. 2019) for bytes_to_unicode and merges by rank.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.h"

namespace pulse::model {

/// Pre-tokenizer regexes written by the reference tokenizers.
extern const char* const kGpt2Regex;
extern const char* const kQwen2Regex;

/// One BPE tokenizer; built by the from_* factories. encode/decode are thread-safe (a mutex guards the
/// word cache).
class BpeTokenizer : public Tokenizer {
 public:
  struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = true;
  };

  /// HF tokenizer.json with model.type "BPE". Supported: normalizer null / NFC / Sequence of
  /// Prepend+Replace (Llama-2); pre_tokenizer ByteLevel, Split(Regex)+ByteLevel, or null; decoder ByteLevel
  /// or the Llama-2 Replace/ByteFallback/Fuse/Strip chain. tokenizer_config.json beside it (optional)
  /// names bos/eos/pad. Throws std::runtime_error naming the file and the unsupported field.
  static std::unique_ptr<BpeTokenizer> from_tokenizer_json(const std::string& path);
  /// GPT-2-format vocab.json + merges.txt (same folder). tokenizer_config.json beside them (optional)
  /// adds added_tokens_decoder and bos/eos/pad; tokenizer_class Qwen2Tokenizer selects the Qwen2 regex
  /// and the NFC normaliser, otherwise the GPT-2 regex. Throws std::runtime_error naming the file.
  static std::unique_ptr<BpeTokenizer> from_vocab_merges(const std::string& vocab_path,
                                                         const std::string& merges_path);
  ~BpeTokenizer() override;

  std::vector<int32_t> encode(std::string_view text, bool add_bos = false,
                              bool parse_special = true) const override;
  /// Bytes that do not form valid UTF-8 come out as U+FFFD, as HF's ByteLevel decoder does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  int32_t pad_id() const override { return pad_; }
  int32_t token_to_id(std::string_view piece) const override;

 private:
  BpeTokenizer();
  void finish_setup(const std::string& config_path, const std::string& source);
  void set_regex(const std::string& pattern, const std::string& source);
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  struct Regex;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int32_t> ranks_;  ///< "left right" -> merge rank
  std::vector<AddedToken> added_;                   ///< longest content first
  std::vector<int8_t> added_kind_;                  ///< per id: 0 normal, 1 added, 2 added+special
  std::unique_ptr<Regex> regex_;                    ///< null = no regex split
  bool byte_level_ = true;  ///< bytes -> printable code points (GPT-2 bytes_to_unicode)
  bool nfc_ = false;        ///< NFC normaliser
  bool add_prefix_space_ = false;
  bool sp_style_ = false;  ///< Llama-2 tokenizer.json: prepend "▁", spaces -> "▁", byte fallback
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;  ///< Llama 3: a word found whole in the vocab skips the merges
  int32_t unk_ = -1, bos_ = -1, eos_ = -1, pad_ = -1;
  std::string byte_to_unicode_[256];
  std::unordered_map<uint32_t, uint8_t> unicode_to_byte_;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace pulse::model

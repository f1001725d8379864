// One interface over the tokenizers pulse reads: SentencePiece .model files and byte-level BPE
// (tokenizer.json, or vocab.json + merges.txt).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pulse::model {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Text -> ids. No BOS/EOS added unless add_bos; special tokens written in the text (e.g.
  /// "<|im_start|>") are recognised when parse_special.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos = false,
                                      bool parse_special = true) const = 0;
  /// Ids -> text (special tokens rendered as their text unless skip_special).
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  ///< -1 when none
  virtual int32_t eos_id() const = 0;  ///< -1 when none
  virtual int32_t pad_id() const = 0;  ///< -1 when none (callers then pad with eos)
  virtual int32_t token_to_id(std::string_view piece) const = 0;  ///< -1 when unknown
};

/// Loads a tokenizer from: a SentencePiece .model file; a tokenizer.json; a vocab.json (merges.txt
/// beside it); or a folder holding one of these (tokenizer_config.json there adds special tokens).
/// Throws std::runtime_error naming the file when it is missing or of the wrong kind.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

/// Trains a SentencePiece BPE model on `lines` by running Debian's `spm_train` (package sentencepiece) in a
/// private temp folder, checks the result and writes `model_path` atomically. Ids: 0 <unk>, 1 <s>,
/// 2 </s>, 3 <pad>; byte fallback on; `seed` (low 32 bits) seeds the trainer. Throws std::runtime_error
/// naming model_path, with spm_train's log, when it cannot run or fails (e.g. "Vocabulary size too high
/// (N). Please set it to a value <= M.").
void train_sentencepiece_bpe(const std::vector<std::string>& lines, int vocab_size,
                             const std::string& model_path, uint64_t seed = 0);

}  // namespace pulse::model

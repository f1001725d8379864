// load_tokenizer dispatch and SentencePiece BPE training; see tokenizer.h.
#include "model/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <stdexcept>
#include <unordered_map>

#include "model/tokenizer_bpe.h"
#include "model/tokenizer_sp.h"
#include "sync/atomic_file.h"

namespace pulse::model {
namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (fs::is_directory(path)) {
    const fs::path dir(path);
    if (fs::is_regular_file(dir / "tokenizer.json")) return load_tokenizer((dir / "tokenizer.json").string());
    if (fs::is_regular_file(dir / "vocab.json")) return load_tokenizer((dir / "vocab.json").string());
    if (fs::is_regular_file(dir / "tokenizer.model"))
      return load_tokenizer((dir / "tokenizer.model").string());
    throw std::runtime_error(path + ": no tokenizer.json, vocab.json or tokenizer.model in this folder");
  }
  if (!fs::is_regular_file(path)) throw std::runtime_error(path + ": tokenizer file not found");
  const fs::path p(path);
  if (p.extension() == ".json") {
    if (p.filename() == "vocab.json" || p.filename().string().find("vocab") != std::string::npos) {
      // GPT-2 layout: merges.txt beside; torchtune-style "<prefix>_vocab.json" + "<prefix>_merges.txt".
      std::string merges = (p.parent_path() / "merges.txt").string();
      const std::string stem = p.filename().string();
      if (const auto k = stem.rfind("vocab.json"); k != std::string::npos && k > 0) {
        const auto alt = p.parent_path() / (stem.substr(0, k) + "merges.txt");
        if (fs::is_regular_file(alt)) merges = alt.string();
      }
      return BpeTokenizer::from_vocab_merges(path, merges);
    }
    return BpeTokenizer::from_tokenizer_json(path);
  }
  try {
    return std::make_unique<SentencePieceTokenizer>(path);
  } catch (const std::runtime_error&) {
    throw std::runtime_error(
        path + ": not a tokenizer (expected a SentencePiece .model, a tokenizer.json or a vocab.json)");
  }
}

namespace {

class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::vector<std::string>& lines_;
  size_t i_ = 0;
};

}  // namespace

void train_sentencepiece_bpe(const std::vector<std::string>& lines, int vocab_size,
                             const std::string& model_path, uint64_t seed) {
  if (lines.empty()) throw std::invalid_argument("train_sentencepiece_bpe: no training lines");
  if (vocab_size < 260 + 8)
    throw std::invalid_argument(
        "train_sentencepiece_bpe: vocab_size must leave room beyond 4 specials + 256 bytes");
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(seed));
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "3"},
      // Keep text as written (code: indentation, newlines) and split digits for arithmetic.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", "16384"},
      {"num_threads", "2"},
      {"minloglevel", "2"},
  };
  LineIterator it(lines);
  std::string proto;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
  if (!status.ok())
    throw std::runtime_error(model_path + ": SentencePiece training failed: " + status.ToString());
  sync::write_file_atomic(model_path, proto.data(), proto.size());
}

}  // namespace pulse::model

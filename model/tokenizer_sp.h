// SentencePiece .model tokenizer (Llama-2, TinyLlama, Mistral, Gemma, pulse's own), implemented here.
//
// Why not libsentencepiece at run time: Debian's libsentencepiece bundles protobuf-lite 3.14 and exports
// its symbols, while LibTorch loads libprotobuf 3.21; in one process the two collide during static
// initialisation (segfault). The .model file is a small protobuf (sentencepiece_model.proto) that is
// read here directly; training runs the spm_train tool in a child process (tokenizer.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.h"

namespace pulse::model {

/// SentencePiece BPE model (Kudo & Richardson 2018, arXiv:1808.06226; algorithm as bpe_model.cc: merge
/// the adjacent pair whose union is the highest-scoring piece, leftmost first) with the identity
/// normaliser plus add_dummy_prefix / remove_extra_whitespaces / escape_whitespaces, and byte fallback.
/// Control pieces (<s>, </s>, ...) written in the text are split out when parse_special; decode renders
/// them as their text unless skip_special. Unigram models and precompiled (NFKC) normalisers are rejected.
/// Thread-safe for concurrent const calls.
class SentencePieceTokenizer : public Tokenizer {
 public:
  enum class PieceType : uint8_t {
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6
  };
  struct Piece {
    std::string text;
    float score = 0;
    PieceType type = PieceType::Normal;
  };

  /// Throws std::runtime_error naming `path` when it is missing, not a SentencePiece model, or uses an
  /// unsupported model type / normaliser; and, naming the piece or field, when a BYTE piece is not
  /// "<0xNN>" or repeats a byte, or unk_id is not an UNKNOWN piece, or bos/eos/pad_id is neither -1 nor
  /// a piece id. So a loaded tokenizer decodes every id in [0, vocab_size()).
  explicit SentencePieceTokenizer(const std::string& path);

  std::vector<int32_t> encode(std::string_view text, bool add_bos = false,
                              bool parse_special = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  int32_t pad_id() const override { return pad_; }
  int32_t token_to_id(std::string_view piece) const override;
  const std::vector<Piece>& pieces() const { return pieces_; }

 private:
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<Piece> pieces_;
  std::unordered_map<std::string, int32_t> mergeable_;    ///< Normal/UserDefined/Unused pieces -> id
  std::unordered_map<std::string, int32_t> all_;          ///< every piece -> id
  std::vector<std::pair<std::string, int32_t>> control_;  ///< control pieces, longest first
  int32_t byte_id_[256];
  std::vector<uint8_t> piece_byte_;  ///< the byte of each BYTE piece (0 for other pieces)
  int32_t unk_ = 0, bos_ = 1, eos_ = 2, pad_ = -1;
  bool byte_fallback_ = false, add_dummy_prefix_ = true, remove_extra_ws_ = true, escape_ws_ = true;
};

}  // namespace pulse::model

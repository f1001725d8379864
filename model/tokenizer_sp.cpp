// SentencePiece tokenizer; see tokenizer_sp.h.
#include "model/tokenizer_sp.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

namespace pulse::model {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  if (!std::filesystem::is_regular_file(path)) throw std::runtime_error(path + ": tokenizer file not found");
  const auto status = sp_->Load(path);
  if (!status.ok())
    throw std::runtime_error(path + ": not a SentencePiece model (" + status.ToString() + ")");
  for (int i = 0; i < sp_->GetPieceSize(); ++i)
    if (sp_->IsControl(i) && !sp_->IdToPiece(i).empty()) control_.emplace_back(sp_->IdToPiece(i), i);
  std::sort(control_.begin(), control_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, bool add_bos,
                                                    bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  auto encode_plain = [&](std::string_view s) {
    if (s.empty()) return;
    std::vector<int> ids;
    const auto status = sp_->Encode(s, &ids);
    if (!status.ok()) throw std::runtime_error("SentencePiece encode failed: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  };
  if (!parse_special || control_.empty()) {
    encode_plain(text);
    return out;
  }
  size_t start = 0, i = 0;
  while (i < text.size()) {
    bool matched = false;
    for (const auto& [piece, id] : control_) {
      if (text.compare(i, piece.size(), piece) == 0) {
        encode_plain(text.substr(start, i - start));
        out.push_back(id);
        i += piece.size();
        start = i;
        matched = true;
        break;
      }
    }
    if (!matched) ++i;
  }
  encode_plain(text.substr(start));
  return out;
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    std::string s;
    const auto status = sp_->Decode(run, &s);
    if (!status.ok()) throw std::runtime_error("SentencePiece decode failed: " + status.ToString());
    out += s;
    run.clear();
  };
  const int n = sp_->GetPieceSize();
  for (int32_t id : ids) {
    if (id < 0 || id >= n)
      throw std::out_of_range("SentencePiece decode: id " + std::to_string(id) + " out of range");
    if (sp_->IsControl(id)) {
      flush();
      if (!skip_special) out += sp_->IdToPiece(id);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int32_t SentencePieceTokenizer::bos_id() const {
  return sp_->bos_id();
}
int32_t SentencePieceTokenizer::eos_id() const {
  return sp_->eos_id();
}
int32_t SentencePieceTokenizer::pad_id() const {
  return sp_->pad_id();
}

int32_t SentencePieceTokenizer::token_to_id(std::string_view piece) const {
  const int id = sp_->PieceToId(piece);
  // PieceToId answers unk_id for unknown pieces; tell them apart from the real "<unk>".
  if (id == sp_->unk_id() && sp_->IdToPiece(id) != piece) return -1;
  return id;
}

}  // namespace pulse::model

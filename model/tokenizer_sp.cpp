// SentencePiece tokenizer; see tokenizer_sp.h. Model format: sentencepiece_model.proto (ModelProto:
// 1 pieces {1 piece, 2 score, 3 type}, 2 trainer_spec {3 model_type, 35 byte_fallback, 40..43 unk/bos/
// eos/pad ids}, 3 normalizer_spec {1 name, 2 precompiled_charmap, 3 add_dummy_prefix,
// 4 remove_extra_whitespaces, 5 escape_whitespaces}).
#include "model/tokenizer_sp.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <queue>
#include <stdexcept>

#include "model/unicode.h"
#include "sync/io/atomic_file.h"

namespace pulse::model {
namespace {

const std::string kSpSpace = "\xE2\x96\x81";  // U+2581 "▁"

/// Minimal protobuf wire-format reader over one message.
struct ProtoReader {
  const uint8_t* p;
  const uint8_t* end;
  const std::string& file;

  [[noreturn]] void bad(const char* what) const {
    throw std::runtime_error(file + ": not a SentencePiece model (" + what + ")");
  }
  bool done() const { return p >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) bad("truncated varint");
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    bad("varint too long");
  }
  /// Next field: returns (field number, wire type).
  std::pair<uint32_t, uint32_t> tag() {
    const uint64_t t = varint();
    return {static_cast<uint32_t>(t >> 3), static_cast<uint32_t>(t & 7)};
  }
  ProtoReader sub() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end - p)) bad("length past the end");
    ProtoReader r{p, p + n, file};
    p += n;
    return r;
  }
  float fixed32_float() {
    if (end - p < 4) bad("truncated fixed32");
    float f;
    std::memcpy(&f, p, 4);
    p += 4;
    return f;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0:
        varint();
        break;
      case 1:
        if (end - p < 8) bad("truncated fixed64");
        p += 8;
        break;
      case 2:
        sub();
        break;
      case 5:
        if (end - p < 4) bad("truncated fixed32");
        p += 4;
        break;
      default:
        bad("unknown wire type");
    }
  }
};

/// The byte of a BYTE piece "<0xAB>" (hex digits of either case), or -1 when `text` is not of that form.
int byte_piece_value(const std::string& text) {
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/// A piece's text for a message: at most 32 bytes, control bytes as \xNN.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text.substr(0, 32)) {
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return text.size() > 32 ? out + "..." : out;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) throw std::runtime_error(path + ": tokenizer file not found");
  const std::string bytes = sync::read_file(path);
  ProtoReader r{reinterpret_cast<const uint8_t*>(bytes.data()),
                reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size(), path};
  int64_t model_type = 1;  // UNIGRAM by default in the proto
  std::string norm_name;
  bool has_charmap = false;
  int64_t unk = 0, bos = 1, eos = 2, pad = -1;
  while (!r.done()) {
    auto [field, wire] = r.tag();
    if (field == 1 && wire == 2) {
      ProtoReader pr = r.sub();
      Piece piece;
      while (!pr.done()) {
        auto [f, w] = pr.tag();
        if (f == 1 && w == 2) {
          ProtoReader s = pr.sub();
          piece.text.assign(reinterpret_cast<const char*>(s.p), s.end - s.p);
        } else if (f == 2 && w == 5) {
          piece.score = pr.fixed32_float();
        } else if (f == 3 && w == 0) {
          const uint64_t t = pr.varint();
          if (t < 1 || t > 6) pr.bad("unknown piece type");
          piece.type = static_cast<PieceType>(t);
        } else {
          pr.skip(w);
        }
      }
      pieces_.push_back(std::move(piece));
    } else if (field == 2 && wire == 2) {
      ProtoReader tr = r.sub();
      while (!tr.done()) {
        auto [f, w] = tr.tag();
        if (w != 0) {
          tr.skip(w);
          continue;
        }
        const auto v = static_cast<int64_t>(static_cast<int32_t>(tr.varint()));
        if (f == 3)
          model_type = v;
        else if (f == 35)
          byte_fallback_ = v != 0;
        else if (f == 40)
          unk = v;
        else if (f == 41)
          bos = v;
        else if (f == 42)
          eos = v;
        else if (f == 43)
          pad = v;
      }
    } else if (field == 3 && wire == 2) {
      ProtoReader nr = r.sub();
      while (!nr.done()) {
        auto [f, w] = nr.tag();
        if (f == 1 && w == 2) {
          ProtoReader s = nr.sub();
          norm_name.assign(reinterpret_cast<const char*>(s.p), s.end - s.p);
        } else if (f == 2 && w == 2) {
          const ProtoReader m = nr.sub();
          has_charmap = m.end > m.p;
        } else if (f == 3 && w == 0) {
          add_dummy_prefix_ = nr.varint() != 0;
        } else if (f == 4 && w == 0) {
          remove_extra_ws_ = nr.varint() != 0;
        } else if (f == 5 && w == 0) {
          escape_ws_ = nr.varint() != 0;
        } else {
          nr.skip(w);
        }
      }
    } else {
      r.skip(wire);
    }
  }
  if (pieces_.empty()) r.bad("no pieces");
  if (model_type != 2)
    throw std::runtime_error(path + ": SentencePiece model_type " + std::to_string(model_type) +
                             " is not supported (only BPE = 2; unigram models are not)");
  if (has_charmap && norm_name != "identity" && !norm_name.empty())
    throw std::runtime_error(path + ": SentencePiece normaliser \"" + norm_name +
                             "\" is not supported (only identity)");
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  piece_byte_.assign(pieces_.size(), 0);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const auto& pc = pieces_[i];
    const auto id = static_cast<int32_t>(i);
    if (pc.type == PieceType::Byte) {
      // Validated here, not when a sampled id is decoded: "<0xAB>", two hex digits (what spm_train writes).
      const int value = byte_piece_value(pc.text);
      if (value < 0)
        throw std::runtime_error(path + ": piece " + std::to_string(i) + " (\"" + printable(pc.text) +
                                 "\") has type BYTE but is not of the form <0xNN>");
      if (byte_id_[value] >= 0)
        throw std::runtime_error(path + ": pieces " + std::to_string(byte_id_[value]) + " and " +
                                 std::to_string(i) + " are both the byte piece " + pc.text);
      piece_byte_[i] = static_cast<uint8_t>(value);
    }
    all_.emplace(pc.text, id);
    switch (pc.type) {
      case PieceType::Normal:
      case PieceType::UserDefined:
      case PieceType::Unused:
        mergeable_.emplace(pc.text, id);
        break;
      case PieceType::Control:
        if (!pc.text.empty()) control_.emplace_back(pc.text, id);
        break;
      case PieceType::Byte:
        byte_id_[piece_byte_[i]] = id;
        break;
      case PieceType::Unknown:
        break;
    }
  }
  std::sort(control_.begin(), control_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  // Special ids: -1 = none (bos, eos, pad); any other id must be a piece. unk is required: encode falls back
  // to it for text no piece covers.
  const auto n = static_cast<int64_t>(pieces_.size());
  auto check_id = [&](int64_t id, const char* field, bool required) {
    if ((id == -1 && !required) || (id >= 0 && id < n)) return static_cast<int32_t>(id);
    throw std::runtime_error(path + ": trainer_spec." + field + " = " + std::to_string(id) +
                             " is not a piece id (0.." + std::to_string(n - 1) +
                             (required ? "" : ", or -1 for none") + ")");
  };
  unk_ = check_id(unk, "unk_id", true);
  bos_ = check_id(bos, "bos_id", false);
  eos_ = check_id(eos, "eos_id", false);
  pad_ = check_id(pad, "pad_id", false);
  if (pieces_[unk_].type != PieceType::Unknown)
    throw std::runtime_error(path + ": trainer_spec.unk_id = " + std::to_string(unk_) + " names piece \"" +
                             printable(pieces_[unk_].text) + "\", which is not of type UNKNOWN");
}

int32_t SentencePieceTokenizer::token_to_id(std::string_view piece) const {
  auto it = all_.find(std::string(piece));
  return it == all_.end() ? -1 : it->second;
}

void SentencePieceTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  // Normalise: optional whitespace cleanup, dummy prefix, spaces -> U+2581.
  std::string s(text);
  if (remove_extra_ws_) {
    std::string t;
    bool space = true;  // drops leading spaces
    for (char c : s) {
      if (c == ' ') {
        if (!space) t += ' ';
        space = true;
      } else {
        t += c;
        space = false;
      }
    }
    if (!t.empty() && t.back() == ' ') t.pop_back();
    s.swap(t);
  }
  if (s.empty()) return;
  if (add_dummy_prefix_) s.insert(s.begin(), ' ');
  if (escape_ws_) {
    std::string t;
    for (char c : s) t += c == ' ' ? kSpSpace : std::string(1, c);
    s.swap(t);
  }
  // Symbols: one per UTF-8 character, in a doubly linked list.
  struct Sym {
    int prev, next;
    size_t off, len;
  };
  std::vector<Sym> sym;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(utf8_len(static_cast<unsigned char>(s[i])), s.size() - i);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, n});
    i += n;
  }
  sym.back().next = -1;
  struct Bigram {
    int left, right;
    float score;
    size_t len;
    bool operator<(const Bigram& o) const {  // max-heap on score, then leftmost
      return score < o.score || (score == o.score && left > o.left);
    }
  };
  std::priority_queue<Bigram> agenda;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const size_t len = sym[l].len + sym[r].len;
    auto it = mergeable_.find(s.substr(sym[l].off, len));
    if (it == mergeable_.end()) return;
    agenda.push({l, r, pieces_[it->second].score, len});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    const Bigram b = agenda.top();
    agenda.pop();
    auto& l = sym[b.left];
    auto& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = 0; i >= 0 && i < static_cast<int>(sym.size()); i = sym[i].next) {
    const std::string piece = s.substr(sym[i].off, sym[i].len);
    auto it = mergeable_.find(piece);
    if (it != mergeable_.end()) {
      out.push_back(it->second);
    } else if (byte_fallback_) {
      for (unsigned char c : piece) out.push_back(byte_id_[c] >= 0 ? byte_id_[c] : unk_);
    } else {
      out.push_back(unk_);
    }
  }
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, bool add_bos,
                                                    bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  if (!parse_special || control_.empty()) {
    encode_plain(text, out);
    return out;
  }
  size_t start = 0, i = 0;
  while (i < text.size()) {
    bool matched = false;
    for (const auto& [piece, id] : control_) {
      if (text.compare(i, piece.size(), piece) == 0) {
        encode_plain(text.substr(start, i - start), out);
        out.push_back(id);
        i += piece.size();
        start = i;
        matched = true;
        break;
      }
    }
    if (!matched) ++i;
  }
  encode_plain(text.substr(start), out);
  return out;
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  bool at_start = true;  // SentencePiece drops the dummy-prefix space of the first text piece
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(pieces_.size()))
      throw std::out_of_range("SentencePiece decode: id " + std::to_string(id) + " out of range");
    const auto& pc = pieces_[id];
    switch (pc.type) {
      case PieceType::Control:
        if (!skip_special) out += pc.text;
        continue;
      case PieceType::Unknown:
        out += " \xE2\x81\x87 ";
        break;  // SentencePiece's unk surface " ⁇ "
      case PieceType::Byte:
        out += static_cast<char>(piece_byte_[id]);
        break;
      default: {
        std::string t = pc.text;
        for (size_t p = 0; (p = t.find(kSpSpace, p)) != std::string::npos;)
          t.replace(p, kSpSpace.size(), " ");
        if (at_start && add_dummy_prefix_ && !t.empty() && t[0] == ' ') t.erase(0, 1);
        out += t;
      }
    }
    at_start = false;
  }
  return utf8_lossy(out);
}

}  // namespace pulse::model

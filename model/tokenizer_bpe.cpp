// BPE tokenizers; see tokenizer_bpe.h.
#include "model/tokenizer_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "model/unicode.h"
#include "sync/io/atomic_file.h"

namespace pulse::model {

const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;
const std::string kSpSpace = "\xE2\x96\x81";  // U+2581 "▁"

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw std::runtime_error(file + ": " + what);
}

json read_json(const std::string& path) {
  try {
    return json::parse(sync::read_file(path));
  } catch (const json::exception& e) {
    fail(path, std::string("not valid JSON: ") + e.what());
  }
}

/// tokenizer_config.json writes special tokens as a string or as {"content": ...}.
std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return {};
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

/// Token ids index a table: an id past this (4 M; the largest real vocabularies have ~256 K) is refused
/// at load rather than sizing the table by it.
constexpr int32_t kMaxTokenId = 1 << 22;

/// A vocabulary entry's id: an integer in 0..kMaxTokenId-1, else an error naming `what` in `file`.
int32_t checked_id(const json& v, const std::string& what, const std::string& file) {
  if (!v.is_number_integer()) fail(file, what + " must be an integer id");
  const int64_t id = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                         ? INT64_MAX
                         : v.get<int64_t>();
  if (id < 0 || id >= kMaxTokenId)
    fail(file, what + " = " + v.dump() + " is outside 0.." + std::to_string(kMaxTokenId - 1));
  return static_cast<int32_t>(id);
}

}  // namespace

// ---- regex --------------------------------------------------------------------------------------------

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

BpeTokenizer::BpeTokenizer() {
  // GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to U+0100 + n.
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(n++);
    utf8_append(cp, byte_to_unicode_[b]);
    unicode_to_byte_[cp] = static_cast<uint8_t>(b);
  }
}

BpeTokenizer::~BpeTokenizer() = default;

void BpeTokenizer::set_regex(const std::string& pattern, const std::string& source) {
  int err = 0;
  PCRE2_SIZE off = 0;
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail(source, "pre-tokenizer regex does not compile at offset " + std::to_string(off) + ": " +
                     reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
  regex_ = std::make_unique<Regex>();
  regex_->code = code;
}

void BpeTokenizer::finish_setup(const std::string& config_path, const std::string& source) {
  std::sort(added_.begin(), added_.end(),
            [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (const auto& a : added_) {
    if (a.id < 0 || a.id >= kMaxTokenId)
      fail(source, "added token \"" + a.content + "\" has id " + std::to_string(a.id) + ", outside 0.." +
                       std::to_string(kMaxTokenId - 1));
    if (static_cast<size_t>(a.id) >= id_to_token_.size()) id_to_token_.resize(a.id + 1);
    id_to_token_[a.id] = a.content;
    vocab_[a.content] = a.id;
  }
  added_kind_.assign(id_to_token_.size(), 0);
  for (const auto& a : added_) added_kind_[a.id] = a.special ? 2 : 1;
  auto id_of = [&](const std::string& t) -> int32_t {
    auto it = vocab_.find(t);
    return (t.empty() || it == vocab_.end()) ? -1 : it->second;
  };
  bool have_config = false;
  if (!config_path.empty() && std::filesystem::is_regular_file(config_path)) {
    const json cfg = read_json(config_path);
    have_config = true;
    if (cfg.contains("bos_token")) bos_ = id_of(token_text(cfg["bos_token"]));
    if (cfg.contains("eos_token")) eos_ = id_of(token_text(cfg["eos_token"]));
    if (cfg.contains("pad_token")) pad_ = id_of(token_text(cfg["pad_token"]));
  }
  if (!have_config) {  // conventional names when no tokenizer_config.json says otherwise
    for (const char* b : {"<s>", "<|begin_of_text|>"})
      if (bos_ < 0) bos_ = id_of(b);
    for (const char* e : {"</s>", "<|endoftext|>", "<|end_of_text|>"})
      if (eos_ < 0) eos_ = id_of(e);
  }
  for (auto& t : id_to_token_)
    if (t.empty()) t = "";  // holes in the id space decode to nothing
}

// ---- loading ------------------------------------------------------------------------------------------

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_tokenizer_json(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) fail(path, "tokenizer file not found");
  const json j = read_json(path);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    fail(path, "not a tokenizer.json (no \"model\" object)");
  const json& m = j["model"];
  const std::string type = m.value("type", std::string("BPE"));
  if (type != "BPE") fail(path, "model.type \"" + type + "\" is not supported (only BPE)");
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail(path, "model.vocab missing");
  if (!m.contains("merges") || !m["merges"].is_array()) fail(path, "model.merges missing");
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    const int32_t id = checked_id(it.value(), "model.vocab[\"" + it.key() + "\"]", path);
    t->vocab_[it.key()] = id;
    if (id >= static_cast<int32_t>(t->id_to_token_.size())) t->id_to_token_.resize(id + 1);
    t->id_to_token_[id] = it.key();
  }
  int32_t rank = 0;
  for (const auto& mg : m["merges"]) {
    std::string key;
    if (mg.is_string()) {
      key = mg.get<std::string>();
    } else if (mg.is_array() && mg.size() == 2) {
      key = mg[0].get<std::string>() + " " + mg[1].get<std::string>();
    } else {
      fail(path, "model.merges[" + std::to_string(rank) + "] is neither \"a b\" nor [a, b]");
    }
    t->ranks_.emplace(std::move(key), rank++);
  }
  t->byte_fallback_ = m.value("byte_fallback", false);
  t->ignore_merges_ = m.value("ignore_merges", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = t->vocab_.find(m["unk_token"].get<std::string>());
    if (it != t->vocab_.end()) t->unk_ = it->second;
  }
  // Normaliser.
  const json norm = j.value("normalizer", json());
  std::vector<json> norms;
  if (norm.is_object() && norm.value("type", "") == "Sequence") {
    for (const auto& n : norm["normalizers"]) norms.push_back(n);
  } else if (!norm.is_null()) {
    norms.push_back(norm);
  }
  bool prepend = false, replace = false;
  for (const auto& n : norms) {
    const std::string nt = n.value("type", "");
    if (nt == "NFC") {
      t->nfc_ = true;
    } else if (nt == "Prepend" && n.value("prepend", "") == kSpSpace) {
      prepend = true;
    } else if (nt == "Replace" && n.contains("pattern") && n["pattern"].value("String", "") == " " &&
               n.value("content", "") == kSpSpace) {
      replace = true;
    } else {
      fail(path, "normalizer \"" + nt + "\" is not supported (NFC, Prepend/Replace of U+2581)");
    }
  }
  // Pre-tokeniser.
  const json pre = j.value("pre_tokenizer", json());
  std::vector<json> pres;
  if (pre.is_object() && pre.value("type", "") == "Sequence") {
    for (const auto& p : pre["pretokenizers"]) pres.push_back(p);
  } else if (!pre.is_null()) {
    pres.push_back(pre);
  }
  bool byte_level = false;
  for (const auto& p : pres) {
    const std::string pt = p.value("type", "");
    if (pt == "ByteLevel") {
      byte_level = true;
      t->add_prefix_space_ = p.value("add_prefix_space", false);
      if (p.value("use_regex", true)) t->set_regex(kGpt2Regex, path);
    } else if (pt == "Split") {
      if (!p.contains("pattern") || !p["pattern"].contains("Regex"))
        fail(path, "pre_tokenizer Split without a Regex pattern is not supported");
      const std::string behavior = p.value("behavior", "Isolated");
      if (behavior != "Isolated" || p.value("invert", false))
        fail(path, "pre_tokenizer Split behavior \"" + behavior + "\" is not supported (only Isolated)");
      t->set_regex(p["pattern"]["Regex"].get<std::string>(), path);
    } else {
      fail(path, "pre_tokenizer \"" + pt + "\" is not supported (ByteLevel, Split)");
    }
  }
  if (!byte_level) {
    if (!(prepend && replace && t->byte_fallback_))
      fail(path,
           "a BPE without a ByteLevel pre-tokenizer must be the Llama-2 style (Prepend+Replace U+2581, "
           "byte_fallback)");
    t->sp_style_ = true;
  }
  t->byte_level_ = byte_level;
  for (const auto& a : j.value("added_tokens", json::array())) {
    t->added_.push_back(
        AddedToken{a.at("content").get<std::string>(), a.at("id").get<int32_t>(), a.value("special", false)});
  }
  const auto dir = std::filesystem::path(path).parent_path();
  t->finish_setup((dir / "tokenizer_config.json").string(), path);
  // Llama-2 style: the post-processor adds <s>; callers ask for it with add_bos.
  return t;
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_vocab_merges(const std::string& vocab_path,
                                                              const std::string& merges_path) {
  if (!std::filesystem::is_regular_file(vocab_path)) fail(vocab_path, "tokenizer file not found");
  if (!std::filesystem::is_regular_file(merges_path)) fail(merges_path, "merges file not found");
  const json v = read_json(vocab_path);
  if (!v.is_object() || v.empty()) fail(vocab_path, "not a vocab.json (expected an object of token -> id)");
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer())
      fail(vocab_path, "not a vocab.json: \"" + it.key() + "\" has no integer id");
    const int32_t id = checked_id(it.value(), "\"" + it.key() + "\"", vocab_path);
    t->vocab_[it.key()] = id;
    if (id >= static_cast<int32_t>(t->id_to_token_.size())) t->id_to_token_.resize(id + 1);
    t->id_to_token_[id] = it.key();
  }
  std::ifstream in(merges_path);
  std::string line;
  int32_t rank = 0;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size())
      fail(merges_path, "line " + std::to_string(line_no) + " is not \"left right\"");
    t->ranks_.emplace(line, rank++);
  }
  const auto dir = std::filesystem::path(vocab_path).parent_path();
  const auto config_path = (dir / "tokenizer_config.json").string();
  bool qwen2 = false;
  if (std::filesystem::is_regular_file(config_path)) {
    const json cfg = read_json(config_path);
    qwen2 = cfg.value("tokenizer_class", std::string()).rfind("Qwen2", 0) == 0;
    if (cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object()) {
      for (auto it = cfg["added_tokens_decoder"].begin(); it != cfg["added_tokens_decoder"].end(); ++it) {
        int32_t id = 0;
        try {
          id = std::stoi(it.key());
        } catch (const std::exception&) {
          fail(config_path, "added_tokens_decoder key \"" + it.key() + "\" is not an id");
        }
        t->added_.push_back(
            AddedToken{it.value().at("content").get<std::string>(), id, it.value().value("special", false)});
      }
    }
  } else if (auto it = t->vocab_.find("<|endoftext|>"); it != t->vocab_.end()) {
    t->added_.push_back(AddedToken{"<|endoftext|>", it->second, true});  // GPT-2's only special token
  }
  t->set_regex(qwen2 ? kQwen2Regex : kGpt2Regex, vocab_path);
  t->nfc_ = qwen2;
  t->finish_setup(config_path, vocab_path);
  return t;
}

// ---- encode -------------------------------------------------------------------------------------------

int32_t BpeTokenizer::token_to_id(std::string_view piece) const {
  auto it = vocab_.find(std::string(piece));
  return it == vocab_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  auto whole = vocab_.find(word);
  if (ignore_merges_ && whole != vocab_.end()) {
    ids.push_back(whole->second);
  } else {
    // Symbols: one per code point (byte-level words are already printable code points).
    std::vector<std::string> sym;
    for (size_t i = 0; i < word.size();) {
      const size_t n = std::min(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
      sym.push_back(word.substr(i, n));
      i += n;
    }
    // Merge the lowest-rank adjacent pair, all its occurrences left to right, until none applies.
    while (sym.size() > 1) {
      int32_t best = INT32_MAX;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = ranks_.find(sym[i] + " " + sym[i + 1]);
        if (it != ranks_.end() && it->second < best) best = it->second;
      }
      if (best == INT32_MAX) break;
      std::vector<std::string> next;
      next.reserve(sym.size());
      for (size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size()) {
          auto it = ranks_.find(sym[i] + " " + sym[i + 1]);
          if (it != ranks_.end() && it->second == best) {
            next.push_back(sym[i] + sym[i + 1]);
            ++i;
            continue;
          }
        }
        next.push_back(sym[i]);
      }
      sym.swap(next);
    }
    for (const auto& s : sym) {
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        ids.push_back(it->second);
      } else if (byte_fallback_) {
        for (unsigned char b : s) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
          auto bt = vocab_.find(buf);
          if (bt != vocab_.end()) {
            ids.push_back(bt->second);
          } else if (unk_ >= 0) {
            ids.push_back(unk_);
          }
        }
      } else if (unk_ >= 0) {
        ids.push_back(unk_);
      }
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (word.size() > 256) return;  // long words (whole Llama-2 segments) would only bloat the cache
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() > 200000) cache_.clear();  // bounded memory for long runs
  cache_.emplace(word, std::move(ids));
}

void BpeTokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string s = nfc_ ? nfc(text) : std::string(text);
  if (sp_style_) {
    s = kSpSpace + replace_all(s, " ", kSpSpace);
    encode_word(s, out);
    return;
  }
  if (add_prefix_space_ && s[0] != ' ') s = " " + s;
  auto emit = [&](size_t b, size_t e) {
    if (e <= b) return;
    std::string w;
    if (byte_level_) {
      for (size_t i = b; i < e; ++i) w += byte_to_unicode_[static_cast<unsigned char>(s[i])];
    } else {
      w = s.substr(b, e - b);
    }
    encode_word(w, out);
  };
  if (!regex_) {
    emit(0, s.size());
    return;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0, last = 0;
  while (pos < s.size()) {
    const int rc = pcre2_match(regex_->code, subject, s.size(), pos, 0, md, nullptr);
    if (rc < 0) break;  // no further match (or malformed UTF-8 tail): the rest is one piece
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    emit(last, b);  // unmatched gap stays a piece of its own (Split "Isolated")
    if (e == b) {   // empty match: step one code point
      pos = b + utf8_len(static_cast<unsigned char>(s[b]));
      last = b;
      continue;
    }
    emit(b, e);
    pos = last = e;
  }
  emit(last, s.size());
  pcre2_match_data_free(md);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const auto& a : added_) {
      if ((parse_special || !a.special) && !a.content.empty() &&
          text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    encode_segment(text.substr(start, i - start), out);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  encode_segment(text.substr(start), out);
  return out;
}

// ---- decode -------------------------------------------------------------------------------------------

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size())
      throw std::out_of_range("BPE decode: id " + std::to_string(id) + " out of range");
    const std::string& tok = id_to_token_[id];
    if (added_kind_[id] != 0) {
      if (!(skip_special && added_kind_[id] == 2)) out += tok;
      continue;
    }
    if (sp_style_) {
      if (tok.size() == 6 && tok.rfind("<0x", 0) == 0 && tok.back() == '>') {
        out += static_cast<char>(std::stoi(tok.substr(3, 2), nullptr, 16));
      } else {
        out += replace_all(tok, kSpSpace, " ");
      }
    } else if (byte_level_) {
      std::vector<uint32_t> cps;
      utf8_decode(tok, cps);
      for (uint32_t cp : cps) {
        auto it = unicode_to_byte_.find(cp);
        if (it != unicode_to_byte_.end()) out += static_cast<char>(it->second);
      }
    } else {
      out += tok;
    }
  }
  if (sp_style_ && !out.empty() && out[0] == ' ') out.erase(0, 1);  // Strip decoder: the Prepend'ed space
  return utf8_lossy(out);
}

}  // namespace pulse::model

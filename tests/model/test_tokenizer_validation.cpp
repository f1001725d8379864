// SentencePiece models are validated when loaded: a malformed BYTE piece or a special id outside the
// pieces is refused naming the file and the piece or field, instead of loading and then failing in a
// worker's decode ("basic_string::substr: __pos (which is 3) > this->size() (which is 1)").
// The bad models are the real Llama-2 tokenizer.model with one protobuf field rewritten; SentencePiece's
// own spm_encode (package sentencepiece, which pulse needs for spm_train) refuses them too.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "model/tokenizer.h"
#include "sync/io/atomic_file.h"
#include "tests/temp_dir.h"
#include "tests/test_paths.h"

using pulse::model::load_tokenizer;
using pulse::test::shared_path;

namespace {

uint64_t read_varint(const std::string& b, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; i < b.size(); shift += 7) {
    const auto c = static_cast<uint8_t>(b[i++]);
    v |= static_cast<uint64_t>(c & 0x7F) << shift;
    if (!(c & 0x80)) break;
  }
  return v;
}

std::string varint(uint64_t v) {
  std::string out;
  do {
    uint8_t c = v & 0x7F;
    v >>= 7;
    out += static_cast<char>(v ? c | 0x80 : c);
  } while (v);
  return out;
}

/// Calls edit(field, wire, bytes of the value) for each top-level field of protobuf message `msg`; the
/// field is written back as edit returns it (its whole encoding: tag + value), "" drops it.
template <typename Edit>
std::string rewrite_fields(const std::string& msg, Edit&& edit) {
  std::string out;
  for (size_t i = 0; i < msg.size();) {
    const size_t start = i;
    const uint64_t tag = read_varint(msg, i);
    const auto field = static_cast<uint32_t>(tag >> 3), wire = static_cast<uint32_t>(tag & 7);
    size_t value_start = i;
    if (wire == 0) {
      read_varint(msg, i);
    } else if (wire == 2) {
      const uint64_t n = read_varint(msg, i);
      value_start = i;
      i += n;
    } else {
      i += wire == 5 ? 4 : 8;
    }
    out += edit(field, wire, msg.substr(start, i - start), msg.substr(value_start, i - value_start));
  }
  return out;
}

std::string length_delimited(uint32_t field, const std::string& body) {
  return varint(field << 3 | 2) + varint(body.size()) + body;
}

/// ModelProto with pieces[index].piece = text.
std::string with_piece_text(const std::string& model, size_t index, const std::string& text) {
  size_t k = 0;
  return rewrite_fields(
      model, [&](uint32_t f, uint32_t w, const std::string& whole, const std::string& value) {
        if (f != 1 || w != 2 || k++ != index) return whole;
        const std::string piece = rewrite_fields(
            value, [&](uint32_t pf, uint32_t pw, const std::string& pwhole, const std::string&) {
              return pf == 1 && pw == 2 ? length_delimited(1, text) : pwhole;
            });
        return length_delimited(1, piece);
      });
}

/// ModelProto with trainer_spec.<field> = value (an int32, sign-extended as protobuf writes it).
std::string with_trainer_id(const std::string& model, uint32_t field, int32_t value) {
  return rewrite_fields(
      model, [&](uint32_t f, uint32_t w, const std::string& whole, const std::string& body) {
        if (f != 2 || w != 2) return whole;
        std::string spec =
            rewrite_fields(body, [&](uint32_t sf, uint32_t, const std::string& swhole, const std::string&) {
              return sf == field ? std::string() : swhole;
            });
        spec += varint(field << 3 | 0) + varint(static_cast<uint64_t>(static_cast<int64_t>(value)));
        return length_delimited(2, spec);
      });
}

/// Whether SentencePiece's spm_encode loads `model_path` (encodes one line with it); -1 when spm_encode
/// cannot be run.
int spm_encode_accepts(const std::string& model_path) {
  if (std::system("command -v spm_encode > /dev/null 2>&1") != 0) return -1;
  const std::string cmd = "echo hello | spm_encode --model='" + model_path + "' > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0 ? 1 : 0;
}

struct BadModels {
  std::string dir, original;
  BadModels() {
    dir = (std::filesystem::temp_directory_path() / ("pulse_test_sp_bad_" + std::to_string(::getpid())))
              .string();
    std::filesystem::create_directories(dir);
    pulse::test::remove_at_exit(dir);
    original = pulse::sync::read_file(shared_path("models/llama2-tokenizer/tokenizer.model"));
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string path = dir + "/" + name;
    pulse::sync::write_file_atomic(path, bytes);
    return path;
  }
  std::string load_error(const std::string& path) const {
    try {
      load_tokenizer(path);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }
};

constexpr size_t kByteAB = 3 + 0xAB;  // Llama-2: ids 3..258 are the byte pieces <0x00>..<0xFF>

}  // namespace

TEST_CASE("the protobuf editor of these tests changes only what it is asked to", "[model][tokenizer]") {
  BadModels m;
  CHECK(with_piece_text(m.original, kByteAB, "<0xAB>") == m.original);
  const auto tok = load_tokenizer(m.write("bos2.model", with_trainer_id(m.original, 41, 2)));
  CHECK(tok->vocab_size() == 32000);
  CHECK(tok->bos_id() == 2);
  const std::string orig = m.write("orig.model", m.original);
  if (spm_encode_accepts(orig) >= 0) CHECK(spm_encode_accepts(orig) == 1);
}

TEST_CASE("a SentencePiece BYTE piece that is not <0xNN> is refused at load naming the piece",
          "[model][tokenizer]") {
  BadModels m;
  // "A": the piece that loaded, then ended a worker in decode with basic_string::substr.
  for (const std::string& text : {std::string("A"), std::string("<0xZZ>"), std::string("<0xAB"),
                                  std::string("<0xABC>"), std::string("")}) {
    INFO(text);
    const std::string path = m.write("bad-byte.model", with_piece_text(m.original, kByteAB, text));
    CHECK_THAT(m.load_error(path), Catch::StartsWith(path + ": piece 174 (\"" + text + "\")") &&
                                       Catch::Contains("has type BYTE but is not of the form <0xNN>"));
    const int spm = spm_encode_accepts(path);
    if (spm >= 0) CHECK(spm == 0);  // SentencePiece: "byte piece A is invalid"
  }
  // Lower-case hex is a well-formed byte.
  CHECK(m.load_error(m.write("lower.model", with_piece_text(m.original, kByteAB, "<0xab>"))).empty());
  // Two pieces for one byte: the second would shadow the first.
  const std::string dup = m.write("dup.model", with_piece_text(m.original, kByteAB, "<0x41>"));
  CHECK_THAT(m.load_error(dup), Catch::Contains("pieces 68 and 174 are both the byte piece <0x41>"));
}

TEST_CASE("SentencePiece special ids outside the pieces are refused at load naming the field",
          "[model][tokenizer]") {
  BadModels m;
  // trainer_spec fields 40..43: unk_id, bos_id, eos_id, pad_id.
  const std::string bos = m.write("bos.model", with_trainer_id(m.original, 41, 70000));
  CHECK_THAT(m.load_error(bos), Catch::StartsWith(bos + ": trainer_spec.bos_id = 70000 is not a piece id "
                                                        "(0..31999, or -1 for none)"));
  const std::string eos = m.write("eos.model", with_trainer_id(m.original, 42, -7));
  CHECK_THAT(m.load_error(eos), Catch::Contains("trainer_spec.eos_id = -7 is not a piece id"));
  const std::string unk = m.write("unk.model", with_trainer_id(m.original, 40, -1));
  CHECK_THAT(m.load_error(unk), Catch::Contains("trainer_spec.unk_id = -1 is not a piece id (0..31999)"));
  const std::string unk_byte = m.write("unk-byte.model", with_trainer_id(m.original, 40, 5));
  CHECK_THAT(m.load_error(unk_byte),
             Catch::Contains("trainer_spec.unk_id = 5 names piece \"<0x02>\", which is "
                             "not of type UNKNOWN"));
  // -1 is "none" for bos, eos and pad.
  const auto no_bos = load_tokenizer(m.write("no-bos.model", with_trainer_id(m.original, 41, -1)));
  CHECK(no_bos->bos_id() == -1);
}

TEST_CASE("every id of a loaded SentencePiece model decodes", "[model][tokenizer]") {
  const auto tok = load_tokenizer(shared_path("models/llama2-tokenizer/tokenizer.model"));
  std::string all;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) all += tok->decode({id});
  CHECK(all.size() > 32000);
  CHECK_THROWS_AS(tok->decode({static_cast<int32_t>(tok->vocab_size())}), std::out_of_range);
}

TEST_CASE("byte-level BPE ids outside 0..2^22-1 are refused at load naming file and entry",
          "[model][tokenizer]") {
  // A negative id indexed the id table before its start; 2^31-1 sized it to 2^31 strings.
  BadModels m;
  const std::string merges = m.write("merges.txt", "#version: 0.2\na b\n");
  for (const std::string& id : {std::string("-5"), std::string("2147483647"), std::string("4194304")}) {
    INFO(id);
    const std::string vocab = m.write("vocab.json", R"({"a": 0, "b": 1, "ab": )" + id + "}");
    CHECK_THAT(m.load_error(vocab),
               Catch::StartsWith(vocab + ": \"ab\" = " + id + " is outside 0..4194303"));
  }
  const std::string vocab = m.write("vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  CHECK(load_tokenizer(vocab)->vocab_size() == 3);
  (void)merges;
}

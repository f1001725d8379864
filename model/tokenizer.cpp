// load_tokenizer dispatch and SentencePiece BPE training; see tokenizer.h.
#include "model/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

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
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find("not a SentencePiece model") == std::string::npos) throw;
    throw std::runtime_error(path +
                             ": not a tokenizer (expected a SentencePiece .model, a tokenizer.json or a "
                             "vocab.json): " +
                             e.what());
  }
}

namespace {

/// util::Status as libsentencepiece lays it out (one unique_ptr<Rep>; null = OK). Non-trivial, so it is
/// returned through a hidden pointer exactly like the real class.
struct SpStatus {
  void* rep = nullptr;
  ~SpStatus() {}  // freed through the library's destructor below
};

/// libsentencepiece_train loaded privately (RTLD_LOCAL | RTLD_DEEPBIND): its bundled protobuf-lite 3.14
/// must neither see nor be seen by the libprotobuf 3.21 that LibTorch loads (see tokenizer_sp.h).
struct SpTrainLib {
  using TrainFn = SpStatus (*)(const std::unordered_map<std::string, std::string>&, void*, std::string*);
  using ToStringFn = std::string (*)(const SpStatus*);
  using DtorFn = void (*)(SpStatus*);
  using SeedFn = void (*)(unsigned int);
  TrainFn train = nullptr;
  ToStringFn to_string = nullptr;
  DtorFn dtor = nullptr;
  SeedFn seed = nullptr;

  static const SpTrainLib& get() {
    static const SpTrainLib lib = [] {
      SpTrainLib l;
      void* h = dlopen("libsentencepiece_train.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (h == nullptr)
        throw std::runtime_error(std::string("cannot load libsentencepiece_train.so.0: ") + dlerror());
      auto sym = [&](const char* name) {
        void* p = dlsym(h, name);
        if (p == nullptr) throw std::runtime_error(std::string("libsentencepiece_train: missing ") + name);
        return p;
      };
      l.train = reinterpret_cast<TrainFn>(sym(
          "_ZN13sentencepiece20SentencePieceTrainer5TrainERKSt13unordered_mapINSt7__cxx1112basic_"
          "stringIcSt11char_"
          "traitsIcESaIcEEES7_St4hashIS7_ESt8equal_toIS7_ESaISt4pairIKS7_S7_EEEPNS_16SentenceIteratorEPS7_"));
      l.to_string = reinterpret_cast<ToStringFn>(sym("_ZNK13sentencepiece4util6Status8ToStringB5cxx11Ev"));
      l.dtor = reinterpret_cast<DtorFn>(sym("_ZN13sentencepiece4util6StatusD1Ev"));
      l.seed = reinterpret_cast<SeedFn>(sym("_ZN13sentencepiece22SetRandomGeneratorSeedEj"));
      return l;
    }();
    return lib;
  }
};

}  // namespace

void train_sentencepiece_bpe(const std::vector<std::string>& lines, int vocab_size,
                             const std::string& model_path, uint64_t seed) {
  if (lines.empty()) throw std::invalid_argument("train_sentencepiece_bpe: no training lines");
  if (vocab_size < 260 + 8)
    throw std::invalid_argument(
        "train_sentencepiece_bpe: vocab_size must leave room beyond 4 specials + 256 bytes");
  const auto& lib = SpTrainLib::get();
  // Training text goes through a private temp file (one sentence per line).
  const fs::path tmp = fs::temp_directory_path() /
                       ("pulse-spm-" + std::to_string(::getpid()) + "-" + std::to_string(seed) + ".txt");
  {
    std::string text;
    for (const auto& l : lines) {
      text += l;
      text += '\n';
    }
    sync::write_file_atomic(tmp.string(), text);
  }
  lib.seed(static_cast<unsigned int>(seed));
  const std::unordered_map<std::string, std::string> args = {
      {"input", tmp.string()},
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
      // Silent: under RTLD_DEEPBIND the library's std::cerr is not the initialised one (copy relocation).
      {"minloglevel", "3"},
  };
  std::string proto;
  SpStatus status = lib.train(args, nullptr, &proto);
  fs::remove(tmp);
  if (status.rep != nullptr) {
    const std::string msg = lib.to_string(&status);
    lib.dtor(&status);
    throw std::runtime_error(model_path + ": SentencePiece training failed: " + msg);
  }
  sync::write_file_atomic(model_path, proto.data(), proto.size());
}

}  // namespace pulse::model

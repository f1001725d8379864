// load_tokenizer dispatch and SentencePiece BPE training (the spm_train tool); see tokenizer.h.
#include "model/tokenizer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "model/tokenizer_bpe.h"
#include "model/tokenizer_sp.h"
#include "sync/io/atomic_file.h"

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

/// A private temp folder (mkdtemp), removed with everything in it when this goes out of scope.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "pulse-spm-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error(tmpl + ": cannot create a temp folder: " + std::strerror(errno));
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

/// Runs argv[0] (looked up on PATH) in folder `cwd`, stdin from /dev/null, stdout and stderr into the file
/// `log`; no shell. Returns the wait status. Throws when the program cannot be started.
int run_program(const std::vector<std::string>& argv, const fs::path& cwd, const fs::path& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  pid_t pid = 0;
  const int err = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0)
    throw std::runtime_error(
        "cannot run " + argv[0] + ": " + std::strerror(err) +
        (err == ENOENT ? " (Debian package sentencepiece; scripts/install-deps.sh)" : ""));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waitpid " + argv[0] + ": " + std::strerror(errno));
  return status;
}

/// The end of a tool's log for an error message, without the option list a usage error prints.
std::string log_tail(const fs::path& log) {
  std::ifstream in(log, std::ios::binary);
  std::string kept;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("   --", 0) != 0 && line.find_first_not_of(" \t\r") != std::string::npos)
      kept += line + "\n";
  constexpr size_t kMax = 2000;
  if (kept.size() > kMax) kept = "..." + kept.substr(kept.size() - kMax);
  while (!kept.empty() && kept.back() == '\n') kept.pop_back();
  return kept.empty() ? "(no output)" : kept;
}

}  // namespace

void train_sentencepiece_bpe(const std::vector<std::string>& lines, int vocab_size,
                             const std::string& model_path, uint64_t seed) {
  if (lines.empty()) throw std::invalid_argument("train_sentencepiece_bpe: no training lines");
  if (vocab_size < 260 + 8)
    throw std::invalid_argument(
        "train_sentencepiece_bpe: vocab_size must leave room beyond 4 specials + 256 bytes");
  // spm_train runs inside a private folder on relative names, so the paths stored in the model's
  // trainer_spec ("input.txt", "model") do not depend on the temp folder: same corpus, same bytes.
  TempDir dir;
  {
    std::string text;
    for (const auto& l : lines) {
      text += l;
      text += '\n';
    }
    sync::write_file_atomic((dir.path / "input.txt").string(), text);
  }
  const std::vector<std::string> argv = {
      "spm_train", "--input=input.txt", "--model_prefix=model", "--model_type=bpe",
      "--vocab_size=" + std::to_string(vocab_size), "--byte_fallback=true", "--character_coverage=0.9995",
      "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=3",
      // Keep text as written (code: indentation, newlines) and split digits for arithmetic.
      "--normalization_rule_name=identity", "--remove_extra_whitespaces=false", "--split_digits=true",
      "--allow_whitespace_only_pieces=true", "--max_sentence_length=16384", "--num_threads=2",
      "--random_seed=" + std::to_string(static_cast<uint32_t>(seed)),
      "--minloglevel=1",  // warnings and errors only: the log goes into the error message
  };
  const fs::path log = dir.path / "spm_train.log";
  const int status = run_program(argv, dir.path, log);
  const fs::path trained = dir.path / "model.model";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !fs::is_regular_file(trained)) {
    const std::string how = WIFEXITED(status)     ? "exit status " + std::to_string(WEXITSTATUS(status))
                            : WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                                  : "no model written";
    throw std::runtime_error(model_path + ": SentencePiece training failed (spm_train, " + how +
                             "): " + log_tail(log));
  }
  // A tool whose flags or output changed must fail here, not leave a wrong tokenizer behind.
  const SentencePieceTokenizer check(trained.string());
  if (check.vocab_size() != vocab_size || check.token_to_id("<unk>") != 0 || check.bos_id() != 1 ||
      check.eos_id() != 2 || check.pad_id() != 3)
    throw std::runtime_error(
        model_path + ": spm_train wrote a model with " + std::to_string(check.vocab_size()) +
        " pieces and ids unk " + std::to_string(check.token_to_id("<unk>")) + ", bos " +
        std::to_string(check.bos_id()) + ", eos " + std::to_string(check.eos_id()) + ", pad " +
        std::to_string(check.pad_id()) + " (expected " + std::to_string(vocab_size) + " and 0, 1, 2, 3)");
  const std::string bytes = sync::read_file(trained.string());
  sync::write_file_atomic(model_path, bytes.data(), bytes.size());  // temp, fsync, rename, fsync folder
}

}  // namespace pulse::model

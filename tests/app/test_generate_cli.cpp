// `pulse generate` end to end: the built binary, run as a child process on the stories260k fixture, must
// print llama2.c's greedy continuation, and bad inputs must fail with messages naming the file or option.
#include "tests/torch_catch.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/run/checkpoint_manifest.h"
#include "model/tokenizer.h"
#include "sync/io/atomic_file.h"
#include "tests/app/run_test_util.h"
#include "tests/model/stories260k_fixture.h"

namespace {

/// Output of one `pulse generate ...` run.
struct Run {
  int code = -1;
  std::string out, err;
};

/// Runs `pulse generate <args>` with logs in `dir`.
Run generate(const std::vector<std::string>& args, const std::string& dir) {
  std::vector<std::string> all = {"generate"};
  all.insert(all.end(), args.begin(), args.end());
  const std::string logs = dir + "/generate";
  Run r;
  r.code = pulse::test_run::wait_exit(pulse::test_run::spawn_pulse(all, logs));
  r.out = pulse::sync::read_file(logs + ".out");
  r.err = pulse::sync::read_file(logs + ".err");
  return r;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("pulse generate --greedy reproduces llama2.c's stories260k continuation", "[app][cli][generate]") {
  const auto fx = pulse::test::load_stories260k();
  const pulse::test_run::ScopedTempDir scoped("generate-ok");
  const std::string dir = scoped.path;
  std::string prompt;
  for (size_t i = 0; i < fx.greedy_prompt.size(); ++i)
    prompt += (i ? "," : "") + std::to_string(fx.greedy_prompt[i]);
  const std::string n = std::to_string(fx.greedy_continuation.size());

  auto r =
      generate({"--model", fx.dir, "--prompt-ids", prompt, "--greedy", "--max-new-tokens", n, "--json"}, dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("ids").get<std::vector<int32_t>>() == fx.greedy_continuation);
  CHECK(j.at("text").is_null());  // stories260k ships no tokenizer
  CHECK(j.at("prompt_ids").get<std::vector<int32_t>>() == fx.greedy_prompt);
  CHECK(j.at("finish") == "length");

  // Plain output without a tokenizer: the ids, comma-separated. BF16 compute runs too.
  r = generate({"--model", fx.dir, "--prompt-ids", prompt, "--greedy", "--max-new-tokens", "5"}, dir);
  REQUIRE(r.code == 0);
  std::string want;
  for (size_t i = 0; i < 5; ++i) want += (i ? "," : "") + std::to_string(fx.greedy_continuation[i]);
  CHECK(r.out == want + "\n");
  r = generate(
      {"--model", fx.dir, "--prompt-ids", prompt, "--max-new-tokens", "8", "--dtype", "bf16", "--json"}, dir);
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("ids").size() <= 8);
  std::filesystem::remove_all(dir);
}

TEST_CASE("pulse generate --prompt uses the tokenizer in the model folder", "[app][cli][generate]") {
  // stories260k's own tok512 was not obtained: a 480-piece SentencePiece BPE (ids < 512) stands in, so
  // the check is the plumbing (encode with BOS, decode of the continuation), not the story text.
  const auto fx = pulse::test::load_stories260k();
  const pulse::test_run::ScopedTempDir scoped("generate-tok");
  const std::string dir = scoped.path;
  const std::string model = dir + "/model";
  std::filesystem::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(fx.dir + "/" + f, model + "/" + f);
  std::vector<std::string> lines;
  std::istringstream in(
      pulse::sync::read_file(pulse::test::shared_path("models/sentencepiece-test/botchan.txt")));
  for (std::string l; std::getline(in, l) && lines.size() < 2000;)
    if (!l.empty()) lines.push_back(l);
  pulse::model::train_sentencepiece_bpe(lines, 480, model + "/tokenizer.model", 1);
  const auto tok = pulse::model::load_tokenizer(model + "/tokenizer.model");

  const std::string text = "Once upon a time";
  auto r = generate({"--model", model, "--prompt", text, "--greedy", "--max-new-tokens", "6", "--json"}, dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  const auto want_prompt = tok->encode(text, /*add_bos=*/true);
  CHECK(want_prompt.front() == 1);
  CHECK(j.at("prompt_ids").get<std::vector<int32_t>>() == want_prompt);
  const auto ids = j.at("ids").get<std::vector<int32_t>>();
  CHECK(!ids.empty());
  CHECK(j.at("text") == tok->decode(ids));
  std::filesystem::remove_all(dir);
}

TEST_CASE("pulse generate names the file or option at fault", "[app][cli][generate]") {
  const auto fx = pulse::test::load_stories260k();
  const pulse::test_run::ScopedTempDir scoped("generate-bad");
  const std::string dir = scoped.path;
  const std::string missing = dir + "/no-such-model";
  auto r = generate({"--model", missing, "--prompt-ids", "1"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, missing + ": model folder not found"));

  // A folder without config.json, then one with config.json but no weights.
  const std::string bare = dir + "/bare";
  std::filesystem::create_directories(bare);
  r = generate({"--model", bare, "--prompt-ids", "1"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, bare + "/config.json"));
  std::filesystem::copy_file(fx.dir + "/config.json", bare + "/config.json");
  r = generate({"--model", bare, "--prompt-ids", "1"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, bare));
  CHECK(contains(r.err, "model.safetensors"));

  // Truncated weights: the safetensors reader names the file.
  const std::string weights = pulse::sync::read_file(fx.dir + "/model.safetensors");
  pulse::sync::write_file_atomic(bare + "/model.safetensors", weights.substr(0, weights.size() / 2));
  r = generate({"--model", bare, "--prompt-ids", "1"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, bare + "/model.safetensors"));

  // A step's model whose checkpoint manifest disagrees (one flipped bit; the file still parses).
  const std::string ckpt = dir + "/step-2";
  std::filesystem::create_directories(ckpt + "/model");
  std::filesystem::copy_file(fx.dir + "/config.json", ckpt + "/model/config.json");
  pulse::sync::write_file_atomic(ckpt + "/model/model.safetensors", weights);
  pulse::app::write_checkpoint_manifest(ckpt);
  std::string flipped = weights;
  flipped[flipped.size() - 100] ^= 1;
  pulse::sync::write_file_atomic(ckpt + "/model/model.safetensors", flipped);
  r = generate({"--model", ckpt + "/model", "--prompt-ids", "1"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "MANIFEST.json disagrees"));
  CHECK(contains(r.err, ckpt + "/model/model.safetensors: xxh3"));

  // Prompt errors: text without a tokenizer, bad ids, ids outside the vocabulary, neither or both.
  r = generate({"--model", fx.dir, "--prompt", "Once upon a time"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "--prompt needs a tokenizer"));
  r = generate({"--model", fx.dir, "--prompt-ids", "1,x"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "'x' is not a token id"));
  r = generate({"--model", fx.dir, "--prompt-ids", "1,512"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "512 is outside the vocabulary of 512"));
  r = generate({"--model", fx.dir, "--prompt-ids", "1", "--top-p", "0"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "top_p"));
  r = generate({"--model", fx.dir}, dir);
  CHECK(r.code != 0);
  CHECK(contains(r.err, "exactly one of --prompt"));
  r = generate({"--model", fx.dir, "--prompt", "a", "--prompt-ids", "1"}, dir);
  CHECK(r.code != 0);

  // An absurd config.json: refused by its sizes before the weights are read or the model allocated.
  const std::string huge = dir + "/huge";
  std::filesystem::create_directories(huge);
  auto cfg = nlohmann::json::parse(pulse::sync::read_file(fx.dir + "/config.json"));
  cfg["num_hidden_layers"] = 1000000;
  pulse::sync::write_file_atomic(huge + "/config.json", cfg.dump());
  r = generate({"--model", huge, "--prompt-ids", "1"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "pulse generate: --model '" + huge + "/config.json' (num_hidden_layers = 1000000"));
  CHECK(contains(r.err, "needs at least"));
  std::filesystem::remove_all(dir);
}

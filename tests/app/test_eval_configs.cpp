// The shipped data configs on a fresh clone: every one validates; a run on a file that has not been fetched
// names the `pulse data fetch` to run; `pulse data fetch --from` + `pulse eval configs/mbpp-eval.toml` (test
// split, sampled pass@k) works from a clean folder; configs/qwen2.5-math-grpo.toml takes one GRPO step with
// ../shared/models/stories260k standing in for the model.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datasets/loaders.h"
#include "model/tokenizer.h"
#include "sync/io/atomic_file.h"
#include "tests/app/cli_test_util.h"
#include "tests/app/run_test_util.h"
#include "tests/test_paths.h"

using pulse::test::shared_path;
using pulse::test::source_path;
using pulse::test_cli::pulse_cli;
namespace fs = std::filesystem;

namespace {

/// chdir for one scope (a fresh clone's view: the configs' relative datasets/data/ paths resolve there).
struct ScopedCwd {
  fs::path old = fs::current_path();
  explicit ScopedCwd(const std::string& dir) { fs::current_path(dir); }
  ~ScopedCwd() { fs::current_path(old); }
};

}  // namespace

TEST_CASE("every data config validates with pulse config --check", "[app][data]") {
  for (const char* cfg : {"configs/math500-eval.toml", "configs/mbpp-eval.toml", "configs/gsm8k-eval.toml",
                          "configs/mbpp-tiny.toml"}) {
    INFO(cfg);
    auto r = pulse_cli({"config", "--check", source_path(cfg)});
    CHECK(r.code == 0);
    CHECK(r.err.empty());
  }
  // --check reads the model too: the Qwen config's checkpoint folder (not downloaded here) is named, and
  // with stories260K standing in the config validates.
  const std::string qwen = source_path("configs/qwen2.5-math-grpo.toml");
  auto q = pulse_cli({"config", "--check", qwen});
  CHECK(q.code == 1);
  CHECK(q.err.find("model.path 'models/Qwen2.5-Math-1.5B': cannot open") != std::string::npos);
  q = pulse_cli({"config", "--check", qwen, "--set", "model.path=" + shared_path("models/stories260k")});
  CHECK(q.code == 0);
  CHECK(q.err.empty());
  auto r = pulse_cli({"config", "--check", source_path("configs/mbpp-eval.toml")});
  CHECK(r.out.find("eval_split = \"test\"") != std::string::npos);
  CHECK(r.out.find("n_samples = 20") != std::string::npos);
  auto bad = pulse_cli(
      {"config", "--check", source_path("configs/math500-eval.toml"), "--set", "data.eval_split=test"});
  CHECK(bad.code != 0);
  CHECK(bad.err.find("data.eval_split' must be all unless data.task = mbpp") != std::string::npos);
  auto badk = pulse_cli({"config", "--check", source_path("configs/mbpp-eval.toml"), "--set", "eval.k=21"});
  CHECK(badk.err.find("eval.k' must be in 1..eval.n_samples (20) (got 21)") != std::string::npos);
}

TEST_CASE("a model.path that is not an HF checkpoint fails naming the key", "[app][data]") {
  // The error was only "cannot open '/x/config.json': ...", without the key that named the folder.
  pulse::test_run::ScopedTempDir empty("model-path-empty");
  const std::string tok = shared_path("models/llama2-tokenizer/tokenizer.model");
  for (const std::string& path : {empty.path + "/absent", empty.path}) {
    INFO(path);
    auto r = pulse_cli({"eval", source_path("configs/default.toml"), "--quiet", "--set", "model.path=" + path,
                        "--set", "tokenizer.path=" + tok});
    CHECK(r.code == 1);
    CHECK(r.err.find("model.path '" + path + "': cannot open") != std::string::npos);
  }
  // The safetensors file instead of its folder.
  const std::string file = shared_path("models/stories260k/model.safetensors");
  auto r = pulse_cli({"eval", source_path("configs/default.toml"), "--quiet", "--set", "model.path=" + file,
                      "--set", "tokenizer.path=" + tok});
  CHECK(r.code == 1);
  CHECK(r.err.find("model.path '" + file + "': a file, not a folder") != std::string::npos);
}

TEST_CASE("an eval config on a file not fetched yet names the pulse data fetch to run", "[app][data]") {
  pulse::test_run::ScopedTempDir clone("data-missing");
  ScopedCwd cwd(clone.path);
  const std::pair<const char*, const char*> cases[] = {{"configs/math500-eval.toml", "math500"},
                                                       {"configs/mbpp-eval.toml", "mbpp"},
                                                       {"configs/gsm8k-eval.toml", "gsm8k"}};
  for (const auto& [cfg, name] : cases) {
    INFO(cfg);
    auto r = pulse_cli({"eval", source_path(cfg), "--quiet", "--set",
                        "model.path=" + shared_path("models/stories260k"), "--set", "tokenizer.path=unused"});
    CHECK(r.code == 1);
    CHECK(r.err.find("not found (key data.eval_path) (run `pulse data fetch " + std::string(name) +
                     "` to download it)") != std::string::npos);
  }
  // qwen2.5-math-grpo reads MATH train first (once its model is there: stories260K stands in).
  auto r = pulse_cli({"run", source_path("configs/qwen2.5-math-grpo.toml"), "--quiet", "--set",
                      "run.dir=" + clone.path + "/run", "--set",
                      "model.path=" + shared_path("models/stories260k")});
  CHECK(r.code == 1);
  CHECK(r.err.find("datasets/data/math_train.jsonl' not found (key data.path)") != std::string::npos);
  CHECK(r.err.find("(run `pulse data fetch math` to download it)") != std::string::npos);
}

TEST_CASE("pulse data fetch --from, then pulse eval configs/mbpp-eval.toml: test split, sampled pass@k",
          "[app][data]") {
  pulse::test_run::ScopedTempDir clone("data-mbpp");
  ScopedCwd cwd(clone.path);
  auto f = pulse_cli({"data", "fetch", "mbpp", "gsm8k", "--from", shared_path("datasets")});
  REQUIRE(f.code == 0);
  CHECK(f.out.find("mbpp: datasets/data/mbpp.jsonl 563743 bytes sha256 ccf64cea") != std::string::npos);
  CHECK(f.out.find("gsm8k: datasets/data/gsm8k_test.jsonl 749738 bytes") != std::string::npos);
  auto again = pulse_cli({"data", "fetch", "mbpp"});  // installed: no network needed
  CHECK(again.code == 0);
  CHECK(again.out.find("(already installed, verified)") != std::string::npos);
  auto list = pulse_cli({"data", "list"});
  CHECK(list.code == 0);
  CHECK(
      list.out.find("datasets/data/mbpp.jsonl 563743 bytes sha256 "
                    "ccf64ceae9c5403bf50a044cb6d505bfd2a2963ee58338ba268fd65beab92a9f (present, verified)") !=
      std::string::npos);
  CHECK(list.out.find("datasets/data/math500_test.jsonl 446564 bytes sha256 "
                      "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132 (missing)") !=
        std::string::npos);
  CHECK(list.out.find("source https://people.eecs.berkeley.edu/~hendrycks/MATH.tar") != std::string::npos);
  {  // A damaged installed file is listed as damaged (its own size and hash), not as present.
    const std::string gsm = "datasets/data/gsm8k_test.jsonl";
    const std::string good = pulse::sync::read_file(gsm);
    pulse::sync::write_file_atomic(gsm, good.substr(0, 1000));
    auto damaged = pulse_cli({"data", "list"});
    CHECK(damaged.code == 1);
    CHECK(damaged.out.find(
              "datasets/data/gsm8k_test.jsonl 749738 bytes sha256 "
              "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14 (present but DAMAGED: "
              "1000 bytes sha256 ") != std::string::npos);
    pulse::sync::write_file_atomic(gsm, good);
  }
  auto unknown = pulse_cli({"data", "fetch", "humaneval"});
  CHECK(unknown.code == 1);
  CHECK(unknown.err.find("unknown dataset 'humaneval' (known: math500, math, mbpp, gsm8k)") !=
        std::string::npos);

  // A stand-in tokenizer with exactly stories260K's 512 ids (the model samples any of them), trained on the
  // MBPP prompts.
  std::vector<std::string> lines;
  for (const auto& p : pulse::datasets::load_mbpp_jsonl("datasets/data/mbpp.jsonl"))
    lines.push_back(p.question);
  pulse::model::train_sentencepiece_bpe(lines, 512, clone.path + "/tok.model", 1);
  // configs/mbpp-eval.toml on stories260K with the stand-in tokenizer, plus `sets` (key=value).
  auto eval_mbpp = [&](const std::vector<std::string>& sets) {
    std::vector<std::string> args = {"eval",    source_path("configs/mbpp-eval.toml"),
                                     "--quiet", "--log-json",
                                     "--set",   "model.path=" + shared_path("models/stories260k"),
                                     "--set",   "model.dtype=float32",
                                     "--set",   "tokenizer.path=" + clone.path + "/tok.model",
                                     "--set",   "tokenizer.chat_template=plain",
                                     "--set",   "eval.max_new_tokens=8"};
    for (const auto& kv : sets) args.insert(args.end(), {"--set", kv});
    return pulse_cli(args);
  };
  auto r = eval_mbpp({"eval.max_problems=3", "eval.n_samples=4", "eval.k=2"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["problems"] == 3);
  CHECK(j["n"] == 4);
  CHECK(j["k"] == 2);
  CHECK(j["infrastructure_errors"] == 0);  // every sample ran in the sandbox
  // A story model writes no program: every sample fails, pass@1 = pass@2 = 0, 12 samples counted.
  CHECK(j["pass_at_1"] == 0.0);
  CHECK(j["pass_at_k"] == 0.0);
  CHECK(j["by_subject"]["(none)"]["total"] == 12);

  // The few-shot prompt for base models: exemplars 2, 3, 4 before each task, generation stops at [DONE].
  auto few = eval_mbpp({"data.mbpp_shots=3", "eval.max_problems=2", "eval.n_samples=2", "eval.k=1"});
  INFO(few.err);
  REQUIRE(few.code == 0);
  const auto fj = nlohmann::json::parse(few.out);
  CHECK(fj["problems"] == 2);
  CHECK(fj["infrastructure_errors"] == 0);
  CHECK(fj["pass_at_1"] == 0.0);
}

TEST_CASE("configs/qwen2.5-math-grpo.toml takes one GRPO step with stories260k standing in", "[app][data]") {
  pulse::test_run::ScopedTempDir dir("qwen-standin");
  // The 24 shortest MATH-500 problems (stories260K has 512 positions).
  std::vector<std::string> rows;
  std::ifstream in(shared_path("datasets/math500_test.jsonl"));
  for (std::string line; std::getline(in, line);) rows.push_back(line);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.size() < b.size(); });
  std::ofstream out(dir.path + "/short.jsonl");
  for (size_t i = 0; i < 24; ++i) out << rows[i] << "\n";
  out.close();
  const std::string data = dir.path + "/short.jsonl";
  // The stand-in tokenizer: 512 ids like stories260K, trained on MATH-500 problems and solutions.
  std::vector<std::string> lines;
  for (const auto& p : pulse::datasets::load_math_jsonl(shared_path("datasets/math500_test.jsonl"))) {
    lines.push_back(p.question);
    lines.push_back(p.solution);
  }
  pulse::model::train_sentencepiece_bpe(lines, 512, dir.path + "/tok.model", 1);
  auto r = pulse_cli({"run",
                      source_path("configs/qwen2.5-math-grpo.toml"),
                      "--quiet",
                      "--set",
                      "model.path=" + shared_path("models/stories260k"),
                      "--set",
                      "tokenizer.path=" + dir.path + "/tok.model",
                      "--set",
                      "tokenizer.chat_template=plain",
                      "--set",
                      "data.path=" + data,
                      "--set",
                      "data.eval_path=" + data,
                      "--set",
                      "rl.steps=1",
                      "--set",
                      "rl.prompts_per_step=2",
                      "--set",
                      "rl.group_size=2",
                      "--set",
                      "rl.max_new_tokens=8",
                      "--set",
                      "eval.before=false",
                      "--set",
                      "eval.after=false",
                      "--set",
                      "run.threads=1",
                      "--set",
                      "run.dir=" + dir.path + "/run"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::ifstream s(dir.path + "/run/summary.json");
  const auto summary = nlohmann::json::parse(s);
  CHECK(summary["steps"] == 1);
  CHECK(summary["bit_identical_every_step"] == true);
  // The run used the config's RL settings: BF16 compute, lr 1e-6, delta patches.
  std::ifstream m(dir.path + "/run/metrics.jsonl");
  std::string row;
  REQUIRE(std::getline(m, row));
  const auto metrics = nlohmann::json::parse(row);
  CHECK(metrics["lr"] == Approx(1e-6));
  std::ifstream c(dir.path + "/run/config.toml");
  std::string resolved((std::istreambuf_iterator<char>(c)), std::istreambuf_iterator<char>());
  CHECK(resolved.find("dtype = \"bfloat16\"") != std::string::npos);
  CHECK(resolved.find("values = \"delta\"") != std::string::npos);
}

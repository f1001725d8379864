// `pulse bench generate` on the CPU with the tiny Llama config: the JSON's runs (tokens/s, every row's
// tokens counted, the static path equal to eager), the table, and bad options refused naming the option.
#include "tests/torch_catch.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/app/cli_test_util.h"
#include "tests/test_paths.h"

using namespace pulse;

namespace {

const std::string kTiny = test::source_path("configs/tiny-llama.json");

/// `pulse bench generate --device cpu --model-config tiny ...` with a small, fast shape unless overridden.
test_cli::CliResult bench_generate(std::vector<std::string> extra) {
  std::vector<std::string> args = {"bench", "generate", "--device", "cpu", "--model-config", kTiny};
  args.insert(args.end(), extra.begin(), extra.end());
  return test_cli::pulse_cli(args);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("pulse bench generate --json: tokens/s and every row's tokens per run", "[app][cli][bench]") {
  const auto r = bench_generate(
      {"--batch", "2,3", "--prompt-tokens", "5", "--new-tokens", "6", "--decode", "eager", "--json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("bench") == "generate");
  CHECK(j.at("device") == "cpu");
  CHECK(j.at("dtype") == "float32");  // the CPU's default
  CHECK(j.at("model_type") == "llama");
  CHECK(j.at("parameters").get<int64_t>() > 0);
  CHECK(j.at("prompt_tokens") == 5);
  CHECK(j.at("new_tokens") == 6);
  const auto& runs = j.at("runs");
  REQUIRE(runs.size() == 2);
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    const int64_t batch = i == 0 ? 2 : 3;
    INFO("run " << i);
    CHECK(run.at("batch") == batch);
    CHECK(run.at("decode") == "eager");
    CHECK(run.at("mode") == "eager");
    CHECK(run.at("error").is_null());
    CHECK(run.at("tokens_per_s").get<double>() > 0);
    CHECK(run.at("wall_s").get<double>() > 0);
    CHECK(run.at("wall_s_each").size() == 1);
    CHECK(run.at("new_tokens") == batch * 6);
    CHECK(run.at("tokens_equal_to_eager") == 1.0);
  }
}

TEST_CASE("pulse bench generate: the static path's tokens equal eager's in float32",
          "[app][cli][bench][static]") {
  const auto r = bench_generate({"--batch", "3", "--prompt-tokens", "5", "--new-tokens", "6", "--decode",
                                 "static,eager", "--dtype", "float32", "--repeats", "2", "--json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto runs = nlohmann::json::parse(r.out).at("runs");
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].at("decode") == "eager");  // eager runs first whatever the order given
  CHECK(runs[1].at("decode") == "static");
  CHECK(runs[1].at("mode") == "static");
  CHECK(runs[1].at("error").is_null());
  CHECK(runs[1].at("new_tokens") == 18);
  CHECK(runs[1].at("wall_s_each").size() == 2);
  CHECK(runs[1].at("tokens_equal_to_eager") == 1.0);
}

TEST_CASE("pulse bench generate prints a table without --json", "[app][cli][bench]") {
  const auto r = bench_generate({"--batch", "2", "--prompt-tokens", "3", "--new-tokens", "2", "--decode",
                                 "eager", "--temperature", "0"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "tokens/s"));
  CHECK(contains(r.out, "greedy"));
  CHECK(contains(r.out, "eager"));
}

TEST_CASE("pulse bench generate refuses bad options naming them", "[app][cli][bench]") {
  struct Bad {
    std::vector<std::string> args;
    std::string says;
    int code;
  };
  const std::vector<Bad> bad = {
      {{"--batch", "0"}, "--batch", 2},
      {{"--batch", "2,5000"}, "--batch", 2},
      {{"--prompt-tokens", "0"}, "--prompt-tokens", 2},
      {{"--new-tokens", "40000"}, "--new-tokens", 2},
      {{"--repeats", "0"}, "--repeats", 2},
      {{"--temperature", "-1"}, "--temperature -1: must be a finite number >= 0", 2},
      {{"--temperature", "nan"}, "--temperature", 2},
      {{"--seed", "-1"}, "--seed: must be >= 0", 2},
      {{"--dtype", "float16"}, "--dtype", 2},
      {{"--decode", "fast"}, "--decode", 2},
      {{"--decode", "eager,eager"}, "--decode: 'eager' is given twice", 2},
      {{"--decode", "cuda_graph"}, "--decode cuda_graph on cpu", 2},
      {{"--model-config", "/nonexistent/config.json"}, "--model-config", 2},
      // tiny-llama.json: max_position_embeddings = 2048
      {{"--prompt-tokens", "2000", "--new-tokens", "100"}, "max_position_embeddings = 2048", 2},
  };
  for (const auto& b : bad) {
    // A small shape, less the options this case sets (a scalar option given twice is its own error).
    std::vector<std::string> args = b.args;
    for (const char* o : {"--batch", "--new-tokens", "--prompt-tokens"})
      if (std::find(b.args.begin(), b.args.end(), o) == b.args.end()) args.insert(args.end(), {o, "2"});
    const auto r = bench_generate(args);
    INFO(b.args.at(0) << " " << b.args.at(1) << ": " << r.err);
    CHECK(r.code == b.code);
    CHECK(contains(r.err, b.says));
  }
  // A model, batch and length that cannot fit: refused before anything is allocated (exit 1, the estimate).
  const auto r = test_cli::pulse_cli(
      {"bench", "generate", "--device", "cpu", "--model-config", test::source_path("configs/qwen2.5-7b.json"),
       "--batch", "4096", "--prompt-tokens", "16000", "--new-tokens", "16000", "--dtype", "float32"});
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "needs at least"));
  CHECK(contains(r.err, "use a smaller model or a smaller --batch, --prompt-tokens or --new-tokens"));
}

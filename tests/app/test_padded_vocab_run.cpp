// A model with more embedding rows than its tokenizer has ids (a padded vocabulary, as Qwen2.5's 151,936
// rows for ~151,665 ids) trains and evaluates to the end: the workers never sample the extra rows and the
// trainer scores under the same rule (model::SamplingParams::vocab_limit). Before, the run ended at the
// first such id: "SentencePiece decode: id 360 out of range".
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datasets/loaders.h"
#include "model/tokenizer.h"
#include "tests/app/cli_test_util.h"
#include "tests/app/run_test_util.h"
#include "tests/test_paths.h"

using pulse::test::shared_path;
using pulse::test::source_path;
using pulse::test_cli::pulse_cli;

TEST_CASE("stories260K's 512 rows with a 400-id tokenizer: GRPO and greedy Pass@1 run to the end",
          "[app][vocab]") {
  pulse::test_run::ScopedTempDir dir("padded-vocab");
  // The 16 shortest MATH-500 problems (stories260K has 512 positions).
  std::vector<std::string> rows;
  std::ifstream in(shared_path("datasets/math500_test.jsonl"));
  for (std::string line; std::getline(in, line);) rows.push_back(line);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.size() < b.size(); });
  const std::string data = dir.path + "/short.jsonl";
  {
    std::ofstream out(data);
    for (size_t i = 0; i < 16; ++i) out << rows[i] << "\n";
  }
  // 400 ids for the model's 512 rows: ids 400..511 are rows without a token. stories260K was trained on
  // another tokenizer, so to it these prompts are noise and its draws spread over all 512 rows.
  std::vector<std::string> lines;
  for (const auto& p : pulse::datasets::load_math_jsonl(shared_path("datasets/math500_test.jsonl"))) {
    lines.push_back(p.question);
    lines.push_back(p.solution);
  }
  const std::string tok = dir.path + "/tok.model";
  pulse::model::train_sentencepiece_bpe(lines, 400, tok, 1);
  REQUIRE(pulse::model::load_tokenizer(tok)->vocab_size() == 400);
  const std::vector<std::string> sets = {"model.path=" + shared_path("models/stories260k"),
                                         "tokenizer.path=" + tok,
                                         "tokenizer.chat_template=plain",
                                         "data.path=" + data,
                                         "data.eval_path=" + data,
                                         "rl.steps=2",
                                         "rl.prompts_per_step=2",
                                         "rl.group_size=4",
                                         "rl.max_new_tokens=24",
                                         "rl.top_k=40",
                                         "eval.before=false",
                                         "eval.max_problems=4",
                                         "eval.max_new_tokens=24",
                                         "run.threads=1",
                                         "run.dir=" + dir.path + "/run"};
  std::vector<std::string> args = {"run", source_path("configs/qwen2.5-math-grpo.toml"), "--quiet"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const auto r = pulse_cli(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::ifstream s(dir.path + "/run/summary.json");
  const auto summary = nlohmann::json::parse(s);
  CHECK(summary["steps"] == 2);
  CHECK(summary["bit_identical_every_step"] == true);
  CHECK(summary["pass_at_1_after"].is_number());  // greedy Pass@1 decoded every response
  // Every step's responses: 2 prompts x 4 samples of up to 24 tokens, all decoded by the workers.
  std::ifstream metrics(dir.path + "/run/metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto row = nlohmann::json::parse(line);
    if (!row.contains("response_tokens")) continue;
    CHECK(row["response_tokens"].get<int64_t>() > 8);
    ++steps;
  }
  CHECK(steps == 2);
}

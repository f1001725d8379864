// `pulse generate`: a model built so that greedy decoding answers EOS at once, with the real Llama 2
// tokenizer (../shared/models/llama2-tokenizer): the EOS that stopped it is in "ids" and "finish" is
// "stop", and the text holds no "</s>" (special tokens are ids, not text; it printed "...</s>").
#include <torch/torch.h>
#include "tests/torch_catch.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "tests/app/cli_test_util.h"
#include "tests/app/run_test_util.h"
#include "tests/rl/rl_test_util.h"
#include "tests/test_paths.h"

using namespace pulse;

TEST_CASE("pulse generate --json: the stop token is an id, not text", "[app][cli][generate]") {
  test_run::ScopedTempDir dir("pulse-generate");
  const std::string tok_path = test::shared_path("models/llama2-tokenizer/tokenizer.model");
  const auto tok = model::load_tokenizer(tok_path);
  const std::vector<int32_t> prompt = tok->encode("Once", /*add_bos=*/true);
  REQUIRE(prompt.size() >= 2);
  // Every weight 0 but the tied embedding: the prompt's tokens along v, EOS (2) along 2v. The residual
  // stream of the last position is then v (attention and MLP add 0), and its logits peak at EOS.
  torch::manual_seed(3);
  model::Transformer net(test::tiny_llama(32000), torch::kFloat32);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.zero_();
    for (auto& item : net->named_parameters())
      if (item.key().find("norm") != std::string::npos) item.value().fill_(1.0);
    auto e = net->named_parameters()["model.embed_tokens.weight"];
    const auto v = torch::linspace(-1.0, 1.0, e.size(1));
    for (int32_t id : prompt) e[id].copy_(v);
    e[2].copy_(2 * v);
  }
  model::save_hf_checkpoint(*net, dir.path + "/model");
  const auto r = test_cli::pulse_cli({"generate", "--model", dir.path + "/model", "--tokenizer", tok_path,
                                      "--prompt", "Once", "--json", "--greedy", "--max-new-tokens", "8"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["finish"] == "stop");
  CHECK(j["ids"] == std::vector<int32_t>{2});
  CHECK(j["text"] == "");
  CHECK(j["prompt_ids"] == prompt);
}

TEST_CASE("pulse generate and pulse sync refuse a negative number for an unsigned option", "[app][cli]") {
  // CLI11 read "-1" into a uint64_t as 2^64 - 1 without a word.
  auto r = test_cli::pulse_cli({"generate", "--model", "/nonexistent", "--prompt-ids", "1", "--seed", "-1"});
  CHECK(r.code != 0);
  CHECK(r.err.find("--seed: must be >= 0 (got -1)") != std::string::npos);
  r = test_cli::pulse_cli({"sync", "diff", "a", "b", "-o", "c", "--base-version", "-3"});
  CHECK(r.code != 0);
  CHECK(r.err.find("--base-version: must be >= 0 (got -3)") != std::string::npos);
  r = test_cli::pulse_cli({"sync", "anchor", "a", "-o", "c", "--version", "-1"});
  CHECK(r.err.find("--version: must be >= 0 (got -1)") != std::string::npos);
}

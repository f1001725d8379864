// model_config_for with model.path: a checkpoint whose vocabulary cannot hold the tokenizer's ids is
// refused before anything runs, naming both (real files: ../shared/models/stories260k, vocab_size 512, and
// the Llama 2 SentencePiece tokenizer, 32000 pieces).
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "app/config.h"
#include "app/setup.h"
#include "model/tokenizer.h"
#include "tests/app/run_test_util.h"
#include "tests/test_paths.h"

using pulse::test::shared_path;

TEST_CASE("model.path with a vocab_size below the tokenizer's pieces fails naming both", "[app][setup]") {
  pulse::app::Config config;
  config.model.path = shared_path("models/stories260k");
  config.tokenizer.path = shared_path("models/llama2-tokenizer/tokenizer.model");
  const auto tok = pulse::model::load_tokenizer(config.tokenizer.path);
  REQUIRE(tok->vocab_size() == 32000);
  std::string what;
  try {
    pulse::app::model_config_for(config, *tok);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  CHECK_THAT(what, Catch::Contains("tokenizer.path '" + config.tokenizer.path + "' has 32000 pieces"));
  CHECK_THAT(what, Catch::Contains("model.path '" + config.model.path + "' has vocab_size 512"));

  // The same checkpoint config with room for the tokenizer's ids is accepted as it is.
  pulse::test_run::ScopedTempDir dir("vocab-room");
  std::ifstream in(config.model.path + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["vocab_size"] = 32000;
  std::ofstream(dir.path + "/config.json") << cfg.dump();
  config.model.path = dir.path;
  const auto mc = pulse::app::model_config_for(config, *tok);
  CHECK(mc.vocab_size == 32000);
  CHECK(mc.hidden_size == 64);
  CHECK(mc.num_hidden_layers == 5);
}

// model_config_for with model.path: a checkpoint whose vocabulary cannot hold the tokenizer's ids is
// refused before anything runs, naming both (real files: ../shared/models/stories260k, vocab_size 512, and
// the Llama 2 SentencePiece tokenizer, 32000 pieces); one that lies in a checkpoint folder is checked
// against the checkpoint's MANIFEST.json first.
#include "tests/torch_catch.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/run/checkpoint_manifest.h"
#include "app/config.h"
#include "app/setup.h"
#include "model/tokenizer.h"
#include "sync/io/atomic_file.h"
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

TEST_CASE("model.path inside a checkpoint is checked against the checkpoint's manifest before it is read",
          "[app][setup][checkpoint]") {
  // A checkpoint folder as save_checkpoint lays it out: model/ (the HF folder `pulse eval` or a new run
  // reads), state/, MANIFEST.json over both. The model's files are the real stories260k ones.
  pulse::app::Config config;
  config.tokenizer.path = shared_path("models/llama2-tokenizer/tokenizer.model");
  const auto tok = pulse::model::load_tokenizer(config.tokenizer.path);
  pulse::test_run::ScopedTempDir dir("model-in-checkpoint");
  const std::string ckpt = dir.path + "/step-4";
  std::filesystem::create_directories(ckpt + "/model");
  std::filesystem::create_directories(ckpt + "/state");
  std::ifstream in(shared_path("models/stories260k/config.json"));
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["vocab_size"] = 32000;  // room for the tokenizer's ids (only config.json is read here)
  std::ofstream(ckpt + "/model/config.json") << cfg.dump();
  std::filesystem::copy_file(shared_path("models/stories260k/model.safetensors"),
                             ckpt + "/model/model.safetensors");
  std::ofstream(ckpt + "/state/train_state.json") << "{\"step\": 4}";
  pulse::app::write_checkpoint_manifest(ckpt);

  config.model.path = ckpt + "/model";
  CHECK(pulse::app::model_config_for(config, *tok).hidden_size == 64);
  // A file outside the model folder that changed is the resume's business, not a reader's of the model.
  std::ofstream(ckpt + "/state/train_state.json") << "{\"step\": 5}";
  CHECK_NOTHROW(pulse::app::model_config_for(config, *tok));
  std::ofstream(ckpt + "/state/notes.txt") << "an unlisted file the resume never reads";
  CHECK_NOTHROW(pulse::app::model_config_for(config, *tok));
  // A file added to the model folder after the save (an index would win over model.safetensors): refused.
  std::ofstream(ckpt + "/model/model.safetensors.index.json") << R"({"weight_map": {}})";
  CHECK_THROWS_WITH(pulse::app::model_config_for(config, *tok),
                    Catch::Contains(ckpt + "/model/model.safetensors.index.json: not listed in MANIFEST.json "
                                           "(added after the save)") &&
                        Catch::Contains("remove the ones added after the save"));
  std::filesystem::remove(ckpt + "/model/model.safetensors.index.json");
  CHECK_NOTHROW(pulse::app::model_config_for(config, *tok));

  // One flipped bit in the weights (the file still parses): refused, naming the file and the manifest.
  {
    std::fstream f(ckpt + "/model/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-100, std::ios::end);
    f.put(static_cast<char>(c ^ 0x01));
  }
  for (const std::string& path : {ckpt + "/model", ckpt + "/model/"}) {
    config.model.path = path;
    std::string what;
    try {
      pulse::app::model_config_for(config, *tok);
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    CHECK_THAT(what, Catch::Contains("model.path '" + path + "'"));
    CHECK_THAT(what, Catch::Contains("MANIFEST.json disagrees"));
    CHECK_THAT(what, Catch::Contains(ckpt + "/model/model.safetensors: xxh3"));
    CHECK_THAT(what, !Catch::Contains("train_state.json"));
  }

  // Reached through a symlink to the model folder: the same checkpoint, refused too.
  std::filesystem::create_directory_symlink(ckpt + "/model", dir.path + "/link");
  config.model.path = dir.path + "/link";
  CHECK_THROWS_WITH(pulse::app::model_config_for(config, *tok), Catch::Contains("MANIFEST.json disagrees"));
  config.model.path = dir.path + "/link/../model";  // ".." after the symlink: still step-4/model
  CHECK_THROWS_WITH(pulse::app::model_config_for(config, *tok), Catch::Contains("MANIFEST.json disagrees"));

  // Another tool's MANIFEST.json beside a model folder does not make it a checkpoint.
  const std::string manifest = pulse::sync::read_file(ckpt + "/MANIFEST.json");
  pulse::sync::write_file_atomic(ckpt + "/MANIFEST.json", R"({"name": "my model zoo", "version": 3})");
  config.model.path = ckpt + "/model";
  CHECK_NOTHROW(pulse::app::model_config_for(config, *tok));
  pulse::sync::write_file_atomic(ckpt + "/MANIFEST.json", manifest);

  // A checkpoint saved before manifests existed (or any HF folder): read as it is.
  std::filesystem::remove(ckpt + "/MANIFEST.json");
  config.model.path = ckpt + "/model";
  CHECK(pulse::app::model_config_for(config, *tok).num_hidden_layers == 5);
}

TEST_CASE("a checkpoint's model folder with a subfolder that cannot be listed is refused, not passed",
          "[app][setup][checkpoint]") {
  // An added file could hide in a folder the reader cannot list. Root lists every folder, so as root the
  // reader is `pulse generate` run as user nobody (setpriv), otherwise this process's user.
  pulse::test_run::ScopedTempDir dir("model-unlistable");
  const std::string ckpt = dir.path + "/step-2";
  std::filesystem::create_directories(ckpt + "/model");
  std::filesystem::copy_file(shared_path("models/stories260k/config.json"), ckpt + "/model/config.json");
  std::filesystem::copy_file(shared_path("models/stories260k/model.safetensors"),
                             ckpt + "/model/model.safetensors");
  pulse::app::write_checkpoint_manifest(ckpt);
  std::filesystem::create_directories(ckpt + "/model/sub");
  std::filesystem::permissions(ckpt + "/model/sub", std::filesystem::perms::owner_exec);
  const std::vector<std::string> generate = {
      "generate", "--model", ckpt + "/model", "--prompt-ids", "1", "--max-new-tokens", "1"};
  std::vector<std::string> as_reader = {pulse::test_run::pulse_binary()};
  if (::geteuid() == 0)
    as_reader = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", as_reader[0]};
  as_reader.insert(as_reader.end(), generate.begin(), generate.end());
  pid_t pid = pulse::test_run::spawn_logged(as_reader, dir.path + "/gen");
  CHECK(pulse::test_run::wait_exit(pid) != 0);
  CHECK_THAT(pulse::sync::read_file(dir.path + "/gen.err"),
             Catch::Contains(ckpt + "/model: it or a folder in it cannot be listed") &&
                 Catch::Contains("Permission denied"));
  std::filesystem::permissions(ckpt + "/model/sub", std::filesystem::perms::owner_all);
  // Listable again (and empty): the model reads.
  pid = pulse::test_run::spawn_pulse(generate, dir.path + "/gen-ok");
  CHECK(pulse::test_run::wait_exit(pid) == 0);
}

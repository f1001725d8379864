// Sizes refused before memory is spent (app/memory_check.h, issue 34): an absurd model config or a 10 MB
// problem is refused by file and field, by a process that stays far below 1 GB, and leaves no run folder;
// `pulse config --check` reads the model too. Before: num_hidden_layers = 1000000 reached 15.4 GB of RSS in
// ~60 s; hidden_size = 1e9 failed with "you tried to allocate 1248000000000 bytes" naming no file;
// --check never opened model.config; rms_norm_eps = -1 ran SFT and left a run folder.
#include "tests/torch_catch.h"

#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/memory_check.h"
#include "app/setup.h"
#include "model/default_config.h"
#include "model/model_size.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "sync/io/atomic_file.h"
#include "tests/app/cli_test_util.h"
#include "tests/app/run_test_util.h"
#include "tests/test_paths.h"

namespace fs = std::filesystem;
using pulse::test::shared_path;
using pulse::test_cli::pulse_cli;

namespace {

/// The tiny test Llama's config.json with `field` set to `value` (JSON text).
std::string tiny_json_with(const std::string& field, const std::string& value) {
  return R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 320,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16", ")" +
         field + "\": " + value + "}";
}

/// Exit code, stderr and peak RSS (KB) of `pulse ARGS...` as a child process.
struct ChildRun {
  int code = -1;
  std::string err;
  long max_rss_kb = 0;
  double seconds = 0;
};

ChildRun run_pulse(const std::vector<std::string>& args, const std::string& log_prefix) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = pulse::test_run::spawn_pulse(args, log_prefix);
  int status = 0;
  rusage ru{};
  REQUIRE(::wait4(pid, &status, 0, &ru) == pid);
  ChildRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = pulse::sync::read_file(log_prefix + ".err");
  r.max_rss_kb = ru.ru_maxrss;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace

TEST_CASE("parameter_count from a config equals the parameters the model builds", "[app][memory]") {
  // The estimate's base: exact for tied and untied embeddings, GQA and q/k/v biases (Qwen2).
  auto tiny = pulse::model::tiny_llama_config();
  auto stories = pulse::model::ModelConfig::from_hf_json(shared_path("models/stories260k"));
  auto qwen = tiny;
  qwen.model_type = "qwen2";
  qwen.attention_bias = true;
  qwen.tie_word_embeddings = false;
  for (const auto& mc : {tiny, stories, qwen}) {
    pulse::model::Transformer m(mc, torch::kFloat32);
    CHECK(pulse::model::parameter_count(mc) == static_cast<double>(m->num_parameters()));
  }
}

TEST_CASE("an absurd model config is refused by file and field before anything is allocated",
          "[app][memory]") {
  pulse::test_run::ScopedTempDir dir("sizes-absurd");
  const std::string cfg = pulse::test_run::write_tiny_config(dir.path);
  const std::string layers = dir.path + "/layers.json", wide = dir.path + "/wide.json";
  pulse::sync::write_file_atomic(layers, tiny_json_with("num_hidden_layers", "1000000"));
  pulse::sync::write_file_atomic(wide, tiny_json_with("hidden_size", "1000000000"));
  // The same as an HF folder's config.json (no weights needed: refused before they would be read).
  const std::string folder = dir.path + "/hf";
  fs::create_directories(folder);
  pulse::sync::write_file_atomic(folder + "/config.json", tiny_json_with("num_hidden_layers", "1000000"));
  const std::string tok = shared_path("models/llama2-tokenizer/tokenizer.model");
  struct Case {
    std::vector<std::string> sets;
    std::string file, field;
  };
  const Case cases[] = {
      {{"model.config=" + layers}, "model.config '" + layers + "'", "num_hidden_layers = 1000000"},
      {{"model.config=" + wide}, "model.config '" + wide + "'", "hidden_size = 1000000000"},
      {{"model.path=" + folder, "tokenizer.path=" + tok, "sft.steps=0"},
       "model.path '" + folder + "/config.json'",
       "num_hidden_layers = 1000000"},
  };
  int i = 0;
  for (const auto& c : cases) {
    INFO(c.file);
    const std::string run_dir = dir.path + "/run-" + std::to_string(i++);
    std::vector<std::string> args = {"run", cfg, "--quiet", "--set", "run.dir=" + run_dir};
    for (const auto& s : c.sets) args.insert(args.end(), {"--set", s});
    const ChildRun r = run_pulse(args, run_dir + "-log");
    INFO(r.err << " (" << r.seconds << " s, max RSS " << r.max_rss_kb << " KB)");
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains(cfg + ": " + c.file) && Catch::Contains(c.field) &&
                          Catch::Contains("needs at least") && Catch::Contains(" GB ("));
    CHECK(r.max_rss_kb < 1'000'000);  // < 1 GB: nothing of the model's size was allocated
    CHECK_FALSE(fs::exists(run_dir));
    // `pulse config --check` refuses it the same way.
    std::vector<std::string> check = {"config", "--check", cfg};
    for (const auto& s : c.sets) check.insert(check.end(), {"--set", s});
    const auto k = pulse_cli(check);
    CHECK(k.code == 1);
    CHECK_THAT(k.err, Catch::Contains(c.file) && Catch::Contains(c.field));
  }
}

TEST_CASE("run.max_memory_gb caps the estimate and the default tiny run fits", "[app][memory]") {
  pulse::app::Config config = pulse::app::parse_config("", "x.toml");
  const pulse::app::MemoryRole role{true, config.run.workers};
  CHECK_NOTHROW(pulse::app::check_model_inputs(config, "x.toml", role));
  const auto e = pulse::app::estimate_memory(config, pulse::model::tiny_llama_config(), role);
  CHECK(e.optimizer == 12 * e.parameters);
  CHECK(e.weights == 4 * e.parameters);  // model.dtype = float32
  CHECK(e.total() > 16 * e.parameters);
  config = pulse::app::parse_config("[run]\nmax_memory_gb = 0.001\n", "x.toml");
  CHECK_THROWS_WITH(pulse::app::check_model_inputs(config, "x.toml", role),
                    Catch::StartsWith("x.toml: the embedded tiny Llama") &&
                        Catch::Contains("but run.max_memory_gb = 0.001"));
  // Checked like every setting.
  CHECK_THROWS_WITH(pulse::app::parse_config("[run]\nmax_memory_gb = -1\n", "x.toml"),
                    Catch::Contains("run.max_memory_gb' must be >= 0"));
}

TEST_CASE("pulse config --check reads model.config and model folders", "[app][memory][config]") {
  pulse::test_run::ScopedTempDir dir("sizes-check");
  const std::string cfg = pulse::test::source_path("configs/default.toml");
  // A missing model.config or model.path is an error naming it (--check never opened either).
  auto r = pulse_cli({"config", "--check", cfg, "--set", "model.config=" + dir.path + "/missing.json"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("model.config '" + dir.path + "/missing.json': not found"));
  r = pulse_cli({"config", "--check", cfg, "--set", "model.path=" + dir.path + "/absent"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err,
             Catch::Contains("model.path '" + dir.path + "/absent': ") && Catch::Contains("cannot open"));
  // A bad value or type in it, by file and field.
  const std::string eps = dir.path + "/eps.json", arch = dir.path + "/arch.json";
  pulse::sync::write_file_atomic(eps, tiny_json_with("rms_norm_eps", "-1"));
  pulse::sync::write_file_atomic(arch, tiny_json_with("architectures", "[5]"));
  r = pulse_cli({"config", "--check", cfg, "--set", "model.config=" + eps});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains(eps + ": field \"rms_norm_eps\" must be a finite number > 0, got -1"));
  r = pulse_cli({"config", "--check", cfg, "--set", "model.config=" + arch});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains(arch + ": field \"architectures[0]\" must be a string"));
  // A real HF folder passes.
  r = pulse_cli({"config", "--check", cfg, "--set", "model.path=" + shared_path("models/stories260k")});
  CHECK(r.code == 0);
  CHECK(r.err.empty());
}

TEST_CASE("a model config with values that make NaNs fails before SFT and leaves no run folder",
          "[app][memory][config]") {
  pulse::test_run::ScopedTempDir dir("sizes-nan");
  const std::string cfg = pulse::test_run::write_tiny_config(dir.path);
  const std::pair<const char*, const char*> bad[] = {{"rms_norm_eps", "-1"},
                                                     {"rope_theta", "0"},
                                                     {"max_position_embeddings", "-5"},
                                                     {"tie_word_embeddings", "\"yes\""}};
  for (const auto& [field, value] : bad) {
    INFO(field);
    const std::string json_path = dir.path + "/" + field + ".json", run_dir = dir.path + "/run";
    pulse::sync::write_file_atomic(json_path, tiny_json_with(field, value));
    const auto r = pulse_cli(
        {"run", cfg, "--quiet", "--set", "model.config=" + json_path, "--set", "run.dir=" + run_dir});
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains(json_path + ": field \"" + field + "\""));
    CHECK_FALSE(fs::exists(run_dir));
  }
}

TEST_CASE("a 10 MB problem in data.eval_path is refused by file, line and field using < 1 GB",
          "[app][memory][data]") {
  pulse::test_run::ScopedTempDir dir("sizes-problem");
  const std::string cfg = pulse::test_run::write_tiny_config(dir.path);
  const std::string train = dir.path + "/train.jsonl", eval = dir.path + "/eval.jsonl";
  std::string lines;
  for (int i = 0; i < 20; ++i)
    lines += R"({"problem": "What is )" + std::to_string(i) + R"( + 1?", "solution": "\\boxed{)" +
             std::to_string(i + 1) + "}\"}\n";
  pulse::sync::write_file_atomic(train, lines);
  pulse::sync::write_file_atomic(eval, R"({"problem": "What is 1 + 1?", "solution": "\\boxed{2}"})"
                                       "\n{\"problem\": \"" +
                                           std::string(10 * 1000 * 1000, '7') +
                                           R"(", "solution": "\\boxed{2}"})"
                                           "\n");
  const std::string run_dir = dir.path + "/run";
  const ChildRun r =
      run_pulse({"run", cfg, "--quiet", "--set", "data.task=math", "--set", "data.path=" + train, "--set",
                 "data.eval_path=" + eval, "--set", "run.dir=" + run_dir},
                dir.path + "/log");
  INFO(r.err << " (" << r.seconds << " s, max RSS " << r.max_rss_kb << " KB)");
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains(eval + ":2: field \"problem\" has 10000000 characters, more than "
                                           "data.max_question_chars = 16384"));
  CHECK(r.max_rss_kb < 1'000'000);
  CHECK_FALSE(fs::exists(run_dir));
}

TEST_CASE("a prompt longer than data.max_prompt_tokens is refused naming file and problem", "[app][data]") {
  pulse::test_run::ScopedTempDir dir("sizes-prompt");
  const std::string train = dir.path + "/train.jsonl";
  std::string digits;  // one Llama-2 token per digit: ~300 tokens
  for (int i = 0; i < 30; ++i) digits += "1234567890";
  pulse::sync::write_file_atomic(train, R"({"problem": "What is 1 + 1?", "solution": "\\boxed{2}"})"
                                        "\n{\"problem\": \"" +
                                            digits +
                                            R"(", "solution": "\\boxed{2}"})"
                                            "\n");
  pulse::app::Config config = pulse::app::parse_config(
      "[data]\ntask = \"math\"\npath = \"" + train + "\"\nheld_out_fraction = 0.5\nmax_prompt_tokens = 64\n",
      "x.toml");
  const auto sets = pulse::app::load_problems(config);
  const auto tok = pulse::model::load_tokenizer(shared_path("models/llama2-tokenizer/tokenizer.model"));
  const pulse::model::PromptTemplate tmpl;
  CHECK_THROWS_WITH(pulse::app::check_prompt_tokens(config, sets, *tok, tmpl),
                    Catch::StartsWith("data.path '" + train + "': problem 'train.jsonl:2': its prompt") &&
                        Catch::Contains("tokens, more than data.max_prompt_tokens = 64"));
  config.data.max_prompt_tokens = 4096;
  CHECK_NOTHROW(pulse::app::check_prompt_tokens(config, sets, *tok, tmpl));
}

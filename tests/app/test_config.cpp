// Config: defaults round-trip, unknown keys and bad values are errors naming the key and file, --set.
#include "tests/torch_catch.h"

#include "app/config.h"
#include "app/setup.h"
#include "tests/app/cli_test_util.h"
#include "tests/app/run_test_util.h"
#include "tests/test_paths.h"

using pulse::app::Config;
using pulse::app::ConfigError;
using pulse::app::parse_config;

namespace {
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(text, "configs/x.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("printed defaults parse back to the same config", "[app][config]") {
  Config defaults;
  std::string text = pulse::app::to_toml(defaults);
  Config back = parse_config(text, "defaults.toml");
  CHECK(pulse::app::to_toml(back) == text);
  // Numbers from 1 up print as plain decimals ("60.0"), never as "6e+01".
  CHECK(text.find("e+") == std::string::npos);
  Config custom;
  custom.optimizer.lr = 120.0;
  CHECK(pulse::app::to_toml(custom).find("lr = 120.0 ") != std::string::npos);
  CHECK(back.rl.group_size == defaults.rl.group_size);
  CHECK(back.optimizer.lr == defaults.optimizer.lr);
  // Every key appears in the printed text.
  for (const auto& key : pulse::app::config_keys()) {
    auto dot = key.find('.');
    CHECK(text.find("\n" + key.substr(dot + 1) + " = ") != std::string::npos);
  }
}

TEST_CASE("a typo in a key fails naming the key, the file and a suggestion", "[app][config]") {
  std::string msg = error_of("[rl]\ngrup_size = 4\n");
  CHECK(msg.find("configs/x.toml") != std::string::npos);
  CHECK(msg.find("unknown key 'rl.grup_size'") != std::string::npos);
  CHECK(msg.find("did you mean 'group_size'") != std::string::npos);
  CHECK(error_of("[optimiser]\nlr = 1e-3\n").find("unknown section 'optimiser'") != std::string::npos);
  CHECK(error_of("[optimiser]\nlr = 1e-3\n").find("did you mean 'optimizer'") != std::string::npos);
}

TEST_CASE("bad values name the key", "[app][config]") {
  CHECK(error_of("[rl]\ngroup_size = 1\n").find("'rl.group_size' must be >= 2") != std::string::npos);
  // A value out of range names its file and line, as a type error does; one from --set names the --set.
  CHECK(
      error_of("[rl]\nsteps = 4\n\n[optimizer]\nlr = -1.0\n").find("configs/x.toml:5: key 'optimizer.lr'") !=
      std::string::npos);
  CHECK(
      error_of("[rl]\nsteps = 4\n", {"rl.steps=-3"}).find("--set rl.steps=-3: key 'rl.steps' must be >= 0") !=
      std::string::npos);
  CHECK(error_of("[rl]\ngroup_size = \"eight\"\n").find("'rl.group_size' must be an integer") !=
        std::string::npos);
  CHECK(error_of("[optimizer]\nschedule = \"linear\"\n").find("'optimizer.schedule' must be one of") !=
        std::string::npos);
  CHECK(error_of("[optimizer]\nlr = -1.0\n").find("'optimizer.lr'") != std::string::npos);
  CHECK(error_of("[sft]\nsteps = 5\nwarmup_steps = 5\n").find("'sft.warmup_steps' must be < sft.steps") !=
        std::string::npos);
  CHECK(error_of("[run]\nworkers = 0\n").find("'run.workers'") != std::string::npos);
  CHECK(error_of("[data]\ntask = \"math\"\n").find("'data.path'") != std::string::npos);
  // A TOML syntax error names the file and line.
  CHECK(error_of("[rl]\nsteps = = 3\n").find("configs/x.toml:2") != std::string::npos);
}

TEST_CASE("integers are accepted for float fields", "[app][config]") {
  Config c = parse_config("[rl]\ntemperature = 1\n", "x.toml");
  CHECK(c.rl.grpo.sampling.temperature == 1.0);
}

TEST_CASE("config overrides (--set) replace file values and are validated", "[app][config]") {
  Config c = parse_config("[rl]\nsteps = 3\n", "x.toml",
                          {"rl.steps=7", "optimizer.lr=0.25", "run.name=abc", "eval.before=false"});
  CHECK(c.rl.steps == 7);
  CHECK(c.optimizer.lr == 0.25);
  CHECK(c.run.name == "abc");
  CHECK_FALSE(c.eval.before);
  CHECK(error_of("", {"rl.stepz=3"}).find("unknown key 'rl.stepz'") != std::string::npos);
  CHECK(error_of("", {"rl.steps=three"}).find("'rl.steps' must be an integer") != std::string::npos);
  CHECK(error_of("", {"rl.group_size=1"}).find("'rl.group_size' must be >= 2") != std::string::npos);
  CHECK(error_of("", {"eval.after=yes"}).find("'eval.after' must be a boolean") != std::string::npos);
  CHECK(error_of("", {"steps"}).find("expected section.key=value") != std::string::npos);
}

TEST_CASE("a directory or a missing path given as the config fails naming it", "[app][config]") {
  // std::ifstream opens a directory without error and reads nothing, which parsed as an empty config:
  // `pulse run /tmp` ran a whole job on the built-in defaults.
  pulse::test_run::ScopedTempDir dir("config-dir");
  auto error_loading = [](const std::string& path) {
    try {
      pulse::app::load_config(path);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error_loading(dir.path) == dir.path + ": is a directory, not a config file");
  CHECK(error_loading(dir.path + "/none.toml") == dir.path + "/none.toml: cannot open config file");
}

TEST_CASE("pulse config refuses options it would ignore", "[app][config]") {
  using pulse::test_cli::pulse_cli;
  const std::string file = pulse::test::source_path("configs/default.toml");
  // --set applies only to --check; --print-defaults printed the defaults and dropped both silently.
  auto r = pulse_cli({"config", "--print-defaults", "--set", "rl.steps=3"});
  CHECK(r.code != 0);
  CHECK(r.err.find("--set") != std::string::npos);
  CHECK(r.err.find("--check") != std::string::npos);
  r = pulse_cli({"config", "--print-defaults", "--check", file});
  CHECK(r.code != 0);
  CHECK(r.err.find("--print-defaults") != std::string::npos);
  CHECK(r.err.find("--check") != std::string::npos);
  r = pulse_cli({"config", "--set", "rl.steps=3"});
  CHECK(r.code != 0);
  CHECK(r.err.find("--check") != std::string::npos);
  // What stays valid.
  r = pulse_cli({"config", "--check", file, "--set", "rl.steps=3"});
  CHECK(r.code == 0);
  CHECK(r.out.find("\nsteps = 3 ") != std::string::npos);
  r = pulse_cli({"config", "--print-defaults"});
  CHECK(r.code == 0);
  CHECK(r.out.find("\nsteps = 80 ") != std::string::npos);
}

TEST_CASE("pulse run and pulse trainer refuse a CONFIG together with --resume", "[app][config]") {
  // A resumed run reads RUN_DIR/config.toml; the CONFIG given beside --resume was silently ignored.
  using pulse::test_cli::pulse_cli;
  pulse::test_run::ScopedTempDir dir("config-resume");
  const std::string file = pulse::test::source_path("configs/default.toml");
  for (const char* role : {"run", "trainer"}) {
    INFO(role);
    auto r = pulse_cli({role, file, "--resume", dir.path});
    CHECK(r.code == 2);  // a usage error
    CHECK(r.err.find("not both") != std::string::npos);
  }
  // Other usage errors exit 2 as well; --help 0.
  CHECK(pulse_cli({"run", "--no-such-option"}).code == 2);
  CHECK(pulse_cli({"run", "--resume", dir.path + "/missing"}).code == 2);
  CHECK(pulse_cli({"run", "--help"}).code == 0);
}

TEST_CASE("the shipped configs load", "[app][config]") {
  for (const char* name : {"configs/default.toml", "configs/math500-eval.toml", "configs/mbpp-tiny.toml"}) {
    INFO(name);
    Config c = pulse::app::load_config(pulse::test::source_path(name));
    CHECK(c.run.workers >= 1);
  }
}

TEST_CASE("data.mbpp_shots: few-shot MBPP prompts stop at [DONE], data keys refused off their task",
          "[app][config][data]") {
  const std::string mbpp = "[data]\ntask = \"mbpp\"\neval_path = \"" +
                           pulse::test::shared_path("datasets/mbpp.jsonl") + "\"\neval_split = \"test\"\n";
  Config plain = parse_config(mbpp, "x.toml");
  CHECK(plain.eval.pass_at_1.sampling.stop_strings.empty());
  Config c = parse_config(mbpp, "x.toml", {"data.mbpp_shots=3", "eval.max_problems=0"});
  CHECK(c.data.mbpp_shots == 3);
  CHECK(c.eval.pass_at_1.sampling.stop_strings == std::vector<std::string>{"[DONE]"});
  CHECK(c.rl.grpo.sampling.stop_strings == std::vector<std::string>{"[DONE]"});
  auto sets = pulse::app::load_problems(c);
  REQUIRE(sets.held_out.size() == 500);
  for (const auto& p : sets.held_out) {
    CHECK(p.question.rfind("You are an expert Python programmer", 0) == 0);
    CHECK(p.question.substr(p.question.size() - 8) == "[BEGIN]\n");
  }
  CHECK(error_of(mbpp, {"data.mbpp_shots=4"}).find("data.mbpp_shots") != std::string::npos);
  CHECK(error_of("[data]\ntask = \"synthetic_code\"\nmbpp_shots = 3\n")
            .find("key 'data.mbpp_shots' must be 0 unless data.task = mbpp") != std::string::npos);
  CHECK(error_of("[data]\ntask = \"synthetic_math\"\ndemo_error_rate = 0.5\n")
            .find("key 'data.demo_error_rate' applies to data.task = \"synthetic_code\" only") !=
        std::string::npos);
  CHECK(error_of("[data]\ntask = \"synthetic_code\"\ndemo_error_rate = 1.5\n").find("data.demo_error_rate") !=
        std::string::npos);
  CHECK(error_of("[data]\ntask = \"synthetic_code\"\ndemo_error_rate = 0.6\n").empty());
}

// run.device (app/device.h): the config accepts cpu | cuda | auto and refuses the rest naming the key; "cuda"
// without CUDA is refused with the reason (a real check on a machine without a GPU or with a CPU LibTorch);
// "auto" resolves to the CPU there; the workers get the setting; a run with run.device = "cpu" set
// explicitly is byte-identical to the default. The GPU test at the end skips with a message without CUDA.
#include <torch/cuda.h>
#include "tests/torch_catch.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "app/config.h"
#include "app/device.h"
#include "app/job.h"
#include "app/run/checkpoints.h"
#include "app/run/run_files.h"
#include "app/trainer/fleet.h"
#include "app/wire/messages.h"
#include "model/checkpoint.h"
#include "sync/io/atomic_file.h"
#include "tests/app/run_test_util.h"

using nlohmann::json;
using pulse::app::Config;
using pulse::app::ConfigError;
using pulse::app::parse_config;

namespace {

std::string config_error(const std::vector<std::string>& overrides) {
  try {
    parse_config("", "configs/x.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

/// The tiny run of run_test_util.h shortened to a few seconds: 10 SFT steps, 2 GRPO steps, one worker.
pulse::app::JobOptions short_tiny_run(const std::string& cfg, const std::string& run_dir,
                                      std::vector<std::string> extra) {
  pulse::app::JobOptions o;
  o.config_path = cfg;
  o.overrides = {"run.dir=" + run_dir, "sft.steps=10",     "sft.warmup_steps=2", "rl.steps=2",
                 "eval.before=false",  "eval.after=false", "run.workers=1",      "run.checkpoint_every=1"};
  o.overrides.insert(o.overrides.end(), extra.begin(), extra.end());
  o.quiet = true;
  return o;
}

/// Metrics fields that do not depend on timing.
const char* kDeterministic[] = {
    "step",        "version",       "reward_mean",      "reward_std",   "loss",
    "grad_norm",   "changed",       "changed_fraction", "patch_bytes",  "patch_changed",
    "dense_bytes", "bit_identical", "response_tokens",  "clip_fraction"};

}  // namespace

TEST_CASE("run.device accepts cpu, cuda, auto and refuses other values naming the key",
          "[app][config][device]") {
  CHECK(parse_config("", "x.toml").run.device == "cpu");  // the default: today's CPU run
  CHECK(parse_config("[run]\ndevice = \"cpu\"\n", "x.toml").run.device == "cpu");
  CHECK(parse_config("", "x.toml", {"run.device=auto"}).run.device == "auto");
  const std::string bad = config_error({"run.device=gpu"});
  CHECK(bad.find("key 'run.device' must be one of cpu, cuda, auto (got 'gpu')") != std::string::npos);
  CHECK(config_error({"run.device=CUDA"}).find("'run.device' must be one of") != std::string::npos);
  // The key is printed (and documented) from the field table like every other.
  const std::string printed = pulse::app::to_toml(Config{});
  CHECK(printed.find("\ndevice = \"cpu\"") != std::string::npos);
  const auto keys = pulse::app::config_keys();
  CHECK(std::count(keys.begin(), keys.end(), "run.device") == 1);
}

TEST_CASE("run.device = cuda without a usable CUDA device is refused with the reason",
          "[app][config][device]") {
  const std::string why = pulse::app::cuda_unavailable_reason();
  CHECK(why.empty() == torch::cuda::is_available());
  const std::string err = config_error({"run.device=cuda"});
  if (torch::cuda::is_available()) {
    WARN(
        "CUDA is available here: run.device = cuda is accepted (the refusal is checked on machines without)");
    CHECK(err.empty());
    return;
  }
  // This machine: Debian's CPU LibTorch (or no GPU). The message names the --set (or the file and line),
  // the key and the reason.
  INFO(err);
  CHECK(err.find("--set run.device=cuda: key 'run.device' = \"cuda\" cannot be used: ") != std::string::npos);
  CHECK(err.find(why) != std::string::npos);
  CHECK((why.find("built without CUDA") != std::string::npos ||
         why.find("no CUDA device") != std::string::npos));
  // The same from the TOML file itself.
  try {
    parse_config("[run]\ndevice = \"cuda\"\n", "configs/gpu.toml");
    FAIL("run.device = cuda was accepted without CUDA");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("configs/gpu.toml:2: key 'run.device' = \"cuda\"") != std::string::npos);
  }
  // Resolving it (what the trainer and every worker do at start-up) throws the same ConfigError.
  CHECK_THROWS_AS(pulse::app::resolve_device("cuda", 0), ConfigError);
}

TEST_CASE("run.device resolves: cpu is the CPU, auto is cuda:LOCAL_RANK when usable else the CPU",
          "[app][device]") {
  CHECK(pulse::app::resolve_device("cpu", 3).is_cpu());
  const c10::Device a = pulse::app::resolve_device("auto", 0);
  if (torch::cuda::is_available()) {
    CHECK(a.is_cuda());
    CHECK(a.index() == 0);
    const auto n = static_cast<int>(torch::cuda::device_count());
    CHECK(pulse::app::resolve_device("cuda", n + 1).index() == (n + 1) % n);
  } else {
    CHECK(a.is_cpu());
  }
  CHECK_THROWS_WITH(pulse::app::resolve_device("tpu", 0), Catch::Contains("'run.device' must be one of"));
}

TEST_CASE("workers get run.device from the trainer, a settings message without it means cpu",
          "[app][device]") {
  Config c = parse_config("", "x.toml", {"run.device=auto"});
  pulse::app::WorkerSettings s = pulse::app::worker_settings(c);
  CHECK(s.device == "auto");
  json j = s;
  CHECK(j.at("device") == "auto");
  pulse::app::WorkerSettings back = j.get<pulse::app::WorkerSettings>();
  CHECK(back.device == "auto");
  j.erase("device");  // a trainer from before the key
  back.device = "cuda";
  back = j.get<pulse::app::WorkerSettings>();
  CHECK(back.device == "cpu");
}

TEST_CASE(
    "rl.decode = static runs the pipeline to the eager run's rollouts, cuda_graph without CUDA stops at "
    "start",
    "[app][e2e][device]") {
  pulse::test_run::ScopedTempDir dir("device-decode");
  const std::string cfg = pulse::test_run::write_tiny_config(dir);
  const std::string a = dir.path + "/eager", b = dir.path + "/static";
  REQUIRE(pulse::app::run_job(short_tiny_run(cfg, a, {"rl.decode=eager"})) == 0);
  REQUIRE(pulse::app::run_job(short_tiny_run(cfg, b, {"rl.decode=static"})) == 0);
  auto ra = pulse::app::MetricsLog::read(a + "/metrics.jsonl"),
       rb = pulse::app::MetricsLog::read(b + "/metrics.jsonl");
  REQUIRE(ra.size() == 2);
  REQUIRE(rb.size() == 2);
  for (size_t i = 0; i < ra.size(); ++i) {
    CHECK(rb[i]["bit_identical"] == true);
    // FP32: the same tokens on both paths, so the same rewards, loss and patches.
    for (const char* key : kDeterministic) {
      INFO("step " << i << " key " << key);
      CHECK(ra[i][key] == rb[i][key]);
    }
  }
  if (torch::cuda::is_available()) return;  // auto resolves to cuda there: nothing to refuse
  const std::string c = dir.path + "/graph";
  try {
    pulse::app::run_job(short_tiny_run(cfg, c, {"rl.decode=cuda_graph", "run.device=auto"}));
    FAIL("rl.decode = cuda_graph ran without a CUDA device");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("rl.decode") && Catch::Contains("CUDA device"));
  }
  CHECK_FALSE(std::filesystem::exists(c + "/metrics.jsonl"));
}

TEST_CASE("a run with run.device = cpu set explicitly is byte-identical to the default",
          "[app][e2e][device]") {
  pulse::test_run::ScopedTempDir dir("device-cpu");
  const std::string cfg = pulse::test_run::write_tiny_config(dir);
  const std::string a = dir.path + "/default", b = dir.path + "/cpu";
  REQUIRE(pulse::app::run_job(short_tiny_run(cfg, a, {})) == 0);
  REQUIRE(pulse::app::run_job(short_tiny_run(cfg, b, {"run.device=cpu"})) == 0);
  auto ra = pulse::app::MetricsLog::read(a + "/metrics.jsonl"),
       rb = pulse::app::MetricsLog::read(b + "/metrics.jsonl");
  REQUIRE(ra.size() == 2);
  REQUIRE(rb.size() == 2);
  for (size_t i = 0; i < ra.size(); ++i) {
    CHECK(ra[i]["bit_identical"] == true);
    for (const char* key : kDeterministic) {
      INFO("step " << i << " key " << key);
      CHECK(ra[i][key] == rb[i][key]);
    }
  }
  json sa = pulse::app::read_json(a + "/run_state.json"), sb = pulse::app::read_json(b + "/run_state.json");
  CHECK(sa["sft_loss_curve"] == sb["sft_loss_curve"]);
  // The weights and the optimizer state the runs end with, byte for byte.
  for (const char* file : {"/model/model.safetensors", "/state/optimizer.safetensors"}) {
    INFO(file);
    const std::string fa = pulse::app::checkpoint_dir(a, 2) + file,
                      fb = pulse::app::checkpoint_dir(b, 2) + file;
    REQUIRE(std::filesystem::exists(fa));
    CHECK(pulse::sync::read_file(fa) == pulse::sync::read_file(fb));
  }
}

TEST_CASE("GPU: a tiny run on run.device = cuda keeps the workers bit-identical and checkpoints load",
          "[app][e2e][device][gpu]") {
  if (!torch::cuda::is_available()) {
    WARN("skipped: no usable CUDA device (" << pulse::app::cuda_unavailable_reason() << ")");
    return;
  }
  pulse::test_run::ScopedTempDir dir("device-cuda");
  const std::string cfg = pulse::test_run::write_tiny_config(dir);
  const std::string run = dir.path + "/run";
  REQUIRE(pulse::app::run_job(short_tiny_run(cfg, run, {"run.device=cuda"})) == 0);
  json summary = pulse::app::read_json(run + "/summary.json");
  CHECK(summary["steps"] == 2);
  CHECK(summary["bit_identical_every_step"] == true);
  for (const auto& row : pulse::app::MetricsLog::read(run + "/metrics.jsonl")) {
    CHECK(row["bit_identical"] == true);
    CHECK(row["patch_changed"] == row["changed"]);
  }
  CHECK(pulse::sync::read_file(run + "/config.toml").find("device = \"cuda\"") != std::string::npos);
  // The checkpoint written from GPU tensors is a plain host safetensors file that loads on the CPU.
  auto m = pulse::model::load_hf_model(pulse::app::checkpoint_dir(run, 2) + "/model", torch::kFloat32);
  CHECK(m->num_parameters() > 0);
  // --resume on the GPU loads the masters and moments back onto the device and bootstraps the worker to
  // them (the run is complete, so no step is left to run).
  pulse::app::JobOptions r;
  r.resume_dir = run;
  r.quiet = true;
  REQUIRE(pulse::app::run_job(r) == 0);
  CHECK(pulse::app::MetricsLog::read(run + "/metrics.jsonl").size() == 2);
  CHECK(pulse::app::read_json(run + "/summary.json")["bit_identical_every_step"] == true);
}

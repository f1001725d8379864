// One range rule per setting (issue 29): each numeric key set just outside its range, on each bounded
// side, through the path --set takes, fails with the one message of its struct's validate(), naming the
// key; an unknown mode names the key and the allowed values; the structs' own messages name TOML keys.
#include <catch2/catch.hpp>

#include <cctype>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/config.h"
#include "rl/grpo_config.h"
#include "rl/optimizer_config.h"
#include "rl/outer_config.h"
#include "sync/patch.h"

using pulse::app::Config;
using pulse::app::ConfigError;
using pulse::app::parse_config;

namespace {

/// The ConfigError of the defaults with `overrides`, or "" when they load.
std::string error_of(const std::string& toml, const std::vector<std::string>& overrides) {
  try {
    parse_config(toml, "x.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

struct OutOfRange {
  const char* key;
  const char* value;    ///< just outside the range
  const char* problem;  ///< the rule's words after "key 'KEY' "
};

// Every numeric key, once per bounded side.
const OutOfRange kCases[] = {
    {"tokenizer.vocab_size", "63", "must be >= 64 (got 63)"},
    {"tokenizer.vocab_size", "1048577", "must be <= 1048576 (got 1048577)"},
    {"data.n_problems", "1", "must be >= 2 (got 1)"},
    {"data.n_problems", "10000001", "must be <= 10000000 (got 10000001)"},
    {"data.max_level", "0", "must be >= 1 (got 0)"},
    {"data.max_level", "6", "must be <= 5 (got 6)"},
    {"data.demo_error_rate", "-0.1", "must be >= 0 (got -0.1)"},
    {"data.demo_error_rate", "1.1", "must be <= 1 (got 1.1)"},
    {"data.held_out_fraction", "0", "must be > 0 (got 0)"},
    {"data.held_out_fraction", "0.95", "must be <= 0.9 (got 0.95)"},
    {"data.seed", "-1", "must be >= 0 (got -1)"},
    {"data.mbpp_shots", "-1", "must be >= 0 (got -1)"},
    {"data.mbpp_shots", "4", "must be <= 3 (got 4)"},
    {"data.max_question_chars", "0", "must be >= 1 (got 0)"},
    {"data.max_answer_chars", "0", "must be >= 1 (got 0)"},
    {"data.max_prompt_tokens", "0", "must be >= 1 (got 0)"},
    {"data.max_prompt_tokens", "16777217", "must be <= 16777216 (got 16777217)"},
    {"sft.steps", "-1", "must be >= 0 (got -1)"},
    {"sft.batch_size", "0", "must be >= 1 (got 0)"},
    {"sft.batch_size", "1048577", "must be <= 1048576 (got 1048577)"},
    {"sft.micro_batch", "-1", "must be >= 0 (got -1)"},
    {"sft.micro_batch", "1048577", "must be <= 1048576 (got 1048577)"},
    {"sft.max_len", "7", "must be >= 8 (got 7)"},
    {"sft.max_len", "1048577", "must be <= 1048576 (got 1048577)"},
    {"sft.lr", "-0.001", "must be >= 0 (got -0.001)"},
    {"sft.lr", "inf", "must be a finite number"},
    {"sft.warmup_steps", "-1", "must be >= 0 (got -1)"},
    {"sft.min_lr_ratio", "-0.1", "must be >= 0 (got -0.1)"},
    {"sft.min_lr_ratio", "1.1", "must be <= 1 (got 1.1)"},
    {"sft.grad_clip", "-1", "must be >= 0 (got -1)"},
    {"rl.steps", "-1", "must be >= 0 (got -1)"},
    {"rl.prompts_per_step", "0", "must be >= 1 (got 0)"},
    {"rl.prompts_per_step", "1048577", "must be <= 1048576 (got 1048577)"},
    {"rl.group_size", "1", "must be >= 2 (got 1)"},
    {"rl.group_size", "65537", "must be <= 65536 (got 65537)"},
    {"rl.max_new_tokens", "0", "must be >= 1 (got 0)"},
    {"rl.max_new_tokens", "1048577", "must be <= 1048576 (got 1048577)"},
    {"rl.temperature", "0", "must be > 0 (got 0)"},
    {"rl.temperature", "100.5", "must be <= 100 (got 100.5)"},
    {"rl.top_p", "0", "must be > 0 (got 0)"},
    {"rl.top_p", "1.5", "must be <= 1 (got 1.5)"},
    {"rl.top_k", "-1", "must be >= 0 (got -1)"},
    {"rl.top_k", "16777217", "must be <= 16777216 (got 16777217)"},
    {"rl.eps_low", "-0.1", "must be >= 0 (got -0.1)"},
    {"rl.eps_low", "1", "must be < 1 (got 1)"},
    {"rl.eps_high", "-0.1", "must be >= 0 (got -0.1)"},
    {"rl.eps_high", "10.5", "must be <= 10 (got 10.5)"},
    {"rl.adv_eps", "-0.5", "must be >= 0 (got -0.5)"},
    {"rl.adv_eps", "1.5", "must be <= 1 (got 1.5)"},
    {"rl.constant_normalizer", "0", "must be > 0 (got 0)"},
    {"rl.constant_normalizer", "2e9", "must be <= 1000000000 (got 2000000000)"},
    {"rl.kl_coef", "-0.1", "must be >= 0 (got -0.1)"},
    {"rl.kl_coef", "100.5", "must be <= 100 (got 100.5)"},
    {"rl.tis_cap", "-1", "must be >= 0 (got -1)"},
    {"rl.tis_cap", "2e6", "must be <= 1000000 (got 2000000)"},
    {"rl.micro_batch", "0", "must be >= 1 (got 0)"},
    {"rl.micro_batch", "1048577", "must be <= 1048576 (got 1048577)"},
    {"rl.max_lag", "-1", "must be >= 0 (got -1)"},
    {"rl.max_lag", "2", "must be <= 1 (got 2)"},
    {"optimizer.lr", "-1", "must be >= 0 (got -1)"},
    {"optimizer.beta1", "-0.1", "must be >= 0 (got -0.1)"},
    {"optimizer.beta1", "1", "must be < 1 (got 1)"},
    {"optimizer.beta2", "-0.1", "must be >= 0 (got -0.1)"},
    {"optimizer.beta2", "1", "must be < 1 (got 1)"},
    {"optimizer.eps", "0", "must be > 0 (got 0)"},
    {"optimizer.weight_decay", "-0.1", "must be >= 0 (got -0.1)"},
    {"optimizer.grad_clip", "-1", "must be >= 0 (got -1)"},
    {"optimizer.warmup_steps", "-1", "must be >= 0 (got -1)"},
    {"optimizer.min_lr_ratio", "-0.1", "must be >= 0 (got -0.1)"},
    {"optimizer.min_lr_ratio", "1.1", "must be <= 1 (got 1.1)"},
    {"sync.zstd_level", "-1", "must be >= 0 (got -1)"},
    {"sync.zstd_level", "23", "must be <= 22 (got 23)"},
    {"sync.anchor_every", "0", "must be >= 1 (got 0)"},
    {"sync.keep_anchors", "0", "must be >= 1 (got 0)"},
    {"sync.threads", "-1", "must be >= 0 (got -1)"},
    {"sync.threads", "1025", "must be <= 1024 (got 1025)"},
    {"transport.port", "-1", "must be >= 0 (got -1)"},
    {"transport.port", "65535", "must be <= 65534 (got 65535)"},
    {"transport.max_retries", "-1", "must be >= 0 (got -1)"},
    {"transport.max_retries", "1001", "must be <= 1000 (got 1001)"},
    {"transport.timeout_s", "0", "must be > 0 (got 0)"},
    {"transport.timeout_s", "86401", "must be <= 86400 (got 86401)"},
    {"transport.lease_s", "0", "must be > 0 (got 0)"},
    {"transport.lease_s", "86401", "must be <= 86400 (got 86401)"},
    {"transport.no_worker_timeout_s", "0", "must be > 0 (got 0)"},
    {"transport.no_worker_timeout_s", "2e7", "must be <= 10000000 (got 20000000)"},
    {"transport.register_wait_s", "0", "must be > 0 (got 0)"},
    {"transport.register_wait_s", "2e7", "must be <= 10000000 (got 20000000)"},
    {"eval.max_problems", "-1", "must be >= 0 (got -1)"},
    {"eval.batch_size", "0", "must be >= 1 (got 0)"},
    {"eval.batch_size", "1048577", "must be <= 1048576 (got 1048577)"},
    {"eval.max_new_tokens", "0", "must be >= 1 (got 0)"},
    {"eval.max_new_tokens", "1048577", "must be <= 1048576 (got 1048577)"},
    {"eval.n_samples", "0", "must be >= 1 (got 0)"},
    {"eval.n_samples", "1048577", "must be <= 1048576 (got 1048577)"},
    {"eval.k", "0", "must be in 1..eval.n_samples (1) (got 0)"},
    {"eval.k", "2", "must be in 1..eval.n_samples (1) (got 2)"},
    {"eval.temperature", "0", "must be > 0 (got 0)"},
    {"eval.temperature", "100.5", "must be <= 100 (got 100.5)"},
    {"eval.top_p", "0", "must be > 0 (got 0)"},
    {"eval.top_p", "1.5", "must be <= 1 (got 1.5)"},
    {"run.seed", "-1", "must be >= 0 (got -1)"},
    {"run.workers", "0", "must be >= 1 (got 0)"},
    {"run.workers", "257", "must be <= 256 (got 257)"},
    {"run.max_memory_gb", "-1", "must be >= 0 (got -1)"},
    {"run.max_memory_gb", "2e9", "must be <= 1000000000 (got 2000000000)"},
    {"run.checkpoint_every", "-1", "must be >= 0 (got -1)"},
    {"run.threads", "-1", "must be >= 0 (got -1)"},
    {"run.threads", "1025", "must be <= 1024 (got 1025)"},
    {"multi.inner_steps", "0", "must be >= 1 (got 0)"},
    {"multi.inner_steps", "1048577", "must be <= 1048576 (got 1048577)"},
    {"multi.outer_lr", "0", "must be > 0 (got 0)"},
    {"multi.outer_lr", "10.5", "must be <= 10 (got 10.5)"},
    {"multi.outer_momentum", "-0.1", "must be >= 0 (got -0.1)"},
    {"multi.outer_momentum", "1", "must be < 1 (got 1)"},
    {"multi.timeout_s", "0", "must be > 0 (got 0)"},
    {"multi.timeout_s", "86401", "must be <= 86400 (got 86401)"},
    {"multi.zstd_level", "-1", "must be >= 0 (got -1)"},
    {"multi.zstd_level", "20", "must be <= 19 (got 20)"},
};

}  // namespace

TEST_CASE("config ranges: each numeric key just outside its range fails with its one message",
          "[app][config][ranges]") {
  for (const auto& c : kCases) {
    const std::string set = std::string(c.key) + "=" + c.value;
    INFO(set);
    CHECK(error_of("", {set}) == "--set " + set + ": key '" + c.key + "' " + c.problem);
  }
  // The same rule from a file names the file and line.
  CHECK(error_of("[rl]\n\neps_low = 1.0\n", {}) == "x.toml:3: key 'rl.eps_low' must be < 1 (got 1)");
}

TEST_CASE("config ranges: every numeric key has a case above", "[app][config][ranges]") {
  std::set<std::string> covered;
  for (const auto& c : kCases) covered.insert(c.key);
  // A numeric key is one whose printed default is a number.
  std::istringstream text(pulse::app::to_toml(Config{}));
  std::string line, section;
  int numeric = 0;
  while (std::getline(text, line)) {
    if (line.rfind("[", 0) == 0) section = line.substr(1, line.find(']') - 1);
    const auto eq = line.find(" = ");
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    const char first = line[eq + 3];
    if (!(std::isdigit(static_cast<unsigned char>(first)) || first == '-')) continue;
    const std::string key = section + "." + line.substr(0, eq);
    INFO(key);
    CHECK(covered.count(key) == 1);
    ++numeric;
  }
  CHECK(numeric == static_cast<int>(covered.size()));
}

TEST_CASE("config ranges: an unknown mode names the key and the allowed values", "[app][config][ranges]") {
  const std::pair<const char*, const char*> modes[] = {
      {"multi.mode", "single, ddp, diloco, pulseloco"},
      {"rl.loss_agg", "token_mean, seq_mean, constant"},
      {"optimizer.schedule", "constant, linear_warmup, cosine"},
      {"data.task", "synthetic_math, synthetic_code, math, mbpp, gsm8k"},
      {"transport.kind", "http, fs"},
      {"rl.decode", "auto, eager, static, cuda_graph"},
  };
  for (const auto& [key, allowed] : modes) {
    INFO(key);
    const std::string k = key;
    CHECK(error_of("", {k + "=bogus"}) ==
          "--set: key '" + k + "' must be one of " + allowed + " (got 'bogus')");
    const std::string section = k.substr(0, k.find('.')), name = k.substr(k.find('.') + 1);
    CHECK(error_of("[" + section + "]\n" + name + " = \"bogus\"\n", {}) ==
          "x.toml:2: key '" + k + "' must be one of " + allowed + " (got 'bogus')");
  }
  // Parsed once: the enum, printed back by name.
  Config c =
      parse_config("", "x.toml",
                   {"multi.mode=pulseloco", "multi.inner_steps=10", "rl.steps=80", "rl.loss_agg=seq_mean",
                    "optimizer.schedule=cosine", "transport.kind=fs", "data.task=synthetic_code"});
  CHECK(c.multi.mode == pulse::rl::MultiMode::PulseLoco);
  CHECK(c.rl.grpo.loss_agg == pulse::rl::LossAgg::SeqMean);
  CHECK(c.optimizer.schedule == pulse::rl::LrSchedule::Cosine);
  CHECK(c.transport.kind == pulse::app::TransportKind::Fs);
  CHECK(c.data.task == pulse::app::DataTask::SyntheticCode);
  const std::string text = pulse::app::to_toml(c);
  CHECK(text.find("\nmode = \"pulseloco\"") != std::string::npos);
  CHECK(text.find("\nloss_agg = \"seq_mean\"") != std::string::npos);
  CHECK(parse_config(text, "back.toml").multi.mode == pulse::rl::MultiMode::PulseLoco);
}

TEST_CASE("config ranges: the settings structs' own messages name the TOML key", "[app][config][ranges]") {
  auto what = [](auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  pulse::rl::GrpoConfig g;
  g.eps_low = 1.0;
  CHECK(what([&] { g.validate(); }) == "rl.eps_low: must be < 1 (got 1)");
  pulse::rl::OuterConfig m;
  m.outer_momentum = 1.0;
  CHECK(what([&] { m.validate(); }) == "multi.outer_momentum: must be < 1 (got 1)");
  pulse::rl::OptimizerConfig o;
  o.min_lr_ratio = 2;
  CHECK(what([&] { o.validate_settings("sft"); }) == "sft.min_lr_ratio: must be <= 1 (got 2)");
  // Both encoders check PatchOptions::validate (the CUDA one in tests/kernels_cuda).
  pulse::sync::PatchOptions po;
  po.zstd_level = 23;
  const std::vector<uint8_t> bytes(4, 0);
  const std::vector<pulse::sync::TensorView> views = {
      pulse::sync::TensorView{"w", pulse::sync::DType::BF16, {2}, bytes.data(), bytes.size()}};
  CHECK(what([&] { pulse::sync::encode_patch(views, views, po); }) ==
        "sync.zstd_level: must be <= 22 (got 23)");
  CHECK_THROWS_AS(pulse::sync::encode_anchor(views, po), pulse::sync::PatchError);
}

// Issue 9: every rl.*, optimizer.*, sft.* and sampling key reaches the algorithm that uses it, on the
// trainer (the structs app/trainer/trainer.cpp hands to rl::grpo_step, rl::MasterAdam, rl::sft_train) and on
// a worker (the settings it receives through the one serializer, turned into its rl::RolloutConfig).
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "app/config.h"
#include "app/trainer/fleet.h"
#include "app/wire/messages.h"

using nlohmann::json;
using pulse::app::Config;

namespace {

json sampling_json(const pulse::model::SamplingParams& s) {
  return json{{"max_new_tokens", s.max_new_tokens},
              {"temperature", s.temperature},
              {"top_p", s.top_p},
              {"top_k", s.top_k},
              {"decode", pulse::model::name_of(s.decode)}};
}

json optimizer_json(const pulse::rl::OptimizerConfig& o) {
  return json{{"name", o.name},
              {"lr", o.lr},
              {"beta1", o.beta1},
              {"beta2", o.beta2},
              {"eps", o.eps},
              {"weight_decay", o.weight_decay},
              {"grad_clip", o.grad_clip},
              {"schedule", pulse::rl::name_of(o.schedule)},
              {"warmup_steps", o.warmup_steps},
              {"total_steps", o.total_steps},
              {"min_lr_ratio", o.min_lr_ratio}};
}

/// What the trainer hands to the algorithms, as a comparable value.
json trainer_inputs(const Config& c) {
  const auto& g = c.rl.grpo;
  return json{
      {"loop", {c.rl.steps, c.rl.prompts_per_step, c.rl.group_size, c.rl.max_lag}},
      {"grpo",
       {g.eps_low, g.eps_high, g.scale_by_std, g.adv_eps, pulse::rl::name_of(g.loss_agg),
        g.constant_normalizer, g.kl_coef, g.tis_cap, g.micro_batch, g.mask_truncated}},
      {"grpo_sampling", sampling_json(g.sampling)},
      {"optimizer", optimizer_json(c.optimizer)},
      {"sft_loop", {c.sft.loop.steps, c.sft.loop.batch_size, c.sft.loop.max_len, c.sft.loop.micro_batch}},
      {"sft_optimizer", optimizer_json(c.sft.optimizer)}};
}

/// What a worker samples with: the settings through the register answer's serializer, then its
/// RolloutConfig.
json worker_inputs(const Config& c) {
  pulse::app::RegisterReply reply;
  reply.settings = pulse::app::worker_settings(c);
  const std::string wire = json(reply).dump();
  auto back = pulse::app::parse_message_text<pulse::app::RegisterReply>(wire, "register answer");
  pulse::rl::RolloutConfig rc = pulse::app::rollout_config(back.settings, 1);
  return json{{"group_size", rc.group_size}, {"sampling", sampling_json(rc.sampling)}, {"seed", rc.seed}};
}

/// The printed default of every key ("key = value  # doc" lines of to_toml).
std::map<std::string, std::string> printed_defaults() {
  std::map<std::string, std::string> out;
  std::istringstream in(pulse::app::to_toml(Config{}));
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line[0] == '[') section = line.substr(1, line.size() - 2);
    auto eq = line.find(" = ");
    if (eq == std::string::npos || line[0] == '#') continue;
    std::string value = line.substr(eq + 3);
    value = value.substr(0, value.find("  #"));
    while (!value.empty() && value.back() == ' ') value.pop_back();
    out[section + "." + line.substr(0, eq)] = value;
  }
  return out;
}

/// Non-default values to try for a key, in order (the first one the config accepts is used).
std::vector<std::string> candidates(const std::string& def) {
  if (def == "true") return {"false"};
  if (def == "false") return {"true"};
  if (def.front() == '"')
    return {"\"seq_mean\"",      "\"constant\"", "\"adam\"",  "\"cosine\"",
            "\"linear_warmup\"", "\"adamw\"",    "\"static\""};
  if (def.find_first_of(".e") != std::string::npos) {
    const double d = std::stod(def);
    std::vector<std::string> out;
    for (double x : {d * 0.5, d * 0.9, d + 0.05, 0.1, 0.5, 3.0})
      if (x != d) out.push_back(std::to_string(x));
    return out;
  }
  long long v = std::stoll(def);
  return {std::to_string(v + 1), std::to_string(v + 2), std::to_string(v > 1 ? v - 1 : 3)};
}

}  // namespace

TEST_CASE("every rl, optimizer, sft and sampling key reaches the trainer's and the workers' algorithms",
          "[app][config]") {
  const Config defaults = pulse::app::parse_config("", "defaults.toml");
  const json trainer_default = trainer_inputs(defaults), worker_default = worker_inputs(defaults);
  const std::set<std::string> sampling_keys{"rl.temperature",    "rl.top_p",      "rl.top_k",
                                            "rl.max_new_tokens", "rl.group_size", "rl.decode"};
  int checked = 0;
  for (const auto& [key, def] : printed_defaults()) {
    const std::string section = key.substr(0, key.find('.'));
    if (section != "rl" && section != "optimizer" && section != "sft") continue;
    std::string used;
    Config c;
    for (const auto& value : candidates(def)) {
      if (value == def) continue;
      try {
        c = pulse::app::parse_config("", "x.toml", {key + "=" + value});
        used = value;
        break;
      } catch (const pulse::app::ConfigError&) {
      }
    }
    INFO(key << " (default " << def << ", set to " << used << ")");
    REQUIRE_FALSE(used.empty());
    CHECK(trainer_inputs(c) != trainer_default);
    if (sampling_keys.count(key)) CHECK(worker_inputs(c) != worker_default);
    ++checked;
  }
  // rl: 19 keys, optimizer: 10, sft: 8 today; a key added to these sections is checked too.
  CHECK(checked >= 37);
}

TEST_CASE("the sampler settings the workers get are the ones GRPO recomputes log-probs under",
          "[app][config]") {
  Config c = pulse::app::parse_config("", "x.toml", {"rl.temperature=0.7", "rl.top_p=0.9", "rl.top_k=20"});
  json w = worker_inputs(c);
  CHECK(w["sampling"] == sampling_json(c.rl.grpo.sampling));
  CHECK(c.rl.grpo.sampling.temperature == 0.7);
  CHECK(c.rl.grpo.sampling.top_p == 0.9);
  CHECK(c.rl.grpo.sampling.top_k == 20);
}

TEST_CASE("rl.decode reaches the workers and Pass@1, cuda_graph is refused on the CPU", "[app][config]") {
  using pulse::model::DecodeMode;
  CHECK(pulse::app::parse_config("", "x.toml").rl.grpo.sampling.decode == DecodeMode::Auto);
  Config c = pulse::app::parse_config("", "x.toml", {"rl.decode=static"});
  CHECK(c.rl.grpo.sampling.decode == DecodeMode::Static);
  CHECK(c.eval.pass_at_1.sampling.decode == DecodeMode::Static);
  CHECK(worker_inputs(c)["sampling"]["decode"] == "static");
  try {
    pulse::app::parse_config("", "x.toml", {"rl.decode=cuda_graph", "run.device=cpu"});
    FAIL("cuda_graph on the CPU was accepted");
  } catch (const pulse::app::ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("rl.decode") && Catch::Contains("run.device = cuda"));
  }
  // A register answer from an older trainer has no decode: auto. A bad one names the field.
  auto settings = json(pulse::app::worker_settings(c));
  settings["sampling"].erase("decode");
  CHECK(settings["sampling"].get<pulse::model::SamplingParams>().decode == DecodeMode::Auto);
  settings["sampling"]["decode"] = "warp";
  CHECK_THROWS_WITH(settings["sampling"].get<pulse::model::SamplingParams>(),
                    Catch::Contains("sampling.decode") && Catch::Contains("cuda_graph"));
}

// `pulse eval CONFIG`: Pass@1 (greedy) of model.path on the config's held-out problems (data.eval_path, or
// the held-out split), with per-subject and per-level tables. configs/math500-eval.toml evaluates a given
// checkpoint on MATH-500.
#include <spdlog/spdlog.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "app/config.h"
#include "app/device.h"
#include "app/job.h"
#include "app/memory_check.h"
#include "app/setup.h"
#include "model/chat_template.h"
#include "rl/eval.h"

namespace pulse::app {

int eval_job(const JobOptions& opt) {
  Config config = load_config(opt.config_path, opt.overrides);
  if (opt.quiet) spdlog::set_level(spdlog::level::warn);
  if (config.model.path.empty())
    throw ConfigError(opt.config_path +
                      ": key 'model.path' must name the checkpoint to evaluate (--set model.path=DIR)");
  if (config.tokenizer.path.empty())
    throw ConfigError(opt.config_path +
                      ": key 'tokenizer.path' must name the model's tokenizer (--set tokenizer.path=..)");
  const MemoryRole role{/*trains=*/false, /*in_process_workers=*/0};
  check_model_inputs(config, opt.config_path, role);  // before the data and the weights are read
  int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(config.run.threads > 0 ? static_cast<int>(config.run.threads) : hw);
  ProblemSets sets = load_problems(config);
  if (sets.held_out.empty()) throw std::runtime_error(opt.config_path + ": no held-out problems to evaluate");
  std::string tok_path;
  auto tok = prepare_tokenizer(config, sets, "", &tok_path);
  model::ModelConfig mc = model_config_for(config, *tok);
  model::PromptTemplate tmpl = model::PromptTemplate::preset(config.tokenizer.chat_template);
  check_prompt_tokens(config, sets, *tok, tmpl);
  model::Transformer policy = build_model(config, mc);
  const c10::Device device = resolve_device(config.run.device, local_rank_from_env());
  if (!device.is_cpu()) policy->to(device);
  policy->eval();

  const rl::EvalConfig& ec = config.eval.pass_at_1;
  const std::string how = ec.greedy ? std::string("greedy")
                                    : std::to_string(ec.n_samples) + " samples at temperature " +
                                          fmt::format("{:g}", ec.sampling.temperature) + ", pass@" +
                                          std::to_string(ec.k);
  spdlog::info("evaluating {} on {} problems ({}, max {} new tokens)", config.model.path,
               sets.held_out.size(), how, ec.sampling.max_new_tokens);
  auto t0 = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  rl::EvalReport report = rl::evaluate(*policy, *tok, tmpl, sets.held_out, ec);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (opt.log_json) {
    nlohmann::json j = report.to_json();
    j["model"] = config.model.path;
    j["wall_seconds"] = secs;
    std::cout << j.dump() << std::endl;
  } else {
    std::cout << report.table() << "\nPass@1 " << report.pass_at_1 << " on " << report.problems
              << " problems (" << secs << " s)\n";
  }
  return 0;
}

}  // namespace pulse::app

#include "app/cli.h"

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>

#include "app/cmd/cmd_bench_kernels.h"
#include "app/cmd/commands.h"
#include "app/memory_check.h"
#include "app/cmd/launch.h"
#include "app/config.h"
#include "app/job.h"
#include "app/run/report.h"
#include "app/version.h"
#include "app/wire/control.h"
#include "app/worker/worker.h"

namespace pulse::app {
namespace {

void add_job_options(CLI::App* cmd, JobOptions& o, bool config_required) {
  auto* cfg = cmd->add_option("config", o.config_path, "TOML config (e.g. configs/default.toml)");
  if (config_required) cfg->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", o.overrides, "override a config field: section.key=value (repeatable)")
      ->type_name("KEY=VALUE");
  cmd->add_flag("--quiet,-q", o.quiet, "no progress bar; warnings and errors only");
  cmd->add_flag("--log-json", o.log_json, "one JSON object per step on stdout");
}

/// Why `pulse run|trainer CONFIG --resume RUN_DIR` is refused instead of ignoring CONFIG.
constexpr const char* kConfigOrResume =
    "give a CONFIG file or --resume RUN_DIR, not both (a resumed run reads RUN_DIR/config.toml; "
    "--set still applies)";

/// `pulse run`, `pulse trainer`, `pulse worker`, `pulse eval`: the roles (app/job.h).
void register_role_commands(CLI::App& app) {
  auto run_opts = std::make_shared<JobOptions>();
  auto* run =
      app.add_subcommand("run", "train: SFT warm start, then GRPO with PULSESync to inference workers");
  add_job_options(run, *run_opts, false);
  run->add_option("--resume", run_opts->resume_dir, "continue the run in RUN_DIR from its last checkpoint")
      ->check(CLI::ExistingDirectory);
  run->callback([run_opts] {
    if (run_opts->config_path.empty() && run_opts->resume_dir.empty())
      throw CLI::ValidationError("run", "give a CONFIG file or --resume RUN_DIR");
    if (!run_opts->config_path.empty() && !run_opts->resume_dir.empty())
      throw CLI::ValidationError("run", kConfigOrResume);
    manage_worker_scratch("run");  // the in-process workers' scratch folders
    throw Exit{run_job(*run_opts)};
  });

  auto trainer_opts = std::make_shared<JobOptions>();
  auto* trainer = app.add_subcommand(
      "trainer", "the trainer role alone: waits for run.workers `pulse worker` processes to connect");
  add_job_options(trainer, *trainer_opts, false);
  trainer->add_option("--resume", trainer_opts->resume_dir, "continue the run in RUN_DIR")
      ->check(CLI::ExistingDirectory);
  trainer->callback([trainer_opts] {
    if (trainer_opts->config_path.empty() && trainer_opts->resume_dir.empty())
      throw CLI::ValidationError("trainer", "give a CONFIG file or --resume RUN_DIR");
    if (!trainer_opts->config_path.empty() && !trainer_opts->resume_dir.empty())
      throw CLI::ValidationError("trainer", kConfigOrResume);
    trainer_opts->in_process_workers = false;
    throw Exit{run_job(*trainer_opts)};
  });

  auto worker_opts = std::make_shared<WorkerOptions>();
  auto* worker =
      app.add_subcommand("worker", "an inference worker: fetches PULSESync patches, generates rollouts");
  worker->add_option("--trainer", worker_opts->trainer_url, "trainer control URL, e.g. http://10.0.0.5:29600")
      ->required()
      ->check(CLI::Validator(
          [](std::string& url) {
            const size_t scheme = url.rfind("http://", 0) == 0 ? 7 : url.rfind("https://", 0) == 0 ? 8 : 0;
            if (scheme == 0 || url.size() == scheme || url[scheme] == '/' || url[scheme] == ':')
              return "'" + url +
                     "' is not an http:// or https:// URL with a host, e.g. http://10.0.0.5:29600";
            return std::string();
          },
          "URL"));
  worker->add_option("--token-file", worker_opts->token_file, "file whose first line is the bearer token");
  worker->add_option("--token", worker_opts->token,
                     "bearer token (visible to other users of this machine in `ps`: prefer PULSE_TOKEN or "
                     "--token-file; default: the PULSE_TOKEN env var)");
  worker
      ->add_option("--id", worker_opts->worker_id,
                   "a stable worker name (default: the trainer assigns w<N>); a restarted worker with the "
                   "same name replaces the old one at once")
      ->check(CLI::Validator(
          [](std::string& id) {
            // Checked here too, not only by the trainer: with no trainer up yet a bad name was found only
            // after the whole --register-wait.
            return valid_worker_name(id) ? std::string()
                                         : "'" + id +
                                               "': use 1..64 letters, digits, '.', '_' or '-' (not "
                                               "starting with '.')";
          },
          "NAME"));
  worker->add_option("--threads", worker_opts->threads, "LibTorch threads (0 = default)");
  worker
      ->add_option("--register-wait", worker_opts->register_wait_s,
                   "seconds to keep retrying registration (trainer not up yet, run full)")
      ->check(CLI::Range(0.0, 86400.0 * 365))
      ->capture_default_str();
  worker->add_flag("--quiet,-q", worker_opts->quiet, "warnings and errors only");
  worker->add_flag("--log-json", worker_opts->log_json, "one JSON object per event on stdout");
  worker->callback([worker_opts] { throw Exit{worker_main(*worker_opts)}; });

  auto eval_opts = std::make_shared<JobOptions>();
  auto* eval = app.add_subcommand("eval", "Pass@1 (greedy) of model.path on the config's held-out problems");
  add_job_options(eval, *eval_opts, true);
  eval->callback([eval_opts] { throw Exit{eval_job(*eval_opts)}; });
}

/// `pulse config`, `pulse report`.
void register_tool_commands(CLI::App& app) {
  auto print_defaults = std::make_shared<bool>(false);
  auto check_path = std::make_shared<std::string>();
  auto check_sets = std::make_shared<std::vector<std::string>>();
  auto* config = app.add_subcommand("config", "print or check configs");
  auto* print_opt =
      config->add_flag("--print-defaults", *print_defaults, "print every key with its default as TOML");
  auto* check_opt =
      config->add_option("--check", *check_path, "validate a config file")->check(CLI::ExistingFile);
  auto* set_opt = config->add_option("--set", *check_sets,
                                     "with --check: section.key=value overrides, as on `pulse run`");
  // Refused rather than ignored: the printed defaults take neither a file nor overrides.
  print_opt->excludes(check_opt);
  set_opt->needs(check_opt);
  config->callback([print_defaults, check_path, check_sets] {
    if (*print_defaults) {
      std::cout << to_toml(Config{});
    } else if (!check_path->empty()) {
      const Config checked = load_config(*check_path, *check_sets);
      // The model the config names is read and sized too (as `pulse run` would, with its worker threads).
      check_model_inputs(checked, *check_path, MemoryRole{true, checked.run.workers});
      std::cout << to_toml(checked);
    } else {
      throw CLI::ValidationError("config", "give --print-defaults or --check FILE");
    }
  });

  auto report_dir = std::make_shared<std::string>();
  auto* report =
      app.add_subcommand("report", "rebuild RUN_DIR/report.html from metrics.jsonl and summary.json");
  report->add_option("run_dir", *report_dir, "run directory")->required()->check(CLI::ExistingDirectory);
  report->callback([report_dir] { std::cout << write_report(*report_dir) << "\n"; });
}

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{"pulse: RL post-training of LLMs with sparse, lossless PULSESync weight updates"};
  app.require_subcommand(1);
  // pulse, LibTorch (headers and the library loaded) and CUDA (LibTorch's and the kernels'): app/version.h.
  app.set_version_flag("--version", [] { return version_text(); });
  register_role_commands(app);
  register_tool_commands(app);
  register_sync_commands(app);
  register_reward_commands(app);
  register_generate_command(app);
  register_data_commands(app);
  register_launch_command(app, argc, argv);
  auto* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  register_model_bench(*bench);
  register_loco_bench(*bench);
  register_wan_bench(*bench);
  register_kernels_bench(*bench);
  register_generate_bench(*bench);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version: 0; every usage error (unknown option, missing or conflicting argument): 2, as
    // POSIX tools and argparse do (CLI11's own codes, 101-127, follow no convention).
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const Exit& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "pulse: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace pulse::app

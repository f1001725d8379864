// The roles behind `pulse run`, `pulse trainer`, `pulse worker` and `pulse eval`.
//
// `pulse run` = one trainer + run.workers inference workers as threads of one process; they talk over
// loopback HTTP exactly as `pulse trainer` and `pulse worker --trainer URL` processes on different machines
// do (app/wire/control.h: jobs and rollouts; sync/transport_http.h: PULSESync patches).
//
// Where each entry point lives: run_job in app/trainer/trainer.cpp (the trainer process), worker_main in
// app/worker/worker.cpp (the worker process), eval_job in app/cmd/eval_cmd.cpp (the `pulse eval` command).
#pragma once
#include <string>
#include <vector>

namespace pulse::app {

/// Options of `pulse run` / `pulse trainer` / `pulse eval`.
struct JobOptions {
  std::string config_path;             ///< TOML config ("" with resume_dir: RUN_DIR/config.toml)
  std::vector<std::string> overrides;  ///< --set section.key=value
  std::string resume_dir;              ///< --resume RUN_DIR
  bool quiet = false;                  ///< no progress bar, warnings only
  bool log_json = false;               ///< one JSON line per step on stdout
  bool in_process_workers = true;      ///< false for `pulse trainer` (workers connect from outside)
};

/// `pulse run` / `pulse trainer`: the whole job (tokenizer, model, SFT, Pass@1 before, GRPO steps with
/// PULSESync to the workers, Pass@1 after, summary + report). Returns the process exit code.
/// Defined in app/trainer/trainer.cpp.
int run_job(const JobOptions& options);

/// Options of `pulse worker`.
struct WorkerOptions {
  std::string trainer_url;  ///< http://HOST:PORT of the trainer's control server
  std::string token;        ///< --token: bearer token, visible to other users in `ps` (prefer the two below)
  std::string token_file;   ///< --token-file: first line of this file ("" = none)
  std::string worker_id;    ///< --id: a stable name ("" = the trainer assigns w<slot>)
  int threads = 0;          ///< LibTorch threads (0 = LibTorch's default)
  double register_wait_s = 600;  ///< --register-wait: seconds to retry registering
  bool quiet = false;            ///< warnings and errors only
  bool log_json = false;         ///< one JSON object per event on stdout
};

/// `pulse worker`: registers with the trainer (waiting for it), then loops: sync weights to the job's
/// version, generate and grade rollouts, post them; until the trainer says stop. The token comes from
/// --token, else --token-file, else the PULSE_TOKEN env var (both flags: an error). Returns the process exit
/// code. Defined in app/worker/worker.cpp.
int worker_main(const WorkerOptions& options);

/// `pulse eval`: Pass@1 of a model (model.path, or a fresh seeded one) on the config's held-out problems.
/// Defined in app/cmd/eval_cmd.cpp.
int eval_job(const JobOptions& options);

}  // namespace pulse::app

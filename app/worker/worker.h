// An inference worker: its own BF16 weights (sync::WorkerReplica), its own model instance whose parameters
// follow those weights after every sync (app/worker/device_weights.h: the same patches applied on a GPU, or a
// full copy), and the loop over the trainer's jobs.
#pragma once
#include <atomic>
#include <string>

namespace pulse::app {

/// Worker loop settings.
struct WorkerLoopOptions {
  std::string control_url;  ///< the trainer's control server
  std::string token;        ///< bearer token for both servers
  std::string worker_name;  ///< the id to register as ("" = the trainer names it w<slot>)
  int torch_threads = 0;    ///< at::set_num_threads for this thread (0 = leave as is)
  int grade_threads = 1;    ///< rl::grade_batch threads
  double timeout_s = 60;
  int max_retries = 5;
  double register_wait_s = 600;  ///< how long registering is retried (trainer not up yet, run full)
  bool reconnect = true;  ///< after losing the trainer (or being dropped), register again (a fresh session)
  bool verbose = false;   ///< events at info level (`pulse worker`); else debug (threads of `pulse run`)
  bool log_json = false;  ///< events also as one JSON object per line on stdout
};

/// Registers (retrying while the trainer is not up yet or the run is full, for register_wait_s), then runs
/// jobs until the trainer posts "stop": for each job, sync the replica to the job's version over PULSESync
/// (fetch, validate, apply, confirm the root hash), bring the model's parameters there (ModelWeightLoader),
/// and for "generate" jobs sample + grade each share of rollouts with rl::collect_rollouts, one report per
/// share (a sync-only job: one report). A heartbeat thread renews the lease every lease_s / 3. When the
/// trainer is lost (network errors past the retries) or drops this worker (410), and `reconnect` is set,
/// it registers again with a fresh session (a resumed trainer on the same port is found again). On a job
/// error the worker reports it to the trainer and rethrows. Same code for threads of `pulse run` and the
/// `pulse worker` process. Its scratch folder (tokenizer, config.json) is removed on every exit path.
void worker_loop(const WorkerLoopOptions& options);

/// The workers' scratch folders of this process (`pulse worker`, or `pulse run` with its in-process
/// workers): from the first call on, SIGINT and SIGTERM end the process with exit status 128 + the
/// signal after removing them and logging "<who>: stopping: SIGINT" (a run stopped so resumes from its
/// last checkpoint as after a kill); every call also sweeps the folders of killed processes
/// (sweep_stale_worker_dirs on the temp folder) and returns how many it removed. Thread safe.
int manage_worker_scratch(const char* who);

/// Removes pulse-worker-<pid>-* folders under `tmp_dir` whose process is gone (a worker killed with
/// SIGKILL cannot remove its own). Returns how many were removed. Thread-safe.
int sweep_stale_worker_dirs(const std::string& tmp_dir);

}  // namespace pulse::app

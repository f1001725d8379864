// An inference worker: its own BF16 weights (sync::WorkerReplica), its own model instance whose parameters
// are set from those weights after every applied patch, and the loop over the trainer's jobs.
#pragma once
#include <atomic>
#include <string>

namespace pulse::app {

/// Worker loop settings.
struct WorkerLoopOptions {
  std::string control_url;  ///< the trainer's control server
  std::string token;        ///< bearer token for both servers
  std::string worker_id;
  int torch_threads = 0;  ///< at::set_num_threads for this thread (0 = leave as is)
  int grade_threads = 1;  ///< rl::grade_batch threads
  double timeout_s = 60;
  int max_retries = 5;
};

/// Registers, then runs jobs until the trainer posts "stop": for each job, sync the replica to the job's
/// version over PULSESync (fetch, validate, apply, confirm the root hash), set the model's parameters from
/// the BF16 buffers, and for "generate" jobs sample + grade rollouts with rl::collect_rollouts; each job
/// ends with a report (version, root hash, sync timings, rollouts). On an error the worker reports it to the
/// trainer and rethrows. Same code for threads of `pulse run` and the `pulse worker` process.
void worker_loop(const WorkerLoopOptions& options);

}  // namespace pulse::app

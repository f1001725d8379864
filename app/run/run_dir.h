// The trainer's run folder over its lifetime: where it is (a new run, or the one given to --resume; one
// folder per trainer rank), the lock that keeps it to one process, the guards a resumed run's --set
// values and checkpoints pass, and the removal of a new run's folder when the run could not be set up.
// The files inside are app/run/run_files.h and app/run/checkpoints.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/config.h"

namespace pulse::app {

/// One trainer's run folder, RUN_DIR (DIR/rank-R when several trainers share the run folder DIR). Holds
/// the exclusive lock on RUN_DIR/.lock from open() until discard() or destruction. Not thread-safe.
class RunDir {
 public:
  RunDir() = default;
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;
  ~RunDir();

  /// "" for one trainer, "/rank-R" when world_size > 1: what follows the run folder in RUN_DIR.
  static std::string rank_suffix(int rank, int world_size);
  /// --resume DIR: this rank's folder, DIR + rank_suffix. Throws std::runtime_error when it holds no
  /// config.toml, saying how many ranks DIR has when it holds rank-K folders (WORLD_SIZE is wrong).
  static std::string resumed_path(const std::string& resume_dir, int rank, int world_size);
  /// A new run: this rank's folder under `base` (the run folder rank 0 resolved). Throws
  /// std::runtime_error when it already holds a run (checkpoints/LATEST).
  static std::string new_path(const std::string& base, int rank, int world_size);

  /// Creates `path` and its checkpoints/ folder and locks it. `resuming` = false and `path` missing: a new
  /// run, whose folder, and the parent folders made for it, discard() removes. Throws std::runtime_error
  /// when the lock cannot be opened or another process holds it.
  void open(const std::string& path, bool resuming, int world_size);

  /// A new run whose setup failed leaves no run folder behind (it would hold only its config.toml;
  /// resuming it would fail the same way), nor the parent folders this process made for it (runs/, the
  /// run folder above rank-K/) once they are empty. Releases the lock. No-op for a resumed or existing
  /// folder. Never throws.
  void discard();

  const std::string& path() const { return path_; }
  /// Whether this process created RUN_DIR (a new run).
  bool is_new() const { return new_run_; }

 private:
  void lock();

  std::string path_;
  int lock_fd_ = -1;         ///< flock on RUN_DIR/.lock
  bool new_run_ = false;     ///< this process created RUN_DIR (a new run)
  std::string created_top_;  ///< the outermost folder of RUN_DIR's path this process created ("" = none)
};

/// --resume with --set: keys that would change the algorithm mid-run (the outer-round scheme and its
/// residual, the KL reference) are refused, and so are keys the resumed run would not read: where it
/// lives, and, when it resumes from a checkpoint, the model and tokenizer it started from and the SFT warm
/// start (a run without a checkpoint yet starts over and reads them). `stored`: RUN_DIR/config.toml as
/// written; `now`: it with `overrides` ("section.key=value", already checked by load_config) applied.
/// Throws ConfigError naming --resume `resume_dir` and the key.
void refuse_algorithm_changes(const Config& stored, const Config& now, const std::string& resume_dir,
                              const std::vector<std::string>& overrides, const std::string& run_dir);

/// Each rank writes its own checkpoints/LATEST, so a kill between two ranks' writes leaves them one
/// checkpoint apart (rank 0 at step 8, rank 1 at 6): each then resumed from its own and the ranks ran
/// different steps (one finished, the other failed on "peer closed the connection"). Every rank resumes
/// from the oldest of the ranks' latest checkpoints (the two newest are kept, so it is still there), or
/// starts over (-1) when a rank has none. `steps`: every rank's resumable_checkpoint, by rank; `mine`:
/// this rank's. Throws std::runtime_error naming the steps when this rank no longer has the common one.
int64_t common_resume_step(const std::vector<int64_t>& steps, int64_t mine, const std::string& run_dir);

}  // namespace pulse::app

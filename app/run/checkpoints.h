// A run's checkpoints: RUN_DIR/checkpoints/step-NNNNNN/{model/, state/, pending_rollouts.json,
// MANIFEST.json (every file's size and hash: app/run/checkpoint_manifest.h)} and
// RUN_DIR/checkpoints/LATEST naming the newest complete one. A checkpoint is written into a staging folder
// (step-NNNNNN.partial-PID, every file atomically: temp file, fsync, rename), which is then renamed into
// place, and LATEST last, so a crash at any point leaves the previous checkpoint usable and no step-NNNNNN
// folder ever holds part of one; the next save sweeps staging folders a killed save left.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace pulse::model {
class TransformerImpl;
}
namespace pulse::rl {
class MasterAdam;
}

namespace pulse::app {

/// RUN_DIR/checkpoints/step-NNNNNN.
std::string checkpoint_dir(const std::string& run_dir, int64_t step);

/// The newest complete checkpoint's step (checkpoints/LATEST), or -1 when there is none; puts back the
/// checkpoint it names when a killed re-save of that step left it moved aside (step-N.aside-PID). Throws
/// std::runtime_error naming the file when LATEST is not a step number.
int64_t latest_checkpoint(const std::string& run_dir);

/// The checkpoint a resume of `run_dir` continues from: latest_checkpoint, or -1 when there is none or
/// the run has no run_state.json yet (a run killed before its first step starts over). Throws as
/// latest_checkpoint.
int64_t resumable_checkpoint(const std::string& run_dir);

/// What a checkpoint holds besides the model and the optimizer.
struct CheckpointExtras {
  uint64_t data_cursor = 0;     ///< train prompts consumed
  uint64_t policy_version = 0;  ///< weights version last published
  nlohmann::json pending;       ///< rl.max_lag = 1: the rollouts already sampled for the next step
  /// Writes more files into the checkpoint folder (the DiLoCo outer state) before LATEST names it.
  std::function<void(const std::string& dir)> write_files;
};

/// Writes checkpoint `step` (HF safetensors model, optimizer + train state, pending rollouts, the files of
/// extras.write_files, then MANIFEST.json over all of them) whole, then
/// LATEST; a checkpoint of the same step already there is replaced atomically (renameat2 exchange where the
/// filesystem has it); checkpoints older than the newest two are removed. Throws std::runtime_error (or
/// std::filesystem::filesystem_error) naming the path.
void save_checkpoint(const std::string& run_dir, int64_t step, const model::TransformerImpl& model,
                     const rl::MasterAdam& opt, const CheckpointExtras& extras);

/// Loads checkpoint `step` into `opt` (and so `model`, the model `opt` trains); returns its step and
/// extras. Every file is first checked against the checkpoint's MANIFEST.json (checkpoints written before
/// manifests existed have none and are not checked). The HF model folder (the run's deliverable, derived
/// from the masters) is checked too: one that differs from the manifest or no longer opens (e.g. a
/// model.safetensors cut short outside pulse) is rewritten from the restored weights, with a warning,
/// instead of staying broken (and its manifest entries updated); a missing manifest is logged. Throws
/// std::runtime_error naming the files, their hashes and the newest older checkpoint when any other file
/// differs from the manifest (nothing is loaded then), and naming the file on a missing or malformed
/// optimizer/train state or manifest.
CheckpointExtras load_checkpoint(const std::string& run_dir, int64_t step, rl::MasterAdam& opt,
                                 const model::TransformerImpl& model, int64_t* step_out);

/// Checks an HF model folder that lies in a checkpoint (`model_path` = CKPT/model, e.g. a step's model
/// given to `pulse eval` or as model.path of a new run; resolved through "." / ".." / symlinks first)
/// against CKPT/MANIFEST.json before it is read: only the manifest's entries under the folder are hashed.
/// Not checked: a folder whose parent has no MANIFEST.json (any other HF folder; one laid out as a
/// checkpoint, i.e. beside a state/ folder, is logged as unchecked) or whose MANIFEST.json is another
/// tool's JSON (no "format" of pulse's). Throws std::runtime_error naming each file that differs, is
/// missing or unreadable, with the recorded and found size and hash, and the remedy (restore them; for
/// the run's latest checkpoint, `pulse run --resume` rewrites the model), or naming a malformed
/// manifest. Reads each listed file once.
void verify_checkpointed_model(const std::string& model_path);

}  // namespace pulse::app

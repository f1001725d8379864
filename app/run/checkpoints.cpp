#include "app/run/checkpoints.h"

#include <fcntl.h>  // AT_FDCWD
#include <unistd.h>

#include <algorithm>
#include <cstdio>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <filesystem>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "app/run/checkpoint_manifest.h"
#include "app/run/run_files.h"
#include "model/checkpoint.h"
#include "rl/optimizer.h"
#include "rl/train_state.h"
#include "sync/io/atomic_file.h"
#include "sync/io/safetensors.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace pulse::app {
namespace {
/// File of a checkpoint that holds the rollouts already generated for its step (rl.max_lag = 1).
const char* kPendingRollouts = "/pending_rollouts.json";
}  // namespace

std::string checkpoint_dir(const std::string& run_dir, int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", static_cast<long long>(step));
  return run_dir + "/checkpoints/" + buf;
}

int64_t latest_checkpoint(const std::string& run_dir) {
  std::string path = run_dir + "/checkpoints/LATEST";
  if (!fs::exists(path)) return -1;
  std::string text = sync::read_file(path);
  int64_t step = 0;
  try {
    step = std::stoll(text);
  } catch (const std::exception&) {
    throw std::runtime_error(path + ": not a step number: '" + text + "'");
  }
  // A save of the same step killed between its two renames (filesystems without RENAME_EXCHANGE) left
  // the checkpoint LATEST names at step-N.aside-PID: put it back.
  const std::string dir = checkpoint_dir(run_dir, step);
  if (!fs::exists(dir)) {
    const std::string prefix = fs::path(dir).filename().string() + ".aside-";
    for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints"))
      if (e.is_directory() && e.path().filename().string().rfind(prefix, 0) == 0) {
        fs::rename(e.path(), dir);
        break;
      }
  }
  return step;
}

namespace {
/// Whether `name` is a complete checkpoint folder's name: "step-" and 6 to 18 digits, nothing else.
bool is_checkpoint_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() < 11 || name.size() > 23) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// The steps of the complete checkpoints in `root` (RUN_DIR/checkpoints), ascending.
std::vector<int64_t> checkpoint_steps(const std::string& root) {
  std::vector<int64_t> steps;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && is_checkpoint_name(name)) steps.push_back(std::stoll(name.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

/// Puts the complete folder `staged` at `final_dir`. A folder already there (the same step saved again)
/// is swapped out in one atomic renameat2(RENAME_EXCHANGE), so a crash leaves either whole version at
/// `final_dir`; on a filesystem without it, moved aside first (a crash in between leaves `final_dir`
/// missing and the previous version at `aside`, which latest_checkpoint puts back; never a mix).
void install_dir(const std::string& staged, const std::string& final_dir, const std::string& aside) {
  std::error_code ec;
  if (!fs::exists(final_dir)) {
    fs::rename(staged, final_dir);
    return;
  }
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(staged, ec);  // now the previous version
    return;
  }
  fs::rename(final_dir, aside);
  fs::rename(staged, final_dir);
  fs::remove_all(aside, ec);
}
}  // namespace

void save_checkpoint(const std::string& run_dir, int64_t step, const model::TransformerImpl& model,
                     const rl::MasterAdam& opt, const CheckpointExtras& extras) {
  const std::string root = run_dir + "/checkpoints";
  fs::create_directories(root);
  // Folders a killed save left behind (step-N.partial-PID, step-N.aside-PID) are not checkpoints.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step-", 0) == 0 && !is_checkpoint_name(name))
      fs::remove_all(e.path(), ec);
  }
  // The checkpoint is written whole into a staging folder and renamed into place, so step-N never
  // holds a part of a checkpoint (nor files of an earlier save of the same step).
  const std::string final_dir = checkpoint_dir(run_dir, step);
  const std::string pid = std::to_string(::getpid());
  const std::string dir = final_dir + ".partial-" + pid;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  if (!extras.pending.is_null()) write_json_atomic(dir + kPendingRollouts, extras.pending);
  model::save_hf_checkpoint(model, dir + "/model");
  rl::TrainState st;
  st.step = step;
  st.data_cursor = extras.data_cursor;
  st.policy_version = extras.policy_version;
  rl::save_train_state(dir + "/state", opt, st);
  if (extras.write_files) extras.write_files(dir);
  write_checkpoint_manifest(dir);  // last: it describes every file above
  sync::fsync_dir(dir);
  install_dir(dir, final_dir, final_dir + ".aside-" + pid);
  sync::fsync_dir(root);
  sync::write_file_atomic(root + "/LATEST", std::to_string(step) + "\n");
  // By step number: as names, step-1000000 would sort before step-999999.
  const std::vector<int64_t> steps = checkpoint_steps(root);
  for (size_t i = 0; i + 2 < steps.size(); ++i) fs::remove_all(checkpoint_dir(run_dir, steps[i]));
}

int64_t resumable_checkpoint(const std::string& run_dir) {
  const int64_t step = latest_checkpoint(run_dir);
  return step >= 0 && fs::exists(run_dir + "/run_state.json") ? step : -1;
}

CheckpointExtras load_checkpoint(const std::string& run_dir, int64_t step, rl::MasterAdam& opt,
                                 const model::TransformerImpl& model, int64_t* step_out) {
  const std::string dir = checkpoint_dir(run_dir, step);
  // Every file against the manifest first: a changed optimizer state, train state or DiLoCo outer state
  // cannot be rebuilt, so it stops the resume before anything is loaded; the HF model (derived from the
  // masters) is rewritten below instead.
  bool model_damaged = false, has_manifest = false;
  std::string problems;
  for (const ManifestMismatch& m : check_checkpoint_manifest(dir, &has_manifest)) {
    if (m.file.rfind("model/", 0) == 0) {
      spdlog::warn("{}/{}: {}: the HF model is rewritten from the restored master weights", dir, m.file,
                   m.problem);
      model_damaged = true;
    } else {
      problems += "\n  " + dir + "/" + m.file + ": " + m.problem;
    }
  }
  if (!problems.empty()) {
    // The newest older checkpoint (pruning keeps two), to resume from instead.
    int64_t older = -1;
    for (int64_t s : checkpoint_steps(run_dir + "/checkpoints"))
      if (s < step) older = s;
    const std::string fallback = older < 0 ? "(there is no older checkpoint to resume from)"
                                           : "or resume from " + checkpoint_dir(run_dir, older) + " (move " +
                                                 dir + " aside and write " + std::to_string(older) +
                                                 " into " + run_dir + "/checkpoints/LATEST)";
    throw std::runtime_error("checkpoint " + dir + " was changed or damaged after it was saved (" +
                             kCheckpointManifest + " disagrees):" + problems +
                             "\nrestore these files (remove the ones added after the save) " + fallback);
  }
  if (!has_manifest)
    spdlog::warn("{}: no {} (saved by an older pulse, or the file was lost): its files are not checked", dir,
                 kCheckpointManifest);
  rl::TrainState st = rl::load_train_state(dir + "/state", opt);
  // Resuming never reads the HF model (the masters are the state), so a damaged one would stay broken.
  if (!model_damaged) {
    try {
      (void)sync::Checkpoint::open(dir + "/model");
    } catch (const std::exception& e) {
      spdlog::warn("{}/model does not open ({}): rewritten from the restored master weights", dir, e.what());
      model_damaged = true;
    }
  }
  if (model_damaged) {
    // Files added to the model folder after the save go: the model reader would prefer some of them
    // (an index over model.safetensors).
    std::error_code ec;
    for (const ManifestMismatch& m : check_checkpoint_manifest(dir, nullptr, kManifestClosedFolder))
      if (m.unlisted) fs::remove(fs::path(dir) / m.file, ec);
    model::save_hf_checkpoint(model, dir + "/model");
    // The rewritten files' hashes; every other entry stays as recorded (and checked above).
    if (has_manifest) update_checkpoint_manifest(dir, {"model/config.json", "model/model.safetensors"});
  }
  CheckpointExtras x;
  x.data_cursor = st.data_cursor;
  x.policy_version = st.policy_version;
  if (fs::exists(dir + kPendingRollouts)) x.pending = read_json(dir + kPendingRollouts);
  if (step_out) *step_out = st.step;
  return x;
}

void verify_checkpointed_model(const std::string& model_path) {
  // The folder as the filesystem resolves it: "." inside it, a symlink to it, ".." after a symlink.
  std::error_code ec;
  fs::path folder = fs::weakly_canonical(fs::absolute(model_path), ec);
  if (ec) return;  // unresolvable: the model reader names the path
  if (folder.filename().empty()) folder = folder.parent_path();
  const fs::path parent = folder.parent_path();
  const std::string dir = parent.string(), manifest = (parent / kCheckpointManifest).string();
  const std::string sub = folder.filename().string();
  if (sub.empty() || parent.empty()) return;
  if (!fs::exists(manifest)) {
    if (fs::is_directory(parent / "state"))  // laid out as a checkpoint (an older pulse's: no manifest)
      spdlog::warn(
          "{}: no {} (saved by an older pulse, or the file was lost): the model's files are not checked", dir,
          kCheckpointManifest);
    return;
  }
  if (!fs::is_regular_file(manifest)) throw std::runtime_error(manifest + ": not a regular file");
  if (!is_checkpoint_manifest(manifest)) return;  // another tool's file: not a pulse checkpoint
  std::string problems;
  for (const ManifestMismatch& m : check_checkpoint_manifest(dir, nullptr, sub))
    problems += "\n  " + dir + "/" + m.file + ": " + m.problem;
  if (problems.empty()) return;
  // Resuming rewrites the HF model of the checkpoint it resumes from, the run's latest.
  std::string remedy = "restore them (remove the ones added after the save)";
  if (parent.parent_path().filename() == "checkpoints" && sub == "model") {
    const std::string run = parent.parent_path().parent_path().string();
    try {
      const int64_t latest = latest_checkpoint(run);
      if (latest >= 0 && fs::equivalent(checkpoint_dir(run, latest), parent, ec))
        remedy += ", or resume the run (pulse run --resume " + run +
                  "), which rewrites this checkpoint's HF model from its master weights";
    } catch (const std::exception&) {  // an unreadable LATEST: only the first remedy
    }
  }
  throw std::runtime_error("the model lies in checkpoint " + dir + ", and its " + kCheckpointManifest +
                           " disagrees (the files changed after the save):" + problems + "\n" + remedy);
}

}  // namespace pulse::app

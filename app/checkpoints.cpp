#include "app/checkpoints.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "app/run_files.h"
#include "model/checkpoint.h"
#include "rl/optimizer.h"
#include "rl/train_state.h"
#include "sync/atomic_file.h"

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
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    throw std::runtime_error(path + ": not a step number: '" + text + "'");
  }
}

void save_checkpoint(const std::string& run_dir, int64_t step, const model::TransformerImpl& model,
                     const rl::MasterAdam& opt, const CheckpointExtras& extras) {
  std::string dir = checkpoint_dir(run_dir, step);
  fs::create_directories(dir);
  if (!extras.pending.is_null()) write_json_atomic(dir + kPendingRollouts, extras.pending);
  model::save_hf_checkpoint(model, dir + "/model");
  rl::TrainState st;
  st.step = step;
  st.data_cursor = extras.data_cursor;
  st.policy_version = extras.policy_version;
  rl::save_train_state(dir + "/state", opt, st);
  if (extras.write_files) extras.write_files(dir);
  sync::fsync_dir(dir);
  sync::fsync_dir(run_dir + "/checkpoints");
  sync::write_file_atomic(run_dir + "/checkpoints/LATEST", std::to_string(step) + "\n");
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints"))
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0) old.push_back(e.path());
  std::sort(old.begin(), old.end());
  for (size_t i = 0; i + 2 < old.size(); ++i) fs::remove_all(old[i]);
}

CheckpointExtras load_checkpoint(const std::string& run_dir, int64_t step, rl::MasterAdam& opt,
                                 int64_t* step_out) {
  const std::string dir = checkpoint_dir(run_dir, step);
  rl::TrainState st = rl::load_train_state(dir + "/state", opt);
  CheckpointExtras x;
  x.data_cursor = st.data_cursor;
  x.policy_version = st.policy_version;
  if (fs::exists(dir + kPendingRollouts)) x.pending = read_json(dir + kPendingRollouts);
  if (step_out) *step_out = st.step;
  return x;
}

}  // namespace pulse::app

// The trainer's run folder (app/run/run_dir.h): open, lock, discard, resume guards.
#include "app/run/run_dir.h"

#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "app/run/checkpoints.h"

namespace fs = std::filesystem;

namespace pulse::app {

RunDir::~RunDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string RunDir::rank_suffix(int rank, int world_size) {
  return world_size > 1 ? "/rank-" + std::to_string(rank) : "";
}

std::string RunDir::resumed_path(const std::string& resume_dir, int rank, int world_size) {
  const std::string path = resume_dir + rank_suffix(rank, world_size);
  if (fs::exists(path + "/config.toml")) return path;
  int ranks = 0;
  while (fs::exists(resume_dir + "/rank-" + std::to_string(ranks) + "/config.toml")) ++ranks;
  if (ranks > 0)
    throw std::runtime_error(resume_dir + ": this run has " + std::to_string(ranks) +
                             " trainer ranks; resume it with `pulse launch --nproc " + std::to_string(ranks) +
                             " --resume " + resume_dir + "` (WORLD_SIZE is " + std::to_string(world_size) +
                             ")");
  throw std::runtime_error(path + ": no config.toml (is this a run directory?)");
}

std::string RunDir::new_path(const std::string& base, int rank, int world_size) {
  const std::string path = base + rank_suffix(rank, world_size);
  if (fs::exists(path + "/checkpoints/LATEST"))
    throw std::runtime_error(path + ": already holds a run; use --resume " + base + " or another run.dir");
  return path;
}

void RunDir::open(const std::string& path, bool resuming, int world_size) {
  path_ = path;
  new_run_ = !resuming && !fs::exists(path_);
  if (new_run_) {  // the outermost missing folder of the path: discard() removes up to it
    const fs::path mine = fs::absolute(path_).lexically_normal();
    for (fs::path p = mine; !p.empty() && !fs::exists(p); p = p.parent_path()) created_top_ = p.string();
    // The folder above rank-K/ is the run's, whichever rank made it: the last rank to go removes it.
    if (world_size > 1 && created_top_ == mine.string()) created_top_ = mine.parent_path().string();
  }
  fs::create_directories(path_ + "/checkpoints");
  lock();
}

/// One process per run directory: an exclusive lock on RUN_DIR/.lock held for the process's lifetime.
void RunDir::lock() {
  const std::string path = path_ + "/.lock";
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw std::runtime_error(path + ": cannot open the run directory lock");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    throw std::runtime_error(path_ + ": in use by another pulse process (" + path + " is locked)");
}

void RunDir::discard() {
  if (!new_run_) return;
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  std::error_code ec;
  fs::remove_all(path_, ec);
  if (created_top_.empty()) return;
  const fs::path top = fs::path(created_top_).lexically_normal();
  for (fs::path p = fs::absolute(path_).lexically_normal().parent_path(); !p.empty(); p = p.parent_path()) {
    const auto rel = p.lexically_relative(top);
    if (rel.empty() || *rel.begin() == "..") break;  // above what this process made
    if (!fs::remove(p, ec)) break;                   // not empty (another rank's folder), or gone
    if (p == top) break;
  }
}

namespace {

/// The same folder however it is spelled (trailing '/', "./", a symlink).
bool same_path(const std::string& x, const std::string& y) {
  if (x.empty() || y.empty()) return x == y;
  std::error_code ex, ey;
  const fs::path cx = fs::weakly_canonical(fs::absolute(x), ex),
                 cy = fs::weakly_canonical(fs::absolute(y), ey);
  return fs::path(x).lexically_normal() == fs::path(y).lexically_normal() || (!ex && !ey && cx == cy);
}

/// A key's value as TOML text ("" when absent), to compare tables key by key.
std::string toml_text(const toml::table& t, const std::string& sec, const std::string& key) {
  std::ostringstream out;
  out << t[sec][key];
  return out.str();
}

}  // namespace

void refuse_algorithm_changes(const Config& stored, const Config& now, const std::string& resume_dir,
                              const std::vector<std::string>& overrides, const std::string& run_dir) {
  const std::string where = "--resume " + resume_dir + ": --set ";
  auto check = [&](bool same, const char* key) {
    if (!same)
      throw ConfigError(
          where + key +
          " cannot change on --resume (the run's state depends on it); start a new run instead");
  };
  const auto& a = stored.multi;
  const auto& b = now.multi;
  check(a.mode == b.mode, "multi.mode");
  check(a.inner_steps == b.inner_steps, "multi.inner_steps");
  check(a.outer_lr == b.outer_lr && a.outer_momentum == b.outer_momentum, "multi.outer_lr/outer_momentum");
  check(a.gate_open == b.gate_open, "multi.gate_open");
  check((stored.rl.grpo.kl_coef > 0) == (now.rl.grpo.kl_coef > 0), "rl.kl_coef (on/off)");

  const bool from_checkpoint = resumable_checkpoint(run_dir) >= 0;
  const toml::table was = toml::parse(to_toml(stored)), is = toml::parse(to_toml(now));
  for (const std::string& o : overrides) {
    const std::string key = o.substr(0, o.find('='));  // "section.key", checked by load_config
    const std::string sec = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
    bool same = true;
    const char* why = "";
    if (key == "run.dir" || key == "run.name") {
      same = key == "run.dir" ? same_path(now.run.dir, resume_dir) : stored.run.name == now.run.name;
      why = "the run stays in the directory given to --resume";
    } else if (!from_checkpoint) {
      continue;
    } else if (key == "model.path" || key == "model.config") {
      same = key == "model.path" ? same_path(stored.model.path, now.model.path)
                                 : same_path(stored.model.config, now.model.config);
      why = "the checkpoint's weights replace the model the run started from";
    } else if (sec == "tokenizer" || sec == "sft") {
      same = toml_text(was, sec, name) == toml_text(is, sec, name);
      why = sec == "sft" ? "the SFT warm start ran before the run's first checkpoint"
                         : "the run keeps the tokenizer its model was trained with";
    }
    if (!same)
      throw ConfigError(where + key + " has no effect on --resume (" + why + "); start a new run instead");
  }
}

int64_t common_resume_step(const std::vector<int64_t>& steps, int64_t mine, const std::string& run_dir) {
  const int64_t common = *std::min_element(steps.begin(), steps.end());
  if (common == mine) return mine;
  std::string all;
  for (size_t r = 0; r < steps.size(); ++r)
    all += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + std::to_string(steps[r]);
  if (common >= 0 && !fs::exists(checkpoint_dir(run_dir, common) + "/state"))
    throw std::runtime_error(run_dir + ": the ranks' latest checkpoints differ (" + all +
                             ") and this rank no longer has step " + std::to_string(common) +
                             "; start a new run");
  spdlog::warn("the ranks' latest checkpoints differ ({}): every rank resumes from {}", all,
               common >= 0 ? "step " + std::to_string(common) : std::string("the start"));
  return common;
}

}  // namespace pulse::app

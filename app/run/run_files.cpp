#include "app/run/run_files.h"

#include <cstdio>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "sync/io/atomic_file.h"

namespace pulse::app {

std::string resolve_run_dir(const std::string& dir, const std::string& name) {
  if (!dir.empty()) return dir;
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return "runs/" + name + "-" + buf;
}

MetricsLog::MetricsLog(std::string path) : path_(std::move(path)) {}

void MetricsLog::append(const nlohmann::json& row) {
  std::string line = row.dump() + "\n";
  int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path_ + ": cannot open for append: " + std::strerror(errno));
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      throw std::runtime_error(path_ + ": write failed: " + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
}

std::vector<nlohmann::json> MetricsLog::read(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open metrics file");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  std::vector<nlohmann::json> rows;
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      rows.push_back(nlohmann::json::parse(lines[i]));
    } catch (const nlohmann::json::exception& e) {
      if (i + 1 == lines.size()) break;  // torn last line of a killed run
      throw std::runtime_error(path + ":" + std::to_string(i + 1) + ": bad JSON line: " + e.what());
    }
  }
  return rows;
}

void MetricsLog::truncate_before_step(const std::string& path, int64_t step) {
  std::string out;
  int64_t next = 0;  // the step the next kept row must have
  std::ifstream probe(path);
  if (probe) {
    for (const auto& row : read(path)) {
      const int64_t s = row.value("step", int64_t{-1});
      if (s >= step) continue;
      if (s != next) break;
      out += row.dump() + "\n";
      ++next;
    }
  }
  // Resuming with rows missing would make summary.json count and total fewer steps than the run took.
  if (next != step)
    throw std::runtime_error(path + ": the checkpoint resumes at step " + std::to_string(step) +
                             ", but the log's rows stop being consecutive at step " + std::to_string(next) +
                             " (a row for each of steps 0.." + std::to_string(step - 1) +
                             " is needed; was the file cut or edited?)");
  sync::write_file_atomic(path, out);
}

nlohmann::json Summary::to_json() const {
  auto measured = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return nlohmann::json{{"steps", steps},
                        {"pass_at_1_before", measured(pass_at_1_before)},
                        {"pass_at_1_after", measured(pass_at_1_after)},
                        {"reward_first", reward_first},
                        {"reward_last", reward_last},
                        {"mean_changed_fraction", mean_changed_fraction},
                        {"patch_bytes_total", patch_bytes_total},
                        {"dense_bytes_total", dense_bytes_total},
                        {"compression_ratio", compression_ratio},
                        {"bit_identical_every_step", bit_identical_every_step},
                        {"workers", workers},
                        {"wall_seconds", wall_seconds}};
}

size_t reward_window(size_t steps) {
  return std::min<size_t>(5, std::max<size_t>(1, steps / 4));
}

Summary summarize(const std::vector<nlohmann::json>& rows) {
  Summary s;
  s.steps = static_cast<int64_t>(rows.size());
  s.bit_identical_every_step = !rows.empty();
  double changed_sum = 0;
  for (const auto& r : rows) {
    changed_sum += r.value("changed_fraction", 0.0);
    s.patch_bytes_total += r.value("patch_bytes", uint64_t{0});
    s.dense_bytes_total += r.value("dense_bytes", uint64_t{0});
    s.bit_identical_every_step = s.bit_identical_every_step && r.value("bit_identical", false);
  }
  if (!rows.empty()) {
    // One step's reward is a noisy sample (a few dozen prompts): average a short window at each end.
    const size_t n = rows.size(), w = reward_window(n);
    for (size_t i = 0; i < w; ++i) {
      s.reward_first += rows[i].value("reward_mean", 0.0) / static_cast<double>(w);
      s.reward_last += rows[n - w + i].value("reward_mean", 0.0) / static_cast<double>(w);
    }
    s.mean_changed_fraction = changed_sum / static_cast<double>(rows.size());
  }
  s.compression_ratio = s.patch_bytes_total > 0 ? static_cast<double>(s.dense_bytes_total) /
                                                      static_cast<double>(s.patch_bytes_total)
                                                : 0;
  return s;
}

void write_json_atomic(const std::string& path, const nlohmann::json& j) {
  sync::write_file_atomic(path, j.dump(2) + "\n");
}

nlohmann::json read_json(const std::string& path) {
  std::string text = sync::read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": bad JSON: " + e.what());
  }
}

void print_summary(const Summary& summary, const std::string& run_dir) {
  // A run without GRPO steps (an SFT-only or eval-only run) has no patches to compare.
  const bool stepped = summary.steps > 0;
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.1fx less", summary.compression_ratio);
  char before[32] = "not measured", after[32] = "not measured";
  if (summary.pass_at_1_before) std::snprintf(before, sizeof before, "%.3f", *summary.pass_at_1_before);
  if (summary.pass_at_1_after) std::snprintf(after, sizeof after, "%.3f", *summary.pass_at_1_after);
  std::printf(
      "\nrun %s\n  GRPO steps          %lld (%lld worker%s, bit-identical every step: %s)\n"
      "  reward              %.3f -> %.3f\n  Pass@1 (held-out)   %s -> %s\n"
      "  changed fraction    %.3g of BF16 elements per step (mean)\n"
      "  bytes shipped       %.3f MB of patches vs %.3f MB dense BF16 (%s)\n"
      "  wall time           %.1f s\n  report              %s/report.html\n",
      run_dir.c_str(), static_cast<long long>(summary.steps), static_cast<long long>(summary.workers),
      summary.workers == 1 ? "" : "s",
      !stepped                           ? "n/a"
      : summary.bit_identical_every_step ? "yes"
                                         : "NO",
      summary.reward_first, summary.reward_last, before, after, summary.mean_changed_fraction,
      summary.patch_bytes_total / 1e6, summary.dense_bytes_total / 1e6, stepped ? ratio : "no GRPO steps",
      summary.wall_seconds, run_dir.c_str());
}

namespace {
/// Bytes as "1.26 MB".
std::string fmt_mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g MB", bytes / 1e6);
  return buf;
}
}  // namespace

void print_multi_summary(const nlohmann::json& multi) {
  const double sent = multi.value("comm_payload_bytes_total", 0.0);
  std::string line = "  trainer exchange    " + fmt_mb(sent) + " handed to the collectives (rank " +
                     std::to_string(multi.value("rank", 0)) + " of " +
                     std::to_string(multi.value("world_size", 0)) + ", " +
                     multi.value("mode", std::string("?")) + ")";
  auto versus = [&](const char* key, const char* what) {
    const double dense = multi.value(key, 0.0);
    if (dense <= 0 || sent <= 0) return;
    char buf[96];
    std::snprintf(buf, sizeof buf, "; %.1fx less than %s (%s)", dense / sent, what, fmt_mb(dense).c_str());
    line += buf;
  };
  if (multi.value("mode", std::string()) != "ddp") versus("dense_diloco_bytes_equivalent", "dense DiLoCo");
  versus("ddp_bytes_equivalent", "DDP");
  std::printf("%s\n", line.c_str());
}

}  // namespace pulse::app

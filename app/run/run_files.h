// The run directory's files: metrics.jsonl (one JSON object per GRPO step), summary.json (fixed keys) and
// the run's state file. Everything is written atomically (sync/io/atomic_file.h) or append-only with a
// reader that drops a torn last line, so `kill -9` never leaves a file that the resume path cannot read.
//
// Layout of a run directory:
//   config.toml          the resolved config (every key)
//   tokenizer.model      the SentencePiece model trained on the fly (when tokenizer.path = "")
//   metrics.jsonl        per GRPO step, see app/trainer/trainer.cpp for the fields
//   run_state.json       pass_at_1_before, SFT losses: what a resumed run must not recompute
//   checkpoints/step-N/  model/ (HF safetensors + config.json) and state/ (rl::save_train_state)
//   checkpoints/LATEST   the newest complete checkpoint's step number, written last
//   summary.json, report.html
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace pulse::app {

/// runs/<name>-<YYYYmmdd-HHMMSS> (local time) when `dir` is empty, else `dir`.
std::string resolve_run_dir(const std::string& dir, const std::string& name);

/// Append-only metrics.jsonl. Each append writes one line and flushes + fsyncs it.
class MetricsLog {
 public:
  explicit MetricsLog(std::string path);
  void append(const nlohmann::json& row);
  /// Rows in file order; a torn (unparseable) last line is dropped, a bad line elsewhere throws
  /// std::runtime_error naming the file and line.
  static std::vector<nlohmann::json> read(const std::string& path);
  /// Rewrites the file atomically keeping only rows with row["step"] < step (the resume point). Those must
  /// be steps 0 .. step - 1 in order, one row each (the log of the steps the checkpoint includes): a log
  /// cut or edited short of that throws std::runtime_error naming the file and the first missing step,
  /// and the file is left as it was.
  static void truncate_before_step(const std::string& path, int64_t step);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// summary.json: EXACTLY these keys (issue 5).
struct Summary {
  int64_t steps = 0;
  /// Unset: not measured (eval.before / eval.after off, or no held-out problems); null in the JSON, so
  /// that it cannot be read as a measured 0.
  std::optional<double> pass_at_1_before, pass_at_1_after;
  /// Mean step reward over the first / last reward_window(steps) GRPO steps (one step's mean over a few
  /// dozen prompts is noisy; metrics.jsonl keeps every step's value).
  double reward_first = 0, reward_last = 0;
  double mean_changed_fraction = 0;
  uint64_t patch_bytes_total = 0, dense_bytes_total = 0;
  double compression_ratio = 0;  ///< dense_bytes_total / patch_bytes_total
  bool bit_identical_every_step = false;
  int64_t workers = 0;
  double wall_seconds = 0;

  nlohmann::json to_json() const;
};

/// One line under the summary for a multi-trainer run: the bytes this rank handed to the collectives
/// (`multi` of summary.json: comm_payload_bytes_total) against the dense exchanges of the same run
/// (ddp_bytes_equivalent, dense_diloco_bytes_equivalent). Writes to stdout.
void print_multi_summary(const nlohmann::json& multi);

/// The run's closing lines on stdout (steps, reward, Pass@1, changed fraction, bytes, wall time).
void print_summary(const Summary& summary, const std::string& run_dir);

/// Steps averaged for reward_first / reward_last: steps/4 clamped to [1, 5].
size_t reward_window(size_t steps);

/// Summary of the metrics rows (steps, rewards, bytes, changed fraction, bit-identity); the caller fills
/// Pass@1, workers and wall_seconds.
Summary summarize(const std::vector<nlohmann::json>& rows);

/// Writes `j` (pretty, 2 spaces) to `path` atomically.
void write_json_atomic(const std::string& path, const nlohmann::json& j);
/// Parses a JSON file; throws std::runtime_error naming the path.
nlohmann::json read_json(const std::string& path);

}  // namespace pulse::app

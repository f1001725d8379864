// A one-line terminal progress bar with ETA, drawn on stderr only when stderr is a TTY.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace pulse::app {

class ProgressBar {
 public:
  /// total: steps to run in this process; `enabled` false (e.g. --quiet) draws nothing.
  ProgressBar(int64_t first_step, int64_t total_steps, bool enabled);
  /// Redraws after `done_step` (0-based, inclusive) with a short status text.
  void update(int64_t done_step, const std::string& status);
  /// Ends the line.
  void finish();
  bool active() const { return enabled_; }

 private:
  int64_t first_, total_;
  bool enabled_, drawn_ = false;
  std::chrono::steady_clock::time_point t0_;
};

/// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);

}  // namespace pulse::app

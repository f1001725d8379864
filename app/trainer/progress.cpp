#include "app/trainer/progress.h"

#include <unistd.h>

#include <cstdio>

namespace pulse::app {

std::string format_duration(double seconds) {
  if (seconds < 0) seconds = 0;
  auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%llds", s);
  return buf;
}

ProgressBar::ProgressBar(int64_t first_step, int64_t total_steps, bool enabled)
    : first_(first_step),
      total_(total_steps),
      enabled_(enabled && ::isatty(STDERR_FILENO) == 1),
      t0_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t done_step, const std::string& status) {
  if (!enabled_ || total_ <= 0) return;
  int64_t done = done_step + 1;
  double frac = static_cast<double>(done) / static_cast<double>(total_);
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  int64_t done_here = done - first_;
  double eta =
      done_here > 0 ? elapsed / static_cast<double>(done_here) * static_cast<double>(total_ - done) : 0;
  const int width = 28;
  int filled = static_cast<int>(frac * width + 0.5);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r\033[K[%s] %lld/%lld %3.0f%% ETA %s | %s", bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), frac * 100,
               format_duration(eta).c_str(), status.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) std::fputs("\n", stderr);
  drawn_ = false;
}

}  // namespace pulse::app

// The range rules the settings structs' validate() functions state (rl/grpo_config.cpp, optimizer_config.cpp,
// outer_config.cpp, rl/eval.cpp, rl/sft.cpp, app/config_sections.cpp): one wording for every key, so that
// app/config.cpp can name where a bad value came from. Header-only, no LibTorch.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace pulse::rl::rules {

/// The shortest decimal text that reads back to `x`, plain from 1 up ("0.2", "1e-06", "86400", "10").
inline std::string show(double x) {
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  // %g writes 10 as "1e+01": from 1 up, plain decimals read better.
  if (std::string(buf).find('e') != std::string::npos && std::fabs(x) >= 1 && std::fabs(x) < 1e15) {
    for (int prec = 0; prec <= 17; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*f", prec, x);
      if (std::strtod(buf, nullptr) == x) break;
    }
  }
  return buf;
}

/// Throws std::invalid_argument "KEY: PROBLEM", the form every validate() uses: `key` is the TOML key
/// ("rl.eps_low"), `problem` what is wrong ("must be < 1 (got 1)").
[[noreturn]] inline void fail(const std::string& key, const std::string& problem) {
  throw std::invalid_argument(key + ": " + problem);
}

/// An integer setting in [lo, hi]. Throws (fail) "must be >= lo (got v)" or "must be <= hi (got v)".
inline void int_in(const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo) fail(key, "must be >= " + std::to_string(lo) + " (got " + std::to_string(v) + ")");
  if (v > hi) fail(key, "must be <= " + std::to_string(hi) + " (got " + std::to_string(v) + ")");
}

/// Which ends of a real range are excluded.
enum class Ends { Closed, OpenLow, OpenHigh };

/// A finite real setting in [lo, hi], (lo, hi] (OpenLow) or [lo, hi) (OpenHigh). Throws (fail) "must be a
/// finite number", "must be >= lo (got v)", "must be > lo ...", "must be <= hi ..." or "must be < hi ...".
inline void real_in(const std::string& key, double v, double lo, double hi, Ends ends = Ends::Closed) {
  if (!std::isfinite(v)) fail(key, "must be a finite number");
  const bool open_lo = ends == Ends::OpenLow, open_hi = ends == Ends::OpenHigh;
  if (open_lo ? v <= lo : v < lo)
    fail(key, std::string("must be ") + (open_lo ? "> " : ">= ") + show(lo) + " (got " + show(v) + ")");
  if (open_hi ? v >= hi : v > hi)
    fail(key, std::string("must be ") + (open_hi ? "< " : "<= ") + show(hi) + " (got " + show(v) + ")");
}

/// The largest int64 (an unbounded count).
inline constexpr int64_t kMaxInt = INT64_MAX;
/// The largest finite double (an unbounded real: finite and above the lower end is all that is asked).
inline constexpr double kHuge = 1.7976931348623157e308;

}  // namespace pulse::rl::rules

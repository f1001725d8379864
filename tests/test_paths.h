// Where tests find real inputs. PULSE_SHARED_DIR and PULSE_SOURCE_DIR are set by CMakeLists.txt.
#pragma once
#include <string>

namespace pulse::test {

/// Absolute path of a file under ../shared (e.g. "datasets/math500_test.jsonl").
inline std::string shared_path(const std::string& rel) { return std::string(PULSE_SHARED_DIR) + "/" + rel; }

/// Absolute path of a file in the checkout (e.g. "configs/default.toml").
inline std::string source_path(const std::string& rel) { return std::string(PULSE_SOURCE_DIR) + "/" + rel; }

}  // namespace pulse::test

// Temporary folders for single-process tests that are removed again when the test process exits, so that
// a test run leaves nothing under the system temp folder (also after a failed REQUIRE, which ends the
// test case, not the process). The multi-process tests' folders (tests/app/run_test_util.h) are registered
// here too.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace pulse::test {

namespace detail {
/// The folders registered by remove_at_exit; removed (recursively) by the destructor at process exit.
struct TempDirRegistry {
  std::mutex mu;
  std::vector<std::filesystem::path> dirs;
  pid_t owner = ::getpid();  // a forked child that exits normally leaves the parent's folders alone
  ~TempDirRegistry() {
    if (::getpid() != owner) return;
    for (const auto& d : dirs) {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  }
};
inline TempDirRegistry& temp_dir_registry() {
  static TempDirRegistry r;
  return r;
}
}  // namespace detail

/// Removes `dir` (recursively) when the test process exits, also after a failed REQUIRE. Thread safe.
inline void remove_at_exit(const std::filesystem::path& dir) {
  auto& r = detail::temp_dir_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.dirs.push_back(dir);
}

/// An empty folder <temp>/<prefix><tag>_<pid> (emptied if it exists), removed when the process exits.
/// The same tag gives the same folder again, emptied. Thread safe. Throws std::filesystem::filesystem_error
/// when it cannot be made.
inline std::string process_temp_dir(const std::string& prefix, const std::string& tag) {
  const auto p = std::filesystem::temp_directory_path() / (prefix + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  remove_at_exit(p);
  return p.string();
}

}  // namespace pulse::test

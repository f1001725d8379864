// Helpers for the fetch/convert tests: a temp folder removed on every exit path, file I/O, and the MATH
// release layout rebuilt from the derived JSONL rows.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pulse::test {

/// A fresh folder under /tmp, removed (recursively) by the destructor.
class TempFolder {
 public:
  explicit TempFolder(const std::string& tag) {
    static int counter = 0;
    path_ = "/tmp/pulse_fetch_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void spit(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path);
}

/// The first `limit` lines (0 = all) of a JSONL file, each without its "\n".
inline std::vector<std::string> jsonl_lines(const std::string& path, size_t limit = 0) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line) && (limit == 0 || out.size() < limit);) out.push_back(line);
  return out;
}

/// Writes the MATH release file for one derived JSONL row under root: root/MATH/<unique_id> holding
/// {"problem", "level": "Level N" | "Level ?", "type": subject, "solution"} (the release's fields; the
/// answer is not in the release and must be recomputed by the conversion).
inline void write_release_file(const std::string& root, const std::string& jsonl_row) {
  const auto rec = nlohmann::json::parse(jsonl_row);
  const std::string level =
      rec["level"].is_null() ? "Level ?" : "Level " + std::to_string(rec["level"].get<int>());
  nlohmann::json file = {
      {"problem", rec["problem"]}, {"level", level}, {"type", rec["subject"]}, {"solution", rec["solution"]}};
  spit(root + "/MATH/" + rec["unique_id"].get<std::string>(), file.dump(4));
}

}  // namespace pulse::test

// MATH per-problem files -> JSONL (datasets/math_convert.h).
#include "datasets/math_convert.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "datasets/py_json.h"

namespace fs = std::filesystem;

namespace pulse::datasets {
namespace {

struct MathRecord {
  std::string split, subject_dir;
  long long n = 0;
  std::string line;
};

std::string required(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    throw std::runtime_error(where + ": field \"" + key + "\" missing or not a string");
  return it->get<std::string>();
}

PyJsonValue level_value(const std::string& level) {
  static const std::regex re(R"(Level ([0-9]+))");
  std::smatch m;
  if (std::regex_match(level, m, re)) return PyJsonValue::integer(std::stoll(m[1]));
  return PyJsonValue::null();
}

MathRecord convert_one(const TarEntry& f, const std::smatch& m, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f.data);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(where + ": bad JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw std::runtime_error(where + ": not a JSON object");
  MathRecord r{m[1], m[2], std::stoll(m[3]), ""};
  const std::string solution = required(j, "solution", where);
  const auto answer = math_answer_from_solution(solution);
  const std::string unique_id = r.split + "/" + r.subject_dir + "/" + std::string(m[3]) + ".json";
  try {
    r.line = py_json_object({{"problem", PyJsonValue::str(required(j, "problem", where))},
                             {"solution", PyJsonValue::str(solution)},
                             {"answer", answer ? PyJsonValue::str(*answer) : PyJsonValue::null()},
                             {"subject", PyJsonValue::str(required(j, "type", where))},
                             {"level", level_value(required(j, "level", where))},
                             {"unique_id", PyJsonValue::str(unique_id)}});
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(where + ": " + e.what());
  }
  return r;
}

}  // namespace

std::optional<std::string> math_answer_from_solution(const std::string& solution) {
  size_t idx = solution.rfind("\\boxed");
  if (idx == std::string::npos) idx = solution.rfind("\\fbox");
  if (idx == std::string::npos) return std::nullopt;
  int open = 0;
  size_t close = std::string::npos;
  for (size_t i = idx; i < solution.size(); ++i) {
    if (solution[i] == '{') ++open;
    if (solution[i] == '}' && --open == 0) {
      close = i;
      break;
    }
  }
  if (close == std::string::npos) return std::nullopt;
  const std::string boxed = solution.substr(idx, close + 1 - idx);
  for (const char* left : {"\\boxed{", "\\fbox{"}) {
    const size_t n = std::char_traits<char>::length(left);
    if (boxed.compare(0, n, left) == 0) return boxed.substr(n, boxed.size() - n - 1);
  }
  return std::nullopt;
}

std::map<std::string, std::string> math_release_to_jsonl(const std::vector<TarEntry>& files,
                                                         const std::string& source) {
  static const std::regex re(R"((?:^|.*/)(train|test)/([A-Za-z_&]+)/([^/]+)\.json$)");
  std::vector<MathRecord> records;
  for (const auto& f : files) {
    std::smatch m;
    if (!std::regex_match(f.path, m, re)) continue;
    const std::string where = source + ": " + f.path;
    const std::string stem = m[3];
    if (stem.empty() || stem.size() > 12 || !std::all_of(stem.begin(), stem.end(), ::isdigit))
      throw std::runtime_error(where + ": file name is not <number>.json");
    records.push_back(convert_one(f, m, where));
  }
  if (records.empty())
    throw std::runtime_error(source +
                             ": no MATH problem files (expected <split>/<subject>/<n>.json, e.g. "
                             "MATH/test/algebra/1.json)");
  std::sort(records.begin(), records.end(), [](const MathRecord& a, const MathRecord& b) {
    return std::tie(a.split, a.subject_dir, a.n) < std::tie(b.split, b.subject_dir, b.n);
  });
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < records.size(); ++i) {
    const MathRecord& r = records[i];
    if (i > 0 && r.split == records[i - 1].split && r.subject_dir == records[i - 1].subject_dir &&
        r.n == records[i - 1].n)
      throw std::runtime_error(source + ": two files for " + r.split + "/" + r.subject_dir + "/" +
                               std::to_string(r.n) + ".json");
    out[r.split] += r.line + "\n";
  }
  return out;
}

std::vector<TarEntry> read_folder_files(const std::string& dir) {
  std::vector<TarEntry> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) throw std::runtime_error(e.path().string() + ": cannot read");
    out.push_back({fs::relative(e.path(), dir).generic_string(), text.str()});
  }
  return out;
}

}  // namespace pulse::datasets

// JSON-lines dataset loaders with file:line errors.
#include "datasets/loaders.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>

#include "datasets/boxed.h"

namespace pulse::datasets {
namespace {

using nlohmann::json;

std::string base_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A record whose gold cannot be extracted (a data error, LoadReport), as opposed to a broken record.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The longest line read whole: what a record within `limits` can take (6 bytes per character, a JSON
// \uXXXX escape, for the question and twice the answer limit, as MATH has both solution and answer, plus
// 64 KiB for the other fields), and at least 64 MiB, so that a long record is still parsed and refused by
// its field's limit (naming the field); only a longer line is refused by its size, before it is read whole.
size_t max_record_bytes(const TextLimits& limits) {
  const double chars =
      static_cast<double>(limits.max_question_chars) + 2.0 * static_cast<double>(limits.max_answer_chars);
  const double bytes = std::max(6.0 * chars + 65536.0, 64.0 * 1024 * 1024);
  return bytes >= 1e18 ? std::numeric_limits<size_t>::max() : static_cast<size_t>(bytes);
}

// std::getline that stops storing after cap + 1 bytes (the caller refuses such a line) and skips the rest
// of it. Returns false at the end of the input with nothing read.
bool read_line(std::istream& in, std::string& line, size_t cap) {
  line.clear();
  std::streambuf* sb = in.rdbuf();
  bool any = false;
  for (;;) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      if (!any) in.setstate(std::ios::eofbit);
      return any;
    }
    any = true;
    if (c == '\n') return true;
    if (line.size() <= cap) line.push_back(static_cast<char>(c));
  }
}

// Calls `fn(record, line_number)` for every non-blank line; wraps any error with "<path>:<line>: ".
// With a `report`, lines are counted there and a DataError is counted as a data error (the next line is
// then read) unless `throw_data_errors`.
void for_each_record(const std::string& path, const std::function<void(const json&, size_t)>& fn,
                     const TextLimits& limits, LoadReport* report = nullptr, bool throw_data_errors = true) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open dataset file");
  const size_t cap = max_record_bytes(limits);
  std::string line;
  size_t line_no = 0;
  while (read_line(in, line, cap)) {
    ++line_no;
    if (line.size() > cap)
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": record longer than " +
                               std::to_string(cap) +
                               " bytes, more than data.max_question_chars and data.max_answer_chars allow");
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (report) ++report->records;
    try {
      json rec = json::parse(line);
      if (!rec.is_object()) throw std::runtime_error("record is not a JSON object");
      fn(rec, line_no);
    } catch (const DataError& e) {
      if (!report || throw_data_errors)
        throw std::runtime_error(path + ":" + std::to_string(line_no) + ": " + e.what());
      report->add_data_error(line_no, e.what());
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": " + e.what());
    }
  }
}

// Loads a file whose records may be data errors: `parse` returns the record's Problem or throws
// DataError. Fills `*report` (nullptr: the first data error throws); throws when no record is usable.
std::vector<Problem> load_with_report(const std::string& path, LoadReport* report, const TextLimits& limits,
                                      const std::function<Problem(const json&, size_t)>& parse) {
  LoadReport counts;
  counts.path = path;
  std::vector<Problem> out;
  for_each_record(
      path, [&](const json& rec, size_t line) { out.push_back(parse(rec, line)); }, limits, &counts,
      report == nullptr);
  counts.loaded = out.size();
  if (out.empty()) {
    std::string why = counts.records == 0
                          ? "the file has no records"
                          : std::to_string(counts.data_errors) + " of " + std::to_string(counts.records) +
                                " records are data errors; first: " + counts.examples.front();
    throw std::runtime_error(path + ": no valid problems (" + why + ")");
  }
  if (report) *report = std::move(counts);
  return out;
}

std::string required_string(const json& rec, const char* field) {
  auto it = rec.find(field);
  if (it == rec.end()) throw std::runtime_error(std::string("missing field \"") + field + "\"");
  if (!it->is_string()) throw std::runtime_error(std::string("field \"") + field + "\" is not a string");
  return it->get<std::string>();
}

std::string optional_string(const json& rec, const char* field) {
  auto it = rec.find(field);
  if (it == rec.end() || it->is_null()) return "";
  if (!it->is_string()) throw std::runtime_error(std::string("field \"") + field + "\" is not a string");
  return it->get<std::string>();
}

/// Characters (UTF-8 code points: every byte that is not a continuation byte) of `s`.
int64_t utf8_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

/// Throws "field \"F\" has N characters, more than SETTING = M" when `text` is over `limit`.
void check_chars(const std::string& text, const char* field, int64_t limit, const char* setting) {
  if (static_cast<int64_t>(text.size()) <= limit) return;  // bytes >= characters
  const int64_t n = utf8_chars(text);
  if (n > limit)
    throw std::runtime_error(std::string("field \"") + field + "\" has " + std::to_string(n) +
                             " characters, more than " + setting + " = " + std::to_string(limit));
}
void check_question(const std::string& text, const char* field, const TextLimits& limits) {
  check_chars(text, field, limits.max_question_chars, "data.max_question_chars");
}
void check_answer(const std::string& text, const char* field, const TextLimits& limits) {
  check_chars(text, field, limits.max_answer_chars, "data.max_answer_chars");
}

int parse_level(const json& rec) {
  auto it = rec.find("level");
  if (it == rec.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int>();
  if (it->is_string()) {  // original MATH files: "Level 3" ("Level ?" -> 0)
    std::smatch m;
    std::string s = it->get<std::string>();
    static const std::regex re(R"(^Level (\d)$)");
    return std::regex_match(s, m, re) ? std::stoi(m[1].str()) : 0;
  }
  throw std::runtime_error("field \"level\" is neither an integer nor a string");
}

std::string strip_commas(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n\r") - b + 1);
}

// A MATH record's gold: its `answer` when non-blank (checked: balanced braces, any \boxed in it closed
// and non-empty), else the last box of its solution. Throws DataError naming what is missing.
std::string math_gold(const std::string& answer, const std::string& solution) {
  if (!trim(answer).empty()) {
    if (auto problem = reference_answer_problem(answer)) throw DataError("field \"answer\": " + *problem);
    return answer;
  }
  BoxedAnswer b = find_boxed(solution);
  if (b.status == BoxedStatus::Found) return b.content;
  throw DataError(std::string("no reference answer (no \"answer\" field; solution: ") +
                  boxed_status_reason(b.status) + ")");
}

}  // namespace

std::string mbpp_prompt(const std::string& text, const std::vector<std::string>& tests) {
  std::string p = text + " Your code should pass these tests:\n\n";
  for (const auto& t : tests) p += t + "\n";
  return p;
}

void LoadReport::add_data_error(size_t line, const std::string& reason) {
  ++data_errors;
  if (examples.size() < kMaxExamples) examples.push_back(path + ":" + std::to_string(line) + ": " + reason);
}

std::string LoadReport::summary() const {
  if (data_errors == 0) return path + ": " + std::to_string(records) + " records, no data errors";
  return path + ": " + std::to_string(data_errors) + " of " + std::to_string(records) +
         " records are data errors (skipped, no usable reference answer); first: " + examples.front();
}

std::vector<Problem> load_math_jsonl(const std::string& path, LoadReport* report, const TextLimits& limits) {
  std::string file = base_name(path);
  return load_with_report(path, report, limits, [&](const json& rec, size_t line) {
    Problem p;
    p.kind = TaskKind::Math;
    p.question = required_string(rec, "problem");
    check_question(p.question, "problem", limits);
    p.solution = required_string(rec, "solution");
    check_answer(p.solution, "solution", limits);
    const std::string answer = optional_string(rec, "answer");
    check_answer(answer, "answer", limits);
    p.answer = math_gold(answer, p.solution);
    p.subject = optional_string(rec, "subject");
    if (p.subject.empty()) p.subject = optional_string(rec, "type");
    p.level = parse_level(rec);
    p.id = optional_string(rec, "unique_id");
    if (p.id.empty()) p.id = file + ":" + std::to_string(line);
    return p;
  });
}

std::vector<Problem> load_mbpp_jsonl(const std::string& path, const TextLimits& limits) {
  std::vector<Problem> out;
  for_each_record(
      path,
      [&](const json& rec, size_t) {
        Problem p;
        p.kind = TaskKind::Code;
        std::string text = required_string(rec, "text");
        check_question(text, "text", limits);
        p.solution = required_string(rec, "code");
        check_answer(p.solution, "code", limits);
        auto tl = rec.find("test_list");
        if (tl == rec.end() || !tl->is_array() || tl->empty())
          throw std::runtime_error("field \"test_list\" must be a non-empty array of assert strings");
        for (const auto& t : *tl) {
          if (!t.is_string()) throw std::runtime_error("field \"test_list\" holds a non-string");
          p.tests.push_back(t.get<std::string>());
        }
        std::string all_tests;
        for (const auto& t : p.tests) all_tests += t;
        check_answer(all_tests, "test_list", limits);
        p.test_setup_code = optional_string(rec, "test_setup_code");
        check_answer(p.test_setup_code, "test_setup_code", limits);
        auto id = rec.find("task_id");
        if (id == rec.end() || !id->is_number_integer())
          throw std::runtime_error("field \"task_id\" must be an integer");
        p.id = "mbpp/" + std::to_string(id->get<int64_t>());
        p.question = mbpp_prompt(text, p.tests);
        out.push_back(std::move(p));
      },
      limits);
  return out;
}

std::vector<Problem> load_gsm8k_jsonl(const std::string& path, LoadReport* report, const TextLimits& limits) {
  std::string file = base_name(path);
  static const std::regex calc(R"(<<[^>]*>>)");
  return load_with_report(path, report, limits, [&](const json& rec, size_t line) {
    Problem p;
    p.kind = TaskKind::Math;
    p.question = required_string(rec, "question");
    check_question(p.question, "question", limits);
    std::string answer = required_string(rec, "answer");
    check_answer(answer, "answer", limits);
    size_t mark = answer.rfind("####");
    if (mark == std::string::npos) throw DataError("field \"answer\" has no \"#### <number>\" line");
    p.answer = strip_commas(trim(answer.substr(mark + 4)));
    if (p.answer.empty()) throw DataError("field \"answer\" has an empty \"####\" answer");
    std::string work = std::regex_replace(trim(answer.substr(0, mark)), calc, "");
    p.solution = work + "\n\\boxed{" + p.answer + "}";
    p.subject = "gsm8k";
    p.id = file + ":" + std::to_string(line);
    return p;
  });
}

}  // namespace pulse::datasets

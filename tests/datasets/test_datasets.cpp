// Dataset loaders on the real files, bad-line errors, synthetic generators and the seeded split (no
// LibTorch; that the reference solutions grade correct is tests/rl/test_dataset_grading.cpp).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "datasets/boxed.h"
#include "datasets/loaders.h"
#include "datasets/split.h"
#include "datasets/synthetic.h"
#include "tests/test_paths.h"

using namespace pulse::datasets;
using pulse::test::shared_path;

namespace {
std::string temp_file(const std::string& name, const std::string& text) {
  std::string path = "/tmp/pulse_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}
}  // namespace

TEST_CASE("MATH-500 loads with subjects, levels and answers", "[datasets]") {
  auto ps = load_math_jsonl(shared_path("datasets/math500_test.jsonl"));
  REQUIRE(ps.size() == 500);
  std::map<std::string, int> subjects;
  std::map<int, int> levels;
  for (const auto& p : ps) {
    CHECK(p.kind == TaskKind::Math);
    CHECK_FALSE(p.answer.empty());
    subjects[p.subject]++;
    levels[p.level]++;
  }
  CHECK(subjects["Algebra"] == 124);
  CHECK(subjects["Counting & Probability"] == 38);
  CHECK(levels[1] == 43);
  CHECK(levels[5] == 134);
  CHECK(ps[0].id.rfind("test/", 0) == 0);
}

namespace {
// The data errors of a MATH file counted independently of the loader: records with no "answer" whose
// solution's last "\boxed" is not followed by a closed, non-blank "{...}" (or by " <text>").
size_t math_data_errors_by_scan(const std::string& path, std::vector<size_t>* lines) {
  std::ifstream in(path);
  REQUIRE(in);
  std::string text;
  size_t line = 0, errors = 0;
  while (std::getline(in, text)) {
    ++line;
    auto rec = nlohmann::json::parse(text);
    if (rec.contains("answer") && rec["answer"].is_string() &&
        rec["answer"].get<std::string>().find_first_not_of(" ") != std::string::npos)
      continue;
    std::string sol = rec["solution"].get<std::string>();
    size_t at = sol.rfind("\\boxed");
    bool ok = false;
    if (at != std::string::npos && at + 6 < sol.size() && sol[at + 6] == ' ') {
      ok = sol.find_first_not_of(" $.\n", at + 6) != std::string::npos;
    } else if (at != std::string::npos && at + 6 < sol.size() && sol[at + 6] == '{') {
      int depth = 0;
      for (size_t j = at + 6; j < sol.size(); ++j) {
        if (sol[j] == '{') ++depth;
        if (sol[j] == '}' && --depth == 0) {
          ok = sol.substr(at + 7, j - at - 7).find_first_not_of(" ") != std::string::npos;
          break;
        }
      }
    }
    if (!ok) {
      ++errors;
      if (lines) lines->push_back(line);
    }
  }
  return errors;
}
}  // namespace

TEST_CASE("MATH train: missing answers come from the solution's box", "[datasets]") {
  std::string path = shared_path("datasets/math_train.jsonl");
  LoadReport report;
  auto ps = load_math_jsonl(path, &report);
  std::vector<size_t> lines;
  size_t expected = math_data_errors_by_scan(path, &lines);
  WARN(report.summary() << " (independent scan: " << expected << ")");
  CHECK(report.records == 7500);
  CHECK(report.data_errors == expected);
  CHECK(report.loaded == ps.size());
  CHECK(ps.size() + report.data_errors == 7500);
  REQUIRE(report.examples.size() == std::min(expected, LoadReport::kMaxExamples));
  for (size_t i = 0; i < report.examples.size(); ++i) {
    INFO(report.examples[i]);
    CHECK(report.examples[i].rfind(path + ":" + std::to_string(lines[i]) + ": ", 0) == 0);
    CHECK(report.examples[i].find("empty \\boxed{}") != std::string::npos);  // number_theory/7115, 7117
  }
  CHECK_THROWS_WITH(load_math_jsonl(path), Catch::Contains(path + ":" + std::to_string(lines.at(0)) + ":"));
  int boxed_space = 0;  // train/algebra/24014 and 25040 have answer null and "\boxed 2" / "\boxed 9"
  for (const auto& p : ps) {
    REQUIRE_FALSE(p.answer.empty());
    if (p.id == "train/algebra/24014.json" || p.id == "train/algebra/25040.json")
      boxed_space += p.answer.size() == 1;
  }
  CHECK(boxed_space == 2);
  std::string tmp =
      temp_file("noanswer.jsonl",
                "{\"problem\": \"1+1?\", \"solution\": \"It is \\\\boxed{2}.\", \"level\": \"Level 2\","
                " \"type\": \"Algebra\"}\n");
  auto one = load_math_jsonl(tmp);
  REQUIRE(one.size() == 1);
  CHECK(one[0].answer == "2");
  CHECK(one[0].level == 2);
  CHECK(one[0].subject == "Algebra");
  std::remove(tmp.c_str());
}

TEST_CASE("MATH test and MATH-500: data errors as counted independently", "[datasets]") {
  for (const char* rel : {"datasets/math_test.jsonl", "datasets/math500_test.jsonl"}) {
    std::string path = shared_path(rel);
    LoadReport report;
    auto ps = load_math_jsonl(path, &report);
    size_t expected = math_data_errors_by_scan(path, nullptr);
    WARN(report.summary() << " (independent scan: " << expected << ")");
    CHECK(report.data_errors == expected);
    CHECK(report.examples.size() == std::min(expected, LoadReport::kMaxExamples));
    CHECK(ps.size() + report.data_errors == report.records);
    CHECK(report.loaded == ps.size());
  }
}

TEST_CASE("golds that cannot be extracted are data errors with file:line", "[datasets]") {
  auto rec = [](const std::string& solution, const std::string& answer_json = "") {
    nlohmann::json j = {{"problem", "p"}, {"solution", solution}};
    if (!answer_json.empty()) j["answer"] = nlohmann::json::parse(answer_json);
    return j.dump() + "\n";
  };
  std::string text = rec("It is \\boxed{3}.") +                 // 1: ok
                     rec("It is \\boxed{3") +                   // 2: unclosed
                     rec("first \\boxed{2}, then \\boxed{3") +  // 3: last box unclosed: not 2
                     "\n" +                                     // 4: blank, not a record
                     rec("It is \\boxed{}.") +                  // 5: empty
                     rec("It is \\boxed{  }.") +                // 6: blank
                     rec("It is 3.") +                          // 7: no box
                     rec("It is \\boxed") +                     // 8: no argument
                     rec("It is 3.", "null") +                  // 9: answer null, no box
                     rec("It is 3.", "\"\\\\boxed{3\"") +       // 10: answer holds an unclosed box
                     rec("It is 3.", "\"\\\\frac{1}{2\"") +     // 11: answer has unbalanced braces
                     rec("It is \\boxed{\\{1,2\\}}.") +         // 12: ok, escaped braces
                     rec("x", "\"7\"") +                        // 13: ok: the answer field, no box needed
                     rec("It is $\\boxed 5$.");                 // 14: ok: "\boxed 5"
  std::string path = temp_file("golds.jsonl", text);
  LoadReport report;
  auto ps = load_math_jsonl(path, &report);
  REQUIRE(ps.size() == 4);
  CHECK(ps[0].answer == "3");
  CHECK(ps[1].answer == "\\{1,2\\}");
  CHECK(ps[2].answer == "7");
  CHECK(ps[3].answer == "5");
  for (const auto& p : ps) CHECK(p.answer.find("\\boxed") == std::string::npos);
  CHECK(report.records == 13);
  CHECK(report.loaded == 4);
  CHECK(report.data_errors == 9);
  REQUIRE(report.examples.size() == LoadReport::kMaxExamples);
  const std::vector<std::pair<int, std::string>> want = {{2, "unclosed \\boxed{"},
                                                         {3, "unclosed \\boxed{"},
                                                         {5, "empty \\boxed{}"},
                                                         {6, "empty \\boxed{}"},
                                                         {7, "no \\boxed{}"}};
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(report.examples[i]);
    CHECK(report.examples[i].rfind(path + ":" + std::to_string(want[i].first) + ": ", 0) == 0);
    CHECK(report.examples[i].find(want[i].second) != std::string::npos);
  }
  CHECK(report.summary().find("9 of 13 records are data errors") != std::string::npos);
  CHECK(report.summary().find(report.examples[0]) != std::string::npos);
  // Without a report the first data error throws, naming file and line.
  CHECK_THROWS_WITH(load_math_jsonl(path), Catch::Contains(path + ":2: ") && Catch::Contains("unclosed"));
  // The answer field's own checks, one record each.
  std::string bad_answer = temp_file("bad_answer.jsonl", rec("x", "\"\\\\boxed{3\"") + rec("y", "\"1\""));
  LoadReport r2;
  CHECK(load_math_jsonl(bad_answer, &r2).size() == 1);
  REQUIRE(r2.examples.size() == 1);
  CHECK_THAT(r2.examples[0], Catch::Contains(bad_answer + ":1: ") && Catch::Contains("answer"));
  // A file with no valid problem is an error naming the file, with or without a report.
  std::string none = temp_file("none.jsonl", rec("It is \\boxed{3") + rec("no box"));
  LoadReport r3;
  CHECK_THROWS_WITH(load_math_jsonl(none, &r3), Catch::Contains(none + ": no valid problems") &&
                                                    Catch::Contains("2 of 2") &&
                                                    Catch::Contains(none + ":1: "));
  std::string empty = temp_file("empty.jsonl", "\n\n");
  CHECK_THROWS_WITH(load_math_jsonl(empty, &r3), Catch::Contains(empty + ": no valid problems"));
  // GSM8K: a missing or empty "####" answer is a data error too.
  std::string gsm = temp_file("gsm_errors.jsonl",
                              "{\"question\": \"q\", \"answer\": \"no marker\"}\n"
                              "{\"question\": \"q\", \"answer\": \"so\\n#### \"}\n"
                              "{\"question\": \"q\", \"answer\": \"so\\n#### 1,234\"}\n");
  LoadReport r4;
  auto g = load_gsm8k_jsonl(gsm, &r4);
  REQUIRE(g.size() == 1);
  CHECK(g[0].answer == "1234");
  CHECK(r4.data_errors == 2);
  REQUIRE(r4.examples.size() == 2);
  CHECK_THAT(r4.examples[0], Catch::Contains(gsm + ":1: "));
  CHECK_THAT(r4.examples[1], Catch::Contains(gsm + ":2: "));
  for (const auto& p : {path, bad_answer, none, empty, gsm}) std::remove(p.c_str());
}

TEST_CASE("find_boxed tells why there is no gold", "[datasets]") {
  CHECK(find_boxed("a \\boxed{3} b").status == BoxedStatus::Found);
  CHECK(find_boxed("a \\boxed{3} b").content == "3");
  CHECK(find_boxed("\\boxed{3").status == BoxedStatus::Unclosed);
  CHECK(find_boxed("\\boxed{1} \\boxed{3").status == BoxedStatus::Unclosed);
  CHECK(find_boxed("\\boxed{}").status == BoxedStatus::Empty);
  CHECK(find_boxed("\\boxed $").status == BoxedStatus::Empty);
  CHECK(find_boxed("none").status == BoxedStatus::NoBox);
  CHECK(find_boxed("end \\boxed").status == BoxedStatus::NoArgument);
  CHECK_FALSE(extract_boxed("\\boxed{3").has_value());
  CHECK(extract_boxed("\\boxed{}") == std::optional<std::string>(""));  // graded "empty_answer"
  CHECK_FALSE(extract_boxed("\\boxed $").has_value());
  CHECK(braces_balanced("\\frac{1}{2}"));
  CHECK(braces_balanced("\\{1,2\\}"));
  CHECK_FALSE(braces_balanced("\\frac{1}{2"));
  CHECK_FALSE(braces_balanced("}{"));
}

TEST_CASE("bad lines name the file and line", "[datasets]") {
  std::string path =
      temp_file("bad.jsonl", "{\"problem\": \"a\", \"solution\": \"\\\\boxed{1}\"}\n{not json\n");
  try {
    load_math_jsonl(path);
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find(path + ":2:") != std::string::npos);
  }
  std::string missing = temp_file("missing.jsonl", "\n{\"text\": \"t\", \"code\": \"c\", \"task_id\": 1}\n");
  try {
    load_mbpp_jsonl(missing);
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find(missing + ":2:") != std::string::npos);
    CHECK(std::string(e.what()).find("test_list") != std::string::npos);
  }
  std::string gsm = temp_file("gsm.jsonl", "{\"question\": \"q\", \"answer\": \"no marker\"}\n");
  CHECK_THROWS_WITH(load_gsm8k_jsonl(gsm), Catch::Contains(gsm + ":1:"));
  CHECK_THROWS_WITH(load_math_jsonl("/nonexistent/file.jsonl"), Catch::Contains("/nonexistent/file.jsonl"));
  for (const auto& p : {path, missing, gsm}) std::remove(p.c_str());
}

TEST_CASE("MBPP loads with the asserts in the prompt", "[datasets]") {
  auto ps = load_mbpp_jsonl(shared_path("datasets/mbpp.jsonl"));
  REQUIRE(ps.size() == 974);
  CHECK(ps[0].id == "mbpp/1");
  CHECK(ps[973].id == "mbpp/974");
  for (const auto& p : ps) {
    REQUIRE(p.tests.size() == 3);
    for (const auto& t : p.tests) CHECK(p.question.find(t) != std::string::npos);
    CHECK(p.kind == TaskKind::Code);
  }
  CHECK(ps[0].question.find("Your code should pass these tests:") != std::string::npos);
}

TEST_CASE("GSM8K answers are the #### numbers without commas", "[datasets]") {
  auto ps = load_gsm8k_jsonl(shared_path("datasets/gsm8k_test.jsonl"));
  REQUIRE(ps.size() == 1319);
  CHECK(ps[0].answer == "18");  // Janet's ducks: (16 - 3 - 4) * 2
  for (const auto& p : ps) {
    CHECK(p.answer.find(',') == std::string::npos);
    CHECK(p.solution.find("<<") == std::string::npos);
    CHECK(extract_boxed(p.solution) == p.answer);  // the rewritten solution ends in the boxed answer
  }
  auto train = load_gsm8k_jsonl(shared_path("datasets/gsm8k_train.jsonl"));
  CHECK(train.size() == 7473);
}

TEST_CASE("synthetic math: graded levels, short boxed solutions, deterministic", "[datasets][synthetic]") {
  auto a = synthetic_math(500, 7, 5);
  auto b = synthetic_math(100, 7, 5);
  auto c = synthetic_math(100, 8, 5);
  REQUIRE(a.size() == 500);
  int differs = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    CHECK(a[i].question == b[i].question);  // prefix-stable
    differs += a[i].question != c[i].question;
  }
  CHECK(differs > 50);
  std::map<int, int> levels;
  for (const auto& p : a) {
    levels[p.level]++;
    INFO(p.question << " -> " << p.solution);
    CHECK(extract_boxed(p.solution) == p.answer);
    CHECK(p.solution.size() < 100);
    CHECK(p.kind == TaskKind::Math);
  }
  CHECK(levels.size() == 5);
  CHECK(levels[1] == 100);
  auto l1 = synthetic_math(3, 1, 1);
  CHECK(l1[0].question.find('+') != std::string::npos);
  for (const auto& p : synthetic_math(30, 1, 3)) CHECK(p.level <= 3);
  // Level 4 is a linear equation whose boxed answer solves it.
  for (const auto& p : synthetic_math(20, 3, 4))
    if (p.level == 4) CHECK(p.question.rfind("Solve for x:", 0) == 0);
}

TEST_CASE("synthetic code: MBPP-format tasks, deterministic", "[datasets][synthetic]") {
  auto ps = synthetic_code(36, 11);
  REQUIRE(ps.size() == 36);
  std::set<std::string> kinds;
  for (const auto& p : ps) {
    CHECK(p.kind == TaskKind::Code);
    CHECK(p.tests.size() == 3);
    CHECK(p.question.find(p.tests[0]) != std::string::npos);
    kinds.insert(p.solution.substr(0, p.solution.find('(')));
    CHECK(p.solution.rfind("def " + p.subject + "(", 0) == 0);  // subject = the function's name
    CHECK(p.tests[0].rfind("assert " + p.subject + "(", 0) == 0);
  }
  CHECK(kinds.size() >= 8);
  CHECK(synthetic_code(5, 11)[4].tests == ps[4].tests);
}

TEST_CASE("split is seeded, disjoint and stable under reordering", "[datasets][split]") {
  auto ps = synthetic_math(1000, 5, 3);
  auto s = split_problems(ps, 0.2, 42);
  CHECK(s.train.size() + s.held_out.size() == 1000);
  CHECK(s.held_out.size() > 150);
  CHECK(s.held_out.size() < 250);
  std::set<std::string> held;
  for (const auto& p : s.held_out) held.insert(p.id);
  for (const auto& p : s.train) CHECK(held.count(p.id) == 0);
  auto again = split_problems(ps, 0.2, 42);
  CHECK(again.held_out.size() == s.held_out.size());
  std::vector<Problem> reversed(ps.rbegin(), ps.rend());
  auto r = split_problems(reversed, 0.2, 42);
  std::set<std::string> held_r;
  for (const auto& p : r.held_out) held_r.insert(p.id);
  CHECK(held_r == held);
  auto other = split_problems(ps, 0.2, 43);
  std::set<std::string> held_o;
  for (const auto& p : other.held_out) held_o.insert(p.id);
  CHECK(held_o != held);
  CHECK(split_problems(ps, 0.0, 1).held_out.empty());
  CHECK(split_problems(ps, 1.0, 1).train.empty());
  CHECK_THROWS_AS(split_problems(ps, 1.5, 1), std::invalid_argument);
}

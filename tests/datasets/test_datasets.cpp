// Dataset loaders on the real files, bad-line errors, synthetic generators and the seeded split (no
// LibTorch; that the reference solutions grade correct is tests/rl/test_dataset_grading.cpp).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>

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

TEST_CASE("MATH train: missing answers come from the solution's box", "[datasets]") {
  auto ps = load_math_jsonl(shared_path("datasets/math_train.jsonl"));
  CHECK(ps.size() == 7498);  // 7500 minus the 2 solutions ending in an empty \boxed{}
  int boxed_space = 0;       // train/algebra/24014 and 25040 have answer null and "\boxed 2" / "\boxed 9"
  for (const auto& p : ps) {
    REQUIRE_FALSE(p.answer.empty());
    if (p.id == "train/algebra/24014.json" || p.id == "train/algebra/25040.json")
      boxed_space += p.answer.size() == 1;
  }
  CHECK(boxed_space == 2);
  std::string path =
      temp_file("noanswer.jsonl",
                "{\"problem\": \"1+1?\", \"solution\": \"It is \\\\boxed{2}.\", \"level\": \"Level 2\","
                " \"type\": \"Algebra\"}\n");
  auto one = load_math_jsonl(path);
  REQUIRE(one.size() == 1);
  CHECK(one[0].answer == "2");
  CHECK(one[0].level == 2);
  CHECK(one[0].subject == "Algebra");
  std::remove(path.c_str());
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

// The datasets' reference solutions earn full reward: GSM8K's rewritten solutions and the synthetic math
// solutions under the MATH grader, the synthetic code programs in the MBPP sandbox (and broken ones fail).
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "datasets/loaders.h"
#include "datasets/synthetic.h"
#include "rl/grader.h"
#include "rl/math_grader.h"
#include "rl/mbpp_sandbox.h"
#include "tests/test_paths.h"

using namespace pulse::rl;
namespace datasets = pulse::datasets;

TEST_CASE("GSM8K rewritten solutions grade correct", "[datasets][grader]") {
  auto ps = datasets::load_gsm8k_jsonl(pulse::test::shared_path("datasets/gsm8k_test.jsonl"));
  REQUIRE(ps.size() == 1319);
  for (const auto& p : ps) CHECK(grade_math(p.solution, p.answer).score == 1.0);
}

TEST_CASE("synthetic math solutions grade correct", "[datasets][synthetic][grader]") {
  for (const auto& p : datasets::synthetic_math(500, 7, 5)) {
    INFO(p.question << " -> " << p.solution);
    CHECK(grade_math(p.solution, p.answer).score == 1.0);
  }
}

TEST_CASE("synthetic code: reference programs pass, wrong ones fail", "[datasets][synthetic][mbpp]") {
  REQUIRE(sandbox_available());
  auto ps = datasets::synthetic_code(36, 11);
  REQUIRE(ps.size() == 36);
  std::vector<const Problem*> ptrs;
  std::vector<std::string> refs, wrong;
  for (const auto& p : ps) {
    ptrs.push_back(&p);
    refs.push_back("```python\n" + p.solution + "```");
    wrong.push_back(p.solution + "\n" + p.solution.substr(4, p.solution.find('(') - 4) +
                    " = lambda *a: None\n");
  }
  auto ok = grade_batch(ptrs, refs, 2);
  auto bad = grade_batch(ptrs, wrong, 2);
  for (size_t i = 0; i < ps.size(); ++i) {
    INFO(ps[i].solution << ps[i].tests[0] << " -> " << ok[i].reason);
    CHECK(ok[i].score == 1.0);
    CHECK(bad[i].score == 0.0);
  }
}

TEST_CASE("synthetic code: the weak teacher's demonstrations fail, the tasks stay the same",
          "[datasets][synthetic][mbpp]") {
  REQUIRE(sandbox_available());
  const auto clean = datasets::synthetic_code(120, 11);
  const auto all_wrong = datasets::synthetic_code(120, 11, 1.0);
  const auto half = datasets::synthetic_code(2000, 11, 0.5);
  std::vector<const Problem*> ptrs;
  std::vector<std::string> demos;
  std::set<std::string> kinds;
  for (size_t i = 0; i < clean.size(); ++i) {
    const Problem& p = all_wrong[i];
    CHECK(clean[i].demonstration.empty());
    CHECK(p.question == clean[i].question);  // only the SFT target changes
    CHECK(p.tests == clean[i].tests);
    CHECK(p.solution == clean[i].solution);
    REQUIRE(!p.demonstration.empty());
    CHECK(p.demonstration != p.solution);
    ptrs.push_back(&p);
    demos.push_back(p.demonstration);
    kinds.insert(p.subject);
  }
  CHECK(kinds.size() == 12);  // every template's wrong program is graded
  auto res = grade_batch(ptrs, demos, 2);
  for (size_t i = 0; i < ptrs.size(); ++i) {
    INFO(ptrs[i]->demonstration << ptrs[i]->tests[0] << " -> " << res[i].reason);
    CHECK(res[i].score == 0.0);
    CHECK(res[i].reason == "assert_failed");
  }
  int64_t wrong = 0;
  for (const auto& p : half) wrong += !p.demonstration.empty();
  CHECK(wrong > 900);  // 1000 expected; sd 22
  CHECK(wrong < 1100);
}

// The datasets' reference solutions earn full reward: GSM8K's rewritten solutions and the synthetic math
// solutions under the MATH grader, the synthetic code programs in the MBPP sandbox (and broken ones fail).
#include <catch2/catch.hpp>

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

// Regression: a very long boxed answer (or reference) must be graded 0, not crash the process.
// libstdc++'s std::regex matches recursively, one stack frame chain per input character, so the
// normalizers overflowed an 8 MB stack at ~20k characters (segfault in `pulse reward math`).
#include <catch2/catch.hpp>

#include <string>

#include "rl/math_grader.h"

using namespace pulse::rl;

TEST_CASE("an over-long boxed answer scores 0 without crashing", "[grader][math][regress]") {
  const std::string digits(200000, '1');
  std::string words;
  for (int i = 0; i < 100000; ++i) words += "x ";
  for (bool strict : {false, true}) {
    auto r = grade_math("\\boxed{" + digits + "}", "1", strict);
    CHECK(r.score == 0.0);
    CHECK(r.reason == "answer_too_long");
    CHECK_FALSE(math_equal(words, "1", strict));
    CHECK_FALSE(math_equal("1", digits, strict));
    CHECK_FALSE(math_equal(digits, digits + "2", strict));
  }
}

TEST_CASE("answers of ordinary length still grade after the length cap", "[grader][math][regress]") {
  const std::string n(300, '7');  // long but legitimate: a 300-digit integer
  CHECK(grade_math("\\boxed{" + n + "}", n).score == 1.0);
  CHECK(grade_math("\\boxed{" + n + "}", n + "1").score == 0.0);
  CHECK(grade_math("\\boxed{\\frac{1}{2}}", "0.5").score == 1.0);
}

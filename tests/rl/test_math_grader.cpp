// MATH grader: extraction, normalization rules, value tiers, strict (PRM800K) mode, and MATH-500.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "rl/math_grader.h"
#include "rl/math_normalize.h"
#include "rl/math_value.h"
#include "tests/test_paths.h"

using namespace pulse::rl;

TEST_CASE("extract_boxed finds the last boxed answer", "[grader][math]") {
  CHECK(extract_boxed("so \\boxed{1} then \\boxed{\\frac{1}{2}}.") ==
        std::optional<std::string>("\\frac{1}{2}"));
  CHECK(extract_boxed("$\\boxed{\\{1,2\\}}$") == std::optional<std::string>("\\{1,2\\}"));
  CHECK(extract_boxed("nested \\boxed{a^{b^{c}}} end") == std::optional<std::string>("a^{b^{c}}"));
  CHECK(extract_boxed("the answer is $\\boxed 5$.") == std::optional<std::string>("5"));
  CHECK(extract_boxed("\\fbox{42}") == std::optional<std::string>("42"));
  CHECK(extract_boxed("\\fbox{1} and later \\boxed{2}") == std::optional<std::string>("2"));
  CHECK_FALSE(extract_boxed("no answer here").has_value());
  CHECK_FALSE(extract_boxed("\\boxed{unclosed {").has_value());
}

TEST_CASE("normalizations follow Hendrycks, Minerva and PRM800K", "[grader][math]") {
  CHECK(hendrycks_strip("\\dfrac{1}{2}") == "\\frac{1}{2}");
  CHECK(hendrycks_strip("0.5") == "\\frac{1}{2}");
  CHECK(hendrycks_strip("k = 3") == "3");
  CHECK(hendrycks_strip("\\left( 1, 2 \\right)") == "(1,2)");
  CHECK(hendrycks_strip("10\\text{ cm}") == "10");
  CHECK(hendrycks_strip("\\frac12") == "\\frac{1}{2}");
  CHECK(hendrycks_strip("3/4") == "\\frac{3}{4}");
  CHECK_THROWS(hendrycks_strip("1\\text{ a}\\text{ b}"));
  CHECK(mathd_normalize("\\text{ 1\\text{ a}\\text{ b}}") != "");  // error falls back to the input
  CHECK(minerva_normalize("x = 1,000") == "1000");
  CHECK(minerva_normalize("5 \\text{ dollars}") == "5");
  CHECK(minerva_normalize("\\frac12") == "\\frac{1}{2}");
  CHECK(prm_normalize("\\text{5 cm}") == "5");
  CHECK(prm_normalize("\\frac{1}{2}") == "1/2");
  CHECK(prm_normalize("3\\frac{1}{2}") == "3+1/2");
  CHECK(prm_normalize("1,000") == "1000");
  CHECK(normalize_answer("$\\dfrac{3}{4}$.") == "\\frac{3}{4}");
  CHECK(normalize_answer("x \\in [2, 5)") == "[2,5)");
  CHECK(normalize_answer("2.50") == "2.5");
  CHECK(normalize_answer(".5") == "0.5");
  CHECK(normalize_answer("11,\\! 111") == "11111");
}

TEST_CASE("exact values have one normal form", "[grader][math]") {
  auto v = [](const std::string& s) { return parse_math_value(s); };
  REQUIRE(v("\\frac{\\sqrt{12}}{3}"));
  CHECK(v("\\frac{\\sqrt{12}}{3}")->str() == "2/3*sqrt(3)");
  CHECK(*v("\\frac{1}{1+\\sqrt{2}}") == *v("\\sqrt{2}-1"));
  CHECK(*v("3\\frac{1}{2}") == *v("7/2"));
  CHECK(*v("-3\\frac{1}{2}") == *v("-3.5"));
  CHECK(*v("(x+1)^2") == *v("x^2+2x+1"));
  CHECK(*v("\\frac{\\pi}{6}") == *v("\\pi/6"));
  CHECK(*v("\\sqrt[3]{27}") == *v("3"));
  CHECK_FALSE(v("odd").has_value());      // a word, not a product of letters
  CHECK_FALSE(v("\\sin x").has_value());  // functions are not values here
  CHECK_FALSE(v("1/0").has_value());
  CHECK_FALSE(v("99999999999999999999999999999999999999999999").has_value());  // overflow
}

TEST_CASE("lenient equivalence covers the issue's rules", "[grader][math]") {
  const std::vector<std::pair<std::string, std::string>> equal = {
      {"\\dfrac{3}{4}", "\\frac34"},
      {"\\tfrac{3}{4}", "0.75"},
      {"\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\pi/2)"},
      {"10\\text{ cm}^2", "10"},
      {"864 \\mbox{ inches}^2", "864"},
      {"30^\\circ", "30"},
      {"25\\%", "25"},
      {"x = 5", "5"},
      {"1,000,000", "1000000"},
      {"2.50", "2.5"},
      {"3.0", "3"},
      {"3\\frac{1}{2}", "\\frac72"},
      {"7 3/4", "31/4"},
      {"\\frac{\\sqrt{12}}{3}", "\\frac{2\\sqrt3}{3}"},
      {"\\{1\\pm\\sqrt{5},-2\\}", "-2, 1-\\sqrt5, 1+\\sqrt 5"},
      {"\\{1,2\\}", "\\{2,1\\}"},
      {"(-\\infty, 2) \\cup (3, \\infty)", "(3,\\infty)\\cup(-\\infty,2)"},
      {"\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", "\\begin{pmatrix}0.2\\\\-3.6\\end{pmatrix}"},
      {"\\text{Evelyn}", "evelyn"},
      {"\\text{(C)}", "C"},
      {"5x - 7y + 11z + 4 = 0", "-5x+7y-11z-4=0"},
      {"\\$18.90", "18.9"},
      {"\\frac{2}{4}", "\\frac12"},
      {"2x+3", "3+2x"},
  };
  for (const auto& [a, b] : equal) {
    INFO(a << " vs " << b);
    CHECK(math_equal(a, b));
    CHECK(math_equal(b, a));
  }
  const std::vector<std::pair<std::string, std::string>> unequal = {
      {"[2,5)", "(2,5)"}, {"(1,2)", "(2,1)"},
      {"1/3", "0.333"},   {"odd", "dod"},
      {"2", "-2"},        {"\\sqrt{2}", "1.414"},
      {"x+1", "x-1"},     {"", ""},
      {"5", "50"},        {"\\frac{1}{2}", "\\frac{1}{3}"},
  };
  for (const auto& [a, b] : unequal) {
    INFO(a << " vs " << b);
    CHECK_FALSE(math_equal(a, b));
  }
}

TEST_CASE("strict mode follows PRM800K's grade_answer", "[grader][math]") {
  CHECK_FALSE(math_equal("\\frac{2}{4}", "\\frac{1}{2}", true));  // unreduced fractions must match
  CHECK(math_equal("0.5", "\\frac12", true));                     // mathd tier
  CHECK(math_equal("3\\sqrt{2}", "\\sqrt{18}", true));            // "sympy" tier
  CHECK(math_equal("(1,2)", "\\left(1, 2\\right)", true));
  CHECK_FALSE(math_equal("\\{1,2\\}", "\\{2,1\\}", true));  // PRM800K compares sets in order
  CHECK_FALSE(math_equal("[1,2]", "(1,2)", true));
  CHECK(math_equal("10\\text{ cm}", "10", true));
  CHECK_FALSE(math_equal("1.5", "2", true));  // integer vs non-integer
  CHECK(math_equal("x^2+2x+1", "(x+1)^2", true));
  CHECK_FALSE(math_equal("a+b+c+d", "d+c+b+a", true));  // more than two letters: PRM800K does not evaluate
}

TEST_CASE("tuples and intervals compare element-wise against comma-separated golds", "[grader][math]") {
  for (bool strict : {false, true}) {
    INFO("strict " << strict);
    // (response, reference): correct.
    const std::vector<std::pair<std::string, std::string>> equal = {
        {"(3, 7)", "3,7"},
        {"(3,7)", "3, 7"},
        {"\\left( 3, 7 \\right)", "3,7"},
        {"(1, 2, 3)", "1,2,3"},
        {"(\\frac{1}{2}, 3)", "\\frac12, 3"},
        {"(0.5, 3)", "\\frac{1}{2},3"},
        {"(-2, 5)", "-2, 5"},
        {"[1,2)", "[1,2)"},
        {"\\left[1, 2\\right)", "[1, 2)"},
        {"[1, 2)", "\\left[ 1,2 \\right)"},
        {"(-\\infty, 3]", "(-\\infty,3]"},
        {"(3,7)", "(3, 7)"},
    };
    for (const auto& [response, reference] : equal) {
      INFO(response << " vs gold " << reference);
      CHECK(math_equal(response, reference, strict));
      CHECK(grade_math("So \\boxed{" + response + "}.", reference, strict).score == 1.0);
    }
    // Wrong: order matters in a tuple; an interval is not a bare pair (the bare gold does not say which
    // ends are closed); a bare answer does not match a tuple or interval gold; different brackets.
    const std::vector<std::pair<std::string, std::string>> unequal = {
        {"(7, 3)", "3,7"},  {"(3, 8)", "3,7"},      {"(3, 7, 1)", "3,7"}, {"(3)", "3,7"},
        {"[3,7]", "3,7"},   {"[1,2)", "1,2"},       {"(1,2]", "1,2"},     {"3,7", "(3,7)"},
        {"1,2", "[1,2)"},   {"[1,2)", "(1,2]"},     {"[1,2)", "[1,2]"},   {"(1,2)", "[1,2)"},
        {"[1,3)", "[1,2)"}, {"(3,7)", "\\{3,7\\}"}, {"(3, 7)", "37"},
    };
    for (const auto& [response, reference] : unequal) {
      INFO(response << " vs gold " << reference);
      CHECK_FALSE(math_equal(response, reference, strict));
    }
  }
  CHECK(math_equal("(\\sqrt{2}, -1)", "\\sqrt2, -1"));  // lenient: values element by element
  CHECK(math_equal("x \\in [1, 2)", "[1,2)"));
}

TEST_CASE("grade_math scores and explains", "[grader][math]") {
  auto ok = grade_math("We get $x=3$, so the answer is \\boxed{\\dfrac{6}{2}}.", "3");
  CHECK(ok.score == 1.0);
  CHECK(ok.reason == "correct");
  CHECK(ok.extracted == "\\dfrac{6}{2}");
  CHECK(grade_math("The answer is 3.", "3").reason == "no_boxed_answer");
  CHECK(grade_math("\\boxed{}", "3").reason == "empty_answer");
  auto wrong = grade_math("\\boxed{4}", "3");
  CHECK(wrong.score == 0.0);
  CHECK(wrong.reason == "wrong_answer");
}

namespace {
std::vector<std::pair<std::string, std::string>> math500() {  // (solution, answer)
  std::ifstream in(pulse::test::shared_path("datasets/math500_test.jsonl"));
  REQUIRE(in);
  std::vector<std::pair<std::string, std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    rows.emplace_back(j["solution"].get<std::string>(), j["answer"].get<std::string>());
  }
  return rows;
}

// The answer's top-level elements as normalized strings; a parenthesized tuple counts as its elements
// (lenient mode matches "(a,b)" against the bare gold "a,b").
std::multiset<std::string> element_set(const std::string& a) {
  std::multiset<std::string> s;
  std::string n = normalize_answer(a), cur;
  if (n.size() > 2 && n.front() == '(' && n.back() == ')') n = n.substr(1, n.size() - 2);
  for (char c : n) {
    if (c == ',') {
      s.insert(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  s.insert(cur);
  return s;
}
}  // namespace

TEST_CASE("MATH-500: every reference solution's last box equals its answer", "[grader][math][real]") {
  auto rows = math500();
  REQUIRE(rows.size() == 500);
  for (bool strict : {false, true}) {
    int equal = 0;
    for (const auto& [solution, answer] : rows) {
      auto r = grade_math(solution, answer, strict);
      INFO(answer << " extracted " << r.extracted);
      CHECK(r.score == 1.0);
      equal += r.score == 1.0;
    }
    CHECK(equal == 500);
  }
}

TEST_CASE("MATH-500: another problem's answer is judged unequal", "[grader][math][real]") {
  auto rows = math500();
  std::vector<std::string> canon;
  for (const auto& row : rows) canon.push_back(normalize_answer(row.second));
  // Every ordered pair of differing reference answers (one problem's answer given for another's).
  // The same element list written as a tuple, "(a,b)" for the gold "a,b", is the same answer by design
  // (tuple vs comma-separated gold), not a wrong one: counted and printed, not checked as wrong.
  int pairs = 0, tuple_of_bare = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < rows.size(); ++j) {
      if (i == j || canon[i] == canon[j]) continue;  // same answer, not a wrong one
      const std::string& truth = rows[i].second;
      const std::string& other = rows[j].second;
      if (canon[j] == "(" + canon[i] + ")") {
        ++tuple_of_bare;
        INFO(other << " vs gold " << truth);
        CHECK(math_equal(other, truth, true));
        continue;
      }
      ++pairs;
      bool strict_accepts = math_equal(other, truth, true), lenient_accepts = math_equal(other, truth);
      if (!strict_accepts && !lenient_accepts) continue;  // (no per-pair INFO/CHECK: 250k pairs)
      INFO(other << " vs gold " << truth);
      CHECK_FALSE(strict_accepts);
      // Lenient mode may only equate reorderings of the same answer list.
      if (lenient_accepts) CHECK(element_set(other) == element_set(truth));
    }
  }
  WARN("MATH-500 cross-check: " << pairs << " ordered pairs of differing answers, none accepted in strict "
                                << "mode; " << tuple_of_bare << " tuple-of-the-bare-gold pairs accepted");
  CHECK(pairs > 240000);
}

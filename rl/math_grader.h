// MATH reward: the last boxed answer of a response, judged against the reference answer.
//
// Lenient mode (default; pulse's own rules) decides equality in tiers, first match wins:
//   1. canonical strings equal (normalize_answer: Hendrycks strip_string + Minerva normalize_final_answer);
//   2. same exact value (parse_math_value: integers, decimals, fractions, mixed numbers, a*sqrt(b), pi,
//      polynomials in single letters) -- no floating point tolerance, 0.333 != 1/3;
//   3. structure: tuples "(a,b)" and intervals "[a,b)" element by element with the same brackets;
//      sets "\{a,b\}" and bare lists "a, b" as multisets; unions "A \cup B" part by part (any order);
//      pmatrix/bmatrix entry by entry; "a \pm b" as the list {a+b, a-b}; equations "L = R" by L-R.
//      A response tuple "(a, b)" against a reference bare list "a,b" (comma-separated gold) compares
//      element by element in order: "(3, 7)" == gold "3,7", "(7, 3)" != gold "3,7". This rule is
//      one-way and for parentheses only: a bare "3,7" does not match the gold "(3,7)" (which may be an
//      open interval), and "[3,7]" / "[1,2)" do not match a bare gold (it does not say which ends are
//      closed). Intervals match the same interval only (same brackets, same ends, any spelling).
// Strict mode follows PRM800K's grade_answer (openai/prm800k grading/grader.py): equal when
// math_normalize strings match or PRM _normalize strings match; otherwise split tuples/intervals (brackets
// must match; pulse's one addition: a given "(a,b)" against a ground truth written as the bare list
// "a,b", not "\{a,b\}", splits the ground truth at its top-level commas, as in lenient mode), and per
// element: two a/b fractions must match as strings (unreduced != reduced),
// integer-vs-non-integer is unequal, else "sympy.simplify(gt - given) == 0" under should_allow_eval
// (<= 2 unknown letters, no "^{", "^(", "^n^", "^nn"). What differs from the Python original:
//   - sympy.simplify is replaced by exact equality of parse_math_value (plain-text mode): it proves
//     the same rational / square-root / polynomial identities; identities needing trig, logs, factoring
//     of rational functions or floating evaluation are judged unequal here (sympy may accept them).
//   - pylatexenc's latex2text is replaced by latex_to_plain_text (math_normalize.h), which
//     parenthesizes compound fractions (pylatexenc renders \frac{1}{2+x} as "1/2+x").
//   - Sets are not unordered in strict mode, as in PRM800K.
#pragma once
#include <optional>
#include <string>

#include "datasets/boxed.h"
#include "rl/reward.h"

namespace pulse::rl {

/// The last \boxed{} answer of a text (datasets/boxed.h).
using datasets::extract_boxed;

/// True when the answer `a` (a response's) denotes the same answer as the reference `b` (see the tiers
/// above; all rules are symmetric except the tuple-vs-bare-list one). Strings over 1000 characters are
/// unequal (std::regex would overflow the stack on them). Never throws.
bool math_equal(const std::string& a, const std::string& b, bool strict = false);

/// Grades a model response against the reference answer: score 1 when extract_boxed(response) is
/// math_equal to reference_answer. reason: "correct", "wrong_answer", "no_boxed_answer", "empty_answer",
/// "answer_too_long" (boxed text over 1000 characters).
/// `extracted` holds the boxed text. Never throws.
RewardResult grade_math(const std::string& response, const std::string& reference_answer,
                        bool strict = false);

}  // namespace pulse::rl

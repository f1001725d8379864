// Answer-string normalizations of the established MATH graders, and pulse's combined one.
//
// Sources (rules re-implemented from reading, no code copied):
//  - Hendrycks et al. 2021, MATH, modeling/math_equivalence.py `_strip_string` (hendrycks_strip).
//  - PRM800K (Lightman et al. 2023), grading/math_normalize.py `normalize_answer` (mathd_normalize) and
//    grading/grader.py `_normalize` (prm_normalize).
//  - Minerva (Lewkowycz et al. 2022, appendix D) `normalize_final_answer` (minerva_normalize), as in
//    lm-evaluation-harness tasks/minerva_math/utils.py.
// None of these throws: where the Python original raises (and its caller falls back), the documented
// fallback value is returned.
#pragma once
#include <optional>
#include <string>

namespace pulse::rl {

/// Hendrycks `_strip_string`. Throws std::invalid_argument where the Python raises (two "\text{ ", a
/// "\frac" or "\sqrt" with nothing after it); callers that mirror the Python catch it.
std::string hendrycks_strip(std::string s);

/// PRM800K `math_normalize.normalize_answer`: trims, unwraps one enclosing \text{..}, then
/// hendrycks_strip; on a hendrycks_strip error returns the trimmed/unwrapped text (as the Python does).
std::string mathd_normalize(const std::string& answer);

/// Minerva `normalize_final_answer`: the part after the last "=", SUBSTITUTIONS, REMOVED_EXPRESSIONS,
/// $..$ / \text / \textbf / \overline / \boxed unwrapping, \frac and \sqrt shorthand, thousands commas.
std::string minerva_normalize(const std::string& answer);

/// PRM800K `grader._normalize`, with two substitutions (see math_grader.h "strict mode"): pylatexenc's
/// latex2text is replaced by latex_to_plain_text below. Returns the normalized expression.
std::string prm_normalize(const std::string& answer);

/// PRM800K `_strip_properly_formatted_commas`: "1,234" -> "1234", tuple commas kept.
std::string prm_strip_properly_formatted_commas(std::string expr);

/// PRM800K `_str_is_int`: the text (thousands commas stripped) is a float within 1e-7 of an integer.
bool prm_str_is_int(const std::string& x);

/// A small LaTeX -> plain-text rendering in the spirit of pylatexenc's LatexNodes2Text as PRM800K uses
/// it: \frac{a}{b} -> a/b (parenthesized when a or b is compound, where pylatexenc is not), \sqrt{x} ->
/// sqrt(x), \pi -> pi, \infty -> inf, \cup -> U, \cdot/\times -> *, \text{x} -> x, other macros dropped
/// with their braced arguments kept.
std::string latex_to_plain_text(const std::string& latex);

/// pulse's lenient canonical form: Hendrycks + Minerva rules together (\dfrac/\tfrac, \left/\right,
/// \text{} and trailing units, degrees, \%, \$, "x =" / "x \in" prefixes, thousands separators, LaTeX
/// spacing, trailing ".", trailing decimal zeros, "\frac12" / "\sqrt3" shorthand, ".5" -> "0.5",
/// all whitespace removed). Two answers with the same canonical form are equal.
std::string normalize_answer(const std::string& answer);

}  // namespace pulse::rl

// Exact values of short math answers, for the MATH grader's "same value" tier.
//
// A value is a finite sum of terms c * sqrt(r) * x1^e1 * ... * xk^ek with c an exact rational,
// r a square-free positive integer (1 = no root) and x_i single-letter symbols (or \pi, \infty).
// That normal form is unique, so two answers are equal exactly when their normal forms are.
// It covers integers, decimals, fractions, mixed numbers (3\frac{1}{2}), simple square roots
// (\frac{\sqrt{12}}{3} == \frac{2\sqrt{3}}{3}), pi multiples and polynomials in letters.
// Anything else (functions, division by a polynomial, non-integer powers, overflow) is "not a value",
// never a guess. Used in place of sympy.simplify in the MATH/PRM800K graders (see math_grader.h).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pulse::rl {

/// Exact rational with a positive denominator, numerator and denominator coprime.
/// Arithmetic throws std::overflow_error beyond 128-bit range (the parser turns that into "not a value").
struct Rational {
  __int128 num = 0, den = 1;
  static Rational of(__int128 n, __int128 d = 1);
  Rational operator+(const Rational& o) const;
  Rational operator-(const Rational& o) const;
  Rational operator*(const Rational& o) const;
  Rational operator/(const Rational& o) const;
  bool operator==(const Rational& o) const { return num == o.num && den == o.den; }
  bool operator<(const Rational& o) const;
  bool is_zero() const { return num == 0; }
  std::string str() const;
};

/// One term's shape: square-free radicand and symbol powers (sorted, no zero powers).
struct MonomialKey {
  int64_t radicand = 1;
  std::vector<std::pair<std::string, int>> symbols;
  bool operator<(const MonomialKey& o) const;
  bool operator==(const MonomialKey& o) const { return radicand == o.radicand && symbols == o.symbols; }
};

/// A value in normal form: key -> non-zero rational coefficient.
struct MathValue {
  std::map<MonomialKey, Rational> terms;
  bool operator==(const MathValue& o) const;
  bool is_constant_rational() const;  ///< no roots, no symbols
  std::string str() const;            ///< canonical text, for messages and tests
};

/// Options for parse_math_value.
struct ValueParseOptions {
  /// Plain-text mode as in PRM800K after latex2text: "sqrt(2)", "pi", "inf", and letter runs are
  /// products of single-letter symbols (sympy's split_symbols). In the default LaTeX mode a run of two
  /// or more letters that is not a known command is "not a value" (it is a word, e.g. "odd").
  bool plain_text = false;
};

/// Parses an already-normalized answer ("\frac{3\sqrt{2}}{4}", "-2.50", "7 3/4", "2x^2+1") into its
/// normal form; nullopt when the text is not a value this parser understands.
std::optional<MathValue> parse_math_value(const std::string& text, const ValueParseOptions& options = {});

}  // namespace pulse::rl

// MATH grader: boxed-answer extraction and tiered equivalence (lenient), PRM800K rules (strict).
#include "rl/math_grader.h"

#include <cctype>
#include <functional>
#include <regex>
#include <vector>

#include "rl/math_normalize.h"
#include "rl/math_value.h"

namespace pulse::rl {
namespace {

// libstdc++'s std::regex recurses once per input character and overflows an 8 MB stack at ~20k
// characters; the longest reference answer in MATH train/test is 159 characters, so longer strings are
// judged unequal before any regex sees them.
constexpr size_t kMaxAnswerChars = 1000;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n\r\f\v");
  return s.substr(b, e - b + 1);
}

bool is_open(char c) {
  return c == '(' || c == '[' || c == '{';
}
bool is_close(char c) {
  return c == ')' || c == ']' || c == '}';
}

// Splits at top-level occurrences of `sep` (outside any bracket).
std::vector<std::string> split_top(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (is_open(s[i]))
      ++depth;
    else if (is_close(s[i]))
      --depth;
    else if (depth == 0 && s.compare(i, sep.size(), sep) == 0) {
      parts.push_back(s.substr(start, i - start));
      start = i + sep.size();
      i = start - 1;
    }
  }
  parts.push_back(s.substr(start));
  return parts;
}

// Index of the bracket closing the one at `open`, treating (, [, { alike (intervals mix them).
size_t close_of(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (is_open(s[i]))
      ++depth;
    else if (is_close(s[i]) && --depth == 0)
      return i;
  }
  return std::string::npos;
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// ---- lenient tiers ------------------------------------------------------------------------------------

bool is_word(const std::string& s) {
  if (s.size() < 2) return false;
  for (char c : s)
    if (!std::isalpha(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<MathValue> equation_value(const std::string& s) {
  auto sides = split_top(s, "=");
  if (sides.size() != 2) return std::nullopt;
  return parse_math_value("(" + sides[0] + ")-(" + sides[1] + ")");
}

// Tiers 1 and 2 for one element (already canonical).
bool element_equal(const std::string& x_raw, const std::string& y_raw) {
  std::string x = normalize_answer(x_raw), y = normalize_answer(y_raw);
  if (x.empty() || y.empty()) return false;
  if (x == y) return true;
  if (is_word(x) && is_word(y)) return lower(x) == lower(y);
  auto vx = parse_math_value(x), vy = parse_math_value(y);
  if (vx && vy) return *vx == *vy;
  auto ex = equation_value(x), ey = equation_value(y);
  if (ex && ey) {  // "L = R": same L - R, or the sides swapped
    auto sides = split_top(y, "=");
    auto ey_swapped = equation_value(sides[1] + "=" + sides[0]);
    return *ex == *ey || (ey_swapped && *ex == *ey_swapped);
  }
  return false;
}

struct Shape {
  enum Kind { Scalar, Bracketed, Collection, Union, Matrix } kind = Scalar;
  char open = 0, close = 0;
  bool bare_list = false;                      // Collection written "a, b" (no \{\}, no \pm): may be ordered
  std::vector<std::string> items;              // Scalar: one; Bracketed/Collection/Union: elements
  std::vector<std::vector<std::string>> rows;  // Matrix
};

// "1\pm\sqrt{5}" -> {"1+\sqrt{5}", "1-\sqrt{5}"}; items without \pm / \mp are kept.
bool expand_pm(std::vector<std::string>& items) {
  bool any = false;
  std::vector<std::string> out;
  for (const auto& it : items) {
    size_t p = it.find("\\pm"), m = it.find("\\mp");
    size_t pos = std::min(p, m);
    if (pos == std::string::npos) {
      out.push_back(it);
      continue;
    }
    any = true;
    std::string a = it.substr(0, pos), b = it.substr(pos + 3);
    out.push_back(a + "+" + b);
    out.push_back(a + "-" + b);
  }
  items = out;
  return any;
}

Shape shape_of(const std::string& s) {
  Shape sh;
  auto unions = split_top(s, "\\cup");
  if (unions.size() > 1) {
    sh.kind = Shape::Union;
    sh.items = unions;
    return sh;
  }
  for (const char* env : {"pmatrix", "bmatrix", "matrix", "vmatrix"}) {
    std::string b = std::string("\\begin{") + env + "}", e = std::string("\\end{") + env + "}";
    if (starts_with(s, b) && ends_with(s, e)) {
      sh.kind = Shape::Matrix;
      std::string inner = s.substr(b.size(), s.size() - b.size() - e.size());
      for (auto& row : split_top(inner, "\\\\")) {
        if (trim(row).empty()) continue;
        sh.rows.push_back(split_top(row, "&"));
      }
      return sh;
    }
  }
  if (starts_with(s, "\\{") && ends_with(s, "\\}") && s.size() >= 4) {
    sh.kind = Shape::Collection;
    sh.items = split_top(s.substr(2, s.size() - 4), ",");
    expand_pm(sh.items);
    return sh;
  }
  if (s.size() >= 2 && (s[0] == '(' || s[0] == '[') && (s.back() == ')' || s.back() == ']') &&
      close_of(s, 0) == s.size() - 1) {
    auto inner = split_top(s.substr(1, s.size() - 2), ",");
    if (inner.size() > 1) {
      sh.kind = Shape::Bracketed;
      sh.open = s[0];
      sh.close = s.back();
      sh.items = inner;
      return sh;
    }
  }
  sh.items = split_top(s, ",");
  bool expanded = expand_pm(sh.items);
  sh.kind = (sh.items.size() > 1 || expanded) ? Shape::Collection : Shape::Scalar;
  sh.bare_list = sh.kind == Shape::Collection && !expanded;
  return sh;
}

// Perfect matching between two equal-size multisets under `eq` (Kuhn's augmenting paths; n is small).
bool multiset_equal(const std::vector<std::string>& a, const std::vector<std::string>& b,
                    const std::function<bool(const std::string&, const std::string&)>& eq) {
  if (a.size() != b.size() || a.size() > 64) return false;
  size_t n = a.size();
  std::vector<std::vector<bool>> ok(n, std::vector<bool>(n));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) ok[i][j] = eq(a[i], b[j]);
  std::vector<int> match_b(n, -1);
  std::function<bool(size_t, std::vector<bool>&)> augment = [&](size_t i, std::vector<bool>& seen) {
    for (size_t j = 0; j < n; ++j) {
      if (!ok[i][j] || seen[j]) continue;
      seen[j] = true;
      if (match_b[j] < 0 || augment(static_cast<size_t>(match_b[j]), seen)) {
        match_b[j] = static_cast<int>(i);
        return true;
      }
    }
    return false;
  };
  for (size_t i = 0; i < n; ++i) {
    std::vector<bool> seen(n, false);
    if (!augment(i, seen)) return false;
  }
  return true;
}

bool structured_equal(const std::string& a, const std::string& b, int depth);

// The response's tuple "(a, b)" against a reference written as the bare list "a, b": element by element,
// in order (the reference may be an ordered pair written without parentheses; a reordered tuple is
// wrong). Only parentheses: "[a, b)" claims an interval, which a bare list does not say.
bool tuple_matches_bare_list(const Shape& response, const Shape& reference, int depth) {
  if (response.kind != Shape::Bracketed || response.open != '(' || response.close != ')') return false;
  if (reference.kind != Shape::Collection || !reference.bare_list) return false;
  if (response.items.size() != reference.items.size()) return false;
  for (size_t i = 0; i < response.items.size(); ++i)
    if (!structured_equal(response.items[i], reference.items[i], depth + 1)) return false;
  return true;
}

// x is the response's shape, y the reference's (the only asymmetric rule is tuple_matches_bare_list).
bool shapes_equal(const Shape& x, const Shape& y, int depth) {
  if (tuple_matches_bare_list(x, y, depth)) return true;
  if (x.kind != y.kind) return false;
  switch (x.kind) {
    case Shape::Scalar:
      return element_equal(x.items[0], y.items[0]);
    case Shape::Bracketed:
      if (x.open != y.open || x.close != y.close || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!structured_equal(x.items[i], y.items[i], depth + 1)) return false;
      return true;
    case Shape::Collection:
    case Shape::Union:
      return multiset_equal(x.items, y.items, [depth](const std::string& p, const std::string& q) {
        return structured_equal(p, q, depth + 1);
      });
    case Shape::Matrix:
      if (x.rows.size() != y.rows.size()) return false;
      for (size_t r = 0; r < x.rows.size(); ++r) {
        if (x.rows[r].size() != y.rows[r].size()) return false;
        for (size_t c = 0; c < x.rows[r].size(); ++c)
          if (!element_equal(x.rows[r][c], y.rows[r][c])) return false;
      }
      return true;
  }
  return false;
}

bool structured_equal(const std::string& a, const std::string& b, int depth) {
  std::string x = normalize_answer(a), y = normalize_answer(b);
  if (x.empty() || y.empty()) return false;
  if (x == y) return true;
  if (depth > 8) return false;
  return shapes_equal(shape_of(x), shape_of(y), depth);
}

// ---- strict: PRM800K grade_answer ----------------------------------------------------------------------

bool prm_is_frac(const std::string& e) {
  static const std::regex re(R"(^-?[0-9]+.?/0*[1-9][0-9]*.?$)");
  return std::regex_search(e, re);
}

bool prm_should_allow_eval(const std::string& expr) {
  std::string letters_src = expr;
  for (const char* w : {"sqrt", "frac"}) {
    size_t pos;
    while ((pos = letters_src.find(w)) != std::string::npos) letters_src.erase(pos, 4);
  }
  std::vector<bool> seen(256, false);
  int letters = 0;
  for (unsigned char c : letters_src)
    if (std::isalpha(c) && !seen[c]) {
      seen[c] = true;
      ++letters;
    }
  if (letters > 2) return false;
  if (expr.find("^{") != std::string::npos || expr.find("^(") != std::string::npos) return false;
  static const std::regex bad1(R"(\^[0-9]+\^)"), bad2(R"(\^[0-9][0-9]+)");
  return !std::regex_search(expr, bad1) && !std::regex_search(expr, bad2);
}

// are_equal_under_sympy with sympy.simplify replaced by exact normal forms.
bool prm_equal_by_value(const std::string& gt, const std::string& given) {
  if (!prm_should_allow_eval("(" + gt + ")-(" + given + ")")) return false;
  ValueParseOptions plain;
  plain.plain_text = true;
  auto a = parse_math_value(gt, plain), b = parse_math_value(given, plain);
  return a && b && *a == *b;
}

std::vector<std::string> prm_split_tuple(const std::string& raw) {
  std::string expr = prm_strip_properly_formatted_commas(raw);
  if (expr.empty()) return {};
  auto is_tuple_char = [](char c) { return c == '(' || c == ')' || c == '[' || c == ']'; };
  if (expr.size() > 2 && is_tuple_char(expr.front()) && is_tuple_char(expr.back())) {
    bool inner_clean = true;
    for (size_t i = 1; i + 1 < expr.size(); ++i)
      if (is_tuple_char(expr[i])) inner_clean = false;
    if (inner_clean) {
      std::vector<std::string> elems;
      for (auto& e : split_top(expr.substr(1, expr.size() - 2), ",")) elems.push_back(trim(e));
      // split_top never sees brackets inside here, so this equals Python's str.split(",").
      return elems;
    }
  }
  return {expr};
}

// pulse's one addition to PRM800K: a given tuple "(a,b)" against a ground truth written as the bare
// list "a,b" takes the ground truth's top-level comma parts as its elements, so they are compared in
// order by the per-element rules below. `written` is the ground truth as written (mathd_normalize): a
// set "\{a,b\}" (which prm_normalize turns into "a,b") or any bracketed form is not a bare list.
// Empty parts: no split.
std::vector<std::string> prm_bare_list_elems(const std::string& written, const std::string& gt) {
  if (written.empty() || is_open(written.front()) || is_close(written.back()) ||
      starts_with(written, "\\{") || ends_with(written, "\\}"))
    return {};
  std::string expr = prm_strip_properly_formatted_commas(gt);
  if (expr.empty() || is_open(expr.front()) || is_close(expr.back())) return {};
  std::vector<std::string> elems;
  for (auto& e : split_top(expr, ",")) {
    elems.push_back(trim(e));
    if (elems.back().empty()) return {};
  }
  return elems.size() > 1 ? elems : std::vector<std::string>{};
}

bool prm800k_equal(const std::string& given, const std::string& ground_truth) {
  if (mathd_normalize(ground_truth) == mathd_normalize(given)) return true;
  std::string gt = prm_normalize(ground_truth), an = prm_normalize(given);
  if (gt == an) return true;
  if (an.empty()) return false;
  auto gt_elems = prm_split_tuple(gt), an_elems = prm_split_tuple(an);
  if (gt_elems.size() == 1 && an_elems.size() > 1 && an.front() == '(' && an.back() == ')') {
    auto bare = prm_bare_list_elems(mathd_normalize(ground_truth), gt);
    if (!bare.empty()) gt_elems = bare;
  } else if (gt_elems.size() > 1 && (gt.front() != an.front() || gt.back() != an.back())) {
    return false;
  }
  if (gt_elems.size() != an_elems.size()) return false;
  for (size_t i = 0; i < gt_elems.size(); ++i) {
    const std::string &g = gt_elems[i], &a = an_elems[i];
    bool ok;
    if (prm_is_frac(g) && prm_is_frac(a)) {
      ok = g == a;  // unreduced fractions must match as written
    } else if (prm_str_is_int(g) != prm_str_is_int(a)) {
      ok = false;
    } else {
      ok = prm_equal_by_value(g, a);
    }
    if (!ok) return false;
  }
  return !gt_elems.empty();
}

}  // namespace

bool math_equal(const std::string& a, const std::string& b, bool strict) {
  if (a.size() > kMaxAnswerChars || b.size() > kMaxAnswerChars) return false;
  try {
    if (strict) return prm800k_equal(a, b);
    return structured_equal(a, b, 0);
  } catch (const std::exception&) {  // std::regex_error on pathological input: not equal
    return false;
  }
}

RewardResult grade_math(const std::string& response, const std::string& reference_answer, bool strict) {
  RewardResult r;
  auto boxed = extract_boxed(response);
  if (!boxed) {
    r.reason = "no_boxed_answer";
    return r;
  }
  r.extracted = *boxed;
  if (trim(*boxed).empty()) {
    r.reason = "empty_answer";
    return r;
  }
  if (boxed->size() > kMaxAnswerChars) {
    r.reason = "answer_too_long";
    return r;
  }
  bool ok = math_equal(*boxed, reference_answer, strict);
  r.score = ok ? 1.0 : 0.0;
  r.reason = ok ? "correct" : "wrong_answer";
  return r;
}

}  // namespace pulse::rl

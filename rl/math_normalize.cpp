// Answer normalizations: Hendrycks MATH, PRM800K, Minerva, and pulse's lenient combination.
#include "rl/math_normalize.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <stdexcept>
#include <vector>

namespace pulse::rl {
namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0, pos;
  while ((pos = s.find(sep, start)) != std::string::npos) {
    parts.push_back(s.substr(start, pos - start));
    start = pos + sep.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n\r\f\v");
  return s.substr(b, e - b + 1);
}

std::string remove_spaces(const std::string& s) {
  std::string r;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) r += c;
  return r;
}

bool is_ascii_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// Python int(s) accepts surrounding spaces and a sign; `"{}/{}".format(a, b) == s` then requires the
// canonical spelling, so only -?(0|[1-9][0-9]*) survives both.
bool canonical_int(const std::string& s) {
  std::string d = (!s.empty() && s[0] == '-') ? s.substr(1) : s;
  return is_ascii_digits(d) && (d == "0" || d[0] != '0');
}

// ---- Hendrycks helpers ------------------------------------------------------------------------------

std::string fix_fracs(const std::string& s) {
  auto parts = split(s, "\\frac");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& sub = parts[i];
    out += "\\frac";
    if (!sub.empty() && sub[0] == '{') {
      out += sub;
      continue;
    }
    if (sub.size() < 2) return s;  // the Python returns the input unchanged
    char a = sub[0], b = sub[1];
    if (b != '{') {
      out += std::string("{") + a + "}{" + b + "}" + sub.substr(2);
    } else {
      out += std::string("{") + a + "}" + b + sub.substr(2);
    }
  }
  return out;
}

std::string fix_a_slash_b(const std::string& s) {
  auto parts = split(s, "/");
  if (parts.size() != 2) return s;
  if (!canonical_int(parts[0]) || !canonical_int(parts[1])) return s;
  return "\\frac{" + parts[0] + "}{" + parts[1] + "}";
}

std::string remove_right_units(const std::string& s) {
  if (s.find("\\text{ ") == std::string::npos) return s;
  auto parts = split(s, "\\text{ ");
  if (parts.size() != 2) throw std::invalid_argument("more than one \"\\text{ \"");
  return parts[0];
}

std::string fix_sqrt(const std::string& s) {
  if (s.find("\\sqrt") == std::string::npos) return s;
  auto parts = split(s, "\\sqrt");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p.empty()) throw std::invalid_argument("\\sqrt at the end");
    if (p[0] != '{') {
      out += std::string("\\sqrt{") + p[0] + "}" + p.substr(1);
    } else {
      out += "\\sqrt" + p;
    }
  }
  return out;
}

// ^\\text\{(?P<text>.+?)\}$ : one enclosing \text{...}.
bool unwrap_text(std::string& s) {
  static const std::regex re(R"(^\\text\{(.+?)\}$)");
  std::smatch m;
  if (std::regex_match(s, m, re)) {
    s = m[1].str();
    return true;
  }
  return false;
}

// ---- PRM800K helpers -----------------------------------------------------------------------------------

// Python float(s) for plain decimal/exponent spellings; false for inf/nan and anything else.
bool parse_float(const std::string& raw, double& out) {
  std::string s = trim(raw);
  static const std::regex re(R"(^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$)");
  if (!std::regex_match(s, re)) return false;
  out = std::strtod(s.c_str(), nullptr);
  return std::isfinite(out);
}

bool float_is_int(double x) {
  return std::fabs(x - std::round(x)) <= 1e-7;
}

std::string int_string(double x) {
  // str(int(x)) for |x| < 2^63; beyond that the exact decimal of the double.
  if (std::fabs(x) < 9.2e18) return std::to_string(static_cast<long long>(x));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

}  // namespace

std::string prm_strip_properly_formatted_commas(std::string expr) {
  static const std::regex re(R"((\d)(,)(\d\d\d)($|\D))");
  for (;;) {
    std::string next = std::regex_replace(expr, re, "$1$3$4");
    if (next == expr) return next;
    expr = next;
  }
}

bool prm_str_is_int(const std::string& x) {
  double v;
  return parse_float(prm_strip_properly_formatted_commas(x), v) && float_is_int(v);
}

namespace {

// ---- LaTeX -> plain text ----------------------------------------------------------------------------

size_t matching_brace(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      ++i;
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i;
  }
  return std::string::npos;
}

bool is_compound(const std::string& t) {
  return t.find_first_of("+-*/ ") != std::string::npos;
}

std::string plain(const std::string& s, size_t& i, int depth);

// One argument of a macro: {group} or a single character.
std::string plain_arg(const std::string& s, size_t& i, int depth) {
  while (i < s.size() && s[i] == ' ') ++i;
  if (i >= s.size()) return "";
  if (s[i] == '{') {
    size_t close = matching_brace(s, i);
    if (close == std::string::npos) close = s.size();
    std::string inner = s.substr(i + 1, close - i - 1);
    i = close < s.size() ? close + 1 : close;
    size_t j = 0;
    return plain(inner, j, depth + 1);
  }
  if (s[i] == '\\') {
    std::string one;
    size_t j = i + 1;
    while (j < s.size() && std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
    std::string cmd = s.substr(i, j - i);
    i = j;
    size_t k = 0;
    return plain(cmd, k, depth + 1);
  }
  return std::string(1, s[i++]);
}

std::string plain(const std::string& s, size_t& i, int depth) {
  if (depth > 50) return "";
  std::string out;
  while (i < s.size()) {
    char c = s[i];
    if (c == '{') {
      ++i;
      size_t close = matching_brace(s, i - 1);
      if (close == std::string::npos) close = s.size();
      std::string inner = s.substr(i, close - i);
      size_t j = 0;
      out += plain(inner, j, depth + 1);
      i = close < s.size() ? close + 1 : close;
      continue;
    }
    if (c != '\\') {
      out += c;
      ++i;
      continue;
    }
    // backslash
    if (i + 1 < s.size() && !std::isalpha(static_cast<unsigned char>(s[i + 1]))) {
      char n = s[i + 1];
      i += 2;
      if (n == '{' || n == '}' || n == '%' || n == '$' || n == '&' || n == '_' || n == '#')
        out += n;
      else if (n == ',' || n == ';' || n == ':' || n == ' ')
        out += ' ';
      else if (n == '\\')
        out += '\n';
      continue;  // \! and others: nothing
    }
    size_t j = i + 1;
    while (j < s.size() && std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
    std::string cmd = s.substr(i + 1, j - i - 1);
    i = j;
    if (cmd == "frac" || cmd == "dfrac" || cmd == "tfrac") {
      std::string a = plain_arg(s, i, depth), b = plain_arg(s, i, depth);
      out += (is_compound(a) ? "(" + a + ")" : a) + "/" + (is_compound(b) ? "(" + b + ")" : b);
    } else if (cmd == "sqrt") {
      std::string index;
      if (i < s.size() && s[i] == '[') {
        size_t close = s.find(']', i);
        if (close == std::string::npos) close = s.size();
        index = s.substr(i + 1, close - i - 1);
        i = close < s.size() ? close + 1 : close;
      }
      std::string a = plain_arg(s, i, depth);
      out += index.empty() ? "sqrt(" + a + ")" : "(" + a + ")^(1/" + index + ")";
    } else if (cmd == "pi") {
      out += "pi";
    } else if (cmd == "infty") {
      out += "inf";
    } else if (cmd == "cup") {
      out += "U";
    } else if (cmd == "cdot" || cmd == "times") {
      out += "*";
    } else if (cmd == "text" || cmd == "mbox" || cmd == "mathrm" || cmd == "textbf" || cmd == "mathbf" ||
               cmd == "textit" || cmd == "operatorname") {
      out += plain_arg(s, i, depth);
    } else if (cmd == "begin" || cmd == "end") {
      plain_arg(s, i, depth);  // environment name
    } else if (cmd == "pm") {
      out += "±";
    } else if (cmd == "le" || cmd == "leq") {
      out += "<=";
    } else if (cmd == "ge" || cmd == "geq") {
      out += ">=";
    }
    // \left, \right, \displaystyle and unknown macros render as nothing; their arguments follow as
    // ordinary groups.
  }
  return out;
}

// ---- pulse lenient helpers ----------------------------------------------------------------------------

// Drops "\text{ cm}^2", " units", " degrees" and the like after a numeric answer.
std::string strip_trailing_units(std::string s) {
  static const std::regex text_unit(
      R"(^(.*[0-9}\)\]a-zA-Z])\s*\\text\{\s*([A-Za-z][A-Za-z .]*)\}\s*(\^\{?[23]\}?)?\s*\.?\s*$)");
  static const std::regex word_unit(
      R"(^(.*[0-9}])\s*(square\s+)?(units?|inch(es)?|feet|foot|ft|yards?|miles?|meters?|m|cm|km|mm|mph|)"
      R"(hours?|minutes?|seconds?|days?|weeks?|months?|years?|degrees?|dollars?|cents?|pounds?|points?|)"
      R"(ways|integers|digits|students|edges|meals|multiples|gm|g|kg|sq)(\^\{?[23]\}?)?\s*\.?\s*$)");
  std::smatch m;
  for (int guard = 0; guard < 4; ++guard) {
    if (std::regex_match(s, m, text_unit) && m[1].str().find_first_of("0123456789") != std::string::npos) {
      s = trim(m[1].str());
    } else if (std::regex_match(s, m, word_unit)) {
      s = trim(m[1].str());
    } else {
      break;
    }
  }
  return s;
}

// \text{X}, \textbf{X}, \mbox{X}, ... -> X, repeatedly (inner first is not needed: braces are kept balanced).
std::string unwrap_text_macros(std::string s) {
  static const char* kMacros[] = {"\\text{",   "\\textbf{", "\\textit{", "\\textnormal{",
                                  "\\textrm{", "\\textup{", "\\mbox{",   "\\mathrm{",
                                  "\\mathbf{", "\\boxed{",  "\\mathit{", "\\textsf{"};
  for (int guard = 0; guard < 32; ++guard) {
    bool changed = false;
    for (const char* m : kMacros) {
      size_t pos = s.find(m);
      if (pos == std::string::npos) continue;
      size_t open = pos + std::string(m).size() - 1;
      size_t close = matching_brace(s, open);
      if (close == std::string::npos) continue;
      s = s.substr(0, pos) + s.substr(open + 1, close - open - 1) + s.substr(close + 1);
      changed = true;
    }
    if (!changed) break;
  }
  return s;
}

// Top-level positions of `c` (outside (), [], {}).
std::vector<size_t> top_level(const std::string& s, char c) {
  std::vector<size_t> pos;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    if (ch == '(' || ch == '[' || ch == '{')
      ++depth;
    else if (ch == ')' || ch == ']' || ch == '}')
      --depth;
    else if (ch == c && depth == 0)
      pos.push_back(i);
  }
  return pos;
}

// "x = 5" -> "5", "k=\frac12" -> "\frac12", "x \in [1,2]" -> "[1,2]", "f(x) = ..." -> "...".
std::string strip_variable_prefix(std::string s) {
  static const std::regex lhs_re(
      R"(^\s*([A-Za-z](_\{?[A-Za-z0-9]+\}?)?('*)|\\[A-Za-z]+|[A-Za-z]\([A-Za-z]\))\s*$)");
  for (const char* rel : {"\\in"}) {
    size_t pos = s.find(rel);
    if (pos != std::string::npos && std::regex_match(s.substr(0, pos), lhs_re)) s = s.substr(pos + 3);
  }
  auto eq = top_level(s, '=');
  if (eq.size() == 1) {
    std::string lhs = s.substr(0, eq[0]);
    if (std::regex_match(lhs, lhs_re)) s = s.substr(eq[0] + 1);
  }
  return s;
}

// "2.50" -> "2.5", "3.000" -> "3", for every decimal number in the text.
std::string strip_decimal_zeros(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (std::isdigit(static_cast<unsigned char>(s[i])) &&
        (i == 0 || !std::isalpha(static_cast<unsigned char>(s[i - 1])))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        size_t k = j + 1;
        while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
        std::string frac = s.substr(j + 1, k - j - 1);
        while (!frac.empty() && frac.back() == '0') frac.pop_back();
        out += s.substr(i, j - i);
        if (!frac.empty()) out += "." + frac;
        i = k;
        continue;
      }
      out += s.substr(i, j - i);
      i = j;
      continue;
    }
    out += s[i++];
  }
  return out;
}

}  // namespace

std::string hendrycks_strip(std::string s) {
  replace_all(s, "\n", "");
  replace_all(s, "\\!", "");
  replace_all(s, "\\\\", "\\");
  replace_all(s, "tfrac", "frac");
  replace_all(s, "dfrac", "frac");
  replace_all(s, "\\left", "");
  replace_all(s, "\\right", "");
  replace_all(s, "^{\\circ}", "");
  replace_all(s, "^\\circ", "");
  replace_all(s, "\\$", "");
  s = remove_right_units(s);
  replace_all(s, "\\%", "");
  replace_all(s, "%", "");
  replace_all(s, " .", " 0.");
  replace_all(s, "{.", "{0.");
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  auto eq = split(s, "=");
  if (eq.size() == 2 && eq[0].size() <= 2) s = eq[1];
  s = fix_sqrt(s);
  replace_all(s, " ", "");
  s = fix_fracs(s);
  if (s == "0.5") s = "\\frac{1}{2}";
  return fix_a_slash_b(s);
}

std::string mathd_normalize(const std::string& answer) {
  std::string s = trim(answer);
  if (unwrap_text(s)) s = trim(s);
  try {
    return hendrycks_strip(s);
  } catch (const std::invalid_argument&) {
    return s;
  }
}

std::string minerva_normalize(const std::string& answer) {
  static const std::pair<const char*, const char*> kSubstitutions[] = {
      {"an ", ""}, {"a ", ""},       {".$", "$"},           {"\\$", ""},          {"\\ ", ""},
      {" ", ""},   {"mbox", "text"}, {",\\text{and}", ","}, {"\\text{and}", ","}, {"\\text{m}", "\\text{}"}};
  static const char* kRemoved[] = {"square",       "ways",
                                   "integers",     "dollars",
                                   "mph",          "inches",
                                   "ft",           "hours",
                                   "km",           "units",
                                   "\\ldots",      "sue",
                                   "points",       "feet",
                                   "minutes",      "digits",
                                   "cents",        "degrees",
                                   "cm",           "gm",
                                   "pounds",       "meters",
                                   "meals",        "edges",
                                   "students",     "childrentickets",
                                   "multiples",    "\\text{s}",
                                   "\\text{.}",    "\\text{\ns}",
                                   "\\text{}^2",   "\\text{}^3",
                                   "\\text{\n}",   "\\text{}",
                                   "\\mathrm{th}", "^\\circ",
                                   "^{\\circ}",    "\\;",
                                   ",\\!",         "{,}",
                                   "\"",           "\\dots"};
  auto parts = split(answer, "=");
  std::string s = parts.back();
  for (const auto& [before, after] : kSubstitutions) replace_all(s, before, after);
  for (const char* e : kRemoved) replace_all(s, e, "");
  static const std::regex dollars(R"((.*?)(\$)(.*?)(\$)(.*))");
  static const std::regex text(R"((\\text\{)(.*?)(\}))");
  static const std::regex textbf(R"((\\textbf\{)(.*?)(\}))");
  static const std::regex overline(R"((\\overline\{)(.*?)(\}))");
  static const std::regex boxed(R"((\\boxed\{)(.*)(\}))");
  static const std::regex frac(R"((frac)([^{])(.))");
  static const std::regex sqrt(R"((sqrt)([^{]))");
  s = std::regex_replace(s, dollars, "$$$3$$");
  s = std::regex_replace(s, text, "$2");
  s = std::regex_replace(s, textbf, "$2");
  s = std::regex_replace(s, overline, "$2");
  s = std::regex_replace(s, boxed, "$2");
  s = std::regex_replace(s, frac, "frac{$2}{$3}");
  s = std::regex_replace(s, sqrt, "sqrt{$2}");
  replace_all(s, "$", "");
  std::string no_commas = s;
  replace_all(no_commas, ",", "");
  if (is_ascii_digits(no_commas)) s = no_commas;
  return s;
}

std::string latex_to_plain_text(const std::string& latex) {
  std::string s = latex;
  replace_all(s, "\\frac", " \\frac");  // as PRM800K: keeps "3\frac12" a mixed number
  size_t i = 0;
  return trim(plain(s, i, 0));
}

std::string prm_normalize(const std::string& answer) {
  std::string expr = answer;
  unwrap_text(expr);
  replace_all(expr, "\\%", "%");
  replace_all(expr, "\\$", "$");
  replace_all(expr, "$", "");
  replace_all(expr, "%", "");
  replace_all(expr, " or ", " , ");
  replace_all(expr, " and ", " , ");
  replace_all(expr, "million", "*10^6");
  replace_all(expr, "billion", "*10^9");
  replace_all(expr, "trillion", "*10^12");
  static const char* kUnits[] = {"degree", "cm",   "centimeter", "meter", "mile", "second", "minute", "hour",
                                 "day",    "week", "month",      "year",  "foot", "feet",   "inch",   "yard"};
  static const std::vector<std::regex> unit_res = [] {
    std::vector<std::regex> v;
    for (const char* unit : kUnits) v.emplace_back(std::string(unit) + R"((es)?(s)? *(\^[0-9]+)?)");
    return v;
  }();
  for (const auto& re : unit_res) expr = std::regex_replace(expr, re, "");
  static const std::regex circ(R"(\^ *\\circ)"), comma_bang(R"(,\\! *)"), minus("- *"),
      mixed("([0-9]) +([0-9])");
  expr = std::regex_replace(expr, circ, "");
  if (!expr.empty() && expr.front() == '{' && expr.back() == '}') expr = expr.substr(1, expr.size() - 2);
  expr = std::regex_replace(expr, comma_bang, "");
  double v;
  if (parse_float(expr, v) && float_is_int(v)) expr = int_string(std::round(v));
  if (expr.find('\\') != std::string::npos) expr = latex_to_plain_text(expr);
  expr = std::regex_replace(expr, minus, "-");
  expr = std::regex_replace(expr, mixed, "$1+$2");
  replace_all(expr, " ", "");
  replace_all(expr, "{", "");
  replace_all(expr, "}", "");
  for (char& c : expr) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (prm_str_is_int(expr)) {
    std::string no_commas = expr;
    replace_all(no_commas, ",", "");
    double x;
    if (parse_float(no_commas, x)) expr = int_string(std::trunc(x));
  }
  return expr;
}

std::string normalize_answer(const std::string& answer) {
  std::string s = answer;
  replace_all(s, "\n", " ");
  replace_all(s, "\\\\", "\x01");  // matrix row breaks survive the "\ " spacing rule below
  s = trim(s);
  // $...$ around the whole answer, and a trailing sentence period.
  while (s.size() >= 2 && s.front() == '$' && s.back() == '$') s = trim(s.substr(1, s.size() - 2));
  replace_all(s, "\\dfrac", "\\frac");
  replace_all(s, "\\tfrac", "\\frac");
  replace_all(s, "\\left.", "");
  replace_all(s, "\\right.", "");
  replace_all(s, "\\left", "");
  replace_all(s, "\\right", "");
  replace_all(s, "\\displaystyle", "");
  replace_all(s, "\\mbox{", "\\text{");
  for (const char* sp : {"\\!", "\\,", "\\;", "\\:"}) replace_all(s, sp, "");
  replace_all(s, "\\ ", " ");
  replace_all(s, "~", " ");
  for (const char* deg : {"^{\\circ}", "^\\circ", "{}^\\circ", "\\circ", "\\degree", "°"})
    replace_all(s, deg, "");
  for (const char* pct : {"\\%", "%", "\\$", "$"}) replace_all(s, pct, "");
  for (const char* dots : {"\\ldots", "\\cdots", "\\dots"}) replace_all(s, dots, "");
  replace_all(s, ",\\text{and}", ",");
  replace_all(s, "\\text{and}", ",");
  replace_all(s, "\\text{ and }", ",");
  s = trim(s);
  while (!s.empty() && s.back() == '.') s = trim(s.substr(0, s.size() - 1));
  s = strip_trailing_units(s);
  s = unwrap_text_macros(s);
  s = strip_variable_prefix(s);
  // "7 3/4" is a mixed number; make it explicit before spaces go.
  static const std::regex spaced_mixed(R"((^|[^\d.])(\d+)\s+(\d+)/(\d+)(?![\d.]))");
  s = std::regex_replace(s, spaced_mixed, "$1$2\\frac{$3}{$4}");
  s = remove_spaces(s);
  replace_all(s, "\x01", "\\\\");
  replace_all(s, "{,}", "");
  static const std::regex thousands(R"(^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$)");
  if (std::regex_match(s, thousands)) replace_all(s, ",", "");
  try {
    s = fix_sqrt(s);
  } catch (const std::invalid_argument&) {
  }
  s = fix_fracs(s);
  if (!s.empty() && s[0] == '.') s = "0" + s;
  for (const char* p : {"{.", "-.", "(.", ",.", "[.", "+."}) {
    std::string from = p, to = std::string(1, p[0]) + "0.";
    replace_all(s, from, to);
  }
  while (!s.empty() && s.back() == '.') s.pop_back();
  s = strip_decimal_zeros(s);
  // "(C)" -> "C" for multiple-choice letters.
  static const std::regex choice(R"(^\(([A-Za-z])\)$)");
  std::smatch m;
  if (std::regex_match(s, m, choice)) s = m[1].str();
  return s;
}

}  // namespace pulse::rl

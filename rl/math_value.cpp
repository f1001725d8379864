// Exact answer values: rationals, square roots, pi and letter polynomials in one normal form.
#include "rl/math_value.h"

#include <cctype>
#include <stdexcept>

namespace pulse::rl {
namespace {

using i128 = __int128;

i128 abs128(i128 v) {
  return v < 0 ? -v : v;
}

i128 gcd128(i128 a, i128 b) {
  a = abs128(a);
  b = abs128(b);
  while (b != 0) {
    i128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

i128 mul_checked(i128 a, i128 b) {
  i128 r;
  if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error("rational overflow");
  return r;
}

i128 add_checked(i128 a, i128 b) {
  i128 r;
  if (__builtin_add_overflow(a, b, &r)) throw std::overflow_error("rational overflow");
  return r;
}

std::string i128_str(i128 v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  std::string s;
  while (v != 0) {
    int d = static_cast<int>(v % 10);
    s.insert(s.begin(), static_cast<char>('0' + (d < 0 ? -d : d)));
    v /= 10;
  }
  return neg ? "-" + s : s;
}

}  // namespace

Rational Rational::of(i128 n, i128 d) {
  if (d == 0) throw std::domain_error("division by zero");
  if (d < 0) {
    n = -n;
    d = -d;
  }
  i128 g = gcd128(n, d);
  if (g > 1) {
    n /= g;
    d /= g;
  }
  Rational r;
  r.num = n;
  r.den = d;
  return r;
}

Rational Rational::operator+(const Rational& o) const {
  i128 g = gcd128(den, o.den);
  i128 l = mul_checked(den / g, o.den);
  return of(add_checked(mul_checked(num, l / den), mul_checked(o.num, l / o.den)), l);
}
Rational Rational::operator-(const Rational& o) const {
  return *this + of(-o.num, o.den);
}
Rational Rational::operator*(const Rational& o) const {
  i128 g1 = gcd128(num, o.den), g2 = gcd128(o.num, den);
  if (g1 == 0) g1 = 1;
  if (g2 == 0) g2 = 1;
  return of(mul_checked(num / g1, o.num / g2), mul_checked(den / g2, o.den / g1));
}
Rational Rational::operator/(const Rational& o) const {
  if (o.num == 0) throw std::domain_error("division by zero");
  return *this * of(o.den, o.num);
}
bool Rational::operator<(const Rational& o) const {
  return mul_checked(num, o.den) < mul_checked(o.num, den);
}
std::string Rational::str() const {
  return den == 1 ? i128_str(num) : i128_str(num) + "/" + i128_str(den);
}

bool MonomialKey::operator<(const MonomialKey& o) const {
  if (radicand != o.radicand) return radicand < o.radicand;
  return symbols < o.symbols;
}

bool MathValue::operator==(const MathValue& o) const {
  if (terms.size() != o.terms.size()) return false;
  auto a = terms.begin();
  auto b = o.terms.begin();
  for (; a != terms.end(); ++a, ++b)
    if (!(a->first == b->first) || !(a->second == b->second)) return false;
  return true;
}

bool MathValue::is_constant_rational() const {
  if (terms.empty()) return true;
  return terms.size() == 1 && terms.begin()->first.radicand == 1 && terms.begin()->first.symbols.empty();
}

std::string MathValue::str() const {
  if (terms.empty()) return "0";
  std::string s;
  for (const auto& [key, c] : terms) {
    if (!s.empty()) s += " + ";
    s += c.str();
    if (key.radicand != 1) s += "*sqrt(" + std::to_string(key.radicand) + ")";
    for (const auto& [sym, p] : key.symbols) s += "*" + sym + (p == 1 ? "" : "^" + std::to_string(p));
  }
  return s;
}

namespace {

// ---- value arithmetic ------------------------------------------------------------------------------

void add_term(MathValue& v, const MonomialKey& k, const Rational& c) {
  auto it = v.terms.find(k);
  if (it == v.terms.end()) {
    if (!c.is_zero()) v.terms.emplace(k, c);
    return;
  }
  it->second = it->second + c;
  if (it->second.is_zero()) v.terms.erase(it);
}

MathValue constant(const Rational& c) {
  MathValue v;
  add_term(v, MonomialKey{}, c);
  return v;
}

MathValue symbol(const std::string& name) {
  MathValue v;
  MonomialKey k;
  k.symbols.push_back({name, 1});
  v.terms.emplace(k, Rational::of(1));
  return v;
}

MathValue add(const MathValue& a, const MathValue& b, bool subtract = false) {
  MathValue r = a;
  for (const auto& [k, c] : b.terms) add_term(r, k, subtract ? Rational::of(0) - c : c);
  return r;
}

constexpr size_t kMaxTerms = 256;  // keeps hostile inputs (x+y)^64 cheap

MathValue multiply(const MathValue& a, const MathValue& b) {
  MathValue r;
  for (const auto& [ka, ca] : a.terms) {
    for (const auto& [kb, cb] : b.terms) {
      // sqrt(ra) * sqrt(rb) = g * sqrt((ra/g)(rb/g)), g = gcd; the product stays square-free.
      int64_t g = static_cast<int64_t>(gcd128(ka.radicand, kb.radicand));
      MonomialKey k;
      k.radicand = (ka.radicand / g) * (kb.radicand / g);
      std::map<std::string, int> powers;
      for (const auto& [s, p] : ka.symbols) powers[s] += p;
      for (const auto& [s, p] : kb.symbols) powers[s] += p;
      for (const auto& [s, p] : powers)
        if (p != 0) k.symbols.push_back({s, p});
      add_term(r, k, ca * cb * Rational::of(g));
      if (r.terms.size() > kMaxTerms) throw std::overflow_error("too many terms");
    }
  }
  return r;
}

// 1/v for a single term, or for a + b*sqrt(d) via the conjugate; nullopt otherwise.
std::optional<MathValue> inverse(const MathValue& v) {
  if (v.terms.empty()) return std::nullopt;
  if (v.terms.size() == 1) {
    const auto& [k, c] = *v.terms.begin();
    MonomialKey inv;
    inv.radicand = k.radicand;
    for (const auto& [s, p] : k.symbols) inv.symbols.push_back({s, -p});
    MathValue r;
    // 1/(c sqrt(r) X) = sqrt(r) / (c r) * X^-1
    r.terms.emplace(inv, Rational::of(1) / (c * Rational::of(k.radicand)));
    return r;
  }
  int64_t d = 1;
  for (const auto& [k, c] : v.terms) {
    if (!k.symbols.empty()) return std::nullopt;
    if (k.radicand != 1) {
      if (d != 1 && d != k.radicand) return std::nullopt;
      d = k.radicand;
    }
  }
  MathValue conj;
  for (const auto& [k, c] : v.terms) add_term(conj, k, k.radicand == 1 ? c : Rational::of(0) - c);
  MathValue norm = multiply(v, conj);  // a^2 - b^2 d, rational
  if (!norm.is_constant_rational() || norm.terms.empty()) return std::nullopt;
  return multiply(conj, constant(Rational::of(1) / norm.terms.begin()->second));
}

std::optional<MathValue> power(const MathValue& base, int64_t n) {
  if (n < -64 || n > 64) return std::nullopt;
  MathValue b = base;
  if (n < 0) {
    auto inv = inverse(base);
    if (!inv) return std::nullopt;
    b = *inv;
    n = -n;
  }
  MathValue r = constant(Rational::of(1));
  for (int64_t i = 0; i < n; ++i) r = multiply(r, b);
  return r;
}

// Largest s with s^2 | n, for n <= 4e12 (trial division); nullopt when n is too large to factor cheaply.
std::optional<std::pair<i128, i128>> split_square(i128 n) {
  if (n > static_cast<i128>(4000000000000LL)) return std::nullopt;
  i128 outside = 1, inside = 1;
  for (i128 p = 2; p * p <= n; ++p) {
    while (n % (p * p) == 0) {
      n /= p * p;
      outside *= p;
    }
    if (n % p == 0) {
      n /= p;
      inside *= p;
    }
  }
  inside *= n;
  return std::make_pair(outside, inside);
}

// sqrt of a non-negative rational p/q = sqrt(p q) / q in normal form.
std::optional<MathValue> sqrt_value(const MathValue& v) {
  if (!v.is_constant_rational()) return std::nullopt;
  Rational c = v.terms.empty() ? Rational::of(0) : v.terms.begin()->second;
  if (c.num < 0) return std::nullopt;
  if (c.num == 0) return MathValue{};
  auto split = split_square(mul_checked(c.num, c.den));
  if (!split) return std::nullopt;
  MathValue r;
  MonomialKey k;
  k.radicand = static_cast<int64_t>(split->second);
  r.terms.emplace(k, Rational::of(split->first, c.den));
  return r;
}

std::optional<MathValue> cube_root_value(const MathValue& v) {
  if (!v.is_constant_rational()) return std::nullopt;
  Rational c = v.terms.empty() ? Rational::of(0) : v.terms.begin()->second;
  auto icbrt = [](i128 x) -> std::optional<i128> {
    bool neg = x < 0;
    x = abs128(x);
    for (i128 r = 0; r * r * r <= x && r <= 2000000; ++r)
      if (r * r * r == x) return neg ? -r : r;
    return std::nullopt;
  };
  auto n = icbrt(c.num), d = icbrt(c.den);
  if (!n || !d) return std::nullopt;
  return constant(Rational::of(*n, *d));
}

// ---- parser ----------------------------------------------------------------------------------------

struct NotAValue {};

class Parser {
 public:
  Parser(const std::string& s, const ValueParseOptions& o) : s_(s), opt_(o) {}

  MathValue parse_all() {
    MathValue v = expr();
    ws();
    if (pos_ != s_.size()) throw NotAValue{};
    return v;
  }

 private:
  const std::string& s_;
  ValueParseOptions opt_;
  size_t pos_ = 0;
  int depth_ = 0;

  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  bool ws() {
    size_t start = pos_;
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    return pos_ != start;
  }
  bool eat(char c) {
    ws();
    if (peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) throw NotAValue{};
  }
  // The command name after a backslash at pos_, without consuming it ("" if none).
  std::string peek_command() const {
    if (peek() != '\\') return "";
    size_t i = pos_ + 1;
    while (i < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i]))) ++i;
    return s_.substr(pos_ + 1, i - pos_ - 1);
  }
  bool eat_command(const std::string& name) {
    ws();
    if (peek_command() == name) {
      pos_ += 1 + name.size();
      return true;
    }
    return false;
  }
  std::string peek_word() const {
    size_t i = pos_;
    while (i < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i]))) ++i;
    return s_.substr(pos_, i - pos_);
  }

  struct Guard {
    int& d;
    explicit Guard(int& depth) : d(depth) {
      if (++d > 64) throw NotAValue{};
    }
    ~Guard() { --d; }
  };

  MathValue expr() {
    Guard g(depth_);
    MathValue v = term();
    for (;;) {
      if (eat('+')) {
        v = add(v, term());
      } else if (eat('-')) {
        v = add(v, term(), true);
      } else {
        return v;
      }
    }
  }

  bool starts_atom() {
    char c = peek();
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '(' || c == '{') return true;
    if (std::isalpha(static_cast<unsigned char>(c))) return true;
    std::string cmd = peek_command();
    return cmd == "frac" || cmd == "dfrac" || cmd == "tfrac" || cmd == "sqrt" || cmd == "pi" ||
           cmd == "infty";
  }

  // An integer literal followed by a fraction of integer literals is a mixed number: 3\frac{1}{2} = 7/2.
  std::optional<Rational> try_mixed_fraction(bool had_space) {
    size_t save = pos_;
    std::string cmd = peek_command();
    if (cmd == "frac" || cmd == "dfrac" || cmd == "tfrac") {
      pos_ += 1 + cmd.size();
      auto a = int_arg(), b = a ? int_arg() : std::nullopt;
      if (a && b && *b != 0) return Rational::of(*a, *b);
    } else if (had_space && std::isdigit(static_cast<unsigned char>(peek()))) {  // "7 3/4"
      auto a = int_literal();
      if (a && eat('/')) {
        ws();
        auto b = int_literal();
        if (b && *b != 0 && !std::isdigit(static_cast<unsigned char>(peek())) && peek() != '.')
          return Rational::of(*a, *b);
      }
    }
    pos_ = save;
    return std::nullopt;
  }
  std::optional<i128> int_literal() {
    size_t start = pos_;
    i128 v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      v = add_checked(mul_checked(v, 10), peek() - '0');
      ++pos_;
    }
    if (pos_ == start || peek() == '.') {
      pos_ = start;
      return std::nullopt;
    }
    return v;
  }
  // {123} or a single digit, as in \frac{1}{2} / \frac12.
  std::optional<i128> int_arg() {
    ws();
    if (peek() == '{') {
      ++pos_;
      ws();
      auto v = int_literal();
      ws();
      if (!v || peek() != '}') return std::nullopt;
      ++pos_;
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(peek()))) return static_cast<i128>(s_[pos_++] - '0');
    return std::nullopt;
  }

  MathValue term() {
    bool negative = false;
    for (;;) {  // leading signs
      if (eat('-')) {
        negative = !negative;
      } else if (!eat('+')) {
        break;
      }
    }
    ws();
    bool first_is_int = std::isdigit(static_cast<unsigned char>(peek()));
    size_t start = pos_;
    MathValue v = factor();
    bool single_int = first_is_int && v.is_constant_rational() &&
                      s_.find_first_not_of("0123456789", start) >= pos_;  // a bare integer literal
    for (int n_factors = 1;; ++n_factors) {
      bool had_space = ws();
      if (n_factors == 1 && single_int) {
        if (auto frac = try_mixed_fraction(had_space)) {
          v = add(v, constant(*frac));
          continue;
        }
      }
      if (eat('*') || eat_command("cdot") || eat_command("times")) {
        v = multiply(v, factor());
      } else if (eat('/') || eat_command("div")) {
        auto inv = inverse(factor());
        if (!inv) throw NotAValue{};
        v = multiply(v, *inv);
      } else if (starts_atom()) {
        // Implicit product: "2x", "3\sqrt{2}", "(1+x)(2)". A bare number after something else is
        // ambiguous ("7 3", "x2") and not a value.
        if (std::isdigit(static_cast<unsigned char>(peek())) || peek() == '.') throw NotAValue{};
        v = multiply(v, factor());
      } else {
        break;
      }
    }
    return negative ? multiply(v, constant(Rational::of(-1))) : v;
  }

  // factor := atom ('^' exponent)?
  MathValue factor() {
    Guard g(depth_);
    MathValue base = atom();
    if (eat('^')) {
      ws();
      MathValue e;
      if (peek() == '{') {
        ++pos_;
        e = expr();
        expect('}');
      } else if (std::isdigit(static_cast<unsigned char>(peek()))) {
        e = constant(Rational::of(s_[pos_++] - '0'));
      } else if (peek() == '(') {
        ++pos_;
        e = expr();
        expect(')');
      } else if (peek() == '-') {  // plain text "x^-1"
        ++pos_;
        MathValue inner = atom();
        e = multiply(inner, constant(Rational::of(-1)));
      } else {
        throw NotAValue{};
      }
      if (!e.is_constant_rational()) throw NotAValue{};
      Rational r = e.terms.empty() ? Rational::of(0) : e.terms.begin()->second;
      std::optional<MathValue> p;
      if (r.den == 1) {
        p = power(base, static_cast<int64_t>(r.num));
      } else if (r.den == 2 && r.num == 1) {
        p = sqrt_value(base);
      }
      if (!p) throw NotAValue{};
      return *p;
    }
    return base;
  }

  MathValue group_or_char() {
    ws();
    if (peek() == '{') {
      ++pos_;
      MathValue v = expr();
      expect('}');
      return v;
    }
    char c = peek();
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++pos_;
      return constant(Rational::of(c - '0'));
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      ++pos_;
      return symbol(std::string(1, c));
    }
    if (c == '\\') return atom();
    throw NotAValue{};
  }

  MathValue number() {
    i128 n = 0, d = 1;
    bool digits = false, dot = false;
    while (true) {
      char c = peek();
      if (std::isdigit(static_cast<unsigned char>(c))) {
        n = add_checked(mul_checked(n, 10), c - '0');
        if (dot) d = mul_checked(d, 10);
        digits = true;
        ++pos_;
      } else if (c == '.' && !dot && std::isdigit(static_cast<unsigned char>(peek(1)))) {
        dot = true;
        ++pos_;
      } else {
        break;
      }
    }
    if (!digits) throw NotAValue{};
    return constant(Rational::of(n, d));
  }

  MathValue atom() {
    Guard g(depth_);
    ws();
    char c = peek();
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1)))))
      return number();
    if (c == '(' || c == '{') {
      ++pos_;
      MathValue v = expr();
      expect(c == '(' ? ')' : '}');
      return v;
    }
    if (c == '\\') {
      std::string cmd = peek_command();
      pos_ += 1 + cmd.size();
      if (cmd == "frac" || cmd == "dfrac" || cmd == "tfrac") {
        MathValue a = group_or_char();
        MathValue b = group_or_char();
        auto inv = inverse(b);
        if (!inv) throw NotAValue{};
        return multiply(a, *inv);
      }
      if (cmd == "sqrt") {
        ws();
        int index = 2;
        if (peek() == '[') {
          ++pos_;
          ws();
          auto n = int_literal();
          if (!n || !eat(']')) throw NotAValue{};
          index = static_cast<int>(*n);
        }
        MathValue arg = group_or_char();
        auto r = index == 2 ? sqrt_value(arg) : index == 3 ? cube_root_value(arg) : std::nullopt;
        if (!r) throw NotAValue{};
        return *r;
      }
      if (cmd == "pi") return symbol("\\pi");
      if (cmd == "infty") return symbol("\\infty");
      throw NotAValue{};
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      std::string word = peek_word();
      if (opt_.plain_text) {
        if (word.rfind("sqrt", 0) == 0) {
          pos_ += 4;
          ws();
          MathValue arg;
          if (peek() == '(') {
            ++pos_;
            arg = expr();
            expect(')');
          } else {
            arg = atom();
          }
          auto r = sqrt_value(arg);
          if (!r) throw NotAValue{};
          return *r;
        }
        if (word == "pi") {
          pos_ += 2;
          return symbol("\\pi");
        }
        if (word == "inf" || word == "infty") {
          pos_ += word.size();
          return symbol("\\infty");
        }
        // sympy's split_symbols: "xy" is x*y.
        MathValue v = symbol(std::string(1, c));
        ++pos_;
        while (std::isalpha(static_cast<unsigned char>(peek())) && peek_word().rfind("sqrt", 0) != 0 &&
               peek_word() != "pi") {
          v = multiply(v, symbol(std::string(1, peek())));
          ++pos_;
        }
        return v;
      }
      if (word.size() != 1) throw NotAValue{};  // a word, not a product of letters
      ++pos_;
      return symbol(word);
    }
    throw NotAValue{};
  }
};

}  // namespace

std::optional<MathValue> parse_math_value(const std::string& text, const ValueParseOptions& options) {
  if (text.empty() || text.size() > 512) return std::nullopt;
  try {
    Parser p(text, options);
    return p.parse_all();
  } catch (const NotAValue&) {
    return std::nullopt;
  } catch (const std::exception&) {  // overflow, division by zero
    return std::nullopt;
  }
}

}  // namespace pulse::rl

// Seeded synthetic math and code tasks with short, regular reference solutions.
#include "datasets/synthetic.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>

#include "datasets/loaders.h"
#include "kernels/splitmix64.h"

namespace pulse::datasets {
namespace {

// A SplitMix64 stream per (seed, problem index, stream): platform-stable (std::uniform_int_distribution
// is not specified bit-for-bit). The first output is skipped.
struct Rng {
  kernels::SplitMix64 gen;
  Rng(uint64_t seed, uint64_t index, uint64_t stream)
      : gen{seed ^ (index * kernels::kSplitMix64Gamma) ^ (stream << 56)} {
    next();
  }
  uint64_t next() { return gen.next(); }
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
};

std::string s(int64_t v) {
  return std::to_string(v);
}

// "a+b" with a sign-aware operator: 3+-2 reads "3+(-2)"; operands here are never negative except results.
void math_problem(Problem& p, int level, Rng& r) {
  std::string q, sol;
  int64_t ans = 0;
  switch (level) {
    case 1: {
      int64_t a = r.uniform(0, 9), b = r.uniform(0, 9);
      ans = a + b;
      q = "What is " + s(a) + "+" + s(b) + "?";
      sol = s(a) + "+" + s(b) + "=" + s(ans) + ".";
      break;
    }
    case 2: {
      if (r.next() & 1) {
        int64_t a = r.uniform(0, 20), b = r.uniform(0, 20);
        ans = a - b;
        q = "What is " + s(a) + "-" + s(b) + "?";
        sol = s(a) + "-" + s(b) + "=" + s(ans) + ".";
      } else {
        int64_t a = r.uniform(0, 9), b = r.uniform(0, 9);
        ans = a * b;
        q = "What is " + s(a) + "*" + s(b) + "?";
        sol = s(a) + "*" + s(b) + "=" + s(ans) + ".";
      }
      break;
    }
    case 3: {
      int64_t a = r.uniform(0, 20), b = r.uniform(0, 9), c = r.uniform(0, 9);
      ans = a + b * c;
      q = "What is " + s(a) + "+" + s(b) + "*" + s(c) + "?";
      sol = s(b) + "*" + s(c) + "=" + s(b * c) + ". " + s(a) + "+" + s(b * c) + "=" + s(ans) + ".";
      break;
    }
    case 4: {
      int64_t a = r.uniform(2, 9), x = r.uniform(0, 12), b = r.uniform(1, 20);
      int64_t c = a * x + b;
      ans = x;
      q = "Solve for x: " + s(a) + "x+" + s(b) + "=" + s(c) + ".";
      sol = s(a) + "x=" + s(c) + "-" + s(b) + "=" + s(a * x) + ". x=" + s(a * x) + "/" + s(a) + "=" + s(x) +
            ".";
      break;
    }
    default: {
      int64_t a = r.uniform(1, 9), b = r.uniform(1, 9), c = r.uniform(2, 9), d = r.uniform(0, 30);
      ans = (a + b) * c - d;
      q = "What is (" + s(a) + "+" + s(b) + ")*" + s(c) + "-" + s(d) + "?";
      sol = s(a) + "+" + s(b) + "=" + s(a + b) + ". " + s(a + b) + "*" + s(c) + "=" + s((a + b) * c) + ". " +
            s((a + b) * c) + "-" + s(d) + "=" + s(ans) + ".";
      break;
    }
  }
  p.question = q;
  p.answer = s(ans);
  p.solution = sol + " \\boxed{" + p.answer + "}";
}

std::string py_list(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + s(v[i]);
  return out + "]";
}

std::string py_str(const std::string& v) {
  return "'" + v + "'";
}  // letters only: no escapes needed

std::vector<int64_t> rand_list(Rng& r) {
  std::vector<int64_t> v(static_cast<size_t>(r.uniform(3, 6)));
  for (auto& x : v) x = r.uniform(-20, 50);
  return v;
}

std::string rand_word(Rng& r) {
  std::string w(static_cast<size_t>(r.uniform(3, 7)), 'a');
  for (auto& c : w) c = static_cast<char>('a' + r.uniform(0, 7));
  return w;
}

struct CodeTemplate {
  const char* text;
  const char* code;   // "{K}" is replaced by the template constant
  const char* wrong;  // a plausible wrong program that fails every test (the weak teacher's demonstration)
  // One assert line for random inputs.
  std::function<std::string(Rng&, int64_t k)> make_test;
  bool has_constant;
};

const std::vector<CodeTemplate>& code_templates() {
  static const std::vector<CodeTemplate> t = {
      {"Write a function to add {K} to a number.", "def add_k(x):\n    return x + {K}\n",
       "def add_k(x):\n    return x - {K}\n",
       [](Rng& r, int64_t k) {
         int64_t v = r.uniform(-50, 100);
         return "assert add_k(" + s(v) + ") == " + s(v + k);
       },
       true},
      {"Write a function to multiply two numbers.", "def multiply(a, b):\n    return a * b\n",
       "def multiply(a, b):\n    return a + b\n",
       [](Rng& r, int64_t) {
         int64_t a = r.uniform(-12, 12), b = r.uniform(-12, 12);
         return "assert multiply(" + s(a) + ", " + s(b) + ") == " + s(a * b);
       },
       false},
      {"Write a function to find the largest number in a list.", "def max_of_list(xs):\n    return max(xs)\n",
       "def max_of_list(xs):\n    return min(xs)\n",
       [](Rng& r, int64_t) {
         auto v = rand_list(r);
         return "assert max_of_list(" + py_list(v) + ") == " + s(*std::max_element(v.begin(), v.end()));
       },
       false},
      {"Write a function to find the smallest number in a list.",
       "def min_of_list(xs):\n    return min(xs)\n", "def min_of_list(xs):\n    return max(xs)\n",
       [](Rng& r, int64_t) {
         auto v = rand_list(r);
         return "assert min_of_list(" + py_list(v) + ") == " + s(*std::min_element(v.begin(), v.end()));
       },
       false},
      {"Write a function to find the sum of a list of numbers.", "def sum_list(xs):\n    return sum(xs)\n",
       "def sum_list(xs):\n    return len(xs)\n",
       [](Rng& r, int64_t) {
         auto v = rand_list(r);
         return "assert sum_list(" + py_list(v) +
                ") == " + s(std::accumulate(v.begin(), v.end(), int64_t{0}));
       },
       false},
      {"Write a function to reverse a string.", "def reverse_string(s):\n    return s[::-1]\n",
       "def reverse_string(s):\n    return s[1:]\n",
       [](Rng& r, int64_t) {
         std::string w = rand_word(r), rev(w.rbegin(), w.rend());
         return "assert reverse_string(" + py_str(w) + ") == " + py_str(rev);
       },
       false},
      {"Write a function to check whether a number is even.", "def is_even(n):\n    return n % 2 == 0\n",
       "def is_even(n):\n    return n % 2 == 1\n",
       [](Rng& r, int64_t) {
         int64_t v = r.uniform(-30, 100);
         return "assert is_even(" + s(v) + ") == " + (v % 2 == 0 ? "True" : "False");
       },
       false},
      {"Write a function to return the square of a number.", "def square(x):\n    return x * x\n",
       "def square(x):\n    return x * 2\n",
       [](Rng& r, int64_t) {
         int64_t v = r.uniform(-20, 20);
         return "assert square(" + s(v) + ") == " + s(v * v);
       },
       false},
      {"Write a function to count how many times a character occurs in a string.",
       "def count_char(s, c):\n    return s.count(c)\n", "def count_char(s, c):\n    return s.count(c) + 1\n",
       [](Rng& r, int64_t) {
         std::string w = rand_word(r);
         char c = static_cast<char>('a' + r.uniform(0, 7));
         return "assert count_char(" + py_str(w) + ", " + py_str(std::string(1, c)) +
                ") == " + s(std::count(w.begin(), w.end(), c));
       },
       false},
      {"Write a function to find the absolute difference of two numbers.",
       "def abs_diff(a, b):\n    return abs(a - b)\n", "def abs_diff(a, b):\n    return abs(a + b)\n",
       [](Rng& r, int64_t) {
         int64_t a = r.uniform(-50, 50), b = r.uniform(-50, 50);
         return "assert abs_diff(" + s(a) + ", " + s(b) + ") == " + s(std::llabs(a - b));
       },
       false},
      {"Write a function to repeat a string {K} times.", "def repeat_k(s):\n    return s * {K}\n",
       "def repeat_k(s):\n    return s * ({K} - 1)\n",
       [](Rng& r, int64_t k) {
         std::string w = rand_word(r), rep;
         for (int64_t i = 0; i < k; ++i) rep += w;
         return "assert repeat_k(" + py_str(w) + ") == " + py_str(rep);
       },
       true},
      {"Write a function to return the sum of the first and last elements of a list.",
       "def first_last_sum(xs):\n    return xs[0] + xs[-1]\n",
       "def first_last_sum(xs):\n    return xs[0] + xs[1]\n",
       [](Rng& r, int64_t) {
         auto v = rand_list(r);
         return "assert first_last_sum(" + py_list(v) + ") == " + s(v.front() + v.back());
       },
       false},
  };
  return t;
}

void replace_k(std::string& text, int64_t k) {
  size_t pos;
  while ((pos = text.find("{K}")) != std::string::npos) text.replace(pos, 3, s(k));
}

}  // namespace

std::vector<Problem> synthetic_math(int64_t n, uint64_t seed, int max_level) {
  max_level = std::clamp(max_level, 1, 5);
  std::vector<Problem> out;
  for (int64_t i = 0; i < n; ++i) {
    Rng r(seed, static_cast<uint64_t>(i), 1);
    Problem p;
    p.kind = TaskKind::Math;
    p.id = "synthetic/math/" + s(i);
    p.subject = "synthetic";
    p.level = 1 + static_cast<int>(i % max_level);
    math_problem(p, p.level, r);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Problem> synthetic_code(int64_t n, uint64_t seed, double demo_error_rate) {
  const auto& templates = code_templates();
  std::vector<Problem> out;
  for (int64_t i = 0; i < n; ++i) {
    Rng r(seed, static_cast<uint64_t>(i), 2);
    const CodeTemplate& t = templates[r.next() % templates.size()];
    int64_t k = t.has_constant ? r.uniform(2, 9) : 0;
    Problem p;
    p.kind = TaskKind::Code;
    p.id = "synthetic/code/" + s(i);
    std::string text = t.text, code = t.code;
    p.subject = code.substr(4, code.find('(') - 4);  // "def NAME(" -> NAME
    replace_k(text, k);
    replace_k(code, k);
    for (int j = 0; j < 3; ++j) p.tests.push_back(t.make_test(r, k));
    p.solution = code;
    // The teacher's slip is drawn from a stream of its own, so the tasks do not depend on the rate.
    Rng teacher(seed, static_cast<uint64_t>(i), 3);
    if (demo_error_rate > 0 && static_cast<double>(teacher.next() >> 11) * 0x1.0p-53 < demo_error_rate) {
      p.demonstration = t.wrong;
      replace_k(p.demonstration, k);
    }
    p.question = mbpp_prompt(text, p.tests);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace pulse::datasets

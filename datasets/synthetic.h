// Synthetic tasks for the embedded default run: a from-scratch tiny model can learn them by SFT and
// then improve by RL. Same Problem record format as the real datasets.
#pragma once
#include <cstdint>
#include <vector>

#include "datasets/problem.h"

namespace pulse::datasets {

/// n arithmetic/algebra problems, levels 1..max_level (clamped to 1..5) in rotation (problem i has
/// level 1 + i % max_level). Each solution is a short regular worked solution ending in \boxed{answer}:
///   1: a+b, 0 <= a,b <= 9                       "3+4=7. \boxed{7}"
///   2: a-b or a*b, operands <= 20 / <= 9         "12-5=7. \boxed{7}"
///   3: a+b*c (two steps, precedence)              "4*5=20. 3+20=23. \boxed{23}"
///   4: solve a*x+b=c for an integer x             "3x=20-5=15. x=15/3=5. \boxed{5}"
///   5: (a+b)*c-d (three steps)                    "2+3=5. 5*4=20. 20-6=14. \boxed{14}"
/// Answers are integers (possibly negative). Problem i depends only on (seed, i): prefixes of a larger
/// n are identical. ids "synthetic/math/<i>", subject "synthetic".
std::vector<Problem> synthetic_math(int64_t n, uint64_t seed, int max_level = 3);

/// n short function-writing tasks in MBPP format (text + three asserts; solution = a correct reference
/// program; kind Code), drawn from a fixed set of templates with random constants and test inputs.
/// With demo_error_rate r in [0, 1], each problem's `demonstration` (the SFT target) is, with
/// probability r (seeded per problem, independent of the task draws), its template's plausible wrong
/// program (an operator, slice or constant off: `x - K` for `x + K`), which fails the problem's asserts;
/// otherwise it is empty (SFT uses the solution). This models a weak teacher: SFT then leaves the policy
/// choosing the wrong program about r of the time, and only the executor's reward tells them apart.
/// Problem i depends only on (seed, i). ids "synthetic/code/<i>"; subject: the template's function name
/// ("add_k"), so that evaluation reports accuracy per kind of task.
std::vector<Problem> synthetic_code(int64_t n, uint64_t seed, double demo_error_rate = 0);

}  // namespace pulse::datasets

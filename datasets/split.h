// Fixed train / held-out split of a problem list.
#pragma once
#include <cstdint>
#include <vector>

#include "datasets/problem.h"

namespace pulse::datasets {

struct Split {
  std::vector<Problem> train, held_out;
};

/// Puts each problem in held_out when hash(seed, problem.id) / 2^64 < held_out_fraction, else in train;
/// input order is kept inside each part. Because the side depends only on (seed, id), a problem stays on
/// its side when the list is reordered or grows. Throws std::invalid_argument unless
/// 0 <= held_out_fraction <= 1.
Split split_problems(std::vector<Problem> problems, double held_out_fraction, uint64_t seed);

}  // namespace pulse::datasets

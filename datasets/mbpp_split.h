// MBPP's standard splits by task_id (google-research mbpp/README.md; Austin et al. 2021 §2.1):
// prompt 1-10 (few-shot examples), test 11-510, validation 511-600, train 601-974.
#pragma once
#include <string>
#include <vector>

#include "datasets/problem.h"

namespace pulse::datasets {

/// The problems of `split` ("all" | "test" | "validation" | "train" | "prompt") among MBPP problems whose
/// ids are "mbpp/<task_id>" (load_mbpp_jsonl), in their order. Throws std::invalid_argument naming an
/// unknown split or an id that is not "mbpp/<number>".
std::vector<Problem> mbpp_split(std::vector<Problem> problems, const std::string& split);

}  // namespace pulse::datasets

// The few-shot MBPP prompt for base (non-chat) models: the format of the MBPP paper's 3-shot prompt as
// the common harnesses run it (Austin et al. 2021 §2.1; OpenCompass's and lm-evaluation-harness's mbpp
// tasks): exemplars MBPP task_ids 2, 3, 4 (from the prompt split, task_ids 1-10), each
//   "You are an expert Python programmer, and here is your task: <text> Your code should pass these
//    tests:\n\n<assert>\n<assert>\n<assert>\n[BEGIN]\n<code>\n[DONE]\n"
// then the task itself in the same form, ending in "[BEGIN]\n"; the model writes the program and
// "[DONE]", where generation stops (kMbppDoneMarker) and rl::extract_code cuts the response.
#pragma once
#include <string>
#include <vector>

#include "datasets/problem.h"

namespace pulse::datasets {

/// The end-of-program marker of the few-shot format; generation stops at it.
inline constexpr const char* kMbppDoneMarker = "[DONE]";

/// The MBPP task_ids used as exemplars, in prompt order.
inline constexpr int kMbppShotTaskIds[] = {2, 3, 4};

/// Rewrites each problem's question (an mbpp_prompt, loaders.h) into the few-shot prompt with the first
/// `shots` (0..3) exemplars of kMbppShotTaskIds, taken from `source` (problems with ids "mbpp/<task_id>"
/// and their reference code, load_mbpp_jsonl), and removes the exemplars themselves from `problems` (their
/// answer is in the prompt; only eval_split all or prompt holds them). Returns how many were removed.
/// shots 0 leaves the problems as they are. Throws
/// std::invalid_argument "<source_name>: data.mbpp_shots = N needs MBPP task_id T (the prompt split) for
/// its exemplars" when an exemplar is missing, and for shots outside 0..3. Thread-compatible.
size_t apply_mbpp_fewshot(std::vector<Problem>& problems, const std::vector<Problem>& source, int shots,
                          const std::string& source_name);

}  // namespace pulse::datasets

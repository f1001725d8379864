// Dataset loaders: MATH, MBPP and GSM8K JSON-lines files into Problem records.
#pragma once
#include <string>
#include <vector>

#include "datasets/problem.h"

namespace pulse::datasets {

/// MATH / MATH-500 jsonl (Hendrycks et al. 2021; prm800k math_splits): fields problem, solution,
/// answer (optional or null: then the last \boxed{} of solution), subject (or type), level (int, "Level N"
/// or null -> 0), unique_id (optional; default "<file name>:<line>"). Records with no answer at all
/// are skipped: in MATH train, 2 solutions end in an empty "\boxed{}" (number_theory/7115, 7117); the 2
/// whose answer is null use "\boxed 2" / "\boxed 9", which extract_boxed reads. Blank lines are skipped.
/// Throws std::runtime_error "<path>:<line>: <what>" on unreadable files, bad JSON or missing fields.
std::vector<Problem> load_math_jsonl(const std::string& path);

/// MBPP jsonl (Austin et al. 2021): text, code, task_id, test_list, test_setup_code. question is
/// mbpp_prompt(text, test_list) (the paper's prompt: task text plus its asserts), solution = code,
/// id "mbpp/<task_id>". Throws like load_math_jsonl.
std::vector<Problem> load_mbpp_jsonl(const std::string& path);

/// GSM8K jsonl (Cobbe et al. 2021): question, answer ending in "#### <number>". answer = that number
/// with thousands commas removed; solution = the worked answer with calculator annotations <<..>>
/// removed and "#### n" turned into "\boxed{n}" (so the MATH grader grades it). id "<file name>:<line>".
/// Throws like load_math_jsonl.
std::vector<Problem> load_gsm8k_jsonl(const std::string& path);

/// The MBPP paper's prompt body: "<text> Your code should pass these tests:\n\n<assert 1>\n<assert 2>...".
std::string mbpp_prompt(const std::string& text, const std::vector<std::string>& tests);

}  // namespace pulse::datasets

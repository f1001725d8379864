// Dataset loaders: MATH, MBPP and GSM8K JSON-lines files into Problem records.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/problem.h"

namespace pulse::datasets {

/// Length limits on a record's text fields, in characters (UTF-8 code points), checked at load before the
/// text goes anywhere else: a record over a limit is refused (the load throws "<path>:<line>: field
/// \"problem\" has N characters, more than data.max_question_chars = M"), never skipped. The members are
/// the settings data.max_question_chars and data.max_answer_chars (app/config.h); the defaults are well above
/// the longest record of MATH (problem 4,309, solution 6,767), GSM8K and MBPP. A line longer than any record
/// within the limits could be (and than 64 MiB) is refused by its size without being read whole.
struct TextLimits {
  int64_t max_question_chars = 16384;  ///< MATH problem, GSM8K question, MBPP text
  int64_t max_answer_chars = 32768;    ///< MATH solution and answer, GSM8K answer, MBPP code and test_list
};

/// What a MATH or GSM8K load skipped, and why. A *data error* is a record that parses and has its fields
/// but no usable reference answer (gold):
///   MATH: no `answer` and the solution's last box is missing, unclosed ("\boxed{3"), empty or has no
///         argument (datasets/boxed.h find_boxed); or an `answer` with unbalanced braces or an unclosed
///         \boxed{ in it;
///   GSM8K: no "#### <number>" line, or an empty one.
/// Such a record is never a Problem (never a gold) and never dropped silently: it is counted here with
/// "<path>:<line>: <reason>". Policy: a load with data errors continues with the valid problems (the
/// caller logs summary(), see app/setup.cpp load_problems); a file with no valid problem at all throws.
/// Structural errors (unreadable file, bad JSON, a missing or mistyped field) always throw.
struct LoadReport {
  static constexpr size_t kMaxExamples = 5;  ///< how many "<path>:<line>: <reason>" entries are kept
  std::string path;                          ///< the file loaded
  size_t records = 0;                        ///< non-blank lines read
  size_t loaded = 0;                         ///< problems returned (records == loaded + data_errors)
  size_t data_errors = 0;                    ///< records skipped because their gold cannot be extracted
  std::vector<std::string> examples;  ///< the first kMaxExamples data errors, "<path>:<line>: <reason>"

  /// Counts one data error at `line` (examples keeps the first kMaxExamples).
  void add_data_error(size_t line, const std::string& reason);
  /// One line: "<path>: 2 of 7500 records are data errors (skipped, no usable reference answer); first:
  /// <path>:5530: ..." or "<path>: 500 records, no data errors".
  std::string summary() const;
};

/// MATH / MATH-500 jsonl (Hendrycks et al. 2021; prm800k math_splits): fields problem, solution,
/// answer (optional or null: then the last \boxed{} of solution), subject (or type), level (int, "Level N"
/// or null -> 0), unique_id (optional; default "<file name>:<line>"). Blank lines are skipped.
/// Records whose gold cannot be extracted are data errors (LoadReport): counted in `*report`, or, when
/// report is nullptr, thrown as "<path>:<line>: <reason>". Measured on ../shared/datasets: MATH train
/// has 2 (lines 5530 and 5532, number_theory/7115 and 7117, end in an empty "\boxed{}"; the 2 records
/// whose answer is null use "\boxed 2" / "\boxed 9", which find_boxed reads), MATH test and MATH-500 none.
/// Throws std::runtime_error "<path>:<line>: <what>" on unreadable files, bad JSON or missing fields, and
/// "<path>: no valid problems ..." when no record is usable.
std::vector<Problem> load_math_jsonl(const std::string& path, LoadReport* report = nullptr,
                                     const TextLimits& limits = {});

/// MBPP jsonl (Austin et al. 2021): text, code, task_id, test_list, test_setup_code. question is
/// mbpp_prompt(text, test_list) (the paper's prompt: task text plus its asserts), solution = code,
/// id "mbpp/<task_id>". Throws like load_math_jsonl.
std::vector<Problem> load_mbpp_jsonl(const std::string& path, const TextLimits& limits = {});

/// GSM8K jsonl (Cobbe et al. 2021): question, answer ending in "#### <number>". answer = that number
/// with thousands commas removed; solution = the worked answer with calculator annotations <<..>>
/// removed and "#### n" turned into "\boxed{n}" (so the MATH grader grades it). id "<file name>:<line>".
/// A record with no "####" line or an empty answer is a data error, reported like load_math_jsonl's
/// (none in gsm8k_train/test). Throws like load_math_jsonl.
std::vector<Problem> load_gsm8k_jsonl(const std::string& path, LoadReport* report = nullptr,
                                      const TextLimits& limits = {});

/// The MBPP paper's prompt body: "<text> Your code should pass these tests:\n\n<assert 1>\n<assert 2>...".
std::string mbpp_prompt(const std::string& text, const std::vector<std::string>& tests);

}  // namespace pulse::datasets

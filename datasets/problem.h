// One RL/eval task as pulse sees it, whatever dataset it came from.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pulse::datasets {

enum class TaskKind { Math, Code };

/// A prompt plus what is needed to grade a response to it.
struct Problem {
  std::string id;  ///< e.g. "test/precalculus/807.json", "mbpp/11", "synthetic/arith/42"
  TaskKind kind = TaskKind::Math;
  std::string question;            ///< problem text (MATH `problem`, MBPP `text`, GSM8K `question`)
  std::string answer;              ///< Math: the reference final answer (e.g. "\\frac{3}{4}")
  std::string solution;            ///< reference solution (MATH `solution`, MBPP `code`), for SFT
  std::string demonstration;       ///< SFT target when it is not `solution` (a weak teacher's); "" = none
  std::string subject;             ///< MATH subject ("Algebra"), "" otherwise
  int level = 0;                   ///< MATH level 1..5, synthetic difficulty, 0 when unknown
  std::vector<std::string> tests;  ///< Code: MBPP `test_list` asserts
  std::string test_setup_code;     ///< Code: MBPP `test_setup_code`
};

}  // namespace pulse::datasets

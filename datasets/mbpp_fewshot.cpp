// The few-shot MBPP prompt (mbpp_fewshot.h).
#include "datasets/mbpp_fewshot.h"

#include <algorithm>
#include <stdexcept>

namespace pulse::datasets {
namespace {

constexpr const char* kHeader = "You are an expert Python programmer, and here is your task: ";

}  // namespace

size_t apply_mbpp_fewshot(std::vector<Problem>& problems, const std::vector<Problem>& source, int shots,
                          const std::string& source_name) {
  constexpr int kMax = static_cast<int>(std::size(kMbppShotTaskIds));
  if (shots < 0 || shots > kMax)
    throw std::invalid_argument("data.mbpp_shots must be 0.." + std::to_string(kMax) + " (got " +
                                std::to_string(shots) + ")");
  if (shots == 0) return 0;
  std::string prefix;
  std::vector<std::string> shot_ids;
  for (int s = 0; s < shots; ++s) {
    const std::string id = "mbpp/" + std::to_string(kMbppShotTaskIds[s]);
    const Problem* shot = nullptr;
    for (const auto& p : source)
      if (p.id == id) shot = &p;
    if (!shot || shot->solution.empty())
      throw std::invalid_argument(source_name + ": data.mbpp_shots = " + std::to_string(shots) +
                                  " needs MBPP task_id " + std::to_string(kMbppShotTaskIds[s]) +
                                  " (the prompt split) for its exemplars");
    // MBPP's code uses \r\n in places; the exemplars show the program as plain lines.
    std::string code;
    for (char c : shot->solution)
      if (c != '\r') code += c;
    while (!code.empty() && code.back() == '\n') code.pop_back();
    prefix += kHeader + shot->question + "[BEGIN]\n" + code + "\n" + kMbppDoneMarker + "\n";
    shot_ids.push_back(id);
  }
  const size_t before = problems.size();
  problems.erase(std::remove_if(problems.begin(), problems.end(),
                                [&](const Problem& p) {
                                  return std::find(shot_ids.begin(), shot_ids.end(), p.id) != shot_ids.end();
                                }),
                 problems.end());
  for (auto& p : problems) p.question = prefix + kHeader + p.question + "[BEGIN]\n";
  return before - problems.size();
}

}  // namespace pulse::datasets

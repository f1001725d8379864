// MBPP standard splits (datasets/mbpp_split.h).
#include "datasets/mbpp_split.h"

#include <stdexcept>
#include <utility>

namespace pulse::datasets {

std::vector<Problem> mbpp_split(std::vector<Problem> problems, const std::string& split) {
  if (split == "all") return problems;
  std::pair<long, long> range;
  if (split == "prompt")
    range = {1, 10};
  else if (split == "test")
    range = {11, 510};
  else if (split == "validation")
    range = {511, 600};
  else if (split == "train")
    range = {601, 974};
  else
    throw std::invalid_argument("mbpp split '" + split +
                                "' is not one of all, test, validation, train, prompt");
  std::vector<Problem> out;
  for (auto& p : problems) {
    size_t used = 0;
    long id = -1;
    try {
      if (p.id.rfind("mbpp/", 0) == 0) id = std::stol(p.id.substr(5), &used);
    } catch (const std::exception&) {
    }
    if (id < 0 || used == 0 || used != p.id.size() - 5)
      throw std::invalid_argument("mbpp split: problem id '" + p.id + "' is not mbpp/<task_id>");
    if (id >= range.first && id <= range.second) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace pulse::datasets

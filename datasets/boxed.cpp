// The last \boxed{} of a text (datasets/boxed.h).
#include "datasets/boxed.h"

namespace pulse::datasets {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n\r\f\v");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::optional<std::string> extract_boxed(const std::string& text) {
  size_t boxed = text.rfind("\\boxed"), fbox = text.rfind("\\fbox");
  size_t idx;
  size_t len;
  if (boxed != std::string::npos && (fbox == std::string::npos || boxed > fbox)) {
    idx = boxed;
    len = 6;
  } else if (fbox != std::string::npos) {
    idx = fbox;
    len = 5;
  } else {
    return std::nullopt;
  }
  size_t i = idx + len;
  if (i < text.size() && text[i] == '{') {
    int depth = 0;
    for (size_t j = i; j < text.size(); ++j) {
      if (text[j] == '\\' && j + 1 < text.size() && (text[j + 1] == '{' || text[j + 1] == '}')) {
        ++j;
        continue;
      }
      if (text[j] == '{') ++depth;
      if (text[j] == '}' && --depth == 0) return text.substr(i + 1, j - i - 1);
    }
    return std::nullopt;  // unclosed
  }
  if (i < text.size() && (text[i] == ' ' || text[i] == '\t')) {  // "\boxed 5"
    size_t end = text.find_first_of("$\n", i);
    std::string v = trim(text.substr(i, end == std::string::npos ? std::string::npos : end - i));
    while (!v.empty() && (v.back() == '.' || v.back() == ',')) v.pop_back();
    if (v.empty()) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

}  // namespace pulse::datasets

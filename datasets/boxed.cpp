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

bool escaped_brace(const std::string& text, size_t j) {
  return text[j] == '\\' && j + 1 < text.size() && (text[j + 1] == '{' || text[j + 1] == '}');
}

}  // namespace

BoxedAnswer find_boxed(const std::string& text) {
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
    return {BoxedStatus::NoBox, "", false};
  }
  size_t i = idx + len;
  if (i < text.size() && text[i] == '{') {
    int depth = 0;
    for (size_t j = i; j < text.size(); ++j) {
      if (escaped_brace(text, j)) {
        ++j;
        continue;
      }
      if (text[j] == '{') ++depth;
      if (text[j] == '}' && --depth == 0) {
        std::string content = text.substr(i + 1, j - i - 1);
        return {trim(content).empty() ? BoxedStatus::Empty : BoxedStatus::Found, content, true};
      }
    }
    return {BoxedStatus::Unclosed, "", true};
  }
  if (i < text.size() && (text[i] == ' ' || text[i] == '\t')) {  // "\boxed 5"
    size_t end = text.find_first_of("$\n", i);
    std::string v = trim(text.substr(i, end == std::string::npos ? std::string::npos : end - i));
    while (!v.empty() && (v.back() == '.' || v.back() == ',')) v.pop_back();
    if (v.empty()) return {BoxedStatus::Empty, "", false};
    return {BoxedStatus::Found, v, false};
  }
  return {BoxedStatus::NoArgument, "", false};
}

const char* boxed_status_reason(BoxedStatus status) {
  switch (status) {
    case BoxedStatus::Found:
      return "boxed answer found";
    case BoxedStatus::Empty:
      return "empty \\boxed{}";
    case BoxedStatus::Unclosed:
      return "unclosed \\boxed{";
    case BoxedStatus::NoArgument:
      return "\\boxed with no argument";
    case BoxedStatus::NoBox:
      return "no \\boxed{}";
  }
  return "unknown box status";
}

std::optional<std::string> extract_boxed(const std::string& text) {
  BoxedAnswer b = find_boxed(text);
  if (b.status == BoxedStatus::Found) return b.content;
  // An empty braced box is its text (grade_math: "empty_answer"); an empty "\boxed " is none.
  if (b.status == BoxedStatus::Empty && b.braced) return b.content;
  return std::nullopt;
}

bool braces_balanced(const std::string& text) {
  int depth = 0;
  for (size_t j = 0; j < text.size(); ++j) {
    if (escaped_brace(text, j)) {
      ++j;
      continue;
    }
    if (text[j] == '{') ++depth;
    if (text[j] == '}' && --depth < 0) return false;
  }
  return depth == 0;
}

std::optional<std::string> reference_answer_problem(const std::string& answer) {
  if (answer.find_first_not_of(" \t\n\r") == std::string::npos) return std::string("blank");
  if (!braces_balanced(answer)) return std::string("unbalanced braces");
  if (answer.find("\\boxed") != std::string::npos || answer.find("\\fbox") != std::string::npos) {
    BoxedAnswer b = find_boxed(answer);
    if (b.status != BoxedStatus::Found) return std::string(boxed_status_reason(b.status));
  }
  return std::nullopt;
}

}  // namespace pulse::datasets

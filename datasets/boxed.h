// The MATH answer convention: a solution's final answer is its last \boxed{...}. The loaders read
// reference answers this way (MATH records without an `answer` field) and the MATH reward reads
// responses this way (rl/math_grader.h).
#pragma once
#include <optional>
#include <string>

namespace pulse::datasets {

/// Content of the last \boxed{...} or \fbox{...} (nested braces kept, escaped braces skipped while
/// matching), or of "\boxed 5" (up to "$", a newline or the end). nullopt when there is none or the
/// last one is unclosed.
std::optional<std::string> extract_boxed(const std::string& text);

}  // namespace pulse::datasets

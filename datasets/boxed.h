// The MATH answer convention: a solution's final answer is its last \boxed{...}. The loaders read
// reference answers this way (MATH records without an `answer` field) and the MATH reward reads
// responses this way (rl/math_grader.h).
#pragma once
#include <optional>
#include <string>

namespace pulse::datasets {

/// What find_boxed saw at the last \boxed / \fbox of a text.
enum class BoxedStatus {
  Found,       ///< a closed box with non-blank content
  Empty,       ///< "\boxed{}" (or only whitespace inside), or "\boxed " followed by nothing
  Unclosed,    ///< "\boxed{3": the last box's braces never close
  NoArgument,  ///< "\boxed" followed by neither "{" nor a space (e.g. at the very end)
  NoBox,       ///< no \boxed or \fbox at all
};

/// The last box of a text and its status; `content` is the boxed text when status is Found or Empty.
struct BoxedAnswer {
  BoxedStatus status = BoxedStatus::NoBox;
  std::string content;
  bool braced = false;  ///< the "\boxed{...}" form (not "\boxed 5")
};

/// The last \boxed{...} or \fbox{...} (nested braces kept, escaped braces skipped while matching), or
/// "\boxed 5" (up to "$", a newline or the end, trailing "." / "," dropped). Only the last box counts:
/// "\boxed{2} ... \boxed{3" is Unclosed, never 2.
BoxedAnswer find_boxed(const std::string& text);

/// Short human reason for a status that is not Found ("unclosed \boxed{", "empty \boxed{}", ...).
const char* boxed_status_reason(BoxedStatus status);

/// find_boxed's content when the last box is closed (Found, or an empty "\boxed{}" as ""); nullopt
/// when there is none, it is unclosed or has no argument. Responses are graded with this.
std::optional<std::string> extract_boxed(const std::string& text);

/// True when every unescaped "{" has its "}" (escaped "\{" / "\}" are skipped). A reference answer
/// with unbalanced braces is a data error (datasets/loaders.h).
bool braces_balanced(const std::string& text);

/// Why a reference (gold) answer is unusable, or nullopt when it is usable: blank, unbalanced braces,
/// or a \boxed / \fbox inside it that is not closed and non-empty. The loaders (a DataError naming
/// file and line) and `pulse reward math --answer` (exit 2) apply this one rule. Never throws.
std::optional<std::string> reference_answer_problem(const std::string& answer);

}  // namespace pulse::datasets

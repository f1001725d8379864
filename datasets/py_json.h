// Python-compatible JSON text: what `json.dumps(obj)` writes with its defaults (ensure_ascii=True,
// separators ", " and ": "), so that a converted file can be byte-identical to one Python wrote.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pulse::datasets {

/// `json.dumps(s)` for a UTF-8 string: quoted; `"` `\` and \n \r \t \b \f as two-character escapes, other
/// characters below U+0020 and U+007F as \u00xx, every non-ASCII character as \uxxxx (lower-case hex;
/// above U+FFFF as a UTF-16 surrogate pair). Throws std::invalid_argument on invalid UTF-8, naming the byte
/// offset.
std::string py_json_string(const std::string& utf8);

/// One value of a py_json_object: a string, an integer, or null (std::nullopt).
struct PyJsonValue {
  enum class Kind { String, Int, Null } kind = Kind::Null;
  std::string text;      ///< String
  long long number = 0;  ///< Int
  static PyJsonValue str(std::string s) { return {Kind::String, std::move(s), 0}; }
  static PyJsonValue integer(long long v) { return {Kind::Int, "", v}; }
  static PyJsonValue null() { return {}; }
};

/// `json.dumps(dict)` of an insertion-ordered dict: {"k1": v1, "k2": v2}.
std::string py_json_object(const std::vector<std::pair<std::string, PyJsonValue>>& fields);

}  // namespace pulse::datasets

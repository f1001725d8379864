// Python json.dumps-compatible text (datasets/py_json.h).
#include "datasets/py_json.h"

#include <cstdint>
#include <cstdio>
#include <stdexcept>

namespace pulse::datasets {
namespace {

/// Decodes one UTF-8 code point at s[i]; advances i. Throws on invalid or overlong sequences.
uint32_t next_code_point(const std::string& s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto bad = [&]() { return std::invalid_argument("invalid UTF-8 at byte offset " + std::to_string(i)); };
  if (b0 < 0x80) return ++i, b0;
  const int extra = b0 >= 0xF5 ? -1 : b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : b0 >= 0xC2 ? 1 : -1;
  if (extra < 0 || i + static_cast<size_t>(extra) >= s.size()) throw bad();
  uint32_t cp = b0 & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((b & 0xC0) != 0x80) throw bad();
    cp = (cp << 6) | (b & 0x3F);
  }
  static const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) throw bad();
  i += static_cast<size_t>(extra) + 1;
  return cp;
}

void append_u(std::string& out, uint32_t unit) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(unit & 0xFFFF));
  out += buf;
}

}  // namespace

std::string py_json_string(const std::string& utf8) {
  std::string out = "\"";
  out.reserve(utf8.size() + 2);
  for (size_t i = 0; i < utf8.size();) {
    const uint32_t cp = next_code_point(utf8, i);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp >= 0x20 && cp < 0x7F) {
      out += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      append_u(out, cp);
    } else {
      const uint32_t v = cp - 0x10000;
      append_u(out, 0xD800 + (v >> 10));
      append_u(out, 0xDC00 + (v & 0x3FF));
    }
  }
  return out + "\"";
}

std::string py_json_object(const std::vector<std::pair<std::string, PyJsonValue>>& fields) {
  std::string out = "{";
  for (size_t k = 0; k < fields.size(); ++k) {
    if (k) out += ", ";
    out += py_json_string(fields[k].first) + ": ";
    const PyJsonValue& v = fields[k].second;
    if (v.kind == PyJsonValue::Kind::String)
      out += py_json_string(v.text);
    else if (v.kind == PyJsonValue::Kind::Int)
      out += std::to_string(v.number);
    else
      out += "null";
  }
  return out + "}";
}

}  // namespace pulse::datasets

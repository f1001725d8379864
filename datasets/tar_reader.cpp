// Minimal tar reader (datasets/tar_reader.h).
#include "datasets/tar_reader.h"

#include <cstdint>
#include <stdexcept>

namespace pulse::datasets {
namespace {

constexpr size_t kBlock = 512;

/// A NUL-terminated field of at most n bytes.
std::string field(const char* p, size_t n) {
  size_t len = 0;
  while (len < n && p[len] != '\0') ++len;
  return std::string(p, len);
}

/// An octal number field (spaces/NULs around it), or GNU base-256 when the high bit of byte 0 is set.
bool parse_number(const char* p, size_t n, uint64_t* out) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  uint64_t v = 0;
  if (u[0] & 0x80) {
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | u[i];
    }
    return *out = v, true;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i, any = true) {
    if (v >> 60) return false;
    v = v * 8 + static_cast<uint64_t>(p[i] - '0');
  }
  for (; i < n; ++i)
    if (p[i] != ' ' && p[i] != '\0') return false;
  return *out = v, any;
}

bool zero_block(const char* p) {
  for (size_t i = 0; i < kBlock; ++i)
    if (p[i] != '\0') return false;
  return true;
}

/// The `path` record of a pax extended header ("<len> path=<value>\n" records), or "".
std::string pax_path(const std::string& body) {
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t space = body.find(' ', pos);
    if (space == std::string::npos) break;
    const size_t len = std::stoul(body.substr(pos, space - pos));
    if (len == 0 || pos + len > body.size()) break;
    const std::string rec = body.substr(space + 1, pos + len - space - 2);  // without the trailing '\n'
    if (rec.rfind("path=", 0) == 0) return rec.substr(5);
    pos += len;
  }
  return "";
}

}  // namespace

std::vector<TarEntry> read_tar(const std::string& bytes, const std::string& source) {
  std::vector<TarEntry> out;
  std::string long_name;  // from a GNU 'L' or pax 'x' header, for the next member
  size_t off = 0;
  while (off + kBlock <= bytes.size()) {
    const char* h = bytes.data() + off;
    auto fail = [&](const std::string& what) {
      return std::runtime_error(source + ": tar header at byte offset " + std::to_string(off) + ": " + what);
    };
    if (zero_block(h)) break;
    uint64_t stored_sum = 0, size = 0;
    if (!parse_number(h + 148, 8, &stored_sum)) throw fail("unreadable checksum field");
    uint64_t sum = 0;
    for (size_t i = 0; i < kBlock; ++i)
      sum += (i >= 148 && i < 156) ? static_cast<uint64_t>(' ') : static_cast<unsigned char>(h[i]);
    if (sum != stored_sum) throw fail("checksum mismatch (not a tar archive, or corrupted)");
    if (!parse_number(h + 124, 12, &size)) throw fail("unreadable size field");
    const size_t data_off = off + kBlock;
    if (size > bytes.size() - data_off)
      throw fail("member of " + std::to_string(size) + " bytes is truncated");
    const std::string body = bytes.substr(data_off, static_cast<size_t>(size));
    const char type = h[156];
    std::string path = field(h, 100);
    if (field(h + 257, 6) == "ustar") {
      const std::string prefix = field(h + 345, 155);
      if (!prefix.empty()) path = prefix + "/" + path;
    }
    if (type == 'L') {
      long_name = field(body.data(), body.size());
    } else if (type == 'x') {
      long_name = pax_path(body);
    } else if (type == '0' || type == '\0') {
      out.push_back({long_name.empty() ? path : long_name, body});
      long_name.clear();
    } else if (type != 'g') {
      long_name.clear();  // directories, links, devices: nothing to read
    }
    off = data_off + (static_cast<size_t>(size) + kBlock - 1) / kBlock * kBlock;
  }
  return out;
}

}  // namespace pulse::datasets

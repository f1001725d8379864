// UTF-8 and NFC; see unicode.h. Algorithm: Unicode Standard Annex #15, sections 1.3 and 14.
#include "model/unicode.h"

#include <algorithm>

#include "model/unicode_nfc_tables.h"

namespace pulse::model {
namespace {

using namespace nfc_tables;

// Hangul syllable arithmetic (Unicode 3.12, "Conjoining Jamo Behavior").
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t ccc_of(uint32_t cp) {
  if (cp < 0x300) return 0;
  auto* end = kCombiningClass + kCombiningClassCount;
  auto* it = std::lower_bound(kCombiningClass, end, cp,
                              [](const CombiningClass& e, uint32_t c) { return e.cp < c; });
  return (it != end && it->cp == cp) ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  auto* end = kDecomposition + kDecompositionCount;
  auto* it =
      std::lower_bound(kDecomposition, end, cp, [](const Decomposition& e, uint32_t c) { return e.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second) decompose(it->second, out);
}

/// Primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  auto* end = kComposition + kCompositionCount;
  auto* it = std::lower_bound(kComposition, end, std::make_pair(a, b), [](const Composition& e, auto key) {
    return e.first < key.first || (e.first == key.first && e.second < key.second);
  });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

}  // namespace

size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xE) return 3;
  if ((c >> 3) == 0x1E) return 4;
  return 1;
}

bool utf8_decode(std::string_view s, std::vector<uint32_t>& out) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_len(c);
    if (n == 1 && c >= 0x80) return false;
    if (i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    out.push_back(cp);
    i += n;
  }
  return true;
}

void utf8_append(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_lossy(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = utf8_len(c);
    bool ok = !(n == 1 && c >= 0x80) && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string nfc(std::string_view s) {
  // Text below U+0300 (ASCII, Latin-1, most Latin Extended) is already NFC.
  bool simple = true;
  for (size_t i = 0; i < s.size() && simple; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0xCC) simple = false;  // lead bytes of U+0300 and above
  }
  if (simple) return std::string(s);
  std::vector<uint32_t> cps;
  if (!utf8_decode(s, cps)) return std::string(s);
  std::vector<uint32_t> d;
  d.reserve(cps.size() + 8);
  for (uint32_t cp : cps) decompose(cp, d);
  // Canonical ordering: stable sort of every run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (ccc_of(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc_of(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // Canonical composition: combine each character with the last starter unless blocked.
  std::vector<uint32_t> r;
  r.reserve(d.size());
  ptrdiff_t starter = -1;
  int last_ccc = -1;
  for (uint32_t cp : d) {
    const int cc = ccc_of(cp);
    if (starter >= 0) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= cc);
      if (!blocked) {
        if (uint32_t comp = compose(r[starter], cp)) {
          r[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) {
      starter = static_cast<ptrdiff_t>(r.size());
      last_ccc = -1;
    } else {
      last_ccc = cc;
    }
    r.push_back(cp);
  }
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : r) utf8_append(cp, out);
  return out;
}

}  // namespace pulse::model

// The diff-mask scan (kernels/diff_scan.h): every variant this CPU runs (forced with diff_masks_force; a
// WARN names one it lacks) and the portable kernel agree with an element-wise compare for every element
// width, at lengths around the 64-element mask word and the 32-byte vector, at densities from none to
// all changed. Also the byte-shuffle tables of the AVX2 kernels (kernels/byte_tables.h).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/byte_tables.h"
#include "kernels/diff_scan.h"

using namespace pulse::kernels;

namespace {

/// Runs diff_masks as variant `isa` while alive; the CPU's fastest again afterwards.
struct MaskIsa {
  explicit MaskIsa(const char* isa) { REQUIRE(diff_masks_force(isa)); }
  ~MaskIsa() { diff_masks_force(nullptr); }
};

}  // namespace

TEST_CASE("diff masks: every variant and the portable kernel agree with an element-wise compare",
          "[kernels][diff]") {
  std::vector<const char*> isas;
  for (const char* isa : {"avx2", "portable"}) {
    if (diff_masks_supported(isa))
      isas.push_back(isa);
    else
      WARN("diff_masks variant '" << isa << "' not tested: this CPU cannot run it");
  }
  CHECK_FALSE(diff_masks_force("avx512"));  // no such variant
  std::mt19937_64 rng(11);
  for (const char* isa : isas)
    for (int every : {0, 1, 3, 20, 100})  // flip ~1/every of the elements (0: none)
      for (size_t width : {1, 2, 4, 8}) {
        MaskIsa use(isa);
        for (size_t n : {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 200, 4096 + 17}) {
          std::vector<uint8_t> a(n * width), b;
          for (auto& x : a) x = static_cast<uint8_t>(rng());
          b = a;
          // Flip single bytes (any byte of an element must count).
          for (size_t i = 0; i < n; ++i)
            if (every && rng() % every == 0)
              b[i * width + rng() % width] ^= static_cast<uint8_t>(1 + rng() % 255);
          std::vector<uint64_t> expect((n + 63) / 64, 0), fast(expect.size() + 1, ~0ull), portable(fast);
          uint64_t count = 0;
          for (size_t i = 0; i < n; ++i)
            if (std::memcmp(a.data() + i * width, b.data() + i * width, width) != 0) {
              expect[i / 64] |= 1ull << (i % 64);
              ++count;
            }
          INFO("width " << width << ", n " << n << ", 1/" << every << " changed, variant "
                        << diff_masks_isa());
          CHECK(diff_masks(a.data(), b.data(), n, width, fast.data()) == count);
          CHECK(diff_masks_portable(a.data(), b.data(), n, width, portable.data()) == count);
          fast.pop_back();
          portable.pop_back();
          CHECK(fast == expect);
          CHECK(portable == expect);
        }
      }
  std::vector<uint64_t> m(1);
  CHECK_THROWS_AS(diff_masks(nullptr, nullptr, 0, 3, m.data()), std::invalid_argument);
}

TEST_CASE("byte tables: compress, gaps, emit and expand controls match their definitions",
          "[kernels][tables]") {
  using namespace pulse::kernels::tables;
  for (int m = 0; m < 256; ++m) {
    INFO("mask " << m);
    int k = 0, prev = -1;
    for (int l = 0; l < 8; ++l) {
      if (m >> l & 1) {
        CHECK(kCompress16.ctrl[m][k] == l);
        CHECK(kCompress16.ctrl[m][8 + k] == l + 8);
        CHECK(kGaps8.gap[m][k] == l - prev - 1);
        CHECK(kEmit8.e[m].ctrl[k] == 2 * l);
        CHECK(kEmit8.e[m].ctrl[8 + k] == 2 * l + 1);
        CHECK(kEmit8.e[m].gap[k] == l - prev - 1);
        CHECK(kExpand8.ctrl[m][l] == k);
        prev = l;
        ++k;
      } else {
        CHECK(kExpand8.ctrl[m][l] == 0x80);
      }
    }
    for (int j = k; j < 8; ++j) {
      CHECK(kCompress16.ctrl[m][j] == 0x80);
      CHECK(kCompress16.ctrl[m][8 + j] == 0x80);
      CHECK(kGaps8.gap[m][j] == 0);
      CHECK(kEmit8.e[m].gap[j] == 0);
      CHECK(kEmit8.e[m].ctrl[j] == 0x80);
      CHECK(kEmit8.e[m].ctrl[8 + j] == 0x80);
    }
    CHECK(kEmit8.e[m].count == k);
    CHECK(reinterpret_cast<uintptr_t>(&kEmit8.e[m]) % 32 == 0);
  }
}

// The diff-mask scan (kernels/diff_scan.h): the SIMD kernel and the portable one agree with an
// element-wise compare for every element width, at lengths around the 64-element mask word.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/diff_scan.h"

using namespace pulse::kernels;

TEST_CASE("diff masks: the SIMD and portable kernels agree with an element-wise compare", "[kernels][diff]") {
  std::mt19937_64 rng(11);
  for (size_t width : {1, 2, 4, 8}) {
    for (size_t n : {0, 1, 63, 64, 65, 200, 4096 + 17}) {
      std::vector<uint8_t> a(n * width), b;
      for (auto& x : a) x = static_cast<uint8_t>(rng());
      b = a;
      // Flip single bytes (any byte of an element must count) at ~5% of the elements.
      for (size_t i = 0; i < n; ++i)
        if (rng() % 20 == 0) b[i * width + rng() % width] ^= static_cast<uint8_t>(1 + rng() % 255);
      std::vector<uint64_t> expect((n + 63) / 64, 0), fast(expect.size() + 1, ~0ull), portable(fast);
      uint64_t count = 0;
      for (size_t i = 0; i < n; ++i)
        if (std::memcmp(a.data() + i * width, b.data() + i * width, width) != 0) {
          expect[i / 64] |= 1ull << (i % 64);
          ++count;
        }
      INFO("width " << width << ", n " << n << ", avx2 " << diff_masks_use_avx2());
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

#include "kernels/diff_scan.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu_features.h"
#include "kernels/x86_simd.h"

namespace pulse::kernels {

namespace {

uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

/// Mask of the first `count` (<= 64) elements, element by element.
uint64_t mask_elements(const uint8_t* a, const uint8_t* b, size_t count, size_t width) {
  uint64_t m = 0;
  for (size_t i = 0; i < count; ++i)
    m |= static_cast<uint64_t>(std::memcmp(a + i * width, b + i * width, width) != 0) << i;
  return m;
}

/// One full group of 64 elements: 64-bit words XORed; a word with a difference is split into lanes.
uint64_t mask_group_portable(const uint8_t* a, const uint8_t* b, size_t width) {
  const size_t lanes = 8 / width;  // elements per word (width 1..8)
  const unsigned lane_bits = static_cast<unsigned>(8 * width);
  const uint64_t lane_mask = width == 8 ? ~0ull : (1ull << lane_bits) - 1;
  uint64_t m = 0;
  for (size_t w = 0; w < 8 * width; ++w) {
    const uint64_t x = load64(a + 8 * w) ^ load64(b + 8 * w);
    if (x == 0) continue;  // at RL densities most words are equal
    for (size_t l = 0; l < lanes; ++l)
      m |= static_cast<uint64_t>(((x >> (l * lane_bits)) & lane_mask) != 0) << (w * lanes + l);
  }
  return m;
}

#ifdef PULSE_KERNELS_X86
// A macro, not a helper function: __m256i must not cross a function boundary compiled without AVX.
#define ld(p) _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
__attribute__((target("avx2,popcnt"))) uint64_t diff_masks_avx2(const uint8_t* a, const uint8_t* b, size_t n,
                                                                size_t width, uint64_t* masks) {
  const size_t full = n / kDiffGroup;
  uint64_t changed = 0;
  for (size_t g = 0; g < full; ++g) {
    const uint8_t* pa = a + g * kDiffGroup * width;
    const uint8_t* pb = b + g * kDiffGroup * width;
    uint64_t eq = 0;  // bit set = equal
    switch (width) {
      case 1:
        eq = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(ld(pa), ld(pb)))) |
             static_cast<uint64_t>(
                 static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(ld(pa + 32), ld(pb + 32)))))
                 << 32;
        break;
      case 2:
        for (int h = 0; h < 2; ++h) {
          const uint8_t* qa = pa + 64 * h;
          const uint8_t* qb = pb + 64 * h;
          // Two 16-lane compares packed to 32 bytes; packs works per 128-bit lane, the permute restores
          // element order.
          const __m256i c0 = _mm256_cmpeq_epi16(ld(qa), ld(qb));
          const __m256i c1 = _mm256_cmpeq_epi16(ld(qa + 32), ld(qb + 32));
          const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi16(c0, c1), 0xD8);
          eq |= static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(p))) << (32 * h);
        }
        break;
      case 4:
        for (int q = 0; q < 8; ++q)
          eq |= static_cast<uint64_t>(_mm256_movemask_ps(
                    _mm256_castsi256_ps(_mm256_cmpeq_epi32(ld(pa + 32 * q), ld(pb + 32 * q)))))
                << (8 * q);
        break;
      default:
        for (int q = 0; q < 16; ++q)
          eq |= static_cast<uint64_t>(_mm256_movemask_pd(
                    _mm256_castsi256_pd(_mm256_cmpeq_epi64(ld(pa + 32 * q), ld(pb + 32 * q)))))
                << (4 * q);
        break;
    }
    masks[g] = ~eq;
    changed += static_cast<uint64_t>(__builtin_popcountll(~eq));
  }
  if (n % kDiffGroup) {
    const size_t off = full * kDiffGroup * width;
    masks[full] = mask_elements(a + off, b + off, n % kDiffGroup, width);
    changed += static_cast<uint64_t>(__builtin_popcountll(masks[full]));
  }
  return changed;
}
#undef ld

/// What diff_masks_avx2's target attribute assumes.
constexpr CpuFeatures kNeedsAvx2 = kCpuAvx2 | kCpuPopcnt;
#endif

void check_width(size_t width) {
  if (width != 1 && width != 2 && width != 4 && width != 8)
    throw std::invalid_argument("diff_masks: element width " + std::to_string(width) +
                                " is not 1, 2, 4 or 8");
}

}  // namespace

uint64_t diff_masks_portable(const uint8_t* a, const uint8_t* b, size_t n, size_t width, uint64_t* masks) {
  check_width(width);
  const size_t full = n / kDiffGroup;
  uint64_t changed = 0;
  for (size_t g = 0; g < full; ++g) {
    masks[g] = mask_group_portable(a + g * kDiffGroup * width, b + g * kDiffGroup * width, width);
    changed += static_cast<uint64_t>(__builtin_popcountll(masks[g]));
  }
  if (n % kDiffGroup) {
    const size_t off = full * kDiffGroup * width;
    masks[full] = mask_elements(a + off, b + off, n % kDiffGroup, width);
    changed += static_cast<uint64_t>(__builtin_popcountll(masks[full]));
  }
  return changed;
}

namespace {

using MaskFn = uint64_t (*)(const uint8_t*, const uint8_t*, size_t, size_t, uint64_t*);

#ifdef PULSE_KERNELS_X86
uint64_t masks_avx2_checked(const uint8_t* a, const uint8_t* b, size_t n, size_t width, uint64_t* masks) {
  check_width(width);
  return diff_masks_avx2(a, b, n, width, masks);
}
#endif

using Variant = KernelVariant<MaskFn>;

/// The variants this CPU can run, fastest first (portable last), and the forced one.
VariantSelector<Variant, 2>& selector() {
  static VariantSelector<Variant, 2> s([](auto add) {
#ifdef PULSE_KERNELS_X86
    if (cpu_has(kNeedsAvx2)) add(Variant{masks_avx2_checked, "avx2"});
#endif
    add(Variant{diff_masks_portable, "portable"});
  });
  return s;
}

}  // namespace

const char* diff_masks_isa() {
  return selector().isa();
}

bool diff_masks_supported(const char* isa) {
  return selector().supported(isa);
}

bool diff_masks_force(const char* isa) {
  return selector().force(isa);
}

uint64_t diff_masks(const uint8_t* a, const uint8_t* b, size_t n, size_t width, uint64_t* masks) {
  return selector().current().fn(a, b, n, width, masks);
}

}  // namespace pulse::kernels

#include "kernels/loco_gate.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/bf16.h"
#include "kernels/cpu_features.h"
#include "kernels/x86_simd.h"

namespace pulse::kernels {

namespace {

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kExpMask = 0x7f800000u;  // also +Inf
constexpr uint32_t kCanonicalNan = 0x7fc00000u;

inline uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

inline float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

/// The per-element rule of loco_gate.h on [begin, end), writing fired entries from out_k on. Returns the
/// new out_k; ORs non-finite s into `nonfinite`.
uint64_t gate_scalar(const float* g, const float* l, float* r, size_t begin, size_t end, bool open,
                     uint32_t* out_index, float* out_value, uint64_t out_k, uint32_t index_base,
                     bool& nonfinite) {
  bool bad = false;
  for (size_t i = begin; i < end; ++i) {
    const float delta = g[i] - l[i];
    float s = r[i] + delta;
    uint32_t sb = bits_of(s);
    if ((sb & kAbsMask) > kExpMask) {  // NaN: one canonical pattern whatever the operand order was
      sb = kCanonicalNan;
      s = float_of(sb);
    }
    bad |= (sb & kExpMask) == kExpMask;
    const bool fire = open || fp32_to_bf16_rne(g[i]) != fp32_to_bf16_rne(g[i] - s);
    if (fire) {
      out_index[out_k] = index_base + static_cast<uint32_t>(i);
      out_value[out_k] = s;
      ++out_k;
      r[i] = 0.0f;
    } else {
      r[i] = s;
    }
  }
  nonfinite |= bad;
  return out_k;
}

LocoGateResult gate_portable_impl(const float* g, const float* l, float* r, size_t n, bool open,
                                  uint32_t* out_index, float* out_value, uint32_t index_base) {
  LocoGateResult res;
  res.fired = gate_scalar(g, l, r, 0, n, open, out_index, out_value, 0, index_base, res.nonfinite);
  return res;
}

#ifdef PULSE_KERNELS_X86
#define PULSE_GATE_AVX512 __attribute__((target("avx512f,popcnt")))
#define PULSE_GATE_AVX2 __attribute__((target("avx2,popcnt")))
/// What PULSE_GATE_AVX512 / PULSE_GATE_AVX2 assume of the CPU.
constexpr CpuFeatures kNeedsAvx512 = kCpuAvx512F | kCpuPopcnt;
constexpr CpuFeatures kNeedsAvx2 = kCpuAvx2 | kCpuPopcnt;

// ---- AVX-512: 16 lanes, fired lanes packed with vpcompressd/vcompressps in registers -------------------

/// BF16 RNE bit patterns (in the low 16 bits of each lane) of 16 FP32 values: kernels/bf16.h's rule.
PULSE_GATE_AVX512 inline __m512i bf16_rne_avx512(__m512 x) {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i hi = _mm512_srli_epi32(b, 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(kAbsMask)), _mm512_set1_epi32(kExpMask));
  const __m512i bias =
      _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(b, bias), 16);
  return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

/// One vector of 16 elements at i (kFull) or the last n - i < 16 (masked loads: lanes past n read as 0
/// and never fault; masked stores). Appends the fired entries at out + k; returns the fired count.
template <bool kFull>
PULSE_GATE_AVX512 __attribute__((always_inline)) inline unsigned gate_vector_avx512(
    const float* g, const float* l, float* r, size_t i, size_t n, bool open, __m512i index,
    uint32_t* out_index, float* out_value, uint64_t k, __mmask16& nonfinite) {
  const __mmask16 live = kFull ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
  const __m512 gv = kFull ? _mm512_loadu_ps(g + i) : _mm512_maskz_loadu_ps(live, g + i);
  const __m512 lv = kFull ? _mm512_loadu_ps(l + i) : _mm512_maskz_loadu_ps(live, l + i);
  const __m512 rv = kFull ? _mm512_loadu_ps(r + i) : _mm512_maskz_loadu_ps(live, r + i);
  const __m512i abs_mask = _mm512_set1_epi32(kAbsMask), exp_mask = _mm512_set1_epi32(kExpMask);
  __m512i sb = _mm512_castps_si512(_mm512_add_ps(rv, _mm512_sub_ps(gv, lv)));
  sb = _mm512_mask_mov_epi32(sb, _mm512_cmpgt_epu32_mask(_mm512_and_si512(sb, abs_mask), exp_mask),
                             _mm512_set1_epi32(kCanonicalNan));
  const __m512 s = _mm512_castsi512_ps(sb);
  nonfinite |= _mm512_mask_cmpeq_epi32_mask(live, _mm512_and_si512(sb, exp_mask), exp_mask);
  const __mmask16 fire =
      open ? live
           : _mm512_mask_cmpneq_epi32_mask(live, bf16_rne_avx512(gv), bf16_rne_avx512(_mm512_sub_ps(gv, s)));
  const __m512 kept = _mm512_maskz_mov_ps(static_cast<__mmask16>(~fire), s);
  const __m512i packed_index = _mm512_maskz_compress_epi32(fire, index);
  const __m512 packed_value = _mm512_maskz_compress_ps(fire, s);
  const unsigned count = static_cast<unsigned>(__builtin_popcount(fire));
  if (kFull) {  // k <= i and i + 16 <= n: the whole vector fits the caller's n entries
    _mm512_storeu_ps(r + i, kept);
    _mm512_storeu_si512(out_index + k, packed_index);
    _mm512_storeu_ps(out_value + k, packed_value);
  } else {
    const __mmask16 keep = static_cast<__mmask16>((1u << count) - 1);
    _mm512_mask_storeu_ps(r + i, live, kept);
    _mm512_mask_storeu_epi32(out_index + k, keep, packed_index);
    _mm512_mask_storeu_ps(out_value + k, keep, packed_value);
  }
  return count;
}

PULSE_GATE_AVX512 LocoGateResult gate_avx512(const float* g, const float* l, float* r, size_t n, bool open,
                                             uint32_t* out_index, float* out_value, uint32_t index_base) {
  __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(index_base)),
                                   _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  const __m512i step = _mm512_set1_epi32(16);
  __mmask16 nonfinite = 0;
  uint64_t k = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    k += gate_vector_avx512<true>(g, l, r, i, n, open, index, out_index, out_value, k, nonfinite);
    index = _mm512_add_epi32(index, step);
  }
  if (i < n) k += gate_vector_avx512<false>(g, l, r, i, n, open, index, out_index, out_value, k, nonfinite);
  LocoGateResult res;
  res.fired = k;
  res.nonfinite = nonfinite != 0;
  return res;
}

// ---- AVX2: 8 lanes, fired lanes packed with a permutation per 8-bit mask ---------------------------

/// pack[m] lists the set bits of m in increasing order (the remaining entries are 0).
struct PackTable {
  alignas(32) uint32_t pack[256][8];
  PackTable() {
    for (unsigned m = 0; m < 256; ++m) {
      unsigned k = 0;
      for (unsigned j = 0; j < 8; ++j) pack[m][j] = 0;
      for (unsigned j = 0; j < 8; ++j)
        if (m & (1u << j)) pack[m][k++] = j;
    }
  }
};

const PackTable& pack_table() {
  static const PackTable t;
  return t;
}

PULSE_GATE_AVX2 inline __m256i bf16_rne_avx2(__m256 x) {
  const __m256i b = _mm256_castps_si256(x);
  const __m256i hi = _mm256_srli_epi32(b, 16);
  // (b & 0x7fffffff) is non-negative as a signed lane, so the signed compare is the unsigned one.
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(kAbsMask)), _mm256_set1_epi32(kExpMask));
  const __m256i bias =
      _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

PULSE_GATE_AVX2 LocoGateResult gate_avx2(const float* g, const float* l, float* r, size_t n, bool open,
                                         uint32_t* out_index, float* out_value, uint32_t index_base) {
  const PackTable& table = pack_table();
  const __m256i abs_mask = _mm256_set1_epi32(kAbsMask), exp_mask = _mm256_set1_epi32(kExpMask);
  const __m256i canonical_nan = _mm256_set1_epi32(kCanonicalNan);
  const __m256i all_ones = _mm256_set1_epi32(-1);
  __m256i index = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(index_base)),
                                   _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
  const __m256i step = _mm256_set1_epi32(8);
  __m256i nonfinite = _mm256_setzero_si256();
  uint64_t k = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 lv = _mm256_loadu_ps(l + i);
    const __m256 rv = _mm256_loadu_ps(r + i);
    __m256i sb = _mm256_castps_si256(_mm256_add_ps(rv, _mm256_sub_ps(gv, lv)));
    sb = _mm256_blendv_epi8(sb, canonical_nan, _mm256_cmpgt_epi32(_mm256_and_si256(sb, abs_mask), exp_mask));
    const __m256 s = _mm256_castsi256_ps(sb);
    nonfinite = _mm256_or_si256(nonfinite, _mm256_cmpeq_epi32(_mm256_and_si256(sb, exp_mask), exp_mask));
    const __m256i fire =
        open ? all_ones
             : _mm256_xor_si256(_mm256_cmpeq_epi32(bf16_rne_avx2(gv), bf16_rne_avx2(_mm256_sub_ps(gv, s))),
                                all_ones);
    _mm256_storeu_ps(r + i, _mm256_andnot_ps(_mm256_castsi256_ps(fire), s));
    const unsigned m = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(fire)));
    const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(table.pack[m]));
    // k <= i and i + 8 <= n: the whole vector fits the caller's n entries.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out_index + k), _mm256_permutevar8x32_epi32(index, perm));
    _mm256_storeu_ps(out_value + k, _mm256_permutevar8x32_ps(s, perm));
    k += static_cast<unsigned>(__builtin_popcount(m));
    index = _mm256_add_epi32(index, step);
  }
  LocoGateResult res;
  res.nonfinite = !_mm256_testz_si256(nonfinite, nonfinite);
  // The last n % 8 elements: the reference rule itself (same FP32 operations, same bits).
  res.fired = gate_scalar(g, l, r, i, n, open, out_index, out_value, k, index_base, res.nonfinite);
  return res;
}

#endif  // PULSE_KERNELS_X86

// ---- dispatch ----------------------------------------------------------------------------------------

using GateFn = LocoGateResult (*)(const float*, const float*, float*, size_t, bool, uint32_t*, float*,
                                  uint32_t);

using Variant = KernelVariant<GateFn>;

/// The variants this CPU can run, fastest first (portable last), and the forced one.
VariantSelector<Variant, 3>& selector() {
  static VariantSelector<Variant, 3> s([](auto add) {
#ifdef PULSE_KERNELS_X86
    if (cpu_has(kNeedsAvx512)) add(Variant{gate_avx512, "avx512"});
    if (cpu_has(kNeedsAvx2)) add(Variant{gate_avx2, "avx2"});
#endif
    add(Variant{gate_portable_impl, "portable"});
  });
  return s;
}

void check_index_range(size_t n, uint32_t index_base) {
  if (static_cast<uint64_t>(n) > (uint64_t{1} << 32) - index_base)
    throw std::invalid_argument("loco_gate: index_base " + std::to_string(index_base) + " + n " +
                                std::to_string(n) + " exceeds 2^32 (indices are uint32)");
}

}  // namespace

LocoGateResult loco_gate(const float* global, const float* local, float* residual, size_t n, bool gate_open,
                         uint32_t* fired_index, float* fired_value, uint32_t index_base) {
  check_index_range(n, index_base);
  return selector().current().fn(global, local, residual, n, gate_open, fired_index, fired_value, index_base);
}

LocoGateResult loco_gate_portable(const float* global, const float* local, float* residual, size_t n,
                                  bool gate_open, uint32_t* fired_index, float* fired_value,
                                  uint32_t index_base) {
  check_index_range(n, index_base);
  return gate_portable_impl(global, local, residual, n, gate_open, fired_index, fired_value, index_base);
}

const char* loco_gate_isa() {
  return selector().isa();
}

bool loco_gate_supported(const char* isa) {
  return selector().supported(isa);
}

bool loco_gate_force(const char* isa) {
  return selector().force(isa);
}

}  // namespace pulse::kernels

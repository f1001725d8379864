#include "kernels/loco_ulp.h"

#include <climits>
#include <cmath>
#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/loco_gate.h"
#include "kernels/x86_simd.h"

namespace pulse::kernels {

namespace {

constexpr uint32_t kExpMask = 0x7f800000u;

inline uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

/// The per-entry rule of loco_ulp.h on entries [begin, end). Returns the deferred count.
uint64_t quantize_scalar(const float* global, float* residual, const uint32_t* fired_index,
                         float* fired_value, int32_t* fired_count, uint64_t begin, uint64_t end,
                         uint32_t index_base) {
  uint64_t deferred = 0;
  for (uint64_t k = begin; k < end; ++k) {
    const size_t i = fired_index[k] - index_base;
    const float s = fired_value[k];
    const float step = loco_ulp_step(global[i]);
    const float q = s / step;  // step 0 (non-finite g): q is +-Inf or NaN, an escape below
    int32_t c = kLocoUlpEscape;
    float sent = s, rest = 0.0f;
    if (std::fabs(q) <= static_cast<float>(kLocoUlpMaxCount)) {
      const float cf = std::rint(q);
      const float p = cf * step;
      if (cf == 0.0f) {
        c = 0, sent = 0.0f, rest = s;
        ++deferred;
      } else if ((bits_of(p) & kExpMask) != kExpMask) {
        c = static_cast<int32_t>(cf), sent = p, rest = s - p;
      }
    }
    fired_count[k] = c;
    fired_value[k] = sent;
    residual[i] = rest;
  }
  return deferred;
}

#ifdef PULSE_KERNELS_X86
// The SIMD variants gather g and scatter r through signed 32-bit offsets: lists whose largest local index
// reaches 2^31 run the scalar rule (same bits).
constexpr uint32_t kMaxGatherIndex = 0x7fffffffu;

#define PULSE_ULP_AVX512 __attribute__((target("avx512f")))
#define PULSE_ULP_AVX2 __attribute__((target("avx2")))

/// loco_ulp_step_bits of 16 globals: 0 for non-finite ones.
PULSE_ULP_AVX512 inline __m512i step_bits_avx512(__m512i gb) {
  const __m512i exp = _mm512_set1_epi32(static_cast<int>(kExpMask));
  const __mmask16 finite = _mm512_cmpneq_epi32_mask(_mm512_and_si512(gb, exp), exp);
  const __m512i b = _mm512_srli_epi32(
      _mm512_add_epi32(gb,
                       _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                        _mm512_and_si512(_mm512_srli_epi32(gb, 16), _mm512_set1_epi32(1)))),
      16);
  const __m512i e_raw = _mm512_and_si512(_mm512_srli_epi32(b, 7), _mm512_set1_epi32(0xff));
  const __mmask16 ok = finite & _mm512_cmpneq_epi32_mask(e_raw, _mm512_set1_epi32(0xff));
  const __m512i e = _mm512_max_epi32(e_raw, _mm512_set1_epi32(1));
  // e >= 8: the normal FP32 2^(e - 134), exponent field e - 7; else the subnormal 1 << (e + 15).
  const __mmask16 normal = _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(8));
  const __m512i nb = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(7)), 23);
  const __m512i sb = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_add_epi32(e, _mm512_set1_epi32(15)));
  return _mm512_maskz_mov_epi32(ok, _mm512_mask_mov_epi32(sb, normal, nb));
}

PULSE_ULP_AVX512 uint64_t quantize_avx512(const float* global, float* residual, const uint32_t* fired_index,
                                          float* fired_value, int32_t* fired_count, uint64_t n,
                                          uint32_t index_base) {
  const __m512 limit = _mm512_set1_ps(static_cast<float>(kLocoUlpMaxCount));
  const __m512i exp = _mm512_set1_epi32(static_cast<int>(kExpMask));
  const __m512i base = _mm512_set1_epi32(static_cast<int>(index_base));
  uint64_t deferred = 0, k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i idx =
        _mm512_sub_epi32(_mm512_loadu_si512(reinterpret_cast<const void*>(fired_index + k)), base);
    const __m512 g = _mm512_i32gather_ps(idx, global, 4);
    const __m512 s = _mm512_loadu_ps(fired_value + k);
    const __m512 step = _mm512_castsi512_ps(step_bits_avx512(_mm512_castps_si512(g)));
    const __m512 q = _mm512_div_ps(s, step);
    const __mmask16 in_range = _mm512_cmp_ps_mask(_mm512_abs_ps(q), limit, _CMP_LE_OQ);
    const __m512 cf = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 p = _mm512_mul_ps(cf, step);
    const __mmask16 zero = in_range & _mm512_cmp_ps_mask(cf, _mm512_setzero_ps(), _CMP_EQ_OQ);
    const __mmask16 counted =
        in_range & ~zero & _mm512_cmpneq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(p), exp), exp);
    // escape: count INT32_MIN, sent s, rest 0; deferred: 0, 0, s; counted: c, p, s - p.
    __m512i c = _mm512_set1_epi32(kLocoUlpEscape);
    c = _mm512_mask_mov_epi32(c, zero, _mm512_setzero_si512());
    c = _mm512_mask_mov_epi32(c, counted, _mm512_cvtps_epi32(cf));  // cf is integral: exact
    __m512 sent = _mm512_maskz_mov_ps(static_cast<__mmask16>(~zero), s);
    sent = _mm512_mask_mov_ps(sent, counted, p);
    __m512 rest = _mm512_maskz_mov_ps(zero, s);
    rest = _mm512_mask_mov_ps(rest, counted, _mm512_sub_ps(s, p));
    _mm512_storeu_si512(reinterpret_cast<void*>(fired_count + k), c);
    _mm512_storeu_ps(fired_value + k, sent);
    _mm512_i32scatter_ps(residual, idx, rest, 4);  // distinct indices
    deferred += static_cast<unsigned>(__builtin_popcount(zero));
  }
  return deferred +
         quantize_scalar(global, residual, fired_index, fired_value, fired_count, k, n, index_base);
}

/// loco_ulp_step_bits of 8 globals.
PULSE_ULP_AVX2 inline __m256i step_bits_avx2(__m256i gb) {
  const __m256i exp = _mm256_set1_epi32(static_cast<int>(kExpMask));
  const __m256i nonfinite = _mm256_cmpeq_epi32(_mm256_and_si256(gb, exp), exp);
  const __m256i b = _mm256_srli_epi32(
      _mm256_add_epi32(gb,
                       _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                        _mm256_and_si256(_mm256_srli_epi32(gb, 16), _mm256_set1_epi32(1)))),
      16);
  const __m256i e_raw = _mm256_and_si256(_mm256_srli_epi32(b, 7), _mm256_set1_epi32(0xff));
  const __m256i bad = _mm256_or_si256(nonfinite, _mm256_cmpeq_epi32(e_raw, _mm256_set1_epi32(0xff)));
  const __m256i e = _mm256_max_epi32(e_raw, _mm256_set1_epi32(1));
  const __m256i normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(7));
  const __m256i nb = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(7)), 23);
  const __m256i sb = _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_add_epi32(e, _mm256_set1_epi32(15)));
  return _mm256_andnot_si256(bad, _mm256_blendv_epi8(sb, nb, normal));
}

PULSE_ULP_AVX2 uint64_t quantize_avx2(const float* global, float* residual, const uint32_t* fired_index,
                                      float* fired_value, int32_t* fired_count, uint64_t n,
                                      uint32_t index_base) {
  const __m256 limit = _mm256_set1_ps(static_cast<float>(kLocoUlpMaxCount));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i exp = _mm256_set1_epi32(static_cast<int>(kExpMask));
  const __m256i base = _mm256_set1_epi32(static_cast<int>(index_base));
  uint64_t deferred = 0, k = 0;
  alignas(32) uint32_t lane_index[8];
  alignas(32) float lane_rest[8];
  for (; k + 8 <= n; k += 8) {
    const __m256i idx =
        _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(fired_index + k)), base);
    const __m256 g = _mm256_i32gather_ps(global, idx, 4);
    const __m256 s = _mm256_loadu_ps(fired_value + k);
    const __m256 step = _mm256_castsi256_ps(step_bits_avx2(_mm256_castps_si256(g)));
    const __m256 q = _mm256_div_ps(s, step);
    const __m256 in_range = _mm256_cmp_ps(_mm256_and_ps(q, abs_mask), limit, _CMP_LE_OQ);
    const __m256 cf = _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 p = _mm256_mul_ps(cf, step);
    const __m256 zero = _mm256_and_ps(in_range, _mm256_cmp_ps(cf, _mm256_setzero_ps(), _CMP_EQ_OQ));
    const __m256 p_finite = _mm256_castsi256_ps(_mm256_xor_si256(
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(p), exp), exp), _mm256_set1_epi32(-1)));
    const __m256 counted = _mm256_and_ps(_mm256_andnot_ps(zero, in_range), p_finite);
    __m256i c = _mm256_set1_epi32(kLocoUlpEscape);
    c = _mm256_blendv_epi8(c, _mm256_setzero_si256(), _mm256_castps_si256(zero));
    c = _mm256_blendv_epi8(c, _mm256_cvtps_epi32(cf), _mm256_castps_si256(counted));
    __m256 sent = _mm256_andnot_ps(zero, s);
    sent = _mm256_blendv_ps(sent, p, counted);
    __m256 rest = _mm256_and_ps(zero, s);
    rest = _mm256_blendv_ps(rest, _mm256_sub_ps(s, p), counted);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(fired_count + k), c);
    _mm256_storeu_ps(fired_value + k, sent);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lane_index), idx);
    _mm256_store_ps(lane_rest, rest);
    for (int j = 0; j < 8; ++j) residual[lane_index[j]] = lane_rest[j];  // AVX2 has no scatter
    deferred += static_cast<unsigned>(__builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(zero))));
  }
  return deferred +
         quantize_scalar(global, residual, fired_index, fired_value, fired_count, k, n, index_base);
}
#endif  // PULSE_KERNELS_X86

}  // namespace

// The sparse pass touches only the fired entries (a gather of g and a scatter of r, ~15% of the elements
// at RL learning rates) after the gate's pass over all of them; it runs the variant the gate runs.
uint64_t loco_ulp_quantize(const float* global, float* residual, const uint32_t* fired_index,
                           float* fired_value, int32_t* fired_count, uint64_t n_fired, uint32_t index_base) {
  if (n_fired == 0) return 0;
#ifdef PULSE_KERNELS_X86
  // Indices ascend: the last one is the largest.
  if (fired_index[n_fired - 1] - index_base <= kMaxGatherIndex) {
    const char* isa = loco_gate_isa();
    if (std::strcmp(isa, "avx512") == 0)
      return quantize_avx512(global, residual, fired_index, fired_value, fired_count, n_fired, index_base);
    if (std::strcmp(isa, "avx2") == 0)
      return quantize_avx2(global, residual, fired_index, fired_value, fired_count, n_fired, index_base);
  }
#endif
  return quantize_scalar(global, residual, fired_index, fired_value, fired_count, 0, n_fired, index_base);
}

uint64_t loco_ulp_quantize_portable(const float* global, float* residual, const uint32_t* fired_index,
                                    float* fired_value, int32_t* fired_count, uint64_t n_fired,
                                    uint32_t index_base) {
  return quantize_scalar(global, residual, fired_index, fired_value, fired_count, 0, n_fired, index_base);
}

uint64_t loco_ulp_compact(uint32_t* fired_index, float* fired_value, int32_t* fired_count, uint64_t n_fired) {
  uint64_t out = 0;
  for (uint64_t k = 0; k < n_fired; ++k) {
    if (fired_count[k] == 0) continue;
    fired_index[out] = fired_index[k];
    fired_value[out] = fired_value[k];
    fired_count[out] = fired_count[k];
    ++out;
  }
  return out;
}

}  // namespace pulse::kernels

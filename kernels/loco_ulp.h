// PULSELoCo "ulp" value coding (multi.values = "ulp"): a fired entry is sent as a signed integer count of
// its weight's BF16 steps instead of an FP32 value, and the rest stays in the error-feedback residual.
//
// Every rank holds the same round-start FP32 global weights g, so the BF16 step of each weight is the same
// on every rank and never travels. The step of g (loco_ulp_step):
//   b = bf16_rne(g) (the BF16 weight compute uses), e = b's 8-bit exponent field;
//   step = 2^(max(e, 1) - 127 - 7): the spacing of BF16 values in b's binade. Zero and BF16 subnormals
//   (e = 0) share the subnormal spacing 2^-133; a global rounding up into the next binade takes that
//   binade's step. It is a power of two in [2^-133, 2^120], exact in FP32 (2^-133 .. 2^-127 are FP32
//   subnormals). Non-finite g (e = 255) has no step: such a global weight makes every entry an escape.
//
// Per fired entry (s = the FP32 value the gate would send, kernels/loco_gate.h), in exactly this order,
// FP32 round-to-nearest-even, no contraction:
//   q = s / step                (exact: a power-of-two scaling; |q| tiny underflows to a q that rounds to 0)
//   escape if !(|q| <= kLocoUlpMaxCount) or step is 0 (non-finite g): send s as FP32, residual 0
//   c = rint(q)                 (nearest integer, ties to even), |c| <= kLocoUlpMaxCount = 2^24
//   c == 0: DEFERRED            nothing is sent; the residual keeps s whole (as if the gate had not fired)
//   p = float(c) * step         (exact: |c| <= 2^24 and step a power of two)
//   escape if p is infinite     (only when |s| is within step/2 of FLT_MAX)
//   else: send c, residual = s - p
// s - p is exact: with c != 0, |s| >= step / 2 and |s - p| <= step / 2, so s - p fits 24 significant bits
// (when ulp(s) > step, s is a multiple of step and s - p = 0). So sent (p, or s for an escape) + residual
// == s exactly: the ulp coding conserves mass as the FP32 coding does; nothing is dropped, only delayed.
// A zero count meets the gate's fired set as "fired, then deferred": the gate's rule decides what may be
// sent, the count decides whether a whole step of it exists yet.
//
// The receiver sums counts exactly in int64: |c| <= 2^24 and world_size < 2^32 bound every sum by 2^56.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pulse::kernels {

/// Largest |count| sent as a count (2^24: float(c) is exact and c * step needs no rounding). Larger
/// quotients are FP32 escapes.
constexpr int32_t kLocoUlpMaxCount = int32_t{1} << 24;
/// fired_count code of an escape: the entry is sent as its FP32 value (fired_value).
constexpr int32_t kLocoUlpEscape = INT32_MIN;
/// int64 holds the sum of world_size counts for every possible world size (uint32).
static_assert(static_cast<uint64_t>(UINT32_MAX) * static_cast<uint64_t>(kLocoUlpMaxCount) <
                  static_cast<uint64_t>(INT64_MAX),
              "int64 count sums overflow at the world-size bound");

/// FP32 bit pattern of the BF16 step of global weight g (see the file comment); 0 for non-finite g.
/// Integer code only: the same on every CPU and GPU.
inline uint32_t loco_ulp_step_bits(float g) {
  uint32_t gb;
  std::memcpy(&gb, &g, 4);
  if ((gb & 0x7f800000u) == 0x7f800000u) return 0;              // Inf / NaN
  const uint32_t b = (gb + 0x7fffu + ((gb >> 16) & 1u)) >> 16;  // BF16 RNE (g is not NaN)
  uint32_t e = (b >> 7) & 0xffu;
  if (e == 0xffu) return 0;  // g rounds to a BF16 infinity: no finite step
  if (e == 0) e = 1;
  const int k = static_cast<int>(e) - 134;                                    // step = 2^k, k in [-133, 120]
  return k >= -126 ? static_cast<uint32_t>(k + 127) << 23 : 1u << (k + 149);  // normal or subnormal FP32
}

/// The BF16 step of g as an FP32 value (0 for non-finite g).
inline float loco_ulp_step(float g) {
  const uint32_t b = loco_ulp_step_bits(g);
  float s;
  std::memcpy(&s, &b, 4);
  return s;
}

/// The ulp coding of one tensor's fired entries, in place, CPU reference (see the file comment).
///   global        g, FP32, the round-start global weights of the tensor (read only)
///   residual      r, FP32, the residual the gate left (+0 at fired entries); r[i] becomes the remainder
///                 (s for a deferred entry)
///   fired_index   the gate's fired indices (index_base + i), ascending
///   fired_value   in: the gate's s; out: the FP32 value sent (c * step, s for an escape, 0 if deferred)
///   fired_count   out: c (nonzero), kLocoUlpEscape, or 0 for deferred (not sent)
///   n_fired       entries; index_base: subtracted from every index before g and r are read
/// Returns the number of deferred entries. The values must be finite (the gate's nonfinite flag refuses
/// the round before this runs). Runs the SIMD variant the gate runs (loco_gate_isa(): "avx512" gathers
/// g and scatters r, "avx2" gathers, "portable" the scalar rule; loco_gate_force selects both), the
/// same bits in each. Thread safety: reentrant; disjoint arrays may run concurrently.
uint64_t loco_ulp_quantize(const float* global, float* residual, const uint32_t* fired_index,
                           float* fired_value, int32_t* fired_count, uint64_t n_fired,
                           uint32_t index_base = 0);

/// The scalar reference alone (same contract as loco_ulp_quantize).
uint64_t loco_ulp_quantize_portable(const float* global, float* residual, const uint32_t* fired_index,
                                    float* fired_value, int32_t* fired_count, uint64_t n_fired,
                                    uint32_t index_base = 0);

/// Drops the deferred entries (count 0) from the fired lists, keeping order; returns the new length.
uint64_t loco_ulp_compact(uint32_t* fired_index, float* fired_value, int32_t* fired_count, uint64_t n_fired);

}  // namespace pulse::kernels

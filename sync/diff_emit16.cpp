#include "sync/diff_emit16.h"

#include <cstring>
#include <vector>

#include "sync/diff_scan.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PULSE_EMIT16_AVX512 1
#include <immintrin.h>
#endif

namespace pulse::sync {

namespace {

inline uint16_t load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

/// zigzag of a wrapping 16-bit difference (sync/value_coding.h).
inline uint16_t zigzag16(uint16_t d) {
  return static_cast<uint16_t>(static_cast<uint16_t>(d << 1) ^ static_cast<uint16_t>(0u - (d >> 15)));
}

/// Appends the LEB128 bytes of `rest` (= gap >> 7, >= 1) at `t`; returns the new end.
inline uint8_t* put_tail(uint8_t* t, uint64_t rest) {
  while (rest >= 128) {
    *t++ = static_cast<uint8_t>((rest & 127) | 128);
    rest >>= 7;
  }
  *t++ = static_cast<uint8_t>(rest);
  return t;
}

/// The head byte of `gap` at *h and its tail (if any) at t; returns the new tail end. The tail is
/// written without a branch for gaps < 2^28 (at 1% density about a third of the first changes of a
/// group have a tail, at random: a branch would mispredict); `t` needs 9 bytes of room.
inline uint8_t* put_gap(uint8_t* h, uint8_t* t, uint64_t gap) {
  const uint64_t r = gap >> 7;
  *h = static_cast<uint8_t>((gap & 127) | (r ? 128 : 0));
  if (r >= (uint64_t{1} << 21)) return put_tail(t, r);
  t[0] = static_cast<uint8_t>((r & 127) | (r >= 128 ? 128 : 0));
  t[1] = static_cast<uint8_t>(((r >> 7) & 127) | (r >= 16384 ? 128 : 0));
  t[2] = static_cast<uint8_t>(r >> 14);
  return t + (r != 0) + (r >= 128) + (r >= 16384);
}

#ifdef PULSE_EMIT16_AVX512
// The low byte of each 16-bit lane (vpmovwb). The zero-masked form: GCC 12's plain
// _mm512_cvtepi16_epi8 trips -Wmaybe-uninitialized inside its own header.
#define narrow16(v) _mm512_maskz_cvtepi16_epi8(~__mmask32{0}, (v))

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,bmi,bmi2,lzcnt,popcnt"))) uint64_t
diff_emit16_avx512(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                   Emit16Cursor& c) {
  const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15,
                                        14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  // Lane j takes lane j - 1 (lane 0 keeps lane 0; its gap is computed in scalar code).
  const __m512i up = _mm512_set_epi16(30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,
                                      12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0);
  const __m512i one = _mm512_set1_epi16(1);
  uint8_t *h = c.head, *t = c.tail, *lo = c.lo, *hi = c.hi;
  uint64_t next = c.next, total = 0;
  for (uint64_t i = 0; i < count; i += 32) {
    __m512i va, vb;
    if (count - i >= 32) {
      va = _mm512_loadu_si512(a + 2 * i);
      vb = _mm512_loadu_si512(b + 2 * i);
    } else {  // masked loads: lanes past the end read as equal zeros, and never fault
      const __mmask32 live = static_cast<__mmask32>((uint64_t{1} << (count - i)) - 1);
      va = _mm512_maskz_loadu_epi16(live, a + 2 * i);
      vb = _mm512_maskz_loadu_epi16(live, b + 2 * i);
    }
    const __mmask32 m = _mm512_cmpneq_epi16_mask(va, vb);
    if (m == 0) continue;
    __m512i v = vb;
    if (delta) {
      const __m512i d = _mm512_sub_epi16(vb, va);
      v = _mm512_xor_si512(_mm512_slli_epi16(d, 1), _mm512_srai_epi16(d, 15));
    }
    const __m256i l8 = narrow16(v);
    const __m256i h8 = narrow16(_mm512_srli_epi16(v, 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), _mm256_maskz_compress_epi8(m, l8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), _mm256_maskz_compress_epi8(m, h8));
    // In-group gaps: positions of the changes packed to the low lanes, minus the previous one, minus 1.
    const __m512i p = _mm512_maskz_compress_epi16(m, iota);
    const __m512i gaps = _mm512_sub_epi16(_mm512_sub_epi16(p, _mm512_permutexvar_epi16(up, p)), one);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h), narrow16(gaps));
    const uint64_t first = start + i + static_cast<uint64_t>(_tzcnt_u32(m));
    t = put_gap(h, t, first - next);  // overwrites lane 0's head byte
    next = start + i + 32 - static_cast<uint64_t>(_lzcnt_u32(m));
    const unsigned k = static_cast<unsigned>(_mm_popcnt_u32(m));
    h += k;
    lo += k;
    hi += k;
    total += k;
  }
  c.head = h, c.tail = t, c.lo = lo, c.hi = hi, c.next = next;
  return total;
}

bool cpu_has_avx512_vbmi2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi2") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
}
#endif

}  // namespace

uint64_t diff_emit16_portable(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                              Emit16Cursor& c) {
  constexpr uint64_t kStep = 4096;  // elements per mask batch (masks stay in L1)
  uint64_t masks[kStep / kDiffGroup];
  uint8_t *h = c.head, *t = c.tail, *lo = c.lo, *hi = c.hi;
  uint64_t next = c.next, total = 0;
  for (uint64_t s = 0; s < count; s += kStep) {
    const uint64_t n = count - s < kStep ? count - s : kStep;
    if (diff_masks(a + 2 * s, b + 2 * s, n, 2, masks) == 0) continue;
    for (uint64_t g = 0; g < (n + kDiffGroup - 1) / kDiffGroup; ++g)
      for (uint64_t m = masks[g]; m; m &= m - 1) {
        const uint64_t off = s + g * kDiffGroup + static_cast<uint64_t>(__builtin_ctzll(m));
        const uint16_t vb = load16(b + 2 * off);
        const uint16_t v = delta ? zigzag16(static_cast<uint16_t>(vb - load16(a + 2 * off))) : vb;
        *lo++ = static_cast<uint8_t>(v);
        *hi++ = static_cast<uint8_t>(v >> 8);
        t = put_gap(h++, t, start + off - next);
        next = start + off + 1;
        ++total;
      }
  }
  c.head = h, c.tail = t, c.lo = lo, c.hi = hi, c.next = next;
  return total;
}

bool diff_emit16_uses_avx512() {
#ifdef PULSE_EMIT16_AVX512
  static const bool has = cpu_has_avx512_vbmi2();
  return has;
#else
  return false;
#endif
}

uint64_t diff_emit16(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                     Emit16Cursor& cursor) {
#ifdef PULSE_EMIT16_AVX512
  if (diff_emit16_uses_avx512()) return diff_emit16_avx512(a, b, start, count, delta, cursor);
#endif
  return diff_emit16_portable(a, b, start, count, delta, cursor);
}

}  // namespace pulse::sync

#include "kernels/diff_emit16.h"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/diff_scan.h"
#include "kernels/int_coding.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PULSE_EMIT16_AVX512 1
// GCC 12's AVX-512 headers seed the pass-through operand of unmasked intrinsics with a self-initialized
// "undefined" vector, which -Wmaybe-uninitialized reports at every inlined use; not a bug of this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace pulse::kernels {

namespace {

/// The head byte of `gap` at *h and its tail (if any) at t; returns the new tail end. The tail is
/// written without a branch for gaps < 2^28 (at 1% density about a third of the first changes of a
/// group have a tail, at random: a branch would mispredict); `t` needs 9 bytes of room.
inline uint8_t* put_gap(uint8_t* h, uint8_t* t, uint64_t gap) {
  const uint64_t r = gap >> 7;
  *h = static_cast<uint8_t>((gap & 127) | (r ? 128 : 0));
  if (r >= (uint64_t{1} << 21)) return write_gap_tail(t, r);
  t[0] = static_cast<uint8_t>((r & 127) | (r >= 128 ? 128 : 0));
  t[1] = static_cast<uint8_t>(((r >> 7) & 127) | (r >= 16384 ? 128 : 0));
  t[2] = static_cast<uint8_t>(r >> 14);
  return t + (r != 0) + (r >= 128) + (r >= 16384);
}

#ifdef PULSE_EMIT16_AVX512
// 64 elements per step (two vectors per side): the 64-bit change mask drives byte-wide compresses of
// the value bytes and of the in-group positions (vpcompressb), so the per-element work is a few
// instructions and no branch depends on the data.
#define PULSE_AVX512_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,bmi,bmi2,lzcnt,popcnt")))

// Zero-masked form: GCC 12's plain _mm512_shuffle_epi32 trips -Wmaybe-uninitialized in its own header.
#define pshufd(v, imm) \
  _mm512_maskz_shuffle_epi32(static_cast<__mmask16>(0xFFFF), (v), static_cast<_MM_PERM_ENUM>(imm))

// XXH3's stripe accumulation and scramble (libxxhash's AVX-512 code path, XXH3 spec "accumulate_512").
PULSE_AVX512_TARGET __attribute__((always_inline)) inline __m512i xxh3_accumulate(__m512i acc, __m512i data,
                                                                                  __m512i key) {
  const __m512i data_key = _mm512_xor_si512(data, key);
  const __m512i product = _mm512_mul_epu32(data_key, pshufd(data_key, _MM_SHUFFLE(0, 3, 0, 1)));
  return _mm512_add_epi64(product, _mm512_add_epi64(acc, pshufd(data, _MM_SHUFFLE(1, 0, 3, 2))));
}

PULSE_AVX512_TARGET __attribute__((always_inline)) inline __m512i xxh3_scramble(__m512i acc, __m512i key) {
  const __m512i prime32 = _mm512_set1_epi32(static_cast<int>(0x9E3779B1u));  // XXH_PRIME32_1
  const __m512i data_key = _mm512_xor_si512(_mm512_xor_si512(acc, _mm512_srli_epi64(acc, 47)), key);
  const __m512i prod_lo = _mm512_mul_epu32(data_key, prime32);
  const __m512i prod_hi = _mm512_mul_epu32(pshufd(data_key, _MM_SHUFFLE(0, 3, 0, 1)), prime32);
  return _mm512_add_epi64(prod_lo, _mm512_slli_epi64(prod_hi, 32));
}

template <bool kDelta, bool kHashA, bool kHashB>
PULSE_AVX512_TARGET uint64_t diff_emit16_avx512(const uint8_t* a, const uint8_t* b, uint64_t start,
                                                uint64_t count, Emit16Cursor& c, Emit16Hash* hash) {
  alignas(64) uint8_t iota_bytes[64], up_bytes[64], even_bytes[64], odd_bytes[64];
  for (int j = 0; j < 64; ++j) {
    iota_bytes[j] = static_cast<uint8_t>(j);
    up_bytes[j] = static_cast<uint8_t>(j ? j - 1 : 0);  // lane j takes lane j - 1 (lane 0: scalar code)
    even_bytes[j] = static_cast<uint8_t>(2 * j);        // bytes 0, 2, .. of (v0, v1) as one 128-byte table
    odd_bytes[j] = static_cast<uint8_t>(2 * j + 1);
  }
  const __m512i iota = _mm512_load_si512(iota_bytes);
  const __m512i up = _mm512_load_si512(up_bytes);
  const __m512i even = _mm512_load_si512(even_bytes);
  const __m512i odd = _mm512_load_si512(odd_bytes);
  const __m512i one = _mm512_set1_epi8(1);
  uint8_t *h = c.head, *t = c.tail, *lo = c.lo, *hi = c.hi;
  uint64_t next = c.next, total = 0;
  __m512i acc_a = _mm512_setzero_si512(), acc_b = _mm512_setzero_si512();
  const uint8_t* secret = hash ? hash->secret : nullptr;
  const uint64_t hash_end = hash ? hash->block_bytes : 0;
  if (kHashA) acc_a = _mm512_load_si512(hash->base->acc);
  if (kHashB) acc_b = _mm512_load_si512(hash->target->acc);
  for (uint64_t i = 0; i < count; i += 64) {
    __m512i a0, a1, b0, b1;
    const uint8_t* pa = a + 2 * i;
    const uint8_t* pb = b + 2 * i;
    if (count - i >= 64) {
      a0 = _mm512_loadu_si512(pa);
      a1 = _mm512_loadu_si512(pa + 64);
      b0 = _mm512_loadu_si512(pb);
      b1 = _mm512_loadu_si512(pb + 64);
    } else {  // masked loads: lanes past the end read as equal zeros, and never fault
      const uint64_t live = count - i < 64 ? (uint64_t{1} << (count - i)) - 1 : ~uint64_t{0};
      const __mmask32 l0 = static_cast<__mmask32>(live), l1 = static_cast<__mmask32>(live >> 32);
      a0 = _mm512_maskz_loadu_epi16(l0, pa);
      a1 = _mm512_maskz_loadu_epi16(l1, pa + 64);
      b0 = _mm512_maskz_loadu_epi16(l0, pb);
      b1 = _mm512_maskz_loadu_epi16(l1, pb + 64);
    }
    if (kHashA || kHashB) {
      // Stripes 2j, 2j + 1 of a 1024-byte XXH3 block (the kernel starts at a multiple of 64 elements).
      const uint64_t off = 2 * (start + i);
      if (off + 128 <= hash_end) {
        const uint64_t s = (off >> 6) & 15;
        const __m512i k0 = _mm512_loadu_si512(secret + 8 * s), k1 = _mm512_loadu_si512(secret + 8 * s + 8);
        if (kHashA) acc_a = xxh3_accumulate(xxh3_accumulate(acc_a, a0, k0), a1, k1);
        if (kHashB) acc_b = xxh3_accumulate(xxh3_accumulate(acc_b, b0, k0), b1, k1);
        if (s == 14) {
          const __m512i ks = _mm512_loadu_si512(secret + 128);
          if (kHashA) acc_a = xxh3_scramble(acc_a, ks);
          if (kHashB) acc_b = xxh3_scramble(acc_b, ks);
        }
      }
    }
    const __mmask64 m = static_cast<__mmask64>(_mm512_cmpneq_epi16_mask(a0, b0)) |
                        (static_cast<__mmask64>(_mm512_cmpneq_epi16_mask(a1, b1)) << 32);
    if (m == 0) continue;
    __m512i v0 = b0, v1 = b1;
    if (kDelta) {
      const __m512i d0 = _mm512_sub_epi16(b0, a0), d1 = _mm512_sub_epi16(b1, a1);
      v0 = _mm512_xor_si512(_mm512_slli_epi16(d0, 1), _mm512_srai_epi16(d0, 15));
      v1 = _mm512_xor_si512(_mm512_slli_epi16(d1, 1), _mm512_srai_epi16(d1, 15));
    }
    const __m512i l8 = _mm512_permutex2var_epi8(v0, even, v1);  // byte 0 of the 64 values
    const __m512i h8 = _mm512_permutex2var_epi8(v0, odd, v1);   // byte 1
    _mm512_storeu_si512(lo, _mm512_maskz_compress_epi8(m, l8));
    _mm512_storeu_si512(hi, _mm512_maskz_compress_epi8(m, h8));
    // In-group gaps: positions of the changes packed to the low lanes, minus the previous one, minus 1.
    const __m512i p = _mm512_maskz_compress_epi8(m, iota);
    _mm512_storeu_si512(
        h, _mm512_sub_epi8(_mm512_sub_epi8(p, _mm512_maskz_permutexvar_epi8(~__mmask64{0}, up, p)), one));
    const uint64_t first = start + i + static_cast<uint64_t>(_tzcnt_u64(m));
    t = put_gap(h, t, first - next);  // overwrites lane 0's head byte
    next = start + i + 64 - static_cast<uint64_t>(_lzcnt_u64(m));
    const uint64_t k = static_cast<uint64_t>(_mm_popcnt_u64(m));
    h += k;
    lo += k;
    hi += k;
    total += k;
  }
  c.head = h, c.tail = t, c.lo = lo, c.hi = hi, c.next = next;
  if (kHashA) _mm512_store_si512(hash->base->acc, acc_a);
  if (kHashB) _mm512_store_si512(hash->target->acc, acc_b);
  return total;
}

template <bool kDelta>
uint64_t diff_emit16_avx512_hashing(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count,
                                    Emit16Cursor& c, Emit16Hash* hash) {
  const bool ha = hash && hash->base, hb = hash && hash->target;
  if (ha && hb) return diff_emit16_avx512<kDelta, true, true>(a, b, start, count, c, hash);
  if (hb) return diff_emit16_avx512<kDelta, false, true>(a, b, start, count, c, hash);
  if (ha) return diff_emit16_avx512<kDelta, true, false>(a, b, start, count, c, hash);
  return diff_emit16_avx512<kDelta, false, false>(a, b, start, count, c, hash);
}

bool cpu_has_avx512_vbmi2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
         __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi") &&
         __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
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
        const uint16_t vb = load_le<uint16_t>(b + 2 * off);
        const uint16_t v = delta ? zigzag(static_cast<uint16_t>(vb - load_le<uint16_t>(a + 2 * off))) : vb;
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

namespace {
std::atomic<bool> force_portable{false};
}  // namespace

bool diff_emit16_uses_avx512() {
#ifdef PULSE_EMIT16_AVX512
  static const bool has = cpu_has_avx512_vbmi2();
  return has && !force_portable.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void diff_emit16_force_portable(bool portable) {
  force_portable.store(portable, std::memory_order_relaxed);
}

uint64_t diff_emit16(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                     Emit16Cursor& cursor, Emit16Hash* hash) {
#ifdef PULSE_EMIT16_AVX512
  if (diff_emit16_uses_avx512()) {
    if (hash && start % 64 != 0)
      throw std::invalid_argument("diff_emit16: hashing needs start at a multiple of 64 elements");
    return delta ? diff_emit16_avx512_hashing<true>(a, b, start, count, cursor, hash)
                 : diff_emit16_avx512_hashing<false>(a, b, start, count, cursor, hash);
  }
#endif
  if (hash) throw std::invalid_argument("diff_emit16: fused hashing needs the AVX-512 kernel");
  return diff_emit16_portable(a, b, start, count, delta, cursor);
}

}  // namespace pulse::kernels

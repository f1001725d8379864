// XXH3's stripe accumulation and accumulator scramble in AVX-512F and AVX2 registers (XXH3 spec,
// "accumulate_512" and "scrambleAcc"; libxxhash's XXH3_accumulate_512_avx512/_avx2 and
// XXH3_scrambleAcc_avx512/_avx2), shared by the fused scan kernels (kernels/diff_emit16.cpp) and the block
// hash (kernels/xxh3_long.cpp). Always inlined; the target attributes name the least each needs, so they
// inline into kernels compiled for a superset. Only where PULSE_KERNELS_X86 is defined.
#pragma once
#include <cstdint>

#include "kernels/x86_simd.h"

#ifdef PULSE_KERNELS_X86
namespace pulse::kernels::simd {

// Zero-masked form: GCC 12's plain _mm512_shuffle_epi32 trips -Wmaybe-uninitialized in its own header.
#define PULSE_PSHUFD512(v, imm) \
  _mm512_maskz_shuffle_epi32(static_cast<__mmask16>(0xFFFF), (v), static_cast<_MM_PERM_ENUM>(imm))

/// One 64-byte stripe's contribution to the 8 accumulators: lo32(d ^ k) * hi32(d ^ k) per lane plus the
/// data with its 64-bit lanes swapped in pairs (accumulate_512 without the add to acc).
__attribute__((target("avx512f"), always_inline)) inline __m512i xxh3_stripe_avx512(__m512i data,
                                                                                    __m512i key) {
  const __m512i data_key = _mm512_xor_si512(data, key);
  const __m512i product = _mm512_mul_epu32(data_key, PULSE_PSHUFD512(data_key, _MM_SHUFFLE(0, 3, 0, 1)));
  return _mm512_add_epi64(product, PULSE_PSHUFD512(data, _MM_SHUFFLE(1, 0, 3, 2)));
}

/// acc ^= acc >> 47; acc ^= key; acc *= PRIME32_1 (per 64-bit lane).
__attribute__((target("avx512f"), always_inline)) inline __m512i xxh3_scramble_avx512(__m512i acc,
                                                                                      __m512i key) {
  const __m512i prime32 = _mm512_set1_epi32(static_cast<int>(0x9E3779B1u));  // XXH_PRIME32_1
  const __m512i data_key = _mm512_xor_si512(_mm512_xor_si512(acc, _mm512_srli_epi64(acc, 47)), key);
  const __m512i prod_lo = _mm512_mul_epu32(data_key, prime32);
  const __m512i prod_hi = _mm512_mul_epu32(PULSE_PSHUFD512(data_key, _MM_SHUFFLE(0, 3, 0, 1)), prime32);
  return _mm512_add_epi64(prod_lo, _mm512_slli_epi64(prod_hi, 32));
}

/// Half a stripe (32 bytes, 4 accumulators) with its 32 key bytes at `key`, as xxh3_stripe_avx512.
__attribute__((target("avx2"), always_inline)) inline __m256i xxh3_stripe_avx2(__m256i data,
                                                                               const uint8_t* key) {
  const __m256i data_key = _mm256_xor_si256(data, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key)));
  const __m256i product = _mm256_mul_epu32(data_key, _mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1)));
  return _mm256_add_epi64(product, _mm256_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2)));
}

/// xxh3_scramble_avx512 on 4 accumulators, the 32 key bytes at `key`.
__attribute__((target("avx2"), always_inline)) inline __m256i xxh3_scramble_avx2(__m256i acc,
                                                                                 const uint8_t* key) {
  const __m256i prime32 = _mm256_set1_epi32(static_cast<int>(0x9E3779B1u));  // XXH_PRIME32_1
  const __m256i data_key = _mm256_xor_si256(_mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47)),
                                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key)));
  const __m256i prod_lo = _mm256_mul_epu32(data_key, prime32);
  const __m256i prod_hi = _mm256_mul_epu32(_mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1)), prime32);
  return _mm256_add_epi64(prod_lo, _mm256_slli_epi64(prod_hi, 32));
}

}  // namespace pulse::kernels::simd
#endif

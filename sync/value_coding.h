// Value streams of a patch tensor (sync/FORMAT.md), for m stored values of w bytes each, as w byte
// planes of m bytes; plane b holds byte b (little-endian) of every stored value:
//   absolute: the new bit patterns.
//   delta:    zigzag(target - base): the bit patterns as w-byte unsigned integers, difference taken
//             modulo 2^(8w), read as two's complement d, stored as (d << 1) ^ (d >> (8w - 1)).
// Byte planes put the bytes with similar statistics next to each other so that zstd's entropy stage sees
// them apart (exponent vs mantissa bytes). Zigzag keeps sign and magnitude in one symbol: a +-1 ULP BF16
// change is the byte 1 or 2 (one bit for Huffman) and its high byte 0, which zstd compresses to nothing;
// a separate sign bitmap was measured worse (Huffman cannot code a skewed magnitude below 1 bit).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/int_coding.h"

namespace pulse::sync {

/// Bytes of a value stream with m values of w bytes.
inline uint64_t value_stream_bytes(bool delta, uint64_t m, uint64_t w) {
  (void)delta;
  return m * w;
}

// The bit-level helpers live with the kernels that use them (kernels/int_coding.h).
using kernels::load_le;
using kernels::store_le;
using kernels::unzigzag;
using kernels::zigzag;

/// Reads value j from a value stream of m values.
template <typename U>
struct ValueStreamReader {
  const uint8_t* planes = nullptr;
  uint64_t m = 0;
  bool delta = false;

  ValueStreamReader(const uint8_t* stream, uint64_t m_values, bool delta_mode)
      : planes(stream), m(m_values), delta(delta_mode) {}

  /// The value j as stored: a bit pattern (absolute) or the wrapping difference (delta).
  U get(uint64_t j) const {
    U v = 0;
    for (size_t b = 0; b < sizeof(U); ++b) v |= static_cast<U>(static_cast<U>(planes[b * m + j]) << (8 * b));
    return delta ? unzigzag(v) : v;
  }
  /// The element's new bit pattern given its old one.
  U apply(uint64_t j, U old) const { return delta ? static_cast<U>(old + get(j)) : get(j); }
};

}  // namespace pulse::sync

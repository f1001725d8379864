// Byte-shuffle tables for the AVX2 kernels, which have no byte compress/expand (AVX-512 VBMI2's
// vpcompressb / vpexpandb): an 8-bit lane mask indexes a pshufb control that packs or spreads 8 bytes.
// Built at compile time; read only, so any thread may use them. Private to kernels/*.cpp.
#pragma once
#include <cstdint>

namespace pulse::kernels::tables {

/// 256 entries of 16 bytes. Entry m, bytes 0..7: the positions (0..7) of the set bits of m in increasing
/// order, then 0x80; bytes 8..15: the same plus 8 (0x80 stays). pshufb of [x0..x7 | y0..y7] with it
/// gives the x bytes of m's lanes packed to bytes 0.., the y bytes packed to bytes 8.. (two planes, one
/// shuffle).
struct Compress16 {
  alignas(16) uint8_t ctrl[256][16];
};

/// 256 entries of 8 bytes. Entry m: the in-mask gaps of m's set bits, gap_k = p_k - p_{k-1} - 1 with
/// p_{-1} = -1 (so byte 0 is the position of the lowest set bit), then 0.
struct Gaps8 {
  alignas(16) uint8_t gap[256][8];
};

/// 256 entries of 8 bytes. Entry m, byte l: when bit l of m is set, the number of set bits of m below
/// bit l (the rank of lane l among m's lanes), else 0x80. pshufb of 8 packed bytes with it spreads them
/// to m's lanes and zeroes the others (a byte expand).
struct Expand8 {
  alignas(16) uint8_t ctrl[256][8];
};

/// One entry of Emit8 (32 bytes, so an entry's address is the mask times 32 and every field is one load).
struct Emit8Entry {
  /// For 8 2-byte elements as they lie in memory ([e0 byte 0, e0 byte 1, e1 byte 0, ...]): bytes 0..7
  /// are 2 l for the set bits l of m in increasing order, bytes 8..15 the same plus 1, 0x80 past the
  /// count. pshufb with it packs m's elements' byte 0 to bytes 0.. and their byte 1 to bytes 8.. (it
  /// splits the planes and compresses them in one shuffle).
  uint8_t ctrl[16];
  uint8_t gap[8];  ///< = Gaps8 entry m
  uint8_t count;   ///< the number of set bits of m
  uint8_t pad[7];
};

/// 256 Emit8Entry: what the AVX2 emit kernel needs per 8-element sub-group, in half a cache line.
struct Emit8 {
  alignas(32) Emit8Entry e[256];
};

constexpr Compress16 make_compress16() {
  Compress16 t{};
  for (int m = 0; m < 256; ++m) {
    int k = 0;
    for (int l = 0; l < 8; ++l)
      if (m >> l & 1) {
        t.ctrl[m][k] = static_cast<uint8_t>(l);
        t.ctrl[m][8 + k] = static_cast<uint8_t>(l + 8);
        ++k;
      }
    for (; k < 8; ++k) t.ctrl[m][k] = t.ctrl[m][8 + k] = 0x80;
  }
  return t;
}

constexpr Gaps8 make_gaps8() {
  Gaps8 t{};
  for (int m = 0; m < 256; ++m) {
    int k = 0, prev = -1;
    for (int l = 0; l < 8; ++l)
      if (m >> l & 1) {
        t.gap[m][k++] = static_cast<uint8_t>(l - prev - 1);
        prev = l;
      }
  }
  return t;
}

constexpr Expand8 make_expand8() {
  Expand8 t{};
  for (int m = 0; m < 256; ++m) {
    int k = 0;
    for (int l = 0; l < 8; ++l) t.ctrl[m][l] = m >> l & 1 ? static_cast<uint8_t>(k++) : 0x80;
  }
  return t;
}

constexpr Emit8 make_emit8() {
  Emit8 t{};
  const Compress16 c = make_compress16();
  const Gaps8 g = make_gaps8();
  for (int m = 0; m < 256; ++m) {
    for (int l = 0; l < 8; ++l) {  // Compress16's lane l (x) / l + 8 (y) is element l's byte 0 / 1
      t.e[m].ctrl[l] = c.ctrl[m][l] == 0x80 ? 0x80 : static_cast<uint8_t>(2 * c.ctrl[m][l]);
      t.e[m].ctrl[8 + l] = c.ctrl[m][l] == 0x80 ? 0x80 : static_cast<uint8_t>(2 * c.ctrl[m][l] + 1);
    }
    for (int l = 0; l < 8; ++l) t.e[m].gap[l] = g.gap[m][l];
    int k = 0;
    for (int l = 0; l < 8; ++l) k += m >> l & 1;
    t.e[m].count = static_cast<uint8_t>(k);
  }
  return t;
}

inline constexpr Compress16 kCompress16 = make_compress16();
inline constexpr Gaps8 kGaps8 = make_gaps8();
inline constexpr Expand8 kExpand8 = make_expand8();
inline constexpr Emit8 kEmit8 = make_emit8();

}  // namespace pulse::kernels::tables

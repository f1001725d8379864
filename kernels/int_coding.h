// Integer codings shared by the kernels (kernels/diff_emit16.h, kernels/apply_kernels.h) and the sync/
// codecs that define the format around them (sync/value_coding.h, sync/index_coding.h, sync/FORMAT.md):
// little-endian loads/stores, zigzag of wrapping differences, and the LEB128 tail of a varint gap.
// Header-only and dependency-free, so that pulse_kernels does not depend on pulse_sync.
#pragma once
#include <cstdint>
#include <cstring>

namespace pulse::kernels {

/// Reads a U (unsigned integer) stored little-endian at p (any alignment).
template <typename U>
inline U load_le(const uint8_t* p) {
  U v;
  std::memcpy(&v, p, sizeof v);  // little-endian host (x86-64, AArch64)
  return v;
}

/// Writes v little-endian at p (any alignment).
template <typename U>
inline void store_le(uint8_t* p, U v) {
  std::memcpy(p, &v, sizeof v);
}

/// zigzag of a wrapping difference d: (d << 1) ^ (d >> (8w - 1)), arithmetic shift.
template <typename U>
inline U zigzag(U d) {
  constexpr int kBits = 8 * sizeof(U);
  return static_cast<U>(static_cast<U>(d << 1) ^ static_cast<U>(U(0) - static_cast<U>(d >> (kBits - 1))));
}

/// Inverse of zigzag.
template <typename U>
inline U unzigzag(U z) {
  return static_cast<U>(static_cast<U>(z >> 1) ^ static_cast<U>(U(0) - static_cast<U>(z & 1)));
}

/// Writes `rest` (= gap >> 7, >= 1) as the LEB128 tail bytes of one gap at `t`; returns the new end
/// (at most 9 bytes written).
inline uint8_t* write_gap_tail(uint8_t* t, uint64_t rest) {
  while (rest >= 128) {
    *t++ = static_cast<uint8_t>((rest & 127) | 128);
    rest >>= 7;
  }
  *t++ = static_cast<uint8_t>(rest);
  return t;
}

/// ORs the LEB128 tail bytes at `tail` (advanced past them) into `gap` from bit `shift` on (7 for a
/// head's first tail byte). No checks: for streams sync's validate_index_stream accepted.
inline uint64_t read_gap_tail(const uint8_t*& tail, uint64_t gap, int shift) {
  uint8_t c;
  do {
    c = *tail++;
    gap |= static_cast<uint64_t>(c & 127) << shift;
    shift += 7;
  } while (c & 128);
  return gap;
}

}  // namespace pulse::kernels

// Index streams of a patch tensor: which elements (row-major element index, 64-bit) changed.
// Codings (values are part of the format, sync/FORMAT.md):
//   0 varint gaps: gap_j = idx_j - idx_{j-1} - 1 (idx_{-1} = -1), LEB128, split into a head stream (one
//     byte per change: the low 7 bits + continuation flag) followed by a tail stream (the remaining
//     LEB128 bytes of gap >> 7). Splitting keeps the byte statistics of heads and tails apart, which is
//     what lets zstd's Huffman stage reach the entropy of geometric gaps (heads and tails are then
//     nearly independent).
//   1 bitmap: ceil(numel / 8) bytes, bit i (LSB first) set when element i changed; padding bits zero.
//   2 dense: no index stream; the value stream holds every element.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/int_coding.h"
#include "sync/patch.h"

namespace pulse::sync {

enum IndexCoding : uint8_t { kIndexVarintGaps = 0, kIndexBitmap = 1, kIndexDense = 2 };

/// Builds a varint-gap index stream from increasing positions.
class GapEncoder {
 public:
  void add(uint64_t pos) {
    uint64_t gap = pos - next_;
    next_ = pos + 1;
    if (gap < 128) {
      head_.push_back(static_cast<uint8_t>(gap));
      return;
    }
    head_.push_back(static_cast<uint8_t>((gap & 127) | 128));
    gap >>= 7;
    while (gap >= 128) {
      tail_.push_back(static_cast<uint8_t>((gap & 127) | 128));
      gap >>= 7;
    }
    tail_.push_back(static_cast<uint8_t>(gap));
  }
  void reserve(size_t changes) { head_.reserve(changes); }
  size_t bytes() const { return head_.size() + tail_.size(); }
  size_t count() const { return head_.size(); }
  /// Appends head then tail to `out`.
  void append_to(std::vector<uint8_t>& out) const {
    out.insert(out.end(), head_.begin(), head_.end());
    out.insert(out.end(), tail_.begin(), tail_.end());
  }

 private:
  std::vector<uint8_t> head_, tail_;
  uint64_t next_ = 0;
};

// The LEB128 tail writer and reader are shared with the kernels (kernels/int_coding.h).
using kernels::read_gap_tail;
using kernels::write_gap_tail;

/// Iterates the positions of an index stream that validate_index_stream accepted (no checks here).
class PositionIter {
 public:
  PositionIter(uint8_t coding, const uint8_t* index, uint64_t index_bytes, uint64_t changed, uint64_t numel)
      : coding_(coding), index_(index), changed_(changed), numel_(numel) {
    tail_ = index + changed;
    (void)index_bytes;
  }
  /// Next changed position, or UINT64_MAX when done.
  uint64_t next() {
    if (coding_ == kIndexDense) return emitted_ < numel_ ? emitted_++ : UINT64_MAX;
    if (emitted_ == changed_) return UINT64_MAX;
    ++emitted_;
    if (coding_ == kIndexVarintGaps) {
      const uint8_t h = index_[emitted_ - 1];
      uint64_t gap = h & 127;
      if (h & 128) gap = read_gap_tail(tail_, gap, 7);
      const uint64_t pos = next_ + gap;
      next_ = pos + 1;
      return pos;
    }
    // bitmap
    while (word_ == 0) {
      word_base_ = word_pos_ * 64;
      const uint64_t bytes = (numel_ + 7) / 8;
      const uint64_t off = word_pos_ * 8;
      const uint64_t take = bytes - off < 8 ? bytes - off : 8;
      word_ = 0;
      std::memcpy(&word_, index_ + off, take);  // little-endian host
      ++word_pos_;
    }
    const int bit = __builtin_ctzll(word_);
    word_ &= word_ - 1;
    return word_base_ + bit;
  }

 private:
  uint8_t coding_;
  const uint8_t* index_;
  const uint8_t* tail_ = nullptr;
  uint64_t changed_, numel_, emitted_ = 0, next_ = 0;
  uint64_t word_ = 0, word_pos_ = 0, word_base_ = 0;
};

/// Checks an index stream fully: sizes, every position < numel and strictly increasing, no trailing or
/// missing bytes, bitmap popcount == changed and zero padding. Throws PatchError naming `tensor` and
/// the byte offset inside the payload (`payload_offset` = where the stream starts).
void validate_index_stream(const std::string& tensor, uint8_t coding, const uint8_t* index,
                           uint64_t index_bytes, uint64_t changed, uint64_t numel, uint64_t payload_offset);

/// Bytes of an index stream that the header must declare for bitmap/dense (varint: any in
/// [changed, 10 * changed]).
uint64_t bitmap_bytes(uint64_t numel);

/// The index coding the encoder writes for a tensor of `numel` elements of which `changed` changed, whose
/// varint-gap streams (heads + tails) take `gap_bytes`: the one whose index + value streams are smallest
/// (varint gaps, then bitmap, then dense on ties; values of `value_size` bytes, delta or absolute), or
/// `force_coding` when it is >= 0 (tests). One rule for the CPU and GPU encoders, so their bytes agree.
uint8_t choose_index_coding(uint64_t numel, uint64_t changed, uint64_t gap_bytes, bool delta,
                            uint64_t value_size, int force_coding);

}  // namespace pulse::sync

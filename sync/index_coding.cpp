#include "sync/index_coding.h"

#include "sync/value_coding.h"

#include "kernels/apply_kernels.h"

namespace pulse::sync {

uint64_t bitmap_bytes(uint64_t numel) {
  return numel / 8 + (numel % 8 != 0);
}

uint8_t choose_index_coding(uint64_t numel, uint64_t changed, uint64_t gap_bytes, bool delta,
                            uint64_t value_size, int force_coding) {
  if (force_coding >= 0) return static_cast<uint8_t>(force_coding);
  const uint64_t sparse_values = value_stream_bytes(delta, changed, value_size);
  const uint64_t varint_total = gap_bytes + sparse_values;
  const uint64_t bitmap_total = bitmap_bytes(numel) + sparse_values;
  const uint64_t dense_total = value_stream_bytes(delta, numel, value_size);
  uint8_t coding = kIndexVarintGaps;
  uint64_t best = varint_total;
  if (bitmap_total < best) coding = kIndexBitmap, best = bitmap_total;
  if (dense_total < best) coding = kIndexDense;
  return coding;
}

namespace {

/// Whether a varint-gap stream is valid, checked without decoding every gap: the positions are all in
/// bounds iff the last one is, i.e. sum(gap + 1) <= numel, and sum(gap) = sum(head & 127) + 128 *
/// sum(tail values), so only the head sums (SIMD) and a pass over the tail bytes (rare at RL
/// densities) are needed. Accepts exactly what the change-by-change check below accepts: the tail
/// must split into one complete chain per head with bit 7, each passing the same 64-bit overflow
/// rule. false: invalid (the precise check then finds and names the error).
bool varint_gaps_valid(const uint8_t* index, uint64_t index_bytes, uint64_t changed, uint64_t numel) {
  const kernels::HeadSums heads = kernels::varint_head_sums(index, changed);
  unsigned __int128 sum = static_cast<unsigned __int128>(heads.low7) + changed;  // sum(gap + 1)
  uint64_t chains = 0, rest = 0;
  int shift = 0;
  for (const uint8_t *tail = index + changed, *end = index + index_bytes; tail < end; ++tail) {
    const uint8_t b = *tail;
    if (shift >= 57 || (shift == 56 && (b & 127) > 1)) return false;
    rest |= static_cast<uint64_t>(b & 127) << shift;
    if (b & 128) {
      shift += 7;
    } else {
      sum += static_cast<unsigned __int128>(rest) << 7;
      rest = 0;
      shift = 0;
      ++chains;
    }
  }
  return shift == 0 && chains == heads.flagged && sum <= numel;
}

}  // namespace

void validate_index_stream(const std::string& tensor, uint8_t coding, const uint8_t* index,
                           uint64_t index_bytes, uint64_t changed, uint64_t numel, uint64_t payload_offset) {
  auto fail = [&](const std::string& what, uint64_t at) {
    return PatchError("patch tensor '" + tensor + "': index stream " + what + " at payload byte offset " +
                      std::to_string(payload_offset + at));
  };
  if (changed > numel)
    throw fail("claims " + std::to_string(changed) + " changes in " + std::to_string(numel) + " elements", 0);
  if (coding == kIndexDense) {
    if (index_bytes != 0) throw fail("of a dense tensor is not empty", 0);
    return;
  }
  if (coding == kIndexBitmap) {
    if (index_bytes != bitmap_bytes(numel)) throw fail("has the wrong bitmap size", 0);
    uint64_t ones = 0;
    uint64_t i = 0;
    for (; i + 8 <= index_bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, index + i, 8);
      ones += static_cast<uint64_t>(__builtin_popcountll(w));
    }
    for (; i < index_bytes; ++i) ones += static_cast<uint64_t>(__builtin_popcount(index[i]));
    if (numel % 8 && (index[index_bytes - 1] >> (numel % 8)) != 0)
      throw fail("has padding bits set", index_bytes - 1);
    if (ones != changed)
      throw fail("has " + std::to_string(ones) + " bits set, header says " + std::to_string(changed), 0);
    return;
  }
  if (coding != kIndexVarintGaps) throw fail("has unknown coding " + std::to_string(coding), 0);
  if (index_bytes < changed) throw fail("is shorter than one byte per change", 0);
  if (varint_gaps_valid(index, index_bytes, changed, numel)) return;
  const uint8_t* tail = index + changed;
  const uint8_t* tail_end = index + index_bytes;
  uint64_t next = 0;  // smallest legal next position
  for (uint64_t j = 0; j < changed; ++j) {
    const uint8_t h = index[j];
    uint64_t gap = h & 127;
    if (h & 128) {
      uint64_t rest = 0;
      int shift = 0;
      for (;;) {
        if (tail == tail_end) throw fail("varint tail truncated", static_cast<uint64_t>(tail - index));
        const uint8_t b = *tail++;
        if (shift >= 57 || (shift == 56 && (b & 127) > 1))
          throw fail("varint gap overflows 64 bits", static_cast<uint64_t>(tail - index - 1));
        rest |= static_cast<uint64_t>(b & 127) << shift;
        shift += 7;
        if (!(b & 128)) break;
      }
      gap |= rest << 7;
    }
    if (next >= numel || gap > numel - 1 - next)
      throw fail(
          "position out of bounds (change " + std::to_string(j) + ", " + std::to_string(numel) + " elements)",
          j);
    next = next + gap + 1;
  }
  if (tail != tail_end)
    throw fail("has " + std::to_string(tail_end - tail) + " trailing bytes",
               static_cast<uint64_t>(tail - index));
}

}  // namespace pulse::sync

// Content hashes that prove a worker's weights equal the trainer's: XXH3-64 (seed 0), computed by
// kernels/xxh3_long.h (AVX-512 / AVX2 / portable, chosen at run time) for inputs of 241 bytes and more and
// by libxxhash below that; the value is XXH3_64bits on every path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/xxh3_long.h"
#include "sync/tensor_view.h"

namespace pulse::sync {

/// XXH3-64 (seed 0) of n bytes (data may be null when n is 0), on the fastest variant of this CPU
/// (kernels::xxh3_64bits: measured ~46 GB/s AVX-512, ~37 GB/s AVX2 in cache vs ~19 GB/s for Debian's
/// libxxhash, whose build runs SSE2 only). Reentrant.
uint64_t xxh3_64(const void* data, size_t n);

/// XXH3-64 of one `len`-byte input handed over front to back in pieces while it sits in cache (the apply
/// pass's 64 KiB blocks): add(input, end) accumulates the input's full 1024-byte XXH3 blocks below `end`
/// (kernels::xxh3_long_accumulate), finish(input) reads the last <= 1024 bytes again and returns
/// XXH3_64bits(input, len). When those last bytes change before the end (the base side of an apply
/// pass), save_tail(input) copies them first and finish_saved() uses the copy. Every block below `end`
/// must still hold the bytes to be hashed when add is called; `end` only grows. Not thread safe (one
/// object per input); no allocation.
class Xxh3Blocks {
 public:
  explicit Xxh3Blocks(uint64_t len);
  /// Accumulates the not yet accumulated full blocks of input[0, end) (end <= len; a block that `end`
  /// cuts is accumulated by a later call, or read by finish).
  void add(const uint8_t* input, uint64_t end);
  /// Copies the bytes finish reads (the input's last <= 1024 bytes; all of a short input) for
  /// finish_saved(): call before they change.
  void save_tail(const uint8_t* input);
  /// XXH3_64bits of the whole `input` (len bytes): the blocks add() did not reach, then the merge.
  uint64_t finish(const uint8_t* input);
  /// The same from the save_tail() copy, when input[0, len) was accumulated by add(input, len) before
  /// any of it changed. Throws std::logic_error when save_tail was not called.
  uint64_t finish_saved();

 private:
  uint64_t len_, added_ = 0, tail_offset_ = 0;
  bool saved_ = false;
  kernels::Xxh3LongState state_;
  uint8_t tail_[kernels::kXxh3BlockBytes];
};

/// Streaming XXH3-64 (seed 0) through libxxhash (its SSE2 path here): update() any number of times, then
/// digest(). For inputs handed over in pieces of any size; Xxh3Blocks is faster where the whole input
/// stays addressable.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  void* state_;  // XXH3_state_t (kept out of this header)
};

/// XXH3-64 of the tensor's bytes (dtype/shape not included), through xxh3_64. Reentrant.
uint64_t tensor_hash(const TensorView& tensor);

/// Root hash of a model: XXH3-64 over (name, dtype, shape, tensor_hash) of the tensors sorted by name.
/// Byte layout of the hashed record (all u64 little-endian): n_tensors, then per tensor name_len, name
/// bytes, dtype, ndim, dims..., tensor_hash (sync/FORMAT.md).
uint64_t root_hash(const std::vector<TensorView>& tensors);

/// The same from already computed tensor hashes (tensor_hashes[i] belongs to tensors[i]); saves a pass
/// over the data when the caller hashed while scanning. Throws std::invalid_argument on a size mismatch.
uint64_t root_hash(const std::vector<TensorView>& tensors, const std::vector<uint64_t>& tensor_hashes);

/// 16 lowercase hex digits.
std::string hash_hex(uint64_t hash);

}  // namespace pulse::sync

// Content hashes that prove a worker's weights equal the trainer's: XXH3-64 (seed 0), computed by
// kernels/xxh3_long.h (AVX-512 / AVX2 / portable, chosen at run time) for inputs of 241 bytes and more and
// by libxxhash below that; the value is XXH3_64bits on every path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/xxh3_long.h"
#include "sync/io/tensor_view.h"

namespace pulse::sync {

/// XXH3-64 (seed 0) of n bytes (data may be null when n is 0), on the fastest variant of this CPU
/// (kernels::xxh3_64bits: measured in cache ~46 GB/s AVX-512, ~37 GB/s AVX2, ~25 GB/s portable vs
/// ~19 GB/s for Debian's libxxhash, whose build runs SSE2 only). Reentrant.
uint64_t xxh3_64(const void* data, size_t n);

/// XXH3-64 (seed 0) of the whole file at `path`, read once in 4 MiB pieces (Xxh3Stream below); sets
/// *bytes (when given) to its size. Throws std::runtime_error naming the path when it cannot be opened or
/// read. Reentrant.
uint64_t xxh3_file(const std::string& path, uint64_t* bytes = nullptr);

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
  /// any of it changed. Throws std::logic_error when save_tail was not called or add() did not reach
  /// the end.
  uint64_t finish_saved();

 private:
  uint64_t len_, added_ = 0, tail_offset_ = 0;
  bool saved_ = false;
  kernels::Xxh3LongState state_;
  uint8_t tail_[kernels::kXxh3BlockBytes];
};

/// Streaming XXH3-64 (seed 0): update() any number of times with pieces of any size, then digest()
/// (any number of times; XXH3_64bits of everything so far). Full 1024-byte blocks are accumulated by
/// kernels::xxh3_long_accumulate straight from the caller's pieces once a later byte shows they are not
/// the last block; at most 1024 pending bytes (and the 64 before them, for XXH3's last stripe) are
/// copied. The encoder hashes its unfused scans with it (tensors of other than 2-byte elements, the
/// portable kernels). No allocation; not thread safe (one object per input).
class Xxh3Stream {
 public:
  Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  kernels::Xxh3LongState state_;
  uint64_t total_ = 0;    // bytes seen
  uint64_t pending_ = 0;  // bytes in buffer_ not yet accumulated (1..1024 once total_ > 0)
  uint8_t last64_[64];    // the 64 bytes before buffer_ (valid once a block was accumulated)
  uint8_t buffer_[kernels::kXxh3BlockBytes];
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

// Content hashes that prove a worker's weights equal the trainer's. A tensor's hash is, by the patch's
// format version (sync/FORMAT.md, "Hashes"), the tree hash of kernels/tree_hash.h (version 3: XXH3-64 of
// 64 KiB chunks, combined) or XXH3-64 of its bytes (versions 1 and 2); XXH3 runs on kernels/xxh3_long.h
// (AVX-512 / AVX2 / portable, chosen at run time) for inputs of 241 bytes and more and libxxhash below.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tree_hash.h"
#include "kernels/xxh3_long.h"
#include "sync/io/tensor_view.h"

namespace pulse::sync {

/// What a tensor hash is (sync/FORMAT.md, "Hashes"). Both prove the same thing, the exact bytes.
enum class HashScheme : uint8_t {
  Xxh3 = 0,  ///< XXH3-64 of the tensor's bytes: format versions 1 and 2
  Tree = 1,  ///< kernels/tree_hash.h: XXH3-64 of 64 KiB chunks, combined: format version 3 (written now)
};

/// The scheme of a patch of format version `format_version` (1 and 2: Xxh3; 3: Tree).
constexpr HashScheme hash_scheme_of_format(uint32_t format_version) {
  return format_version >= 3 ? HashScheme::Tree : HashScheme::Xxh3;
}

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

/// The tree hash's combine, fed leaf by leaf (kernels/tree_hash.h tree_hash_combine of every leaf added
/// so far): what a pass that hashes a tensor 64 KiB chunk by chunk (the encoder's scan, the apply pass)
/// keeps per tensor. No allocation; not thread safe (one object per tensor).
class TreeLeaves {
 public:
  void add(uint64_t leaf);
  uint64_t digest() const;
  uint64_t count() const { return count_; }

 private:
  Xxh3Stream combine_;
  uint64_t count_ = 0, first_ = 0;
};

/// A tensor hash of either scheme taken while a pass walks the tensor front to back, with Xxh3Blocks'
/// contract (add / save_tail / finish / finish_saved; the apply pass's 64 KiB blocks). Tree: add() hashes
/// every whole chunk below `end` (and the last one once `end` reaches len) while it is in cache, so
/// save_tail keeps nothing and finish_saved needs every chunk added. Not thread safe; no allocation.
class TensorHashBlocks {
 public:
  TensorHashBlocks(uint64_t len, HashScheme scheme);
  void add(const uint8_t* input, uint64_t end);
  void save_tail(const uint8_t* input);
  uint64_t finish(const uint8_t* input);
  /// Throws std::logic_error (as Xxh3Blocks) when save_tail was not called or add() did not reach len.
  uint64_t finish_saved();

 private:
  uint64_t len_;
  HashScheme scheme_;
  Xxh3Blocks flat_;
  TreeLeaves tree_;
  uint64_t next_chunk_ = 0;
  bool saved_ = false;
};

/// The tensor's hash (dtype/shape not included) under `scheme`: tree (kernels::tree_hash64) or XXH3-64
/// of its bytes (xxh3_64). Reentrant.
uint64_t tensor_hash(const TensorView& tensor, HashScheme scheme = HashScheme::Tree);

/// Root hash of a model: XXH3-64 over (name, dtype, shape, tensor_hash) of the tensors sorted by name
/// (of either scheme: the root of a patch uses its version's tensor hashes).
/// Byte layout of the hashed record (all u64 little-endian): n_tensors, then per tensor name_len, name
/// bytes, dtype, ndim, dims..., tensor_hash (sync/FORMAT.md).
uint64_t root_hash(const std::vector<TensorView>& tensors);

/// The same from already computed tensor hashes (tensor_hashes[i] belongs to tensors[i]); saves a pass
/// over the data when the caller hashed while scanning. Throws std::invalid_argument on a size mismatch.
uint64_t root_hash(const std::vector<TensorView>& tensors, const std::vector<uint64_t>& tensor_hashes);

/// 16 lowercase hex digits.
std::string hash_hex(uint64_t hash);

}  // namespace pulse::sync

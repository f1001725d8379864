// Content hashes that prove a worker's weights equal the trainer's (xxh3, libxxhash).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sync/tensor_view.h"

namespace pulse::sync {

/// XXH3-64 (seed 0) of n bytes, on the fastest SIMD path of this CPU (libxxhash's run-time dispatch
/// to AVX2/AVX-512 on x86-64: ~2x the SSE2 baseline; the value is the same on every path).
uint64_t xxh3_64(const void* data, size_t n);

/// Streaming XXH3-64 (seed 0) on the same fast path: update() any number of times, then digest().
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

/// XXH3-64 of the tensor's bytes (dtype/shape not included).
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

// The tensor hash of PULSESync format version 3 (sync/FORMAT.md, "Hashes"): XXH3-64 of fixed 64 KiB
// chunks (the leaves), combined by one XXH3-64 over the leaves. Why a tree: XXH3 over a whole tensor is one
// sequential chain of 1 KiB blocks, so a GPU hashed a 40 MB tensor at ~1% of its copy bandwidth; the chunks
// are independent (one CUDA block each, kernels/tree_hash_cuda.h), and the combine reads 8 bytes per
// 64 KiB. On the CPU the value costs what XXH3 of the whole input costs (every chunk through the same SIMD
// block loop, the per-chunk finish vectorized too), and a tensor's chunks can be hashed by any thread.
//
// Definition, for a len-byte input:
//   chunks  = ceil(len / 65536); chunk c = bytes [65536 c, min(len, 65536 (c + 1)))
//   leaf_c  = XXH3_64bits(chunk c) (seed 0)
//   hash    = XXH3_64bits(empty input)                       if len == 0
//             leaf_0                                         if len <= 65536 (one chunk)
//             XXH3_64bits(leaf_0 .. leaf_{chunks-1} as u64 little-endian, 8 chunks bytes) otherwise
// A tensor of at most 64 KiB therefore hashes as before (format versions 1 and 2: XXH3 of its bytes).
// Torch-free; needs a little-endian host (as the codec does).
#pragma once
#include <cstddef>
#include <cstdint>

namespace pulse::kernels {

/// Bytes per leaf of the tree hash (a multiple of the encoder's and the apply pass's 64 KiB blocks, so
/// they hash a chunk while it is in cache).
constexpr uint64_t kTreeHashChunkBytes = uint64_t{64} << 10;

/// Leaves of a len-byte input.
constexpr uint64_t tree_hash_chunks(uint64_t len) {
  return (len + kTreeHashChunkBytes - 1) / kTreeHashChunkBytes;
}

/// Bytes of chunk c of a len-byte input (c < tree_hash_chunks(len)).
constexpr uint64_t tree_hash_chunk_len(uint64_t len, uint64_t c) {
  return len - c * kTreeHashChunkBytes < kTreeHashChunkBytes ? len - c * kTreeHashChunkBytes
                                                             : kTreeHashChunkBytes;
}

/// The hash from its `count` leaves (count == tree_hash_chunks(len); 0 for an empty input). Reentrant.
uint64_t tree_hash_combine(const uint64_t* leaves, uint64_t count);

/// The tree hash of data[0, len) (data may be null when len is 0) on this thread, every chunk through
/// kernels::xxh3_64bits (the CPU's fastest XXH3 variant). Reentrant; allocates only past 64 chunks.
uint64_t tree_hash64(const void* data, uint64_t len);

}  // namespace pulse::kernels
